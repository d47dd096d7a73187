//! Tests that exist for bugs planted one at a time in the checker and the MSCCL++ reader which
//! the other tests let through (each test's doc names its bug). They use fresh random sizes and
//! positions; a failure prints the values.

use mscclpp_plan::*;
use std::hash::{BuildHasher, Hasher};

/// A fresh random number (no extra dependency: the standard library's per-process random keys).
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

fn below(n: u64) -> usize {
    (random() % n) as usize
}

/// Exists for a planted bug: the checker letting a packet read proceed on any packet write of
/// its chunk, not only on a write of the slice it reads (`covered` in the checker). A group of
/// `g` thread blocks writes a chunk as packets, slice by slice, and another group of `g` reads it
/// back slice by slice; with the write of slice `m` left out, the reader of slice `m` waits
/// forever: a deadlock naming that reader alone. With every slice written, the plan passes.
#[test]
fn a_packet_read_waits_for_the_write_of_its_own_slice() {
    let g = 2 + below(4);
    let m = below(g as u64);
    let build = |leave_out: Option<usize>| {
        let mut p = Program::new("slices", "test", 1, 1, 1, 1);
        let r0 = p.rank(0).unwrap();
        let writers = ThreadBlockGroup::new((0..g).collect()).unwrap();
        let readers = ThreadBlockGroup::new((g..2 * g).collect()).unwrap();
        r0.copy_packets(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), &writers).unwrap();
        if let Some(m) = leave_out {
            let removed = p.ranks[0].threadblocks[m].pop().unwrap();
            assert_eq!(removed.tbg, Some(TbgInfo { index: m, size: g }));
        }
        r0.unpack_packets(&mut p, Chunk::output(0, 0, 1), Chunk::scratch(0, 0, 1), &readers).unwrap();
        p
    };
    check(&build(None)).unwrap_or_else(|e| panic!("{g} slices, all written: {e:?}"));
    let e = check(&build(Some(m))).expect_err(&format!("accepted: slice {m} of {g} is read but never written"));
    let CheckError::Deadlock { blocked } = &e[0] else { panic!("{g} slices, {m} not written: {e:?}") };
    let stuck: Vec<(usize, usize, usize)> = blocked.iter().map(|b| (b.op.rank, b.op.tb, b.op.index)).collect();
    assert_eq!(stuck, vec![(0, g + m, 0)], "{g} slices, {m} not written: {blocked:?}");
    assert!(blocked[0].waiting_for.contains("packets in rank 0 scratch[0..1]"), "{blocked:?}");
}

/// Two ranks over port channels in MSCCL++'s plan schema: rank 0 sends its input chunk 0 into
/// rank 1's output with `op` (`pws` or `pwsf`), then overwrites that input chunk with a copy;
/// rank 1 waits for the signal and copies what arrived.
fn port_plan(op: &str) -> String {
    r#"{
  "name": "pwsf", "collective": "test", "protocol": "Simple", "inplace": false,
  "gpus": [
    { "id": 0, "input_chunks": 2, "output_chunks": 1, "scratch_chunks": 0,
      "channels": [ { "channel_type": "port", "connected_to": [1] } ],
      "remote_buffers": [ { "rank": 1, "type": "o", "access_channel_types": ["port"] } ],
      "semaphores": [],
      "threadblocks": [
        { "id": 0,
          "channels": [ { "channel_type": "port", "channel_ids": [0] } ],
          "remote_buffer_refs": [ { "access_channel_type": "port", "remote_buffer_ids": [0] } ],
          "ops": [
            { "name": "OP", "src_buff": [ { "type": "i", "index": 0, "size": 1 } ],
              "dst_buff": [ { "buffer_id": 0, "index": 0, "size": 1 } ], "channel_type": "port" },
            { "name": "copy", "src_buff": [ { "type": "i", "index": 1, "size": 1 } ],
              "dst_buff": [ { "type": "i", "index": 0, "size": 1 } ] }
          ] } ] },
    { "id": 1, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0,
      "channels": [ { "channel_type": "port", "connected_to": [0] } ],
      "remote_buffers": [],
      "semaphores": [],
      "threadblocks": [
        { "id": 0,
          "channels": [ { "channel_type": "port", "channel_ids": [0] } ],
          "remote_buffer_refs": [],
          "ops": [
            { "name": "wait", "channel_ids": [0], "channel_type": "port" },
            { "name": "copy", "src_buff": [ { "type": "o", "index": 0, "size": 1 } ],
              "dst_buff": [ { "type": "o", "index": 1, "size": 1 } ] }
          ] } ] }
  ]
}"#
    .replace("OP", op)
}

/// Exists for a planted bug: the MSCCL++ reader taking `pwsf` for a put with signal, without its
/// flush (no test plan contained it). `pwsf` is read as a put with signal and flush, `pws` as one
/// without; so overwriting the source right after is fine after `pwsf` and a race after `pws`.
#[test]
fn pwsf_is_read_with_its_flush() {
    let kind = |op: &str| {
        let p = mscclpp_json::read(&port_plan(op)).unwrap();
        (p.ranks[0].threadblocks[0][0].kind.clone(), check(&p).map(|_| ()))
    };
    let (dst, src) = (Chunk::output(1, 0, 1), Chunk::input(0, 0, 1));
    let (pwsf, checked) = kind("pwsf");
    assert_eq!(pwsf, OpKind::PutWithSignalAndFlush { channel: 0, dst, src });
    checked.unwrap_or_else(|e| panic!("pwsf then overwriting its source: {e:?}"));
    let (pws, checked) = kind("pws");
    assert_eq!(pws, OpKind::PutWithSignal { channel: 0, dst, src });
    let e = checked.expect_err("pws then overwriting its source was accepted");
    assert!(matches!(e[0], CheckError::SourceOverwrittenBeforeFlush { .. }), "{e:?}");
}
