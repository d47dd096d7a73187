//! Switch-channel phases, on the emulated switch channel (`Communicator::switch_channels` returns
//! the emulation and says why: multicast objects are not yet shared between processes, and the
//! guard refuses multicast on machines where it is disabled).

use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, LaunchConfig};
use rand::RngExt;

use crate::{Ctx, POISON, PhaseResult, as_threads, barrier, comm, counted, e2s, ints, rng_for, run, same, upload};

use mscclpp_device::channel::switch::SwitchElem;
use mscclpp_device::vec::{Bf16x2, Bf16x8, F16x2, F16x8, F32x2, F32x4};

fn emulated(
    cm: &Communicator,
    buf: &DeviceBuffer,
    blocks: usize,
) -> Result<mscclpp_host::comm::EmulatedSwitchChannels, String> {
    let channels = cm.switch_channels(buf, blocks).map_err(e2s)?;
    if cm.rank() == 0 {
        println!("rank 0: switch channels emulated: {}", channels.reason());
    }
    Ok(channels)
}

/// Random finite values of each element type, from the shared seed.
pub(crate) trait Sample: SwitchElem + PartialEq + std::fmt::Debug {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self>;
}
fn floats(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    let mut rng = rng_for(seed, rank, 0, 30);
    (0..n).map(|_| rng.random_range(-64.0f32..64.0)).collect()
}
macro_rules! sample_lanes {
    ($($t:ty, $lanes:literal, $conv:expr;)*) => { $(
        impl Sample for $t {
            fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
                let f = floats(seed, rank, n * $lanes);
                f.chunks($lanes).map(|c| <$t>::from(std::array::from_fn::<_, $lanes, _>(|i| ($conv)(c[i])))).collect()
            }
        }
    )* };
}
sample_lanes! {
    F32x2, 2, |x: f32| x;
    F32x4, 4, |x: f32| x;
    F16x2, 2, half::f16::from_f32;
    F16x8, 8, half::f16::from_f32;
    Bf16x2, 2, half::bf16::from_f32;
    Bf16x8, 8, half::bf16::from_f32;
}
impl Sample for f32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        floats(seed, rank, n)
    }
}
impl Sample for u32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        ints(seed, rank, 31, n)
    }
}
impl Sample for i32 {
    fn sample(seed: u64, rank: usize, n: usize) -> Vec<Self> {
        ints(seed, rank, 32, n)
    }
}

fn reduce_broadcast_one<V: Sample>(c: &Ctx, cm: &Communicator, kernel: &str) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 4096usize;
    let mine = V::sample(c.seed, me, elems);
    let buf = DeviceBuffer::exportable_from_slice(&g, &mine).map_err(e2s)?;
    let input = upload(&g, &mine)?;
    let out = DeviceBuffer::filled(&g, elems * std::mem::size_of::<V>(), POISON).map_err(e2s)?;
    let chans = emulated(cm, &buf, 1)?;
    barrier(c)?;
    run(
        &g,
        kernel,
        LaunchConfig::new(1, 256),
        Args::new()
            .arg(chans.handles()[0])
            .arg(out.addr())
            .arg(input.addr())
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    let inputs: Vec<Vec<V>> = (0..n).map(|r| V::sample(c.seed, r, elems)).collect();
    let sum: Vec<V> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a.add(inputs[r][i]))).collect();
    same(&format!("{kernel}: reduce"), &out.to_vec::<V>().map_err(e2s)?, &sum)?;
    let mut gathered = Vec::with_capacity(elems);
    for (r, input) in inputs.iter().enumerate() {
        let (lo, hi) = (elems * r / n, elems * (r + 1) / n);
        gathered.extend_from_slice(&input[lo..hi]);
    }
    same(&format!("{kernel}: broadcast"), &buf.to_vec::<V>().map_err(e2s)?, &gathered)?;
    barrier(c)
}

/// Reduce and broadcast of every element type and width the switch channel supports, against a
/// host reference (sums in rank order, f16/bf16 rounded after every add like the device).
pub(crate) fn switch_reduce_broadcast(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    reduce_broadcast_one::<f32>(c, &cm, "emu_reduce_broadcast_f32")?;
    reduce_broadcast_one::<u32>(c, &cm, "emu_reduce_broadcast_u32")?;
    reduce_broadcast_one::<i32>(c, &cm, "emu_reduce_broadcast_i32")?;
    reduce_broadcast_one::<F32x2>(c, &cm, "emu_reduce_broadcast_f32x2")?;
    reduce_broadcast_one::<F32x4>(c, &cm, "emu_reduce_broadcast_f32x4")?;
    reduce_broadcast_one::<F16x2>(c, &cm, "emu_reduce_broadcast_f16x2")?;
    reduce_broadcast_one::<F16x8>(c, &cm, "emu_reduce_broadcast_f16x8")?;
    reduce_broadcast_one::<Bf16x2>(c, &cm, "emu_reduce_broadcast_bf16x2")?;
    reduce_broadcast_one::<Bf16x8>(c, &cm, "emu_reduce_broadcast_bf16x8")
}

/// The switch barrier of 4 blocks, 10,000 rounds (100 when processes share a GPU), each round
/// broadcasting data before the barrier and checking every rank's slot after it; the kernel
/// reports how many slots it checked.
pub(crate) fn switch_barrier(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, g) = (cm.world_size(), cm.gpu().clone());
    let blocks = 4usize;
    let rounds: u32 = if c.boot.local_size() <= c.gpu_count || as_threads(c) { 10_000 } else { 100 };
    let buf = DeviceBuffer::exportable_filled(&g, blocks * n * 2 * 4, 0).map_err(e2s)?;
    let chans = emulated(&cm, &buf, blocks)?;
    let table = upload(&g, chans.handles())?;
    let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
    barrier(c)?;
    run(
        &g,
        "emu_barrier_rounds",
        LaunchConfig::new(blocks as u32, 64),
        Args::new()
            .arg(table.addr())
            .arg(rounds)
            .arg(report.addr())
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    // Every block, every round, every rank's slot.
    counted(&format!("slots after {rounds} switch barriers"), &report, (blocks * n) as u64 * rounds as u64)?;
    barrier(c)
}

fn switch_allreduce_one<V: Sample>(c: &Ctx, cm: &Communicator, kernel: &str) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = (4 << 20) / std::mem::size_of::<V>();
    let buf = DeviceBuffer::exportable_from_slice(&g, &V::sample(c.seed, me, elems)).map_err(e2s)?;
    let blocks = 8usize;
    let chans = emulated(cm, &buf, blocks)?;
    let table = upload(&g, chans.handles())?;
    barrier(c)?;
    run(
        &g,
        kernel,
        LaunchConfig::new(blocks as u32, 256),
        Args::new()
            .arg(table.addr())
            .arg(me as u32)
            .arg(n as u32)
            .arg(mscclpp_device::poll::SpinBudget::from_millis(20_000)),
    )?;
    let inputs: Vec<Vec<V>> = (0..n).map(|r| V::sample(c.seed, r, elems)).collect();
    let sum: Vec<V> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a.add(inputs[r][i]))).collect();
    same(kernel, &buf.to_vec::<V>().map_err(e2s)?, &sum)?;
    barrier(c)
}

/// The allreduce kernel written against the switch-channel API (`SwitchGroup`), run on the
/// emulated channel: 4 MiB of f32 and of bf16, in place.
pub(crate) fn switch_allreduce(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    switch_allreduce_one::<F32x4>(c, &cm, "emu_allreduce_f32x4")?;
    switch_allreduce_one::<Bf16x8>(c, &cm, "emu_allreduce_bf16x8")
}
