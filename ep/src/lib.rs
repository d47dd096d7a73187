//! Expert-parallel dispatch and combine among the GPUs of one machine (NVLink peer memory), for
//! mixture-of-experts layers: every token goes to the ranks that host its top-k experts, once per
//! rank, and the experts' results come back to the token's rank and are summed.
//!
//! ```text
//!  ExpertParallel::new(&comm, Config::new(max_tokens, hidden, experts, max_topk))
//!        every rank allocates a shared buffer sized for the maxima and maps everybody's
//!  ep.dispatch(&DispatchInput { x, dtype, topk_idx, topk_weights, tokens, k }, stream)
//!        layout kernel:   counts per rank / expert, is-token-in-rank, positions (prefix sums)
//!        dispatch kernel: counts to every rank, then rows (or FP8 rows and scales:
//!                         ep.dispatch_as), ids, weights and source indices
//!        -> Dispatched: this rank's received rows, grouped by source rank, on the GPU
//!  (your experts: one output row per received row, in a buffer `y` of your own)
//!  ep.combine(&dispatched, &y, &out, dtype, stream)
//!        rows go back to their source ranks; out[t] = sum over the ranks token t went to, in
//!        rank order, of their row for t (f32 sums, rounded once)
//! ```
//!
//! **Layout** ([`reference::layout`] is its specification, the kernel `ep_layout` computes it on
//! the GPU): for `tokens x k` expert ids (`-1`, or any id outside `0..experts`, means "no
//! expert") and `experts` split into equal contiguous ranges over the ranks: the number of tokens
//! toward each rank (a token counts once per rank), the number of (token, slot) pairs toward each
//! expert, whether each token goes to each rank, and its position among the tokens that do
//! (exclusive prefix sums in token order), as DeepEP's `get_dispatch_layout` defines them.
//!
//! **Dispatch** puts the rows of rank `s` for rank `d` at rows `offset(s) + position` of `d`'s
//! receive buffer, where `offset(s)` is the number of rows `d` receives from ranks below `s`:
//! the first pass exchanges every rank's counts (tagged words in every rank's shared buffer), so
//! every sender knows where its rows go and the receive buffer is contiguous, grouped by source
//! rank, tokens in their source order. Alongside: the token's `k` expert ids, its `k` weights
//! (f32) and its index on the source rank. The ids are local by default, as DeepEP gives them
//! ([`ExpertIds::Local`]): on rank `d`, `id - d * experts_per_rank` for an expert of `d`, -1 for
//! an expert of another rank (or none), and the weight of every -1 slot is 0, so an expert layer
//! indexes its local experts directly and sums `weight * expert(x)` over all `k` slots;
//! [`ExpertIds::Global`] keeps the ids and weights as given. What was received (rows, the offsets
//! by source, rows per local expert, rounded up to [`Config::expert_alignment`]) stays on the GPU
//! ([`Dispatched`]); reading it to the host is the caller's choice
//! ([`ExpertParallel::recv_counts`]), never needed by the library.
//!
//! **Combine** takes one row per received row (`y`, the expert layer's output for that row,
//! typically the sum over this rank's experts of the token of weight x expert output: the
//! weights came with the dispatch) and returns, for every token of this rank, the sum over the
//! ranks it went to, added in rank order in f32 from 0 and rounded once to the element type:
//! the same bits on every run. A token that went nowhere gets zeros. The weights are applied
//! where the experts run, so one row per (token, rank) crosses NVLink each way, as in DeepEP's
//! normal mode; weighting at the source would need one row per (token, expert), up to `k / ranks`
//! times the traffic. [`ExpertParallel::combine_with_weights`] also sums the received rows' `k`
//! weights back the same way (DeepEP's `combined_topk_weights`).
//!
//! **FP8** ([`ExpertParallel::dispatch_as`] with [`RecvFormat::E4m3`]): the dispatch kernel casts
//! bf16 rows to FP8 E4M3 on the way, one f32 scale per 128 columns of a token, as DeepSeek-V3
//! and DeepEP dispatch them ([`reference::cast_e4m3`] is the specification): rows of `hidden`
//! bytes and `[rows][hidden / 128]` scales ([`Dispatched::recv_x_scales_addr`]). The combine
//! that follows takes bf16 rows, as DeepEP's.
//!
//! **Decode mode** ([`LowLatency`], module [`decode`]): DeepEP's low-latency dispatch and
//! combine, with a buffer of its own sized by the decode batch: the rows arrive grouped by local
//! expert, and the combine applies the top-k weights; capturable in a CUDA graph.
//!
//! **Several dispatches in flight** ([`Config::slots`], default 1): the received rows live in
//! one of `slots` receive slots, a ring; a [`Dispatched`] stays valid for the `slots` most recent
//! dispatches and is combined once, in any order among them (two-batch overlap: dispatch A,
//! dispatch B, combine A, combine B needs 2). A handle whose slot a later dispatch took is
//! refused before anything is launched.
//!
//! **Cached dispatch** ([`ExpertParallel::dispatch_cached`], DeepEP's `dispatch(x,
//! handle=...)`): new rows along the routing of an earlier, still valid dispatch, without the
//! layout kernel; the received ids, weights and sources are the earlier dispatch's.
//!
//! **Bias** ([`ExpertParallel::combine_with`], [`CombineOptions::bias`]): one or two
//! `tokens x hidden` tensors added to the combined rows, the f32 sum starting at
//! `0 + bias0 + bias1` (DeepEP's order), then the rows in rank order, rounded once.
//!
//! Memory: every rank allocates about `slots * 2 * ranks * max_tokens * hidden * widest` bytes
//! (receive rows and combine landing of every slot, sized for [`Config::widest`], f32 by
//! default, plus ids, weights and FP8 scales; [`Config::shared_bytes`],
//! [`ExpertParallel::memory_bytes`]).
//!
//! **Pipelined mode** ([`Config::ring_rows`], `Config::new(..).pipelined(Some(rows))`): memory
//! bounded independently of the token count, as DeepEP's normal mode streams its rows. The
//! shared (peer-mapped) buffer holds, besides the count words, fixed rings of `rows` rows per
//! (channel, peer) each way: about `channels * ranks * rows * 2 * hidden * widest` bytes plus
//! the rings' metadata, with `channels = blocks / 2` (20 blocks, 8 ranks, 64 rows, hidden 7168,
//! f32 sizing: about 282 MiB, where the default mode needs about 1.76 GiB for 4096 tokens).
//! Block `c` of the first half sends channel `c` (a contiguous range of its tokens), block `c`
//! of the second half receives it; senders wait for room in a ring, receivers drain it into the
//! outputs and hand the room back; every wait has the budget. The received rows, ids, weights,
//! sources and scales that [`Dispatched`] exposes live in a *local* buffer of the rank owned by
//! the object, one per receive slot (still sized for `ranks * max_tokens` rows, since nothing
//! waits on the host: [`Config::local_bytes`], in [`ExpertParallel::memory_bytes`]'s second
//! figure). The same results, bit for bit (combine sums each token's rows in rank order from the
//! rings), with FP8, slots, cached dispatch, bias and summed weights; the window form
//! ([`Form::Window`]) is refused with an error naming it.
//!
//! **Window form** ([`ExpertParallel::set_form`], [`Form::Window`]): the same dispatch and
//! combine through the symmetric-window API: every rank's shared buffer is registered as a window
//! (`mscclpp_host::window`) when the object is built, and the window kernels take every
//! cross-rank address from `Window::peer(rank, offset)` and count the blocks' arrivals in the
//! window's signals, with the same bits as the default [`Form::PeerTable`].
//!
//! **CUDA graphs**: in the peer-table form ([`Form::PeerTable`], the default), unpipelined and
//! pipelined, a dispatch (rows as given or FP8) and its combine (the summed weights and bias
//! too) captured on a stream (`CudaStream::begin_capture` / `end_capture`) replay with whatever
//! the input buffers hold at each replay (the same `tokens` and `k`): nothing is read to the
//! host or allocated, and the epochs, the count words' tags and the rings' heads, tails and
//! cursors live on the GPU. The capture takes a receive slot as an eager dispatch does and
//! every replay writes that slot again, so the captured [`Dispatched`] reads the latest
//! replay's results. Eager dispatches between replays take the ring's slots as usual; once one
//! takes the graph's slot, the captured handle is refused on the host and the next replay
//! overwrites that dispatch's rows: combine it first. The window form is refused on a stream being captured: its kernels take a round
//! counted on the host, which a replay would repeat.
//!
//! **SM budget**: dispatch and combine run [`Config::blocks`] blocks (default
//! [`DEFAULT_BLOCKS`], 20, DeepEP's `num_sms`), so that other work can run on the other SMs;
//! [`ExpertParallel::wait_event`] and [`ExpertParallel::record_event`] order them with the
//! caller's streams.
//!
//! Every call is collective (every rank, same order, same `k`, element type and received format
//! ([`RecvFormat`]); the token count may differ between ranks, 0 included) and stream-ordered:
//! nothing waits on the host. A dispatch's received rows stay valid until its slot is taken
//! again, `slots` dispatches later on the same [`ExpertParallel`]; work that reads them (the
//! experts) must be ordered before that dispatch on the stream. Each dispatch may be combined
//! once, while it is valid.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, BootstrapExt, DeviceBuffer, Error, Gpu, LaunchConfig, Result};

pub mod decode;
pub mod reference;
mod window;
/// The handle and buffer layouts shared with the kernels (the crate `mscclpp-ep-device`).
pub use mscclpp_ep_device as shared;

pub use decode::{DecodeCombineInput, DecodeDispatched, DecodeInput, DecodeReceived, LowLatency};
pub use mscclpp_host::DataType;
use shared::{
    BiasArgs, EXCHANGE_SHARED_BYTES, EpHandle, LAYOUT_THREADS, MAX_EXPERTS, MAX_RANKS, MAX_TOPK, WeightsArgs,
};
pub use window::Form;

/// The PTX of the kernels (built from `kernels/` by this crate's build script).
pub const PTX: &str = include_str!(env!("MSCCLPP_EP_PTX"));

/// Largest `max_tokens` (row indices stay below 2^31 with [`MAX_RANKS`] ranks).
pub const MAX_TOKENS: usize = 1 << 24;

/// Blocks of dispatch and combine unless [`Config::blocks`] says otherwise (DeepEP's default
/// `num_sms`), or the GPU's SMs (this rank's share of them) when there are fewer.
pub const DEFAULT_BLOCKS: u32 = 20;

/// Largest [`Config::expert_alignment`].
pub const MAX_EXPERT_ALIGNMENT: u32 = 1 << 16;

/// Most receive slots ([`Config::slots`]).
pub const MAX_SLOTS: usize = 8;

/// Most rows of a ring of the pipelined mode ([`Config::ring_rows`]).
pub const MAX_RING_ROWS: usize = 1 << 16;

/// The element type of the top-k ids given to dispatch and layout ([`Config::topk_idx`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TopkIdx {
    /// i32 ids.
    #[default]
    I32,
    /// i64 ids, as DeepEP takes them (`topk_idx_t`): an id outside `0..experts` is "no expert",
    /// as with i32, and arrives as -1 (the received ids are i32 either way).
    I64,
}

impl TopkIdx {
    /// Bytes of one id.
    pub const fn bytes(self) -> usize {
        match self {
            TopkIdx::I32 => 4,
            TopkIdx::I64 => 8,
        }
    }
}

/// The format of the rows a dispatch delivers ([`ExpertParallel::dispatch_as`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecvFormat {
    /// The rows as given (bf16 or f32).
    #[default]
    Input,
    /// bf16 rows cast to FP8 E4M3 (E4M3FN, rounded to nearest even, saturated to +-448) in the
    /// dispatch kernel, as DeepSeek-V3 / DeepEP dispatch them: `hidden` bytes per row, and one f32
    /// scale per 128 columns (`[rows][hidden / 128]`, at [`Dispatched::recv_x_scales_addr`]) with
    /// `x = e4m3 * scale`. For every 128 columns of a token: `amax = max(1e-4, max |x|)`, the
    /// scale `amax * (1 / 448)` and each element `e4m3(x * (448 / amax))`, in f32, as DeepEP's
    /// dispatch kernel computes them (`calculate_fp8_scales`). Needs `hidden % 128 == 0`.
    E4m3,
    /// [`RecvFormat::E4m3`] with every scale rounded up to a power of two,
    /// `2^ceil(log2(amax / 448))` (DeepEP's `round_scale`), still as f32.
    E4m3Pow2,
    /// [`RecvFormat::E4m3Pow2`] with the scales stored as UE8M0 bytes (the exponent field of the
    /// f32 power of two: `scale = 2^(byte - 127)`), DeepEP's `use_ue8m0`: four to a u32, byte
    /// `i % 4` of word `i / 4` (little-endian), `ceil(hidden / 512)` words per row, the padding
    /// bytes 0 (DeepEP's packed int scales, row-major).
    E4m3Ue8m0,
}

impl RecvFormat {
    /// The kernels' code of the format.
    const fn code(self) -> u32 {
        match self {
            RecvFormat::Input => shared::FORMAT_COPY,
            RecvFormat::E4m3 => shared::FORMAT_E4M3,
            RecvFormat::E4m3Pow2 => shared::FORMAT_E4M3_POW2,
            RecvFormat::E4m3Ue8m0 => shared::FORMAT_E4M3_UE8M0,
        }
    }
    /// Whether the rows arrive as FP8 with scales.
    pub const fn is_fp8(self) -> bool {
        !matches!(self, RecvFormat::Input)
    }
}

/// Which expert ids a dispatch delivers with the received rows ([`Config::expert_ids`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExpertIds {
    /// DeepEP's: on the receiving rank `r`, `id - r * experts_per_rank` for an expert of `r`,
    /// -1 for an expert of another rank (or none), and the weight of every -1 slot is 0. An
    /// expert layer indexes its local experts with them directly.
    #[default]
    Local,
    /// The ids as given (global, `-1` or any id outside `0..experts` for none) and all `k`
    /// weights as given, on every rank.
    Global,
}

/// How an [`ExpertParallel`] is built. Every rank must use the same sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most tokens one rank dispatches in one call.
    pub max_tokens: usize,
    /// Elements per token (a multiple of 8, so that bf16 and f32 rows are whole 16-byte vectors).
    pub hidden: usize,
    /// Number of experts, split into equal contiguous ranges: rank `r` hosts experts
    /// `r * experts / n .. (r + 1) * experts / n`.
    pub experts: usize,
    /// Largest top-k of a call.
    pub max_topk: usize,
    /// Receive slots: how many dispatches may be in flight (default 1). Every dispatch takes the
    /// next slot of a ring, so a [`Dispatched`] stays valid (its rows, and combinable once) for
    /// the `slots` most recent dispatches, combined in any order among them: two-batch overlap
    /// (dispatch A, dispatch B, combine A, combine B) needs 2. The shared buffer grows by the
    /// slot count (each slot has its receive rows and combine landing). 1 to [`MAX_SLOTS`]; the
    /// same on every rank.
    pub slots: usize,
    /// The widest element type this object carries: `DataType::F32` (the default) or
    /// `DataType::Bf16`, which halves the receive rows and the combine landing (the bulk of the
    /// memory); a dispatch or combine of wider rows is then an error. The same on every rank.
    pub widest: DataType,
    /// The received top-k ids: local (the default, as DeepEP gives them) or global. The same on
    /// every rank.
    pub expert_ids: ExpertIds,
    /// The type of the top-k ids given to [`ExpertParallel::dispatch`] and
    /// [`ExpertParallel::layout`]: i32 (the default) or i64. May differ between ranks.
    pub topk_idx: TopkIdx,
    /// The rows received per local expert ([`RecvCounts::per_expert`] and the info words) are
    /// rounded up to a multiple of this, as DeepEP's `expert_alignment` (grouped GEMMs want 128;
    /// the received rows themselves are as before). 1 (the default) to
    /// [`MAX_EXPERT_ALIGNMENT`]; may differ between ranks.
    pub expert_alignment: u32,
    /// Blocks of dispatch and combine, DeepEP's `num_sms` (default [`DEFAULT_BLOCKS`], 20, or
    /// the GPU's SMs when fewer; when ranks that are threads of one process share the GPU, this
    /// rank's share of them, `Communicator::sm_share`). 1 up to the SMs (the blocks wait for each
    /// other, so all must be resident); the SMs left over run other work (attention, a shared
    /// expert) at the same time, on another stream ([`ExpertParallel::wait_event`],
    /// [`ExpertParallel::record_event`]). Ranks that differ use the smallest. Every count gives
    /// the same bits.
    ///
    /// How to pick it: dispatch and combine move bytes over NVLink, which a fraction of the SMs
    /// saturates; the rest only spin. Run `ep_bench` with `MSCCLPP_RS_EP_BLOCKS` at your token
    /// count and take the smallest count past which the GB/s stop rising (DeepEP's 20 is the
    /// place to start on NVLink 4 machines such as H100 and H200; decoding batches, with few
    /// rows to move, often need fewer); more only when nothing runs beside dispatch and combine. Work launched beside them must leave these
    /// blocks room to be resident, or they wait for it to finish.
    pub blocks: Option<u32>,
    /// Threads per block of dispatch and combine (default 1024, or what the kernels' registers
    /// allow).
    pub threads: Option<u32>,
    /// How long any wait inside a kernel may last before the kernel traps with a message.
    pub budget: SpinBudget,
    /// Launch with programmatic stream serialization, so that each kernel's launch overlaps the
    /// end of the kernel before it (every kernel waits for its predecessor before touching
    /// memory). Default on; `MSCCLPP_RS_EP_PDL=0` in the environment turns it off, and it is
    /// off where ranks that are threads of one process share the GPU ([`ExpertParallel::config`]
    /// tells).
    pub overlap: bool,
    /// The pipelined mode, as DeepEP's normal mode streams its rows: `Some(R)` sends the rows
    /// through fixed rings of `R` rows per (channel, peer), half the blocks sending and half
    /// receiving (a channel per pair, [`Config::blocks`] at least 2), so that the shared
    /// buffer no longer grows with `max_tokens`: about `channels * ranks * R * 2 * (hidden *
    /// widest + metadata)` bytes ([`Config::shared_bytes`]); the received rows, ids, weights,
    /// sources and scales then live in a local buffer of every rank, one per receive slot
    /// ([`Config::local_bytes`]). The same results, bit for bit, as `None` (the default: the
    /// rows straight into the receivers' shared buffers). 1 to [`MAX_RING_ROWS`]; the same on
    /// every rank. Not with [`Form::Window`].
    pub ring_rows: Option<usize>,
}

impl Config {
    /// The sizes, with one receive slot, rows up to f32, local expert ids, an expert alignment of 1, the default blocks
    /// ([`DEFAULT_BLOCKS`]) and threads, a 20-second wait budget and overlapped launches (unless
    /// `MSCCLPP_RS_EP_PDL=0`).
    pub fn new(max_tokens: usize, hidden: usize, experts: usize, max_topk: usize) -> Self {
        Self {
            max_tokens,
            hidden,
            experts,
            max_topk,
            slots: 1,
            widest: DataType::F32,
            expert_ids: ExpertIds::Local,
            topk_idx: TopkIdx::I32,
            expert_alignment: 1,
            blocks: None,
            threads: None,
            budget: SpinBudget::from_millis(20_000),
            overlap: std::env::var("MSCCLPP_RS_EP_PDL").as_deref() != Ok("0"),
            ring_rows: None,
        }
    }

    /// This configuration in the pipelined mode with rings of `ring_rows` rows
    /// ([`Config::ring_rows`]), or unpipelined with `None`.
    pub fn pipelined(self, ring_rows: Option<usize>) -> Self {
        Self { ring_rows, ..self }
    }

    /// Checks the sizes for `ranks` ranks (no GPU needed).
    pub fn check(&self, ranks: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("ep: {m}")));
        if ranks == 0 || ranks > MAX_RANKS {
            return bad(format!("{ranks} ranks (1 to {MAX_RANKS} are supported)"));
        }
        if self.experts < ranks || !self.experts.is_multiple_of(ranks) || self.experts > MAX_EXPERTS {
            return bad(format!(
                "{} experts over {ranks} ranks (a positive multiple of the rank count, at most {MAX_EXPERTS})",
                self.experts
            ));
        }
        if self.hidden == 0 || !self.hidden.is_multiple_of(8) || self.hidden > (u32::MAX / 4) as usize {
            return bad(format!("hidden size {} (a positive multiple of 8)", self.hidden));
        }
        if self.max_topk == 0 || self.max_topk > MAX_TOPK {
            return bad(format!("max_topk {} (1 to {MAX_TOPK})", self.max_topk));
        }
        if self.max_tokens == 0 || self.max_tokens > MAX_TOKENS {
            return bad(format!("max_tokens {} (1 to {MAX_TOKENS})", self.max_tokens));
        }
        if self.expert_alignment == 0 || self.expert_alignment > MAX_EXPERT_ALIGNMENT {
            return bad(format!("expert_alignment {} (1 to {MAX_EXPERT_ALIGNMENT})", self.expert_alignment));
        }
        if self.blocks == Some(0) {
            return bad("0 blocks (1 or more)".into());
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return bad(format!("{} receive slots (1 to {MAX_SLOTS})", self.slots));
        }
        if let Some(r) = self.ring_rows {
            if r == 0 || r > MAX_RING_ROWS {
                return bad(format!("{r} ring rows (1 to {MAX_RING_ROWS}, Config::ring_rows)"));
            }
            if self.blocks == Some(1) {
                return bad(
                    "1 block in the pipelined mode (Config::ring_rows needs 2 or more: senders and receivers)".into()
                );
            }
        }
        if !matches!(self.widest, DataType::F32 | DataType::Bf16) {
            return bad(format!("widest element type {} (bf16 or f32)", self.widest.name()));
        }
        Ok(())
    }

    /// The kernel handle of `rank` among `ranks` ranks with `blocks` blocks, its sizes filled
    /// and its addresses 0 ([`ExpertParallel::new`] fills them; the emulation test too).
    pub fn kernel_handle(&self, rank: usize, ranks: usize, blocks: u32) -> EpHandle {
        EpHandle {
            peers: 0,
            shared: 0,
            state: 0,
            layout: 0,
            info: 0,
            rank: rank as u32,
            n_ranks: ranks as u32,
            experts: self.experts as u32,
            max_tokens: self.max_tokens as u32,
            hidden: self.hidden as u32,
            max_topk: self.max_topk as u32,
            blocks,
            global_ids: (self.expert_ids == ExpertIds::Global) as u32,
            expert_alignment: self.expert_alignment,
            idx_bytes: self.topk_idx.bytes() as u32,
            slot: 0,
            slots: self.slots as u32,
            elem_bytes: self.widest.bytes() as u32,
            ring_rows: self.ring_rows.unwrap_or(0) as u32,
            local: 0,
        }
    }

    /// Bytes of the shared buffer every rank allocates for `ranks` ranks and `blocks` blocks:
    /// about `slots * 2 * ranks * max_tokens * hidden * widest.bytes()` (receive rows and combine
    /// landing of every slot) plus the ids, weights and flags; in the pipelined mode
    /// ([`Config::ring_rows`]) about `blocks / 2 * ranks * ring_rows * 2 * hidden *
    /// widest.bytes()` plus the rings' metadata, whatever `max_tokens`. The sizes must pass
    /// [`Config::check`] for `ranks`.
    pub fn shared_bytes(&self, ranks: usize, blocks: u32) -> Result<u64> {
        self.check(ranks)?;
        Ok(self.kernel_handle(0, ranks, blocks).shared_regions().total)
    }

    /// Bytes of the local (not shared) buffer of received rows, ids, weights, sources and
    /// scales every rank allocates in the pipelined mode (`slots` of them, each sized for
    /// `ranks * max_tokens` rows); 0 unpipelined (they are in the shared buffer).
    pub fn local_bytes(&self, ranks: usize, blocks: u32) -> Result<u64> {
        self.check(ranks)?;
        let h = self.kernel_handle(0, ranks, blocks);
        Ok(if h.pipelined() { h.slot_count() as u64 * h.local_slot_bytes() } else { 0 })
    }
}

/// The element-type code of the kernels, or why the type is not supported.
fn dtype_code(dtype: DataType) -> Result<u32> {
    match dtype {
        DataType::Bf16 => Ok(shared::DTYPE_BF16),
        DataType::F32 => Ok(shared::DTYPE_F32),
        other => Err(Error::Unsupported(format!("ep: element type {} (bf16 and f32 are supported)", other.name()))),
    }
}

/// The checks of a dispatch that need no GPU: the element type, `tokens` and `k` within the
/// configuration, and buffer lengths (bytes of `x`, `topk_idx` (of [`Config::topk_idx`]),
/// `topk_weights`) that hold the batch. Returns the bytes of one row.
pub fn check_dispatch(
    config: &Config,
    dtype: DataType,
    tokens: usize,
    k: usize,
    (x_len, idx_len, w_len): (usize, usize, usize),
) -> Result<usize> {
    dtype_code(dtype)?;
    let bad = |m: String| Err(Error::InvalidArgument(format!("ep dispatch: {m}")));
    if tokens > config.max_tokens {
        return bad(format!("{tokens} tokens, more than max_tokens ({})", config.max_tokens));
    }
    if k == 0 || k > config.max_topk {
        return bad(format!("k = {k} (1 to max_topk = {})", config.max_topk));
    }
    // Checked: this function takes any configuration, not only one that passed `Config::check`.
    let row = row_bytes(config, dtype)?;
    let bytes = |a: usize, b: usize| {
        a.checked_mul(b).ok_or_else(|| Error::InvalidArgument(format!("ep dispatch: {tokens} tokens overflow")))
    };
    let ids = bytes(tokens, k.saturating_mul(config.topk_idx.bytes()))?;
    let weights = bytes(tokens, k.saturating_mul(4))?;
    let need = [("x", x_len, bytes(tokens, row)?), ("topk_idx", idx_len, ids), ("topk_weights", w_len, weights)];
    for (what, has, needs) in need {
        if has < needs {
            return bad(format!("the {what} buffer holds {has} bytes, {tokens} tokens need {needs}"));
        }
    }
    Ok(row)
}

/// The checks of a dispatch's received format that need no GPU: FP8 takes bf16 rows whose
/// `hidden` is a multiple of 128. Returns the bytes of one received row.
pub fn check_recv_format(config: &Config, dtype: DataType, format: RecvFormat) -> Result<usize> {
    if !format.is_fp8() {
        return row_bytes(config, dtype);
    }
    if dtype != DataType::Bf16 {
        return Err(Error::Unsupported(format!(
            "ep dispatch: an FP8 dispatch of {} rows (it casts bf16 rows)",
            dtype.name()
        )));
    }
    if !config.hidden.is_multiple_of(shared::FP8_GROUP as usize) {
        return Err(Error::InvalidArgument(format!(
            "ep dispatch: an FP8 dispatch needs a hidden size that is a multiple of 128 (one scale per 128 columns), not {}",
            config.hidden
        )));
    }
    Ok(config.hidden)
}

/// The checks of a combine that need no GPU: the element type and an output buffer (`out_len`
/// bytes) that holds `tokens` rows. Returns the bytes of one row.
pub fn check_combine(config: &Config, dtype: DataType, tokens: usize, out_len: usize) -> Result<usize> {
    dtype_code(dtype)?;
    let row = row_bytes(config, dtype)?;
    let need = tokens
        .checked_mul(row)
        .ok_or_else(|| Error::InvalidArgument(format!("ep combine: {tokens} tokens of {row} bytes overflow")))?;
    if out_len < need {
        return Err(Error::InvalidArgument(format!(
            "ep combine: the output buffer holds {out_len} bytes, {tokens} tokens need {need}"
        )));
    }
    Ok(row)
}

/// Bytes of one row of `config.hidden` elements of `dtype`, or an error when that overflows.
fn row_bytes(config: &Config, dtype: DataType) -> Result<usize> {
    if dtype.bytes() > config.widest.bytes() {
        return Err(Error::InvalidArgument(format!(
            "ep: {} rows on an object sized for {} rows (Config::widest)",
            dtype.name(),
            config.widest.name()
        )));
    }
    config
        .hidden
        .checked_mul(dtype.bytes())
        .ok_or_else(|| Error::InvalidArgument(format!("ep: hidden size {} overflows a row", config.hidden)))
}

/// Numbers every dispatch of every [`ExpertParallel`] of this process uniquely, so that a
/// [`Dispatched`] is recognised by the object that made it and by no other.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The receive slots of an [`ExpertParallel`]: a ring, each slot holding one dispatch, known by
/// its number (unique in the process, [`next_generation`]), which its [`Dispatched`] carries.
#[derive(Debug)]
struct SlotRing {
    /// Per slot: the number of the dispatch it holds (0: none) and whether it was combined.
    state: Vec<(u64, bool)>,
    /// The slot of the next dispatch.
    next: usize,
}

impl SlotRing {
    fn new(slots: usize) -> Self {
        Self { state: vec![(0, false); slots.max(1)], next: 0 }
    }

    /// Gives the next slot to dispatch `generation` (overwriting what it held); returns it.
    fn take(&mut self, generation: u64) -> u64 {
        self.state[self.next] = (generation, false);
        self.next = (self.next + 1) % self.state.len();
        generation
    }

    /// Whether dispatch `generation` is still held by `slot` (one of the `slots` most recent).
    fn check_live(&self, slot: usize, generation: u64, what: &str) -> Result<()> {
        if generation == 0 || self.state.get(slot).map(|s| s.0) != Some(generation) {
            return Err(Error::InvalidArgument(format!(
                "{what}: the handle's receive slot was overwritten by a later dispatch (a handle is valid for this \
                 object's {} most recent dispatches, Config::slots), or it is another object's",
                self.state.len()
            )));
        }
        Ok(())
    }

    /// Whether dispatch `generation` in `slot` may be combined: still held, not yet combined.
    fn check_combinable(&self, slot: usize, generation: u64) -> Result<()> {
        self.check_live(slot, generation, "ep combine")?;
        if self.state[slot].1 {
            return Err(Error::InvalidArgument("ep combine: that dispatch was already combined".into()));
        }
        Ok(())
    }
}

/// One rank's batch for [`ExpertParallel::dispatch`] (buffers on this rank's GPU).
#[derive(Clone, Copy, Debug)]
pub struct DispatchInput<'a> {
    /// `tokens` rows of `hidden` elements of `dtype`.
    pub x: &'a DeviceBuffer,
    /// bf16 or f32.
    pub dtype: DataType,
    /// `tokens x k` expert ids, i32 (or i64: [`Config::topk_idx`]); `-1` (or any id outside
    /// `0..experts`) for none.
    pub topk_idx: &'a DeviceBuffer,
    /// `tokens x k` f32 weights, carried to the receivers.
    pub topk_weights: &'a DeviceBuffer,
    /// Tokens of this rank (0 to `max_tokens`; may differ between ranks).
    pub tokens: usize,
    /// Experts per token (1 to `max_topk`; the same on every rank).
    pub k: usize,
}

/// The top-k weights a combine sums besides the rows ([`ExpertParallel::combine_with_weights`]),
/// as DeepEP's `combine(topk_weights=...)` returns `combined_topk_weights`.
#[derive(Clone, Copy, Debug)]
pub struct CombineWeights<'a> {
    /// `rows x k` f32, one per received row and slot (in the received order), or `None` for the
    /// weights the dispatch delivered ([`Dispatched::recv_topk_weights_addr`]). A buffer shorter
    /// than the received rows makes the kernel trap with a message.
    pub input: Option<&'a DeviceBuffer>,
    /// `tokens x k` f32: for every token of this rank and slot, the sum in rank order (f32, from
    /// 0) of the weights of the ranks the token went to; 0 for a token that went nowhere. With
    /// local ids and the delivered weights, every slot gets its weight back (0 for no expert).
    pub out: &'a DeviceBuffer,
}

/// What a combine adds to [`ExpertParallel::combine`] ([`ExpertParallel::combine_with`]); the
/// default adds nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct CombineOptions<'a> {
    /// The top-k weights summed besides the rows (as [`ExpertParallel::combine_with_weights`]).
    pub weights: Option<CombineWeights<'a>>,
    /// Up to two `tokens x hidden` tensors of the combine's element type added to every token's
    /// sum, as DeepEP's `combine(bias=(b0, b1))`: the f32 sum starts at `0 + bias0[t] +
    /// bias1[t]` (DeepEP's order), then adds the ranks' rows in rank order and is rounded once.
    /// Local: ranks may differ.
    pub bias: [Option<&'a DeviceBuffer>; 2],
}

/// What a dispatch delivered to this rank, on the GPU; the handle a combine reuses. The
/// addresses stay valid (and their contents current) for the [`Config::slots`] most recent
/// dispatches on the same [`ExpertParallel`] (its receive slot is then reused); the number of rows is on the GPU ([`Dispatched::info_addr`]) or, after a
/// synchronisation, from [`ExpertParallel::recv_counts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatched {
    generation: u64,
    slot: usize,
    tokens: usize,
    k: usize,
    dtype: DataType,
    format: RecvFormat,
    row_bytes: usize,
    recv_x: u64,
    recv_x_scales: Option<u64>,
    scale_row_bytes: usize,
    recv_topk_idx: u64,
    recv_topk_weights: u64,
    recv_src: u64,
    info: u64,
    max_rows: usize,
}

impl Dispatched {
    /// Tokens this rank dispatched.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Top-k of the call.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Element type of the rows given to the dispatch.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }
    /// Format of the received rows.
    pub fn format(&self) -> RecvFormat {
        self.format
    }
    /// Bytes of one received row (`hidden` for FP8).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
    /// Most rows a rank can receive (`ranks * max_tokens`).
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }
    /// The receive slot it occupies (0 to [`Config::slots`] - 1).
    pub fn slot(&self) -> usize {
        self.slot
    }
    /// Device address of the received rows (`rows x row_bytes`, grouped by source rank): of
    /// the input's element type, or e4m3 bytes for an FP8 dispatch.
    pub fn recv_x_addr(&self) -> u64 {
        self.recv_x
    }
    /// Device address of the received rows' FP8 scales, for an FP8 dispatch; `None` otherwise:
    /// `rows x hidden / 128` f32, row-major (DeepEP's `x_scales`), or with
    /// [`RecvFormat::E4m3Ue8m0`] `rows x ceil(hidden / 512)` u32 of four UE8M0 bytes each
    /// ([`Dispatched::scale_row_bytes`] per row).
    pub fn recv_x_scales_addr(&self) -> Option<u64> {
        self.recv_x_scales
    }
    /// Bytes of one received row's scales (0 unless FP8).
    pub fn scale_row_bytes(&self) -> usize {
        self.scale_row_bytes
    }
    /// Device address of the received rows' expert ids (`rows x k` i32): local ids, -1 for
    /// experts of other ranks, unless the configuration asks for [`ExpertIds::Global`].
    pub fn recv_topk_idx_addr(&self) -> u64 {
        self.recv_topk_idx
    }
    /// Device address of the received rows' weights (`rows x k` f32; 0 in the slots whose local
    /// id is -1, unless [`ExpertIds::Global`]).
    pub fn recv_topk_weights_addr(&self) -> u64 {
        self.recv_topk_weights
    }
    /// Device address of the received rows' token index on their source rank (`rows` i32).
    pub fn recv_src_addr(&self) -> u64 {
        self.recv_src
    }
    /// Device address of the receive info (u32): `[0]` rows received, `[1 ..= n + 1]` the
    /// offset of each source rank's rows (and the total), then the `n x n` count matrix
    /// (`[source][destination]`), then the rows received per local expert (rounded up to a
    /// multiple of [`Config::expert_alignment`]).
    pub fn info_addr(&self) -> u64 {
        self.info
    }
}

/// What one rank received, read to the host ([`ExpertParallel::recv_counts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvCounts {
    /// Rows received.
    pub rows: usize,
    /// `n + 1` offsets: the rows of source rank `s` are `offsets[s]..offsets[s + 1]`.
    pub offsets: Vec<usize>,
    /// Tokens every rank sent to every rank, `[source * n + destination]`.
    pub matrix: Vec<u32>,
    /// Received (token, slot) pairs per expert of this rank, rounded up to a multiple of
    /// [`Config::expert_alignment`] (DeepEP's `num_recv_tokens_per_expert_list`).
    pub per_expert: Vec<u32>,
}

/// The received rows, read to the host ([`ExpertParallel::read_received`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedRows {
    /// `rows x row_bytes` bytes.
    pub x: Vec<u8>,
    /// `rows x hidden / 128` FP8 scales (empty unless the dispatch was FP8; UE8M0 bytes read as
    /// the powers of two they stand for).
    pub x_scales: Vec<f32>,
    /// `rows x k` expert ids (local or global, as configured).
    pub topk_idx: Vec<i32>,
    /// `rows x k` weights (0 where a local id is -1).
    pub topk_weights: Vec<f32>,
    /// `rows` source token indices.
    pub src: Vec<i32>,
}

/// Expert-parallel dispatch and combine of one rank: the shared buffers, the device state and
/// the kernels. Built collectively by every rank ([`ExpertParallel::new`]).
pub struct ExpertParallel {
    gpu: Arc<Gpu>,
    config: Config,
    handle: EpHandle,
    /// Threads per block of dispatch, of combine and of the FP8 dispatch.
    threads: (u32, u32, u32),
    layout_threads: u32,
    f_layout: CudaFunction,
    f_dispatch: CudaFunction,
    f_dispatch_fp8: CudaFunction,
    f_combine_bf16: CudaFunction,
    f_combine_f32: CudaFunction,
    /// Which dispatch every receive slot holds.
    ring: SlotRing,
    /// Where the last layout is (a slot, or `slots` for [`ExpertParallel::layout`]) and its
    /// tokens (for [`ExpertParallel::read_layout`]).
    layout_at: usize,
    layout_tokens: usize,
    /// The window form's kernels and rounds, and the form of the next calls.
    wf: window::WindowForm,
    // Drop order: the mappings of the peers' buffers close before this rank's memory is freed.
    /// Every rank's shared buffer as a symmetric window: its table of addresses is the handle's
    /// `peers` (both forms), the window the window form's.
    window: mscclpp_host::window::Window,
    shared: DeviceBuffer,
    _state: DeviceBuffer,
    layout: DeviceBuffer,
    info: DeviceBuffer,
    /// The pipelined mode's received rows, ids, weights, sources and scales (all slots).
    local: Option<DeviceBuffer>,
}

impl std::fmt::Debug for ExpertParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertParallel")
            .field("config", &self.config)
            .field("handle", &self.handle)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl ExpertParallel {
    /// Builds the buffers and loads the kernels. Every rank calls it at the same point with the
    /// same sizes; all ranks must be on this machine.
    pub fn new(comm: &Communicator, config: Config) -> Result<Self> {
        let gpu = comm.gpu().clone();
        let boot = comm.bootstrap();
        let (n, me) = (comm.world_size(), comm.rank());
        if boot.info().local_size != n {
            return Err(Error::Unsupported(format!(
                "ep: all {n} ranks must be on one machine ({} are on this one)",
                boot.info().local_size
            )));
        }
        // This rank's share of the SMs: all of them, unless ranks that are threads of this
        // process share the GPU (their kernels run at once, and every block waits for theirs).
        let (sms, sharing) = (comm.sm_share()?, comm.ranks_sharing_gpu()?);
        let config = Config { overlap: config.overlap && comm.may_overlap_launches()?, ..config };
        let own_blocks = config.blocks.unwrap_or(DEFAULT_BLOCKS.min(sms));
        // This rank's own checks; their verdict travels with its sizes (all zero: refused), so
        // that sizes one rank refuses are refused on all and none waits for the others.
        let local = config.check(n).and_then(|()| {
            if own_blocks == 0 || own_blocks > sms {
                let whose = if sharing > 1 {
                    format!(
                        "this rank's {sms} of the GPU's {} SMs ({sharing} ranks of this process share it)",
                        gpu.info().sm_count
                    )
                } else {
                    format!("the GPU's {sms} SMs")
                };
                return Err(Error::InvalidArgument(format!(
                    "ep: {own_blocks} blocks (1 to {whose}: the blocks wait for each other, so all must be resident)"
                )));
            }
            Ok(())
        });
        let f_layout = gpu.function(PTX, "ep_layout")?;
        // The pipelined mode's kernels take the same arguments.
        let pipe = if config.ring_rows.is_some() { "_pipe" } else { "" };
        let f_dispatch = gpu.function(PTX, &format!("ep_dispatch{pipe}"))?;
        let f_dispatch_fp8 = gpu.function(PTX, &format!("ep_dispatch{pipe}_fp8"))?;
        let f_combine_bf16 = gpu.function(PTX, &format!("ep_combine{pipe}_bf16"))?;
        let f_combine_f32 = gpu.function(PTX, &format!("ep_combine{pipe}_f32"))?;
        let pick = |limit: u32| config.threads.unwrap_or(1024).min(limit).max(32) / 32 * 32;
        let threads = (
            pick(mscclpp_host::launch::max_threads_per_block(&f_dispatch)?),
            pick(
                mscclpp_host::launch::max_threads_per_block(&f_combine_bf16)?
                    .min(mscclpp_host::launch::max_threads_per_block(&f_combine_f32)?),
            ),
            pick(mscclpp_host::launch::max_threads_per_block(&f_dispatch_fp8)?),
        );
        let layout_threads =
            LAYOUT_THREADS.min(mscclpp_host::launch::max_threads_per_block(&f_layout)?).max(32) / 32 * 32;
        let wf = window::WindowForm::load(&gpu, pick)?.capped(threads);
        // Every rank must agree on the sizes: take the smallest block count, check the rest.
        let mine = match local {
            Ok(()) => [
                config.max_tokens as u64,
                config.hidden as u64,
                config.experts as u64,
                config.max_topk as u64,
                (config.expert_ids == ExpertIds::Global) as u64,
                config.slots as u64,
                config.widest.bytes() as u64,
                config.ring_rows.unwrap_or(0) as u64,
                own_blocks as u64,
            ],
            Err(_) => [0; 9],
        };
        let all = boot.all_gather_pod(&mine)?;
        local?;
        if let Some(r) = all.iter().position(|v| v[8] == 0) {
            return Err(Error::InvalidArgument(format!(
                "ep: rank {r} refused its configuration (its own error says why)"
            )));
        }
        if let Some(r) = all.iter().position(|v| v[..8] != mine[..8]) {
            return Err(Error::InvalidArgument(format!(
                "ep: rank {r} uses max_tokens, hidden, experts, max_topk, global ids, slots, widest element bytes, ring rows {:?}, this rank {:?}",
                &all[r][..8],
                &mine[..8]
            )));
        }
        let blocks = all.iter().map(|v| v[8]).min().unwrap_or(1) as u32;
        if config.ring_rows.is_some() && blocks < 2 {
            return Err(Error::InvalidArgument(format!(
                "ep: {blocks} block in the pipelined mode (Config::ring_rows needs 2 or more: senders and receivers; \
                 some rank has only 1 SM to give)"
            )));
        }
        let mut handle = config.kernel_handle(me, n, blocks);
        let total = handle.shared_regions().total;
        let shared = DeviceBuffer::exportable_filled(&gpu, total as usize, 0)?;
        // Every rank maps every other's buffer, as a window (the sizes agree: checked above, and
        // by the registration, which names a rank that differs).
        let window = comm.register_window(&shared)?;
        // Every block's epochs start at 1 (0 is "never signalled" in the flags).
        let state = DeviceBuffer::from_slice(&gpu, &vec![1u64; 2 * blocks as usize])?;
        // A layout per slot and one for `layout` alone; the info words per slot.
        let slots = config.slots as u64;
        let layout = DeviceBuffer::filled(&gpu, ((slots + 1) * handle.layout_slot_bytes()) as usize, 0)?;
        let info = DeviceBuffer::filled(&gpu, (slots * handle.info_slot_bytes()) as usize, 0)?;
        // The pipelined mode's received rows, ids, weights, sources and scales: local.
        let local = match handle.pipelined() {
            true => Some(DeviceBuffer::filled(&gpu, (slots * handle.local_slot_bytes()) as usize, 0)?),
            false => None,
        };
        handle.local = local.as_ref().map_or(0, |l| l.addr());
        handle.peers = window.handle().bases.addr();
        handle.shared = shared.addr();
        handle.state = state.addr();
        handle.layout = layout.addr();
        handle.info = info.addr();
        // Nobody writes into a peer before every rank has its buffer mapped and zeroed.
        boot.barrier()?;
        Ok(Self {
            gpu,
            config,
            handle,
            threads,
            layout_threads,
            f_layout,
            f_dispatch,
            f_dispatch_fp8,
            f_combine_bf16,
            f_combine_f32,
            ring: SlotRing::new(config.slots),
            layout_at: config.slots,
            layout_tokens: 0,
            wf,
            window,
            shared,
            _state: state,
            layout,
            info,
            local,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// This rank's GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
    /// Blocks of dispatch and combine, threads per block of dispatch, of combine.
    pub fn grid(&self) -> (u32, u32, u32) {
        (self.handle.blocks, self.threads.0, self.threads.1)
    }
    /// Threads per block of an FP8 dispatch ([`ExpertParallel::dispatch_as`]; its kernel has
    /// registers of its own, so it may run fewer than [`ExpertParallel::grid`]'s).
    pub fn fp8_threads(&self) -> u32 {
        self.threads.2
    }
    /// This rank and the number of ranks.
    pub fn rank(&self) -> (usize, usize) {
        (self.handle.rank as usize, self.handle.n_ranks as usize)
    }
    /// Bytes of this rank's shared buffer (the one every other rank maps;
    /// [`Config::shared_bytes`] with the agreed block count), and of its local buffers: layout
    /// and info, and in the pipelined mode the received rows, ids, weights, sources and scales
    /// ([`Config::local_bytes`]).
    pub fn memory_bytes(&self) -> (usize, usize) {
        let local = self.local.as_ref().map_or(0, |l| l.len());
        (self.shared.len(), self.layout.len() + self.info.len() + local)
    }

    /// The window form is refused in the pipelined mode, and on a stream being captured into a
    /// CUDA graph (its kernels take the window round, counted on the host, as an argument: a
    /// replay would repeat a spent round): an error naming the combination, before anything is
    /// enqueued.
    fn check_form(&self, stream: &CudaStream) -> Result<()> {
        if self.form() != Form::Window {
            return Ok(());
        }
        if self.handle.pipelined() {
            return Err(Error::Unsupported(
                "ep: the window form (Form::Window) in the pipelined mode (Config::ring_rows): use Form::PeerTable"
                    .into(),
            ));
        }
        let status = stream.capture_status().map_err(|e| Error::Driver {
            context: format!("asking whether a stream of GPU {} is being captured", self.gpu.ordinal()),
            source: e,
        })?;
        if status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(Error::Unsupported(
                "ep: the window form (Form::Window) in a CUDA graph capture (its kernels take a window round counted \
                 on the host, which a replay would repeat): use Form::PeerTable"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Where the received rows, ids, weights, sources and scales of every slot are: the local
    /// buffer in the pipelined mode, else the shared buffer.
    fn recv_buffer(&self) -> &DeviceBuffer {
        self.local.as_ref().unwrap_or(&self.shared)
    }

    /// The kernel handle of receive slot `slot` (or of the lone layout, `slot == slots`).
    fn slot_handle(&self, slot: usize) -> EpHandle {
        self.handle.for_slot(slot as u32, self.layout.addr(), self.info.addr())
    }

    /// Makes `stream` wait for `event` (work recorded on another stream of this GPU, e.g. the
    /// attention's) before what is enqueued on it next: DeepEP's `previous_event`. With
    /// [`ExpertParallel::record_event`], dispatch and combine run on a stream of their own with
    /// [`Config::blocks`] SMs while other work uses the rest.
    pub fn wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.check_stream(stream)?;
        stream.wait(event).map_err(|e| Error::Driver {
            context: format!("making a stream of GPU {} wait for an event", self.gpu.ordinal()),
            source: e,
        })
    }

    /// An event recorded on `stream` after the work enqueued on it so far (a dispatch or a
    /// combine): another stream waits on it (`CudaStream::wait`) before it uses the results, as
    /// DeepEP's returned `EventOverlap`.
    pub fn record_event(&self, stream: &CudaStream) -> Result<CudaEvent> {
        self.check_stream(stream)?;
        stream.record_event(None).map_err(|e| Error::Driver {
            context: format!("recording an event on a stream of GPU {}", self.gpu.ordinal()),
            source: e,
        })
    }

    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if stream.context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(Error::InvalidArgument(format!(
                "ep: the stream belongs to another GPU than this rank's GPU {}",
                self.gpu.ordinal()
            )));
        }
        Ok(())
    }

    fn check_gpu(&self, bufs: &[&DeviceBuffer]) -> Result<()> {
        match bufs.iter().find(|b| b.gpu().ordinal() != self.gpu.ordinal()) {
            Some(b) => Err(Error::InvalidArgument(format!(
                "ep: a buffer is on GPU {}, this rank uses GPU {}",
                b.gpu().ordinal(),
                self.gpu.ordinal()
            ))),
            None => Ok(()),
        }
    }

    /// Waits for `stream` (and this GPU's default stream), reporting an abort's cause.
    fn synchronize(&self, stream: &CudaStream) -> Result<()> {
        self.gpu.bind()?;
        stream.synchronize().map_err(|e| Error::Driver {
            context: format!("synchronizing a stream of GPU {}", self.gpu.ordinal()),
            source: e,
        })?;
        self.gpu.synchronize()
    }

    /// Launches `f` on `stream`, overlapped with the kernel before it when configured.
    ///
    /// # Safety
    /// As for [`mscclpp_host::launch::launch_on`]; the kernel waits for its predecessor before
    /// its first memory access (all of this crate's kernels do).
    unsafe fn launch(&self, stream: &CudaStream, f: &CudaFunction, cfg: LaunchConfig, args: &mut Args) -> Result<()> {
        // SAFETY: forwarded.
        unsafe {
            if self.config.overlap {
                mscclpp_host::launch::launch_overlapped_on(&self.gpu, stream, f, cfg, args)
            } else {
                mscclpp_host::launch::launch_on(&self.gpu, stream, f, cfg, args)
            }
        }
    }

    fn enqueue_layout(
        &mut self,
        slot: usize,
        (topk_idx, tokens, k): (&DeviceBuffer, usize, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let h = &self.slot_handle(slot);
        let lr = h.layout_regions();
        let (n, p) = (h.n_ranks, self.layout_threads);
        let mut args = Args::new()
            .arg(GlobalPtr::<u8>::from_addr(topk_idx.addr()))
            .arg(h.idx_bytes)
            .arg(tokens as u32)
            .arg(k as u32)
            .arg(h.experts)
            .arg(n)
            .arg(GlobalPtr::<u32>::from_addr(h.layout + lr.per_rank))
            .arg(GlobalPtr::<u32>::from_addr(h.layout + lr.per_expert))
            .arg(GlobalPtr::<u8>::from_addr(h.layout + lr.in_rank))
            .arg(GlobalPtr::<i32>::from_addr(h.layout + lr.send_index));
        let cfg = LaunchConfig::new(1, p).shared((n * p + h.experts) * 4);
        // SAFETY: the kernel takes (ptr, u32, u32, u32, u32, u32, ptr, ptr, ptr, ptr) as passed;
        // `topk_idx` holds tokens * k ids of `idx_bytes` bytes (checked by the caller); the layout
        // buffer holds the regions for max_tokens >= tokens; shared memory for the per-thread and
        // expert counts.
        unsafe { self.launch(stream, &self.f_layout, cfg, &mut args)? };
        (self.layout_at, self.layout_tokens) = (slot, tokens);
        Ok(())
    }

    /// Computes this rank's dispatch layout on the GPU (what [`ExpertParallel::dispatch`] does
    /// first) without dispatching: a local operation, for inspection with
    /// [`ExpertParallel::read_layout`]. It has a buffer of its own: the dispatches in flight
    /// stay combinable.
    pub fn layout(&mut self, topk_idx: &DeviceBuffer, tokens: usize, k: usize, stream: &CudaStream) -> Result<()> {
        self.check_stream(stream)?;
        self.check_gpu(&[topk_idx])?;
        if tokens > self.config.max_tokens || k == 0 || k > self.config.max_topk {
            return Err(Error::InvalidArgument(format!(
                "ep layout: {tokens} tokens, k = {k} (at most {} tokens, k from 1 to {})",
                self.config.max_tokens, self.config.max_topk
            )));
        }
        let need = tokens * k * self.config.topk_idx.bytes();
        if topk_idx.len() < need {
            return Err(Error::InvalidArgument(format!(
                "ep layout: the topk_idx buffer holds {} bytes, {tokens} x {k} ids need {need}",
                topk_idx.len(),
            )));
        }
        self.enqueue_layout(self.config.slots, (topk_idx, tokens, k), stream)
    }

    /// The layout of the last [`ExpertParallel::layout`] or dispatch, read to the host (waits
    /// for `stream`).
    pub fn read_layout(&self, stream: &CudaStream) -> Result<reference::Layout> {
        self.synchronize(stream)?;
        let (h, t) = (&self.handle, self.layout_tokens);
        let (n, mut lr) = (h.n_ranks as usize, h.layout_regions());
        let at = self.layout_at as u64 * h.layout_slot_bytes();
        for r in [&mut lr.per_rank, &mut lr.per_expert, &mut lr.in_rank, &mut lr.send_index] {
            *r += at;
        }
        let mut tokens_per_rank = vec![0u32; n];
        let mut tokens_per_expert = vec![0u32; h.experts as usize];
        let mut in_rank = vec![0u8; t * n];
        let mut send_index = vec![0i32; t * n];
        self.layout.read(lr.per_rank as usize, &mut tokens_per_rank)?;
        self.layout.read(lr.per_expert as usize, &mut tokens_per_expert)?;
        self.layout.read(lr.in_rank as usize, &mut in_rank)?;
        self.layout.read(lr.send_index as usize, &mut send_index)?;
        Ok(reference::Layout {
            tokens_per_rank,
            tokens_per_expert,
            // Exactly 1 is "in rank": another non-zero byte would be a kernel bug, caught as a
            // mismatch with the reference.
            is_token_in_rank: in_rank.iter().map(|&b| b == 1).collect(),
            send_index,
        })
    }

    /// Dispatches this rank's batch (see the crate documentation): enqueues the layout kernel
    /// and the dispatch kernel on `stream` and returns without waiting. Every rank calls it.
    /// The rows arrive as given; [`ExpertParallel::dispatch_as`] casts them to FP8.
    pub fn dispatch(&mut self, input: &DispatchInput, stream: &CudaStream) -> Result<Dispatched> {
        self.dispatch_as(input, RecvFormat::Input, stream)
    }

    /// [`ExpertParallel::dispatch`], the rows arriving in `format`: as given, or (bf16 rows)
    /// cast to FP8 E4M3 in the dispatch kernel with one f32 scale per 128 columns
    /// ([`RecvFormat::E4m3`], DeepEP's FP8 dispatch: half the bytes of bf16 over NVLink; the
    /// scales at [`Dispatched::recv_x_scales_addr`]). Every rank passes the same format (a
    /// dispatch whose format differs between ranks traps with a message). The combine that
    /// follows takes bf16 (or f32) rows, as DeepEP's.
    pub fn dispatch_as(
        &mut self,
        input: &DispatchInput,
        format: RecvFormat,
        stream: &CudaStream,
    ) -> Result<Dispatched> {
        self.check_stream(stream)?;
        self.check_form(stream)?;
        self.check_gpu(&[input.x, input.topk_idx, input.topk_weights])?;
        let lens = (input.x.len(), input.topk_idx.len(), input.topk_weights.len());
        check_dispatch(&self.config, input.dtype, input.tokens, input.k, lens)?;
        check_recv_format(&self.config, input.dtype, format)?;
        let slot = self.ring.next;
        self.enqueue_layout(slot, (input.topk_idx, input.tokens, input.k), stream)?;
        let ids = (input.topk_idx.addr(), input.topk_weights.addr());
        self.enqueue_dispatch((input.x, input.dtype, input.tokens, input.k), ids, format, stream)
    }

    /// A cached dispatch (DeepEP's `dispatch(x, handle=...)`, as in a training backward pass):
    /// new rows `x` (`handle.tokens()` rows of `dtype`) along the routing of the earlier dispatch
    /// `handle`, which must still be valid (one of the [`Config::slots`] most recent): no layout
    /// kernel, and the received ids, weights and source indices are `handle`'s (copied on the
    /// GPU when the new dispatch takes another slot). The result is a new dispatch (the next
    /// slot, combinable once), with the same bits as a fresh dispatch of the same routing. Every
    /// rank calls it (with the same `dtype`; a rank that dispatches fresh instead traps).
    pub fn dispatch_cached(
        &mut self,
        handle: &Dispatched,
        x: &DeviceBuffer,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<Dispatched> {
        self.ring.check_live(handle.slot, handle.generation, "ep dispatch_cached")?;
        self.check_stream(stream)?;
        self.check_form(stream)?;
        self.check_gpu(&[x])?;
        let (tokens, k) = (handle.tokens, handle.k);
        let lens = (x.len(), tokens * k * self.config.topk_idx.bytes(), tokens * k * 4);
        check_dispatch(&self.config, dtype, tokens, k, lens)?;
        let slot = self.ring.next;
        if slot != handle.slot {
            // The routing (layout) and the received ids, weights and sources into the new slot:
            // local copies, ordered on the stream before the dispatch kernel, which tells the
            // other ranks (through its counts) that this rank's slot may be written.
            let (from, to) = (self.slot_handle(handle.slot), self.slot_handle(slot));
            let (rf, rt) = (from.shared_regions(), to.shared_regions());
            let meta = rf.recv_scales - rf.recv_idx;
            let base = self.recv_buffer().addr();
            for (dst, src, bytes) in
                [(to.layout, from.layout, from.layout_slot_bytes()), (base + rt.recv_idx, base + rf.recv_idx, meta)]
            {
                self.gpu.bind()?;
                // SAFETY: two disjoint ranges of this rank's own buffers (the layout of two slots;
                // the ids to the sources of two slots of the shared buffer), in bounds by the
                // handle's layout; the copy is ordered on `stream` like the kernels.
                unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes as usize, stream.cu_stream()) }
                    .map_err(|e| Error::Driver {
                        context: format!("copying a cached dispatch's routing on GPU {}", self.gpu.ordinal()),
                        source: e,
                    })?;
            }
        }
        (self.layout_at, self.layout_tokens) = (slot, tokens);
        self.enqueue_dispatch((x, dtype, tokens, k), (0, 0), RecvFormat::Input, stream)
    }

    /// Enqueues the dispatch kernel into the next slot (whose layout is in place) and takes the
    /// slot. `ids` (ids and weights) are 0 for a cached dispatch.
    fn enqueue_dispatch(
        &mut self,
        (x, dtype, tokens, k): (&DeviceBuffer, DataType, usize, usize),
        ids: (u64, u64),
        format: RecvFormat,
        stream: &CudaStream,
    ) -> Result<Dispatched> {
        let in_row_bytes = row_bytes(&self.config, dtype)?;
        let row_bytes = check_recv_format(&self.config, dtype, format)?;
        let code = dtype_code(dtype)?;
        let slot = self.ring.next;
        let cached = if ids.0 == 0 { shared::SIGNATURE_CACHED } else { 0 };
        let h = self.slot_handle(slot);
        let kernel = if format.is_fp8() { window::Kernel::DispatchFp8 } else { window::Kernel::Dispatch };
        let (f, threads, args, form_bit) = self.kernel(kernel, h);
        let mut args = args
            .arg(GlobalPtr::<u8>::from_addr(x.addr()))
            .arg(GlobalPtr::<u8>::from_addr(ids.0))
            .arg(GlobalPtr::<u32>::from_addr(ids.1))
            .arg(tokens as u32)
            .arg(k as u32)
            .arg(in_row_bytes as u32)
            .arg(shared::signature(k as u32, code, format.code()) | cached | form_bit)
            .arg(format.code())
            .arg(self.config.budget);
        let cfg = LaunchConfig::new(h.blocks, threads).shared(EXCHANGE_SHARED_BYTES);
        // SAFETY: the kernel takes (EpHandle, [Window, u64,] ptr, ptr, ptr, u32, u32, u32, u32,
        // u32, SpinBudget) as passed (`Self::kernel`; the window is over every rank's shared
        // buffer, its round counted there); the inputs hold the batch (checked by the callers;
        // for FP8, bf16 rows of a multiple of 128 elements), or the ids are null and the slot's layout and
        // received ids are a dispatch's of this routing (`dispatch_cached`); the handle's buffers
        // live as long as `self`; the grid is `h.blocks` blocks (at most one per SM, so all
        // resident) of at least 32 threads; every rank enqueues the same sequence of operations
        // (the caller's contract), and a rank whose arguments differ traps with a message rather
        // than writing outside the buffers (counts are checked against max_tokens on the GPU,
        // and the format and cached-ness are in the signature).
        unsafe { self.launch(stream, &f, cfg, &mut args)? };
        let generation = self.ring.take(next_generation());
        let r = h.shared_regions();
        let at = self.recv_buffer().addr();
        Ok(Dispatched {
            generation,
            slot,
            tokens,
            k,
            dtype,
            format,
            row_bytes,
            recv_x: at + r.recv_x,
            recv_x_scales: format.is_fp8().then_some(at + r.recv_scales),
            scale_row_bytes: if format.is_fp8() {
                shared::scale_row_bytes(format.code(), h.scales_per_row()) as usize
            } else {
                0
            },
            recv_topk_idx: at + r.recv_idx,
            recv_topk_weights: at + r.recv_w,
            recv_src: at + r.recv_src,
            info: h.info,
            max_rows: h.max_recv_rows() as usize,
        })
    }

    /// Combines (see the crate documentation): `y` holds one row of `hidden` elements of `dtype`
    /// per row `d` received (in the received order); `out` gets `d.tokens()` rows. Enqueued on
    /// `stream`; returns without waiting. Every rank calls it, with the same `dtype`. `d` must be
    /// one of this object's [`Config::slots`] most recent dispatches, not yet combined (any
    /// order among them; every rank combines in the same order). A `y` shorter than the received
    /// rows makes the kernel trap with a message (the error surfaces at the next
    /// synchronisation).
    pub fn combine(
        &mut self,
        d: &Dispatched,
        y: &DeviceBuffer,
        out: &DeviceBuffer,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<()> {
        self.combine_with(d, (y, out), dtype, &CombineOptions::default(), stream)
    }

    /// [`ExpertParallel::combine`], and the top-k weights summed the same way into
    /// `weights.out` ([`CombineWeights`]). Every rank calls the same one of the two.
    pub fn combine_with_weights(
        &mut self,
        d: &Dispatched,
        (y, out): (&DeviceBuffer, &DeviceBuffer),
        dtype: DataType,
        weights: CombineWeights,
        stream: &CudaStream,
    ) -> Result<()> {
        self.combine_with(d, (y, out), dtype, &CombineOptions { weights: Some(weights), ..Default::default() }, stream)
    }

    /// [`ExpertParallel::combine`] with options: the top-k weights summed besides (every rank
    /// asks for them or none does) and bias rows added to the sums ([`CombineOptions`]).
    pub fn combine_with(
        &mut self,
        d: &Dispatched,
        (y, out): (&DeviceBuffer, &DeviceBuffer),
        dtype: DataType,
        options: &CombineOptions,
        stream: &CudaStream,
    ) -> Result<()> {
        self.ring.check_combinable(d.slot, d.generation)?;
        self.check_stream(stream)?;
        self.check_form(stream)?;
        self.check_gpu(&[y, out])?;
        let row_bytes = check_combine(&self.config, dtype, d.tokens, out.len())?;
        let wt = match options.weights {
            None => WeightsArgs::default(),
            Some(w) => {
                self.check_gpu(&[w.out])?;
                let need = d.tokens * d.k * 4;
                if w.out.len() < need {
                    return Err(Error::InvalidArgument(format!(
                        "ep combine: the weights output holds {} bytes, {} tokens x {} weights need {need}",
                        w.out.len(),
                        d.tokens,
                        d.k
                    )));
                }
                let (input, input_bytes) = match w.input {
                    Some(b) => {
                        self.check_gpu(&[b])?;
                        (b.addr(), b.len() as u64)
                    }
                    None => (d.recv_topk_weights, (d.max_rows * d.k * 4) as u64),
                };
                WeightsArgs { input, input_bytes, out: w.out.addr(), k: d.k as u32, reserved: 0 }
            }
        };
        let mut bias = BiasArgs::default();
        for (i, b) in options.bias.iter().enumerate() {
            if let Some(b) = b {
                self.check_gpu(&[b])?;
                let need = d.tokens * row_bytes;
                if b.len() < need {
                    return Err(Error::InvalidArgument(format!(
                        "ep combine: bias {i} holds {} bytes, {} tokens need {need}",
                        b.len(),
                        d.tokens
                    )));
                }
                bias.bias[i] = b.addr();
            }
        }
        let kernel = match dtype {
            DataType::F32 => window::Kernel::CombineF32,
            _ => window::Kernel::CombineBf16,
        };
        let h = self.slot_handle(d.slot);
        let (f, threads, args, _) = self.kernel(kernel, h);
        let mut args = args
            .arg(GlobalPtr::<u8>::from_addr(y.addr()))
            .arg(y.len() as u64)
            .arg(GlobalPtr::<u8>::from_addr(out.addr()))
            .arg(d.tokens as u32)
            .arg(row_bytes as u32)
            .arg(wt)
            .arg(bias)
            .arg(self.config.budget);
        let cfg = LaunchConfig::new(h.blocks, threads).shared(EXCHANGE_SHARED_BYTES);
        // SAFETY: the kernel takes (EpHandle, [Window, u64,] ptr, u64, ptr, u32, u32, WeightsArgs,
        // BiasArgs, SpinBudget) as passed (`Self::kernel`); `out` holds the tokens' rows, each
        // bias (when not 0) too, and `wt.out` (when not 0) their weights (checked); the kernel reads at most `y.len()` bytes
        // of `y` and `wt.input_bytes` of `wt.input` (it checks the received rows against them);
        // the layout and info it reads are those of `d`'s slot, which no dispatch has taken since
        // (`slot_state`); grid as for dispatch.
        unsafe { self.launch(stream, &f, cfg, &mut args)? };
        self.ring.state[d.slot].1 = true;
        Ok(())
    }

    /// What this rank received in dispatch `d` (one of the [`Config::slots`] most recent), read
    /// to the host: waits for `stream`.
    pub fn recv_counts(&self, d: &Dispatched, stream: &CudaStream) -> Result<RecvCounts> {
        self.ring.check_live(d.slot, d.generation, "ep")?;
        self.synchronize(stream)?;
        let h = &self.handle;
        let n = h.n_ranks as usize;
        let words = self.info.to_vec::<u32>()?;
        let base = d.slot * h.info_slot_bytes() as usize / 4;
        let at = |i: u32| base + i as usize;
        Ok(RecvCounts {
            rows: words[at(0)] as usize,
            offsets: words[at(EpHandle::INFO_OFFSETS)..at(EpHandle::INFO_OFFSETS) + n + 1]
                .iter()
                .map(|&v| v as usize)
                .collect(),
            matrix: words[at(h.info_matrix())..at(h.info_matrix()) + n * n].to_vec(),
            per_expert: words[at(h.info_per_expert())..at(h.info_per_expert()) + h.experts_per_rank() as usize]
                .to_vec(),
        })
    }

    /// The rows this rank received in dispatch `d` (one of the [`Config::slots`] most recent),
    /// read to the host: waits for `stream`.
    pub fn read_received(&self, d: &Dispatched, stream: &CudaStream) -> Result<ReceivedRows> {
        let rows = self.recv_counts(d, stream)?.rows;
        // The count comes from the GPU: never size host memory by more than the buffer holds.
        if rows > d.max_rows {
            return Err(Error::Protocol(format!(
                "ep: the GPU reports {rows} received rows, more than the {} a rank can receive",
                d.max_rows
            )));
        }
        let mut x = vec![0u8; rows * d.row_bytes];
        let mut topk_idx = vec![0i32; rows * d.k];
        let mut topk_weights = vec![0f32; rows * d.k];
        let mut src = vec![0i32; rows];
        let mut x_scales = vec![0u8; rows * d.scale_row_bytes];
        // Read through the addresses the dispatch result gives its users, so they are what the
        // tests check.
        let buf = self.recv_buffer();
        let base = buf.addr();
        let at = |addr: u64| {
            addr.checked_sub(base)
                .map(|o| o as usize)
                .ok_or_else(|| Error::InvalidArgument("ep: the dispatch result belongs to another object".into()))
        };
        buf.read(at(d.recv_x_addr())?, &mut x)?;
        buf.read(at(d.recv_topk_idx_addr())?, &mut topk_idx)?;
        buf.read(at(d.recv_topk_weights_addr())?, &mut topk_weights)?;
        buf.read(at(d.recv_src_addr())?, &mut src)?;
        if let Some(addr) = d.recv_x_scales_addr() {
            buf.read(at(addr)?, &mut x_scales)?;
        }
        let x_scales = match d.format {
            RecvFormat::Input => vec![],
            RecvFormat::E4m3Ue8m0 => {
                let groups = self.handle.scales_per_row() as usize;
                let bytes = x_scales.chunks(d.scale_row_bytes.max(1)).flat_map(|row| &row[..groups]);
                bytes.map(|&b| f32::from_bits((b as u32) << 23)).collect()
            }
            _ => x_scales.as_chunks::<4>().0.iter().map(|c| f32::from_le_bytes(*c)).collect(),
        };
        Ok(ReceivedRows { x, x_scales, topk_idx, topk_weights, src })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_exist_in_the_ptx() {
        for name in [
            "ep_layout",
            "ep_dispatch",
            "ep_dispatch_fp8",
            "ep_combine_bf16",
            "ep_combine_f32",
            "ep_dispatch_pipe",
            "ep_dispatch_pipe_fp8",
            "ep_combine_pipe_bf16",
            "ep_combine_pipe_f32",
        ] {
            assert!(PTX.contains(&format!(".entry {name}(")), "{name} missing from the PTX");
        }
    }

    #[test]
    fn configs_are_checked() {
        let ok = Config::new(4096, 7168, 256, 8);
        assert!(ok.check(2).is_ok());
        assert!(ok.check(8).is_ok());
        assert!(ok.check(0).is_err());
        assert!(ok.check(9).is_err());
        assert!(ok.check(3).is_err(), "256 experts do not split over 3 ranks");
        let e = |c: Config| c.check(2).unwrap_err().to_string();
        assert!(e(Config { hidden: 7170, ..ok }).contains("multiple of 8"));
        assert!(e(Config { hidden: 0, ..ok }).contains("hidden"));
        assert!(e(Config { max_topk: 0, ..ok }).contains("max_topk"));
        assert!(e(Config { max_topk: MAX_TOPK + 1, ..ok }).contains("max_topk"));
        assert!(e(Config { experts: 1, ..ok }).contains("experts"));
        assert!(e(Config { experts: MAX_EXPERTS + 2, ..ok }).contains("experts"));
        assert!(e(Config { max_tokens: 0, ..ok }).contains("max_tokens"));
        assert!(e(Config { max_tokens: MAX_TOKENS + 1, ..ok }).contains("max_tokens"));
        assert!(e(Config { expert_alignment: 0, ..ok }).contains("expert_alignment"));
        assert!(e(Config { expert_alignment: MAX_EXPERT_ALIGNMENT + 1, ..ok }).contains("expert_alignment"));
        assert!(Config { expert_alignment: MAX_EXPERT_ALIGNMENT, ..ok }.check(2).is_ok());
        assert!(e(Config { blocks: Some(0), ..ok }).contains("0 blocks"));
        assert!(Config { blocks: Some(1), ..ok }.check(2).is_ok());
        let h = Config { expert_ids: ExpertIds::Global, expert_alignment: 128, ..ok }.kernel_handle(1, 2, 20);
        assert_eq!((h.global_ids, h.expert_alignment, h.blocks), (1, 128, 20));
        assert_eq!(ok.kernel_handle(0, 2, 1).global_ids, 0, "local ids by default");
        // DeepSeek-V3 sizes on two ranks: receive rows and landing, both for f32 rows.
        let b = ok.shared_bytes(2, 132).unwrap();
        let rows = 2 * 2 * 4096 * 7168 * 4;
        assert!((rows..rows + (8 << 20)).contains(&b), "{b}");
    }

    #[test]
    fn batches_beyond_the_configuration_are_errors() {
        let c = Config::new(100, 64, 16, 4);
        let lens = |t: usize, k: usize, w: usize| (t * 64 * w, t * k * 4, t * k * 4);
        assert_eq!(check_dispatch(&c, DataType::Bf16, 100, 4, lens(100, 4, 2)).unwrap(), 128);
        assert_eq!(check_dispatch(&c, DataType::F32, 7, 1, lens(7, 1, 4)).unwrap(), 256);
        assert_eq!(check_dispatch(&c, DataType::F32, 0, 1, (0, 0, 0)).unwrap(), 256, "an empty batch is fine");
        let e = |r: Result<usize>| r.unwrap_err().to_string();
        assert!(e(check_dispatch(&c, DataType::Bf16, 101, 4, lens(101, 4, 2))).contains("more than max_tokens (100)"));
        assert!(e(check_dispatch(&c, DataType::Bf16, 10, 5, lens(10, 5, 2))).contains("k = 5"));
        assert!(e(check_dispatch(&c, DataType::Bf16, 10, 0, lens(10, 1, 2))).contains("k = 0"));
        let short_x = (10 * 128 - 1, 10 * 4 * 4, 10 * 4 * 4);
        assert!(e(check_dispatch(&c, DataType::Bf16, 10, 4, short_x)).contains("x buffer holds 1279 bytes"));
        let short_w = (10 * 128, 10 * 4 * 4, 10 * 4 * 4 - 4);
        assert!(e(check_dispatch(&c, DataType::Bf16, 10, 4, short_w)).contains("topk_weights"));
        assert!(matches!(check_dispatch(&c, DataType::F16, 1, 1, lens(1, 1, 2)), Err(Error::Unsupported(_))));
        // i64 ids: twice the bytes of the ids, the same weights.
        let wide = Config { topk_idx: TopkIdx::I64, ..c };
        assert!(check_dispatch(&wide, DataType::Bf16, 10, 4, (10 * 128, 10 * 4 * 8, 10 * 4 * 4)).is_ok());
        let e64 = e(check_dispatch(&wide, DataType::Bf16, 10, 4, lens(10, 4, 2)));
        assert!(e64.contains("topk_idx buffer holds 160 bytes, 10 tokens need 320"), "{e64}");
        assert_eq!(check_combine(&c, DataType::Bf16, 10, 1280).unwrap(), 128);
        assert!(e(check_combine(&c, DataType::F32, 10, 1280)).contains("need 2560"));
        assert!(matches!(check_combine(&c, DataType::I32, 1, 1 << 20), Err(Error::Unsupported(_))));
        // FP8: bf16 rows of a multiple of 128 elements, `hidden` bytes received.
        let wide = Config { hidden: 7168, ..c };
        assert_eq!(check_recv_format(&wide, DataType::Bf16, RecvFormat::E4m3).unwrap(), 7168);
        assert_eq!(check_recv_format(&wide, DataType::Bf16, RecvFormat::E4m3Pow2).unwrap(), 7168);
        assert_eq!(check_recv_format(&wide, DataType::Bf16, RecvFormat::E4m3Ue8m0).unwrap(), 7168);
        let bytes = |format: RecvFormat, groups| shared::scale_row_bytes(format.code(), groups);
        assert_eq!([bytes(RecvFormat::E4m3, 56), bytes(RecvFormat::E4m3Ue8m0, 56)], [224, 56]);
        assert_eq!(
            [bytes(RecvFormat::E4m3Ue8m0, 1), bytes(RecvFormat::E4m3Ue8m0, 3), bytes(RecvFormat::E4m3Ue8m0, 5)],
            [4, 4, 8]
        );
        assert_eq!(check_recv_format(&wide, DataType::Bf16, RecvFormat::Input).unwrap(), 7168 * 2);
        assert_eq!(check_recv_format(&c, DataType::F32, RecvFormat::Input).unwrap(), 256, "any hidden as given");
        let e64 = e(check_recv_format(&c, DataType::Bf16, RecvFormat::E4m3));
        assert!(e64.contains("multiple of 128") && e64.contains("64"), "{e64}");
        assert!(matches!(check_recv_format(&wide, DataType::F32, RecvFormat::E4m3), Err(Error::Unsupported(_))));
        assert_eq!(RecvFormat::default(), RecvFormat::Input);
    }

    #[test]
    fn unchecked_configurations_are_errors_not_panics() {
        let ok = Config::new(4096, 7168, 256, 8);
        // `experts / ranks` divided by zero; huge sizes overflowed the products.
        assert!(ok.shared_bytes(0, 132).unwrap_err().to_string().contains("0 ranks"));
        assert!(Config { hidden: usize::MAX, ..ok }.shared_bytes(2, 1).is_err());
        let wide = Config { hidden: usize::MAX / 2, max_tokens: usize::MAX, ..ok };
        let e = check_dispatch(&wide, DataType::F32, 3, 1, (0, 0, 0)).unwrap_err().to_string();
        assert!(e.contains("overflow"), "{e}");
        let e = check_combine(&wide, DataType::Bf16, 3, usize::MAX).unwrap_err().to_string();
        assert!(e.contains("overflow"), "{e}");
        let many = Config { max_tokens: usize::MAX, max_topk: usize::MAX, ..ok };
        assert!(check_dispatch(&many, DataType::F32, usize::MAX / 2, usize::MAX / 2, (0, 0, 0)).is_err());
    }

    #[test]
    fn handles_are_valid_for_the_most_recent_dispatches_of_their_slots() {
        // Two slots: A, B in flight, combined in either order; C overwrites A's slot.
        let mut ring = SlotRing::new(2);
        let e = |r: Result<()>| r.unwrap_err().to_string();
        assert!(e(ring.check_combinable(0, 0)).contains("overwritten"), "no dispatch yet");
        let a = (ring.next, ring.take(next_generation()));
        let b = (ring.next, ring.take(next_generation()));
        assert_eq!((a.0, b.0), (0, 1));
        ring.check_combinable(b.0, b.1).unwrap();
        ring.state[b.0].1 = true;
        assert!(e(ring.check_combinable(b.0, b.1)).contains("already combined"));
        ring.check_combinable(a.0, a.1).unwrap();
        ring.check_live(b.0, b.1, "ep").unwrap();
        // Three in flight with two slots: the oldest is refused, the others combine.
        let c = (ring.next, ring.take(next_generation()));
        assert_eq!(c.0, 0);
        let msg = e(ring.check_combinable(a.0, a.1));
        assert!(msg.contains("ep combine: the handle's receive slot was overwritten"), "{msg}");
        assert!(msg.contains("2 most recent dispatches, Config::slots"), "{msg}");
        assert!(e(ring.check_live(a.0, a.1, "ep dispatch_cached")).contains("ep dispatch_cached: the handle"));
        ring.check_combinable(c.0, c.1).unwrap();
        let d = (ring.next, ring.take(next_generation()));
        ring.check_combinable(d.0, d.1).unwrap();
        assert!(e(ring.check_combinable(b.0, b.1)).contains("overwritten"), "B's slot went to D");
        // Another object's handle (a number this ring never gave) and a slot out of range.
        assert!(e(ring.check_combinable(d.0, d.1 + 1000)).contains("another object's"));
        assert!(e(ring.check_combinable(7, d.1)).contains("overwritten"));
        // One slot: every dispatch overwrites the last.
        let mut one = SlotRing::new(1);
        let x = (one.next, one.take(next_generation()));
        let y = (one.next, one.take(next_generation()));
        assert_eq!((x.0, y.0), (0, 0));
        assert!(one.check_combinable(x.0, x.1).is_err() && one.check_combinable(y.0, y.1).is_ok());
    }

    #[test]
    fn dispatch_numbers_are_unique_in_the_process() {
        let a: Vec<u64> = (0..1000).map(|_| next_generation()).collect();
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a[0] > 0);
    }

    #[test]
    fn regions_do_not_overlap_and_stay_aligned() {
        for n in 1..=MAX_RANKS as u32 {
            for blocks in [1, 7, 132] {
                let h = Config::new(33, 384, 8 * n as usize, 5).kernel_handle(0, n as usize, blocks);
                let r = h.shared_regions();
                assert_eq!(h.dispatch_flag(n - 1, blocks - 1) + 8, r.combine_flags);
                assert_eq!(h.combine_flag(n - 1, blocks - 1) + 8, r.counts);
                assert!(h.count_word(1, n - 1, h.count_words() - 1) + 8 <= r.recv_x);
                assert!(r.recv_x + h.max_recv_rows() * h.max_row_bytes() <= r.recv_idx);
                assert!(r.recv_idx + h.max_recv_rows() * 5 * 4 <= r.recv_w);
                assert!(r.recv_w + h.max_recv_rows() * 5 * 4 <= r.recv_src);
                assert!(r.recv_src + h.max_recv_rows() * 4 <= r.recv_scales);
                assert!(r.recv_scales + h.max_recv_rows() * 3 * 4 <= r.combine);
                assert!(h.combine_region(n - 1) + h.combine_region_bytes() <= r.combine_w);
                assert!(h.combine_w_region(n - 1) + h.combine_w_region_bytes() <= r.total);
                assert_eq!(h.combine_w_region_bytes(), 33 * 5 * 4);
                for off in [
                    r.recv_x,
                    r.recv_idx,
                    r.recv_w,
                    r.recv_src,
                    r.recv_scales,
                    r.combine,
                    h.combine_region(1),
                    r.combine_w,
                ] {
                    assert_eq!(off % 16, 0);
                }
                let l = h.layout_regions();
                assert!(l.per_rank + n as u64 * 4 <= l.per_expert);
                assert!(l.per_expert + h.experts as u64 * 4 <= l.in_rank);
                assert!(l.in_rank + 33 * n as u64 <= l.send_index);
                assert_eq!(l.send_index % 4, 0);
                assert_eq!(h.info_tokens() + n, h.info_words());
            }
        }
    }

    #[test]
    fn slots_and_the_widest_type_size_the_buffer() {
        let c = Config::new(33, 384, 16, 5);
        let one = c.kernel_handle(0, 4, 3);
        let r1 = one.shared_regions();
        let slot_bytes = r1.total - r1.recv_x;
        for slots in 1..=MAX_SLOTS as u32 {
            let h = Config { slots: slots as usize, ..c }.kernel_handle(0, 4, 3);
            assert_eq!(h.shared_regions().total, r1.recv_x + slots as u64 * slot_bytes);
            for slot in 0..slots {
                let r = EpHandle { slot, ..h }.shared_regions();
                // Flags and counts shared, every slot's regions its own, in order, in the buffer.
                assert_eq!(
                    (r.dispatch_flags, r.combine_flags, r.counts),
                    (r1.dispatch_flags, r1.combine_flags, r1.counts)
                );
                assert_eq!(r.recv_x, r1.recv_x + slot as u64 * slot_bytes);
                assert_eq!(r.combine_w - r.recv_x, r1.combine_w - r1.recv_x);
                let end = EpHandle { slot, ..h }.combine_w_region(3) + h.combine_w_region_bytes();
                assert!(end <= r.recv_x + slot_bytes && end <= r.total);
                let (l, i) = (h.for_slot(slot, 1 << 20, 1 << 30), h.for_slot(slot + 1, 1 << 20, 1 << 30));
                assert_eq!(i.layout - l.layout, h.layout_slot_bytes());
                assert!(h.layout_regions().total <= h.layout_slot_bytes());
                assert_eq!(i.info - l.info, h.info_slot_bytes());
                assert!(h.info_words() as u64 * 4 <= h.info_slot_bytes());
            }
        }
        assert!(Config { slots: 0, ..c }.check(4).unwrap_err().to_string().contains("0 receive slots"));
        assert!(Config { slots: MAX_SLOTS + 1, ..c }.check(4).is_err());
        // bf16 at most: rows of half the bytes, the buffer about half; f32 refused.
        let bf16 = Config { widest: DataType::Bf16, ..Config::new(4096, 7168, 256, 8) };
        let (f, b) = (Config::new(4096, 7168, 256, 8).shared_bytes(8, 20).unwrap(), bf16.shared_bytes(8, 20).unwrap());
        let rows = 2 * 8 * 4096 * 7168 * 2;
        assert_eq!(f - b, rows, "bf16 halves the receive rows and the landing");
        assert!(e(check_dispatch(&bf16, DataType::F32, 1, 1, (1 << 20, 64, 64))).contains("sized for bf16"));
        assert!(e(check_combine(&bf16, DataType::F32, 1, 1 << 20)).contains("Config::widest"));
        assert_eq!(check_combine(&bf16, DataType::Bf16, 1, 1 << 20).unwrap(), 7168 * 2);
        assert!(Config { widest: DataType::F16, ..c }.check(4).unwrap_err().to_string().contains("widest"));
        fn e(r: Result<usize>) -> String {
            r.unwrap_err().to_string()
        }
    }

    #[test]
    fn pipelined_regions_do_not_overlap_and_do_not_grow_with_the_tokens() {
        for n in 1..=MAX_RANKS as u32 {
            for (blocks, ring) in [(2, 1), (5, 3), (20, 64)] {
                let c = Config { slots: 2, ..Config::new(33, 384, 8 * n as usize, 5) }.pipelined(Some(ring));
                let h = c.kernel_handle(0, n as usize, blocks);
                let (r, w) = (h.ring_regions(), (blocks / 2) as u64 * n as u64 * 8);
                assert!(h.count_word(1, n - 1, h.count_words() - 1) + 8 <= r.tails);
                let words = [r.tails, r.dones, r.heads, r.combine_tails, r.combine_heads];
                assert!(words.windows(2).all(|p| p[0] + w <= p[1]) && r.combine_heads + w <= r.cursors);
                let entries = (blocks / 2) as u64 * n as u64 * ring as u64;
                assert!(r.cursors + 4 * w <= r.rows && r.rows + entries * h.max_row_bytes() <= r.meta);
                assert!(r.meta + entries * h.ring_meta_bytes() <= r.combine_rows);
                assert!(r.combine_rows + entries * h.max_row_bytes() <= r.combine_w);
                assert!(r.combine_w + entries * 5 * 4 <= r.total && r.total == h.shared_regions().total);
                assert!(h.ring_meta_scales() + 3 * 4 <= h.ring_meta_bytes());
                assert_eq!(h.ring_entry(blocks / 2 - 1, n - 1, 7 * ring as u64 + ring as u64 - 1), entries - 1);
                for off in [r.rows, r.meta, r.combine_rows, r.combine_w] {
                    assert_eq!(off % 16, 0);
                }
                // The slots' received rows to scales are in the local buffer, one after the other.
                let (s0, s1) = (h.for_slot(0, 0, 0).shared_regions(), h.for_slot(1, 0, 0).shared_regions());
                assert_eq!(s1.recv_x - s0.recv_x, h.local_slot_bytes());
                assert!(s1.recv_scales + h.max_recv_rows() * 3 * 4 <= 2 * h.local_slot_bytes());
                assert_eq!(c.local_bytes(n as usize, blocks).unwrap(), 2 * h.local_slot_bytes());
                let more = Config { max_tokens: 1 << 20, ..c }.shared_bytes(n as usize, blocks).unwrap();
                assert_eq!(more, c.shared_bytes(n as usize, blocks).unwrap(), "{n} ranks, {blocks} blocks");
            }
        }
    }

    #[test]
    fn local_ids_and_aligned_counts() {
        // 12 experts on 3 ranks: 4 each.
        let local = |id, rank| shared::local_expert(id, rank, 12, 3);
        assert_eq!(
            [local(0, 0), local(3, 0), local(4, 0), local(4, 1), local(7, 1), local(11, 2)],
            [0, 3, -1, 0, 3, 3]
        );
        assert_eq!([local(-1, 0), local(12, 2), local(i32::MIN, 0), local(i32::MAX, 2)], [-1; 4]);
        let a = shared::align_count;
        assert_eq!([a(0, 128), a(1, 128), a(128, 128), a(129, 128), a(5, 1), a(5, 3)], [0, 128, 128, 256, 5, 6]);
        assert_eq!(a(u32::MAX - 1, 1 << 16), u32::MAX, "saturates");
        assert_eq!(a(7, 0), 7, "0 reads as 1");
    }

    #[test]
    fn count_words_carry_a_tag_that_is_never_zero() {
        assert_eq!(shared::count_tag(1), 1);
        assert_eq!(shared::count_tag(1 << 32), 1, "0 would match a word nobody wrote");
        assert_eq!(shared::count_tag((1 << 32) + 5), 5);
        assert_eq!(shared::pack_count(7, 9) >> 32, 7);
        assert_eq!(shared::pack_count(7, u32::MAX) as u32, u32::MAX);
        let sig = |k, dtype, format| shared::signature(k, dtype, format);
        assert_ne!(sig(8, shared::DTYPE_BF16, 0), sig(8, shared::DTYPE_F32, 0));
        assert_ne!(sig(1, shared::DTYPE_BF16, 0), sig(2, shared::DTYPE_BF16, 0));
        assert_ne!(sig(8, shared::DTYPE_BF16, 0), sig(8, shared::DTYPE_BF16, shared::FORMAT_E4M3));
        assert_ne!(
            sig(8, shared::DTYPE_BF16, shared::FORMAT_E4M3),
            sig(8, shared::DTYPE_BF16, shared::FORMAT_E4M3_POW2)
        );
        assert_ne!(sig(shared::MAX_TOPK as u32, 2, 2), sig(shared::MAX_TOPK as u32 - 1, 2, 2));
    }
}
