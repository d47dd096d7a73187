//! GPU tests of the TCP transport in one process, over loopback: its GPU memory sides (staging
//! out of and landing into GPU memory, signals and atomic adds behind the landings), and a port
//! channel served through it (kernel -> FIFO -> proxy -> TCP -> landing -> semaphore -> kernel).
//! One GPU is enough (both sides then use it); with two, each side has its own. Fresh random
//! data every run, poisoned destinations, host compares.
//!
//! Then host-runtime checks that need one GPU: the communicator's refusals (impossible rank
//! information from a program's bootstrap; memory mapping toward a rank on another machine),
//! `Gpu::synchronize_timeout` giving up on a kernel that still spins, and hidden devices
//! (`CUDA_VISIBLE_DEVICES=""`) seen as an absence.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mscclpp_host::launch::launch_on;
use mscclpp_host::proxy::ProxyBuilder;
use mscclpp_host::semaphore::SemaphoreStorage;
use mscclpp_host::transport::engine::MemoryRegion;
use mscclpp_host::transport::tcp::cuda::{CudaLanding, CudaSource};
use mscclpp_host::transport::tcp::{Link, RemoteMemory, TcpConfig, TcpTransport};
use mscclpp_host::transport::{RemoteSpan, Transport};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig, channel};
use mscclpp_rs::PTX;
use mscclpp_rs::testing::{self, POISON, assert_same, gpus_or_skip};

fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (a, l.accept().unwrap().0)
}

/// Two links between side 0 and side 1 (each side's outgoing is the other's incoming).
fn links(max_chunk: u64) -> (Link, Link) {
    let ((a_out, b_in), (b_out, a_in)) = (socket_pair(), socket_pair());
    (
        Link { peer: 1, outgoing: a_out, incoming: a_in, peer_max_chunk: max_chunk },
        Link { peer: 0, outgoing: b_out, incoming: b_in, peer_max_chunk: max_chunk },
    )
}

fn region(b: &DeviceBuffer) -> MemoryRegion {
    MemoryRegion { base: b.addr(), bytes: b.len() as u64 }
}

/// One side: random source, poisoned destination, one semaphore (a slot's inbound counter).
struct Side {
    gpu: Arc<Gpu>,
    src: DeviceBuffer,
    dst: DeviceBuffer,
    sem: SemaphoreStorage,
}

impl Side {
    fn new(gpu: &Arc<Gpu>, bytes: usize) -> Self {
        Side {
            gpu: gpu.clone(),
            src: DeviceBuffer::from_slice(gpu, &testing::random_bytes(bytes)).unwrap(),
            dst: DeviceBuffer::filled(gpu, bytes, POISON).unwrap(),
            sem: SemaphoreStorage::new(gpu).unwrap(),
        }
    }

    fn transport(&self, link: Link, cfg: &TcpConfig) -> TcpTransport {
        // SAFETY: the buffers and the semaphore live in `self`, which the tests keep alive until
        // the transport is closed; only this landing writes the semaphore's inbound counter.
        let (source, landing) = unsafe {
            (
                CudaSource::new(&self.gpu, vec![region(&self.src)], cfg).unwrap(),
                CudaLanding::new(&self.gpu, vec![region(&self.dst)], vec![self.sem.inbound().addr()], cfg).unwrap(),
            )
        };
        let remote = RemoteMemory { regions: vec![self.dst.len() as u64], semaphores: 1 };
        TcpTransport::start(link, source, landing, remote, cfg).unwrap()
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

/// Random puts both ways at once (unaligned offsets, sizes from 1 byte to many chunks), a signal
/// after each, atomic adds, a flush; then every byte, the signal counts and the sums are checked.
#[test]
fn tcp_transport_moves_gpu_memory_both_ways() {
    let Some(gpus) = gpus_or_skip("tcp_transport_moves_gpu_memory_both_ways", 1) else { return };
    let (g0, g1) = (&gpus[0], &gpus[gpus.len().min(2) - 1]);
    let bytes = 6 << 20;
    // Small chunks and few slots, so that staging, sending and landing overlap and slots recycle.
    let cfg = TcpConfig { chunk_bytes: 64 << 10, slots: 3, timeout: Duration::from_secs(30) };
    let (a, b) = (Side::new(g0, bytes), Side::new(g1, bytes));
    let (la, lb) = links(cfg.chunk_bytes as u64);
    let (mut ta, mut tb) = (a.transport(la, &cfg), b.transport(lb, &cfg));
    // The last 64 bytes of each destination take atomic adds; puts stay below them.
    let limit = bytes - 64;
    let mut pieces = Vec::new();
    let mut at = 0usize;
    while at < limit {
        let len = (testing::random_range(1, 300_000) as usize).min(limit - at);
        pieces.push((at, len));
        at += len;
    }
    let adds: Vec<u64> = (0..16).map(|_| testing::random_range(0, u64::MAX)).collect();
    let drive = |t: &mut TcpTransport, src: u64| {
        for &(off, len) in &pieces {
            t.put(RemoteSpan { region: 0, offset: off as u64 }, src + off as u64, len as u64).unwrap();
            t.signal(0).unwrap();
        }
        for (i, &v) in adds.iter().enumerate() {
            t.atomic_add(RemoteSpan { region: 0, offset: (limit + 8 * (i % 8)) as u64 }, v).unwrap();
        }
        t.flush(deadline()).unwrap();
    };
    std::thread::scope(|s| {
        let (pa, pb) = (a.src.addr(), b.src.addr());
        let (drive, ta) = (&drive, &mut ta);
        let h = s.spawn(move || drive(ta, pa));
        drive(&mut tb, pb);
        h.join().unwrap();
    });
    for (from, to) in [(&a, &b), (&b, &a)] {
        let (src, dst) = (from.src.to_vec::<u8>().unwrap(), to.dst.to_vec::<u8>().unwrap());
        assert_same("data landed by the TCP transport", &dst[..limit], &src[..limit]);
        let poison = u64::from_le_bytes([POISON; 8]);
        let words: Vec<u64> = dst[limit..].as_chunks::<8>().0.iter().map(|c| u64::from_le_bytes(*c)).collect();
        for (i, w) in words.iter().enumerate() {
            let want = adds.iter().skip(i).step_by(8).fold(poison, |acc, &v| acc.wrapping_add(v));
            assert_eq!(*w, want, "atomic-add word {i}");
        }
        assert_eq!(to.sem.read().unwrap().0, pieces.len() as u64, "signals counted at the receiver");
    }
    ta.start_close();
    tb.start_close();
    ta.close(deadline()).unwrap();
    tb.close(deadline()).unwrap();
}

/// A port channel whose destination and semaphore are behind the TCP transport: the kernel on
/// side 0 pushes put_with_signal requests, side 1's kernel waits for each signal and then reads
/// what arrived.
#[test]
fn port_channel_over_the_tcp_transport() {
    // One GPU is enough: the kernels of both sides then share its context (the putter is looked
    // up while the waiter already spins, which `Gpu::module`'s eager loading makes safe).
    let Some(gpus) = gpus_or_skip("port_channel_over_the_tcp_transport", 1) else { return };
    let (g0, g1) = (&gpus[0], &gpus[gpus.len().min(2) - 1]);
    let (count, chunk) = (48usize, 100_000usize);
    let cfg = TcpConfig { chunk_bytes: 256 << 10, slots: 4, timeout: Duration::from_secs(30) };
    let (a, b) = (Side::new(g0, count * chunk), Side::new(g1, count * chunk));
    let (la, lb) = links(cfg.chunk_bytes as u64);
    let ta = a.transport(la, &cfg);
    let mut tb = b.transport(lb, &cfg);
    let mut builder = ProxyBuilder::new(g0).fifo_size(128);
    let src_id = builder.add_memory(region(&a.src)).unwrap();
    let t = builder.add_transport(Box::new(ta));
    let dst_id = builder.add_remote_memory(t, 0, b.dst.len() as u64).unwrap();
    let sem_id = builder.add_remote_semaphore(t, 0).unwrap();
    let proxy = builder.start().unwrap();
    // Side 0 never waits on this channel; its own semaphore is the one side 1's transport signals.
    let chan = channel::port_channel(&proxy, sem_id, dst_id, src_id, &a.sem);
    let out = DeviceBuffer::filled(g1, count * chunk, POISON).unwrap();
    let wait_stream = g1.new_stream().unwrap();
    g1.synchronize().unwrap(); // `out`'s fill is on the default stream; the waiter runs on its own
    let mut wait_args = Args::new()
        .arg(b.sem.host_to_device())
        .arg(count as u32)
        .arg(b.dst.addr())
        .arg(out.addr())
        .arg((count * chunk / 4) as u32);
    // SAFETY: the kernels take these parameters in order with matching types; every buffer
    // outlives the synchronizes below.
    unsafe {
        // The waiter on a stream of its own: with one GPU (g0 == g1) the putter must not queue
        // behind it on the same stream.
        let wait_fn = g1.function(PTX, "port_wait_copy").unwrap();
        launch_on(g1, &wait_stream, &wait_fn, LaunchConfig::new(1, 256), &mut wait_args).unwrap();
        let put_args = Args::new().arg(chan).arg(chunk as u64).arg(count as u32);
        g0.launch(PTX, "port_put_signal", LaunchConfig::new(1, 32), put_args).unwrap();
    }
    g0.synchronize_timeout(Duration::from_secs(60)).unwrap();
    wait_stream.synchronize().unwrap();
    g1.synchronize_timeout(Duration::from_secs(60)).unwrap();
    proxy.check().unwrap();
    assert_same("what side 1 read after each signal", &out.to_vec::<u8>().unwrap(), &a.src.to_vec::<u8>().unwrap());
    assert_eq!(b.sem.read().unwrap(), (count as u64, count as u64), "(signals, waits) on side 1");
    // Side 1 ends its side first (its Close goes out), then side 0's proxy flushes and closes.
    tb.start_close();
    proxy.stop().unwrap();
    tb.close(deadline()).unwrap();
}

/// A bootstrap of a program's own, for one process: rank information as given, and this rank's
/// place for the topology exchange, followed by those of the ranks it stands in for (`others`);
/// anything else it is asked to exchange is refused, so a builder that got past its checks
/// fails with this bootstrap's error instead.
struct StandIn {
    info: mscclpp_host::bootstrap::RankInfo,
    others: Vec<mscclpp_host::topology::RankPlace>,
    gathers: std::sync::Mutex<usize>,
}

impl StandIn {
    fn new(rank: usize, world_size: usize, others: Vec<mscclpp_host::topology::RankPlace>) -> Arc<Self> {
        let info = mscclpp_host::bootstrap::RankInfo {
            rank,
            world_size,
            local_rank: 0,
            local_size: 1,
            source: mscclpp_host::bootstrap::RankSource::Launcher,
        };
        Arc::new(StandIn { info, others, gathers: std::sync::Mutex::new(0) })
    }
}

impl mscclpp_host::Bootstrap for StandIn {
    fn info(&self) -> &mscclpp_host::bootstrap::RankInfo {
        &self.info
    }
    fn all_gather(&self, data: &[u8]) -> mscclpp_host::Result<Vec<Vec<u8>>> {
        let mut n = self.gathers.lock().unwrap();
        *n += 1;
        if *n > 1 {
            return Err(mscclpp_host::Error::Unsupported("the stand-in bootstrap exchanges only places".into()));
        }
        Ok(std::iter::once(data.to_vec()).chain(self.others.iter().map(|p| p.encode())).collect())
    }
    fn barrier(&self) -> mscclpp_host::Result<()> {
        Err(mscclpp_host::Error::Unsupported("the stand-in bootstrap has no barrier".into()))
    }
    fn send_tagged(&self, _: usize, _: u32, _: &[u8]) -> mscclpp_host::Result<()> {
        Err(mscclpp_host::Error::Unsupported("the stand-in bootstrap sends nothing".into()))
    }
    fn recv_tagged(&self, _: usize, _: u32) -> mscclpp_host::Result<Vec<u8>> {
        Err(mscclpp_host::Error::Unsupported("the stand-in bootstrap receives nothing".into()))
    }
}

/// A communicator over a bootstrap whose `RankInfo` is impossible (rank 2 of 2) refuses it:
/// `try_new` at once, `new` at the first call that relies on it (before any exchange: the
/// stand-in would answer the place exchange).
#[test]
fn a_communicator_refuses_impossible_rank_information() {
    let Some(gpus) = gpus_or_skip("a_communicator_refuses_impossible_rank_information", 1) else { return };
    use mscclpp_host::comm::Communicator;
    let g = &gpus[0];
    let why = "rank 2 is not below the world size 2";
    let refused = |e: mscclpp_host::Error| {
        assert!(matches!(&e, mscclpp_host::Error::InvalidArgument(m) if m.contains(why)), "{e}");
    };
    refused(Communicator::try_new(StandIn::new(2, 2, vec![]), g.clone()).unwrap_err());
    let c = Communicator::new(StandIn::new(2, 2, vec![]), g.clone());
    let buf = DeviceBuffer::alloc_exportable(g, 4096).unwrap();
    refused(c.topology().unwrap_err());
    refused(c.exchange(&buf).map(drop).unwrap_err());
    refused(c.memory_semaphores().map(drop).unwrap_err());
    refused(c.memory_channels(&buf, 1024).map(drop).unwrap_err());
    refused(c.switch_channels(&buf, 1).map(drop).unwrap_err());
    refused(c.port_channels(&buf, &buf).map(drop).unwrap_err());
}

/// Toward a rank on another machine, everything that maps the peer's memory is refused with
/// `Error::OffMachine` naming the peer and why, before any memory is exchanged; the topology
/// itself is fine.
#[test]
fn mapping_toward_a_rank_on_another_machine_is_refused_by_name() {
    let Some(gpus) = gpus_or_skip("mapping_toward_a_rank_on_another_machine_is_refused_by_name", 1) else { return };
    use mscclpp_host::comm::Communicator;
    use mscclpp_host::topology::{HostIdentity, RankPlace};
    use mscclpp_host::transport::{TransportChoice, TransportKind};
    let g = &gpus[0];
    let elsewhere = RankPlace {
        host: HostIdentity { machine: "another-boot-id".into(), hostname: "node-elsewhere".into() },
        gpu_ordinal: 0,
        gpu_bus_id: String::new(),
        choice: TransportChoice::Auto,
    };
    let c = Communicator::new(StandIn::new(0, 2, vec![elsewhere]), g.clone());
    let t = c.topology().unwrap();
    assert_eq!((t.first_off_machine(), t.transport(1)), (Some(1), TransportKind::Tcp));
    let buf = DeviceBuffer::alloc_exportable(g, 4096).unwrap();
    let off = |what: &str, e: mscclpp_host::Error| {
        let text = e.to_string();
        assert!(
            matches!(&e, mscclpp_host::Error::OffMachine { peer: 1, what: w, reason } if w == what
                && reason.contains("rank 1 runs on another machine (node-elsewhere")),
            "{what}: {text}"
        );
        assert!(text.starts_with(&format!("{what} toward rank 1: ")), "{text}");
    };
    off("mapping GPU memory", c.exchange(&buf).map(drop).unwrap_err());
    off("memory semaphores", c.memory_semaphores().map(drop).unwrap_err());
    off("memory channels", c.memory_channels(&buf, 1024).map(drop).unwrap_err());
    off("switch channels", c.switch_channels(&buf, 1).map(drop).unwrap_err());
}

/// `Gpu::synchronize_timeout` on a kernel that spins longer than the timeout returns
/// `Error::Timeout` (within a moment of the timeout, not at the kernel's end); the kernel then
/// ends on its own once its flag is set from another stream, and the context still works. In a
/// child process: a kernel left spinning would trap at its budget and spoil the context for
/// every later test of this binary.
#[test]
fn synchronize_timeout_gives_up_on_a_kernel_still_spinning() {
    const NAME: &str = "synchronize_timeout_gives_up_on_a_kernel_still_spinning";
    if testing::is_child(NAME) {
        let gpus = testing::all_gpus().unwrap();
        let g = &gpus[0];
        let flag = DeviceBuffer::filled(g, 8, 0).unwrap();
        let seen = DeviceBuffer::filled(g, 8, POISON).unwrap();
        g.synchronize().unwrap();
        // Looked up (and its module loaded) before the waiter spins.
        let setter = g.function(PTX, "late_lookup_setter").unwrap();
        let side = g.new_stream().unwrap();
        // Thread 0 waits for the flag with a 20 s budget, on the stream synchronize_timeout waits for.
        let budget_ns = 20_000_000_000i64;
        // SAFETY: `late_lookup_waiter(flag, seen, budget_ns)` takes these in this order and
        // types; both buffers outlive the synchronizes below.
        unsafe {
            g.launch(
                PTX,
                "late_lookup_waiter",
                LaunchConfig::new(1, 32),
                Args::new().arg(flag.addr()).arg(seen.addr()).arg(budget_ns),
            )
        }
        .unwrap();
        let timeout = Duration::from_millis(300);
        let t = Instant::now();
        let e = g.synchronize_timeout(timeout).unwrap_err();
        let took = t.elapsed();
        println!("CHILD-SAW after {took:?}: {e}");
        assert!(
            matches!(&e, mscclpp_host::Error::Timeout { after, waiting_for } if *after == timeout
                && waiting_for.contains("GPU 0 work to finish")),
            "{e}"
        );
        assert!(took >= timeout && took < Duration::from_secs(5), "gave up after {took:?}");
        // Release the waiter from another stream: it ends on its own, long before its budget.
        let value = testing::random_range(1, u64::MAX);
        let mut args = Args::new().arg(flag.addr()).arg(value);
        // SAFETY: `late_lookup_setter(flag, value)`; `flag` outlives the synchronizes below.
        unsafe { launch_on(g, &side, &setter, LaunchConfig::new(1, 32), &mut args) }.unwrap();
        side.synchronize().unwrap();
        g.synchronize_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(seen.to_vec::<u64>().unwrap(), [value], "what the waiter saw once released");
        assert!(t.elapsed() < Duration::from_secs(10), "the waiter ran {:?}", t.elapsed());
        // The context takes new work.
        let mut args = Args::new().arg(flag.addr()).arg(value ^ 1);
        // SAFETY: as above.
        unsafe { launch_on(g, g.stream(), &setter, LaunchConfig::new(1, 32), &mut args) }.unwrap();
        g.synchronize().unwrap();
        assert_eq!(flag.to_vec::<u64>().unwrap(), [value ^ 1]);
        println!("CHILD-DONE");
        return;
    }
    if gpus_or_skip(NAME, 1).is_none() {
        return;
    }
    let out = testing::run_child(NAME);
    let text = testing::output_text(&out);
    assert!(out.status.success() && text.contains("CHILD-DONE"), "child failed:\n{text}");
    assert!(text.contains("CHILD-SAW") && text.contains("timed out after 300 ms"), "{text}");
}

/// With every device hidden (`CUDA_VISIBLE_DEVICES=""`), a machine whose driver works sees no
/// device, and says so as an absence, never as a driver failure: the inventory is complete and
/// empty, `devices()` and `Gpu::open(0)` fail with `Error::NoDevice` (`is_no_gpu`), and the
/// harness would skip. In a child process, which starts with the variable set.
#[test]
fn hidden_devices_are_an_absence_not_a_failure() {
    const NAME: &str = "hidden_devices_are_an_absence_not_a_failure";
    if testing::is_child(NAME) {
        use mscclpp_host::gpu::{self, Discovery};
        assert_eq!(std::env::var("CUDA_VISIBLE_DEVICES").as_deref(), Ok(""));
        let inv = gpu::inventory();
        assert_eq!(inv.discovery, Discovery::Complete, "{inv:?}");
        assert!(
            inv.devices.is_empty() && inv.reason.as_deref().is_some_and(|r| r.contains("no CUDA devices")),
            "{inv:?}"
        );
        let e = gpu::devices().unwrap_err();
        assert!(matches!(e, mscclpp_host::Error::NoDevice(_)) && e.is_no_gpu(), "{e}");
        let e = Gpu::open(0).unwrap_err();
        assert!(matches!(e, mscclpp_host::Error::NoDevice(_)) && e.is_no_gpu(), "{e}");
        assert!(e.to_string().contains("GPU 0"), "{e}");
        assert!(matches!(testing::all_gpus(), Err(testing::GpuProblem::Absent(_))));
        println!("CHILD-DONE");
        return;
    }
    // Where there is no GPU at all, hiding devices changes nothing: this needs one to hide.
    if gpus_or_skip(NAME, 1).is_none() {
        return;
    }
    let out = testing::run_child_with(NAME, |c| {
        c.env("CUDA_VISIBLE_DEVICES", "");
    });
    let text = testing::output_text(&out);
    assert!(out.status.success() && text.contains("CHILD-DONE"), "child failed:\n{text}");
}
