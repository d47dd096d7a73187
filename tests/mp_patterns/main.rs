//! Multi-rank pattern tests.
//!
//! One binary, three ways to run it:
//!
//! * `mpirun --allow-run-as-root -np N mp_patterns`: every process is a rank (OpenMPI variables);
//! * `mp_patterns --ranks N`: the built-in launcher starts N ranks on loopback;
//! * `mp_patterns --threads N`: N ranks as threads of this one process (a `LocalBootstrap`), each
//!   with its own GPU handle, stream and communicator: on a machine with one GPU they all share
//!   it and their kernels run at the same time (kernels that wait for peers size their grids to
//!   the rank's share of the SMs);
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
//!
//! A rank whose GPU discovery fails (a driver error, as opposed to no driver or no device) fails
//! at once instead of skipping the GPU phases.
//!
//! This file holds the driver and the helpers the phases share; the phases live in
//! `bootstrap.rs` (the bootstrap on the CPU, and the rank-to-GPU mapping), `patterns.rs` (bulk
//! copies, semaphores, port and memory channels, small collectives), `switch.rs` (the switch
//! channel, emulated) and `window.rs` (symmetric memory windows, and a window's switch group).

mod bootstrap;
mod patterns;
// The values the kernels send, as the host expects them: the kernel crate's own source.
#[path = "../../ptx-tests/src/shared.rs"]
#[allow(dead_code)]
mod shared;
mod switch;
mod window;

use std::process::ExitCode;

use std::sync::Arc;

use mscclpp_host::bootstrap::launcher::{self, Role};
use mscclpp_host::bootstrap::{Bootstrap, BootstrapExt, RankSource, TcpBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Ranks started when the binary runs with no rank environment.
const DEFAULT_RANKS: usize = 4;

/// What a phase gets.
struct Ctx<'a> {
    boot: &'a Arc<dyn Bootstrap>,
    /// A seed every rank agrees on (rank 0's, `MSCCLPP_RS_SEED` when set).
    seed: u64,
    /// This rank's GPU ordinal (`local_rank % gpu_count`), `None` without GPUs.
    gpu: Option<usize>,
    /// GPUs visible to this rank.
    gpu_count: usize,
    /// This rank's handle of its GPU (its own stream, also when ranks are threads of one process).
    gpu_handle: Option<Arc<Gpu>>,
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
    Phase { name: "bootstrap_all_gather", needs_gpus: 0, run: bootstrap::all_gather_random },
    Phase { name: "bootstrap_barrier_x100", needs_gpus: 0, run: bootstrap::barrier_x100 },
    Phase { name: "bootstrap_ring_send_recv", needs_gpus: 0, run: bootstrap::ring_send_recv },
    Phase { name: "gpu_mapping", needs_gpus: 1, run: bootstrap::gpu_mapping },
    Phase { name: "staged_dispatch", needs_gpus: 1, run: patterns::staged_dispatch },
    Phase { name: "multi_source_combine", needs_gpus: 1, run: patterns::multi_source_combine },
    Phase { name: "push_combine", needs_gpus: 1, run: patterns::push_combine },
    Phase { name: "port_all_to_all", needs_gpus: 1, run: patterns::port_all_to_all },
    Phase { name: "memory_channels", needs_gpus: 1, run: patterns::memory_channels },
    Phase { name: "allgather", needs_gpus: 1, run: patterns::allgather },
    Phase { name: "allreduce_small", needs_gpus: 1, run: patterns::allreduce_small },
    Phase { name: "allreduce_large", needs_gpus: 1, run: patterns::allreduce_large },
    Phase { name: "all_pairs_barrier", needs_gpus: 1, run: patterns::all_pairs_barrier },
    Phase { name: "switch_reduce_broadcast", needs_gpus: 1, run: switch::switch_reduce_broadcast },
    Phase { name: "switch_barrier", needs_gpus: 1, run: switch::switch_barrier },
    Phase { name: "switch_allreduce", needs_gpus: 1, run: switch::switch_allreduce },
    Phase { name: "window", needs_gpus: 1, run: window::window },
    Phase { name: "window_switch", needs_gpus: 1, run: window::window_switch },
];

fn main() -> ExitCode {
    // `--ranks N`: launch N ranks; mpirun or launcher variables: be a rank; neither (as `cargo
    // test` runs it): launch DEFAULT_RANKS on loopback.
    match launcher::role(DEFAULT_RANKS) {
        Ok(Role::Rank(cfg)) => {
            let r = cfg.rank.rank;
            match TcpBootstrap::connect(&cfg) {
                Ok(b) => {
                    if run_rank(Arc::new(b)) {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    println!("rank {r}: bootstrap ... FAILED: {e}");
                    println!("rank {r}: RESULT FAILED");
                    ExitCode::FAILURE
                }
            }
        }
        Ok(Role::Threads { ranks, deadline }) => {
            let outcome = launcher::run_threads(ranks, deadline, |boot| {
                let r = boot.rank();
                if run_rank(boot) {
                    Ok(())
                } else {
                    Err(mscclpp_host::Error::InvalidArgument(format!("rank {r} failed")))
                }
            });
            match outcome {
                Ok(()) => {
                    println!("mp_patterns: RESULT ok (all {ranks} ranks, as threads of one process)");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("mp_patterns: RESULT FAILED: {e}");
                    ExitCode::FAILURE
                }
            }
        }
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

/// One rank, whatever started it; whether every phase it ran passed.
fn run_rank(boot: Arc<dyn Bootstrap>) -> bool {
    let r = boot.rank();
    let inventory = mscclpp_host::gpu::inventory();
    if inventory.discovery == mscclpp_host::gpu::Discovery::Failed {
        // Not a machine without GPUs: a broken driver must not pass as one.
        println!("rank {r}: GPU discovery ... FAILED: {}", inventory.reason.as_deref().unwrap_or("(no reason)"));
        println!("rank {r}: RESULT FAILED");
        return false;
    }
    let gpu_count = inventory.devices.len();
    let gpu = boot.info().gpu_index(gpu_count);
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
            return false;
        }
    };
    // Its own handle, with the kernels loaded now, before the ranks meet again: a module load
    // may wait for the GPU's running kernels, which (with ranks as threads of one process) may
    // be other ranks' kernels waiting for this one.
    let opened = gpu.map(|o| Gpu::open(o).and_then(|g| g.module(mscclpp_rs::PTX).map(|_| g))).transpose();
    let gpu_handle = match opened {
        Ok(g) => g,
        Err(e) => {
            println!("rank {r}: opening its GPU ... FAILED: {e}");
            println!("rank {r}: RESULT FAILED");
            return false;
        }
    };
    if r == 0 {
        println!("rank 0: seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)");
    }
    let require_gpu = std::env::var("MSCCLPP_RS_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let ctx = Ctx { boot: &boot, seed, gpu, gpu_count, gpu_handle };
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
    drop(ctx);
    drop(boot);
    !failed
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
// For the GPU phases. Every rank uses GPU `local_rank % gpu_count`; buffers are exchanged with
// CUDA IPC through the bootstrap. Inputs are derived from the shared seed, so every rank can
// compute any other rank's data and the expected results on the host.

fn gpu(c: &Ctx) -> Result<Arc<Gpu>, String> {
    c.gpu_handle.clone().ok_or_else(|| "no GPU assigned".to_string())
}

/// Whether the ranks are threads of this process (their kernels share a GPU at the same time).
fn as_threads(c: &Ctx) -> bool {
    c.boot.info().source == RankSource::Threads
}

/// The grid of a kernel whose blocks wait for other ranks: this rank's share of its GPU's SMs.
fn share_of_sms(cm: &Communicator) -> Result<u32, String> {
    cm.sm_share().map_err(e2s)
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

/// Checks a kernel's `[mismatches, checks made]` report: no mismatch, and exactly `want` checks (a
/// kernel that skipped its checks would report none).
fn counted(what: &str, report: &DeviceBuffer, want: u64) -> PhaseResult {
    let got = report.to_vec::<u64>().map_err(e2s)?;
    if got != [0, want] {
        return Err(format!("{what}: [mismatches, checks] = {got:?}, expected [0, {want}]"));
    }
    Ok(())
}
