//! Example plans written with the builder. Each is accepted by [`crate::check()`] for any
//! number of ranks from 2 up (and any number of parts for the `_parts` forms); the tests check
//! 2, 3, 4 and 8 ranks.
//!
//! Chunk `i` of a buffer is the `i`-th of `n` equal parts of the message; thread blocks are
//! numbered per rank.

use crate::builder::{MAX_RANKS, MemoryChannel, PlanError, ThreadBlockGroup};
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

/// The memory channels of a barrier between every pair of ranks, per part: `chans[r][j][s]` is
/// the channel from rank `r` to its `j`-th peer used by thread block `s`. Declared rank by rank,
/// peer by peer, part by part, so that the `s`-th channel from `r` to `q` pairs with the `s`-th
/// from `q` to `r`.
fn channels_per_part(p: &mut Program, n: usize, parts: usize) -> Result<Vec<Vec<Vec<MemoryChannel>>>, PlanError> {
    (0..n)
        .map(|r| {
            peers(n, r)
                .map(|(_, q)| (0..parts).map(|_| p.memory_channel(q, r)).collect::<Result<Vec<_>, _>>())
                .collect()
        })
        .collect()
}

/// On thread block `tb`: signal every channel of `chans`, then wait on every one (fences on both
/// sides). After it, the thread block knows everything its peers did before their signals.
fn barrier(p: &mut Program, chans: &[MemoryChannel], tb: usize) -> Result<(), PlanError> {
    for c in chans {
        c.signal(p, tb, SyncType::Both, false)?;
    }
    for c in chans {
        c.wait(p, tb, SyncType::Both, false)?;
    }
    Ok(())
}

/// The memory channels of `chans[r]` that thread block `s` uses (one toward every peer).
fn part(chans: &[Vec<MemoryChannel>], s: usize) -> Vec<MemoryChannel> {
    chans.iter().map(|per_part| per_part[s]).collect()
}

/// Two-shot allreduce over memory channels, the reduce-scatter done by reading the peers' inputs
/// (channel reductions), the allgather by puts; nothing goes through scratch.
///
/// Rank `r` owns chunk `r` of the `n`-chunk message. Thread block 0: a barrier with every peer
/// (their inputs are written: their launches have begun); output chunk `r` = input chunk `r` +
/// every peer's input chunk `r`, read through the channel toward that peer, one channel
/// reduction per peer in rank order; output chunk `r` put into every peer's output, each put
/// followed by a signal; then a wait for every peer's chunk. The closing waits also tell every
/// rank that its peers have finished reading its input.
pub fn allreduce_two_shot_read(n: usize) -> Result<Program, PlanError> {
    allreduce_two_shot_read_parts(n, 1)
}

/// [`allreduce_two_shot_read`] spread over `parts` thread blocks: the message is `n * parts`
/// chunks; rank `r` owns chunks `r * parts .. (r + 1) * parts`, and thread block `s` does chunk
/// `r * parts + s` over channels of its own (a barrier, `n - 1` channel reductions, `n - 1`
/// puts with signals, `n - 1` waits).
pub fn allreduce_two_shot_read_parts(n: usize, parts: usize) -> Result<Program, PlanError> {
    let op = "allreduce_two_shot_read_parts";
    let n = ranks(op, n)?;
    let parts = at_least_one(op, parts)?;
    let m = product(op, "parts", n, parts)?;
    crate::builder::check_threadblock(op, parts - 1)?;
    let name = if parts == 1 { "allreduce_two_shot_read" } else { "allreduce_two_shot_read_parts" };
    let mut p = Program::new(name, "allreduce", n, m, m, 0);
    let chans = channels_per_part(&mut p, n, parts)?;
    for (r, to_peers) in chans.iter().enumerate() {
        for s in 0..parts {
            let c = r * parts + s;
            let mine = part(to_peers, s);
            barrier(&mut p, &mine, s)?;
            for (j, q) in peers(n, r) {
                let local = if j == 0 { Chunk::input(r, c, 1) } else { Chunk::output(r, c, 1) };
                let remote = vec![Chunk::input(q, c, 1)];
                mine[j].reduce(&mut p, local, remote, s, Some(Chunk::output(r, c, 1)), ReduceOp::Sum)?;
            }
            for (j, q) in peers(n, r) {
                mine[j].put(&mut p, Chunk::output(q, c, 1), Chunk::output(r, c, 1), s)?;
                mine[j].signal(&mut p, s, SyncType::Both, false)?;
            }
            for ch in &mine {
                ch.wait(&mut p, s, SyncType::Both, false)?;
            }
        }
    }
    Ok(p)
}

/// Allreduce over switch channels: one bound to every rank's input, one to every rank's output.
///
/// Rank `r` owns chunk `r` of the `n`-chunk message. Thread block 0: a barrier with every peer
/// over memory channels (every input is written); a switch reduction of input chunk `r` over
/// every rank into output chunk `r`; a switch broadcast of that chunk into output chunk `r` of
/// every rank; a second barrier (every chunk has arrived everywhere, and nobody reads an input
/// any more).
pub fn allreduce_switch(n: usize) -> Result<Program, PlanError> {
    allreduce_switch_parts(n, 1)
}

/// [`allreduce_switch`] spread over `parts` thread blocks: the message is `n * parts` chunks,
/// thread block `s` of rank `r` does chunk `r * parts + s` with barriers of its own.
pub fn allreduce_switch_parts(n: usize, parts: usize) -> Result<Program, PlanError> {
    let op = "allreduce_switch_parts";
    let n = ranks(op, n)?;
    let parts = at_least_one(op, parts)?;
    let m = product(op, "parts", n, parts)?;
    crate::builder::check_threadblock(op, parts - 1)?;
    let name = if parts == 1 { "allreduce_switch" } else { "allreduce_switch_parts" };
    let mut p = Program::new(name, "allreduce", n, m, m, 0);
    let inputs = p.switch_channel((0..n).collect(), BufferType::Input)?;
    let outputs = p.switch_channel((0..n).collect(), BufferType::Output)?;
    let chans = channels_per_part(&mut p, n, parts)?;
    for (r, to_peers) in chans.iter().enumerate() {
        for s in 0..parts {
            let c = r * parts + s;
            let mine = part(to_peers, s);
            barrier(&mut p, &mine, s)?;
            inputs.reduce(&mut p, r, c, 1, Chunk::output(r, c, 1), s, ReduceOp::Sum)?;
            outputs.broadcast(&mut p, r, Chunk::output(r, c, 1), c, 1, s)?;
            barrier(&mut p, &mine, s)?;
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

    type Parts = fn(usize, usize) -> Result<Program, PlanError>;
    const NEW: [(&str, Parts); 2] =
        [("two-shot read", allreduce_two_shot_read_parts), ("switch", allreduce_switch_parts)];

    #[test]
    fn two_shot_read_and_switch_allreduces_pass_the_checker() {
        for (name, build) in NEW {
            for n in [2, 3, 4, 8] {
                for parts in [1, 2, 5] {
                    let p = build(n, parts).unwrap();
                    let r = crate::check(&p).unwrap_or_else(|e| panic!("{name} {n} x {parts}: {e:?}"));
                    assert_eq!(r.threadblocks, n * parts, "{name} {n} x {parts}: one block per part");
                    // Two barriers' worth of signal/wait pairs per ordered pair of ranks and part.
                    assert_eq!(r.sync_pairs, 2 * n * (n - 1) * parts, "{name} {n} x {parts}");
                    let text = p.to_json();
                    assert_eq!(Program::from_json(&text).unwrap(), p, "{name} {n} x {parts}: JSON round trip");
                }
            }
            assert!(build(2, 0).is_err() && build(1, 1).is_err(), "{name}");
            let e = build(2, crate::MAX_THREADBLOCKS + 1).unwrap_err().to_string();
            assert!(e.contains("thread block"), "{name}: {e}");
        }
        assert_eq!(allreduce_two_shot_read_parts(3, 1).unwrap(), allreduce_two_shot_read(3).unwrap());
        assert_eq!(allreduce_switch_parts(3, 1).unwrap(), allreduce_switch(3).unwrap());
        // The reduce-scatter reads the peers' inputs through channel reductions, one per peer.
        let p = allreduce_two_shot_read(4).unwrap();
        let reads = p.ranks[2].threadblocks[0].iter().filter(|o| matches!(o.kind, OpKind::ChannelReduce { .. }));
        assert_eq!(reads.count(), 3);
        assert!(p.ranks.iter().all(|r| r.scratch_chunks == 0));
    }

    /// `p` without the `k`-th wait of thread block `tb` of rank `r` and without the signal that
    /// wait would have consumed (so that signals and waits still match).
    fn without_wait(p: &Program, r: usize, tb: usize, k: usize) -> Program {
        let ops = &p.ranks[r].threadblocks[tb];
        let wait_on = |o: &Op| match o.kind {
            OpKind::Wait { channel, .. } => Some(channel),
            _ => None,
        };
        let (i, ch) = ops.iter().enumerate().filter_map(|(i, o)| wait_on(o).map(|c| (i, c))).nth(k).unwrap();
        let nth = ops[..i].iter().filter(|o| wait_on(o) == Some(ch)).count();
        // The partner: the channel back from the peer with the same ordinal.
        let (me, peer) = p.channels[ch].endpoints().unwrap();
        let same = |c: &Channel, ends| c.channel_type() == ChannelType::Memory && c.endpoints() == Some(ends);
        let ordinal = p.channels[..ch].iter().filter(|c| same(c, (me, peer))).count();
        let partner = p.channels.iter().enumerate().filter(|(_, c)| same(c, (peer, me))).nth(ordinal).unwrap().0;
        let signal = |o: &Op| matches!(o.kind, OpKind::Signal { channel, .. } if channel == partner);
        let (t, j) = p.ranks[peer]
            .threadblocks
            .iter()
            .enumerate()
            .flat_map(|(t, ops)| ops.iter().enumerate().filter(|(_, o)| signal(o)).map(move |(j, _)| (t, j)))
            .nth(nth)
            .unwrap();
        let mut q = p.clone();
        q.ranks[r].threadblocks[tb].remove(i);
        q.ranks[peer].threadblocks[t].remove(j);
        q
    }

    #[test]
    fn a_missing_wait_is_rejected() {
        use crate::CheckError;
        for (name, build) in NEW {
            for n in [2, 3, 4] {
                let p = build(n, 2).unwrap();
                let waits = 2 * (n - 1);
                for k in 0..waits {
                    let q = without_wait(&p, 1, 1, k);
                    let e = crate::check(&q).expect_err(&format!("{name} {n}: wait {k} removed"));
                    let text: Vec<String> = e.iter().map(|e| e.to_string()).collect();
                    if k < n - 1 {
                        // An opening wait: rank 1 reads (or reduces over) a peer's input that the
                        // peer's host may still be writing.
                        assert!(
                            e.iter().all(|e| matches!(e, CheckError::Race { location, .. } if location.buffer == BufferType::Input)),
                            "{name} {n}: wait {k}: {text:?}"
                        );
                        assert!(text[0].contains("'s host (its input, written before the launch)"), "{text:?}");
                    } else {
                        // A closing wait: a peer's chunk may arrive in rank 1's output after rank 1
                        // finished, and the peer may still be reading rank 1's input.
                        assert!(
                            e.iter().any(|e| matches!(e, CheckError::UnobservedWrite { rank: 1, .. }))
                                && e.iter().all(|e| matches!(
                                    e,
                                    CheckError::UnobservedWrite { rank: 1, .. }
                                        | CheckError::InputInUseAtEnd { rank: 1, .. }
                                )),
                            "{name} {n}: wait {k}: {text:?}"
                        );
                    }
                }
                // A wait removed alone leaves a signal without its wait.
                let mut q = p.clone();
                let i = q.ranks[0].threadblocks[0].iter().position(|o| matches!(o.kind, OpKind::Wait { .. })).unwrap();
                q.ranks[0].threadblocks[0].remove(i);
                let e = crate::check(&q).unwrap_err();
                assert!(matches!(e[0], CheckError::UnmatchedSignals { .. }), "{name} {n}: {e:?}");
            }
        }
    }

    #[test]
    fn rank_and_part_counts_out_of_range_are_errors_not_panics() {
        type Example = fn(usize) -> Result<Program, PlanError>;
        let examples: [(&str, Example); 6] = [
            ("allreduce_packets", allreduce_packets),
            ("allreduce_two_shot", allreduce_two_shot),
            ("allreduce_two_shot_read", allreduce_two_shot_read),
            ("allreduce_switch", allreduce_switch),
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
