//! The exported C functions: every function of NCCL 2.28's `nccl.h` (and the host functions of
//! its device API), each also under its `pnccl` profiling name. [`crate::table::TABLE`] says
//! which are served, forwarded or refused.
//!
//! Every function checks its arguments before touching anything (a null or destroyed
//! communicator, a bad type, reduction, rank or count is an error code with a message for
//! `ncclGetLastError`), never unwinds into C (a panic becomes `ncclInternalError`), and restores
//! the calling thread's current CUDA context.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::driver::sys::{self, CUstream};
use mscclpp_nccl_device::ScalarKind;

use crate::abi::*;
use crate::comm::{Comm, Kind, RealComm, host_scalar, lock, premulsum};
use crate::engine::{P2p, Reduction};
use crate::error::{Error, Result};
use crate::{forward, group};

type CommHandle = *mut c_void;

/// Live communicators by handle: a handle not in here (null, garbage, destroyed) is refused.
static COMMS: LazyLock<Mutex<HashMap<usize, Arc<Comm>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
/// Communicators given up by `ncclCommAbort`: kept, never freed, since their kernels may still
/// reference their memory.
static ABANDONED: LazyLock<Mutex<Vec<Arc<Comm>>>> = LazyLock::new(|| Mutex::new(Vec::new()));
/// The last error of a call that had no communicator (or of any call), for `ncclGetLastError`.
static LAST_ERROR: LazyLock<Mutex<std::ffi::CString>> = LazyLock::new(|| Mutex::new(std::ffi::CString::default()));
/// Per-communicator copies of the last error text, kept alive for the returned pointer.
static LAST_TEXT: LazyLock<Mutex<HashMap<usize, std::ffi::CString>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Calls run on this library's kernels.
pub static SERVED: AtomicU64 = AtomicU64::new(0);
/// Calls handed to the real NCCL.
pub static FORWARDED: AtomicU64 = AtomicU64::new(0);

fn register(c: Arc<Comm>) -> CommHandle {
    let h = Arc::as_ptr(&c) as *mut c_void;
    lock(&COMMS).insert(h as usize, c);
    h
}

fn lookup(h: CommHandle) -> Result<Arc<Comm>> {
    if h.is_null() {
        return Err(Error::invalid_argument("the communicator is NULL"));
    }
    lock(&COMMS).get(&(h as usize)).cloned().ok_or_else(|| {
        Error::invalid_argument(format!("{h:p} is not a live communicator (destroyed, or never created)"))
    })
}

fn set_last(e: &Error) {
    let text = std::ffi::CString::new(e.message.replace('\0', " ")).unwrap_or_default();
    *lock(&LAST_ERROR) = text;
}

/// Runs `f`, turning an error into its code (recorded for `ncclGetLastError`, and for the
/// group's end inside a group) and a panic into `ncclInternalError`.
fn guard(comm: Option<&Arc<Comm>>, f: impl FnOnce() -> Result<()>) -> ncclResult_t {
    let _ctx = CtxGuard::new();
    let r = std::panic::catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::internal(format!("panic: {}", panic_text(&p)))));
    match r {
        Ok(()) => ncclSuccess,
        Err(e) => {
            set_last(&e);
            if group::active() {
                group::note_error(&e);
            }
            match comm {
                Some(c) => c.fail(&e),
                None => e.code,
            }
        }
    }
}

/// `guard` for calls on a communicator handle.
fn with_comm(h: CommHandle, f: impl FnOnce(&Arc<Comm>) -> Result<()>) -> ncclResult_t {
    match lookup(h) {
        Ok(c) => guard(Some(&c), || f(&c)),
        Err(e) => guard(None, || Err(e)),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}

/// Restores the thread's current CUDA context when dropped.
struct CtxGuard(Option<sys::CUcontext>);

impl CtxGuard {
    fn new() -> Self {
        if !mscclpp_host::gpu::driver_present() {
            return Self(None);
        }
        let mut c = std::ptr::null_mut();
        // SAFETY: an out-parameter.
        let ok = unsafe { sys::cuCtxGetCurrent(&mut c) } == sys::CUresult::CUDA_SUCCESS;
        Self(ok.then_some(c))
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            // SAFETY: restores the context that was current (or none) on this thread.
            unsafe { sys::cuCtxSetCurrent(c) };
        }
    }
}

fn out<T>(p: *mut T, what: &str) -> Result<()> {
    if p.is_null() { Err(Error::invalid_argument(format!("{what} is NULL"))) } else { Ok(()) }
}

fn dtype(v: c_int) -> Result<DataType> {
    DataType::from_raw(v).ok_or_else(|| Error::invalid_argument(format!("unknown data type {v} (0..{NUM_TYPES})")))
}

fn bytes_of(count: usize, t: DataType, times: usize) -> Result<u64> {
    (count as u64)
        .checked_mul(t.size() as u64)
        .and_then(|b| b.checked_mul(times as u64))
        .filter(|&b| b < 1 << 56)
        .ok_or_else(|| Error::invalid_argument(format!("{count} elements of {} overflow", t.name())))
}

/// A buffer the GPU will read or write: not null when it holds bytes, and memory CUDA knows
/// (device, managed or registered host memory), so a kernel never faults on it.
fn buffer(p: *const c_void, bytes: u64, what: &str) -> Result<u64> {
    if bytes == 0 {
        return Ok(p as u64);
    }
    if p.is_null() {
        return Err(Error::invalid_argument(format!("{what} is NULL with {bytes} bytes to move")));
    }
    let mut ty = 0u32;
    // SAFETY: an out-parameter of the attribute's size (an unsigned int).
    let r = unsafe {
        sys::cuPointerGetAttribute(
            &mut ty as *mut u32 as *mut c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            p as sys::CUdeviceptr,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::invalid_argument(format!(
            "{what} {p:p} is not memory the GPU can reach (pageable host memory?): {r:?}"
        )));
    }
    Ok(p as u64)
}

fn root(r: c_int, c: &Comm) -> Result<usize> {
    usize::try_from(r).ok().filter(|&r| r < c.nranks).ok_or_else(|| {
        Error::invalid_argument(format!("root {r} is not a rank of this communicator (0..{})", c.nranks))
    })
}

/// The real NCCL's `name`, as `F`, counting the call as forwarded.
///
/// # Safety
/// `F` is `name`'s signature in `nccl.h`.
unsafe fn real<F: Copy>(name: &[u8]) -> Result<F> {
    FORWARDED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller's contract.
    unsafe { forward::real()?.get::<F>(name) }
}

fn real_result(code: c_int) -> Result<()> {
    match code {
        0 => Ok(()),
        7 => Err(Error { code: ncclInProgress, message: "in progress".into() }),
        c => Err(Error {
            code: ncclResult_t::ALL.get(c as usize).copied().unwrap_or(ncclInternalError),
            message: format!("the real NCCL returned {c}"),
        }),
    }
}

macro_rules! export {
    ($(#[$m:meta])* fn $name:ident / $pname:ident ( $($a:ident : $t:ty),* $(,)? ) -> $ret:ty $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C contract of the function of this name in `nccl.h`: every pointer is null or
        /// valid for what the function reads or writes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret $body

        /// The profiling name of the function without the `p`.
        ///
        /// # Safety
        /// As for the function without the `p`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> $ret {
            // SAFETY: forwarded.
            unsafe { $name($($a),*) }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Version, ids, errors

export! {
    /// Reports the NCCL version whose ABI this library implements.
    fn ncclGetVersion / pncclGetVersion(version: *mut c_int) -> ncclResult_t {
        guard(None, || {
            out(version, "version")?;
            // SAFETY: checked non-null; the caller's int.
            unsafe { *version = NCCL_VERSION_CODE };
            Ok(())
        })
    }
}

/// This library's own version, `"mscclpp-rs <version>"` (its presence also tells a search for
/// the real NCCL that this library is not it).
#[unsafe(no_mangle)]
pub extern "C" fn mscclppNcclVersion() -> *const c_char {
    concat!("mscclpp-rs ", env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// How many calls were served by this library's kernels and how many forwarded to the real
/// NCCL, since the library was loaded (for tests and reports).
///
/// # Safety
/// Each pointer is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mscclppNcclStats(served: *mut u64, forwarded: *mut u64) {
    // SAFETY: the caller's contract.
    unsafe {
        if !served.is_null() {
            *served = SERVED.load(Ordering::Relaxed);
        }
        if !forwarded.is_null() {
            *forwarded = FORWARDED.load(Ordering::Relaxed);
        }
    }
}

export! {
    /// Makes an id for `ncclCommInitRank` (see [`crate::id`]).
    fn ncclGetUniqueId / pncclGetUniqueId(id: *mut ncclUniqueId) -> ncclResult_t {
        guard(None, || {
            out(id, "uniqueId")?;
            let bytes = crate::id::UniqueId::generate()?.encode();
            // SAFETY: checked non-null; 128 writable bytes.
            unsafe { (*id).internal = bytes.map(|b| b as c_char) };
            Ok(())
        })
    }
}

export! {
    /// The text of a result code.
    fn ncclGetErrorString / pncclGetErrorString(result: c_int) -> *const c_char {
        let r = usize::try_from(result).ok().and_then(|i| ncclResult_t::ALL.get(i));
        r.map_or("unknown result code\0", |r| r.text()).as_ptr() as *const c_char
    }
}

export! {
    /// The last error's message: `comm`'s, or the latest of any call when `comm` is NULL or
    /// unknown. Valid until the next failing call.
    fn ncclGetLastError / pncclGetLastError(comm: CommHandle) -> *const c_char {
        if let Ok(c) = lookup(comm) {
            let text = std::ffi::CString::new(lock(&c.last_error).replace('\0', " ")).unwrap_or_default();
            let mut all = lock(&LAST_TEXT);
            let p = all.entry(comm as usize).or_default();
            *p = text;
            return p.as_ptr();
        }
        lock(&LAST_ERROR).as_ptr()
    }
}

export! {
    /// Deprecated in NCCL; does nothing.
    fn ncclResetDebugInit / pncclResetDebugInit() -> () {}
}

// ---------------------------------------------------------------------------------------------
// Communicators

unsafe fn read_id(id: &ncclUniqueId) -> [u8; UNIQUE_ID_BYTES] {
    id.internal.map(|c| c as u8)
}

fn init_into(out_comm: *mut CommHandle, make: impl FnOnce() -> Result<Arc<Comm>>) -> ncclResult_t {
    guard(None, || {
        out(out_comm, "comm")?;
        // NCCL leaves NULL behind on failure.
        // SAFETY: checked non-null.
        unsafe { *out_comm = std::ptr::null_mut() };
        let c = make()?;
        // SAFETY: as above.
        unsafe { *out_comm = register(c) };
        Ok(())
    })
}

export! {
    /// Creates rank `rank` of `nranks` (a collective call of every rank with the same id).
    fn ncclCommInitRankConfig / pncclCommInitRankConfig(comm: *mut CommHandle, nranks: c_int, id: ncclUniqueId, rank: c_int, config: *mut ncclConfig_t) -> ncclResult_t {
        init_into(comm, || {
            // SAFETY: the caller's config is null or valid.
            let cfg = unsafe { Config::read(config) }.map_err(Error::invalid_argument)?;
            // SAFETY: a by-value id.
            Comm::init(nranks, &unsafe { read_id(&id) }, rank, None, cfg)
        })
    }
}

export! {
    /// `ncclCommInitRankConfig` with the default configuration.
    fn ncclCommInitRank / pncclCommInitRank(comm: *mut CommHandle, nranks: c_int, id: ncclUniqueId, rank: c_int) -> ncclResult_t {
        // SAFETY: forwarded; a null config is the default.
        unsafe { ncclCommInitRankConfig(comm, nranks, id, rank, std::ptr::null_mut()) }
    }
}

export! {
    /// `ncclCommInitRankConfig` from several ids (NCCL spreads its bootstrap over them); this
    /// library uses the first.
    fn ncclCommInitRankScalable / pncclCommInitRankScalable(comm: *mut CommHandle, nranks: c_int, rank: c_int, n_id: c_int, ids: *mut ncclUniqueId, config: *mut ncclConfig_t) -> ncclResult_t {
        if n_id < 1 || ids.is_null() {
            return guard(None, || Err(Error::invalid_argument(format!("{n_id} ids at {ids:p}"))));
        }
        // SAFETY: at least one id (checked).
        unsafe { ncclCommInitRankConfig(comm, nranks, *ids, rank, config) }
    }
}

export! {
    /// One communicator per device of `devlist` (or devices 0..ndev), all in this process.
    fn ncclCommInitAll / pncclCommInitAll(comms: *mut CommHandle, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
        guard(None, || {
            out(comms, "comms")?;
            let n = usize::try_from(ndev).ok().filter(|&n| n >= 1).ok_or_else(|| Error::invalid_argument(format!("ndev {ndev}")))?;
            // SAFETY: devlist, when given, holds ndev ints (the caller's contract).
            let devs: Vec<i32> = (0..n).map(|i| if devlist.is_null() { i as i32 } else { unsafe { *devlist.add(i) } }).collect();
            let id = crate::id::UniqueId { addr: ([127, 0, 0, 1], free_port()?).into(), token: rand::random() }.encode();
            let made: Vec<Result<Arc<Comm>>> = std::thread::scope(|s| {
                let hs: Vec<_> = devs
                    .iter()
                    .enumerate()
                    .map(|(r, &d)| s.spawn(move || Comm::init(ndev, &id, r as c_int, Some(d), Config::default())))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::internal("init thread panicked")))).collect()
            });
            if let Some(e) = made.iter().find_map(|m| m.as_ref().err()) {
                return Err(e.clone());
            }
            for (i, m) in made.into_iter().enumerate() {
                // SAFETY: comms holds ndev slots (the caller's contract).
                unsafe { *comms.add(i) = register(m?) };
            }
            Ok(())
        })
    }
}

fn free_port() -> Result<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error { code: ncclSystemError, message: format!("finding a free loopback port: {e}") })
}

export! {
    /// Splits `comm` by colour (a collective call of every rank of `comm`).
    fn ncclCommSplit / pncclCommSplit(comm: CommHandle, color: c_int, key: c_int, newcomm: *mut CommHandle, config: *mut ncclConfig_t) -> ncclResult_t {
        with_comm(comm, |c| {
            out(newcomm, "newcomm")?;
            // SAFETY: checked non-null.
            unsafe { *newcomm = std::ptr::null_mut() };
            // SAFETY: the caller's config is null or valid.
            let cfg = unsafe { Config::read(config) }.map_err(Error::invalid_argument)?;
            if let Kind::Forwarded(rc) = c.kind {
                type F = unsafe extern "C" fn(CommHandle, c_int, c_int, *mut CommHandle, *mut ncclConfig_t) -> c_int;
                // SAFETY: ncclCommSplit's signature.
                let f: F = unsafe { real(b"ncclCommSplit\0")? };
                let mut child = std::ptr::null_mut();
                // SAFETY: the real communicator and the caller's arguments.
                real_result(unsafe { f(rc.0, color, key, &mut child, config) })?;
                if !child.is_null() {
                    let made = Arc::new(Comm::wrap_forwarded(c, RealComm(child), cfg)?);
                    // SAFETY: checked non-null.
                    unsafe { *newcomm = register(made) };
                }
                return Ok(());
            }
            SERVED.fetch_add(1, Ordering::Relaxed);
            if let Some(child) = c.split(color, key, cfg)? {
                // SAFETY: checked non-null.
                unsafe { *newcomm = register(child) };
            }
            Ok(())
        })
    }
}

macro_rules! forwarded_only {
    ($(#[$m:meta])* fn $name:ident / $pname:ident ( $c:ident : CommHandle $(, $a:ident : $t:ty)* ) ; $why:expr) => {
        export! {
            $(#[$m])*
            fn $name / $pname($c: CommHandle $(, $a: $t)*) -> ncclResult_t {
                with_comm($c, |c| match c.kind {
                    Kind::Forwarded(rc) => {
                        type F = unsafe extern "C" fn(CommHandle $(, $t)*) -> c_int;
                        // SAFETY: the function's signature in nccl.h.
                        let f: F = unsafe { real(concat!(stringify!($name), "\0").as_bytes())? };
                        // SAFETY: the real communicator and the caller's arguments.
                        real_result(unsafe { f(rc.0 $(, $a)*) })
                    }
                    Kind::Served(_) => Err(Error::invalid_usage(format!("{} on a communicator served by mscclpp-rs: {}", stringify!($name), $why))),
                })
            }
        }
    };
}

forwarded_only! {
    /// Refused on served communicators; forwarded on forwarded ones.
    fn ncclCommShrink / pncclCommShrink(comm: CommHandle, exclude: *mut c_int, n_exclude: c_int, newcomm: *mut CommHandle, config: *mut ncclConfig_t, flags: c_int);
    "shrinking is not implemented (create a new communicator over the remaining ranks instead)"
}

forwarded_only! {
    /// Refused on served communicators; forwarded on forwarded ones.
    fn ncclCommRevoke / pncclCommRevoke(comm: CommHandle, flags: c_int);
    "revocation is not implemented (ncclCommAbort stops every wait of the communicator)"
}

forwarded_only! {
    /// Refused on served communicators (the device API is not implemented); forwarded on
    /// forwarded ones.
    fn ncclDevCommCreate / pncclDevCommCreate(comm: CommHandle, reqs: *const c_void, out_dev_comm: *mut c_void);
    "NCCL's device API is not implemented (mscclpp-device offers channels and semaphores to Rust kernels)"
}

forwarded_only! {
    /// As `ncclDevCommCreate`.
    fn ncclDevCommDestroy / pncclDevCommDestroy(comm: CommHandle, dev_comm: *const c_void);
    "NCCL's device API is not implemented"
}

forwarded_only! {
    /// As `ncclDevCommCreate`.
    fn ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement(comm: CommHandle, team: NcclTeam, n: c_int, handle: *mut c_void, req: *mut c_void);
    "NCCL's device API is not implemented"
}

export! {
    /// Refused: NCCL's device API is not implemented.
    fn ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement(team: NcclTeam, n: c_int, handle: *mut c_void, req: *mut c_void) -> ncclResult_t {
        let _ = (team, n, handle, req);
        guard(None, || Err(Error::invalid_usage("ncclLsaBarrierCreateRequirement: NCCL's device API is not implemented by mscclpp-rs")))
    }
}

export! {
    /// Refused: NCCL's device API is not implemented.
    fn ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement(blocks: c_int, slots: c_int, handle: *mut c_void, req: *mut c_void) -> ncclResult_t {
        let _ = (blocks, slots, handle, req);
        guard(None, || Err(Error::invalid_usage("ncclLLA2ACreateRequirement: NCCL's device API is not implemented by mscclpp-rs")))
    }
}

export! {
    /// Part of NCCL's device API, not implemented: returns -1.
    fn ncclLLA2ACalcSlots / pncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int {
        let _ = (max_elts, max_elt_size);
        set_last(&Error::invalid_usage("ncclLLA2ACalcSlots: NCCL's device API is not implemented by mscclpp-rs"));
        -1
    }
}

/// `ncclTeam_t`: `nRanks`, `rank`, `stride`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_snake_case)]
pub struct NcclTeam {
    /// Ranks in the team.
    pub nRanks: c_int,
    /// This rank in the team.
    pub rank: c_int,
    /// World-rank distance between consecutive members.
    pub stride: c_int,
}

fn team_of(comm: CommHandle, world: bool) -> NcclTeam {
    match lookup(comm) {
        // Served communicators are on one machine: the local team is the world.
        Ok(c) if world || c.served().is_some() => {
            NcclTeam { nRanks: c.nranks as c_int, rank: c.rank as c_int, stride: 1 }
        }
        Ok(c) => NcclTeam { nRanks: 1, rank: 0, stride: c.nranks as c_int },
        Err(e) => {
            set_last(&e);
            NcclTeam { nRanks: 0, rank: 0, stride: 0 }
        }
    }
}

export! {
    /// Every rank.
    fn ncclTeamWorld / pncclTeamWorld(comm: CommHandle) -> NcclTeam { team_of(comm, true) }
}
export! {
    /// The ranks of this machine (all of a served communicator's).
    fn ncclTeamLsa / pncclTeamLsa(comm: CommHandle) -> NcclTeam { team_of(comm, false) }
}
export! {
    /// The ranks with this rank's position on every machine (this rank alone here).
    fn ncclTeamRail / pncclTeamRail(comm: CommHandle) -> NcclTeam {
        let t = team_of(comm, true);
        NcclTeam { nRanks: 1, rank: 0, stride: t.nRanks.max(1) }
    }
}
export! {
    /// The world rank of `rank` of `team`.
    fn ncclTeamRankToWorld / pncclTeamRankToWorld(comm: CommHandle, team: NcclTeam, rank: c_int) -> c_int {
        team_of(comm, true).rank + (rank - team.rank) * team.stride
    }
}
export! {
    /// The local-team rank of `rank` of `team`.
    fn ncclTeamRankToLsa / pncclTeamRankToLsa(comm: CommHandle, team: NcclTeam, rank: c_int) -> c_int {
        let lsa = team_of(comm, false);
        let world = team_of(comm, true).rank + (rank - team.rank) * team.stride;
        world - (team_of(comm, true).rank - lsa.rank)
    }
}

fn forward_or<F: Copy>(
    c: &Comm,
    name: &[u8],
    call: impl FnOnce(F, RealComm) -> c_int,
    served: impl FnOnce() -> Result<()>,
) -> Result<()> {
    match c.kind {
        Kind::Forwarded(rc) => {
            // SAFETY: every caller names a function whose signature is F.
            let f: F = unsafe { real(name)? };
            real_result(call(f, rc))
        }
        Kind::Served(_) => served(),
    }
}

export! {
    /// Waits for this rank's outstanding operations (on a served communicator: for its GPU).
    fn ncclCommFinalize / pncclCommFinalize(comm: CommHandle) -> ncclResult_t {
        with_comm(comm, |c| {
            type F = unsafe extern "C" fn(CommHandle) -> c_int;
            // SAFETY: ncclCommFinalize(comm).
            forward_or::<F>(c, b"ncclCommFinalize\0", |f, rc| unsafe { f(rc.0) }, || Ok(()))
        })
    }
}

export! {
    /// Frees the communicator once its GPU's work is done.
    fn ncclCommDestroy / pncclCommDestroy(comm: CommHandle) -> ncclResult_t {
        with_comm(comm, |c| {
            let c = lock(&COMMS).remove(&(comm as usize)).unwrap_or_else(|| c.clone());
            lock(&LAST_TEXT).remove(&(comm as usize));
            print_stats(&c);
            match &c.kind {
                Kind::Forwarded(rc) => {
                    type F = unsafe extern "C" fn(CommHandle) -> c_int;
                    // SAFETY: ncclCommDestroy(comm).
                    let f: F = unsafe { real(b"ncclCommDestroy\0")? };
                    // SAFETY: the real communicator, destroyed once.
                    real_result(unsafe { f(rc.0) })
                }
                Kind::Served(s) => {
                    // Kernels may still use its memory: wait for the GPU first.
                    s.gpu().bind().map_err(Error::from)?;
                    // SAFETY: a plain driver call on the bound context.
                    let r = unsafe { sys::cuCtxSynchronize() };
                    if r != sys::CUresult::CUDA_SUCCESS {
                        // A faulted context: keep the memory rather than free it under a kernel.
                        lock(&ABANDONED).push(c);
                        return Err(Error { code: ncclUnhandledCudaError, message: format!("synchronising before destroy: {r:?}") });
                    }
                    Ok(())
                }
            }
        })
    }
}

fn print_stats(c: &Comm) {
    if std::env::var("MSCCLPP_RS_NCCL_STATS").is_ok_and(|v| v == "1") {
        eprintln!(
            "mscclpp-nccl: rank {} of {}: {} calls served, {} forwarded (process totals)",
            c.rank,
            c.nranks,
            SERVED.load(Ordering::Relaxed),
            FORWARDED.load(Ordering::Relaxed)
        );
    }
}

export! {
    /// Gives up at once: every wait of this rank's kernels ends within milliseconds, the peers
    /// see this rank as lost, and the memory is kept (kernels may still reference it).
    fn ncclCommAbort / pncclCommAbort(comm: CommHandle) -> ncclResult_t {
        if comm.is_null() {
            return ncclSuccess; // NCCL accepts aborting NULL.
        }
        with_comm(comm, |c| {
            let c = lock(&COMMS).remove(&(comm as usize)).unwrap_or_else(|| c.clone());
            c.aborted.store(true, Ordering::Relaxed);
            let r = match &c.kind {
                Kind::Forwarded(rc) => {
                    type F = unsafe extern "C" fn(CommHandle) -> c_int;
                    // SAFETY: ncclCommAbort(comm).
                    let f: F = unsafe { real(b"ncclCommAbort\0")? };
                    // SAFETY: the real communicator.
                    real_result(unsafe { f(rc.0) })
                }
                Kind::Served(s) => {
                    s.communicator().abandon();
                    Ok(())
                }
            };
            lock(&ABANDONED).push(c);
            r
        })
    }
}

export! {
    /// `ncclSuccess`, or the error a peer's loss or an abort left (`ncclRemoteError`).
    fn ncclCommGetAsyncError / pncclCommGetAsyncError(comm: CommHandle, async_error: *mut ncclResult_t) -> ncclResult_t {
        with_comm(comm, |c| {
            out(async_error, "asyncError")?;
            let code = match &c.kind {
                Kind::Forwarded(rc) => {
                    type F = unsafe extern "C" fn(CommHandle, *mut c_int) -> c_int;
                    // SAFETY: ncclCommGetAsyncError's signature.
                    let f: F = unsafe { forward::real()?.get(b"ncclCommGetAsyncError\0")? };
                    let mut v = 0;
                    // SAFETY: the real communicator and an int.
                    real_result(unsafe { f(rc.0, &mut v) })?;
                    ncclResult_t::ALL.get(v as usize).copied().unwrap_or(ncclInternalError)
                }
                Kind::Served(s) => match s.communicator().abort_error() {
                    Some(e) => {
                        *lock(&c.last_error) = e.to_string();
                        ncclRemoteError
                    }
                    None => ncclSuccess,
                },
            };
            // SAFETY: checked non-null.
            unsafe { *async_error = code };
            Ok(())
        })
    }
}

export! {
    /// The number of ranks.
    fn ncclCommCount / pncclCommCount(comm: CommHandle, count: *mut c_int) -> ncclResult_t {
        with_comm(comm, |c| {
            out(count, "count")?;
            // SAFETY: checked non-null.
            unsafe { *count = c.nranks as c_int };
            Ok(())
        })
    }
}

export! {
    /// The CUDA device.
    fn ncclCommCuDevice / pncclCommCuDevice(comm: CommHandle, device: *mut c_int) -> ncclResult_t {
        with_comm(comm, |c| {
            out(device, "device")?;
            // SAFETY: checked non-null.
            unsafe { *device = c.device };
            Ok(())
        })
    }
}

export! {
    /// This rank.
    fn ncclCommUserRank / pncclCommUserRank(comm: CommHandle, rank: *mut c_int) -> ncclResult_t {
        with_comm(comm, |c| {
            out(rank, "rank")?;
            // SAFETY: checked non-null.
            unsafe { *rank = c.rank as c_int };
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Memory and registration

export! {
    /// Exportable device memory on the current device (a driver allocation of its own), kept
    /// until `ncclMemFree`: what `ncclCommWindowRegister` turns into a window ([`crate::window`]).
    fn ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
        guard(None, || {
            out(ptr, "ptr")?;
            let addr = crate::window::alloc(crate::comm::current_device()?, size)?;
            // SAFETY: checked non-null.
            unsafe { *ptr = addr as *mut c_void };
            Ok(())
        })
    }
}

export! {
    /// Frees memory from `ncclMemAlloc` (a window over it keeps it until deregistered).
    fn ncclMemFree / pncclMemFree(ptr: *mut c_void) -> ncclResult_t {
        guard(None, || {
            if ptr.is_null() {
                return Ok(());
            }
            crate::window::free(ptr as u64)
        })
    }
}

/// What a registration handle or window stands for.
struct Registration {
    comm: usize,
    addr: u64,
    bytes: usize,
    /// A window's registration (`ncclCommWindowRegister` on a served communicator).
    window: Option<crate::window::Registered>,
}

export! {
    /// Registers a buffer (accepted: every operation copies through registered scratch, so this
    /// only records it); forwarded on forwarded communicators.
    fn ncclCommRegister / pncclCommRegister(comm: CommHandle, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
        with_comm(comm, |c| {
            out(handle, "handle")?;
            type F = unsafe extern "C" fn(CommHandle, *mut c_void, usize, *mut *mut c_void) -> c_int;
            // SAFETY: ncclCommRegister's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclCommRegister\0", |f, rc| unsafe { f(rc.0, buff, size, handle) }, || {
                let addr = buffer(buff, size as u64, "buff")?;
                let reg = Box::new(Registration { comm: comm as usize, addr, bytes: size, window: None });
                // SAFETY: checked non-null.
                unsafe { *handle = Box::into_raw(reg) as *mut c_void };
                Ok(())
            })
        })
    }
}

unsafe fn release(comm: CommHandle, handle: *mut c_void) -> Result<()> {
    if handle.is_null() {
        return Err(Error::invalid_argument("the registration handle is NULL"));
    }
    // SAFETY: a handle from ncclCommRegister / ncclCommWindowRegister of this library (the
    // caller's contract), released once.
    let reg = unsafe { Box::from_raw(handle as *mut Registration) };
    if reg.comm != comm as usize {
        let e = Error::invalid_argument(format!(
            "handle of {:#x} + {} bytes belongs to another communicator",
            reg.addr, reg.bytes
        ));
        std::mem::forget(reg);
        return Err(e);
    }
    match reg.window {
        Some(w) => crate::window::deregister(w),
        None => Ok(()),
    }
}

/// The device handle behind a window handle of `comm` ([`crate::window::device_window`]).
///
/// # Safety
/// As [`crate::window::device_window`].
pub(crate) unsafe fn registered_window(
    comm: CommHandle,
    win: *mut c_void,
) -> Result<Option<mscclpp_device::window::Window>> {
    let c = lookup(comm)?;
    if c.served().is_none() {
        return Err(Error::invalid_usage("this communicator is forwarded to the real NCCL: its windows are NCCL's"));
    }
    if win.is_null() {
        return Err(Error::invalid_argument("the window is NULL"));
    }
    // SAFETY: a live registration of this library (the caller's contract), only read here.
    let reg = unsafe { &*(win as *const Registration) };
    if reg.comm != comm as usize {
        return Err(Error::invalid_argument(format!(
            "window of {:#x} + {} bytes belongs to another communicator",
            reg.addr, reg.bytes
        )));
    }
    Ok(reg.window.as_ref().and_then(|r| r.window.as_ref()).map(|w| w.handle()))
}

export! {
    /// Releases a registration.
    fn ncclCommDeregister / pncclCommDeregister(comm: CommHandle, handle: *mut c_void) -> ncclResult_t {
        with_comm(comm, |c| {
            type F = unsafe extern "C" fn(CommHandle, *mut c_void) -> c_int;
            // SAFETY: ncclCommDeregister's signature; a handle of this communicator.
            forward_or::<F>(c, b"ncclCommDeregister\0", |f, rc| unsafe { f(rc.0, handle) }, || unsafe { release(comm, handle) })
        })
    }
}

export! {
    /// Registers a window: collective; ncclMemAlloc memory becomes a symmetric window of this
    /// library ([`crate::window`]), other memory is recorded as `ncclCommRegister` records it.
    fn ncclCommWindowRegister / pncclCommWindowRegister(comm: CommHandle, buff: *mut c_void, size: usize, win: *mut *mut c_void, flags: c_int) -> ncclResult_t {
        with_comm(comm, |c| {
            out(win, "win")?;
            type F = unsafe extern "C" fn(CommHandle, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int;
            // SAFETY: ncclCommWindowRegister's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclCommWindowRegister\0", |f, rc| unsafe { f(rc.0, buff, size, win, flags) }, || {
                let addr = buffer(buff, size as u64, "buff")?;
                let served = c.served().ok_or_else(|| Error::internal("a communicator neither served nor forwarded"))?;
                let window = Some(crate::window::register(served.communicator(), addr, size)?);
                let reg = Box::new(Registration { comm: comm as usize, addr, bytes: size, window });
                // SAFETY: checked non-null.
                unsafe { *win = Box::into_raw(reg) as *mut c_void };
                Ok(())
            })
        })
    }
}

export! {
    /// Releases a window (collective, as its registration).
    fn ncclCommWindowDeregister / pncclCommWindowDeregister(comm: CommHandle, win: *mut c_void) -> ncclResult_t {
        with_comm(comm, |c| {
            type F = unsafe extern "C" fn(CommHandle, *mut c_void) -> c_int;
            // SAFETY: ncclCommWindowDeregister's signature; a window of this communicator.
            forward_or::<F>(c, b"ncclCommWindowDeregister\0", |f, rc| unsafe { f(rc.0, win) }, || unsafe { release(comm, win) })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions

export! {
    /// A sum of every input multiplied by `scalar` first.
    fn ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: CommHandle) -> ncclResult_t {
        with_comm(comm, |c| {
            out(op, "op")?;
            if scalar.is_null() {
                return Err(Error::invalid_argument("the scalar is NULL"));
            }
            let t = dtype(datatype)?;
            if let Kind::Forwarded(rc) = c.kind {
                type F = unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, CommHandle) -> c_int;
                // SAFETY: ncclRedOpCreatePreMulSum's signature.
                let f: F = unsafe { real(b"ncclRedOpCreatePreMulSum\0")? };
                // SAFETY: the caller's arguments and the real communicator.
                return real_result(unsafe { f(op, scalar, datatype, residence, rc.0) });
            }
            let red = match residence {
                // SAFETY: a host scalar of the type (the caller's contract).
                SCALAR_HOST_IMMEDIATE => premulsum(ScalarKind::Immediate, unsafe { host_scalar(scalar, t) }),
                SCALAR_DEVICE => premulsum(ScalarKind::Device, buffer(scalar, t.size() as u64, "scalar")?),
                r => return Err(Error::invalid_argument(format!("scalar residence {r}"))),
            };
            let id = c.create_redop(t, red)?;
            // SAFETY: checked non-null.
            unsafe { *op = id };
            Ok(())
        })
    }
}

export! {
    /// Forgets a reduction made by `ncclRedOpCreatePreMulSum`.
    fn ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: CommHandle) -> ncclResult_t {
        with_comm(comm, |c| {
            type F = unsafe extern "C" fn(c_int, CommHandle) -> c_int;
            // SAFETY: ncclRedOpDestroy's signature.
            forward_or::<F>(c, b"ncclRedOpDestroy\0", |f, rc| unsafe { f(op, rc.0) }, || c.destroy_redop(op))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Collectives

/// The common prologue of a served call: counts it and binds the GPU.
fn serve(c: &Comm) -> Result<&crate::engine::Served> {
    let s = c.served().ok_or_else(|| Error::internal("not served"))?;
    if c.aborted.load(Ordering::Relaxed) {
        return Err(Error::invalid_usage("the communicator was aborted"));
    }
    SERVED.fetch_add(1, Ordering::Relaxed);
    s.gpu().bind().map_err(Error::from)?;
    Ok(s)
}

fn red_of(c: &Comm, op: c_int, t: DataType) -> Result<Reduction> {
    c.reduction(op, t)
}

export! {
    /// Allreduce.
    fn ncclAllReduce / pncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclAllReduce's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclAllReduce\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, op, rc.0, stream) }, || {
                let red = red_of(c, op, t)?;
                let b = bytes_of(count, t, 1)?;
                let (s, r) = (buffer(sendbuff, b, "sendbuff")?, buffer(recvbuff, b, "recvbuff")?);
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.allreduce(stream, s, r, count as u64, t, red))
            })
        })
    }
}

export! {
    /// Reduce to `root`.
    fn ncclReduce / pncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclReduce's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclReduce\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, op, root_rank, rc.0, stream) }, || {
                let red = red_of(c, op, t)?;
                let rt = root(root_rank, c)?;
                let b = bytes_of(count, t, 1)?;
                let s = buffer(sendbuff, b, "sendbuff")?;
                let r = if c.rank == rt { buffer(recvbuff, b, "recvbuff")? } else { recvbuff as u64 };
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.reduce_to(stream, s, r, count as u64, t, red, rt))
            })
        })
    }
}

export! {
    /// Broadcast of `root`'s `sendbuff` into every `recvbuff`.
    fn ncclBroadcast / pncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclBroadcast's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclBroadcast\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, root_rank, rc.0, stream) }, || {
                let rt = root(root_rank, c)?;
                let b = bytes_of(count, t, 1)?;
                let s = if c.rank == rt { buffer(sendbuff, b, "sendbuff")? } else { sendbuff as u64 };
                let r = buffer(recvbuff, b, "recvbuff")?;
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.broadcast(stream, s, r, b, rt))
            })
        })
    }
}

export! {
    /// In-place broadcast (`ncclBroadcast` with one buffer).
    fn ncclBcast / pncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        // SAFETY: forwarded.
        unsafe { ncclBroadcast(buff, buff, count, datatype, root_rank, comm, stream) }
    }
}

export! {
    /// Reduce-scatter of `recvcount` elements per rank.
    fn ncclReduceScatter / pncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclReduceScatter's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclReduceScatter\0", |f, rc| unsafe { f(sendbuff, recvbuff, recvcount, datatype, op, rc.0, stream) }, || {
                let red = red_of(c, op, t)?;
                let b = bytes_of(recvcount, t, 1)?;
                let s = buffer(sendbuff, bytes_of(recvcount, t, c.nranks)?, "sendbuff")?;
                let r = buffer(recvbuff, b, "recvbuff")?;
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.reduce_scatter(stream, s, r, recvcount as u64, t, red))
            })
        })
    }
}

export! {
    /// Allgather of `sendcount` elements per rank.
    fn ncclAllGather / pncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclAllGather's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclAllGather\0", |f, rc| unsafe { f(sendbuff, recvbuff, sendcount, datatype, rc.0, stream) }, || {
                let b = bytes_of(sendcount, t, 1)?;
                let s = buffer(sendbuff, b, "sendbuff")?;
                let r = buffer(recvbuff, bytes_of(sendcount, t, c.nranks)?, "recvbuff")?;
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.allgather(stream, s, r, sendcount as u64, t))
            })
        })
    }
}

export! {
    /// All-to-all of `count` elements between every pair of ranks.
    fn ncclAlltoAll / pncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclAlltoAll's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclAlltoAll\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, rc.0, stream) }, || {
                let all = bytes_of(count, t, c.nranks)?;
                let (s, r) = (buffer(sendbuff, all, "sendbuff")?, buffer(recvbuff, all, "recvbuff")?);
                let served = serve(c)?;
                if all == 0 { return Ok(()); }
                if s == r {
                    return Err(Error::invalid_argument("ncclAlltoAll in place (sendbuff == recvbuff) is not defined"));
                }
                served.on(stream, || served.alltoall(stream, s, r, bytes_of(count, t, 1)?))
            })
        })
    }
}

export! {
    /// Gather to `root` (`count` elements from every rank, in rank order).
    fn ncclGather / pncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclGather's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclGather\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, root_rank, rc.0, stream) }, || {
                let rt = root(root_rank, c)?;
                let b = bytes_of(count, t, 1)?;
                let s = buffer(sendbuff, b, "sendbuff")?;
                let r = if c.rank == rt { buffer(recvbuff, bytes_of(count, t, c.nranks)?, "recvbuff")? } else { recvbuff as u64 };
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.gather(stream, s, r, b, rt))
            })
        })
    }
}

export! {
    /// Scatter from `root` (`count` elements to every rank, in rank order).
    fn ncclScatter / pncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        with_comm(comm, |c| {
            let t = dtype(datatype)?;
            type F = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
            // SAFETY: ncclScatter's signature and the caller's arguments.
            forward_or::<F>(c, b"ncclScatter\0", |f, rc| unsafe { f(sendbuff, recvbuff, count, datatype, root_rank, rc.0, stream) }, || {
                let rt = root(root_rank, c)?;
                let b = bytes_of(count, t, 1)?;
                let s = if c.rank == rt { buffer(sendbuff, bytes_of(count, t, c.nranks)?, "sendbuff")? } else { sendbuff as u64 };
                let r = buffer(recvbuff, b, "recvbuff")?;
                let served = serve(c)?;
                if b == 0 { return Ok(()); }
                served.on(stream, || served.scatter(stream, s, r, b, rt))
            })
        })
    }
}

fn peer(p: c_int, c: &Comm) -> Result<usize> {
    usize::try_from(p).ok().filter(|&p| p < c.nranks).ok_or_else(|| {
        Error::invalid_argument(format!("peer {p} is not a rank of this communicator (0..{})", c.nranks))
    })
}

fn p2p_call(
    buf: *const c_void,
    count: usize,
    datatype: c_int,
    peer_rank: c_int,
    comm: CommHandle,
    stream: CUstream,
    send: bool,
) -> ncclResult_t {
    with_comm(comm, |c| {
        let t = dtype(datatype)?;
        let name: &[u8] = if send { b"ncclSend\0" } else { b"ncclRecv\0" };
        type F = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, CommHandle, CUstream) -> c_int;
        // SAFETY: ncclSend and ncclRecv share this signature (the buffer's constness aside).
        forward_or::<F>(
            c,
            name,
            |f, rc| unsafe { f(buf, count, datatype, peer_rank, rc.0, stream) },
            || {
                let p = peer(peer_rank, c)?;
                let b = bytes_of(count, t, 1)?;
                let addr = buffer(buf, b, if send { "sendbuff" } else { "recvbuff" })?;
                serve(c)?;
                group::p2p(c.clone(), stream, send, P2p { peer: p, addr, bytes: b })
            },
        )
    })
}

export! {
    /// Sends `count` elements to `peer` (matched in order with its `ncclRecv`).
    fn ncclSend / pncclSend(sendbuff: *const c_void, count: usize, datatype: c_int, peer_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        p2p_call(sendbuff, count, datatype, peer_rank, comm, stream, true)
    }
}

export! {
    /// Receives `count` elements from `peer`.
    fn ncclRecv / pncclRecv(recvbuff: *mut c_void, count: usize, datatype: c_int, peer_rank: c_int, comm: CommHandle, stream: CUstream) -> ncclResult_t {
        p2p_call(recvbuff, count, datatype, peer_rank, comm, stream, false)
    }
}

export! {
    /// Opens a group (nested groups count).
    fn ncclGroupStart / pncclGroupStart() -> ncclResult_t {
        guard(None, group::start)
    }
}

export! {
    /// Closes a group; the outermost end runs the held sends and receives.
    fn ncclGroupEnd / pncclGroupEnd() -> ncclResult_t {
        guard(None, group::end)
    }
}

export! {
    /// Refused: this library does not estimate times (the group stays open).
    fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(info: *mut ncclSimInfo_t) -> ncclResult_t {
        let _ = info;
        guard(None, || Err(Error::invalid_usage("ncclGroupSimulateEnd: mscclpp-rs does not simulate groups")))
    }
}

/// The text of the last error of any call (for tests).
pub fn last_error() -> String {
    lock(&LAST_ERROR).to_string_lossy().into_owned()
}

/// The text of `p` (for tests).
///
/// # Safety
/// `p` is a NUL-terminated string.
pub unsafe fn text(p: *const c_char) -> String {
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
