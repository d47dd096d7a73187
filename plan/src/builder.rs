//! The builder: the DSL's channels, operations and thread-block placement, with its error checks.

use crate::plan::*;
use thiserror::Error;

/// A build-time error; every variant names the operation that was rejected.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlanError {
    /// A rank index is not below the number of ranks.
    #[error("{op}: rank {rank} is out of range (the program has {num_ranks} ranks)")]
    RankOutOfRange {
        /// Operation.
        op: &'static str,
        /// Offending rank.
        rank: usize,
        /// Number of ranks.
        num_ranks: usize,
    },
    /// A chunk lives on another rank than the channel endpoint or rank it is used with.
    #[error("{op}: {role} chunk is on rank {found} but must be on rank {expected}")]
    RankMismatch {
        /// Operation.
        op: &'static str,
        /// Which operand.
        role: &'static str,
        /// Rank required by the channel or rank handle.
        expected: usize,
        /// Rank of the chunk.
        found: usize,
    },
    /// Two operands that must have the same size do not.
    #[error("{op}: {role} chunk has size {found} but must have size {expected}")]
    SizeMismatch {
        /// Operation.
        op: &'static str,
        /// Which operand.
        role: &'static str,
        /// Required size.
        expected: usize,
        /// Actual size.
        found: usize,
    },
    /// A packet operation's packet operand is not in a scratch buffer.
    #[error("{op}: {role} chunk ({chunk}) must be in a scratch buffer")]
    NotScratch {
        /// Operation.
        op: &'static str,
        /// Which operand.
        role: &'static str,
        /// The chunk.
        chunk: Chunk,
    },
    /// A chunk reaches past the end of its buffer, or is empty.
    #[error("{op}: {role} chunk ({chunk}) is outside the {buffer_chunks}-chunk buffer or empty")]
    ChunkOutOfRange {
        /// Operation.
        op: &'static str,
        /// Which operand.
        role: &'static str,
        /// The chunk.
        chunk: Chunk,
        /// Size of its buffer.
        buffer_chunks: usize,
    },
    /// The channel index does not exist or is of the wrong type for the operation.
    #[error("{op}: channel {channel} does not exist or is not a {expected} channel")]
    WrongChannel {
        /// Operation.
        op: &'static str,
        /// Channel index.
        channel: usize,
        /// Required type.
        expected: ChannelType,
    },
    /// The operation is placed on a rank that is not the channel's source (or switch member).
    #[error("{op}: issued on rank {rank}, which is not the channel's source rank {expected}")]
    WrongIssuingRank {
        /// Operation.
        op: &'static str,
        /// Rank the operation is placed on.
        rank: usize,
        /// Rank required by the channel.
        expected: usize,
    },
    /// A rank is not a member of the switch channel.
    #[error("{op}: rank {rank} is not a member of the switch channel")]
    NotSwitchMember {
        /// Operation.
        op: &'static str,
        /// The rank.
        rank: usize,
    },
    /// A reduction without other operands, or an empty thread-block group or switch channel.
    #[error("{op}: {what} must not be empty")]
    Empty {
        /// Operation.
        op: &'static str,
        /// What is empty.
        what: &'static str,
    },
    /// A channel whose two endpoints are the same rank.
    #[error("{op}: source and destination rank are both {rank}")]
    SelfChannel {
        /// Operation.
        op: &'static str,
        /// The rank.
        rank: usize,
    },
    /// A thread-block-group placement that does not describe a member of a group.
    #[error("{op}: thread-block-group index {index} is not below the group size {size}")]
    BadGroup {
        /// Operation.
        op: &'static str,
        /// Index in the group.
        index: usize,
        /// Group size.
        size: usize,
    },
    /// An in-place plan whose input buffer does not fit in its output buffer where
    /// [`Program::input_in_output`] puts it.
    #[error(
        "in-place plan: rank {rank}'s {input_chunks}-chunk input, placed at output chunk {start}, does not fit in its \
         {output_chunks}-chunk output"
    )]
    InPlaceLayout {
        /// Rank.
        rank: usize,
        /// Its input buffer's size in chunks.
        input_chunks: usize,
        /// Its output buffer's size in chunks.
        output_chunks: usize,
        /// The output chunk the input would start at.
        start: usize,
    },
    /// A count or index outside what this crate supports (see [`MAX_RANKS`],
    /// [`MAX_THREADBLOCKS`]), or sizes whose product overflows.
    #[error("{op}: {what} {value} is outside the supported range ({allowed})")]
    OutOfLimits {
        /// Operation.
        op: &'static str,
        /// What the value counts.
        what: &'static str,
        /// The value.
        value: usize,
        /// The supported range.
        allowed: String,
    },
}

/// Most ranks a plan may have (plans read from JSON and the examples are held to it).
pub const MAX_RANKS: usize = 4096;

/// Most thread blocks a rank of a plan may have (thread block indices are below it): the
/// executor runs one GPU block per thread block, all of them resident at once.
pub const MAX_THREADBLOCKS: usize = 4096;

/// [`PlanError::OutOfLimits`] unless `tb` is below [`MAX_THREADBLOCKS`].
pub(crate) fn check_threadblock(op: &'static str, tb: usize) -> Result<(), PlanError> {
    if tb >= MAX_THREADBLOCKS {
        return Err(PlanError::OutOfLimits {
            op,
            what: "thread block",
            value: tb,
            allowed: format!("0 to {}", MAX_THREADBLOCKS - 1),
        });
    }
    Ok(())
}

/// A set of thread blocks that share one logical operation, each doing its slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadBlockGroup {
    tbs: Vec<usize>,
}

impl ThreadBlockGroup {
    /// A group of the given thread blocks (in slice order).
    pub fn new(tbs: Vec<usize>) -> Result<Self, PlanError> {
        if tbs.is_empty() {
            return Err(PlanError::Empty { op: "ThreadBlockGroup", what: "thread-block list" });
        }
        Ok(ThreadBlockGroup { tbs })
    }
    /// The member thread blocks.
    pub fn tbs(&self) -> &[usize] {
        &self.tbs
    }
}

/// Where an operation runs: one thread block (`tb`) or a group (`tb_group`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tb {
    /// A single thread block.
    One(usize),
    /// A thread-block group.
    Group(ThreadBlockGroup),
}

impl From<usize> for Tb {
    fn from(tb: usize) -> Self {
        Tb::One(tb)
    }
}

impl From<&ThreadBlockGroup> for Tb {
    fn from(g: &ThreadBlockGroup) -> Self {
        Tb::Group(g.clone())
    }
}

fn in_range(p: &Program, op: &'static str, role: &'static str, c: &Chunk) -> Result<(), PlanError> {
    let rp = p.ranks.get(c.rank).ok_or(PlanError::RankOutOfRange { op, rank: c.rank, num_ranks: p.ranks.len() })?;
    let n = rp.buffer_chunks(c.buffer);
    // Checked: an index near `usize::MAX` must not wrap around and pass (plans come from JSON).
    if c.size == 0 || c.index.checked_add(c.size).is_none_or(|end| end > n) {
        return Err(PlanError::ChunkOutOfRange { op, role, chunk: *c, buffer_chunks: n });
    }
    Ok(())
}

fn on_rank(op: &'static str, role: &'static str, c: &Chunk, rank: usize) -> Result<(), PlanError> {
    if c.rank != rank {
        return Err(PlanError::RankMismatch { op, role, expected: rank, found: c.rank });
    }
    Ok(())
}

fn same_size(op: &'static str, role: &'static str, c: &Chunk, size: usize) -> Result<(), PlanError> {
    if c.size != size {
        return Err(PlanError::SizeMismatch { op, role, expected: size, found: c.size });
    }
    Ok(())
}

fn scratch(op: &'static str, role: &'static str, c: &Chunk) -> Result<(), PlanError> {
    if c.buffer != BufferType::Scratch {
        return Err(PlanError::NotScratch { op, role, chunk: *c });
    }
    Ok(())
}

fn p2p(
    p: &Program,
    op: &'static str,
    channel: usize,
    kinds: &[ChannelType],
    rank: usize,
) -> Result<(usize, usize), PlanError> {
    let ch = p.channels.get(channel);
    let ok = ch.filter(|c| kinds.contains(&c.channel_type())).and_then(|c| c.endpoints());
    let (src, dst) = ok.ok_or(PlanError::WrongChannel { op, channel, expected: kinds[0] })?;
    if src != rank {
        return Err(PlanError::WrongIssuingRank { op, rank, expected: src });
    }
    Ok((src, dst))
}

fn switch<'a>(p: &'a Program, op: &'static str, channel: usize) -> Result<(&'a [usize], BufferType), PlanError> {
    match p.channels.get(channel) {
        Some(Channel::Switch { ranks, buffer }) => Ok((ranks, *buffer)),
        _ => Err(PlanError::WrongChannel { op, channel, expected: ChannelType::Switch }),
    }
}

/// Checks one operation placed on `rank` against the DSL's rules: endpoints, sizes, scratch
/// targets of packets, ranges. The builder calls it for every operation; the checker calls it
/// again for plans that were read from JSON.
pub fn validate_op(p: &Program, rank: usize, op: &Op) -> Result<(), PlanError> {
    let name = op.kind.name();
    if let Some(g) = op.tbg
        && g.index >= g.size
    {
        return Err(PlanError::BadGroup { op: name, index: g.index, size: g.size });
    }
    use ChannelType::*;
    match &op.kind {
        OpKind::Put { channel, dst, src }
        | OpKind::PutPackets { channel, dst, src }
        | OpKind::ReadPutPackets { channel, dst, src }
        | OpKind::PutWithSignal { channel, dst, src }
        | OpKind::PutWithSignalAndFlush { channel, dst, src } => {
            let kinds: &[ChannelType] = match &op.kind {
                OpKind::Put { .. } | OpKind::PutPackets { .. } => &[Memory, Port],
                OpKind::ReadPutPackets { .. } => &[Memory],
                _ => &[Port],
            };
            let (s, d) = p2p(p, name, *channel, kinds, rank)?;
            on_rank(name, "source", src, s)?;
            on_rank(name, "destination", dst, d)?;
            if matches!(op.kind, OpKind::ReadPutPackets { .. }) {
                scratch(name, "source", src)?;
            }
            if matches!(op.kind, OpKind::PutPackets { .. } | OpKind::ReadPutPackets { .. }) {
                scratch(name, "destination", dst)?;
            }
            same_size(name, "destination", dst, src.size)?;
            in_range(p, name, "source", src)?;
            in_range(p, name, "destination", dst)?;
        }
        OpKind::Get { channel, dst, src } => {
            let (s, d) = p2p(p, name, *channel, &[Memory], rank)?;
            on_rank(name, "destination", dst, s)?;
            on_rank(name, "source", src, d)?;
            same_size(name, "destination", dst, src.size)?;
            in_range(p, name, "source", src)?;
            in_range(p, name, "destination", dst)?;
        }
        OpKind::Signal { channel, .. } | OpKind::Wait { channel, .. } => {
            p2p(p, name, *channel, &[Memory, Port], rank)?;
        }
        OpKind::Flush { channel, .. } => {
            p2p(p, name, *channel, &[Port], rank)?;
        }
        OpKind::ChannelReduce { channel, local_src, remote_srcs, local_dst, .. } => {
            let (s, d) = p2p(p, name, *channel, &[Memory], rank)?;
            on_rank(name, "local source", local_src, s)?;
            on_rank(name, "local destination", local_dst, s)?;
            same_size(name, "local destination", local_dst, local_src.size)?;
            if remote_srcs.is_empty() {
                return Err(PlanError::Empty { op: name, what: "remote source list" });
            }
            for c in remote_srcs {
                on_rank(name, "remote source", c, d)?;
                same_size(name, "remote source", c, local_src.size)?;
                in_range(p, name, "remote source", c)?;
            }
            in_range(p, name, "local source", local_src)?;
            in_range(p, name, "local destination", local_dst)?;
        }
        OpKind::Copy { dst, src } | OpKind::CopyPackets { dst, src } | OpKind::UnpackPackets { dst, src } => {
            on_rank(name, "source", src, rank)?;
            on_rank(name, "destination", dst, rank)?;
            same_size(name, "destination", dst, src.size)?;
            match op.kind {
                OpKind::CopyPackets { .. } => scratch(name, "destination", dst)?,
                OpKind::UnpackPackets { .. } => scratch(name, "source", src)?,
                _ => {}
            }
            in_range(p, name, "source", src)?;
            in_range(p, name, "destination", dst)?;
        }
        OpKind::Reduce { src, others, dst, packet, .. } => {
            on_rank(name, "source", src, rank)?;
            on_rank(name, "destination", dst, rank)?;
            same_size(name, "destination", dst, src.size)?;
            if others.is_empty() {
                return Err(PlanError::Empty { op: name, what: "other chunk list" });
            }
            for c in others {
                on_rank(name, "other", c, rank)?;
                same_size(name, "other", c, src.size)?;
                if *packet {
                    scratch(name, "other", c)?;
                }
                in_range(p, name, "other", c)?;
            }
            in_range(p, name, "source", src)?;
            in_range(p, name, "destination", dst)?;
        }
        OpKind::SwitchReduce { channel, buffer_offset, size, dst, .. } => {
            let (ranks, buffer) = switch(p, name, *channel)?;
            if !ranks.contains(&rank) {
                return Err(PlanError::NotSwitchMember { op: name, rank });
            }
            on_rank(name, "destination", dst, rank)?;
            same_size(name, "destination", dst, *size)?;
            for &r in ranks {
                in_range(p, name, "switch buffer", &Chunk::new(r, buffer, *buffer_offset, *size))?;
            }
            in_range(p, name, "destination", dst)?;
        }
        OpKind::SwitchBroadcast { channel, src, buffer_offset, size } => {
            let (ranks, buffer) = switch(p, name, *channel)?;
            if !ranks.contains(&rank) {
                return Err(PlanError::NotSwitchMember { op: name, rank });
            }
            on_rank(name, "source", src, rank)?;
            same_size(name, "source", src, *size)?;
            for &r in ranks {
                in_range(p, name, "switch buffer", &Chunk::new(r, buffer, *buffer_offset, *size))?;
            }
            in_range(p, name, "source", src)?;
        }
        OpKind::SwitchBroadcastPackets { channel, src, buffer_offset, size } => {
            let (ranks, buffer) = switch(p, name, *channel)?;
            if !ranks.contains(&rank) {
                return Err(PlanError::NotSwitchMember { op: name, rank });
            }
            on_rank(name, "source", src, rank)?;
            scratch(name, "source", src)?;
            same_size(name, "source", src, *size)?;
            for &r in ranks {
                let c = Chunk::new(r, buffer, *buffer_offset, *size);
                scratch(name, "switch buffer", &c)?;
                in_range(p, name, "switch buffer", &c)?;
            }
            in_range(p, name, "source", src)?;
        }
        OpKind::Barrier { id, count } => {
            let limit = |what, value| PlanError::OutOfLimits {
                op: name,
                what,
                value,
                allowed: format!("1 to {MAX_THREADBLOCKS}"),
            };
            if !(1..=MAX_THREADBLOCKS).contains(count) {
                return Err(limit("thread-block count", *count));
            }
            if *id >= MAX_THREADBLOCKS {
                return Err(limit("barrier id", *id));
            }
        }
        OpKind::SemRelease { sem } | OpKind::SemAcquire { sem } => {
            let have = p.ranks.get(rank).map_or(0, |r| r.semaphores.len());
            if *sem >= have {
                return Err(PlanError::OutOfLimits {
                    op: name,
                    what: "semaphore",
                    value: *sem,
                    allowed: format!("below the {have} semaphore(s) of rank {rank}"),
                });
            }
        }
    }
    Ok(())
}

impl Program {
    /// A program of `num_ranks` ranks, each with the given buffer sizes (in chunks).
    pub fn new(
        name: impl Into<String>,
        collective: impl Into<String>,
        num_ranks: usize,
        input_chunks: usize,
        output_chunks: usize,
        scratch_chunks: usize,
    ) -> Self {
        let rank =
            RankPlan { input_chunks, output_chunks, scratch_chunks, threadblocks: Vec::new(), semaphores: Vec::new() };
        Program {
            name: name.into(),
            collective: collective.into(),
            in_place: false,
            ranks: vec![rank; num_ranks],
            channels: Vec::new(),
        }
    }

    /// Makes the plan in place (or not): see [`Program::in_place`].
    pub fn set_in_place(&mut self, in_place: bool) {
        self.in_place = in_place;
    }

    /// For an in-place plan, the output chunk where rank `rank`'s input buffer starts (its input
    /// chunk `i` is output chunk `start + i`); `None` for an out-of-place plan. As in MSCCL++, an
    /// allgather's input is the rank's own slice of the output (`start = rank × input_chunks`),
    /// and any other collective's input starts with its output (`start = 0`). An input that does
    /// not fit in the output from there (a reduce-scatter's larger input, where MSCCL++ leaves its
    /// place open) is an error, as is a rank the plan does not have.
    pub fn input_in_output(&self, rank: usize) -> Result<Option<usize>, PlanError> {
        let n = self.ranks.len();
        let rp = self.ranks.get(rank).ok_or(PlanError::RankOutOfRange { op: "in-place layout", rank, num_ranks: n })?;
        if !self.in_place {
            return Ok(None);
        }
        let (input_chunks, output_chunks) = (rp.input_chunks, rp.output_chunks);
        let start = if self.collective == "allgather" { rank.checked_mul(input_chunks) } else { Some(0) };
        match start {
            Some(start) if start.checked_add(input_chunks).is_some_and(|end| end <= output_chunks) => Ok(Some(start)),
            _ => {
                Err(PlanError::InPlaceLayout { rank, input_chunks, output_chunks, start: start.unwrap_or(usize::MAX) })
            }
        }
    }

    /// Where a chunk's data is stored: for an in-place plan, an input chunk is the output chunk
    /// it aliases ([`Program::input_in_output`]); any other chunk is itself. A chunk of a rank
    /// whose layout is invalid is left as it is (the checker refuses such a plan).
    pub fn storage(&self, c: Chunk) -> Chunk {
        match (c.buffer, self.input_in_output(c.rank)) {
            (BufferType::Input, Ok(Some(start))) => Chunk::output(c.rank, start.saturating_add(c.index), c.size),
            _ => c,
        }
    }

    /// Number of ranks.
    pub fn num_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Overrides the buffer sizes of one rank.
    pub fn set_buffers(&mut self, rank: usize, input: usize, output: usize, scratch: usize) -> Result<(), PlanError> {
        let n = self.ranks.len();
        let r = self.ranks.get_mut(rank).ok_or(PlanError::RankOutOfRange { op: "set_buffers", rank, num_ranks: n })?;
        (r.input_chunks, r.output_chunks, r.scratch_chunks) = (input, output, scratch);
        Ok(())
    }

    fn check_rank(&self, op: &'static str, rank: usize) -> Result<(), PlanError> {
        if rank >= self.ranks.len() {
            return Err(PlanError::RankOutOfRange { op, rank, num_ranks: self.ranks.len() });
        }
        Ok(())
    }

    fn p2p_channel(
        &mut self,
        op: &'static str,
        dst_rank: usize,
        src_rank: usize,
        port: bool,
    ) -> Result<usize, PlanError> {
        self.check_rank(op, src_rank)?;
        self.check_rank(op, dst_rank)?;
        if src_rank == dst_rank {
            return Err(PlanError::SelfChannel { op, rank: src_rank });
        }
        self.channels.push(if port {
            Channel::Port { src_rank, dst_rank }
        } else {
            Channel::Memory { src_rank, dst_rank }
        });
        Ok(self.channels.len() - 1)
    }

    /// `MemoryChannel(dst_rank, src_rank)`: a channel that `src_rank` uses to reach `dst_rank`.
    pub fn memory_channel(&mut self, dst_rank: usize, src_rank: usize) -> Result<MemoryChannel, PlanError> {
        let id = self.p2p_channel("MemoryChannel", dst_rank, src_rank, false)?;
        Ok(MemoryChannel { id, src_rank, dst_rank })
    }

    /// `PortChannel(dst_rank, src_rank)`: a proxy channel that `src_rank` uses to reach `dst_rank`.
    pub fn port_channel(&mut self, dst_rank: usize, src_rank: usize) -> Result<PortChannel, PlanError> {
        let id = self.p2p_channel("PortChannel", dst_rank, src_rank, true)?;
        Ok(PortChannel { id, src_rank, dst_rank })
    }

    /// `SwitchChannel(rank_list, buffer_type)`: multicast over the same buffer of `ranks`.
    pub fn switch_channel(&mut self, ranks: Vec<usize>, buffer: BufferType) -> Result<SwitchChannel, PlanError> {
        if ranks.is_empty() {
            return Err(PlanError::Empty { op: "SwitchChannel", what: "rank list" });
        }
        for &r in &ranks {
            self.check_rank("SwitchChannel", r)?;
        }
        self.channels.push(Channel::Switch { ranks, buffer });
        Ok(SwitchChannel { id: self.channels.len() - 1 })
    }

    /// A handle for the local operations of `rank`.
    pub fn rank(&self, rank: usize) -> Result<Rank, PlanError> {
        self.check_rank("Rank", rank)?;
        Ok(Rank { rank })
    }

    /// Validates `kind` on `rank` and appends it to the thread block(s) of `tb`.
    pub fn add_op(&mut self, rank: usize, tb: impl Into<Tb>, kind: OpKind) -> Result<(), PlanError> {
        let name = kind.name();
        self.check_rank(name, rank)?;
        let tb = tb.into();
        validate_op(self, rank, &Op { kind: kind.clone(), tbg: None })?;
        let placements: Vec<(usize, Option<TbgInfo>)> = match &tb {
            Tb::One(t) => vec![(*t, None)],
            Tb::Group(g) => {
                g.tbs.iter().enumerate().map(|(i, &t)| (t, Some(TbgInfo { index: i, size: g.tbs.len() }))).collect()
            }
        };
        for &(t, _) in &placements {
            check_threadblock(name, t)?;
        }
        let tbs = &mut self.ranks[rank].threadblocks;
        for (t, tbg) in placements {
            if tbs.len() <= t {
                tbs.resize_with(t + 1, Vec::new);
            }
            tbs[t].push(Op { kind: kind.clone(), tbg });
        }
        Ok(())
    }
}

/// Handle of a memory channel (see [`Program::memory_channel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryChannel {
    /// Index in [`Program::channels`].
    pub id: usize,
    /// Issuing rank.
    pub src_rank: usize,
    /// Remote rank.
    pub dst_rank: usize,
}

impl MemoryChannel {
    /// Copies the local `src` into the remote `dst`.
    pub fn put(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Put { channel: self.id, dst, src })
    }
    /// Copies the remote `src` into the local `dst`.
    pub fn get(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Get { channel: self.id, dst, src })
    }
    /// Writes the local `src` as packets into the peer's scratch `dst`.
    pub fn put_packets(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::PutPackets { channel: self.id, dst, src })
    }
    /// Forwards packets from the local scratch `src` to the peer's scratch `dst`.
    pub fn read_put_packets(
        &self,
        p: &mut Program,
        dst: Chunk,
        src: Chunk,
        tb: impl Into<Tb>,
    ) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::ReadPutPackets { channel: self.id, dst, src })
    }
    /// `local_dst = op(local_src, remote_srcs...)` (the destination defaults to `local_src`).
    pub fn reduce(
        &self,
        p: &mut Program,
        local_src: Chunk,
        remote_srcs: Vec<Chunk>,
        tb: impl Into<Tb>,
        local_dst: Option<Chunk>,
        reduce_op: ReduceOp,
    ) -> Result<(), PlanError> {
        let local_dst = local_dst.unwrap_or(local_src);
        p.add_op(
            self.src_rank,
            tb,
            OpKind::ChannelReduce { channel: self.id, local_src, remote_srcs, local_dst, reduce_op },
        )
    }
    /// Signals the peer.
    pub fn signal(&self, p: &mut Program, tb: usize, data_sync: SyncType, relaxed: bool) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Signal { channel: self.id, data_sync, relaxed })
    }
    /// Waits for the peer's next signal.
    pub fn wait(&self, p: &mut Program, tb: usize, data_sync: SyncType, relaxed: bool) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Wait { channel: self.id, data_sync, relaxed })
    }
}

/// Handle of a port channel (see [`Program::port_channel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortChannel {
    /// Index in [`Program::channels`].
    pub id: usize,
    /// Issuing rank.
    pub src_rank: usize,
    /// Remote rank.
    pub dst_rank: usize,
}

impl PortChannel {
    /// Asks the proxy to copy the local `src` into the remote `dst`.
    pub fn put(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: usize) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Put { channel: self.id, dst, src })
    }
    /// Put followed by a signal.
    pub fn put_with_signal(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: usize) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::PutWithSignal { channel: self.id, dst, src })
    }
    /// Put, signal and flush.
    pub fn put_with_signal_and_flush(
        &self,
        p: &mut Program,
        dst: Chunk,
        src: Chunk,
        tb: usize,
    ) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::PutWithSignalAndFlush { channel: self.id, dst, src })
    }
    /// Packets through the proxy into the peer's scratch.
    pub fn put_packets(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: usize) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::PutPackets { channel: self.id, dst, src })
    }
    /// Signals the peer (ordered after this channel's earlier puts).
    pub fn signal(&self, p: &mut Program, tb: usize, data_sync: SyncType) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Signal { channel: self.id, data_sync, relaxed: false })
    }
    /// Waits for the peer's next signal.
    pub fn wait(&self, p: &mut Program, tb: usize, data_sync: SyncType) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Wait { channel: self.id, data_sync, relaxed: false })
    }
    /// Waits until the proxy has finished this channel's earlier transfers.
    pub fn flush(&self, p: &mut Program, tb: usize, data_sync: SyncType) -> Result<(), PlanError> {
        p.add_op(self.src_rank, tb, OpKind::Flush { channel: self.id, data_sync })
    }
}

/// Handle of a switch channel (see [`Program::switch_channel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchChannel {
    /// Index in [`Program::channels`].
    pub id: usize,
}

impl SwitchChannel {
    /// On `rank`: reduce `size` chunks at `buffer_offset` of every member into `dst`.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        p: &mut Program,
        rank: usize,
        buffer_offset: usize,
        size: usize,
        dst: Chunk,
        tb: usize,
        reduce_op: ReduceOp,
    ) -> Result<(), PlanError> {
        p.add_op(rank, tb, OpKind::SwitchReduce { channel: self.id, buffer_offset, size, dst, reduce_op })
    }
    /// On `rank`: store `src` at `buffer_offset` of every member.
    pub fn broadcast(
        &self,
        p: &mut Program,
        rank: usize,
        src: Chunk,
        buffer_offset: usize,
        size: usize,
        tb: usize,
    ) -> Result<(), PlanError> {
        p.add_op(rank, tb, OpKind::SwitchBroadcast { channel: self.id, src, buffer_offset, size })
    }
}

/// Handle for the local operations of one rank (see [`Program::rank`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// The rank.
    pub rank: usize,
}

impl Rank {
    /// Local copy.
    pub fn copy(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.rank, tb, OpKind::Copy { dst, src })
    }
    /// Local copy into scratch as packets.
    pub fn copy_packets(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.rank, tb, OpKind::CopyPackets { dst, src })
    }
    /// Local copy out of packets in scratch (waits for them to arrive).
    pub fn unpack_packets(&self, p: &mut Program, dst: Chunk, src: Chunk, tb: impl Into<Tb>) -> Result<(), PlanError> {
        p.add_op(self.rank, tb, OpKind::UnpackPackets { dst, src })
    }
    /// `dst = op(src, others...)` (the destination defaults to `src`); with `packet`, the
    /// others are packets in scratch and the reduction waits for them.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        p: &mut Program,
        src: Chunk,
        others: Vec<Chunk>,
        tb: impl Into<Tb>,
        dst: Option<Chunk>,
        reduce_op: ReduceOp,
        packet: bool,
    ) -> Result<(), PlanError> {
        let dst = dst.unwrap_or(src);
        p.add_op(self.rank, tb, OpKind::Reduce { src, others, dst, reduce_op, packet })
    }
}
