//! Support for GPU tests: finding GPUs (or skipping loudly), random data, poison values, and
//! running a test body that is expected to trap in a child process.
//!
//! A skipped GPU test prints `GPU-SKIP <test>: <reason>` and, when `MSCCLPP_RS_SKIP_LOG` names a
//! file, appends that line to it (CI prints the file). A test skips only when the machine has no
//! GPU for it (no driver library, a driver that reports no device, or fewer GPUs than it needs);
//! a driver that fails fails the test ([`gpu_verdict`]). With `MSCCLPP_RS_REQUIRE_GPU=1` (set by
//! the GPU runner) a missing GPU fails the test too.

use std::io::Write;
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use mscclpp_host::Gpu;
use rand::RngExt;

/// The byte written over outputs before a kernel runs, so unwritten elements are detected.
pub const POISON: u8 = 0xA5;

/// Environment variable that marks a child process started by [`run_child`].
pub const CHILD_ENV: &str = "MSCCLPP_RS_CHILD";

/// Why a test cannot have its GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuProblem {
    /// The machine has none: no driver library, or a driver that reports no device. A test may
    /// skip (unless `MSCCLPP_RS_REQUIRE_GPU=1`).
    Absent(String),
    /// The driver is there but failed (`cuInit`, a device query, opening a device): a test must
    /// fail, never skip, or a broken machine would pass as one without GPUs.
    Failed(String),
}

impl std::fmt::Display for GpuProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuProblem::Absent(why) => f.write_str(why),
            GpuProblem::Failed(why) => write!(f, "the GPUs could not be opened (a failure, not an absence): {why}"),
        }
    }
}

impl From<&mscclpp_host::Error> for GpuProblem {
    /// Only the two absences ([`mscclpp_host::Error::NoDriver`], [`mscclpp_host::Error::NoDevice`])
    /// are [`GpuProblem::Absent`]; every other error is a failure.
    fn from(e: &mscclpp_host::Error) -> Self {
        if e.is_no_gpu() { GpuProblem::Absent(e.to_string()) } else { GpuProblem::Failed(e.to_string()) }
    }
}

/// What a GPU test does, from what opening the GPUs gave.
#[derive(Debug, PartialEq, Eq)]
pub enum GpuVerdict {
    /// Enough GPUs: run.
    Run,
    /// Skip, printing the reason.
    Skip(String),
    /// Fail with the reason.
    Fail(String),
}

/// The decision for a test that needs `need` GPUs: run with enough GPUs; skip when the machine
/// has too few or none (a fact about the machine), unless `require` (`MSCCLPP_RS_REQUIRE_GPU=1`)
/// makes that a failure; fail whenever opening them failed.
pub fn gpu_verdict(opened: Result<usize, &GpuProblem>, need: usize, require: bool) -> GpuVerdict {
    let why = match opened {
        Ok(n) if n >= need => return GpuVerdict::Run,
        Ok(n) => format!("needs {need} GPUs, found {n}"),
        Err(GpuProblem::Absent(why)) => why.clone(),
        Err(failed @ GpuProblem::Failed(_)) => return GpuVerdict::Fail(failed.to_string()),
    };
    if require { GpuVerdict::Fail(format!("MSCCLPP_RS_REQUIRE_GPU=1 but {why}")) } else { GpuVerdict::Skip(why) }
}

/// Whether `MSCCLPP_RS_REQUIRE_GPU=1`.
pub fn gpu_required() -> bool {
    std::env::var("MSCCLPP_RS_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

type Opened = Result<Vec<Arc<Gpu>>, GpuProblem>;

/// All GPUs of this machine, opened once per process ([`Gpu::open_all`]: a driver call that
/// fails, for any device, is a [`GpuProblem::Failed`]).
pub fn all_gpus() -> Opened {
    static GPUS: OnceLock<Opened> = OnceLock::new();
    GPUS.get_or_init(|| Gpu::open_all().map_err(|e| GpuProblem::from(&e))).clone()
}

/// Records a skipped GPU test (stderr, and the skip log when configured).
pub fn record_skip(test: &str, reason: &str) {
    let line = format!("GPU-SKIP {test}: {reason}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("MSCCLPP_RS_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// At least `need` GPUs, or `None` after recording why the test is skipped ([`gpu_verdict`]).
/// Panics instead of skipping when opening the GPUs failed, or when `MSCCLPP_RS_REQUIRE_GPU=1`.
pub fn gpus_or_skip(test: &str, need: usize) -> Option<Vec<Arc<Gpu>>> {
    let opened = all_gpus();
    match gpu_verdict(opened.as_ref().map(Vec::len), need, gpu_required()) {
        GpuVerdict::Run => opened.ok(),
        GpuVerdict::Skip(why) => {
            record_skip(test, &why);
            None
        }
        GpuVerdict::Fail(why) => panic!("{test}: {why}"),
    }
}

/// Where the two peers of a two-sided test or bench run ([`peers_or_skip`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerForm {
    /// On two GPUs (GPU 0 and GPU 1).
    TwoGpus,
    /// Both on one GPU: two handles of it, each with its own stream, in one process and one
    /// context, their kernels resident at the same time. Its timings are not NVLink figures.
    SameGpu,
}

impl PeerForm {
    /// The form of the peers `gpus[0]` and `gpus[1]`.
    pub fn of(gpus: &[Arc<Gpu>]) -> Self {
        match gpus {
            [a, b, ..] if a.ordinal() != b.ordinal() => PeerForm::TwoGpus,
            _ => PeerForm::SameGpu,
        }
    }
    /// `two GPUs` or `same GPU`, as the report shows it.
    pub fn label(self) -> &'static str {
        match self {
            PeerForm::TwoGpus => "two GPUs",
            PeerForm::SameGpu => "same GPU",
        }
    }
}

/// The two peers of a two-sided test: GPUs 0 and 1 when the machine has two, else two handles
/// of GPU 0 (each with its own stream: kernels of both sides run at the same time, through the
/// same public API a program with one GPU and two streams uses). Records which form ran
/// (`GPU-FORM <test>: same GPU` on stderr and in the skip log, which the report shows beside the
/// check); `None` after recording a skip, as [`gpus_or_skip`], when there is no GPU.
pub fn peers_or_skip(test: &str) -> Option<Vec<Arc<Gpu>>> {
    let gpus = gpus_or_skip(test, 1)?;
    let pair = if gpus.len() >= 2 {
        vec![gpus[0].clone(), gpus[1].clone()]
    } else {
        // Both handles with the kernels loaded before either side launches (see `second_handle`).
        if let Err(e) = gpus[0].module(crate::PTX) {
            panic!("{test}: loading the kernels on GPU 0: {e}");
        }
        vec![gpus[0].clone(), second_handle(&gpus[0]).unwrap_or_else(|e| panic!("{test}: {e}"))]
    };
    record_form(test, PeerForm::of(&pair));
    Some(pair)
}

/// A second handle of `gpu`'s device (its own stream), opened once per process, with the
/// harness's kernels loaded at once: a module load may wait for the context's running kernels,
/// which could be the other side's, waiting for this one.
fn second_handle(gpu: &Arc<Gpu>) -> Result<Arc<Gpu>, String> {
    static SECOND: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
    SECOND
        .get_or_init(|| {
            let g = Gpu::open(gpu.ordinal()).map_err(|e| format!("opening a second handle of GPU 0: {e}"))?;
            g.module(crate::PTX).map_err(|e| format!("loading the kernels on the second handle of GPU 0: {e}"))?;
            Ok(g)
        })
        .clone()
}

/// Records which form of a two-sided test ran (stderr, and the skip log when configured).
pub fn record_form(test: &str, form: PeerForm) {
    let line = format!("GPU-FORM {test}: {}", form.label());
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("MSCCLPP_RS_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// `n` random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::rng().fill(&mut v[..]);
    v
}

/// `n` random values of a plain integer type (every bit pattern valid).
pub fn random_ints<T: bytemuck::Pod>(n: usize) -> Vec<T> {
    let mut v = vec![T::zeroed(); n];
    rand::rng().fill(bytemuck::cast_slice_mut::<T, u8>(&mut v));
    v
}

/// `n` random f32 in `[lo, hi)`.
pub fn random_f32(n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut r = rand::rng();
    (0..n).map(|_| r.random_range(lo..hi)).collect()
}

/// `n` random f64 in `[lo, hi)`.
pub fn random_f64(n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut r = rand::rng();
    (0..n).map(|_| r.random_range(lo..hi)).collect()
}

/// A random integer in `[lo, hi)`.
pub fn random_range(lo: u64, hi: u64) -> u64 {
    rand::rng().random_range(lo..hi)
}

/// Whether this process is the child started by [`run_child`] for `test`.
pub fn is_child(test: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == test)
}

/// Runs test `test` of the current test binary in a child process (so a trap, which poisons the
/// CUDA context, cannot affect other tests) and returns its output. The child sees
/// [`is_child`]`(test)` as true.
pub fn run_child(test: &str) -> Output {
    run_child_with(test, |_| {})
}

/// [`run_child`], with the child's command adjusted by `env` first (to set or remove
/// environment variables: `CUDA_VISIBLE_DEVICES`, `MSCCLPP_RS_REQUIRE_GPU`, ...).
pub fn run_child_with(test: &str, env: impl FnOnce(&mut Command)) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    env(&mut cmd);
    let mut child = cmd
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the child test process");
    // A child that hangs must fail the test, not the run: kill it after a deadline.
    let deadline = std::time::Instant::now() + CHILD_DEADLINE;
    while child.try_wait().expect("waiting for the child").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting the killed child");
            panic!("child `{test}` still running after {CHILD_DEADLINE:?}; killed. Output:\n{}", output_text(&out));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting the child's output")
}

/// How long [`run_child`] lets a child run.
pub const CHILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Combined stdout and stderr of a child.
pub fn output_text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Compares two slices and panics with the first mismatches (index, got, want).
pub fn assert_same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).take(5).collect();
    if !bad.is_empty() {
        let n = (0..got.len()).filter(|&i| got[i] != want[i]).count();
        let shown: Vec<String> = bad.iter().map(|&i| format!("[{i}] got {:?} want {:?}", got[i], want[i])).collect();
        panic!("{what}: {n} of {} elements differ; first: {}", got.len(), shown.join(", "));
    }
}

/// A test whose body must trap: in the parent, skips without `need` GPUs, runs the test again as
/// a child process and asserts that the child succeeded (it saw the launch fail) and that its
/// output holds every text of `expect`; in the child, runs `child` on the GPUs. A `need` of 2 is
/// a two-sided test: it runs on one GPU too, its peers two handles of it ([`peers_or_skip`]).
pub fn trap_test(
    name: &str,
    need: usize,
    child: impl FnOnce(&[Arc<Gpu>]),
    expect: &[&str],
    device: DeviceMessage,
    (blocks, threads): (u32, u32),
) {
    // Two-sided traps run in their peer form: two GPUs, else two handles of one.
    let open = || if need == 2 { peers_or_skip(name) } else { gpus_or_skip(name, need) };
    if is_child(name) {
        let gpus = open().expect("the parent found the GPUs");
        child(&gpus);
        return;
    }
    if open().is_none() {
        return;
    }
    let out = run_child(name);
    let text = output_text(&out);
    assert!(out.status.success(), "child failed:\n{text}");
    for e in expect {
        assert!(text.contains(e), "missing `{e}` in:\n{text}");
    }
    if let Err(e) = check_device_messages(&text, device, blocks, threads) {
        panic!("{e}");
    }
}

/// In a [`trap_test`] child: the GPU's work must fail (the kernel trapped) within 5 s of `start`.
pub fn expect_trap(g: &Arc<Gpu>, start: std::time::Instant) {
    let e = g.synchronize().expect_err("the kernel must trap");
    println!("CHILD-SAW after {:?}: {e}", start.elapsed());
    assert!(start.elapsed() < std::time::Duration::from_secs(5), "trap took {:?}", start.elapsed());
}

/// What a kernel's trap must have printed (see [`check_device_messages`]).
#[derive(Clone, Copy, Debug)]
pub enum DeviceMessage<'a> {
    /// `mscclpp-device: wait NAME timed out after N ns (block B, thread T)`, with N at least
    /// `budget_ns`.
    Timeout {
        /// The wait's name.
        name: &'a str,
        /// The spin budget the kernel was given.
        budget_ns: u64,
    },
    /// `mscclpp-device: MSG at FILE:LINE (block B, thread T)`, the file exactly `file` and the
    /// line exactly `line`.
    Failure {
        /// The message.
        msg: &'a str,
        /// The caller's file as the compiler names it: the kernel crate's `src/...rs` (a path
        /// into the device library would name the library, not the caller).
        file: &'a str,
        /// The caller's line in `file` (1-based), found in the kernel's source with [`line_of`]:
        /// a location that is some other line of the kernel's file (a `#[track_caller]` chain
        /// broken inside it, a line number printed wrong) fails.
        line: u32,
    },
    /// `mscclpp-device: panic at FILE:LINE: MSG`, the file exactly `file` and the line exactly
    /// `line`.
    Panic {
        /// The panicking code's file, as for [`DeviceMessage::Failure`].
        file: &'a str,
        /// The panicking code's line, as for [`DeviceMessage::Failure`].
        line: u32,
        /// Text the message contains.
        msg: &'a str,
    },
}

/// The line (1-based) of the one line of `src` that contains `marker`: a kernel source's call
/// site, marked with a comment, for [`DeviceMessage::Failure`] and [`DeviceMessage::Panic`]
/// (`line_of(include_str!("../ptx-tests/src/bulk.rs"), "trap site: ...")`). Panics unless exactly
/// one line holds it.
pub fn line_of(src: &str, marker: &str) -> u32 {
    let lines: Vec<usize> = src.lines().enumerate().filter(|(_, l)| l.contains(marker)).map(|(i, _)| i + 1).collect();
    match lines.as_slice() {
        [one] => u32::try_from(*one).expect("a line number that fits in u32"),
        [] => panic!("no line holds `{marker}`"),
        many => panic!("`{marker}` is on several lines: {many:?}"),
    }
}

/// The marker on the line of `ptx-tests/src/bulk.rs` whose bulk copy traps in the checked build
/// (`bulk_roundtrip` given 24 bytes).
pub const TRAP_SITE_BULK_SIZE: &str = "trap site: bulk_roundtrip size check";

/// The marker on the line of `ptx-tests/src/sync.rs` whose bounds check panics
/// (`panic_out_of_bounds`).
pub const TRAP_SITE_OUT_OF_BOUNDS: &str = "trap site: panic_out_of_bounds index";

/// `(file, line)` of `FILE:LINE`, the file a Rust source path.
fn file_line(s: &str) -> Option<(&str, u32)> {
    let (file, line) = s.rsplit_once(':')?;
    let line: u32 = line.parse().ok()?;
    (file.ends_with(".rs") && line > 0 && file.chars().all(|c| c.is_ascii_graphic())).then_some((file, line))
}

/// `(block, thread)` of `(block B, thread T)`.
fn block_thread(s: &str) -> Option<(u32, u32)> {
    let s = s.strip_prefix("(block ")?.strip_suffix(')')?;
    let (b, t) = s.split_once(", thread ")?;
    Some((b.parse().ok()?, t.parse().ok()?))
}

/// Checks the device's printed messages in `text` (a child's output): every `mscclpp-device:`
/// line is one of the three forms, whole, with the block below `blocks` and the thread below
/// `threads`, a `file.rs:line` location with a line above 0, and at least one line is `want`
/// (for a failure or a panic: at `want`'s file and line). Returns what is wrong.
pub fn check_device_messages(text: &str, want: DeviceMessage, blocks: u32, threads: u32) -> Result<(), String> {
    let mut found = false;
    for line in text.lines().filter_map(|l| l.split_once("mscclpp-device: ").map(|(_, m)| m)) {
        let in_grid = |bt: Option<(u32, u32)>| bt.is_some_and(|(b, t)| b < blocks && t < threads);
        if let Some(rest) = line.strip_prefix("wait ") {
            let (name, rest) = rest.split_once(" timed out after ").ok_or(format!("malformed wait line: {line}"))?;
            let (ns, rest) = rest.split_once(" ns ").ok_or(format!("malformed wait line: {line}"))?;
            let ns: u64 = ns.parse().map_err(|_| format!("elapsed time is not a number: {line}"))?;
            if !in_grid(block_thread(rest)) {
                return Err(format!("block/thread missing or outside the grid: {line}"));
            }
            if let DeviceMessage::Timeout { name: n, budget_ns } = want
                && n == name
            {
                if ns < budget_ns {
                    return Err(format!("timed out after {ns} ns, before its budget of {budget_ns} ns: {line}"));
                }
                found = true;
            }
        } else if let Some(rest) = line.strip_prefix("panic at ") {
            let (loc, msg) = rest.split_once(": ").ok_or(format!("malformed panic line: {line}"))?;
            let (file, at) = file_line(loc).ok_or(format!("no file.rs:line location: {line}"))?;
            if let DeviceMessage::Panic { file: f, line: l, msg: m } = want
                && file == f
                && msg.contains(m)
            {
                if at != l {
                    return Err(format!("the location is line {at}, not the panicking line {l} of {f}: {line}"));
                }
                found = true;
            }
        } else {
            let (msg, rest) = line.rsplit_once(" at ").ok_or(format!("unrecognised device message: {line}"))?;
            let (loc, bt) = rest.split_once(' ').ok_or(format!("malformed failure line: {line}"))?;
            let (file, at) = file_line(loc).ok_or(format!("no file.rs:line location: {line}"))?;
            if !in_grid(block_thread(bt)) {
                return Err(format!("block/thread missing or outside the grid: {line}"));
            }
            if let DeviceMessage::Failure { msg: m, file: f, line: l } = want
                && msg == m
            {
                if file != f {
                    return Err(format!("the location names {file}, not the caller's {f}: {line}"));
                }
                if at != l {
                    return Err(format!("the location is line {at}, not the caller's line {l} of {f}: {line}"));
                }
                found = true;
            }
        }
    }
    if found { Ok(()) } else { Err(format!("no device message {want:?} in:\n{text}")) }
}

#[cfg(test)]
mod device_message_tests {
    use super::{DeviceMessage, check_device_messages, line_of};

    const T: DeviceMessage = DeviceMessage::Timeout { name: "LL16Packet::read", budget_ns: 20_000_000 };

    #[test]
    fn whole_lines_pass() {
        let text = "x\nmscclpp-device: wait LL16Packet::read timed out after 20000512 ns (block 0, thread 31)\n";
        assert_eq!(check_device_messages(text, T, 1, 32), Ok(()));
        let f = "mscclpp-device: bulk copy size is zero at src/bulk.rs:40 (block 1, thread 0)";
        let want = DeviceMessage::Failure { msg: "bulk copy size is zero", file: "src/bulk.rs", line: 40 };
        assert_eq!(check_device_messages(f, want, 2, 32), Ok(()));
        let p = "mscclpp-device: panic at src/checks.rs:12: index out of bounds";
        assert_eq!(
            check_device_messages(p, DeviceMessage::Panic { file: "src/checks.rs", line: 12, msg: "index" }, 1, 1),
            Ok(())
        );
    }

    #[test]
    fn garbage_and_wrong_fields_fail() {
        // What an H200 printed when the location went through `%.*s`.
        let garbage = "mscclpp-device: bulk copy size is not a multiple of 16 bytes at \u{fffd}+\u{fffd}\u{7f}:0 \
                       (block 0, thread 2829065216)";
        let want =
            DeviceMessage::Failure { msg: "bulk copy size is not a multiple of 16 bytes", file: "bulk.rs", line: 27 };
        assert!(check_device_messages(garbage, want, 1, 32).is_err());
        // The library's own file instead of the kernel's call site (a path dependency's file
        // carries its directory).
        let lib = "mscclpp-device: bulk copy size is zero at /src/device/src/bulk.rs:247 (block 0, thread 0)";
        let want = DeviceMessage::Failure { msg: "bulk copy size is zero", file: "src/bulk.rs", line: 247 };
        assert!(check_device_messages(lib, want, 1, 32).unwrap_err().contains("not the caller"));
        // Early timeout, thread outside the block, missing message.
        let early = "mscclpp-device: wait LL16Packet::read timed out after 100 ns (block 0, thread 0)";
        assert!(check_device_messages(early, T, 1, 32).is_err());
        let far = "mscclpp-device: wait LL16Packet::read timed out after 30000000 ns (block 0, thread 32)";
        assert!(check_device_messages(far, T, 1, 32).is_err());
        assert!(check_device_messages("nothing printed", T, 1, 32).is_err());
    }

    /// The right message in the caller's file but at another line of it (what a broken
    /// `#[track_caller]` chain inside the kernel crate, or a location printed wrong, gives) fails;
    /// the old check, a line above 0, passed it.
    #[test]
    fn a_location_at_the_wrong_line_fails() {
        let f = "mscclpp-device: bulk copy size is zero at src/bulk.rs:41 (block 0, thread 0)";
        let want = DeviceMessage::Failure { msg: "bulk copy size is zero", file: "src/bulk.rs", line: 40 };
        let e = check_device_messages(f, want, 1, 32).unwrap_err();
        assert!(e.contains("line 41, not the caller's line 40"), "{e}");
        let p = "mscclpp-device: panic at src/sync.rs:264: index out of bounds";
        let want = DeviceMessage::Panic { file: "src/sync.rs", line: 265, msg: "index" };
        let e = check_device_messages(p, want, 1, 1).unwrap_err();
        assert!(e.contains("line 264, not the panicking line 265"), "{e}");
        // Line 0 (no location) fails whatever was expected.
        let zero = "mscclpp-device: bulk copy size is zero at src/bulk.rs:0 (block 0, thread 0)";
        let want = DeviceMessage::Failure { msg: "bulk copy size is zero", file: "src/bulk.rs", line: 0 };
        assert!(check_device_messages(zero, want, 1, 32).is_err());
    }

    #[test]
    fn line_of_finds_the_one_marked_line() {
        let src = "fn k() {\n    a();\n    b(); // trap site: b\n}\n";
        assert_eq!(line_of(src, "trap site: b"), 3);
        assert!(std::panic::catch_unwind(|| line_of(src, "trap site: c")).is_err(), "a missing marker");
        assert!(std::panic::catch_unwind(|| line_of("x // m\ny // m\n", "// m")).is_err(), "a marker twice");
    }

    /// The markers the GPU trap tests look for are each on one line of their kernel's source, at
    /// the call that traps.
    #[test]
    fn the_trap_tests_markers_are_at_their_calls() {
        let bulk = include_str!("../ptx-tests/src/bulk.rs");
        let l = line_of(bulk, super::TRAP_SITE_BULK_SIZE) as usize;
        assert!(bulk.lines().nth(l - 1).unwrap().contains("bulk::bulk_load("), "line {l} of ptx-tests/src/bulk.rs");
        let sync = include_str!("../ptx-tests/src/sync.rs");
        let l = line_of(sync, super::TRAP_SITE_OUT_OF_BOUNDS) as usize;
        assert!(sync.lines().nth(l - 1).unwrap().contains("a[i as usize]"), "line {l} of ptx-tests/src/sync.rs");
    }
}

#[cfg(test)]
mod skip_policy_tests {
    use super::{GpuProblem, GpuVerdict, gpu_verdict};
    use cudarc::driver::DriverError;
    use cudarc::driver::sys::CUresult;
    use mscclpp_host::Error;

    fn driver(context: &str, code: CUresult) -> Error {
        Error::Driver { context: context.into(), source: DriverError(code) }
    }

    #[test]
    fn only_a_missing_driver_or_no_device_is_an_absence() {
        for e in [Error::NoDriver("libcuda could not be loaded".into()), Error::NoDevice("none reported".into())] {
            assert!(e.is_no_gpu(), "{e}");
            assert_eq!(GpuProblem::from(&e), GpuProblem::Absent(e.to_string()));
        }
        // Driver errors (not displayed here: their text comes from the driver library, which
        // this machine may lack). Discovery itself reads cuInit's CUDA_ERROR_NO_DEVICE as a
        // driver that reports no device (mscclpp_host::gpu); as an error value it is a failure.
        for (context, code) in [
            ("cuInit", CUresult::CUDA_ERROR_NOT_INITIALIZED),
            ("cuInit", CUresult::CUDA_ERROR_NO_DEVICE),
            ("cuDeviceGetCount", CUresult::CUDA_ERROR_UNKNOWN),
            ("cuDeviceGetAttribute", CUresult::CUDA_ERROR_INVALID_DEVICE),
            ("opening GPU 1", CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        ] {
            assert!(!driver(context, code).is_no_gpu(), "{context}: {code:?} is a failure");
        }
        let other = Error::Unsupported("anything else".into());
        assert_eq!(GpuProblem::from(&other), GpuProblem::Failed(other.to_string()));
    }

    #[test]
    fn a_failure_fails_with_or_without_require() {
        let failed = GpuProblem::Failed("cuInit: CUDA_ERROR_NOT_INITIALIZED".into());
        for require in [false, true] {
            for need in [0, 1, 2] {
                match gpu_verdict(Err(&failed), need, require) {
                    GpuVerdict::Fail(why) => assert!(why.contains("cuInit"), "{why}"),
                    v => panic!("a cuInit error must fail, got {v:?}"),
                }
            }
        }
    }

    #[test]
    fn an_absence_skips_unless_required() {
        let absent = GpuProblem::from(&Error::NoDriver("libcuda could not be loaded".into()));
        assert!(matches!(gpu_verdict(Err(&absent), 1, false), GpuVerdict::Skip(w) if w.contains("libcuda")));
        assert!(matches!(gpu_verdict(Err(&absent), 1, true), GpuVerdict::Fail(w) if w.contains("REQUIRE_GPU")));
    }

    #[test]
    fn too_few_gpus_skip_unless_required_and_enough_run() {
        assert_eq!(gpu_verdict(Ok(1), 2, false), GpuVerdict::Skip("needs 2 GPUs, found 1".into()));
        assert!(matches!(gpu_verdict(Ok(1), 2, true), GpuVerdict::Fail(_)));
        assert_eq!(gpu_verdict(Ok(2), 2, false), GpuVerdict::Run);
        assert_eq!(gpu_verdict(Ok(8), 1, true), GpuVerdict::Run);
    }
}

/// A destination after a timed copy of `bytes` (the benches' check): the copied range equals
/// `want`, and the bytes after it (up to 64 KiB) are still [`POISON`], so a copy that did
/// nothing, or too little, or too much, fails.
pub fn assert_copied(what: &str, dst: &mscclpp_host::DeviceBuffer, want: &[u8], bytes: usize) {
    let mut got = vec![0u8; bytes];
    dst.read(0, &mut got).unwrap();
    assert_same(&format!("{what}: copied bytes"), &got, &want[..bytes]);
    let tail = (dst.len() - bytes).min(64 << 10);
    let mut after = vec![0u8; tail];
    dst.read(bytes, &mut after).unwrap();
    assert_same(&format!("{what}: bytes after the copy"), &after, &vec![POISON; tail]);
}
