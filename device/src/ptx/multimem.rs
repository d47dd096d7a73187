//! `multimem.ld_reduce`, `multimem.st` and `multimem.red`: loads that reduce over every copy of
//! an NVLink multicast address, stores to every copy, and reductions into every copy.
//!
//! Every wrapper takes a [`MultimemPtr`](crate::ptr::MultimemPtr), the only pointer type that comes from a multicast
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

#[allow(unused_imports)]
#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;
#[allow(unused_imports)]
#[cfg(any(target_arch = "nvptx64", doc))]
use crate::vec::*;

ld_reduce! {
    table = LD_REDUCE_RELAXED, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all());
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_u32(u32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.add.u32",
        sass ["LDGMC.E.ADD.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_s32(i32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.add.s32",
        sass ["LDGMC.E.ADD.S32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_u64(u64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.add.u64",
        sass ["LDGMC.E.ADD.64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f32(f32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.add.f32",
        sass ["LDGMC.E.ADD.F32.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f32(F32x2: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.f32",
        sass ["LDGMC.E.ADD.F32x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f32(F32x4: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.f32",
        sass ["LDGMC.E.ADD.F32x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f64(f64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.add.f64",
        sass ["LDGMC.E.ADD.F64.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_f16x2(F16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.f16x2",
        sass ["LDGMC.E.ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f16x2(F16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.f16x2",
        sass ["LDGMC.E.ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f16x2(F16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.f16x2",
        sass ["LDGMC.E.ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_f16(F16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.f16",
        sass ["LDGMC.E.ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_f16(F16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.f16",
        sass ["LDGMC.E.ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v8_f16(F16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.add.v8.f16",
        sass ["LDGMC.E.ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_bf16x2(Bf16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.bf16x2",
        sass ["LDGMC.E.ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_bf16x2(Bf16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.bf16x2",
        sass ["LDGMC.E.ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_bf16x2(Bf16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2",
        sass ["LDGMC.E.ADD.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_bf16(Bf16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.bf16",
        sass ["LDGMC.E.ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_bf16(Bf16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.bf16",
        sass ["LDGMC.E.ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v8_bf16(Bf16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.add.v8.bf16",
        sass ["LDGMC.E.ADD.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_u32(u32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.min.u32",
        sass ["LDGMC.E.MIN.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_s32(i32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.min.s32",
        sass ["LDGMC.E.MIN.S32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_u64(u64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.min.u64",
        sass ["LDGMC.E.MIN.64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_s64(i64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.min.s64",
        sass ["LDGMC.E.MIN.S64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_f16x2(F16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.min.f16x2",
        sass ["LDGMC.E.MIN.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_f16x2(F16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.f16x2",
        sass ["LDGMC.E.MIN.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_f16x2(F16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.f16x2",
        sass ["LDGMC.E.MIN.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_f16(F16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.f16",
        sass ["LDGMC.E.MIN.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_f16(F16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.f16",
        sass ["LDGMC.E.MIN.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v8_f16(F16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.min.v8.f16",
        sass ["LDGMC.E.MIN.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_bf16x2(Bf16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.min.bf16x2",
        sass ["LDGMC.E.MIN.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_bf16x2(Bf16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.bf16x2",
        sass ["LDGMC.E.MIN.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_bf16x2(Bf16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.bf16x2",
        sass ["LDGMC.E.MIN.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_bf16(Bf16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.bf16",
        sass ["LDGMC.E.MIN.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_bf16(Bf16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.bf16",
        sass ["LDGMC.E.MIN.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v8_bf16(Bf16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.min.v8.bf16",
        sass ["LDGMC.E.MIN.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_u32(u32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.max.u32",
        sass ["LDGMC.E.MAX.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_s32(i32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.max.s32",
        sass ["LDGMC.E.MAX.S32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_u64(u64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.max.u64",
        sass ["LDGMC.E.MAX.64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_s64(i64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.max.s64",
        sass ["LDGMC.E.MAX.S64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_f16x2(F16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.max.f16x2",
        sass ["LDGMC.E.MAX.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_f16x2(F16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.f16x2",
        sass ["LDGMC.E.MAX.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_f16x2(F16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2",
        sass ["LDGMC.E.MAX.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_f16(F16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.f16",
        sass ["LDGMC.E.MAX.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_f16(F16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.f16",
        sass ["LDGMC.E.MAX.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v8_f16(F16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.max.v8.f16",
        sass ["LDGMC.E.MAX.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_bf16x2(Bf16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.max.bf16x2",
        sass ["LDGMC.E.MAX.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_bf16x2(Bf16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.bf16x2",
        sass ["LDGMC.E.MAX.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_bf16x2(Bf16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.bf16x2",
        sass ["LDGMC.E.MAX.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_bf16(Bf16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.bf16",
        sass ["LDGMC.E.MAX.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_bf16(Bf16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.bf16",
        sass ["LDGMC.E.MAX.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v8_bf16(Bf16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.max.v8.bf16",
        sass ["LDGMC.E.MAX.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_and_b32(u32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.and.b32",
        sass ["LDGMC.E.AND.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_and_b64(u64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.and.b64",
        sass ["LDGMC.E.AND.64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_or_b32(u32: x1 reg32) = "multimem.ld_reduce.relaxed.sys.global.or.b32",
        sass ["LDGMC.E.OR.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_or_b64(u64: x1 reg64) = "multimem.ld_reduce.relaxed.sys.global.or.b64",
        sass ["LDGMC.E.OR.64.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_xor_b32(u32: x1 reg32) =
        "multimem.ld_reduce.relaxed.sys.global.xor.b32",
        sass ["LDGMC.E.XOR.32.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_xor_b64(u64: x1 reg64) =
        "multimem.ld_reduce.relaxed.sys.global.xor.b64",
        sass ["LDGMC.E.XOR.64.STRONG.SYS"];
}

ld_reduce! {
    table = LD_REDUCE_ACC_F32, target = "sm_90", isa = "PTX 8.2, sm_90; f16/bf16 lanes accumulate in f32",
    gate = (all());
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2(F16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.f16x2",
        sass ["LDGMC.E.F32ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2(F16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.f16x2",
        sass ["LDGMC.E.F32ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2(F16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2",
        sass ["LDGMC.E.F32ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16(F16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.f16",
        sass ["LDGMC.E.F32ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16(F16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16",
        sass ["LDGMC.E.F32ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_f16(F16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v8.f16",
        sass ["LDGMC.E.F32ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2(Bf16x2: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2",
        sass ["LDGMC.E.F32ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2(Bf16x4: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.bf16x2",
        sass ["LDGMC.E.F32ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2(Bf16x8: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2",
        sass ["LDGMC.E.F32ADD.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16(Bf16x2: h2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.bf16",
        sass ["LDGMC.E.F32ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16(Bf16x4: h4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16",
        sass ["LDGMC.E.F32ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_bf16(Bf16x8: h8) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v8.bf16",
        sass ["LDGMC.E.F32ADD.BF16x8.RN.STRONG.SYS"];
}

// Acquire loads: each pairs with a `.release` store or reduction at `.sys` scope by the thread
// whose writes the caller then reads (see `crate::semaphore::SwitchSemaphore` for the protocol that uses them).
ld_reduce! {
    table = LD_REDUCE_ACQUIRE, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all());
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_u32(u32: x1 reg32) =
        "multimem.ld_reduce.acquire.sys.global.add.u32",
        sass ["LDGMC.E.ADD.32.STRONG.SYS", "CCTL.IVALL"];
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_s32(i32: x1 reg32) =
        "multimem.ld_reduce.acquire.sys.global.add.s32",
        sass ["LDGMC.E.ADD.S32.STRONG.SYS", "CCTL.IVALL"];
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_u64(u64: x1 reg64) =
        "multimem.ld_reduce.acquire.sys.global.add.u64",
        sass ["LDGMC.E.ADD.64.STRONG.SYS", "CCTL.IVALL"];
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_f32(f32: x1 reg32) =
        "multimem.ld_reduce.acquire.sys.global.add.f32",
        sass ["LDGMC.E.ADD.F32.RN.STRONG.SYS", "CCTL.IVALL"];
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_v2_f32(F32x2: w2) =
        "multimem.ld_reduce.acquire.sys.global.add.v2.f32",
        sass ["LDGMC.E.ADD.F32x2.RN.STRONG.SYS", "CCTL.IVALL"];
    pub unsafe fn multimem_ld_reduce_acquire_sys_add_v4_f32(F32x4: w4) =
        "multimem.ld_reduce.acquire.sys.global.add.v4.f32",
        sass ["LDGMC.E.ADD.F32x4.RN.STRONG.SYS", "CCTL.IVALL"];
}

multimem_store! {
    table = ST_RELAXED, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all()),
    effect = "Stores `value` at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_st_relaxed_sys_u32(u32: x1 reg32) = "multimem.st.relaxed.sys.global.u32",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_s32(i32: x1 reg32) = "multimem.st.relaxed.sys.global.s32",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_u64(u64: x1 reg64) = "multimem.st.relaxed.sys.global.u64",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_s64(i64: x1 reg64) = "multimem.st.relaxed.sys.global.s64",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_b32(u32: x1 reg32) = "multimem.st.relaxed.sys.global.b32",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_b64(u64: x1 reg64) = "multimem.st.relaxed.sys.global.b64",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_f32(f32: x1 reg32) = "multimem.st.relaxed.sys.global.f32",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_f32(F32x2: w2) = "multimem.st.relaxed.sys.global.v2.f32",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_f32(F32x4: w4) = "multimem.st.relaxed.sys.global.v4.f32",
        sass ["STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_f64(f64: x1 reg64) = "multimem.st.relaxed.sys.global.f64",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_f16x2(F16x2: w1) = "multimem.st.relaxed.sys.global.f16x2",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_f16x2(F16x4: w2) = "multimem.st.relaxed.sys.global.v2.f16x2",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_f16x2(F16x8: w4) = "multimem.st.relaxed.sys.global.v4.f16x2",
        sass ["STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_f16(F16x2: h2) = "multimem.st.relaxed.sys.global.v2.f16",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_f16(F16x4: h4) = "multimem.st.relaxed.sys.global.v4.f16",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v8_f16(F16x8: h8) = "multimem.st.relaxed.sys.global.v8.f16",
        sass ["STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_bf16x2(Bf16x2: w1) = "multimem.st.relaxed.sys.global.bf16x2",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_bf16x2(Bf16x4: w2) = "multimem.st.relaxed.sys.global.v2.bf16x2",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_bf16x2(Bf16x8: w4) = "multimem.st.relaxed.sys.global.v4.bf16x2",
        sass ["STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_bf16(Bf16x2: h2) = "multimem.st.relaxed.sys.global.v2.bf16",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_bf16(Bf16x4: h4) = "multimem.st.relaxed.sys.global.v4.bf16",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v8_bf16(Bf16x8: h8) = "multimem.st.relaxed.sys.global.v8.bf16",
        sass ["STG.E.128.STRONG.SYS"];
}

// Release stores: make every earlier write of this thread visible to a thread that observes the
// stored value with an `.acquire` load at `.sys` scope (their partner).
multimem_store! {
    table = ST_RELEASE, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all()),
    effect = "Stores `value` at `ptr` on every device of the multicast group, with release semantics.";
    pub unsafe fn multimem_st_release_sys_u32(u32: x1 reg32) = "multimem.st.release.sys.global.u32",
        sass ["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_s32(i32: x1 reg32) = "multimem.st.release.sys.global.s32",
        sass ["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_u64(u64: x1 reg64) = "multimem.st.release.sys.global.u64",
        sass ["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_s64(i64: x1 reg64) = "multimem.st.release.sys.global.s64",
        sass ["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_f32(f32: x1 reg32) = "multimem.st.release.sys.global.f32",
        sass ["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_v2_f32(F32x2: w2) = "multimem.st.release.sys.global.v2.f32",
        sass ["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_v4_f32(F32x4: w4) = "multimem.st.release.sys.global.v4.f32",
        sass ["MEMBAR.ALL.SYS", "STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_release_sys_f64(f64: x1 reg64) = "multimem.st.release.sys.global.f64",
        sass ["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"];
}

multimem_store! {
    table = RED_RELAXED, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all()),
    effect = "Reduces `value` into the value at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_red_relaxed_sys_add_u32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.add.u32",
        sass ["REDG.E.ADD.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_s32(i32: x1 reg32) = "multimem.red.relaxed.sys.global.add.s32",
        sass ["REDG.E.ADD.S32.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_u64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.add.u64",
        sass ["REDG.E.ADD.64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_f32(f32: x1 reg32) = "multimem.red.relaxed.sys.global.add.f32",
        sass ["REDG.E.ADD.F32.FTZ.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f32(F32x2: w2) = "multimem.red.relaxed.sys.global.add.v2.f32",
        sass ["REDG.E.ADD.F32x2.FTZ.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f32(F32x4: w4) = "multimem.red.relaxed.sys.global.add.v4.f32",
        sass ["REDG.E.ADD.F32x4.FTZ.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_f64(f64: x1 reg64) = "multimem.red.relaxed.sys.global.add.f64",
        sass ["REDG.E.ADD.F64.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_f16x2(F16x2: w1) = "multimem.red.relaxed.sys.global.add.f16x2",
        sass ["REDG.E.ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f16x2(F16x4: w2) = "multimem.red.relaxed.sys.global.add.v2.f16x2",
        sass ["REDG.E.ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f16x2(F16x8: w4) = "multimem.red.relaxed.sys.global.add.v4.f16x2",
        sass ["REDG.E.ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v2_f16(F16x2: h2) = "multimem.red.relaxed.sys.global.add.v2.f16",
        sass ["REDG.E.ADD.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v4_f16(F16x4: h4) = "multimem.red.relaxed.sys.global.add.v4.f16",
        sass ["REDG.E.ADD.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v8_f16(F16x8: h8) = "multimem.red.relaxed.sys.global.add.v8.f16",
        sass ["REDG.E.ADD.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_bf16x2(Bf16x2: w1) = "multimem.red.relaxed.sys.global.add.bf16x2",
        sass ["REDG.E.ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v2_bf16x2(Bf16x4: w2) = "multimem.red.relaxed.sys.global.add.v2.bf16x2",
        sass ["REDG.E.ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v4_bf16x2(Bf16x8: w4) = "multimem.red.relaxed.sys.global.add.v4.bf16x2",
        sass ["REDG.E.ADD.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v2_bf16(Bf16x2: h2) = "multimem.red.relaxed.sys.global.add.v2.bf16",
        sass ["REDG.E.ADD.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v4_bf16(Bf16x4: h4) = "multimem.red.relaxed.sys.global.add.v4.bf16",
        sass ["REDG.E.ADD.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_add_v8_bf16(Bf16x8: h8) = "multimem.red.relaxed.sys.global.add.v8.bf16",
        sass ["REDG.E.ADD.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_u32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.min.u32",
        sass ["REDG.E.MIN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_s32(i32: x1 reg32) = "multimem.red.relaxed.sys.global.min.s32",
        sass ["REDG.E.MIN.S32.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_u64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.min.u64",
        sass ["REDG.E.MIN.64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_s64(i64: x1 reg64) = "multimem.red.relaxed.sys.global.min.s64",
        sass ["REDG.E.MIN.S64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v2_f16x2(F16x4: w2) = "multimem.red.relaxed.sys.global.min.v2.f16x2",
        sass ["REDG.E.MIN.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v4_f16x2(F16x8: w4) = "multimem.red.relaxed.sys.global.min.v4.f16x2",
        sass ["REDG.E.MIN.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v2_f16(F16x2: h2) = "multimem.red.relaxed.sys.global.min.v2.f16",
        sass ["REDG.E.MIN.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v4_f16(F16x4: h4) = "multimem.red.relaxed.sys.global.min.v4.f16",
        sass ["REDG.E.MIN.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v8_f16(F16x8: h8) = "multimem.red.relaxed.sys.global.min.v8.f16",
        sass ["REDG.E.MIN.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v2_bf16x2(Bf16x4: w2) = "multimem.red.relaxed.sys.global.min.v2.bf16x2",
        sass ["REDG.E.MIN.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v4_bf16x2(Bf16x8: w4) = "multimem.red.relaxed.sys.global.min.v4.bf16x2",
        sass ["REDG.E.MIN.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v2_bf16(Bf16x2: h2) = "multimem.red.relaxed.sys.global.min.v2.bf16",
        sass ["REDG.E.MIN.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v4_bf16(Bf16x4: h4) = "multimem.red.relaxed.sys.global.min.v4.bf16",
        sass ["REDG.E.MIN.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_min_v8_bf16(Bf16x8: h8) = "multimem.red.relaxed.sys.global.min.v8.bf16",
        sass ["REDG.E.MIN.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_u32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.max.u32",
        sass ["REDG.E.MAX.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_s32(i32: x1 reg32) = "multimem.red.relaxed.sys.global.max.s32",
        sass ["REDG.E.MAX.S32.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_u64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.max.u64",
        sass ["REDG.E.MAX.64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_s64(i64: x1 reg64) = "multimem.red.relaxed.sys.global.max.s64",
        sass ["REDG.E.MAX.S64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v2_f16x2(F16x4: w2) = "multimem.red.relaxed.sys.global.max.v2.f16x2",
        sass ["REDG.E.MAX.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v4_f16x2(F16x8: w4) = "multimem.red.relaxed.sys.global.max.v4.f16x2",
        sass ["REDG.E.MAX.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v2_f16(F16x2: h2) = "multimem.red.relaxed.sys.global.max.v2.f16",
        sass ["REDG.E.MAX.F16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v4_f16(F16x4: h4) = "multimem.red.relaxed.sys.global.max.v4.f16",
        sass ["REDG.E.MAX.F16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v8_f16(F16x8: h8) = "multimem.red.relaxed.sys.global.max.v8.f16",
        sass ["REDG.E.MAX.F16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v2_bf16x2(Bf16x4: w2) = "multimem.red.relaxed.sys.global.max.v2.bf16x2",
        sass ["REDG.E.MAX.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v4_bf16x2(Bf16x8: w4) = "multimem.red.relaxed.sys.global.max.v4.bf16x2",
        sass ["REDG.E.MAX.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v2_bf16(Bf16x2: h2) = "multimem.red.relaxed.sys.global.max.v2.bf16",
        sass ["REDG.E.MAX.BF16x2.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v4_bf16(Bf16x4: h4) = "multimem.red.relaxed.sys.global.max.v4.bf16",
        sass ["REDG.E.MAX.BF16x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_max_v8_bf16(Bf16x8: h8) = "multimem.red.relaxed.sys.global.max.v8.bf16",
        sass ["REDG.E.MAX.BF16x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_and_b32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.and.b32",
        sass ["REDG.E.AND.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_and_b64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.and.b64",
        sass ["REDG.E.AND.64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_or_b32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.or.b32",
        sass ["REDG.E.OR.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_or_b64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.or.b64",
        sass ["REDG.E.OR.64.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_xor_b32(u32: x1 reg32) = "multimem.red.relaxed.sys.global.xor.b32",
        sass ["REDG.E.XOR.STRONG.SYS"];
    pub unsafe fn multimem_red_relaxed_sys_xor_b64(u64: x1 reg64) = "multimem.red.relaxed.sys.global.xor.b64",
        sass ["REDG.E.XOR.64.STRONG.SYS"];
}

// Release reductions: the partner is an `.acquire` load (unicast `ld.acquire.sys` on a member's
// own copy, or `multimem.ld_reduce.acquire`) that observes the result.
multimem_store! {
    table = RED_RELEASE, target = "sm_90", isa = "PTX 8.1, sm_90", gate = (all()),
    effect = "Reduces `value` into the value at `ptr` on every device of the multicast group, with release semantics.";
    pub unsafe fn multimem_red_release_sys_add_u32(u32: x1 reg32) = "multimem.red.release.sys.global.add.u32",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.STRONG.SYS"];
    pub unsafe fn multimem_red_release_sys_add_s32(i32: x1 reg32) = "multimem.red.release.sys.global.add.s32",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.S32.STRONG.SYS"];
    pub unsafe fn multimem_red_release_sys_add_u64(u64: x1 reg64) = "multimem.red.release.sys.global.add.u64",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.64.STRONG.SYS"];
    pub unsafe fn multimem_red_release_sys_add_f32(f32: x1 reg32) = "multimem.red.release.sys.global.add.f32",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.F32.FTZ.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_release_sys_add_v2_f32(F32x2: w2) = "multimem.red.release.sys.global.add.v2.f32",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.F32x2.FTZ.RN.STRONG.SYS"];
    pub unsafe fn multimem_red_release_sys_add_v4_f32(F32x4: w4) = "multimem.red.release.sys.global.add.v4.f32",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.F32x4.FTZ.RN.STRONG.SYS"];
}

ld_reduce! {
    table = LD_REDUCE_FP8, target = "sm_100a", isa = "PTX 8.6, sm_100a", gate = (feature = "sm100a");
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_e4m3x4(E4m3x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.e4m3x4",
        sass ["LDGMC.E.ADD.E4M3x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4(E4m3x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.e4m3x4",
        sass ["LDGMC.E.HPADD.E4M3x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4(E4m3x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.e4m3x4",
        sass ["LDGMC.E.ADD.E4M3x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4(E4m3x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v2.e4m3x4",
        sass ["LDGMC.E.HPADD.E4M3x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4(E4m3x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.e4m3x4",
        sass ["LDGMC.E.ADD.E4M3x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4(E4m3x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v4.e4m3x4",
        sass ["LDGMC.E.HPADD.E4M3x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_e5m2x4(E5m2x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.e5m2x4",
        sass ["LDGMC.E.ADD.E5M2x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4(E5m2x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.e5m2x4",
        sass ["LDGMC.E.HPADD.E5M2x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4(E5m2x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.v2.e5m2x4",
        sass ["LDGMC.E.ADD.E5M2x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4(E5m2x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v2.e5m2x4",
        sass ["LDGMC.E.HPADD.E5M2x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4(E5m2x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.v4.e5m2x4",
        sass ["LDGMC.E.ADD.E5M2x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4(E5m2x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v4.e5m2x4",
        sass ["LDGMC.E.HPADD.E5M2x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_e4m3x4(E4m3x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.min.e4m3x4",
        sass ["LDGMC.E.MIN.E4M3x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4(E4m3x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.e4m3x4",
        sass ["LDGMC.E.MIN.E4M3x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4(E4m3x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.e4m3x4",
        sass ["LDGMC.E.MIN.E4M3x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_e5m2x4(E5m2x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.min.e5m2x4",
        sass ["LDGMC.E.MIN.E5M2x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4(E5m2x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.min.v2.e5m2x4",
        sass ["LDGMC.E.MIN.E5M2x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4(E5m2x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.min.v4.e5m2x4",
        sass ["LDGMC.E.MIN.E5M2x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_e4m3x4(E4m3x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.max.e4m3x4",
        sass ["LDGMC.E.MAX.E4M3x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4(E4m3x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.e4m3x4",
        sass ["LDGMC.E.MAX.E4M3x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4(E4m3x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.e4m3x4",
        sass ["LDGMC.E.MAX.E4M3x16.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_e5m2x4(E5m2x4: w1) =
        "multimem.ld_reduce.relaxed.sys.global.max.e5m2x4",
        sass ["LDGMC.E.MAX.E5M2x4.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4(E5m2x8: w2) =
        "multimem.ld_reduce.relaxed.sys.global.max.v2.e5m2x4",
        sass ["LDGMC.E.MAX.E5M2x8.RN.STRONG.SYS"];
    pub unsafe fn multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4(E5m2x16: w4) =
        "multimem.ld_reduce.relaxed.sys.global.max.v4.e5m2x4",
        sass ["LDGMC.E.MAX.E5M2x16.RN.STRONG.SYS"];
}

multimem_store! {
    table = ST_FP8, target = "sm_100a", isa = "PTX 8.6, sm_100a", gate = (feature = "sm100a"),
    effect = "Stores `value` at `ptr` on every device of the multicast group.";
    pub unsafe fn multimem_st_relaxed_sys_e4m3x4(E4m3x4: w1) = "multimem.st.relaxed.sys.global.e4m3x4",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_e4m3x4(E4m3x8: w2) = "multimem.st.relaxed.sys.global.v2.e4m3x4",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_e4m3x4(E4m3x16: w4) = "multimem.st.relaxed.sys.global.v4.e4m3x4",
        sass ["STG.E.128.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_e5m2x4(E5m2x4: w1) = "multimem.st.relaxed.sys.global.e5m2x4",
        sass ["STG.E.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v2_e5m2x4(E5m2x8: w2) = "multimem.st.relaxed.sys.global.v2.e5m2x4",
        sass ["STG.E.64.STRONG.SYS"];
    pub unsafe fn multimem_st_relaxed_sys_v4_e5m2x4(E5m2x16: w4) = "multimem.st.relaxed.sys.global.v4.e5m2x4",
        sass ["STG.E.128.STRONG.SYS"];
}
