//! CPU checks of the memory-channel kernels in `ptx-tests/src/memchan.rs`: the copies use
//! 16-byte accesses with several loads in flight, the packets one volatile access each, and the
//! synchronisation its release/acquire instructions in the intended order.

use mscclpp_rs::ptxcheck;

/// The instructions of kernel `name` in the sm_90 module.
fn body(name: &str) -> Vec<String> {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let b = entries.get(name).unwrap_or_else(|| panic!("no kernel {name}"));
    ptxcheck::instructions(b).into_iter().map(str::to_string).collect()
}

/// The control flow of kernel `name` in the sm_90 module.
fn cfg(name: &str) -> ptxcheck::Cfg {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    ptxcheck::Cfg::of(mscclpp_rs::PTX, entries.get(name).unwrap_or_else(|| panic!("no kernel {name}")))
}

fn first(ins: &[String], text: &str) -> usize {
    ins.iter().position(|l| l.contains(text)).unwrap_or_else(|| panic!("`{text}` not found in\n{}", ins.join("\n")))
}

fn count(ins: &[String], text: &str) -> usize {
    ins.iter().filter(|l| l.contains(text)).count()
}

#[test]
fn put_and_get_copy_with_every_element_width_and_no_call() {
    for kernel in ["memchan_put", "memchan_get"] {
        let ins = body(kernel);
        for text in ["ld.global.v4.u32", "st.global.v4.u32", "ld.global.u64", "st.global.u64", "ld.global.u32 "] {
            first(&ins, text);
        }
        // The unrolled 16-byte loop issues four loads before its first store: some basic block
        // (where text order is program order) holds four loads ahead of its first store.
        let g = cfg(kernel);
        let batched = g.blocks().iter().any(|b| {
            let store = b.iter().position(|l| l.contains("st.global.v4.u32")).unwrap_or(b.len());
            b[..store].iter().filter(|l| l.contains("ld.global.v4.u32")).count() >= 4 && store < b.len()
        });
        assert!(batched, "{kernel}: loads not batched before the stores");
        assert!(!ins.iter().any(|l| l.starts_with("call")), "{kernel}: a call remains");
    }
}

#[test]
fn packets_travel_in_one_volatile_access() {
    for (kernel, ld, st) in [
        ("packet_pingpong_bench_ll16", "ld.volatile.global.v4.u32", "st.volatile.global.v4.u32"),
        ("packet_pingpong_bench_ll8", "ld.volatile.global.v2.u32", "st.volatile.global.v2.u32"),
    ] {
        let ins = body(kernel);
        first(&ins, ld);
        first(&ins, st);
        assert!(!ins.iter().any(|l| l.contains("fence") || l.contains(".release")), "{kernel}: packets need no fence");
        ptxcheck::assert_only_cold_wait_calls(kernel, &ins);
    }
}

#[test]
fn grid_barrier_orders_arrival_release_and_acquire() {
    let ins = body("grid_barrier_check");
    // Orders on every path of the control flow (the text order of blocks is only the layout).
    let g = cfg("grid_barrier_check");
    let (bar, inc, rel, fence) =
        ("barrier.sync 0;", "atom.acq_rel.gpu.inc.u32", "st.release.gpu.u32", "fence.acq_rel.gpu;");
    assert!(g.always_before(bar, inc), "the CTA barrier gathers the block's writes before the arrival");
    // Non-aligned barriers: the leader reaches the second one after a divergent spin.
    assert!(!ins.iter().any(|l| l.starts_with("bar.sync")), "an aligned barrier after divergent code");
    assert!(
        g.always_before(inc, rel) && g.always_before(inc, fence),
        "release / acquire of the generation after the arrival"
    );
    assert!(count(&ins, "barrier.sync 0;") >= 2, "a CTA barrier after the leader's wait");
    ptxcheck::assert_only_cold_wait_calls("grid_barrier_check", &ins);
}

#[test]
fn put_signal_kernel_has_the_barrier_release_and_acquire() {
    // (The order is the source's; the blocks' layout in the PTX text does not follow it.)
    let ins = body("put_signal_pingpong");
    for text in ["st.global.v4.u32", "barrier.sync 0;", "st.release.sys.global.u64", "ld.acquire.sys.u64"] {
        first(&ins, text);
    }
    ptxcheck::assert_only_cold_wait_calls("put_signal_pingpong", &ins);
}

#[test]
fn copy_sass_uses_128_bit_accesses() {
    let Some(funcs) = ptxcheck::main_sass_or_skip("memchan_ptx::sass") else { return };
    let put = &funcs["memchan_put"];
    assert!(put.matches("LDG.E.128 ").count() >= 4 && put.matches("STG.E.128 ").count() >= 4, "{put}");
    let ll16 = &funcs["packet_pingpong_bench_ll16"];
    assert!(ll16.contains("LDG.E.128.STRONG.SYS") && ll16.contains("STG.E.128.STRONG.SYS"), "{ll16}");
    let ll8 = &funcs["packet_pingpong_bench_ll8"];
    assert!(ll8.contains("LDG.E.64.STRONG.SYS") && ll8.contains("STG.E.64.STRONG.SYS"), "{ll8}");
}
