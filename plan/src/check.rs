//! The checker: signal matching, a symbolic execution that finds deadlocks, and a
//! happens-before analysis that finds data races.
//!
//! # Model
//!
//! Every thread block of every rank is a sequential thread. Each point-to-point channel
//! `src -> dst` (the `k`-th of its type between those two ranks, in declaration order) is paired
//! with the `k`-th channel `dst -> src` of the same type; a signal on one adds a token to the
//! semaphore that waits on the other consume. Tokens are consumed in order, so for the pairing
//! to be well defined the checker requires that one thread block signals and one thread block
//! waits on each semaphore (MSCCL++ also gives each thread block its own channel instance).
//!
//! The simulation repeatedly runs every thread block as far as it can. A wait is enabled when
//! an unconsumed token is there; an operation that reads packets (`unpack_packets`,
//! `read_put_packets`, `reduce` with packets) is enabled when every chunk it reads has been
//! written by a packet write. Everything else (puts, gets, copies, flushes, switch operations)
//! never blocks. Enabling is monotone, so the order chosen does not change whether the plan
//! completes; if no thread block can move and some are unfinished, the plan deadlocks.
//!
//! Along the way, the checker tracks for every thread block the set of operations known to
//! have happened before its current point (a happens-before relation over operations, the
//! operation-level form of vector clocks):
//!
//! - program order: a thread block knows its own earlier operations;
//! - signals: a signal with a fence before it (and not relaxed) carries the signaller's set; a
//!   wait with a fence after it (and not relaxed) adds the set of the signal it consumed;
//! - port channels: a proxy lane per channel performs its puts and signals in the order they
//!   were requested. A port put's remote write is known to the lane, hence to the peer after a
//!   signal on that channel, but to the issuing thread block only after a `flush` (so a memory
//!   channel signal after an unflushed port put does not publish it);
//! - barriers: a thread block at barrier `id` of its rank waits until `count` arrivals of this
//!   crossing are there, and then knows what all of them knew;
//! - semaphores between the thread blocks of a rank: an acquire waits for a token (the
//!   semaphore's initial value, which publishes nothing, then the releases in order) and knows
//!   what the releasing thread block knew; one thread block releases and one acquires each
//!   semaphore, as often in a launch (so the next launch finds it as this one did);
//! - packets order only their data: a packet read adds the packet-writing operation and its data
//!   ancestors (the operations that produced the values it sent, through packets or memory), not
//!   the writer's other earlier operations, since packets carry no fence.
//!
//! Every access to a chunk (reads and writes, local or remote) is compared with the earlier
//! accesses of that chunk: two accesses by different operations, at least one a write, where
//! the earlier one is not known to the later one's thread block (or lane), are a race.
//! Thread-block-group slices with different indices are disjoint. At the end, every write into a
//! rank's output buffer must be known to some thread block of that rank, or the collective could
//! return before the data arrived. A port put's local source must not be overwritten before a
//! `flush` of that channel (or a `put_with_signal_and_flush`).
//!
//! In an in-place plan ([`Program::in_place`]) a rank's input chunks are the output chunks they
//! alias ([`Program::storage`]): accesses are compared, and output writes required to be known,
//! by where the data is stored, so races and errors name those output chunks.
//!
//! A rank's input is written by its host before its launch and may be rewritten once the launch
//! has ended, neither of which another rank sees. So the input is modelled as written by a host
//! operation that every thread block of its rank knows from the start and no other rank knows:
//! another rank reading (or writing) it before a wait for a signal from its owner (relaxed or
//! not: see below) races with that write; and every such access must be known to the owner by the end of its launch,
//! or the owner's host could rewrite the input under it. (Only the input is modelled this way:
//! the checker looks at one launch, and the other buffers belong to the plan.)
//!
//! # Relaxed signals and the input
//!
//! A relaxed signal or wait (and a signal without a fence before it, a wait without one after
//! it) orders none of the launch's data, but every signal, relaxed or not, carries its rank's
//! host write of the input, and every wait acquires what its signal carries of that: so a rank
//! may read (or write) a peer's input once it has waited, relaxed or not, for a signal from that
//! peer. MSCCL++'s reference allreduce and its put, get and read-reduce unit plans rely on this
//! (a relaxed signal/wait, then reads of the peers' inputs). The argument, in the PTX memory
//! model, for the executor of `mscclpp-executor`:
//!
//! - the host's write `W` of rank A's input is stream work that completed before A's launch
//!   began (a copy or a kernel earlier in A's stream, or a synchronous copy before the launch),
//!   so `W` happens before every operation of A's kernel;
//! - thread 0 of every block of the executor, which makes its signals, runs `fence.acq_rel.sys`
//!   before its first relaxed signal of the launch (a non-relaxed signal is a release itself):
//!   that fence `F_A` followed by A's signal `S` (a strong relaxed atomic at system scope) is a
//!   *release pattern*, which `W` precedes;
//! - thread 0 of the waiting block of rank B spins with strong relaxed loads until one, `R`,
//!   observes `S`, then runs `fence.acq_rel.sys` (`F_B`; a non-relaxed wait's load is itself an
//!   acquire): an *acquire pattern*. So `F_A` synchronizes with `F_B`, and `W` is in causality
//!   order before everything after `F_B` in thread 0, and, through the `bar.sync` that follows
//!   every operation, in the other threads of that block: their reads of A's input see `W`
//!   (or later writes), never an older value;
//! - without `F_A` and `F_B` nothing orders `W` before B's reads (no morally strong
//!   synchronization relates them), and the model allows B a stale value of the input (a previous
//!   launch's). MSCCL++'s own executor fences neither side of a relaxed signal/wait, so there the
//!   pattern is outside what the model guarantees and works because the hardware neither keeps a
//!   peer's lines in L1 across a launch nor issues the loads before the spin loop ends.
//!
//! Only the host's write is modelled as travelling this way: the launch's own writes before a
//! relaxed signal are released only when the block happens to fence first (its first relaxed
//! signal), so they still need a fenced, non-relaxed signal/wait pair; and the check that every remote access of a rank's input is known to that
//! rank before it finishes is unchanged.

use crate::builder::{MAX_RANKS, MAX_THREADBLOCKS, PlanError, validate_op};
use crate::plan::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use thiserror::Error;

/// Identifies one operation of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpRef {
    /// Rank.
    pub rank: usize,
    /// Thread block.
    pub tb: usize,
    /// Position in the thread block's list.
    pub index: usize,
    /// Short description (name, channel, chunks).
    pub what: String,
}

impl OpRef {
    /// The `tb` of the host's write of a rank's input before its launch (see the module
    /// documentation), which is no thread block's operation.
    pub const HOST: usize = usize::MAX;

    fn host(rank: usize) -> Self {
        OpRef { rank, tb: Self::HOST, index: 0, what: "its input, written before the launch".into() }
    }
}

impl fmt::Display for OpRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tb == Self::HOST {
            return write!(f, "rank {}'s host ({})", self.rank, self.what);
        }
        write!(f, "rank {} tb {} op {} ({})", self.rank, self.tb, self.index, self.what)
    }
}

/// A thread block that cannot proceed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The operation it is stuck on.
    pub op: OpRef,
    /// What it waits for.
    pub waiting_for: String,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} waits for {}", self.op, self.waiting_for)
    }
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("; ")
}

/// A reason the checker rejects a plan.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CheckError {
    /// An operation breaks a build-time rule (plans read from JSON are re-validated).
    #[error("rank {rank} tb {tb} op {index}: {error}")]
    Invalid {
        /// Rank.
        rank: usize,
        /// Thread block.
        tb: usize,
        /// Position.
        index: usize,
        /// The rule broken.
        error: PlanError,
    },
    /// Signals and waits on one semaphore do not come in equal numbers.
    #[error(
        "{channel_type} channel rank {from} -> rank {to} (#{ordinal}): {} signal(s) but {} wait(s); signals: {}; waits: {}",
        signals.len(), waits.len(), list(signals), list(waits)
    )]
    UnmatchedSignals {
        /// Transport.
        channel_type: ChannelType,
        /// Signalling rank.
        from: usize,
        /// Waiting rank.
        to: usize,
        /// Which channel of this type between the two ranks.
        ordinal: usize,
        /// The signals.
        signals: Vec<OpRef>,
        /// The waits.
        waits: Vec<OpRef>,
    },
    /// Several thread blocks signal (or wait on) one semaphore, so which signal a wait
    /// consumes depends on timing.
    #[error(
        "{channel_type} channel rank {from} -> rank {to} (#{ordinal}): {role} from several thread blocks: {}",
        list(ops)
    )]
    AmbiguousPairing {
        /// Transport.
        channel_type: ChannelType,
        /// Signalling rank.
        from: usize,
        /// Waiting rank.
        to: usize,
        /// Which channel of this type between the two ranks.
        ordinal: usize,
        /// "signals" or "waits".
        role: &'static str,
        /// The operations.
        ops: Vec<OpRef>,
    },
    /// No thread block can proceed.
    #[error("deadlock: {}", list(blocked))]
    Deadlock {
        /// The stuck thread blocks.
        blocked: Vec<Blocked>,
    },
    /// Two conflicting accesses to a chunk that nothing orders.
    #[error("race on {location}: {first} and {second} are not ordered{hint}")]
    Race {
        /// Chunk concerned (one chunk).
        location: Chunk,
        /// Earlier access in the simulation.
        first: OpRef,
        /// Later access.
        second: OpRef,
        /// Extra explanation.
        hint: String,
    },
    /// A remote write into a rank's output is not ordered before that rank finishes.
    #[error("{write} writes {location} but rank {rank} can finish before it arrives (no wait covers it)")]
    UnobservedWrite {
        /// Chunk concerned.
        location: Chunk,
        /// The write.
        write: OpRef,
        /// Rank that may finish too early.
        rank: usize,
    },
    /// Another rank accesses a rank's input, and that rank can finish (after which its host may
    /// rewrite the input) before the access is done.
    #[error(
        "{access} uses {location} but rank {rank} can finish, and its host rewrite the input, before that is done (no wait covers it)"
    )]
    InputInUseAtEnd {
        /// Chunk concerned.
        location: Chunk,
        /// The access.
        access: OpRef,
        /// Rank owning the input.
        rank: usize,
    },
    /// A channel declaration names a rank the plan does not have, or connects a rank to itself
    /// (plans read from JSON are not built through the builder's checks).
    #[error("channel {channel}: {error}")]
    InvalidChannel {
        /// Position in [`Program::channels`].
        channel: usize,
        /// The rule broken.
        error: PlanError,
    },
    /// The plan needs more time or memory to check than the checker allows itself (a plan from
    /// an untrusted file must not make it run for hours or exhaust memory): see
    /// [`CHECK_STEP_BUDGET`] and [`CHECK_MEMORY_BUDGET`].
    #[error("the plan is too large to check: {what}")]
    TooLarge {
        /// What ran over.
        what: String,
    },
    /// An in-place plan whose input does not fit in its output (see
    /// [`Program::input_in_output`]).
    #[error("{0}")]
    InPlace(PlanError),
    /// A barrier or semaphore between the thread blocks of a rank used in a way whose outcome
    /// depends on timing or differs between launches: a barrier met with different thread-block
    /// counts, a semaphore released or acquired by several thread blocks, or released a
    /// different number of times than acquired (the next launch would find it changed).
    #[error("rank {rank} {what}: {problem}: {}", list(ops))]
    LocalSync {
        /// Rank.
        rank: usize,
        /// "barrier N" or "semaphore N".
        what: String,
        /// What is wrong.
        problem: String,
        /// The operations.
        ops: Vec<OpRef>,
    },
    /// The source of a port put is overwritten before a flush of the channel.
    #[error("{write} overwrites {location}, the source of {put}, before a flush of its channel")]
    SourceOverwrittenBeforeFlush {
        /// Chunk concerned.
        location: Chunk,
        /// The port put.
        put: OpRef,
        /// The overwriting operation.
        write: OpRef,
    },
}

/// What a successful check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Operations executed by the simulation.
    pub ops: usize,
    /// Signal/wait pairs matched.
    pub sync_pairs: usize,
    /// Thread blocks (all ranks).
    pub threadblocks: usize,
}

/// Short description of an operation for messages.
pub fn describe(p: &Program, op: &Op) -> String {
    let ch = |c: usize| match p.channels.get(c) {
        Some(Channel::Memory { dst_rank, .. }) => format!("memory channel {c} to rank {dst_rank}"),
        Some(Channel::Port { dst_rank, .. }) => format!("port channel {c} to rank {dst_rank}"),
        Some(Channel::Switch { .. }) => format!("switch channel {c}"),
        None => format!("channel {c}"),
    };
    let n = op.kind.name();
    let mut s = match &op.kind {
        OpKind::Put { channel, dst, src }
        | OpKind::PutWithSignal { channel, dst, src }
        | OpKind::PutWithSignalAndFlush { channel, dst, src }
        | OpKind::Get { channel, dst, src }
        | OpKind::PutPackets { channel, dst, src }
        | OpKind::ReadPutPackets { channel, dst, src } => format!("{n} {src} -> {dst} on {}", ch(*channel)),
        OpKind::Signal { channel, data_sync, relaxed } | OpKind::Wait { channel, data_sync, relaxed } => {
            let relaxed = if *relaxed { "relaxed " } else { "" };
            let sync = if *data_sync == SyncType::Both { String::new() } else { format!(", data_sync {data_sync:?}") };
            format!("{relaxed}{n} on {}{sync}", ch(*channel))
        }
        OpKind::Flush { channel, .. } => format!("{n} on {}", ch(*channel)),
        OpKind::ChannelReduce { channel, local_src, local_dst, .. } => {
            format!("{n} {local_src} + remote -> {local_dst} on {}", ch(*channel))
        }
        OpKind::Copy { dst, src } | OpKind::CopyPackets { dst, src } | OpKind::UnpackPackets { dst, src } => {
            format!("{n} {src} -> {dst}")
        }
        OpKind::Reduce { src, others, dst, .. } => format!("{n} {src} + {} other(s) -> {dst}", others.len()),
        OpKind::SwitchReduce { channel, dst, .. } => format!("{n} -> {dst} on {}", ch(*channel)),
        OpKind::SwitchBroadcast { channel, src, .. } | OpKind::SwitchBroadcastPackets { channel, src, .. } => {
            format!("{n} {src} on {}", ch(*channel))
        }
        OpKind::Barrier { id, count } => format!("{n} {id} of {count} thread blocks"),
        OpKind::SemRelease { sem } | OpKind::SemAcquire { sem } => format!("{n} semaphore {sem}"),
    };
    if let Some(g) = op.tbg {
        s += &format!(", slice {}/{}", g.index, g.size);
    }
    s
}

/// Semaphore: (transport, signalling rank, waiting rank, ordinal).
type SemKey = (ChannelType, usize, usize, usize);

/// Packet writes of one chunk: the slice each wrote and its data ancestors.
type PacketWrites = Vec<(Option<TbgInfo>, Hb)>;

/// A set of operations (bit `i`: operation `i`, bit `m + i`: the asynchronous transfer of
/// port operation `i`, `m` the number of operations).
#[derive(Clone, Debug, Default)]
struct Hb(Vec<u64>);

impl Hb {
    fn new(bits: usize) -> Self {
        Hb(vec![0; bits.div_ceil(64)])
    }
    fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn join(&mut self, o: &Hb) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a |= *b);
    }
}

/// Ordinal of each point-to-point channel among those of its type and endpoints.
fn ordinals(p: &Program) -> Vec<usize> {
    let mut seen: HashMap<(ChannelType, usize, usize), usize> = HashMap::new();
    p.channels
        .iter()
        .map(|c| match c.endpoints() {
            Some((s, d)) => {
                let e = seen.entry((c.channel_type(), s, d)).or_default();
                *e += 1;
                *e - 1
            }
            None => 0,
        })
        .collect()
}

/// The semaphore a signal on `channel` feeds, and the one a wait on it consumes.
fn sem_keys(p: &Program, ord: &[usize], channel: usize) -> (SemKey, SemKey) {
    let c = &p.channels[channel];
    let (s, d) = c.endpoints().expect("validated point-to-point channel");
    let t = c.channel_type();
    ((t, s, d, ord[channel]), (t, d, s, ord[channel]))
}

fn signals(kind: &OpKind) -> bool {
    matches!(kind, OpKind::Signal { .. } | OpKind::PutWithSignal { .. } | OpKind::PutWithSignalAndFlush { .. })
}

struct Access {
    id: usize,
    write: bool,
    part: Option<TbgInfo>,
    op: OpRef,
}

fn parts_overlap(a: Option<TbgInfo>, b: Option<TbgInfo>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a.size == b.size => a.index == b.index,
        _ => true,
    }
}

/// Whether the packet writes `written` cover a read of slice `part`.
fn covered(written: &PacketWrites, part: Option<TbgInfo>) -> bool {
    if written.iter().any(|(w, _)| w.is_none() || (part.is_some() && *w == part)) {
        return true;
    }
    // A read is covered when some group wrote all of its slices.
    written
        .iter()
        .filter_map(|(w, _)| *w)
        .any(|g| (0..g.size).all(|i| written.iter().any(|(w, _)| *w == Some(TbgInfo { index: i, size: g.size }))))
}

/// Reads and writes of an operation: (chunk, write?, packet?).
fn accesses(p: &Program, kind: &OpKind) -> Vec<(Chunk, bool, bool)> {
    let mut v = Vec::new();
    match kind {
        OpKind::Put { dst, src, .. }
        | OpKind::PutWithSignal { dst, src, .. }
        | OpKind::PutWithSignalAndFlush { dst, src, .. }
        | OpKind::Get { dst, src, .. }
        | OpKind::Copy { dst, src } => {
            v.push((*src, false, false));
            v.push((*dst, true, false));
        }
        OpKind::PutPackets { dst, src, .. } | OpKind::CopyPackets { dst, src } => {
            v.push((*src, false, false));
            v.push((*dst, true, true));
        }
        OpKind::ReadPutPackets { dst, src, .. } => {
            v.push((*src, false, true));
            v.push((*dst, true, true));
        }
        OpKind::UnpackPackets { dst, src } => {
            v.push((*src, false, true));
            v.push((*dst, true, false));
        }
        OpKind::ChannelReduce { local_src, remote_srcs, local_dst, .. } => {
            v.push((*local_src, false, false));
            v.extend(remote_srcs.iter().map(|c| (*c, false, false)));
            v.push((*local_dst, true, false));
        }
        OpKind::Reduce { src, others, dst, packet, .. } => {
            v.push((*src, false, false));
            v.extend(others.iter().map(|c| (*c, false, *packet)));
            v.push((*dst, true, false));
        }
        OpKind::SwitchReduce { channel, buffer_offset, size, dst, .. } => {
            if let Channel::Switch { ranks, buffer } = &p.channels[*channel] {
                v.extend(ranks.iter().map(|&r| (Chunk::new(r, *buffer, *buffer_offset, *size), false, false)));
            }
            v.push((*dst, true, false));
        }
        OpKind::SwitchBroadcast { channel, src, buffer_offset, size } => {
            v.push((*src, false, false));
            if let Channel::Switch { ranks, buffer } = &p.channels[*channel] {
                v.extend(ranks.iter().map(|&r| (Chunk::new(r, *buffer, *buffer_offset, *size), true, false)));
            }
        }
        OpKind::SwitchBroadcastPackets { channel, src, buffer_offset, size } => {
            v.push((*src, false, true));
            if let Channel::Switch { ranks, buffer } = &p.channels[*channel] {
                v.extend(ranks.iter().map(|&r| (Chunk::new(r, *buffer, *buffer_offset, *size), true, true)));
            }
        }
        OpKind::Signal { .. }
        | OpKind::Wait { .. }
        | OpKind::Flush { .. }
        | OpKind::Barrier { .. }
        | OpKind::SemRelease { .. }
        | OpKind::SemAcquire { .. } => {}
    }
    // By where the data is stored (an in-place input is part of the output).
    for a in &mut v {
        a.0 = p.storage(a.0);
    }
    v
}

/// Whether a stored unit chunk holds its rank's input: an input chunk, or for an in-place plan
/// the output chunk an input chunk aliases ([`Program::storage`]).
fn holds_input(p: &Program, u: &Chunk) -> bool {
    match u.buffer {
        BufferType::Input => true,
        BufferType::Output => match (p.input_in_output(u.rank), p.ranks.get(u.rank)) {
            (Ok(Some(start)), Some(rp)) => u.index >= start && u.index - start < rp.input_chunks,
            _ => false,
        },
        BufferType::Scratch => false,
    }
}

fn unit_chunks(c: Chunk) -> impl Iterator<Item = Chunk> {
    (c.index..c.index + c.size).map(move |i| Chunk::new(c.rank, c.buffer, i, 1))
}

const MAX_ERRORS: usize = 32;

/// Most elementary steps (a unit chunk visited, an earlier access compared, a word of a
/// happens-before set joined or copied) one [`check()`] takes before it gives up with
/// [`CheckError::TooLarge`]: about 20 seconds of an optimised build. Measured (release build):
/// `allreduce_packets_parts(8, 16)`, 8 ranks of 144 thread blocks, takes 2.5e7 steps (0.2 s);
/// `allreduce_packets_parts(8, 64)` 1.5e9 steps (7.5 s) and 0.84 GB of state.
pub const CHECK_STEP_BUDGET: u64 = 1 << 32;

/// Most bytes one [`check()`] keeps (happens-before sets, access records, packets), charged
/// before it allocates them: [`CheckError::TooLarge`] beyond it.
pub const CHECK_MEMORY_BUDGET: u64 = 1 << 30;

/// The checker's use of time and memory, charged as it goes (see [`CHECK_STEP_BUDGET`]).
struct Budget {
    steps: u64,
    bytes: u64,
}

impl Budget {
    fn new() -> Self {
        Budget { steps: 0, bytes: 0 }
    }
    fn step(&mut self, n: usize) -> Result<(), Vec<CheckError>> {
        self.steps = self.steps.saturating_add(n as u64);
        if self.steps > CHECK_STEP_BUDGET {
            return Err(vec![CheckError::TooLarge {
                what: format!("more than {CHECK_STEP_BUDGET} steps of the simulation"),
            }]);
        }
        Ok(())
    }
    fn store(&mut self, n: usize) -> Result<(), Vec<CheckError>> {
        self.bytes = self.bytes.saturating_add(n as u64);
        if self.bytes > CHECK_MEMORY_BUDGET {
            return Err(vec![CheckError::TooLarge {
                what: format!("more than {CHECK_MEMORY_BUDGET} bytes of checker state"),
            }]);
        }
        Ok(())
    }
}

/// The declarations the checker relies on: at most [`MAX_RANKS`] ranks of at most
/// [`MAX_THREADBLOCKS`] thread blocks, point-to-point channels between two different ranks of
/// the plan, switch channels over ranks of the plan.
fn check_declarations(p: &Program) -> Result<(), Vec<CheckError>> {
    let n = p.ranks.len();
    if n > MAX_RANKS {
        return Err(vec![CheckError::TooLarge { what: format!("{n} ranks (at most {MAX_RANKS})") }]);
    }
    if let Some((r, rp)) = p.ranks.iter().enumerate().find(|(_, rp)| rp.threadblocks.len() > MAX_THREADBLOCKS) {
        let what = format!("rank {r} has {} thread blocks (at most {MAX_THREADBLOCKS})", rp.threadblocks.len());
        return Err(vec![CheckError::TooLarge { what }]);
    }
    let mut errors = Vec::new();
    for (channel, ch) in p.channels.iter().enumerate() {
        let op = "channel declaration";
        let out_of_range = |rank: usize| PlanError::RankOutOfRange { op, rank, num_ranks: n };
        let error = match ch {
            Channel::Memory { src_rank, dst_rank } | Channel::Port { src_rank, dst_rank } => {
                if let Some(&r) = [src_rank, dst_rank].into_iter().find(|&&r| r >= n) {
                    Some(out_of_range(r))
                } else if src_rank == dst_rank {
                    Some(PlanError::SelfChannel { op, rank: *src_rank })
                } else {
                    None
                }
            }
            Channel::Switch { ranks, .. } if ranks.is_empty() => Some(PlanError::Empty { op, what: "rank list" }),
            Channel::Switch { ranks, .. } => ranks.iter().find(|&&r| r >= n).map(|&r| out_of_range(r)),
        };
        if let Some(error) = error
            && errors.len() < MAX_ERRORS
        {
            errors.push(CheckError::InvalidChannel { channel, error });
        }
    }
    if p.in_place {
        for r in 0..n {
            if let Err(e) = p.input_in_output(r)
                && errors.len() < MAX_ERRORS
            {
                errors.push(CheckError::InPlace(e));
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Checks a plan: validity of every operation, signal/wait matching, deadlock freedom and
/// data races. Returns every problem found (races are capped at a few dozen).
///
/// The race analysis tracks every chunk on its own, so its time and memory grow with the chunks
/// the operations cover: a plan whose operations cover a million chunks takes seconds and about
/// a gigabyte, and a plan beyond the checker's budget is refused ([`CheckError::TooLarge`]).
/// Describe a message in a few chunks (the parts the algorithm moves), not one per element.
pub fn check(p: &Program) -> Result<CheckReport, Vec<CheckError>> {
    // 0. Re-validate (plans may come from JSON): the declarations, then every operation.
    check_declarations(p)?;
    let mut budget = Budget::new();
    let mut errors = Vec::new();
    for (r, rp) in p.ranks.iter().enumerate() {
        for (t, ops) in rp.threadblocks.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                if let Err(error) = validate_op(p, r, op) {
                    errors.push(CheckError::Invalid { rank: r, tb: t, index: i, error });
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let ord = ordinals(p);
    let oref = |r: usize, t: usize, i: usize| OpRef {
        rank: r,
        tb: t,
        index: i,
        what: describe(p, &p.ranks[r].threadblocks[t][i]),
    };

    // 1. Static matching of signals and waits per semaphore.
    let mut sigs: HashMap<SemKey, Vec<OpRef>> = HashMap::new();
    let mut waits: HashMap<SemKey, Vec<OpRef>> = HashMap::new();
    for (r, rp) in p.ranks.iter().enumerate() {
        for (t, ops) in rp.threadblocks.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                if let Some(c) = op.kind.channel() {
                    if signals(&op.kind) {
                        sigs.entry(sem_keys(p, &ord, c).0).or_default().push(oref(r, t, i));
                    }
                    if matches!(op.kind, OpKind::Wait { .. }) {
                        waits.entry(sem_keys(p, &ord, c).1).or_default().push(oref(r, t, i));
                    }
                }
            }
        }
    }
    let mut keys: Vec<SemKey> = sigs.keys().chain(waits.keys()).copied().collect();
    keys.sort_by_key(|k| (k.1, k.2, k.3, k.0 as u8));
    keys.dedup();
    let mut sync_pairs = 0;
    for k in &keys {
        let s = sigs.get(k).cloned().unwrap_or_default();
        let w = waits.get(k).cloned().unwrap_or_default();
        let (channel_type, from, to, ordinal) = *k;
        if s.len() != w.len() {
            errors.push(CheckError::UnmatchedSignals {
                channel_type,
                from,
                to,
                ordinal,
                signals: s.clone(),
                waits: w.clone(),
            });
        }
        sync_pairs += s.len().min(w.len());
        for (role, ops) in [("signals", &s), ("waits", &w)] {
            let tbs: HashSet<(usize, usize)> = ops.iter().map(|o| (o.rank, o.tb)).collect();
            if tbs.len() > 1 {
                errors.push(CheckError::AmbiguousPairing { channel_type, from, to, ordinal, role, ops: ops.clone() });
            }
        }
    }
    // Barriers and semaphores between the thread blocks of a rank.
    let mut barriers: HashMap<(usize, usize), Vec<(usize, OpRef)>> = HashMap::new();
    let mut local: HashMap<(usize, usize), (Vec<OpRef>, Vec<OpRef>)> = HashMap::new();
    for (r, rp) in p.ranks.iter().enumerate() {
        for (t, ops) in rp.threadblocks.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                match op.kind {
                    OpKind::Barrier { id, count } => barriers.entry((r, id)).or_default().push((count, oref(r, t, i))),
                    OpKind::SemRelease { sem } => local.entry((r, sem)).or_default().0.push(oref(r, t, i)),
                    OpKind::SemAcquire { sem } => local.entry((r, sem)).or_default().1.push(oref(r, t, i)),
                    _ => {}
                }
            }
        }
    }
    let mut keys: Vec<&(usize, usize)> = barriers.keys().collect();
    keys.sort();
    for &(rank, id) in keys {
        let uses = &barriers[&(rank, id)];
        if uses.iter().any(|u| u.0 != uses[0].0) {
            let ops = uses.iter().map(|u| u.1.clone()).collect();
            let (what, problem) = (format!("barrier {id}"), "met with different thread-block counts".into());
            errors.push(CheckError::LocalSync { rank, what, problem, ops });
        }
    }
    let mut keys: Vec<&(usize, usize)> = local.keys().collect();
    keys.sort();
    for &(rank, sem) in keys {
        let (rel, acq) = &local[&(rank, sem)];
        let what = format!("semaphore {sem}");
        let all = || rel.iter().chain(acq).cloned().collect::<Vec<_>>();
        if rel.len() != acq.len() {
            let problem = format!("released {} time(s) but acquired {} time(s) in a launch", rel.len(), acq.len());
            errors.push(CheckError::LocalSync { rank, what: what.clone(), problem, ops: all() });
        }
        for (role, ops) in [("released", rel), ("acquired", acq)] {
            if ops.iter().map(|o| o.tb).collect::<HashSet<_>>().len() > 1 {
                let problem = format!("{role} by several thread blocks");
                errors.push(CheckError::LocalSync { rank, what: what.clone(), problem, ops: ops.clone() });
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    // 2 + 3. Symbolic execution, tracking happens-before sets. Entries 0..nt are the thread
    // blocks; each port channel also has a proxy lane, which performs that channel's transfers
    // and signals in the order they were requested.
    let threads: Vec<(usize, usize)> =
        p.ranks.iter().enumerate().flat_map(|(r, rp)| (0..rp.threadblocks.len()).map(move |t| (r, t))).collect();
    let nt = threads.len();
    let mut first_id = Vec::with_capacity(nt);
    let mut m = 0;
    for &(r, t) in &threads {
        first_id.push(m);
        m += p.ranks[r].threadblocks[t].len();
    }
    let lanes: HashMap<usize, usize> = p
        .channels
        .iter()
        .enumerate()
        .filter(|(_, c)| c.channel_type() == ChannelType::Port)
        .enumerate()
        .map(|(k, (c, _))| (c, nt + k))
        .collect();
    // Bytes of one happens-before set; every set is charged to the budget before it exists.
    // Bits: the operations, their transfers, then one per rank for its host's input write.
    let n = p.ranks.len();
    let bits = 2 * m + n;
    let host_bit = |rank: usize| 2 * m + rank;
    let hb_bytes = bits.div_ceil(64) * 8;
    let hb_words = hb_bytes / 8;
    budget.store((nt + lanes.len()).saturating_mul(hb_bytes))?;
    let mut pc = vec![0usize; nt];
    let mut know: Vec<Hb> = (0..nt + lanes.len()).map(|_| Hb::new(bits)).collect();
    // Every thread block of a rank starts after its host wrote the input.
    for (th, &(r, _)) in threads.iter().enumerate() {
        know[th].insert(host_bit(r));
    }
    let mut sems: HashMap<SemKey, VecDeque<Option<Hb>>> = HashMap::new();
    let mut packets: HashMap<Chunk, PacketWrites> = HashMap::new();
    // Data ancestors of the last write of each chunk.
    let mut data: HashMap<Chunk, Hb> = HashMap::new();
    let mut mem: HashMap<Chunk, Vec<Access>> = HashMap::new();
    // Unflushed port puts: (rank, channel, source unit chunk, put).
    let mut pending: Vec<(usize, usize, Chunk, OpRef)> = Vec::new();
    let mut reported: HashSet<(OpRef, OpRef)> = HashSet::new();
    let mut executed = 0;
    // Barriers: arrivals so far by (rank, id), what the arrivals of each crossing knew by
    // (rank, id, crossing), and the crossing each thread block waits at.
    let mut arrivals: HashMap<(usize, usize), usize> = HashMap::new();
    let mut crossing_know: HashMap<(usize, usize, usize), Hb> = HashMap::new();
    let mut arrived: Vec<Option<usize>> = vec![None; nt];
    // Semaphores: initial tokens left (publishing nothing), then releases in order.
    let mut local_sems: HashMap<(usize, usize), (u64, VecDeque<Hb>)> = HashMap::new();
    for (r, rp) in p.ranks.iter().enumerate() {
        for (sem, &init) in rp.semaphores.iter().enumerate() {
            local_sems.insert((r, sem), (init, VecDeque::new()));
        }
    }

    loop {
        let mut progressed = false;
        for th in 0..nt {
            let (r, t) = threads[th];
            let ops = &p.ranks[r].threadblocks[t];
            while pc[th] < ops.len() {
                let i = pc[th];
                let op = &ops[i];
                let acc = accesses(p, &op.kind);
                // Every unit chunk the operation touches is visited at least once below.
                budget.step(1 + acc.iter().map(|a| a.0.size).fold(0, usize::saturating_add))?;
                // Enabled?
                if let OpKind::Wait { channel, .. } = op.kind
                    && sems.get(&sem_keys(p, &ord, channel).1).is_none_or(|q| q.is_empty())
                {
                    break;
                }
                if let OpKind::Barrier { id, count } = op.kind {
                    let crossing = match arrived[th] {
                        Some(c) => c,
                        None => {
                            let a = arrivals.entry((r, id)).or_default();
                            let c = *a / count;
                            *a += 1;
                            budget.step(hb_words)?;
                            budget.store(hb_bytes)?;
                            crossing_know.entry((r, id, c)).or_insert_with(|| Hb::new(bits)).join(&know[th]);
                            arrived[th] = Some(c);
                            c
                        }
                    };
                    if arrivals[&(r, id)] < (crossing + 1) * count {
                        break;
                    }
                }
                if let OpKind::SemAcquire { sem } = op.kind
                    && local_sems.get(&(r, sem)).is_none_or(|(free, q)| *free == 0 && q.is_empty())
                {
                    break;
                }
                let packet_reads: Vec<Chunk> =
                    acc.iter().filter(|a| !a.1 && a.2).flat_map(|a| unit_chunks(a.0)).collect();
                let mut enabled = true;
                for u in &packet_reads {
                    let written = packets.get(u);
                    // `covered` compares every write with every other one.
                    budget.step(written.map_or(1, |w| w.len().saturating_mul(w.len()).saturating_add(1)))?;
                    if !written.is_some_and(|w| covered(w, op.tbg)) {
                        enabled = false;
                        break;
                    }
                }
                if !enabled {
                    break;
                }
                // Execute.
                executed += 1;
                let me = oref(r, t, i);
                let x = first_id[th] + i;
                if let OpKind::Wait { channel, data_sync, relaxed } = op.kind {
                    let token = sems.get_mut(&sem_keys(p, &ord, channel).1).and_then(|q| q.pop_front()).flatten();
                    if let Some(c) = token {
                        budget.step(hb_words)?;
                        if data_sync.after() && !relaxed {
                            know[th].join(&c);
                        } else {
                            // Any wait acquires the hosts' inputs the signal carries (see
                            // "Relaxed signals and the input" above).
                            for q in 0..n {
                                if c.contains(host_bit(q)) {
                                    know[th].insert(host_bit(q));
                                }
                            }
                        }
                    }
                }
                match op.kind {
                    OpKind::Barrier { id, .. } => {
                        let c = arrived[th].take().expect("arrived above");
                        budget.step(hb_words)?;
                        know[th].join(&crossing_know[&(r, id, c)]);
                    }
                    OpKind::SemAcquire { sem } => {
                        let (free, q) = local_sems.get_mut(&(r, sem)).expect("enabled above");
                        if *free > 0 {
                            *free -= 1;
                        } else if let Some(k) = q.pop_front() {
                            budget.step(hb_words)?;
                            know[th].join(&k);
                        }
                    }
                    _ => {}
                }
                // Data ancestors: what produced the values this operation reads.
                budget.step(hb_words)?;
                let mut anc = Hb::new(bits);
                anc.insert(x);
                for &(c, write, packet) in &acc {
                    if write {
                        continue;
                    }
                    for u in unit_chunks(c) {
                        if packet {
                            budget.step(packets[&u].len().saturating_mul(2 * hb_words))?;
                            for (w, d) in &packets[&u] {
                                if parts_overlap(*w, op.tbg) {
                                    anc.join(d);
                                    know[th].join(d);
                                }
                            }
                        } else if let Some(d) = data.get(&u) {
                            budget.step(hb_words)?;
                            anc.join(d);
                        }
                    }
                }
                // A port channel's transfers and signals are handed to its lane, which starts
                // them after everything the thread block did so far.
                let lane = op.kind.channel().and_then(|c| lanes.get(&c).copied());
                let transfer = lane.is_some()
                    && matches!(
                        op.kind,
                        OpKind::Put { .. }
                            | OpKind::PutPackets { .. }
                            | OpKind::PutWithSignal { .. }
                            | OpKind::PutWithSignalAndFlush { .. }
                    );
                let via_lane = lane.filter(|_| transfer || signals(&op.kind));
                if transfer {
                    anc.insert(m + x);
                }
                for &(c, write, packet) in &acc {
                    // (id of the access, the knowledge of whoever performs it)
                    let (id, actor) = match via_lane {
                        Some(l) if write && transfer => (m + x, l),
                        _ => (x, th),
                    };
                    if actor != th {
                        budget.step(2 * hb_words)?;
                        let k = know[th].clone();
                        know[actor].join(&k);
                        know[actor].insert(x);
                    }
                    for u in unit_chunks(c) {
                        let list = mem.entry(u).or_default();
                        if list.is_empty() && holds_input(p, &u) {
                            budget.store(std::mem::size_of::<Access>())?;
                            list.push(Access {
                                id: host_bit(u.rank),
                                write: true,
                                part: None,
                                op: OpRef::host(u.rank),
                            });
                        }
                        // The comparison with every earlier access, the record kept, and for a
                        // write its ancestors (and the unflushed puts it may overwrite).
                        budget.step(list.len().saturating_add(if write { hb_words + pending.len() } else { 0 }))?;
                        budget.store(std::mem::size_of::<Access>() + me.what.len())?;
                        if write && packet {
                            budget.store(hb_bytes)?;
                        }
                        for b in list.iter() {
                            if b.id != id
                                && b.id != x
                                && (write || b.write)
                                && parts_overlap(b.part, op.tbg)
                                && !know[actor].contains(b.id)
                                && errors.len() < MAX_ERRORS
                                && reported.insert((b.op.clone(), me.clone()))
                            {
                                let hint = if b.op.tb == OpRef::HOST {
                                    ": another rank's input is ready only once that rank's launch has begun: access it after a wait for a signal from that rank".to_string()
                                } else if u.rank != b.op.rank || u.rank != r {
                                    ": a remote write is visible only after a fenced signal ordered after it (for a port channel, a signal on that channel or anything after a flush) and a fenced wait ordered before the other access, or to a packet read of it".to_string()
                                } else {
                                    ": accesses by different thread blocks need a synchronization between them"
                                        .to_string()
                                };
                                errors.push(CheckError::Race {
                                    location: u,
                                    first: b.op.clone(),
                                    second: me.clone(),
                                    hint,
                                });
                            }
                        }
                        list.push(Access { id, write, part: op.tbg, op: me.clone() });
                        if write {
                            data.insert(u, anc.clone());
                            if packet {
                                packets.entry(u).or_default().push((op.tbg, anc.clone()));
                            }
                        }
                        if write && u.rank == r {
                            for (_, _, src, put) in pending.iter().filter(|x| x.0 == r && x.2 == u) {
                                if errors.len() < MAX_ERRORS && reported.insert((put.clone(), me.clone())) {
                                    errors.push(CheckError::SourceOverwrittenBeforeFlush {
                                        location: *src,
                                        put: put.clone(),
                                        write: me.clone(),
                                    });
                                }
                            }
                        }
                    }
                    if actor != th {
                        know[actor].insert(id);
                    }
                }
                know[th].insert(x);
                match op.kind {
                    OpKind::Put { channel, src, .. }
                    | OpKind::PutWithSignal { channel, src, .. }
                    | OpKind::PutPackets { channel, src, .. }
                        if lanes.contains_key(&channel) =>
                    {
                        budget.store(src.size.saturating_mul(std::mem::size_of::<Chunk>() * 2 + me.what.len()))?;
                        pending.extend(unit_chunks(p.storage(src)).map(|u| (r, channel, u, me.clone())));
                    }
                    _ => {}
                }
                // A flush returns once the lane has finished: the thread block now knows its effects.
                if matches!(op.kind, OpKind::Flush { .. } | OpKind::PutWithSignalAndFlush { .. })
                    && let (Some(c), Some(l)) = (op.kind.channel(), lane)
                {
                    budget.step(pending.len().saturating_add(2 * hb_words))?;
                    pending.retain(|x| !(x.0 == r && x.1 == c));
                    let k = know[l].clone();
                    know[th].join(&k);
                }
                if let OpKind::SemRelease { sem } = op.kind
                    && let Some((_, q)) = local_sems.get_mut(&(r, sem))
                {
                    budget.step(hb_words)?;
                    budget.store(hb_bytes)?;
                    q.push_back(know[th].clone());
                }
                if signals(&op.kind) {
                    let c = op.kind.channel().expect("signals use a channel");
                    let publishes = match op.kind {
                        OpKind::Signal { data_sync, relaxed, .. } => data_sync.before() && !relaxed,
                        _ => true,
                    };
                    budget.step(2 * hb_words)?;
                    budget.store(hb_bytes)?;
                    let from = match via_lane {
                        Some(l) => {
                            let k = know[th].clone();
                            know[l].join(&k);
                            l
                        }
                        None => th,
                    };
                    // A signal that publishes nothing of the launch still carries the host's
                    // input of its rank (released by the executor's fence before a block's first
                    // relaxed signal, or by a non-relaxed signal itself).
                    let token = if publishes {
                        know[from].clone()
                    } else {
                        let mut h = Hb::new(bits);
                        h.insert(host_bit(r));
                        h
                    };
                    sems.entry(sem_keys(p, &ord, c).0).or_default().push_back(Some(token));
                }
                pc[th] += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }

    let blocked: Vec<Blocked> = (0..nt)
        .filter(|&th| pc[th] < p.ranks[threads[th].0].threadblocks[threads[th].1].len())
        .map(|th| {
            let (r, t) = threads[th];
            let i = pc[th];
            let op = &p.ranks[r].threadblocks[t][i];
            let waiting_for = match op.kind {
                OpKind::Barrier { id, count } => {
                    let c = arrived[th].unwrap_or(0);
                    let here = arrivals.get(&(r, id)).map_or(0, |a| a.saturating_sub(c * count));
                    format!(
                        "{} more thread block(s) at barrier {id} ({here} of {count} there)",
                        count.saturating_sub(here)
                    )
                }
                OpKind::SemAcquire { sem } => format!("a release of semaphore {sem}"),
                OpKind::Wait { channel, .. } => {
                    let peer = p.channels[channel].endpoints().map_or(0, |e| e.1);
                    format!("a signal from rank {peer} on {} channel {channel}", p.channels[channel].channel_type())
                }
                _ => {
                    // The first few (a chunk may span millions of units).
                    const SHOWN: usize = 16;
                    let mut missing: Vec<String> = accesses(p, &op.kind)
                        .iter()
                        .filter(|a| !a.1 && a.2)
                        .flat_map(|a| unit_chunks(a.0))
                        .filter(|u| !packets.get(u).is_some_and(|w| covered(w, op.tbg)))
                        .map(|u| u.to_string())
                        .take(SHOWN + 1)
                        .collect();
                    if missing.len() > SHOWN {
                        missing[SHOWN] = "...".into();
                    }
                    format!("packets in {}", missing.join(", "))
                }
            };
            Blocked { op: oref(r, t, i), waiting_for }
        })
        .collect();
    if !blocked.is_empty() {
        errors.insert(0, CheckError::Deadlock { blocked });
        return Err(errors);
    }

    // End of the kernel: remote writes into outputs must be known to the rank before it finishes.
    for r in 0..p.ranks.len() {
        budget.step(mem.len().saturating_add(nt.saturating_mul(hb_words)))?;
        let mut end = Hb::new(bits);
        for (th, &(tr, _)) in threads.iter().enumerate() {
            if tr == r {
                end.join(&know[th]);
            }
        }
        let mut locs: Vec<&Chunk> = mem.keys().filter(|c| c.rank == r && c.buffer == BufferType::Output).collect();
        locs.sort_by_key(|c| c.index);
        for u in locs {
            for a in &mem[u] {
                if a.write && !end.contains(a.id) && errors.len() < MAX_ERRORS {
                    errors.push(CheckError::UnobservedWrite { location: *u, write: a.op.clone(), rank: r });
                }
            }
        }
        let mut inputs: Vec<&Chunk> = mem.keys().filter(|c| c.rank == r && holds_input(p, c)).collect();
        inputs.sort_by_key(|c| c.index);
        for u in inputs {
            for a in &mem[u] {
                if a.op.rank != r && !end.contains(a.id) && errors.len() < MAX_ERRORS {
                    errors.push(CheckError::InputInUseAtEnd { location: *u, access: a.op.clone(), rank: r });
                }
            }
        }
    }
    if errors.is_empty() { Ok(CheckReport { ops: executed, sync_pairs, threadblocks: nt }) } else { Err(errors) }
}
