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
//! This file holds the transport the proxy drives; the threads are `sender.rs` (with the ack
//! reader) and `receiver.rs`, over the socket helpers of `socket.rs`; what they share with this
//! side is in `shared.rs`.
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
mod receiver;
mod sender;
mod shared;
mod socket;
pub mod wire;

use std::collections::VecDeque;
use std::io::{self, BufReader};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use connect::{ConnectOptions, Link, connect_peers};
pub use memory::{HostLanding, HostRegion, HostSource, HostSpan, LandingMemory, Outgoing, SourceMemory, check_span};

use self::receiver::ReceiverLoop;
use self::sender::{SenderLoop, ack_loop};
use self::shared::{Cmd, OUT_FLUSH, POLL, QUEUE, READ_BUFFER, SMALL_PAYLOAD, Shared};
use self::wire::HEADER_LEN;
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
        // The command queue outlives the sender's error: a `send` that finds it closed then
        // finds the error recorded too, and reports it rather than "the sender thread ended".
        let sender_thread = move || {
            run_thread(&s2, || sender.run(&rx));
            drop(rx);
        };
        t.sender = Some(spawn(format!("mscclpp-tcp-tx{peer}"), Box::new(sender_thread))?);
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

#[cfg(test)]
mod tests;
