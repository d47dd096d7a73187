//! The TCP transport between processes on loopback, on host memory (no GPU needed).
//!
//! This binary is both sides: run by `cargo test` (no rank variables) it is the driver, which
//! starts itself as ranks with the built-in launcher for each scenario and checks what they
//! print; started by the launcher (`--scenario NAME`) it is one rank of that scenario. The ranks
//! connect through the TCP bootstrap (its session key authenticates the transport's
//! connections), exchange random data with puts, signals and atomic adds, and check every byte.

mod procs;
use procs::{Check, Run, Test, ensure};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, EnvSnapshot, TcpBootstrap};
use mscclpp_host::transport::tcp::connect::PeerAddr;
use mscclpp_host::transport::tcp::{
    ConnectOptions, HostLanding, HostRegion, HostSource, RemoteMemory, TcpConfig, TcpTransport, connect_peers,
};
use mscclpp_host::transport::{RemoteSpan, Transport};

/// Bytes each rank sends each peer.
const SLOT: usize = 3 << 20;
/// Chunk size (small, so every put is cut and pipelined).
const CHUNK: usize = 64 << 10;

fn main() -> ExitCode {
    match BootstrapConfig::from_env(&EnvSnapshot::capture()) {
        Ok(Some(cfg)) => rank_main(cfg),
        Ok(None) => driver(),
        Err(e) => {
            eprintln!("tcp_procs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn scenario() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--scenario").and_then(|i| args.get(i + 1)).cloned().unwrap_or_default()
}

/// What rank `from` sends rank `to` (every rank can compute every rank's).
fn payload(from: usize, to: usize, len: usize) -> Vec<u8> {
    let mut x = (from as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (to as u64).rotate_left(20) ^ 0x5eed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Rank {
    boot: TcpBootstrap,
    /// Slot p: what this rank sends rank p.
    src: Arc<HostRegion>,
    /// Toward every other rank, in rank order.
    transports: Vec<(usize, TcpTransport)>,
    /// Slot p: what rank p sends here; then one 8-byte counter per rank for atomic adds.
    dst: Arc<HostRegion>,
    /// Signals from each rank.
    sems: Vec<Arc<AtomicU64>>,
}

fn setup(cfg: &BootstrapConfig) -> mscclpp_host::Result<Rank> {
    let boot = TcpBootstrap::connect(cfg)?;
    let (me, n) = (boot.rank(), boot.world_size());
    let src = HostRegion::from_slice(&(0..n).flat_map(|p| payload(me, p, SLOT)).collect::<Vec<_>>());
    let dst = HostRegion::filled(n * SLOT + 8 * n, 0xA5);
    let sems: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let peers: Vec<PeerAddr> = (0..n).filter(|&p| p != me).map(|rank| PeerAddr { rank, same_machine: true }).collect();
    let tcp = TcpConfig { chunk_bytes: CHUNK, slots: 4, timeout: cfg.timeout };
    let links = connect_peers(&boot, &peers, &ConnectOptions { max_chunk: CHUNK as u64, ..Default::default() })?;
    let mut transports = Vec::new();
    for link in links {
        let p = link.peer;
        let source = HostSource::new(vec![src.clone()], tcp.slots, CHUNK)?;
        // Each peer signals its own semaphore here.
        let landing = HostLanding::new(vec![dst.clone()], vec![sems[p].clone()], tcp.slots, CHUNK)?;
        let remote = RemoteMemory { regions: vec![(n * SLOT + 8 * n) as u64], semaphores: 1 };
        transports.push((p, TcpTransport::start(link, source, landing, remote, &tcp)?));
    }
    Ok(Rank { boot, src, transports, dst, sems })
}

fn check(cond: bool, what: impl FnOnce() -> String) -> mscclpp_host::Result<()> {
    if cond { Ok(()) } else { Err(mscclpp_host::Error::Protocol(what())) }
}

fn rank_main(cfg: BootstrapConfig) -> ExitCode {
    let me = cfg.rank.rank;
    let scenario = scenario();
    let outcome = (|| -> mscclpp_host::Result<()> {
        let mut r = setup(&cfg)?;
        let n = r.boot.world_size();
        let src = r.src.clone();
        let slot_of = |p: usize| src.addr() + (p * SLOT) as u64;
        match scenario.as_str() {
            "ok" => {
                // Rank `me` puts slot p of its source into slot `me` of rank p, in pieces, each
                // followed by a signal; then adds (me + 1) to counter `me` at rank p, three times.
                let pieces = [1usize, 4095, 70_000, SLOT - 74_096];
                for (p, t) in &mut r.transports {
                    let (p, mut off) = (*p, 0usize);
                    for len in pieces {
                        let dst = RemoteSpan { region: 0, offset: (me * SLOT + off) as u64 };
                        t.put(dst, slot_of(p) + off as u64, len as u64)?;
                        t.signal(0)?;
                        off += len;
                    }
                    for _ in 0..3 {
                        t.atomic_add(RemoteSpan { region: 0, offset: (n * SLOT + 8 * me) as u64 }, me as u64 + 1)?;
                    }
                    t.flush(Instant::now() + Duration::from_secs(30))?;
                }
                // Everyone's data here: wait for all their signals, then check every byte.
                let deadline = Instant::now() + Duration::from_secs(30);
                for p in (0..n).filter(|&p| p != me) {
                    while r.sems[p].load(Ordering::Acquire) < pieces.len() as u64 {
                        check(Instant::now() < deadline, || format!("signals from rank {p}"))?;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                r.boot.barrier()?; // every flush returned: every atomic add has landed everywhere
                let got = r.dst.to_vec();
                for p in 0..n {
                    let slot = &got[p * SLOT..(p + 1) * SLOT];
                    if p == me {
                        check(slot.iter().all(|&b| b == 0xA5), || "own slot written".into())?;
                    } else {
                        check(slot == payload(p, me, SLOT).as_slice(), || format!("data from rank {p}"))?;
                        let c = r.dst.read_u64(n * SLOT + 8 * p).unwrap();
                        let want = u64::from_le_bytes([0xA5; 8]).wrapping_add(3 * (p as u64 + 1));
                        check(c == want, || format!("counter of rank {p}: {c:#x}, expected {want:#x}"))?;
                    }
                }
                for (_, t) in &mut r.transports {
                    t.start_close();
                }
                for (_, t) in &mut r.transports {
                    t.close(Instant::now() + Duration::from_secs(30))?;
                }
            }
            "killed" => {
                r.boot.barrier()?;
                if me == 2 {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(200));
                let t = Instant::now();
                for (p, tr) in &mut r.transports {
                    let dst = RemoteSpan { region: 0, offset: (me * SLOT) as u64 };
                    let sent = tr
                        .put(dst, slot_of(*p), SLOT as u64)
                        .and_then(|()| tr.flush(Instant::now() + Duration::from_secs(30)));
                    if let Err(e) = sent {
                        println!("rank {me}: toward rank {p}: {e} (after {} ms)", t.elapsed().as_millis());
                    }
                }
            }
            "stopped" => {
                // Rank 1 tells rank 0 its process id, then freezes itself (like a hung machine:
                // nothing reads, nothing answers). Rank 0 puts only once the kernel reports rank 1
                // stopped: before that, rank 1's receiver threads could still take the data and
                // confirm the flush.
                if me == 1 {
                    r.boot.send(0, &std::process::id().to_le_bytes())?;
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
                }
                let pid = u32::from_le_bytes(
                    r.boot.recv(1)?.try_into().map_err(|_| mscclpp_host::Error::Protocol("a bad process id".into()))?,
                );
                let stat = format!("/proc/{pid}/stat");
                let stopped = || {
                    std::fs::read_to_string(&stat).is_ok_and(|s| {
                        s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("T")
                    })
                };
                let waiting = Instant::now();
                while !stopped() {
                    check(waiting.elapsed() < Duration::from_secs(20), || format!("rank 1 (pid {pid}) never stopped"))?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                let t = Instant::now();
                let (p, tr) = &mut r.transports[0];
                let dst = RemoteSpan { region: 0, offset: (me * SLOT) as u64 };
                let e = tr
                    .put(dst, slot_of(*p), SLOT as u64)
                    .and_then(|()| tr.flush(Instant::now() + FROZEN_FLUSH))
                    .expect_err("a frozen peer confirmed a flush");
                println!("rank {me}: toward rank {p}: {e} (after {} ms)", t.elapsed().as_millis());
                // A failure, so that the launcher kills the frozen rank after its grace.
                std::process::exit(1);
            }
            other => panic!("unknown scenario {other:?}"),
        }
        Ok(())
    })();
    procs::rank_exit(me, outcome)
}

// ----------------------------------------------------------------------------------------------
// The driver.

fn launch(scenario: &str, ranks: usize, timeout_s: f64, grace: Duration) -> Run {
    procs::launch(ranks, scenario, timeout_s, Duration::from_secs(120), grace)
}

fn three_ranks_exchange_every_byte() -> Check {
    let run = launch("ok", 3, 30.0, Duration::from_secs(2));
    ensure(run.result.is_ok(), || format!("launch failed: {:?}", run.result))?;
    for r in 0..3 {
        ensure(run.has(&format!("[rank {r}] rank {r}: ok")), || format!("rank {r} did not report ok"))?;
    }
    Ok(())
}

fn a_killed_peer_fails_the_flush_by_name_at_once() -> Check {
    // A 20 s timeout: failing well inside it shows the closed connection was noticed.
    let run = launch("killed", 3, 20.0, Duration::from_secs(5));
    for r in [0, 1] {
        let l = run
            .line(&format!("[rank {r}] rank {r}: toward rank 2: "))
            .ok_or_else(|| format!("rank {r} reported no failure toward rank 2"))?;
        ensure(l.contains("connection to rank 2 lost"), || format!("rank {r}: {l}"))?;
        println!("  {l}");
    }
    ensure(run.took < Duration::from_secs(15), || format!("took {:?}", run.took))
}

/// How long the flush toward a frozen peer may wait.
const FROZEN_FLUSH: Duration = Duration::from_secs(2);

fn a_frozen_peer_fails_the_flush_by_name_within_the_timeout() -> Check {
    // A generous bootstrap timeout (a loaded machine may be slow to start the ranks); the flush
    // under test gets FROZEN_FLUSH.
    let run = launch("stopped", 2, 20.0, Duration::from_secs(1));
    let l = run.line("[rank 0] rank 0: toward rank 1: ").ok_or_else(|| {
        format!("rank 0 reported no failure toward rank 1 ({:?}); the ranks printed {:?}", run.result, run.lines)
    })?;
    ensure(l.contains("timed out") && l.contains("rank 1"), || l.clone())?;
    println!("  {l}");
    ensure(run.took < Duration::from_secs(30), || format!("took {:?}", run.took))
}

fn driver() -> ExitCode {
    let tests: [(&str, Test); 3] = [
        ("three_ranks_exchange_every_byte", three_ranks_exchange_every_byte),
        ("a_killed_peer_fails_the_flush_by_name_at_once", a_killed_peer_fails_the_flush_by_name_at_once),
        (
            "a_frozen_peer_fails_the_flush_by_name_within_the_timeout",
            a_frozen_peer_fails_the_flush_by_name_within_the_timeout,
        ),
    ];
    procs::driver(&tests)
}
