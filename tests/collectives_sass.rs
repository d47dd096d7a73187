//! The collective kernels on the CPU: every kernel the host library launches is in the PTX,
//! assembles for sm_90, and its SASS holds what its algorithm and element type imply: the wait
//! on the previous grid and the early launch of the next (programmatic stream serialization), the
//! LL16 packet accesses (128-bit system-scope volatile stores and loads) or the 64-bit
//! release/acquire flags of the pipelined forms, the element type's sum, and no local-memory
//! loads (a value kept on the stack in a hot loop shows up as `LDL`).

use mscclpp_collectives::{CollectiveAlgorithm as Algorithm, DataType, Operation, PTX, kernel_name};
use mscclpp_rs::ptxcheck;

/// Every (kernel, operation, algorithm, type) the library can launch.
fn kernels() -> Vec<(String, Operation, Algorithm, DataType)> {
    let mut out: Vec<(String, Operation, Algorithm, DataType)> = vec![];
    for op in [Operation::AllReduce, Operation::AllGather, Operation::ReduceScatter] {
        for a in Algorithm::ALL {
            for dt in DataType::SUPPORTED {
                if let Some(name) = kernel_name(op, a, dt)
                    && !out.iter().any(|(n, ..)| *n == name)
                {
                    out.push((name, op, a, dt));
                }
            }
        }
    }
    out
}

#[test]
fn every_kernel_is_in_the_ptx() {
    let entries = ptxcheck::entries(PTX);
    let ks = kernels();
    assert_eq!(ks.len(), 32, "3 allreduce algorithms x 5 types + direct x 5, 2 allgather, 2 reduce-scatter x 5");
    for (name, ..) in &ks {
        assert!(entries.contains_key(name), "{name} is not an entry of the collectives' PTX");
    }
    assert!(PTX.contains(".target sm_90"));
}

#[test]
fn kernels_assemble_and_sass_matches_the_algorithm() {
    if !ptxcheck::tools_or_skip("collectives_sass") {
        return;
    }
    let path = std::env::temp_dir().join(format!("mscclpp-collectives-{}.ptx", std::process::id()));
    std::fs::write(&path, PTX).expect("writing the PTX");
    let asm = nvptx_builder::assemble(&path, "sm_90").expect("ptxas/cuobjdump");
    let _ = std::fs::remove_file(&path);
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let mut problems = vec![];
    for (name, _op, algo, dt) in kernels() {
        let Some(sass) = funcs.get(&name) else {
            problems.push(format!("{name}: no SASS function"));
            continue;
        };
        let ops = ptxcheck::opcodes(sass);
        let has = |op: &str| ops.contains(&op);
        let mut want = vec!["ACQBULK", "PREEXIT", "BAR.SYNC.DEFER_BLOCKING"];
        match algo {
            Algorithm::OneShotLl | Algorithm::TwoShotLl => {
                want.extend(["STG.E.128.STRONG.SYS", "LDG.E.128.STRONG.SYS"])
            }
            Algorithm::Pipelined | Algorithm::Direct => {
                want.extend(["ST.E.64.STRONG.SYS", "LD.E.64.STRONG.SYS", "MEMBAR.ALL.SYS"])
            }
        }
        for w in want {
            if !has(w) {
                problems.push(format!("{name}: SASS lacks {w}"));
            }
        }
        if let Some(l) = ops.iter().find(|o| o.starts_with("LDL")) {
            problems.push(format!("{name}: local-memory load {l} (a value spilled or kept on the stack)"));
        }
        // The element type's sum (allgather moves bytes only). ptxas turns add.rn.f16x2 into
        // HADD2 or fma(a, 1, b) (`HFMA2.MMA Rd, Ra, 1, 1, Rb`), add.rn.bf16x2 into the BF16_V2 fma.
        let f16_add = has("HADD2") || sass.lines().any(|l| l.contains("HFMA2.MMA R") && l.contains(", 1, 1, "));
        let sum_ok = match (name.starts_with("allgather"), dt) {
            (true, _) => true,
            (false, DataType::F32) => has("FADD"),
            (false, DataType::F16) => f16_add,
            (false, DataType::Bf16) => has("HFMA2.MMA.BF16_V2"),
            (false, _) => !has("FADD") && !has("HFMA2.MMA.BF16_V2") && !f16_add,
        };
        if !sum_ok {
            problems.push(format!("{name}: SASS does not hold the {} sum", dt.name()));
        }
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

/// The one-shot allreduce on a window (`WindowAllreduce`): release signals after the block's
/// puts, acquire waits, and f32 sums as plain round-to-nearest adds (the one-shot LL form's
/// bits), no local memory.
#[test]
fn window_allreduce_signals_with_release_and_sums_with_plain_adds() {
    let entries = ptxcheck::entries(PTX);
    let body = entries.get("allreduce_window_f32").expect("no allreduce_window_f32 in the collectives' PTX");
    let ins = ptxcheck::instructions(body);
    let g = ptxcheck::Cfg::of(PTX, body);
    for text in [
        "red.release.sys.add.u64",
        "ld.acquire.sys.u64",
        "add.rn.f32",
        "ld.global.v4",
        "barrier.sync 0;",
        "griddepcontrol.wait;",
    ] {
        assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in allreduce_window_f32");
    }
    assert!(g.always_before("barrier.sync 0;", "red.release.sys.add.u64"), "a signal before the block's barrier");
    assert!(g.always_before("griddepcontrol.wait;", "ld.acquire.sys.u64"), "a window access before the grid wait");
    assert!(!ins.iter().any(|l| l.starts_with("fma") || l.contains(".ftz")), "a fused or flushed add");
    assert!(!ins.iter().any(|l| l.contains(".relaxed.sys")), "a relaxed signal or wait");
    assert!(!ins.iter().any(|l| l.contains("ld.local") || l.contains("st.local")), "local memory");
}

/// The LL form of the window allreduce: LL16 packets out (128-bit volatile stores) and in
/// (128-bit volatile loads), f32 sums as plain round-to-nearest adds, and nothing that orders
/// memory between them (no fence, no signal, no acquire): the flags travel in the packets. The
/// grid wait comes before the first window access, the block barrier before the counters move.
#[test]
fn window_allreduce_ll_form_sends_packets_without_fences() {
    let entries = ptxcheck::entries(PTX);
    let body = entries.get("allreduce_window_ll_f32").expect("no allreduce_window_ll_f32 in the collectives' PTX");
    let ins = ptxcheck::instructions(body);
    let g = ptxcheck::Cfg::of(PTX, body);
    for text in [
        "st.volatile.global.v4.u32",
        "ld.volatile.global.v4.u32",
        "add.rn.f32",
        "barrier.sync 0;",
        "griddepcontrol.wait;",
        "griddepcontrol.launch_dependents;",
    ] {
        assert!(ins.iter().any(|l| l.starts_with(text)), "no `{text}` in allreduce_window_ll_f32");
    }
    let orders = |l: &str| {
        ["fence", "membar", ".acquire", ".release"].iter().any(|t| l.contains(t))
            || l.starts_with("red.")
            || l.starts_with("atom.")
    };
    if let Some(l) = ins.iter().find(|l| orders(l)) {
        panic!("`{l}` in the LL form: its packets need no ordering");
    }
    assert!(g.always_before("griddepcontrol.wait;", "st.volatile.global.v4.u32"), "a packet before the grid wait");
    assert!(g.always_before("griddepcontrol.wait;", "ld.volatile.global.v4.u32"), "a packet read before the grid wait");
    assert!(!ins.iter().any(|l| l.starts_with("fma") || l.contains(".ftz")), "a fused or flushed add");
    assert!(!ins.iter().any(|l| l.contains("ld.local") || l.contains("st.local")), "local memory");
}
