//! The host encoder on the CPU: every example plan encodes on every rank with offsets inside
//! the arenas, the records survive a byte round trip (what the upload does), and operations the
//! executor cannot run are refused with the operation named.

use mscclpp_device::executor::{ExecOp, MAX_OTHERS, flags, opcode};
use mscclpp_executor::encode;
use mscclpp_plan::{BufferType, Channel, Chunk, Op, OpKind, Program, ReduceOp, TbgInfo, examples};

const CHUNK: u64 = 4096;

fn all_examples(n: usize) -> Vec<Program> {
    vec![
        examples::allreduce_packets(n).unwrap(),
        examples::allreduce_two_shot(n).unwrap(),
        examples::allgather_memory(n).unwrap(),
        examples::allgather_port(n).unwrap(),
        examples::allreduce_two_shot_read(n).unwrap(),
        examples::allreduce_two_shot_read_parts(n, 3).unwrap(),
        examples::allreduce_switch(n).unwrap(),
        examples::allreduce_switch_parts(n, 3).unwrap(),
    ]
}

/// Whether an operation's destination / source is in the peer's arena (a switch operation's
/// switch side is in every rank's: they are laid out alike).
fn remote(kind: u32) -> (bool, bool) {
    match kind {
        opcode::PUT
        | opcode::PUT_PACKETS
        | opcode::READ_PUT_PACKETS
        | opcode::PORT_PUT
        | opcode::PORT_PUT_WITH_SIGNAL
        | opcode::PORT_PUT_WITH_SIGNAL_AND_FLUSH => (true, false),
        opcode::GET => (false, true),
        _ => (false, false),
    }
}

#[test]
fn examples_encode_inside_the_arenas_and_round_trip() {
    for n in [2, 3, 4, 8] {
        for p in all_examples(n) {
            for r in 0..n {
                let e = encode(&p, r, CHUNK).unwrap_or_else(|err| panic!("{} rank {r}: {err}", p.name));
                let plan_ops: usize = p.ranks[r].threadblocks.iter().map(Vec::len).sum();
                assert_eq!(e.ops.len(), plan_ops, "{}: one record per operation", p.name);
                assert_eq!(e.blocks(), p.ranks[r].threadblocks.len());
                assert_eq!(*e.tb_start.last().unwrap() as usize, e.ops.len());
                // The upload is a byte copy: the records come back equal.
                let bytes: &[u8] = bytemuck::cast_slice(&e.ops);
                let back: Vec<ExecOp> = bytes.chunks(size_of::<ExecOp>()).map(bytemuck::pod_read_unaligned).collect();
                assert_eq!(back, e.ops);
                for op in &e.ops {
                    let (rd, rs) = remote(op.kind);
                    let peer = |ch: u32| match op.kind {
                        opcode::PORT_PUT | opcode::PORT_PUT_WITH_SIGNAL | opcode::PORT_PUT_WITH_SIGNAL_AND_FLUSH => {
                            e.port[ch as usize].1
                        }
                        _ => e.memory[ch as usize].1,
                    };
                    let span = |flag: u32| if op.flags & flag != 0 { 2 * op.bytes } else { op.bytes };
                    let (dl, sl) = (
                        e.layouts[if rd { peer(op.channel) } else { r }],
                        e.layouts[if rs { peer(op.channel) } else { r }],
                    );
                    // Packet operands may lie in the second copy of the packet scratch.
                    assert!(op.dst + dl.pkt_shift + span(flags::DST_PKT_SCRATCH) <= dl.bytes, "{} dst", p.name);
                    assert!(op.src + sl.pkt_shift + span(flags::SRC_PKT_SCRATCH) <= sl.bytes, "{} src", p.name);
                    assert_eq!(op.dst % 16, 0);
                    assert_eq!(op.src % 16, 0);
                    assert_eq!(op.bytes % 16, 0, "{}: whole 16-byte words", p.name);
                    // A reduction's other operands: in this arena, or the peer's for a channel
                    // reduction.
                    let ol = if op.kind == opcode::CHANNEL_REDUCE { e.layouts[peer(op.channel)] } else { e.layouts[r] };
                    let os = if op.flags & flags::PACKET_OTHERS != 0 { ol.pkt_shift + 2 * op.bytes } else { op.bytes };
                    for &o in &op.others[..op.n_others as usize] {
                        assert!(o + os <= ol.bytes && o % 16 == 0, "{} other operand", p.name);
                    }
                    assert!(op.others[op.n_others as usize..].iter().all(|&o| o == 0));
                    if matches!(op.kind, opcode::SWITCH_REDUCE | opcode::SWITCH_BROADCAST) {
                        assert!((op.channel as usize) < e.switch.len(), "{} switch table", p.name);
                    }
                }
            }
        }
    }
}

#[test]
fn allgather_records_name_the_peer_output() {
    let p = examples::allgather_memory(2).unwrap();
    let e = encode(&p, 0, CHUNK).unwrap();
    let l1 = e.layouts[1];
    // Thread block 1: put input[0] to rank 1's output chunk 0, signal, wait.
    let tb1 = &e.ops[e.tb_start[1] as usize..e.tb_start[2] as usize];
    let kinds: Vec<u32> = tb1.iter().map(|o| o.kind).collect();
    assert_eq!(kinds, [opcode::PUT, opcode::SIGNAL, opcode::WAIT]);
    assert_eq!((tb1[0].dst, tb1[0].src, tb1[0].bytes), (l1.output, 0, CHUNK));
    assert_eq!(e.memory, [(0, 1)]);
    assert_eq!(e.memory_sets, 1);
    let two = encode(&examples::allreduce_two_shot(3).unwrap(), 0, CHUNK).unwrap();
    assert_eq!(two.memory_sets, 2, "two channels between each pair: two sets");
}

#[test]
fn two_shot_read_records_reduce_over_the_peers_inputs() {
    let p = examples::allreduce_two_shot_read(3).unwrap();
    let e = encode(&p, 1, CHUNK).unwrap();
    let l = e.layout();
    assert_eq!(e.blocks(), 1);
    let kinds: Vec<u32> = e.ops.iter().map(|o| o.kind).collect();
    use opcode::*;
    assert_eq!(
        kinds,
        [SIGNAL, SIGNAL, WAIT, WAIT, CHANNEL_REDUCE, CHANNEL_REDUCE, PUT, SIGNAL, PUT, SIGNAL, WAIT, WAIT]
    );
    assert_eq!(e.memory, [(0, 0), (0, 2)], "one channel toward each peer, in set 0");
    assert!(e.switch.is_empty() && e.port.is_empty());
    // Output chunk 1 = input chunk 1 + rank 0's input chunk 1, then + rank 2's.
    let (a, b) = (&e.ops[4], &e.ops[5]);
    assert_eq!((a.channel, a.src, a.dst, a.bytes, a.n_others), (0, l.input + CHUNK, l.output + CHUNK, CHUNK, 1));
    assert_eq!(a.others[0], e.layouts[0].input + CHUNK);
    assert_eq!((b.channel, b.src, b.dst, b.n_others), (1, l.output + CHUNK, l.output + CHUNK, 1));
    assert_eq!(b.others[0], e.layouts[2].input + CHUNK);
    // The allgather puts output chunk 1 into every peer's output chunk 1.
    let put = &e.ops[8];
    assert_eq!((put.channel, put.src, put.dst), (1, l.output + CHUNK, e.layouts[2].output + CHUNK));
}

#[test]
fn switch_records_name_the_switch_tables() {
    let p = examples::allreduce_switch_parts(3, 2).unwrap();
    let e = encode(&p, 2, CHUNK).unwrap();
    let l = e.layout();
    assert_eq!(e.switch, [BufferType::Input, BufferType::Output]);
    assert_eq!(e.blocks(), 2);
    for tb in 0..2 {
        let ops = &e.ops[e.tb_start[tb] as usize..e.tb_start[tb + 1] as usize];
        let c = (2 * 2 + tb) as u64 * CHUNK;
        let reduce = ops.iter().find(|o| o.kind == opcode::SWITCH_REDUCE).unwrap();
        assert_eq!((reduce.channel, reduce.src, reduce.dst, reduce.bytes), (0, l.input + c, l.output + c, CHUNK));
        let bcast = ops.iter().find(|o| o.kind == opcode::SWITCH_BROADCAST).unwrap();
        assert_eq!((bcast.channel, bcast.src, bcast.dst, bcast.bytes), (1, l.output + c, l.output + c, CHUNK));
        assert!(ops.iter().all(|o| o.flags & (flags::DST_PKT_SCRATCH | flags::SRC_PKT_SCRATCH) == 0));
    }
    // A thread-block group splits a switch operation like any data operation.
    let mut q = p.clone();
    let op = |index| Op {
        kind: OpKind::SwitchReduce {
            channel: 0,
            buffer_offset: 0,
            size: 2,
            dst: Chunk::output(0, 0, 2),
            reduce_op: ReduceOp::Sum,
        },
        tbg: Some(TbgInfo { index, size: 2 }),
    };
    q.ranks[0].threadblocks[0].push(op(0));
    q.ranks[0].threadblocks[1].push(op(1));
    let e = encode(&q, 0, CHUNK).unwrap();
    let l = e.layout();
    let halves: Vec<&ExecOp> = e.ops.iter().filter(|o| o.kind == opcode::SWITCH_REDUCE && o.bytes == CHUNK).collect();
    assert_eq!(halves.len(), 2 + 2, "the plan's own two, and the group's two halves");
    let last = &e.ops[e.tb_start[2] as usize - 1];
    assert_eq!((last.src, last.dst, last.bytes), (l.input + CHUNK, l.output + CHUNK, CHUNK));
}

#[test]
fn packet_plans_double_buffer_the_scratch() {
    let p = examples::allreduce_packets(2).unwrap();
    let e = encode(&p, 0, CHUNK).unwrap();
    let l = e.layout();
    assert!(l.pkt_shift >= p.ranks[0].scratch_chunks as u64 * 2 * CHUNK);
    assert_eq!(l.bytes, l.scratch + 2 * l.pkt_shift);
    let put = e.ops.iter().find(|o| o.kind == opcode::PUT_PACKETS).unwrap();
    assert_ne!(put.flags & flags::DST_PKT_SCRATCH, 0);
    let reduces: Vec<&ExecOp> = e.ops.iter().filter(|o| o.kind == opcode::REDUCE).collect();
    assert_eq!(reduces.len(), 2, "a group of two thread blocks");
    assert!(reduces.iter().all(|o| o.flags & flags::PACKET_OTHERS != 0 && o.n_others == 1));
    // The group splits the data: together the two halves cover the message once.
    assert_eq!(reduces.iter().map(|o| o.bytes).sum::<u64>(), 2 * CHUNK);
    assert_eq!(reduces[1].dst, reduces[0].dst + reduces[0].bytes);
    assert_eq!(reduces[1].others[0], reduces[0].others[0] + 2 * reduces[0].bytes);
}

fn with_op(mut p: Program, kind: OpKind) -> Program {
    p.ranks[0].threadblocks[0].push(Op { kind, tbg: None });
    p
}

#[test]
fn unsupported_operations_are_refused_by_name() {
    let base = examples::allreduce_two_shot(2).unwrap();
    let reduce_max = OpKind::Reduce {
        src: Chunk::input(0, 0, 1),
        others: vec![Chunk::scratch(0, 1, 1)],
        dst: Chunk::output(0, 0, 1),
        reduce_op: ReduceOp::Max,
        packet: false,
    };
    // (Channel 0 of the two-shot plan is a memory channel from rank 0 to rank 1.)
    let switch_on_memory = OpKind::SwitchReduce {
        channel: 0,
        buffer_offset: 0,
        size: 1,
        dst: Chunk::output(0, 0, 1),
        reduce_op: ReduceOp::Sum,
    };
    let channel_reduce = |reduce_op, remote_srcs| OpKind::ChannelReduce {
        channel: 0,
        local_src: Chunk::input(0, 0, 1),
        remote_srcs,
        local_dst: Chunk::output(0, 0, 1),
        reduce_op,
    };
    let outside = OpKind::Copy { dst: Chunk::output(0, 1, 5), src: Chunk::input(0, 0, 5) };
    let mixed = OpKind::CopyPackets { dst: Chunk::scratch(0, 0, 1), src: Chunk::input(0, 0, 1) };
    // The channel reduction a plan may hold encodes; the refused ones are named.
    let ok = with_op(base.clone(), channel_reduce(ReduceOp::Sum, vec![Chunk::input(1, 0, 1)]));
    let e = encode(&ok, 0, CHUNK).unwrap();
    let last = &e.ops[e.tb_start[1] as usize - 1];
    assert_eq!((last.kind, last.n_others, last.others[0]), (opcode::CHANNEL_REDUCE, 1, e.layouts[1].input));
    for (kind, want) in [
        (reduce_max, "reduction Max (only Sum"),
        (switch_on_memory, "channel 0 is not a switch channel"),
        (channel_reduce(ReduceOp::Min, vec![Chunk::input(1, 0, 1)]), "reduction Min (only Sum"),
        (channel_reduce(ReduceOp::Sum, vec![Chunk::input(1, 0, 1); MAX_OTHERS + 1]), "remote operands (at most 7)"),
        (channel_reduce(ReduceOp::Sum, vec![Chunk::input(0, 1, 1)]), "not on the channel's peer"),
        (outside, "outside"),
        (mixed, "both for packets and for plain data"),
    ] {
        let p = with_op(base.clone(), kind);
        let err = encode(&p, 0, CHUNK).expect_err(want).to_string();
        assert!(err.contains(want), "{err}");
    }
    // Switch channels: a reduction other than a sum, a channel over some of the ranks, ranks
    // laid out differently, and a channel bound to the scratch of a packet plan.
    let sw = examples::allreduce_switch(3).unwrap();
    let mut max = sw.clone();
    for op in max.ranks[1].threadblocks[0].iter_mut() {
        if let OpKind::SwitchReduce { reduce_op, .. } = &mut op.kind {
            *reduce_op = ReduceOp::Max;
        }
    }
    let mut subset = sw.clone();
    subset.channels.push(Channel::Switch { ranks: vec![0, 2], buffer: BufferType::Output });
    let mut repeated = sw.clone();
    repeated.channels[1] = Channel::Switch { ranks: vec![0, 1, 1], buffer: BufferType::Output };
    let mut uneven = sw.clone();
    uneven.ranks[2].output_chunks += 1;
    let mut packets = examples::allreduce_packets(3).unwrap();
    packets.channels.push(Channel::Switch { ranks: vec![0, 1, 2], buffer: BufferType::Scratch });
    packets.ranks[0].threadblocks[0].push(Op {
        kind: OpKind::SwitchBroadcast {
            channel: packets.channels.len() - 1,
            src: Chunk::input(0, 0, 1),
            buffer_offset: 0,
            size: 1,
        },
        tbg: None,
    });
    for (p, want, ranks) in [
        (&max, "reduction Max (only Sum", 1..2),
        (&subset, "switch channel 8 is over ranks [0, 2]: switch channels are built over every rank", 0..3),
        (&repeated, "switch channel 1 is over ranks [0, 1, 1]", 0..3),
        (&uneven, "rank 2's buffers (3 input, 4 output, 0 scratch chunks) differ from rank 0's (3, 3, 0)", 0..3),
        (&packets, "both for packets and for plain data", 0..3),
    ] {
        for r in ranks {
            let err = encode(p, r, CHUNK).expect_err(want).to_string();
            assert!(err.contains(want), "rank {r}: {err}");
        }
    }
    // A switch operation on an out-of-range offset of the bound buffer.
    let mut far = sw.clone();
    if let OpKind::SwitchBroadcast { buffer_offset, .. } = &mut far.ranks[0].threadblocks[0][5].kind {
        *buffer_offset = 3;
    }
    assert!(encode(&far, 0, CHUNK).unwrap_err().to_string().contains("outside its 3-chunk buffer"));
    // Every rank refuses a plan that another rank cannot run, as far as the layout goes.
    assert!(encode(&base, 2, CHUNK).is_err(), "rank out of range");
    assert!(encode(&base, 0, 24).is_err(), "chunk size not a multiple of 16");
}

#[test]
fn layouts_that_overflow_64_bits_are_errors_not_small_arenas() {
    // 2 input chunks of 2^63 bytes wrap to 0: unchecked, the arena would be 256 bytes and the
    // copy of chunk 1 would address byte 2^63 of it.
    let mut p = Program::new("huge", "none", 1, 2, 2, 0);
    p.ranks[0].threadblocks =
        vec![vec![Op { kind: OpKind::Copy { dst: Chunk::output(0, 1, 1), src: Chunk::input(0, 1, 1) }, tbg: None }]];
    for chunk in [1u64 << 63, 1 << 62, u64::MAX / 3 / 16 * 16, (u64::MAX / 2).next_multiple_of(16)] {
        let err = encode(&p, 0, chunk).expect_err("the layout overflows").to_string();
        assert!(err.contains("do not fit 64 bits"), "{chunk}: {err}");
    }
    // Packet scratch is twice the chunk, twice over.
    let mut q = examples::allreduce_packets(2).unwrap();
    q.ranks[1].scratch_chunks = usize::MAX / 2;
    assert!(encode(&q, 0, CHUNK).unwrap_err().to_string().contains("rank 1's buffers"));
    // Below the limit the same plan encodes, with offsets inside its arena.
    let e = encode(&p, 0, 1 << 40).unwrap();
    let l = e.layout();
    assert_eq!(e.ops[0].src, 1 << 40);
    assert!(e.ops[0].dst + e.ops[0].bytes <= l.bytes);
}

#[test]
fn unchecked_group_placements_do_not_panic() {
    // `encode` may be called without the checker: a group index past its size must not overflow.
    let mut p = Program::new("tbg", "none", 1, 4, 4, 0);
    let kind = OpKind::Copy { dst: Chunk::output(0, 0, 4), src: Chunk::input(0, 0, 4) };
    let tbg = Some(mscclpp_plan::TbgInfo { index: usize::MAX, size: 2 });
    p.ranks[0].threadblocks = vec![vec![Op { kind, tbg }]];
    let e = encode(&p, 0, CHUNK).unwrap();
    assert_eq!(e.ops[0].bytes, 0, "an index past the group's end gets an empty slice");
}
