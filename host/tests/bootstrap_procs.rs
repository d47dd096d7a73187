//! Multi-process bootstrap tests on loopback.
//!
//! This binary is both sides: run by `cargo test` (no rank variables) it is the driver, which
//! starts itself as 4 ranks (16 for the scenarios of a larger world) with the built-in launcher
//! for each scenario and checks what they print; started by the launcher (`--scenario NAME`) it
//! is one rank of that scenario.

mod procs;
use procs::{Check, Run, Test, ensure};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, BootstrapExt, EnvSnapshot, TcpBootstrap, Token};

const RANKS: usize = 4;
/// The world of the scenarios where most ranks have no connection to the one that dies.
const MANY: usize = 16;
/// The rank killed in `kill_one_of_many`: no ring neighbour of rank 0.
const VICTIM: usize = 9;

fn main() -> ExitCode {
    match BootstrapConfig::from_env(&EnvSnapshot::capture()) {
        Ok(Some(cfg)) => rank_main(cfg),
        Ok(None) => driver(),
        Err(e) => {
            eprintln!("bootstrap_procs: {e}");
            ExitCode::FAILURE
        }
    }
}

// ----------------------------------------------------------------------------------------------
// The ranks.

fn scenario() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--scenario").and_then(|i| args.get(i + 1)).cloned().unwrap_or_default()
}

fn contribution(rank: usize) -> Vec<u8> {
    (0..1000 + rank * 333).map(|i| (i * 7 + rank * 13) as u8).collect()
}

fn rank_main(mut cfg: BootstrapConfig) -> ExitCode {
    let scenario = scenario();
    let me = cfg.rank.rank;
    match (scenario.as_str(), me) {
        ("no_root", 0) => return ExitCode::SUCCESS, // rank 0 never shows up
        ("late_root", 0) => std::thread::sleep(Duration::from_millis(1500)),
        ("deadline", _) => std::thread::sleep(Duration::from_secs(60)),
        ("stranger", 3) => cfg.token = Token::random(), // as if from another job
        _ => {}
    }
    let outcome = (|| -> mscclpp_host::Result<()> {
        let mut b = TcpBootstrap::connect(&cfg)?;
        match scenario.as_str() {
            "ok" | "late_root" => {
                let all = b.all_gather(&contribution(me))?;
                for (r, got) in all.iter().enumerate() {
                    assert_eq!(got, &contribution(r), "contribution of rank {r}");
                }
                for _ in 0..20 {
                    b.barrier()?;
                }
                let n = b.world_size();
                b.send((me + 1) % n, &[me as u8; 3])?;
                assert_eq!(b.recv((me + n - 1) % n)?, vec![((me + n - 1) % n) as u8; 3]);
                assert_eq!(b.all_gather_pod(&(me as u32))?, (0..n as u32).collect::<Vec<_>>());
            }
            "killed" => {
                b.barrier()?;
                if me == 2 {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
                b.all_gather(b"after the kill")?;
            }
            "hang" => {
                // The rendezvous had 20 s (a loaded machine starts processes slowly); the step
                // under test gets 2 s.
                b.set_timeout(Duration::from_secs(2))?;
                b.barrier()?;
                if me == 3 {
                    std::thread::sleep(Duration::from_secs(60));
                }
                b.all_gather(b"rank 3 never sends this")?;
            }
            "lost_hook" | "goodbye" => {
                // Every rank asks to hear of peers lost without a goodbye (what a Communicator
                // turns into aborting its GPU's waits).
                let fired: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
                let sink = fired.clone();
                let reports = b.on_peer_lost(Arc::new(move |peer, _why| {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push((peer, Instant::now()))
                }));
                assert!(reports, "the TCP bootstrap reports lost peers");
                b.barrier()?;
                let after_barrier = Instant::now();
                if me == 2 {
                    if scenario == "lost_hook" {
                        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                    }
                    drop(b); // a goodbye to every peer
                    std::thread::sleep(Duration::from_millis(300));
                } else if scenario == "lost_hook" {
                    // The hook must fire for rank 2 alone, within a second of its death.
                    while fired.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
                        && after_barrier.elapsed() < Duration::from_secs(5)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let got = fired.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let [(2, at)] = got[..] else { panic!("hook calls {got:?}, want one for rank 2") };
                    let ms = at.duration_since(after_barrier).as_millis();
                    assert!(ms < 1000, "the loss of rank 2 was reported after {ms} ms");
                    println!("rank {me}: rank 2 reported lost {ms} ms after the barrier");
                } else {
                    // A departure: receives from rank 2 fail by name, and nothing is aborted.
                    let e = b.all_gather(b"rank 2 left").unwrap_err().to_string();
                    assert!(e.contains("connection to rank 2 lost: it closed its bootstrap (said goodbye)"), "{e}");
                    std::thread::sleep(Duration::from_millis(500));
                    let got = fired.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    assert!(got.is_empty(), "hook called for a departure: {got:?}");
                }
            }
            "kill_one_of_many" | "kill_rank_zero" => {
                // Only the victim's ring neighbours (and rank 0) are connected to it: the others
                // hear of its death from rank 0, or see rank 0 itself die.
                let victim = if scenario == "kill_rank_zero" { 0 } else { VICTIM };
                let fired: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
                let sink = fired.clone();
                b.on_peer_lost(Arc::new(move |peer, _why| {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push((peer, Instant::now()))
                }));
                b.barrier()?;
                let after_barrier = Instant::now();
                if me == victim {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
                while fired.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
                    && after_barrier.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let got = fired.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let [(peer, at)] = got[..] else { panic!("hook calls {got:?}, want one for rank {victim}") };
                assert_eq!(peer, victim, "hook called for the wrong rank");
                let ms = at.duration_since(after_barrier).as_millis();
                assert!(ms < 1000, "the loss of rank {victim} was reported after {ms} ms");
                println!("rank {me}: rank {victim} reported lost {ms} ms after the barrier");
                // The next collective fails at once, naming the dead rank.
                let e = b.all_gather(b"after the kill").unwrap_err().to_string();
                let want = format!("all_gather #1: connection to rank {victim} lost");
                assert!(e.contains(&want), "{e}");
            }
            other => panic!("unknown scenario {other:?}"),
        }
        Ok(())
    })();
    procs::rank_exit(me, outcome)
}

// ----------------------------------------------------------------------------------------------
// The driver.

fn launch(scenario: &str, timeout_s: f64, deadline: Duration, grace: Duration) -> Run {
    procs::launch(RANKS, scenario, timeout_s, deadline, grace)
}

fn all_ok(run: &Run) -> Check {
    ensure(run.result.is_ok(), || format!("launch failed: {}", run.err()))?;
    for r in 0..RANKS {
        ensure(run.has(&format!("[rank {r}] rank {r}: ok")), || format!("rank {r} did not report ok"))?;
    }
    Ok(())
}

fn four_ranks_all_gather_barrier_send_recv() -> Check {
    all_ok(&launch("ok", 20.0, Duration::from_secs(60), Duration::from_secs(2)))
}

fn rank_zero_starting_late_is_waited_for() -> Check {
    all_ok(&launch("late_root", 20.0, Duration::from_secs(60), Duration::from_secs(2)))
}

fn a_killed_rank_is_named_by_the_others_at_once() -> Check {
    // A 20 s timeout: finishing well inside it shows the closed connection was noticed, not
    // waited out.
    let run = launch("killed", 20.0, Duration::from_secs(60), Duration::from_secs(5));
    ensure(run.err().contains("rank 2 (killed by signal 9 (SIGKILL))"), || format!("launcher said: {}", run.err()))?;
    for r in [0, 1, 3] {
        let want = format!("[rank {r}] rank {r}: error: rank {r}: all_gather #1: connection to rank 2 lost");
        ensure(run.has(&want), || format!("no line {want:?}"))?;
    }
    ensure(run.took < Duration::from_secs(10), || format!("took {:?}", run.took))
}

fn a_killed_rank_is_reported_to_the_loss_hooks_within_a_second() -> Check {
    let run = launch("lost_hook", 20.0, Duration::from_secs(60), Duration::from_secs(5));
    ensure(run.err().contains("rank 2 (killed by signal 9 (SIGKILL))"), || format!("launcher said: {}", run.err()))?;
    for r in [0, 1, 3] {
        ensure(run.has(&format!("[rank {r}] rank {r}: rank 2 reported lost ")), || format!("rank {r}: no report"))?;
        ensure(run.has(&format!("[rank {r}] rank {r}: ok")), || format!("rank {r} did not report ok"))?;
    }
    Ok(())
}

/// A death among 16 ranks, seen directly only by rank 0 and the victim's ring neighbours: every
/// survivor's hook fires once, for the victim, within a second.
fn a_killed_rank_among_many_is_reported_to_every_survivor_within_a_second() -> Check {
    let run = procs::launch(MANY, "kill_one_of_many", 20.0, Duration::from_secs(90), Duration::from_secs(5));
    let killed = format!("rank {VICTIM} (killed by signal 9 (SIGKILL))");
    ensure(run.err().contains(&killed), || format!("launcher said: {}", run.err()))?;
    for r in (0..MANY).filter(|&r| r != VICTIM) {
        let want = format!("[rank {r}] rank {r}: rank {VICTIM} reported lost ");
        ensure(run.has(&want), || format!("rank {r}: no report"))?;
        ensure(run.has(&format!("[rank {r}] rank {r}: ok")), || format!("rank {r} did not report ok"))?;
    }
    Ok(())
}

/// Rank 0 dies: every other rank has a connection to it, so every hook fires within a second.
fn a_killed_rank_zero_is_reported_to_every_rank_within_a_second() -> Check {
    let run = procs::launch(MANY, "kill_rank_zero", 20.0, Duration::from_secs(90), Duration::from_secs(5));
    ensure(run.err().contains("rank 0 (killed by signal 9 (SIGKILL))"), || format!("launcher said: {}", run.err()))?;
    for r in 1..MANY {
        ensure(run.has(&format!("[rank {r}] rank {r}: rank 0 reported lost ")), || format!("rank {r}: no report"))?;
        ensure(run.has(&format!("[rank {r}] rank {r}: ok")), || format!("rank {r} did not report ok"))?;
    }
    Ok(())
}

fn a_rank_saying_goodbye_is_not_reported_lost() -> Check {
    all_ok(&launch("goodbye", 20.0, Duration::from_secs(60), Duration::from_secs(5)))
}

fn a_hanging_rank_times_out_by_name_and_is_killed() -> Check {
    let run = launch("hang", 20.0, Duration::from_secs(60), Duration::from_secs(1));
    for r in [0, 1, 2] {
        let want =
            format!("[rank {r}] rank {r}: error: rank {r}: all_gather #1: timed out after 2 s waiting for rank 3");
        ensure(run.has(&want), || format!("no line {want:?}"))?;
    }
    ensure(run.err().contains("killed: rank 3 (killed by signal 9"), || format!("launcher said: {}", run.err()))?;
    ensure(run.took < Duration::from_secs(20), || format!("took {:?}", run.took))
}

fn no_rank_zero_is_a_named_timeout() -> Check {
    let run = launch("no_root", 2.0, Duration::from_secs(60), Duration::from_secs(2));
    for r in 1..RANKS {
        let want = format!(
            "[rank {r}] rank {r}: error: rank {r}: rendezvous: timed out after 2 s waiting for rank 0 at 127.0.0.1:"
        );
        ensure(run.has(&want), || format!("no line {want:?}"))?;
    }
    ensure(run.result.is_err(), || "the launch succeeded".into())
}

fn a_rank_with_a_foreign_token_is_turned_away() -> Check {
    // Rank 3 fails at once; the grace must outlast the others' 2 s timeout.
    let run = launch("stranger", 2.0, Duration::from_secs(60), Duration::from_secs(10));
    let want = "[rank 3] rank 3: error: rank 3: rendezvous: rejected frame: wrong session token";
    ensure(run.has(want), || format!("no line {want:?}"))?;
    ensure(
        run.has("[rank 0] rank 0: error: rank 0: rendezvous: timed out after 2 s waiting for rank 3 to join"),
        || "rank 0 did not name rank 3".into(),
    )?;
    ensure(run.has("wrong session token"), || "no rank mentioned the wrong token".into())?;
    for r in [1, 2] {
        let want = format!("[rank {r}] rank {r}: error: rank {r}: rendezvous: ");
        ensure(run.has(&want), || format!("rank {r} did not fail the rendezvous"))?;
    }
    Ok(())
}

fn ranks_outliving_the_deadline_are_killed() -> Check {
    let run = launch("deadline", 2.0, Duration::from_millis(1500), Duration::from_secs(2));
    ensure(run.err().contains("killed at the 1.5 s deadline"), || format!("launcher said: {}", run.err()))?;
    ensure(run.took < Duration::from_secs(10), || format!("took {:?}", run.took))
}

fn driver() -> ExitCode {
    let tests: &[(&str, Test)] = &[
        ("four_ranks_all_gather_barrier_send_recv", four_ranks_all_gather_barrier_send_recv),
        ("rank_zero_starting_late_is_waited_for", rank_zero_starting_late_is_waited_for),
        ("a_killed_rank_is_named_by_the_others_at_once", a_killed_rank_is_named_by_the_others_at_once),
        (
            "a_killed_rank_is_reported_to_the_loss_hooks_within_a_second",
            a_killed_rank_is_reported_to_the_loss_hooks_within_a_second,
        ),
        (
            "a_killed_rank_among_many_is_reported_to_every_survivor_within_a_second",
            a_killed_rank_among_many_is_reported_to_every_survivor_within_a_second,
        ),
        (
            "a_killed_rank_zero_is_reported_to_every_rank_within_a_second",
            a_killed_rank_zero_is_reported_to_every_rank_within_a_second,
        ),
        ("a_rank_saying_goodbye_is_not_reported_lost", a_rank_saying_goodbye_is_not_reported_lost),
        ("a_hanging_rank_times_out_by_name_and_is_killed", a_hanging_rank_times_out_by_name_and_is_killed),
        ("no_rank_zero_is_a_named_timeout", no_rank_zero_is_a_named_timeout),
        ("a_rank_with_a_foreign_token_is_turned_away", a_rank_with_a_foreign_token_is_turned_away),
        ("ranks_outliving_the_deadline_are_killed", ranks_outliving_the_deadline_are_killed),
    ];
    procs::driver(tests)
}
