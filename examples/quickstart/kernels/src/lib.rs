// kernels/src/lib.rs
#![no_std]
#![feature(abi_ptx)]
use mscclpp_device::bulk::{self, BulkBarrier};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::{GlobalPtr, SharedPtr};
use mscclpp_device::ptx::sreg;

/// Copies `bytes` from `src` to `dst` through shared memory with the copy engine. Thread 0 does
/// all of it; the other threads of the block return at once.
///
/// # Safety
/// `dst` and `src` hold `bytes` bytes and are 16-byte aligned; `bytes` is a multiple of 16; the
/// launch has `128 + bytes` bytes of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn copy_tile(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u32) {
    if sreg::tid_x() != 0 {
        return; // one thread drives the copy: the barrier expects exactly one arrival
    }
    let bar: SharedPtr<BulkBarrier> = SharedPtr::dynamic();
    let tile = SharedPtr::<u8>::dynamic().byte_add(128);
    // SAFETY: the barrier and the tile are in this launch's dynamic shared memory, and only this
    // thread uses them; the caller guarantees the sizes and alignments.
    unsafe {
        bar.init(1); // one arrival per phase: this thread's
        bar.arrive_and_expect(bytes); // arrive, expecting `bytes` to land, then issue the load
        bulk::bulk_load(tile, src, bytes, bar);
        let mut phase = 0;
        bar.wait(&mut phase, SpinBudget::DEFAULT); // traps with a message if it never completes
        bulk::bulk_store(dst, tile, bytes);
        bulk::bulk_store_commit();
        bulk::bulk_store_wait::<0>();
    }
}
