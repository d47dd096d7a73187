//! The emulated switch channel: the switch channel's device API over unicast peer pointers, for
//! machines without NVLink multicast (or where it is switched off, as on machines whose drivers refuse it).
//!
//! ```text
//!  SwitchChannel (NVLS)                      EmulatedSwitchChannel
//!  reduce(i):    multimem.ld_reduce add      load element i from every rank's copy, add
//!  broadcast(i): multimem.st                 store element i into every rank's copy
//!  signal/wait:  multimem.red on a counter   memory semaphores with every other rank
//! ```
//!
//! Both implement [`SwitchGroup`](crate::channel::switch::SwitchGroup), so an algorithm written once against it runs on either; the
//! host picks the kind (`mscclpp_host::comm::Communicator::switch_channels`). The emulation moves
//! n times the bytes the switch would (every rank reads every copy), so it is a correctness
//! stand-in, not a performance one. `store_reduce` has no emulation (it would need one remote
//! atomic per lane and rank).
//!
//! Like a [`super::switch::SwitchChannel`], a handle's barrier is used by one thread at a time:
//! give each block its own handle (its own semaphores) over the same buffers.

use crate::abi::DeviceAbi;
use crate::ptr::GlobalPtr;
use crate::semaphore::MemoryDevice2DeviceSemaphore;

/// A buffer replicated on every rank, reached through peer pointers, with an all-ranks barrier
/// made of memory semaphores.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EmulatedSwitchChannel {
    /// Table of `n_ranks` addresses: rank r's copy of the buffer, mapped on this GPU.
    pub buffers: GlobalPtr<u64>,
    /// Table of `n_ranks` semaphore handles toward each rank (this rank's entry unused).
    pub semaphores: GlobalPtr<MemoryDevice2DeviceSemaphore>,
    /// The buffer's size in bytes (the same on every rank).
    pub size: u64,
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub n_ranks: u32,
}
static_assertions::assert_eq_size!(EmulatedSwitchChannel, [u64; 4]);
static_assertions::const_assert_eq!(core::mem::offset_of!(EmulatedSwitchChannel, rank), 24);
// SAFETY: repr(C), no implicit padding (asserted), addresses and integers only.
unsafe impl DeviceAbi for EmulatedSwitchChannel {}

impl EmulatedSwitchChannel {
    /// How many whole elements of type `V` the buffer holds (0 for a zero-sized `V`, which
    /// has no elements to address).
    pub const fn len_of<V>(&self) -> u64 {
        match self.size.checked_div(core::mem::size_of::<V>() as u64) {
            Some(n) => n,
            None => 0,
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::channel::switch::{SwitchElem, SwitchGroup};
    use crate::device_assert;
    use crate::poll::SpinBudget;

    impl EmulatedSwitchChannel {
        #[inline(always)]
        unsafe fn copy_of<V>(&self, rank: u32, index: usize) -> *mut V {
            device_assert!((index as u64) < self.len_of::<V>(), "EmulatedSwitchChannel: element index out of range");
            // SAFETY: the table holds `n_ranks` addresses (host contract), `rank < n_ranks`.
            unsafe { (*self.buffers.as_ptr().add(rank as usize) as *mut V).add(index) }
        }
    }

    impl SwitchGroup for EmulatedSwitchChannel {
        #[inline(always)]
        fn elements<V>(&self) -> u64 {
            self.len_of::<V>()
        }

        #[inline(always)]
        unsafe fn local<V>(&self, index: usize) -> GlobalPtr<V> {
            // SAFETY: the caller guarantees the handle was built by the host, so the table holds
            // `n_ranks` addresses and `rank < n_ranks`: this rank's own entry is readable.
            GlobalPtr::from_ptr(unsafe { self.copy_of::<V>(self.rank, index) })
        }

        #[inline(always)]
        unsafe fn reduce<V: SwitchElem>(&self, index: usize) -> V {
            // Ranks in order 0..n, so every rank computes the same sum bit for bit.
            // SAFETY: in-bounds element of every rank's copy (caller's contract); the data was
            // published before the barrier this thread passed (acquire).
            unsafe {
                let mut acc = self.copy_of::<V>(0, index).read();
                for r in 1..self.n_ranks {
                    acc = acc.add(self.copy_of::<V>(r, index).read());
                }
                acc
            }
        }

        #[inline(always)]
        unsafe fn broadcast<V: SwitchElem>(&self, index: usize, value: V) {
            for r in 0..self.n_ranks {
                // SAFETY: in-bounds element of rank r's copy (caller's contract).
                unsafe { self.copy_of::<V>(r, index).write(value) };
            }
        }

        #[inline(always)]
        unsafe fn signal(&self) {
            for p in 0..self.n_ranks {
                if p != self.rank {
                    // Partner: rank p's wait on its handle toward this rank.
                    // SAFETY: the table holds a handle toward every other rank (host contract).
                    unsafe { (*self.semaphores.as_ptr().add(p as usize)).signal() };
                }
            }
        }

        #[inline(always)]
        unsafe fn relaxed_signal(&self) {
            for p in 0..self.n_ranks {
                if p != self.rank {
                    // SAFETY: as for `signal`.
                    unsafe { (*self.semaphores.as_ptr().add(p as usize)).relaxed_signal() };
                }
            }
        }

        #[inline(always)]
        unsafe fn wait(&self, budget: SpinBudget) {
            for p in 0..self.n_ranks {
                if p != self.rank {
                    // Partner: rank p's signal.
                    // SAFETY: as for `signal`.
                    unsafe { (*self.semaphores.as_ptr().add(p as usize)).wait(budget) };
                }
            }
        }

        #[inline(always)]
        unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            for p in 0..self.n_ranks {
                if p != self.rank {
                    // SAFETY: as for `signal`.
                    unsafe { (*self.semaphores.as_ptr().add(p as usize)).relaxed_wait(budget) };
                }
            }
        }
    }
}
