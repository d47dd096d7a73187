//! Memory-channel bandwidth and latency, each against a baseline from the same run:
//! * `put` GPU 0 -> GPU 1 (every thread of a grid over all SMs shares one copy) vs
//!   `cuMemcpyPeerAsync`, from 64 KiB to 1 GiB; at 1 GiB in three grid shapes;
//! * ping-pong of 8 B to 64 KiB messages as LL16 / LL8 packets vs `put` + `signal` / `wait`.
//!
//! Every timed put writes into a destination poisoned after the baseline ran (the baseline
//! copies the same bytes), and its result is checked afterwards: the copied range equals the
//! source and the bytes after it are still poison.
//!
//! On a machine with one GPU both sides run on it (two handles, two streams, kernels resident at
//! the same time): every id and plot then says `same GPU` and no figure has a target
//! ([`bench::set_peer_form`]), since a copy within one GPU says nothing of NVLink.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, PlottingBackend, Throughput};
use mscclpp_device::packet::{LL16Packet, packet_bytes};
use mscclpp_host::channel::memory_channel_pair;
use mscclpp_host::launch::launch_on;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::{
    PTX,
    bench::{self, Target, Variant, size_id},
    report::family,
    testing::{self, POISON},
};

const MAX: usize = 1 << 30;
/// The sizes of the put sweep: 64 KiB to 1 GiB, x4.
const SIZES: [usize; 8] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];
/// The goal of a 1 GiB put: the peer SM-copy ceiling of plain CUDA C++ over cuMemcpyPeer's
/// bandwidth (NOTES.md, "Memory channel", has both).
const PUT_TARGET: Target = Target::Ratio(0.93);

fn launch(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: every call passes the kernel's parameters in order with matching types.
    unsafe { g.launch(PTX, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn put_bandwidth(c: &mut Criterion, g0: &Arc<Gpu>, g1: &Arc<Gpu>) {
    let data = testing::random_bytes(MAX);
    let src = DeviceBuffer::from_slice(g0, &data).unwrap();
    let dst = DeviceBuffer::filled(g1, MAX, POISON).unwrap();
    let (chan, _, _storage) = memory_channel_pair(&src, &dst, 16).unwrap();
    let f = g0.function(PTX, "memchan_put").unwrap();
    let put = |per_sm: u32, threads: u32, bytes: usize, iters: u64| {
        let grid = g0.info().sm_count * per_sm;
        bench::time_on_stream(g0, g0.stream(), iters, || {
            let mut a = Args::new().arg(chan).arg(0u64).arg(0u64).arg(bytes as u64);
            // SAFETY: parameters match `memchan_put`; both buffers hold at least `bytes` bytes.
            unsafe { launch_on(g0, g0.stream(), &f, LaunchConfig::new(grid, threads), &mut a) }.unwrap();
        })
    };
    let mut grp = c.benchmark_group("memchan_put");
    grp.warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_millis(600));
    for bytes in SIZES {
        grp.throughput(Throughput::Bytes(bytes as u64));
        let base_id = format!("put/cuMemcpyPeer/{}", size_id(bytes as u64));
        let v = Variant::bandwidth(family::MEMCHAN, bytes as u64).series("peer/cuMemcpyPeer");
        grp.bench_with_input(BenchmarkId::new("cuMemcpyPeer", size_id(bytes as u64)), &bytes, |b, &bytes| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g0, g0.stream(), iters, || bench::memcpy_peer(&dst, &src, bytes));
                bench::record(&base_id, &v, iters, t);
                t
            })
        });
        // The baseline wrote the very bytes the put will: poison them, so a put that skips any
        // of them fails the check below.
        dst.fill(POISON).unwrap();
        let id = format!("put/memchan_put/{}", size_id(bytes as u64));
        let v = Variant::bandwidth(family::MEMCHAN, bytes as u64)
            .series("peer/memory-channel put")
            .vs(&base_id)
            .target((bytes == MAX).then_some(PUT_TARGET));
        grp.bench_with_input(BenchmarkId::new("memchan_put", size_id(bytes as u64)), &bytes, |b, &bytes| {
            b.iter_custom(|iters| {
                // 1024 threads per SM, one block each.
                let t = put(1, 1024, bytes, iters);
                bench::record(&id, &v, iters, t);
                t
            })
        });
        testing::assert_copied(&format!("memory-channel put of {}", size_id(bytes as u64)), &dst, &data, bytes);
    }
    grp.finish();
    // 1 GiB in the two other shapes of 1024 threads per SM (the kernel's 48 registers leave room
    // for about 1300).
    let mut grp = c.benchmark_group("memchan_put_shapes");
    grp.throughput(Throughput::Bytes(MAX as u64));
    for (per_sm, threads) in [(2u32, 512u32), (4, 256)] {
        dst.fill(POISON).unwrap();
        let id = format!("put/memchan_put/{per_sm}x{threads}_per_sm");
        let v = Variant::bandwidth(family::MEMCHAN, MAX as u64)
            .vs(format!("put/cuMemcpyPeer/{}", size_id(MAX as u64)))
            .target(PUT_TARGET);
        grp.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = put(per_sm, threads, MAX, iters);
                bench::record(&id, &v, iters, t);
                t
            })
        });
        testing::assert_copied(&id, &dst, &data, MAX);
    }
    grp.finish();
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
        let base_id = format!("latency/put_signal/{}", size_id(bytes));
        let v = Variant::latency(family::MEMCHAN, bytes).series("pingpong/put + signal");
        grp.bench_function(BenchmarkId::new("put_signal", size_id(bytes)), |b| {
            b.iter_custom(|iters| {
                let r = iters as u32;
                launch(g1, "put_signal_pingpong", cfg, Args::new().arg(c1).arg(bytes).arg(r).arg(0u32));
                let t = bench::time_on_stream(g0, g0.stream(), 1, || {
                    launch(g0, "put_signal_pingpong", cfg, Args::new().arg(c0).arg(bytes).arg(r).arg(1u32));
                });
                g1.synchronize().unwrap();
                bench::record(&base_id, &v, iters, t);
                t
            })
        });
        for (kernel, name, line) in [
            ("packet_pingpong_bench_ll16", "ll16", "LL16 packets"),
            ("packet_pingpong_bench_ll8", "ll8", "LL8 packets"),
        ] {
            let id = format!("latency/{name}_packets/{}", size_id(bytes));
            let v = Variant::latency(family::PACKETS, bytes).series(format!("pingpong/{line}")).vs(&base_id);
            grp.bench_function(BenchmarkId::new(format!("{name}_packets"), size_id(bytes)), |b| {
                b.iter_custom(|iters| {
                    let r = iters as u32;
                    let args = |chan, first: u32| Args::new().arg(chan).arg(bytes).arg(r).arg(first).arg(flag_base);
                    launch(g1, kernel, cfg, args(c1, 0));
                    let t = bench::time_on_stream(g0, g0.stream(), 1, || launch(g0, kernel, cfg, args(c0, 1)));
                    g1.synchronize().unwrap();
                    flag_base = flag_base.wrapping_add(r);
                    bench::record(&id, &v, iters, t);
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
        .plotting_backend(PlottingBackend::Plotters)
        .configure_from_args();
    let Some(gpus) = testing::peers_or_skip("bench memchan") else { return };
    bench::set_peer_form(testing::PeerForm::of(&gpus));
    put_bandwidth(&mut c, &gpus[0], &gpus[1]);
    latency(&mut c, &gpus[0], &gpus[1]);
    bench::print_summary("memchan");
    println!("(put ratio: memory-channel put / cuMemcpyPeer; the target is the CUDA C++ peer SM-copy ceiling's ratio)");
    println!("(latency ratio: put + signal round trip / packet round trip; > 1: packets are faster)");
    c.final_summary();
}
