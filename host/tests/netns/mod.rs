//! Several machines on one: network namespaces joined through a bridge, each with its own
//! address and host name, and ranks started in them.
//!
//! [`Net::new`] makes a switch namespace holding a bridge and `machines` namespaces, each joined to
//! the bridge by a veth pair, with the address `10.99.0.{i + 1}/24` on its end. Every interface
//! and address lives inside namespaces made here (nothing is added to the caller's network), and
//! the names carry this process's id and a sequence number, so concurrent runs never meet. A
//! rank runs under `ip netns exec` in a UTS namespace of its own whose host name is the
//! machine's ([`Net::hostname`]): to the topology it is on another machine exactly as a rank on
//! another host is (same boot id, another host name). Dropping the [`Net`] kills what it started
//! and deletes the namespaces (which deletes their interfaces); namespaces left by a run that was
//! killed are deleted by the next one.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The prefix of every namespace made here: `mrsnet-{pid}-{seq}-...`.
const PREFIX: &str = "mrsnet-";

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Microseconds since the Unix epoch: the clock the driver and the ranks share (one kernel).
pub fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

/// Runs `ip` (or another tool) and returns its error output on failure.
fn sh(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{prog} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why namespaces cannot be made here (not root, no `ip`, no namespace support), or `None`.
pub fn unavailable() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    if let Err(e) = sh("ip", &["-V"]) {
        return Some(format!("no `ip` (iproute2): {e}"));
    }
    if let Err(e) = sh("unshare", &["--uts", "true"]) {
        return Some(format!("cannot make a UTS namespace: {e}"));
    }
    let probe = format!("{PREFIX}{}-probe", std::process::id());
    match sh("ip", &["netns", "add", &probe]) {
        Ok(()) => {
            let _ = sh("ip", &["netns", "del", &probe]);
            None
        }
        Err(e) => Some(format!("cannot make a network namespace: {e}")),
    }
}

/// Deletes namespaces left by runs whose process no longer exists.
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = sh("ip", &["netns", "del", &name]);
        }
    }
}

/// One started process (a rank or a stranger) and what it printed.
pub struct Proc {
    pub machine: usize,
    child: Option<Child>,
    pid: i32,
    status: Option<ExitStatus>,
}

/// The machines of one test.
pub struct Net {
    base: String,
    machines: usize,
    procs: Vec<Proc>,
    /// Every line the processes printed, `[NAME] line`, in arrival order.
    lines: Arc<Mutex<Vec<String>>>,
}

impl Net {
    /// Makes `machines` machines on a bridge (see the module documentation).
    pub fn new(machines: usize) -> Result<Self, String> {
        assert!((1..=200).contains(&machines), "{machines} machines");
        sweep_stale();
        let base = format!("{PREFIX}{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        // From here on, Drop deletes whatever was made, even when a step below fails.
        let net = Self { base, machines, procs: Vec::new(), lines: Arc::default() };
        let sw = net.switch();
        sh("ip", &["netns", "add", &sw])?;
        sh("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        for m in 0..machines {
            let ns = net.ns(m);
            sh("ip", &["netns", "add", &ns])?;
            let port = format!("p{m}");
            sh("ip", &["-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &sw])?;
            sh("ip", &["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            sh("ip", &["-n", &ns, "addr", "add", &format!("{}/24", net.ip(m)), "dev", "eth0"])?;
            sh("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.base)
    }

    /// Machine `m`'s namespace.
    pub fn ns(&self, m: usize) -> String {
        format!("{}-m{m}", self.base)
    }

    /// Machine `m`'s address.
    pub fn ip(&self, m: usize) -> String {
        format!("10.99.0.{}", m + 1)
    }

    /// Machine `m`'s host name.
    pub fn hostname(&self, m: usize) -> String {
        format!("netns-machine-{m}")
    }

    /// Starts `exe args` on machine `m` with `env`, its output recorded as `[name] line`.
    pub fn spawn(
        &mut self,
        m: usize,
        name: &str,
        exe: &std::path::Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<usize, String> {
        assert!(m < self.machines);
        let mut cmd = Command::new("ip");
        // `ip netns exec` and `unshare` exec in place, and so does the shell: the child's pid is
        // the rank's.
        cmd.args([
            "netns",
            "exec",
            &self.ns(m),
            "unshare",
            "--uts",
            "sh",
            "-c",
            "echo \"$0\" > /proc/sys/kernel/hostname && exec \"$@\"",
        ])
        .arg(self.hostname(m))
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // Only the caller's settings of this crate: none of this process's own.
        for (k, _) in std::env::vars_os().filter(|(k, _)| k.to_string_lossy().starts_with("MSCCLPP_RS_")) {
            cmd.env_remove(k);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        // SAFETY: the closure runs in the child between fork and exec; it makes one prctl system
        // call (async-signal-safe), allocates nothing and takes no locks.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().map_err(|e| format!("starting {name} on machine {m}: {e}"))?;
        for pipe in [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as _),
        ]
        .into_iter()
        .flatten()
        {
            let (lines, name) = (self.lines.clone(), name.to_string());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(format!("[{name}] {line}"));
                }
            });
        }
        let pid = child.id() as i32;
        self.procs.push(Proc { machine: m, child: Some(child), pid, status: None });
        Ok(self.procs.len() - 1)
    }

    /// The process ids of everything started on machine `m`.
    pub fn pids_on(&self, m: usize) -> Vec<i32> {
        self.procs.iter().filter(|p| p.machine == m).map(|p| p.pid).collect()
    }

    /// Kills every process started on machine `m` (SIGKILL, by process id) that has not been
    /// reaped; returns the time of the first kill ([`now_us`]).
    pub fn kill_machine(&mut self, m: usize) -> u128 {
        let at = now_us();
        for p in self.procs.iter_mut().filter(|p| p.machine == m) {
            if let Some(c) = p.child.as_mut() {
                let _ = c.kill();
            }
        }
        at
    }

    /// Takes machine `m`'s link down (its end of the veth pair); returns when it did.
    pub fn link_down(&self, m: usize) -> Result<u128, String> {
        let at = now_us();
        sh("ip", &["-n", &self.ns(m), "link", "set", "eth0", "down"])?;
        Ok(at)
    }

    /// Adds `netem` delay and loss to machine `m`'s link; `Err` when the kernel lacks `netem`.
    pub fn netem(&self, m: usize, delay_ms: u32, loss_pct: u32) -> Result<(), String> {
        let (d, l) = (format!("{delay_ms}ms"), format!("{loss_pct}%"));
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns(m),
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "netem",
                "delay",
                &d,
                "loss",
                &l,
            ],
        )
    }

    /// Waits until every process started so far has exited, killing those still running at
    /// `deadline`; returns the exit statuses in start order (`None`: killed at the deadline).
    pub fn wait_all(&mut self, deadline: Instant) -> Vec<Option<ExitStatus>> {
        let mut out = Vec::with_capacity(self.procs.len());
        for p in &mut self.procs {
            if p.status.is_none()
                && let Some(c) = p.child.as_mut()
            {
                loop {
                    match c.try_wait() {
                        Ok(Some(s)) => {
                            p.status = Some(s);
                            break;
                        }
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                    }
                }
            }
            out.push(p.status);
        }
        // Let the readers take the last lines (bounded).
        std::thread::sleep(Duration::from_millis(50));
        out
    }

    /// Every line printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits (at most `wait`) until `count` lines contain `needle`.
    pub fn wait_for_lines(&self, needle: &str, count: usize, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        loop {
            if self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|l| l.contains(needle)).count()
                >= count
            {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// `exit code 1`, `signal 9`, `killed at the deadline`.
pub fn describe(s: Option<ExitStatus>) -> String {
    match s {
        None => "killed at the deadline".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (_, Some(sig)) => format!("signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        crate::procs::record(self.lines());
        for p in &mut self.procs {
            if let Some(mut c) = p.child.take()
                && p.status.is_none()
            {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for m in 0..self.machines {
            let _ = sh("ip", &["netns", "del", &self.ns(m)]);
        }
        let _ = sh("ip", &["netns", "del", &self.switch()]);
    }
}
