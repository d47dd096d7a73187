//! `multimem.ld_reduce`, `multimem.st` and `multimem.red`: loads that reduce over every copy of
//! an NVLink multicast address, stores to every copy, and reductions into every copy.
//!
//! Every wrapper takes a [`MultimemPtr`], the only pointer type that comes from a multicast
//! mapping: `multimem.*` on a unicast address (or `ld`/`st` on a multicast one) is undefined.
//! All forms use the `.global` state space and `.sys` scope.
//!
//! What is here, checked with ptxas 13.5 at sm_90 / PTX ISA 8.6:
//!
//! * `.relaxed.sys` forms: every one ptxas accepts. `ld_reduce`: 57 plain forms plus 12 with
//!   `.acc::f32` (f16/bf16 lanes accumulated in f32, PTX 8.2); `st`: 22; `red`: 53.
//! * ordering variants for protocols: `ld_reduce.acquire.sys` (add on u32, s32, u64, f32 x1/x2/x4),
//!   `st.release.sys` (u32, s32, u64, s64, f32 x1/x2/x4, f64) and `red.release.sys` (add on u32,
//!   s32, u64, f32 x1/x2/x4; `add.u64` is the switch barrier's arrival).
//! * with feature `sm100a` (kernel crate built for `sm_100a`): fp8 `ld_reduce` add / min / max and
//!   add with `.acc::f16` on `e4m3x4` / `e5m2x4` as x1 / v2 / v4 (4, 8, 16 values), and `st` of the
//!   same six operands. `red` has no fp8 forms.
//!
//! Left out on purpose: the `.weak` and `.cta`/`.gpu`/`.cluster` forms (a multicast address only
//! makes sense at `.sys` scope for the protocols here); `.acc::f32`/`.acc::f16` on `red`, which
//! ptxas 13.5 accepts silently although the ISA defines no precision qualifier for `red`; at
//! sm_100a the fp8 spellings `.v4/.v8.e4m3`, `.v2/.v4/.v8.e4m3x2` (and e5m2), which cover the
//! same widths as the `x4` packs above (the scalar ones need 8-bit registers Rust's `asm!` lacks).
//!
//! Operands: scalars travel in one register of their own type; vector values (see
//! [`crate::vec`]) are split into 32-bit words (`.f16x2`, `.v2.f32`, `.v4.bf16x2`, fp8 `x4`
//! packs) or into 16-bit halves for the `.v2/.v4/.v8.f16` and `.bf16` forms.
//!
//! Ordering: the `.relaxed` forms order nothing by themselves. An `.acquire` load pairs with a
//! `.release` store/reduction (or a release fence before a relaxed one) by another thread at
//! `.sys` scope; the partner of each use is named where it is used (`crate::semaphore::SwitchSemaphore`).

use super::asm;

#[allow(unused_imports)]
use crate::ptr::MultimemPtr;
#[allow(unused_imports)]
use crate::vec::*;

/// The operand text of a shape in the docs.
macro_rules! operand_text {
    (x1 $reg:ident) => {
        "d"
    };
    (w1) => {
        "d"
    };
    (w2) => {
        "{d0, d1}"
    };
    (w4) => {
        "{d0, d1, d2, d3}"
    };
    (h2) => {
        "{h0, h1}"
    };
    (h4) => {
        "{h0, h1, h2, h3}"
    };
    (h8) => {
        "{h0, h1, h2, h3, h4, h5, h6, h7}"
    };
}

/// One load that returns a value of type `$t`, its operand shaped as `$shape`.
macro_rules! load_shaped {
    ($ptx:expr, $p:expr, $t:ty, x1 $reg:ident) => {{
        let d: $t;
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe { asm!(concat!($ptx, " {d}, [{p}];"), d = out($reg) d, p = in(reg64) $p, options(nostack)) };
        d
    }};
    ($ptx:expr, $p:expr, $t:ty, w1) => {{
        let d: u32;
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe { asm!(concat!($ptx, " {d}, [{p}];"), d = out(reg32) d, p = in(reg64) $p, options(nostack)) };
        bytemuck::cast::<u32, $t>(d)
    }};
    ($ptx:expr, $p:expr, $t:ty, w2) => {{
        let (d0, d1): (u32, u32);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " {{{d0}, {d1}}}, [{p}];"),
                d0 = out(reg32) d0, d1 = out(reg32) d1, p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u32; 2], $t>([d0, d1])
    }};
    ($ptx:expr, $p:expr, $t:ty, w4) => {{
        let (d0, d1, d2, d3): (u32, u32, u32, u32);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " {{{d0}, {d1}, {d2}, {d3}}}, [{p}];"),
                d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u32; 4], $t>([d0, d1, d2, d3])
    }};
    ($ptx:expr, $p:expr, $t:ty, h2) => {{
        let (h0, h1): (u16, u16);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " {{{h0}, {h1}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 2], $t>([h0, h1])
    }};
    ($ptx:expr, $p:expr, $t:ty, h4) => {{
        let (h0, h1, h2, h3): (u16, u16, u16, u16);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " {{{h0}, {h1}, {h2}, {h3}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, h2 = out(reg16) h2, h3 = out(reg16) h3,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 4], $t>([h0, h1, h2, h3])
    }};
    ($ptx:expr, $p:expr, $t:ty, h8) => {{
        let (h0, h1, h2, h3, h4, h5, h6, h7): (u16, u16, u16, u16, u16, u16, u16, u16);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " {{{h0}, {h1}, {h2}, {h3}, {h4}, {h5}, {h6}, {h7}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, h2 = out(reg16) h2, h3 = out(reg16) h3,
                h4 = out(reg16) h4, h5 = out(reg16) h5, h6 = out(reg16) h6, h7 = out(reg16) h7,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 8], $t>([h0, h1, h2, h3, h4, h5, h6, h7])
    }};
}

/// One store or reduction of the value `$v: $t` with its operand shaped as `$shape`.
macro_rules! store_shaped {
    ($ptx:expr, $p:expr, $v:expr, $t:ty, x1 $reg:ident) => {{
        let v: $t = $v;
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe { asm!(concat!($ptx, " [{p}], {v};"), p = in(reg64) $p, v = in($reg) v, options(nostack)) };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, w1) => {{
        let v = bytemuck::cast::<$t, u32>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe { asm!(concat!($ptx, " [{p}], {v};"), p = in(reg64) $p, v = in(reg32) v, options(nostack)) };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, w2) => {{
        let [d0, d1] = bytemuck::cast::<$t, [u32; 2]>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " [{p}], {{{d0}, {d1}}};"),
                p = in(reg64) $p, d0 = in(reg32) d0, d1 = in(reg32) d1, options(nostack))
        };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, w4) => {{
        let [d0, d1, d2, d3] = bytemuck::cast::<$t, [u32; 4]>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " [{p}], {{{d0}, {d1}, {d2}, {d3}}};"),
                p = in(reg64) $p, d0 = in(reg32) d0, d1 = in(reg32) d1, d2 = in(reg32) d2, d3 = in(reg32) d3,
                options(nostack))
        };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, h2) => {{
        let [h0, h1] = bytemuck::cast::<$t, [u16; 2]>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " [{p}], {{{h0}, {h1}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, options(nostack))
        };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, h4) => {{
        let [h0, h1, h2, h3] = bytemuck::cast::<$t, [u16; 4]>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " [{p}], {{{h0}, {h1}, {h2}, {h3}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, h2 = in(reg16) h2, h3 = in(reg16) h3,
                options(nostack))
        };
    }};
    ($ptx:expr, $p:expr, $v:expr, $t:ty, h8) => {{
        let [h0, h1, h2, h3, h4, h5, h6, h7] = bytemuck::cast::<$t, [u16; 8]>($v);
        // SAFETY: the caller of the wrapper guarantees the multicast address (see its docs).
        unsafe {
            asm!(concat!($ptx, " [{p}], {{{h0}, {h1}, {h2}, {h3}, {h4}, {h5}, {h6}, {h7}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, h2 = in(reg16) h2, h3 = in(reg16) h3,
                h4 = in(reg16) h4, h5 = in(reg16) h5, h6 = in(reg16) h6, h7 = in(reg16) h7, options(nostack))
        };
    }};
}

/// `multimem.ld_reduce` wrappers: `prefix` is the instruction up to the operation, each row
/// names the wrapper, its value type and operand shape, and the operation + type suffix.
macro_rules! ld_reduce {
    (prefix = $prefix:literal, isa = $isa:literal;
     $( pub unsafe fn $name:ident($t:ty: $($shape:ident)+) = $suffix:literal; )*) => { $(
        #[doc = concat!("`", $prefix, ".", $suffix, " ", operand_text!($($shape)+), ", [a];` (", $isa, ")")]
        ///
        /// Loads the value at `ptr` from every device of the multicast group and returns the
        /// reduction of all copies.
        ///
        /// # Safety
        /// `ptr` must lie inside a multicast mapping of this device whose every member has memory
        /// bound, be aligned to the size of the value, and the value's bytes must stay inside
        /// the mapping.
        #[inline(always)]
        pub unsafe fn $name(ptr: MultimemPtr<$t>) -> $t {
            load_shaped!(concat!($prefix, ".", $suffix), ptr.as_ptr(), $t, $($shape)+)
        }
    )* };
}

/// `multimem.st` and `multimem.red` wrappers (value operand after the address).
macro_rules! store_like {
    (prefix = $prefix:literal, isa = $isa:literal, what = $what:literal;
     $( pub unsafe fn $name:ident($t:ty: $($shape:ident)+) = $suffix:literal; )*) => { $(
        #[doc = concat!("`", $prefix, ".", $suffix, " [a], ", operand_text!($($shape)+), ";` (", $isa, ")")]
        ///
        #[doc = $what]
        ///
        /// # Safety
        /// `ptr` must lie inside a multicast mapping of this device whose every member has memory
        /// bound, be aligned to the size of the value, and the value's bytes must stay inside
        /// the mapping.
        #[inline(always)]
        pub unsafe fn $name(ptr: MultimemPtr<$t>, value: $t) {
            store_shaped!(concat!($prefix, ".", $suffix), ptr.as_ptr(), value, $t, $($shape)+)
        }
    )* };
}

ld_reduce! {
    prefix = "multimem.ld_reduce.relaxed.sys.global", isa = "PTX 8.1, sm_90";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_u32(u32: x1 reg32) = "add.u32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_s32(i32: x1 reg32) = "add.s32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_u64(u64: x1 reg64) = "add.u64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f32(f32: x1 reg32) = "add.f32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f32(F32x2: w2) = "add.v2.f32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f32(F32x4: w4) = "add.v4.f32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f64(f64: x1 reg64) = "add.f64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f16x2(F16x2: w1) = "add.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f16x2(F16x4: w2) = "add.v2.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f16x2(F16x8: w4) = "add.v4.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f16(F16x2: h2) = "add.v2.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f16(F16x4: h4) = "add.v4.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v8_f16(F16x8: h8) = "add.v8.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_bf16x2(Bf16x2: w1) = "add.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_bf16x2(Bf16x4: w2) = "add.v2.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_bf16x2(Bf16x8: w4) = "add.v4.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_bf16(Bf16x2: h2) = "add.v2.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_bf16(Bf16x4: h4) = "add.v4.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v8_bf16(Bf16x8: h8) = "add.v8.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_u32(u32: x1 reg32) = "min.u32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_s32(i32: x1 reg32) = "min.s32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_u64(u64: x1 reg64) = "min.u64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_s64(i64: x1 reg64) = "min.s64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_f16x2(F16x2: w1) = "min.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_f16x2(F16x4: w2) = "min.v2.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_f16x2(F16x8: w4) = "min.v4.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_f16(F16x2: h2) = "min.v2.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_f16(F16x4: h4) = "min.v4.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v8_f16(F16x8: h8) = "min.v8.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_bf16x2(Bf16x2: w1) = "min.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_bf16x2(Bf16x4: w2) = "min.v2.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_bf16x2(Bf16x8: w4) = "min.v4.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_bf16(Bf16x2: h2) = "min.v2.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_bf16(Bf16x4: h4) = "min.v4.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v8_bf16(Bf16x8: h8) = "min.v8.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_u32(u32: x1 reg32) = "max.u32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_s32(i32: x1 reg32) = "max.s32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_u64(u64: x1 reg64) = "max.u64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_s64(i64: x1 reg64) = "max.s64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_f16x2(F16x2: w1) = "max.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_f16x2(F16x4: w2) = "max.v2.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_f16x2(F16x8: w4) = "max.v4.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_f16(F16x2: h2) = "max.v2.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_f16(F16x4: h4) = "max.v4.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v8_f16(F16x8: h8) = "max.v8.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_bf16x2(Bf16x2: w1) = "max.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_bf16x2(Bf16x4: w2) = "max.v2.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_bf16x2(Bf16x8: w4) = "max.v4.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_bf16(Bf16x2: h2) = "max.v2.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_bf16(Bf16x4: h4) = "max.v4.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v8_bf16(Bf16x8: h8) = "max.v8.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_and_b32(u32: x1 reg32) = "and.b32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_and_b64(u64: x1 reg64) = "and.b64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_or_b32(u32: x1 reg32) = "or.b32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_or_b64(u64: x1 reg64) = "or.b64";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_xor_b32(u32: x1 reg32) = "xor.b32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_xor_b64(u64: x1 reg64) = "xor.b64";
}

ld_reduce! {
    prefix = "multimem.ld_reduce.relaxed.sys.global", isa = "PTX 8.2, sm_90; f16/bf16 lanes accumulate in f32";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2(F16x2: w1) = "add.acc::f32.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2(F16x4: w2) = "add.acc::f32.v2.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2(F16x8: w4) = "add.acc::f32.v4.f16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16(F16x2: h2) = "add.acc::f32.v2.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16(F16x4: h4) = "add.acc::f32.v4.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_f16(F16x8: h8) = "add.acc::f32.v8.f16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2(Bf16x2: w1) = "add.acc::f32.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2(Bf16x4: w2) = "add.acc::f32.v2.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2(Bf16x8: w4) = "add.acc::f32.v4.bf16x2";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16(Bf16x2: h2) = "add.acc::f32.v2.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16(Bf16x4: h4) = "add.acc::f32.v4.bf16";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_bf16(Bf16x8: h8) = "add.acc::f32.v8.bf16";
}

// Acquire loads: each pairs with a `.release` store or reduction at `.sys` scope by the thread
// whose writes the caller then reads (see `crate::semaphore::SwitchSemaphore` for the protocol that uses them).
ld_reduce! {
    prefix = "multimem.ld_reduce.acquire.sys.global", isa = "PTX 8.1, sm_90";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_u32(u32: x1 reg32) = "add.u32";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_s32(i32: x1 reg32) = "add.s32";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_u64(u64: x1 reg64) = "add.u64";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_f32(f32: x1 reg32) = "add.f32";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_v2_f32(F32x2: w2) = "add.v2.f32";
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_v4_f32(F32x4: w4) = "add.v4.f32";
}

store_like! {
    prefix = "multimem.st.relaxed.sys.global", isa = "PTX 8.1, sm_90",
    what = "Stores `value` at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_st_relaxed_sys_u32(u32: x1 reg32) = "u32";
    pub unsafe fn multimem_st_relaxed_sys_s32(i32: x1 reg32) = "s32";
    pub unsafe fn multimem_st_relaxed_sys_u64(u64: x1 reg64) = "u64";
    pub unsafe fn multimem_st_relaxed_sys_s64(i64: x1 reg64) = "s64";
    pub unsafe fn multimem_st_relaxed_sys_b32(u32: x1 reg32) = "b32";
    pub unsafe fn multimem_st_relaxed_sys_b64(u64: x1 reg64) = "b64";
    pub unsafe fn multimem_st_relaxed_sys_f32(f32: x1 reg32) = "f32";
    pub unsafe fn multimem_st_relaxed_sys_v2_f32(F32x2: w2) = "v2.f32";
    pub unsafe fn multimem_st_relaxed_sys_v4_f32(F32x4: w4) = "v4.f32";
    pub unsafe fn multimem_st_relaxed_sys_f64(f64: x1 reg64) = "f64";
    pub unsafe fn multimem_st_relaxed_sys_f16x2(F16x2: w1) = "f16x2";
    pub unsafe fn multimem_st_relaxed_sys_v2_f16x2(F16x4: w2) = "v2.f16x2";
    pub unsafe fn multimem_st_relaxed_sys_v4_f16x2(F16x8: w4) = "v4.f16x2";
    pub unsafe fn multimem_st_relaxed_sys_v2_f16(F16x2: h2) = "v2.f16";
    pub unsafe fn multimem_st_relaxed_sys_v4_f16(F16x4: h4) = "v4.f16";
    pub unsafe fn multimem_st_relaxed_sys_v8_f16(F16x8: h8) = "v8.f16";
    pub unsafe fn multimem_st_relaxed_sys_bf16x2(Bf16x2: w1) = "bf16x2";
    pub unsafe fn multimem_st_relaxed_sys_v2_bf16x2(Bf16x4: w2) = "v2.bf16x2";
    pub unsafe fn multimem_st_relaxed_sys_v4_bf16x2(Bf16x8: w4) = "v4.bf16x2";
    pub unsafe fn multimem_st_relaxed_sys_v2_bf16(Bf16x2: h2) = "v2.bf16";
    pub unsafe fn multimem_st_relaxed_sys_v4_bf16(Bf16x4: h4) = "v4.bf16";
    pub unsafe fn multimem_st_relaxed_sys_v8_bf16(Bf16x8: h8) = "v8.bf16";
}

// Release stores: make every earlier write of this thread visible to a thread that observes the
// stored value with an `.acquire` load at `.sys` scope (their partner).
store_like! {
    prefix = "multimem.st.release.sys.global", isa = "PTX 8.1, sm_90",
    what = "Stores `value` at `ptr` on every device of the multicast group, with release semantics.";
    pub unsafe fn multimem_st_release_sys_u32(u32: x1 reg32) = "u32";
    pub unsafe fn multimem_st_release_sys_s32(i32: x1 reg32) = "s32";
    pub unsafe fn multimem_st_release_sys_u64(u64: x1 reg64) = "u64";
    pub unsafe fn multimem_st_release_sys_s64(i64: x1 reg64) = "s64";
    pub unsafe fn multimem_st_release_sys_f32(f32: x1 reg32) = "f32";
    pub unsafe fn multimem_st_release_sys_v2_f32(F32x2: w2) = "v2.f32";
    pub unsafe fn multimem_st_release_sys_v4_f32(F32x4: w4) = "v4.f32";
    pub unsafe fn multimem_st_release_sys_f64(f64: x1 reg64) = "f64";
}

store_like! {
    prefix = "multimem.red.relaxed.sys.global", isa = "PTX 8.1, sm_90",
    what = "Reduces `value` into the value at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_red_relaxed_sys_add_u32(u32: x1 reg32) = "add.u32";
    pub unsafe fn multimem_red_relaxed_sys_add_s32(i32: x1 reg32) = "add.s32";
    pub unsafe fn multimem_red_relaxed_sys_add_u64(u64: x1 reg64) = "add.u64";
    pub unsafe fn multimem_red_relaxed_sys_add_f32(f32: x1 reg32) = "add.f32";
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f32(F32x2: w2) = "add.v2.f32";
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f32(F32x4: w4) = "add.v4.f32";
    pub unsafe fn multimem_red_relaxed_sys_add_f64(f64: x1 reg64) = "add.f64";
    pub unsafe fn multimem_red_relaxed_sys_add_f16x2(F16x2: w1) = "add.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f16x2(F16x4: w2) = "add.v2.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f16x2(F16x8: w4) = "add.v4.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f16(F16x2: h2) = "add.v2.f16";
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f16(F16x4: h4) = "add.v4.f16";
    pub unsafe fn multimem_red_relaxed_sys_add_v8_f16(F16x8: h8) = "add.v8.f16";
    pub unsafe fn multimem_red_relaxed_sys_add_bf16x2(Bf16x2: w1) = "add.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v2_bf16x2(Bf16x4: w2) = "add.v2.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v4_bf16x2(Bf16x8: w4) = "add.v4.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_add_v2_bf16(Bf16x2: h2) = "add.v2.bf16";
    pub unsafe fn multimem_red_relaxed_sys_add_v4_bf16(Bf16x4: h4) = "add.v4.bf16";
    pub unsafe fn multimem_red_relaxed_sys_add_v8_bf16(Bf16x8: h8) = "add.v8.bf16";
    pub unsafe fn multimem_red_relaxed_sys_min_u32(u32: x1 reg32) = "min.u32";
    pub unsafe fn multimem_red_relaxed_sys_min_s32(i32: x1 reg32) = "min.s32";
    pub unsafe fn multimem_red_relaxed_sys_min_u64(u64: x1 reg64) = "min.u64";
    pub unsafe fn multimem_red_relaxed_sys_min_s64(i64: x1 reg64) = "min.s64";
    pub unsafe fn multimem_red_relaxed_sys_min_v2_f16x2(F16x4: w2) = "min.v2.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_min_v4_f16x2(F16x8: w4) = "min.v4.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_min_v2_f16(F16x2: h2) = "min.v2.f16";
    pub unsafe fn multimem_red_relaxed_sys_min_v4_f16(F16x4: h4) = "min.v4.f16";
    pub unsafe fn multimem_red_relaxed_sys_min_v8_f16(F16x8: h8) = "min.v8.f16";
    pub unsafe fn multimem_red_relaxed_sys_min_v2_bf16x2(Bf16x4: w2) = "min.v2.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_min_v4_bf16x2(Bf16x8: w4) = "min.v4.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_min_v2_bf16(Bf16x2: h2) = "min.v2.bf16";
    pub unsafe fn multimem_red_relaxed_sys_min_v4_bf16(Bf16x4: h4) = "min.v4.bf16";
    pub unsafe fn multimem_red_relaxed_sys_min_v8_bf16(Bf16x8: h8) = "min.v8.bf16";
    pub unsafe fn multimem_red_relaxed_sys_max_u32(u32: x1 reg32) = "max.u32";
    pub unsafe fn multimem_red_relaxed_sys_max_s32(i32: x1 reg32) = "max.s32";
    pub unsafe fn multimem_red_relaxed_sys_max_u64(u64: x1 reg64) = "max.u64";
    pub unsafe fn multimem_red_relaxed_sys_max_s64(i64: x1 reg64) = "max.s64";
    pub unsafe fn multimem_red_relaxed_sys_max_v2_f16x2(F16x4: w2) = "max.v2.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_max_v4_f16x2(F16x8: w4) = "max.v4.f16x2";
    pub unsafe fn multimem_red_relaxed_sys_max_v2_f16(F16x2: h2) = "max.v2.f16";
    pub unsafe fn multimem_red_relaxed_sys_max_v4_f16(F16x4: h4) = "max.v4.f16";
    pub unsafe fn multimem_red_relaxed_sys_max_v8_f16(F16x8: h8) = "max.v8.f16";
    pub unsafe fn multimem_red_relaxed_sys_max_v2_bf16x2(Bf16x4: w2) = "max.v2.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_max_v4_bf16x2(Bf16x8: w4) = "max.v4.bf16x2";
    pub unsafe fn multimem_red_relaxed_sys_max_v2_bf16(Bf16x2: h2) = "max.v2.bf16";
    pub unsafe fn multimem_red_relaxed_sys_max_v4_bf16(Bf16x4: h4) = "max.v4.bf16";
    pub unsafe fn multimem_red_relaxed_sys_max_v8_bf16(Bf16x8: h8) = "max.v8.bf16";
    pub unsafe fn multimem_red_relaxed_sys_and_b32(u32: x1 reg32) = "and.b32";
    pub unsafe fn multimem_red_relaxed_sys_and_b64(u64: x1 reg64) = "and.b64";
    pub unsafe fn multimem_red_relaxed_sys_or_b32(u32: x1 reg32) = "or.b32";
    pub unsafe fn multimem_red_relaxed_sys_or_b64(u64: x1 reg64) = "or.b64";
    pub unsafe fn multimem_red_relaxed_sys_xor_b32(u32: x1 reg32) = "xor.b32";
    pub unsafe fn multimem_red_relaxed_sys_xor_b64(u64: x1 reg64) = "xor.b64";
}

// Release reductions: the partner is an `.acquire` load (unicast `ld.acquire.sys` on a member's
// own copy, or `multimem.ld_reduce.acquire`) that observes the result.
store_like! {
    prefix = "multimem.red.release.sys.global", isa = "PTX 8.1, sm_90",
    what = "Reduces `value` into the value at `ptr` on every device of the multicast group, with release semantics.";
    pub unsafe fn multimem_red_release_sys_add_u32(u32: x1 reg32) = "add.u32";
    pub unsafe fn multimem_red_release_sys_add_s32(i32: x1 reg32) = "add.s32";
    pub unsafe fn multimem_red_release_sys_add_u64(u64: x1 reg64) = "add.u64";
    pub unsafe fn multimem_red_release_sys_add_f32(f32: x1 reg32) = "add.f32";
    pub unsafe fn multimem_red_release_sys_add_v2_f32(F32x2: w2) = "add.v2.f32";
    pub unsafe fn multimem_red_release_sys_add_v4_f32(F32x4: w4) = "add.v4.f32";
}

#[cfg(feature = "sm100a")]
ld_reduce! {
    prefix = "multimem.ld_reduce.relaxed.sys.global", isa = "PTX 8.6, sm_100a";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_e4m3x4(E4m3x4: w1) = "add.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4(E4m3x4: w1) = "add.acc::f16.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4(E4m3x8: w2) = "add.v2.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4(E4m3x8: w2) = "add.acc::f16.v2.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4(E4m3x16: w4) = "add.v4.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4(E4m3x16: w4) = "add.acc::f16.v4.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_e5m2x4(E5m2x4: w1) = "add.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4(E5m2x4: w1) = "add.acc::f16.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4(E5m2x8: w2) = "add.v2.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4(E5m2x8: w2) = "add.acc::f16.v2.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4(E5m2x16: w4) = "add.v4.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4(E5m2x16: w4) = "add.acc::f16.v4.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_e4m3x4(E4m3x4: w1) = "min.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4(E4m3x8: w2) = "min.v2.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4(E4m3x16: w4) = "min.v4.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_e5m2x4(E5m2x4: w1) = "min.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4(E5m2x8: w2) = "min.v2.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4(E5m2x16: w4) = "min.v4.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_e4m3x4(E4m3x4: w1) = "max.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4(E4m3x8: w2) = "max.v2.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4(E4m3x16: w4) = "max.v4.e4m3x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_e5m2x4(E5m2x4: w1) = "max.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4(E5m2x8: w2) = "max.v2.e5m2x4";
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4(E5m2x16: w4) = "max.v4.e5m2x4";
}

#[cfg(feature = "sm100a")]
store_like! {
    prefix = "multimem.st.relaxed.sys.global", isa = "PTX 8.6, sm_100a",
    what = "Stores `value` at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_st_relaxed_sys_e4m3x4(E4m3x4: w1) = "e4m3x4";
    pub unsafe fn multimem_st_relaxed_sys_v2_e4m3x4(E4m3x8: w2) = "v2.e4m3x4";
    pub unsafe fn multimem_st_relaxed_sys_v4_e4m3x4(E4m3x16: w4) = "v4.e4m3x4";
    pub unsafe fn multimem_st_relaxed_sys_e5m2x4(E5m2x4: w1) = "e5m2x4";
    pub unsafe fn multimem_st_relaxed_sys_v2_e5m2x4(E5m2x8: w2) = "v2.e5m2x4";
    pub unsafe fn multimem_st_relaxed_sys_v4_e5m2x4(E5m2x16: w4) = "v4.e5m2x4";
}
