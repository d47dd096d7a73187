//! Bootstrap: how the ranks of a multi-process run find each other and exchange small amounts of
//! data (memory handles, addresses, seeds) on the CPU before and around GPU work.
//!
//! * [`Bootstrap`]: what the rest of the crate needs from that exchange (rank and world, all-gather,
//!   barrier, tagged send and receive), as an object-safe trait. A program that already runs
//!   under MPI, Slurm's PMI or `torch.distributed` can implement it over that and hand it to
//!   [`Communicator::new`](crate::comm::Communicator::new) as an `Arc<dyn Bootstrap>`;
//!   [`BootstrapExt`] adds typed all-gathers to every implementation.
//! * [`TcpBootstrap`]: this crate's implementation, a TCP rendezvous that needs nothing but the
//!   rank variables; the rest of this page describes it.
//! * [`RankInfo::from_env`]: rank, world size, local rank and local size from the built-in
//!   launcher (`MSCCLPP_RS_*`), OpenMPI (`OMPI_COMM_WORLD_*`), PMI (`PMI_*`) or Slurm
//!   (`SLURM_*`); [`BootstrapConfig::from_env`] adds the rendezvous address, session token and
//!   timeout.
//! * [`TcpBootstrap::connect`]: the rendezvous over TCP; then [`Bootstrap::all_gather`],
//!   [`BootstrapExt::all_gather_pod`], [`Bootstrap::barrier`], [`Bootstrap::send`] and
//!   [`Bootstrap::recv`].
//! * [`LocalBootstrap`] ([`local`]): ranks that are threads of one process, talking through
//!   shared queues, with the same operations, errors, timeouts and loss reports.
//! * [`launcher`]: starts N copies of the current executable as ranks on this machine
//!   ([`launch`], and `--ranks N` through [`maybe_launch_from_args`]), or runs N ranks as
//!   threads of this process ([`launcher::run_threads`], `--threads N`).
//! * [`crate::frame`]: the wire format and the rendezvous payloads.
//!
//! The TCP implementation lives in four private files: `tcp.rs` (the [`TcpBootstrap`] type and
//! its operations), `rendezvous.rs` (joining rank 0, with the handshake), `links.rs` (the
//! connections after the rendezvous: opening them, reading them, rank 0's reports of lost ranks)
//! and `inbox.rs` (the per-peer queues receives take from, and what is known of each peer's end).
//!
//! # Topology: a star through rank 0, a ring, and connections on first use
//!
//! ```text
//!  rendezvous                                  afterwards, N = 6
//!  rank r>0 <--Challenge(nonce)----------- 0   star:  0-1 0-2 0-3 0-4 0-5
//!  rank r>0 --Hello(r, listen, proof)----> 0   ring:  1-2 2-3 3-4 4-5 (0-1, 5-0: the star)
//!  rank r>0 <--Welcome(proof)------------- 0   on first use: any pair, when one of the
//!  (all joined) rank r <--Table----------- 0     two sends to the other
//!  rank r --Connect(r)--> rank r+1 (ring)
//!  barrier through rank 0
//! ```
//!
//! Rank 0 listens on the configured address; every other rank opens a listener on the interface
//! it reached rank 0 through, connects to rank 0 and reports that address. Once all have joined,
//! rank 0 sends everyone the table of addresses; each rank `r` from 1 to N-2 connects to rank
//! `r + 1` (rank 0 is already connected to its two neighbours, 1 and N-1), and a barrier
//! closes the rendezvous. A rank has 3 connections then (rank 0 has N-1), whatever the world
//! size: the full mesh of earlier versions (N-1 sockets and threads in every process) stopped
//! working at 256 ranks on one machine. Connections to other ranks are opened when this rank
//! first sends to them (a [`Bootstrap::send_tagged`] toward a rank it has no connection with),
//! with the same challenge-response as the rendezvous.
//!
//! Both ranks of a pair may open a connection to each other at the same moment; both are kept.
//! Each rank writes to a peer on the first connection it had with it (its own or the peer's)
//! and reads every connection, so the messages of one rank to another stay in order, and no
//! choice has to be agreed on.
//!
//! Collectives go through rank 0: for an all-gather every rank sends its contribution to rank 0,
//! which sends everyone all of them (packed into as few frames as the frame limit allows); a
//! barrier is the same with empty contributions. Every rank sends one frame and receives about
//! one; rank 0 receives N-1 and sends N-1. Measured on one machine this is faster than a ring
//! all-gather (N-1 messages per rank, in N-1 steps) at every size from 8 ranks up, and much
//! faster at hundreds (`docs/bootstrap-scaling.md`, from `examples/bootstrap_scale.rs` in the
//! host crate). Rank 0 thus sends N times the gathered data: at thousands of ranks that, not the
//! number of messages, is the cost (the document projects it).
//!
//! # Receiving: reader threads and matching
//!
//! One thread per connection reads frames as they come and queues them by peer. A receive takes
//! the first queued frame of its peer with the right kind and sequence number, so frames from
//! different peers, or a point-to-point message that arrives in the middle of an all-gather, or a
//! peer that is already one collective ahead, never confuse each other. Because every peer always
//! reads, writes cannot deadlock even when all ranks send large all-gather contributions at once.
//! Collectives share one sequence: when two ranks call different collectives as their n-th one,
//! rank 0 notices and fails the collective on every rank with a [`Error::Protocol`] naming them,
//! instead of hanging.
//!
//! # Timeouts and failures
//!
//! Every connect, accept and receive has a deadline: [`BootstrapConfig::timeout`] (default 30 s,
//! `MSCCLPP_RS_BOOTSTRAP_TIMEOUT`) for the rendezvous as a whole and for each later operation.
//! Connecting to rank 0 is retried (with a growing pause, up to 0.5 s) until the deadline, so
//! rank 0 may start later than the others. Writes have the same timeout. The reader threads block
//! without a timeout, which is harmless: dropping the [`TcpBootstrap`] shuts the sockets down, which
//! ends them. Errors name this rank, the step and the other rank: `rank 2: all_gather #3: timed out
//! after 30 s waiting for rank 1`, or `rank 0: barrier #7: connection to rank 3 lost: closed by
//! the peer (it exited or was killed)`.
//!
//! Rank 0 decides how a collective ends: when a rank is missing after the timeout, is dead, or
//! said goodbye without taking part, rank 0 sends every other rank an abort that says so, and
//! their collective fails with the same cause (`rank 5: all_gather #3: timed out after 30 s
//! waiting for rank 1`, with rank 0's timeout). So the others wait a little longer than the
//! timeout for that verdict (the timeout again, at most 2 s more) before they give up on rank 0
//! itself. A rank that dies after rank 0 had its contribution fails no one's collective.
//!
//! # A dead rank
//!
//! A rank that closes its bootstrap (drop, unless it is panicking or called
//! [`Bootstrap::abandon`]) sends a goodbye on each of its connections; a connection that ends
//! without one is a death, and the
//! [`Bootstrap::on_peer_lost`] hooks run for it (a [`Communicator`](crate::comm::Communicator)
//! aborts its GPU's waits there). Every rank learns of every death within milliseconds:
//!
//! * rank 0 holds a connection to every rank, sees every death and sends every other rank a
//!   report (`rank 0 lost its connection to it: ...`), on which they run their hooks;
//! * when rank 0 dies, every rank sees it on its own connection;
//! * a rank that has a connection of its own with the dead rank (its ring neighbours, peers it
//!   exchanged messages with) sees it directly too; the hooks run once per rank either way.
//!
//! Receives from a dead or departed rank fail once nothing more can come from it: at once when
//! there is no connection with it, else when its connections have ended (so a message it sent
//! just before dying or leaving is still delivered). A receive from a rank that left without
//! ever having a connection to this one times out instead (nobody reports departures: that
//! would cost N-1 reports per rank at the end of every job).
//!
//! # Address and token under mpirun and srun
//!
//! `MSCCLPP_RS_BOOTSTRAP=host:port` names rank 0's address; the built-in launcher sets it, along
//! with a random `MSCCLPP_RS_TOKEN`. Under `mpirun` or `srun` with all ranks on one machine and no
//! address given, every rank computes the same one without talking to the others: `127.0.0.1`
//! and a port in 20000..=31999 hashed from the first job identifier found among
//! [`env::JOB_ID_VARS`] (`PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `OMPI_MCA_orte_hnp_uri`,
//! `SLURM_JOB_ID` with `SLURM_STEP_ID`); the token is hashed from the same identifier. The range
//! sits below Linux's ephemeral ports. Two jobs on one machine collide on a port with odds of
//! 1 in 12000; the second then fails to listen, with a message saying to set the address. Ranks
//! on several machines must set the address. A derived token only keeps apart jobs that meet by
//! accident: anyone who can read the job's environment can compute it.
//!
//! # Frames, tokens and the handshake
//!
//! Every frame carries its kind and a tag derived from the session token (never the token
//! itself), and its length is checked against [`BootstrapConfig::max_frame`] before anything is
//! allocated (see [`crate::frame`]). Every new connection starts with a challenge-response in both
//! directions: the accepting side sends a fresh nonce, the connecting side answers with its own
//! nonce and an HMAC-SHA256 under the token over both nonces and its introduction, and the
//! accepting side's welcome carries its own HMAC over the nonces. So a process joins only if it
//! knows the token, a rank talks only to a process that knows it, and what crosses the network
//! reveals neither the token nor a reusable proof. A token derived from a job id is public to
//! anyone who can read the job's environment, so [`BootstrapConfig::from_env`] refuses a
//! non-loopback address unless `MSCCLPP_RS_TOKEN` is set explicitly, and the TCP transport of
//! port channels, whose key is derived from the same token, listens only on loopback then
//! ([`BootstrapHints::token_derived`]).
//!
//! During the rendezvous a connection that sends a foreign or malformed frame, fails the
//! challenge or stays silent is dropped and the rendezvous goes on (a stray process from another
//! job must not take ours down). Pending handshakes are read concurrently, one short-lived thread
//! each, up to 128 at once (beyond that the oldest is dropped), and each gets 2 s: idle or slow
//! connections do not delay the real ranks. A connection dropped for its silence is told so
//! first (a refusal frame where the welcome would be), so a real rank starved of CPU past that
//! wait on every attempt reports that rank 0 gave up waiting for its hello, not a wrong token or
//! a failed rank 0. The number of rejections, and the last reason,
//! appear in the timeout message if the rendezvous then fails. After the rendezvous every rank
//! but 0 keeps listening, for the connections opened on first use, behind the same gate (a
//! thread accepts them; strays are dropped the same way), and a bad frame on an established
//! connection ends it with the reason.
//!
//! # Bounded memory
//!
//! A peer's unread point-to-point messages may take at most [`BootstrapConfig::max_queued`]
//! bytes here (64 MiB by default; one message alone is always accepted), and frames of at most
//! two of its collectives may wait (the protocol never needs more). A peer that sends beyond
//! either bound loses its connection, and the next receive from it says why. World sizes above
//! [`env::MAX_WORLD_SIZE`] are refused before anything is allocated.
//!
//! # Rules of use
//!
//! Like MPI: every rank calls the same collectives in the same order, one at a time. [`send`]
//! may be called from any thread; receives from one peer must not run on two threads at once.
//! Messages between two ranks arrive in order per tag; a receive takes the next message of its
//! (peer, tag), whatever other tags have queued before it.
//!
//! [`send`]: Bootstrap::send
pub mod env;
mod inbox;
pub mod launcher;
mod links;
pub mod local;
mod rendezvous;
mod tcp;

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use crate::frame::{FrameError, FrameFault, Token};
pub use env::{BootstrapConfig, EnvSnapshot, RankInfo, RankSource};
pub use launcher::{Launcher, Role, launch, maybe_launch_from_args, role};
pub use local::LocalBootstrap;
pub use tcp::TcpBootstrap;

use crate::error::{Error, Result};

/// How the ranks of a run exchange small amounts of data on the CPU: the operations the
/// communicator and the collectives are built on.
///
/// Object safe, so that code takes `&dyn Bootstrap` or `Arc<dyn Bootstrap>` and works with any
/// implementation: [`TcpBootstrap`] here, or one over a launcher's own channels (MPI, PMI,
/// `torch.distributed`). Typed all-gathers come with [`BootstrapExt`].
///
/// # Contract
///
/// Every rank calls the same collectives ([`all_gather`](Self::all_gather),
/// [`barrier`](Self::barrier)) in the same order; an implementation may fail, but must not
/// silently mix up, calls that break this rule. Messages from one rank to another with one tag
/// arrive in the order they were sent; tags keep independent streams apart. Errors are this
/// crate's [`Error`]; an implementation should name the rank and the step
/// ([`Error::Bootstrap`]) so that a failure on one rank says where it happened.
pub trait Bootstrap: Send + Sync {
    /// This rank's place: rank, world size, rank and size on this machine.
    fn info(&self) -> &RankInfo;
    /// This process's rank.
    fn rank(&self) -> usize {
        self.info().rank
    }
    /// Number of ranks.
    fn world_size(&self) -> usize {
        self.info().world_size
    }
    /// Rank among the ranks on this machine.
    fn local_rank(&self) -> usize {
        self.info().local_rank
    }
    /// Number of ranks on this machine.
    fn local_size(&self) -> usize {
        self.info().local_size
    }
    /// Every rank's `data`, in rank order (this rank's own included). Contributions may differ in
    /// length.
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every rank has called `barrier` (as the same collective).
    fn barrier(&self) -> Result<()>;
    /// Sends `data` to `peer` (which may be this rank) under `tag`; the matching
    /// [`recv_tagged`](Self::recv_tagged) on `peer` gets it, in order with this rank's other
    /// messages to `peer` under the same tag.
    fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()>;
    /// The next message from `peer` (which may be this rank) under `tag`.
    fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>>;
    /// [`send_tagged`](Self::send_tagged) with tag 0.
    fn send(&self, peer: usize, data: &[u8]) -> Result<()> {
        self.send_tagged(peer, 0, data)
    }
    /// [`recv_tagged`](Self::recv_tagged) with tag 0.
    fn recv(&self, peer: usize) -> Result<Vec<u8>> {
        self.recv_tagged(peer, 0)
    }
    /// Registers `hook`, called once per peer whose connection ends without a goodbye (the peer
    /// died, was killed, or broke the protocol), with the peer's rank and what was seen; at once
    /// for a peer already lost. A [`Communicator`](crate::comm::Communicator) uses it to abort
    /// its GPU's waits. Returns whether this implementation reports losses (the default does
    /// not: waits then run out their budgets instead).
    fn on_peer_lost(&self, hook: PeerLostHook) -> bool {
        let _ = hook;
        false
    }
    /// This rank gives up on the job (an error path on which peers may be waiting for it): its
    /// peers should see it as lost, not as departed, so that their loss hooks run (and their
    /// [`Communicator`](crate::comm::Communicator)s abort their GPUs' waits, naming this rank).
    /// [`TcpBootstrap`] ends its connections at once, without goodbyes; later calls fail. The
    /// default does nothing (the peers' waits then run out their budgets).
    fn abandon(&self) {}
    /// What the job's other connections (the TCP transport of port channels) may take from this
    /// bootstrap: a key to authenticate them, the timeout, the address this rank is reached at.
    /// The default knows none of these; the transport then uses a key that rank 0 draws and
    /// sends through [`all_gather`](Self::all_gather), the default timeout, and the address of
    /// the host name.
    fn hints(&self) -> BootstrapHints {
        BootstrapHints::default()
    }
}

/// See [`Bootstrap::hints`]. Build one with `BootstrapHints { timeout: Some(t), ..Default::default() }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootstrapHints {
    /// A key derived from the session's secret (never the secret itself), the same on every rank.
    pub key: Option<Token>,
    /// How long a rank waits for another at one step.
    pub timeout: Option<Duration>,
    /// The address of this rank's interface toward the others.
    pub local_ip: Option<std::net::IpAddr>,
    /// Whether `key` comes from a session token that was derived from the job's identifier
    /// rather than given (`MSCCLPP_RS_TOKEN`): anyone who can read the job's environment can
    /// compute it, so the TCP transport then refuses to listen beyond loopback. A bootstrap
    /// whose key is secret leaves it `false` (the default).
    pub token_derived: bool,
}

/// What [`Bootstrap::on_peer_lost`] calls: the lost rank and the reason.
pub type PeerLostHook = Arc<dyn Fn(usize, &str) + Send + Sync>;

/// Typed all-gathers over any [`Bootstrap`] (including `dyn Bootstrap`): one plain value, or a
/// slice of them, per rank. Each is one [`Bootstrap::all_gather`]; a contribution of the wrong
/// size is an [`Error::Protocol`] naming the rank that sent it.
pub trait BootstrapExt: Bootstrap {
    /// [`all_gather`](Bootstrap::all_gather), checked to return one contribution per rank (and
    /// this rank below the world size): what every caller that indexes the result by rank
    /// relies on, whatever the implementation. A wrong count is an [`Error::Protocol`].
    fn all_gather_checked(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let parts = self.all_gather(data)?;
        check_gathered(parts.len(), self.world_size(), self.rank())
            .map_err(|cause| typed_failure(self.rank(), "all_gather", cause))?;
        Ok(parts)
    }
    /// [`all_gather`](Bootstrap::all_gather) of one plain value per rank.
    fn all_gather_pod<T: bytemuck::Pod>(&self, value: &T) -> Result<Vec<T>> {
        let parts = self.all_gather_checked(bytemuck::bytes_of(value))?;
        decode_pods(&parts).map_err(|cause| typed_failure(self.rank(), "all_gather_pod", cause))
    }
    /// [`all_gather`](Bootstrap::all_gather) of a slice of plain values per rank (lengths may
    /// differ).
    fn all_gather_pod_slice<T: bytemuck::Pod>(&self, values: &[T]) -> Result<Vec<Vec<T>>> {
        let parts = self.all_gather_checked(bytemuck::cast_slice(values))?;
        decode_pod_slices(&parts).map_err(|cause| typed_failure(self.rank(), "all_gather_pod_slice", cause))
    }
}

/// One contribution per rank of `world`, and `rank` among them.
fn check_gathered(parts: usize, world: usize, rank: usize) -> Result<()> {
    if parts != world || rank >= world {
        return Err(Error::Protocol(format!(
            "the bootstrap returned {parts} contributions for a world of {world} ranks (this rank {rank})"
        )));
    }
    Ok(())
}

impl<B: Bootstrap + ?Sized> BootstrapExt for B {}

/// A typed all-gather's failure on `rank`, named by `step`.
fn typed_failure(rank: usize, step: &str, cause: Error) -> Error {
    Error::Bootstrap { rank, step: step.to_string(), cause: Box::new(cause) }
}

/// One value per contribution.
fn decode_pods<T: bytemuck::Pod>(parts: &[Vec<u8>]) -> Result<Vec<T>> {
    let size = std::mem::size_of::<T>();
    parts
        .iter()
        .enumerate()
        .map(|(r, p)| {
            bytemuck::try_pod_read_unaligned(p)
                .map_err(|_| Error::Protocol(format!("rank {r} sent {} bytes for a {size}-byte value", p.len())))
        })
        .collect()
}

/// A whole number of values per contribution.
fn decode_pod_slices<T: bytemuck::Pod>(parts: &[Vec<u8>]) -> Result<Vec<Vec<T>>> {
    // Zero-sized values travel as zero bytes; chunks of 1 then leave nothing to read.
    let size = std::mem::size_of::<T>().max(1);
    parts
        .iter()
        .enumerate()
        .map(|(r, p)| {
            let bad = || Error::Protocol(format!("rank {r} sent {} bytes, not a whole number of values", p.len()));
            if p.len() % size != 0 {
                return Err(bad());
            }
            p.chunks_exact(size).map(|c| bytemuck::try_pod_read_unaligned(c).map_err(|_| bad())).collect()
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `now + d`, saturating far in the future instead of overflowing (for `Duration::MAX` and the
/// like).
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests;
