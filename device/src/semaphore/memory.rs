//! The semaphores between two GPUs and from the host to a GPU (see the parent module's docs).

use crate::abi::DeviceAbi;
use crate::ptr::GlobalPtr;

/// A semaphore between two GPUs through peer-mapped memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MemoryDevice2DeviceSemaphore {
    /// This side's counter, written by the peer (in this GPU's memory).
    pub inbound: GlobalPtr<u64>,
    /// The peer's inbound counter, mapped into this GPU's address space.
    pub remote_inbound: GlobalPtr<u64>,
    /// How many signals this side has consumed (this GPU's memory, persists across launches).
    pub expected: GlobalPtr<u64>,
    /// How many signals this side has sent (this GPU's memory, persists across launches).
    pub outbound: GlobalPtr<u64>,
}
static_assertions::assert_eq_size!(MemoryDevice2DeviceSemaphore, [u64; 4]);
static_assertions::assert_eq_align!(MemoryDevice2DeviceSemaphore, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(MemoryDevice2DeviceSemaphore, outbound), 24);
// SAFETY: repr(C) of four 8-byte addresses; identical layout on host and device.
unsafe impl DeviceAbi for MemoryDevice2DeviceSemaphore {}

/// A semaphore a host thread signals (the proxy's `Flag` operation) and a GPU waits on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Host2DeviceSemaphore {
    /// The counter the host increments (this GPU's memory).
    pub inbound: GlobalPtr<u64>,
    /// How many signals this side has consumed.
    pub expected: GlobalPtr<u64>,
}
static_assertions::assert_eq_size!(Host2DeviceSemaphore, [u64; 2]);
// SAFETY: repr(C) of two 8-byte addresses.
unsafe impl DeviceAbi for Host2DeviceSemaphore {}

#[cfg(any(target_arch = "nvptx64", doc))]
pub use device::CachedMemorySemaphore;

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, Relaxed, Sys};
    use crate::poll::{SpinBudget, spin_until};
    use crate::semaphore::reached;

    /// Spins until `*inbound` reaches `target` (wrap-around safe).
    #[inline(always)]
    unsafe fn wait_until<const ACQUIRE: bool>(
        inbound: GlobalPtr<u64>,
        target: u64,
        budget: SpinBudget,
        name: &'static core::ffi::CStr,
    ) {
        spin_until(budget, name, || {
            // Partner: the signaller's release store (device) or the proxy's stream write (host).
            // SAFETY: `inbound` is a valid counter (caller's contract).
            let v = unsafe {
                if ACQUIRE {
                    atomic::load::<Acquire, Sys, u64>(inbound.as_ptr())
                } else {
                    atomic::load::<Relaxed, Sys, u64>(inbound.as_ptr())
                }
            };
            reached(v, target)
        });
    }

    /// Waits until `*inbound` reaches `*expected + 1`, then records the consumption.
    #[inline(always)]
    unsafe fn wait_inbound<const ACQUIRE: bool>(
        inbound: GlobalPtr<u64>,
        expected: GlobalPtr<u64>,
        budget: SpinBudget,
        name: &'static core::ffi::CStr,
    ) {
        // `expected` is private to the one thread using this handle: plain accesses (L1-cacheable;
        // L1 does not outlive a launch, so the next launch reads the value back from memory).
        // SAFETY: `expected` is this side's private counter (caller's contract).
        let target = unsafe { expected.as_ptr().read() }.wrapping_add(1);
        // SAFETY: as above.
        unsafe { expected.as_ptr().write(target) };
        // SAFETY: forwarded.
        unsafe { wait_until::<ACQUIRE>(inbound, target, budget, name) }
    }

    /// Consumes one signal if one is there.
    #[inline(always)]
    unsafe fn poll_inbound(inbound: GlobalPtr<u64>, expected: GlobalPtr<u64>) -> bool {
        // SAFETY: valid counters (caller's contract); `expected` is private to this thread.
        unsafe {
            let target = expected.as_ptr().read().wrapping_add(1);
            // Partner: the signaller's release.
            let v = atomic::load::<Acquire, Sys, u64>(inbound.as_ptr());
            if reached(v, target) {
                expected.as_ptr().write(target);
                true
            } else {
                false
            }
        }
    }

    impl MemoryDevice2DeviceSemaphore {
        /// Signals the peer: all earlier writes of this thread (and those it synchronised with)
        /// become visible to a peer that waits and acquires this signal.
        ///
        /// # Safety
        /// The handle's addresses must be valid (built by the host for this GPU), and no other
        /// thread may signal the same peer counter concurrently (one signaller per inbound).
        #[inline(always)]
        pub unsafe fn signal(&self) {
            // SAFETY: `outbound` is this side's private counter; `remote_inbound` the peer's
            // counter mapped here, written by this side only (caller's contract).
            unsafe {
                // `outbound` is private to the one signalling thread: plain accesses.
                let n = self.outbound.as_ptr().read().wrapping_add(1);
                self.outbound.as_ptr().write(n);
                // Partner: the peer's acquire load in `wait`/`poll`.
                crate::ptx::ld_st::st_release_sys_global_u64(self.remote_inbound.as_ptr(), n);
            }
        }

        /// Signals without ordering earlier writes (pair with explicit fences).
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::signal`].
        #[inline(always)]
        pub unsafe fn relaxed_signal(&self) {
            // SAFETY: as for `signal`.
            unsafe {
                // `outbound` is private to the one signalling thread: plain accesses.
                let n = self.outbound.as_ptr().read().wrapping_add(1);
                self.outbound.as_ptr().write(n);
                crate::ptx::ld_st::st_relaxed_sys_global_u64(self.remote_inbound.as_ptr(), n);
            }
        }

        /// Consumes one signal if one has arrived (acquire); never blocks.
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::signal`]; one thread at a time per handle.
        #[inline(always)]
        pub unsafe fn poll(&self) -> bool {
            // SAFETY: forwarded.
            unsafe { poll_inbound(self.inbound, self.expected) }
        }

        /// Waits for the next signal (acquire). Traps with a message if `budget` runs out.
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::poll`].
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe { wait_inbound::<true>(self.inbound, self.expected, budget, c"MemoryDevice2DeviceSemaphore::wait") }
        }

        /// Waits for the next signal with relaxed loads (pair with explicit fences).
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::poll`].
        #[inline(always)]
        pub unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe {
                wait_inbound::<false>(
                    self.inbound,
                    self.expected,
                    budget,
                    c"MemoryDevice2DeviceSemaphore::relaxed_wait",
                )
            }
        }
    }

    /// A [`MemoryDevice2DeviceSemaphore`] whose private counters (`expected`, `outbound`) live
    /// in registers while it exists: signal and wait then touch only the two inbound counters,
    /// as a hand-written flag exchange does. Made by [`MemoryDevice2DeviceSemaphore::cached`];
    /// dropping it writes the counters back, so a later launch (or a later handle of this
    /// thread) continues the count. Use it for a loop of signals and waits in one thread; while
    /// it exists, the plain handle must not be used for the same semaphore.
    #[derive(Debug)]
    pub struct CachedMemorySemaphore {
        handle: MemoryDevice2DeviceSemaphore,
        expected: u64,
        outbound: u64,
    }

    impl MemoryDevice2DeviceSemaphore {
        /// Loads the private counters into a [`CachedMemorySemaphore`].
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::signal`]; in addition, until the returned value
        /// is dropped, no other use of this semaphore's private counters (this handle, a copy of
        /// it, another cached value) may happen, or counts are lost.
        #[inline(always)]
        pub unsafe fn cached(&self) -> CachedMemorySemaphore {
            // SAFETY: private counters of this side (caller's contract).
            let (expected, outbound) = unsafe { (self.expected.as_ptr().read(), self.outbound.as_ptr().read()) };
            CachedMemorySemaphore { handle: *self, expected, outbound }
        }
    }

    impl CachedMemorySemaphore {
        /// As [`MemoryDevice2DeviceSemaphore::signal`] (release).
        ///
        /// # Safety
        /// The contract of [`MemoryDevice2DeviceSemaphore::cached`].
        #[inline(always)]
        pub unsafe fn signal(&mut self) {
            self.outbound = self.outbound.wrapping_add(1);
            // Partner: the peer's acquire load in `wait`/`poll`.
            // SAFETY: the peer's counter, written by this side only (caller's contract).
            unsafe { crate::ptx::ld_st::st_release_sys_global_u64(self.handle.remote_inbound.as_ptr(), self.outbound) }
        }

        /// As [`MemoryDevice2DeviceSemaphore::relaxed_signal`] (pair with explicit fences).
        ///
        /// # Safety
        /// The contract of [`MemoryDevice2DeviceSemaphore::cached`].
        #[inline(always)]
        pub unsafe fn relaxed_signal(&mut self) {
            self.outbound = self.outbound.wrapping_add(1);
            // SAFETY: as for `signal`.
            unsafe { crate::ptx::ld_st::st_relaxed_sys_global_u64(self.handle.remote_inbound.as_ptr(), self.outbound) }
        }

        /// As [`MemoryDevice2DeviceSemaphore::poll`] (acquire).
        ///
        /// # Safety
        /// The contract of [`MemoryDevice2DeviceSemaphore::cached`].
        #[inline(always)]
        pub unsafe fn poll(&mut self) -> bool {
            let target = self.expected.wrapping_add(1);
            // Partner: the signaller's release.
            // SAFETY: this side's inbound counter (caller's contract).
            let v = unsafe { atomic::load::<Acquire, Sys, u64>(self.handle.inbound.as_ptr()) };
            let got = reached(v, target);
            if got {
                self.expected = target;
            }
            got
        }

        /// As [`MemoryDevice2DeviceSemaphore::wait`] (acquire); traps when `budget` runs out.
        ///
        /// # Safety
        /// The contract of [`MemoryDevice2DeviceSemaphore::cached`].
        #[inline(always)]
        pub unsafe fn wait(&mut self, budget: SpinBudget) {
            self.expected = self.expected.wrapping_add(1);
            // SAFETY: this side's inbound counter (caller's contract).
            unsafe { wait_until::<true>(self.handle.inbound, self.expected, budget, c"CachedMemorySemaphore::wait") }
        }

        /// As [`MemoryDevice2DeviceSemaphore::relaxed_wait`] (pair with explicit fences).
        ///
        /// # Safety
        /// The contract of [`MemoryDevice2DeviceSemaphore::cached`].
        #[inline(always)]
        pub unsafe fn relaxed_wait(&mut self, budget: SpinBudget) {
            self.expected = self.expected.wrapping_add(1);
            // SAFETY: as for `wait`.
            unsafe {
                wait_until::<false>(self.handle.inbound, self.expected, budget, c"CachedMemorySemaphore::relaxed_wait")
            }
        }
    }

    impl Drop for CachedMemorySemaphore {
        #[inline(always)]
        fn drop(&mut self) {
            // SAFETY: the private counters this value was loaded from, which nothing else used
            // meanwhile (the contract of `cached`).
            unsafe {
                self.handle.expected.as_ptr().write(self.expected);
                self.handle.outbound.as_ptr().write(self.outbound);
            }
        }
    }

    impl Host2DeviceSemaphore {
        /// Consumes one host signal if one has arrived; never blocks.
        ///
        /// # Safety
        /// The handle's addresses must be valid; one thread at a time per handle.
        #[inline(always)]
        pub unsafe fn poll(&self) -> bool {
            // SAFETY: forwarded.
            unsafe { poll_inbound(self.inbound, self.expected) }
        }

        /// Waits for the next host signal (acquire). Traps with a message if `budget` runs out.
        ///
        /// # Safety
        /// As for [`Host2DeviceSemaphore::poll`].
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded.
            unsafe { wait_inbound::<true>(self.inbound, self.expected, budget, c"Host2DeviceSemaphore::wait") }
        }
    }
}
