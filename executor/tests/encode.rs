//! The host encoder on the CPU: every example plan encodes on every rank with offsets inside
//! the arenas, the records survive a byte round trip (what the upload does), and operations the
//! executor cannot run are refused with the operation named.

use mscclpp_device::executor::{ExecOp, flags, opcode};
use mscclpp_executor::encode;
use mscclpp_plan::{Chunk, Op, OpKind, Program, ReduceOp, SyncType, examples};

const CHUNK: u64 = 4096;

fn all_examples(n: usize) -> Vec<Program> {
    vec![
        examples::allreduce_packets(n).unwrap(),
        examples::allreduce_two_shot(n).unwrap(),
        examples::allgather_memory(n).unwrap(),
        examples::allgather_port(n).unwrap(),
    ]
}

/// Whether an operation's destination / source is in the peer's arena.
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
    for n in [2, 4, 8] {
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
    let switch = OpKind::SwitchReduce {
        channel: 0,
        buffer_offset: 0,
        size: 1,
        dst: Chunk::output(0, 0, 1),
        reduce_op: ReduceOp::Sum,
    };
    let channel_reduce = OpKind::ChannelReduce {
        channel: 0,
        local_src: Chunk::input(0, 0, 1),
        remote_srcs: vec![Chunk::input(1, 0, 1)],
        local_dst: Chunk::output(0, 0, 1),
        reduce_op: ReduceOp::Sum,
    };
    let outside = OpKind::Copy { dst: Chunk::output(0, 1, 5), src: Chunk::input(0, 0, 5) };
    let mixed = OpKind::CopyPackets { dst: Chunk::scratch(0, 0, 1), src: Chunk::input(0, 0, 1) };
    for (kind, want) in [
        (reduce_max, "reduce"),
        (switch, "switch channels"),
        (channel_reduce, "channel reduce"),
        (outside, "outside"),
        (mixed, "both for packets and for plain data"),
    ] {
        let p = with_op(base.clone(), kind);
        let err = encode(&p, 0, CHUNK).expect_err(want).to_string();
        assert!(err.contains(want), "{err}");
    }
    // Every rank refuses a plan that another rank cannot run, as far as the layout goes.
    assert!(encode(&base, 2, CHUNK).is_err(), "rank out of range");
    assert!(encode(&base, 0, 24).is_err(), "chunk size not a multiple of 16");
}

/// Buffers whose bytes overflow 64 bits are an error naming the rank, not an overflow (a panic in
/// debug builds, a wrapped arena size in release builds).
#[test]
fn arenas_beyond_64_bits_are_refused() {
    let mut big = Program::new("big", "x", 2, 1 << 60, 1 << 60, 0);
    let ch = big.memory_channel(1, 0).unwrap();
    let back = big.memory_channel(0, 1).unwrap();
    ch.put(&mut big, Chunk::output(1, (1 << 59) + 3, 1), Chunk::input(0, 1 << 59, 1), 0).unwrap();
    ch.signal(&mut big, 0, SyncType::Both, false).unwrap();
    back.wait(&mut big, 0, SyncType::Both, false).unwrap();
    mscclpp_plan::check(&big).unwrap();
    let e = encode(&big, 0, 16).unwrap_err().to_string();
    assert!(e.contains("rank 0's buffers") && e.contains("do not fit in 64 bits"), "{e}");
    let e = encode(&examples::allgather_memory(2).unwrap(), 1, !15).unwrap_err().to_string();
    assert!(e.contains("do not fit in 64 bits"), "{e}");
    // At the edge: 2^32 chunks of 2^31 bytes (2^63 bytes) still encode.
    let mut edge = Program::new("edge", "x", 2, 1 << 32, 1, 0);
    edge.rank(0).unwrap().copy(&mut edge, Chunk::output(0, 0, 1), Chunk::input(0, (1 << 32) - 1, 1), 0).unwrap();
    let l = encode(&edge, 0, 1 << 31).unwrap().layout();
    assert_eq!((l.input_bytes, l.output), (1 << 63, 1 << 63));
}

/// A plan that skipped the checker with thread-block-group slices far out of range: the encoder
/// refuses a slice index beyond its group and never overflows on a huge group.
#[test]
fn extreme_group_slices_do_not_overflow() {
    let mut p = examples::allreduce_packets(2).unwrap();
    let mut grouped = p.ranks[0].threadblocks.iter_mut().flatten().filter_map(|op| op.tbg.as_mut());
    let g = grouped.next().unwrap();
    (g.index, g.size) = (usize::MAX - 1, usize::MAX);
    let e = encode(&p, 0, CHUNK).unwrap();
    assert!(e.ops.iter().any(|o| o.bytes == 0), "the last slice of a huge group is empty");
    let g = p.ranks[0].threadblocks.iter_mut().flatten().find_map(|op| op.tbg.as_mut()).unwrap();
    g.index = usize::MAX;
    let e = encode(&p, 0, CHUNK).unwrap_err().to_string();
    assert!(e.contains("is not below the group size"), "{e}");
}
