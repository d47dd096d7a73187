//! `./x mutants`: mutation testing of the modules that guard security and correctness, with
//! cargo-mutants (installed with `cargo install --locked cargo-mutants` when it is missing).
//!
//! Each of [`TARGETS`] names a package, its files (optionally only the functions a regex picks) and
//! the tests that guard them: cargo-mutants plants one small bug at a time in a copy of the tree
//! (never in place), runs those tests, and records whether they caught it. The results go to
//! `target/mutants/<target>/mutants.out/`, and `target/mutants/summary.md` sums up every target
//! run so far (a target run again replaces its results): mutants
//! tried, caught, missed (each with the reason from [`EQUIVALENT`] when it cannot change
//! behaviour), timed out and unviable, and the wall time. One job at a time, for a machine of two
//! cores; each target has a test timeout that fits its tests there. The builds share one target
//! directory, `target/mutants/build/`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{Result, cargo_bin, run, say};

/// One module (or group of files) under mutation testing.
pub struct Target {
    /// The name `./x mutants NAME` takes.
    pub name: &'static str,
    /// What it guards.
    pub what: &'static str,
    /// The package the files belong to.
    pub package: &'static str,
    /// The files mutated, relative to the repository root.
    pub files: &'static [&'static str],
    /// Only the mutants whose name matches this regex (cargo-mutants `--re`), when set.
    pub only: Option<&'static str>,
    /// Mutants whose name matches this regex are left out (cargo-mutants `--exclude-re`), when
    /// set, with the reason in [`Target::what`].
    pub skip: Option<&'static str>,
    /// Arguments to `cargo test` (after cargo-mutants' `--`): which test targets guard the files,
    /// and a name filter after a second `--`.
    pub tests: &'static [&'static str],
    /// Extra environment for every build and test of this target.
    pub env: &'static [(&'static str, &'static str)],
    /// Seconds one test run of a mutant may take (several times the unmutated run on two cores).
    pub timeout_s: u32,
}

/// The modules `./x mutants` runs on, in the order it runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "token",
        what: "the session token and the handshakes' proofs: tags, derivations, labels, nonces",
        package: "mscclpp-host",
        files: &["host/src/frame.rs", "host/src/auth.rs"],
        only: Some("Token::|stable_hash|src/auth\\.rs"),
        skip: None,
        tests: &["--lib", "--", "bootstrap::", "frame::", "auth::", "transport::"],
        env: &[],
        timeout_s: 240,
    },
    Target {
        name: "frames",
        what: "bootstrap frames: the header checks, the codec and the payloads (the token: `token`)",
        package: "mscclpp-host",
        files: &["host/src/frame.rs"],
        only: None,
        skip: Some("Token::|stable_hash"),
        // The frame tests, the payload codecs' test and a few bootstraps over real sockets that
        // read and write every kind of frame. The other bootstrap tests wait out handshakes and
        // timeouts on purpose (about 20 s in all, against 2 s for these): the rendezvous
        // target runs them.
        tests: &[
            "--lib",
            "--",
            "frame::",
            "bootstrap::tests::table_and_intro_codecs",
            "bootstrap::tests::all_gather_and_barrier_on_four_ranks",
            "bootstrap::tests::send_recv_interleaved_with_collectives",
            "bootstrap::tests::frame_faults_over_a_real_socket",
        ],
        env: &[],
        timeout_s: 60,
    },
    Target {
        name: "shm",
        what: "/dev/shm files: names, owner, mode, size, stale files",
        package: "mscclpp-host",
        files: &["host/src/shm.rs"],
        // `register`, `Drop`'s unregister and the pointer getters need a GPU (tests/unit_*.rs).
        only: None,
        skip: Some("register|device_addr"),
        tests: &["--lib", "--", "shm::"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "nvls-guard",
        what: "the NVLink multicast guard",
        package: "mscclpp-host",
        files: &["host/src/nvls/guard.rs"],
        only: None,
        skip: None,
        tests: &["--lib", "--", "nvls::"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "collectives-config",
        what: "the collectives' settings and size checks",
        package: "mscclpp-collectives",
        files: &["collectives/src/lib.rs"],
        only: Some("Config::check|checked_scratch_bytes|check_rounds|check_request"),
        skip: None,
        tests: &["--lib"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "spin-budget",
        what: "spin budgets (the nvptx-only waits are held by tests/ptx_checks.rs, not here)",
        package: "mscclpp-device",
        files: &["device/src/poll.rs"],
        only: None,
        skip: Some("spin_until|now_ns|replace expired "),
        tests: &["--lib"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "ipc",
        what: "CUDA IPC import: the sizes a peer claims",
        package: "mscclpp-host",
        files: &["host/src/ipc.rs"],
        only: Some("validate|check_mapped_range"),
        skip: None,
        tests: &["--lib", "--", "ipc::"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "executor-encode",
        what: "the plan executor's host encoder and arena layout",
        package: "mscclpp-executor",
        files: &["executor/src/encode.rs"],
        only: None,
        skip: None,
        tests: &["--test", "encode", "--test", "layout_alignment"],
        env: &[],
        timeout_s: 180,
    },
    Target {
        name: "rendezvous",
        what: "the bootstrap rendezvous: handshakes, strays, the pending cap",
        package: "mscclpp-host",
        files: &["host/src/bootstrap/rendezvous.rs"],
        only: None,
        skip: None,
        tests: &["--lib", "--", "bootstrap::"],
        env: &[],
        // The tests take about 15 s; a mutant that breaks the handshake leaves some of them
        // waiting out their bootstrap timeouts (about 250 s in all), which 90 s cuts short: such
        // a mutant shows as timed out, not caught.
        timeout_s: 90,
    },
    Target {
        name: "tcp",
        what: "the TCP transport: wire format, bounds, handshakes, the receiver",
        package: "mscclpp-host",
        files: &[
            "host/src/transport/tcp/wire.rs",
            "host/src/transport/tcp/memory.rs",
            "host/src/transport/tcp/mod.rs",
            "host/src/transport/tcp/sender.rs",
            "host/src/transport/tcp/receiver.rs",
            "host/src/transport/tcp/socket.rs",
            "host/src/transport/tcp/shared.rs",
            "host/src/transport/tcp/connect.rs",
        ],
        only: None,
        skip: None,
        // The transport's unit tests take about 5 s; a mutant that stalls a connection waits
        // for a timeout of theirs, which 30 s cuts short (it then shows as timed out).
        tests: &["--lib", "--", "transport::"],
        env: &[],
        timeout_s: 30,
    },
    Target {
        name: "fifo",
        what: "the FIFO publish protocol (model-checked under loom)",
        package: "mscclpp-device",
        files: &["device/src/protocol/fifo.rs"],
        only: None,
        skip: None,
        // The model checks, and the protocol's unit tests: the model only asks `poll` after a
        // `sync` (when it must be true); the unit tests also ask it before the trigger is handled.
        tests: &["--release", "--lib", "--test", "fifo_model"],
        env: &[("RUSTFLAGS", "--cfg loom")],
        timeout_s: 600,
    },
    Target {
        name: "plan-check",
        what: "the plan checker",
        package: "mscclpp-plan",
        files: &["plan/src/check.rs"],
        only: None,
        skip: None,
        // Every unit and integration test of the crate; not the doctest (one small plan that
        // the tests hold many times over), which is linked again for every mutant.
        tests: &["--tests"],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "plan-reader",
        what: "the MSCCL++ plan reader",
        package: "mscclpp-plan",
        files: &["plan/src/mscclpp_json.rs"],
        only: None,
        skip: None,
        tests: &[],
        env: &[],
        timeout_s: 120,
    },
    Target {
        name: "ep-layout",
        what: "the expert-parallel layout (its CPU specification, which the emulated kernels follow)",
        package: "mscclpp-ep",
        files: &["ep/src/reference.rs"],
        only: Some("layout"),
        skip: None,
        // Its unit tests (hand cases for the edges and a property over random routings); the
        // integration tests hold the kernels to it (emulated on CPU threads, or on a GPU) and
        // take far longer.
        tests: &["--lib", "--", "reference::"],
        env: &[],
        timeout_s: 300,
    },
];

/// Surviving mutants that cannot change behaviour (or lie outside their target's selection: see
/// the file's header), with why: lines `FILE: MUTANT | REASON`, the
/// mutant as cargo-mutants names it without its line and column (which may hold ` | ` itself: the
/// reason is what follows the last one). Where a file has several mutants of that name (`replace
/// && with || in check`), `FILE:LINE:COL: MUTANT | REASON` names the one meant; it stops matching
/// when the file's lines move, and the mutant then shows as unexplained until the entry is
/// updated.
const EQUIVALENT: &str = include_str!("../equivalent-mutants.txt");

/// The reason a missed mutant (`file:line:col: description`) is equivalent, if it is listed.
pub fn equivalent(missed: &str) -> Option<&'static str> {
    let (file, rest) = missed.split_once(':')?;
    // `line:col: `, then the description.
    let mut parts = rest.splitn(3, ':');
    let (line, col) = (parts.next()?, parts.next()?);
    let description = parts.next()?.trim();
    let place = format!("{file}:{line}:{col}");
    EQUIVALENT.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (mutant, reason) = l.rsplit_once(" | ")?;
        let (f, d) = mutant.split_once(": ")?;
        let f = f.trim();
        ((f == file || f == place) && d.trim() == description).then_some(reason.trim())
    })
}

/// `./x mutants [--list | --summary | NAME...]`: `--summary` only rewrites and prints the
/// summary of the results already there (after an edit of the equivalent mutants, say).
pub fn mutants(root: &Path, args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--list") {
        for t in TARGETS {
            println!("{:<20} {} ({}: {})", t.name, t.what, t.package, t.files.join(", "));
        }
        return Ok(());
    }
    if args.iter().any(|a| a == "--summary") {
        return summarize(&root.join("target").join("mutants")).map(drop);
    }
    let chosen: Vec<&Target> = if args.is_empty() {
        TARGETS.iter().collect()
    } else {
        args.iter()
            .map(|a| {
                TARGETS.iter().find(|t| t.name == a).ok_or_else(|| {
                    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                    format!("no mutation target `{a}` (targets: {})", names.join(", "))
                })
            })
            .collect::<Result<_>>()?
    };
    let out = root.join("target").join("mutants");
    install(root)?;
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let mut nothing = Vec::new();
    for t in chosen {
        let dir = out.join(t.name);
        // Results of an earlier run of this target would be mixed with this one's.
        let _ = std::fs::remove_dir_all(&dir);
        let start = Instant::now();
        let mut cmd = Command::new(cargo_bin());
        cmd.current_dir(root).args(["mutants", "--no-shuffle", "--jobs", "1", "--package", t.package]);
        for f in t.files {
            cmd.args(["--file", f]);
        }
        if let Some(re) = t.only {
            cmd.args(["--re", re]);
        }
        if let Some(re) = t.skip {
            cmd.args(["--exclude-re", re]);
        }
        cmd.arg("--timeout").arg(t.timeout_s.to_string()).arg("--output").arg(&dir);
        if !t.tests.is_empty() {
            cmd.arg("--").args(t.tests);
        }
        // One target directory for every run: the copies of the tree change path, so the
        // workspace's crates build again, but their dependencies do not.
        cmd.env("CARGO_TARGET_DIR", out.join("build"));
        // No debug info: every mutant links its test binary again, and on two cores the linking
        // of full debug info is a large part of each mutant's time. Nothing a test checks
        // depends on it (debug assertions and overflow checks stay on).
        cmd.env("CARGO_PROFILE_DEV_DEBUG", "0");
        for (k, v) in t.env {
            cmd.env(k, v);
        }
        say(format!("mutants: {} ({}), results in {}", t.name, t.what, dir.display()));
        // cargo-mutants exits non-zero when a mutant survives or times out: its files say which.
        if let Err(e) = run(&mut cmd)
            && !dir.join("mutants.out").join("outcomes.json").exists()
        {
            nothing.push(format!("{}: {e}", t.name));
        }
        let wall = format!("{:.0}\n", start.elapsed().as_secs_f64());
        let _ = std::fs::write(dir.join("wall_s"), wall);
        // After every target, so that a run stopped part way keeps what it finished.
        summarize(&out)?;
    }
    let unexplained = summarize(&out)?;
    if !nothing.is_empty() {
        return Err(format!("cargo-mutants tried nothing: {}", nothing.join("; ")));
    }
    if unexplained.is_empty() {
        Ok(())
    } else {
        Err(format!("surviving mutants not listed as equivalent in: {}", unexplained.join(", ")))
    }
}

/// Writes and prints `summary.md` from the results of every target run so far (in `out`);
/// returns the targets with a missed mutant that [`EQUIVALENT`] does not explain.
fn summarize(out: &Path) -> Result<Vec<&'static str>> {
    let mut table = String::from(
        "# Mutation testing (`./x mutants`)\n\n| target | tried | caught | missed | timeout | unviable | wall |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut notes = String::new();
    let mut unexplained = Vec::new();
    for t in TARGETS {
        let dir = out.join(t.name);
        let results = dir.join("mutants.out");
        if !results.is_dir() {
            continue;
        }
        let read = |kind: &str| -> Vec<String> {
            std::fs::read_to_string(results.join(format!("{kind}.txt")))
                .map(|s| s.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect())
                .unwrap_or_default()
        };
        let (caught, missed, timeout, unviable) = (read("caught"), read("missed"), read("timeout"), read("unviable"));
        let tried = caught.len() + missed.len() + timeout.len() + unviable.len();
        let wall =
            std::fs::read_to_string(dir.join("wall_s")).map_or("(running)".into(), |w| format!("{} s", w.trim()));
        let _ = writeln!(
            table,
            "| {} | {tried} | {} | {} | {} | {} | {wall} |",
            t.name,
            caught.len(),
            missed.len(),
            timeout.len(),
            unviable.len()
        );
        if !missed.is_empty() || !timeout.is_empty() {
            let _ = writeln!(notes, "\n## {}\n", t.name);
        }
        for m in &missed {
            match equivalent(m) {
                Some(why) => writeln!(notes, "- missed, equivalent: `{m}`: {why}"),
                None => writeln!(notes, "- **missed**: `{m}`"),
            }
            .ok();
        }
        for m in &timeout {
            let _ = writeln!(notes, "- timed out (the mutant hangs the tests, which fail by their timeout): `{m}`");
        }
        if missed.iter().any(|m| equivalent(m).is_none()) {
            unexplained.push(t.name);
        }
    }
    let summary = format!("{table}{notes}");
    let path = out.join("summary.md");
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    std::fs::write(&path, &summary).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("\n{summary}");
    say(format!("summary written to {}", path.display()));
    Ok(unexplained)
}

/// Installs cargo-mutants when `cargo mutants --version` does not answer.
fn install(root: &Path) -> Result<()> {
    let found = Command::new(cargo_bin()).args(["mutants", "--version"]).current_dir(root).output();
    if let Ok(o) = found
        && o.status.success()
    {
        say(format!("{} found", String::from_utf8_lossy(&o.stdout).trim()));
        return Ok(());
    }
    say("cargo-mutants not found: installing it with `cargo install --locked cargo-mutants` (first run only)");
    run(Command::new(cargo_bin()).args(["install", "--locked", "cargo-mutants"]).current_dir(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_files_that_exist_once_each() {
        let root = crate::root();
        let mut names = std::collections::BTreeSet::new();
        for t in TARGETS {
            assert!(names.insert(t.name), "two targets named {}", t.name);
            for f in t.files {
                assert!(root.join(f).is_file(), "{}: no file {f}", t.name);
            }
        }
    }

    #[test]
    fn equivalent_mutants_are_found_by_file_and_description() {
        for l in EQUIVALENT.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (mutant, reason) = l.rsplit_once(" | ").unwrap_or_else(|| panic!("no ` | reason` in {l:?}"));
            assert!(!reason.trim().is_empty(), "{l:?}");
            let (file, description) = mutant.split_once(": ").unwrap();
            match file.split_once(':') {
                Some((path, place)) => {
                    assert!(crate::root().join(path).is_file(), "{l:?}: no file {path}");
                    assert_eq!(equivalent(&format!("{file}: {description}")), Some(reason.trim()));
                    let (line, col) = place.split_once(':').unwrap();
                    let other: u32 = line.parse::<u32>().unwrap() + 1;
                    let moved = format!("{path}:{other}:{col}: {description}");
                    assert_ne!(equivalent(&moved), Some(reason.trim()), "{l:?} matches another line");
                }
                None => {
                    assert!(crate::root().join(file).is_file(), "{l:?}: no file {file}");
                    assert_eq!(equivalent(&format!("{file}:1:2: {description}")), Some(reason.trim()));
                }
            }
        }
        assert_eq!(equivalent("host/src/shm.rs:1:2: no such mutant"), None);
    }
}
