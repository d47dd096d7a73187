//! The driver side shared by the multi-process tests (`bootstrap_procs`, `tcp_procs`, `netns_procs`): each test
//! binary starts itself as N ranks of a scenario with the built-in launcher, captures what they
//! print, and checks it.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mscclpp_host::bootstrap::Launcher;
use mscclpp_host::bootstrap::env::ENV_TIMEOUT;

/// One launch: the launcher's verdict, every line the ranks printed (`[rank r] ...`), and how
/// long it took.
pub struct Run {
    pub result: Result<(), String>,
    pub lines: Vec<String>,
    pub took: Duration,
}

impl Run {
    /// Whether some line contains `needle`.
    pub fn has(&self, needle: &str) -> bool {
        self.lines.iter().any(|l| l.contains(needle))
    }
    /// The first line that contains `needle`.
    #[allow(dead_code)] // not every test binary looks lines up
    pub fn line(&self, needle: &str) -> Option<&String> {
        self.lines.iter().find(|l| l.contains(needle))
    }
    /// The launcher's error, or "".
    #[allow(dead_code)]
    pub fn err(&self) -> &str {
        self.result.as_ref().err().map(String::as_str).unwrap_or("")
    }
}

/// What the ranks of the last launch printed, shown when a check fails.
static LAST_LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keeps `lines` as what the last run printed (shown when its check fails).
#[allow(dead_code)] // only the tests that start their own processes record lines themselves
pub fn record(lines: Vec<String>) {
    *LAST_LINES.lock().unwrap_or_else(|e| e.into_inner()) = lines;
}

/// Starts this executable as `ranks` ranks of `scenario` (`--scenario NAME`), with the bootstrap
/// timeout `timeout_s`, the launcher's `deadline` and `grace`, and waits for them.
pub fn launch(ranks: usize, scenario: &str, timeout_s: f64, deadline: Duration, grace: Duration) -> Run {
    let t = Instant::now();
    let (r, lines) = Launcher::current_exe(ranks)
        .expect("current_exe")
        .args(["--scenario", scenario])
        .env(ENV_TIMEOUT, timeout_s.to_string())
        .deadline(deadline)
        .grace(grace)
        .run_captured();
    record(lines.clone());
    Run { result: r.map_err(|e| e.to_string()), lines, took: t.elapsed() }
}

pub type Check = Result<(), String>;
pub type Test = fn() -> Check;

/// `Ok` when `cond`, else the failure `what` describes.
pub fn ensure(cond: bool, what: impl FnOnce() -> String) -> Check {
    if cond { Ok(()) } else { Err(what()) }
}

/// A rank's exit: `rank R: ok` or `rank R: error: ...` (what the checks look for).
pub fn rank_exit<E: std::fmt::Display>(me: usize, outcome: Result<(), E>) -> ExitCode {
    match outcome {
        Ok(()) => {
            println!("rank {me}: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("rank {me}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `tests` in order (the program's arguments filter them by name; `--verbose` also shows
/// what the ranks printed when a test passed) and reports like libtest's last line.
pub fn driver(tests: &[(&str, Test)]) -> ExitCode {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let verbose = std::env::args().any(|a| a == "--verbose");
    let (mut passed, mut failed) = (0, 0);
    let show = || {
        for l in LAST_LINES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            println!("    {l}");
        }
    };
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        match test() {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", t.elapsed().as_secs_f64());
                if verbose {
                    show();
                }
            }
            Err(why) => {
                failed += 1;
                println!("test {name} ... FAILED: {why}");
                show();
            }
        }
    }
    println!("test result: {}. {passed} passed, {failed} failed", if failed == 0 { "ok" } else { "FAILED" });
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
