//! The device side of the collectives (nvptx64 only). See the module documentation of
//! [`crate::collective`] for the algorithms, the epoch and the rules for callers.

use super::*;
use crate::atomic::{self, Acquire, Release, Sys};
use crate::copy::{Threads, copy, copy_widest};
use crate::device_assert;
use crate::packet::LL16Packet;
use crate::poll::{SpinBudget, spin_until};
use crate::ptr::GlobalPtr;
use crate::ptx::misc::{barrier_sync, griddepcontrol_launch_dependents, griddepcontrol_wait};
use crate::ptx::{ld_st, sreg};

/// One 8-byte word of `bytes` at `p` (word `i`): a single load when the word is whole and
/// aligned, else byte by byte with zeros past the end.
///
/// # Safety
/// `p` valid global memory for `bytes` bytes.
#[inline(always)]
unsafe fn load_word(p: GlobalPtr<u8>, i: u64, bytes: u64) -> u64 {
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
unsafe fn store_word(p: GlobalPtr<u8>, i: u64, bytes: u64, w: u64) {
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

/// Lane-wise sum of two 8-byte words of elements.
#[inline(always)]
fn add64<E: Element>(a: u64, b: u64) -> u64 {
    E::add32(a as u32, b as u32) as u64 | (E::add32((a >> 32) as u32, (b >> 32) as u32) as u64) << 32
}

/// Lane-wise sum of two 16-byte vectors of elements.
#[inline(always)]
fn add128<E: Element>(a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
    [E::add32(a[0], b[0]), E::add32(a[1], b[1]), E::add32(a[2], b[2]), E::add32(a[3], b[3])]
}

/// How many 16-byte vectors one thread keeps in flight in [`sum_vectors`].
const SUM_UNROLL: u64 = 4;

/// Sums `vecs` 16-byte vectors of the `n` ranks' data in rank order (`src(q)`, vector `i` at
/// byte `16 * i`) and stores the sum to every non-null `dst(p)`, p in `0..n`, shared by the
/// threads of `t`, [`SUM_UNROLL`] vectors per thread in flight (the loads of all ranks are
/// issued before the first sum).
///
/// # Safety
/// Every `src(q)` valid for `16 * vecs` bytes of reads, every non-null `dst(p)` for writes,
/// all 16-byte aligned.
#[inline(always)]
unsafe fn sum_vectors<E: Element>(
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
unsafe fn wait_flag(p: GlobalPtr<u64>, target: u64, budget: SpinBudget, name: &'static core::ffi::CStr) {
    // SAFETY: forwarded from the caller. Partner: the sender's `raise_flag`.
    spin_until(budget, name, || unsafe { atomic::load::<Acquire, Sys, u64>(p.as_ptr()) } >= target);
}

/// Publishes `value` in the 64-bit flag at `p` (release, system scope). Called by one thread
/// after a CTA barrier, so every write the block made before the barrier is released with it.
///
/// # Safety
/// `p` valid global memory, 8-aligned; only this rank's block writes it.
#[inline(always)]
unsafe fn raise_flag(p: GlobalPtr<u64>, value: u64) {
    // SAFETY: forwarded from the caller. Partner: the receiver's `wait_flag`.
    unsafe { atomic::store::<Release, Sys, u64>(p.as_ptr(), value) };
}

impl Collective {
    /// Rank `q`'s scratch as mapped on this GPU.
    #[inline(always)]
    fn peer_scratch(&self, q: u32) -> GlobalPtr<u8> {
        // SAFETY: the peer table holds `n_ranks` addresses (the handle comes from the host).
        GlobalPtr::from_addr(unsafe { self.peers.add(q as usize).as_ptr().read() })
    }

    /// LL slot (`half`, `region`, `sender`) in rank `owner`'s scratch, as packets.
    #[inline(always)]
    fn ll_slot(&self, owner: u32, half: u64, region: u64, sender: u32) -> GlobalPtr<LL16Packet> {
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

    // ---------------------------------------------------------------- LL building blocks

    /// Writes `w` as packet `i` of this rank's slot (`half`, `region`) in every peer's scratch.
    ///
    /// # Safety
    /// Packet `i` lies in the slots.
    #[inline(always)]
    unsafe fn ll_send(&self, half: u64, region: u64, i: u64, w: u64, flag: u32) {
        for p in 0..self.n_ranks {
            if p != self.rank {
                // SAFETY: forwarded from the caller.
                unsafe { self.ll_slot(p, half, region, self.rank).add(i as usize).write(w, flag) };
            }
        }
    }

    /// The sum in rank order of word `i`: `own` for this rank, packet `i` of slot (`half`, 0)
    /// here for every peer.
    ///
    /// # Safety
    /// Packet `i` lies in the slots.
    #[inline(always)]
    unsafe fn ll_sum<E: Element>(&self, half: u64, i: u64, own: u64, flag: u32, budget: SpinBudget) -> u64 {
        let (mut acc, me) = (0u64, self.rank);
        for q in 0..self.n_ranks {
            let v = if q == me {
                own
            } else {
                // SAFETY: forwarded from the caller.
                unsafe { self.ll_slot(me, half, 0, q).add(i as usize).read(flag, budget) }
            };
            acc = if q == 0 { v } else { add64::<E>(acc, v) };
        }
        acc
    }

    /// One-shot LL allreduce body (no begin/end): `output = sum over ranks of input`, `bytes`
    /// each, shared by the threads of `t`.
    ///
    /// # Safety
    /// Epoch `e` from [`Collective::begin`]; `input` and `output` valid for `bytes` (they may be
    /// the same); `bytes` at most [`Collective::ll_one_shot_capacity`]; every thread of `t` calls
    /// it with the same arguments, on every rank.
    #[inline(always)]
    pub unsafe fn allreduce_ll_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        t: Threads,
        budget: SpinBudget,
    ) {
        let (flag, half) = (ll_flag(e), e & 1);
        let words = bytes.div_ceil(8);
        device_assert!(words * LL_PACKET_BYTES <= self.ll_bytes, "allreduce (LL): message larger than the LL slot");
        let mut i = t.index as u64;
        while i < words {
            // SAFETY: word i lies in the input; packet i lies in every peer's slot (checked size).
            unsafe {
                let w = load_word(input, i, bytes);
                self.ll_send(half, 0, i, w, flag);
            }
            i += t.count as u64;
        }
        let mut i = t.index as u64;
        while i < words {
            // SAFETY: as above, for this rank's own slots.
            unsafe {
                let own = load_word(input, i, bytes);
                let acc = self.ll_sum::<E>(half, i, own, flag, budget);
                store_word(output, i, bytes, acc);
            }
            i += t.count as u64;
        }
    }

    /// Two-shot LL allreduce body: shard p of the input goes to rank p as packets, rank p sums
    /// it and sends the sum to every rank as packets.
    ///
    /// # Safety
    /// As for [`Collective::allreduce_ll_body`], with `bytes` at most
    /// [`Collective::ll_two_shot_capacity`].
    #[inline(always)]
    pub unsafe fn allreduce_ll2_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        t: Threads,
        budget: SpinBudget,
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        let (flag, half) = (ll_flag(e), e & 1);
        let words = bytes.div_ceil(8);
        device_assert!(
            words.div_ceil(n as u64) * LL_PACKET_BYTES <= self.ll_bytes,
            "allreduce (two-shot LL): shard larger than the LL slot"
        );
        let step = t.count as u64;
        // Shot 1: shard p to rank p.
        for p in 0..n {
            if p == me {
                continue;
            }
            let (s, end) = split(words, n as u64, p as u64);
            let mut j = t.index as u64;
            while s + j < end {
                // SAFETY: word s + j lies in the input, packet j in the slot (checked size).
                unsafe { self.ll_slot(p, half, 0, me).add(j as usize).write(load_word(input, s + j, bytes), flag) };
                j += step;
            }
        }
        // Sum my shard in rank order, keep it, and send it to everyone.
        let (s, end) = split(words, n as u64, me as u64);
        let mut j = t.index as u64;
        while s + j < end {
            // SAFETY: as above.
            unsafe {
                let own = load_word(input, s + j, bytes);
                let acc = self.ll_sum::<E>(half, j, own, flag, budget);
                store_word(output, s + j, bytes, acc);
                self.ll_send(half, 1, j, acc, flag);
            }
            j += step;
        }
        // Shot 2: every other shard's sum from its owner.
        for q in 0..n {
            if q == me {
                continue;
            }
            let (s, end) = split(words, n as u64, q as u64);
            let mut j = t.index as u64;
            while s + j < end {
                // SAFETY: as above.
                unsafe {
                    store_word(output, s + j, bytes, self.ll_slot(me, half, 1, q).add(j as usize).read(flag, budget))
                };
                j += step;
            }
        }
    }

    /// One-shot LL allgather body: `output[q * bytes ..][.. bytes]` = rank q's `input`.
    ///
    /// # Safety
    /// As for [`Collective::allreduce_ll_body`]; `output` valid for `n_ranks * bytes`; `input`
    /// may be `output + rank * bytes` (in place), and must not overlap `output` otherwise.
    #[inline(always)]
    pub unsafe fn allgather_ll_body(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        t: Threads,
        budget: SpinBudget,
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        let (flag, half) = (ll_flag(e), e & 1);
        let words = bytes.div_ceil(8);
        device_assert!(words * LL_PACKET_BYTES <= self.ll_bytes, "allgather (LL): message larger than the LL slot");
        let mine = output.byte_add((me as u64 * bytes) as usize);
        let in_place = mine == input;
        let mut i = t.index as u64;
        while i < words {
            // SAFETY: word i lies in the input and in my part of the output; packet i in the slots.
            unsafe {
                let w = load_word(input, i, bytes);
                self.ll_send(half, 0, i, w, flag);
                if !in_place {
                    store_word(mine, i, bytes, w);
                }
            }
            i += t.count as u64;
        }
        for q in 0..n {
            if q == me {
                continue;
            }
            let theirs = output.byte_add((q as u64 * bytes) as usize);
            let mut i = t.index as u64;
            while i < words {
                // SAFETY: as above.
                unsafe {
                    store_word(theirs, i, bytes, self.ll_slot(me, half, 0, q).add(i as usize).read(flag, budget))
                };
                i += t.count as u64;
            }
        }
    }

    /// One-shot LL reduce-scatter body: `output` (`bytes`) = sum over ranks q of rank q's
    /// `input[rank * bytes ..][.. bytes]`.
    ///
    /// # Safety
    /// As for [`Collective::allreduce_ll_body`]; `input` valid for `n_ranks * bytes`; `output`
    /// may be `input + rank * bytes` (in place), and must not overlap `input` otherwise.
    #[inline(always)]
    pub unsafe fn reduce_scatter_ll_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        t: Threads,
        budget: SpinBudget,
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        let (flag, half) = (ll_flag(e), e & 1);
        let words = bytes.div_ceil(8);
        device_assert!(words * LL_PACKET_BYTES <= self.ll_bytes, "reduce-scatter (LL): shard larger than the LL slot");
        for p in 0..n {
            if p == me {
                continue;
            }
            let shard = input.byte_add((p as u64 * bytes) as usize);
            let mut i = t.index as u64;
            while i < words {
                // SAFETY: word i lies in shard p; packet i in the slot.
                unsafe { self.ll_slot(p, half, 0, me).add(i as usize).write(load_word(shard, i, bytes), flag) };
                i += t.count as u64;
            }
        }
        let own_shard = input.byte_add((me as u64 * bytes) as usize);
        let mut i = t.index as u64;
        while i < words {
            // SAFETY: as above.
            unsafe {
                let own = load_word(own_shard, i, bytes);
                let acc = self.ll_sum::<E>(half, i, own, flag, budget);
                store_word(output, i, bytes, acc);
            }
            i += t.count as u64;
        }
    }

    // ---------------------------------------------------------------- pipelined blocks

    /// This block's part `[lo, hi)` (in 16-byte vectors) of shard `p` of `vecs` vectors.
    #[inline(always)]
    fn block_part(&self, vecs: u64, p: u32, b: u32, nb: u32) -> (u64, u64) {
        let (s, e) = split(vecs, self.n_ranks as u64, p as u64);
        let (lo, hi) = split(e - s, nb as u64, b as u64);
        (s + lo, s + hi)
    }

    /// Piece `k` (in vectors) of the range `[lo, hi)`, `cv` vectors per piece (may be empty).
    #[inline(always)]
    fn piece((lo, hi): (u64, u64), k: u64, cv: u64) -> (u64, u64) {
        let a = (lo + k * cv).min(hi);
        (a, (a + cv).min(hi))
    }

    /// Pipelined allreduce body over all blocks of the grid (each block a part of every shard,
    /// in rounds through its own slots), for the whole 16-byte vectors of the message; the last
    /// `bytes % 16` bytes go through the one-shot LL body in block 0.
    ///
    /// # Safety
    /// As for [`Collective::allreduce_ll_body`] (any `bytes`), called by every thread of every
    /// block; `input` and `output` 16-byte aligned.
    #[inline(always)]
    pub unsafe fn allreduce_pipelined_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        device_assert!(
            input.is_aligned_to(16) && output.is_aligned_to(16),
            "allreduce (pipelined): buffers not 16-byte aligned"
        );
        let (n, me) = (self.n_ranks, self.rank);
        let (b, nb) = (sreg::ctaid_x(), sreg::nctaid_x());
        let t = Threads::block();
        let tid = t.index;
        let vecs = bytes / 16;
        let mut longest = 0;
        for p in 0..n {
            let (lo, hi) = self.block_part(vecs, p, b, nb);
            longest = longest.max(hi - lo);
        }
        let cv = self.piece_bytes(longest * 16) / 16;
        let rounds = longest.div_ceil(cv);
        device_assert!(rounds < (1 << ROUND_BITS) - 1, "allreduce (pipelined): too many rounds");
        let own_flag =
            |q: u32, phase: u64| self.scratch.byte_add(self.flag_allreduce_offset(b, q, phase) as usize).cast::<u64>();
        let peer_flag = |p: u32, phase: u64| {
            self.peer_scratch(p).byte_add(self.flag_allreduce_offset(b, me, phase) as usize).cast::<u64>()
        };
        // F(j): the owners' sums of round j, from my AG slots into the output.
        let copy_out = |j: u64| {
            if tid < n && tid != me {
                // SAFETY: my flag word for peer `tid`. Partner: the peer's raise after D(j).
                unsafe { wait_flag(own_flag(tid, 1), round_flag(e, j + 1), budget, c"allreduce: AG flag") };
            }
            barrier_sync();
            for q in 0..n {
                if q == me {
                    continue;
                }
                let (lo, hi) = Self::piece(self.block_part(vecs, q, b, nb), j, cv);
                let src = self.scratch.byte_add(self.data_allreduce_offset(b, q, 1, j & 1) as usize);
                // SAFETY: the piece lies in the output and in the slot (at most cv vectors).
                unsafe { copy::<16>(output.byte_add((lo * 16) as usize), src, (hi - lo) * 16, t) };
            }
        };
        for k in 0..rounds {
            let slot = k & 1;
            // A(k): input piece k of shard p into rank p's RS slot.
            for p in 0..n {
                if p == me {
                    continue;
                }
                let (lo, hi) = Self::piece(self.block_part(vecs, p, b, nb), k, cv);
                let dst = self.peer_scratch(p).byte_add(self.data_allreduce_offset(b, me, 0, slot) as usize);
                // SAFETY: the piece lies in the input and in the slot.
                unsafe { copy::<16>(dst, input.byte_add((lo * 16) as usize), (hi - lo) * 16, t) };
            }
            barrier_sync();
            if tid < n && tid != me {
                // SAFETY: my flag word in peer `tid`'s scratch.
                unsafe { raise_flag(peer_flag(tid, 0), round_flag(e, k + 1)) };
            }
            if k >= 1 {
                copy_out(k - 1);
            }
            if tid < n && tid != me {
                // SAFETY: as in copy_out. Partner: the peer's raise after its A(k).
                unsafe { wait_flag(own_flag(tid, 0), round_flag(e, k + 1), budget, c"allreduce: RS flag") };
            }
            barrier_sync();
            // D(k): sum piece k of my shard in rank order; write it and push it to every peer.
            let (lo, hi) = Self::piece(self.block_part(vecs, me, b, nb), k, cv);
            let src = |q: u32| {
                if q == me {
                    input.byte_add((lo * 16) as usize)
                } else {
                    self.scratch.byte_add(self.data_allreduce_offset(b, q, 0, slot) as usize)
                }
            };
            let dst = |p: u32| {
                if p == me {
                    output.byte_add((lo * 16) as usize)
                } else {
                    self.peer_scratch(p).byte_add(self.data_allreduce_offset(b, me, 1, slot) as usize)
                }
            };
            // SAFETY: the piece lies in the input and output, and in every slot.
            unsafe { sum_vectors::<E>(n, src, dst, hi - lo, t) };
            barrier_sync();
            if tid < n && tid != me {
                // SAFETY: as above.
                unsafe { raise_flag(peer_flag(tid, 1), round_flag(e, k + 1)) };
            }
        }
        if rounds > 0 {
            copy_out(rounds - 1);
        }
        let tail = bytes - vecs * 16;
        if tail > 0 && b == 0 {
            let at = (vecs * 16) as usize;
            // SAFETY: the tail lies in both buffers and fits any LL slot (under 16 bytes).
            unsafe { self.allreduce_ll_body::<E>(e, input.byte_add(at), output.byte_add(at), tail, t, budget) };
        }
    }

    /// Waits (thread `p` for peer `p`) until every peer has consumed the slot that round `k`
    /// of epoch `e` reuses, then synchronises the block.
    ///
    /// # Safety
    /// Called by every thread of the block; flags of this block.
    #[inline(always)]
    unsafe fn wait_slot_free(&self, e: u64, k: u64, b: u32, budget: SpinBudget) {
        let tid = sreg::tid_x();
        if tid < self.n_ranks && tid != self.rank {
            let ack = self.scratch.byte_add(self.flag_gather_offset(b, tid, 1) as usize).cast::<u64>();
            if k >= 2 {
                // SAFETY: my ack word for peer `tid`. Partner: the peer's ack after round k - 2.
                unsafe { wait_flag(ack, round_flag(e, k - 1), budget, c"collective: slot ack") };
            } else {
                let data = self.scratch.byte_add(self.flag_gather_offset(b, tid, 0) as usize).cast::<u64>();
                spin_until(budget, c"collective: previous operation's acks", || {
                    // SAFETY: my ack and data words for peer `tid` (the peer's data flag read
                    // first: a later ack only frees more).
                    let d = unsafe { atomic::load::<Acquire, Sys, u64>(data.as_ptr()) };
                    // SAFETY: as above.
                    slots_free_at_start(unsafe { atomic::load::<Acquire, Sys, u64>(ack.as_ptr()) }, d, e)
                });
            }
        }
        barrier_sync();
    }

    /// Waits (thread `q` for peer `q`) for the data flag of round `j`, then synchronises.
    ///
    /// # Safety
    /// As for `wait_slot_free`.
    #[inline(always)]
    unsafe fn wait_data(&self, e: u64, j: u64, b: u32, budget: SpinBudget) {
        let tid = sreg::tid_x();
        if tid < self.n_ranks && tid != self.rank {
            let f = self.scratch.byte_add(self.flag_gather_offset(b, tid, 0) as usize).cast::<u64>();
            // SAFETY: my data flag for peer `tid`. Partner: the peer's raise after its push.
            unsafe { wait_flag(f, round_flag(e, j + 1), budget, c"collective: data flag") };
        }
        barrier_sync();
    }

    /// Raises flag `phase` (0 data, 1 ack) of this block toward every peer (thread `p` for
    /// peer `p`), after a barrier.
    ///
    /// # Safety
    /// Called by every thread of the block.
    #[inline(always)]
    unsafe fn raise_gather(&self, b: u32, phase: u64, value: u64) {
        barrier_sync();
        let tid = sreg::tid_x();
        if tid < self.n_ranks && tid != self.rank {
            let f = self.peer_scratch(tid).byte_add(self.flag_gather_offset(b, self.rank, phase) as usize).cast();
            // SAFETY: my flag word in peer `tid`'s scratch.
            unsafe { raise_flag(f, value) };
        }
    }

    /// This block's part `[lo, hi)` in bytes of a `bytes`-long range split in 16-byte units.
    #[inline(always)]
    fn byte_part(bytes: u64, b: u32, nb: u32) -> (u64, u64) {
        let (lo, hi) = split(bytes.div_ceil(16), nb as u64, b as u64);
        ((lo * 16).min(bytes), (hi * 16).min(bytes))
    }

    /// The rounds behind the pipelined allgather, reduce-scatter and direct allreduce, through
    /// two acknowledged slots per peer: piece `[lo, hi)` of round k of this block's part goes from
    /// `input[p * stride + lo ..]` into this rank's slot `k & 1` at every peer p, then
    /// `local(lo, hi)` runs; once the peers' piece k has come, `take(k & 1, lo, hi)` consumes it.
    ///
    /// # Safety
    /// Called by every thread of every block; `input` valid for `(n_ranks - 1) * stride +
    /// bytes`; `local` and `take` touch only the piece and the slots they are given.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn stream_pieces(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        stride: u64,
        bytes: u64,
        budget: SpinBudget,
        local: impl Fn(u64, u64),
        take: impl Fn(u64, u64, u64),
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        let (b, nb) = (sreg::ctaid_x(), sreg::nctaid_x());
        let t = Threads::block();
        let part = Self::byte_part(bytes, b, nb);
        let c = self.piece_bytes(part.1 - part.0);
        let rounds = (part.1 - part.0).div_ceil(c);
        device_assert!(rounds < (1 << ROUND_BITS) - 1, "collective (pipelined): too many rounds");
        let consume = |j: u64| {
            // SAFETY: block-wide calls; the slots and pieces lie in their buffers.
            unsafe {
                self.wait_data(e, j, b, budget);
                let (lo, hi) = Self::piece(part, j, c);
                take(j & 1, lo, hi);
                let ack = if j + 1 == rounds { done_flag(e) } else { round_flag(e, j + 1) };
                self.raise_gather(b, 1, ack);
            }
        };
        for k in 0..rounds {
            // SAFETY: block-wide; my slots in the peers' scratch, my pieces of the buffers.
            unsafe {
                self.wait_slot_free(e, k, b, budget);
                let (lo, hi) = Self::piece(part, k, c);
                for p in 0..n {
                    if p != me {
                        let dst = self.peer_scratch(p).byte_add(self.data_gather_offset(b, me, k & 1) as usize);
                        copy_widest(dst, input.byte_add((p as u64 * stride + lo) as usize), hi - lo, t);
                    }
                }
                local(lo, hi);
                self.raise_gather(b, 0, round_flag(e, k + 1));
            }
            if k >= 1 {
                consume(k - 1);
            }
        }
        if rounds > 0 {
            consume(rounds - 1);
        }
    }

    /// Pipelined allgather body over all blocks: `output[q * bytes ..][.. bytes]` = rank q's
    /// `input`, each block streaming a part of the chunk through two slots per peer, which the
    /// receivers acknowledge.
    ///
    /// # Safety
    /// As for [`Collective::allgather_ll_body`] (any `bytes`), called by every thread of every
    /// block.
    #[inline(always)]
    pub unsafe fn allgather_pipelined_body(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        let b = sreg::ctaid_x();
        let t = Threads::block();
        let mine = output.byte_add((me as u64 * bytes) as usize);
        let in_place = mine == input;
        let local = |lo: u64, hi: u64| {
            if !in_place {
                // SAFETY: the piece lies in the input and in my part of the output.
                unsafe { copy_widest(mine.byte_add(lo as usize), input.byte_add(lo as usize), hi - lo, t) };
            }
        };
        let take = |slot: u64, lo: u64, hi: u64| {
            for q in 0..n {
                if q != me {
                    let src = self.scratch.byte_add(self.data_gather_offset(b, q, slot) as usize);
                    // SAFETY: the piece lies in rank q's part of the output and in the slot.
                    unsafe { copy_widest(output.byte_add((q as u64 * bytes + lo) as usize), src, hi - lo, t) };
                }
            }
        };
        // SAFETY: forwarded from the caller; every rank receives the same input range.
        unsafe { self.stream_pieces(e, input, 0, bytes, budget, local, take) }
    }

    /// Sums, in rank order, `len` bytes of `own` (this rank's contribution) and of rank q's
    /// data at `slot(q)` into `dst`, shared by the threads of `t`.
    ///
    /// # Safety
    /// Every range valid for `len` bytes and aligned to the element; the slots 16-byte aligned.
    #[inline(always)]
    unsafe fn sum_into<E: Element>(
        &self,
        dst: GlobalPtr<u8>,
        own: GlobalPtr<u8>,
        slot: impl Fn(u32) -> GlobalPtr<u8>,
        len: u64,
        t: Threads,
    ) {
        let (n, me) = (self.n_ranks, self.rank);
        if dst.is_aligned_to(16) && own.is_aligned_to(16) && len.is_multiple_of(16) {
            let src = |q: u32| if q == me { own } else { slot(q) };
            // SAFETY: every vector lies in every range (caller's contract); only this rank's
            // output is written.
            unsafe { sum_vectors::<E>(n, src, |p| if p == me { dst } else { GlobalPtr::null() }, len / 16, t) };
            return;
        }
        // Any alignment: one element at a time (zero-extended lanes add like whole words).
        let mut i = t.index as u64;
        while i < len / E::BYTES {
            let off = (i * E::BYTES) as usize;
            // SAFETY: element i lies in every range, aligned to its size.
            unsafe {
                let load = |p: GlobalPtr<u8>| -> u32 {
                    if E::BYTES == 4 {
                        p.byte_add(off).cast::<u32>().as_ptr().read()
                    } else {
                        p.byte_add(off).cast::<u16>().as_ptr().read() as u32
                    }
                };
                let mut acc = 0u32;
                for q in 0..n {
                    let x = load(if q == me { own } else { slot(q) });
                    acc = if q == 0 { x } else { E::add32(acc, x) };
                }
                if E::BYTES == 4 {
                    dst.byte_add(off).cast::<u32>().as_ptr().write(acc);
                } else {
                    dst.byte_add(off).cast::<u16>().as_ptr().write(acc as u16);
                }
            }
            i += t.count as u64;
        }
    }

    /// Pipelined reduce-scatter body over all blocks: `output` (`bytes`) = sum over ranks q of
    /// rank q's `input[rank * bytes ..][.. bytes]`.
    ///
    /// # Safety
    /// As for [`Collective::reduce_scatter_ll_body`] (any `bytes`, a multiple of the element
    /// size), called by every thread of every block.
    #[inline(always)]
    pub unsafe fn reduce_scatter_pipelined_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.reduce_streamed::<E>(e, input, output, bytes, bytes, budget) }
    }

    /// One-shot pipelined allreduce body over all blocks: every rank streams its whole input to
    /// every peer through the acknowledged slots and sums locally, so the data crosses one hop
    /// and nothing is copied out afterwards. `(n_ranks - 1) * bytes` leave each rank: the best
    /// large-message form for two ranks, where two-shot sends the same bytes in two hops.
    ///
    /// # Safety
    /// As for [`Collective::allreduce_ll_body`] (any `bytes`, a multiple of the element size),
    /// called by every thread of every block.
    #[inline(always)]
    pub unsafe fn allreduce_direct_body<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        budget: SpinBudget,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.reduce_streamed::<E>(e, input, output, bytes, 0, budget) }
    }

    /// The streamed reduction behind reduce-scatter (`stride` = `bytes`: rank p gets the sum of
    /// the ranks' chunks p) and the direct allreduce (`stride` = 0: every rank gets the sum of
    /// the whole buffers): rank p receives `input[p * stride ..][.. bytes]` from every rank.
    ///
    /// # Safety
    /// As for [`Collective::reduce_scatter_pipelined_body`].
    #[inline(always)]
    unsafe fn reduce_streamed<E: Element>(
        &self,
        e: u64,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        stride: u64,
        budget: SpinBudget,
    ) {
        let b = sreg::ctaid_x();
        let t = Threads::block();
        let take = |slot: u64, lo: u64, hi: u64| {
            let own = input.byte_add((self.rank as u64 * stride + lo) as usize);
            let slot = |q: u32| self.scratch.byte_add(self.data_gather_offset(b, q, slot) as usize);
            // SAFETY: the piece lies in the output, in this rank's range of the input and in
            // every slot.
            unsafe { self.sum_into::<E>(output.byte_add(lo as usize), own, slot, hi - lo, t) };
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_pieces(e, input, stride, bytes, budget, |_, _| {}, take) }
    }

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
