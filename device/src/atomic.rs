//! Scoped atomics with the memory order and scope in type parameters.
//!
//! ```ignore
//! use mscclpp_device::atomic::{self, Acquire, Gpu, Relaxed, Release, Sys};
//! // SAFETY: `flag`, `counter` and `remote` point to aligned words that every other thread
//! // accesses atomically.
//! unsafe {
//!     // Acquire; partner: the release store of `flag` by the thread before.
//!     let v: u64 = atomic::load::<Acquire, Sys, u64>(flag);
//!     // Release; partner: the next thread's acquire load of `flag`.
//!     atomic::store::<Release, Sys, u64>(flag, v + 1);
//!     let _ticket: u32 = atomic::fetch_add::<Relaxed, Gpu, u32>(counter, 1);
//!     // Release; partner: the owner's acquire read of `remote`.
//!     atomic::red_add::<Release, Sys, u64>(remote, 1);
//! }
//! // Partner: a fence or release of the threads whose relaxed accesses this one reads.
//! atomic::fence_acq_rel::<Gpu>();
//! ```
//!
//! (Device code only, so the example is not a doc test; it is compiled as the kernel
//! `atomic_doc_example` of the repository's `ptx-tests/src/doc_examples.rs`, which
//! `tests/doc_examples.rs` holds to this text.)
//!
//! Orders and scopes are zero-sized types, so the choice is fixed at compile time and each call
//! inlines to exactly one PTX instruction (`ld.acquire.sys.u64`, `atom.relaxed.gpu.add.u32`, ...).
//! Loads accept `Relaxed`/`Acquire`, stores `Relaxed`/`Release`, read-modify-writes all four,
//! `red` `Relaxed`/`Release`; other combinations do not compile. Signed types share the unsigned
//! instructions (two's complement addition is the same operation).

mod sealed {
    pub trait Sealed {}
}

/// Identifies a memory order at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderId {
    /// `.relaxed`
    Relaxed,
    /// `.acquire`
    Acquire,
    /// `.release`
    Release,
    /// `.acq_rel`
    AcqRel,
}

/// Identifies a scope at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeId {
    /// `.cta`: the threads of one block.
    Cta,
    /// `.gpu`: every thread of this GPU.
    Gpu,
    /// `.sys`: this GPU, peer GPUs and host threads.
    Sys,
}

/// A memory order marker.
pub trait Order: sealed::Sealed {
    /// Which one.
    const ID: OrderId;
}
/// A scope marker.
pub trait Scope: sealed::Sealed {
    /// Which one.
    const ID: ScopeId;
}
/// Orders valid for loads.
pub trait LoadOrder: Order {}
/// Orders valid for stores and `red`.
pub trait StoreOrder: Order {}
/// Orders valid for read-modify-writes.
pub trait RmwOrder: Order {}

macro_rules! markers {
    ($tr:ident, $id:ident: $($name:ident => $v:ident, $doc:literal;)*) => { $(
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;
        impl sealed::Sealed for $name {}
        impl $tr for $name { const ID: $id = $id::$v; }
    )* };
}
markers!(Order, OrderId:
    Relaxed => Relaxed, "Relaxed order: atomicity only.";
    Acquire => Acquire, "Acquire order: later accesses stay after.";
    Release => Release, "Release order: earlier accesses stay before.";
    AcqRel => AcqRel, "Acquire and release.";
);
markers!(Scope, ScopeId:
    Cta => Cta, "Scope of one thread block.";
    Gpu => Gpu, "Scope of one GPU.";
    Sys => Sys, "Scope of the whole system: peer GPUs and the host.";
);
impl LoadOrder for Relaxed {}
impl LoadOrder for Acquire {}
impl StoreOrder for Relaxed {}
impl StoreOrder for Release {}
impl RmwOrder for Relaxed {}
impl RmwOrder for Acquire {}
impl RmwOrder for Release {}
impl RmwOrder for AcqRel {}

/// A word the scoped atomics operate on: `u32`, `i32`, `u64`, `i64`.
pub trait Word: Copy + sealed::Sealed {
    /// Scoped load.
    ///
    /// # Safety
    /// `p` valid and aligned.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn load(p: *const Self, o: OrderId, s: ScopeId) -> Self;
    /// Scoped store.
    ///
    /// # Safety
    /// `p` valid and aligned.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn store(p: *mut Self, v: Self, o: OrderId, s: ScopeId);
    /// Scoped fetch-add.
    ///
    /// # Safety
    /// `p` valid and aligned.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn fetch_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) -> Self;
    /// Scoped reduction add.
    ///
    /// # Safety
    /// `p` valid and aligned.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn red_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId);
}

#[cfg(any(target_arch = "nvptx64", doc))]
#[allow(clippy::unnecessary_cast)] // the same body as the signed impl below
impl Word for u32 {
    #[inline(always)]
    unsafe fn load(p: *const Self, o: OrderId, s: ScopeId) -> Self {
        use crate::ptx::ld_st::*;
        let p = p as *const u32;
        // SAFETY: forwarded from the caller; the match folds away (o and s are constants).
        unsafe {
            (match (o, s) {
                (OrderId::Acquire, ScopeId::Cta) => ld_acquire_cta_u32(p),
                (OrderId::Acquire, ScopeId::Gpu) => ld_acquire_gpu_u32(p),
                (OrderId::Acquire, ScopeId::Sys) => ld_acquire_sys_u32(p),
                (_, ScopeId::Cta) => ld_relaxed_cta_u32(p),
                (_, ScopeId::Gpu) => ld_relaxed_gpu_u32(p),
                (_, ScopeId::Sys) => ld_relaxed_sys_u32(p),
            }) as u32
        }
    }
    #[inline(always)]
    unsafe fn store(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        use crate::ptx::ld_st::*;
        let (p, v) = (p as *mut u32, v as u32);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (o, s) {
                (OrderId::Release, ScopeId::Cta) => st_release_cta_u32(p, v),
                (OrderId::Release, ScopeId::Gpu) => st_release_gpu_u32(p, v),
                (OrderId::Release, ScopeId::Sys) => st_release_sys_u32(p, v),
                (_, ScopeId::Cta) => st_relaxed_cta_u32(p, v),
                (_, ScopeId::Gpu) => st_relaxed_gpu_u32(p, v),
                (_, ScopeId::Sys) => st_relaxed_sys_u32(p, v),
            }
        }
    }
    #[inline(always)]
    unsafe fn fetch_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) -> Self {
        use crate::ptx::atom_red::*;
        let (p, v) = (p as *mut u32, v as u32);
        // SAFETY: forwarded from the caller.
        unsafe {
            (match (o, s) {
                (OrderId::Relaxed, ScopeId::Cta) => atom_relaxed_cta_add_u32(p, v),
                (OrderId::Relaxed, ScopeId::Gpu) => atom_relaxed_gpu_add_u32(p, v),
                (OrderId::Relaxed, ScopeId::Sys) => atom_relaxed_sys_add_u32(p, v),
                (OrderId::Acquire, ScopeId::Cta) => atom_acquire_cta_add_u32(p, v),
                (OrderId::Acquire, ScopeId::Gpu) => atom_acquire_gpu_add_u32(p, v),
                (OrderId::Acquire, ScopeId::Sys) => atom_acquire_sys_add_u32(p, v),
                (OrderId::Release, ScopeId::Cta) => atom_release_cta_add_u32(p, v),
                (OrderId::Release, ScopeId::Gpu) => atom_release_gpu_add_u32(p, v),
                (OrderId::Release, ScopeId::Sys) => atom_release_sys_add_u32(p, v),
                (OrderId::AcqRel, ScopeId::Cta) => atom_acq_rel_cta_add_u32(p, v),
                (OrderId::AcqRel, ScopeId::Gpu) => atom_acq_rel_gpu_add_u32(p, v),
                (OrderId::AcqRel, ScopeId::Sys) => atom_acq_rel_sys_add_u32(p, v),
            }) as u32
        }
    }
    #[inline(always)]
    unsafe fn red_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        use crate::ptx::atom_red::*;
        let (p, v) = (p as *mut u32, v as u32);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (o, s) {
                (OrderId::Release, ScopeId::Cta) => red_release_cta_add_u32(p, v),
                (OrderId::Release, ScopeId::Gpu) => red_release_gpu_add_u32(p, v),
                (OrderId::Release, ScopeId::Sys) => red_release_sys_add_u32(p, v),
                (_, ScopeId::Cta) => red_relaxed_cta_add_u32(p, v),
                (_, ScopeId::Gpu) => red_relaxed_gpu_add_u32(p, v),
                (_, ScopeId::Sys) => red_relaxed_sys_add_u32(p, v),
            }
        }
    }
}
#[cfg(any(target_arch = "nvptx64", doc))]
impl Word for i32 {
    // Two's complement: the signed forms are the unsigned instructions on the same bits.
    #[inline(always)]
    unsafe fn load(p: *const Self, o: OrderId, s: ScopeId) -> Self {
        // SAFETY: forwarded from the caller; same size and alignment.
        unsafe { <u32 as Word>::load(p.cast(), o, s) as i32 }
    }
    #[inline(always)]
    unsafe fn store(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        // SAFETY: as above.
        unsafe { <u32 as Word>::store(p.cast(), v as u32, o, s) }
    }
    #[inline(always)]
    unsafe fn fetch_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) -> Self {
        // SAFETY: as above.
        unsafe { <u32 as Word>::fetch_add(p.cast(), v as u32, o, s) as i32 }
    }
    #[inline(always)]
    unsafe fn red_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        // SAFETY: as above.
        unsafe { <u32 as Word>::red_add(p.cast(), v as u32, o, s) }
    }
}
#[cfg(any(target_arch = "nvptx64", doc))]
#[allow(clippy::unnecessary_cast)] // the same body as the signed impl below
impl Word for u64 {
    #[inline(always)]
    unsafe fn load(p: *const Self, o: OrderId, s: ScopeId) -> Self {
        use crate::ptx::ld_st::*;
        let p = p as *const u64;
        // SAFETY: forwarded from the caller; the match folds away (o and s are constants).
        unsafe {
            (match (o, s) {
                (OrderId::Acquire, ScopeId::Cta) => ld_acquire_cta_u64(p),
                (OrderId::Acquire, ScopeId::Gpu) => ld_acquire_gpu_u64(p),
                (OrderId::Acquire, ScopeId::Sys) => ld_acquire_sys_u64(p),
                (_, ScopeId::Cta) => ld_relaxed_cta_u64(p),
                (_, ScopeId::Gpu) => ld_relaxed_gpu_u64(p),
                (_, ScopeId::Sys) => ld_relaxed_sys_u64(p),
            }) as u64
        }
    }
    #[inline(always)]
    unsafe fn store(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        use crate::ptx::ld_st::*;
        let (p, v) = (p as *mut u64, v as u64);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (o, s) {
                (OrderId::Release, ScopeId::Cta) => st_release_cta_u64(p, v),
                (OrderId::Release, ScopeId::Gpu) => st_release_gpu_u64(p, v),
                (OrderId::Release, ScopeId::Sys) => st_release_sys_u64(p, v),
                (_, ScopeId::Cta) => st_relaxed_cta_u64(p, v),
                (_, ScopeId::Gpu) => st_relaxed_gpu_u64(p, v),
                (_, ScopeId::Sys) => st_relaxed_sys_u64(p, v),
            }
        }
    }
    #[inline(always)]
    unsafe fn fetch_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) -> Self {
        use crate::ptx::atom_red::*;
        let (p, v) = (p as *mut u64, v as u64);
        // SAFETY: forwarded from the caller.
        unsafe {
            (match (o, s) {
                (OrderId::Relaxed, ScopeId::Cta) => atom_relaxed_cta_add_u64(p, v),
                (OrderId::Relaxed, ScopeId::Gpu) => atom_relaxed_gpu_add_u64(p, v),
                (OrderId::Relaxed, ScopeId::Sys) => atom_relaxed_sys_add_u64(p, v),
                (OrderId::Acquire, ScopeId::Cta) => atom_acquire_cta_add_u64(p, v),
                (OrderId::Acquire, ScopeId::Gpu) => atom_acquire_gpu_add_u64(p, v),
                (OrderId::Acquire, ScopeId::Sys) => atom_acquire_sys_add_u64(p, v),
                (OrderId::Release, ScopeId::Cta) => atom_release_cta_add_u64(p, v),
                (OrderId::Release, ScopeId::Gpu) => atom_release_gpu_add_u64(p, v),
                (OrderId::Release, ScopeId::Sys) => atom_release_sys_add_u64(p, v),
                (OrderId::AcqRel, ScopeId::Cta) => atom_acq_rel_cta_add_u64(p, v),
                (OrderId::AcqRel, ScopeId::Gpu) => atom_acq_rel_gpu_add_u64(p, v),
                (OrderId::AcqRel, ScopeId::Sys) => atom_acq_rel_sys_add_u64(p, v),
            }) as u64
        }
    }
    #[inline(always)]
    unsafe fn red_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        use crate::ptx::atom_red::*;
        let (p, v) = (p as *mut u64, v as u64);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (o, s) {
                (OrderId::Release, ScopeId::Cta) => red_release_cta_add_u64(p, v),
                (OrderId::Release, ScopeId::Gpu) => red_release_gpu_add_u64(p, v),
                (OrderId::Release, ScopeId::Sys) => red_release_sys_add_u64(p, v),
                (_, ScopeId::Cta) => red_relaxed_cta_add_u64(p, v),
                (_, ScopeId::Gpu) => red_relaxed_gpu_add_u64(p, v),
                (_, ScopeId::Sys) => red_relaxed_sys_add_u64(p, v),
            }
        }
    }
}
#[cfg(any(target_arch = "nvptx64", doc))]
impl Word for i64 {
    // Two's complement: the signed forms are the unsigned instructions on the same bits.
    #[inline(always)]
    unsafe fn load(p: *const Self, o: OrderId, s: ScopeId) -> Self {
        // SAFETY: forwarded from the caller; same size and alignment.
        unsafe { <u64 as Word>::load(p.cast(), o, s) as i64 }
    }
    #[inline(always)]
    unsafe fn store(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        // SAFETY: as above.
        unsafe { <u64 as Word>::store(p.cast(), v as u64, o, s) }
    }
    #[inline(always)]
    unsafe fn fetch_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) -> Self {
        // SAFETY: as above.
        unsafe { <u64 as Word>::fetch_add(p.cast(), v as u64, o, s) as i64 }
    }
    #[inline(always)]
    unsafe fn red_add(p: *mut Self, v: Self, o: OrderId, s: ScopeId) {
        // SAFETY: as above.
        unsafe { <u64 as Word>::red_add(p.cast(), v as u64, o, s) }
    }
}

#[cfg(not(any(target_arch = "nvptx64", doc)))]
impl Word for u32 {}
#[cfg(not(any(target_arch = "nvptx64", doc)))]
impl Word for i32 {}
#[cfg(not(any(target_arch = "nvptx64", doc)))]
impl Word for u64 {}
#[cfg(not(any(target_arch = "nvptx64", doc)))]
impl Word for i64 {}
impl sealed::Sealed for u32 {}
impl sealed::Sealed for i32 {}
impl sealed::Sealed for u64 {}
impl sealed::Sealed for i64 {}

/// Loads `*p` with order `O` at scope `S`.
///
/// # Safety
/// `p` must be valid for reads and naturally aligned; concurrent writers must use atomics.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub unsafe fn load<O: LoadOrder, S: Scope, T: Word>(p: *const T) -> T {
    // SAFETY: forwarded from the caller.
    unsafe { T::load(p, O::ID, S::ID) }
}

/// Stores `v` to `*p` with order `O` at scope `S`.
///
/// # Safety
/// `p` must be valid for writes and naturally aligned.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub unsafe fn store<O: StoreOrder, S: Scope, T: Word>(p: *mut T, v: T) {
    // SAFETY: forwarded from the caller.
    unsafe { T::store(p, v, O::ID, S::ID) }
}

/// Adds `v` to `*p` atomically with order `O` at scope `S`; returns the previous value.
///
/// # Safety
/// `p` must be valid for reads and writes and naturally aligned.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub unsafe fn fetch_add<O: RmwOrder, S: Scope, T: Word>(p: *mut T, v: T) -> T {
    // SAFETY: forwarded from the caller.
    unsafe { T::fetch_add(p, v, O::ID, S::ID) }
}

/// Adds `v` to `*p` atomically with order `O` at scope `S`, without returning a value (`red`).
///
/// # Safety
/// `p` must be valid for reads and writes and naturally aligned.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub unsafe fn red_add<O: StoreOrder, S: Scope, T: Word>(p: *mut T, v: T) {
    // SAFETY: forwarded from the caller.
    unsafe { T::red_add(p, v, O::ID, S::ID) }
}

/// A fence with order `O` (`AcqRel`, or `SeqCst` through [`fence_sc`]) at scope `S`.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub fn fence_acq_rel<S: Scope>() {
    use crate::ptx::fence::*;
    match S::ID {
        ScopeId::Cta => fence_acq_rel_cta(),
        ScopeId::Gpu => fence_acq_rel_gpu(),
        ScopeId::Sys => fence_acq_rel_sys(),
    }
}

/// A sequentially consistent fence (`fence.sc`) at scope `S`.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub fn fence_sc<S: Scope>() {
    use crate::ptx::fence::*;
    match S::ID {
        ScopeId::Cta => fence_sc_cta(),
        ScopeId::Gpu => fence_sc_gpu(),
        ScopeId::Sys => fence_sc_sys(),
    }
}
