//! The GPU side of the trigger FIFO uses the orderings of the protocol's table
//! (`mscclpp_device::protocol::fifo::order`), the same table the loom model and the host consumer
//! take theirs from: each producer access of the `fifo_roundtrip` kernel (push, then sync) must
//! carry the table's semantics in its PTX instruction, and a trigger is published as the
//! protocol says: word 0 with one 8-byte store, then word 1 (8 bytes further) with one 8-byte
//! release store, on every path, and no vector store.

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

/// The body of `fifo_roundtrip` (the sm_90 module).
fn body() -> String {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    entries.get("fifo_roundtrip").expect("fifo_roundtrip in the PTX").clone()
}

/// The mnemonic of an instruction, past a guard predicate.
fn mnemonic(line: &str) -> &str {
    ptxcheck::tokens(line).into_iter().find(|t| !t.starts_with('@')).unwrap_or("")
}

fn mnemonics(body: &str) -> Vec<&str> {
    ptxcheck::instructions(body).into_iter().map(mnemonic).collect()
}

#[test]
fn push_and_sync_use_the_protocol_orderings() {
    let body = body();
    let mnemonics = mnemonics(&body);
    // (what, the mnemonic the ordering implies, the mnemonics the same access has with another
    // ordering: none may appear)
    let accesses = [
        ("fetch_add_head", order::FETCH_ADD_HEAD, "atom.{}.gpu.global.add.u64"),
        ("tail_cache", order::TAIL_CACHE, "ld.{}.gpu.u64"),
        ("load_tail", order::LOAD_TAIL, "ld.{}.sys.u64"),
        ("raise_cache", order::RAISE_CACHE, "atom.{}.gpu.global.max.u64"),
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
}

/// The register of an instruction's address operand `[%rdN]` (the wrappers take a register).
fn address(line: &str) -> &str {
    let (_, rest) = line.split_once('[').unwrap_or_else(|| panic!("no address in `{line}`"));
    rest.split_once(']').map(|(a, _)| a.trim()).unwrap_or_else(|| panic!("no address in `{line}`"))
}

/// Whether `ins` computes register `reg` as `base + 8` (`add.s64 reg, base, 8` in either operand
/// order), the address of word 1 from word 0's.
fn is_word_one_of(ins: &[&str], reg: &str, base: &str) -> bool {
    ins.iter().any(|l| {
        let t = ptxcheck::tokens(l);
        matches!(t.as_slice(), ["add.s64", d, a, b] if *d == reg && ((*a == base && *b == "8") || (*a == "8" && *b == base)))
    })
}

#[test]
fn a_trigger_is_published_word_zero_then_word_one_with_release() {
    let body = body();
    let ins = ptxcheck::instructions(&body);
    let mnemonics = mnemonics(&body);
    let word0 = format!("st.{}.sys.global.u64", sem(order::STORE_WORD0));
    let word1 = format!("st.{}.sys.global.u64", sem(order::STORE_WORD1));
    assert_eq!(sem(order::STORE_WORD1), "release", "word 1 is the publication (the loom model tears without it)");
    assert_ne!(word0, word1, "word 0 and word 1 must be told apart by their ordering");
    // Exactly one store of each word (push is inlined once), and no other store to the ring.
    let stores: Vec<&str> = ins
        .iter()
        .copied()
        .filter(|l| mnemonic(l).starts_with("st.") && !mnemonic(l).starts_with("st.param"))
        .collect();
    let (w0, w1): (Vec<&str>, Vec<&str>) = (
        stores.iter().copied().filter(|l| mnemonic(l) == word0).collect(),
        stores.iter().copied().filter(|l| mnemonic(l) == word1).collect(),
    );
    assert!(
        w0.len() == 1 && w1.len() == 1 && stores.len() == 2,
        "want one `{word0}` and one `{word1}`, found {stores:#?}"
    );
    // No vector store of any kind (a 16-byte store's two elements are not ordered).
    assert!(
        !mnemonics.iter().any(|m| m.starts_with("st.") && (m.contains(".v2") || m.contains(".v4"))),
        "{mnemonics:#?}"
    );
    // Word 1 lies 8 bytes after word 0.
    let (a0, a1) = (address(w0[0]), address(w1[0]));
    assert!(is_word_one_of(&ins, a1, a0), "word 1's address {a1} is not word 0's {a0} + 8:\n{}", ins.join("\n"));
    // Word 0 before word 1 on every path, and word 1 after word 0 on every path to a return.
    let g = ptxcheck::Cfg::of(mscclpp_rs::PTX, &body);
    assert!(g.always_before(&word0, &word1), "`{word1}` without `{word0}` before it:\n{}", ins.join("\n"));
    assert!(g.always_after(&word1, &word0), "`{word0}` without `{word1}` after it:\n{}", ins.join("\n"));
}

/// The SASS of the publication: word 0's 8-byte store, the system-scope fence of the release,
/// then word 1's 8-byte store at offset 8, in that order in the text, and no 16-byte store.
#[test]
fn sass_stores_word_zero_fences_then_stores_word_one() {
    let Some(sass) = ptxcheck::main_sass_or_skip("fifo_ptx::sass") else { return };
    let text = sass.get("fifo_roundtrip").expect("fifo_roundtrip in the SASS");
    let ops: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("STG") || l.contains("MEMBAR") || l.contains("ST.E"))
        .map(str::trim)
        .collect();
    assert!(!ops.iter().any(|l| l.contains(".128")), "a 16-byte store in fifo_roundtrip:\n{}", ops.join("\n"));
    let at = |what: &dyn Fn(&str) -> bool| ops.iter().position(|l| what(l));
    let store = |l: &str, word1: bool| l.contains("STG.E.64.STRONG.SYS") && (l.contains(".64+0x8]") == word1);
    let (w0, fence, w1) = (at(&|l| store(l, false)), at(&|l| l.contains("MEMBAR.ALL.SYS")), at(&|l| store(l, true)));
    assert!(
        matches!((w0, fence, w1), (Some(a), Some(b), Some(c)) if a < b && b < c),
        "want word 0's STG.E.64.STRONG.SYS, MEMBAR.ALL.SYS, word 1's at +0x8, in that order:\n{}",
        ops.join("\n")
    );
}
