//! The proxy's loop: each request goes to the transport that serves its memory or semaphore.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mscclpp_device::trigger::{ProxyTrigger, Request, kind};

use super::idle::Backoff;
use crate::error::{Error, Result};
use crate::fifo::Fifo;
use crate::transport::engine::Engine;
use crate::transport::ipc::IpcTransport;
use crate::transport::{RemoteSpan, Transport};

/// Where triggers come from: the FIFO (a fake in the tests).
pub(super) trait Triggers {
    /// The trigger at the consumer's position, if published.
    fn peek(&self) -> Option<ProxyTrigger>;
    /// Marks the current trigger handled.
    fn complete(&mut self);
    /// Triggers handled so far.
    fn position(&self) -> u64;
}

impl Triggers for Fifo {
    fn peek(&self) -> Option<ProxyTrigger> {
        Fifo::peek(self)
    }
    fn complete(&mut self) {
        // Called after a peek that returned the trigger: there is one to complete.
        let _ = Fifo::complete(self);
    }
    fn position(&self) -> u64 {
        Fifo::position(self)
    }
}

/// Where a registered memory or semaphore is served: mapped here (CUDA IPC, the proxy's own
/// stream) or by remote transport `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    Mapped,
    Remote(usize),
}

/// A memory as triggers name it: where it is served, its index there, and its size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Memory {
    pub(super) route: Route,
    pub(super) index: u32,
    pub(super) bytes: u64,
}

/// A semaphore as triggers name it: where it is served and its index there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Semaphore {
    pub(super) route: Route,
    pub(super) index: u32,
}

/// The proxy's logic: executes requests on their transports (the mapped one over an [`Engine`],
/// and the remote ones), and drains them at the end.
pub(super) struct Core<E> {
    pub(super) mapped: IpcTransport<E>,
    pub(super) remote: Vec<Box<dyn Transport>>,
    /// Per remote transport: used since the last Sync.
    pub(super) dirty: Vec<bool>,
    pub(super) memories: Vec<Memory>,
    pub(super) semaphores: Vec<Semaphore>,
    pub(super) drain_timeout: Duration,
    pub(super) flush_timeout: Duration,
}

/// Why a proxy loop ended.
#[derive(Debug)]
enum Ended {
    /// Told to stop, with the FIFO empty.
    Stopped,
    /// A request failed, or the drain ran past its deadline.
    Failed(Error),
}

/// One error from several (the first, with the others' text after it).
fn combine(mut errors: Vec<Error>) -> Result<()> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let first = errors.remove(0);
            let rest: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::proxy(format!("{first}; then {}", rest.join("; then "))))
        }
    }
}

impl<E: Engine + Send> Core<E> {
    /// A core whose memories and semaphores are all mapped (ids are their indices).
    #[cfg(test)]
    pub(super) fn new(
        engine: E,
        memories: Vec<crate::transport::engine::MemoryRegion>,
        semaphores: Vec<crate::transport::ipc::Target>,
        drain_timeout: Duration,
    ) -> Self {
        let mems =
            memories.iter().enumerate().map(|(i, m)| Memory { route: Route::Mapped, index: i as u32, bytes: m.bytes });
        let sems = (0..semaphores.len()).map(|i| Semaphore { route: Route::Mapped, index: i as u32 });
        Self {
            memories: mems.collect(),
            semaphores: sems.collect(),
            mapped: IpcTransport::new(engine, memories, semaphores),
            remote: Vec::new(),
            dirty: Vec::new(),
            drain_timeout,
            flush_timeout: super::DEFAULT_FLUSH_TIMEOUT,
        }
    }

    fn transport(&mut self, route: Route) -> &mut dyn Transport {
        match route {
            Route::Mapped => &mut self.mapped,
            Route::Remote(i) => {
                self.dirty[i] = true;
                self.remote[i].as_mut()
            }
        }
    }

    /// Reports the first remote transport that failed (a lost peer, a refused message).
    fn poll_remote(&mut self, gpu: &str) -> Option<Error> {
        self.remote
            .iter_mut()
            .find_map(|t| t.poll().err().map(|e| Error::proxy_from(format!("{gpu}: {}", t.describe()), e)))
    }

    /// Serves `fifo` until `stop` is set and the FIFO is empty, or a request fails, then drains
    /// ([`Self::finish`]). Returns the first error. Once `stop` is seen, triggers still arriving
    /// are served only until the drain deadline.
    pub(super) fn serve(
        &mut self,
        fifo: &mut impl Triggers,
        stop: &AtomicBool,
        idle: &mut Backoff,
        gpu: &str,
    ) -> Option<Error> {
        let mut deadline: Option<Instant> = None;
        let ended = loop {
            self.mapped.poll_signals();
            if let Some(e) = self.poll_remote(gpu) {
                break Ended::Failed(e);
            }
            if deadline.is_none() && stop.load(Ordering::Acquire) {
                deadline = Some(Instant::now() + self.drain_timeout);
            }
            match fifo.peek() {
                Some(t) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break Ended::Failed(Error::proxy(format!(
                            "{gpu}: kernels still pushing triggers {} after the proxy was told to stop; \
                             stopped at FIFO position {}",
                            crate::error::fmt_duration(self.drain_timeout),
                            fifo.position()
                        )));
                    }
                    idle.reset();
                    let pos = fifo.position();
                    if let Err(e) = self.execute(t.decode()) {
                        break Ended::Failed(Error::proxy_from(format!("{gpu} FIFO position {pos}"), e));
                    }
                    fifo.complete();
                }
                None if deadline.is_some() => break Ended::Stopped,
                // A signal is waiting for its copy: keep polling the marks.
                None if self.mapped.has_pending_signals() => std::hint::spin_loop(),
                None => idle.wait(),
            }
        };
        // On error as at stop: nothing may stay in flight, nothing pending may be dropped.
        let drained = self.finish(Instant::now() + self.drain_timeout, gpu);
        match (ended, drained) {
            (Ended::Failed(e), Err(d)) => Some(Error::proxy(format!("{e}; then {d}"))),
            (Ended::Failed(e), Ok(())) => Some(e),
            (Ended::Stopped, Err(d)) => Some(d),
            (Ended::Stopped, Ok(())) => None,
        }
    }

    /// Drains every transport until `deadline`: the stream completes and the pending host
    /// signals are written (see [`IpcTransport::finish`]); each remote transport flushes what it was
    /// given since the last Sync, and closes.
    pub(super) fn finish(&mut self, deadline: Instant, gpu: &str) -> Result<()> {
        let mut errors = Vec::new();
        if let Err(e) = self.mapped.finish(deadline, self.drain_timeout, gpu) {
            errors.push(e);
        }
        // What was issued since the last Sync must land before the end; the rest already has.
        let flushed: Vec<Result<()>> = self
            .remote
            .iter_mut()
            .zip(&mut self.dirty)
            .map(|(t, dirty)| if std::mem::take(dirty) { t.flush(deadline) } else { Ok(()) })
            .collect();
        // Every peer hears of the end before this proxy waits for any of theirs.
        for t in &mut self.remote {
            t.start_close();
        }
        for (t, flushed) in self.remote.iter_mut().zip(flushed) {
            // Close even when the flush failed: the transport's threads end either way.
            let closed = t.close(deadline);
            if let Err(e) = flushed.and(closed) {
                errors.push(Error::proxy_from(format!("{gpu}: closing {}", t.describe()), e));
            }
        }
        combine(errors)
    }

    /// Registered memory `id`, with `offset..offset + bytes` checked to lie inside it.
    fn memory(&self, id: u32, offset: u32, bytes: u64, what: &str) -> Result<Memory> {
        let m = *self
            .memories
            .get(id as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("{what} memory id {id} is not registered")))?;
        match u64::from(offset).checked_add(bytes) {
            Some(end) if end <= m.bytes => Ok(m),
            _ => Err(Error::InvalidArgument(format!(
                "{what} range {offset}..+{bytes} outside memory {id} of {} bytes",
                m.bytes
            ))),
        }
    }

    /// Waits until everything issued so far has completed on every transport used since the
    /// last Sync.
    fn flush_all(&mut self) -> Result<()> {
        let deadline = crate::bootstrap::after(self.flush_timeout);
        self.mapped.flush(deadline)?;
        for (t, dirty) in self.remote.iter_mut().zip(self.dirty.iter_mut()) {
            if std::mem::take(dirty) {
                t.flush(deadline).map_err(|e| Error::proxy_from(format!("flushing {}", t.describe()), e))?;
            }
        }
        Ok(())
    }

    pub(super) fn execute(&mut self, req: Request) -> Result<()> {
        match req {
            Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                if k & kind::DATA != 0 && size > 0 {
                    let bytes = size as u64;
                    let src = self.memory(src_memory, src_offset, bytes, "source")?;
                    let dst = self.memory(dst_memory, dst_offset, bytes, "destination")?;
                    if src.route != Route::Mapped {
                        return Err(Error::InvalidArgument(format!(
                            "source memory id {src_memory} is another rank's: a put reads memory of this process"
                        )));
                    }
                    let src = self.mapped.address(src.index, u64::from(src_offset), bytes, "source")?;
                    let to = RemoteSpan { region: dst.index, offset: u64::from(dst_offset) };
                    self.transport(dst.route).put(to, src, bytes)?;
                }
                if k & kind::FLAG != 0 {
                    let s = *self
                        .semaphores
                        .get(semaphore as usize)
                        .ok_or_else(|| Error::InvalidArgument(format!("semaphore id {semaphore} is not registered")))?;
                    self.transport(s.route).signal(s.index)?;
                }
                if k & kind::SYNC != 0 {
                    self.flush_all()?;
                }
            }
            Request::AtomicAdd { value, dst_offset, dst_memory } => {
                if dst_offset % 8 != 0 {
                    return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {dst_offset}")));
                }
                let dst = self.memory(dst_memory, dst_offset, 8, "atomic add")?;
                let to = RemoteSpan { region: dst.index, offset: u64::from(dst_offset) };
                self.transport(dst.route).atomic_add(to, value)?;
            }
        }
        Ok(())
    }
}
