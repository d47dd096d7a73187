//! NVLink multicast (NVLS) buffers, behind a guard.
//!
//! **Creating multicast objects on a shared machine can put its GPUs out of service**, so
//! nothing in this module reaches the driver without a [`MulticastPermit`], and the only way to
//! get one is [`multicast_allowed_by_env`], which looks at nothing but the environment and refuses when
//!
//! * `NCCL_NVLS_ENABLE` is set to anything but a clear "on" (`1`, `true`, `yes` or `on`, any
//!   case, surrounding spaces ignored): `0`, `00`, `2`, the empty string and a value that is
//!   not UTF-8 all count as off,
//! * `NVSHMEM_DISABLE_NVLS` or `TORCH_SYMM_MEM_DISABLE_MULTICAST` is set to anything but a clear
//!   "no" (`0`, `false`, `no` or `off`): again the empty string and non-UTF-8 values disable,
//! * or, otherwise, `MSCCLPP_RS_ALLOW_MULTICAST` is not exactly `1` (explicit opt-in).
//!
//! Variables are read with [`std::env::var_os`], so a value that is not valid UTF-8 is seen (and
//! refuses) instead of passing for unset. The public entry points read this process's
//! environment and run the guard first, before any argument check or driver call; the variants
//! that take an environment snapshot are private to the crate (its tests use them), so no caller
//! can hand the guard a made-up environment.
//!
//! ```compile_fail,E0603
//! // The snapshot form of the guard is not public: a permit cannot be had from a made-up
//! // environment.
//! let _ = mscclpp_host::nvls::multicast_allowed(|_| Some("1".into()));
//! ```
//!
//! ```compile_fail,E0624
//! use mscclpp_host::nvls::MulticastBuffer;
//! let _ = MulticastBuffer::create(&[], 1 << 21, |_| Some("1".into()));
//! ```
//!
//! What `MulticastBuffer::create` does for a group of GPUs of this process:
//!
//! ```text
//!  guard ─► each GPU: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
//!        ─► cuMulticastGetGranularity (recommended) ─► size rounded up to it and to the
//!           allocation granularity (cuMemGetAllocationGranularity)
//!        ─► cuMulticastCreate {numDevices, size, POSIX fd handles}
//!        ─► cuMulticastAddDevice for every GPU (all before any bind)
//!        ─► each GPU: cuMemCreate (pinned, on the GPU) ─► cuMulticastBindMem(mc, 0, mem, 0, size)
//!        ─► each GPU: map its memory (unicast) and the multicast handle:
//!           cuMemAddressReserve ─► cuMemMap ─► cuMemSetAccess (read/write for that GPU)
//! ```
//!
//! Teardown runs in reverse (unmap, free the ranges, unbind, release). The driver calls sit
//! behind the [`NvlsDriver`] trait so the sequence and the guard are tested on the CPU with a
//! recording fake; the real implementation is private to this module. Groups that span
//! processes (the multicast handle exported as a POSIX fd to the other ranks) build on the same
//! steps once the bootstrap can pass file descriptors.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

use cudarc::driver::sys;
use mscclpp_device::ptr::{GlobalPtr, MultimemPtr};

use crate::error::{Error, Result, check};
use crate::gpu::Gpu;

/// The opt-in variable: multicast objects are created only when it is exactly `1`.
pub const ALLOW_VAR: &str = "MSCCLPP_RS_ALLOW_MULTICAST";

/// Variables through which other libraries' users (and the shared GPU machines) turn NVLS off.
/// Each one, unless it clearly leaves NVLS on, makes [`multicast_allowed_by_env`] refuse.
pub const DISABLE_VARS: [&str; 3] = ["NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"];

/// Proof that the multicast guard passed. Only [`multicast_allowed_by_env`] makes one; every function
/// that reaches the driver takes it.
#[derive(Debug)]
pub struct MulticastPermit {
    _private: (),
}

/// Whether a variable's value clearly says "on".
fn clearly_on(v: &OsStr) -> bool {
    v.to_str().is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Whether a variable's value clearly says "off" / "no".
fn clearly_off(v: &OsStr) -> bool {
    v.to_str().is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off"))
}

/// The multicast guard over an environment snapshot (`env(name)` is the value of variable
/// `name`, if set). Makes no driver call. See the module docs for the rules.
pub(crate) fn multicast_allowed(env: impl Fn(&str) -> Option<OsString>) -> Result<MulticastPermit> {
    let refuse = |variable: &'static str, reason: String| Err(Error::MulticastRefused { variable, reason });
    if let Some(v) = env("NCCL_NVLS_ENABLE")
        && !clearly_on(&v)
    {
        return refuse(
            "NCCL_NVLS_ENABLE",
            format!("NCCL_NVLS_ENABLE={} turns NVLS off (only 1/true/yes/on keep it on)", v.display()),
        );
    }
    for var in ["NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"] {
        if let Some(v) = env(var)
            && !clearly_off(&v)
        {
            return refuse(var, format!("{var}={} turns multicast off (only 0/false/no/off leave it on)", v.display()));
        }
    }
    match env(ALLOW_VAR) {
        Some(v) if v.to_str().is_some_and(|v| v.trim() == "1") => Ok(MulticastPermit { _private: () }),
        Some(v) => refuse(ALLOW_VAR, format!("{ALLOW_VAR}={}; set it to 1 to opt in", v.display())),
        None => refuse(ALLOW_VAR, format!("{ALLOW_VAR} is not set; set it to 1 to opt in")),
    }
}

/// The multicast guard over this process's environment: the only public way to get a
/// [`MulticastPermit`]. Makes no driver call. See the module docs for the rules.
pub fn multicast_allowed_by_env() -> Result<MulticastPermit> {
    multicast_allowed(|name| std::env::var_os(name))
}

/// A driver allocation handle (`CUmemGenericAllocationHandle`).
pub type Handle = u64;

/// A device attribute the setup reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvlsAttr {
    /// `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`
    MulticastSupported,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`
    PosixFdHandles,
}

/// The driver operations of multicast setup, on the group's devices `0..n` (indices into the
/// group, not ordinals). The real implementation calls the CUDA driver; tests use a fake.
pub trait NvlsDriver {
    /// Reads a device attribute (non-zero means yes).
    fn attribute(&self, dev: usize, attr: NvlsAttr) -> Result<i32>;
    /// `cuMulticastGetGranularity` for a group of `n_devices` and `bytes` (recommended or minimum).
    fn multicast_granularity(&self, n_devices: usize, bytes: usize, recommended: bool) -> Result<usize>;
    /// `cuMemGetAllocationGranularity` (recommended) for pinned memory on `dev`.
    fn allocation_granularity(&self, dev: usize) -> Result<usize>;
    /// `cuMulticastCreate` for `n_devices` and `bytes`.
    fn multicast_create(&self, n_devices: usize, bytes: usize) -> Result<Handle>;
    /// `cuMulticastAddDevice`.
    fn multicast_add_device(&self, mc: Handle, dev: usize) -> Result<()>;
    /// `cuMemCreate` of `bytes` of pinned memory on `dev`, exportable as a POSIX fd.
    fn mem_create(&self, dev: usize, bytes: usize) -> Result<Handle>;
    /// `cuMulticastBindMem(mc, 0, mem, 0, bytes)` for `dev`.
    fn multicast_bind_mem(&self, mc: Handle, dev: usize, mem: Handle, bytes: usize) -> Result<()>;
    /// Maps `handle` into `dev`'s address space (reserve with `align`, map, read/write access)
    /// and returns the address; on failure nothing stays reserved.
    fn map(&self, dev: usize, handle: Handle, bytes: usize, align: usize) -> Result<u64>;
    /// Unmaps and frees an address range returned by [`NvlsDriver::map`].
    fn unmap(&self, dev: usize, va: u64, bytes: usize) -> Result<()>;
    /// `cuMulticastUnbind(mc, dev, 0, bytes)`.
    fn multicast_unbind(&self, mc: Handle, dev: usize, bytes: usize) -> Result<()>;
    /// `cuMemRelease`.
    fn release(&self, handle: Handle) -> Result<()>;
}

/// What a device offers for multicast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MulticastSupport {
    /// `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`.
    pub supported: bool,
    /// Whether allocations (and multicast objects) can be exported as POSIX file descriptors.
    pub posix_fd_handles: bool,
    /// Minimum multicast granularity in bytes (0 when multicast is unsupported).
    pub min_granularity: usize,
    /// Recommended multicast granularity in bytes (0 when multicast is unsupported).
    pub granularity: usize,
}

/// Reads what device `dev` of a group of `n_devices` offers for multicast.
pub fn query_support<D: NvlsDriver>(
    _permit: &MulticastPermit,
    d: &D,
    dev: usize,
    n_devices: usize,
) -> Result<MulticastSupport> {
    let supported = d.attribute(dev, NvlsAttr::MulticastSupported)? != 0;
    let posix_fd_handles = d.attribute(dev, NvlsAttr::PosixFdHandles)? != 0;
    let (min_granularity, granularity) = if supported {
        (d.multicast_granularity(n_devices, 0, false)?, d.multicast_granularity(n_devices, 0, true)?)
    } else {
        (0, 0)
    };
    Ok(MulticastSupport { supported, posix_fd_handles, min_granularity, granularity })
}

/// One device's part of a multicast buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Member {
    /// The device's physical memory bound to the multicast object.
    pub mem: Option<Handle>,
    /// Whether `mem` is bound.
    pub bound: bool,
    /// The device's unicast address of its own memory.
    pub unicast: Option<u64>,
    /// The device's address of the multicast mapping.
    pub multicast: Option<u64>,
}

/// The driver objects of a multicast buffer (possibly partial while it is built).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvlsLayout {
    /// The multicast object.
    pub mc: Option<Handle>,
    /// Whether `cuMulticastAddDevice` ran for each device.
    pub added: Vec<bool>,
    /// Bytes per device (rounded up to the granularities).
    pub bytes: usize,
    /// The recommended multicast granularity used for the rounding and the mapping alignment.
    pub granularity: usize,
    /// One entry per device.
    pub members: Vec<Member>,
}

fn round_up(x: usize, to: usize) -> Result<usize> {
    if to == 0 {
        return Err(Error::InvalidArgument("multicast granularity reported as 0".into()));
    }
    x.div_ceil(to)
        .checked_mul(to)
        .ok_or_else(|| Error::InvalidArgument(format!("{x} bytes overflow when rounded up to {to}")))
}

/// Builds a multicast buffer of at least `bytes` per device over devices `0..n` of `d`.
/// On failure every object created so far is released again.
pub fn setup<D: NvlsDriver>(permit: &MulticastPermit, d: &D, n: usize, bytes: usize) -> Result<NvlsLayout> {
    if n == 0 {
        return Err(Error::InvalidArgument("a multicast group needs at least one GPU".into()));
    }
    if bytes == 0 {
        return Err(Error::InvalidArgument("a multicast buffer needs at least one byte".into()));
    }
    for dev in 0..n {
        let s = query_support(permit, d, dev, n)?;
        if !s.supported {
            return Err(Error::Unsupported(format!("device {dev} of the group does not support multicast")));
        }
        if !s.posix_fd_handles {
            return Err(Error::Unsupported(format!("device {dev} cannot export POSIX fd handles")));
        }
    }
    let mut layout = NvlsLayout { members: vec![Member::default(); n], added: vec![false; n], ..Default::default() };
    match build(d, n, bytes, &mut layout) {
        Ok(()) => Ok(layout),
        Err(e) => {
            // Best effort: the build's error is the one to report.
            let _ = teardown(d, &mut layout);
            Err(e)
        }
    }
}

fn build<D: NvlsDriver>(d: &D, n: usize, bytes: usize, l: &mut NvlsLayout) -> Result<()> {
    l.granularity = d.multicast_granularity(n, bytes, true)?;
    let mut size = round_up(bytes, l.granularity)?;
    for dev in 0..n {
        size = round_up(size, d.allocation_granularity(dev)?)?;
    }
    l.bytes = size;
    let mc = d.multicast_create(n, size)?;
    l.mc = Some(mc);
    // Every device joins before any memory is bound.
    for (dev, added) in l.added.iter_mut().enumerate() {
        d.multicast_add_device(mc, dev)?;
        *added = true;
    }
    for (dev, m) in l.members.iter_mut().enumerate() {
        let mem = d.mem_create(dev, size)?;
        m.mem = Some(mem);
        d.multicast_bind_mem(mc, dev, mem, size)?;
        m.bound = true;
    }
    let align = l.granularity;
    for (dev, m) in l.members.iter_mut().enumerate() {
        if let Some(mem) = m.mem {
            m.unicast = Some(d.map(dev, mem, size, align)?);
            m.multicast = Some(d.map(dev, mc, size, align)?);
        }
    }
    Ok(())
}

/// Releases every object of `l` (in reverse order of creation), leaving it empty. Continues past
/// failures and returns the first one.
pub fn teardown<D: NvlsDriver>(d: &D, l: &mut NvlsLayout) -> Result<()> {
    let mut first: Option<Error> = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    for (dev, m) in l.members.iter_mut().enumerate().rev() {
        if let Some(va) = m.multicast.take() {
            note(d.unmap(dev, va, l.bytes));
        }
        if let Some(va) = m.unicast.take() {
            note(d.unmap(dev, va, l.bytes));
        }
    }
    for (dev, m) in l.members.iter_mut().enumerate().rev() {
        if m.bound
            && let Some(mc) = l.mc
        {
            note(d.multicast_unbind(mc, dev, l.bytes));
        }
        m.bound = false;
        if let Some(mem) = m.mem.take() {
            note(d.release(mem));
        }
    }
    if let Some(mc) = l.mc.take() {
        note(d.release(mc));
    }
    l.added.iter_mut().for_each(|a| *a = false);
    first.map_or(Ok(()), Err)
}

/// A buffer that every GPU of a group (all in this process) has bound to one NVLink multicast
/// object: each GPU sees its own copy at [`device_ptr`](Self::device_ptr) and the multicast
/// mapping at [`multicast_ptr`](Self::multicast_ptr). Released on drop.
pub struct MulticastBuffer {
    gpus: Vec<Arc<Gpu>>,
    layout: NvlsLayout,
}

impl std::fmt::Debug for MulticastBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MulticastBuffer").field("gpus", &self.gpus.len()).field("layout", &self.layout).finish()
    }
}

impl MulticastBuffer {
    /// [`create_by_env`](Self::create_by_env) under an environment snapshot (crate-private:
    /// tests only).
    pub(crate) fn create(gpus: &[Arc<Gpu>], bytes: usize, env: impl Fn(&str) -> Option<OsString>) -> Result<Self> {
        let permit = multicast_allowed(env)?;
        let driver = CudaNvls { gpus };
        let layout = setup(&permit, &driver, gpus.len(), bytes)?;
        Ok(Self { gpus: gpus.to_vec(), layout })
    }

    /// Creates a multicast buffer of at least `bytes` per GPU over `gpus`, if the guard allows
    /// it under this process's environment (checked first, before anything else; see the
    /// module docs).
    pub fn create_by_env(gpus: &[Arc<Gpu>], bytes: usize) -> Result<Self> {
        Self::create(gpus, bytes, |name| std::env::var_os(name))
    }

    /// What `gpu` offers for multicast in a group of `n_devices`, if the guard allows it under
    /// this process's environment (checked first).
    pub fn support_by_env(gpu: &Arc<Gpu>, n_devices: usize) -> Result<MulticastSupport> {
        Self::support(gpu, n_devices, |name| std::env::var_os(name))
    }

    /// [`support_by_env`](Self::support_by_env) under an environment snapshot (crate-private).
    pub(crate) fn support(
        gpu: &Arc<Gpu>,
        n_devices: usize,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<MulticastSupport> {
        let permit = multicast_allowed(env)?;
        let gpus = [gpu.clone()];
        query_support(&permit, &CudaNvls { gpus: &gpus }, 0, n_devices)
    }

    /// Bytes per GPU (the request rounded up to the granularities).
    pub fn len(&self) -> usize {
        self.layout.bytes
    }
    /// Whether the buffer is empty (never: creation needs at least one byte).
    pub fn is_empty(&self) -> bool {
        self.layout.bytes == 0
    }
    /// The multicast granularity the buffer was rounded to (and its mappings aligned to).
    pub fn granularity(&self) -> usize {
        self.layout.granularity
    }
    /// The GPUs of the group, in member order.
    pub fn gpus(&self) -> &[Arc<Gpu>] {
        &self.gpus
    }
    /// Member `i`'s address of its own copy.
    pub fn device_ptr<T>(&self, i: usize) -> GlobalPtr<T> {
        GlobalPtr::from_addr(self.layout.members[i].unicast.expect("mapped at creation"))
    }
    /// Member `i`'s address of the multicast mapping (valid on that member's GPU only).
    pub fn multicast_ptr<T>(&self, i: usize) -> MultimemPtr<T> {
        let addr = self.layout.members[i].multicast.expect("mapped at creation");
        // SAFETY: `addr` is the start of a multicast mapping created for this member's device,
        // with every member's memory bound; it stays mapped while `self` lives.
        unsafe { MultimemPtr::from_addr(addr) }
    }
}

impl Drop for MulticastBuffer {
    fn drop(&mut self) {
        let driver = CudaNvls { gpus: &self.gpus };
        if let Err(e) = teardown(&driver, &mut self.layout) {
            eprintln!("mscclpp-host: releasing a multicast buffer: {e}");
        }
    }
}

/// The CUDA driver behind [`NvlsDriver`]; only reachable after the guard (see
/// [`MulticastBuffer::create`]).
struct CudaNvls<'a> {
    gpus: &'a [Arc<Gpu>],
}

impl CudaNvls<'_> {
    fn gpu(&self, dev: usize) -> Result<&Arc<Gpu>> {
        self.gpus.get(dev).ok_or_else(|| Error::InvalidArgument(format!("no device {dev} in the group")))
    }
    fn cu_device(&self, dev: usize) -> Result<sys::CUdevice> {
        Ok(self.gpu(dev)?.context().cu_device())
    }
    fn mc_prop(&self, n_devices: usize, bytes: usize) -> Result<sys::CUmulticastObjectProp> {
        Ok(sys::CUmulticastObjectProp {
            numDevices: u32::try_from(n_devices)
                .map_err(|_| Error::InvalidArgument(format!("{n_devices} devices in one multicast group")))?,
            size: bytes,
            handleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as u64,
            flags: 0,
        })
    }
    fn location(&self, dev: usize) -> Result<sys::CUmemLocation> {
        Ok(sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.cu_device(dev)? })
    }
    fn alloc_prop(&self, dev: usize) -> Result<sys::CUmemAllocationProp> {
        // SAFETY: a plain C struct for which all-zero is a valid (empty) value.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location = self.location(dev)?;
        Ok(prop)
    }
}

impl NvlsDriver for CudaNvls<'_> {
    fn attribute(&self, dev: usize, attr: NvlsAttr) -> Result<i32> {
        let a = match attr {
            NvlsAttr::MulticastSupported => sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
            NvlsAttr::PosixFdHandles => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
            }
        };
        let mut v = 0i32;
        // SAFETY: `v` is a valid out-pointer; the device handle comes from an open context.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.cu_device(dev)?) };
        check(r, || format!("cuDeviceGetAttribute({a:?}) on group device {dev}"))?;
        Ok(v)
    }

    fn multicast_granularity(&self, n_devices: usize, bytes: usize, recommended: bool) -> Result<usize> {
        let prop = self.mc_prop(n_devices, bytes)?;
        let flag = if recommended {
            sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_RECOMMENDED
        } else {
            sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_MINIMUM
        };
        let mut g = 0usize;
        // SAFETY: `g` and `prop` are valid for the call; no object is created.
        let r = unsafe { sys::cuMulticastGetGranularity(&mut g, &prop, flag) };
        check(r, || format!("cuMulticastGetGranularity({n_devices} devices)"))?;
        Ok(g)
    }

    fn allocation_granularity(&self, dev: usize) -> Result<usize> {
        let prop = self.alloc_prop(dev)?;
        let mut g = 0usize;
        // SAFETY: `g` and `prop` are valid for the call.
        let r = unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        };
        check(r, || format!("cuMemGetAllocationGranularity on group device {dev}"))?;
        Ok(g)
    }

    fn multicast_create(&self, n_devices: usize, bytes: usize) -> Result<Handle> {
        let prop = self.mc_prop(n_devices, bytes)?;
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `h` and `prop` are valid for the call. Reached only with a MulticastPermit.
        let r = unsafe { sys::cuMulticastCreate(&mut h, &prop) };
        check(r, || format!("cuMulticastCreate({n_devices} devices, {bytes} bytes)"))?;
        Ok(h)
    }

    fn multicast_add_device(&self, mc: Handle, dev: usize) -> Result<()> {
        // SAFETY: plain values; the driver validates the handle.
        let r = unsafe { sys::cuMulticastAddDevice(mc, self.cu_device(dev)?) };
        check(r, || format!("cuMulticastAddDevice(group device {dev})"))
    }

    fn mem_create(&self, dev: usize, bytes: usize) -> Result<Handle> {
        self.gpu(dev)?.bind()?;
        let prop = self.alloc_prop(dev)?;
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `h` and `prop` are valid for the call.
        let r = unsafe { sys::cuMemCreate(&mut h, bytes, &prop, 0) };
        check(r, || format!("cuMemCreate({bytes} bytes on group device {dev})"))?;
        Ok(h)
    }

    fn multicast_bind_mem(&self, mc: Handle, dev: usize, mem: Handle, bytes: usize) -> Result<()> {
        self.gpu(dev)?.bind()?;
        // SAFETY: plain values; the driver validates the handles and sizes.
        let r = unsafe { sys::cuMulticastBindMem(mc, 0, mem, 0, bytes, 0) };
        check(r, || format!("cuMulticastBindMem(group device {dev}, {bytes} bytes)"))
    }

    fn map(&self, dev: usize, handle: Handle, bytes: usize, align: usize) -> Result<u64> {
        self.gpu(dev)?.bind()?;
        let mut va: sys::CUdeviceptr = 0;
        // SAFETY: `va` is a valid out-pointer.
        let r = unsafe { sys::cuMemAddressReserve(&mut va, bytes, align, 0, 0) };
        check(r, || format!("cuMemAddressReserve({bytes} bytes on group device {dev})"))?;
        let mapped = (|| {
            // SAFETY: `va` is a fresh reservation of `bytes`; the handle's size is `bytes`.
            let r = unsafe { sys::cuMemMap(va, bytes, 0, handle, 0) };
            check(r, || format!("cuMemMap(group device {dev})"))?;
            let desc = sys::CUmemAccessDesc {
                location: self.location(dev)?,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: `desc` is valid for the call and the range is mapped.
            let r = unsafe { sys::cuMemSetAccess(va, bytes, &desc, 1) };
            if let Err(e) = check(r, || format!("cuMemSetAccess(group device {dev})")) {
                // SAFETY: the range was mapped just above.
                let _ = unsafe { sys::cuMemUnmap(va, bytes) };
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = mapped {
            // SAFETY: `va` is our reservation of `bytes`, no longer mapped.
            let _ = unsafe { sys::cuMemAddressFree(va, bytes) };
            return Err(e);
        }
        Ok(va)
    }

    fn unmap(&self, dev: usize, va: u64, bytes: usize) -> Result<()> {
        self.gpu(dev)?.bind()?;
        // SAFETY: `va` came from `map` with this size and is unmapped once.
        let r = unsafe { sys::cuMemUnmap(va, bytes) };
        check(r, || format!("cuMemUnmap(group device {dev})"))?;
        // SAFETY: as above; the reservation is freed once.
        let r = unsafe { sys::cuMemAddressFree(va, bytes) };
        check(r, || format!("cuMemAddressFree(group device {dev})"))
    }

    fn multicast_unbind(&self, mc: Handle, dev: usize, bytes: usize) -> Result<()> {
        // SAFETY: plain values; the driver validates the handle.
        let r = unsafe { sys::cuMulticastUnbind(mc, self.cu_device(dev)?, 0, bytes) };
        check(r, || format!("cuMulticastUnbind(group device {dev})"))
    }

    fn release(&self, handle: Handle) -> Result<()> {
        // SAFETY: the handle came from cuMemCreate/cuMulticastCreate and is released once.
        let r = unsafe { sys::cuMemRelease(handle) };
        check(r, || "cuMemRelease".into())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let m: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| m.get(k).cloned()
    }

    fn env_os(pairs: &[(&str, OsString)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let m: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        move |k| m.get(k).cloned()
    }

    /// The refusal's message (the variable is checked against the message: the message names it).
    fn refusal(r: Result<MulticastPermit>) -> String {
        match r {
            Err(e @ Error::MulticastRefused { variable, .. }) => {
                let m = e.to_string();
                assert!(m.contains(variable), "the refusal names {variable}: {m}");
                m
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn guard_every_combination() {
        // Each disabling variable: unset, set to its "off" value, set to a value that keeps NVLS on.
        let nccl = [None, Some("0"), Some("1")];
        let nvshmem = [None, Some("1"), Some("0")];
        let torch = [None, Some("1"), Some("0")];
        let allow = [None, Some("1"), Some("0"), Some("yes"), Some(" 1 ")];
        let mut allowed = 0;
        for n in nccl {
            for s in nvshmem {
                for t in torch {
                    for a in allow {
                        let mut pairs = Vec::new();
                        for (k, v) in [
                            ("NCCL_NVLS_ENABLE", n),
                            ("NVSHMEM_DISABLE_NVLS", s),
                            ("TORCH_SYMM_MEM_DISABLE_MULTICAST", t),
                            (ALLOW_VAR, a),
                        ] {
                            if let Some(v) = v {
                                pairs.push((k, v));
                            }
                        }
                        let disabled = n == Some("0") || s == Some("1") || t == Some("1");
                        let opted_in = a.is_some_and(|v| v.trim() == "1");
                        let r = multicast_allowed(env(&pairs));
                        if !disabled && opted_in {
                            assert!(r.is_ok(), "{pairs:?} should be allowed");
                            allowed += 1;
                        } else {
                            let m = refusal(r);
                            if n == Some("0") {
                                assert!(m.contains("NCCL_NVLS_ENABLE=0"), "{pairs:?}: {m}");
                            } else if s == Some("1") {
                                assert!(m.contains("NVSHMEM_DISABLE_NVLS=1"), "{pairs:?}: {m}");
                            } else if t == Some("1") {
                                assert!(m.contains("TORCH_SYMM_MEM_DISABLE_MULTICAST=1"), "{pairs:?}: {m}");
                            } else {
                                assert!(m.contains(ALLOW_VAR), "{pairs:?}: {m}");
                            }
                        }
                    }
                }
            }
        }
        // NCCL unset/1 x NVSHMEM unset/0 x TORCH unset/0 x two spellings of the opt-in.
        assert_eq!(allowed, 2 * 2 * 2 * 2);
    }

    #[test]
    fn guard_reads_other_spellings_conservatively() {
        for (k, v) in [
            ("NCCL_NVLS_ENABLE", "false"),
            ("NCCL_NVLS_ENABLE", " OFF "),
            ("NVSHMEM_DISABLE_NVLS", "true"),
            ("NVSHMEM_DISABLE_NVLS", "2"),
            ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "yes"),
        ] {
            refusal(multicast_allowed(env(&[(k, v), (ALLOW_VAR, "1")])));
        }
        // Values that leave NVLS on.
        for (k, v) in [
            ("NCCL_NVLS_ENABLE", "1"),
            ("NCCL_NVLS_ENABLE", " TRUE "),
            ("NCCL_NVLS_ENABLE", "on"),
            ("NCCL_NVLS_ENABLE", "Yes"),
            ("NVSHMEM_DISABLE_NVLS", "false"),
            ("NVSHMEM_DISABLE_NVLS", "0"),
            ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "Off"),
        ] {
            assert!(multicast_allowed(env(&[(k, v), (ALLOW_VAR, "1")])).is_ok(), "{k}={v}");
        }
        assert!(DISABLE_VARS.iter().all(|v| !v.is_empty()));
    }

    #[test]
    fn guard_treats_anything_not_clearly_on_as_off() {
        // Present but not a clear "on": NVLS is off.
        for v in ["0", "00", "2", "", "  ", "enable", "-1", "0x1", "1 1"] {
            let m = refusal(multicast_allowed(env(&[("NCCL_NVLS_ENABLE", v), (ALLOW_VAR, "1")])));
            assert!(m.contains("NCCL_NVLS_ENABLE"), "NCCL_NVLS_ENABLE={v:?}: {m}");
        }
        // A disable variable present with anything but a clear "no" disables, the empty string too.
        for var in ["NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"] {
            for v in ["", "1", "00x", "disable"] {
                let m = refusal(multicast_allowed(env(&[(var, v), (ALLOW_VAR, "1")])));
                assert!(m.contains(var), "{var}={v:?}: {m}");
            }
        }
    }

    #[test]
    fn guard_sees_values_that_are_not_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(vec![b'1', 0xff, 0xfe]);
        for var in DISABLE_VARS {
            let m = refusal(multicast_allowed(env_os(&[(var, bad()), (ALLOW_VAR, "1".into())])));
            assert!(m.contains(var), "{var}: {m}");
        }
        let m = refusal(multicast_allowed(env_os(&[(ALLOW_VAR, bad())])));
        assert!(m.contains(ALLOW_VAR), "{m}");
    }

    /// Records every driver call; can fail one named call.
    #[derive(Default)]
    struct Fake {
        calls: RefCell<Vec<String>>,
        fail: Option<&'static str>,
        no_multicast: bool,
        next: RefCell<u64>,
    }

    impl Fake {
        fn call(&self, what: String) -> Result<()> {
            let name = what.split('(').next().unwrap_or_default().to_string();
            self.calls.borrow_mut().push(what);
            if self.fail == Some(name.as_str()) {
                return Err(Error::InvalidArgument(format!("fake failure in {name}")));
            }
            Ok(())
        }
        fn handle(&self) -> u64 {
            let mut n = self.next.borrow_mut();
            *n += 1;
            0x1000 * *n
        }
        fn names(&self) -> Vec<String> {
            self.calls.borrow().iter().map(|c| c.split('(').next().unwrap_or_default().to_string()).collect()
        }
    }

    impl NvlsDriver for Fake {
        fn attribute(&self, dev: usize, attr: NvlsAttr) -> Result<i32> {
            self.call(format!("attribute({dev},{attr:?})"))?;
            Ok(match attr {
                NvlsAttr::MulticastSupported => !self.no_multicast as i32,
                NvlsAttr::PosixFdHandles => 1,
            })
        }
        fn multicast_granularity(&self, n: usize, _bytes: usize, recommended: bool) -> Result<usize> {
            self.call(format!("multicast_granularity({n},{recommended})"))?;
            Ok(if recommended { 512 << 20 } else { 2 << 20 })
        }
        fn allocation_granularity(&self, dev: usize) -> Result<usize> {
            self.call(format!("allocation_granularity({dev})"))?;
            Ok(2 << 20)
        }
        fn multicast_create(&self, n: usize, bytes: usize) -> Result<Handle> {
            self.call(format!("multicast_create({n},{bytes})"))?;
            Ok(self.handle())
        }
        fn multicast_add_device(&self, mc: Handle, dev: usize) -> Result<()> {
            self.call(format!("multicast_add_device({mc:#x},{dev})"))
        }
        fn mem_create(&self, dev: usize, bytes: usize) -> Result<Handle> {
            self.call(format!("mem_create({dev},{bytes})"))?;
            Ok(self.handle())
        }
        fn multicast_bind_mem(&self, mc: Handle, dev: usize, mem: Handle, bytes: usize) -> Result<()> {
            self.call(format!("multicast_bind_mem({mc:#x},{dev},{mem:#x},{bytes})"))
        }
        fn map(&self, dev: usize, handle: Handle, bytes: usize, align: usize) -> Result<u64> {
            self.call(format!("map({dev},{handle:#x},{bytes},{align})"))?;
            Ok(self.handle() << 20)
        }
        fn unmap(&self, dev: usize, va: u64, bytes: usize) -> Result<()> {
            self.call(format!("unmap({dev},{va:#x},{bytes})"))
        }
        fn multicast_unbind(&self, mc: Handle, dev: usize, bytes: usize) -> Result<()> {
            self.call(format!("multicast_unbind({mc:#x},{dev},{bytes})"))
        }
        fn release(&self, handle: Handle) -> Result<()> {
            self.call(format!("release({handle:#x})"))
        }
    }

    /// The generic entry point the public one wraps: guard first, then setup.
    fn create_with<D: NvlsDriver>(
        env: impl Fn(&str) -> Option<OsString>,
        d: &D,
        n: usize,
        bytes: usize,
    ) -> Result<NvlsLayout> {
        let permit = multicast_allowed(env)?;
        setup(&permit, d, n, bytes)
    }

    #[test]
    fn refused_setup_makes_no_driver_call() {
        let fake = Fake::default();
        let r = create_with(env(&[("NCCL_NVLS_ENABLE", "0"), (ALLOW_VAR, "1")]), &fake, 2, 1 << 20);
        assert!(
            matches!(r, Err(Error::MulticastRefused { variable: "NCCL_NVLS_ENABLE", ref reason }) if reason.contains("NCCL_NVLS_ENABLE=0")),
            "{r:?}"
        );
        assert!(fake.calls.borrow().is_empty(), "driver calls after a refusal: {:?}", fake.calls.borrow());
        // Not opted in: refused the same way.
        let r = create_with(env(&[]), &fake, 2, 1 << 20);
        assert!(
            matches!(r, Err(Error::MulticastRefused { variable: ALLOW_VAR, ref reason }) if reason.contains(ALLOW_VAR)),
            "{r:?}"
        );
        assert!(fake.calls.borrow().is_empty());
    }

    #[test]
    fn public_entry_points_refuse_before_anything_else() {
        // No GPU is opened: with an empty group any driver use (or even the argument check)
        // would give a different error than the guard's.
        let e = MulticastBuffer::create(&[], 1 << 21, env(&[("NCCL_NVLS_ENABLE", "0"), (ALLOW_VAR, "1")]))
            .expect_err("must be refused");
        assert!(
            matches!(&e, Error::MulticastRefused { variable: "NCCL_NVLS_ENABLE", reason } if reason.contains("NCCL_NVLS_ENABLE=0")),
            "{e}"
        );
        let e = MulticastBuffer::create(&[], 0, env(&[("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")])).unwrap_err();
        assert!(
            matches!(&e, Error::MulticastRefused { variable: "TORCH_SYMM_MEM_DISABLE_MULTICAST", reason } if reason.contains("TORCH_SYMM_MEM_DISABLE_MULTICAST")),
            "{e}"
        );
    }

    #[test]
    fn setup_sequence_on_a_fake_driver() {
        let fake = Fake::default();
        let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
        let mut l = setup(&permit, &fake, 2, 3 << 20).unwrap();
        // Rounded up to the recommended multicast granularity; mappings aligned to it.
        assert_eq!((l.bytes, l.granularity), (512 << 20, 512 << 20));
        let names = fake.names();
        let pos = |n: &str| names.iter().position(|c| c == n).unwrap_or_else(|| panic!("{n} not called"));
        let last = |n: &str| names.iter().rposition(|c| c == n).unwrap();
        assert!(last("attribute") < pos("multicast_create"), "support checked first");
        assert!(pos("multicast_create") < pos("multicast_add_device"));
        assert!(last("multicast_add_device") < pos("multicast_bind_mem"), "all devices join before any bind");
        assert!(last("multicast_bind_mem") < pos("map"));
        assert_eq!(names.iter().filter(|n| *n == "map").count(), 4, "unicast + multicast per device");
        assert!(l.members.iter().all(|m| m.bound && m.unicast.is_some() && m.multicast.is_some()));
        let created = fake.calls.borrow().len();
        teardown(&fake, &mut l).unwrap();
        let names = fake.names()[created..].to_vec();
        assert_eq!(names.iter().filter(|n| *n == "unmap").count(), 4);
        assert_eq!(names.iter().filter(|n| *n == "multicast_unbind").count(), 2);
        assert_eq!(names.iter().filter(|n| *n == "release").count(), 3, "two memories and the multicast object");
        assert_eq!(names.last().map(String::as_str), Some("release"));
        assert_eq!(l.mc, None);
    }

    #[test]
    fn failed_setup_releases_what_it_created() {
        let fake = Fake { fail: Some("multicast_bind_mem"), ..Default::default() };
        let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
        let e = setup(&permit, &fake, 2, 1).unwrap_err();
        assert!(e.to_string().contains("fake failure in multicast_bind_mem"), "{e}");
        let names = fake.names();
        // The first memory was created, its bind failed: release it and the multicast object.
        let after = &names[names.iter().position(|n| n == "multicast_bind_mem").unwrap() + 1..];
        assert_eq!(after, ["release", "release"]);
        assert!(!names.iter().any(|n| n == "multicast_unbind"), "nothing was bound");
    }

    #[test]
    fn unsupported_device_stops_before_creating_anything() {
        let fake = Fake { no_multicast: true, ..Default::default() };
        let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
        let e = setup(&permit, &fake, 2, 1).unwrap_err();
        assert!(matches!(&e, Error::Unsupported(m) if m.contains("does not support multicast")), "{e}");
        assert!(fake.names().iter().all(|n| n == "attribute"));
        assert!(matches!(setup(&permit, &fake, 0, 1), Err(Error::InvalidArgument(_))));
        assert!(matches!(setup(&permit, &fake, 1, 0), Err(Error::InvalidArgument(_))));
    }
}
