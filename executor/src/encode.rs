//! The host encoder: one rank's part of a [`Program`] as the device records of
//! [`mscclpp_executor_device`], with every offset resolved in the arenas' layout and every
//! operation the executor cannot run refused up front (never a partial run).

use mscclpp_executor_device::{ExecOp, MAX_OTHERS, flags, opcode};
use mscclpp_host::{Error, Result};
use mscclpp_plan::{BufferType, Channel, ChannelType, Chunk, Op, OpKind, Program, RankPlan, ReduceOp, SyncType};

/// Alignment of the arena's regions.
const REGION_ALIGN: u64 = 256;

/// Where one rank's buffers lie in its arena (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the input buffer: 0, or for an in-place plan the place in the output buffer
    /// where the input lies ([`Program::input_in_output`]).
    pub input: u64,
    /// Bytes of the input buffer.
    pub input_bytes: u64,
    /// Offset of the output buffer.
    pub output: u64,
    /// Bytes of the output buffer.
    pub output_bytes: u64,
    /// Offset of the scratch buffer.
    pub scratch: u64,
    /// Bytes of one copy of the packet scratch (0 when the plan uses no packets).
    pub pkt_shift: u64,
    /// Bytes of the whole arena.
    pub bytes: u64,
}

/// One rank's encoded plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The rank.
    pub rank: usize,
    /// Every thread block's operations, block after block.
    pub ops: Vec<ExecOp>,
    /// `blocks + 1` indices into `ops`.
    pub tb_start: Vec<u32>,
    /// This rank's memory-channel table: (channel set, peer) of each entry.
    pub memory: Vec<(usize, usize)>,
    /// This rank's port-channel table: (channel set, peer) of each entry.
    pub port: Vec<(usize, usize)>,
    /// How many memory-channel sets every rank builds (the most channels between two ranks).
    pub memory_sets: usize,
    /// How many port-channel sets every rank builds.
    pub port_sets: usize,
    /// The buffer each switch channel of the plan is bound to, in declaration order: every rank
    /// builds all of them, over every rank (the table [`ExecOp::channel`] indexes).
    pub switch: Vec<BufferType>,
    /// Every rank's arena layout.
    pub layouts: Vec<Layout>,
    /// Bytes of one chunk.
    pub chunk_bytes: u64,
    /// Initial values of this rank's sync counters ([`ExecPlan::sync`](mscclpp_executor_device::ExecPlan::sync)):
    /// one per barrier id the rank uses (0), then one per semaphore (its initial value).
    pub sync: Vec<u64>,
}

impl Encoded {
    /// Thread blocks of this rank (0 for a record list without its leading 0).
    pub fn blocks(&self) -> usize {
        self.tb_start.len().saturating_sub(1)
    }
    /// This rank's layout.
    ///
    /// # Panics
    /// If `rank` is not below `layouts.len()`, which [`encode`] never produces.
    pub fn layout(&self) -> Layout {
        self.layouts[self.rank]
    }
}

fn unsupported(rank: usize, tb: usize, i: usize, op: &Op, why: &str) -> Error {
    Error::Unsupported(format!("executor: rank {rank} thread block {tb} operation {i} ({}): {why}", op.kind.name()))
}

/// The buffer a switch channel is bound to (`None` for another channel or none).
fn switch_buffer(p: &Program, channel: usize) -> Option<BufferType> {
    match p.channels.get(channel) {
        Some(Channel::Switch { buffer, .. }) => Some(*buffer),
        _ => None,
    }
}

/// Whether the operation uses scratch as packets / as plain data ([`OpKind::scratch_uses`],
/// and a switch operation's bound buffer on every member).
fn scratch_uses(p: &Program, k: &OpKind) -> (bool, bool) {
    let (pkt, plain) = k.scratch_uses();
    let bound = match k {
        OpKind::SwitchReduce { channel, .. } | OpKind::SwitchBroadcast { channel, .. } => {
            switch_buffer(p, *channel) == Some(BufferType::Scratch)
        }
        _ => false,
    };
    (pkt, plain || bound)
}

/// Every chunk operand of an operation (a switch operation's range on every member included).
fn chunks(p: &Program, k: &OpKind) -> Vec<Chunk> {
    let members = |channel: &usize, offset: &usize, size: &usize| -> Vec<Chunk> {
        match p.channels.get(*channel) {
            Some(Channel::Switch { ranks, buffer }) => {
                ranks.iter().map(|&r| Chunk::new(r, *buffer, *offset, *size)).collect()
            }
            _ => vec![],
        }
    };
    match k {
        OpKind::Put { dst, src, .. }
        | OpKind::PutWithSignal { dst, src, .. }
        | OpKind::PutWithSignalAndFlush { dst, src, .. }
        | OpKind::Get { dst, src, .. }
        | OpKind::PutPackets { dst, src, .. }
        | OpKind::ReadPutPackets { dst, src, .. }
        | OpKind::Copy { dst, src }
        | OpKind::CopyPackets { dst, src }
        | OpKind::UnpackPackets { dst, src } => vec![*dst, *src],
        OpKind::Reduce { src, others, dst, .. } => [*src, *dst].into_iter().chain(others.iter().copied()).collect(),
        OpKind::ChannelReduce { local_src, remote_srcs, local_dst, .. } => {
            [*local_src, *local_dst].into_iter().chain(remote_srcs.iter().copied()).collect()
        }
        OpKind::SwitchReduce { channel, buffer_offset, size, dst, .. } => {
            [*dst].into_iter().chain(members(channel, buffer_offset, size)).collect()
        }
        OpKind::SwitchBroadcast { channel, src, buffer_offset, size }
        | OpKind::SwitchBroadcastPackets { channel, src, buffer_offset, size } => {
            [*src].into_iter().chain(members(channel, buffer_offset, size)).collect()
        }
        _ => vec![],
    }
}

/// Rank `rank`'s arena layout (`rp`'s buffers in chunks of `chunk_bytes`, the scratch as
/// double-buffered packets with `pkt`; with `in_output`, the input is no region of its own but
/// the output from that chunk on), every size computed without wrapping: a layout that does
/// not fit 64 bits is an error, never a small arena that operations would address past its end.
fn layout(rp: &RankPlan, chunk_bytes: u64, pkt: bool, rank: usize, in_output: Option<usize>) -> Result<Layout> {
    let too_large = || {
        Error::InvalidArgument(format!(
            "executor: rank {rank}'s buffers ({} input, {} output, {} scratch chunks of {chunk_bytes} bytes) do not \
             fit 64 bits",
            rp.input_chunks, rp.output_chunks, rp.scratch_chunks
        ))
    };
    let bytes_of = |chunks: usize, stride: u64| (chunks as u64).checked_mul(stride).ok_or_else(too_large);
    let align = |v: u64| v.checked_next_multiple_of(REGION_ALIGN).ok_or_else(too_large);
    let add = |a: u64, b: u64| a.checked_add(b).ok_or_else(too_large);
    let input_bytes = bytes_of(rp.input_chunks, chunk_bytes)?;
    let output_bytes = bytes_of(rp.output_chunks, chunk_bytes)?;
    let stride = if pkt { chunk_bytes.checked_mul(2).ok_or_else(too_large)? } else { chunk_bytes };
    let one = align(bytes_of(rp.scratch_chunks, stride)?)?;
    let (input, output) = match in_output {
        // In place: the output first, the input inside it.
        Some(start) => (bytes_of(start, chunk_bytes)?, 0),
        None => (0, align(input_bytes)?),
    };
    let scratch = add(output, align(output_bytes)?)?;
    let pkt_shift = if pkt { one } else { 0 };
    let bytes = add(scratch, if pkt { one.checked_mul(2).ok_or_else(too_large)? } else { one })?;
    Ok(Layout { input, input_bytes, output, output_bytes, scratch, pkt_shift, bytes: bytes.max(REGION_ALIGN) })
}

/// Encodes rank `rank`'s part of `p` with chunks of `chunk_bytes` (a positive multiple of 16).
/// The plan should have passed [`mscclpp_plan::check()`]; this refuses what the executor cannot
/// run: switch channels over fewer than every rank of the plan, or bound to a buffer that does
/// not lie at the same place, with the same size, in every rank's arena (every rank's copy of a
/// switch buffer must be at the same offset);
/// reductions (local, channel or switch) other than sum, or with more than [`MAX_OTHERS`] other
/// operands; packets over port channels; thread-block groups on synchronisation; and scratch
/// used both as packets and as plain data (a switch channel bound to scratch uses it as plain
/// data).
pub fn encode(p: &Program, rank: usize, chunk_bytes: u64) -> Result<Encoded> {
    check_arguments(p, rank, chunk_bytes)?;
    let pkt = packet_scratch(p)?;
    let layouts = layouts(p, chunk_bytes, pkt)?;
    let (switch, switch_index) = switch_channels(p, &layouts)?;
    let channels = channel_tables(p, rank);
    let (barrier_ids, sync) = sync_counters(p, rank);
    let tables = Tables {
        p,
        rank,
        chunk_bytes,
        pkt,
        layouts: &layouts,
        table_index: &channels.table_index,
        switch_index: &switch_index,
        barrier_ids: &barrier_ids,
    };
    let mut ops = vec![];
    let mut tb_start = vec![0u32];
    for (tb, list) in p.ranks[rank].threadblocks.iter().enumerate() {
        for (i, op) in list.iter().enumerate() {
            ops.push(OpEncoder { t: &tables, tb, i, op }.encode()?);
        }
        tb_start.push(ops.len() as u32);
    }
    let ChannelTables { memory, port, memory_sets, port_sets, .. } = channels;
    Ok(Encoded { rank, ops, tb_start, memory, port, memory_sets, port_sets, switch, layouts, chunk_bytes, sync })
}

/// A rank of the plan, and a chunk size that is a positive multiple of 16.
fn check_arguments(p: &Program, rank: usize, chunk_bytes: u64) -> Result<()> {
    let n = p.ranks.len();
    if rank >= n {
        return Err(Error::InvalidArgument(format!("executor: rank {rank} but the plan has {n} ranks")));
    }
    if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(16) {
        return Err(Error::InvalidArgument(format!(
            "executor: chunk_bytes {chunk_bytes} is not a positive multiple of 16"
        )));
    }
    Ok(())
}

/// Whether the scratch holds packets (else plain data): decided for the whole plan (every rank
/// lays out alike); a plan that uses it both ways is refused.
fn packet_scratch(p: &Program) -> Result<bool> {
    let (mut pkt, mut plain) = (false, false);
    for r in &p.ranks {
        for op in r.threadblocks.iter().flatten() {
            let (a, b) = scratch_uses(p, &op.kind);
            pkt |= a;
            plain |= b;
        }
    }
    if pkt && plain {
        return Err(Error::Unsupported(
            "executor: the plan uses scratch both for packets and for plain data (one or the other is supported)"
                .into(),
        ));
    }
    Ok(pkt)
}

/// Every rank's arena layout.
fn layouts(p: &Program, chunk_bytes: u64, pkt: bool) -> Result<Vec<Layout>> {
    p.ranks
        .iter()
        .enumerate()
        .map(|(r, rp)| {
            let in_output = p.input_in_output(r).map_err(|e| Error::InvalidArgument(format!("executor: {e}")))?;
            layout(rp, chunk_bytes, pkt, r, in_output)
        })
        .collect()
}

/// The switch channels' bound buffers in declaration order, and each channel's index among
/// them. Every rank builds every one, over all ranks and the whole arena, so a switch offset is
/// the same in every rank's copy: a channel over fewer ranks, or bound to a buffer that lies
/// elsewhere in some rank's arena, is refused.
fn switch_channels(p: &Program, layouts: &[Layout]) -> Result<(Vec<BufferType>, Vec<Option<u32>>)> {
    let n = p.ranks.len();
    let mut switch = vec![];
    let mut switch_index = vec![None; p.channels.len()];
    for (c, ch) in p.channels.iter().enumerate() {
        if let Channel::Switch { ranks, buffer } = ch {
            let mut members = ranks.clone();
            members.sort_unstable();
            members.dedup();
            if members.len() != n || members.iter().enumerate().any(|(i, &r)| i != r) {
                return Err(Error::Unsupported(format!(
                    "executor: switch channel {c} is over ranks {ranks:?}: switch channels are built over every rank \
                     of the plan (0 to {})",
                    n - 1
                )));
            }
            // A switch offset is the same offset into every rank's arena: the bound buffer must
            // lie at the same place, with the same size, in arenas of the same size.
            let place = |l: &Layout| {
                let (at, bytes) = match buffer {
                    BufferType::Input => (l.input, l.input_bytes),
                    BufferType::Output => (l.output, l.output_bytes),
                    BufferType::Scratch => (l.scratch, l.bytes.saturating_sub(l.scratch)),
                };
                (at, bytes, l.bytes, l.pkt_shift)
            };
            if let Some(q) = (1..n).find(|&q| place(&layouts[q]) != place(&layouts[0])) {
                let (a, b) = (&p.ranks[q], &p.ranks[0]);
                if (a.input_chunks, a.output_chunks, a.scratch_chunks)
                    == (b.input_chunks, b.output_chunks, b.scratch_chunks)
                {
                    return Err(Error::Unsupported(format!(
                        "executor: switch channel {c} needs every rank's {buffer} at the same place of its arena, \
                         and rank {q}'s input lies at byte {} of its arena, rank 0's at byte {} (an in-place \
                         allgather puts each rank's input in its own slice of the output)",
                        layouts[q].input, layouts[0].input
                    )));
                }
                return Err(Error::Unsupported(format!(
                    "executor: switch channel {c} needs every rank's arena laid out alike, and rank {q}'s buffers \
                     ({} input, {} output, {} scratch chunks) differ from rank 0's ({}, {}, {})",
                    p.ranks[q].input_chunks,
                    p.ranks[q].output_chunks,
                    p.ranks[q].scratch_chunks,
                    p.ranks[0].input_chunks,
                    p.ranks[0].output_chunks,
                    p.ranks[0].scratch_chunks
                )));
            }
            switch_index[c] = Some(switch.len() as u32);
            switch.push(*buffer);
        }
    }
    Ok((switch, switch_index))
}

/// A rank's memory- and port-channel tables.
struct ChannelTables {
    memory: Vec<(usize, usize)>,
    port: Vec<(usize, usize)>,
    /// Per channel of the plan: its index in this rank's table of its type, if it is this rank's.
    table_index: Vec<Option<u32>>,
    memory_sets: usize,
    port_sets: usize,
}

/// Rank `rank`'s channel tables: the k-th channel of a type from r to q is in set k on both sides.
fn channel_tables(p: &Program, rank: usize) -> ChannelTables {
    let mut memory = vec![];
    let mut port = vec![];
    let mut table_index = vec![None; p.channels.len()];
    let (mut memory_sets, mut port_sets) = (0, 0);
    let mut counts = std::collections::HashMap::new();
    for (c, ch) in p.channels.iter().enumerate() {
        let (ty, (src, dst)) = match ch.endpoints() {
            Some(e) => (ch.channel_type(), e),
            None => continue,
        };
        let k = counts.entry((ty, src, dst)).or_insert(0usize);
        let set = *k;
        *k += 1;
        match ty {
            ChannelType::Memory => memory_sets = memory_sets.max(set + 1),
            _ => port_sets = port_sets.max(set + 1),
        }
        if src == rank {
            let table = if ty == ChannelType::Memory { &mut memory } else { &mut port };
            table_index[c] = Some(table.len() as u32);
            table.push((set, dst));
        }
    }
    ChannelTables { memory, port, table_index, memory_sets, port_sets }
}

/// Rank `rank`'s sync counters: its barrier ids in order of first use (each counter starts at
/// 0), then its semaphores (at their initial values).
fn sync_counters(p: &Program, rank: usize) -> (Vec<usize>, Vec<u64>) {
    let mut barrier_ids: Vec<usize> = vec![];
    for op in p.ranks[rank].threadblocks.iter().flatten() {
        if let OpKind::Barrier { id, .. } = op.kind
            && !barrier_ids.contains(&id)
        {
            barrier_ids.push(id);
        }
    }
    let mut sync = vec![0u64; barrier_ids.len()];
    sync.extend(&p.ranks[rank].semaphores);
    (barrier_ids, sync)
}

/// What encoding one rank's operations needs from the plan-wide steps.
struct Tables<'a> {
    p: &'a Program,
    rank: usize,
    chunk_bytes: u64,
    /// The scratch holds packets.
    pkt: bool,
    layouts: &'a [Layout],
    /// [`ChannelTables::table_index`].
    table_index: &'a [Option<u32>],
    /// Per channel of the plan: its index among the switch channels.
    switch_index: &'a [Option<u32>],
    barrier_ids: &'a [usize],
}

impl Tables<'_> {
    /// The arena offset of byte `start` of chunk `c`. In range of u64: every chunk lies in its
    /// buffer (checked before any offset is taken), and every buffer in an arena whose size was
    /// computed without wrapping.
    fn off(&self, c: &Chunk, start: u64) -> u64 {
        let l = &self.layouts[c.rank];
        let chunk_bytes = self.chunk_bytes;
        let scratch_stride = if self.pkt { 2 * chunk_bytes } else { chunk_bytes };
        match c.buffer {
            BufferType::Input => l.input + c.index as u64 * chunk_bytes + start,
            BufferType::Output => l.output + c.index as u64 * chunk_bytes + start,
            BufferType::Scratch if self.pkt => l.scratch + c.index as u64 * scratch_stride + 2 * start,
            BufferType::Scratch => l.scratch + c.index as u64 * chunk_bytes + start,
        }
    }

    /// Whether chunk `c` holds packets.
    fn is_pkt(&self, c: &Chunk) -> bool {
        self.pkt && c.buffer == BufferType::Scratch
    }
}

/// The flags of a memory channel's signal or wait.
fn sync_flags(data_sync: SyncType, relaxed: bool) -> u32 {
    if relaxed || data_sync == SyncType::None { flags::RELAXED } else { 0 }
}

/// Operation `i` of thread block `tb`, being encoded.
struct OpEncoder<'a> {
    t: &'a Tables<'a>,
    tb: usize,
    i: usize,
    op: &'a Op,
}

impl OpEncoder<'_> {
    fn err(&self, why: &str) -> Error {
        unsupported(self.t.rank, self.tb, self.i, self.op, why)
    }

    /// The table index of channel `c`, which must be this rank's and of type `want`.
    fn channel(&self, c: usize, want: ChannelType) -> Result<u32> {
        match (self.t.p.channels.get(c), self.t.table_index.get(c).copied().flatten()) {
            (Some(ch), Some(t)) if ch.channel_type() == want => Ok(t),
            _ => Err(self.err(&format!("channel {c} is not a {want} channel of this rank"))),
        }
    }

    /// (table index, bound buffer) of a switch channel: every one is over every rank, this one
    /// included ([`switch_channels`] refused the others).
    fn switch_channel(&self, c: usize) -> Result<(u32, BufferType)> {
        match (self.t.p.channels.get(c), self.t.switch_index.get(c).copied().flatten()) {
            (Some(Channel::Switch { buffer, .. }), Some(t)) => Ok((t, *buffer)),
            _ => Err(self.err(&format!("channel {c} is not a switch channel of this rank"))),
        }
    }

    /// This block's byte range of chunk `c`: a thread-block group splits the data.
    fn span(&self, c: &Chunk) -> (u64, u64) {
        let total = c.size as u64 * self.t.chunk_bytes;
        match self.op.tbg {
            Some(g) if g.size > 1 => {
                // Saturating: `encode` may be given a plan that skipped the checker
                // (a group index at or past its size); it must not panic on it.
                let part = total.div_ceil(g.size as u64).div_ceil(16).saturating_mul(16);
                let start = (g.index as u64).saturating_mul(part).min(total);
                (start, part.min(total - start))
            }
            _ => (0, total),
        }
    }

    /// A data movement of opcode `kind` from `src` to `dst` (this block's span of them).
    fn data(&self, e: &mut ExecOp, kind: u32, dst: &Chunk, src: &Chunk) {
        let (start, len) = self.span(src);
        e.kind = kind;
        e.dst = self.t.off(dst, start);
        e.src = self.t.off(src, start);
        e.bytes = len;
        if self.t.is_pkt(dst) {
            e.flags |= flags::DST_PKT_SCRATCH;
        }
        if self.t.is_pkt(src) {
            e.flags |= flags::SRC_PKT_SCRATCH;
        }
    }

    /// Every chunk operand lies in its buffer and is not empty, and thread-block groups are only
    /// on data movement.
    fn check_operands(&self) -> Result<()> {
        let p = self.t.p;
        for c in chunks(p, &self.op.kind) {
            let have = p.ranks.get(c.rank).map(|r| r.buffer_chunks(c.buffer)).unwrap_or(0);
            if c.size == 0 || c.index.checked_add(c.size).is_none_or(|end| end > have) {
                return Err(self.err(&format!("chunk {c} is outside its {have}-chunk buffer or empty")));
            }
        }
        if self.op.tbg.is_some_and(|g| g.size > 1)
            && matches!(
                self.op.kind,
                OpKind::Signal { .. }
                    | OpKind::Wait { .. }
                    | OpKind::Flush { .. }
                    | OpKind::Barrier { .. }
                    | OpKind::SemRelease { .. }
                    | OpKind::SemAcquire { .. }
            )
        {
            return Err(
                self.err("thread-block groups on signal, wait, flush, barriers or semaphores are not supported")
            );
        }
        Ok(())
    }

    /// The device record of the operation.
    fn encode(&self) -> Result<ExecOp> {
        self.check_operands()?;
        let (p, rank) = (self.t.p, self.t.rank);
        let mut e = ExecOp { kind: 0, channel: 0, flags: 0, n_others: 0, dst: 0, src: 0, bytes: 0, others: [0; 7] };
        let op = self.op;
        match &op.kind {
            OpKind::Put { channel: c, dst, src } => match p.channels.get(*c).map(Channel::channel_type) {
                Some(ChannelType::Port) => {
                    e.channel = self.channel(*c, ChannelType::Port)?;
                    self.data(&mut e, opcode::PORT_PUT, dst, src);
                }
                _ => {
                    e.channel = self.channel(*c, ChannelType::Memory)?;
                    self.data(&mut e, opcode::PUT, dst, src);
                }
            },
            OpKind::PutWithSignal { channel: c, dst, src } => {
                e.channel = self.channel(*c, ChannelType::Port)?;
                self.data(&mut e, opcode::PORT_PUT_WITH_SIGNAL, dst, src);
            }
            OpKind::PutWithSignalAndFlush { channel: c, dst, src } => {
                e.channel = self.channel(*c, ChannelType::Port)?;
                self.data(&mut e, opcode::PORT_PUT_WITH_SIGNAL_AND_FLUSH, dst, src);
            }
            OpKind::Get { channel: c, dst, src } => {
                e.channel = self.channel(*c, ChannelType::Memory)?;
                self.data(&mut e, opcode::GET, dst, src);
            }
            OpKind::PutPackets { channel: c, dst, src } => {
                if p.channels.get(*c).map(Channel::channel_type) == Some(ChannelType::Port) {
                    return Err(self.err("packets over port channels are not supported"));
                }
                e.channel = self.channel(*c, ChannelType::Memory)?;
                self.data(&mut e, opcode::PUT_PACKETS, dst, src);
            }
            OpKind::ReadPutPackets { channel: c, dst, src } => {
                e.channel = self.channel(*c, ChannelType::Memory)?;
                self.data(&mut e, opcode::READ_PUT_PACKETS, dst, src);
            }
            OpKind::Signal { channel: c, data_sync, relaxed } => match p.channels.get(*c).map(Channel::channel_type) {
                Some(ChannelType::Port) => {
                    e.channel = self.channel(*c, ChannelType::Port)?;
                    e.kind = opcode::PORT_SIGNAL;
                }
                _ => {
                    e.channel = self.channel(*c, ChannelType::Memory)?;
                    e.kind = opcode::SIGNAL;
                    e.flags = sync_flags(*data_sync, *relaxed);
                }
            },
            OpKind::Wait { channel: c, data_sync, relaxed } => match p.channels.get(*c).map(Channel::channel_type) {
                Some(ChannelType::Port) => {
                    e.channel = self.channel(*c, ChannelType::Port)?;
                    e.kind = opcode::PORT_WAIT;
                }
                _ => {
                    e.channel = self.channel(*c, ChannelType::Memory)?;
                    e.kind = opcode::WAIT;
                    e.flags = sync_flags(*data_sync, *relaxed);
                }
            },
            OpKind::Flush { channel: c, .. } => {
                e.channel = self.channel(*c, ChannelType::Port)?;
                e.kind = opcode::PORT_FLUSH;
            }
            OpKind::Copy { dst, src } => self.data(&mut e, opcode::COPY, dst, src),
            OpKind::CopyPackets { dst, src } => self.data(&mut e, opcode::COPY_PACKETS, dst, src),
            OpKind::UnpackPackets { dst, src } => self.data(&mut e, opcode::UNPACK_PACKETS, dst, src),
            OpKind::Reduce { src, others, dst, reduce_op, packet } => {
                if *reduce_op != ReduceOp::Sum {
                    return Err(self.err(&format!("reduction {reduce_op:?} (only Sum is supported)")));
                }
                if others.len() > MAX_OTHERS {
                    return Err(self.err(&format!("{} other operands (at most {MAX_OTHERS})", others.len())));
                }
                if *packet && others.iter().any(|o| !self.t.is_pkt(o)) {
                    return Err(self.err("packet operands must be in scratch"));
                }
                self.data(&mut e, opcode::REDUCE, dst, src);
                let (start, _) = self.span(src);
                for (k, o) in others.iter().enumerate() {
                    e.others[k] = self.t.off(o, start);
                }
                e.n_others = others.len() as u32;
                if *packet {
                    e.flags |= flags::PACKET_OTHERS;
                }
            }
            OpKind::ChannelReduce { channel: c, local_src, remote_srcs, local_dst, reduce_op } => {
                if *reduce_op != ReduceOp::Sum {
                    return Err(self.err(&format!("reduction {reduce_op:?} (only Sum is supported)")));
                }
                if remote_srcs.len() > MAX_OTHERS {
                    return Err(self.err(&format!("{} remote operands (at most {MAX_OTHERS})", remote_srcs.len())));
                }
                e.channel = self.channel(*c, ChannelType::Memory)?;
                let peer = p.channels[*c].endpoints().map(|(_, d)| d);
                if let Some(o) = remote_srcs.iter().find(|o| Some(o.rank) != peer) {
                    return Err(self.err(&format!("remote operand {o} is not on the channel's peer")));
                }
                if local_src.rank != rank || local_dst.rank != rank {
                    return Err(self.err("the local operands must be on this rank"));
                }
                self.data(&mut e, opcode::CHANNEL_REDUCE, local_dst, local_src);
                let (start, _) = self.span(local_src);
                for (k, o) in remote_srcs.iter().enumerate() {
                    e.others[k] = self.t.off(o, start);
                }
                e.n_others = remote_srcs.len() as u32;
            }
            OpKind::SwitchReduce { channel: c, buffer_offset, size, dst, reduce_op } => {
                if *reduce_op != ReduceOp::Sum {
                    return Err(self.err(&format!("reduction {reduce_op:?} (only Sum is supported)")));
                }
                let (table, buffer) = self.switch_channel(*c)?;
                e.channel = table;
                self.data(&mut e, opcode::SWITCH_REDUCE, dst, &Chunk::new(rank, buffer, *buffer_offset, *size));
            }
            OpKind::SwitchBroadcast { channel: c, src, buffer_offset, size } => {
                let (table, buffer) = self.switch_channel(*c)?;
                e.channel = table;
                self.data(&mut e, opcode::SWITCH_BROADCAST, &Chunk::new(rank, buffer, *buffer_offset, *size), src);
            }
            OpKind::SwitchBroadcastPackets { channel: c, src, buffer_offset, size } => {
                let (table, buffer) = self.switch_channel(*c)?;
                e.channel = table;
                let dst = Chunk::new(rank, buffer, *buffer_offset, *size);
                if !self.t.is_pkt(&dst) || !self.t.is_pkt(src) {
                    return Err(self.err("packets through a switch channel need scratch on both sides"));
                }
                self.data(&mut e, opcode::SWITCH_BROADCAST_PACKETS, &dst, src);
            }
            OpKind::Barrier { id, count } => {
                e.kind = opcode::BARRIER;
                e.channel = self.t.barrier_ids.iter().position(|b| b == id).expect("collected above") as u32;
                e.bytes = *count as u64;
            }
            OpKind::SemRelease { sem } | OpKind::SemAcquire { sem } => {
                if *sem >= p.ranks[rank].semaphores.len() {
                    return Err(self.err(&format!("semaphore {sem} is not one of this rank's")));
                }
                e.kind = if matches!(op.kind, OpKind::SemRelease { .. }) {
                    opcode::SEM_RELEASE
                } else {
                    opcode::SEM_ACQUIRE
                };
                e.channel = (self.t.barrier_ids.len() + sem) as u32;
            }
        }
        Ok(e)
    }
}
