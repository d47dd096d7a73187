//! Bulk-copy bandwidth from 64 KiB to 1 GiB, each size against a baseline measured in the same
//! run:
//! * local copy through the bulk pipeline vs `cuMemcpyDtoDAsync`;
//! * GPU 0 -> GPU 1 bulk store vs `cuMemcpyPeerAsync`;
//! * at 1 GiB, three more pipeline configurations, and the GPU 0 -> GPU 1 bulk reduce-store
//!   (f32 add) vs the bulk store.
//!
//! Every timed kernel writes into a destination poisoned after the baseline ran (the baseline
//! copies the same bytes), and its result is checked afterwards: the copied range equals the
//! source and the bytes after it are still poison.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, PlottingBackend, Throughput};
use mscclpp_host::launch::launch_on;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::{
    PTX,
    bench::{self, Target, Variant, size_id},
    report::family,
    testing::{self, POISON},
};

const FAMILY: &str = family::BULK;
const MAX: usize = 1 << 30;
/// The sizes of the sweep: 64 KiB to 1 GiB, x4.
const SIZES: [usize; 8] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// A bulk-pipeline configuration: (kernel, stages, tile bytes, CTAs per SM).
type Config = (&'static str, u32, u32, u32);
/// The configuration of the sweep. From 32 KiB tiles and two CTAs per SM on, every configuration
/// of a sweep over stages 2-4, tiles 16-64 KiB and 1-7 CTAs per SM lands within 1% of the best
/// (NOTES.md).
const SWEEP: Config = ("bulk_copy_s3", 3, 32 * 1024, 2);
/// Three more of the best four of that sweep, compared at 1 GiB.
const CONFIGS: [Config; 3] =
    [("bulk_copy_s2", 2, 48 * 1024, 2), ("bulk_copy_s3", 3, 64 * 1024, 1), ("bulk_copy_s4", 4, 48 * 1024, 1)];

/// The goal at 1 GiB: 0.95 of the driver's copy (local and peer).
const COPY_TARGET: Target = Target::Ratio(0.95);
/// The goal of the f32 bulk reduce-store: 0.85 of the bulk store.
const REDUCE_TARGET: Target = Target::Ratio(0.85);

fn config_id(path: &str, (kernel, _, tile, per_sm): Config) -> String {
    format!("{path}/{kernel}/tile{}k/x{per_sm}", tile / 1024)
}

/// Launches the pipeline kernel `kernel` of configuration `cfg` over `bytes` bytes, `iters`
/// times, timed on `g`'s stream.
fn time_kernel(
    g: &Arc<Gpu>,
    kernel: &str,
    cfg: Config,
    dst: &DeviceBuffer,
    src: &DeviceBuffer,
    bytes: usize,
    iters: u64,
) -> Duration {
    let (_, stages, tile, per_sm) = cfg;
    let grid = g.info().sm_count * per_sm;
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(stages, tile);
    let f = g.function(PTX, kernel).unwrap();
    bench::time_on_stream(g, g.stream(), iters, || {
        let mut a = Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u64).arg(tile);
        // SAFETY: parameters match the kernel; both buffers hold at least `bytes` bytes.
        unsafe { launch_on(g, g.stream(), &f, LaunchConfig::new(grid, 32).shared(smem), &mut a) }.unwrap();
    })
}

/// One copy path (`local` or `peer`) at every size of the sweep: the driver's copy (`baseline`,
/// named `base_name`), then the bulk pipeline into the re-poisoned destination, checked.
/// Returns the id of the pipeline's 1 GiB variant.
fn sweep(
    c: &mut Criterion,
    path: &str,
    base_name: &str,
    g: &Arc<Gpu>,
    (dst, src, data): (&DeviceBuffer, &DeviceBuffer, &[u8]),
    baseline: impl Fn(usize),
) -> String {
    let mut grp = c.benchmark_group(format!("bulk_{path}"));
    grp.warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_millis(600));
    let mut last = String::new();
    for bytes in SIZES {
        grp.throughput(Throughput::Bytes(bytes as u64));
        let base_id = format!("{path}/{base_name}/{}", size_id(bytes as u64));
        let v = Variant::bandwidth(FAMILY, bytes as u64).series(format!("{path}/{base_name}"));
        grp.bench_with_input(BenchmarkId::new(base_name, size_id(bytes as u64)), &bytes, |b, &bytes| {
            b.iter_custom(|iters| {
                let t = bench::time_on_stream(g, g.stream(), iters, || baseline(bytes));
                bench::record(&base_id, &v, iters, t);
                t
            })
        });
        // The baseline wrote the very bytes the kernel will: poison them, so a kernel that
        // skips any of them fails the check below.
        dst.fill(POISON).unwrap();
        let id = format!("{path}/bulk_pipeline/{}", size_id(bytes as u64));
        let v = Variant::bandwidth(FAMILY, bytes as u64)
            .series(format!("{path}/bulk pipeline"))
            .vs(&base_id)
            .target((bytes == MAX).then_some(COPY_TARGET));
        grp.bench_with_input(BenchmarkId::new("bulk_pipeline", size_id(bytes as u64)), &bytes, |b, &bytes| {
            b.iter_custom(|iters| {
                let t = time_kernel(g, SWEEP.0, SWEEP, dst, src, bytes, iters);
                bench::record(&id, &v, iters, t);
                t
            })
        });
        testing::assert_copied(&format!("{path} bulk copy of {}", size_id(bytes as u64)), dst, data, bytes);
        last = id;
    }
    grp.finish();
    // The other configurations at 1 GiB, against the same baseline.
    let mut grp = c.benchmark_group(format!("bulk_{path}_configs"));
    grp.throughput(Throughput::Bytes(MAX as u64));
    let base_id = format!("{path}/{base_name}/{}", size_id(MAX as u64));
    for cfg in CONFIGS {
        dst.fill(POISON).unwrap();
        let id = config_id(path, cfg);
        let v = Variant::bandwidth(FAMILY, MAX as u64).vs(&base_id).target(COPY_TARGET);
        grp.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = time_kernel(g, cfg.0, cfg, dst, src, MAX, iters);
                bench::record(&id, &v, iters, t);
                t
            })
        });
        testing::assert_copied(&id, dst, data, MAX);
    }
    grp.finish();
    last
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(10)
        .plotting_backend(PlottingBackend::Plotters)
        .configure_from_args();
    let Some(gpus) = testing::gpus_or_skip("bench bulk", 1) else { return };
    let g0 = &gpus[0];
    let data = testing::random_bytes(MAX);
    let src = DeviceBuffer::from_slice(g0, &data).unwrap();
    let dst = DeviceBuffer::filled(g0, MAX, POISON).unwrap();

    sweep(&mut c, "local", "cuMemcpyDtoD", g0, (&dst, &src, &data), |bytes| {
        // SAFETY: both buffers hold at least `bytes` bytes on this GPU.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst.addr(), src.addr(), bytes, g0.stream().cu_stream()) }
            .unwrap();
    });

    // The peer parts: on a second GPU, else into a second handle of this one (labelled
    // "same GPU", no targets).
    if let Some(peers) = testing::peers_or_skip("bench bulk peer") {
        bench::set_peer_form(testing::PeerForm::of(&peers));
        let g1 = &peers[1];
        g0.enable_peer_access(g1).unwrap();
        g1.enable_peer_access(g0).unwrap();
        let peer = DeviceBuffer::filled(g1, MAX, POISON).unwrap();
        let store = sweep(&mut c, "peer", "cuMemcpyPeer", g0, (&peer, &src, &data), |bytes| {
            bench::memcpy_peer(&peer, &src, bytes)
        });
        // Reduce-store (f32 add) into the peer, compared with the peer bulk store of the same
        // configuration and size.
        let floats = testing::random_f32(MAX / 4, -1.0, 1.0);
        let fsrc = DeviceBuffer::from_slice(g0, &floats).unwrap();
        let mut grp = c.benchmark_group("bulk_peer_reduce");
        grp.throughput(Throughput::Bytes(MAX as u64));
        let cfg: Config = ("bulk_reduce_stream_f32", 3, 32 * 1024, 2);
        let id = config_id("peer_reduce", cfg);
        let v = Variant::bandwidth(FAMILY, MAX as u64).vs(&store).target(REDUCE_TARGET);
        grp.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = time_kernel(g0, cfg.0, cfg, &peer, &fsrc, MAX, iters);
                bench::record(&id, &v, iters, t);
                t
            })
        });
        grp.finish();
        // The kernel that was timed, once more on known data: peer = x, then peer += x must
        // give exactly 2x (a doubling is exact), element for element.
        bench::memcpy_peer(&peer, &fsrc, MAX);
        g0.synchronize().unwrap();
        time_kernel(g0, cfg.0, cfg, &peer, &fsrc, MAX, 1);
        let got: Vec<u32> = peer.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect();
        let want: Vec<u32> = floats.iter().map(|x| (2.0 * x).to_bits()).collect();
        testing::assert_same("peer f32 bulk reduce-store", &got, &want);
        bench::set_peer_form(testing::PeerForm::TwoGpus);
    }
    bench::print_summary("bulk");
    c.final_summary();
}
