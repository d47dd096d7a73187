//! A cudarc program on mscclpp-rs's NCCL: it uses cudarc's safe `nccl` API exactly as candle's
//! tensor-parallel code does (`Id::new`, `Comm::from_rank`, `all_reduce`, ...), and cudarc
//! opens `libnccl.so` by name, so `LD_LIBRARY_PATH` picks this library:
//!
//! ```sh
//! cargo test --release -p mscclpp-nccl --test cudarc_nccl            # or, as any cudarc program:
//! LD_LIBRARY_PATH=target/nccl target/release/deps/cudarc_nccl-<hash> [--ranks N]   # after ./x nccl
//! ```
//!
//! Run without `LD_LIBRARY_PATH` naming a folder with `libnccl.so`, it lays out the
//! `libmscclpp_nccl.so` it finds beside it (the build's target folder) under that name in a
//! temporary folder and runs itself again with `LD_LIBRARY_PATH` set to it.
//!
//! The first process makes the id and starts N ranks (default 2) as processes of this program
//! on the machine's GPUs (`rank % GPUs`: ranks share a GPU where there are fewer). Every rank
//! runs allreduce (sum, max, in place), allgather, broadcast, reduce, reduce-scatter and a ring
//! of grouped sends and receives on fresh random data, checks every result against the host,
//! and prints `RESULT ok`; the program exits non-zero on any mismatch or error. It says which
//! NCCL library cudarc loaded, and without a GPU it stops after making the id (exit 0).
//!
//! With `--netns` (as root, with iproute2) every rank runs on a "machine" of its own: a network
//! namespace with its own address and host name (`host/tests/netns`). The communicator then
//! spans machines, so this library forwards it to the real NCCL (`MSCCLPP_RS_NCCL`, else the
//! system's `libnccl.so.2`), which treats the host names as different nodes and connects them
//! through its socket transport; every rank checks that every call was forwarded and none served.
//! Without namespaces it says why and exits 0 (non-zero under `MSCCLPP_RS_REQUIRE_NETNS=1`).

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(dead_code)] // the fixture's fault injection is for the host crate's tests
#[path = "../../host/tests/netns/mod.rs"]
mod netns;
/// What the namespace fixture hands the host tests' launcher when it is dropped; this program
/// prints its ranks' lines itself.
mod procs {
    pub fn record(_lines: Vec<String>) {}
}

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::safe::{Comm, Id, ReduceOp, group_end, group_start};

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cudarc_nccl: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `libnccl.so` cudarc loaded (it opens it by that name, first of its candidates): its
/// version when it is mscclpp-rs's.
fn loaded_library() -> String {
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded under that name.
    let h = unsafe { libc::dlopen(c"libnccl.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return "no libnccl.so loaded".into();
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c"mscclppNcclVersion".as_ptr()) };
    if p.is_null() {
        return "another NCCL (not mscclpp-rs)".into();
    }
    // SAFETY: mscclppNcclVersion returns a static NUL-terminated string.
    let f: extern "C" fn() -> *const std::ffi::c_char = unsafe { std::mem::transmute(p) };
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(f()) }.to_string_lossy().into_owned()
}

/// Lays this build's `libmscclpp_nccl.so` out as `libnccl.so` and runs this program again with
/// `LD_LIBRARY_PATH` naming it; `None` when it is already laid out (or named by the caller).
fn relaunch() -> Option<Res<()>> {
    if std::env::var_os("CUDARC_NCCL_LAID_OUT").is_some() {
        return None;
    }
    let named = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| !d.is_empty() && std::path::Path::new(d).join("libnccl.so").exists());
    if named {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?.to_path_buf();
    while !dir.join("libmscclpp_nccl.so").exists() {
        if !dir.pop() {
            return Some(Err(format!(
                "no libmscclpp_nccl.so above {} and LD_LIBRARY_PATH names no libnccl.so: build it first (cargo build -p mscclpp-nccl --lib; ./x test does)",
                exe.display()
            )));
        }
    }
    let work = std::env::temp_dir().join(format!("cudarc-nccl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let laid = std::fs::create_dir_all(&work)
        .and_then(|_| std::os::unix::fs::symlink(dir.join("libmscclpp_nccl.so"), work.join("libnccl.so")));
    if let Err(e) = laid {
        return Some(Err(format!("laying out {}: {e}", work.display())));
    }
    let status = Command::new(&exe)
        .args(std::env::args().skip(1))
        .env("LD_LIBRARY_PATH", &work)
        .env("CUDARC_NCCL_LAID_OUT", "1")
        .status();
    let _ = std::fs::remove_dir_all(&work);
    Some(match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("the program with LD_LIBRARY_PATH={} exited with {s}", work.display())),
        Err(e) => Err(format!("running {}: {e}", exe.display())),
    })
}

fn run() -> Res<()> {
    if let Some(r) = relaunch() {
        return r;
    }
    if let Ok(rank) = std::env::var("CUDARC_NCCL_RANK") {
        return rank_main(rank.parse().map_err(|e| format!("CUDARC_NCCL_RANK: {e}"))?);
    }
    // (`--ranks N`; the test harness's own arguments, if any, are ignored.)
    let args: Vec<String> = std::env::args().collect();
    let ranks: usize = match args.iter().position(|a| a == "--ranks") {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--ranks N")?,
        None => 2,
    };
    let mut net = if args.iter().any(|a| a == "--netns") {
        match netns::unavailable() {
            None => Some(netns::Net::new(ranks)?),
            Some(why) if std::env::var("MSCCLPP_RS_REQUIRE_NETNS").is_ok_and(|v| v == "1") => {
                return Err(format!("--netns under MSCCLPP_RS_REQUIRE_NETNS=1, but {why}"));
            }
            Some(why) => {
                println!("cudarc_nccl: --netns skipped: {why}");
                return Ok(());
            }
        }
    } else {
        None
    };
    if let Some(net) = &net {
        // The id names rank 0's bootstrap on machine 0's address (as on a cluster, where the
        // process making the id chooses it: NCCL_COMM_ID or an interface).
        // SAFETY: no other thread of this process reads the environment yet.
        unsafe { std::env::set_var("MSCCLPP_RS_BOOTSTRAP", format!("{}:{NETNS_PORT}", net.ip(0))) };
    }
    let id = Id::new().map_err(|e| format!("ncclGetUniqueId: {e:?}"))?;
    let library = loaded_library();
    println!("cudarc_nccl: NCCL library loaded by cudarc: {library}");
    if !library.starts_with("mscclpp-rs") {
        return Err(format!("cudarc loaded {library}: put mscclpp-rs's libnccl.so first on LD_LIBRARY_PATH"));
    }
    let gpus = match mscclpp_host::gpu::devices() {
        Ok(d) if !d.is_empty() => d.len(),
        Err(e) if !e.is_no_gpu() => return Err(format!("the driver failed: {e}")),
        _ => {
            println!("cudarc_nccl: no GPU: made the id through cudarc, nothing more to run");
            return Ok(());
        }
    };
    let hex: String = id.internal().iter().map(|&c| format!("{:02x}", c as u8)).collect();
    let seed: u64 = rand::random();
    println!("cudarc_nccl: {ranks} ranks on {gpus} GPU(s), seed {seed}");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    if let Some(net) = &mut net {
        return across_machines(net, &exe, ranks, gpus, &hex, seed);
    }
    let children: Vec<_> = (0..ranks)
        .map(|r| {
            Command::new(&exe)
                .env("CUDARC_NCCL_RANK", r.to_string())
                .env("CUDARC_NCCL_WORLD", ranks.to_string())
                .env("CUDARC_NCCL_GPUS", gpus.to_string())
                .env("CUDARC_NCCL_ID", &hex)
                .env("CUDARC_NCCL_SEED", seed.to_string())
                .spawn()
                .map_err(|e| format!("starting rank {r}: {e}"))
        })
        .collect::<Res<_>>()?;
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            failed.push((r, status));
        }
    }
    if failed.is_empty() {
        println!("cudarc_nccl: all {ranks} ranks passed");
        Ok(())
    } else {
        Err(format!("ranks failed: {failed:?}"))
    }
}

/// Rank 0's bootstrap port on machine 0 (its namespace's own, so any port is free).
const NETNS_PORT: u16 = 4000;

/// Starts rank r on machine r of `net` and checks that every rank passed with every call
/// forwarded to the real NCCL.
fn across_machines(
    net: &mut netns::Net,
    exe: &std::path::Path,
    ranks: usize,
    gpus: usize,
    hex: &str,
    seed: u64,
) -> Res<()> {
    let mut env: Vec<(String, String)> = vec![
        ("CUDARC_NCCL_WORLD".into(), ranks.to_string()),
        ("CUDARC_NCCL_GPUS".into(), gpus.to_string()),
        ("CUDARC_NCCL_ID".into(), hex.into()),
        ("CUDARC_NCCL_SEED".into(), seed.to_string()),
        ("CUDARC_NCCL_EXPECT_FORWARDED".into(), "1".into()),
    ];
    // The fixture passes none of this process's MSCCLPP_RS_ settings on by itself: the caller's
    // (the real NCCL's path, say) go on, the bootstrap address set above does not.
    env.extend(std::env::vars().filter(|(k, _)| k.starts_with("MSCCLPP_RS_") && k != "MSCCLPP_RS_BOOTSTRAP"));
    // The real NCCL's own interface: the machine's link (no InfiniBand here).
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        env.push(("NCCL_SOCKET_IFNAME".into(), "eth0".into()));
    }
    for r in 0..ranks {
        let mut e = env.clone();
        e.push(("CUDARC_NCCL_RANK".into(), r.to_string()));
        net.spawn(r, &format!("rank {r}"), exe, &[], &e)?;
    }
    let statuses = net.wait_all(Instant::now() + Duration::from_secs(240));
    let lines = net.lines();
    for l in &lines {
        println!("cudarc_nccl: {l}");
    }
    let failed: Vec<String> = statuses
        .iter()
        .enumerate()
        .filter(|(r, s)| {
            !s.is_some_and(|s| s.success())
                || !lines.iter().any(|l| l.starts_with(&format!("[rank {r}]")) && l.contains("RESULT ok"))
        })
        .map(|(r, s)| format!("rank {r} ({})", netns::describe(*s)))
        .collect();
    if failed.is_empty() {
        println!("cudarc_nccl: all {ranks} ranks passed, each on a machine of its own, forwarded to the real NCCL");
        Ok(())
    } else {
        Err(format!("across machines, failed: {}", failed.join(", ")))
    }
}

/// How many calls this library served and forwarded so far (`mscclppNcclStats`).
fn stats() -> Res<(u64, u64)> {
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded under that name.
    let h = unsafe { libc::dlopen(c"libnccl.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return Err("no libnccl.so loaded".into());
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c"mscclppNcclStats".as_ptr()) };
    if p.is_null() {
        return Err("the loaded libnccl.so is not mscclpp-rs's".into());
    }
    // SAFETY: mscclppNcclStats's signature.
    let f: unsafe extern "C" fn(*mut u64, *mut u64) = unsafe { std::mem::transmute(p) };
    let (mut served, mut forwarded) = (0u64, 0u64);
    // SAFETY: two writable words.
    unsafe { f(&mut served, &mut forwarded) };
    Ok((served, forwarded))
}

fn env(name: &str) -> Res<String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// This machine's host name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|e| format!("? ({e})"), |h| h.trim().to_string())
}

/// Rank r's data for a test: deterministic from the seed, so every rank knows every rank's.
fn data(seed: u64, test: u64, rank: usize, n: usize) -> Vec<f32> {
    let mut x = seed ^ (test << 32) ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) % 2001) as f32 / 8.0 - 125.0 // exact in f32: sums do not round
        })
        .collect()
}

fn check(what: &str, got: &[f32], want: &[f32]) -> Res<()> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!("{what}: element {i} is {} instead of {}", got[i], want[i])),
    }
}

fn rank_main(rank: usize) -> Res<()> {
    let world: usize = env("CUDARC_NCCL_WORLD")?.parse().map_err(|e| format!("{e}"))?;
    let gpus: usize = env("CUDARC_NCCL_GPUS")?.parse().map_err(|e| format!("{e}"))?;
    let seed: u64 = env("CUDARC_NCCL_SEED")?.parse().map_err(|e| format!("{e}"))?;
    let hex = env("CUDARC_NCCL_ID")?;
    let mut internal = [0 as std::ffi::c_char; 128];
    for (i, b) in internal.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())? as std::ffi::c_char;
    }
    let ctx = CudaContext::new(rank % gpus).map_err(|e| format!("{e:?}"))?;
    let stream: Arc<CudaStream> = ctx.default_stream();
    let comm =
        Comm::from_rank(stream.clone(), rank, world, Id::uninit(internal)).map_err(|e| format!("init: {e:?}"))?;
    let e = |what: &'static str| move |err: cudarc::nccl::result::NcclError| format!("{what}: {err:?}");
    let d = |err: cudarc::driver::DriverError| format!("{err:?}");
    let n = 1000 + 37; // odd, not a multiple of 16 bytes
    let all = |test: u64| (0..world).map(|q| data(seed, test, q, n)).collect::<Vec<_>>();

    // allreduce (sum, max) and in place.
    let inputs = all(1);
    let send = stream.clone_htod(&inputs[rank]).map_err(d)?;
    let mut recv = stream.alloc_zeros::<f32>(n).map_err(d)?;
    comm.all_reduce(&send, &mut recv, &ReduceOp::Sum).map_err(e("all_reduce"))?;
    let sum: Vec<f32> = (0..n).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
    check("all_reduce sum", &stream.clone_dtoh(&recv).map_err(d)?, &sum)?;
    comm.all_reduce(&send, &mut recv, &ReduceOp::Max).map_err(e("all_reduce max"))?;
    let max: Vec<f32> = (0..n).map(|i| inputs.iter().map(|v| v[i]).fold(f32::MIN, f32::max)).collect();
    check("all_reduce max", &stream.clone_dtoh(&recv).map_err(d)?, &max)?;
    let mut inplace = stream.clone_htod(&inputs[rank]).map_err(d)?;
    comm.all_reduce_in_place(&mut inplace, &ReduceOp::Sum).map_err(e("all_reduce_in_place"))?;
    check("all_reduce in place", &stream.clone_dtoh(&inplace).map_err(d)?, &sum)?;

    // allgather.
    let inputs = all(2);
    let send = stream.clone_htod(&inputs[rank]).map_err(d)?;
    let mut gathered = stream.alloc_zeros::<f32>(n * world).map_err(d)?;
    comm.all_gather(&send, &mut gathered).map_err(e("all_gather"))?;
    check("all_gather", &stream.clone_dtoh(&gathered).map_err(d)?, &inputs.concat())?;

    // broadcast and reduce, root 1 (the last rank with one rank).
    let root = 1.min(world - 1);
    let inputs = all(3);
    let send = stream.clone_htod(&inputs[rank]).map_err(d)?;
    let mut got = stream.alloc_zeros::<f32>(n).map_err(d)?;
    comm.broadcast(Some(&send), &mut got, root as i32).map_err(e("broadcast"))?;
    check("broadcast", &stream.clone_dtoh(&got).map_err(d)?, &inputs[root])?;
    let mut reduced = stream.alloc_zeros::<f32>(n).map_err(d)?;
    comm.reduce(&send, Some(&mut reduced), &ReduceOp::Sum, root as i32).map_err(e("reduce"))?;
    if rank == root {
        let sum: Vec<f32> = (0..n).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
        check("reduce", &stream.clone_dtoh(&reduced).map_err(d)?, &sum)?;
    }

    // reduce-scatter.
    let inputs = (0..world).map(|q| data(seed, 4, q, n * world)).collect::<Vec<_>>();
    let send = stream.clone_htod(&inputs[rank]).map_err(d)?;
    let mut part = stream.alloc_zeros::<f32>(n).map_err(d)?;
    comm.reduce_scatter(&send, &mut part, &ReduceOp::Sum).map_err(e("reduce_scatter"))?;
    let want: Vec<f32> = (0..n).map(|i| inputs.iter().map(|v| v[rank * n + i]).sum()).collect();
    check("reduce_scatter", &stream.clone_dtoh(&part).map_err(d)?, &want)?;

    // A ring of grouped sends and receives.
    let inputs = all(5);
    let send = stream.clone_htod(&inputs[rank]).map_err(d)?;
    let mut from_left = stream.alloc_zeros::<f32>(n).map_err(d)?;
    let (right, left) = ((rank + 1) % world, (rank + world - 1) % world);
    group_start().map_err(e("group_start"))?;
    comm.send(&send, right as i32).map_err(e("send"))?;
    comm.recv(&mut from_left, left as i32).map_err(e("recv"))?;
    group_end().map_err(e("group_end"))?;
    check("send/recv ring", &stream.clone_dtoh(&from_left).map_err(d)?, &inputs[left])?;

    // Every rank done before any rank's communicator goes (cudarc's drop aborts it).
    let mut last = stream.clone_htod(&[1f32]).map_err(d)?;
    comm.all_reduce_in_place(&mut last, &ReduceOp::Sum).map_err(e("final all_reduce"))?;
    check("final all_reduce", &stream.clone_dtoh(&last).map_err(d)?, &[world as f32])?;
    stream.synchronize().map_err(d)?;
    if std::env::var_os("CUDARC_NCCL_EXPECT_FORWARDED").is_some() {
        let (served, forwarded) = stats()?;
        let host = hostname();
        println!("rank {rank} on {host}: {forwarded} calls forwarded to the real NCCL, {served} served");
        if served != 0 || forwarded == 0 {
            return Err(format!(
                "rank {rank}: expected every call forwarded, got {served} served and {forwarded} forwarded"
            ));
        }
    }
    println!(
        "rank {rank}: allreduce sum/max/in place, allgather, broadcast, reduce, reduce-scatter, send/recv: RESULT ok"
    );
    Ok(())
}
