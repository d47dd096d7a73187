//! The device code of `mscclpp-ep`: what its host crate and its kernel crate (`ep/kernels`)
//! must agree on: the kernel handle, where every region of the buffers starts and the tags of
//! the count words. Plain `core` code, compiled for both targets.
//!
//! Every rank owns one *shared* buffer that every other rank has mapped (CUDA IPC):
//!
//! ```text
//!  dispatch flags  [sender][block] u64     block b of `sender` stores the dispatch epoch here
//!                                          once its rows for this rank are written
//!  combine flags   [sender][block] u64     the same for combine
//!  count words     [parity][sender][word] u64, word 0: signature (k, received format,
//!                  element type: see signature()),
//!                  words 1..=n: the sender's token count toward every rank,
//!                  then one word per expert of this rank: the sender's (token, slot) count,
//!                  then the sender's token count;
//!                  each word is (tag << 32 | value), the tag naming the dispatch
//!  then, per receive slot (`slots` of them, one per dispatch in flight):
//!  recv_x          [n * max_tokens] rows of `row_bytes` (the call's hidden * element bytes,
//!                  at most hidden * `elem_bytes`)
//!  recv_idx        [n * max_tokens][k] i32 (local expert ids, -1 for an expert elsewhere or
//!                  none; or the ids as given, with `global_ids`)
//!  recv_w          [n * max_tokens][k] f32 (0 where the local id is -1; or as given)
//!  recv_src        [n * max_tokens] i32 (the token's index on its source rank)
//!  recv_scales     [n * max_tokens][hidden / 128] f32 (FP8 dispatches: each received row's
//!                  scale per 128 columns, or its UE8M0 bytes: `scale_row_bytes`; `recv_x`
//!                  then holds rows of `hidden` e4m3 bytes)
//!  combine landing [sender][max_tokens] rows: what `sender` computed for this rank's tokens
//!  weight landing  [sender][max_tokens][max_topk] f32: the top-k weights `sender` returns for
//!                  this rank's tokens (a combine that sums them)
//! ```
//!
//! The pipelined mode (`ring_rows` not 0) keeps the flags and count words, then instead of the
//! slots: counters and fixed rings ([`RingRegions`]), `channels * n * ring_rows` rows each way,
//! whatever the token count; its received rows, ids, weights, sources and scales (the slot
//! regions above) live in a *local* buffer of the rank (`local`, one slot after the other).
//!
//! And two local buffers per rank: the *layout* (this rank's routing, written by the layout
//! kernel: one per slot, and one more for a layout computed alone) and the *info* (what this
//! rank received, one per slot).
//!
//! The decode (low-latency) mode has a buffer of its own, laid out in [`decode`].
#![cfg_attr(not(test), no_std)]

pub mod decode;

/// Most ranks (GPUs of one machine).
pub const MAX_RANKS: usize = 8;
/// Largest top-k.
pub const MAX_TOPK: usize = 32;
/// Most experts (the layout kernel counts them in shared memory).
pub const MAX_EXPERTS: usize = 4096;
/// Threads of the (single-block) layout kernel, unless the kernel allows fewer.
pub const LAYOUT_THREADS: u32 = 512;

/// Dynamic shared memory of the dispatch and combine kernels (their per-block tables).
pub const EXCHANGE_SHARED_BYTES: u32 = 1024;

/// Element type code of bf16 in the dispatch signature.
pub const DTYPE_BF16: u32 = 1;
/// Element type code of f32 in the dispatch signature.
pub const DTYPE_F32: u32 = 2;

/// Received-row format of a dispatch: the rows as given.
pub const FORMAT_COPY: u32 = 0;
/// Received-row format of a dispatch: bf16 rows cast to FP8 E4M3 with one f32 scale per
/// [`FP8_GROUP`] columns, `amax / 448` ([`e4m3_scales`]).
pub const FORMAT_E4M3: u32 = 1;
/// [`FORMAT_E4M3`] with the scales rounded up to powers of two (DeepEP's `round_scale`).
pub const FORMAT_E4M3_POW2: u32 = 2;
/// [`FORMAT_E4M3_POW2`] with the scales stored as UE8M0 bytes (the f32 exponent field, DeepEP's
/// `use_ue8m0`), four to a little-endian u32, each row's padded with zero bytes to whole words.
pub const FORMAT_E4M3_UE8M0: u32 = 3;

/// Bytes of one received row's scales in `format` with `groups` scales: `4 * groups` (f32), or
/// `groups` rounded up to a multiple of 4 (UE8M0 bytes), never more than `4 * groups`.
pub const fn scale_row_bytes(format: u32, groups: u32) -> u32 {
    if format == FORMAT_E4M3_UE8M0 { groups.div_ceil(4) * 4 } else { groups * 4 }
}

/// Columns that share one FP8 scale.
pub const FP8_GROUP: u32 = 128;
/// Largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Smallest amax of a group (DeepEP's `kFP8Margin`): a group of zeros gets a finite scale.
pub const FP8_MARGIN: f32 = 1e-4;

/// The dispatch signature: every rank must pass the same `k`, element type and received format.
pub const fn signature(k: u32, dtype: u32, format: u32) -> u32 {
    (k << 16) | (format << 8) | dtype
}

/// Or-ed into the [`signature`] of a cached dispatch (one that reuses an earlier dispatch's
/// routing): every rank must dispatch cached, or none.
pub const SIGNATURE_CACHED: u32 = 1 << 31;

/// Or-ed into the [`signature`] of a dispatch in the window form (the `ep_dispatch_window`
/// kernels): every rank must dispatch in the same form.
pub const SIGNATURE_WINDOW: u32 = 1 << 30;

/// The multiplier and the stored scale of a group whose largest magnitude (at least
/// [`FP8_MARGIN`]) is `amax`, as DeepEP's `calculate_fp8_scales` computes them: the stored scale
/// `amax * (1 / 448)` and the multiplier `448 / amax` (f32, rounded to nearest); with `pow2`
/// (`round_scale`), the stored scale `2^ceil(log2(amax * (1 / 448)))` and the multiplier its
/// inverse. An element is stored as `e4m3_from_f32(x * multiplier)`; `e4m3 * scale` reads it back.
#[inline(always)]
pub fn e4m3_scales(amax: f32, pow2: bool) -> (f32, f32) {
    let inv = amax * (1.0 / E4M3_MAX);
    if pow2 {
        // ceil(log2(inv)) from the bits, as DeepEP's `fast_log2_ceil` (inv is a normal number).
        let bits = inv.to_bits();
        let e = ((bits >> 23) & 0xff) as i32 - 127 + ((bits & 0x7f_ffff) != 0) as i32;
        let pow = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
        (pow(-e), pow(e))
    } else {
        (E4M3_MAX / amax, inv)
    }
}

/// `x` as FP8 E4M3 (E4M3FN: no infinities, 0x7f / 0xff NaN), rounded to nearest even and
/// saturated to +-448 (PTX `cvt.rn.satfinite.e4m3x2.f32`); NaN stays NaN.
pub const fn e4m3_from_f32(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7fff_ffff;
    let mag = if abs > 0x7f80_0000 {
        0x7f // NaN
    } else if abs >= 0x43e8_0000 {
        0x7e // |x| >= 464 (the midpoint of 448 and 480), infinities too: 448
    } else if abs <= 0x3a80_0000 {
        0 // |x| <= 2^-10, half the smallest subnormal (2^-9): 0 (a tie goes to even 0)
    } else {
        // 2^-10 < |x| < 464, a normal f32: keep 4 significant bits (implicit + 3) where the
        // E4M3 exponent is normal (|x| >= 2^-6), fewer below (multiples of 2^-9), rounding the
        // dropped bits to nearest even. A carry out of the kept bits moves to the next binade
        // (or from the subnormals to the smallest normal), as the encoding adds up.
        let e = ((abs >> 23) as i32) - 127;
        let mant = (abs & 0x7f_ffff) | 0x80_0000;
        let shift = if e >= -6 { 20 } else { 20 + (-6 - e) as u32 };
        let mut q = mant >> shift;
        let rem = mant & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q += 1;
        }
        if e >= -6 { (((e + 6) as u32) << 3) + q } else { q }
    };
    (mag as u8) | sign
}

/// The tag of dispatch epoch `e` in the count words: its low 32 bits, never 0 (a zeroed word
/// is "nothing written yet").
pub const fn count_tag(e: u64) -> u32 {
    let t = e as u32;
    if t == 0 { 1 } else { t }
}

/// A count word: `tag` in the high half, `value` in the low half.
pub const fn pack_count(tag: u32, value: u32) -> u64 {
    ((tag as u64) << 32) | value as u64
}

/// The rank that hosts `expert` (experts are split into equal contiguous ranges).
pub const fn rank_of_expert(expert: u32, experts: u32, ranks: u32) -> u32 {
    expert / (experts / ranks)
}

/// Whether a top-k entry names an expert (`0 <= id < experts`); anything else (-1 by
/// convention) is "no expert" for the layout, the dispatch and the combine alike.
pub const fn valid_expert(id: i32, experts: u32) -> bool {
    id >= 0 && (id as u32) < experts
}

/// The id receiving rank `rank` gets for top-k entry `id` (DeepEP's local ids): `id - rank *
/// experts_per_rank` when `id` names an expert of `rank`, else -1 (an expert elsewhere, or
/// none).
pub const fn local_expert(id: i32, rank: u32, experts: u32, ranks: u32) -> i32 {
    if valid_expert(id, experts) && rank_of_expert(id as u32, experts, ranks) == rank {
        id - (rank * (experts / ranks)) as i32
    } else {
        -1
    }
}

/// The id an i64 top-k entry stands for: itself when it names an expert (`0..experts`), else -1
/// (so that no value outside the i32 range names an expert once narrowed).
pub const fn id_from_i64(id: i64, experts: u32) -> i32 {
    if id >= 0 && id < experts as i64 { id as i32 } else { -1 }
}

/// `count` rounded up to a multiple of `alignment` (1 or more), at most `u32::MAX`.
pub const fn align_count(count: u32, alignment: u32) -> u32 {
    let a = if alignment == 0 { 1 } else { alignment as u64 };
    let r = (count as u64).div_ceil(a) * a;
    if r > u32::MAX as u64 { u32::MAX } else { r as u32 }
}

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// The kernel handle of one rank (passed by value to the dispatch and combine kernels).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpHandle {
    /// Device address of `n_ranks` u64: rank q's shared buffer as mapped on this GPU.
    pub peers: u64,
    /// This rank's shared buffer.
    pub shared: u64,
    /// This rank's epochs: `blocks` u64 for dispatch, then `blocks` for combine (all 1 at first).
    pub state: u64,
    /// This rank's layout buffer ([`EpHandle::layout_regions`]).
    pub layout: u64,
    /// This rank's receive info ([`EpHandle::info_words`] u32).
    pub info: u64,
    /// This rank.
    pub rank: u32,
    /// Number of ranks (1..=[`MAX_RANKS`]).
    pub n_ranks: u32,
    /// Number of experts (a multiple of `n_ranks`).
    pub experts: u32,
    /// Most tokens one rank dispatches in one call.
    pub max_tokens: u32,
    /// Hidden size (elements per token).
    pub hidden: u32,
    /// Largest k.
    pub max_topk: u32,
    /// Blocks of every dispatch and combine launch (the flags exist for this many).
    pub blocks: u32,
    /// 1: the received top-k ids are the ids as given, with their weights; 0: local ids (see
    /// [`local_expert`]), weights zeroed where the local id is -1. The same on every rank.
    pub global_ids: u32,
    /// The rows received per local expert are reported rounded up to a multiple of this (1 or
    /// more).
    pub expert_alignment: u32,
    /// Bytes of one top-k id of the inputs: 4 (i32) or 8 (i64, see [`id_from_i64`]).
    pub idx_bytes: u32,
    /// The receive slot of the operation: its received rows, ids, weights, sources, scales and
    /// combine landing ([`EpHandle::shared_regions`]); `layout` and `info` are this slot's too
    /// ([`EpHandle::for_slot`]). Below `slots`.
    pub slot: u32,
    /// Receive slots of the shared buffer (1 or more; 0 reads as 1).
    pub slots: u32,
    /// Bytes of the widest element the receive and landing rows are sized for: 4 (f32) or 2
    /// (bf16); 0 reads as 4.
    pub elem_bytes: u32,
    /// Rows of every ring of the pipelined mode ([`EpHandle::ring_regions`]); 0: the
    /// unpipelined mode (rows straight into the receivers' shared buffers).
    pub ring_rows: u32,
    /// The pipelined mode: this rank's local (not shared) buffer of received rows, ids, weights,
    /// sources and scales, `slots` of [`EpHandle::local_slot_bytes`]; 0 otherwise.
    pub local: u64,
}

const _: () = assert!(core::mem::size_of::<EpHandle>() == 104);
// SAFETY: `repr(C)` of u64 and u32 fields with no padding (104 bytes, asserted above), the same
// layout on the host and nvptx64.
unsafe impl mscclpp_device::abi::DeviceAbi for EpHandle {}

/// The top-k weights a combine sums (a kernel parameter): `out == 0` for none.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightsArgs {
    /// Device address of the received rows' weights (`rows x k` f32) this rank returns.
    pub input: u64,
    /// Bytes at `input`.
    pub input_bytes: u64,
    /// Device address of this rank's tokens' summed weights (`tokens x k` f32), or 0.
    pub out: u64,
    /// Top-k of the dispatch.
    pub k: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = assert!(core::mem::size_of::<WeightsArgs>() == 32);
// SAFETY: `repr(C)` of u64 and u32 fields with no padding (32 bytes, asserted above).
unsafe impl mscclpp_device::abi::DeviceAbi for WeightsArgs {}

/// The bias rows a combine adds to every token's sum (a kernel parameter): up to two device
/// addresses of `tokens` rows of the combine's element type, 0 for none.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BiasArgs {
    /// Device addresses of the two bias tensors (0: none), added in this order.
    pub bias: [u64; 2],
}

const _: () = assert!(core::mem::size_of::<BiasArgs>() == 16);
// SAFETY: `repr(C)` of two u64 (16 bytes, asserted above).
unsafe impl mscclpp_device::abi::DeviceAbi for BiasArgs {}

/// Byte offsets of the regions of a shared buffer (the same on every rank): the flags and count
/// words, then the regions of the handle's receive slot (received rows to weight landing;
/// every slot has its own), and the total of all slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedRegions {
    /// Dispatch flags.
    pub dispatch_flags: u64,
    /// Combine flags.
    pub combine_flags: u64,
    /// Count words.
    pub counts: u64,
    /// Received rows.
    pub recv_x: u64,
    /// Received top-k ids.
    pub recv_idx: u64,
    /// Received top-k weights.
    pub recv_w: u64,
    /// Received source token indices.
    pub recv_src: u64,
    /// Received FP8 scales (`[rows][hidden / 128]` f32).
    pub recv_scales: u64,
    /// Combine landing rows.
    pub combine: u64,
    /// Combine landing top-k weights.
    pub combine_w: u64,
    /// Total bytes.
    pub total: u64,
}

/// Byte offsets of the pipelined mode's regions of a shared buffer ([`EpHandle::ring_regions`]).
/// `C` channels, `n` ranks, `R` ring rows; every counter a u64 that only grows (rows ever
/// pushed or consumed), `[channel][peer]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingRegions {
    /// Dispatch tails `[c][source]`: rows `source`'s channel `c` pushed into this rank's ring.
    pub tails: u64,
    /// Dispatch done words `[c][source]`: `pack_count(tag, rows of the call)`, stored last.
    pub dones: u64,
    /// Dispatch heads `[c][destination]`: rows `destination` consumed from this rank's ring
    /// there (stored by the destination, polled here).
    pub heads: u64,
    /// Combine tails `[c][source]`.
    pub combine_tails: u64,
    /// Combine heads `[c][destination]`.
    pub combine_heads: u64,
    /// This rank's own running counts (never read by another rank): `[4][c][peer]`: dispatch
    /// rows sent, dispatch rows consumed, combine rows sent, combine rows consumed.
    pub cursors: u64,
    /// Dispatch ring rows `[c][source][R]` of `hidden * elem_bytes` bytes.
    pub rows: u64,
    /// Dispatch ring metadata `[c][source][R]` of [`EpHandle::ring_meta_bytes`].
    pub meta: u64,
    /// Combine ring rows `[c][source][R]`.
    pub combine_rows: u64,
    /// Combine ring weights `[c][source][R][max_topk]` f32.
    pub combine_w: u64,
    /// Total bytes of the shared buffer.
    pub total: u64,
}

/// Byte offsets of the regions of a layout buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutRegions {
    /// Tokens toward every rank: `n_ranks` u32.
    pub per_rank: u64,
    /// (token, slot) pairs toward every expert: `experts` u32.
    pub per_expert: u64,
    /// `[token][rank]` u8: 1 when the token goes to the rank.
    pub in_rank: u64,
    /// `[token][rank]` i32: the token's position among the tokens sent to the rank, or -1.
    pub send_index: u64,
    /// Total bytes.
    pub total: u64,
}

impl EpHandle {
    /// Experts per rank.
    pub const fn experts_per_rank(&self) -> u32 {
        self.experts / self.n_ranks
    }
    /// Words of one sender's count slot: signature, `n_ranks` token counts, one per expert of
    /// the receiving rank, the sender's token count.
    pub const fn count_words(&self) -> u32 {
        2 + self.n_ranks + self.experts_per_rank()
    }
    /// Rows a rank can receive in one dispatch.
    pub const fn max_recv_rows(&self) -> u64 {
        self.n_ranks as u64 * self.max_tokens as u64
    }
    /// Receive slots (at least 1).
    pub const fn slot_count(&self) -> u32 {
        if self.slots == 0 { 1 } else { self.slots }
    }
    /// Bytes of the widest row (`hidden` elements of `elem_bytes`).
    pub const fn max_row_bytes(&self) -> u64 {
        self.hidden as u64 * if self.elem_bytes == 0 { 4 } else { self.elem_bytes as u64 }
    }
    /// FP8 scales per received row (`hidden / 128`, rounded down).
    pub const fn scales_per_row(&self) -> u32 {
        self.hidden / FP8_GROUP
    }
    /// Bytes of one sender's combine landing region.
    pub const fn combine_region_bytes(&self) -> u64 {
        self.max_tokens as u64 * self.max_row_bytes()
    }
    /// Whether the handle is of the pipelined mode (`ring_rows` not 0).
    pub const fn pipelined(&self) -> bool {
        self.ring_rows != 0
    }
    /// Channels of the pipelined mode: `blocks / 2` (block `c` below it sends channel `c`, block
    /// `channels + c` receives it; a last odd block idles).
    pub const fn channels(&self) -> u32 {
        self.blocks / 2
    }
    /// Bytes of one entry of a dispatch ring's metadata: the destination row (u32), the source
    /// index (u32), `max_topk` ids, `max_topk` weights, the FP8 scales (`hidden / 128` f32 at
    /// most), rounded up to 16.
    pub const fn ring_meta_bytes(&self) -> u64 {
        round_up(8 + 8 * self.max_topk as u64 + 4 * self.scales_per_row() as u64, 16)
    }
    /// Byte offset of the FP8 scales in a ring metadata entry.
    pub const fn ring_meta_scales(&self) -> u64 {
        8 + 8 * self.max_topk as u64
    }
    /// The pipelined mode's regions of the shared buffer, after the flags and count words (see
    /// the crate documentation): counters, then the rings.
    pub const fn ring_regions(&self) -> RingRegions {
        let (n, c, r) = (self.n_ranks as u64, self.channels() as u64, self.ring_rows as u64);
        let start = round_up(self.counts_end(), 256);
        let words = c * n * 8;
        let tails = start;
        let dones = tails + words;
        let heads = dones + words;
        let combine_tails = heads + words;
        let combine_heads = combine_tails + words;
        let cursors = combine_heads + words;
        let rows = round_up(cursors + 4 * words, 256);
        let entries = c * n * r;
        let meta = round_up(rows + entries * self.max_row_bytes(), 256);
        let combine_rows = round_up(meta + entries * self.ring_meta_bytes(), 256);
        let combine_w = round_up(combine_rows + entries * self.max_row_bytes(), 256);
        let total = round_up(combine_w + entries * self.max_topk as u64 * 4, 256);
        RingRegions {
            tails,
            dones,
            heads,
            combine_tails,
            combine_heads,
            cursors,
            rows,
            meta,
            combine_rows,
            combine_w,
            total,
        }
    }
    /// Offset of the counter word `[channel][peer]` of the counter region at `region`.
    pub const fn ring_word(&self, region: u64, channel: u32, peer: u32) -> u64 {
        region + (channel as u64 * self.n_ranks as u64 + peer as u64) * 8
    }
    /// Index of ring entry `pos` (a running count) of ring `[channel][peer]` among all entries.
    pub const fn ring_entry(&self, channel: u32, peer: u32, pos: u64) -> u64 {
        (channel as u64 * self.n_ranks as u64 + peer as u64) * self.ring_rows as u64 + pos % self.ring_rows as u64
    }
    /// Bytes of one receive slot of the pipelined mode's local buffer.
    pub const fn local_slot_bytes(&self) -> u64 {
        self.slot_regions().5
    }
    /// End of the count words.
    const fn counts_end(&self) -> u64 {
        let (n, b) = (self.n_ranks as u64, self.blocks as u64);
        2 * n * b * 8 + 2 * n * self.count_words() as u64 * 8
    }
    /// One receive slot's regions from 0: received rows, ids, weights, sources, scales, end.
    const fn slot_regions(&self) -> (u64, u64, u64, u64, u64, u64) {
        let rows = self.max_recv_rows();
        let recv_x = 0;
        let recv_idx = round_up(recv_x + rows * self.max_row_bytes(), 256);
        let recv_w = round_up(recv_idx + rows * self.max_topk as u64 * 4, 256);
        let recv_src = round_up(recv_w + rows * self.max_topk as u64 * 4, 256);
        let recv_scales = round_up(recv_src + rows * 4, 256);
        let end = round_up(recv_scales + rows * self.scales_per_row() as u64 * 4, 256);
        (recv_x, recv_idx, recv_w, recv_src, recv_scales, end)
    }
    /// The shared buffer's regions, those of a receive slot for the handle's `slot`. In the
    /// pipelined mode the received rows to scales are offsets in the *local* buffer (`local`),
    /// there is no combine landing (`combine` and `combine_w` are `total`) and `total` ends the
    /// rings ([`EpHandle::ring_regions`]).
    pub const fn shared_regions(&self) -> SharedRegions {
        let (n, b) = (self.n_ranks as u64, self.blocks as u64);
        let dispatch_flags = 0;
        let combine_flags = n * b * 8;
        let counts = 2 * n * b * 8;
        let (recv_x, recv_idx, recv_w, recv_src, recv_scales, combine) = self.slot_regions();
        // Where this slot's regions start, and the combine landing and the end of the buffer.
        let (at, combine, combine_w, total) = if self.pipelined() {
            // The received rows live in the local buffer (one slot's regions after another);
            // the combine goes through the rings, so its landing regions are empty.
            let total = self.ring_regions().total;
            (self.slot as u64 * combine, total, total, total)
        } else {
            let first_slot = round_up(self.counts_end(), 256);
            // One slot's regions from 0, then moved to the handle's slot.
            let combine_w = round_up(combine + n * self.combine_region_bytes(), 256);
            let slot_bytes = round_up(combine_w + n * self.combine_w_region_bytes(), 256);
            let at = first_slot + self.slot as u64 * slot_bytes;
            (at, at + combine, at + combine_w, first_slot + self.slot_count() as u64 * slot_bytes)
        };
        SharedRegions {
            dispatch_flags,
            combine_flags,
            counts,
            recv_x: at + recv_x,
            recv_idx: at + recv_idx,
            recv_w: at + recv_w,
            recv_src: at + recv_src,
            recv_scales: at + recv_scales,
            combine,
            combine_w,
            total,
        }
    }
    /// Bytes of one receive slot's layout buffer (the layout buffer holds `slots + 1`: one per
    /// slot and one for a layout computed alone).
    pub const fn layout_slot_bytes(&self) -> u64 {
        round_up(self.layout_regions().total, 256)
    }
    /// Bytes of one receive slot's info words.
    pub const fn info_slot_bytes(&self) -> u64 {
        round_up(self.info_words() as u64 * 4, 16)
    }
    /// This handle for receive slot `slot`, its layout and info in the buffers at `layout_base`
    /// (slot `i` at `i * layout_slot_bytes()`) and `info_base` (`i * info_slot_bytes()`).
    pub const fn for_slot(self, slot: u32, layout_base: u64, info_base: u64) -> Self {
        let layout = layout_base + slot as u64 * self.layout_slot_bytes();
        let info = info_base + slot as u64 * self.info_slot_bytes();
        Self { slot, layout, info, ..self }
    }
    /// Offset of the dispatch flag of (`sender`, `block`).
    pub const fn dispatch_flag(&self, sender: u32, block: u32) -> u64 {
        self.shared_regions().dispatch_flags + (sender as u64 * self.blocks as u64 + block as u64) * 8
    }
    /// Offset of the combine flag of (`sender`, `block`).
    pub const fn combine_flag(&self, sender: u32, block: u32) -> u64 {
        self.shared_regions().combine_flags + (sender as u64 * self.blocks as u64 + block as u64) * 8
    }
    /// Offset of count word `word` of `sender` in slot `parity`.
    pub const fn count_word(&self, parity: u64, sender: u32, word: u32) -> u64 {
        let w = self.count_words() as u64;
        self.shared_regions().counts + ((parity * self.n_ranks as u64 + sender as u64) * w + word as u64) * 8
    }
    /// Bytes of one sender's weight landing region.
    pub const fn combine_w_region_bytes(&self) -> u64 {
        self.max_tokens as u64 * self.max_topk as u64 * 4
    }
    /// Offset of `sender`'s weight landing region.
    pub const fn combine_w_region(&self, sender: u32) -> u64 {
        self.shared_regions().combine_w + sender as u64 * self.combine_w_region_bytes()
    }
    /// Offset of `sender`'s combine landing region.
    pub const fn combine_region(&self, sender: u32) -> u64 {
        self.shared_regions().combine + sender as u64 * self.combine_region_bytes()
    }
    /// The layout buffer's regions.
    pub const fn layout_regions(&self) -> LayoutRegions {
        let n = self.n_ranks as u64;
        let per_rank = 0;
        let per_expert = round_up(n * 4, 256);
        let in_rank = round_up(per_expert + self.experts as u64 * 4, 256);
        let send_index = round_up(in_rank + self.max_tokens as u64 * n, 256);
        let total = send_index + self.max_tokens as u64 * n * 4;
        LayoutRegions { per_rank, per_expert, in_rank, send_index, total }
    }
    /// Words (u32) of the info buffer: received rows, `n + 1` offsets by source rank, the
    /// `n x n` count matrix (`[source][destination]`), rows received per local expert, every
    /// rank's token count.
    pub const fn info_words(&self) -> u32 {
        2 + self.n_ranks + self.n_ranks * self.n_ranks + self.experts_per_rank() + self.n_ranks
    }
    /// Index of the token counts by rank in the info buffer.
    pub const fn info_tokens(&self) -> u32 {
        self.info_per_expert() + self.experts_per_rank()
    }
    /// Index of the first offset in the info buffer (offset of source `s` at `+ s`).
    pub const INFO_OFFSETS: u32 = 1;
    /// Index of the count matrix in the info buffer.
    pub const fn info_matrix(&self) -> u32 {
        2 + self.n_ranks
    }
    /// Index of the per-expert counts in the info buffer.
    pub const fn info_per_expert(&self) -> u32 {
        2 + self.n_ranks + self.n_ranks * self.n_ranks
    }
}
