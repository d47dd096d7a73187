//! Memory-channel bandwidth and latency, each against a baseline from the same run:
//! * `put` GPU 0 -> GPU 1 (every thread of a grid over all SMs shares one 1 GiB copy) vs
//!   `cuMemcpyPeerAsync` (plain CUDA C++ 16-byte peer stores reach about 369 GB/s on two H200s);
//! * ping-pong of 8 B to 64 KiB messages as LL16 / LL8 packets vs `put` + `signal` / `wait`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use mscclpp_device::packet::{LL16Packet, packet_bytes};
use mscclpp_host::channel::memory_channel_pair;
use mscclpp_host::launch::launch_on;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::{PTX, bench, testing};

const BYTES: usize = 1 << 30;

fn launch(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: every call passes the kernel's parameters in order with matching types.
    unsafe { g.launch(PTX, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn put_bandwidth(c: &mut Criterion, g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    let src = DeviceBuffer::from_slice(g0, &testing::random_bytes(BYTES)).unwrap();
    let dst = DeviceBuffer::filled(g1, BYTES, testing::POISON).unwrap();
    let (chan, _, _storage) = memory_channel_pair(&src, &dst, 16).unwrap();
    let mut grp = c.benchmark_group("put");
    grp.throughput(Throughput::Bytes(BYTES as u64));
    grp.bench_function("put/cuMemcpyPeer", |b| {
        b.iter_custom(|iters| {
            let t = bench::time_on_stream(g0, g0.stream(), iters, || {
                bench::memcpy_peer(&dst, &src, BYTES);
            });
            bench::record("put/cuMemcpyPeer", BYTES as u64, iters, t, None);
            t
        })
    });
    let f = g0.function(PTX, "memchan_put").unwrap();
    // 1024 threads per SM in three shapes (the kernel's 48 registers leave room for ~1300).
    for (per_sm, threads) in [(1u32, 1024u32), (2, 512), (4, 256)] {
        let grid = g0.info().sm_count * per_sm;
        let id = format!("put/memchan_put/{per_sm}x{threads}_per_sm");
        grp.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g0, g0.stream(), iters, || {
                    let mut a = Args::new().arg(chan).arg(0u64).arg(0u64).arg(BYTES as u64);
                    // SAFETY: parameters match `memchan_put`; both buffers hold BYTES bytes.
                    unsafe { launch_on(g0, g0.stream(), &f, LaunchConfig::new(grid, threads), &mut a) }.unwrap();
                });
                bench::record(&id, BYTES as u64, iters, t, Some("put/cuMemcpyPeer"));
                t
            })
        });
    }
    grp.finish();
    // What was timed last is a put: the destination must equal the source.
    let (a, b) = (src.to_vec::<u64>().unwrap(), dst.to_vec::<u64>().unwrap());
    assert!(a == b, "memory-channel put produced wrong data");
}

fn latency(c: &mut Criterion, g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    let max = 64 << 10;
    // Each side's buffer: [0, bytes) is sent, [bytes, 2 bytes) receives.
    let b0 = DeviceBuffer::from_slice(g0, &testing::random_bytes(2 * max)).unwrap();
    let b1 = DeviceBuffer::from_slice(g1, &testing::random_bytes(2 * max)).unwrap();
    let (c0, c1, _storage) = memory_channel_pair(&b0, &b1, packet_bytes::<LL16Packet>(max as u64) as usize).unwrap();
    let cfg = LaunchConfig::new(1, 512);
    // One flag sequence for every packet bench: slots keep their last packet, and an LL16
    // packet's halves look like LL8 packets, so a flag must never repeat on this buffer.
    let mut flag_base = 0u32;
    let mut grp = c.benchmark_group("latency");
    for bytes in [8u64, 64, 512, 4096, 32 << 10, 64 << 10] {
        let base_id = format!("latency/put_signal/{bytes}B");
        grp.bench_function(&base_id, |b| {
            b.iter_custom(|iters| {
                let r = iters as u32;
                launch(g1, "put_signal_pingpong", cfg, Args::new().arg(c1).arg(bytes).arg(r).arg(0u32));
                let t = bench::time_on_stream(g0, g0.stream(), 1, || {
                    launch(g0, "put_signal_pingpong", cfg, Args::new().arg(c0).arg(bytes).arg(r).arg(1u32));
                });
                g1.synchronize().unwrap();
                bench::record(&base_id, 0, iters, t, None);
                t
            })
        });
        for (kernel, name) in [("packet_pingpong_bench_ll16", "ll16"), ("packet_pingpong_bench_ll8", "ll8")] {
            let id = format!("latency/{name}_packets/{bytes}B");
            grp.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let r = iters as u32;
                    let args = |chan, first: u32| Args::new().arg(chan).arg(bytes).arg(r).arg(first).arg(flag_base);
                    launch(g1, kernel, cfg, args(c1, 0));
                    let t = bench::time_on_stream(g0, g0.stream(), 1, || launch(g0, kernel, cfg, args(c0, 1)));
                    g1.synchronize().unwrap();
                    flag_base = flag_base.wrapping_add(r);
                    bench::record(&id, 0, iters, t, Some(&base_id));
                    t
                })
            });
        }
    }
    grp.finish();
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(1000))
        .sample_size(10)
        .configure_from_args();
    let Some(gpus) = testing::gpus_or_skip("bench memchan", 2) else { return };
    put_bandwidth(&mut c, &gpus[0], &gpus[1]);
    latency(&mut c, &gpus[0], &gpus[1]);
    bench::print_summary("memchan");
    println!("(put ratio: memory-channel put / cuMemcpyPeer; the CUDA C++ peer SM-copy ceiling is ~369 GB/s)");
    println!("(latency ratio: put + signal round trip / packet round trip; > 1: packets are faster)");
    c.final_summary();
}
