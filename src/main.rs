//! `mscclpp-rs`: the project's report (`./x report` runs it with `cargo run --release`).
//!
//! On any machine: assembles the embedded PTX with ptxas and checks every PTX wrapper's
//! instruction and SASS (a summary on the terminal, the full table in the report file).
//!
//! With GPUs: a bulk round trip on each GPU, then the project's own test, pattern and bench
//! executables as child processes (beside this program in the GPU bundle, else built with cargo):
//! the GPU unit tests and the multi-rank pattern and collectives tests under the built-in
//! launcher (correctness of every primitive family), then the benches, each variant against its
//! baseline from the same run, and `coll-bench` against NCCL when NCCL is found. A progress bar
//! runs meanwhile; the benches' JSON lines (`MSCCLPP_RS_BENCH_OUT`) become tables and plots.
//!
//! Without a GPU: the collectives' recorded results against NCCL (or the rows of
//! `$MSCCLPP_RS_BENCH_OUT` when it names a results file), and one line saying what needs a GPU.
//!
//! Everything lands in `target/report/` (`MSCCLPP_RS_REPORT_DIR`): `report.md`, SVG plots, the
//! children's logs and the benches' results file; criterion's HTML report in `target/criterion/`.
//!
//! Options: `--cpu` (skip the GPU part), `--steps a,b` (only those GPU steps, by executable name).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::checks::{self, Check};
use mscclpp_rs::report::{self, BenchRow, CollRow, Outcome, family};
use mscclpp_rs::{PTX, ptxcheck, suite, testing};

/// The results recorded on two H200s joined by NVLink (coll-bench, graph medians).
const RECORDED: &str = include_str!("../docs/results/collectives-2xH200.jsonl");
const RECORDED_SOURCE: &str = "recorded on two H200s joined by NVLink (docs/results/collectives-2xH200.jsonl)";

const USAGE: &str = "usage: mscclpp-rs [--cpu] [--steps NAME,NAME]
  --cpu          only the CPU part (PTX/SASS checks, recorded results), even with GPUs
  --steps LIST   run only these GPU steps (or MSCCLPP_RS_REPORT_STEPS=LIST): unit_bulk unit_sync
                 unit_memchan mp_patterns mp_collectives bench_bulk bench_sync bench_memchan coll_bench
Environment: MSCCLPP_RS_REPORT_DIR (default target/report), MSCCLPP_RS_BENCH_OUT (the benches'
JSON lines; default <report dir>/bench.jsonl), MSCCLPP_RS_BENCH_ARGS (extra criterion arguments,
e.g. \"--warm-up-time 0.1 --measurement-time 0.3\"), MSCCLPP_RS_STEP_TIMEOUT (seconds per step,
default 600), MSCCLPP_RS_NCCL (the NCCL library coll-bench loads), MSCCLPP_RS_BIN_DIR (where
the executables are; default: beside this program, else built with cargo).
";

fn main() -> ExitCode {
    let mut cpu_only = false;
    let steps_of = |s: &str| s.split(',').map(|x| x.trim().to_string()).collect::<Vec<_>>();
    let mut only: Option<Vec<String>> = std::env::var("MSCCLPP_RS_REPORT_STEPS").ok().map(|s| steps_of(&s));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cpu" => cpu_only = true,
            "--steps" => only = args.next().map(|s| steps_of(&s)),
            "-h" | "--help" => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprint!("unknown argument `{other}`\n{USAGE}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(bad) = only.iter().flatten().find(|n| !suite::EXECUTABLES.contains(&n.as_str())) {
        eprint!("unknown step `{bad}`\n{USAGE}");
        return ExitCode::FAILURE;
    }
    // Relative to where the report runs (the repository root for `./x report`).
    let dir = PathBuf::from(std::env::var_os("MSCCLPP_RS_REPORT_DIR").unwrap_or_else(|| "target/report".into()));
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut rep = Report { dir, ..Report::default() };
    let mut failed = false;
    println!("mscclpp-rs report\n");
    failed |= !report_table("sm_90", &mscclpp_rs::ptx_path(false), PTX, checks::sm90_checks(), &mut rep);
    failed |= !report_table(
        "sm_100a",
        &mscclpp_rs::ptx_sm100a_path(),
        mscclpp_rs::PTX_SM100A,
        checks::sm100a_checks(),
        &mut rep,
    );

    let inv = mscclpp_host::gpu::inventory();
    if inv.devices.is_empty() && !cpu_only && inv.discovery == mscclpp_host::gpu::Discovery::Failed {
        // A driver that fails is not a machine without GPUs: the report fails.
        let why = inv.reason.clone().unwrap_or_else(|| "GPU discovery failed".into());
        println!("\nGPU discovery FAILED: {why}");
        rep.gpu = format!("Discovery failed: {why}.\n");
        rep.summary.push(format!("GPU: discovery FAILED: {why}"));
        rep.write();
        return finish(true);
    }
    if inv.devices.is_empty() || cpu_only {
        // A results file named by MSCCLPP_RS_BENCH_OUT (from an earlier run), else the recorded
        // collectives.
        let fresh = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
            .and_then(|p| std::fs::read_to_string(&p).ok().map(|t| (t, p)))
            .filter(|(t, _)| !report::read_bench_rows(t).is_empty() || !report::read_rows(t).is_empty());
        let source = match fresh {
            Some((text, p)) => {
                let source = format!("the results file {}", p.to_string_lossy());
                rep.take_results(&text, &source);
                source
            }
            None => {
                rep.take_results(RECORDED, RECORDED_SOURCE);
                RECORDED_SOURCE.to_string()
            }
        };
        print_benchmarks(&rep);
        let why = if cpu_only {
            "--cpu given".to_string()
        } else {
            inv.reason.clone().unwrap_or_else(|| "no CUDA driver found".into())
        };
        println!(
            "\nNeeds a GPU (not run here: {why}): the GPU tests of every primitive family, the multi-rank \
             tests, the benches against their baselines and coll-bench against NCCL (see the README's \
             \"Running on GPUs\")."
        );
        rep.gpu = format!("Not run: {why}.\n");
        rep.summary.push(format!(
            "GPU: not run ({why}): the GPU tests, the multi-rank tests, the benches and coll-bench need GPUs"
        ));
        if !rep.bench.is_empty() {
            rep.summary.push(format!("benchmarks: {} rows from {source}", rep.bench.len()));
        }
        rep.write();
        println!("Full report: {}", rep.dir.join("report.md").display());
        return finish(failed);
    }

    failed |= !gpu_report(&mut rep, &inv, only.as_deref());
    rep.write();
    println!("\nFull report: {} (plots and logs beside it)", rep.dir.join("report.md").display());
    finish(failed)
}

/// The last line (the GPU runner's summary reads it) and the exit status.
fn finish(failed: bool) -> ExitCode {
    println!("report: RESULT {}", if failed { "FAILED" } else { "ok" });
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// What the report file holds, kept as the run goes (it is rewritten after every step).
#[derive(Default)]
struct Report {
    dir: PathBuf,
    /// Summary bullets of the PTX/SASS checks.
    ptx_summary: Vec<String>,
    /// Summary bullets of the rest.
    summary: Vec<String>,
    /// The GPU section's text (machine, smoke checks, notes).
    gpu: String,
    checks: Vec<report::Check>,
    /// Benchmark rows, collectives included.
    bench: Vec<BenchRow>,
    coll: Vec<CollRow>,
    coll_source: String,
    /// Criterion's HTML report: (link from the report file, path).
    criterion: Option<(String, PathBuf)>,
    /// The PTX wrapper tables.
    ptx: String,
}

impl Report {
    /// Takes the benchmark and collectives rows of a results text.
    fn take_results(&mut self, text: &str, source: &str) {
        self.bench = report::read_bench_rows(text);
        self.coll = report::read_rows(text);
        self.coll_source = source.to_string();
        if self.coll.is_empty() {
            self.coll = report::read_rows(RECORDED);
            self.coll_source = RECORDED_SOURCE.to_string();
        }
    }

    fn render(&self) -> String {
        let mut md = String::from("# mscclpp-rs report\n\n## Summary\n\n");
        for s in self.ptx_summary.iter().chain(&self.summary) {
            let _ = writeln!(md, "- {s}");
        }
        let _ = write!(md, "\n## GPU\n\n{}", self.gpu);
        if !self.checks.is_empty() {
            md.push_str("\n## Correctness on this machine's GPUs\n\n");
            md.push_str(
                "Every GPU unit test, every phase of the multi-rank pattern test and the collectives test \
                 (fresh random data, poisoned outputs, every result compared on the host), and the benches' \
                 checks of what they timed.\n\n",
            );
            md.push_str(&report::checks_markdown(&self.checks));
        }
        let prims: Vec<BenchRow> = self.bench.iter().filter(|r| r.family != family::COLLECTIVES).cloned().collect();
        if !prims.is_empty() {
            md.push_str("\n## Benchmarks against their baselines\n\n");
            md.push_str(
                "Medians of CUDA-event timings. Every variant is compared with a baseline measured in the same \
                 run: ratio is its speed relative to the baseline (above 1: faster), and the target is the \
                 ratio (or value) the project aims for. Schema of the rows: docs/BENCHMARKS.md.\n",
            );
            if let Some((c, _)) = &self.criterion {
                let _ = writeln!(md, "\nCriterion's own HTML report of every bench: [{c}]({c}).");
            }
            match report::series_plots(&prims, &self.dir) {
                Ok(files) => push_images(&mut md, &files),
                Err(e) => {
                    let _ = writeln!(md, "\n(plots: {e})");
                }
            }
            md.push_str(&report::bench_markdown(&prims));
        }
        let _ = writeln!(
            md,
            "\n## Collectives against NCCL\n\nSource: {}. Median time per operation in a CUDA graph; busbw as nccl-tests.",
            self.coll_source
        );
        match report::plots(&self.coll, &self.dir) {
            Ok(files) => push_images(&mut md, &files),
            Err(e) => {
                let _ = writeln!(md, "\n(plots: {e})");
            }
        }
        md.push_str(&report::markdown(&self.coll));
        md.push_str(&self.ptx);
        md
    }

    /// Writes `report.md` (and the plots) into the report directory.
    fn write(&self) {
        let path = self.dir.join("report.md");
        match std::fs::create_dir_all(&self.dir).and_then(|_| std::fs::write(&path, self.render())) {
            Ok(()) => {}
            Err(e) => println!("writing {} failed: {e}", path.display()),
        }
    }
}

fn push_images(md: &mut String, files: &[PathBuf]) {
    md.push('\n');
    for f in files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let _ = writeln!(md, "![{name}]({name})");
    }
}

/// One GPU step: an executable, its arguments, how its output is read, and the GPUs it needs.
struct Step {
    exe: &'static str,
    args: Vec<String>,
    kind: Kind,
    need_gpus: usize,
}

enum Kind {
    /// A libtest executable; tests not named after a family belong to this one.
    Tests(&'static str),
    /// The multi-rank pattern test (phases).
    Phases,
    /// A multi-rank program reporting checks of a family on rank 0 (`PROGRAM: rank 0: ... ok`).
    Ranks { program: &'static str, family: &'static str },
    /// A bench of this family: its rows go to the results file, and a failed run is a failed
    /// check of what it timed (`what`).
    Bench { family: &'static str, what: &'static str },
}

/// Ranks of the thread forms of the multi-rank steps.
const THREAD_RANKS: usize = 8;

/// How a step is named in the report and its logs: the executable, with `--ranks N` or
/// `--threads N` when it has them.
fn step_source(step: &Step) -> String {
    match step.args.first().map(String::as_str) {
        Some(flag @ ("--ranks" | "--threads")) => format!("{} {flag} {}", step.exe, step.args[1]),
        _ => step.exe.to_string(),
    }
}

/// The file name stem of a step's log and skip log (`mp_ep`, `mp_ep-threads8`): the thread
/// forms run the same executables as the process forms.
fn log_stem(step: &Step) -> String {
    match step.args.first().map(String::as_str) {
        Some("--threads") => format!("{}-threads{}", step.exe, step.args[1]),
        _ => step.exe.to_string(),
    }
}

fn steps(gpus: usize) -> Vec<Step> {
    let ranks = gpus.clamp(2, 8).to_string();
    let bench_args = || {
        let mut a = vec!["--bench".to_string()];
        a.extend(std::env::var("MSCCLPP_RS_BENCH_ARGS").unwrap_or_default().split_whitespace().map(String::from));
        a
    };
    let threads = || vec!["--threads".to_string(), THREAD_RANKS.to_string()];
    let tests = |exe, fam| Step { exe, args: vec!["--test-threads=1".into()], kind: Kind::Tests(fam), need_gpus: 1 };
    vec![
        tests("unit_bulk", family::BULK),
        tests("unit_sync", family::SYNC),
        tests("unit_memchan", family::MEMCHAN),
        tests("unit_transport", family::PORT),
        Step { exe: "mp_patterns", args: vec!["--ranks".into(), ranks.clone()], kind: Kind::Phases, need_gpus: 1 },
        // Multi-rank programs: on a one-GPU machine their two ranks share the GPU.
        Step {
            exe: "mp_collectives",
            args: vec!["--ranks".into(), ranks.clone()],
            kind: Kind::Ranks { program: "mp_collectives", family: family::COLLECTIVES },
            need_gpus: 1,
        },
        Step {
            exe: "mp_ep",
            args: vec!["--ranks".into(), ranks.clone()],
            kind: Kind::Ranks { program: "mp_ep", family: family::EP },
            need_gpus: 1,
        },
        Step {
            exe: "mp_exec",
            args: vec!["--ranks".into(), ranks.clone()],
            kind: Kind::Ranks { program: "mp_exec", family: family::PLANS },
            need_gpus: 1,
        },
        // The same four with 8 ranks as threads of one process: on one GPU their kernels run at
        // the same time (processes sharing a GPU take turns), so every algorithm runs at 8 ranks.
        Step { exe: "mp_patterns", args: threads(), kind: Kind::Phases, need_gpus: 1 },
        Step {
            exe: "mp_collectives",
            args: threads(),
            kind: Kind::Ranks { program: "mp_collectives", family: family::COLLECTIVES },
            need_gpus: 1,
        },
        Step {
            exe: "mp_ep",
            args: threads(),
            kind: Kind::Ranks { program: "mp_ep", family: family::EP },
            need_gpus: 1,
        },
        Step {
            exe: "mp_exec",
            args: threads(),
            kind: Kind::Ranks { program: "mp_exec", family: family::PLANS },
            need_gpus: 1,
        },
        Step {
            exe: "bench_bulk",
            args: bench_args(),
            kind: Kind::Bench { family: family::BULK, what: "timed copies and reduce-store equal their reference" },
            need_gpus: 1,
        },
        Step {
            exe: "bench_sync",
            args: bench_args(),
            kind: Kind::Bench {
                family: family::SYNC,
                what: "semaphore kernels wrote their error words; every mode carried data correctly",
            },
            need_gpus: 1,
        },
        Step {
            exe: "bench_memchan",
            args: bench_args(),
            // On one GPU its peers share it (figures labelled "same GPU", without targets).
            kind: Kind::Bench { family: family::MEMCHAN, what: "timed puts equal their source" },
            need_gpus: 1,
        },
        Step {
            exe: "coll_bench",
            args: vec!["--ranks".into(), gpus.min(8).to_string()],
            kind: Kind::Bench {
                family: family::COLLECTIVES,
                what: "coll-bench: every result after timing (ours and NCCL's)",
            },
            need_gpus: 2,
        },
    ]
}

/// The GPU part: smoke checks, then every step; returns whether everything passed.
fn gpu_report(rep: &mut Report, inv: &mscclpp_host::gpu::Inventory, only: Option<&[String]>) -> bool {
    let mut ok = true;
    let gpus = inv.devices.len();
    println!("\nGPUs:");
    let _ = writeln!(rep.gpu, "| GPU | name | SMs | memory |\n| --- | --- | --- | --- |");
    for d in &inv.devices {
        let line = format!(
            "{} (sm_{}{}), {} SMs, {} KiB shared/block, {:.1} GiB",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.max_shared_optin / 1024,
            d.total_mem as f64 / (1u64 << 30) as f64
        );
        println!("  {}: {line}", d.ordinal);
        let _ = writeln!(
            rep.gpu,
            "| {} | {} | {} | {:.1} GiB |",
            d.ordinal,
            d.name,
            d.sm_count,
            d.total_mem as f64 / (1u64 << 30) as f64
        );
    }
    rep.gpu.push('\n');
    match testing::all_gpus() {
        Ok(all) => {
            for g in &all {
                let r = smoke(g);
                let text = r.as_deref().unwrap_or_else(|e| e);
                println!("  GPU {}: {text}", g.ordinal());
                let _ = writeln!(rep.gpu, "- GPU {}: {text}", g.ordinal());
                rep.checks.push(report::Check {
                    family: family::BULK,
                    source: "report".into(),
                    name: format!("bulk round trip on GPU {}", g.ordinal()),
                    outcome: match &r {
                        Ok(_) => Outcome::Passed,
                        Err(e) => Outcome::Failed(e.clone()),
                    },
                });
            }
        }
        Err(e) => {
            println!("opening GPUs failed: {e}");
            let _ = writeln!(rep.gpu, "- opening the GPUs failed: {e}");
            ok = false;
        }
    }

    let exes = match executables() {
        Ok(e) => e,
        Err(e) => {
            println!("\nThe GPU tests and benches cannot run: {e}");
            let _ = writeln!(rep.gpu, "\nThe GPU tests and benches did not run: {e}.");
            rep.summary.push(format!("GPU tests and benches: not run ({e})"));
            return false;
        }
    };
    // Where the children write: logs, skips, bench rows, criterion's report.
    let logs = rep.dir.join("logs");
    let _ = std::fs::create_dir_all(&logs);
    let (bench_out, start) = match std::env::var_os("MSCCLPP_RS_BENCH_OUT") {
        Some(p) => {
            let p = PathBuf::from(p);
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (p, len)
        }
        None => {
            let p = rep.dir.join("bench.jsonl");
            let _ = std::fs::remove_file(&p);
            (p, 0)
        }
    };
    let criterion = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| rep.dir.parent().unwrap_or(&rep.dir).join("criterion"));
    let criterion = std::path::absolute(&criterion).unwrap_or(criterion);
    let index = criterion.join("report").join("index.html");
    let link = match criterion.file_name() {
        Some(name) if criterion.parent() == rep.dir.parent() => {
            format!("../{}/report/index.html", name.to_string_lossy())
        }
        _ => index.display().to_string(),
    };
    rep.criterion = Some((link, index));
    let deadline =
        Duration::from_secs(std::env::var("MSCCLPP_RS_STEP_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(600));

    let plan: Vec<Step> =
        steps(gpus).into_iter().filter(|s| only.is_none_or(|o| o.iter().any(|n| n == s.exe))).collect();
    println!("\nRunning {} steps (logs in {}):", plan.len(), logs.display());
    let bar = ProgressBar::new(plan.len() as u64).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] [{bar:24}] {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    for step in &plan {
        bar.set_message(step.exe);
        let source = step_source(step);
        let (new, line) = if gpus < step.need_gpus {
            let why = format!("needs {} GPUs, found {gpus}", step.need_gpus);
            (vec![skipped_check(step, &source, &why)], format!("skipped: {why}"))
        } else {
            let skips = logs.join(format!("{}.skips", log_stem(step)));
            let _ = std::fs::remove_file(&skips);
            let mut cmd = Command::new(&exes[step.exe]);
            cmd.args(&step.args)
                .env("MSCCLPP_RS_SKIP_LOG", &skips)
                .env("MSCCLPP_RS_BENCH_OUT", &bench_out)
                .env("CRITERION_HOME", &criterion)
                // Multicast stays off (host/src/nvls.rs refuses while these are set).
                .env("NCCL_NVLS_ENABLE", "0")
                .env("NVSHMEM_DISABLE_NVLS", "1")
                .env("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
                .env_remove("MSCCLPP_RS_ALLOW_MULTICAST");
            // With two GPUs nothing may skip for want of one.
            if gpus >= 2 {
                cmd.env("MSCCLPP_RS_REQUIRE_GPU", "1");
            } else {
                cmd.env_remove("MSCCLPP_RS_REQUIRE_GPU");
            }
            let exe = step.exe;
            let done = suite::run(cmd, &logs.join(format!("{}.log", log_stem(step))), deadline, |l| {
                let l = l.trim();
                if !l.is_empty() {
                    bar.set_message(format!("{exe}: {}", l.chars().take(100).collect::<String>()));
                }
            });
            let skipped = std::fs::read_to_string(&skips).unwrap_or_default();
            let new = checks_of(step, &source, &done, &skipped, deadline);
            let t = report::tally(&new);
            let mut line = report::tally_text(t);
            if !done.success() {
                let _ = write!(line, "; {}", done.failure(deadline));
            }
            let _ = write!(line, " ({:.0} s)", done.elapsed.as_secs_f64());
            (new, line)
        };
        bar.suspend(|| println!("  {:<15} {line}", source));
        rep.checks.extend(new);
        let text = read_from(&bench_out, start);
        rep.take_results(&text, &format!("this machine's coll-bench run ({})", bench_out.display()));
        rep.summary = summary_lines(rep, gpus);
        rep.write();
        bar.inc(1);
    }
    bar.finish_and_clear();

    let (p, f, s) = report::tally(&rep.checks);
    ok &= f == 0;
    println!("\nCorrectness ({} checks: {}):", p + f + s, report::tally_text((p, f, s)));
    for fam in family::ALL {
        let mine: Vec<&report::Check> = rep.checks.iter().filter(|c| c.family == fam).collect();
        println!("  {fam:<26} {}", report::tally_text(report::tally(mine.iter().copied())));
        for c in mine {
            match &c.outcome {
                Outcome::Failed(why) => println!("    FAILED {} ({}): {why}", c.name, c.source),
                Outcome::Skipped(why) if f == 0 => println!("    skipped {} ({}): {why}", c.name, c.source),
                _ => {}
            }
        }
    }
    print_benchmarks(rep);
    if let Some((_, index)) = &rep.criterion {
        println!("Criterion's HTML report: {}", index.display());
    }
    ok
}

/// The bench results written since `start` (the file may hold earlier runs' rows).
fn read_from(path: &Path, start: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(start as usize..).unwrap_or_default()).into_owned()
}

fn skipped_check(step: &Step, source: &str, why: &str) -> report::Check {
    let fam = match step.kind {
        Kind::Tests(f) | Kind::Bench { family: f, .. } => f,
        Kind::Phases => family::BOOTSTRAP,
        Kind::Ranks { family, .. } => family,
    };
    report::Check {
        family: fam,
        source: source.to_string(),
        name: format!("(all of {})", step.exe),
        outcome: Outcome::Skipped(why.to_string()),
    }
}

/// The checks of one finished step: what its output reports, and a failed check for a run that
/// failed without saying which of its checks did.
fn checks_of(step: &Step, source: &str, done: &suite::Finished, skips: &str, deadline: Duration) -> Vec<report::Check> {
    let text = &done.output;
    let mut out = match step.kind {
        Kind::Tests(fam) => report::parse_libtest(source, text, skips, fam),
        Kind::Phases => report::parse_phases(source, text, family::BOOTSTRAP),
        Kind::Ranks { program, family } => report::parse_rank_lines(source, program, text, family),
        Kind::Bench { family: fam, what } => {
            let outcome = if done.success() {
                Outcome::Passed
            } else if text.contains("NCCL not found") {
                Outcome::Skipped("NCCL not found: set MSCCLPP_RS_NCCL to the path of libnccl.so.2".into())
            } else {
                Outcome::Failed(done.failure(deadline))
            };
            vec![report::Check { family: fam, source: source.to_string(), name: what.to_string(), outcome }]
        }
    };
    if out.is_empty() && done.success() {
        // A run that passes without reporting a single check proves nothing.
        out.push(report::Check {
            family: skipped_check(step, source, "").family,
            source: source.to_string(),
            name: format!("(the run of {})", step.exe),
            outcome: Outcome::Failed("it exited with success but reported no checks".into()),
        });
    }
    let any_failed = out.iter().any(|c| matches!(c.outcome, Outcome::Failed(_)));
    if !done.success() && !any_failed && !matches!(step.kind, Kind::Bench { .. }) {
        let fam = skipped_check(step, source, "").family;
        out.push(report::Check {
            family: fam,
            source: source.to_string(),
            name: format!("(the run of {})", step.exe),
            outcome: Outcome::Failed(done.failure(deadline)),
        });
    }
    out
}

/// The summary bullets of a GPU run so far.
fn summary_lines(rep: &Report, gpus: usize) -> Vec<String> {
    let mut s = vec![format!("GPUs: {gpus}; the run's logs are in logs/")];
    let t = report::tally(&rep.checks);
    s.push(format!("correctness: {} checks, {}", t.0 + t.1 + t.2, report::tally_text(t)));
    let with: Vec<&BenchRow> = rep.bench.iter().filter(|r| r.met.is_some()).collect();
    let met = with.iter().filter(|r| r.met == Some(true)).count();
    s.push(format!(
        "benchmarks: {} rows against baselines of the same run; {} with a target, {met} met, {} missed",
        rep.bench.len(),
        with.len(),
        with.len() - met
    ));
    s
}

/// The terminal's benchmark summary: every row with a target (the collectives counted, with
/// their misses named), then the collectives at three sizes.
fn print_benchmarks(rep: &Report) {
    let prims: Vec<&BenchRow> =
        rep.bench.iter().filter(|r| r.family != family::COLLECTIVES && r.met.is_some()).collect();
    if !prims.is_empty() {
        println!("\nBenchmarks with a target (medians; ratio: speed relative to the baseline of the same run):");
        for r in prims {
            println!(
                "  {:<40} {:>9} {:<5} {:>7} {:<30} target {:<12} {}",
                r.name,
                report::fmt_value(r.value),
                r.metric,
                r.ratio.map(|x| format!("{x:.3}x")).unwrap_or_else(|| "-".into()),
                r.baseline.as_deref().map(|b| format!("vs {b}")).unwrap_or_default(),
                report::target_text(r),
                if r.met == Some(true) { "met" } else { "MISSED" }
            );
        }
    }
    let coll: Vec<&BenchRow> = rep.bench.iter().filter(|r| r.family == family::COLLECTIVES).collect();
    if !coll.is_empty() {
        let missed: Vec<String> = coll
            .iter()
            .filter(|r| r.met == Some(false))
            .map(|r| {
                format!(
                    "{} ({:.2}x, {:.2} us, target {})",
                    r.name,
                    r.ratio.unwrap_or(0.0),
                    r.value,
                    report::target_text(r)
                )
            })
            .collect();
        println!(
            "Collectives against NCCL: {} sizes, {} met their target{}",
            coll.len(),
            coll.len() - missed.len(),
            if missed.is_empty() { String::new() } else { format!("; missed: {}", missed.join(", ")) }
        );
    }
    println!("\nCollectives against NCCL ({}):", rep.coll_source);
    for r in rep.coll.iter().filter(|r| r.dtype == "f32" && [1 << 10, 1 << 20, 1 << 30].contains(&r.bytes)) {
        println!(
            "  {:<15} {:>7}  ours {:>9.2} us {:>7.1} GB/s   NCCL {} {:>9.2} us {:>7.1} GB/s   {:.2}x",
            r.op,
            report::size_label(r.bytes),
            r.ours_us,
            r.ours_busbw,
            r.nccl,
            r.nccl_us,
            r.nccl_busbw,
            r.nccl_us / r.ours_us
        );
    }
}

/// The test and bench executables: from `MSCCLPP_RS_BIN_DIR` or beside this program (the GPU
/// bundle), else built with cargo in this checkout.
fn executables() -> Result<suite::Executables, String> {
    if let Some(d) = std::env::var_os("MSCCLPP_RS_BIN_DIR") {
        let d = PathBuf::from(d);
        return suite::beside(&d).ok_or_else(|| format!("MSCCLPP_RS_BIN_DIR={} lacks some of them", d.display()));
    }
    let here = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf));
    if let Some(found) = here.as_deref().and_then(suite::beside) {
        return Ok(found);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !workspace.join("Cargo.toml").is_file() {
        return Err(format!(
            "they are not beside this program and its source ({}) is not here to build them",
            workspace.display()
        ));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    println!("\nBuilding the GPU test and bench executables (cargo test --release --no-run ...):");
    suite::build_with_cargo(&cargo, workspace)
}

/// Checks every wrapper of one module; prints a summary (and any mismatch), adds it to the
/// summary, and writes the full table (instruction, SASS opcodes) into the report. Returns
/// whether every check passed.
fn report_table<'a>(
    arch: &str,
    path: &std::path::Path,
    ptx: &str,
    checks: impl Iterator<Item = &'a Check>,
    rep: &mut Report,
) -> bool {
    let asm = match nvptx_builder::assemble(path, arch) {
        Ok(asm) => asm,
        Err(e) if bundle_ptx_report().is_some() => return bundle_table(arch, &e.to_string(), rep),
        Err(e) => {
            println!("{arch}: ptxas/cuobjdump unavailable, SASS checks not run ({e}); `./x setup` installs them\n");
            rep.ptx_summary.push(format!("PTX wrappers ({arch}): not checked, ptxas/cuobjdump unavailable"));
            let _ = writeln!(rep.ptx, "\n## {arch}\n\nptxas/cuobjdump unavailable: {e}");
            return !std::env::var("MSCCLPP_RS_REQUIRE_PTXAS").is_ok_and(|v| v == "1");
        }
    };
    let mut ok_all = true;
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let entries = ptxcheck::entries(ptx);
    let md = &mut rep.ptx;
    let _ = writeln!(
        md,
        "\n## PTX wrappers ({arch})\n\n| primitive | PTX instruction | SASS | |\n| --- | --- | --- | --- |"
    );
    let (mut n, mut bad) = (0, vec![]);
    for c in checks {
        n += 1;
        let sass = funcs.get(c.kernel).map(|t| {
            let ops: Vec<&str> = ptxcheck::opcodes(t)
                .into_iter()
                .filter(|op| c.sass.iter().any(|want| want.trim().starts_with(op) || op.starts_with(want.trim())))
                .collect();
            if ops.is_empty() { "(no distinctive opcode)".to_string() } else { dedup(ops).join(" ") }
        });
        let problems: Vec<String> =
            ptxcheck::check_ptx(c, &entries).into_iter().chain(ptxcheck::check_sass(c, &funcs)).collect();
        let ok = problems.is_empty();
        ok_all &= ok;
        if !ok {
            bad.push(format!("{}: {}", c.wrapper, problems.join("; ")));
        }
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | {} |",
            c.wrapper,
            c.ptx.first().copied().unwrap_or("").trim_end(),
            sass.unwrap_or_else(|| "(missing)".into()),
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    let verdict = format!(
        "{n} PTX wrappers, all assembled with ptxas; {} matched their instruction and SASS{}",
        n - bad.len(),
        if bad.is_empty() { " (all)".to_string() } else { format!(", {} MISMATCHED:", bad.len()) }
    );
    println!("{arch}: {verdict}");
    rep.ptx_summary.push(format!("PTX wrappers ({arch}): {verdict}"));
    for b in &bad {
        println!("  {b}");
        rep.ptx_summary.push(format!("mismatch ({arch}): {b}"));
    }
    ok_all
}

/// The CPU report made when the GPU bundle was built (`.gpu/cpu-report/report.md`, beside the
/// bundle's `bin/`), if this program runs from a bundle.
fn bundle_ptx_report() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let file = exe.parent()?.parent()?.join("cpu-report").join("report.md");
    file.is_file().then_some(file)
}

/// Without ptxas on this machine, the verdict of the same PTX from the bundle's CPU report
/// (copied beside this report as `ptx-report.md`). Returns whether every wrapper matched there.
fn bundle_table(arch: &str, why: &str, rep: &mut Report) -> bool {
    let Some(file) = bundle_ptx_report() else { return false };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::create_dir_all(&rep.dir).and_then(|_| std::fs::write(rep.dir.join("ptx-report.md"), &text));
    let head = format!("- PTX wrappers ({arch}): ");
    let Some(verdict) = text.lines().find_map(|l| l.strip_prefix(&head)) else {
        println!("{arch}: ptxas is not on this machine ({why}) and the bundle's report has no verdict");
        rep.ptx_summary.push(format!("PTX wrappers ({arch}): not checked (no ptxas here, no verdict in the bundle)"));
        return false;
    };
    let mismatches: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix(&format!("- mismatch ({arch}): "))).collect();
    let line = format!("{verdict} (checked when the GPU bundle was built: ptxas is not on this machine)");
    println!("{arch}: {line}");
    for m in &mismatches {
        println!("  {m}");
    }
    rep.ptx_summary.push(format!("PTX wrappers ({arch}): {line}; tables in [ptx-report.md](ptx-report.md)"));
    let _ = writeln!(
        rep.ptx,
        "\n## PTX wrappers ({arch})\n\nptxas is not on this machine; the same PTX was checked when the GPU bundle \
         was built: [ptx-report.md](ptx-report.md)."
    );
    mismatches.is_empty() && verdict.ends_with("(all)")
}

fn dedup(v: Vec<&str>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// A bulk round trip of 200,000 random bytes through shared memory.
fn smoke(g: &Arc<Gpu>) -> Result<String, String> {
    let n = 200_000usize;
    let data = testing::random_bytes(n);
    let e = |e: mscclpp_host::Error| e.to_string();
    let src = DeviceBuffer::from_slice(g, &data).map_err(e)?;
    let dst = DeviceBuffer::filled(g, n, testing::POISON).map_err(e)?;
    let args = Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(n as u32);
    // SAFETY: parameters match `bulk_roundtrip`; the buffers outlive the synchronize.
    unsafe { g.launch(PTX, "bulk_roundtrip", LaunchConfig::new(1, 32).shared(128 + n as u32), args) }.map_err(e)?;
    g.synchronize().map_err(e)?;
    if dst.to_vec::<u8>().map_err(e)? == data {
        Ok(format!("bulk round trip of {n} random bytes: ok"))
    } else {
        Err(format!("bulk round trip of {n} random bytes: FAILED, wrong data"))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    fn finished(code: i32, output: &str) -> suite::Finished {
        suite::Finished {
            status: Some(ExitStatus::from_raw(code << 8)),
            output: output.to_string(),
            elapsed: Duration::from_secs(1),
        }
    }

    fn step(exe: &str) -> Step {
        steps(2).into_iter().find(|s| s.exe == exe).unwrap()
    }

    #[test]
    fn every_executable_is_a_step() {
        let mut names: Vec<&str> = Vec::new();
        for s in steps(2) {
            if !names.contains(&s.exe) {
                names.push(s.exe);
            }
        }
        assert_eq!(names, suite::EXECUTABLES);
        // Every multi-rank executable runs as processes and as 8 threads, with logs apart.
        for exe in ["mp_patterns", "mp_collectives", "mp_ep", "mp_exec"] {
            let forms: Vec<(String, String)> =
                steps(1).iter().filter(|s| s.exe == exe).map(|s| (step_source(s), log_stem(s))).collect();
            assert_eq!(
                forms,
                [
                    (format!("{exe} --ranks 2"), exe.to_string()),
                    (format!("{exe} --threads 8"), format!("{exe}-threads8"))
                ]
            );
        }
        assert_eq!(step("mp_patterns").args, ["--ranks", "2"]);
        assert_eq!(steps(8).iter().find(|s| s.exe == "coll_bench").unwrap().args, ["--ranks", "8"]);
        assert_eq!(step("unit_bulk").args, ["--test-threads=1"]);
        assert_eq!(step("bench_sync").args[0], "--bench");
    }

    #[test]
    fn step_outputs_become_checks() {
        let d = Duration::from_secs(600);
        // A test executable: its tests; a failing run that names no failed test adds one.
        let out = "test bulk_a ... ok\ntest result: ok. 1 passed\n";
        let c = checks_of(&step("unit_bulk"), "unit_bulk", &finished(0, out), "", d);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].outcome, Outcome::Passed);
        let c = checks_of(&step("unit_bulk"), "unit_bulk", &finished(101, out), "", d);
        assert_eq!(report::tally(&c), (1, 1, 0), "{c:?}");
        // Success with nothing reported is a failure.
        let c = checks_of(&step("mp_collectives"), "mp_collectives --ranks 2", &finished(0, "RESULT ok\n"), "", d);
        assert!(matches!(&c[0].outcome, Outcome::Failed(why) if why.contains("no checks")), "{c:?}");
        // A bench: its run is the check of what it timed.
        let c = checks_of(&step("bench_bulk"), "bench_bulk", &finished(0, "== bulk\n"), "", d);
        assert_eq!((c[0].family, c[0].outcome.clone()), (family::BULK, Outcome::Passed));
        let panic = "thread 'main' panicked at benches/bulk.rs:80:5:\nlocal bulk copy of 64KiB: copied bytes: 3 of 65536 elements differ\n";
        let c = checks_of(&step("bench_bulk"), "bench_bulk", &finished(101, panic), "", d);
        assert!(
            matches!(&c[0].outcome, Outcome::Failed(why) if why.starts_with("local bulk copy of 64KiB: copied bytes")),
            "{c:?}"
        );
        let nccl = "[rank 0] coll-bench: rank 0: RESULT FAILED: unsupported: NCCL not found (set MSCCLPP_RS_NCCL)\n";
        let c = checks_of(&step("coll_bench"), "coll_bench --ranks 2", &finished(1, nccl), "", d);
        assert!(matches!(&c[0].outcome, Outcome::Skipped(why) if why.contains("MSCCLPP_RS_NCCL")), "{c:?}");
        // Killed at the deadline.
        let killed = suite::Finished { status: None, output: String::new(), elapsed: d };
        let c = checks_of(&step("mp_patterns"), "mp_patterns --ranks 2", &killed, "", d);
        assert!(matches!(&c[0].outcome, Outcome::Failed(why) if why.contains("600s deadline")), "{c:?}");
    }

    #[test]
    fn a_gpu_report_renders_every_section() {
        let dir = std::env::temp_dir().join(format!("mscclpp-render-test-{}", std::process::id()));
        let mut rep = Report { dir: dir.clone(), ..Report::default() };
        rep.ptx_summary.push("PTX wrappers (sm_90): 3 PTX wrappers".into());
        rep.gpu = "| GPU | name |\n".into();
        rep.checks = report::parse_libtest("unit_bulk", "test bulk_a ... ok\n", "", family::BULK);
        rep.criterion = Some(("../criterion/report/index.html".into(), dir.join("x")));
        let rows = concat!(
            r#"{"suite":"bulk","family":"bulk copies","name":"peer/cuMemcpyPeer/1GiB","series":"peer/cuMemcpyPeer","size_bytes":1073741824,"metric":"GB/s","value":397.0}"#,
            "\n",
            r#"{"suite":"bulk","family":"bulk copies","name":"peer/bulk_pipeline/1GiB","series":"peer/bulk pipeline","size_bytes":1073741824,"metric":"GB/s","value":372.0,"baseline":"peer/cuMemcpyPeer/1GiB","baseline_value":397.0,"ratio":0.937,"target":0.95}"#,
            "\n"
        );
        rep.take_results(rows, "a test");
        assert_eq!(rep.coll_source, RECORDED_SOURCE, "no collectives rows: the recorded ones");
        rep.summary = summary_lines(&rep, 2);
        let md = rep.render();
        for want in [
            "## Summary",
            "- PTX wrappers (sm_90)",
            "correctness: 1 checks, 1 passed",
            "benchmarks: 2 rows against baselines of the same run; 1 with a target, 0 met, 1 missed",
            "## Correctness on this machine's GPUs",
            "| bulk copies | 1 | 0 | 0 |",
            "## Benchmarks against their baselines",
            "[../criterion/report/index.html](../criterion/report/index.html)",
            "![bench-peer-bandwidth.svg](bench-peer-bandwidth.svg)",
            "| `peer/bulk_pipeline/1GiB` | 1 GiB | 372.0 GB/s |",
            "## Collectives against NCCL",
            "![allreduce-f32-busbw.svg](allreduce-f32-busbw.svg)",
        ] {
            assert!(md.contains(want), "missing {want:?} in:\n{md}");
        }
        assert!(dir.join("bench-peer-bandwidth.svg").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
