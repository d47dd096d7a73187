//! Bootstrap: how the ranks of a multi-process run find each other and exchange small amounts of
//! data (memory handles, addresses, seeds) on the CPU before and around GPU work.
//!
//! * [`RankInfo::from_env`]: rank, world size, local rank and local size from the built-in
//!   launcher (`MSCCLPP_RS_*`), OpenMPI (`OMPI_COMM_WORLD_*`), PMI (`PMI_*`) or Slurm
//!   (`SLURM_*`); [`BootstrapConfig::from_env`] adds the rendezvous address, session token and
//!   timeout.
//! * [`Bootstrap::connect`]: the rendezvous over TCP; then [`Bootstrap::all_gather`],
//!   [`Bootstrap::all_gather_pod`], [`Bootstrap::barrier`], [`Bootstrap::send`] and
//!   [`Bootstrap::recv`].
//! * [`launcher`]: starts N copies of the current executable as ranks on this machine
//!   ([`launch`], and `--ranks N` through [`maybe_launch_from_args`]).
//! * [`frame`]: the wire format.
//!
//! # Topology: a full mesh, rank 0 only introduces
//!
//! ```text
//!  rendezvous                               afterwards
//!  rank r>0 <--Challenge(nonce)-------- 0     every pair (i, j) has its own connection:
//!  rank r>0 --Hello(r, listen, proof)-> 0     0 --- 1
//!  rank r>0 <--Welcome(proof)---------- 0     | \ / |
//!  (all joined) rank r <--Table-------- 0     | / \ |
//!  rank j <-Challenge / Connect(j) / Welcome-> rank i, i < j
//!  barrier over the mesh                      3 --- 2
//! ```
//!
//! Rank 0 listens on the configured address; every other rank connects to it, opens a listener on
//! the interface it reached rank 0 through, and reports that address. Once all have joined, rank 0
//! sends everyone the table; each rank connects to the ranks below it and accepts the ones above.
//! After that rank 0 is an ordinary peer. We chose this over relaying everything through rank 0:
//!
//! * failures are attributed exactly: when rank k dies, its sockets close and every rank waiting
//!   on it fails at once with "connection to rank k lost". Through a relay the others would only
//!   see rank 0, and a busy rank 0 (say, in a long GPU phase) would have to keep forwarding;
//! * no forwarding thread and no single hot spot: all-to-all exchanges of memory handles cost
//!   the same on every rank;
//! * `recv(peer)` is a look-up in that peer's own queue.
//!
//! The price is N-1 sockets and N-1 reader threads per process (7 for 8 GPUs, 63 for 64), fine
//! at the scale of an NVLink domain; thousands of ranks would want a relay or a tree instead.
//!
//! # Receiving: reader threads and matching
//!
//! One thread per connection reads frames as they come and queues them by peer. A receive takes
//! the first queued frame of its peer with the right kind and sequence number, so frames from
//! different peers, or a point-to-point message that arrives in the middle of an all-gather, or a
//! peer that is already one collective ahead, never confuse each other. Because every peer always
//! reads, writes cannot deadlock even when all ranks send large all-gather contributions at once.
//! Collectives share one sequence: when two ranks call different collectives as their n-th one,
//! the first to notice fails with a [`Error::Protocol`] naming the other rank, instead of hanging.
//!
//! # Timeouts and failures
//!
//! Every connect, accept and receive has a deadline: [`BootstrapConfig::timeout`] (default 30 s,
//! `MSCCLPP_RS_BOOTSTRAP_TIMEOUT`) for the rendezvous as a whole and for each later operation.
//! Connecting to rank 0 is retried (with a growing pause, up to 0.5 s) until the deadline, so
//! rank 0 may start later than the others. Writes have the same timeout. The reader threads block
//! without a timeout, which is harmless: dropping the [`Bootstrap`] shuts the sockets down, which
//! ends them. Errors name this rank, the step and the other rank: `rank 2: all_gather #3: timed out
//! after 30 s waiting for rank 1`, or `rank 0: barrier #7: connection to rank 3 lost: closed by
//! the peer (it exited or was killed)`.
//!
//! # Address and token under mpirun and srun
//!
//! `MSCCLPP_RS_BOOTSTRAP=host:port` names rank 0's address; the built-in launcher sets it, along
//! with a random `MSCCLPP_RS_TOKEN`. Under `mpirun` or `srun` with all ranks on one machine and no
//! address given, every rank computes the same one without talking to the others: `127.0.0.1`
//! and a port in 20000..=31999 hashed from the first job identifier found among
//! [`env::JOB_ID_VARS`] (`PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `OMPI_MCA_orte_hnp_uri`,
//! `SLURM_JOB_ID` with `SLURM_STEP_ID`); the token is hashed from the same identifier. The range
//! sits below Linux's ephemeral ports. Two jobs on one machine collide on a port with odds of
//! 1 in 12000; the second then fails to listen, with a message saying to set the address. Ranks
//! on several machines must set the address. A derived token only keeps apart jobs that meet by
//! accident: anyone who can read the job's environment can compute it.
//!
//! # Frames, tokens and the handshake
//!
//! Every frame carries its kind and a tag derived from the session token (never the token
//! itself), and its length is checked against [`BootstrapConfig::max_frame`] before anything is
//! allocated (see [`frame`]). Every new connection starts with a challenge-response in both
//! directions: the accepting side sends a fresh nonce, the connecting side answers with its own
//! nonce and an HMAC-SHA256 under the token over both nonces and its introduction, and the
//! accepting side's welcome carries its own HMAC over the nonces. So a process joins only if it
//! knows the token, a rank talks only to a process that knows it, and what crosses the network
//! reveals neither the token nor a reusable proof. A token derived from a job id is public to
//! anyone who can read the job's environment, so [`BootstrapConfig::from_env`] refuses a
//! non-loopback address unless `MSCCLPP_RS_TOKEN` is set explicitly.
//!
//! During the rendezvous a connection that sends a foreign or malformed frame, fails the
//! challenge or stays silent is dropped and the rendezvous goes on (a stray process from another
//! job must not take ours down). Pending handshakes are read concurrently, one short-lived thread
//! each, up to 128 at once (beyond that the oldest is dropped), and each gets 2 s: idle or slow
//! connections do not delay the real ranks. The number of rejections, and the last reason,
//! appear in the timeout message if the rendezvous then fails. After the rendezvous a bad frame
//! ends that peer's connection with the reason.
//!
//! # Bounded memory
//!
//! A peer's unread point-to-point messages may take at most [`BootstrapConfig::max_queued`]
//! bytes here (64 MiB by default; one message alone is always accepted), and at most two of its
//! collective frames may wait (the protocol never needs more). A peer that sends beyond either
//! bound loses its connection, and the next receive from it says why. World sizes above
//! [`env::MAX_WORLD_SIZE`] are refused before anything is allocated.
//!
//! # Rules of use
//!
//! Like MPI: every rank calls the same collectives in the same order, one at a time. [`send`]
//! may be called from any thread; receives from one peer must not run on two threads at once.
//!
//! [`send`]: Bootstrap::send

pub mod env;
pub mod frame;
pub mod launcher;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use env::{BootstrapConfig, EnvSnapshot, RankInfo, RankSource};
pub use frame::{FrameFault, Token};
pub use launcher::{Launcher, Role, launch, maybe_launch_from_args, role};

use crate::error::{Error, Result};
use frame::{Frame, Kind};

/// How long a freshly accepted connection may take to answer the challenge before it is dropped
/// as a stray (bounded by the rendezvous deadline too). Real ranks answer at once.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(2);
/// Handshakes read at once, each on its own short-lived thread. At the cap the oldest pending
/// handshake is dropped to make room, so a flood of idle connections cannot lock real ranks out.
const MAX_PENDING_HANDSHAKES: usize = 128;
/// Stack of a handshake thread (it reads one small frame).
const HANDSHAKE_STACK: usize = 256 << 10;
/// How often the accept loop looks at finished handshakes while no connection arrives.
const ACCEPT_SLICE: Duration = Duration::from_millis(10);
/// Bytes of a challenge nonce.
const NONCE_LEN: usize = 32;
/// Largest hello / connect payload accepted (a rank number, a world size and an address).
const HELLO_MAX: usize = 1024;
/// The smallest frame limit that still carries the rendezvous.
const MIN_MAX_FRAME: usize = 4096;

/// A rank's connections to all other ranks, after the rendezvous. See the module documentation.
pub struct Bootstrap {
    info: RankInfo,
    token: Token,
    timeout: Duration,
    max_frame: usize,
    /// Indexed by rank; `None` for this rank.
    links: Vec<Option<Mutex<TcpStream>>>,
    inbox: Arc<Inbox>,
    counters: Mutex<Counters>,
    readers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap").field("info", &self.info).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Counters {
    /// Sequence number of the last collective (0 is the rendezvous barrier).
    collective: u64,
    all_gathers: u64,
    barriers: u64,
    /// Messages sent to / received from each rank.
    sent: Vec<u64>,
    received: Vec<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bootstrap {
    /// Connects using the environment ([`BootstrapConfig::from_env`]); an error when no rank
    /// variables are set.
    pub fn from_env() -> Result<Self> {
        match BootstrapConfig::from_env(&EnvSnapshot::capture())? {
            Some(cfg) => Self::connect(&cfg),
            None => Err(Error::RankEnv(
                "no rank variables (OMPI_COMM_WORLD_*, PMI_*, SLURM_*, MSCCLPP_RS_*): start under mpirun, srun \
                 or the built-in launcher (--ranks N)"
                    .into(),
            )),
        }
    }

    /// Runs the rendezvous and returns when this rank is connected to every other rank and all
    /// ranks have reached that point (a barrier closes the rendezvous).
    pub fn connect(cfg: &BootstrapConfig) -> Result<Self> {
        let rank = cfg.rank.rank;
        let wrap = |e| Error::Bootstrap { rank, step: "rendezvous".into(), cause: Box::new(e) };
        cfg.rank.check("BootstrapConfig::rank").map_err(wrap)?;
        if cfg.timeout.is_zero() {
            return Err(wrap(Error::InvalidArgument("the timeout is zero".into())));
        }
        if cfg.max_frame < MIN_MAX_FRAME {
            return Err(wrap(Error::InvalidArgument(format!(
                "max_frame {} is below the minimum {MIN_MAX_FRAME}",
                cfg.max_frame
            ))));
        }
        let deadline = after(cfg.timeout);
        let streams = if cfg.rank.world_size == 1 {
            vec![None]
        } else if rank == 0 {
            root_rendezvous(cfg, deadline).map_err(wrap)?
        } else {
            leaf_rendezvous(cfg, deadline).map_err(wrap)?
        };
        let boot = Self::start(cfg, streams).map_err(wrap)?;
        boot.exchange("rendezvous barrier", Kind::Barrier, 0, &[])?;
        Ok(boot)
    }

    fn start(cfg: &BootstrapConfig, streams: Vec<Option<TcpStream>>) -> Result<Self> {
        let n = cfg.rank.world_size;
        let inbox = Arc::new(Inbox::new(n, cfg.max_queued));
        let mut links = Vec::with_capacity(n);
        let mut readers = Vec::new();
        let io = |peer: usize| {
            move |source| Error::Io { context: format!("setting up the connection to rank {peer}"), source }
        };
        for (peer, stream) in streams.into_iter().enumerate() {
            let Some(stream) = stream else {
                links.push(None);
                continue;
            };
            stream.set_nodelay(true).map_err(io(peer))?;
            stream.set_read_timeout(None).map_err(io(peer))?;
            stream.set_write_timeout(Some(cfg.timeout)).map_err(io(peer))?;
            let read_half = stream.try_clone().map_err(io(peer))?;
            let (inbox2, token, max) = (inbox.clone(), cfg.token, cfg.max_frame);
            let handle = std::thread::Builder::new()
                .name(format!("bootstrap-rx-{peer}"))
                .spawn(move || reader_loop(peer, read_half, token, max, &inbox2))
                .map_err(io(peer))?;
            readers.push(handle);
            links.push(Some(Mutex::new(stream)));
        }
        Ok(Self {
            info: cfg.rank,
            token: cfg.token,
            timeout: cfg.timeout,
            max_frame: cfg.max_frame,
            links,
            inbox,
            counters: Mutex::new(Counters { sent: vec![0; n], received: vec![0; n], ..Default::default() }),
            readers,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.info.rank
    }
    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.info.world_size
    }
    /// Rank among the ranks on this machine.
    pub fn local_rank(&self) -> usize {
        self.info.local_rank
    }
    /// Number of ranks on this machine.
    pub fn local_size(&self) -> usize {
        self.info.local_size
    }
    /// Everything known about this rank's place.
    pub fn info(&self) -> &RankInfo {
        &self.info
    }
    /// The timeout of every operation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// Changes the timeout of later operations (e.g. a generous one for the rendezvous, then a
    /// short one, or a longer one around a slow phase). Zero is refused.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        if timeout.is_zero() {
            return Err(self.fail("set_timeout", Error::InvalidArgument("the timeout is zero".into())));
        }
        for (peer, link) in self.links.iter().enumerate() {
            if let Some(link) = link {
                lock(link).set_write_timeout(Some(timeout)).map_err(|source| {
                    self.fail("set_timeout", Error::Io { context: format!("connection to rank {peer}"), source })
                })?;
            }
        }
        self.timeout = timeout;
        Ok(())
    }
    /// The largest payload one operation may carry.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn fail(&self, step: &str, cause: Error) -> Error {
        Error::Bootstrap { rank: self.info.rank, step: step.to_string(), cause: Box::new(cause) }
    }

    fn next_collective(&self, kind: Kind) -> (u64, String) {
        let mut c = lock(&self.counters);
        c.collective += 1;
        let n = match kind {
            Kind::AllGather => {
                c.all_gathers += 1;
                c.all_gathers
            }
            _ => {
                c.barriers += 1;
                c.barriers
            }
        };
        (c.collective, format!("{} #{n}", kind.name()))
    }

    /// Every rank's `data`, in rank order (this rank's own included). Contributions may differ in
    /// length; each must fit in [`max_frame`](Self::max_frame).
    pub fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (seq, step) = self.next_collective(Kind::AllGather);
        self.exchange(&step, Kind::AllGather, seq, data)
    }

    /// [`all_gather`](Self::all_gather) of one plain value per rank.
    pub fn all_gather_pod<T: bytemuck::Pod>(&self, value: &T) -> Result<Vec<T>> {
        let (seq, step) = self.next_collective(Kind::AllGather);
        let parts = self.exchange(&step, Kind::AllGather, seq, bytemuck::bytes_of(value))?;
        let size = std::mem::size_of::<T>();
        parts
            .iter()
            .enumerate()
            .map(|(r, p)| {
                bytemuck::try_pod_read_unaligned(p).map_err(|_| {
                    self.fail(
                        &step,
                        Error::Protocol(format!("rank {r} sent {} bytes for a {size}-byte value", p.len())),
                    )
                })
            })
            .collect()
    }

    /// [`all_gather`](Self::all_gather) of a slice of plain values per rank (lengths may differ).
    pub fn all_gather_pod_slice<T: bytemuck::Pod>(&self, values: &[T]) -> Result<Vec<Vec<T>>> {
        let (seq, step) = self.next_collective(Kind::AllGather);
        let parts = self.exchange(&step, Kind::AllGather, seq, bytemuck::cast_slice(values))?;
        // Zero-sized values travel as zero bytes; chunks of 1 then leave nothing to read.
        let size = std::mem::size_of::<T>().max(1);
        parts
            .iter()
            .enumerate()
            .map(|(r, p)| {
                let bad = || {
                    self.fail(
                        &step,
                        Error::Protocol(format!("rank {r} sent {} bytes, not a whole number of values", p.len())),
                    )
                };
                if p.len() % size != 0 {
                    return Err(bad());
                }
                p.chunks_exact(size).map(|c| bytemuck::try_pod_read_unaligned(c).map_err(|_| bad())).collect()
            })
            .collect()
    }

    /// Returns once every rank has called `barrier` (as the same collective).
    pub fn barrier(&self) -> Result<()> {
        let (seq, step) = self.next_collective(Kind::Barrier);
        self.exchange(&step, Kind::Barrier, seq, &[]).map(drop)
    }

    /// Sends `data` to `peer` (which may be this rank). Returns once the data is handed to the
    /// operating system; the matching [`recv`](Self::recv) on `peer` gets it, in order with this
    /// rank's other messages to `peer`.
    pub fn send(&self, peer: usize, data: &[u8]) -> Result<()> {
        let n = self.info.world_size;
        if peer >= n {
            return Err(
                self.fail("send", Error::InvalidArgument(format!("peer {peer} is not below the world size {n}")))
            );
        }
        // Refuse before taking a sequence number, so a refused send leaves no gap for the receiver.
        self.check_size(&format!("send to rank {peer}"), data.len())?;
        let seq = {
            let mut c = lock(&self.counters);
            c.sent[peer] += 1;
            c.sent[peer] - 1
        };
        let step = format!("send #{} to rank {peer}", seq + 1);
        if peer == self.info.rank {
            return self
                .inbox
                .push(peer, Frame { kind: Kind::Message, seq, payload: data.to_vec() })
                .map_err(|why| self.fail(&step, Error::InvalidArgument(why)));
        }
        self.write(&step, peer, Kind::Message, seq, data)
    }

    /// The next message from `peer` (which may be this rank), waiting up to the timeout.
    pub fn recv(&self, peer: usize) -> Result<Vec<u8>> {
        let n = self.info.world_size;
        if peer >= n {
            return Err(
                self.fail("recv", Error::InvalidArgument(format!("peer {peer} is not below the world size {n}")))
            );
        }
        let seq = lock(&self.counters).received[peer];
        let step = format!("recv #{} from rank {peer}", seq + 1);
        let frame = self.wait(&step, peer, Kind::Message, seq, after(self.timeout))?;
        lock(&self.counters).received[peer] += 1;
        Ok(frame.payload)
    }

    fn check_size(&self, step: &str, len: usize) -> Result<()> {
        if len > self.max_frame {
            return Err(self.fail(
                step,
                Error::InvalidArgument(format!("{len} bytes is over the {}-byte frame limit", self.max_frame)),
            ));
        }
        Ok(())
    }

    /// Sends `data` to every other rank, then collects theirs: the body of all collectives.
    fn exchange(&self, step: &str, kind: Kind, seq: u64, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_size(step, data.len())?;
        let (me, n) = (self.info.rank, self.info.world_size);
        let deadline = after(self.timeout);
        // Start with the next rank so that not everyone writes to rank 0 first.
        for peer in (1..n).map(|k| (me + k) % n) {
            self.write(step, peer, kind, seq, data)?;
        }
        let mut out = Vec::with_capacity(n);
        for peer in 0..n {
            if peer == me {
                out.push(data.to_vec());
            } else {
                out.push(self.wait(step, peer, kind, seq, deadline)?.payload);
            }
        }
        Ok(out)
    }

    fn write(&self, step: &str, peer: usize, kind: Kind, seq: u64, data: &[u8]) -> Result<()> {
        let Some(link) = self.links.get(peer).and_then(Option::as_ref) else {
            return Err(self.fail(step, Error::Protocol(format!("no connection to rank {peer}"))));
        };
        let mut stream = lock(link);
        let Err(e) = frame::write_frame(&mut *stream, &self.token, kind, seq, data) else { return Ok(()) };
        drop(stream);
        // The connection is unusable now (a frame may be half written); tell future receives.
        let known = self.inbox.lost_reason(peer);
        self.inbox.lose(peer, format!("sending failed: {e}"));
        let cause = if is_timeout(&e) {
            Error::Timeout { after: self.timeout, waiting_for: format!("rank {peer} to take {} bytes", data.len()) }
        } else {
            Error::PeerLost { peer, detail: known.unwrap_or_else(|| format!("sending failed: {e}")) }
        };
        Err(self.fail(step, cause))
    }

    fn wait(&self, step: &str, peer: usize, kind: Kind, seq: u64, deadline: Instant) -> Result<Frame> {
        match self.inbox.wait(peer, kind, seq, deadline) {
            Waited::Got(f) => Ok(f),
            Waited::Timeout => {
                Err(self.fail(step, Error::Timeout { after: self.timeout, waiting_for: format!("rank {peer}") }))
            }
            Waited::Lost(detail) => Err(self.fail(step, Error::PeerLost { peer, detail })),
            Waited::Mismatch(other) => Err(self.fail(
                step,
                Error::Protocol(format!(
                    "rank {peer} called {} as collective #{seq} where this rank called {} (ranks must call the same \
                     collectives in the same order)",
                    other.name(),
                    kind.name()
                )),
            )),
        }
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        // Shutting the sockets down ends the reader threads' blocking reads.
        for link in self.links.iter().flatten() {
            let _ = lock(link).shutdown(Shutdown::Both);
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

/// `now + d`, saturating far in the future instead of overflowing (for `Duration::MAX` and the
/// like).
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

// ---------------------------------------------------------------------------------------------
// Inbox: frames queued per peer by the reader threads.

#[derive(Default)]
struct Slot {
    frames: VecDeque<Frame>,
    /// Payload bytes of the queued point-to-point messages.
    message_bytes: usize,
    /// Queued collective frames.
    collectives: usize,
    /// Why the connection ended, once it has.
    lost: Option<String>,
}

/// Collective frames one peer may have queued: the one this rank is waiting for and the next (a
/// peer cannot start a collective after that without this rank's contribution to the previous).
const MAX_QUEUED_COLLECTIVES: usize = 2;

struct Inbox {
    slots: Mutex<Vec<Slot>>,
    arrived: Condvar,
    /// Cap on [`Slot::message_bytes`] (one message alone is always accepted).
    max_queued: usize,
}

enum Waited {
    Got(Frame),
    Timeout,
    Lost(String),
    /// The peer used this collective number for another collective.
    Mismatch(Kind),
}

fn is_collective(k: Kind) -> bool {
    matches!(k, Kind::AllGather | Kind::Barrier)
}

impl Inbox {
    fn new(n: usize, max_queued: usize) -> Self {
        Self { slots: Mutex::new((0..n).map(|_| Slot::default()).collect()), arrived: Condvar::new(), max_queued }
    }

    /// Queues `f` from `peer`, or refuses it (with the reason) when the peer has too much unread:
    /// more than `max_queued` bytes of messages, or more collectives than the protocol allows.
    fn push(&self, peer: usize, f: Frame) -> std::result::Result<(), String> {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(peer) else { return Err("no such rank".into()) };
        if is_collective(f.kind) {
            if slot.collectives >= MAX_QUEUED_COLLECTIVES {
                return Err(format!(
                    "rank {peer} sent a {} (collective #{}) while {MAX_QUEUED_COLLECTIVES} earlier collectives were \
                     still unread (ranks must call the same collectives in the same order)",
                    f.kind.name(),
                    f.seq
                ));
            }
            slot.collectives += 1;
        } else {
            let total = slot.message_bytes.saturating_add(f.payload.len());
            if slot.message_bytes > 0 && total > self.max_queued {
                return Err(format!(
                    "rank {peer} has {} bytes of unread messages queued here and sent {} more, over the {}-byte \
                     limit (receive them, or raise BootstrapConfig::max_queued)",
                    slot.message_bytes,
                    f.payload.len(),
                    self.max_queued
                ));
            }
            slot.message_bytes = total;
        }
        slot.frames.push_back(f);
        drop(slots);
        self.arrived.notify_all();
        Ok(())
    }

    fn lose(&self, peer: usize, why: String) {
        if let Some(slot) = lock(&self.slots).get_mut(peer) {
            slot.lost.get_or_insert(why);
        }
        self.arrived.notify_all();
    }

    fn lost_reason(&self, peer: usize) -> Option<String> {
        lock(&self.slots).get(peer).and_then(|s| s.lost.clone())
    }

    /// The frame `(kind, seq)` from `peer`; frames queued before the connection ended are still
    /// delivered.
    fn wait(&self, peer: usize, kind: Kind, seq: u64, deadline: Instant) -> Waited {
        let mut slots = lock(&self.slots);
        loop {
            let Some(slot) = slots.get_mut(peer) else { return Waited::Lost("no such rank".into()) };
            let hit = slot.frames.iter().position(|f| f.seq == seq && is_collective(f.kind) == is_collective(kind));
            if let Some(f) = hit.and_then(|i| slot.frames.remove(i)) {
                if is_collective(f.kind) {
                    slot.collectives -= 1;
                } else {
                    slot.message_bytes -= f.payload.len();
                }
                return if f.kind == kind { Waited::Got(f) } else { Waited::Mismatch(f.kind) };
            }
            if let Some(why) = &slot.lost {
                return Waited::Lost(why.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Waited::Timeout;
            }
            slots = self.arrived.wait_timeout(slots, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

fn reader_loop(peer: usize, mut stream: TcpStream, token: Token, max: usize, inbox: &Inbox) {
    loop {
        match frame::read_frame(&mut stream, &token, max) {
            Ok(Some(f)) if matches!(f.kind, Kind::AllGather | Kind::Barrier | Kind::Message) => {
                if let Err(why) = inbox.push(peer, f) {
                    // Stop reading: the connection ends here, and receives from this peer fail
                    // with the reason once the frames already queued are taken.
                    let _ = stream.shutdown(Shutdown::Both);
                    inbox.lose(peer, why);
                    return;
                }
            }
            Ok(Some(f)) => {
                inbox.lose(peer, format!("unexpected {} frame after the rendezvous", f.kind.name()));
                return;
            }
            Ok(None) => {
                inbox.lose(peer, "closed by the peer (it exited or was killed)".into());
                return;
            }
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::ConnectionReset => {
                inbox.lose(peer, "reset by the peer (it exited or was killed)".into());
                return;
            }
            Err(Error::Io { source, .. }) => {
                inbox.lose(peer, source.to_string());
                return;
            }
            Err(e) => {
                inbox.lose(peer, e.to_string());
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rendezvous.

/// Reads and writes on a blocking socket, each call bounded by what is left until `deadline`.
struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
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

fn resolve(addr: &str) -> Result<SocketAddr> {
    let io = |source| Error::Io { context: format!("resolving the bootstrap address {addr:?}"), source };
    addr.to_socket_addrs().map_err(io)?.next().ok_or_else(|| io(io::Error::other("no address found")))
}

/// `rank 3`, `ranks 1, 2 and 5`.
fn ranks_list(ranks: &[usize]) -> String {
    match ranks {
        [] => "no rank".into(),
        [r] => format!("rank {r}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|r| r.to_string()).collect();
            format!("ranks {} and {last}", init.join(", "))
        }
    }
}

fn missing(streams: &[Option<TcpStream>], range: std::ops::Range<usize>) -> Vec<usize> {
    range.filter(|&r| streams[r].is_none()).collect()
}

/// Connections dropped during the rendezvous, for the timeout message.
#[derive(Default)]
struct Rejected {
    count: usize,
    last: Option<String>,
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
fn accept_within(listener: &TcpListener, until: Instant) -> Result<Option<(TcpStream, SocketAddr)>> {
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
struct Introduced {
    stream: TcpStream,
    from: SocketAddr,
    intro: Intro,
    /// The two nonces, for the accepting side's own proof in the welcome.
    nonces: Nonces,
}

#[derive(Clone, Copy)]
struct Nonces {
    server: [u8; NONCE_LEN],
    client: [u8; NONCE_LEN],
}

fn nonce() -> [u8; NONCE_LEN] {
    use rand::RngExt;
    rand::rng().random()
}

/// The connecting side's proof over the challenge, its own nonce and its introduction.
fn client_proof(token: &Token, kind: Kind, n: &Nonces, intro: &[u8]) -> [u8; frame::PROOF_LEN] {
    token.prove(&[b"mscclpp-rs client", &[kind as u8], &n.server, &n.client, intro])
}

/// The accepting side's proof, sent in the welcome: it knows the token too.
fn server_proof(token: &Token, kind: Kind, n: &Nonces) -> [u8; frame::PROOF_LEN] {
    token.prove(&[b"mscclpp-rs server", &[kind as u8], &n.server, &n.client])
}

/// What a handshake thread reports: its id, and the introduced connection or why it was dropped.
type HandshakeOutcome = (u64, std::result::Result<Introduced, (SocketAddr, String)>);

struct PendingHandshake {
    id: u64,
    /// A handle on the socket, to end the handshake's read when it is evicted or abandoned.
    stream: TcpStream,
}

/// The accepting side of the rendezvous: accepts connections and reads their introductions
/// concurrently (one short-lived thread per pending connection, at most
/// [`MAX_PENDING_HANDSHAKES`]), so idle or slow strays cost no real rank any time.
struct HandshakeGate<'a> {
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
    fn new(listener: &'a TcpListener, token: Token, kind: Kind) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        Self { listener, token, kind, tx, rx, pending: VecDeque::new(), next_id: 0, rejected: Rejected::default() }
    }

    /// The next connection that proved the token, before `deadline`; strays are counted in
    /// `rejected` and skipped. On timeout, `waiting` says what was awaited.
    fn next(
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
            let Some((stream, from)) = accept_within(self.listener, deadline.min(now + ACCEPT_SLICE))? else {
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
fn accept_handshake(
    stream: TcpStream,
    from: SocketAddr,
    token: &Token,
    kind: Kind,
    deadline: Instant,
) -> std::result::Result<Introduced, String> {
    let server = nonce();
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
        Err(Error::Io { source, .. }) if is_timeout(&source) => {
            return Err(format!("timed out: no {} within {} ms", kind.name(), HANDSHAKE_WAIT.as_millis()));
        }
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::ConnectionReset => {
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
    if !token.verify(&[b"mscclpp-rs client", &[kind as u8], &nonces.server, &nonces.client, intro_bytes], proof) {
        return Err("wrong session token (failed the challenge)".into());
    }
    let intro = Intro::decode(intro_bytes).ok_or_else(|| format!("malformed {}", kind.name()))?;
    Ok(Introduced { stream, from, intro, nonces })
}

/// The connecting side's half: reads the challenge, sends the introduction of `kind` with its
/// proof, and checks the accepting side's proof in the welcome.
fn connect_handshake(
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
    let nonces = Nonces { server, client: nonce() };
    let mut payload = Vec::with_capacity(NONCE_LEN + frame::PROOF_LEN + intro.len());
    payload.extend_from_slice(&nonces.client);
    payload.extend_from_slice(&client_proof(&cfg.token, kind, &nonces, intro));
    payload.extend_from_slice(intro);
    send_frame(stream, cfg, kind, &payload, deadline, peer)?;
    let welcome = expect(stream, cfg, Kind::Welcome, frame::PROOF_LEN, deadline, peer, "the welcome")?;
    if !cfg.token.verify(&[b"mscclpp-rs server", &[kind as u8], &nonces.server, &nonces.client], &welcome.payload) {
        return Err(Error::Protocol(format!(
            "rank {peer} did not prove the session token in its welcome (another job on this address?)"
        )));
    }
    Ok(())
}

/// Connects to `addr`, retrying until `deadline` (the other side may not listen yet).
fn connect_until(addr: SocketAddr, deadline: Instant, after: Duration, waiting_for: &str) -> Result<TcpStream> {
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

/// Hello (rank to rank 0) and Connect (rank to a lower rank) payload.
struct Intro {
    rank: usize,
    world: usize,
    listen: String,
}

impl Intro {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.listen.len());
        // Ranks and world sizes are capped far below u32::MAX (`env::MAX_WORLD_SIZE`); an
        // impossible value is sent as u32::MAX, which every receiver rejects.
        v.extend_from_slice(&u32::try_from(self.rank).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(&u32::try_from(self.world).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(self.listen.as_bytes());
        v
    }

    fn decode(p: &[u8]) -> Option<Self> {
        let rank = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?) as usize;
        let world = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?) as usize;
        let listen = std::str::from_utf8(p.get(8..)?).ok()?.to_string();
        Some(Self { rank, world, listen })
    }
}

fn encode_table(addrs: &[String]) -> Vec<u8> {
    let mut v = Vec::new();
    for a in addrs {
        v.extend_from_slice(&(a.len() as u16).to_le_bytes());
        v.extend_from_slice(a.as_bytes());
    }
    v
}

fn decode_table(mut p: &[u8], n: usize) -> Option<Vec<String>> {
    let mut out = Vec::with_capacity(n.min(4096));
    while !p.is_empty() {
        let len = u16::from_le_bytes(p.get(0..2)?.try_into().ok()?) as usize;
        out.push(std::str::from_utf8(p.get(2..2 + len)?).ok()?.to_string());
        p = &p[2 + len..];
    }
    (out.len() == n).then_some(out)
}

/// Reads one frame of `kind` before `deadline`.
fn expect(
    stream: &TcpStream,
    cfg: &BootstrapConfig,
    kind: Kind,
    max: usize,
    deadline: Instant,
    peer: usize,
    what: &str,
) -> Result<Frame> {
    let mut r = Deadlined { stream, deadline };
    match frame::read_frame(&mut r, &cfg.token, max) {
        Ok(Some(f)) if f.kind == kind => Ok(f),
        Ok(Some(f)) => Err(Error::Protocol(format!("rank {peer} sent {} while {what} was expected", f.kind.name()))),
        Ok(None) => Err(closed(peer, kind, what, String::new())),
        Err(Error::Io { source, .. }) if is_timeout(&source) => {
            Err(Error::Timeout { after: cfg.timeout, waiting_for: format!("rank {peer} to send {what}") })
        }
        // A peer that rejects us closes with our frame unread, which resets the connection.
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::ConnectionReset => {
            Err(closed(peer, kind, what, format!(": {source}")))
        }
        Err(Error::Io { source, .. }) => Err(Error::PeerLost { peer, detail: source.to_string() }),
        Err(e) => Err(e),
    }
}

fn closed(peer: usize, kind: Kind, what: &str, extra: String) -> Error {
    let why = match kind {
        // The accepting side drops an introduction that fails its challenge without a word.
        Kind::Welcome | Kind::Challenge => format!("a wrong session token, or rank {peer} failed"),
        _ => format!("rank {peer} failed or gave up"),
    };
    Error::PeerLost { peer, detail: format!("closed during the rendezvous, before {what} ({why}){extra}") }
}

fn send_frame(
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

fn root_rendezvous(cfg: &BootstrapConfig, deadline: Instant) -> Result<Vec<Option<TcpStream>>> {
    let n = cfg.rank.world_size;
    let addr = resolve(&cfg.addr)?;
    let listener = TcpListener::bind(addr).map_err(|source| Error::Io {
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
    Ok(streams)
}

fn leaf_rendezvous(cfg: &BootstrapConfig, deadline: Instant) -> Result<Vec<Option<TcpStream>>> {
    let (me, n) = (cfg.rank.rank, cfg.rank.world_size);
    let root_addr = resolve(&cfg.addr)?;
    let hint = if cfg.addr_derived {
        format!(" (address derived from the job id; set {} to choose it)", env::ENV_BOOTSTRAP)
    } else {
        String::new()
    };
    let root = connect_until(root_addr, deadline, cfg.timeout, &format!("rank 0 at {root_addr}{hint}"))?;
    let io = |context: &str, source| Error::Io { context: context.into(), source };
    let local_ip: IpAddr = root.local_addr().map_err(|e| io("reading the local address", e))?.ip();
    let listener =
        TcpListener::bind((local_ip, 0)).map_err(|e| io(&format!("listening on {local_ip} for other ranks"), e))?;
    let listen = listener.local_addr().map_err(|e| io("reading the listening address", e))?;
    let hello = Intro { rank: me, world: n, listen: listen.to_string() };
    connect_handshake(&root, cfg, Kind::Hello, &hello.encode(), deadline, 0)?;
    let table = expect(&root, cfg, Kind::Table, cfg.max_frame, deadline, 0, "the address table")?;
    let table = decode_table(&table.payload, n).ok_or_else(|| Error::Protocol("malformed address table".into()))?;

    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    streams[0] = Some(root);
    let intro = Intro { rank: me, world: n, listen: String::new() }.encode();
    for (peer, a) in table.iter().enumerate().take(me).skip(1) {
        let addr: SocketAddr =
            a.parse().map_err(|_| Error::Protocol(format!("address table: bad address {a:?} for rank {peer}")))?;
        let s = connect_until(addr, deadline, cfg.timeout, &format!("rank {peer} at {addr}"))?;
        connect_handshake(&s, cfg, Kind::Connect, &intro, deadline, peer)?;
        streams[peer] = Some(s);
    }
    let mut gate = HandshakeGate::new(&listener, cfg.token, Kind::Connect);
    while !missing(&streams, me + 1..n).is_empty() {
        let waiting = |r: &Rejected| format!("{} to connect{}", ranks_list(&missing(&streams, me + 1..n)), r.note());
        let Introduced { stream, from, intro, nonces } = gate.next(deadline, cfg.timeout, waiting)?;
        if intro.world != n || intro.rank <= me || intro.rank >= n {
            return Err(Error::Protocol(format!(
                "the process at {from} connected as rank {} of {}; expected a rank in {}..{n}",
                intro.rank,
                intro.world,
                me + 1
            )));
        }
        if streams[intro.rank].is_some() {
            return Err(Error::Protocol(format!("rank {} connected twice", intro.rank)));
        }
        let proof = server_proof(&cfg.token, Kind::Connect, &nonces);
        send_frame(&stream, cfg, Kind::Welcome, &proof, deadline, intro.rank)?;
        streams[intro.rank] = Some(stream);
    }
    Ok(streams)
}

#[cfg(test)]
mod tests;
