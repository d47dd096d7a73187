//! `mscclpp-rs`: the project's report.
//!
//! Builds nothing itself (the build script compiled the device programs). It assembles the PTX
//! with ptxas and checks every PTX wrapper's instruction and SASS (a summary on the terminal, the
//! full table in `target/report/report.md`), renders the collectives' results against NCCL as a
//! table and SVG plots (from `MSCCLPP_RS_BENCH_OUT` after a `coll-bench` run, else the results
//! recorded in `docs/results/`), then runs the device smoke checks on every GPU it finds, or says
//! what needs a GPU.

use std::fmt::Write as _;
use std::process::ExitCode;

use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::checks::{self, Check};
use mscclpp_rs::{PTX, ptxcheck, report, testing};

/// The results recorded on two H200s joined by NVLink (coll-bench, graph medians).
const RECORDED: &str = include_str!("../docs/results/collectives-2xH200.jsonl");

fn main() -> ExitCode {
    let mut failed = false;
    // Relative to where the report runs (the repository root for `./x report`).
    let dir =
        std::path::PathBuf::from(std::env::var_os("MSCCLPP_RS_REPORT_DIR").unwrap_or_else(|| "target/report".into()));
    let mut md = String::from("# mscclpp-rs report\n");
    println!("mscclpp-rs report\n");
    failed |= !report_table("sm_90", &mscclpp_rs::ptx_path(false), PTX, checks::sm90_checks(), &mut md);
    failed |= !report_table(
        "sm_100a",
        &mscclpp_rs::ptx_sm100a_path(),
        mscclpp_rs::PTX_SM100A,
        checks::sm100a_checks(),
        &mut md,
    );
    collectives_section(&dir, &mut md);

    let inv = mscclpp_host::gpu::inventory();
    if inv.devices.is_empty() {
        let why = inv.reason.unwrap_or_else(|| "no CUDA driver found".into());
        println!(
            "\nNeeds a GPU (skipped here: {why}): the unit kernels (./x test), the multi-rank tests and \
             coll-bench against NCCL (see the README's \"Running on GPUs\")."
        );
        let _ = writeln!(md, "\n## GPU\n\nNot run: {why}.");
        write_report(&dir, &md);
        return if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS };
    }
    println!("\nGPUs:");
    for d in &inv.devices {
        println!(
            "  {}: {} (sm_{}{}), {} SMs, {} KiB shared/block, {:.1} GiB",
            d.ordinal,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.max_shared_optin / 1024,
            d.total_mem as f64 / (1u64 << 30) as f64
        );
    }
    match testing::all_gpus() {
        Ok(gpus) => {
            for g in &gpus {
                match smoke(g) {
                    Ok(msg) => println!("  GPU {}: {msg}", g.ordinal()),
                    Err(e) => {
                        failed = true;
                        println!("  GPU {}: FAILED: {e}", g.ordinal());
                    }
                }
            }
        }
        Err(e) => {
            failed = true;
            println!("opening GPUs failed: {e}");
        }
    }
    write_report(&dir, &md);
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn write_report(dir: &std::path::Path, md: &str) {
    let path = dir.join("report.md");
    match std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, md)) {
        Ok(()) => println!("\nFull report: {}", path.display()),
        Err(e) => println!("\nwriting {} failed: {e}", path.display()),
    }
}

/// The collectives against NCCL: the rows of the last `coll-bench` run (`MSCCLPP_RS_BENCH_OUT`)
/// when there is one, else the recorded ones; a short summary here, the tables and plots in the
/// report.
fn collectives_section(dir: &std::path::Path, md: &mut String) {
    let fresh = std::env::var_os("MSCCLPP_RS_BENCH_OUT")
        .and_then(|p| std::fs::read_to_string(&p).ok().map(|t| (report::read_rows(&t), p)))
        .filter(|(rows, _)| !rows.is_empty());
    let (rows, source) = match fresh {
        Some((rows, p)) => (rows, format!("this machine's coll-bench run ({})", p.to_string_lossy())),
        None => (
            report::read_rows(RECORDED),
            "recorded on two H200s joined by NVLink (docs/results/collectives-2xH200.jsonl)".to_string(),
        ),
    };
    let _ = writeln!(
        md,
        "\n## Collectives against NCCL\n\nSource: {source}. Median time per operation in a CUDA graph; busbw as nccl-tests.\n"
    );
    match report::plots(&rows, dir) {
        Ok(files) => {
            for f in &files {
                let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let _ = writeln!(md, "![{name}]({name})");
            }
        }
        Err(e) => println!("plots: {e}"),
    }
    md.push_str(&report::markdown(&rows));
    println!("Collectives against NCCL ({source}):");
    for r in rows.iter().filter(|r| r.dtype == "f32" && [1 << 10, 1 << 20, 1 << 30].contains(&r.bytes)) {
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

/// Checks every wrapper of one module; prints a summary (and any mismatch) and writes the full
/// table (instruction, SASS opcodes) into `md`. Returns whether every check passed.
fn report_table<'a>(
    arch: &str,
    path: &std::path::Path,
    ptx: &str,
    checks: impl Iterator<Item = &'a Check>,
    md: &mut String,
) -> bool {
    let asm = match nvptx_builder::assemble(path, arch) {
        Ok(asm) => asm,
        Err(e) => {
            println!("{arch}: ptxas/cuobjdump unavailable, SASS checks not run ({e}); `./x setup` installs them\n");
            let _ = writeln!(md, "\n## {arch}\n\nptxas/cuobjdump unavailable: {e}");
            return !std::env::var("MSCCLPP_RS_REQUIRE_PTXAS").is_ok_and(|v| v == "1");
        }
    };
    let mut ok_all = true;
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let entries = ptxcheck::entries(ptx);
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
    println!(
        "{arch}: {n} PTX wrappers, all assembled with ptxas; {} matched their instruction and SASS{}",
        n - bad.len(),
        if bad.is_empty() { " (all)".to_string() } else { format!(", {} MISMATCHED:", bad.len()) }
    );
    for b in &bad {
        println!("  {b}");
    }
    ok_all
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
fn smoke(g: &std::sync::Arc<Gpu>) -> Result<String, String> {
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
        Err("bulk round trip returned wrong data".into())
    }
}
