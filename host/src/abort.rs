//! The abort word of a GPU: one 8-byte word of mapped pinned host memory per [`Gpu`](crate::gpu::Gpu), whose
//! device address the runtime writes into every module it loads (the global
//! [`mscclpp_device::abort::SYMBOL`]). Every bounded wait on the GPU reads it once it has waited
//! [`mscclpp_device::abort::POLL_AFTER_NS`], and once it is non-zero gives up: the waiting thread
//! exits (it does not trap; the first such thread of the module prints which wait gave up and
//! why), so the kernel ends within about a millisecond with results not to be used, the context
//! stays usable, and [`Gpu::synchronize`](crate::gpu::Gpu::synchronize) reports the cause.
//!
//! Who sets it: a [`Communicator`](crate::comm::Communicator) registers a hook with its bootstrap
//! that sets [`AbortCause::PeerLost`] when a peer's connection ends without a goodbye (the peer
//! died, was killed or broke the protocol), and [`Communicator::abort`](crate::comm::Communicator::abort)
//! sets [`AbortCause::Requested`]. The first cause stays; the word is never cleared, so a context
//! whose waits were aborted should not be reused for that job.
//!
//! Only modules loaded through `Gpu::module` / `Gpu::function` (which every launch helper of
//! this crate uses) learn the word's address; a module loaded behind the runtime's back keeps
//! address 0, and its waits run out their budgets as before.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaModule;
pub use mscclpp_device::abort::AbortCause;

use crate::error::{DriverContext, Error, Result};
use crate::pinned::PinnedBuffer;

/// One GPU's abort word (see the [module documentation](self)).
#[derive(Debug)]
pub struct AbortWord {
    buf: PinnedBuffer,
}

impl AbortWord {
    /// Allocates the word (zero: no abort) in mapped pinned memory.
    pub(crate) fn new(ctx: &cudarc::driver::CudaContext) -> Result<Self> {
        Ok(Self { buf: PinnedBuffer::zeroed_in(ctx, 8)? })
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the buffer is 8 bytes of pinned host memory, page-aligned by cuMemHostAlloc, and
        // lives as long as `self`; the GPU only reads it, the host only uses atomics on it.
        unsafe { &*self.buf.host_ptr().cast::<AtomicU64>() }
    }

    /// Sets the word to `cause` unless a cause is already set; returns whether this call set it.
    pub fn set(&self, cause: AbortCause) -> bool {
        self.word().compare_exchange(0, cause.encode(), Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The cause, once one has been set.
    pub fn cause(&self) -> Option<AbortCause> {
        AbortCause::decode(self.word().load(Ordering::SeqCst))
    }

    /// The address kernels read it at.
    pub fn device_addr(&self) -> u64 {
        self.buf.device_addr()
    }

    /// Writes this word's device address into `module`'s abort global, if it has one (a module
    /// without any wait has none).
    pub(crate) fn install(
        &self,
        module: &std::sync::Arc<CudaModule>,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        ordinal: usize,
    ) -> Result<()> {
        let global = match module.get_global(mscclpp_device::abort::SYMBOL, stream) {
            Ok(g) => g,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND => return Ok(()),
            Err(e) => {
                return Err(Error::Driver {
                    context: format!("looking up `{}` in a module on GPU {ordinal}", mscclpp_device::abort::SYMBOL),
                    source: e,
                });
            }
        };
        if global.len() != 8 {
            return Err(Error::Unsupported(format!(
                "the module global `{}` is {} bytes, not 8",
                mscclpp_device::abort::SYMBOL,
                global.len()
            )));
        }
        let (dst, _record) = global.view_ptr(stream);
        // A synchronous copy outside the GPU's streams (which are non-blocking): loading a
        // module must not wait for kernels already running there (one of them may wait for work
        // this thread is about to launch).
        // SAFETY: `dst` is the module global's 8 bytes in this (bound) context.
        unsafe { cudarc::driver::result::memcpy_htod_sync(dst, &[self.device_addr()]) }
            .ctx(|| "writing the abort word's address into a module".into())
    }
}

/// The error a host step reports once the GPU's waits were aborted for `cause`.
pub fn abort_error(cause: AbortCause) -> Error {
    match cause {
        AbortCause::PeerLost(peer) => Error::PeerLost {
            peer: peer as usize,
            detail: "its bootstrap connection ended without a goodbye; this rank's GPU waits were aborted".into(),
        },
        AbortCause::Requested => Error::Aborted,
    }
}
