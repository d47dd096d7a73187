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

fn last(ins: &[String], text: &str) -> usize {
    ins.iter().rposition(|l| l.contains(text)).unwrap_or_else(|| panic!("`{text}` not found"))
}

/// The only calls a switch kernel may keep are the waits' cold expiry path (print and trap).
fn assert_only_expiry_calls(kernel: &str, ins: &[String]) {
    let calls: Vec<_> = ins.iter().filter(|l| l.starts_with("call")).collect();
    assert!(calls.iter().all(|l| l.contains("poll7expired")), "{kernel}: stray call in {calls:?}");
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
        let (l, s) = (first(&ins, &load), first(&ins, &store));
        assert!(l < s, "{kernel}: the broadcast follows the reduce");
        assert!(first(&ins, SIGNAL) < l, "{kernel}: opening signal before the first reduce");
        assert!(first(&ins, WAIT) < l, "{kernel}: opening wait before the first reduce");
        assert!(last(&ins, SIGNAL) > last(&ins, &store), "{kernel}: closing signal after the last broadcast");
        assert!(last(&ins, WAIT) > last(&ins, SIGNAL), "{kernel}: closing wait after the closing signal");
        assert!(first(&ins, "barrier.sync 0;") < first(&ins, SIGNAL), "{kernel}: CTA barrier before the release");
        assert_only_expiry_calls(kernel, &ins);
    }
}

#[test]
fn red_allreduce_adds_between_two_barrier_rounds() {
    let ins = body("switch_allreduce_red_f32x4");
    let red = "multimem.red.relaxed.sys.global.add.v4.f32 ";
    assert!(first(&ins, SIGNAL) < first(&ins, red));
    assert!(last(&ins, SIGNAL) > last(&ins, red));
    assert!(!ins.iter().any(|l| l.contains("multimem.ld_reduce")));
    assert_only_expiry_calls("switch_allreduce_red_f32x4", &ins);
}

#[test]
fn barrier_kernel_uses_both_orderings() {
    let ins = body("switch_barrier_rounds");
    for text in [SIGNAL, WAIT, "multimem.red.relaxed.sys.global.add.u64 ", "ld.relaxed.sys.u64 ", "%globaltimer"] {
        first(&ins, text);
    }
    assert_only_expiry_calls("switch_barrier_rounds", &ins);
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
