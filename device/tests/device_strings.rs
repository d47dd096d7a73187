//! Source checks for strings that reach the device's `vprintf`.
//!
//! The device `vprintf` reads every `%s` argument up to a NUL and ignores a `*` width or
//! precision (`%.*s` printed garbage on an H200). So device-side code must (1) never use `*` in a
//! format string, and (2) pass C strings (`c"..."`), never `&str` literals terminated by a
//! hand-written `"\0"`. This test scans every device-side source for both: this crate, and in the
//! repository every kernel crate (each `crate-type = ["cdylib"]` manifest: `ptx-tests/`, the
//! collectives', executor's and expert-parallel kernels, the examples' kernels), every crate of
//! device code that kernel crates share with their host crate (`*/device`), and the files they
//! include from elsewhere through `#[path = ".."]`.

use std::path::{Path, PathBuf};

/// Every string literal of a Rust source (contents between the quotes, escapes kept), with its
/// line. Comments, char literals and lifetimes are skipped; raw strings are read whole.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    line += usize::from(b[i] == b'\n');
                    i += 1;
                }
                i += 2;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\'') or a lifetime ('a): skip either.
                if b.get(i + 1) == Some(&b'\\') {
                    i += 3;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0
                    || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
                    || b[i - 1] == b'c'
                    || b[i - 1] == b'b') =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while j < b.len() && b[j] == b'#' {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let start = j + 1;
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                let mut k = start;
                while k < b.len() && !b[k..].starts_with(&close) {
                    k += 1;
                }
                let s = String::from_utf8_lossy(&b[start..k.min(b.len())]).into_owned();
                out.push((line, s.clone()));
                line += s.matches('\n').count();
                i = k + close.len();
            }
            b'"' => {
                let start = i + 1;
                let mut k = start;
                while k < b.len() && b[k] != b'"' {
                    if b[k] == b'\\' {
                        k += 1;
                    }
                    k += 1;
                }
                let s = String::from_utf8_lossy(&b[start..k.min(b.len())]).into_owned();
                out.push((line, s.clone()));
                line += s.matches('\n').count();
                i = k + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The printf conversions of `s` that take a `*` width or precision (`%*d`, `%.*s`, `%-*.*s`).
fn star_conversions(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut bad = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        if b.get(i + 1) == Some(&b'%') {
            i += 2;
            continue;
        }
        let start = i;
        i += 1;
        while i < b.len() && b"-+ #0".contains(&b[i]) {
            i += 1;
        }
        let mut star = false;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'*' || b[i] == b'.') {
            star |= b[i] == b'*';
            i += 1;
        }
        if star {
            bad.push(String::from_utf8_lossy(&b[start..(i + 1).min(b.len())]).into_owned());
        }
    }
    bad
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The kernel crates of the repository at `root`: the directories under it (build outputs and
/// hidden directories aside) whose `Cargo.toml` builds a `cdylib`.
fn kernel_crates(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && name != "target" && !name.starts_with('.') {
                stack.push(p);
            } else if name == "Cargo.toml"
                && std::fs::read_to_string(&p)
                    .is_ok_and(|t| t.lines().any(|l| l.replace(' ', "") == r#"crate-type=["cdylib"]"#))
            {
                out.push(d.clone());
            }
        }
    }
    out.sort();
    out
}

/// The files that `src` includes through `#[path = "FILE"]`, resolved against `dir` (the
/// directory of the file holding `src`).
fn path_includes(src: &str, dir: &Path) -> Vec<PathBuf> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("#[path = \"")?.split_once('"').map(|(f, _)| f))
        .map(|f| dir.join(f))
        .collect()
}

/// The kernel crates the repository must have (the discovery in [`kernel_crates`] finds them).
const KERNEL_CRATES: [&str; 6] = [
    "collectives/kernels",
    "ep/kernels",
    "examples/allreduce/kernels",
    "examples/quickstart/kernels",
    "executor/kernels",
    "ptx-tests",
];

/// The crates of device code that a host crate and its kernel crate share.
const DEVICE_CODE_CRATES: [&str; 4] = ["collectives/device", "ep/device", "executor/device", "nccl/device"];

/// The device-side sources: this crate, and within the repository (not in a packaged copy of the
/// crate) every kernel crate's and device-code crate's sources and what they include by `#[path]`.
fn device_sources() -> Vec<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&here.join("src"), &mut files);
    assert!(files.iter().any(|f| f.ends_with("ptx/print.rs")), "device sources not found under {}", here.display());
    let root = here.join("..");
    if root.join("ptx-tests/Cargo.toml").exists() {
        let root = root.canonicalize().unwrap();
        let crates = kernel_crates(&root);
        for want in KERNEL_CRATES {
            assert!(crates.iter().any(|c| c.ends_with(want)), "kernel crate {want} not found among {crates:?}");
        }
        for c in &crates {
            rust_files(&c.join("src"), &mut files);
        }
        for c in DEVICE_CODE_CRATES {
            let before = files.len();
            rust_files(&root.join(c).join("src"), &mut files);
            assert!(files.len() > before, "no sources under {c}/src");
        }
        let mut i = 0;
        while i < files.len() {
            let (src, dir) = (std::fs::read_to_string(&files[i]).unwrap(), files[i].parent().unwrap().to_path_buf());
            for f in path_includes(&src, &dir) {
                let f =
                    f.canonicalize().unwrap_or_else(|e| panic!("{} includes {}: {e}", files[i].display(), f.display()));
                if !files.iter().any(|g| g.canonicalize().is_ok_and(|g| g == f)) {
                    files.push(f);
                }
            }
            i += 1;
        }
        assert!(
            files.iter().any(|f| f.ends_with("collectives/device/src/device/oneshot.rs")),
            "the collectives' device code not scanned"
        );
    }
    files
}

#[test]
fn path_includes_resolve_against_the_including_file() {
    let src = "mod a;\n#[path = \"../../src/shared.rs\"]\nmod shared;\n    #[path = \"x.rs\"] mod x;\n";
    let dir = Path::new("/r/ep/kernels/src");
    assert_eq!(path_includes(src, dir), [dir.join("../../src/shared.rs"), dir.join("x.rs")]);
}

#[test]
fn scanner_finds_what_it_must() {
    let src = r#"
        // "%.*s in a comment"
        let a = x % *p; let c = 'x'; fn f<'a>() {}
        vprintf(c"at %.*s:%u\n", args);
        let s = "plain\0";
        let r = r"raw %*d";
    "#;
    let lits = string_literals(src);
    let stars: Vec<_> = lits.iter().flat_map(|(l, s)| star_conversions(s).into_iter().map(move |c| (*l, c))).collect();
    assert_eq!(stars, vec![(4, "%.*s".to_string()), (6, "%*d".to_string())]);
    assert!(lits.iter().any(|(l, s)| *l == 5 && s.ends_with("\\0")));
    assert!(star_conversions("%-*.*s %5.2f %% %llu").len() == 1);
    assert!(star_conversions("%s %u %llu %5d %.3s 100%%").is_empty());
}

#[test]
fn no_star_width_or_precision_in_device_format_strings() {
    let mut bad = Vec::new();
    for f in device_sources() {
        let src = std::fs::read_to_string(&f).unwrap();
        for (line, s) in string_literals(&src) {
            for c in star_conversions(&s) {
                bad.push(format!("{}:{line}: `{c}` in \"{s}\"", f.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the device vprintf ignores `*` width/precision; pass C strings instead:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_hand_terminated_strings_in_device_sources() {
    let mut bad = Vec::new();
    for f in device_sources() {
        let src = std::fs::read_to_string(&f).unwrap();
        // The `device_assert!` macro builds its C string from `concat!($msg, "\0")`: the one
        // place a bare "\0" is expected.
        for (line, s) in string_literals(&src) {
            if s.ends_with("\\0") && !s.is_empty() && s != "\\0" {
                bad.push(format!("{}:{line}: \"{s}\"", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "use c\"...\" literals (core::ffi::CStr) instead of \"...\\0\":\n{}", bad.join("\n"));
}
