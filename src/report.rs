//! The report's data and rendering: the benchmark rows every bench writes as JSON lines
//! (through `MSCCLPP_RS_BENCH_OUT`, schema in `docs/BENCHMARKS.md`), the collectives' rows of
//! `coll-bench` with their NCCL details, the correctness checks read from the output of the test
//! executables, and their Markdown tables and SVG plots (plotters).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::bench;

/// The primitive families the report groups checks and benchmarks by, in report order.
pub mod family {
    /// Bulk (TMA) copies, reduce-stores and the bulk pipeline.
    pub const BULK: &str = "bulk copies";
    /// Memory semaphores, the grid barrier, the counting semaphore, cooperative launches.
    pub const SYNC: &str = "semaphores and sync";
    /// The trigger FIFO, the host proxy and port channels.
    pub const PORT: &str = "port channels and FIFO";
    /// Memory channels (put / get / signal / wait) and cooperative copies.
    pub const MEMCHAN: &str = "memory channels";
    /// LL8 / LL16 packets.
    pub const PACKETS: &str = "packets";
    /// Switch channels (emulated over peer pointers).
    pub const SWITCH: &str = "switch channel (emulated)";
    /// Bootstrap, rank discovery and GPU memory shared between processes.
    pub const BOOTSTRAP: &str = "bootstrap and IPC";
    /// Allreduce, allgather, reduce-scatter.
    pub const COLLECTIVES: &str = "collectives";
    /// Expert-parallel dispatch and combine (`mscclpp-ep`).
    pub const EP: &str = "expert parallel";
    /// Plans run by the executor kernel (`mscclpp-executor`).
    pub const PLANS: &str = "plans (executor)";
    /// Symmetric memory windows: peers by rank and offset, signals, the team barrier.
    pub const WINDOWS: &str = "symmetric windows";
    /// Every family, in report order.
    pub const ALL: [&str; 11] =
        [BULK, SYNC, PORT, MEMCHAN, PACKETS, SWITCH, BOOTSTRAP, COLLECTIVES, EP, PLANS, WINDOWS];
}

/// The family of a test or phase by the words of its name (`_`-separated; a word matches a key
/// it starts with), first rule first; `None` when no rule matches.
pub fn family_of(name: &str) -> Option<&'static str> {
    use family::*;
    const RULES: &[(&[&str], &str)] = &[
        (&["bootstrap", "mapping"], BOOTSTRAP),
        (&["window"], WINDOWS),
        (&["switch"], SWITCH),
        (&["packet", "ll8", "ll16"], PACKETS),
        (&["bulk", "dispatch", "combine"], BULK),
        (&["memchan", "memory", "copy"], MEMCHAN),
        (&["fifo", "port", "proxy"], PORT),
        (&["allgather", "allreduce", "scatter"], COLLECTIVES),
        (&["semaphore", "barrier", "cooperative", "grid"], SYNC),
    ];
    let words: Vec<&str> = name.split(['_', ' ', '/']).collect();
    RULES.iter().find(|(keys, _)| words.iter().any(|w| keys.iter().any(|k| w.starts_with(k)))).map(|(_, f)| *f)
}

// ---------------------------------------------------------------------------------------------
// Benchmark rows.

/// One row of a bench's JSON lines (the schema of `docs/BENCHMARKS.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    /// The bench that wrote it (`bulk`, `sync`, `memchan`, `coll-bench`).
    pub suite: String,
    /// The primitive family ([`family`]).
    pub family: String,
    /// The variant's id, unique within its suite.
    pub name: String,
    /// The plot line it is a point of, `plot/line`.
    pub series: Option<String>,
    /// The message size in bytes.
    pub size_bytes: u64,
    /// The unit of `value`: `GB/s`, `us` or `Mop/s`.
    pub metric: String,
    /// The median.
    pub value: f64,
    /// What it is compared with.
    pub baseline: Option<String>,
    /// The baseline's value in the same unit.
    pub baseline_value: Option<f64>,
    /// Speed relative to the baseline (> 1: faster).
    pub ratio: Option<f64>,
    /// Least `ratio` wanted.
    pub target: Option<f64>,
    /// Bound on `value` wanted: least for GB/s and Mop/s, most for us.
    pub target_value: Option<f64>,
    /// Whether the targets are met (`None`: no target).
    pub met: Option<bool>,
}

/// The benchmark rows of a JSON-lines text: every line with `family`, `name`, `metric` and a
/// numeric `value` (other lines are skipped).
pub fn read_bench_rows(text: &str) -> Vec<BenchRow> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| bench_row(&v))
        .collect()
}

fn bench_row(v: &serde_json::Value) -> Option<BenchRow> {
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let (metric, value, ratio, target, target_value) =
        (s("metric")?, v["value"].as_f64()?, v["ratio"].as_f64(), v["target"].as_f64(), v["target_value"].as_f64());
    Some(BenchRow {
        suite: s("suite").unwrap_or_default(),
        family: s("family")?,
        name: s("name")?,
        series: s("series"),
        size_bytes: v["size_bytes"].as_u64().unwrap_or(0),
        met: v["met"].as_bool().or_else(|| bench::met(&metric, value, ratio, target, target_value)),
        metric,
        value,
        baseline: s("baseline"),
        baseline_value: v["baseline_value"].as_f64(),
        ratio,
        target,
        target_value,
    })
}

/// A row's target as text: `>= 0.95x`, `<= 10 us`, both joined, or `-`.
pub fn target_text(r: &BenchRow) -> String {
    let mut parts = vec![];
    if let Some(t) = r.target {
        parts.push(format!(">= {t:.2}x"));
    }
    if let Some(t) = r.target_value {
        let op = if bench::higher_is_better(&r.metric) { ">=" } else { "<=" };
        parts.push(format!("{op} {} {}", fmt_value(t), r.metric));
    }
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

/// A value with as many decimals as its size needs.
pub fn fmt_value(v: f64) -> String {
    match v.abs() {
        x if x >= 100.0 => format!("{v:.1}"),
        x if x >= 10.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "",
    }
}

/// The benchmark tables: one per family (in [`family::ALL`] order, then any other), every row
/// with its value, baseline, ratio, target and verdict.
pub fn bench_markdown(rows: &[BenchRow]) -> String {
    let mut fams: Vec<&str> = family::ALL.iter().copied().filter(|f| rows.iter().any(|r| r.family == *f)).collect();
    for r in rows {
        if !fams.contains(&r.family.as_str()) {
            fams.push(&r.family);
        }
    }
    let mut s = String::new();
    for f in fams {
        let _ = writeln!(s, "\n### {f}\n");
        s.push_str("| benchmark | size | value | baseline | baseline value | ratio | target | |\n");
        s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rows.iter().filter(|r| r.family == f) {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} {} | {} | {} | {} | {} | {} |",
                r.name,
                size_label(r.size_bytes),
                fmt_value(r.value),
                r.metric,
                r.baseline.as_deref().map(|b| format!("`{b}`")).unwrap_or_else(|| "-".into()),
                r.baseline_value.map(|b| format!("{} {}", fmt_value(b), r.metric)).unwrap_or_else(|| "-".into()),
                r.ratio.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
                target_text(r),
                verdict(r.met)
            );
        }
    }
    s
}

/// Renders one plot per (plot, metric) of the rows that name a series `plot/line`, one line per
/// `line`, value against size (sizes of 0 are left out), into `dir`; returns the files written.
pub fn series_plots(rows: &[BenchRow], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // (plot, metric) -> lines, in first-seen order.
    let mut plots: Vec<((String, String), Vec<Line>)> = vec![];
    for r in rows.iter().filter(|r| r.size_bytes > 0 && r.value > 0.0) {
        let Some((plot, line)) = r.series.as_deref().and_then(|s| s.split_once('/')) else { continue };
        let key = (plot.to_string(), r.metric.clone());
        let i = match plots.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                plots.push((key, vec![]));
                plots.len() - 1
            }
        };
        let lines = &mut plots[i].1;
        match lines.iter_mut().find(|l| l.label == line) {
            Some(l) => l.points.push((r.size_bytes, r.value)),
            None => lines.push(Line { label: line.to_string(), points: vec![(r.size_bytes, r.value)] }),
        }
    }
    let mut out = vec![];
    for ((plot, metric), mut lines) in plots {
        for l in &mut lines {
            l.points.sort_by_key(|p| p.0);
        }
        let (what, file) = match metric.as_str() {
            "GB/s" => ("bandwidth", "bandwidth"),
            "us" => ("time per round trip", "latency"),
            _ => ("rate", "rate"),
        };
        let title = match plot.as_str() {
            "local" => format!("copies within one GPU: {what}"),
            "peer" => format!("copies GPU 0 -> GPU 1: {what}"),
            "pingpong" => format!("memory-channel ping-pong: {what}"),
            "port" => format!("port-channel ping-pong: {what}"),
            p => format!("{p}: {what}"),
        };
        let path = dir.join(format!("bench-{plot}-{file}.svg"));
        plot_lines(&path, &title, &format!("{what} ({metric})"), &lines)?;
        out.push(path);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Collectives (coll-bench's detailed rows).

/// One row of `coll-bench` output.
#[derive(Clone, Debug, PartialEq)]
pub struct CollRow {
    /// `allreduce`, `allgather` or `reduce_scatter`.
    pub op: String,
    /// Element type.
    pub dtype: String,
    /// Message size as nccl-tests counts it.
    pub bytes: u64,
    /// Our median time per operation in a CUDA graph (us).
    pub ours_us: f64,
    /// Our bus bandwidth (GB/s).
    pub ours_busbw: f64,
    /// NCCL's median time per operation in a CUDA graph (us).
    pub nccl_us: f64,
    /// NCCL's bus bandwidth (GB/s).
    pub nccl_busbw: f64,
    /// Our algorithm for this size.
    pub algorithm: String,
    /// Wrong elements (ours, NCCL).
    pub wrong: (u64, u64),
    /// The NCCL version measured against.
    pub nccl: String,
    /// The row's target and whether it was met, when the line carries the benchmark schema
    /// (lines of a current `coll-bench`; the recorded results have none).
    pub goal: Option<(String, Option<bool>)>,
}

/// The collectives rows of a JSON-lines file (other lines are skipped).
pub fn read_rows(text: &str) -> Vec<CollRow> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["bench"] == "collectives")
        .filter_map(|v| {
            Some(CollRow {
                op: v["op"].as_str()?.to_string(),
                dtype: v["dtype"].as_str()?.to_string(),
                bytes: v["bytes"].as_u64()?,
                ours_us: v["ours_graph_us"].as_f64()?,
                ours_busbw: v["ours_busbw"].as_f64()?,
                nccl_us: v["nccl_graph_us"].as_f64()?,
                nccl_busbw: v["nccl_busbw"].as_f64()?,
                algorithm: v["algorithm"].as_str().unwrap_or("").to_string(),
                wrong: (v["ours_wrong"].as_u64().unwrap_or(0), v["nccl_wrong"].as_u64().unwrap_or(0)),
                nccl: v["nccl"].as_str().unwrap_or("").to_string(),
                goal: bench_row(&v).map(|b| (target_text(&b), b.met)),
            })
        })
        .collect()
}

/// `1 KiB`, `16 MiB`, ...
pub fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The (operation, type) series in the rows, in first-seen order.
fn series(rows: &[CollRow]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    for r in rows {
        let k = (r.op.clone(), r.dtype.clone());
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// A Markdown table per (operation, type): size, ours and NCCL time and busbw, the ratio, the
/// algorithm and the wrong-element counts, and the target and verdict where the rows carry them.
pub fn markdown(rows: &[CollRow]) -> String {
    let mut s = String::new();
    let goals = rows.iter().any(|r| r.goal.is_some());
    for (op, dt) in series(rows) {
        s.push_str(&format!("\n### {op} {dt}\n\n"));
        s.push_str("| size | ours (us) | ours busbw (GB/s) | NCCL (us) | NCCL busbw | NCCL time / ours | algorithm | #wrong ours / NCCL |");
        s.push_str(if goals { " target | |\n" } else { "\n" });
        s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |");
        s.push_str(if goals { " --- | --- |\n" } else { "\n" });
        for r in rows.iter().filter(|r| r.op == op && r.dtype == dt) {
            s.push_str(&format!(
                "| {} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | {} | {} / {} |",
                size_label(r.bytes),
                r.ours_us,
                r.ours_busbw,
                r.nccl_us,
                r.nccl_busbw,
                r.nccl_us / r.ours_us,
                r.algorithm,
                r.wrong.0,
                r.wrong.1
            ));
            if goals {
                let (t, met) = r.goal.clone().unwrap_or_else(|| ("-".into(), None));
                s.push_str(&format!(" {t} | {} |", verdict(met)));
            }
            s.push('\n');
        }
    }
    s
}

/// One line of a plot: its legend and its (size, value) points.
#[derive(Clone, Debug)]
pub struct Line {
    /// The legend.
    pub label: String,
    /// (size in bytes, value), sizes above 0.
    pub points: Vec<(u64, f64)>,
}

/// Draws one log-log plot of `lines` against message size into `path`.
pub fn plot_lines(path: &Path, title: &str, y_label: &str, lines: &[Line]) -> Result<(), String> {
    const COLORS: [RGBColor; 6] =
        [BLUE, RED, RGBColor(0, 140, 70), RGBColor(200, 120, 0), MAGENTA, RGBColor(90, 90, 90)];
    let e = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let all = lines.iter().flat_map(|l| l.points.iter()).filter(|p| p.0 > 0 && p.1 > 0.0);
    if all.clone().next().is_none() {
        return Err(e(&"no points"));
    }
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    // x is log2 of the size on a linear axis, so the ticks fall on powers of two.
    let xs = all.clone().map(|p| (p.0 as f64).log2());
    let (x0, x1) = (xs.clone().fold(f64::MAX, f64::min), xs.fold(f64::MIN, f64::max));
    let ys = all.map(|p| p.1);
    let (y0, y1) = (ys.clone().fold(f64::MAX, f64::min), ys.fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x0 - 0.3..x1 + 0.3, (y0 * 0.8..y1 * 1.25).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc(y_label)
        .x_labels(((x1 - x0) / 2.0) as usize + 2)
        .x_label_formatter(&|x| size_label(2f64.powf(x.round()) as u64))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> =
            l.points.iter().filter(|p| p.0 > 0 && p.1 > 0.0).map(|p| ((p.0 as f64).log2(), p.1)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(l.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// Renders, for every (operation, type) in `rows`, a bus-bandwidth plot and a time plot into
/// `dir`; returns the files written.
pub fn plots(rows: &[CollRow], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut out = vec![];
    for (op, dt) in series(rows) {
        let sel: Vec<&CollRow> = rows.iter().filter(|r| r.op == op && r.dtype == dt).collect();
        let nccl = format!("NCCL {}", sel.first().map(|r| r.nccl.as_str()).unwrap_or_default());
        let two = |ours: fn(&CollRow) -> f64, theirs: fn(&CollRow) -> f64| {
            [
                Line { label: "mscclpp-rs".into(), points: sel.iter().map(|r| (r.bytes, ours(r))).collect() },
                Line { label: nccl.clone(), points: sel.iter().map(|r| (r.bytes, theirs(r))).collect() },
            ]
        };
        let path = dir.join(format!("{op}-{dt}-busbw.svg"));
        let bw = two(|r| r.ours_busbw, |r| r.nccl_busbw);
        plot_lines(&path, &format!("{op} {dt}: bus bandwidth"), "busbw (GB/s)", &bw)?;
        out.push(path);
        let path = dir.join(format!("{op}-{dt}-time.svg"));
        let us = two(|r| r.ours_us, |r| r.nccl_us);
        plot_lines(&path, &format!("{op} {dt}: time per operation (CUDA graph)"), "time (us)", &us)?;
        out.push(path);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Correctness checks read from the test executables' output.

/// How a check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and passed.
    Passed,
    /// It failed, with the reason.
    Failed(String),
    /// It did not run, with the reason.
    Skipped(String),
}

/// One correctness check: a test of a test executable, a phase of a multi-rank run, or a
/// program's own verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The family it checks ([`family`]).
    pub family: &'static str,
    /// The executable (and how it ran), e.g. `unit_bulk`, `mp_patterns --ranks 2`.
    pub source: String,
    /// The test, phase or check.
    pub name: String,
    /// How it ended.
    pub outcome: Outcome,
}

/// The reason text of a failure, shortened to one line of at most 240 characters.
fn one_line(s: &str) -> String {
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 240 { s.chars().take(240).collect::<String>() + "..." } else { s }
}

/// The skip reason recorded for `name` in skip-log lines (`GPU-SKIP <test>: <reason>`), if any.
fn skip_reason(skips: &str, name: &str) -> Option<String> {
    skips.lines().find_map(|l| {
        let rest = l.strip_prefix("GPU-SKIP ")?.strip_prefix(name)?;
        let reason = rest.split_once(": ").map(|(_, r)| r)?;
        Some(reason.to_string())
    })
}

/// The form a two-sided test ran in, recorded in skip-log lines (`GPU-FORM <test>: same GPU`),
/// if any.
fn form_of(skips: &str, name: &str) -> Option<String> {
    skips.lines().find_map(|l| Some(l.strip_prefix("GPU-FORM ")?.strip_prefix(name)?.strip_prefix(": ")?.to_string()))
}

/// The checks of a libtest executable's output (`test NAME ... ok|FAILED|ignored`; a failure's
/// reason from its `---- NAME stdout ----` section, a skip's from the skip log `skips`). Every
/// test goes to `family_of` its name, else `default`.
pub fn parse_libtest(source: &str, text: &str, skips: &str, default: &'static str) -> Vec<Check> {
    let mut out = vec![];
    // Up to libtest's failure sections: a failed test's captured output (a trap test's child
    // harness, say) may hold lines that look like results.
    for line in text.lines().take_while(|l| *l != "failures:") {
        let Some(rest) = line.strip_prefix("test ") else { continue };
        let Some((name, result)) = rest.rsplit_once(" ... ") else { continue };
        let outcome = match result.trim() {
            "ok" => match skip_reason(skips, name) {
                Some(why) => Outcome::Skipped(why),
                None => Outcome::Passed,
            },
            "ignored" => Outcome::Skipped("ignored".into()),
            r if r.starts_with("FAILED") => Outcome::Failed(failure_reason(text, name)),
            _ => continue,
        };
        // A two-sided test says which form ran: on two GPUs, or its peers on one.
        let shown = match form_of(skips, name) {
            Some(form) => format!("{name} ({form})"),
            None => name.to_string(),
        };
        out.push(Check {
            family: family_of(name).unwrap_or(default),
            source: source.to_string(),
            name: shown,
            outcome,
        });
    }
    out
}

/// The panic message in a failed test's `---- NAME stdout ----` section, or its first lines.
fn failure_reason(text: &str, name: &str) -> String {
    let head = format!("---- {name} stdout ----");
    let Some(start) = text.find(&head) else { return "failed (no output captured)".into() };
    let section = &text[start + head.len()..];
    let end = section.find("\n---- ").or_else(|| section.find("\nfailures:")).unwrap_or(section.len());
    let section = &section[..end];
    let mut lines = section.lines().skip_while(|l| !l.contains("panicked at"));
    match (lines.next(), lines.next()) {
        (Some(_), Some(msg)) => one_line(msg),
        _ => one_line(section.lines().take(3).collect::<Vec<_>>().join(" ").as_str()),
    }
}

/// A line of a rank's output without the `[rank i] ` prefix the built-in launcher adds.
fn unprefixed(line: &str) -> &str {
    line.strip_prefix("[rank ").and_then(|r| r.split_once("] ")).map_or(line, |(_, rest)| rest)
}

/// The phases of a multi-rank pattern run (`rank R: PHASE ... ok|FAILED: why|SKIPPED: why`),
/// one check per phase over every rank: failed if a rank failed it, skipped if every rank
/// skipped it.
pub fn parse_phases(source: &str, text: &str, default: &'static str) -> Vec<Check> {
    let mut out: Vec<Check> = vec![];
    for line in text.lines().map(unprefixed) {
        let Some(rest) = line.strip_prefix("rank ") else { continue };
        let Some((rank, rest)) = rest.split_once(": ") else { continue };
        let Some((phase, verdict)) = rest.split_once(" ... ") else { continue };
        if rank.parse::<u32>().is_err() || phase.contains(' ') {
            continue;
        }
        let outcome = if verdict == "ok" {
            Outcome::Passed
        } else if let Some(why) = verdict.strip_prefix("FAILED: ") {
            Outcome::Failed(one_line(&format!("rank {rank}: {why}")))
        } else if let Some(why) = verdict.strip_prefix("SKIPPED: ") {
            Outcome::Skipped(one_line(why))
        } else {
            continue;
        };
        match out.iter_mut().find(|c| c.name == phase) {
            None => out.push(Check {
                family: family_of(phase).unwrap_or(default),
                source: source.to_string(),
                name: phase.to_string(),
                outcome,
            }),
            // A failure wins over everything, a pass over a skip.
            Some(c) => match (&c.outcome, &outcome) {
                (Outcome::Failed(_), _) => {}
                (_, Outcome::Failed(_)) | (Outcome::Skipped(_), Outcome::Passed) => c.outcome = outcome,
                _ => {}
            },
        }
    }
    out
}

/// The checks rank 0 of a multi-rank program reports (`PROGRAM: rank 0: TEXT ok ...`, each a
/// passed check named by its text), and any rank's `RESULT FAILED: why`.
pub fn parse_rank_lines(source: &str, program: &str, text: &str, fam: &'static str) -> Vec<Check> {
    let mut out = vec![];
    let check = |name: String, outcome| Check { family: fam, source: source.to_string(), name, outcome };
    for line in text.lines().map(unprefixed) {
        let Some(rest) = line.strip_prefix(program).and_then(|r| r.strip_prefix(": rank ")) else { continue };
        let Some((rank, what)) = rest.split_once(": ") else { continue };
        if let Some(why) = what.strip_prefix("RESULT FAILED: ") {
            out.push(check(format!("rank {rank}"), Outcome::Failed(one_line(why))));
        } else if rank == "0" && !what.starts_with("RESULT") && what.contains(" ok") {
            out.push(check(what.to_string(), Outcome::Passed));
        }
    }
    out
}

/// Counts of (passed, failed, skipped).
pub fn tally<'a>(checks: impl IntoIterator<Item = &'a Check>) -> (usize, usize, usize) {
    checks.into_iter().fold((0, 0, 0), |(p, f, s), c| match c.outcome {
        Outcome::Passed => (p + 1, f, s),
        Outcome::Failed(_) => (p, f + 1, s),
        Outcome::Skipped(_) => (p, f, s + 1),
    })
}

/// `12 passed, 1 failed, 2 skipped` (only the counts above 0, passed always).
pub fn tally_text((p, f, s): (usize, usize, usize)) -> String {
    let mut t = format!("{p} passed");
    if f > 0 {
        let _ = write!(t, ", {f} FAILED");
    }
    if s > 0 {
        let _ = write!(t, ", {s} skipped");
    }
    t
}

/// The correctness section: a summary table per family (every family listed, with 0 checks
/// where none ran), then every check by family.
pub fn checks_markdown(checks: &[Check]) -> String {
    let mut s = String::from("| family | passed | failed | skipped |\n| --- | --- | --- | --- |\n");
    for f in family::ALL {
        let (p, fl, sk) = tally(checks.iter().filter(|c| c.family == f));
        let _ = writeln!(s, "| {f} | {p} | {} | {sk} |", if fl > 0 { format!("**{fl}**") } else { "0".into() });
    }
    for f in family::ALL {
        let mine: Vec<&Check> = checks.iter().filter(|c| c.family == f).collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n### {f}\n\n| check | from | result |\n| --- | --- | --- |");
        for c in mine {
            let result = match &c.outcome {
                Outcome::Passed => "ok".to_string(),
                Outcome::Failed(why) => format!("**FAILED**: {}", why.replace('|', "\\|")),
                Outcome::Skipped(why) => format!("skipped: {}", why.replace('|', "\\|")),
            };
            let _ = writeln!(s, "| {} | `{}` | {result} |", c.name.replace('|', "\\|"), c.source);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = include_str!("../docs/results/collectives-2xH200.jsonl");

    #[test]
    fn recorded_results_render() {
        let rows = read_rows(RECORDED);
        assert_eq!(rows.len(), 44, "4 tables of 11 sizes");
        assert!(rows.iter().all(|r| r.wrong == (0, 0)));
        let md = markdown(&rows);
        assert!(md.contains("### allreduce f32") && md.contains("| 1 GiB |"), "{md}");
        let dir = std::env::temp_dir().join(format!("mscclpp-report-test-{}", std::process::id()));
        let files = plots(&rows, &dir).unwrap();
        assert_eq!(files.len(), 8);
        for f in &files {
            let svg = std::fs::read_to_string(f).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("mscclpp-rs") && svg.contains("NCCL 2.28.3"),
                "{}",
                f.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn other_lines_are_skipped() {
        let text = "{\"suite\":\"sync\",\"variant\":\"x\"}\nnot json\n";
        assert!(read_rows(text).is_empty());
        assert!(read_bench_rows(text).is_empty());
        assert_eq!(size_label(3 << 20), "3 MiB");
    }

    /// Rows as the benches write them: a bandwidth sweep against a baseline, a latency row with
    /// a bound, a coll-bench line (schema fields and NCCL details in one line).
    const BENCH: &str = r#"{"suite":"bulk","family":"bulk copies","name":"local/cuMemcpyDtoD/64KiB","series":"local/cuMemcpyDtoD","size_bytes":65536,"metric":"GB/s","value":100.0,"seconds":6.5e-7,"samples":10,"baseline":null,"baseline_value":null,"ratio":null,"target":null,"target_value":null,"met":null}
{"suite":"bulk","family":"bulk copies","name":"local/bulk_pipeline/64KiB","series":"local/bulk pipeline","size_bytes":65536,"metric":"GB/s","value":90.0,"seconds":7e-7,"samples":10,"baseline":"local/cuMemcpyDtoD/64KiB","baseline_value":100.0,"ratio":0.9,"target":null,"target_value":null,"met":null}
{"suite":"bulk","family":"bulk copies","name":"local/cuMemcpyDtoD/1GiB","series":"local/cuMemcpyDtoD","size_bytes":1073741824,"metric":"GB/s","value":2130.0,"seconds":5e-4,"samples":10,"baseline":null,"baseline_value":null,"ratio":null,"target":null,"target_value":null,"met":null}
{"suite":"bulk","family":"bulk copies","name":"local/bulk_pipeline/1GiB","series":"local/bulk pipeline","size_bytes":1073741824,"metric":"GB/s","value":1960.0,"seconds":5.4e-4,"samples":10,"baseline":"local/cuMemcpyDtoD/1GiB","baseline_value":2130.0,"ratio":0.92,"target":0.95,"target_value":null,"met":false}
{"suite":"sync","family":"port channels and FIFO","name":"port_pingpong/8B","series":"port/counter in GPU memory","size_bytes":8,"metric":"us","value":21.3,"seconds":2.13e-5,"samples":10,"baseline":null,"baseline_value":null,"ratio":null,"target":null,"target_value":10.0}
{"suite":"coll-bench","family":"collectives","name":"allreduce/f32/1KiB","series":null,"size_bytes":1024,"metric":"us","value":2.171,"baseline":"NCCL 2.28.3","baseline_value":5.754,"ratio":2.6504,"target":1,"target_value":2.500,"met":true,"bench":"collectives","op":"allreduce","dtype":"f32","ranks":2,"bytes":1024,"ours_graph_us":2.171,"ours_eager_us":7.107,"ours_busbw":0.47,"ours_wrong":0,"nccl_graph_us":5.754,"nccl_eager_us":10.709,"nccl_busbw":0.18,"nccl_wrong":0,"algorithm":"oneshot","nccl":"2.28.3"}
"#;

    #[test]
    fn bench_rows_read_render_and_plot() {
        let rows = read_bench_rows(BENCH);
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[3].met, Some(false));
        assert_eq!(rows[4].met, Some(false), "no `met` field: computed from the bound (21.3 us > 10 us)");
        assert_eq!(target_text(&rows[4]), "<= 10.00 us");
        assert_eq!(rows[5].family, "collectives");
        assert_eq!(rows[5].met, Some(true));
        assert_eq!(target_text(&rows[5]), ">= 1.00x, <= 2.500 us");
        // The same line is also a detailed collectives row.
        assert_eq!(read_rows(BENCH).len(), 1);
        let md = bench_markdown(&rows);
        assert!(md.contains("### bulk copies") && md.contains("### collectives"), "{md}");
        assert!(md.contains("| `local/bulk_pipeline/1GiB` | 1 GiB | 1960.0 GB/s | `local/cuMemcpyDtoD/1GiB` | 2130.0 GB/s | 0.920 | >= 0.95x | **missed** |"), "{md}");
        let dir = std::env::temp_dir().join(format!("mscclpp-bench-plot-test-{}", std::process::id()));
        let files = series_plots(&rows, &dir).unwrap();
        let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["bench-local-bandwidth.svg", "bench-port-latency.svg"]);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("cuMemcpyDtoD") && svg.contains("bulk pipeline") && svg.contains("copies within one GPU"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn families_of_names() {
        use family::*;
        for (name, want) in [
            ("bulk_store_and_reduce_into_a_peer_gpu", Some(BULK)),
            ("memchan_put_every_alignment_and_size", Some(MEMCHAN)),
            ("copy_forms_every_width_with_and_without_remainder", Some(MEMCHAN)),
            ("ll16_packet_pingpong_10k_rounds", Some(PACKETS)),
            ("packet_read_never_satisfied_traps_within_its_budget", Some(PACKETS)),
            ("port_put_with_signal_gpu0_to_gpu1", Some(PORT)),
            ("proxy_stop_delivers_pending_host_signals", Some(PORT)),
            ("fifo_many_pushers_wrap_a_small_ring", Some(PORT)),
            ("semaphore_pingpong_100k_rounds_cached_counters", Some(SYNC)),
            ("grid_barrier_every_sm_10k_rounds", Some(SYNC)),
            ("device_semaphore_limits_holders_and_orders_their_writes", Some(SYNC)),
            ("staged_dispatch", Some(BULK)),
            ("push_combine", Some(BULK)),
            ("port_all_to_all", Some(PORT)),
            ("memory_channels", Some(MEMCHAN)),
            ("all_pairs_barrier", Some(SYNC)),
            ("allreduce_small", Some(COLLECTIVES)),
            ("switch_allreduce", Some(SWITCH)),
            ("switch_barrier", Some(SWITCH)),
            ("window", Some(WINDOWS)),
            ("bootstrap_ring_send_recv", Some(BOOTSTRAP)),
            ("gpu_mapping", Some(BOOTSTRAP)),
            // "port" is a word, not a part of one.
            ("bounds_check_panic_prints_its_location_and_traps", None),
            ("a_report_of_support", None),
        ] {
            assert_eq!(family_of(name), want, "{name}");
        }
    }

    /// Every test of the GPU unit-test files and every phase of the pattern test is given a
    /// family by its name or by its file, and every primitive family has at least one of them.
    #[test]
    fn every_family_has_gpu_checks() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        // mp_collectives, mp_ep and mp_exec: every check of their families.
        let mut seen: Vec<&str> = vec![family::COLLECTIVES, family::EP, family::PLANS];
        for (file, default) in [
            ("unit_bulk", family::BULK),
            ("unit_sync", family::SYNC),
            ("unit_memchan", family::MEMCHAN),
            ("unit_transport", family::PORT),
        ] {
            let text = std::fs::read_to_string(root.join("tests").join(format!("{file}.rs"))).unwrap();
            let mut lines = text.lines();
            let mut n = 0;
            while let Some(l) = lines.next() {
                if l.trim() == "#[test]" {
                    // The next line that is not an attribute: `fn name(`.
                    let f = lines.by_ref().find(|l| !l.trim().starts_with("#[")).unwrap();
                    let name = f.trim().strip_prefix("fn ").and_then(|r| r.split_once('(')).map(|(n, _)| n).unwrap();
                    seen.push(family_of(name).unwrap_or(default));
                    n += 1;
                }
            }
            let least = if file == "unit_transport" { 2 } else { 5 };
            assert!(n >= least, "{file}: {n} tests found");
        }
        let mp = std::fs::read_to_string(root.join("tests/mp_patterns/main.rs")).unwrap();
        for l in mp.lines().filter(|l| l.trim_start().starts_with("Phase { name: \"")) {
            let name = l.split('"').nth(1).unwrap();
            seen.push(family_of(name).unwrap_or_else(|| panic!("phase {name} has no family")));
        }
        for f in family::ALL {
            assert!(seen.contains(&f), "no GPU check for family {f}");
        }
    }

    #[test]
    fn libtest_output_becomes_checks() {
        let text = "\nrunning 4 tests\ntest bulk_roundtrip_sizes ... ok\ntest port_put_x ... FAILED\n\
                    test memchan_big ... ok\ntest weird ... ignored\n\nfailures:\n\n---- port_put_x stdout ----\n\n\
                    thread 'port_put_x' panicked at tests/unit_sync.rs:12:5:\nport: 3 of 8 elements differ\n\
                    test inner_child ... ok\nnote: run with `RUST_BACKTRACE=1`\n\n\nfailures:\n    port_put_x\n\n\
                    test result: FAILED. 2 passed; 1 failed; 1 ignored\n";
        let skips = "GPU-SKIP memchan_big: needs 2 GPUs, found 1\n";
        let checks = parse_libtest("unit_x", text, skips, family::SYNC);
        let got: Vec<(&str, &str, Outcome)> =
            checks.iter().map(|c| (c.name.as_str(), c.family, c.outcome.clone())).collect();
        assert_eq!(
            got,
            [
                ("bulk_roundtrip_sizes", family::BULK, Outcome::Passed),
                ("port_put_x", family::PORT, Outcome::Failed("port: 3 of 8 elements differ".into())),
                ("memchan_big", family::MEMCHAN, Outcome::Skipped("needs 2 GPUs, found 1".into())),
                ("weird", family::SYNC, Outcome::Skipped("ignored".into())),
            ]
        );
        assert_eq!(tally(&checks), (1, 1, 2));
        assert_eq!(tally_text(tally(&checks)), "1 passed, 1 FAILED, 2 skipped");
        let md = checks_markdown(&checks);
        assert!(md.contains("| port channels and FIFO | 0 | **1** | 0 |"), "{md}");
        assert!(md.contains("| collectives | 0 | 0 | 0 |"), "{md}");
        assert!(md.contains("| port_put_x | `unit_x` | **FAILED**: port: 3 of 8 elements differ |"), "{md}");
    }

    #[test]
    fn a_two_sided_test_shows_the_form_it_ran_in() {
        let text = "test memchan_pingpong ... ok\ntest memchan_pingpong_long ... ok\ntest port_put_x ... ok\n";
        let skips =
            "GPU-SKIP other: needs 1 GPUs\nGPU-FORM memchan_pingpong: same GPU\nGPU-FORM port_put_x: two GPUs\n";
        let checks = parse_libtest("unit_x", text, skips, family::SYNC);
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        // A longer name that starts with a recorded one is not that test.
        assert_eq!(names, ["memchan_pingpong (same GPU)", "memchan_pingpong_long", "port_put_x (two GPUs)"]);
        assert!(checks.iter().all(|c| c.outcome == Outcome::Passed));
        // The family still comes from the test's own name.
        assert_eq!(checks[0].family, family_of("memchan_pingpong").unwrap_or(family::SYNC));
    }

    #[test]
    fn rank_output_becomes_checks() {
        let text = "rank 0: world 2 (local rank 0 of 2, via launcher), GPU 0 of 2\n\
                    [rank 0] rank 0: staged_dispatch ... ok\n[rank 1] rank 1: staged_dispatch ... ok\n\
                    rank 1: port_all_to_all ... FAILED: slot 3 holds poison\nrank 0: port_all_to_all ... ok\n\
                    rank 0: switch_barrier ... SKIPPED: an earlier phase failed\n\
                    rank 1: switch_barrier ... SKIPPED: an earlier phase failed\nrank 0: RESULT ok\n";
        let checks = parse_phases("mp_patterns --ranks 2", text, family::BOOTSTRAP);
        let got: Vec<(&str, Outcome)> = checks.iter().map(|c| (c.name.as_str(), c.outcome.clone())).collect();
        assert_eq!(
            got,
            [
                ("staged_dispatch", Outcome::Passed),
                ("port_all_to_all", Outcome::Failed("rank 1: slot 3 holds poison".into())),
                ("switch_barrier", Outcome::Skipped("an earlier phase failed".into())),
            ]
        );
        let text = "mp_collectives: 2 ranks, seed 5\n[rank 0] mp_collectives: rank 0: 96 operation cases ok (every algorithm)\n\
                    mp_collectives: rank 1: 96 operation cases ok (every algorithm)\n\
                    mp_collectives: rank 1: RESULT FAILED: graph replay 7: 3 wrong\nmp_collectives: rank 0: RESULT ok\n";
        let checks = parse_rank_lines("mp_collectives --ranks 2", "mp_collectives", text, family::COLLECTIVES);
        let got: Vec<(&str, Outcome)> = checks.iter().map(|c| (c.name.as_str(), c.outcome.clone())).collect();
        assert_eq!(
            got,
            [
                ("96 operation cases ok (every algorithm)", Outcome::Passed),
                ("rank 1", Outcome::Failed("graph replay 7: 3 wrong".into())),
            ]
        );
    }
}
