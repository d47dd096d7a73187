//! Builds the kernel crate in `kernels/` to PTX with nvptx-builder, and lists MSCCL++'s
//! generated plans (`../plan/tests/mscclpp/*.json`) for `tests/mp_exec.rs`, which embeds them
//! (the GPU machine runs the test executable without the source tree).

use std::fmt::Write;

fn main() {
    let ptx = nvptx_builder::Builder::new("kernels").build().unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=MSCCLPP_EXECUTOR_PTX={}", ptx.path.display());

    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../plan/tests/mscclpp")
        .canonicalize()
        .expect("plan/tests/mscclpp exists");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("plan/tests/mscclpp is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut list = String::from("&[\n");
    for f in &files {
        let name = f.file_stem().expect("a file name").to_string_lossy();
        writeln!(list, "    ({name:?}, include_str!({:?})),", f.display().to_string()).expect("a String");
    }
    list.push_str("]\n");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("set by cargo")).join("mscclpp_plans.rs");
    std::fs::write(out, list).expect("OUT_DIR is writable");
}
