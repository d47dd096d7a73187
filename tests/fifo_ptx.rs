//! The GPU side of the trigger FIFO uses the orderings of the protocol's table
//! (`mscclpp_device::protocol::fifo::order`), the same table the loom model and the host consumer
//! take theirs from: each producer access of the `fifo_roundtrip` kernel (push, then sync) must
//! carry the table's semantics in its PTX instruction.

use core::sync::atomic::Ordering;

use mscclpp_device::protocol::fifo::order;
use mscclpp_rs::ptxcheck;

/// The PTX semantics of an ordering (`relaxed`, `acquire`, `release`, `acq_rel`).
fn sem(o: Ordering) -> &'static str {
    match o {
        Ordering::Relaxed => "relaxed",
        Ordering::Acquire => "acquire",
        Ordering::Release => "release",
        Ordering::AcqRel => "acq_rel",
        _ => "sc",
    }
}

#[test]
fn push_and_sync_use_the_protocol_orderings() {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let body = entries.get("fifo_roundtrip").expect("fifo_roundtrip in the PTX");
    let mnemonics: Vec<&str> = ptxcheck::instructions(body)
        .iter()
        .filter_map(|l| ptxcheck::tokens(l).into_iter().find(|t| !t.starts_with('@')))
        .collect();
    // (what, the mnemonic the ordering implies, the mnemonics the same access has with another
    // ordering: none may appear)
    let accesses = [
        ("fetch_add_head", order::FETCH_ADD_HEAD, "atom.{}.gpu.global.add.u64"),
        ("tail_cache", order::TAIL_CACHE, "ld.{}.gpu.u64"),
        ("load_tail", order::LOAD_TAIL, "ld.{}.sys.u64"),
        ("raise_cache", order::RAISE_CACHE, "atom.{}.gpu.global.max.u64"),
        ("publish", order::PUBLISH, "st.{}.sys.global.v2.u64"),
    ];
    for (what, ordering, form) in accesses {
        let want = form.replace("{}", sem(ordering));
        assert!(mnemonics.contains(&want.as_str()), "{what}: no `{want}` in fifo_roundtrip:\n{mnemonics:#?}");
        for other in ["relaxed", "acquire", "release", "acq_rel", "sc"] {
            let wrong = form.replace("{}", other);
            assert!(
                other == sem(ordering) || !mnemonics.contains(&wrong.as_str()),
                "{what}: `{wrong}` in fifo_roundtrip, the protocol says {ordering:?}"
            );
        }
    }
    // No other form of the 16-byte publish (two 8-byte stores would need their own model).
    assert!(!mnemonics.iter().any(|m| m.starts_with("st.") && m.ends_with(".sys.global.u64")), "{mnemonics:#?}");
}
