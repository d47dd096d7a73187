//! Verification tier 3 on the CPU: every PTX wrapper's check kernel holds its instruction, keeps
//! no call, stays short; the whole module assembles with ptxas for sm_90 (and the sm_100a module
//! for sm_100a) and the SASS holds the expected opcodes; and no public wrapper lacks a check.

use std::collections::BTreeSet;
use std::path::Path;

use mscclpp_rs::checks::{BARRIER_COUNTS, Check, all_checks, sm90_checks, sm100a_checks};
use mscclpp_rs::ptxcheck;

#[test]
fn every_check_kernel_holds_its_instruction() {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let mut problems: Vec<String> = sm90_checks().flat_map(|c| ptxcheck::check_ptx(c, &entries)).collect();
    let entries = ptxcheck::entries(mscclpp_rs::PTX_SM100A);
    problems.extend(sm100a_checks().flat_map(|c| ptxcheck::check_ptx(c, &entries)).map(|p| format!("sm_100a: {p}")));
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn sm100a_forms_only_in_the_sm100a_module() {
    let plain = ptxcheck::entries(mscclpp_rs::PTX);
    let sm100a = ptxcheck::entries(mscclpp_rs::PTX_SM100A);
    for c in sm100a_checks() {
        assert!(!plain.contains_key(c.kernel), "{} is in the sm_90 module", c.kernel);
        assert!(sm100a.contains_key(c.kernel), "{} is missing from the sm_100a module", c.kernel);
    }
    assert!(mscclpp_rs::PTX_SM100A.contains(".target sm_100a"));
    assert!(mscclpp_rs::PTX.contains(".target sm_90"));
}

#[test]
fn module_assembles_and_sass_holds_the_opcodes() {
    if !ptxcheck::tools_or_skip("ptx_checks::sass") {
        return;
    }
    for checked in [false, true] {
        let asm = nvptx_builder::assemble(&mscclpp_rs::ptx_path(checked), "sm_90").expect("ptxas/cuobjdump");
        if checked {
            continue;
        }
        let funcs = ptxcheck::sass_functions(&asm.sass);
        let problems: Vec<String> = sm90_checks().flat_map(|c| ptxcheck::check_sass(c, &funcs)).collect();
        assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
        barriers_in_divergent_code_are_not_duplicated_in_sass(&funcs);
    }
}

#[test]
fn sm100a_module_assembles_and_sass_holds_the_opcodes() {
    if !ptxcheck::tools_or_skip("ptx_checks::sass") {
        return;
    }
    let asm = nvptx_builder::assemble(&mscclpp_rs::ptx_sm100a_path(), "sm_100a").expect("ptxas/cuobjdump");
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let problems: Vec<String> = sm100a_checks().flat_map(|c| ptxcheck::check_sass(c, &funcs)).collect();
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn every_public_wrapper_has_a_check_and_no_check_is_stale() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("device/src/ptx");
    let wrappers: BTreeSet<String> =
        ptxcheck::public_wrappers(&dir).expect("reading device/src/ptx").into_iter().collect();
    assert!(wrappers.len() > 50, "found only {} wrappers in {}", wrappers.len(), dir.display());
    let checked: BTreeSet<String> = all_checks().map(|c| c.wrapper.to_string()).collect();
    let missing: Vec<_> = wrappers.difference(&checked).collect();
    let stale: Vec<_> = checked.difference(&wrappers).collect();
    assert!(missing.is_empty(), "public wrappers without a check: {missing:?}");
    assert!(stale.is_empty(), "checks for wrappers that do not exist: {stale:?}");
    let mut seen = BTreeSet::new();
    for c in all_checks() {
        assert!(seen.insert(c.wrapper), "duplicate check for {}", c.wrapper);
    }
}

#[test]
fn checked_build_differs_only_by_assertions() {
    // The checked module must contain the device-side argument checks (a vprintf call and a trap
    // in bulk_roundtrip), the plain module must not: it calls only the wait's `expired` and
    // `aborted` (each prints and traps).
    let plain = ptxcheck::entries(mscclpp_rs::PTX);
    let checked = ptxcheck::entries(mscclpp_rs::PTX_CHECKED);
    assert_eq!(plain.keys().collect::<Vec<_>>(), checked.keys().collect::<Vec<_>>());
    let count = |body: &str| ptxcheck::instructions(body).iter().filter(|l| l.starts_with("call")).count();
    assert_eq!(count(&plain["bulk_roundtrip"]), 2, "plain: only the wait's timeout and abort calls");
    assert!(count(&checked["bulk_roundtrip"]) > 1, "checked build lacks the argument checks");
}

/// Every bounded wait can be aborted by the host: the module defines the global the host writes
/// the abort word's address into (by that name, 8 bytes, visible to `cuModuleGetGlobal`), and a
/// kernel with a wait loads it (mutation caught: `abort::check` dropped from `spin_until`).
#[test]
fn waits_read_the_host_abort_word() {
    let sym = mscclpp_device::abort::SYMBOL;
    let decl = format!(".visible .global .align 8 .b8 {sym}[8];");
    assert!(mscclpp_rs::PTX.lines().any(|l| l.trim() == decl), "no `{decl}` in the module");
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let loads = |kernel: &str| {
        ptxcheck::instructions(&entries[kernel])
            .into_iter()
            .filter(|l| l.starts_with("ld.") && l.contains(&format!("[{sym}]")))
            .count()
    };
    assert!(loads("bulk_roundtrip") >= 1, "bulk_roundtrip's barrier wait does not read the abort word");
    assert!(loads("mp_barrier") >= 1, "mp_barrier's semaphore wait does not read the abort word");
}

#[test]
fn proxy_atomic_add_kernel_assembles() {
    if !ptxcheck::tools_or_skip("ptx_checks::sass") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mscclpp-rs-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy_atomic_add.ptx");
    std::fs::write(&path, mscclpp_host::transport::engine::atomic_add_ptx()).unwrap();
    let asm = nvptx_builder::assemble(&path, "sm_90").expect("ptxas rejected the proxy kernel");
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let f = funcs.get("mscclpp_proxy_atomic_add").expect("kernel in SASS");
    assert!(f.contains("REDG.E.ADD.64.STRONG.SYS"), "{f}");
}

#[test]
fn barriers_in_divergent_code_are_not_duplicated_in_ptx() {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    for &(kernel, want) in BARRIER_COUNTS {
        let body = entries.get(kernel).unwrap_or_else(|| panic!("{kernel}: no such .entry in the PTX"));
        let got = ptxcheck::ptx_barriers(body);
        assert_eq!(got, want, "{kernel}: {got} barrier instructions for {want} in the source:\n{body}");
    }
}

/// The SASS half of the divergent-barrier check, run on the module that
/// `module_assembles_and_sass_holds_the_opcodes` assembles (the assembler's files are per module
/// path: a second test assembling the same file at the same time would race with it).
fn barriers_in_divergent_code_are_not_duplicated_in_sass(funcs: &std::collections::BTreeMap<String, String>) {
    for &(kernel, want) in BARRIER_COUNTS {
        let text = funcs.get(kernel).unwrap_or_else(|| panic!("{kernel}: no such function in the SASS"));
        let got = ptxcheck::sass_barriers(text);
        assert_eq!(got, want, "{kernel}: {got} BAR.SYNC for {want} barriers in the source:\n{text}");
    }
}

#[test]
fn barrier_counting_sees_every_spelling() {
    let body = "\tbar.sync \t0;\n\tbarrier.sync 0;\n\t@%p1 bar.sync 1;\n\tbarrier.sync.aligned 0;\n\
                \tbar.red.popc.u32 %r1, 0, %p1;\n\tbar.arrive 1, 64;\n// bar.sync 0;\n";
    assert_eq!(ptxcheck::ptx_barriers(body), 4);
    let sass =
        "BAR.SYNC.DEFER_BLOCKING 0x0\n@P0 BAR.SYNC 0x1\nBAR.ARV 0x1, 0x40\nBAR.SYNC.DEFER_BLOCKING R13, R13\nEXIT\n";
    assert_eq!(ptxcheck::sass_barriers(sass), 2);
}

/// Pairs `(check, kernel)` where the check is also met by another wrapper's check kernel, with
/// the reason it cannot tell them apart. Every other check fails on every other kernel.
const SHARED_EXPECTATIONS: &[(&str, &str, &str)] = &[];

/// Every check evaluated against every other check kernel of its module (PTX and SASS halves):
/// a check that another wrapper's kernel also satisfies would not notice that wrapper emitted in
/// place of its own.
#[test]
fn no_check_is_satisfied_by_another_checks_kernel() {
    let Some(sass90) = ptxcheck::main_sass_or_skip("ptx_checks::cross") else { return };
    let asm = nvptx_builder::assemble(&mscclpp_rs::ptx_sm100a_path(), "sm_100a").expect("ptxas/cuobjdump");
    let sass100 = ptxcheck::sass_functions(&asm.sass);
    let modules: [(Vec<&Check>, _, _); 2] = [
        (sm90_checks().collect(), ptxcheck::entries(mscclpp_rs::PTX), sass90),
        (sm100a_checks().collect(), ptxcheck::entries(mscclpp_rs::PTX_SM100A), sass100),
    ];
    let mut found = Vec::new();
    for (checks, entries, sass) in &modules {
        for c in checks {
            for other in checks {
                if other.wrapper == c.wrapper {
                    continue;
                }
                let k = other.kernel;
                let (Some(body), Some(text)) = (entries.get(k), sass.get(k)) else { continue };
                if ptxcheck::ptx_problems(c, k, body).is_empty() && ptxcheck::sass_problems(c, k, text).is_empty() {
                    found.push((c.wrapper, other.wrapper));
                }
            }
        }
    }
    let unexpected: Vec<_> =
        found.iter().filter(|(c, k)| !SHARED_EXPECTATIONS.iter().any(|(ec, ek, _)| ec == c && ek == k)).collect();
    assert!(unexpected.is_empty(), "checks met by another wrapper's kernel (check, kernel): {unexpected:#?}");
    let stale: Vec<_> = SHARED_EXPECTATIONS.iter().filter(|(c, k, _)| !found.contains(&(c, k))).collect();
    assert!(stale.is_empty(), "listed exceptions that no longer hold: {stale:?}");
}

/// A check without SASS texts says why.
#[test]
fn every_check_has_sass_texts_or_a_reason() {
    let bare: Vec<_> = all_checks().filter(|c| c.sass.is_empty() && c.no_sass.is_none()).map(|c| c.wrapper).collect();
    assert!(bare.is_empty(), "checks with no SASS texts and no reason: {bare:?}");
    let both: Vec<_> = all_checks().filter(|c| !c.sass.is_empty() && c.no_sass.is_some()).map(|c| c.wrapper).collect();
    assert!(both.is_empty(), "checks with SASS texts and a reason for having none: {both:?}");
}

/// The print wrappers' functions call `vprintf` and nothing else (their check kernels call the wrapper, which is
/// not inlined).
#[test]
fn print_wrappers_call_vprintf() {
    let funcs = ptxcheck::funcs(mscclpp_rs::PTX);
    for name in ["print_failure", "print_timeout", "print_panic", "print_abort"] {
        let bodies: Vec<_> = funcs.iter().filter(|(sym, _)| ptxcheck::names(sym, name)).collect();
        assert_eq!(bodies.len(), 1, "{name}: {} definitions", bodies.len());
        let calls: Vec<_> = ptxcheck::instructions(bodies[0].1).into_iter().filter(|l| l.starts_with("call")).collect();
        // `print_abort` has one format per cause, so one or two calls; every one is `vprintf`.
        assert!(
            (1..=2).contains(&calls.len()) && calls.iter().all(|c| ptxcheck::tokens(c).contains(&"vprintf")),
            "{name}: calls {calls:?}, not vprintf alone"
        );
    }
}

/// The wrappers that are not rows: the device messages, calls rather than instruction forms, whose
/// checks are written by hand next to them (`device/src/ptx/print.rs`).
const HAND_ENTRIES: &[&str] = &["print_failure", "print_timeout", "print_panic", "print_abort"];

/// Every wrapper is a row, read here from the source text, and its check (which the row's macro
/// builds) names the row's mnemonic first: a macro that built the check from anything else, or a
/// table made by hand, fails here. A hand row's body takes its instruction from `mnemonic!()`, and
/// its doc shows the mnemonic.
#[test]
fn macro_rows_emit_what_their_checks_expect() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("device/src/ptx");
    let rows = ptxcheck::macro_rows(&dir).expect("reading device/src/ptx");
    assert!(rows.len() > 300, "found only {} rows", rows.len());
    let mut problems = Vec::new();
    for row in &rows {
        let Some(c) = all_checks().find(|c| c.wrapper == row.name) else {
            problems.push(format!("{}: no check", row.name));
            continue;
        };
        if c.ptx.first() != Some(&row.instruction.as_str()) {
            problems.push(format!("{}: the row names `{}`, the check expects {:?}", row.name, row.instruction, c.ptx));
        }
        if let Some(text) = &row.hand {
            let (asm, from_row) = (text.matches("asm!(").count(), text.matches("mnemonic!()").count());
            if asm != from_row {
                problems.push(format!("{}: {asm} asm! but {from_row} mnemonic!() in the body", row.name));
            }
            let doc = text.lines().map(str::trim).find(|l| l.starts_with("///")).unwrap_or_default();
            if !doc.contains(&row.instruction) {
                problems
                    .push(format!("{}: the doc's first line `{doc}` does not show `{}`", row.name, row.instruction));
            }
        }
    }
    let not_rows: BTreeSet<&str> =
        all_checks().map(|c| c.wrapper).filter(|w| !rows.iter().any(|r| r.name == *w)).collect();
    if not_rows != HAND_ENTRIES.iter().copied().collect() {
        problems.push(format!("checks without a row: {not_rows:?}, expected only {HAND_ENTRIES:?}"));
    }
    let stray = ptxcheck::asm_outside_rows(&dir).expect("reading device/src/ptx");
    problems.extend(stray.into_iter().map(|l| format!("asm! outside a macro and a hand row: {l}")));
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

/// Inline assembly lives only in `device/src/ptx/`: every other Rust source of the repository
/// (every crate, kernel crate, test, bench, example, build script and xtask; build outputs under
/// `target/` aside) uses its wrappers. Comments and literals that name the macros (as this file
/// does) are not assembly.
#[test]
fn no_inline_asm_outside_the_ptx_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ptx = root.join("device/src/ptx");
    let files = ptxcheck::repository_rust_files(root).expect("reading sources");
    // The scan reaches every crate: each of these holds Rust sources.
    for dir in [
        "device/src",
        "host/src",
        "nvptx-builder/src",
        "collectives/src",
        "collectives/kernels/src",
        "ep/src",
        "ep/kernels/src",
        "executor/src",
        "executor/kernels/src",
        "plan/src",
        "xtask/src",
        "examples/allreduce/src",
        "examples/allreduce/kernels/src",
        "examples/quickstart/src",
        "examples/quickstart/kernels/src",
        "ptx-tests/src",
        "src",
        "tests",
        "benches",
    ] {
        assert!(files.iter().any(|f| f.starts_with(root.join(dir))), "no Rust source found under {dir}");
    }
    // And every Rust file git knows (when git is there to ask).
    if let Ok(out) = std::process::Command::new("git").args(["ls-files", "-z", "*.rs"]).current_dir(root).output()
        && out.status.success()
    {
        let missed: Vec<_> = String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|f| !f.is_empty() && !files.contains(&root.join(f)))
            .map(str::to_string)
            .collect();
        assert!(missed.is_empty(), "tracked Rust sources the scan does not read: {missed:?}");
    }
    let outside: Vec<_> = files.into_iter().filter(|f| !f.starts_with(&ptx)).collect();
    let found: Vec<String> = ptxcheck::inline_asm_uses(&outside)
        .expect("reading sources")
        .into_iter()
        .map(|(f, line, text)| format!("{}:{line}: {text}", f.display()))
        .collect();
    assert!(found.is_empty(), "inline assembly outside device/src/ptx:\n{}", found.join("\n"));
}

/// The locations a trap prints are the kernel's call sites, checked on the CPU from the module
/// (the GPU trap tests `unit_bulk` and `unit_sync` check the printed line): in the checked
/// build, every `Location` that `bulk_roundtrip` hands `poll::fail` is a line of the kernel's own
/// `src/bulk.rs` that calls a bulk copy, the one marked as the size check's among them; and
/// `panic_out_of_bounds`'s bounds check names the marked indexing line of `src/sync.rs`. A broken
/// `#[track_caller]` chain (the device's `bulk::check` or `bulk_load` without it) names a line of
/// the device library instead.
#[test]
fn trap_locations_are_the_kernels_call_sites() {
    use mscclpp_rs::testing::{TRAP_SITE_BULK_SIZE, TRAP_SITE_OUT_OF_BOUNDS, line_of};
    let cases = [
        (
            mscclpp_rs::PTX_CHECKED,
            "bulk_roundtrip",
            "fail",
            "src/bulk.rs",
            include_str!("../ptx-tests/src/bulk.rs"),
            TRAP_SITE_BULK_SIZE,
            "bulk::",
        ),
        (
            mscclpp_rs::PTX,
            "panic_out_of_bounds",
            "panic_bounds_check",
            "src/sync.rs",
            include_str!("../ptx-tests/src/sync.rs"),
            TRAP_SITE_OUT_OF_BOUNDS,
            "[",
        ),
    ];
    for (ptx, kernel, callee, file, src, marker, call) in cases {
        let locs = ptxcheck::locations(ptx);
        let entries = ptxcheck::entries(ptx);
        let body = entries.get(kernel).unwrap_or_else(|| panic!("no kernel {kernel}"));
        let at: Vec<&ptxcheck::Location> =
            ptxcheck::call_symbols(body, callee).iter().flatten().filter_map(|s| locs.get(s)).collect();
        assert!(!at.is_empty(), "{kernel}: no location handed to `{callee}`");
        let src_lines: Vec<&str> = src.lines().collect();
        for l in &at {
            let text = src_lines.get(l.line as usize - 1).copied().unwrap_or_default();
            assert!(l.file == file, "{kernel}: `{callee}` is handed {l:?}, not a location in the kernel's {file}");
            assert!(text.contains(call), "{kernel}: `{callee}` is handed {l:?}, not a call site: `{}`", text.trim());
        }
        let want = line_of(src, marker);
        assert!(at.iter().any(|l| l.line == want), "{kernel}: no location at the marked line {want}: {at:?}");
    }
}

/// The safe device API's block barrier and timer are the instructions they stand for:
/// `sync::block_barrier` is one `barrier.sync 0;` (the non-aligned form, safe in divergent code;
/// never the aligned `bar.sync`), and `poll::now_ns` reads `%globaltimer`.
#[test]
fn block_barrier_and_now_ns_are_their_instructions() {
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let barrier = &entries["block_barrier_exchange"];
    let ins = ptxcheck::instructions(barrier);
    assert_eq!(ptxcheck::ptx_barriers(barrier), 1, "one barrier:\n{barrier}");
    assert!(ins.contains(&"barrier.sync 0;"), "no `barrier.sync 0;`:\n{barrier}");
    assert!(!ins.iter().any(|l| l.starts_with("bar.sync") || l.contains(".aligned")), "an aligned barrier:\n{barrier}");
    let timer = ptxcheck::instructions(&entries["global_timer_now"]);
    assert!(timer.iter().any(|l| ptxcheck::tokens(l).contains(&"%globaltimer")), "no %globaltimer read: {timer:#?}");
}

/// Exists for a planted bug caught only narrowly before: the budget's expiry removed from
/// `poll::spin_until` (a wait then spins until its condition holds, however long; only an exact
/// count of the calls in one kernel noticed). Every kernel with a bounded wait (it reads the
/// host's abort word, which only `spin_until` does) calls the timeout's print-and-trap,
/// `poll::expired`: its wait can run out.
#[test]
fn every_bounded_wait_can_run_out() {
    let sym = mscclpp_device::abort::SYMBOL;
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let calls_expired = |l: &str| {
        l.starts_with("call")
            && ptxcheck::tokens(l).iter().any(|t| t.trim_matches([',', '(', ')', ';']).ends_with("4poll7expired"))
    };
    let (mut waits, mut missing) = (0, Vec::new());
    for (kernel, body) in &entries {
        let ins = ptxcheck::instructions(body);
        if !ins.iter().any(|l| l.starts_with("ld.") && l.contains(&format!("[{sym}]"))) {
            continue;
        }
        waits += 1;
        if !ins.iter().any(|l| calls_expired(l)) {
            missing.push(kernel.as_str());
        }
    }
    assert!(waits >= 10, "only {waits} kernels with a bounded wait");
    assert!(missing.is_empty(), "kernels whose waits never run out: {missing:?}");
}
