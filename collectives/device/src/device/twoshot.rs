//! Two-shot LL allreduce: a reduce-scatter then an allgather, both as LL16 packets.

use super::*;

impl Collective {
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
        // Shot 1: shard p to rank p.
        for p in 0..n {
            if p == me {
                continue;
            }
            let (s, end) = split(words, n as u64, p as u64);
            for j in t.stride(end - s) {
                // SAFETY: word s + j lies in the input, packet j in the slot (checked size).
                unsafe { self.ll_slot(p, half, 0, me).add(j as usize).write(load_word(input, s + j, bytes), flag) };
            }
        }
        // Sum my shard in rank order, keep it, and send it to everyone.
        let (s, end) = split(words, n as u64, me as u64);
        for j in t.stride(end - s) {
            // SAFETY: as above.
            unsafe {
                let own = load_word(input, s + j, bytes);
                let acc = self.ll_sum::<E>(half, j, own, flag, budget);
                store_word(output, s + j, bytes, acc);
                self.ll_send(half, 1, j, acc, flag);
            }
        }
        // Shot 2: every other shard's sum from its owner.
        for q in 0..n {
            if q == me {
                continue;
            }
            let (s, end) = split(words, n as u64, q as u64);
            for j in t.stride(end - s) {
                // SAFETY: as above.
                unsafe {
                    store_word(output, s + j, bytes, self.ll_slot(me, half, 1, q).add(j as usize).read(flag, budget))
                };
            }
        }
    }
}
