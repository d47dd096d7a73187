//! Bulk-copy bandwidth (1 GiB transfers), each against a baseline measured in the same run:
//! * local copy through the bulk pipeline vs `cuMemcpyDtoDAsync`;
//! * GPU 0 -> GPU 1 bulk store vs `cuMemcpyPeerAsync`;
//! * GPU 0 -> GPU 1 bulk reduce-store (f32 add) vs the bulk store.

use std::sync::Arc;

use criterion::{Criterion, Throughput};
use mscclpp_host::launch::launch_on;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::{PTX, bench, testing};

const BYTES: usize = 1 << 30;

/// (kernel, stages, tile bytes, CTAs per SM) candidates for the bulk pipeline.
/// The best four of a sweep over stages 2-4, tiles 16-64 KiB and 1-7 CTAs per SM (NOTES.md).
const CONFIGS: &[(&str, u32, u32, u32)] = &[
    ("bulk_copy_s2", 2, 48 * 1024, 2),
    ("bulk_copy_s3", 3, 32 * 1024, 2),
    ("bulk_copy_s3", 3, 64 * 1024, 1),
    ("bulk_copy_s4", 4, 48 * 1024, 1),
];

fn bulk_copy(
    c: &mut Criterion,
    group: &str,
    g: &Arc<Gpu>,
    dst: &DeviceBuffer,
    src: &DeviceBuffer,
    baseline: &str,
    reduce: bool,
) {
    let mut grp = c.benchmark_group(group);
    grp.throughput(Throughput::Bytes(BYTES as u64));
    let configs: Vec<_> =
        if reduce { vec![("bulk_reduce_stream_f32", 3u32, 32 * 1024u32, 2u32)] } else { CONFIGS.to_vec() };
    for (kernel, stages, tile, per_sm) in configs {
        let grid = g.info().sm_count * per_sm;
        let smem = mscclpp_device::bulk::pipeline_smem_bytes(stages, tile);
        let f = g.function(PTX, kernel).unwrap();
        let id = format!("{group}/{kernel}/tile{}k/x{per_sm}", tile / 1024);
        grp.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g, g.stream(), iters, || {
                    let mut a = Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(BYTES as u64).arg(tile);
                    // SAFETY: parameters match the kernel; both buffers hold BYTES bytes.
                    unsafe { launch_on(g, g.stream(), &f, LaunchConfig::new(grid, 32).shared(smem), &mut a) }.unwrap();
                });
                bench::record(&id, BYTES as u64, iters, t, Some(baseline));
                t
            })
        });
    }
    grp.finish();
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(1500))
        .sample_size(10)
        .configure_from_args();
    let Some(gpus) = testing::gpus_or_skip("bench bulk", 1) else { return };
    let g0 = &gpus[0];
    let src = DeviceBuffer::from_slice(g0, &testing::random_bytes(BYTES)).unwrap();
    let dst = DeviceBuffer::filled(g0, BYTES, testing::POISON).unwrap();

    // Local: cuMemcpyDtoDAsync baseline, then the bulk pipeline.
    {
        let mut grp = c.benchmark_group("local");
        grp.throughput(Throughput::Bytes(BYTES as u64));
        grp.bench_function("local/cuMemcpyDtoD", |b| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g0, g0.stream(), iters, || {
                    // SAFETY: both buffers hold BYTES bytes on this GPU.
                    unsafe {
                        cudarc::driver::result::memcpy_dtod_async(
                            dst.addr(),
                            src.addr(),
                            BYTES,
                            g0.stream().cu_stream(),
                        )
                    }
                    .unwrap();
                });
                bench::record("local/cuMemcpyDtoD", BYTES as u64, iters, t, None);
                t
            })
        });
        grp.finish();
    }
    bulk_copy(&mut c, "local", g0, &dst, &src, "local/cuMemcpyDtoD", false);
    // Correctness of what was timed: the last copy must equal the source.
    let (a, b) = (src.to_vec::<u64>().unwrap(), dst.to_vec::<u64>().unwrap());
    assert!(a == b, "local bulk copy produced wrong data");

    if gpus.len() >= 2 {
        let g1 = &gpus[1];
        g0.enable_peer_access(g1).unwrap();
        g1.enable_peer_access(g0).unwrap();
        let peer = DeviceBuffer::filled(g1, BYTES, testing::POISON).unwrap();
        {
            let mut grp = c.benchmark_group("peer");
            grp.throughput(Throughput::Bytes(BYTES as u64));
            grp.bench_function("peer/cuMemcpyPeer", |b| {
                b.iter_custom(|iters| {
                    let t = bench::time_on_stream(g0, g0.stream(), iters, || {
                        bench::memcpy_peer(&peer, &src, BYTES);
                    });
                    bench::record("peer/cuMemcpyPeer", BYTES as u64, iters, t, None);
                    t
                })
            });
            grp.finish();
        }
        bulk_copy(&mut c, "peer", g0, &peer, &src, "peer/cuMemcpyPeer", false);
        let got = peer.to_vec::<u64>().unwrap();
        assert!(got == a, "peer bulk store produced wrong data");
        // Reduce-store into the peer, compared with the best peer bulk store variant.
        let best = CONFIGS
            .iter()
            .map(|(k, _, t, x)| format!("peer/{k}/tile{}k/x{x}", t / 1024))
            .min_by(|x, y| bench::median_of(x).unwrap_or(f64::MAX).total_cmp(&bench::median_of(y).unwrap_or(f64::MAX)))
            .unwrap();
        let fsrc = DeviceBuffer::from_slice(g0, &testing::random_f32(BYTES / 4, -1.0, 1.0)).unwrap();
        bulk_copy(&mut c, "peer_reduce", g0, &peer, &fsrc, &best, true);
    } else {
        testing::record_skip("bench bulk peer", "needs 2 GPUs");
    }
    bench::print_summary("bulk");
    c.final_summary();
}
