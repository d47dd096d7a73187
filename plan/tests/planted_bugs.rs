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

/// Two ranks over one memory channel, rank 1's scratch as rank 0's remote buffer 0; rank 0's one
/// thread block runs `ops` (MSCCL++'s plan schema).
fn memory_plan(ops: &str) -> String {
    r#"{
  "name": "ops", "collective": "test", "protocol": "Simple", "inplace": false,
  "gpus": [
    { "id": 0, "input_chunks": 4, "output_chunks": 4, "scratch_chunks": 4,
      "channels": [ { "channel_type": "memory", "connected_to": [1] } ],
      "remote_buffers": [ { "rank": 1, "type": "s", "access_channel_types": ["memory"] } ],
      "semaphores": [],
      "threadblocks": [
        { "id": 0,
          "channels": [ { "channel_type": "memory", "channel_ids": [0] } ],
          "remote_buffer_refs": [ { "access_channel_type": "memory", "remote_buffer_ids": [0] } ],
          "ops": [ OPS ] } ] },
    { "id": 1, "input_chunks": 4, "output_chunks": 4, "scratch_chunks": 4,
      "channels": [ { "channel_type": "memory", "connected_to": [0] } ],
      "remote_buffers": [], "semaphores": [], "threadblocks": [] }
  ]
}"#
    .replace("OPS", ops)
}

/// An operation `name` from the local chunks `srcs` (buffer type, index) to the chunks `dsts`
/// (`None` as the type: rank 1's scratch, remote buffer 0).
fn op(name: &str, srcs: &[(Option<&str>, usize)], dsts: &[(Option<&str>, usize)]) -> String {
    let list = |v: &[(Option<&str>, usize)]| -> String {
        let items: Vec<String> = v
            .iter()
            .map(|(t, i)| match t {
                Some(t) => format!(r#"{{ "type": "{t}", "index": {i}, "size": 1 }}"#),
                None => format!(r#"{{ "buffer_id": 0, "index": {i}, "size": 1 }}"#),
            })
            .collect();
        items.join(", ")
    };
    format!(
        r#"{{ "name": "{name}", "src_buff": [ {} ], "dst_buff": [ {} ], "channel_type": "memory", "reduce_op": "sum" }}"#,
        list(srcs),
        list(dsts)
    )
}

fn rank0_kinds(ops: &str) -> Result<Vec<OpKind>, String> {
    let p = mscclpp_json::read(&memory_plan(ops)).map_err(|e| e.to_string())?;
    Ok(p.ranks[0].threadblocks[0].iter().map(|o| o.kind.clone()).collect())
}

/// Exists for survivors of `./x mutants plan-reader`: `rppkt` and `cpkt` read as the operation of
/// the next match arm (`get`, `upkt`) when their own arm is deleted, and the pairing rules of puts
/// and reductions turned around (a put whose sources and destinations do not pair up accepted, or
/// one local source toward several destinations refused; a plain reduction with a remote source
/// accepted, a remote-read reduction with its one local source refused, or its remote sources
/// given to the wrong peer). Chunk indices random.
#[test]
fn the_reader_maps_each_operation_and_its_operand_lists() {
    let (a, b, c) = (below(4), below(4), below(4));
    let (s, i) = (Some("s"), Some("i"));
    assert_eq!(
        rank0_kinds(&op("rppkt", &[(s, a)], &[(None, b)])).unwrap(),
        vec![OpKind::ReadPutPackets { channel: 0, dst: Chunk::scratch(1, b, 1), src: Chunk::scratch(0, a, 1) }]
    );
    assert_eq!(
        rank0_kinds(&op("cpkt", &[(i, a)], &[(s, b)])).unwrap(),
        vec![OpKind::CopyPackets { dst: Chunk::scratch(0, b, 1), src: Chunk::input(0, a, 1) }]
    );
    // Puts: one local source to each destination, or one source per destination.
    let put = |dst: usize, src: Chunk| OpKind::Put { channel: 0, dst: Chunk::scratch(1, dst, 1), src };
    assert_eq!(
        rank0_kinds(&op("put", &[(i, a)], &[(None, b), (None, c)])).unwrap(),
        vec![put(b, Chunk::input(0, a, 1)), put(c, Chunk::input(0, a, 1))]
    );
    assert_eq!(
        rank0_kinds(&op("put", &[(i, a), (i, c)], &[(None, b), (None, c)])).unwrap(),
        vec![put(b, Chunk::input(0, a, 1)), put(c, Chunk::input(0, c, 1))]
    );
    for (srcs, dsts) in [(vec![(i, a), (i, b)], vec![(None, 0), (None, 1), (None, 2)]), (vec![], vec![(None, a)])] {
        let e = rank0_kinds(&op("put", &srcs, &dsts)).unwrap_err();
        assert!(e.contains("do not pair up"), "{} sources, {} destinations: {e}", srcs.len(), dsts.len());
    }
    // Reductions: a remote source only in the remote-read form, which takes exactly one local source.
    let e = rank0_kinds(&op("re", &[(i, a), (None, b)], &[(Some("o"), c)])).unwrap_err();
    assert!(e.contains("remote operands do not match"), "{e}");
    let kinds = rank0_kinds(&op("rre", &[(i, a), (None, b)], &[(Some("o"), c)])).unwrap();
    assert!(
        matches!(&kinds[..], [OpKind::ChannelReduce { channel: 0, remote_srcs, .. }] if *remote_srcs == vec![Chunk::scratch(1, b, 1)]),
        "{kinds:?}"
    );
    let e = rank0_kinds(&op("rre", &[(i, a), (i, c), (None, b)], &[(Some("o"), c)])).unwrap_err();
    assert!(e.contains("remote operands do not match"), "{e}");
}
