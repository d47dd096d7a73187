//! GPU memory shared between processes with legacy CUDA IPC.
//!
//! Why legacy IPC and not VMM allocations with POSIX file descriptors: an IPC handle is 64 plain
//! bytes, so it travels through the TCP bootstrap like any other data (a file descriptor needs a
//! Unix socket and SCM_RIGHTS or `pidfd_getfd` next to the bootstrap), and it works on memory
//! from `cuMemAlloc`, which is what [`DeviceBuffer`] allocates everywhere else in this runtime.
//! Both were seen working on the lent H200 machines (DESIGN.md section 4). VMM is still what
//! NVLink multicast binding needs; [`crate::nvls`] allocates that memory itself.
//!
//! The imported mapping is opened with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, so a process on
//! another GPU gets peer access as needed, and a process on the same GPU gets a plain mapping.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::sys::{self, CUipcMem_flags};

use crate::error::{Error, Result, check};
use crate::gpu::Gpu;
use crate::memory::DeviceBuffer;

/// What one process sends another so that it can map a buffer: the IPC handle of the driver
/// allocation that contains the buffer, the buffer's offset in it, and its size.
///
/// The offset matters: the driver may place small `cuMemAlloc` buffers inside one larger
/// allocation, and an IPC handle always names (and maps) the whole containing allocation.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExportedMemory {
    /// The driver's opaque IPC handle of the containing allocation.
    pub handle: [u8; 64],
    /// Bytes in the buffer.
    pub bytes: u64,
    /// The buffer's offset from the start of the containing allocation.
    pub offset: u64,
    /// Bytes in the containing allocation.
    pub allocation_bytes: u64,
    /// The exporting process's id (a process cannot import its own handle).
    pub pid: u32,
    /// The exporting GPU's ordinal.
    pub ordinal: u32,
}
static_assertions::assert_eq_size!(ExportedMemory, [u8; 96]);

impl ExportedMemory {
    /// Exports `buf`, which must be exportable ([`DeviceBuffer::alloc_exportable`]).
    pub fn of(buf: &DeviceBuffer) -> Result<Self> {
        if !buf.is_exportable() {
            return Err(Error::InvalidArgument(
                "only buffers from DeviceBuffer::alloc_exportable (or exportable_*) can be shared with other processes"
                    .into(),
            ));
        }
        buf.gpu().bind()?;
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: `buf.addr()` lies in a live allocation; both are out-params.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, buf.addr()) };
        check(r, || "finding the allocation of a buffer to export".into())?;
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: `base` is the start of a live cuMemAlloc allocation; `h` is an out-param.
        let r = unsafe { sys::cuIpcGetMemHandle(&mut h, base) };
        check(r, || format!("exporting {} bytes of GPU {} memory", buf.len(), buf.gpu().ordinal()))?;
        Ok(Self {
            handle: h.reserved.map(|c| c as u8),
            bytes: buf.len() as u64,
            offset: buf.addr() - base,
            allocation_bytes: size as u64,
            pid: std::process::id(),
            ordinal: buf.gpu().ordinal() as u32,
        })
    }
}

/// One opened IPC handle. The driver maps a given handle once per context, so every buffer of
/// the same exporting allocation shares one mapping; it is unmapped when the last user drops.
struct Mapping {
    gpu: Arc<Gpu>,
    base: u64,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: `base` came from cuIpcOpenMemHandle in this context and is closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.base) };
        }
    }
}

type MappingKey = (usize, [u8; 64]);

fn mappings() -> &'static Mutex<HashMap<MappingKey, Weak<Mapping>>> {
    static M: OnceLock<Mutex<HashMap<MappingKey, Weak<Mapping>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Another process's buffer mapped into this process. Unmapped when the last buffer of the same
/// exporting allocation is dropped.
pub struct ImportedMemory {
    mapping: Arc<Mapping>,
    addr: u64,
    bytes: u64,
}

impl std::fmt::Debug for ImportedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImportedMemory({:#x}, {} B on GPU {})", self.addr, self.bytes, self.mapping.gpu.ordinal())
    }
}

impl ImportedMemory {
    /// Maps `exported` into `gpu`'s context.
    pub fn open(gpu: &Arc<Gpu>, exported: &ExportedMemory) -> Result<Self> {
        if exported.pid == std::process::id() {
            return Err(Error::InvalidArgument(
                "a process cannot import its own CUDA IPC handle; use the buffer directly".into(),
            ));
        }
        if exported.offset + exported.bytes > exported.allocation_bytes {
            return Err(Error::InvalidArgument(format!(
                "exported buffer {}..{} lies outside its allocation of {} bytes",
                exported.offset,
                exported.offset + exported.bytes,
                exported.allocation_bytes
            )));
        }
        let key = (gpu.ordinal(), exported.handle);
        let mut cache = mappings().lock().unwrap_or_else(|e| e.into_inner());
        let mapping = match cache.get(&key).and_then(Weak::upgrade) {
            Some(m) => m,
            None => {
                gpu.bind()?;
                let h = sys::CUipcMemHandle { reserved: exported.handle.map(|b| b as std::ffi::c_char) };
                let mut base = 0u64;
                // SAFETY: `h` is a handle produced by cuIpcGetMemHandle in another process; `base`
                // is an out-param.
                let r = unsafe {
                    sys::cuIpcOpenMemHandle_v2(&mut base, h, CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32)
                };
                check(r, || {
                    format!(
                        "importing {} bytes of GPU {} memory from process {} into GPU {}",
                        exported.allocation_bytes,
                        exported.ordinal,
                        exported.pid,
                        gpu.ordinal()
                    )
                })?;
                let m = Arc::new(Mapping { gpu: gpu.clone(), base });
                cache.insert(key, Arc::downgrade(&m));
                m
            }
        };
        let addr = mapping.base + exported.offset;
        Ok(Self { mapping, addr, bytes: exported.bytes })
    }
    /// The mapped address (valid on this process's GPU).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.bytes as usize
    }
    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_layout_round_trips_as_bytes() {
        let mut e =
            ExportedMemory { handle: [0; 64], bytes: 4096, offset: 512, allocation_bytes: 1 << 21, pid: 7, ordinal: 1 };
        e.handle[3] = 0xfe;
        let bytes = bytemuck::bytes_of(&e).to_vec();
        let back: ExportedMemory = *bytemuck::from_bytes(&bytes);
        assert_eq!(back, e);
    }
}
