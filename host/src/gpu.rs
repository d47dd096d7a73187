//! GPU discovery and per-device state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::driver::KernelParams;
use crate::error::{DriverContext, Error, Result};

/// What the machine has.
#[derive(Clone, Debug)]
pub struct Inventory {
    /// One entry per visible CUDA device.
    pub devices: Vec<DeviceInfo>,
    /// Why there are none, when there are none.
    pub reason: Option<String>,
}

/// Properties of one device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Number of multiprocessors.
    pub sm_count: u32,
    /// Largest dynamic shared memory a block can opt into, in bytes.
    pub max_shared_optin: u32,
    /// Total memory in bytes.
    pub total_mem: usize,
}

/// Whether the CUDA driver library can be loaded here (never panics).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Lists the devices, or says why there are none. Never panics on a machine without a driver.
pub fn inventory() -> Inventory {
    if !driver_present() {
        return Inventory {
            devices: Vec::new(),
            reason: Some("libcuda could not be loaded (no NVIDIA driver on this machine)".into()),
        };
    }
    let count = match cudarc::driver::result::init().and_then(|_| cudarc::driver::result::device::get_count()) {
        Ok(n) => n,
        Err(e) => {
            return Inventory { devices: Vec::new(), reason: Some(format!("cuInit/cuDeviceGetCount failed: {e}")) };
        }
    };
    let mut devices = Vec::new();
    for ordinal in 0..count.max(0) as usize {
        match device_info(ordinal) {
            Ok(d) => devices.push(d),
            Err(e) => return Inventory { devices, reason: Some(format!("device {ordinal}: {e}")) },
        }
    }
    let reason = devices.is_empty().then(|| "the driver reports no CUDA devices".to_string());
    Inventory { devices, reason }
}

fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    use cudarc::driver::result::device;
    let dev = device::get(ordinal as i32).ctx(|| format!("cuDeviceGet({ordinal})"))?;
    let attr = |a: Attr| -> Result<i32> {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { device::get_attribute(dev, a) }.ctx(|| format!("cuDeviceGetAttribute({a:?})"))
    };
    Ok(DeviceInfo {
        ordinal,
        name: device::get_name(dev).ctx(|| "cuDeviceGetName".into())?,
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        max_shared_optin: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
        // SAFETY: valid device handle.
        total_mem: unsafe { device::total_mem(dev) }.ctx(|| "cuDeviceTotalMem".into())?,
    })
}

/// One device as the runtime uses it: its primary context, a non-blocking stream, its properties
/// and the PTX modules loaded into it (each loaded once).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    modules: Mutex<HashMap<usize, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(usize, String), CudaFunction>>,
    /// The driver's description of each function handed out by [`Gpu::function`], by handle.
    /// Those modules stay loaded as long as the `Gpu`, so a handle here is never reused.
    params: Mutex<HashMap<usize, Arc<KernelParams>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish_non_exhaustive()
    }
}

impl Gpu {
    /// Opens device `ordinal` (retains its primary context, creates a non-blocking stream).
    pub fn open(ordinal: usize) -> Result<Arc<Self>> {
        if !driver_present() {
            return Err(Error::NoDriver("libcuda could not be loaded".into()));
        }
        let ctx = CudaContext::new(ordinal).ctx(|| format!("opening GPU {ordinal}"))?;
        // cudarc's event tracking stays as cudarc sets it (on): it only concerns `CudaSlice`s,
        // which this crate does not use, and keeps those a program allocates through
        // `Gpu::context` ordered across streams.
        let stream = ctx.new_stream().ctx(|| format!("creating a stream on GPU {ordinal}"))?;
        let info = device_info(ordinal)?;
        Ok(Arc::new(Self {
            ctx,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            params: Mutex::new(HashMap::new()),
        }))
    }

    /// Opens every visible device.
    pub fn open_all() -> Result<Vec<Arc<Self>>> {
        let inv = inventory();
        if inv.devices.is_empty() {
            return Err(Error::NoDriver(inv.reason.unwrap_or_default()));
        }
        inv.devices.iter().map(|d| Self::open(d.ordinal)).collect()
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.info.ordinal
    }
    /// The cudarc context (the device's primary context), for what this crate does not wrap.
    ///
    /// Its cudarc event tracking is left on, as cudarc sets it: `CudaSlice`s allocated through
    /// it record events and order themselves across streams. This crate's own buffers
    /// ([`crate::DeviceBuffer`], [`crate::PinnedBuffer`]) are plain driver allocations outside
    /// that tracking: they are ordered only by the streams they are used on, and their memory is
    /// freed as soon as they are dropped (item 2 of the
    /// [launch contract](crate::launch#the-launch-contract)).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// The default (non-blocking) stream of this `Gpu`.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// A new non-blocking stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().ctx(|| format!("creating a stream on GPU {}", self.ordinal()))
    }
    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().ctx(|| format!("binding GPU {}", self.ordinal()))
    }
    /// Waits for all work on the default stream; a kernel fault surfaces here.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().ctx(|| format!("synchronizing GPU {}", self.ordinal()))
    }

    /// Waits for all work on the default stream, but at most `timeout`: a kernel that neither
    /// finishes nor traps (a wait with an unbounded budget, say) becomes an [`Error::Timeout`] here
    /// instead of a hang of the host. The kernel keeps running; the context should not be reused.
    pub fn synchronize_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        self.bind()?;
        let ev = self.ctx.new_event(None).ctx(|| "creating an event".into())?;
        ev.record(&self.stream).ctx(|| "recording an event".into())?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match ev.try_is_complete() {
                Ok(true) => return self.synchronize(),
                Ok(false) => {}
                Err(e) => {
                    return Err(Error::Driver { context: format!("GPU {} work failed", self.ordinal()), source: e });
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::Timeout {
                    after: timeout,
                    waiting_for: format!(
                        "GPU {} work to finish (a kernel that neither finishes nor traps)",
                        self.ordinal()
                    ),
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Loads `ptx` into this context once (keyed by the text's address) and returns the module.
    pub fn module(&self, ptx: &'static str) -> Result<Arc<CudaModule>> {
        let key = ptx.as_ptr() as usize;
        let mut mods = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = mods.get(&key) {
            return Ok(m.clone());
        }
        let m = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .ctx(|| format!("loading PTX ({} bytes) on GPU {}", ptx.len(), self.ordinal()))?;
        mods.insert(key, m.clone());
        Ok(m)
    }

    /// The kernel `name` of the module `ptx` (module loaded once, function looked up once).
    pub fn function(&self, ptx: &'static str, name: &str) -> Result<CudaFunction> {
        let key = (ptx.as_ptr() as usize, name.to_string());
        if let Some(f) = self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(f.clone());
        }
        let f = self
            .module(ptx)?
            .load_function(name)
            .ctx(|| format!("looking up kernel `{name}` on GPU {}", self.ordinal()))?;
        let params = Arc::new(KernelParams::query(&f, Some(name)));
        self.params.lock().unwrap_or_else(|e| e.into_inner()).insert(f.cu_function() as usize, params);
        self.functions.lock().unwrap_or_else(|e| e.into_inner()).insert(key, f.clone());
        Ok(f)
    }

    /// The size in bytes of each parameter of kernel `name` of module `ptx`, as the driver
    /// describes the kernel, or `None` when this driver cannot (it lacks `cuFuncGetParamInfo`,
    /// CUDA 12.4). Launches check their arguments against these sizes.
    pub fn param_sizes(&self, ptx: &'static str, name: &str) -> Result<Option<Vec<usize>>> {
        let f = self.function(ptx, name)?;
        Ok(self.kernel_params(&f).sizes.clone())
    }

    /// The driver's description of `func`: remembered for the functions of [`Gpu::function`],
    /// asked afresh for any other.
    pub(crate) fn kernel_params(&self, func: &CudaFunction) -> Arc<KernelParams> {
        let known = self.params.lock().unwrap_or_else(|e| e.into_inner()).get(&(func.cu_function() as usize)).cloned();
        known.unwrap_or_else(|| Arc::new(KernelParams::query(func, None)))
    }

    /// Whether this device can access `peer`'s memory directly.
    pub fn can_access_peer(&self, peer: &Gpu) -> Result<bool> {
        let mut can = 0i32;
        // SAFETY: both device handles are valid; `can` is a valid out-pointer.
        let r =
            unsafe { cudarc::driver::sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer.ctx.cu_device()) };
        crate::error::check(r, || format!("cuDeviceCanAccessPeer({}, {})", self.ordinal(), peer.ordinal()))?;
        Ok(can != 0)
    }

    /// Enables this context's access to `peer`'s memory (idempotent).
    pub fn enable_peer_access(&self, peer: &Gpu) -> Result<()> {
        if !self.can_access_peer(peer)? {
            return Err(Error::Unsupported(format!("GPU {} cannot access GPU {}", self.ordinal(), peer.ordinal())));
        }
        self.bind()?;
        // SAFETY: the current context is ours; `peer`'s context is valid.
        let r = unsafe { cudarc::driver::sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) };
        if r == cudarc::driver::sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        crate::error::check(r, || format!("enabling peer access {} -> {}", self.ordinal(), peer.ordinal()))
    }
}
