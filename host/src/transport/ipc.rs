//! The CUDA IPC transport: the peer's memory and semaphore counters are mapped into this process
//! (or are this rank's own), so a put is a copy on the proxy's stream ([`Engine`]), a signal a
//! stream write into the peer's GPU memory or a store into host memory the peer's GPU reads (once
//! the copies before it have completed), and a flush waits for the stream. Only between processes
//! of one machine.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::engine::{Engine, MemoryRegion};
use super::{RemoteSpan, Transport};
use crate::error::{Error, Result};
use crate::memory::PinnedBuffer;

/// A 64-bit semaphore counter in host memory that a GPU reads (device-mapped pinned memory), as
/// the proxy thread writes it. Holds what keeps the memory alive.
#[derive(Clone)]
pub struct HostCounter {
    word: *const AtomicU64,
    _owner: Arc<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the word is plain host memory kept alive by `_owner` (Send + Sync); it is accessed
// only through atomics.
unsafe impl Send for HostCounter {}

// SAFETY: as above.
unsafe impl Sync for HostCounter {}

impl std::fmt::Debug for HostCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostCounter({:p})", self.word)
    }
}

/// The device address of `offset..offset + bytes` of registered memory `id`, checked to lie inside
/// it (the values come from a GPU trigger and are not trusted).
fn resolve(memories: &[MemoryRegion], id: u32, offset: u64, bytes: u64, what: &str) -> Result<u64> {
    let m = memories
        .get(id as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} memory id {id} is not registered")))?;
    let end = offset.checked_add(bytes);
    match end {
        Some(end) if end <= m.bytes => m.base.checked_add(offset).ok_or_else(|| {
            Error::InvalidArgument(format!("{what} offset {offset} overflows memory {id} at {:#x}", m.base))
        }),
        _ => Err(Error::InvalidArgument(format!(
            "{what} range {offset}..+{bytes} outside memory {id} of {} bytes",
            m.bytes
        ))),
    }
}

/// Checks that a u64 counter at byte `offset` lies inside a buffer of `len` bytes and is
/// 8-aligned. The end is computed with checked arithmetic: an offset close to `usize::MAX` must
/// not wrap around and pass the bound.
fn check_counter_offset(offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(8) {
        Some(end) if offset.is_multiple_of(8) && end <= len => Ok(()),
        _ => Err(Error::InvalidArgument(format!("host counter at offset {offset} of a {len}-byte pinned buffer"))),
    }
}

impl HostCounter {
    /// The u64 at byte `offset` of `buf` (8-aligned, inside the buffer).
    pub fn pinned(buf: Arc<PinnedBuffer>, offset: usize) -> Result<Self> {
        check_counter_offset(offset, buf.len())?;
        // SAFETY: inside the buffer (checked), which `_owner` keeps alive.
        let word = unsafe { buf.host_ptr().add(offset) }.cast::<AtomicU64>().cast_const();
        Ok(Self { word, _owner: buf })
    }

    /// A word of host memory owned by `owner`.
    ///
    /// # Safety
    /// `word` must be 8-aligned, valid for reads and writes as long as `owner` lives, and the
    /// counter of one semaphore (written only by the proxy it is registered with).
    pub unsafe fn from_raw(word: *mut u64, owner: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        Self { word: word.cast::<AtomicU64>().cast_const(), _owner: owner }
    }

    /// The current value.
    pub fn load(&self) -> u64 {
        // SAFETY: valid while `_owner` lives (constructors' contracts).
        unsafe { (*self.word).load(Ordering::Acquire) }
    }

    fn store(&self, value: u64) {
        // Partner: the GPU's acquire load in Host2DeviceSemaphore::wait/poll.
        // SAFETY: as for `load`.
        unsafe { (*self.word).store(value, Ordering::Release) }
    }
}

/// Where a Flag request writes.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// A device address, written by the stream.
    Device(u64),
    /// A host word, written by the proxy thread.
    Host(HostCounter),
}

/// Host-counter signals waiting for the copies before them: the order-keeping part of the proxy,
/// apart from the GPU.
///
/// Work enqueued since the last mark makes the next host signal place a new mark first; the
/// signal is written at once if nothing is pending and the stream has passed every mark, else it
/// waits (in request order) for its mark.
#[derive(Debug, Default)]
struct PendingSignals {
    /// Marks placed so far.
    marks_issued: u64,
    /// Whether work was enqueued since the last mark.
    unmarked_work: bool,
    /// (mark, semaphore index, value), in request order.
    pending: VecDeque<(u64, usize, u64)>,
}

impl PendingSignals {
    /// Work was enqueued on the stream.
    fn work(&mut self) {
        self.unmarked_work = true;
    }

    /// The mark to place before a host signal, if work was enqueued since the last one. The mark
    /// counts as placed: if placing it fails, the proxy stops and drains by waiting for the
    /// whole stream instead.
    fn mark_for_signal(&mut self) -> Option<u64> {
        if !self.unmarked_work {
            return None;
        }
        self.unmarked_work = false;
        self.marks_issued += 1;
        Some(self.marks_issued)
    }

    /// A host signal after [`Self::mark_for_signal`]: `Some` to write at once, `None` if it waits.
    fn signal(&mut self, sem: usize, value: u64, marks_done: u64) -> Option<(usize, u64)> {
        if self.pending.is_empty() && marks_done >= self.marks_issued {
            Some((sem, value))
        } else {
            self.pending.push_back((self.marks_issued, sem, value));
            None
        }
    }

    /// Hands the waiting signals whose mark is at most `done` to `deliver`, in order.
    fn retire(&mut self, done: u64, mut deliver: impl FnMut(usize, u64)) {
        while let Some(&(mark, sem, value)) = self.pending.front() {
            if mark > done {
                break;
            }
            deliver(sem, value);
            self.pending.pop_front();
        }
    }

    /// The stream has completed everything: every waiting signal goes out.
    fn retire_all(&mut self, deliver: impl FnMut(usize, u64)) {
        self.retire(u64::MAX, deliver);
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The CUDA IPC transport: memories mapped into this process, copied between on the proxy's
/// stream; semaphore counters written by the stream (in GPU memory) or by the thread once the
/// copies before them completed (in host memory).
pub(crate) struct IpcTransport<E> {
    pub(crate) engine: E,
    regions: Vec<MemoryRegion>,
    /// (where the counter is, signals sent so far).
    semaphores: Vec<(Target, u64)>,
    signals: PendingSignals,
}

impl<E: Engine> IpcTransport<E> {
    pub(crate) fn new(engine: E, regions: Vec<MemoryRegion>, semaphores: Vec<Target>) -> Self {
        Self {
            engine,
            regions,
            semaphores: semaphores.into_iter().map(|t| (t, 0)).collect(),
            signals: PendingSignals::default(),
        }
    }

    pub(crate) fn address(&self, region: u32, offset: u64, bytes: u64, what: &str) -> Result<u64> {
        resolve(&self.regions, region, offset, bytes, what)
    }

    fn deliver(semaphores: &[(Target, u64)], sem: usize, value: u64) {
        if let Some((Target::Host(c), _)) = semaphores.get(sem) {
            c.store(value);
        }
    }

    /// Whether host signals are waiting for their copies (the proxy keeps polling the marks).
    pub(crate) fn has_pending_signals(&self) -> bool {
        !self.signals.is_empty()
    }

    /// Writes the pending host signals whose copies have completed.
    pub(crate) fn poll_signals(&mut self) {
        if !self.signals.is_empty() {
            let done = self.engine.marks_done();
            let sems = &self.semaphores;
            self.signals.retire(done, |s, v| Self::deliver(sems, s, v));
        }
    }

    /// Waits (until `deadline`) for the stream to complete everything enqueued, then writes every
    /// pending host signal. Past the deadline, only the signals whose marks the stream has passed
    /// are written, and the result is an error (saying it waited `waited`).
    pub(crate) fn finish(&mut self, deadline: Instant, waited: Duration, gpu: &str) -> Result<()> {
        let drained = loop {
            match self.engine.is_idle() {
                Ok(true) => break Ok(()),
                Ok(false) if Instant::now() >= deadline => {
                    break Err(Error::proxy(format!(
                        "{gpu}: the proxy stream still had work in flight {} after the stop",
                        crate::error::fmt_duration(waited)
                    )));
                }
                Ok(false) => std::thread::yield_now(),
                Err(e) => break Err(Error::proxy_from(format!("{gpu}: draining the proxy stream"), e)),
            }
        };
        let sems = &self.semaphores;
        if drained.is_ok() {
            self.signals.retire_all(|s, v| Self::deliver(sems, s, v));
        } else {
            self.signals.retire(self.engine.marks_done(), |s, v| Self::deliver(sems, s, v));
        }
        drained
    }
}

impl<E: Engine + Send> Transport for IpcTransport<E> {
    fn describe(&self) -> String {
        "CUDA IPC".into()
    }

    fn put(&mut self, dst: RemoteSpan, src: u64, bytes: u64) -> Result<()> {
        let dst = self.address(dst.region, dst.offset, bytes, "destination")?;
        self.engine.copy(dst, src, bytes as usize)?;
        self.signals.work();
        Ok(())
    }

    fn signal(&mut self, semaphore: u32) -> Result<()> {
        let (target, sent) = self
            .semaphores
            .get_mut(semaphore as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("semaphore id {semaphore} is not registered")))?;
        *sent += 1;
        let value = *sent;
        match target {
            // Stream-ordered after the copies above (partner: the peer's acquire load in
            // Host2DeviceSemaphore::wait).
            Target::Device(addr) => {
                let addr = *addr;
                self.engine.write_device(addr, value)?;
            }
            Target::Host(_) => {
                if let Some(mark) = self.signals.mark_for_signal() {
                    self.engine.place_mark(mark)?;
                }
                let done = self.engine.marks_done();
                if let Some((s, v)) = self.signals.signal(semaphore as usize, value, done) {
                    Self::deliver(&self.semaphores, s, v);
                }
            }
        }
        Ok(())
    }

    fn atomic_add(&mut self, dst: RemoteSpan, value: u64) -> Result<()> {
        if !dst.offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {}", dst.offset)));
        }
        let addr = self.address(dst.region, dst.offset, 8, "atomic add")?;
        self.engine.atomic_add(addr, value)?;
        self.signals.work();
        Ok(())
    }

    fn flush(&mut self, deadline: Instant) -> Result<()> {
        // Partner of the kernel's wait for the tail: the caller publishes only once complete.
        while !self.engine.is_idle().map_err(|e| Error::proxy_from("draining the proxy stream", e))? {
            if Instant::now() >= deadline {
                return Err(Error::proxy("the proxy stream did not complete its copies before the flush deadline"));
            }
            std::hint::spin_loop();
        }
        let sems = &self.semaphores;
        self.signals.retire_all(|s, v| Self::deliver(sems, s, v));
        Ok(())
    }

    fn poll(&mut self) -> Result<()> {
        self.poll_signals();
        Ok(())
    }

    fn close(&mut self, deadline: Instant) -> Result<()> {
        let waited = deadline.saturating_duration_since(Instant::now());
        self.finish(deadline, waited, "CUDA IPC")
    }
}

#[cfg(test)]
mod tests {
    use super::{MemoryRegion, PendingSignals, check_counter_offset, resolve};
    use mscclpp_device::trigger::{MAX_MEMORY_ID, MAX_SEMAPHORE_ID, ProxyTrigger, Request, kind};
    use proptest::prelude::*;

    proptest! {
        /// Any 128 bits the GPU may leave in a slot decode without panicking to fields in range,
        /// and the proxy's bounds check accepts only ranges inside a registered memory.
        #[test]
        fn arbitrary_triggers_decode_and_resolve_safely(
            fst: u64,
            snd: u64,
            regions in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..4),
        ) {
            let memories: Vec<MemoryRegion> = regions
                .iter()
                .map(|&(base, bytes)| MemoryRegion { base: base.min(u64::MAX - bytes), bytes })
                .collect();
            let check = |id: u32, offset: u32, bytes: u64| {
                if let Ok(addr) = resolve(&memories, id, offset.into(), bytes, "test") {
                    let m = memories[id as usize];
                    assert!(addr >= m.base && addr - m.base + bytes <= m.bytes);
                }
            };
            match (ProxyTrigger { fst, snd }).decode() {
                request @ Request::Transfer { kind: k, size, src_offset, dst_offset, src_memory, dst_memory, semaphore } => {
                    prop_assert!(k != 0 && k & !(kind::DATA | kind::FLAG | kind::SYNC) == 0);
                    prop_assert!(src_memory <= MAX_MEMORY_ID && dst_memory <= MAX_MEMORY_ID);
                    prop_assert!(semaphore <= MAX_SEMAPHORE_ID);
                    // What decodes re-encodes to the same request.
                    let again = ProxyTrigger::encode(request);
                    prop_assert_eq!(again.map(|t| t.decode()), Ok((ProxyTrigger { fst, snd }).decode()));
                    check(src_memory, src_offset, size as u64);
                    check(dst_memory, dst_offset, size as u64);
                }
                Request::AtomicAdd { dst_offset, dst_memory, .. } => {
                    prop_assert!(dst_memory <= MAX_MEMORY_ID);
                    check(dst_memory, dst_offset, 8);
                }
            }
        }

        #[test]
        fn resolve_never_wraps(base: u64, bytes: u64, offset: u32, len: u64) {
            let m = [MemoryRegion { base, bytes }];
            if let Ok(addr) = resolve(&m, 0, offset.into(), len, "test") {
                prop_assert!(u64::from(offset).checked_add(len).is_some_and(|end| end <= bytes));
                prop_assert_eq!(Some(addr), base.checked_add(u64::from(offset)));
            }
        }
    }

    #[test]
    fn counter_offset_is_bounded_without_wrapping() {
        assert!(check_counter_offset(0, 8).is_ok());
        assert!(check_counter_offset(8, 16).is_ok());
        assert!(check_counter_offset(8, 15).is_err());
        assert!(check_counter_offset(4, 64).is_err());
        // `offset + 8` wraps to 0 here: the bound must still reject it (and not overflow).
        assert!(check_counter_offset(usize::MAX - 7, 64).is_err());
        assert!(check_counter_offset(usize::MAX - 7, usize::MAX).is_err());
        assert!(check_counter_offset(usize::MAX, usize::MAX).is_err());
    }

    #[test]
    fn pending_signals_retire_in_order_up_to_the_mark() {
        let mut p = PendingSignals::default();
        assert_eq!(p.mark_for_signal(), None);
        assert_eq!(p.signal(0, 1, 0), Some((0, 1)));
        p.work();
        assert_eq!(p.mark_for_signal(), Some(1));
        assert_eq!(p.signal(0, 2, 0), None);
        // Nothing new since mark 1, but an earlier signal waits: this one queues behind it.
        assert_eq!(p.mark_for_signal(), None);
        assert_eq!(p.signal(1, 1, 1), None);
        p.work();
        assert_eq!(p.mark_for_signal(), Some(2));
        assert_eq!(p.signal(0, 3, 1), None);
        let mut got = Vec::new();
        p.retire(0, |s, v| got.push((s, v)));
        assert!(got.is_empty());
        p.retire(1, |s, v| got.push((s, v)));
        assert_eq!(got, vec![(0, 2), (1, 1)]);
        p.retire_all(|s, v| got.push((s, v)));
        assert_eq!(got, vec![(0, 2), (1, 1), (0, 3)]);
        assert!(p.is_empty());
    }
}
