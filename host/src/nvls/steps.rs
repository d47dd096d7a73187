//! The driver steps of a multicast buffer over [`NvlsDriver`]: support query, setup (with
//! release of everything created on failure) and teardown.

use super::guard::MulticastPermit;
use crate::error::{Error, Result};

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
