//! The built-in launcher: N copies of an executable as the ranks of one run on this machine.
//!
//! Each rank gets `MSCCLPP_RS_RANK`, `MSCCLPP_RS_WORLD_SIZE`, `MSCCLPP_RS_LOCAL_RANK`,
//! `MSCCLPP_RS_LOCAL_SIZE` (all ranks are local), `MSCCLPP_RS_BOOTSTRAP` (a free loopback port)
//! and `MSCCLPP_RS_TOKEN` (a fresh random token). Their standard output and error are forwarded
//! line by line with a `[rank i] ` prefix.
//!
//! Failure handling: when a rank fails (non-zero exit or a signal), the others get a grace period
//! (default 5 s) to notice through the bootstrap and report it themselves; whoever is still running
//! after it is killed. When the deadline passes, every rank still running is killed. Either way
//! the launch fails with a message naming the ranks. The ranks also get `SIGKILL` if the launcher
//! itself dies (`PR_SET_PDEATHSIG`), so nothing outlives it.
//!
//! Ranks as threads: [`run_threads`] runs N ranks as threads of this process instead, each with
//! its [`LocalBootstrap`] (so its own communicator, GPU handle and stream: on a machine with one
//! GPU they all share it, and their kernels run at the same time). `--threads N` (or
//! `MSCCLPP_RS_THREADS=N`) asks [`role`] for it. A rank whose body fails or panics abandons its
//! bootstrap, so the others see it as lost and their GPUs' waits abort; threads cannot be killed,
//! so ranks still running at the deadline (or after the grace period) are named in the error and
//! the program should exit.
//!
//! Killing without races: a thread per rank waits for it with `waitid(WNOWAIT)` (which leaves the
//! child unreaped), marks it as exited under a lock, and only then reaps it. The launcher sends
//! `SIGKILL` under the same lock and only to ranks not marked, so the signal can never reach an
//! unrelated process that reused a reaped rank's pid.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::Bootstrap;
use super::env::{
    ENV_BOOTSTRAP, ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_RANK, ENV_TOKEN, ENV_WORLD_SIZE, EnvSnapshot, RankInfo,
};
use super::local::LocalBootstrap;
use crate::error::{Error, Result};
use crate::frame::Token;

/// Deadline of a launch started by [`maybe_launch_from_args`], in seconds (default 600).
pub const ENV_LAUNCH_DEADLINE: &str = "MSCCLPP_RS_LAUNCH_DEADLINE";
/// Ranks as threads of this process when [`role`] finds neither `--ranks` nor `--threads` nor a
/// rank environment: `MSCCLPP_RS_THREADS=N`.
pub const ENV_THREADS: &str = "MSCCLPP_RS_THREADS";
/// The driver's number of hardware work queues per context (default 8). Streams beyond it share
/// queues, and a kernel that waits for another rank's kernel can then sit in a queue behind work
/// that waits for it: [`role`] runs ranks as threads with [`THREADS_MAX_CONNECTIONS`] queues when
/// the variable is unset.
pub const ENV_MAX_CONNECTIONS: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
/// The queues ranks as threads ask for: the driver's most.
pub const THREADS_MAX_CONNECTIONS: &str = "32";
/// Default deadline of [`maybe_launch_from_args`].
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// Default time the other ranks get to finish on their own after one failed.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Most ranks one launch starts (enough to measure the bootstrap at 512 ranks on one machine; a
/// typo such as `--ranks 20000` should not fork 20000 processes).
pub const MAX_RANKS: usize = 1024;
/// How long to wait for killed ranks to be reaped and for their output to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// Starts `ranks` copies of an executable; see the module documentation.
#[derive(Clone, Debug)]
pub struct Launcher {
    exe: PathBuf,
    ranks: usize,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    deadline: Duration,
    grace: Duration,
}

/// Where the ranks' output lines go.
enum Sink {
    Forward,
    Capture(Arc<Mutex<Vec<String>>>),
}

impl Launcher {
    /// `ranks` copies of `exe`, no arguments, [`DEFAULT_DEADLINE`], [`DEFAULT_GRACE`].
    pub fn new(exe: impl Into<PathBuf>, ranks: usize) -> Self {
        Self {
            exe: exe.into(),
            ranks,
            args: Vec::new(),
            envs: Vec::new(),
            deadline: DEFAULT_DEADLINE,
            grace: DEFAULT_GRACE,
        }
    }

    /// `ranks` copies of the running executable.
    pub fn current_exe(ranks: usize) -> Result<Self> {
        let exe = std::env::current_exe()
            .map_err(|source| Error::Io { context: "finding the current executable".into(), source })?;
        Ok(Self::new(exe, ranks))
    }

    /// Appends arguments passed to every rank.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets an environment variable in every rank (the rank variables are set last and win).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs.push((name.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// The whole run must end within `deadline`; ranks still running then are killed.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// After a rank fails, how long the others may run before they are killed.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Runs the ranks, forwarding their output to this process's stdout and stderr with a
    /// `[rank i] ` prefix. `Ok` when every rank exited with status 0.
    pub fn run(&self) -> Result<()> {
        self.run_with(Sink::Forward)
    }

    /// Like [`run`](Self::run), but collects the prefixed lines (stdout and stderr, in arrival
    /// order) instead of printing them.
    pub fn run_captured(&self) -> (Result<()>, Vec<String>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let r = self.run_with(Sink::Capture(lines.clone()));
        let lines = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
        (r, lines)
    }

    fn run_with(&self, sink: Sink) -> Result<()> {
        let n = self.ranks;
        if n == 0 || n > MAX_RANKS {
            return Err(Error::InvalidArgument(format!("launcher: {n} ranks; between 1 and {MAX_RANKS} please")));
        }
        let addr = format!("127.0.0.1:{}", free_loopback_port()?);
        let token = Token::random();
        let sink = Arc::new(sink);
        let started = Instant::now();
        let (exit_tx, exit_rx) = mpsc::channel::<(usize, io::Result<ExitStatus>)>();
        let (drained_tx, drained_rx) = mpsc::channel::<()>();
        let mut kids: Vec<Kid> = Vec::with_capacity(n);
        for rank in 0..n {
            let mut cmd = Command::new(&self.exe);
            cmd.args(&self.args)
                .envs(self.envs.iter().map(|(k, v)| (k, v)))
                .env(ENV_RANK, rank.to_string())
                .env(ENV_WORLD_SIZE, n.to_string())
                .env(ENV_LOCAL_RANK, rank.to_string())
                .env(ENV_LOCAL_SIZE, n.to_string())
                .env(ENV_BOOTSTRAP, &addr)
                .env(ENV_TOKEN, token.to_hex())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            // SAFETY: the closure runs in the child between fork and exec. It makes one prctl
            // system call (async-signal-safe), allocates nothing and takes no locks.
            unsafe {
                cmd.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
            }
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    for k in &kids {
                        k.kill();
                    }
                    let deadline = Instant::now() + DRAIN_WAIT;
                    for _ in 0..kids.len() {
                        if exit_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
                            break;
                        }
                    }
                    return Err(Error::Launcher(format!("starting rank {rank} ({}): {e}", self.exe.display())));
                }
            };
            for (pipe, is_err) in [
                (child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>), false),
                (child.stderr.take().map(|p| Box::new(p) as _), true),
            ] {
                let (sink, done) = (sink.clone(), drained_tx.clone());
                match pipe {
                    Some(p) => {
                        std::thread::spawn(move || forward(rank, p, is_err, &sink, done));
                    }
                    None => {
                        let _ = done.send(());
                    }
                }
            }
            let kid = Kid { pid: Pid::from_raw(child.id() as i32), exited: Arc::new(Mutex::new(false)) };
            let (exited, tx) = (kid.exited.clone(), exit_tx.clone());
            std::thread::spawn(move || {
                let status = wait_child(child, &exited);
                let _ = tx.send((rank, status));
            });
            kids.push(kid);
        }
        drop((exit_tx, drained_tx));

        let deadline = started.checked_add(self.deadline).unwrap_or_else(|| super::after(self.deadline));
        let mut status: Vec<Option<String>> = vec![None; n];
        let mut failed: Vec<usize> = Vec::new();
        let mut killed: Vec<usize> = Vec::new();
        let mut deadline_hit = false;
        let mut grace_end: Option<Instant> = None;
        let mut give_up: Option<Instant> = None;
        let mut running = n;
        while running > 0 {
            let wake = give_up.unwrap_or_else(|| grace_end.map_or(deadline, |g| g.min(deadline)));
            match exit_rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                Ok((rank, st)) => {
                    running -= 1;
                    let ok = st.as_ref().is_ok_and(|s| s.success());
                    status[rank] = Some(match st {
                        Ok(s) => describe(s),
                        Err(e) => format!("could not be waited for: {e}"),
                    });
                    if !ok && !killed.contains(&rank) {
                        failed.push(rank);
                        grace_end.get_or_insert(super::after(self.grace));
                    }
                }
                Err(RecvTimeoutError::Timeout) if give_up.is_none() => {
                    deadline_hit = Instant::now() >= deadline;
                    for (rank, k) in kids.iter().enumerate() {
                        if status[rank].is_none() {
                            k.kill();
                            killed.push(rank);
                        }
                    }
                    give_up = Some(Instant::now() + DRAIN_WAIT);
                }
                Err(_) => break,
            }
        }
        // Let the forwarders print the last lines (bounded: a grandchild may hold a pipe open).
        let drain_end = Instant::now() + Duration::from_secs(2);
        for _ in 0..2 * n {
            if drained_rx.recv_timeout(drain_end.saturating_duration_since(Instant::now())).is_err() {
                break;
            }
        }

        let elapsed = crate::error::fmt_duration(started.elapsed());
        let who = |ranks: &[usize]| {
            ranks
                .iter()
                .map(|&r| format!("rank {r} ({})", status[r].as_deref().unwrap_or("did not exit")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let killed_note = if killed.is_empty() {
            String::new()
        } else if deadline_hit {
            format!("; killed at the {} deadline: {}", crate::error::fmt_duration(self.deadline), who(&killed))
        } else {
            format!(
                "; still running {} after the failure, killed: {}",
                crate::error::fmt_duration(self.grace),
                who(&killed)
            )
        };
        match (failed.first(), deadline_hit) {
            (None, false) => Ok(()),
            (None, true) => {
                Err(Error::Launcher(format!("{n} ranks of {} after {elapsed}{killed_note}", self.exe.display())))
            }
            (Some(&first), _) => {
                let others: Vec<usize> = failed[1..].to_vec();
                let also = if others.is_empty() { String::new() } else { format!("; then {}", who(&others)) };
                Err(Error::Launcher(format!("{} failed first, after {elapsed}{also}{killed_note}", who(&[first]))))
            }
        }
    }
}

/// A started rank, as the launcher's main thread sees it.
struct Kid {
    pid: Pid,
    /// Set (under the lock) by the waiting thread just before it reaps the child.
    exited: Arc<Mutex<bool>>,
}

impl Kid {
    fn kill(&self) {
        let exited = self.exited.lock().unwrap_or_else(|e| e.into_inner());
        if !*exited {
            // Not reaped yet, so the pid is still this child's (alive or a zombie).
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        }
    }
}

fn wait_child(mut child: Child, exited: &Mutex<bool>) -> io::Result<ExitStatus> {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let pid = Pid::from_raw(child.id() as i32);
    // Wait for the exit without reaping, so the pid stays reserved while we take the lock. Any
    // error other than an interruption (there is none for a child of ours) falls through to the
    // reaping wait below.
    while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {}
    let mut exited = exited.lock().unwrap_or_else(|e| e.into_inner());
    *exited = true;
    child.wait()
}

/// `exit code 3`, `killed by signal 9 (SIGKILL)`.
fn describe(s: ExitStatus) -> String {
    if let Some(c) = s.code() {
        format!("exit code {c}")
    } else if let Some(sig) = s.signal() {
        match Signal::try_from(sig) {
            Ok(name) => format!("killed by signal {sig} ({})", name.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        }
    } else {
        format!("{s}")
    }
}

fn forward(rank: usize, pipe: Box<dyn Read + Send>, is_err: bool, sink: &Sink, done: mpsc::Sender<()>) {
    let mut r = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        while line.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            line.pop();
        }
        let text = format!("[rank {rank}] {}\n", String::from_utf8_lossy(&line));
        match sink {
            // Errors writing our own output (a closed pipe) must not stop the draining of the
            // child's, or the child would block on a full pipe.
            Sink::Forward if is_err => drop(io::stderr().lock().write_all(text.as_bytes())),
            Sink::Forward => drop(io::stdout().lock().write_all(text.as_bytes())),
            Sink::Capture(lines) => lines.lock().unwrap_or_else(|e| e.into_inner()).push(text.trim_end().to_string()),
        }
    }
    let _ = done.send(());
}

/// A loopback port that was free a moment ago (the small window before rank 0 binds it is the
/// price of not passing a socket to the child).
fn free_loopback_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|source| Error::Io { context: "finding a free loopback port".into(), source })?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|source| Error::Io { context: "finding a free loopback port".into(), source })
}

/// Starts `ranks` copies of the current executable with `args` and waits for them: see the
/// module documentation. `Ok` when every rank exited with status 0 before `deadline`.
pub fn launch<I, S>(ranks: usize, args: I, deadline: Duration) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Launcher::current_exe(ranks)?.args(args).deadline(deadline).run()
}

/// Splits `--ranks N` (or `--ranks=N`) off an argument list: `Ok(None)` when it is absent.
pub fn ranks_from_args(args: &[OsString]) -> Result<Option<(usize, Vec<OsString>)>> {
    count_from_args(args, "--ranks")
}

/// Splits `--threads N` (or `--threads=N`) off an argument list: `Ok(None)` when it is absent.
pub fn threads_from_args(args: &[OsString]) -> Result<Option<(usize, Vec<OsString>)>> {
    count_from_args(args, "--threads")
}

/// Splits `flag N` (or `flag=N`, N in 1..=[`MAX_RANKS`]) off an argument list, before any `--`.
fn count_from_args(args: &[OsString], flag: &str) -> Result<Option<(usize, Vec<OsString>)>> {
    let bad = |v: &OsStr| Error::InvalidArgument(format!("{flag} {v:?}: expected a number between 1 and {MAX_RANKS}"));
    let parse = |v: &OsStr| match v.to_str().and_then(|s| s.parse::<usize>().ok()) {
        Some(n) if (1..=MAX_RANKS).contains(&n) => Ok(n),
        _ => Err(bad(v)),
    };
    let prefix = format!("{flag}=");
    for (i, a) in args.iter().enumerate() {
        if a == "--" {
            break;
        }
        let (n, used) = if a == flag {
            match args.get(i + 1) {
                Some(v) => (parse(v)?, 2),
                None => return Err(bad(OsStr::new(""))),
            }
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix(prefix.as_str())) {
            (parse(OsStr::new(v))?, 1)
        } else {
            continue;
        };
        let mut rest = args[..i].to_vec();
        rest.extend_from_slice(&args[i + used..]);
        return Ok(Some((n, rest)));
    }
    Ok(None)
}

/// The thread count asked for by `--threads N` among `args` or, without it, by
/// [`ENV_THREADS`]; `Ok(None)` when neither is there.
pub fn threads_requested(args: &[OsString], env: &EnvSnapshot) -> Result<Option<usize>> {
    if let Some((n, _)) = threads_from_args(args)? {
        return Ok(Some(n));
    }
    match env.get(ENV_THREADS) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_RANKS).contains(&n) => Ok(Some(n)),
            _ => {
                Err(Error::InvalidArgument(format!("{ENV_THREADS}={v:?}: expected a number between 1 and {MAX_RANKS}")))
            }
        },
    }
}

/// Runs `ranks` ranks as threads of this process, each calling `body` with its
/// [`LocalBootstrap`] (see the module documentation), and waits for them. `Ok` when every body
/// returned `Ok` before `deadline`. A body that fails or panics abandons its bootstrap; the
/// others then get [`DEFAULT_GRACE`] to end before the run is reported without them.
pub fn run_threads<F>(ranks: usize, deadline: Duration, body: F) -> Result<()>
where
    F: Fn(Arc<LocalBootstrap>) -> Result<()> + Send + Sync + 'static,
{
    run_threads_with(ranks, deadline, DEFAULT_GRACE, body)
}

/// [`run_threads`] with the grace period given.
pub fn run_threads_with<F>(ranks: usize, deadline: Duration, grace: Duration, body: F) -> Result<()>
where
    F: Fn(Arc<LocalBootstrap>) -> Result<()> + Send + Sync + 'static,
{
    if ranks == 0 || ranks > MAX_RANKS {
        return Err(Error::InvalidArgument(format!("threads: {ranks} ranks; between 1 and {MAX_RANKS} please")));
    }
    let started = Instant::now();
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel::<(usize, Instant, std::result::Result<(), String>)>();
    for boot in LocalBootstrap::group(ranks)? {
        let boot = Arc::new(boot);
        let rank = boot.rank();
        let (body, tx) = (body.clone(), tx.clone());
        let spawned = std::thread::Builder::new().name(format!("rank {rank}")).spawn(move || {
            let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(boot.clone()))) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(p) => Err(format!("panicked: {}", panic_text(&*p))),
            };
            // When it ended, before its peers can learn of it: failures are reported in this order.
            let ended = Instant::now();
            if outcome.is_err() {
                boot.abandon();
            }
            drop(boot);
            let _ = tx.send((rank, ended, outcome));
        });
        if let Err(e) = spawned {
            return Err(Error::Launcher(format!("starting the thread of rank {rank}: {e}")));
        }
    }
    drop(tx);
    let deadline = started.checked_add(deadline).unwrap_or_else(|| super::after(deadline));
    let mut status: Vec<Option<std::result::Result<(), String>>> = vec![None; ranks];
    let mut failed = Vec::new();
    let mut grace_end: Option<Instant> = None;
    let mut running = ranks;
    while running > 0 {
        let wake = grace_end.map_or(deadline, |g| g.min(deadline));
        match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok((rank, ended, outcome)) => {
                running -= 1;
                if outcome.is_err() {
                    failed.push((ended, rank));
                    grace_end.get_or_insert(super::after(grace));
                }
                status[rank] = Some(outcome);
            }
            Err(_) => break,
        }
    }
    failed.sort();
    let failed: Vec<usize> = failed.into_iter().map(|(_, r)| r).collect();
    let elapsed = crate::error::fmt_duration(started.elapsed());
    let who = |ranks: &[usize]| {
        ranks
            .iter()
            .map(|&r| match &status[r] {
                Some(Err(e)) => format!("rank {r} ({e})"),
                _ => format!("rank {r}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let stuck: Vec<usize> = (0..ranks).filter(|&r| status[r].is_none()).collect();
    let stuck_note = if stuck.is_empty() {
        String::new()
    } else {
        format!("; still running (threads cannot be killed: exit the process): {}", who(&stuck))
    };
    match failed.first() {
        None if stuck.is_empty() => Ok(()),
        None => {
            Err(Error::Launcher(format!("{ranks} ranks as threads: past the deadline after {elapsed}{stuck_note}")))
        }
        Some(&first) => {
            let also = if failed.len() > 1 { format!("; then {}", who(&failed[1..])) } else { String::new() };
            Err(Error::Launcher(format!("{} failed first, after {elapsed}{also}{stuck_note}", who(&[first]))))
        }
    }
}

/// The text of a panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The launcher deadline from `MSCCLPP_RS_LAUNCH_DEADLINE` (seconds), else [`DEFAULT_DEADLINE`].
pub fn deadline_from_env(env: &EnvSnapshot) -> Result<Duration> {
    match env.get(ENV_LAUNCH_DEADLINE) {
        None => Ok(DEFAULT_DEADLINE),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 7.0 * 86_400.0 => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::InvalidArgument(format!("{ENV_LAUNCH_DEADLINE}={v:?} is not a number of seconds"))),
        },
    }
}

/// Makes a binary its own launcher: when its arguments contain `--ranks N`, starts N copies of
/// it with the other arguments and returns `Some(outcome)`; the caller then exits (non-zero on
/// `Err`). Returns `None` when there is no `--ranks` (run as a rank, or stand-alone).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     if let Some(outcome) = mscclpp_host::bootstrap::maybe_launch_from_args() {
///         return match outcome {
///             Ok(()) => std::process::ExitCode::SUCCESS,
///             Err(e) => {
///                 eprintln!("{e}");
///                 std::process::ExitCode::FAILURE
///             }
///         };
///     }
///     // ... this process is a rank: TcpBootstrap::from_env() ...
///     std::process::ExitCode::SUCCESS
/// }
/// ```
pub fn maybe_launch_from_args() -> Option<Result<()>> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (ranks, rest) = match ranks_from_args(&args) {
        Ok(Some(x)) => x,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    let env = EnvSnapshot::capture();
    match RankInfo::from_env(&env) {
        Ok(Some(info)) => {
            return Some(Err(Error::Launcher(format!(
                "--ranks {ranks} given, but this process is already rank {} of {} (started by the {}); drop --ranks",
                info.rank,
                info.world_size,
                info.source.name()
            ))));
        }
        Ok(None) => {}
        Err(e) => return Some(Err(e)),
    }
    Some(deadline_from_env(&env).and_then(|d| launch(ranks, rest, d)))
}

/// How this process takes part in a run ([`role`]).
#[derive(Debug)]
pub enum Role {
    /// A rank of a run (started by mpirun, Slurm, PMI or the built-in launcher): connect with
    /// this configuration.
    Rank(super::BootstrapConfig),
    /// This process was the launcher of a run of `ranks` copies of itself, now over.
    Launched {
        /// How many ranks it started.
        ranks: usize,
        /// `Ok` when every rank exited with status 0 before the deadline.
        outcome: Result<()>,
    },
    /// `--threads N` or [`ENV_THREADS`]: run `ranks` ranks as threads of this process
    /// ([`run_threads`], with `deadline`).
    Threads {
        /// How many ranks.
        ranks: usize,
        /// The run's deadline ([`ENV_LAUNCH_DEADLINE`]).
        deadline: Duration,
    },
}

/// The usual `main` of a multi-rank program: with `--ranks N` among the arguments, starts N
/// copies of this executable and waits for them; in a rank's environment, returns the rank's
/// configuration; with `--threads N` (or [`ENV_THREADS`]) and no rank environment, returns
/// [`Role::Threads`], for the program to run its ranks with [`run_threads`] (first restarting
/// the program with [`ENV_MAX_CONNECTIONS`] set, when it is not); with none of these
/// (started by hand), starts `default_ranks` copies. The deadline of a launch comes from
/// [`ENV_LAUNCH_DEADLINE`].
///
/// ```no_run
/// use mscclpp_host::bootstrap::{TcpBootstrap, launcher::{Role, role, run_threads}};
/// match role(2)? {
///     Role::Rank(cfg) => { let boot = TcpBootstrap::connect(&cfg)?; /* ... */ }
///     Role::Launched { ranks, outcome } => outcome?,
///     Role::Threads { ranks, deadline } => {
///         run_threads(ranks, deadline, |boot| { /* this thread is rank boot.rank() */ Ok(()) })?
///     }
/// }
/// # Ok::<(), mscclpp_host::Error>(())
/// ```
pub fn role(default_ranks: usize) -> Result<Role> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let env = EnvSnapshot::capture();
    let threads = threads_requested(&args, &env)?;
    if let Some((ranks, _)) = ranks_from_args(&args)? {
        if threads_from_args(&args)?.is_some() {
            return Err(Error::InvalidArgument("--ranks and --threads: choose one".into()));
        }
        let outcome = maybe_launch_from_args().unwrap_or_else(|| Err(Error::Launcher("--ranks vanished".into())));
        return Ok(Role::Launched { ranks, outcome });
    }
    if let Some(cfg) = super::BootstrapConfig::from_env(&env)? {
        return Ok(Role::Rank(cfg));
    }
    if let Some(ranks) = threads {
        if env.get(ENV_MAX_CONNECTIONS).is_none() {
            // The variable is read when the driver starts, and setting it in a running program
            // races with other threads' reads of the environment: start this program afresh
            // with it set. `exec` returns only when it could not.
            let err = std::env::current_exe()
                .map(|exe| Command::new(exe).args(&args).env(ENV_MAX_CONNECTIONS, THREADS_MAX_CONNECTIONS).exec())
                .unwrap_or_else(|e| e);
            return Err(Error::Launcher(format!(
                "restarting with {ENV_MAX_CONNECTIONS}={THREADS_MAX_CONNECTIONS} for ranks as threads: {err}"
            )));
        }
        return Ok(Role::Threads { ranks, deadline: deadline_from_env(&env)? });
    }
    let outcome = deadline_from_env(&env).and_then(|d| launch(default_ranks, args, d));
    Ok(Role::Launched { ranks: default_ranks, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn ranks_argument() {
        assert_eq!(ranks_from_args(&os(&["a", "--ranks", "4", "b"])).unwrap(), Some((4, os(&["a", "b"]))));
        assert_eq!(ranks_from_args(&os(&["--ranks=2"])).unwrap(), Some((2, os(&[]))));
        assert_eq!(ranks_from_args(&os(&["x", "--", "--ranks", "2"])).unwrap(), None);
        assert_eq!(ranks_from_args(&os(&["--nocapture"])).unwrap(), None);
        for bad in [&["--ranks"][..], &["--ranks", "0"], &["--ranks", "x"], &["--ranks=999999"]] {
            assert!(ranks_from_args(&os(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn threads_argument_and_variable() {
        assert_eq!(threads_from_args(&os(&["a", "--threads", "8"])).unwrap(), Some((8, os(&["a"]))));
        assert_eq!(threads_from_args(&os(&["--threads=2", "b"])).unwrap(), Some((2, os(&["b"]))));
        assert_eq!(threads_from_args(&os(&["--ranks", "2"])).unwrap(), None);
        for bad in [&["--threads"][..], &["--threads", "0"], &["--threads=x"]] {
            assert!(threads_from_args(&os(bad)).is_err(), "{bad:?}");
        }
        let env = EnvSnapshot::default().with(ENV_THREADS, "4");
        assert_eq!(threads_requested(&os(&[]), &env).unwrap(), Some(4));
        assert_eq!(threads_requested(&os(&["--threads", "2"]), &env).unwrap(), Some(2));
        assert_eq!(threads_requested(&os(&[]), &EnvSnapshot::default()).unwrap(), None);
        assert!(threads_requested(&os(&[]), &EnvSnapshot::default().with(ENV_THREADS, "0")).is_err());
    }

    #[test]
    fn threads_run_every_rank_and_report_the_first_failure() {
        use crate::bootstrap::BootstrapExt;
        use rand::RngExt;
        let n = rand::rng().random_range(2..=8);
        let seen = Arc::new(Mutex::new(vec![false; n]));
        let s = seen.clone();
        run_threads(n, Duration::from_secs(30), move |boot| {
            let v: u64 = rand::rng().random();
            let all = boot.all_gather_pod(&v)?;
            assert_eq!(all[boot.rank()], v);
            boot.barrier()?;
            s.lock().unwrap()[boot.rank()] = true;
            Ok(())
        })
        .unwrap();
        assert!(seen.lock().unwrap().iter().all(|&x| x));
        // Rank 1 fails: it abandons, so rank 0's wait ends at once with rank 1 named.
        let t = Instant::now();
        let e = run_threads(2, Duration::from_secs(30), |boot| {
            if boot.rank() == 1 {
                return Err(Error::InvalidArgument("rank 1 fails on purpose".into()));
            }
            boot.barrier()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("rank 1 (invalid argument: rank 1 fails on purpose) failed first"), "{e}");
        assert!(e.contains("then rank 0") && e.contains("connection to rank 1 lost"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // A panic is a failure too; a rank past the deadline is named as still running.
        // (A generous deadline: printing the panic may take a while.)
        let e = run_threads_with(2, Duration::from_secs(20), Duration::from_millis(100), |boot| {
            if boot.rank() == 0 {
                panic!("rank 0 panics on purpose");
            }
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("rank 0 (panicked: rank 0 panics on purpose) failed first"), "{e}");
        assert!(e.contains("still running") && e.contains("rank 1"), "{e}");
        assert!(run_threads(0, Duration::from_secs(1), |_| Ok(())).is_err());
    }

    #[test]
    fn deadline_variable() {
        assert_eq!(deadline_from_env(&EnvSnapshot::default()).unwrap(), DEFAULT_DEADLINE);
        let e = EnvSnapshot::default().with(ENV_LAUNCH_DEADLINE, "1.5");
        assert_eq!(deadline_from_env(&e).unwrap(), Duration::from_millis(1500));
        assert!(deadline_from_env(&EnvSnapshot::default().with(ENV_LAUNCH_DEADLINE, "-1")).is_err());
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(describe(ExitStatus::from_raw(3 << 8)), "exit code 3");
        assert_eq!(describe(ExitStatus::from_raw(9)), "killed by signal 9 (SIGKILL)");
    }

    #[test]
    fn zero_ranks_refused() {
        assert!(Launcher::new("/bin/true", 0).run().is_err());
    }

    #[test]
    fn runs_and_reports_a_plain_program() {
        // /bin/sh stands in for a rank: prints its rank variables, rank 1 fails.
        let script = r#"echo "r=$MSCCLPP_RS_RANK n=$MSCCLPP_RS_WORLD_SIZE"; echo err >&2; [ "$MSCCLPP_RS_RANK" != 1 ] || exit 4"#;
        let (r, lines) = Launcher::new("/bin/sh", 3).args(["-c", script]).grace(Duration::from_secs(5)).run_captured();
        let e = r.unwrap_err().to_string();
        assert!(e.contains("rank 1 (exit code 4) failed first"), "{e}");
        for rank in 0..3 {
            assert!(lines.contains(&format!("[rank {rank}] r={rank} n=3")), "{lines:?}");
            assert!(lines.contains(&format!("[rank {rank}] err")), "{lines:?}");
        }
        let (r, _) = Launcher::new("/bin/sh", 2).args(["-c", "exit 0"]).run_captured();
        r.unwrap();
    }

    #[test]
    fn deadline_kills() {
        let t = Instant::now();
        let (r, _) = Launcher::new("/bin/sh", 2)
            .args(["-c", "exec sleep 30"])
            .deadline(Duration::from_millis(300))
            .run_captured();
        let e = r.unwrap_err().to_string();
        assert!(e.contains("deadline") && e.contains("rank 0 (killed by signal 9 (SIGKILL))"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn grace_then_kill() {
        let script = r#"[ "$MSCCLPP_RS_RANK" = 0 ] && exit 2; exec sleep 30"#;
        let t = Instant::now();
        let (r, _) = Launcher::new("/bin/sh", 2).args(["-c", script]).grace(Duration::from_millis(200)).run_captured();
        let e = r.unwrap_err().to_string();
        assert!(e.contains("rank 0 (exit code 2) failed first") && e.contains("killed: rank 1"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn missing_executable() {
        let e = Launcher::new("/nonexistent/mscclpp-rs-rank", 2).run_captured().0.unwrap_err().to_string();
        assert!(e.contains("starting rank 0"), "{e}");
    }
}
