//! The decode (low-latency) mode's buffer: DeepEP's `low_latency_dispatch` /
//! `low_latency_combine`, where the received rows are grouped by *local expert* rather than by
//! source rank. One buffer per rank, every other rank maps it (the handle's `shared`), sized by
//! `max_tokens` (the decode batch, DeepEP's `num_max_dispatch_tokens_per_rank`):
//!
//! ```text
//!  dispatch flags  [sender][block] u64      block b of `sender` stores the dispatch epoch here
//!                                           once its rows for this rank are written
//!  combine flags   [sender][block] u64      the same for combine
//!  count words     [parity][sender][1 + experts] u64: word 0 the signature, word 1 + e the
//!                  sender's token count toward expert e (every expert, so that every sender
//!                  knows where its rows start); each word (tag << 32 | value)
//!  per expert      [experts] u32            this rank's tokens toward every expert (layout)
//!  positions       [max_tokens][max_topk] u32: token t's position among this rank's tokens
//!                  toward the expert of its slot j (the first slot naming it; layout)
//!  recv_x          [epr][cap] rows, cap = n * max_tokens, of the call's row bytes (at most
//!                  hidden * 4): the rows of local expert j at j * cap, by source rank, then
//!                  token order (DeepEP's packed_recv_x)
//!  recv_scales     [epr][cap] rows of scale_row_bytes (FP8 dispatches)
//!  recv_src        [epr][cap] i32: the row's token index on its source (packed_recv_src_info)
//!  recv_route      [epr][cap] u32: source rank << 16 | slot (what combine sends back to)
//!  recv_count      [epr] i32: rows of every local expert (packed_recv_count)
//!  recv_range      [epr][n] i64: (begin << 32) | count of every source's rows of the expert
//!                  (packed_recv_layout_range)
//!  landing         [max_tokens][max_topk] rows of hidden * 4: the expert outputs of this rank's
//!                  (token, slot), written by the ranks that ran the experts
//! ```
//!
//! A token goes to each of its experts once: a slot naming an expert that an earlier slot of the
//! same token names reuses the earlier slot's row (DeepEP reads the same output for both).

use crate::{EpHandle, FP8_GROUP};

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Byte offsets of the regions of a decode buffer (the same on every rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeRegions {
    /// Dispatch flags.
    pub dispatch_flags: u64,
    /// Combine flags.
    pub combine_flags: u64,
    /// Count words.
    pub counts: u64,
    /// This rank's tokens per expert (written by the decode layout kernel).
    pub per_expert: u64,
    /// This rank's (token, slot) positions (written by the decode layout kernel).
    pub positions: u64,
    /// Received rows.
    pub recv_x: u64,
    /// Received FP8 scales.
    pub recv_scales: u64,
    /// Received source token indices.
    pub recv_src: u64,
    /// Received routes (source rank << 16 | slot).
    pub recv_route: u64,
    /// Rows per local expert.
    pub recv_count: u64,
    /// Begin and count of every source's rows per local expert.
    pub recv_range: u64,
    /// Combine landing rows.
    pub landing: u64,
    /// Total bytes.
    pub total: u64,
}

impl EpHandle {
    /// Rows of one local expert in the decode buffer (`n_ranks * max_tokens`).
    pub const fn decode_capacity(&self) -> u64 {
        self.n_ranks as u64 * self.max_tokens as u64
    }
    /// Words of one sender's decode count slot: the signature and one per expert.
    pub const fn decode_count_words(&self) -> u32 {
        1 + self.experts
    }
    /// The decode buffer's regions.
    pub const fn decode_regions(&self) -> DecodeRegions {
        let (n, b) = (self.n_ranks as u64, self.blocks as u64);
        let epr = self.experts_per_rank() as u64;
        let rows = epr * self.decode_capacity();
        let pairs = self.max_tokens as u64 * self.max_topk as u64;
        let dispatch_flags = 0;
        let combine_flags = n * b * 8;
        let counts = 2 * n * b * 8;
        let per_expert = counts + 2 * n * self.decode_count_words() as u64 * 8;
        let positions = round_up(per_expert + self.experts as u64 * 4, 16);
        let recv_x = round_up(positions + pairs * 4, 256);
        let recv_scales = round_up(recv_x + rows * self.max_row_bytes(), 256);
        let recv_src = round_up(recv_scales + rows * (self.hidden / FP8_GROUP) as u64 * 4, 256);
        let recv_route = round_up(recv_src + rows * 4, 256);
        let recv_count = round_up(recv_route + rows * 4, 256);
        let recv_range = round_up(recv_count + epr * 4, 16);
        let landing = round_up(recv_range + epr * n * 8, 256);
        let total = landing + pairs * self.max_row_bytes();
        DecodeRegions {
            dispatch_flags,
            combine_flags,
            counts,
            per_expert,
            positions,
            recv_x,
            recv_scales,
            recv_src,
            recv_route,
            recv_count,
            recv_range,
            landing,
            total,
        }
    }
    /// Offset of the decode dispatch flag of (`sender`, `block`).
    pub const fn decode_dispatch_flag(&self, sender: u32, block: u32) -> u64 {
        self.decode_regions().dispatch_flags + (sender as u64 * self.blocks as u64 + block as u64) * 8
    }
    /// Offset of the decode combine flag of (`sender`, `block`).
    pub const fn decode_combine_flag(&self, sender: u32, block: u32) -> u64 {
        self.decode_regions().combine_flags + (sender as u64 * self.blocks as u64 + block as u64) * 8
    }
    /// Offset of decode count word `word` of `sender` in slot `parity`.
    pub const fn decode_count_word(&self, parity: u64, sender: u32, word: u32) -> u64 {
        let w = self.decode_count_words() as u64;
        self.decode_regions().counts + ((parity * self.n_ranks as u64 + sender as u64) * w + word as u64) * 8
    }
}
