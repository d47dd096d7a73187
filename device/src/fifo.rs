//! The trigger FIFO's device side: the producer handle and its GPU memory facade.
//!
//! The protocol (positions, laps, commit bit) is in [`crate::protocol::fifo`]; the triggers it
//! carries are encoded by [`crate::trigger`].

use crate::abi::DeviceAbi;
use crate::ptr::GlobalPtr;
use crate::trigger::ProxyTrigger;

/// The producer side of a trigger FIFO, passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FifoDeviceHandle {
    /// The ring of `size` triggers (pinned host memory mapped into the GPU).
    pub triggers: GlobalPtr<ProxyTrigger>,
    /// The next free position (this GPU's memory; all producers increment it).
    pub head: GlobalPtr<u64>,
    /// The consumer's tail: positions below it are handled (pinned host memory).
    pub tail: GlobalPtr<u64>,
    /// The producers' cached copy of the tail (this GPU's memory).
    pub tail_cache: GlobalPtr<u64>,
    /// Number of slots (a power of two).
    pub size: u32,
    /// Padding (zero).
    pub _pad: u32,
}
static_assertions::assert_eq_size!(FifoDeviceHandle, [u64; 5]);
static_assertions::const_assert_eq!(core::mem::offset_of!(FifoDeviceHandle, tail_cache), 24);
static_assertions::const_assert_eq!(core::mem::offset_of!(FifoDeviceHandle, size), 32);
// SAFETY: repr(C), no padding (asserted), addresses and integers only.
unsafe impl DeviceAbi for FifoDeviceHandle {}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, Gpu, Sys};
    use crate::poll::{SpinBudget, spin_until};
    use crate::protocol::{Waiter, fifo as proto};

    struct Budgeted {
        budget: SpinBudget,
        name: &'static core::ffi::CStr,
    }
    impl Waiter for Budgeted {
        #[inline(always)]
        fn wait_until<F: FnMut() -> bool>(&mut self, cond: F) {
            spin_until(self.budget, self.name, cond);
        }
    }

    /// The producer facade of a handle. Built only inside the `unsafe` methods of
    /// [`FifoDeviceHandle`], whose contract is that the handle describes a live FIFO: a handle
    /// itself is plain data that safe code can fill with any addresses.
    struct Producer<'a>(&'a FifoDeviceHandle);

    // SAFETY: a `Producer` exists only inside `FifoDeviceHandle::{push, poll, sync}`, whose
    // callers guarantee that the handle was built by the host for this GPU: `size` is the ring's
    // power-of-two slot count, the ring, head, tail and cache addresses are valid for the
    // accesses below, and each method uses the ordering the trait asks for (the table
    // `protocol::fifo::order`, which `tests/fifo_ptx.rs` holds these instructions to).
    unsafe impl proto::ProducerMem for Producer<'_> {
        #[inline(always)]
        fn size(&self) -> u64 {
            self.0.size as u64
        }
        #[inline(always)]
        fn fetch_add_head(&self) -> u64 {
            // SAFETY: `head` is this GPU's counter (handle built by the host).
            unsafe { crate::ptx::atom_red::atom_relaxed_gpu_global_add_u64(self.0.head.as_ptr(), 1) }
        }
        #[inline(always)]
        fn tail_cache(&self) -> u64 {
            // Partner: the release max in `raise_cache` (any producer of this GPU).
            // SAFETY: as above.
            unsafe { atomic::load::<Acquire, Gpu, u64>(self.0.tail_cache.as_ptr()) }
        }
        #[inline(always)]
        fn load_tail(&self) -> u64 {
            // Partner: the consumer's release store of the tail (host `store_tail`).
            // SAFETY: `tail` is mapped host memory.
            unsafe { atomic::load::<Acquire, Sys, u64>(self.0.tail.as_ptr()) }
        }
        #[inline(always)]
        fn raise_cache(&self, tail: u64) {
            // Partner: the acquire load in `tail_cache`.
            // SAFETY: `tail_cache` is this GPU's memory.
            unsafe { crate::ptx::atom_red::atom_release_gpu_global_max_u64(self.0.tail_cache.as_ptr(), tail) };
        }
        #[inline(always)]
        fn store_word0(&self, slot: u64, w0: u64) {
            // No partner of its own: the release store of word 1 that follows (`store_word1`)
            // orders it before any consumer read of it. Relaxed at system scope: an 8-byte
            // strong access, never a data race with the host.
            // SAFETY: `slot < size`; the ring is 16-byte aligned mapped host memory, word 0 of a
            // trigger at its start.
            unsafe {
                crate::ptx::ld_st::st_relaxed_sys_global_u64(self.0.triggers.add(slot as usize).as_ptr().cast(), w0)
            };
        }
        #[inline(always)]
        fn store_word1(&self, slot: u64, w1: u64) {
            // Partner: the consumer's acquire load of word 1 (host `load_word1`), which then
            // reads word 0: the release keeps word 0's store (and everything before the push)
            // before this one.
            // SAFETY: `slot < size`; word 1 is the second u64 of the trigger, 8-byte aligned.
            unsafe {
                crate::ptx::ld_st::st_release_sys_global_u64(
                    self.0.triggers.add(slot as usize).as_ptr().cast::<u64>().add(1),
                    w1,
                )
            };
        }
    }

    impl FifoDeviceHandle {
        /// Pushes a trigger and returns its position. When the ring is full, waits for the
        /// consumer (traps with a message if `budget` runs out).
        ///
        /// # Safety
        /// The handle must have been built by the host for this GPU and its consumer must be
        /// running (or the wait will time out).
        #[inline(always)]
        pub unsafe fn push(&self, trigger: ProxyTrigger, budget: SpinBudget) -> u64 {
            proto::push(&Producer(self), trigger, &mut Budgeted { budget, name: c"Fifo::push" })
        }

        /// Whether the consumer has handled position `pos`.
        ///
        /// # Safety
        /// As for [`FifoDeviceHandle::push`].
        #[inline(always)]
        pub unsafe fn poll(&self, pos: u64) -> bool {
            proto::poll(&Producer(self), pos)
        }

        /// Waits until the consumer has handled position `pos` (traps if `budget` runs out).
        ///
        /// # Safety
        /// As for [`FifoDeviceHandle::push`].
        #[inline(always)]
        pub unsafe fn sync(&self, pos: u64, budget: SpinBudget) {
            proto::sync(&Producer(self), pos, &mut Budgeted { budget, name: c"Fifo::sync" });
        }
    }
}
