//! The receiver thread: the peer's operations, checked, landed in order.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::memory::{LandingMemory, check_span};
use super::shared::Shared;
use super::socket::{ReadEnd, read_full, read_into};
use super::wire::{HEADER_LEN, Header, MAX_FAIL_TEXT, Op};
use crate::error::{Error, Result};

pub(super) struct ReceiverLoop<L> {
    pub(super) reader: BufReader<TcpStream>,
    pub(super) writer: TcpStream,
    pub(super) landing: L,
    pub(super) seq: u64,
    pub(super) slot: usize,
    pub(super) timeout: Duration,
    pub(super) shared: Arc<Shared>,
}

impl<L: LandingMemory> ReceiverLoop<L> {
    pub(super) fn run(mut self) -> Result<()> {
        let r = self.serve();
        // Whatever happened, nothing stays in flight into memory that may be freed next.
        let drained = self.landing.wait_all(Instant::now() + self.timeout);
        r.and(drained)
    }

    /// Ends the channel because of a bad message: tells the sender why, and fails here too.
    fn refuse(&mut self, why: String) -> Error {
        let text = why.as_bytes();
        let text = &text[..text.len().min(MAX_FAIL_TEXT as usize)];
        let mut msg = Header::new(Op::Fail, 0, 0, 0, text.len() as u64).encode().to_vec();
        msg.extend_from_slice(text);
        let _ = self.writer.write_all(&msg);
        Error::Protocol(format!(
            "rank {} sent a bad port-channel message over TCP: {why}; the channel is closed",
            self.shared.peer
        ))
    }

    fn serve(&mut self) -> Result<()> {
        self.landing.bind()?;
        let (slots, slot_bytes) = (self.landing.slots(), self.landing.slot_bytes() as u64);
        loop {
            let mut hb = [0u8; HEADER_LEN];
            match read_full(&mut self.reader, &mut hb, true, self.timeout, &self.shared)? {
                ReadEnd::Full => {}
                ReadEnd::Stopped => return Ok(()),
                ReadEnd::Eof { got: 0 } => {
                    return Err(self
                        .shared
                        .lost("the connection closed without the channel's close (the rank exited or was killed)"));
                }
                ReadEnd::Eof { got } => {
                    return Err(self.shared.lost(format!("the connection closed {got} bytes into a message header")));
                }
            }
            let h = match Header::decode(&hb) {
                Ok(h) => h,
                Err(f) => return Err(self.refuse(f.to_string())),
            };
            if !h.op.is_request() {
                return Err(self.refuse(format!("a {:?} reply on the request stream", h.op)));
            }
            if h.seq != self.seq {
                return Err(self.refuse(format!("message {} out of sequence (expected {})", h.seq, self.seq)));
            }
            self.seq += 1;
            match h.op {
                Op::Put => {
                    if let Err(e) = check_span(self.landing.regions(), h.index, h.offset, h.len) {
                        return Err(self.refuse(format!("put: {e}")));
                    }
                    if h.len == 0 || h.len > slot_bytes {
                        return Err(self.refuse(format!("put chunk of {} bytes (accepted: 1..={slot_bytes})", h.len)));
                    }
                    let len = h.len as usize;
                    // Straight into the destination where the landing memory offers it (host
                    // memory), else into a staging slot that then lands.
                    let (end, left) = if let Some(span) = self.landing.direct(h.index, h.offset, len)? {
                        let end = read_into(&mut self.reader, span, self.timeout, &self.shared)?;
                        (end, "the bytes that came are in the region; the put was never acknowledged")
                    } else {
                        let slot = self.slot;
                        self.slot = (self.slot + 1) % slots;
                        let buf = self.landing.slot(slot, Instant::now() + self.timeout)?;
                        let end = read_full(&mut self.reader, &mut buf[..len], false, self.timeout, &self.shared)?;
                        if end == ReadEnd::Full {
                            self.landing.land(slot, h.index, h.offset, len)?;
                        }
                        (end, "nothing of that put was written")
                    };
                    match end {
                        ReadEnd::Full => {}
                        ReadEnd::Stopped => return Ok(()),
                        ReadEnd::Eof { got } => {
                            return Err(self
                                .shared
                                .lost(format!("the connection closed {got} bytes into a put of {len}; {left}")));
                        }
                    }
                }
                Op::Signal => {
                    if h.index as usize >= self.landing.semaphores() {
                        let n = self.landing.semaphores();
                        return Err(self.refuse(format!("signal to semaphore {} of {n}", h.index)));
                    }
                    self.landing.signal(h.index)?;
                }
                Op::AtomicAdd => {
                    let span = check_span(self.landing.regions(), h.index, h.offset, 8);
                    if let Err(e) = span.and_then(|()| {
                        if h.offset.is_multiple_of(8) { Ok(()) } else { Err(format!("unaligned offset {}", h.offset)) }
                    }) {
                        return Err(self.refuse(format!("atomic add: {e}")));
                    }
                    self.landing.atomic_add(h.index, h.offset, h.len)?;
                }
                Op::Flush => {
                    self.landing.wait_all(Instant::now() + self.timeout)?;
                    let ack = Header::new(Op::Ack, 0, 0, h.offset, 0).encode();
                    self.writer.write_all(&ack).map_err(|e| self.shared.lost(format!("acknowledging a flush: {e}")))?;
                }
                Op::Close => {
                    self.landing.wait_all(Instant::now() + self.timeout)?;
                    self.shared.peer_closed.store(true, Ordering::Release);
                    return Ok(());
                }
                Op::Ack | Op::Fail => unreachable!("replies were refused above"),
            }
        }
    }
}
