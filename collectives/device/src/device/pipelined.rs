//! Pipelined forms: every block streams its part of every shard through two slots per peer
//! (allreduce: reduce-scatter then allgather in rounds; allgather and reduce-scatter over the
//! acknowledged slots of `stream`).

use super::*;

impl Collective {
    /// This block's part `[lo, hi)` (in 16-byte vectors) of shard `p` of `vecs` vectors.
    #[inline(always)]
    pub(crate) fn block_part(&self, vecs: u64, p: u32, b: u32, nb: u32) -> (u64, u64) {
        let (s, e) = split(vecs, self.n_ranks as u64, p as u64);
        let (lo, hi) = split(e - s, nb as u64, b as u64);
        (s + lo, s + hi)
    }

    /// Piece `k` (in vectors) of the range `[lo, hi)`, `cv` vectors per piece (may be empty).
    #[inline(always)]
    pub(crate) fn piece((lo, hi): (u64, u64), k: u64, cv: u64) -> (u64, u64) {
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
}
