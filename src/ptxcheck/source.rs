//! Scans of the Rust sources: the `ptx/` wrappers and their rows, inline assembly anywhere,
//! and the source with comments and literals blanked.

use std::path::Path;

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
