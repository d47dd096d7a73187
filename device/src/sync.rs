//! Synchronisation inside one GPU: [`block_barrier`], the barrier of one thread block, and the
//! [`DeviceSyncer`] grid barrier. The syncer lives in global memory (allocate it zeroed on the
//! host, or declare a `static` in the kernel crate) and is used through a
//! [`GlobalPtr`](crate::ptr::GlobalPtr) to it. The counting semaphore for the threads of one GPU
//! is [`crate::semaphore::DeviceSemaphore`].
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

/// Waits until every thread of the calling block has reached a block barrier, and orders the
/// block's memory accesses: what any thread of the block wrote before its barrier is visible to
/// every thread of the block after it (the CTA barrier, `barrier.sync 0;`, like CUDA's
/// `__syncthreads()`). Every thread of the block that has not exited must reach a
/// `block_barrier` (an exited thread counts as arrived).
///
/// The barrier is the form without `.aligned`, correct wherever the threads of a warp arrive
/// (after a divergent branch or a spin-wait one thread leaves before the others), so it is safe
/// to call from any code. (The aligned form, [`crate::ptx::misc::bar_sync`], is for code that
/// every warp runs converged.) A hardware barrier takes no spin budget: a thread that never
/// comes is one stuck in some other wait, whose own budget traps the kernel, which ends this
/// barrier's wait too.
///
/// Compiled for nvptx64 only.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub fn block_barrier() {
    crate::ptx::misc::barrier_sync();
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Gpu, Relaxed, Release};
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncer_starts_zeroed() {
        assert_eq!(bytemuck::cast::<_, u64>(DeviceSyncer::default()), 0);
    }
}
