//! Inputs a hostile or careless plan author (or a plan file) can give the builder, the checker and
//! the MSCCL++ reader: each must be an error naming the problem, never a panic, an allocation of
//! the whole address space or a checker that runs for hours.

use std::time::{Duration, Instant};

use mscclpp_plan::{
    BufferType, CheckError, Chunk, MAX_RANKS, MAX_THREADBLOCKS, Op, OpKind, PlanError, Program, check, mscclpp_json,
};

fn copy(dst: Chunk, src: Chunk) -> Op {
    Op { kind: OpKind::Copy { dst, src }, tbg: None }
}

/// A two-rank program whose rank 0 runs `ops` in thread block 0 (no builder checks: as read from
/// JSON).
fn raw(ops: Vec<Op>, chunks: usize) -> Program {
    let mut p = Program::new("hostile", "none", 2, chunks, chunks, 0);
    p.ranks[0].threadblocks = vec![ops];
    p
}

#[test]
fn chunk_indices_that_wrap_around_are_out_of_range() {
    // index + size wraps to 1 <= 4: an unchecked sum would accept the chunk.
    for (index, size) in [(usize::MAX, 2), (usize::MAX, 1), (usize::MAX - 1, 3), (1, usize::MAX)] {
        let src = Chunk::input(0, index, size);
        let p = raw(vec![copy(Chunk::output(0, 0, size), src)], 4);
        let e = check(&p).expect_err("a wrapped chunk must be rejected");
        assert!(
            matches!(&e[0], CheckError::Invalid { error: PlanError::ChunkOutOfRange { .. }, .. }),
            "({index}, {size}): {e:?}"
        );
        // The message prints the chunk without overflowing.
        assert!(e[0].to_string().contains("outside the 4-chunk buffer"), "{}", e[0]);
    }
    assert_eq!(Chunk::input(3, usize::MAX, 2).to_string(), format!("rank 3 input[{}..{}]", usize::MAX, usize::MAX));
}

#[test]
fn thread_block_indices_are_bounded_before_anything_is_allocated() {
    let mut p = Program::new("tb", "none", 1, 1, 1, 0);
    let rank = p.rank(0).unwrap();
    for tb in [MAX_THREADBLOCKS, 1 << 40, usize::MAX] {
        let e = rank.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), tb).unwrap_err();
        assert!(matches!(e, PlanError::OutOfLimits { what: "thread block", value, .. } if value == tb), "{e}");
    }
    let group = mscclpp_plan::ThreadBlockGroup::new(vec![0, usize::MAX]).unwrap();
    assert!(rank.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), &group).is_err());
    assert!(p.ranks[0].threadblocks.is_empty(), "a refused operation leaves nothing behind");
    rank.copy(&mut p, Chunk::output(0, 0, 1), Chunk::input(0, 0, 1), MAX_THREADBLOCKS - 1).unwrap();
    assert_eq!(p.ranks[0].threadblocks.len(), MAX_THREADBLOCKS);
}

#[test]
fn channels_toward_missing_ranks_or_to_themselves_are_rejected() {
    use mscclpp_plan::Channel;
    let cases = [
        (Channel::Memory { src_rank: 0, dst_rank: 99 }, "rank 99 is out of range"),
        (Channel::Port { src_rank: 0, dst_rank: 2 }, "rank 2 is out of range"),
        (Channel::Port { src_rank: 7, dst_rank: 0 }, "rank 7 is out of range"),
        (Channel::Memory { src_rank: 1, dst_rank: 1 }, "source and destination rank are both 1"),
        (Channel::Switch { ranks: vec![0, 5], buffer: BufferType::Scratch }, "rank 5 is out of range"),
        (Channel::Switch { ranks: vec![], buffer: BufferType::Scratch }, "must not be empty"),
    ];
    for (ch, want) in cases {
        // No operation uses the channel: the declaration alone is wrong (the executor would
        // build channels toward that rank).
        let mut p = raw(vec![], 1);
        p.channels.push(ch.clone());
        let e = check(&p).expect_err("a bad channel declaration must be rejected");
        assert!(matches!(e[0], CheckError::InvalidChannel { channel: 0, .. }), "{ch:?}: {e:?}");
        assert!(e[0].to_string().contains(want), "{ch:?}: {}", e[0]);
    }
}

/// Exists for planted bugs the other tests let through: the declarations' errors let past the
/// cap of 32 by one (`<` turned into `<=`). 40 channels to themselves, and 40 ranks of an
/// in-place plan whose input cannot lie in its output, give 32 errors each.
#[test]
fn declaration_errors_are_capped() {
    use mscclpp_plan::Channel;
    let mut p = raw(vec![], 1);
    p.channels = (0..40).map(|_| Channel::Memory { src_rank: 1, dst_rank: 1 }).collect();
    // The checker's cap on the errors it reports.
    assert_eq!(check(&p).unwrap_err().len(), 32);
    let mut p = Program::new("rs", "reducescatter", 40, 2, 1, 0);
    p.set_in_place(true);
    let e = check(&p).unwrap_err();
    assert_eq!(e.len(), 32);
    assert!(e.iter().all(|e| matches!(e, CheckError::InPlace(_))), "{e:?}");
}

#[test]
fn plans_too_large_to_check_are_refused_quickly() {
    let started = Instant::now();
    // One copy of 2^40 chunks: a unit-chunk walk would take hours and its records all memory.
    let huge = 1usize << 40;
    let p = raw(vec![copy(Chunk::output(0, 0, huge), Chunk::input(0, 0, huge))], huge);
    let e = check(&p).expect_err("too large");
    assert!(matches!(&e[0], CheckError::TooLarge { .. }), "{e:?}");
    assert!(e[0].to_string().contains("too large to check"), "{}", e[0]);
    assert!(e[0].to_string().contains("steps of the simulation"), "{}", e[0]);
    // Too many ranks, too many thread blocks (plans from `Program::from_json` are not built
    // through the builder).
    let p = Program::new("many", "none", MAX_RANKS + 1, 1, 1, 0);
    assert!(matches!(&check(&p).unwrap_err()[0], CheckError::TooLarge { .. }));
    let mut p = Program::new("wide", "none", 1, 1, 1, 0);
    p.ranks[0].threadblocks = vec![vec![]; MAX_THREADBLOCKS + 1];
    assert!(matches!(&check(&p).unwrap_err()[0], CheckError::TooLarge { .. }));
    // At the limits, the plans check (planted bugs that refused them, `>` turned into `>=`,
    // were let through before).
    p.ranks[0].threadblocks.pop();
    check(&p).unwrap();
    check(&Program::new("many", "none", MAX_RANKS, 1, 1, 0)).unwrap();
    // Many thread blocks of one operation each: the happens-before sets alone (one per thread
    // block, two bits per operation: 2^18 sets of 2^19 bits) would exceed the memory budget,
    // which refuses the plan before they exist. (The memory budget's own check: a planted bug
    // that never refuses, `Budget::store` returning `Ok`, let the sets be allocated until the
    // step budget ran out.)
    let mut p = Program::new("many blocks", "none", 64, 1, 1, 0);
    for (r, rank) in p.ranks.iter_mut().enumerate() {
        rank.threadblocks = vec![vec![copy(Chunk::output(r, 0, 1), Chunk::input(r, 0, 1))]; MAX_THREADBLOCKS];
    }
    let e = check(&p).expect_err("too large");
    assert!(matches!(&e[0], CheckError::TooLarge { .. }), "{:?}", &e[..1]);
    assert!(e[0].to_string().contains("bytes of checker state"), "{}", e[0]);
    // Just over the memory budget: 2^16 thread blocks of one operation each, whose sets of
    // 2^17 + 16 bits take 2^16 * 16392 bytes, 2^19 more than the budget. (A planted bug that
    // charged a set's words plus 8 instead of its bytes, `* 8` turned into `+ 8`, let it through
    // to the simulation.)
    let mut p = Program::new("over the budget", "none", 16, 1, 1, 0);
    for (r, rank) in p.ranks.iter_mut().enumerate() {
        rank.threadblocks = vec![vec![copy(Chunk::output(r, 0, 1), Chunk::input(r, 0, 1))]; MAX_THREADBLOCKS];
    }
    let e = check(&p).expect_err("too large");
    assert!(e[0].to_string().contains("bytes of checker state"), "{}", e[0]);
    assert!(started.elapsed() < Duration::from_secs(30), "refusals took {:?}", started.elapsed());
}

#[test]
fn mscclpp_plans_with_huge_ids_are_malformed_not_allocated() {
    let plan = |gpu: &str, tb: &str| {
        format!(
            r#"{{"name": "x", "protocol": "Simple", "inplace": false, "gpus": [{{"id": {gpu}, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,
                "threadblocks": [{{"id": {tb}, "ops": []}}]}}]}}"#
        )
    };
    for (gpu, tb, want) in [
        (usize::MAX.to_string(), "0".to_string(), "gpu id"),
        ((1usize << 40).to_string(), "0".to_string(), "gpu id"),
        (MAX_RANKS.to_string(), "0".to_string(), "gpu id"),
        ("1".to_string(), (1usize << 40).to_string(), "thread block id"),
        ("0".to_string(), usize::MAX.to_string(), "thread block id"),
    ] {
        let e = mscclpp_json::read(&plan(&gpu, &tb)).expect_err("huge ids must be refused");
        assert!(matches!(e, mscclpp_json::ReadError::Malformed { .. }), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
    // At the limits, the plan reads.
    let ok = mscclpp_json::read(&plan(&(MAX_RANKS - 1).to_string(), &(MAX_THREADBLOCKS - 1).to_string())).unwrap();
    assert_eq!(ok.ranks.len(), MAX_RANKS);
}

/// `ranks` ranks of `tbs` thread blocks, each copying its own input chunk to its own output
/// chunk: a clean plan of `ranks * tbs` operations.
fn copies(ranks: usize, tbs: usize) -> Program {
    let mut p = Program::new("copies", "none", ranks, tbs, tbs, 0);
    for (r, rank) in p.ranks.iter_mut().enumerate() {
        rank.threadblocks = (0..tbs).map(|t| vec![copy(Chunk::output(r, t, 1), Chunk::input(r, t, 1))]).collect();
    }
    p
}

/// Exists for planted bugs the other tests let through: the words of a happens-before set
/// miscounted in the step budget (`hb_bytes / 8` turned into `% 8`, charging nothing, or `* 8`,
/// charging 64 times too much). The end-of-launch check charges, for every rank, the words of
/// every thread block's set: 512 ranks of 32 blocks (2^14 sets of 520 words) come to just over
/// 2^32 steps and are refused; 64 ranks of 256 blocks (2^14 sets of 514 words) to about 2^29
/// and are checked.
#[test]
fn the_end_of_launch_check_is_charged_by_the_words_it_joins() {
    let e = check(&copies(512, 32)).expect_err("over the step budget");
    assert!(e[0].to_string().contains("steps of the simulation"), "{}", e[0]);
    let r = check(&copies(64, 256)).unwrap();
    assert_eq!((r.ops, r.threadblocks), (1 << 14, 1 << 14));
}
