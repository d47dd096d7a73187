//! The port channel: data movement by the host proxy, requested through the trigger FIFO.
//!
//! ```text
//!  GPU (this rank)                 host proxy thread                  peer GPU
//!  put_with_signal(d, s, n) ─push─► Data: copy src+s -> dst+d (stream)
//!                                   Flag: then write peer's inbound  ──► wait(): inbound >= expected
//!  flush(): push Sync, sync(pos) ◄── Sync: stream drained, tail = pos+1
//! ```
//!
//! Requests of one proxy run in FIFO order on one CUDA stream, so a Flag is seen by the peer only
//! after the data of the puts before it has landed. `flush` returns once every earlier request
//! of this proxy has completed, so the source may be overwritten after it.

use crate::abi::DeviceAbi;
use crate::fifo::FifoDeviceHandle;
use crate::semaphore::Host2DeviceSemaphore;

/// A port channel handle, passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PortChannel {
    /// The FIFO of the proxy that serves this channel.
    pub fifo: FifoDeviceHandle,
    /// Signals from the peer's proxy arrive here (this GPU's memory).
    pub semaphore: Host2DeviceSemaphore,
    /// The proxy's id of the semaphore on the peer that `signal` increments.
    pub semaphore_id: u32,
    /// The proxy's id of the destination memory (the peer's buffer).
    pub dst_memory_id: u32,
    /// The proxy's id of the source memory (this GPU's buffer).
    pub src_memory_id: u32,
    /// Padding (zero).
    pub _pad: u32,
}
static_assertions::assert_eq_size!(PortChannel, [u64; 9]);
static_assertions::const_assert_eq!(core::mem::offset_of!(PortChannel, semaphore), 40);
static_assertions::const_assert_eq!(core::mem::offset_of!(PortChannel, semaphore_id), 56);
// SAFETY: repr(C), no implicit padding (asserted), addresses and integers only.
unsafe impl DeviceAbi for PortChannel {}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::poll::{SpinBudget, fail};
    use crate::trigger::{ProxyTrigger, Request, TriggerError, field32, kind};

    #[cold]
    #[inline(never)]
    fn bad_trigger(e: TriggerError) -> ! {
        fail(e.message())
    }

    /// `v` as a 32-bit trigger field; traps with `too_large`'s message when it does not fit.
    #[inline(always)]
    fn field(v: u64, too_large: TriggerError) -> u32 {
        match field32(v, too_large) {
            Ok(v) => v,
            Err(e) => bad_trigger(e),
        }
    }

    impl PortChannel {
        #[inline(always)]
        unsafe fn request(&self, kind: u8, dst_off: u64, src_off: u64, bytes: u64, budget: SpinBudget) -> u64 {
            let request = Request::Transfer {
                kind,
                dst_offset: field(dst_off, TriggerError::DstOffsetTooLarge),
                src_offset: field(src_off, TriggerError::SrcOffsetTooLarge),
                size: field(bytes, TriggerError::SizeTooLarge),
                dst_memory: self.dst_memory_id,
                src_memory: self.src_memory_id,
                semaphore: self.semaphore_id,
            };
            let t = match ProxyTrigger::encode(request) {
                Ok(t) => t,
                Err(e) => bad_trigger(e),
            };
            // SAFETY: the handle was built by the host (caller's contract).
            unsafe { self.fifo.push(t, budget) }
        }

        /// Asks the proxy to copy `bytes` from `src_off` of the source memory to `dst_off` of the
        /// destination memory. Returns the request's FIFO position.
        ///
        /// # Safety
        /// The handle must come from the host runtime and its proxy must be running; the
        /// ranges must lie inside the registered memories (the proxy rejects them otherwise).
        #[inline(always)]
        pub unsafe fn put(&self, dst_off: u64, src_off: u64, bytes: u64, budget: SpinBudget) -> u64 {
            // SAFETY: forwarded.
            unsafe { self.request(kind::DATA, dst_off, src_off, bytes, budget) }
        }

        /// Signals the peer's semaphore once the earlier puts of this proxy have landed.
        ///
        /// # Safety
        /// As for [`PortChannel::put`].
        #[inline(always)]
        pub unsafe fn signal(&self, budget: SpinBudget) -> u64 {
            // SAFETY: forwarded.
            unsafe { self.request(kind::FLAG, 0, 0, 0, budget) }
        }

        /// A put followed by a signal, in one request.
        ///
        /// # Safety
        /// As for [`PortChannel::put`].
        #[inline(always)]
        pub unsafe fn put_with_signal(&self, dst_off: u64, src_off: u64, bytes: u64, budget: SpinBudget) -> u64 {
            // SAFETY: forwarded.
            unsafe { self.request(kind::DATA | kind::FLAG, dst_off, src_off, bytes, budget) }
        }

        /// A put, a signal and a flush in one request; returns once the copy has completed, so
        /// the source may be overwritten at once.
        ///
        /// # Safety
        /// As for [`PortChannel::put`].
        #[inline(always)]
        pub unsafe fn put_with_signal_and_flush(&self, dst_off: u64, src_off: u64, bytes: u64, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe {
                let pos = self.request(kind::DATA | kind::FLAG | kind::SYNC, dst_off, src_off, bytes, budget);
                self.fifo.sync(pos, budget);
            }
        }

        /// Waits until every earlier request of this proxy has completed.
        ///
        /// # Safety
        /// As for [`PortChannel::put`].
        #[inline(always)]
        pub unsafe fn flush(&self, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe {
                let pos = self.request(kind::SYNC, 0, 0, 0, budget);
                self.fifo.sync(pos, budget);
            }
        }

        /// Asks the proxy to add `value` to the u64 at `dst_off` of the destination memory
        /// (after earlier requests of this proxy). Returns the request's position.
        ///
        /// # Safety
        /// As for [`PortChannel::put`]; `dst_off` 8-byte aligned.
        #[inline(always)]
        pub unsafe fn atomic_add(&self, dst_off: u64, value: u64, budget: SpinBudget) -> u64 {
            let request = Request::AtomicAdd {
                dst_offset: field(dst_off, TriggerError::DstOffsetTooLarge),
                value,
                dst_memory: self.dst_memory_id,
            };
            let t = match ProxyTrigger::encode(request) {
                Ok(t) => t,
                Err(e) => bad_trigger(e),
            };
            // SAFETY: forwarded.
            unsafe { self.fifo.push(t, budget) }
        }

        /// Consumes one signal from the peer if one has arrived.
        ///
        /// # Safety
        /// As for [`PortChannel::put`]; one thread at a time per channel.
        #[inline(always)]
        pub unsafe fn poll(&self) -> bool {
            // SAFETY: forwarded.
            unsafe { self.semaphore.poll() }
        }

        /// Waits for the next signal from the peer (the peer's data before it is visible).
        ///
        /// # Safety
        /// As for [`PortChannel::poll`].
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe { self.semaphore.wait(budget) }
        }
    }
}
