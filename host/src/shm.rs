//! Host memory shared by the processes of one machine: a file in `/dev/shm` that each process
//! maps, optionally pinned and mapped for a GPU ([`SharedHostMemory::register`]) so kernels of
//! that process read it. The port channels' host-written semaphore counters live here: the
//! receiving rank's GPU polls the word, the sending rank's proxy thread stores to it.
//!
//! The creator names the file; the other processes open it by that name; once every process has
//! it mapped, [`SharedHostMemory::unlink`] removes the name (the mappings stay), so nothing is
//! left in `/dev/shm` even when a process later dies. A value that still owns its name removes it
//! on drop.

use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::error::{Error, Result, check};
use crate::gpu::Gpu;

const DIR: &str = "/dev/shm";

/// A mapping of a shared host-memory file; see the module documentation.
pub struct SharedHostMemory {
    host: NonNull<u8>,
    bytes: usize,
    name: String,
    /// Set while this value owns the name (creator, before `unlink`).
    owned_path: Option<PathBuf>,
    /// The GPU it is registered with, and the device address there.
    registered: Option<(Arc<Gpu>, CUdeviceptr)>,
}

// SAFETY: the mapping is plain shared memory owned by this value; access goes through raw
// pointers whose synchronisation is the user's (atomics in this crate).
unsafe impl Send for SharedHostMemory {}
// SAFETY: as above; shared references only expose raw pointers.
unsafe impl Sync for SharedHostMemory {}

impl std::fmt::Debug for SharedHostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHostMemory")
            .field("name", &self.name)
            .field("bytes", &self.bytes)
            .field("device", &self.registered.as_ref().map(|r| r.1))
            .finish()
    }
}

fn check_name(name: &str) -> Result<PathBuf> {
    if name.is_empty() || name.len() > 200 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::InvalidArgument(format!("shared memory name {name:?}: use 1-200 of [A-Za-z0-9_-]")));
    }
    Ok(PathBuf::from(DIR).join(name))
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

impl SharedHostMemory {
    /// Creates the file `name` (which must not exist) of `bytes` zeroed bytes and maps it.
    pub fn create(name: &str, bytes: usize) -> Result<Self> {
        let path = check_name(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(format!("creating shared memory {}", path.display())))?;
        // From here on the name is ours: errors below remove it (drop of `mem`, or by hand).
        let grown = file.set_len(bytes as u64).map_err(io_err(format!("sizing shared memory {}", path.display())));
        match grown.and_then(|()| map(&file, bytes, name)) {
            Ok(host) => Ok(Self { host, bytes, name: name.into(), owned_path: Some(path), registered: None }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Maps the existing file `name`, which must hold at least `bytes` bytes.
    pub fn open(name: &str, bytes: usize) -> Result<Self> {
        let path = check_name(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(format!("opening shared memory {}", path.display())))?;
        let len = file.metadata().map_err(io_err(format!("reading the size of {}", path.display())))?.len();
        if len < bytes as u64 {
            return Err(Error::InvalidArgument(format!("shared memory {name} has {len} bytes, not {bytes}")));
        }
        let host = map(&file, bytes, name)?;
        Ok(Self { host, bytes, name: name.into(), owned_path: None, registered: None })
    }

    /// Pins the mapping and maps it into every context's address space (`PORTABLE | DEVICEMAP`),
    /// so kernels on `gpu` (and other GPUs of this process) can use [`Self::device_addr`].
    pub fn register(&mut self, gpu: &Arc<Gpu>) -> Result<()> {
        if self.registered.is_some() {
            return Err(Error::InvalidArgument(format!("shared memory {} is already registered", self.name)));
        }
        gpu.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the range is this value's live mapping; unregistered before it is unmapped.
        let r = unsafe { sys::cuMemHostRegister_v2(self.host.as_ptr().cast(), self.bytes, flags) };
        check(r, || format!("registering shared memory {} ({} bytes)", self.name, self.bytes))?;
        let mut device: CUdeviceptr = 0;
        // SAFETY: registered just above with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, self.host.as_ptr().cast(), 0) };
        if let Err(e) = check(r, || format!("mapping shared memory {} for GPU {}", self.name, gpu.ordinal())) {
            // SAFETY: registered above, unregistered once.
            let _ = unsafe { sys::cuMemHostUnregister(self.host.as_ptr().cast()) };
            return Err(e);
        }
        self.registered = Some((gpu.clone(), device));
        Ok(())
    }

    /// Removes the name, if this value created it and has not removed it yet: processes that
    /// have it mapped keep their mappings, nobody can open it any more.
    pub fn unlink(&mut self) -> Result<()> {
        match self.owned_path.take() {
            Some(p) => std::fs::remove_file(&p).map_err(io_err(format!("removing shared memory {}", p.display()))),
            None => Ok(()),
        }
    }

    /// The name other processes open.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// This process's address of byte 0.
    pub fn host_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }
    /// The address kernels use (after [`Self::register`]).
    pub fn device_addr(&self) -> Option<u64> {
        self.registered.as_ref().map(|r| r.1)
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

fn map(file: &File, bytes: usize, name: &str) -> Result<NonNull<u8>> {
    let len =
        NonZeroUsize::new(bytes).ok_or_else(|| Error::InvalidArgument(format!("shared memory {name}: zero bytes")))?;
    // SAFETY: a fresh shared mapping of a file we hold open; nothing else aliases it in Rust.
    let p = unsafe { mmap(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, file, 0) }
        .map_err(|e| Error::Io { context: format!("mapping shared memory {name}"), source: e.into() })?;
    Ok(p.cast())
}

impl Drop for SharedHostMemory {
    fn drop(&mut self) {
        if let Some((gpu, _)) = &self.registered {
            let _ = gpu.bind();
            // SAFETY: registered by `register`, unregistered once, before the unmap below.
            let _ = unsafe { sys::cuMemHostUnregister(self.host.as_ptr().cast()) };
        }
        // SAFETY: the mapping made by `map` with this length, unmapped once.
        let _ = unsafe { munmap(self.host.cast(), self.bytes) };
        let _ = self.unlink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn unique(tag: &str) -> String {
        format!("mscclpp-rs-test-{tag}-{}-{:x}", std::process::id(), rand::random::<u64>())
    }

    #[test]
    fn a_second_mapping_sees_the_first_ones_writes() {
        let name = unique("share");
        let mut a = SharedHostMemory::create(&name, 4096).unwrap();
        let b = SharedHostMemory::open(&name, 4096).unwrap();
        assert_ne!(a.host_ptr(), b.host_ptr());
        // SAFETY: both point at 4096 mapped bytes; word 3 is 8-aligned (page-aligned mappings).
        let (wa, wb) = unsafe {
            (
                AtomicU64::from_ptr(a.host_ptr().cast::<u64>().add(3)),
                AtomicU64::from_ptr(b.host_ptr().cast::<u64>().add(3)),
            )
        };
        assert_eq!(wb.load(Ordering::Acquire), 0, "created zeroed");
        wa.store(0xfeed_beef, Ordering::Release);
        assert_eq!(wb.load(Ordering::Acquire), 0xfeed_beef);
        // After unlink the mappings stay, the name is gone.
        a.unlink().unwrap();
        assert!(!PathBuf::from(DIR).join(&name).exists());
        wb.store(7, Ordering::Release);
        assert_eq!(wa.load(Ordering::Acquire), 7);
        assert!(SharedHostMemory::open(&name, 8).is_err());
        assert_eq!(a.device_addr(), None);
    }

    #[test]
    fn creator_drop_removes_the_name_and_bad_input_is_refused() {
        let name = unique("drop");
        drop(SharedHostMemory::create(&name, 64).unwrap());
        assert!(!PathBuf::from(DIR).join(&name).exists());
        let keep = SharedHostMemory::create(&name, 64).unwrap();
        assert!(SharedHostMemory::create(&name, 64).is_err(), "an existing name");
        assert!(SharedHostMemory::open(&name, 65).unwrap_err().to_string().contains("has 64 bytes"));
        drop(keep);
        for bad in ["", "../etc/passwd", "a/b", "sp ace"] {
            assert!(SharedHostMemory::create(bad, 8).unwrap_err().to_string().contains("shared memory name"), "{bad}");
        }
        assert!(SharedHostMemory::create(&unique("zero"), 0).unwrap_err().to_string().contains("zero bytes"));
    }
}
