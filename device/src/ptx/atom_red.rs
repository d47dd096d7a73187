//! Atomic read-modify-write (`atom`) and reductions without result (`red`) with explicit memory
//! order and scope, on generic addresses.

use super::asm;

macro_rules! atom_add {
    ($( $(#[$doc:meta])* pub unsafe fn $name:ident($t:ty, $reg:ident) = $op:literal; )*) => { $(
        $(#[$doc])*
        ///
        /// Returns the value before the addition.
        ///
        /// # Safety
        /// `ptr` must be valid for atomic reads and writes of the type and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(ptr: *mut $t, value: $t) -> $t {
            let old: $t;
            // SAFETY: the caller guarantees `ptr` is valid and aligned.
            unsafe {
                asm!(concat!($op, " {o}, [{p}], {v};"), o = out($reg) old, p = in(reg64) ptr, v = in($reg) value, options(nostack))
            };
            old
        }
    )* };
}

macro_rules! red_op {
    ($( $(#[$doc:meta])* pub unsafe fn $name:ident($t:ty, $reg:ident) = $op:literal; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// `ptr` must be valid for atomic reads and writes of the type and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(ptr: *mut $t, value: $t) {
            // SAFETY: the caller guarantees `ptr` is valid and aligned.
            unsafe { asm!(concat!($op, " [{p}], {v};"), p = in(reg64) ptr, v = in($reg) value, options(nostack)) };
        }
    )* };
}

atom_add! {
    /// `atom.relaxed.cta.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_cta_add_u32(u32, reg32) = "atom.relaxed.cta.add.u32";
    /// `atom.relaxed.gpu.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_gpu_add_u32(u32, reg32) = "atom.relaxed.gpu.add.u32";
    /// `atom.relaxed.sys.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_sys_add_u32(u32, reg32) = "atom.relaxed.sys.add.u32";
    /// `atom.acquire.cta.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_cta_add_u32(u32, reg32) = "atom.acquire.cta.add.u32";
    /// `atom.acquire.gpu.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_gpu_add_u32(u32, reg32) = "atom.acquire.gpu.add.u32";
    /// `atom.acquire.sys.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_sys_add_u32(u32, reg32) = "atom.acquire.sys.add.u32";
    /// `atom.release.cta.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_cta_add_u32(u32, reg32) = "atom.release.cta.add.u32";
    /// `atom.release.gpu.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_gpu_add_u32(u32, reg32) = "atom.release.gpu.add.u32";
    /// `atom.release.sys.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_sys_add_u32(u32, reg32) = "atom.release.sys.add.u32";
    /// `atom.acq_rel.cta.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_cta_add_u32(u32, reg32) = "atom.acq_rel.cta.add.u32";
    /// `atom.acq_rel.gpu.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_gpu_add_u32(u32, reg32) = "atom.acq_rel.gpu.add.u32";
    /// `atom.acq_rel.sys.add.u32 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_sys_add_u32(u32, reg32) = "atom.acq_rel.sys.add.u32";
    /// `atom.relaxed.cta.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_cta_add_u64(u64, reg64) = "atom.relaxed.cta.add.u64";
    /// `atom.relaxed.gpu.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_gpu_add_u64(u64, reg64) = "atom.relaxed.gpu.add.u64";
    /// `atom.relaxed.sys.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_relaxed_sys_add_u64(u64, reg64) = "atom.relaxed.sys.add.u64";
    /// `atom.acquire.cta.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_cta_add_u64(u64, reg64) = "atom.acquire.cta.add.u64";
    /// `atom.acquire.gpu.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_gpu_add_u64(u64, reg64) = "atom.acquire.gpu.add.u64";
    /// `atom.acquire.sys.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acquire_sys_add_u64(u64, reg64) = "atom.acquire.sys.add.u64";
    /// `atom.release.cta.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_cta_add_u64(u64, reg64) = "atom.release.cta.add.u64";
    /// `atom.release.gpu.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_gpu_add_u64(u64, reg64) = "atom.release.gpu.add.u64";
    /// `atom.release.sys.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_sys_add_u64(u64, reg64) = "atom.release.sys.add.u64";
    /// `atom.acq_rel.cta.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_cta_add_u64(u64, reg64) = "atom.acq_rel.cta.add.u64";
    /// `atom.acq_rel.gpu.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_gpu_add_u64(u64, reg64) = "atom.acq_rel.gpu.add.u64";
    /// `atom.acq_rel.sys.add.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_acq_rel_sys_add_u64(u64, reg64) = "atom.acq_rel.sys.add.u64";
    /// `atom.release.gpu.max.u64 d, [a], b;` (PTX 6.0, sm_70): returns the old value, stores the maximum.
    pub unsafe fn atom_release_gpu_max_u64(u64, reg64) = "atom.release.gpu.max.u64";
    /// `atom.relaxed.gpu.global.add.u64 d, [a], b;` (PTX 6.0, sm_70): global state space, so no
    /// generic-address dispatch (a 64-bit generic atomic also carries a shared-memory fallback).
    pub unsafe fn atom_relaxed_gpu_global_add_u64(u64, reg64) = "atom.relaxed.gpu.global.add.u64";
    /// `atom.release.gpu.global.max.u64 d, [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn atom_release_gpu_global_max_u64(u64, reg64) = "atom.release.gpu.global.max.u64";
    /// `atom.acq_rel.gpu.inc.u32 d, [a], b;` (PTX 6.0, sm_70): `old >= b ? 0 : old + 1`.
    pub unsafe fn atom_acq_rel_gpu_inc_u32(u32, reg32) = "atom.acq_rel.gpu.inc.u32";
}

red_op! {
    /// `red.relaxed.cta.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_cta_add_u32(u32, reg32) = "red.relaxed.cta.add.u32";
    /// `red.relaxed.gpu.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_gpu_add_u32(u32, reg32) = "red.relaxed.gpu.add.u32";
    /// `red.relaxed.sys.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_sys_add_u32(u32, reg32) = "red.relaxed.sys.add.u32";
    /// `red.release.cta.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_cta_add_u32(u32, reg32) = "red.release.cta.add.u32";
    /// `red.release.gpu.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_gpu_add_u32(u32, reg32) = "red.release.gpu.add.u32";
    /// `red.release.sys.add.u32 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_sys_add_u32(u32, reg32) = "red.release.sys.add.u32";
    /// `red.relaxed.cta.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_cta_add_u64(u64, reg64) = "red.relaxed.cta.add.u64";
    /// `red.relaxed.gpu.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_gpu_add_u64(u64, reg64) = "red.relaxed.gpu.add.u64";
    /// `red.relaxed.sys.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_sys_add_u64(u64, reg64) = "red.relaxed.sys.add.u64";
    /// `red.release.cta.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_cta_add_u64(u64, reg64) = "red.release.cta.add.u64";
    /// `red.release.gpu.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_gpu_add_u64(u64, reg64) = "red.release.gpu.add.u64";
    /// `red.release.sys.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_release_sys_add_u64(u64, reg64) = "red.release.sys.add.u64";
    /// `red.release.sys.global.add.u64 [a], b;` (PTX 6.0, sm_70): the semaphore signal, on global
    /// memory (local or peer-mapped) without generic-address dispatch.
    pub unsafe fn red_release_sys_global_add_u64(u64, reg64) = "red.release.sys.global.add.u64";
    /// `red.relaxed.sys.global.add.u64 [a], b;` (PTX 6.0, sm_70)
    pub unsafe fn red_relaxed_sys_global_add_u64(u64, reg64) = "red.relaxed.sys.global.add.u64";
}
