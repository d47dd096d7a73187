//! The device crate's documentation examples that are not doc tests (its ```ignore blocks: code
//! that only nvptx64 compiles) are compiled all the same: each block must appear, line for line,
//! in `ptx-tests/src/doc_examples.rs`, whose kernels must be in the module the build made. A doc
//! example that names a function that does not exist (`atomic::fence::<AcqRel, Gpu>()`) can then
//! neither stay in the docs nor be copied into the kernels.

use std::path::Path;

use mscclpp_rs::ptxcheck;

// The block matching of the README check (one source for both).
#[path = "../xtask/src/blocks.rs"]
mod blocks;

/// The ```ignore blocks of the doc comments (`//!`, `///`) of a Rust source, as (line of the
/// opening fence, 1-based; the block's lines with the comment markers taken off).
fn ignored_doc_blocks(src: &str) -> Vec<(usize, Vec<String>)> {
    let doc = |l: &str| -> Option<String> {
        let t = l.trim_start();
        let rest = t.strip_prefix("//!").or_else(|| t.strip_prefix("///"))?;
        Some(rest.strip_prefix(' ').unwrap_or(rest).to_string())
    };
    let mut out = Vec::new();
    let mut lines = src.lines().enumerate();
    while let Some((i, l)) = lines.next() {
        let Some(d) = doc(l) else { continue };
        if d.trim() != "```ignore" {
            continue;
        }
        let body: Vec<String> =
            lines.by_ref().map_while(|(_, l)| doc(l)).take_while(|d| !d.trim_start().starts_with("```")).collect();
        out.push((i + 1, body));
    }
    out
}

/// Whether the lines of `block` appear in `file` in order and contiguous (empty lines aside,
/// after [`blocks::normalize`]); a `// ...` line of the block stands for any number of lines.
/// Crate attributes (`#![..]`) are looked for in `crate_root` instead.
fn mirrored(block: &[String], file: &str, crate_root: &str) -> Result<(), String> {
    let root: Vec<String> = crate_root.lines().map(blocks::normalize).collect();
    let mut want: Vec<&str> = Vec::new();
    for l in block.iter().filter(|l| !l.trim().is_empty()) {
        let n = blocks::normalize(l);
        if n.starts_with("#![") {
            if !root.contains(&n) {
                return Err(format!("crate attribute `{n}` not in the kernel crate's root"));
            }
        } else {
            want.push(l);
        }
    }
    if blocks::contains_block(file, &want) {
        Ok(())
    } else {
        Err(format!(
            "not found in order:\n{}",
            want.iter().map(|l| blocks::normalize(l)).collect::<Vec<_>>().join("\n")
        ))
    }
}

#[test]
fn every_ignored_device_doc_example_is_a_compiled_kernel() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mirror = std::fs::read_to_string(root.join("ptx-tests/src/doc_examples.rs")).unwrap();
    let crate_root = std::fs::read_to_string(root.join("ptx-tests/src/lib.rs")).unwrap();
    let mut problems = Vec::new();
    let mut blocks = 0;
    for f in ptxcheck::rust_files(&root.join("device/src")).unwrap() {
        let src = std::fs::read_to_string(&f).unwrap();
        for (line, block) in ignored_doc_blocks(&src) {
            blocks += 1;
            if let Err(e) = mirrored(&block, &mirror, &crate_root) {
                problems.push(format!("{}:{line}: {e}", f.strip_prefix(root).unwrap_or(&f).display()));
            }
        }
    }
    assert!(
        blocks >= 2,
        "found only {blocks} ```ignore blocks in device/src (the crate docs and atomic's have one each)"
    );
    assert!(
        problems.is_empty(),
        "device doc examples not in ptx-tests/src/doc_examples.rs:\n{}",
        problems.join("\n\n")
    );
    // The mirror's kernels were compiled into the module.
    let entries = ptxcheck::entries(mscclpp_rs::PTX);
    let kernels: Vec<&str> =
        mirror.lines().filter_map(|l| l.split_once("extern \"ptx-kernel\" fn ")?.1.split('(').next()).collect();
    assert!(kernels.len() >= 2, "{kernels:?}");
    for k in kernels {
        assert!(entries.contains_key(k), "kernel {k} of ptx-tests/src/doc_examples.rs not in the module");
    }
}

#[test]
fn blocks_and_their_mirrors() {
    let src = "//! Text.\n//!\n//! ```ignore\n//! #![no_std]\n//! let a = f();\n//! // ... more\n//! g(a);\n//! ```\n\
               /// ```ignore\n/// x();\n/// ```\n/// ```\n/// y();\n/// ```\n";
    let blocks = ignored_doc_blocks(src);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0], (3, vec!["#![no_std]".into(), "let a = f();".into(), "// ... more".into(), "g(a);".into()]));
    let file = "fn k() {\n    let a = f();\n    h();\n\n    g(a);\n    x();\n}\n";
    assert_eq!(mirrored(&blocks[0].1, file, "#![no_std]\n"), Ok(()));
    assert!(mirrored(&blocks[0].1, file, "").unwrap_err().contains("crate attribute"));
    assert_eq!(mirrored(&blocks[1].1, file, ""), Ok(()));
    // A changed line, or lines out of order, fail.
    let renamed = vec!["let a = fence::<AcqRel, Gpu>();".to_string()];
    assert!(mirrored(&renamed, file, "").is_err());
    assert!(mirrored(&["g(a);".into(), "let a = f();".into()], file, "").is_err());
    // Without the `// ...`, lines must be contiguous.
    assert!(mirrored(&["let a = f();".into(), "g(a);".into()], file, "").is_err());
}
