//! A wrapper's name states its memory order and scope, and its row's mnemonic must state the same
//! ones: `ld_acquire_sys_u64` is `ld.acquire.sys.u64`, never `ld.relaxed.sys.u64`.

use mscclpp_device::ptx::CHECKS;

/// The memory-order and scope qualifiers of PTX, as they appear in mnemonics (`.acq_rel`) and in
/// wrapper names (`_acq_rel_`).
const QUALIFIERS: [&str; 12] =
    ["relaxed", "acquire", "release", "acq_rel", "sc", "weak", "volatile", "mmio", "cta", "cluster", "gpu", "sys"];

/// Wrappers whose names leave out what their mnemonics state, with what each holds: (wrapper, the
/// qualifiers its name holds, the qualifiers its mnemonic holds). The mbarrier arrivals are named
/// without the order and scope that are PTX's defaults for them, and `shared_cta` names a state
/// space (`shared::cta`), not a scope. Pinned here, so a row that changes them still fails.
const UNSTATED: [(&str, &[&str], &[&str]); 4] = [
    ("fence_proxy_async_shared_cta", &["cta"], &[]),
    ("mbarrier_arrive", &[], &["release", "cta"]),
    ("mbarrier_arrive_expect_tx", &[], &["release", "cta"]),
    ("mbarrier_expect_tx", &[], &["relaxed", "cta"]),
];

/// The qualifiers of [`QUALIFIERS`] that `words` holds.
fn qualifiers<'a>(words: impl Iterator<Item = &'a str> + Clone) -> Vec<&'static str> {
    QUALIFIERS.into_iter().filter(|q| words.clone().any(|w| w == *q)).collect()
}

/// The words of a wrapper name, split at `_` with `acq_rel` kept whole.
fn name_words(name: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("acq_rel") {
            out.push("acq_rel");
            rest = r.strip_prefix('_').unwrap_or(r);
            continue;
        }
        let (w, r) = rest.split_once('_').unwrap_or((rest, ""));
        out.push(w);
        rest = r;
    }
    out
}

/// Exists for a planted bug caught only narrowly before: an acquire wrapper's row turned into a
/// relaxed one (`"ld.acquire.gpu.u32"` written as `"ld.relaxed.gpu.u32"`): the check kernel then
/// held the relaxed instruction and the SASS was the same, and only a relaxed sibling emitting the
/// same instruction gave it away. Here every wrapper's order and scope words and its mnemonic's
/// qualifiers must agree exactly, both ways (the few names that leave them out: [`UNSTATED`]).
#[test]
fn every_wrapper_names_the_order_and_scope_of_its_instruction() {
    let mut problems = Vec::new();
    let mut compared = 0;
    for c in CHECKS {
        let Some(mnemonic) = c.ptx.first() else { continue };
        let in_name = qualifiers(name_words(c.wrapper).into_iter());
        let in_mnemonic = qualifiers(mnemonic.split('.'));
        let agree = match UNSTATED.iter().find(|u| u.0 == c.wrapper) {
            Some(&(_, name, mnemonic)) => in_name == name && in_mnemonic == mnemonic,
            None => in_name == in_mnemonic,
        };
        if !agree {
            problems.push(format!("{}: {in_name:?} in its name, {in_mnemonic:?} in `{mnemonic}`", c.wrapper));
        }
        compared += usize::from(!in_mnemonic.is_empty());
    }
    assert!(problems.is_empty(), "{} wrappers disagree with their rows:\n{}", problems.len(), problems.join("\n"));
    assert!(compared > 50, "only {compared} wrappers have an order or scope");
    for (w, _, _) in UNSTATED {
        assert!(CHECKS.iter().any(|c| c.wrapper == w), "UNSTATED names {w}, which has no check");
    }
}

#[test]
fn name_words_keep_acq_rel_whole() {
    assert_eq!(name_words("fence_acq_rel_gpu"), ["fence", "acq_rel", "gpu"]);
    assert_eq!(name_words("atom_acq_rel_sys_add_u32"), ["atom", "acq_rel", "sys", "add", "u32"]);
    assert_eq!(qualifiers(["ld", "acquire", "sys", "u64"].into_iter()), ["acquire", "sys"]);
}
