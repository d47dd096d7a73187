//! Page-locked host memory mapped into every context (a leaf: it needs a context, not a [`Gpu`]).
//!
//! [`Gpu`]: crate::gpu::Gpu

use cudarc::driver::sys;
use mscclpp_device::ptr::GlobalPtr;

use crate::driver::calls;
use crate::error::{DriverContext, Result};

/// Page-locked host memory mapped into every context's address space (`PORTABLE | DEVICEMAP`):
/// the GPU reads and writes it over PCIe, the host through ordinary pointers.
pub struct PinnedBuffer {
    host: *mut u8,
    device: u64,
    bytes: usize,
}

// SAFETY: the memory is plain host memory owned by this value; access is through raw pointers
// whose synchronisation is the user's (atomics in this crate).
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above; shared references only expose raw pointers.
unsafe impl Sync for PinnedBuffer {}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBuffer({:p}, {} B)", self.host, self.bytes)
    }
}

impl PinnedBuffer {
    /// [`PinnedBuffer::zeroed`] with the context alone (while the [`Gpu`](crate::gpu::Gpu) is being opened).
    pub(crate) fn zeroed_in(ctx: &cudarc::driver::CudaContext, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread().ctx(|| "binding a context to allocate pinned memory".into())?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a plain allocation in the bound context.
        let host = unsafe { cudarc::driver::result::malloc_host(bytes.max(1), flags) }
            .ctx(|| format!("allocating {bytes} bytes of pinned host memory"))?
            .cast::<u8>();
        // SAFETY: `host` was just allocated with DEVICEMAP, in the bound context.
        let device = match unsafe { calls::mem_host_get_device_pointer(host.cast()) }
            .ctx(|| "cuMemHostGetDevicePointer".into())
        {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: allocated above, freed once.
                let _ = unsafe { cudarc::driver::result::free_host(host.cast()) };
                return Err(e);
            }
        };
        // SAFETY: `host` points to `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(host, 0, bytes.max(1)) };
        Ok(Self { host, device, bytes })
    }

    /// The host pointer.
    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    /// The address kernels use.
    pub fn device_addr(&self) -> u64 {
        self.device
    }
    /// A typed device pointer to byte `offset` (an address only: any offset is accepted, and
    /// one past the buffer is the caller's to avoid dereferencing).
    pub fn device_ptr<T>(&self, offset: usize) -> GlobalPtr<T> {
        GlobalPtr::from_addr(self.device.wrapping_add(offset as u64))
    }
    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }
    /// Whether the size is zero.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let _ = unsafe { cudarc::driver::result::free_host(self.host.cast()) };
    }
}
