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
//!   with no copy in flight then needs no driver call at all, which makes a signal ping-pong
//!   faster than through a stream write (`benches/sync.rs` measures both); after a copy the mark
//!   costs what the stream write did.
//! * **Sync**: wait for the stream (every earlier request complete), then publish the position.
//! * **Atomic add** (type 0): add a u64 at an offset of a registered memory, in stream order
//!   after the earlier requests: the driver's stream memory operation (an atomic reduction after
//!   a system-scope barrier, no kernel launch) where the device supports it, else a one-thread
//!   kernel (chosen once per proxy: [`AtomicAddPath`], overridden by [`ATOMIC_ADD_ENV`]).
//!
//! Everything runs on one non-blocking stream of the proxy's GPU, so requests complete in FIFO
//! order and a Flag never overtakes the data before it. The tail (positions handled) is published
//! after each request; for a Sync, only after the stream has drained.
//!
//! That is the CUDA IPC path, one [`Transport`]: the memories and semaphores registered with
//! [`ProxyBuilder::add_memory`] and [`ProxyBuilder::add_semaphore`] are mapped into this process.
//! A peer on another machine (or any peer, with `MSCCLPP_RS_TRANSPORT=tcp`) is served by a transport of its own
//! ([`ProxyBuilder::add_transport`], e.g. [`crate::transport::tcp::TcpTransport`]), whose memories
//! and semaphores are registered with [`ProxyBuilder::add_remote_memory`] and
//! [`ProxyBuilder::add_remote_semaphore`]; triggers name both kinds by id alike. A channel's
//! memory and semaphore belong to one transport, which keeps its signals after its puts; a Sync
//! waits for every transport used since the last one.
//!
//! A failed request (bad memory id, range outside a memory, driver error) stops the proxy and is
//! kept: [`ProxyService::check`] and [`ProxyService::stop`] return it (a dropped service writes it
//! to stderr). Kernels waiting on the proxy then run out of their spin budget and trap; nothing
//! hangs. Whether it stops on an error or because it was told to, the thread first waits for its
//! stream (no copy stays in flight into memory that is about to be unmapped) and writes every
//! host signal still waiting for its copies; a kernel that keeps pushing, or a stream that does
//! not complete, within the drain timeout makes the stop return an error instead of blocking.
//! Dropping the service stops and joins the thread.
//!
//! While the FIFO is empty the thread spins for a short while, then sleeps in growing steps up to
//! a cap ([`IdlePolicy`]), so an idle proxy does not hold a core; [`ProxyBuilder::pin_to_cpu`]
//! keeps it on one CPU.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use mscclpp_device::fifo::FifoDeviceHandle;
use mscclpp_device::trigger::{MAX_MEMORY_ID, MAX_SEMAPHORE_ID, ProxyTrigger, Request, kind};
use nix::libc;
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use crate::error::{DriverContext, Error, Result, check};
use crate::fifo::{DEFAULT_FIFO_SIZE, Fifo};
use crate::gpu::Gpu;
use crate::memory::PinnedBuffer;
use crate::transport::{RemoteSpan, Transport};

mod atomic_add;
use atomic_add::AtomicAdd;
pub use atomic_add::{AtomicAddPath, ENV_VAR as ATOMIC_ADD_ENV};

/// The PTX of the proxy's atomic-add fallback kernel (exposed for the ptxas check).
pub fn atomic_add_ptx() -> &'static str {
    atomic_add::PTX
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
fn resolve(memories: &[MemoryRegion], id: u32, offset: u64, bytes: u64, what: &str) -> Result<u64> {
    let m = memories
        .get(id as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} memory id {id} is not registered")))?;
    let end = offset.checked_add(bytes);
    match end {
        Some(end) if end <= m.bytes => m.base.checked_add(offset).ok_or_else(|| {
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

/// How the proxy thread waits when the FIFO is empty: it spins for [`IdlePolicy::spin`] after the
/// last trigger (a burst of port-channel operations is served at spin latency), then sleeps in
/// steps that double from [`IdlePolicy::min_sleep`] up to [`IdlePolicy::max_sleep`]. An idle proxy
/// thus costs a few wake-ups per millisecond instead of a core, and a trigger pushed while it
/// sleeps waits at most about `max_sleep` (plus the scheduler's wake-up time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// How long to spin after the last trigger before the first sleep.
    pub spin: Duration,
    /// The first sleep.
    pub min_sleep: Duration,
    /// The longest sleep (bounds the wake-up latency of an idle proxy).
    pub max_sleep: Duration,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        Self {
            spin: Duration::from_micros(100),
            min_sleep: Duration::from_micros(1),
            max_sleep: Duration::from_micros(50),
        }
    }
}

impl IdlePolicy {
    /// A policy that never sleeps (spins, yielding the core now and then): the lowest latency,
    /// one core per proxy for as long as it runs.
    pub fn always_spin() -> Self {
        Self { spin: Duration::MAX, min_sleep: Duration::ZERO, max_sleep: Duration::ZERO }
    }

    /// What to do after `idle_for` without a trigger, when `sleeps` sleeps were taken since the
    /// last one.
    pub fn action(&self, idle_for: Duration, sleeps: u32) -> IdleAction {
        if idle_for < self.spin {
            return IdleAction::Spin;
        }
        // min_sleep * 2^sleeps, capped (saturating: a long idle time stays at the cap).
        let factor = 1u32.checked_shl(sleeps.min(31)).unwrap_or(u32::MAX);
        let step = self.min_sleep.saturating_mul(factor).min(self.max_sleep);
        if step.is_zero() { IdleAction::Yield } else { IdleAction::Sleep(step) }
    }
}

/// One step of the idle loop ([`IdlePolicy::action`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// Poll again at once.
    Spin,
    /// Give the core to another thread, then poll.
    Yield,
    /// Sleep this long, then poll.
    Sleep(Duration),
}

/// The idle state of the proxy loop: when the last trigger came and how many sleeps followed.
#[derive(Debug)]
struct Backoff {
    policy: IdlePolicy,
    since: Option<Instant>,
    sleeps: u32,
    spins: u32,
}

impl Backoff {
    fn new(policy: IdlePolicy) -> Self {
        Self { policy, since: None, sleeps: 0, spins: 0 }
    }

    /// Work arrived: the next idle period starts with spinning again.
    fn reset(&mut self) {
        self.since = None;
        self.sleeps = 0;
    }

    /// Waits one idle step.
    fn wait(&mut self) {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        match self.policy.action(now.saturating_duration_since(since), self.sleeps) {
            IdleAction::Spin => {
                // A yield now and then, so an oversubscribed machine still makes progress.
                self.spins = self.spins.wrapping_add(1);
                if self.spins.is_multiple_of(4096) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Sleep(d) => {
                self.sleeps = self.sleeps.saturating_add(1);
                std::thread::sleep(d);
            }
        }
    }
}

/// The settings of a proxy thread that a caller may choose when the proxy is built for them (for
/// example by [`crate::comm::Communicator::port_channels_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyOptions {
    /// How the thread waits while the FIFO is empty.
    pub idle: IdlePolicy,
    /// The CPU to pin the thread to ([`ProxyBuilder::pin_to_cpu`]), if any.
    pub cpu: Option<usize>,
    /// The drain timeout ([`ProxyBuilder::drain_timeout`]); `None`: [`DEFAULT_DRAIN_TIMEOUT`].
    pub drain_timeout: Option<Duration>,
    /// The flush timeout ([`ProxyBuilder::flush_timeout`]); `None`: [`DEFAULT_FLUSH_TIMEOUT`].
    pub flush_timeout: Option<Duration>,
}

impl ProxyOptions {
    /// Applies the options to a builder.
    pub fn apply(self, b: ProxyBuilder) -> ProxyBuilder {
        let b = b
            .idle_policy(self.idle)
            .drain_timeout(self.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT))
            .flush_timeout(self.flush_timeout.unwrap_or(DEFAULT_FLUSH_TIMEOUT));
        match self.cpu {
            Some(cpu) => b.pin_to_cpu(cpu),
            None => b,
        }
    }
}

/// Collects what a proxy serves, then starts it.
pub struct ProxyBuilder {
    gpu: Arc<Gpu>,
    fifo_size: u32,
    /// Every registered memory, by id.
    memories: Vec<Memory>,
    /// The mapped ones (CUDA IPC).
    mapped: Vec<MemoryRegion>,
    /// Every registered semaphore, by id.
    semaphores: Vec<Semaphore>,
    /// The mapped ones' counters.
    targets: Vec<Target>,
    remote: Vec<Box<dyn Transport>>,
    idle: IdlePolicy,
    cpu: Option<usize>,
    drain_timeout: Duration,
    atomic_add_kernel: bool,
    flush_timeout: Duration,
}

impl std::fmt::Debug for ProxyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyBuilder")
            .field("gpu", &self.gpu.ordinal())
            .field("memories", &self.memories.len())
            .field("semaphores", &self.semaphores.len())
            .field("transports", &self.remote.iter().map(|t| t.describe()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// How long stopping waits by default for the kernels' last triggers and the stream.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a Sync waits by default for the transports (the stream, a peer's acknowledgement over
/// TCP) before the proxy fails with an error naming what it waited for: the bootstrap's default
/// timeout.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = crate::bootstrap::env::DEFAULT_TIMEOUT;

/// Identifies a transport registered with [`ProxyBuilder::add_transport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransportId(usize);

impl ProxyBuilder {
    /// A proxy for kernels running on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Self {
        Self {
            gpu: gpu.clone(),
            fifo_size: DEFAULT_FIFO_SIZE,
            memories: Vec::new(),
            mapped: Vec::new(),
            semaphores: Vec::new(),
            targets: Vec::new(),
            remote: Vec::new(),
            idle: IdlePolicy::default(),
            cpu: None,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            atomic_add_kernel: false,
            flush_timeout: DEFAULT_FLUSH_TIMEOUT,
        }
    }

    /// The FIFO size (a power of two; default 512).
    pub fn fifo_size(mut self, size: u32) -> Self {
        self.fifo_size = size;
        self
    }

    /// How the thread waits while the FIFO is empty (default: [`IdlePolicy::default`]).
    pub fn idle_policy(mut self, policy: IdlePolicy) -> Self {
        self.idle = policy;
        self
    }

    /// Runs the proxy thread on CPU `cpu` only (`sched_setaffinity`); [`Self::start`] fails if
    /// the CPU does not exist or is not allowed to this process.
    pub fn pin_to_cpu(mut self, cpu: usize) -> Self {
        self.cpu = Some(cpu);
        self
    }

    /// The longest a stop waits for triggers still arriving and for the stream's work to complete
    /// (default [`DEFAULT_DRAIN_TIMEOUT`]); past it the stop returns an error instead of blocking.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Executes atomic-add requests with the fallback kernel even where the driver's stream
    /// memory operation is available, as `MSCCLPP_RS_PROXY_ATOMIC_ADD=kernel` ([`ATOMIC_ADD_ENV`])
    /// does for every proxy: to test or measure the kernel path.
    pub fn atomic_add_kernel(mut self) -> Self {
        self.atomic_add_kernel = true;
        self
    }

    /// How long a Sync (a kernel's flush) waits for the stream and the remote transports before
    /// the proxy fails (default [`DEFAULT_FLUSH_TIMEOUT`]).
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    fn push_memory(&mut self, m: Memory) -> Result<MemoryId> {
        if self.memories.len() as u32 > MAX_MEMORY_ID {
            return Err(Error::InvalidArgument(format!("a proxy serves at most {} memories", MAX_MEMORY_ID + 1)));
        }
        self.memories.push(m);
        Ok(MemoryId(self.memories.len() as u32 - 1))
    }

    /// Registers a memory region valid in this process (this rank's, or a peer's mapped through
    /// CUDA IPC); its id goes into channels' triggers.
    pub fn add_memory(&mut self, region: MemoryRegion) -> Result<MemoryId> {
        if region.base == 0 || region.base.checked_add(region.bytes).is_none() {
            return Err(Error::InvalidArgument(format!("bad memory region {region:?}")));
        }
        let id =
            self.push_memory(Memory { route: Route::Mapped, index: self.mapped.len() as u32, bytes: region.bytes })?;
        self.mapped.push(region);
        Ok(id)
    }

    /// Registers a transport toward a peer (its puts, signals and atomic adds go through it);
    /// the proxy owns it from now on and closes it when it stops.
    pub fn add_transport(&mut self, transport: Box<dyn Transport>) -> TransportId {
        self.remote.push(transport);
        TransportId(self.remote.len() - 1)
    }

    /// Registers region `region` (of `bytes` bytes) that the peer of `transport` registered for
    /// it: puts and atomic adds into this memory id go through that transport. Only destinations:
    /// a put reads from a memory of [`Self::add_memory`].
    pub fn add_remote_memory(&mut self, transport: TransportId, region: u32, bytes: u64) -> Result<MemoryId> {
        self.check_transport(transport)?;
        self.push_memory(Memory { route: Route::Remote(transport.0), index: region, bytes })
    }

    /// Registers the peer's semaphore `index` behind `transport`: a Flag on this id signals it.
    pub fn add_remote_semaphore(&mut self, transport: TransportId, index: u32) -> Result<SemaphoreId> {
        self.check_transport(transport)?;
        self.push_semaphore(Semaphore { route: Route::Remote(transport.0), index })
    }

    fn check_transport(&self, t: TransportId) -> Result<()> {
        if t.0 < self.remote.len() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("transport {} is not registered with this proxy", t.0)))
        }
    }

    /// Registers the address of a peer's host-to-device semaphore counter (the `inbound` of a
    /// `Host2DeviceSemaphore` on the peer, mapped here). A Flag request increments it.
    pub fn add_semaphore(&mut self, remote_inbound: u64) -> Result<SemaphoreId> {
        if remote_inbound == 0 || remote_inbound % 8 != 0 {
            return Err(Error::InvalidArgument(format!("bad semaphore address {remote_inbound:#x}")));
        }
        self.push_target(Target::Device(remote_inbound))
    }

    /// Registers a semaphore counter in host memory that the peer's GPU polls (the `inbound` of
    /// its `Host2DeviceSemaphore` points at the same word's device mapping). The proxy thread
    /// writes it directly once the copies before the Flag have completed.
    pub fn add_host_semaphore(&mut self, counter: HostCounter) -> Result<SemaphoreId> {
        self.push_target(Target::Host(counter))
    }

    fn push_target(&mut self, target: Target) -> Result<SemaphoreId> {
        let id = self.push_semaphore(Semaphore { route: Route::Mapped, index: self.targets.len() as u32 })?;
        self.targets.push(target);
        Ok(id)
    }

    fn push_semaphore(&mut self, s: Semaphore) -> Result<SemaphoreId> {
        if self.semaphores.len() as u32 > MAX_SEMAPHORE_ID {
            return Err(Error::InvalidArgument(format!("a proxy serves at most {} semaphores", MAX_SEMAPHORE_ID + 1)));
        }
        self.semaphores.push(s);
        Ok(SemaphoreId(self.semaphores.len() as u32 - 1))
    }

    /// Creates the FIFO and starts the proxy thread.
    pub fn start(self) -> Result<ProxyService> {
        let affinity = self.cpu.map(|cpu| cpu_set(cpu).map(|set| (cpu, set))).transpose()?;
        let fifo = Fifo::new(&self.gpu, self.fifo_size)?;
        let handle = fifo.device_handle();
        let engine = CudaEngine::with_atomic_add(&self.gpu, self.atomic_add_kernel)?;
        let atomic_add_path = engine.atomic_add_path();
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let core = Core {
            mapped: Mapped::new(engine, self.mapped, self.targets),
            dirty: vec![false; self.remote.len()],
            remote: self.remote,
            memories: self.memories,
            semaphores: self.semaphores,
            drain_timeout: self.drain_timeout,
            flush_timeout: self.flush_timeout,
        };
        let worker = Worker { fifo, core };
        let (s, e) = (stop.clone(), error.clone());
        let (idle, gpu) = (self.idle, self.gpu.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let thread = std::thread::Builder::new()
            .name(format!("mscclpp-proxy-gpu{}", self.gpu.ordinal()))
            .spawn(move || {
                let ready = setup_thread(&gpu, affinity);
                let ok = ready.is_ok();
                let _ = ready_tx.send(ready);
                worker.run(ok, idle, &s, &e)
            })
            .map_err(|source| Error::Io { context: "starting the proxy thread".into(), source })?;
        let mut service =
            ProxyService { fifo: handle, atomic_add: atomic_add_path, stop, error, thread: Some(thread), parked: None };
        let ready = ready_rx.recv().unwrap_or_else(|_| Err(Error::proxy("proxy thread ended at start")));
        if let Err(e) = ready {
            service.shutdown();
            // The thread stored nothing else: this error is the whole story.
            let _ = service.error.lock().unwrap_or_else(|p| p.into_inner()).take();
            return Err(e);
        }
        Ok(service)
    }
}

/// Binds the proxy thread to its GPU, pins it to its CPU if asked, and shortens its timer slack so
/// that its idle sleeps last what they ask for.
fn setup_thread(gpu: &Gpu, affinity: Option<(usize, CpuSet)>) -> Result<()> {
    gpu.bind()?;
    if let Some((cpu, set)) = affinity {
        pin_current_thread(cpu, &set)?;
    }
    // 1 us of slack instead of the default 50 us (Linux): a sleep of a few microseconds stays
    // short. Only this thread is affected; a failure only lengthens the sleeps.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    Ok(())
}

/// The CPU set holding only `cpu`.
fn cpu_set(cpu: usize) -> Result<CpuSet> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|_| {
        Error::InvalidArgument(format!("proxy CPU {cpu}: at most {} CPUs are supported", CpuSet::count()))
    })?;
    Ok(set)
}

/// Restricts the calling thread to the CPUs of `set` (which holds `cpu`).
fn pin_current_thread(cpu: usize, set: &CpuSet) -> Result<()> {
    // Pid 0: the calling thread.
    sched_setaffinity(Pid::from_raw(0), set).map_err(|e| Error::Io {
        context: format!("pinning the proxy thread to CPU {cpu}"),
        source: std::io::Error::from(e),
    })
}

/// A running proxy. Drop stops it and joins its thread, then frees the FIFO: drop it only once
/// no kernel uses its channels any more. An error nobody collected with [`ProxyService::check`]
/// or [`ProxyService::stop`] is written to stderr when the service is dropped.
pub struct ProxyService {
    fifo: FifoDeviceHandle,
    atomic_add: AtomicAddPath,
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

    /// How this proxy executes atomic-add requests (chosen at start; see [`ATOMIC_ADD_ENV`]).
    pub fn atomic_add_path(&self) -> AtomicAddPath {
        self.atomic_add
    }

    /// The first error the proxy hit, if any (the proxy stops at it). The error is taken: it is
    /// reported once, so a later `check`, or [`Self::stop`], returns `Ok` unless the proxy
    /// failed again.
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

    /// Stops the thread, joins it, and returns the error it hit, if any (one that [`Self::check`]
    /// already returned is not returned again). The thread first serves
    /// the triggers already pushed, then waits for the stream (so no copy is in flight once this
    /// returns) and delivers every pending host signal; a kernel still pushing, or a stream not
    /// done, after the drain timeout ([`ProxyBuilder::drain_timeout`]) makes this return an error
    /// instead of blocking.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown();
        self.check()
    }

    /// Stops and joins the thread (as [`Self::stop`]) but keeps the FIFO's memory until the
    /// service is dropped: kernels pushing afterwards are not served and their waits run out of
    /// budget. An error stays for [`Self::check`].
    pub fn stop_serving(&mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(w) => self.parked = Some(w),
                Err(_) => {
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(Error::proxy("proxy thread panicked"))
                }
            }
        }
    }
}

impl Drop for ProxyService {
    fn drop(&mut self) {
        self.shutdown();
        let e = self.error.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(e) = e {
            let _ = report_dropped(&mut std::io::stderr(), &e);
        }
    }
}

/// Writes the error a dropped [`ProxyService`] still held (nobody else will see it).
fn report_dropped(out: &mut impl std::io::Write, e: &Error) -> std::io::Result<()> {
    writeln!(out, "mscclpp-rs: proxy dropped with an unreported error: {e}")
}

/// What the proxy needs from the GPU: enqueueing work on its stream, completion marks, and waiting
/// for the stream. [`CudaEngine`] drives a CUDA stream; the tests use a fake.
pub(crate) trait Engine {
    /// Enqueues a copy of `bytes` bytes from `src` to `dst` (device addresses).
    fn copy(&mut self, dst: u64, src: u64, bytes: usize) -> Result<()>;
    /// Enqueues a write of `value` to the u64 at device address `addr`, after the work before it
    /// (with a memory barrier, so its reader sees that work first).
    fn write_device(&mut self, addr: u64, value: u64) -> Result<()>;
    /// Enqueues adding `value` to the u64 at device address `addr`.
    fn atomic_add(&mut self, addr: u64, value: u64) -> Result<()>;
    /// Enqueues completion mark `mark` (the marks word takes that value once the work before it
    /// has completed).
    fn place_mark(&mut self, mark: u64) -> Result<()>;
    /// The last completion mark the stream has passed.
    fn marks_done(&self) -> u64;
    /// Whether all enqueued work has completed (does not block).
    fn is_idle(&mut self) -> Result<bool>;
}

/// Where triggers come from: the FIFO (a fake in the tests).
trait Triggers {
    /// The trigger at the consumer's position, if published.
    fn peek(&self) -> Option<ProxyTrigger>;
    /// Marks the current trigger handled.
    fn complete(&mut self);
    /// Triggers handled so far.
    fn position(&self) -> u64;
}

impl Triggers for Fifo {
    fn peek(&self) -> Option<ProxyTrigger> {
        Fifo::peek(self)
    }
    fn complete(&mut self) {
        // Called after a peek that returned the trigger: there is one to complete.
        let _ = Fifo::complete(self);
    }
    fn position(&self) -> u64 {
        Fifo::position(self)
    }
}

/// Host-counter signals waiting for the copies before them: the order-keeping part of the proxy,
/// apart from the GPU.
///
/// Work enqueued since the last mark makes the next host signal place a new mark first; the
/// signal is written at once if nothing is pending and the stream has passed every mark, else it
/// waits (in request order) for its mark.
#[derive(Debug, Default)]
struct PendingSignals {
    /// Marks placed so far.
    marks_issued: u64,
    /// Whether work was enqueued since the last mark.
    unmarked_work: bool,
    /// (mark, semaphore index, value), in request order.
    pending: VecDeque<(u64, usize, u64)>,
}

impl PendingSignals {
    /// Work was enqueued on the stream.
    fn work(&mut self) {
        self.unmarked_work = true;
    }

    /// The mark to place before a host signal, if work was enqueued since the last one. The mark
    /// counts as placed: if placing it fails, the proxy stops and drains by waiting for the
    /// whole stream instead.
    fn mark_for_signal(&mut self) -> Option<u64> {
        if !self.unmarked_work {
            return None;
        }
        self.unmarked_work = false;
        self.marks_issued += 1;
        Some(self.marks_issued)
    }

    /// A host signal after [`Self::mark_for_signal`]: `Some` to write at once, `None` if it waits.
    fn signal(&mut self, sem: usize, value: u64, marks_done: u64) -> Option<(usize, u64)> {
        if self.pending.is_empty() && marks_done >= self.marks_issued {
            Some((sem, value))
        } else {
            self.pending.push_back((self.marks_issued, sem, value));
            None
        }
    }

    /// Hands the waiting signals whose mark is at most `done` to `deliver`, in order.
    fn retire(&mut self, done: u64, mut deliver: impl FnMut(usize, u64)) {
        while let Some(&(mark, sem, value)) = self.pending.front() {
            if mark > done {
                break;
            }
            deliver(sem, value);
            self.pending.pop_front();
        }
    }

    /// The stream has completed everything: every waiting signal goes out.
    fn retire_all(&mut self, deliver: impl FnMut(usize, u64)) {
        self.retire(u64::MAX, deliver);
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Where a registered memory or semaphore is served: mapped here (CUDA IPC, the proxy's own
/// stream) or by remote transport `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Mapped,
    Remote(usize),
}

/// A memory as triggers name it: where it is served, its index there, and its size.
#[derive(Clone, Copy, Debug)]
struct Memory {
    route: Route,
    index: u32,
    bytes: u64,
}

/// A semaphore as triggers name it: where it is served and its index there.
#[derive(Clone, Copy, Debug)]
struct Semaphore {
    route: Route,
    index: u32,
}

/// The CUDA IPC transport: memories mapped into this process, copied between on the proxy's
/// stream; semaphore counters written by the stream (in GPU memory) or by the thread once the
/// copies before them completed (in host memory).
struct Mapped<E> {
    engine: E,
    regions: Vec<MemoryRegion>,
    /// (where the counter is, signals sent so far).
    semaphores: Vec<(Target, u64)>,
    signals: PendingSignals,
}

impl<E: Engine> Mapped<E> {
    fn new(engine: E, regions: Vec<MemoryRegion>, semaphores: Vec<Target>) -> Self {
        Self {
            engine,
            regions,
            semaphores: semaphores.into_iter().map(|t| (t, 0)).collect(),
            signals: PendingSignals::default(),
        }
    }

    fn address(&self, region: u32, offset: u64, bytes: u64, what: &str) -> Result<u64> {
        resolve(&self.regions, region, offset, bytes, what)
    }

    fn deliver(semaphores: &[(Target, u64)], sem: usize, value: u64) {
        if let Some((Target::Host(c), _)) = semaphores.get(sem) {
            c.store(value);
        }
    }

    /// Writes the pending host signals whose copies have completed.
    fn poll_signals(&mut self) {
        if !self.signals.is_empty() {
            let done = self.engine.marks_done();
            let sems = &self.semaphores;
            self.signals.retire(done, |s, v| Self::deliver(sems, s, v));
        }
    }

    /// Waits (until `deadline`) for the stream to complete everything enqueued, then writes every
    /// pending host signal. Past the deadline, only the signals whose marks the stream has passed
    /// are written, and the result is an error (saying it waited `waited`).
    fn finish(&mut self, deadline: Instant, waited: Duration, gpu: &str) -> Result<()> {
        let drained = loop {
            match self.engine.is_idle() {
                Ok(true) => break Ok(()),
                Ok(false) if Instant::now() >= deadline => {
                    break Err(Error::proxy(format!(
                        "{gpu}: the proxy stream still had work in flight {} after the stop",
                        crate::error::fmt_duration(waited)
                    )));
                }
                Ok(false) => std::thread::yield_now(),
                Err(e) => break Err(Error::proxy_from(format!("{gpu}: draining the proxy stream"), e)),
            }
        };
        let sems = &self.semaphores;
        if drained.is_ok() {
            self.signals.retire_all(|s, v| Self::deliver(sems, s, v));
        } else {
            self.signals.retire(self.engine.marks_done(), |s, v| Self::deliver(sems, s, v));
        }
        drained
    }
}

impl<E: Engine + Send> Transport for Mapped<E> {
    fn describe(&self) -> String {
        "CUDA IPC".into()
    }

    fn put(&mut self, dst: RemoteSpan, src: u64, bytes: u64) -> Result<()> {
        let dst = self.address(dst.region, dst.offset, bytes, "destination")?;
        self.engine.copy(dst, src, bytes as usize)?;
        self.signals.work();
        Ok(())
    }

    fn signal(&mut self, semaphore: u32) -> Result<()> {
        let (target, sent) = self
            .semaphores
            .get_mut(semaphore as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("semaphore id {semaphore} is not registered")))?;
        *sent += 1;
        let value = *sent;
        match target {
            // Stream-ordered after the copies above (partner: the peer's acquire load in
            // Host2DeviceSemaphore::wait).
            Target::Device(addr) => {
                let addr = *addr;
                self.engine.write_device(addr, value)?;
            }
            Target::Host(_) => {
                if let Some(mark) = self.signals.mark_for_signal() {
                    self.engine.place_mark(mark)?;
                }
                let done = self.engine.marks_done();
                if let Some((s, v)) = self.signals.signal(semaphore as usize, value, done) {
                    Self::deliver(&self.semaphores, s, v);
                }
            }
        }
        Ok(())
    }

    fn atomic_add(&mut self, dst: RemoteSpan, value: u64) -> Result<()> {
        if !dst.offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {}", dst.offset)));
        }
        let addr = self.address(dst.region, dst.offset, 8, "atomic add")?;
        self.engine.atomic_add(addr, value)?;
        self.signals.work();
        Ok(())
    }

    fn flush(&mut self, deadline: Instant) -> Result<()> {
        // Partner of the kernel's wait for the tail: the caller publishes only once complete.
        while !self.engine.is_idle().map_err(|e| Error::proxy_from("draining the proxy stream", e))? {
            if Instant::now() >= deadline {
                return Err(Error::proxy("the proxy stream did not complete its copies before the flush deadline"));
            }
            std::hint::spin_loop();
        }
        let sems = &self.semaphores;
        self.signals.retire_all(|s, v| Self::deliver(sems, s, v));
        Ok(())
    }

    fn poll(&mut self) -> Result<()> {
        self.poll_signals();
        Ok(())
    }

    fn close(&mut self, deadline: Instant) -> Result<()> {
        let waited = deadline.saturating_duration_since(Instant::now());
        self.finish(deadline, waited, "CUDA IPC")
    }
}

/// The proxy's logic: executes requests on their transports (the mapped one over an [`Engine`],
/// and the remote ones), and drains them at the end.
struct Core<E> {
    mapped: Mapped<E>,
    remote: Vec<Box<dyn Transport>>,
    /// Per remote transport: used since the last Sync.
    dirty: Vec<bool>,
    memories: Vec<Memory>,
    semaphores: Vec<Semaphore>,
    drain_timeout: Duration,
    flush_timeout: Duration,
}

/// Why a proxy loop ended.
#[derive(Debug)]
enum Ended {
    /// Told to stop, with the FIFO empty.
    Stopped,
    /// A request failed, or the drain ran past its deadline.
    Failed(Error),
}

/// One error from several (the first, with the others' text after it).
fn combine(mut errors: Vec<Error>) -> Result<()> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let first = errors.remove(0);
            let rest: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::proxy(format!("{first}; then {}", rest.join("; then "))))
        }
    }
}

impl<E: Engine + Send> Core<E> {
    /// A core whose memories and semaphores are all mapped (ids are their indices).
    #[cfg(test)]
    fn new(engine: E, memories: Vec<MemoryRegion>, semaphores: Vec<Target>, drain_timeout: Duration) -> Self {
        let mems =
            memories.iter().enumerate().map(|(i, m)| Memory { route: Route::Mapped, index: i as u32, bytes: m.bytes });
        let sems = (0..semaphores.len()).map(|i| Semaphore { route: Route::Mapped, index: i as u32 });
        Self {
            memories: mems.collect(),
            semaphores: sems.collect(),
            mapped: Mapped::new(engine, memories, semaphores),
            remote: Vec::new(),
            dirty: Vec::new(),
            drain_timeout,
            flush_timeout: DEFAULT_FLUSH_TIMEOUT,
        }
    }

    fn transport(&mut self, route: Route) -> &mut dyn Transport {
        match route {
            Route::Mapped => &mut self.mapped,
            Route::Remote(i) => {
                self.dirty[i] = true;
                self.remote[i].as_mut()
            }
        }
    }

    /// Reports the first remote transport that failed (a lost peer, a refused message).
    fn poll_remote(&mut self, gpu: &str) -> Option<Error> {
        self.remote
            .iter_mut()
            .find_map(|t| t.poll().err().map(|e| Error::proxy_from(format!("{gpu}: {}", t.describe()), e)))
    }

    /// Serves `fifo` until `stop` is set and the FIFO is empty, or a request fails, then drains
    /// ([`Self::finish`]). Returns the first error. Once `stop` is seen, triggers still arriving
    /// are served only until the drain deadline.
    fn serve(&mut self, fifo: &mut impl Triggers, stop: &AtomicBool, idle: &mut Backoff, gpu: &str) -> Option<Error> {
        let mut deadline: Option<Instant> = None;
        let ended = loop {
            self.mapped.poll_signals();
            if let Some(e) = self.poll_remote(gpu) {
                break Ended::Failed(e);
            }
            if deadline.is_none() && stop.load(Ordering::Acquire) {
                deadline = Some(Instant::now() + self.drain_timeout);
            }
            match fifo.peek() {
                Some(t) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break Ended::Failed(Error::proxy(format!(
                            "{gpu}: kernels still pushing triggers {} after the proxy was told to stop; \
                             stopped at FIFO position {}",
                            crate::error::fmt_duration(self.drain_timeout),
                            fifo.position()
                        )));
                    }
                    idle.reset();
                    let pos = fifo.position();
                    if let Err(e) = self.execute(t.decode()) {
                        break Ended::Failed(Error::proxy_from(format!("{gpu} FIFO position {pos}"), e));
                    }
                    fifo.complete();
                }
                None if deadline.is_some() => break Ended::Stopped,
                // A signal is waiting for its copy: keep polling the marks.
                None if !self.mapped.signals.is_empty() => std::hint::spin_loop(),
                None => idle.wait(),
            }
        };
        // On error as at stop: nothing may stay in flight, nothing pending may be dropped.
        let drained = self.finish(Instant::now() + self.drain_timeout, gpu);
        match (ended, drained) {
            (Ended::Failed(e), Err(d)) => Some(Error::proxy(format!("{e}; then {d}"))),
            (Ended::Failed(e), Ok(())) => Some(e),
            (Ended::Stopped, Err(d)) => Some(d),
            (Ended::Stopped, Ok(())) => None,
        }
    }

    /// Drains every transport until `deadline`: the stream completes and the pending host
    /// signals are written (see [`Mapped::finish`]); each remote transport flushes what it was
    /// given since the last Sync, and closes.
    fn finish(&mut self, deadline: Instant, gpu: &str) -> Result<()> {
        let mut errors = Vec::new();
        if let Err(e) = self.mapped.finish(deadline, self.drain_timeout, gpu) {
            errors.push(e);
        }
        // What was issued since the last Sync must land before the end; the rest already has.
        let flushed: Vec<Result<()>> = self
            .remote
            .iter_mut()
            .zip(&mut self.dirty)
            .map(|(t, dirty)| if std::mem::take(dirty) { t.flush(deadline) } else { Ok(()) })
            .collect();
        // Every peer hears of the end before this proxy waits for any of theirs.
        for t in &mut self.remote {
            t.start_close();
        }
        for (t, flushed) in self.remote.iter_mut().zip(flushed) {
            // Close even when the flush failed: the transport's threads end either way.
            let closed = t.close(deadline);
            if let Err(e) = flushed.and(closed) {
                errors.push(Error::proxy_from(format!("{gpu}: closing {}", t.describe()), e));
            }
        }
        combine(errors)
    }

    /// Registered memory `id`, with `offset..offset + bytes` checked to lie inside it.
    fn memory(&self, id: u32, offset: u32, bytes: u64, what: &str) -> Result<Memory> {
        let m = *self
            .memories
            .get(id as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("{what} memory id {id} is not registered")))?;
        match u64::from(offset).checked_add(bytes) {
            Some(end) if end <= m.bytes => Ok(m),
            _ => Err(Error::InvalidArgument(format!(
                "{what} range {offset}..+{bytes} outside memory {id} of {} bytes",
                m.bytes
            ))),
        }
    }

    /// Waits until everything issued so far has completed on every transport used since the
    /// last Sync.
    fn flush_all(&mut self) -> Result<()> {
        let deadline = crate::bootstrap::after(self.flush_timeout);
        self.mapped.flush(deadline)?;
        for (t, dirty) in self.remote.iter_mut().zip(self.dirty.iter_mut()) {
            if std::mem::take(dirty) {
                t.flush(deadline).map_err(|e| Error::proxy_from(format!("flushing {}", t.describe()), e))?;
            }
        }
        Ok(())
    }

    fn execute(&mut self, req: Request) -> Result<()> {
        match req {
            Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                if k & kind::DATA != 0 && size > 0 {
                    let bytes = size as u64;
                    let src = self.memory(src_memory, src_offset, bytes, "source")?;
                    let dst = self.memory(dst_memory, dst_offset, bytes, "destination")?;
                    if src.route != Route::Mapped {
                        return Err(Error::InvalidArgument(format!(
                            "source memory id {src_memory} is another rank's: a put reads memory of this process"
                        )));
                    }
                    let src = self.mapped.address(src.index, u64::from(src_offset), bytes, "source")?;
                    let to = RemoteSpan { region: dst.index, offset: u64::from(dst_offset) };
                    self.transport(dst.route).put(to, src, bytes)?;
                }
                if k & kind::FLAG != 0 {
                    let s = *self
                        .semaphores
                        .get(semaphore as usize)
                        .ok_or_else(|| Error::InvalidArgument(format!("semaphore id {semaphore} is not registered")))?;
                    self.transport(s.route).signal(s.index)?;
                }
                if k & kind::SYNC != 0 {
                    self.flush_all()?;
                }
            }
            Request::AtomicAdd { value, dst_offset, dst_memory } => {
                if dst_offset % 8 != 0 {
                    return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {dst_offset}")));
                }
                let dst = self.memory(dst_memory, dst_offset, 8, "atomic add")?;
                let to = RemoteSpan { region: dst.index, offset: u64::from(dst_offset) };
                self.transport(dst.route).atomic_add(to, value)?;
            }
        }
        Ok(())
    }
}

/// The CUDA side of the proxy: one non-blocking stream of the proxy's GPU. The TCP transport's
/// GPU memory sides ([`crate::transport::tcp::cuda`]) use one each too.
pub(crate) struct CudaEngine {
    pub(crate) gpu: Arc<Gpu>,
    stream: Arc<cudarc::driver::CudaStream>,
    atomic_add: AtomicAdd,
    /// Completion marks: the stream writes mark n here once the work before it has completed.
    marks: PinnedBuffer,
}

// SAFETY: an engine is used by one thread at a time (built on one, then moved to the thread that
// drives it); the CUDA handles it holds are valid in any thread that binds the context.
unsafe impl Send for CudaEngine {}

impl CudaEngine {
    /// A new stream on `gpu`, with the atomic-add kernel loaded (so a bad module is an error here
    /// and not in the thread that uses the engine).
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        Self::with_atomic_add(gpu, false)
    }

    /// [`CudaEngine::new`], with atomic adds forced onto the fallback kernel when `force_kernel`
    /// (see [`ProxyBuilder::atomic_add_kernel`]).
    pub(crate) fn with_atomic_add(gpu: &Arc<Gpu>, force_kernel: bool) -> Result<Self> {
        let stream = gpu.new_stream()?;
        // Choose how atomic adds run (and load the kernel if that is the way) now, so a bad
        // module is an error here and not in the thread.
        let atomic_add = AtomicAdd::select(gpu, force_kernel)?;
        Ok(CudaEngine { gpu: gpu.clone(), stream, atomic_add, marks: PinnedBuffer::zeroed(gpu, 8)? })
    }

    /// How this engine's atomic adds run.
    pub(crate) fn atomic_add_path(&self) -> AtomicAddPath {
        self.atomic_add.path()
    }

    /// The stream work is enqueued on.
    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }
}

impl Engine for CudaEngine {
    fn copy(&mut self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: both ranges lie inside registered memories valid in this context (`resolve`).
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .ctx(|| format!("copying {bytes} bytes"))
    }

    fn write_device(&mut self, addr: u64, value: u64) -> Result<()> {
        // Default flags: the write waits for the earlier work and includes a memory barrier.
        // SAFETY: the address was registered as a mapped u64 counter.
        let r = unsafe { sys::cuStreamWriteValue64_v2(self.stream.cu_stream(), addr, value, 0) };
        check(r, || format!("signalling the semaphore at {addr:#x}"))
    }

    fn atomic_add(&mut self, addr: u64, value: u64) -> Result<()> {
        // SAFETY: the stream is this engine's, of its GPU's context (bound on the proxy thread);
        // the address is an 8-aligned u64 inside a registered memory (`Core` checks both).
        unsafe { self.atomic_add.enqueue(&self.gpu, &self.stream, addr, value) }
    }

    fn place_mark(&mut self, mark: u64) -> Result<()> {
        // SAFETY: the marks word is this engine's device-mapped pinned memory.
        let r = unsafe { sys::cuStreamWriteValue64_v2(self.stream.cu_stream(), self.marks.device_addr(), mark, 0) };
        check(r, || "placing a completion mark".into())
    }

    fn marks_done(&self) -> u64 {
        // SAFETY: 8 bytes of pinned memory owned by this engine, 8-aligned.
        let w = unsafe { AtomicU64::from_ptr(self.marks.host_ptr().cast()) };
        // Partner: the stream's write of the mark, after the copies (with a memory barrier).
        w.load(Ordering::Acquire)
    }

    fn is_idle(&mut self) -> Result<bool> {
        // SAFETY: the stream is this engine's, alive as long as it.
        let r = unsafe { sys::cuStreamQuery(self.stream.cu_stream()) };
        match r {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, || "querying the proxy stream".into()).map(|()| true),
        }
    }
}

struct Worker {
    fifo: Fifo,
    core: Core<CudaEngine>,
}

// SAFETY: the worker's CUDA handles are used only by the proxy thread after the move (and by the
// joining thread once the proxy thread has ended).
unsafe impl Send for Worker {}

impl Worker {
    /// Serves until told to stop or a request fails (unless the thread's setup failed: `ready`
    /// false); returns itself so the FIFO memory outlives the thread.
    fn run(mut self, ready: bool, idle: IdlePolicy, stop: &AtomicBool, error: &Mutex<Option<Error>>) -> Self {
        if ready {
            let gpu = format!("GPU {}", self.core.mapped.engine.gpu.ordinal());
            if let Some(e) = self.core.serve(&mut self.fifo, stop, &mut Backoff::new(idle), &gpu) {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Backoff, Core, Engine, HostCounter, IdleAction, IdlePolicy, PendingSignals, Target, Triggers, report_dropped,
    };
    use super::{MemoryRegion, check_counter_offset, resolve};
    use crate::error::{Error, Result};
    use mscclpp_device::trigger::{MAX_MEMORY_ID, MAX_SEMAPHORE_ID, ProxyTrigger, Request, kind};
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

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
                if let Ok(addr) = resolve(&memories, id, offset.into(), bytes, "test") {
                    let m = memories[id as usize];
                    assert!(addr >= m.base && addr - m.base + bytes <= m.bytes);
                }
            };
            match (ProxyTrigger { fst, snd }).decode() {
                request @ Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                    prop_assert!(k != 0 && k & !(kind::DATA | kind::FLAG | kind::SYNC) == 0);
                    prop_assert!(src_memory <= MAX_MEMORY_ID && dst_memory <= MAX_MEMORY_ID);
                    prop_assert!(semaphore <= MAX_SEMAPHORE_ID);
                    // What decodes re-encodes to the same request.
                    let again = ProxyTrigger::encode(request);
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
            if let Ok(addr) = resolve(&m, 0, offset.into(), len, "test") {
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

    /// The stream of the fake engine: enqueued operations complete when the test says so
    /// (`complete_one`) or when the proxy queries the stream (never when `stuck`); marks and
    /// device writes take effect as they complete.
    #[derive(Default)]
    struct FakeEngine {
        in_flight: VecDeque<Op>,
        marks_done: u64,
        device_writes: Vec<(u64, u64)>,
        copies_done: usize,
        stuck: bool,
    }

    #[derive(Debug)]
    enum Op {
        Copy,
        Write(u64, u64),
        Mark(u64),
    }

    impl FakeEngine {
        fn complete_one(&mut self) {
            match self.in_flight.pop_front() {
                Some(Op::Copy) => self.copies_done += 1,
                Some(Op::Write(a, v)) => self.device_writes.push((a, v)),
                Some(Op::Mark(m)) => self.marks_done = m,
                None => {}
            }
        }
    }

    impl Engine for FakeEngine {
        fn copy(&mut self, _dst: u64, _src: u64, _bytes: usize) -> Result<()> {
            self.in_flight.push_back(Op::Copy);
            Ok(())
        }
        fn write_device(&mut self, addr: u64, value: u64) -> Result<()> {
            self.in_flight.push_back(Op::Write(addr, value));
            Ok(())
        }
        fn atomic_add(&mut self, _addr: u64, _value: u64) -> Result<()> {
            self.in_flight.push_back(Op::Copy);
            Ok(())
        }
        fn place_mark(&mut self, mark: u64) -> Result<()> {
            self.in_flight.push_back(Op::Mark(mark));
            Ok(())
        }
        fn marks_done(&self) -> u64 {
            self.marks_done
        }
        fn is_idle(&mut self) -> Result<bool> {
            while !self.stuck && !self.in_flight.is_empty() {
                self.complete_one();
            }
            Ok(self.in_flight.is_empty())
        }
    }

    /// A FIFO fed by the test; `forever` is pushed again and again after the queue (a kernel
    /// that never stops pushing).
    #[derive(Default)]
    struct FakeFifo {
        queue: VecDeque<ProxyTrigger>,
        forever: Option<ProxyTrigger>,
        position: u64,
    }

    impl Triggers for FakeFifo {
        fn peek(&self) -> Option<ProxyTrigger> {
            self.queue.front().copied().or(self.forever)
        }
        fn complete(&mut self) {
            self.queue.pop_front();
            self.position += 1;
        }
        fn position(&self) -> u64 {
            self.position
        }
    }

    const A: MemoryRegion = MemoryRegion { base: 0x10_0000, bytes: 4096 };
    const B: MemoryRegion = MemoryRegion { base: 0x20_0000, bytes: 4096 };

    /// A core with memories A (0) and B (1), a host semaphore (0) and a device one (1).
    fn core(engine: FakeEngine, timeout: Duration) -> (Core<FakeEngine>, Arc<AtomicU64>) {
        let word = Arc::new(AtomicU64::new(0));
        // SAFETY: the word is 8-aligned and lives as long as its owner, the Arc itself.
        let counter = unsafe { HostCounter::from_raw(word.as_ptr(), word.clone()) };
        let sems = vec![Target::Host(counter), Target::Device(0x30_0000)];
        (Core::new(engine, vec![A, B], sems, timeout), word)
    }

    fn transfer(k: u8, src_memory: u32, semaphore: u32) -> ProxyTrigger {
        let request = Request::Transfer {
            kind: k,
            dst_offset: 128,
            src_offset: 0,
            size: 64,
            dst_memory: 1,
            src_memory,
            semaphore,
        };
        ProxyTrigger::encode(request).unwrap()
    }

    fn serve(core: &mut Core<FakeEngine>, fifo: &mut FakeFifo, stop: bool) -> Option<Error> {
        let stop = AtomicBool::new(stop);
        core.serve(fifo, &stop, &mut Backoff::new(IdlePolicy::default()), "GPU 0")
    }

    /// Runs `f` on a thread and fails the test if it has not returned within 20 s (instead of
    /// hanging the test run).
    fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(20)).expect("the proxy's stop blocked instead of returning an error")
    }

    #[test]
    fn an_error_drains_the_stream_and_delivers_earlier_signals() {
        let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
        let mut fifo = FakeFifo::default();
        // A valid copy + host signal (waits for its copy), then a copy from an unknown memory.
        fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 0));
        fifo.queue.push_back(transfer(kind::DATA, 7, 0));
        let e = serve(&mut core, &mut fifo, false).expect("the bad request is reported").to_string();
        assert!(e.contains("FIFO position 1") && e.contains("memory id 7"), "{e}");
        assert_eq!(counter.load(Ordering::Acquire), 1, "the valid copy's signal was dropped");
        assert!(core.mapped.engine.in_flight.is_empty(), "work left in flight after the error");
        assert_eq!(core.mapped.engine.copies_done, 1);
    }

    #[test]
    fn stop_waits_for_copies_even_without_pending_host_signals() {
        let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
        let mut fifo = FakeFifo::default();
        // A copy signalled through the device semaphore: no host signal is pending at stop.
        fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 1));
        fifo.queue.push_back(transfer(kind::DATA, 0, 0));
        assert!(serve(&mut core, &mut fifo, true).is_none());
        assert_eq!(fifo.position, 2, "triggers pushed before the stop are served");
        assert!(core.mapped.engine.in_flight.is_empty(), "copies still in flight when stop returned");
        assert_eq!(core.mapped.engine.copies_done, 2);
        assert_eq!(core.mapped.engine.device_writes, vec![(0x30_0000, 1)]);
        assert_eq!(counter.load(Ordering::Acquire), 0);
    }

    #[test]
    fn host_signals_wait_for_their_copies_and_keep_their_order() {
        let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
        // No copy in flight: written at once, without a mark.
        core.execute(transfer(kind::FLAG, 0, 0).decode()).unwrap();
        assert_eq!(counter.load(Ordering::Acquire), 1);
        assert!(core.mapped.engine.in_flight.is_empty());
        // After a copy: a mark, and the signal waits for it; a second signal queues behind.
        core.execute(transfer(kind::DATA | kind::FLAG, 0, 0).decode()).unwrap();
        core.execute(transfer(kind::FLAG, 0, 0).decode()).unwrap();
        assert_eq!(counter.load(Ordering::Acquire), 1);
        core.mapped.engine.complete_one(); // the copy
        core.mapped.poll_signals();
        assert_eq!(counter.load(Ordering::Acquire), 1, "delivered before its copy completed");
        core.mapped.engine.complete_one(); // the mark
        core.mapped.poll_signals();
        assert_eq!(counter.load(Ordering::Acquire), 3);
        // Sync: everything completes before it returns.
        core.execute(transfer(kind::DATA | kind::FLAG | kind::SYNC, 0, 0).decode()).unwrap();
        assert_eq!(counter.load(Ordering::Acquire), 4);
        assert!(core.mapped.engine.in_flight.is_empty());
    }

    #[test]
    fn stop_is_bounded_when_a_kernel_keeps_pushing() {
        let (e, counter, served, in_flight) = bounded(|| {
            let (mut core, counter) = core(FakeEngine::default(), Duration::from_millis(50));
            let mut fifo = FakeFifo { forever: Some(transfer(kind::DATA | kind::FLAG, 0, 0)), ..Default::default() };
            let e = serve(&mut core, &mut fifo, true).map(|e| e.to_string());
            (e, counter.load(Ordering::Acquire), fifo.position, core.mapped.engine.in_flight.len())
        });
        let e = e.expect("an error when the drain runs out of time");
        assert!(e.contains("still pushing"), "{e}");
        assert!(served > 0);
        // What was served before the deadline is complete and signalled.
        assert_eq!(in_flight, 0);
        assert_eq!(counter, served);
    }

    #[test]
    fn stop_is_bounded_when_the_stream_never_completes() {
        let (e, counter) = bounded(|| {
            let engine = FakeEngine { stuck: true, ..Default::default() };
            let (mut core, counter) = core(engine, Duration::from_millis(50));
            let mut fifo = FakeFifo::default();
            fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 0));
            (serve(&mut core, &mut fifo, true).map(|e| e.to_string()), counter.load(Ordering::Acquire))
        });
        let e = e.expect("an error when the stream does not complete in time");
        assert!(e.contains("still had work in flight"), "{e}");
        // Its copy never completed: the signal must not be written.
        assert_eq!(counter, 0);
    }

    /// Triggers whose memory and semaphore are another rank's go through its transport (TCP
    /// over loopback, on host memory here); a Sync returns only once they have landed there.
    #[test]
    fn remote_routes_go_through_their_transport_and_sync_waits_for_them() {
        use super::{Memory, Route, Semaphore};
        use crate::transport::Transport;
        use crate::transport::tcp::{HostLanding, HostRegion, HostSource, Link, RemoteMemory, TcpConfig, TcpTransport};
        let pair = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (a, l.accept().unwrap().0)
        };
        let ((a_out, b_in), (b_out, a_in)) = (pair(), pair());
        let cfg = TcpConfig { chunk_bytes: 1000, slots: 3, timeout: Duration::from_secs(20) };
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        let src = HostRegion::from_slice(&data);
        let (dst, sem) = (HostRegion::filled(8192, 0xA5), Arc::new(AtomicU64::new(0)));
        // This rank (0): its proxy sends; rank 1 only receives.
        let t0 = TcpTransport::start(
            Link { peer: 1, outgoing: a_out, incoming: a_in, peer_max_chunk: 1000 },
            HostSource::new(vec![src.clone()], 3, 1000).unwrap(),
            HostLanding::new(vec![], vec![], 3, 1000).unwrap(),
            RemoteMemory { regions: vec![8192], semaphores: 1 },
            &cfg,
        )
        .unwrap();
        let mut t1 = TcpTransport::start(
            Link { peer: 0, outgoing: b_out, incoming: b_in, peer_max_chunk: 1000 },
            HostSource::new(vec![], 3, 1000).unwrap(),
            HostLanding::new(vec![dst.clone()], vec![sem.clone()], 3, 1000).unwrap(),
            RemoteMemory::default(),
            &cfg,
        )
        .unwrap();
        let mapped = [MemoryRegion { base: src.addr(), bytes: 8192 }];
        let mut core =
            Core::new(FakeEngine::default(), mapped.to_vec(), vec![Target::Device(0x30_0000)], Duration::from_secs(5));
        core.remote.push(Box::new(t0));
        core.dirty.push(false);
        core.memories.push(Memory { route: Route::Remote(0), index: 0, bytes: 8192 }); // id 1
        core.semaphores.push(Semaphore { route: Route::Remote(0), index: 0 }); // id 1
        let put = |size: u32, src_offset: u32, dst_offset: u32, kind: u8| {
            let r =
                Request::Transfer { kind, dst_offset, src_offset, size, dst_memory: 1, src_memory: 0, semaphore: 1 };
            ProxyTrigger::encode(r).unwrap().decode()
        };
        core.execute(put(5000, 100, 200, kind::DATA | kind::FLAG)).unwrap();
        core.execute(
            ProxyTrigger::encode(Request::AtomicAdd { dst_offset: 8000, value: 9, dst_memory: 1 }).unwrap().decode(),
        )
        .unwrap();
        core.execute(put(8, 0, 0, kind::DATA | kind::FLAG | kind::SYNC)).unwrap();
        // The Sync returned: everything is at rank 1 now, with both signals.
        let got = dst.to_vec();
        assert_eq!(&got[200..5200], &data[100..5100]);
        assert_eq!(&got[..8], &data[..8]);
        assert!(got[8..200].iter().chain(&got[5200..8000]).all(|&b| b == 0xA5));
        assert_eq!(dst.read_u64(8000), Some(u64::from_le_bytes([0xA5; 8]).wrapping_add(9)));
        assert_eq!(sem.load(Ordering::Acquire), 2);
        // Nothing went to the mapped path, and its device semaphore was not signalled.
        assert_eq!(core.mapped.engine.copies_done, 0);
        assert!(core.mapped.engine.device_writes.is_empty());
        // Out of the remote memory's bounds: refused in the proxy, before anything is sent.
        let e = core.execute(put(200, 0, 8100, kind::DATA)).unwrap_err().to_string();
        assert!(e.contains("outside memory 1"), "{e}");
        // A remote memory cannot be a put's source.
        let back = Request::Transfer {
            kind: kind::DATA,
            dst_offset: 0,
            src_offset: 0,
            size: 8,
            dst_memory: 1,
            src_memory: 1,
            semaphore: 0,
        };
        let back = ProxyTrigger::encode(back).unwrap().decode();
        assert!(core.execute(back).unwrap_err().to_string().contains("another rank's"));
        // Stopping flushes and closes the transport; rank 1 closes its side meanwhile.
        let closer = std::thread::spawn(move || t1.close(Instant::now() + Duration::from_secs(10)));
        core.finish(Instant::now() + Duration::from_secs(10), "GPU 0").unwrap();
        closer.join().unwrap().unwrap();
    }

    #[test]
    fn pinning_applies_to_the_calling_thread_and_bad_cpus_are_refused() {
        use nix::sched::{CpuSet, sched_getaffinity};
        use nix::unistd::Pid;
        assert!(super::cpu_set(CpuSet::count()).unwrap_err().to_string().contains("proxy CPU"));
        // Pin a fresh thread to the first CPU this process may use.
        let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let cpu = (0..CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false)).unwrap();
        let got = std::thread::spawn(move || {
            super::pin_current_thread(cpu, &super::cpu_set(cpu).unwrap()).unwrap();
            sched_getaffinity(Pid::from_raw(0)).unwrap()
        })
        .join()
        .unwrap();
        let on: Vec<usize> = (0..CpuSet::count()).filter(|&c| got.is_set(c).unwrap_or(false)).collect();
        assert_eq!(on, vec![cpu]);
        // A CPU outside the allowed set is an error, not a panic.
        if let Some(bad) = (0..CpuSet::count()).find(|&c| !allowed.is_set(c).unwrap_or(true)) {
            let r = std::thread::spawn(move || super::pin_current_thread(bad, &super::cpu_set(bad).unwrap()))
                .join()
                .unwrap();
            assert!(r.is_err());
        }
    }

    #[test]
    fn a_dropped_error_is_written_out() {
        let mut out = Vec::new();
        report_dropped(&mut out, &Error::proxy_from("GPU 0 FIFO position 3", Error::proxy("boom"))).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("unreported error") && s.contains("boom"), "{s}");
    }

    #[test]
    fn pending_signals_retire_in_order_up_to_the_mark() {
        let mut p = PendingSignals::default();
        assert_eq!(p.mark_for_signal(), None);
        assert_eq!(p.signal(0, 1, 0), Some((0, 1)));
        p.work();
        assert_eq!(p.mark_for_signal(), Some(1));
        assert_eq!(p.signal(0, 2, 0), None);
        // Nothing new since mark 1, but an earlier signal waits: this one queues behind it.
        assert_eq!(p.mark_for_signal(), None);
        assert_eq!(p.signal(1, 1, 1), None);
        p.work();
        assert_eq!(p.mark_for_signal(), Some(2));
        assert_eq!(p.signal(0, 3, 1), None);
        let mut got = Vec::new();
        p.retire(0, |s, v| got.push((s, v)));
        assert!(got.is_empty());
        p.retire(1, |s, v| got.push((s, v)));
        assert_eq!(got, vec![(0, 2), (1, 1)]);
        p.retire_all(|s, v| got.push((s, v)));
        assert_eq!(got, vec![(0, 2), (1, 1), (0, 3)]);
        assert!(p.is_empty());
    }

    #[test]
    fn idle_policy_spins_then_sleeps_in_capped_doubling_steps() {
        let p = IdlePolicy::default();
        let us = Duration::from_micros;
        assert_eq!(p.action(us(0), 0), IdleAction::Spin);
        assert_eq!(p.action(us(99), 0), IdleAction::Spin);
        let steps: Vec<_> = (0..10).map(|n| p.action(us(100), n)).collect();
        let expect = [1, 2, 4, 8, 16, 32, 50, 50, 50, 50].map(|u| IdleAction::Sleep(us(u)));
        assert_eq!(steps, expect);
        // Never longer than the cap, whatever the counts (no overflow).
        for n in [31, 32, 63, 64, u32::MAX] {
            assert_eq!(p.action(Duration::MAX, n), IdleAction::Sleep(us(50)));
        }
        let huge = IdlePolicy { spin: Duration::ZERO, min_sleep: Duration::MAX, max_sleep: us(80) };
        assert_eq!(huge.action(us(1), 5), IdleAction::Sleep(us(80)));
        // Spinning forever never sleeps; a zero step yields instead.
        assert_eq!(IdlePolicy::always_spin().action(Duration::from_secs(3600), 9), IdleAction::Spin);
        let zero = IdlePolicy { spin: Duration::ZERO, min_sleep: Duration::ZERO, max_sleep: us(50) };
        assert_eq!(zero.action(us(5), 3), IdleAction::Yield);
        // The wake-up cost of an idle proxy is bounded by the cap: the sum of the steps until
        // the cap grows, then the cap per step.
        let mut b = Backoff::new(IdlePolicy { spin: Duration::ZERO, ..p });
        let t = Instant::now();
        for _ in 0..20 {
            b.wait();
        }
        assert_eq!(b.sleeps, 20);
        assert!(t.elapsed() >= us(1 + 2 + 4 + 8 + 16 + 32 + 14 * 50));
        b.reset();
        assert_eq!((b.sleeps, b.since), (0, None));
    }
}
