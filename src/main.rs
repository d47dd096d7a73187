//! `mscclpp-rs`: the project's report.
//!
//! Builds nothing itself (the build script compiled the device programs); it assembles the PTX
//! with ptxas, prints for every PTX wrapper the instruction it emits and the SASS opcodes ptxas
//! made of it, then runs the device smoke checks on every GPU it finds, or says why it cannot.

use std::process::ExitCode;

use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::checks::{self, Check};
use mscclpp_rs::{PTX, ptxcheck, testing};

fn main() -> ExitCode {
    let mut failed = false;
    println!("mscclpp-rs report\n");
    failed |= !report_table("sm_90", &mscclpp_rs::ptx_path(false), PTX, checks::sm90_checks());
    failed |= !report_table("sm_100a", &mscclpp_rs::ptx_sm100a_path(), mscclpp_rs::PTX_SM100A, checks::sm100a_checks());

    let inv = mscclpp_host::gpu::inventory();
    if inv.devices.is_empty() {
        println!("\nGPU execution skipped: {}", inv.reason.unwrap_or_else(|| "no CUDA driver found".into()));
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
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// Prints, for every check of one module, the instruction and the SASS opcodes ptxas made of it.
/// Returns whether every check passed (true also when ptxas is unavailable: nothing was checked).
fn report_table<'a>(arch: &str, path: &std::path::Path, ptx: &str, checks: impl Iterator<Item = &'a Check>) -> bool {
    let asm = match nvptx_builder::assemble(path, arch) {
        Ok(asm) => asm,
        Err(e) => {
            println!("ptxas/cuobjdump unavailable, {arch} SASS table skipped: {e}\n");
            return true;
        }
    };
    let mut ok_all = true;
    let funcs = ptxcheck::sass_functions(&asm.sass);
    let entries = ptxcheck::entries(ptx);
    println!("{:<54} {:<70} SASS ({arch})", "primitive", "PTX instruction");
    let mut n = 0;
    for c in checks {
        n += 1;
        let sass = funcs.get(&c.kernel()).map(|t| {
            let ops: Vec<&str> = ptxcheck::opcodes(t)
                .into_iter()
                .filter(|op| c.sass.iter().any(|want| want.trim().starts_with(op) || op.starts_with(want.trim())))
                .collect();
            if ops.is_empty() { "(no distinctive opcode)".to_string() } else { dedup(ops).join(" ") }
        });
        let ok = ptxcheck::check_ptx(c, &entries).is_empty() && ptxcheck::check_sass(c, &funcs).is_empty();
        ok_all &= ok;
        println!(
            "{:<54} {:<70} {}{}",
            c.wrapper,
            c.ptx.first().copied().unwrap_or("").trim_end(),
            sass.unwrap_or_else(|| "(missing)".into()),
            if ok { "" } else { "   <-- MISMATCH" }
        );
    }
    println!("\n{n} PTX wrappers checked for {arch}, {} kernels in the module\n", entries.len());
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
