//! Groups (`ncclGroupStart` / `ncclGroupEnd`, nested): sends and receives made inside a group
//! are held until the outermost end, then run together per communicator, so any pairing
//! pattern completes (this is how PyTorch's `all_to_all_single` and `batch_isend_irecv` reach
//! NCCL). Collectives inside a group are enqueued at once: they need nothing from the others.
//! A group spanning several communicators (one per GPU of a process, `ncclCommInitAll`) runs each
//! communicator's part on its own stream. Groups are per thread, as in NCCL.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUstream};

use crate::comm::Comm;
use crate::engine::P2p;
use crate::error::{Error, Result};

/// One held send or receive.
struct Pending {
    comm: Arc<Comm>,
    stream: usize,
    send: bool,
    op: P2p,
}

#[derive(Default)]
struct Group {
    depth: u32,
    pending: Vec<Pending>,
    /// The first error of a call inside the group, returned by the outermost end.
    error: Option<Error>,
    /// Depth at which the real NCCL's group was opened too.
    real_open: bool,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// `ncclGroupStart`.
pub fn start() -> Result<()> {
    let open_real = crate::forward::loaded();
    let outermost = GROUP.with_borrow_mut(|g| {
        g.depth += 1;
        g.real_open |= g.depth == 1 && open_real;
        g.depth == 1
    });
    if outermost && open_real {
        real_group(b"ncclGroupStart\0")?;
    }
    Ok(())
}

/// Whether this thread is inside a group.
pub fn active() -> bool {
    GROUP.with_borrow(|g| g.depth > 0)
}

/// Records an error of a call inside the group (the end returns the first).
pub fn note_error(e: &Error) {
    GROUP.with_borrow_mut(|g| {
        if g.error.is_none() {
            g.error = Some(e.clone());
        }
    });
}

/// `ncclGroupEnd`: at the outermost level, runs what was held.
pub fn end() -> Result<()> {
    let (done, pending, error, real_open) = GROUP.with_borrow_mut(|g| {
        if g.depth == 0 {
            return (false, Vec::new(), Some(Error::invalid_usage("ncclGroupEnd without ncclGroupStart")), false);
        }
        g.depth -= 1;
        if g.depth > 0 {
            return (false, Vec::new(), None, false);
        }
        let real = std::mem::take(&mut g.real_open);
        (true, std::mem::take(&mut g.pending), g.error.take(), real)
    });
    if !done {
        return error.map_or(Ok(()), Err);
    }
    let ran = if error.is_none() { run(pending) } else { Ok(()) };
    let closed = if real_open { real_group(b"ncclGroupEnd\0") } else { Ok(()) };
    match error {
        Some(e) => Err(e),
        None => ran.and(closed),
    }
}

/// A send or receive: held inside a group, else run as a group of one.
pub fn p2p(comm: Arc<Comm>, stream: CUstream, send: bool, op: P2p) -> Result<()> {
    let p = Pending { comm, stream: stream as usize, send, op };
    if active() {
        GROUP.with_borrow_mut(|g| g.pending.push(p));
        Ok(())
    } else {
        run(vec![p])
    }
}

fn run(pending: Vec<Pending>) -> Result<()> {
    // Per communicator, in the order of first use.
    let mut by_comm: BTreeMap<usize, (usize, Arc<Comm>, Vec<Pending>)> = BTreeMap::new();
    for (i, p) in pending.into_iter().enumerate() {
        let key = Arc::as_ptr(&p.comm) as usize;
        by_comm.entry(key).or_insert_with(|| (i, p.comm.clone(), Vec::new())).2.push(p);
    }
    let mut parts: Vec<_> = by_comm.into_values().collect();
    parts.sort_by_key(|p| p.0);
    for (_, comm, ops) in parts {
        let served = comm.served().ok_or_else(|| Error::internal("a forwarded communicator's send/recv was held"))?;
        let sends: Vec<P2p> = ops.iter().filter(|p| p.send).map(|p| p.op).collect();
        let recvs: Vec<P2p> = ops.iter().filter(|p| !p.send).map(|p| p.op).collect();
        let mut streams: Vec<usize> = Vec::new();
        for p in &ops {
            if !streams.contains(&p.stream) {
                streams.push(p.stream);
            }
        }
        let first = streams[0] as CUstream;
        let others: Vec<CUstream> =
            streams.iter().copied().filter(|&s| s != streams[0]).map(|s| s as CUstream).collect();
        served.gpu().bind().map_err(Error::from)?;
        join(first, &others)?;
        served.on(first, || served.p2p(first, &sends, &recvs)).map_err(|e| comm_error(&comm, e))?;
        join_back(first, &others)?;
    }
    Ok(())
}

fn comm_error(comm: &Comm, e: Error) -> Error {
    comm.fail(&e);
    e
}

/// Makes `first` wait for the work enqueued so far on every stream of `others`.
fn join(first: CUstream, others: &[CUstream]) -> Result<()> {
    for &o in others {
        event_edge(o, first)?;
    }
    Ok(())
}

/// Makes every stream of `others` wait for the work enqueued so far on `first`.
fn join_back(first: CUstream, others: &[CUstream]) -> Result<()> {
    for &o in others {
        event_edge(first, o)?;
    }
    Ok(())
}

/// `to` waits for what `from` has enqueued (an event recorded on `from`; capturable).
fn event_edge(from: CUstream, to: CUstream) -> Result<()> {
    let cuda = |r: sys::CUresult, what: &str| {
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error { code: crate::abi::ncclUnhandledCudaError, message: format!("{what}: {r:?}") })
        }
    };
    let mut ev = std::ptr::null_mut();
    // SAFETY: plain driver calls on the caller's streams; the event is destroyed after use (the
    // driver keeps it alive until the recorded work completes).
    unsafe {
        cuda(sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32), "cuEventCreate")?;
        let r = cuda(sys::cuEventRecord(ev, from), "cuEventRecord")
            .and_then(|_| cuda(sys::cuStreamWaitEvent(to, ev, 0), "cuStreamWaitEvent"));
        sys::cuEventDestroy_v2(ev);
        r
    }
}

fn real_group(name: &[u8]) -> Result<()> {
    let real = crate::forward::real()?;
    // SAFETY: ncclGroupStart / ncclGroupEnd take nothing and return ncclResult_t.
    let f: unsafe extern "C" fn() -> std::ffi::c_int = unsafe { real.get(name)? };
    // SAFETY: as above.
    match unsafe { f() } {
        0 => Ok(()),
        c => Err(Error::internal(format!("the real NCCL's {} returned {c}", String::from_utf8_lossy(name)))),
    }
}
