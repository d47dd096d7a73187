//! The report's results section: reads the collectives' benchmark rows (JSON lines written by
//! `coll-bench` through `MSCCLPP_RS_BENCH_OUT`), renders a Markdown table and SVG plots (bus
//! bandwidth and time against message size, ours against NCCL).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

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
/// algorithm and the wrong-element counts.
pub fn markdown(rows: &[CollRow]) -> String {
    let mut s = String::new();
    for (op, dt) in series(rows) {
        s.push_str(&format!("\n### {op} {dt}\n\n"));
        s.push_str("| size | ours (us) | ours busbw (GB/s) | NCCL (us) | NCCL busbw | NCCL time / ours | algorithm | #wrong ours / NCCL |\n");
        s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rows.iter().filter(|r| r.op == op && r.dtype == dt) {
            s.push_str(&format!(
                "| {} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | {} | {} / {} |\n",
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
        }
    }
    s
}

/// Draws one log-log plot of `(size, ours, nccl)` points into `path`.
fn plot(path: &Path, title: &str, y_label: &str, points: &[(u64, f64, f64)], nccl: &str) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    // x is log2 of the size on a linear axis, so the ticks fall on powers of two.
    let xs = points.iter().map(|p| (p.0 as f64).log2());
    let (x0, x1) = (xs.clone().fold(f64::MAX, f64::min), xs.fold(0.0, f64::max));
    let ys = points.iter().flat_map(|p| [p.1, p.2]).filter(|y| *y > 0.0);
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
    let ours: Vec<(f64, f64)> = points.iter().map(|p| ((p.0 as f64).log2(), p.1)).collect();
    let theirs: Vec<(f64, f64)> = points.iter().map(|p| ((p.0 as f64).log2(), p.2)).collect();
    chart
        .draw_series(LineSeries::new(ours.clone(), BLUE.stroke_width(2)))
        .map_err(|x| e(&x))?
        .label("mscclpp-rs")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart.draw_series(ours.iter().map(|p| Circle::new(*p, 3, BLUE.filled()))).map_err(|x| e(&x))?;
    chart
        .draw_series(LineSeries::new(theirs.clone(), RED.stroke_width(2)))
        .map_err(|x| e(&x))?
        .label(format!("NCCL {nccl}"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart.draw_series(theirs.iter().map(|p| Circle::new(*p, 3, RED.filled()))).map_err(|x| e(&x))?;
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
        let nccl = sel.first().map(|r| r.nccl.clone()).unwrap_or_default();
        let bw: Vec<(u64, f64, f64)> = sel.iter().map(|r| (r.bytes, r.ours_busbw, r.nccl_busbw)).collect();
        let us: Vec<(u64, f64, f64)> = sel.iter().map(|r| (r.bytes, r.ours_us, r.nccl_us)).collect();
        let path = dir.join(format!("{op}-{dt}-busbw.svg"));
        plot(&path, &format!("{op} {dt}: bus bandwidth"), "busbw (GB/s)", &bw, &nccl)?;
        out.push(path);
        let path = dir.join(format!("{op}-{dt}-time.svg"));
        plot(&path, &format!("{op} {dt}: time per operation (CUDA graph)"), "time (us)", &us, &nccl)?;
        out.push(path);
    }
    Ok(out)
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
        assert_eq!(size_label(3 << 20), "3 MiB");
    }
}
