//! GPU timing for benchmarks: CUDA events around the measured work, a collector of per-iteration
//! times, and the summary: a table on the terminal and one JSON line per variant appended to
//! `$MSCCLPP_RS_BENCH_OUT` when it is set (the schema is in `docs/BENCHMARKS.md`; the report
//! reads these lines with [`crate::report::read_bench_rows`]).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::CudaStream;
use mscclpp_host::{DeviceBuffer, Gpu};

use crate::testing::PeerForm;

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

/// What a variant's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Each iteration moves the variant's `size` bytes: the value is GB/s (decimal), higher is
    /// better.
    Bandwidth,
    /// The value is microseconds per iteration, lower is better.
    Latency,
    /// Each iteration completes this many operations: the value is millions per second, higher
    /// is better.
    Rate(u64),
}

impl Metric {
    /// The unit written into the `metric` field: `GB/s`, `us` or `Mop/s`.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Bandwidth => "GB/s",
            Metric::Latency => "us",
            Metric::Rate(_) => "Mop/s",
        }
    }
}

/// Whether a higher value of a metric (by its unit) is better: true except for `us`.
pub fn higher_is_better(unit: &str) -> bool {
    unit != "us"
}

/// A goal for one variant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// The ratio to the baseline (speed relative to it, > 1 is faster) is at least this.
    Ratio(f64),
    /// The value itself is at least this (GB/s, Mop/s) or at most this (us).
    Value(f64),
}

/// Whether a row meets its target: `None` without one, or when the ratio it needs is missing.
pub fn met(unit: &str, value: f64, ratio: Option<f64>, target: Option<f64>, target_value: Option<f64>) -> Option<bool> {
    let by_ratio = target.map(|t| ratio.is_some_and(|r| r >= t));
    let by_value = target_value.map(|t| if higher_is_better(unit) { value >= t } else { value <= t });
    match (by_ratio, by_value) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(true) && b.unwrap_or(true)),
    }
}

/// The speed of `value` relative to `baseline` (> 1: faster than the baseline), for a metric
/// of this unit.
pub fn ratio(unit: &str, value: f64, baseline: f64) -> f64 {
    if higher_is_better(unit) { value / baseline } else { baseline / value }
}

/// What a recorded variant measures, against what, and its goal. Built with
/// [`Variant::bandwidth`] / [`Variant::latency`] / [`Variant::rate`] and the builder methods.
#[derive(Clone, Debug)]
pub struct Variant {
    /// The primitive family (`bulk copies`, `semaphores`, ...).
    pub family: &'static str,
    /// What the value is.
    pub metric: Metric,
    /// The message size in bytes (bytes moved per iteration for [`Metric::Bandwidth`]).
    pub size: u64,
    /// The variant id this one is compared with (measured in the same run).
    pub baseline: Option<String>,
    /// The goal.
    pub target: Option<Target>,
    /// The plot line this variant is a point of, `plot/line` (the report draws one plot per
    /// `plot` and metric, one line per `line`, against `size`).
    pub series: Option<String>,
}

impl Variant {
    /// Each iteration moves `size` bytes.
    pub fn bandwidth(family: &'static str, size: u64) -> Self {
        Variant { family, metric: Metric::Bandwidth, size, baseline: None, target: None, series: None }
    }
    /// Each iteration is one round trip (or one operation) with a message of `size` bytes.
    pub fn latency(family: &'static str, size: u64) -> Self {
        Variant { metric: Metric::Latency, ..Self::bandwidth(family, size) }
    }
    /// Each iteration completes `ops` operations.
    pub fn rate(family: &'static str, ops: u64) -> Self {
        Variant { metric: Metric::Rate(ops), ..Self::bandwidth(family, 0) }
    }
    /// Compared with variant `id`.
    pub fn vs(mut self, id: impl Into<String>) -> Self {
        self.baseline = Some(id.into());
        self
    }
    /// With this goal (or none).
    pub fn target(mut self, t: impl Into<Option<Target>>) -> Self {
        self.target = t.into();
        self
    }
    /// A point of plot line `series` (`plot/line`).
    pub fn series(mut self, series: impl Into<String>) -> Self {
        self.series = Some(series.into());
        self
    }
}

/// One measured variant.
#[derive(Clone, Debug)]
struct Entry {
    id: String,
    variant: Variant,
    samples: Vec<f64>,
}

fn results() -> &'static Mutex<Vec<Entry>> {
    static R: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

/// Whether the two-sided variants recorded from now on ran with both peers on one GPU
/// ([`set_peer_form`]).
static SAME_GPU: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Where the two sides of the variants recorded from now on run ([`testing::peers_or_skip`]):
/// on one GPU ([`PeerForm::SameGpu`]) every id, baseline and plot then says `same GPU`, and no
/// target applies, so that a copy or a round trip within one GPU is never compared with the
/// two-GPU (NVLink) goals. Set [`PeerForm::TwoGpus`] again after the two-sided part.
///
/// [`testing::peers_or_skip`]: crate::testing::peers_or_skip
pub fn set_peer_form(form: PeerForm) {
    SAME_GPU.store(form == PeerForm::SameGpu, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the current peer form is one GPU.
fn same_gpu() -> bool {
    SAME_GPU.load(std::sync::atomic::Ordering::Relaxed)
}

/// `id` as recorded under a peer form (`same`: one GPU).
fn form_id(same: bool, id: &str) -> String {
    if same { format!("same GPU/{id}") } else { id.to_string() }
}

/// `variant` as recorded under a peer form: on one GPU (`same`), its baseline is the same-GPU
/// one, its plot is `PLOT, same GPU` and it has no target.
fn form_variant(same: bool, variant: &Variant) -> Variant {
    if !same {
        return variant.clone();
    }
    let series = variant.series.as_deref().map(|s| match s.split_once('/') {
        Some((plot, line)) => format!("{plot}, same GPU/{line}"),
        None => format!("{s}, same GPU"),
    });
    Variant { baseline: variant.baseline.as_deref().map(|b| form_id(true, b)), series, target: None, ..variant.clone() }
}

/// Records a sample: `total` GPU time for `iters` iterations of variant `id`. Variants are
/// reported in the order they were first recorded (under the peer form, [`set_peer_form`]).
pub fn record(id: &str, variant: &Variant, iters: u64, total: Duration) {
    let same = same_gpu();
    let (id, variant) = (form_id(same, id), form_variant(same, variant));
    let mut r = results().lock().unwrap_or_else(|e| e.into_inner());
    let per = total.as_secs_f64() / iters.max(1) as f64;
    match r.iter_mut().find(|e| e.id == id) {
        Some(e) => {
            e.variant = variant;
            e.samples.push(per);
        }
        None => r.push(Entry { id, variant, samples: vec![per] }),
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() { f64::NAN } else { s[s.len() / 2] }
}

/// The value of a variant whose median is `seconds` per iteration, in its metric's unit.
fn value_of(v: &Variant, seconds: f64) -> f64 {
    match v.metric {
        Metric::Bandwidth => v.size as f64 / seconds / 1e9,
        Metric::Latency => seconds * 1e6,
        Metric::Rate(ops) => ops as f64 / seconds / 1e6,
    }
}

/// The JSON lines of every recorded variant (schema: `docs/BENCHMARKS.md`).
pub fn json_lines(suite: &str) -> String {
    let r = results().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    for e in r.iter() {
        let v = &e.variant;
        let seconds = median(&e.samples);
        let value = value_of(v, seconds);
        let unit = v.metric.unit();
        let base = v.baseline.as_ref().and_then(|b| r.iter().find(|x| &x.id == b));
        let baseline_value = base.map(|b| value_of(&b.variant, median(&b.samples)));
        let ratio = baseline_value.map(|b| ratio(unit, value, b));
        let (target, target_value) = match v.target {
            Some(Target::Ratio(t)) => (Some(t), None),
            Some(Target::Value(t)) => (None, Some(t)),
            None => (None, None),
        };
        let row = serde_json::json!({
            "suite": suite,
            "family": v.family,
            "name": e.id,
            "series": v.series,
            "size_bytes": v.size,
            "metric": unit,
            "value": value,
            "seconds": seconds,
            "samples": e.samples.len(),
            "baseline": v.baseline,
            "baseline_value": baseline_value,
            "ratio": ratio,
            "target": target,
            "target_value": target_value,
            "met": met(unit, value, ratio, target, target_value),
        });
        out.push_str(&row.to_string());
        out.push('\n');
    }
    out
}

/// Prints the summary table (and appends its JSON lines to `$MSCCLPP_RS_BENCH_OUT` if set):
/// per variant the median time, its value (GB/s, us or Mop/s), the ratio of its speed to its
/// baseline's (> 1 is faster than the baseline) and its target.
pub fn print_summary(suite: &str) {
    let json = json_lines(suite);
    println!("\n== {suite}: medians of GPU-event times ==");
    println!("{:<44} {:>11} {:>14} {:>7} {:>11}  baseline", "variant", "time", "value", "ratio", "target");
    for line in json.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let t = v["seconds"].as_f64().unwrap_or(f64::NAN);
        let time = if t < 1e-3 { format!("{:.2} us", t * 1e6) } else { format!("{:.3} ms", t * 1e3) };
        let unit = v["metric"].as_str().unwrap_or("");
        let target = match (v["target"].as_f64(), v["target_value"].as_f64()) {
            (Some(r), _) => format!(">= {r:.2}x"),
            (None, Some(x)) => format!("{} {x} {unit}", if higher_is_better(unit) { ">=" } else { "<=" }),
            _ => "-".to_string(),
        };
        let verdict = match v["met"].as_bool() {
            Some(true) => " met",
            Some(false) => " MISSED",
            None => "",
        };
        println!(
            "{:<44} {:>11} {:>14} {:>7} {:>11}  {}{verdict}",
            v["name"].as_str().unwrap_or(""),
            time,
            format!("{:.2} {unit}", v["value"].as_f64().unwrap_or(f64::NAN)),
            v["ratio"].as_f64().map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
            target,
            v["baseline"].as_str().unwrap_or("")
        );
    }
    if let Some(p) = std::env::var_os("MSCCLPP_RS_BENCH_OUT") {
        match std::fs::OpenOptions::new().create(true).append(true).open(&p) {
            Ok(mut f) => {
                if let Err(e) = f.write_all(json.as_bytes()) {
                    eprintln!("writing {}: {e}", p.to_string_lossy());
                }
            }
            Err(e) => eprintln!("opening {}: {e}", p.to_string_lossy()),
        }
    }
}

/// `64KiB`, `1MiB`, `1GiB`, `8B`: a size as it appears in variant ids.
pub fn size_id(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_gpu_figures_say_so_and_have_no_target() {
        let v =
            Variant::latency("semaphores", 8).series("pingpong/put + signal").vs("base/8B").target(Target::Value(3.0));
        let two = form_variant(false, &v);
        assert_eq!((two.series.as_deref(), two.baseline.as_deref()), (Some("pingpong/put + signal"), Some("base/8B")));
        assert!(two.target.is_some());
        assert_eq!(form_id(false, "latency/x/8B"), "latency/x/8B");
        let same = form_variant(true, &v);
        assert_eq!(same.series.as_deref(), Some("pingpong, same GPU/put + signal"));
        assert_eq!(same.baseline.as_deref(), Some("same GPU/base/8B"));
        assert!(same.target.is_none(), "a same-GPU figure is never held to a two-GPU target");
        assert_eq!(form_id(true, "latency/x/8B"), "same GPU/latency/x/8B");
        assert_eq!((same.size, same.family), (8, "semaphores"));
    }

    #[test]
    fn targets_and_ratios() {
        // Bandwidth: higher is better; latency: lower is better.
        assert_eq!(ratio("GB/s", 190.0, 200.0), 0.95);
        assert_eq!(ratio("us", 4.0, 2.0), 0.5);
        assert_eq!(met("GB/s", 190.0, Some(0.95), Some(0.95), None), Some(true));
        assert_eq!(met("GB/s", 189.0, Some(0.945), Some(0.95), None), Some(false));
        assert_eq!(met("us", 9.0, None, None, Some(10.0)), Some(true));
        assert_eq!(met("us", 21.0, None, None, Some(10.0)), Some(false));
        assert_eq!(met("GB/s", 1.0, None, Some(0.95), None), Some(false), "a ratio target without a baseline");
        assert_eq!(met("us", 1.0, Some(2.0), None, None), None);
    }

    #[test]
    fn rows_carry_value_ratio_and_verdict() {
        let base = Variant::bandwidth("bulk copies", 1 << 30).series("local/cuMemcpyDtoD");
        let ours = Variant::bandwidth("bulk copies", 1 << 30).vs("t/base").target(Target::Ratio(0.95));
        // 1 GiB in 0.5 ms and in 0.55 ms (median of three samples each).
        for ms in [0.5, 0.4, 0.6] {
            record("t/base", &base, 10, Duration::from_secs_f64(ms * 10.0 / 1e3));
        }
        for ms in [0.55, 0.55, 0.7] {
            record("t/ours", &ours, 1, Duration::from_secs_f64(ms / 1e3));
        }
        let lat = Variant::latency("semaphores", 8).target(Target::Value(10.0));
        record("t/lat", &lat, 100, Duration::from_micros(2100));
        let text = json_lines("test");
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &serde_json::Value| v["name"].as_str().unwrap().starts_with("t/"))
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert_eq!(rows[0]["name"], "t/base");
        assert_eq!(rows[0]["series"], "local/cuMemcpyDtoD");
        assert!((rows[0]["value"].as_f64().unwrap() - 2147.483648).abs() < 1e-6);
        assert!(rows[0]["ratio"].is_null() && rows[0]["met"].is_null());
        assert_eq!(rows[1]["baseline"], "t/base");
        let r = rows[1]["ratio"].as_f64().unwrap();
        assert!((r - 0.5 / 0.55).abs() < 1e-9, "{r}");
        assert_eq!(rows[1]["target"], 0.95);
        assert_eq!(rows[1]["met"], false);
        assert_eq!(rows[1]["samples"], 3);
        assert_eq!(rows[2]["metric"], "us");
        assert!((rows[2]["value"].as_f64().unwrap() - 21.0).abs() < 1e-9);
        assert_eq!(rows[2]["target_value"], 10.0);
        assert_eq!(rows[2]["met"], false);
        assert_eq!(rows[2]["size_bytes"], 8);
        assert_eq!(size_id(64 << 10), "64KiB");
        assert_eq!(size_id(1 << 30), "1GiB");
        assert_eq!(size_id(8), "8B");
        assert_eq!(size_id(3000), "3000B");
    }
}
