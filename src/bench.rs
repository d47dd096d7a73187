//! GPU timing for benchmarks: CUDA events around the measured work, a collector of per-iteration
//! times, and the summary table (GB/s and the ratio to a baseline measured in the same run).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::CudaStream;
use mscclpp_host::{DeviceBuffer, Gpu};

/// Enqueues `cuMemcpyPeerAsync` of `bytes` from `src` to `dst` (on another GPU) on `src`'s GPU
/// stream: the driver's peer copy, the baseline of the peer-bandwidth benches.
pub fn memcpy_peer(dst: &DeviceBuffer, src: &DeviceBuffer, bytes: usize) {
    assert!(bytes <= dst.len() && bytes <= src.len(), "peer copy of {bytes} bytes beyond a buffer");
    let (gd, gs) = (dst.gpu(), src.gpu());
    // SAFETY: both ranges lie inside live buffers (checked), each in its own GPU's context.
    let r = unsafe {
        cudarc::driver::sys::cuMemcpyPeerAsync(
            dst.addr(),
            gd.context().cu_ctx(),
            src.addr(),
            gs.context().cu_ctx(),
            bytes,
            gs.stream().cu_stream(),
        )
    };
    r.result().unwrap();
}

/// Times `iters` repetitions of `work` on `stream` with CUDA events (the host only enqueues).
/// Returns the total GPU time.
pub fn time_on_stream(gpu: &Gpu, stream: &Arc<CudaStream>, iters: u64, mut work: impl FnMut()) -> Duration {
    gpu.bind().expect("bind");
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = gpu.context().new_event(timing).expect("event");
    let stop = gpu.context().new_event(timing).expect("event");
    start.record(stream).expect("record start");
    for _ in 0..iters {
        work();
    }
    stop.record(stream).expect("record stop");
    // Poll with sleeps rather than a driver-side wait, so this thread does not compete with
    // proxy threads for the driver while the measured work runs.
    loop {
        // SAFETY: a live event of this context.
        match unsafe { cudarc::driver::sys::cuEventQuery(stop.cu_event()) } {
            cudarc::driver::sys::CUresult::CUDA_SUCCESS => break,
            cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => std::thread::sleep(Duration::from_micros(50)),
            e => panic!("waiting for the stop event: {e:?} (a kernel failed?)"),
        }
    }
    let ms = start.elapsed_ms(&stop).expect("elapsed");
    Duration::from_secs_f64(ms as f64 / 1e3)
}

/// One measured variant.
#[derive(Clone, Debug, Default)]
struct Entry {
    bytes: u64,
    ops: u64,
    samples: Vec<f64>,
    baseline: Option<String>,
}

fn results() -> &'static Mutex<BTreeMap<String, Entry>> {
    static R: OnceLock<Mutex<BTreeMap<String, Entry>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Records a sample: `total` GPU time for `iters` iterations of variant `id`, each moving `bytes`
/// (0 for latency benches). `baseline` names the variant this one is compared with.
pub fn record(id: &str, bytes: u64, iters: u64, total: Duration, baseline: Option<&str>) {
    let mut r = results().lock().unwrap_or_else(|e| e.into_inner());
    let e = r.entry(id.to_string()).or_default();
    e.bytes = bytes;
    e.baseline = baseline.map(str::to_string);
    e.samples.push(total.as_secs_f64() / iters.max(1) as f64);
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() { f64::NAN } else { s[s.len() / 2] }
}

/// Records a sample of a rate bench: `total` GPU time for `iters` iterations of variant `id`,
/// each completing `ops` operations (the summary prints millions of operations per second).
pub fn record_ops(id: &str, ops: u64, iters: u64, total: Duration, baseline: Option<&str>) {
    let mut r = results().lock().unwrap_or_else(|e| e.into_inner());
    let e = r.entry(id.to_string()).or_default();
    e.ops = ops;
    e.baseline = baseline.map(str::to_string);
    e.samples.push(total.as_secs_f64() / iters.max(1) as f64);
}

/// Median seconds per iteration of a recorded variant.
pub fn median_of(id: &str) -> Option<f64> {
    results().lock().unwrap_or_else(|e| e.into_inner()).get(id).map(|e| median(&e.samples))
}

/// Prints the summary table (and appends it as JSON lines to `$MSCCLPP_RS_BENCH_OUT` if set):
/// per variant the median time, GB/s (decimal) when it moves bytes, and the ratio of its speed
/// to its baseline's (>1 is faster than the baseline; for latency, baseline time / time).
pub fn print_summary(title: &str) {
    let r = results().lock().unwrap_or_else(|e| e.into_inner());
    println!("\n== {title}: medians of GPU-event times ==");
    println!("{:<48} {:>12} {:>12} {:>8}  baseline", "variant", "time", "GB/s|Mop/s", "ratio");
    let mut json = String::new();
    for (id, e) in r.iter() {
        let t = median(&e.samples);
        let rate = if e.bytes > 0 {
            format!("{:.1}", e.bytes as f64 / t / 1e9)
        } else if e.ops > 0 {
            format!("{:.2} Mop/s", e.ops as f64 / t / 1e6)
        } else {
            "-".to_string()
        };
        let ratio = e.baseline.as_ref().and_then(|b| r.get(b)).map(|b| median(&b.samples) / t);
        let time = if t < 1e-3 { format!("{:.2} us", t * 1e6) } else { format!("{:.3} ms", t * 1e3) };
        println!(
            "{:<48} {:>12} {:>12} {:>8}  {}",
            id,
            time,
            rate,
            ratio.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
            e.baseline.as_deref().unwrap_or("")
        );
        json.push_str(&format!(
            "{{\"suite\":\"{title}\",\"variant\":\"{id}\",\"seconds\":{t:e},\"bytes\":{},\"ops\":{},\"ratio\":{},\"baseline\":\"{}\"}}\n",
            e.bytes,
            e.ops,
            ratio.map(|x| format!("{x:.4}")).unwrap_or_else(|| "null".into()),
            e.baseline.as_deref().unwrap_or("")
        ));
    }
    if let Some(p) = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p)
    {
        let _ = f.write_all(json.as_bytes());
    }
}
