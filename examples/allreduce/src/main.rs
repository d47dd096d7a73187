//! Allgather and allreduce (f32 sum) between two GPUs of this process over memory channels, with
//! LL packets for small messages and `put` + signal for large ones. Every result is checked
//! against a host reference; the program exits non-zero on a mismatch. With fewer than two GPUs
//! it says so and exits 0.
//!
//! The kernels are in `kernels/` (built to PTX by `build.rs`). [`Comm::connect`] is the only
//! part that knows the two buffers live in one process: a multi-process version would build the
//! same handles from the buffers' exchanged addresses.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::packet::{LL16Packet, packet_bytes};
use mscclpp_device::sync::DeviceSyncer;
use mscclpp_host::channel::{MemoryChannelStorage, memory_channel_pair};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig, Result};

const PTX: &str = include_str!(env!("ALLREDUCE_KERNELS_PTX"));

/// Messages up to this size go as LL packets.
const SMALL_MAX: usize = 64 << 10;
/// The largest message of the run.
const LARGE: usize = 16 << 20;
/// Each GPU's buffer: two chunks of an allgather, or values + scratch of an allreduce.
const BUF_BYTES: usize = 2 * LARGE;

/// The two ranks' channel handles and what they point to.
struct Comm {
    gpus: [Arc<Gpu>; 2],
    chans: [MemoryChannel; 2],
    syncers: [DeviceBuffer; 2],
    /// The flag of the last packet operation (both ranks count the same way).
    flag: u32,
    _storage: MemoryChannelStorage,
}

impl Comm {
    /// Connects rank 0's buffer `buf0` with rank 1's `buf1`: a memory channel each way, a packet
    /// buffer with room for two operations of `SMALL_MAX` bytes, and a grid barrier per GPU.
    fn connect(buf0: &DeviceBuffer, buf1: &DeviceBuffer) -> Result<Self> {
        let packet_buffer = 2 * packet_bytes::<LL16Packet>(SMALL_MAX as u64) as usize;
        let (c0, c1, storage) = memory_channel_pair(buf0, buf1, packet_buffer)?;
        let gpus = [buf0.gpu().clone(), buf1.gpu().clone()];
        let syncers = [
            DeviceBuffer::filled(&gpus[0], size_of::<DeviceSyncer>(), 0)?,
            DeviceBuffer::filled(&gpus[1], size_of::<DeviceSyncer>(), 0)?,
        ];
        Ok(Self { gpus, chans: [c0, c1], syncers, flag: 0, _storage: storage })
    }

    /// Runs kernel `name` on both GPUs (rank r gets `args(r)`), cooperatively for the grid-barrier
    /// kernels, and waits for both. Returns the wall time.
    fn run(&self, name: &str, cooperative: bool, args: impl Fn(usize) -> Args) -> Result<f64> {
        let t = Instant::now();
        for (r, g) in self.gpus.iter().enumerate() {
            let cfg = if cooperative { LaunchConfig::new(g.info().sm_count, 512) } else { LaunchConfig::new(16, 256) };
            // SAFETY: `args` matches the kernel's parameters (see `kernels/src/lib.rs`), and the
            // buffers behind the handles live as long as `self`.
            unsafe {
                if cooperative {
                    g.launch_cooperative(PTX, name, cfg, args(r))?
                } else {
                    g.launch(PTX, name, cfg, args(r))?
                }
            }
        }
        self.gpus[0].synchronize()?;
        self.gpus[1].synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    }

    /// A new flag for the next packet operation (never 0).
    fn next_flag(&mut self) -> u32 {
        self.flag = self.flag.wrapping_add(1).max(1);
        self.flag
    }
}

/// Deterministic pseudo-random words (xorshift64*), seeded per run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
    }
}

fn report(what: &str, bytes: usize, how: &str, us: f64, bad: usize) -> bool {
    let verdict = if bad == 0 { "ok".to_string() } else { format!("MISMATCH in {bad} elements") };
    println!("{what:<10} {bytes:>9} B  {how:<12} {us:>9.1} us  {verdict}");
    bad == 0
}

fn allgather(comm: &mut Comm, bufs: &[DeviceBuffer; 2], rng: &mut Rng, bytes: usize) -> Result<bool> {
    let inputs = [rng.bytes(bytes), rng.bytes(bytes)];
    for r in 0..2 {
        bufs[r].fill(0xA5)?;
        bufs[r].write(r * bytes, &inputs[r])?;
    }
    let (us, how) = if bytes <= SMALL_MAX {
        let flag = comm.next_flag();
        let chans = comm.chans;
        let us = comm
            .run("allgather_packets", false, |r| Args::new().arg(chans[r]).arg(r as u32).arg(bytes as u64).arg(flag))?;
        (us, "LL packets")
    } else {
        let (chans, syncers) = (comm.chans, [comm.syncers[0].ptr::<DeviceSyncer>(), comm.syncers[1].ptr()]);
        let us = comm.run("allgather_put", true, |r| {
            Args::new().arg(chans[r]).arg(syncers[r]).arg(r as u32).arg(bytes as u64)
        })?;
        (us, "put + signal")
    };
    let want = [inputs[0].as_slice(), inputs[1].as_slice()].concat();
    let mut bad = 0;
    for buf in bufs {
        let mut got = vec![0u8; 2 * bytes];
        buf.read(0, &mut got)?;
        bad += got.iter().zip(&want).filter(|(a, b)| a != b).count();
    }
    Ok(report("allgather", bytes, how, us, bad))
}

fn allreduce(comm: &mut Comm, bufs: &[DeviceBuffer; 2], rng: &mut Rng, bytes: usize) -> Result<bool> {
    let n = bytes / 4;
    let inputs = [rng.floats(n), rng.floats(n)];
    for r in 0..2 {
        bufs[r].fill(0xA5)?;
        bufs[r].write(0, &inputs[r])?;
    }
    let (us, how) = if bytes <= SMALL_MAX {
        let flag = comm.next_flag();
        let chans = comm.chans;
        let us = comm.run("allreduce_packets", false, |r| Args::new().arg(chans[r]).arg(n as u64).arg(flag))?;
        (us, "LL packets")
    } else {
        let (chans, syncers) = (comm.chans, [comm.syncers[0].ptr::<DeviceSyncer>(), comm.syncers[1].ptr()]);
        let us = comm.run("allreduce_put", true, |r| Args::new().arg(chans[r]).arg(syncers[r]).arg(n as u64))?;
        (us, "put + signal")
    };
    // f32 addition is commutative, so both ranks and the host get the same bits.
    let want: Vec<f32> = inputs[0].iter().zip(&inputs[1]).map(|(a, b)| a + b).collect();
    let mut bad = 0;
    for buf in bufs {
        let mut got = vec![0f32; n];
        buf.read(0, &mut got)?;
        bad += got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    }
    Ok(report("allreduce", bytes, how, us, bad))
}

/// Runs everything; `None` when there are not two GPUs.
fn run() -> Result<Option<bool>> {
    let inv = mscclpp_host::gpu::inventory();
    if inv.devices.len() < 2 {
        let why = inv.reason.unwrap_or_else(|| format!("found {}", inv.devices.len()));
        println!("allreduce example: skipped: needs 2 GPUs ({why})");
        return Ok(None);
    }
    let gpus = [Gpu::open(0)?, Gpu::open(1)?];
    let bufs = [DeviceBuffer::alloc(&gpus[0], BUF_BYTES)?, DeviceBuffer::alloc(&gpus[1], BUF_BYTES)?];
    let mut comm = Comm::connect(&bufs[0], &bufs[1])?;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let mut rng = Rng(seed | 1);
    println!("allreduce example: GPUs 0 and 1, seed {seed:#x}");
    let mut ok = true;
    for bytes in [8 << 10, SMALL_MAX, LARGE] {
        ok &= allgather(&mut comm, &bufs, &mut rng, bytes)?;
        ok &= allreduce(&mut comm, &bufs, &mut rng, bytes)?;
    }
    Ok(Some(ok))
}

fn main() -> ExitCode {
    match run() {
        // The GPU runner sets this: there, a skip is a failure.
        Ok(None) if std::env::var("MSCCLPP_RS_REQUIRE_GPU").is_ok_and(|v| v == "1") => ExitCode::FAILURE,
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(true)) => {
            println!("allreduce example: RESULT ok");
            ExitCode::SUCCESS
        }
        Ok(Some(false)) => {
            eprintln!("allreduce example: RESULT FAILED: results differ from the host reference");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("allreduce example: RESULT FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
