//! The acknowledged slots behind the pipelined allgather and reduce-scatter and the direct
//! allreduce: per-round data flags, acknowledgements, and the streamed sum.

use super::*;

impl Collective {
    /// Waits (thread `p` for peer `p`) until every peer has consumed the slot that round `k`
    /// of epoch `e` reuses, then synchronises the block.
    ///
    /// # Safety
    /// Called by every thread of the block; flags of this block.
    #[inline(always)]
    pub(crate) unsafe fn wait_slot_free(&self, e: u64, k: u64, b: u32, budget: SpinBudget) {
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
    pub(crate) unsafe fn wait_data(&self, e: u64, j: u64, b: u32, budget: SpinBudget) {
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
    pub(crate) unsafe fn raise_gather(&self, b: u32, phase: u64, value: u64) {
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
    pub(crate) fn byte_part(bytes: u64, b: u32, nb: u32) -> (u64, u64) {
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
    pub(crate) unsafe fn stream_pieces(
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

    /// Sums, in rank order, `len` bytes of `own` (this rank's contribution) and of rank q's
    /// data at `slot(q)` into `dst`, shared by the threads of `t`.
    ///
    /// # Safety
    /// Every range valid for `len` bytes and aligned to the element; the slots 16-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn sum_into<E: Element>(
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
        // Any alignment: one element at a time.
        let size = core::mem::size_of::<E>() as u64;
        for i in t.stride(len / size) {
            let off = (i * size) as usize;
            // SAFETY: element i lies in every range, aligned to its size.
            unsafe {
                let load =
                    |q: u32| -> E { (if q == me { own } else { slot(q) }).byte_add(off).cast::<E>().as_ptr().read() };
                let mut acc = load(0);
                for q in 1..n {
                    acc = acc.add(load(q));
                }
                dst.byte_add(off).cast::<E>().as_ptr().write(acc);
            }
        }
    }

    /// The streamed reduction behind reduce-scatter (`stride` = `bytes`: rank p gets the sum of
    /// the ranks' chunks p) and the direct allreduce (`stride` = 0: every rank gets the sum of
    /// the whole buffers): rank p receives `input[p * stride ..][.. bytes]` from every rank.
    ///
    /// # Safety
    /// As for [`Collective::reduce_scatter_pipelined_body`].
    #[inline(always)]
    pub(crate) unsafe fn reduce_streamed<E: Element>(
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
}
