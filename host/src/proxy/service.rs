//! A running proxy: its thread, and stopping it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use mscclpp_device::fifo::FifoDeviceHandle;
use nix::libc;
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use super::idle::{Backoff, IdlePolicy};
use super::serve::Core;
use crate::error::{Error, Result};
use crate::fifo::Fifo;
use crate::gpu::Gpu;
use crate::transport::engine::{AtomicAddPath, CudaEngine};

/// Binds the proxy thread to its GPU, pins it to its CPU if asked, and shortens its timer slack so
/// that its idle sleeps last what they ask for.
pub(super) fn setup_thread(gpu: &Gpu, affinity: Option<(usize, CpuSet)>) -> Result<()> {
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
pub(super) fn cpu_set(cpu: usize) -> Result<CpuSet> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|_| {
        Error::InvalidArgument(format!("proxy CPU {cpu}: at most {} CPUs are supported", CpuSet::count()))
    })?;
    Ok(set)
}

/// Restricts the calling thread to the CPUs of `set` (which holds `cpu`).
pub(super) fn pin_current_thread(cpu: usize, set: &CpuSet) -> Result<()> {
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
    pub(super) fifo: FifoDeviceHandle,
    pub(super) atomic_add: AtomicAddPath,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) error: Arc<Mutex<Option<Error>>>,
    pub(super) thread: Option<JoinHandle<Worker>>,
    /// The stopped worker (FIFO memory included), kept until the service is dropped.
    pub(super) parked: Option<Worker>,
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

    /// How this proxy executes atomic-add requests (chosen at start; see [`ATOMIC_ADD_ENV`](crate::transport::engine::ATOMIC_ADD_ENV)).
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
    /// done, after the drain timeout ([`super::ProxyBuilder::drain_timeout`]) makes this return an error
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

    pub(super) fn shutdown(&mut self) {
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
pub(super) fn report_dropped(out: &mut impl std::io::Write, e: &Error) -> std::io::Result<()> {
    writeln!(out, "mscclpp-rs: proxy dropped with an unreported error: {e}")
}

pub(super) struct Worker {
    pub(super) fifo: Fifo,
    pub(super) core: Core<CudaEngine>,
}

// SAFETY: the worker's CUDA handles are used only by the proxy thread after the move (and by the
// joining thread once the proxy thread has ended).
unsafe impl Send for Worker {}

impl Worker {
    /// Serves until told to stop or a request fails (unless the thread's setup failed: `ready`
    /// false); returns itself so the FIFO memory outlives the thread.
    pub(super) fn run(
        mut self,
        ready: bool,
        idle: IdlePolicy,
        stop: &AtomicBool,
        error: &Mutex<Option<Error>>,
    ) -> Self {
        if ready {
            let gpu = format!("GPU {}", self.core.mapped.engine.gpu.ordinal());
            if let Some(e) = self.core.serve(&mut self.fifo, stop, &mut Backoff::new(idle), &gpu) {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
        self
    }
}
