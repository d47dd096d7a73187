//! `ep_bench`: expert-parallel dispatch and combine against NCCL in the same run, at
//! DeepSeek-V3-like shapes: hidden 7168, 256 experts, top-8, bf16, every token routed to 8
//! distinct random experts; `prefill` dispatches 4096 tokens per rank, `decode` 128.
//!
//! ```sh
//! mpirun -np 2 ep_bench                      # or: ep_bench --ranks 2 (built-in launcher)
//! MSCCLPP_RS_EP_SHAPES=decode ...            # which shapes (default prefill,decode)
//! MSCCLPP_RS_EP_REPS=30 ...                  # timed batches (default 20)
//! MSCCLPP_RS_EP_BLOCKS=24 ...                # the SM budget (default: Config's, 20)
//! MSCCLPP_RS_EP_THREADS=640 ...              # threads per block (default: Config's)
//! MSCCLPP_RS_EP_FORMAT=e4m3 ...              # received rows: bf16 (default), e4m3, e4m3-pow2,
//!                                            # e4m3-ue8m0 (FP8 dispatch; combine stays bf16)
//! MSCCLPP_RS_EP_RING_ROWS=64 ...             # the pipelined mode (Config::ring_rows) with rings
//!                                            # of that many rows (its window form is refused:
//!                                            # the window runs time the peer-table form again)
//! MSCCLPP_RS_NCCL=/path/libnccl.so.2 ...     # which NCCL (default: the loader's libnccl.so.2)
//! ```
//! Times are medians of CUDA-event timings of single operations: every batch starts with a
//! host barrier and one untimed dispatch and combine (which line the ranks up on the GPU), then
//! times [`BATCH`] pairs back to back, an event between every two operations. Ours: the layout
//! kernel and the dispatch kernel; the combine kernel. Bandwidth as DeepEP counts it: the bytes
//! of every row a rank receives in dispatch (its own included) per dispatch time, the same bytes
//! per combine time; and NVLink bytes only (rows from, or back to, the other ranks). An FP8
//! dispatch's rows count their e4m3 bytes and scales, and NCCL moves rows of that size.
//!
//! The NCCL baseline moves the same rows: one grouped `ncclSend`/`ncclRecv` of the packed rows
//! per destination (this rank's included), and the reverse for combine, with every size known in
//! advance; its packing, count exchange and final sum are not timed, so it is a lower bound of
//! what a framework pays with NCCL. Before timing, our combine's result is checked against the
//! host (identity experts: each token's rows summed over the ranks it went to), and NCCL's
//! dispatch result against the expected rows.
//!
//! The window form (`Form::Window`: the same kernels' bodies addressing the peers through
//! `Window::peer` and signalling through the window's signals) is checked and timed the same way
//! on the same object, after the peer-table form: the two forms batch by batch in turn, so that
//! drift during the run falls on both alike; rank 0 prints each form's median and the ratios
//! window / peer-table (the bar: within 5%, at most 1.05). `MSCCLPP_RS_EP_DETAIL=1`: every rank
//! also prints the 10th, 50th and 90th percentiles of both forms' times.
//!
//! Rank 0 prints the table; `MSCCLPP_RS_BENCH_OUT` names a JSON-lines file for the results.
//! Without NCCL the run still measures ours, then fails naming why.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUevent_flags;
use mscclpp_ep::reference::{self, Routing};
use mscclpp_ep::{Config, DataType, DispatchInput, ExpertIds, ExpertParallel, Form, RecvFormat};
use mscclpp_harness::nccl::{Nccl, NcclComm, Transfer};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{BootstrapExt, DeviceBuffer, Error, Result};

/// The peer SM-copy ceiling between two H200s (GB/s), which the bandwidth target is a part of.
const NVLINK_CEILING_GBPS: f64 = 370.0;

/// The project's target for `shape`, given the slower of dispatch and combine: NVLink GB/s and
/// speed relative to NCCL (NCCL's time / ours). A bandwidth-bound shape (prefill) must reach 0.8
/// of the ceiling and be no slower than NCCL; a latency-bound one (decode) twice NCCL's speed.
fn verdict(shape: &Shape, nvlink_gbps: f64, vs_nccl: f64) -> String {
    let (met, goal) = if shape.tokens >= 1024 {
        (
            nvlink_gbps >= 0.8 * NVLINK_CEILING_GBPS && vs_nccl >= 1.0,
            format!(">= {:.0} NVLink GB/s and >= 1.0x NCCL", 0.8 * NVLINK_CEILING_GBPS),
        )
    } else {
        (vs_nccl >= 2.0, ">= 2.0x NCCL".to_string())
    };
    let verdict = if !vs_nccl.is_finite() {
        "not measured (no NCCL)"
    } else if met {
        "met"
    } else {
        "missed"
    };
    format!(
        "{} target ({goal}, the slower of dispatch and combine): {verdict} ({nvlink_gbps:.1} NVLink GB/s, {vs_nccl:.2}x NCCL)",
        shape.name
    )
}

/// Timed pairs per batch.
const BATCH: usize = 4;
const HIDDEN: usize = 7168;
const EXPERTS: usize = 256;
const TOPK: usize = 8;

fn main() -> ExitCode {
    mscclpp_harness::runner::main("ep_bench", 2, run)
}

fn drv<T>(r: std::result::Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::Driver { context: what.into(), source: e })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// Microseconds of the two operations of `pair`, one sample per timed pair, over `reps` batches
/// of [`BATCH`] pairs.
fn time_pairs(
    comm: &Communicator,
    reps: usize,
    mut pair: impl FnMut(&CudaStream, usize) -> Result<()>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let gpu = comm.gpu();
    let stream = gpu.stream();
    let ctx = gpu.context();
    let events = (0..2 * BATCH + 1)
        .map(|_| drv(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)), "creating an event"))
        .collect::<Result<Vec<_>>>()?;
    let (mut first, mut second) = (vec![], vec![]);
    for _ in 0..reps {
        comm.bootstrap().barrier()?;
        pair(stream, 0)?;
        pair(stream, 1)?;
        for i in 0..BATCH {
            drv(events[2 * i].record(stream), "recording an event")?;
            pair(stream, 0)?;
            drv(events[2 * i + 1].record(stream), "recording an event")?;
            pair(stream, 1)?;
        }
        drv(events[2 * BATCH].record(stream), "recording an event")?;
        gpu.synchronize_timeout(Duration::from_secs(60))?;
        for i in 0..BATCH {
            first.push(drv(events[2 * i].elapsed_ms(&events[2 * i + 1]), "reading an event")? as f64 * 1e3);
            second.push(drv(events[2 * i + 1].elapsed_ms(&events[2 * i + 2]), "reading an event")? as f64 * 1e3);
        }
    }
    Ok((first, second))
}

/// The 10th, 50th and 90th percentiles of `v`, as "p10/p50/p90".
fn spread(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!("{:.1}/{:.1}/{:.1}", at(0.1), at(0.5), at(0.9))
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

struct Shape {
    name: String,
    tokens: usize,
}

/// Per-rank results, gathered to rank 0.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RankResult {
    dispatch_us: f64,
    combine_us: f64,
    nccl_dispatch_us: f64,
    nccl_combine_us: f64,
    /// Bytes of every received row (bf16: combine's rows).
    recv_bytes: f64,
    /// Bytes of the rows received from other ranks.
    nvlink_bytes: f64,
    /// The same two as the dispatch delivers them (FP8: e4m3 bytes and scales).
    dispatch_bytes: f64,
    nvlink_dispatch_bytes: f64,
    wrong: f64,
    nccl_wrong: f64,
    /// The window form's median times and wrong rows, and the peer-table form's median times
    /// from the batches between the window form's.
    window_dispatch_us: f64,
    window_combine_us: f64,
    window_wrong: f64,
    peer_dispatch_us: f64,
    peer_combine_us: f64,
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let reps: usize = std::env::var("MSCCLPP_RS_EP_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20).max(1);
    let shapes: Vec<Shape> = env_list("MSCCLPP_RS_EP_SHAPES", "prefill,decode")
        .into_iter()
        .filter_map(|s| match s.as_str() {
            "prefill" => Some(Shape { name: s, tokens: 4096 }),
            "decode" => Some(Shape { name: s, tokens: 128 }),
            _ => None,
        })
        .collect();
    let nccl = Nccl::load();
    // NCCL refuses two ranks on one GPU: then ours is measured alone and the run fails after,
    // naming why, as without NCCL.
    let mut nccl_failed = None;
    let nc = match &nccl {
        Ok(lib) => match lib.communicator(comm.bootstrap().as_ref(), comm.gpu()) {
            Ok(c) => Some(c),
            Err(e) => {
                nccl_failed = Some(e);
                None
            }
        },
        Err(_) => None,
    };
    let mut out = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
        .filter(|_| me == 0)
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    if me == 0 {
        println!(
            "ep_bench: {n} ranks, GPU {} ({}), {}, hidden {HIDDEN}, {EXPERTS} experts, top-{TOPK}, bf16, {reps} x {BATCH} timed pairs",
            comm.gpu().ordinal(),
            comm.gpu().info().name,
            match (&nccl, &nccl_failed) {
                (Ok(l), None) => format!("NCCL {} from {}", l.version_string(), l.path()),
                (Ok(l), Some(e)) => format!("NCCL {} refused a communicator ({e})", l.version_string()),
                (Err(e), _) => format!("no NCCL ({e})"),
            },
        );
        println!(
            "time: median us per operation (ours: layout + dispatch kernels; combine kernel). GB/s: DeepEP's count (all received rows) / NVLink rows only, mean over ranks; time: slowest rank"
        );
        println!(
            "{:>8} {:>6} | {:>10} {:>8} {:>8} | {:>10} {:>8} {:>8} | {:>10} {:>10} | {:>6} {:>6} | #wrong",
            "shape",
            "tokens",
            "dispatch",
            "GB/s",
            "nvl GB/s",
            "combine",
            "GB/s",
            "nvl GB/s",
            "nccl disp",
            "nccl comb",
            "disp x",
            "comb x"
        );
    }
    let format_name = std::env::var("MSCCLPP_RS_EP_FORMAT").unwrap_or_else(|_| "bf16".into());
    let format = match format_name.as_str() {
        "bf16" => RecvFormat::Input,
        "e4m3" => RecvFormat::E4m3,
        "e4m3-pow2" => RecvFormat::E4m3Pow2,
        "e4m3-ue8m0" => RecvFormat::E4m3Ue8m0,
        other => {
            return Err(Error::InvalidArgument(format!(
                "MSCCLPP_RS_EP_FORMAT={other} (bf16, e4m3, e4m3-pow2 or e4m3-ue8m0)"
            )));
        }
    };
    if me == 0 {
        println!("received rows: {format_name}");
    }
    for shape in &shapes {
        let r = measure(comm, shape, reps, nc.as_ref(), format)?;
        let all = comm.bootstrap().all_gather_pod(&r)?;
        if me == 0 {
            let max = |f: fn(&RankResult) -> f64| all.iter().map(f).fold(0.0, f64::max);
            let mean = |f: &dyn Fn(&RankResult) -> f64| all.iter().map(f).sum::<f64>() / n as f64;
            let (d, c) = (max(|r| r.dispatch_us), max(|r| r.combine_us));
            let (nd, ncb) = (max(|r| r.nccl_dispatch_us), max(|r| r.nccl_combine_us));
            let d_bw = mean(&|r| r.dispatch_bytes / r.dispatch_us / 1e3);
            let d_nvl = mean(&|r| r.nvlink_dispatch_bytes / r.dispatch_us / 1e3);
            let c_bw = mean(&|r| r.recv_bytes / r.combine_us / 1e3);
            let c_nvl = mean(&|r| r.nvlink_bytes / r.combine_us / 1e3);
            let wrong = all.iter().map(|r| r.wrong + r.window_wrong).sum::<f64>();
            let (wd, wc) = (max(|r| r.window_dispatch_us), max(|r| r.window_combine_us));
            let (pd, pc) = (max(|r| r.peer_dispatch_us), max(|r| r.peer_combine_us));
            let nccl_wrong = all.iter().map(|r| r.nccl_wrong).sum::<f64>();
            println!(
                "{:>8} {:>6} | {:>10.2} {:>8.1} {:>8.1} | {:>10.2} {:>8.1} {:>8.1} | {:>10.2} {:>10.2} | {:>6.2} {:>6.2} | {} / nccl {}",
                shape.name,
                shape.tokens,
                d,
                d_bw,
                d_nvl,
                c,
                c_bw,
                c_nvl,
                nd,
                ncb,
                nd / d,
                ncb / c,
                wrong,
                nccl_wrong
            );
            if let Some(f) = out.as_mut() {
                let _ = writeln!(
                    f,
                    "{{\"bench\":\"ep\",\"shape\":\"{}\",\"ranks\":{n},\"tokens\":{},\"hidden\":{HIDDEN},\"experts\":{EXPERTS},\"topk\":{TOPK},\"dtype\":\"bf16\",\"format\":\"{format_name}\",\"dispatch_us\":{d:.3},\"combine_us\":{c:.3},\"window_dispatch_us\":{wd:.3},\"window_combine_us\":{wc:.3},\"window_dispatch_ratio\":{:.4},\"window_combine_ratio\":{:.4},\"dispatch_gbps\":{d_bw:.2},\"dispatch_nvlink_gbps\":{d_nvl:.2},\"combine_gbps\":{c_bw:.2},\"combine_nvlink_gbps\":{c_nvl:.2},\"nccl_dispatch_us\":{nd:.3},\"nccl_combine_us\":{ncb:.3},\"wrong\":{wrong},\"nccl_wrong\":{nccl_wrong},\"nccl\":\"{}\"}}",
                    shape.name,
                    shape.tokens,
                    wd / pd,
                    wc / pc,
                    nccl.as_ref().map(|l| l.version_string()).unwrap_or_else(|_| "none".into()),
                );
            }
            let vs_nccl = if nd > 0.0 && ncb > 0.0 { (nd / d).min(ncb / c) } else { f64::NAN };
            println!("ep_bench: {}", verdict(shape, d_nvl.min(c_nvl), vs_nccl));
            let within = if wd <= 1.05 * pd && wc <= 1.05 * pc { "met" } else { "missed" };
            println!(
                "ep_bench: {} window form: dispatch {wd:.2} us, combine {wc:.2} us; peer-table (the batches between): {pd:.2} us, {pc:.2} us; window / peer-table: dispatch {:.3}, combine {:.3} (within 5%: {within})",
                shape.name,
                wd / pd,
                wc / pc
            );
            if wrong > 0.0 || nccl_wrong > 0.0 {
                return Err(Error::InvalidArgument(format!(
                    "{}: {wrong} wrong rows of ours (both forms), {nccl_wrong} of NCCL",
                    shape.name
                )));
            }
        }
    }
    drop(nc);
    match nccl_failed {
        Some(e) => Err(e),
        None => nccl.map(|_| ()),
    }
}

/// Rows of `hidden` bf16 as an FP8 dispatch in `format` delivers each: its e4m3 bytes, then its
/// scales (f32, or UE8M0 words).
fn fp8_rows(x: &[u8], format: RecvFormat) -> Vec<u8> {
    let (q, scales) = reference::cast_e4m3(x, HIDDEN, format);
    let groups = HIDDEN / 128;
    let scale_bytes: Vec<u8> = if format == RecvFormat::E4m3Ue8m0 {
        reference::pack_ue8m0(&scales, groups).iter().flat_map(|w| w.to_le_bytes()).collect()
    } else {
        scales.iter().flat_map(|s| s.to_le_bytes()).collect()
    };
    let per = scale_bytes.len().checked_div(q.len() / HIDDEN).unwrap_or(0);
    q.chunks(HIDDEN).zip(scale_bytes.chunks(per.max(1))).flat_map(|(r, s)| r.iter().chain(s).copied()).collect()
}

fn measure(
    comm: &Communicator,
    shape: &Shape,
    reps: usize,
    nc: Option<&NcclComm>,
    format: RecvFormat,
) -> Result<RankResult> {
    let (n, me) = (comm.world_size(), comm.rank());
    let gpu = comm.gpu().clone();
    let dtype = DataType::Bf16;
    let row = HIDDEN * dtype.bytes();
    let t = shape.tokens;
    let blocks = std::env::var("MSCCLPP_RS_EP_BLOCKS").ok().and_then(|v| v.parse().ok());
    let ring = std::env::var("MSCCLPP_RS_EP_RING_ROWS").ok().and_then(|v| v.parse().ok());
    let threads = std::env::var("MSCCLPP_RS_EP_THREADS").ok().and_then(|v| v.parse().ok());
    let cfg = Config { blocks, threads, ..Config::new(t, HIDDEN, EXPERTS, TOPK) }.pipelined(ring);
    let mut ep = ExpertParallel::new(comm, cfg)?;
    // The pipelined mode has no window form: its "window" runs are peer-table runs.
    let window = if ring.is_some() { Form::PeerTable } else { Form::Window };
    if me == 0 {
        let (shared, local) = ep.memory_bytes();
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        let mode = ring.map_or("unpipelined".to_string(), |r| format!("pipelined, rings of {r} rows"));
        println!("{}: {mode}: shared buffer {:.1} MiB, local {:.1} MiB", shape.name, mib(shared), mib(local));
        let (blocks, dt, ct) = ep.grid();
        let dt = if format.is_fp8() { ep.fp8_threads() } else { dt };
        let (wd, wd8, wc) = ep.window_threads();
        let wd = if format.is_fp8() { wd8 } else { wd };
        println!(
            "{}: {blocks} blocks, {dt} threads (dispatch), {ct} threads (combine); window form: {wd} and {wc}",
            shape.name
        );
    }
    let routing = Routing::Random { none: 0.0 };
    let seed = 0x5eed;
    let inputs: Vec<_> =
        (0..n).map(|r| reference::random_input(seed, r, dtype, t, HIDDEN, TOPK, (EXPERTS, n), routing)).collect();
    let layouts: Vec<_> = inputs.iter().map(|i| reference::layout(&i.topk_idx, t, TOPK, EXPERTS, n)).collect();
    let recv: Vec<_> =
        (0..n).map(|d| reference::received(&inputs, &layouts, d, (EXPERTS, row), ExpertIds::Local, 1)).collect();
    let mine = &inputs[me];
    let x = DeviceBuffer::from_slice(&gpu, &mine.x)?;
    let idx = DeviceBuffer::from_slice(&gpu, &mine.topk_idx)?;
    let w = DeviceBuffer::from_slice(&gpu, &mine.topk_weights)?;
    let rows = recv[me].rows;
    // Identity experts: y is the received rows; combine sums each token's copies.
    let y = DeviceBuffer::from_slice(&gpu, &recv[me].x)?;
    let out_buf = DeviceBuffer::filled(&gpu, t * row, 0xa5)?;
    let input = DispatchInput { x: &x, dtype, topk_idx: &idx, topk_weights: &w, tokens: t, k: TOPK };
    let stream = gpu.stream();

    // Correctness before timing. `drow`: bytes of a row as the dispatch delivers it.
    let d = ep.dispatch_as(&input, format, stream)?;
    let (xrow, drow) = (d.row_bytes(), d.row_bytes() + d.scale_row_bytes());
    let (want_x, want_scales) = match format {
        RecvFormat::Input => (recv[me].x.clone(), vec![]),
        fp8 => reference::cast_e4m3(&recv[me].x, HIDDEN, fp8),
    };
    let got = ep.read_received(&d, stream)?;
    let g = want_scales.len().checked_div(rows).unwrap_or(0);
    let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
    let mut wrong = (0..rows)
        .filter(|&i| {
            got.x.get(i * xrow..(i + 1) * xrow) != want_x.get(i * xrow..(i + 1) * xrow)
                || got.x_scales.get(i * g..(i + 1) * g).map(bits) != want_scales.get(i * g..(i + 1) * g).map(bits)
        })
        .count();
    ep.combine(&d, &y, &out_buf, dtype, stream)?;
    gpu.synchronize()?;
    let ys: Vec<Vec<u8>> = recv.iter().map(|r| r.x.clone()).collect();
    let offsets: Vec<Vec<usize>> = recv.iter().map(|r| r.offsets.clone()).collect();
    let want = reference::combine(dtype, &layouts[me], me, t, (&ys, &offsets), row);
    let got_out = out_buf.to_vec::<u8>()?;
    wrong += (0..t).filter(|&i| got_out[i * row..(i + 1) * row] != want[i * row..(i + 1) * row]).count();

    // Microseconds of our dispatch and combine (one sample per pair), in the object's current
    // form, over `reps` batches.
    let time_ours = |ep: &mut ExpertParallel, reps: usize| {
        let mut pending = None;
        time_pairs(comm, reps, |s, op| {
            if op == 0 {
                pending = Some(ep.dispatch_as(&input, format, s)?);
                Ok(())
            } else {
                let d = pending.take().ok_or_else(|| Error::InvalidArgument("combine without dispatch".into()))?;
                ep.combine(&d, &y, &out_buf, dtype, s)
            }
        })
    };
    let (dispatch_us, combine_us) = time_ours(&mut ep, reps).map(|(d, c)| (median(d), median(c)))?;
    let got_out = out_buf.to_vec::<u8>()?;
    wrong += (0..t).filter(|&i| got_out[i * row..(i + 1) * row] != want[i * row..(i + 1) * row]).count();

    // The window form on the same object and buffers: checked against the same references
    // (received rows, scales, combined rows), then timed the same way.
    ep.set_form(window);
    out_buf.fill(0xa5)?;
    let d = ep.dispatch_as(&input, format, stream)?;
    let got_w = ep.read_received(&d, stream)?;
    let mut window_wrong = (0..rows)
        .filter(|&i| {
            got_w.x.get(i * xrow..(i + 1) * xrow) != want_x.get(i * xrow..(i + 1) * xrow)
                || got_w.x_scales.get(i * g..(i + 1) * g).map(bits) != want_scales.get(i * g..(i + 1) * g).map(bits)
        })
        .count();
    ep.combine(&d, &y, &out_buf, dtype, stream)?;
    gpu.synchronize()?;
    let got_out = out_buf.to_vec::<u8>()?;
    window_wrong += (0..t).filter(|&i| got_out[i * row..(i + 1) * row] != want[i * row..(i + 1) * row]).count();
    // The two forms batch by batch in turn (window first, then peer-table), so that drift during
    // the run (clocks, the other ranks' timing) falls on both alike; each form's median.
    let (mut wd, mut wc, mut pd, mut pc) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        for (form, d, c) in [(window, &mut wd, &mut wc), (Form::PeerTable, &mut pd, &mut pc)] {
            ep.set_form(form);
            let (ds, cs) = time_ours(&mut ep, 1)?;
            d.extend(ds);
            c.extend(cs);
        }
    }
    if std::env::var_os("MSCCLPP_RS_EP_DETAIL").is_some() {
        println!(
            "ep_bench: rank {me} {}: p10/p50/p90 us: window dispatch {}, combine {}; peer-table dispatch {}, combine {}",
            shape.name,
            spread(&wd),
            spread(&wc),
            spread(&pd),
            spread(&pc)
        );
    }
    let (window_dispatch_us, window_combine_us) = (median(wd), median(wc));
    let (peer_dispatch_us, peer_combine_us) = (median(pd), median(pc));
    let got_out = out_buf.to_vec::<u8>()?;
    window_wrong += (0..t).filter(|&i| got_out[i * row..(i + 1) * row] != want[i * row..(i + 1) * row]).count();
    drop(ep);

    // NCCL: the same rows (FP8: as the dispatch delivers them), packed by destination, sizes
    // known.
    let counts = |s: usize, d: usize| layouts[s].tokens_per_rank[d] as usize;
    let mine_d = if format.is_fp8() { fp8_rows(&mine.x, format) } else { mine.x.clone() };
    let mut packed = Vec::with_capacity(layouts[me].tokens_per_rank.iter().sum::<u32>() as usize * drow);
    let mut send_off = vec![0usize; n + 1];
    for dst in 0..n {
        for tok in 0..t {
            if layouts[me].is_token_in_rank[tok * n + dst] {
                packed.extend_from_slice(&mine_d[tok * drow..(tok + 1) * drow]);
            }
        }
        send_off[dst + 1] = send_off[dst] + counts(me, dst);
    }
    let recv_off = &recv[me].offsets;
    let mut nccl_dispatch_us = 0.0;
    let mut nccl_combine_us = 0.0;
    let mut nccl_wrong = 0;
    if let Some(nc) = nc {
        let send = DeviceBuffer::from_slice(&gpu, &packed)?;
        let land = DeviceBuffer::filled(&gpu, rows * drow, 0xa5)?;
        let back = DeviceBuffer::alloc(&gpu, send_off[n] * row)?;
        let at = |b: &DeviceBuffer, rows: usize| b.addr() + (rows * row) as u64;
        let dat = |b: &DeviceBuffer, rows: usize| b.addr() + (rows * drow) as u64;
        let disp_sends: Vec<Transfer> =
            (0..n).map(|p| Transfer { peer: p, addr: dat(&send, send_off[p]), bytes: counts(me, p) * drow }).collect();
        let disp_recvs: Vec<Transfer> =
            (0..n).map(|p| Transfer { peer: p, addr: dat(&land, recv_off[p]), bytes: counts(p, me) * drow }).collect();
        let comb_sends: Vec<Transfer> =
            (0..n).map(|p| Transfer { peer: p, addr: at(&y, recv_off[p]), bytes: counts(p, me) * row }).collect();
        let comb_recvs: Vec<Transfer> =
            (0..n).map(|p| Transfer { peer: p, addr: at(&back, send_off[p]), bytes: counts(me, p) * row }).collect();
        (nccl_dispatch_us, nccl_combine_us) = time_pairs(comm, reps, |s, op| {
            // SAFETY: every transfer lies inside its buffer (sizes from the layouts), and the
            // buffers outlive the synchronisation at the end of every timed batch.
            unsafe {
                if op == 0 {
                    nc.send_recv(&disp_sends, &disp_recvs, s)
                } else {
                    nc.send_recv(&comb_sends, &comb_recvs, s)
                }
            }
        })
        .map(|(d, c)| (median(d), median(c)))?;
        let got = land.to_vec::<u8>()?;
        let want = if format.is_fp8() { fp8_rows(&recv[me].x, format) } else { recv[me].x.clone() };
        nccl_wrong = (0..rows).filter(|&i| got[i * drow..(i + 1) * drow] != want[i * drow..(i + 1) * drow]).count();
    }
    let nvlink_rows = rows - counts(me, me);
    Ok(RankResult {
        dispatch_us,
        combine_us,
        nccl_dispatch_us,
        nccl_combine_us,
        recv_bytes: (rows * row) as f64,
        nvlink_bytes: (nvlink_rows * row) as f64,
        dispatch_bytes: (rows * drow) as f64,
        nvlink_dispatch_bytes: (nvlink_rows * drow) as f64,
        wrong: wrong as f64,
        nccl_wrong: nccl_wrong as f64,
        window_dispatch_us,
        window_combine_us,
        window_wrong: window_wrong as f64,
        peer_dispatch_us,
        peer_combine_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_rows_are_the_e4m3_bytes_then_the_scales() {
        let v: Vec<f32> = (0..2 * HIDDEN).map(|i| (i % 97) as f32 - 48.0).collect();
        let x = reference::from_f32(DataType::Bf16, &v);
        let (q, scales) = reference::cast_e4m3(&x, HIDDEN, RecvFormat::E4m3);
        let rows = fp8_rows(&x, RecvFormat::E4m3);
        assert_eq!(rows.len(), 2 * (HIDDEN + HIDDEN / 32));
        assert_eq!(&rows[HIDDEN + 224..2 * HIDDEN + 224], &q[HIDDEN..]);
        assert_eq!(rows[HIDDEN..HIDDEN + 4], scales[0].to_le_bytes());
        let rows = fp8_rows(&x, RecvFormat::E4m3Ue8m0);
        assert_eq!(rows.len(), 2 * (HIDDEN + HIDDEN / 128));
        let (_, pow2) = reference::cast_e4m3(&x, HIDDEN, RecvFormat::E4m3Ue8m0);
        assert_eq!(rows[2 * HIDDEN + 56 + 1], (pow2[57].to_bits() >> 23) as u8);
    }
}
