//! One-shot LL: every rank writes its data as LL16 packets into every peer's scratch and reads
//! (sums) the peers' packets from its own: allreduce, allgather and reduce-scatter.

use super::*;

impl Collective {
    /// Writes `w` as packet `i` of this rank's slot (`half`, `region`) in every peer's scratch.
    ///
    /// # Safety
    /// Packet `i` lies in the slots.
    #[inline(always)]
    pub(crate) unsafe fn ll_send(&self, half: u64, region: u64, i: u64, w: u64, flag: u32) {
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
    pub(crate) unsafe fn ll_sum<E: Element>(&self, half: u64, i: u64, own: u64, flag: u32, budget: SpinBudget) -> u64 {
        let (mut acc, me) = (0u64, self.rank);
        for q in 0..self.n_ranks {
            let v = if q == me {
                own
            } else {
                // SAFETY: forwarded from the caller.
                unsafe { self.ll_slot(me, half, 0, q).add(i as usize).read(flag, budget) }
            };
            acc = if q == 0 { v } else { E::add_dwords(acc, v) };
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
        for i in t.stride(words) {
            // SAFETY: word i lies in the input; packet i lies in every peer's slot (checked size).
            unsafe {
                let w = load_word(input, i, bytes);
                self.ll_send(half, 0, i, w, flag);
            }
        }
        for i in t.stride(words) {
            // SAFETY: as above, for this rank's own slots.
            unsafe {
                let own = load_word(input, i, bytes);
                let acc = self.ll_sum::<E>(half, i, own, flag, budget);
                store_word(output, i, bytes, acc);
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
        for i in t.stride(words) {
            // SAFETY: word i lies in the input and in my part of the output; packet i in the slots.
            unsafe {
                let w = load_word(input, i, bytes);
                self.ll_send(half, 0, i, w, flag);
                if !in_place {
                    store_word(mine, i, bytes, w);
                }
            }
        }
        for q in 0..n {
            if q == me {
                continue;
            }
            let theirs = output.byte_add((q as u64 * bytes) as usize);
            for i in t.stride(words) {
                // SAFETY: as above.
                unsafe {
                    store_word(theirs, i, bytes, self.ll_slot(me, half, 0, q).add(i as usize).read(flag, budget))
                };
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
            for i in t.stride(words) {
                // SAFETY: word i lies in shard p; packet i in the slot.
                unsafe { self.ll_slot(p, half, 0, me).add(i as usize).write(load_word(shard, i, bytes), flag) };
            }
        }
        let own_shard = input.byte_add((me as u64 * bytes) as usize);
        for i in t.stride(words) {
            // SAFETY: as above.
            unsafe {
                let own = load_word(own_shard, i, bytes);
                let acc = self.ll_sum::<E>(half, i, own, flag, budget);
                store_word(output, i, bytes, acc);
            }
        }
    }
}
