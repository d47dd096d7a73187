//! The rendezvous: how the ranks of a [`TcpBootstrap`](super::TcpBootstrap) connect, with the
//! challenge-response handshake on every new connection (see the module documentation of
//! [`super`], "Topology" and "Frames, tokens and the handshake").

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::env::{self, BootstrapConfig};
use super::is_timeout;
use crate::auth::{self, Proof};
use crate::error::{Error, Result};
use crate::frame::{self, Frame, FrameError, Intro, Kind, Token, decode_table, encode_table};

/// How long a freshly accepted connection may take to answer the challenge before it is dropped
/// as a stray (bounded by the rendezvous deadline too). Real ranks answer at once.
pub(super) const HANDSHAKE_WAIT: Duration = Duration::from_secs(2);
/// Handshakes read at once, each on its own short-lived thread. At the cap the oldest pending
/// handshake is dropped to make room, so a flood of idle connections cannot lock real ranks out.
pub(super) const MAX_PENDING_HANDSHAKES: usize = 128;
/// Stack of a handshake thread (it reads one small frame).
pub(super) const HANDSHAKE_STACK: usize = 256 << 10;
/// How often the accept loop looks at finished handshakes while no connection arrives.
pub(super) const ACCEPT_SLICE: Duration = Duration::from_millis(10);
/// Bytes of a challenge nonce.
pub(super) const NONCE_LEN: usize = 32;
/// Largest hello / connect payload accepted (a rank number, a world size and an address).
pub(super) const HELLO_MAX: usize = 1024;
/// Largest reason a [`Kind::Refused`] frame carries (longer ones are cut).
pub(super) const REFUSAL_MAX: usize = 256;
/// How long the accepting side may spend handing a refusal to the socket.
const REFUSAL_WAIT: Duration = Duration::from_millis(100);
/// What the connecting side's error says after a [`Kind::Refused`] frame (and how [`join_root`]
/// knows rank 0 gave up waiting, however long this rank thinks it took).
const REFUSED: &str = "dropped this connection during its handshake";

/// Reads and writes on a blocking socket, each call bounded by what is left until `deadline`.
pub(super) struct Deadlined<'a> {
    pub(super) stream: &'a TcpStream,
    pub(super) deadline: Instant,
}

impl Deadlined<'_> {
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() { Err(io::Error::from(io::ErrorKind::TimedOut)) } else { Ok(left) }
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.stream).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(super) fn resolve(addr: &str) -> Result<SocketAddr> {
    let io = |source| Error::Io { context: format!("resolving the bootstrap address {addr:?}"), source };
    addr.to_socket_addrs().map_err(io)?.next().ok_or_else(|| io(io::Error::other("no address found")))
}

/// `rank 3`, `ranks 1, 2 and 5`.
pub(super) fn ranks_list(ranks: &[usize]) -> String {
    match ranks {
        [] => "no rank".into(),
        [r] => format!("rank {r}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|r| r.to_string()).collect();
            format!("ranks {} and {last}", init.join(", "))
        }
    }
}

pub(super) fn missing(streams: &[Option<TcpStream>], range: std::ops::Range<usize>) -> Vec<usize> {
    range.filter(|&r| streams[r].is_none()).collect()
}

/// Connections dropped during the rendezvous, for the timeout message.
#[derive(Default)]
pub(super) struct Rejected {
    pub(super) count: usize,
    pub(super) last: Option<String>,
}

impl Rejected {
    fn add(&mut self, from: SocketAddr, why: String) {
        self.count += 1;
        self.last = Some(format!("{from}: {why}"));
    }
    fn note(&self) -> String {
        match &self.last {
            None => String::new(),
            Some(l) => format!(" ({} other connection(s) rejected, last {l})", self.count),
        }
    }
}

/// Accepts one connection if one arrives before `until`, waiting with poll(2) (no busy loop).
pub(super) fn accept_within(listener: &TcpListener, until: Instant) -> Result<Option<(TcpStream, SocketAddr)>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let io = |context: &str, source| Error::Io { context: context.into(), source };
    listener.set_nonblocking(true).map_err(|e| io("making the listener non-blocking", e))?;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        // Round up so that a sub-millisecond remainder does not become a zero (spinning) timeout.
        let ms = left.as_millis().saturating_add(1);
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io("waiting for connections", e.into())),
        }
        match listener.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(false).map_err(|e| io("configuring an accepted connection", e))?;
                s.set_nodelay(true).map_err(|e| io("configuring an accepted connection", e))?;
                return Ok(Some((s, from)));
            }
            // The connection went away between poll and accept, or a signal: wait again.
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => return Err(io("accepting a connection", e)),
        }
    }
}

/// A connection whose introduction passed the challenge.
pub(super) struct Introduced {
    pub(super) stream: TcpStream,
    pub(super) from: SocketAddr,
    pub(super) intro: Intro,
    /// The two nonces, for the accepting side's own proof in the welcome.
    pub(super) nonces: Nonces,
}

#[derive(Clone, Copy)]
pub(super) struct Nonces {
    pub(super) server: [u8; NONCE_LEN],
    pub(super) client: [u8; NONCE_LEN],
}

/// The connecting side's proof over the challenge, its own nonce and its introduction.
pub(super) fn client_proof(token: &Token, kind: Kind, n: &Nonces, intro: &[u8]) -> [u8; frame::PROOF_LEN] {
    auth::prove(token, Proof::BootstrapClient, &[&[kind as u8], &n.server, &n.client, intro])
}

/// The accepting side's proof, sent in the welcome: it knows the token too.
pub(super) fn server_proof(token: &Token, kind: Kind, n: &Nonces) -> [u8; frame::PROOF_LEN] {
    auth::prove(token, Proof::BootstrapServer, &[&[kind as u8], &n.server, &n.client])
}

/// What a handshake thread reports: its id, and the introduced connection or why it was dropped.
pub(super) type HandshakeOutcome = (u64, std::result::Result<Introduced, (SocketAddr, String)>);

pub(super) struct PendingHandshake {
    id: u64,
    /// A handle on the socket, to end the handshake's read when it is evicted or abandoned.
    stream: TcpStream,
}

/// The accepting side of the rendezvous: accepts connections and reads their introductions
/// concurrently (one short-lived thread per pending connection, at most
/// [`MAX_PENDING_HANDSHAKES`]), so idle or slow strays cost no real rank any time.
pub(super) struct HandshakeGate<'a> {
    listener: &'a TcpListener,
    token: Token,
    kind: Kind,
    tx: std::sync::mpsc::Sender<HandshakeOutcome>,
    rx: std::sync::mpsc::Receiver<HandshakeOutcome>,
    pending: VecDeque<PendingHandshake>,
    next_id: u64,
    rejected: Rejected,
}

impl<'a> HandshakeGate<'a> {
    pub(super) fn new(listener: &'a TcpListener, token: Token, kind: Kind) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        Self { listener, token, kind, tx, rx, pending: VecDeque::new(), next_id: 0, rejected: Rejected::default() }
    }

    /// The next connection that proved the token, before `deadline`; strays are counted in
    /// `rejected` and skipped. On timeout, `waiting` says what was awaited.
    pub(super) fn next(
        &mut self,
        deadline: Instant,
        after: Duration,
        waiting: impl Fn(&Rejected) -> String,
    ) -> Result<Introduced> {
        loop {
            while let Ok((id, outcome)) = self.rx.try_recv() {
                self.pending.retain(|p| p.id != id);
                match outcome {
                    Ok(i) => return Ok(i),
                    Err((from, why)) => self.rejected.add(from, why),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout { after, waiting_for: waiting(&self.rejected) });
            }
            // While handshakes are pending, look at their outcomes every slice; otherwise nothing
            // can happen before the next connection.
            let until = if self.pending.is_empty() { deadline } else { deadline.min(now + ACCEPT_SLICE) };
            let Some((stream, from)) = accept_within(self.listener, until)? else {
                continue;
            };
            if self.pending.len() >= MAX_PENDING_HANDSHAKES
                && let Some(oldest) = self.pending.pop_front()
            {
                // Its thread sees the end of the stream and reports it as rejected.
                let _ = oldest.stream.shutdown(Shutdown::Both);
            }
            let handle = match stream.try_clone() {
                Ok(h) => h,
                Err(e) => {
                    self.rejected.add(from, format!("could not keep the connection: {e}"));
                    continue;
                }
            };
            let id = self.next_id;
            self.next_id += 1;
            let (tx, token, kind) = (self.tx.clone(), self.token, self.kind);
            let hs_deadline = deadline.min(Instant::now() + HANDSHAKE_WAIT);
            let spawned = std::thread::Builder::new()
                .name("bootstrap-handshake".into())
                .stack_size(HANDSHAKE_STACK)
                .spawn(move || {
                    let outcome = accept_handshake(stream, from, &token, kind, hs_deadline).map_err(|why| (from, why));
                    let _ = tx.send((id, outcome));
                });
            match spawned {
                Ok(_) => self.pending.push_back(PendingHandshake { id, stream: handle }),
                Err(e) => self.rejected.add(from, format!("no thread for its handshake: {e}")),
            }
        }
    }
}

impl HandshakeGate<'_> {
    /// Counts a connection whose introduction proved the token but was refused all the same.
    pub(super) fn reject(&mut self, from: SocketAddr, why: String) {
        self.rejected.add(from, why);
    }
}

impl Drop for HandshakeGate<'_> {
    fn drop(&mut self) {
        // End the reads of strays still pending: their threads finish at once.
        for p in self.pending.drain(..) {
            let _ = p.stream.shutdown(Shutdown::Both);
        }
    }
}

/// The accepting side's half of the handshake, on its own thread: sends a challenge, reads the
/// introduction of `kind` and checks its proof. `Err(reason)` drops the connection as a stray.
pub(super) fn accept_handshake(
    stream: TcpStream,
    from: SocketAddr,
    token: &Token,
    kind: Kind,
    deadline: Instant,
) -> std::result::Result<Introduced, String> {
    let server = auth::nonce();
    let mut w = Deadlined { stream: &stream, deadline };
    frame::write_frame(&mut w, token, Kind::Challenge, 0, &server).map_err(|e| {
        if is_timeout(&e) {
            "timed out sending the challenge".to_string()
        } else {
            format!("sending the challenge: {e}")
        }
    })?;
    let mut r = Deadlined { stream: &stream, deadline };
    let f = match frame::read_frame(&mut r, token, HELLO_MAX) {
        Ok(Some(f)) if f.kind == kind => f,
        Ok(Some(f)) => return Err(format!("sent {} instead of {}", f.kind.name(), kind.name())),
        Ok(None) => return Err(format!("closed without a {} (a wrong session token, or not a rank)", kind.name())),
        Err(FrameError::Io(source)) if is_timeout(&source) => {
            let why = format!("timed out: no {} within {} ms", kind.name(), HANDSHAKE_WAIT.as_millis());
            // Tell the connecting side (a real rank too slow to introduce itself, most likely)
            // what happened, best effort: it reads this where it expects the welcome.
            refuse(
                &stream,
                token,
                &format!("it waited {} ms for this rank's {}", HANDSHAKE_WAIT.as_millis(), kind.name()),
            );
            return Err(why);
        }
        Err(FrameError::Io(source)) if source.kind() == io::ErrorKind::ConnectionReset => {
            return Err(format!("reset without a {} (a wrong session token, or not a rank)", kind.name()));
        }
        Err(e) => return Err(e.to_string()),
    };
    let p = &f.payload;
    if p.len() < NONCE_LEN + frame::PROOF_LEN {
        return Err(format!("malformed {}", kind.name()));
    }
    let (client_nonce, rest) = p.split_at(NONCE_LEN);
    let (proof, intro_bytes) = rest.split_at(frame::PROOF_LEN);
    let mut client = [0u8; NONCE_LEN];
    client.copy_from_slice(client_nonce);
    let nonces = Nonces { server, client };
    if !auth::verify(
        token,
        Proof::BootstrapClient,
        &[&[kind as u8], &nonces.server, &nonces.client, intro_bytes],
        proof,
    ) {
        return Err("wrong session token (failed the challenge)".into());
    }
    let intro = Intro::decode(intro_bytes).ok_or_else(|| format!("malformed {}", kind.name()))?;
    Ok(Introduced { stream, from, intro, nonces })
}

/// Sends a [`Kind::Refused`] frame saying `why` (cut to [`REFUSAL_MAX`] bytes), best effort and
/// within [`REFUSAL_WAIT`], before the connection is dropped.
fn refuse(stream: &TcpStream, token: &Token, why: &str) {
    let why = &why[..why.floor_char_boundary(REFUSAL_MAX)];
    let mut w = Deadlined { stream, deadline: Instant::now() + REFUSAL_WAIT };
    let _ = frame::write_frame(&mut w, token, Kind::Refused, 0, why.as_bytes());
}

/// The connecting side's half: reads the challenge, sends the introduction of `kind` with its
/// proof, and checks the accepting side's proof in the welcome.
pub(super) fn connect_handshake(
    stream: &TcpStream,
    cfg: &BootstrapConfig,
    kind: Kind,
    intro: &[u8],
    deadline: Instant,
    peer: usize,
) -> Result<()> {
    let what = format!("the challenge of rank {peer}");
    let challenge = expect(stream, cfg, Kind::Challenge, NONCE_LEN, deadline, peer, &what)?;
    let server: [u8; NONCE_LEN] = challenge
        .payload
        .as_slice()
        .try_into()
        .map_err(|_| Error::Protocol(format!("rank {peer} sent a malformed challenge")))?;
    let nonces = Nonces { server, client: auth::nonce() };
    let mut payload = Vec::with_capacity(NONCE_LEN + frame::PROOF_LEN + intro.len());
    payload.extend_from_slice(&nonces.client);
    payload.extend_from_slice(&client_proof(&cfg.token, kind, &nonces, intro));
    payload.extend_from_slice(intro);
    send_frame(stream, cfg, kind, &payload, deadline, peer)?;
    let welcome = expect(stream, cfg, Kind::Welcome, frame::PROOF_LEN, deadline, peer, "the welcome")?;
    let parts: [&[u8]; 3] = [&[kind as u8], &nonces.server, &nonces.client];
    if !auth::verify(&cfg.token, Proof::BootstrapServer, &parts, &welcome.payload) {
        return Err(Error::Protocol(format!(
            "rank {peer} did not prove the session token in its welcome (another job on this address?)"
        )));
    }
    Ok(())
}

/// How many times a rank introduces itself to rank 0 before it gives up on a connection that
/// rank 0 dropped during the handshake.
pub(super) const HELLO_ATTEMPTS: u32 = 3;

/// Connects to rank 0 at `addr` and introduces this rank (`intro` makes the introduction from the
/// connection). Rank 0 gives a silent connection [`HANDSHAKE_WAIT`], which a rank starved of CPU
/// between its connect and its hello can overrun on a loaded machine: when rank 0 drops the
/// connection after that long, this tries again on a fresh one (at most [`HELLO_ATTEMPTS`] in
/// all, each reconnect within another [`HANDSHAKE_WAIT`]), as it does when rank 0 refuses the
/// connection for its silence however soon that seems here. A drop sooner than that (a wrong
/// token, or rank 0 failing) is returned at once, as is the drop itself when the reconnect fails.
pub(super) fn join_root(
    addr: SocketAddr,
    cfg: &BootstrapConfig,
    deadline: Instant,
    waiting_for: &str,
    mut intro: impl FnMut(&TcpStream) -> Result<Vec<u8>>,
) -> Result<TcpStream> {
    let mut root = connect_until(addr, deadline, cfg.timeout, waiting_for)?;
    let mut attempt = 1;
    loop {
        let connected = Instant::now();
        let hello = intro(&root)?;
        match connect_handshake(&root, cfg, Kind::Hello, &hello, deadline, 0) {
            Ok(()) => return Ok(root),
            // Rank 0 refused this connection for its silence, or dropped it after as long as it
            // waits (a refusal lost, or an older rank 0 that did not send one): try again. Rank 0
            // may have accepted the connection well after this rank made it, so the refusal, not
            // the time this rank measured, is what tells.
            Err(e @ Error::PeerLost { .. })
                if attempt < HELLO_ATTEMPTS
                    && (refused(&e) || connected.elapsed() >= HANDSHAKE_WAIT)
                    && Instant::now() < deadline =>
            {
                let again = deadline.min(Instant::now() + HANDSHAKE_WAIT);
                match connect_until(addr, again, cfg.timeout, waiting_for) {
                    Ok(s) => root = s,
                    Err(_) => return Err(attempts_note(e, attempt)),
                }
                attempt += 1;
            }
            Err(e) => return Err(attempts_note(e, attempt)),
        }
    }
}

/// Whether `e` is a [`Kind::Refused`] frame read where another was expected.
fn refused(e: &Error) -> bool {
    matches!(e, Error::PeerLost { detail, .. } if detail.contains(REFUSED))
}

/// `e`, saying how many introductions were made when there was more than one.
fn attempts_note(e: Error, attempts: u32) -> Error {
    match e {
        Error::PeerLost { peer, detail } if attempts > 1 => {
            Error::PeerLost { peer, detail: format!("{detail} (on attempt {attempts} of {HELLO_ATTEMPTS})") }
        }
        e => e,
    }
}

/// Connects to `addr`, retrying until `deadline` (the other side may not listen yet).
pub(super) fn connect_until(
    addr: SocketAddr,
    deadline: Instant,
    after: Duration,
    waiting_for: &str,
) -> Result<TcpStream> {
    let mut pause = Duration::from_millis(10);
    let mut last: Option<io::Error> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let last = last.map(|e| format!(" (last attempt: {e})")).unwrap_or_default();
            return Err(Error::Timeout { after, waiting_for: format!("{waiting_for}{last}") });
        }
        match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|source| Error::Io { context: format!("configuring the connection to {addr}"), source })?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Reads one frame of `kind` before `deadline`.
pub(super) fn expect(
    stream: &TcpStream,
    cfg: &BootstrapConfig,
    kind: Kind,
    max: usize,
    deadline: Instant,
    peer: usize,
    what: &str,
) -> Result<Frame> {
    let mut r = Deadlined { stream, deadline };
    match frame::read_frame(&mut r, &cfg.token, max.max(REFUSAL_MAX)) {
        Ok(Some(f)) if f.kind == kind => Ok(f),
        Ok(Some(f)) if f.kind == Kind::Refused => Err(Error::PeerLost {
            peer,
            detail: format!("rank {peer} {REFUSED}, before {what}: {}", String::from_utf8_lossy(&f.payload)),
        }),
        Ok(Some(f)) => Err(Error::Protocol(format!("rank {peer} sent {} while {what} was expected", f.kind.name()))),
        Ok(None) => Err(closed(peer, kind, what, String::new())),
        Err(FrameError::Io(source)) if is_timeout(&source) => {
            Err(Error::Timeout { after: cfg.timeout, waiting_for: format!("rank {peer} to send {what}") })
        }
        // A peer that rejects us closes with our frame unread, which resets the connection.
        Err(FrameError::Io(source)) if source.kind() == io::ErrorKind::ConnectionReset => {
            Err(closed(peer, kind, what, format!(": {source}")))
        }
        Err(FrameError::Io(source)) => Err(Error::PeerLost { peer, detail: source.to_string() }),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn closed(peer: usize, kind: Kind, what: &str, extra: String) -> Error {
    let why = match kind {
        // The accepting side drops an introduction that fails its challenge without a word.
        Kind::Welcome | Kind::Challenge => format!("a wrong session token, or rank {peer} failed"),
        _ => format!("rank {peer} failed or gave up"),
    };
    Error::PeerLost { peer, detail: format!("closed during the rendezvous, before {what} ({why}){extra}") }
}

pub(super) fn send_frame(
    stream: &TcpStream,
    cfg: &BootstrapConfig,
    kind: Kind,
    payload: &[u8],
    deadline: Instant,
    peer: usize,
) -> Result<()> {
    let mut w = Deadlined { stream, deadline };
    frame::write_frame(&mut w, &cfg.token, kind, 0, payload).map_err(|e| {
        if is_timeout(&e) {
            Error::Timeout { after: cfg.timeout, waiting_for: format!("rank {peer} to take the {}", kind.name()) }
        } else {
            Error::PeerLost { peer, detail: format!("sending the {}: {e}", kind.name()) }
        }
    })
}

/// Listens on `addr` with the largest backlog the system allows (the standard library asks for
/// 128): hundreds of ranks may connect to rank 0 at once, and a connection that finds the queue
/// full waits a second for the retry of its SYN.
pub(super) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    use nix::sys::socket::{Backlog, listen};
    let listener = TcpListener::bind(addr)?;
    listen(&listener, Backlog::MAXCONN)?;
    Ok(listener)
}

/// Rank 0 holds a socket per rank: raises this process's soft limit on open files (1024 on many
/// systems) toward the hard limit when a world of `n` ranks needs more.
pub(super) fn room_for_sockets(n: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = (n as u64).saturating_add(256);
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < want
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard);
    }
}

/// Rank 0's side: accepts every other rank's hello, then sends each the table of listening
/// addresses. Returns the connections (by rank; `None` for rank 0) and the table.
pub(super) fn root_rendezvous(
    cfg: &BootstrapConfig,
    deadline: Instant,
) -> Result<(Vec<Option<TcpStream>>, Vec<String>)> {
    let n = cfg.rank.world_size;
    room_for_sockets(n);
    let addr = resolve(&cfg.addr)?;
    let listener = listen(addr).map_err(|source| Error::Io {
        context: format!(
            "rank 0: listening on {addr} (if the port is taken, choose another with {})",
            env::ENV_BOOTSTRAP
        ),
        source,
    })?;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut addrs = vec![String::new(); n];
    let mut gate = HandshakeGate::new(&listener, cfg.token, Kind::Hello);
    while !missing(&streams, 1..n).is_empty() {
        let waiting = |r: &Rejected| format!("{} to join at {addr}{}", ranks_list(&missing(&streams, 1..n)), r.note());
        let Introduced { stream, from, intro: hello, nonces } = gate.next(deadline, cfg.timeout, waiting)?;
        if hello.world != n {
            return Err(Error::Protocol(format!(
                "the process at {from} says it is rank {} of {}, but rank 0 has a world of {n}",
                hello.rank, hello.world
            )));
        }
        if hello.rank == 0 || hello.rank >= n {
            return Err(Error::Protocol(format!("the process at {from} claims rank {} of {n}", hello.rank)));
        }
        if streams[hello.rank].is_some() {
            return Err(Error::Protocol(format!("two processes claim rank {} (the second at {from})", hello.rank)));
        }
        let proof = server_proof(&cfg.token, Kind::Hello, &nonces);
        if let Err(e) = send_frame(&stream, cfg, Kind::Welcome, &proof, deadline, hello.rank) {
            gate.rejected.add(from, e.to_string());
            continue;
        }
        addrs[hello.rank] = hello.listen;
        streams[hello.rank] = Some(stream);
    }
    drop(gate);
    let table = encode_table(&addrs);
    for (peer, s) in streams.iter().enumerate().skip(1) {
        if let Some(s) = s {
            send_frame(s, cfg, Kind::Table, &table, deadline, peer)?;
        }
    }
    Ok((streams, addrs))
}

/// The side of a rank other than 0: opens a listener for connections from other ranks, joins
/// rank 0 and reads the address table. Returns the connection to rank 0, the listener and the
/// table.
pub(super) fn leaf_rendezvous(
    cfg: &BootstrapConfig,
    deadline: Instant,
) -> Result<(TcpStream, TcpListener, Vec<String>)> {
    let (me, n) = (cfg.rank.rank, cfg.rank.world_size);
    let root_addr = resolve(&cfg.addr)?;
    let hint = if cfg.addr_derived {
        format!(" (address derived from the job id; set {} to choose it)", env::ENV_BOOTSTRAP)
    } else {
        String::new()
    };
    let waiting_for = format!("rank 0 at {root_addr}{hint}");
    let io = |context: &str, source| Error::Io { context: context.into(), source };
    let mut listener = None;
    let root = join_root(root_addr, cfg, deadline, &waiting_for, |root| {
        if listener.is_none() {
            let local_ip: IpAddr = root.local_addr().map_err(|e| io("reading the local address", e))?.ip();
            let l = listen(SocketAddr::new(local_ip, 0))
                .map_err(|e| io(&format!("listening on {local_ip} for other ranks"), e))?;
            listener = Some(l);
        }
        let l = listener.as_ref().expect("created above");
        let listening = l.local_addr().map_err(|e| io("reading the listening address", e))?;
        Ok(Intro { rank: me, world: n, listen: listening.to_string() }.encode())
    })?;
    let listener = listener.expect("join_root succeeded, so the introduction was made");
    let table = expect(&root, cfg, Kind::Table, cfg.max_frame, deadline, 0, "the address table")?;
    let table = decode_table(&table.payload, n).ok_or_else(|| Error::Protocol("malformed address table".into()))?;
    Ok((root, listener, table))
}
