//! The `main` of a multi-rank program over the collectives (the tests and the benchmark): runs
//! under `mpirun`, Slurm or the built-in launcher (`--ranks N`; started by hand it launches
//! `default_ranks` copies of itself), opens this rank's GPU and a [`Communicator`], and prints
//! `RESULT ok` or `RESULT FAILED` per rank.
//!
//! Without a GPU (no driver, or a driver that reports none) every rank prints why it skipped and
//! the run succeeds, unless `MSCCLPP_RS_REQUIRE_GPU=1`; a driver that fails fails the run.

use std::process::ExitCode;
use std::sync::Arc;

use mscclpp_host::bootstrap::launcher::{self, Role};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{BootstrapExt, Gpu, Result, TcpBootstrap};

/// Runs `body` on every rank with its communicator; see the module documentation.
pub fn main(name: &str, default_ranks: usize, body: impl FnOnce(&Communicator) -> Result<()>) -> ExitCode {
    let cfg = match launcher::role(default_ranks) {
        Ok(Role::Rank(cfg)) => cfg,
        Ok(Role::Launched { ranks, outcome: Ok(()) }) => {
            println!("{name}: RESULT ok (all {ranks} ranks)");
            return ExitCode::SUCCESS;
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("{name}: RESULT FAILED: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = cfg.rank.rank;
    let run = || -> Result<bool> {
        let boot = Arc::new(TcpBootstrap::connect(&cfg)?);
        // No GPU here is a reason to skip; a driver that fails is an error (the other ranks then
        // fail at the gather below, their connection to this rank lost).
        let (gpu_count, no_gpu) = match mscclpp_host::gpu::devices() {
            Ok(d) => (d.len(), None),
            Err(e) if e.is_no_gpu() => (0, Some(e.to_string())),
            Err(e) => return Err(e),
        };
        let counts = boot.all_gather_pod(&(gpu_count as u64))?;
        if counts.contains(&0) {
            let why = no_gpu.unwrap_or_else(|| "another rank has no GPU".into());
            if std::env::var("MSCCLPP_RS_REQUIRE_GPU").as_deref() == Ok("1") {
                return Err(mscclpp_host::Error::NoDriver(why));
            }
            println!("{name}: rank {r}: GPU-SKIP: {why}");
            return Ok(false);
        }
        let gpu = Gpu::open(cfg.rank.gpu_index(gpu_count).unwrap_or(0))?;
        let comm = Communicator::new(boot, gpu);
        body(&comm)?;
        Ok(true)
    };
    match run() {
        Ok(ran) => {
            println!("{name}: rank {r}: RESULT ok{}", if ran { "" } else { " (skipped: no GPU)" });
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{name}: rank {r}: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
