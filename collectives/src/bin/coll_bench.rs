//! `coll-bench`: our allreduce, allgather and reduce-scatter against NCCL in the same run,
//! nccl-tests style. For every size: time per operation (median of CUDA-event timings) in a CUDA
//! graph of back-to-back operations and with eager launches, algbw and busbw, and the number of
//! wrong elements after the timed runs, for ours and for NCCL, and the ratio.
//!
//! ```sh
//! coll-bench --ranks 2                       # built-in launcher (or under mpirun -np N)
//! MSCCLPP_RS_BENCH_SIZES=1024,1048576 ...    # sizes in bytes (default 1 KiB .. 1 GiB, x4)
//! MSCCLPP_RS_NCCL=/path/libnccl.so.2 ...     # which NCCL (default: the loader's libnccl.so.2)
//! MSCCLPP_RS_BENCH_OPS=allreduce,allgather   # which operations
//! MSCCLPP_RS_BENCH_ALGOS=1                   # also time every algorithm that fits (crossovers)
//! ```
//! Sizes follow nccl-tests: the allreduce buffer, the allgather output and the reduce-scatter
//! input. busbw: allreduce `2(n-1)/n * size / t`, allgather and reduce-scatter `(n-1)/n * size / t`.
//! Rank 0 prints the table; `MSCCLPP_RS_BENCH_OUT` names a JSON-lines file for the results: one
//! line per (operation, type, size) in the benchmark schema of `docs/BENCHMARKS.md` (value: our
//! time in a graph, baseline: NCCL's, ratio: NCCL's time / ours, with the target of each size),
//! plus the details of both runs.
//!
//! Where NCCL refuses a communicator (two ranks on one GPU: `coll-bench --threads 2` on a machine
//! with one GPU), ours is still measured and printed (the NCCL columns `NaN`, no JSON lines), and
//! the run then fails naming NCCL's refusal.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use mscclpp_collectives::{CollectiveAlgorithm as Algorithm, Collectives, Config, DataType, Operation, ReduceOp};
use mscclpp_harness::nccl::{Nccl, NcclComm};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};

fn main() -> ExitCode {
    mscclpp_harness::runner::main("coll-bench", 2, run)
}

fn drv<T>(r: std::result::Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::Driver { context: what.into(), source: e })
}

/// Input element `i` of rank `r`: small integers, so every summation order gives exact sums.
fn value(i: usize, r: usize) -> f32 {
    ((i * 7 + r * 13) % 32) as f32 - 16.0
}

fn bytes_of(dt: DataType, v: &[f32]) -> Vec<u8> {
    match dt {
        DataType::Bf16 => v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
        DataType::F16 => v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Who runs an operation.
#[derive(Clone, Copy)]
enum Who<'a> {
    Ours(&'a Collectives),
    Nccl(&'a NcclComm<'a>),
}

struct Bufs {
    send: DeviceBuffer,
    recv: DeviceBuffer,
    count: usize,
    expected: Vec<u8>,
}

fn enqueue(who: Who, op: Operation, dt: DataType, b: &Bufs, s: &CudaStream) -> Result<()> {
    match who {
        Who::Ours(c) => match op {
            Operation::AllReduce => c.allreduce(&b.send, &b.recv, b.count, dt, ReduceOp::Sum, s),
            Operation::AllGather => c.allgather(&b.send, &b.recv, b.count, dt, s),
            Operation::ReduceScatter => c.reduce_scatter(&b.send, &b.recv, b.count, dt, ReduceOp::Sum, s),
        },
        // SAFETY: both buffers hold the operation's bytes and outlive the synchronise that
        // follows every timed batch.
        Who::Nccl(n) => unsafe {
            match op {
                Operation::AllReduce => n.all_reduce(b.send.addr(), b.recv.addr(), b.count, dt, ReduceOp::Sum, s),
                Operation::AllGather => n.all_gather(b.send.addr(), b.recv.addr(), b.count, dt, s),
                Operation::ReduceScatter => {
                    n.reduce_scatter(b.send.addr(), b.recv.addr(), b.count, dt, ReduceOp::Sum, s)
                }
            }
        },
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// Median microseconds per operation over `reps` timed batches of `k` operations.
fn time_batches(comm: &Communicator, reps: usize, mut batch: impl FnMut() -> Result<()>, k: usize) -> Result<f64> {
    let gpu = comm.gpu();
    let stream = gpu.stream();
    let ctx = gpu.context();
    let start = drv(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
    let stop = drv(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
    batch()?; // warm up
    gpu.synchronize_timeout(Duration::from_secs(60))?;
    let mut times = vec![];
    for _ in 0..reps {
        comm.bootstrap().barrier()?;
        drv(start.record(stream), "recording an event")?;
        batch()?;
        drv(stop.record(stream), "recording an event")?;
        gpu.synchronize_timeout(Duration::from_secs(60))?;
        let ms = drv(start.elapsed_ms(&stop), "reading an event")?;
        times.push(ms as f64 * 1000.0 / k as f64);
    }
    Ok(median(times))
}

struct Measured {
    graph_us: f64,
    eager_us: f64,
    wrong: usize,
}

fn measure(comm: &Communicator, who: Who, op: Operation, dt: DataType, b: &Bufs, size: u64) -> Result<Measured> {
    let stream = comm.gpu().stream();
    // Enough operations per batch to dwarf the launch of the batch, fewer for large sizes.
    let k = (((64u64 << 20) / size.max(1)) as usize).clamp(4, 50);
    let reps = if size >= (256 << 20) { 5 } else { 11 };
    b.recv.fill(0xa5)?;
    let graph_us = {
        comm.gpu().bind()?;
        drv(stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "beginning a capture")?;
        let enq = (0..k).try_for_each(|_| enqueue(who, op, dt, b, stream));
        let graph: Option<CudaGraph> = drv(stream.end_capture(CUgraphInstantiate_flags(0)), "ending a capture")?;
        enq?;
        let graph = graph.ok_or_else(|| Error::InvalidArgument("empty capture".into()))?;
        drv(graph.upload(), "uploading a graph")?;
        time_batches(comm, reps, || drv(graph.launch(), "launching a graph"), k)?
    };
    let eager_us = time_batches(comm, reps, || (0..k).try_for_each(|_| enqueue(who, op, dt, b, stream)), k)?;
    let got = b.recv.to_vec::<u8>()?;
    let wrong = mscclpp_collectives::reference::count_wrong(dt, &got, &b.expected);
    Ok(Measured { graph_us, eager_us, wrong })
}

fn buffers(comm: &Communicator, op: Operation, dt: DataType, size: u64) -> Result<Bufs> {
    let (n, me) = (comm.world_size(), comm.rank());
    let w = dt.bytes();
    let gpu = comm.gpu();
    let elems = (size as usize / w).max(1);
    let (count, send, expected): (usize, Vec<f32>, Vec<f32>) = match op {
        Operation::AllReduce => {
            let send = (0..elems).map(|i| value(i, me)).collect();
            let want = (0..elems).map(|i| (0..n).map(|r| value(i, r)).sum()).collect();
            (elems, send, want)
        }
        Operation::AllGather => {
            let per = (elems / n).max(1);
            let send = (0..per).map(|i| value(i, me)).collect();
            let want = (0..n).flat_map(|r| (0..per).map(move |i| value(i, r))).collect();
            (per, send, want)
        }
        Operation::ReduceScatter => {
            let per = (elems / n).max(1);
            let send = (0..per * n).map(|i| value(i, me)).collect();
            let want = (0..per).map(|i| (0..n).map(|r| value(me * per + i, r)).sum()).collect();
            (per, send, want)
        }
    };
    let recv_bytes = expected.len() * w;
    Ok(Bufs {
        send: DeviceBuffer::from_slice(gpu, &bytes_of(dt, &send))?,
        recv: DeviceBuffer::alloc(gpu, recv_bytes)?,
        count,
        expected: bytes_of(dt, &expected),
    })
}

/// The goal for one row, as (least ratio of NCCL's time to ours, most microseconds): never
/// slower than NCCL, allgather of 1 GiB 1.2 times as fast; on two ranks an allreduce of at most
/// 2.5 us up to 64 KiB, 4.5 us at 256 KiB and 9 us at 1 MiB, and at least 300 GB/s busbw at 16 MiB
/// and 360 GB/s at 1 GiB.
fn target(op: Operation, dt: DataType, n: usize, bytes: u64, factor: f64) -> (f64, Option<f64>) {
    let ratio = if op == Operation::AllGather && bytes == 1 << 30 { 1.2 } else { 1.0 };
    let allreduce = op == Operation::AllReduce && matches!(dt, DataType::F32 | DataType::Bf16) && n == 2;
    let busbw_us = |gbps: f64| factor * bytes as f64 / (gbps * 1e3);
    let us = match bytes {
        _ if !allreduce => None,
        b if b <= 64 << 10 => Some(2.5),
        b if b == 256 << 10 => Some(4.5),
        b if b == 1 << 20 => Some(9.0),
        b if b == 16 << 20 => Some(busbw_us(300.0)),
        b if b == 1 << 30 => Some(busbw_us(360.0)),
        _ => None,
    };
    (ratio, us)
}

fn fmt_size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let sizes: Vec<u64> = match std::env::var("MSCCLPP_RS_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => (0..11).map(|i| 1024u64 << (2 * i)).collect(),
    };
    let ops: Vec<Operation> = match std::env::var("MSCCLPP_RS_BENCH_OPS") {
        Ok(s) => [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter]
            .into_iter()
            .filter(|o| s.split(',').any(|x| x == o.name()))
            .collect(),
        Err(_) => vec![Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter],
    };
    let algos = std::env::var("MSCCLPP_RS_BENCH_ALGOS").as_deref() == Ok("1");
    let ours = Collectives::new(comm)?;
    let forced: Vec<(Algorithm, Collectives)> = if algos {
        Algorithm::ALL
            .into_iter()
            .map(|a| Ok((a, Collectives::with_config(comm, Config { force: Some(a), ..Config::from_env()? })?)))
            .collect::<Result<_>>()?
    } else {
        vec![]
    };
    let nccl = Nccl::load()?;
    // NCCL refuses two ranks on one GPU: then ours is measured alone (the NCCL columns empty, no
    // JSON lines) and the run fails at the end, naming why.
    let (nc, nccl_failed) = match nccl.communicator(comm.bootstrap().as_ref(), comm.gpu()) {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    let mut out = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
        .filter(|_| me == 0)
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    if me == 0 {
        println!(
            "coll-bench: {n} ranks, GPU {} ({}), NCCL {} from {}{}, NCCL_NVLS_ENABLE={}",
            comm.gpu().ordinal(),
            comm.gpu().info().name,
            nccl.version_string(),
            nccl.path(),
            nccl_failed.as_ref().map(|e| format!(" refused a communicator ({e})")).unwrap_or_default(),
            std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "unset".into())
        );
        println!("time: median us per operation; graph: a CUDA graph of back-to-back operations; eager: launches");
    }
    for &op in &ops {
        let dts: &[DataType] =
            if op == Operation::AllReduce { &[DataType::F32, DataType::Bf16] } else { &[DataType::F32] };
        for &dt in dts {
            if me == 0 {
                println!("\n== {} {} ({n} ranks)", op.name(), dt.name());
                println!(
                    "{:>8} {:>10} | {:>9} {:>8} {:>8} {:>9} {:>6} | {:>9} {:>8} {:>9} {:>6} | {:>7} {:>7} | algorithm",
                    "size",
                    "count",
                    "ours(us)",
                    "algbw",
                    "busbw",
                    "eager",
                    "#wrong",
                    "nccl(us)",
                    "busbw",
                    "eager",
                    "#wrong",
                    "graph x",
                    "eager x"
                );
            }
            for &size in &sizes {
                if (size as usize) < dt.bytes() * n {
                    continue;
                }
                let b = buffers(comm, op, dt, size)?;
                let real = (b.expected.len().max(b.count * dt.bytes())) as u64;
                let total = match op {
                    Operation::AllReduce => (b.count * dt.bytes()) as u64,
                    _ => (b.count * dt.bytes() * n) as u64,
                };
                let _ = real;
                let factor = match op {
                    Operation::AllReduce => 2.0 * (n as f64 - 1.0) / n as f64,
                    _ => (n as f64 - 1.0) / n as f64,
                };
                let m = measure(comm, Who::Ours(&ours), op, dt, &b, total)?;
                let k = match &nc {
                    Some(nc) => measure(comm, Who::Nccl(nc), op, dt, &b, total)?,
                    None => Measured { graph_us: f64::NAN, eager_us: f64::NAN, wrong: 0 },
                };
                let per_rank = if op == Operation::AllReduce { total } else { total / n as u64 };
                let plan = ours.plan(op, per_rank);
                let algbw = |us: f64| total as f64 / us / 1e3;
                let mut extra = String::new();
                for (a, c) in &forced {
                    if c.plan(op, per_rank).algorithm != *a {
                        continue;
                    }
                    let f = measure(comm, Who::Ours(c), op, dt, &b, total)?;
                    extra.push_str(&format!(
                        " {}={:.2}us{}",
                        a.name(),
                        f.graph_us,
                        if f.wrong > 0 { "(WRONG)" } else { "" }
                    ));
                }
                if me == 0 {
                    println!(
                        "{:>8} {:>10} | {:>9.2} {:>8.2} {:>8.2} {:>9.2} {:>6} | {:>9.2} {:>8.2} {:>9.2} {:>6} | {:>7.2} {:>7.2} | {} {}x{}{}",
                        fmt_size(total),
                        b.count,
                        m.graph_us,
                        algbw(m.graph_us),
                        algbw(m.graph_us) * factor,
                        m.eager_us,
                        m.wrong,
                        k.graph_us,
                        algbw(k.graph_us) * factor,
                        k.eager_us,
                        k.wrong,
                        k.graph_us / m.graph_us,
                        k.eager_us / m.eager_us,
                        plan.algorithm.name(),
                        plan.blocks,
                        plan.threads,
                        extra
                    );
                    if let Some(f) = out.as_mut().filter(|_| nc.is_some()) {
                        let ratio = k.graph_us / m.graph_us;
                        let (least, most_us) = target(op, dt, n, total, factor);
                        let met = ratio >= least && most_us.is_none_or(|t| m.graph_us <= t);
                        let head = format!(
                            "{{\"suite\":\"coll-bench\",\"family\":\"collectives\",\"name\":\"{}/{}/{}\",\"series\":null,\"size_bytes\":{total},\"metric\":\"us\",\"value\":{:.3},\"baseline\":\"NCCL {}\",\"baseline_value\":{:.3},\"ratio\":{ratio:.4},\"target\":{least},\"target_value\":{},\"met\":{met},",
                            op.name(),
                            dt.name(),
                            fmt_size(total).replace(' ', ""),
                            m.graph_us,
                            nccl.version_string(),
                            k.graph_us,
                            most_us.map(|t| format!("{t:.3}")).unwrap_or_else(|| "null".into()),
                        );
                        // One write per line: the file is shared with the other benches.
                        let _ = writeln!(
                            f,
                            "{head}\"bench\":\"collectives\",\"op\":\"{}\",\"dtype\":\"{}\",\"ranks\":{n},\"bytes\":{total},\"ours_graph_us\":{:.3},\"ours_eager_us\":{:.3},\"ours_busbw\":{:.2},\"ours_wrong\":{},\"nccl_graph_us\":{:.3},\"nccl_eager_us\":{:.3},\"nccl_busbw\":{:.2},\"nccl_wrong\":{},\"algorithm\":\"{}\",\"nccl\":\"{}\"}}",
                            op.name(),
                            dt.name(),
                            m.graph_us,
                            m.eager_us,
                            algbw(m.graph_us) * factor,
                            m.wrong,
                            k.graph_us,
                            k.eager_us,
                            algbw(k.graph_us) * factor,
                            k.wrong,
                            plan.algorithm.name(),
                            nccl.version_string()
                        );
                    }
                }
                if m.wrong > 0 {
                    return Err(Error::InvalidArgument(format!(
                        "{} {} {}: {} wrong elements in our result",
                        op.name(),
                        dt.name(),
                        fmt_size(total),
                        m.wrong
                    )));
                }
            }
        }
    }
    drop(nc);
    nccl_failed.map_or(Ok(()), Err)
}
