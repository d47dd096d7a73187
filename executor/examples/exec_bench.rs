//! `exec_bench`: the plan executor against the hand-written collectives for the same operation,
//! on the same ranks in the same run: allgather (the `allgather_memory` plan against
//! `Collectives::allgather`) and allreduce (the `allreduce_packets` plan against the one-shot
//! LL allreduce). Time per operation: median over trials of back-to-back launches timed on the
//! host around a synchronise; the results are checked after the timed launches.
//!
//! ```sh
//! exec_bench --ranks 2                          # built-in launcher (or under mpirun -np N)
//! MSCCLPP_RS_BENCH_SIZES=65536,1048576 ...      # bytes per rank (default 4 KiB .. 4 MiB, x4)
//! ```
//! Rank 0 prints one line per (operation, size): both times and the ratio (collective's time /
//! executor's; the goal is at least 0.9).

use std::process::ExitCode;
use std::time::Instant;

use mscclpp_collectives::reference::{count_wrong, random_input, sum_in_order};
use mscclpp_collectives::{CollectiveAlgorithm, Collectives, Config as CollConfig, DataType, ReduceOp};
use mscclpp_executor::{Config, ElementType, Executor};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};
use mscclpp_plan::examples;

const ITERS: usize = 50;
const TRIALS: usize = 5;

fn main() -> ExitCode {
    mscclpp_collectives::runner::main("exec_bench", 2, run)
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

fn wrong(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    match count_wrong(DataType::F32, got, want) {
        0 => Ok(()),
        w => Err(Error::InvalidArgument(format!("{what}: {w} elements wrong after the timed runs"))),
    }
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let sizes: Vec<usize> = match std::env::var("MSCCLPP_RS_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|v| v.trim().parse().ok()).collect(),
        Err(_) => (0..6).map(|k| 4096 << (2 * k)).collect(),
    };
    let plan_err = |e: mscclpp_plan::PlanError| Error::InvalidArgument(e.to_string());
    let gather_plan = examples::allgather_memory(n).map_err(plan_err)?;
    let reduce_plan = examples::allreduce_packets(n).map_err(plan_err)?;
    let coll = Collectives::with_config(comm, CollConfig::default())?;
    let one_shot = Collectives::with_config(
        comm,
        CollConfig { force: Some(CollectiveAlgorithm::OneShotLl), ..CollConfig::default() },
    )?;
    let gpu = comm.gpu().clone();
    let stream = gpu.stream().clone();
    for &bytes in &sizes {
        let bytes = bytes.div_ceil(16 * n) * 16 * n;
        let count = bytes / 4;
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, bytes as u64, r)).collect();
        // Allgather: `bytes` per rank.
        let exec = Executor::new(comm, &gather_plan, Config::new(bytes, ElementType::F32))?;
        exec.arena().write(exec.input().0, &inputs[me])?;
        comm.bootstrap().barrier()?;
        let t_exec = time(comm, || exec.launch(&stream))?;
        let (o, l) = exec.output();
        wrong("executor allgather", &exec.arena().to_vec::<u8>()?[o..o + l], &inputs.concat())?;
        let send = DeviceBuffer::from_slice(&gpu, &inputs[me])?;
        let recv = DeviceBuffer::filled(&gpu, n * bytes, 0xa5)?;
        let t_coll = time(comm, || coll.allgather(&send, &recv, count, DataType::F32, &stream))?;
        wrong("collectives allgather", &recv.to_vec::<u8>()?, &inputs.concat())?;
        report(me, "allgather", bytes, t_exec, t_coll);
        drop(exec);
        // Allreduce: a `bytes` buffer, one-shot with packets on both sides (up to 1 MiB, the
        // one-shot form's default limit).
        if bytes <= 1 << 20 {
            let exec = Executor::new(comm, &reduce_plan, Config::new(bytes / n, ElementType::F32))?;
            exec.arena().write(exec.input().0, &inputs[me])?;
            comm.bootstrap().barrier()?;
            let t_exec = time(comm, || exec.launch(&stream))?;
            let order: Vec<&[u8]> =
                std::iter::once(me).chain((0..n).filter(|&q| q != me)).map(|q| inputs[q].as_slice()).collect();
            let (o, l) = exec.output();
            wrong("executor allreduce", &exec.arena().to_vec::<u8>()?[o..o + l], &sum_in_order(DataType::F32, &order))?;
            let recv = DeviceBuffer::filled(&gpu, bytes, 0xa5)?;
            let t_coll = time(comm, || one_shot.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, &stream))?;
            let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            wrong("collectives allreduce", &recv.to_vec::<u8>()?, &sum_in_order(DataType::F32, &all))?;
            report(me, "allreduce", bytes, t_exec, t_coll);
        }
        comm.bootstrap().barrier()?;
    }
    Ok(())
}

fn report(me: usize, op: &str, bytes: usize, exec: f64, coll: f64) {
    if me == 0 {
        println!(
            "exec_bench: {op:9} {bytes:>10} B/rank: executor {:9.2} us, collectives {:9.2} us, ratio {:.2} (goal >= 0.9)",
            exec * 1e6,
            coll * 1e6,
            coll / exec
        );
    }
}
