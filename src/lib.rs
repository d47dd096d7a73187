//! The mscclpp-rs harness: the device programs of `ptx-tests/` embedded as PTX, the expected
//! instructions of every PTX wrapper (the device crate's `ptx::CHECKS`), PTX/SASS parsing, GPU test
//! support, bench timing and the report's data (benchmark rows, checks, plots) and child-process
//! runner.

pub mod bench;
pub mod checks;
pub mod ptxcheck;
pub mod report;
pub mod suite;
pub mod testing;

/// The device programs (`ptx-tests/`), release build for sm_90, PTX ISA 8.6.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/ptx_tests.ptx"));

/// The same programs with device-side argument assertions compiled in (feature `checks`).
pub const PTX_CHECKED: &str = include_str!(concat!(env!("OUT_DIR"), "/ptx_tests_checked.ptx"));

/// The same programs built for sm_100a with feature `sm100a` (adds the fp8 multimem forms).
pub const PTX_SM100A: &str = include_str!(concat!(env!("OUT_DIR"), "/ptx_tests_sm100a.ptx"));

/// Writes the embedded PTX (plain or checked) to a file in the temp directory and returns its
/// path, for assembling it with ptxas (works wherever the binary runs, not only where it was built).
pub fn ptx_path(checked: bool) -> std::path::PathBuf {
    let (name, text) = if checked { ("ptx_tests_checked", PTX_CHECKED) } else { ("ptx_tests", PTX) };
    write_temp(name, text)
}

/// Writes the embedded sm_100a PTX ([`PTX_SM100A`]) to a temp file and returns its path.
pub fn ptx_sm100a_path() -> std::path::PathBuf {
    write_temp("ptx_tests_sm100a", PTX_SM100A)
}

/// Writes `text` to `NAME.ptx` in a directory of its own for every call: tests running in
/// parallel threads each assemble their own file (ptxas writes the cubin beside it), so no test
/// reads a file another is rewriting.
fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mscclpp-rs-{}-{n}", std::process::id()));
    let path = dir.join(format!("{name}.ptx"));
    std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text)).expect("writing the PTX to a temp file");
    path
}
