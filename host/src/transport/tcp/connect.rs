//! Opening the TCP transport's connections through the bootstrap.
//!
//! [`connect_peers`] is collective: every rank calls it at the same point, each with the peers it
//! reaches over TCP (the relation is symmetric). It
//!
//! 1. agrees on an instance number (rank 0's, through an all-gather), which every handshake
//!    names, so that a connection meant for another set of channels is never taken for this one;
//! 2. takes the key from [`Bootstrap::hints`] (derived from the session token), or, for a
//!    bootstrap without one, the key rank 0 drew, sent in the same all-gather;
//! 3. listens on an ephemeral port and all-gathers `address:port`. The listener binds loopback
//!    when every peer this rank serves runs on this machine (TCP forced on one machine), else
//!    the one address it advertises ([`ENV_TRANSPORT_ADDR`], else the bootstrap's local
//!    address, else the host name's), never every interface. A non-loopback listener needs a
//!    key that is not public: when the bootstrap's token was derived from the job id
//!    ([`BootstrapHints::token_derived`]) it is refused, with an error saying to set
//!    `MSCCLPP_RS_TOKEN`. A rank that cannot listen tells the others in the same all-gather,
//!    so that they fail at once, naming it, instead of waiting out the timeout;
//! 4. connects to every peer (the connection this rank sends on) while accepting theirs (the
//!    ones it receives on), and runs a challenge-response on each: the accepting side sends a
//!    nonce, the connecting side answers with its introduction (from, to, instance), its own
//!    nonce and an HMAC-SHA256 over all of it under the key, and the accepting side's welcome
//!    carries the largest chunk it accepts and its own HMAC. A connection that fails this is
//!    dropped and the wait goes on (a stray process must not take the job down); the deadline's
//!    error names the ranks still missing and the last rejection. Handshakes run at once, each on
//!    a short-lived thread (at most 64 pending: past that the oldest is dropped), so strays that
//!    connect first and never answer hold up no real rank.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{self, Introduction, NONCE_LEN};
use crate::auth;
use crate::bootstrap::{Bootstrap, BootstrapExt, BootstrapHints, Token};
use crate::error::{Error, Result};

/// The environment variable naming the address (an IP of this machine) other machines reach
/// this rank's TCP transport at, and that its listener binds, when the default (the bootstrap's
/// local address) is not the right interface.
pub const ENV_TRANSPORT_ADDR: &str = "MSCCLPP_RS_TRANSPORT_ADDR";

/// How long one incoming connection may take over its handshake before it is dropped.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(2);
/// The pause before a dropped handshake is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// What a rank that could not listen contributes instead of its address: this, then why.
const NOT_LISTENING: &str = "!";
/// Longest reason a rank that could not listen sends (the all-gather carries it to every rank).
const MAX_REASON: usize = 512;

/// How [`connect_peers`] connects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The largest put chunk this rank accepts (its landing slots' size); told to every peer.
    pub max_chunk: u64,
    /// The address to listen on and advertise when a peer runs on another machine (with every
    /// peer on this machine, loopback is used instead); default: [`ENV_TRANSPORT_ADDR`], else
    /// the bootstrap's local address, else the first address of the host name.
    pub advertise: Option<IpAddr>,
    /// The deadline for the whole set-up; default: the bootstrap's timeout, else 30 s.
    pub timeout: Option<Duration>,
}

/// A peer to connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    /// Its rank.
    pub rank: usize,
    /// Whether it runs on this machine (then loopback is used).
    pub same_machine: bool,
}

/// The two authenticated connections with one peer.
#[derive(Debug)]
pub struct Link {
    /// The peer's rank.
    pub peer: usize,
    /// The connection this rank opened: it sends operations on it and reads acknowledgements.
    pub outgoing: TcpStream,
    /// The connection the peer opened: this rank receives operations on it.
    pub incoming: TcpStream,
    /// The largest put chunk the peer accepts.
    pub peer_max_chunk: u64,
}

/// The address to advertise when none is given.
fn default_advertise(boot: &dyn Bootstrap) -> Result<IpAddr> {
    if let Ok(v) = std::env::var(ENV_TRANSPORT_ADDR) {
        return v
            .trim()
            .parse()
            .map_err(|_| Error::InvalidArgument(format!("{ENV_TRANSPORT_ADDR}={v:?} is not an IP address")));
    }
    if let Some(ip) = boot.hints().local_ip {
        return Ok(ip);
    }
    let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let resolved =
        (host.as_str(), 0).to_socket_addrs().map(|a| a.map(|a| a.ip()).collect::<Vec<_>>()).unwrap_or_default();
    Ok(resolved.iter().copied().find(|ip| !ip.is_loopback()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

/// Opens and authenticates both connections with every peer of `peers` (collective over `boot`;
/// see the module documentation). Returns the links in the order of `peers`.
pub fn connect_peers(boot: &dyn Bootstrap, peers: &[PeerAddr], opts: &ConnectOptions) -> Result<Vec<Link>> {
    let me = boot.rank();
    let wrap = |step: String| move |e: Error| Error::Bootstrap { rank: me, step, cause: Box::new(e) };
    let hints = boot.hints();
    let timeout = opts.timeout.or(hints.timeout).unwrap_or(crate::bootstrap::env::DEFAULT_TIMEOUT);
    // 1, 2: instance and fallback key from rank 0.
    let mut mine = [0u8; 24];
    mine[..NONCE_LEN].copy_from_slice(&auth::nonce::<NONCE_LEN>());
    mine[NONCE_LEN..].copy_from_slice(&auth::nonce::<8>());
    let all = boot.all_gather_checked(&mine)?;
    let root: [u8; 24] = all[0].as_slice().try_into().map_err(|_| {
        wrap("port channels over TCP".into())(Error::Protocol(format!(
            "rank 0 sent {} bytes of set-up, not 24",
            all[0].len()
        )))
    })?;
    let key = hints.key.unwrap_or_else(|| Token(root[..16].try_into().expect("16 bytes")));
    let instance = u64::from_le_bytes(root[16..].try_into().expect("8 bytes"));
    // 3: listen and tell everyone where.
    // (A failure here is reported in the all-gather too, so that no peer waits for this rank.)
    let advertise = match opts.advertise {
        Some(a) => Ok(a),
        None => default_advertise(boot),
    };
    let listener = if peers.is_empty() { None } else { Some(advertise.and_then(|a| listen(peers, a, &hints))) };
    let text = match &listener {
        Some(Ok((_, addr))) => addr.to_string(),
        Some(Err(e)) => {
            let mut why = e.to_string();
            why.truncate(why.floor_char_boundary(MAX_REASON));
            format!("{NOT_LISTENING}{why}")
        }
        None => String::new(),
    };
    let addrs = boot.all_gather_checked(text.as_bytes())?;
    let listener = match listener {
        None => return Ok(Vec::new()),
        Some(l) => l.map_err(wrap("port channels: listening for TCP connections".into()))?.0,
    };
    // Every peer's address before anything waits for it: a peer that could not listen fails
    // this rank now, naming it.
    let targets = peers
        .iter()
        .map(|p| peer_addr(&addrs, p).map_err(wrap(format!("port channels: connecting to rank {} over TCP", p.rank))))
        .collect::<Result<Vec<_>>>()?;
    let deadline = crate::bootstrap::after(timeout);
    // 4: accept theirs on a thread while connecting to them here.
    let expected: Vec<usize> = peers.iter().map(|p| p.rank).collect();
    let max_chunk = opts.max_chunk;
    let acceptor = std::thread::Builder::new()
        .name("mscclpp-tcp-accept".into())
        .spawn(move || accept_all(&listener, &key, (me, instance), &expected, max_chunk, (deadline, timeout)))
        .map_err(|source| Error::Io { context: "starting the transport's accept thread".into(), source })?;
    let mut outgoing = Vec::with_capacity(peers.len());
    let mut first_error = None;
    for (p, &addr) in peers.iter().zip(&targets) {
        let step = format!("port channels: connecting to rank {} over TCP", p.rank);
        let r = {
            let intro = Introduction { from: me as u32, to: p.rank as u32, instance };
            // The peer drops a handshake that takes it more than HANDSHAKE_WAIT (a loaded
            // machine, a stray ahead in its queue): try again until the deadline, unless the
            // peer answered and its answer was wrong.
            loop {
                match connect_one(addr, &key, intro, deadline, timeout) {
                    Err(e) if !matches!(e, Error::Protocol(_)) && Instant::now() + RETRY_PAUSE < deadline => {
                        std::thread::sleep(RETRY_PAUSE);
                    }
                    r => break r,
                }
            }
        };
        match r {
            Ok(x) => outgoing.push(x),
            Err(e) => {
                first_error = Some(wrap(step)(e));
                break;
            }
        }
    }
    let incoming =
        acceptor.join().unwrap_or_else(|_| Err(Error::Protocol("the transport's accept thread panicked".into())));
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut incoming = incoming.map_err(wrap("port channels: accepting TCP connections".into()))?;
    Ok(peers
        .iter()
        .zip(outgoing)
        .map(|(p, (out, peer_max_chunk))| Link {
            peer: p.rank,
            outgoing: out,
            incoming: incoming.remove(&p.rank).expect("accept_all returns every expected peer"),
            peer_max_chunk,
        })
        .collect())
}

/// The address the transport's listener binds: loopback (of `advertise`'s family) when every
/// peer of `peers` runs on this machine, else `advertise` itself.
fn listen_ip(peers: &[PeerAddr], advertise: IpAddr) -> IpAddr {
    if peers.iter().all(|p| p.same_machine) {
        if advertise.is_ipv4() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { IpAddr::V6(Ipv6Addr::LOCALHOST) }
    } else {
        advertise
    }
}

/// Whether the transport may listen on `ip`: loopback always; another address only under a
/// key that is not public (a token given explicitly, or a bootstrap without a token, whose key
/// rank 0 draws), and never the unspecified address (every interface).
fn check_listen_ip(ip: IpAddr, hints: &BootstrapHints) -> Result<()> {
    if ip.is_unspecified() {
        return Err(Error::InvalidArgument(format!(
            "the TCP transport would listen on {ip} (every interface), which no peer can be sent to: set \
             {ENV_TRANSPORT_ADDR} to this machine's address on the network the ranks share"
        )));
    }
    if !ip.is_loopback() && hints.key.is_some() && hints.token_derived {
        return Err(Error::InvalidArgument(format!(
            "the TCP transport would listen on {ip}, reachable from other machines, under a key derived from a \
             session token that was itself derived from the job id (which anyone who can read the job's \
             environment can compute): set {} to the same 32 random hex digits on every rank (for example \
             from `openssl rand -hex 16`)",
            crate::bootstrap::env::ENV_TOKEN
        )));
    }
    Ok(())
}

/// Opens the transport's listener for `peers` ([`listen_ip`], checked by [`check_listen_ip`]);
/// returns it with the address it listens on.
fn listen(peers: &[PeerAddr], advertise: IpAddr, hints: &BootstrapHints) -> Result<(TcpListener, SocketAddr)> {
    let ip = listen_ip(peers, advertise);
    check_listen_ip(ip, hints)?;
    let l = TcpListener::bind((ip, 0)).map_err(|source| Error::Io {
        context: format!(
            "listening on {ip} for the TCP transport (if this is not an address of this machine, set \
             {ENV_TRANSPORT_ADDR} to one)"
        ),
        source,
    })?;
    let addr =
        l.local_addr().map_err(|source| Error::Io { context: "the transport listener's address".into(), source })?;
    Ok((l, addr))
}

/// Where to reach peer `p`: the address it listens on, as it advertised it (loopback when all
/// its peers are on its machine).
fn peer_addr(addrs: &[Vec<u8>], p: &PeerAddr) -> Result<SocketAddr> {
    let raw = addrs.get(p.rank).ok_or_else(|| Error::InvalidArgument(format!("rank {} is not in the job", p.rank)))?;
    let text = std::str::from_utf8(raw)
        .map_err(|_| Error::Protocol(format!("rank {} advertised a non-UTF-8 address", p.rank)))?;
    if let Some(why) = text.strip_prefix(NOT_LISTENING) {
        return Err(Error::Protocol(format!("rank {} could not listen for the TCP transport: {why}", p.rank)));
    }
    let addr: SocketAddr = text.parse().map_err(|_| {
        Error::Protocol(format!("rank {} advertised {text:?}, not an address (it has no TCP peers?)", p.rank))
    })?;
    Ok(addr)
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { context: what.to_string(), source }
}

fn read_record(s: &mut TcpStream, len: usize, deadline: Instant, what: &str) -> Result<Vec<u8>> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(io(what))?;
    let mut b = vec![0u8; len];
    s.read_exact(&mut b).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error::Timeout { after: left, waiting_for: what.to_string() }
        }
        _ => Error::Io { context: format!("reading {what}"), source: e },
    })?;
    Ok(b)
}

fn write_record(s: &mut TcpStream, b: &[u8], deadline: Instant, what: &str) -> Result<()> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    s.set_write_timeout(Some(left)).map_err(io(what))?;
    s.write_all(b).map_err(|source| Error::Io { context: format!("sending {what}"), source })
}

/// The connecting side: connects (retrying until `deadline`), answers the challenge, checks the
/// welcome. Returns the stream and the largest chunk the peer accepts.
fn connect_one(
    addr: SocketAddr,
    key: &Token,
    intro: Introduction,
    deadline: Instant,
    timeout: Duration,
) -> Result<(TcpStream, u64)> {
    let mut pause = Duration::from_millis(5);
    let mut s = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout { after: timeout, waiting_for: format!("a TCP connection to {addr}") });
        }
        match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(source) => return Err(Error::Io { context: format!("connecting to {addr}"), source }),
        }
    };
    let challenge = read_record(&mut s, wire::CHALLENGE_LEN, deadline, "the peer's challenge")?;
    let server = wire::parse_challenge(&challenge).map_err(Error::Protocol)?;
    let client = auth::nonce();
    write_record(&mut s, &wire::hello(key, &intro, &server, &client), deadline, "the hello")?;
    let welcome = read_record(&mut s, wire::WELCOME_LEN, deadline, "the peer's welcome")?;
    let max_chunk = wire::parse_welcome(&welcome, key, &intro, &server, &client)
        .map_err(|e| Error::Protocol(format!("{addr}: {e}")))?;
    s.set_read_timeout(None).map_err(io("clearing the read timeout"))?;
    s.set_write_timeout(None).map_err(io("clearing the write timeout"))?;
    Ok((s, max_chunk))
}

/// The accepting side of one connection: challenge, check the hello, welcome. `Err(reason)` drops
/// the connection as a stray.
fn accept_one(
    mut s: TcpStream,
    key: &Token,
    me: usize,
    instance: u64,
    waiting: &[usize],
    max_chunk: u64,
    deadline: Instant,
) -> std::result::Result<(usize, TcpStream), String> {
    let server = auth::nonce();
    write_record(&mut s, &wire::challenge(&server), deadline, "the challenge").map_err(|e| e.to_string())?;
    let hello = read_record(&mut s, wire::HELLO_LEN, deadline, "a hello").map_err(|e| e.to_string())?;
    let (intro, client, proof) = wire::parse_hello(&hello)?;
    if !wire::verify_hello(key, &intro, &server, &client, &proof) {
        return Err("wrong key (failed the challenge: a process of another job?)".into());
    }
    if intro.instance != instance {
        return Err(format!("rank {} introduced itself for another set of channels", intro.from));
    }
    let from = intro.from as usize;
    if intro.to as usize != me || !waiting.contains(&from) {
        return Err(format!("unexpected connection from rank {} to rank {}", intro.from, intro.to));
    }
    write_record(&mut s, &wire::welcome(key, &intro, &server, &client, max_chunk), deadline, "the welcome")
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    s.set_write_timeout(None).map_err(|e| e.to_string())?;
    Ok((from, s))
}

/// Handshakes read at once, each on a short-lived thread of its own; at the cap the oldest is
/// dropped to make room, so strays that connect and say nothing cannot hold up the real ranks.
const MAX_PENDING_HANDSHAKES: usize = 64;
/// Stack of a handshake thread (it reads and writes a few small records).
const HANDSHAKE_STACK: usize = 256 << 10;

/// What a handshake thread reports: its number, the address and the outcome.
type Handshake = (u64, SocketAddr, std::result::Result<(usize, TcpStream), String>);

/// Accepts until every rank of `expected` has connected, or `deadline`. Handshakes run
/// concurrently (see [`MAX_PENDING_HANDSHAKES`]).
fn accept_all(
    listener: &TcpListener,
    key: &Token,
    (me, instance): (usize, u64),
    expected: &[usize],
    max_chunk: u64,
    (deadline, timeout): (Instant, Duration),
) -> Result<HashMap<usize, TcpStream>> {
    listener.set_nonblocking(true).map_err(io("making the listener non-blocking"))?;
    let (tx, rx) = std::sync::mpsc::channel::<Handshake>();
    // Each pending handshake's number and a handle on its socket, to end it early.
    let mut pending: std::collections::VecDeque<(u64, TcpStream)> = std::collections::VecDeque::new();
    let mut next_id = 0u64;
    let mut got = HashMap::new();
    let mut waiting: Vec<usize> = expected.to_vec();
    let (mut rejected, mut last_reason) = (0usize, String::new());
    let outcome = loop {
        while let Ok((id, from, result)) = rx.try_recv() {
            pending.retain(|p| p.0 != id);
            match result {
                Ok((rank, s)) if waiting.contains(&rank) => {
                    waiting.retain(|&r| r != rank);
                    got.insert(rank, s);
                }
                Ok((rank, _)) => {
                    rejected += 1;
                    last_reason = format!("{from}: a second connection from rank {rank}");
                }
                Err(why) => {
                    rejected += 1;
                    last_reason = format!("{from}: {why}");
                }
            }
        }
        if waiting.is_empty() {
            break Ok(got);
        }
        match listener.accept() {
            Ok((s, from)) => {
                let started = s.set_nonblocking(false).and_then(|()| s.try_clone()).map(|handle| (s, handle));
                let Ok((s, handle)) = started else {
                    rejected += 1;
                    last_reason = format!("{from}: could not set the connection up");
                    continue;
                };
                if pending.len() >= MAX_PENDING_HANDSHAKES
                    && let Some((_, oldest)) = pending.pop_front()
                {
                    let _ = oldest.shutdown(std::net::Shutdown::Both);
                }
                let (id, tx, key, expect) = (next_id, tx.clone(), *key, waiting.clone());
                next_id += 1;
                let until = deadline.min(Instant::now() + HANDSHAKE_WAIT);
                let spawned = std::thread::Builder::new()
                    .name("tcp-handshake".into())
                    .stack_size(HANDSHAKE_STACK)
                    .spawn(move || {
                        let _ = tx.send((id, from, accept_one(s, &key, me, instance, &expect, max_chunk, until)));
                    });
                match spawned {
                    Ok(_) => pending.push_back((id, handle)),
                    Err(e) => {
                        // No thread for it: drop the connection (its rank retries).
                        let _ = handle.shutdown(std::net::Shutdown::Both);
                        rejected += 1;
                        last_reason = format!("{from}: no thread for its handshake: {e}");
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let note = if rejected > 0 {
                        format!(" ({rejected} connection(s) rejected, the last: {last_reason})")
                    } else {
                        String::new()
                    };
                    break Err(Error::Timeout {
                        after: timeout,
                        waiting_for: format!("TCP transport connections from rank(s) {waiting:?}{note}"),
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => break Err(Error::Io { context: "accepting a transport connection".into(), source }),
        }
    };
    // End the handshakes of strays still pending: their threads finish at once.
    for (_, handle) in pending {
        let _ = handle.shutdown(std::net::Shutdown::Both);
    }
    outcome
}

/// [`accept_all`] for the transport's tests.
#[cfg(test)]
pub(super) fn accept_all_for_test(
    listener: &TcpListener,
    key: &Token,
    me: usize,
    instance: u64,
    expected: &[usize],
    max_chunk: u64,
    deadline: Instant,
) -> Result<HashMap<usize, TcpStream>> {
    accept_all(listener, key, (me, instance), expected, max_chunk, (deadline, Duration::from_secs(10)))
}

/// [`connect_one`] for the transport's tests.
#[cfg(test)]
pub(super) fn connect_for_test(addr: SocketAddr, key: &Token, intro: Introduction) -> Result<(TcpStream, u64)> {
    connect_one(addr, key, intro, Instant::now() + Duration::from_secs(5), Duration::from_secs(5))
}

/// [`listen_ip`] for the transport's tests.
#[cfg(test)]
pub(super) fn listen_ip_for_test(peers: &[PeerAddr], advertise: IpAddr) -> IpAddr {
    listen_ip(peers, advertise)
}

/// [`check_listen_ip`] for the transport's tests.
#[cfg(test)]
pub(super) fn check_listen_ip_for_test(ip: IpAddr, hints: &BootstrapHints) -> Result<()> {
    check_listen_ip(ip, hints)
}

/// [`default_advertise`] for the transport's tests.
#[cfg(test)]
pub(super) fn default_advertise_for_test(boot: &dyn Bootstrap) -> Result<IpAddr> {
    default_advertise(boot)
}
