//! A dead peer must not leave its partners waiting out their budgets.
//!
//! The last rank is the victim; every other rank is a survivor. One case per launch:
//!
//! * `gpu_wait`: the survivors' GPUs wait in a kernel for the victim's semaphore signal (a
//!   20 s budget); the victim dies instead. Each survivor's bootstrap sees the connection end
//!   without a goodbye, its `Communicator` sets the GPU's abort word, and the kernel traps
//!   with "aborted: rank V was lost". The survivor must hold the named error
//!   (`Error::PeerLost { peer: V }`) within 1 s of the death.
//! * `bootstrap_step`: the survivors wait in a bootstrap barrier; the victim dies. Same limit.
//! * `requested`: nobody dies; the survivors' GPUs wait for the victim as above and the survivors
//!   call `Communicator::abort()`; their kernels must trap within 1 s.
//! * `abandoned`: as `gpu_wait`, but the victim stays alive and calls `Communicator::abandon()`
//!   (an error path) instead of dying; the survivors must hold the named error within 1 s of
//!   the call.
//!
//! The victim announces the moment of its death (wall clock, every rank is on this machine)
//! before it dies, so each survivor measures its own delay.
//!
//! Ways to run it:
//! * `peer_abort` with no rank variables (as `cargo test` runs it): the built-in launcher runs
//!   every case with 2 ranks and the GPU case with 4, and checks what each rank printed; GPU
//!   cases skip without GPUs.
//! * `mpirun -np N peer_abort --case CASE [--death exit|kill]` or `peer_abort --ranks N --case
//!   CASE`: one case. `--death kill` (the default) is SIGKILL; `exit` ends the process without
//!   running destructors (no goodbye either), for mpirun, which would tear the job down itself
//!   when a rank dies of a signal.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mscclpp_host::bootstrap::launcher::{self, Launcher, Role};
use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, EnvSnapshot, TcpBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, Error, Gpu, LaunchConfig};

/// What a survivor must beat: from the victim's death to the named error on the survivor.
const LIMIT: Duration = Duration::from_secs(1);
/// How long after announcing it the victim dies (the survivors are waiting by then).
const DEATH_DELAY: Duration = Duration::from_millis(500);
/// Message tag of the death announcement.
const TAG_DEATH: u32 = 0xdead;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn main() -> ExitCode {
    let is_rank = BootstrapConfig::from_env(&EnvSnapshot::capture()).is_ok_and(|c| c.is_some());
    if !is_rank && std::env::args().all(|a| a != "--ranks" && !a.starts_with("--ranks=")) {
        // A driver run (as `cargo test` runs it): every case through the launcher.
        return driver();
    }
    match launcher::role(2) {
        Ok(Role::Rank(cfg)) => rank_main(&cfg),
        Ok(Role::Launched { ranks, outcome: Ok(()) }) => {
            println!("peer_abort: RESULT ok (all {ranks} ranks)");
            ExitCode::SUCCESS
        }
        Ok(Role::Threads { .. }) => {
            println!("peer_abort: RESULT FAILED: this test kills rank processes (drop --threads)");
            ExitCode::FAILURE
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("peer_abort: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn rank_main(cfg: &BootstrapConfig) -> ExitCode {
    let me = cfg.rank.rank;
    let case = arg("--case").unwrap_or_else(|| "gpu_wait".into());
    let death = arg("--death").unwrap_or_else(|| "kill".into());
    match run_case(cfg, &case, &death) {
        Ok(what) => {
            println!("rank {me}: {case} ok: {what}");
            println!("rank {me}: RESULT ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("rank {me}: {case} FAILED: {why}");
            println!("rank {me}: RESULT FAILED");
            ExitCode::FAILURE
        }
    }
}

/// Tells the survivors when the victim's end comes (now + [`DEATH_DELAY`]) and waits for it.
fn announce_end(boot: &TcpBootstrap) {
    let at = now_ns() + DEATH_DELAY.as_nanos();
    for peer in 0..boot.world_size() - 1 {
        // A survivor that has gone already cannot be told; it fails on its own.
        let _ = boot.send_tagged(peer, TAG_DEATH, &at.to_le_bytes());
    }
    std::thread::sleep(DEATH_DELAY);
}

/// The victim's end: announce, wait, die without a goodbye.
fn die(boot: &TcpBootstrap, death: &str) -> ! {
    announce_end(boot);
    println!("rank {}: dying ({death})", boot.rank());
    if death == "exit" {
        // No destructors run: the bootstrap's sockets close without a goodbye, as in a crash.
        std::process::exit(0);
    }
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    std::process::abort()
}

/// The announced death time (ns since the epoch).
fn death_time(boot: &TcpBootstrap, victim: usize) -> Result<u128, String> {
    let b = boot.recv_tagged(victim, TAG_DEATH).map_err(|e| e.to_string())?;
    Ok(u128::from_le_bytes(b.try_into().map_err(|_| "a bad death announcement")?))
}

fn since(t_ns: u128) -> Duration {
    Duration::from_nanos(now_ns().saturating_sub(t_ns).min(u64::MAX as u128) as u64)
}

fn run_case(cfg: &BootstrapConfig, case: &str, death: &str) -> Result<String, String> {
    let boot = Arc::new(TcpBootstrap::connect(cfg).map_err(|e| e.to_string())?);
    let (me, n) = (boot.rank(), boot.world_size());
    if n < 2 {
        return Err("needs at least 2 ranks".into());
    }
    let victim = n - 1;
    if case == "bootstrap_step" {
        boot.barrier().map_err(|e| e.to_string())?;
        if me == victim {
            die(&boot, death);
        }
        let t = death_time(&boot, victim)?;
        let e = boot.barrier().expect_err("a barrier with a dead rank cannot succeed");
        let dt = since(t);
        if !matches!(e.root_cause(), Error::PeerLost { peer, .. } if *peer == victim) {
            return Err(format!("expected rank {victim} named as lost, got: {e}"));
        }
        if dt > LIMIT {
            return Err(format!("the error came {dt:?} after the death: {e}"));
        }
        return Ok(format!("\"{e}\" {} ms after rank {victim} died", dt.as_millis()));
    }
    // The GPU cases.
    let gpus = match mscclpp_rs::testing::all_gpus() {
        Ok(g) => g,
        Err(problem @ mscclpp_rs::testing::GpuProblem::Failed(_)) => return Err(problem.to_string()),
        Err(problem) if mscclpp_rs::testing::gpu_required() => return Err(problem.to_string()),
        Err(problem) => {
            let why = problem.to_string();
            mscclpp_rs::testing::record_skip(&format!("peer_abort/{case}"), &why);
            boot.barrier().map_err(|e| e.to_string())?;
            return Ok(format!("SKIPPED: {why}"));
        }
    };
    let gpu: Arc<Gpu> = gpus[cfg.rank.gpu_index(gpus.len()).unwrap_or(0)].clone();
    let cm = Communicator::new(boot.clone(), gpu.clone());
    let slots = DeviceBuffer::exportable_filled(&gpu, n * 2 * 8, 0).map_err(|e| e.to_string())?;
    let peers = cm.exchange(&slots).map_err(|e| e.to_string())?;
    let sems = cm.memory_semaphores().map_err(|e| e.to_string())?;
    let slot_table = DeviceBuffer::from_slice(&gpu, peers.addrs()).map_err(|e| e.to_string())?;
    let sem_table = DeviceBuffer::from_slice(&gpu, &sems.table()).map_err(|e| e.to_string())?;
    let errors = DeviceBuffer::filled(&gpu, 64, 0).map_err(|e| e.to_string())?;
    boot.barrier().map_err(|e| e.to_string())?;
    if me == victim {
        match case {
            "gpu_wait" => die(&boot, death),
            "abandoned" => {
                announce_end(&boot);
                cm.abandon();
                // The abandoning rank's own GPU waits give up too.
                if !matches!(cm.abort_error(), Some(Error::Aborted)) {
                    return Err(format!("abandon() left this rank's abort word {:?}", cm.abort_error()));
                }
                // Alive past the survivors' limit: they must learn of it from the abandon alone.
                std::thread::sleep(LIMIT + Duration::from_millis(500));
                return Ok("abandoned the job".into());
            }
            _ => {
                // `requested`: stay alive (and out of the GPU wait) until the survivors are done.
                boot.barrier().map_err(|e| e.to_string())?;
                return Ok("stayed out of the wait".into());
            }
        }
    }
    // A kernel that waits for every other rank's signal; the victim never sends one.
    // SAFETY: `mp_barrier` takes (semaphores, world, me, rounds, remote slots, own slots, errors)
    // with these types; every buffer outlives the synchronize below.
    unsafe {
        gpu.launch(
            mscclpp_rs::PTX,
            "mp_barrier",
            LaunchConfig::new(1, 32.max(n as u32)),
            Args::new()
                .arg(sem_table.addr())
                .arg(n as u32)
                .arg(me as u32)
                .arg(1u32)
                .arg(slot_table.addr())
                .arg(slots.addr())
                .arg(errors.addr()),
        )
    }
    .map_err(|e| e.to_string())?;
    let t = match case {
        "gpu_wait" | "abandoned" => death_time(&boot, victim)?,
        "requested" => {
            std::thread::sleep(DEATH_DELAY);
            let t = now_ns();
            cm.abort();
            t
        }
        other => return Err(format!("unknown case {other:?}")),
    };
    // When did the host learn of it (the abort word set), apart from when the GPU reported?
    let word_seen = {
        let gpu = gpu.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while gpu.abort_word().cause().is_none() && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_micros(100));
            }
            now_ns()
        })
    };
    let sync = gpu.synchronize_timeout(Duration::from_secs(30));
    let dt = since(t);
    let seen = word_seen.join().unwrap_or_else(|_| now_ns());
    // The earliest moment another process can see a death is when the dying process's sockets
    // close: the kernel does that late in the exit, after tearing down the process's memory
    // (GPU mappings included), which has taken from 40 ms to seconds after a SIGKILL. The limit
    // runs from that moment (the abort word set); the time from the kill is printed beside it.
    let seen_dt = Duration::from_nanos(seen.saturating_sub(t) as u64);
    let error_dt = dt.saturating_sub(seen_dt);
    let event = match case {
        "requested" => "abort() call",
        "abandoned" => "abandon() call",
        _ => "kill",
    };
    println!(
        "rank {me}: {case}: abort word set {} ms after the {event}, the named error {} ms after that",
        seen_dt.as_millis(),
        error_dt.as_millis()
    );
    let Err(e) = sync else { return Err(format!("the kernel finished although rank {victim} never signalled")) };
    // `synchronize_timeout` itself names the cause.
    let named_ok = match (case, e.root_cause()) {
        ("gpu_wait" | "abandoned", Error::PeerLost { peer, .. }) => *peer == victim,
        ("requested", Error::Aborted) => true,
        _ => false,
    };
    if !named_ok {
        return Err(format!("synchronize did not name the cause: {e}"));
    }
    if cm.abort_error().map(|a| a.to_string()) != Some(e.to_string()) {
        return Err(format!("Communicator::abort_error() disagrees with synchronize: {e}"));
    }
    // A death is seen only when the dying process's sockets close (above), so a kill's limit runs
    // from the abort word; an abort() or abandon() call has no such excuse: its limit runs from
    // the call itself.
    match case {
        "gpu_wait" if error_dt > LIMIT => {
            return Err(format!("the named error came {error_dt:?} after the abort word was set: {e}"));
        }
        "requested" | "abandoned" if dt > LIMIT => {
            return Err(format!("the named error came {dt:?} after the {event}: {e}"));
        }
        _ => {}
    }
    if case == "requested" {
        // The victim is alive and waiting: finish together (the bootstrap does not need the GPU).
        boot.barrier().map_err(|e| e.to_string())?;
    }
    Ok(format!("\"{e}\" {} ms after the {event}", dt.as_millis()))
}

// ----------------------------------------------------------------------------------------------
// The driver (no rank variables): every case through the built-in launcher.

fn driver() -> ExitCode {
    let gpus = match mscclpp_rs::testing::all_gpus() {
        Ok(g) => g.len(),
        Err(problem @ mscclpp_rs::testing::GpuProblem::Failed(_)) => {
            println!("peer_abort: RESULT FAILED: {problem}");
            return ExitCode::FAILURE;
        }
        Err(_) if mscclpp_rs::testing::gpu_required() => {
            println!("peer_abort: RESULT FAILED: no GPU, and MSCCLPP_RS_REQUIRE_GPU=1");
            return ExitCode::FAILURE;
        }
        Err(_) => 0,
    };
    let mut failed = 0;
    let cases: &[(&str, usize, bool)] = &[
        ("bootstrap_step", 2, false),
        ("bootstrap_step", 4, false),
        ("gpu_wait", 2, true),
        ("gpu_wait", 4, true),
        ("requested", 2, true),
        ("abandoned", 2, true),
    ];
    for &(case, ranks, needs_gpu) in cases {
        if needs_gpu && gpus == 0 {
            println!("peer_abort: {case} x{ranks} SKIPPED: no GPU");
            continue;
        }
        let (r, lines) = Launcher::current_exe(ranks)
            .expect("current_exe")
            .args(["--case", case])
            .deadline(Duration::from_secs(120))
            .grace(Duration::from_secs(10))
            .run_captured();
        let victim = ranks - 1;
        let mut problems = Vec::new();
        for s in 0..victim {
            if !lines.iter().any(|l| l.starts_with(&format!("[rank {s}] rank {s}: {case} ok: "))) {
                problems.push(format!("rank {s} did not report ok"));
            }
        }
        match case {
            "requested" | "abandoned" => {
                if let Err(e) = &r {
                    problems.push(format!("the launch failed: {e}"));
                }
            }
            _ => {
                let said = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
                if !said.contains(&format!("rank {victim} (killed by signal 9")) {
                    problems.push(format!("the launcher did not report rank {victim} killed: {said:?}"));
                }
            }
        }
        if needs_gpu {
            let want = match case {
                "requested" => "aborted by the host".to_string(),
                _ => format!("aborted: rank {victim} was lost"),
            };
            if !lines.iter().any(|l| l.contains("mscclpp-device: wait") && l.contains(&want)) {
                problems.push(format!("no device line with {want:?}"));
            }
        }
        if problems.is_empty() {
            println!("peer_abort: {case} x{ranks} ... ok");
            for l in lines.iter().filter(|l| l.contains(" ok: ")) {
                println!("    {l}");
            }
        } else {
            failed += 1;
            println!("peer_abort: {case} x{ranks} ... FAILED: {}", problems.join("; "));
            for l in &lines {
                println!("    {l}");
            }
        }
    }
    println!("peer_abort: RESULT {}", if failed == 0 { "ok" } else { "FAILED" });
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
