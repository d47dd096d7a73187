//! Calls of the bound driver API (cudarc's `sys`) that cudarc's `result` module does not wrap.
//! Each forwards its arguments unchanged and turns the status into a `Result`; the `# Safety`
//! sections are the driver's own preconditions. The context that a call needs is the caller's
//! to bind.

use std::ffi::{CStr, c_char, c_uint, c_void};

use cudarc::driver::DriverError;
use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUfunction, CUipcMemHandle, CUresult, CUstream};

/// `cuMemGetAddressRange`: the base and size of the allocation holding `ptr`.
///
/// # Safety
/// `ptr` lies in memory of the current context.
pub(crate) unsafe fn mem_get_address_range(ptr: CUdeviceptr) -> Result<(CUdeviceptr, usize), DriverError> {
    let (mut base, mut size) = (0, 0);
    // SAFETY: both out-parameters are ours; the caller's contract for `ptr`.
    unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }.result()?;
    Ok((base, size))
}

/// `cuIpcGetMemHandle`: the interprocess handle of the allocation that starts at `base`.
///
/// # Safety
/// `base` is the start of a live `cuMemAlloc` allocation of the current context.
pub(crate) unsafe fn ipc_get_mem_handle(base: CUdeviceptr) -> Result<CUipcMemHandle, DriverError> {
    let mut h = CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: `h` is an out-parameter; the caller's contract for `base`.
    unsafe { sys::cuIpcGetMemHandle(&mut h, base) }.result()?;
    Ok(h)
}

/// `cuIpcOpenMemHandle`: maps another process's allocation into the current context.
///
/// # Safety
/// `handle` came from `cuIpcGetMemHandle` in another process; the mapping is closed once, with
/// [`ipc_close_mem_handle`].
pub(crate) unsafe fn ipc_open_mem_handle(handle: CUipcMemHandle, flags: c_uint) -> Result<CUdeviceptr, DriverError> {
    let mut base = 0;
    // SAFETY: `base` is an out-parameter; the caller's contract for `handle`.
    unsafe { sys::cuIpcOpenMemHandle_v2(&mut base, handle, flags) }.result()?;
    Ok(base)
}

/// `cuIpcCloseMemHandle`: unmaps what [`ipc_open_mem_handle`] mapped.
///
/// # Safety
/// `base` came from [`ipc_open_mem_handle`] in the current context and is closed once; nothing
/// uses the mapping any more.
pub(crate) unsafe fn ipc_close_mem_handle(base: CUdeviceptr) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuIpcCloseMemHandle(base) }.result()
}

/// `cuMemHostRegister`: page-locks `bytes` of host memory at `host` and registers them with the
/// current context.
///
/// # Safety
/// The range is mapped host memory that stays mapped until [`mem_host_unregister`].
pub(crate) unsafe fn mem_host_register(host: *mut c_void, bytes: usize, flags: c_uint) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuMemHostRegister_v2(host, bytes, flags) }.result()
}

/// `cuMemHostUnregister`: undoes [`mem_host_register`].
///
/// # Safety
/// `host` was registered by [`mem_host_register`] and is unregistered once; no GPU work uses it
/// any more.
pub(crate) unsafe fn mem_host_unregister(host: *mut c_void) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuMemHostUnregister(host) }.result()
}

/// `cuMemHostGetDevicePointer`: the device address of device-mapped pinned host memory.
///
/// # Safety
/// `host` was allocated or registered with the device-map flag, in the current context.
pub(crate) unsafe fn mem_host_get_device_pointer(host: *mut c_void) -> Result<CUdeviceptr, DriverError> {
    let mut device = 0;
    // SAFETY: `device` is an out-parameter; the caller's contract for `host`.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }.result()?;
    Ok(device)
}

/// `cuDeviceGetPCIBusId`: the device's PCI bus id (`0000:18:00.0`).
pub(crate) fn device_pci_bus_id(dev: CUdevice) -> Result<String, DriverError> {
    let mut buf = [0 as c_char; 32];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated, into our buffer.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }.result()?;
    // SAFETY: NUL-terminated within the buffer on success.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// `cuDeviceCanAccessPeer`: whether `dev` can access `peer`'s memory.
pub(crate) fn device_can_access_peer(dev: CUdevice, peer: CUdevice) -> Result<bool, DriverError> {
    let mut can = 0;
    // SAFETY: `can` is an out-parameter; device handles are plain values the driver checks.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, dev, peer) }.result()?;
    Ok(can != 0)
}

/// `cuCtxEnablePeerAccess`: lets the current context access `peer`'s memory. Already enabled
/// is the driver's `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`, returned as it is.
///
/// # Safety
/// `peer` is a live context.
pub(crate) unsafe fn ctx_enable_peer_access(peer: CUcontext) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuCtxEnablePeerAccess(peer, 0) }.result()
}

/// `cuStreamWriteValue64` with default flags: writes `value` to the u64 at `addr` once the work
/// before it on `stream` is done, with a memory barrier (its readers see that work first).
///
/// # Safety
/// `stream` is a live stream of the current context and `addr` an 8-aligned u64 that context may
/// write, valid until the write has run.
pub(crate) unsafe fn stream_write_value64(stream: CUstream, addr: CUdeviceptr, value: u64) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuStreamWriteValue64_v2(stream, addr, value, 0) }.result()
}

/// `cuStreamQuery`: whether everything enqueued on `stream` has completed (`Ok(false)` while
/// work is pending).
///
/// # Safety
/// `stream` is a live stream.
pub(crate) unsafe fn stream_is_done(stream: CUstream) -> Result<bool, DriverError> {
    // SAFETY: the caller's contract.
    match unsafe { sys::cuStreamQuery(stream) } {
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => r.result().map(|()| true),
    }
}

/// `cuLaunchKernelEx`: launches `func` with the configuration `config` (its attributes
/// included) and the argument pointers `params`.
///
/// # Safety
/// `params` point to the kernel's arguments, in order and of its parameter types, and every
/// address they hold stays valid until the stream has passed the kernel; `config`'s stream
/// belongs to `func`'s context.
pub(crate) unsafe fn launch_kernel_ex(
    config: &sys::CUlaunchConfig,
    func: CUfunction,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract; `config` and `params` live across the call.
    unsafe { sys::cuLaunchKernelEx(config, func, params.as_mut_ptr(), std::ptr::null_mut()) }.result()
}
