//! The `main` of a multi-rank program over the collectives (the tests and the benchmark): runs
//! under `mpirun`, Slurm or the built-in launcher (`--ranks N`; started by hand it launches
//! `default_ranks` copies of itself), or as N ranks that are threads of this one process
//! (`--threads N`, or `MSCCLPP_RS_THREADS=N`: on a machine with one GPU they all share it, their
//! kernels running at the same time); opens this rank's GPU (a handle and stream of its own) and a
//! [`Communicator`], and prints `RESULT ok` or `RESULT FAILED` per rank.
//!
//! Without a GPU (no driver, or a driver that reports none) every rank prints why it skipped and
//! the run succeeds, unless `MSCCLPP_RS_REQUIRE_GPU=1`; a driver that fails fails the run.

use std::process::ExitCode;
use std::sync::Arc;

use mscclpp_host::bootstrap::launcher::{self, Role};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Bootstrap, BootstrapExt, Gpu, Result, TcpBootstrap};

/// Runs `body` on every rank with its communicator; see the module documentation.
pub fn main<F>(name: &str, default_ranks: usize, body: F) -> ExitCode
where
    F: Fn(&Communicator) -> Result<()> + Send + Sync + 'static,
{
    match launcher::role(default_ranks) {
        Ok(Role::Rank(cfg)) => {
            let r = cfg.rank.rank;
            let outcome = TcpBootstrap::connect(&cfg).and_then(|boot| run_rank(name, Arc::new(boot), &body));
            if report(name, r, &outcome) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Ok(Role::Threads { ranks, deadline }) => {
            // The ranks share their GPU's context, where a free waits for every kernel: frees wait
            // until the ranks are done (mscclpp_host::memory::defer_frees).
            mscclpp_host::memory::defer_frees(true);
            let (label, body) = (name.to_string(), Arc::new(body));
            let outcome = launcher::run_threads(ranks, deadline, move |boot| {
                let r = boot.rank();
                let outcome = run_rank(&label, boot, &*body);
                report(&label, r, &outcome);
                outcome.map(drop)
            });
            match outcome {
                Ok(()) => {
                    println!("{name}: RESULT ok (all {ranks} ranks, as threads of one process)");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("{name}: RESULT FAILED: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Ok(Role::Launched { ranks, outcome: Ok(()) }) => {
            println!("{name}: RESULT ok (all {ranks} ranks)");
            ExitCode::SUCCESS
        }
        Ok(Role::Launched { outcome: Err(e), .. }) | Err(e) => {
            println!("{name}: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints rank `r`'s result line; whether it passed.
fn report(name: &str, r: usize, outcome: &Result<bool>) -> bool {
    match outcome {
        Ok(ran) => {
            println!("{name}: rank {r}: RESULT ok{}", if *ran { "" } else { " (skipped: no GPU)" });
            true
        }
        Err(e) => {
            println!("{name}: rank {r}: RESULT FAILED: {e}");
            false
        }
    }
}

/// One rank: its GPU, its communicator, `body`. `Ok(false)` when skipped for want of a GPU.
fn run_rank(name: &str, boot: Arc<dyn Bootstrap>, body: &dyn Fn(&Communicator) -> Result<()>) -> Result<bool> {
    let r = boot.rank();
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
    // A handle of its own (its stream, its abort word), also when ranks are threads of one process.
    let gpu = Gpu::open(boot.info().gpu_index(gpu_count).unwrap_or(0))?;
    let comm = Communicator::new(boot, gpu);
    let sharing = comm.ranks_sharing_gpu()?;
    if r == 0 && sharing > 1 {
        println!(
            "{name}: {sharing} ranks of this process share GPU {} ({} of its {} SMs each)",
            comm.gpu().ordinal(),
            comm.sm_share()?,
            comm.gpu().info().sm_count
        );
    }
    body(&comm)?;
    Ok(true)
}
