//! CPU checks of the switch-channel kernels in `ptx-tests/src/switch.rs` (they cannot run here:
//! no multicast): the composed API emits the intended instructions in the intended order, and
//! the SASS holds the multicast load, store and reduction.

use mscclpp_rs::ptxcheck;

/// The instructions of kernel `name` in the sm_90 module.
fn body(name: &str) -> Vec<String> {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let b = entries.get(name).unwrap_or_else(|| panic!("no kernel {name}"));
    ptxcheck::instructions(b).into_iter().map(str::to_string).collect()
}

fn first(ins: &[String], text: &str) -> usize {
    ins.iter().position(|l| l.contains(text)).unwrap_or_else(|| panic!("`{text}` not found in\n{}", ins.join("\n")))
}

/// The control flow of kernel `name` in the sm_90 module.
fn cfg(name: &str) -> ptxcheck::Cfg {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    ptxcheck::Cfg::of(mscclpp_rs::PTX, entries.get(name).unwrap_or_else(|| panic!("no kernel {name}")))
}

const BAR: &str = "barrier.sync 0;";

/// Whether every instruction holding `site` comes after a whole barrier round on every path: a
/// CTA barrier, the leader's signal and wait (only the leader runs them), then a CTA barrier
/// that every thread passes after the wait and before `site`.
fn after_a_round(g: &ptxcheck::Cfg, site: &str) -> bool {
    let (bars, sigs, waits) = (g.find(BAR), g.find(SIGNAL), g.find(WAIT));
    let sites = g.find(site);
    !sites.is_empty()
        && sites.iter().all(|&x| {
            bars.iter().any(|&b2| {
                g.dominates(b2, x)
                    && waits.iter().any(|&w| {
                        g.post_dominates(b2, w)
                            && sigs.iter().any(|&s| g.dominates(s, w) && bars.iter().any(|&b1| g.dominates(b1, s)))
                    })
            })
        })
}

/// Whether every instruction holding `site` is followed, on every path, by a CTA barrier that
/// comes before the leader's signal and its wait.
fn before_a_round(g: &ptxcheck::Cfg, site: &str) -> bool {
    let (bars, sigs, waits) = (g.find(BAR), g.find(SIGNAL), g.find(WAIT));
    let sites = g.find(site);
    !sites.is_empty()
        && sites.iter().all(|&x| {
            bars.iter().any(|&b| {
                g.post_dominates(b, x)
                    && sigs.iter().any(|&s| g.dominates(b, s) && waits.iter().any(|&w| g.dominates(s, w)))
            })
        })
}

const SIGNAL: &str = "multimem.red.release.sys.global.add.u64 ";
const WAIT: &str = "ld.acquire.sys.u64 ";

#[test]
fn allreduce_kernels_reduce_and_broadcast_between_two_barrier_rounds() {
    for (kernel, ty) in [
        ("switch_allreduce_f32x4", "v4.f32"),
        ("switch_allreduce_bf16x8", "v4.bf16x2"),
        ("switch_allreduce_f16x8", "v4.f16x2"),
    ] {
        let ins = body(kernel);
        let load = format!("multimem.ld_reduce.relaxed.sys.global.add.{ty} ");
        let store = format!("multimem.st.relaxed.sys.global.{ty} ");
        // Orders on every path of the control flow (the text order of blocks is only the layout).
        let g = cfg(kernel);
        first(&ins, &load);
        first(&ins, &store);
        assert!(g.always_before(&load, &store), "{kernel}: the broadcast follows a reduce");
        assert!(after_a_round(&g, &load), "{kernel}: a reduce not behind the opening round");
        assert!(before_a_round(&g, &store), "{kernel}: a broadcast not followed by the closing round");
        ptxcheck::assert_only_cold_wait_calls(kernel, &ins);
    }
}

#[test]
fn red_allreduce_adds_between_two_barrier_rounds() {
    let ins = body("switch_allreduce_red_f32x4");
    let red = "multimem.red.relaxed.sys.global.add.v4.f32 ";
    let g = cfg("switch_allreduce_red_f32x4");
    assert!(after_a_round(&g, red), "an add not behind the opening round");
    assert!(before_a_round(&g, red), "an add not followed by the closing round");
    assert!(!ins.iter().any(|l| l.contains("multimem.ld_reduce")));
    ptxcheck::assert_only_cold_wait_calls("switch_allreduce_red_f32x4", &ins);
}

#[test]
fn barrier_kernel_uses_both_orderings() {
    let ins = body("switch_barrier_rounds");
    for text in [SIGNAL, WAIT, "multimem.red.relaxed.sys.global.add.u64 ", "ld.relaxed.sys.u64 ", "%globaltimer"] {
        first(&ins, text);
    }
    ptxcheck::assert_only_cold_wait_calls("switch_barrier_rounds", &ins);
}

#[test]
fn allreduce_sass_holds_the_multicast_accesses() {
    let Some(funcs) = ptxcheck::main_sass_or_skip("switch_ptx::sass") else { return };
    let f = &funcs["switch_allreduce_f32x4"];
    for op in ["LDGMC.E.ADD.F32x4.RN.STRONG.SYS", "STG.E.128.STRONG.SYS", "REDG.E.ADD.64.STRONG.SYS", "MEMBAR.ALL.SYS"]
    {
        assert!(f.contains(op), "switch_allreduce_f32x4 SASS lacks {op}");
    }
    assert!(funcs["switch_allreduce_red_f32x4"].contains("REDG.E.ADD.F32x4.FTZ.RN.STRONG.SYS"));
}
