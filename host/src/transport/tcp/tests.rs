//! The TCP transport on host memory, between threads over real loopback sockets: data, order,
//! flushes, atomic adds, every kind of bad message, lost and silent peers, and the connection
//! set-up through a bootstrap.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};

use super::connect::{ConnectOptions, PeerAddr, connect_peers};
use super::wire::{HEADER_LEN, Header, Op};
use super::*;
use crate::bootstrap::{Bootstrap, BootstrapHints, RankInfo, RankSource, Token};
use crate::transport::{RemoteSpan, Transport};

/// A bootstrap for threads of one process: all-gathers through shared memory.
struct LocalBootstrap {
    info: RankInfo,
    shared: Arc<(Mutex<Gathers>, Condvar)>,
    round: Mutex<u64>,
    hints: BootstrapHints,
}

#[derive(Default)]
struct Gathers {
    /// (round, rank) -> contribution.
    parts: std::collections::HashMap<(u64, usize), Vec<u8>>,
}

fn local_bootstraps(n: usize, hints: BootstrapHints) -> Vec<LocalBootstrap> {
    let shared = Arc::new((Mutex::new(Gathers::default()), Condvar::new()));
    (0..n)
        .map(|rank| LocalBootstrap {
            info: RankInfo { rank, world_size: n, local_rank: rank, local_size: n, source: RankSource::Launcher },
            shared: shared.clone(),
            round: Mutex::new(0),
            hints: hints.clone(),
        })
        .collect()
}

impl Bootstrap for LocalBootstrap {
    fn info(&self) -> &RankInfo {
        &self.info
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = {
            let mut r = self.round.lock().unwrap();
            *r += 1;
            *r
        };
        let (m, cv) = &*self.shared;
        let mut g = m.lock().unwrap();
        g.parts.insert((round, self.info.rank), data.to_vec());
        cv.notify_all();
        let n = self.info.world_size;
        let deadline = Instant::now() + Duration::from_secs(20);
        while (0..n).any(|r| !g.parts.contains_key(&(round, r))) {
            let left = deadline.checked_duration_since(Instant::now()).expect("all_gather timed out");
            g = cv.wait_timeout(g, left).unwrap().0;
        }
        Ok((0..n).map(|r| g.parts[&(round, r)].clone()).collect())
    }
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }
    fn send_tagged(&self, _: usize, _: u32, _: &[u8]) -> Result<()> {
        Err(Error::Unsupported("LocalBootstrap has no point-to-point messages".into()))
    }
    fn recv_tagged(&self, _: usize, _: u32) -> Result<Vec<u8>> {
        Err(Error::Unsupported("LocalBootstrap has no point-to-point messages".into()))
    }
    fn hints(&self) -> BootstrapHints {
        self.hints.clone()
    }
}

/// One rank's side of a two-rank test: its transport toward the other, its source and landing
/// regions and its semaphores.
struct Side {
    t: TcpTransport,
    src: Arc<HostRegion>,
    dst: Arc<HostRegion>,
    sems: Vec<Arc<AtomicU64>>,
}

const POISON: u8 = 0xA5;

fn cfg(chunk: usize, slots: usize, timeout: Duration) -> TcpConfig {
    TcpConfig { chunk_bytes: chunk, slots, timeout }
}

/// Two ranks on threads, connected through [`connect_peers`] over a [`LocalBootstrap`]: each
/// has `bytes` of random source and `bytes` of poisoned destination, and two semaphores.
fn two_sides(bytes: usize, c: TcpConfig, seed: u64) -> (Side, Side) {
    sides(bytes, c, seed, false)
}

/// [`two_sides`]; with `one_region`, each rank has a single region of `2 * bytes` that is both its
/// source and its destination: random bytes, then `bytes` of poison.
fn sides(bytes: usize, c: TcpConfig, seed: u64, one_region: bool) -> (Side, Side) {
    let hints =
        BootstrapHints { key: Some(Token([9; 16])), timeout: Some(Duration::from_secs(20)), ..Default::default() };
    let boots = local_bootstraps(2, hints);
    let mut handles = Vec::new();
    for (rank, boot) in boots.into_iter().enumerate() {
        handles.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed + rank as u64);
            let mut data = vec![0u8; bytes];
            rng.fill(&mut data[..]);
            let (src, dst) = if one_region {
                data.resize(2 * bytes, POISON);
                let r = HostRegion::from_slice(&data);
                (r.clone(), r)
            } else {
                (HostRegion::from_slice(&data), HostRegion::filled(bytes, POISON))
            };
            let sems = vec![Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
            let peer = PeerAddr { rank: 1 - rank, same_machine: true };
            let opts = ConnectOptions { max_chunk: c.chunk_bytes as u64, ..Default::default() };
            let link = connect_peers(&boot, &[peer], &opts).unwrap().pop().unwrap();
            assert_eq!(link.peer, 1 - rank);
            let source = HostSource::new(vec![src.clone()], c.slots, c.chunk_bytes).unwrap();
            let landing = HostLanding::new(vec![dst.clone()], sems.clone(), c.slots, c.chunk_bytes).unwrap();
            let remote = RemoteMemory { regions: vec![dst.len() as u64], semaphores: 2 };
            let t = TcpTransport::start(link, source, landing, remote, &c).unwrap();
            assert_eq!(t.peer(), 1 - rank, "the transport names its peer");
            Side { t, src, dst, sems }
        }));
    }
    let mut sides: Vec<Side> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let b = sides.pop().unwrap();
    (sides.pop().unwrap(), b)
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[test]
fn puts_land_in_order_before_their_signals_both_ways() {
    // Small chunks and few slots: every put of more than 4 KiB is cut and pipelined.
    let bytes = 256 << 10;
    let (mut a, mut b) = two_sides(bytes, cfg(4096, 3, Duration::from_secs(20)), 1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Random pieces, each followed by a signal; sizes from 1 byte to several chunks.
    let mut pieces = Vec::new();
    let mut at = 0usize;
    while at < bytes {
        let len = rng.random_range(1..=20_000usize).min(bytes - at);
        pieces.push((at, len));
        at += len;
    }
    let run = |me: &mut Side, other_src: Vec<u8>, pieces: &[(usize, usize)]| {
        for (k, &(off, len)) in pieces.iter().enumerate() {
            me.t.put(RemoteSpan { region: 0, offset: off as u64 }, me.src.addr() + off as u64, len as u64).unwrap();
            me.t.signal(0).unwrap();
            // The peer's puts into this side arrive concurrently: each signal seen means its
            // piece (and every earlier one) has landed.
            let seen = me.sems[0].load(Ordering::Acquire) as usize;
            if seen > 0 {
                let (o, l) = pieces[seen - 1];
                assert_eq!(&me.dst.to_vec()[..o + l], &other_src[..o + l], "signal {seen} before its data");
            }
            let _ = k;
        }
        me.t.flush(deadline()).unwrap();
    };
    let (sa, sb) = (a.src.to_vec(), b.src.to_vec());
    let pa = pieces.clone();
    let ta = std::thread::spawn(move || {
        run(&mut a, sb, &pa);
        a
    });
    run(&mut b, sa.clone(), &pieces);
    let a = ta.join().unwrap();
    wait_for("all signals", || a.sems[0].load(Ordering::Acquire) as usize == pieces.len());
    wait_for("all signals", || b.sems[0].load(Ordering::Acquire) as usize == pieces.len());
    assert_eq!(b.dst.to_vec(), sa, "what rank 0 put into rank 1");
    assert_eq!(a.dst.to_vec(), b.src.to_vec(), "what rank 1 put into rank 0");
    assert_eq!(a.sems[1].load(Ordering::Acquire), 0);
}

#[test]
fn flush_means_landed_and_atomic_adds_add() {
    let bytes = 64 << 10;
    let (mut a, b) = two_sides(bytes, cfg(8192, 2, Duration::from_secs(20)), 2);
    // Into the middle, unaligned, across chunks; then atomic adds on words of another part.
    a.t.put(RemoteSpan { region: 0, offset: 1001 }, a.src.addr() + 3, 30_000).unwrap();
    for v in [5u64, 7, u64::MAX] {
        a.t.atomic_add(RemoteSpan { region: 0, offset: 40_000 }, v).unwrap();
    }
    a.t.atomic_add(RemoteSpan { region: 0, offset: 40_008 }, 1).unwrap();
    a.t.signal(1).unwrap();
    a.t.flush(deadline()).unwrap();
    // After the flush, without waiting: everything is there.
    let got = b.dst.to_vec();
    let src = a.src.to_vec();
    assert_eq!(&got[1001..31_001], &src[3..30_003]);
    assert!(got[..1001].iter().all(|&x| x == POISON) && got[31_001..40_000].iter().all(|&x| x == POISON));
    let poison = u64::from_le_bytes([POISON; 8]);
    assert_eq!(b.dst.read_u64(40_000), Some(poison.wrapping_add(5 + 7).wrapping_add(u64::MAX)));
    assert_eq!(b.dst.read_u64(40_008), Some(poison.wrapping_add(1)));
    assert_eq!(b.sems[1].load(Ordering::Acquire), 1);
    // Closing both in order ends cleanly.
    let mut b = b;
    let tb = std::thread::spawn(move || b.t.close(deadline()));
    a.t.close(deadline()).unwrap();
    tb.join().unwrap().unwrap();
}

#[test]
fn bad_requests_are_refused_before_they_are_sent() {
    let (mut a, _b) = two_sides(4096, cfg(1024, 2, Duration::from_secs(20)), 3);
    let e = a.t.put(RemoteSpan { region: 0, offset: 4000 }, a.src.addr(), 97).unwrap_err().to_string();
    assert!(e.contains("outside region 0") && e.contains("rank 1"), "{e}");
    assert!(a.t.put(RemoteSpan { region: 1, offset: 0 }, a.src.addr(), 1).is_err());
    assert!(a.t.signal(2).is_err());
    assert!(a.t.atomic_add(RemoteSpan { region: 0, offset: 4 }, 1).is_err());
    assert!(a.t.atomic_add(RemoteSpan { region: 0, offset: 4096 }, 1).is_err());
    // A source outside the registered memory fails in the sender, and the transport reports it.
    a.t.put(RemoteSpan { region: 0, offset: 0 }, a.src.addr() + 4000, 200).unwrap();
    let e = a.t.flush(deadline()).unwrap_err().to_string();
    assert!(e.contains("not in a registered region"), "{e}");
}

/// A transport under test (rank 0's view: its peer is rank 1) whose incoming connection is
/// driven by the test through the returned stream, raw; its outgoing connection goes to a
/// socket the test holds too.
struct Raw {
    t: TcpTransport,
    dst: Arc<HostRegion>,
    sems: Vec<Arc<AtomicU64>>,
    /// Writes into the transport's receiver; reads its replies (acks, refusals).
    feed: TcpStream,
    /// The other end of the transport's outgoing connection.
    peer_in: TcpStream,
    /// The transport's source region (4 KiB).
    src: Arc<HostRegion>,
}

fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn raw(timeout: Duration) -> Raw {
    raw_with(timeout, |l| l)
}

/// [`raw`] with the landing memory wrapped by `wrap`.
fn raw_with<L: LandingMemory>(timeout: Duration, wrap: impl FnOnce(HostLanding) -> L) -> Raw {
    let (feed, incoming) = socket_pair();
    let (outgoing, peer_in) = socket_pair();
    let dst = HostRegion::filled(4096, POISON);
    let sems = vec![Arc::new(AtomicU64::new(0))];
    let src = HostRegion::filled(4096, 1);
    let c = cfg(1024, 2, timeout);
    let link = Link { peer: 1, outgoing, incoming, peer_max_chunk: 1024 };
    let source = HostSource::new(vec![src.clone()], 2, 1024).unwrap();
    let landing = wrap(HostLanding::new(vec![dst.clone()], sems.clone(), 2, 1024).unwrap());
    let t =
        TcpTransport::start(link, source, landing, RemoteMemory { regions: vec![4096], semaphores: 1 }, &c).unwrap();
    Raw { t, dst, sems, feed, peer_in, src }
}

/// A landing memory that reads every payload into a staging slot and lands it from there (as the
/// GPU landing does), with no direct destination.
struct SlotsOnly(HostLanding);

impl LandingMemory for SlotsOnly {
    fn regions(&self) -> &[u64] {
        self.0.regions()
    }
    fn semaphores(&self) -> usize {
        self.0.semaphores()
    }
    fn slots(&self) -> usize {
        self.0.slots()
    }
    fn slot_bytes(&self) -> usize {
        self.0.slot_bytes()
    }
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]> {
        self.0.slot(slot, deadline)
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        self.0.land(slot, region, offset, len)
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        self.0.signal(semaphore)
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        self.0.atomic_add(region, offset, value)
    }
    fn wait_all(&mut self, deadline: Instant) -> Result<()> {
        self.0.wait_all(deadline)
    }
}

/// Both kinds of host landing: payloads read straight into the region, or through slots.
fn raw_both(timeout: Duration) -> [(&'static str, Raw); 2] {
    [("direct", raw(timeout)), ("slots", raw_with(timeout, SlotsOnly))]
}

/// A landing memory that, like a GPU stream, only queues its work: it takes effect at
/// `wait_all`, or when a staging slot is needed again.
struct Deferred {
    inner: HostLanding,
    queue: Vec<Deferred1>,
}

enum Deferred1 {
    Land(u32, u64, Vec<u8>),
    Signal(u32),
    Add(u32, u64, u64),
}

impl Deferred {
    fn run(&mut self) -> Result<()> {
        for op in std::mem::take(&mut self.queue) {
            match op {
                Deferred1::Land(r, o, data) => {
                    self.inner.slot(0, deadline())?[..data.len()].copy_from_slice(&data);
                    self.inner.land(0, r, o, data.len())?;
                }
                Deferred1::Signal(s) => self.inner.signal(s)?,
                Deferred1::Add(r, o, v) => self.inner.atomic_add(r, o, v)?,
            }
        }
        Ok(())
    }
}

impl LandingMemory for Deferred {
    fn regions(&self) -> &[u64] {
        self.inner.regions()
    }
    fn semaphores(&self) -> usize {
        self.inner.semaphores()
    }
    fn slots(&self) -> usize {
        self.inner.slots()
    }
    fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes()
    }
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]> {
        self.inner.slot(slot, deadline)
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        let data = self.inner.slot(slot, deadline())?[..len].to_vec();
        self.queue.push(Deferred1::Land(region, offset, data));
        Ok(())
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        self.queue.push(Deferred1::Signal(semaphore));
        Ok(())
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        self.queue.push(Deferred1::Add(region, offset, value));
        Ok(())
    }
    fn wait_all(&mut self, _deadline: Instant) -> Result<()> {
        self.run()
    }
}

#[test]
fn a_flush_is_acknowledged_only_once_the_landing_memory_has_done_everything() {
    let mut r = raw_with(Duration::from_secs(20), |inner| Deferred { inner, queue: Vec::new() });
    r.feed.write_all(&put_msg(0, 0, 64, &[1, 2, 3, 4])).unwrap();
    r.feed.write_all(&Header::new(Op::Signal, 0, 1, 0, 0).encode()).unwrap();
    r.feed.write_all(&Header::new(Op::AtomicAdd, 0, 2, 0, 1).encode()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.sems[0].load(Ordering::Acquire), 0, "the deferred landing ran early (the test proves nothing)");
    r.feed.write_all(&Header::new(Op::Flush, 0, 3, 1, 0).encode()).unwrap();
    let mut ack = [0u8; HEADER_LEN];
    r.feed.read_exact(&mut ack).unwrap();
    assert_eq!(Header::decode(&ack).unwrap().op, Op::Ack);
    // Acknowledged: all of it has taken effect.
    assert_eq!(&r.dst.to_vec()[64..68], &[1, 2, 3, 4]);
    assert_eq!(r.sems[0].load(Ordering::Acquire), 1);
    assert_eq!(r.dst.read_u64(0), Some(u64::from_le_bytes([POISON; 8]).wrapping_add(1)));
    r.t.poll().unwrap();
}

fn put_msg(seq: u64, region: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut m = Header::new(Op::Put, region, seq, offset, data.len() as u64).encode().to_vec();
    m.extend_from_slice(data);
    m
}

/// Waits for the transport to report its failure, and returns it.
fn failure(t: &mut TcpTransport) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Err(e) = t.poll() {
            return e.to_string();
        }
        assert!(Instant::now() < deadline, "the transport never failed");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The refusal the receiver sent back on the feed connection.
fn refusal(feed: &mut TcpStream) -> String {
    feed.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut h = [0u8; HEADER_LEN];
    feed.read_exact(&mut h).unwrap();
    let h = Header::decode(&h).unwrap();
    assert_eq!(h.op, Op::Fail);
    let mut text = vec![0u8; h.len as usize];
    feed.read_exact(&mut text).unwrap();
    String::from_utf8(text).unwrap()
}

#[test]
fn valid_raw_messages_land_and_are_acknowledged() {
    let mut r = raw(Duration::from_secs(20));
    r.feed.write_all(&put_msg(0, 0, 100, &[1, 2, 3])).unwrap();
    r.feed.write_all(&Header::new(Op::Signal, 0, 1, 0, 0).encode()).unwrap();
    r.feed.write_all(&Header::new(Op::AtomicAdd, 0, 2, 8, 3).encode()).unwrap();
    r.feed.write_all(&Header::new(Op::Flush, 0, 3, 77, 0).encode()).unwrap();
    let mut ack = [0u8; HEADER_LEN];
    r.feed.read_exact(&mut ack).unwrap();
    assert_eq!(Header::decode(&ack).unwrap(), Header::new(Op::Ack, 0, 0, 77, 0));
    assert_eq!(&r.dst.to_vec()[100..103], &[1, 2, 3]);
    assert_eq!(r.sems[0].load(Ordering::Acquire), 1);
    assert_eq!(r.dst.read_u64(8), Some(u64::from_le_bytes([POISON; 8]).wrapping_add(3)));
    r.feed.write_all(&Header::new(Op::Close, 0, 4, 0, 0).encode()).unwrap();
    // The peer closed its side in order; this side's close sends its own Close and returns.
    r.t.close(deadline()).unwrap();
    let mut close = [0u8; HEADER_LEN];
    r.peer_in.read_exact(&mut close).unwrap();
    assert_eq!(Header::decode(&close).unwrap(), Header::new(Op::Close, 0, 0, 0, 0));
}

/// Each bad message ends the channel with an error naming rank 1, writes nothing, and the
/// sender is told why.
#[test]
fn bad_messages_end_the_channel_without_a_write() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("out of bounds", put_msg(0, 0, 4000, &[7; 200]), "outside region 0"),
        ("unknown region", put_msg(0, 3, 0, &[7; 8]), "region 3 is not registered"),
        ("wrapping offset", put_msg(0, 0, u64::MAX - 3, &[7; 8]), "outside region 0"),
        ("chunk over the slot", put_msg(0, 0, 0, &[7; 1025]), "put chunk of 1025 bytes"),
        ("empty put", put_msg(0, 0, 0, &[]), "put chunk of 0 bytes"),
        ("out of sequence", put_msg(5, 0, 0, &[7; 8]), "out of sequence"),
        (
            "bad magic",
            {
                let mut m = put_msg(0, 0, 0, &[7; 8]);
                m[0] = b'X';
                m
            },
            "bad magic",
        ),
        (
            "bad version",
            {
                let mut m = put_msg(0, 0, 0, &[7; 8]);
                m[4] = 9;
                m
            },
            "version 9",
        ),
        (
            "stray field",
            {
                let mut m = Header::new(Op::Signal, 0, 0, 0, 0).encode().to_vec();
                m[32] = 1;
                m
            },
            "non-zero length",
        ),
        ("unknown semaphore", Header::new(Op::Signal, 1, 0, 0, 0).encode().to_vec(), "semaphore 1 of 1"),
        ("unaligned add", Header::new(Op::AtomicAdd, 0, 0, 4, 1).encode().to_vec(), "unaligned"),
        ("add past the end", Header::new(Op::AtomicAdd, 0, 0, 4096, 1).encode().to_vec(), "outside region 0"),
        ("a reply as request", Header::new(Op::Ack, 0, 0, 1, 0).encode().to_vec(), "reply on the request stream"),
    ];
    for ((name, msg, want), (kind, mut r)) in
        cases.iter().flat_map(|c| raw_both(Duration::from_secs(20)).map(|r| (c, r)))
    {
        let name = format!("{name} ({kind} landing)");
        r.feed.write_all(msg).unwrap();
        let e = failure(&mut r.t);
        assert!(e.contains("rank 1") && e.contains(*want), "{name}: {e}");
        assert!(refusal(&mut r.feed).contains(*want), "{name}: the sender was not told");
        assert!(r.dst.to_vec().iter().all(|&x| x == POISON), "{name}: something was written");
        assert_eq!(r.sems[0].load(Ordering::Acquire), 0, "{name}");
    }
}

/// What a put cut after `got` of its bytes may leave at `at` of the region: with slots, nothing;
/// read straight into the region, exactly the bytes that came, inside the put's range.
fn cut_put_left(kind: &str, d: &[u8], at: usize, got: &[u8]) -> Vec<u8> {
    let mut want = vec![POISON; d.len()];
    if kind == "direct" {
        want[at..at + got.len()].copy_from_slice(got);
    }
    want
}

#[test]
fn a_truncated_put_is_never_acknowledged_and_names_the_peer() {
    for (kind, mut r) in raw_both(Duration::from_secs(20)) {
        // A whole valid put and a flush, acknowledged (so replies do flow on this connection);
        // then a put whose payload stops half-way, then the connection closes.
        r.feed.write_all(&put_msg(0, 0, 0, &[3; 16])).unwrap();
        r.feed.write_all(&Header::new(Op::Flush, 0, 1, 5, 0).encode()).unwrap();
        let mut ack = [0u8; HEADER_LEN];
        r.feed.read_exact(&mut ack).unwrap();
        assert_eq!(Header::decode(&ack).unwrap(), Header::new(Op::Ack, 0, 0, 5, 0), "{kind}");
        let m = put_msg(2, 0, 100, &[9; 600]);
        r.feed.write_all(&m[..HEADER_LEN + 300]).unwrap();
        r.feed.shutdown(std::net::Shutdown::Write).unwrap();
        let e = failure(&mut r.t);
        assert!(e.contains("connection to rank 1 lost") && e.contains("300 bytes into a put of 600"), "{kind}: {e}");
        let left = if kind == "direct" { "never acknowledged" } else { "nothing of that put was written" };
        assert!(e.contains(left), "{kind}: {e}");
        let d = r.dst.to_vec();
        assert_eq!(&d[..16], &[3; 16], "{kind}: the whole put before it landed");
        assert_eq!(d[16..], cut_put_left(kind, &d, 100, &[9; 300])[16..], "{kind}: what the cut put left");
        // Nothing more was acknowledged: the connection carried no reply after the flush's.
        drop(r.t);
        let mut reply = Vec::new();
        r.feed.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = r.feed.read_to_end(&mut reply);
        assert!(reply.is_empty(), "{kind}: {} bytes of replies", reply.len());
    }
}

#[test]
fn a_truncated_header_and_a_silent_peer_are_named() {
    let mut r = raw(Duration::from_secs(20));
    r.feed.write_all(&put_msg(0, 0, 0, &[3; 16])[..10]).unwrap();
    r.feed.shutdown(std::net::Shutdown::Write).unwrap();
    let e = failure(&mut r.t);
    assert!(e.contains("connection to rank 1 lost") && e.contains("10 bytes into a message header"), "{e}");
    // A peer that starts a message and goes silent: the timeout, with the peer named.
    for (kind, mut r) in raw_both(Duration::from_millis(300)) {
        r.feed.write_all(&put_msg(0, 0, 8, &[3; 16])[..HEADER_LEN + 4]).unwrap();
        let t = Instant::now();
        let e = failure(&mut r.t);
        assert!(e.contains("timed out") && e.contains("rank 1"), "{kind}: {e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        let d = r.dst.to_vec();
        assert_eq!(d, cut_put_left(kind, &d, 8, &[3; 4]), "{kind}");
    }
}

#[test]
fn a_flush_the_peer_never_confirms_times_out_by_name() {
    // The peer's end reads nothing and never acknowledges.
    let mut r = raw(Duration::from_millis(300));
    r.t.put(RemoteSpan { region: 0, offset: 0 }, 0, 0).unwrap();
    let t = Instant::now();
    let e = r.t.flush(Instant::now() + Duration::from_millis(300)).unwrap_err().to_string();
    assert!(e.contains("timed out") && e.contains("rank 1 to confirm"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // The peer that vanishes instead: its end of the connection closes.
    drop(r.peer_in);
    let e = failure(&mut r.t);
    assert!(e.contains("connection to rank 1 lost"), "{e}");
}

#[test]
fn a_lost_peer_fails_flush_and_poll_with_its_rank() {
    let (mut a, b) = two_sides(4096, cfg(1024, 2, Duration::from_secs(20)), 4);
    drop(b); // rank 1 goes away without closing
    let t = Instant::now();
    let e = failure(&mut a.t);
    assert!(e.contains("connection to rank 1 lost"), "{e}");
    assert!(a.t.flush(deadline()).is_err());
    assert!(t.elapsed() < Duration::from_secs(10), "noticed only after {:?}", t.elapsed());
}

#[test]
fn close_waits_for_the_peer_and_reports_one_that_never_closes() {
    let (mut a, _b) = two_sides(4096, cfg(1024, 2, Duration::from_secs(20)), 5);
    // Rank 1 stays up without closing: rank 0's close gives up at its deadline, by name.
    let e = a.t.close(Instant::now() + Duration::from_millis(300)).unwrap_err().to_string();
    assert!(e.contains("rank 1 to close"), "{e}");
}

#[test]
fn handshakes_need_the_key_and_the_right_instance() {
    use super::wire::{self, Introduction};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let key = Token([1; 16]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let acceptor = std::thread::spawn(move || {
        super::connect::accept_all_for_test(&l, &Token([1; 16]), 0, 42, &[1, 2], 1 << 20, deadline)
    });
    // Wrong key, wrong instance, wrong destination rank, an unexpected rank: all dropped.
    let wrong_key =
        super::connect::connect_for_test(addr, &Token([2; 16]), Introduction { from: 1, to: 0, instance: 42 });
    assert!(wrong_key.is_err());
    let wrong_instance = super::connect::connect_for_test(addr, &key, Introduction { from: 1, to: 0, instance: 41 });
    assert!(wrong_instance.is_err());
    let wrong_to = super::connect::connect_for_test(addr, &key, Introduction { from: 1, to: 3, instance: 42 });
    assert!(wrong_to.is_err());
    let stranger = super::connect::connect_for_test(addr, &key, Introduction { from: 5, to: 0, instance: 42 });
    assert!(stranger.is_err());
    // A process that connects and says nothing, and one that sends garbage.
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut junk = [0u8; wire::CHALLENGE_LEN];
    silent.read_exact(&mut junk).unwrap();
    drop(silent);
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0x55; wire::HELLO_LEN]).unwrap();
    drop(garbage);
    // The real ranks get through.
    let one = super::connect::connect_for_test(addr, &key, Introduction { from: 1, to: 0, instance: 42 }).unwrap();
    let two = super::connect::connect_for_test(addr, &key, Introduction { from: 2, to: 0, instance: 42 }).unwrap();
    assert_eq!((one.1, two.1), (1 << 20, 1 << 20));
    let got = acceptor.join().unwrap().unwrap();
    let mut ranks: Vec<usize> = got.keys().copied().collect();
    ranks.sort();
    assert_eq!(ranks, [1, 2]);
}

#[test]
fn idle_connections_made_first_do_not_hold_up_the_real_ranks() {
    use super::wire::Introduction;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let key = Token(rand::random());
    // Strays that connect before the real ranks and never answer; each would cost a 2 s
    // handshake wait if handshakes were read one after another.
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let acceptor =
        std::thread::spawn(move || super::connect::accept_all_for_test(&l, &key, 0, 7, &[1, 2], 1 << 20, deadline));
    let t = Instant::now();
    for from in [1, 2] {
        super::connect::connect_for_test(addr, &key, Introduction { from, to: 0, instance: 7 }).unwrap();
    }
    let got = acceptor.join().unwrap().unwrap();
    let mut ranks: Vec<usize> = got.keys().copied().collect();
    ranks.sort();
    assert_eq!(ranks, [1, 2]);
    assert!(t.elapsed() < Duration::from_secs(1), "the real ranks got through after {:?}", t.elapsed());
    drop(idle);
}

#[test]
fn connect_peers_times_out_naming_the_missing_rank() {
    // Three ranks; rank 2 never calls connect_peers (it still takes part in the all-gathers).
    let hints = BootstrapHints { key: None, timeout: Some(Duration::from_millis(500)), ..Default::default() };
    let mut boots = local_bootstraps(3, hints);
    let b2 = boots.pop().unwrap();
    let opts = ConnectOptions { max_chunk: 1024, ..Default::default() };
    let silent = std::thread::spawn(move || {
        // Its share of the two all-gathers, and no listener.
        b2.all_gather(&[0; 24]).unwrap();
        b2.all_gather(b"").unwrap();
    });
    let hs: Vec<_> = boots
        .into_iter()
        .map(|b| {
            let o = opts.clone();
            std::thread::spawn(move || {
                let me = b.rank();
                let peers: Vec<PeerAddr> =
                    (0..3).filter(|&p| p != me).map(|rank| PeerAddr { rank, same_machine: true }).collect();
                connect_peers(&b, &peers, &o).map(|_| ()).map_err(|e| e.to_string())
            })
        })
        .collect();
    silent.join().unwrap();
    for h in hs {
        let e = h.join().unwrap().unwrap_err();
        assert!(e.contains("rank 2"), "{e}");
    }
}

#[test]
fn a_peer_that_closed_in_order_and_left_is_no_failure() {
    let (mut a, mut b) = two_sides(4096, cfg(1024, 2, Duration::from_secs(20)), 6);
    a.t.put(RemoteSpan { region: 0, offset: 0 }, a.src.addr(), 4096).unwrap();
    a.t.flush(deadline()).unwrap();
    // Rank 1 ends first: it announces its end, waits (briefly) for rank 0's, and goes away.
    b.t.start_close();
    let e = b.t.close(Instant::now() + Duration::from_millis(200)).unwrap_err().to_string();
    assert!(e.contains("rank 0 to close"), "{e}");
    drop(b);
    std::thread::sleep(Duration::from_millis(100));
    // Rank 0 saw an orderly end, not a lost peer; with nothing to flush, its own end is clean.
    a.t.poll().unwrap();
    a.t.start_close();
    a.t.close(deadline()).unwrap();
}

/// Host memory goes out of the source region and into the destination region in place: puts of
/// many sizes (around the chunk, the 64 KiB small-payload limit, the receiver's 16 KiB read
/// buffer), from and to odd offsets, both ways at once, each rank's one region at the same time
/// the source of its puts and the destination of its peer's (a sender that held a region's lock
/// while the socket is full would make the two ranks wait for each other until the timeout).
/// After each put: a flush, or a signal whose arrival the test waits for, sometimes behind an
/// atomic add; then the peer's whole destination half is compared with the model, byte for byte.
#[test]
fn host_memory_puts_in_place_of_every_size_land_byte_for_byte() {
    const HALF: usize = 12 << 20;
    let chunk = 256 << 10;
    let (a, b) = sides(HALF, cfg(chunk, 3, Duration::from_secs(20)), 11, true);
    let mut sizes = vec![HALF, 1, 2, 3, 7, 8, 9, 4095, 4097, 16 << 10, (16 << 10) + 1, 65535, 65536, 65537];
    sizes.extend([chunk - 1, chunk, chunk + 1, 3 * chunk + 5, (5 << 20) + 3]);
    let run = move |mut me: Side, peer: Arc<HostRegion>, peer_sem: Arc<AtomicU64>, seed: u64| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut sizes = sizes.clone();
        sizes.extend((0..24).map(|_| rng.random_range(1..=600_000usize)));
        let mine = me.src.to_vec();
        // The peer's second half as it should be: poison, then what this rank put and added.
        let mut model = vec![POISON; HALF];
        let mut signals = 0;
        for (i, &len) in sizes.iter().enumerate() {
            let src = rng.random_range(0..=HALF - len);
            let dst = rng.random_range(0..=HALF - len);
            me.t.put(RemoteSpan { region: 0, offset: (HALF + dst) as u64 }, me.src.addr() + src as u64, len as u64)
                .unwrap();
            model[dst..dst + len].copy_from_slice(&mine[src..src + len]);
            if i % 3 == 2 {
                // Into the bytes just put, where they allow an aligned word.
                let at = (dst + len).saturating_sub(8) & !7;
                let v = rng.random::<u64>();
                me.t.atomic_add(RemoteSpan { region: 0, offset: (HALF + at) as u64 }, v).unwrap();
                let w = u64::from_le_bytes(model[at..at + 8].try_into().unwrap()).wrapping_add(v);
                model[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
            if i % 2 == 0 {
                me.t.flush(deadline()).unwrap();
            } else {
                me.t.signal(0).unwrap();
                signals += 1;
                wait_for("the signal after a put", || peer_sem.load(Ordering::Acquire) == signals);
            }
            assert!(peer.to_vec()[HALF..] == model[..], "put {i} of {len} from {src} to {dst}");
        }
        // This rank's own half was only read.
        assert!(me.src.to_vec()[..HALF] == mine[..HALF]);
        me
    };
    let (pa, pb) = ((b.dst.clone(), b.sems[0].clone()), (a.dst.clone(), a.sems[0].clone()));
    let run2 = run.clone();
    let ta = std::thread::spawn(move || run2(a, pa.0, pa.1, 21));
    let mut b = run(b, pb.0, pb.1, 22);
    let mut a = ta.join().unwrap();
    let tb = std::thread::spawn(move || b.t.close(deadline()));
    a.t.close(deadline()).unwrap();
    tb.join().unwrap().unwrap();
}

/// Hints as a bootstrap whose session token was derived from the job id gives them.
fn derived_token_hints(timeout: Duration) -> BootstrapHints {
    BootstrapHints { key: Some(Token([7; 16])), timeout: Some(timeout), token_derived: true, ..Default::default() }
}

/// Rank 0 of two inside [`connect_peers`] toward rank 1 (on this machine or not, as
/// `same_machine` says), advertising `advertise`; rank 1 is played by hand: it advertises a
/// listener that never answers, so rank 0's own listener stays open (for 2 s) while `probe`
/// runs with the address rank 0 advertised. Returns rank 0's error (rank 1 never completes).
fn while_rank_0_listens(same_machine: bool, advertise: std::net::IpAddr, probe: impl FnOnce(SocketAddr)) -> String {
    let mut boots = local_bootstraps(2, derived_token_hints(Duration::from_secs(2)));
    let b1 = boots.pop().unwrap();
    let b0 = boots.pop().unwrap();
    let opts = ConnectOptions { max_chunk: 1024, advertise: Some(advertise), ..Default::default() };
    let rank0 = std::thread::spawn(move || {
        connect_peers(&b0, &[PeerAddr { rank: 1, same_machine }], &opts).map(drop).map_err(|e| e.to_string())
    });
    b1.all_gather(&[0; 24]).unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = b1.all_gather(silent.local_addr().unwrap().to_string().as_bytes()).unwrap();
    let text = String::from_utf8(addrs[0].clone()).unwrap();
    probe(text.parse().unwrap_or_else(|_| panic!("rank 0 advertised {text:?}")));
    rank0.join().unwrap().unwrap_err()
}

fn connects(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

#[test]
fn the_listener_binds_loopback_when_every_peer_is_on_this_machine() {
    // Advertised: an address of no machine (TEST-NET-1); with every peer here it is not used,
    // and a token derived from the job id is then no obstacle.
    let e = while_rank_0_listens(true, "192.0.2.1".parse().unwrap(), |addr| {
        assert_eq!(addr.ip().to_string(), "127.0.0.1", "advertised {addr}");
        assert!(connects(addr), "rank 0 listens at {addr}");
        // 127.0.0.2 reaches this machine's every-interface listeners too, never one bound to
        // 127.0.0.1 (the listener used to bind 0.0.0.0).
        let other = SocketAddr::new("127.0.0.2".parse().unwrap(), addr.port());
        assert!(!connects(other), "rank 0's listener takes connections at {other}: bound beyond loopback");
    });
    // Rank 1's listener takes the connection and never challenges: what rank 0 waited for is
    // named (a survivor of `./x mutants tcp`: `connect_peers` retrying while less than its pause
    // was left, `+` read as `-`, went past the deadline and said only "a TCP connection to").
    assert!(e.contains("timed out") && e.contains("waiting for the peer's challenge"), "{e}");
}

#[test]
fn toward_another_machine_the_listener_binds_the_advertised_address_only() {
    // 127.0.0.2 stands for this machine's address on the network (any loopback address may be
    // listened on under a derived token).
    let e = while_rank_0_listens(false, "127.0.0.2".parse().unwrap(), |addr| {
        assert_eq!(addr.ip().to_string(), "127.0.0.2", "advertised {addr}");
        assert!(connects(addr), "rank 0 listens at {addr}");
        let other = SocketAddr::new("127.0.0.1".parse().unwrap(), addr.port());
        assert!(!connects(other), "rank 0's listener takes connections at {other}: bound beyond its address");
    });
    assert!(e.contains("timed out"), "{e}");
}

/// Both ranks of two in [`connect_peers`], toward each other as on other machines, rank `r`
/// advertising `advertise[r]` under `hints`: their errors, and how long the slower took.
fn two_ranks_apart(advertise: [&str; 2], hints: BootstrapHints) -> ([String; 2], Duration) {
    let t = Instant::now();
    let hs: Vec<_> = local_bootstraps(2, hints)
        .into_iter()
        .zip(advertise)
        .map(|(b, a)| {
            let opts = ConnectOptions { max_chunk: 1024, advertise: Some(a.parse().unwrap()), ..Default::default() };
            std::thread::spawn(move || {
                let peer = PeerAddr { rank: 1 - b.rank(), same_machine: false };
                connect_peers(&b, &[peer], &opts).map(drop).map_err(|e| e.to_string())
            })
        })
        .collect();
    let errors: Vec<String> = hs.into_iter().map(|h| h.join().unwrap().unwrap_err()).collect();
    (errors.try_into().unwrap(), t.elapsed())
}

#[test]
fn a_derived_token_never_listens_beyond_loopback() {
    // 192.0.2.1 is never bound: the refusal comes first, on both ranks, at once.
    let (errors, took) = two_ranks_apart(["192.0.2.1", "192.0.2.1"], derived_token_hints(Duration::from_secs(20)));
    for e in &errors {
        assert!(e.contains("192.0.2.1") && e.contains("MSCCLPP_RS_TOKEN") && e.contains("openssl rand -hex 16"), "{e}");
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_rank_that_cannot_listen_fails_its_peers_at_once_by_name() {
    // Rank 0 is told to listen on an address of no machine (its token was given, so it tries);
    // rank 1 listens, and learns in the address all-gather that rank 0 will not.
    let hints =
        BootstrapHints { key: Some(Token([7; 16])), timeout: Some(Duration::from_secs(20)), ..Default::default() };
    let ([e0, e1], took) = two_ranks_apart(["192.0.2.1", "127.0.0.2"], hints);
    assert!(e0.contains("listening on 192.0.2.1") && e0.contains("MSCCLPP_RS_TRANSPORT_ADDR"), "{e0}");
    assert!(e1.contains("rank 0 could not listen") && e1.contains("192.0.2.1"), "{e1}");
    assert!(took < Duration::from_secs(5), "took {took:?}: a peer waited for a rank that was not listening");
}

#[test]
fn listen_addresses_follow_the_peers_and_the_token() {
    use super::connect::{check_listen_ip_for_test as check, listen_ip_for_test as listen_ip};
    let here = PeerAddr { rank: 1, same_machine: true };
    let away = PeerAddr { rank: 2, same_machine: false };
    let (v4, v6): (std::net::IpAddr, std::net::IpAddr) = ("10.1.2.3".parse().unwrap(), "fd00::5".parse().unwrap());
    assert_eq!(listen_ip(&[here], v4).to_string(), "127.0.0.1");
    assert_eq!(listen_ip(&[here], v6).to_string(), "::1");
    assert_eq!(listen_ip(&[here, away], v4), v4);
    assert_eq!(listen_ip(&[away], v6), v6);
    let derived = derived_token_hints(Duration::from_secs(1));
    let given = BootstrapHints { token_derived: false, ..derived.clone() };
    // A bootstrap without a key: rank 0 draws one, sent through the bootstrap.
    let keyless = BootstrapHints { key: None, ..derived.clone() };
    assert!(check(v4, &derived).unwrap_err().to_string().contains("MSCCLPP_RS_TOKEN"));
    assert!(check(v6, &derived).is_err());
    for ok in [check(v4, &given), check(v4, &keyless), check("127.0.0.1".parse().unwrap(), &derived)] {
        ok.unwrap();
    }
    check("::1".parse().unwrap(), &derived).unwrap();
    for any in ["0.0.0.0", "::"] {
        let e = check(any.parse().unwrap(), &given).unwrap_err().to_string();
        assert!(e.contains("every interface") && e.contains("MSCCLPP_RS_TRANSPORT_ADDR"), "{e}");
    }
}

/// A landing memory that trusts the receiver's range check, as a GPU landing's copy would without
/// its own: it records every request for a place to put a payload (a direct span, a slot, a
/// landing) and writes nothing.
struct Trusting {
    inner: HostLanding,
    asked: Arc<Mutex<Vec<String>>>,
}

impl LandingMemory for Trusting {
    fn regions(&self) -> &[u64] {
        self.inner.regions()
    }
    fn semaphores(&self) -> usize {
        self.inner.semaphores()
    }
    fn slots(&self) -> usize {
        self.inner.slots()
    }
    fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes()
    }
    fn direct(&mut self, region: u32, offset: u64, len: usize) -> Result<Option<HostSpan<'_>>> {
        self.asked.lock().unwrap().push(format!("direct({region}, {offset}, {len})"));
        Ok(None)
    }
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]> {
        self.asked.lock().unwrap().push(format!("slot({slot})"));
        self.inner.slot(slot, deadline)
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        self.asked.lock().unwrap().push(format!("land({slot}, {region}, {offset}, {len})"));
        Ok(())
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        self.inner.signal(semaphore)
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        self.inner.atomic_add(region, offset, value)
    }
    fn wait_all(&mut self, deadline: Instant) -> Result<()> {
        self.inner.wait_all(deadline)
    }
}

/// Exists for a planted bug caught only narrowly before: the receiver's own range check of a put
/// dropped (the host landing's second check still refused the put, and the GPU landing's is never
/// run without a GPU). A put outside the registered regions (past the end, wrapping, or to a region
/// that does not exist; fresh random values) is refused by the receiver before the landing memory
/// is asked for anything, so a landing that trusts the receiver writes nothing either.
#[test]
fn out_of_range_puts_never_reach_the_landing_memory() {
    let mut rng = rand::rng();
    let len = rng.random_range(1..=1024usize);
    let cases = [
        (0u32, rng.random_range(4097 - len as u64..1 << 20), "outside region 0"),
        (0, u64::MAX - rng.random_range(0..len as u64), "outside region 0"),
        (rng.random_range(1..1000u32), rng.random_range(0..4096 - len as u64), "is not registered"),
    ];
    for (region, offset, want) in cases {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let mut r = raw_with(Duration::from_secs(20), move |inner| Trusting { inner, asked: seen });
        r.feed.write_all(&put_msg(0, region, offset, &vec![7; len])).unwrap();
        let case = format!("a put of {len} bytes at {offset} of region {region}");
        // Until the transport fails, or the put reaches the landing memory.
        let deadline = Instant::now() + Duration::from_secs(20);
        let e = loop {
            if let Err(e) = r.t.poll() {
                break e.to_string();
            }
            assert!(asked.lock().unwrap().is_empty(), "{case} reached the landing memory: {:?}", asked.lock().unwrap());
            assert!(Instant::now() < deadline, "{case}: the transport never failed");
            std::thread::sleep(Duration::from_millis(2));
        };
        assert!(asked.lock().unwrap().is_empty(), "{case} reached the landing memory: {:?}", asked.lock().unwrap());
        assert!(e.contains(want), "{case}: {e}");
        assert!(refusal(&mut r.feed).contains(want), "{case}: the sender was not told");
        assert!(r.dst.to_vec().iter().all(|&x| x == POISON), "{case}: something was written");
    }
}

/// `TcpConfig::validate`, which every transport runs before it starts (a test found by mutation
/// testing: nothing refused a zero field before): each field at zero alone is refused, naming the
/// configuration; the default and the smallest positive values pass.
#[test]
fn a_configuration_with_a_zero_field_is_refused() {
    assert!(TcpConfig::default().validate().is_ok());
    assert!(cfg(1, 1, Duration::from_nanos(1)).validate().is_ok());
    let second = Duration::from_secs(1);
    for c in [cfg(0, 8, second), cfg(1024, 0, second), cfg(1024, 8, Duration::ZERO)] {
        let e = c.validate().expect_err("a zero field").to_string();
        assert!(e.contains("every field must be positive") && e.contains(&format!("{c:?}")), "{e}");
    }
}

/// A survivor of `./x mutants tcp`: `describe` returning an empty or made-up text. The transport
/// describes itself by its peer.
#[test]
fn the_transport_describes_itself_by_its_peer() {
    assert_eq!(raw(Duration::from_secs(20)).t.describe(), "TCP to rank 1");
}

/// A survivor of `./x mutants tcp`: the guard of `close`'s "the Close could not be sent" arm made
/// true, so that a channel that had already failed (its peer lost) passed its Close and reported
/// the failure only through the later check, as a protocol error. A peer whose connection ends
/// without its Close: `close` (the failure not yet taken by a poll) reports the lost peer as
/// [`Error::PeerLost`] naming it, what callers match on.
#[test]
fn close_reports_a_peer_lost_before_it_as_lost() {
    let mut r = raw(Duration::from_secs(20));
    r.feed.shutdown(std::net::Shutdown::Write).unwrap();
    wait_for("the receiver to fail", || r.t.shared.failed.load(Ordering::Acquire));
    match r.t.close(deadline()) {
        Err(Error::PeerLost { peer: 1, detail }) => assert!(detail.contains("without the channel's close"), "{detail}"),
        other => panic!("close after the peer was lost: {other:?}"),
    }
}

/// Rank 1 of two, played by hand against rank 0 inside [`connect_peers`] (whose result is
/// returned): its listener first passes every connection to `first`, until that returns false,
/// then accepts rank 0's connection properly; it connects to rank 0 as a rank does.
fn rank_1_by_hand(timeout: Duration, mut first: impl FnMut(TcpStream) -> bool + Send + 'static) -> Result<Vec<Link>> {
    use super::wire::Introduction;
    let key = Token([5; 16]);
    let hints = BootstrapHints { key: Some(key), timeout: Some(timeout), ..Default::default() };
    let mut boots = local_bootstraps(2, hints);
    let b1 = boots.pop().unwrap();
    let b0 = boots.pop().unwrap();
    let rank0 = std::thread::spawn(move || {
        let opts = ConnectOptions { max_chunk: 1024, ..Default::default() };
        connect_peers(&b0, &[PeerAddr { rank: 1, same_machine: true }], &opts)
    });
    let setup = b1.all_gather(&[0; 24]).unwrap();
    let instance = u64::from_le_bytes(setup[0][16..24].try_into().unwrap());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = b1.all_gather(l.local_addr().unwrap().to_string().as_bytes()).unwrap();
    let rank0_addr: SocketAddr = std::str::from_utf8(&addrs[0]).unwrap().parse().unwrap();
    let until = Instant::now() + timeout;
    let acceptor = std::thread::spawn(move || {
        while first(l.accept().unwrap().0) {}
        super::connect::accept_all_for_test(&l, &key, 1, instance, &[0], 1024, until)
    });
    let out = super::connect::connect_for_test(rank0_addr, &key, Introduction { from: 1, to: 0, instance });
    let got = rank0.join().unwrap();
    // Rank 0's connection came, or rank 0 gave up: either way rank 1's side is over.
    let _ = (out, acceptor.join().unwrap());
    got
}

/// Survivors of `./x mutants tcp`: `connect_peers` not trying a peer's connection again after an
/// error that is not the peer's wrong answer (its retry guard made false, its `!` deleted, or
/// its `<` read as `==`). Rank 1 drops rank 0's first connection before the challenge (as a
/// peer does whose handshake wait ran out): rank 0 connects again and gets through.
#[test]
fn a_connection_dropped_before_its_handshake_is_tried_again() {
    let dropped = Arc::new(AtomicU64::new(0));
    let count = dropped.clone();
    let links = rank_1_by_hand(Duration::from_secs(2), move |s| {
        drop(s);
        count.fetch_add(1, Ordering::AcqRel);
        false
    })
    .expect("rank 0 connects again after its first connection was dropped");
    assert_eq!(links.len(), 1);
    assert_eq!((links[0].peer, links[0].peer_max_chunk), (1, 1024));
    assert_eq!(dropped.load(Ordering::Acquire), 1);
}

/// Survivors of `./x mutants tcp`: `connect_one` not connecting again after a refused connection
/// (its retry guard made false, its `<` read as `==` or `>`). The peer starts listening only
/// after the first attempts were refused: the connection is made once it does.
#[test]
fn a_refused_connection_is_tried_again_until_the_peer_listens() {
    use super::wire::Introduction;
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    assert!(TcpStream::connect(addr).is_err(), "something listens at {addr} already");
    let key = Token([3; 16]);
    let acceptor = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(60));
        let l = TcpListener::bind(addr).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        super::connect::accept_all_for_test(&l, &key, 0, 7, &[1], 1 << 20, until)
    });
    let got = super::connect::connect_for_test(addr, &key, Introduction { from: 1, to: 0, instance: 7 });
    assert_eq!(got.expect("connected once the peer listened").1, 1 << 20);
    assert_eq!(acceptor.join().unwrap().unwrap().keys().copied().collect::<Vec<_>>(), [1]);
}

/// Survivors of `./x mutants tcp`: `accept_all` taking a second connection from a rank in the
/// place of its first (the guard `waiting.contains(&rank)` made true), its count of rejected
/// connections never raised (`+=` read as `-=` or `*=`, for either kind of rejection), its note
/// of them given only when there are none (`rejected > 0` read as `== 0` or `< 0`), and its
/// pending handshakes evicted below the cap (`>=` read as `<`: each new connection ended the one
/// before). A stray with another key, then rank 1 twice at once (both handshakes under way
/// before either ends), and rank 2 never: the timeout counts both rejections and names the
/// second connection.
#[test]
fn the_accept_timeout_counts_a_stray_and_a_second_connection_from_a_rank() {
    use super::wire::{self, Introduction};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let key = Token([4; 16]);
    let until = Instant::now() + Duration::from_millis(700);
    let acceptor = std::thread::spawn(move || super::connect::accept_all_for_test(&l, &key, 0, 9, &[1, 2], 64, until));
    let intro = Introduction { from: 1, to: 0, instance: 9 };
    assert!(super::connect::connect_for_test(addr, &Token([8; 16]), intro).is_err());
    let mut twice = [TcpStream::connect(addr).unwrap(), TcpStream::connect(addr).unwrap()];
    let mut servers = Vec::new();
    for s in &mut twice {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut c = [0u8; wire::CHALLENGE_LEN];
        s.read_exact(&mut c).unwrap();
        servers.push(wire::parse_challenge(&c).unwrap());
    }
    for (s, server) in twice.iter_mut().zip(&servers) {
        let client = [6; wire::NONCE_LEN];
        s.write_all(&wire::hello(&key, &intro, server, &client)).unwrap();
        let mut w = [0u8; wire::WELCOME_LEN];
        s.read_exact(&mut w).unwrap();
        assert_eq!(wire::parse_welcome(&w, &key, &intro, server, &client), Ok(64));
    }
    let e = acceptor.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("connections from rank(s) [2] (2 connection(s) rejected, the last: 127.0.0.1:"), "{e}");
    assert!(e.contains("a second connection from rank 1"), "{e}");
}

/// Survivors of `./x mutants tcp`: `accept_all` taking every accept error for "no connection
/// yet" (the guard `e.kind() == WouldBlock` made true: the listener was waited on until the
/// deadline), or for an interrupted call (the guard `e.kind() == Interrupted` made true, or its
/// `==` read as `!=`: the loop spun on the error for ever). The listener is shut down under the
/// accept loop: the error comes at once, naming what failed.
#[test]
fn an_accept_error_ends_the_accept_loop_at_once() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let handle = l.try_clone().unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(super::connect::accept_all_for_test(&l, &Token([2; 16]), 0, 1, &[1], 64, until));
    });
    std::thread::sleep(Duration::from_millis(20));
    // A listening socket shut down for reading stops listening: its accept fails (EINVAL).
    nix::sys::socket::shutdown(std::os::fd::AsRawFd::as_raw_fd(&handle), nix::sys::socket::Shutdown::Read).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(2)).expect("the accept loop went on after its listener failed");
    let e = got.unwrap_err().to_string();
    assert!(e.contains("accepting a transport connection"), "{e}");
}

/// A survivor of `./x mutants tcp` on machines whose host name resolves to a network address, or
/// to a loopback address other than 127.0.0.1: `default_advertise`'s `!` deleted, so that a
/// loopback address of the host name was advertised to peers on other machines. Without
/// `MSCCLPP_RS_TRANSPORT_ADDR` and a bootstrap's local address, the address advertised is one of
/// the host name's that is not loopback, else 127.0.0.1.
#[test]
fn the_default_address_is_the_host_names_network_address() {
    use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
    if std::env::var_os(super::connect::ENV_TRANSPORT_ADDR).is_some() {
        println!("SKIP the_default_address_is_the_host_names_network_address: MSCCLPP_RS_TRANSPORT_ADDR is set");
        return;
    }
    let boot = local_bootstraps(1, BootstrapHints::default()).pop().unwrap();
    let got = super::connect::default_advertise_for_test(&boot).unwrap();
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let resolved: Vec<IpAddr> =
        (host.as_str(), 0).to_socket_addrs().map(|a| a.map(|a| a.ip()).collect()).unwrap_or_default();
    if resolved.iter().any(|ip| !ip.is_loopback()) {
        assert!(!got.is_loopback() && resolved.contains(&got), "{got} of {host}'s {resolved:?}");
    } else {
        assert_eq!(got, IpAddr::V4(Ipv4Addr::LOCALHOST), "{host} resolves to {resolved:?}");
    }
}

/// A survivor of `./x mutants tcp`: `accept_all`'s note of rejected connections given when there
/// are none (`rejected > 0` read as `>= 0`). Nobody connects: the timeout names the missing ranks
/// and nothing else.
#[test]
fn an_accept_timeout_without_strays_names_the_missing_ranks_only() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let until = Instant::now() + Duration::from_millis(50);
    let e = super::connect::accept_all_for_test(&l, &Token([2; 16]), 0, 1, &[1, 2], 64, until).unwrap_err();
    assert!(e.to_string().ends_with("waiting for TCP transport connections from rank(s) [1, 2]"), "{e}");
}

/// A survivor of `./x mutants tcp`: a handshake's deadline set in the past (`Instant::now() +
/// HANDSHAKE_WAIT` read as `-`), so that only a hello already there when the challenge went out
/// was read. A rank that answers its challenge after a pause well within the handshake wait is
/// welcomed.
#[test]
fn a_hello_that_takes_a_moment_is_welcomed() {
    use super::wire::{self, Introduction};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let key = Token([6; 16]);
    let until = Instant::now() + Duration::from_secs(5);
    let acceptor = std::thread::spawn(move || super::connect::accept_all_for_test(&l, &key, 0, 3, &[1], 64, until));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut c = [0u8; wire::CHALLENGE_LEN];
    s.read_exact(&mut c).unwrap();
    let server = wire::parse_challenge(&c).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (intro, client) = (Introduction { from: 1, to: 0, instance: 3 }, [1; wire::NONCE_LEN]);
    s.write_all(&wire::hello(&key, &intro, &server, &client)).unwrap();
    let mut w = [0u8; wire::WELCOME_LEN];
    s.read_exact(&mut w).expect("a welcome");
    assert_eq!(wire::parse_welcome(&w, &key, &intro, &server, &client), Ok(64));
    assert_eq!(acceptor.join().unwrap().unwrap().keys().copied().collect::<Vec<_>>(), [1]);
}

/// A survivor of `./x mutants tcp`: the handshakes' numbers never raised (`next_id += 1` read as
/// `*=`), so that the first handshake to end took every pending one off the list, and a stray
/// still in its handshake when the real ranks were in kept its connection (and its thread) until
/// its handshake wait ran out. A stray takes its challenge and says nothing; once rank 1 is in,
/// the stray's connection ends at once.
#[test]
fn the_end_of_the_accept_loop_ends_the_handshakes_still_pending() {
    use super::wire::{self, Introduction};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let key = Token([7; 16]);
    let until = Instant::now() + Duration::from_secs(5);
    let acceptor = std::thread::spawn(move || super::connect::accept_all_for_test(&l, &key, 0, 5, &[1], 64, until));
    let mut stray = TcpStream::connect(addr).unwrap();
    stray.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    stray.read_exact(&mut [0u8; wire::CHALLENGE_LEN]).unwrap();
    super::connect::connect_for_test(addr, &key, Introduction { from: 1, to: 0, instance: 5 }).unwrap();
    assert_eq!(acceptor.join().unwrap().unwrap().keys().copied().collect::<Vec<_>>(), [1]);
    // Well within the handshake wait (2 s).
    let r = stray.read(&mut [0u8; 1]);
    let ended = matches!(r, Ok(0)) || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
    assert!(ended, "the pending stray's connection: {r:?}");
}

/// Survivors of `./x mutants tcp`: the ack reader taking every refusal for a bad reply (its guard
/// `h.len <= MAX_FAIL_TEXT` made false, or `<=` read as `>`), or reading a refusal's text of any
/// length (the guard made true). The peer refuses with a reason: the transport fails naming the
/// peer and the reason; a refusal announcing more text than a refusal may carry is a bad reply.
#[test]
fn a_refusal_from_the_peer_is_reported_with_its_reason() {
    let mut r = raw(Duration::from_secs(20));
    let mut fail = Header::new(Op::Fail, 0, 0, 0, 4).encode().to_vec();
    fail.extend_from_slice(b"nope");
    r.peer_in.write_all(&fail).unwrap();
    let e = failure(&mut r.t);
    assert!(e.contains("rank 1 refused this rank's port-channel data: nope"), "{e}");
    let mut r = raw(Duration::from_secs(20));
    r.peer_in.write_all(&Header::new(Op::Fail, 0, 0, 0, super::wire::MAX_FAIL_TEXT + 1).encode()).unwrap();
    r.peer_in.shutdown(std::net::Shutdown::Write).unwrap();
    let e = failure(&mut r.t);
    assert!(e.contains("rank 1 sent a bad reply over TCP: Fail"), "{e}");
}

/// Survivors of `./x mutants tcp`: a receiver that waits without limit for the rest of a
/// message whose first part has come, where that part is a header's first bytes or a whole
/// header (`!(idle_ok && got == 0)` with its `&&` read as `||`), or one that gives up before the
/// timeout (`last.elapsed() >= timeout` read as `<`). A peer that goes silent there is timed out,
/// by name, once the timeout has passed.
#[test]
fn a_peer_silent_after_a_header_or_part_of_one_times_out_by_name() {
    let header = put_msg(0, 0, 8, &[3; 16])[..HEADER_LEN].to_vec();
    for (cut, what) in [(10, "part of a header"), (HEADER_LEN, "a put's header")] {
        for (kind, mut r) in raw_both(Duration::from_millis(200)) {
            r.feed.write_all(&header[..cut]).unwrap();
            let sent = Instant::now();
            let e = failure(&mut r.t);
            assert!(e.contains("timed out") && e.contains("rank 1 to send the rest"), "{what} ({kind}): {e}");
            // Not before the timeout (`read_with`'s `>=` read as `<` gave up at the first wait).
            assert!(
                sent.elapsed() >= Duration::from_millis(200),
                "{what} ({kind}): gave up after {:?}",
                sent.elapsed()
            );
        }
    }
}

/// Survivors of `./x mutants tcp`: the sender's blocked write not reported as a stuck receiver
/// (`write_all`'s match arm for `WouldBlock | TimedOut` deleted: reported as a lost peer; its
/// guard for `Interrupted` made true or its `==` read as `!=`: the write tried again for ever).
/// The peer reads nothing: once the connection is full, the sender's write gives up after the
/// timeout and the transport fails, saying the peer's receiver is stuck.
#[test]
fn a_peer_that_reads_nothing_is_reported_stuck() {
    let mut r = raw(Duration::from_millis(200));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Puts of small chunks, which go out through the sender's buffer, until one is refused.
        let (to, from) = (RemoteSpan { region: 0, offset: 0 }, r.src.addr());
        if (0..1_000_000).all(|_| r.t.put(to, from, 4096).is_ok()) {
            return;
        }
        // The put may have seen the sender's end before its reason was recorded: the reason.
        let _ = tx.send(failure(&mut r.t));
    });
    let e = rx.recv_timeout(Duration::from_secs(5)).expect("the puts went on after the timeout");
    assert!(e.contains("timed out") && e.contains("rank 1 to take data sent over TCP (its receiver is stuck)"), "{e}");
}

/// How long was left until each deadline a memory side was given, when it was given.
type Waits = Arc<Mutex<Vec<(&'static str, Duration)>>>;

fn left(d: Instant) -> Duration {
    d.saturating_duration_since(Instant::now())
}

/// A source that copies each chunk into a staging slot of its own when it is staged and hands
/// out the copy (as the GPU source does), recording the deadlines it is given.
struct Staging {
    inner: HostSource,
    copies: Vec<Vec<u8>>,
    waits: Waits,
}

impl SourceMemory for Staging {
    fn slots(&self) -> usize {
        self.inner.slots()
    }
    fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes()
    }
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()> {
        self.inner.stage(slot, src, len)?;
        let Outgoing::InPlace(span) = self.inner.staged(slot, len, deadline())? else { unreachable!("host memory") };
        self.copies[slot] = span.with(|d| d.to_vec());
        Ok(())
    }
    fn staged(&mut self, slot: usize, len: usize, deadline: Instant) -> Result<Outgoing<'_>> {
        self.waits.lock().unwrap().push(("staged", left(deadline)));
        assert_eq!(self.copies[slot].len(), len, "slot {slot}");
        Ok(Outgoing::Staged(&self.copies[slot]))
    }
}

/// A landing memory through staging slots only (as the GPU landing), recording the slots it is
/// asked for and the deadlines it is given.
struct Watched {
    inner: HostLanding,
    slots: Arc<Mutex<Vec<usize>>>,
    waits: Waits,
}

impl LandingMemory for Watched {
    fn regions(&self) -> &[u64] {
        self.inner.regions()
    }
    fn semaphores(&self) -> usize {
        self.inner.semaphores()
    }
    fn slots(&self) -> usize {
        self.inner.slots()
    }
    fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes()
    }
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]> {
        self.slots.lock().unwrap().push(slot);
        self.waits.lock().unwrap().push(("slot", left(deadline)));
        self.inner.slot(slot, deadline)
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        self.inner.land(slot, region, offset, len)
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        self.inner.signal(semaphore)
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        self.inner.atomic_add(region, offset, value)
    }
    fn wait_all(&mut self, deadline: Instant) -> Result<()> {
        self.waits.lock().unwrap().push(("wait_all", left(deadline)));
        self.inner.wait_all(deadline)
    }
}

/// Survivors of `./x mutants tcp`, all in code only a GPU's memory sides reach: the sender
/// copying a large staged chunk into its buffer (then dropped with it) or writing a small one
/// alone (then sent twice) (its guards `len <= SMALL_PAYLOAD` of a staged chunk made true or
/// false, or `<=` read as `>`); the receiver's staging slots not taken in turn (`% slots` read
/// as `/`, `+ 1` as `* 1`); and the deadlines the memory sides are given (`Instant::now() +
/// timeout` read as `-`, for a staged chunk, a slot, a flush's and a close's wait and the
/// receiver's last wait). Rank 0 puts from a source that stages copies, of a small chunk and of
/// large ones, into rank 1's landing through slots: everything lands, the slots are taken in
/// turn, and every deadline is the timeout away.
#[test]
fn staged_chunks_land_through_slots_in_turn_within_the_timeout() {
    const CHUNK: usize = 128 << 10;
    let (bytes, timeout) = (3 * CHUNK + 2000, Duration::from_secs(20));
    let (waits, slots): (Waits, Arc<Mutex<Vec<usize>>>) = Default::default();
    let landed = slots.clone();
    let (a_out, b_in) = socket_pair();
    let (b_out, a_in) = socket_pair();
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 4096) as u8).collect();
    let (src, dst) = (HostRegion::from_slice(&data), HostRegion::filled(bytes, POISON));
    let c = cfg(CHUNK, 3, timeout);
    let remote = RemoteMemory { regions: vec![bytes as u64], semaphores: 0 };
    let source = Staging {
        inner: HostSource::new(vec![src.clone()], 3, CHUNK).unwrap(),
        copies: vec![Vec::new(); 3],
        waits: waits.clone(),
    };
    let unused = HostLanding::new(vec![HostRegion::filled(8, 0)], Vec::new(), 1, 8).unwrap();
    let link = Link { peer: 1, outgoing: a_out, incoming: a_in, peer_max_chunk: CHUNK as u64 };
    let mut a = TcpTransport::start(link, source, unused, remote.clone(), &c).unwrap();
    let landing = Watched {
        inner: HostLanding::new(vec![dst.clone()], Vec::new(), 3, CHUNK).unwrap(),
        slots,
        waits: waits.clone(),
    };
    let link = Link { peer: 0, outgoing: b_out, incoming: b_in, peer_max_chunk: CHUNK as u64 };
    let unused = HostSource::new(vec![HostRegion::filled(8, 0)], 1, 8).unwrap();
    let mut b = TcpTransport::start(link, unused, landing, remote, &c).unwrap();
    // A small chunk first, then three large ones and a small one.
    a.put(RemoteSpan { region: 0, offset: 0 }, src.addr(), 1000).unwrap();
    a.put(RemoteSpan { region: 0, offset: 1000 }, src.addr() + 1000, (bytes - 1000) as u64).unwrap();
    a.flush(deadline()).unwrap();
    assert!(dst.to_vec() == data, "what landed differs from what was put");
    let tb = std::thread::spawn(move || b.close(deadline()));
    a.close(deadline()).unwrap();
    tb.join().unwrap().unwrap();
    assert_eq!(*landed.lock().unwrap(), [0, 1, 2, 0, 1], "the landing's slots, chunk by chunk");
    let waits = waits.lock().unwrap();
    for what in ["staged", "slot", "wait_all"] {
        assert!(waits.iter().any(|w| w.0 == what), "no {what} in {waits:?}");
    }
    // Flush, Close, the receiver's end: three waits for everything on rank 1.
    assert!(waits.iter().filter(|w| w.0 == "wait_all").count() >= 3, "{waits:?}");
    assert!(waits.iter().all(|w| w.1 > timeout / 2), "deadlines not the timeout away: {waits:?}");
}

/// A survivor of `./x mutants tcp`: the receiver taking every read error for "nothing yet" (its
/// guard for `WouldBlock | TimedOut` made true), so that a reset connection was reported as one
/// that closed without the channel's close, the reset unsaid. The peer's connection is reset (its
/// socket closed with a zero linger): the transport fails, naming the peer and the reset.
#[test]
fn a_reset_connection_is_reported_as_reset() {
    let r = raw(Duration::from_secs(20));
    let Raw { mut t, feed, .. } = r;
    let linger = nix::libc::linger { l_onoff: 1, l_linger: 0 };
    nix::sys::socket::setsockopt(&feed, nix::sys::socket::sockopt::Linger, &linger).unwrap();
    drop(feed);
    let e = failure(&mut t);
    assert!(e.contains("connection to rank 1 lost: reading from TCP") && e.contains("reset"), "{e}");
}

/// The peer's end of the outgoing connection (where its acknowledgements come back) closing
/// without the channel's close is a lost peer, named, even while nothing is being sent. Exists for
/// the mutant that made the acknowledgement loop take every end of stream for an orderly one.
#[test]
fn the_acknowledgement_connection_closing_alone_is_a_lost_peer() {
    let mut r = raw(Duration::from_secs(20));
    drop(r.peer_in);
    let e = failure(&mut r.t);
    assert!(e.contains("rank 1") && e.contains("the connection closed (the rank exited or was killed)"), "{e}");
}
