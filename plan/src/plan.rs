//! The plan data model: what the builder produces, the checker reads and the JSON format stores.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which buffer of a rank a chunk lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferType {
    /// The collective's input buffer.
    Input,
    /// The collective's output buffer.
    Output,
    /// Scratch space owned by the plan (the only legal target of packet writes).
    Scratch,
}

impl fmt::Display for BufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferType::Input => "input",
            BufferType::Output => "output",
            BufferType::Scratch => "scratch",
        })
    }
}

/// A contiguous run of `size` chunks starting at `index` in one buffer of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Chunk {
    /// Rank owning the buffer.
    pub rank: usize,
    /// Buffer on that rank.
    pub buffer: BufferType,
    /// First chunk.
    pub index: usize,
    /// Number of chunks.
    pub size: usize,
}

impl Chunk {
    /// A chunk of any buffer.
    pub fn new(rank: usize, buffer: BufferType, index: usize, size: usize) -> Self {
        Chunk { rank, buffer, index, size }
    }
    /// Chunks of the input buffer.
    pub fn input(rank: usize, index: usize, size: usize) -> Self {
        Self::new(rank, BufferType::Input, index, size)
    }
    /// Chunks of the output buffer.
    pub fn output(rank: usize, index: usize, size: usize) -> Self {
        Self::new(rank, BufferType::Output, index, size)
    }
    /// Chunks of the scratch buffer.
    pub fn scratch(rank: usize, index: usize, size: usize) -> Self {
        Self::new(rank, BufferType::Scratch, index, size)
    }
}

impl fmt::Display for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Saturating: a chunk read from JSON may name an index near `usize::MAX`, and an error
        // message about it must not overflow.
        write!(f, "rank {} {}[{}..{}]", self.rank, self.buffer, self.index, self.index.saturating_add(self.size))
    }
}

/// Memory ordering around a signal, wait or flush (MSCCL++'s `data_sync`).
///
/// A signal publishes the writes before it only with a fence *before* it; a wait makes the
/// peer's writes visible to what follows only with a fence *after* it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncType {
    /// No fence.
    None,
    /// Fence before the operation.
    Before,
    /// Fence after the operation.
    After,
    /// Fences on both sides (the DSL's default).
    #[default]
    Both,
}

impl SyncType {
    /// Whether there is a fence before the operation.
    pub fn before(self) -> bool {
        matches!(self, SyncType::Before | SyncType::Both)
    }
    /// Whether there is a fence after the operation.
    pub fn after(self) -> bool {
        matches!(self, SyncType::After | SyncType::Both)
    }
}

/// Element-wise reduction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum (the default).
    #[default]
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// The transport of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelType {
    /// Peer-to-peer loads and stores done by the thread block itself.
    Memory,
    /// Transfers requested from a host proxy (asynchronous; `flush` waits for them).
    Port,
    /// Multicast memory shared by a group of ranks (NVLink SHARP).
    Switch,
}

impl fmt::Display for ChannelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChannelType::Memory => "memory",
            ChannelType::Port => "port",
            ChannelType::Switch => "switch",
        })
    }
}

/// A channel declaration; operations refer to it by its position in [`Program::channels`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Channel {
    /// Memory channel used by `src_rank` to reach `dst_rank`.
    Memory {
        /// Rank issuing the operations.
        src_rank: usize,
        /// Remote rank.
        dst_rank: usize,
    },
    /// Port channel used by `src_rank` to reach `dst_rank`.
    Port {
        /// Rank issuing the operations.
        src_rank: usize,
        /// Remote rank.
        dst_rank: usize,
    },
    /// Switch (multicast) channel over `ranks`, bound to the same buffer on each.
    Switch {
        /// Member ranks.
        ranks: Vec<usize>,
        /// Buffer bound on every member.
        buffer: BufferType,
    },
}

impl Channel {
    /// Transport of the channel.
    pub fn channel_type(&self) -> ChannelType {
        match self {
            Channel::Memory { .. } => ChannelType::Memory,
            Channel::Port { .. } => ChannelType::Port,
            Channel::Switch { .. } => ChannelType::Switch,
        }
    }
    /// `(src_rank, dst_rank)` of a point-to-point channel.
    pub fn endpoints(&self) -> Option<(usize, usize)> {
        match self {
            Channel::Memory { src_rank, dst_rank } | Channel::Port { src_rank, dst_rank } => {
                Some((*src_rank, *dst_rank))
            }
            Channel::Switch { .. } => None,
        }
    }
}

/// Position of a thread block inside a thread-block group executing one logical operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TbgInfo {
    /// Index of this thread block within the group.
    pub index: usize,
    /// Number of thread blocks in the group; each handles `1/size` of the data.
    pub size: usize,
}

/// One operation of a thread block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// Memory or port channel: copy `src` (local) to `dst` (remote).
    Put {
        /// Channel index.
        channel: usize,
        /// Remote destination.
        dst: Chunk,
        /// Local source.
        src: Chunk,
    },
    /// Port channel: put followed by a signal on the same channel.
    PutWithSignal {
        /// Channel index.
        channel: usize,
        /// Remote destination.
        dst: Chunk,
        /// Local source.
        src: Chunk,
    },
    /// Port channel: put, signal, then wait for the transfer to complete.
    PutWithSignalAndFlush {
        /// Channel index.
        channel: usize,
        /// Remote destination.
        dst: Chunk,
        /// Local source.
        src: Chunk,
    },
    /// Memory channel: copy `src` (remote) to `dst` (local).
    Get {
        /// Channel index.
        channel: usize,
        /// Local destination.
        dst: Chunk,
        /// Remote source.
        src: Chunk,
    },
    /// Write `src` (local) as packets (data with flags) into the peer's scratch `dst`.
    PutPackets {
        /// Channel index.
        channel: usize,
        /// Remote scratch destination.
        dst: Chunk,
        /// Local source.
        src: Chunk,
    },
    /// Forward packets already in the local scratch `src` to the peer's scratch `dst`.
    ReadPutPackets {
        /// Channel index.
        channel: usize,
        /// Remote scratch destination.
        dst: Chunk,
        /// Local scratch source (read as packets).
        src: Chunk,
    },
    /// Increment the peer's semaphore for this channel.
    Signal {
        /// Channel index.
        channel: usize,
        /// Fences.
        data_sync: SyncType,
        /// Relaxed signal: orders nothing.
        relaxed: bool,
    },
    /// Block until the peer has signalled this channel once more.
    Wait {
        /// Channel index.
        channel: usize,
        /// Fences.
        data_sync: SyncType,
        /// Relaxed wait: makes nothing visible.
        relaxed: bool,
    },
    /// Port channel: wait until the proxy has completed this channel's earlier transfers.
    Flush {
        /// Channel index.
        channel: usize,
        /// Fences.
        data_sync: SyncType,
    },
    /// Memory channel: `local_dst = op(local_src, remote_srcs...)`, reading the peer's memory.
    ChannelReduce {
        /// Channel index.
        channel: usize,
        /// Local operand.
        local_src: Chunk,
        /// Remote operands (all on the channel's peer).
        remote_srcs: Vec<Chunk>,
        /// Local result.
        local_dst: Chunk,
        /// Reduction.
        reduce_op: ReduceOp,
    },
    /// Local copy.
    Copy {
        /// Destination.
        dst: Chunk,
        /// Source.
        src: Chunk,
    },
    /// Local copy into scratch in packet format.
    CopyPackets {
        /// Scratch destination (written as packets).
        dst: Chunk,
        /// Source.
        src: Chunk,
    },
    /// Local copy out of packets in scratch.
    UnpackPackets {
        /// Destination.
        dst: Chunk,
        /// Scratch source (read as packets).
        src: Chunk,
    },
    /// Local reduction `dst = op(src, others...)`; with `packet`, the others are packets in scratch.
    Reduce {
        /// First operand.
        src: Chunk,
        /// Other operands.
        others: Vec<Chunk>,
        /// Result.
        dst: Chunk,
        /// Reduction.
        reduce_op: ReduceOp,
        /// Whether `others` are read as packets.
        packet: bool,
    },
    /// Switch channel: reduce `size` chunks at `buffer_offset` over all members into `dst`.
    SwitchReduce {
        /// Channel index.
        channel: usize,
        /// Offset in the bound buffer.
        buffer_offset: usize,
        /// Number of chunks.
        size: usize,
        /// Local destination.
        dst: Chunk,
        /// Reduction.
        reduce_op: ReduceOp,
    },
    /// Switch channel: store the packets of the local scratch `src` to `buffer_offset` of every
    /// member (whose bound buffer is scratch), as packets: MSCCL++'s `gstorepkt`.
    SwitchBroadcastPackets {
        /// Channel index.
        channel: usize,
        /// Local scratch source (read as packets).
        src: Chunk,
        /// Offset in the bound scratch.
        buffer_offset: usize,
        /// Number of chunks.
        size: usize,
    },
    /// Waits until `count` thread blocks of this rank (this one included) have reached a barrier
    /// `id` as many times as this one has: every write before the barrier in any of them
    /// happens before everything after it in all of them.
    Barrier {
        /// Barrier of the rank (each id is one barrier object, reused by every crossing).
        id: usize,
        /// Thread blocks that meet at it.
        count: usize,
    },
    /// Adds one to semaphore `sem` of this rank (see [`RankPlan::semaphores`]), releasing what
    /// this thread block did before.
    SemRelease {
        /// Semaphore of the rank.
        sem: usize,
    },
    /// Waits until semaphore `sem` of this rank is positive and takes one, acquiring what the
    /// release it takes published.
    SemAcquire {
        /// Semaphore of the rank.
        sem: usize,
    },
    /// Switch channel: store `src` to `buffer_offset` of every member.
    SwitchBroadcast {
        /// Channel index.
        channel: usize,
        /// Local source.
        src: Chunk,
        /// Offset in the bound buffer.
        buffer_offset: usize,
        /// Number of chunks.
        size: usize,
    },
}

impl OpKind {
    /// The DSL name of the operation, used in error messages.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Put { .. } => "put",
            OpKind::PutWithSignal { .. } => "put_with_signal",
            OpKind::PutWithSignalAndFlush { .. } => "put_with_signal_and_flush",
            OpKind::Get { .. } => "get",
            OpKind::PutPackets { .. } => "put_packets",
            OpKind::ReadPutPackets { .. } => "read_put_packets",
            OpKind::Signal { .. } => "signal",
            OpKind::Wait { .. } => "wait",
            OpKind::Flush { .. } => "flush",
            OpKind::ChannelReduce { .. } => "channel reduce",
            OpKind::Copy { .. } => "copy",
            OpKind::CopyPackets { .. } => "copy_packets",
            OpKind::UnpackPackets { .. } => "unpack_packets",
            OpKind::Reduce { .. } => "reduce",
            OpKind::SwitchReduce { .. } => "switch reduce",
            OpKind::SwitchBroadcast { .. } => "switch broadcast",
            OpKind::SwitchBroadcastPackets { .. } => "switch broadcast of packets",
            OpKind::Barrier { .. } => "barrier",
            OpKind::SemRelease { .. } => "sem_release",
            OpKind::SemAcquire { .. } => "sem_acquire",
        }
    }

    /// Whether the operation uses scratch as packets, and whether it uses scratch as plain data
    /// (a plan that does both cannot lay its scratch out one way).
    pub fn scratch_uses(&self) -> (bool, bool) {
        let s = |c: &Chunk| c.buffer == BufferType::Scratch;
        match self {
            OpKind::PutPackets { dst, src, .. } | OpKind::CopyPackets { dst, src } => (s(dst), s(src)),
            OpKind::ReadPutPackets { dst, src, .. } => (s(dst) || s(src), false),
            OpKind::UnpackPackets { dst, src } => (s(src), s(dst)),
            OpKind::Reduce { src, others, dst, packet: true, .. } => (others.iter().any(s), s(src) || s(dst)),
            OpKind::Reduce { src, others, dst, packet: false, .. } => (false, s(src) || s(dst) || others.iter().any(s)),
            OpKind::Put { dst, src, .. }
            | OpKind::PutWithSignal { dst, src, .. }
            | OpKind::PutWithSignalAndFlush { dst, src, .. }
            | OpKind::Get { dst, src, .. }
            | OpKind::Copy { dst, src } => (false, s(dst) || s(src)),
            OpKind::ChannelReduce { local_src, remote_srcs, local_dst, .. } => {
                (false, s(local_src) || s(local_dst) || remote_srcs.iter().any(s))
            }
            OpKind::SwitchReduce { dst, .. } => (false, s(dst)),
            OpKind::SwitchBroadcast { src, .. } => (false, s(src)),
            // The destination is the bound scratch of every member, as packets.
            OpKind::SwitchBroadcastPackets { .. } => (true, false),
            OpKind::Signal { .. }
            | OpKind::Wait { .. }
            | OpKind::Flush { .. }
            | OpKind::Barrier { .. }
            | OpKind::SemRelease { .. }
            | OpKind::SemAcquire { .. } => (false, false),
        }
    }

    /// The channel the operation uses, if any.
    pub fn channel(&self) -> Option<usize> {
        match self {
            OpKind::Put { channel, .. }
            | OpKind::PutWithSignal { channel, .. }
            | OpKind::PutWithSignalAndFlush { channel, .. }
            | OpKind::Get { channel, .. }
            | OpKind::PutPackets { channel, .. }
            | OpKind::ReadPutPackets { channel, .. }
            | OpKind::Signal { channel, .. }
            | OpKind::Wait { channel, .. }
            | OpKind::Flush { channel, .. }
            | OpKind::ChannelReduce { channel, .. }
            | OpKind::SwitchReduce { channel, .. }
            | OpKind::SwitchBroadcast { channel, .. }
            | OpKind::SwitchBroadcastPackets { channel, .. } => Some(*channel),
            _ => None,
        }
    }
}

/// An operation with its thread-block-group placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// What the operation does.
    #[serde(flatten)]
    pub kind: OpKind,
    /// Set when the operation was issued to a thread-block group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tbg: Option<TbgInfo>,
}

/// Buffers and thread blocks of one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPlan {
    /// Size of the input buffer in chunks.
    pub input_chunks: usize,
    /// Size of the output buffer in chunks.
    pub output_chunks: usize,
    /// Size of the scratch buffer in chunks.
    pub scratch_chunks: usize,
    /// Operation list of each thread block, executed in order.
    pub threadblocks: Vec<Vec<Op>>,
    /// Initial value of each semaphore between the rank's thread blocks
    /// ([`OpKind::SemRelease`], [`OpKind::SemAcquire`]); every launch must leave them as it
    /// found them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub semaphores: Vec<u64>,
}

impl RankPlan {
    /// Size of a buffer in chunks.
    pub fn buffer_chunks(&self, buffer: BufferType) -> usize {
        match buffer {
            BufferType::Input => self.input_chunks,
            BufferType::Output => self.output_chunks,
            BufferType::Scratch => self.scratch_chunks,
        }
    }
}

/// A whole execution plan: all ranks, their buffers, channels and thread blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// Name of the algorithm.
    pub name: String,
    /// Collective it implements (`allreduce`, `allgather`, ...).
    pub collective: String,
    /// Whether the plan runs in place: each rank's input buffer is a part of its output buffer
    /// (MSCCL++'s `inplace`), so that writing one changes the other. Where it lies is
    /// [`Program::input_in_output`]; the checker and the executor place it there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_place: bool,
    /// One entry per rank.
    pub ranks: Vec<RankPlan>,
    /// Channel declarations.
    pub channels: Vec<Channel>,
}

impl Program {
    /// Serializes the plan to pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan always serializes")
    }
    /// Parses a plan written by [`Program::to_json`]. It is not checked; call [`crate::check()`].
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}
