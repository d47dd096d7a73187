//! What the transport's threads share: the proxy's operations for the sender, the state the
//! threads and the proxy side both see, and the sizes and intervals they work with.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::transport::RemoteSpan;

/// How often blocked reads wake up to look at the stop flag.
pub(super) const POLL: Duration = Duration::from_millis(50);
/// Payloads up to this size are copied into the outgoing buffer (one write with their header);
/// larger ones are written from where the source has them (its staging slot, or the region).
pub(super) const SMALL_PAYLOAD: usize = 64 << 10;
/// The outgoing buffer is written out once it holds this much.
pub(super) const OUT_FLUSH: usize = 256 << 10;
/// Operations the proxy may queue ahead of the sender thread before it waits.
pub(super) const QUEUE: usize = 4096;
/// The receiver's read buffer.
pub(super) const READ_BUFFER: usize = 16 << 10;

/// One operation for the sender thread.
#[derive(Debug)]
pub(super) enum Cmd {
    Put { src: u64, dst: RemoteSpan, bytes: u64 },
    Signal(u32),
    AtomicAdd(RemoteSpan, u64),
    Flush(u64),
    Close,
}

/// What the threads of one transport share with the proxy side.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) peer: usize,
    /// The highest flush id the peer acknowledged.
    pub(super) acked: AtomicU64,
    pub(super) failed: AtomicBool,
    /// The first error, until it is reported; its text stays for later reports.
    pub(super) error: Mutex<(Option<Error>, String)>,
    /// The peer's `Close` arrived (its side of the channel ended in order).
    pub(super) peer_closed: AtomicBool,
    /// This side is closing: the peer's end of the connection may close now.
    pub(super) closing: AtomicBool,
    /// The reading threads stop at their next wake-up.
    pub(super) stop: AtomicBool,
}

impl Shared {
    pub(super) fn fail(&self, e: Error) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if !self.failed.load(Ordering::Acquire) {
            g.1 = e.to_string();
            g.0 = Some(e);
            self.failed.store(true, Ordering::Release);
        }
    }

    pub(super) fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        Err(g
            .0
            .take()
            .unwrap_or_else(|| Error::Protocol(format!("the TCP channel with rank {} failed: {}", self.peer, g.1))))
    }

    pub(super) fn lost(&self, detail: impl Into<String>) -> Error {
        Error::PeerLost { peer: self.peer, detail: detail.into() }
    }
}
