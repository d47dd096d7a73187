//! The TCP transport's wire format: fixed 40-byte message headers, and the three messages of the
//! handshake that opens a connection.
//!
//! ```text
//!  message header (both directions)
//!  offset  size  field
//!       0     4  magic  b"MRST"
//!       4     1  version (1)
//!       5     1  op (Op as u8)
//!       6     2  reserved, zero
//!       8     4  index: the region (Put, AtomicAdd) or semaphore (Signal); zero otherwise
//!      12     4  reserved, zero
//!      16     8  seq: the message's number on its connection and direction, from 0
//!      24     8  offset: byte offset in the region (Put, AtomicAdd), flush id (Flush, Ack)
//!      32     8  len: payload bytes (Put, Fail), the value to add (AtomicAdd); zero otherwise
//!      40     -  payload: `len` bytes for Put and Fail, none for the others
//! ```
//!
//! Every integer is little endian. A header is accepted only if magic, version, op and the
//! reserved fields are right and its fields fit its op; the receiver then checks the sequence
//! number and the target against what it registered before it reads a payload.

use std::fmt;

use crate::auth::{self, Proof};
use crate::frame::{PROOF_LEN, Token};

/// The first four bytes of every message and handshake record.
pub const MAGIC: [u8; 4] = *b"MRST";
/// The version this crate speaks.
pub const VERSION: u8 = 1;
/// Bytes in a message header.
pub const HEADER_LEN: usize = 40;
/// Longest text a [`Op::Fail`] message may carry.
pub const MAX_FAIL_TEXT: u64 = 4096;
/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 16;

/// What a message asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Sender to receiver: `len` bytes follow; write them at `offset` of region `index`.
    Put = 1,
    /// Sender to receiver: increment semaphore `index`, after everything before it has landed.
    Signal = 2,
    /// Sender to receiver: add `len` (the value) to the u64 at `offset` of region `index`.
    AtomicAdd = 3,
    /// Sender to receiver: acknowledge flush `offset` once everything before it has landed.
    Flush = 4,
    /// Sender to receiver: nothing more follows; the channel ends in order.
    Close = 5,
    /// Receiver to sender: flush `offset` has landed.
    Ack = 16,
    /// Receiver to sender: `len` bytes of UTF-8 follow, saying why the receiver ended the channel.
    Fail = 17,
}

impl Op {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Op::Put,
            2 => Op::Signal,
            3 => Op::AtomicAdd,
            4 => Op::Flush,
            5 => Op::Close,
            16 => Op::Ack,
            17 => Op::Fail,
            _ => return None,
        })
    }

    /// Whether the op travels from the sender to the receiver (else it is a reply).
    pub fn is_request(self) -> bool {
        (self as u8) < 16
    }
}

/// A decoded message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The operation.
    pub op: Op,
    /// Region or semaphore.
    pub index: u32,
    /// Message number.
    pub seq: u64,
    /// Offset or flush id.
    pub offset: u64,
    /// Payload length or value.
    pub len: u64,
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireFault {
    /// Not this protocol at all.
    BadMagic([u8; 4]),
    /// Another version of it.
    BadVersion(u8),
    /// An op this version does not know.
    UnknownOp(u8),
    /// A reserved field, or a field the op does not use, was not zero.
    StrayField(&'static str),
}

impl fmt::Display for WireFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireFault::BadMagic(m) => {
                write!(f, "bad magic {m:02x?} (not a transport message, or the stream lost its framing)")
            }
            WireFault::BadVersion(v) => write!(f, "transport protocol version {v}, this side speaks {VERSION}"),
            WireFault::UnknownOp(o) => write!(f, "unknown op {o}"),
            WireFault::StrayField(what) => write!(f, "non-zero {what}"),
        }
    }
}

impl Header {
    /// A header for `op` with the given fields.
    pub fn new(op: Op, index: u32, seq: u64, offset: u64, len: u64) -> Self {
        Self { op, index, seq, offset, len }
    }

    /// The 40 bytes on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.op as u8;
        b[8..12].copy_from_slice(&self.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses and checks 40 bytes: magic, version, op, reserved fields, and the fields each op
    /// leaves unused (they must be zero, so that a corrupt stream is caught early).
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, WireFault> {
        let magic: [u8; 4] = b[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(WireFault::BadMagic(magic));
        }
        if b[4] != VERSION {
            return Err(WireFault::BadVersion(b[4]));
        }
        let op = Op::from_u8(b[5]).ok_or(WireFault::UnknownOp(b[5]))?;
        if b[6..8] != [0, 0] || b[12..16] != [0; 4] {
            return Err(WireFault::StrayField("reserved field"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let h = Header {
            op,
            index: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            seq: u64_at(16),
            offset: u64_at(24),
            len: u64_at(32),
        };
        let (index_used, offset_used, len_used) = match op {
            Op::Put | Op::AtomicAdd => (true, true, true),
            Op::Signal => (true, false, false),
            Op::Flush | Op::Ack => (false, true, false),
            Op::Close => (false, false, false),
            Op::Fail => (false, false, true),
        };
        if !index_used && h.index != 0 {
            return Err(WireFault::StrayField("index"));
        }
        if !offset_used && h.offset != 0 {
            return Err(WireFault::StrayField("offset"));
        }
        if !len_used && h.len != 0 {
            return Err(WireFault::StrayField("length"));
        }
        Ok(h)
    }
}

/// Handshake record kinds (byte 5 of a record).
const CHALLENGE: u8 = 0x20;
const HELLO: u8 = 0x21;
const WELCOME: u8 = 0x22;

/// Bytes of the accepting side's challenge.
pub const CHALLENGE_LEN: usize = 8 + NONCE_LEN;
/// Bytes of the connecting side's hello.
pub const HELLO_LEN: usize = 8 + 4 + 4 + 8 + NONCE_LEN + PROOF_LEN;
/// Bytes of the accepting side's welcome.
pub const WELCOME_LEN: usize = 8 + 8 + PROOF_LEN;

fn record(kind: u8, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&MAGIC);
    v.push(VERSION);
    v.push(kind);
    v.extend_from_slice(&[0, 0]);
    v
}

fn record_body<'a>(b: &'a [u8], kind: u8, len: usize, what: &str) -> Result<&'a [u8], String> {
    if b.len() != len || b[0..4] != MAGIC {
        return Err(format!("not a transport {what} (a process of another job, or not a rank?)"));
    }
    if b[4] != VERSION {
        return Err(format!("transport protocol version {} in the {what}, this side speaks {VERSION}", b[4]));
    }
    if b[5] != kind || b[6..8] != [0, 0] {
        return Err(format!("malformed {what}"));
    }
    Ok(&b[8..])
}

/// The accepting side's first record: a fresh nonce.
pub fn challenge(nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut v = record(CHALLENGE, CHALLENGE_LEN);
    v.extend_from_slice(nonce);
    v
}

/// The nonce of a challenge.
pub fn parse_challenge(b: &[u8]) -> Result<[u8; NONCE_LEN], String> {
    let body = record_body(b, CHALLENGE, CHALLENGE_LEN, "challenge")?;
    Ok(body.try_into().expect("checked length"))
}

/// Who opens a connection to whom, for which set of channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Introduction {
    /// The connecting rank (it sends the operations).
    pub from: u32,
    /// The accepting rank (it receives them).
    pub to: u32,
    /// The set of channels the connection belongs to (agreed through the bootstrap), so that a
    /// connection meant for another set is never taken for this one.
    pub instance: u64,
}

impl Introduction {
    fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.from.to_le_bytes());
        b[4..8].copy_from_slice(&self.to.to_le_bytes());
        b[8..16].copy_from_slice(&self.instance.to_le_bytes());
        b
    }
}

/// The connecting side's proof over both nonces and its introduction.
pub fn hello_proof(
    key: &Token,
    intro: &Introduction,
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
) -> [u8; PROOF_LEN] {
    auth::prove(key, Proof::TransportHello, &[&intro.bytes(), server, client])
}

/// Whether `proof` is [`hello_proof`] of the rest, compared in constant time.
pub fn verify_hello(
    key: &Token,
    intro: &Introduction,
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
    proof: &[u8],
) -> bool {
    auth::verify(key, Proof::TransportHello, &[&intro.bytes(), server, client], proof)
}

/// The accepting side's proof, over the same and the largest put chunk it accepts.
pub fn welcome_proof(
    key: &Token,
    intro: &Introduction,
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
    max_chunk: u64,
) -> [u8; PROOF_LEN] {
    auth::prove(key, Proof::TransportWelcome, &[&intro.bytes(), server, client, &max_chunk.to_le_bytes()])
}

/// The connecting side's reply to a challenge.
pub fn hello(key: &Token, intro: &Introduction, server: &[u8; NONCE_LEN], client: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut v = record(HELLO, HELLO_LEN);
    v.extend_from_slice(&intro.bytes());
    v.extend_from_slice(client);
    v.extend_from_slice(&hello_proof(key, intro, server, client));
    v
}

/// A hello's introduction, client nonce and proof (the proof is checked by the caller, which
/// knows the key and its own nonce).
pub fn parse_hello(b: &[u8]) -> Result<(Introduction, [u8; NONCE_LEN], [u8; PROOF_LEN]), String> {
    let body = record_body(b, HELLO, HELLO_LEN, "hello")?;
    let intro = Introduction {
        from: u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")),
        to: u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")),
        instance: u64::from_le_bytes(body[8..16].try_into().expect("8 bytes")),
    };
    let client = body[16..16 + NONCE_LEN].try_into().expect("nonce");
    let proof = body[16 + NONCE_LEN..].try_into().expect("proof");
    Ok((intro, client, proof))
}

/// The accepting side's answer to a valid hello: the largest put chunk it accepts, and its proof.
pub fn welcome(
    key: &Token,
    intro: &Introduction,
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
    max_chunk: u64,
) -> Vec<u8> {
    let mut v = record(WELCOME, WELCOME_LEN);
    v.extend_from_slice(&max_chunk.to_le_bytes());
    v.extend_from_slice(&welcome_proof(key, intro, server, client, max_chunk));
    v
}

/// A welcome's largest chunk, once its proof checks out.
pub fn parse_welcome(
    b: &[u8],
    key: &Token,
    intro: &Introduction,
    server: &[u8; NONCE_LEN],
    client: &[u8; NONCE_LEN],
) -> Result<u64, String> {
    let body = record_body(b, WELCOME, WELCOME_LEN, "welcome")?;
    let max_chunk = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    let parts: [&[u8]; 4] = [&intro.bytes(), server, client, &max_chunk.to_le_bytes()];
    if !auth::verify(key, Proof::TransportWelcome, &parts, &body[8..]) {
        return Err("the welcome's proof is wrong (the other side does not know the session key)".into());
    }
    Ok(max_chunk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn headers_round_trip_and_unused_fields_must_be_zero() {
        let ops = [
            Header::new(Op::Put, 3, 7, 4096, 1 << 20),
            Header::new(Op::Signal, 1, 8, 0, 0),
            Header::new(Op::AtomicAdd, 0, 9, 64, u64::MAX),
            Header::new(Op::Flush, 0, 10, 5, 0),
            Header::new(Op::Close, 0, 11, 0, 0),
            Header::new(Op::Ack, 0, 0, 5, 0),
            Header::new(Op::Fail, 0, 1, 0, 12),
        ];
        for h in ops {
            assert_eq!(Header::decode(&h.encode()), Ok(h));
        }
        let mut b = Header::new(Op::Signal, 1, 0, 0, 0).encode();
        b[24] = 1; // an offset on a signal
        assert_eq!(Header::decode(&b), Err(WireFault::StrayField("offset")));
        let mut b = Header::new(Op::Close, 0, 0, 0, 0).encode();
        b[8] = 1;
        assert_eq!(Header::decode(&b), Err(WireFault::StrayField("index")));
        let mut b = Header::new(Op::Flush, 0, 0, 1, 0).encode();
        b[32] = 1;
        assert_eq!(Header::decode(&b), Err(WireFault::StrayField("length")));
        let mut b = Header::new(Op::Put, 0, 0, 0, 1).encode();
        b[13] = 1;
        assert_eq!(Header::decode(&b), Err(WireFault::StrayField("reserved field")));
        let mut b = Header::new(Op::Put, 0, 0, 0, 1).encode();
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(WireFault::BadMagic(_))));
        let mut b = Header::new(Op::Put, 0, 0, 0, 1).encode();
        b[4] = 9;
        assert_eq!(Header::decode(&b), Err(WireFault::BadVersion(9)));
        let mut b = Header::new(Op::Put, 0, 0, 0, 1).encode();
        b[5] = 6;
        assert_eq!(Header::decode(&b), Err(WireFault::UnknownOp(6)));
    }

    proptest! {
        /// Any 40 bytes decode without panicking, and what decodes encodes back to the same bytes.
        #[test]
        fn arbitrary_headers_decode_safely(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN)) {
            let b: [u8; HEADER_LEN] = bytes.as_slice().try_into().unwrap();
            if let Ok(h) = Header::decode(&b) {
                prop_assert_eq!(h.encode(), b);
            }
        }
    }

    #[test]
    fn handshake_records_check_the_key_and_the_shape() {
        let key = Token([3; 16]);
        let intro = Introduction { from: 1, to: 0, instance: 99 };
        let (s, c) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        assert_eq!(parse_challenge(&challenge(&s)), Ok(s));
        let h = hello(&key, &intro, &s, &c);
        let (i2, c2, proof) = parse_hello(&h).unwrap();
        assert_eq!((i2, c2), (intro, c));
        assert_eq!(proof, hello_proof(&key, &intro, &s, &c));
        assert_ne!(proof, hello_proof(&Token([4; 16]), &intro, &s, &c));
        assert!(verify_hello(&key, &intro, &s, &c, &proof));
        assert!(!verify_hello(&Token([4; 16]), &intro, &s, &c, &proof));
        assert!(!verify_hello(&key, &Introduction { from: 2, ..intro }, &s, &c, &proof));
        let w = welcome(&key, &intro, &s, &c, 1 << 20);
        assert_eq!(parse_welcome(&w, &key, &intro, &s, &c), Ok(1 << 20));
        assert!(parse_welcome(&w, &Token([4; 16]), &intro, &s, &c).is_err());
        let other = Introduction { instance: 98, ..intro };
        assert!(parse_welcome(&w, &key, &other, &s, &c).is_err());
        // Wrong length, magic, version or kind.
        assert!(parse_hello(&h[..HELLO_LEN - 1]).is_err());
        assert!(parse_hello(&challenge(&s)).is_err());
        let mut bad = h.clone();
        bad[4] = 2;
        assert!(parse_hello(&bad).unwrap_err().contains("version 2"));
        let mut bad = h.clone();
        bad[0] = 0;
        assert!(parse_hello(&bad).is_err());
        // A survivor of `./x mutants tcp`: the kind and the reserved bytes checked only together
        // (`||` read as `&&`). Each wrong alone, the rest of the record right: malformed.
        for (at, byte) in [(5, WELCOME), (6, 1), (7, 1)] {
            let mut bad = h.clone();
            bad[at] = byte;
            assert_eq!(parse_hello(&bad), Err("malformed hello".into()), "byte {at} = {byte:#x}");
        }
    }
}
