//! CPU tests of the builder, the checker, the JSON format and the MSCCL++ reader.

use mscclpp_plan::builder::validate_op;
use mscclpp_plan::check::describe;
use mscclpp_plan::*;

type Example = fn(usize) -> Result<Program, PlanError>;
const EXAMPLES: [(&str, Example); 6] = [
    ("allreduce_packets", examples::allreduce_packets),
    ("allreduce_two_shot", examples::allreduce_two_shot),
    ("allreduce_two_shot_read", examples::allreduce_two_shot_read),
    ("allreduce_switch", examples::allreduce_switch),
    ("allgather_memory", examples::allgather_memory),
    ("allgather_port", examples::allgather_port),
];

fn messages(e: &[CheckError]) -> String {
    e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

fn rejected(p: &Program) -> (Vec<CheckError>, String) {
    let e = check(p).expect_err("the checker must reject this plan");
    let m = messages(&e);
    (e, m)
}

#[test]
fn examples_pass_the_checker_for_2_3_4_8_ranks() {
    for (name, build) in EXAMPLES {
        for n in [2, 3, 4, 8] {
            let p = build(n).unwrap();
            assert_eq!(p.num_ranks(), n);
            match check(&p) {
                Ok(r) => assert!(r.ops > 0 && r.threadblocks >= n, "{name} {n}: {r:?}"),
                Err(e) => panic!("{name} with {n} ranks rejected:\n{}", messages(&e)),
            }
        }
    }
}

#[test]
fn signal_counts_are_reported() {
    let p = examples::allreduce_two_shot(4).unwrap();
    let r = check(&p).unwrap();
    // Two phases, each a signal/wait pair per ordered pair of ranks.
    assert_eq!(r.sync_pairs, 2 * 4 * 3);
}

/// Two ranks that each wait before signalling.
#[test]
fn wait_before_signal_deadlocks() {
    let mut p = Program::new("deadlock", "test", 2, 1, 1, 0);
    for r in 0..2 {
        let ch = p.memory_channel(1 - r, r).unwrap();
        ch.wait(&mut p, 0, SyncType::Both, false).unwrap();
        ch.signal(&mut p, 0, SyncType::Both, false).unwrap();
    }
    let (e, m) = rejected(&p);
    let CheckError::Deadlock { blocked } = &e[0] else { panic!("expected a deadlock, got {m}") };
    assert_eq!(blocked.len(), 2);
    assert!(m.contains("rank 0 tb 0 op 0 (wait on memory channel 0 to rank 1) waits for a signal from rank 1"), "{m}");
    assert!(m.contains("rank 1 tb 0 op 0 (wait on memory channel 1 to rank 0) waits for a signal from rank 0"), "{m}");
}

/// The same exchange in the right order completes.
#[test]
fn signal_before_wait_completes() {
    let mut p = Program::new("ok", "test", 2, 1, 1, 0);
    for r in 0..2 {
        let ch = p.memory_channel(1 - r, r).unwrap();
        ch.signal(&mut p, 0, SyncType::Both, false).unwrap();
        ch.wait(&mut p, 0, SyncType::Both, false).unwrap();
    }
    check(&p).unwrap();
}

/// Thread block 1 of rank 1 signals only after a wait that rank 0 satisfies only after its
/// own wait on rank 1: a cycle through two thread blocks.
#[test]
fn cross_threadblock_cycle_deadlocks() {
    let mut p = Program::new("cycle", "test", 2, 1, 1, 0);
    let a = p.memory_channel(1, 0).unwrap();
    let b = p.memory_channel(0, 1).unwrap();
    let a2 = p.port_channel(1, 0).unwrap();
    let b2 = p.port_channel(0, 1).unwrap();
    a.wait(&mut p, 0, SyncType::Both, false).unwrap();
    a2.signal(&mut p, 0, SyncType::Both).unwrap();
    b2.wait(&mut p, 1, SyncType::Both).unwrap();
    b.signal(&mut p, 1, SyncType::Both, false).unwrap();
    let (e, m) = rejected(&p);
    assert!(matches!(e[0], CheckError::Deadlock { .. }), "{m}");
    assert!(m.contains("rank 0 tb 0 op 0"), "{m}");
    assert!(
        m.contains(
            "rank 1 tb 1 op 0 (wait on port channel 3 to rank 0) waits for a signal from rank 0 on port channel 3"
        ),
        "{m}"
    );
}

#[test]
fn packet_read_without_writer_deadlocks() {
    let mut p = Program::new("nopackets", "test", 1, 1, 1, 1);
    let r0 = p.rank(0).unwrap();
    r0.unpack_packets(&mut p, Chunk::output(0, 0, 1), Chunk::scratch(0, 0, 1), 0).unwrap();
    let (e, m) = rejected(&p);
    assert!(m.contains("deadlock: rank 0 tb 0 op 0 (unpack_packets"), "{m}");
    assert!(m.contains("waits for packets in rank 0 scratch[0..1]"), "{m}");
    // Only the packets it reads: not its destination (a planted bug that listed every chunk
    // the operation touches, `&&` turned into `||`, was let through before).
    let CheckError::Deadlock { blocked } = &e[0] else { panic!("{m}") };
    assert_eq!(blocked[0].waiting_for, "packets in rank 0 scratch[0..1]");
    // Nor the chunks it reads without packets.
    let mut p = Program::new("nopackets", "test", 1, 1, 1, 1);
    let reduce = OpKind::Reduce {
        src: Chunk::input(0, 0, 1),
        others: vec![Chunk::scratch(0, 0, 1)],
        dst: Chunk::output(0, 0, 1),
        reduce_op: ReduceOp::Sum,
        packet: true,
    };
    p.add_op(0, 0, reduce).unwrap();
    let (e, m) = rejected(&p);
    let CheckError::Deadlock { blocked } = &e[0] else { panic!("{m}") };
    assert_eq!(blocked[0].waiting_for, "packets in rank 0 scratch[0..1]");
    // The first 16 unit chunks missing, then "..." when there are more (planted bugs in that
    // count, `+`, `*` or `>` changed, were let through before).
    for (units, shown) in [(16, 16), (17, 17), (20, 17)] {
        let mut p = Program::new("nopackets", "test", 1, units, units, units);
        let r0 = p.rank(0).unwrap();
        r0.unpack_packets(&mut p, Chunk::output(0, 0, units), Chunk::scratch(0, 0, units), 0).unwrap();
        let (e, m) = rejected(&p);
        let CheckError::Deadlock { blocked } = &e[0] else { panic!("{m}") };
        let list: Vec<&str> = blocked[0].waiting_for.trim_start_matches("packets in ").split(", ").collect();
        assert_eq!(list.len(), shown, "{units} units: {m}");
        assert_eq!(list[15], "rank 0 scratch[15..16]", "{m}");
        assert_eq!(list[shown - 1] == "...", units > 16, "{units} units: {m}");
    }
}

/// Exists for a planted bug the other tests let through: a deadlock on a semaphore described
/// as one on packets (its arm of the description deleted). Two thread blocks each acquire what
/// the other releases only after its own acquire.
#[test]
fn a_deadlock_on_semaphores_names_them() {
    let mut p = Program::new("sems", "test", 1, 1, 1, 0);
    p.ranks[0].semaphores = vec![0, 0];
    for (tb, (acquire, release)) in [(0, 1), (1, 0)].into_iter().enumerate() {
        p.add_op(0, tb, OpKind::SemAcquire { sem: acquire }).unwrap();
        p.add_op(0, tb, OpKind::SemRelease { sem: release }).unwrap();
    }
    let (e, m) = rejected(&p);
    let CheckError::Deadlock { blocked } = &e[0] else { panic!("{m}") };
    let waits: Vec<&str> = blocked.iter().map(|b| b.waiting_for.as_str()).collect();
    assert_eq!(waits, ["a release of semaphore 0", "a release of semaphore 1"], "{m}");
}

/// Rank 0 puts into rank 1's output and signals; rank 1 reads the chunk before its wait.
#[test]
fn read_before_wait_is_a_race() {
    let mut p = Program::new("race", "test", 2, 1, 2, 0);
    let ch = p.memory_channel(1, 0).unwrap();
    let back = p.memory_channel(0, 1).unwrap();
    ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    ch.signal(&mut p, 0, SyncType::Both, false).unwrap();
    let r1 = p.rank(1).unwrap();
    r1.copy(&mut p, Chunk::output(1, 1, 1), Chunk::output(1, 0, 1), 0).unwrap();
    back.wait(&mut p, 0, SyncType::Both, false).unwrap();
    let (e, m) = rejected(&p);
    assert!(e.iter().all(|e| matches!(e, CheckError::Race { .. })), "{m}");
    assert!(m.contains("race on rank 1 output[0..1]"), "{m}");
    assert!(
        m.contains("rank 0 tb 0 op 0 (put rank 0 input[0..1] -> rank 1 output[0..1] on memory channel 0 to rank 1)"),
        "{m}"
    );
    assert!(m.contains("rank 1 tb 0 op 0 (copy rank 1 output[0..1] -> rank 1 output[1..2])"), "{m}");

    // Reading after the wait is fine.
    let mut p = Program::new("norace", "test", 2, 1, 2, 0);
    let ch = p.memory_channel(1, 0).unwrap();
    let back = p.memory_channel(0, 1).unwrap();
    ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    ch.signal(&mut p, 0, SyncType::Both, false).unwrap();
    back.wait(&mut p, 0, SyncType::Both, false).unwrap();
    let r1 = p.rank(1).unwrap();
    r1.copy(&mut p, Chunk::output(1, 1, 1), Chunk::output(1, 0, 1), 0).unwrap();
    check(&p).unwrap();
}

/// A signal without the fence before it (or a relaxed one) does not publish the put.
#[test]
fn unfenced_or_relaxed_signal_does_not_publish() {
    for (sync, relaxed) in [(SyncType::None, false), (SyncType::After, false), (SyncType::Both, true)] {
        let mut p = Program::new("fence", "test", 2, 1, 2, 0);
        let ch = p.memory_channel(1, 0).unwrap();
        let back = p.memory_channel(0, 1).unwrap();
        ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        ch.signal(&mut p, 0, sync, relaxed).unwrap();
        back.wait(&mut p, 0, SyncType::Both, false).unwrap();
        let r1 = p.rank(1).unwrap();
        r1.copy(&mut p, Chunk::output(1, 1, 1), Chunk::output(1, 0, 1), 0).unwrap();
        let (_, m) = rejected(&p);
        assert!(m.contains("race on rank 1 output[0..1]") && m.contains("(put rank 0"), "{sync:?} {relaxed}: {m}");
    }
}

#[test]
fn missing_wait_is_rejected() {
    // Dropping one wait from the two-shot allreduce leaves a signal unmatched.
    let mut p = examples::allreduce_two_shot(2).unwrap();
    let tb0 = &mut p.ranks[1].threadblocks[0];
    let last = tb0.iter().rposition(|o| matches!(o.kind, OpKind::Wait { .. })).unwrap();
    tb0.remove(last);
    let (e, m) = rejected(&p);
    assert!(matches!(e[0], CheckError::UnmatchedSignals { .. }), "{m}");
    assert!(m.contains("memory channel rank 0 -> rank 1 (#1): 1 signal(s) but 0 wait(s)"), "{m}");
    assert!(m.contains("signals: rank 0 tb 0 op 3 (signal on memory channel 2 to rank 1)"), "{m}");
}

#[test]
fn put_without_any_signal_is_not_observed() {
    let mut p = Program::new("nosignal", "test", 2, 1, 1, 0);
    let ch = p.memory_channel(1, 0).unwrap();
    ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    let (e, m) = rejected(&p);
    assert!(matches!(e[0], CheckError::UnobservedWrite { rank: 1, .. }), "{m}");
    assert!(m.contains("rank 0 tb 0 op 0 (put rank 0 input[0..1] -> rank 1 output[0..1]"), "{m}");
}

#[test]
fn unordered_threadblocks_of_one_rank_race() {
    let mut p = Program::new("local", "test", 1, 1, 1, 1);
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::scratch(0, 0, 1), 1).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 0 scratch[0..1]: rank 0 tb 0 op 0 (copy"), "{m}");
    assert!(m.contains("rank 0 tb 1 op 0 (copy"), "{m}");
    assert!(m.contains("different thread blocks"), "{m}");

    // A thread-block group writes disjoint slices: no race among its members.
    let mut p = Program::new("group", "test", 1, 1, 1, 0);
    let g = ThreadBlockGroup::new(vec![0, 1, 2]).unwrap();
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), &g).unwrap();
    assert_eq!(p.ranks[0].threadblocks.len(), 3);
    assert_eq!(p.ranks[0].threadblocks[2][0].tbg, Some(TbgInfo { index: 2, size: 3 }));
    check(&p).unwrap();
}

#[test]
fn port_source_overwritten_before_flush() {
    let build = |flush_first: bool| {
        let mut p = Program::new("flush", "test", 2, 1, 1, 0);
        let ch = p.port_channel(1, 0).unwrap();
        let back = p.port_channel(0, 1).unwrap();
        ch.put_with_signal(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        if flush_first {
            ch.flush(&mut p, 0, SyncType::Both).unwrap();
        }
        let r0 = p.rank(0).unwrap();
        r0.copy(&mut p, Chunk::input(0, 0, 1), Chunk::output(0, 0, 1), 0).unwrap();
        back.wait(&mut p, 0, SyncType::Both).unwrap();
        p
    };
    let (e, m) = rejected(&build(false));
    assert!(matches!(e[0], CheckError::SourceOverwrittenBeforeFlush { .. }), "{m}");
    assert!(
        m.contains("rank 0 tb 0 op 1 (copy rank 0 output[0..1] -> rank 0 input[0..1]) overwrites rank 0 input[0..1]"),
        "{m}"
    );
    check(&build(true)).unwrap();
}

#[test]
fn signals_from_several_threadblocks_are_ambiguous() {
    let mut p = Program::new("ambiguous", "test", 2, 1, 1, 0);
    let ch = p.memory_channel(1, 0).unwrap();
    let back = p.memory_channel(0, 1).unwrap();
    ch.signal(&mut p, 0, SyncType::Both, false).unwrap();
    ch.signal(&mut p, 1, SyncType::Both, false).unwrap();
    back.wait(&mut p, 0, SyncType::Both, false).unwrap();
    back.wait(&mut p, 0, SyncType::Both, false).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("signals from several thread blocks: rank 0 tb 0 op 0"), "{m}");
}

#[test]
fn switch_channel_plans() {
    // Each rank reduces its input chunk over all ranks through the switch. The other ranks'
    // inputs are written by their hosts before their launches: a barrier (signal every peer,
    // wait for every peer) must come before the reduction, and another after it, before the
    // owners may finish and have their inputs rewritten.
    let n = 4;
    let build = |before: bool, after: bool| {
        let mut p = Program::new("switch", "allreduce", n, n, n, n);
        let sw = p.switch_channel((0..n).collect(), BufferType::Input).unwrap();
        let chans: Vec<Vec<MemoryChannel>> =
            (0..n).map(|r| (0..n).filter(|&q| q != r).map(|q| p.memory_channel(q, r).unwrap()).collect()).collect();
        let barrier = |p: &mut Program, r: usize| {
            for c in &chans[r] {
                c.signal(p, 0, SyncType::Both, false).unwrap();
            }
            for c in &chans[r] {
                c.wait(p, 0, SyncType::Both, false).unwrap();
            }
        };
        for r in 0..n {
            if before {
                barrier(&mut p, r);
            }
            sw.reduce(&mut p, r, r, 1, Chunk::output(r, r, 1), 0, ReduceOp::Sum).unwrap();
            if after {
                barrier(&mut p, r);
            }
        }
        p
    };
    check(&build(true, true)).unwrap();
    let (e, m) = rejected(&build(false, true));
    assert!(e.iter().all(|e| matches!(e, CheckError::Race { .. })), "{m}");
    assert!(
        m.contains(
            "race on rank 1 input[0..1]: rank 1's host (its input, written before the launch) and rank 0 tb 0 op 0 \
             (switch reduce -> rank 0 output[0..1] on switch channel 0) are not ordered"
        ),
        "{m}"
    );
    let (e, m) = rejected(&build(true, false));
    assert!(e.iter().all(|e| matches!(e, CheckError::InputInUseAtEnd { .. })), "{m}");
    assert_eq!(e.len(), n * (n - 1), "{m}");
    assert!(m.contains("uses rank 1 input[0..1] but rank 1 can finish"), "{m}");
    // A broadcast into every scratch read on another rank without synchronization races.
    let mut p = Program::new("switch_race", "test", 2, 1, 1, 1);
    let sw = p.switch_channel(vec![0, 1], BufferType::Scratch).unwrap();
    sw.broadcast(&mut p, 0, Chunk::input(0, 0, 1), 0, 1, 0).unwrap();
    let r1 = p.rank(1).unwrap();
    r1.copy(&mut p, Chunk::output(1, 0, 1), Chunk::scratch(1, 0, 1), 0).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 1 scratch[0..1]") && m.contains("switch broadcast"), "{m}");
    // Errors: a non-member and an out-of-range offset.
    let e = sw.reduce(&mut p, 1, 0, 1, Chunk::output(1, 0, 1), 0, ReduceOp::Max);
    assert!(e.is_ok());
    let mut q = Program::new("switch_err", "test", 3, 1, 1, 1);
    let sw = q.switch_channel(vec![0, 1], BufferType::Scratch).unwrap();
    let e = sw.reduce(&mut q, 2, 0, 1, Chunk::output(2, 0, 1), 0, ReduceOp::Sum).unwrap_err();
    assert_eq!(e.to_string(), "switch reduce: rank 2 is not a member of the switch channel");
    let e = sw.broadcast(&mut q, 0, Chunk::input(0, 0, 1), 1, 1, 0).unwrap_err();
    assert!(
        e.to_string().starts_with("switch broadcast: switch buffer chunk (rank 0 scratch[1..2]) is outside"),
        "{e}"
    );
}

#[test]
fn build_time_errors_name_the_operation() {
    let mut p = Program::new("errors", "test", 2, 2, 2, 2);
    let ch = p.memory_channel(1, 0).unwrap();
    let port = p.port_channel(1, 0).unwrap();
    let r0 = p.rank(0).unwrap();
    let cases: Vec<(Result<(), PlanError>, &str)> = vec![
        (
            ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(1, 0, 1), 0),
            "put: source chunk is on rank 1 but must be on rank 0",
        ),
        (
            ch.put(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), 0),
            "put: destination chunk is on rank 0 but must be on rank 1",
        ),
        (
            ch.put(&mut p, Chunk::output(1, 0, 2), Chunk::input(0, 0, 1), 0),
            "put: destination chunk has size 2 but must have size 1",
        ),
        (
            ch.put_packets(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0),
            "put_packets: destination chunk (rank 1 output[0..1]) must be in a scratch buffer",
        ),
        (
            ch.read_put_packets(&mut p, Chunk::scratch(1, 0, 1), Chunk::input(0, 0, 1), 0),
            "read_put_packets: source chunk (rank 0 input[0..1]) must be in a scratch buffer",
        ),
        (
            port.put_packets(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0),
            "put_packets: destination chunk (rank 1 output[0..1]) must be in a scratch buffer",
        ),
        (
            ch.put(&mut p, Chunk::output(1, 1, 2), Chunk::input(0, 0, 2), 0),
            "put: destination chunk (rank 1 output[1..3]) is outside the 2-chunk buffer or empty",
        ),
        (
            ch.get(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0),
            "get: source chunk is on rank 0 but must be on rank 1",
        ),
        (
            ch.reduce(&mut p, Chunk::input(0, 0, 1), vec![Chunk::input(0, 1, 1)], 0, None, ReduceOp::Sum),
            "channel reduce: remote source chunk is on rank 0 but must be on rank 1",
        ),
        (
            ch.reduce(&mut p, Chunk::input(0, 0, 1), vec![], 0, None, ReduceOp::Sum),
            "channel reduce: remote source list must not be empty",
        ),
        (
            r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(1, 0, 1), 0),
            "copy: source chunk is on rank 1 but must be on rank 0",
        ),
        (
            r0.copy_packets(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), 0),
            "copy_packets: destination chunk (rank 0 output[0..1]) must be in a scratch buffer",
        ),
        (
            r0.unpack_packets(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), 0),
            "unpack_packets: source chunk (rank 0 input[0..1]) must be in a scratch buffer",
        ),
        (
            r0.reduce(&mut p, Chunk::input(0, 0, 1), vec![Chunk::input(0, 1, 1)], 0, None, ReduceOp::Sum, true),
            "reduce: other chunk (rank 0 input[1..2]) must be in a scratch buffer",
        ),
        (
            r0.reduce(&mut p, Chunk::input(0, 0, 1), vec![Chunk::scratch(0, 0, 2)], 0, None, ReduceOp::Sum, false),
            "reduce: other chunk has size 2 but must have size 1",
        ),
        (
            r0.copy(&mut p, Chunk::output(0, 2, 0), Chunk::input(0, 2, 0), 0),
            "copy: source chunk (rank 0 input[2..2]) is outside the 2-chunk buffer or empty",
        ),
    ];
    for (result, message) in cases {
        assert_eq!(result.unwrap_err().to_string(), message);
    }
    // Nothing was added by the failed calls.
    assert!(p.ranks.iter().all(|r| r.threadblocks.is_empty()));

    let e = p.memory_channel(2, 0).unwrap_err();
    assert_eq!(e.to_string(), "MemoryChannel: rank 2 is out of range (the program has 2 ranks)");
    let e = p.port_channel(1, 5).unwrap_err();
    assert_eq!(e, PlanError::RankOutOfRange { op: "PortChannel", rank: 5, num_ranks: 2 });
    assert!(matches!(p.memory_channel(1, 1), Err(PlanError::SelfChannel { .. })));
    assert!(p.rank(3).is_err());
    assert_eq!(
        ThreadBlockGroup::new(vec![]).unwrap_err().to_string(),
        "ThreadBlockGroup: thread-block list must not be empty"
    );
    // A channel used on the wrong rank (possible in hand-edited plans) is caught by validation.
    let op = Op { kind: OpKind::Signal { channel: ch.id, data_sync: SyncType::Both, relaxed: false }, tbg: None };
    assert_eq!(
        validate_op(&p, 1, &op).unwrap_err().to_string(),
        "signal: issued on rank 1, which is not the channel's source rank 0"
    );
    let op = Op { kind: OpKind::Flush { channel: ch.id, data_sync: SyncType::Both }, tbg: None };
    assert_eq!(
        validate_op(&p, 0, &op).unwrap_err().to_string(),
        "flush: channel 0 does not exist or is not a port channel"
    );
    let e: &dyn std::error::Error = &PlanError::Empty { op: "x", what: "y" };
    assert_eq!(e.to_string(), "x: y must not be empty");
}

#[test]
fn checker_revalidates_plans_from_json() {
    let mut p = examples::allgather_memory(2).unwrap();
    if let OpKind::Put { dst, .. } = &mut p.ranks[0].threadblocks[1][0].kind {
        dst.index = 7;
    }
    let (e, m) = rejected(&Program::from_json(&p.to_json()).unwrap());
    assert!(matches!(e[0], CheckError::Invalid { rank: 0, tb: 1, index: 0, .. }), "{m}");
    assert!(m.contains("put: destination chunk (rank 1 output[7..8]) is outside"), "{m}");
}

fn round_trip(p: &Program) {
    let text = p.to_json();
    let back = Program::from_json(&text).unwrap();
    assert_eq!(&back, p);
    assert_eq!(back.to_json(), text);
}

#[test]
fn json_round_trips_the_examples() {
    for (_, build) in EXAMPLES {
        for n in [2, 3, 4, 8] {
            round_trip(&build(n).unwrap());
        }
    }
}

/// A tiny deterministic generator (no extra dependencies) of arbitrary, not necessarily
/// valid, plans: every operation kind, field and option is exercised.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
    fn chunk(&mut self) -> Chunk {
        let b = [BufferType::Input, BufferType::Output, BufferType::Scratch][self.next(3)];
        Chunk::new(self.next(4), b, self.next(100), 1 + self.next(9))
    }
    fn sync(&mut self) -> SyncType {
        [SyncType::None, SyncType::Before, SyncType::After, SyncType::Both][self.next(4)]
    }
    fn red(&mut self) -> ReduceOp {
        [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max][self.next(3)]
    }
    fn op(&mut self) -> Op {
        let channel = self.next(6);
        let (dst, src) = (self.chunk(), self.chunk());
        let kind = match self.next(16) {
            0 => OpKind::Put { channel, dst, src },
            1 => OpKind::PutWithSignal { channel, dst, src },
            2 => OpKind::PutWithSignalAndFlush { channel, dst, src },
            3 => OpKind::Get { channel, dst, src },
            4 => OpKind::PutPackets { channel, dst, src },
            5 => OpKind::ReadPutPackets { channel, dst, src },
            6 => OpKind::Signal { channel, data_sync: self.sync(), relaxed: self.next(2) == 1 },
            7 => OpKind::Wait { channel, data_sync: self.sync(), relaxed: self.next(2) == 1 },
            8 => OpKind::Flush { channel, data_sync: self.sync() },
            9 => {
                let k = self.next(4);
                OpKind::ChannelReduce {
                    channel,
                    local_src: src,
                    remote_srcs: (0..k).map(|_| self.chunk()).collect(),
                    local_dst: dst,
                    reduce_op: self.red(),
                }
            }
            10 => OpKind::Copy { dst, src },
            11 => OpKind::CopyPackets { dst, src },
            12 => OpKind::UnpackPackets { dst, src },
            13 => {
                let k = self.next(4);
                OpKind::Reduce {
                    src,
                    others: (0..k).map(|_| self.chunk()).collect(),
                    dst,
                    reduce_op: self.red(),
                    packet: self.next(2) == 1,
                }
            }
            14 => OpKind::SwitchReduce {
                channel,
                buffer_offset: self.next(50),
                size: self.next(5),
                dst,
                reduce_op: self.red(),
            },
            _ => OpKind::SwitchBroadcast { channel, src, buffer_offset: self.next(50), size: self.next(5) },
        };
        let tbg = (self.next(3) == 0).then(|| TbgInfo { index: self.next(4), size: 1 + self.next(4) });
        Op { kind, tbg }
    }
    fn program(&mut self) -> Program {
        let n = 1 + self.next(4);
        let mut p = Program::new(format!("random{}", self.0 % 1000), "test \"quoted\" \u{e9}", n, 0, 0, 0);
        for rank in &mut p.ranks {
            rank.input_chunks = self.next(1000);
            rank.output_chunks = self.next(1000);
            rank.scratch_chunks = self.next(1000);
            rank.threadblocks = (0..self.next(4)).map(|_| (0..self.next(6)).map(|_| self.op()).collect()).collect();
        }
        for _ in 0..self.next(6) {
            p.channels.push(match self.next(3) {
                0 => Channel::Memory { src_rank: self.next(4), dst_rank: self.next(4) },
                1 => Channel::Port { src_rank: self.next(4), dst_rank: self.next(4) },
                _ => Channel::Switch {
                    ranks: (0..self.next(4)).map(|_| self.next(8)).collect(),
                    buffer: [BufferType::Input, BufferType::Output, BufferType::Scratch][self.next(3)],
                },
            });
        }
        p
    }
}

#[test]
fn json_round_trips_generated_plans() {
    let mut g = Gen(0x5eed);
    for _ in 0..300 {
        round_trip(&g.program());
    }
}

#[test]
fn json_format_is_readable() {
    let p = examples::allgather_port(2).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(v["channels"][0], serde_json::json!({"type": "port", "src_rank": 0, "dst_rank": 1}));
    assert_eq!(
        v["ranks"][0]["threadblocks"][1][0],
        serde_json::json!({
            "op": "put_with_signal", "channel": 0,
            "dst": {"rank": 1, "buffer": "output", "index": 0, "size": 1},
            "src": {"rank": 0, "buffer": "input", "index": 0, "size": 1}
        })
    );
    assert_eq!(describe(&p, &p.ranks[0].threadblocks[1][2]), "flush on port channel 0 to rank 1");
}

/// A two-rank plan in MSCCL++'s execution-plan schema, written by hand: rank 0 puts its input
/// into rank 1's scratch and signals; rank 1 waits, reduces it with its input and sends the
/// result into rank 0's output with a fused reduce-send (`res`), then signals; rank 0 waits
/// and copies the result (as a one-block thread-block group).
const MSCCLPP_PLAN: &str = r#"{
  "name": "handwritten", "collective": "allreduce", "protocol": "Simple", "inplace": false,
  "num_threads_per_block": 1024,
  "gpus": [
    { "id": 0, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 1,
      "channels": [ { "channel_type": "memory", "connected_to": [1] } ],
      "remote_buffers": [ { "rank": 1, "type": "s", "access_channel_types": ["memory"] } ],
      "semaphores": [],
      "threadblocks": [
        { "id": 0,
          "channels": [ { "channel_type": "memory", "channel_ids": [0] } ],
          "remote_buffer_refs": [ { "access_channel_type": "memory", "remote_buffer_ids": [0] } ],
          "ops": [
            { "name": "put", "src_buff": [ { "type": "i", "index": 0, "size": 1 } ],
              "dst_buff": [ { "buffer_id": 0, "index": 0, "size": 1 } ], "channel_type": "memory" },
            { "name": "nop" },
            { "name": "signal", "channel_ids": [0], "channel_type": "memory" },
            { "name": "wait", "channel_ids": [0], "channel_type": "memory" },
            { "name": "copy", "src_buff": [ { "type": "o", "index": 0, "size": 1 } ],
              "dst_buff": [ { "type": "o", "index": 1, "size": 1 } ], "tbg_info": { "tb_id": 0, "tbg_size": 1 } }
          ] } ] },
    { "id": 1, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 1,
      "channels": [ { "channel_type": "memory", "connected_to": [0] } ],
      "remote_buffers": [ { "rank": 0, "type": "o", "access_channel_types": ["memory"] } ],
      "semaphores": [],
      "threadblocks": [
        { "id": 0,
          "channels": [ { "channel_type": "memory", "channel_ids": [0] } ],
          "remote_buffer_refs": [ { "access_channel_type": "memory", "remote_buffer_ids": [0] } ],
          "ops": [
            { "name": "wait", "channel_ids": [0], "channel_type": "memory" },
            { "name": "res", "src_buff": [ { "type": "i", "index": 0, "size": 1 }, { "type": "s", "index": 0, "size": 1 } ],
              "dst_buff": [ { "type": "o", "index": 0, "size": 1 }, { "buffer_id": 0, "index": 0, "size": 1 } ],
              "channel_type": "memory", "reduce_op": "max" },
            { "name": "signal", "channel_ids": [0], "channel_type": "memory" }
          ] } ] }
  ]
}"#;

#[test]
fn reads_a_mscclpp_plan() {
    let p = mscclpp_json::read(MSCCLPP_PLAN).unwrap();
    assert_eq!(p.name, "handwritten");
    assert_eq!(
        p.channels,
        vec![Channel::Memory { src_rank: 0, dst_rank: 1 }, Channel::Memory { src_rank: 1, dst_rank: 0 }]
    );
    let kinds = |r: usize| p.ranks[r].threadblocks[0].iter().map(|o| o.kind.clone()).collect::<Vec<_>>();
    let both = SyncType::Both;
    assert_eq!(
        kinds(0),
        vec![
            OpKind::Put { channel: 0, dst: Chunk::scratch(1, 0, 1), src: Chunk::input(0, 0, 1) },
            OpKind::Signal { channel: 0, data_sync: both, relaxed: false },
            OpKind::Wait { channel: 0, data_sync: both, relaxed: false },
            OpKind::Copy { dst: Chunk::output(0, 1, 1), src: Chunk::output(0, 0, 1) },
        ]
    );
    assert_eq!(p.ranks[0].threadblocks[0][3].tbg, Some(TbgInfo { index: 0, size: 1 }));
    assert_eq!(
        kinds(1),
        vec![
            OpKind::Wait { channel: 1, data_sync: both, relaxed: false },
            OpKind::Reduce {
                src: Chunk::input(1, 0, 1),
                others: vec![Chunk::scratch(1, 0, 1)],
                dst: Chunk::output(1, 0, 1),
                reduce_op: ReduceOp::Max,
                packet: false
            },
            OpKind::Put { channel: 1, dst: Chunk::output(0, 0, 1), src: Chunk::output(1, 0, 1) },
            OpKind::Signal { channel: 1, data_sync: both, relaxed: false },
        ]
    );
    check(&p).unwrap();
    round_trip(&p);

    // Rank 0 reading its output before the wait that covers rank 1's put is a race.
    let racy = MSCCLPP_PLAN.replacen(
        r#"{ "name": "wait", "channel_ids": [0], "channel_type": "memory" },
            { "name": "copy""#,
        r#"{ "name": "copy""#,
        1,
    );
    let racy = racy.replacen(
        r#"], "tbg_info": { "tb_id": 0, "tbg_size": 1 } }"#,
        r#"], "tbg_info": { "tb_id": 0, "tbg_size": 1 } },
            { "name": "wait", "channel_ids": [0], "channel_type": "memory" }"#,
        1,
    );
    let p = mscclpp_json::read(&racy).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 0 output[0..1]"), "{m}");
    assert!(
        m.contains("rank 1 tb 0 op 2 (put rank 1 output[0..1] -> rank 0 output[0..1] on memory channel 1 to rank 0)"),
        "{m}"
    );
    assert!(m.contains("rank 0 tb 0 op 2 (copy rank 0 output[0..1] -> rank 0 output[1..2], slice 0/1)"), "{m}");
}

#[test]
fn mscclpp_reader_rejects_what_it_does_not_model() {
    let unsupported = MSCCLPP_PLAN.replace(r#""name": "nop""#, r#""name": "glreduce""#);
    let e = mscclpp_json::read(&unsupported).unwrap_err();
    assert_eq!(e.to_string(), r#"gpu 0 tb 0 op 1: unsupported operation "glreduce""#);
    // A known operation without the operands it needs is malformed, with its place.
    let e = mscclpp_json::read(&MSCCLPP_PLAN.replace(r#""name": "nop""#, r#""name": "gstorepkt""#)).unwrap_err();
    assert_eq!(e.to_string(), "gpu 0 tb 0 op 1 (gstorepkt): expects one source and one switch destination");
    let e = mscclpp_json::read(&MSCCLPP_PLAN.replacen(
        r#""channel_type": "memory", "connected_to""#,
        r#""channel_type": "ib", "connected_to""#,
        1,
    ))
    .unwrap_err();
    assert_eq!(e.to_string(), r#"gpu 0: unsupported channel type "ib""#);
    // A switch channel needs its rank group and buffer.
    let e = mscclpp_json::read(&MSCCLPP_PLAN.replacen(
        r#""channel_type": "memory", "connected_to""#,
        r#""channel_type": "switch", "connected_to""#,
        1,
    ))
    .unwrap_err();
    assert!(e.to_string().ends_with("(switch channel): expects one rank group and a buffer type"), "{e}");
    // A DSL rule broken inside the file is reported with its place.
    let e = mscclpp_json::read(&MSCCLPP_PLAN.replacen(
        r#""index": 0, "size": 1 } ],
              "dst_buff": [ { "buffer_id": 0"#,
        r#""index": 0, "size": 2 } ],
              "dst_buff": [ { "buffer_id": 0"#,
        1,
    ))
    .unwrap_err();
    assert!(e.to_string().starts_with("gpu 0 tb 0 op 0: put: "), "{e}");
    let e = mscclpp_json::read("{}").unwrap_err();
    assert!(e.to_string().starts_with("not an MSCCL++ execution plan"), "{e}");
}

/// A port channel's transfer is done by its proxy: a memory-channel signal issued after the
/// put does not publish it, unless the port channel was flushed first.
#[test]
fn port_put_is_published_only_by_its_channel_or_a_flush() {
    let build = |flush: bool| {
        let mut p = Program::new("port_then_memory", "test", 2, 1, 2, 0);
        let port = p.port_channel(1, 0).unwrap();
        let mem = p.memory_channel(1, 0).unwrap();
        let back = p.memory_channel(0, 1).unwrap();
        port.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        if flush {
            port.flush(&mut p, 0, SyncType::Both).unwrap();
        }
        mem.signal(&mut p, 0, SyncType::Both, false).unwrap();
        back.wait(&mut p, 0, SyncType::Both, false).unwrap();
        let r1 = p.rank(1).unwrap();
        r1.copy(&mut p, Chunk::output(1, 1, 1), Chunk::output(1, 0, 1), 0).unwrap();
        p
    };
    let (_, m) = rejected(&build(false));
    assert!(m.contains("race on rank 1 output[0..1]: rank 0 tb 0 op 0 (put rank 0 input[0..1] -> rank 1 output[0..1] on port channel 0"), "{m}");
    check(&build(true)).unwrap();
}

/// Packets order only their own data: a plain put before a packet write is not visible to
/// the reader of the packets.
#[test]
fn packets_do_not_publish_earlier_writes() {
    let mut p = Program::new("packets_order", "test", 2, 1, 2, 1);
    let ch = p.memory_channel(1, 0).unwrap();
    ch.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    ch.put_packets(&mut p, Chunk::scratch(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    let r1 = p.rank(1).unwrap();
    r1.unpack_packets(&mut p, Chunk::output(1, 1, 1), Chunk::scratch(1, 0, 1), 0).unwrap();
    r1.copy(&mut p, Chunk::input(1, 0, 1), Chunk::output(1, 0, 1), 0).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 1 output[0..1]: rank 0 tb 0 op 0 (put"), "{m}");
    assert!(m.contains("rank 1 tb 0 op 1 (copy rank 1 output[0..1] -> rank 1 input[0..1])"), "{m}");
    assert!(!m.contains("scratch"), "the packet read itself is ordered: {m}");
}

/// Packets carry data dependencies: rank 1 answers with packets computed from rank 0's
/// packets, so when another thread block of rank 0 receives the answer, rank 0's read of the
/// source is over and the source may be overwritten (the in-place packet allreduce pattern).
/// If the answer does not depend on rank 0's packets, the same overwrite is a race.
#[test]
fn packet_data_dependencies_order_an_in_place_update() {
    let build = |dependent: bool| {
        let mut p = Program::new("in_place_packets", "test", 2, 1, 1, 2);
        let c01 = p.memory_channel(1, 0).unwrap();
        let c10 = p.memory_channel(0, 1).unwrap();
        c01.put_packets(&mut p, Chunk::scratch(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        let r1 = p.rank(1).unwrap();
        r1.reduce(
            &mut p,
            Chunk::input(1, 0, 1),
            vec![Chunk::scratch(1, 0, 1)],
            0,
            Some(Chunk::output(1, 0, 1)),
            ReduceOp::Sum,
            true,
        )
        .unwrap();
        let answer = if dependent { Chunk::output(1, 0, 1) } else { Chunk::input(1, 0, 1) };
        c10.put_packets(&mut p, Chunk::scratch(0, 1, 1), answer, 0).unwrap();
        let r0 = p.rank(0).unwrap();
        r0.unpack_packets(&mut p, Chunk::input(0, 0, 1), Chunk::scratch(0, 1, 1), 1).unwrap();
        p
    };
    check(&build(true)).unwrap();
    let (_, m) = rejected(&build(false));
    assert!(m.contains("race on rank 0 input[0..1]: rank 0 tb 0 op 0 (put_packets"), "{m}");
    assert!(m.contains("rank 0 tb 1 op 0 (unpack_packets rank 0 scratch[1..2] -> rank 0 input[0..1])"), "{m}");
}

/// Plans generated by MSCCL++'s own DSL (see `tests/mscclpp/README.md`).
const MSCCLPP_ALLGATHER: &str = include_str!("mscclpp/allgather.json");
const MSCCLPP_ALLREDUCE_PKT: &str = include_str!("mscclpp/allreduce_pkt_2.json");

#[test]
fn reads_and_checks_plans_generated_by_mscclpp() {
    // Allgather, in place: each rank's input is its own slice of the output, which the plan
    // reads as output[rank] and puts into the peer's output[rank], between relaxed and fenced
    // signal/wait pairs (the `nop`s, thread-block barriers, are skipped).
    let p = mscclpp_json::read(MSCCLPP_ALLGATHER).unwrap();
    assert_eq!((p.name.as_str(), p.collective.as_str(), p.in_place), ("allgather", "allgather", true));
    assert_eq!(
        p.channels,
        [Channel::Memory { src_rank: 0, dst_rank: 1 }, Channel::Memory { src_rank: 1, dst_rank: 0 }]
    );
    for r in 0..2 {
        assert_eq!((p.ranks[r].input_chunks, p.ranks[r].output_chunks, p.ranks[r].scratch_chunks), (1, 2, 0));
        assert_eq!(p.input_in_output(r).unwrap(), Some(r));
        let (peer, ch) = (1 - r, r);
        let relaxed = |signal: bool| {
            if signal {
                OpKind::Signal { channel: ch, data_sync: SyncType::Both, relaxed: true }
            } else {
                OpKind::Wait { channel: ch, data_sync: SyncType::Both, relaxed: true }
            }
        };
        let kinds: Vec<OpKind> = p.ranks[r].threadblocks[0].iter().map(|o| o.kind.clone()).collect();
        assert_eq!(
            kinds,
            [
                relaxed(true),
                relaxed(false),
                OpKind::Put { channel: ch, dst: Chunk::output(peer, r, 1), src: Chunk::output(r, r, 1) },
                OpKind::Signal { channel: ch, data_sync: SyncType::Both, relaxed: false },
                OpKind::Wait { channel: ch, data_sync: SyncType::Both, relaxed: false },
            ]
        );
    }
    let report = check(&p).unwrap();
    assert_eq!((report.ops, report.sync_pairs, report.threadblocks), (10, 4, 2));
    round_trip(&p);
    // Without the fenced pair, rank 1 may finish before rank 0's put lands.
    let mut q = p.clone();
    q.ranks[1].threadblocks[0].truncate(3);
    q.ranks[0].threadblocks[0].truncate(3);
    let (_, m) = rejected(&q);
    assert!(m.contains("writes rank 1 output[0..1] but rank 1 can finish before it arrives"), "{m}");

    // Allreduce with LL packets, in place: the result is written over the input, which is the
    // output.
    let p = mscclpp_json::read(MSCCLPP_ALLREDUCE_PKT).unwrap();
    assert_eq!((p.name.as_str(), p.collective.as_str(), p.in_place), ("allreduce_pkt_2", "allreduce", true));
    for r in 0..2 {
        assert_eq!((p.ranks[r].input_chunks, p.ranks[r].output_chunks, p.ranks[r].scratch_chunks), (4, 4, 4));
        assert_eq!(p.input_in_output(r).unwrap(), Some(0));
    }
    let ops: Vec<&Op> = p.ranks.iter().flat_map(|r| r.threadblocks.iter().flatten()).collect();
    assert_eq!(ops.len(), 12);
    assert!(ops.iter().all(|o| !o.kind.scratch_uses().1), "scratch holds packets only");
    assert_eq!(
        p.ranks[0].threadblocks[0][1].kind,
        OpKind::Reduce {
            src: Chunk::input(0, 0, 1),
            others: vec![Chunk::scratch(0, 0, 1)],
            dst: Chunk::input(0, 0, 1),
            reduce_op: ReduceOp::Sum,
            packet: true
        }
    );
    assert_eq!(
        p.ranks[0].threadblocks[1][2].kind,
        OpKind::UnpackPackets { dst: Chunk::input(0, 2, 2), src: Chunk::scratch(0, 2, 2) }
    );
    let report = check(&p).unwrap();
    assert_eq!((report.ops, report.threadblocks), (12, 4));
    round_trip(&p);
}

/// `MSCCLPP_PLAN` with top-level field `field` set to `value` (`None`: removed).
fn with_setting(plan: &str, field: &str, value: Option<serde_json::Value>) -> String {
    let mut v: serde_json::Value = serde_json::from_str(plan).unwrap();
    let top = v.as_object_mut().unwrap();
    match value {
        Some(x) => top.insert(field.into(), x),
        None => top.remove(field),
    };
    v.to_string()
}

fn refused_setting(text: &str) -> (String, String, String) {
    match mscclpp_json::read(text) {
        Err(e @ mscclpp_json::ReadError::UnsupportedSetting { .. }) => {
            let shown = e.to_string();
            let mscclpp_json::ReadError::UnsupportedSetting { field, value, .. } = e else { unreachable!() };
            (field, value, shown)
        }
        other => panic!("expected an unsupported setting, got {other:?}"),
    }
}

#[test]
fn mscclpp_plan_settings_are_honoured_or_refused() {
    use serde_json::json;
    let base = mscclpp_json::read(MSCCLPP_PLAN).unwrap();
    let same = |text: String| assert_eq!(mscclpp_json::read(&text).unwrap(), base, "{text}");

    // Required, as MSCCL++'s executor requires them.
    for field in ["inplace", "protocol"] {
        let e = mscclpp_json::read(&with_setting(MSCCLPP_PLAN, field, None)).unwrap_err();
        assert!(e.to_string().contains(&format!("missing field `{field}`")), "{e}");
    }
    // protocol: both of MSCCL++'s values read alike (the operations say what is a packet).
    same(with_setting(MSCCLPP_PLAN, "protocol", Some(json!("LL"))));
    let (f, v, shown) = refused_setting(&with_setting(MSCCLPP_PLAN, "protocol", Some(json!("LL128"))));
    assert_eq!((f.as_str(), v.as_str()), ("protocol", "\"LL128\""));
    assert_eq!(shown, r#"unsupported plan setting "protocol": "LL128" (MSCCL++ knows "Simple" and "LL")"#);

    // buffer_alignment: divisors of 16 (the executor's chunk granularity), default 16.
    same(with_setting(MSCCLPP_PLAN, "buffer_alignment", None));
    for a in [1, 2, 4, 8, 16] {
        same(with_setting(MSCCLPP_PLAN, "buffer_alignment", Some(json!(a))));
    }
    for a in [0, 3, 24, 32, 128] {
        let (f, v, shown) = refused_setting(&with_setting(MSCCLPP_PLAN, "buffer_alignment", Some(json!(a))));
        assert_eq!((f.as_str(), v), ("buffer_alignment", a.to_string()), "{shown}");
    }

    // reuse_resources: either way (the executor's scratch chunks are data-sized: nothing wraps).
    for reuse in [false, true] {
        same(with_setting(MSCCLPP_PLAN, "reuse_resources", Some(json!(reuse))));
    }
    let ag = mscclpp_json::read(MSCCLPP_ALLGATHER).unwrap();
    assert_eq!(mscclpp_json::read(&with_setting(MSCCLPP_ALLGATHER, "reuse_resources", Some(json!(true)))).unwrap(), ag);

    // use_double_scratch_buffer: refused for plain scratch (this plan), accepted for packets.
    same(with_setting(MSCCLPP_PLAN, "use_double_scratch_buffer", Some(json!(false))));
    let (f, v, shown) = refused_setting(&with_setting(MSCCLPP_PLAN, "use_double_scratch_buffer", Some(json!(true))));
    assert_eq!((f.as_str(), v.as_str()), ("use_double_scratch_buffer", "true"), "{shown}");
    let pkt = mscclpp_json::read(MSCCLPP_ALLREDUCE_PKT).unwrap();
    for double in [true, false] {
        let text = with_setting(MSCCLPP_ALLREDUCE_PKT, "use_double_scratch_buffer", Some(json!(double)));
        assert_eq!(mscclpp_json::read(&text).unwrap(), pkt);
    }

    // Hints: any number, not carried; anything else is not a plan.
    for (field, value) in
        [("num_threads_per_block", 256u64), ("min_message_size", 1 << 20), ("max_message_size", u64::MAX)]
    {
        same(with_setting(MSCCLPP_PLAN, field, Some(json!(value))));
        let e = mscclpp_json::read(&with_setting(MSCCLPP_PLAN, field, Some(json!("many")))).unwrap_err();
        assert!(matches!(e, mscclpp_json::ReadError::Json(_)), "{e}");
    }
    // A field this reader does not know is refused, not skipped.
    let (f, v, shown) = refused_setting(&with_setting(MSCCLPP_PLAN, "use_nvls", Some(json!(true))));
    assert_eq!((f.as_str(), v.as_str()), ("use_nvls", "true"));
    assert!(shown.contains("not a setting this reader knows"), "{shown}");

    // inplace: the same operations, with the input inside the output (an allreduce's at chunk 0).
    let text = with_setting(MSCCLPP_PLAN, "inplace", Some(json!(true)));
    let p = mscclpp_json::read(&text).unwrap();
    assert!(p.in_place && !base.in_place);
    assert_eq!(p.ranks, base.ranks);
    assert_eq!(p.input_in_output(1).unwrap(), Some(0));
    // Still correct in place: rank 1's put overwrites rank 0's input (its output[0]) only after
    // the signal that follows rank 0's read of it.
    check(&p).unwrap();
    // An input larger than the output (a reduce-scatter) has no defined place in it: refused.
    let rs = with_setting(&text, "collective", Some(json!("reducescatter")))
        .replace(r#""input_chunks":1,"output_chunks":2"#, r#""input_chunks":2,"output_chunks":1"#);
    let (f, v, shown) = refused_setting(&rs);
    assert_eq!((f.as_str(), v.as_str()), ("inplace", "true"));
    assert!(
        shown.contains("rank 0's 2-chunk input, placed at output chunk 0, does not fit in its 1-chunk output"),
        "{shown}"
    );
}

/// In place, a rank's input chunks are output chunks: accesses that do not conflict out of
/// place race in place, and writes into a peer's input must be observed like output writes.
#[test]
fn in_place_plans_alias_input_and_output() {
    // One rank: tb 0 reads input[0], tb 1 writes output[0], nothing between them.
    let mut p = Program::new("alias", "allreduce", 1, 2, 2, 2);
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::scratch(0, 1, 1), 1).unwrap();
    check(&p).unwrap();
    assert_eq!(p.storage(Chunk::input(0, 1, 1)), Chunk::input(0, 1, 1));
    p.set_in_place(true);
    assert_eq!(p.storage(Chunk::input(0, 1, 1)), Chunk::output(0, 1, 1));
    let (_, m) = rejected(&p);
    assert!(
        m.contains("race on rank 0 output[0..1]: rank 0 tb 0 op 0 (copy rank 0 input[0..1] -> rank 0 scratch[0..1])"),
        "{m}"
    );
    round_trip(&p);
    assert!(!Program::new("x", "y", 1, 1, 1, 0).to_json().contains("in_place"), "absent when out of place");

    // Two ranks of an allgather: rank 0 puts into rank 1's input (its output[1]) unannounced:
    // a race with rank 1's host out of place (its input is written before its launch) and in
    // place alike.
    let mut p = Program::new("unannounced", "allgather", 2, 1, 2, 0);
    let ch = p.memory_channel(1, 0).unwrap();
    ch.put(&mut p, Chunk::input(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 1 input[0..1]"), "{m}");
    p.set_in_place(true);
    assert_eq!(p.input_in_output(0).unwrap(), Some(0));
    assert_eq!(p.input_in_output(1).unwrap(), Some(1));
    let (_, m) = rejected(&p);
    assert!(m.contains("writes rank 1 output[1..2] but rank 1 can finish before it arrives"), "{m}");
    assert!(m.contains("race on rank 1 output[1..2]") && m.contains("its input, written before the launch"), "{m}");

    // An input that cannot lie in the output is refused by the checker.
    let mut p = Program::new("rs", "reducescatter", 2, 2, 1, 0);
    assert_eq!(p.input_in_output(0).unwrap(), None);
    p.set_in_place(true);
    let e = p.input_in_output(1).unwrap_err();
    assert_eq!(e, PlanError::InPlaceLayout { rank: 1, input_chunks: 2, output_chunks: 1, start: 0 });
    let (errors, m) = rejected(&p);
    assert_eq!(errors.len(), 2, "{m}");
    assert!(matches!(errors[0], CheckError::InPlace(PlanError::InPlaceLayout { rank: 0, .. })), "{m}");
    assert!(p.input_in_output(2).is_err(), "no rank 2");
}

/// A relaxed signal/wait orders no data of the launch but carries the signaller's input (its
/// host wrote it before the launch; the executor fences before a block's first relaxed signal
/// and after a relaxed wait): rank 1 may get rank 0's input after a relaxed wait for rank 0,
/// but not before any wait, and not rank 0's output that rank 0's kernel wrote before a relaxed
/// signal.
#[test]
fn relaxed_signal_carries_the_input_but_not_the_launch_writes() {
    let build = |wait: bool, from_output: bool| {
        let mut p = Program::new("relaxed_get", "test", 2, 1, 1, 0);
        let to1 = p.memory_channel(1, 0).unwrap();
        let from0 = p.memory_channel(0, 1).unwrap();
        let r0 = p.rank(0).unwrap();
        if from_output {
            r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        }
        to1.signal(&mut p, 0, SyncType::Both, true).unwrap();
        if wait {
            from0.wait(&mut p, 0, SyncType::After, true).unwrap();
        }
        let src = if from_output { Chunk::output(0, 0, 1) } else { Chunk::input(0, 0, 1) };
        from0.get(&mut p, Chunk::output(1, 0, 1), src, 0).unwrap();
        if !wait {
            from0.wait(&mut p, 0, SyncType::After, true).unwrap();
        }
        // Rank 1 tells rank 0 it is done with rank 0's memory (fenced), so rank 0 outlives the get.
        from0.signal(&mut p, 0, SyncType::Before, false).unwrap();
        to1.wait(&mut p, 0, SyncType::After, false).unwrap();
        p
    };
    check(&build(true, false)).unwrap();
    let (_, m) = rejected(&build(false, false));
    assert!(m.contains("race on rank 0 input[0..1]: rank 0's host"), "{m}");
    let (_, m) = rejected(&build(true, true));
    assert!(m.contains("race on rank 0 output[0..1]: rank 0 tb 0 op 0 (copy"), "{m}");
}

/// MSCCL++'s switch operations and fused packet reductions are read as this crate's
/// operations: `glre` a switch reduction, `gstore` a broadcast, `glres` a reduction into the
/// rank's own copy then its broadcast, `recpkt` / `recspkt` a packet reduction then packet
/// copies (and puts).
#[test]
fn mscclpp_switch_and_fused_packet_operations_are_read() {
    let text = include_str!("mscclpp/allreduce_nvls_zero_copy_2.json");
    let p = mscclpp_json::read(text).unwrap();
    let switches: Vec<&Channel> = p.channels.iter().filter(|c| matches!(c, Channel::Switch { .. })).collect();
    assert_eq!(switches.len(), 8, "the k-th switch channel of every member is one channel");
    assert!(switches.iter().all(|c| **c == Channel::Switch { ranks: vec![0, 1], buffer: BufferType::Input }));
    let kinds: Vec<&OpKind> = p.ranks[1].threadblocks[0].iter().map(|o| &o.kind).collect();
    let sw = p.channels.iter().position(|c| matches!(c, Channel::Switch { .. })).unwrap();
    assert!(kinds.contains(&&OpKind::SwitchReduce {
        channel: sw,
        buffer_offset: 8,
        size: 1,
        dst: Chunk::input(1, 8, 1),
        reduce_op: ReduceOp::Sum
    }));
    assert!(kinds.contains(&&OpKind::SwitchBroadcast {
        channel: sw,
        src: Chunk::input(1, 8, 1),
        buffer_offset: 8,
        size: 1
    }));

    let p = mscclpp_json::read(include_str!("mscclpp/reduce_copy_send_packet_test.json")).unwrap();
    let kinds: Vec<&OpKind> = p.ranks[0].threadblocks[0].iter().map(|o| &o.kind).collect();
    assert!(
        matches!(
            kinds.as_slice(),
            [
                OpKind::Reduce { src, others, dst, packet: true, .. },
                OpKind::CopyPackets { dst: copy, src: copied },
                OpKind::PutPackets { dst: remote, src: sent, .. },
            ] if *src == Chunk::input(0, 0, 1) && *others == [Chunk::scratch(0, 0, 1)] && *dst == Chunk::input(0, 0, 1)
                && *copy == Chunk::scratch(0, 1, 1) && *copied == Chunk::input(0, 0, 1)
                && remote.rank == 1 && remote.buffer == BufferType::Scratch && *sent == Chunk::input(0, 0, 1)
        ),
        "{kinds:?}"
    );
}

/// MSCCL++'s `barrier` orders the thread blocks of a rank: in its thread-block-group allgather
/// thread blocks 1 to 3 put slices of the chunk between two barriers and only thread block 0
/// signals the peer. Without the second barrier the peer can finish before their slices
/// arrive; with a thread block missing at the first, the rank deadlocks.
#[test]
fn barriers_order_the_thread_blocks_of_a_rank() {
    let p = mscclpp_json::read(include_str!("mscclpp/allgather_tbg.json")).unwrap();
    assert_eq!(p.ranks[0].threadblocks[1][0].kind, OpKind::Barrier { id: 0, count: 4 });
    check(&p).unwrap();
    let mut q = p.clone();
    for rank in &mut q.ranks {
        for tb in &mut rank.threadblocks {
            let last = tb.iter().rposition(|o| matches!(o.kind, OpKind::Barrier { .. })).unwrap();
            tb.remove(last);
        }
    }
    let (_, m) = rejected(&q);
    assert!(m.contains("slice 1/4) writes rank 0 output[") && m.contains("can finish before it arrives"), "{m}");
    let mut q = p.clone();
    q.ranks[0].threadblocks[3].remove(0);
    let (_, m) = rejected(&q);
    assert!(m.contains("deadlock") && m.contains("1 more thread block(s) at barrier 0 (3 of 4 there)"), "{m}");
    let mut q = p;
    q.ranks[0].threadblocks[2][0].kind = OpKind::Barrier { id: 0, count: 3 };
    let (_, m) = rejected(&q);
    assert!(m.contains("rank 0 barrier 0: met with different thread-block counts"), "{m}");
}

/// MSCCL++'s `sem_release` / `sem_acquire` order two thread blocks of a rank: in its ring
/// alltoall, thread block 16 + k copies what thread block k's peer put only after k's release.
/// Without the acquire the launch leaves the semaphore raised (the next launch would pass
/// early); with two acquirers which release each takes depends on timing.
#[test]
fn semaphores_order_the_thread_blocks_of_a_rank() {
    let p = mscclpp_json::read(include_str!("mscclpp/alltoall_ring_2.json")).unwrap();
    assert_eq!(p.ranks[0].semaphores, vec![0; 16]);
    check(&p).unwrap();
    let mut q = p.clone();
    q.ranks[0].threadblocks[16].retain(|o| !matches!(o.kind, OpKind::SemAcquire { .. }));
    let (_, m) = rejected(&q);
    assert!(m.contains("rank 0 semaphore 0: released 1 time(s) but acquired 0 time(s) in a launch"), "{m}");
    // Two acquirers of one semaphore: which release each gets depends on timing.
    let mut q = p;
    q.ranks[0].threadblocks[17].iter_mut().for_each(|o| {
        if matches!(o.kind, OpKind::SemAcquire { .. }) {
            o.kind = OpKind::SemAcquire { sem: 0 };
        }
    });
    let (_, m) = rejected(&q);
    assert!(m.contains("rank 0 semaphore 0: acquired by several thread blocks"), "{m}");
}

/// A `pipeline` is read as its operations, once over whole chunks (MSCCL++'s own run when a
/// chunk is at most `unit_size` bytes), and `reuse_resources` changes nothing the executor runs.
#[test]
fn mscclpp_pipelines_are_read_as_their_body() {
    let p = mscclpp_json::read(include_str!("mscclpp/pipeline_test.json")).unwrap();
    let kinds: Vec<&OpKind> = p.ranks[0].threadblocks[0].iter().map(|o| &o.kind).collect();
    assert_eq!(kinds, [&OpKind::Copy { dst: Chunk::output(0, 0, 1), src: Chunk::input(0, 0, 1) }]);
    let text = include_str!("mscclpp/allreduce_pipeline.json");
    assert!(text.contains(r#""reuse_resources": true"#) && text.contains(r#""name": "pipeline""#));
    let p = mscclpp_json::read(text).unwrap();
    assert!(
        p.ranks
            .iter()
            .flat_map(|r| r.threadblocks.iter().flatten())
            .any(|o| matches!(o.kind, OpKind::SemAcquire { .. }))
    );
    check(&p).unwrap();
}

/// `gstorepkt` stores the packets of a rank's scratch into every member's bound scratch: read
/// as packets (it waits for them), written as packets (the `upkt` of every member waits for them).
#[test]
fn mscclpp_packets_through_a_switch_channel() {
    let p = mscclpp_json::read(include_str!("mscclpp/allgather_nvls_zero_copy_pkt_2.json")).unwrap();
    let sw = p.channels.iter().position(|c| matches!(c, Channel::Switch { .. })).unwrap();
    assert_eq!(p.channels[sw], Channel::Switch { ranks: vec![0, 1], buffer: BufferType::Scratch });
    let kinds: Vec<&OpKind> = p.ranks[1].threadblocks[0].iter().map(|o| &o.kind).collect();
    assert_eq!(
        kinds,
        [
            &OpKind::CopyPackets { dst: Chunk::scratch(1, 1, 1), src: Chunk::output(1, 1, 1) },
            &OpKind::SwitchBroadcastPackets { channel: sw, src: Chunk::scratch(1, 1, 1), buffer_offset: 1, size: 1 },
            &OpKind::UnpackPackets { dst: Chunk::output(1, 0, 1), src: Chunk::scratch(1, 0, 1) },
        ]
    );
    check(&p).unwrap();
    // Without rank 1's packet copy nothing writes the packets its store reads.
    let mut q = p;
    q.ranks[1].threadblocks[0].remove(0);
    let (_, m) = rejected(&q);
    assert!(m.contains("deadlock") && m.contains("(switch broadcast of packets rank 1 scratch[1..2]"), "{m}");
}

/// A generator seeded from the clock (fresh inputs every run; the seed is in every message).
fn fresh() -> (u64, Gen) {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seed = t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
    (seed, Gen(seed))
}

impl Gen {
    /// A number in `lo..hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.next(hi - lo)
    }
}

/// One rank whose thread blocks run one operation each, with the slice given (no builder
/// checks: as read from JSON).
fn one_rank_blocks(ops: Vec<(OpKind, Option<TbgInfo>)>, chunks: usize) -> Program {
    let mut p = Program::new("blocks", "test", 1, chunks, chunks, chunks);
    p.ranks[0].threadblocks = ops.into_iter().map(|(kind, tbg)| vec![Op { kind, tbg }]).collect();
    p
}

/// Exists for a planted bug the other tests let through: slices of groups of different sizes
/// taken as disjoint whenever their indices differ (`parts_overlap`'s size guard made `true`).
/// Slice `i` of `n` and slice `j` of `m` with `n != m` may overlap whatever `i` and `j` are, so
/// two unordered thread blocks writing a chunk through such slices race; the same index of the
/// same size is one slice (also a race), and different indices of one size are disjoint.
#[test]
fn slices_of_groups_of_different_sizes_overlap() {
    let (seed, mut rng) = fresh();
    let copy = || OpKind::Copy { dst: Chunk::output(0, 0, 1), src: Chunk::input(0, 0, 1) };
    for _ in 0..20 {
        let n = rng.range(2, 9);
        let m = loop {
            let m = rng.range(2, 9);
            if m != n {
                break m;
            }
        };
        let i = rng.range(0, n);
        let j = loop {
            let j = rng.range(0, m);
            if j != i {
                break j;
            }
        };
        let a = Some(TbgInfo { index: i, size: n });
        let p = one_rank_blocks(vec![(copy(), a), (copy(), Some(TbgInfo { index: j, size: m }))], 1);
        let (_, msg) = rejected(&p);
        assert!(msg.contains("race on rank 0 output[0..1]"), "seed {seed:#x}: slices {i}/{n} and {j}/{m}: {msg}");
        let p = one_rank_blocks(vec![(copy(), a), (copy(), a)], 1);
        assert!(rejected(&p).1.contains("race on rank 0 output[0..1]"), "seed {seed:#x}: slice {i}/{n} twice");
        let other = Some(TbgInfo { index: (i + 1) % n, size: n });
        check(&one_rank_blocks(vec![(copy(), a), (copy(), other)], 1)).unwrap();
    }
}

/// Exists for a planted bug the other tests let through: a whole packet read taken as covered
/// when every slice of a group differs from some write (`covered`'s `==` turned into `!=`),
/// rather than equals one. Packets written through slice `i` of `n` and slice `j` of `m` (`n !=
/// m`, neither group complete) leave parts of the chunk unwritten: a whole read of it waits for
/// ever, a deadlock naming the chunk. Every slice of one group written covers it.
#[test]
fn packets_cover_a_whole_read_only_when_one_group_wrote_every_slice() {
    let (seed, mut rng) = fresh();
    let scratch = Chunk::scratch(0, 0, 1);
    let write = |tbg| (OpKind::CopyPackets { dst: scratch, src: Chunk::input(0, 0, 1) }, Some(tbg));
    let read = (OpKind::UnpackPackets { dst: Chunk::output(0, 0, 1), src: scratch }, None);
    for _ in 0..20 {
        let n = rng.range(2, 9);
        let m = rng.range(n + 1, 10);
        let (i, j) = (rng.range(0, n), rng.range(0, m));
        let p = one_rank_blocks(
            vec![write(TbgInfo { index: i, size: n }), write(TbgInfo { index: j, size: m }), read.clone()],
            1,
        );
        let (e, msg) = rejected(&p);
        assert!(matches!(e[0], CheckError::Deadlock { .. }), "seed {seed:#x}: slices {i}/{n} and {j}/{m}: {msg}");
        assert!(msg.contains("packets in rank 0 scratch[0..1]"), "{msg}");
        // Every slice of the group of `n`, in thread blocks of their own, ahead of the read.
        let mut ops: Vec<_> = (0..n).map(|index| write(TbgInfo { index, size: n })).collect();
        ops.push(read.clone());
        let errors = check(&one_rank_blocks(ops, 1)).err().unwrap_or_default();
        assert!(!errors.iter().any(|e| matches!(e, CheckError::Deadlock { .. })), "{}", messages(&errors));
    }
}

/// Exists for a planted bug the other tests let through: the output chunk just past an in-place
/// input taken as part of that input (`holds_input`'s `<` turned into `<=`). In an in-place
/// allgather every rank's input is its slot of the output; every peer writes its own slot
/// (the one after the input, for the next rank) before any wait, then signals: a clean plan for
/// any number of ranks and input chunks, which the bug reads as a peer writing the input before
/// the owner's launch began.
#[test]
fn in_place_writes_just_past_a_ranks_input_are_not_writes_of_its_input() {
    let (seed, mut rng) = fresh();
    for _ in 0..5 {
        let n = rng.range(2, 6);
        let c = rng.range(1, 4);
        let mut p = Program::new("ag", "allgather", n, c, n * c, 0);
        p.set_in_place(true);
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src) {
                let ch = p.memory_channel(dst, src).unwrap();
                ch.put(&mut p, Chunk::output(dst, src * c, c), Chunk::input(src, 0, c), dst).unwrap();
                ch.signal(&mut p, dst, SyncType::Both, false).unwrap();
                let back = p.memory_channel(src, dst).unwrap();
                // In a thread block of its own: the writer has not waited for the owner.
                back.wait(&mut p, n + src, SyncType::Both, false).unwrap();
            }
        }
        if let Err(e) = check(&p) {
            panic!("seed {seed:#x}: {n} ranks of {c} input chunks: {}", messages(&e));
        }
    }
}

/// Exists for planted bugs the other tests let through: a rank's host-input bit computed so that
/// it falls on the transfer bit of a port put (`2 * m + rank` turned into `2 * m - rank` or `2 +
/// m + rank`, with `m` operations). Rank 0's thread block 1 port-puts (operation 4) and releases
/// a semaphore; thread block 0 acquires it, flushes the port channel (so it knows the put's
/// transfer) and gets rank 2's input with no signal from rank 2: a race with rank 2's host, which
/// the bug hides, because knowing the transfer then reads as knowing rank 2's input.
#[test]
fn knowing_a_port_transfer_is_not_knowing_another_ranks_input() {
    let mut p = Program::new("host bits", "test", 3, 1, 1, 1);
    p.ranks[0].semaphores = vec![0];
    let port = p.port_channel(1, 0).unwrap();
    let from2 = p.memory_channel(2, 0).unwrap();
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    p.add_op(0, 0, OpKind::SemAcquire { sem: 0 }).unwrap();
    port.flush(&mut p, 0, SyncType::Both).unwrap();
    from2.get(&mut p, Chunk::output(0, 0, 1), Chunk::input(2, 0, 1), 0).unwrap();
    port.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 1).unwrap();
    p.add_op(0, 1, OpKind::SemRelease { sem: 0 }).unwrap();
    assert!(matches!(p.ranks[0].threadblocks[1][0].kind, OpKind::Put { .. }), "the put is operation 4 of 6");
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 2 input[0..1]") && m.contains("rank 0 tb 0 op 3 (get"), "{m}");
}

/// Exists for planted bugs the other tests let through: an acquire that never takes one of the
/// semaphore's initial tokens (`*free > 0` turned into `*free < 0`) and so always takes a
/// release, or that takes them for ever (`*free -= 1` turned into `+= 1` or `/= 1`). With an
/// initial value of 1, thread block 1's acquire passes on the initial token, which publishes
/// nothing: its read of what thread block 0 wrote before its release races. With an initial
/// value of 0 it waits for the release and the plan is clean; so it is with an initial value of
/// 1 and a second acquire, which takes the release.
#[test]
fn a_semaphores_initial_tokens_publish_nothing() {
    let build = |initial: u64| {
        let mut p = Program::new("sem", "test", 1, 1, 1, 1);
        p.ranks[0].semaphores = vec![initial];
        let r0 = p.rank(0).unwrap();
        r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        p.add_op(0, 0, OpKind::SemRelease { sem: 0 }).unwrap();
        p.add_op(0, 1, OpKind::SemAcquire { sem: 0 }).unwrap();
        r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::scratch(0, 0, 1), 1).unwrap();
        p
    };
    check(&build(0)).unwrap();
    let (_, m) = rejected(&build(1));
    assert!(m.contains("race on rank 0 scratch[0..1]"), "{m}");
    let mut p = build(1);
    p.add_op(0, 0, OpKind::SemRelease { sem: 0 }).unwrap();
    p.ranks[0].threadblocks[1].insert(0, Op { kind: OpKind::SemAcquire { sem: 0 }, tbg: None });
    if let Err(e) = check(&p) {
        panic!("the second acquire takes the release: {}", messages(&e));
    }
}

/// Exists for planted bugs the other tests let through: a port put's transfer recorded under the
/// wrong bit, among the data ancestors of what it wrote (`m + x` turned into `m - x`) or as the
/// id of its remote write (the same in the lane's access). A packet read of what a port
/// channel's put wrote knows that transfer through the packets (no fence needed): rank 1
/// unpacks, with no wait, the packets rank 0's second operation (of five) put into its scratch,
/// then copies; the plan is clean. (The operations are placed so that `m - x` is neither the put
/// nor the read.)
#[test]
fn a_packet_read_knows_the_port_transfer_that_wrote_it() {
    let mut p = Program::new("port packets", "test", 2, 1, 2, 1);
    let port = p.port_channel(1, 0).unwrap();
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    let put = OpKind::PutPackets { channel: port.id, dst: Chunk::scratch(1, 0, 1), src: Chunk::input(0, 0, 1) };
    p.add_op(0, 0, put).unwrap();
    let r1 = p.rank(1).unwrap();
    r1.unpack_packets(&mut p, Chunk::output(1, 0, 1), Chunk::scratch(1, 0, 1), 0).unwrap();
    for _ in 0..2 {
        r1.copy(&mut p, Chunk::output(1, 1, 1), Chunk::input(1, 0, 1), 0).unwrap();
    }
    if let Err(e) = check(&p) {
        panic!("{}", messages(&e));
    }
}

/// Rank 0 port-puts its scratch `0..units` to rank 1 and signals, overwrites scratch chunks
/// `writes` (each a copy of its input), then flushes; rank 1 waits.
fn overwrite_after_port_put(units: usize, writes: &[Chunk]) -> Program {
    let mut p = Program::new("overwrite", "test", 2, units, units, units);
    let ch = p.port_channel(1, 0).unwrap();
    let back = p.port_channel(0, 1).unwrap();
    ch.put_with_signal(&mut p, Chunk::output(1, 0, units), Chunk::scratch(0, 0, units), 0).unwrap();
    let r0 = p.rank(0).unwrap();
    for &w in writes {
        r0.copy(&mut p, w, Chunk::input(0, 0, w.size), 0).unwrap();
    }
    ch.flush(&mut p, 0, SyncType::Both).unwrap();
    back.wait(&mut p, 0, SyncType::Both).unwrap();
    p
}

/// Exists for planted bugs in the report of a port put's source overwritten before a flush
/// that the other tests let through: every unflushed put of the rank reported for any write
/// (the filter's `&&` turned into `||`), one report per unit chunk instead of one per (put,
/// write) pair (the `&&` before `reported.insert` turned into `||`), and the cap of 32 errors
/// exceeded by one (`<` turned into `<=`). A write beside the put's source is no error; one write
/// over two units of it is one error; 40 writes over 40 units are capped at 32 errors.
#[test]
fn overwritten_port_sources_are_reported_once_each_and_capped() {
    check(&overwrite_after_port_put(2, &[Chunk::output(0, 0, 2)])).unwrap();
    let (e, m) = rejected(&overwrite_after_port_put(2, &[Chunk::scratch(0, 0, 2)]));
    assert_eq!(e.len(), 1, "{m}");
    assert!(matches!(e[0], CheckError::SourceOverwrittenBeforeFlush { .. }), "{m}");
    let writes: Vec<Chunk> = (0..40).map(|i| Chunk::scratch(0, i, 1)).collect();
    let (e, m) = rejected(&overwrite_after_port_put(40, &writes));
    // The checker's cap on the errors it reports.
    assert_eq!(e.len(), 32, "{m}");
    assert!(e.iter().all(|e| matches!(e, CheckError::SourceOverwrittenBeforeFlush { .. })), "{m}");
}

/// Exists for planted bugs the other tests let through: the race cap exceeded by one (`<` turned
/// into `<=`), and a race on a remote chunk given the hint for thread blocks of one rank (`||`
/// turned into `&&`). Rank 1 reads rank 0's scratch with no wait, while rank 0 writes it: the
/// hint is about remote writes. 40 unordered thread blocks writing one chunk race many times
/// over, reported up to the cap of 32 errors.
#[test]
fn races_are_capped_and_remote_ones_get_the_remote_hint() {
    let mut p = Program::new("remote", "test", 2, 1, 1, 1);
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    let from0 = p.memory_channel(0, 1).unwrap();
    from0.get(&mut p, Chunk::output(1, 0, 1), Chunk::scratch(0, 0, 1), 0).unwrap();
    let (_, m) = rejected(&p);
    assert!(m.contains("race on rank 0 scratch[0..1]") && m.contains("a remote write is visible only after"), "{m}");
    let mut p = Program::new("many", "test", 1, 1, 1, 0);
    let r0 = p.rank(0).unwrap();
    for tb in 0..40 {
        r0.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), tb).unwrap();
    }
    let (e, m) = rejected(&p);
    // The checker's cap on the errors it reports.
    assert_eq!(e.len(), 32, "{m}");
}

/// Exists for a planted bug the other tests let through: a flush that forgets the rank's
/// unflushed puts on every port channel, not only its own (`x.0 == r && x.1 == c` turned into
/// `||`). Rank 0 puts its scratch on one port channel, flushes another, then overwrites the
/// scratch: the first put may still be reading it.
#[test]
fn a_flush_covers_only_its_own_channels_puts() {
    let mut p = Program::new("two channels", "test", 2, 1, 1, 1);
    let a = p.port_channel(1, 0).unwrap();
    let b = p.port_channel(1, 0).unwrap();
    let back = p.port_channel(0, 1).unwrap();
    a.put_with_signal(&mut p, Chunk::output(1, 0, 1), Chunk::scratch(0, 0, 1), 0).unwrap();
    b.flush(&mut p, 0, SyncType::Both).unwrap();
    let r0 = p.rank(0).unwrap();
    r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
    a.flush(&mut p, 0, SyncType::Both).unwrap();
    back.wait(&mut p, 0, SyncType::Both).unwrap();
    let (e, m) = rejected(&p);
    assert!(e.iter().any(|e| matches!(e, CheckError::SourceOverwrittenBeforeFlush { .. })), "{m}");
}

/// Exists for planted bugs the other tests let through: the cap of 32 errors exceeded by one
/// in the end-of-launch checks (`<` turned into `<=`). Rank 0 puts 40 chunks into rank 1's output
/// and rank 1's reads 40 chunks of rank 0's input, none of it announced: far more unobserved
/// writes and inputs in use at the end than the cap, which holds.
#[test]
fn end_of_launch_errors_are_capped() {
    let mut p = Program::new("unannounced", "test", 2, 40, 40, 0);
    let to1 = p.memory_channel(1, 0).unwrap();
    to1.put(&mut p, Chunk::output(1, 0, 40), Chunk::input(0, 0, 40), 0).unwrap();
    let (e, m) = rejected(&p);
    assert!(e.iter().all(|e| matches!(e, CheckError::UnobservedWrite { .. })), "{m}");
    // The checker's cap on the errors it reports.
    assert_eq!(e.len(), 32, "{m}");
    let mut p = Program::new("unannounced", "test", 2, 40, 40, 0);
    let from0 = p.memory_channel(0, 1).unwrap();
    from0.get(&mut p, Chunk::output(1, 0, 40), Chunk::input(0, 0, 40), 0).unwrap();
    let (e, m) = rejected(&p);
    assert_eq!(e.len(), 32, "{m}");
    assert!(e.iter().any(|e| matches!(e, CheckError::InputInUseAtEnd { .. })), "{m}");
}

/// Exists for a planted bug the other tests let through: a wait that orders the signaller's
/// writes without a fence after it, or when relaxed (`data_sync.after() && !relaxed` turned into
/// `||`). Rank 0 puts into rank 1's output and signals (fenced); rank 1 waits without the fence
/// after (or relaxed, with it), then reads the chunk: a race either way.
#[test]
fn only_a_fenced_wait_orders_the_signallers_writes() {
    for (sync, relaxed) in [(SyncType::None, false), (SyncType::Before, false), (SyncType::After, true)] {
        let mut p = Program::new("wait", "test", 2, 1, 1, 1);
        let to1 = p.memory_channel(1, 0).unwrap();
        let from0 = p.memory_channel(0, 1).unwrap();
        to1.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        to1.signal(&mut p, 0, SyncType::Both, false).unwrap();
        from0.wait(&mut p, 0, sync, relaxed).unwrap();
        let r1 = p.rank(1).unwrap();
        r1.copy(&mut p, Chunk::scratch(1, 0, 1), Chunk::output(1, 0, 1), 0).unwrap();
        let (_, m) = rejected(&p);
        assert!(m.contains("race on rank 1 output[0..1]"), "{sync:?}, relaxed {relaxed}: {m}");
    }
}
