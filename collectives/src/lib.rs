//! Allreduce, allgather and reduce-scatter among the GPUs of one machine, built on the
//! mscclpp-rs primitives.
//!
//! ```text
//!  Communicator (bootstrap + GPU)  ──►  Collectives::new: every rank allocates a scratch buffer,
//!                                       exchanges it (CUDA IPC) and loads the kernels
//!  collectives.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, stream)
//!        └─ picks an algorithm by size, launches one kernel on `stream` (graph-capturable)
//!  collectives.handle()  ──►  a `Collective` for your own kernels: call
//!        `handle.allreduce::<f32>(algorithm, input, output, bytes, budget)` inside them
//! ```
//!
//! The algorithms and the device-side state are described in
//! [`mscclpp_collectives_device`]. Which one runs for which size is [`Collectives::plan`]:
//!
//! | operation | up to | algorithm |
//! | --- | --- | --- |
//! | allreduce | [`Thresholds::allreduce_one_shot`] | one-shot LL packets |
//! | allreduce | [`Thresholds::allreduce_two_shot`] (more than 2 ranks) | two-shot LL packets |
//! | allreduce | [`Thresholds::allreduce_direct`] (2 ranks) | direct: the whole buffer streamed to the peer, summed locally |
//! | allreduce | larger | pipelined reduce-scatter + allgather over every SM |
//! | allgather, reduce-scatter | [`Thresholds::gather_one_shot`] (bytes per rank) | one-shot LL |
//! | allgather, reduce-scatter | larger | pipelined, acknowledged slots |
//!
//! Every call is collective: all ranks make the same calls, in the same order, with the same
//! counts and types (as with NCCL). Buffers are plain device memory of this rank's GPU; they need
//! not be shared with the other ranks, because data moves through the exchanged scratch buffers.
//! Operations on one stream run in order; operations need no host synchronisation between them.
//!
//! The side-by-side benchmark (`coll-bench`) loads NCCL at run time through `mscclpp_harness::nccl`.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_collectives_device::{Algorithm, Collective};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_host::comm::{Communicator, PeerBuffers};
use mscclpp_host::{Args, BootstrapExt, DeviceBuffer, Error, Gpu, LaunchConfig, Result};

pub mod reference;
pub mod window;

pub use window::{WindowAllreduce, WindowPlan};

pub use mscclpp_collectives_device::Algorithm as CollectiveAlgorithm;

/// The PTX of the collective kernels (built from `kernels/` by this crate's build script).
pub const PTX: &str = include_str!(env!("MSCCLPP_COLLECTIVES_PTX"));

/// The element type and reduction of a collective call (defined by `mscclpp-host`, which every
/// crate built on the library shares).
pub use mscclpp_host::{DataType, ReduceOp};

/// An error unless the collectives implement element type `dtype`.
fn check_dtype(dtype: DataType) -> Result<()> {
    if DataType::SUPPORTED.contains(&dtype) {
        Ok(())
    } else {
        Err(Error::Unsupported(format!(
            "collectives: element type {} (supported: f32, f16, bf16, i32, u32)",
            dtype.name()
        )))
    }
}

/// An error unless the collectives implement reduction `op`.
fn check_op(op: ReduceOp) -> Result<()> {
    match op {
        ReduceOp::Sum => Ok(()),
        other => Err(Error::Unsupported(format!("collectives: reduction {other:?} (only Sum is implemented)"))),
    }
}

/// The three operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Every rank gets the sum of every rank's buffer.
    AllReduce,
    /// Every rank gets every rank's chunk, in rank order.
    AllGather,
    /// Rank r gets the sum of every rank's chunk r.
    ReduceScatter,
}

impl Operation {
    /// `"allreduce"`, `"allgather"`, `"reduce_scatter"` (as in the kernel names).
    pub const fn name(self) -> &'static str {
        match self {
            Operation::AllReduce => "allreduce",
            Operation::AllGather => "allgather",
            Operation::ReduceScatter => "reduce_scatter",
        }
    }
}

/// Size limits (bytes) between the algorithms; see the crate documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Largest allreduce (bytes per rank) sent one-shot as LL packets.
    pub allreduce_one_shot: u64,
    /// Largest allreduce sent two-shot as LL packets (more than two ranks; with two, both
    /// forms send the same bytes and one-shot has one hop less).
    pub allreduce_two_shot: u64,
    /// Largest allreduce streamed whole to the peer (two ranks only).
    pub allreduce_direct: u64,
    /// Largest allgather / reduce-scatter chunk (bytes per rank) sent as LL packets.
    pub gather_one_shot: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            allreduce_one_shot: 1 << 20,
            allreduce_two_shot: 2 << 20,
            allreduce_direct: 4 << 20,
            gather_one_shot: 1 << 20,
        }
    }
}

/// How a [`Collectives`] is built. Every rank must use the same values.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Most blocks one operation uses (default: this rank's share of its GPU's SMs, one block
    /// per SM: all of them, unless ranks that are threads of one process share the GPU,
    /// [`Communicator::sm_share`]; more than that share is then an error).
    pub max_blocks: Option<u32>,
    /// Bytes of one LL slot (default 2 MiB: one-shot messages up to 1 MiB).
    pub ll_slot_bytes: u64,
    /// Bytes of one pipelined slot (default 128 KiB up to 4 ranks, 32 KiB above).
    pub chunk_bytes: Option<u64>,
    /// How long any wait inside a kernel may last before the kernel traps with a message.
    pub budget: SpinBudget,
    /// The size limits between the algorithms.
    pub thresholds: Thresholds,
    /// Run this algorithm whenever it can carry the operation (benchmarks, tests).
    pub force: Option<Algorithm>,
    /// Threads per block (default: 512, or fewer when a kernel's registers allow fewer).
    pub threads: Option<u32>,
    /// Blocks of every operation (default: chosen by size).
    pub blocks: Option<u32>,
    /// The pipelined forms give each block about this many bytes toward each peer (default
    /// 16 KiB), up to `max_blocks` blocks.
    pub block_bytes: u64,
    /// Launch with programmatic stream serialization, so a kernel's launch overlaps the end of
    /// the kernel before it (default on; `MSCCLPP_RS_COLL_PDL=0` turns it off; off where ranks
    /// that are threads of one process share the GPU, as their kernels must all be resident).
    pub overlap: bool,
    /// The pipelined forms cut each block's part into at least this many rounds (default 1:
    /// every round costs a flag's round trip, measured slower than bigger pieces).
    pub min_rounds: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_blocks: None,
            ll_slot_bytes: 2 << 20,
            chunk_bytes: None,
            budget: SpinBudget::from_millis(20_000),
            thresholds: Thresholds::default(),
            force: None,
            threads: None,
            blocks: None,
            block_bytes: 16 << 10,
            overlap: true,
            min_rounds: 1,
        }
    }
}

impl Config {
    /// The default configuration with the tuning knobs read from the environment:
    /// `MSCCLPP_RS_COLL_ALGO` (`oneshot`, `twoshot`, `pipelined`, `direct`), `MSCCLPP_RS_COLL_THREADS`,
    /// `MSCCLPP_RS_COLL_BLOCKS`, `MSCCLPP_RS_COLL_CHUNK` (bytes), `MSCCLPP_RS_COLL_BLOCK_BYTES`,
    /// `MSCCLPP_RS_COLL_ROUNDS`, `MSCCLPP_RS_COLL_PDL`.
    pub fn from_env() -> Result<Self> {
        let mut c = Self::default();
        let num = |name: &str| -> Result<Option<u64>> {
            match std::env::var(name) {
                Ok(v) => v
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| Error::InvalidArgument(format!("{name}={v:?} is not a number"))),
                Err(_) => Ok(None),
            }
        };
        if let Ok(a) = std::env::var("MSCCLPP_RS_COLL_ALGO") {
            c.force = Some(parse_algorithm(&a)?);
        }
        let num32 = |name: &str| -> Result<Option<u32>> { num(name)?.map(|v| to_u32(name, v)).transpose() };
        c.threads = num32("MSCCLPP_RS_COLL_THREADS")?;
        c.blocks = num32("MSCCLPP_RS_COLL_BLOCKS")?;
        c.chunk_bytes = num("MSCCLPP_RS_COLL_CHUNK")?;
        if let Some(v) = num("MSCCLPP_RS_COLL_BLOCK_BYTES")? {
            c.block_bytes = v.max(1);
        }
        if let Some(v) = num("MSCCLPP_RS_COLL_PDL")? {
            c.overlap = v != 0;
        }
        if let Some(v) = num32("MSCCLPP_RS_COLL_ROUNDS")? {
            c.min_rounds = v;
        }
        Ok(c)
    }

    /// Checks the settings that need no GPU and returns the pipelined slot size: `chunk_bytes`
    /// and `ll_slot_bytes` positive multiples of 16, `block_bytes` positive, `max_blocks` and
    /// `blocks` at most [`MAX_BLOCKS`].
    pub fn check(&self, n_ranks: usize) -> Result<u64> {
        let chunk = self.chunk_bytes.unwrap_or(if n_ranks <= 4 { 128 << 10 } else { 32 << 10 });
        let bad = |m: String| Err(Error::InvalidArgument(format!("collectives: {m}")));
        if chunk == 0 || !chunk.is_multiple_of(16) {
            return bad(format!("chunk_bytes {chunk} is not a positive multiple of 16"));
        }
        if self.ll_slot_bytes == 0 || !self.ll_slot_bytes.is_multiple_of(16) {
            return bad(format!("ll_slot_bytes {} is not a positive multiple of 16", self.ll_slot_bytes));
        }
        if self.block_bytes == 0 {
            return bad("block_bytes is 0 (the pipelined forms give each block block_bytes of traffic)".into());
        }
        for (what, v) in [("max_blocks", self.max_blocks), ("blocks", self.blocks)] {
            if v.is_some_and(|b| b > MAX_BLOCKS) {
                return bad(format!("{what} {} (at most {MAX_BLOCKS})", v.unwrap_or(0)));
            }
        }
        Ok(chunk)
    }

    /// The settings every rank must share (they decide the scratch layout and every
    /// operation's algorithm and grid), for the all-gather of [`Collectives::with_config`].
    /// Threads per block may differ: they change only how a block shares its work.
    fn shared(&self, chunk: u64) -> [u64; 10] {
        let t = &self.thresholds;
        let force = self.force.map_or(u64::MAX, |a| a as u64);
        [
            chunk,
            self.ll_slot_bytes,
            self.min_rounds as u64,
            t.allreduce_one_shot,
            t.allreduce_two_shot,
            t.allreduce_direct,
            t.gather_one_shot,
            force,
            self.blocks.map_or(u64::MAX, u64::from),
            self.block_bytes,
        ]
    }
}

/// Most blocks one operation may use ([`Config::max_blocks`], [`Config::blocks`]): far more than
/// any GPU's SM count; every block has its flags, slots and counter in the scratch and state.
pub const MAX_BLOCKS: u32 = 1 << 16;

/// `v` as a u32 setting read from variable `name`.
fn to_u32(name: &str, v: u64) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{name}={v} is larger than {}", u32::MAX)))
}

/// The scratch bytes of `h`'s layout, computed without wrapping: a layout that does not fit the
/// address space is an error, never a small buffer that the kernels would write past.
pub fn checked_scratch_bytes(h: &Collective) -> Result<u64> {
    let (n, b) = (h.n_ranks as u128, h.max_blocks as u128);
    let flags = b * n * 2 * 8;
    let ll = (2 * flags).div_ceil(256) * 256;
    let total = ll + 4 * n * h.ll_bytes as u128 + b * n * 6 * h.chunk_bytes as u128;
    match u64::try_from(total) {
        Ok(t) if usize::try_from(t).is_ok() => {
            // Every term fits, so the device's u64 arithmetic agrees.
            debug_assert_eq!(h.scratch_bytes(), t);
            Ok(t)
        }
        _ => Err(Error::InvalidArgument(format!(
            "collectives: a scratch buffer of {total} bytes ({} ranks, {} blocks, LL slots of {}, pipelined slots of \
             {}) does not fit the address space",
            h.n_ranks, h.max_blocks, h.ll_bytes, h.chunk_bytes
        ))),
    }
}

/// Checks that a pipelined or direct operation of `bytes` per rank over `blocks` blocks takes
/// fewer rounds per block than its flags can count (`2^24 - 1`, [`mscclpp_collectives_device::ROUND_BITS`]);
/// beyond that a round's flag would run into the epoch's bits. LL algorithms have no rounds.
pub fn check_rounds(h: &Collective, algorithm: Algorithm, bytes: u64, blocks: u32) -> Result<()> {
    if matches!(algorithm, Algorithm::OneShotLl | Algorithm::TwoShotLl) {
        return Ok(());
    }
    // The largest part of any block, in bytes (whole 16-byte vectors, the split's rounding up).
    // (Capped far above any buffer, so that `piece_bytes` cannot overflow either.)
    let part = bytes.div_ceil(16).div_ceil(blocks.max(1) as u64).saturating_mul(16).min(1 << 62);
    let rounds = part.div_ceil(h.piece_bytes(part).max(1));
    let limit = (1u64 << mscclpp_collectives_device::ROUND_BITS) - 1;
    if rounds >= limit {
        return Err(Error::InvalidArgument(format!(
            "collectives: {bytes} bytes over {blocks} blocks takes {rounds} pipelined rounds per block (fewer than \
             {limit} are possible): use more blocks or larger chunk_bytes ({} now)",
            h.chunk_bytes
        )));
    }
    Ok(())
}

/// Parses an algorithm's [name](Algorithm::name): `oneshot`, `twoshot`, `pipelined` or `direct`.
pub fn parse_algorithm(s: &str) -> Result<Algorithm> {
    Algorithm::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        Error::InvalidArgument(format!("unknown collective algorithm {s:?} ({})", names.join(", ")))
    })
}

/// What one operation will launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
}

/// The collectives of one rank: scratch memory shared with the other ranks, the device state,
/// and the loaded kernels. Built collectively by every rank ([`Collectives::new`]).
pub struct Collectives {
    gpu: Arc<Gpu>,
    handle: Collective,
    config: Config,
    functions: HashMap<String, (CudaFunction, u32)>,
    // Drop order: the mappings of the peers' scratch close before this rank's memory is freed.
    _peers: PeerBuffers,
    _table: DeviceBuffer,
    state: DeviceBuffer,
    _scratch: DeviceBuffer,
}

impl std::fmt::Debug for Collectives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectives")
            .field("handle", &self.handle)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Collectives {
    /// Builds the collectives with [`Config::from_env`]. Every rank calls it at the same point.
    pub fn new(comm: &Communicator) -> Result<Self> {
        Self::with_config(comm, Config::from_env()?)
    }

    /// Builds the collectives with `config` (the same on every rank). Every rank calls it at the
    /// same point. All ranks must run on one machine (their GPUs joined by NVLink or PCIe peer
    /// access).
    pub fn with_config(comm: &Communicator, config: Config) -> Result<Self> {
        let gpu = comm.gpu().clone();
        let boot = comm.bootstrap();
        let n = comm.world_size();
        if boot.info().local_size != n {
            return Err(Error::Unsupported(format!(
                "collectives: all {n} ranks must be on one machine ({} are on this one)",
                boot.info().local_size
            )));
        }
        // The verdict of this rank's own checks travels with its settings (block count 0: refused),
        // so that a configuration one rank refuses is refused on all: none waits for the others.
        // Ranks that are threads of this process on this GPU run their kernels at once, and every
        // block waits for the peers' blocks: each rank gets its share of the SMs.
        let (share, sharing) = (comm.sm_share()?, comm.ranks_sharing_gpu()?);
        // Operations enqueued back to back deadlocked with early launches there.
        let config = Config { overlap: config.overlap && comm.may_overlap_launches()?, ..config };
        let local = config.check(n).and_then(|chunk| match config.max_blocks {
            Some(b) if sharing > 1 && b > share => Err(Error::InvalidArgument(format!(
                "collectives: max_blocks {b} does not fit: {sharing} ranks of this process share GPU {}, so each \
                 has {share} of its {} SMs (every rank's blocks must be resident at once)",
                gpu.ordinal(),
                gpu.info().sm_count
            ))),
            _ => Ok(chunk),
        });
        let own_blocks = config.max_blocks.unwrap_or(share).clamp(1, MAX_BLOCKS);
        // Every rank must agree on the layout and on what picks each operation's algorithm and
        // grid (a rank with other thresholds or blocks would stream other parts through the
        // same slots): take the smallest block count, check the rest.
        let mut mine = [0u64; 11];
        if let Ok(chunk) = local {
            mine[0] = own_blocks as u64;
            mine[1..].copy_from_slice(&config.shared(chunk));
        }
        let all = boot.all_gather_pod(&mine)?;
        let chunk = local?;
        if let Some(r) = all.iter().position(|v| v[0] == 0) {
            return Err(Error::InvalidArgument(format!(
                "collectives: rank {r} refused its configuration (its own error says why)"
            )));
        }
        let max_blocks = all.iter().map(|v| v[0]).min().unwrap_or(1) as u32;
        if let Some(r) = all.iter().position(|v| v[1..] != mine[1..]) {
            return Err(Error::InvalidArgument(format!(
                "collectives: rank {r} uses the settings {:?} (chunk, LL slot, rounds, thresholds, forced algorithm, \
                 blocks, block bytes), this rank {:?}",
                &all[r][1..],
                &mine[1..]
            )));
        }
        let mut handle = Collective {
            scratch: GlobalPtr::null(),
            peers: GlobalPtr::null(),
            state: GlobalPtr::null(),
            ll_bytes: config.ll_slot_bytes,
            chunk_bytes: chunk,
            rank: comm.rank() as u32,
            n_ranks: n as u32,
            max_blocks,
            min_rounds: config.min_rounds,
        };
        let total = checked_scratch_bytes(&handle)?;
        let scratch = DeviceBuffer::exportable_filled(&gpu, total as usize, 0)?;
        let peers = comm.exchange(&scratch)?;
        if let Some(r) = (0..n).find(|&r| peers.len(r) != total) {
            return Err(Error::InvalidArgument(format!(
                "collectives: rank {r} has {} bytes of scratch, this rank {total}",
                peers.len(r)
            )));
        }
        let table = DeviceBuffer::from_slice(&gpu, peers.addrs())?;
        // Every block's epoch starts at 1 (0 would make the first LL flag the empty marker).
        let state = DeviceBuffer::from_slice(&gpu, &vec![1u64; (handle.state_bytes() / 8) as usize])?;
        handle.scratch = scratch.ptr();
        handle.peers = table.ptr();
        handle.state = state.ptr();
        let mut functions = HashMap::new();
        for op in [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter] {
            for algo in Algorithm::ALL {
                for dt in DataType::SUPPORTED {
                    if let Some(name) = kernel_name(op, algo, dt) {
                        if functions.contains_key(&name) {
                            continue;
                        }
                        let f = gpu.function(PTX, &name)?;
                        let max = mscclpp_host::launch::max_threads_per_block(&f)?;
                        functions.insert(name, (f, max));
                    }
                }
            }
        }
        // Nobody launches before every rank has its scratch mapped and zeroed.
        boot.barrier()?;
        Ok(Self { gpu, handle, config, functions, _peers: peers, _table: table, state, _scratch: scratch })
    }

    /// The device handle, for kernels that call the collectives themselves (see
    /// [`Collective::allreduce`](mscclpp_collectives_device::Collective)). Valid while `self` lives.
    pub fn handle(&self) -> Collective {
        self.handle
    }

    /// The GPU of this rank.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// This rank's operation counter on the GPU (1 + the operations completed so far); reads
    /// device memory, ordered after the GPU's own stream.
    pub fn epoch(&self) -> Result<u64> {
        let mut e = [0u64];
        self.state.read(0, &mut e)?; // block 0's counter; all are equal between operations
        Ok(e[0])
    }

    /// The algorithm and grid an operation of `bytes` (per rank: the allreduce buffer, the
    /// allgather input, the reduce-scatter output) would use.
    pub fn plan(&self, op: Operation, bytes: u64) -> Plan {
        let h = &self.handle;
        let n = h.n_ranks as u64;
        let t = &self.config.thresholds;
        let one = h.ll_one_shot_capacity();
        let two = h.ll_two_shot_capacity();
        let fits = |a: Algorithm| match (op, a) {
            (_, Algorithm::Pipelined) => true,
            (_, Algorithm::OneShotLl) => bytes <= one,
            (Operation::AllReduce, Algorithm::TwoShotLl) => bytes <= two,
            (Operation::AllReduce, Algorithm::Direct) => true,
            _ => false,
        };
        let algorithm = match self.config.force {
            Some(a) if fits(a) => a,
            _ => match op {
                Operation::AllReduce if bytes <= t.allreduce_one_shot.min(one) => Algorithm::OneShotLl,
                Operation::AllReduce if n > 2 && bytes <= t.allreduce_two_shot.min(two) => Algorithm::TwoShotLl,
                // Two ranks: streaming the whole buffer costs the same traffic as two-shot, in one
                // hop; measured faster up to a few MiB, where two-shot's pipeline takes over.
                Operation::AllReduce if n <= 2 && bytes <= t.allreduce_direct => Algorithm::Direct,
                Operation::AllGather | Operation::ReduceScatter if bytes <= t.gather_one_shot.min(one) => {
                    Algorithm::OneShotLl
                }
                _ => Algorithm::Pipelined,
            },
        };
        let limit = self.kernel_limit(op, algorithm);
        // LL forms: small messages gain from more, smaller blocks (more SMs issue packets at
        // once), large ones from bigger blocks; measured on H200 (see NOTES.md).
        let default_threads = match algorithm {
            Algorithm::OneShotLl | Algorithm::TwoShotLl if bytes <= 64 << 10 => 256,
            Algorithm::OneShotLl | Algorithm::TwoShotLl => 1024,
            _ => 512,
        };
        let threads = self.config.threads.unwrap_or(default_threads).min(limit).max(32) / 32 * 32;
        let max_blocks = h.max_blocks as u64;
        let blocks = self.config.blocks.map(|b| b as u64).unwrap_or_else(|| match algorithm {
            // One LL packet (8 bytes) per thread; a shard for the two-shot form.
            Algorithm::OneShotLl => bytes.div_ceil(8).div_ceil(threads as u64),
            Algorithm::TwoShotLl => bytes.div_ceil(8).div_ceil(n).div_ceil(threads as u64),
            // A block per `block_bytes` of traffic toward each peer.
            Algorithm::Pipelined => {
                let per_peer = if op == Operation::AllReduce { bytes / n } else { bytes };
                per_peer.div_ceil(self.config.block_bytes.max(1))
            }
            Algorithm::Direct => bytes.div_ceil(self.config.block_bytes.max(1)),
        });
        Plan { algorithm, blocks: blocks.clamp(1, max_blocks) as u32, threads }
    }

    /// The most threads per block the slowest kernel of this (operation, algorithm) allows.
    fn kernel_limit(&self, op: Operation, algo: Algorithm) -> u32 {
        DataType::SUPPORTED
            .iter()
            .filter_map(|&dt| kernel_name(op, algo, dt).and_then(|n| self.functions.get(&n)).map(|f| f.1))
            .min()
            .unwrap_or(32)
    }

    fn enqueue(
        &self,
        op: Operation,
        dtype: DataType,
        (input, output): (u64, u64),
        bytes: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if stream.context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(Error::InvalidArgument(format!(
                "collectives: the stream belongs to another GPU than this rank's GPU {}",
                self.gpu.ordinal()
            )));
        }
        let plan = self.plan(op, bytes);
        check_rounds(&self.handle, plan.algorithm, bytes, plan.blocks)?;
        let name = kernel_name(op, plan.algorithm, dtype).unwrap_or_default();
        let (f, _) =
            self.functions.get(&name).ok_or_else(|| Error::Unsupported(format!("collectives: no kernel {name}")))?;
        let mut args = Args::new()
            .arg(self.handle)
            .arg(GlobalPtr::<u8>::from_addr(input))
            .arg(GlobalPtr::<u8>::from_addr(output))
            .arg(bytes)
            .arg(self.config.budget);
        let cfg = LaunchConfig::new(plan.blocks, plan.threads);
        // SAFETY: the kernel takes (Collective, ptr, ptr, u64, SpinBudget) as passed; the buffers
        // were checked to hold the bytes the operation touches on this rank's GPU; the scratch,
        // peer table and state live as long as `self`; every rank launches the same plan (same
        // sizes and configuration, checked at construction). The kernels wait for the previous
        // grid (`Collective::begin`) before their first memory access, so they may overlap it.
        unsafe {
            if self.config.overlap {
                mscclpp_host::launch::launch_overlapped_on(&self.gpu, stream, f, cfg, &mut args)
            } else {
                mscclpp_host::launch::launch_on(&self.gpu, stream, f, cfg, &mut args)
            }
        }
    }

    fn check_gpu(&self, bufs: &[&DeviceBuffer]) -> Result<()> {
        match bufs.iter().find(|b| b.gpu().ordinal() != self.gpu.ordinal()) {
            Some(b) => Err(Error::InvalidArgument(format!(
                "collectives: a buffer is on GPU {}, this rank uses GPU {}",
                b.gpu().ordinal(),
                self.gpu.ordinal()
            ))),
            None => Ok(()),
        }
    }

    fn ranks(&self) -> usize {
        self.handle.n_ranks as usize
    }

    /// Allreduce of `count` elements: every rank's `recv` gets the sum over ranks of `send`.
    /// `send` and `recv` may be the same buffer (in place). Enqueued on `stream` (of this rank's
    /// GPU); returns without waiting.
    pub fn allreduce(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_gpu(&[send, recv])?;
        let lens = (send.len(), (send.addr() != recv.addr()).then_some(recv.len()));
        let bytes = check_request(Operation::AllReduce, count, dtype, Some(op), self.ranks(), lens)?;
        self.enqueue(Operation::AllReduce, dtype, (send.addr(), recv.addr()), bytes, stream)
    }

    /// Allgather of `count` elements per rank: `recv` (`n_ranks * count` elements) gets rank q's
    /// `send` at element `q * count`. `send` and `recv` must be different buffers (see
    /// [`Collectives::allgather_in_place`]).
    pub fn allgather(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_gpu(&[send, recv])?;
        if send.addr() == recv.addr() {
            return Err(Error::InvalidArgument(
                "collectives: allgather with send == recv; use allgather_in_place".into(),
            ));
        }
        let bytes =
            check_request(Operation::AllGather, count, dtype, None, self.ranks(), (send.len(), Some(recv.len())))?;
        self.enqueue(Operation::AllGather, dtype, (send.addr(), recv.addr()), bytes, stream)
    }

    /// In-place allgather: this rank's chunk is already at element `rank * count` of `buf`.
    pub fn allgather_in_place(
        &self,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_gpu(&[buf])?;
        let bytes = check_request(Operation::AllGather, count, dtype, None, self.ranks(), (buf.len(), None))?;
        let input = buf.addr() + self.handle.rank as u64 * bytes;
        self.enqueue(Operation::AllGather, dtype, (input, buf.addr()), bytes, stream)
    }

    /// Reduce-scatter of `count` elements per rank: `recv` (`count` elements) gets the sum over
    /// ranks of their `send` chunk `rank` (elements `rank * count ..`). `send` and `recv` must
    /// be different buffers (see [`Collectives::reduce_scatter_in_place`]).
    pub fn reduce_scatter(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_gpu(&[send, recv])?;
        if send.addr() == recv.addr() {
            return Err(Error::InvalidArgument(
                "collectives: reduce_scatter with send == recv; use reduce_scatter_in_place".into(),
            ));
        }
        let lens = (send.len(), Some(recv.len()));
        let bytes = check_request(Operation::ReduceScatter, count, dtype, Some(op), self.ranks(), lens)?;
        self.enqueue(Operation::ReduceScatter, dtype, (send.addr(), recv.addr()), bytes, stream)
    }

    /// In-place reduce-scatter: the result lands at element `rank * count` of `buf`.
    pub fn reduce_scatter_in_place(
        &self,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_gpu(&[buf])?;
        let bytes = check_request(Operation::ReduceScatter, count, dtype, Some(op), self.ranks(), (buf.len(), None))?;
        let output = buf.addr() + self.handle.rank as u64 * bytes;
        self.enqueue(Operation::ReduceScatter, dtype, (buf.addr(), output), bytes, stream)
    }
}

impl Collectives {
    /// [`Collectives::allreduce`] on raw device addresses (for callers that hold no
    /// [`DeviceBuffer`], such as a library with NCCL's interface). `send == recv` is in place.
    ///
    /// # Safety
    /// `send` and `recv` are 16-byte aligned addresses of this rank's GPU, each valid for
    /// `count` elements until `stream` has passed the operation.
    pub unsafe fn allreduce_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        check_aligned(&[send, recv])?;
        let bytes =
            check_request(Operation::AllReduce, count, dtype, Some(op), self.ranks(), (usize::MAX, Some(usize::MAX)))?;
        self.enqueue(Operation::AllReduce, dtype, (send, recv), bytes, stream)
    }

    /// [`Collectives::allgather`] of `bytes` per rank (a multiple of 16) on raw device
    /// addresses; `send == recv + rank * bytes` is in place.
    ///
    /// # Safety
    /// `send` (valid for `bytes`) and `recv` (valid for `bytes * n_ranks`) are 16-byte aligned
    /// addresses of this rank's GPU, valid until `stream` has passed the operation.
    pub unsafe fn allgather_raw(&self, send: u64, recv: u64, bytes: u64, stream: &CudaStream) -> Result<()> {
        check_aligned(&[send, recv, bytes])?;
        bytes.checked_mul(self.ranks() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("collectives: allgather of {bytes} bytes per rank overflows"))
        })?;
        self.enqueue(Operation::AllGather, DataType::U32, (send, recv), bytes, stream)
    }

    /// [`Collectives::reduce_scatter`] of `count` elements per rank on raw device addresses.
    ///
    /// # Safety
    /// `send` (valid for `count * n_ranks` elements) and `recv` (valid for `count` elements) are
    /// 16-byte aligned addresses of this rank's GPU, valid until `stream` has passed the operation.
    pub unsafe fn reduce_scatter_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        check_aligned(&[send, recv])?;
        let all = (usize::MAX, Some(usize::MAX));
        let bytes = check_request(Operation::ReduceScatter, count, dtype, Some(op), self.ranks(), all)?;
        self.enqueue(Operation::ReduceScatter, dtype, (send, recv), bytes, stream)
    }
}

/// An error unless every value is a multiple of 16 (the raw entry points' addresses and sizes).
fn check_aligned(values: &[u64]) -> Result<()> {
    match values.iter().find(|v| *v % 16 != 0) {
        Some(v) => Err(Error::InvalidArgument(format!("collectives: {v:#x} is not a multiple of 16"))),
        None => Ok(()),
    }
}

/// The checks of one operation that need no GPU: the element type and the reduction are
/// implemented, the sizes do not overflow, and the buffers hold what the operation touches.
/// `lens` is (send bytes, receive bytes), the receive length `None` when the operation is in
/// place (one buffer for both). Returns the operation's bytes per rank (the allreduce buffer, the
/// allgather input, the reduce-scatter output).
pub fn check_request(
    op: Operation,
    count: usize,
    dtype: DataType,
    reduce: Option<ReduceOp>,
    ranks: usize,
    (send_len, recv_len): (usize, Option<usize>),
) -> Result<u64> {
    check_dtype(dtype)?;
    if let Some(r) = reduce {
        check_op(r)?;
    }
    let overflow = || Error::InvalidArgument(format!("collectives: {count} elements of {} overflow", dtype.name()));
    let bytes = (count as u64).checked_mul(dtype.bytes() as u64).ok_or_else(overflow)?;
    let all = bytes.checked_mul(ranks as u64).ok_or_else(overflow)?;
    let (input, output) = match op {
        Operation::AllReduce => (bytes, bytes),
        Operation::AllGather => (bytes, all),
        Operation::ReduceScatter => (all, bytes),
    };
    let short = |what: &str, has: usize, needs: u64| {
        Err(Error::InvalidArgument(format!(
            "collectives: {} of {count} {} per rank: the {what} buffer holds {has} bytes, the operation needs {needs}",
            op.name(),
            dtype.name()
        )))
    };
    match recv_len {
        None if (send_len as u64) < input.max(output) => return short("in-place", send_len, input.max(output)),
        Some(_) if (send_len as u64) < input => return short("send", send_len, input),
        Some(r) if (r as u64) < output => return short("receive", r, output),
        _ => {}
    }
    Ok(bytes)
}

/// The kernel of (operation, algorithm, type), if there is one (allgather kernels are untyped;
/// two-shot exists for allreduce only).
pub fn kernel_name(op: Operation, algo: Algorithm, dtype: DataType) -> Option<String> {
    match (op, algo) {
        (Operation::AllGather | Operation::ReduceScatter, Algorithm::TwoShotLl | Algorithm::Direct) => None,
        (Operation::AllGather, a) => Some(format!("allgather_{}", a.name())),
        (o, a) => Some(format!("{}_{}_{}", o.name(), a.name(), dtype.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_name_parses() {
        for a in Algorithm::ALL {
            assert_eq!(parse_algorithm(a.name()).unwrap(), a);
        }
        let e = parse_algorithm("fast").unwrap_err().to_string();
        assert!(e.ends_with("(oneshot, twoshot, pipelined, direct)"), "{e}");
    }

    #[test]
    fn kernel_names_exist_in_the_ptx() {
        for op in [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter] {
            for a in Algorithm::ALL {
                for dt in DataType::SUPPORTED {
                    if let Some(name) = kernel_name(op, a, dt) {
                        assert!(PTX.contains(&format!(".entry {name}(")), "{name} missing from the PTX");
                    }
                }
            }
        }
        assert_eq!(kernel_name(Operation::AllGather, Algorithm::TwoShotLl, DataType::F32), None);
    }

    #[test]
    fn unsupported_requests_are_errors() {
        use Operation::*;
        let req = check_request;
        assert!(matches!(req(AllReduce, 4, DataType::F64, None, 2, (64, None)), Err(Error::Unsupported(_))));
        assert!(matches!(
            req(AllReduce, 4, DataType::F32, Some(ReduceOp::Max), 2, (64, None)),
            Err(Error::Unsupported(_))
        ));
        assert!(req(AllReduce, usize::MAX, DataType::F32, None, 1, (64, None)).is_err());
        assert!(req(AllGather, 1 << 40, DataType::F32, None, 1 << 30, (usize::MAX, Some(usize::MAX))).is_err());
        // Odd counts of 2-byte elements: 6 bytes per rank.
        assert_eq!(req(AllReduce, 3, DataType::F16, Some(ReduceOp::Sum), 2, (6, Some(6))).unwrap(), 6);
        // Allgather: the receive buffer holds every rank's chunk; in place, the one buffer does.
        assert_eq!(req(AllGather, 5, DataType::F32, None, 4, (20, Some(80))).unwrap(), 20);
        let e = req(AllGather, 5, DataType::F32, None, 4, (20, Some(79))).unwrap_err().to_string();
        assert!(e.contains("receive buffer holds 79 bytes, the operation needs 80"), "{e}");
        assert!(req(AllGather, 5, DataType::F32, None, 4, (79, None)).is_err());
        assert!(req(AllGather, 5, DataType::F32, None, 4, (80, None)).is_ok());
        // Reduce-scatter: the send buffer holds every rank's chunk.
        assert!(req(ReduceScatter, 5, DataType::Bf16, Some(ReduceOp::Sum), 3, (29, Some(10))).is_err());
        assert!(req(ReduceScatter, 5, DataType::Bf16, Some(ReduceOp::Sum), 3, (30, Some(10))).is_ok());
        assert!(req(ReduceScatter, 5, DataType::Bf16, Some(ReduceOp::Sum), 3, (30, Some(9))).is_err());
        assert!(req(AllReduce, 7, DataType::I32, Some(ReduceOp::Sum), 2, (27, Some(28))).is_err());
        // Zero elements: nothing to check, nothing launched.
        assert_eq!(req(AllReduce, 0, DataType::U32, Some(ReduceOp::Sum), 2, (0, None)).unwrap(), 0);
        assert!(parse_algorithm("fast").is_err());
        assert_eq!(parse_algorithm("twoshot").unwrap(), Algorithm::TwoShotLl);
    }

    fn handle(n: u32, max_blocks: u32, ll_bytes: u64, chunk_bytes: u64) -> Collective {
        Collective {
            scratch: GlobalPtr::null(),
            peers: GlobalPtr::null(),
            state: GlobalPtr::null(),
            ll_bytes,
            chunk_bytes,
            rank: 0,
            n_ranks: n,
            max_blocks,
            min_rounds: 1,
        }
    }

    #[test]
    fn configurations_that_would_divide_by_zero_or_overflow_are_errors() {
        let ok = Config::default();
        assert_eq!(ok.check(2).unwrap(), 128 << 10);
        assert_eq!(ok.check(8).unwrap(), 32 << 10);
        // `plan` divided by block_bytes: a Config literal with 0 panicked at the first pipelined call.
        let e = Config { block_bytes: 0, ..ok }.check(2).unwrap_err().to_string();
        assert!(e.contains("block_bytes is 0"), "{e}");
        assert!(Config { chunk_bytes: Some(24), ..ok }.check(2).is_err());
        assert!(Config { ll_slot_bytes: 0, ..ok }.check(2).is_err());
        assert!(Config { max_blocks: Some(MAX_BLOCKS + 1), ..ok }.check(2).is_err());
        assert!(Config { blocks: Some(u32::MAX), ..ok }.check(2).is_err());
        // Slots so large that the layout wraps: unchecked, the scratch would be a few bytes
        // and the LL capacity (computed from ll_bytes) would let the kernels write past it.
        let huge = 1u64 << 62;
        for h in [handle(2, 132, huge, 128 << 10), handle(8, 132, 16, huge), handle(8, MAX_BLOCKS, 16, 1 << 50)] {
            let e = checked_scratch_bytes(&h).unwrap_err().to_string();
            assert!(e.contains("does not fit the address space"), "{e}");
        }
        let h = handle(8, 132, 2 << 20, 32 << 10);
        assert_eq!(checked_scratch_bytes(&h).unwrap(), h.scratch_bytes());
        assert_eq!(to_u32("X", 5).unwrap(), 5);
        assert!(to_u32("MSCCLPP_RS_COLL_THREADS", 1 << 32).unwrap_err().to_string().contains("larger than"));
    }

    #[test]
    fn ranks_must_share_what_picks_the_algorithm_and_grid() {
        let ok = Config::default();
        let base = ok.shared(128 << 10);
        let differ = [
            Config { thresholds: Thresholds { allreduce_one_shot: 1, ..Thresholds::default() }, ..ok },
            Config { force: Some(Algorithm::Pipelined), ..ok },
            Config { blocks: Some(4), ..ok },
            Config { block_bytes: 32 << 10, ..ok },
            Config { min_rounds: 3, ..ok },
            Config { ll_slot_bytes: 1 << 20, ..ok },
        ];
        for c in differ {
            assert_ne!(c.shared(128 << 10), base, "{c:?}");
        }
        assert_eq!(Config { threads: Some(256), overlap: false, ..ok }.shared(128 << 10), base);
    }

    #[test]
    fn pipelined_operations_with_more_rounds_than_flags_count_are_errors() {
        // 16-byte slots: every round moves 16 bytes; 1 GiB in one block is 2^26 rounds.
        let h = handle(2, 1, 1 << 20, 16);
        let e = check_rounds(&h, Algorithm::Pipelined, 1 << 30, 1).unwrap_err().to_string();
        assert!(e.contains("pipelined rounds per block"), "{e}");
        assert!(check_rounds(&h, Algorithm::Direct, 1 << 30, 1).is_err());
        assert!(check_rounds(&h, Algorithm::OneShotLl, 1 << 30, 1).is_ok(), "LL forms have no rounds");
        assert!(check_rounds(&h, Algorithm::Pipelined, 1 << 20, 1).is_ok());
        // The default slots: 2^24 rounds of 128 KiB would be 2 TiB per block.
        let d = handle(2, 132, 2 << 20, 128 << 10);
        assert!(check_rounds(&d, Algorithm::Pipelined, 1 << 40, 132).is_ok());
        assert!(check_rounds(&d, Algorithm::Pipelined, 1 << 60, 1).is_err());
        assert!(check_rounds(&d, Algorithm::Pipelined, u64::MAX, 1).is_err());
    }

    /// Exists for a planted bug the other tests let through: `Config::check` no longer requiring
    /// `ll_slot_bytes` to be a multiple of 16 (only 0 was tested). Fresh random sizes that are not
    /// multiples of 16 are refused naming the setting; multiples of 16 pass.
    #[test]
    fn ll_slot_bytes_must_be_a_multiple_of_16() {
        use rand::RngExt;
        let mut rng = rand::rng();
        let ok = Config::default();
        for _ in 0..100 {
            let whole = 16 * rng.random_range(1..1u64 << 40);
            let bad = whole - rng.random_range(1..16);
            let e = Config { ll_slot_bytes: bad, ..ok }.check(2).unwrap_err().to_string();
            assert!(e.contains(&format!("ll_slot_bytes {bad} is not a positive multiple of 16")), "{e}");
            assert!(Config { ll_slot_bytes: whole, ..ok }.check(2).is_ok(), "ll_slot_bytes {whole} refused");
        }
    }

    /// Survivors of `./x mutants collectives-config`: the block limit off by one (`> MAX_BLOCKS`
    /// read as `>=`) and the round limit moved (`2^24 - 1` read as `2^24 + 1` or `2^24`). Exactly
    /// `MAX_BLOCKS` blocks are allowed and one more refused; a part of `2^24 - 2` rounds per block
    /// passes and one of `2^24 - 1` is refused, over a random number of blocks.
    #[test]
    fn block_and_round_limits_are_exact() {
        use rand::RngExt;
        let limits: [fn(u32) -> Config; 2] = [
            |b| Config { max_blocks: Some(b), ..Config::default() },
            |b| Config { blocks: Some(b), ..Config::default() },
        ];
        for limit in limits {
            assert!(limit(MAX_BLOCKS).check(2).is_ok(), "{:?}", limit(MAX_BLOCKS));
            assert!(limit(MAX_BLOCKS + 1).check(2).is_err(), "{:?}", limit(MAX_BLOCKS + 1));
        }
        // 16-byte slots: a round moves 16 bytes, so 16 * R bytes per block take R rounds.
        let h = handle(2, 8, 1 << 20, 16);
        let blocks = rand::rng().random_range(1..=8u32);
        let most = (1u64 << mscclpp_collectives_device::ROUND_BITS) - 2;
        check_rounds(&h, Algorithm::Pipelined, 16 * most * blocks as u64, blocks).unwrap();
        let e = check_rounds(&h, Algorithm::Pipelined, 16 * (most + 1) * blocks as u64, blocks).unwrap_err();
        assert!(e.to_string().contains(&format!("takes {} pipelined rounds per block", most + 1)), "{e}");
    }
}
