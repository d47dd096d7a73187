//! The readers and checks on small texts.

use super::*;
use crate::checks::Check;

const PTX: &str = r#"
.visible .entry k1(
	.param .u64 k1_param_0
)
{
	.reg .b32 	%r<3>;

	// begin inline asm
	{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%r1], %r2; selp.u32 %r3, 1, 0, p; }
	// end inline asm
$L__BB0_1:
	ret;

}
	// .globl	k2
.visible .entry k2()
{
	{ // callseq 0, 0
	call.uni f, ();
	} // callseq 0
	ret;
}
"#;

#[test]
fn finds_entry_bodies_and_instructions() {
    let e = entries(PTX);
    assert_eq!(e.len(), 2);
    let ins = instructions(&e["k1"]);
    assert_eq!(ins.len(), 2, "{ins:?}");
    assert!(ins[0].contains("mbarrier.try_wait.parity"));
    let ins2 = instructions(&e["k2"]);
    assert!(ins2.iter().any(|l| l.starts_with("call")), "{ins2:?}");
}

/// A check of kernel `kernel` with these texts, no call, nothing forbidden.
fn check(kernel: &'static str, ptx: &'static [&'static str], sass: &'static [&'static str]) -> Check {
    Check { wrapper: "", kernel, target: "sm_90", ptx, sass, forbid: &[], callee: None, no_sass: None }
}

#[test]
fn check_reports_missing_text_and_calls() {
    let m = entries(PTX);
    assert!(check_ptx(&check("k1", &["mbarrier.try_wait.parity.shared::cta.b64"], &[]), &m).is_empty());
    assert_eq!(check_ptx(&check("k1", &["cp.async.bulk"], &[]), &m).len(), 1);
    // Whole tokens: a prefix of the mnemonic is not the instruction.
    assert_eq!(check_ptx(&check("k1", &["mbarrier.try_wait.parity"], &[]), &m).len(), 1);
    let forbidden = Check { forbid: &["selp"], ..check("k1", &["mbarrier.try_wait.parity.shared::cta.b64"], &[]) };
    assert!(check_ptx(&forbidden, &m)[0].contains("forbidden `selp`"));
    let call = check("k2", &[], &[]);
    assert!(check_ptx(&call, &m)[0].contains("call"));
    assert!(check_ptx(&Check { callee: Some("f"), ..call }, &m).is_empty());
    assert!(check_ptx(&Check { callee: Some("g"), ..call }, &m)[0].contains("no call of `g`"));
    assert!(check_ptx(&check("nope", &[], &[]), &m)[0].contains("no such"));
}

#[test]
fn cfg_orders_by_paths_not_by_text() {
    // Text order: c, then the loop body b; program order: a, b (loop), c.
    let body = "\tld.u32 %r1, [%rd1];\n\tbra.uni $L__BB0_2;\n$L__BB0_3:\n\tst.u32 [%rd1], %r1;\n\tret;\n                    $L__BB0_2:\n\tadd.s32 %r1, %r1, 1;\n\tsetp.lt.u32 %p1, %r1, 9;\n\t@%p1 bra $L__BB0_2;\n                    \tbra.uni $L__BB0_3;\n";
    let g = Cfg::new(body, &[]);
    assert!(g.always_before("ld.u32", "add.s32"));
    assert!(g.always_before("add.s32", "st.u32"), "the store follows the loop on every path");
    assert!(!g.always_before("st.u32", "add.s32"), "text order is not program order");
    assert!(g.always_after("st.u32", "add.s32"));
    assert!(!g.always_after("add.s32", "st.u32"));
}

#[test]
fn parses_sass_listing() {
    let sass = "\n\tcode for sm_90\n\t\tFunction : check_a\n\t.headerflags\n        /*0000*/                   LDC R1, c[0x0][0x28] ;                /* 0x000 */\n        /*0010*/              @!P0 SYNCS.EXCH.64 URZ, [UR4], UR6 ;  /* 0x1 */\n\t\tFunction : check_b\n        /*0000*/                   EXIT ;    /* 0x2 */\n";
    let f = sass_functions(sass);
    assert_eq!(f.len(), 2);
    assert!(f["check_a"].contains("SYNCS.EXCH.64"));
    assert_eq!(opcodes(&f["check_a"]), vec!["LDC", "SYNCS.EXCH.64"]);
    assert_eq!(opcodes(&f["check_b"]), vec!["EXIT"]);
    let c = check("check_a", &[], &["SYNCS.EXCH.64"]);
    assert!(check_sass(&c, &f).is_empty());
    let c = check("check_b", &[], &["UBLKCP"]);
    assert_eq!(check_sass(&c, &f).len(), 1);
}

#[test]
fn inline_asm_is_found_in_code_only() {
    let src = r##"
        use core::arch::asm;
        use core::arch::{global_asm, nvptx};
        use core::{
            arch::naked_asm,
            ffi::CStr,
        };
        fn f() { unsafe { asm!("trap;") } }
        fn g() { unsafe { core::arch::asm ! ("exit;") } }
        global_asm!(".global x");
        // asm!("in a comment")
        /* asm!("in a /* nested */ block comment") */
        /// asm!("in a doc comment")
        let s = "asm!(\"in a string\")";
        let r = r#"asm!("in a raw string")"#;
        let c = c"asm!";
        let b = br"asm!";
        let (asm, from_row) = (text.matches("asm!(").count(), 1);
        let asm = nvptx_builder::assemble(p);
        if asm != from_row { return }
        let q = '"'; let x = asm.sass; fn h<'a>(s: &'a str) {}
        use std::process::Command;
    "##;
    let lines: Vec<usize> = inline_asm_lines(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [2, 3, 5, 8, 9, 10]);
    // Code and line layout survive.
    let code = code_only(src);
    assert_eq!(code.lines().count(), src.lines().count());
    assert!(code.contains("let asm = nvptx_builder::assemble(p);"));
    assert!(!code.contains("in a"), "{code}");
    assert!(code.contains("let x = asm.sass;"), "a char literal '\"' ends where it should: {code}");
}

#[test]
fn finds_locations_and_the_symbols_of_calls() {
    let ptx = ".global .align 1 .b8 anon_1[11] = {115, 114, 99, 47, 98, 117, 108, 107, 46, 114, 115};\n\
               .global .align 8 .u64 anon_2[3] = {generic(anon_1), 11, 38654705691};\n\
               .global .align 8 .u64 anon_3[3] = {generic(anon_1), 4, 1};\n";
    let locs = locations(ptx);
    assert_eq!(locs.len(), 1, "a prefix that is not a .rs file is no location: {locs:?}");
    assert_eq!(locs["anon_2"], Location { file: "src/bulk.rs".into(), line: 27, column: 9 });
    let body = "\t{ // callseq 1, 0\n\tmov.b64 \t%rd1, anon_2;\n\tmov.b64 \t%rd2, %rd1;\n\
                \tcall.uni _RNvNtCs1_14mscclpp_device4poll4fail, (param0, param1);\n\t} // callseq 1\n\
                \t{ // callseq 2, 0\n\tmov.b64 \t%rd3, anon_3;\n\tcall.uni vprintf, (param0);\n\t} // callseq 2\n";
    assert_eq!(call_symbols(body, "fail"), [vec!["anon_2".to_string()]]);
    assert_eq!(call_symbols(body, "vprintf"), [vec!["anon_3".to_string()]]);
}
