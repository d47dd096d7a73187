//! `SwitchChannel`: a buffer that every member of a group has bound to one NVLink multicast
//! object, with the group barrier that orders it.
//!
//! * `device_ptr`: this device's own copy of the buffer (unicast), for ordinary loads/stores;
//! * `mc_ptr`: the multicast address of the same buffer, for `multimem.*`;
//! * `size`: the buffer's size in bytes (the same on every member);
//! * `barrier`: a [`SwitchSemaphore`] over a counter of the same group.
//!
//! ```text
//!  allreduce, member r of n (each takes slice r of the buffer):
//!    barrier.signal(); barrier.wait()        every input written on every member
//!    for i in slice r:
//!      v = reduce::<V>(i)                    multimem.ld_reduce add over all copies of element i
//!      broadcast::<V>(i, v)                  multimem.st of the sum into all copies
//!    barrier.signal(); barrier.wait()        every slice broadcast: local copy holds the sum
//! ```
//!
//! or with [`SwitchChannel::store_reduce`]: outputs zeroed, each member adds its input into
//! every copy (`multimem.red` add), then one barrier round.

use crate::ptr::{GlobalPtr, MultimemPtr};
use crate::switch::SwitchSemaphore;

/// A multicast buffer and its group barrier; see the module docs.
///
/// 56 bytes, 8-aligned; built by the host and passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SwitchChannel {
    device_ptr: GlobalPtr<u8>,
    mc_ptr: MultimemPtr<u8>,
    size: u64,
    barrier: SwitchSemaphore,
}

static_assertions::assert_eq_size!(SwitchChannel, [u64; 7]);
static_assertions::assert_eq_align!(SwitchChannel, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchChannel, device_ptr), 0);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchChannel, mc_ptr), 8);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchChannel, size), 16);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchChannel, barrier), 24);

// SAFETY: `repr(C)` of addresses, integers and a `repr(C)` handle, no implicit padding
// (asserted above), the same layout on the host and nvptx64.
unsafe impl crate::abi::DeviceAbi for SwitchChannel {}

impl SwitchChannel {
    /// A channel over `size` bytes that this device sees at `device_ptr` (its own copy) and at
    /// `mc_ptr` (the multicast mapping), ordered by `barrier`.
    pub const fn new(device_ptr: GlobalPtr<u8>, mc_ptr: MultimemPtr<u8>, size: u64, barrier: SwitchSemaphore) -> Self {
        Self { device_ptr, mc_ptr, size, barrier }
    }
    /// This device's copy of the buffer.
    pub const fn device_ptr(&self) -> GlobalPtr<u8> {
        self.device_ptr
    }
    /// The multicast address of the buffer.
    pub const fn mc_ptr(&self) -> MultimemPtr<u8> {
        self.mc_ptr
    }
    /// The buffer's size in bytes.
    pub const fn size(&self) -> u64 {
        self.size
    }
    /// The group barrier.
    pub const fn barrier(&self) -> &SwitchSemaphore {
        &self.barrier
    }
    /// How many whole elements of type `V` the buffer holds.
    pub const fn len_of<V>(&self) -> u64 {
        self.size / core::mem::size_of::<V>() as u64
    }
    /// Whether element `index` of type `V` lies inside the buffer.
    pub const fn in_bounds<V>(&self, index: usize) -> bool {
        (index as u64) < self.len_of::<V>()
    }
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::*;
    use crate::device_assert;
    use crate::multimem::{self, LdReduce, Red, Store, op};
    use crate::poll::SpinBudget;

    impl SwitchChannel {
        /// The multicast address of element `index` of type `V`.
        #[inline(always)]
        fn mc<V>(&self, index: usize) -> MultimemPtr<V> {
            device_assert!(self.in_bounds::<V>(index), "SwitchChannel: element index out of range");
            self.mc_ptr.cast::<V>().add(index)
        }

        /// This device's copy of element `index` of type `V` (unicast address).
        #[inline(always)]
        pub fn local<V>(&self, index: usize) -> GlobalPtr<V> {
            device_assert!(self.in_bounds::<V>(index), "SwitchChannel: element index out of range");
            self.device_ptr.cast::<V>().add(index)
        }

        /// The sum over every member of element `index` (`multimem.ld_reduce` add).
        ///
        /// # Safety
        /// The handle must describe a live multicast buffer mapped on this device, `index` must
        /// be in bounds (checked only in debug/`checks` builds), and the buffer's base must be
        /// aligned to `size_of::<V>()` (multicast mappings are granularity-aligned).
        #[inline(always)]
        pub unsafe fn reduce<V>(&self, index: usize) -> V
        where
            op::Add: LdReduce<V>,
        {
            // SAFETY: forwarded from the caller.
            unsafe { multimem::multimem_ld_reduce::<V, op::Add>(self.mc(index)) }
        }

        /// Writes `value` into element `index` of every member's copy (`multimem.st`).
        ///
        /// # Safety
        /// As for [`reduce`](Self::reduce).
        #[inline(always)]
        pub unsafe fn broadcast<V: Store>(&self, index: usize, value: V) {
            // SAFETY: forwarded from the caller.
            unsafe { multimem::multimem_st::<V>(self.mc(index), value) }
        }

        /// Adds `value` into element `index` of every member's copy (`multimem.red` add).
        ///
        /// # Safety
        /// As for [`reduce`](Self::reduce).
        #[inline(always)]
        pub unsafe fn store_reduce<V>(&self, index: usize, value: V)
        where
            op::Add: Red<V>,
        {
            // SAFETY: forwarded from the caller.
            unsafe { multimem::multimem_red::<V, op::Add>(self.mc(index), value) }
        }

        /// The barrier's [`SwitchSemaphore::signal`] (release).
        ///
        /// # Safety
        /// As for [`SwitchSemaphore::signal`].
        #[inline(always)]
        pub unsafe fn signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.signal() }
        }

        /// The barrier's [`SwitchSemaphore::relaxed_signal`].
        ///
        /// # Safety
        /// As for [`SwitchSemaphore::signal`].
        #[inline(always)]
        pub unsafe fn relaxed_signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.relaxed_signal() }
        }

        /// The barrier's [`SwitchSemaphore::wait`] (acquire).
        ///
        /// # Safety
        /// As for [`SwitchSemaphore::wait`].
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.wait(budget) }
        }

        /// The barrier's [`SwitchSemaphore::relaxed_wait`].
        ///
        /// # Safety
        /// As for [`SwitchSemaphore::wait`].
        #[inline(always)]
        pub unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.relaxed_wait(budget) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vec::F32x4;

    #[test]
    fn layout_bounds_and_accessors() {
        // SAFETY: only address values are used; nothing is dereferenced.
        let (mc8, mcf) = unsafe { (MultimemPtr::<u8>::from_addr(0x20_0000), MultimemPtr::<u64>::from_addr(0x40_0000)) };
        let bar = SwitchSemaphore::new(mcf, GlobalPtr::from_addr(0x5000), GlobalPtr::from_addr(0x6000), 4);
        let c = SwitchChannel::new(GlobalPtr::from_addr(0x1000), mc8, 100, bar);
        let words: [u64; 7] = bytemuck::cast(c);
        assert_eq!(words, [0x1000, 0x20_0000, 100, 0x40_0000, 0x5000, 0x6000, 4]);
        assert_eq!(c.len_of::<F32x4>(), 6);
        assert!(c.in_bounds::<F32x4>(5));
        assert!(!c.in_bounds::<F32x4>(6));
        assert!(c.in_bounds::<u8>(99) && !c.in_bounds::<u8>(100));
        assert_eq!(c.barrier().n_ranks(), 4);
        assert_eq!((c.device_ptr().addr(), c.mc_ptr(), c.size()), (0x1000, mc8, 100));
    }
}
