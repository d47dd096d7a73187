//! Typed kernel launches.
//!
//! Kernel parameters are values of types implementing [`mscclpp_device::abi::DeviceAbi`]: the
//! device crate's handles, typed pointers and plain numbers. [`Args`] owns copies of them, so
//! temporaries can be passed.

use std::any::Any;
use std::ffi::c_void;

use cudarc::driver::sys::CUfunction_attribute as FnAttr;
use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_device::abi::DeviceAbi;

use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;

/// Shared memory a block gets without opting in.
pub const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `grid` blocks of `block` threads, no dynamic shared memory.
    pub const fn new(grid: u32, block: u32) -> Self {
        Self { grid: (grid, 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }
    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn shared(mut self, bytes: u32) -> Self {
        self.shared_bytes = bytes;
        self
    }
}

/// Kernel arguments, in order. Owns a copy of each value.
#[derive(Default)]
pub struct Args {
    values: Vec<Box<dyn Any + Send>>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the raw pointers point into `values`, which are `Send` and owned by `Args`.
unsafe impl Send for Args {}

impl Args {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends one argument.
    pub fn arg<T: DeviceAbi + Send>(mut self, value: T) -> Self {
        let b: Box<T> = Box::new(value);
        let p = (&*b as *const T).cast_mut().cast::<c_void>();
        self.values.push(b);
        self.ptrs.push(p);
        self
    }
    /// How many arguments.
    pub fn len(&self) -> usize {
        self.ptrs.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ptrs.is_empty()
    }
}

/// Checks a launch configuration against the device, binds its context and raises the
/// function's dynamic shared-memory limit when the configuration needs more than 48 KiB.
fn prepare(gpu: &Gpu, func: &CudaFunction, cfg: LaunchConfig) -> Result<()> {
    let max = gpu.info().max_shared_optin;
    if cfg.shared_bytes > max {
        return Err(Error::InvalidArgument(format!(
            "launch asks for {} bytes of dynamic shared memory; GPU {} allows at most {max}",
            cfg.shared_bytes,
            gpu.ordinal()
        )));
    }
    let (g, b) = (cfg.grid, cfg.block);
    if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
        return Err(Error::InvalidArgument(format!("empty launch: grid {g:?} block {b:?}")));
    }
    gpu.bind()?;
    if cfg.shared_bytes > DEFAULT_SHARED_LIMIT {
        func.set_attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cfg.shared_bytes as i32)
            .ctx(|| format!("raising the dynamic shared-memory limit to {} bytes", cfg.shared_bytes))?;
    }
    Ok(())
}

/// Launches `func` on `stream`, raising the function's dynamic shared-memory limit when the
/// configuration asks for more than 48 KiB (up to the device's opt-in maximum).
///
/// # Safety
/// `args` must match the kernel's parameter list in number, order and type, and every pointer
/// among them must be valid for what the kernel does with it.
pub unsafe fn launch_on(
    gpu: &Gpu,
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut Args,
) -> Result<()> {
    prepare(gpu, func, cfg)?;
    let (g, b) = (cfg.grid, cfg.block);
    // SAFETY: the caller guarantees the arguments match the kernel; the pointers stay valid until
    // cuLaunchKernel has copied the parameter values (it does so before returning).
    unsafe {
        cudarc::driver::result::launch_kernel(
            func.cu_function(),
            cfg.grid,
            cfg.block,
            cfg.shared_bytes,
            stream.cu_stream(),
            &mut args.ptrs,
        )
    }
    .ctx(|| format!("launching a kernel with grid {g:?}, block {b:?}, {} B shared", cfg.shared_bytes))
}

/// Launches `func` as a cooperative kernel (all blocks co-resident, as a grid barrier needs).
/// Fails with a clear error before launching when the grid cannot be co-resident.
///
/// # Safety
/// As for [`launch_on`].
pub unsafe fn launch_cooperative_on(
    gpu: &Gpu,
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut Args,
) -> Result<()> {
    prepare(gpu, func, cfg)?;
    let threads = cfg.block.0 * cfg.block.1 * cfg.block.2;
    let per_sm = func
        .occupancy_max_active_blocks_per_multiprocessor(threads, cfg.shared_bytes as usize, None)
        .ctx(|| "querying occupancy".to_string())? as u64;
    let blocks = cfg.grid.0 as u64 * cfg.grid.1 as u64 * cfg.grid.2 as u64;
    let fit = per_sm * gpu.info().sm_count as u64;
    if blocks > fit {
        return Err(Error::InvalidArgument(format!(
            "cooperative grid of {blocks} blocks cannot be co-resident: at most {fit} ({per_sm} per SM x {} SMs) \
             with {threads} threads and {} B shared memory per block",
            gpu.info().sm_count,
            cfg.shared_bytes
        )));
    }
    // SAFETY: as for `launch_on`.
    unsafe {
        cudarc::driver::result::launch_cooperative_kernel(
            func.cu_function(),
            cfg.grid,
            cfg.block,
            cfg.shared_bytes,
            stream.cu_stream(),
            &mut args.ptrs,
        )
    }
    .ctx(|| format!("cooperative launch of {blocks} blocks"))
}

/// [`launch_on`], allowed to overlap the kernel before it on `stream` (programmatic stream
/// serialization, sm_90): this kernel may be scheduled while the previous one still runs, and
/// must execute `griddepcontrol.wait` (`mscclpp_device::ptx::misc::griddepcontrol_wait`) before
/// it touches memory the previous kernel uses. Kernels of `mscclpp_device::collective` do.
///
/// # Safety
/// As for [`launch_on`]; the kernel waits as described before its first memory access that
/// depends on earlier work on the stream.
pub unsafe fn launch_overlapped_on(
    gpu: &Gpu,
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut Args,
) -> Result<()> {
    use cudarc::driver::sys;
    prepare(gpu, func, cfg)?;
    // SAFETY: a plain C struct of integers and a union of plain values; all-zero is valid.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let (g, b) = (cfg.grid, cfg.block);
    let lc = sys::CUlaunchConfig {
        gridDimX: g.0,
        gridDimY: g.1,
        gridDimZ: g.2,
        blockDimX: b.0,
        blockDimY: b.1,
        blockDimZ: b.2,
        sharedMemBytes: cfg.shared_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the configuration and attribute live across the call; the argument pointers are
    // the caller's (see `launch_on`).
    unsafe { sys::cuLaunchKernelEx(&lc, func.cu_function(), args.ptrs.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .ctx(|| format!("launching an overlapped kernel with grid {g:?}, block {b:?}"))
}

impl Gpu {
    /// Launches kernel `name` of module `ptx` on this GPU's default stream.
    ///
    /// # Safety
    /// As for [`launch_on`].
    pub unsafe fn launch(&self, ptx: &'static str, name: &str, cfg: LaunchConfig, mut args: Args) -> Result<()> {
        let f = self.function(ptx, name)?;
        // SAFETY: forwarded from the caller.
        unsafe { launch_on(self, self.stream(), &f, cfg, &mut args) }
    }

    /// Launches kernel `name` of module `ptx` cooperatively on this GPU's default stream.
    ///
    /// # Safety
    /// As for [`launch_on`].
    pub unsafe fn launch_cooperative(
        &self,
        ptx: &'static str,
        name: &str,
        cfg: LaunchConfig,
        mut args: Args,
    ) -> Result<()> {
        let f = self.function(ptx, name)?;
        // SAFETY: forwarded from the caller.
        unsafe { launch_cooperative_on(self, self.stream(), &f, cfg, &mut args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_keep_values_and_order() {
        let a = Args::new().arg(1u32).arg(2.5f64).arg(mscclpp_device::ptr::GlobalPtr::<u8>::from_addr(0x40));
        assert_eq!(a.len(), 3);
        // SAFETY: the pointers point at the boxed values pushed above, in order.
        unsafe {
            assert_eq!(*(a.ptrs[0] as *const u32), 1);
            assert_eq!(*(a.ptrs[1] as *const f64), 2.5);
            assert_eq!(*(a.ptrs[2] as *const u64), 0x40);
        }
    }

    #[test]
    fn config_builder() {
        let c = LaunchConfig::new(4, 128).shared(100_000);
        assert_eq!(c.grid, (4, 1, 1));
        assert_eq!(c.block, (128, 1, 1));
        assert_eq!(c.shared_bytes, 100_000);
    }
}
