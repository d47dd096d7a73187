//! The CUDA driver behind [`NvlsDriver`], private to the module: only [`super::MulticastBuffer`]
//! builds one, after the guard.

use std::sync::Arc;

use cudarc::driver::sys;

use super::steps::{Handle, NvlsAttr, NvlsDriver};
use crate::error::{Error, Result, check};
use crate::gpu::Gpu;

/// The CUDA driver behind [`NvlsDriver`]; only reachable after the guard (see
/// [`MulticastBuffer::create`]).
pub(super) struct CudaNvls<'a> {
    pub(super) gpus: &'a [Arc<Gpu>],
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
