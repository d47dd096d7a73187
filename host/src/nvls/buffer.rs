//! [`MulticastBuffer`]: a multicast buffer over the GPUs of this process, behind the guard.

use std::ffi::OsString;
use std::sync::Arc;

use mscclpp_device::ptr::{GlobalPtr, MultimemPtr};

use super::cuda::CudaNvls;
use super::guard::multicast_allowed;
use super::steps::{MulticastSupport, NvlsLayout, query_support, setup, teardown};
use crate::error::Result;
use crate::gpu::Gpu;

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
    /// Member `i`'s address of its own copy (`None` unless `i` is below the number of GPUs).
    pub fn device_ptr<T>(&self, i: usize) -> Option<GlobalPtr<T>> {
        self.layout.members.get(i)?.unicast.map(GlobalPtr::from_addr)
    }
    /// Member `i`'s address of the multicast mapping, valid on that member's GPU only (`None`
    /// unless `i` is below the number of GPUs).
    pub fn multicast_ptr<T>(&self, i: usize) -> Option<MultimemPtr<T>> {
        let addr = self.layout.members.get(i)?.multicast?;
        // SAFETY: `addr` is the start of a multicast mapping created for this member's device,
        // with every member's memory bound; it stays mapped while `self` lives.
        Some(unsafe { MultimemPtr::from_addr(addr) })
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
