//! Port channels between ranks: an all-to-all with `put_with_signal`, `wait` and `flush` from a
//! kernel, over whatever transport each pair of ranks has (CUDA IPC on one machine, TCP between
//! machines, TCP everywhere with `MSCCLPP_RS_TRANSPORT=tcp`). The kernel code is the same for all.
//!
//! ```text
//! port_channel [--ranks N]                  the built-in launcher (default 2 ranks)
//! mpirun -np N port_channel                 one rank per process
//! MSCCLPP_RS_TRANSPORT=tcp port_channel     the network path, on one machine
//! ```
//!
//! Every rank fills a fresh chunk for every peer in every iteration (words computed from the
//! iteration, the sender and the receiver), puts it into its slot of the peer's receive buffer
//! (double-buffered by iteration parity) with a signal, waits for every peer's signal, checks
//! what arrived on the device, and flushes before it rewrites its source. The host then checks
//! both halves of the receive buffer word for word (a rank's own slots stay poisoned). Rank r
//! uses GPU `local_rank % count`; ranks may share GPUs.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use mscclpp_host::bootstrap::launcher::{Role, role};
use mscclpp_host::bootstrap::{Bootstrap, BootstrapConfig, BootstrapExt, TcpBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, Error, Gpu, LaunchConfig, Result};

/// Words per chunk (1 MiB): larger than the TCP transport's staging slots, so puts are cut.
const CHUNK_WORDS: u32 = 256 * 1024;
const ITERS: u32 = 8;
const POISON: u8 = 0xA5;

/// The word `i` of the chunk rank `from` sends rank `to` in iteration `k` (as the kernel
/// `mp_port_alltoall` computes it).
fn a2a_word(k: u32, from: u32, to: u32, i: u32) -> u32 {
    let mut x = k.wrapping_mul(0x9e37_79b9) ^ from.wrapping_mul(0x85eb_ca6b) ^ to.wrapping_mul(0xc2b2_ae35) ^ i;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x
}

fn main() -> ExitCode {
    match role(2) {
        Ok(Role::Rank(cfg)) => match rank_main(&cfg) {
            Ok(line) => {
                println!("rank {}: {line}", cfg.rank.rank);
                println!("rank {}: RESULT ok", cfg.rank.rank);
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("rank {}: FAILED: {e}", cfg.rank.rank);
                println!("rank {}: RESULT FAILED", cfg.rank.rank);
                ExitCode::FAILURE
            }
        },
        Ok(Role::Launched { outcome: Ok(()), ranks }) => {
            println!("port_channel: RESULT ok (all {ranks} ranks)");
            ExitCode::SUCCESS
        }
        Ok(Role::Threads { .. }) => {
            println!("port_channel: RESULT FAILED: this example runs its ranks as processes (drop --threads)");
            ExitCode::FAILURE
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("port_channel: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rank_main(cfg: &BootstrapConfig) -> Result<String> {
    let boot: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::connect(cfg)?);
    let (me, n) = (boot.rank(), boot.world_size());
    let inventory = mscclpp_host::gpu::inventory();
    let counts = boot.all_gather_pod(&(inventory.devices.len() as u64))?;
    if let Some(r) = counts.iter().position(|&c| c == 0) {
        return Ok(format!("SKIPPED: rank {r} has no GPU ({})", inventory.reason.unwrap_or_default()));
    }
    if n < 2 {
        return Err(Error::InvalidArgument("the example needs at least 2 ranks".into()));
    }
    let gpu = Gpu::open(cfg.rank.gpu_index(inventory.devices.len()).unwrap_or_default())?;
    let comm = Communicator::new(boot.clone(), gpu.clone());
    let words = n * CHUNK_WORDS as usize;
    let src = DeviceBuffer::filled(&gpu, words * 4, 0)?;
    let recv = DeviceBuffer::exportable_filled(&gpu, 2 * words * 4, POISON)?;
    let ports = comm.port_channels(&src, &recv)?;
    if me == 0 {
        let kinds: Vec<String> =
            (1..n).map(|p| format!("rank {p}: {}", ports.transport(p).map_or("-", |k| k.name()))).collect();
        println!("rank 0: port channels toward {}", kinds.join(", "));
    }
    let table = DeviceBuffer::from_slice(&gpu, &ports.table())?;
    let errors = DeviceBuffer::filled(&gpu, 4, 0)?;
    boot.barrier()?;
    let start = Instant::now();
    let args = Args::new()
        .arg(table.addr())
        .arg(n as u32)
        .arg(me as u32)
        .arg(CHUNK_WORDS)
        .arg(ITERS)
        .arg(src.addr())
        .arg(recv.addr())
        .arg(errors.addr());
    // SAFETY: `mp_port_alltoall` takes (channel table, world, rank, chunk words, iterations,
    // source, receive buffer, error count) in this order; every buffer outlives the synchronize.
    unsafe { gpu.launch(mscclpp_rs::PTX, "mp_port_alltoall", LaunchConfig::new(1, 256), args)? };
    gpu.synchronize_timeout(std::time::Duration::from_secs(120))?;
    let secs = start.elapsed().as_secs_f64();
    ports.proxy().check()?;
    let bad_on_device = errors.to_vec::<u32>()?[0];
    // Both halves: the last two iterations, one per parity.
    let got = recv.to_vec::<u32>()?;
    let poison = u32::from_le_bytes([POISON; 4]);
    let mut bad = 0usize;
    for k in ITERS.saturating_sub(2)..ITERS {
        let half = (k % 2) as usize * words;
        for from in 0..n as u32 {
            let slot = &got[half + from as usize * CHUNK_WORDS as usize..][..CHUNK_WORDS as usize];
            for (i, &w) in slot.iter().enumerate() {
                let want = if from as usize == me { poison } else { a2a_word(k, from, me as u32, i as u32) };
                bad += usize::from(w != want);
            }
        }
    }
    // Every rank's kernel is done before any proxy stops (each waits for its peers' signals,
    // and the proxies serve each other's flushes until then).
    boot.barrier()?;
    ports.stop()?;
    if bad_on_device != 0 || bad != 0 {
        return Err(Error::Protocol(format!("{bad_on_device} words wrong on the device, {bad} in the final check")));
    }
    let moved = (n - 1) as f64 * CHUNK_WORDS as f64 * 4.0 * ITERS as f64;
    Ok(format!(
        "ok: {ITERS} all-to-all iterations of {} KiB per peer in {:.1} ms ({:.2} GB/s sent by this rank)",
        CHUNK_WORDS * 4 / 1024,
        secs * 1e3,
        moved / secs / 1e9
    ))
}
