//! The served matrix on GPUs, through the library's C functions: every NCCL data type (the
//! fp8 formats and 64-bit integers too, which PyTorch's check does not reach) with every
//! reduction (sum, prod, max, min, avg, and pre-multiplied sums with a host and a device scalar)
//! in allreduce (out of place, in place, at an odd element offset), reduce-scatter, reduce and
//! broadcast from every root, allgather, all-to-all, gather, scatter, grouped sends and receives
//! of unequal sizes with a message to itself, a zero count, `ncclMemAlloc` buffers,
//! registration, split, a non-blocking configuration, and `ncclCommAbort` returning promptly
//! while this rank's kernel waits for a peer that never comes (the peer then sees the loss).
//!
//! ```sh
//! cargo test --release -p mscclpp-nccl --test gpu_nccl            # 2 ranks (processes); --ranks N
//! ```
//!
//! Ranks are processes of this program on the machine's GPUs (`rank % GPUs`, sharing a GPU where
//! there are fewer). Every rank makes every rank's input from a shared seed and checks its own
//! results bit for bit against `mscclpp_nccl_device::reduce_one`, the kernels' specification
//! (both NaN counts as equal). Without a GPU it prints why and passes.

use std::ffi::{c_int, c_void};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use mscclpp_host::{DeviceBuffer, Gpu};
use mscclpp_nccl::abi::{DataType, ncclConfig_t, ncclResult_t, ncclUniqueId};
use mscclpp_nccl::api::*;
use mscclpp_nccl_device::{Bf16, Elem, F8E4M3, F8E5M2, F16, Narrow, ReduceOp, reduce_one};

type Res<T> = Result<T, String>;
type Comm = *mut c_void;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_nccl: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    if let Ok(r) = std::env::var("GPU_NCCL_RANK") {
        let r: usize = r.parse().map_err(|e| format!("{e}"))?;
        return rank_main(r).map_err(|e| format!("rank {r}: {e}"));
    }
    let args: Vec<String> = std::env::args().collect();
    let ranks: usize = match args.iter().position(|a| a == "--ranks") {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--ranks N")?,
        None => 2,
    };
    let gpus = match mscclpp_host::gpu::devices() {
        Ok(d) if !d.is_empty() => d.len(),
        Err(e) if !e.is_no_gpu() => return Err(format!("the driver failed: {e}")),
        _ => {
            println!("gpu_nccl: SKIPPED: no GPU on this machine");
            return Ok(());
        }
    };
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid id to fill.
    check(unsafe { ncclGetUniqueId(&mut id) }, "ncclGetUniqueId")?;
    let hex: String = id.internal.iter().map(|&c| format!("{:02x}", c as u8)).collect();
    let seed: u64 = std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("gpu_nccl: {ranks} ranks on {gpus} GPU(s), seed {seed} (MSCCLPP_RS_SEED repeats it)");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let children: Vec<_> = (0..ranks)
        .map(|r| {
            Command::new(&exe)
                .env("GPU_NCCL_RANK", r.to_string())
                .env("GPU_NCCL_WORLD", ranks.to_string())
                .env("GPU_NCCL_GPUS", gpus.to_string())
                .env("GPU_NCCL_ID", &hex)
                .env("GPU_NCCL_SEED", seed.to_string())
                .spawn()
                .map_err(|e| format!("starting rank {r}: {e}"))
        })
        .collect::<Res<_>>()?;
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        if !c.wait().map_err(|e| e.to_string())?.success() {
            failed.push(r);
        }
    }
    if !failed.is_empty() {
        return Err(format!("ranks {failed:?} failed"));
    }
    println!("gpu_nccl: all {ranks} ranks passed in {:.1} s", started.elapsed().as_secs_f64());
    init_all(seed)
}

/// `ncclCommInitAll` with two ranks on GPU 0 of this process (ranks as threads of one process,
/// each with its own stream), driven from one thread inside groups as NCCL requires.
fn init_all(seed: u64) -> Res<()> {
    let n = 2;
    let devs = [0 as c_int; 2];
    let mut comms: [Comm; 2] = [std::ptr::null_mut(); 2];
    // SAFETY: two slots and two device numbers.
    check(unsafe { ncclCommInitAll(comms.as_mut_ptr(), n, devs.as_ptr()) }, "ncclCommInitAll")?;
    let gpus: Vec<_> = (0..2).map(|_| Gpu::open(0).map_err(|e| e.to_string())).collect::<Res<_>>()?;
    let count = 4099;
    let xs: Vec<Vec<f32>> = (0..2)
        .map(|q| {
            let mut g = Gen::new(seed, 9_000, q);
            (0..count).map(|_| quarter(&mut g)).collect()
        })
        .collect();
    let ys: Vec<Vec<f64>> = (0..2)
        .map(|q| {
            let mut g = Gen::new(seed, 9_001, q);
            (0..count).map(|_| quarter(&mut g) as f64).collect()
        })
        .collect();
    let err = |e: mscclpp_host::Error| e.to_string();
    let a: Vec<DeviceBuffer> =
        (0..2).map(|q| DeviceBuffer::from_slice(&gpus[q], &xs[q]).map_err(err)).collect::<Res<_>>()?;
    let b: Vec<DeviceBuffer> =
        (0..2).map(|q| DeviceBuffer::from_slice(&gpus[q], &ys[q]).map_err(err)).collect::<Res<_>>()?;
    let c: Vec<DeviceBuffer> =
        (0..2).map(|q| DeviceBuffer::filled(&gpus[q], count * 4, 0).map_err(err)).collect::<Res<_>>()?;
    gpus[0].bind().map_err(err)?;
    // SAFETY: live communicators, buffers of `count` elements, each rank's own stream.
    unsafe {
        check(ncclGroupStart(), "group start")?;
        for q in 0..2 {
            let s = gpus[q].stream().cu_stream();
            check(ncclAllReduce(a[q].addr() as _, a[q].addr() as _, count, 7, 0, comms[q], s), "allreduce f32 sum")?;
            check(ncclAllReduce(b[q].addr() as _, b[q].addr() as _, count, 8, 2, comms[q], s), "allreduce f64 max")?;
            check(ncclSend(xs_addr(&a[q]), count, 7, (1 - q) as c_int, comms[q], s), "send")?;
            check(ncclRecv(c[q].addr() as _, count, 7, (1 - q) as c_int, comms[q], s), "recv")?;
        }
        check(ncclGroupEnd(), "group end")?;
    }
    for g in &gpus {
        g.synchronize().map_err(err)?;
    }
    let sum: Vec<f32> = (0..count).map(|i| xs[0][i] + xs[1][i]).collect();
    let max: Vec<f64> = (0..count).map(|i| ys[0][i].max(ys[1][i])).collect();
    for q in 0..2 {
        if a[q].to_vec::<f32>().map_err(err)? != sum || b[q].to_vec::<f64>().map_err(err)? != max {
            return Err(format!("ncclCommInitAll rank {q}: wrong allreduce"));
        }
        // The send went after the in-place allreduce on the same stream: the peer's sums.
        if c[q].to_vec::<f32>().map_err(err)? != sum {
            return Err(format!("ncclCommInitAll rank {q}: wrong receive"));
        }
    }
    for c in comms {
        // SAFETY: communicators made above, destroyed once.
        check(unsafe { ncclCommDestroy(c) }, "ncclCommDestroy")?;
    }
    println!("gpu_nccl: ncclCommInitAll: two ranks as threads of this process on GPU 0: allreduce, send/recv ok");
    Ok(())
}

fn xs_addr(b: &DeviceBuffer) -> *const c_void {
    b.addr() as *const c_void
}

fn check(r: ncclResult_t, what: &str) -> Res<()> {
    if r == ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: a NUL-terminated string.
    let why = unsafe { text(ncclGetLastError(std::ptr::null_mut())) };
    Err(format!("{what}: {r:?}: {why}"))
}

fn env(name: &str) -> Res<String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// A deterministic generator of every rank's data.
struct Gen(u64);
impl Gen {
    fn new(seed: u64, test: u64, rank: usize) -> Self {
        Self(
            seed ^ test.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        )
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// An element type on the host: random values, the bits, equality (NaN equals NaN).
trait Host: Elem + bytemuck::Pod + PartialEq + std::fmt::Debug {
    fn random(g: &mut Gen) -> Self;
    fn is_nan(self) -> bool {
        false
    }
    /// A scalar of the type for a pre-multiplied sum, and its immediate bits.
    fn scalar() -> (Self, u64);
}

macro_rules! int_host {
    ($($t:ty),*) => { $(
        impl Host for $t {
            fn random(g: &mut Gen) -> Self { g.next() as $t }
            fn scalar() -> (Self, u64) { (3 as $t, 3) }
        }
    )* };
}
int_host!(i8, u8, i32, u32, i64, u64);

/// Quarters in [-64, 64): exact in f32 and f64, rounded once into the narrow types.
fn quarter(g: &mut Gen) -> f32 {
    (g.next() % 512) as f32 / 4.0 - 64.0
}
impl Host for f32 {
    fn random(g: &mut Gen) -> Self {
        quarter(g)
    }
    fn is_nan(self) -> bool {
        self.is_nan()
    }
    fn scalar() -> (Self, u64) {
        (-1.25, (-1.25f64).to_bits())
    }
}
impl Host for f64 {
    fn random(g: &mut Gen) -> Self {
        quarter(g) as f64
    }
    fn is_nan(self) -> bool {
        self.is_nan()
    }
    fn scalar() -> (Self, u64) {
        (-1.25, (-1.25f64).to_bits())
    }
}
macro_rules! narrow_host {
    ($($t:ty),*) => { $(
        impl Host for $t {
            fn random(g: &mut Gen) -> Self { <$t>::narrow(quarter(g)) }
            fn is_nan(self) -> bool { self.widen().is_nan() }
            fn scalar() -> (Self, u64) { (<$t>::narrow(0.5), 0.5f64.to_bits()) }
        }
    )* };
}
narrow_host!(F16, Bf16, F8E4M3, F8E5M2);

struct Rank {
    rank: usize,
    n: usize,
    seed: u64,
    gpu: std::sync::Arc<Gpu>,
    comm: Comm,
    test: u64,
    checks: usize,
}

impl Rank {
    fn stream(&self) -> cudarc::driver::sys::CUstream {
        self.gpu.stream().cu_stream()
    }
    fn sync(&self) -> Res<()> {
        self.gpu.synchronize().map_err(|e| e.to_string())
    }
    fn data<T: Host>(&mut self, count: usize) -> Vec<Vec<T>> {
        self.test += 1;
        (0..self.n)
            .map(|q| {
                let mut g = Gen::new(self.seed, self.test, q);
                (0..count).map(|_| T::random(&mut g)).collect()
            })
            .collect()
    }
    fn buffer<T: Host>(&self, values: &[T], pad: usize) -> Res<DeviceBuffer> {
        // `pad` elements of poison before the data: an odd element offset when pad is odd.
        let size = std::mem::size_of::<T>();
        let b = DeviceBuffer::filled(&self.gpu, (values.len() + pad + 1) * size, 0xA5).map_err(|e| e.to_string())?;
        b.write(pad * size, values).map_err(|e| e.to_string())?;
        Ok(b)
    }
    fn read<T: Host>(&self, b: &DeviceBuffer, pad: usize, count: usize) -> Res<Vec<T>> {
        let mut v = vec![T::zeroed(); count];
        b.read(pad * std::mem::size_of::<T>(), &mut v).map_err(|e| e.to_string())?;
        Ok(v)
    }
    fn expect<T: Host>(&mut self, what: &str, got: &[T], want: &[T]) -> Res<()> {
        let bad = got.iter().zip(want).position(|(g, w)| g != w && !(g.is_nan() && w.is_nan()));
        if got.len() != want.len() {
            return Err(format!("{what}: {} elements, expected {}", got.len(), want.len()));
        }
        if let Some(i) = bad {
            return Err(format!("{what}: element {i} is {:?}, expected {:?}", got[i], want[i]));
        }
        self.checks += 1;
        Ok(())
    }
}

fn dt(t: DataType) -> c_int {
    t.raw()
}

/// Every reduction of type T through allreduce (three buffer forms), reduce-scatter, and reduce
/// to every root.
fn reductions<T: Host>(r: &mut Rank, t: DataType) -> Res<()> {
    let count = 1001;
    let (scalar, bits) = T::scalar();
    let scalar_dev = r.buffer(&[scalar], 0)?;
    let mut ops: Vec<(String, c_int, ReduceOp, u64)> = (0..5)
        .map(|o| (format!("{:?}", ReduceOp::from_u32(o).unwrap()), o as c_int, ReduceOp::from_u32(o).unwrap(), 0))
        .collect();
    for (name, residence, ptr) in [
        ("PreMulSum(host)", mscclpp_nccl::abi::SCALAR_HOST_IMMEDIATE, &scalar as *const T as *mut c_void),
        ("PreMulSum(device)", mscclpp_nccl::abi::SCALAR_DEVICE, scalar_dev.addr() as *mut c_void),
    ] {
        let mut op: c_int = -1;
        // SAFETY: a scalar of the type on the host or the device, a live communicator.
        check(unsafe { ncclRedOpCreatePreMulSum(&mut op, ptr, dt(t), residence, r.comm) }, name)?;
        ops.push((name.to_string(), op, ReduceOp::PreMulSum, bits));
    }
    for (name, op, kind, bits) in &ops {
        let xs = r.data::<T>(count);
        let want: Vec<T> = (0..count)
            .map(|i| {
                let column: Vec<T> = xs.iter().map(|x| x[i]).collect();
                reduce_one(*kind, &column, *bits)
            })
            .collect();
        let me = r.rank;
        // Out of place, at an odd element offset (views), and in place.
        let send = r.buffer(&xs[me], 1)?;
        let recv = r.buffer(&vec![T::zeroed(); count], 3)?;
        let size = std::mem::size_of::<T>() as u64;
        let inplace = r.buffer(&xs[me], 0)?;
        // SAFETY: buffers of `count` elements at the offsets given, on this rank's GPU.
        unsafe {
            check(
                ncclAllReduce(
                    (send.addr() + size) as _,
                    (recv.addr() + 3 * size) as _,
                    count,
                    dt(t),
                    *op,
                    r.comm,
                    r.stream(),
                ),
                &format!("allreduce {name} {}", t.name()),
            )?;
            check(
                ncclAllReduce(inplace.addr() as _, inplace.addr() as _, count, dt(t), *op, r.comm, r.stream()),
                "in place",
            )?;
        }
        r.sync()?;
        let got = r.read::<T>(&recv, 3, count)?;
        r.expect(&format!("allreduce {name} {} at an odd offset", t.name()), &got, &want)?;
        let got = r.read::<T>(&inplace, 0, count)?;
        r.expect(&format!("allreduce {name} {} in place", t.name()), &got, &want)?;
        // Poison around the view untouched.
        let mut around = vec![0u8; 3 * size as usize];
        recv.read(0, &mut around).map_err(|e| e.to_string())?;
        if around.iter().any(|&b| b != 0xA5) {
            return Err(format!("allreduce {name} {} wrote before its output", t.name()));
        }

        // Reduce-scatter of 333 per rank, and reduce to every root.
        let part = 333;
        let ys = r.data::<T>(part * r.n);
        let want: Vec<T> = (0..part)
            .map(|i| reduce_one(*kind, &ys.iter().map(|y| y[me * part + i]).collect::<Vec<_>>(), *bits))
            .collect();
        let send = r.buffer(&ys[me], 0)?;
        let recv = r.buffer(&vec![T::zeroed(); part], 0)?;
        // SAFETY: as above.
        let rc = unsafe { ncclReduceScatter(send.addr() as _, recv.addr() as _, part, dt(t), *op, r.comm, r.stream()) };
        check(rc, "reduce_scatter")?;
        r.sync()?;
        let got = r.read::<T>(&recv, 0, part)?;
        r.expect(&format!("reduce_scatter {name} {}", t.name()), &got, &want)?;
        for root in 0..r.n {
            let want: Vec<T> =
                (0..part).map(|i| reduce_one(*kind, &ys.iter().map(|y| y[i]).collect::<Vec<_>>(), *bits)).collect();
            let out = r.buffer(&vec![T::zeroed(); part], 0)?;
            let (src, dst, rt) = (send.addr() as _, out.addr() as _, root as c_int);
            // SAFETY: as above.
            let rc = unsafe { ncclReduce(src, dst, part, dt(t), *op, rt, r.comm, r.stream()) };
            check(rc, "reduce")?;
            r.sync()?;
            if root == me {
                let got = r.read::<T>(&out, 0, part)?;
                r.expect(&format!("reduce {name} {} to {root}", t.name()), &got, &want)?;
            }
        }
    }
    for (_, op, kind, _) in &ops {
        if *kind == ReduceOp::PreMulSum {
            // SAFETY: a reduction made above.
            check(unsafe { ncclRedOpDestroy(*op, r.comm) }, "ncclRedOpDestroy")?;
        }
    }
    Ok(())
}

/// The data movements of type T: allgather (and in place), broadcast from every root,
/// all-to-all, gather and scatter to and from every root.
fn movements<T: Host>(r: &mut Rank, t: DataType, count: usize) -> Res<()> {
    let (n, me) = (r.n, r.rank);
    let xs = r.data::<T>(count);
    let send = r.buffer(&xs[me], 0)?;
    let all = r.buffer(&vec![T::zeroed(); n * count], 0)?;
    let size = std::mem::size_of::<T>();
    let mut flat = Vec::new();
    for x in &xs {
        flat.extend_from_slice(x);
    }
    let inplace = r.buffer(&vec![T::zeroed(); n * count], 0)?;
    inplace.write(me * count * size, &xs[me]).map_err(|e| e.to_string())?;
    // SAFETY: buffers of the sizes each operation names, on this GPU.
    unsafe {
        check(ncclAllGather(send.addr() as _, all.addr() as _, count, dt(t), r.comm, r.stream()), "allgather")?;
        let own = inplace.addr() + (me * count * size) as u64;
        check(ncclAllGather(own as _, inplace.addr() as _, count, dt(t), r.comm, r.stream()), "allgather in place")?;
    }
    r.sync()?;
    let got = r.read::<T>(&all, 0, n * count)?;
    r.expect(&format!("allgather {}", t.name()), &got, &flat)?;
    let got = r.read::<T>(&inplace, 0, n * count)?;
    r.expect(&format!("allgather {} in place", t.name()), &got, &flat)?;

    for root in 0..n {
        let b = r.buffer(&xs[me], 0)?;
        // SAFETY: as above.
        check(unsafe { ncclBcast(b.addr() as _, count, dt(t), root as c_int, r.comm, r.stream()) }, "bcast")?;
        r.sync()?;
        let got = r.read::<T>(&b, 0, count)?;
        r.expect(&format!("broadcast {} from {root}", t.name()), &got, &xs[root])?;
        // Gather to root, then scatter the gathered rows back out from it.
        let g = r.buffer(&vec![T::zeroed(); n * count], 0)?;
        // SAFETY: as above.
        let rc =
            unsafe { ncclGather(send.addr() as _, g.addr() as _, count, dt(t), root as c_int, r.comm, r.stream()) };
        check(rc, "gather")?;
        r.sync()?;
        if root == me {
            let got = r.read::<T>(&g, 0, n * count)?;
            r.expect(&format!("gather {} to {root}", t.name()), &got, &flat)?;
        }
        let s = r.buffer(&vec![T::zeroed(); count], 0)?;
        let src = if root == me { g.addr() } else { 0 };
        // SAFETY: as above; the send buffer is read on the root only.
        let rc = unsafe { ncclScatter(src as _, s.addr() as _, count, dt(t), root as c_int, r.comm, r.stream()) };
        check(rc, "scatter")?;
        r.sync()?;
        let got = r.read::<T>(&s, 0, count)?;
        r.expect(&format!("scatter {} from {root}", t.name()), &got, &xs[me])?;
    }

    let ys = r.data::<T>(n * count);
    let send = r.buffer(&ys[me], 0)?;
    let recv = r.buffer(&vec![T::zeroed(); n * count], 0)?;
    // SAFETY: as above.
    check(unsafe { ncclAlltoAll(send.addr() as _, recv.addr() as _, count, dt(t), r.comm, r.stream()) }, "alltoall")?;
    r.sync()?;
    let want: Vec<T> = (0..n).flat_map(|q| ys[q][me * count..(me + 1) * count].to_vec()).collect();
    let got = r.read::<T>(&recv, 0, n * count)?;
    r.expect(&format!("alltoall {}", t.name()), &got, &want)
}

/// A group of sends and receives of unequal sizes to every rank, itself included (rank q sends
/// `q + 3 * d + 1` elements to rank d, larger than one outbox for one pair when asked), with
/// two messages to the next rank to check their order.
fn p2p(r: &mut Rank) -> Res<()> {
    let (n, me) = (r.n, r.rank);
    let size = |q: usize, d: usize| q + 3 * d + 1 + if (q + d) % 2 == 0 { 3 << 20 } else { 0 };
    let salt = r.seed as u32;
    let xs: Vec<Vec<Vec<u32>>> = (0..n)
        .map(|q| {
            (0..n).map(|d| (0..size(q, d)).map(|i| (q * 1_000_000 + d * 10_000 + i) as u32 ^ salt).collect()).collect()
        })
        .collect();
    let extra: Vec<u32> = (0..77).map(|i| i ^ me as u32).collect();
    let sends: Vec<DeviceBuffer> = (0..n).map(|d| r.buffer(&xs[me][d], 0)).collect::<Res<_>>()?;
    let recvs: Vec<DeviceBuffer> = (0..n).map(|q| r.buffer(&vec![0u32; size(q, me)], 0)).collect::<Res<_>>()?;
    let extra_send = r.buffer(&extra, 0)?;
    let extra_recv = r.buffer(&[0u32; 77], 0)?;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // SAFETY: buffers of the sizes given, on this GPU; the group is closed below.
    unsafe {
        check(ncclGroupStart(), "group start")?;
        for q in (0..n).rev() {
            check(ncclRecv(recvs[q].addr() as _, size(q, me), 3, q as c_int, r.comm, r.stream()), "recv")?;
        }
        check(ncclRecv(extra_recv.addr() as _, 77, 3, prev as c_int, r.comm, r.stream()), "recv extra")?;
        for (d, buf) in sends.iter().enumerate() {
            check(ncclSend(buf.addr() as _, size(me, d), 3, d as c_int, r.comm, r.stream()), "send")?;
        }
        check(ncclSend(extra_send.addr() as _, 77, 3, next as c_int, r.comm, r.stream()), "send extra")?;
        check(ncclGroupEnd(), "group end")?;
    }
    r.sync()?;
    for q in 0..n {
        let got = r.read::<u32>(&recvs[q], 0, size(q, me))?;
        r.expect(&format!("recv from {q}"), &got, &xs[q][me])?;
    }
    let want: Vec<u32> = (0..77).map(|i| i ^ prev as u32).collect();
    let got = r.read::<u32>(&extra_recv, 0, 77)?;
    r.expect("second message from the previous rank", &got, &want)
}

/// Operations larger than one staging buffer (32 MiB): pieces through the collectives.
fn large(r: &mut Rank) -> Res<()> {
    let (n, me) = (r.n, r.rank);
    let count = 9 << 20; // 36 MiB of f32
    let xs = r.data::<f32>(count);
    let b = r.buffer(&xs[me], 0)?;
    // SAFETY: a buffer of `count` elements on this GPU.
    check(unsafe { ncclAllReduce(b.addr() as _, b.addr() as _, count, 7, 0, r.comm, r.stream()) }, "large allreduce")?;
    r.sync()?;
    let want: Vec<f32> =
        (0..count).map(|i| reduce_one(ReduceOp::Sum, &xs.iter().map(|x| x[i]).collect::<Vec<_>>(), 0)).collect();
    let got = r.read::<f32>(&b, 0, count)?;
    r.expect("allreduce of 36 MiB", &got, &want)?;
    let part = 5 << 20; // bf16: n * 10 MiB
    let ys = r.data::<Bf16>(part * n);
    let send = r.buffer(&ys[me], 0)?;
    let recv = r.buffer(&vec![Bf16(0); part], 0)?;
    // SAFETY: as above.
    let rc = unsafe { ncclReduceScatter(send.addr() as _, recv.addr() as _, part, 9, 0, r.comm, r.stream()) };
    check(rc, "large reduce_scatter")?;
    let per = 5 << 20; // f32: 20 MiB per rank
    let zs = r.data::<f32>(per);
    let zsend = r.buffer(&zs[me], 0)?;
    let zall = r.buffer(&vec![0f32; per * n], 0)?;
    // SAFETY: as above.
    let rc = unsafe { ncclAllGather(zsend.addr() as _, zall.addr() as _, per, 7, r.comm, r.stream()) };
    check(rc, "large allgather")?;
    r.sync()?;
    let want: Vec<Bf16> = (0..part)
        .map(|i| reduce_one(ReduceOp::Sum, &ys.iter().map(|y| y[me * part + i]).collect::<Vec<_>>(), 0))
        .collect();
    let got = r.read::<Bf16>(&recv, 0, part)?;
    r.expect("reduce_scatter of n x 10 MiB", &got, &want)?;
    let flat: Vec<f32> = zs.concat();
    let got = r.read::<f32>(&zall, 0, per * n)?;
    r.expect("allgather of 20 MiB per rank", &got, &flat)
}

/// Operations of one communicator on two streams, enqueued with no host synchronisation between
/// them: they must run one after the other, as NCCL orders a communicator's operations, not side
/// by side over the communicator's shared scratch and semaphores.
fn two_streams(r: &mut Rank) -> Res<()> {
    let (n, me) = (r.n, r.rank);
    let count = 3 << 20; // 24 MiB of i64: the general path, in two rounds of its region
    let xs = r.data::<i64>(count);
    let ys = r.data::<i64>(count);
    let a = r.buffer(&xs[me], 0)?;
    let b = r.buffer(&ys[me], 0)?;
    let other = r.gpu.new_stream().map_err(|e| e.to_string())?;
    let (i64s, sum, max) = (dt(DataType::I64), ReduceOp::Sum as c_int, ReduceOp::Max as c_int);
    // SAFETY: buffers of `count` elements on this rank's GPU; both streams belong to its context.
    unsafe {
        check(ncclAllReduce(a.addr() as _, a.addr() as _, count, i64s, sum, r.comm, r.stream()), "first stream")?;
        check(ncclAllReduce(b.addr() as _, b.addr() as _, count, i64s, max, r.comm, other.cu_stream()), "second")?;
        check(ncclAllReduce(a.addr() as _, a.addr() as _, count, i64s, sum, r.comm, r.stream()), "first again")?;
    }
    other.synchronize().map_err(|e| format!("{e:?}"))?;
    r.sync()?;
    let column = |v: &[Vec<i64>], i: usize| v.iter().map(|x| x[i]).collect::<Vec<_>>();
    let want_a: Vec<i64> = (0..count)
        .map(|i| reduce_one(ReduceOp::Sum, &vec![reduce_one(ReduceOp::Sum, &column(&xs, i), 0); n], 0))
        .collect();
    let want_b: Vec<i64> = (0..count).map(|i| reduce_one(ReduceOp::Max, &column(&ys, i), 0)).collect();
    let got = r.read::<i64>(&a, 0, count)?;
    r.expect("two sums on the first stream around a max on a second", &got, &want_a)?;
    let got = r.read::<i64>(&b, 0, count)?;
    r.expect("the max on the second stream", &got, &want_b)
}

fn rank_main(rank: usize) -> Res<()> {
    let n: usize = env("GPU_NCCL_WORLD")?.parse().map_err(|e| format!("{e}"))?;
    let gpus: usize = env("GPU_NCCL_GPUS")?.parse().map_err(|e| format!("{e}"))?;
    let seed: u64 = env("GPU_NCCL_SEED")?.parse().map_err(|e| format!("{e}"))?;
    let hex = env("GPU_NCCL_ID")?;
    let mut id = ncclUniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())? as _;
    }
    let gpu = Gpu::open(rank % gpus).map_err(|e| e.to_string())?;
    gpu.bind().map_err(|e| e.to_string())?;
    let mut comm: Comm = std::ptr::null_mut();
    // A non-blocking configuration: creation may complete before it returns.
    let mut config = ncclConfig_t { blocking: 0, ..ncclConfig_t::default() };
    // SAFETY: valid out-pointer, id and config.
    let r0 = unsafe { ncclCommInitRankConfig(&mut comm, n as c_int, id, rank as c_int, &mut config) };
    if r0 == ncclResult_t::ncclInProgress {
        loop {
            let mut state = ncclResult_t::ncclInProgress;
            // SAFETY: a communicator being created.
            check(unsafe { ncclCommGetAsyncError(comm, &mut state) }, "ncclCommGetAsyncError")?;
            if state != ncclResult_t::ncclInProgress {
                check(state, "creation")?;
                break;
            }
        }
    } else {
        check(r0, "ncclCommInitRankConfig")?;
    }
    let mut r = Rank { rank, n, seed, gpu, comm, test: 0, checks: 0 };
    let (mut count, mut me, mut dev) = (0, 0, 0);
    // SAFETY: a live communicator and ints.
    unsafe {
        check(ncclCommCount(comm, &mut count), "count")?;
        check(ncclCommUserRank(comm, &mut me), "rank")?;
        check(ncclCommCuDevice(comm, &mut dev), "device")?;
    }
    if (count as usize, me as usize, dev as usize) != (n, rank, rank % gpus) {
        return Err(format!("queries say {count}, {me}, {dev}"));
    }
    let t0 = Instant::now();
    reductions::<i8>(&mut r, DataType::I8)?;
    reductions::<u8>(&mut r, DataType::U8)?;
    reductions::<i32>(&mut r, DataType::I32)?;
    reductions::<u32>(&mut r, DataType::U32)?;
    reductions::<i64>(&mut r, DataType::I64)?;
    reductions::<u64>(&mut r, DataType::U64)?;
    reductions::<F16>(&mut r, DataType::F16)?;
    reductions::<f32>(&mut r, DataType::F32)?;
    reductions::<f64>(&mut r, DataType::F64)?;
    reductions::<Bf16>(&mut r, DataType::Bf16)?;
    reductions::<F8E4M3>(&mut r, DataType::F8E4M3)?;
    reductions::<F8E5M2>(&mut r, DataType::F8E5M2)?;
    movements::<u8>(&mut r, DataType::U8, 257)?;
    movements::<F16>(&mut r, DataType::F16, 257)?;
    movements::<f64>(&mut r, DataType::F64, 257)?;
    movements::<f32>(&mut r, DataType::F32, 256)?; // whole 16-byte words: the collectives' allgather
    p2p(&mut r)?;
    large(&mut r)?;
    two_streams(&mut r)?;
    windows(&mut r)?;

    // A zero count, ncclMemAlloc memory, registration, a mismatched reduction.
    let mut mem: *mut c_void = std::ptr::null_mut();
    let mut handle: *mut c_void = std::ptr::null_mut();
    let xs = r.data::<f32>(100);
    // SAFETY: live communicator and buffers; mem is freed below.
    unsafe {
        check(ncclAllReduce(std::ptr::null(), std::ptr::null_mut(), 0, 7, 0, comm, r.stream()), "zero count")?;
        check(ncclMemAlloc(&mut mem, 400), "ncclMemAlloc")?;
        check(ncclCommRegister(comm, mem, 400, &mut handle), "ncclCommRegister")?;
        let b = r.buffer(&xs[rank], 0)?;
        check(cudarc_copy(mem, b.addr(), 400), "copy")?;
        check(ncclAllReduce(mem, mem, 100, 7, 0, comm, r.stream()), "allreduce on ncclMemAlloc memory")?;
        r.sync()?;
        let mut got = vec![0f32; 100];
        check(cudarc_read(&mut got, mem), "read")?;
        let want: Vec<f32> =
            (0..100).map(|i| reduce_one(ReduceOp::Sum, &xs.iter().map(|x| x[i]).collect::<Vec<_>>(), 0)).collect();
        r.expect("allreduce on ncclMemAlloc memory", &got, &want)?;
        check(ncclCommDeregister(comm, handle), "ncclCommDeregister")?;
        check(ncclMemFree(mem), "ncclMemFree")?;
        let mut op = 0;
        let s = 2.0f32;
        check(ncclRedOpCreatePreMulSum(&mut op, &s as *const f32 as *mut c_void, 7, 1, comm), "premul f32")?;
        let e = ncclAllReduce(mem, mem, 1, 8, op, comm, r.stream());
        if e != ncclResult_t::ncclInvalidArgument {
            return Err(format!("a reduction made for f32 used on f64: {e:?}"));
        }
    }

    // Split by parity, keys reversing the order.
    let mut child: Comm = std::ptr::null_mut();
    // SAFETY: a live communicator; the child is destroyed below.
    unsafe {
        check(ncclCommSplit(comm, (rank % 2) as c_int, -(rank as c_int), &mut child, std::ptr::null_mut()), "split")?;
        let members: Vec<usize> = (0..n).filter(|q| q % 2 == rank % 2).collect();
        let (mut cn, mut cr) = (0, 0);
        check(ncclCommCount(child, &mut cn), "child count")?;
        check(ncclCommUserRank(child, &mut cr), "child rank")?;
        let expect_rank = members.len() - 1 - members.iter().position(|&q| q == rank).unwrap_or(0);
        if (cn as usize, cr as usize) != (members.len(), expect_rank) {
            return Err(format!("split child: rank {cr} of {cn}, expected {expect_rank} of {}", members.len()));
        }
        let ones = r.buffer(&[1i64; 64], 0)?;
        check(ncclAllReduce(ones.addr() as _, ones.addr() as _, 64, 4, 0, child, r.stream()), "child allreduce")?;
        r.sync()?;
        let got = r.read::<i64>(&ones, 0, 64)?;
        r.expect("allreduce on the split child", &got, &[members.len() as i64; 64])?;
        check(ncclCommDestroy(child), "destroy child")?;
    }
    println!("rank {rank}: {} checks passed in {:.1} s", r.checks, t0.elapsed().as_secs_f64());

    // Abort while waiting: rank 0 enqueues an allreduce that rank 1 never joins, then aborts.
    let b = r.buffer(&[1f32; 16], 0)?;
    let mut state = ncclResult_t::ncclSuccess;
    // SAFETY: live communicator and buffers.
    unsafe {
        check(ncclCommGetAsyncError(comm, &mut state), "async error")?;
        check(state, "the async error before the abort")?;
        if n > 1 && rank == 0 {
            check(ncclAllReduce(b.addr() as _, b.addr() as _, 16, 7, 2, comm, r.stream()), "the lonely allreduce")?;
            std::thread::sleep(Duration::from_millis(300));
            let t = Instant::now();
            check(ncclCommAbort(comm), "ncclCommAbort")?;
            let took = t.elapsed();
            if took > Duration::from_secs(1) {
                return Err(format!("ncclCommAbort took {took:?}"));
            }
            println!("rank 0: ncclCommAbort returned in {:.1} ms while its kernel waited", took.as_secs_f64() * 1e3);
        } else if n > 1 && rank == 1 {
            let t = Instant::now();
            loop {
                check(ncclCommGetAsyncError(comm, &mut state), "async error")?;
                if state != ncclResult_t::ncclSuccess || t.elapsed() > Duration::from_secs(10) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if state != ncclResult_t::ncclRemoteError {
                return Err(format!("rank 1 saw {state:?} after rank 0's abort"));
            }
            println!("rank 1: saw rank 0's abort as {state:?} after {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
            check(ncclCommAbort(comm), "ncclCommAbort")?;
        } else {
            check(ncclCommDestroy(comm), "ncclCommDestroy")?;
        }
    }
    println!("rank {rank}: RESULT ok");
    Ok(())
}

/// `ncclMemAlloc` memory registered with `ncclCommWindowRegister` is a symmetric window: its
/// device handle (`mscclpp_nccl::window::device_window`) names this rank, the team and the size,
/// and every peer's copy, mapped here, holds what that peer wrote before registering; sizes that
/// differ between the ranks fail on every rank; other memory is recorded only (no handle); a
/// window keeps its memory past `ncclMemFree` until it is deregistered.
fn windows(r: &mut Rank) -> Res<()> {
    let (rank, n, comm) = (r.rank, r.n, r.comm);
    let bytes = (1usize << 20) + 4096;
    let words = bytes / 4;
    let data = r.data::<u32>(words);
    let mut mem: *mut c_void = std::ptr::null_mut();
    let mut win: *mut c_void = std::ptr::null_mut();
    // SAFETY: live communicator; mem is freed and the window deregistered below.
    unsafe {
        check(ncclMemAlloc(&mut mem, bytes), "ncclMemAlloc for a window")?;
        let b = r.buffer(&data[rank], 0)?;
        check(cudarc_copy(mem, b.addr(), bytes), "copy into the window")?;
        r.sync()?;
        check(ncclCommWindowRegister(comm, mem, bytes, &mut win, 1), "ncclCommWindowRegister")?;
        let h = mscclpp_nccl::window::device_window(comm, win)
            .map_err(|e| e.message)?
            .ok_or("ncclMemAlloc memory registered on every rank gave no window")?;
        if (h.rank as usize, h.size as usize, h.bytes as usize, h.local.addr()) != (rank, n, bytes, mem as u64) {
            return Err(format!("window handle {h:?}: expected rank {rank} of {n}, {bytes} B at {mem:p}"));
        }
        // Every rank's copy, through the addresses the handle holds.
        let mut bases = vec![0u64; n];
        let rc = cudarc::driver::sys::cuMemcpyDtoH_v2(bases.as_mut_ptr() as _, h.bases.addr(), n * 8);
        check(
            if rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                ncclResult_t::ncclSuccess
            } else {
                ncclResult_t::ncclUnhandledCudaError
            },
            "reading the window's table",
        )?;
        if bases[rank] != mem as u64 {
            return Err(format!("the table's own entry is {:#x}, not {mem:p}", bases[rank]));
        }
        for (q, want) in data.iter().enumerate() {
            let mut got = vec![0f32; words];
            check(cudarc_read(&mut got, bases[q] as *mut c_void), "reading a peer's window")?;
            let got: Vec<u32> = got.iter().map(|f| f.to_bits()).collect();
            r.expect(&format!("rank {q}'s window seen from rank {rank}"), &got, want)?;
        }
        // The memory stays while the window lives.
        check(ncclMemFree(mem), "ncclMemFree under a window")?;
        let mut again = vec![0f32; 16];
        check(
            cudarc_read(&mut again, bases[(rank + 1) % n] as *mut c_void),
            "reading a peer's window after ncclMemFree",
        )?;
        check(ncclCommWindowDeregister(comm, win), "ncclCommWindowDeregister")?;

        // Sizes that differ: every rank fails (in a world of one there is nobody to differ from).
        if n > 1 {
            let size = 4096 * (1 + rank % 2);
            check(ncclMemAlloc(&mut mem, size), "ncclMemAlloc")?;
            let e = ncclCommWindowRegister(comm, mem, size, &mut win, 1);
            if e != ncclResult_t::ncclInvalidArgument {
                return Err(format!("windows of different sizes: {e:?}, expected ncclInvalidArgument"));
            }
            check(ncclMemFree(mem), "ncclMemFree")?;
            r.checks += 1;
        }

        // Memory not from ncclMemAlloc: recorded, no device handle.
        let plain = DeviceBuffer::filled(&r.gpu, 4096, 0).map_err(|e| e.to_string())?;
        check(ncclCommWindowRegister(comm, plain.addr() as _, 4096, &mut win, 0), "window over cuMemAlloc memory")?;
        if mscclpp_nccl::window::device_window(comm, win).map_err(|e| e.message)?.is_some() {
            return Err("memory not from ncclMemAlloc gave a device window".into());
        }
        check(ncclCommWindowDeregister(comm, win), "ncclCommWindowDeregister")?;
        let e = ncclMemFree(plain.addr() as _);
        if e != ncclResult_t::ncclInvalidArgument {
            return Err(format!("ncclMemFree of memory not from ncclMemAlloc: {e:?}"));
        }
    }
    r.checks += 2;
    Ok(())
}

/// Copies device bytes (a plain driver copy).
///
/// # Safety
/// Both addresses valid for `bytes` on the current context.
unsafe fn cudarc_copy(dst: *mut c_void, src: u64, bytes: usize) -> ncclResult_t {
    // SAFETY: the caller's contract.
    let r = unsafe { cudarc::driver::sys::cuMemcpyDtoD_v2(dst as u64, src, bytes) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        ncclResult_t::ncclSuccess
    } else {
        ncclResult_t::ncclUnhandledCudaError
    }
}

/// Reads device memory into `out`.
///
/// # Safety
/// `src` is valid for `out`'s bytes on the current context.
unsafe fn cudarc_read(out: &mut [f32], src: *mut c_void) -> ncclResult_t {
    // SAFETY: the caller's contract.
    let r = unsafe { cudarc::driver::sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as _, src as u64, out.len() * 4) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        ncclResult_t::ncclSuccess
    } else {
        ncclResult_t::ncclUnhandledCudaError
    }
}
