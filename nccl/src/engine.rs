//! The served path: what a communicator whose ranks are all on one machine runs, enqueued on
//! the caller's stream with no host synchronisation (so every call can be captured in a CUDA
//! graph and replayed with new data).
//!
//! Every rank owns a scratch buffer that every other rank maps:
//!
//! ```text
//!  scratch of rank r:  [ collective region (coll_bytes) | outbox to rank 0 | ... | outbox to rank n-1 ]
//!                                                         (p2p_bytes each)
//! ```
//!
//! * **Sums of f32, f16, bf16, i32 and u32** in allreduce, allgather and reduce-scatter run on
//!   `mscclpp-collectives` (its own scratch and algorithms; buffers that are not 16-byte aligned
//!   go through aligned staging buffers, a local choice that does not change the protocol).
//! * **Everything else** (every type and reduction, broadcast, reduce, all-to-all, gather,
//!   scatter) runs in rounds over the collective region: every rank copies its part into its own
//!   region, a barrier (each rank signals every other through a memory semaphore, then waits for
//!   every other), every rank reads what it needs from the others' regions (copies, or a
//!   reduction in rank order, so every rank gets the same bits), and a second barrier before
//!   the regions are reused.
//! * **Send / receive** (grouped) runs in rounds per pair: the sender copies a chunk into its
//!   outbox toward the receiver and signals it (`data` semaphores); the receiver waits, copies
//!   the chunk out of the sender's outbox and acknowledges (`ack` semaphores); the sender waits
//!   for the acknowledgement before it reuses the outbox. Round `j` carries chunk `j` of every
//!   pair's stream of messages on both sides, so no pattern can deadlock.
//!
//! Which path runs is decided from the call's arguments (operation, type, reduction, count),
//! which every rank shares, never from local state such as a pointer's alignment.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, sys};
use mscclpp_collectives::Collectives;
use mscclpp_device::poll::SpinBudget;
use mscclpp_host::comm::{Communicator, MemorySemaphores, PeerBuffers};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_nccl_device::{CopyItem, CopyList, MAX_COPIES, MAX_SYNC_BITS, ReduceArgs, ScalarKind, SyncArgs};

use crate::abi::DataType;
use crate::error::{Error, Result};

/// The PTX of this crate's kernels (built from `kernels/` by the build script).
pub const PTX: &str = include_str!(env!("MSCCLPP_NCCL_PTX"));

/// Threads per block of the copy and reduction kernels.
const THREADS: u32 = 512;

/// Default bytes of each rank's collective region (`MSCCLPP_RS_NCCL_COLL_BYTES`).
pub const DEFAULT_COLL_BYTES: u64 = 16 << 20;
/// Default bytes of each outbox (`MSCCLPP_RS_NCCL_P2P_BYTES`).
pub const DEFAULT_P2P_BYTES: u64 = 4 << 20;
/// Default bytes of each staging buffer of the collectives path (`MSCCLPP_RS_NCCL_STAGE_BYTES`).
pub const DEFAULT_STAGE_BYTES: u64 = 32 << 20;

/// A reduction as the kernels take it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reduction {
    /// The operation.
    pub op: mscclpp_nccl_device::ReduceOp,
    /// Where a pre-multiplying sum finds its scalar.
    pub scalar_kind: ScalarKind,
    /// The scalar's bits or address.
    pub scalar: u64,
}

impl Reduction {
    /// A built-in reduction (no scalar).
    pub fn plain(op: mscclpp_nccl_device::ReduceOp) -> Self {
        Self { op, scalar_kind: ScalarKind::None, scalar: 0 }
    }
}

/// The sizes of the served path, the same on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Bytes of the collective region.
    pub coll: u64,
    /// Bytes of one outbox.
    pub p2p: u64,
    /// Bytes of one staging buffer.
    pub stage: u64,
}

impl Sizes {
    /// From the environment (multiples of 256 bytes, at least 4 KiB), else the defaults.
    pub fn from_env() -> Result<Self> {
        let read = |name: &str, default: u64| -> Result<u64> {
            match std::env::var(name) {
                Err(_) => Ok(default),
                Ok(v) => {
                    v.trim().parse::<u64>().ok().filter(|&b| b >= 4096 && b % 256 == 0 && b <= 1 << 34).ok_or_else(
                        || Error::invalid_argument(format!("{name}={v}: a multiple of 256 from 4096 bytes")),
                    )
                }
            }
        };
        Ok(Self {
            coll: read("MSCCLPP_RS_NCCL_COLL_BYTES", DEFAULT_COLL_BYTES)?,
            p2p: read("MSCCLPP_RS_NCCL_P2P_BYTES", DEFAULT_P2P_BYTES)?,
            stage: read("MSCCLPP_RS_NCCL_STAGE_BYTES", DEFAULT_STAGE_BYTES)?,
        })
    }
}

/// Everything a served communicator holds on its GPU.
pub struct Served {
    comm: Communicator,
    gpu: Arc<Gpu>,
    rank: usize,
    n: usize,
    sizes: Sizes,
    /// Blocks the copy and reduction kernels may use.
    blocks: u32,
    budget: SpinBudget,
    functions: HashMap<String, CudaFunction>,
    /// The collectives of the fast path (none in a world of one, where the general path serves).
    coll: Option<Collectives>,
    stage_in: DeviceBuffer,
    stage_out: DeviceBuffer,
    /// Every rank's scratch address, in device memory (the reduction kernel's table).
    scratch_table: DeviceBuffer,
    sem_tables: [DeviceBuffer; 3],
    // Drop order: the mappings and semaphores before the scratch they reference.
    _sems: [MemorySemaphores; 3],
    peers: PeerBuffers,
    _scratch: DeviceBuffer,
    /// Where the last eager call ended: the stream it was enqueued on and an event recorded
    /// after it (see [`Served::on`]).
    last: Mutex<Option<(usize, CudaEvent)>>,
}

/// Which semaphores a sync uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sems {
    Collective = 0,
    Data = 1,
    Ack = 2,
}

/// One send or receive of a group, as the engine runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2p {
    /// The other rank.
    pub peer: usize,
    /// The buffer's address.
    pub addr: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Served {
    /// Builds the served state: a collective call of every rank of `comm` (scratch, semaphores
    /// and the collectives are exchanged). Kernels use at most this rank's share of the GPU's SMs
    /// (ranks of one process on one GPU run side by side) and `max_ctas` from the config.
    pub fn new(comm: &Communicator, max_ctas: Option<u32>) -> Result<Self> {
        let gpu = comm.gpu().clone();
        let (rank, n) = (comm.rank(), comm.world_size());
        let sizes = Sizes::from_env()?;
        // Kernels first: loading a module may wait for the context's running kernels, and ranks
        // that are threads of this process share the context (see the barrier at the end).
        gpu.module(PTX)?;
        let mut functions = HashMap::new();
        let mut names = vec!["nccl_copy".to_string(), "nccl_sync".to_string()];
        names.extend(DataType::ALL.iter().map(|t| format!("nccl_reduce_{}", t.name())));
        for name in names {
            let f = gpu.function(PTX, &name)?;
            functions.insert(name, f);
        }
        let share = comm.sm_share()?;
        let blocks = max_ctas.map_or(share, |m| m.min(share)).max(1);
        let total = sizes.coll + n as u64 * sizes.p2p;
        let scratch = DeviceBuffer::exportable_filled(&gpu, to_usize(total)?, 0)?;
        let peers = comm.exchange(&scratch)?;
        let scratch_table = DeviceBuffer::from_slice(&gpu, peers.addrs())?;
        let sems = [comm.memory_semaphores()?, comm.memory_semaphores()?, comm.memory_semaphores()?];
        let sem_tables = [
            DeviceBuffer::from_slice(&gpu, &sems[0].table())?,
            DeviceBuffer::from_slice(&gpu, &sems[1].table())?,
            DeviceBuffer::from_slice(&gpu, &sems[2].table())?,
        ];
        let mut config = mscclpp_collectives::Config::from_env()?;
        config.max_blocks = Some(config.max_blocks.map_or(blocks, |b| b.min(blocks)));
        let coll = if n > 1 { Some(Collectives::with_config(comm, config)?) } else { None };
        let stage_in = DeviceBuffer::alloc(&gpu, to_usize(sizes.stage)?)?;
        let stage_out = DeviceBuffer::alloc(&gpu, to_usize(sizes.stage)?)?;
        // No rank launches anything before every rank has loaded and allocated all it needs.
        comm.bootstrap().barrier()?;
        Ok(Self {
            comm: comm.clone(),
            gpu,
            rank,
            n,
            sizes,
            blocks,
            budget: budget_from_env(),
            functions,
            coll,
            stage_in,
            stage_out,
            scratch_table,
            sem_tables,
            _sems: sems,
            peers,
            _scratch: scratch,
            last: Mutex::new(None),
        })
    }

    /// Runs `call`, which enqueues one operation on the caller's stream `s`, in this
    /// communicator's order: as NCCL does, operations of one communicator issued on different
    /// streams run one after the other (they share the scratch, the staging buffers and the
    /// semaphores' counts). When `s` is not the stream of the previous eager call, `s` first
    /// waits for an event recorded after that call; after `call`, an event is recorded on `s`.
    /// A stream being captured into a graph neither waits nor records (the graph orders its own
    /// work; an eager event cannot be waited on inside a capture), and the next eager call then
    /// waits for nothing.
    pub fn on<R>(&self, s: CUstream, call: impl FnOnce() -> Result<R>) -> Result<R> {
        let stream = self.stream(s);
        let capturing = stream.capture_status().map_err(|e| Error::cuda("cuStreamIsCapturing", e))?
            != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if capturing {
            *last = None;
            return call();
        }
        if let Some((prev, event)) = last.as_ref()
            && *prev != s as usize
        {
            stream.wait(event).map_err(|e| Error::cuda("cuStreamWaitEvent", e))?;
        }
        let out = call()?;
        let event = match last.take() {
            Some((_, event)) => event,
            None => self
                .gpu
                .context()
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(|e| Error::cuda("cuEventCreate", e))?,
        };
        event.record(&stream).map_err(|e| Error::cuda("cuEventRecord", e))?;
        *last = Some((s as usize, event));
        Ok(out)
    }

    /// The communicator.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// This rank's GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn stream(&self, s: CUstream) -> Arc<CudaStream> {
        // SAFETY: the caller's stream belongs to this GPU's (primary) context, as NCCL requires
        // of the stream passed with a communicator; it outlives the call.
        unsafe { self.gpu.context().wrap_borrowed_stream(s) }
    }

    fn launch(&self, stream: &CudaStream, name: &str, cfg: LaunchConfig, args: Args) -> Result<()> {
        let f = self.functions.get(name).ok_or_else(|| Error::internal(format!("kernel {name} not loaded")))?;
        let mut args = args;
        // SAFETY: each kernel takes the one argument struct passed (the driver checks the size);
        // every address in it stays valid until the stream has passed the kernel (scratch and
        // tables live as long as the communicator, the caller's buffers as NCCL requires).
        unsafe { mscclpp_host::launch::launch_on(&self.gpu, stream, f, cfg, &mut args) }.map_err(Error::from)
    }

    /// Copies `items` (any alignment, no overlap within one item).
    fn copy(&self, stream: &CudaStream, items: &[CopyItem]) -> Result<()> {
        for group in items.chunks(MAX_COPIES) {
            let group: Vec<CopyItem> = group.iter().copied().filter(|c| c.bytes > 0 && c.dst != c.src).collect();
            if group.is_empty() {
                continue;
            }
            let mut list = CopyList { n: group.len() as u32, ..CopyList::default() };
            list.items[..group.len()].copy_from_slice(&group);
            let largest = group.iter().map(|c| c.bytes).max().unwrap_or(0);
            let per_item = largest.div_ceil(64 << 10).clamp(1, (self.blocks as u64 / group.len() as u64).max(1));
            let cfg = LaunchConfig::new(per_item as u32 * group.len() as u32, THREADS);
            self.launch(stream, "nccl_copy", cfg, Args::new().arg(list))?;
        }
        Ok(())
    }

    /// `out[i] = op over q of (table[q] + offset + q * stride)[i]` for `count` elements.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        stream: &CudaStream,
        dtype: DataType,
        red: Reduction,
        out: u64,
        (table, n_src): (u64, usize),
        offset: u64,
        stride: u64,
        count: u64,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let args = ReduceArgs {
            out,
            table,
            offset,
            stride,
            count,
            scalar: red.scalar,
            n_src: n_src as u32,
            op: red.op as u32,
            scalar_kind: red.scalar_kind as u32,
            pad: 0,
        };
        let blocks = count.div_ceil(THREADS as u64).clamp(1, self.blocks as u64 * 4) as u32;
        self.launch(
            stream,
            &format!("nccl_reduce_{}", dtype.name()),
            LaunchConfig::new(blocks, THREADS),
            Args::new().arg(args),
        )
    }

    /// Signals `signal` and waits for `wait` (every other rank when both are `None`).
    fn sync(&self, stream: &CudaStream, sems: Sems, sets: Option<(&[usize], &[usize])>) -> Result<()> {
        if self.n == 1 {
            return Ok(());
        }
        let mut a = SyncArgs {
            table: mscclpp_device::ptr::GlobalPtr::from_addr(self.sem_tables[sems as usize].addr()),
            n_ranks: self.n as u32,
            rank: self.rank as u32,
            all: u32::from(sets.is_none()),
            pad: 0,
            signal: [0; MAX_SYNC_BITS / 64],
            wait: [0; MAX_SYNC_BITS / 64],
            budget: self.budget,
        };
        if let Some((signal, wait)) = sets {
            if signal.is_empty() && wait.is_empty() {
                return Ok(());
            }
            for (set, bits) in [(signal, &mut a.signal), (wait, &mut a.wait)] {
                for &p in set {
                    if p >= MAX_SYNC_BITS {
                        return Err(Error::invalid_usage(format!(
                            "send/receive with rank {p}: served communicators pair ranks below {MAX_SYNC_BITS}"
                        )));
                    }
                    bits[p / 64] |= 1 << (p % 64);
                }
            }
        }
        let threads = (self.n as u32).clamp(32, 1024).div_ceil(32) * 32;
        self.launch(stream, "nccl_sync", LaunchConfig::new(1, threads), Args::new().arg(a))
    }

    fn barrier(&self, stream: &CudaStream) -> Result<()> {
        self.sync(stream, Sems::Collective, None)
    }

    /// Rank `q`'s collective region.
    fn region(&self, q: usize) -> u64 {
        self.peers.addr(q)
    }

    /// Elements of `size` bytes per round when a round moves `parts` pieces through the region.
    fn per_round(&self, size: usize, parts: usize) -> u64 {
        (self.sizes.coll / (size as u64 * parts.max(1) as u64)).max(1)
    }

    /// Allreduce. `red` is any reduction; sums of the collectives' types take the fast path.
    pub fn allreduce(
        &self,
        s: CUstream,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        red: Reduction,
    ) -> Result<()> {
        let stream = self.stream(s);
        let size = dtype.size() as u64;
        if let (Some(coll), Some(ct), mscclpp_nccl_device::ReduceOp::Sum) = (&self.coll, dtype.collectives(), red.op) {
            // The fast path, in pieces of at most one staging buffer.
            let per = (self.sizes.stage / size).max(1);
            let mut off = 0;
            while off < count {
                let k = per.min(count - off);
                let (src, dst) = (send + off * size, recv + off * size);
                let input = self.stage_if_unaligned(&stream, src, k * size, &self.stage_in)?;
                let output = if dst % 16 == 0 { dst } else { self.stage_out.addr() };
                // SAFETY: `input` and `output` hold k elements (the caller's buffers, or staging
                // of at least `stage` bytes) on this GPU.
                unsafe {
                    coll.allreduce_raw(input, output, k as usize, ct, mscclpp_collectives::ReduceOp::Sum, &stream)?
                };
                if output != dst {
                    self.copy(&stream, &[CopyItem { dst, src: output, bytes: k * size }])?;
                }
                off += k;
            }
            return Ok(());
        }
        let per = self.per_round(dtype.size(), 1);
        let mut off = 0;
        while off < count {
            let k = per.min(count - off);
            self.copy(&stream, &[CopyItem { dst: self.region(self.rank), src: send + off * size, bytes: k * size }])?;
            self.barrier(&stream)?;
            self.reduce(&stream, dtype, red, recv + off * size, (self.scratch_table.addr(), self.n), 0, 0, k)?;
            self.barrier(&stream)?;
            off += k;
        }
        Ok(())
    }

    /// Reduce to `root`.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_to(
        &self,
        s: CUstream,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        red: Reduction,
        root: usize,
    ) -> Result<()> {
        let stream = self.stream(s);
        let size = dtype.size() as u64;
        let per = self.per_round(dtype.size(), 1);
        let mut off = 0;
        while off < count {
            let k = per.min(count - off);
            self.copy(&stream, &[CopyItem { dst: self.region(self.rank), src: send + off * size, bytes: k * size }])?;
            self.barrier(&stream)?;
            if self.rank == root {
                self.reduce(&stream, dtype, red, recv + off * size, (self.scratch_table.addr(), self.n), 0, 0, k)?;
            }
            self.barrier(&stream)?;
            off += k;
        }
        Ok(())
    }

    /// Reduce-scatter: rank r gets the reduction of every rank's chunk r (`count` elements).
    pub fn reduce_scatter(
        &self,
        s: CUstream,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        red: Reduction,
    ) -> Result<()> {
        let stream = self.stream(s);
        let size = dtype.size() as u64;
        let n = self.n as u64;
        if let (Some(_), Some(ct), mscclpp_nccl_device::ReduceOp::Sum) = (&self.coll, dtype.collectives(), red.op) {
            let total = count * size * n;
            if total <= self.sizes.stage {
                let input = self.stage_if_unaligned(&stream, send, total, &self.stage_in)?;
                let output = if recv % 16 == 0 { recv } else { self.stage_out.addr() };
                self.coll_reduce_scatter(&stream, input, output, count, ct)?;
                if output != recv {
                    self.copy(&stream, &[CopyItem { dst: recv, src: output, bytes: count * size }])?;
                }
            } else {
                // In pieces: piece [off, off + k) of every rank's chunk, gathered into staging.
                let per = (self.sizes.stage / (size * n)).max(1);
                let mut off = 0;
                while off < count {
                    let k = per.min(count - off);
                    let items: Vec<CopyItem> = (0..n)
                        .map(|d| CopyItem {
                            dst: self.stage_in.addr() + d * k * size,
                            src: send + (d * count + off) * size,
                            bytes: k * size,
                        })
                        .collect();
                    self.copy(&stream, &items)?;
                    let dst = recv + off * size;
                    let output = if dst % 16 == 0 { dst } else { self.stage_out.addr() };
                    self.coll_reduce_scatter(&stream, self.stage_in.addr(), output, k, ct)?;
                    if output != dst {
                        self.copy(&stream, &[CopyItem { dst, src: output, bytes: k * size }])?;
                    }
                    off += k;
                }
            }
            return Ok(());
        }
        let per = self.per_round(dtype.size(), self.n);
        let mut off = 0;
        while off < count {
            let k = per.min(count - off);
            let items: Vec<CopyItem> = (0..n)
                .map(|d| CopyItem {
                    dst: self.region(self.rank) + d * k * size,
                    src: send + (d * count + off) * size,
                    bytes: k * size,
                })
                .collect();
            self.copy(&stream, &items)?;
            self.barrier(&stream)?;
            let offset = self.rank as u64 * k * size;
            self.reduce(&stream, dtype, red, recv + off * size, (self.scratch_table.addr(), self.n), offset, 0, k)?;
            self.barrier(&stream)?;
            off += k;
        }
        Ok(())
    }

    fn coll_reduce_scatter(
        &self,
        stream: &CudaStream,
        input: u64,
        output: u64,
        count: u64,
        ct: mscclpp_collectives::DataType,
    ) -> Result<()> {
        let coll = self.coll.as_ref().ok_or_else(|| Error::internal("no collectives in a world of one"))?;
        // SAFETY: `input` holds n * count elements and `output` count elements on this GPU.
        unsafe {
            coll.reduce_scatter_raw(input, output, count as usize, ct, mscclpp_collectives::ReduceOp::Sum, stream)
        }
        .map_err(Error::from)
    }

    /// Allgather: rank q's `count` elements land at element `q * count` of every `recv`.
    pub fn allgather(&self, s: CUstream, send: u64, recv: u64, count: u64, dtype: DataType) -> Result<()> {
        let stream = self.stream(s);
        let bytes = count * dtype.size() as u64;
        let n = self.n as u64;
        // Bytes move as they are, whatever the type: the fast path takes whole 16-byte words
        // up to one staging buffer in all; larger ones take the general path's rounds.
        let fits = bytes > 0 && bytes % 16 == 0 && bytes * n <= self.sizes.stage;
        let Some(coll) = self.coll.as_ref().filter(|_| fits) else {
            return self.allgather_rounds(&stream, send, recv, bytes);
        };
        let input = self.stage_if_unaligned(&stream, send, bytes, &self.stage_in)?;
        let output = if recv % 16 == 0 { recv } else { self.stage_out.addr() };
        // SAFETY: `input` holds `bytes`, `output` n * bytes (the caller's buffers or staging of
        // `stage` bytes), both on this GPU and 16-byte aligned.
        unsafe { coll.allgather_raw(input, output, bytes, &stream)? };
        if output != recv {
            self.copy(&stream, &[CopyItem { dst: recv, src: output, bytes: bytes * n }])?;
        }
        Ok(())
    }

    fn allgather_rounds(&self, stream: &CudaStream, send: u64, recv: u64, bytes: u64) -> Result<()> {
        let per = self.sizes.coll;
        let mut off = 0;
        while off < bytes {
            let b = per.min(bytes - off);
            self.copy(stream, &[CopyItem { dst: self.region(self.rank), src: send + off, bytes: b }])?;
            self.barrier(stream)?;
            let items: Vec<CopyItem> = (0..self.n)
                .map(|q| CopyItem { dst: recv + q as u64 * bytes + off, src: self.region(q), bytes: b })
                .collect();
            self.copy(stream, &items)?;
            self.barrier(stream)?;
            off += b;
        }
        Ok(())
    }

    /// Broadcast of `root`'s `send` into every rank's `recv`.
    pub fn broadcast(&self, s: CUstream, send: u64, recv: u64, bytes: u64, root: usize) -> Result<()> {
        let stream = self.stream(s);
        let mut off = 0;
        while off < bytes {
            let b = self.sizes.coll.min(bytes - off);
            if self.rank == root {
                self.copy(&stream, &[CopyItem { dst: self.region(root), src: send + off, bytes: b }])?;
            }
            self.barrier(&stream)?;
            let src = if self.rank == root { send + off } else { self.region(root) };
            self.copy(&stream, &[CopyItem { dst: recv + off, src, bytes: b }])?;
            self.barrier(&stream)?;
            off += b;
        }
        Ok(())
    }

    /// All-to-all: `count` elements from every rank to every rank (rank q's piece for rank d at
    /// element `d * count` of its `send`, landing at element `q * count` of d's `recv`).
    pub fn alltoall(&self, s: CUstream, send: u64, recv: u64, bytes: u64) -> Result<()> {
        let stream = self.stream(s);
        let n = self.n as u64;
        let per = (self.sizes.coll / n).max(1);
        let mut off = 0;
        while off < bytes {
            let b = per.min(bytes - off);
            let out: Vec<CopyItem> = (0..n)
                .map(|d| CopyItem { dst: self.region(self.rank) + d * b, src: send + d * bytes + off, bytes: b })
                .collect();
            self.copy(&stream, &out)?;
            self.barrier(&stream)?;
            let me = self.rank as u64;
            let inn: Vec<CopyItem> = (0..self.n)
                .map(|q| CopyItem { dst: recv + q as u64 * bytes + off, src: self.region(q) + me * b, bytes: b })
                .collect();
            self.copy(&stream, &inn)?;
            self.barrier(&stream)?;
            off += b;
        }
        Ok(())
    }

    /// Gather to `root`: rank q's `bytes` at byte `q * bytes` of root's `recv`.
    pub fn gather(&self, s: CUstream, send: u64, recv: u64, bytes: u64, root: usize) -> Result<()> {
        let stream = self.stream(s);
        let mut off = 0;
        while off < bytes {
            let b = self.sizes.coll.min(bytes - off);
            self.copy(&stream, &[CopyItem { dst: self.region(self.rank), src: send + off, bytes: b }])?;
            self.barrier(&stream)?;
            if self.rank == root {
                let items: Vec<CopyItem> = (0..self.n)
                    .map(|q| CopyItem { dst: recv + q as u64 * bytes + off, src: self.region(q), bytes: b })
                    .collect();
                self.copy(&stream, &items)?;
            }
            self.barrier(&stream)?;
            off += b;
        }
        Ok(())
    }

    /// Scatter from `root`: root's piece `q` (at byte `q * bytes` of its `send`) to rank q.
    pub fn scatter(&self, s: CUstream, send: u64, recv: u64, bytes: u64, root: usize) -> Result<()> {
        let stream = self.stream(s);
        let n = self.n as u64;
        let per = (self.sizes.coll / n).max(1);
        let mut off = 0;
        while off < bytes {
            let b = per.min(bytes - off);
            if self.rank == root {
                let items: Vec<CopyItem> = (0..n)
                    .map(|d| CopyItem { dst: self.region(root) + d * b, src: send + d * bytes + off, bytes: b })
                    .collect();
                self.copy(&stream, &items)?;
            }
            self.barrier(&stream)?;
            let src = self.region(root) + self.rank as u64 * b;
            self.copy(&stream, &[CopyItem { dst: recv + off, src, bytes: b }])?;
            self.barrier(&stream)?;
            off += b;
        }
        Ok(())
    }

    /// Runs one group's sends and receives of this communicator (see the module docs).
    pub fn p2p(&self, s: CUstream, sends: &[P2p], recvs: &[P2p]) -> Result<()> {
        let stream = self.stream(s);
        // To and from this rank: matched in order, copied directly.
        let own_sends: Vec<&P2p> = sends.iter().filter(|p| p.peer == self.rank).collect();
        let own_recvs: Vec<&P2p> = recvs.iter().filter(|p| p.peer == self.rank).collect();
        if own_sends.len() != own_recvs.len() {
            return Err(Error::invalid_usage(format!(
                "rank {} sends {} message(s) to itself and receives {} in one group",
                self.rank,
                own_sends.len(),
                own_recvs.len()
            )));
        }
        let mut local = Vec::new();
        for (snd, rcv) in own_sends.iter().zip(&own_recvs) {
            if snd.bytes != rcv.bytes {
                return Err(Error::invalid_usage(format!(
                    "rank {} sends {} bytes to itself but receives {}",
                    self.rank, snd.bytes, rcv.bytes
                )));
            }
            local.push(CopyItem { dst: rcv.addr, src: snd.addr, bytes: snd.bytes });
        }
        self.copy(&stream, &local)?;
        let chunk = self.sizes.p2p;
        let outbox = |owner: usize, toward: usize| self.region(owner) + self.sizes.coll + toward as u64 * chunk;

        let send_chunks = chunks(sends, self.rank, self.n, chunk);
        let recv_chunks = chunks(recvs, self.rank, self.n, chunk);
        let rounds = send_chunks.iter().chain(&recv_chunks).map(Vec::len).max().unwrap_or(0);
        for r in 0..rounds {
            let mut out = Vec::new();
            let mut to = Vec::new();
            for (p, list) in send_chunks.iter().enumerate() {
                if let Some(&(addr, bytes)) = list.get(r) {
                    out.push(CopyItem { dst: outbox(self.rank, p), src: addr, bytes });
                    to.push(p);
                }
            }
            let mut inn = Vec::new();
            let mut from = Vec::new();
            for (p, list) in recv_chunks.iter().enumerate() {
                if let Some(&(addr, bytes)) = list.get(r) {
                    inn.push(CopyItem { dst: addr, src: outbox(p, self.rank), bytes });
                    from.push(p);
                }
            }
            self.copy(&stream, &out)?;
            self.sync(&stream, Sems::Data, Some((&to, &from)))?;
            self.copy(&stream, &inn)?;
            self.sync(&stream, Sems::Ack, Some((&from, &to)))?;
        }
        Ok(())
    }

    /// Copies `bytes` at `src` into `stage` when `src` is not 16-byte aligned; returns the
    /// address to read.
    fn stage_if_unaligned(&self, stream: &CudaStream, src: u64, bytes: u64, stage: &DeviceBuffer) -> Result<u64> {
        if src % 16 == 0 {
            return Ok(src);
        }
        self.copy(stream, &[CopyItem { dst: stage.addr(), src, bytes }])?;
        Ok(stage.addr())
    }
}

/// Every peer's stream of messages (other than this rank's own), cut into chunks of at most
/// `chunk` bytes, message by message: `out[p][j]` is chunk j toward or from rank p.
pub fn chunks(ops: &[P2p], me: usize, n: usize, chunk: u64) -> Vec<Vec<(u64, u64)>> {
    let mut out = vec![Vec::new(); n];
    for op in ops.iter().filter(|o| o.peer != me && o.peer < n) {
        let mut off = 0;
        while off < op.bytes {
            let b = chunk.min(op.bytes - off);
            out[op.peer].push((op.addr + off, b));
            off += b;
        }
    }
    out
}

fn to_usize(v: u64) -> Result<usize> {
    usize::try_from(v)
        .map_err(|_| Error::invalid_argument(format!("{v} bytes do not fit this machine's address space")))
}

/// The spin budget of every wait (`MSCCLPP_RS_NCCL_TIMEOUT_MS`, default 30 s: ranks that share
/// a GPU through time slicing wait milliseconds per step).
fn budget_from_env() -> SpinBudget {
    let ms = std::env::var("MSCCLPP_RS_NCCL_TIMEOUT_MS").ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(30_000);
    SpinBudget::from_millis(ms.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_per_peer_in_order() {
        let ops = [
            P2p { peer: 1, addr: 1000, bytes: 10 },
            P2p { peer: 2, addr: 5000, bytes: 0 },
            P2p { peer: 1, addr: 2000, bytes: 3 },
            P2p { peer: 0, addr: 9000, bytes: 7 }, // this rank: copied directly
        ];
        let c = chunks(&ops, 0, 3, 4);
        assert!(c[0].is_empty() && c[2].is_empty(), "zero bytes make no chunk");
        assert_eq!(c[1], vec![(1000, 4), (1004, 4), (1008, 2), (2000, 3)]);
    }
}
