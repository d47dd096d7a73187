//! Typed multimem operations over a [`MultimemPtr`]: one generic function per instruction and
//! ordering, with the (value type, operation) pairs PTX accepts as sealed trait impls.
//!
//! ```text
//!  multimem_ld_reduce::<V, Op>(p)      every member's copy of *p, reduced by Op, returned
//!  multimem_st::<V>(p, v)              v written to every member's copy of *p
//!  multimem_red::<V, Op>(p, v)         every member's copy: *p = Op(*p, v)
//! ```
//!
//! Value types are the scalars `u32`, `i32`, `u64`, `i64`, `f32`, `f64` and the vectors of
//! [`crate::vec`]. Operations are the markers of [`crate::op`] (shared with the bulk reductions), re-exported here as `op`.
//! Bitwise operations on integers map to the `.b32`/`.b64` forms, `i32` to `.s32`, `i64` to
//! `.s64`. A 16-bit-lane vector uses its packed form (`F16x8` is `.v4.f16x2`) except where only
//! the split form exists (`red.min/max` on `F16x2`/`Bf16x2` use `.v2.f16`/`.v2.bf16`).
//!
//! What each operation accepts (relaxed forms, sm_90):
//!
//! | | `ld_reduce` | `red` | `st` |
//! | --- | --- | --- | --- |
//! | `Add` | u32 i32 u64 f32 F32x2 F32x4 f64, f16/bf16 x2/x4/x8 | same | - |
//! | `Min`, `Max` | u32 i32 u64 i64, f16/bf16 x2/x4/x8 | same | - |
//! | `And`, `Or`, `Xor` | u32 i32 u64 i64 | same | - |
//! | (store) | - | - | all of the above and i64 |
//!
//! An unsupported pair does not compile:
//!
//! ```compile_fail
//! use mscclpp_device::multimem::{LdReduce, op};
//! fn needs<V, O: LdReduce<V>>() {}
//! needs::<f32, op::Min>(); // PTX has no multimem min on f32
//! ```
//!
//! while a supported one does:
//!
//! ```
//! use mscclpp_device::multimem::{LdReduce, op};
//! use mscclpp_device::vec::Bf16x8;
//! fn needs<V, O: LdReduce<V>>() -> &'static str { O::PTX }
//! assert_eq!(needs::<f32, op::Add>(), "multimem.ld_reduce.relaxed.sys.global.add.f32");
//! assert_eq!(needs::<Bf16x8, op::Max>(), "multimem.ld_reduce.relaxed.sys.global.max.v4.bf16x2");
//! ```
//!
//! Besides the relaxed forms: [`multimem_ld_reduce_acquire`], [`multimem_st_release`],
//! [`multimem_red_release`] (the ordering variants protocols need), [`multimem_ld_reduce_acc_f32`]
//! (f16/bf16 sums accumulated in f32) and, with feature `sm100a`, fp8 loads with
//! [`multimem_ld_reduce_acc_f16`].

#[cfg(any(target_arch = "nvptx64", doc))]
use crate::ptr::MultimemPtr;
#[allow(unused_imports)]
use crate::vec::*;

pub use crate::op;

mod sealed {
    pub trait LdReduce<V> {}
    pub trait LdReduceAcquire<V> {}
    pub trait LdReduceAccF32<V> {}
    pub trait LdReduceAccF16<V> {}
    pub trait Store {}
    pub trait StoreRelease {}
    pub trait Red<V> {}
    pub trait RedRelease<V> {}
}

/// An operation that `multimem.ld_reduce.relaxed` applies to values of type `V`.
pub trait LdReduce<V>: sealed::LdReduce<V> {
    /// The instruction, from the wrapper's row: e.g. `multimem.ld_reduce.relaxed.sys.global.add.v4.f32`.
    const PTX: &'static str;
    /// Issues the load.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn ld_reduce(ptr: MultimemPtr<V>) -> V;
}

/// An operation that `multimem.ld_reduce.acquire` applies to values of type `V`.
pub trait LdReduceAcquire<V>: sealed::LdReduceAcquire<V> {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the load.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce_acquire`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn ld_reduce_acquire(ptr: MultimemPtr<V>) -> V;
}

/// A 16-bit-lane vector whose `multimem.ld_reduce` add can accumulate in f32 (`.acc::f32`).
pub trait LdReduceAccF32: sealed::LdReduceAccF32<Self> + Sized {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the load.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce_acc_f32`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn ld_reduce_acc_f32(ptr: MultimemPtr<Self>) -> Self;
}

/// An fp8 vector whose `multimem.ld_reduce` add can accumulate in f16 (`.acc::f16`, sm_100a).
pub trait LdReduceAccF16: sealed::LdReduceAccF16<Self> + Sized {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the load.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce_acc_f16`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn ld_reduce_acc_f16(ptr: MultimemPtr<Self>) -> Self;
}

/// A value type that `multimem.st.relaxed` stores.
pub trait Store: sealed::Store + Sized {
    /// The instruction, from the wrapper's row: e.g. `multimem.st.relaxed.sys.global.v4.f32`.
    const PTX: &'static str;
    /// Issues the store.
    ///
    /// # Safety
    /// As for [`multimem_st`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn st(ptr: MultimemPtr<Self>, value: Self);
}

/// A value type that `multimem.st.release` stores.
pub trait StoreRelease: sealed::StoreRelease + Sized {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the store.
    ///
    /// # Safety
    /// As for [`multimem_st_release`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn st_release(ptr: MultimemPtr<Self>, value: Self);
}

/// An operation that `multimem.red.relaxed` applies to values of type `V`.
pub trait Red<V>: sealed::Red<V> {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the reduction.
    ///
    /// # Safety
    /// As for [`multimem_red`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn red(ptr: MultimemPtr<V>, value: V);
}

/// An operation that `multimem.red.release` applies to values of type `V`.
pub trait RedRelease<V>: sealed::RedRelease<V> {
    /// The instruction, from the wrapper's row.
    const PTX: &'static str;
    /// Issues the reduction.
    ///
    /// # Safety
    /// As for [`multimem_red_release`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn red_release(ptr: MultimemPtr<V>, value: V);
}

/// Implements an op-keyed trait (`LdReduce`, `LdReduceAcquire`, `Red`, `RedRelease`) for rows
/// `Op, Type => wrapper;` of the wrappers in `ptx::multimem::TABLE` (`.. in TABLE;`). A row names
/// the wrapper only: its `PTX` is the mnemonic of the wrapper's row in that table, looked up in a
/// constant, so a wrapper missing from the table fails the build on every target.
macro_rules! op_pairs {
    (load $tr:ident :: $method:ident in $table:ident; $($op:ident, $t:ty => $w:ident;)*) => { $(
        impl sealed::$tr<$t> for op::$op {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <op::$op as $tr<$t>>::PTX;
        impl $tr<$t> for op::$op {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>) -> $t {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::multimem::$w(ptr) }
            }
        }
    )* };
    (store $tr:ident :: $method:ident in $table:ident; $($op:ident, $t:ty => $w:ident;)*) => { $(
        impl sealed::$tr<$t> for op::$op {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <op::$op as $tr<$t>>::PTX;
        impl $tr<$t> for op::$op {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>, value: $t) {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::multimem::$w(ptr, value) }
            }
        }
    )* };
    // Signed integers through the `.b32`/`.b64` forms of the unsigned wrapper (bitwise ops only,
    // where the bits are the same).
    (load_bits $tr:ident :: $method:ident in $table:ident; $($op:ident, $t:ty as $u:ty => $w:ident;)*) => { $(
        impl sealed::$tr<$t> for op::$op {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <op::$op as $tr<$t>>::PTX;
        impl $tr<$t> for op::$op {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>) -> $t {
                // SAFETY: forwarded from the caller; same size and alignment as `$u`.
                (unsafe { crate::ptx::multimem::$w(ptr.cast::<$u>()) }) as $t
            }
        }
    )* };
    (store_bits $tr:ident :: $method:ident in $table:ident; $($op:ident, $t:ty as $u:ty => $w:ident;)*) => { $(
        impl sealed::$tr<$t> for op::$op {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <op::$op as $tr<$t>>::PTX;
        impl $tr<$t> for op::$op {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>, value: $t) {
                // SAFETY: forwarded from the caller; same size and alignment as `$u`.
                unsafe { crate::ptx::multimem::$w(ptr.cast::<$u>(), value as $u) }
            }
        }
    )* };
}

/// Implements a type-keyed trait (`Store`, `StoreRelease`, `LdReduceAccF32`, `LdReduceAccF16`) for
/// rows `Type => wrapper;`, as [`op_pairs`] does.
macro_rules! type_impls {
    (load $tr:ident :: $method:ident in $table:ident; $($t:ty => $w:ident;)*) => { $(
        impl sealed::$tr<$t> for $t {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <$t as $tr>::PTX;
        impl $tr for $t {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>) -> $t {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::multimem::$w(ptr) }
            }
        }
    )* };
    (store $tr:ident :: $method:ident in $table:ident; $($t:ty => $w:ident;)*) => { $(
        impl sealed::$tr for $t {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <$t as $tr>::PTX;
        impl $tr for $t {
            const PTX: &'static str = crate::ptx::check::mnemonic(crate::ptx::multimem::$table, stringify!($w));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn $method(ptr: MultimemPtr<$t>, value: $t) {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::multimem::$w(ptr, value) }
            }
        }
    )* };
}

op_pairs! { load LdReduce::ld_reduce in LD_REDUCE_RELAXED;
    Add, u32 => multimem_ld_reduce_relaxed_sys_add_u32;
    Add, i32 => multimem_ld_reduce_relaxed_sys_add_s32;
    Add, u64 => multimem_ld_reduce_relaxed_sys_add_u64;
    Add, f32 => multimem_ld_reduce_relaxed_sys_add_f32;
    Add, F32x2 => multimem_ld_reduce_relaxed_sys_add_v2_f32;
    Add, F32x4 => multimem_ld_reduce_relaxed_sys_add_v4_f32;
    Add, f64 => multimem_ld_reduce_relaxed_sys_add_f64;
    Add, F16x2 => multimem_ld_reduce_relaxed_sys_add_f16x2;
    Add, F16x4 => multimem_ld_reduce_relaxed_sys_add_v2_f16x2;
    Add, F16x8 => multimem_ld_reduce_relaxed_sys_add_v4_f16x2;
    Add, Bf16x2 => multimem_ld_reduce_relaxed_sys_add_bf16x2;
    Add, Bf16x4 => multimem_ld_reduce_relaxed_sys_add_v2_bf16x2;
    Add, Bf16x8 => multimem_ld_reduce_relaxed_sys_add_v4_bf16x2;
    Min, u32 => multimem_ld_reduce_relaxed_sys_min_u32;
    Min, i32 => multimem_ld_reduce_relaxed_sys_min_s32;
    Min, u64 => multimem_ld_reduce_relaxed_sys_min_u64;
    Min, i64 => multimem_ld_reduce_relaxed_sys_min_s64;
    Min, F16x2 => multimem_ld_reduce_relaxed_sys_min_f16x2;
    Min, F16x4 => multimem_ld_reduce_relaxed_sys_min_v2_f16x2;
    Min, F16x8 => multimem_ld_reduce_relaxed_sys_min_v4_f16x2;
    Min, Bf16x2 => multimem_ld_reduce_relaxed_sys_min_bf16x2;
    Min, Bf16x4 => multimem_ld_reduce_relaxed_sys_min_v2_bf16x2;
    Min, Bf16x8 => multimem_ld_reduce_relaxed_sys_min_v4_bf16x2;
    Max, u32 => multimem_ld_reduce_relaxed_sys_max_u32;
    Max, i32 => multimem_ld_reduce_relaxed_sys_max_s32;
    Max, u64 => multimem_ld_reduce_relaxed_sys_max_u64;
    Max, i64 => multimem_ld_reduce_relaxed_sys_max_s64;
    Max, F16x2 => multimem_ld_reduce_relaxed_sys_max_f16x2;
    Max, F16x4 => multimem_ld_reduce_relaxed_sys_max_v2_f16x2;
    Max, F16x8 => multimem_ld_reduce_relaxed_sys_max_v4_f16x2;
    Max, Bf16x2 => multimem_ld_reduce_relaxed_sys_max_bf16x2;
    Max, Bf16x4 => multimem_ld_reduce_relaxed_sys_max_v2_bf16x2;
    Max, Bf16x8 => multimem_ld_reduce_relaxed_sys_max_v4_bf16x2;
    And, u32 => multimem_ld_reduce_relaxed_sys_and_b32;
    And, u64 => multimem_ld_reduce_relaxed_sys_and_b64;
    Or, u32 => multimem_ld_reduce_relaxed_sys_or_b32;
    Or, u64 => multimem_ld_reduce_relaxed_sys_or_b64;
    Xor, u32 => multimem_ld_reduce_relaxed_sys_xor_b32;
    Xor, u64 => multimem_ld_reduce_relaxed_sys_xor_b64;
}

op_pairs! { load_bits LdReduce::ld_reduce in LD_REDUCE_RELAXED;
    And, i32 as u32 => multimem_ld_reduce_relaxed_sys_and_b32;
    And, i64 as u64 => multimem_ld_reduce_relaxed_sys_and_b64;
    Or, i32 as u32 => multimem_ld_reduce_relaxed_sys_or_b32;
    Or, i64 as u64 => multimem_ld_reduce_relaxed_sys_or_b64;
    Xor, i32 as u32 => multimem_ld_reduce_relaxed_sys_xor_b32;
    Xor, i64 as u64 => multimem_ld_reduce_relaxed_sys_xor_b64;
}

// Acquire loads: the partner is a `.release` store or reduction at `.sys` scope (for example
// [`multimem_red_release`] by another member) whose result this load observes.
op_pairs! { load LdReduceAcquire::ld_reduce_acquire in LD_REDUCE_ACQUIRE;
    Add, u32 => multimem_ld_reduce_acquire_sys_add_u32;
    Add, i32 => multimem_ld_reduce_acquire_sys_add_s32;
    Add, u64 => multimem_ld_reduce_acquire_sys_add_u64;
    Add, f32 => multimem_ld_reduce_acquire_sys_add_f32;
    Add, F32x2 => multimem_ld_reduce_acquire_sys_add_v2_f32;
    Add, F32x4 => multimem_ld_reduce_acquire_sys_add_v4_f32;
}

type_impls! { load LdReduceAccF32::ld_reduce_acc_f32 in LD_REDUCE_ACC_F32;
    F16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2;
    F16x4 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2;
    F16x8 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2;
    Bf16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2;
    Bf16x4 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2;
    Bf16x8 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2;
}

type_impls! { store Store::st in ST_RELAXED;
    u32 => multimem_st_relaxed_sys_u32;
    i32 => multimem_st_relaxed_sys_s32;
    u64 => multimem_st_relaxed_sys_u64;
    i64 => multimem_st_relaxed_sys_s64;
    f32 => multimem_st_relaxed_sys_f32;
    F32x2 => multimem_st_relaxed_sys_v2_f32;
    F32x4 => multimem_st_relaxed_sys_v4_f32;
    f64 => multimem_st_relaxed_sys_f64;
    F16x2 => multimem_st_relaxed_sys_f16x2;
    F16x4 => multimem_st_relaxed_sys_v2_f16x2;
    F16x8 => multimem_st_relaxed_sys_v4_f16x2;
    Bf16x2 => multimem_st_relaxed_sys_bf16x2;
    Bf16x4 => multimem_st_relaxed_sys_v2_bf16x2;
    Bf16x8 => multimem_st_relaxed_sys_v4_bf16x2;
}

// Release stores: the partner is an `.acquire` load at `.sys` scope of the stored location by a
// member that then reads what this thread wrote before the store.
type_impls! { store StoreRelease::st_release in ST_RELEASE;
    u32 => multimem_st_release_sys_u32;
    i32 => multimem_st_release_sys_s32;
    u64 => multimem_st_release_sys_u64;
    i64 => multimem_st_release_sys_s64;
    f32 => multimem_st_release_sys_f32;
    F32x2 => multimem_st_release_sys_v2_f32;
    F32x4 => multimem_st_release_sys_v4_f32;
    f64 => multimem_st_release_sys_f64;
}

op_pairs! { store Red::red in RED_RELAXED;
    Add, u32 => multimem_red_relaxed_sys_add_u32;
    Add, i32 => multimem_red_relaxed_sys_add_s32;
    Add, u64 => multimem_red_relaxed_sys_add_u64;
    Add, f32 => multimem_red_relaxed_sys_add_f32;
    Add, F32x2 => multimem_red_relaxed_sys_add_v2_f32;
    Add, F32x4 => multimem_red_relaxed_sys_add_v4_f32;
    Add, f64 => multimem_red_relaxed_sys_add_f64;
    Add, F16x2 => multimem_red_relaxed_sys_add_f16x2;
    Add, F16x4 => multimem_red_relaxed_sys_add_v2_f16x2;
    Add, F16x8 => multimem_red_relaxed_sys_add_v4_f16x2;
    Add, Bf16x2 => multimem_red_relaxed_sys_add_bf16x2;
    Add, Bf16x4 => multimem_red_relaxed_sys_add_v2_bf16x2;
    Add, Bf16x8 => multimem_red_relaxed_sys_add_v4_bf16x2;
    Min, u32 => multimem_red_relaxed_sys_min_u32;
    Min, i32 => multimem_red_relaxed_sys_min_s32;
    Min, u64 => multimem_red_relaxed_sys_min_u64;
    Min, i64 => multimem_red_relaxed_sys_min_s64;
    Min, F16x2 => multimem_red_relaxed_sys_min_v2_f16;
    Min, F16x4 => multimem_red_relaxed_sys_min_v2_f16x2;
    Min, F16x8 => multimem_red_relaxed_sys_min_v4_f16x2;
    Min, Bf16x2 => multimem_red_relaxed_sys_min_v2_bf16;
    Min, Bf16x4 => multimem_red_relaxed_sys_min_v2_bf16x2;
    Min, Bf16x8 => multimem_red_relaxed_sys_min_v4_bf16x2;
    Max, u32 => multimem_red_relaxed_sys_max_u32;
    Max, i32 => multimem_red_relaxed_sys_max_s32;
    Max, u64 => multimem_red_relaxed_sys_max_u64;
    Max, i64 => multimem_red_relaxed_sys_max_s64;
    Max, F16x2 => multimem_red_relaxed_sys_max_v2_f16;
    Max, F16x4 => multimem_red_relaxed_sys_max_v2_f16x2;
    Max, F16x8 => multimem_red_relaxed_sys_max_v4_f16x2;
    Max, Bf16x2 => multimem_red_relaxed_sys_max_v2_bf16;
    Max, Bf16x4 => multimem_red_relaxed_sys_max_v2_bf16x2;
    Max, Bf16x8 => multimem_red_relaxed_sys_max_v4_bf16x2;
    And, u32 => multimem_red_relaxed_sys_and_b32;
    And, u64 => multimem_red_relaxed_sys_and_b64;
    Or, u32 => multimem_red_relaxed_sys_or_b32;
    Or, u64 => multimem_red_relaxed_sys_or_b64;
    Xor, u32 => multimem_red_relaxed_sys_xor_b32;
    Xor, u64 => multimem_red_relaxed_sys_xor_b64;
}

op_pairs! { store_bits Red::red in RED_RELAXED;
    And, i32 as u32 => multimem_red_relaxed_sys_and_b32;
    And, i64 as u64 => multimem_red_relaxed_sys_and_b64;
    Or, i32 as u32 => multimem_red_relaxed_sys_or_b32;
    Or, i64 as u64 => multimem_red_relaxed_sys_or_b64;
    Xor, i32 as u32 => multimem_red_relaxed_sys_xor_b32;
    Xor, i64 as u64 => multimem_red_relaxed_sys_xor_b64;
}

// Release reductions: the partner is an `.acquire` load at `.sys` scope (unicast on a member's
// own copy, or [`multimem_ld_reduce_acquire`]) that observes the result.
op_pairs! { store RedRelease::red_release in RED_RELEASE;
    Add, u32 => multimem_red_release_sys_add_u32;
    Add, i32 => multimem_red_release_sys_add_s32;
    Add, u64 => multimem_red_release_sys_add_u64;
    Add, f32 => multimem_red_release_sys_add_f32;
    Add, F32x2 => multimem_red_release_sys_add_v2_f32;
    Add, F32x4 => multimem_red_release_sys_add_v4_f32;
}

#[cfg(feature = "sm100a")]
op_pairs! { load LdReduce::ld_reduce in LD_REDUCE_FP8;
    Add, E4m3x4 => multimem_ld_reduce_relaxed_sys_add_e4m3x4;
    Add, E4m3x8 => multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4;
    Add, E4m3x16 => multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4;
    Add, E5m2x4 => multimem_ld_reduce_relaxed_sys_add_e5m2x4;
    Add, E5m2x8 => multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4;
    Add, E5m2x16 => multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4;
    Min, E4m3x4 => multimem_ld_reduce_relaxed_sys_min_e4m3x4;
    Min, E4m3x8 => multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4;
    Min, E4m3x16 => multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4;
    Min, E5m2x4 => multimem_ld_reduce_relaxed_sys_min_e5m2x4;
    Min, E5m2x8 => multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4;
    Min, E5m2x16 => multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4;
    Max, E4m3x4 => multimem_ld_reduce_relaxed_sys_max_e4m3x4;
    Max, E4m3x8 => multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4;
    Max, E4m3x16 => multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4;
    Max, E5m2x4 => multimem_ld_reduce_relaxed_sys_max_e5m2x4;
    Max, E5m2x8 => multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4;
    Max, E5m2x16 => multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4;
}

#[cfg(feature = "sm100a")]
type_impls! { load LdReduceAccF16::ld_reduce_acc_f16 in LD_REDUCE_FP8;
    E4m3x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4;
    E4m3x8 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4;
    E4m3x16 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4;
    E5m2x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4;
    E5m2x8 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4;
    E5m2x16 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4;
}

#[cfg(feature = "sm100a")]
type_impls! { store Store::st in ST_FP8;
    E4m3x4 => multimem_st_relaxed_sys_e4m3x4;
    E4m3x8 => multimem_st_relaxed_sys_v2_e4m3x4;
    E4m3x16 => multimem_st_relaxed_sys_v4_e4m3x4;
    E5m2x4 => multimem_st_relaxed_sys_e5m2x4;
    E5m2x8 => multimem_st_relaxed_sys_v2_e5m2x4;
    E5m2x16 => multimem_st_relaxed_sys_v4_e5m2x4;
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;

    /// The reduction by `Op` of the value at `ptr` over every member of the multicast group
    /// (`multimem.ld_reduce.relaxed.sys`).
    ///
    /// # Safety
    /// `ptr` must lie inside a multicast mapping of this device whose every member has memory
    /// bound, be aligned to `size_of::<V>()`, and the value must stay inside the mapping.
    #[inline(always)]
    pub unsafe fn multimem_ld_reduce<V, Op: LdReduce<V>>(ptr: MultimemPtr<V>) -> V {
        // SAFETY: forwarded from the caller.
        unsafe { Op::ld_reduce(ptr) }
    }

    /// [`multimem_ld_reduce`] with acquire semantics at `.sys` scope: pairs with a release
    /// (store, reduction or fence) of the thread whose earlier writes the caller reads next.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_ld_reduce_acquire<V, Op: LdReduceAcquire<V>>(ptr: MultimemPtr<V>) -> V {
        // SAFETY: forwarded from the caller.
        unsafe { Op::ld_reduce_acquire(ptr) }
    }

    /// The sum over the group of the f16/bf16 vector at `ptr`, accumulated in f32 and rounded
    /// once (`multimem.ld_reduce.relaxed.sys.global.add.acc::f32`).
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_ld_reduce_acc_f32<V: LdReduceAccF32>(ptr: MultimemPtr<V>) -> V {
        // SAFETY: forwarded from the caller.
        unsafe { V::ld_reduce_acc_f32(ptr) }
    }

    /// The sum over the group of the fp8 vector at `ptr`, accumulated in f16
    /// (`multimem.ld_reduce.relaxed.sys.global.add.acc::f16`, sm_100a).
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_ld_reduce_acc_f16<V: LdReduceAccF16>(ptr: MultimemPtr<V>) -> V {
        // SAFETY: forwarded from the caller.
        unsafe { V::ld_reduce_acc_f16(ptr) }
    }

    /// Stores `value` at `ptr` on every member of the multicast group (`multimem.st.relaxed.sys`).
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_st<V: Store>(ptr: MultimemPtr<V>, value: V) {
        // SAFETY: forwarded from the caller.
        unsafe { V::st(ptr, value) }
    }

    /// [`multimem_st`] with release semantics at `.sys` scope: every earlier write of this thread
    /// is visible to a member that observes `value` with an acquire load (the partner).
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_st_release<V: StoreRelease>(ptr: MultimemPtr<V>, value: V) {
        // SAFETY: forwarded from the caller.
        unsafe { V::st_release(ptr, value) }
    }

    /// Reduces `value` by `Op` into the value at `ptr` on every member of the multicast group
    /// (`multimem.red.relaxed.sys`).
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_red<V, Op: Red<V>>(ptr: MultimemPtr<V>, value: V) {
        // SAFETY: forwarded from the caller.
        unsafe { Op::red(ptr, value) }
    }

    /// [`multimem_red`] with release semantics at `.sys` scope: every earlier write of this
    /// thread is visible to a member whose acquire load (the partner) observes the result.
    ///
    /// # Safety
    /// As for [`multimem_ld_reduce`].
    #[inline(always)]
    pub unsafe fn multimem_red_release<V, Op: RedRelease<V>>(ptr: MultimemPtr<V>, value: V) {
        // SAFETY: forwarded from the caller.
        unsafe { Op::red_release(ptr, value) }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
pub use device::*;
