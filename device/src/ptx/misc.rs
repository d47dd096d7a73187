//! Control instructions.

use super::asm;

/// `trap;` (PTX 1.0): aborts the kernel; the host's next synchronize reports a launch failure.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` ends the kernel; it touches no memory the program relies on.
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}

/// `exit;` (PTX 1.0): ends the calling thread. CTA-wide barriers stop waiting for it (an exited
/// thread counts as arrived at a `barrier.sync` for all threads); the kernel completes normally
/// once every thread has exited.
#[inline(always)]
pub fn exit() -> ! {
    // SAFETY: `exit` ends this thread; it touches no memory the program relies on.
    unsafe { asm!("exit;", options(noreturn, nostack)) }
}

/// `nanosleep.u32 t;` (PTX 6.3, sm_70): suspends the thread for about `ns` nanoseconds (at most
/// one millisecond).
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: a timed suspension; no memory access.
    unsafe { asm!("nanosleep.u32 {t};", t = in(reg32) ns, options(nomem, nostack)) };
}

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
/// (independent thread scheduling), use [`barrier_sync`].
#[inline(always)]
pub fn bar_sync() {
    // SAFETY: a CTA barrier; every thread of the CTA must reach it (caller's contract in callers).
    unsafe { core::arch::nvptx::_syncthreads() };
}

/// `barrier.sync 0;` (PTX 6.0, sm_70): the CTA barrier without `.aligned`, for code where the
/// threads of a warp may reach it at different times (after a divergent spin-wait). `bar.sync`
/// is `barrier.sync.aligned` and is undefined when a warp arrives diverged. Being inline assembly
/// it may be duplicated into the arms of a branch by the compiler; without `.aligned` that stays
/// correct, since every thread still arrives at barrier 0 exactly once.
#[inline(always)]
pub fn barrier_sync() {
    // SAFETY: a CTA barrier; every thread of the CTA must reach it (caller's contract in callers).
    unsafe { asm!("barrier.sync 0;", options(nostack)) };
}

/// `griddepcontrol.wait;` (PTX 7.8, sm_90): waits until every grid this one depends on through
/// programmatic stream serialization has completed and its memory operations are visible. Returns
/// at once in a grid launched without that dependency.
#[inline(always)]
pub fn griddepcontrol_wait() {
    // SAFETY: a wait on the preceding grids; it orders memory like a grid completion.
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
}

/// `griddepcontrol.launch_dependents;` (PTX 7.8, sm_90): lets the grid that depends on this one
/// through programmatic stream serialization be scheduled once every block of this grid has
/// executed it (or exited). It orders no memory: the dependent still waits with
/// [`griddepcontrol_wait`].
#[inline(always)]
pub fn griddepcontrol_launch_dependents() {
    // SAFETY: a scheduling hint; no memory access.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
}
