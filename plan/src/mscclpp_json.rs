//! Reader for MSCCL++'s execution-plan JSON (the compiler output that its executor loads).
//!
//! The reader understands the operations this crate models: `signal`, `wait`, `rlxsignal`,
//! `rlxwait`, `flush`, `put`, `get`, `ppkt`, `rppkt`, `pws`, `pwsf`, `copy`, `cpkt`, `upkt`,
//! `re`, `repkt`, `rre`, and the fused `res`, `respkt`, `rres` (read as their reduction followed
//! by puts of the result), and skips `nop` (a barrier inside one thread block). Any other
//! operation fails the whole read with [`ReadError::Unsupported`] naming it, and a switch
//! channel with [`ReadError::UnsupportedChannel`]: a plan is never imported partially.
//!
//! In that format, each GPU lists its channels per type (`connected_to` peers), its remote
//! buffers (rank and buffer type), and per thread block the GPU channels and remote buffers it
//! uses; operations refer to those by position in the thread block's lists. The `k`-th channel
//! of one type from rank `a` to rank `b` is taken to be connected to the `k`-th one from `b` to
//! `a`, which is how this crate pairs channels too.

use crate::builder::{MAX_THREADBLOCKS, PlanError, validate_op};
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
    /// A channel type this reader does not import (switch channels).
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
    /// A GPU id not below the number of GPUs listed, or a thread-block id not below
    /// [`MAX_THREADBLOCKS`] (ids are positions; a larger one would size the plan).
    #[error("{what} {id} is out of range (expected below {limit})")]
    IdOutOfRange {
        /// Which id, e.g. `gpu id` or `gpu 0 thread block id`.
        what: String,
        /// The id.
        id: usize,
        /// The bound.
        limit: usize,
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
    gpus: Vec<MGpu>,
}

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
}

#[derive(Deserialize)]
struct MChannel {
    channel_type: String,
    #[serde(default)]
    connected_to: Vec<usize>,
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
}

#[derive(Deserialize)]
struct MBuf {
    #[serde(rename = "type", default)]
    buffer: Option<String>,
    #[serde(default)]
    buffer_id: Option<usize>,
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
    for g in &m.gpus {
        if g.id >= m.gpus.len() {
            return Err(ReadError::IdOutOfRange { what: "gpu id".into(), id: g.id, limit: m.gpus.len() });
        }
        if let Some(tb) = g.threadblocks.iter().find(|tb| tb.id >= MAX_THREADBLOCKS) {
            let what = format!("gpu {} thread block id", g.id);
            return Err(ReadError::IdOutOfRange { what, id: tb.id, limit: MAX_THREADBLOCKS });
        }
    }
    let n = m.gpus.iter().map(|g| g.id + 1).max().unwrap_or(0);
    let mut p = Program::new(m.name, m.collective, n, 0, 0, 0);
    // GPU-level channels: (gpu, type) -> program channel ids.
    let mut gchan: HashMap<(usize, ChannelType), Vec<usize>> = HashMap::new();
    for g in &m.gpus {
        p.ranks[g.id].input_chunks = g.input_chunks;
        p.ranks[g.id].output_chunks = g.output_chunks;
        p.ranks[g.id].scratch_chunks = g.scratch_chunks;
        for c in &g.channels {
            let t = channel_type(&c.channel_type);
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
            for (index, v) in tb.ops.iter().enumerate() {
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
                let srcs = op.src_buff.iter().map(resolve).collect::<Result<Vec<_>, _>>()?;
                let dsts = op.dst_buff.iter().map(resolve).collect::<Result<Vec<_>, _>>()?;
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
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids size the plan: an id far beyond the plan is an error, not an overflow or an
    /// allocation of that many ranks or thread blocks.
    #[test]
    fn ids_beyond_the_plan_are_errors() {
        let plan = |gpu: usize, tb: usize| {
            format!(
                r#"{{ "name": "x", "gpus": [
                  {{ "id": 0, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0 }},
                  {{ "id": {gpu}, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,
                    "threadblocks": [ {{ "id": {tb}, "ops": [] }} ] }} ] }}"#
            )
        };
        let p = read(&plan(1, 3)).unwrap();
        assert_eq!(p.ranks.len(), 2);
        for gpu in [2, 1 << 40, usize::MAX] {
            let e = read(&plan(gpu, 0)).unwrap_err();
            assert_eq!(e.to_string(), format!("gpu id {gpu} is out of range (expected below 2)"));
        }
        for tb in [MAX_THREADBLOCKS, 1 << 40, usize::MAX] {
            let e = read(&plan(1, tb)).unwrap_err();
            assert_eq!(e.to_string(), format!("gpu 1 thread block id {tb} is out of range (expected below 65536)"));
        }
    }
}
