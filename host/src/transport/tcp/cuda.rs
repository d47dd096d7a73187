//! The TCP transport's GPU memory sides: [`CudaSource`] copies put chunks out of GPU memory into
//! pinned staging slots, [`CudaLanding`] copies received chunks from pinned slots into GPU memory
//! and issues signals and atomic adds behind them. Each has a stream of its own; a slot is reused
//! only once the stream has passed the completion mark placed after its copy (a stream write
//! into pinned memory that the thread polls).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::TcpConfig;
use super::memory::{LandingMemory, Outgoing, SourceMemory, check_span};
use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;
use crate::memory::PinnedBuffer;
use crate::transport::engine::{CudaEngine, Engine, MemoryRegion};

/// Pinned staging slots and the mark each one waits for.
struct Slots {
    buffers: Vec<PinnedBuffer>,
    /// The mark after the last copy that used the slot (0: none).
    marks: Vec<u64>,
    /// Marks placed so far.
    placed: u64,
}

impl Slots {
    fn new(gpu: &Gpu, cfg: &TcpConfig) -> Result<Self> {
        cfg.validate()?;
        let buffers = (0..cfg.slots).map(|_| PinnedBuffer::zeroed(gpu, cfg.chunk_bytes)).collect::<Result<Vec<_>>>()?;
        Ok(Self { marks: vec![0; buffers.len()], buffers, placed: 0 })
    }

    fn check(&self, slot: usize, len: usize) -> Result<()> {
        match self.buffers.get(slot) {
            Some(b) if len <= b.len() => Ok(()),
            _ => Err(Error::InvalidArgument(format!("{len} bytes in staging slot {slot} of {}", self.buffers.len()))),
        }
    }

    /// The first `len` bytes of slot `slot` (checked by the caller).
    fn bytes(&mut self, slot: usize, len: usize) -> &mut [u8] {
        // SAFETY: the slot is `len` bytes or more of pinned memory this value owns; the stream's
        // copies from or into it are complete (the callers wait for the slot's mark first), so
        // nothing else accesses it while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.buffers[slot].host_ptr(), len) }
    }

    /// Places a mark after the work just enqueued for `slot`.
    fn mark(&mut self, engine: &mut CudaEngine, slot: usize) -> Result<()> {
        self.placed += 1;
        engine.place_mark(self.placed)?;
        self.marks[slot] = self.placed;
        Ok(())
    }

    /// Waits (until `deadline`) for the stream to pass slot `slot`'s mark; a failed stream is
    /// reported as soon as it is seen.
    fn wait(&self, engine: &mut CudaEngine, slot: usize, deadline: Instant) -> Result<()> {
        wait_for(engine, deadline, |e| e.marks_done() >= self.marks[slot])
    }
}

/// Spins (then yields) until `done`, checking the stream for errors now and then.
fn wait_for(engine: &mut CudaEngine, deadline: Instant, done: impl Fn(&CudaEngine) -> bool) -> Result<()> {
    let start = Instant::now();
    let mut spins = 0u32;
    while !done(engine) {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            // A stream that failed never passes its marks: report why instead of timing out.
            engine.is_idle()?;
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    after: start.elapsed(),
                    waiting_for: format!("a staging copy on GPU {}", engine.gpu.ordinal()),
                });
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// Waits for everything enqueued on `engine`, until `deadline`.
fn drain(engine: &mut CudaEngine, deadline: Instant) -> Result<()> {
    let start = Instant::now();
    loop {
        if engine.is_idle()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                after: start.elapsed(),
                waiting_for: format!("the TCP transport's copies on GPU {}", engine.gpu.ordinal()),
            });
        }
        std::thread::yield_now();
    }
}

/// A [`SourceMemory`] over GPU memory: puts read from the registered regions through pinned
/// staging slots, one device-to-host copy per chunk on a stream of its own.
pub struct CudaSource {
    engine: CudaEngine,
    regions: Vec<MemoryRegion>,
    slots: Slots,
}

impl CudaSource {
    /// A source reading from `regions` of `gpu`, with the slots of `cfg`.
    ///
    /// # Safety
    /// Every region is memory `gpu`'s context may read (its own, or mapped) and stays valid for
    /// as long as the source lives.
    pub unsafe fn new(gpu: &Arc<Gpu>, regions: Vec<MemoryRegion>, cfg: &TcpConfig) -> Result<Self> {
        Ok(Self { engine: CudaEngine::new(gpu)?, regions, slots: Slots::new(gpu, cfg)? })
    }
}

impl SourceMemory for CudaSource {
    fn bind(&mut self) -> Result<()> {
        self.engine.gpu.bind()
    }
    fn slots(&self) -> usize {
        self.slots.buffers.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slots.buffers[0].len()
    }
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()> {
        self.slots.check(slot, len)?;
        let inside = self.regions.iter().any(|r| {
            src.checked_sub(r.base).and_then(|off| off.checked_add(len as u64)).is_some_and(|end| end <= r.bytes)
        });
        if !inside {
            return Err(Error::InvalidArgument(format!("put source {src:#x}..+{len} is not in a registered region")));
        }
        let stream = self.engine.cu_stream();
        let dst = self.slots.bytes(slot, len);
        // SAFETY: the source range lies in a registered region (checked above; valid by the
        // constructor's contract); the slot is this value's pinned memory, free (its previous
        // copy was waited for before it was handed out again), and stays alive until the mark
        // placed below is passed.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, stream) }
            .ctx(|| format!("copying {len} bytes of a put out to pinned memory"))?;
        self.slots.mark(&mut self.engine, slot)
    }
    fn staged(&mut self, slot: usize, len: usize, deadline: Instant) -> Result<Outgoing<'_>> {
        self.slots.check(slot, len)?;
        self.slots.wait(&mut self.engine, slot, deadline)?;
        Ok(Outgoing::Staged(self.slots.bytes(slot, len)))
    }
}

impl Drop for CudaSource {
    fn drop(&mut self) {
        // No copy may still write into slots about to be freed.
        let _ = drain(&mut self.engine, Instant::now() + Duration::from_secs(10));
    }
}

/// A [`LandingMemory`] over GPU memory: received chunks land in the registered regions with one
/// host-to-device copy each; signals are stream writes of the semaphore's next value after them,
/// atomic adds the proxy's atomic add on the same stream.
pub struct CudaLanding {
    engine: CudaEngine,
    regions: Vec<MemoryRegion>,
    sizes: Vec<u64>,
    /// (counter address, signals so far).
    semaphores: Vec<(u64, u64)>,
    slots: Slots,
}

impl CudaLanding {
    /// A landing into `regions` of `gpu`, signalling the u64 counters at `semaphores`, with the
    /// slots of `cfg`.
    ///
    /// # Safety
    /// Every region is memory `gpu`'s context may write, every semaphore address an 8-aligned
    /// u64 it may write (GPU memory or device-mapped host memory) that nothing else writes, and
    /// all of it stays valid for as long as the landing lives.
    pub unsafe fn new(
        gpu: &Arc<Gpu>,
        regions: Vec<MemoryRegion>,
        semaphores: Vec<u64>,
        cfg: &TcpConfig,
    ) -> Result<Self> {
        if let Some(a) = semaphores.iter().find(|&&a| a == 0 || !a.is_multiple_of(8)) {
            return Err(Error::InvalidArgument(format!("bad semaphore address {a:#x}")));
        }
        Ok(Self {
            engine: CudaEngine::new(gpu)?,
            sizes: regions.iter().map(|r| r.bytes).collect(),
            regions,
            semaphores: semaphores.into_iter().map(|a| (a, 0)).collect(),
            slots: Slots::new(gpu, cfg)?,
        })
    }

    fn address(&self, region: u32, offset: u64, len: u64) -> Result<u64> {
        check_span(&self.sizes, region, offset, len).map_err(Error::InvalidArgument)?;
        Ok(self.regions[region as usize].base + offset)
    }
}

impl LandingMemory for CudaLanding {
    fn bind(&mut self) -> Result<()> {
        self.engine.gpu.bind()
    }
    fn regions(&self) -> &[u64] {
        &self.sizes
    }
    fn semaphores(&self) -> usize {
        self.semaphores.len()
    }
    fn slots(&self) -> usize {
        self.slots.buffers.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slots.buffers[0].len()
    }
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]> {
        let len = self.slot_bytes();
        self.slots.check(slot, len)?;
        self.slots.wait(&mut self.engine, slot, deadline)?;
        Ok(self.slots.bytes(slot, len))
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        self.slots.check(slot, len)?;
        let dst = self.address(region, offset, len as u64)?;
        let stream = self.engine.cu_stream();
        let src = self.slots.bytes(slot, len);
        // SAFETY: the destination lies inside a registered region (checked above; writable by
        // the constructor's contract); the slot is pinned memory of this value that the receiver
        // does not touch again before the mark placed below is passed.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, &*src, stream) }
            .ctx(|| format!("landing {len} bytes of a put"))?;
        self.slots.mark(&mut self.engine, slot)
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        let (addr, sent) = self
            .semaphores
            .get_mut(semaphore as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("semaphore {semaphore} is not registered")))?;
        *sent += 1;
        // Stream-ordered after the landings before it, with a memory barrier (partner: the
        // waiter's acquire load in Host2DeviceSemaphore::wait).
        self.engine.write_device(*addr, *sent)
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        if !offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {offset}")));
        }
        let addr = self.address(region, offset, 8)?;
        self.engine.atomic_add(addr, value)
    }
    fn wait_all(&mut self, deadline: Instant) -> Result<()> {
        drain(&mut self.engine, deadline)
    }
}

impl Drop for CudaLanding {
    fn drop(&mut self) {
        let _ = drain(&mut self.engine, Instant::now() + Duration::from_secs(10));
    }
}
