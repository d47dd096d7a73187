//! A host reference: runs a plan sequentially on 32-bit words, with sums that wrap (the
//! executor's `i32` and `u32` reductions), so its result does not depend on the order of a sum.
//!
//! Thread blocks take turns as in [`crate::check()`]'s simulation: a wait runs once its signal
//! was made, a packet read once every word it reads was written as packets. For a plan that
//! checks clean every such order gives the same result, which is therefore what any run of the
//! plan must produce. Packets are held as their data (the flags are the executor's business) and
//! a thread-block group's slice `i` of `n` is words `[i·len/n, (i+1)·len/n)` of each operand.
//!
//! Words nobody wrote (scratch before its first write) are undefined, and so is anything
//! computed from one: [`Buffers::defined`] says which words of a buffer are defined.

use crate::plan::*;
use std::collections::{HashMap, HashSet};

/// One rank's buffers, `chunk_words` words per chunk. An in-place plan's input is the part of
/// the output it aliases ([`Program::input_in_output`]), so only `output` holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// Input (empty for an in-place plan).
    pub input: Vec<u32>,
    /// Output.
    pub output: Vec<u32>,
    /// Scratch.
    pub scratch: Vec<u32>,
    /// Whether each word of input, output and scratch is defined (in that order, by buffer).
    pub defined: [Vec<bool>; 3],
}

/// Why a plan could not be run.
#[derive(Debug, PartialEq, Eq)]
pub struct Stuck(pub String);

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn slot(b: BufferType) -> usize {
    match b {
        BufferType::Input => 0,
        BufferType::Output => 1,
        BufferType::Scratch => 2,
    }
}

/// Runs `p` on `inputs` (one per rank, `input_chunks × chunk_words` words each), with every
/// output word starting as `poison` (defined) and scratch undefined. Meant for plans that passed
/// [`crate::check()`]: it holds every operation to the builder's rules first (an error names the
/// first one broken), allocates every buffer the plan declares, and reports a plan that cannot
/// finish (a deadlock) as [`Stuck`].
pub fn run(p: &Program, inputs: &[Vec<u32>], chunk_words: usize, poison: u32) -> Result<Vec<Buffers>, Stuck> {
    let n = p.ranks.len();
    if inputs.len() != n {
        return Err(Stuck(format!("{} inputs for {n} ranks", inputs.len())));
    }
    for (r, rp) in p.ranks.iter().enumerate() {
        for (t, ops) in rp.threadblocks.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                crate::builder::validate_op(p, r, op).map_err(|e| Stuck(format!("rank {r} tb {t} op {i}: {e}")))?;
            }
        }
    }
    let mut bufs = Vec::with_capacity(n);
    for (r, rp) in p.ranks.iter().enumerate() {
        let (i, o, s) =
            (rp.input_chunks * chunk_words, rp.output_chunks * chunk_words, rp.scratch_chunks * chunk_words);
        if inputs[r].len() != i {
            return Err(Stuck(format!("rank {r}: {} input words, the plan has {i}", inputs[r].len())));
        }
        let mut b = Buffers {
            input: inputs[r].clone(),
            output: vec![poison; o],
            scratch: vec![0; s],
            defined: [vec![true; i], vec![true; o], vec![false; s]],
        };
        if let Ok(Some(start)) = p.input_in_output(r) {
            let at = start * chunk_words;
            b.output[at..at + i].copy_from_slice(&inputs[r]);
            b.input.clear();
            b.defined[0].clear();
        }
        bufs.push(b);
    }
    let mut m = Machine { p, w: chunk_words, bufs, packets: HashSet::new() };
    let threads: Vec<(usize, usize)> =
        p.ranks.iter().enumerate().flat_map(|(r, rp)| (0..rp.threadblocks.len()).map(move |t| (r, t))).collect();
    let mut pc = vec![0usize; threads.len()];
    // Signals made and not yet consumed, by (channel type, from, to, ordinal).
    let ord = ordinals(p);
    let mut sems: HashMap<(ChannelType, usize, usize, usize), usize> = HashMap::new();
    // Semaphores of the ranks; barrier arrivals by (rank, id) and the crossing each thread
    // block waits at.
    let mut local: HashMap<(usize, usize), u64> = HashMap::new();
    for (r, rp) in p.ranks.iter().enumerate() {
        for (s, &v) in rp.semaphores.iter().enumerate() {
            local.insert((r, s), v);
        }
    }
    let mut arrivals: HashMap<(usize, usize), usize> = HashMap::new();
    let mut arrived: Vec<Option<usize>> = vec![None; threads.len()];
    loop {
        let mut progressed = false;
        for (th, &(r, t)) in threads.iter().enumerate() {
            let ops = &p.ranks[r].threadblocks[t];
            while let Some(op) = ops.get(pc[th]) {
                let key = |c: usize, wait: bool| {
                    let ch = &p.channels[c];
                    let (s, d) = ch.endpoints().unwrap_or((r, r));
                    if wait { (ch.channel_type(), d, s, ord[c]) } else { (ch.channel_type(), s, d, ord[c]) }
                };
                match op.kind {
                    OpKind::Wait { channel, .. } => {
                        let k = sems.entry(key(channel, true)).or_default();
                        if *k == 0 {
                            break;
                        }
                        *k -= 1;
                    }
                    OpKind::SemAcquire { sem } => {
                        let v = local.entry((r, sem)).or_default();
                        if *v == 0 {
                            break;
                        }
                        *v -= 1;
                    }
                    OpKind::SemRelease { sem } => *local.entry((r, sem)).or_default() += 1,
                    OpKind::Barrier { id, count } => {
                        let a = arrivals.entry((r, id)).or_default();
                        let crossing = *arrived[th].get_or_insert_with(|| {
                            *a += 1;
                            (*a - 1) / count.max(1)
                        });
                        if *a < (crossing + 1) * count {
                            break;
                        }
                        arrived[th] = None;
                    }
                    _ if !m.packets_ready(op) => break,
                    _ => m.exec(op),
                }
                if let OpKind::Signal { channel, .. }
                | OpKind::PutWithSignal { channel, .. }
                | OpKind::PutWithSignalAndFlush { channel, .. } = op.kind
                {
                    *sems.entry(key(channel, false)).or_default() += 1;
                }
                pc[th] += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    if let Some(th) = (0..threads.len()).find(|&th| pc[th] < p.ranks[threads[th].0].threadblocks[threads[th].1].len()) {
        let (r, t) = threads[th];
        return Err(Stuck(format!("rank {r} tb {t} op {} cannot proceed", pc[th])));
    }
    Ok(m.bufs)
}

/// Ordinal of each point-to-point channel among those of its type and endpoints (as the
/// checker pairs them).
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

struct Machine<'a> {
    p: &'a Program,
    w: usize,
    bufs: Vec<Buffers>,
    /// Scratch words written as packets: (rank, word).
    packets: HashSet<(usize, usize)>,
}

impl Machine<'_> {
    /// The words of `c` (by where it is stored) that slice `tbg` covers: (rank, buffer slot, first word, words).
    fn words(&self, c: Chunk, tbg: Option<TbgInfo>) -> (usize, usize, usize, usize) {
        let c = self.p.storage(c);
        let (start, len) = (c.index * self.w, c.size * self.w);
        let (a, b) = match tbg {
            Some(g) if g.size > 0 => (g.index * len / g.size, (g.index + 1) * len / g.size),
            _ => (0, len),
        };
        (c.rank, slot(c.buffer), start + a, b - a)
    }

    fn buf(&self, rank: usize, s: usize) -> &Vec<u32> {
        let b = &self.bufs[rank];
        [&b.input, &b.output, &b.scratch][s]
    }

    fn read(&self, c: Chunk, tbg: Option<TbgInfo>) -> Vec<Option<u32>> {
        let (r, s, at, len) = self.words(c, tbg);
        let (v, d) = (self.buf(r, s), &self.bufs[r].defined[s]);
        (at..at + len).map(|i| d[i].then_some(v[i])).collect()
    }

    fn write(&mut self, c: Chunk, tbg: Option<TbgInfo>, data: &[Option<u32>], packet: bool) {
        let (r, s, at, len) = self.words(c, tbg);
        debug_assert_eq!(len, data.len());
        for (k, x) in data.iter().enumerate() {
            let b = &mut self.bufs[r];
            let v = match s {
                0 => &mut b.input,
                1 => &mut b.output,
                _ => &mut b.scratch,
            };
            v[at + k] = x.unwrap_or(0);
            b.defined[s][at + k] = x.is_some();
            if packet && s == 2 {
                self.packets.insert((r, at + k));
            }
        }
    }

    fn packets_ready(&self, op: &Op) -> bool {
        let reads: Vec<Chunk> = match &op.kind {
            OpKind::UnpackPackets { src, .. }
            | OpKind::ReadPutPackets { src, .. }
            | OpKind::SwitchBroadcastPackets { src, .. } => vec![*src],
            OpKind::Reduce { others, packet: true, .. } => others.clone(),
            _ => return true,
        };
        reads.iter().all(|c| {
            let (r, s, at, len) = self.words(*c, op.tbg);
            s == 2 && (at..at + len).all(|i| self.packets.contains(&(r, i)))
        })
    }

    fn exec(&mut self, op: &Op) {
        let g = op.tbg;
        let sum = |a: &[Option<u32>], b: &[Option<u32>]| -> Vec<Option<u32>> {
            a.iter().zip(b).map(|(x, y)| Some(x.as_ref()?.wrapping_add(*y.as_ref()?))).collect()
        };
        match &op.kind {
            OpKind::Put { dst, src, .. }
            | OpKind::PutWithSignal { dst, src, .. }
            | OpKind::PutWithSignalAndFlush { dst, src, .. }
            | OpKind::Get { dst, src, .. }
            | OpKind::Copy { dst, src }
            | OpKind::UnpackPackets { dst, src } => {
                let d = self.read(*src, g);
                self.write(*dst, g, &d, false);
            }
            OpKind::PutPackets { dst, src, .. }
            | OpKind::ReadPutPackets { dst, src, .. }
            | OpKind::CopyPackets { dst, src } => {
                let d = self.read(*src, g);
                self.write(*dst, g, &d, true);
            }
            OpKind::Reduce { src, others, dst, .. } => {
                let mut acc = self.read(*src, g);
                for o in others {
                    acc = sum(&acc, &self.read(*o, g));
                }
                self.write(*dst, g, &acc, false);
            }
            OpKind::ChannelReduce { local_src, remote_srcs, local_dst, .. } => {
                let mut acc = self.read(*local_src, g);
                for o in remote_srcs {
                    acc = sum(&acc, &self.read(*o, g));
                }
                self.write(*local_dst, g, &acc, false);
            }
            OpKind::SwitchReduce { channel, buffer_offset, size, dst, .. } => {
                if let Channel::Switch { ranks, buffer } = &self.p.channels[*channel] {
                    let mut acc: Option<Vec<Option<u32>>> = None;
                    for &r in ranks {
                        let v = self.read(Chunk::new(r, *buffer, *buffer_offset, *size), g);
                        acc = Some(match acc {
                            None => v,
                            Some(a) => sum(&a, &v),
                        });
                    }
                    self.write(*dst, g, &acc.unwrap_or_default(), false);
                }
            }
            OpKind::SwitchBroadcast { channel, src, buffer_offset, size }
            | OpKind::SwitchBroadcastPackets { channel, src, buffer_offset, size } => {
                let packet = matches!(op.kind, OpKind::SwitchBroadcastPackets { .. });
                if let Channel::Switch { ranks, buffer } = &self.p.channels[*channel] {
                    let d = self.read(*src, g);
                    for &r in ranks {
                        self.write(Chunk::new(r, *buffer, *buffer_offset, *size), g, &d, packet);
                    }
                }
            }
            OpKind::Signal { .. }
            | OpKind::Wait { .. }
            | OpKind::Flush { .. }
            | OpKind::Barrier { .. }
            | OpKind::SemRelease { .. }
            | OpKind::SemAcquire { .. } => {}
        }
    }
}

/// What rank `me`'s output holds after collective `collective` (MSCCL++'s names) of `inputs`,
/// on 32-bit words with wrapping sums; `None` for a collective without a fixed meaning (MSCCL++'s
/// `test`, the unit plans) or inputs that do not split evenly.
///
/// - `allreduce`: the sum of every rank's input;
/// - `allgather`: every rank's input, in rank order;
/// - `alltoall`: block `j` (of `n` equal blocks) is block `me` of rank `j`'s input.
pub fn collective(collective: &str, inputs: &[Vec<u32>], me: usize) -> Option<Vec<u32>> {
    let n = inputs.len();
    let mine = inputs.get(me)?;
    match collective {
        "allreduce" => {
            inputs.iter().all(|x| x.len() == mine.len()).then_some(())?;
            Some((0..mine.len()).map(|i| inputs.iter().fold(0u32, |a, x| a.wrapping_add(x[i]))).collect())
        }
        "allgather" => Some(inputs.concat()),
        "alltoall" => {
            let block = mine.len() / n;
            (block * n == mine.len() && inputs.iter().all(|x| x.len() == mine.len())).then_some(())?;
            Some((0..n).flat_map(|j| inputs[j][me * block..(me + 1) * block].to_vec()).collect())
        }
        _ => None,
    }
}
