//! The barrier of a group of GPUs over an NVLink multicast counter (see [`SwitchSemaphore`]).

use crate::ptr::{GlobalPtr, MultimemPtr};

/// A barrier of a group of GPUs over an NVLink multicast counter.
///
/// Every member has a u64 counter at the same offset of the memory bound to one multicast
/// object. `mc_flag` is the counter's multicast address, `local_flag` this member's own copy
/// (unicast), `generation` a private u64 in this device's memory that remembers how far this
/// handle has waited (it persists across kernel launches, so the counters never need a reset).
///
/// ```text
///  rank r (any member)                        NVLink switch                 rank s (any member)
///  writes (st, multimem.st, ...) ─┐
///  signal():                      │
///    multimem.red.release.sys     │ add 1 ──► every copy of the counter +1
///    .global.add.u64 [mc_flag], 1 ┘                     │
///                                                       ▼
///                                         wait(budget):
///                                           generation += n_ranks
///                                           spin ld.acquire.sys [local_flag]
///                                             until (flag - generation) as i64 >= 0
///                                           reads: sees every write each member made
///                                           before its signal of this round
/// ```
///
/// One round = every member signals once, then waits. Each round adds `n_ranks` to every copy,
/// so after round k every copy is at least `k * n_ranks` and a member's `generation` is exactly
/// that. A fast member may already have signalled round k + 1 while a slow one still waits
/// for round k: its copy is then past the target, which the wrap-safe `>=` accepts. The
/// `relaxed_` forms skip the release/acquire ordering (for rounds that only count arrivals).
/// `signal` and `wait` are separate so that work can overlap the barrier.
///
/// 32 bytes, 8-aligned; built by the host (multicast setup) and passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SwitchSemaphore {
    mc_flag: MultimemPtr<u64>,
    local_flag: GlobalPtr<u64>,
    generation: GlobalPtr<u64>,
    n_ranks: u32,
    _pad: u32,
}

static_assertions::assert_eq_size!(SwitchSemaphore, [u64; 4]);
static_assertions::assert_eq_align!(SwitchSemaphore, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchSemaphore, mc_flag), 0);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchSemaphore, local_flag), 8);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchSemaphore, generation), 16);
static_assertions::const_assert_eq!(core::mem::offset_of!(SwitchSemaphore, n_ranks), 24);

// SAFETY: `repr(C)` of addresses and integers, no implicit padding (asserted above), the same
// layout on the host and nvptx64.
unsafe impl crate::abi::DeviceAbi for SwitchSemaphore {}

impl SwitchSemaphore {
    /// A handle over a multicast counter.
    ///
    /// * `mc_flag`: the counter's multicast address (the same counter on every member);
    /// * `local_flag`: this device's own copy of that counter (unicast address);
    /// * `generation`: a u64 in this device's memory, private to this handle, zero at the start
    ///   (like the counters);
    /// * `n_ranks`: the number of members, each of which signals once per round.
    pub const fn new(
        mc_flag: MultimemPtr<u64>,
        local_flag: GlobalPtr<u64>,
        generation: GlobalPtr<u64>,
        n_ranks: u32,
    ) -> Self {
        Self { mc_flag, local_flag, generation, n_ranks, _pad: 0 }
    }
    /// The counter's multicast address.
    pub const fn mc_flag(&self) -> MultimemPtr<u64> {
        self.mc_flag
    }
    /// This device's copy of the counter.
    pub const fn local_flag(&self) -> GlobalPtr<u64> {
        self.local_flag
    }
    /// The private generation word.
    pub const fn generation(&self) -> GlobalPtr<u64> {
        self.generation
    }
    /// Members of the group.
    pub const fn n_ranks(&self) -> u32 {
        self.n_ranks
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::poll::{SpinBudget, spin_until};
    use crate::ptx::{ld_st, multimem};
    use crate::semaphore::reached;

    impl SwitchSemaphore {
        /// Arrives at the barrier: adds 1 to every member's copy of the counter with
        /// `multimem.red.release.sys.global.add.u64`. Every write this thread made before (and
        /// every write ordered before it, e.g. by `bar.sync`) is visible to a member whose
        /// [`wait`](Self::wait) returns for this round.
        ///
        /// # Safety
        /// The handle must describe a live multicast counter as in [`SwitchSemaphore::new`],
        /// mapped on this device.
        #[inline(always)]
        pub unsafe fn signal(&self) {
            // RELEASE: pairs with the ld.acquire.sys of `wait` on every member (including this one).
            // SAFETY: the caller guarantees `mc_flag` is a multicast address of a bound u64.
            unsafe { multimem::multimem_red_release_sys_add_u64(self.mc_flag, 1) };
        }

        /// [`signal`](Self::signal) without release ordering (`multimem.red.relaxed`): counts the
        /// arrival but publishes nothing.
        ///
        /// # Safety
        /// As for [`signal`](Self::signal).
        #[inline(always)]
        pub unsafe fn relaxed_signal(&self) {
            // SAFETY: the caller guarantees `mc_flag` is a multicast address of a bound u64.
            unsafe { multimem::multimem_red_relaxed_sys_add_u64(self.mc_flag, 1) };
        }

        /// Advances the private generation by one round and returns the new target.
        ///
        /// # Safety
        /// `generation` valid, used by one thread at a time.
        #[inline(always)]
        unsafe fn next_target(&self) -> u64 {
            let g = self.generation.as_ptr();
            // SAFETY: the caller guarantees `generation` is a valid word private to this handle
            // and to this thread while it waits (plain accesses; ordered across launches by the
            // kernel boundary).
            unsafe {
                let target = g.read().wrapping_add(self.n_ranks as u64);
                g.write(target);
                target
            }
        }

        /// Waits until every member has signalled this round: advances the private generation
        /// by `n_ranks` and spins with `ld.acquire.sys` on this device's copy of the counter until
        /// it reaches the generation (wrap-safe). Traps when `budget` runs out.
        ///
        /// # Safety
        /// As for [`signal`](Self::signal); in addition one thread at a time waits on a handle
        /// (the generation word is updated without atomics) and every member signals exactly once
        /// per round.
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            let target = unsafe { self.next_target() };
            let flag = self.local_flag.as_ptr();
            spin_until(budget, c"SwitchSemaphore::wait", || {
                // ACQUIRE: pairs with the multimem.red.release.sys of `signal` on every member.
                // SAFETY: the caller guarantees `local_flag` is this device's copy of the counter.
                reached(unsafe { ld_st::ld_acquire_sys_u64(flag) }, target)
            });
        }

        /// [`wait`](Self::wait) with relaxed loads: waits for the arrivals but acquires nothing
        /// (pairs with [`relaxed_signal`](Self::relaxed_signal) or a separate fence).
        ///
        /// # Safety
        /// As for [`wait`](Self::wait).
        #[inline(always)]
        pub unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            let target = unsafe { self.next_target() };
            let flag = self.local_flag.as_ptr();
            spin_until(budget, c"SwitchSemaphore::relaxed_wait", || {
                // SAFETY: the caller guarantees `local_flag` is this device's copy of the counter.
                reached(unsafe { ld_st::ld_relaxed_sys_u64(flag) }, target)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_accessors() {
        // SAFETY: only the address value is used; nothing is dereferenced.
        let mc = unsafe { MultimemPtr::<u64>::from_addr(0x10_0000) };
        let s = SwitchSemaphore::new(mc, GlobalPtr::from_addr(0x2000), GlobalPtr::from_addr(0x3000), 8);
        let words: [u64; 4] = bytemuck::cast(s);
        assert_eq!(words, [0x10_0000, 0x2000, 0x3000, 8]);
        assert_eq!(s.mc_flag(), mc);
        assert_eq!(s.local_flag().addr(), 0x2000);
        assert_eq!(s.generation().addr(), 0x3000);
        assert_eq!(s.n_ranks(), 8);
    }
}
