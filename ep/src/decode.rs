//! The decode (low-latency) mode, DeepEP's `low_latency_dispatch` / `low_latency_combine`: the
//! dispatch delivers every rank's tokens grouped by *local expert*, and the combine applies the
//! top-k weights.
//!
//! ```text
//!  LowLatency::new(&comm, Config::new(max_tokens, hidden, experts, max_topk))
//!        every rank allocates a decode buffer sized by max_tokens (the decode batch) and maps
//!        everybody's (LowLatency::buffer_bytes, Config::decode_bytes)
//!  ll.dispatch(&DecodeInput { x, dtype, topk_idx, tokens, k }, RecvFormat::Input, stream)
//!        layout kernel:   every expert's token count, every (token, slot)'s position
//!        dispatch kernel: counts to every rank, then each token once to each of its experts
//!        -> DecodeDispatched: [experts_per_rank][ranks * max_tokens] rows, a count per local
//!           expert, every row's source token, every (expert, source)'s range
//!  (your experts: y, one output row per received row, in the same expert-major layout)
//!  ll.combine(&d, &DecodeCombineInput { y, topk_idx, topk_weights, out }, stream)
//!        out[t] = sum over t's slots j, in slot order, of topk_weights[t][j] * y[row of (t, j)]
//!        (f32 from 0, rounded once to the element type)
//! ```
//!
//! **Dispatch** ([`reference::decode::received`](crate::reference::decode::received) is its
//! specification): a token goes once to each expert that one of its slots names (a second slot
//! naming the same expert adds no row). The rows of local expert `j` are rows `j * cap ..
//! j * cap + count[j]` of the receive buffer (`cap = ranks * max_tokens`): by source rank, then
//! in the source's token order, so every run gives the same layout (DeepEP's order depends on
//! its atomics). Beside them: `count[j]` (DeepEP's `packed_recv_count`), every row's token index
//! on its source (`packed_recv_src_info`) and, for every (local expert, source rank), `(begin <<
//! 32) | count` as an i64 (`packed_recv_layout_range`). No top-k weights travel: the combine
//! takes them on the tokens' rank, as DeepEP's. With [`RecvFormat::E4m3`] (and its two
//! variants) bf16 rows are cast to FP8 in the dispatch kernel exactly as
//! [`ExpertParallel::dispatch_as`](crate::ExpertParallel::dispatch_as) casts them, one scale
//! per 128 columns, `[experts_per_rank][cap][hidden / 128]` (or UE8M0 bytes).
//!
//! **Combine** ([`reference::decode::combine`](crate::reference::decode::combine)): every
//! received row's output goes back to its source's landing row of (token, slot), and every
//! token sums `weight * output` over its slots in slot order, f32 products and sums, rounded
//! once: the same bits on every run. A slot naming no expert adds nothing; a token with none
//! gets zeros.
//!
//! **CUDA graphs**: nothing is read to the host, nothing allocated, and the launch sizes depend
//! only on the configuration and the call's `tokens` and `k`; the epochs live on the GPU. A
//! dispatch and combine captured on a stream (`CudaStream::begin_capture` / `end_capture`) replay
//! with whatever the input buffers hold at each replay (the same `tokens` and `k`).
//!
//! Memory: every rank allocates [`Config::decode_bytes`], about `experts * max_tokens * hidden *
//! 4` bytes (the receive rows of every local expert, `ranks * max_tokens` each, sized for f32
//! rows) plus `max_tokens * max_topk * hidden * 4` (the combine's landing rows) and the FP8
//! scales, routes and counts; `max_tokens` is the decode batch (DeepEP's
//! `num_max_dispatch_tokens_per_rank`), not the prefill batch of an [`ExpertParallel`].
//!
//! Calls are collective and stream-ordered as the normal mode's: every rank, the same order, the
//! same `k`, element type and format (a dispatch that differs traps with a message); the
//! received rows stay valid until the next decode dispatch.
//!
//! [`ExpertParallel`]: crate::ExpertParallel

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_host::comm::{Communicator, PeerBuffers};
use mscclpp_host::{Args, BootstrapExt, DeviceBuffer, Error, Gpu, LaunchConfig, Result};

use crate::shared::{EXCHANGE_SHARED_BYTES, EpHandle};
use crate::{Config, DEFAULT_BLOCKS, DataType, PTX, RecvFormat, check_combine, check_dispatch, check_recv_format};

/// Threads per block of the decode layout kernel (one block per expert, each thread a run of
/// tokens).
const LAYOUT_THREADS: u32 = 128;

impl Config {
    /// Bytes of the decode buffer every rank allocates ([`LowLatency::new`]) for `ranks` ranks
    /// and `blocks` blocks: about `experts * max_tokens * hidden * 4` (every local expert's
    /// receive rows, `ranks * max_tokens` each, sized for f32) plus `max_tokens * max_topk *
    /// hidden * 4` (the combine's landing rows). The sizes must pass [`Config::check`].
    pub fn decode_bytes(&self, ranks: usize, blocks: u32) -> Result<u64> {
        self.check(ranks)?;
        Ok(self.kernel_handle(0, ranks, blocks).decode_regions().total)
    }
}

/// One rank's decode batch for [`LowLatency::dispatch`] (buffers on this rank's GPU).
#[derive(Clone, Copy, Debug)]
pub struct DecodeInput<'a> {
    /// `tokens` rows of `hidden` elements of `dtype`.
    pub x: &'a DeviceBuffer,
    /// bf16 or f32.
    pub dtype: DataType,
    /// `tokens x k` expert ids, i32 (or i64: [`Config::topk_idx`]); `-1` (or any id outside
    /// `0..experts`) for none.
    pub topk_idx: &'a DeviceBuffer,
    /// Tokens of this rank (0 to `max_tokens`; may differ between ranks).
    pub tokens: usize,
    /// Experts per token (1 to `max_topk`; the same on every rank).
    pub k: usize,
}

/// What [`LowLatency::combine`] takes (buffers on this rank's GPU).
#[derive(Clone, Copy, Debug)]
pub struct DecodeCombineInput<'a> {
    /// The expert outputs in the dispatch's layout: `experts_per_rank x ranks * max_tokens`
    /// rows of `hidden` elements of the dispatch's element type (bf16 after an FP8 dispatch);
    /// only the first `count` rows of every expert are read.
    pub y: &'a DeviceBuffer,
    /// The ids given to the dispatch (`tokens x k`, the same values).
    pub topk_idx: &'a DeviceBuffer,
    /// `tokens x k` f32 weights.
    pub topk_weights: &'a DeviceBuffer,
    /// `tokens` rows: `out[t] = sum_j topk_weights[t][j] * y[row of (t, j)]`.
    pub out: &'a DeviceBuffer,
}

/// What a decode dispatch delivered to this rank, on the GPU (DeepEP's `packed_recv_x`,
/// `packed_recv_x_scales`, `packed_recv_count`, `packed_recv_src_info`,
/// `packed_recv_layout_range`); the handle its combine takes. Valid until the next decode
/// dispatch on the same [`LowLatency`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeDispatched {
    generation: u64,
    tokens: usize,
    k: usize,
    dtype: DataType,
    format: RecvFormat,
    row_bytes: usize,
    scale_row_bytes: usize,
    experts_per_rank: usize,
    capacity: usize,
    recv_x: u64,
    recv_x_scales: Option<u64>,
    recv_src: u64,
    recv_count: u64,
    recv_range: u64,
}

impl DecodeDispatched {
    /// Tokens this rank dispatched.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Top-k of the call.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Element type of the rows given to the dispatch (and of the combine's rows).
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
    /// Bytes of one received row's scales (0 unless FP8).
    pub fn scale_row_bytes(&self) -> usize {
        self.scale_row_bytes
    }
    /// Local experts of this rank.
    pub fn experts_per_rank(&self) -> usize {
        self.experts_per_rank
    }
    /// Rows reserved per local expert (`ranks * max_tokens`): local expert `j`'s rows start at
    /// row `j * capacity`.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Device address of the received rows: `[experts_per_rank][capacity]` rows of
    /// [`DecodeDispatched::row_bytes`] (DeepEP's `packed_recv_x`).
    pub fn recv_x_addr(&self) -> u64 {
        self.recv_x
    }
    /// Device address of the FP8 scales, for an FP8 dispatch: `[experts_per_rank][capacity]`
    /// rows of [`DecodeDispatched::scale_row_bytes`] (f32 per 128 columns, or UE8M0 bytes).
    pub fn recv_x_scales_addr(&self) -> Option<u64> {
        self.recv_x_scales
    }
    /// Device address of the rows per local expert (`experts_per_rank` i32, DeepEP's
    /// `packed_recv_count`).
    pub fn recv_count_addr(&self) -> u64 {
        self.recv_count
    }
    /// Device address of every received row's token index on its source rank
    /// (`[experts_per_rank][capacity]` i32, DeepEP's `packed_recv_src_info`).
    pub fn recv_src_info_addr(&self) -> u64 {
        self.recv_src
    }
    /// Device address of `[experts_per_rank][ranks]` i64: `(begin << 32) | count` of the rows of
    /// every source rank among the expert's rows (DeepEP's `packed_recv_layout_range`).
    pub fn recv_layout_range_addr(&self) -> u64 {
        self.recv_range
    }
}

/// A decode dispatch's results, read to the host ([`LowLatency::read_received`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeReceived {
    /// Rows per local expert.
    pub count: Vec<u32>,
    /// `[expert * ranks + source]`: `(begin << 32) | count`.
    pub range: Vec<u64>,
    /// Per local expert: its `count` rows (bytes, `row_bytes` each).
    pub x: Vec<Vec<u8>>,
    /// Per local expert: its rows' FP8 scales (as f32; UE8M0 bytes read as the powers of two
    /// they stand for; empty unless FP8).
    pub x_scales: Vec<Vec<f32>>,
    /// Per local expert: its rows' token index on their source.
    pub src: Vec<Vec<i32>>,
}

/// The decode (low-latency) mode of one rank: its buffer, device state and kernels. Built
/// collectively by every rank ([`LowLatency::new`]); see the module documentation.
pub struct LowLatency {
    gpu: Arc<Gpu>,
    config: Config,
    handle: EpHandle,
    /// Threads per block of dispatch, of combine and of the FP8 dispatch.
    threads: (u32, u32, u32),
    f_layout: CudaFunction,
    f_dispatch: CudaFunction,
    f_dispatch_fp8: CudaFunction,
    f_combine_bf16: CudaFunction,
    f_combine_f32: CudaFunction,
    /// The dispatch a combine may still follow.
    pending: Option<u64>,
    // Drop order: the peers' mappings close before this rank's memory is freed.
    _peers: PeerBuffers,
    _table: DeviceBuffer,
    shared: DeviceBuffer,
    _state: DeviceBuffer,
}

impl std::fmt::Debug for LowLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LowLatency")
            .field("config", &self.config)
            .field("handle", &self.handle)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl LowLatency {
    /// Builds the decode buffer and loads the kernels. Every rank calls it at the same point
    /// with the same sizes (`max_tokens` is the decode batch); all ranks must be on this
    /// machine. [`Config::expert_ids`] and [`Config::expert_alignment`] play no part.
    pub fn new(comm: &Communicator, config: Config) -> Result<Self> {
        let gpu = comm.gpu().clone();
        let boot = comm.bootstrap();
        let (n, me) = (comm.world_size(), comm.rank());
        if boot.info().local_size != n {
            return Err(Error::Unsupported(format!(
                "ep decode: all {n} ranks must be on one machine ({} are on this one)",
                boot.info().local_size
            )));
        }
        let sms = comm.sm_share()?;
        let config = Config { overlap: config.overlap && comm.may_overlap_launches()?, ..config };
        let own_blocks = config.blocks.unwrap_or(DEFAULT_BLOCKS.min(sms));
        let local = config.check(n).and_then(|()| {
            if own_blocks == 0 || own_blocks > sms {
                return Err(Error::InvalidArgument(format!(
                    "ep decode: {own_blocks} blocks (1 to this rank's {sms} SMs: the blocks wait for each other)"
                )));
            }
            Ok(())
        });
        let f = |name| gpu.function(PTX, name);
        let (f_layout, f_dispatch, f_dispatch_fp8) =
            (f("ep_decode_layout")?, f("ep_decode_dispatch")?, f("ep_decode_dispatch_fp8")?);
        let (f_combine_bf16, f_combine_f32) = (f("ep_decode_combine_bf16")?, f("ep_decode_combine_f32")?);
        let limit = mscclpp_host::launch::max_threads_per_block;
        let pick = |l: u32| config.threads.unwrap_or(1024).min(l).max(32) / 32 * 32;
        let threads = (
            pick(limit(&f_dispatch)?),
            pick(limit(&f_combine_bf16)?.min(limit(&f_combine_f32)?)),
            pick(limit(&f_dispatch_fp8)?),
        );
        // Every rank must agree on the sizes (a refusal travels as zeros): the smallest blocks.
        let mine = match local {
            Ok(()) => [
                config.max_tokens as u64,
                config.hidden as u64,
                config.experts as u64,
                config.max_topk as u64,
                own_blocks as u64,
            ],
            Err(_) => [0; 5],
        };
        let all = boot.all_gather_pod(&mine)?;
        local?;
        if let Some(r) = all.iter().position(|v| v[4] == 0) {
            return Err(Error::InvalidArgument(format!(
                "ep decode: rank {r} refused its configuration (its own error says why)"
            )));
        }
        if let Some(r) = all.iter().position(|v| v[..4] != mine[..4]) {
            return Err(Error::InvalidArgument(format!(
                "ep decode: rank {r} uses max_tokens, hidden, experts, max_topk {:?}, this rank {:?}",
                &all[r][..4],
                &mine[..4]
            )));
        }
        let blocks = all.iter().map(|v| v[4]).min().unwrap_or(1) as u32;
        let mut handle = config.kernel_handle(me, n, blocks);
        let total = handle.decode_regions().total;
        let shared = DeviceBuffer::exportable_filled(&gpu, total as usize, 0)?;
        let peers = comm.exchange(&shared)?;
        if let Some(r) = (0..n).find(|&r| peers.len(r) != total) {
            return Err(Error::InvalidArgument(format!(
                "ep decode: rank {r} has a buffer of {} bytes, this rank {total}",
                peers.len(r)
            )));
        }
        let table = DeviceBuffer::from_slice(&gpu, peers.addrs())?;
        // Every block's epochs start at 1 (0 is "never signalled" in the flags).
        let state = DeviceBuffer::from_slice(&gpu, &vec![1u64; 2 * blocks as usize])?;
        handle.peers = table.addr();
        handle.shared = shared.addr();
        handle.state = state.addr();
        // Nobody writes into a peer before every rank has its buffer mapped and zeroed.
        boot.barrier()?;
        Ok(Self {
            gpu,
            config,
            handle,
            threads,
            f_layout,
            f_dispatch,
            f_dispatch_fp8,
            f_combine_bf16,
            f_combine_f32,
            pending: None,
            _peers: peers,
            _table: table,
            shared,
            _state: state,
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
    /// This rank and the number of ranks.
    pub fn rank(&self) -> (usize, usize) {
        (self.handle.rank as usize, self.handle.n_ranks as usize)
    }
    /// Blocks of dispatch and combine, threads per block of dispatch, of combine, of the FP8
    /// dispatch.
    pub fn grid(&self) -> (u32, u32, u32, u32) {
        (self.handle.blocks, self.threads.0, self.threads.1, self.threads.2)
    }
    /// Bytes of this rank's decode buffer ([`Config::decode_bytes`]).
    pub fn buffer_bytes(&self) -> u64 {
        self.handle.decode_regions().total
    }

    fn check_place(&self, stream: &CudaStream, bufs: &[&DeviceBuffer]) -> Result<()> {
        if stream.context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(Error::InvalidArgument(format!(
                "ep decode: the stream belongs to another GPU than this rank's GPU {}",
                self.gpu.ordinal()
            )));
        }
        match bufs.iter().find(|b| b.gpu().ordinal() != self.gpu.ordinal()) {
            Some(b) => Err(Error::InvalidArgument(format!(
                "ep decode: a buffer is on GPU {}, this rank uses GPU {}",
                b.gpu().ordinal(),
                self.gpu.ordinal()
            ))),
            None => Ok(()),
        }
    }

    /// Launches `f` on `stream`, overlapped with the kernel before it when configured.
    ///
    /// # Safety
    /// As for [`mscclpp_host::launch::launch_on`]; the kernel waits for its predecessor before
    /// its first memory access (the decode kernels do).
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

    /// Dispatches this rank's decode batch (see the module documentation): enqueues the decode
    /// layout and dispatch kernels on `stream` and returns without waiting; `format` casts bf16
    /// rows to FP8 ([`RecvFormat`]). Every rank calls it, with the same `k`, element type and
    /// format. Capturable in a CUDA graph.
    pub fn dispatch(
        &mut self,
        input: &DecodeInput,
        format: RecvFormat,
        stream: &CudaStream,
    ) -> Result<DecodeDispatched> {
        self.check_place(stream, &[input.x, input.topk_idx])?;
        // No weights travel with a decode dispatch.
        let lens = (input.x.len(), input.topk_idx.len(), usize::MAX);
        let in_row_bytes = check_dispatch(&self.config, input.dtype, input.tokens, input.k, lens)?;
        let row_bytes = check_recv_format(&self.config, input.dtype, format)?;
        let code = crate::dtype_code(input.dtype)?;
        self.pending = None;
        let h = self.handle;
        let dr = h.decode_regions();
        let mut args = Args::new()
            .arg(GlobalPtr::<u8>::from_addr(input.topk_idx.addr()))
            .arg(h.idx_bytes)
            .arg(input.tokens as u32)
            .arg(input.k as u32)
            .arg(h.experts)
            .arg(GlobalPtr::<u32>::from_addr(h.shared + dr.per_expert))
            .arg(GlobalPtr::<u32>::from_addr(h.shared + dr.positions));
        let cfg = LaunchConfig::new(h.experts, LAYOUT_THREADS).shared(LAYOUT_THREADS * 4);
        // SAFETY: the kernel takes (ptr, u32, u32, u32, u32, ptr, ptr) as passed; `topk_idx`
        // holds tokens * k ids of `idx_bytes` (checked); the buffer holds `experts` counts and
        // max_tokens * max_topk positions; a u32 of shared memory per thread.
        unsafe { self.launch(stream, &self.f_layout, cfg, &mut args)? };
        let mut args = Args::new()
            .arg(h)
            .arg(GlobalPtr::<u8>::from_addr(input.x.addr()))
            .arg(GlobalPtr::<u8>::from_addr(input.topk_idx.addr()))
            .arg(input.tokens as u32)
            .arg(input.k as u32)
            .arg(in_row_bytes as u32)
            .arg(crate::shared::signature(input.k as u32, code, format.code()))
            .arg(format.code())
            .arg(self.config.budget);
        let (f, threads) =
            if format.is_fp8() { (&self.f_dispatch_fp8, self.threads.2) } else { (&self.f_dispatch, self.threads.0) };
        let cfg = LaunchConfig::new(h.blocks, threads).shared(EXCHANGE_SHARED_BYTES);
        // SAFETY: the kernel takes (EpHandle, ptr, ptr, u32, u32, u32, u32, u32, SpinBudget) as
        // passed; the inputs hold the batch (checked; for FP8 bf16 rows of a multiple of 128
        // elements); the handle's buffers live as long as `self`; `h.blocks` blocks (at most
        // one per SM, all resident) of at least 32 threads; a rank whose arguments differ traps
        // (the signature, counts checked against max_tokens on the GPU).
        unsafe { self.launch(stream, f, cfg, &mut args)? };
        let generation = crate::next_generation();
        self.pending = Some(generation);
        Ok(DecodeDispatched {
            generation,
            tokens: input.tokens,
            k: input.k,
            dtype: input.dtype,
            format,
            row_bytes,
            scale_row_bytes: if format.is_fp8() {
                crate::shared::scale_row_bytes(format.code(), h.scales_per_row()) as usize
            } else {
                0
            },
            experts_per_rank: h.experts_per_rank() as usize,
            capacity: h.decode_capacity() as usize,
            recv_x: h.shared + dr.recv_x,
            recv_x_scales: format.is_fp8().then_some(h.shared + dr.recv_scales),
            recv_src: h.shared + dr.recv_src,
            recv_count: h.shared + dr.recv_count,
            recv_range: h.shared + dr.recv_range,
        })
    }

    /// Combines decode dispatch `d` (see the module documentation): `input.y` holds the expert
    /// outputs in `d`'s layout, `input.out` gets `d.tokens()` rows of the weighted sums.
    /// Enqueued on `stream`; returns without waiting. Every rank calls it. `d` must be this
    /// object's last dispatch, not yet combined, and `input.topk_idx` hold the ids it was given.
    /// Capturable in a CUDA graph.
    pub fn combine(&mut self, d: &DecodeDispatched, input: &DecodeCombineInput, stream: &CudaStream) -> Result<()> {
        if self.pending != Some(d.generation) {
            return Err(Error::InvalidArgument(
                "ep decode combine: the handle is not this object's last dispatch, or that dispatch was already combined"
                    .into(),
            ));
        }
        self.check_place(stream, &[input.y, input.topk_idx, input.topk_weights, input.out])?;
        let row_bytes = check_combine(&self.config, d.dtype, d.tokens, input.out.len())?;
        let bad = |what: &str, has: usize, need: usize| {
            Err(Error::InvalidArgument(format!(
                "ep decode combine: the {what} buffer holds {has} bytes, it needs {need}"
            )))
        };
        let y_need = d.experts_per_rank * d.capacity * row_bytes;
        if input.y.len() < y_need {
            return bad("y", input.y.len(), y_need);
        }
        let pairs = d.tokens * d.k;
        if input.topk_idx.len() < pairs * self.config.topk_idx.bytes() {
            return bad("topk_idx", input.topk_idx.len(), pairs * self.config.topk_idx.bytes());
        }
        if input.topk_weights.len() < pairs * 4 {
            return bad("topk_weights", input.topk_weights.len(), pairs * 4);
        }
        let f = match d.dtype {
            DataType::F32 => &self.f_combine_f32,
            _ => &self.f_combine_bf16,
        };
        let h = self.handle;
        let mut args = Args::new()
            .arg(h)
            .arg(GlobalPtr::<u8>::from_addr(input.y.addr()))
            .arg(GlobalPtr::<u8>::from_addr(input.topk_idx.addr()))
            .arg(GlobalPtr::<u32>::from_addr(input.topk_weights.addr()))
            .arg(GlobalPtr::<u8>::from_addr(input.out.addr()))
            .arg(d.tokens as u32)
            .arg(d.k as u32)
            .arg(row_bytes as u32)
            .arg(self.config.budget);
        let cfg = LaunchConfig::new(h.blocks, self.threads.1).shared(EXCHANGE_SHARED_BYTES);
        // SAFETY: the kernel takes (EpHandle, ptr, ptr, ptr, ptr, u32, u32, u32, SpinBudget) as
        // passed; `y` holds every expert's capacity of rows, the ids and weights the tokens'
        // slots, `out` the tokens' rows (all checked); the counts and routes it reads are this
        // dispatch's (`pending`); grid as for dispatch.
        unsafe { self.launch(stream, f, cfg, &mut args)? };
        self.pending = None;
        Ok(())
    }

    /// What this rank received in decode dispatch `d` (its last), read to the host: waits for
    /// `stream`.
    pub fn read_received(&self, d: &DecodeDispatched, stream: &CudaStream) -> Result<DecodeReceived> {
        self.gpu.bind()?;
        stream.synchronize().map_err(|e| Error::Driver {
            context: format!("synchronizing a stream of GPU {}", self.gpu.ordinal()),
            source: e,
        })?;
        self.gpu.synchronize()?;
        let (epr, n) = (d.experts_per_rank, self.handle.n_ranks as usize);
        let base = self.shared.addr();
        let at = |addr: u64| (addr - base) as usize;
        let mut count = vec![0u32; epr];
        let mut range = vec![0u64; epr * n];
        self.shared.read(at(d.recv_count), &mut count)?;
        self.shared.read(at(d.recv_range), &mut range)?;
        let groups = self.handle.scales_per_row() as usize;
        let mut r = DecodeReceived { count, range, x: vec![], x_scales: vec![], src: vec![] };
        for j in 0..epr {
            // The count comes from the GPU: never size host memory by more than the buffer holds.
            let rows = r.count[j] as usize;
            if rows > d.capacity {
                return Err(Error::Protocol(format!(
                    "ep decode: the GPU reports {rows} rows for local expert {j}, more than the {} it holds",
                    d.capacity
                )));
            }
            let first = j * d.capacity;
            let mut x = vec![0u8; rows * d.row_bytes];
            let mut src = vec![0i32; rows];
            self.shared.read(at(d.recv_x) + first * d.row_bytes, &mut x)?;
            self.shared.read(at(d.recv_src) + first * 4, &mut src)?;
            let scales = match d.recv_x_scales {
                None => vec![],
                Some(addr) => {
                    let mut bytes = vec![0u8; rows * d.scale_row_bytes];
                    self.shared.read(at(addr) + first * d.scale_row_bytes, &mut bytes)?;
                    if d.format == RecvFormat::E4m3Ue8m0 {
                        let rows = bytes.chunks(d.scale_row_bytes.max(1)).flat_map(|row| &row[..groups]);
                        rows.map(|&b| f32::from_bits((b as u32) << 23)).collect()
                    } else {
                        bytes.as_chunks::<4>().0.iter().map(|c| f32::from_le_bytes(*c)).collect()
                    }
                }
            };
            r.x.push(x);
            r.src.push(src);
            r.x_scales.push(scales);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_kernels_exist_in_the_ptx() {
        for name in [
            "ep_decode_layout",
            "ep_decode_dispatch",
            "ep_decode_dispatch_fp8",
            "ep_decode_combine_bf16",
            "ep_decode_combine_f32",
        ] {
            assert!(PTX.contains(&format!(".entry {name}(")), "{name} missing from the PTX");
        }
    }

    #[test]
    fn decode_regions_do_not_overlap_and_stay_aligned() {
        for n in 1..=crate::shared::MAX_RANKS as u32 {
            for blocks in [1, 7, 132] {
                let h = Config::new(33, 384, 8 * n as usize, 5).kernel_handle(0, n as usize, blocks);
                let r = h.decode_regions();
                let rows = h.experts_per_rank() as u64 * h.decode_capacity();
                assert_eq!(h.decode_capacity(), n as u64 * 33);
                assert_eq!(h.decode_dispatch_flag(n - 1, blocks - 1) + 8, r.combine_flags);
                assert_eq!(h.decode_combine_flag(n - 1, blocks - 1) + 8, r.counts);
                assert_eq!(h.decode_count_word(1, n - 1, h.experts) + 8, r.per_expert);
                assert!(r.per_expert + h.experts as u64 * 4 <= r.positions);
                assert!(r.positions + 33 * 5 * 4 <= r.recv_x);
                assert!(r.recv_x + rows * 384 * 4 <= r.recv_scales);
                assert!(r.recv_scales + rows * 3 * 4 <= r.recv_src);
                assert!(r.recv_src + rows * 4 <= r.recv_route);
                assert!(r.recv_route + rows * 4 <= r.recv_count);
                assert!(r.recv_count + h.experts_per_rank() as u64 * 4 <= r.recv_range);
                assert!(r.recv_range + h.experts_per_rank() as u64 * n as u64 * 8 <= r.landing);
                assert_eq!(r.landing + 33 * 5 * 384 * 4, r.total);
                for off in [r.recv_x, r.recv_scales, r.recv_src, r.recv_route, r.landing] {
                    assert_eq!(off % 256, 0);
                }
                assert_eq!((r.counts % 8, r.recv_range % 8, r.positions % 4), (0, 0, 0));
            }
        }
    }

    #[test]
    fn decode_bytes_grow_with_the_decode_batch() {
        // DeepSeek-V3 at a decode batch of 128 on 8 ranks: every expert's rows (f32-sized) and
        // the landing rows of 128 x 8 (token, slot) pairs.
        let c = Config::new(128, 7168, 256, 8);
        let b = c.decode_bytes(8, 20).unwrap();
        let rows = 256 * 128 * 7168 * 4 + 128 * 8 * 7168 * 4;
        assert!((rows..rows + (64 << 20)).contains(&b), "{b}");
        let half = Config { max_tokens: 64, ..c }.decode_bytes(8, 20).unwrap();
        assert!(half < b / 2 + (1 << 20), "{half} {b}");
        assert!(c.decode_bytes(3, 20).is_err(), "256 experts do not split over 3 ranks");
    }
}
