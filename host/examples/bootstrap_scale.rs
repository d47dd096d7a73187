//! How the TCP bootstrap scales with the number of ranks: starts N processes of itself on this
//! machine with the built-in launcher, for each N asked for, and prints the time of the
//! rendezvous, of an all-gather and of a barrier (and, for comparison, of an all-gather done as
//! a ring of point-to-point messages over the same bootstrap). No GPU is used.
//!
//! ```text
//! ulimit -n 20000      # every rank holds a few sockets; rank 0 holds one per rank
//! cargo run --release -p mscclpp-host --example bootstrap_scale                # 8 .. 512 ranks
//! cargo run --release -p mscclpp-host --example bootstrap_scale -- 64 128      # these sizes only
//! cargo run --release -p mscclpp-host --example bootstrap_scale -- --iters 50 --bytes 1024 256
//! cargo run --release -p mscclpp-host --example bootstrap_scale -- --repeat 5      # medians of 5
//! ```
//!
//! What is measured, per world size N (the figures in `docs/bootstrap-scaling.md` come from it):
//!
//! * `started`: from just before the launcher starts the first process to the start of the last
//!   one (starting N processes, the launcher's and the system's share);
//! * `launch`: from that same moment to the moment the last rank's `TcpBootstrap::connect`
//!   returned (includes starting N processes);
//! * `rendezvous`: from the start of the last process to start to that same moment (the
//!   bootstrap's own share: how long the job waits once everyone is there);
//! * `all_gather`, `barrier`, `ring`: the mean time of one operation over `--iters` repetitions,
//!   the slowest rank's (each rank times its own loop between two barriers); `all_gather`
//!   contributes `--bytes` bytes per rank (default 64, about what a memory handle takes);
//! * `r0 cpu`: the CPU time rank 0's process spent (all its threads) in `connect`, and per
//!   all-gather and per barrier: the part of the work that only rank 0 does, which is what a
//!   large job on many machines waits for (every other rank does a constant amount, in parallel).
//!
//! With `--repeat R` each world size runs R times and the table shows the median of each column.
//! Rank 0 prints one line for the driver (`SCALE ...`); the driver prints a table.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, BootstrapExt, EnvSnapshot, Launcher, TcpBootstrap};

/// World sizes measured when none are given.
const DEFAULT_SIZES: [usize; 7] = [8, 16, 32, 64, 128, 256, 512];
/// The driver's wall-clock time (nanoseconds since the epoch) just before it starts the ranks.
const ENV_T0: &str = "MSCCLPP_RS_SCALE_T0";
/// Tag of the ring all-gather's messages.
const RING_TAG: u32 = 0x5ca1e;

/// CPU seconds this process has used so far (user and system, all threads).
fn cpu_s() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
        t(u.user_time()) + t(u.system_time())
    })
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

struct Opts {
    sizes: Vec<usize>,
    iters: usize,
    bytes: usize,
    repeat: usize,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts { sizes: Vec::new(), iters: 20, bytes: 64, repeat: 1 };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            args.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--iters" => o.iters = value("--iters")?.max(1),
            "--bytes" => o.bytes = value("--bytes")?,
            "--repeat" => o.repeat = value("--repeat")?.max(1),
            n => o.sizes.push(n.parse().map_err(|_| format!("unknown argument {n:?}"))?),
        }
    }
    if o.sizes.is_empty() {
        o.sizes = DEFAULT_SIZES.to_vec();
    }
    Ok(o)
}

fn main() -> ExitCode {
    let started_ns = now_ns();
    let result = match BootstrapConfig::from_env(&EnvSnapshot::capture()) {
        Ok(Some(cfg)) => opts().and_then(|o| rank(&cfg, &o, started_ns).map_err(|e| e.to_string())),
        Ok(None) => opts().and_then(|o| driver(&o)),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bootstrap_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Rank `r`'s all-gather contribution.
fn contribution(r: usize, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i * 7 + r) as u8).collect()
}

/// An all-gather as N-1 steps around the ring (each rank forwards what it got last), over
/// point-to-point messages: what an all-gather costs when every rank sends N-1 messages.
fn ring_all_gather(b: &TcpBootstrap, data: &[u8]) -> mscclpp_host::Result<Vec<Vec<u8>>> {
    let (me, n) = (b.rank(), b.world_size());
    let mut out = vec![Vec::new(); n];
    out[me] = data.to_vec();
    for step in 0..n - 1 {
        let send = (me + n - step) % n;
        b.send_tagged((me + 1) % n, RING_TAG, &out[send])?;
        let got = (me + n - step - 1) % n;
        out[got] = b.recv_tagged((me + n - 1) % n, RING_TAG)?;
    }
    Ok(out)
}

/// Mean seconds of one `op` over `iters` runs, between two barriers, and the CPU seconds this
/// process spent per run.
fn timed(
    b: &TcpBootstrap,
    iters: usize,
    mut op: impl FnMut() -> mscclpp_host::Result<()>,
) -> mscclpp_host::Result<(f64, f64)> {
    b.barrier()?;
    let (t, cpu) = (Instant::now(), cpu_s());
    for _ in 0..iters {
        op()?;
    }
    let per = ((t.elapsed().as_secs_f64()) / iters as f64, (cpu_s() - cpu) / iters as f64);
    b.barrier()?;
    Ok(per)
}

fn rank(cfg: &BootstrapConfig, o: &Opts, started_ns: u64) -> mscclpp_host::Result<()> {
    let cpu = cpu_s();
    let b = TcpBootstrap::connect(cfg)?;
    let connected_ns = now_ns();
    let connect_cpu = cpu_s() - cpu;
    let (me, n) = (b.rank(), b.world_size());
    let data = contribution(me, o.bytes);
    let all_gather = timed(&b, o.iters, || {
        let all = b.all_gather(&data)?;
        assert!(all.iter().enumerate().all(|(r, v)| *v == contribution(r, o.bytes)), "wrong all_gather result");
        Ok(())
    })?;
    let barrier = timed(&b, o.iters, || b.barrier())?;
    let ring = timed(&b, o.iters, || {
        let all = ring_all_gather(&b, &data)?;
        assert!(all.iter().enumerate().all(|(r, v)| *v == contribution(r, o.bytes)), "wrong ring result");
        Ok(())
    })?;
    let row = [started_ns as f64, connected_ns as f64, all_gather.0, barrier.0, ring.0];
    let rows = b.all_gather_pod(&row)?;
    if me == 0 {
        let col = |i: usize| rows.iter().map(|r| r[i]).fold(f64::MIN, f64::max);
        let t0: f64 = std::env::var(ENV_T0).ok().and_then(|v| v.parse().ok()).unwrap_or(col(0));
        println!(
            "SCALE n={n} started_ms={:.1} launch_ms={:.1} rendezvous_ms={:.1} all_gather_us={:.1} barrier_us={:.1} \
             ring_us={:.1} r0_connect_cpu_ms={:.1} r0_all_gather_cpu_us={:.1} r0_barrier_cpu_us={:.1}",
            (col(0) - t0) / 1e6,
            (col(1) - t0) / 1e6,
            (col(1) - col(0)) / 1e6,
            col(2) * 1e6,
            col(3) * 1e6,
            col(4) * 1e6,
            connect_cpu * 1e3,
            all_gather.1 * 1e6,
            barrier.1 * 1e6
        );
    }
    b.barrier()
}

/// The columns of a result line, in table order.
const KEYS: [&str; 9] = [
    "started_ms=",
    "launch_ms=",
    "rendezvous_ms=",
    "all_gather_us=",
    "barrier_us=",
    "ring_us=",
    "r0_connect_cpu_ms=",
    "r0_all_gather_cpu_us=",
    "r0_barrier_cpu_us=",
];

fn fields(line: &str) -> Option<Vec<f64>> {
    KEYS.iter().map(|k| line.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse().ok())).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn driver(o: &Opts) -> Result<(), String> {
    println!(
        "bootstrap_scale: {} iterations, {}-byte all-gather contributions, {} CPU cores{}",
        o.iters,
        o.bytes,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if o.repeat > 1 { format!(", medians of {} runs", o.repeat) } else { String::new() }
    );
    println!(
        "{:>6} {:>11} {:>10} {:>14} {:>15} {:>12} {:>13} | {:>17} {:>20} {:>17}",
        "ranks",
        "started ms",
        "launch ms",
        "rendezvous ms",
        "all_gather us",
        "barrier us",
        "ring ag us",
        "r0 cpu connect ms",
        "r0 cpu all_gather us",
        "r0 cpu barrier us"
    );
    let mut failed = false;
    for &n in &o.sizes {
        let mut rows = Vec::new();
        for _ in 0..o.repeat {
            let t = Instant::now();
            let (r, lines) = Launcher::current_exe(n)
                .map_err(|e| e.to_string())?
                .args(["--iters", &o.iters.to_string(), "--bytes", &o.bytes.to_string()])
                .env(ENV_T0, now_ns().to_string())
                .deadline(Duration::from_secs(300))
                .run_captured();
            match (r, lines.iter().find_map(|l| l.contains("SCALE ").then(|| fields(l)).flatten())) {
                (Ok(()), Some(row)) => rows.push(row),
                (r, _) => {
                    failed = true;
                    let why = r.err().map(|e| e.to_string()).unwrap_or_else(|| "no result line".into());
                    println!("{n:>6} failed after {:.1} s: {why}", t.elapsed().as_secs_f64());
                    for l in lines.iter().filter(|l| !l.ends_with(": ok")).take(5) {
                        println!("         {l}");
                    }
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let m: Vec<f64> = (0..KEYS.len()).map(|i| median(rows.iter().map(|r| r[i]).collect())).collect();
        println!(
            "{n:>6} {:>11.1} {:>10.1} {:>14.1} {:>15.1} {:>12.1} {:>13.1} | {:>17.1} {:>20.1} {:>17.1}",
            m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]
        );
    }
    if failed { Err("some sizes failed".into()) } else { Ok(()) }
}
