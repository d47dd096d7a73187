//! Latency and rate of the synchronisation primitives, each against a baseline from the same run:
//! * semaphore signal/wait ping-pong vs a raw `st.release.sys` / `ld.acquire.sys` flag ping-pong;
//! * FIFO push -> proxy -> acknowledgement vs a raw GPU -> CPU thread -> GPU round trip;
//! * FIFO throughput (requests drained per second) with 1 to 132 pushing blocks;
//! * port channel put_with_signal ping-pong, 0 B (signal only) to 1 MiB, with the receiver's
//!   counter in GPU memory (stream write) and in host memory (written by the proxy thread);
//! * the driver's cost of the stream operations a proxy issues (the floor under the port channel).
//!
//! The semaphore kernels end by overwriting an error word that starts as poison (so a kernel that
//! never reached its end is caught), and after the timed runs every semaphore mode runs 10,000
//! rounds that carry data: each side writes the round number into the peer's word before it
//! signals and checks its own word after it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, PlottingBackend};
use mscclpp_host::proxy::ProxyBuilder;
use mscclpp_host::semaphore::{MemorySemaphorePair, SemaphoreStorage};
use mscclpp_host::transport::engine::MemoryRegion;
use mscclpp_host::transport::ipc::HostCounter;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig, PinnedBuffer, channel};
use mscclpp_rs::{
    PTX,
    bench::{self, Target, Variant, size_id},
    report::family,
    testing::{self, POISON},
};

/// A semaphore round trip at most 1.05 times the raw flag round trip of the same run.
const SEMAPHORE_TARGET: Target = Target::Ratio(1.0 / 1.05);
/// A FIFO round trip at most 1.10 times the raw GPU -> CPU -> GPU round trip of the same run.
const FIFO_TARGET: Target = Target::Ratio(1.0 / 1.10);
/// An 8-byte port-channel put_with_signal ping-pong under 10 us per round trip.
const PORT_TARGET: Target = Target::Value(10.0);
/// Rounds of the data-carrying semaphore check.
const CHECK_ROUNDS: u32 = 10_000;
/// An error word no kernel has written yet.
const UNWRITTEN: u32 = u32::from_ne_bytes([POISON; 4]);

fn launch(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: every call passes the kernel's parameters in order with matching types.
    unsafe { g.launch(PTX, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

/// One timed ping-pong of `rounds` between a one-warp kernel on each GPU: GPU 1's side starts
/// first (it waits), GPU 0's is timed with events. `args(side, rounds)` gives each side's
/// arguments (side 0 on GPU 0 sends first).
fn pingpong(g0: &Arc<Gpu>, g1: &Arc<Gpu>, kernel: &str, rounds: u32, args: impl Fn(u32, u32) -> Args) -> Duration {
    launch(g1, kernel, LaunchConfig::new(1, 32), args(1, rounds));
    let t = bench::time_on_stream(g0, g0.stream(), 1, || launch(g0, kernel, LaunchConfig::new(1, 32), args(0, rounds)));
    g1.synchronize().unwrap();
    t
}

/// Both sides' error words: 0, written by kernels that ran to their end and saw no wrong data.
fn check_errors(what: &str, errors: &[DeviceBuffer; 2]) {
    for (side, e) in errors.iter().enumerate() {
        let got = e.to_vec::<u32>().unwrap()[0];
        assert_ne!(got, UNWRITTEN, "{what}: side {side}'s kernel never wrote its error count");
        assert_eq!(got, 0, "{what}: side {side} saw {got} rounds with a wrong data word");
    }
}

fn semaphore_pingpong(c: &mut Criterion, g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    g0.enable_peer_access(g1).unwrap();
    g1.enable_peer_access(g0).unwrap();
    let pair = MemorySemaphorePair::new(g0, g1).unwrap();
    let handles = [pair.handle_a(), pair.handle_b()];
    let errors = [DeviceBuffer::filled(g0, 4, POISON).unwrap(), DeviceBuffer::filled(g1, 4, POISON).unwrap()];
    // Each side's data word: its peer writes the round number there before every signal.
    let data = [DeviceBuffer::filled(g0, 8, POISON).unwrap(), DeviceBuffer::filled(g1, 8, POISON).unwrap()];
    let flags = [DeviceBuffer::filled(g0, 8, 0).unwrap(), DeviceBuffer::filled(g1, 8, 0).unwrap()];
    let first = |side: u32| u32::from(side == 0);
    // `sem_pingpong`'s arguments; `with_data`: real data words, else none (the pure signal /
    // wait round trip, as the raw-flag baseline).
    let sem_args = |side: u32, rounds: u32, mode: u32, with_data: bool| {
        let s = side as usize;
        let (mine, peer) = if with_data { (data[s].addr(), data[1 - s].addr()) } else { (0, 0) };
        Args::new().arg(handles[s]).arg(rounds).arg(first(side)).arg(mode).arg(mine).arg(peer).arg(errors[s].addr())
    };
    let mut grp = c.benchmark_group("pingpong");
    let raw = Variant::latency(family::SYNC, 0);
    grp.bench_function("raw_flag", |b| {
        b.iter_custom(|iters| {
            let t = pingpong(g0, g1, "raw_flag_pingpong", iters as u32, |side, r| {
                let (me, peer) = (&flags[side as usize], &flags[1 - side as usize]);
                Args::new().arg(me.addr()).arg(peer.addr()).arg(r).arg(first(side))
            });
            bench::record("pingpong/raw_flag", &raw, iters, t);
            t
        })
    });
    let v = Variant::latency(family::SYNC, 0).vs("pingpong/raw_flag").target(SEMAPHORE_TARGET);
    for (name, mode) in [("semaphore", 0u32), ("semaphore_relaxed_fenced", 1)] {
        let id = format!("pingpong/{name}");
        grp.bench_function(name, |b| {
            b.iter_custom(|iters| {
                for e in &errors {
                    e.fill(POISON).unwrap();
                }
                let t = pingpong(g0, g1, "sem_pingpong", iters as u32, |side, r| sem_args(side, r, mode, false));
                check_errors(&id, &errors);
                bench::record(&id, &v, iters, t);
                t
            })
        });
    }
    grp.bench_function("semaphore_cached", |b| {
        b.iter_custom(|iters| {
            let t = pingpong(g0, g1, "sem_pingpong_cached", iters as u32, |side, r| {
                Args::new().arg(handles[side as usize]).arg(r).arg(first(side))
            });
            bench::record("pingpong/semaphore_cached", &v, iters, t);
            t
        })
    });
    grp.finish();
    // Every mode (plain, relaxed with fences, cached counters) with data in every round: a wait
    // that returns before the peer's signal, or a signal that does not publish the data written
    // before it, leaves a wrong word that the kernel counts.
    for (name, mode) in [("semaphore", 0u32), ("semaphore_relaxed_fenced", 1), ("semaphore_cached", 2)] {
        for b in errors.iter().chain(&data) {
            b.fill(POISON).unwrap();
        }
        pingpong(g0, g1, "sem_pingpong", CHECK_ROUNDS, |side, r| sem_args(side, r, mode, true));
        let what = format!("{name} ping-pong with data, {CHECK_ROUNDS} rounds");
        check_errors(&what, &errors);
        for (side, d) in data.iter().enumerate() {
            assert_eq!(d.to_vec::<u64>().unwrap(), [u64::from(CHECK_ROUNDS)], "{what}: side {side}'s last data word");
        }
    }
}

fn fifo_roundtrip(c: &mut Criterion, g: &Arc<Gpu>) {
    let pinned = PinnedBuffer::zeroed(g, 128).unwrap();
    let to_host = pinned.host_ptr() as usize;
    let from_host = to_host + 64;
    let mut grp = c.benchmark_group("roundtrip");
    let mut done = 0u64;
    let raw = Variant::latency(family::PORT, 0);
    grp.bench_function("raw_gpu_cpu_gpu", |b| {
        b.iter_custom(|iters| {
            let base = done;
            let echo = std::thread::spawn(move || {
                // SAFETY: both words live in the pinned buffer, which outlives this thread (joined below).
                let (th, fh) =
                    unsafe { (AtomicU64::from_ptr(to_host as *mut u64), AtomicU64::from_ptr(from_host as *mut u64)) };
                let mut seen = base;
                while seen < base + iters {
                    // Partner: the kernel's release store; then echo with release.
                    let v = th.load(Ordering::Acquire);
                    if v > seen {
                        seen = v;
                        fh.store(v, Ordering::Release);
                    } else {
                        std::hint::spin_loop();
                    }
                }
            });
            // The kernel counts from 1 each launch: offset by what earlier launches left.
            let t = bench::time_on_stream(g, g.stream(), 1, || {
                launch(
                    g,
                    "raw_host_roundtrip_from",
                    LaunchConfig::new(1, 32),
                    Args::new().arg(pinned.device_addr()).arg(pinned.device_addr() + 64).arg(iters as u32).arg(base),
                );
            });
            echo.join().unwrap();
            done += iters;
            bench::record("roundtrip/raw_gpu_cpu_gpu", &raw, iters, t);
            t
        })
    });
    let proxy = ProxyBuilder::new(g).start().unwrap();
    let v = Variant::latency(family::PORT, 0).vs("roundtrip/raw_gpu_cpu_gpu").target(FIFO_TARGET);
    grp.bench_function("fifo_push_proxy_ack", |b| {
        b.iter_custom(|iters| {
            let t = bench::time_on_stream(g, g.stream(), 1, || {
                launch(
                    g,
                    "fifo_roundtrip",
                    LaunchConfig::new(1, 32),
                    Args::new().arg(proxy.fifo_handle()).arg(iters as u32),
                );
            });
            bench::record("roundtrip/fifo_push_proxy_ack", &v, iters, t);
            t
        })
    });
    grp.finish();
    // Throughput with many pushing blocks.
    let mut grp = c.benchmark_group("fifo_rate");
    for blocks in [1u32, 8, 32, 132] {
        let id = format!("fifo_rate/{blocks}_blocks");
        let per = 2000u32;
        let v = Variant::rate(family::PORT, u64::from(blocks * per));
        grp.bench_function(format!("{blocks}_blocks"), |b| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g, g.stream(), iters, || {
                    launch(
                        g,
                        "fifo_throughput",
                        LaunchConfig::new(blocks, 32),
                        Args::new().arg(proxy.fifo_handle()).arg(per),
                    );
                });
                bench::record(&id, &v, iters, t);
                t
            })
        });
    }
    grp.finish();
    proxy.stop().unwrap();
}

/// Port channel put_with_signal ping-pong with the receiver's counter in its GPU memory (written
/// by the proxy's stream) and in pinned host memory (`_host`, written by the proxy thread).
/// 0 bytes: a signal alone.
fn port_pingpong(c: &mut Criterion, g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    let max = 1 << 20;
    let bufs: Vec<(DeviceBuffer, DeviceBuffer)> = [g0, g1]
        .iter()
        .map(|g| {
            (
                DeviceBuffer::from_slice(g, &testing::random_bytes(max)).unwrap(),
                DeviceBuffer::filled(g, max, 0).unwrap(),
            )
        })
        .collect();
    let mut grp = c.benchmark_group("port_pingpong");
    let variants: [(&str, bool, &[u64]); 2] = [
        ("port_pingpong", false, &[0, 8, 64, 1024, 4096, 65536, 262_144, 1 << 20]),
        ("port_pingpong_host", true, &[0, 8, 4096, 65536, 1 << 20]),
    ];
    for (mode, host, sizes) in variants {
        let sems = [SemaphoreStorage::new(g0).unwrap(), SemaphoreStorage::new(g1).unwrap()];
        let pinned = [Arc::new(PinnedBuffer::zeroed(g0, 8).unwrap()), Arc::new(PinnedBuffer::zeroed(g1, 8).unwrap())];
        // Proxy on each GPU: GPU i's src -> GPU j's dst, signalling GPU j's semaphore.
        let mut proxies = Vec::new();
        let mut chans = Vec::new();
        for (i, g) in [g0, g1].into_iter().enumerate() {
            let j = 1 - i;
            let mut b = ProxyBuilder::new(g);
            let dst = b.add_memory(MemoryRegion { base: bufs[j].1.addr(), bytes: max as u64 }).unwrap();
            let src = b.add_memory(MemoryRegion { base: bufs[i].0.addr(), bytes: max as u64 }).unwrap();
            let sem = if host {
                b.add_host_semaphore(HostCounter::pinned(pinned[j].clone(), 0).unwrap()).unwrap()
            } else {
                b.add_semaphore(sems[j].inbound().addr()).unwrap()
            };
            let p = b.start().unwrap();
            let mut chan = channel::port_channel(&p, sem, dst, src, &sems[i]);
            if host {
                chan.semaphore.inbound = pinned[i].device_ptr(0);
            }
            chans.push(chan);
            proxies.push(p);
        }
        for &bytes in sizes {
            let id = format!("{mode}/{}", size_id(bytes));
            let line = if host { "port/counter in host memory" } else { "port/counter in GPU memory" };
            let mut v = Variant::latency(family::PORT, bytes).series(line).target((bytes == 8).then_some(PORT_TARGET));
            if host {
                v = v.vs(format!("port_pingpong/{}", size_id(bytes)));
            }
            grp.bench_function(BenchmarkId::new(mode, size_id(bytes)), |b| {
                b.iter_custom(|iters| {
                    let t = pingpong(g0, g1, "port_pingpong", iters as u32, |side, r| {
                        Args::new().arg(chans[side as usize]).arg(bytes).arg(r).arg(u32::from(side == 0))
                    });
                    bench::record(&id, &v, iters, t);
                    t
                })
            });
        }
        for p in proxies {
            p.stop().unwrap();
        }
    }
    grp.finish();
}

/// What one proxy request costs the driver: for each sequence of stream operations a proxy may
/// issue, the host time of the calls (`/call`) and the time until the stream has executed them
/// (`/done`: a final stream write into pinned memory seen by this thread). Stream idle between
/// samples, as in a ping-pong. The floor under the port-channel latency.
fn driver_latency(g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    use cudarc::driver::sys;
    g0.enable_peer_access(g1).unwrap();
    let stream = g0.new_stream().unwrap();
    let s = stream.cu_stream();
    let mark = PinnedBuffer::zeroed(g0, 8).unwrap();
    // SAFETY: 8 bytes of pinned memory that outlive this function's use of the atomic.
    let seen = unsafe { AtomicU64::from_ptr(mark.host_ptr().cast()) };
    let src = DeviceBuffer::from_slice(g0, &testing::random_bytes(64)).unwrap();
    let local = DeviceBuffer::filled(g0, 64, 0).unwrap();
    let peer = DeviceBuffer::filled(g1, 64, 0).unwrap();
    let flag = DeviceBuffer::filled(g1, 8, 0).unwrap();
    let mut n = 0u64;
    let (c0, c1) = (g0.context().cu_ctx(), g1.context().cu_ctx());
    let driver = Variant::latency(family::PORT, 8);
    for case in ["mark", "peer_write_value+mark", "local_copy_8B+mark", "peer_copy_8B+mark", "memcpy_peer_8B+mark"] {
        for i in 0..2200 {
            n += 1;
            let t0 = std::time::Instant::now();
            // SAFETY: every address is a live allocation of this test (peer access enabled).
            unsafe {
                match case {
                    "peer_write_value+mark" => {
                        assert_eq!(sys::cuStreamWriteValue64_v2(s, flag.addr(), n, 0), sys::CUresult::CUDA_SUCCESS)
                    }
                    "local_copy_8B+mark" => {
                        cudarc::driver::result::memcpy_dtod_async(local.addr(), src.addr(), 8, s).unwrap()
                    }
                    "peer_copy_8B+mark" => {
                        cudarc::driver::result::memcpy_dtod_async(peer.addr(), src.addr(), 8, s).unwrap()
                    }
                    "memcpy_peer_8B+mark" => {
                        let r = sys::cuMemcpyPeerAsync(peer.addr(), c1, src.addr(), c0, 8, s);
                        assert_eq!(r, sys::CUresult::CUDA_SUCCESS)
                    }
                    _ => {}
                }
                assert_eq!(sys::cuStreamWriteValue64_v2(s, mark.device_addr(), n, 0), sys::CUresult::CUDA_SUCCESS);
            }
            let call = t0.elapsed();
            while seen.load(Ordering::Acquire) < n {
                std::hint::spin_loop();
            }
            let done = t0.elapsed();
            if i >= 200 {
                bench::record(&format!("driver/{case}/call"), &driver, 1, call);
                bench::record(&format!("driver/{case}/done"), &driver, 1, done);
            }
            // Let the stream go idle, as between two requests of a ping-pong.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(1000))
        .sample_size(10)
        .plotting_backend(PlottingBackend::Plotters)
        .configure_from_args();
    let Some(gpus) = testing::gpus_or_skip("bench sync", 1) else { return };
    fifo_roundtrip(&mut c, &gpus[0]);
    // The two-sided parts: on two GPUs, else both sides on one (labelled "same GPU", no targets).
    if let Some(peers) = testing::peers_or_skip("bench sync (two-sided parts)") {
        bench::set_peer_form(testing::PeerForm::of(&peers));
        semaphore_pingpong(&mut c, &peers[0], &peers[1]);
        port_pingpong(&mut c, &peers[0], &peers[1]);
        driver_latency(&peers[0], &peers[1]);
        bench::set_peer_form(testing::PeerForm::TwoGpus);
    }
    bench::print_summary("sync");
    c.final_summary();
}
