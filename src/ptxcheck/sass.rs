//! SASS text (`cuobjdump -sass`): functions, opcodes, barriers, the tools that make it, and
//! the checks of a wrapper's check kernel.

use std::collections::BTreeMap;

use super::tokens::{holds, token_lines};
use crate::checks::Check;

/// Whether ptxas and cuobjdump are there for the SASS checks. When not, says so loudly, records
/// the skip under `test`, and panics if `MSCCLPP_RS_REQUIRE_PTXAS=1` (CI: the checks must run).
pub fn tools_or_skip(test: &str) -> bool {
    let ok = nvptx_builder::find_tool("ptxas").is_some() && nvptx_builder::find_tool("cuobjdump").is_some();
    if !ok {
        let msg = "ptxas/cuobjdump NOT FOUND: the SASS half of the PTX checks did not run \
                   (`./x setup` installs them into .venv-tools, or set PTXAS/CUOBJDUMP)";
        eprintln!("\n!!!!!!!! {msg}\n");
        crate::testing::record_skip(test, msg);
        if std::env::var("MSCCLPP_RS_REQUIRE_PTXAS").is_ok_and(|v| v == "1") {
            panic!("{msg}");
        }
    }
    ok
}

/// The SASS of the harness's sm_90 kernel module, by function, or `None` (skip recorded under
/// `test`) without the tools; see [`tools_or_skip`].
pub fn main_sass_or_skip(test: &str) -> Option<BTreeMap<String, String>> {
    if !tools_or_skip(test) {
        return None;
    }
    let asm = nvptx_builder::assemble(&crate::ptx_path(false), "sm_90").expect("ptxas/cuobjdump");
    Some(sass_functions(&asm.sass))
}

/// Every function of a `cuobjdump -sass` listing, by name, with its instruction text.
pub fn sass_functions(sass: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for line in sass.lines() {
        if let Some(name) = line.trim().strip_prefix("Function : ") {
            if let Some((n, t)) = cur.take() {
                out.insert(n, t);
            }
            cur = Some((name.trim().to_string(), String::new()));
        } else if let Some((_, t)) = cur.as_mut() {
            // Keep the instruction text, drop the encoding comments.
            if let Some(code) = line.split("/*").nth(1)
                && let Some(instr) = code.split_once("*/").map(|(_, r)| r.trim())
            {
                t.push_str(instr.trim_end_matches(';').trim());
                t.push('\n');
            }
        }
    }
    if let Some((n, t)) = cur {
        out.insert(n, t);
    }
    out
}

/// The SASS opcodes (first word, predicates stripped) of a function's instruction text.
pub fn opcodes(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let first = w.next()?;
            if first.starts_with('@') { w.next() } else { Some(first) }
        })
        .collect()
}

/// The CTA barrier instructions of a SASS function's instruction text: `BAR.SYNC*` with an
/// immediate barrier id (`BAR.SYNC.DEFER_BLOCKING 0x0`). A non-aligned `barrier.sync` that a warp
/// may reach diverged also gets a slow path from ptxas (`BRA.DIV` to a `WARPSYNC` and a
/// `BAR.SYNC` with register operands); that copy is the assembler's, one per barrier, and is not
/// counted.
pub fn sass_barriers(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            let mut w = l.split_whitespace();
            let mut op = w.next().unwrap_or("");
            if op.starts_with('@') {
                op = w.next().unwrap_or("");
            }
            op.starts_with("BAR.SYNC") && w.next().is_some_and(|id| id.starts_with("0x"))
        })
        .count()
}

/// The problems of one check against the SASS text `text` of kernel `kernel` (tier 3, SASS half):
/// an expected opcode (with any operands given) missing as whole tokens, or a forbidden text
/// present.
pub fn sass_problems(check: &Check, kernel: &str, text: &str) -> Vec<String> {
    let lines = token_lines(text);
    let mut problems: Vec<String> = check
        .sass
        .iter()
        .filter(|want| !holds(&lines, want))
        .map(|want| format!("{kernel}: SASS lacks `{want}`"))
        .collect();
    for bad in check.forbid {
        if let Some(l) = text.lines().find(|l| l.contains(bad)) {
            problems.push(format!("{kernel}: forbidden `{bad}` in SASS `{l}`"));
        }
    }
    problems
}

/// Verifies one check against the SASS functions (tier 3, SASS half). Returns the problems.
pub fn check_sass(check: &Check, funcs: &BTreeMap<String, String>) -> Vec<String> {
    let kernel = check.kernel;
    match funcs.get(kernel) {
        Some(text) => sass_problems(check, kernel, text),
        None => vec![format!("{kernel}: no such function in the SASS")],
    }
}
