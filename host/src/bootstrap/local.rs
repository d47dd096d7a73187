//! Ranks as threads of one process: a [`Bootstrap`] whose ranks talk through shared queues.
//!
//! [`LocalBootstrap::group`] makes the `n` ranks of one group, one per thread that will use it
//! (each is `Send`). Every operation behaves as [`TcpBootstrap`](super::TcpBootstrap)'s does, with
//! the same rules of use and the same errors:
//!
//! * all-gathers and barriers share one sequence; two ranks calling different collectives as
//!   their n-th one fail it with [`Error::Protocol`] naming both kinds;
//! * messages from one rank to another under one tag arrive in order; a receive takes the next
//!   message of its (peer, tag);
//! * every wait ends at the group's timeout ([`DEFAULT_TIMEOUT`], or
//!   [`LocalBootstrap::group_with_timeout`]) with an [`Error::Timeout`] naming the rank waited
//!   for;
//! * a rank whose bootstrap is dropped normally has *departed*: receives from it fail once its
//!   queued messages are read, and collectives it did not take part in fail;
//! * a rank that calls [`Bootstrap::abandon`], or whose bootstrap is dropped while its thread
//!   panics, is *lost*: the [`Bootstrap::on_peer_lost`] hooks of every other rank still in the
//!   group run at once (on the thread that lost it) with its rank, so a
//!   [`Communicator`](crate::comm::Communicator) aborts its GPU's waits, and every wait for it
//!   fails with [`Error::PeerLost`]. The abandoning rank's own later calls fail.
//!
//! [`RankInfo`] says that every rank is on this machine: local rank = rank, local size = world
//! size, [`RankSource::Threads`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::{Bootstrap, BootstrapHints, PeerLostHook, RankInfo, RankSource, after, lock};
use crate::error::{Error, Result};

/// How long a rank waits for another at one step unless the group says otherwise (as the TCP
/// bootstrap's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a lost rank's peers are told when it called [`Bootstrap::abandon`].
const ABANDONED: &str = "it abandoned the job (Bootstrap::abandon)";
/// ... when its bootstrap was dropped while its thread panicked.
const PANICKED: &str = "its thread panicked";
/// ... when it closed its bootstrap without taking part.
const DEPARTED: &str = "it closed its bootstrap (said goodbye)";

/// One rank of a group of ranks that are threads of this process; see the module documentation.
pub struct LocalBootstrap {
    info: RankInfo,
    group: Arc<Group>,
    /// Collectives this rank has started.
    started: AtomicU64,
}

impl std::fmt::Debug for LocalBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalBootstrap(rank {} of {})", self.info.rank, self.info.world_size)
    }
}

/// What the ranks of one group share.
struct Group {
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    AllGather,
    Barrier,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllGather => "all_gather",
            Kind::Barrier => "barrier",
        }
    }
}

/// How a rank left the group.
#[derive(Clone, Debug)]
enum End {
    /// Its bootstrap was dropped normally after `completed` collectives.
    Departed { started: u64 },
    /// It abandoned the job or its thread panicked.
    Lost(&'static str),
}

/// One collective in progress: every rank's contribution, once it arrived.
struct Collective {
    kind: Kind,
    parts: Vec<Option<Vec<u8>>>,
    /// Ranks that have taken the result; the entry goes when every rank has.
    taken: usize,
    /// Two ranks called different collectives as this one.
    mismatch: Option<String>,
}

struct State {
    collectives: HashMap<u64, Collective>,
    /// (from, to, tag) -> messages in order.
    queues: HashMap<(usize, usize, u32), VecDeque<Vec<u8>>>,
    ends: Vec<Option<End>>,
    hooks: Vec<Vec<PeerLostHook>>,
}

impl LocalBootstrap {
    /// The `n` ranks of a new group, rank `r` at index `r`, with [`DEFAULT_TIMEOUT`]. Fails for
    /// `n` of 0 or above [`MAX_WORLD_SIZE`](super::env::MAX_WORLD_SIZE).
    pub fn group(n: usize) -> Result<Vec<LocalBootstrap>> {
        Self::group_with_timeout(n, DEFAULT_TIMEOUT)
    }

    /// [`Self::group`] with `timeout` for every wait of one step.
    pub fn group_with_timeout(n: usize, timeout: Duration) -> Result<Vec<LocalBootstrap>> {
        let infos = (0..n.max(1))
            .map(|rank| {
                let info =
                    RankInfo { rank, world_size: n, local_rank: rank, local_size: n, source: RankSource::Threads };
                info.check("LocalBootstrap::group").map(|()| info)
            })
            .collect::<Result<Vec<_>>>()?;
        let group = Arc::new(Group {
            timeout,
            state: Mutex::new(State {
                collectives: HashMap::new(),
                queues: HashMap::new(),
                ends: vec![None; n],
                hooks: vec![Vec::new(); n],
            }),
            changed: Condvar::new(),
        });
        Ok(infos
            .into_iter()
            .map(|info| LocalBootstrap { info, group: group.clone(), started: AtomicU64::new(0) })
            .collect())
    }

    /// The timeout of one step.
    pub fn timeout(&self) -> Duration {
        self.group.timeout
    }

    fn fail(&self, step: &str, cause: Error) -> Error {
        Error::Bootstrap { rank: self.info.rank, step: step.to_string(), cause: Box::new(cause) }
    }

    /// Refuses calls from a rank that abandoned the job.
    fn check_alive(&self, st: &State, step: &str) -> Result<()> {
        match &st.ends[self.info.rank] {
            Some(End::Lost(why)) => Err(self.fail(step, Error::Protocol(format!("this rank left the group: {why}")))),
            _ => Ok(()),
        }
    }

    fn check_peer(&self, peer: usize, step: &str) -> Result<()> {
        if peer >= self.info.world_size {
            return Err(self.fail(
                step,
                Error::InvalidArgument(format!("rank {peer} is not below the world size {}", self.info.world_size)),
            ));
        }
        Ok(())
    }

    /// Waits on the group's condition until `done` answers, or the timeout.
    fn wait<'a, T>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        step: &str,
        mut done: impl FnMut(&mut State) -> Option<std::result::Result<T, Error>>,
        waiting_for: impl Fn(&State) -> String,
    ) -> Result<T> {
        let deadline = after(self.group.timeout);
        loop {
            if let Some(r) = done(&mut st) {
                return r.map_err(|e| self.fail(step, e));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let who = waiting_for(&st);
                return Err(self.fail(step, Error::Timeout { after: self.group.timeout, waiting_for: who }));
            }
            st = self.group.changed.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn collective(&self, kind: Kind, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (me, n) = (self.info.rank, self.info.world_size);
        let seq = self.started.fetch_add(1, Ordering::SeqCst);
        let step = format!("{} #{seq}", kind.name());
        let mut st = lock(&self.group.state);
        self.check_alive(&st, &step)?;
        let c = st.collectives.entry(seq).or_insert_with(|| Collective {
            kind,
            parts: vec![None; n],
            taken: 0,
            mismatch: None,
        });
        if c.kind != kind && c.mismatch.is_none() {
            c.mismatch = Some(format!(
                "collective #{seq}: rank {me} called {} while another rank called {}",
                kind.name(),
                c.kind.name()
            ));
        }
        c.parts[me] = Some(data.to_vec());
        self.group.changed.notify_all();
        self.wait(
            st,
            &step,
            |st| {
                let c = st.collectives.get_mut(&seq)?;
                if let Some(m) = &c.mismatch {
                    return Some(Err(Error::Protocol(m.clone())));
                }
                if c.parts.iter().all(Option::is_some) {
                    let all: Vec<Vec<u8>> = c.parts.iter().map(|p| p.clone().unwrap_or_default()).collect();
                    c.taken += 1;
                    if c.taken == n {
                        st.collectives.remove(&seq);
                    }
                    return Some(Ok(all));
                }
                // A missing rank that can no longer contribute fails the collective.
                let missing = c.parts.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(r, _)| r);
                for r in missing {
                    match &st.ends[r] {
                        Some(End::Lost(why)) => return Some(Err(Error::PeerLost { peer: r, detail: why.to_string() })),
                        Some(End::Departed { started }) if *started <= seq => {
                            return Some(Err(Error::PeerLost {
                                peer: r,
                                detail: format!("{DEPARTED} without taking part"),
                            }));
                        }
                        _ => {}
                    }
                }
                None
            },
            |st| {
                let missing = st.collectives.get(&seq).and_then(|c| c.parts.iter().position(Option::is_none));
                missing.map_or_else(|| "the other ranks".to_string(), |r| format!("rank {r}"))
            },
        )
    }

    /// Marks this rank as ended and runs the others' hooks when it is lost.
    fn end(&self, how: End) {
        let me = self.info.rank;
        let mut st = lock(&self.group.state);
        if st.ends[me].is_some() {
            return;
        }
        st.ends[me] = Some(how.clone());
        // This rank's own hooks hold its GPU: let them go.
        let _mine = std::mem::take(&mut st.hooks[me]);
        let to_call: Vec<PeerLostHook> = match how {
            End::Lost(_) => (0..st.ends.len())
                .filter(|&q| q != me && st.ends[q].is_none())
                .flat_map(|q| st.hooks[q].iter().cloned())
                .collect(),
            End::Departed { .. } => Vec::new(),
        };
        self.group.changed.notify_all();
        drop(st);
        if let End::Lost(why) = how {
            for h in to_call {
                h(me, why);
            }
        }
    }
}

impl Bootstrap for LocalBootstrap {
    fn info(&self) -> &RankInfo {
        &self.info
    }

    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.collective(Kind::AllGather, data)
    }

    fn barrier(&self) -> Result<()> {
        self.collective(Kind::Barrier, &[]).map(drop)
    }

    fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        let step = format!("send to rank {peer}");
        self.check_peer(peer, &step)?;
        let mut st = lock(&self.group.state);
        self.check_alive(&st, &step)?;
        match &st.ends[peer] {
            Some(End::Lost(why)) => {
                return Err(self.fail(&step, Error::PeerLost { peer, detail: why.to_string() }));
            }
            Some(End::Departed { .. }) => {
                return Err(self.fail(&step, Error::PeerLost { peer, detail: DEPARTED.to_string() }));
            }
            None => {}
        }
        st.queues.entry((self.info.rank, peer, tag)).or_default().push_back(data.to_vec());
        self.group.changed.notify_all();
        Ok(())
    }

    fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        let step = format!("recv from rank {peer}");
        self.check_peer(peer, &step)?;
        let st = lock(&self.group.state);
        self.check_alive(&st, &step)?;
        let key = (peer, self.info.rank, tag);
        self.wait(
            st,
            &step,
            |st| {
                if let Some(m) = st.queues.get_mut(&key).and_then(VecDeque::pop_front) {
                    return Some(Ok(m));
                }
                // Nothing queued: nothing more can come from a rank that has ended.
                match &st.ends[peer] {
                    Some(End::Lost(why)) => Some(Err(Error::PeerLost { peer, detail: why.to_string() })),
                    Some(End::Departed { .. }) => Some(Err(Error::PeerLost { peer, detail: DEPARTED.to_string() })),
                    None => None,
                }
            },
            |_| format!("rank {peer}"),
        )
    }

    fn on_peer_lost(&self, hook: PeerLostHook) -> bool {
        let mut st = lock(&self.group.state);
        let lost: Vec<(usize, &'static str)> = st
            .ends
            .iter()
            .enumerate()
            .filter_map(|(r, e)| match e {
                Some(End::Lost(why)) if r != self.info.rank => Some((r, *why)),
                _ => None,
            })
            .collect();
        if st.ends[self.info.rank].is_none() {
            st.hooks[self.info.rank].push(hook.clone());
        }
        drop(st);
        for (r, why) in lost {
            hook(r, why);
        }
        true
    }

    fn abandon(&self) {
        self.end(End::Lost(ABANDONED));
    }

    fn hints(&self) -> BootstrapHints {
        BootstrapHints {
            timeout: Some(self.group.timeout),
            local_ip: Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            ..BootstrapHints::default()
        }
    }
}

impl Drop for LocalBootstrap {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.end(End::Lost(PANICKED));
        } else {
            self.end(End::Departed { started: self.started.load(Ordering::SeqCst) });
        }
    }
}

#[cfg(test)]
mod tests;
