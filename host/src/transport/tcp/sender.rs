//! The sender thread (the proxy's operations, in order, onto the connection toward the peer)
//! and the ack reader (the peer's acknowledgements and refusals on that connection).

use std::collections::VecDeque;
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use super::memory::{Outgoing, SourceMemory};
use super::shared::{Cmd, OUT_FLUSH, SMALL_PAYLOAD, Shared};
use super::socket::{ReadEnd, read_full, send_in_place, write_all};
use super::wire::{HEADER_LEN, Header, MAX_FAIL_TEXT, Op};
use crate::error::{Error, Result};

/// A message waiting to be written: a staged chunk (header, slot) or a header alone.
pub(super) enum Pending {
    Chunk { header: Header, slot: usize, len: usize },
    Control(Header),
}

pub(super) struct SenderLoop<S> {
    pub(super) source: S,
    pub(super) sock: TcpStream,
    /// Headers and small payloads, written out together.
    pub(super) out: Vec<u8>,
    pub(super) seq: u64,
    pub(super) free: VecDeque<usize>,
    pub(super) pipe: VecDeque<Pending>,
    pub(super) chunk: usize,
    pub(super) timeout: Duration,
    pub(super) shared: Arc<Shared>,
}

impl<S: SourceMemory> SenderLoop<S> {
    pub(super) fn run(mut self, cmds: &Receiver<Cmd>) -> Result<()> {
        self.source.bind()?;
        self.free = (0..self.source.slots()).collect();
        loop {
            let cmd = if self.pipe.is_empty() {
                // About to wait for the proxy: what is buffered goes out now.
                self.write_out()?;
                match recv_spinning(cmds) {
                    Some(c) => c,
                    None => return Ok(()), // the transport was dropped
                }
            } else {
                match cmds.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => {
                        self.emit_front()?;
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            };
            match cmd {
                Cmd::Put { src, dst, bytes } => {
                    let mut done = 0u64;
                    while done < bytes {
                        let len = (bytes - done).min(self.chunk as u64) as usize;
                        let slot = self.free_slot()?;
                        self.source.stage(slot, src + done, len)?;
                        let header = Header::new(Op::Put, dst.region, self.next_seq(), dst.offset + done, len as u64);
                        self.pipe.push_back(Pending::Chunk { header, slot, len });
                        done += len as u64;
                    }
                }
                Cmd::Signal(s) => self.control(Op::Signal, s, 0, 0),
                Cmd::AtomicAdd(d, v) => self.control(Op::AtomicAdd, d.region, d.offset, v),
                Cmd::Flush(id) => self.control(Op::Flush, 0, id, 0),
                Cmd::Close => {
                    self.control(Op::Close, 0, 0, 0);
                    while !self.pipe.is_empty() {
                        self.emit_front()?;
                    }
                    return self.write_out();
                }
            }
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    fn control(&mut self, op: Op, index: u32, offset: u64, len: u64) {
        let h = Header::new(op, index, self.next_seq(), offset, len);
        self.pipe.push_back(Pending::Control(h));
    }

    fn free_slot(&mut self) -> Result<usize> {
        loop {
            if let Some(s) = self.free.pop_front() {
                return Ok(s);
            }
            self.emit_front()?;
        }
    }

    /// Writes the oldest pending message (waiting for its chunk's copy first).
    fn emit_front(&mut self) -> Result<()> {
        match self.pipe.pop_front() {
            Some(Pending::Chunk { header, slot, len }) => {
                let chunk = self.source.staged(slot, len, Instant::now() + self.timeout)?;
                self.out.extend_from_slice(&header.encode());
                // Larger payloads go out with what is buffered (this header at least), in one
                // system call where the socket takes it all.
                match chunk {
                    Outgoing::Staged(data) if len <= SMALL_PAYLOAD => self.out.extend_from_slice(data),
                    Outgoing::InPlace(span) if len <= SMALL_PAYLOAD => span.with(|d| self.out.extend_from_slice(d)),
                    Outgoing::Staged(data) => write_all(&mut self.sock, &[&self.out, data], &self.shared)?,
                    Outgoing::InPlace(span) => send_in_place(&self.sock, &self.out, span, self.timeout, &self.shared)?,
                }
                if len > SMALL_PAYLOAD {
                    self.out.clear();
                }
                self.free.push_back(slot);
            }
            Some(Pending::Control(h)) => self.out.extend_from_slice(&h.encode()),
            None => {}
        }
        if self.out.len() >= OUT_FLUSH {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        if !self.out.is_empty() {
            write_all(&mut self.sock, &[&self.out], &self.shared)?;
            self.out.clear();
        }
        Ok(())
    }
}

/// The next command: a short spin first (a burst of operations keeps the thread awake), then a
/// blocking wait. `None` once the transport is gone.
fn recv_spinning(cmds: &Receiver<Cmd>) -> Option<Cmd> {
    for i in 0..2000u32 {
        match cmds.try_recv() {
            Ok(c) => return Some(c),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if i % 256 == 255 => std::thread::yield_now(),
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    cmds.recv().ok()
}

pub(super) fn ack_loop(sock: TcpStream, shared: &Shared) -> Result<()> {
    let mut r = BufReader::new(sock);
    loop {
        let mut hb = [0u8; HEADER_LEN];
        match read_full(&mut r, &mut hb, true, Duration::MAX, shared)? {
            ReadEnd::Full => {}
            ReadEnd::Stopped => return Ok(()),
            // This side is closing, or the peer ended its side in order (its Close came on the
            // other connection): its end of this one may go now. Sending to it again fails then.
            ReadEnd::Eof { .. }
                if shared.closing.load(Ordering::Acquire) || shared.peer_closed.load(Ordering::Acquire) =>
            {
                return Ok(());
            }
            ReadEnd::Eof { .. } => return Err(shared.lost("the connection closed (the rank exited or was killed)")),
        }
        let h = Header::decode(&hb)
            .map_err(|f| Error::Protocol(format!("rank {} sent a bad reply over TCP: {f}", shared.peer)))?;
        match h.op {
            Op::Ack => {
                shared.acked.fetch_max(h.offset, Ordering::AcqRel);
            }
            Op::Fail if h.len <= MAX_FAIL_TEXT => {
                let mut text = vec![0u8; h.len as usize];
                let got = read_full(&mut r, &mut text, false, Duration::from_secs(5), shared);
                let text = if matches!(got, Ok(ReadEnd::Full)) {
                    String::from_utf8_lossy(&text).into_owned()
                } else {
                    "(its reason was cut off)".to_string()
                };
                return Err(Error::Protocol(format!(
                    "rank {} refused this rank's port-channel data: {text}",
                    shared.peer
                )));
            }
            op => return Err(Error::Protocol(format!("rank {} sent a bad reply over TCP: {op:?}", shared.peer))),
        }
    }
}
