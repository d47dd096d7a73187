//! `ncclMemAlloc` and `ncclCommWindowRegister` on this library's symmetric windows
//! ([`mscclpp_host::window`]).
//!
//! `ncclMemAlloc` allocates exportable memory (a driver allocation of its own, which CUDA IPC can
//! map whole) and keeps it here until `ncclMemFree`. On a served communicator,
//! `ncclCommWindowRegister` is collective, as in NCCL: the ranks first all-gather whether each
//! registers exactly one whole `ncclMemAlloc` allocation. When every rank does, the memory becomes
//! a [`Window`]: every rank maps every other's, and [`device_window`] gives Rust kernels its
//! device handle ([`WindowHandle`]: `peer(rank, offset)`, signals, a barrier). When any rank does
//! not (memory from `cudaMalloc`, part of an allocation), every rank records the buffer only, as
//! `ncclCommRegister` does; the operations work on it alike (they copy through the
//! communicator's scratch), and so is a size that is not a multiple of 16 bytes. Sizes that
//! differ between the ranks fail on every rank, naming them.
//! `ncclCommWindowDeregister` is collective too: every rank waits for the others before the
//! mappings go.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use mscclpp_device::window::Window as WindowHandle;
use mscclpp_host::bootstrap::BootstrapExt;
use mscclpp_host::comm::Communicator;
use mscclpp_host::window::Window;
use mscclpp_host::{DeviceBuffer, Gpu};

use crate::comm::lock;
use crate::error::{Error, Result};

/// Memory from `ncclMemAlloc`, by address, until `ncclMemFree`.
static ALLOCATIONS: Mutex<BTreeMap<u64, Arc<DeviceBuffer>>> = Mutex::new(BTreeMap::new());

/// `ncclMemAlloc`: `size` bytes (at least 1) of exportable memory on `device`; returns its address.
pub fn alloc(device: i32, size: usize) -> Result<u64> {
    let gpu = Gpu::open(usize::try_from(device).unwrap_or(usize::MAX)).map_err(Error::from)?;
    let buf = DeviceBuffer::alloc_exportable(&gpu, size.max(1)).map_err(Error::from)?;
    let addr = buf.addr();
    lock(&ALLOCATIONS).insert(addr, Arc::new(buf));
    Ok(addr)
}

/// `ncclMemFree`: lets go of memory from [`alloc`] (a window over it keeps it until the window
/// is deregistered).
pub fn free(addr: u64) -> Result<()> {
    match lock(&ALLOCATIONS).remove(&addr) {
        Some(_) => Ok(()),
        None => {
            Err(Error::invalid_argument(format!("{addr:#x} is not memory from ncclMemAlloc (or was freed already)")))
        }
    }
}

/// What `ncclCommWindowRegister` stands for on a served communicator.
pub struct Registered {
    /// The window, when every rank registered a whole `ncclMemAlloc` allocation.
    pub window: Option<Window>,
}

/// `ncclCommWindowRegister` on a served communicator (collective; see the module docs).
pub fn register(comm: &Communicator, addr: u64, size: usize) -> Result<Registered> {
    // Looked up and cloned out, so that no lock is held across the collective steps (ranks that
    // are threads of one process register at the same time).
    // (A window's size is a non-zero multiple of WINDOW_ALIGN; other sizes are recorded only.)
    let aligned = size > 0 && size.is_multiple_of(mscclpp_host::window::WINDOW_ALIGN);
    let whole = lock(&ALLOCATIONS).get(&addr).filter(|b| aligned && b.len() == size).cloned();
    let every = comm.bootstrap().all_gather_pod(&u32::from(whole.is_some())).map_err(Error::from)?;
    if every.contains(&0) {
        return Ok(Registered { window: None });
    }
    let buf = whole.ok_or_else(|| Error::internal("window registration: the allocation went during the agreement"))?;
    let window = comm.register_window(&buf).map_err(|e| Error::from(e).context("ncclCommWindowRegister"))?;
    Ok(Registered { window: Some(window) })
}

/// `ncclCommWindowDeregister` on a served communicator: collective when it is a window.
pub fn deregister(r: Registered) -> Result<()> {
    match r.window {
        Some(w) => w.free().map_err(Error::from),
        None => Ok(()),
    }
}

/// The device handle of a window from `ncclCommWindowRegister`, for Rust kernels (`None` when
/// the registration recorded the buffer only: see the module docs), or an error for a
/// communicator this library forwarded to the real NCCL.
///
/// # Safety
/// `win` is a window of `comm` from this library's `ncclCommWindowRegister`, not yet
/// deregistered, and nothing deregisters it during this call.
pub unsafe fn device_window(comm: *mut c_void, win: *mut c_void) -> Result<Option<WindowHandle>> {
    // SAFETY: the caller's contract.
    unsafe { crate::api::registered_window(comm, win) }
}
