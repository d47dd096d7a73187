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

use crate::element::Element;
use crate::ptr::{GlobalPtr, MultimemPtr};
use crate::semaphore::SwitchSemaphore;

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
    /// How many whole elements of type `V` the buffer holds (0 for a zero-sized `V`, which
    /// has no elements to address).
    pub const fn len_of<V>(&self) -> u64 {
        match self.size.checked_div(core::mem::size_of::<V>() as u64) {
            Some(n) => n,
            None => 0,
        }
    }
    /// Whether element `index` of type `V` lies inside the buffer.
    pub const fn in_bounds<V>(&self, index: usize) -> bool {
        (index as u64) < self.len_of::<V>()
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::device_assert;
    use crate::multimem::{self, Red, op};

    impl SwitchChannel {
        /// The multicast address of element `index` of type `V`.
        #[inline(always)]
        fn mc<V>(&self, index: usize) -> MultimemPtr<V> {
            device_assert!(self.in_bounds::<V>(index), "SwitchChannel: element index out of range");
            self.mc_ptr.cast::<V>().add(index)
        }

        /// Adds `value` into element `index` of every member's copy (`multimem.red` add). The
        /// multicast-only form; reduce, broadcast and the barrier are the [`SwitchGroup`]
        /// methods, which the emulated channel shares.
        ///
        /// # Safety
        /// As for [`SwitchGroup::reduce`]: the handle describes a live multicast buffer mapped on
        /// this device, `index` is in bounds (checked only in debug/`checks` builds), and the
        /// buffer's base is aligned to `size_of::<V>()` (multicast mappings are
        /// granularity-aligned).
        #[inline(always)]
        pub unsafe fn store_reduce<V>(&self, index: usize, value: V)
        where
            op::Add: Red<V>,
        {
            // SAFETY: forwarded from the caller.
            unsafe { multimem::multimem_red::<V, op::Add>(self.mc(index), value) }
        }
    }

    impl SwitchGroup for SwitchChannel {
        #[inline(always)]
        fn elements<V>(&self) -> u64 {
            self.len_of::<V>()
        }
        #[inline(always)]
        unsafe fn local<V>(&self, index: usize) -> GlobalPtr<V> {
            device_assert!(self.in_bounds::<V>(index), "SwitchChannel: element index out of range");
            self.device_ptr.cast::<V>().add(index)
        }
        #[inline(always)]
        unsafe fn reduce<V: SwitchElem>(&self, index: usize) -> V {
            // SAFETY: forwarded from the caller.
            unsafe { V::mc_reduce(self.mc(index)) }
        }
        #[inline(always)]
        unsafe fn broadcast<V: SwitchElem>(&self, index: usize, value: V) {
            // SAFETY: forwarded from the caller; `V: Store` through `SwitchElem`.
            unsafe { multimem::multimem_st::<V>(self.mc(index), value) }
        }
        #[inline(always)]
        unsafe fn signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.signal() }
        }
        #[inline(always)]
        unsafe fn relaxed_signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.relaxed_signal() }
        }
        #[inline(always)]
        unsafe fn wait(&self, budget: crate::poll::SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.barrier.wait(budget) }
        }
        #[inline(always)]
        unsafe fn relaxed_wait(&self, budget: crate::poll::SpinBudget) {
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
        // A zero-sized element divided by zero.
        assert_eq!(c.len_of::<()>(), 0);
        assert!(!c.in_bounds::<()>(0));
        let e = crate::channel::emulated_switch::EmulatedSwitchChannel {
            buffers: GlobalPtr::null(),
            semaphores: GlobalPtr::null(),
            size: 64,
            rank: 0,
            n_ranks: 2,
        };
        assert_eq!((e.len_of::<()>(), e.len_of::<u32>()), (0, 16));
    }
}

/// The multimem forms a switch channel uses, taken from the [`crate::multimem`] tables: a type
/// has them exactly when `multimem` maps its `ld_reduce` add and its `st`. Sealed (a private
/// module), so [`SwitchElem`] types are the crate's.
mod mc {
    use crate::multimem::{LdReduce, Store, op};
    #[cfg(any(target_arch = "nvptx64", doc))]
    use crate::ptr::MultimemPtr;

    /// A value type with a multimem add-reduce load and a multimem store.
    pub trait Multicast: Store {
        /// `multimem.ld_reduce` add at `ptr`.
        ///
        /// # Safety
        /// As for [`crate::multimem::multimem_ld_reduce`].
        #[cfg(any(target_arch = "nvptx64", doc))]
        unsafe fn mc_reduce(ptr: MultimemPtr<Self>) -> Self;
    }

    impl<V: Store> Multicast for V
    where
        op::Add: LdReduce<V>,
    {
        #[cfg(any(target_arch = "nvptx64", doc))]
        #[inline(always)]
        unsafe fn mc_reduce(ptr: MultimemPtr<V>) -> V {
            // SAFETY: forwarded from the caller.
            unsafe { crate::multimem::multimem_ld_reduce::<V, op::Add>(ptr) }
        }
    }
}

/// Element types both switch channels reduce and broadcast: the [`Element`] types (their
/// lane-wise sum serves the emulation, in rank order) that have a `multimem.ld_reduce` add and a
/// `multimem.st` form (from the [`crate::multimem`] tables). A bound, not a second sum: every
/// such type is one automatically.
pub trait SwitchElem: Element + mc::Multicast {}

impl<V: Element + mc::Multicast> SwitchElem for V {}

/// What an algorithm needs of a switch channel; implemented by [`SwitchChannel`] (NVLink
/// multicast), by [`super::emulated_switch::EmulatedSwitchChannel`] (peer pointers) and by a
/// range of a symmetric window ([`crate::window::WindowSwitch`], from
/// [`Window::switch_group`](crate::window::Window::switch_group)), so one kernel body serves all
/// three.
///
/// The trait is declared on every target (so host documentation and checks see it); its
/// implementations exist only on nvptx64. Every method that reads the handle's memory is
/// `unsafe`, [`SwitchGroup::local`] included: the emulated channel finds this rank's copy through
/// its table of peer addresses, a read that only a handle built by the host makes valid.
///
/// ```compile_fail,E0133
/// use mscclpp_device::channel::switch::SwitchGroup;
/// // `local` may dereference the handle's tables: calling it needs `unsafe`.
/// fn first<C: SwitchGroup>(c: &C) {
///     let _ = c.local::<u32>(0);
/// }
/// ```
pub trait SwitchGroup: Copy {
    /// Whole elements of type `V` in the buffer.
    fn elements<V>(&self) -> u64;
    /// This rank's own copy of element `index`.
    ///
    /// # Safety
    /// The handle must have been built by the host for this rank (the emulated channel reads
    /// its address table here); `index` in bounds.
    unsafe fn local<V>(&self, index: usize) -> GlobalPtr<V>;
    /// The sum over every rank of element `index`.
    ///
    /// # Safety
    /// `index` in bounds; the handle built by the host for this rank.
    unsafe fn reduce<V: SwitchElem>(&self, index: usize) -> V;
    /// Writes `value` into element `index` of every rank's copy.
    ///
    /// # Safety
    /// As for [`SwitchGroup::reduce`].
    unsafe fn broadcast<V: SwitchElem>(&self, index: usize, value: V);
    /// The barrier's signal (release).
    ///
    /// # Safety
    /// As for [`SwitchGroup::reduce`]; one thread at a time per handle.
    unsafe fn signal(&self);
    /// The barrier's relaxed signal.
    ///
    /// # Safety
    /// As for [`SwitchGroup::signal`].
    unsafe fn relaxed_signal(&self);
    /// The barrier's wait (acquire).
    ///
    /// # Safety
    /// As for [`SwitchGroup::signal`].
    unsafe fn wait(&self, budget: crate::poll::SpinBudget);
    /// The barrier's relaxed wait.
    ///
    /// # Safety
    /// As for [`SwitchGroup::signal`].
    unsafe fn relaxed_wait(&self, budget: crate::poll::SpinBudget);
}
