//! Driver entry points and values this crate takes from the driver library at run time, because
//! the cudarc bindings it is built with (`cuda-13000`) lack them or because older drivers lack
//! them. cudarc's own wrappers panic on a missing symbol; here a missing symbol is `None` and the
//! caller falls back (no argument check, the atomic-add kernel).
//!
//! The values below are those of CUDA 13.1's `cuda.h`, each named as there.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use cudarc::driver::CudaFunction;
use cudarc::driver::sys::{self, CUdevice, CUdeviceptr, CUfunction, CUresult, CUstream};

/// `CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED` (`CUdevice_attribute`, CUDA 13.1): the device
/// executes `CU_STREAM_MEM_OP_ATOMIC_REDUCTION` stream memory operations.
pub(crate) const CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED: c_int = 148;
/// `CU_STREAM_MEM_OP_BARRIER` (`CUstreamBatchMemOpType`).
const CU_STREAM_MEM_OP_BARRIER: c_uint = 6;
/// `CU_STREAM_MEM_OP_ATOMIC_REDUCTION` (`CUstreamBatchMemOpType`, CUDA 13.1).
const CU_STREAM_MEM_OP_ATOMIC_REDUCTION: c_uint = 8;
/// `CU_STREAM_MEMORY_BARRIER_TYPE_SYS` (`CUstreamMemoryBarrier_flags`).
const CU_STREAM_MEMORY_BARRIER_TYPE_SYS: c_uint = 0;
/// `CU_STREAM_ATOMIC_REDUCTION_OP_ADD` (`CUstreamAtomicReductionOpType`, CUDA 13.1).
const CU_STREAM_ATOMIC_REDUCTION_OP_ADD: c_uint = 0;
/// `CU_STREAM_ATOMIC_REDUCTION_UNSIGNED_64` (`CUstreamAtomicReductionDataType`, CUDA 13.1).
const CU_STREAM_ATOMIC_REDUCTION_UNSIGNED_64: c_uint = 22;

/// One entry of `cuStreamBatchMemOp`'s parameter array: `CUstreamBatchMemOpParams`, a union of
/// 48 bytes whose members all start with the operation type. Only the two members used here
/// are spelled out.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union StreamMemOp {
    /// `memoryBarrier`: `{ CUstreamBatchMemOpType operation; unsigned int flags; }`.
    barrier: [c_uint; 2],
    /// `atomicReduction` (CUDA 13.1).
    atomic: AtomicReductionParams,
    /// `pad`: the union's size.
    pad: [u64; 6],
}

/// `CUstreamMemOpAtomicReductionParams_st`, in `cuda.h`'s order.
#[repr(C)]
#[derive(Clone, Copy)]
struct AtomicReductionParams {
    operation: c_uint,
    /// Must be 0.
    flags: c_uint,
    reduction_op: c_uint,
    data_type: c_uint,
    address: CUdeviceptr,
    value: u64,
    /// For the driver's use.
    alias: CUdeviceptr,
}

static_assertions::assert_eq_size!(StreamMemOp, sys::CUstreamBatchMemOpParams);
static_assertions::assert_eq_align!(StreamMemOp, sys::CUstreamBatchMemOpParams);
static_assertions::const_assert_eq!(std::mem::offset_of!(AtomicReductionParams, address), 16);
static_assertions::const_assert_eq!(std::mem::offset_of!(AtomicReductionParams, alias), 32);

impl StreamMemOp {
    /// A system-scope memory barrier: the writes of the work before it are visible to every
    /// observer before the operations after it.
    pub(crate) const fn system_barrier() -> Self {
        let mut op = Self { pad: [0; 6] };
        op.barrier = [CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_SYS];
        op
    }

    /// `*address += value` on a u64, atomically.
    pub(crate) const fn atomic_add_u64(address: CUdeviceptr, value: u64) -> Self {
        let mut op = Self { pad: [0; 6] };
        op.atomic = AtomicReductionParams {
            operation: CU_STREAM_MEM_OP_ATOMIC_REDUCTION,
            flags: 0,
            reduction_op: CU_STREAM_ATOMIC_REDUCTION_OP_ADD,
            data_type: CU_STREAM_ATOMIC_REDUCTION_UNSIGNED_64,
            address,
            value,
            alias: 0,
        };
        op
    }

    /// The 48 bytes as six words (for tests).
    #[cfg(test)]
    fn words(&self) -> [u64; 6] {
        // SAFETY: every constructor starts from the zeroed `pad`, so all 48 bytes are initialised.
        unsafe { self.pad }
    }
}

/// Resolves `name` in the driver library once; `None` when the library lacks it.
///
/// # Safety
/// `F` must be the C signature the driver declares for `name`.
unsafe fn lookup<F: Copy + Send + Sync + 'static>(cell: &'static OnceLock<Option<F>>, name: &str) -> Option<F> {
    *cell.get_or_init(|| {
        // SAFETY: only tries to load the library.
        if !unsafe { sys::is_culib_present() } {
            return None;
        }
        // SAFETY: the library is present (checked above); the caller gives `name`'s signature.
        unsafe { sys::culib().get::<F>(name.as_bytes()).ok().map(|s| *s) }
    })
}

type FuncGetParamCount = unsafe extern "C" fn(CUfunction, *mut usize) -> CUresult;
type FuncGetParamInfo = unsafe extern "C" fn(CUfunction, usize, *mut usize, *mut usize) -> CUresult;
type FuncGetName = unsafe extern "C" fn(*mut *const c_char, CUfunction) -> CUresult;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CUdevice) -> CUresult;
type StreamBatchMemOp = unsafe extern "C" fn(CUstream, c_uint, *mut StreamMemOp, c_uint) -> CUresult;

/// What the driver says of a kernel's parameters: its name and the size of each parameter, or
/// `None` when this driver cannot describe them (then launches are not checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelParams {
    /// The kernel's name, for messages.
    pub(crate) name: String,
    /// Parameter sizes in bytes, in order.
    pub(crate) sizes: Option<Vec<usize>>,
}

impl KernelParams {
    /// Asks the driver about `func` (known to be called `name`, when known).
    pub(crate) fn query(func: &CudaFunction, name: Option<&str>) -> Self {
        let f = func.cu_function();
        // SAFETY: `func` keeps its module loaded while it lives.
        let sizes = unsafe { param_sizes(f) };
        let name = match name {
            Some(n) => n.to_string(),
            // SAFETY: as above.
            None => unsafe { function_name(f) }.unwrap_or_else(|| "(unnamed)".into()),
        };
        Self { name, sizes }
    }
}

/// The most parameters a kernel can have (its parameter space is at most 32764 bytes).
const MAX_PARAMS: usize = 32764;

/// The sizes of `func`'s parameters in order, as the driver describes the kernel, or `None` when
/// this driver cannot say: `cuFuncGetParamInfo` (CUDA 12.4) missing or failing. The count comes
/// from `cuFuncGetParamCount` (CUDA 13.2) where the driver has it; otherwise the first index past
/// the parameters is the first at which `cuFuncGetParamInfo` answers `CUDA_ERROR_INVALID_VALUE`
/// (a zero-parameter kernel is then indistinguishable from a refusal, and is not checked).
///
/// # Safety
/// `func` must be a live function handle of a loaded module.
pub(crate) unsafe fn param_sizes(func: CUfunction) -> Option<Vec<usize>> {
    static INFO: OnceLock<Option<FuncGetParamInfo>> = OnceLock::new();
    static COUNT: OnceLock<Option<FuncGetParamCount>> = OnceLock::new();
    // SAFETY: the signatures of `cuda.h`.
    let (info, count) = unsafe { (lookup(&INFO, "cuFuncGetParamInfo")?, lookup(&COUNT, "cuFuncGetParamCount")) };
    let count = match count {
        Some(get) => {
            let mut n = 0usize;
            // SAFETY: `func` is live (caller's contract); `n` is a valid out-pointer.
            (unsafe { get(func, &mut n) } == CUresult::CUDA_SUCCESS && n <= MAX_PARAMS).then_some(n)?
        }
        None => MAX_PARAMS + 1,
    };
    let mut sizes = Vec::new();
    for i in 0..count {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: as above; both out-pointers are valid.
        match unsafe { info(func, i, &mut offset, &mut size) } {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            CUresult::CUDA_ERROR_INVALID_VALUE if count > MAX_PARAMS && i > 0 => return Some(sizes),
            _ => return None,
        }
    }
    (count <= MAX_PARAMS).then_some(sizes)
}

/// The kernel's name (`cuFuncGetName`), when the driver has it.
///
/// # Safety
/// As for [`param_sizes`].
pub(crate) unsafe fn function_name(func: CUfunction) -> Option<String> {
    static NAME: OnceLock<Option<FuncGetName>> = OnceLock::new();
    // SAFETY: the signature of `cuda.h`.
    let get = unsafe { lookup(&NAME, "cuFuncGetName") }?;
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: `func` is live (caller's contract); `p` is a valid out-pointer.
    if unsafe { get(&mut p, func) } != CUresult::CUDA_SUCCESS || p.is_null() {
        return None;
    }
    // SAFETY: the driver returns a NUL-terminated name that lives as long as the function.
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A device attribute by its `cuda.h` value (for attributes newer than the bindings); `Err` with
/// the driver's result when the driver does not know it.
pub(crate) fn device_attribute(dev: CUdevice, attribute: c_int) -> Result<c_int, CUresult> {
    static GET: OnceLock<Option<DeviceGetAttribute>> = OnceLock::new();
    // SAFETY: the signature of `cuda.h`.
    let get = unsafe { lookup(&GET, "cuDeviceGetAttribute") }.ok_or(CUresult::CUDA_ERROR_NOT_FOUND)?;
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer; the driver validates the device and the attribute.
    match unsafe { get(&mut v, attribute, dev) } {
        CUresult::CUDA_SUCCESS => Ok(v),
        r => Err(r),
    }
}

static BATCH: OnceLock<Option<StreamBatchMemOp>> = OnceLock::new();

/// Whether the driver has `cuStreamBatchMemOp_v2`.
pub(crate) fn stream_batch_mem_op_available() -> bool {
    // SAFETY: the signature of `cuda.h`.
    unsafe { lookup(&BATCH, "cuStreamBatchMemOp_v2") }.is_some()
}

/// Enqueues `ops` on `stream` in one `cuStreamBatchMemOp` (`_v2`, CUDA 12), after the work
/// before it on the stream. `Err(CUDA_ERROR_NOT_FOUND)` when the driver lacks the entry point.
///
/// # Safety
/// `stream` must be a live stream of the current context, and every address in `ops` valid for
/// its operation in that context.
pub(crate) unsafe fn stream_batch_mem_op(stream: CUstream, ops: &mut [StreamMemOp]) -> Result<(), CUresult> {
    // SAFETY: the signature of `cuda.h`.
    let batch = unsafe { lookup(&BATCH, "cuStreamBatchMemOp_v2") }.ok_or(CUresult::CUDA_ERROR_NOT_FOUND)?;
    let n = c_uint::try_from(ops.len()).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: `ops` is a valid array of `n` entries; the caller guarantees stream and addresses.
    match unsafe { batch(stream, n, ops.as_mut_ptr(), 0) } {
        CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_mem_ops_have_the_header_layout() {
        // operation | flags << 32, then reductionOp | dataType << 32, address, value, alias.
        let a = StreamMemOp::atomic_add_u64(0x7000_0008, 5).words();
        assert_eq!(a, [8, 22 << 32, 0x7000_0008, 5, 0, 0]);
        assert_eq!(StreamMemOp::system_barrier().words(), [6, 0, 0, 0, 0, 0]);
    }
}
