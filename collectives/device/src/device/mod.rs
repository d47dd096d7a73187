//! The device side of the collectives (nvptx64 only), one file per algorithm. See the crate
//! documentation for the algorithms, the epoch and the rules for callers.

use super::*;
use mscclpp_device::atomic::{self, Acquire, Release, Sys};
use mscclpp_device::copy::{Threads, copy, copy_widest};
use mscclpp_device::device_assert;
use mscclpp_device::packet::LL16Packet;
use mscclpp_device::poll::{SpinBudget, spin_until};
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::misc::{barrier_sync, griddepcontrol_launch_dependents, griddepcontrol_wait};
use mscclpp_device::ptx::{ld_st, sreg};

/// One 8-byte word of `bytes` at `p` (word `i`): a single load when the word is whole and
/// aligned, else byte by byte with zeros past the end.
///
/// # Safety
/// `p` valid global memory for `bytes` bytes.
#[inline(always)]
pub(crate) unsafe fn load_word(p: GlobalPtr<u8>, i: u64, bytes: u64) -> u64 {
    let at = p.byte_add((8 * i) as usize);
    if 8 * i + 8 <= bytes && at.is_aligned_to(8) {
        // SAFETY: the word lies inside the range and is aligned.
        return unsafe { ld_st::ld_global_u64(at.as_ptr().cast()) };
    }
    let n = (bytes - 8 * i).min(8);
    let mut w = 0u64;
    for j in 0..n {
        // SAFETY: byte j of the word lies inside the range.
        w |= (unsafe { at.as_ptr().add(j as usize).read() } as u64) << (8 * j);
    }
    w
}

/// Stores word `i` of `bytes` at `p`: one store when whole and aligned, else only the bytes
/// inside the range.
///
/// # Safety
/// `p` valid global memory for `bytes` bytes.
#[inline(always)]
pub(crate) unsafe fn store_word(p: GlobalPtr<u8>, i: u64, bytes: u64, w: u64) {
    let at = p.byte_add((8 * i) as usize);
    if 8 * i + 8 <= bytes && at.is_aligned_to(8) {
        // SAFETY: the word lies inside the range and is aligned.
        unsafe { ld_st::st_global_u64(at.as_ptr().cast(), w) };
        return;
    }
    let n = (bytes - 8 * i).min(8);
    for j in 0..n {
        // SAFETY: byte j of the word lies inside the range.
        unsafe { at.as_ptr().add(j as usize).write((w >> (8 * j)) as u8) };
    }
}

/// Lane-wise sum of two 16-byte vectors of elements.
#[inline(always)]
pub(crate) fn add128<E: Element>(a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
    [E::add_words(a[0], b[0]), E::add_words(a[1], b[1]), E::add_words(a[2], b[2]), E::add_words(a[3], b[3])]
}

/// How many 16-byte vectors one thread keeps in flight in [`sum_vectors`].
pub(crate) const SUM_UNROLL: u64 = 4;

/// Sums `vecs` 16-byte vectors of the `n` ranks' data in rank order (`src(q)`, vector `i` at
/// byte `16 * i`) and stores the sum to every non-null `dst(p)`, p in `0..n`, shared by the
/// threads of `t`, [`SUM_UNROLL`] vectors per thread in flight (the loads of all ranks are
/// issued before the first sum).
///
/// # Safety
/// Every `src(q)` valid for `16 * vecs` bytes of reads, every non-null `dst(p)` for writes,
/// all 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn sum_vectors<E: Element>(
    n: u32,
    src: impl Fn(u32) -> GlobalPtr<u8>,
    dst: impl Fn(u32) -> GlobalPtr<u8>,
    vecs: u64,
    t: Threads,
) {
    let step = t.count as u64;
    let at = |p: GlobalPtr<u8>, v: u64| p.byte_add((v * 16) as usize).as_ptr().cast::<u32>();
    let mut v = t.index as u64;
    // Four named vectors (not an array, which the compiler would put on the stack).
    while v + (SUM_UNROLL - 1) * step < vecs {
        let (mut a0, mut a1, mut a2, mut a3) = ([0u32; 4], [0u32; 4], [0u32; 4], [0u32; 4]);
        for q in 0..n {
            let s = src(q);
            // SAFETY: vectors v + u * step, u < 4, lie in the range (loop condition).
            let (x0, x1, x2, x3) = unsafe {
                (
                    ld_st::ld_global_v4_u32(at(s, v)),
                    ld_st::ld_global_v4_u32(at(s, v + step)),
                    ld_st::ld_global_v4_u32(at(s, v + 2 * step)),
                    ld_st::ld_global_v4_u32(at(s, v + 3 * step)),
                )
            };
            if q == 0 {
                (a0, a1, a2, a3) = (x0, x1, x2, x3);
            } else {
                (a0, a1, a2, a3) = (add128::<E>(a0, x0), add128::<E>(a1, x1), add128::<E>(a2, x2), add128::<E>(a3, x3));
            }
        }
        for p in 0..n {
            let d = dst(p);
            if !d.is_null() {
                // SAFETY: as above, for the destination.
                unsafe {
                    ld_st::st_global_v4_u32(at(d, v), a0);
                    ld_st::st_global_v4_u32(at(d, v + step), a1);
                    ld_st::st_global_v4_u32(at(d, v + 2 * step), a2);
                    ld_st::st_global_v4_u32(at(d, v + 3 * step), a3);
                }
            }
        }
        v += SUM_UNROLL * step;
    }
    while v < vecs {
        let mut acc = [0u32; 4];
        for q in 0..n {
            // SAFETY: vector v lies in the range.
            let x = unsafe { ld_st::ld_global_v4_u32(at(src(q), v)) };
            acc = if q == 0 { x } else { add128::<E>(acc, x) };
        }
        for p in 0..n {
            let d = dst(p);
            if !d.is_null() {
                // SAFETY: as above.
                unsafe { ld_st::st_global_v4_u32(at(d, v), acc) };
            }
        }
        v += step;
    }
}

/// Waits until the 64-bit flag at `p` reaches `target` (acquire, system scope: the writes the
/// sender released with the flag are visible afterwards).
///
/// # Safety
/// `p` valid global memory, 8-aligned.
#[inline(always)]
pub(crate) unsafe fn wait_flag(p: GlobalPtr<u64>, target: u64, budget: SpinBudget, name: &'static core::ffi::CStr) {
    // SAFETY: forwarded from the caller. Partner: the sender's `raise_flag`.
    spin_until(budget, name, || unsafe { atomic::load::<Acquire, Sys, u64>(p.as_ptr()) } >= target);
}

/// Publishes `value` in the 64-bit flag at `p` (release, system scope). Called by one thread
/// after a CTA barrier, so every write the block made before the barrier is released with it.
///
/// # Safety
/// `p` valid global memory, 8-aligned; only this rank's block writes it.
#[inline(always)]
pub(crate) unsafe fn raise_flag(p: GlobalPtr<u64>, value: u64) {
    // SAFETY: forwarded from the caller. Partner: the receiver's `wait_flag`.
    unsafe { atomic::store::<Release, Sys, u64>(p.as_ptr(), value) };
}

impl Collective {
    /// Rank `q`'s scratch as mapped on this GPU.
    #[inline(always)]
    pub(crate) fn peer_scratch(&self, q: u32) -> GlobalPtr<u8> {
        // SAFETY: the peer table holds `n_ranks` addresses (the handle comes from the host).
        GlobalPtr::from_addr(unsafe { self.peers.add(q as usize).as_ptr().read() })
    }

    /// LL slot (`half`, `region`, `sender`) in rank `owner`'s scratch, as packets.
    #[inline(always)]
    pub(crate) fn ll_slot(&self, owner: u32, half: u64, region: u64, sender: u32) -> GlobalPtr<LL16Packet> {
        let base = if owner == self.rank { self.scratch } else { self.peer_scratch(owner) };
        base.byte_add(self.ll_offset(half, region, sender) as usize).cast()
    }

    /// Starts an operation: returns its epoch (this block's counter). Every thread of every
    /// block calls it. A kernel launched to overlap the one before it on the stream
    /// (programmatic stream serialization) waits here until that kernel has finished and its
    /// writes are visible, and lets the kernel after it be scheduled.
    ///
    /// # Safety
    /// The handle comes from the host; the rules of the module documentation hold.
    #[inline(always)]
    pub unsafe fn begin(&self) -> u64 {
        device_assert!(
            sreg::nctaid_x() <= self.max_blocks,
            "collective: the grid has more blocks than the communicator's max_blocks"
        );
        griddepcontrol_wait();
        griddepcontrol_launch_dependents();
        // SAFETY: one counter per block. It was last written by this block's `end` (before a
        // CTA barrier) or by an earlier launch, which the stream order (or the wait above)
        // completed.
        unsafe { self.state.add(sreg::ctaid_x() as usize).as_ptr().read() }
    }

    /// Ends an operation of epoch `e`: every block advances its counter, block 0 also those of
    /// the blocks this grid does not have, so all stay equal.
    ///
    /// # Safety
    /// As for [`Collective::begin`], with the epoch it returned.
    #[inline(always)]
    pub unsafe fn end(&self, e: u64) {
        // Every thread has read the counter (in `begin`) before it moves.
        barrier_sync();
        let (t, b, nb) = (sreg::tid_x(), sreg::ctaid_x(), sreg::nctaid_x());
        // SAFETY: counters of this grid's blocks; each written by one thread.
        unsafe {
            if t == 0 {
                self.state.add(b as usize).as_ptr().write(e + 1);
            }
            if b == 0 {
                let mut j = nb + t;
                while j < self.max_blocks {
                    self.state.add(j as usize).as_ptr().write(e + 1);
                    j += sreg::ntid_x();
                }
            }
        }
        // A later call in the same kernel reads the new counter.
        barrier_sync();
    }
}

mod direct;
mod oneshot;
mod pipelined;
mod stream;
mod twoshot;

impl Collective {
    // ---------------------------------------------------------------- whole operations

    /// Allreduce (sum of `E`) of `bytes` bytes from `input` into `output` (they may be the same
    /// buffer) with the given algorithm, begin and end included: the device-callable form.
    ///
    /// # Safety
    /// The handle comes from the host; every block of a 1-D co-resident grid of at most
    /// `max_blocks` blocks calls it with the same arguments, on every rank, in the same order
    /// as every other collective call; a collective call earlier in the same kernel is
    /// separated from this one by a grid barrier; `input` and `output` valid for `bytes` on this GPU and
    /// 16-byte aligned; `bytes` a multiple of the element size and within the algorithm's
    /// capacity ([`Collective::ll_one_shot_capacity`], [`Collective::ll_two_shot_capacity`];
    /// the pipelined and direct algorithms have none).
    #[inline(always)]
    pub unsafe fn allreduce<E: Element>(
        &self,
        algorithm: Algorithm,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let e = self.begin();
            match algorithm {
                Algorithm::OneShotLl => self.allreduce_ll_body::<E>(e, input, output, bytes, Threads::grid(), budget),
                Algorithm::TwoShotLl => self.allreduce_ll2_body::<E>(e, input, output, bytes, Threads::grid(), budget),
                Algorithm::Pipelined => self.allreduce_pipelined_body::<E>(e, input, output, bytes, budget),
                Algorithm::Direct => self.allreduce_direct_body::<E>(e, input, output, bytes, budget),
            }
            self.end(e);
        }
    }

    /// Allgather of `bytes` per rank: `output[q * bytes ..][.. bytes]` = rank q's `input`; the
    /// device-callable form (two-shot and direct mean pipelined here).
    ///
    /// # Safety
    /// As for [`Collective::allreduce`]; `output` valid for `n_ranks * bytes`; `input` is
    /// `output + rank * bytes` (in place) or does not overlap `output`; any `bytes`.
    #[inline(always)]
    pub unsafe fn allgather(
        &self,
        algorithm: Algorithm,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let e = self.begin();
            match algorithm {
                Algorithm::OneShotLl => self.allgather_ll_body(e, input, output, bytes, Threads::grid(), budget),
                _ => self.allgather_pipelined_body(e, input, output, bytes, budget),
            }
            self.end(e);
        }
    }

    /// Reduce-scatter (sum of `E`) of `bytes` per rank: `output` = sum over ranks q of rank q's
    /// `input[rank * bytes ..][.. bytes]`; the device-callable form.
    ///
    /// # Safety
    /// As for [`Collective::allreduce`]; `input` valid for `n_ranks * bytes`; `output` is
    /// `input + rank * bytes` (in place) or does not overlap `input`.
    #[inline(always)]
    pub unsafe fn reduce_scatter<E: Element>(
        &self,
        algorithm: Algorithm,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let e = self.begin();
            match algorithm {
                Algorithm::OneShotLl => {
                    self.reduce_scatter_ll_body::<E>(e, input, output, bytes, Threads::grid(), budget)
                }
                _ => self.reduce_scatter_pipelined_body::<E>(e, input, output, bytes, budget),
            }
            self.end(e);
        }
    }
}
