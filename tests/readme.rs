//! The READMEs' Rust code, compiled, and run as far as a machine without a GPU allows.
//!
//! Every Rust block of `README.md` and of the crates' READMEs (`host/`, `device/`,
//! `nvptx-builder/`, `collectives/`) appears, line for line (up to indentation), in a file the build
//! compiles: the quickstart (`./x quickstart`), the allreduce example's kernels, the window kernels
//! of the GPU tests (`ptx-tests/src/window.rs`), or this file,
//! where the host-side fragments sit in functions whose parameters are what the README's text
//! around them provides. xtask's test `readme_rust_blocks_are_compiled` checks that; change a
//! block and its copy here together.
//!
//! Run (no GPU): the host README's program and the README's multi-rank lines must fail with the
//! no-GPU error ([`mscclpp_host::Error::is_no_gpu`]), never panic. The multi-rank lines run in a
//! child process that is rank 0 of a world of one (the built-in launcher's variables). With a
//! GPU this test has nothing to add (the examples and the GPU tests run the same calls) and says so.

use std::process::{Command, ExitCode};

use mscclpp_host::DeviceBuffer;
use mscclpp_host::comm::Communicator;

/// The READMEs' `KERNELS_PTX` is set by a build script that builds the reader's kernels; here it
/// names a stand-in PTX file (never launched: the code runs only without a GPU). This shadows
/// `std::env!` in the rest of this file.
macro_rules! env {
    ("KERNELS_PTX") => {
        "../host/src/transport/engine/atomic_add.ptx"
    };
}

/// Set in the child process that runs the multi-rank fragments as a rank.
const CHILD: &str = "MSCCLPP_RS_README_CHILD";

/// README, "Collectives": `comm` is the rank's communicator.
#[allow(dead_code)]
fn collectives(comm: Communicator) -> mscclpp_host::Result<()> {
    use mscclpp_collectives::{Collectives, DataType, ReduceOp};
    use mscclpp_host::DeviceBuffer;

    let coll = Collectives::new(&comm)?; // every rank, at the same point
    let gpu = comm.gpu();
    let count = 1 << 20;
    let values: Vec<f32> = (0..count).map(|i| i as f32).collect();
    let send = DeviceBuffer::from_slice(gpu, &values)?;
    let recv = DeviceBuffer::alloc(gpu, 4 * count)?;
    let all = DeviceBuffer::alloc(gpu, 4 * count * comm.world_size())?;
    coll.allreduce(&send, &recv, count, DataType::F32, ReduceOp::Sum, gpu.stream())?;
    coll.allgather(&send, &all, count, DataType::F32, gpu.stream())?; // rank q's `send` at q * count
    coll.allreduce(&recv, &recv, count, DataType::F32, ReduceOp::Sum, gpu.stream())?; // in place
    gpu.synchronize()?;
    Ok(())
}

/// README, "Expert parallelism": the batch (`x`, `idx`, `w`, `tokens`) and the experts' output
/// `y` come from the surrounding model; `out` receives the combined rows.
#[allow(dead_code)]
fn expert_parallelism(
    comm: Communicator,
    (x, idx, w): (DeviceBuffer, DeviceBuffer, DeviceBuffer),
    tokens: usize,
    y: DeviceBuffer,
    out: DeviceBuffer,
) -> mscclpp_host::Result<()> {
    use mscclpp_ep::{Config, DataType, DispatchInput, ExpertParallel};

    let mut ep = ExpertParallel::new(&comm, Config::new(4096, 7168, 256, 8))?;
    let stream = comm.gpu().stream();
    // x: tokens x 7168 bf16; idx: tokens x 8 i32 expert ids (-1: none); w: tokens x 8 f32 weights
    let input = DispatchInput { x: &x, dtype: DataType::Bf16, topk_idx: &idx, topk_weights: &w, tokens, k: 8 };
    let d = ep.dispatch(&input, stream)?;
    // d.recv_x_addr(): this rank's received rows, grouped by source rank (their count is on the GPU,
    // at d.info_addr(); ep.recv_counts(&d, stream) reads it after a synchronisation).
    // Your experts write one output row per received row into `y` (e.g. the weighted sum over
    // this rank's experts of the token): the ids at d.recv_topk_idx_addr() are local (0 to
    // experts_per_rank - 1, -1 for another rank's expert), the weights at
    // d.recv_topk_weights_addr() are 0 in the -1 slots.
    ep.combine(&d, &y, &out, DataType::Bf16, stream)?; // out[t] = sum of the ranks' rows for t
    Ok(())
}

/// README, "Expert parallelism", several dispatches in flight, bias and cached dispatch: the two
/// batches, the experts' outputs, the outputs, the bias and the gradients come from the model.
#[allow(dead_code, clippy::too_many_arguments)]
fn expert_parallelism_in_flight(
    comm: Communicator,
    (batch_a, batch_b): (mscclpp_ep::DispatchInput, mscclpp_ep::DispatchInput),
    (y_a, y_b): (DeviceBuffer, DeviceBuffer),
    (out_a, out_b): (DeviceBuffer, DeviceBuffer),
    bias: DeviceBuffer,
    grad: DeviceBuffer,
) -> mscclpp_host::Result<mscclpp_ep::Dispatched> {
    use mscclpp_ep::{CombineOptions, Config, DataType, ExpertParallel};

    // Two batches in flight (two-batch overlap): two receive slots.
    let mut ep = ExpertParallel::new(&comm, Config { slots: 2, ..Config::new(4096, 7168, 256, 8) })?;
    let stream = comm.gpu().stream();
    let da = ep.dispatch(&batch_a, stream)?;
    let db = ep.dispatch(&batch_b, stream)?; // da stays valid: the 2 most recent dispatches do
    ep.combine(&db, &y_b, &out_b, DataType::Bf16, stream)?; // in any order
    // out_a[t] = bias[t] + the sum of the ranks' rows for t
    let with_bias = CombineOptions { bias: [Some(&bias), None], ..Default::default() };
    ep.combine_with(&da, (&y_a, &out_a), DataType::Bf16, &with_bias, stream)?;
    // Backward: the gradients along da's routing (no layout kernel; da must still be valid).
    let dg = ep.dispatch_cached(&da, &grad, DataType::Bf16, stream)?;
    Ok(dg)
}

/// README, "Expert parallelism", the decode mode: the batch (`x`, `idx`, `w`, `tokens`) and the
/// experts' output `y` come from the surrounding model; `out` receives the combined rows.
#[allow(dead_code)]
fn expert_parallelism_decode(
    comm: Communicator,
    (x, idx, w): (DeviceBuffer, DeviceBuffer, DeviceBuffer),
    tokens: usize,
    y: DeviceBuffer,
    out: DeviceBuffer,
) -> mscclpp_host::Result<()> {
    use mscclpp_ep::{Config, DataType, DecodeCombineInput, DecodeInput, LowLatency, RecvFormat};

    let mut ll = LowLatency::new(&comm, Config::new(128, 7168, 256, 8))?; // 128 tokens per rank at most
    let stream = comm.gpu().stream();
    let input = DecodeInput { x: &x, dtype: DataType::Bf16, topk_idx: &idx, tokens, k: 8 };
    let d = ll.dispatch(&input, RecvFormat::E4m3, stream)?; // FP8 rows, a scale per 128 columns
    // d.recv_x_addr(): [experts_per_rank][ranks * 128] rows, local expert j's first d.recv_count_addr()[j]
    // of them by source rank then token order; your experts write bf16 outputs `y` in that layout.
    let back = DecodeCombineInput { y: &y, topk_idx: &idx, topk_weights: &w, out: &out };
    ll.combine(&d, &back, stream)?; // out[t] = sum over t's slots j of w[t][j] * y[row of (t, j)]
    Ok(())
}

/// README, "Running on several GPUs": a rank's communicator and its channels.
#[allow(unused_variables)]
fn communicator() -> mscclpp_host::Result<()> {
    use std::sync::Arc;

    use mscclpp_host::{Bootstrap, DeviceBuffer, Gpu, TcpBootstrap, comm::Communicator};

    let boot = Arc::new(TcpBootstrap::from_env()?);
    let gpus = mscclpp_host::gpu::devices()?.len(); // no GPU: Error::NoDriver, NoDevice or the driver's error
    let gpu = Gpu::open(boot.local_rank() % gpus)?; // the ranks of a machine spread over its GPUs
    let comm = Communicator::new(boot, gpu.clone());
    let recv = DeviceBuffer::alloc_exportable(&gpu, 1 << 20)?; // exportable: shared through CUDA IPC
    let src = DeviceBuffer::alloc(&gpu, 1 << 20)?; // what this rank's port-channel puts read from
    let peers = comm.exchange(&recv)?; // every rank's buffer, mapped here: peers.ptr::<u8>(r)
    let sems = comm.memory_semaphores()?; // sems.get(peer): Option<MemoryDevice2DeviceSemaphore>
    let chans = comm.memory_channels(&recv, 64 << 10)?; // chans.get(peer): Option<MemoryChannel> (+ packets)
    let ports = comm.port_channels(&src, &recv)?; // ports.get(peer): Option<PortChannel>, served by a proxy
    Ok(())
}

/// README, "Example: allreduce": the host side of a rank. The sizes and the kernel's scalar
/// arguments come from the example's loop; `PTX` is a stand-in (it is never launched here).
fn allreduce_rank(
    (bytes, packet_bytes): (usize, usize),
    (rank, n_ranks, n, flag): (u32, u32, u64, u32),
) -> mscclpp_host::Result<()> {
    const PTX: &str = include_str!(env!("KERNELS_PTX"));
    use std::sync::Arc;

    use mscclpp_device::channel::memory::MemoryChannel;
    use mscclpp_host::bootstrap::launcher::{Role, role};
    use mscclpp_host::{Args, Bootstrap, DeviceBuffer, Gpu, LaunchConfig, TcpBootstrap, comm::Communicator};

    // `--ranks N` makes the binary its own launcher; under mpirun or the launcher it is a rank;
    // started by hand it launches 2 ranks of itself.
    let cfg = match role(2)? {
        Role::Rank(cfg) => cfg,
        Role::Launched { outcome, .. } => return outcome, // every rank exited 0, or why not
        Role::Threads { .. } => return Err(mscclpp_host::Error::InvalidArgument("ranks as processes here".into())),
    };
    let boot = Arc::new(TcpBootstrap::connect(&cfg)?);
    let gpus = mscclpp_host::gpu::devices()?.len(); // no GPU: Error::NoDriver, NoDevice or the driver's error
    let gpu = Gpu::open(cfg.rank.local_rank % gpus)?;
    let comm = Communicator::new(boot.clone(), gpu.clone());

    let buf = DeviceBuffer::alloc_exportable(&gpu, bytes)?; // shared with the peers (CUDA IPC)
    let chans = comm.memory_channels(&buf, packet_bytes)?; // a channel toward every peer
    let table = DeviceBuffer::from_slice(&gpu, &chans.table())?; // indexed by rank, own entry unused
    let args = Args::new().arg(table.ptr::<MemoryChannel>()).arg(rank).arg(n_ranks).arg(n).arg(flag);
    // SAFETY: the arguments match the kernel's parameters, and `buf`, `chans` and `table` outlive
    // the launch (the synchronisation below).
    unsafe { gpu.launch(PTX, "allreduce_packets", LaunchConfig::new(16, 256), args)? };
    gpu.synchronize()?;
    boot.barrier()?; // between operations: nobody overwrites what a peer still reads
    Ok(())
}

/// nvptx-builder/README.md: the host crate's side of the build script below.
#[allow(dead_code)]
mod nvptx_builder_host {
    // in the host crate
    const PTX: &str = include_str!(env!("KERNELS_PTX"));
}

/// host/README.md: the whole program.
mod host_readme {
    use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
    const PTX: &str = include_str!(env!("KERNELS_PTX")); // built by nvptx-builder in build.rs

    fn main() -> mscclpp_host::Result<()> {
        let gpu = Gpu::open(0)?;
        let buf = DeviceBuffer::alloc(&gpu, 4096)?;
        let args = Args::new().arg(buf.ptr::<u8>()).arg(4096u32);
        // SAFETY: the arguments match the kernel's signature.
        unsafe { gpu.launch(PTX, "my_kernel", LaunchConfig::new(1, 128), args)? };
        gpu.synchronize()
    }

    pub(crate) fn run() -> mscclpp_host::Result<()> {
        main()
    }
}

/// nvptx-builder/README.md: the build script (compiled, not run: it needs a kernel crate).
#[allow(dead_code)]
mod nvptx_builder_readme {
    // build.rs of your host crate; your kernels are in ./kernels (crate-type = ["cdylib"])
    fn main() {
        let ptx = nvptx_builder::Builder::new("kernels")
            .target_cpu("sm_90") // default
            .ptx_isa(8, 6) // default
            .feature("my-feature") // kernel-crate features, optional
            .build()
            .unwrap_or_else(|e| panic!("{e}")); // the error carries cargo's stderr
        println!("cargo:rustc-env=KERNELS_PTX={}", ptx.path.display());

        // Optional: fail the build early if ptxas rejects the PTX (needs ptxas and cuobjdump).
        if nvptx_builder::find_tool("ptxas").is_some() && nvptx_builder::find_tool("cuobjdump").is_some() {
            let asm = nvptx_builder::assemble(&ptx.path, "sm_90").unwrap_or_else(|e| panic!("{e}"));
            let _sass: &str = &asm.sass; // cuobjdump -sass of the cubin
        }
    }
}

/// `what` must have failed with the no-GPU error.
fn expect_no_gpu(what: &str, r: mscclpp_host::Result<()>) -> Result<(), String> {
    match r {
        Err(e) if e.is_no_gpu() => {
            println!("{what}: fails cleanly without a GPU: {e}");
            Ok(())
        }
        Err(e) => Err(format!("{what}: expected the no-GPU error, got: {e}")),
        Ok(()) => Err(format!("{what}: succeeded on a machine without a GPU")),
    }
}

/// The child: rank 0 of a world of one, running the README's multi-rank fragments.
fn child() -> Result<(), String> {
    expect_no_gpu("README \"Running on several GPUs\" (Communicator)", communicator())?;
    expect_no_gpu("README \"Example: allreduce\" (host side)", allreduce_rank((1 << 20, 64 << 10), (0, 1, 1024, 1)))
}

fn parent() -> Result<(), String> {
    match mscclpp_host::gpu::devices() {
        Err(e) if e.is_no_gpu() => {}
        Ok(d) => {
            println!("readme: {} GPU(s) here; the examples and GPU tests run this code", d.len());
            return Ok(());
        }
        Err(e) => return Err(format!("the GPU driver fails: {e}")),
    }
    expect_no_gpu("host/README.md", host_readme::run())?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    // Only the built-in launcher's variables: rank 0 of 1 (no rendezvous, no address needed).
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if ["OMPI_", "PMI_", "PMIX_", "SLURM_", "MSCCLPP_RS_"].iter().any(|p| k.starts_with(p)) {
            cmd.env_remove(&k);
        }
    }
    cmd.env(CHILD, "1")
        .env("MSCCLPP_RS_RANK", "0")
        .env("MSCCLPP_RS_WORLD_SIZE", "1")
        .env("MSCCLPP_RS_LOCAL_RANK", "0")
        .env("MSCCLPP_RS_LOCAL_SIZE", "1");
    let out = cmd.output().map_err(|e| format!("starting the child rank: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!("the child rank failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn main() -> ExitCode {
    let r = if std::env::var_os(CHILD).is_some() { child() } else { parent() };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("readme: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
