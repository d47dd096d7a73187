//! The plan executor among N ranks, one process per rank: the example plans of
//! `mscclpp_plan::examples` (packet one-shot allreduce; two-shot allreduce over memory channels
//! through scratch, and by channel reductions over the peers' inputs; allreduce over the
//! emulated switch channels; allgather over memory and over port channels; and the packet
//! allreduce, the channel-reduction two-shot, the switch allreduce and the memory allgather cut
//! into three parts) on fresh random inputs with poisoned outputs, checked bit for bit against a
//! host reference that sums in the plan's order; several launches per plan (the packet flags and
//! semaphores carry over), launches back to back with no host synchronisation, and one launch
//! captured in a CUDA graph and replayed 200 times. Plans that differ between ranks (their
//! layouts, or the buffer a switch channel is bound to) are refused on every rank.
//!
//! Then every plan MSCCL++'s DSL generated (`plan/tests/mscclpp/`) that reads and checks clean
//! and has as many ranks as the run, on fresh random `i32` data against the host run of the plan
//! ([`mscclpp_plan::interpret`]), itself equal to what its collective means.
//!
//! ```sh
//! cargo test --release -p mscclpp-executor --test mp_exec      # 2 ranks (launcher)
//! target/release/deps/mp_exec-... --ranks 4
//! ```
//! `MSCCLPP_RS_SEED` repeats a run's data; `MSCCLPP_RS_MP_EXEC=mscclpp` runs only MSCCL++'s
//! plans. Without GPUs every rank prints a GPU-SKIP line.

use std::process::ExitCode;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use mscclpp_collectives::DataType;
use mscclpp_collectives::reference::{count_wrong, random_input, sum_in_order};
use mscclpp_executor::{Config, ElementType, Executor};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{BootstrapExt, Error, Result};
use mscclpp_plan::{BufferType, Channel, Program, RankPlan, examples, interpret, mscclpp_json};

fn main() -> ExitCode {
    mscclpp_harness::runner::main("mp_exec", 2, run)
}

const POISON: u8 = 0xa5;

/// The expected output of `program` on rank `me`, from every rank's input.
fn expected(program: &Program, dtype: DataType, inputs: &[Vec<u8>], me: usize, chunk: usize) -> Vec<u8> {
    let n = inputs.len();
    // Own operand first, then the peers in rank order (the plans' reduction order).
    let order = |r: usize| std::iter::once(r).chain((0..n).filter(move |&q| q != r));
    match program.name.as_str() {
        "allreduce_packets" | "allreduce_packets_parts" => {
            let ops: Vec<&[u8]> = order(me).map(|q| inputs[q].as_slice()).collect();
            sum_in_order(dtype, &ops)
        }
        // Chunk c is reduced by its owner, rank c / parts: its own input first.
        "allreduce_two_shot" | "allreduce_two_shot_read" | "allreduce_two_shot_read_parts" => {
            let parts = program.ranks[me].output_chunks / n;
            (0..n * parts)
                .flat_map(|c| {
                    let ops: Vec<&[u8]> = order(c / parts).map(|q| &inputs[q][c * chunk..(c + 1) * chunk]).collect();
                    sum_in_order(dtype, &ops)
                })
                .collect()
        }
        // The emulated switch channel adds every rank's copy in rank order.
        "allreduce_switch" | "allreduce_switch_parts" => {
            let ops: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            sum_in_order(dtype, &ops)
        }
        "allgather_memory" | "allgather_memory_parts" | "allgather_port" => inputs.concat(),
        other => panic!("no reference for {other}"),
    }
}

fn run(comm: &Communicator) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let own_seed: u64 =
        std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    let seed = comm.bootstrap().all_gather_pod(&own_seed)?[0];
    if me == 0 {
        println!("mp_exec: {n} ranks, seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)");
    }
    // MSCCLPP_RS_MP_EXEC=mscclpp: only MSCCL++'s generated plans (every rank reads the same
    // environment from the launcher).
    if std::env::var("MSCCLPP_RS_MP_EXEC").as_deref() == Ok("mscclpp") {
        return mscclpp_plans(comm, seed);
    }
    let plan_err = |e: mscclpp_plan::PlanError| Error::InvalidArgument(format!("building the plan: {e}"));
    let programs = [
        examples::allreduce_packets(n).map_err(plan_err)?,
        examples::allreduce_two_shot(n).map_err(plan_err)?,
        examples::allgather_memory(n).map_err(plan_err)?,
        examples::allgather_port(n).map_err(plan_err)?,
        examples::allreduce_packets_parts(n, 3).map_err(plan_err)?,
        examples::allgather_memory_parts(n, 3).map_err(plan_err)?,
        examples::allreduce_two_shot_read(n).map_err(plan_err)?,
        examples::allreduce_two_shot_read_parts(n, 3).map_err(plan_err)?,
        examples::allreduce_switch(n).map_err(plan_err)?,
        examples::allreduce_switch_parts(n, 3).map_err(plan_err)?,
    ];
    let mut case_seed = seed;
    let mut cases = 0;
    for program in &programs {
        for (dtype, element) in [(DataType::F32, ElementType::F32), (DataType::Bf16, ElementType::Bf16)] {
            if program.collective == "allgather" && dtype != DataType::F32 {
                continue; // bytes are bytes
            }
            for chunk in [16usize, 4096, 48 << 10] {
                let exec = Executor::new(comm, program, Config::new(chunk, element))?;
                let (in_off, in_len) = exec.input();
                let (out_off, out_len) = exec.output();
                let count = in_len / dtype.bytes();
                // Fresh data every launch, checked after each; then three launches back to back
                // on one input, with no host synchronisation between them.
                for round in 0..4 {
                    case_seed = case_seed.wrapping_add(1);
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(dtype, count, case_seed, r)).collect();
                    let want = expected(program, dtype, &inputs, me, chunk);
                    assert_eq!(want.len(), out_len, "reference size");
                    exec.arena().write(in_off, &inputs[me])?;
                    exec.arena().write(out_off, &vec![POISON; out_len])?;
                    // No rank launches before every rank has written its input and poison.
                    comm.bootstrap().barrier()?;
                    let launches = if round < 3 { 1 } else { 3 };
                    for _ in 0..launches {
                        exec.launch(comm.gpu().stream())?;
                    }
                    comm.gpu().synchronize()?;
                    let got = exec.arena().to_vec::<u8>()?[out_off..out_off + out_len].to_vec();
                    check(program, dtype, chunk, round, &got, &want)?;
                    // No rank overwrites its input before every rank has finished.
                    comm.bootstrap().barrier()?;
                }
                let epoch = exec.epoch()?;
                if epoch != 7 {
                    return Err(Error::InvalidArgument(format!(
                        "{}: block 0's launch counter is {epoch} after 6 launches (want 7)",
                        program.name
                    )));
                }
                cases += 1;
            }
        }
    }
    println!("mp_exec: rank {me}: {cases} plan cases ok ({} plans, f32 and bf16, 3 chunk sizes)", programs.len());
    for program in &programs {
        graph_replays(comm, program, case_seed ^ 0x5a)?;
    }
    println!("mp_exec: rank {me}: {REPLAYS} graph replays of every plan ok");
    refused_plans(comm, &programs[2])?;
    let switch = programs.iter().find(|p| p.name == "allreduce_switch").expect("the switch allreduce is a case");
    refused_switch_binding(comm, switch)?;
    mscclpp_plans(comm, case_seed ^ 0xa5)?;
    Ok(())
}

/// MSCCL++'s generated plans (`plan/tests/mscclpp/`, embedded by the build script).
const MSCCLPP_PLANS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/mscclpp_plans.rs"));

/// Every MSCCL++ plan that reads and checks clean and has as many ranks as this run (a plan of
/// one rank also runs in a run of two, the other rank idle) on fresh random `i32` data, chunks of
/// 16 bytes, 4 KiB and 64 KiB, two launches each, compared bit for bit with
/// [`interpret::run`] (sums wrap, so the order of a sum does not matter), which for an
/// allreduce, allgather or alltoall must itself equal what the collective means
/// ([`interpret::collective`]). Output words the plan leaves undefined (from scratch nobody
/// wrote) are not compared.
fn mscclpp_plans(comm: &Communicator, seed: u64) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let mut case_seed = seed;
    let mut ran = Vec::new();
    for (name, text) in MSCCLPP_PLANS {
        let Ok(mut program) = mscclpp_json::read(text) else { continue };
        if mscclpp_plan::check(&program).is_err() {
            continue;
        }
        let m = program.ranks.len();
        if m != n && !(m == 1 && n == 2) {
            continue;
        }
        // Idle ranks: buffers like rank 0's, no thread blocks.
        while program.ranks.len() < n {
            let r0 = &program.ranks[0];
            let idle = RankPlan { threadblocks: Vec::new(), ..r0.clone() };
            program.ranks.push(idle);
        }
        for chunk in [16usize, 4096, 64 << 10] {
            let exec = Executor::new(comm, &program, Config::new(chunk, ElementType::I32))?;
            let (in_off, in_len) = exec.input();
            let (out_off, out_len) = exec.output();
            let words = chunk / 4;
            for launch in 0..2 {
                case_seed = case_seed.wrapping_add(1);
                let inputs: Vec<Vec<u32>> = (0..n)
                    .map(|r| {
                        let bytes = random_input(DataType::I32, program.ranks[r].input_chunks * words, case_seed, r);
                        bytes.as_chunks::<4>().0.iter().map(|w| u32::from_le_bytes(*w)).collect()
                    })
                    .collect();
                let poison = u32::from_le_bytes([POISON; 4]);
                let host = interpret::run(&program, &inputs, words, poison)
                    .map_err(|e| Error::InvalidArgument(format!("{name}: the host run: {e}")))?;
                let want = &host[me];
                if let Some(meant) = interpret::collective(&program.collective, &inputs, me)
                    && meant != want.output
                {
                    return Err(Error::InvalidArgument(format!(
                        "{name}: the host run does not compute the {}",
                        program.collective
                    )));
                }
                if want.output.len() * 4 != out_len || inputs[me].len() * 4 != in_len {
                    return Err(Error::InvalidArgument(format!("{name}: buffer sizes differ from the host run")));
                }
                // Poison first: an in-place input lies inside the output.
                exec.arena().write(out_off, &vec![POISON; out_len])?;
                let input: Vec<u8> = inputs[me].iter().flat_map(|w| w.to_le_bytes()).collect();
                exec.arena().write(in_off, &input)?;
                comm.bootstrap().barrier()?;
                exec.launch(comm.gpu().stream())?;
                comm.gpu().synchronize()?;
                let got = exec.arena().to_vec::<u8>()?[out_off..out_off + out_len].to_vec();
                let got: Vec<u32> = got.as_chunks::<4>().0.iter().map(|w| u32::from_le_bytes(*w)).collect();
                let wrong: Vec<usize> =
                    (0..want.output.len()).filter(|&i| want.defined[1][i] && got[i] != want.output[i]).collect();
                if let Some(&first) = wrong.first() {
                    return Err(Error::InvalidArgument(format!(
                        "{name} i32 chunk {chunk} launch {launch}: rank {me}: {} of {} words wrong (first at word {first})",
                        wrong.len(),
                        want.output.len()
                    )));
                }
                comm.bootstrap().barrier()?;
            }
        }
        ran.push(*name);
    }
    if ran.is_empty() {
        return Err(Error::InvalidArgument(format!("no MSCCL++ plan of {n} ranks ran")));
    }
    println!("mp_exec: rank {me}: {} MSCCL++ plans ok at {n} ranks: {}", ran.len(), ran.join(", "));
    Ok(())
}

/// Rank 0 alone binds the first switch channel of the switch allreduce to the output buffer: its
/// reduction would read the other ranks' outputs where theirs read inputs. Every rank refuses it
/// before any channel is built, and the plan as everyone has it still runs.
fn refused_switch_binding(comm: &Communicator, program: &Program) -> Result<()> {
    let me = comm.rank();
    let mut mine = program.clone();
    if me == 0 {
        match mine.channels.first_mut() {
            Some(Channel::Switch { buffer, .. }) => *buffer = BufferType::Output,
            _ => return Err(Error::InvalidArgument(format!("{}: channel 0 is not a switch channel", program.name))),
        }
    }
    match Executor::new(comm, &mine, Config::new(4096, ElementType::F32)) {
        Err(Error::InvalidArgument(m)) if m.contains("binds switch channel 0") && m.contains("different plans") => {
            println!("mp_exec: rank {me}: switch channels bound differently: refused ({m})");
        }
        Err(e) => {
            return Err(Error::InvalidArgument(format!("switch channels bound differently: unexpected error {e}")));
        }
        Ok(_) => return Err(Error::InvalidArgument("switch channels bound differently: accepted".into())),
    }
    Executor::new(comm, program, Config::new(4096, ElementType::F32))?;
    Ok(())
}

/// Ranks that would lay out their arenas differently are refused on every rank before any
/// channel is built: rank 0 alone runs the plan with a larger output buffer, so its peers would
/// write into its arena at offsets of their own plan (and it into theirs); then every rank asks
/// for chunks whose layout overflows 64 bits.
fn refused_plans(comm: &Communicator, program: &Program) -> Result<()> {
    let me = comm.rank();
    let mut mine = program.clone();
    if me == 0 {
        mine.ranks[0].output_chunks += 2;
    }
    let refused = |what: &str, r: Result<Executor>, needle: &str| match r {
        Err(Error::InvalidArgument(m)) if m.contains(needle) => {
            println!("mp_exec: rank {me}: {what}: refused ({m})");
            Ok(())
        }
        Err(e) => Err(Error::InvalidArgument(format!("{what}: unexpected error {e}"))),
        Ok(_) => Err(Error::InvalidArgument(format!("{what}: accepted"))),
    };
    refused(
        "plans differing between ranks",
        Executor::new(comm, &mine, Config::new(4096, ElementType::F32)),
        "different plans",
    )?;
    // (n output chunks of 2^63 - 16 bytes: the output alone overflows.)
    let huge = Config::new((1 << 63) - 16, ElementType::F32);
    refused("chunks of 2^63 - 16 bytes", Executor::new(comm, program, huge), "64 bits")?;
    // The communicator still works: the plan as everyone has it runs.
    Executor::new(comm, program, Config::new(4096, ElementType::F32))?;
    Ok(())
}

const REPLAYS: u32 = 200;

/// One launch captured in a CUDA graph and replayed: the result and the launch counter after.
fn graph_replays(comm: &Communicator, program: &Program, seed: u64) -> Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    let chunk = 4096;
    let exec = Executor::new(comm, program, Config::new(chunk, ElementType::F32))?;
    let (in_off, in_len) = exec.input();
    let (out_off, out_len) = exec.output();
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| random_input(DataType::F32, in_len / 4, seed, r)).collect();
    let want = expected(program, DataType::F32, &inputs, me, chunk);
    exec.arena().write(in_off, &inputs[me])?;
    exec.arena().write(out_off, &vec![POISON; out_len])?;
    comm.bootstrap().barrier()?;
    let drv = |what: &str| {
        let what = what.to_string();
        move |e| Error::Driver { context: what, source: e }
    };
    let stream = comm.gpu().stream();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(drv("beginning a capture"))?;
    let captured = exec.launch(stream);
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(drv("ending a capture"))?;
    captured?;
    let graph = graph.ok_or_else(|| Error::InvalidArgument("the capture produced no graph".into()))?;
    for _ in 0..REPLAYS {
        graph.launch().map_err(drv("launching a graph"))?;
    }
    comm.gpu().synchronize()?;
    let got = exec.arena().to_vec::<u8>()?[out_off..out_off + out_len].to_vec();
    check(program, DataType::F32, chunk, REPLAYS as usize, &got, &want)?;
    let epoch = exec.epoch()?;
    if epoch != 1 + REPLAYS {
        return Err(Error::InvalidArgument(format!(
            "{}: block 0's launch counter is {epoch} after {REPLAYS} graph replays (want {})",
            program.name,
            1 + REPLAYS
        )));
    }
    comm.bootstrap().barrier()?;
    Ok(())
}

fn check(program: &Program, dtype: DataType, chunk: usize, round: usize, got: &[u8], want: &[u8]) -> Result<()> {
    let wrong = count_wrong(dtype, got, want);
    if wrong > 0 {
        let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0) / dtype.bytes();
        return Err(Error::InvalidArgument(format!(
            "{} {} chunk {chunk} launch {round}: {wrong} of {} elements wrong (first at element {first})",
            program.name,
            dtype.name(),
            want.len() / dtype.bytes()
        )));
    }
    Ok(())
}
