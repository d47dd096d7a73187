//! [`TcpBootstrap`]: the [`Bootstrap`] of this crate, over TCP: a connection from every rank to
//! rank 0, a ring, and connections opened on first use. The rendezvous is in
//! [`super::rendezvous`], the connections and their threads in [`super::links`], the queues that
//! receives read from in [`super::inbox`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::inbox::Waited;
use super::links::Net;
use super::rendezvous::{leaf_rendezvous, root_rendezvous};
use super::{Bootstrap, BootstrapConfig, BootstrapHints, EnvSnapshot, RankInfo, after, lock};
use crate::error::{Error, Result};
use crate::frame::{self, Kind};

/// The smallest frame limit that still carries the rendezvous.
const MIN_MAX_FRAME: usize = 4096;

/// How much longer than the timeout a rank other than 0 waits for the end of a collective: rank
/// 0 gives up on a missing rank after the timeout and tells the others who it was; this leaves
/// that verdict time to arrive (up to the timeout again, at most this).
const VERDICT_GRACE: Duration = Duration::from_secs(2);

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

/// The TCP implementation of [`Bootstrap`] ([`TcpBootstrap::connect`],
/// [`TcpBootstrap::from_env`]). See the module documentation for the protocol.
pub struct TcpBootstrap {
    info: RankInfo,
    timeout: Duration,
    max_frame: usize,
    net: Arc<Net>,
    counters: Mutex<Counters>,
    /// Set by [`Bootstrap::abandon`]: close without goodbyes.
    abandoned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpBootstrap").field("info", &self.info).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Counters {
    /// Sequence number of the last collective started (0 is the rendezvous barrier).
    collective: u64,
    /// Collectives completed here, the rendezvous barrier included (the goodbye carries it).
    completed: u64,
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

    /// Runs the rendezvous and returns when this rank is connected to rank 0 and to the next
    /// rank of the ring, and all ranks have reached that point (a barrier closes the
    /// rendezvous). Connections to other ranks are opened when first sent to.
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
        let n = cfg.rank.world_size;
        let boot = if n == 1 {
            Self::new(cfg, Net::new(cfg, vec![String::new()]))
        } else if rank == 0 {
            let (streams, table) = root_rendezvous(cfg, deadline).map_err(wrap)?;
            let boot = Self::new(cfg, Net::new(cfg, table));
            for (peer, stream) in streams.into_iter().enumerate() {
                if let Some(stream) = stream {
                    boot.net.inbox.opening(peer);
                    boot.net.adopt(peer, stream).map_err(wrap)?;
                }
            }
            boot
        } else {
            let (root, listener, table) = leaf_rendezvous(cfg, deadline).map_err(wrap)?;
            let boot = Self::new(cfg, Net::new(cfg, table));
            boot.net.inbox.opening(0);
            boot.net.adopt(0, root).map_err(wrap)?;
            boot.net.serve(listener).map_err(wrap)?;
            // The ring: 0 -> 1 -> ... -> n-1 -> 0. Rank 0's two neighbours are already connected.
            if rank + 1 < n {
                boot.net.open(rank + 1, deadline).map_err(wrap)?;
            }
            boot
        };
        boot.collective("rendezvous barrier", Kind::Barrier, 0, &[])?;
        Ok(boot)
    }

    fn new(cfg: &BootstrapConfig, net: Arc<Net>) -> Self {
        Self {
            info: cfg.rank,
            timeout: cfg.timeout,
            max_frame: cfg.max_frame,
            net,
            counters: Mutex::new(Counters::default()),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        }
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
        self.net.set_timeout(timeout).map_err(|e| self.fail("set_timeout", e))?;
        self.timeout = timeout;
        Ok(())
    }
    /// How many connections to other ranks this rank holds (for the tests of the topology).
    #[cfg(test)]
    pub(crate) fn connections(&self) -> usize {
        self.net.connections()
    }
    /// The largest payload one operation may carry.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn fail(&self, step: &str, cause: Error) -> Error {
        Error::Bootstrap { rank: self.info.rank, step: step.to_string(), cause: Box::new(cause) }
    }

    /// Refuses `what` at once on a bootstrap this rank [abandoned](Bootstrap::abandon) (its
    /// connections are severed: the call would otherwise fail late, or wait out its timeout).
    fn refuse_if_abandoned(&self, what: &str) -> Result<()> {
        if self.abandoned.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(self.fail(
                what,
                Error::InvalidArgument("this rank abandoned the job: its bootstrap is of no further use".into()),
            ));
        }
        Ok(())
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

    /// The body of all collectives: every rank sends `data` to rank 0, which sends everyone
    /// the contributions of all (all-gather) or an empty release (barrier), or, when it cannot,
    /// an abort that says why.
    fn collective(&self, step: &str, kind: Kind, seq: u64, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_size(step, data.len())?;
        let parts = match (self.info.world_size, self.info.rank) {
            (1, _) => Ok(vec![data.to_vec()]),
            (_, 0) => self.lead(kind, seq, data),
            _ => self.follow(kind, seq, data),
        }
        .map_err(|cause| self.fail(step, cause))?;
        lock(&self.counters).completed = seq + 1;
        Ok(parts)
    }

    /// Rank 0's part of a collective.
    fn lead(&self, kind: Kind, seq: u64, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.info.world_size;
        let deadline = after(self.timeout);
        let mut parts = Vec::with_capacity(n);
        parts.push(data.to_vec());
        for peer in 1..n {
            match self.net.inbox.wait(peer, kind, seq, deadline, true) {
                Waited::Got(f) => parts.push(f.payload),
                other => {
                    let cause = self.cause(peer, kind, seq, other, self.timeout);
                    let gone = |p: &usize| self.net.inbox.gone(*p).is_none();
                    self.net.tell((1..n).filter(gone), Kind::Abort, seq, &encode_cause(&cause));
                    return Err(cause);
                }
            }
        }
        let frames = if kind == Kind::AllGather { frame::pack_parts(&parts, self.max_frame) } else { vec![Vec::new()] };
        let mut failed = None;
        for peer in 1..n {
            for f in &frames {
                match self.net.send(peer, kind, seq, f, deadline) {
                    Ok(()) => {}
                    // Every contribution is in, so the collective is complete: a rank that died
                    // since fails no one's (the next one names it, on every rank alike).
                    Err(Error::PeerLost { .. }) => break,
                    Err(e) => {
                        // The others still get theirs; this rank reports the first failure.
                        failed.get_or_insert(e);
                        break;
                    }
                }
            }
        }
        failed.map_or(Ok(parts), Err)
    }

    /// The part of a rank other than 0.
    fn follow(&self, kind: Kind, seq: u64, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.info.world_size;
        if let Err(e) = self.net.send(0, kind, seq, data, after(self.timeout)) {
            // Rank 0 may have aborted this collective already, and left: its verdict says more.
            return Err(match self.net.inbox.wait(0, kind, seq, Instant::now(), false) {
                aborted @ Waited::Aborted(_) => self.cause(0, kind, seq, aborted, self.timeout),
                _ => e,
            });
        }
        let patience = self.timeout + self.timeout.min(VERDICT_GRACE);
        let deadline = after(patience);
        let mut parts = Vec::new();
        loop {
            match self.net.inbox.wait(0, kind, seq, deadline, false) {
                Waited::Got(_) if kind == Kind::Barrier => return Ok(Vec::new()),
                Waited::Got(f) => {
                    let got = frame::unpack_parts(&f.payload, parts.len(), n - parts.len()).ok_or_else(|| {
                        Error::Protocol(format!("rank 0 sent a malformed result of collective #{seq}"))
                    })?;
                    parts.extend(got);
                    if parts.len() == n {
                        return Ok(parts);
                    }
                }
                other => return Err(self.cause(0, kind, seq, other, patience)),
            }
        }
    }

    /// The error for a wait on `peer` (in collective `seq`) that did not get its frame.
    fn cause(&self, peer: usize, kind: Kind, seq: u64, waited: Waited, patience: Duration) -> Error {
        match waited {
            Waited::Timeout => Error::Timeout { after: patience, waiting_for: format!("rank {peer}") },
            Waited::Lost { peer, why } => Error::PeerLost { peer, detail: why },
            Waited::Aborted(p) => decode_cause(&p).unwrap_or_else(|| {
                Error::Protocol(format!("rank 0 aborted collective #{seq} with an unreadable reason"))
            }),
            Waited::Mismatch(other) => Error::Protocol(format!(
                "rank {peer} called {} as collective #{seq} where rank {} called {} (ranks must call the same \
                 collectives in the same order)",
                other.name(),
                self.info.rank,
                kind.name()
            )),
            Waited::Got(f) => Error::Protocol(format!("unexpected {} frame from rank {peer}", f.kind.name())),
        }
    }
}

impl Bootstrap for TcpBootstrap {
    fn info(&self) -> &RankInfo {
        &self.info
    }

    fn on_peer_lost(&self, hook: super::PeerLostHook) -> bool {
        self.net.inbox.add_hook(hook);
        true
    }

    /// Ends every connection now, without goodbyes: every peer sees this rank as lost (rank 0
    /// reports it to the ranks with no connection to it) and runs its loss hooks. Every later
    /// all-gather, barrier, send or receive on this bootstrap fails at once, and the port stops
    /// taking connections.
    fn abandon(&self) {
        self.abandoned.store(true, std::sync::atomic::Ordering::SeqCst);
        self.net.sever();
    }

    /// Every rank's `data`, in rank order (this rank's own included). Contributions may differ in
    /// length; each must fit in [`max_frame`](TcpBootstrap::max_frame).
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.refuse_if_abandoned("all_gather")?;
        let (seq, step) = self.next_collective(Kind::AllGather);
        self.collective(&step, Kind::AllGather, seq, data)
    }

    fn barrier(&self) -> Result<()> {
        self.refuse_if_abandoned("barrier")?;
        let (seq, step) = self.next_collective(Kind::Barrier);
        self.collective(&step, Kind::Barrier, seq, &[]).map(drop)
    }

    /// Returns once the data is handed to the operating system (after opening a connection to
    /// `peer`, on the first send to it when there is none).
    fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        self.refuse_if_abandoned("send")?;
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
                .net
                .inbox
                .push(peer, frame::Frame { kind: Kind::Message, seq, payload: data.to_vec() })
                .map_err(|why| self.fail(&step, Error::InvalidArgument(why)));
        }
        self.net.send(peer, Kind::Message, seq, data, after(self.timeout)).map_err(|e| self.fail(&step, e))
    }

    /// Waits up to the [`timeout`](TcpBootstrap::timeout); a timed-out receive may be retried.
    fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        self.refuse_if_abandoned("recv")?;
        let n = self.info.world_size;
        if peer >= n {
            return Err(
                self.fail("recv", Error::InvalidArgument(format!("peer {peer} is not below the world size {n}")))
            );
        }
        let count = lock(&self.counters).received.get(&(peer, tag)).copied().unwrap_or(0);
        let step = message_step("recv", count + 1, tag, "from", peer);
        match self.net.inbox.wait(peer, Kind::Message, message_seq(tag, count), after(self.timeout), false) {
            Waited::Got(f) => {
                *lock(&self.counters).received.entry((peer, tag)).or_insert(0) += 1;
                Ok(f.payload)
            }
            other => Err(self.fail(&step, self.cause(peer, Kind::Message, 0, other, self.timeout))),
        }
    }

    /// A key derived from the session token (and whether that token was itself derived from the
    /// job id), this bootstrap's timeout, and the local address of its connections.
    fn hints(&self) -> BootstrapHints {
        BootstrapHints {
            key: Some(self.net.cfg.token.derive_key("port-channel transport")),
            timeout: Some(self.timeout),
            local_ip: self.net.local_ip(),
            token_derived: self.net.cfg.token_derived,
        }
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        // A goodbye first (unless this thread is panicking or the rank abandoned the job: then
        // the peers should treat this rank as lost and abort their waits), so that the peers see
        // a departure, not a death.
        let completed = lock(&self.counters).completed;
        let abandoned = self.abandoned.load(std::sync::atomic::Ordering::SeqCst);
        self.net.close(!std::thread::panicking() && !abandoned, completed);
    }
}

/// Why a collective failed, for an abort: `[u8 what][u64 number][text]`, where `what` is 0 for
/// a timeout (number: nanoseconds waited, text: what was waited for), 1 for a lost rank (number:
/// the rank, text: the detail) and 2 for anything else (the text of the error, read back as a
/// protocol error).
fn encode_cause(e: &Error) -> Vec<u8> {
    let (what, number, text) = match e {
        Error::Timeout { after, waiting_for } => {
            (0u8, u64::try_from(after.as_nanos()).unwrap_or(u64::MAX), waiting_for.clone())
        }
        Error::PeerLost { peer, detail } => (1, *peer as u64, detail.clone()),
        Error::Protocol(text) => (2, 0, text.clone()),
        other => (2, 0, other.to_string()),
    };
    let mut v = vec![what];
    v.extend_from_slice(&number.to_le_bytes());
    v.extend_from_slice(text.as_bytes());
    v
}

/// Reads an abort's cause; `None` when it is malformed.
fn decode_cause(p: &[u8]) -> Option<Error> {
    let number = u64::from_le_bytes(p.get(1..9)?.try_into().ok()?);
    let text = String::from_utf8_lossy(&p[9..]).into_owned();
    Some(match p[0] {
        0 => Error::Timeout { after: std::time::Duration::from_nanos(number), waiting_for: text },
        1 => Error::PeerLost { peer: usize::try_from(number).ok()?, detail: text },
        2 => Error::Protocol(text),
        _ => return None,
    })
}

#[cfg(test)]
mod wire_tests {
    use super::{Error, decode_cause, encode_cause, message_seq, message_step};

    #[test]
    fn abort_causes_round_trip() {
        let causes = [
            Error::Timeout { after: std::time::Duration::from_millis(400), waiting_for: "rank 3".into() },
            Error::PeerLost { peer: 7, detail: "closed by the peer".into() },
            Error::Protocol("rank 1 called barrier".into()),
        ];
        for c in &causes {
            assert_eq!(decode_cause(&encode_cause(c)).unwrap().to_string(), c.to_string());
        }
        assert!(matches!(decode_cause(&encode_cause(&causes[1])), Some(Error::PeerLost { peer: 7, .. })));
        let other = Error::InvalidArgument("x".into());
        assert_eq!(decode_cause(&encode_cause(&other)).unwrap().to_string(), format!("protocol: {other}"));
        assert!(decode_cause(&[0, 1]).is_none());
        assert!(decode_cause(&[9; 12]).is_none());
    }

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
