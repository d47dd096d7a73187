//! The TCP transport against a raw TCP stream between the same two processes, in the same run.
//!
//! ```text
//! tcp_bench [--ranks 2] [--host-memory] [--max-mib N] [--chunk-kib N] [--slots N] [--rounds N]
//! mpirun -np 2 tcp_bench
//! tcp_bench --threads                # both ranks as threads of one process
//! ```
//!
//! Started by hand it launches itself as 2 ranks (the built-in launcher); under mpirun or Slurm it
//! is one of them. With `--threads` both ranks run in this process (on one GPU they then share
//! its context: GPU work of the two ranks needs no switch between processes' contexts). Rank 0 sends, rank 1 receives. For every size from 1 MiB to `--max-mib`
//! (default 1 GiB with GPUs, 256 MiB on host memory), alternating in each iteration:
//!
//! * **raw TCP**: rank 0 writes the bytes into a plain TCP connection (`TCP_NODELAY`; loopback
//!   on one machine, else between the bootstrap's interfaces, as the transport's)
//!   from one reused 4 MiB host buffer, rank 1 reads them into another and answers one byte; the
//!   time until rank 0 has the answer. This is the ceiling of the transport on one machine: the
//!   same kernel path, from memory that stays in cache, without staging copies, framing or
//!   landing.
//! * **transport put**: rank 0's `put` of the bytes from its source memory into rank 1's
//!   destination memory, then `flush` (which returns once rank 1 confirms it has all landed).
//!   With GPUs the memory is GPU memory (rank r on GPU `local_rank % count`): device-to-host
//!   staging, TCP, host-to-device landing, pipelined; with `--host-memory` (or no GPU) it is host
//!   memory, written to the socket from the source region and read into the destination region
//!   in place (no staging copies).
//!
//! Then an 8-byte put with a signal, ping-ponged: each side waits for the other's signal (a
//! counter in pinned host memory that the landing's stream writes, or a host atomic), against an
//! 8-byte ping-pong on the raw connection. Medians; the first transport put of every size is
//! checked byte for byte at rank 1 (random data, poisoned destination).
//!
//! Rank 0 prints a table and, when `MSCCLPP_RS_BENCH_OUT` names a file, appends JSON lines to it
//! (`suite`, `variant`, `seconds`, `bytes`, `ops`, `ratio` to the baseline, `baseline`), as the
//! other benches of this repository do. It ends with the verdict on the target: at least 0.8 of
//! the raw stream's bandwidth at 256 MiB and above.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mscclpp_host::bootstrap::launcher::{Role, role};
use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, BootstrapExt, RankInfo, TcpBootstrap, Token};
use mscclpp_host::topology::{HostIdentity, RankPlace, Topology};
use mscclpp_host::transport::engine::MemoryRegion;
use mscclpp_host::transport::tcp::connect::PeerAddr;
use mscclpp_host::transport::tcp::cuda::{CudaLanding, CudaSource};
use mscclpp_host::transport::tcp::{
    ConnectOptions, HostLanding, HostRegion, HostSource, Link, RemoteMemory, TcpConfig, TcpTransport, connect_peers,
};
use mscclpp_host::transport::{RemoteSpan, Transport, TransportChoice};
use mscclpp_host::{DeviceBuffer, Error, Gpu, PinnedBuffer, Result};

const MIB: usize = 1 << 20;
const POISON: u8 = 0xA5;

struct Options {
    host_memory: bool,
    max: usize,
    chunk: usize,
    slots: usize,
    rounds: usize,
}

fn options() -> Result<Options> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |name: &str| -> Result<Option<usize>> {
        match args.iter().position(|a| a == name) {
            None => Ok(None),
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| Error::InvalidArgument(format!("{name} takes a number"))),
        }
    };
    let host_memory = args.iter().any(|a| a == "--host-memory") || mscclpp_host::gpu::inventory().devices.is_empty();
    let default = TcpConfig::default();
    Ok(Options {
        host_memory,
        max: num("--max-mib")?.unwrap_or(if host_memory { 256 } else { 1024 }) * MIB,
        chunk: num("--chunk-kib")?.map_or(default.chunk_bytes, |k| k << 10),
        slots: num("--slots")?.unwrap_or(default.slots),
        rounds: num("--rounds")?.unwrap_or(2000),
    })
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--threads") {
        return threads();
    }
    match role(2) {
        Ok(Role::Rank(cfg)) => match run(&cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("rank {}: tcp_bench FAILED: {e}", cfg.rank.rank);
                ExitCode::FAILURE
            }
        },
        Ok(Role::Launched { outcome: Ok(()), .. }) => ExitCode::SUCCESS,
        Ok(Role::Threads { .. }) => threads(),
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("tcp_bench: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--threads`: both ranks in this process, one thread each (with GPUs, sharing the GPU's one
/// context when there is one GPU), so that no GPU work has to switch between processes.
fn threads() -> ExitCode {
    let port = match std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => {
            println!("tcp_bench: FAILED: no free port: {e}");
            return ExitCode::FAILURE;
        }
    };
    let token = Token::random();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            std::thread::spawn(move || {
                let rank = RankInfo::single_node(r, 2).map_err(|e| (r, e))?;
                run(&BootstrapConfig::new(rank, format!("127.0.0.1:{port}"), token)).map_err(|e| (r, e))
            })
        })
        .collect();
    let mut code = ExitCode::SUCCESS;
    for h in ranks {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err((r, e))) => {
                println!("rank {r}: tcp_bench FAILED: {e}");
                code = ExitCode::FAILURE;
            }
            Err(_) => {
                println!("tcp_bench: FAILED: a rank's thread panicked");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// This rank's memory: where puts read from, where the peer's land, the counter its signals
/// increment, and a way to read and poison the destination.
enum Memory {
    Gpu { gpu: Arc<Gpu>, src: DeviceBuffer, dst: DeviceBuffer, sem: Arc<PinnedBuffer> },
    Host { src: Arc<HostRegion>, dst: Arc<HostRegion>, sem: Arc<AtomicU64> },
}

impl Memory {
    fn src_addr(&self) -> u64 {
        match self {
            Memory::Gpu { src, .. } => src.addr(),
            Memory::Host { src, .. } => src.addr(),
        }
    }
    fn signals(&self) -> u64 {
        match self {
            // SAFETY: 8 bytes of pinned memory, 8-aligned, alive as long as `sem`.
            Memory::Gpu { sem, .. } => unsafe { AtomicU64::from_ptr(sem.host_ptr().cast()) }.load(Ordering::Acquire),
            Memory::Host { sem, .. } => sem.load(Ordering::Acquire),
        }
    }
    fn poison(&self) -> Result<()> {
        match self {
            Memory::Gpu { gpu, dst, .. } => {
                dst.fill(POISON)?;
                gpu.synchronize()
            }
            Memory::Host { dst, .. } => dst.write(0, &vec![POISON; dst.len()]),
        }
    }
    fn dst_prefix(&self, len: usize) -> Result<Vec<u8>> {
        match self {
            Memory::Gpu { dst, .. } => {
                let mut v = vec![0u8; len];
                dst.read(0, &mut v)?;
                Ok(v)
            }
            Memory::Host { dst, .. } => Ok(dst.to_vec()[..len].to_vec()),
        }
    }
}

/// Random bytes every rank can recompute.
fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn run(cfg: &BootstrapConfig) -> Result<()> {
    let o = options()?;
    let boot = TcpBootstrap::connect(cfg)?;
    let (me, n) = (boot.rank(), boot.world_size());
    if n != 2 {
        return Err(Error::InvalidArgument(format!("tcp_bench runs on 2 ranks, not {n}")));
    }
    let peer = 1 - me;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let seed = boot.all_gather_pod(&(now ^ u64::from(std::process::id())))?[0];
    let tcp = TcpConfig { chunk_bytes: o.chunk, slots: o.slots, timeout: cfg.timeout.max(Duration::from_secs(60)) };
    let src_data = data(seed ^ me as u64, o.max);
    let memory = if o.host_memory {
        Memory::Host {
            src: HostRegion::from_slice(&src_data),
            dst: HostRegion::filled(o.max, POISON),
            sem: Arc::new(AtomicU64::new(0)),
        }
    } else {
        let count = mscclpp_host::gpu::inventory().devices.len();
        let gpu = Gpu::open(cfg.rank.gpu_index(count).unwrap_or_default())?;
        let src = DeviceBuffer::from_slice(&gpu, &src_data)?;
        let dst = DeviceBuffer::filled(&gpu, o.max, POISON)?;
        let sem = Arc::new(PinnedBuffer::zeroed(&gpu, 8)?);
        Memory::Gpu { gpu, src, dst, sem }
    };
    drop(src_data);
    let opts = ConnectOptions { max_chunk: o.chunk as u64, ..Default::default() };
    // On two machines (as the topology decides) the transport and the raw stream both use the
    // bootstrap's interface; on one, loopback.
    let place = RankPlace {
        host: HostIdentity::this_machine(),
        gpu_ordinal: 0,
        gpu_bus_id: String::new(),
        choice: TransportChoice::from_env()?,
    };
    let same_machine = Topology::exchange_places(&boot, &place)?.same_machine(peer);
    let link = connect_peers(&boot, &[PeerAddr { rank: peer, same_machine }], &opts)?
        .pop()
        .ok_or_else(|| Error::Protocol("no link".into()))?;
    let mut t = start(link, &memory, &o, &tcp)?;
    let mut raw = raw_connection(&boot, me, same_machine)?;
    if me == 0 {
        match &memory {
            Memory::Gpu { gpu, .. } => println!(
                "tcp_bench: GPU memory (rank 0 on GPU {}, {}), chunks of {} KiB, {} slots",
                gpu.ordinal(),
                gpu.info().name,
                o.chunk >> 10,
                o.slots
            ),
            Memory::Host { .. } => println!(
                "tcp_bench: host memory ({}), chunks of {} KiB, {} slots",
                if mscclpp_host::gpu::inventory().devices.is_empty() { "no GPU here" } else { "--host-memory" },
                o.chunk >> 10,
                o.slots
            ),
        }
    }
    // The raw stream writes from (and reads into) one reused 4 MiB buffer: it stays in cache, so
    // the baseline is the connection's own ceiling, not the memory's.
    let mut raw_buf = vec![0x5Au8; 4 * MIB];
    let mut rows = Vec::new();
    let mut size = MIB;
    while size <= o.max {
        let iters = (512 * MIB / size).clamp(3, 20);
        let (mut raw_t, mut put_t) = (Vec::new(), Vec::new());
        // Checked first transfer: poisoned destination, every byte compared at rank 1.
        memory.poison()?;
        boot.barrier()?;
        if me == 0 {
            t.put(RemoteSpan { region: 0, offset: 0 }, memory.src_addr(), size as u64)?;
            t.flush(Instant::now() + tcp.timeout)?;
        }
        boot.barrier()?;
        if me == 1 {
            let got = memory.dst_prefix(size)?;
            if got != data(seed, size) {
                let bad = got.iter().zip(data(seed, size)).filter(|(a, b)| **a != *b).count();
                return Err(Error::Protocol(format!("{bad} of {size} bytes wrong after a put of {size}")));
            }
        }
        for _ in 0..iters {
            boot.barrier()?;
            let start = Instant::now();
            if me == 0 {
                let mut left = size;
                while left > 0 {
                    let n = left.min(raw_buf.len());
                    raw.write_all(&raw_buf[..n]).map_err(io("raw send"))?;
                    left -= n;
                }
                raw.read_exact(&mut [0u8]).map_err(io("raw ack"))?;
                raw_t.push(start.elapsed().as_secs_f64());
            } else {
                let mut left = size;
                while left > 0 {
                    let n = left.min(raw_buf.len());
                    raw.read_exact(&mut raw_buf[..n]).map_err(io("raw receive"))?;
                    left -= n;
                }
                raw.write_all(&[1]).map_err(io("raw ack"))?;
            }
            boot.barrier()?;
            if me == 0 {
                let start = Instant::now();
                t.put(RemoteSpan { region: 0, offset: 0 }, memory.src_addr(), size as u64)?;
                t.flush(Instant::now() + tcp.timeout)?;
                put_t.push(start.elapsed().as_secs_f64());
            }
        }
        rows.push(Row::new(format!("put/{}MiB", size / MIB), median(&mut put_t), median(&mut raw_t), size));
        size *= 4;
    }
    // The 8-byte round trips.
    boot.barrier()?;
    let (mut rtt, mut raw_rtt) = (Vec::new(), Vec::new());
    let batch = (o.rounds / 10).max(1);
    let mut round = 0u64;
    for _ in 0..10 {
        boot.barrier()?;
        let start = Instant::now();
        for _ in 0..batch {
            round += 1;
            if me == 0 {
                put_signal(&mut t, &memory)?;
                wait_signal(&memory, round, tcp.timeout)?;
            } else {
                wait_signal(&memory, round, tcp.timeout)?;
                put_signal(&mut t, &memory)?;
            }
        }
        rtt.push(start.elapsed().as_secs_f64() / batch as f64);
        boot.barrier()?;
        let start = Instant::now();
        let mut w = [0u8; 8];
        for _ in 0..batch {
            if me == 0 {
                raw.write_all(&w).map_err(io("raw ping"))?;
                raw.read_exact(&mut w).map_err(io("raw pong"))?;
            } else {
                raw.read_exact(&mut w).map_err(io("raw ping"))?;
                raw.write_all(&w).map_err(io("raw pong"))?;
            }
        }
        raw_rtt.push(start.elapsed().as_secs_f64() / batch as f64);
    }
    rows.push(Row { ops: 1, ..Row::new("put_signal_rtt/8B".into(), median(&mut rtt), median(&mut raw_rtt), 0) });
    boot.barrier()?;
    t.start_close();
    t.close(Instant::now() + tcp.timeout)?;
    if me == 0 {
        report(&rows, o.host_memory);
    }
    Ok(())
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context: what.into(), source }
}

fn start(link: Link, memory: &Memory, o: &Options, tcp: &TcpConfig) -> Result<TcpTransport> {
    let remote = RemoteMemory { regions: vec![o.max as u64], semaphores: 1 };
    match memory {
        Memory::Gpu { gpu, src, dst, sem } => {
            let region = |b: &DeviceBuffer| MemoryRegion { base: b.addr(), bytes: b.len() as u64 };
            // SAFETY: the buffers and the pinned counter live in `memory`, which outlives the
            // transport (closed at the end of `run`, before `memory` is dropped); only this
            // landing writes the counter.
            let (source, landing) = unsafe {
                (
                    CudaSource::new(gpu, vec![region(src)], tcp)?,
                    CudaLanding::new(gpu, vec![region(dst)], vec![sem.device_addr()], tcp)?,
                )
            };
            TcpTransport::start(link, source, landing, remote, tcp)
        }
        Memory::Host { src, dst, sem } => {
            let source = HostSource::new(vec![src.clone()], o.slots, o.chunk)?;
            let landing = HostLanding::new(vec![dst.clone()], vec![sem.clone()], o.slots, o.chunk)?;
            TcpTransport::start(link, source, landing, remote, tcp)
        }
    }
}

fn put_signal(t: &mut TcpTransport, memory: &Memory) -> Result<()> {
    t.put(RemoteSpan { region: 0, offset: 0 }, memory.src_addr(), 8)?;
    t.signal(0)
}

fn wait_signal(memory: &Memory, want: u64, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut spins = 0u32;
    while memory.signals() < want {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && Instant::now() > deadline {
            return Err(Error::Timeout { after: timeout, waiting_for: format!("signal {want} from the peer") });
        }
        // A short spin, then yield: on a machine with few cores the transport's own threads
        // need them.
        if spins < 2000 { std::hint::spin_loop() } else { std::thread::yield_now() }
    }
    Ok(())
}

/// A plain TCP connection between the two ranks, over loopback on one machine, else between the
/// bootstrap's interfaces: rank 1 listens, rank 0 connects.
fn raw_connection(boot: &TcpBootstrap, me: usize, same_machine: bool) -> Result<TcpStream> {
    let ip = match boot.hints().local_ip {
        Some(ip) if !same_machine => ip,
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let listener = TcpListener::bind((ip, 0)).map_err(io("raw listen"))?;
    let addr = listener.local_addr().map_err(io("raw listen"))?.to_string();
    let addrs = boot.all_gather(addr.as_bytes())?;
    let s = if me == 0 {
        let peer = String::from_utf8_lossy(&addrs[1]).into_owned();
        TcpStream::connect(peer.as_str()).map_err(io("raw connect"))?
    } else {
        listener.accept().map_err(io("raw accept"))?.0
    };
    s.set_nodelay(true).map_err(io("raw nodelay"))?;
    Ok(s)
}

/// The median (rank 1 times nothing: NaN).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Row {
    variant: String,
    seconds: f64,
    baseline: f64,
    bytes: usize,
    ops: usize,
}

impl Row {
    fn new(variant: String, seconds: f64, baseline: f64, bytes: usize) -> Self {
        Self { variant, seconds, baseline, bytes, ops: 0 }
    }
    fn baseline_name(&self) -> String {
        match self.variant.split_once('/') {
            Some(("put", size)) => format!("raw_tcp/{size}"),
            Some((_, size)) => format!("raw_tcp_rtt/{size}"),
            None => "raw_tcp".into(),
        }
    }
}

fn report(rows: &[Row], host_memory: bool) {
    println!("\n== tcp_transport ({}): medians ==", if host_memory { "host memory" } else { "GPU memory" });
    println!("{:<22} {:>12} {:>10} {:>12} {:>10} {:>8}", "variant", "time", "GB/s", "raw time", "raw GB/s", "ratio");
    let mut json = String::new();
    let fmt_t = |t: f64| if t < 1e-3 { format!("{:.2} us", t * 1e6) } else { format!("{:.3} ms", t * 1e3) };
    for r in rows {
        let ratio = r.baseline / r.seconds;
        let gbs = |t: f64| if r.bytes > 0 { format!("{:.2}", r.bytes as f64 / t / 1e9) } else { "-".into() };
        println!(
            "{:<22} {:>12} {:>10} {:>12} {:>10} {:>8.3}",
            r.variant,
            fmt_t(r.seconds),
            gbs(r.seconds),
            fmt_t(r.baseline),
            gbs(r.baseline),
            ratio
        );
        let suite = if host_memory { "tcp_transport_host" } else { "tcp_transport" };
        for (variant, seconds, ratio, baseline) in [
            (r.variant.clone(), r.seconds, format!("{ratio:.4}"), r.baseline_name()),
            (r.baseline_name(), r.baseline, "null".into(), String::new()),
        ] {
            json.push_str(&format!(
                "{{\"suite\":\"{suite}\",\"variant\":\"{variant}\",\"seconds\":{seconds:e},\"bytes\":{},\"ops\":{},\"ratio\":{ratio},\"baseline\":\"{baseline}\"}}\n",
                r.bytes, r.ops
            ));
        }
    }
    let big: Vec<&Row> = rows.iter().filter(|r| r.bytes >= 256 * MIB).collect();
    match big.iter().map(|r| r.baseline / r.seconds).reduce(f64::min) {
        Some(worst) => println!(
            "tcp_bench: RESULT target (>= 0.8 of raw TCP at >= 256 MiB): {} (worst {worst:.3})",
            if worst >= 0.8 { "met" } else { "MISSED" }
        ),
        None => {
            println!("tcp_bench: RESULT target (>= 0.8 of raw TCP at >= 256 MiB): not measured (--max-mib below 256)")
        }
    }
    if let Some(p) = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p)
    {
        let _ = f.write_all(json.as_bytes());
    }
}
