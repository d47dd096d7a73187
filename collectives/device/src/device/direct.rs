//! Direct allreduce: every rank streams its whole input to every peer and sums locally.

use super::*;

impl Collective {
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
}
