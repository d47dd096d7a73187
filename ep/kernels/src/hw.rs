//! The device operations the kernel bodies (`body.rs`) use, each a thin wrapper over
//! `mscclpp-device`. The host crate's emulation test (`ep/tests/emulated.rs`) gives the same
//! names a CPU meaning (threads, a barrier per block, atomics) and runs the same bodies.

use mscclpp_device::atomic::{self, Acquire, Cta, Relaxed, Release, Sys};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::SharedPtr;
use mscclpp_device::ptx::{ld_st, misc, sreg};
use mscclpp_device::window::Window;

use crate::body::WARP;

/// This thread's index in its block.
#[inline(always)]
pub fn tid() -> u32 {
    sreg::tid_x()
}
/// Threads per block.
#[inline(always)]
pub fn ntid() -> u32 {
    sreg::ntid_x()
}
/// This block's index.
#[inline(always)]
pub fn ctaid() -> u32 {
    sreg::ctaid_x()
}
/// Blocks in the grid.
#[inline(always)]
pub fn nctaid() -> u32 {
    sreg::nctaid_x()
}
/// Waits until the kernel before this one on the stream has finished and its writes are
/// visible (`griddepcontrol.wait`; at once when launched without programmatic stream
/// serialization), then lets the next kernel be scheduled (`griddepcontrol.launch_dependents`).
/// Every thread calls it before its first memory access.
#[inline(always)]
pub fn follow_previous_grid() {
    misc::griddepcontrol_wait();
    misc::griddepcontrol_launch_dependents();
}
/// A barrier over the block (`barrier.sync 0`, correct after divergent waits too), after which
/// every warp runs converged (`bar.warp.sync`). A block barrier alone does not reconverge a warp:
/// one whose lanes took different paths before it (a wait in some lanes only, such as the count
/// waits of thread 0) can run everything after it as separate passes, one per group of lanes, and
/// copy at a fraction of its speed (seen: one warp of `ep_dispatch_window` kept its block 30%
/// longer).
/// Every thread of the block calls it, as `barrier.sync` needs; no thread of this crate's kernels
/// ends before its kernel's last barrier (no kernel returns early).
#[inline(always)]
pub fn sync_threads() {
    misc::barrier_sync();
    if ntid().is_multiple_of(WARP) {
        // SAFETY: every thread of the block reaches this barrier and none has exited (the
        // kernels' structure, above), and the block is a whole number of warps: all 32 lanes of
        // every warp arrive.
        unsafe { misc::bar_warp_sync_all() };
    }
}
/// The block's dynamic shared memory, as a generic pointer.
#[inline(always)]
pub fn shared_base() -> *mut u8 {
    SharedPtr::<u8>::dynamic().as_generic()
}
/// `ld.acquire.sys.u64`.
///
/// # Safety
/// `p` valid and 8-aligned.
#[inline(always)]
pub unsafe fn load_acquire(p: *const u64) -> u64 {
    // SAFETY: forwarded.
    unsafe { atomic::load::<Acquire, Sys, u64>(p) }
}
/// `st.release.sys.u64`.
///
/// # Safety
/// `p` valid and 8-aligned.
#[inline(always)]
pub unsafe fn store_release(p: *mut u64, v: u64) {
    // SAFETY: forwarded.
    unsafe { atomic::store::<Release, Sys, u64>(p, v) }
}
/// `red.relaxed.cta.add.u32` (a counter of this block, in shared memory).
///
/// # Safety
/// `p` valid and 4-aligned.
#[inline(always)]
pub unsafe fn red_add_cta(p: *mut u32, v: u32) {
    // SAFETY: forwarded.
    unsafe { atomic::red_add::<Relaxed, Cta, u32>(p, v) }
}
/// One 16-byte vector load.
///
/// # Safety
/// `p` valid global memory, 16-aligned.
#[inline(always)]
pub unsafe fn ld_v4(p: *const u32) -> [u32; 4] {
    // SAFETY: forwarded.
    unsafe { ld_st::ld_global_v4_u32(p) }
}
/// One 16-byte vector store.
///
/// # Safety
/// `p` valid global memory, 16-aligned.
#[inline(always)]
pub unsafe fn st_v4(p: *mut u32, v: [u32; 4]) {
    // SAFETY: forwarded.
    unsafe { ld_st::st_global_v4_u32(p, v) }
}
/// Spins until `cond()`; prints `name` and traps when `budget` runs out.
#[inline(always)]
pub fn spin_until(budget: SpinBudget, name: &'static core::ffi::CStr, cond: impl FnMut() -> bool) {
    mscclpp_device::poll::spin_until(budget, name, cond);
}
/// Prints `msg` and traps.
#[inline(always)]
#[track_caller]
pub fn fail(msg: &'static core::ffi::CStr) -> ! {
    mscclpp_device::poll::fail(msg)
}
/// `w.peer::<u8>(rank, offset)`, as an address: rank `rank`'s byte `offset` of the window.
///
/// # Safety
/// As for `Window::peer`.
#[inline(always)]
pub unsafe fn window_peer(w: &Window, rank: u32, offset: u64) -> u64 {
    // SAFETY: forwarded.
    unsafe { w.peer::<u8>(rank, offset) }.addr()
}
/// `w.signal(peer, slot)`: adds 1 to `peer`'s signal word of `slot` for this rank (release,
/// system scope).
///
/// # Safety
/// As for `Window::signal`.
#[inline(always)]
pub unsafe fn window_signal(w: &Window, peer: u32, slot: u32) {
    // SAFETY: forwarded.
    unsafe { w.signal(peer, slot) }
}
/// `w.wait_signal(slot, from, value, budget)`: waits (acquire) until this rank's signal word of
/// `slot` from `from` reaches `value`; prints and traps when `budget` runs out.
///
/// # Safety
/// As for `Window::wait_signal`.
#[inline(always)]
pub unsafe fn window_wait_signal(w: &Window, slot: u32, from: u32, value: u64, budget: SpinBudget) {
    // SAFETY: forwarded.
    unsafe { w.wait_signal(slot, from, value, budget) }
}
