//! The published crates carry the licence texts: every workspace package that `cargo publish`
//! would accept (no `publish = false`) lists `LICENSE-MIT` and `LICENSE-APACHE` in
//! `cargo package --list`, and each is the repository's own text.

use std::path::{Path, PathBuf};
use std::process::Command;

const LICENCES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// The workspace packages that may be published, with their folders.
fn publishable() -> Vec<(String, PathBuf)> {
    let out = cargo().args(["metadata", "--no-deps", "--format-version", "1", "--offline"]).output().unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        // `publish`: null means any registry; an empty list means `publish = false`.
        if p["publish"].as_array().is_some_and(|r| r.is_empty()) {
            continue;
        }
        let dir = Path::new(p["manifest_path"].as_str().unwrap()).parent().unwrap().to_path_buf();
        found.push((p["name"].as_str().unwrap().to_string(), dir));
    }
    found
}

#[test]
fn every_published_crate_packages_both_licence_texts() {
    let root = root();
    let crates = publishable();
    let names: Vec<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    for must in ["mscclpp-device", "mscclpp-host", "nvptx-builder"] {
        assert!(names.contains(&must), "{must} is not publishable any more? publishable: {names:?}");
    }
    for (name, dir) in &crates {
        let out = cargo().args(["package", "--list", "--allow-dirty", "--offline", "-p", name]).output().unwrap();
        assert!(out.status.success(), "cargo package --list -p {name}: {}", String::from_utf8_lossy(&out.stderr));
        let listed = String::from_utf8(out.stdout).unwrap();
        for l in LICENCES {
            assert!(listed.lines().any(|f| f == l), "{name}: {l} is not in the package:\n{listed}");
            let text = std::fs::read_to_string(dir.join(l)).unwrap();
            assert_eq!(text, std::fs::read_to_string(root.join(l)).unwrap(), "{name}: {l} differs from the root's");
        }
    }
}

#[test]
fn the_licence_texts_are_the_ones_the_manifests_name() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""), "the workspace licence changed: update the texts");
    let mit = std::fs::read_to_string(root().join("LICENSE-MIT")).unwrap();
    assert!(mit.contains("Permission is hereby granted, free of charge"), "LICENSE-MIT is not the MIT licence");
    let apache = std::fs::read_to_string(root().join("LICENSE-APACHE")).unwrap();
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"), "LICENSE-APACHE");
}
