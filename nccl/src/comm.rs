//! Communicators: creation (`ncclCommInitRank*`, `ncclCommInitAll`, `ncclCommSplit`), the
//! served-or-forwarded decision, the user-defined reductions, and teardown.
//!
//! A communicator whose ranks all run on one machine is **served** ([`crate::engine::Served`]);
//! one that spans machines is **forwarded**: every rank opens the real NCCL, rank 0 makes a
//! real unique id, and every rank builds the real communicator with it. The decision comes from
//! the topology every rank exchanged, so it is the same on every rank.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mscclpp_host::bootstrap::{BootstrapConfig, RankInfo, RankSource, Token};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Bootstrap, BootstrapExt, Gpu, TcpBootstrap};
use mscclpp_nccl_device::{ReduceOp, ScalarKind};

use crate::abi::{Config, DataType, NUM_OPS, ncclConfig_t, ncclResult_t};
use crate::engine::{Reduction, Served};
use crate::error::{Error, Result};
use crate::forward;
use crate::id::UniqueId;

/// A communicator behind an `ncclComm_t`.
pub struct Comm {
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub nranks: usize,
    /// The CUDA device (ordinal in this process).
    pub device: i32,
    /// What it asked for.
    pub config: Config,
    /// Served or forwarded.
    pub kind: Kind,
    /// The last error's text (`ncclGetLastError`).
    pub last_error: Mutex<String>,
    /// Set by `ncclCommAbort`.
    pub aborted: AtomicBool,
    /// User-defined reductions (`ncclRedOpCreatePreMulSum`), by number from `ncclNumOps`.
    redops: Mutex<HashMap<c_int, (DataType, Reduction)>>,
    next_redop: AtomicU64,
}

/// How a communicator runs its calls.
pub enum Kind {
    /// On this library's kernels.
    Served(Box<Served>),
    /// On the real NCCL: its `ncclComm_t`.
    Forwarded(RealComm),
}

/// A real NCCL communicator.
#[derive(Clone, Copy, Debug)]
pub struct RealComm(pub *mut c_void);
// SAFETY: NCCL communicators may be used from any thread (NCCL's own rules apply to the caller).
unsafe impl Send for RealComm {}
// SAFETY: as above.
unsafe impl Sync for RealComm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Served(_) => "served",
            Kind::Forwarded(_) => "forwarded",
        };
        write!(f, "Comm(rank {} of {}, device {}, {kind})", self.rank, self.nranks, self.device)
    }
}

/// The CUDA device current on this thread (NCCL's rule for which GPU a communicator uses), or 0
/// when no context is current.
pub fn current_device() -> Result<i32> {
    if !mscclpp_host::gpu::driver_present() {
        return Err(Error {
            code: ncclResult_t::ncclUnhandledCudaError,
            message: "no NVIDIA driver on this machine (libcuda could not be loaded)".into(),
        });
    }
    let mut dev = 0;
    // SAFETY: an out-parameter; fails harmlessly when no context is current.
    let r = unsafe { cudarc::driver::sys::cuCtxGetDevice(&mut dev) };
    Ok(if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS { dev } else { 0 })
}

fn bootstrap_timeout() -> Duration {
    let s = std::env::var("MSCCLPP_RS_BOOTSTRAP_TIMEOUT").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(120);
    Duration::from_secs(s.max(1))
}

impl Comm {
    /// `ncclCommInitRankConfig`: rank `rank` of `nranks`, meeting the others through `id`, on
    /// `device` (the thread's current device when `None`).
    pub fn init(nranks: c_int, id: &[u8; 128], rank: c_int, device: Option<i32>, config: Config) -> Result<Arc<Comm>> {
        let max = mscclpp_host::bootstrap::env::MAX_WORLD_SIZE;
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| (1..=max).contains(&n))
            .ok_or_else(|| Error::invalid_argument(format!("nranks {nranks}: a communicator has 1 to {max} ranks")))?;
        let me = usize::try_from(rank)
            .ok()
            .filter(|&r| r < n)
            .ok_or_else(|| Error::invalid_argument(format!("rank {rank} is not in 0..{n}")))?;
        let id = UniqueId::decode(id)?;
        let device = match device {
            Some(d) => d,
            None => current_device()?,
        };
        // The GPU first: a machine without one fails here, before waiting for anyone.
        let gpu = Gpu::open(usize::try_from(device).unwrap_or(usize::MAX)).map_err(Error::from)?;
        let info = RankInfo { rank: me, world_size: n, local_rank: me, local_size: n, source: RankSource::Launcher };
        let cfg = BootstrapConfig::new(info, id.addr_string(), Token(id.token)).with_timeout(bootstrap_timeout());
        let boot: Arc<dyn Bootstrap> =
            Arc::new(TcpBootstrap::connect(&cfg).map_err(|e| Error::from(e).context("bootstrap"))?);
        Self::build(boot, gpu, device, config)
    }

    /// Builds the communicator over a connected bootstrap (a collective step of every rank).
    fn build(boot: Arc<dyn Bootstrap>, gpu: Arc<Gpu>, device: i32, config: Config) -> Result<Arc<Comm>> {
        let (me, n) = (boot.rank(), boot.world_size());
        let comm = Communicator::try_new(boot.clone(), gpu.clone())?;
        let topo = comm.topology()?;
        let kind = if topo.single_machine() {
            Kind::Served(Box::new(Served::new(&comm, config.max_ctas)?))
        } else {
            Kind::Forwarded(Self::forwarded(&*boot, device, &config)?)
        };
        Ok(Arc::new(Comm {
            rank: me,
            nranks: n,
            device,
            config,
            kind,
            last_error: Mutex::new(String::new()),
            aborted: AtomicBool::new(false),
            redops: Mutex::new(HashMap::new()),
            next_redop: AtomicU64::new(NUM_OPS as u64),
        }))
    }

    /// The real communicator of a job spanning machines (every rank, together).
    fn forwarded(boot: &dyn Bootstrap, device: i32, config: &Config) -> Result<RealComm> {
        let real = forward::real();
        let ok = boot.all_gather_pod(&u8::from(real.is_ok()))?;
        let missing: Vec<usize> = (0..ok.len()).filter(|&r| ok[r] == 0).collect();
        if !missing.is_empty() {
            return Err(Error::invalid_usage(format!(
                "the ranks span machines, so this communicator is forwarded to NCCL, and rank(s) {missing:?} found no real NCCL library (set MSCCLPP_RS_NCCL)"
            )));
        }
        let real = real?;
        type GetId = unsafe extern "C" fn(*mut [u8; 128]) -> c_int;
        type Init = unsafe extern "C" fn(*mut *mut c_void, c_int, [u8; 128], c_int, *mut ncclConfig_t) -> c_int;
        let mut id = [0u8; 128];
        if boot.rank() == 0 {
            // SAFETY: the signature of ncclGetUniqueId in nccl.h.
            let get_id: GetId = unsafe { real.get(b"ncclGetUniqueId\0")? };
            // SAFETY: `id` is 128 writable bytes.
            check_real(unsafe { get_id(&mut id) }, "ncclGetUniqueId")?;
        }
        let ids = boot.all_gather(&id)?;
        id.copy_from_slice(ids.first().filter(|b| b.len() == 128).ok_or_else(|| Error::internal("no id from rank 0"))?);
        // SAFETY: the signature of ncclCommInitRankConfig in nccl.h.
        let init: Init = unsafe { real.get(b"ncclCommInitRankConfig\0")? };
        let mut c = ncclConfig_t { blocking: i32::from(config.blocking), ..ncclConfig_t::default() };
        let mut out = std::ptr::null_mut();
        // NCCL's device rule: the real communicator uses the calling thread's current device,
        // which is `device` (this rank's GPU was opened on it).
        let _ = device;
        let (n, me) = (boot.world_size() as c_int, boot.rank() as c_int);
        // SAFETY: the arguments as nccl.h defines them.
        let code = unsafe { init(&mut out, n, id, me, &mut c) };
        check_real(code, "ncclCommInitRankConfig")?;
        Ok(RealComm(out))
    }

    /// `ncclCommSplit`: ranks of the same `color` form a new communicator, ordered by `key`
    /// (then by rank); `NCCL_SPLIT_NOCOLOR` takes part and gets none. A collective call.
    pub fn split(&self, color: c_int, key: c_int, config: Config) -> Result<Option<Arc<Comm>>> {
        let Kind::Served(s) = &self.kind else {
            return Err(Error::internal("split of a forwarded communicator goes to the real NCCL"));
        };
        let boot = s.communicator().bootstrap().clone();
        let mine = [color as i64, key as i64];
        let all = boot.all_gather_pod(&mine)?;
        // Every rank offers an id; each colour's first member's is used.
        let offer = UniqueId::generate()?.encode();
        let offers = boot.all_gather(&offer)?;
        if color == crate::abi::SPLIT_NOCOLOR {
            return Ok(None);
        }
        if color < 0 {
            return Err(Error::invalid_argument(format!("split colour {color} (non-negative or NCCL_SPLIT_NOCOLOR)")));
        }
        let mut members: Vec<usize> = (0..all.len()).filter(|&r| all[r][0] == color as i64).collect();
        members.sort_by_key(|&r| (all[r][1], r));
        let new_rank = members.iter().position(|&r| r == self.rank).unwrap_or(0);
        let leader = members[0];
        let id: [u8; 128] = offers[leader].as_slice().try_into().map_err(|_| Error::internal("short id"))?;
        Comm::init(members.len() as c_int, &id, new_rank as c_int, Some(self.device), config).map(Some)
    }

    /// A communicator around a real one made by the real NCCL (a split of a forwarded one).
    pub fn wrap_forwarded(parent: &Comm, rc: RealComm, config: Config) -> Result<Comm> {
        let real = forward::real()?;
        type Q = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
        // SAFETY: ncclCommUserRank and ncclCommCount share this signature.
        let (user_rank, count): (Q, Q) = unsafe { (real.get(b"ncclCommUserRank\0")?, real.get(b"ncclCommCount\0")?) };
        let (mut r, mut n) = (0, 0);
        // SAFETY: the real communicator and two ints.
        check_real(unsafe { user_rank(rc.0, &mut r) }, "ncclCommUserRank")?;
        // SAFETY: as above.
        check_real(unsafe { count(rc.0, &mut n) }, "ncclCommCount")?;
        Ok(Comm {
            rank: r as usize,
            nranks: n as usize,
            device: parent.device,
            config,
            kind: Kind::Forwarded(rc),
            last_error: Mutex::new(String::new()),
            aborted: AtomicBool::new(false),
            redops: Mutex::new(HashMap::new()),
            next_redop: AtomicU64::new(NUM_OPS as u64),
        })
    }

    /// A user-defined reduction's number.
    pub fn create_redop(&self, dtype: DataType, red: Reduction) -> Result<c_int> {
        let v = self.next_redop.fetch_add(1, Ordering::Relaxed);
        let id = c_int::try_from(v).ok().ok_or_else(|| Error::invalid_usage("too many user-defined reductions"))?;
        lock(&self.redops).insert(id, (dtype, red));
        Ok(id)
    }

    /// Forgets a user-defined reduction.
    pub fn destroy_redop(&self, op: c_int) -> Result<()> {
        lock(&self.redops)
            .remove(&op)
            .map(|_| ())
            .ok_or_else(|| Error::invalid_argument(format!("reduction {op} was not created on this communicator")))
    }

    /// The reduction of `op` on elements of `dtype`.
    pub fn reduction(&self, op: c_int, dtype: DataType) -> Result<Reduction> {
        if (0..NUM_OPS).contains(&op) {
            return Ok(Reduction::plain(ReduceOp::from_u32(op as u32).unwrap_or(ReduceOp::Sum)));
        }
        match lock(&self.redops).get(&op) {
            Some(&(t, red)) if t == dtype => Ok(red),
            Some(&(t, _)) => Err(Error::invalid_argument(format!(
                "reduction {op} was created for {} but the call is on {}",
                t.name(),
                dtype.name()
            ))),
            None => Err(Error::invalid_argument(format!("unknown reduction {op}"))),
        }
    }

    /// Records `e` as this communicator's last error and returns its code.
    pub fn fail(&self, e: &Error) -> ncclResult_t {
        *lock(&self.last_error) = e.message.clone();
        e.code
    }

    /// The served state, or an error for a forwarded communicator.
    pub fn served(&self) -> Option<&Served> {
        match &self.kind {
            Kind::Served(s) => Some(s),
            Kind::Forwarded(_) => None,
        }
    }
}

/// A pre-multiplying sum's scalar read from the host now (`ncclScalarHostImmediate`), as the
/// kernels take it: a float's value as f64 bits, an integer's as i64 or u64 bits.
///
/// # Safety
/// `p` points to one readable element of `dtype`.
pub unsafe fn host_scalar(p: *const c_void, dtype: DataType) -> u64 {
    use mscclpp_nccl_device::Narrow;
    // SAFETY: the caller's contract.
    unsafe {
        match dtype {
            DataType::I8 => *(p as *const i8) as i64 as u64,
            DataType::U8 => *(p as *const u8) as u64,
            DataType::I32 => *(p as *const i32) as i64 as u64,
            DataType::U32 => *(p as *const u32) as u64,
            DataType::I64 => *(p as *const i64) as u64,
            DataType::U64 => *(p as *const u64),
            DataType::F16 => (mscclpp_nccl_device::F16(*(p as *const u16)).widen() as f64).to_bits(),
            DataType::Bf16 => (mscclpp_nccl_device::Bf16(*(p as *const u16)).widen() as f64).to_bits(),
            DataType::F8E4M3 => (mscclpp_nccl_device::F8E4M3(*(p as *const u8)).widen() as f64).to_bits(),
            DataType::F8E5M2 => (mscclpp_nccl_device::F8E5M2(*(p as *const u8)).widen() as f64).to_bits(),
            DataType::F32 => (*(p as *const f32) as f64).to_bits(),
            DataType::F64 => (*(p as *const f64)).to_bits(),
        }
    }
}

/// A pre-multiplying sum of `scalar` (see [`host_scalar`] for the immediate form).
pub fn premulsum(kind: ScalarKind, scalar: u64) -> Reduction {
    Reduction { op: ReduceOp::PreMulSum, scalar_kind: kind, scalar }
}

fn check_real(code: c_int, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let code = ncclResult_t::ALL.get(code as usize).copied().unwrap_or(ncclResult_t::ncclInternalError);
    Err(Error { code, message: format!("the real NCCL's {what} failed") })
}

/// Locks, ignoring poisoning (a panic elsewhere leaves the data usable).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
