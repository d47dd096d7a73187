//! Host memory shared by the processes of one machine: a file in `/dev/shm` that each process
//! maps, optionally pinned and mapped for a GPU ([`SharedHostMemory::register`]) so kernels of
//! that process read it. The port channels' host-written semaphore counters live here: the
//! receiving rank's GPU polls the word, the sending rank's proxy thread stores to it.
//!
//! The creator names the file; the other processes open it by that name; once every process has
//! it mapped, [`SharedHostMemory::unlink`] removes the name (the mappings stay), so nothing is
//! left in `/dev/shm` even when a process later dies. A value that still owns its name removes it
//! on drop.
//!
//! `/dev/shm` is shared by every user of the machine, so a name is not trusted: the creator makes
//! the file with `O_EXCL` and mode 0600; [`SharedHostMemory::open`] refuses a symbolic link
//! (`O_NOFOLLOW`) and checks, on the opened descriptor, that it is a regular file owned by this
//! user, with mode 0600 and exactly the expected size. A process that dies between creating its
//! file and unlinking it leaves the file behind; [`remove_stale_files`] deletes such files (the
//! names embed the creator's process id, see [`stale_owner`]) and runs before a new one is made.

use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cudarc::driver::sys::{self, CUdeviceptr};
use nix::errno::Errno;
use nix::libc;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::driver::calls;
use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;

const DIR: &str = "/dev/shm";

/// The prefix of the names this crate gives its files: `mscclpp-rs-{pid}-{rank}-{random}`.
pub const NAME_PREFIX: &str = "mscclpp-rs-";

/// The only mode the files may have: read and write for the owner.
const MODE: u32 = 0o600;

/// The effective user id of this process.
fn euid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The creator's process id if `name` has the form `mscclpp-rs-{pid}-{rank}-{hex}` (the names
/// [`remove_stale_files`] may remove), else `None`.
pub fn stale_owner(name: &str) -> Option<i32> {
    let mut parts = name.strip_prefix(NAME_PREFIX)?.split('-');
    let (pid, rank, random) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        || !digits(pid)
        || !digits(rank)
        || random.is_empty()
        || !random.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    pid.parse::<i32>().ok().filter(|&p| p > 0)
}

/// Whether a process with id `pid` exists (signal 0 probes without sending anything; `EPERM`
/// means it exists but belongs to another user).
fn process_alive(pid: i32) -> bool {
    !matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

/// How old a file of a process that seems dead must be before it is removed. A process in another
/// pid namespace sharing this `/dev/shm` looks dead from here; its file lives only for the few
/// seconds between creation and unlink, so an old file is a stale one.
pub const STALE_AGE: Duration = Duration::from_secs(300);

/// Removes the files of `dir` named like this crate's shared-memory files whose creating process
/// no longer exists, which belong to this user and were last modified at least [`STALE_AGE`] ago.
/// Returns how many were removed.
fn remove_stale_in(dir: &Path) -> Result<usize> {
    let entries = std::fs::read_dir(dir).map_err(io_err(format!("listing {}", dir.display())))?;
    let me = euid();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stale_owner) else { continue };
        if process_alive(pid) {
            continue;
        }
        // `symlink_metadata` does not follow a link: only our own plain files are removed.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        if !meta.file_type().is_file() || meta.uid() != me {
            continue;
        }
        let age = meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok());
        if age.is_none_or(|a| a < STALE_AGE) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes the shared-memory files left in `/dev/shm` by processes of this user that died before
/// unlinking them (names `mscclpp-rs-{pid}-{rank}-{random}` whose `pid` no longer exists, left
/// unmodified for [`STALE_AGE`]). Returns how many were removed. A process id reused by a live process keeps its file: stale
/// files are never mistaken for live ones, at worst a stale one stays until a later run.
pub fn remove_stale_files() -> Result<usize> {
    remove_stale_in(Path::new(DIR))
}

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
            .mode(MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err(format!("creating shared memory {}", path.display())))?;
        // From here on the name is ours: errors below remove it (drop of `mem`, or by hand).
        // The mode is set again on the descriptor: the umask may have cleared bits at creation.
        let grown = file
            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(MODE))
            .and_then(|()| file.set_len(bytes as u64))
            .map_err(io_err(format!("sizing shared memory {}", path.display())));
        match grown.and_then(|()| map(&file, bytes, name)) {
            Ok(host) => Ok(Self { host, bytes, name: name.into(), owned_path: Some(path), registered: None }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Maps the existing file `name` of exactly `bytes` bytes. The file must be a regular file (a
    /// symbolic link is refused, not followed) owned by this process's user with mode 0600.
    pub fn open(name: &str, bytes: usize) -> Result<Self> {
        let path = check_name(name)?;
        // O_NONBLOCK: opening a FIFO planted under the name must not block (it is refused below).
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(io_err(format!("opening shared memory {} (a symbolic link is refused)", path.display())))?;
        // fstat on the descriptor: what is checked is what gets mapped.
        let meta = file.metadata().map_err(io_err(format!("reading the attributes of {}", path.display())))?;
        check_opened(name, &meta, bytes)?;
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
        unsafe { calls::mem_host_register(self.host.as_ptr().cast(), self.bytes, flags) }
            .ctx(|| format!("registering shared memory {} ({} bytes)", self.name, self.bytes))?;
        // SAFETY: registered just above with DEVICEMAP, in the bound context.
        let device = match unsafe { calls::mem_host_get_device_pointer(self.host.as_ptr().cast()) }
            .ctx(|| format!("mapping shared memory {} for GPU {}", self.name, gpu.ordinal()))
        {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: registered above, unregistered once.
                let _ = unsafe { calls::mem_host_unregister(self.host.as_ptr().cast()) };
                return Err(e);
            }
        };
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

/// Checks the attributes of an opened shared-memory file: a regular file of this user, mode 0600,
/// exactly `bytes` long.
fn check_opened(name: &str, meta: &std::fs::Metadata, bytes: usize) -> Result<()> {
    if !meta.file_type().is_file() {
        return Err(Error::InvalidArgument(format!("shared memory {name} is not a regular file")));
    }
    if meta.uid() != euid() {
        return Err(Error::InvalidArgument(format!(
            "shared memory {name} belongs to user {}, not to this process's user {}",
            meta.uid(),
            euid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode != MODE {
        return Err(Error::InvalidArgument(format!("shared memory {name} has mode {mode:o}, not {MODE:o}")));
    }
    if meta.len() != bytes as u64 {
        return Err(Error::InvalidArgument(format!("shared memory {name} has {} bytes, not {bytes}", meta.len())));
    }
    Ok(())
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
            let _ = unsafe { calls::mem_host_unregister(self.host.as_ptr().cast()) };
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

    /// Removes the path when dropped (the tests' own files, whatever the assertions do).
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_symbolic_link_is_refused_and_its_target_untouched() {
        let target = Cleanup(std::env::temp_dir().join(unique("target")));
        std::fs::write(&target.0, [0x5a_u8; 64]).unwrap();
        let name = unique("link");
        let link = Cleanup(PathBuf::from(DIR).join(&name));
        std::os::unix::fs::symlink(&target.0, &link.0).unwrap();
        // The target is a 64-byte file of ours: only the link stands in the way.
        std::fs::set_permissions(&target.0, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let e = SharedHostMemory::open(&name, 64).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(SharedHostMemory::create(&name, 64).is_err(), "create must not follow the link either");
        assert_eq!(std::fs::read(&target.0).unwrap(), vec![0x5a_u8; 64]);
    }

    #[test]
    fn wrong_size_or_mode_or_type_is_refused() {
        let name = unique("size");
        let mut own = SharedHostMemory::create(&name, 64).unwrap();
        let path = PathBuf::from(DIR).join(&name);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        for bytes in [8, 63, 65, 4096] {
            let e = SharedHostMemory::open(&name, bytes).unwrap_err().to_string();
            assert!(e.contains("has 64 bytes"), "{bytes}: {e}");
        }
        SharedHostMemory::open(&name, 64).unwrap();
        for mode in [0o644, 0o666, 0o640, 0o601, 0o700] {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
            let e = SharedHostMemory::open(&name, 64).unwrap_err().to_string();
            assert!(e.contains(&format!("mode {mode:o}")), "{mode:o}: {e}");
        }
        own.unlink().unwrap();
        // A directory under the name is not a regular file.
        let dir_name = unique("dir");
        let dir = PathBuf::from(DIR).join(&dir_name);
        std::fs::create_dir(&dir).unwrap();
        let r = SharedHostMemory::open(&dir_name, 64);
        std::fs::remove_dir(&dir).unwrap();
        assert!(r.is_err());
    }

    #[test]
    fn stale_files_of_dead_processes_are_removed_live_ones_kept() {
        // A process that has exited (and was reaped): its id is free.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let live = std::process::id();
        let name = |pid: u32| format!("{NAME_PREFIX}{pid}-3-{:016x}", rand::random::<u64>());
        let (dead_name, live_name) = (name(dead), name(live));
        assert_eq!(stale_owner(&dead_name), Some(dead as i32));
        let stale = SharedHostMemory::create(&dead_name, 8).unwrap();
        let _guard = Cleanup(PathBuf::from(DIR).join(&dead_name));
        // Forget the value without unlinking, as a crash would.
        std::mem::forget(stale);
        // A file of a dead pid that is still young may belong to another pid namespace: kept.
        let young_name = name(dead);
        let _young = SharedHostMemory::create(&young_name, 8).unwrap();
        let old = SystemTime::now() - STALE_AGE - Duration::from_secs(60);
        let age = |n: &str| {
            let f = OpenOptions::new().write(true).open(PathBuf::from(DIR).join(n)).unwrap();
            f.set_modified(old).unwrap();
        };
        age(&dead_name);
        let _kept = SharedHostMemory::create(&live_name, 8).unwrap();
        age(&live_name);
        // A file that only looks similar is never touched.
        let other = Cleanup(PathBuf::from(DIR).join(format!("{NAME_PREFIX}test-{dead}-x")));
        std::fs::write(&other.0, b"x").unwrap();
        let removed = remove_stale_files().unwrap();
        // Unless the id was reused in between (then the file stays: the safe side).
        if !process_alive(dead as i32) {
            assert!(removed >= 1);
            assert!(!PathBuf::from(DIR).join(&dead_name).exists(), "stale file of pid {dead} kept");
        }
        assert!(PathBuf::from(DIR).join(&live_name).exists(), "a live process's file was removed");
        assert!(PathBuf::from(DIR).join(&young_name).exists(), "a young file was removed");
        assert!(other.0.exists());
    }

    #[test]
    fn stale_owner_parses_only_our_names() {
        assert_eq!(stale_owner("mscclpp-rs-1234-0-00ff00ff00ff00ff"), Some(1234));
        assert_eq!(stale_owner("mscclpp-rs-1234-17-abc"), Some(1234));
        for bad in [
            "mscclpp-rs-test-share-1-ab",
            "mscclpp-rs-0-0-ab",
            "mscclpp-rs-1234-0",
            "mscclpp-rs-1234-0-xyz",
            "mscclpp-rs-1234-0-ab-cd",
            "mscclpp-rs--0-ab",
            "other-1234-0-ab",
            "mscclpp-rs-99999999999-0-ab",
        ] {
            assert_eq!(stale_owner(bad), None, "{bad}");
        }
    }

    /// Exists for a planted bug the other tests let through: the owner check of `open` dropped
    /// (no test presented a file of another user). A file under the name with the right type,
    /// mode and size but owned by another user is refused, naming that user. Making such a file
    /// takes `chown`, so this needs root (or `CAP_CHOWN`); without it the test says so and skips.
    /// (For another user, the kernel's own permission check refuses a 0600 file of someone else
    /// before this one does.)
    #[test]
    fn a_file_of_another_user_is_refused() {
        let name = unique("owner");
        let mut own = SharedHostMemory::create(&name, 128).unwrap();
        let path = PathBuf::from(DIR).join(&name);
        // Any user but this one (and not root, whose files root can open anyway).
        let other = loop {
            let uid = rand::random::<u32>() % 60_000 + 1_000;
            if uid != euid() {
                break uid;
            }
        };
        if let Err(e) = std::os::unix::fs::chown(&path, Some(other), None) {
            println!("SKIP a_file_of_another_user_is_refused: cannot chown {} to user {other}: {e}", path.display());
            return;
        }
        let e = SharedHostMemory::open(&name, 128).unwrap_err().to_string();
        assert!(e.contains(&format!("belongs to user {other}, not to this process's user {}", euid())), "{e}");
        // Given back to this user, the same file opens.
        std::os::unix::fs::chown(&path, Some(euid()), None).unwrap();
        SharedHostMemory::open(&name, 128).unwrap();
        own.unlink().unwrap();
    }

    /// Survivors of `./x mutants shm`: `stale_owner` accepted a rank that is not a number, or an
    /// empty random part, when one of its conditions was turned around. Such names are not ours
    /// and are never removed; with a random pid and rank, the well-formed name is.
    #[test]
    fn stale_owner_needs_a_numeric_rank_and_a_random_part() {
        let (pid, rank) = (1 + rand::random::<u32>() % 4_000_000, rand::random::<u16>());
        assert_eq!(stale_owner(&format!("{NAME_PREFIX}{pid}-{rank}-{:x}", rand::random::<u64>())), Some(pid as i32));
        for bad in [
            format!("{NAME_PREFIX}{pid}-x{rank}-ab"),
            format!("{NAME_PREFIX}{pid}-{rank}x-ab"),
            format!("{NAME_PREFIX}{pid}--ab"),
            format!("{NAME_PREFIX}{pid}-{rank}-"),
            format!("{NAME_PREFIX}x{pid}-{rank}-ab"),
        ] {
            assert_eq!(stale_owner(&bad), None, "{bad}");
        }
    }

    /// A survivor of `./x mutants shm`: `process_alive` always true (no stale file was ever
    /// removed, and the test of stale files skips its check when the dead id looks alive). Checked
    /// against `/proc`: this process, and one that has exited and been reaped.
    #[test]
    fn process_alive_tells_live_from_dead() {
        assert!(process_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let exists = Path::new(&format!("/proc/{dead}")).exists();
        assert_eq!(process_alive(dead as i32), exists, "process {dead}: /proc says {exists}");
    }

    /// A survivor of `./x mutants shm`: `remove_stale_in` skipping a file only when it is both
    /// not a plain file and another user's (`||` read as `&&`), so that another user's stale-looking
    /// file was removed. In a folder of its own: a stale file of this user is removed, the same
    /// of another user (a random uid; needs `CAP_CHOWN`, else the test says so and skips) is kept.
    #[test]
    fn stale_files_of_another_user_are_kept() {
        let dir = Cleanup(std::env::temp_dir().join(unique("stale-dir")));
        std::fs::create_dir(&dir.0).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let old = SystemTime::now() - STALE_AGE - Duration::from_secs(60);
        let stale = |tag: u8| {
            let path = dir.0.join(format!("{NAME_PREFIX}{dead}-{tag}-{:x}", rand::random::<u64>()));
            std::fs::write(&path, b"x").unwrap();
            OpenOptions::new().write(true).open(&path).unwrap().set_modified(old).unwrap();
            path
        };
        let (mine, theirs) = (stale(0), stale(1));
        let other = 1_000 + rand::random::<u32>() % 60_000;
        let chowned = std::os::unix::fs::chown(&theirs, Some(other), None);
        let removed = remove_stale_in(&dir.0).unwrap();
        let _ = std::fs::remove_file(&theirs);
        let _ = std::fs::remove_dir(&dir.0);
        if process_alive(dead as i32) {
            return; // the id was reused: nothing is stale (the safe side)
        }
        if let Err(e) = chowned {
            println!("SKIP stale_files_of_another_user_are_kept: cannot chown to user {other}: {e}");
            return;
        }
        assert!(!mine.exists(), "this user's stale file was kept");
        assert_eq!(removed, 1, "user {other}'s stale file was removed too");
    }

    /// Survivors of `./x mutants shm`: the name limit off by one (`> 200` read as `>=` or `==`),
    /// `name()`, `len()` or `is_empty()` answering something else, and `Debug` printing nothing.
    /// Names of 1 to 200 allowed characters are taken (a random one of 200), 201 are refused; a
    /// mapping reports its own name and size, and shows them in `Debug`.
    #[test]
    fn names_up_to_200_characters_and_what_a_mapping_reports() {
        let long = |n: usize| -> String {
            let mut s = unique("len");
            while s.len() < n {
                s.push(char::from(b'a' + rand::random::<u8>() % 26));
            }
            s.truncate(n);
            s
        };
        let name = long(200);
        let mut m = SharedHostMemory::create(&name, 64).unwrap();
        assert_eq!(m.name(), name);
        assert_eq!((m.len(), m.is_empty()), (64, false));
        let shown = format!("{m:?}");
        assert!(shown.contains(&name) && shown.contains("64"), "{shown}");
        m.unlink().unwrap();
        for n in [201, 202 + rand::random::<u8>() as usize] {
            let e = SharedHostMemory::create(&long(n), 64).unwrap_err().to_string();
            assert!(e.contains("use 1-200 of"), "{n} characters: {e}");
        }
    }
}
