//! The host proxy: a thread that pops triggers from a [`Fifo`] and executes them.
//!
//! * **Data**: copy `size` bytes between two registered memories (`cuMemcpyDtoDAsync`; with peer
//!   access or CUDA IPC mappings the copy engine moves them over NVLink).
//! * **Flag**: write the next value of a registered semaphore counter, after the copies before
//!   it. A counter in the peer's GPU memory ([`ProxyBuilder::add_semaphore`]) is written by the
//!   stream (`cuStreamWriteValue64`). A counter in host memory the peer's GPU reads
//!   ([`ProxyBuilder::add_host_semaphore`]) is written by the proxy thread itself: at once when
//!   no copy is in flight, else once the stream has passed a completion mark placed after the
//!   copies (a stream write into this proxy's pinned memory that the thread polls). A signal
//!   with no copy in flight then needs no driver call at all (port-channel signal ping-pong
//!   5.9 us instead of 13.0 us, NOTES.md); after a copy the mark costs what the stream write did.
//! * **Sync**: wait for the stream (every earlier request complete), then publish the position.
//! * **Atomic add** (type 0): add a u64 at an offset of a registered memory (a one-thread kernel).
//!
//! Everything runs on one non-blocking stream of the proxy's GPU, so requests complete in FIFO
//! order and a Flag never overtakes the data before it. The tail (positions handled) is published
//! after each request; for a Sync, only after the stream has drained.
//!
//! A failed request (bad memory id, range outside a memory, driver error) stops the proxy and is
//! kept: [`ProxyService::check`] and [`ProxyService::stop`] return it. Kernels waiting on the proxy
//! then run out of their spin budget and trap; nothing hangs. Dropping the service stops and joins
//! the thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use cudarc::driver::sys;
use mscclpp_device::fifo::{FifoDeviceHandle, MAX_MEMORY_ID, MAX_SEMAPHORE_ID, Request, kind};

use crate::error::{DriverContext, Error, Result, check};
use crate::fifo::{DEFAULT_FIFO_SIZE, Fifo};
use crate::gpu::Gpu;
use crate::launch::{Args, LaunchConfig, launch_on};
use crate::memory::PinnedBuffer;

const ATOMIC_ADD_PTX: &str = include_str!("proxy_atomic_add.ptx");

/// The PTX of the proxy's atomic-add kernel (exposed for the ptxas check).
pub fn atomic_add_ptx() -> &'static str {
    ATOMIC_ADD_PTX
}

/// A memory region the proxy may copy from or to: an address valid in this process on the
/// proxy's GPU (its own memory, a peer's with peer access, or an imported IPC mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// Device address.
    pub base: u64,
    /// Size in bytes.
    pub bytes: u64,
}

/// Identifies a registered memory in triggers (9 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryId(pub u32);

/// Identifies a registered semaphore in triggers (10 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemaphoreId(pub u32);

/// A 64-bit semaphore counter in host memory that a GPU reads (device-mapped pinned memory), as
/// the proxy thread writes it. Holds what keeps the memory alive.
#[derive(Clone)]
pub struct HostCounter {
    word: *const AtomicU64,
    _owner: Arc<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the word is plain host memory kept alive by `_owner` (Send + Sync); it is accessed
// only through atomics.
unsafe impl Send for HostCounter {}
// SAFETY: as above.
unsafe impl Sync for HostCounter {}

impl std::fmt::Debug for HostCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostCounter({:p})", self.word)
    }
}

/// The device address of `offset..offset + bytes` of registered memory `id`, checked to lie inside
/// it (the values come from a GPU trigger and are not trusted).
fn resolve(memories: &[MemoryRegion], id: u32, offset: u32, bytes: u64, what: &str) -> Result<u64> {
    let m = memories
        .get(id as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} memory id {id} is not registered")))?;
    let end = u64::from(offset).checked_add(bytes);
    match end {
        Some(end) if end <= m.bytes => m.base.checked_add(u64::from(offset)).ok_or_else(|| {
            Error::InvalidArgument(format!("{what} offset {offset} overflows memory {id} at {:#x}", m.base))
        }),
        _ => Err(Error::InvalidArgument(format!(
            "{what} range {offset}..+{bytes} outside memory {id} of {} bytes",
            m.bytes
        ))),
    }
}

/// Checks that a u64 counter at byte `offset` lies inside a buffer of `len` bytes and is
/// 8-aligned. The end is computed with checked arithmetic: an offset close to `usize::MAX` must
/// not wrap around and pass the bound.
fn check_counter_offset(offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(8) {
        Some(end) if offset.is_multiple_of(8) && end <= len => Ok(()),
        _ => Err(Error::InvalidArgument(format!("host counter at offset {offset} of a {len}-byte pinned buffer"))),
    }
}

impl HostCounter {
    /// The u64 at byte `offset` of `buf` (8-aligned, inside the buffer).
    pub fn pinned(buf: Arc<PinnedBuffer>, offset: usize) -> Result<Self> {
        check_counter_offset(offset, buf.len())?;
        // SAFETY: inside the buffer (checked), which `_owner` keeps alive.
        let word = unsafe { buf.host_ptr().add(offset) }.cast::<AtomicU64>().cast_const();
        Ok(Self { word, _owner: buf })
    }

    /// A word of host memory owned by `owner`.
    ///
    /// # Safety
    /// `word` must be 8-aligned, valid for reads and writes as long as `owner` lives, and the
    /// counter of one semaphore (written only by the proxy it is registered with).
    pub unsafe fn from_raw(word: *mut u64, owner: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        Self { word: word.cast::<AtomicU64>().cast_const(), _owner: owner }
    }

    /// The current value.
    pub fn load(&self) -> u64 {
        // SAFETY: valid while `_owner` lives (constructors' contracts).
        unsafe { (*self.word).load(Ordering::Acquire) }
    }

    fn store(&self, value: u64) {
        // Partner: the GPU's acquire load in Host2DeviceSemaphore::wait/poll.
        // SAFETY: as for `load`.
        unsafe { (*self.word).store(value, Ordering::Release) }
    }
}

/// Where a Flag request writes.
#[derive(Clone, Debug)]
enum Target {
    /// A device address, written by the stream.
    Device(u64),
    /// A host word, written by the proxy thread.
    Host(HostCounter),
}

/// Collects what a proxy serves, then starts it.
pub struct ProxyBuilder {
    gpu: Arc<Gpu>,
    fifo_size: u32,
    memories: Vec<MemoryRegion>,
    semaphores: Vec<Target>,
}

impl ProxyBuilder {
    /// A proxy for kernels running on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Self {
        Self { gpu: gpu.clone(), fifo_size: DEFAULT_FIFO_SIZE, memories: Vec::new(), semaphores: Vec::new() }
    }

    /// The FIFO size (a power of two; default 512).
    pub fn fifo_size(mut self, size: u32) -> Self {
        self.fifo_size = size;
        self
    }

    /// Registers a memory region; its id goes into channels' triggers.
    pub fn add_memory(&mut self, region: MemoryRegion) -> Result<MemoryId> {
        if self.memories.len() as u32 > MAX_MEMORY_ID {
            return Err(Error::InvalidArgument(format!("a proxy serves at most {} memories", MAX_MEMORY_ID + 1)));
        }
        if region.base == 0 || region.base.checked_add(region.bytes).is_none() {
            return Err(Error::InvalidArgument(format!("bad memory region {region:?}")));
        }
        self.memories.push(region);
        Ok(MemoryId(self.memories.len() as u32 - 1))
    }

    /// Registers the address of a peer's host-to-device semaphore counter (the `inbound` of a
    /// `Host2DeviceSemaphore` on the peer, mapped here). A Flag request increments it.
    pub fn add_semaphore(&mut self, remote_inbound: u64) -> Result<SemaphoreId> {
        if remote_inbound == 0 || remote_inbound % 8 != 0 {
            return Err(Error::InvalidArgument(format!("bad semaphore address {remote_inbound:#x}")));
        }
        self.push_semaphore(Target::Device(remote_inbound))
    }

    /// Registers a semaphore counter in host memory that the peer's GPU polls (the `inbound` of
    /// its `Host2DeviceSemaphore` points at the same word's device mapping). The proxy thread
    /// writes it directly once the copies before the Flag have completed.
    pub fn add_host_semaphore(&mut self, counter: HostCounter) -> Result<SemaphoreId> {
        self.push_semaphore(Target::Host(counter))
    }

    fn push_semaphore(&mut self, target: Target) -> Result<SemaphoreId> {
        if self.semaphores.len() as u32 > MAX_SEMAPHORE_ID {
            return Err(Error::InvalidArgument(format!("a proxy serves at most {} semaphores", MAX_SEMAPHORE_ID + 1)));
        }
        self.semaphores.push(target);
        Ok(SemaphoreId(self.semaphores.len() as u32 - 1))
    }

    /// Creates the FIFO and starts the proxy thread.
    pub fn start(self) -> Result<ProxyService> {
        let fifo = Fifo::new(&self.gpu, self.fifo_size)?;
        let handle = fifo.device_handle();
        let stream = self.gpu.new_stream()?;
        // Load the atomic-add kernel now, so a bad module is an error here and not in the thread.
        let atomic_add = self.gpu.function(ATOMIC_ADD_PTX, "mscclpp_proxy_atomic_add")?;
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let worker = Worker {
            gpu: self.gpu.clone(),
            fifo,
            stream,
            atomic_add,
            memories: self.memories,
            semaphores: self.semaphores.into_iter().map(|t| (t, 0)).collect(),
            marks: PinnedBuffer::zeroed(&self.gpu, 8)?,
            marks_issued: 0,
            unmarked_work: false,
            pending: VecDeque::new(),
        };
        let (s, e) = (stop.clone(), error.clone());
        let thread = std::thread::Builder::new()
            .name(format!("mscclpp-proxy-gpu{}", self.gpu.ordinal()))
            .spawn(move || worker.run(&s, &e))
            .map_err(|source| Error::Io { context: "starting the proxy thread".into(), source })?;
        Ok(ProxyService { fifo: handle, stop, error, thread: Some(thread), parked: None })
    }
}

/// A running proxy. Drop stops it and joins its thread, then frees the FIFO: drop it only once
/// no kernel uses its channels any more.
pub struct ProxyService {
    fifo: FifoDeviceHandle,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<Error>>>,
    thread: Option<JoinHandle<Worker>>,
    /// The stopped worker (FIFO memory included), kept until the service is dropped.
    parked: Option<Worker>,
}

impl std::fmt::Debug for ProxyService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyService").field("fifo", &self.fifo).finish_non_exhaustive()
    }
}

impl ProxyService {
    /// The FIFO handle kernels push to (also inside every port channel of this proxy).
    pub fn fifo_handle(&self) -> FifoDeviceHandle {
        self.fifo
    }

    /// The first error the proxy hit, if any (the proxy stops at it).
    pub fn check(&self) -> Result<()> {
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether the proxy thread is still serving.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread, joins it, and returns the error it hit, if any.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown();
        self.check()
    }

    /// Stops and joins the thread but keeps the FIFO's memory until the service is dropped:
    /// kernels pushing afterwards are not served and their waits run out of budget.
    pub fn stop_serving(&mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(w) => self.parked = Some(w),
                Err(_) => {
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Error::Proxy("proxy thread panicked".into()))
                }
            }
        }
    }
}

impl Drop for ProxyService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Worker {
    gpu: Arc<Gpu>,
    fifo: Fifo,
    stream: Arc<cudarc::driver::CudaStream>,
    atomic_add: cudarc::driver::CudaFunction,
    memories: Vec<MemoryRegion>,
    /// (where the counter is, signals sent so far).
    semaphores: Vec<(Target, u64)>,
    /// Completion marks: the stream writes mark n here once the work before it has completed.
    marks: PinnedBuffer,
    /// Marks submitted so far.
    marks_issued: u64,
    /// Whether work was submitted since the last mark.
    unmarked_work: bool,
    /// Host-counter writes waiting for a mark: (mark, semaphore index, value), in request order.
    pending: VecDeque<(u64, usize, u64)>,
}

// SAFETY: the worker's CUDA handles are used only by the proxy thread after the move.
unsafe impl Send for Worker {}

impl Worker {
    /// Serves until told to stop or a request fails; returns itself so the FIFO memory outlives
    /// the thread.
    fn run(mut self, stop: &AtomicBool, error: &Mutex<Option<Error>>) -> Self {
        if let Err(e) = self.gpu.bind() {
            *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            return self;
        }
        self.serve(stop, error);
        self
    }

    fn serve(&mut self, stop: &AtomicBool, error: &Mutex<Option<Error>>) {
        let mut idle: u32 = 0;
        loop {
            if !self.pending.is_empty() {
                self.retire(self.marks_done());
            }
            match self.fifo.peek() {
                Some(t) => {
                    idle = 0;
                    let pos = self.fifo.position();
                    if let Err(e) = self.execute(t.decode()) {
                        *error.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(Error::Proxy(format!("GPU {} FIFO position {pos}: {e}", self.gpu.ordinal())));
                        return;
                    }
                    self.fifo.complete();
                }
                None => {
                    if stop.load(Ordering::Acquire) {
                        // Signals still waiting for their copies are delivered, not dropped.
                        if !self.pending.is_empty() {
                            match self.stream.synchronize() {
                                Ok(()) => self.retire(u64::MAX),
                                Err(e) => {
                                    *error.lock().unwrap_or_else(|p| p.into_inner()) =
                                        Some(Error::Proxy(format!("draining the proxy stream at stop: {e}")))
                                }
                            }
                        }
                        return;
                    }
                    if !self.pending.is_empty() {
                        // A signal is waiting for its copy: keep polling the marks.
                        idle = 0;
                        continue;
                    }
                    // Spin briefly (lowest latency), then yield the core.
                    idle = idle.saturating_add(1);
                    if idle < 4096 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }

    /// The last completion mark the stream has passed.
    fn marks_done(&self) -> u64 {
        // SAFETY: 8 bytes of pinned memory owned by this worker, 8-aligned.
        let w = unsafe { AtomicU64::from_ptr(self.marks.host_ptr().cast()) };
        // Partner: the stream's write of the mark, after the copies (with a memory barrier).
        w.load(Ordering::Acquire)
    }

    /// Writes the pending host counters whose mark is at most `done`, in order.
    fn retire(&mut self, done: u64) {
        while let Some(&(mark, sem, value)) = self.pending.front() {
            if mark > done {
                break;
            }
            if let Target::Host(c) = &self.semaphores[sem].0 {
                c.store(value);
            }
            self.pending.pop_front();
        }
    }

    fn memory(&self, id: u32, offset: u32, bytes: u64, what: &str) -> Result<u64> {
        resolve(&self.memories, id, offset, bytes, what)
    }

    fn execute(&mut self, req: Request) -> Result<()> {
        let s = self.stream.cu_stream();
        match req {
            Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                if k & kind::DATA != 0 && size > 0 {
                    let src = self.memory(src_memory, src_offset, size as u64, "source")?;
                    let dst = self.memory(dst_memory, dst_offset, size as u64, "destination")?;
                    // SAFETY: both ranges lie inside registered memories valid in this context.
                    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, size as usize, s) }
                        .ctx(|| format!("copying {size} bytes"))?;
                    self.unmarked_work = true;
                }
                let flag = if k & kind::FLAG != 0 {
                    let (target, sent) = self
                        .semaphores
                        .get_mut(semaphore as usize)
                        .ok_or_else(|| Error::InvalidArgument(format!("semaphore id {semaphore} is not registered")))?;
                    *sent += 1;
                    Some((target.clone(), *sent))
                } else {
                    None
                };
                match flag {
                    None => {}
                    Some((Target::Device(addr), value)) => {
                        // Stream-ordered after the copies above; the default flags include a memory
                        // barrier, so the peer sees the data before the counter (partner: the peer's
                        // acquire load in Host2DeviceSemaphore::wait).
                        // SAFETY: the address was registered as a mapped u64 counter.
                        let r = unsafe { sys::cuStreamWriteValue64_v2(s, addr, value, 0) };
                        check(r, || format!("signalling semaphore {semaphore}"))?;
                    }
                    Some((Target::Host(c), value)) => {
                        if self.unmarked_work {
                            // Mark the stream after the work so far; the write waits for the mark.
                            self.marks_issued += 1;
                            // SAFETY: the marks word is this worker's device-mapped pinned memory.
                            let r = unsafe {
                                sys::cuStreamWriteValue64_v2(s, self.marks.device_addr(), self.marks_issued, 0)
                            };
                            check(r, || "placing a completion mark".into())?;
                            self.unmarked_work = false;
                        }
                        if self.pending.is_empty() && self.marks_done() >= self.marks_issued {
                            c.store(value);
                        } else {
                            self.pending.push_back((self.marks_issued, semaphore as usize, value));
                        }
                    }
                }
                if k & kind::SYNC != 0 {
                    self.stream.synchronize().ctx(|| "draining the proxy stream".into())?;
                    self.retire(u64::MAX);
                }
            }
            Request::AtomicAdd { value, dst_offset, dst_memory } => {
                if dst_offset % 8 != 0 {
                    return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {dst_offset}")));
                }
                let dst = self.memory(dst_memory, dst_offset, 8, "atomic add")?;
                let mut args = Args::new().arg(dst).arg(value);
                // SAFETY: the kernel takes (u64 address, u64 value); the address is a registered u64.
                unsafe { launch_on(&self.gpu, &self.stream, &self.atomic_add, LaunchConfig::new(1, 1), &mut args) }?;
                self.unmarked_work = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{MemoryRegion, check_counter_offset, resolve};
    use mscclpp_device::fifo::{MAX_MEMORY_ID, MAX_SEMAPHORE_ID, ProxyTrigger, Request, kind};
    use proptest::prelude::*;

    proptest! {
        /// Any 128 bits the GPU may leave in a slot decode without panicking to fields in range,
        /// and the proxy's bounds check accepts only ranges inside a registered memory.
        #[test]
        fn arbitrary_triggers_decode_and_resolve_safely(
            fst: u64,
            snd: u64,
            regions in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..4),
        ) {
            let memories: Vec<MemoryRegion> = regions
                .iter()
                .map(|&(base, bytes)| MemoryRegion { base: base.min(u64::MAX - bytes), bytes })
                .collect();
            let check = |id: u32, offset: u32, bytes: u64| {
                if let Ok(addr) = resolve(&memories, id, offset, bytes, "test") {
                    let m = memories[id as usize];
                    assert!(addr >= m.base && addr - m.base + bytes <= m.bytes);
                }
            };
            match (ProxyTrigger { fst, snd }).decode() {
                Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                    prop_assert!(k != 0 && k & !(kind::DATA | kind::FLAG | kind::SYNC) == 0);
                    prop_assert!(src_memory <= MAX_MEMORY_ID && dst_memory <= MAX_MEMORY_ID);
                    prop_assert!(semaphore <= MAX_SEMAPHORE_ID);
                    // What decodes re-encodes to the same request.
                    let again = ProxyTrigger::transfer(
                        k, size as u64, src_offset as u64, dst_offset as u64, src_memory, dst_memory, semaphore,
                    );
                    prop_assert_eq!(again.map(|t| t.decode()), Ok((ProxyTrigger { fst, snd }).decode()));
                    check(src_memory, src_offset, size as u64);
                    check(dst_memory, dst_offset, size as u64);
                }
                Request::AtomicAdd { dst_offset, dst_memory, .. } => {
                    prop_assert!(dst_memory <= MAX_MEMORY_ID);
                    check(dst_memory, dst_offset, 8);
                }
            }
        }

        #[test]
        fn resolve_never_wraps(base: u64, bytes: u64, offset: u32, len: u64) {
            let m = [MemoryRegion { base, bytes }];
            if let Ok(addr) = resolve(&m, 0, offset, len, "test") {
                prop_assert!(u64::from(offset).checked_add(len).is_some_and(|end| end <= bytes));
                prop_assert_eq!(Some(addr), base.checked_add(u64::from(offset)));
            }
        }
    }

    #[test]
    fn counter_offset_is_bounded_without_wrapping() {
        assert!(check_counter_offset(0, 8).is_ok());
        assert!(check_counter_offset(8, 16).is_ok());
        assert!(check_counter_offset(8, 15).is_err());
        assert!(check_counter_offset(4, 64).is_err());
        // `offset + 8` wraps to 0 here: the bound must still reject it (and not overflow).
        assert!(check_counter_offset(usize::MAX - 7, 64).is_err());
        assert!(check_counter_offset(usize::MAX - 7, usize::MAX).is_err());
        assert!(check_counter_offset(usize::MAX, usize::MAX).is_err());
    }
}
