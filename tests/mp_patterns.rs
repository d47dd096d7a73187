//! Multi-rank pattern tests.
//!
//! One binary, three ways to run it:
//!
//! * `mpirun --allow-run-as-root -np N mp_patterns`: every process is a rank (OpenMPI variables);
//! * `mp_patterns --ranks N`: the built-in launcher starts N ranks on loopback;
//! * `mp_patterns` with no rank variables (as `cargo test` runs it): launches itself with 4 ranks.
//!
//! Each rank bootstraps, runs [`PHASES`] in order and prints `rank R: PHASE ... ok`,
//! `... FAILED: reason` or `... SKIPPED: reason`, then `rank R: RESULT ok|FAILED`, and exits
//! non-zero when one of its phases failed (the launcher and mpirun pass that on).
//!
//! A rank whose phase fails stops there and exits, so the other ranks fail their next bootstrap
//! step with "connection to rank R lost" instead of waiting: every rank ends, and each says why.
//!
//! Adding a GPU phase: append a [`Phase`] with `needs_gpus` set to the GPUs one machine must
//! have. Ranks use GPU `local_rank % gpu_count` ([`Ctx::gpu`]). When any rank sees fewer GPUs
//! than needed the phase is SKIPPED on every rank (the decision uses the GPU counts all ranks
//! exchanged at start, so ranks agree), unless `MSCCLPP_RS_REQUIRE_GPU=1`, which makes it FAILED.
//! `MSCCLPP_RS_PHASES=a,b` runs only the named phases; `MSCCLPP_RS_SEED` repeats a run's data;
//! `MSCCLPP_RS_VERBOSE=1` traces the steps of the barrier phase. Every kernel wait has a 20 s
//! budget and every GPU synchronise a 60 s limit, so a stuck kernel fails its phase.
//! The bootstrap timeout (`MSCCLPP_RS_BOOTSTRAP_TIMEOUT`, default 30 s) bounds how long a rank
//! waits for the others at each bootstrap step; raise it for phases where ranks may be that far
//! apart.

use std::process::ExitCode;

use std::sync::Arc;

use mscclpp_host::bootstrap::launcher::{self, Role};
use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, BootstrapExt, TcpBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Ranks started when the binary runs with no rank environment.
const DEFAULT_RANKS: usize = 4;

/// What a phase gets.
struct Ctx<'a> {
    boot: &'a Arc<TcpBootstrap>,
    /// A seed every rank agrees on (rank 0's, `MSCCLPP_RS_SEED` when set).
    seed: u64,
    /// This rank's GPU ordinal (`local_rank % gpu_count`), `None` without GPUs.
    gpu: Option<usize>,
    /// GPUs visible to this rank.
    gpu_count: usize,
}

type PhaseResult = Result<(), String>;

/// One named step of the run.
struct Phase {
    name: &'static str,
    /// GPUs each machine must have for this phase to run (0: CPU only).
    needs_gpus: usize,
    run: fn(&Ctx) -> PhaseResult,
}

/// The phases, in order. GPU phases go at the end of this list.
const PHASES: &[Phase] = &[
    Phase { name: "bootstrap_all_gather", needs_gpus: 0, run: all_gather_random },
    Phase { name: "bootstrap_barrier_x100", needs_gpus: 0, run: barrier_x100 },
    Phase { name: "bootstrap_ring_send_recv", needs_gpus: 0, run: ring_send_recv },
    Phase { name: "gpu_mapping", needs_gpus: 1, run: gpu_mapping },
    Phase { name: "staged_dispatch", needs_gpus: 1, run: staged_dispatch },
    Phase { name: "multi_source_combine", needs_gpus: 1, run: multi_source_combine },
    Phase { name: "push_combine", needs_gpus: 1, run: push_combine },
    Phase { name: "port_all_to_all", needs_gpus: 1, run: port_all_to_all },
    Phase { name: "memory_channels", needs_gpus: 1, run: memory_channels },
    Phase { name: "allgather", needs_gpus: 1, run: allgather },
    Phase { name: "allreduce_small", needs_gpus: 1, run: allreduce_small },
    Phase { name: "allreduce_large", needs_gpus: 1, run: allreduce_large },
    Phase { name: "all_pairs_barrier", needs_gpus: 1, run: all_pairs_barrier },
    Phase { name: "switch_reduce_broadcast", needs_gpus: 1, run: switch_reduce_broadcast },
    Phase { name: "switch_barrier", needs_gpus: 1, run: switch_barrier },
    Phase { name: "switch_allreduce", needs_gpus: 1, run: switch_allreduce },
];

fn main() -> ExitCode {
    // `--ranks N`: launch N ranks; mpirun or launcher variables: be a rank; neither (as `cargo
    // test` runs it): launch DEFAULT_RANKS on loopback.
    match launcher::role(DEFAULT_RANKS) {
        Ok(Role::Rank(cfg)) => run_rank(&cfg),
        Ok(Role::Launched { ranks, outcome: Ok(()) }) => {
            println!("mp_patterns: RESULT ok (all {ranks} ranks)");
            ExitCode::SUCCESS
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("mp_patterns: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_rank(cfg: &BootstrapConfig) -> ExitCode {
    let r = cfg.rank.rank;
    let boot = match TcpBootstrap::connect(cfg) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            println!("rank {r}: bootstrap ... FAILED: {e}");
            println!("rank {r}: RESULT FAILED");
            return ExitCode::FAILURE;
        }
    };
    let inventory = mscclpp_host::gpu::inventory();
    let gpu_count = inventory.devices.len();
    let gpu = cfg.rank.gpu_index(gpu_count);
    let info = boot.info();
    println!(
        "rank {r}: world {} (local rank {} of {}, via {}), {}",
        info.world_size,
        info.local_rank,
        info.local_size,
        info.source.name(),
        match gpu {
            Some(g) => format!("GPU {g} of {gpu_count}"),
            None => format!("no GPU ({})", inventory.reason.as_deref().unwrap_or("none found")),
        }
    );
    // Setup every rank must agree on: the seed, and everyone's GPU count.
    let setup = (|| -> mscclpp_host::Result<(u64, Vec<u64>)> {
        let own_seed: u64 = match std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse().ok()) {
            Some(s) => s,
            None => rand::rng().random(),
        };
        let seed = boot.all_gather_pod(&own_seed)?[0];
        let counts = boot.all_gather_pod(&(gpu_count as u64))?;
        Ok((seed, counts))
    })();
    let (seed, counts) = match setup {
        Ok(x) => x,
        Err(e) => {
            println!("rank {r}: setup ... FAILED: {e}");
            println!("rank {r}: RESULT FAILED");
            return ExitCode::FAILURE;
        }
    };
    if r == 0 {
        println!("rank 0: seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)");
    }
    let require_gpu = std::env::var("MSCCLPP_RS_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let ctx = Ctx { boot: &boot, seed, gpu, gpu_count };
    let mut failed = false;
    let only: Option<Vec<String>> =
        std::env::var("MSCCLPP_RS_PHASES").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    for phase in PHASES {
        let verdict = if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == phase.name)) {
            "SKIPPED: not in MSCCLPP_RS_PHASES".to_string()
        } else if failed {
            "SKIPPED: an earlier phase failed".to_string()
        } else if let Some((short, n)) = counts.iter().enumerate().find(|(_, n)| (**n as usize) < phase.needs_gpus) {
            let why = format!("needs {} GPU(s) per machine, rank {short} sees {n}", phase.needs_gpus);
            if require_gpu {
                failed = true;
                format!("FAILED: {why} (MSCCLPP_RS_REQUIRE_GPU=1)")
            } else {
                if r == 0 {
                    // Into the skip log CI prints (once per run, not once per rank).
                    mscclpp_rs::testing::record_skip(&format!("mp_patterns/{}", phase.name), &why);
                }
                format!("SKIPPED: {why}")
            }
        } else {
            match (phase.run)(&ctx) {
                Ok(()) => "ok".to_string(),
                Err(why) => {
                    failed = true;
                    format!("FAILED: {why}")
                }
            }
        };
        println!("rank {r}: {} ... {verdict}", phase.name);
    }
    println!("rank {r}: RESULT {}", if failed { "FAILED" } else { "ok" });
    // Dropping the bootstrap closes the connections: ranks still waiting on this one learn it.
    drop(boot);
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

// ----------------------------------------------------------------------------------------------
// Data every rank can recompute for any other rank.

fn rng_for(seed: u64, rank: usize, round: usize, what: u64) -> StdRng {
    let mix = seed
        ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (round as u64).rotate_left(24)
        ^ what.rotate_left(48);
    StdRng::seed_from_u64(mix)
}

fn random_data(seed: u64, rank: usize, round: usize, what: u64, max_len: usize) -> Vec<u8> {
    let mut rng = rng_for(seed, rank, round, what);
    let len = rng.random_range(0..=max_len);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

fn compare(what: &str, got: &[u8], want: &[u8]) -> PhaseResult {
    if got.len() != want.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!("{what}: byte {i} is {:#04x}, expected {:#04x}", got[i], want[i])),
    }
}

fn e2s(e: mscclpp_host::Error) -> String {
    e.to_string()
}

// ----------------------------------------------------------------------------------------------
// Phases.

/// Random contributions of random lengths (empty ones included), then one of several MiB from
/// every rank at once; each rank checks every other rank's contribution.
fn all_gather_random(c: &Ctx) -> PhaseResult {
    let me = c.boot.rank();
    for round in 0..10 {
        let max_len = if round == 9 { 4 << 20 } else { 64 << 10 };
        let mine = random_data(c.seed, me, round, 1, max_len);
        let all = c.boot.all_gather(&mine).map_err(e2s)?;
        if all.len() != c.boot.world_size() {
            return Err(format!("round {round}: {} contributions for {} ranks", all.len(), c.boot.world_size()));
        }
        for (r, got) in all.iter().enumerate() {
            compare(
                &format!("round {round}, rank {r}'s contribution"),
                got,
                &random_data(c.seed, r, round, 1, max_len),
            )?;
        }
    }
    Ok(())
}

fn barrier_x100(c: &Ctx) -> PhaseResult {
    for _ in 0..100 {
        c.boot.barrier().map_err(e2s)?;
    }
    Ok(())
}

/// Every rank sends several messages to both neighbours on the ring, then receives them: from
/// the left neighbour first on even ranks, from the right one first on odd ranks, so messages
/// from one peer wait in the queue while the other's are taken. With 1 or 2 ranks both
/// neighbours are the same rank (or this rank), and its messages arrive interleaved.
fn ring_send_recv(c: &Ctx) -> PhaseResult {
    const MESSAGES: usize = 8;
    let n = c.boot.world_size();
    let right = |r: usize| (r + 1) % n;
    let left = |r: usize| (r + n - 1) % n;
    let me = c.boot.rank();
    for k in 0..MESSAGES {
        c.boot.send(right(me), &random_data(c.seed, me, k, 2, 32 << 10)).map_err(e2s)?;
        c.boot.send(left(me), &random_data(c.seed, me, k, 3, 32 << 10)).map_err(e2s)?;
    }
    let mut peers = vec![left(me), right(me)];
    peers.dedup();
    if me % 2 == 1 {
        peers.reverse();
    }
    for peer in peers {
        // What `peer` sent to this rank, in its order: tag 2 to its right, tag 3 to its left.
        let mut expected = Vec::new();
        for k in 0..MESSAGES {
            for (to, tag) in [(right(peer), 2), (left(peer), 3)] {
                if to == me {
                    expected.push((k, tag));
                }
            }
        }
        for (i, (k, tag)) in expected.into_iter().enumerate() {
            let got = c.boot.recv(peer).map_err(e2s)?;
            let want = random_data(c.seed, peer, k, tag, 32 << 10);
            compare(&format!("message {i} from rank {peer}"), &got, &want)?;
        }
    }
    c.boot.barrier().map_err(e2s)
}

/// Opens this rank's GPU and checks the rank-to-GPU mapping: ranks on one machine use distinct
/// GPUs while there are enough of them.
fn gpu_mapping(c: &Ctx) -> PhaseResult {
    let ordinal = c.gpu.ok_or("no GPU assigned")?;
    let gpu = mscclpp_host::Gpu::open(ordinal).map_err(e2s)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host_id =
        host.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let me = [host_id, c.boot.local_rank() as u64, gpu.ordinal() as u64, c.gpu_count as u64];
    let all = c.boot.all_gather_pod(&me).map_err(e2s)?;
    for (a, x) in all.iter().enumerate() {
        for (b, y) in all.iter().enumerate().skip(a + 1) {
            let enough = c.boot.local_size() <= x[3] as usize;
            if x[0] == y[0] && x[2] == y[2] && enough {
                return Err(format!("ranks {a} and {b} share GPU {} on one machine with {} GPUs", x[2], x[3]));
            }
        }
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// GPU pattern phases. Every rank uses GPU `local_rank % gpu_count`; buffers are exchanged with
// CUDA IPC through the bootstrap. Inputs are derived from the shared seed, so every rank can
// compute any other rank's data and the expected results on the host.

fn gpu(c: &Ctx) -> Result<Arc<Gpu>, String> {
    let ordinal = c.gpu.ok_or("no GPU assigned")?;
    let gpus = mscclpp_rs::testing::all_gpus()?;
    gpus.get(ordinal).cloned().ok_or_else(|| format!("GPU {ordinal} not opened"))
}

fn comm(c: &Ctx) -> Result<Communicator, String> {
    Ok(Communicator::new(c.boot.clone(), gpu(c)?))
}

fn ints<T: bytemuck::Pod>(seed: u64, rank: usize, what: u64, n: usize) -> Vec<T> {
    let mut v = vec![T::zeroed(); n];
    rng_for(seed, rank, 0, what).fill(bytemuck::cast_slice_mut::<T, u8>(&mut v));
    v
}

/// The wrapping i32 sum over ranks `0..n` of every rank's `ints(seed, r, what, n_elems)`.
fn rank_sum(seed: u64, n: usize, what: u64, elems: usize) -> Vec<i32> {
    let mut want = vec![0i32; elems];
    for r in 0..n {
        for (w, x) in want.iter_mut().zip(ints::<i32>(seed, r, what, elems)) {
            *w = w.wrapping_add(x);
        }
    }
    want
}

fn upload<T: bytemuck::Pod>(g: &Arc<Gpu>, v: &[T]) -> Result<DeviceBuffer, String> {
    DeviceBuffer::from_slice(g, v).map_err(e2s)
}

fn run(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) -> PhaseResult {
    // SAFETY: every call site passes the kernel's parameters in order with matching types; the
    // buffers outlive the synchronize below.
    unsafe { g.launch(mscclpp_rs::PTX, name, cfg, args) }.map_err(|e| format!("{name}: {e}"))?;
    g.synchronize_timeout(std::time::Duration::from_secs(60)).map_err(|e| format!("{name}: {e}"))
}

fn barrier(c: &Ctx) -> PhaseResult {
    c.boot.barrier().map_err(e2s)
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) -> PhaseResult {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!("{what}: element {i} is {:?}, expected {:?}", got[i], want[i])),
    }
}

const POISON: u8 = mscclpp_rs::testing::POISON;

/// Each rank bulk-stores a 1 MiB slice into slot `rank` of every peer's receive buffer and
/// signals; each receiver waits for every peer, then checks every slot.
fn staged_dispatch(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = 1usize << 20;
    let send = upload(&g, &ints::<u8>(c.seed, me, 10, n * bytes))?;
    let recv = DeviceBuffer::exportable_filled(&g, n * bytes, POISON).map_err(e2s)?;
    let peers = cm.exchange(&recv).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let recv_table = upload(&g, peers.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    barrier(c)?;
    let tile = 32 * 1024;
    run(
        &g,
        "mp_dispatch",
        LaunchConfig::new(n as u32, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(2, tile)),
        Args::new()
            .arg(send.ptr::<u8>())
            .arg(recv_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(bytes as u64)
            .arg(tile),
    )?;
    let got = recv.to_vec::<u8>().map_err(e2s)?;
    for p in (0..n).filter(|&p| p != me) {
        let theirs = ints::<u8>(c.seed, p, 10, n * bytes);
        same(&format!("slot from rank {p}"), &got[p * bytes..(p + 1) * bytes], &theirs[me * bytes..(me + 1) * bytes])?;
    }
    barrier(c)
}

/// Each rank bulk-loads every tile from every rank's input (peer-mapped), two stages deep,
/// sums in shared memory and writes the i32 sum; checked against the host's sum.
fn multi_source_combine(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, g) = (cm.world_size(), cm.gpu().clone());
    let elems = 2 << 20; // 8 MiB of i32
    let input = DeviceBuffer::exportable_from_slice(&g, &ints::<i32>(c.seed, cm.rank(), 11, elems)).map_err(e2s)?;
    let out = DeviceBuffer::filled(&g, elems * 4, POISON).map_err(e2s)?;
    let peers = cm.exchange(&input).map_err(e2s)?;
    let table = upload(&g, peers.addrs())?;
    barrier(c)?;
    let tile = if n <= 4 { 16 * 1024 } else { 8 * 1024 };
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(2, n as u32 * tile);
    run(
        &g,
        "mp_combine",
        LaunchConfig::new(g.info().sm_count, 256).shared(smem),
        Args::new().arg(table.addr()).arg(n as u32).arg(out.addr()).arg((elems * 4) as u64).arg(tile),
    )?;
    let want = rank_sum(c.seed, n, 11, elems);
    same("combined sum", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}

/// Every rank bulk-reduce-stores (u64 add) its input into rank 0's buffer at the same time;
/// rank 0 checks the exact sum.
fn push_combine(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 1 << 20; // 8 MiB of u64
    let shift = |v: Vec<u64>| v.into_iter().map(|x| x >> 8).collect::<Vec<u64>>();
    let acc = DeviceBuffer::exportable_from_slice(&g, &shift(ints::<u64>(c.seed, 0, 12, elems))).map_err(e2s)?;
    let src = upload(&g, &shift(ints::<u64>(c.seed, me, 13, elems)))?;
    let peers = cm.exchange(&acc).map_err(e2s)?;
    barrier(c)?;
    let tile = 16 * 1024u32;
    run(
        &g,
        "bulk_reduce_stream_u64",
        LaunchConfig::new(g.info().sm_count, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(3, tile)),
        Args::new().arg(peers.ptr::<u8>(0)).arg(src.ptr::<u8>()).arg((elems * 8) as u64).arg(tile).arg(1u32),
    )?;
    barrier(c)?;
    if me == 0 {
        let mut want = shift(ints::<u64>(c.seed, 0, 12, elems));
        for r in 0..n {
            for (w, x) in want.iter_mut().zip(shift(ints::<u64>(c.seed, r, 13, elems))) {
                *w = w.wrapping_add(x);
            }
        }
        same("sum at rank 0", &acc.to_vec::<u64>().map_err(e2s)?, &want)?;
    }
    barrier(c)
}

/// A barrier of signal/wait between every pair of ranks, 10,000 times (100 when ranks share a
/// GPU: their kernels then take turns on it), each round publishing data before and checking
/// it after.
fn all_pairs_barrier(c: &Ctx) -> PhaseResult {
    let t0 = std::time::Instant::now();
    let step = |what: &str| {
        if std::env::var("MSCCLPP_RS_VERBOSE").is_ok() {
            eprintln!("rank {}: all_pairs_barrier: {what} at {:?}", c.boot.rank(), t0.elapsed());
        }
    };
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let rounds: u32 = if c.boot.local_size() <= c.gpu_count { 10_000 } else { 100 };
    step("alloc");
    let slots = DeviceBuffer::exportable_filled(&g, n * 2 * 8, 0).map_err(e2s)?;
    step("exchange slots");
    let peers = cm.exchange(&slots).map_err(e2s)?;
    step("semaphores");
    let sems = cm.memory_semaphores().map_err(e2s)?;
    step("tables");
    let slot_table = upload(&g, peers.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    let errors = DeviceBuffer::filled(&g, 4, 0).map_err(e2s)?;
    step("barrier");
    barrier(c)?;
    step("launch");
    run(
        &g,
        "mp_barrier",
        LaunchConfig::new(1, 32.max(n as u32)),
        Args::new()
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(rounds)
            .arg(slot_table.addr())
            .arg(slots.addr())
            .arg(errors.addr()),
    )?;
    let bad = errors.to_vec::<u32>().map_err(e2s)?[0];
    if bad != 0 {
        return Err(format!("{bad} stale slots after {rounds} barriers"));
    }
    println!("rank {me}: all_pairs_barrier: {rounds} rounds");
    barrier(c)
}

/// Port-channel all-to-all with put_with_signal, 20 iterations of 64 KiB per peer, a flush
/// before every source rewrite; arrivals checked on the device.
fn port_all_to_all(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let chunk_words = 16 * 1024u32;
    let iters = 20u32;
    let bytes = n * chunk_words as usize * 4;
    let src = DeviceBuffer::filled(&g, bytes, 0).map_err(e2s)?;
    let recv = DeviceBuffer::exportable_filled(&g, 2 * bytes, POISON).map_err(e2s)?;
    let ports = cm.port_channels(&src, &recv).map_err(e2s)?;
    let table = upload(&g, &ports.table())?;
    let errors = DeviceBuffer::filled(&g, 4, 0).map_err(e2s)?;
    barrier(c)?;
    run(
        &g,
        "mp_port_alltoall",
        LaunchConfig::new(1, 256),
        Args::new()
            .arg(table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(chunk_words)
            .arg(iters)
            .arg(src.addr())
            .arg(recv.addr())
            .arg(errors.addr()),
    )?;
    let bad = errors.to_vec::<u32>().map_err(e2s)?[0];
    ports.proxy().check().map_err(e2s)?;
    barrier(c)?;
    ports.stop().map_err(e2s)?;
    if bad != 0 {
        return Err(format!("{bad} words wrong after {iters} all-to-all iterations"));
    }
    Ok(())
}

/// `Communicator::memory_channels` between every pair of ranks, one pair at a time (the others
/// wait at a barrier): first a put + signal / wait ping-pong whose data each side checks after,
/// then, on the same channels, an LL16 packet ping-pong that checks every message on the device.
fn memory_channels(c: &Ctx) -> PhaseResult {
    use mscclpp_device::packet::{LL16Packet, packet_bytes};
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = (8 << 10) + 8 * rng_for(c.seed, 0, 0, 17).random_range(0..128usize);
    // [0, bytes): what this rank sends; [bytes, 2 bytes): what the peer sent.
    let buf = DeviceBuffer::exportable_filled(&g, 2 * bytes, POISON).map_err(e2s)?;
    buf.write(0, &ints::<u8>(c.seed, me, 17, bytes)).map_err(e2s)?;
    let chans = cm.memory_channels(&buf, packet_bytes::<LL16Packet>(bytes as u64) as usize).map_err(e2s)?;
    if chans.get(me).is_some() || chans.table().len() != n {
        return Err(format!("{n} ranks: a channel toward this rank, or a table of {}", chans.table().len()));
    }
    let pairs: Vec<(usize, usize)> = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
    let cfg = LaunchConfig::new(1, 256);
    barrier(c)?;
    for &(a, b) in &pairs {
        if me == a || me == b {
            let peer = a + b - me;
            let chan = chans.get(peer).ok_or(format!("no channel toward rank {peer}"))?;
            let args = Args::new().arg(chan).arg(bytes as u64).arg(3u32).arg(u32::from(me == a));
            run(&g, "put_signal_pingpong", cfg, args)?;
            let mut got = vec![0u8; bytes];
            buf.read(bytes, &mut got).map_err(e2s)?;
            same(&format!("put from rank {peer}"), &got, &ints::<u8>(c.seed, peer, 17, bytes))?;
        }
        barrier(c)?;
    }
    let rounds = 20u32;
    for &(a, b) in &pairs {
        if me == a || me == b {
            let peer = a + b - me;
            let chan = chans.get(peer).ok_or(format!("no channel toward rank {peer}"))?;
            let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
            let first = u32::from(me == a);
            let args =
                Args::new().arg(chan).arg(rounds).arg(first).arg(bytes as u64).arg(c.seed as u32).arg(report.addr());
            run(&g, "packet_pingpong_ll16", cfg, args)?;
            let checked = if first == 1 { rounds } else { rounds / 2 } as u64 * (bytes / 4) as u64;
            let got = report.to_vec::<u64>().map_err(e2s)?;
            if got != [0, checked] {
                return Err(format!(
                    "packets with rank {peer}: [mismatching words, words checked] = {got:?}, expected [0, {checked}]"
                ));
            }
        }
        barrier(c)?;
    }
    Ok(())
}

/// Every rank bulk-stores its 4 MiB into slot `rank` of every rank's gather buffer.
fn allgather(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = 4usize << 20;
    let src = upload(&g, &ints::<u8>(c.seed, me, 14, bytes))?;
    let dst = DeviceBuffer::exportable_filled(&g, n * bytes, POISON).map_err(e2s)?;
    let peers = cm.exchange(&dst).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let dst_table = upload(&g, peers.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    barrier(c)?;
    let tile = 32 * 1024u32;
    run(
        &g,
        "mp_allgather",
        LaunchConfig::new(n as u32, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(2, tile)),
        Args::new()
            .arg(src.ptr::<u8>())
            .arg(dst_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(bytes as u64)
            .arg(tile),
    )?;
    let got = dst.to_vec::<u8>().map_err(e2s)?;
    for r in 0..n {
        same(&format!("slot of rank {r}"), &got[r * bytes..(r + 1) * bytes], &ints::<u8>(c.seed, r, 14, bytes))?;
    }
    barrier(c)
}

/// Small allreduce (64 KiB of i32): all-gather every input into every rank's slots, then a local
/// sum over the slots.
fn allreduce_small(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 16 * 1024usize;
    let src = upload(&g, &ints::<i32>(c.seed, me, 15, elems))?;
    let slots = DeviceBuffer::exportable_filled(&g, n * elems * 4, POISON).map_err(e2s)?;
    let out = DeviceBuffer::filled(&g, elems * 4, POISON).map_err(e2s)?;
    let peers = cm.exchange(&slots).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let slot_table = upload(&g, peers.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    barrier(c)?;
    let tile = 16 * 1024u32;
    run(
        &g,
        "mp_allgather",
        LaunchConfig::new(n as u32, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(2, tile)),
        Args::new()
            .arg(src.ptr::<u8>())
            .arg(slot_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg((elems * 4) as u64)
            .arg(tile),
    )?;
    run(
        &g,
        "mp_reduce_slots",
        LaunchConfig::new(64, 256),
        Args::new().arg(slots.addr()).arg(n as u32).arg(elems as u32).arg(out.addr()),
    )?;
    let want = rank_sum(c.seed, n, 15, elems);
    same("small allreduce", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}

/// Large allreduce (8 MiB of i32 per rank-chunk): every rank reduces its chunk from every rank's
/// input and bulk-stores the sum into every rank's output, then a signal/wait with every peer.
fn allreduce_large(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = n * (2 << 20);
    let input = DeviceBuffer::exportable_from_slice(&g, &ints::<i32>(c.seed, me, 16, elems)).map_err(e2s)?;
    let out = DeviceBuffer::exportable_filled(&g, elems * 4, POISON).map_err(e2s)?;
    let ins = cm.exchange(&input).map_err(e2s)?;
    let outs = cm.exchange(&out).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let in_table = upload(&g, ins.addrs())?;
    let out_table = upload(&g, outs.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    let done = DeviceBuffer::filled(&g, 4, 0).map_err(e2s)?;
    barrier(c)?;
    let tile = 8 * 1024u32;
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(2, n as u32 * tile) + tile;
    run(
        &g,
        "mp_allreduce",
        LaunchConfig::new(g.info().sm_count, 256).shared(smem),
        Args::new()
            .arg(in_table.addr())
            .arg(out_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg((elems * 4) as u64)
            .arg(tile)
            .arg(done.addr()),
    )?;
    let want = rank_sum(c.seed, n, 16, elems);
    same("large allreduce", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}

// ----------------------------------------------------------------------------------------------
// Switch-channel phases, on the emulated switch channel (multicast is off on the test machines;
// `Communicator::switch_channels` says why and returns the emulation).

use mscclpp_device::channel::switch::SwitchElem;
use mscclpp_device::vec::{Bf16x2, Bf16x8, F16x2, F16x8, F32x2, F32x4};

fn emulated(
    cm: &Communicator,
    buf: &DeviceBuffer,
    blocks: usize,
) -> Result<mscclpp_host::comm::EmulatedSwitchChannels, String> {
    let channels = cm.switch_channels(buf, blocks).map_err(e2s)?;
    if cm.rank() == 0 {
        println!("rank 0: switch channels emulated: {}", channels.reason());
    }
    Ok(channels)
}

/// Random finite values of each element type, from the shared seed.
trait Sample: SwitchElem + PartialEq + std::fmt::Debug {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self>;
}
fn floats(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    let mut rng = rng_for(seed, rank, 0, 30);
    (0..n).map(|_| rng.random_range(-64.0f32..64.0)).collect()
}
macro_rules! sample_lanes {
    ($($t:ty, $lanes:literal, $conv:expr;)*) => { $(
        impl Sample for $t {
            fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
                let f = floats(seed, rank, n * $lanes);
                f.chunks($lanes).map(|c| <$t>::from(std::array::from_fn::<_, $lanes, _>(|i| ($conv)(c[i])))).collect()
            }
        }
    )* };
}
sample_lanes! {
    F32x2, 2, |x: f32| x;
    F32x4, 4, |x: f32| x;
    F16x2, 2, half::f16::from_f32;
    F16x8, 8, half::f16::from_f32;
    Bf16x2, 2, half::bf16::from_f32;
    Bf16x8, 8, half::bf16::from_f32;
}
impl Sample for f32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        floats(seed, rank, n)
    }
}
impl Sample for u32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        ints(seed, rank, 31, n)
    }
}
impl Sample for i32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        ints(seed, rank, 32, n)
    }
}

fn reduce_broadcast_one<V: Sample>(c: &Ctx, cm: &Communicator, kernel: &str) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 4096usize;
    let mine = V::sample(c.seed, me, elems);
    let buf = DeviceBuffer::exportable_from_slice(&g, &mine).map_err(e2s)?;
    let input = upload(&g, &mine)?;
    let out = DeviceBuffer::filled(&g, elems * std::mem::size_of::<V>(), POISON).map_err(e2s)?;
    let chans = emulated(cm, &buf, 1)?;
    barrier(c)?;
    run(
        &g,
        kernel,
        LaunchConfig::new(1, 256),
        Args::new()
            .arg(chans.handles()[0])
            .arg(out.addr())
            .arg(input.addr())
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    let inputs: Vec<Vec<V>> = (0..n).map(|r| V::sample(c.seed, r, elems)).collect();
    let sum: Vec<V> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a.add(inputs[r][i]))).collect();
    same(&format!("{kernel}: reduce"), &out.to_vec::<V>().map_err(e2s)?, &sum)?;
    let mut gathered = Vec::with_capacity(elems);
    for (r, input) in inputs.iter().enumerate() {
        let (lo, hi) = (elems * r / n, elems * (r + 1) / n);
        gathered.extend_from_slice(&input[lo..hi]);
    }
    same(&format!("{kernel}: broadcast"), &buf.to_vec::<V>().map_err(e2s)?, &gathered)?;
    barrier(c)
}

/// Reduce and broadcast of every element type and width the switch channel supports, against a
/// host reference (sums in rank order, f16/bf16 rounded after every add like the device).
fn switch_reduce_broadcast(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    reduce_broadcast_one::<f32>(c, &cm, "emu_reduce_broadcast_f32")?;
    reduce_broadcast_one::<u32>(c, &cm, "emu_reduce_broadcast_u32")?;
    reduce_broadcast_one::<i32>(c, &cm, "emu_reduce_broadcast_i32")?;
    reduce_broadcast_one::<F32x2>(c, &cm, "emu_reduce_broadcast_f32x2")?;
    reduce_broadcast_one::<F32x4>(c, &cm, "emu_reduce_broadcast_f32x4")?;
    reduce_broadcast_one::<F16x2>(c, &cm, "emu_reduce_broadcast_f16x2")?;
    reduce_broadcast_one::<F16x8>(c, &cm, "emu_reduce_broadcast_f16x8")?;
    reduce_broadcast_one::<Bf16x2>(c, &cm, "emu_reduce_broadcast_bf16x2")?;
    reduce_broadcast_one::<Bf16x8>(c, &cm, "emu_reduce_broadcast_bf16x8")
}

/// The switch barrier of 4 blocks, 10,000 rounds (100 when ranks share a GPU), each round
/// broadcasting data before the barrier and checking every rank's slot after it.
fn switch_barrier(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, g) = (cm.world_size(), cm.gpu().clone());
    let blocks = 4usize;
    let rounds: u32 = if c.boot.local_size() <= c.gpu_count { 10_000 } else { 100 };
    let buf = DeviceBuffer::exportable_filled(&g, blocks * n * 2 * 4, 0).map_err(e2s)?;
    let chans = emulated(&cm, &buf, blocks)?;
    let table = upload(&g, chans.handles())?;
    let errors = DeviceBuffer::filled(&g, 4, 0).map_err(e2s)?;
    barrier(c)?;
    run(
        &g,
        "emu_barrier_rounds",
        LaunchConfig::new(blocks as u32, 64),
        Args::new()
            .arg(table.addr())
            .arg(rounds)
            .arg(errors.addr())
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    let bad = errors.to_vec::<u32>().map_err(e2s)?[0];
    if bad != 0 {
        return Err(format!("{bad} stale slots after {rounds} switch barriers"));
    }
    barrier(c)
}

fn switch_allreduce_one<V: Sample>(c: &Ctx, cm: &Communicator, kernel: &str) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = (4 << 20) / std::mem::size_of::<V>();
    let buf = DeviceBuffer::exportable_from_slice(&g, &V::sample(c.seed, me, elems)).map_err(e2s)?;
    let blocks = 8usize;
    let chans = emulated(cm, &buf, blocks)?;
    let table = upload(&g, chans.handles())?;
    barrier(c)?;
    run(
        &g,
        kernel,
        LaunchConfig::new(blocks as u32, 256),
        Args::new()
            .arg(table.addr())
            .arg(me as u32)
            .arg(n as u32)
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    let inputs: Vec<Vec<V>> = (0..n).map(|r| V::sample(c.seed, r, elems)).collect();
    let sum: Vec<V> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a.add(inputs[r][i]))).collect();
    same(kernel, &buf.to_vec::<V>().map_err(e2s)?, &sum)?;
    barrier(c)
}

/// The allreduce kernel written against the switch-channel API (`SwitchGroup`), run on the
/// emulated channel: 4 MiB of f32 and of bf16, in place.
fn switch_allreduce(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    switch_allreduce_one::<F32x4>(c, &cm, "emu_allreduce_f32x4")?;
    switch_allreduce_one::<Bf16x8>(c, &cm, "emu_allreduce_bf16x8")
}
