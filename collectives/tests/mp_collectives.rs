//! Correctness of the collectives among N ranks, one process per rank: every operation, element
//! type and algorithm on fresh random data against a host reference (sums in rank order, bit for
//! bit), counts that are not multiples of 16 bytes and odd counts, in place and out of place,
//! back-to-back operations on different buffers with no host synchronisation, and 1,000 replays
//! of a CUDA graph checked after.
//!
//! ```sh
//! cargo test --release -p mscclpp-collectives --test mp_collectives   # 2 ranks (launcher)
//! target/release/deps/mp_collectives-... --ranks 4
//! mpirun -np 2 target/release/deps/mp_collectives-...
//! ```
//! `MSCCLPP_RS_SEED` repeats a run's data. Without GPUs every rank prints a GPU-SKIP line.

use std::process::ExitCode;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use mscclpp_collectives::reference::{count_wrong, random_input, sum_in_order};
use mscclpp_collectives::{CollectiveAlgorithm as Algorithm, Collectives, Config, DataType, Operation, ReduceOp};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{BootstrapExt, DeviceBuffer, Error, Result};

fn main() -> ExitCode {
    mscclpp_harness::runner::main("mp_collectives", 2, run)
}

/// Element counts: odd, not multiples of 16 bytes, around the algorithms' limits, and large
/// enough for several pipelined rounds.
const COUNTS: [usize; 8] = [1, 3, 1001, 4099, 65_537, 262_147, 1_048_579, 2_500_001];

struct Case {
    op: Operation,
    dtype: DataType,
    count: usize,
    in_place: bool,
}

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

/// Fills the buffers of one case and returns (send, recv, expected result on this rank).
fn prepare(c: &Case, comm: &Communicator, seed: u64) -> Result<(DeviceBuffer, Option<DeviceBuffer>, Vec<u8>)> {
    let (n, me) = (comm.world_size(), comm.rank());
    let gpu = comm.gpu();
    let w = c.dtype.bytes();
    let input_count = match c.op {
        Operation::AllReduce | Operation::AllGather => c.count,
        Operation::ReduceScatter => c.count * n,
    };
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(c.dtype, input_count, seed, r)).collect();
    let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let expected = match c.op {
        Operation::AllReduce => sum_in_order(c.dtype, &refs),
        Operation::AllGather => inputs.concat(),
        Operation::ReduceScatter => {
            let b = c.count * w;
            let shards: Vec<&[u8]> = refs.iter().map(|x| &x[me * b..(me + 1) * b]).collect();
            sum_in_order(c.dtype, &shards)
        }
    };
    let poison = 0xa5u8;
    let mine = &inputs[me];
    Ok(match (c.op, c.in_place) {
        (Operation::AllGather, true) => {
            // My chunk in place, every other byte poisoned.
            let mut all = vec![poison; n * c.count * w];
            all[me * c.count * w..(me + 1) * c.count * w].copy_from_slice(mine);
            (DeviceBuffer::from_slice(gpu, &all)?, None, expected)
        }
        (_, true) => (DeviceBuffer::from_slice(gpu, mine)?, None, expected),
        (op, false) => {
            let out = match op {
                Operation::AllGather => n * c.count * w,
                _ => c.count * w,
            };
            (DeviceBuffer::from_slice(gpu, mine)?, Some(DeviceBuffer::filled(gpu, out, poison)?), expected)
        }
    })
}

fn enqueue(coll: &Collectives, c: &Case, send: &DeviceBuffer, recv: Option<&DeviceBuffer>) -> Result<()> {
    let s = coll.gpu().stream();
    match (c.op, recv) {
        (Operation::AllReduce, r) => coll.allreduce(send, r.unwrap_or(send), c.count, c.dtype, ReduceOp::Sum, s),
        (Operation::AllGather, Some(r)) => coll.allgather(send, r, c.count, c.dtype, s),
        (Operation::AllGather, None) => coll.allgather_in_place(send, c.count, c.dtype, s),
        (Operation::ReduceScatter, Some(r)) => coll.reduce_scatter(send, r, c.count, c.dtype, ReduceOp::Sum, s),
        (Operation::ReduceScatter, None) => coll.reduce_scatter_in_place(send, c.count, c.dtype, ReduceOp::Sum, s),
    }
}

/// The bytes of the result on this rank.
fn result(c: &Case, comm: &Communicator, send: &DeviceBuffer, recv: Option<&DeviceBuffer>) -> Result<Vec<u8>> {
    let b = c.count * c.dtype.bytes();
    Ok(match (c.op, recv) {
        (_, Some(r)) => r.to_vec::<u8>()?,
        (Operation::ReduceScatter, None) => send.to_vec::<u8>()?[comm.rank() * b..(comm.rank() + 1) * b].to_vec(),
        (_, None) => send.to_vec::<u8>()?,
    })
}

fn check(c: &Case, what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    let wrong = count_wrong(c.dtype, got, want);
    if wrong > 0 {
        let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0) / c.dtype.bytes();
        return Err(fail(format!(
            "{what}: {wrong} of {} elements wrong (first at element {first})",
            want.len() / c.dtype.bytes()
        )));
    }
    Ok(())
}

fn run(comm: &Communicator) -> Result<()> {
    let me = comm.rank();
    let own_seed: u64 =
        std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    let seed = comm.bootstrap().all_gather_pod(&own_seed)?[0];
    if me == 0 {
        println!("mp_collectives: {} ranks, seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)", comm.world_size());
    }
    // One communicator per algorithm, forced where it fits, plus the automatic choice and one
    // with few blocks and small slots, so the pipelined forms run many rounds.
    let configs: Vec<(&str, Config)> = vec![
        ("auto", Config::default()),
        ("oneshot", Config { force: Some(Algorithm::OneShotLl), ..Config::default() }),
        ("twoshot", Config { force: Some(Algorithm::TwoShotLl), ..Config::default() }),
        ("pipelined", Config { force: Some(Algorithm::Pipelined), ..Config::default() }),
        (
            "pipelined-2-blocks",
            Config { force: Some(Algorithm::Pipelined), blocks: Some(2), chunk_bytes: Some(4096), ..Config::default() },
        ),
        ("direct", Config { force: Some(Algorithm::Direct), ..Config::default() }),
        (
            "direct-3-blocks",
            Config { force: Some(Algorithm::Direct), blocks: Some(3), chunk_bytes: Some(4096), ..Config::default() },
        ),
    ];
    let colls = configs.iter().map(|(_, cfg)| Collectives::with_config(comm, *cfg)).collect::<Result<Vec<_>>>()?;
    let mut n_cases = 0usize;
    let mut case_seed = seed;
    for (ci, coll) in colls.iter().enumerate() {
        for op in [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter] {
            for dtype in DataType::SUPPORTED {
                for (k, &count) in COUNTS.iter().enumerate() {
                    // Large counts for two element types only, to keep the run short.
                    if count > 300_000 && !matches!(dtype, DataType::F32 | DataType::Bf16) {
                        continue;
                    }
                    // Allgather moves bytes: every type is the same kernel; two suffice.
                    if op == Operation::AllGather && !matches!(dtype, DataType::F32 | DataType::F16) {
                        continue;
                    }
                    let in_place = (k + ci) % 2 == 1;
                    let c = Case { op, dtype, count, in_place };
                    let plan = coll.plan(op, (count * dtype.bytes()) as u64);
                    case_seed = case_seed.wrapping_add(1);
                    let (send, recv, want) = prepare(&c, comm, case_seed)?;
                    enqueue(coll, &c, &send, recv.as_ref())?;
                    coll.gpu().synchronize()?;
                    let got = result(&c, comm, &send, recv.as_ref())?;
                    let what = format!(
                        "{} {} count {count} {} [{} -> {:?}, {} blocks x {}]",
                        op.name(),
                        dtype.name(),
                        if in_place { "in place" } else { "out of place" },
                        configs[ci].0,
                        plan.algorithm.name(),
                        plan.blocks,
                        plan.threads
                    );
                    check(&c, &what, &got, &want)?;
                    n_cases += 1;
                }
            }
        }
    }
    println!("mp_collectives: rank {me}: {n_cases} operation cases ok (every algorithm, type, odd counts, in place)");
    window_form(comm, &colls[1], seed ^ 0x33)?;
    back_to_back(comm, &colls[0], seed ^ 0x55)?;
    graph_replays(comm, &colls[0], seed ^ 0xaa)?;
    refused_arguments(comm, &colls[0])?;
    Ok(())
}

/// The one-shot allreduce written on a window (`WindowAllreduce`) against the one-shot LL
/// allreduce (`oneshot`, forced), bit for bit, and both against the host's sums in rank order:
/// fresh random f32 every launch, poisoned outputs, sizes from one vector to the LL limit of the
/// one-shot form, on windows whose LL form takes its default sizes, none (limit 0), and sizes up
/// to 64 KiB, on the default grid and on 3 blocks (uneven parts), and each window's LL limit
/// from both sides (the last size of the LL form, the first of the put form). A window of 4 MiB
/// with the default limit covers the default edges above 1 MiB, against the host's sums only
/// (beyond the one-shot form's slots). Every size runs 3 launches back to back (both halves of
/// either form, and the flags of consecutive launches) with no host synchronisation between, the
/// sizes going up then down, so the two forms alternate on one window.
fn window_form(comm: &Communicator, oneshot: &Collectives, seed: u64) -> Result<()> {
    use mscclpp_collectives::WindowAllreduce;
    let (n, me, gpu) = (comm.world_size(), comm.rank(), comm.gpu());
    let capacity = oneshot.handle().ll_one_shot_capacity();
    let max_bytes = capacity.min(1 << 20);
    let edge = 64u64 << 10; // the LL limit of the mixed windows
    let (mut cases, mut by_ll, mut by_put, mut forms) = (0, 0, 0, 0);
    // (largest message, blocks, LL limit: None for the default)
    let windows = [
        (max_bytes, None, None),
        (max_bytes, None, Some(edge)),
        (max_bytes, Some(3), Some(edge)),
        (max_bytes, None, Some(0)),
        (4 << 20, None, None),
    ];
    for (w_index, &(max, blocks, limit)) in windows.iter().enumerate() {
        let win = match limit {
            None => WindowAllreduce::new(comm, max, blocks)?,
            Some(l) => WindowAllreduce::with_ll_limit(comm, max, blocks, l)?,
        };
        let ll = win.ll_bytes();
        let mut sizes: Vec<u64> = if max > max_bytes { vec![] } else { vec![16, 4096, 16400, 262_160] };
        if ll > 0 && ll < max {
            sizes.extend([ll - 16, ll, ll + 16]);
        }
        sizes.push(max);
        sizes.sort();
        sizes.dedup();
        let (mut ll_here, mut put_here) = (false, false);
        for (k, &bytes) in sizes.iter().chain(sizes.iter().rev()).enumerate() {
            let count = (bytes / 4) as usize;
            let plan = win.plan(bytes);
            let compare_oneshot = bytes <= capacity;
            let mut launches = vec![];
            for j in 0..3u64 {
                let s = seed.wrapping_add(1000 * w_index as u64 + 10 * k as u64 + j);
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, count, s, r)).collect();
                let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
                let want = sum_in_order(DataType::F32, &refs);
                let send = DeviceBuffer::from_slice(gpu, &inputs[me])?;
                let by_window = DeviceBuffer::filled(gpu, count * 4, 0xa5)?;
                let by_oneshot = DeviceBuffer::filled(gpu, count * 4, 0x5a)?;
                launches.push((send, by_window, by_oneshot, want));
            }
            // Every rank's buffers allocated before any rank launches: where ranks are threads
            // sharing a GPU, an allocation may wait for the kernels running on it, and a rank's
            // window kernel waits for its peers'.
            comm.bootstrap().barrier()?;
            for (send, by_window, by_oneshot, _) in &launches {
                win.allreduce_f32(send, by_window, count, gpu.stream())?;
                if compare_oneshot {
                    oneshot.allreduce(send, by_oneshot, count, DataType::F32, ReduceOp::Sum, gpu.stream())?;
                }
            }
            gpu.synchronize()?;
            for (j, (_, by_window, by_oneshot, want)) in launches.iter().enumerate() {
                let w = by_window.to_vec::<u8>()?;
                let what = format!(
                    "window allreduce of {count} f32 ({} form, LL up to {ll} B, {} blocks x {}), launch {} of 3",
                    if plan.ll { "LL" } else { "put" },
                    plan.blocks,
                    plan.threads,
                    j + 1
                );
                if compare_oneshot {
                    let o = by_oneshot.to_vec::<u8>()?;
                    if let Some(i) = (0..w.len()).find(|&i| w[i] != o[i]) {
                        return Err(fail(format!(
                            "{what}: byte {i} is {:#04x}, the one-shot LL form's {:#04x}",
                            w[i], o[i]
                        )));
                    }
                }
                let wrong = count_wrong(DataType::F32, &w, want);
                if wrong > 0 {
                    return Err(fail(format!("{what}: {wrong} elements differ from the host's sums in rank order")));
                }
                cases += 1;
                if plan.ll {
                    by_ll += 1;
                } else {
                    by_put += 1;
                }
            }
            ll_here |= plan.ll;
            put_here |= !plan.ll;
        }
        if ll_here && put_here {
            forms += 1;
        }
        win.free()?;
    }
    // Both forms ran, and on one window at least (the 64 KiB limit).
    if by_ll == 0 || by_put == 0 || forms == 0 {
        return Err(fail(format!(
            "window allreduce: {by_ll} LL and {by_put} put launches, {forms} windows with both forms"
        )));
    }
    println!(
        "mp_collectives: rank {me}: window allreduce = one-shot LL allreduce (and the host's sums), bit for bit, in \
         {cases} launches ({by_ll} LL form, {by_put} put form; {forms} windows alternating the two)"
    );
    Ok(())
}

/// What a caller can get wrong is an `InvalidArgument` on every rank, before anything is
/// launched: buffers too small for the count (each operation, in place and not), a block size
/// of 0, slots so large that the scratch layout overflows, and ranks with different settings.
/// The operation counter proves that nothing ran.
fn refused_arguments(comm: &Communicator, coll: &Collectives) -> Result<()> {
    let gpu = coll.gpu();
    let stream = gpu.stream();
    let n = comm.world_size();
    let before = coll.epoch()?;
    let refused = |what: &str, r: Result<()>| match r {
        Err(Error::InvalidArgument(m)) => {
            println!("mp_collectives: rank {}: {what}: refused ({m})", comm.rank());
            Ok(())
        }
        other => Err(fail(format!("{what}: expected InvalidArgument, got {other:?}"))),
    };
    let count = 4099;
    let bytes = count * 4;
    let short = DeviceBuffer::filled(gpu, bytes - 4, 0)?;
    let fits = DeviceBuffer::filled(gpu, bytes, 0)?;
    let all = DeviceBuffer::filled(gpu, n * bytes, 0)?;
    let all_short = DeviceBuffer::filled(gpu, n * bytes - 4, 0)?;
    let (f32, sum) = (DataType::F32, ReduceOp::Sum);
    refused("allreduce, short send", coll.allreduce(&short, &fits, count, f32, sum, stream))?;
    refused("allreduce, short receive", coll.allreduce(&fits, &short, count, f32, sum, stream))?;
    refused("allreduce in place, short", coll.allreduce(&short, &short, count, f32, sum, stream))?;
    refused("allgather, short receive", coll.allgather(&fits, &all_short, count, f32, stream))?;
    refused("allgather, short send", coll.allgather(&short, &all, count, f32, stream))?;
    refused("allgather in place, short", coll.allgather_in_place(&all_short, count, f32, stream))?;
    refused("reduce-scatter, short send", coll.reduce_scatter(&all_short, &fits, count, f32, sum, stream))?;
    refused("reduce-scatter, short receive", coll.reduce_scatter(&all, &short, count, f32, sum, stream))?;
    refused("reduce-scatter in place, short", coll.reduce_scatter_in_place(&all_short, count, f32, sum, stream))?;
    refused("allreduce, count overflows", coll.allreduce(&all, &all, usize::MAX / 2, f32, sum, stream))?;
    gpu.synchronize()?;
    if coll.epoch()? != before {
        return Err(fail(format!(
            "a refused call ran: the operation counter moved from {before} to {}",
            coll.epoch()?
        )));
    }
    let built = |c: Config| Collectives::with_config(comm, c).map(drop);
    refused("block_bytes 0", built(Config { block_bytes: 0, ..Config::default() }))?;
    // Refused on rank 0 alone: the others must refuse too, not wait for rank 0.
    let block_bytes = if comm.rank() == 0 { 0 } else { 16 << 10 };
    refused("block_bytes 0 on rank 0", built(Config { block_bytes, ..Config::default() }))?;
    refused("LL slots of 2^62 bytes", built(Config { ll_slot_bytes: 1 << 62, ..Config::default() }))?;
    // Rank 0 alone asks for other blocks: every rank must refuse (none may wait for the others).
    let blocks = if comm.rank() == 0 { Some(2) } else { None };
    refused("settings differing between ranks", built(Config { blocks, ..Config::default() }))?;
    println!("mp_collectives: rank {}: refused arguments ok (nothing launched)", comm.rank());
    Ok(())
}

/// Many operations of every kind and size on different buffers, all prepared first, then
/// enqueued with no host synchronisation between them, checked after one synchronise.
fn back_to_back(comm: &Communicator, coll: &Collectives, seed: u64) -> Result<()> {
    let mut pending = vec![];
    let mut s = seed;
    for round in 0..4 {
        for (i, &count) in [7usize, 5000, 70_001, 600_003].iter().enumerate() {
            for op in [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter] {
                let dtype = [DataType::F32, DataType::Bf16, DataType::I32, DataType::F16][(i + round) % 4];
                let c = Case { op, dtype, count, in_place: (i + round) % 3 == 0 };
                s = s.wrapping_add(1);
                let (send, recv, want) = prepare(&c, comm, s)?;
                pending.push((c, send, recv, want));
            }
        }
    }
    for (c, send, recv, _) in &pending {
        enqueue(coll, c, send, recv.as_ref())?;
    }
    coll.gpu().synchronize()?;
    for (c, send, recv, want) in &pending {
        let got = result(c, comm, send, recv.as_ref())?;
        check(c, &format!("back-to-back {} {} count {}", c.op.name(), c.dtype.name(), c.count), &got, want)?;
    }
    println!("mp_collectives: rank {}: {} back-to-back operations ok (one synchronise)", comm.rank(), pending.len());
    Ok(())
}

/// A CUDA graph of three operations (small and large allreduce, an allgather) replayed 1,000
/// times; the results and the device's operation counter are checked after.
fn graph_replays(comm: &Communicator, coll: &Collectives, seed: u64) -> Result<()> {
    const REPLAYS: u64 = 1000;
    let cases = [
        Case { op: Operation::AllReduce, dtype: DataType::F32, count: 999, in_place: false },
        Case { op: Operation::AllReduce, dtype: DataType::Bf16, count: 3_000_001, in_place: false },
        Case { op: Operation::AllGather, dtype: DataType::F32, count: 100_003, in_place: false },
    ];
    let mut bufs = vec![];
    for (i, c) in cases.iter().enumerate() {
        bufs.push(prepare(c, comm, seed.wrapping_add(i as u64))?);
    }
    let stream = coll.gpu().stream();
    let before = coll.epoch()?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| Error::Driver { context: "beginning a graph capture".into(), source: e })?;
    let captured = cases.iter().zip(&bufs).try_for_each(|(c, (send, recv, _))| enqueue(coll, c, send, recv.as_ref()));
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .map_err(|e| Error::Driver { context: "ending a graph capture".into(), source: e })?;
    captured?;
    let graph = graph.ok_or_else(|| fail("the capture produced no graph".into()))?;
    for _ in 0..REPLAYS {
        graph.launch().map_err(|e| Error::Driver { context: "launching a graph".into(), source: e })?;
    }
    coll.gpu().synchronize()?;
    for (c, (send, recv, want)) in cases.iter().zip(&bufs) {
        let got = result(c, comm, send, recv.as_ref())?;
        check(c, &format!("graph replay {} {} count {}", c.op.name(), c.dtype.name(), c.count), &got, want)?;
    }
    let after = coll.epoch()?;
    if after - before != REPLAYS * cases.len() as u64 {
        return Err(fail(format!(
            "the device's operation counter advanced by {} over {REPLAYS} replays of {} operations",
            after - before,
            cases.len()
        )));
    }
    println!("mp_collectives: rank {}: {REPLAYS} graph replays of {} operations ok", comm.rank(), cases.len());
    Ok(())
}
