//! The CUDA side of the transports: an [`Engine`] enqueues copies, stream writes, atomic adds and
//! completion marks on a stream of the proxy's GPU. The CUDA IPC transport ([`super::ipc`]) drives
//! one directly; the TCP transport's GPU memory sides ([`super::tcp::cuda`]) use one each too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;

use crate::driver::calls;
use crate::error::{DriverContext, Result};
use crate::gpu::Gpu;
use crate::memory::PinnedBuffer;

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

/// What the proxy needs from the GPU: enqueueing work on its stream, completion marks, and waiting
/// for the stream. `CudaEngine` drives a CUDA stream; the tests use a fake.
pub trait Engine {
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
        // SAFETY: the stream is this engine's; the address was registered as a mapped u64 counter.
        unsafe { calls::stream_write_value64(self.stream.cu_stream(), addr, value) }
            .ctx(|| format!("signalling the semaphore at {addr:#x}"))
    }

    fn atomic_add(&mut self, addr: u64, value: u64) -> Result<()> {
        // SAFETY: the stream is this engine's, of its GPU's context (bound on the proxy thread);
        // the address is an 8-aligned u64 inside a registered memory (`Core` checks both).
        unsafe { self.atomic_add.enqueue(&self.gpu, &self.stream, addr, value) }
    }

    fn place_mark(&mut self, mark: u64) -> Result<()> {
        // SAFETY: the stream is this engine's; the marks word is its device-mapped pinned memory.
        unsafe { calls::stream_write_value64(self.stream.cu_stream(), self.marks.device_addr(), mark) }
            .ctx(|| "placing a completion mark".into())
    }

    fn marks_done(&self) -> u64 {
        // SAFETY: 8 bytes of pinned memory owned by this engine, 8-aligned.
        let w = unsafe { AtomicU64::from_ptr(self.marks.host_ptr().cast()) };
        // Partner: the stream's write of the mark, after the copies (with a memory barrier).
        w.load(Ordering::Acquire)
    }

    fn is_idle(&mut self) -> Result<bool> {
        // SAFETY: the stream is this engine's, alive as long as it.
        unsafe { calls::stream_is_done(self.stream.cu_stream()) }.ctx(|| "querying the proxy stream".into())
    }
}
