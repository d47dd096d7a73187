//! The inbox: frames from the other ranks, queued per peer by one reader thread per connection,
//! and taken by the receive that matches their kind and sequence number (see the module
//! documentation of [`super`], "Receiving: reader threads and matching", and "Bounded memory").

use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::frame::{self, Frame, FrameError, Kind, Token};
use super::{PeerLostHook, lock};

#[derive(Default)]
struct Slot {
    frames: VecDeque<Frame>,
    /// Payload bytes of the queued point-to-point messages.
    message_bytes: usize,
    /// Queued collective frames.
    collectives: usize,
    /// Why the connection ended, once it has.
    lost: Option<String>,
    /// Whether it ended without a goodbye (a death, not a departure) while this rank was open.
    abrupt: bool,
}

/// Collective frames one peer may have queued: the one this rank is waiting for and the next (a
/// peer cannot start a collective after that without this rank's contribution to the previous).
pub(super) const MAX_QUEUED_COLLECTIVES: usize = 2;

pub(super) struct Inbox {
    slots: Mutex<Vec<Slot>>,
    /// Called for every abrupt loss ([`super::Bootstrap::on_peer_lost`]).
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
    Lost(String),
    /// The peer used this collective number for another collective.
    Mismatch(Kind),
}

fn is_collective(k: Kind) -> bool {
    matches!(k, Kind::AllGather | Kind::Barrier)
}

impl Inbox {
    pub(super) fn new(n: usize, max_queued: usize) -> Self {
        Self {
            slots: Mutex::new((0..n).map(|_| Slot::default()).collect()),
            hooks: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            arrived: Condvar::new(),
            max_queued,
        }
    }

    /// Queues `f` from `peer`, or refuses it (with the reason) when the peer has too much unread:
    /// more than `max_queued` bytes of messages, or more collectives than the protocol allows.
    pub(super) fn push(&self, peer: usize, f: Frame) -> std::result::Result<(), String> {
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

    /// The connection to `peer` ended (or broke) without a goodbye: receives from it fail with
    /// `why`, and unless this rank is closing, the loss hooks run (once per peer).
    pub(super) fn lose(&self, peer: usize, why: String) {
        let fire = {
            let mut slots = lock(&self.slots);
            match slots.get_mut(peer) {
                Some(slot) if slot.lost.is_none() => {
                    slot.abrupt = !self.closing.load(Ordering::SeqCst);
                    slot.lost = Some(why.clone());
                    slot.abrupt
                }
                _ => false,
            }
        };
        self.arrived.notify_all();
        if fire {
            let hooks = lock(&self.hooks).clone();
            for hook in hooks {
                hook(peer, &why);
            }
        }
    }

    /// `peer` said goodbye: receives from it fail from now on (after what it sent before), and
    /// its connection ending is not a loss.
    pub(super) fn depart(&self, peer: usize) {
        if let Some(slot) = lock(&self.slots).get_mut(peer) {
            slot.lost.get_or_insert_with(|| "it closed its bootstrap (said goodbye)".into());
        }
        self.arrived.notify_all();
    }

    /// From now on, connections ending are this rank's doing.
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Registers a loss hook and runs it at once for every peer already lost abruptly.
    pub(super) fn add_hook(&self, hook: PeerLostHook) {
        let already: Vec<(usize, String)> = {
            let slots = lock(&self.slots);
            lock(&self.hooks).push(hook.clone());
            slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.abrupt)
                .filter_map(|(p, s)| s.lost.clone().map(|w| (p, w)))
                .collect()
        };
        for (peer, why) in already {
            hook(peer, &why);
        }
    }

    pub(super) fn lost_reason(&self, peer: usize) -> Option<String> {
        lock(&self.slots).get(peer).and_then(|s| s.lost.clone())
    }

    /// The frame `(kind, seq)` from `peer`; frames queued before the connection ended are still
    /// delivered.
    pub(super) fn wait(&self, peer: usize, kind: Kind, seq: u64, deadline: Instant) -> Waited {
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

pub(super) fn reader_loop(peer: usize, mut stream: TcpStream, token: Token, max: usize, inbox: &Inbox) {
    loop {
        match frame::read_frame(&mut stream, &token, max) {
            Ok(Some(f)) if f.kind == Kind::Goodbye => {
                inbox.depart(peer);
                return;
            }
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
            Err(FrameError::Io(source)) if source.kind() == io::ErrorKind::ConnectionReset => {
                inbox.lose(peer, "reset by the peer (it exited or was killed)".into());
                return;
            }
            Err(FrameError::Io(source)) => {
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
