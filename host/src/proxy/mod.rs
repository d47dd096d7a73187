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
//!   kernel (chosen once per proxy: [`AtomicAddPath`](crate::transport::engine::AtomicAddPath), overridden by [`ATOMIC_ADD_ENV`](crate::transport::engine::ATOMIC_ADD_ENV)).
//!
//! Everything runs on one non-blocking stream of the proxy's GPU, so requests complete in FIFO
//! order and a Flag never overtakes the data before it. The tail (positions handled) is published
//! after each request; for a Sync, only after the stream has drained.
//!
//! That is the CUDA IPC path, one [`Transport`] ([`crate::transport::ipc`]): the memories and
//! semaphores registered with [`ProxyBuilder::add_memory`] and [`ProxyBuilder::add_semaphore`]
//! are mapped into this process.
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
//!
//! The files: this one builds a proxy ([`ProxyBuilder`]); `service` runs its thread
//! ([`ProxyService`]); `serve` is the loop that routes each request to its transport; `idle` is
//! how the thread waits while the FIFO is empty.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mscclpp_device::trigger::{MAX_MEMORY_ID, MAX_SEMAPHORE_ID};

use crate::error::{Error, Result};
use crate::fifo::{DEFAULT_FIFO_SIZE, Fifo};
use crate::gpu::Gpu;
use crate::transport::Transport;
use crate::transport::engine::{CudaEngine, MemoryRegion};
use crate::transport::ipc::{HostCounter, IpcTransport, Target};

mod idle;
mod serve;
mod service;
#[cfg(test)]
mod tests;

pub use idle::{IdleAction, IdlePolicy};
use serve::{Core, Memory, Route, Semaphore};
pub use service::ProxyService;
use service::{Worker, cpu_set, setup_thread};

/// Identifies a registered memory in triggers (9 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryId(pub u32);

/// Identifies a registered semaphore in triggers (10 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemaphoreId(pub u32);

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
    /// memory operation is available, as `MSCCLPP_RS_PROXY_ATOMIC_ADD=kernel` ([`ATOMIC_ADD_ENV`](crate::transport::engine::ATOMIC_ADD_ENV))
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
            mapped: IpcTransport::new(engine, self.mapped, self.targets),
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
