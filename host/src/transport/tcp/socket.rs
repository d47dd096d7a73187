//! Socket helpers of both threads: gathered and in-place writes, and reads that watch a stop
//! flag and a timeout.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{self, MsgFlags};

use super::memory::HostSpan;
use super::shared::{POLL, Shared};
use crate::error::{Error, Result};

/// Writes all of `parts`, in order, gathering them into as few system calls as the socket allows.
pub(super) fn write_all(sock: &mut TcpStream, parts: &[&[u8]], shared: &Shared) -> Result<()> {
    let mut slices: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
    let mut left = &mut slices[..];
    let mut r = Ok(());
    while left.iter().any(|s| !s.is_empty()) {
        match sock.write_vectored(left) {
            Ok(0) => {
                r = Err(io::Error::new(io::ErrorKind::WriteZero, "the socket took nothing"));
                break;
            }
            Ok(n) => io::IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    r.map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            stuck(sock.write_timeout().ok().flatten().unwrap_or_default(), shared)
        }
        _ => shared.lost(format!("sending over TCP: {e}")),
    })
}

/// A write that made no progress for `after`.
pub(super) fn stuck(after: Duration, shared: &Shared) -> Error {
    Error::Timeout {
        after,
        waiting_for: format!("rank {} to take data sent over TCP (its receiver is stuck)", shared.peer),
    }
}

/// Writes `head`, then the bytes of `span`, from the region itself: each send is non-blocking and
/// made under the region's lock; waiting for the socket to take more happens without the lock
/// (a peer's landing into the same region goes on meanwhile). Fails after `timeout` without
/// progress, as a blocking write does.
pub(super) fn send_in_place(
    sock: &TcpStream,
    head: &[u8],
    span: HostSpan<'_>,
    timeout: Duration,
    shared: &Shared,
) -> Result<()> {
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    let total = head.len() + span.len();
    let (mut sent, mut last) = (0, Instant::now());
    while sent < total {
        let r = span.with(|d| {
            let parts = match head.get(sent..) {
                Some(h) if !h.is_empty() => [io::IoSlice::new(h), io::IoSlice::new(d)],
                _ => [io::IoSlice::new(&d[sent - head.len()..]), io::IoSlice::new(&[])],
            };
            socket::sendmsg::<()>(sock.as_raw_fd(), &parts, &[], flags, None)
        });
        match r {
            Ok(0) => return Err(shared.lost("sending over TCP: the socket took nothing")),
            Ok(n) => {
                sent += n;
                last = Instant::now();
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let waited = last.elapsed();
                if waited >= timeout {
                    return Err(stuck(waited, shared));
                }
                wait_ready(sock, PollFlags::POLLOUT, (timeout - waited).min(POLL))
                    .map_err(|e| shared.lost(format!("waiting to send over TCP: {e}")))?;
            }
            Err(e) => return Err(shared.lost(format!("sending over TCP: {e}"))),
        }
    }
    Ok(())
}

/// Waits up to `wait` for `events` on `sock`; whether they came (an interrupted wait counts as
/// yes: the caller tries again).
pub(super) fn wait_ready(sock: &TcpStream, events: PollFlags, wait: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(sock.as_fd(), events)];
    match poll(&mut fds, PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX)) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Reading with a stop flag and a timeout.

/// How [`read_full`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadEnd {
    /// The buffer is full.
    Full,
    /// The connection closed after `got` bytes.
    Eof { got: usize },
    /// The stop flag was set.
    Stopped,
}

/// Fills `buf`, waking every [`POLL`] to look at `stop`. With `idle_ok`, waiting before the first
/// byte has no limit (an idle channel); otherwise, or once a message has started, `timeout`
/// without progress is an error.
pub(super) fn read_full(
    r: &mut impl Read,
    buf: &mut [u8],
    idle_ok: bool,
    timeout: Duration,
    shared: &Shared,
) -> Result<ReadEnd> {
    read_with(buf.len(), idle_ok, timeout, shared, |got| r.read(&mut buf[got..]))
}

/// Reads a put's payload from `reader` straight into `span` (its destination): first what the
/// reader has buffered, then from the socket, under the region's lock only while the socket has
/// data (see [`recv_into`]). As [`read_full`] otherwise; a stream that ends or stalls part-way
/// leaves the bytes that came in the span.
pub(super) fn read_into(
    reader: &mut BufReader<TcpStream>,
    span: HostSpan<'_>,
    timeout: Duration,
    shared: &Shared,
) -> Result<ReadEnd> {
    read_with(span.len(), false, timeout, shared, |got| {
        let buffered = reader.buffer();
        if buffered.is_empty() {
            return recv_into(reader.get_ref(), span, got);
        }
        let n = buffered.len().min(span.len() - got);
        span.with(|d| d[got..got + n].copy_from_slice(&buffered[..n]));
        reader.consume(n);
        Ok(n)
    })
}

/// Receives what the socket has, up to the rest of `span` from byte `got`, with a non-blocking
/// receive under the region's lock; when nothing has come, waits (without the lock) up to
/// [`POLL`] for data, then tries once more or reports `WouldBlock`. 0: the stream ended.
pub(super) fn recv_into(sock: &TcpStream, span: HostSpan<'_>, got: usize) -> io::Result<usize> {
    let mut waited = false;
    loop {
        match span.with(|d| socket::recv(sock.as_raw_fd(), &mut d[got..], MsgFlags::MSG_DONTWAIT)) {
            Ok(n) => return Ok(n),
            Err(Errno::EAGAIN) if waited => return Err(io::ErrorKind::WouldBlock.into()),
            Err(Errno::EAGAIN) => waited = !wait_ready(sock, PollFlags::POLLIN, POLL)?,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The loop of [`read_full`]: `read_at(got)` reads some of the bytes from `got` on and says how
/// many (0: the stream ended; `WouldBlock` or `TimedOut`: nothing came for a while).
pub(super) fn read_with(
    len: usize,
    idle_ok: bool,
    timeout: Duration,
    shared: &Shared,
    mut read_at: impl FnMut(usize) -> io::Result<usize>,
) -> Result<ReadEnd> {
    let mut got = 0;
    let mut last = Instant::now();
    while got < len {
        match read_at(got) {
            // This side shutting its sockets down reads as an end too: not the peer's doing.
            Ok(0) if shared.stop.load(Ordering::Acquire) => return Ok(ReadEnd::Stopped),
            Ok(0) => return Ok(ReadEnd::Eof { got }),
            Ok(n) => {
                got += n;
                last = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if shared.stop.load(Ordering::Acquire) {
                    return Ok(ReadEnd::Stopped);
                }
                if !(idle_ok && got == 0) && last.elapsed() >= timeout {
                    return Err(Error::Timeout {
                        after: timeout,
                        waiting_for: format!("rank {} to send the rest of a transport message", shared.peer),
                    });
                }
            }
            Err(e) => {
                if shared.stop.load(Ordering::Acquire) {
                    return Ok(ReadEnd::Stopped);
                }
                return Err(shared.lost(format!("reading from TCP: {e}")));
            }
        }
    }
    Ok(ReadEnd::Full)
}
