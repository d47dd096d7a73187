//! The connections of a [`TcpBootstrap`](super::TcpBootstrap) after the rendezvous: the star to
//! rank 0 and the ring made then, and the connections opened on first use; one reader thread per
//! connection, the thread that accepts connections from other ranks, and rank 0's reports of
//! lost ranks (see the module documentation of [`super`], "Topology" and "A dead rank").

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::inbox::Inbox;
use super::rendezvous::{HANDSHAKE_WAIT, HandshakeGate, Introduced, connect_handshake, send_frame, server_proof};
use super::{BootstrapConfig, is_timeout, lock};
use crate::error::{Error, Result};
use crate::frame::{self, FrameError, Intro, Kind, PACK_OVERHEAD};

/// How long a closing rank may spend handing its goodbye to one peer's socket.
const GOODBYE_TIMEOUT: Duration = Duration::from_millis(200);
/// How often the accepting thread looks whether the bootstrap is closing (closing also wakes it
/// at once, by shutting its listener down).
const ACCEPT_POLL: Duration = Duration::from_millis(500);

/// One connection, as written to (reads happen on its reader thread, on a clone of the socket).
pub(super) struct Link {
    stream: Mutex<TcpStream>,
    /// The socket's descriptor, to shut it down without waiting for a writer's lock
    /// ([`Net::sever`]); valid as long as `stream` is.
    fd: std::os::fd::RawFd,
}

#[derive(Default)]
struct Conns {
    /// Every connection, for the goodbyes.
    all: Vec<Arc<Link>>,
    readers: Vec<JoinHandle<()>>,
    /// The accepting thread, and its listener (a second handle, to wake it when closing).
    acceptor: Option<(JoinHandle<()>, TcpListener)>,
    /// Set when the bootstrap closes: no connection is added after it.
    closed: bool,
}

/// The connections of one rank and what they share with their threads.
pub(super) struct Net {
    pub(super) cfg: BootstrapConfig,
    pub(super) inbox: Inbox,
    /// The operation timeout (changed by `set_timeout`); writes use it too.
    timeout: Mutex<Duration>,
    /// Every rank's listening address (rank 0's is empty: every rank has a connection to it).
    table: Vec<String>,
    /// Per peer, the connection this rank writes to it on: the first one made with it, by either
    /// side. Every connection is read, so a peer's frames arrive in the order it wrote them on
    /// its own choice of connection.
    out: Vec<OnceLock<Arc<Link>>>,
    /// Per peer, held while this rank opens a connection to it (one attempt at a time).
    opening: Vec<Mutex<()>>,
    conns: Mutex<Conns>,
    /// Tells the accepting thread to stop.
    stop: AtomicBool,
}

impl Net {
    pub(super) fn new(cfg: &BootstrapConfig, table: Vec<String>) -> Arc<Self> {
        let n = cfg.rank.world_size;
        Arc::new(Self {
            cfg: cfg.clone(),
            inbox: Inbox::new(n, cfg.max_queued),
            timeout: Mutex::new(cfg.timeout),
            table,
            out: (0..n).map(|_| OnceLock::new()).collect(),
            opening: (0..n).map(|_| Mutex::new(())).collect(),
            conns: Mutex::new(Conns::default()),
            stop: AtomicBool::new(false),
        })
    }

    fn me(&self) -> usize {
        self.cfg.rank.rank
    }

    /// The local address of this rank's connections (to rank 0, or for rank 0 to rank 1): the
    /// interface the other ranks reach it through.
    pub(super) fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.out.iter().find_map(|l| l.get().and_then(|l| lock(&l.stream).local_addr().ok())).map(|a| a.ip())
    }

    /// How many connections this rank holds (both of a pair opened from both sides at once
    /// count): what the star and ring keep small.
    #[cfg(test)]
    pub(super) fn connections(&self) -> usize {
        lock(&self.conns).all.len()
    }

    pub(super) fn timeout(&self) -> Duration {
        *lock(&self.timeout)
    }

    /// Changes the timeout of later operations and of writes on every connection.
    pub(super) fn set_timeout(&self, timeout: Duration) -> Result<()> {
        *lock(&self.timeout) = timeout;
        for link in &lock(&self.conns).all {
            lock(&link.stream)
                .set_write_timeout(Some(timeout))
                .map_err(|source| Error::Io { context: "setting a connection's write timeout".into(), source })?;
        }
        Ok(())
    }

    /// Takes on a connection with `peer` that [`Inbox::opening`] counted and whose handshake
    /// succeeded: starts its reader, and makes it the one this rank writes to `peer` on unless
    /// there already is one. On failure the count is taken back.
    pub(super) fn adopt(self: &Arc<Self>, peer: usize, stream: TcpStream) -> Result<()> {
        let io = move |source| Error::Io { context: format!("setting up the connection to rank {peer}"), source };
        let r = (|| {
            stream.set_nodelay(true).map_err(io)?;
            stream.set_read_timeout(None).map_err(io)?;
            stream.set_write_timeout(Some(self.timeout())).map_err(io)?;
            let read_half = stream.try_clone().map_err(io)?;
            let fd = stream.as_raw_fd();
            let link = Arc::new(Link { stream: Mutex::new(stream), fd });
            let mut conns = lock(&self.conns);
            if conns.closed {
                return Err(Error::Protocol("the bootstrap is closing".into()));
            }
            let net = self.clone();
            let reader = std::thread::Builder::new()
                .name(format!("bootstrap-rx-{peer}"))
                .spawn(move || net.read(peer, read_half))
                .map_err(io)?;
            conns.readers.push(reader);
            conns.all.push(link.clone());
            drop(conns);
            let _ = self.out[peer].set(link);
            Ok(())
        })();
        if r.is_err() {
            self.inbox.opening_failed(peer);
        }
        r
    }

    /// The connection to write to `peer` on, opened now if there is none yet.
    fn link(self: &Arc<Self>, peer: usize, deadline: Instant) -> Result<Arc<Link>> {
        if let Some(l) = self.out.get(peer).and_then(OnceLock::get) {
            return Ok(l.clone());
        }
        let Some(opening) = self.opening.get(peer) else {
            return Err(Error::Protocol(format!("no connection to rank {peer}")));
        };
        let _one_at_a_time = lock(opening);
        if let Some(l) = self.out[peer].get() {
            return Ok(l.clone());
        }
        if let Some(why) = self.inbox.gone(peer) {
            return Err(Error::PeerLost { peer, detail: why });
        }
        self.open(peer, deadline)?;
        self.out[peer].get().cloned().ok_or_else(|| Error::Protocol(format!("no connection to rank {peer}")))
    }

    /// Opens a connection to `peer` at its address from the table and proves the token to it.
    pub(super) fn open(self: &Arc<Self>, peer: usize, deadline: Instant) -> Result<()> {
        let a = self.table.get(peer).map(String::as_str).unwrap_or("");
        let addr: SocketAddr =
            a.parse().map_err(|_| Error::Protocol(format!("address table: bad address {a:?} for rank {peer}")))?;
        let timeout = self.timeout();
        self.inbox.opening(peer);
        let r = (|| {
            // One attempt: the peer listens since before the rendezvous ended, so a refusal
            // means it is gone.
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { after: timeout, waiting_for: format!("rank {peer} at {addr}") });
            }
            let s = TcpStream::connect_timeout(&addr, left).map_err(|e| match e.kind() {
                _ if is_timeout(&e) => Error::Timeout { after: timeout, waiting_for: format!("rank {peer} at {addr}") },
                io::ErrorKind::ConnectionRefused => {
                    Error::PeerLost { peer, detail: format!("its address {addr} refused the connection (it exited?)") }
                }
                _ => Error::Io { context: format!("connecting to rank {peer} at {addr}"), source: e },
            })?;
            let intro = Intro { rank: self.me(), world: self.cfg.rank.world_size, listen: String::new() };
            let mut cfg = self.cfg.clone();
            cfg.timeout = timeout;
            connect_handshake(&s, &cfg, Kind::Connect, &intro.encode(), deadline, peer)?;
            Ok(s)
        })();
        match r {
            Ok(s) => self.adopt(peer, s),
            Err(e) => {
                self.inbox.opening_failed(peer);
                Err(e)
            }
        }
    }

    /// Writes one frame to `peer` (opening a connection to it first if there is none). A write
    /// that fails leaves the connection unusable (a frame may be half written): the peer is
    /// lost from then on.
    pub(super) fn send(
        self: &Arc<Self>,
        peer: usize,
        kind: Kind,
        seq: u64,
        data: &[u8],
        deadline: Instant,
    ) -> Result<()> {
        let link = self.link(peer, deadline)?;
        let mut stream = lock(&link.stream);
        let Err(e) = frame::write_frame(&mut *stream, &self.cfg.token, kind, seq, data) else { return Ok(()) };
        drop(stream);
        let known = self.inbox.gone(peer);
        let why = format!("sending failed: {e}");
        self.died(peer, &why);
        Err(if is_timeout(&e) {
            Error::Timeout { after: self.timeout(), waiting_for: format!("rank {peer} to take {} bytes", data.len()) }
        } else {
            Error::PeerLost { peer, detail: known.unwrap_or(why) }
        })
    }

    /// Writes one frame to each of `peers` on their existing connections, best effort (reports
    /// and aborts from rank 0): peers whose connection is busy are served last, so that one slow
    /// peer does not hold up the others; failures are left to the readers to notice.
    pub(super) fn tell(&self, peers: impl Iterator<Item = usize>, kind: Kind, seq: u64, payload: &[u8]) {
        let bytes = frame::encode(&self.cfg.token, kind, seq, payload);
        let mut busy = Vec::new();
        for peer in peers {
            let Some(link) = self.out.get(peer).and_then(OnceLock::get) else { continue };
            match link.stream.try_lock() {
                Ok(mut s) => {
                    let _ = io::Write::write_all(&mut *s, &bytes);
                }
                Err(_) => busy.push(link.clone()),
            }
        }
        for link in busy {
            let _ = io::Write::write_all(&mut *lock(&link.stream), &bytes);
        }
    }

    /// A connection with `peer` ended without a goodbye, or the peer broke the protocol: it is
    /// dead. Rank 0 tells every other rank; the loss hooks run.
    pub(super) fn died(&self, peer: usize, why: &str) {
        if !self.inbox.lose(peer, why) {
            return;
        }
        if self.me() == 0 {
            let payload = frame::encode_lost(peer, why);
            self.tell((1..self.cfg.rank.world_size).filter(|&p| p != peer), Kind::Lost, 0, &payload);
        }
        self.inbox.run_hooks(peer, why);
    }

    /// Reads frames from `peer` on one connection until it ends.
    fn read(self: Arc<Self>, peer: usize, mut stream: TcpStream) {
        let (me, n) = (self.me(), self.cfg.rank.world_size);
        let max = self.cfg.max_frame.saturating_add(PACK_OVERHEAD);
        loop {
            match frame::read_frame(&mut stream, &self.cfg.token, max) {
                Ok(Some(f)) if f.kind == Kind::Goodbye => {
                    self.inbox.goodbye(peer, frame::decode_goodbye(&f.payload).unwrap_or(0));
                    // Nothing more goes to it on this connection: a write blocked on it (a large
                    // result it no longer reads) fails now instead of after the timeout.
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Ok(Some(f))
                    if matches!(f.kind, Kind::AllGather | Kind::Barrier | Kind::Message)
                        || (f.kind == Kind::Abort && peer == 0) =>
                {
                    if let Err(why) = self.inbox.push(peer, f) {
                        // Stop reading: the connection ends here, and receives from this peer
                        // fail with the reason once the frames already queued are taken.
                        let _ = stream.shutdown(Shutdown::Both);
                        self.died(peer, &why);
                        return;
                    }
                }
                Ok(Some(f)) if f.kind == Kind::Lost && peer == 0 => {
                    if let Some((rank, why)) = frame::decode_lost(&f.payload)
                        && rank != 0
                        && rank != me
                        && rank < n
                    {
                        let why = format!("rank 0 lost its connection to it: {why}");
                        if self.inbox.reported_dead(rank, &why) {
                            self.inbox.run_hooks(rank, &why);
                        }
                    }
                }
                Ok(Some(f)) => {
                    self.died(peer, &format!("unexpected {} frame after the rendezvous", f.kind.name()));
                    return;
                }
                Ok(None) => {
                    self.died(peer, "closed by the peer (it exited or was killed)");
                    return;
                }
                Err(FrameError::Io(source)) if source.kind() == io::ErrorKind::ConnectionReset => {
                    self.died(peer, "reset by the peer (it exited or was killed)");
                    return;
                }
                Err(FrameError::Io(source)) => {
                    self.died(peer, &source.to_string());
                    return;
                }
                Err(e) => {
                    self.died(peer, &e.to_string());
                    return;
                }
            }
        }
    }

    /// Starts the thread that accepts connections from other ranks on `listener`.
    pub(super) fn serve(self: &Arc<Self>, listener: TcpListener) -> Result<()> {
        let io = |source| Error::Io { context: "starting the thread that accepts connections".into(), source };
        let waker = listener.try_clone().map_err(io)?;
        let net = self.clone();
        let handle = std::thread::Builder::new()
            .name("bootstrap-accept".into())
            .spawn(move || net.accept_loop(&listener))
            .map_err(io)?;
        lock(&self.conns).acceptor = Some((handle, waker));
        Ok(())
    }

    fn accept_loop(self: Arc<Self>, listener: &TcpListener) {
        let (me, n) = (self.me(), self.cfg.rank.world_size);
        let mut gate = HandshakeGate::new(listener, self.cfg.token, Kind::Connect);
        while !self.stop.load(Ordering::SeqCst) {
            let next = gate.next(Instant::now() + ACCEPT_POLL, ACCEPT_POLL, |_| String::new());
            let Introduced { stream, from, intro, nonces } = match next {
                Ok(i) => i,
                Err(Error::Timeout { .. }) => continue,
                Err(_) => {
                    // Accepting failed: the listener was shut down (closing), or this process is
                    // out of file descriptors, say: try again shortly.
                    if !self.stop.load(Ordering::SeqCst) {
                        std::thread::sleep(ACCEPT_POLL);
                    }
                    continue;
                }
            };
            let peer = intro.rank;
            if intro.world != n || peer >= n || peer == me {
                gate.reject(from, format!("connected as rank {peer} of {}", intro.world));
                continue;
            }
            self.inbox.opening(peer);
            let proof = server_proof(&self.cfg.token, Kind::Connect, &nonces);
            let deadline = Instant::now() + HANDSHAKE_WAIT;
            if let Err(e) = send_frame(&stream, &self.cfg, Kind::Welcome, &proof, deadline, peer) {
                self.inbox.opening_failed(peer);
                gate.reject(from, e.to_string());
                continue;
            }
            // On failure `adopt` takes the count back; the peer then sees the connection end.
            let _ = self.adopt(peer, stream);
        }
    }

    /// Ends every connection now, without a goodbye, and takes no new one, so that every peer
    /// sees this rank as lost (its loss hooks run) while this rank's own do not. Waits for no
    /// lock or thread, so any thread may call it; [`Net::close`] still ends the threads.
    pub(super) fn sever(&self) {
        self.inbox.close();
        self.stop.store(true, Ordering::SeqCst);
        let links = {
            let mut c = lock(&self.conns);
            c.closed = true;
            if let Some((_, listener)) = &c.acceptor {
                // Refuse new connections at once (as in `close`, which still joins the thread).
                let _ = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Read);
            }
            c.all.clone()
        };
        for link in &links {
            // `link` keeps its stream, so the descriptor is still this socket's.
            let _ = nix::sys::socket::shutdown(link.fd, nix::sys::socket::Shutdown::Both);
        }
    }

    /// Closes every connection, after a goodbye carrying `completed` unless `goodbye` is false
    /// (a panicking rank: the peers should treat it as lost and abort their waits), and waits
    /// for the threads.
    pub(super) fn close(&self, goodbye: bool, completed: u64) {
        self.inbox.close();
        self.stop.store(true, Ordering::SeqCst);
        let acceptor = lock(&self.conns).acceptor.take();
        if let Some((thread, listener)) = acceptor {
            // On Linux, shutting a listening socket down wakes a poll(2) on it at once.
            let _ = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Read);
            let _ = thread.join();
        }
        let (links, readers) = {
            let mut c = lock(&self.conns);
            c.closed = true;
            (std::mem::take(&mut c.all), std::mem::take(&mut c.readers))
        };
        let bye = frame::encode_goodbye(completed);
        for link in &links {
            let mut stream = lock(&link.stream);
            if goodbye {
                let _ = stream.set_write_timeout(Some(GOODBYE_TIMEOUT));
                let _ = frame::write_frame(&mut *stream, &self.cfg.token, Kind::Goodbye, 0, &bye);
            }
            // Shutting the sockets down ends the reader threads' blocking reads.
            let _ = stream.shutdown(Shutdown::Both);
        }
        for r in readers {
            let _ = r.join();
        }
    }
}
