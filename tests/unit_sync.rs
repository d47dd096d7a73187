//! GPU tests of the semaphores, the trigger FIFO, the host proxy and the port channel
//! (one process, one and two GPUs). Fresh random data every run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mscclpp_device::semaphore::Host2DeviceSemaphore;
use mscclpp_device::trigger::Request;
use mscclpp_host::fifo::Fifo;
use mscclpp_host::proxy::ProxyBuilder;
use mscclpp_host::semaphore::{MemorySemaphorePair, SemaphoreStorage};
use mscclpp_host::transport::engine::{AtomicAddPath, MemoryRegion};
use mscclpp_host::transport::ipc::HostCounter;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig, PinnedBuffer, channel};
use mscclpp_rs::PTX;
use mscclpp_rs::testing::{self, DeviceMessage, POISON, assert_same, expect_trap, gpus_or_skip, trap_test};

fn launch(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: each call site passes the kernel's parameters in order with matching types; the
    // buffers outlive the synchronizes of the test.
    unsafe { g.launch(PTX, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn sync(g: &Arc<Gpu>, what: &str) {
    g.synchronize().unwrap_or_else(|e| panic!("{what}: {e}"));
}

// The triggers the kernels push, as the host expects them: the kernel crate's own source.
#[path = "../ptx-tests/src/shared.rs"]
#[allow(dead_code)]
mod shared;

#[test]
fn fifo_many_pushers_wrap_a_small_ring() {
    let Some(gpus) = gpus_or_skip("fifo_many_pushers_wrap_a_small_ring", 1) else { return };
    let g = &gpus[0];
    let (blocks, threads, per) = (8u32, 64u32, 64u32);
    let total = (blocks * threads * per) as usize;
    let mut fifo = Fifo::new(g, 64).unwrap();
    // Completing with nothing published changes nothing (it used to move the tail past the
    // producers' head, so their first trigger would have been skipped).
    assert!(!fifo.complete() && !fifo.complete());
    assert_eq!(fifo.position(), 0);
    launch(g, "fifo_push_many", LaunchConfig::new(blocks, threads), Args::new().arg(fifo.device_handle()).arg(per));
    let mut next: HashMap<u32, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0usize;
    while got < total {
        match fifo.try_pop() {
            Some(t) => {
                let Request::AtomicAdd { value, .. } = t.decode() else { panic!("unexpected trigger {t:?}") };
                let (gid, i) = ((value >> 32) as u32, value as u32);
                // Whole, as the kernel built it: a trigger torn between two pushes differs.
                assert_eq!(t.decode(), shared::tagged_trigger(gid, i).decode(), "torn or corrupted trigger at {got}");
                let n = next.entry(gid).or_insert(0);
                assert_eq!(i, *n, "thread {gid}: trigger {i} out of order or duplicated (expected {n})");
                *n += 1;
                got += 1;
            }
            None => assert!(Instant::now() < deadline, "only {got} of {total} triggers after 30 s"),
        }
    }
    sync(g, "fifo_push_many");
    assert!(fifo.try_pop().is_none(), "more triggers than pushed");
    assert_eq!(next.len(), (blocks * threads) as usize);
    assert!(next.values().all(|&n| n == per));
}

/// `sync::block_barrier` orders a block's writes before every thread's reads after it (each
/// thread reads the word of a thread in another warp), and `poll::now_ns` counts nanoseconds: two
/// readings 50 ms of host sleep apart differ by at least 50 ms and by no more than the host saw
/// around both (a cycle counter, about twice as fast, would exceed it).
#[test]
fn block_barrier_orders_the_blocks_writes_and_now_ns_counts_nanoseconds() {
    let Some(gpus) = gpus_or_skip("block_barrier_orders_the_blocks_writes_and_now_ns_counts_nanoseconds", 1) else {
        return;
    };
    let g = &gpus[0];
    for threads in [64u32, 1024] {
        let n = threads as usize;
        let words = DeviceBuffer::filled(g, n * 4, POISON).unwrap();
        let seen = DeviceBuffer::filled(g, n * 4, POISON).unwrap();
        for round in 0..20 {
            launch(
                g,
                "block_barrier_exchange",
                LaunchConfig::new(1, threads),
                Args::new().arg(words.ptr::<u32>()).arg(seen.ptr::<u32>()),
            );
            sync(g, "block_barrier_exchange");
            let want: Vec<u32> = (0..threads).map(|t| !((t + threads / 2) % threads)).collect();
            assert_same(&format!("{threads} threads, round {round}"), &seen.to_vec::<u32>().unwrap(), &want);
            words.fill(POISON).unwrap();
        }
    }
    let out = DeviceBuffer::filled(g, 8, 0).unwrap();
    let now = || {
        launch(g, "global_timer_now", LaunchConfig::new(1, 32), Args::new().arg(out.ptr::<u64>()));
        sync(g, "global_timer_now");
        out.to_vec::<u64>().unwrap()[0]
    };
    let host = Instant::now();
    let a = now();
    std::thread::sleep(Duration::from_millis(50));
    let b = now();
    let host = host.elapsed().as_nanos() as u64;
    let gpu = b.wrapping_sub(a);
    // (1 ms of slack for the timer's coarse ticks.)
    assert!((50_000_000..=host + 1_000_000).contains(&gpu), "now_ns advanced {gpu} ns while the host saw {host} ns");
}

/// `mode`: see the `sem_pingpong` kernel (0 plain, 1 relaxed with fences, 2 cached counters).
/// Every round moves a random payload of 8 KiB or more that all 256 threads of the sender write
/// and all threads of the receiver check (`sem_pingpong_payload`): a signal that can overtake
/// another thread's payload stores, or a read before the wait, sees the previous round's data.
fn pingpong(mode: u32) {
    let name = "semaphore_pingpong_100k_rounds";
    let Some(gpus) = testing::peers_or_skip(name) else { return };
    let (g0, g1) = (&gpus[0], &gpus[1]);
    let pair = MemorySemaphorePair::new(g0, g1).unwrap();
    let rounds = 100_000u32;
    let words = 2048 + testing::random_range(0, 256) as u32;
    let seed = testing::random_range(0, 1 << 32) as u32;
    let d0 = DeviceBuffer::filled(g0, 4 * words as usize, POISON).unwrap();
    let d1 = DeviceBuffer::filled(g1, 4 * words as usize, POISON).unwrap();
    let r0 = DeviceBuffer::filled(g0, 16, 0).unwrap();
    let r1 = DeviceBuffer::filled(g1, 16, 0).unwrap();
    for (g, h, first, mine, peer, report) in
        [(g0, pair.handle_a(), 1u32, &d0, &d1, &r0), (g1, pair.handle_b(), 0, &d1, &d0, &r1)]
    {
        launch(
            g,
            "sem_pingpong_payload",
            LaunchConfig::new(1, 256),
            Args::new()
                .arg(h)
                .arg(rounds)
                .arg(first)
                .arg(mode)
                .arg(seed)
                .arg(words)
                .arg(mine.addr())
                .arg(peer.addr())
                .arg(report.addr()),
        );
    }
    sync(g0, "sem_pingpong_payload on GPU 0");
    sync(g1, "sem_pingpong_payload on GPU 1");
    // Each side checked every word of every round's payload.
    let all = rounds as u64 * words as u64;
    assert_eq!(r0.to_vec::<u64>().unwrap(), [0, all], "GPU 0: [stale or wrong words after a wait, words checked]");
    assert_eq!(r1.to_vec::<u64>().unwrap(), [0, all], "GPU 1: [stale or wrong words after a wait, words checked]");
    // After the last round each buffer holds the other side's last payload (side 0 is GPU 0).
    let last = |side: u32| (0..words).map(|k| shared::message_word(seed, side, rounds, k)).collect::<Vec<u32>>();
    assert_same("GPU 0's buffer after the last round", &d0.to_vec::<u32>().unwrap(), &last(1));
    assert_same("GPU 1's buffer after the last round", &d1.to_vec::<u32>().unwrap(), &last(0));
    // Consumed and sent counts (written back by the cached mode at the end of the kernel).
    for side in [&pair.a, &pair.b] {
        assert_eq!(side.read().unwrap(), (rounds as u64, rounds as u64));
        assert_eq!(side.read_outbound().unwrap(), rounds as u64);
    }
}

#[test]
fn semaphore_pingpong_100k_rounds() {
    pingpong(0);
}

#[test]
fn semaphore_pingpong_100k_rounds_relaxed_with_fences() {
    pingpong(1);
}

#[test]
fn semaphore_pingpong_100k_rounds_cached_counters() {
    pingpong(2);
}

/// A proxy on GPU 0 serving a port channel GPU 0 -> GPU 1, and GPU 1's semaphore storage.
struct PortSetup {
    g0: Arc<Gpu>,
    g1: Arc<Gpu>,
    src: DeviceBuffer,
    dst: DeviceBuffer,
    sem1: SemaphoreStorage,
    /// GPU 1's inbound counter in pinned host memory when the proxy signals a host counter.
    host1: Option<Arc<PinnedBuffer>>,
    proxy: mscclpp_host::proxy::ProxyService,
    chan: mscclpp_device::channel::port::PortChannel,
    _local: SemaphoreStorage,
}

impl PortSetup {
    /// GPU 0 pushes `count` put_with_signal of `chunk` bytes at consecutive offsets (the kernel
    /// ends once the proxy has them all).
    fn push_puts(&self, count: usize, chunk: usize) {
        let args = Args::new().arg(self.chan).arg(chunk as u64).arg(count as u32);
        launch(&self.g0, "port_put_signal", LaunchConfig::new(1, 32), args);
        sync(&self.g0, "port_put_signal");
    }
    /// GPU 1's view of the semaphore the proxy signals.
    fn receiver(&self) -> Host2DeviceSemaphore {
        let mut h = self.sem1.host_to_device();
        if let Some(p) = &self.host1 {
            h.inbound = p.device_ptr(0);
        }
        h
    }
    /// (signals received, signals consumed) on GPU 1.
    fn counts(&self) -> (u64, u64) {
        let (inbound, expected) = self.sem1.read().unwrap();
        match &self.host1 {
            Some(p) => (HostCounter::pinned(p.clone(), 0).unwrap().load(), expected),
            None => (inbound, expected),
        }
    }
}

fn port_setup(gpus: &[Arc<Gpu>], src_data: &[u8], dst_bytes: usize) -> PortSetup {
    port_setup_with(gpus, src_data, dst_bytes, false)
}

/// As [`port_setup`], with the receiver's counter in pinned host memory (`host`) or in GPU 1's
/// memory.
fn port_setup_with(gpus: &[Arc<Gpu>], src_data: &[u8], dst_bytes: usize, host: bool) -> PortSetup {
    port_setup_built(gpus, src_data, dst_bytes, host, |b| b)
}

/// As [`port_setup_with`], with `build` applied to the proxy's builder before it starts.
fn port_setup_built(
    gpus: &[Arc<Gpu>],
    src_data: &[u8],
    dst_bytes: usize,
    host: bool,
    build: impl FnOnce(ProxyBuilder) -> ProxyBuilder,
) -> PortSetup {
    let (g0, g1) = (gpus[0].clone(), gpus[1].clone());
    g0.enable_peer_access(&g1).unwrap();
    g1.enable_peer_access(&g0).unwrap();
    let src = DeviceBuffer::from_slice(&g0, src_data).unwrap();
    let dst = DeviceBuffer::filled(&g1, dst_bytes, POISON).unwrap();
    let sem1 = SemaphoreStorage::new(&g1).unwrap();
    let mut b = ProxyBuilder::new(&g0).fifo_size(128);
    let dst_id = b.add_memory(MemoryRegion { base: dst.addr(), bytes: dst.len() as u64 }).unwrap();
    let src_id = b.add_memory(MemoryRegion { base: src.addr(), bytes: src.len() as u64 }).unwrap();
    let host1 = host.then(|| Arc::new(PinnedBuffer::zeroed(&g1, 8).unwrap()));
    let sem_id = match &host1 {
        Some(p) => b.add_host_semaphore(HostCounter::pinned(p.clone(), 0).unwrap()).unwrap(),
        None => b.add_semaphore(sem1.inbound().addr()).unwrap(),
    };
    let proxy = build(b).start().unwrap();
    // GPU 0 never waits on this channel; its local semaphore storage is unused here.
    let local = SemaphoreStorage::new(&g0).unwrap();
    let chan = channel::port_channel(&proxy, sem_id, dst_id, src_id, &local);
    PortSetup { g0, g1, src, dst, sem1, host1, proxy, chan, _local: local }
}

/// `count` put_with_signal of `chunk` bytes each at consecutive offsets GPU 0 -> GPU 1; the
/// receiver waits for every signal, then reads what the puts delivered.
fn port_puts(gpus: &[Arc<Gpu>], count: usize, chunk: usize, host: bool) {
    let data = testing::random_bytes(count * chunk);
    let s = port_setup_with(gpus, &data, count * chunk, host);
    let out = DeviceBuffer::filled(&s.g1, count * chunk, POISON).unwrap();
    // Receiver first: it waits for the signals, then reads.
    launch(
        &s.g1,
        "port_wait_copy",
        LaunchConfig::new(1, 256),
        Args::new()
            .arg(s.receiver())
            .arg(count as u32)
            .arg(s.dst.addr())
            .arg(out.addr())
            .arg((count * chunk / 4) as u32),
    );
    s.push_puts(count, chunk);
    sync(&s.g1, "port_wait_copy");
    let what = format!("{count} x {chunk} B (host counter: {host}) seen by the receiver after its waits");
    assert_same(&what, &out.to_vec::<u8>().unwrap(), &data);
    assert_eq!(s.counts(), (count as u64, count as u64));
    s.proxy.stop().unwrap();
}

#[test]
fn port_put_with_signal_gpu0_to_gpu1() {
    let Some(gpus) = testing::peers_or_skip("port_put_with_signal_gpu0_to_gpu1") else { return };
    // Large and small puts, offsets multiples of 16 or not, the receiver's counter in its GPU
    // memory (stream write) and in pinned host memory (written by the proxy after a mark).
    for (count, chunk) in [(4, 256 << 10), (64, 1000), (64, 4096), (200, 8)] {
        for host in [false, true] {
            port_puts(&gpus, count, chunk, host);
        }
    }
}

#[test]
fn proxy_error_delivers_the_host_signals_of_earlier_puts() {
    let Some(gpus) = testing::peers_or_skip("proxy_error_delivers_the_host_signals_of_earlier_puts") else { return };
    let (count, chunk) = (8usize, 1 << 20);
    let data = testing::random_bytes(count * chunk);
    let s = port_setup_with(&gpus, &data, count * chunk, true);
    // count valid put + signal, then one past the end of both memories: the proxy stops at it,
    // after waiting for the valid copies and writing their signals.
    s.push_puts(count + 1, chunk);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.proxy.is_running() {
        assert!(Instant::now() < deadline, "proxy did not stop on a bad request");
        std::thread::sleep(Duration::from_millis(1));
    }
    let e = s.proxy.check().unwrap_err().to_string();
    assert!(e.contains("outside memory") && e.contains(&format!("position {count}")), "{e}");
    assert_eq!(s.counts().0, count as u64, "signals of the valid puts");
    assert_same("data of the valid puts", &s.dst.to_vec::<u8>().unwrap(), &data);
}

#[test]
fn proxy_stop_delivers_pending_host_signals() {
    let Some(gpus) = testing::peers_or_skip("proxy_stop_delivers_pending_host_signals") else { return };
    let (count, chunk) = (32usize, 64 << 10);
    let data = testing::random_bytes(count * chunk);
    let mut s = port_setup_with(&gpus, &data, count * chunk, true);
    // Nobody waits: the pushes complete, then the proxy is stopped at once. Signals still waiting
    // for their copies must be delivered at the stop, after the data.
    s.push_puts(count, chunk);
    s.proxy.stop_serving();
    s.proxy.check().unwrap();
    assert_eq!(s.counts().0, count as u64, "signals delivered by the stop");
    assert_same("data after the stop", &s.dst.to_vec::<u8>().unwrap(), &data);
}

#[test]
fn port_put_with_signal_and_flush_then_overwrite() {
    let Some(gpus) = testing::peers_or_skip("port_put_with_signal_and_flush_then_overwrite") else { return };
    let bytes = 4 << 20;
    let words: Vec<u32> = testing::random_ints(bytes / 4);
    let s = port_setup(&gpus, bytemuck::cast_slice(&words), bytes);
    launch(
        &s.g0,
        "port_put_flush_overwrite",
        LaunchConfig::new(1, 1024),
        Args::new().arg(s.chan).arg(s.src.addr()).arg(bytes as u64),
    );
    sync(&s.g0, "port_put_flush_overwrite");
    // The kernel overwrote its source right after the flush returned...
    let flipped: Vec<u32> = words.iter().map(|w| !w).collect();
    assert_same("source after the overwrite", &s.src.to_vec::<u32>().unwrap(), &flipped);
    // ... and the destination holds the data from before the overwrite.
    assert_same("destination after flush", &s.dst.to_vec::<u32>().unwrap(), &words);
    assert_eq!(s.sem1.read().unwrap().0, 1, "one signal");
    s.proxy.stop().unwrap();
}

/// Both ways a proxy executes atomic adds (the driver's stream memory operation where the GPU
/// supports it, else the kernel; and the kernel, forced) must sum exactly; each is also timed,
/// per request under load and per add + flush alone (printed: run with `--nocapture`).
#[test]
fn port_atomic_add_from_many_threads_is_exact() {
    let Some(gpus) = testing::peers_or_skip("port_atomic_add_from_many_threads_is_exact") else { return };
    let (blocks, threads, slots) = (16u32, 128u32, 64usize);
    let n = (blocks * threads) as usize;
    for (variant, forced) in [("chosen", false), ("kernel forced", true)] {
        let build = |b: ProxyBuilder| if forced { b.atomic_add_kernel() } else { b };
        let seed: Vec<u64> = testing::random_ints::<u64>(slots).into_iter().map(|x| x >> 4).collect();
        let s = port_setup_built(&gpus, &[0u8; 16], slots * 8, false, build);
        let path = s.proxy.atomic_add_path();
        if forced {
            assert_eq!(path, AtomicAddPath::Kernel);
        }
        s.dst.write(0, &seed).unwrap();
        let values: Vec<u64> = testing::random_ints::<u64>(n).into_iter().map(|x| x >> 16).collect();
        let vals = DeviceBuffer::from_slice(&s.g0, &values).unwrap();
        let done = DeviceBuffer::filled(&s.g0, 4, 0).unwrap();
        let t = Instant::now();
        launch(
            &s.g0,
            "port_atomic_add",
            LaunchConfig::new(blocks, threads),
            Args::new().arg(s.chan).arg(vals.addr()).arg(slots as u32).arg(done.addr()),
        );
        sync(&s.g0, "port_atomic_add");
        let many = t.elapsed();
        let mut want = seed.clone();
        for (i, v) in values.iter().enumerate() {
            want[i % slots] = want[i % slots].wrapping_add(*v);
        }
        assert_same(&format!("sums after atomic adds ({variant}: {path})"), &s.dst.to_vec::<u64>().unwrap(), &want);
        // One add and its flush per launch, alone on the proxy: the latency of the path.
        let rounds = 200usize;
        let mut times = Vec::with_capacity(rounds);
        let one: Vec<u64> = testing::random_ints::<u64>(rounds).into_iter().map(|x| x >> 16).collect();
        for v in &one {
            let val = DeviceBuffer::from_slice(&s.g0, &[*v]).unwrap();
            let done = DeviceBuffer::filled(&s.g0, 4, 0).unwrap();
            let t = Instant::now();
            launch(
                &s.g0,
                "port_atomic_add",
                LaunchConfig::new(1, 1),
                Args::new().arg(s.chan).arg(val.addr()).arg(slots as u32).arg(done.addr()),
            );
            sync(&s.g0, "port_atomic_add (one)");
            times.push(t.elapsed());
        }
        want[0] = one.iter().fold(want[0], |a, v| a.wrapping_add(*v));
        assert_same(&format!("sums after single adds ({variant}: {path})"), &s.dst.to_vec::<u64>().unwrap(), &want);
        times.sort();
        println!(
            "port atomic_add, {variant} ({path}): {n} requests from {blocks}x{threads} threads in {many:?} \
             ({:?} each); one add + flush per launch: median {:?}",
            many / n as u32,
            times[rounds / 2]
        );
        s.proxy.stop().unwrap();
    }
}

#[test]
fn proxy_rejects_out_of_range_put_with_an_error() {
    let Some(gpus) = testing::peers_or_skip("proxy_rejects_out_of_range_put_with_an_error") else { return };
    let s = port_setup(&gpus, &[1u8; 4096], 4096);
    // 2 puts of 4096 bytes at offsets 0 and 4096: the second is outside both memories.
    s.push_puts(2, 4096);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.proxy.is_running() {
        assert!(Instant::now() < deadline, "proxy did not stop on a bad request");
        std::thread::sleep(Duration::from_millis(1));
    }
    let e = s.proxy.stop().unwrap_err().to_string();
    assert!(e.contains("outside memory") && e.contains("position 1"), "{e}");
}

/// Two kernels of one GPU (one context) that wait on each other, the second looked up only once
/// the first spins. With lazy loading (the driver's default since CUDA 12.2) the first lookup of
/// a kernel can wait for the context to go idle, which the spinning waiter never does until its
/// budget runs out; [`Gpu::module`] loads every kernel of a module up front, so the later lookup
/// loads nothing and the setter runs at once.
#[test]
fn kernel_looked_up_while_another_spins_still_runs() {
    let Some(gpus) = gpus_or_skip("kernel_looked_up_while_another_spins_still_runs", 1) else { return };
    let g = &gpus[0];
    let flag = DeviceBuffer::filled(g, 8, 0).unwrap();
    let seen = DeviceBuffer::filled(g, 8, POISON).unwrap();
    sync(g, "filling the flag");
    let value = testing::random_range(1, u64::MAX);
    let stream = g.new_stream().unwrap();
    let waiter = g.function(PTX, "late_lookup_waiter").unwrap();
    let mut args = Args::new().arg(flag.addr()).arg(seen.addr()).arg(10_000_000_000i64);
    let t = Instant::now();
    // SAFETY: the kernel takes (flag, seen, budget) in this order and types; both buffers outlive
    // the stream's synchronize below.
    unsafe { mscclpp_host::launch::launch_on(g, &stream, &waiter, LaunchConfig::new(1, 32), &mut args) }.unwrap();
    launch(g, "late_lookup_setter", LaunchConfig::new(1, 32), Args::new().arg(flag.addr()).arg(value));
    g.synchronize_timeout(Duration::from_secs(30)).unwrap();
    stream.synchronize().unwrap();
    let took = t.elapsed();
    assert_eq!(seen.to_vec::<u64>().unwrap(), [value], "what the waiter saw");
    // The waiter's budget is 10 s: a setter held back until then would have made it trap.
    assert!(took < Duration::from_secs(5), "the pair took {took:?}");
}

#[test]
fn semaphore_wait_never_signalled_traps() {
    trap_test(
        "semaphore_wait_never_signalled_traps",
        2,
        |g| {
            let pair = MemorySemaphorePair::new(&g[0], &g[1]).unwrap();
            let t = Instant::now();
            launch(
                &g[0],
                "sem_wait_timeout",
                LaunchConfig::new(1, 32),
                Args::new().arg(pair.handle_a()).arg(20_000_000i64),
            );
            expect_trap(&g[0], t);
        },
        &["LAUNCH_FAILED"],
        DeviceMessage::Timeout { name: "MemoryDevice2DeviceSemaphore::wait", budget_ns: 20_000_000 },
        (1, 32),
    );
}

#[test]
fn bounds_check_panic_prints_its_location_and_traps() {
    trap_test(
        "bounds_check_panic_prints_its_location_and_traps",
        1,
        |g| {
            let out = DeviceBuffer::filled(&g[0], 4, 0).unwrap();
            let t = Instant::now();
            launch(&g[0], "panic_out_of_bounds", LaunchConfig::new(1, 1), Args::new().arg(out.ptr::<u32>()).arg(7u32));
            expect_trap(&g[0], t);
        },
        &["LAUNCH_FAILED"],
        // The message of a bounds check is formatted, which the device does not print. The
        // location is the indexing line of the kernel's source.
        DeviceMessage::Panic {
            file: "src/sync.rs",
            line: testing::line_of(include_str!("../ptx-tests/src/sync.rs"), testing::TRAP_SITE_OUT_OF_BOUNDS),
            msg: "formatted message not printed",
        },
        (1, 1),
    );
}

#[test]
fn fifo_sync_with_stopped_proxy_traps() {
    trap_test(
        "fifo_sync_with_stopped_proxy_traps",
        1,
        |g| {
            let proxy = ProxyBuilder::new(&g[0]).start().unwrap();
            let fifo = proxy.fifo_handle();
            // Keep the FIFO memory alive but stop serving it.
            let p = Box::leak(Box::new(proxy));
            p.stop_serving();
            let t = Instant::now();
            launch(&g[0], "fifo_sync_timeout", LaunchConfig::new(1, 32), Args::new().arg(fifo).arg(20_000_000i64));
            expect_trap(&g[0], t);
        },
        &["LAUNCH_FAILED"],
        DeviceMessage::Timeout { name: "Fifo::sync", budget_ns: 20_000_000 },
        (1, 32),
    );
}

#[test]
fn port_flush_with_stopped_proxy_traps() {
    trap_test(
        "port_flush_with_stopped_proxy_traps",
        2,
        |g| {
            let s = Box::leak(Box::new(port_setup(g, &[0u8; 64], 64)));
            s.proxy.stop_serving();
            let t = Instant::now();
            launch(&s.g0, "port_flush_timeout", LaunchConfig::new(1, 32), Args::new().arg(s.chan).arg(20_000_000i64));
            expect_trap(&s.g0, t);
        },
        &["LAUNCH_FAILED"],
        DeviceMessage::Timeout { name: "Fifo::sync", budget_ns: 20_000_000 },
        (1, 32),
    );
}
