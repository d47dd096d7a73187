//! The TCP transport: port-channel operations between the proxies of two ranks over TCP.
//!
//! ```text
//!  rank a (proxy thread)        rank a                                 rank b
//!  put/signal/atomic/flush ──► sender thread ══ connection a→b ═══► receiver thread ──► landing
//!  (TcpTransport toward b)     stage chunk i+k (GPU: copy out)      read chunk i+1 (network)
//!                              send chunk i                          land chunk i (GPU: copy in)
//!                              ack reader   ◄═ acks, refusals ══════ (same connection)
//!                              receiver thread ◄═ connection b→a ═══ sender thread (rank b's)
//! ```
//!
//! Every pair of ranks has two connections, one per direction; each carries operations one way
//! and acknowledgements back. A [`TcpTransport`] owns both connections to its peer and three
//! threads:
//!
//! * the **sender** takes the proxy's operations in order. A put is cut into chunks of at most
//!   a staging slot ([`TcpConfig::chunk_bytes`], and no more than the peer accepts); each chunk
//!   is staged ([`SourceMemory::stage`]: on a GPU, a device-to-host copy into pinned memory)
//!   while earlier ones are being sent, so copying out overlaps the network. Host memory is not
//!   copied: the chunk goes to the socket from the region itself ([`Outgoing::InPlace`]). Either
//!   way a chunk has been read by the time anything after it is written, so once a flush returns
//!   the sources of the puts before it are no longer read. Signals, atomic adds and flushes queue
//!   behind the chunks before them, so they leave in order.
//! * the **receiver** reads the peer's operations. A put's header is checked against the
//!   registered regions *before* its payload is read. On a GPU the payload is read into a pinned
//!   slot and lands from there ([`LandingMemory::land`]: a host-to-device copy) while the next
//!   chunk is read into another slot; signals and atomic adds are issued after the landings
//!   before them, on the same stream. Into host memory the payload is read straight into the
//!   destination range ([`LandingMemory::direct`]), and signals and atomic adds take effect
//!   after it, on this thread. A flush is acknowledged only once every landing before it has
//!   completed.
//! * the **ack reader** takes the peer's acknowledgements (what [`Transport::flush`] waits
//!   for) and refusals.
//!
//! Any malformed, out-of-sequence or out-of-bounds message ends the channel: the receiver writes
//! nothing of it, tells the sender why (a `Fail` message, which the sender's next
//! [`Transport::poll`] or flush reports), and reports the error on its own side too. A
//! connection that closes without the `Close` message, or a peer silent in the middle of a
//! message or a flush for longer than [`TcpConfig::timeout`] (the bootstrap's timeout), fails the
//! transport with an error naming the peer. A put cut off that way in the middle of its payload
//! is never acknowledged; through a staging slot nothing of it lands, but read straight into host
//! memory the bytes that came before the cut stay in its destination range (and nowhere else).
//!
//! Connections are opened and authenticated by [`connect_peers`] (see [`connect`]): addresses
//! travel through the bootstrap, and each connection starts with a challenge-response under a key
//! derived from the session token. The wire format is in [`wire`].
//!
//! The memory sides are traits, so the whole transport (framing, bounds, ordering, handshakes)
//! runs on machines without GPUs with [`HostSource`] and [`HostLanding`]: its tests use real
//! sockets between threads and between processes. The GPU sides are [`cuda::CudaSource`] and
//! [`cuda::CudaLanding`].

pub mod connect;
pub mod cuda;
pub mod memory;
pub mod wire;

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use connect::{ConnectOptions, Link, connect_peers};
pub use memory::{HostLanding, HostRegion, HostSource, HostSpan, LandingMemory, Outgoing, SourceMemory, check_span};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{self, MsgFlags};

use self::wire::{HEADER_LEN, Header, MAX_FAIL_TEXT, Op};
use super::{RemoteSpan, Transport};
use crate::error::{Error, Result};

/// How a TCP transport stages and how long it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Bytes per staging slot: the largest chunk a put is cut into (default 1 MiB).
    pub chunk_bytes: usize,
    /// Staging slots per direction (default 8): how many chunks are in flight between copying
    /// and the network (on host memory, which is sent in place: how many are prepared ahead).
    pub slots: usize,
    /// How long a peer may stay silent in the middle of a message or a flush, and how long a
    /// write may block (default: the bootstrap's timeout, 30 s).
    pub timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self { chunk_bytes: 1 << 20, slots: 8, timeout: crate::bootstrap::env::DEFAULT_TIMEOUT }
    }
}

impl TcpConfig {
    /// Checks the sizes.
    pub fn validate(&self) -> Result<()> {
        if self.chunk_bytes == 0 || self.slots == 0 || self.timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "TCP transport configuration {self:?}: every field must be positive"
            )));
        }
        Ok(())
    }
}

/// What the peer registered for this transport: the sizes of its regions (by index) and how many
/// semaphores it has. Puts and atomic adds are checked against these before they are sent (and
/// by the peer again when they arrive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteMemory {
    /// Region sizes in bytes.
    pub regions: Vec<u64>,
    /// Number of semaphores.
    pub semaphores: u32,
}

/// How often blocked reads wake up to look at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// Payloads up to this size are copied into the outgoing buffer (one write with their header);
/// larger ones are written from where the source has them (its staging slot, or the region).
const SMALL_PAYLOAD: usize = 64 << 10;
/// The outgoing buffer is written out once it holds this much.
const OUT_FLUSH: usize = 256 << 10;
/// Operations the proxy may queue ahead of the sender thread before it waits.
const QUEUE: usize = 4096;
/// The receiver's read buffer.
const READ_BUFFER: usize = 16 << 10;

/// One operation for the sender thread.
#[derive(Debug)]
enum Cmd {
    Put { src: u64, dst: RemoteSpan, bytes: u64 },
    Signal(u32),
    AtomicAdd(RemoteSpan, u64),
    Flush(u64),
    Close,
}

/// What the threads of one transport share with the proxy side.
#[derive(Debug)]
struct Shared {
    peer: usize,
    /// The highest flush id the peer acknowledged.
    acked: AtomicU64,
    failed: AtomicBool,
    /// The first error, until it is reported; its text stays for later reports.
    error: Mutex<(Option<Error>, String)>,
    /// The peer's `Close` arrived (its side of the channel ended in order).
    peer_closed: AtomicBool,
    /// This side is closing: the peer's end of the connection may close now.
    closing: AtomicBool,
    /// The reading threads stop at their next wake-up.
    stop: AtomicBool,
}

impl Shared {
    fn fail(&self, e: Error) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if !self.failed.load(Ordering::Acquire) {
            g.1 = e.to_string();
            g.0 = Some(e);
            self.failed.store(true, Ordering::Release);
        }
    }

    fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        Err(g
            .0
            .take()
            .unwrap_or_else(|| Error::Protocol(format!("the TCP channel with rank {} failed: {}", self.peer, g.1))))
    }

    fn lost(&self, detail: impl Into<String>) -> Error {
        Error::PeerLost { peer: self.peer, detail: detail.into() }
    }
}

/// A port-channel transport toward one peer over TCP (see the module documentation). The proxy
/// thread drives it through [`Transport`]; dropping it without [`Transport::close`] stops it at
/// once.
pub struct TcpTransport {
    peer: usize,
    ops: Option<SyncSender<Cmd>>,
    shared: Arc<Shared>,
    flushes: u64,
    remote: RemoteMemory,
    sender: Option<JoinHandle<()>>,
    readers: Vec<JoinHandle<()>>,
    sockets: Vec<TcpStream>,
    /// The outcome of sending the Close message, once [`Transport::start_close`] has.
    close_sent: Option<Result<()>>,
    closed: bool,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport").field("peer", &self.peer).field("remote", &self.remote).finish_non_exhaustive()
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io { context: what.into(), source }
}

impl TcpTransport {
    /// Starts the transport over `link` (opened by [`connect_peers`]): puts read from `source`,
    /// the peer's operations land in `landing`, and `remote` is what the peer registered.
    pub fn start(
        link: Link,
        source: impl SourceMemory,
        landing: impl LandingMemory,
        remote: RemoteMemory,
        cfg: &TcpConfig,
    ) -> Result<Self> {
        cfg.validate()?;
        let peer = link.peer;
        let chunk = source.slot_bytes().min(usize::try_from(link.peer_max_chunk).unwrap_or(usize::MAX));
        if chunk == 0 {
            return Err(Error::Protocol(format!("rank {peer} accepts no put chunks (its largest is 0 bytes)")));
        }
        let setup = |what: &str| io_err(format!("setting up the TCP transport with rank {peer}: {what}"));
        for s in [&link.outgoing, &link.incoming] {
            s.set_nodelay(true).map_err(setup("TCP_NODELAY"))?;
            s.set_write_timeout(Some(cfg.timeout)).map_err(setup("write timeout"))?;
            s.set_read_timeout(Some(POLL)).map_err(setup("read timeout"))?;
        }
        let shared = Arc::new(Shared {
            peer,
            acked: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new((None, String::new())),
            peer_closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let sockets = vec![
            link.outgoing.try_clone().map_err(setup("cloning a socket"))?,
            link.incoming.try_clone().map_err(setup("cloning a socket"))?,
        ];
        let ack_sock = link.outgoing.try_clone().map_err(setup("cloning a socket"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let mut t = Self {
            peer,
            ops: Some(tx),
            shared: shared.clone(),
            flushes: 0,
            remote,
            sender: None,
            readers: Vec::new(),
            sockets,
            close_sent: None,
            closed: false,
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f).map_err(setup("starting a thread"))
        };
        let sender = SenderLoop {
            source,
            sock: link.outgoing,
            out: Vec::with_capacity(OUT_FLUSH + SMALL_PAYLOAD + HEADER_LEN),
            seq: 0,
            free: VecDeque::new(),
            pipe: VecDeque::new(),
            chunk,
            timeout: cfg.timeout,
            shared: shared.clone(),
        };
        let s2 = shared.clone();
        t.sender = Some(spawn(format!("mscclpp-tcp-tx{peer}"), Box::new(move || run_thread(&s2, || sender.run(rx))))?);
        let s3 = shared.clone();
        let ack = Box::new(move || run_thread(&s3, || ack_loop(ack_sock, &s3)));
        t.readers.push(spawn(format!("mscclpp-tcp-ack{peer}"), ack)?);
        let receiver = ReceiverLoop {
            // Small: it batches the reads of headers and small payloads, while a large payload
            // (past what is buffered) is read straight into its slot or its region, not copied
            // twice.
            reader: BufReader::with_capacity(
                READ_BUFFER,
                link.incoming.try_clone().map_err(setup("cloning a socket"))?,
            ),
            writer: link.incoming,
            landing,
            seq: 0,
            slot: 0,
            timeout: cfg.timeout,
            shared: shared.clone(),
        };
        let s4 = shared;
        t.readers.push(spawn(format!("mscclpp-tcp-rx{peer}"), Box::new(move || run_thread(&s4, || receiver.run())))?);
        Ok(t)
    }

    /// The peer's rank.
    pub fn peer(&self) -> usize {
        self.peer
    }

    fn send(&mut self, cmd: Cmd) -> Result<()> {
        self.shared.check()?;
        let Some(ops) = &self.ops else {
            return Err(Error::InvalidArgument(format!("the TCP transport to rank {} is closed", self.peer)));
        };
        if ops.send(cmd).is_err() {
            // The sender thread ended; it left its reason.
            self.shared.check()?;
            return Err(self.shared.lost("the sender thread ended"));
        }
        Ok(())
    }

    /// Stops every thread at once and joins them (without waiting for the peer).
    fn stop_threads(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.ops = None;
        self.shared.stop.store(true, Ordering::Release);
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        for h in self.readers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Runs a thread's body and records its error.
fn run_thread(shared: &Shared, body: impl FnOnce() -> Result<()>) {
    if let Err(e) = body() {
        shared.fail(e);
    }
}

/// Waits with a short spin, then yields, then sleeps, until `done` or `deadline`.
fn wait_until(deadline: Instant, mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    let mut spins = 0u32;
    loop {
        if done()? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        spins = spins.saturating_add(1);
        if spins < 2000 {
            std::hint::spin_loop();
        } else if spins < 4000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Transport for TcpTransport {
    fn describe(&self) -> String {
        format!("TCP to rank {}", self.peer)
    }

    fn put(&mut self, dst: RemoteSpan, src: u64, bytes: u64) -> Result<()> {
        check_span(&self.remote.regions, dst.region, dst.offset, bytes)
            .map_err(|e| Error::InvalidArgument(format!("put to rank {}: {e}", self.peer)))?;
        if bytes == 0 {
            return Ok(());
        }
        src.checked_add(bytes).ok_or_else(|| Error::InvalidArgument(format!("put source {src:#x}..+{bytes} wraps")))?;
        self.send(Cmd::Put { src, dst, bytes })
    }

    fn signal(&mut self, semaphore: u32) -> Result<()> {
        if semaphore >= self.remote.semaphores {
            return Err(Error::InvalidArgument(format!(
                "signal to rank {}: semaphore {semaphore} of {}",
                self.peer, self.remote.semaphores
            )));
        }
        self.send(Cmd::Signal(semaphore))
    }

    fn atomic_add(&mut self, dst: RemoteSpan, value: u64) -> Result<()> {
        if !dst.offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {}", dst.offset)));
        }
        check_span(&self.remote.regions, dst.region, dst.offset, 8)
            .map_err(|e| Error::InvalidArgument(format!("atomic add at rank {}: {e}", self.peer)))?;
        self.send(Cmd::AtomicAdd(dst, value))
    }

    fn flush(&mut self, deadline: Instant) -> Result<()> {
        self.flushes += 1;
        let id = self.flushes;
        self.send(Cmd::Flush(id))?;
        let shared = &self.shared;
        let started = Instant::now();
        let landed = wait_until(deadline, || {
            shared.check()?;
            Ok(shared.acked.load(Ordering::Acquire) >= id)
        })?;
        if landed {
            Ok(())
        } else {
            Err(Error::Timeout {
                // What this flush waited (its deadline's), not the transport's default timeout.
                after: started.elapsed(),
                waiting_for: format!("rank {} to confirm that the data sent to it over TCP has landed", self.peer),
            })
        }
    }

    fn poll(&mut self) -> Result<()> {
        self.shared.check()
    }

    fn start_close(&mut self) {
        if self.close_sent.is_none() {
            self.shared.closing.store(true, Ordering::Release);
            self.close_sent = Some(self.send(Cmd::Close));
            self.ops = None;
        }
    }

    fn close(&mut self, deadline: Instant) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let started = Instant::now();
        self.start_close();
        // A peer that already ended its side may have gone: this side's Close has nobody to tell.
        let sent = match self.close_sent.take() {
            Some(Err(_)) if self.shared.peer_closed.load(Ordering::Acquire) => Ok(()),
            other => other.unwrap_or(Ok(())),
        };
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        // The peer's side ends when its proxy stops: wait for its Close (its last landings done).
        let shared = &self.shared;
        let peer_closed = wait_until(deadline, || {
            Ok(shared.peer_closed.load(Ordering::Acquire) || shared.failed.load(Ordering::Acquire))
        });
        self.stop_threads();
        sent?;
        self.shared.check()?;
        match peer_closed {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Timeout {
                after: started.elapsed(),
                waiting_for: format!("rank {} to close its port channels toward this rank (TCP)", self.peer),
            }),
            Err(e) => Err(e),
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

// ---------------------------------------------------------------------------------------------
// The sender thread.

/// A message waiting to be written: a staged chunk (header, slot) or a header alone.
enum Pending {
    Chunk { header: Header, slot: usize, len: usize },
    Control(Header),
}

struct SenderLoop<S> {
    source: S,
    sock: TcpStream,
    /// Headers and small payloads, written out together.
    out: Vec<u8>,
    seq: u64,
    free: VecDeque<usize>,
    pipe: VecDeque<Pending>,
    chunk: usize,
    timeout: Duration,
    shared: Arc<Shared>,
}

impl<S: SourceMemory> SenderLoop<S> {
    fn run(mut self, cmds: Receiver<Cmd>) -> Result<()> {
        self.source.bind()?;
        self.free = (0..self.source.slots()).collect();
        loop {
            let cmd = if self.pipe.is_empty() {
                // About to wait for the proxy: what is buffered goes out now.
                self.write_out()?;
                match recv_spinning(&cmds) {
                    Some(c) => c,
                    None => return Ok(()), // the transport was dropped
                }
            } else {
                match cmds.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => {
                        self.emit_front()?;
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            };
            match cmd {
                Cmd::Put { src, dst, bytes } => {
                    let mut done = 0u64;
                    while done < bytes {
                        let len = (bytes - done).min(self.chunk as u64) as usize;
                        let slot = self.free_slot()?;
                        self.source.stage(slot, src + done, len)?;
                        let header = Header::new(Op::Put, dst.region, self.next_seq(), dst.offset + done, len as u64);
                        self.pipe.push_back(Pending::Chunk { header, slot, len });
                        done += len as u64;
                    }
                }
                Cmd::Signal(s) => self.control(Op::Signal, s, 0, 0),
                Cmd::AtomicAdd(d, v) => self.control(Op::AtomicAdd, d.region, d.offset, v),
                Cmd::Flush(id) => self.control(Op::Flush, 0, id, 0),
                Cmd::Close => {
                    self.control(Op::Close, 0, 0, 0);
                    while !self.pipe.is_empty() {
                        self.emit_front()?;
                    }
                    return self.write_out();
                }
            }
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    fn control(&mut self, op: Op, index: u32, offset: u64, len: u64) {
        let h = Header::new(op, index, self.next_seq(), offset, len);
        self.pipe.push_back(Pending::Control(h));
    }

    fn free_slot(&mut self) -> Result<usize> {
        loop {
            if let Some(s) = self.free.pop_front() {
                return Ok(s);
            }
            self.emit_front()?;
        }
    }

    /// Writes the oldest pending message (waiting for its chunk's copy first).
    fn emit_front(&mut self) -> Result<()> {
        match self.pipe.pop_front() {
            Some(Pending::Chunk { header, slot, len }) => {
                let chunk = self.source.staged(slot, len, Instant::now() + self.timeout)?;
                self.out.extend_from_slice(&header.encode());
                // Larger payloads go out with what is buffered (this header at least), in one
                // system call where the socket takes it all.
                match chunk {
                    Outgoing::Staged(data) if len <= SMALL_PAYLOAD => self.out.extend_from_slice(data),
                    Outgoing::InPlace(span) if len <= SMALL_PAYLOAD => span.with(|d| self.out.extend_from_slice(d)),
                    Outgoing::Staged(data) => write_all(&mut self.sock, &[&self.out, data], &self.shared)?,
                    Outgoing::InPlace(span) => send_in_place(&self.sock, &self.out, span, self.timeout, &self.shared)?,
                }
                if len > SMALL_PAYLOAD {
                    self.out.clear();
                }
                self.free.push_back(slot);
            }
            Some(Pending::Control(h)) => self.out.extend_from_slice(&h.encode()),
            None => {}
        }
        if self.out.len() >= OUT_FLUSH {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        if !self.out.is_empty() {
            write_all(&mut self.sock, &[&self.out], &self.shared)?;
            self.out.clear();
        }
        Ok(())
    }
}

/// The next command: a short spin first (a burst of operations keeps the thread awake), then a
/// blocking wait. `None` once the transport is gone.
fn recv_spinning(cmds: &Receiver<Cmd>) -> Option<Cmd> {
    for i in 0..2000u32 {
        match cmds.try_recv() {
            Ok(c) => return Some(c),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if i % 256 == 255 => std::thread::yield_now(),
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    cmds.recv().ok()
}

/// Writes all of `parts`, in order, gathering them into as few system calls as the socket allows.
fn write_all(sock: &mut TcpStream, parts: &[&[u8]], shared: &Shared) -> Result<()> {
    let mut slices: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
    let mut left = &mut slices[..];
    let mut r = Ok(());
    while left.iter().any(|s| !s.is_empty()) {
        match sock.write_vectored(left) {
            Ok(0) => {
                r = Err(io::Error::new(io::ErrorKind::WriteZero, "the socket took nothing"));
                break;
            }
            Ok(n) => io::IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    r.map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            stuck(sock.write_timeout().ok().flatten().unwrap_or_default(), shared)
        }
        _ => shared.lost(format!("sending over TCP: {e}")),
    })
}

/// A write that made no progress for `after`.
fn stuck(after: Duration, shared: &Shared) -> Error {
    Error::Timeout {
        after,
        waiting_for: format!("rank {} to take data sent over TCP (its receiver is stuck)", shared.peer),
    }
}

/// Writes `head`, then the bytes of `span`, from the region itself: each send is non-blocking and
/// made under the region's lock; waiting for the socket to take more happens without the lock
/// (a peer's landing into the same region goes on meanwhile). Fails after `timeout` without
/// progress, as a blocking write does.
fn send_in_place(sock: &TcpStream, head: &[u8], span: HostSpan<'_>, timeout: Duration, shared: &Shared) -> Result<()> {
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    let total = head.len() + span.len();
    let (mut sent, mut last) = (0, Instant::now());
    while sent < total {
        let r = span.with(|d| {
            let parts = match head.get(sent..) {
                Some(h) if !h.is_empty() => [io::IoSlice::new(h), io::IoSlice::new(d)],
                _ => [io::IoSlice::new(&d[sent - head.len()..]), io::IoSlice::new(&[])],
            };
            socket::sendmsg::<()>(sock.as_raw_fd(), &parts, &[], flags, None)
        });
        match r {
            Ok(0) => return Err(shared.lost("sending over TCP: the socket took nothing")),
            Ok(n) => {
                sent += n;
                last = Instant::now();
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let waited = last.elapsed();
                if waited >= timeout {
                    return Err(stuck(waited, shared));
                }
                wait_ready(sock, PollFlags::POLLOUT, (timeout - waited).min(POLL))
                    .map_err(|e| shared.lost(format!("waiting to send over TCP: {e}")))?;
            }
            Err(e) => return Err(shared.lost(format!("sending over TCP: {e}"))),
        }
    }
    Ok(())
}

/// Waits up to `wait` for `events` on `sock`; whether they came (an interrupted wait counts as
/// yes: the caller tries again).
fn wait_ready(sock: &TcpStream, events: PollFlags, wait: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(sock.as_fd(), events)];
    match poll(&mut fds, PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX)) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Reading with a stop flag and a timeout.

/// How [`read_full`] ended.
#[derive(Debug, PartialEq, Eq)]
enum ReadEnd {
    /// The buffer is full.
    Full,
    /// The connection closed after `got` bytes.
    Eof { got: usize },
    /// The stop flag was set.
    Stopped,
}

/// Fills `buf`, waking every [`POLL`] to look at `stop`. With `idle_ok`, waiting before the first
/// byte has no limit (an idle channel); otherwise, or once a message has started, `timeout`
/// without progress is an error.
fn read_full(r: &mut impl Read, buf: &mut [u8], idle_ok: bool, timeout: Duration, shared: &Shared) -> Result<ReadEnd> {
    read_with(buf.len(), idle_ok, timeout, shared, |got| r.read(&mut buf[got..]))
}

/// Reads a put's payload from `reader` straight into `span` (its destination): first what the
/// reader has buffered, then from the socket, under the region's lock only while the socket has
/// data (see [`recv_into`]). As [`read_full`] otherwise; a stream that ends or stalls part-way
/// leaves the bytes that came in the span.
fn read_into(
    reader: &mut BufReader<TcpStream>,
    span: HostSpan<'_>,
    timeout: Duration,
    shared: &Shared,
) -> Result<ReadEnd> {
    read_with(span.len(), false, timeout, shared, |got| {
        let buffered = reader.buffer();
        if buffered.is_empty() {
            return recv_into(reader.get_ref(), span, got);
        }
        let n = buffered.len().min(span.len() - got);
        span.with(|d| d[got..got + n].copy_from_slice(&buffered[..n]));
        reader.consume(n);
        Ok(n)
    })
}

/// Receives what the socket has, up to the rest of `span` from byte `got`, with a non-blocking
/// receive under the region's lock; when nothing has come, waits (without the lock) up to
/// [`POLL`] for data, then tries once more or reports `WouldBlock`. 0: the stream ended.
fn recv_into(sock: &TcpStream, span: HostSpan<'_>, got: usize) -> io::Result<usize> {
    let mut waited = false;
    loop {
        match span.with(|d| socket::recv(sock.as_raw_fd(), &mut d[got..], MsgFlags::MSG_DONTWAIT)) {
            Ok(n) => return Ok(n),
            Err(Errno::EAGAIN) if waited => return Err(io::ErrorKind::WouldBlock.into()),
            Err(Errno::EAGAIN) => waited = !wait_ready(sock, PollFlags::POLLIN, POLL)?,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The loop of [`read_full`]: `read_at(got)` reads some of the bytes from `got` on and says how
/// many (0: the stream ended; `WouldBlock` or `TimedOut`: nothing came for a while).
fn read_with(
    len: usize,
    idle_ok: bool,
    timeout: Duration,
    shared: &Shared,
    mut read_at: impl FnMut(usize) -> io::Result<usize>,
) -> Result<ReadEnd> {
    let mut got = 0;
    let mut last = Instant::now();
    while got < len {
        match read_at(got) {
            // This side shutting its sockets down reads as an end too: not the peer's doing.
            Ok(0) if shared.stop.load(Ordering::Acquire) => return Ok(ReadEnd::Stopped),
            Ok(0) => return Ok(ReadEnd::Eof { got }),
            Ok(n) => {
                got += n;
                last = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if shared.stop.load(Ordering::Acquire) {
                    return Ok(ReadEnd::Stopped);
                }
                if !(idle_ok && got == 0) && last.elapsed() >= timeout {
                    return Err(Error::Timeout {
                        after: timeout,
                        waiting_for: format!("rank {} to send the rest of a transport message", shared.peer),
                    });
                }
            }
            Err(e) => {
                if shared.stop.load(Ordering::Acquire) {
                    return Ok(ReadEnd::Stopped);
                }
                return Err(shared.lost(format!("reading from TCP: {e}")));
            }
        }
    }
    Ok(ReadEnd::Full)
}

// ---------------------------------------------------------------------------------------------
// The receiver thread.

struct ReceiverLoop<L> {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    landing: L,
    seq: u64,
    slot: usize,
    timeout: Duration,
    shared: Arc<Shared>,
}

impl<L: LandingMemory> ReceiverLoop<L> {
    fn run(mut self) -> Result<()> {
        let r = self.serve();
        // Whatever happened, nothing stays in flight into memory that may be freed next.
        let drained = self.landing.wait_all(Instant::now() + self.timeout);
        r.and(drained)
    }

    /// Ends the channel because of a bad message: tells the sender why, and fails here too.
    fn refuse(&mut self, why: String) -> Error {
        let text = why.as_bytes();
        let text = &text[..text.len().min(MAX_FAIL_TEXT as usize)];
        let mut msg = Header::new(Op::Fail, 0, 0, 0, text.len() as u64).encode().to_vec();
        msg.extend_from_slice(text);
        let _ = self.writer.write_all(&msg);
        Error::Protocol(format!(
            "rank {} sent a bad port-channel message over TCP: {why}; the channel is closed",
            self.shared.peer
        ))
    }

    fn serve(&mut self) -> Result<()> {
        self.landing.bind()?;
        let (slots, slot_bytes) = (self.landing.slots(), self.landing.slot_bytes() as u64);
        loop {
            let mut hb = [0u8; HEADER_LEN];
            match read_full(&mut self.reader, &mut hb, true, self.timeout, &self.shared)? {
                ReadEnd::Full => {}
                ReadEnd::Stopped => return Ok(()),
                ReadEnd::Eof { got: 0 } => {
                    return Err(self
                        .shared
                        .lost("the connection closed without the channel's close (the rank exited or was killed)"));
                }
                ReadEnd::Eof { got } => {
                    return Err(self.shared.lost(format!("the connection closed {got} bytes into a message header")));
                }
            }
            let h = match Header::decode(&hb) {
                Ok(h) => h,
                Err(f) => return Err(self.refuse(f.to_string())),
            };
            if !h.op.is_request() {
                return Err(self.refuse(format!("a {:?} reply on the request stream", h.op)));
            }
            if h.seq != self.seq {
                return Err(self.refuse(format!("message {} out of sequence (expected {})", h.seq, self.seq)));
            }
            self.seq += 1;
            match h.op {
                Op::Put => {
                    if let Err(e) = check_span(self.landing.regions(), h.index, h.offset, h.len) {
                        return Err(self.refuse(format!("put: {e}")));
                    }
                    if h.len == 0 || h.len > slot_bytes {
                        return Err(self.refuse(format!("put chunk of {} bytes (accepted: 1..={slot_bytes})", h.len)));
                    }
                    let len = h.len as usize;
                    // Straight into the destination where the landing memory offers it (host
                    // memory), else into a staging slot that then lands.
                    let (end, left) = if let Some(span) = self.landing.direct(h.index, h.offset, len)? {
                        let end = read_into(&mut self.reader, span, self.timeout, &self.shared)?;
                        (end, "the bytes that came are in the region; the put was never acknowledged")
                    } else {
                        let slot = self.slot;
                        self.slot = (self.slot + 1) % slots;
                        let buf = self.landing.slot(slot, Instant::now() + self.timeout)?;
                        let end = read_full(&mut self.reader, &mut buf[..len], false, self.timeout, &self.shared)?;
                        if end == ReadEnd::Full {
                            self.landing.land(slot, h.index, h.offset, len)?;
                        }
                        (end, "nothing of that put was written")
                    };
                    match end {
                        ReadEnd::Full => {}
                        ReadEnd::Stopped => return Ok(()),
                        ReadEnd::Eof { got } => {
                            return Err(self
                                .shared
                                .lost(format!("the connection closed {got} bytes into a put of {len}; {left}")));
                        }
                    }
                }
                Op::Signal => {
                    if h.index as usize >= self.landing.semaphores() {
                        let n = self.landing.semaphores();
                        return Err(self.refuse(format!("signal to semaphore {} of {n}", h.index)));
                    }
                    self.landing.signal(h.index)?;
                }
                Op::AtomicAdd => {
                    let span = check_span(self.landing.regions(), h.index, h.offset, 8);
                    if let Err(e) = span.and_then(|()| {
                        if h.offset.is_multiple_of(8) { Ok(()) } else { Err(format!("unaligned offset {}", h.offset)) }
                    }) {
                        return Err(self.refuse(format!("atomic add: {e}")));
                    }
                    self.landing.atomic_add(h.index, h.offset, h.len)?;
                }
                Op::Flush => {
                    self.landing.wait_all(Instant::now() + self.timeout)?;
                    let ack = Header::new(Op::Ack, 0, 0, h.offset, 0).encode();
                    self.writer.write_all(&ack).map_err(|e| self.shared.lost(format!("acknowledging a flush: {e}")))?;
                }
                Op::Close => {
                    self.landing.wait_all(Instant::now() + self.timeout)?;
                    self.shared.peer_closed.store(true, Ordering::Release);
                    return Ok(());
                }
                Op::Ack | Op::Fail => unreachable!("replies were refused above"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ack reader.

fn ack_loop(sock: TcpStream, shared: &Shared) -> Result<()> {
    let mut r = BufReader::new(sock);
    loop {
        let mut hb = [0u8; HEADER_LEN];
        match read_full(&mut r, &mut hb, true, Duration::MAX, shared)? {
            ReadEnd::Full => {}
            ReadEnd::Stopped => return Ok(()),
            // This side is closing, or the peer ended its side in order (its Close came on the
            // other connection): its end of this one may go now. Sending to it again fails then.
            ReadEnd::Eof { .. }
                if shared.closing.load(Ordering::Acquire) || shared.peer_closed.load(Ordering::Acquire) =>
            {
                return Ok(());
            }
            ReadEnd::Eof { .. } => return Err(shared.lost("the connection closed (the rank exited or was killed)")),
        }
        let h = Header::decode(&hb)
            .map_err(|f| Error::Protocol(format!("rank {} sent a bad reply over TCP: {f}", shared.peer)))?;
        match h.op {
            Op::Ack => {
                shared.acked.fetch_max(h.offset, Ordering::AcqRel);
            }
            Op::Fail if h.len <= MAX_FAIL_TEXT => {
                let mut text = vec![0u8; h.len as usize];
                let got = read_full(&mut r, &mut text, false, Duration::from_secs(5), shared);
                let text = if matches!(got, Ok(ReadEnd::Full)) {
                    String::from_utf8_lossy(&text).into_owned()
                } else {
                    "(its reason was cut off)".to_string()
                };
                return Err(Error::Protocol(format!(
                    "rank {} refused this rank's port-channel data: {text}",
                    shared.peer
                )));
            }
            op => return Err(Error::Protocol(format!("rank {} sent a bad reply over TCP: {op:?}", shared.peer))),
        }
    }
}

#[cfg(test)]
mod tests;
