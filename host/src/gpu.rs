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
    /// One entry per visible CUDA device (after a [`Discovery::Failed`], the ones before the
    /// device that failed).
    pub devices: Vec<DeviceInfo>,
    /// Why there are none, or why the list stopped early.
    pub reason: Option<String>,
    /// How discovery ended.
    pub discovery: Discovery,
}

/// How GPU discovery ended: an absence (no driver, or a driver that reports no device) is a
/// fact about the machine; a failure is a driver that does not work, which a test must not
/// mistake for an absence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// The driver answered every query: `devices` lists every device it reports (none when it
    /// reports none).
    Complete,
    /// The CUDA driver library could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// A driver call failed: `cuInit`, `cuDeviceGetCount`, or a query of the device after the
    /// last one in `devices`. `reason` names the call and the driver's error.
    Failed,
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
    let (devices, outcome) = discover();
    summarize(devices, outcome)
}

/// Every device the driver reports, or why there is none to use: [`Error::NoDriver`] (no driver
/// library), [`Error::NoDevice`] (the driver reports none), or the driver's error where a driver
/// call failed, even after some devices were found ([`Error::is_no_gpu`] tells the first two,
/// which are facts about the machine, from a failure).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let (devices, outcome) = discover();
    usable(devices, outcome)
}

/// The inventory of a listing that ended with `outcome`.
fn summarize(devices: Vec<DeviceInfo>, outcome: Result<()>) -> Inventory {
    let (discovery, reason) = match outcome {
        Ok(()) if devices.is_empty() => (Discovery::Complete, Some(NO_DEVICES.to_string())),
        Ok(()) => (Discovery::Complete, None),
        Err(Error::NoDriver(why)) => (Discovery::NoDriver, Some(why)),
        Err(e) => (Discovery::Failed, Some(e.to_string())),
    };
    Inventory { devices, reason, discovery }
}

const NO_DEVICES: &str = "the driver reports no CUDA devices";

/// The devices the driver reports, in order, and how the listing ended: `Error::NoDriver` when
/// the library cannot be loaded, else as [`list_devices`].
fn discover() -> (Vec<DeviceInfo>, Result<()>) {
    if !driver_present() {
        return (
            Vec::new(),
            Err(Error::NoDriver("libcuda could not be loaded (no NVIDIA driver on this machine)".into())),
        );
    }
    let count = cudarc::driver::result::init()
        .ctx(|| "cuInit".into())
        .and_then(|_| cudarc::driver::result::device::get_count().ctx(|| "cuDeviceGetCount".into()));
    list_devices(no_device_is_zero(count), device_info)
}

/// `CUDA_ERROR_NO_DEVICE`, which `cuInit` returns when the driver sees no device (none
/// installed, or all hidden, as by `CUDA_VISIBLE_DEVICES=""`), is a driver that reports no
/// device: an absence, not a failure.
fn no_device_is_zero(count: Result<i32>) -> Result<i32> {
    match count {
        Err(e) if e.is_driver(cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NO_DEVICE) => Ok(0),
        count => count,
    }
}

/// [`Gpu::open`]'s error for `ordinal`: a driver that sees no device is [`Error::NoDevice`].
fn open_error(ordinal: usize, e: Error) -> Error {
    match no_device_is_zero(Err(e)) {
        Ok(_) => Error::NoDevice(format!("opening GPU {ordinal}: {NO_DEVICES}")),
        Err(e) => e,
    }
}

/// Devices `0..count` through `info`, stopping at the first error: the devices before it and
/// the error (or all of them and `Ok`). A failed count is an error with no device.
fn list_devices(count: Result<i32>, info: impl Fn(usize) -> Result<DeviceInfo>) -> (Vec<DeviceInfo>, Result<()>) {
    let count = match count {
        Ok(n) => n,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut devices = Vec::new();
    for ordinal in 0..count.max(0) as usize {
        match info(ordinal) {
            Ok(d) => devices.push(d),
            Err(e) => return (devices, Err(e)),
        }
    }
    (devices, Ok(()))
}

/// The devices to open from a listing: every one when the listing completed with some; the
/// listing's error when it stopped on one (even after some devices), [`Error::NoDevice`] when it
/// completed with none.
fn usable(devices: Vec<DeviceInfo>, outcome: Result<()>) -> Result<Vec<DeviceInfo>> {
    outcome?;
    if devices.is_empty() {
        return Err(Error::NoDevice(NO_DEVICES.into()));
    }
    Ok(devices)
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
    /// See [`crate::abort`]. First, so that it is freed while the context still exists.
    abort: crate::abort::AbortWord,
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

/// How long [`Gpu::synchronize_timeout`] lets unfinished work run on once the GPU's abort word is
/// set, before it reports the cause anyway (waiting threads exit within about a millisecond of
/// the word).
pub const ABORT_REPORT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl Gpu {
    /// Opens device `ordinal` (retains its primary context, creates a non-blocking stream).
    ///
    /// Without a driver this is [`Error::NoDriver`], with a driver that sees no device
    /// [`Error::NoDevice`] ([`Error::is_no_gpu`] tells both from failures); an ordinal the
    /// driver does not have is its `CUDA_ERROR_INVALID_DEVICE`. Each message names the GPU.
    pub fn open(ordinal: usize) -> Result<Arc<Self>> {
        // The driver takes an int: 2^32 would name device 0 under another ordinal (and the
        // checks that compare ordinals would disagree with the device).
        if i32::try_from(ordinal).is_err() {
            return Err(Error::InvalidArgument(format!("GPU ordinal {ordinal} is not a device number")));
        }
        if !driver_present() {
            return Err(Error::NoDriver(format!(
                "opening GPU {ordinal}: libcuda could not be loaded (no NVIDIA driver on this machine)"
            )));
        }
        let ctx =
            CudaContext::new(ordinal).ctx(|| format!("opening GPU {ordinal}")).map_err(|e| open_error(ordinal, e))?;
        // cudarc's event tracking stays as cudarc sets it (on): it only concerns `CudaSlice`s,
        // which this crate does not use, and keeps those a program allocates through
        // `Gpu::context` ordered across streams.
        let stream = ctx.new_stream().ctx(|| format!("creating a stream on GPU {ordinal}"))?;
        let info = device_info(ordinal)?;
        let abort = crate::abort::AbortWord::new(&ctx)?;
        Ok(Arc::new(Self {
            abort,
            ctx,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            params: Mutex::new(HashMap::new()),
        }))
    }

    /// Opens every visible device; fails as [`devices`] does, or where opening one fails.
    pub fn open_all() -> Result<Vec<Arc<Self>>> {
        devices()?.iter().map(|d| Self::open(d.ordinal)).collect()
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
    /// Waits for all work on the default stream; a kernel fault surfaces here, and so does an
    /// abort ([`crate::abort`]): once this GPU's abort word is set, the waiting threads of its
    /// kernels exited early and their results are not to be used, so this returns the cause
    /// ([`Error::PeerLost`] naming the rank, or [`Error::Aborted`]).
    pub fn synchronize(&self) -> Result<()> {
        let r = self.stream.synchronize().ctx(|| format!("synchronizing GPU {}", self.ordinal()));
        match self.abort.cause() {
            Some(c) => Err(crate::abort::abort_error(c)),
            None => r,
        }
    }

    /// Waits for all work on the default stream, but at most `timeout`: a kernel that neither
    /// finishes nor traps (a wait with an unbounded budget, say) becomes an [`Error::Timeout`] here
    /// instead of a hang of the host. The kernel keeps running; the context should not be reused.
    ///
    /// Once this GPU's abort word is set ([`crate::abort`]: a peer was lost, or `abort()` was
    /// called), the kernels' waiting threads exit within about a millisecond. This returns the
    /// named cause ([`Error::PeerLost`], [`Error::Aborted`]) when the work ends, or
    /// [`ABORT_REPORT_WAIT`] after the word was seen set if it has not ended by then (a thread
    /// stuck outside any bounded wait).
    pub fn synchronize_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        self.bind()?;
        let ev = self.ctx.new_event(None).ctx(|| "creating an event".into())?;
        ev.record(&self.stream).ctx(|| "recording an event".into())?;
        let deadline = std::time::Instant::now() + timeout;
        let mut aborted_at: Option<std::time::Instant> = None;
        loop {
            let cause = self.abort.cause();
            match ev.try_is_complete() {
                Ok(true) => return self.synchronize(),
                Ok(false) => {}
                Err(e) => {
                    return Err(match cause {
                        Some(c) => crate::abort::abort_error(c),
                        None => Error::Driver { context: format!("GPU {} work failed", self.ordinal()), source: e },
                    });
                }
            }
            if let Some(c) = cause {
                let since = *aborted_at.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= ABORT_REPORT_WAIT {
                    return Err(crate::abort::abort_error(c));
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

    /// Loads `ptx` into this context once (keyed by the text's address) and returns the module,
    /// with this GPU's abort word's address written into it ([`crate::abort`]) and every kernel it
    /// declares loaded, so that a later [`Gpu::function`] never loads code while another kernel
    /// of this GPU runs. Loading a module may itself wait for the GPU's running kernels: load
    /// every module before launching kernels that wait for one another.
    pub fn module(&self, ptx: &'static str) -> Result<Arc<CudaModule>> {
        check_ptx_text(ptx)?;
        let key = ptx.as_ptr() as usize;
        let mut mods = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = mods.get(&key) {
            return Ok(m.clone());
        }
        let m = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .ctx(|| format!("loading PTX ({} bytes) on GPU {}", ptx.len(), self.ordinal()))?;
        self.abort.install(&m, &self.stream, self.ordinal())?;
        // Load every kernel now. With lazy loading (the driver's default since CUDA 12.2) a
        // kernel is loaded at its first lookup, and that load may wait for the whole context to
        // go idle: a kernel looked up while another kernel of this GPU spins waiting for it
        // would hang until the spinner's budget ran out.
        for name in ptx_entries(ptx) {
            self.remember(&m, key, &name)?;
        }
        mods.insert(key, m.clone());
        Ok(m)
    }

    /// Looks up kernel `name` of `module` (keyed by `key`) and remembers it and its parameters.
    fn remember(&self, module: &Arc<CudaModule>, key: usize, name: &str) -> Result<CudaFunction> {
        if name.contains('\0') {
            return Err(Error::InvalidArgument(format!("kernel name {name:?} contains a NUL")));
        }
        let f = module.load_function(name).ctx(|| format!("looking up kernel `{name}` on GPU {}", self.ordinal()))?;
        let params = Arc::new(KernelParams::query(&f, Some(name)));
        self.params.lock().unwrap_or_else(|e| e.into_inner()).insert(f.cu_function() as usize, params);
        self.functions.lock().unwrap_or_else(|e| e.into_inner()).insert((key, name.to_string()), f.clone());
        Ok(f)
    }

    /// This GPU's abort word: set it to make every bounded wait of this GPU's kernels give up
    /// (the waiting threads exit, the first printing the cause), and [`Gpu::synchronize`] report
    /// the cause (see [`crate::abort`]).
    pub fn abort_word(&self) -> &crate::abort::AbortWord {
        &self.abort
    }

    /// The kernel `name` of the module `ptx` (module loaded once, function looked up once).
    pub fn function(&self, ptx: &'static str, name: &str) -> Result<CudaFunction> {
        let key = (ptx.as_ptr() as usize, name.to_string());
        if let Some(f) = self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(f.clone());
        }
        let module = self.module(ptx)?;
        // Loading the module looked up every kernel it declares; this finds the rest (none, unless
        // the declarations were not recognised) or reports the missing name.
        if let Some(f) = self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(f.clone());
        }
        self.remember(&module, key.0, name)
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
        crate::driver::calls::device_can_access_peer(self.ctx.cu_device(), peer.ctx.cu_device())
            .ctx(|| format!("cuDeviceCanAccessPeer({}, {})", self.ordinal(), peer.ordinal()))
    }

    /// Enables this context's access to `peer`'s memory (idempotent). Two handles of one device
    /// share its context, which reaches its own memory already: nothing to do.
    pub fn enable_peer_access(&self, peer: &Gpu) -> Result<()> {
        if self.ctx.cu_ctx() == peer.ctx.cu_ctx() {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(Error::Unsupported(format!("GPU {} cannot access GPU {}", self.ordinal(), peer.ordinal())));
        }
        self.bind()?;
        // SAFETY: the current context is ours; `peer`'s context is valid (`peer` holds it).
        match unsafe { crate::driver::calls::ctx_enable_peer_access(peer.ctx.cu_ctx()) } {
            Err(cudarc::driver::DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => {
                Ok(())
            }
            r => r.ctx(|| format!("enabling peer access {} -> {}", self.ordinal(), peer.ordinal())),
        }
    }
}

/// PTX text the driver can be given: cudarc passes it as a C string and panics on a NUL byte.
fn check_ptx_text(ptx: &str) -> Result<()> {
    match ptx.find('\0') {
        Some(at) => Err(Error::InvalidArgument(format!(
            "PTX text of {} bytes contains a NUL byte at {at}; a module is text without NULs",
            ptx.len()
        ))),
        None => Ok(()),
    }
}

/// The kernels a PTX module defines (its `.entry` directives outside comments, possibly after
/// `.visible` or `.weak`), by name, in order.
fn ptx_entries(ptx: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%');
    let mut names = Vec::new();
    for line in ptx_without_comments(ptx).lines() {
        // `.entry name(`, `.entry name (` or `.entry\tname(`; `.extern .entry` declares a kernel
        // of another module and is skipped, as is every other first word (`.file`, `.func`, ...).
        let mut words = line.split_whitespace().skip_while(|w| matches!(*w, ".visible" | ".weak"));
        if words.next() != Some(".entry") {
            continue;
        }
        let rest = words.next().unwrap_or("");
        let name = &rest[..rest.find(|c: char| !ident(c)).unwrap_or(rest.len())];
        if !name.is_empty() {
            names.push(name.to_string());
        }
    }
    names
}

/// `ptx` with its `//` and `/* */` comments blanked out (a block comment becomes a space, its
/// line breaks kept); quoted strings (`.file 1 "a/*.rs"`) are kept as they are.
fn ptx_without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut chars = ptx.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('"', _) => {
                out.push(c);
                for s in chars.by_ref() {
                    out.push(s);
                    if s == '"' || s == '\n' {
                        break;
                    }
                }
            }
            ('/', Some('/')) => {
                for s in chars.by_ref() {
                    if s == '\n' {
                        out.push(s);
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                out.push(' ');
                let mut star = false;
                for s in chars.by_ref() {
                    if star && s == '/' {
                        break;
                    }
                    star = s == '*';
                    if s == '\n' {
                        out.push(s);
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_beyond_the_drivers_int_are_refused() {
        for ordinal in [1usize << 31, 1 << 32, (1 << 32) + 1, usize::MAX] {
            let e = Gpu::open(ordinal).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{ordinal}: {e}");
        }
    }

    #[test]
    fn ptx_with_a_nul_is_refused_before_the_driver_sees_it() {
        assert!(check_ptx_text(".version 8.0\n.target sm_90\n").is_ok());
        let e = check_ptx_text(".version 8.0\0.target sm_90").unwrap_err().to_string();
        assert!(e.contains("NUL byte at 12"), "{e}");
    }

    #[test]
    fn ptx_entries_finds_every_kernel_declaration() {
        let ptx = "//\n// .entry not_this_one(\n.version 8.0\n.target sm_90\n\
                   .visible .entry first(\n\t.param .u64 first_param_0\n)\n{\n\tret;\n}\n\
                   .entry second (\n)\n{ ret; }\n.weak .entry $third_1(.param .u32 a)\n\
                   .visible .func helper(\n)\n.global .u64 abort_word;\n";
        assert_eq!(ptx_entries(ptx), ["first", "second", "$third_1"]);
        assert!(ptx_entries(".version 8.0\n.func f()\n").is_empty());
        // Block comments (one line or several), a declaration of another module's kernel, and a
        // comment opener inside a quoted file name.
        let ptx = ".version 8.0\n/* .entry in_a_comment( */ .entry after_it(\n)\n{ ret; }\n\
                   /*\n.visible .entry spanning(\n*/\n.extern .entry elsewhere(.param .u32 a);\n\
                   .file 1 \"src/*.rs\"\n.entry last(){ ret; } // .entry trailing(\n";
        assert_eq!(ptx_entries(ptx), ["after_it", "last"]);
    }

    fn dev(ordinal: usize) -> DeviceInfo {
        DeviceInfo {
            ordinal,
            name: format!("GPU {ordinal}"),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_optin: 232_448,
            total_mem: 1 << 30,
        }
    }

    // A failing driver call. (A real one is an `Error::Driver`, whose text comes from the driver
    // library, which this machine may lack; any error but `NoDriver` is a failure here.)
    fn failing(call: &str) -> Error {
        Error::Unsupported(format!("{call} failed"))
    }

    #[test]
    fn a_failed_init_is_a_failure_not_an_absence() {
        let listing = || list_devices(Err(failing("cuInit")), |i| Ok(dev(i)));
        let (devices, outcome) = listing();
        assert!(devices.is_empty());
        assert!(matches!(usable(devices, outcome), Err(Error::Unsupported(_))));
        let (devices, outcome) = listing();
        let inv = summarize(devices, outcome);
        assert_eq!(inv.discovery, Discovery::Failed);
        assert!(inv.reason.as_deref().is_some_and(|r| r.contains("cuInit")), "{inv:?}");
    }

    #[test]
    fn a_device_that_fails_mid_list_fails_the_listing() {
        // Device 1 of 3 does not answer: device 0 is listed, and the error is kept.
        let listing =
            || list_devices(Ok(3), |i| if i == 1 { Err(failing("cuDeviceGetAttribute")) } else { Ok(dev(i)) });
        let (devices, outcome) = listing();
        assert_eq!(devices.iter().map(|d| d.ordinal).collect::<Vec<_>>(), [0]);
        // Opening "all" GPUs refuses the partial list instead of opening one of three.
        assert!(matches!(usable(devices, outcome), Err(Error::Unsupported(_))));
        let (devices, outcome) = listing();
        let inv = summarize(devices, outcome);
        assert_eq!((inv.discovery, inv.devices.len()), (Discovery::Failed, 1));
    }

    #[test]
    fn absences_are_named_as_such() {
        let (devices, outcome) = list_devices(Ok(0), |i| Ok(dev(i)));
        assert!(matches!(usable(devices, outcome), Err(Error::NoDevice(_))));
        let inv = summarize(Vec::new(), Ok(()));
        assert_eq!((inv.discovery, inv.reason.as_deref()), (Discovery::Complete, Some(NO_DEVICES)));
        let inv = summarize(Vec::new(), Err(Error::NoDriver("no libcuda".into())));
        assert_eq!((inv.discovery, inv.reason.as_deref()), (Discovery::NoDriver, Some("no libcuda")));
        assert!(matches!(usable(Vec::new(), Err(Error::NoDriver("no libcuda".into()))), Err(Error::NoDriver(_))));
    }

    #[test]
    fn a_driver_without_devices_is_an_absence() {
        use cudarc::driver::{DriverError, sys::cudaError_enum as E};
        let driver = |code| Err(Error::Driver { context: "cuInit".into(), source: DriverError(code) });
        let (devices, outcome) = list_devices(no_device_is_zero(driver(E::CUDA_ERROR_NO_DEVICE)), |i| Ok(dev(i)));
        let inv = summarize(devices.clone(), outcome);
        assert_eq!((inv.discovery, inv.reason.as_deref()), (Discovery::Complete, Some(NO_DEVICES)));
        assert!(matches!(usable(devices, Ok(())), Err(Error::NoDevice(_))));
        // Any other cuInit error stays a failure (not displayed: a driver error's message comes
        // from the driver library, absent here).
        assert!(matches!(no_device_is_zero(driver(E::CUDA_ERROR_UNKNOWN)), Err(Error::Driver { .. })));
        // Opening: the same split, with the GPU named.
        let Err(Error::Driver { source, .. }) = driver(E::CUDA_ERROR_NO_DEVICE) else { unreachable!() };
        let e = open_error(3, Error::Driver { context: "opening GPU 3".into(), source });
        assert!(e.is_no_gpu() && e.to_string().contains("opening GPU 3"), "{e}");
        let Err(Error::Driver { source, .. }) = driver(E::CUDA_ERROR_INVALID_DEVICE) else { unreachable!() };
        let e = open_error(3, Error::Driver { context: "opening GPU 3".into(), source });
        assert!(matches!(&e, Error::Driver { context, .. } if context == "opening GPU 3"));
    }

    #[test]
    fn opening_without_a_driver_names_the_gpu() {
        if driver_present() {
            return; // (the message of a machine without a driver)
        }
        let e = Gpu::open(3).unwrap_err();
        assert!(e.is_no_gpu(), "{e}");
        assert!(e.to_string().contains("opening GPU 3") && e.to_string().contains("no NVIDIA driver"), "{e}");
    }

    #[test]
    fn a_complete_listing_opens_every_device() {
        let (devices, outcome) = list_devices(Ok(2), |i| Ok(dev(i)));
        let inv = summarize(devices.clone(), Ok(()));
        assert_eq!((inv.discovery, inv.reason), (Discovery::Complete, None));
        let all = usable(devices, outcome).unwrap();
        assert_eq!(all.iter().map(|d| d.ordinal).collect::<Vec<_>>(), [0, 1]);
    }
}
