//! Runs [`mscclpp_plan`] execution plans on GPUs: one generic kernel interprets a rank's plan
//! from device memory ([`mscclpp_executor_device`]).
//!
//! ```text
//!  Program (builder, JSON or MSCCL++ plan) ──check()──► encode(rank) ──► ExecOp records
//!  Executor::new(comm, program, config): every rank allocates its arena (input | output |
//!      scratch), builds the memory, port and switch channels the plan names through the
//!      Communicator, uploads its records
//!  executor.launch(stream): one kernel, one block per thread block of the plan (graph-capturable)
//! ```
//!
//! Data lives in the arena: write the input at [`Executor::input`], read the output at
//! [`Executor::output`] (or copy on the stream, before and after the launch). For an in-place
//! plan ([`mscclpp_plan::Program::in_place`]) the input lies inside the output, where
//! [`mscclpp_plan::Program::input_in_output`] puts it, and the run overwrites it.
//!
//! Switch channels are the emulated kind ([`Communicator::switch_channels`]: every rank's arena
//! mapped on every GPU, the reduction loading every copy and the broadcast storing into every
//! copy); NVLink multicast is never used. A plan's switch channel must span every rank, and a
//! plan with switch channels must lay out every rank's arena alike.
//!
//! Packet plans need every rank's launch `k + 1` to depend on every other rank's launch `k`
//! (true of allreduce): the packet scratch is double-buffered, so a rank may run at most one
//! launch ahead of a peer that reads its packets.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_device::channel::emulated_switch::EmulatedSwitchChannel;
use mscclpp_device::poll::SpinBudget;
use mscclpp_executor_device::{ExecPlan, dtype};
use mscclpp_host::comm::{Communicator, EmulatedSwitchChannels, MemoryChannels, PortChannels};
use mscclpp_host::{Args, BootstrapExt, DeviceBuffer, Error, Gpu, LaunchConfig, Result};
use mscclpp_plan::{BufferType, Program};

pub mod encode;

pub use encode::{Encoded, Layout, encode};

/// The PTX of the executor kernel (built from `kernels/` by this crate's build script).
pub const PTX: &str = include_str!(env!("MSCCLPP_EXECUTOR_PTX"));

/// Element type of the plan's reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// `f32`.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
    /// `i32` (wrapping).
    I32,
    /// `u32` (wrapping).
    U32,
}

impl ElementType {
    fn code(self) -> u32 {
        match self {
            ElementType::F32 => dtype::F32,
            ElementType::Bf16 => dtype::BF16,
            ElementType::F16 => dtype::F16,
            ElementType::I32 => dtype::I32,
            ElementType::U32 => dtype::U32,
        }
    }
}

/// How an [`Executor`] runs. Every rank must use the same values.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Bytes of one chunk of the plan (a positive multiple of 16).
    pub chunk_bytes: usize,
    /// Element type of reductions.
    pub element: ElementType,
    /// Threads per block (a multiple of 32): at most this many, fewer where the kernel's
    /// registers allow fewer, or where the plan's blocks (with those of the other ranks of this
    /// process on the same GPU) only fit on the GPU at once with smaller blocks.
    pub threads: u32,
    /// How long any wait of the kernel may last before it traps with a message.
    pub budget: SpinBudget,
}

impl Config {
    /// Chunks of `chunk_bytes` reduced as `element`, 512 threads per block, a 20 s budget.
    pub fn new(chunk_bytes: usize, element: ElementType) -> Self {
        Self { chunk_bytes, element, threads: 512, budget: SpinBudget::from_millis(20_000) }
    }
}

/// One rank's plan on its GPU: the arena, the channels, the encoded operations and the kernel.
pub struct Executor {
    gpu: Arc<Gpu>,
    function: CudaFunction,
    plan: ExecPlan,
    encoded: Encoded,
    config: Config,
    // Drop order: the channels (their proxies and mappings) before the tables and the arena.
    _ports: Vec<PortChannels>,
    _memory: Vec<MemoryChannels>,
    _switch: Vec<EmulatedSwitchChannels>,
    _tables: Vec<DeviceBuffer>,
    epochs: DeviceBuffer,
    arena: DeviceBuffer,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("plan", &self.plan).field("config", &self.config).finish_non_exhaustive()
    }
}

/// Values of one layout in an agreement: input, input bytes, output, output bytes, scratch,
/// packet shift, total bytes.
const LAYOUT_WORDS: usize = 7;

/// Words before the layouts in an agreement: chunk bytes, element, memory channel sets, port
/// channel sets, switch channels.
const HEADER_WORDS: usize = 5;

/// The code of a switch channel's bound buffer in an agreement.
fn buffer_code(b: BufferType) -> u64 {
    match b {
        BufferType::Input => 0,
        BufferType::Output => 1,
        BufferType::Scratch => 2,
    }
}

/// What every rank must agree on ([`Executor::new`] all-gathers it): chunk bytes, element type,
/// memory and port channel sets, the number of switch channels, then every rank's arena layout
/// as this rank's program describes it, then the buffer each switch channel is bound to. Each
/// rank sends the whole table, so that a difference anywhere is seen by every rank (all of them
/// refuse; none goes on to build channels the others never build).
fn agreement(config: &Config, encoded: &Encoded) -> Vec<u64> {
    let mut v = vec![
        config.chunk_bytes as u64,
        config.element.code() as u64,
        encoded.memory_sets as u64,
        encoded.port_sets as u64,
        encoded.switch.len() as u64,
    ];
    for l in &encoded.layouts {
        v.extend([l.input, l.input_bytes, l.output, l.output_bytes, l.scratch, l.pkt_shift, l.bytes]);
    }
    v.extend(encoded.switch.iter().map(|&b| buffer_code(b)));
    v
}

/// Checks the gathered agreements (`all[r]` from rank `r`) against this rank's own (`mine`).
fn check_agreement(mine: &[u64], all: &[Vec<u64>]) -> Result<()> {
    let h = HEADER_WORDS;
    let switches = mine.get(h - 1).map_or(0, |&s| s as usize);
    for (r, theirs) in all.iter().enumerate() {
        if theirs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r} refused the plan or the configuration (its own error says why)"
            )));
        }
        if theirs[..theirs.len().min(h)] != mine[..h] {
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r} uses chunk bytes, element, memory and port channel sets and switch channels \
                 {:?}, this rank {:?}",
                &theirs[..theirs.len().min(h)],
                &mine[..h]
            )));
        }
        // Equal headers: the same number of switch channels, so another length is another rank
        // count.
        if theirs.len() != mine.len() {
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r}'s plan has {} ranks, this rank's {}: the ranks run different plans",
                theirs.len().saturating_sub(h + switches) / LAYOUT_WORDS,
                (mine.len() - h - switches) / LAYOUT_WORDS
            )));
        }
        let end = mine.len() - switches;
        let layouts = |v: &[u64]| v[h..end].chunks(LAYOUT_WORDS).map(<[u64]>::to_vec).collect::<Vec<_>>();
        let (a, b) = (layouts(theirs), layouts(mine));
        if let Some(q) = (0..a.len()).find(|&q| a[q] != b[q]) {
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r}'s plan lays out rank {q}'s arena as {:?} (input, input bytes, output, output \
                 bytes, scratch, packet shift, total), this rank's plan as {:?}: the ranks run different plans",
                a[q], b[q]
            )));
        }
        if let Some(k) = (0..switches).find(|&k| theirs[end + k] != mine[end + k]) {
            let name = |code: u64| ["input", "output", "scratch"].get(code as usize).copied().unwrap_or("unknown");
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r}'s plan binds switch channel {k} to the {} buffer, this rank's plan to the {}: \
                 the ranks run different plans",
                name(theirs[end + k]),
                name(mine[end + k])
            )));
        }
    }
    Ok(())
}

/// Checks that the buffer a memory channel maps for `peer` (`dst_bytes`) holds the peer's arena.
fn check_peer_arena(peer: usize, dst_bytes: u64, layouts: &[Layout]) -> Result<()> {
    let need = layouts.get(peer).map_or(u64::MAX, |l| l.bytes);
    if dst_bytes < need {
        return Err(Error::InvalidArgument(format!(
            "executor: the memory channel toward rank {peer} maps {dst_bytes} bytes, its arena needs {need}"
        )));
    }
    Ok(())
}

impl Executor {
    /// Checks `program` ([`mscclpp_plan::check()`]), encodes this rank's part, allocates the
    /// arena and builds the channels the plan names. Every rank calls it at the same point with
    /// the same program and configuration. A plan that fails the checker, or uses an operation
    /// the executor does not support, is an error here: nothing runs.
    pub fn new(comm: &Communicator, program: &Program, mut config: Config) -> Result<Self> {
        // What this rank can check alone. Its verdict goes through the all-gather below either
        // way, so that a plan refused on one rank is refused on all (a rank that went on alone
        // would wait in the channels' exchange for ranks that never come).
        let local = Self::check_local(comm, program, &config);
        // Every rank must agree on the chunk size, the element type, the channel sets and every
        // rank's arena layout: this rank writes into its peers' arenas at offsets computed from
        // its own copy of the program.
        let mine = local.as_ref().map_or_else(|_| Vec::new(), |e| agreement(&config, e));
        let all = comm.bootstrap().all_gather_pod_slice(&mine)?;
        let encoded = local?;
        check_agreement(&mine, &all)?;
        let gpu = comm.gpu().clone();
        let layout = encoded.layout();
        let arena = DeviceBuffer::exportable_filled(&gpu, layout.bytes as usize, 0)?;
        // Collective calls: every rank builds the same number of sets, in the same order. The plan
        // kernel's packets travel in the arenas' packet scratch (through each channel's `dst`),
        // never in a channel's own packet buffer: the channels get none (packet_bytes 0).
        let memory: Vec<MemoryChannels> =
            (0..encoded.memory_sets).map(|_| comm.memory_channels(&arena, 0)).collect::<Result<_>>()?;
        let ports: Vec<PortChannels> =
            (0..encoded.port_sets).map(|_| comm.port_channels(&arena, &arena)).collect::<Result<_>>()?;
        // Every switch channel of the plan over every rank's whole arena (laid out alike on every
        // rank, which the encoder and the agreement made sure of). Switch operations use no
        // barrier of the channel (the plan synchronises over memory channels), so one handle
        // serves every block.
        let switch: Vec<EmulatedSwitchChannels> =
            (0..encoded.switch.len()).map(|_| comm.switch_channels(&arena, 1)).collect::<Result<_>>()?;
        let switch_table: Vec<EmulatedSwitchChannel> = switch
            .iter()
            .map(|s| {
                s.handles()
                    .first()
                    .copied()
                    .ok_or_else(|| Error::InvalidArgument("executor: a switch channel without a handle".into()))
            })
            .collect::<Result<_>>()?;
        fn pick<T>(what: &str, got: Option<T>, peer: usize) -> Result<T> {
            got.ok_or_else(|| Error::InvalidArgument(format!("executor: no {what} channel toward rank {peer}")))
        }
        let memory_table = encoded
            .memory
            .iter()
            .map(|&(set, peer)| pick("memory", memory[set].get(peer), peer))
            .collect::<Result<Vec<_>>>()?;
        // Memory channels write into the peer's arena with no bound on the device: the mapped
        // buffer must hold the peer's whole layout.
        for (&(_, peer), ch) in encoded.memory.iter().zip(&memory_table) {
            check_peer_arena(peer, ch.dst_bytes, &encoded.layouts)?;
        }
        let port_table = encoded
            .port
            .iter()
            .map(|&(set, peer)| pick("port", ports[set].get(peer), peer))
            .collect::<Result<Vec<_>>>()?;
        // Tables are never empty (a null table is never read: no operation names it).
        let table = |bytes: &[u8]| DeviceBuffer::from_slice(&gpu, if bytes.is_empty() { &[0u8; 8][..] } else { bytes });
        let ops = table(bytemuck::cast_slice(&encoded.ops))?;
        let tb_start = DeviceBuffer::from_slice(&gpu, &encoded.tb_start)?;
        let mem = table(bytemuck::cast_slice(&memory_table))?;
        let port = table(bytemuck::cast_slice(&port_table))?;
        let sw = table(bytemuck::cast_slice(&switch_table))?;
        let blocks = encoded.blocks().max(1);
        let epochs = DeviceBuffer::from_slice(&gpu, &vec![1u32; blocks])?;
        // Barrier and semaphore counters (never empty: a null table is never read).
        let sync = DeviceBuffer::from_slice(&gpu, if encoded.sync.is_empty() { &[0u64][..] } else { &encoded.sync })?;
        let plan = ExecPlan {
            ops: ops.ptr(),
            tb_start: tb_start.ptr(),
            memory: mem.ptr(),
            port: port.ptr(),
            switch: sw.ptr(),
            arena: arena.ptr(),
            epochs: epochs.ptr(),
            sync: sync.ptr(),
            pkt_shift: layout.pkt_shift,
            n_blocks: encoded.blocks() as u32,
            dtype: config.element.code(),
            arena_bytes: layout.bytes,
        };
        let function = gpu.function(PTX, "exec_plan")?;
        // At most the configured threads: fewer where the kernel's registers allow fewer (the same
        // kernel on every rank, so every rank takes the same number).
        let max = mscclpp_host::launch::max_threads_per_block(&function)?;
        config.threads = config.threads.min(max) / 32 * 32;
        // Every block of every rank waits for others: all must be resident at once, with the
        // blocks of the ranks of this process that share this GPU (their kernels run at the same
        // time). A grid beyond that would wait for blocks that never start: refuse it here.
        // Where the plan's blocks do not fit at the configured threads, fewer threads per block
        // let more blocks share an SM (the kernel's registers are what limits it): the most
        // threads, in warps, at which they fit. Every rank computes the same.
        let sharing = comm.ranks_sharing_gpu()? as u32;
        let resident_at = |threads: u32| -> Result<u32> {
            Ok(mscclpp_host::launch::max_resident_blocks(&gpu, &function, threads, 0)? / sharing.max(1))
        };
        let mut resident = resident_at(config.threads)?;
        while encoded.blocks() as u32 > resident && config.threads > 32 {
            config.threads -= 32;
            resident = resident_at(config.threads)?;
        }
        let fits = encoded.blocks() as u32 <= resident;
        // The verdict is shared, so that no rank launches toward a rank that refused.
        let verdicts = comm.bootstrap().all_gather_pod(&u32::from(fits))?;
        if !fits {
            return Err(Error::InvalidArgument(format!(
                "executor: {} blocks of {} threads do not fit: GPU {} holds {resident} of them at once for this rank \
                 ({sharing} rank(s) of this process share it), and every block must be resident",
                encoded.blocks(),
                config.threads,
                gpu.ordinal()
            )));
        }
        if let Some(r) = verdicts.iter().position(|&v| v == 0) {
            return Err(Error::InvalidArgument(format!(
                "executor: rank {r}'s grid does not fit its GPU (its own error says why)"
            )));
        }
        // Nobody launches before every rank has its arena and channels in place.
        comm.bootstrap().barrier()?;
        Ok(Self {
            gpu,
            function,
            plan,
            encoded,
            config,
            _ports: ports,
            _memory: memory,
            _switch: switch,
            _tables: vec![ops, tb_start, mem, port, sw, sync],
            epochs,
            arena,
        })
    }

    /// The checks of [`Executor::new`] that need no other rank, and this rank's encoded plan.
    fn check_local(comm: &Communicator, program: &Program, config: &Config) -> Result<Encoded> {
        let n = comm.world_size();
        if program.ranks.len() != n {
            return Err(Error::InvalidArgument(format!(
                "executor: the plan {:?} has {} ranks, the communicator {n}",
                program.name,
                program.ranks.len()
            )));
        }
        if let Err(errors) = mscclpp_plan::check(program) {
            let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            return Err(Error::InvalidArgument(format!(
                "executor: the plan {:?} fails the checker: {}",
                program.name,
                list.join("; ")
            )));
        }
        if config.threads == 0 || !config.threads.is_multiple_of(32) || config.threads > 1024 {
            return Err(Error::InvalidArgument(format!(
                "executor: {} threads per block (a multiple of 32 up to 1024)",
                config.threads
            )));
        }
        encode(program, comm.rank(), config.chunk_bytes as u64)
    }

    /// The arena: this rank's input, output and scratch (see [`Executor::layout`]).
    pub fn arena(&self) -> &DeviceBuffer {
        &self.arena
    }

    /// Where this rank's buffers lie in the arena.
    pub fn layout(&self) -> Layout {
        self.encoded.layout()
    }

    /// The encoded plan of this rank.
    pub fn encoded(&self) -> &Encoded {
        &self.encoded
    }

    /// (offset in the arena, bytes) of this rank's input buffer.
    pub fn input(&self) -> (usize, usize) {
        let l = self.layout();
        (l.input as usize, l.input_bytes as usize)
    }

    /// (offset in the arena, bytes) of this rank's output buffer.
    pub fn output(&self) -> (usize, usize) {
        let l = self.layout();
        (l.output as usize, l.output_bytes as usize)
    }

    /// Block 0's launch counter (1 + the launches completed so far); reads device memory.
    pub fn epoch(&self) -> Result<u32> {
        let mut e = [0u32];
        self.epochs.read(0, &mut e)?;
        Ok(e[0])
    }

    /// Enqueues one run of the plan on `stream` (of this rank's GPU) without waiting; no host
    /// synchronisation, so it may be captured in a CUDA graph. Every rank launches the same
    /// number of times.
    pub fn launch(&self, stream: &CudaStream) -> Result<()> {
        if self.encoded.blocks() == 0 {
            return Ok(());
        }
        if stream.context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(Error::InvalidArgument(format!(
                "executor: the stream belongs to another GPU than this rank's GPU {}",
                self.gpu.ordinal()
            )));
        }
        let mut args = Args::new().arg(self.plan).arg(self.config.budget);
        let cfg = LaunchConfig::new(self.encoded.blocks() as u32, self.config.threads);
        // SAFETY: the kernel takes (ExecPlan, SpinBudget) as passed; the plan was encoded from a
        // checked program whose offsets lie inside every rank's arena; its tables, channels and
        // arena live as long as `self`; every rank built the same program's channels.
        unsafe { mscclpp_host::launch::launch_on(&self.gpu, stream, &self.function, cfg, &mut args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mscclpp_plan::{Channel, examples};

    #[test]
    fn ranks_with_other_plans_or_settings_are_refused() {
        let config = Config::new(4096, ElementType::F32);
        let p = examples::allgather_memory(4).unwrap();
        let tables: Vec<Vec<u64>> = (0..4).map(|r| agreement(&config, &encode(&p, r, 4096).unwrap())).collect();
        assert!(tables.iter().all(|t| check_agreement(t, &tables).is_ok()));
        // Rank 2 runs the plan with a bigger output buffer of its own: rank 0 would compute
        // offsets into rank 2's arena from a layout rank 2 does not have. Every rank must see
        // it, rank 2 included (a rank that went on alone would wait in the channels' exchange).
        let mut q = p.clone();
        q.ranks[2].output_chunks += 3;
        let mut other = tables.clone();
        other[2] = agreement(&config, &encode(&q, 2, 4096).unwrap());
        for (r, mine) in other.iter().enumerate() {
            let err = check_agreement(mine, &other).unwrap_err().to_string();
            assert!(err.contains("lays out rank 2's arena") && err.contains("different plans"), "rank {r}: {err}");
        }
        // Another chunk size, element type, channel set count or switch channel count.
        for (i, v) in [(0, 8192), (1, 3), (2, 9), (3, 1), (4, 2)] {
            let mut other = tables.clone();
            other[1][i] = v;
            let err = check_agreement(&tables[0], &other).unwrap_err().to_string();
            assert!(err.contains("rank 1 uses chunk bytes"), "{err}");
        }
        // A plan of another rank count.
        let mut other = tables.clone();
        other[3] = agreement(&config, &encode(&examples::allgather_memory(2).unwrap(), 0, 4096).unwrap());
        assert!(check_agreement(&tables[0], &other).unwrap_err().to_string().contains("has 2 ranks"));
        other[3].truncate(2);
        assert!(check_agreement(&tables[0], &other).is_err(), "a short table");
        // A rank whose own checks failed sends an empty table: the others refuse too.
        other[3].clear();
        assert!(check_agreement(&tables[0], &other).unwrap_err().to_string().contains("rank 3 refused"));
    }

    #[test]
    fn ranks_binding_a_switch_channel_to_another_buffer_are_refused() {
        let config = Config::new(4096, ElementType::Bf16);
        let p = examples::allreduce_switch(3).unwrap();
        let tables: Vec<Vec<u64>> = (0..3).map(|r| agreement(&config, &encode(&p, r, 4096).unwrap())).collect();
        assert!(tables.iter().all(|t| check_agreement(t, &tables).is_ok()));
        assert_eq!(tables[0][HEADER_WORDS - 1], 2, "two switch channels");
        assert_eq!(tables[0][tables[0].len() - 2..], [0, 1], "bound to the input, then the output");
        // Rank 1's program binds the first switch channel to the output: its reduction would
        // read the other ranks' outputs at the offsets where they read inputs.
        let mut q = p.clone();
        let Channel::Switch { buffer, .. } = &mut q.channels[0] else { panic!("channel 0 is a switch channel") };
        *buffer = BufferType::Output;
        let mut other = tables.clone();
        other[1] = agreement(&config, &encode(&q, 1, 4096).unwrap());
        for (r, mine) in other.iter().enumerate() {
            let err = check_agreement(mine, &other).unwrap_err().to_string();
            assert!(
                err.contains("binds switch channel 0 to the") && err.contains("different plans"),
                "rank {r}: {err}"
            );
        }
        // A rank whose plan declares one more switch channel (unused, but built collectively).
        let mut q = p.clone();
        q.channels.push(Channel::Switch { ranks: vec![0, 1, 2], buffer: BufferType::Output });
        let mut other = tables.clone();
        other[2] = agreement(&config, &encode(&q, 2, 4096).unwrap());
        let err = check_agreement(&tables[0], &other).unwrap_err().to_string();
        assert!(err.contains("rank 2 uses chunk bytes") && err.contains("switch channels"), "{err}");
    }

    #[test]
    fn memory_channels_must_map_the_whole_peer_arena() {
        let e = encode(&examples::allgather_memory(2).unwrap(), 0, 4096).unwrap();
        let need = e.layouts[1].bytes;
        assert!(check_peer_arena(1, need, &e.layouts).is_ok());
        assert!(check_peer_arena(1, 2 << 20, &e.layouts).is_ok());
        let err = check_peer_arena(1, need - 1, &e.layouts).unwrap_err().to_string();
        assert!(err.contains(&format!("maps {} bytes, its arena needs {need}", need - 1)), "{err}");
        assert!(check_peer_arena(7, u64::MAX - 1, &e.layouts).is_err(), "no such rank");
    }
}
