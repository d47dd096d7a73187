//! Reader for MSCCL++'s execution-plan JSON (the compiler output that its executor loads).
//!
//! The reader understands every operation MSCCL++'s DSL writes (at the pinned commit of
//! `tests/mscclpp/`): `signal`, `wait`, `rlxsignal`,
//! `rlxwait`, `flush`, `put`, `get`, `ppkt`, `rppkt`, `pws`, `pwsf`, `copy`, `cpkt`, `upkt`,
//! `re`, `repkt`, `rre`, the fused `res`, `respkt`, `rres` (read as their reduction followed
//! by puts of the result) and `recpkt`, `recspkt` (a packet reduction followed by packet copies
//! of the result into the other scratch destinations, and for `recspkt` packet puts to peers),
//! and the switch operations `glre` (a [`OpKind::SwitchReduce`]), `gstore` (a
//! [`OpKind::SwitchBroadcast`]) and `glres` (a reduction into this rank's own copy of the
//! switch buffer, then a broadcast of it), `barrier` ([`OpKind::Barrier`]) and `sem_acquire` /
//! `sem_release` (one [`OpKind::SemAcquire`] / [`OpKind::SemRelease`] per semaphore id, the GPU's
//! `semaphores` giving [`RankPlan::semaphores`]); it skips `nop` (a barrier inside one thread
//! block). A `pipeline` is read as its operations in its place, once: MSCCL++ runs its body
//! `ceil(chunk bytes / unit_size)` times over successive `unit_size`-byte slices of the chunks,
//! which is once over whole chunks when a chunk is at most `unit_size` bytes, and that is how
//! the executor runs it at any chunk size (the slicing only staggers the same work in time).
//! `gstorepkt` (LL packets of this rank's scratch stored into every member's bound scratch) is
//! a [`OpKind::SwitchBroadcastPackets`]. Any other operation, or channel type, fails the whole
//! read with [`ReadError::Unsupported`] naming it: a plan is never imported partially.
//!
//! A GPU's `k`-th switch channel (`rank_groups`, `buffer_type`) is taken to be the same channel
//! as every other member's `k`-th one (MSCCL++ builds them collectively, in that order), and
//! becomes one [`Channel::Switch`]; the executor runs it as its emulated switch channel where
//! NVLink multicast is not used.
//!
//! # Plan-wide settings
//!
//! Every top-level field is read, and one this crate cannot honour fails the read with
//! [`ReadError::UnsupportedSetting`] naming it and its value (so does a field this reader does not
//! know). `inplace` and `protocol` are required, as MSCCL++'s executor requires them.
//!
//! - `inplace`: `true` gives an in-place [`Program`] ([`Program::in_place`]: each rank's input is
//!   part of its output, at [`Program::input_in_output`]); refused where the input does not fit
//!   in the output there (a reduce-scatter's larger input).
//! - `protocol`: `"Simple"` or `"LL"`; whether scratch holds packets is decided here by the
//!   operations (packet operations are LL), so both are accepted as written.
//! - `use_double_scratch_buffer`: MSCCL++ then alternates two copies of the scratch between
//!   launches. The executor always does that for packet scratch, so `true` is accepted for a plan
//!   whose scratch holds packets or that has none, and refused for plain scratch, which the
//!   executor does not alternate; `false` is accepted (alternating only adds room).
//! - `reuse_resources`: `true` makes MSCCL++ give the plan a fixed-size shared scratch, whose
//!   chunks wrap (offsets modulo its chunk size) once data chunks outgrow it, for pipelines that
//!   reuse scratch slice after slice. The executor sizes scratch chunks like data chunks, so
//!   nothing wraps: the plan runs as MSCCL++ runs it when its chunks fit. Accepted either way.
//! - `buffer_alignment` (bytes, default 16): chunk sizes must be multiples of it. The executor's
//!   chunks are multiples of 16 bytes, so a divisor of 16 is accepted and any other value
//!   (0, 32, ...) refused.
//! - `num_threads_per_block`, `min_message_size`, `max_message_size`: launch and selection
//!   hints (the executor's `Config::threads`, the caller's choice of chunk size): read, held to
//!   be numbers, and not carried.
//!
//! # Layout
//!
//! In that format, each GPU lists its channels per type (`connected_to` peers), its remote
//! buffers (rank and buffer type), and per thread block the GPU channels and remote buffers it
//! uses; operations refer to those by position in the thread block's lists. The `k`-th channel
//! of one type from rank `a` to rank `b` is taken to be connected to the `k`-th one from `b` to
//! `a`, which is how this crate pairs channels too.

use crate::builder::{MAX_RANKS, MAX_THREADBLOCKS, PlanError, validate_op};
use crate::plan::*;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use thiserror::Error;

/// Why an MSCCL++ plan could not be imported.
#[derive(Debug, Error)]
pub enum ReadError {
    /// Not JSON, or missing required fields.
    #[error("not an MSCCL++ execution plan: {0}")]
    Json(#[from] serde_json::Error),
    /// An operation or channel type this crate does not model.
    #[error("gpu {gpu} tb {tb} op {index}: unsupported operation \"{name}\"{detail}")]
    Unsupported {
        /// GPU (rank).
        gpu: usize,
        /// Thread block (`usize::MAX` for a GPU-level channel).
        tb: usize,
        /// Position of the operation.
        index: usize,
        /// Operation (or channel type) name as written in the plan.
        name: String,
        /// More detail, if any.
        detail: String,
    },
    /// A channel type this reader does not know (MSCCL++ writes "memory", "port" and "switch").
    #[error("gpu {gpu}: unsupported channel type \"{channel_type}\"")]
    UnsupportedChannel {
        /// GPU (rank).
        gpu: usize,
        /// Channel type as written in the plan.
        channel_type: String,
    },
    /// A reference that does not resolve (channel, remote buffer, buffer type, operand count).
    #[error("gpu {gpu} tb {tb} op {index} ({name}): {what}")]
    Malformed {
        /// GPU (rank).
        gpu: usize,
        /// Thread block.
        tb: usize,
        /// Position of the operation.
        index: usize,
        /// Operation name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// A plan-wide setting (a top-level field) with a value this crate cannot honour, or a
    /// field this reader does not know.
    #[error("unsupported plan setting \"{field}\": {value} ({why})")]
    UnsupportedSetting {
        /// The field, as written in the plan.
        field: String,
        /// Its value, as JSON.
        value: String,
        /// Why it cannot be honoured.
        why: String,
    },
    /// The operation breaks one of the DSL's rules.
    #[error("gpu {gpu} tb {tb} op {index}: {error}")]
    Invalid {
        /// GPU (rank).
        gpu: usize,
        /// Thread block.
        tb: usize,
        /// Position of the operation.
        index: usize,
        /// The rule.
        error: PlanError,
    },
}

#[derive(Deserialize)]
struct MPlan {
    name: String,
    #[serde(default)]
    collective: String,
    inplace: bool,
    protocol: String,
    // Held to be a boolean; changes nothing the executor runs (see the module documentation).
    #[serde(default, rename = "reuse_resources")]
    _reuse_resources: bool,
    #[serde(default)]
    use_double_scratch_buffer: bool,
    #[serde(default = "default_alignment")]
    buffer_alignment: u64,
    // Hints, held to be numbers and not carried.
    #[serde(default, rename = "num_threads_per_block")]
    _num_threads_per_block: Option<u64>,
    #[serde(default, rename = "min_message_size")]
    _min_message_size: Option<u64>,
    #[serde(default, rename = "max_message_size")]
    _max_message_size: Option<u64>,
    gpus: Vec<MGpu>,
    /// Any other top-level field.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

fn default_alignment() -> u64 {
    16
}

/// The alignment the executor's chunks always have (a multiple of 16 bytes).
const CHUNK_ALIGN: u64 = 16;

#[derive(Deserialize)]
struct MGpu {
    id: usize,
    input_chunks: usize,
    output_chunks: usize,
    scratch_chunks: usize,
    #[serde(default)]
    threadblocks: Vec<MTb>,
    #[serde(default)]
    channels: Vec<MChannel>,
    #[serde(default)]
    remote_buffers: Vec<MRemote>,
    /// Semaphores between the GPU's thread blocks.
    #[serde(default)]
    semaphores: Vec<MSemaphore>,
}

#[derive(Deserialize)]
struct MSemaphore {
    init_value: u64,
}

#[derive(Deserialize)]
struct MChannel {
    channel_type: String,
    #[serde(default)]
    connected_to: Vec<usize>,
    /// Switch channels: the buffer bound on every member.
    #[serde(default)]
    buffer_type: Option<String>,
    /// Switch channels: the member ranks (one group).
    #[serde(default)]
    rank_groups: Vec<MRankGroup>,
}

#[derive(Deserialize)]
struct MRankGroup {
    ranks: Vec<usize>,
}

#[derive(Deserialize)]
struct MRemote {
    rank: usize,
    #[serde(rename = "type")]
    buffer: String,
}

#[derive(Deserialize)]
struct MTb {
    id: usize,
    ops: Vec<Value>,
    #[serde(default)]
    channels: Vec<MTbChannels>,
    #[serde(default)]
    remote_buffer_refs: Vec<MRefs>,
}

#[derive(Deserialize)]
struct MTbChannels {
    channel_type: String,
    channel_ids: Vec<usize>,
}

#[derive(Deserialize)]
struct MRefs {
    access_channel_type: String,
    remote_buffer_ids: Vec<usize>,
}

#[derive(Deserialize)]
struct MOp {
    #[serde(default)]
    src_buff: Vec<MBuf>,
    #[serde(default)]
    dst_buff: Vec<MBuf>,
    #[serde(default)]
    channel_ids: Vec<usize>,
    #[serde(default)]
    channel_type: Option<String>,
    #[serde(default)]
    reduce_op: Option<String>,
    #[serde(default)]
    tbg_info: Option<MTbg>,
    /// `glre`: the offset and size in the switch channel's buffer, and the local destination.
    #[serde(default)]
    buffer_offset: Option<usize>,
    #[serde(default)]
    size: Option<usize>,
    #[serde(default)]
    dst_chunk: Option<MBuf>,
    /// `barrier`.
    #[serde(default)]
    barrier_id: Option<usize>,
    #[serde(default)]
    num_threadblocks: Option<usize>,
    /// `sem_acquire`, `sem_release`.
    #[serde(default)]
    semaphore_ids: Vec<usize>,
}

#[derive(Deserialize)]
struct MBuf {
    #[serde(rename = "type", default)]
    buffer: Option<String>,
    #[serde(default)]
    buffer_id: Option<usize>,
    /// An operand in a switch channel's buffer: the thread block's switch channel.
    #[serde(default)]
    switch_channel_id: Option<usize>,
    index: usize,
    size: usize,
}

#[derive(Deserialize)]
struct MTbg {
    tb_id: usize,
    tbg_size: usize,
}

const SUPPORTED: &[&str] = &[
    "nop",
    "signal",
    "wait",
    "rlxsignal",
    "rlxwait",
    "flush",
    "put",
    "get",
    "ppkt",
    "rppkt",
    "pws",
    "pwsf",
    "copy",
    "cpkt",
    "upkt",
    "re",
    "repkt",
    "rre",
    "res",
    "respkt",
    "rres",
    "recpkt",
    "recspkt",
    "glre",
    "gstore",
    "glres",
    "gstorepkt",
    "barrier",
    "sem_acquire",
    "sem_release",
];

fn channel_type(s: &str) -> Option<ChannelType> {
    match s {
        "memory" => Some(ChannelType::Memory),
        "port" => Some(ChannelType::Port),
        "switch" | "nvls" => Some(ChannelType::Switch),
        _ => None,
    }
}

fn buffer_type(s: &str) -> Option<BufferType> {
    match s {
        "i" => Some(BufferType::Input),
        "o" => Some(BufferType::Output),
        "s" => Some(BufferType::Scratch),
        _ => None,
    }
}

/// Resolved operand: a chunk and whether it is remote.
type Operand = (Chunk, bool);

/// Imports an MSCCL++ execution plan. The result still has to pass [`crate::check()`].
pub fn read(text: &str) -> Result<Program, ReadError> {
    let m: MPlan = serde_json::from_str(text)?;
    // Ids come from the file: held to the limits before anything is sized by them.
    let limit = |gpu: usize, tb: usize, name: &str, what: String| ReadError::Malformed {
        gpu,
        tb,
        index: 0,
        name: name.into(),
        what,
    };
    for g in &m.gpus {
        if g.id >= MAX_RANKS {
            return Err(limit(g.id, 0, "gpu", format!("gpu id {} (at most {})", g.id, MAX_RANKS - 1)));
        }
        if let Some(tb) = g.threadblocks.iter().find(|tb| tb.id >= MAX_THREADBLOCKS) {
            let what = format!("thread block id {} (at most {})", tb.id, MAX_THREADBLOCKS - 1);
            return Err(limit(g.id, tb.id, "threadblock", what));
        }
    }
    let setting = |field: &str, value: String, why: &str| ReadError::UnsupportedSetting {
        field: field.into(),
        value,
        why: why.into(),
    };
    if let Some((field, value)) = m.other.iter().next() {
        return Err(setting(field, value.to_string(), "not a setting this reader knows"));
    }
    if !matches!(m.protocol.as_str(), "Simple" | "LL") {
        return Err(setting("protocol", format!("{:?}", m.protocol), "MSCCL++ knows \"Simple\" and \"LL\""));
    }
    if m.buffer_alignment == 0 || !CHUNK_ALIGN.is_multiple_of(m.buffer_alignment) {
        let why = "the executor's chunks are multiples of 16 bytes: only divisors of 16 are honoured";
        return Err(setting("buffer_alignment", m.buffer_alignment.to_string(), why));
    }
    let n = m.gpus.iter().map(|g| g.id + 1).max().unwrap_or(0);
    let mut p = Program::new(m.name, m.collective, n, 0, 0, 0);
    p.set_in_place(m.inplace);
    // GPU-level channels: (gpu, type) -> program channel ids.
    let mut gchan: HashMap<(usize, ChannelType), Vec<usize>> = HashMap::new();
    // (members, k) -> program channel of the members' k-th switch channel.
    let mut switch_ids: HashMap<(Vec<usize>, usize), usize> = HashMap::new();
    for g in &m.gpus {
        p.ranks[g.id].input_chunks = g.input_chunks;
        p.ranks[g.id].output_chunks = g.output_chunks;
        p.ranks[g.id].scratch_chunks = g.scratch_chunks;
        p.ranks[g.id].semaphores = g.semaphores.iter().map(|s| s.init_value).collect();
        for c in &g.channels {
            let t = channel_type(&c.channel_type);
            if t == Some(ChannelType::Switch) {
                // The k-th switch channel of every member is one channel (MSCCL++ builds them
                // in that order, collectively): declared by the first member that lists it.
                let malformed = |what: String| ReadError::Malformed {
                    gpu: g.id,
                    tb: usize::MAX,
                    index: 0,
                    name: "switch channel".into(),
                    what,
                };
                let ([group], Some(bt)) = (c.rank_groups.as_slice(), c.buffer_type.as_deref().and_then(buffer_type))
                else {
                    return Err(malformed("expects one rank group and a buffer type".into()));
                };
                let (ranks, buffer) = (group.ranks.clone(), bt);
                if !ranks.contains(&g.id) || ranks.iter().any(|&r| r >= MAX_RANKS) {
                    return Err(malformed(format!("rank group {ranks:?}")));
                }
                let mine = gchan.entry((g.id, ChannelType::Switch)).or_default();
                let k = mine.len();
                let key = (ranks.clone(), k);
                let id = match switch_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        p.channels.push(Channel::Switch { ranks, buffer });
                        switch_ids.insert(key, p.channels.len() - 1);
                        p.channels.len() - 1
                    }
                };
                if !matches!(&p.channels[id], Channel::Switch { buffer: b, .. } if *b == buffer) {
                    return Err(malformed(format!("switch channel {k} is bound to different buffers on its members")));
                }
                gchan.entry((g.id, ChannelType::Switch)).or_default().push(id);
                continue;
            }
            if !matches!(t, Some(ChannelType::Memory | ChannelType::Port)) {
                return Err(ReadError::UnsupportedChannel { gpu: g.id, channel_type: c.channel_type.clone() });
            }
            let t = t.expect("matched above");
            for &peer in &c.connected_to {
                p.channels.push(match t {
                    ChannelType::Memory => Channel::Memory { src_rank: g.id, dst_rank: peer },
                    _ => Channel::Port { src_rank: g.id, dst_rank: peer },
                });
                gchan.entry((g.id, t)).or_default().push(p.channels.len() - 1);
            }
        }
    }
    if m.inplace {
        for r in 0..n {
            if let Err(e) = p.input_in_output(r) {
                return Err(setting("inplace", "true".into(), &e.to_string()));
            }
        }
    }
    for g in &m.gpus {
        for tb in &g.threadblocks {
            // Per type: thread-block channel index -> program channel id.
            let mut tchan: HashMap<ChannelType, Vec<usize>> = HashMap::new();
            for c in &tb.channels {
                let t = channel_type(&c.channel_type);
                let ids: Option<Vec<usize>> = t.and_then(|t| {
                    let all = gchan.get(&(g.id, t))?;
                    c.channel_ids.iter().map(|&i| all.get(i).copied()).collect()
                });
                let ids = ids.ok_or_else(|| ReadError::Malformed {
                    gpu: g.id,
                    tb: tb.id,
                    index: 0,
                    name: "channels".into(),
                    what: format!("thread-block channel list of type {} does not resolve", c.channel_type),
                })?;
                tchan.insert(t.expect("resolved"), ids);
            }
            let mut trefs: HashMap<ChannelType, Vec<usize>> = HashMap::new();
            for r in &tb.remote_buffer_refs {
                if let Some(t) = channel_type(&r.access_channel_type) {
                    trefs.insert(t, r.remote_buffer_ids.clone());
                }
            }
            // A pipeline's operations are read in its place, once over whole chunks.
            fn flatten<'v>(ops: &'v [Value], out: &mut Vec<&'v Value>) {
                for v in ops {
                    match (v.get("name").and_then(Value::as_str), v.get("ops").and_then(Value::as_array)) {
                        (Some("pipeline"), Some(inner)) => flatten(inner, out),
                        _ => out.push(v),
                    }
                }
            }
            let mut flat = Vec::new();
            flatten(&tb.ops, &mut flat);
            for (index, v) in flat.into_iter().enumerate() {
                let name = v.get("name").and_then(Value::as_str).unwrap_or("<no name>").to_string();
                if !SUPPORTED.contains(&name.as_str()) {
                    return Err(ReadError::Unsupported { gpu: g.id, tb: tb.id, index, name, detail: String::new() });
                }
                let bad = |what: String| ReadError::Malformed { gpu: g.id, tb: tb.id, index, name: name.clone(), what };
                let op: MOp = serde_json::from_value(v.clone())?;
                let ctype = op.channel_type.as_deref().and_then(channel_type);
                let resolve = |b: &MBuf| -> Result<Operand, ReadError> {
                    if let Some(id) = b.buffer_id {
                        let t = ctype.ok_or_else(|| bad("remote buffer without channel_type".into()))?;
                        let rb = trefs
                            .get(&t)
                            .and_then(|l| l.get(id))
                            .and_then(|&gid| g.remote_buffers.get(gid))
                            .ok_or_else(|| bad(format!("remote buffer {id} does not resolve")))?;
                        let bt = buffer_type(&rb.buffer).ok_or_else(|| bad(format!("buffer type {}", rb.buffer)))?;
                        Ok((Chunk::new(rb.rank, bt, b.index, b.size), true))
                    } else {
                        let s = b.buffer.as_deref().unwrap_or("?");
                        let bt = buffer_type(s).ok_or_else(|| bad(format!("buffer type {s}")))?;
                        Ok((Chunk::new(g.id, bt, b.index, b.size), false))
                    }
                };
                // Operands in a switch channel's buffer are taken apart by the switch operations.
                let plain = |b: &&MBuf| b.switch_channel_id.is_none();
                let srcs = op.src_buff.iter().filter(plain).map(resolve).collect::<Result<Vec<_>, _>>()?;
                let dsts = op.dst_buff.iter().filter(plain).map(resolve).collect::<Result<Vec<_>, _>>()?;
                // The thread block's `k`-th switch channel.
                let switch_chan = |k: usize| -> Result<usize, ReadError> {
                    tchan
                        .get(&ChannelType::Switch)
                        .and_then(|l| l.get(k))
                        .copied()
                        .ok_or_else(|| bad(format!("switch channel {k} does not resolve")))
                };
                // A switch operand: (channel, offset, size), and the channel's buffer.
                let switch_operand = |b: &MBuf| -> Result<(usize, usize, usize, BufferType), ReadError> {
                    let c = switch_chan(b.switch_channel_id.expect("a switch operand"))?;
                    let Channel::Switch { buffer, .. } = &p.channels[c] else { unreachable!("switch list") };
                    Ok((c, b.index, b.size, *buffer))
                };
                let tbg = op.tbg_info.as_ref().map(|t| TbgInfo { index: t.tb_id, size: t.tbg_size });
                let reduce_op = match op.reduce_op.as_deref() {
                    None | Some("sum") => ReduceOp::Sum,
                    Some("min") => ReduceOp::Min,
                    Some("max") => ReduceOp::Max,
                    Some(o) => return Err(bad(format!("reduce_op {o}"))),
                };
                // Channel of the i-th operand pair: explicit ids, or the thread block's channel to the peer.
                let chan = |i: usize, peer: Option<usize>| -> Result<usize, ReadError> {
                    let t = ctype.ok_or_else(|| bad("missing channel_type".into()))?;
                    let list = tchan.get(&t).ok_or_else(|| bad(format!("thread block has no {t} channels")))?;
                    if !op.channel_ids.is_empty() {
                        let k = *op.channel_ids.get(i).or(op.channel_ids.first()).expect("non-empty");
                        return list.get(k).copied().ok_or_else(|| bad(format!("channel id {k} does not resolve")));
                    }
                    let peer = peer.ok_or_else(|| bad("no channel_ids".into()))?;
                    list.iter()
                        .copied()
                        .find(|&c| p.channels[c].endpoints().map(|e| e.1) == Some(peer))
                        .ok_or_else(|| bad(format!("no {t} channel to rank {peer} in this thread block")))
                };
                let mut kinds = Vec::new();
                let sync = |relaxed| (SyncType::Both, relaxed);
                match name.as_str() {
                    "nop" => {}
                    "signal" | "wait" | "rlxsignal" | "rlxwait" | "flush" => {
                        if op.channel_ids.is_empty() {
                            return Err(bad("no channel_ids".into()));
                        }
                        for i in 0..op.channel_ids.len() {
                            let channel = chan(i, None)?;
                            let (data_sync, relaxed) = sync(name.starts_with("rlx"));
                            kinds.push(match name.as_str() {
                                "signal" | "rlxsignal" => OpKind::Signal { channel, data_sync, relaxed },
                                "wait" | "rlxwait" => OpKind::Wait { channel, data_sync, relaxed },
                                _ => OpKind::Flush { channel, data_sync },
                            });
                        }
                    }
                    "put" | "ppkt" | "rppkt" | "pws" | "pwsf" | "get" => {
                        let (remote, local) = if name == "get" { (&srcs, &dsts) } else { (&dsts, &srcs) };
                        if local.is_empty() || (local.len() != remote.len() && local.len() != 1) {
                            return Err(bad("source and destination lists do not pair up".into()));
                        }
                        for (i, r) in remote.iter().enumerate() {
                            let l = local.get(i).unwrap_or(&local[0]).0;
                            let channel = chan(i, Some(r.0.rank))?;
                            let (src, dst) = if name == "get" { (r.0, l) } else { (l, r.0) };
                            kinds.push(match name.as_str() {
                                "put" => OpKind::Put { channel, dst, src },
                                "ppkt" => OpKind::PutPackets { channel, dst, src },
                                "rppkt" => OpKind::ReadPutPackets { channel, dst, src },
                                "pws" => OpKind::PutWithSignal { channel, dst, src },
                                "pwsf" => OpKind::PutWithSignalAndFlush { channel, dst, src },
                                _ => OpKind::Get { channel, dst, src },
                            });
                        }
                    }
                    "copy" | "cpkt" | "upkt" => {
                        let (Some(s), Some(d), 1, 1) = (srcs.first(), dsts.first(), srcs.len(), dsts.len()) else {
                            return Err(bad("expects one source and one destination".into()));
                        };
                        let (src, dst) = (s.0, d.0);
                        kinds.push(match name.as_str() {
                            "copy" => OpKind::Copy { dst, src },
                            "cpkt" => OpKind::CopyPackets { dst, src },
                            _ => OpKind::UnpackPackets { dst, src },
                        });
                    }
                    "barrier" => {
                        let (Some(id), Some(count)) = (op.barrier_id, op.num_threadblocks) else {
                            return Err(bad("expects barrier_id and num_threadblocks".into()));
                        };
                        kinds.push(OpKind::Barrier { id, count });
                    }
                    "sem_acquire" | "sem_release" => {
                        if op.semaphore_ids.is_empty() {
                            return Err(bad("no semaphore_ids".into()));
                        }
                        for &sem in &op.semaphore_ids {
                            kinds.push(if name == "sem_acquire" {
                                OpKind::SemAcquire { sem }
                            } else {
                                OpKind::SemRelease { sem }
                            });
                        }
                    }
                    "glre" => {
                        let (Some(&k), Some(buffer_offset), Some(size), Some(d)) =
                            (op.channel_ids.first(), op.buffer_offset, op.size, op.dst_chunk.as_ref())
                        else {
                            return Err(bad("expects channel_ids, buffer_offset, size and dst_chunk".into()));
                        };
                        let channel = switch_chan(k)?;
                        let bt =
                            d.buffer.as_deref().and_then(buffer_type).ok_or_else(|| bad("dst_chunk type".into()))?;
                        let dst = Chunk::new(g.id, bt, d.index, d.size);
                        kinds.push(OpKind::SwitchReduce { channel, buffer_offset, size, dst, reduce_op });
                    }
                    "gstore" => {
                        let ([s], [d]) = (srcs.as_slice(), op.dst_buff.as_slice()) else {
                            return Err(bad("expects one source and one switch destination".into()));
                        };
                        if d.switch_channel_id.is_none() || s.1 {
                            return Err(bad("expects a local source and a switch destination".into()));
                        }
                        let (channel, buffer_offset, size, _) = switch_operand(d)?;
                        kinds.push(OpKind::SwitchBroadcast { channel, src: s.0, buffer_offset, size });
                    }
                    "gstorepkt" => {
                        let ([s], [d]) = (srcs.as_slice(), op.dst_buff.as_slice()) else {
                            return Err(bad("expects one source and one switch destination".into()));
                        };
                        if d.switch_channel_id.is_none() || s.1 {
                            return Err(bad("expects a local source and a switch destination".into()));
                        }
                        let (channel, buffer_offset, size, _) = switch_operand(d)?;
                        kinds.push(OpKind::SwitchBroadcastPackets { channel, src: s.0, buffer_offset, size });
                    }
                    "glres" => {
                        // Reduce over the members, then store the result to every member: read
                        // as a reduction into this rank's own copy, then a broadcast of it.
                        let ([s], [d]) = (op.src_buff.as_slice(), op.dst_buff.as_slice()) else {
                            return Err(bad("expects one switch source and one switch destination".into()));
                        };
                        if s.switch_channel_id.is_none() || d.switch_channel_id.is_none() {
                            return Err(bad("expects switch operands".into()));
                        }
                        let (c1, off1, size1, buffer) = switch_operand(s)?;
                        let (c2, off2, size2, _) = switch_operand(d)?;
                        if size1 != size2 {
                            return Err(bad("source and destination sizes differ".into()));
                        }
                        let own = Chunk::new(g.id, buffer, off1, size1);
                        kinds.push(OpKind::SwitchReduce {
                            channel: c1,
                            buffer_offset: off1,
                            size: size1,
                            dst: own,
                            reduce_op,
                        });
                        kinds.push(OpKind::SwitchBroadcast { channel: c2, src: own, buffer_offset: off2, size: size2 });
                    }
                    "recpkt" | "recspkt" => {
                        // dst = src + packets, then the result copied as packets into the other
                        // local scratch destinations (and, with `s`, put as packets to peers).
                        let locals: Vec<Chunk> = srcs.iter().filter(|s| !s.1).map(|s| s.0).collect();
                        let local_dsts: Vec<Chunk> = dsts.iter().filter(|d| !d.1).map(|d| d.0).collect();
                        let remote_dsts: Vec<Chunk> = dsts.iter().filter(|d| d.1).map(|d| d.0).collect();
                        let (Some((&src, others)), Some((&dst, copies))) =
                            (locals.split_first(), local_dsts.split_first())
                        else {
                            return Err(bad("expects local sources and a local destination".into()));
                        };
                        if locals.len() != srcs.len() || (name == "recpkt") != remote_dsts.is_empty() {
                            return Err(bad("remote operands do not match the operation".into()));
                        }
                        kinds.push(OpKind::Reduce { src, others: others.to_vec(), dst, reduce_op, packet: true });
                        for &c in copies {
                            kinds.push(OpKind::CopyPackets { dst: c, src: dst });
                        }
                        for (i, d) in remote_dsts.iter().enumerate() {
                            let channel = chan(i, Some(d.rank))?;
                            kinds.push(OpKind::PutPackets { channel, dst: *d, src: dst });
                        }
                    }
                    "re" | "repkt" | "rre" | "res" | "respkt" | "rres" => {
                        // Fused forms are split into their parts, in order: the reduction
                        // (per peer for remote operands), then a put of the result to each
                        // remote destination.
                        let locals: Vec<Chunk> = srcs.iter().filter(|s| !s.1).map(|s| s.0).collect();
                        let remotes: Vec<Chunk> = srcs.iter().filter(|s| s.1).map(|s| s.0).collect();
                        let local_dsts: Vec<Chunk> = dsts.iter().filter(|d| !d.1).map(|d| d.0).collect();
                        let remote_dsts: Vec<Chunk> = dsts.iter().filter(|d| d.1).map(|d| d.0).collect();
                        let (Some(&src), [dst]) = (locals.first(), local_dsts.as_slice()) else {
                            return Err(bad("expects a local source and one local destination".into()));
                        };
                        let dst = *dst;
                        let remote_read = name.starts_with("rr");
                        if remote_read != !remotes.is_empty() || (remote_read && locals.len() != 1) {
                            return Err(bad("remote operands do not match the operation".into()));
                        }
                        if remote_read {
                            let mut peers: Vec<usize> = remotes.iter().map(|c| c.rank).collect();
                            peers.dedup();
                            let mut acc = src;
                            for peer in peers {
                                let channel = chan(0, Some(peer))?;
                                let remote_srcs = remotes.iter().filter(|c| c.rank == peer).copied().collect();
                                kinds.push(OpKind::ChannelReduce {
                                    channel,
                                    local_src: acc,
                                    remote_srcs,
                                    local_dst: dst,
                                    reduce_op,
                                });
                                acc = dst;
                            }
                        } else {
                            kinds.push(OpKind::Reduce {
                                src,
                                others: locals[1..].to_vec(),
                                dst,
                                reduce_op,
                                packet: name.ends_with("pkt"),
                            });
                        }
                        let sends = name.ends_with("res") || name == "respkt";
                        if sends != !remote_dsts.is_empty() {
                            return Err(bad("remote destinations do not match the operation".into()));
                        }
                        for (i, d) in remote_dsts.iter().enumerate() {
                            let channel = chan(i, Some(d.rank))?;
                            kinds.push(if name == "respkt" {
                                OpKind::PutPackets { channel, dst: *d, src: dst }
                            } else {
                                OpKind::Put { channel, dst: *d, src: dst }
                            });
                        }
                    }
                    _ => unreachable!("filtered by SUPPORTED"),
                }
                for kind in kinds {
                    let o = Op { kind, tbg };
                    validate_op(&p, g.id, &o).map_err(|error| ReadError::Invalid {
                        gpu: g.id,
                        tb: tb.id,
                        index,
                        error,
                    })?;
                    let tbs = &mut p.ranks[g.id].threadblocks;
                    if tbs.len() <= tb.id {
                        tbs.resize_with(tb.id + 1, Vec::new);
                    }
                    tbs[tb.id].push(o);
                }
            }
        }
    }
    if m.use_double_scratch_buffer
        && p.ranks.iter().flat_map(|r| r.threadblocks.iter().flatten()).any(|o| o.kind.scratch_uses().1)
    {
        let why = "the executor alternates two copies of packet scratch between launches, not of plain scratch";
        return Err(setting("use_double_scratch_buffer", "true".into(), why));
    }
    Ok(p)
}
