//! Transports: how the operations of a port channel reach the peer.
//!
//! A port channel's kernel side never changes: it pushes triggers into the FIFO and waits on its
//! semaphore. What the proxy does with a trigger depends on where the peer is, and that is a
//! [`Transport`]: everything a port channel's `put`, `signal`, `flush` and `atomic_add` need from
//! a connection to one peer (or, for CUDA IPC, to every peer whose memory is mapped here).
//!
//! * **CUDA IPC** ([`ipc`]): the peer's buffer and semaphore are mapped into this process; a put
//!   is a copy on the proxy's stream, a signal a stream write (or a store into shared host
//!   memory), a flush waits for the stream. Only between processes of one machine.
//! * **TCP** ([`tcp`]): the peer's proxy receives; a put travels through pinned staging buffers,
//!   chunked and pipelined; signals and atomic adds follow the data on the same connection; a
//!   flush waits for the peer's acknowledgement that everything before it has landed. Works
//!   between machines, and between processes of one machine when forced
//!   ([`ENV_TRANSPORT`]`=tcp`).
//!
//! Memory channels, packets and switch channels read and write the peer's memory from the GPU,
//! so they exist only between processes of one machine; the communicator refuses them toward a
//! peer elsewhere with [`crate::Error::OffMachine`]. `docs/TRANSPORTS.md` describes the design,
//! including an InfiniBand (ibverbs) transport behind the same trait.

//!
//! Both drive the GPU through an [`engine::Engine`] (a stream of the proxy's GPU). A transport is
//! a module here (a file, or a folder like [`tcp`]), one [`TransportKind`], and one arm in
//! `Communicator::port_channels_with` that builds it for a peer.

pub mod engine;
pub mod ipc;
pub mod tcp;

use std::time::Instant;

use crate::error::{Error, Result};

/// A place in the peer's memory: one of the regions the peer registered for this transport
/// (numbered by the transport), and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSpan {
    /// The region's index.
    pub region: u32,
    /// Bytes from the region's start.
    pub offset: u64,
}

/// What a port channel needs from a connection. The proxy thread calls these in the order of the
/// FIFO; an implementation keeps that order at the peer: a signal or an atomic add takes effect
/// there only after every put issued before it, and a flush returns only once everything issued
/// before it has landed. The proxy checks every range against the sizes it registered before it
/// calls; implementations check again where the values cross a process boundary.
pub trait Transport: Send {
    /// Who is at the other end, for messages: `CUDA IPC`, `TCP to rank 3`.
    fn describe(&self) -> String;
    /// Moves `bytes` from local address `src` (on this proxy's GPU) to `dst` at the peer.
    fn put(&mut self, dst: RemoteSpan, src: u64, bytes: u64) -> Result<()>;
    /// Increments the peer's semaphore `semaphore` after the puts before it.
    fn signal(&mut self, semaphore: u32) -> Result<()>;
    /// Adds `value` to the u64 at `dst` (8-aligned), after the puts before it.
    fn atomic_add(&mut self, dst: RemoteSpan, value: u64) -> Result<()>;
    /// Returns once everything issued before has landed at the peer, or fails at `deadline`.
    fn flush(&mut self, deadline: Instant) -> Result<()>;
    /// Makes progress without blocking, and reports a failure of the connection (a lost peer, a
    /// refused message) as soon as it is known.
    fn poll(&mut self) -> Result<()>;
    /// Begins closing: nothing more will be issued; a transport that must tell its peer does so
    /// now, without waiting. The proxy calls it on every transport before it [`close`]s any, so
    /// that peers waiting for each other's end never wait in a cycle.
    ///
    /// [`close`]: Self::close
    fn start_close(&mut self) {}
    /// Ends the transport: what was issued completes (until `deadline`), then the connection
    /// closes. Called once, when the proxy stops; nothing is issued afterwards.
    fn close(&mut self, deadline: Instant) -> Result<()>;
}

/// The environment variable that chooses transports: unset, empty or `auto` (CUDA IPC between
/// processes of one machine, TCP between machines) or `tcp` (TCP toward every peer, for testing
/// the network path on one machine).
pub const ENV_TRANSPORT: &str = "MSCCLPP_RS_TRANSPORT";

/// Which transport port channels toward one peer use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// The peer's memory mapped into this process (same machine).
    CudaIpc,
    /// The TCP transport ([`tcp`]).
    Tcp,
}

impl TransportKind {
    /// A short name: `CUDA IPC`, `TCP`.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::CudaIpc => "CUDA IPC",
            TransportKind::Tcp => "TCP",
        }
    }
}

/// What [`ENV_TRANSPORT`] asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportChoice {
    /// CUDA IPC on one machine, TCP between machines.
    #[default]
    Auto,
    /// TCP toward every peer, on this machine too.
    ForceTcp,
}

impl TransportChoice {
    /// Parses a value of [`ENV_TRANSPORT`] (`None`: unset).
    pub fn parse(value: Option<&str>) -> Result<Self> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Ok(Self::Auto),
            Some("tcp") => Ok(Self::ForceTcp),
            Some(v) => Err(Error::InvalidArgument(format!("{ENV_TRANSPORT}={v:?}: expected \"auto\" or \"tcp\""))),
        }
    }

    /// The choice of this process's environment.
    pub fn from_env() -> Result<Self> {
        Self::parse(std::env::var(ENV_TRANSPORT).ok().as_deref())
    }

    /// The transport between two ranks, from both ranks' choices and whether they share a
    /// machine. Symmetric: both ranks of a pair compute the same answer.
    pub fn between(a: Self, b: Self, same_machine: bool) -> TransportKind {
        if same_machine && a == Self::Auto && b == Self::Auto { TransportKind::CudaIpc } else { TransportKind::Tcp }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_parses_and_pairs_agree() {
        assert_eq!(TransportChoice::parse(None).unwrap(), TransportChoice::Auto);
        assert_eq!(TransportChoice::parse(Some(" auto ")).unwrap(), TransportChoice::Auto);
        assert_eq!(TransportChoice::parse(Some("tcp")).unwrap(), TransportChoice::ForceTcp);
        assert!(TransportChoice::parse(Some("ib")).unwrap_err().to_string().contains(ENV_TRANSPORT));
        use TransportChoice::*;
        for (a, b) in [(Auto, Auto), (Auto, ForceTcp), (ForceTcp, Auto), (ForceTcp, ForceTcp)] {
            for same in [false, true] {
                let k = TransportChoice::between(a, b, same);
                assert_eq!(k, TransportChoice::between(b, a, same));
                assert_eq!(k == TransportKind::CudaIpc, same && a == Auto && b == Auto);
            }
        }
    }
}
