//! `win-bench`: the one-shot allreduce written on a symmetric memory window
//! ([`WindowAllreduce`]) against the one-shot LL allreduce of [`Collectives`] (forced, with LL
//! slots large enough for the largest size), in the same run. For every size: the median
//! microseconds per operation of CUDA-event timings of 51 batches of back-to-back operations, in
//! a CUDA graph and with eager launches, the forms taking turns batch by batch (so drift falls on
//! all alike), for the window allreduce as it picks its form (`LL`
//! packets or `put` and signal) and for the one-shot LL, the ratio window / one-shot (below 1:
//! the window form is faster), the graph time of the window's other form (forced: its LL limit
//! set to the size or to 0), and whether all three results are the same bits.
//!
//! ```sh
//! win-bench --threads 8                     # 8 ranks as threads of one process (one GPU is fine)
//! win-bench --ranks 2                       # processes, built-in launcher (or under mpirun)
//! MSCCLPP_RS_BENCH_SIZES=1024,1048576 ...   # sizes in bytes (default 1 KiB .. 64 MiB, x4, and 512 KiB, 2, 3 MiB)
//! ```
//! f32 sum; sizes are rounded down to a multiple of 16 bytes. Rank 0 prints the table, with the
//! GPU and how many ranks share it (a figure from ranks sharing one GPU is labelled so).

use std::time::Duration;

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use mscclpp_collectives::reference::{random_input, sum_in_order};
use mscclpp_collectives::{CollectiveAlgorithm, Collectives, Config, DataType, ReduceOp, WindowAllreduce};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};

fn main() -> std::process::ExitCode {
    mscclpp_harness::runner::main("win-bench", 2, run)
}

fn drv<T>(r: std::result::Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::Driver { context: what.into(), source: e })
}

/// Timed batches of each form per size and launch mode (odd: the median is one of them).
const REPS: usize = 51;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// (graph, eager) median microseconds per operation of each of `ops` over [`REPS`] timed batches
/// of `k` operations. The forms take turns (a graph batch and an eager batch of each, then the
/// next round), so a drift of the GPU's clocks or load falls on all of them alike.
fn measure<const N: usize>(
    comm: &Communicator,
    k: usize,
    ops: [&dyn Fn() -> Result<()>; N],
) -> Result<[(f64, f64); N]> {
    let gpu = comm.gpu();
    let stream = gpu.stream();
    gpu.bind()?;
    let start = drv(gpu.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
    let stop = drv(gpu.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)), "creating an event")?;
    let mut graphs = vec![];
    for op in ops {
        drv(stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "beginning a capture")?;
        let enq = (0..k).try_for_each(|_| op());
        let graph: Option<CudaGraph> = drv(stream.end_capture(CUgraphInstantiate_flags(0)), "ending a capture")?;
        enq?;
        let graph = graph.ok_or_else(|| Error::InvalidArgument("empty capture".into()))?;
        drv(graph.upload(), "uploading a graph")?;
        graphs.push(graph);
    }
    // Every rank past its set-up (graph instantiation and upload may allocate, and an allocation
    // may wait for a peer's kernel already spinning for this rank) before any launch.
    comm.bootstrap().barrier()?;
    for (op, graph) in ops.iter().zip(&graphs) {
        drv(graph.launch(), "launching a graph")?; // warm up
        (0..k).try_for_each(|_| op())?;
    }
    gpu.synchronize_timeout(Duration::from_secs(60))?;
    // Microseconds per operation of one batch, every rank starting together.
    let time = |batch: &dyn Fn() -> Result<()>| -> Result<f64> {
        comm.bootstrap().barrier()?;
        drv(start.record(stream), "recording an event")?;
        batch()?;
        drv(stop.record(stream), "recording an event")?;
        gpu.synchronize_timeout(Duration::from_secs(60))?;
        Ok(drv(start.elapsed_ms(&stop), "reading an event")? as f64 * 1000.0 / k as f64)
    };
    let mut times = [(); N].map(|_| (vec![], vec![]));
    for _ in 0..REPS {
        for ((op, graph), t) in ops.iter().zip(&graphs).zip(&mut times) {
            t.0.push(time(&|| drv(graph.launch(), "launching a graph"))?);
            t.1.push(time(&|| (0..k).try_for_each(|_| op()))?);
        }
    }
    Ok(times.map(|(g, e)| (median(g), median(e))))
}

fn fmt_size(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let sizes: Vec<u64> = match std::env::var("MSCCLPP_RS_BENCH_SIZES") {
        Ok(s) => {
            s.split(',').filter_map(|x| x.trim().parse::<u64>().ok()).map(|b| b / 16 * 16).filter(|&b| b > 0).collect()
        }
        // Powers of 4, and 512 KiB, 2 and 3 MiB around the default LL limits.
        Err(_) => {
            let mut v: Vec<u64> = (0..9).map(|i| 1024u64 << (2 * i)).chain([512 << 10, 2 << 20, 3 << 20]).collect();
            v.sort();
            v
        }
    };
    let largest = sizes.iter().copied().max().unwrap_or(16);
    // LL slots that carry the largest size one-shot (a slot holds half its bytes of data).
    let ll_slot_bytes = (2 * largest).max(Config::default().ll_slot_bytes);
    let oneshot = Collectives::with_config(
        comm,
        Config { force: Some(CollectiveAlgorithm::OneShotLl), ll_slot_bytes, ..Config::default() },
    )?;
    let gpu = comm.gpu();
    let sharing = comm.ranks_sharing_gpu()?;
    if me == 0 {
        println!(
            "win-bench: {n} ranks, GPU {} ({}), {sharing} rank(s) per GPU{}; f32 sum; time: median us per operation",
            gpu.ordinal(),
            gpu.info().name,
            if sharing > 1 { " (ranks share one GPU: not a multi-GPU figure)" } else { "" }
        );
        println!(
            "{:>8} | {:>4} {:>9} {:>9} | {:>9} {:>9} | {:>8} {:>8} | {:>9} {:>8} | {:>6} | blocks win/other/oneshot",
            "size",
            "form",
            "win(us)",
            "eager",
            "1shot(us)",
            "eager",
            "graph x",
            "eager x",
            "other(us)",
            "other x",
            "bits"
        );
    }
    for &size in &sizes {
        let count = (size / 4) as usize;
        let win = WindowAllreduce::new(comm, size, None)?;
        // The form the window allreduce does not pick for this size, forced.
        let picked = win.plan(size);
        let other = WindowAllreduce::with_ll_limit(comm, size, None, if picked.ll { 0 } else { size })?;
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, size, r)).collect();
        let send = DeviceBuffer::from_slice(gpu, &inputs[me])?;
        let (by_win, by_other, by_one) = (
            DeviceBuffer::filled(gpu, size as usize, 0xa5)?,
            DeviceBuffer::filled(gpu, size as usize, 0xa6)?,
            DeviceBuffer::filled(gpu, size as usize, 0x5a)?,
        );
        let k = (((64u64 << 20) / size) as usize).clamp(4, 50);
        let ops: [&dyn Fn() -> Result<()>; 3] = [
            &|| win.allreduce_f32(&send, &by_win, count, gpu.stream()),
            &|| other.allreduce_f32(&send, &by_other, count, gpu.stream()),
            &|| oneshot.allreduce(&send, &by_one, count, DataType::F32, ReduceOp::Sum, gpu.stream()),
        ];
        let [w, x, o] = measure(comm, k, ops)?;
        let (gw, gx, go) = (by_win.to_vec::<u8>()?, by_other.to_vec::<u8>()?, by_one.to_vec::<u8>()?);
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let same = gw == go && gx == go && gw == sum_in_order(DataType::F32, &refs);
        if me == 0 {
            let plan = oneshot.plan(mscclpp_collectives::Operation::AllReduce, size);
            println!(
                "{:>8} | {:>4} {:>9.2} {:>9.2} | {:>9.2} {:>9.2} | {:>8.3} {:>8.3} | {:>9.2} {:>8.3} | {:>6} | {}/{}/{}",
                fmt_size(size),
                if picked.ll { "LL" } else { "put" },
                w.0,
                w.1,
                o.0,
                o.1,
                w.0 / o.0,
                w.1 / o.1,
                x.0,
                x.0 / o.0,
                if same { "same" } else { "DIFFER" },
                picked.blocks,
                other.plan(size).blocks,
                plan.blocks
            );
        }
        win.free()?;
        other.free()?;
        if !same {
            return Err(Error::InvalidArgument(format!("{}: the window and one-shot results differ", fmt_size(size))));
        }
    }
    Ok(())
}
