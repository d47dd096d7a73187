//! The GPU part of the report runs the project's own test, pattern and bench executables as
//! child processes and reads what they print and the benchmark rows they write. This module
//! finds those executables (beside the report in the GPU bundle, else built with cargo) and runs
//! one with a deadline, a log file and a callback per output line.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The executables the GPU report runs, by the names the GPU bundle gives them.
pub const EXECUTABLES: [&str; 12] = [
    "unit_bulk",
    "unit_sync",
    "unit_memchan",
    "unit_transport",
    "mp_patterns",
    "mp_collectives",
    "mp_ep",
    "mp_exec",
    "bench_bulk",
    "bench_sync",
    "bench_memchan",
    "coll_bench",
];

/// Executable name -> path.
pub type Executables = BTreeMap<String, PathBuf>;

/// The executables found in `dir` (the GPU bundle puts them beside the report), if all are there.
pub fn beside(dir: &Path) -> Option<Executables> {
    EXECUTABLES.iter().map(|n| dir.join(n).is_file().then(|| (n.to_string(), dir.join(n)))).collect()
}

/// The cargo invocations that build the executables, in the workspace root: the test and bench
/// targets (release, `bench` profile) and `coll-bench`.
pub fn cargo_commands() -> [Vec<&'static str>; 2] {
    [
        vec![
            "test",
            "--release",
            "--no-run",
            "--message-format=json-render-diagnostics",
            "-p",
            "mscclpp-rs",
            "-p",
            "mscclpp-collectives",
            "-p",
            "mscclpp-ep",
            "-p",
            "mscclpp-executor",
            "--test",
            "unit_bulk",
            "--test",
            "unit_sync",
            "--test",
            "unit_memchan",
            "--test",
            "unit_transport",
            "--test",
            "mp_patterns",
            "--test",
            "mp_collectives",
            "--test",
            "mp_ep",
            "--test",
            "mp_exec",
            "--bench",
            "bulk",
            "--bench",
            "sync",
            "--bench",
            "memchan",
        ],
        vec![
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
            "-p",
            "mscclpp-collectives",
            "--bin",
            "coll-bench",
        ],
    ]
}

/// The executables in cargo's JSON messages, by bundle name: a test target by its name, a bench
/// target as `bench_NAME`, a binary with `-` as `_`.
pub fn executables_in(messages: &str) -> Executables {
    let mut out = Executables::new();
    for v in messages.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(exe), Some(name), Some(kind)) =
            (v["executable"].as_str(), v["target"]["name"].as_str(), v["target"]["kind"][0].as_str())
        else {
            continue;
        };
        let name = match kind {
            "bench" => format!("bench_{name}"),
            _ => name.replace('-', "_"),
        };
        out.insert(name, PathBuf::from(exe));
    }
    out
}

/// Builds the executables with `cargo` in `workspace` (cargo's progress and errors go to the
/// terminal) and returns them.
pub fn build_with_cargo(cargo: &str, workspace: &Path) -> Result<Executables, String> {
    let mut all = Executables::new();
    for args in cargo_commands() {
        let mut cmd = Command::new(cargo);
        cmd.args(&args).current_dir(workspace).stdout(Stdio::piped()).stderr(Stdio::inherit());
        // Set by `cargo run` for this program; they describe it, not what is built now.
        for v in
            ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_PRIMARY_PACKAGE", "CARGO_CRATE_NAME", "CARGO_BIN_NAME"]
        {
            cmd.env_remove(v);
        }
        let shown = format!("cargo {}", args.join(" "));
        let out = cmd.output().map_err(|e| format!("could not start {shown}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{shown} failed ({})", out.status));
        }
        all.extend(executables_in(&String::from_utf8_lossy(&out.stdout)));
    }
    let missing: Vec<&str> = EXECUTABLES.iter().copied().filter(|n| !all.contains_key(*n)).collect();
    if missing.is_empty() { Ok(all) } else { Err(format!("cargo built no executable for {}", missing.join(", "))) }
}

/// How a child process ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status (`None`: killed at the deadline).
    pub status: Option<ExitStatus>,
    /// stdout and stderr, interleaved by line as they came.
    pub output: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl Finished {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Why it did not succeed, in a few words: the deadline, a panic message, a `RESULT FAILED`
    /// line, or the exit status with the last line of output.
    pub fn failure(&self, deadline: Duration) -> String {
        let Some(status) = self.status else {
            return format!("still running at the {}s deadline; killed", deadline.as_secs());
        };
        let lines: Vec<&str> = self.output.lines().collect();
        if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
            return format!("{} ({status})", lines.get(i + 1).copied().unwrap_or(lines[i]).trim());
        }
        if let Some(l) = lines.iter().find(|l| l.contains("RESULT FAILED")) {
            return format!("{} ({status})", l.trim());
        }
        let last = lines.iter().rev().find(|l| !l.trim().is_empty()).copied().unwrap_or("");
        format!("{status}: {}", last.trim())
    }
}

/// Runs `cmd` until it exits or `deadline` passes (then it and every process it started are
/// killed, the ranks a launcher started included), writing its output to `log` and calling
/// `on_line` with every line. The child stays in this process's group, so a `timeout` around
/// the report ends the children too.
pub fn run(mut cmd: Command, log: &Path, deadline: Duration, mut on_line: impl FnMut(&str)) -> Finished {
    let t0 = Instant::now();
    let mut file = std::fs::File::create(log).ok();
    let mut output = String::new();
    let mut note = |output: &mut String, line: &str| {
        output.push_str(line);
        output.push('\n');
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            note(&mut output, &format!("could not start {cmd:?}: {e}"));
            return Finished { status: Some(failed_status()), output, elapsed: t0.elapsed() };
        }
    };
    let (tx, rx) = mpsc::channel::<String>();
    let pipes: Vec<Box<dyn std::io::Read + Send>> = vec![
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for pipe in pipes {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let end = t0 + deadline;
    let mut status = None;
    let mut exited_at: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                note(&mut output, &line);
                on_line(&line);
            }
            // Both pipes closed: every process that held them is gone.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if status.is_none() {
            if let Ok(Some(s)) = child.try_wait() {
                status = Some(s);
                exited_at = Some(Instant::now());
            } else if Instant::now() > end {
                kill_tree(child.id());
                let _ = child.wait();
                note(&mut output, &format!("(killed at the {}s deadline)", deadline.as_secs()));
                return Finished { status: None, output, elapsed: t0.elapsed() };
            }
        }
        // Exited, but something it started still holds the pipes: stop reading after 5 s.
        if exited_at.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            note(&mut output, "(a process it started still holds its output open; not waiting for it)");
            break;
        }
    }
    if status.is_none() {
        status = child.wait().ok();
    }
    Finished { status, output, elapsed: t0.elapsed() }
}

/// Kills process `pid` and every process it started (their parent links read from `/proc`).
fn kill_tree(pid: u32) {
    let mut parent_of: Vec<(u32, u32)> = vec![];
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parent_of.push((p, ppid));
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    let pids: Vec<String> = tree.iter().map(u32::to_string).collect();
    let _ = Command::new("kill").arg("-KILL").args(&pids).stderr(Stdio::null()).status();
}

/// An exit status that is not success, for a child that could not start.
fn failed_status() -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus::from_raw(127 << 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_messages_name_the_executables() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"name":"unit_bulk","kind":["test"]},"executable":"/t/release/deps/unit_bulk-1a"}
{"reason":"compiler-artifact","target":{"name":"bulk","kind":["bench"]},"executable":"/t/release/deps/bulk-2b"}
{"reason":"compiler-artifact","target":{"name":"coll-bench","kind":["bin"]},"executable":"/t/release/coll-bench"}
{"reason":"compiler-artifact","target":{"name":"mscclpp_host","kind":["lib"]},"executable":null}
{"reason":"build-finished","success":true}"#;
        let got = executables_in(msgs);
        let want: Executables = [
            ("unit_bulk", "/t/release/deps/unit_bulk-1a"),
            ("bench_bulk", "/t/release/deps/bulk-2b"),
            ("coll_bench", "/t/release/coll-bench"),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_string(), PathBuf::from(p)))
        .collect();
        assert_eq!(got, want);
        // Every executable the report runs is named by the cargo commands.
        let args = cargo_commands().concat().join(" ");
        for n in EXECUTABLES {
            let target = n.strip_prefix("bench_").map(|b| format!("--bench {b}")).unwrap_or_else(|| match n {
                "coll_bench" => "--bin coll-bench".into(),
                _ => format!("--test {n}"),
            });
            assert!(args.contains(&target), "{n}: {args}");
        }
    }

    #[test]
    fn a_child_is_run_logged_and_killed_at_its_deadline() {
        let dir = std::env::temp_dir().join(format!("mscclpp-suite-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("ok.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one; echo two >&2; exit 3"]);
        let mut seen = vec![];
        let f = run(cmd, &log, Duration::from_secs(20), |l| seen.push(l.to_string()));
        assert_eq!(f.status.and_then(|s| s.code()), Some(3));
        seen.sort();
        assert_eq!(seen, ["one", "two"]);
        assert!(std::fs::read_to_string(&log).unwrap().contains("one"));
        assert!(f.failure(Duration::from_secs(20)).contains("exit status: 3"), "{}", f.failure(Duration::ZERO));
        // A child that outlives its deadline is killed with the processes it started.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & echo started; wait"]);
        let f = run(cmd, &dir.join("slow.log"), Duration::from_millis(500), |_| {});
        assert!(f.status.is_none() && f.elapsed < Duration::from_secs(10), "{f:?}");
        assert!(f.failure(Duration::from_millis(500)).contains("deadline"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
