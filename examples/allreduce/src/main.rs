//! Allgather and allreduce (f32 sum) among N ranks, one process and one GPU per rank, three ways:
//! hand-written kernels over memory channels (LL packets for small messages, `put` + signal for
//! large ones); the `mscclpp-collectives` library called from the host; and the library's
//! device-callable allreduce inside a kernel of our own, fused with elementwise work. Every rank
//! checks every result against a host reference; the run fails on any mismatch.
//!
//! ```text
//! cargo run --release -p example-allreduce                      # 2 ranks, built-in launcher
//! target/release/example-allreduce --ranks 4                    # N ranks, built-in launcher
//! mpirun --allow-run-as-root -np 2 target/release/example-allreduce
//! ```
//!
//! Rank r uses GPU `local_rank % gpu_count` (ranks share GPUs when there are more ranks than
//! GPUs: slower, still correct). When any rank has no GPU, every rank says so and exits 0, or
//! non-zero with `MSCCLPP_RS_REQUIRE_GPU=1`. `MSCCLPP_RS_SEED` repeats a run's data.
//!
//! The kernels are in `kernels/` (built to PTX by `build.rs`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::packet::{LL16Packet, packet_bytes};
use mscclpp_device::sync::DeviceSyncer;
use mscclpp_host::bootstrap::BootstrapConfig;
use mscclpp_host::bootstrap::launcher::{self, Role};
use mscclpp_host::comm::{Communicator, MemoryChannels};
use mscclpp_host::{Args, Bootstrap, BootstrapExt, DeviceBuffer, Error, Gpu, LaunchConfig, Result, TcpBootstrap};

const PTX: &str = include_str!(env!("ALLREDUCE_KERNELS_PTX"));

/// Messages up to this size go as LL packets.
const SMALL_MAX: usize = 64 << 10;
/// The largest message of the run.
const LARGE: usize = 16 << 20;
/// The message sizes, each run as an allgather and an allreduce.
const SIZES: [usize; 3] = [8 << 10, SMALL_MAX, LARGE];
/// Ranks started when the program runs with no rank environment.
const DEFAULT_RANKS: usize = 2;

fn main() -> ExitCode {
    // `--ranks N`: launch N ranks; mpirun or launcher variables: be a rank; neither: launch 2.
    match launcher::role(DEFAULT_RANKS) {
        Ok(Role::Rank(cfg)) => run_rank(&cfg),
        Ok(Role::Launched { ranks, outcome: Ok(()) }) => {
            println!("allreduce example: all {ranks} ranks exited 0 (run with --ranks N or under mpirun -np N)");
            ExitCode::SUCCESS
        }
        Ok(Role::Threads { .. }) => {
            println!("allreduce example: RESULT FAILED: this example runs its ranks as processes (drop --threads)");
            ExitCode::FAILURE
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("allreduce example: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How a rank's run ended, short of an error.
enum Outcome {
    /// Every result matched the reference on every rank.
    Ok,
    /// Some result differed on this rank.
    Mismatch,
    /// Not run: the reason (the same on every rank).
    Skipped(String),
}

fn run_rank(cfg: &BootstrapConfig) -> ExitCode {
    let r = cfg.rank.rank;
    let outcome = TcpBootstrap::connect(cfg).and_then(|boot| {
        let boot: Arc<dyn Bootstrap> = Arc::new(boot);
        // On an error the bootstrap is dropped on the way out (after rank_main abandoned the
        // job, if its GPU work had begun): ranks waiting on this one fail at once, naming it.
        rank_main(cfg, &boot)
    });
    let require_gpu = std::env::var("MSCCLPP_RS_REQUIRE_GPU").is_ok_and(|v| v == "1");
    match outcome {
        Ok(Outcome::Ok) => {
            println!("rank {r}: RESULT ok");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Mismatch) => {
            println!("rank {r}: RESULT FAILED: results differ from the host reference");
            ExitCode::FAILURE
        }
        // The GPU runner sets this: there, a skip is a failure.
        Ok(Outcome::Skipped(why)) if require_gpu => {
            println!("rank {r}: RESULT FAILED: {why}, and MSCCLPP_RS_REQUIRE_GPU=1");
            ExitCode::FAILURE
        }
        Ok(Outcome::Skipped(why)) => {
            println!("rank {r}: allreduce example skipped: {why}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("rank {r}: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One rank's run: agree on the seed and on whether every rank has a GPU, set up the channels,
/// then every operation at every size.
fn rank_main(cfg: &BootstrapConfig, boot: &Arc<dyn Bootstrap>) -> Result<Outcome> {
    let (me, n) = (boot.rank(), boot.world_size());
    if n < 2 {
        return Err(Error::InvalidArgument(format!("the example needs at least 2 ranks, not {n}")));
    }
    // No GPU here is a reason to skip; a driver that fails is an error.
    let (gpu_count, no_gpu) = match mscclpp_host::gpu::devices() {
        Ok(d) => (d.len(), String::new()),
        Err(e) if e.is_no_gpu() => (0, e.to_string()),
        Err(e) => return Err(e),
    };
    let own_seed = match std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(s) => s,
        None => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos());
            t as u64 ^ u64::from(std::process::id()).rotate_left(32)
        }
    };
    let seed = boot.all_gather_pod(&own_seed)?[0];
    let counts = boot.all_gather_pod(&(gpu_count as u64))?;
    if let Some(q) = counts.iter().position(|&c| c == 0) {
        let reasons = boot.all_gather(no_gpu.as_bytes())?;
        return Ok(Outcome::Skipped(format!("rank {q} has no GPU ({})", String::from_utf8_lossy(&reasons[q]))));
    }
    let ordinal = cfg.rank.gpu_index(gpu_count).unwrap_or_default();
    let gpu = Gpu::open(ordinal)?;
    println!("rank {me}: GPU {ordinal} of {gpu_count} ({}), {n} ranks", gpu.info().name);
    if me == 0 {
        println!("rank 0: seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)");
    }

    let comm = Communicator::new(boot.clone(), gpu.clone());
    let ok = run_operations(&comm, seed).inspect_err(|_| {
        // The peers' kernels may be waiting for this rank's: make them give up at once, naming
        // this rank, instead of running out their budgets (run_operations abandons already when
        // an operation fails; a second abandon changes nothing).
        comm.abandon();
    })?;
    Ok(if ok { Outcome::Ok } else { Outcome::Mismatch })
}

/// Every operation at every size, then the library's collectives: whether every result matched.
fn run_operations(comm: &Communicator, seed: u64) -> Result<bool> {
    let (gpu, n) = (comm.gpu().clone(), comm.world_size());
    // Room for every rank's chunk of an allgather, or for the values and every rank's slot of
    // scratch of an allreduce.
    let buf = DeviceBuffer::alloc_exportable(&gpu, (n + 1) * LARGE)?;
    // Each channel's packet region holds two operations of up to SMALL_MAX bytes (flag parity).
    let chans = comm.memory_channels(&buf, 2 * packet_bytes::<LL16Packet>(SMALL_MAX as u64) as usize)?;
    let mut ex = Example::new(comm, &buf, &chans, seed)?;
    let ran = (|| {
        let mut ok = true;
        for bytes in SIZES {
            ok &= ex.allgather(bytes)?;
            ok &= ex.allreduce(bytes)?;
        }
        ok &= library_collectives(comm, seed)?;
        Ok(ok)
    })();
    if ran.is_err() {
        // Give up on the job before the channels and buffers go (their release may wait for
        // work that peers, still waiting for this rank, would never finish).
        comm.abandon();
    }
    // Every rank's kernels have finished (each waited for its GPU before the last report's
    // all-gather), so the channels and buffers may go, in that order.
    ran
}

/// Everything one rank's operations use.
struct Example<'a> {
    comm: &'a Communicator,
    gpu: Arc<Gpu>,
    buf: &'a DeviceBuffer,
    /// The channels toward every rank, on the device (this rank's own entry zeroed).
    table: DeviceBuffer,
    /// The grid barrier of the cooperative kernels.
    syncer: DeviceBuffer,
    seed: u64,
    /// The current operation's number (from 1): picks its data.
    op: u64,
    /// The flag of the last packet operation (every rank counts the same way).
    flag: u32,
}

impl<'a> Example<'a> {
    fn new(comm: &'a Communicator, buf: &'a DeviceBuffer, chans: &MemoryChannels, seed: u64) -> Result<Self> {
        let gpu = comm.gpu().clone();
        let table = DeviceBuffer::from_slice(&gpu, &chans.table())?;
        let syncer = DeviceBuffer::filled(&gpu, size_of::<DeviceSyncer>(), 0)?;
        // Load the kernels now, so that no rank's first operation waits for another's PTX load.
        gpu.module(PTX)?;
        Ok(Self { comm, gpu, buf, table, syncer, seed, op: 0, flag: 0 })
    }

    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn ranks(&self) -> usize {
        self.comm.world_size()
    }

    /// A new flag for the next packet operation (never 0).
    fn next_flag(&mut self) -> u32 {
        self.flag = self.flag.wrapping_add(1).max(1);
        self.flag
    }

    /// Rank `r`'s input to the current operation (every rank can compute every rank's).
    fn rng(&self, r: usize) -> Rng {
        Rng::new(self.seed ^ (r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.op.rotate_left(40))
    }

    /// Poisons this rank's buffer, writes its input at byte `offset`, and waits until every rank
    /// has done the same: after the barrier no peer is still reading this rank's buffer for the
    /// previous operation, and no peer's puts for this one arrive before the poison.
    fn prepare<T: bytemuck::Pod>(&self, offset: usize, input: &[T]) -> Result<()> {
        self.buf.fill(0xA5)?;
        self.buf.write(offset, input)?;
        self.comm.bootstrap().barrier()
    }

    /// Runs kernel `name` (cooperatively for the grid-barrier kernels) and waits for it; returns
    /// the time from launch to completion in microseconds.
    fn run(&self, name: &str, cooperative: bool, args: Args) -> Result<f64> {
        let g = &self.gpu;
        let t = Instant::now();
        // SAFETY: every call site passes the kernel's parameters in order with matching types
        // (see `kernels/src/lib.rs`); the buffers and channels live as long as `self`, and every
        // rank runs the same operation.
        unsafe {
            if cooperative {
                g.launch_cooperative(PTX, name, LaunchConfig::new(g.info().sm_count, 512), args)?
            } else {
                g.launch(PTX, name, LaunchConfig::new(16, 256), args)?
            }
        }
        g.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    }

    /// Every rank's time and mismatch count; rank 0 prints the slowest time and the verdict.
    /// Returns whether this rank's result matched.
    fn report(&self, what: &str, bytes: usize, how: &str, us: f64, bad: usize) -> Result<bool> {
        let all = self.comm.bootstrap().all_gather_pod(&[us.to_bits(), bad as u64])?;
        if self.rank() == 0 {
            let slowest = all.iter().map(|[t, _]| f64::from_bits(*t)).fold(0.0, f64::max);
            let bad_ranks: Vec<String> = (0..all.len())
                .filter(|&r| all[r][1] != 0)
                .map(|r| format!("rank {r}: {} elements", all[r][1]))
                .collect();
            let verdict =
                if bad_ranks.is_empty() { "ok".to_string() } else { format!("MISMATCH ({})", bad_ranks.join(", ")) };
            println!("{what:<10} {bytes:>9} B  {how:<12} {slowest:>9.1} us  {verdict}");
        }
        Ok(bad == 0)
    }

    /// Allgather of `bytes` per rank: rank r's chunk lands at byte `r * bytes` of every buffer.
    fn allgather(&mut self, bytes: usize) -> Result<bool> {
        self.op += 1;
        let (me, n) = (self.rank(), self.ranks());
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| self.rng(r).bytes(bytes)).collect();
        self.prepare(me * bytes, &inputs[me])?;
        let table = self.table.ptr::<MemoryChannel>();
        let args = Args::new().arg(table);
        let (us, how) = if bytes <= SMALL_MAX {
            let flag = self.next_flag();
            let args = args.arg(me as u32).arg(n as u32).arg(bytes as u64).arg(flag);
            (self.run("allgather_packets", false, args)?, "LL packets")
        } else {
            let args = args.arg(self.syncer.ptr::<DeviceSyncer>()).arg(me as u32).arg(n as u32).arg(bytes as u64);
            (self.run("allgather_put", true, args)?, "put + signal")
        };
        let mut got = vec![0u8; n * bytes];
        self.buf.read(0, &mut got)?;
        let bad = got.chunks(bytes).zip(&inputs).map(|(g, w)| g.iter().zip(w).filter(|(a, b)| a != b).count()).sum();
        self.report("allgather", bytes, how, us, bad)
    }

    /// Allreduce (f32 sum) of `bytes` per rank, in place at the start of every buffer.
    fn allreduce(&mut self, bytes: usize) -> Result<bool> {
        self.op += 1;
        let (me, n, count) = (self.rank(), self.ranks(), bytes / 4);
        let inputs: Vec<Vec<f32>> = (0..n).map(|r| self.rng(r).floats(count)).collect();
        self.prepare(0, &inputs[me])?;
        let table = self.table.ptr::<MemoryChannel>();
        let args = Args::new().arg(table);
        let (us, how) = if bytes <= SMALL_MAX {
            let flag = self.next_flag();
            let args = args.arg(me as u32).arg(n as u32).arg(count as u64).arg(flag);
            (self.run("allreduce_packets", false, args)?, "LL packets")
        } else {
            let args = args.arg(self.syncer.ptr::<DeviceSyncer>()).arg(me as u32).arg(n as u32).arg(count as u64);
            (self.run("allreduce_put", true, args)?, "put + signal")
        };
        // Summed in rank order, as the kernels do: the same bits on every rank and here.
        let want: Vec<f32> =
            (0..count).map(|i| inputs[1..].iter().fold(inputs[0][i], |acc, input| acc + input[i])).collect();
        let mut got = vec![0f32; count];
        self.buf.read(0, &mut got)?;
        let bad = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        self.report("allreduce", bytes, how, us, bad)
    }
}

/// Deterministic pseudo-random words (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Never 0 (xorshift's fixed point); a few rounds spread similar seeds apart.
        let mut r = Self(seed | 1);
        for _ in 0..4 {
            r.next();
        }
        r
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        for c in v.chunks_mut(8) {
            c.copy_from_slice(&self.next().to_le_bytes()[..c.len()]);
        }
        v
    }
    /// Values in [-1, 1) with 24 significant bits.
    fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
    }
}

/// The same operations through `mscclpp-collectives`: from the host (one call per operation,
/// the library picks the algorithm by size), and from inside `scale_allreduce_shift`, a kernel
/// of this example that computes `sum over ranks of (alpha * x) + beta` in one launch.
fn library_collectives(comm: &Communicator, seed: u64) -> Result<bool> {
    use mscclpp_collectives::reference::{count_wrong, random_input, sum_in_order};
    use mscclpp_collectives::{Collectives, DataType, Operation, ReduceOp};
    let (me, n) = (comm.rank(), comm.world_size());
    let gpu = comm.gpu();
    let coll = Collectives::new(comm)?;
    let syncer = DeviceBuffer::filled(gpu, size_of::<DeviceSyncer>(), 0)?;
    let (alpha, beta) = (0.5f32, 1.25f32);
    let mut ok = true;
    for count in [2048usize, 65_536, 4 << 20] {
        let bytes = 4 * count;
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, seed ^ bytes as u64, r)).collect();
        let send = DeviceBuffer::from_slice(gpu, &inputs[me])?;
        let recv = DeviceBuffer::filled(gpu, bytes, 0xA5)?;
        // From the host: enqueue on the GPU's stream, then wait for it. The first call of a
        // kernel loads it; time the second (coll-bench measures properly).
        coll.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, gpu.stream())?;
        gpu.synchronize()?;
        recv.fill(0xA5)?;
        comm.bootstrap().barrier()?;
        let start = Instant::now();
        coll.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, gpu.stream())?;
        gpu.synchronize()?;
        let us = start.elapsed().as_secs_f64() * 1e6;
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let bad = count_wrong(DataType::F32, &recv.to_vec::<u8>()?, &sum_in_order(DataType::F32, &refs));
        let plan = coll.plan(Operation::AllReduce, bytes as u64);
        ok &= report(comm, "allreduce", bytes, &format!("library, {}", plan.algorithm.name()), us, bad)?;

        // From the device: the plan's grid, launched cooperatively (the kernel's grid barriers
        // need every block resident), 256 threads a block.
        let tmp = DeviceBuffer::alloc(gpu, bytes)?;
        let args = Args::new()
            .arg(coll.handle())
            .arg(plan.algorithm as u32)
            .arg(syncer.ptr::<DeviceSyncer>())
            .arg(send.ptr::<f32>())
            .arg(tmp.ptr::<f32>())
            .arg(recv.ptr::<f32>())
            .arg(count as u64)
            .arg(alpha)
            .arg(beta);
        recv.fill(0xA5)?;
        let start = Instant::now();
        // SAFETY: the arguments match the kernel; every buffer holds `count` floats and outlives
        // the synchronise below; every rank launches the same grid.
        unsafe { gpu.launch_cooperative(PTX, "scale_allreduce_shift", LaunchConfig::new(plan.blocks, 256), args)? };
        gpu.synchronize()?;
        let us = start.elapsed().as_secs_f64() * 1e6;
        let scaled: Vec<Vec<u8>> = inputs
            .iter()
            .map(|v| {
                let x: &[f32] = bytemuck::cast_slice(v);
                bytemuck::cast_slice(&x.iter().map(|x| alpha * x).collect::<Vec<f32>>()).to_vec()
            })
            .collect();
        let refs: Vec<&[u8]> = scaled.iter().map(|v| v.as_slice()).collect();
        let sum = sum_in_order(DataType::F32, &refs);
        let want: Vec<f32> = bytemuck::cast_slice::<u8, f32>(&sum).iter().map(|s| s + beta).collect();
        let bad = count_wrong(DataType::F32, &recv.to_vec::<u8>()?, bytemuck::cast_slice(&want));
        ok &= report(comm, "allreduce", bytes, "fused in a kernel", us, bad)?;
    }
    // Allgather from the host.
    let count = 100_003;
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, seed ^ 77, r)).collect();
    let send = DeviceBuffer::from_slice(gpu, &inputs[me])?;
    let recv = DeviceBuffer::filled(gpu, n * 4 * count, 0xA5)?;
    let start = Instant::now();
    coll.allgather(&send, &recv, count, DataType::F32, gpu.stream())?;
    gpu.synchronize()?;
    let us = start.elapsed().as_secs_f64() * 1e6;
    let bad = count_wrong(DataType::F32, &recv.to_vec::<u8>()?, &inputs.concat());
    ok &= report(comm, "allgather", 4 * count, "library", us, bad)?;
    Ok(ok)
}

/// Prints one line per operation on rank 0 (the slowest rank's time, every rank's verdict);
/// returns whether this rank's result was right.
fn report(comm: &Communicator, what: &str, bytes: usize, how: &str, us: f64, bad: usize) -> Result<bool> {
    let all = comm.bootstrap().all_gather_pod(&[us, bad as f64])?;
    if comm.rank() == 0 {
        let slowest = all.iter().map(|v| v[0]).fold(0.0, f64::max);
        let wrong: f64 = all.iter().map(|v| v[1]).sum();
        let verdict = if wrong == 0.0 { "ok".to_string() } else { format!("{wrong} WRONG") };
        println!("rank 0: {what:<10} {bytes:>10} B  {how:<24} {slowest:>9.1} us  {verdict}");
    }
    Ok(bad == 0)
}
