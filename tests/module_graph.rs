//! No import cycles between the modules of the library crates (CPU only).
//!
//! A module (one source file) depends on another when its code names a path into it:
//! `crate::a::b`, `super::x` or `self::c`, in a `use` tree or in an expression. Comments, string
//! literals and `#[cfg(test)]` items are ignored, and so is the crate root, which declares every
//! module and is named by all of them (its macros use `$crate::`). The dependencies must form a
//! DAG: a cycle such as `fifo` <-> `protocol::fifo` means neither can be read, tested or moved
//! without the other, and is reported with the edges that close it.
//!
//! Folders too: inside every module directory (the crate root included), its entries (files and
//! subfolders, each with everything under it) must form a DAG, so that `error` -> `bootstrap::frame`
//! and `bootstrap::env` -> `error` count as a cycle between `error` and the `bootstrap` folder even
//! though no two files close it. A folder's own `mod.rs` is not one of its entries: it may name
//! its children and they may name it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use mscclpp_rs::ptxcheck;

/// Module path (`a::b`, empty for the crate root) -> source text, for every `.rs` file under `src`.
fn module_files(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Index just past the block that opens at `open` (`b[open] == '{'`).
fn skip_block(b: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// A word at `i` (identifier characters), or "".
fn word_at(b: &[char], i: usize) -> String {
    b[i..].iter().take_while(|c| is_ident(**c)).collect()
}

fn skip_ws(b: &[char], mut i: usize) -> usize {
    while i < b.len() && b[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Paths of a use tree (or a plain path) starting at `i`, as segment lists; returns them and
/// the index after the tree.
fn parse_tree(b: &[char], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        i = skip_ws(b, i);
        if b.get(i) == Some(&'{') {
            i += 1;
            loop {
                i = skip_ws(b, i);
                match b.get(i) {
                    Some('}') => return i + 1,
                    Some(',') => i += 1,
                    None => return i,
                    _ => {
                        let before = i;
                        i = parse_tree(b, i, &path, out);
                        if i == before {
                            i += 1;
                        }
                    }
                }
            }
        }
        let w = word_at(b, i);
        if w.is_empty() {
            if b.get(i) == Some(&'*') {
                i += 1;
            }
            out.push(path);
            return i;
        }
        i += w.len();
        path.push(w);
        let j = skip_ws(b, i);
        if b.get(j) == Some(&':') && b.get(j + 1) == Some(&':') {
            i = j + 2;
        } else {
            out.push(path);
            // `as name` and anything else end the path.
            return i;
        }
    }
}

/// The modules `module` (whose stripped source is `src`) names, resolved to file modules of
/// `files`. `#[cfg(test)]` items are skipped; inline `mod x { .. }` blocks are followed so that
/// `super::` resolves from where it is written.
fn dependencies(module: &str, src: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let b: Vec<char> = src.chars().collect();
    let base: Vec<String> = if module.is_empty() { vec![] } else { module.split("::").map(String::from).collect() };
    // Inline modules currently open: (name, index of the closing brace's end).
    let mut inline: Vec<(String, usize)> = vec![];
    let mut paths: Vec<Vec<String>> = vec![];
    let mut i = 0;
    while i < b.len() {
        inline.retain(|(_, end)| i < *end);
        let here: Vec<String> = base.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        if b[i..].starts_with(&['#', '[']) {
            let attr_end = b[i..].iter().position(|&c| c == ']').map_or(b.len(), |p| i + p + 1);
            let attr: String = b[i..attr_end].iter().filter(|c| !c.is_whitespace()).collect();
            if attr == "#[cfg(test)]" {
                // Skip the item: to its `;` or past its block, whichever comes first.
                let mut k = attr_end;
                while k < b.len() && b[k] != ';' && b[k] != '{' {
                    k += 1;
                }
                i = if b.get(k) == Some(&'{') { skip_block(&b, k) } else { k + 1 };
                continue;
            }
            i = attr_end;
            continue;
        }
        if prev_is_ident(&b, i) || !is_ident(b[i]) {
            i += 1;
            continue;
        }
        let w = word_at(&b, i);
        if w == "mod" {
            let j = skip_ws(&b, i + 3);
            let name = word_at(&b, j);
            let k = skip_ws(&b, j + name.len());
            if !name.is_empty() && b.get(k) == Some(&'{') {
                inline.push((name, skip_block(&b, k)));
                i = k + 1;
                continue;
            }
        }
        let j = i + w.len();
        if matches!(w.as_str(), "crate" | "super" | "self") && b.get(j) == Some(&':') && b.get(j + 1) == Some(&':') {
            let mut found = vec![];
            let end = parse_tree(&b, i, &[], &mut found);
            for p in found {
                let mut abs: Vec<String> = match p[0].as_str() {
                    "crate" => vec![],
                    _ => here.clone(),
                };
                for seg in &p {
                    match seg.as_str() {
                        "crate" | "self" => {}
                        "super" => {
                            abs.pop();
                        }
                        s => abs.push(s.to_string()),
                    }
                }
                paths.push(abs);
            }
            i = end.max(i + 1);
            continue;
        }
        i = j;
    }
    paths
        .into_iter()
        .filter_map(|p| (1..=p.len()).rev().map(|n| p[..n].join("::")).find(|m| files.contains(m)))
        .filter(|m| m != module && !m.is_empty())
        .collect()
}

/// Modules declared `#[cfg(test)] mod x;` (test-only files), as module paths.
fn test_only_files(module: &str, src: &str) -> Vec<String> {
    let flat: String = src.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.match_indices("#[cfg(test)] mod ")
        .filter_map(|(at, m)| {
            let rest = &flat[at + m.len()..];
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            rest[name.len()..]
                .trim_start()
                .starts_with(';')
                .then(|| if module.is_empty() { name } else { format!("{module}::{name}") })
        })
        .collect()
}

/// The dependency graph of the crate whose sources are `files` (module path -> source).
fn graph(files: &BTreeMap<String, String>) -> Graph {
    let stripped: BTreeMap<&String, String> = files.iter().map(|(m, s)| (m, ptxcheck::code_only(s))).collect();
    let test_only: BTreeSet<String> = stripped.iter().flat_map(|(m, s)| test_only_files(m, s)).collect();
    let names: BTreeSet<String> = files.keys().filter(|m| !test_only.contains(*m)).cloned().collect();
    names.iter().filter(|m| !m.is_empty()).map(|m| (m.clone(), dependencies(m, &stripped[m], &names))).collect()
}

/// Module -> the modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;
/// The modules of a cycle, and its edges.
type Cycle = (Vec<String>, Vec<(String, String)>);

/// Every cycle (strongly connected component of more than one module), each with its edges.
fn cycles(g: &Graph) -> Vec<Cycle> {
    // Modules that reach each other: a and b share a component when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in g.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = vec![];
    for m in g.keys() {
        if done.contains(m) || !reaches[m].contains(m) {
            continue;
        }
        let comp: Vec<String> =
            g.keys().filter(|n| reaches[m].contains(*n) && reaches[*n].contains(m)).cloned().collect();
        let edges = comp
            .iter()
            .flat_map(|a| g[a].iter().filter(|b| comp.contains(b)).map(move |b| (a.clone(), b.clone())))
            .collect();
        done.extend(comp.iter().cloned());
        out.push((comp, edges));
    }
    out
}

/// The graph between the entries of every folder: for each module with submodules (a folder,
/// the crate root included), its children, each standing for itself and everything under it;
/// `a` -> `b` when a module under `a` names a module under `b`. One graph for all folders: the
/// children of different folders have different paths, and edges stay inside one folder.
fn folder_graph(g: &Graph) -> Graph {
    let mut out = Graph::new();
    for (from, tos) in g {
        for to in tos {
            // The longest common prefix of the two paths is the folder both lie in; the next
            // segment of each is its entry there. A module naming its own folder (or a folder one
            // of its own modules) is inside the folder, not beside it.
            let (f, t): (Vec<&str>, Vec<&str>) = (from.split("::").collect(), to.split("::").collect());
            let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if common < f.len() && common < t.len() {
                let (a, b) = (f[..=common].join("::"), t[..=common].join("::"));
                out.entry(b.clone()).or_default();
                out.entry(a).or_default().insert(b);
            }
        }
    }
    out
}

/// Cycles between folders that exist and are to be removed, by crate directory: each one must
/// still be found (remove it here once it is gone); any other cycle fails. None today (the last,
/// `device/src`'s `ptx` <-> `ptr`, went when the shared-memory reads that need an instruction
/// moved from `ptr` to `smem`).
const KNOWN_FOLDER_CYCLES: &[(&str, &[&str])] = &[];

fn check_crate(dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let files = module_files(&src);
    assert!(files.len() > 1, "{}: no sources found", src.display());
    let g = graph(&files);
    let mut found = cycles(&g);
    let known: Vec<&[&str]> = KNOWN_FOLDER_CYCLES.iter().filter(|(d, _)| *d == dir).map(|(_, c)| *c).collect();
    let (old, new): (Vec<Cycle>, Vec<Cycle>) =
        cycles(&folder_graph(&g)).into_iter().partition(|(comp, _)| known.iter().any(|k| comp == k));
    // A known cycle that is gone must leave the list, so that it cannot come back unnoticed.
    assert_eq!(old.len(), known.len(), "{dir}: a cycle of KNOWN_FOLDER_CYCLES is gone: remove it from the list");
    found.extend(new);
    let report: Vec<String> = found
        .iter()
        .map(|(comp, edges)| {
            let e: Vec<String> = edges.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
            format!("cycle among {comp:?}: {}", e.join(", "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "{dir}: import cycles (move the shared part into a leaf module):\n{}",
        report.join("\n")
    );
}

#[test]
fn device_crate_has_no_import_cycles() {
    check_crate("device/src");
}

#[test]
fn host_crate_has_no_import_cycles() {
    check_crate("host/src");
}

#[test]
fn collectives_and_plan_have_no_import_cycles() {
    check_crate("collectives/src");
    check_crate("collectives/device/src");
    check_crate("plan/src");
}

/// The folder check: a cycle between a file and a folder that no two files close is found, and
/// a folder's own `mod.rs` naming its children (and them naming it) is no cycle.
#[test]
fn the_checker_finds_cycles_between_folders() {
    let files: BTreeMap<String, String> = [
        ("error", "use crate::bootstrap::frame::FrameFault;"),
        ("bootstrap", "pub mod frame; pub mod env; pub use frame::Token; use crate::error::Error;"),
        ("bootstrap::frame", "pub struct FrameFault; pub struct Token;"),
        ("bootstrap::env", "use super::frame::Token; use super::Thing; use crate::error::Error;"),
        ("transport", "pub mod tcp;"),
        ("transport::tcp", "pub mod wire; use crate::bootstrap::Token;"),
        ("transport::tcp::wire", "use super::super::RemoteSpan;"),
    ]
    .iter()
    .map(|(m, s)| (m.to_string(), s.to_string()))
    .collect();
    let g = graph(&files);
    assert!(cycles(&g).is_empty(), "no cycle between files: {:?}", cycles(&g));
    let found = cycles(&folder_graph(&g));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["bootstrap", "error"]);
    // Moving the fault out of the folder (a leaf beside it) breaks the cycle.
    let mut after = files.clone();
    after.insert("error".into(), "use crate::frame::FrameFault;".into());
    after.insert("frame".into(), "pub struct FrameFault;".into());
    assert!(cycles(&folder_graph(&graph(&after))).is_empty());
}

/// The checker itself: the two cycles this test was written against are found, with their
/// edges, and the leaf-module layout that replaced them passes.
#[test]
fn the_checker_finds_the_cycles_it_guards_against() {
    let crate_of = |files: &[(&str, &str)]| -> BTreeMap<String, String> {
        files.iter().map(|(m, s)| (m.to_string(), s.to_string())).collect()
    };
    // device: fifo <-> protocol::fifo, as before the trigger moved out.
    let before = crate_of(&[
        ("", "pub mod fifo; pub mod protocol; #[cfg(test)] mod tests;"),
        ("fifo", "pub struct ProxyTrigger; mod device { use super::*; use crate::protocol::{Waiter, fifo as proto}; }"),
        ("protocol", "pub mod fifo; pub trait Waiter {}"),
        ("protocol::fifo", "use super::Waiter;\nuse crate::fifo::{COMMIT_BIT, ProxyTrigger};"),
        ("tests", "use crate::fifo::X; use crate::protocol::fifo::Y;"),
    ]);
    let found = cycles(&graph(&before));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["fifo", "protocol::fifo"]);
    assert_eq!(
        found[0].1,
        [("fifo".to_string(), "protocol::fifo".to_string()), ("protocol::fifo".to_string(), "fifo".to_string())]
    );
    let after = crate_of(&[
        ("", "pub mod fifo; pub mod protocol; pub mod trigger;"),
        ("fifo", "use crate::trigger::ProxyTrigger; mod device { use crate::protocol::{Waiter, fifo as proto}; }"),
        ("protocol", "pub mod fifo; pub trait Waiter {}"),
        ("protocol::fifo", "use super::Waiter;\nuse crate::trigger::{COMMIT_BIT, ProxyTrigger};"),
        ("trigger", "use crate::abi::DeviceAbi; // crate::fifo in a comment\nconst S: &str = \"crate::fifo\";"),
    ]);
    assert!(cycles(&graph(&after)).is_empty());
    // host: a nested use tree and a cycle through three modules, and `super` from an inline
    // module; test-only code does not count.
    let three = crate_of(&[
        ("error", "use crate::{bootstrap::{frame::FrameFault, env}, gpu};"),
        ("bootstrap", "mod frame; mod env;"),
        ("bootstrap::frame", "mod inner { use super::super::env::X; }"),
        ("bootstrap::env", "fn f() { crate::error::Error::new() } #[cfg(test)] mod tests { use crate::gpu::Gpu; }"),
        ("gpu", "#[cfg(test)]\nfn t() { crate::error::x(); }"),
    ]);
    let found = cycles(&graph(&three));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["bootstrap::env", "bootstrap::frame", "error"]);
    let g = graph(&three);
    assert_eq!(g["bootstrap::frame"], BTreeSet::from(["bootstrap::env".to_string()]));
    assert!(g["gpu"].is_empty() && !g["bootstrap::env"].contains("gpu"), "{g:?}");
}
