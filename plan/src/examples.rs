//! Example plans written with the builder. Each is accepted by [`crate::check()`] for any
//! number of ranks from 2 up (and any number of parts for the `_parts` forms); the tests check
//! 2, 4 and 8 ranks.
//!
//! Chunk `i` of a buffer is the `i`-th of `n` equal parts of the message; thread blocks are
//! numbered per rank.

use crate::builder::{MAX_RANKS, PlanError, ThreadBlockGroup};
use crate::plan::*;

/// `n` if it is a rank count the examples support (2 to [`MAX_RANKS`]).
fn ranks(op: &'static str, n: usize) -> Result<usize, PlanError> {
    if !(2..=MAX_RANKS).contains(&n) {
        return Err(PlanError::OutOfLimits { op, what: "rank count", value: n, allowed: format!("2 to {MAX_RANKS}") });
    }
    Ok(n)
}

/// `a * b`, or [`PlanError::OutOfLimits`] naming `what` when it overflows.
fn product(op: &'static str, what: &'static str, a: usize, b: usize) -> Result<usize, PlanError> {
    a.checked_mul(b).ok_or_else(|| PlanError::OutOfLimits {
        op,
        what,
        value: b,
        allowed: format!("a product with {a} below 2^64"),
    })
}

fn peers(n: usize, r: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).filter(move |&p| p != r).enumerate()
}

/// One-shot allreduce with packets: every rank writes its whole input as packets into slot
/// `r` of every peer's scratch (one thread block per peer), then a group of two thread blocks
/// reduces its input with the `n - 1` packet slots into the output. Packets carry their own
/// flags, so no signal or wait is needed. The message is `n` chunks.
pub fn allreduce_packets(n: usize) -> Result<Program, PlanError> {
    allreduce_packets_parts(n, 1)
}

/// [`allreduce_packets`] spread over more thread blocks: the input is cut into `parts` parts of
/// `n` chunks each (the message is `n * parts` chunks); thread block `j * parts + s` writes part
/// `s` to the `j`-th peer, and a group of `2 * parts` thread blocks after those reduces.
pub fn allreduce_packets_parts(n: usize, parts: usize) -> Result<Program, PlanError> {
    let op = "allreduce_packets_parts";
    let n = ranks(op, n)?;
    let parts = at_least_one(op, parts)?;
    let m = product(op, "parts", n, parts)?;
    let scratch = product(op, "parts", n, m)?;
    // Thread blocks `0 .. (n + 1) * parts`, all below the limit (checked before the group's
    // list is built).
    let first = product(op, "parts", n - 1, parts)?;
    let last = product(op, "parts", n + 1, parts)?;
    crate::builder::check_threadblock(op, last - 1)?;
    let name = if parts == 1 { "allreduce_packets" } else { "allreduce_packets_parts" };
    let mut p = Program::new(name, "allreduce", n, m, m, scratch);
    let reducers = ThreadBlockGroup::new((first..last).collect())?;
    for r in 0..n {
        for (j, q) in peers(n, r) {
            let ch = p.memory_channel(q, r)?;
            for s in 0..parts {
                let part = s * n;
                ch.put_packets(&mut p, Chunk::scratch(q, r * m + part, n), Chunk::input(r, part, n), j * parts + s)?;
            }
        }
        let others = peers(n, r).map(|(_, q)| Chunk::scratch(r, q * m, m)).collect();
        let rank = p.rank(r)?;
        rank.reduce(
            &mut p,
            Chunk::input(r, 0, m),
            others,
            &reducers,
            Some(Chunk::output(r, 0, m)),
            ReduceOp::Sum,
            true,
        )?;
    }
    Ok(p)
}

fn at_least_one(op: &'static str, parts: usize) -> Result<usize, PlanError> {
    if parts == 0 {
        return Err(PlanError::Empty { op, what: "parts" });
    }
    Ok(parts)
}

/// Two-shot allreduce over memory channels.
///
/// Reduce-scatter: rank `r` puts its chunk `q` into slot `r` of rank `q`'s scratch and signals
/// (thread block `1 + j` for the `j`-th peer); thread block 0 waits for every peer, reduces its
/// own chunk `r` with the scratch slots into output chunk `r`. Allgather: thread block 0 puts
/// output chunk `r` into every peer's output and signals on a second set of channels, then
/// waits for the peers' chunks.
pub fn allreduce_two_shot(n: usize) -> Result<Program, PlanError> {
    let n = ranks("allreduce_two_shot", n)?;
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
    allgather_memory_parts(n, 1)
}

/// [`allgather_memory`] spread over more thread blocks: the input is cut into `parts` chunks;
/// thread block `s` copies chunk `s` into place, and thread block `parts * (1 + j) + s` puts it
/// into the `j`-th peer's output over a channel of its own, signals and waits for the peer's
/// chunk `s`.
pub fn allgather_memory_parts(n: usize, parts: usize) -> Result<Program, PlanError> {
    let op = "allgather_memory_parts";
    let n = ranks(op, n)?;
    let parts = at_least_one(op, parts)?;
    let outputs = product(op, "parts", n, parts)?;
    let name = if parts == 1 { "allgather_memory" } else { "allgather_memory_parts" };
    let mut p = Program::new(name, "allgather", n, parts, outputs, 0);
    for r in 0..n {
        let rank = p.rank(r)?;
        for s in 0..parts {
            rank.copy(&mut p, Chunk::output(r, r * parts + s, 1), Chunk::input(r, s, 1), s)?;
        }
        for (j, q) in peers(n, r) {
            for s in 0..parts {
                // The s-th channel from r to q pairs with the s-th from q to r.
                let ch = p.memory_channel(q, r)?;
                let tb = parts * (1 + j) + s;
                ch.put(&mut p, Chunk::output(q, r * parts + s, 1), Chunk::input(r, s, 1), tb)?;
                ch.signal(&mut p, tb, SyncType::Both, false)?;
                ch.wait(&mut p, tb, SyncType::Both, false)?;
            }
        }
    }
    Ok(p)
}

/// Allgather over port channels: like [`allgather_memory`], with `put_with_signal`, a wait for
/// the peer's chunk and a flush so that the input may be reused afterwards.
pub fn allgather_port(n: usize) -> Result<Program, PlanError> {
    let n = ranks("allgather_port", n)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_forms_pass_the_checker_and_use_their_blocks() {
        for n in [2, 3, 4, 8] {
            for parts in [1, 2, 5, 16] {
                let g = allgather_memory_parts(n, parts).unwrap();
                let r = crate::check(&g).unwrap_or_else(|e| panic!("allgather {n} x {parts}: {e:?}"));
                assert_eq!(r.threadblocks, n * n * parts, "allgather {n} x {parts}: blocks over all ranks");
                let a = allreduce_packets_parts(n, parts).unwrap();
                let r = crate::check(&a).unwrap_or_else(|e| panic!("allreduce {n} x {parts}: {e:?}"));
                assert_eq!(r.threadblocks, n * (n + 1) * parts, "allreduce {n} x {parts}: blocks over all ranks");
            }
        }
        assert_eq!(allgather_memory_parts(4, 1).unwrap(), allgather_memory(4).unwrap());
        assert!(allgather_memory_parts(2, 0).is_err() && allreduce_packets_parts(2, 0).is_err());
    }

    #[test]
    fn rank_and_part_counts_out_of_range_are_errors_not_panics() {
        type Example = fn(usize) -> Result<Program, PlanError>;
        let examples: [(&str, Example); 4] = [
            ("allreduce_packets", allreduce_packets),
            ("allreduce_two_shot", allreduce_two_shot),
            ("allgather_memory", allgather_memory),
            ("allgather_port", allgather_port),
        ];
        for (name, f) in examples {
            for n in [0, 1, MAX_RANKS + 1, usize::MAX] {
                let e = f(n).expect_err(name).to_string();
                assert!(e.contains(&format!("rank count {n} is outside")), "{name}({n}): {e}");
            }
        }
        // (n - 1) * parts and n * n * parts overflow; thread blocks beyond the limit.
        for parts in [usize::MAX, usize::MAX / 2, 1 << 40] {
            let e = allreduce_packets_parts(4, parts).unwrap_err().to_string();
            assert!(e.contains("outside the supported range"), "{e}");
            let e = allgather_memory_parts(4, parts).unwrap_err().to_string();
            assert!(e.contains("outside the supported range"), "{e}");
        }
        let e = allgather_memory_parts(2, crate::MAX_THREADBLOCKS).unwrap_err().to_string();
        assert!(e.contains("thread block"), "{e}");
    }
}
