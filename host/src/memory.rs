//! Device and pinned host memory.

use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use mscclpp_device::ptr::GlobalPtr;

use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;

/// Device memory from `cuMemAlloc` (not the stream-ordered pool, so that it can be exported with
/// CUDA IPC), freed on drop, or once the last [`Retained`] hold on it is dropped when channels
/// were built over it. Copies to and from it are ordered on the owning [`Gpu`]'s stream.
pub struct DeviceBuffer {
    mem: Arc<Allocation>,
    bytes: usize,
    exportable: bool,
    /// Whether it is `cuMemAlloc` memory, which other GPUs of this process reach once peer access
    /// is enabled (stream-ordered pool memory and virtual-memory mappings they do not).
    peer_reachable: bool,
}

/// A driver allocation, freed when the last holder lets go: the [`DeviceBuffer`] and whatever
/// the runtime built over it ([`Retained`]).
struct Allocation {
    gpu: Arc<Gpu>,
    ptr: CUdeviceptr,
    /// False for memory the caller allocated ([`DeviceBuffer::from_raw`]): never freed here.
    owned: bool,
    /// What owns memory that is not owned here, when something does (a cudarc `CudaSlice` a
    /// window took): held, never read, so that every hold on the allocation keeps it.
    _owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

/// Whether dropped allocations are kept for [`free_deferred`] instead of freed at once.
static DEFER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The allocations dropped while [`defer_frees`] was on.
static DEFERRED: std::sync::Mutex<Vec<(Arc<Gpu>, CUdeviceptr)>> = std::sync::Mutex::new(Vec::new());

/// Defers every free of device memory in this process until [`free_deferred`].
///
/// `cuMemFree` waits for every kernel of the context. Ranks that are threads of one process share
/// the context of their GPU, so a rank that drops a buffer while another rank's kernel waits for
/// this rank's next kernel would wait forever (until that kernel's spin budget traps). A program
/// that runs ranks as threads and frees buffers between collective operations turns deferral on,
/// and calls [`free_deferred`] where every rank of the process is between operations (after a
/// barrier), or lets the memory go at exit.
pub fn defer_frees(on: bool) {
    DEFER.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Frees what was dropped while [`defer_frees`] was on; returns how many allocations. Call it only
/// where no kernel of this process waits for another rank.
pub fn free_deferred() -> usize {
    let all = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|e| e.into_inner()));
    let n = all.len();
    for (gpu, ptr) in all {
        free_now(&gpu, ptr);
    }
    n
}

fn free_now(gpu: &Gpu, ptr: CUdeviceptr) {
    // Errors cannot be returned from drop; a failed free after a kernel fault is expected.
    if gpu.bind().is_ok() {
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once, here.
        let _ = unsafe { cudarc::driver::result::free_sync(ptr) };
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if DEFER.load(std::sync::atomic::Ordering::SeqCst) {
            DEFERRED.lock().unwrap_or_else(|e| e.into_inner()).push((self.gpu.clone(), self.ptr));
            return;
        }
        // Errors cannot be returned from drop; a failed free after a kernel fault is expected.
        if self.gpu.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once, here.
            let _ = unsafe { cudarc::driver::result::free_sync(self.ptr) };
        }
    }
}

/// Keeps a [`DeviceBuffer`]'s memory allocated after the buffer itself is dropped: channels,
/// proxies and transports built over a buffer hold one, so the memory they copy to and from
/// stays theirs for as long as they exist, whatever the caller does with the buffer.
#[derive(Clone)]
pub struct Retained(#[allow(dead_code)] Arc<Allocation>);

impl Retained {
    /// The allocation's device address (the buffer's [`DeviceBuffer::addr`]).
    pub(crate) fn addr(&self) -> u64 {
        self.0.ptr
    }
    /// The GPU the memory is on.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.0.gpu
    }
    /// A hold that does not keep the memory allocated ([`WeakRetained::upgrade`]).
    pub(crate) fn downgrade(&self) -> WeakRetained {
        WeakRetained(Arc::downgrade(&self.0))
    }
}

/// A [`Retained`] that does not keep the memory: it upgrades while the buffer or another hold
/// is alive.
#[derive(Clone)]
pub(crate) struct WeakRetained(std::sync::Weak<Allocation>);

impl WeakRetained {
    pub(crate) fn upgrade(&self) -> Option<Retained> {
        self.0.upgrade().map(Retained)
    }
}

impl std::fmt::Debug for Retained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retained(GPU {}, {:#x})", self.0.gpu.ordinal(), self.0.ptr)
    }
}

/// Allocation granularity of exportable buffers: each is a driver allocation of its own, so
/// that an IPC handle (which always names a whole allocation) maps exactly this buffer.
pub const EXPORT_GRANULARITY: usize = 2 << 20;

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer(GPU {}, {:#x}, {} B)", self.mem.gpu.ordinal(), self.mem.ptr, self.bytes)
    }
}

impl DeviceBuffer {
    /// Allocates `bytes` (uninitialised; at least 1 byte is allocated).
    pub fn alloc(gpu: &Arc<Gpu>, bytes: usize) -> Result<Self> {
        Self::alloc_with(gpu, bytes, bytes.max(1), false)
    }

    /// Allocates `bytes` that other processes can map ([`crate::ipc`]): the driver allocation
    /// is rounded up to [`EXPORT_GRANULARITY`], so no other buffer shares it. (Small `cuMemAlloc`
    /// buffers can share one driver allocation; a peer importing one of them would map the
    /// whole allocation and, on H200, such a shared small buffer was seen to hang a kernel.)
    pub fn alloc_exportable(gpu: &Arc<Gpu>, bytes: usize) -> Result<Self> {
        Self::alloc_with(gpu, bytes, bytes.max(1).next_multiple_of(EXPORT_GRANULARITY), true)
    }

    /// An exportable buffer filled with `byte`.
    pub fn exportable_filled(gpu: &Arc<Gpu>, bytes: usize, byte: u8) -> Result<Self> {
        let b = Self::alloc_exportable(gpu, bytes)?;
        b.fill(byte)?;
        Ok(b)
    }

    /// An exportable buffer holding `data`.
    pub fn exportable_from_slice<T: bytemuck::Pod>(gpu: &Arc<Gpu>, data: &[T]) -> Result<Self> {
        let b = Self::alloc_exportable(gpu, std::mem::size_of_val(data))?;
        b.write(0, data)?;
        Ok(b)
    }

    fn alloc_with(gpu: &Arc<Gpu>, bytes: usize, alloc: usize, exportable: bool) -> Result<Self> {
        gpu.bind()?;
        // SAFETY: a plain allocation in the bound context.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(alloc) }
            .ctx(|| format!("allocating {bytes} bytes on GPU {}", gpu.ordinal()))?;
        Ok(Self {
            mem: Arc::new(Allocation { gpu: gpu.clone(), ptr, owned: true, _owner: None }),
            bytes,
            exportable,
            peer_reachable: true,
        })
    }

    /// Wraps `bytes` of device memory at `ptr` that the caller allocated on `gpu` (never freed
    /// here). It is exportable ([`Self::is_exportable`]) when CUDA IPC can map exactly it: the
    /// start of a driver allocation (`cuMemAlloc`; not the stream-ordered pool that cudarc's
    /// `CudaStream::alloc` takes from) of a multiple of [`EXPORT_GRANULARITY`] bytes. Memory that
    /// is not on `gpu`'s device, or shorter than `bytes`, is refused.
    ///
    /// # Safety
    /// The `bytes` at `ptr` stay allocated until this buffer and every hold on it
    /// ([`Self::retain`]: the windows and channels built over it) are dropped.
    pub unsafe fn from_raw(gpu: &Arc<Gpu>, ptr: u64, bytes: usize) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_raw_owned_by(gpu, ptr, bytes, None) }
    }

    /// [`Self::from_raw`] of memory that `owner` owns: the buffer and every hold on it
    /// ([`Self::retain`]) keep `owner`.
    ///
    /// # Safety
    /// As [`Self::from_raw`]; with an `owner`, it is enough that `owner` keeps the memory
    /// allocated until it is dropped.
    pub(crate) unsafe fn from_raw_owned_by(
        gpu: &Arc<Gpu>,
        ptr: u64,
        bytes: usize,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<Self> {
        use cudarc::driver::sys::{self, CUpointer_attribute as A};
        gpu.bind()?;
        let attr = |a: A| -> Result<u64> {
            let mut v = 0u64;
            // SAFETY: an out-parameter at least as large as every attribute asked here (an
            // unsigned int, an int or a pointer), zeroed first.
            let r = unsafe { sys::cuPointerGetAttribute(&mut v as *mut u64 as *mut std::ffi::c_void, a, ptr) };
            crate::error::check(r, || format!("{ptr:#x}: cuPointerGetAttribute({a:?})"))?;
            Ok(v)
        };
        let what = || format!("{bytes} bytes at {ptr:#x}");
        let kind = attr(A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            .map_err(|_| Error::InvalidArgument(format!("{}: not memory the CUDA driver knows", what())))?;
        if kind & 0xffff_ffff != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u64 {
            return Err(Error::InvalidArgument(format!("{}: not device memory", what())));
        }
        let ordinal = attr(A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)? & 0xffff_ffff;
        if ordinal != gpu.ordinal() as u64 {
            return Err(Error::InvalidArgument(format!("{}: on GPU {ordinal}, not GPU {}", what(), gpu.ordinal())));
        }
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out-parameters; `ptr` is device memory of the bound context's device.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
        crate::error::check(r, || format!("{}: cuMemGetAddressRange", what()))?;
        let end = (ptr - base).checked_add(bytes as u64);
        if end.is_none_or(|end| end > size as u64) {
            return Err(Error::InvalidArgument(format!(
                "{}: its allocation ends {} bytes after it",
                what(),
                size as u64 - (ptr - base)
            )));
        }
        let ipc = attr(A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)? & 0xffff_ffff != 0;
        let exportable = ipc && base == ptr && size.is_multiple_of(EXPORT_GRANULARITY);
        // Legacy IPC capability marks `cuMemAlloc` memory (the pool's and VMM mappings lack it).
        Ok(Self {
            mem: Arc::new(Allocation { gpu: gpu.clone(), ptr, owned: false, _owner: owner }),
            bytes,
            exportable,
            peer_reachable: ipc,
        })
    }

    /// A hold on this buffer's memory: it stays allocated until the buffer and every hold are
    /// dropped.
    pub fn retain(&self) -> Retained {
        Retained(self.mem.clone())
    }

    /// Whether the buffer was allocated with [`DeviceBuffer::alloc_exportable`].
    pub fn is_exportable(&self) -> bool {
        self.exportable
    }

    /// Whether other GPUs of this process reach it once peer access is enabled (`cuMemAlloc`
    /// memory; not stream-ordered pool memory). Told by the driver's legacy-IPC-capable
    /// attribute, which `cuMemAlloc` memory has and pool memory has not: on a platform without
    /// CUDA IPC this says no for all memory, which only refuses more (never maps less).
    pub(crate) fn is_peer_reachable(&self) -> bool {
        self.peer_reachable
    }

    /// Allocates and fills with `byte`.
    pub fn filled(gpu: &Arc<Gpu>, bytes: usize, byte: u8) -> Result<Self> {
        let b = Self::alloc(gpu, bytes)?;
        b.fill(byte)?;
        Ok(b)
    }

    /// Allocates and copies `data` in.
    pub fn from_slice<T: bytemuck::Pod>(gpu: &Arc<Gpu>, data: &[T]) -> Result<Self> {
        let b = Self::alloc(gpu, std::mem::size_of_val(data))?;
        b.write(0, data)?;
        Ok(b)
    }

    /// The owning GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.mem.gpu
    }
    /// The device address.
    pub fn addr(&self) -> u64 {
        self.mem.ptr
    }
    /// A typed device pointer to the start.
    pub fn ptr<T>(&self) -> GlobalPtr<T> {
        GlobalPtr::from_addr(self.mem.ptr)
    }
    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }
    /// Whether the size is zero.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    fn range(&self, offset: usize, bytes: usize) -> Result<()> {
        if offset.checked_add(bytes).is_none_or(|end| end > self.bytes) {
            return Err(Error::InvalidArgument(format!(
                "range {offset}..{} outside a buffer of {} bytes",
                offset.saturating_add(bytes),
                self.bytes
            )));
        }
        Ok(())
    }

    /// Copies `data` to byte `offset`, ordered after earlier work on the GPU's stream; returns
    /// when the copy is done.
    ///
    /// The stream is synchronised before the copy is issued (see [`DeviceBuffer::read`]): a copy
    /// from ordinary host memory passes through the driver's staging memory, which every stream of
    /// the context shares, and a copy queued behind a kernel that waits for another rank would
    /// hold it until that kernel ends, while the other rank (a thread of this process on the same
    /// GPU) cannot stage the copy it needs before launching its own kernel.
    pub fn write<T: bytemuck::Pod>(&self, offset: usize, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.range(offset, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        self.mem.gpu.bind()?;
        self.mem.gpu.synchronize()?;
        let s = self.mem.gpu.stream().cu_stream();
        // SAFETY: destination range checked above; source is a live host slice and we
        // synchronise before returning, so it outlives the copy.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.mem.ptr + offset as u64, bytes, s) }
            .ctx(|| format!("copying {} bytes to GPU {}", bytes.len(), self.mem.gpu.ordinal()))?;
        self.mem.gpu.synchronize()
    }

    /// Copies from byte `offset` into `out`, ordered after earlier work on the GPU's stream.
    ///
    /// Like [`DeviceBuffer::write`], it first waits for the stream's earlier work and only then
    /// issues the copy, so that the copy never holds the context's shared staging memory while
    /// this stream's kernels wait for other ranks.
    pub fn read<T: bytemuck::Pod>(&self, offset: usize, out: &mut [T]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        self.range(offset, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        self.mem.gpu.bind()?;
        self.mem.gpu.synchronize()?;
        let s = self.mem.gpu.stream().cu_stream();
        // SAFETY: source range checked above; destination is a live host slice and we
        // synchronise before returning.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(bytes, self.mem.ptr + offset as u64, s) }
            .ctx(|| format!("copying {} bytes from GPU {}", bytes.len(), self.mem.gpu.ordinal()))?;
        self.mem.gpu.synchronize()
    }

    /// The whole buffer as `T`s (the size must be a multiple of `size_of::<T>()`, and `T` not
    /// zero-sized).
    pub fn to_vec<T: bytemuck::Pod>(&self) -> Result<Vec<T>> {
        let n = whole_elements(self.bytes, std::mem::size_of::<T>())?;
        let mut v = vec![T::zeroed(); n];
        self.read(0, &mut v)?;
        Ok(v)
    }

    /// Sets every byte to `byte`, ordered on the GPU's stream; returns when done.
    pub fn fill(&self, byte: u8) -> Result<()> {
        self.mem.gpu.bind()?;
        // SAFETY: the whole allocation.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.mem.ptr, byte, self.bytes, self.mem.gpu.stream().cu_stream())
        }
        .ctx(|| format!("filling {} bytes on GPU {}", self.bytes, self.mem.gpu.ordinal()))?;
        self.mem.gpu.synchronize()
    }
}

/// How many elements of `size` bytes make up `bytes` exactly: an error for a zero size (a
/// zero-sized type has no element count) or a remainder.
pub(crate) fn whole_elements(bytes: usize, size: usize) -> Result<usize> {
    match bytes.checked_div(size) {
        Some(n) if n * size == bytes => Ok(n),
        Some(_) => Err(Error::InvalidArgument(format!("{bytes} bytes is not a whole number of {size}-byte elements"))),
        None => Err(Error::InvalidArgument(format!("{bytes} bytes cannot be read as zero-sized elements"))),
    }
}

pub use crate::pinned::PinnedBuffer;

impl PinnedBuffer {
    /// Allocates `bytes` of zeroed, device-mapped pinned memory (`gpu`'s context must exist; the
    /// memory is portable to every context).
    pub fn zeroed(gpu: &Gpu, bytes: usize) -> Result<Self> {
        Self::zeroed_in(gpu.context(), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::whole_elements;

    #[test]
    fn element_counts_refuse_zero_sized_types_and_remainders() {
        assert_eq!(whole_elements(64, 4).unwrap(), 16);
        assert_eq!(whole_elements(0, 8).unwrap(), 0);
        // `to_vec::<()>()` divided by zero before.
        assert!(whole_elements(64, 0).unwrap_err().to_string().contains("zero-sized"));
        assert!(whole_elements(0, 0).is_err());
        assert!(whole_elements(65, 4).unwrap_err().to_string().contains("not a whole number"));
    }
}
