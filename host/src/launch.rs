//! Typed kernel launches.
//!
//! Kernel parameters are values of types implementing [`mscclpp_device::abi::DeviceAbi`]: the
//! device crate's handles, typed pointers and plain numbers. [`Args`] owns copies of them, so
//! temporaries can be passed.
//!
//! # The launch contract
//!
//! Every launch function is `unsafe`; its caller promises three things, numbered here and
//! referred to by number from each function's `# Safety`:
//!
//! 1. **The arguments match the kernel** in number, order and type. Number and sizes are checked
//!    before the launch wherever the driver describes the kernel's parameters
//!    (`cuFuncGetParamInfo`, drivers of CUDA 12.4 and later): a mismatch is
//!    [`Error::KernelArguments`], naming the kernel, and nothing is launched. Order and type
//!    within equal sizes (two `u64` swapped, a `u64` for a pointer) cannot be checked.
//! 2. **Every address among the arguments stays valid until the stream has passed the
//!    kernel**, not merely until the launch function returns: launches are asynchronous.
//!    [`crate::DeviceBuffer`] and [`crate::PinnedBuffer`] free their memory as soon as they are
//!    dropped, without waiting for the GPU, so keep them alive until a synchronize (or an event
//!    recorded after the kernel) has seen the kernel finish. This includes the addresses a
//!    handle reaches indirectly: the memories and semaphore counters registered with the proxy
//!    that serves a port channel ([`crate::proxy::ProxyBuilder::add_memory`] and
//!    [`crate::proxy::ProxyBuilder::add_semaphore`] take plain addresses; the proxy copies into
//!    them when the kernel asks), and the buffers a [`crate::comm::Communicator`] built channels
//!    over, on the peers too. (The channel sets hold this rank's buffers themselves, see
//!    [`crate::DeviceBuffer::retain`], so here it is the channel set that must outlive the
//!    kernel.)
//! 3. **The stream and the function belong to the GPU's context** (the functions that take a
//!    stream): `stream` comes from [`Gpu::stream`] or [`Gpu::new_stream`] of the same `gpu`, and
//!    `func` from [`Gpu::function`] of it. [`Gpu::launch`] and [`Gpu::launch_cooperative`] use
//!    the GPU's own stream and function table, so they meet 3 by construction.

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
    sizes: Vec<usize>,
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
        self.sizes.push(std::mem::size_of::<T>());
        self
    }
    /// The size in bytes of each argument, in order.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
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

/// Launch contract item 1 where it can be checked: the arguments' count and sizes against the
/// kernel's parameters as the driver describes them (`expected`; `None`: no check).
pub(crate) fn check_arguments(kernel: &str, expected: Option<&[usize]>, given: &[usize]) -> Result<()> {
    match expected {
        Some(expected) if expected != given => Err(Error::KernelArguments {
            kernel: kernel.to_string(),
            expected: expected.to_vec(),
            given: given.to_vec(),
        }),
        _ => Ok(()),
    }
}

/// Checks a launch configuration against the device and the arguments against the kernel,
/// binds its context and raises the function's dynamic shared-memory limit when the
/// configuration needs more than 48 KiB.
fn prepare(gpu: &Gpu, func: &CudaFunction, cfg: LaunchConfig, args: &Args) -> Result<()> {
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
    let params = gpu.kernel_params(func);
    check_arguments(&params.name, params.sizes.as_deref(), args.sizes())?;
    gpu.bind()?;
    if cfg.shared_bytes > DEFAULT_SHARED_LIMIT {
        func.set_attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cfg.shared_bytes as i32)
            .ctx(|| format!("raising the dynamic shared-memory limit to {} bytes", cfg.shared_bytes))?;
    }
    Ok(())
}

/// The most threads per block `f` can be launched with (its register use decides), at least 32.
pub fn max_threads_per_block(f: &CudaFunction) -> Result<u32> {
    // SAFETY: the function handle is live (its module is held by the caller's `CudaFunction`).
    let v = unsafe {
        cudarc::driver::result::function::get_function_attribute(
            f.cu_function(),
            FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        )
    }
    .ctx(|| "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)".into())?;
    Ok(v.max(32) as u32)
}

/// How many blocks of `f` launched with `threads` threads and `shared_bytes` of dynamic shared
/// memory `gpu` can hold at once over all its SMs (the driver's occupancy for one SM, times the
/// SM count). A kernel whose blocks wait for each other (or for other ranks' blocks on the same
/// GPU) must stay within it, else it waits for blocks that never start.
pub fn max_resident_blocks(gpu: &Gpu, f: &CudaFunction, threads: u32, shared_bytes: u32) -> Result<u32> {
    gpu.bind()?;
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes as usize, None)
        .ctx(|| format!("cuOccupancyMaxActiveBlocksPerMultiprocessor({threads} threads, {shared_bytes} B shared)"))?;
    Ok(per_sm.saturating_mul(gpu.info().sm_count))
}

/// Launches `func` on `stream`, raising the function's dynamic shared-memory limit when the
/// configuration asks for more than 48 KiB (up to the device's opt-in maximum).
///
/// # Safety
/// The [launch contract](self#the-launch-contract), all three items:
/// 1. `args` match `func`'s parameters in number, order and type (number and sizes are checked
///    where the driver describes the kernel: [`Error::KernelArguments`]);
/// 2. every address among `args` stays valid for what the kernel does with it until `stream`
///    has passed the kernel (buffers dropped earlier are freed at once);
/// 3. `stream` and `func` belong to `gpu`'s context.
pub unsafe fn launch_on(
    gpu: &Gpu,
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut Args,
) -> Result<()> {
    prepare(gpu, func, cfg, args)?;
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
    prepare(gpu, func, cfg, args)?;
    // u64: three u32 factors may overflow u32 (the driver then refuses the launch anyway).
    let threads = cfg.block.0 as u64 * cfg.block.1 as u64 * cfg.block.2 as u64;
    let threads = u32::try_from(threads).map_err(|_| {
        Error::InvalidArgument(format!("cooperative launch with {threads} threads per block ({:?})", cfg.block))
    })?;
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
/// it touches memory the previous kernel uses. Kernels of `mscclpp_collectives_device` do.
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
    prepare(gpu, func, cfg, args)?;
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
    unsafe { crate::driver::calls::launch_kernel_ex(&lc, func.cu_function(), &mut args.ptrs) }
        .ctx(|| format!("launching an overlapped kernel with grid {g:?}, block {b:?}"))
}

impl Gpu {
    /// Launches kernel `name` of module `ptx` on this GPU's default stream.
    ///
    /// # Safety
    /// Items 1 and 2 of the [launch contract](crate::launch#the-launch-contract) (item 3 holds:
    /// this GPU's stream and function table are used):
    /// 1. `args` match kernel `name`'s parameters in number, order and type; number and sizes
    ///    are checked where the driver describes the kernel, and a mismatch is
    ///    [`Error::KernelArguments`] before anything is launched;
    /// 2. every address among `args` stays valid for what the kernel does with it until this
    ///    GPU's stream has passed the kernel (e.g. until [`Gpu::synchronize`]): a
    ///    [`crate::DeviceBuffer`] dropped earlier is freed at once, while the kernel may still
    ///    use it.
    pub unsafe fn launch(&self, ptx: &'static str, name: &str, cfg: LaunchConfig, mut args: Args) -> Result<()> {
        let f = self.function(ptx, name)?;
        // SAFETY: forwarded from the caller.
        unsafe { launch_on(self, self.stream(), &f, cfg, &mut args) }
    }

    /// Launches kernel `name` of module `ptx` cooperatively on this GPU's default stream.
    ///
    /// # Safety
    /// As for [`Gpu::launch`] (items 1 and 2 of the launch contract).
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
    fn args_record_each_size() {
        let a = Args::new()
            .arg(1u32)
            .arg(2.5f64)
            .arg(<mscclpp_device::fifo::FifoDeviceHandle as bytemuck::Zeroable>::zeroed())
            .arg(7u8);
        assert_eq!(a.sizes(), [4, 8, 40, 1]);
        assert!(Args::new().sizes().is_empty());
    }

    #[test]
    fn argument_check_compares_count_and_sizes() {
        // No description from the driver: nothing to check.
        assert!(check_arguments("k", None, &[8, 4]).is_ok());
        assert!(check_arguments("k", Some(&[8, 8, 4]), &[8, 8, 4]).is_ok());
        assert!(check_arguments("k", Some(&[]), &[]).is_ok());
        for given in [&[8, 8][..], &[8, 8, 4, 4], &[8, 8, 8], &[8, 4, 8], &[]] {
            match check_arguments("bulk_roundtrip", Some(&[8, 8, 4]), given) {
                Err(Error::KernelArguments { kernel, expected, given: g }) => {
                    assert_eq!((kernel.as_str(), &expected[..], &g[..]), ("bulk_roundtrip", &[8, 8, 4][..], given));
                }
                other => panic!("{given:?}: {other:?}"),
            }
        }
        let e = check_arguments("port_atomic_add", Some(&[72, 8, 4, 8]), &[72, 8, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kernel `port_atomic_add` takes 4 parameters of [72, 8, 4, 8] bytes; the launch passed 3 of [72, 8, 4] bytes"
        );
    }

    #[test]
    fn config_builder() {
        let c = LaunchConfig::new(4, 128).shared(100_000);
        assert_eq!(c.grid, (4, 1, 1));
        assert_eq!(c.block, (128, 1, 1));
        assert_eq!(c.shared_bytes, 100_000);
    }
}
