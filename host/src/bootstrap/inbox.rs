//! The inbox: frames from the other ranks, queued per peer by the reader threads of the
//! connections, and taken by the receive that matches their kind and sequence number; and what
//! this rank knows of each peer's end (a goodbye, a death seen here, a death reported by rank 0).
//! See the module documentation of [`super`], "Receiving: reader threads and matching", "A dead
//! rank" and "Bounded memory".

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::{PeerLostHook, lock};
use crate::frame::{Frame, Kind};

/// What receives from a peer that said goodbye fail with.
pub(super) const SAID_GOODBYE: &str = "it closed its bootstrap (said goodbye)";

#[derive(Default)]
struct Slot {
    frames: VecDeque<Frame>,
    /// Payload bytes of the queued point-to-point messages.
    message_bytes: usize,
    /// The collectives frames are queued for, and how many frames each.
    collectives: Vec<(u64, usize)>,
    /// Connections with this peer that are open or being opened and have not said goodbye:
    /// while one is, frames may still come from the peer.
    open: usize,
    /// Why receives from this peer fail, once its queue is empty: nothing more can come.
    lost: Option<String>,
    /// How many collectives it completed (so, which it took part in), once it said goodbye.
    departed: Option<u64>,
    /// Why it is considered dead (its connection here or to rank 0 ended without a goodbye),
    /// once it is; the loss hooks ran for it then.
    dead: Option<String>,
}

struct State {
    slots: Vec<Slot>,
    /// Peers with `departed` or `dead` set, in the order this rank learnt of them.
    ended: Vec<usize>,
}

/// Collectives one peer may have frames queued for: the one this rank is waiting for and the
/// next (a peer cannot get further ahead without this rank's part in the earlier ones).
pub(super) const MAX_QUEUED_COLLECTIVES: usize = 2;

pub(super) struct Inbox {
    state: Mutex<State>,
    /// Called for every death ([`super::Bootstrap::on_peer_lost`]).
    hooks: Mutex<Vec<PeerLostHook>>,
    /// Set when this rank closes its own connections: what the readers see then is not a loss.
    closing: AtomicBool,
    arrived: Condvar,
    /// Cap on [`Slot::message_bytes`] (one message alone is always accepted).
    max_queued: usize,
}

pub(super) enum Waited {
    Got(Frame),
    Timeout,
    /// `peer` is gone: the one waited for, or (for a collective) any rank the collective needs.
    Lost {
        peer: usize,
        why: String,
    },
    /// The peer used this collective number for another collective.
    Mismatch(Kind),
    /// Rank 0 aborted the collective; the payload says why.
    Aborted(Vec<u8>),
}

fn is_collective(k: Kind) -> bool {
    matches!(k, Kind::AllGather | Kind::Barrier | Kind::Abort)
}

impl Inbox {
    pub(super) fn new(n: usize, max_queued: usize) -> Self {
        Self {
            state: Mutex::new(State { slots: (0..n).map(|_| Slot::default()).collect(), ended: Vec::new() }),
            hooks: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            arrived: Condvar::new(),
            max_queued,
        }
    }

    /// Queues `f` from `peer`, or refuses it (with the reason) when the peer has too much unread:
    /// more than `max_queued` bytes of messages, or frames of more collectives than the protocol
    /// allows.
    pub(super) fn push(&self, peer: usize, f: Frame) -> std::result::Result<(), String> {
        let mut st = lock(&self.state);
        let Some(slot) = st.slots.get_mut(peer) else { return Err("no such rank".into()) };
        if is_collective(f.kind) {
            if let Some(c) = slot.collectives.iter_mut().find(|c| c.0 == f.seq) {
                c.1 += 1;
            } else if slot.collectives.len() < MAX_QUEUED_COLLECTIVES {
                slot.collectives.push((f.seq, 1));
            } else {
                return Err(format!(
                    "rank {peer} sent a {} (collective #{}) while {MAX_QUEUED_COLLECTIVES} earlier collectives were \
                     still unread (ranks must call the same collectives in the same order)",
                    f.kind.name(),
                    f.seq
                ));
            }
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
        drop(st);
        self.arrived.notify_all();
        Ok(())
    }

    /// A connection with `peer` is being opened (by either side): frames may come from the peer
    /// until it says goodbye on it, or [`Inbox::opening_failed`].
    pub(super) fn opening(&self, peer: usize) {
        if let Some(slot) = lock(&self.state).slots.get_mut(peer) {
            slot.open += 1;
        }
    }

    /// A connection counted by [`Inbox::opening`] did not come about.
    pub(super) fn opening_failed(&self, peer: usize) {
        let mut st = lock(&self.state);
        if let Some(slot) = st.slots.get_mut(peer) {
            slot.open = slot.open.saturating_sub(1);
            settle(slot);
        }
        drop(st);
        self.arrived.notify_all();
    }

    /// A connection with `peer` ended (or broke) without a goodbye, or the peer broke the
    /// protocol: receives from it fail with `why` (after what is queued), and it is dead. Returns
    /// whether that is news to report (the loss hooks, and rank 0's reports to the others): not
    /// when the peer had already said goodbye or was known dead, nor while this rank is closing.
    pub(super) fn lose(&self, peer: usize, why: &str) -> bool {
        let mut st = lock(&self.state);
        let news = match st.slots.get_mut(peer) {
            Some(slot) if slot.lost.is_none() => {
                slot.lost = Some(why.to_string());
                slot.departed.is_none() && slot.dead.is_none() && !self.closing.load(Ordering::SeqCst)
            }
            _ => false,
        };
        if news {
            st.slots[peer].dead = Some(why.to_string());
            st.ended.push(peer);
        }
        drop(st);
        self.arrived.notify_all();
        news
    }

    /// Rank 0 reports `peer` dead. Collectives fail at once; receives from `peer` fail once no
    /// connection with it is left open (a connection of our own delivers what the peer sent on
    /// it before its end). Returns whether that is news for the loss hooks.
    pub(super) fn reported_dead(&self, peer: usize, why: &str) -> bool {
        let mut st = lock(&self.state);
        let news = match st.slots.get_mut(peer) {
            Some(slot) if slot.dead.is_none() && slot.departed.is_none() && !self.closing.load(Ordering::SeqCst) => {
                slot.dead = Some(why.to_string());
                settle(slot);
                true
            }
            _ => false,
        };
        if news {
            st.ended.push(peer);
        }
        drop(st);
        self.arrived.notify_all();
        news
    }

    /// `peer` said goodbye on one of its connections, after completing `completed` collectives
    /// (the rendezvous barrier is the first): the later ones fail, and once every connection with it said goodbye (so that
    /// everything it sent is queued), receives from it fail too.
    pub(super) fn goodbye(&self, peer: usize, completed: u64) {
        let mut st = lock(&self.state);
        let Some(slot) = st.slots.get_mut(peer) else { return };
        slot.open = slot.open.saturating_sub(1);
        let first = slot.departed.is_none() && slot.dead.is_none();
        slot.departed = Some(slot.departed.map_or(completed, |d| d.max(completed)));
        settle(slot);
        if first {
            st.ended.push(peer);
        }
        drop(st);
        self.arrived.notify_all();
    }

    /// From now on, connections ending are this rank's doing.
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Runs the loss hooks for `peer` (after [`Inbox::lose`] or [`Inbox::reported_dead`] said it
    /// is news).
    pub(super) fn run_hooks(&self, peer: usize, why: &str) {
        let hooks = lock(&self.hooks).clone();
        for hook in hooks {
            hook(peer, why);
        }
    }

    /// Registers a loss hook and runs it at once for every peer already dead.
    pub(super) fn add_hook(&self, hook: PeerLostHook) {
        let already: Vec<(usize, String)> = {
            let st = lock(&self.state);
            lock(&self.hooks).push(hook.clone());
            st.ended.iter().filter_map(|&p| st.slots[p].dead.clone().map(|w| (p, w))).collect()
        };
        for (peer, why) in already {
            hook(peer, &why);
        }
    }

    /// Why `peer` is gone, if it is (for a send to it).
    pub(super) fn gone(&self, peer: usize) -> Option<String> {
        let st = lock(&self.state);
        let slot = st.slots.get(peer)?;
        slot.lost.clone().or_else(|| slot.dead.clone())
    }

    /// The frame `(kind, seq)` from `peer`; frames queued before the connection ended are still
    /// delivered. When `gathering` (rank 0 collecting the contributions to a collective, from
    /// `peer` on), it also gives up as soon as any rank is dead, or a rank from `peer` on said
    /// goodbye without contributing: the collective needs every rank. (A rank that contributed
    /// and then left, because the collective failed for it, is no reason.) The other ranks wait
    /// for rank 0's verdict instead, whatever they see themselves: rank 0 alone knows whether
    /// everyone took part (a rank that dies just after rank 0 sent it the result did), and names
    /// the rank that caused a failure.
    pub(super) fn wait(&self, peer: usize, kind: Kind, seq: u64, deadline: Instant, gathering: bool) -> Waited {
        let collective = is_collective(kind);
        let mut st = lock(&self.state);
        loop {
            let Some(slot) = st.slots.get_mut(peer) else {
                return Waited::Lost { peer, why: "no such rank".into() };
            };
            let hit = slot.frames.iter().position(|f| f.seq == seq && is_collective(f.kind) == collective);
            if let Some(f) = hit.and_then(|i| slot.frames.remove(i)) {
                if !collective {
                    slot.message_bytes -= f.payload.len();
                } else if let Some(i) = slot.collectives.iter().position(|c| c.0 == seq) {
                    slot.collectives[i].1 -= 1;
                    if slot.collectives[i].1 == 0 {
                        slot.collectives.swap_remove(i);
                    }
                }
                return match f.kind {
                    k if k == kind => Waited::Got(f),
                    Kind::Abort => Waited::Aborted(f.payload),
                    other => Waited::Mismatch(other),
                };
            }
            if gathering {
                if let Some((p, why)) = st.ended.iter().find_map(|&p| st.slots[p].dead.clone().map(|w| (p, w))) {
                    return Waited::Lost { peer: p, why };
                }
                let absent = |p: usize| {
                    let s = &st.slots[p];
                    p >= peer && s.departed.is_some_and(|done| done <= seq) && !s.collectives.iter().any(|c| c.0 == seq)
                };
                if let Some(&p) = st.ended.iter().find(|&&p| absent(p)) {
                    return Waited::Lost { peer: p, why: SAID_GOODBYE.into() };
                }
            }
            if let Some(why) = &st.slots[peer].lost {
                return Waited::Lost { peer, why: why.clone() };
            }
            let now = Instant::now();
            if now >= deadline {
                return Waited::Timeout;
            }
            st = self.arrived.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// Once no connection with a peer that said goodbye or was reported dead is open, nothing more
/// can come from it: its receives fail from then on.
fn settle(slot: &mut Slot) {
    if slot.open == 0 && slot.lost.is_none() {
        if let Some(why) = &slot.dead {
            slot.lost = Some(why.clone());
        } else if slot.departed.is_some() {
            slot.lost = Some(SAID_GOODBYE.into());
        }
    }
}
