//! Reading PTX and `cuobjdump -sass` output: kernel bodies, SASS functions, and the checks of
//! verification tier 3 (instruction text present, no call left, body short, SASS opcodes).

use std::collections::BTreeMap;
use std::path::Path;

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

/// How long a check kernel's body may be (instructions): wrappers must inline to a few lines.
pub const MAX_CHECK_BODY: usize = 60;

/// The tokens of an instruction line or of an expected text: split at white space and at the
/// punctuation of operand lists (`,;{}[]()`), so `ld.acquire.sys.u64 %rd1, [%rd2];` is
/// `["ld.acquire.sys.u64", "%rd1", "%rd2"]`.
pub fn tokens(s: &str) -> Vec<&str> {
    s.split(|c: char| c.is_whitespace() || ",;{}[]()".contains(c)).filter(|t| !t.is_empty()).collect()
}

/// Whether one of `lines` (already tokenized) holds `want`'s tokens whole, in order and next to
/// each other: `st.release.sys.global.u64` matches that mnemonic only, not
/// `multimem.st.release.sys.global.u64`, and `DEPBAR.LE SB0, 0x3` needs the count as well.
pub fn holds(lines: &[Vec<&str>], want: &str) -> bool {
    let w = tokens(want);
    !w.is_empty() && lines.iter().any(|l| l.windows(w.len()).any(|win| win == w.as_slice()))
}

/// The tokenized lines of a text.
pub fn token_lines(text: &str) -> Vec<Vec<&str>> {
    text.lines().map(tokens).filter(|t| !t.is_empty()).collect()
}

/// Whether the PTX symbol `symbol` names the Rust function `name`: equal to it, or a mangled
/// path ending in it (`..._14mscclpp_device3ptx5print13print_failure`).
pub fn names(symbol: &str, name: &str) -> bool {
    symbol == name || symbol.ends_with(&format!("{}{name}", name.len()))
}

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

/// Verifies one check against a PTX module's entries (tier 3, PTX half). Returns the problems.
pub fn check_ptx(check: &Check, entries: &BTreeMap<String, String>) -> Vec<String> {
    let kernel = check.kernel;
    match entries.get(kernel) {
        Some(body) => ptx_problems(check, kernel, body),
        None => vec![format!("{kernel}: no such .entry in the PTX")],
    }
}

/// Verifies one check against the SASS functions (tier 3, SASS half). Returns the problems.
pub fn check_sass(check: &Check, funcs: &BTreeMap<String, String>) -> Vec<String> {
    let kernel = check.kernel;
    match funcs.get(kernel) {
        Some(text) => sass_problems(check, kernel, text),
        None => vec![format!("{kernel}: no such function in the SASS")],
    }
}

/// Every `.rs` file under `dir`, at any depth, sorted.
pub fn rust_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The public function names of the PTX wrapper modules (`pub fn` / `pub unsafe fn` /
/// `pub const fn`, including the rows of wrapper-generating macro invocations), in every file
/// under `ptx_dir`.
pub fn public_wrappers(ptx_dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for f in rust_files(ptx_dir)? {
        let text = std::fs::read_to_string(&f)?;
        for line in text.lines() {
            if let Some((name, _)) = pub_fn(line) {
                names.push(name);
            }
        }
    }
    Ok(names)
}

/// The name of a public function declared on `line` and the rest of the line after the name;
/// `None` for other lines and for macro patterns (`pub fn $name`).
fn pub_fn(line: &str) -> Option<(String, &str)> {
    let t = line.trim_start();
    let rest = ["pub fn ", "pub unsafe fn ", "pub const fn ", "pub const unsafe fn "]
        .iter()
        .find_map(|p| t.strip_prefix(p))?;
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then(|| (name.clone(), &rest[name.len()..]))
}

/// The first string literal of `text`.
fn first_literal(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once('"')?;
    rest.split_once('"').map(|(lit, _)| lit)
}

/// One row of `device/src/ptx/`, read from the source text: a family row
/// (`pub unsafe fn NAME(..) = "MNEMONIC" ..`) or a hand row (`#[check("MNEMONIC", ..)]` above a
/// hand-written `pub fn NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacroRow {
    /// The generated wrapper.
    pub name: String,
    /// The mnemonic the row names.
    pub instruction: String,
    /// For a hand row, its text from the header to the end of the function: the body must take
    /// its instruction from `mnemonic!()` and its doc must show the mnemonic.
    pub hand: Option<String>,
}

/// Every row in the files under `ptx_dir`.
pub fn macro_rows(ptx_dir: &Path) -> std::io::Result<Vec<MacroRow>> {
    let mut rows = Vec::new();
    for f in rust_files(ptx_dir)? {
        let text = std::fs::read_to_string(&f)?;
        let lines: Vec<&str> = text.lines().collect();
        let mut header: Option<(String, usize)> = None;
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if let Some(rest) = t.strip_prefix("#[check(") {
                header = first_literal(rest).map(|m| (m.to_string(), i));
                continue;
            }
            let Some((name, rest)) = pub_fn(line) else { continue };
            if let Some((instruction, start)) = header.take() {
                // The row ends at the function's closing brace (indented like its `pub fn`).
                let indent = &line[..line.len() - t.len()];
                let end = (i..lines.len()).find(|&j| lines[j] == format!("{indent}}}")).unwrap_or(lines.len() - 1);
                rows.push(MacroRow { name, instruction, hand: Some(lines[start..=end].join("\n")) });
            } else {
                // A family row runs to its `;`, its mnemonic after the `=` (on the next line when
                // the signature is long).
                let end = (i..lines.len()).find(|&j| lines[j].trim_end().ends_with(';')).unwrap_or(i);
                let row: Vec<&str> = std::iter::once(rest)
                    .chain(lines[i + 1..=end].iter().copied())
                    .flat_map(str::split_whitespace)
                    .collect();
                let row = row.join(" ");
                if let Some((_, lit)) = row.split_once("= \"") {
                    let instruction = lit.split('"').next().unwrap_or_default().to_string();
                    rows.push(MacroRow { name, instruction, hand: None });
                }
            }
        }
    }
    Ok(rows)
}

/// The lines of the files under `ptx_dir` that call `asm!` outside a `macro_rules!` definition
/// and outside a hand row (`#[check(..)]` up to the end of its function), with their file.
pub fn asm_outside_rows(ptx_dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for f in rust_files(ptx_dir)? {
        let text = std::fs::read_to_string(&f)?;
        // Inside a `macro_rules!` definition or a `hand!` invocation: both end at a `}` in column 0.
        let mut inside = false;
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("macro_rules! ") || t.starts_with("hand! {") {
                inside = line == t;
            } else if line == "}" {
                inside = false;
            }
            let code = line.split("//").next().unwrap_or("");
            if !inside && code.contains("asm!(") && !code.contains("global_asm!(") {
                out.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    Ok(out)
}

/// Every `.rs` file of the repository at `root`, at any depth, sorted: all but those under a
/// directory named `target` (build outputs) or a hidden one (`.git`, `.venv-tools`, ...).
pub fn repository_rust_files(root: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if e.file_type()?.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(p);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `src` with every comment (line, block, doc; nested block comments) and every string, byte
/// string, C string, raw string and char literal replaced by spaces, newlines kept: what is left
/// is code, at the same lines and columns.
pub fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (start, mut depth) = (i, 0usize);
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                blank(&mut out, start, i);
            }
            // A raw string: r"..", r#".."#, br"..", cr#".."# (the prefix letter is not part of an
            // identifier such as `bar"`).
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (!ident(i) || (matches!(b[i - 1], b'b' | b'c') && !ident(i - 1))) =>
            {
                let mut j = i + 1;
                while b.get(j) == Some(&b'#') {
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', j - i - 1)).collect();
                let end = (j + 1..b.len()).find(|&k| b[k..].starts_with(&close)).map_or(b.len(), |k| k + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut k = i + 1;
                while k < b.len() && b[k] != b'"' {
                    k += if b[k] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, k + 1);
                i = k + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{1F600}', '\''), or a lifetime / label ('a): only
                // the literal is blanked.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    (i + 3..b.len()).find(|&k| b[k] == b'\'').map(|k| k + 1)
                } else {
                    let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lines (1-based, with their text) of Rust source `src` that use inline assembly in code,
/// not in comments or literals: a call of `asm!`, `global_asm!` or `naked_asm!`, a path to one
/// (`core::arch::asm`), or a `use` of one from `arch` (`use core::arch::{global_asm, asm};`).
pub fn inline_asm_lines(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    const MACROS: [&str; 3] = ["asm", "global_asm", "naked_asm"];
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut hits = Vec::new();
    // (line of the `use`, whether it names `arch`) while inside a `use` item.
    let mut in_use: Option<(usize, bool)> = None;
    for (n, (line, text)) in code.lines().zip(src.lines()).enumerate() {
        let b = line.as_bytes();
        let mut hit = false;
        let mut i = 0;
        while i < b.len() {
            if !is_ident(b[i]) || (i > 0 && is_ident(b[i - 1])) {
                i += 1;
                continue;
            }
            let end = (i..b.len()).find(|&k| !is_ident(b[k])).unwrap_or(b.len());
            let word = &line[i..end];
            let after = line[end..].trim_start();
            let before = line[..i].trim_end();
            if word == "use" {
                in_use = Some((n, false));
            } else if word == "arch"
                && let Some((_, named)) = &mut in_use
            {
                *named = true;
            }
            if MACROS.contains(&word)
                && ((after.starts_with('!') && !after.starts_with("!="))
                    || before.ends_with("::")
                    || in_use.is_some_and(|(_, arch)| arch))
            {
                hit = true;
            }
            i = end;
        }
        if line.contains(';') {
            in_use = None;
        }
        if hit {
            hits.push((n + 1, text.trim().to_string()));
        }
    }
    hits
}

/// The files of `files` that use inline assembly ([`inline_asm_lines`]), with the first such
/// line.
pub fn inline_asm_uses(files: &[std::path::PathBuf]) -> std::io::Result<Vec<(std::path::PathBuf, usize, String)>> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f)?;
        if let Some((line, l)) = inline_asm_lines(&text).into_iter().next() {
            out.push((f.clone(), line, l));
        }
    }
    Ok(out)
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

/// The control flow of a PTX kernel body: its instructions in basic blocks, with dominators and
/// post-dominators, for order checks that hold on every path (the text order of the blocks is
/// the compiler's layout, not program order; inside one block it is).
#[derive(Debug)]
pub struct Cfg {
    /// The instructions, in text order.
    pub ins: Vec<String>,
    /// The block of each instruction.
    block: Vec<usize>,
    /// `dom[b][a]`: block `a` is on every path from the entry to block `b`.
    dom: Vec<Vec<bool>>,
    /// `pdom[b][a]`: block `a` is on every path from block `b` to a `ret`.
    pdom: Vec<Vec<bool>>,
}

impl Cfg {
    /// Builds the graph of a `.entry` body (as [`entries`] returns it) in a module `ptx`: a call
    /// of a function the module declares `.noreturn` ends its path (the compiler places no
    /// branch after it, so the next block in the text is not its successor).
    pub fn of(ptx: &str, body: &str) -> Self {
        Self::new(body, &noreturn_funcs(ptx))
    }

    /// Builds the graph of a `.entry` body, calls of `noreturn` ending their paths.
    pub fn new(body: &str, noreturn: &[String]) -> Self {
        let mut ins = Vec::new();
        let mut block = Vec::new();
        let mut labels: BTreeMap<String, usize> = BTreeMap::new();
        // (first instruction, successors by label or fall-through)
        let mut starts: Vec<usize> = Vec::new();
        let mut new_block = true;
        for raw in body.lines() {
            let l = raw.trim();
            if l.is_empty() || l.starts_with("//") || l.starts_with(".reg") || l.starts_with('}') {
                continue;
            }
            if l.starts_with('{') && !l.starts_with("{ .reg") {
                continue;
            }
            if let Some(label) = l.strip_suffix(':') {
                labels.insert(label.to_string(), starts.len());
                new_block = true;
                continue;
            }
            if new_block {
                // An empty block (two labels in a row) simply shares the next one's start.
                starts.push(ins.len());
                new_block = false;
            }
            block.push(starts.len() - 1);
            ins.push(l.to_string());
            if Self::ends_path(l, noreturn) {
                new_block = true;
            }
        }
        // Labels right before the end (or before another label) point at the next block start.
        let n = starts.len();
        let mut succ = vec![Vec::new(); n];
        for b in 0..n {
            let last = if b + 1 < n { starts[b + 1] - 1 } else { ins.len() - 1 };
            let l = &ins[last];
            let op = Self::mnemonic(l);
            let guarded = l.starts_with('@');
            if op.starts_with("bra") {
                let target = tokens(l).last().copied().unwrap_or_default().to_string();
                if let Some(&t) = labels.get(&target) {
                    succ[b].push(t.min(n - 1));
                }
                if guarded && b + 1 < n {
                    succ[b].push(b + 1);
                }
            } else if Self::ends_path(l, noreturn) {
                if guarded && b + 1 < n {
                    succ[b].push(b + 1);
                }
            } else if b + 1 < n {
                succ[b].push(b + 1);
            }
        }
        let exits: Vec<bool> = (0..n)
            .map(|b| {
                let last = if b + 1 < n { starts[b + 1] - 1 } else { ins.len() - 1 };
                let op = Self::mnemonic(&ins[last]);
                op == "ret" || op == "exit"
            })
            .collect();
        let mut pred = vec![Vec::new(); n];
        for (b, ss) in succ.iter().enumerate() {
            for &s in ss {
                pred[s].push(b);
            }
        }
        let dom = Self::dominators(n, &pred, |b| b == 0);
        let pdom = Self::dominators(n, &succ, |b| exits[b]);
        Self { ins, block, dom, pdom }
    }

    /// Whether an instruction ends its block: a branch, `ret`, `exit`, `trap`, or a call of a
    /// function in `noreturn`.
    fn ends_path(l: &str, noreturn: &[String]) -> bool {
        let op = Self::mnemonic(l);
        op.starts_with("bra")
            || op == "ret"
            || op == "exit"
            || op == "trap"
            || (op.starts_with("call") && tokens(l).iter().any(|t| noreturn.iter().any(|f| f == t)))
    }

    /// The mnemonic of an instruction line, past a guard predicate.
    fn mnemonic(l: &str) -> &str {
        let t = tokens(l);
        t.into_iter().find(|t| !t.starts_with('@')).unwrap_or("")
    }

    /// Iterative (post-)dominator sets: `preds` are the edges walked back from `root` blocks.
    fn dominators(n: usize, preds: &[Vec<usize>], root: impl Fn(usize) -> bool) -> Vec<Vec<bool>> {
        let mut d: Vec<Vec<bool>> =
            (0..n).map(|b| if root(b) { (0..n).map(|a| a == b).collect() } else { vec![true; n] }).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..n).filter(|&b| !root(b)) {
                let mut new = vec![true; n];
                for &p in &preds[b] {
                    for a in 0..n {
                        new[a] &= d[p][a];
                    }
                }
                new[b] = true;
                if new != d[b] {
                    d[b] = new;
                    changed = true;
                }
            }
        }
        d
    }

    /// The indices of the instructions that hold `want` (whole tokens, as [`holds`]).
    pub fn find(&self, want: &str) -> Vec<usize> {
        self.ins.iter().enumerate().filter(|(_, l)| holds(&[tokens(l)], want)).map(|(i, _)| i).collect()
    }

    /// Whether instruction `a` is executed before instruction `b` on every path to `b`.
    pub fn dominates(&self, a: usize, b: usize) -> bool {
        let (ba, bb) = (self.block[a], self.block[b]);
        if ba == bb { a < b } else { self.dom[bb][ba] }
    }

    /// Whether instruction `a` is executed after instruction `b` on every path from `b` to a
    /// `ret`.
    pub fn post_dominates(&self, a: usize, b: usize) -> bool {
        let (ba, bb) = (self.block[a], self.block[b]);
        if ba == bb { a > b } else { self.pdom[bb][ba] }
    }

    /// Whether every instruction holding `later` has one holding `earlier` before it on every
    /// path (and there is at least one of each).
    pub fn always_before(&self, earlier: &str, later: &str) -> bool {
        let (e, l) = (self.find(earlier), self.find(later));
        !e.is_empty() && !l.is_empty() && l.iter().all(|&i| e.iter().any(|&j| self.dominates(j, i)))
    }

    /// Whether every instruction holding `earlier` has one holding `later` after it on every
    /// path to a `ret` (and there is at least one of each).
    pub fn always_after(&self, later: &str, earlier: &str) -> bool {
        let (e, l) = (self.find(earlier), self.find(later));
        !e.is_empty() && !l.is_empty() && e.iter().all(|&i| l.iter().any(|&j| self.post_dominates(j, i)))
    }

    /// The instructions of each basic block, in program order.
    pub fn blocks(&self) -> Vec<Vec<&str>> {
        let mut out: Vec<Vec<&str>> = Vec::new();
        for (i, l) in self.ins.iter().enumerate() {
            if out.len() <= self.block[i] {
                out.resize(self.block[i] + 1, Vec::new());
            }
            out[self.block[i]].push(l);
        }
        out
    }
}

/// The lines up to the first unindented closing brace (a function body's end: nested blocks are
/// indented), consumed from `lines`.
fn body_until_closing_brace<'a>(lines: &mut impl Iterator<Item = &'a str>) -> String {
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

/// Asserts that the only calls left in `kernel`'s instructions are the waits' cold paths: expiry
/// (`poll::expired`: print and trap) and abort (`abort::aborted`: print and exit).
pub fn assert_only_cold_wait_calls(kernel: &str, ins: &[String]) {
    let calls: Vec<_> = ins.iter().filter(|l| l.starts_with("call")).collect();
    assert!(
        calls.iter().all(|l| l.contains("poll7expired") || l.contains("abort7aborted")),
        "{kernel}: stray call in {calls:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
