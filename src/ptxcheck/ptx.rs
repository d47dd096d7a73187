//! PTX text: kernel bodies and functions, instructions, barriers, source locations and calls,
//! and the checks of a wrapper's check kernel.

use std::collections::BTreeMap;

use super::tokens::{holds, names, tokens};
use crate::checks::Check;

/// The body (between the braces) of every `.entry` in a PTX module, by kernel name.
pub fn entries(ptx: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") else { continue };
        let name = rest.split(['(', ' ']).next().unwrap_or_default().to_string();
        // Skip the parameter list up to the opening brace of the body.
        for l in lines.by_ref() {
            if l.trim() == "{" {
                break;
            }
        }
        out.insert(name, body_until_closing_brace(&mut lines));
    }
    out
}

/// The instructions of a PTX body: no comments, labels, blank lines or register declarations.
pub fn instructions(body: &str) -> Vec<&str> {
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with(".reg") && !l.ends_with(':'))
        .filter(|l| !l.starts_with('{') || l.starts_with("{ .reg"))
        .filter(|l| !l.starts_with('}'))
        .collect()
}

/// The CTA barrier instructions (`bar.sync`, `barrier.sync`, with or without `.aligned`, and the
/// `barrier.cta` spellings) of a PTX body.
pub fn ptx_barriers(body: &str) -> usize {
    instructions(body)
        .iter()
        .filter(|l| {
            // Drop a guard predicate (`@%p1 bar.sync 0;`).
            let l = match l.strip_prefix('@') {
                Some(guarded) => guarded.split_once(char::is_whitespace).map_or("", |(_, rest)| rest.trim_start()),
                None => l,
            };
            ["bar.sync", "barrier.sync", "bar.cta.sync", "barrier.cta.sync"]
                .iter()
                .any(|b| l.strip_prefix(b).is_some_and(|r| r.starts_with(['.', ' ', '\t'])))
        })
        .count()
}

/// How long a check kernel's body may be (instructions): wrappers must inline to a few lines.
pub const MAX_CHECK_BODY: usize = 60;

/// A `core::panic::Location` of a PTX module (what a `#[track_caller]` function or a panic is
/// handed): file, line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file as the compiler named it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// The `Location` statics of a PTX module, by symbol: the 8-aligned
/// `.u64 SYM[3] = {generic(STR), LEN, LINE | COLUMN << 32}` whose `STR` is a `.b8` array of the
/// file's `LEN` bytes (the layout of `core::panic::Location` on nvptx64).
pub fn locations(ptx: &str) -> BTreeMap<String, Location> {
    let array = |l: &str| -> Option<(String, String)> {
        let (name, rest) = l.split_once('[')?;
        let init = rest.split_once("= {")?.1.strip_suffix("};")?;
        Some((name.rsplit(' ').next()?.to_string(), init.to_string()))
    };
    let mut bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut words: Vec<(String, String)> = Vec::new();
    for l in ptx.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix(".global .align 1 .b8 ").or_else(|| l.strip_prefix(".const .align 1 .b8 ")) {
            if let Some((name, init)) = array(&format!(" {rest}")) {
                bytes.insert(name, init.split(',').filter_map(|b| b.trim().parse().ok()).collect());
            }
        } else if let Some(rest) =
            l.strip_prefix(".global .align 8 .u64 ").or_else(|| l.strip_prefix(".const .align 8 .u64 "))
            && let Some((name, init)) = array(&format!(" {rest}"))
        {
            words.push((name, init));
        }
    }
    let mut out = BTreeMap::new();
    for (name, init) in words {
        let parts: Vec<&str> = init.split(',').map(str::trim).collect();
        let [file, len, packed] = parts.as_slice() else { continue };
        let Some(file) = file.strip_prefix("generic(").and_then(|f| f.strip_suffix(')')) else { continue };
        let (Ok(len), Ok(packed), Some(text)) = (len.parse::<usize>(), packed.parse::<u64>(), bytes.get(file)) else {
            continue;
        };
        if text.len() < len {
            continue;
        }
        let Ok(file) = std::str::from_utf8(&text[..len]) else { continue };
        if file.ends_with(".rs") {
            let (line, column) = (packed as u32, (packed >> 32) as u32);
            out.insert(name, Location { file: file.to_string(), line, column });
        }
    }
    out
}

/// The symbols moved into registers (`mov.b64 %rd, SYM;`) in each call sequence of `body`
/// (`{ // callseq N` .. `} // callseq N`) that calls the Rust function `callee` ([`names`]).
pub fn call_symbols(body: &str, callee: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut current: Option<(Vec<String>, bool)> = None;
    for l in body.lines().map(str::trim) {
        if l.starts_with("{ // callseq") {
            current = Some((Vec::new(), false));
        } else if l.starts_with("} // callseq") {
            if let Some((syms, true)) = current.take() {
                out.push(syms);
            }
        } else if let Some((syms, calls)) = &mut current {
            let t = tokens(l);
            match t.first() {
                Some(&"mov.b64" | &"mov.u64") if t.len() == 3 && !t[2].starts_with('%') => syms.push(t[2].to_string()),
                Some(op) if op.starts_with("call") => *calls |= t.iter().any(|s| names(s, callee)),
                _ => {}
            }
        }
    }
    out
}

/// The body of every `.func` defined in a PTX module (declarations skipped), by symbol.
pub fn funcs(ptx: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix(".visible .func").or_else(|| t.strip_prefix(".func")) else { continue };
        // Skip a return parameter `(.param .b32 func_retval0)`.
        let rest = rest.trim_start();
        let rest = if rest.starts_with('(') { rest.split_once(')').map_or("", |(_, r)| r) } else { rest };
        let name = rest.trim_start().split(['(', ' ']).next().unwrap_or_default().to_string();
        let mut defined = false;
        for l in lines.by_ref() {
            if l.trim() == "{" {
                defined = true;
                break;
            }
            if l.trim_end().ends_with(';') {
                break;
            }
        }
        if !defined {
            continue;
        }
        out.insert(name, body_until_closing_brace(&mut lines));
    }
    out
}

/// The functions a PTX module declares or defines `.noreturn`.
pub fn noreturn_funcs(ptx: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in ptx.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix(".visible .func").or_else(|| t.strip_prefix(".func")) {
            let rest = rest.trim_start();
            let rest = if rest.starts_with('(') { rest.split_once(')').map_or("", |(_, r)| r) } else { rest };
            current = rest.trim_start().split(['(', ' ']).next().map(str::to_string);
        } else if t.starts_with(".noreturn") {
            out.extend(current.take());
        } else if t.starts_with('{') || t.starts_with(".entry") || t.starts_with(".visible .entry") {
            current = None;
        }
    }
    out
}

/// The problems of one check against the PTX body `body` of kernel `kernel` (tier 3, PTX half):
/// an expected text missing (whole tokens), a forbidden text present (substring), a `call` left
/// (or, for a check that calls, a call that does not name its callee), or a body too long.
pub fn ptx_problems(check: &Check, kernel: &str, body: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let ins = instructions(body);
    let lines: Vec<Vec<&str>> = ins.iter().map(|l| tokens(l)).collect();
    for want in check.ptx {
        if !holds(&lines, want) {
            problems.push(format!("{kernel}: instruction `{want}` not in the body"));
        }
    }
    for bad in check.forbid {
        if let Some(l) = ins.iter().find(|l| l.contains(bad)) {
            problems.push(format!("{kernel}: forbidden `{bad}` in `{l}`"));
        }
    }
    let calls: Vec<&&str> = ins.iter().filter(|l| l.starts_with("call")).collect();
    match check.callee {
        None if !calls.is_empty() => problems.push(format!("{kernel}: a `call` remains (wrapper not inlined)")),
        Some(callee) if !calls.iter().any(|l| tokens(l).iter().any(|t| names(t, callee))) => {
            problems.push(format!("{kernel}: no call of `{callee}` in {calls:?}"))
        }
        _ => {}
    }
    if ins.len() > MAX_CHECK_BODY {
        problems.push(format!("{kernel}: body has {} instructions (max {MAX_CHECK_BODY})", ins.len()));
    }
    problems
}

/// Verifies one check against a PTX module's entries (tier 3, PTX half). Returns the problems.
pub fn check_ptx(check: &Check, entries: &BTreeMap<String, String>) -> Vec<String> {
    let kernel = check.kernel;
    match entries.get(kernel) {
        Some(body) => ptx_problems(check, kernel, body),
        None => vec![format!("{kernel}: no such .entry in the PTX")],
    }
}

/// The lines up to the first unindented closing brace (a function body's end: nested blocks are
/// indented), consumed from `lines`.
pub(super) fn body_until_closing_brace<'a>(lines: &mut impl Iterator<Item = &'a str>) -> String {
    let mut body = String::new();
    for l in lines.by_ref() {
        if l == "}" {
            break;
        }
        body.push_str(l);
        body.push('\n');
    }
    body
}
