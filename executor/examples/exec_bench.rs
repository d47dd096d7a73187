//! `exec_bench`: the plan executor against the hand-written collectives running the same
//! algorithm, on the same ranks in the same run:
//!
//! * allgather: the `allgather_memory_parts` plan (direct puts into the peers' outputs, a signal
//!   and a wait per part) against `Collectives::allgather` forced to its pipelined memory-channel
//!   form;
//! * allreduce: the `allreduce_packets_parts` plan against the one-shot LL allreduce (both write
//!   LL packets into every peer's scratch and reduce them);
//! * two-shot allreduce: the `allreduce_two_shot_read_parts` plan (reduce-scatter by reading the
//!   peers' inputs through memory channels, allgather by puts) against `Collectives::allreduce`
//!   forced to its pipelined form (reduce-scatter then allgather over memory channels, through
//!   acknowledged slots), at every size.
//!
//! Each plan is cut into about as many parts per peer as the collective's grid has blocks at
//! that size (a power of two; `MSCCLPP_RS_EXEC_PARTS=k` forces `k`), and the one-part form runs
//! too. Time per operation: median over trials of back-to-back launches timed on the host around
//! a synchronise; the results are checked after the timed launches.
//!
//! ```sh
//! exec_bench --ranks 2                          # built-in launcher (or under mpirun -np N)
//! MSCCLPP_RS_BENCH_SIZES=65536,1048576 ...      # bytes per rank (default 4 KiB .. 4 MiB, x4)
//! ```
//! Rank 0 prints one line per (operation, size): the executor's times (one part, and the parts
//! used), the collective's, and the ratio (collective's time / executor's with parts; the goal is
//! at least 0.9).

use std::process::ExitCode;
use std::time::Instant;

use mscclpp_collectives::reference::{count_wrong, random_input, sum_in_order};
use mscclpp_collectives::{CollectiveAlgorithm, Collectives, Config as CollConfig, DataType, ReduceOp};
use mscclpp_executor::{Config, ElementType, Executor};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};
use mscclpp_plan::{Program, examples};

const ITERS: usize = 50;
const TRIALS: usize = 5;

fn main() -> ExitCode {
    mscclpp_harness::runner::main("exec_bench", 2, run)
}

/// Median seconds per operation of `ITERS` back-to-back calls of `op`.
fn time(comm: &Communicator, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    op()?;
    comm.gpu().synchronize()?;
    let mut t = vec![];
    for _ in 0..TRIALS {
        comm.bootstrap().barrier()?;
        let start = Instant::now();
        for _ in 0..ITERS {
            op()?;
        }
        comm.gpu().synchronize()?;
        t.push(start.elapsed().as_secs_f64() / ITERS as f64);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[TRIALS / 2])
}

/// Median seconds per launch of `plan` in chunks of `chunk` bytes on this rank's `input`, after
/// which its output must be `want`.
fn time_plan(comm: &Communicator, plan: &Program, chunk: usize, input: &[u8], want: &[u8]) -> Result<f64> {
    let exec = Executor::new(comm, plan, Config::new(chunk, ElementType::F32))?;
    exec.arena().write(exec.input().0, input)?;
    comm.bootstrap().barrier()?;
    let t = time(comm, || exec.launch(comm.gpu().stream()))?;
    let (o, l) = exec.output();
    wrong(&format!("executor {}", plan.name), &exec.arena().to_vec::<u8>()?[o..o + l], want)?;
    Ok(t)
}

fn wrong(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    match count_wrong(DataType::F32, got, want) {
        0 => Ok(()),
        w => Err(Error::InvalidArgument(format!("{what}: {w} elements wrong after the timed runs"))),
    }
}

/// Parts per peer for a plan of `bytes` per rank: about one per `unit` bytes, the largest power
/// of two from 1 to `max` at most that, unless `MSCCLPP_RS_EXEC_PARTS` says otherwise.
fn parts(bytes: usize, unit: usize, max: usize) -> usize {
    match std::env::var("MSCCLPP_RS_EXEC_PARTS").ok().and_then(|v| v.trim().parse().ok()) {
        Some(k) if k > 0 => k,
        _ => 1 << (bytes / unit).clamp(1, max).ilog2(),
    }
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let sizes: Vec<usize> = match std::env::var("MSCCLPP_RS_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|v| v.trim().parse().ok()).collect(),
        Err(_) => (0..6).map(|k| 4096 << (2 * k)).collect(),
    };
    let plan_err = |e: mscclpp_plan::PlanError| Error::InvalidArgument(e.to_string());
    // (Pipelined: the allgather's algorithm and the two-shot allreduce's.)
    let pipelined = Collectives::with_config(
        comm,
        CollConfig { force: Some(CollectiveAlgorithm::Pipelined), ..CollConfig::default() },
    )?;
    let one_shot = Collectives::with_config(
        comm,
        CollConfig { force: Some(CollectiveAlgorithm::OneShotLl), ..CollConfig::default() },
    )?;
    let gpu = comm.gpu().clone();
    let stream = gpu.stream().clone();
    // Most blocks per rank a plan may use: the SM count (the allgather and the packet allreduce
    // use about n blocks per part, the two-shot allreduce one).
    let sm_count = (gpu.info().sm_count as usize).max(1);
    let max_parts = (sm_count / n).max(1);
    for &bytes in &sizes {
        // Allgather: `bytes` per rank. The pipelined collective runs a block per 16 KiB; the plan
        // a block per part and peer (and one per part for the local copy).
        let k = parts(bytes, 16 << 10, max_parts);
        let bytes = bytes.div_ceil(16 * n * k) * 16 * n * k;
        let count = bytes / 4;
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, bytes as u64, r)).collect();
        let mut t_exec = Vec::new();
        for k in [1, k] {
            let plan = examples::allgather_memory_parts(n, k).map_err(plan_err)?;
            t_exec.push(time_plan(comm, &plan, bytes / k, &inputs[me], &inputs.concat())?);
        }
        let send = DeviceBuffer::from_slice(&gpu, &inputs[me])?;
        let recv = DeviceBuffer::filled(&gpu, n * bytes, 0xa5)?;
        let t_coll = time(comm, || pipelined.allgather(&send, &recv, count, DataType::F32, &stream))?;
        wrong("collectives allgather", &recv.to_vec::<u8>()?, &inputs.concat())?;
        report(me, "allgather", bytes, k, &t_exec, t_coll);
        // Allreduce: a `bytes` buffer, one-shot with packets on both sides (up to 1 MiB, the
        // one-shot form's default limit). The collective runs a thread per packet (8 bytes) in
        // blocks of 1024 threads; the plan a block per part and peer plus two reducers per part.
        if bytes <= 1 << 20 {
            let k = parts(bytes, 32 << 10, max_parts);
            let bytes = bytes.div_ceil(16 * n * k) * 16 * n * k;
            let count = bytes / 4;
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, bytes as u64, r)).collect();
            let order: Vec<&[u8]> =
                std::iter::once(me).chain((0..n).filter(|&q| q != me)).map(|q| inputs[q].as_slice()).collect();
            let want = sum_in_order(DataType::F32, &order);
            let mut t_exec = Vec::new();
            for k in [1, k] {
                let plan = examples::allreduce_packets_parts(n, k).map_err(plan_err)?;
                t_exec.push(time_plan(comm, &plan, bytes / (n * k), &inputs[me], &want)?);
            }
            let send = DeviceBuffer::from_slice(&gpu, &inputs[me])?;
            let recv = DeviceBuffer::filled(&gpu, bytes, 0xa5)?;
            let t_coll = time(comm, || one_shot.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, &stream))?;
            let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            wrong("collectives allreduce", &recv.to_vec::<u8>()?, &sum_in_order(DataType::F32, &all))?;
            report(me, "allreduce", bytes, k, &t_exec, t_coll);
        }
        // Two-shot allreduce: a `bytes` buffer. The pipelined collective runs a block per 16 KiB
        // toward each peer (of the `bytes / n` each rank reduces); the plan a block per part.
        let k = parts(bytes / n, 16 << 10, sm_count);
        let bytes = bytes.div_ceil(16 * n * k) * 16 * n * k;
        let count = bytes / 4;
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, bytes as u64, r)).collect();
        // The plan: rank o reduces the o-th n-th of the buffer, its own input first.
        let shard = bytes / n;
        let want: Vec<u8> = (0..n)
            .flat_map(|o| {
                let order: Vec<&[u8]> = std::iter::once(o)
                    .chain((0..n).filter(|&q| q != o))
                    .map(|q| &inputs[q][o * shard..(o + 1) * shard])
                    .collect();
                sum_in_order(DataType::F32, &order)
            })
            .collect();
        let mut t_exec = Vec::new();
        for k in [1, k] {
            let plan = examples::allreduce_two_shot_read_parts(n, k).map_err(plan_err)?;
            t_exec.push(time_plan(comm, &plan, bytes / (n * k), &inputs[me], &want)?);
        }
        let send = DeviceBuffer::from_slice(&gpu, &inputs[me])?;
        let recv = DeviceBuffer::filled(&gpu, bytes, 0xa5)?;
        let t_coll = time(comm, || pipelined.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, &stream))?;
        let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        wrong("collectives two-shot allreduce", &recv.to_vec::<u8>()?, &sum_in_order(DataType::F32, &all))?;
        report(me, "allreduce two-shot", bytes, k, &t_exec, t_coll);
        comm.bootstrap().barrier()?;
    }
    Ok(())
}

/// `exec`: the executor's seconds with one part, then with `parts`.
fn report(me: usize, op: &str, bytes: usize, parts: usize, exec: &[f64], coll: f64) {
    if me == 0 {
        println!(
            "exec_bench: {op:18} {bytes:>10} B/rank: executor {:9.2} us (1 part), {:9.2} us ({parts} parts), \
             collectives {:9.2} us, ratio {:.2} (goal >= 0.9)",
            exec[0] * 1e6,
            exec[1] * 1e6,
            coll * 1e6,
            coll / exec[1]
        );
    }
}
