//! GPU memory shared between ranks: with legacy CUDA IPC between processes, and through an
//! in-process registry between ranks that are threads of one process.
//!
//! Why legacy IPC and not VMM allocations with POSIX file descriptors: an IPC handle is 64 plain
//! bytes, so it travels through the TCP bootstrap like any other data (a file descriptor needs a
//! Unix socket and SCM_RIGHTS or `pidfd_getfd` next to the bootstrap), and it works on memory
//! from `cuMemAlloc`, which is what [`DeviceBuffer`] allocates everywhere else in this runtime.
//! Both were seen working between processes on two H200s joined by NVLink. VMM is still what
//! NVLink multicast binding needs; [`crate::nvls`] allocates that memory itself.
//!
//! The imported mapping is opened with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, so a process on
//! another GPU gets peer access as needed, and a process on the same GPU gets a plain mapping.
//!
//! # Ranks in one process
//!
//! CUDA IPC cannot open a handle in the process that made it, and needs not: every context of a
//! process shares one address space. [`ExportedMemory::of`] therefore also records the buffer's
//! allocation in a registry of this process (keyed by GPU, IPC handle and offset, holding it
//! weakly), and [`ImportedMemory::open`] of a description whose `pid` is this process's looks
//! it up there instead of calling the driver: on the same GPU the buffer's own address is used
//! as it is; on another GPU of this process, peer access to the owner's context is enabled
//! first (`cuCtxEnablePeerAccess`, once per pair; already enabled is fine).
//!
//! Lifetime: such an import holds the exporter's allocation ([`crate::memory::Retained`]), so
//! the memory stays allocated while any import of it lives, even after the exporter drops its
//! buffer; it is freed when the buffer and every import are gone. The registry itself holds
//! nothing: a description of a buffer already freed (by its buffer and every hold) is not found
//! there and goes to the driver, which refuses it, so an exporter must keep its buffer until
//! every importer has opened it, as between processes ([`crate::comm::Communicator::exchange`]
//! ends with a barrier when ranks share a process, for that reason). A description from a
//! process of another pid namespace that happens to have this process's id is not found either,
//! and is mapped with CUDA IPC as any other process's.
//!
//! (Symmetric windows whose ranks are all threads of one process do not come here: they exchange
//! addresses, and accept memory CUDA IPC cannot export; see [`crate::window`].)
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::sys::{self, CUipcMem_flags};

use crate::driver::calls;
use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;
use crate::memory::{DeviceBuffer, Retained, WeakRetained};

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
    /// Checks the sizes a peer claims before anything is mapped: the buffer
    /// `offset..offset + bytes` must lie inside the allocation of `allocation_bytes`, every sum
    /// computed without wrapping, and every size must fit this process's address space. The
    /// values come from another process and are not trusted.
    pub fn validate(&self) -> Result<()> {
        let end = self.offset.checked_add(self.bytes).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "exported buffer at offset {} of {} bytes: the end overflows 64 bits",
                self.offset, self.bytes
            ))
        })?;
        if end > self.allocation_bytes {
            return Err(Error::InvalidArgument(format!(
                "exported buffer {}..{end} lies outside its allocation of {} bytes",
                self.offset, self.allocation_bytes
            )));
        }
        if usize::try_from(self.allocation_bytes).is_err() {
            return Err(Error::InvalidArgument(format!(
                "exported allocation of {} bytes does not fit this process's address space",
                self.allocation_bytes
            )));
        }
        Ok(())
    }

    /// Exports `buf`, which must be exportable ([`DeviceBuffer::alloc_exportable`]).
    pub fn of(buf: &DeviceBuffer) -> Result<Self> {
        if !buf.is_exportable() {
            return Err(Error::InvalidArgument(
                "only buffers from DeviceBuffer::alloc_exportable (or exportable_*) can be shared with other processes"
                    .into(),
            ));
        }
        buf.gpu().bind()?;
        // SAFETY: `buf.addr()` lies in a live allocation of the bound context.
        let (base, size) = unsafe { calls::mem_get_address_range(buf.addr()) }
            .ctx(|| "finding the allocation of a buffer to export".into())?;
        // SAFETY: `base` is the start of a live cuMemAlloc allocation (exportable buffers are).
        let h = unsafe { calls::ipc_get_mem_handle(base) }
            .ctx(|| format!("exporting {} bytes of GPU {} memory", buf.len(), buf.gpu().ordinal()))?;
        let e = Self {
            handle: h.reserved.map(|c| c as u8),
            bytes: buf.len() as u64,
            offset: buf.addr() - base,
            allocation_bytes: size as u64,
            pid: std::process::id(),
            ordinal: buf.gpu().ordinal() as u32,
        };
        let mut reg = local_exports().lock().unwrap_or_else(|e| e.into_inner());
        // Forget buffers freed since (their weak holds no longer upgrade).
        reg.retain(|_, (w, _)| w.upgrade().is_some());
        reg.insert(e.local_key(), (buf.retain().downgrade(), e.bytes));
        Ok(e)
    }

    fn local_key(&self) -> LocalKey {
        (self.ordinal, self.handle, self.offset)
    }
}

/// Checks a peer's (already [validated](ExportedMemory::validate)) claim against the range the
/// driver mapped: `base` must be the start of the range `range_base..range_base + range_size`,
/// and the buffer `offset..offset + bytes` must lie inside it.
fn check_mapped_range(exported: &ExportedMemory, base: u64, range_base: u64, range_size: u64) -> Result<()> {
    let end = exported.offset.checked_add(exported.bytes);
    if range_base != base || end.is_none_or(|end| end > range_size) {
        return Err(Error::InvalidArgument(format!(
            "imported buffer at offset {} of {} bytes is not inside the mapped range of {range_size} bytes \
             (the peer claimed an allocation of {} bytes)",
            exported.offset, exported.bytes, exported.allocation_bytes
        )));
    }
    Ok(())
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
            let _ = unsafe { calls::ipc_close_mem_handle(self.base) };
        }
    }
}

type MappingKey = (usize, [u8; 64]);

/// A buffer exported by this process: GPU ordinal, IPC handle, offset in the allocation.
type LocalKey = (u32, [u8; 64], u64);

/// Every buffer this process exported, held weakly, with its size (see the module documentation).
fn local_exports() -> &'static Mutex<HashMap<LocalKey, (WeakRetained, u64)>> {
    static M: OnceLock<Mutex<HashMap<LocalKey, (WeakRetained, u64)>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What keeps an import's memory reachable (held for that, never read).
#[allow(dead_code)]
enum Backing {
    /// Another process's allocation, mapped here.
    Ipc(Arc<Mapping>),
    /// This process's own allocation (a rank that is a thread of this process exported it).
    Local(Retained),
}

fn mappings() -> &'static Mutex<HashMap<MappingKey, Weak<Mapping>>> {
    static M: OnceLock<Mutex<HashMap<MappingKey, Weak<Mapping>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Another rank's buffer made reachable from this rank's GPU: another process's mapped into this
/// process (unmapped when the last buffer of the same exporting allocation is dropped), or, for
/// a rank that is a thread of this process, its allocation held (see the module documentation).
pub struct ImportedMemory {
    backing: Backing,
    gpu: usize,
    addr: u64,
    bytes: u64,
}

impl std::fmt::Debug for ImportedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.backing {
            Backing::Ipc(_) => "mapped",
            Backing::Local(_) => "same process",
        };
        write!(f, "ImportedMemory({:#x}, {} B on GPU {}, {how})", self.addr, self.bytes, self.gpu)
    }
}

impl ImportedMemory {
    /// Makes `exported` reachable from `gpu`'s context: maps it when it comes from another
    /// process; holds it, and enables peer access when it is on another GPU, when it comes from
    /// this one.
    pub fn open(gpu: &Arc<Gpu>, exported: &ExportedMemory) -> Result<Self> {
        exported.validate()?;
        let this_process = exported.pid == std::process::id();
        if this_process && let Some(local) = Self::open_local(gpu, exported)? {
            return Ok(local);
        }
        // Not in this process's registry: another process's (one in another pid namespace may
        // have the same id), or a buffer of this process already freed, which the driver refuses.
        let key = (gpu.ordinal(), exported.handle);
        let mut cache = mappings().lock().unwrap_or_else(|e| e.into_inner());
        let mapping = match cache.get(&key).and_then(Weak::upgrade) {
            Some(m) => m,
            None => {
                gpu.bind()?;
                let h = sys::CUipcMemHandle { reserved: exported.handle.map(|b| b as std::ffi::c_char) };
                // SAFETY: `h` is a handle produced by cuIpcGetMemHandle in another process; the
                // mapping is closed once, when its `Mapping` drops.
                let base = unsafe {
                    calls::ipc_open_mem_handle(h, CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32)
                }
                .ctx(|| {
                    format!(
                        "importing {} bytes of GPU {} memory from process {} into GPU {}{}",
                        exported.allocation_bytes,
                        exported.ordinal,
                        exported.pid,
                        gpu.ordinal(),
                        if this_process {
                            " (this process's id, but not a buffer it exported and still holds: the exporter must \
                             keep its buffer until every importer has opened it)"
                        } else {
                            ""
                        }
                    )
                })?;
                let m = Arc::new(Mapping { gpu: gpu.clone(), base });
                cache.insert(key, Arc::downgrade(&m));
                m
            }
        };
        // The claim is checked against what the driver actually mapped, not only against the
        // peer's own allocation size: the mapped range must cover the whole buffer.
        // SAFETY: `mapping.base` is the start of a live mapping in this context.
        let (range_base, range_size) = unsafe { calls::mem_get_address_range(mapping.base) }
            .ctx(|| "finding the range of an imported mapping".into())?;
        check_mapped_range(exported, mapping.base, range_base, range_size as u64)?;
        let addr = mapping.base.checked_add(exported.offset).ok_or_else(|| {
            Error::InvalidArgument(format!("imported buffer at offset {} overflows the address space", exported.offset))
        })?;
        Ok(Self { backing: Backing::Ipc(mapping), gpu: gpu.ordinal(), addr, bytes: exported.bytes })
    }

    /// [`Self::open`] of a buffer this process exported and still holds; `None` when the
    /// registry has no such buffer alive.
    fn open_local(gpu: &Arc<Gpu>, exported: &ExportedMemory) -> Result<Option<Self>> {
        let found = local_exports().lock().unwrap_or_else(|e| e.into_inner()).get(&exported.local_key()).cloned();
        let Some((held, bytes)) = found.and_then(|(w, bytes)| Some((w.upgrade()?, bytes))) else { return Ok(None) };
        if bytes != exported.bytes {
            return Err(Error::InvalidArgument(format!(
                "this process exported {bytes} bytes at that place, the description says {}",
                exported.bytes
            )));
        }
        gpu.enable_peer_access(held.gpu())?;
        let addr = held.addr();
        Ok(Some(Self { backing: Backing::Local(held), gpu: gpu.ordinal(), addr, bytes }))
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

    fn claim(bytes: u64, offset: u64, allocation_bytes: u64) -> ExportedMemory {
        ExportedMemory { handle: [0; 64], bytes, offset, allocation_bytes, pid: 7, ordinal: 0 }
    }

    #[test]
    fn hostile_sizes_are_rejected_before_any_driver_call() {
        assert!(claim(4096, 512, 1 << 21).validate().is_ok());
        assert!(claim(0, 0, 0).validate().is_ok());
        assert!(claim(1 << 21, 0, 1 << 21).validate().is_ok());
        // Outside the allocation.
        assert!(claim(4096, (1 << 21) - 4095, 1 << 21).validate().is_err());
        // offset + bytes wraps to a small number: must not pass.
        assert!(claim(u64::MAX, 1, 1 << 21).validate().is_err());
        assert!(claim(2, u64::MAX, 1 << 21).validate().is_err());
        assert!(claim(u64::MAX, u64::MAX, u64::MAX).validate().is_err());
        assert!(claim(1 << 63, 1 << 63, 1 << 21).validate().is_err());
    }

    #[test]
    fn the_claim_is_checked_against_the_mapped_range() {
        let e = claim(4096, 512, 1 << 21);
        assert!(check_mapped_range(&e, 0x1000, 0x1000, 1 << 21).is_ok());
        assert!(check_mapped_range(&e, 0x1000, 0x1000, 4608).is_ok());
        // The driver mapped less than the peer claimed.
        assert!(check_mapped_range(&e, 0x1000, 0x1000, 4096).is_err());
        // The base is not the start of the mapped range.
        assert!(check_mapped_range(&e, 0x2000, 0x1000, 1 << 21).is_err());
        assert!(check_mapped_range(&claim(u64::MAX, 1, u64::MAX), 0, 0, u64::MAX).is_err());
    }

    /// The layout is a wire format between processes that may be built separately: pin every
    /// field's offset and the size, so that reordering, resizing or padding a field fails here
    /// (a bytes round trip within one build cannot notice any of those).
    #[test]
    fn exported_layout_is_pinned() {
        use core::mem::{align_of, offset_of, size_of};
        assert_eq!(offset_of!(ExportedMemory, handle), 0);
        assert_eq!(offset_of!(ExportedMemory, bytes), 64);
        assert_eq!(offset_of!(ExportedMemory, offset), 72);
        assert_eq!(offset_of!(ExportedMemory, allocation_bytes), 80);
        assert_eq!(offset_of!(ExportedMemory, pid), 88);
        assert_eq!(offset_of!(ExportedMemory, ordinal), 92);
        assert_eq!(size_of::<ExportedMemory>(), 96);
        assert_eq!(align_of::<ExportedMemory>(), 8);
        // Little-endian fields at those offsets.
        let e = ExportedMemory { handle: [0xab; 64], bytes: 1, offset: 2, allocation_bytes: 3, pid: 4, ordinal: 5 };
        let b = bytemuck::bytes_of(&e);
        assert_eq!(&b[64..72], &1u64.to_le_bytes());
        assert_eq!(&b[88..92], &4u32.to_le_bytes());
        assert_eq!(&b[92..96], &5u32.to_le_bytes());
    }
}
