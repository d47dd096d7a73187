//! The bootstrap wire format: one fixed 40-byte header, then the payload. A leaf of the crate
//! (it names no other module), used by the bootstrap, the TCP transport's handshake (the
//! [`Token`]) and the crate's [`Error`](crate::Error) (which carries a [`FrameFault`]).
//!
//! ```text
//!  offset  size  field
//!       0     4  magic  b"MRSB"
//!       4     1  version (3)
//!       5     1  kind   (Kind as u8)
//!       6     2  reserved, zero
//!       8     8  payload length, u64 little endian
//!      16     8  sequence number, u64 little endian
//!      24    16  session tag: HMAC-SHA256(token, "mscclpp-rs frame tag v2"), first 16 bytes
//!      40     -  payload (length bytes)
//! ```
//!
//! The token itself never travels. The tag lets a reader drop another job's stream on its first
//! header, but it is no credential: it cannot be turned back into the token, and joining a
//! session takes the challenge-response of the rendezvous ([`Token::prove`]), which needs the
//! token and fresh nonces from both sides.
//!
//! The reader checks magic, version, token, kind and length, in that order, before it allocates
//! anything for the payload: a foreign or corrupt stream is rejected on its header, and a length
//! over the limit is refused outright. Even an accepted length is not trusted: the payload buffer
//! grows with the bytes that actually arrive (doubling from 64 KiB), so a truncated frame costs at
//! most about twice what was received, never what the header claimed.

use std::fmt;
use std::io::{self, Read, Write};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Why a frame could not be read, or a token parsed. The frame module's own error (it depends on
/// nothing else of the crate); `crate::error` converts it into `Error::Frame`, `Error::Io` or
/// `Error::InvalidArgument` with the same message.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame was malformed, foreign or over the size limit; rejected before its payload was
    /// allocated.
    #[error("rejected frame: {0}")]
    Rejected(FrameFault),
    /// Reading the stream failed (including read timeouts: `WouldBlock` / `TimedOut`).
    #[error("reading a bootstrap frame: {0}")]
    Io(#[source] io::Error),
    /// A session token that is not 32 hexadecimal digits.
    #[error("session token must be 32 hex digits, got {chars} characters")]
    TokenHex {
        /// Length of the text given.
        chars: usize,
    },
}

type Result<T> = std::result::Result<T, FrameError>;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"MRSB";
/// The wire format version this crate speaks (2: session tag and challenge-response instead of
/// the token in clear; 3: a star and a ring instead of a full mesh, so the collectives, the
/// goodbye and the reports of lost ranks changed).
pub const VERSION: u8 = 3;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 40;
/// Default largest payload accepted (64 MiB).
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;
/// Payload bytes allocated up front before any arrive; the buffer then doubles as data comes.
const FIRST_CHUNK: usize = 64 << 10;

/// The 128-bit session secret. It never travels: frames carry a tag derived from it
/// ([`Token::frame_tag`]) and the rendezvous proves knowledge of it ([`Token::prove`]).
///
/// With the built-in launcher it is random and handed to the ranks in `MSCCLPP_RS_TOKEN`. Under
/// `mpirun` or `srun` it is derived from the job identifier all ranks share (see
/// [`Token::derive`]); that keeps a job from talking to another job that happens to use the same
/// port, but anyone who can read the job's environment can compute it: it guards against
/// accidents, not against attackers.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Enough to tell tokens apart in logs without printing the whole value.
        write!(f, "Token({:02x}{:02x}{:02x}{:02x}..)", self.0[0], self.0[1], self.0[2], self.0[3])
    }
}

impl Token {
    /// A fresh random token from the operating system's generator (through `rand`).
    pub fn random() -> Self {
        use rand::RngExt;
        Self(rand::rng().random())
    }

    /// A token computed from a string all ranks share (e.g. a job identifier). Deterministic and
    /// stable across builds and platforms (FNV-1a with a final mix), not secret.
    pub fn derive(shared: &str) -> Self {
        let hi = stable_hash(b"mscclpp-rs token hi", shared.as_bytes());
        let lo = stable_hash(b"mscclpp-rs token lo", shared.as_bytes());
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&hi.to_le_bytes());
        t[8..].copy_from_slice(&lo.to_le_bytes());
        Self(t)
    }

    /// Parses 32 hexadecimal digits.
    pub fn from_hex(s: &str) -> Result<Self> {
        let s = s.trim();
        let bad = || FrameError::TokenHex { chars: s.len() };
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut t = [0u8; 16];
        for (i, b) in t.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(t))
    }

    /// The token as 32 lowercase hexadecimal digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC pads a key shorter than the hash's 64-byte block with zeros: the same key, given
        // whole (no fallible length check).
        let mut key = [0u8; 64];
        key[..16].copy_from_slice(&self.0);
        let mut m = <Hmac<Sha256> as KeyInit>::new(&key.into());
        for p in parts {
            // Each part is length-prefixed so that different splits never give the same input.
            m.update(&(p.len() as u64).to_le_bytes());
            m.update(p);
        }
        m
    }

    /// The tag every frame header carries instead of the token (see the module docs).
    pub fn frame_tag(&self) -> [u8; 16] {
        let full = self.mac(&[b"mscclpp-rs frame tag v2"]).finalize().into_bytes();
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&full[..16]);
        tag
    }

    /// A proof of knowing the token over `parts` (role, nonces, payload):
    /// HMAC-SHA256(token, parts), each part length-prefixed.
    pub fn prove(&self, parts: &[&[u8]]) -> [u8; PROOF_LEN] {
        self.mac(parts).finalize().into_bytes().into()
    }

    /// A key for another purpose (named by `label`), derived from the token by HMAC: the same in
    /// every process of the session, and no way back to the token.
    pub fn derive_key(&self, label: &str) -> Token {
        let full = self.prove(&[b"mscclpp-rs derived key v1", label.as_bytes()]);
        let mut k = [0u8; 16];
        k.copy_from_slice(&full[..16]);
        Token(k)
    }

    /// Whether `proof` is [`Token::prove`] of `parts`, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], proof: &[u8]) -> bool {
        self.mac(parts).verify_slice(proof).is_ok()
    }
}

/// Bytes of a [`Token::prove`] proof.
pub const PROOF_LEN: usize = 32;

/// A hash that is the same in every process, build and Rust version (unlike `DefaultHasher`):
/// FNV-1a over `domain` then `data`, finished with the SplitMix64 mixer so that nearby inputs
/// spread over all bits.
pub(crate) fn stable_hash(domain: &[u8], data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in domain.iter().chain([0xffu8].iter()).chain(data) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// What a frame is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Rank `r > 0` to rank 0: rank, world size and the address it listens on.
    Hello = 1,
    /// The accepting side of a hello or connect, once the introduction proved the token: its own
    /// proof.
    Welcome = 2,
    /// Rank 0 to every rank once all joined: every rank's listening address.
    Table = 3,
    /// A rank to another when it opens a connection to it after the rendezvous (its ring
    /// neighbour, or a peer it sends to for the first time): its rank.
    Connect = 4,
    /// A rank's contribution to an all-gather (to rank 0), or the gathered contributions (from
    /// rank 0, packed several to a frame).
    AllGather = 5,
    /// A barrier arrival (to rank 0), or its release (from rank 0).
    Barrier = 6,
    /// A point-to-point message.
    Message = 7,
    /// The accepting side of a new connection to the connecting side: a fresh nonce that the
    /// hello or connect must answer with a proof of the token.
    Challenge = 8,
    /// A rank closing its bootstrap on purpose (drop without a panic), with the number of
    /// collectives it completed: its connection ending after this is a departure, not a
    /// death, and aborts nothing.
    Goodbye = 9,
    /// Rank 0 to every other rank: a rank's connection to rank 0 ended without a goodbye (it
    /// died), with what rank 0 saw.
    Lost = 10,
    /// Rank 0 to every other rank: the collective of this sequence number failed, and why
    /// (a timeout, a lost rank or a protocol error); it takes the place of the collective's
    /// result.
    Abort = 11,
    /// The accepting side of a new connection to the connecting side, just before it drops the
    /// connection for something other than a wrong token: why (its handshake wait ran out), so
    /// that the connecting side reports what happened instead of guessing.
    Refused = 12,
}

impl Kind {
    /// The kind with this wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Table,
            4 => Kind::Connect,
            5 => Kind::AllGather,
            6 => Kind::Barrier,
            7 => Kind::Message,
            8 => Kind::Challenge,
            9 => Kind::Goodbye,
            10 => Kind::Lost,
            11 => Kind::Abort,
            12 => Kind::Refused,
            _ => return None,
        })
    }

    /// The operation's name as used in messages (`all_gather`, `barrier`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Welcome => "welcome",
            Kind::Table => "address table",
            Kind::Connect => "connect",
            Kind::AllGather => "all_gather",
            Kind::Barrier => "barrier",
            Kind::Message => "send",
            Kind::Challenge => "challenge",
            Kind::Goodbye => "goodbye",
            Kind::Lost => "lost-rank report",
            Kind::Abort => "collective abort",
            Kind::Refused => "refusal",
        }
    }
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What it is for.
    pub kind: Kind,
    /// Sequence number: the collective's number for all-gathers and barriers, the message's
    /// number for point-to-point messages, 0 during the rendezvous.
    pub seq: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Why a frame was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameFault {
    /// The stream does not start with [`MAGIC`]: not one of ours.
    BadMagic([u8; 4]),
    /// Another version of the wire format.
    BadVersion(u8),
    /// The frame carries another session's tag (another job, or a stray connection).
    WrongToken,
    /// Unknown message kind.
    UnknownKind(u8),
    /// The header claims more payload than the limit; nothing was allocated for it.
    TooLong {
        /// Claimed payload length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The stream ended inside a frame.
    Truncated {
        /// `"header"` or `"payload"`.
        part: &'static str,
        /// Bytes of that part received.
        got: usize,
        /// Bytes of that part expected.
        want: u64,
    },
}

impl fmt::Display for FrameFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameFault::BadMagic(m) => write!(f, "bad magic {m:02x?} (not a mscclpp-rs bootstrap stream)"),
            FrameFault::BadVersion(v) => write!(f, "wire format version {v}, this build speaks {VERSION}"),
            FrameFault::WrongToken => write!(f, "wrong session token (a process of another job?)"),
            FrameFault::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            FrameFault::TooLong { len, max } => write!(f, "payload of {len} bytes is over the {max}-byte limit"),
            FrameFault::Truncated { part, got, want } => {
                write!(f, "stream ended inside a frame {part}: {got} of {want} bytes")
            }
        }
    }
}

/// The header and payload of a frame as one buffer (one `write` for small frames).
pub fn encode(token: &Token, kind: Kind, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
    buf.extend_from_slice(&header(token, kind, seq, payload.len()));
    buf.extend_from_slice(payload);
    buf
}

fn header(token: &Token, kind: Kind, seq: u64, len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = VERSION;
    h[5] = kind as u8;
    h[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    h[16..24].copy_from_slice(&seq.to_le_bytes());
    h[24..40].copy_from_slice(&token.frame_tag());
    h
}

/// Writes one frame. Small frames go out in one write; large ones as header then payload (no
/// copy of the payload).
pub fn write_frame<W: Write + ?Sized>(
    w: &mut W,
    token: &Token,
    kind: Kind,
    seq: u64,
    payload: &[u8],
) -> io::Result<()> {
    if payload.len() <= FIRST_CHUNK {
        w.write_all(&encode(token, kind, seq, payload))?;
    } else {
        w.write_all(&header(token, kind, seq, payload.len()))?;
        w.write_all(payload)?;
    }
    w.flush()
}

/// Reads into `buf` until it is full or the stream ends; returns the bytes read.
fn read_full<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one frame. `Ok(None)` means the stream ended cleanly before a new frame began.
///
/// Rejections ([`FrameError::Rejected`]) happen on the header alone, before any payload
/// allocation; an accepted length is allocated only as the bytes arrive. I/O errors, including
/// read timeouts (`WouldBlock` / `TimedOut`), come back as [`FrameError::Io`].
pub fn read_frame<R: Read + ?Sized>(r: &mut R, token: &Token, max: usize) -> Result<Option<Frame>> {
    let mut h = [0u8; HEADER_LEN];
    // The magic first: a foreign stream is rejected at once, without waiting for a whole header
    // that may never come.
    let mut got = read_full(r, &mut h[..4]).map_err(FrameError::Io)?;
    if got == 0 {
        return Ok(None);
    }
    if got == 4 {
        if h[0..4] != MAGIC {
            return Err(FrameError::Rejected(FrameFault::BadMagic([h[0], h[1], h[2], h[3]])));
        }
        got += read_full(r, &mut h[4..]).map_err(FrameError::Io)?;
    }
    if got < HEADER_LEN {
        return Err(FrameError::Rejected(FrameFault::Truncated { part: "header", got, want: HEADER_LEN as u64 }));
    }
    if h[4] != VERSION {
        return Err(FrameError::Rejected(FrameFault::BadVersion(h[4])));
    }
    if h[24..40] != token.frame_tag() {
        return Err(FrameError::Rejected(FrameFault::WrongToken));
    }
    let kind = Kind::from_u8(h[5]).ok_or(FrameError::Rejected(FrameFault::UnknownKind(h[5])))?;
    let mut word = [0u8; 8];
    word.copy_from_slice(&h[8..16]);
    let len = u64::from_le_bytes(word);
    word.copy_from_slice(&h[16..24]);
    let seq = u64::from_le_bytes(word);
    if len > max as u64 {
        return Err(FrameError::Rejected(FrameFault::TooLong { len, max }));
    }
    // `len <= max`, which is a usize.
    let len = len as usize;
    let mut payload = Vec::new();
    while payload.len() < len {
        let start = payload.len();
        let chunk = (len - start).min(start.max(FIRST_CHUNK));
        payload.reserve_exact(chunk);
        payload.resize(start + chunk, 0);
        let n = read_full(r, &mut payload[start..]).map_err(FrameError::Io)?;
        if n < chunk {
            return Err(FrameError::Rejected(FrameFault::Truncated {
                part: "payload",
                got: start + n,
                want: len as u64,
            }));
        }
    }
    Ok(Some(Frame { kind, seq, payload }))
}

// ---------------------------------------------------------------------------------------------
// Rendezvous payloads.

/// Hello (rank to rank 0) and Connect (rank to a peer after the rendezvous) payload.
pub(crate) struct Intro {
    /// The sender's rank.
    pub(crate) rank: usize,
    /// The sender's world size.
    pub(crate) world: usize,
    /// Where the sender listens for connections from other ranks (empty in a Connect).
    pub(crate) listen: String,
}

impl Intro {
    /// The payload bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.listen.len());
        // Ranks and world sizes are capped far below u32::MAX (`crate::bootstrap::env::MAX_WORLD_SIZE`); an
        // impossible value is sent as u32::MAX, which every receiver rejects.
        v.extend_from_slice(&u32::try_from(self.rank).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(&u32::try_from(self.world).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(self.listen.as_bytes());
        v
    }

    /// Reads a payload; `None` when it is malformed.
    pub(crate) fn decode(p: &[u8]) -> Option<Self> {
        let rank = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?) as usize;
        let world = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?) as usize;
        let listen = std::str::from_utf8(p.get(8..)?).ok()?.to_string();
        Some(Self { rank, world, listen })
    }
}

/// The address table rank 0 sends every rank: each address as a u16 length and its bytes, in rank
/// order.
pub(crate) fn encode_table(addrs: &[String]) -> Vec<u8> {
    let mut v = Vec::new();
    for a in addrs {
        v.extend_from_slice(&(a.len() as u16).to_le_bytes());
        v.extend_from_slice(a.as_bytes());
    }
    v
}

/// Reads an address table of exactly `n` addresses; `None` when it is malformed.
pub(crate) fn decode_table(mut p: &[u8], n: usize) -> Option<Vec<String>> {
    let mut out = Vec::with_capacity(n.min(4096));
    while !p.is_empty() {
        let len = u16::from_le_bytes(p.get(0..2)?.try_into().ok()?) as usize;
        out.push(std::str::from_utf8(p.get(2..2 + len)?).ok()?.to_string());
        p = &p[2 + len..];
    }
    (out.len() == n).then_some(out)
}

// ---------------------------------------------------------------------------------------------
// Payloads after the rendezvous.

/// Bytes a frame of gathered contributions may carry beyond the frame limit: its own header and
/// one length (so that a single contribution of exactly the limit still fits).
pub(crate) const PACK_OVERHEAD: usize = 16;

/// The contributions of an all-gather, in rank order, as the payloads of as few frames as the
/// limit `max` allows: each frame is `[u32 first rank][u32 count]` then, per contribution, a u64
/// length and the bytes. A frame holds at least one contribution and, beyond its first, no more
/// than `max` bytes (so at most `max + PACK_OVERHEAD` for a contribution of exactly `max`).
pub(crate) fn pack_parts(parts: &[Vec<u8>], max: usize) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let first = i;
        let mut body = Vec::new();
        while i < parts.len() && (i == first || 8 + body.len() + 8 + parts[i].len() <= max) {
            body.extend_from_slice(&(parts[i].len() as u64).to_le_bytes());
            body.extend_from_slice(&parts[i]);
            i += 1;
        }
        let mut f = Vec::with_capacity(8 + body.len());
        // World sizes are capped far below u32::MAX (`crate::bootstrap::env::MAX_WORLD_SIZE`).
        f.extend_from_slice(&(first as u32).to_le_bytes());
        f.extend_from_slice(&((i - first) as u32).to_le_bytes());
        f.extend_from_slice(&body);
        frames.push(f);
    }
    frames
}

/// One frame of [`pack_parts`], which must start at rank `first` and hold at least one and at
/// most `left` contributions; `None` when it is malformed.
pub(crate) fn unpack_parts(p: &[u8], first: usize, left: usize) -> Option<Vec<Vec<u8>>> {
    let at = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?) as usize;
    let count = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?) as usize;
    if at != first || count == 0 || count > left {
        return None;
    }
    let mut rest = &p[8..];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let len = usize::try_from(u64::from_le_bytes(rest.get(0..8)?.try_into().ok()?)).ok()?;
        out.push(rest.get(8..8usize.checked_add(len)?)?.to_vec());
        rest = &rest[8 + len..];
    }
    rest.is_empty().then_some(out)
}

/// A goodbye's payload: how many collectives the rank completed (the rendezvous barrier is the
/// first).
pub(crate) fn encode_goodbye(completed: u64) -> Vec<u8> {
    completed.to_le_bytes().to_vec()
}

/// Reads a goodbye; `None` when it is malformed.
pub(crate) fn decode_goodbye(p: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(p.try_into().ok()?))
}

/// A lost-rank report: the rank (u32) and what rank 0 saw.
pub(crate) fn encode_lost(rank: usize, why: &str) -> Vec<u8> {
    let mut v = u32::try_from(rank).unwrap_or(u32::MAX).to_le_bytes().to_vec();
    v.extend_from_slice(why.as_bytes());
    v
}

/// Reads a lost-rank report; `None` when it is malformed.
pub(crate) fn decode_lost(p: &[u8]) -> Option<(usize, String)> {
    let rank = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?) as usize;
    Some((rank, String::from_utf8_lossy(&p[4..]).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T: Token = Token([7; 16]);

    fn fault(r: Result<Option<Frame>>) -> FrameFault {
        match r {
            Err(FrameError::Rejected(f)) => f,
            other => panic!("expected a frame fault, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_and_clean_end() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &T, Kind::AllGather, 3, b"hello").unwrap();
        write_frame(&mut wire, &T, Kind::Barrier, 4, b"").unwrap();
        let mut r = &wire[..];
        assert_eq!(
            read_frame(&mut r, &T, 16).unwrap(),
            Some(Frame { kind: Kind::AllGather, seq: 3, payload: b"hello".to_vec() })
        );
        assert_eq!(read_frame(&mut r, &T, 16).unwrap(), Some(Frame { kind: Kind::Barrier, seq: 4, payload: vec![] }));
        assert_eq!(read_frame(&mut r, &T, 16).unwrap(), None);
    }

    #[test]
    fn wrong_token_is_rejected() {
        let wire = encode(&Token([8; 16]), Kind::Message, 0, b"x");
        assert_eq!(fault(read_frame(&mut &wire[..], &T, 16)), FrameFault::WrongToken);
    }

    #[test]
    fn over_limit_is_rejected_on_the_header() {
        // The header claims 2^63 bytes and no payload follows: rejected without allocating.
        let mut wire = encode(&T, Kind::Message, 0, b"");
        wire[8..16].copy_from_slice(&(1u64 << 63).to_le_bytes());
        assert_eq!(fault(read_frame(&mut &wire[..], &T, 1 << 20)), FrameFault::TooLong { len: 1 << 63, max: 1 << 20 });
        let wire = encode(&T, Kind::Message, 0, &[0; 17]);
        assert_eq!(fault(read_frame(&mut &wire[..], &T, 16)), FrameFault::TooLong { len: 17, max: 16 });
    }

    #[test]
    fn truncated_header_and_payload() {
        let wire = encode(&T, Kind::Message, 9, b"0123456789");
        assert_eq!(
            fault(read_frame(&mut &wire[..10], &T, 64)),
            FrameFault::Truncated { part: "header", got: 10, want: HEADER_LEN as u64 }
        );
        assert_eq!(
            fault(read_frame(&mut &wire[..HEADER_LEN + 4], &T, 64)),
            FrameFault::Truncated { part: "payload", got: 4, want: 10 }
        );
        // A claimed length within the limit but far beyond what arrives.
        let mut wire = encode(&T, Kind::Message, 0, b"abc");
        wire[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(
            fault(read_frame(&mut &wire[..], &T, usize::MAX)),
            FrameFault::Truncated { part: "payload", got: 3, want: 1 << 40 }
        );
    }

    #[test]
    fn foreign_bytes_magic_version_kind() {
        assert!(matches!(fault(read_frame(&mut &b"GET / HTTP/1.1\r\n\r\n"[..], &T, 64)), FrameFault::BadMagic(_)));
        let mut wire = encode(&T, Kind::Message, 0, b"");
        wire[4] = 9;
        assert_eq!(fault(read_frame(&mut &wire[..], &T, 64)), FrameFault::BadVersion(9));
        let mut wire = encode(&T, Kind::Message, 0, b"");
        wire[5] = 200;
        assert_eq!(fault(read_frame(&mut &wire[..], &T, 64)), FrameFault::UnknownKind(200));
    }

    #[test]
    fn tokens() {
        let t = Token::random();
        assert_eq!(Token::from_hex(&t.to_hex()).unwrap(), t);
        assert_ne!(Token::random(), t);
        assert!(Token::from_hex("abc").is_err());
        assert!(Token::from_hex(&"zz".repeat(16)).is_err());
        assert!(Token::from_hex(&"é".repeat(16)).is_err());
        assert_eq!(Token::derive("job 1"), Token::derive("job 1"));
        assert_eq!(t.derive_key("a"), t.derive_key("a"));
        assert_ne!(t.derive_key("a"), t.derive_key("b"));
        assert_ne!(t.derive_key("a"), t);
        assert_ne!(Token::derive("job 1"), Token::derive("job 2"));
        // Pinned: ranks built from different commits must still derive the same token and port.
        assert_eq!(Token::derive("PMIX_NAMESPACE=job").to_hex(), "dee87ffb2f131e44f1ece6788c3cd772");
        assert_eq!(crate::bootstrap::env::derived_port("PMIX_NAMESPACE=job"), 27030);
    }

    /// A stream of `frames` cut at `at` yields exactly the frames that end at or before the cut;
    /// then a cut on a frame boundary is a clean end (`Ok(None)`), and a cut inside a frame is
    /// `Truncated`, naming the part (header or payload) and the bytes of it that arrived.
    fn check_cut(frames: &[(u8, u64, Vec<u8>)], wire: &[u8], at: usize) {
        let mut r = &wire[..at];
        let mut start = 0;
        let mut whole = 0;
        for (_, _, p) in frames {
            if start + HEADER_LEN + p.len() > at {
                break;
            }
            let f = read_frame(&mut r, &T, 300).unwrap();
            assert_eq!(f.map(|f| f.payload), Some(p.clone()), "cut at {at}");
            start += HEADER_LEN + p.len();
            whole += 1;
        }
        let rest = at - start;
        let got = read_frame(&mut r, &T, 300);
        if rest == 0 {
            assert!(matches!(got, Ok(None)), "cut at {at}, on a boundary: {got:?}");
        } else {
            let len = frames[whole].2.len();
            let want = if rest < HEADER_LEN {
                FrameFault::Truncated { part: "header", got: rest, want: HEADER_LEN as u64 }
            } else {
                FrameFault::Truncated { part: "payload", got: rest - HEADER_LEN, want: len as u64 }
            };
            assert_eq!(fault(got), want, "cut at {at}");
        }
    }

    /// Every cut of a fixed stream (the property below samples one cut per case).
    #[test]
    fn every_cut_of_a_stream() {
        let frames = vec![(1u8, 5u64, b"abc".to_vec()), (2, 6, vec![]), (3, 7, vec![9; 70])];
        let mut wire = Vec::new();
        for (k, seq, p) in &frames {
            write_frame(&mut wire, &T, Kind::from_u8(*k).unwrap(), *seq, p).unwrap();
        }
        for at in 0..=wire.len() {
            check_cut(&frames, &wire, at);
        }
    }

    #[test]
    fn gathered_contributions_pack_within_the_limit() {
        let parts: Vec<Vec<u8>> = vec![vec![1; 10], vec![], vec![2; 100], vec![3; 100], vec![4; 5]];
        for max in [100, 120, 130, 1000] {
            let frames = pack_parts(&parts, max);
            let mut back = Vec::new();
            for f in &frames {
                assert!(f.len() <= max + PACK_OVERHEAD, "max {max}: a frame of {} bytes", f.len());
                back.extend(unpack_parts(f, back.len(), parts.len() - back.len()).unwrap());
            }
            assert_eq!(back, parts, "max {max}");
        }
        // A single contribution of exactly the limit still fits in one frame.
        let frames = pack_parts(&[vec![9; 64]], 64);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].len(), 64 + PACK_OVERHEAD);
        // Malformed: another first rank, too many, a count of zero, a length past the end, junk after.
        let f = &pack_parts(&parts, 1000)[0];
        assert!(unpack_parts(f, 1, 5).is_none());
        assert!(unpack_parts(f, 0, 4).is_none());
        let mut zero = f.clone();
        zero[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert!(unpack_parts(&zero, 0, 5).is_none());
        assert!(unpack_parts(&f[..f.len() - 1], 0, 5).is_none());
        let mut long = f.clone();
        long.push(0);
        assert!(unpack_parts(&long, 0, 5).is_none());
        let mut huge = f.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(unpack_parts(&huge, 0, 5).is_none());
        assert!(unpack_parts(&[1, 2, 3], 0, 5).is_none());
    }

    #[test]
    fn reports_and_goodbyes_round_trip() {
        assert_eq!(decode_lost(&encode_lost(5, "gone")), Some((5, "gone".to_string())));
        assert!(decode_lost(&[1]).is_none());
        assert_eq!(decode_goodbye(&encode_goodbye(42)), Some(42));
        assert!(decode_goodbye(&[1, 2]).is_none());
    }

    proptest! {
        #[test]
        fn codec_round_trip(
            frames in proptest::collection::vec(
                (1u8..=12, any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut wire = Vec::new();
            for (k, seq, p) in &frames {
                write_frame(&mut wire, &T, Kind::from_u8(*k).unwrap(), *seq, p).unwrap();
            }
            let mut r = &wire[..];
            for (k, seq, p) in &frames {
                let f = read_frame(&mut r, &T, 300).unwrap().unwrap();
                prop_assert_eq!(f.kind as u8, *k);
                prop_assert_eq!(f.seq, *seq);
                prop_assert_eq!(&f.payload, p);
            }
            prop_assert_eq!(read_frame(&mut r, &T, 300).unwrap(), None);
            if !wire.is_empty() {
                check_cut(&frames, &wire, cut.index(wire.len()));
            }
        }
    }

    /// Exists for planted bugs the other tests let through: `Kind::name` giving one string for
    /// every kind (`""`, `"xyzzy"`) and `FrameFault`'s `Display` writing nothing. Each kind has
    /// its own non-empty name, and each fault's message names what went wrong with its numbers.
    #[test]
    fn kinds_and_faults_describe_themselves() {
        let names: std::collections::BTreeSet<&str> = (1..=12).map(|v| Kind::from_u8(v).unwrap().name()).collect();
        assert_eq!(names.len(), 12, "two kinds share a name: {names:?}");
        assert!(names.iter().all(|n| n.len() > 2 && n.is_ascii()), "{names:?}");
        assert_eq!(Kind::Barrier.name(), "barrier");
        assert_eq!(Kind::AllGather.name(), "all_gather");
        use rand::RngExt;
        let mut rng = rand::rng();
        let (len, max, got): (u64, usize, usize) =
            (rng.random_range(1000..1 << 40), rng.random_range(1..1000), rng.random_range(1..39));
        let said = |f: FrameFault| f.to_string();
        assert!(said(FrameFault::BadMagic(*b"GET ")).contains("bad magic"));
        assert!(said(FrameFault::BadVersion(9)).contains(&format!("version 9, this build speaks {VERSION}")));
        assert!(said(FrameFault::WrongToken).contains("wrong session token"));
        assert!(said(FrameFault::UnknownKind(200)).contains("kind 200"));
        assert!(said(FrameFault::TooLong { len, max }).contains(&format!("{len} bytes is over the {max}-byte limit")));
        let t = said(FrameFault::Truncated { part: "header", got, want: HEADER_LEN as u64 });
        assert!(t.contains(&format!("header: {got} of {HEADER_LEN} bytes")), "{t}");
        let e = FrameError::Rejected(FrameFault::WrongToken).to_string();
        assert!(e.starts_with("rejected frame: wrong session token"), "{e}");
    }

    /// Exists for a planted bug the other tests let through: `Token`'s `Debug` writing nothing.
    /// It shows the first four bytes, enough to tell tokens apart in a log, and not the rest.
    #[test]
    fn token_debug_shows_only_a_prefix() {
        let t = Token::random();
        let d = format!("{t:?}");
        assert_eq!(d, format!("Token({}..)", &t.to_hex()[..8]));
        assert!(!d.contains(&t.to_hex()[8..]), "{d} shows the whole token");
    }

    /// A `Write` that keeps the bytes and records the length of every `write` call.
    struct Recorder {
        wire: Vec<u8>,
        writes: Vec<usize>,
    }

    impl Write for Recorder {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.writes.push(b.len());
            self.wire.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Exists for a planted bug the other tests let through: `write_frame` choosing the wrong
    /// path for a frame's size (`<=` turned into `>`), which keeps the bytes but not the writes.
    /// A frame of up to 64 KiB of payload goes out in one write of the whole frame; a larger one as
    /// the header alone, then the payload (not copied into a new buffer).
    #[test]
    fn small_frames_are_one_write_and_large_ones_header_then_payload() {
        use rand::RngExt;
        let mut rng = rand::rng();
        for len in [0, rng.random_range(1..FIRST_CHUNK), FIRST_CHUNK] {
            let payload: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let mut w = Recorder { wire: Vec::new(), writes: Vec::new() };
            write_frame(&mut w, &T, Kind::Message, 1, &payload).unwrap();
            assert_eq!(w.writes, [HEADER_LEN + len], "payload of {len} bytes");
            assert_eq!(w.wire, encode(&T, Kind::Message, 1, &payload));
        }
        for len in [FIRST_CHUNK + 1, rng.random_range(FIRST_CHUNK + 2..4 * FIRST_CHUNK)] {
            let payload: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let mut w = Recorder { wire: Vec::new(), writes: Vec::new() };
            write_frame(&mut w, &T, Kind::Message, 2, &payload).unwrap();
            assert_eq!(w.writes, [HEADER_LEN, len], "payload of {len} bytes");
            assert_eq!(w.wire, encode(&T, Kind::Message, 2, &payload));
        }
    }

    /// A `Read` over `data` that hands out at most a few bytes a call, sometimes fails a call
    /// with `Interrupted` first, and fails the test if asked for zero bytes.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        interrupted: usize,
        rng: rand::rngs::ThreadRng,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            use rand::RngExt;
            assert!(!buf.is_empty(), "read_frame asked the stream for zero bytes");
            if self.rng.random_bool(0.3) {
                self.interrupted += 1;
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.data.len() - self.at).min(self.rng.random_range(1..=7));
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Exists for planted bugs in `read_full` the other tests let through (their streams hand
    /// out everything at once): reading on when the buffer is full (`<` turned into `<=`, a read
    /// of zero bytes), and giving up on `Interrupted` (its guard or comparison inverted). Frames
    /// that arrive a few bytes at a time, between interrupted calls, read back whole; a read
    /// error of another kind is returned, not retried.
    #[test]
    fn frames_arriving_in_pieces_between_interruptions_read_back() {
        use rand::RngExt;
        let mut rng = rand::rng();
        let frames: Vec<(u64, Vec<u8>)> =
            (0..6).map(|_| (rng.random(), (0..rng.random_range(0..200)).map(|_| rng.random()).collect())).collect();
        let mut wire = Vec::new();
        for (seq, p) in &frames {
            write_frame(&mut wire, &T, Kind::Message, *seq, p).unwrap();
        }
        let mut r = Trickle { data: wire, at: 0, interrupted: 0, rng: rand::rng() };
        for (seq, p) in &frames {
            let f = read_frame(&mut r, &T, 200).unwrap().unwrap();
            assert_eq!((f.seq, &f.payload), (*seq, p));
        }
        assert_eq!(read_frame(&mut r, &T, 200).unwrap(), None);
        assert!(r.interrupted > 0, "no call was interrupted");

        /// Fails its first call with `kind`, then hands out `data`.
        struct FailOnce(Option<io::ErrorKind>, Vec<u8>);
        impl Read for FailOnce {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if let Some(k) = self.0.take() {
                    return Err(k.into());
                }
                let n = buf.len().min(self.1.len());
                buf[..n].copy_from_slice(&self.1[..n]);
                self.1.drain(..n);
                Ok(n)
            }
        }
        let wire = encode(&T, Kind::Message, 3, b"abc");
        for k in [io::ErrorKind::TimedOut, io::ErrorKind::WouldBlock, io::ErrorKind::ConnectionReset] {
            match read_frame(&mut FailOnce(Some(k), wire.clone()), &T, 16) {
                Err(FrameError::Io(e)) => assert_eq!(e.kind(), k),
                other => panic!("{k:?} was not returned: {other:?}"),
            }
        }
        let f = read_frame(&mut FailOnce(Some(io::ErrorKind::Interrupted), wire), &T, 16).unwrap();
        assert_eq!(f.map(|f| f.payload), Some(b"abc".to_vec()));
    }

    /// Exists for planted bugs the other tests let through: the limit check refusing a payload of
    /// exactly the limit (`>` turned into `>=`), and the payload's later chunks sized from the
    /// wrong remainder (`len - start` turned into `len + start`), which only payloads over the
    /// first 64 KiB chunk reach. Frames of random sizes around and over the first chunk, back to
    /// back in one stream, read back exactly; a payload of exactly the limit is accepted and one
    /// byte more is refused.
    #[test]
    fn large_payloads_and_the_exact_limit_read_back() {
        use rand::RngExt;
        let mut rng = rand::rng();
        let sizes = [
            FIRST_CHUNK,
            FIRST_CHUNK + 1,
            rng.random_range(FIRST_CHUNK + 2..2 * FIRST_CHUNK),
            rng.random_range(2 * FIRST_CHUNK..5 * FIRST_CHUNK),
        ];
        let max = sizes[3];
        let payloads: Vec<Vec<u8>> = sizes.iter().map(|&n| (0..n).map(|_| rng.random()).collect()).collect();
        let mut wire = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            write_frame(&mut wire, &T, Kind::AllGather, i as u64, p).unwrap();
        }
        let mut r = &wire[..];
        for (i, p) in payloads.iter().enumerate() {
            let f = read_frame(&mut r, &T, max).unwrap().unwrap();
            assert_eq!((f.seq, f.payload.len()), (i as u64, p.len()));
            assert!(f.payload == *p, "payload {i} of {} bytes differs", p.len());
        }
        assert_eq!(read_frame(&mut r, &T, max).unwrap(), None);
        let n = rng.random_range(1..1000);
        let exact = encode(&T, Kind::Message, 0, &vec![5; n]);
        assert_eq!(read_frame(&mut &exact[..], &T, n).unwrap().unwrap().payload, vec![5; n]);
        assert_eq!(fault(read_frame(&mut &exact[..], &T, n - 1)), FrameFault::TooLong { len: n as u64, max: n - 1 });
    }

    /// Exists for planted bugs in `pack_parts`' size test the other tests let through (`8 +
    /// body.len() + 8 + part` with a `+` turned into `-` or `*`): a frame that could take the
    /// next contribution and stay within the limit must take it. Over random contributions and
    /// limits: every frame of more than one contribution is within the limit, every frame but the
    /// last is full (the next contribution would take it over), and the frames unpack to the
    /// contributions.
    #[test]
    fn gathered_contributions_fill_each_frame() {
        use rand::RngExt;
        let mut rng = rand::rng();
        for _ in 0..200 {
            let parts: Vec<Vec<u8>> =
                (0..rng.random_range(1..12)).map(|_| vec![rng.random(); rng.random_range(0..90)]).collect();
            let max = rng.random_range(16..400);
            let frames = pack_parts(&parts, max);
            let mut back = Vec::new();
            for (i, f) in frames.iter().enumerate() {
                let got = unpack_parts(f, back.len(), parts.len() - back.len()).unwrap();
                assert!(got.len() == 1 || f.len() <= max, "max {max}: {} bytes in {} parts", f.len(), got.len());
                back.extend(got);
                if i + 1 < frames.len() {
                    let next = parts[back.len()].len();
                    assert!(
                        f.len() + 8 + next > max,
                        "max {max}: frame {i} of {} bytes could take {next} more",
                        f.len()
                    );
                }
            }
            assert_eq!(back, parts, "max {max}");
        }
    }

    /// Exists for a planted bug the other tests let through: `Token::verify` comparing only the
    /// proof's first byte (a forged proof that is random or all zeros differs there). A proof with
    /// any one byte changed (the last included), cut short, empty or with a byte appended is
    /// refused; the exact proof over the same parts is accepted, and over other parts refused.
    #[test]
    fn verify_refuses_a_proof_that_differs_in_any_byte_or_length() {
        use rand::RngExt;
        let mut rng = rand::rng();
        let token = Token::random();
        let (a, b): ([u8; 24], [u8; 9]) = (rng.random(), rng.random());
        let parts: [&[u8]; 2] = [&a, &b];
        let proof = token.prove(&parts);
        assert!(token.verify(&parts, &proof), "the exact proof is refused");
        assert!(!Token::random().verify(&parts, &proof), "another token accepts the proof");
        assert!(!token.verify(&[&a[..], &b[..8]], &proof), "the proof accepted over other parts");
        for i in 0..PROOF_LEN {
            let mut forged = proof;
            forged[i] ^= rng.random_range(1..=255u8);
            assert!(!token.verify(&parts, &forged), "a proof differing only in byte {i} is accepted");
        }
        for len in 0..PROOF_LEN {
            assert!(!token.verify(&parts, &proof[..len]), "a proof cut to {len} bytes is accepted");
        }
        let mut longer = proof.to_vec();
        longer.push(rng.random());
        assert!(!token.verify(&parts, &longer), "a proof with a byte appended is accepted");
    }
}
