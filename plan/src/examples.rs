//! Example plans written with the builder. Each is accepted by [`crate::check()`] for any
//! number of ranks from 2 up (the tests check 2, 4 and 8); fewer is
//! [`PlanError::TooFewRanks`].
//!
//! Chunk `i` of a buffer is the `i`-th of `n` equal parts of the message; thread blocks are
//! numbered per rank.

use crate::builder::{PlanError, ThreadBlockGroup};
use crate::plan::*;

fn peers(n: usize, r: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).filter(move |&p| p != r).enumerate()
}

/// Every example needs at least two ranks.
fn at_least_two(op: &'static str, n: usize) -> Result<(), PlanError> {
    if n < 2 {
        return Err(PlanError::TooFewRanks { op, num_ranks: n, min: 2 });
    }
    Ok(())
}

/// One-shot allreduce with packets: every rank writes its whole input as packets into slot
/// `r` of every peer's scratch (one thread block per peer), then a group of two thread blocks
/// reduces its input with the `n - 1` packet slots into the output. Packets carry their own
/// flags, so no signal or wait is needed.
pub fn allreduce_packets(n: usize) -> Result<Program, PlanError> {
    at_least_two("allreduce_packets", n)?;
    let mut p = Program::new("allreduce_packets", "allreduce", n, n, n, n * n);
    let reducers = ThreadBlockGroup::new(vec![n - 1, n])?;
    for r in 0..n {
        for (j, q) in peers(n, r) {
            let ch = p.memory_channel(q, r)?;
            ch.put_packets(&mut p, Chunk::scratch(q, r * n, n), Chunk::input(r, 0, n), j)?;
        }
        let others = peers(n, r).map(|(_, q)| Chunk::scratch(r, q * n, n)).collect();
        let rank = p.rank(r)?;
        rank.reduce(
            &mut p,
            Chunk::input(r, 0, n),
            others,
            &reducers,
            Some(Chunk::output(r, 0, n)),
            ReduceOp::Sum,
            true,
        )?;
    }
    Ok(p)
}

/// Two-shot allreduce over memory channels.
///
/// Reduce-scatter: rank `r` puts its chunk `q` into slot `r` of rank `q`'s scratch and signals
/// (thread block `1 + j` for the `j`-th peer); thread block 0 waits for every peer, reduces its
/// own chunk `r` with the scratch slots into output chunk `r`. Allgather: thread block 0 puts
/// output chunk `r` into every peer's output and signals on a second set of channels, then
/// waits for the peers' chunks.
pub fn allreduce_two_shot(n: usize) -> Result<Program, PlanError> {
    at_least_two("allreduce_two_shot", n)?;
    let mut p = Program::new("allreduce_two_shot", "allreduce", n, n, n, n);
    // All first-phase channels are declared before the second-phase ones, so that the k-th
    // channel from r to q pairs with the k-th from q to r in both phases.
    let mut first = Vec::new();
    let mut second = Vec::new();
    for set in [&mut first, &mut second] {
        for r in 0..n {
            set.push(peers(n, r).map(|(_, q)| p.memory_channel(q, r)).collect::<Result<Vec<_>, _>>()?);
        }
    }
    for r in 0..n {
        for (j, q) in peers(n, r) {
            let ch = first[r][j];
            ch.put(&mut p, Chunk::scratch(q, r, 1), Chunk::input(r, q, 1), 1 + j)?;
            ch.signal(&mut p, 1 + j, SyncType::Both, false)?;
        }
        for ch in &first[r] {
            ch.wait(&mut p, 0, SyncType::Both, false)?;
        }
        let others = peers(n, r).map(|(_, q)| Chunk::scratch(r, q, 1)).collect();
        let rank = p.rank(r)?;
        rank.reduce(&mut p, Chunk::input(r, r, 1), others, 0, Some(Chunk::output(r, r, 1)), ReduceOp::Sum, false)?;
        for (j, q) in peers(n, r) {
            let ch = second[r][j];
            ch.put(&mut p, Chunk::output(q, r, 1), Chunk::output(r, r, 1), 0)?;
            ch.signal(&mut p, 0, SyncType::Both, false)?;
        }
        for ch in &second[r] {
            ch.wait(&mut p, 0, SyncType::Both, false)?;
        }
    }
    Ok(p)
}

/// Allgather over memory channels: thread block 0 copies the input into output chunk `r`;
/// thread block `1 + j` puts the input into chunk `r` of the `j`-th peer's output, signals,
/// and waits for that peer's chunk.
pub fn allgather_memory(n: usize) -> Result<Program, PlanError> {
    at_least_two("allgather_memory", n)?;
    let mut p = Program::new("allgather_memory", "allgather", n, 1, n, 0);
    for r in 0..n {
        let rank = p.rank(r)?;
        rank.copy(&mut p, Chunk::output(r, r, 1), Chunk::input(r, 0, 1), 0)?;
        for (j, q) in peers(n, r) {
            let ch = p.memory_channel(q, r)?;
            ch.put(&mut p, Chunk::output(q, r, 1), Chunk::input(r, 0, 1), 1 + j)?;
            ch.signal(&mut p, 1 + j, SyncType::Both, false)?;
            ch.wait(&mut p, 1 + j, SyncType::Both, false)?;
        }
    }
    Ok(p)
}

/// Allgather over port channels: like [`allgather_memory`], with `put_with_signal`, a wait for
/// the peer's chunk and a flush so that the input may be reused afterwards.
pub fn allgather_port(n: usize) -> Result<Program, PlanError> {
    at_least_two("allgather_port", n)?;
    let mut p = Program::new("allgather_port", "allgather", n, 1, n, 0);
    for r in 0..n {
        let rank = p.rank(r)?;
        rank.copy(&mut p, Chunk::output(r, r, 1), Chunk::input(r, 0, 1), 0)?;
        for (j, q) in peers(n, r) {
            let ch = p.port_channel(q, r)?;
            ch.put_with_signal(&mut p, Chunk::output(q, r, 1), Chunk::input(r, 0, 1), 1 + j)?;
            ch.wait(&mut p, 1 + j, SyncType::Both)?;
            ch.flush(&mut p, 1 + j, SyncType::Both)?;
        }
    }
    Ok(p)
}
