//! The nested build for real: a small kernel crate with two warnings is built to PTX; the warnings
//! come back, the lock file is held with `--locked` once it exists, and `locked(false)` lets cargo
//! rewrite it.

use nvptx_builder::{Builder, Error};
use std::path::{Path, PathBuf};

const LIB: &str = r#"#![no_std]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(no_mangle)]
pub extern "C" fn add_one(x: u32) -> u32 {
    let unused = 3;
    x + 1
}

fn never_called() {}
"#;

fn manifest(version: &str) -> String {
    format!(
        "[package]\nname = \"warn-kernels\"\nversion = \"{version}\"\nedition = \"2024\"\n\n[workspace]\n\n[lib]\ncrate-type = [\"cdylib\"]\n"
    )
}

/// The nested target directory the workspace's own build scripts use (`<target>/nvptx`), so that
/// `core`, built with the same flags, is built once.
fn shared_target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("nvptx")
}

fn builder(dir: &Path) -> Builder {
    Builder::new(dir).target_dir(shared_target_dir()).rerun_if_changed(false).forward_warnings(false)
}

#[test]
fn builds_reports_warnings_and_holds_the_lock_file() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvptx-builder-nested").join("warn-kernels");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest("0.1.0")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), LIB).unwrap();
    let lock = dir.join("Cargo.lock");
    let want = [
        "unused variable: `unused` (at src/lib.rs:10:9)",
        "function `never_called` is never used (at src/lib.rs:14:4)",
    ];

    // No lock file yet: built without --locked (cargo would refuse to write one), which writes it.
    let ptx = builder(&dir).build().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ptx.crate_name, "warn-kernels");
    assert!(ptx.read().unwrap().contains("add_one"), "the PTX defines the crate's function");
    assert_eq!(ptx.warnings, want);
    assert!(ptx.path.starts_with(shared_target_dir().join("ptx")), "{}", ptx.path.display());
    assert!(lock.is_file(), "cargo wrote the lock file");

    // With the lock file, --locked: an up-to-date lock builds (with -Zbuild-std, whose own
    // lock is the toolchain's), and a fresh crate's warnings are replayed.
    let again = builder(&dir).build().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.warnings, want);

    // The manifest moves on, the lock does not: refused, naming the lock, which is left alone.
    std::fs::write(dir.join("Cargo.toml"), manifest("0.2.0")).unwrap();
    let before = std::fs::read_to_string(&lock).unwrap();
    let e = builder(&dir).build().expect_err("a stale lock under --locked must fail");
    match &e {
        Error::LockOutdated { lock: l, command, .. } => {
            assert_eq!(l, &lock);
            assert!(command.contains("--locked"), "{command}");
        }
        other => panic!("expected LockOutdated, got {other}"),
    }
    let msg = e.to_string();
    assert!(msg.contains(&lock.display().to_string()) && msg.contains("Builder::locked(false)"), "{msg}");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), before);

    // locked(false): cargo updates the lock as it would for any unlocked build.
    builder(&dir).locked(false).build().unwrap_or_else(|e| panic!("{e}"));
    let after = std::fs::read_to_string(&lock).unwrap();
    assert!(after.contains("version = \"0.2.0\""), "{after}");
}
