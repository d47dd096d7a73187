//! The real NCCL, for what this library forwards (communicators spanning machines).
//!
//! Found through `MSCCLPP_RS_NCCL` (a path or a library name), else the usual search for
//! `libnccl.so.2` and `libnccl.so` (the loader's, then every folder of `LD_LIBRARY_PATH` and the
//! system's library folders by name), never this library itself (a program that loads us as
//! `libnccl.so.2` would otherwise find us again). It is opened with `RTLD_DEEPBIND`, so its own
//! calls between its functions stay inside it even when our symbols came first (`LD_PRELOAD`).

use std::ffi::c_void;
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::error::{Error, Result};

/// The loaded NCCL.
pub struct RealNccl {
    lib: Library,
    /// Where it was found.
    pub path: String,
}

// SAFETY: a loaded library's handle may be used from any thread (dlsym is thread-safe).
unsafe impl Sync for RealNccl {}

/// The symbol only this library exports: how a search recognises (and skips) it.
pub const SELF_SYMBOL: &[u8] = b"mscclppNcclVersion\0";

static REAL: OnceLock<std::result::Result<RealNccl, String>> = OnceLock::new();

/// The real NCCL, loaded once; the error says what was tried.
pub fn real() -> Result<&'static RealNccl> {
    REAL.get_or_init(load).as_ref().map_err(|why| {
        Error::invalid_usage(format!(
            "this call must be forwarded to a real NCCL library, and none was found ({why}); set MSCCLPP_RS_NCCL to the path of NCCL's libnccl.so.2"
        ))
    })
}

/// Whether a real NCCL has been loaded (without trying to load one).
pub fn loaded() -> bool {
    REAL.get().is_some_and(|r| r.is_ok())
}

fn candidates() -> (Vec<String>, bool) {
    if let Ok(v) = std::env::var("MSCCLPP_RS_NCCL") {
        return (vec![v], true);
    }
    let mut v = vec!["libnccl.so.2".to_string(), "libnccl.so".to_string()];
    let dirs = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let system = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64"];
    for d in dirs.split(':').filter(|d| !d.is_empty()).chain(system) {
        for name in ["libnccl.so.2", "libnccl.so"] {
            v.push(format!("{d}/{name}"));
        }
    }
    (v, false)
}

fn load() -> std::result::Result<RealNccl, String> {
    let (names, explicit) = candidates();
    let mut tried = Vec::new();
    for name in names {
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        let lib = match unsafe { Library::open(Some(&name), RTLD_NOW | RTLD_LOCAL | libc::RTLD_DEEPBIND) } {
            Ok(l) => l,
            Err(e) => {
                if explicit {
                    tried.push(format!("MSCCLPP_RS_NCCL={name}: {e}"));
                }
                continue;
            }
        };
        // SAFETY: only the symbol's presence is checked.
        if unsafe { lib.get::<*const c_void>(SELF_SYMBOL) }.is_ok() {
            tried.push(format!("{name} is mscclpp-rs itself"));
            continue;
        }
        // SAFETY: as above.
        if unsafe { lib.get::<*const c_void>(b"ncclCommInitRank\0") }.is_err() {
            tried.push(format!("{name} has no ncclCommInitRank"));
            continue;
        }
        return Ok(RealNccl { lib, path: name });
    }
    if tried.is_empty() {
        tried.push("no libnccl.so.2 or libnccl.so on the library path".into());
    }
    Err(tried.join("; "))
}

impl RealNccl {
    /// The function `name` (NUL-terminated) of the real library, as type `F`.
    ///
    /// # Safety
    /// `F` is the function's C signature in `nccl.h`.
    pub unsafe fn get<F: Copy>(&self, name: &[u8]) -> Result<F> {
        // SAFETY: the caller's contract on F.
        unsafe { self.lib.get::<F>(name) }.map(|s| *s).map_err(|e| {
            Error::invalid_usage(format!(
                "the real NCCL at {} lacks {}: {e}",
                self.path,
                String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name))
            ))
        })
    }
}
