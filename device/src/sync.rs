//! Grid-wide synchronisation inside one GPU: the [`DeviceSyncer`] grid barrier and the counting
//! [`DeviceSemaphore`]. Both live in global memory (allocate them zeroed, or with
//! [`DeviceSemaphore::new`], on the host; or declare a `static` in the kernel crate) and are
//! used through a [`GlobalPtr`](crate::ptr::GlobalPtr) to them.
//!
//! ```text
//!  DeviceSyncer::sync(n, budget), every thread of each of the n blocks:
//!    barrier.sync                              block's writes before the barrier done (CTA)
//!    leader: g = generation                    (the round this block is in)
//!            old = atom.acq_rel.gpu.inc count  (wraps to 0 at n - 1: ready for the next round)
//!            old == n - 1 ?  st.release.gpu generation = g + 1        (last to arrive)
//!                         :  spin until generation != g; fence.acq_rel.gpu
//!    barrier.sync                              every thread of the block may now read
//! ```
//!
//! The increments form a chain (each acquires the previous one), so the last arriver has seen
//! every block's writes, and its release of the new generation passes them to every waiter. The
//! counter returns to 0 in every round and the generation only grows, so one syncer serves any
//! number of rounds and launches, with any grid size per launch. The grid must be co-resident
//! (a cooperative launch), blocks must be 1-D (the leader is `tid.x == 0`), and every block of
//! the `n` must call `sync` the same number of times. A kernel that traps inside `sync` leaves
//! the counter mid-round: zero the syncer before reusing it.

/// A reusable grid barrier (8 bytes in global memory, zero-initialised).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeviceSyncer {
    /// Blocks that have arrived in the current round.
    pub count: u32,
    /// Completed rounds (wraps). A one-block grid's `sync` is its CTA barrier alone and leaves the
    /// syncer untouched.
    pub generation: u32,
}
static_assertions::assert_eq_size!(DeviceSyncer, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(DeviceSyncer, generation), 4);

/// A counting semaphore for the threads of one GPU, with `permits` initial permits. Fair:
/// acquirers are served in the order they took their ticket.
///
/// `acquire` takes a ticket `t` (a relaxed increment) and waits until `released + permits > t`;
/// `release` adds one to `released` with release order, which the waiter's acquire load pairs
/// with. Correct while fewer than 2^31 acquirers wait at once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeviceSemaphore {
    /// Tickets handed out (acquire calls so far).
    pub tickets: u32,
    /// Permits returned (release calls so far).
    pub released: u32,
    /// Initial permits.
    pub permits: u32,
    /// Padding (zero).
    pub _pad: u32,
}
static_assertions::assert_eq_size!(DeviceSemaphore, [u32; 4]);
static_assertions::const_assert_eq!(core::mem::offset_of!(DeviceSemaphore, released), 4);
static_assertions::const_assert_eq!(core::mem::offset_of!(DeviceSemaphore, permits), 8);

impl DeviceSemaphore {
    /// A semaphore with `permits` permits and no acquirer.
    pub const fn new(permits: u32) -> Self {
        Self { tickets: 0, released: 0, permits, _pad: 0 }
    }
    /// Whether the holder of ticket `ticket` may enter when `released` permits have come back.
    pub const fn admits(&self, ticket: u32, released: u32) -> bool {
        (released.wrapping_add(self.permits).wrapping_sub(ticket).wrapping_sub(1) as i32) >= 0
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, Gpu, Relaxed, Release};
    use crate::poll::{SpinBudget, spin_until};
    use crate::ptr::GlobalPtr;
    use crate::ptx::{atom_red, misc::barrier_sync, sreg};

    impl GlobalPtr<DeviceSyncer> {
        /// Waits until all `num_blocks` blocks of the grid have called `sync` (the same number of
        /// times): afterwards every thread sees every write any thread of those blocks made
        /// before its call. Every thread of each block must call it. Traps with a message if the
        /// others do not arrive within `budget`.
        ///
        /// # Safety
        /// `self` points to a `DeviceSyncer` in global memory used only by this grid, zeroed
        /// before its first use; all `num_blocks` blocks are co-resident (cooperative launch).
        #[inline(always)]
        pub unsafe fn sync(self, num_blocks: u32, budget: SpinBudget) {
            // The block's threads finish their writes before the leader arrives for them. The
            // caller's code before may be divergent (a leader-only write): the non-aligned
            // barrier is correct however the warps arrive.
            barrier_sync();
            if num_blocks > 1 && sreg::tid_x() == 0 {
                let count = self.cast::<u32>().as_ptr();
                let generation = self.cast::<u32>().add(1).as_ptr();
                // SAFETY: both words belong to the syncer (caller's contract). The generation can
                // only move past `g` after this block's increment below, which stays after this
                // load (it has release order).
                unsafe {
                    let g = atomic::load::<Relaxed, Gpu, u32>(generation);
                    // Release: this block's writes (gathered by the barrier) before the arrival.
                    // Acquire: the arrivals before this one. Partner: the other blocks' increments.
                    let old = atom_red::atom_acq_rel_gpu_inc_u32(count, num_blocks - 1);
                    if old == num_blocks - 1 {
                        // Last to arrive; the increment reset the count. Partner: the waiters'
                        // fence after their polls.
                        atomic::store::<Release, Gpu, u32>(generation, g.wrapping_add(1));
                    } else {
                        spin_until(budget, c"DeviceSyncer::sync", || {
                            atomic::load::<Relaxed, Gpu, u32>(generation) != g
                        });
                        // Partner: the last arriver's release store of the generation.
                        atomic::fence_acq_rel::<Gpu>();
                    }
                }
            }
            // The leader's acquire covers the block's other threads from here on. Lanes of the
            // leader's warp arrive here while the leader still spins: non-aligned barrier.
            barrier_sync();
        }
    }

    impl GlobalPtr<DeviceSemaphore> {
        /// Takes one permit, waiting (in ticket order) until one is free; acquire order: the
        /// writes of the thread that released the permit are visible afterwards. Traps with a
        /// message if no permit comes within `budget`. Called by one thread (guard a block's
        /// work with a CTA barrier on both sides).
        ///
        /// # Safety
        /// `self` points to a `DeviceSemaphore` in global memory initialised with
        /// [`DeviceSemaphore::new`].
        #[inline(always)]
        pub unsafe fn acquire(self, budget: SpinBudget) {
            let words = self.cast::<u32>();
            let (tickets, released, permits) = (words.as_ptr(), words.add(1).as_ptr(), words.add(2).as_ptr());
            // SAFETY: the words belong to the semaphore (caller's contract); `permits` is not
            // written after initialisation.
            unsafe {
                let ticket = atomic::fetch_add::<Relaxed, Gpu, u32>(tickets, 1);
                let sem = DeviceSemaphore::new(atomic::load::<Relaxed, Gpu, u32>(permits));
                spin_until(budget, c"DeviceSemaphore::acquire", || {
                    // Partner: the release add in `release`.
                    sem.admits(ticket, atomic::load::<Acquire, Gpu, u32>(released))
                });
            }
        }

        /// Returns one permit; release order: this thread's earlier writes (and those it
        /// synchronised with) are visible to the next acquirer.
        ///
        /// # Safety
        /// As for [`GlobalPtr::acquire`]; the caller holds a permit.
        #[inline(always)]
        pub unsafe fn release(self) {
            // SAFETY: as for `acquire`. Partner: the acquire load in `acquire`.
            unsafe { atomic::red_add::<Release, Gpu, u32>(self.cast::<u32>().add(1).as_ptr(), 1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_admission_is_wrap_safe() {
        let s = DeviceSemaphore::new(2);
        assert!(s.admits(0, 0) && s.admits(1, 0) && !s.admits(2, 0));
        assert!(s.admits(2, 1) && !s.admits(3, 1));
        // Counters that wrapped past u32::MAX.
        assert!(s.admits(u32::MAX, u32::MAX - 1));
        assert!(s.admits(0, u32::MAX));
        assert!(!s.admits(1, u32::MAX));
        assert_eq!(bytemuck::cast::<_, [u32; 4]>(DeviceSemaphore::new(7)), [0, 0, 7, 0]);
        assert_eq!(bytemuck::cast::<_, u64>(DeviceSyncer::default()), 0);
    }
}
