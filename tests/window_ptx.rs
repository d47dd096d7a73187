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
