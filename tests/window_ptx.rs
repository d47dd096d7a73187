//! CPU checks of the window kernels in `ptx-tests/src/window.rs`: the signal is a system-scope
//! release after the block's writes, the waits system-scope acquires, the team barrier's arrival
//! a system-scope release store, and the window allreduce's sums plain
//! round-to-nearest adds in rank order (no fused or flushed forms), so that its results can match
//! the host's bit for bit.

use mscclpp_rs::ptxcheck;

/// The instructions and the control flow of kernel `name` in the sm_90 module.
fn kernel(name: &str) -> (Vec<String>, ptxcheck::Cfg) {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let b = entries.get(name).unwrap_or_else(|| panic!("no kernel {name}"));
    let ins = ptxcheck::instructions(b).into_iter().map(str::to_string).collect();
    (ins, ptxcheck::Cfg::of(mscclpp_rs::PTX, b))
}

const BAR: &str = "barrier.sync 0;";
const SIGNAL: &str = "red.release.sys.add.u64";
const WAIT: &str = "ld.acquire.sys.u64";
const ARRIVE: &str = "st.release.sys.u64";

#[test]
fn put_kernel_signals_with_release_after_the_block_barrier_and_waits_with_acquire() {
    let (ins, g) = kernel("win_put");
    assert!(g.always_before(BAR, SIGNAL), "the block's writes are gathered before the signal");
    // Signals, waits and arrivals sit in loops over the peers (which may run no iteration), so
    // their order is the source's; what each is, is checked here.
    for text in [SIGNAL, WAIT, ARRIVE] {
        assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in win_put");
    }
    assert!(!ins.iter().any(|l| l.contains(".relaxed.sys")), "a relaxed signal or wait");
    assert!(!ins.iter().any(|l| l.starts_with("bar.sync")), "an aligned barrier after divergent code");
    assert!(!ins.iter().any(|l| l.contains("ld.local") || l.contains("st.local")), "local memory in win_put");
    ptxcheck::assert_only_cold_wait_calls("win_put", &ins);
}

#[test]
fn window_allreduce_sums_with_plain_adds_between_two_team_barriers() {
    let (ins, g) = kernel("win_allreduce_f32");
    assert!(ins.iter().any(|l| l.starts_with("add.rn.f32")), "no f32 add");
    assert!(
        !ins.iter().any(|l| l.starts_with("fma") || l.contains(".ftz")),
        "a fused or flushed form would differ from the host's sums"
    );
    assert!(ins.iter().any(|l| l.starts_with(ARRIVE)) && ins.iter().any(|l| l.starts_with(WAIT)), "no team barrier");
    assert!(g.always_before(BAR, "add.rn.f32"), "the sums read the peers' windows after the block barrier");
    assert!(g.always_after(BAR, "add.rn.f32"), "a block barrier (and the closing team barrier) after the sums");
    ptxcheck::assert_only_cold_wait_calls("win_allreduce_f32", &ins);
}

#[test]
fn scoped_copies_gather_the_group_before_the_release_signal() {
    let (ins, _) = kernel("win_scoped");
    for text in [SIGNAL, WAIT, ARRIVE, BAR, "bar.warp.sync"] {
        assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in win_scoped");
    }
    assert!(ins.iter().any(|l| l.starts_with("ld.global.v4.u32")), "no 16-byte copy loads");
    assert!(ins.iter().any(|l| l.starts_with("st.global.v4.u32")), "no 16-byte copy stores");
    // A signal follows the group's barrier (warp or block), or the thread scope's single thread
    // made every store itself; either way it is a system-scope release, never relaxed.
    assert!(!ins.iter().any(|l| l.contains(".relaxed.sys")), "a relaxed signal or wait");
    assert!(!ins.iter().any(|l| l.starts_with("bar.sync")), "an aligned barrier after divergent code");
    ptxcheck::assert_only_cold_wait_calls("win_scoped", &ins);
}

#[test]
fn readme_fused_kernel_scales_then_sums_without_fused_forms() {
    let (ins, g) = kernel("scaled_sum_window");
    assert!(ins.iter().any(|l| l.starts_with("mul.rn.f32")), "no f32 multiply");
    assert!(ins.iter().any(|l| l.starts_with("add.rn.f32")), "no f32 add");
    assert!(
        !ins.iter().any(|l| l.starts_with("fma") || l.contains(".ftz")),
        "a fused or flushed form would differ from the host's products and sums"
    );
    assert!(g.always_before(BAR, SIGNAL), "the block's stores are gathered before the signals");
    assert!(ins.iter().any(|l| l.starts_with(WAIT)) && ins.iter().any(|l| l.starts_with(ARRIVE)));
    ptxcheck::assert_only_cold_wait_calls("scaled_sum_window", &ins);
}

/// This rank's own count in a window switch group's wait: a relaxed load of its own word, in
/// straight-line code after the signals (which sit in a loop over the ranks, like the waits).
const COUNT: &str = "ld.relaxed.sys.u64";

/// Whether every instruction holding `site` comes after a whole barrier round on every path: a
/// CTA barrier, the leader's own count (read after its signals, before its waits), then a CTA
/// barrier that every thread passes after it and before `site`.
fn after_a_round(g: &ptxcheck::Cfg, site: &str) -> bool {
    let (bars, counts, sites) = (g.find(BAR), g.find(COUNT), g.find(site));
    !sites.is_empty()
        && sites.iter().all(|&x| {
            bars.iter().any(|&b2| {
                g.dominates(b2, x)
                    && counts.iter().any(|&c| g.post_dominates(b2, c) && bars.iter().any(|&b1| g.dominates(b1, c)))
            })
        })
}

/// Whether every instruction holding `site` is followed, on every path, by a CTA barrier that
/// comes before the leader's own count (and so before its signals' release).
fn before_a_round(g: &ptxcheck::Cfg, site: &str) -> bool {
    let (bars, counts, sites) = (g.find(BAR), g.find(COUNT), g.find(site));
    !sites.is_empty()
        && sites
            .iter()
            .all(|&x| bars.iter().any(|&b| g.post_dominates(b, x) && counts.iter().any(|&c| g.dominates(b, c))))
}

/// The switch channels' allreduce on a window's switch group: both paths are compiled (the
/// multimem forms at the handle's multicast address, and the emulation's loads from every rank's
/// window with plain adds, no fused or flushed forms), every reduce of either behind a barrier
/// round and every broadcast followed by one; the signals are system-scope releases, the waits
/// system-scope acquires.
#[test]
fn window_switch_allreduce_compiles_both_paths_between_two_barrier_rounds() {
    for (name, ty) in [("win_switch_allreduce_f32x4", "v4.f32"), ("win_switch_allreduce_bf16x8", "v4.bf16x2")] {
        let (ins, g) = kernel(name);
        let load = format!("multimem.ld_reduce.relaxed.sys.global.add.{ty}");
        let store = format!("multimem.st.relaxed.sys.global.{ty}");
        for text in [load.as_str(), store.as_str(), SIGNAL, WAIT, COUNT] {
            assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in {name}");
        }
        // (The checks themselves: the parameters are read before any round, the rounds' counts
        // are not followed by another round on every path.)
        assert!(!after_a_round(&g, "ld.param::entry.b64") && !before_a_round(&g, COUNT), "{name}: vacuous checks");
        assert!(after_a_round(&g, &load), "{name}: a multicast reduce not behind the opening round");
        assert!(before_a_round(&g, &store), "{name}: a multicast broadcast not followed by the closing round");
        // The emulation (bf16 sums too are f32 adds, rounded after each).
        assert!(after_a_round(&g, "add.rn.f32"), "{name}: an emulated sum not behind the opening round");
        assert!(before_a_round(&g, "st.v4.b32"), "{name}: an emulated broadcast not followed by the closing round");
        assert!(
            !ins.iter().any(|l| l.starts_with("fma") || l.contains(".ftz")),
            "{name}: a fused or flushed form would differ from the host's sums"
        );
        assert!(!ins.iter().any(|l| l.starts_with("red.relaxed.sys")), "{name}: a relaxed signal");
        assert!(!ins.iter().any(|l| l.starts_with("ld.local") || l.starts_with("st.local")), "local memory in {name}");
        ptxcheck::assert_only_cold_wait_calls(name, &ins);
    }
}

/// The window switch barrier in both orderings: release signals and acquire waits, and the
/// relaxed forms.
#[test]
fn window_switch_barrier_uses_both_orderings() {
    let (ins, _) = kernel("win_switch_barrier_rounds");
    for text in [SIGNAL, WAIT, "red.relaxed.sys.add.u64", COUNT, "multimem.st.relaxed.sys.global.u32", "%globaltimer"] {
        assert!(ins.iter().any(|l| l.contains(text)), "no `{text}` in win_switch_barrier_rounds");
    }
    ptxcheck::assert_only_cold_wait_calls("win_switch_barrier_rounds", &ins);
}

/// The packet kernel stores LL16 packets with one 128-bit volatile store each and polls them
/// with 128-bit volatile loads, and orders nothing else: no fence, no signal, no acquire.
#[test]
fn packet_kernel_moves_packets_without_fences() {
    let (ins, _) = kernel("win_packets");
    for text in ["st.volatile.global.v4.u32", "ld.volatile.global.v4.u32"] {
        assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in win_packets");
    }
    let orders = |l: &str| {
        ["fence", "membar", ".acquire", ".release"].iter().any(|t| l.contains(t))
            || l.starts_with("red.")
            || l.starts_with("atom.")
    };
    assert!(!ins.iter().any(|l| orders(l)), "an ordering instruction in win_packets");
    assert!(!ins.iter().any(|l| l.contains("ld.local") || l.contains("st.local")), "local memory in win_packets");
    ptxcheck::assert_only_cold_wait_calls("win_packets", &ins);
}
