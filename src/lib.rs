//! The mscclpp-rs harness: the device programs of `ptx-tests/` embedded as PTX, the table of
//! expected instructions for every PTX wrapper, PTX/SASS parsing, and GPU test support.

pub mod bench;
pub mod checks;
pub mod ptxcheck;
pub mod testing;

/// The device programs (`ptx-tests/`), release build for sm_90, PTX ISA 8.6.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/ptx_tests.ptx"));

/// The same programs with device-side argument assertions compiled in (feature `checks`).
pub const PTX_CHECKED: &str = include_str!(concat!(env!("OUT_DIR"), "/ptx_tests_checked.ptx"));

/// Where the build wrote the PTX files (for assembling them with ptxas).
pub fn ptx_path(checked: bool) -> std::path::PathBuf {
    std::path::Path::new(env!("OUT_DIR")).join(if checked { "ptx_tests_checked.ptx" } else { "ptx_tests.ptx" })
}
