//! NCCL, loaded at run time, as the baseline of the benchmarks: the few calls they need
//! (version, unique id, communicator, allreduce, allgather, reduce-scatter, and grouped
//! point-to-point sends and receives for all-to-all exchanges).
//!
//! Which library: `MSCCLPP_RS_NCCL` (a path, e.g. the copy inside a PyTorch installation),
//! else `libnccl.so.2`, else `libnccl.so`, found by the dynamic loader. [`Nccl::load`] says
//! clearly when none is found.

use std::ffi::{CStr, c_char, c_int, c_void};

use cudarc::driver::CudaStream;
use libloading::Library;
use mscclpp_host::{Bootstrap, BootstrapExt, Error, Gpu, Result};

use mscclpp_host::{DataType, ReduceOp};

/// NCCL's opaque unique id (128 bytes), passed by value.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct UniqueId {
    internal: [u8; 128],
}

type Comm = *mut c_void;
type Res = c_int;
/// `ncclAllReduce` and `ncclReduceScatter`: (send, recv, count, type, op, comm, stream).
type ReduceFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> Res;

/// The loaded library and the entry points used here.
pub struct Nccl {
    path: String,
    version: i32,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Res,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> Res,
    comm_destroy: unsafe extern "C" fn(Comm) -> Res,
    error_string: unsafe extern "C" fn(Res) -> *const c_char,
    all_reduce: ReduceFn,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, *mut c_void) -> Res,
    reduce_scatter: ReduceFn,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, *mut c_void) -> Res,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> Res,
    group_start: unsafe extern "C" fn() -> Res,
    group_end: unsafe extern "C" fn() -> Res,
    _lib: Library,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nccl({} from {})", self.version_string(), self.path)
    }
}

fn symbol<T: Copy>(lib: &Library, path: &str, name: &str) -> Result<T> {
    // SAFETY: each symbol is read with the signature of NCCL's public header (nccl.h, 2.x).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| Error::Unsupported(format!("NCCL library {path} has no {name}: {e}")))
}

impl Nccl {
    /// Loads NCCL (see the module documentation for which file).
    pub fn load() -> Result<Self> {
        let candidates: Vec<String> = match std::env::var("MSCCLPP_RS_NCCL") {
            Ok(p) => vec![p],
            Err(_) => vec!["libnccl.so.2".into(), "libnccl.so".into()],
        };
        let mut tried = Vec::new();
        for path in &candidates {
            // SAFETY: loading a shared library runs its initialisers; NCCL's are benign.
            match unsafe { Library::new(path) } {
                Ok(lib) => return Self::from_library(lib, path),
                Err(e) => tried.push(format!("{path}: {e}")),
            }
        }
        Err(Error::Unsupported(format!(
            "NCCL not found (set MSCCLPP_RS_NCCL to the path of libnccl.so.2); tried {}",
            tried.join("; ")
        )))
    }

    fn from_library(lib: Library, path: &str) -> Result<Self> {
        let get_version: unsafe extern "C" fn(*mut c_int) -> Res = symbol(&lib, path, "ncclGetVersion")?;
        let mut version = 0;
        // SAFETY: `version` is an out-parameter.
        let r = unsafe { get_version(&mut version) };
        if r != 0 {
            return Err(Error::Unsupported(format!("ncclGetVersion failed in {path} ({r})")));
        }
        Ok(Self {
            path: path.to_string(),
            version,
            get_unique_id: symbol(&lib, path, "ncclGetUniqueId")?,
            comm_init_rank: symbol(&lib, path, "ncclCommInitRank")?,
            comm_destroy: symbol(&lib, path, "ncclCommDestroy")?,
            error_string: symbol(&lib, path, "ncclGetErrorString")?,
            all_reduce: symbol(&lib, path, "ncclAllReduce")?,
            all_gather: symbol(&lib, path, "ncclAllGather")?,
            reduce_scatter: symbol(&lib, path, "ncclReduceScatter")?,
            send: symbol(&lib, path, "ncclSend")?,
            recv: symbol(&lib, path, "ncclRecv")?,
            group_start: symbol(&lib, path, "ncclGroupStart")?,
            group_end: symbol(&lib, path, "ncclGroupEnd")?,
            _lib: lib,
        })
    }

    /// The file that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The version as `major.minor.patch` (NCCL encodes it as `major*10000 + minor*100 + patch`).
    pub fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    }

    fn check(&self, r: Res, what: &str) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static C string for every result code.
        let msg = unsafe { CStr::from_ptr((self.error_string)(r)) }.to_string_lossy().into_owned();
        Err(Error::Unsupported(format!("NCCL {what} failed: {msg} ({r})")))
    }

    /// A communicator over the ranks of `boot`, this rank on `gpu`. Every rank calls it.
    pub fn communicator<'a>(&'a self, boot: &dyn Bootstrap, gpu: &Gpu) -> Result<NcclComm<'a>> {
        let mut id = UniqueId { internal: [0; 128] };
        if boot.rank() == 0 {
            // SAFETY: `id` is an out-parameter.
            self.check(unsafe { (self.get_unique_id)(&mut id) }, "ncclGetUniqueId")?;
        }
        let int = |v: usize, what: &str| {
            c_int::try_from(v).map_err(|_| Error::InvalidArgument(format!("NCCL: {what} {v} does not fit an int")))
        };
        let (world, rank) = (int(boot.world_size(), "world size")?, int(boot.rank(), "rank")?);
        let id = boot.all_gather_pod(&id)?[0];
        gpu.bind()?;
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: `comm` is an out-parameter; the GPU's context is current on this thread.
        let r = unsafe { (self.comm_init_rank)(&mut comm, world, id, rank) };
        self.check(r, "ncclCommInitRank")?;
        Ok(NcclComm { nccl: self, comm })
    }
}

/// NCCL's code for an element type.
fn nccl_type(dt: DataType) -> c_int {
    match dt {
        DataType::I32 => 2,
        DataType::U32 => 3,
        DataType::F16 => 6,
        DataType::F32 => 7,
        DataType::F64 => 8,
        DataType::Bf16 => 9,
    }
}

fn nccl_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 3,
    }
}

/// An NCCL communicator (destroyed on drop).
pub struct NcclComm<'a> {
    nccl: &'a Nccl,
    comm: Comm,
}

impl std::fmt::Debug for NcclComm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclComm({:p})", self.comm)
    }
}

impl NcclComm<'_> {
    /// `ncclAllReduce(send, recv, count, dtype, op)` on `stream`.
    ///
    /// # Safety
    /// `send` and `recv` are device addresses valid for `count` elements on this rank's GPU
    /// until the stream has run the operation.
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dt: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.reduce(self.nccl.all_reduce, "ncclAllReduce", send, recv, count, dt, op, stream) }
    }

    /// `ncclAllGather(send, recv, count per rank, dtype)` on `stream`.
    ///
    /// # Safety
    /// As for [`NcclComm::all_reduce`], `recv` for `n_ranks * count` elements.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dt: DataType,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        let r = unsafe {
            (self.nccl.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                nccl_type(dt),
                self.comm,
                stream.cu_stream().cast(),
            )
        };
        self.nccl.check(r, "ncclAllGather")
    }

    /// `ncclReduceScatter(send, recv, count per rank, dtype, op)` on `stream`.
    ///
    /// # Safety
    /// As for [`NcclComm::all_reduce`], `send` for `n_ranks * count` elements.
    pub unsafe fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dt: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.reduce(self.nccl.reduce_scatter, "ncclReduceScatter", send, recv, count, dt, op, stream) }
    }

    /// `f` (named `name`), a reduction of NCCL's signature, on `stream`.
    ///
    /// # Safety
    /// As for the public function that calls it.
    #[allow(clippy::too_many_arguments)]
    unsafe fn reduce(
        &self,
        f: ReduceFn,
        name: &str,
        send: u64,
        recv: u64,
        count: usize,
        dt: DataType,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<()> {
        let (send, recv, s) = (send as *const c_void, recv as *mut c_void, stream.cu_stream().cast());
        // SAFETY: forwarded from the caller.
        let r = unsafe { f(send, recv, count, nccl_type(dt), nccl_op(op), self.comm, s) };
        self.nccl.check(r, name)
    }
}

/// NCCL's code for bytes (`ncclUint8`).
const NCCL_UINT8: c_int = 1;

/// One point-to-point transfer of a grouped exchange: `bytes` at device address `addr`, to or
/// from rank `peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The other rank (this rank itself is allowed: NCCL copies locally).
    pub peer: usize,
    /// Device address of the data (send) or of where it lands (receive).
    pub addr: u64,
    /// Bytes.
    pub bytes: usize,
}

impl NcclComm<'_> {
    /// Every send and receive of `sends` and `recvs` in one NCCL group (`ncclGroupStart`, then
    /// `ncclSend` / `ncclRecv` of bytes, then `ncclGroupEnd`) on `stream`: an all-to-all with
    /// sizes of the caller's choosing. Transfers of 0 bytes are skipped (both sides must agree
    /// on every size, as NCCL requires).
    ///
    /// # Safety
    /// Every address is valid on this rank's GPU for its bytes until the stream has run the
    /// group; send and receive ranges do not overlap.
    pub unsafe fn send_recv(&self, sends: &[Transfer], recvs: &[Transfer], stream: &CudaStream) -> Result<()> {
        let s: *mut c_void = stream.cu_stream().cast();
        // SAFETY: no arguments.
        self.nccl.check(unsafe { (self.nccl.group_start)() }, "ncclGroupStart")?;
        let mut first = Ok(());
        for t in sends.iter().filter(|t| t.bytes > 0) {
            // SAFETY: forwarded from the caller.
            let r = unsafe {
                (self.nccl.send)(t.addr as *const c_void, t.bytes, NCCL_UINT8, t.peer as c_int, self.comm, s)
            };
            if first.is_ok() {
                first = self.nccl.check(r, "ncclSend");
            }
        }
        for t in recvs.iter().filter(|t| t.bytes > 0) {
            // SAFETY: forwarded from the caller.
            let r =
                unsafe { (self.nccl.recv)(t.addr as *mut c_void, t.bytes, NCCL_UINT8, t.peer as c_int, self.comm, s) };
            if first.is_ok() {
                first = self.nccl.check(r, "ncclRecv");
            }
        }
        // The group is always closed, even after a failed call inside it.
        // SAFETY: no arguments.
        let end = self.nccl.check(unsafe { (self.nccl.group_end)() }, "ncclGroupEnd");
        first.and(end)
    }
}

impl Drop for NcclComm<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ncclCommInitRank, destroyed once.
        let _ = unsafe { (self.nccl.comm_destroy)(self.comm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_clear_error() {
        // SAFETY: no other test of this crate reads or writes the environment.
        unsafe { std::env::set_var("MSCCLPP_RS_NCCL", "/nonexistent/libnccl.so.2") };
        let e = Nccl::load().unwrap_err().to_string();
        // SAFETY: as above.
        unsafe { std::env::remove_var("MSCCLPP_RS_NCCL") };
        assert!(e.contains("NCCL not found") && e.contains("MSCCLPP_RS_NCCL"), "{e}");
    }

    #[test]
    fn type_codes_follow_nccl_h() {
        assert_eq!(nccl_type(DataType::F32), 7);
        assert_eq!(nccl_type(DataType::Bf16), 9);
        assert_eq!(nccl_op(ReduceOp::Sum), 0);
    }
}
