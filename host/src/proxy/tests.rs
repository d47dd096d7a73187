//! The proxy's loop on a fake engine and FIFO, its idle policy and its thread's pinning.

use super::idle::Backoff;
use super::serve::{Core, Triggers};
use super::service::{cpu_set, pin_current_thread, report_dropped};
use super::{IdleAction, IdlePolicy};
use crate::error::{Error, Result};
use crate::transport::engine::{Engine, MemoryRegion};
use crate::transport::ipc::{HostCounter, Target};
use mscclpp_device::trigger::{ProxyTrigger, Request, kind};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stream of the fake engine: enqueued operations complete when the test says so
/// (`complete_one`) or when the proxy queries the stream (never when `stuck`); marks and
/// device writes take effect as they complete.
#[derive(Default)]
struct FakeEngine {
    in_flight: VecDeque<Op>,
    marks_done: u64,
    device_writes: Vec<(u64, u64)>,
    copies_done: usize,
    stuck: bool,
}

#[derive(Debug)]
enum Op {
    Copy,
    Write(u64, u64),
    Mark(u64),
}

impl FakeEngine {
    fn complete_one(&mut self) {
        match self.in_flight.pop_front() {
            Some(Op::Copy) => self.copies_done += 1,
            Some(Op::Write(a, v)) => self.device_writes.push((a, v)),
            Some(Op::Mark(m)) => self.marks_done = m,
            None => {}
        }
    }
}

impl Engine for FakeEngine {
    fn copy(&mut self, _dst: u64, _src: u64, _bytes: usize) -> Result<()> {
        self.in_flight.push_back(Op::Copy);
        Ok(())
    }
    fn write_device(&mut self, addr: u64, value: u64) -> Result<()> {
        self.in_flight.push_back(Op::Write(addr, value));
        Ok(())
    }
    fn atomic_add(&mut self, _addr: u64, _value: u64) -> Result<()> {
        self.in_flight.push_back(Op::Copy);
        Ok(())
    }
    fn place_mark(&mut self, mark: u64) -> Result<()> {
        self.in_flight.push_back(Op::Mark(mark));
        Ok(())
    }
    fn marks_done(&self) -> u64 {
        self.marks_done
    }
    fn is_idle(&mut self) -> Result<bool> {
        while !self.stuck && !self.in_flight.is_empty() {
            self.complete_one();
        }
        Ok(self.in_flight.is_empty())
    }
}

/// A FIFO fed by the test; `forever` is pushed again and again after the queue (a kernel
/// that never stops pushing).
#[derive(Default)]
struct FakeFifo {
    queue: VecDeque<ProxyTrigger>,
    forever: Option<ProxyTrigger>,
    position: u64,
}

impl Triggers for FakeFifo {
    fn peek(&self) -> Option<ProxyTrigger> {
        self.queue.front().copied().or(self.forever)
    }
    fn complete(&mut self) {
        self.queue.pop_front();
        self.position += 1;
    }
    fn position(&self) -> u64 {
        self.position
    }
}

const A: MemoryRegion = MemoryRegion { base: 0x10_0000, bytes: 4096 };
const B: MemoryRegion = MemoryRegion { base: 0x20_0000, bytes: 4096 };

/// A core with memories A (0) and B (1), a host semaphore (0) and a device one (1).
fn core(engine: FakeEngine, timeout: Duration) -> (Core<FakeEngine>, Arc<AtomicU64>) {
    let word = Arc::new(AtomicU64::new(0));
    // SAFETY: the word is 8-aligned and lives as long as its owner, the Arc itself.
    let counter = unsafe { HostCounter::from_raw(word.as_ptr(), word.clone()) };
    let sems = vec![Target::Host(counter), Target::Device(0x30_0000)];
    (Core::new(engine, vec![A, B], sems, timeout), word)
}

fn transfer(k: u8, src_memory: u32, semaphore: u32) -> ProxyTrigger {
    let request =
        Request::Transfer { kind: k, dst_offset: 128, src_offset: 0, size: 64, dst_memory: 1, src_memory, semaphore };
    ProxyTrigger::encode(request).unwrap()
}

fn serve(core: &mut Core<FakeEngine>, fifo: &mut FakeFifo, stop: bool) -> Option<Error> {
    let stop = AtomicBool::new(stop);
    core.serve(fifo, &stop, &mut Backoff::new(IdlePolicy::default()), "GPU 0")
}

/// Runs `f` on a thread and fails the test if it has not returned within 20 s (instead of
/// hanging the test run).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the proxy's stop blocked instead of returning an error")
}

#[test]
fn an_error_drains_the_stream_and_delivers_earlier_signals() {
    let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
    let mut fifo = FakeFifo::default();
    // A valid copy + host signal (waits for its copy), then a copy from an unknown memory.
    fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 0));
    fifo.queue.push_back(transfer(kind::DATA, 7, 0));
    let e = serve(&mut core, &mut fifo, false).expect("the bad request is reported").to_string();
    assert!(e.contains("FIFO position 1") && e.contains("memory id 7"), "{e}");
    assert_eq!(counter.load(Ordering::Acquire), 1, "the valid copy's signal was dropped");
    assert!(core.mapped.engine.in_flight.is_empty(), "work left in flight after the error");
    assert_eq!(core.mapped.engine.copies_done, 1);
}

#[test]
fn stop_waits_for_copies_even_without_pending_host_signals() {
    let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
    let mut fifo = FakeFifo::default();
    // A copy signalled through the device semaphore: no host signal is pending at stop.
    fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 1));
    fifo.queue.push_back(transfer(kind::DATA, 0, 0));
    assert!(serve(&mut core, &mut fifo, true).is_none());
    assert_eq!(fifo.position, 2, "triggers pushed before the stop are served");
    assert!(core.mapped.engine.in_flight.is_empty(), "copies still in flight when stop returned");
    assert_eq!(core.mapped.engine.copies_done, 2);
    assert_eq!(core.mapped.engine.device_writes, vec![(0x30_0000, 1)]);
    assert_eq!(counter.load(Ordering::Acquire), 0);
}

#[test]
fn host_signals_wait_for_their_copies_and_keep_their_order() {
    let (mut core, counter) = core(FakeEngine::default(), Duration::from_secs(5));
    // No copy in flight: written at once, without a mark.
    core.execute(transfer(kind::FLAG, 0, 0).decode()).unwrap();
    assert_eq!(counter.load(Ordering::Acquire), 1);
    assert!(core.mapped.engine.in_flight.is_empty());
    // After a copy: a mark, and the signal waits for it; a second signal queues behind.
    core.execute(transfer(kind::DATA | kind::FLAG, 0, 0).decode()).unwrap();
    core.execute(transfer(kind::FLAG, 0, 0).decode()).unwrap();
    assert_eq!(counter.load(Ordering::Acquire), 1);
    core.mapped.engine.complete_one(); // the copy
    core.mapped.poll_signals();
    assert_eq!(counter.load(Ordering::Acquire), 1, "delivered before its copy completed");
    core.mapped.engine.complete_one(); // the mark
    core.mapped.poll_signals();
    assert_eq!(counter.load(Ordering::Acquire), 3);
    // Sync: everything completes before it returns.
    core.execute(transfer(kind::DATA | kind::FLAG | kind::SYNC, 0, 0).decode()).unwrap();
    assert_eq!(counter.load(Ordering::Acquire), 4);
    assert!(core.mapped.engine.in_flight.is_empty());
}

#[test]
fn stop_is_bounded_when_a_kernel_keeps_pushing() {
    let (e, counter, served, in_flight) = bounded(|| {
        let (mut core, counter) = core(FakeEngine::default(), Duration::from_millis(50));
        let mut fifo = FakeFifo { forever: Some(transfer(kind::DATA | kind::FLAG, 0, 0)), ..Default::default() };
        let e = serve(&mut core, &mut fifo, true).map(|e| e.to_string());
        (e, counter.load(Ordering::Acquire), fifo.position, core.mapped.engine.in_flight.len())
    });
    let e = e.expect("an error when the drain runs out of time");
    assert!(e.contains("still pushing"), "{e}");
    assert!(served > 0);
    // What was served before the deadline is complete and signalled.
    assert_eq!(in_flight, 0);
    assert_eq!(counter, served);
}

#[test]
fn stop_is_bounded_when_the_stream_never_completes() {
    let (e, counter) = bounded(|| {
        let engine = FakeEngine { stuck: true, ..Default::default() };
        let (mut core, counter) = core(engine, Duration::from_millis(50));
        let mut fifo = FakeFifo::default();
        fifo.queue.push_back(transfer(kind::DATA | kind::FLAG, 0, 0));
        (serve(&mut core, &mut fifo, true).map(|e| e.to_string()), counter.load(Ordering::Acquire))
    });
    let e = e.expect("an error when the stream does not complete in time");
    assert!(e.contains("still had work in flight"), "{e}");
    // Its copy never completed: the signal must not be written.
    assert_eq!(counter, 0);
}

/// Triggers whose memory and semaphore are another rank's go through its transport (TCP
/// over loopback, on host memory here); a Sync returns only once they have landed there.
#[test]
fn remote_routes_go_through_their_transport_and_sync_waits_for_them() {
    use super::serve::{Memory, Route, Semaphore};
    use crate::transport::Transport;
    use crate::transport::tcp::{HostLanding, HostRegion, HostSource, Link, RemoteMemory, TcpConfig, TcpTransport};
    let pair = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    };
    let ((a_out, b_in), (b_out, a_in)) = (pair(), pair());
    let cfg = TcpConfig { chunk_bytes: 1000, slots: 3, timeout: Duration::from_secs(20) };
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let src = HostRegion::from_slice(&data);
    let (dst, sem) = (HostRegion::filled(8192, 0xA5), Arc::new(AtomicU64::new(0)));
    // This rank (0): its proxy sends; rank 1 only receives.
    let t0 = TcpTransport::start(
        Link { peer: 1, outgoing: a_out, incoming: a_in, peer_max_chunk: 1000 },
        HostSource::new(vec![src.clone()], 3, 1000).unwrap(),
        HostLanding::new(vec![], vec![], 3, 1000).unwrap(),
        RemoteMemory { regions: vec![8192], semaphores: 1 },
        &cfg,
    )
    .unwrap();
    let mut t1 = TcpTransport::start(
        Link { peer: 0, outgoing: b_out, incoming: b_in, peer_max_chunk: 1000 },
        HostSource::new(vec![], 3, 1000).unwrap(),
        HostLanding::new(vec![dst.clone()], vec![sem.clone()], 3, 1000).unwrap(),
        RemoteMemory::default(),
        &cfg,
    )
    .unwrap();
    let mapped = [MemoryRegion { base: src.addr(), bytes: 8192 }];
    let mut core =
        Core::new(FakeEngine::default(), mapped.to_vec(), vec![Target::Device(0x30_0000)], Duration::from_secs(5));
    core.remote.push(Box::new(t0));
    core.dirty.push(false);
    core.memories.push(Memory { route: Route::Remote(0), index: 0, bytes: 8192 }); // id 1
    core.semaphores.push(Semaphore { route: Route::Remote(0), index: 0 }); // id 1
    let put = |size: u32, src_offset: u32, dst_offset: u32, kind: u8| {
        let r = Request::Transfer { kind, dst_offset, src_offset, size, dst_memory: 1, src_memory: 0, semaphore: 1 };
        ProxyTrigger::encode(r).unwrap().decode()
    };
    core.execute(put(5000, 100, 200, kind::DATA | kind::FLAG)).unwrap();
    core.execute(
        ProxyTrigger::encode(Request::AtomicAdd { dst_offset: 8000, value: 9, dst_memory: 1 }).unwrap().decode(),
    )
    .unwrap();
    core.execute(put(8, 0, 0, kind::DATA | kind::FLAG | kind::SYNC)).unwrap();
    // The Sync returned: everything is at rank 1 now, with both signals.
    let got = dst.to_vec();
    assert_eq!(&got[200..5200], &data[100..5100]);
    assert_eq!(&got[..8], &data[..8]);
    assert!(got[8..200].iter().chain(&got[5200..8000]).all(|&b| b == 0xA5));
    assert_eq!(dst.read_u64(8000), Some(u64::from_le_bytes([0xA5; 8]).wrapping_add(9)));
    assert_eq!(sem.load(Ordering::Acquire), 2);
    // Nothing went to the mapped path, and its device semaphore was not signalled.
    assert_eq!(core.mapped.engine.copies_done, 0);
    assert!(core.mapped.engine.device_writes.is_empty());
    // Out of the remote memory's bounds: refused in the proxy, before anything is sent.
    let e = core.execute(put(200, 0, 8100, kind::DATA)).unwrap_err().to_string();
    assert!(e.contains("outside memory 1"), "{e}");
    // A remote memory cannot be a put's source.
    let back = Request::Transfer {
        kind: kind::DATA,
        dst_offset: 0,
        src_offset: 0,
        size: 8,
        dst_memory: 1,
        src_memory: 1,
        semaphore: 0,
    };
    let back = ProxyTrigger::encode(back).unwrap().decode();
    assert!(core.execute(back).unwrap_err().to_string().contains("another rank's"));
    // Stopping flushes and closes the transport; rank 1 closes its side meanwhile.
    let closer = std::thread::spawn(move || t1.close(Instant::now() + Duration::from_secs(10)));
    core.finish(Instant::now() + Duration::from_secs(10), "GPU 0").unwrap();
    closer.join().unwrap().unwrap();
}

#[test]
fn pinning_applies_to_the_calling_thread_and_bad_cpus_are_refused() {
    use nix::sched::{CpuSet, sched_getaffinity};
    use nix::unistd::Pid;
    assert!(cpu_set(CpuSet::count()).unwrap_err().to_string().contains("proxy CPU"));
    // Pin a fresh thread to the first CPU this process may use.
    let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let cpu = (0..CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false)).unwrap();
    let got = std::thread::spawn(move || {
        pin_current_thread(cpu, &cpu_set(cpu).unwrap()).unwrap();
        sched_getaffinity(Pid::from_raw(0)).unwrap()
    })
    .join()
    .unwrap();
    let on: Vec<usize> = (0..CpuSet::count()).filter(|&c| got.is_set(c).unwrap_or(false)).collect();
    assert_eq!(on, vec![cpu]);
    // A CPU outside the allowed set is an error, not a panic.
    if let Some(bad) = (0..CpuSet::count()).find(|&c| !allowed.is_set(c).unwrap_or(true)) {
        let r = std::thread::spawn(move || pin_current_thread(bad, &cpu_set(bad).unwrap())).join().unwrap();
        assert!(r.is_err());
    }
}

#[test]
fn a_dropped_error_is_written_out() {
    let mut out = Vec::new();
    report_dropped(&mut out, &Error::proxy_from("GPU 0 FIFO position 3", Error::proxy("boom"))).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(s.contains("unreported error") && s.contains("boom"), "{s}");
}

#[test]
fn idle_policy_spins_then_sleeps_in_capped_doubling_steps() {
    let p = IdlePolicy::default();
    let us = Duration::from_micros;
    assert_eq!(p.action(us(0), 0), IdleAction::Spin);
    assert_eq!(p.action(us(99), 0), IdleAction::Spin);
    let steps: Vec<_> = (0..10).map(|n| p.action(us(100), n)).collect();
    let expect = [1, 2, 4, 8, 16, 32, 50, 50, 50, 50].map(|u| IdleAction::Sleep(us(u)));
    assert_eq!(steps, expect);
    // Never longer than the cap, whatever the counts (no overflow).
    for n in [31, 32, 63, 64, u32::MAX] {
        assert_eq!(p.action(Duration::MAX, n), IdleAction::Sleep(us(50)));
    }
    let huge = IdlePolicy { spin: Duration::ZERO, min_sleep: Duration::MAX, max_sleep: us(80) };
    assert_eq!(huge.action(us(1), 5), IdleAction::Sleep(us(80)));
    // Spinning forever never sleeps; a zero step yields instead.
    assert_eq!(IdlePolicy::always_spin().action(Duration::from_secs(3600), 9), IdleAction::Spin);
    let zero = IdlePolicy { spin: Duration::ZERO, min_sleep: Duration::ZERO, max_sleep: us(50) };
    assert_eq!(zero.action(us(5), 3), IdleAction::Yield);
    // The wake-up cost of an idle proxy is bounded by the cap: the sum of the steps until
    // the cap grows, then the cap per step.
    let mut b = Backoff::new(IdlePolicy { spin: Duration::ZERO, ..p });
    let t = Instant::now();
    for _ in 0..20 {
        b.wait();
    }
    assert_eq!(b.sleeps, 20);
    assert!(t.elapsed() >= us(1 + 2 + 4 + 8 + 16 + 32 + 14 * 50));
    b.reset();
    assert_eq!((b.sleeps, b.since), (0, None));
}
