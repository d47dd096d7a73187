//! Atomic read-modify-write (`atom`) and reductions without result (`red`) with explicit memory
//! order and scope, on generic addresses (or, for the `.global` forms, global ones).

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;

atom! {
    table = ATOM, isa = "PTX 6.0, sm_70",
    effect = "Adds `value` to the value at `ptr` and returns the value before the addition.";
    pub unsafe fn atom_relaxed_cta_add_u32(u32, reg32) = "atom.relaxed.cta.add.u32",
        sass ["ATOM.E.ADD.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_relaxed_gpu_add_u32(u32, reg32) = "atom.relaxed.gpu.add.u32",
        sass ["ATOM.E.ADD.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_relaxed_sys_add_u32(u32, reg32) = "atom.relaxed.sys.add.u32",
        sass ["ATOM.E.ADD.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_acquire_cta_add_u32(u32, reg32) = "atom.acquire.cta.add.u32",
        sass ["ATOM.E.ADD.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn atom_acquire_gpu_add_u32(u32, reg32) = "atom.acquire.gpu.add.u32",
        sass ["CCTL.IVALL", "ATOM.E.ADD.STRONG.GPU"], forbid ["MEMBAR"];
    pub unsafe fn atom_acquire_sys_add_u32(u32, reg32) = "atom.acquire.sys.add.u32",
        sass ["CCTL.IVALL", "ATOM.E.ADD.STRONG.SYS"], forbid ["MEMBAR"];
    pub unsafe fn atom_release_cta_add_u32(u32, reg32) = "atom.release.cta.add.u32",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_release_gpu_add_u32(u32, reg32) = "atom.release.gpu.add.u32",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.ADD.STRONG.GPU"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_release_sys_add_u32(u32, reg32) = "atom.release.sys.add.u32",
        sass ["MEMBAR.ALL.SYS", "ATOM.E.ADD.STRONG.SYS"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_acq_rel_cta_add_u32(u32, reg32) = "atom.acq_rel.cta.add.u32",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"];
    pub unsafe fn atom_acq_rel_gpu_add_u32(u32, reg32) = "atom.acq_rel.gpu.add.u32",
        sass ["MEMBAR.ALL.GPU", "CCTL.IVALL", "ATOM.E.ADD.STRONG.GPU"];
    pub unsafe fn atom_acq_rel_sys_add_u32(u32, reg32) = "atom.acq_rel.sys.add.u32",
        sass ["MEMBAR.ALL.SYS", "CCTL.IVALL", "ATOM.E.ADD.STRONG.SYS"];
    pub unsafe fn atom_relaxed_cta_add_u64(u64, reg64) = "atom.relaxed.cta.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_relaxed_gpu_add_u64(u64, reg64) = "atom.relaxed.gpu.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_relaxed_sys_add_u64(u64, reg64) = "atom.relaxed.sys.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn atom_acquire_cta_add_u64(u64, reg64) = "atom.acquire.cta.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn atom_acquire_gpu_add_u64(u64, reg64) = "atom.acquire.gpu.add.u64",
        sass ["CCTL.IVALL", "ATOM.E.ADD.64.STRONG.GPU"], forbid ["MEMBAR"];
    pub unsafe fn atom_acquire_sys_add_u64(u64, reg64) = "atom.acquire.sys.add.u64",
        sass ["CCTL.IVALL", "ATOM.E.ADD.64.STRONG.SYS"], forbid ["MEMBAR"];
    pub unsafe fn atom_release_cta_add_u64(u64, reg64) = "atom.release.cta.add.u64",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_release_gpu_add_u64(u64, reg64) = "atom.release.gpu.add.u64",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.ADD.64.STRONG.GPU"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_release_sys_add_u64(u64, reg64) = "atom.release.sys.add.u64",
        sass ["MEMBAR.ALL.SYS", "ATOM.E.ADD.64.STRONG.SYS"], forbid ["CCTL.IVALL"];
    pub unsafe fn atom_acq_rel_cta_add_u64(u64, reg64) = "atom.acq_rel.cta.add.u64",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"];
    pub unsafe fn atom_acq_rel_gpu_add_u64(u64, reg64) = "atom.acq_rel.gpu.add.u64",
        sass ["MEMBAR.ALL.GPU", "CCTL.IVALL", "ATOM.E.ADD.64.STRONG.GPU"];
    pub unsafe fn atom_acq_rel_sys_add_u64(u64, reg64) = "atom.acq_rel.sys.add.u64",
        sass ["MEMBAR.ALL.SYS", "CCTL.IVALL", "ATOM.E.ADD.64.STRONG.SYS"];
    /// Global state space, so no generic-address dispatch (a 64-bit generic atomic also carries a
    /// shared-memory fallback).
    pub unsafe fn atom_relaxed_gpu_global_add_u64(u64, reg64) = "atom.relaxed.gpu.global.add.u64",
        sass ["ATOMG.E.ADD.64.STRONG.GPU"], forbid ["CCTL.IVALL"];
}

atom! {
    table = ATOM_MAX, isa = "PTX 6.0, sm_70",
    effect = "Replaces the value at `ptr` with the larger of it and `value`, and returns the value before.";
    pub unsafe fn atom_release_gpu_max_u64(u64, reg64) = "atom.release.gpu.max.u64",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.MAX.64.STRONG.GPU"], forbid ["CCTL.IVALL"];
    /// Global state space (no generic-address dispatch).
    pub unsafe fn atom_release_gpu_global_max_u64(u64, reg64) = "atom.release.gpu.global.max.u64",
        sass ["MEMBAR.ALL.GPU", "ATOMG.E.MAX.64.STRONG.GPU"];
}

atom! {
    table = ATOM_INC, isa = "PTX 6.0, sm_70",
    effect = "Stores `old >= value ? 0 : old + 1` at `ptr`, where `old` is the value there, and returns `old`.";
    pub unsafe fn atom_acq_rel_gpu_inc_u32(u32, reg32) = "atom.acq_rel.gpu.inc.u32",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.INC.STRONG.GPU", "CCTL.IVALL"];
}

red! {
    table = RED, isa = "PTX 6.0, sm_70", effect = "Adds `value` to the value at `ptr`.";
    pub unsafe fn red_relaxed_cta_add_u32(u32, reg32) = "red.relaxed.cta.add.u32",
        sass ["ATOM.E.ADD.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_relaxed_gpu_add_u32(u32, reg32) = "red.relaxed.gpu.add.u32",
        sass ["ATOM.E.ADD.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_relaxed_sys_add_u32(u32, reg32) = "red.relaxed.sys.add.u32",
        sass ["ATOM.E.ADD.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_release_cta_add_u32(u32, reg32) = "red.release.cta.add.u32",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"], forbid ["CCTL.IVALL"];
    pub unsafe fn red_release_gpu_add_u32(u32, reg32) = "red.release.gpu.add.u32",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.ADD.STRONG.GPU"], forbid ["CCTL.IVALL"];
    pub unsafe fn red_release_sys_add_u32(u32, reg32) = "red.release.sys.add.u32",
        sass ["MEMBAR.ALL.SYS", "ATOM.E.ADD.STRONG.SYS"], forbid ["CCTL.IVALL"];
    pub unsafe fn red_relaxed_cta_add_u64(u64, reg64) = "red.relaxed.cta.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_relaxed_gpu_add_u64(u64, reg64) = "red.relaxed.gpu.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_relaxed_sys_add_u64(u64, reg64) = "red.relaxed.sys.add.u64",
        sass ["ATOM.E.ADD.64.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn red_release_cta_add_u64(u64, reg64) = "red.release.cta.add.u64",
        sass ["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"], forbid ["CCTL.IVALL"];
    pub unsafe fn red_release_gpu_add_u64(u64, reg64) = "red.release.gpu.add.u64",
        sass ["MEMBAR.ALL.GPU", "ATOM.E.ADD.64.STRONG.GPU"], forbid ["CCTL.IVALL"];
    pub unsafe fn red_release_sys_add_u64(u64, reg64) = "red.release.sys.add.u64",
        sass ["MEMBAR.ALL.SYS", "ATOM.E.ADD.64.STRONG.SYS"], forbid ["CCTL.IVALL"];
    /// The semaphore signal, on global memory (local or peer-mapped) without generic-address
    /// dispatch.
    pub unsafe fn red_release_sys_global_add_u64(u64, reg64) = "red.release.sys.global.add.u64",
        sass ["MEMBAR.ALL.SYS", "REDG.E.ADD.64.STRONG.SYS"], forbid ["multimem"];
    /// Global state space (no generic-address dispatch).
    pub unsafe fn red_relaxed_sys_global_add_u64(u64, reg64) = "red.relaxed.sys.global.add.u64",
        sass ["REDG.E.ADD.64.STRONG.SYS"], forbid ["multimem", "MEMBAR"];
}
