//! [`TcpBootstrap`]: the [`Bootstrap`] of this crate, over TCP connections between every pair of
//! ranks. The rendezvous that makes them is in [`super::rendezvous`], the queues that receives
//! read from in [`super::inbox`].

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::frame::{self, Frame, Kind, Token};
use super::inbox::{Inbox, Waited, reader_loop};
use super::rendezvous::{leaf_rendezvous, root_rendezvous};
use super::{Bootstrap, BootstrapConfig, BootstrapHints, EnvSnapshot, RankInfo, after, is_timeout, lock};
use crate::error::{Error, Result};

/// The smallest frame limit that still carries the rendezvous.
const MIN_MAX_FRAME: usize = 4096;

/// How long a closing rank may spend handing its goodbye to one peer's socket.
const GOODBYE_TIMEOUT: Duration = Duration::from_millis(200);

/// The sequence number a point-to-point message carries on the wire: the tag in the high 32 bits,
/// the message's number among those of its (peer, tag) in the low 32 (it wraps after 2^32
/// messages; only equality matters). Tag 0 numbers messages 0, 1, 2, ... as untagged sends did.
fn message_seq(tag: u32, n: u64) -> u64 {
    (u64::from(tag) << 32) | (n & 0xffff_ffff)
}

/// `send #3 to rank 1`, `send #3 with tag 7 to rank 1` (and the same for receives).
fn message_step(what: &str, n: u64, tag: u32, dir: &str, peer: usize) -> String {
    if tag == 0 {
        format!("{what} #{n} {dir} rank {peer}")
    } else {
        format!("{what} #{n} with tag {tag} {dir} rank {peer}")
    }
}

/// The TCP implementation of [`Bootstrap`]: a rank's connections to all other ranks after the
/// rendezvous ([`TcpBootstrap::connect`], [`TcpBootstrap::from_env`]). See the module
/// documentation for the protocol.
pub struct TcpBootstrap {
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

impl std::fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpBootstrap").field("info", &self.info).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Counters {
    /// Sequence number of the last collective (0 is the rendezvous barrier).
    collective: u64,
    all_gathers: u64,
    barriers: u64,
    /// Messages sent to / received from each (rank, tag).
    sent: HashMap<(usize, u32), u64>,
    received: HashMap<(usize, u32), u64>,
}

impl TcpBootstrap {
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
            counters: Mutex::new(Counters::default()),
            readers,
        })
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

impl Bootstrap for TcpBootstrap {
    fn info(&self) -> &RankInfo {
        &self.info
    }

    fn on_peer_lost(&self, hook: super::PeerLostHook) -> bool {
        self.inbox.add_hook(hook);
        true
    }

    /// Every rank's `data`, in rank order (this rank's own included). Contributions may differ in
    /// length; each must fit in [`max_frame`](TcpBootstrap::max_frame).
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (seq, step) = self.next_collective(Kind::AllGather);
        self.exchange(&step, Kind::AllGather, seq, data)
    }

    fn barrier(&self) -> Result<()> {
        let (seq, step) = self.next_collective(Kind::Barrier);
        self.exchange(&step, Kind::Barrier, seq, &[]).map(drop)
    }

    /// Returns once the data is handed to the operating system.
    fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        let n = self.info.world_size;
        if peer >= n {
            return Err(
                self.fail("send", Error::InvalidArgument(format!("peer {peer} is not below the world size {n}")))
            );
        }
        // Refuse before taking a sequence number, so a refused send leaves no gap for the receiver.
        self.check_size(&format!("send to rank {peer}"), data.len())?;
        let count = {
            let mut c = lock(&self.counters);
            let sent = c.sent.entry((peer, tag)).or_insert(0);
            *sent += 1;
            *sent - 1
        };
        let seq = message_seq(tag, count);
        let step = message_step("send", count + 1, tag, "to", peer);
        if peer == self.info.rank {
            return self
                .inbox
                .push(peer, Frame { kind: Kind::Message, seq, payload: data.to_vec() })
                .map_err(|why| self.fail(&step, Error::InvalidArgument(why)));
        }
        self.write(&step, peer, Kind::Message, seq, data)
    }

    /// Waits up to the [`timeout`](TcpBootstrap::timeout); a timed-out receive may be retried.
    fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        let n = self.info.world_size;
        if peer >= n {
            return Err(
                self.fail("recv", Error::InvalidArgument(format!("peer {peer} is not below the world size {n}")))
            );
        }
        let count = lock(&self.counters).received.get(&(peer, tag)).copied().unwrap_or(0);
        let step = message_step("recv", count + 1, tag, "from", peer);
        let frame = self.wait(&step, peer, Kind::Message, message_seq(tag, count), after(self.timeout))?;
        *lock(&self.counters).received.entry((peer, tag)).or_insert(0) += 1;
        Ok(frame.payload)
    }

    /// A key derived from the session token, this bootstrap's timeout, and the local address of
    /// its connections.
    fn hints(&self) -> BootstrapHints {
        let local_ip = self.links.iter().flatten().find_map(|l| lock(l).local_addr().ok()).map(|a| a.ip());
        BootstrapHints {
            key: Some(self.token.derive_key("port-channel transport")),
            timeout: Some(self.timeout),
            local_ip,
        }
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        // A goodbye first (unless this thread is panicking: then the peers should treat this
        // rank as lost and abort their waits), so that the peers see a departure, not a death.
        let goodbye = !std::thread::panicking();
        self.inbox.close();
        for link in self.links.iter().flatten() {
            let mut stream = lock(link);
            if goodbye {
                let _ = stream.set_write_timeout(Some(GOODBYE_TIMEOUT));
                let _ = frame::write_frame(&mut *stream, &self.token, Kind::Goodbye, 0, &[]);
            }
            // Shutting the sockets down ends the reader threads' blocking reads.
            let _ = stream.shutdown(Shutdown::Both);
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
mod wire_tests {
    use super::{message_seq, message_step};

    #[test]
    fn tag_zero_numbers_messages_as_untagged_sends_did() {
        for n in [0u64, 1, 2, 1000, u64::from(u32::MAX)] {
            assert_eq!(message_seq(0, n), n);
        }
        assert_eq!(message_seq(7, 3), (7 << 32) | 3);
        assert_ne!(message_seq(1, 0), message_seq(0, 0));
        assert_eq!(message_step("send", 2, 0, "to", 1), "send #2 to rank 1");
        assert_eq!(message_step("recv", 2, 9, "from", 1), "recv #2 with tag 9 from rank 1");
    }
}
