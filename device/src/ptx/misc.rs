//! Control instructions.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;

hand! {
    table = CONTROL;

    #[check("trap" [no_alias], sass ["BPT.TRAP"], kernel |p: *mut u32| { if *p == 7 { trap() } })]
    /// `trap;` (PTX 1.0): aborts the kernel; the host's next synchronize reports a launch failure.
    #[inline(always)]
    pub fn trap() -> ! {
        // SAFETY: `trap` ends the kernel; it touches no memory the program relies on.
        unsafe { asm!(concat!(mnemonic!(), ";"), options(noreturn, nostack)) }
    }

    #[check("exit" [no_alias], sass ["EXIT"], kernel |p: *mut u32| { if *p == 7 { exit() } *p = 1; })]
    /// `exit;` (PTX 1.0): ends the calling thread. CTA-wide barriers stop waiting for it (an
    /// exited thread counts as arrived at a `barrier.sync` for all threads); the kernel completes
    /// normally once every thread has exited.
    #[inline(always)]
    pub fn exit() -> ! {
        // SAFETY: `exit` ends this thread; it touches no memory the program relies on.
        unsafe { asm!(concat!(mnemonic!(), ";"), options(noreturn, nostack)) }
    }

    #[check("nanosleep.u32", sass ["NANOSLEEP"], kernel |p: *mut u32| { nanosleep(*p); })]
    /// `nanosleep.u32 t;` (PTX 6.3, sm_70): suspends the thread for about `ns` nanoseconds (at most
    /// one millisecond).
    #[inline(always)]
    pub fn nanosleep(ns: u32) {
        // SAFETY: a timed suspension; no memory access.
        unsafe { asm!(concat!(mnemonic!(), " {t};"), t = in(reg32) ns, options(nomem, nostack)) };
    }

    // The convergent intrinsic: `bar.sync 0;` in the PTX.
    #[check("bar.sync", sass ["BAR.SYNC.DEFER_BLOCKING 0x0"], kernel |p: *mut u32| { *p = 1; bar_sync(); })]
    /// `bar.sync 0;` (PTX 1.0): barrier over all threads of the CTA, orders their shared and global
    /// memory accesses.
    ///
    /// Built on the compiler's barrier intrinsic (`__syncthreads`), not on inline assembly: LLVM
    /// knows the intrinsic is *convergent* and never copies it into the arms of a branch. An inline
    /// `bar.sync` is an ordinary call to LLVM, which may duplicate it into both arms of
    /// `if leader { .. } bar_sync(); if leader { .. }` to skip the second test; `bar.sync` is
    /// `barrier.sync.aligned`, and a warp reaching two different aligned barrier instructions is
    /// undefined behaviour. Use it where every thread of each warp reaches the barrier together
    /// (uniform code); after code in which some threads may still be spinning or lag behind
    /// (independent thread scheduling), use [`barrier_sync`] (or `sync::block_barrier`, safe).
    ///
    /// # Safety
    /// Every thread of each warp reaches this call converged (all its non-exited threads
    /// together, not after a divergent branch or spin), and every non-exited thread of the CTA
    /// reaches it: `.aligned` makes anything else undefined.
    #[inline(always)]
    pub unsafe fn bar_sync() {
        // SAFETY: the caller's contract above (converged warps, every thread of the CTA).
        unsafe { core::arch::nvptx::_syncthreads() };
    }

    #[check("barrier.sync", also ["barrier.sync 0"], sass ["BAR.SYNC.DEFER_BLOCKING 0x0"],
        kernel |p: *mut u32| { *p = 1; barrier_sync(); })]
    /// `barrier.sync 0;` (PTX 6.0, sm_70): the CTA barrier without `.aligned`, for code where the
    /// threads of a warp may reach it at different times (after a divergent spin-wait). `bar.sync`
    /// is `barrier.sync.aligned` and is undefined when a warp arrives diverged. Being inline assembly
    /// it may be duplicated into the arms of a branch by the compiler; without `.aligned` that stays
    /// correct, since every thread still arrives at barrier 0 exactly once.
    #[inline(always)]
    pub fn barrier_sync() {
        // SAFETY: a CTA barrier; every thread of the CTA must reach it (caller's contract in callers).
        unsafe { asm!(concat!(mnemonic!(), " 0;"), options(nostack)) };
    }

    #[check("bar.warp.sync", sass [], no_sass "a full-mask warp barrier in converged code may compile to no instruction",
        kernel |p: *mut u32| { *p = 1; bar_warp_sync_all(); })]
    /// `bar.warp.sync 0xffffffff;` (PTX 6.0, sm_70): barrier over the 32 threads of the calling
    /// warp, ordering their memory accesses (CUDA's `__syncwarp()`). Every thread of the warp must
    /// reach it.
    ///
    /// # Safety
    /// All 32 threads of the warp reach this call (none exited, none taking another path): a
    /// thread of the mask that never arrives makes the barrier undefined.
    #[inline(always)]
    pub unsafe fn bar_warp_sync_all() {
        // SAFETY: a warp barrier; every thread of the warp reaches it (the caller's contract).
        unsafe { asm!(concat!(mnemonic!(), " 0xffffffff;"), options(nostack)) };
    }
}

no_operands! {
    table = GRID_DEPENDENCIES;
    /// Waits until every grid this one depends on through programmatic stream serialization has
    /// completed and its memory operations are visible. Returns at once in a grid launched without
    /// that dependency.
    pub fn griddepcontrol_wait() = "griddepcontrol.wait" ("PTX 7.8, sm_90"), sass ["ACQBULK"];
    /// Lets the grid that depends on this one through programmatic stream serialization be
    /// scheduled once every block of this grid has executed it (or exited). It orders no memory:
    /// the dependent still waits with [`griddepcontrol_wait`].
    pub fn griddepcontrol_launch_dependents() = "griddepcontrol.launch_dependents" ("PTX 7.8, sm_90"),
        sass ["PREEXIT"];
}
