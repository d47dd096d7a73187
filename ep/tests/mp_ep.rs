//! Expert-parallel dispatch and combine among N ranks, one process per rank, against the host
//! references on fresh random data, bit for bit:
//!
//! * the layout kernel alone (token counts from 1 to `max_tokens`, ids outside the experts);
//! * dispatch then combine for random routing (tokens with no expert, tokens with no expert on
//!   some rank), k from 1 to 8, bf16 and f32, token counts that differ between ranks, all tokens
//!   to one rank, empty batches (on one rank and on all), full batches; with the default grid
//!   and with 3 blocks of 64 threads (many tokens per warp, launches not overlapped), and at
//!   DeepSeek-V3's hidden size:
//!   after each dispatch the layout, the receive counts and every received row, id, weight and
//!   source index are compared (local ids with the weights of other ranks' slots zeroed by
//!   default, global ids in the small configuration; counts per local expert rounded up to 128
//!   there and at DeepSeek-V3's size); the "experts" (expert e scales by e + 1, weighted by the
//!   token's weight, summed over the rank's experts of the token) run on the host; combine must
//!   return the host's sum in rank order, and past the output nothing may be written;
//! * the default SM budget (20 blocks, or this rank's SMs when fewer), 3 blocks and 1 block
//!   (with i64 ids there, the layout kernel too);
//! * pairs of dispatch and combine enqueued back to back with no host synchronisation (the same
//!   batch twice among them must give the same bits); a dispatch and combine on a stream of
//!   their own, ordered by `wait_event` / `record_event`;
//! * combines that also sum the top-k weights (even k: the delivered ones, which come back as
//!   given; on the side stream: the caller's), bit for bit;
//! * FP8 dispatch (bf16 rows cast to e4m3 with a scale per 128 columns: DeepEP's f32 scales,
//!   power-of-two ones, UE8M0 bytes) at DeepSeek-V3's hidden size, between bf16 and f32 dispatches on the
//!   same object and with one block of 64 threads: the e4m3 bytes and the scales bit for bit;
//! * two receive slots (`Config::slots`): two dispatches in flight combined newest first; three
//!   in flight, the oldest's combine and counts refused before any launch (its output stays
//!   poisoned) and the others combined newest first with no host synchronisation between;
//! * cached dispatches (`dispatch_cached`: new f32 or bf16 rows along an earlier dispatch's
//!   routing, no layout kernel) into another slot and into their handle's own: layout, received
//!   rows, ids, weights and sources, combine and summed weights against the reference, and the
//!   same bits as a fresh dispatch of the same rows; a cached dispatch of an overwritten handle
//!   or of a short buffer refused;
//! * combine bias (`CombineOptions::bias`: one bf16 tensor, two f32 ones, with the summed weights;
//!   two after a cached dispatch) against the host reference, bit for bit; a short bias refused;
//! * an object sized for bf16 rows (`Config::widest`): its bytes as `Config::shared_bytes` says,
//!   smaller than the f32 one's by the rows' halves; bf16 cases bit for bit, f32 rows refused;
//! * requests beyond the configuration, stale and repeated combines, FP8 of f32 rows or of rows
//!   that are not a multiple of 128: errors, before any launch;
//! * the window form (`Form::Window`: `Window::peer` addressing and window signals): every case
//!   dispatched and combined in both forms on the same object, each against the reference and
//!   the two bit for bit (received rows, scales, ids, weights, sources, counts, combined rows and
//!   weights); a window dispatch combined in the peer-table form and the reverse; pairs of mixed
//!   forms back to back with no host synchronisation; FP8 (each format), cached dispatches, two
//!   slots, 1 block of 64 threads;
//! * the pipelined mode (`Config::ring_rows`, rows streamed through fixed rings, the received
//!   rows in a local buffer): the cases above with rings of 64 rows, every fourth with rings of
//!   4 rows (4 blocks) and every tenth with rings of 1 row (2 blocks), back to back, on a side
//!   stream, DeepSeek-V3's shape with FP8 in each format, two slots, cached dispatches, bias and
//!   a bf16 object, bit for bit against the same references; a window dispatch refused;
//! * CUDA graphs of the normal mode (`mp_ep/graph.rs`), unpipelined and pipelined (rings of 8
//!   rows, which wrap), two slots: a dispatch (bf16, FP8, f32) and its combine with the summed
//!   weights captured on the stream and replayed three times with other data written into the
//!   same buffers (the same token counts), the outputs and the unused expert rows poisoned
//!   before each replay; after each replay the layout, the received counts, rows (e4m3 bytes
//!   and scales), ids, weights and sources, the combined rows and weights bit for bit against the
//!   reference and nothing past the outputs; an eager case on the same object between two
//!   replays; the window form's dispatch and combine on a capturing stream refused before
//!   anything is enqueued (the capture ends, the peer-table combine of that dispatch then
//!   checked). Prints "normal-mode graphs: N replays ok (unpipelined, pipelined)";
//! * the decode mode (`LowLatency`, `mp_ep/decode.rs`), against `reference::decode` on fresh
//!   random data with poisoned outputs: every local expert's count, every source's layout range,
//!   every received row (bf16, f32, and FP8 in the three scale formats: e4m3 bytes and scales),
//!   every row's source index, and the weighted combine bit for bit (the expert rows past each
//!   count are NaN, so reading one would show) and nothing past the output; random routing, k
//!   from 1 to 8, all tokens to one rank (on 4 ranks with 16 experts: slots naming one expert
//!   twice), empty batches, full batches; the default grid, 3 blocks of 64 threads with plain
//!   launches and i64 ids, and DeepSeek-V3's decode shape (256 experts, hidden 7168, 128
//!   tokens); dispatch + combine captured in a CUDA graph (overlapped launches and plain ones,
//!   bf16 and FP8) and replayed twice with other data written into the same buffers, each replay
//!   checked; decode requests beyond the configuration, a short expert-output buffer and a
//!   second combine refused.
//!
//! ```sh
//! cargo test --release -p mscclpp-ep --test mp_ep   # 2 ranks (launcher)
//! target/release/deps/mp_ep-... --ranks 4
//! mpirun -np 2 target/release/deps/mp_ep-...
//! ```
//! `MSCCLPP_RS_SEED` repeats a run's data. Without GPUs every rank prints a GPU-SKIP line.

use std::process::ExitCode;

use mscclpp_ep::reference::{self, Layout, RankInput, Received, Routing};
use mscclpp_ep::{
    CombineOptions, CombineWeights, Config, DEFAULT_BLOCKS, DataType, DispatchInput, Dispatched, ExpertIds,
    ExpertParallel, Form, ReceivedRows, RecvFormat, TopkIdx,
};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{BootstrapExt, DeviceBuffer, Error, Result};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[path = "mp_ep/decode.rs"]
mod decode;
#[path = "mp_ep/graph.rs"]
mod graph;

fn main() -> ExitCode {
    mscclpp_harness::runner::main("mp_ep", 2, run)
}

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

const POISON: u8 = 0xa5;
/// Bytes past the end of every output that must stay poisoned.
const TAIL: usize = 64;

/// One collective case: every rank's batch is known to every rank (generated from the seed).
#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DataType,
    /// The received rows' format (FP8: the rows' magnitudes spread by
    /// `reference::spread_magnitudes`).
    format: RecvFormat,
    k: usize,
    routing: Routing,
    /// Tokens of rank r: `tokens[r % 4]` capped at max_tokens.
    tokens: [usize; 4],
    seed: u64,
}

/// The host side of one case, for every rank.
struct Plan {
    inputs: Vec<RankInput>,
    layouts: Vec<Layout>,
    recv: Vec<Received>,
    /// The rows this rank receives as the dispatch delivers them (cast to FP8 for an FP8
    /// format) and their scales (empty unless FP8).
    recv_x: (Vec<u8>, Vec<f32>),
    /// The experts' output rows of every rank.
    ys: Vec<Vec<u8>>,
    /// What combine returns on this rank.
    out: Vec<u8>,
    /// The delivered weights summed back on this rank (`tokens x k`).
    w_out: Vec<f32>,
    /// The bias tensors this rank's combine adds (`out` includes them).
    bias: Vec<Vec<u8>>,
}

fn plan(c: &Case, cfg: &Config, n: usize, me: usize) -> Plan {
    plan_with(c, cfg, n, me, None, 0)
}

/// [`plan`] with the routing (tokens, ids, weights) of the inputs `from` and new rows (a cached
/// dispatch of the dispatch of `from`), and `bias` bias tensors added by the combine.
fn plan_with(c: &Case, cfg: &Config, n: usize, me: usize, from: Option<&[RankInput]>, bias: usize) -> Plan {
    let inputs: Vec<RankInput> = (0..n)
        .map(|r| {
            let from = from.map(|f| &f[r]);
            let t = from.map_or(c.tokens[r % 4].min(cfg.max_tokens), |f| f.tokens);
            let mut i = reference::random_input(c.seed, r, c.dtype, t, cfg.hidden, c.k, (cfg.experts, n), c.routing);
            if let Some(f) = from {
                (i.topk_idx, i.topk_weights) = (f.topk_idx.clone(), f.topk_weights.clone());
            }
            if c.format.is_fp8() {
                i.x = reference::spread_magnitudes(&i.x, cfg.hidden);
            }
            i
        })
        .collect();
    let layouts: Vec<Layout> =
        inputs.iter().map(|i| reference::layout(&i.topk_idx, i.tokens, c.k, cfg.experts, n)).collect();
    let row = cfg.hidden * c.dtype.bytes();
    let recv: Vec<Received> = (0..n)
        .map(|d| reference::received(&inputs, &layouts, d, (cfg.experts, row), cfg.expert_ids, cfg.expert_alignment))
        .collect();
    let recv_x = match c.format {
        RecvFormat::Input => (recv[me].x.clone(), vec![]),
        fp8 => reference::cast_e4m3(&recv[me].x, cfg.hidden, fp8),
    };
    // The experts compute from the rows as sent (the combine does not depend on the format).
    let ys: Vec<Vec<u8>> = (0..n)
        .map(|d| reference::scaled_experts(c.dtype, &recv[d], c.k, (d, n), cfg.experts, cfg.expert_ids))
        .collect();
    let offsets: Vec<Vec<usize>> = recv.iter().map(|r| r.offsets.clone()).collect();
    let t = inputs[me].tokens;
    let bias: Vec<Vec<u8>> = (0..bias)
        .map(|b| {
            reference::random_input(c.seed ^ (0xb1a5 + b as u64), me, c.dtype, t, cfg.hidden, 1, (1, 1), c.routing).x
        })
        .collect();
    let refs: Vec<&[u8]> = bias.iter().map(|b| &b[..]).collect();
    let out = reference::combine_with_bias(c.dtype, &layouts[me], (me, t), (&ys, &offsets), row, &refs);
    let delivered: Vec<Vec<f32>> = recv.iter().map(|r| r.topk_weights.clone()).collect();
    let w_out = reference::combine_weights(&layouts[me], me, (t, c.k), (&delivered, &offsets));
    Plan { inputs, layouts, recv, recv_x, ys, out, w_out, bias }
}

/// This rank's device buffers of one case.
struct Bufs {
    x: DeviceBuffer,
    idx: DeviceBuffer,
    w: DeviceBuffer,
    y: DeviceBuffer,
    out: DeviceBuffer,
}

/// Top-k ids on the GPU as the configuration says: i32, or i64 with every -1 replaced by a value
/// that names no expert (`reference::widen_ids`).
fn upload_ids(ep: &ExpertParallel, ids: &[i32]) -> Result<DeviceBuffer> {
    match ep.config().topk_idx {
        TopkIdx::I32 => DeviceBuffer::from_slice(ep.gpu(), ids),
        TopkIdx::I64 => DeviceBuffer::from_slice(ep.gpu(), &reference::widen_ids(ids)),
    }
}

fn upload(ep: &ExpertParallel, p: &Plan, me: usize) -> Result<Bufs> {
    let gpu = ep.gpu();
    let i = &p.inputs[me];
    let out_bytes = p.out.len() + TAIL;
    Ok(Bufs {
        x: DeviceBuffer::from_slice(gpu, &i.x)?,
        idx: upload_ids(ep, &i.topk_idx)?,
        w: DeviceBuffer::from_slice(gpu, &i.topk_weights)?,
        y: DeviceBuffer::from_slice(gpu, &p.ys[me])?,
        out: DeviceBuffer::filled(gpu, out_bytes, POISON)?,
    })
}

fn dispatch(ep: &mut ExpertParallel, c: &Case, b: &Bufs, tokens: usize) -> Result<Dispatched> {
    let input = DispatchInput { x: &b.x, dtype: c.dtype, topk_idx: &b.idx, topk_weights: &b.w, tokens, k: c.k };
    ep.dispatch_as(&input, c.format, ep.gpu().clone().stream())
}

fn check_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) -> Result<()> {
    if got.len() != want.len() {
        return Err(fail(format!("{what}: {} values, expected {}", got.len(), want.len())));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let wrong = got.iter().zip(want).filter(|(a, b)| a != b).count();
        return Err(fail(format!(
            "{what}: {wrong} of {} values wrong, first at {i}: {:?}, expected {:?}",
            want.len(),
            got[i],
            want[i]
        )));
    }
    Ok(())
}

/// Compares a layout read from the GPU with the reference, field by field.
fn check_layout(what: &str, got: &Layout, want: &Layout) -> Result<()> {
    check_eq(&format!("{what}: tokens per rank"), &got.tokens_per_rank, &want.tokens_per_rank)?;
    check_eq(&format!("{what}: tokens per expert"), &got.tokens_per_expert, &want.tokens_per_expert)?;
    check_eq(&format!("{what}: is token in rank"), &got.is_token_in_rank, &want.is_token_in_rank)?;
    check_eq(&format!("{what}: send index"), &got.send_index, &want.send_index)
}

/// Checks summed weights read from `buf` (and its poisoned tail) against `want`.
fn check_weights(what: &str, buf: &DeviceBuffer, want: &[f32]) -> Result<()> {
    let got = buf.to_vec::<u8>()?;
    let n = want.len() * 4;
    let bits: Vec<u32> = got[..n].as_chunks::<4>().0.iter().map(|c| u32::from_le_bytes(*c)).collect();
    check_eq(&format!("{what}: summed weights"), &bits, &want.iter().map(|w| w.to_bits()).collect::<Vec<_>>())?;
    if got[n..].iter().any(|&x| x != POISON) {
        return Err(fail(format!("{what}: combine wrote past the summed weights")));
    }
    Ok(())
}

/// Checks the combine output (and the poisoned tail) of this rank.
fn check_out(what: &str, b: &Bufs, want: &[u8]) -> Result<()> {
    let got = b.out.to_vec::<u8>()?;
    check_eq(&format!("{what}: combine output"), &got[..want.len()], want)?;
    if got[want.len()..].iter().any(|&x| x != POISON) {
        return Err(fail(format!("{what}: combine wrote past the output")));
    }
    Ok(())
}

/// Dispatch, full inspection, experts, combine, check: one case.
fn run_case(ep: &mut ExpertParallel, c: &Case, what: &str) -> Result<()> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let p = plan(c, &cfg, n, me);
    let b = upload(ep, &p, me)?;
    let stream = ep.gpu().clone();
    let stream = stream.stream();
    let d = dispatch(ep, c, &b, p.inputs[me].tokens)?;
    check_layout(what, &ep.read_layout(stream)?, &p.layouts[me])?;
    check_received(ep, what, &d, &p, c)?;
    // Even k: the combine also sums the delivered weights back (DeepEP's combined_topk_weights).
    let w_out = DeviceBuffer::filled(ep.gpu(), p.w_out.len() * 4 + TAIL, POISON)?;
    if c.k % 2 == 0 {
        let weights = CombineWeights { input: None, out: &w_out };
        ep.combine_with_weights(&d, (&b.y, &b.out), c.dtype, weights, stream)?;
    } else {
        ep.combine(&d, &b.y, &b.out, c.dtype, stream)?;
    }
    ep.gpu().synchronize()?;
    check_out(what, &b, &p.out)?;
    if c.k % 2 == 0 {
        check_weights(what, &w_out, &p.w_out)?;
    }
    // The reference itself is the mixture the experts define (within rounding).
    let (exact, mag) = reference::moe_exact(c.dtype, &p.inputs[me], cfg.experts);
    let eps = if c.dtype == DataType::Bf16 { 3.0 / 256.0 } else { 1e-5 };
    let out = reference::to_f32(c.dtype, &p.out);
    if let Some(i) = (0..out.len()).find(|&i| (out[i] as f64 - exact[i]).abs() > eps * mag[i] + 1e-30) {
        return Err(fail(format!("{what}: the reference differs from the mixture at {i}: {} vs {}", out[i], exact[i])));
    }
    Ok(())
}

/// What dispatch `d` delivered to this rank (counts, rows, scales, ids, weights, sources)
/// against the plan.
fn check_received(ep: &ExpertParallel, what: &str, d: &Dispatched, p: &Plan, c: &Case) -> Result<()> {
    let me = ep.rank().0;
    let stream = ep.gpu().clone();
    let stream = stream.stream();
    let rc = ep.recv_counts(d, stream)?;
    let want = &p.recv[me];
    check_eq(&format!("{what}: received rows"), &[rc.rows], &[want.rows])?;
    check_eq(&format!("{what}: offsets by source"), &rc.offsets, &want.offsets)?;
    check_eq(&format!("{what}: count matrix"), &rc.matrix, &want.matrix)?;
    check_eq(&format!("{what}: rows per local expert"), &rc.per_expert, &want.per_expert)?;
    let got = ep.read_received(d, stream)?;
    check_eq(&format!("{what}: received x"), &got.x, &p.recv_x.0)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    check_eq(&format!("{what}: received scales"), &bits(&got.x_scales), &bits(&p.recv_x.1))?;
    if d.format() != c.format || d.recv_x_scales_addr().is_some() != c.format.is_fp8() {
        return Err(fail(format!("{what}: the dispatch result says {:?}", d.format())));
    }
    check_eq(&format!("{what}: received ids"), &got.topk_idx, &want.topk_idx)?;
    check_eq(&format!("{what}: received weights"), &bits(&got.topk_weights), &bits(&want.topk_weights))?;
    check_eq(&format!("{what}: received source indices"), &got.src, &want.src)
}

/// The layout kernel alone against the reference: token counts around the block size, ids
/// outside the experts.
fn layouts(ep: &mut ExpertParallel, seed: u64) -> Result<usize> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let mut rng = StdRng::seed_from_u64(seed ^ ((me as u64 + 1) * 0x51));
    let mut cases = 0;
    for (i, &tokens) in [1usize, 2, 511, 512, 513, 1000, 1024, 1025, cfg.max_tokens].iter().enumerate() {
        let tokens = tokens.min(cfg.max_tokens);
        let k = 1 + (i * 3 + me) % cfg.max_topk;
        let e = cfg.experts as i32;
        let idx: Vec<i32> = (0..tokens * k).map(|_| rng.random_range(-3..e + 3)).collect();
        let buf = upload_ids(ep, &idx)?;
        let stream = ep.gpu().clone();
        ep.layout(&buf, tokens, k, stream.stream())?;
        let got = ep.read_layout(stream.stream())?;
        let want = reference::layout(&idx, tokens, k, cfg.experts, n);
        check_layout(&format!("layout of {tokens} tokens, k = {k}"), &got, &want)?;
        cases += 1;
    }
    Ok(cases)
}

/// Dispatch and combine pairs enqueued with no host synchronisation, checked after one.
fn back_to_back(ep: &mut ExpertParallel, base: &Case) -> Result<usize> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let mut cases = vec![];
    for i in 0..7u64 {
        let dtype = if i % 3 == 2 { DataType::F32 } else { DataType::Bf16 };
        let k = 1 + (i as usize * 5) % cfg.max_topk;
        // Pairs 1 and 4 are the same batch: the same bits must come out.
        let seed = if i == 4 { base.seed + 1 } else { base.seed + i };
        let k = if i == 4 { 1 + 5 % cfg.max_topk } else { k };
        let dtype = if i == 4 { DataType::Bf16 } else { dtype };
        let routing = if i == 5 { Routing::ToRank(0) } else { base.routing };
        cases.push(Case { dtype, k, routing, seed, ..*base });
    }
    let plans: Vec<Plan> = cases.iter().map(|c| plan(c, &cfg, n, me)).collect();
    let bufs = plans.iter().map(|p| upload(ep, p, me)).collect::<Result<Vec<_>>>()?;
    let gpu = ep.gpu().clone();
    for ((c, p), b) in cases.iter().zip(&plans).zip(&bufs) {
        let d = dispatch(ep, c, b, p.inputs[me].tokens)?;
        ep.combine(&d, &b.y, &b.out, c.dtype, gpu.stream())?;
    }
    gpu.synchronize()?;
    for (i, (p, b)) in plans.iter().zip(&bufs).enumerate() {
        check_out(&format!("back-to-back pair {i}"), b, &p.out)?;
    }
    let (a, b4) = (bufs[1].out.to_vec::<u8>()?, bufs[4].out.to_vec::<u8>()?);
    if a != b4 {
        return Err(fail("back-to-back: the same batch twice gave different bits".into()));
    }
    Ok(cases.len())
}

/// Dispatch and combine on a stream of their own: it waits for an event recorded after the
/// uploads on the GPU's stream, which waits for an event recorded after the combine.
fn on_a_side_stream(ep: &mut ExpertParallel, c: &Case) -> Result<usize> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let p = plan(c, &cfg, n, me);
    let gpu = ep.gpu().clone();
    let side = gpu.new_stream()?;
    let b = upload(ep, &p, me)?;
    let uploaded = ep.record_event(gpu.stream())?;
    ep.wait_event(&side, &uploaded)?;
    let tokens = p.inputs[me].tokens;
    let input = DispatchInput { x: &b.x, dtype: c.dtype, topk_idx: &b.idx, topk_weights: &b.w, tokens, k: c.k };
    let d = ep.dispatch(&input, &side)?;
    // The caller's weights (not the delivered ones) summed back with the rows.
    let recv = &p.recv;
    let w_ins: Vec<Vec<f32>> = recv.iter().map(|r| r.topk_weights.iter().map(|w| w * 0.5 + 1.0).collect()).collect();
    let offsets: Vec<Vec<usize>> = recv.iter().map(|r| r.offsets.clone()).collect();
    let want = reference::combine_weights(&p.layouts[me], me, (tokens, c.k), (&w_ins, &offsets));
    let w_in = DeviceBuffer::from_slice(&gpu, &w_ins[me])?;
    let w_out = DeviceBuffer::filled(&gpu, want.len() * 4 + TAIL, POISON)?;
    let weights = CombineWeights { input: Some(&w_in), out: &w_out };
    ep.combine_with_weights(&d, (&b.y, &b.out), c.dtype, weights, &side)?;
    let combined = ep.record_event(&side)?;
    ep.wait_event(gpu.stream(), &combined)?;
    gpu.synchronize()?;
    check_out("on a side stream", &b, &p.out)?;
    check_weights("on a side stream", &w_out, &want)?;
    Ok(1)
}

/// Requests the host refuses before launching anything (every rank makes the same ones).
fn refusals(ep: &mut ExpertParallel, base: &Case) -> Result<()> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let p = plan(base, &cfg, n, me);
    let b = upload(ep, &p, me)?;
    let gpu = ep.gpu().clone();
    let s = gpu.stream();
    let expect_err = |r: Result<()>, what: &str, needle: &str| -> Result<()> {
        match r {
            Err(e) if e.to_string().contains(needle) => Ok(()),
            Err(e) => Err(fail(format!("{what}: unexpected error {e}"))),
            Ok(()) => Err(fail(format!("{what}: accepted"))),
        }
    };
    let too_many = DispatchInput {
        x: &b.x,
        dtype: base.dtype,
        topk_idx: &b.idx,
        topk_weights: &b.w,
        tokens: cfg.max_tokens + 1,
        k: base.k,
    };
    expect_err(ep.dispatch(&too_many, s).map(|_| ()), "too many tokens", "more than max_tokens")?;
    let big_k = DispatchInput { k: cfg.max_topk + 1, tokens: 1, ..too_many };
    expect_err(ep.dispatch(&big_k, s).map(|_| ()), "k above max_topk", "max_topk")?;
    let f16 = DispatchInput { dtype: DataType::F16, tokens: 1, ..too_many };
    expect_err(ep.dispatch(&f16, s).map(|_| ()), "f16", "bf16 and f32 are supported")?;
    // FP8 casts bf16 rows of a multiple of 128 elements (this configuration's are 1000).
    let one = DispatchInput { tokens: 1, ..too_many };
    let r = ep.dispatch_as(&one, RecvFormat::E4m3, s).map(|_| ());
    expect_err(r, "FP8 of 1000 columns", "multiple of 128")?;
    let f32_rows = DispatchInput { dtype: DataType::F32, tokens: 1, ..too_many };
    expect_err(ep.dispatch_as(&f32_rows, RecvFormat::E4m3Pow2, s).map(|_| ()), "FP8 of f32 rows", "of f32 rows")?;
    let t = p.inputs[me].tokens;
    let short_x = DeviceBuffer::alloc(&gpu, 17 * cfg.hidden * base.dtype.bytes() - 1)?;
    let short = DispatchInput { x: &short_x, tokens: 17, ..too_many };
    expect_err(ep.dispatch(&short, s).map(|_| ()), "short x", "x buffer holds")?;
    // Two dispatches; the first can no longer be combined, the second once.
    let d1 = dispatch(ep, base, &b, t)?;
    let d2 = dispatch(ep, base, &b, t)?;
    expect_err(ep.combine(&d1, &b.y, &b.out, base.dtype, s), "stale combine", "overwritten by a later dispatch")?;
    let short_w = DeviceBuffer::alloc(&gpu, t * base.k * 4 - 1)?;
    let weights = CombineWeights { input: None, out: &short_w };
    let r = ep.combine_with_weights(&d2, (&b.y, &b.out), base.dtype, weights, s);
    expect_err(r, "short summed weights", "weights output holds")?;
    ep.combine(&d2, &b.y, &b.out, base.dtype, s)?;
    expect_err(ep.combine(&d2, &b.y, &b.out, base.dtype, s), "second combine", "already combined")?;
    gpu.synchronize()?;
    check_out("after refusals", &b, &p.out)
}

/// Two objects built alike, each with one dispatch: each one's handle belongs to it alone. (The
/// handles used to carry a per-object dispatch count, so the first dispatch of two fresh objects
/// had the same number and the second object accepted the first one's handle: its combine would
/// have run with the other dispatch's token count over its own layout.)
fn another_objects_handle(comm: &Communicator, base: &Case) -> Result<()> {
    let (me, n) = (comm.rank(), comm.world_size());
    let cfg = Config::new(300, 64, 8 * n, 4);
    // Sizes refused on rank 0 alone are refused on every rank (none waits for rank 0).
    let bad = Config { hidden: if me == 0 { 7 } else { cfg.hidden }, ..cfg };
    match ExpertParallel::new(comm, bad) {
        Err(Error::InvalidArgument(_)) => {}
        other => return Err(fail(format!("a configuration refused on rank 0: {other:?}"))),
    }
    // Ranks that disagree on the ids they deliver are refused on every rank.
    let ids = Config { expert_ids: if me == 0 { ExpertIds::Global } else { ExpertIds::Local }, ..cfg };
    match ExpertParallel::new(comm, ids) {
        Err(Error::InvalidArgument(m)) if m.contains("global ids") => {}
        other => return Err(fail(format!("ranks that disagree on global ids: {other:?}"))),
    }
    let mut a = ExpertParallel::new(comm, cfg)?;
    let mut b = ExpertParallel::new(comm, cfg)?;
    let c = Case { k: 4, tokens: [200, 150, 17, 99], ..*base };
    let p = plan(&c, &cfg, n, me);
    let (ba, bb) = (upload(&a, &p, me)?, upload(&b, &p, me)?);
    let t = p.inputs[me].tokens;
    let da = dispatch(&mut a, &c, &ba, t)?;
    let db = dispatch(&mut b, &c, &bb, t)?;
    let s = b.gpu().clone();
    match b.combine(&da, &bb.y, &bb.out, c.dtype, s.stream()) {
        Err(Error::InvalidArgument(m)) if m.contains("another object's") => {}
        other => return Err(fail(format!("combine with another object's handle: {other:?}"))),
    }
    if b.recv_counts(&da, s.stream()).is_ok() || a.recv_counts(&db, s.stream()).is_ok() {
        return Err(fail("recv_counts accepted another object's handle".into()));
    }
    // Each object still combines its own dispatch, with the reference's result.
    a.combine(&da, &ba.y, &ba.out, c.dtype, s.stream())?;
    b.combine(&db, &bb.y, &bb.out, c.dtype, s.stream())?;
    s.synchronize()?;
    check_out("object a", &ba, &p.out)?;
    check_out("object b", &bb, &p.out)?;
    println!("mp_ep: rank {me}: another object's handle refused");
    Ok(())
}

/// Expects `r` to be an error that contains `needle`.
fn refused<T>(r: Result<T>, what: &str, needle: &str) -> Result<()> {
    match r {
        Err(e) if e.to_string().contains(needle) => Ok(()),
        Err(e) => Err(fail(format!("{what}: unexpected error {e}"))),
        Ok(_) => Err(fail(format!("{what}: accepted"))),
    }
}

/// Several dispatches in flight (two receive slots) combined in any order, the third in flight
/// refusing the oldest; cached dispatches (into another slot and into their own) against the
/// reference and a fresh dispatch of the same rows; combine bias (one and two tensors, bf16 and
/// f32, with the weights); an object sized for bf16 rows.
fn slots_cached_and_bias(comm: &Communicator, seed: u64, ring_rows: Option<usize>) -> Result<usize> {
    let (me, n) = (comm.rank(), comm.world_size());
    let cfg = Config { slots: 2, ..Config::new(300, 1000, 8 * n, 8) }.pipelined(ring_rows);
    let mut ep = ExpertParallel::new(comm, cfg)?;
    let gpu = ep.gpu().clone();
    let s = gpu.stream();
    let random = Routing::Random { none: 0.15 };
    let case = |dtype, k, tokens, seed| Case { format: RecvFormat::Input, dtype, k, routing: random, tokens, seed };
    let mut total = 0;
    let wide_bytes = ep.memory_bytes().0;
    if wide_bytes as u64 != cfg.shared_bytes(n, ep.grid().0)? {
        return Err(fail(format!("the shared buffer has {wide_bytes} bytes, not Config::shared_bytes")));
    }

    // 1. A and B in flight, B combined first.
    let (ca, cb) =
        (case(DataType::Bf16, 4, [300, 17, 250, 1], seed + 50), case(DataType::F32, 3, [40, 300, 0, 299], seed + 51));
    let (pa, pb) = (plan(&ca, &cfg, n, me), plan(&cb, &cfg, n, me));
    let (ba, bb) = (upload(&ep, &pa, me)?, upload(&ep, &pb, me)?);
    let da = dispatch(&mut ep, &ca, &ba, pa.inputs[me].tokens)?;
    let db = dispatch(&mut ep, &cb, &bb, pb.inputs[me].tokens)?;
    if (da.slot(), db.slot()) != (0, 1) {
        return Err(fail(format!("two dispatches took slots {} and {}", da.slot(), db.slot())));
    }
    check_received(&ep, "in flight: A", &da, &pa, &ca)?;
    check_received(&ep, "in flight: B", &db, &pb, &cb)?;
    ep.combine(&db, &bb.y, &bb.out, cb.dtype, s)?;
    ep.combine(&da, &ba.y, &ba.out, ca.dtype, s)?;
    gpu.synchronize()?;
    check_out("B combined before A: B", &bb, &pb.out)?;
    check_out("B combined before A: A", &ba, &pa.out)?;
    total += 2;

    // 2. Three in flight with two slots, no host synchronisation: the oldest is refused before
    // anything is launched, the others combine, newest first.
    let cs = [
        case(DataType::Bf16, 2, [100, 300, 7, 64], seed + 52),
        case(DataType::F32, 8, [120, 0, 300, 33], seed + 53),
        case(DataType::Bf16, 5, [300, 299, 298, 0], seed + 54),
    ];
    let ps: Vec<Plan> = cs.iter().map(|c| plan(c, &cfg, n, me)).collect();
    let bs = ps.iter().map(|p| upload(&ep, p, me)).collect::<Result<Vec<_>>>()?;
    let mut ds = vec![];
    for ((c, p), b) in cs.iter().zip(&ps).zip(&bs) {
        ds.push(dispatch(&mut ep, c, b, p.inputs[me].tokens)?);
    }
    let r = ep.combine(&ds[0], &bs[0].y, &bs[0].out, cs[0].dtype, s);
    refused(r, "combine of the oldest of three with two slots", "overwritten by a later dispatch")?;
    refused(ep.recv_counts(&ds[0], s), "recv_counts of the oldest of three", "overwritten")?;
    ep.combine(&ds[2], &bs[2].y, &bs[2].out, cs[2].dtype, s)?;
    ep.combine(&ds[1], &bs[1].y, &bs[1].out, cs[1].dtype, s)?;
    gpu.synchronize()?;
    check_out("three in flight: the newest", &bs[2], &ps[2].out)?;
    check_out("three in flight: the second", &bs[1], &ps[1].out)?;
    if bs[0].out.to_vec::<u8>()?.iter().any(|&x| x != POISON) {
        return Err(fail("three in flight: the refused combine wrote".into()));
    }
    total += 2;

    // 3. Cached dispatches: new rows (f32, then bf16) along d0's routing, into the other slot
    // (its routing and received ids copied), then into the slot of its handle.
    let c0 = case(DataType::Bf16, 6, [300, 200, 3, 150], seed + 55);
    let p0 = plan(&c0, &cfg, n, me);
    let b0 = upload(&ep, &p0, me)?;
    let d0 = dispatch(&mut ep, &c0, &b0, p0.inputs[me].tokens)?;
    ep.combine(&d0, &b0.y, &b0.out, c0.dtype, s)?;
    let c1 = case(DataType::F32, 6, [0; 4], seed + 56);
    let p1 = plan_with(&c1, &cfg, n, me, Some(&p0.inputs), 0);
    let (b1, b1_fresh) = (upload(&ep, &p1, me)?, upload(&ep, &p1, me)?);
    let t1 = p1.inputs[me].tokens;
    if t1 > 0 {
        let short = DeviceBuffer::alloc(&gpu, t1 * cfg.hidden * 4 - 1)?;
        let r = ep.dispatch_cached(&d0, &short, DataType::F32, s);
        refused(r, "cached dispatch of a short x", "x buffer holds")?;
    }
    let d1 = ep.dispatch_cached(&d0, &b1.x, DataType::F32, s)?;
    if d1.slot() == d0.slot() {
        return Err(fail("the cached dispatch took its handle's slot".into()));
    }
    check_layout("cached dispatch", &ep.read_layout(s)?, &p1.layouts[me])?;
    check_received(&ep, "cached dispatch (another slot)", &d1, &p1, &c1)?;
    let w_out = DeviceBuffer::filled(&gpu, p1.w_out.len() * 4 + TAIL, POISON)?;
    let weights = CombineWeights { input: None, out: &w_out };
    ep.combine_with_weights(&d1, (&b1.y, &b1.out), c1.dtype, weights, s)?;
    gpu.synchronize()?;
    check_out("cached dispatch (another slot)", &b1, &p1.out)?;
    check_weights("cached dispatch (another slot)", &w_out, &p1.w_out)?;
    check_out("d0 before the cached dispatch", &b0, &p0.out)?;
    // The same rows dispatched fresh: the same bits.
    let d1_fresh = dispatch(&mut ep, &c1, &b1_fresh, p1.inputs[me].tokens)?;
    ep.combine(&d1_fresh, &b1_fresh.y, &b1_fresh.out, c1.dtype, s)?;
    gpu.synchronize()?;
    if b1_fresh.out.to_vec::<u8>()? != b1.out.to_vec::<u8>()? {
        return Err(fail("a cached dispatch and a fresh one of the same rows gave different bits".into()));
    }
    refused(
        ep.dispatch_cached(&d0, &b1.x, DataType::F32, s),
        "cached dispatch of an overwritten handle",
        "overwritten",
    )?;
    // d1 holds the slot the next dispatch takes: cached into its own slot, with two biases.
    let c2 = case(DataType::Bf16, 6, [0; 4], seed + 57);
    let p2 = plan_with(&c2, &cfg, n, me, Some(&p0.inputs), 2);
    let b2 = upload(&ep, &p2, me)?;
    let d2 = ep.dispatch_cached(&d1, &b2.x, DataType::Bf16, s)?;
    if d2.slot() != d1.slot() {
        return Err(fail("the cached dispatch did not take its handle's slot".into()));
    }
    check_received(&ep, "cached dispatch (its own slot)", &d2, &p2, &c2)?;
    refused(ep.recv_counts(&d1, s), "the handle of a cached dispatch's overwritten slot", "overwritten")?;
    let biases = p2.bias.iter().map(|x| DeviceBuffer::from_slice(&gpu, x)).collect::<Result<Vec<_>>>()?;
    let opts = CombineOptions { bias: [biases.first(), biases.get(1)], ..Default::default() };
    ep.combine_with(&d2, (&b2.y, &b2.out), c2.dtype, &opts, s)?;
    gpu.synchronize()?;
    check_out("cached dispatch (its own slot), two biases", &b2, &p2.out)?;
    total += 4;

    // 4. Bias: one bf16 tensor, two f32 ones, with the delivered weights summed too.
    for (i, c) in
        [case(DataType::Bf16, 4, [300, 1, 0, 77], seed + 58), case(DataType::F32, 2, [10, 300, 300, 0], seed + 59)]
            .iter()
            .enumerate()
    {
        let what = format!("combine with {} bias tensors ({})", i + 1, c.dtype.name());
        let p = plan_with(c, &cfg, n, me, None, i + 1);
        let b = upload(&ep, &p, me)?;
        let d = dispatch(&mut ep, c, &b, p.inputs[me].tokens)?;
        let biases = p.bias.iter().map(|x| DeviceBuffer::from_slice(&gpu, x)).collect::<Result<Vec<_>>>()?;
        let w_out = DeviceBuffer::filled(&gpu, p.w_out.len() * 4 + TAIL, POISON)?;
        let weights = Some(CombineWeights { input: None, out: &w_out });
        let t = p.inputs[me].tokens;
        if t > 0 {
            let short = DeviceBuffer::alloc(&gpu, t * cfg.hidden * c.dtype.bytes() - 1)?;
            let opts = CombineOptions { weights, bias: [biases.first(), Some(&short)] };
            refused(ep.combine_with(&d, (&b.y, &b.out), c.dtype, &opts, s), &what, "bias 1 holds")?;
        }
        let opts = CombineOptions { weights, bias: [biases.first(), biases.get(1)] };
        ep.combine_with(&d, (&b.y, &b.out), c.dtype, &opts, s)?;
        gpu.synchronize()?;
        check_out(&what, &b, &p.out)?;
        check_weights(&what, &w_out, &p.w_out)?;
        total += 1;
    }
    drop(ep);

    // 5. An object for bf16 rows (Config::widest): receive rows and landing of half the bytes;
    // f32 rows refused.
    let narrow = Config { widest: DataType::Bf16, ..cfg };
    let mut ep = ExpertParallel::new(comm, narrow)?;
    let bytes = ep.memory_bytes().0;
    let want = narrow.shared_bytes(n, ep.grid().0)?;
    let rows = 2 * 2 * (n * 300 * 1000 * 2) as u64; // two slots of receive rows and landing
    // (Each region's start is rounded up to 256 bytes.)
    let saved = (wide_bytes as u64).saturating_sub(want);
    // (Pipelined, the rings halve instead, and the local buffer.)
    if bytes as u64 != want || (ring_rows.is_none() && saved.abs_diff(rows) > 4 * 256) {
        return Err(fail(format!("a bf16 object has {bytes} bytes (Config: {want}, the f32 one {wide_bytes})")));
    }
    let c = case(DataType::Bf16, 8, [300, 299, 1, 0], seed + 60);
    run_case(&mut ep, &c, "an object sized for bf16")?;
    let p = plan(&c, &narrow, n, me);
    let b = upload(&ep, &p, me)?;
    let f32_rows =
        DispatchInput { x: &b.x, dtype: DataType::F32, topk_idx: &b.idx, topk_weights: &b.w, tokens: 1, k: 8 };
    refused(ep.dispatch(&f32_rows, s), "f32 rows on a bf16 object", "Config::widest")?;
    let mode = if ring_rows.is_some() { " (pipelined)" } else { "" };
    println!("mp_ep: rank {me}: slots, cached dispatch, bias and bf16 sizing ok{mode}");
    Ok(total + 1)
}

fn run(comm: &Communicator) -> Result<()> {
    let (me, n) = (comm.rank(), comm.world_size());
    let own_seed: u64 =
        std::env::var("MSCCLPP_RS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    let seed = comm.bootstrap().all_gather_pod(&own_seed)?[0];
    if me == 0 {
        println!("mp_ep: {n} ranks, seed {seed} (MSCCLPP_RS_SEED={seed} repeats this run)");
    }
    let random = Routing::Random { none: 0.15 };
    let mut total = 0usize;

    // Hidden 1000 (not a power of two), 64 experts, up to 1100 tokens (more than two per
    // thread of the layout kernel) and top-8.
    let cfg = Config::new(1100, 1000, 64, 8);
    let mut ep = ExpertParallel::new(comm, cfg)?;
    let (blocks, dt, ct) = ep.grid();
    // The default SM budget: DeepEP's 20, or this rank's share of the SMs when smaller.
    if blocks != DEFAULT_BLOCKS.min(comm.sm_share()?) {
        return Err(fail(format!("{blocks} blocks by default, expected {DEFAULT_BLOCKS} or this rank's SMs")));
    }
    total += layouts(&mut ep, seed)?;
    let mut cases: Vec<(String, Case)> = vec![];
    for k in 1..=8 {
        let tokens = [300 - 13 * k, 217 + 3 * k, 1 + k, 256];
        cases.push((
            format!("random bf16 k={k}"),
            Case {
                format: RecvFormat::Input,
                dtype: DataType::Bf16,
                k,
                routing: random,
                tokens,
                seed: seed + k as u64,
            },
        ));
    }
    for (k, tokens) in [(2, [100, 300, 7, 64]), (8, [300, 299, 298, 297])] {
        cases.push((
            format!("random f32 k={k}"),
            Case {
                format: RecvFormat::Input,
                dtype: DataType::F32,
                k,
                routing: random,
                tokens,
                seed: seed + 20 + k as u64,
            },
        ));
    }
    let last = n - 1;
    cases.push((
        format!("all to rank {last} bf16 k=8"),
        Case {
            format: RecvFormat::Input,
            dtype: DataType::Bf16,
            k: 8,
            routing: Routing::ToRank(last),
            tokens: [300, 150, 1, 299],
            seed: seed + 30,
        },
    ));
    cases.push((
        "all to rank 0 f32 k=3".into(),
        Case {
            format: RecvFormat::Input,
            dtype: DataType::F32,
            k: 3,
            routing: Routing::ToRank(0),
            tokens: [10, 300, 200, 0],
            seed: seed + 31,
        },
    ));
    cases.push((
        "empty batches".into(),
        Case {
            format: RecvFormat::Input,
            dtype: DataType::Bf16,
            k: 4,
            routing: random,
            tokens: [0; 4],
            seed: seed + 32,
        },
    ));
    cases.push((
        "rank 0 empty".into(),
        Case {
            format: RecvFormat::Input,
            dtype: DataType::Bf16,
            k: 6,
            routing: random,
            tokens: [0, 300, 300, 300],
            seed: seed + 33,
        },
    ));
    cases.push((
        "full, every slot an expert".into(),
        Case {
            format: RecvFormat::Input,
            dtype: DataType::Bf16,
            k: 8,
            routing: Routing::Random { none: 0.0 },
            tokens: [1100; 4],
            seed: seed + 34,
        },
    ));
    for (what, c) in &cases {
        run_case(&mut ep, c, &format!("{what} [{blocks} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    total += back_to_back(&mut ep, &cases[3].1)?;
    refusals(&mut ep, &cases[7].1)?;
    drop(ep);
    another_objects_handle(comm, &cases[3].1)?;
    total += slots_cached_and_bias(comm, seed, None)?;
    total += window_form(comm, seed)?;
    total += pipelined(comm, seed, &cases)?;
    total += graph::run(comm, seed)?;

    // Few blocks, few threads: many tokens per warp and per block; plain launches (the other
    // configurations overlap each kernel's launch with the end of the one before); global ids,
    // counts per local expert rounded up to 128.
    let small = Config {
        blocks: Some(3),
        threads: Some(64),
        overlap: false,
        expert_ids: ExpertIds::Global,
        expert_alignment: 128,
        ..cfg
    };
    let mut ep = ExpertParallel::new(comm, small)?;
    let (blocks, dt, ct) = ep.grid();
    for (what, c) in [&cases[7], &cases[9], &cases[10], &cases[12]].map(|x| (x.0.clone(), x.1)) {
        run_case(&mut ep, &c, &format!("{what} [{blocks} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    drop(ep);

    // One block per rank, the smallest SM budget, with i64 ids (every -1 replaced by an i64 that
    // names no expert, some of which an i32 truncation would read as one); then on a stream of
    // the experts' own, ordered by events.
    let one = Config { blocks: Some(1), topk_idx: TopkIdx::I64, ..cfg };
    let mut ep = ExpertParallel::new(comm, one)?;
    let (blocks, dt, ct) = ep.grid();
    total += layouts(&mut ep, seed + 1)?;
    for (what, c) in [&cases[0], &cases[7], &cases[8], &cases[10], &cases[12]].map(|x| (x.0.clone(), x.1)) {
        run_case(&mut ep, &c, &format!("{what} [{blocks} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    total += on_a_side_stream(&mut ep, &cases[2].1)?;
    drop(ep);

    // DeepSeek-V3's hidden size and expert count, a decoding batch; bf16, f32 and FP8 (DeepEP's
    // scales, power-of-two ones, UE8M0 bytes), whose e4m3 bytes and scales are checked bit for
    // bit.
    let big = Config { expert_alignment: 128, ..Config::new(128, 7168, 256, 8) };
    let fp8 = |format, k, routing, tokens, seed| Case { format, dtype: DataType::Bf16, k, routing, tokens, seed };
    let fp8_cases = [
        ("deepseek fp8 k=8", fp8(RecvFormat::E4m3, 8, Routing::Random { none: 0.0 }, [128, 100, 128, 77], seed + 42)),
        ("deepseek fp8 pow2 k=8", fp8(RecvFormat::E4m3Pow2, 8, random, [0, 128, 33, 1], seed + 43)),
        ("deepseek fp8 k=3 to rank 0", fp8(RecvFormat::E4m3, 3, Routing::ToRank(0), [128, 5, 128, 64], seed + 44)),
        ("deepseek fp8 ue8m0 k=8", fp8(RecvFormat::E4m3Ue8m0, 8, random, [128, 128, 1, 100], seed + 45)),
    ];
    let mut ep = ExpertParallel::new(comm, big)?;
    let (blocks, dt, ct) = ep.grid();
    for (what, c) in [
        (
            "deepseek bf16 k=8",
            Case {
                format: RecvFormat::Input,
                dtype: DataType::Bf16,
                k: 8,
                routing: Routing::Random { none: 0.0 },
                tokens: [128, 100, 128, 77],
                seed: seed + 40,
            },
        ),
        fp8_cases[0],
        (
            "deepseek f32 k=4",
            Case {
                format: RecvFormat::Input,
                dtype: DataType::F32,
                k: 4,
                routing: random,
                tokens: [50, 128, 0, 128],
                seed: seed + 41,
            },
        ),
        fp8_cases[1],
        fp8_cases[2],
        fp8_cases[3],
    ] {
        run_case(&mut ep, &c, &format!("{what} [{blocks} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    drop(ep);
    // FP8 with one block of 64 threads: many (token, 128 columns) per thread.
    let mut ep = ExpertParallel::new(comm, Config { blocks: Some(1), threads: Some(64), overlap: false, ..big })?;
    let (blocks, dt, ct) = (ep.grid().0, ep.fp8_threads(), ep.grid().2);
    if dt != 64 {
        return Err(fail(format!("the FP8 dispatch runs {dt} threads per block, 64 configured")));
    }
    for (what, c) in fp8_cases {
        run_case(&mut ep, &c, &format!("{what} [{blocks} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    println!("mp_ep: rank {me}: {total} cases ok (layouts, dispatch + combine, back-to-back), refusals ok");
    drop(ep);
    let decoded = decode::run(comm, seed)?;
    println!("mp_ep: rank {me}: {decoded} decode cases ok (dispatch by local expert, weighted combine, CUDA graphs)");
    Ok(())
}

/// The pipelined mode (`Config::ring_rows`): every case of the default configuration with
/// rings of 64 rows and the default grid (then back to back and on a side stream), every fourth
/// with rings of 4 rows over 4 blocks of 64 threads and every tenth with rings of 1 row over 2
/// blocks (the rings wrap hundreds of times), DeepSeek-V3's shape in bf16, f32 and FP8 (each scale format), two slots, cached
/// dispatches, bias and a bf16 object; the shared buffer as `Config::shared_bytes` says; the
/// window form refused. Prints the shared buffer of DeepSeek-V3's sizes (4096 tokens, hidden
/// 7168, f32 sizing, 20 blocks) pipelined and unpipelined on this rank count.
fn pipelined(comm: &Communicator, seed: u64, cases: &[(String, Case)]) -> Result<usize> {
    let (me, n) = (comm.rank(), comm.world_size());
    let mut total = 0;
    let cfg = Config::new(1100, 1000, 64, 8);
    for (ring, blocks, threads) in [(64, None, None), (4, Some(4), Some(64)), (1, Some(2), Some(64))] {
        let pc = Config { blocks, threads, ..cfg }.pipelined(Some(ring));
        let mut ep = ExpertParallel::new(comm, pc)?;
        let (b, dt, ct) = ep.grid();
        let (shared, local) = ep.memory_bytes();
        if shared as u64 != pc.shared_bytes(n, b)? || (local as u64) < pc.local_bytes(n, b)? {
            return Err(fail(format!("pipelined: {shared} shared and {local} local bytes, not Config's")));
        }
        // (Small rings hand every few rows back and forth: a subset, for ranks that are processes
        // taking turns on one GPU.)
        let step = if ring == 64 { 1 } else { 64 / ring / 8 + 2 };
        for (what, c) in cases.iter().step_by(step) {
            run_case(&mut ep, c, &format!("pipelined {what} [rings of {ring}, {b} blocks x {dt}/{ct} threads]"))?;
            total += 1;
        }
        if ring == 64 {
            total += back_to_back(&mut ep, &cases[3].1)?;
            total += on_a_side_stream(&mut ep, &cases[2].1)?;
            ep.set_form(Form::Window);
            let p = plan(&cases[0].1, &cfg, n, me);
            let bufs = upload(&ep, &p, me)?;
            let r = dispatch(&mut ep, &cases[0].1, &bufs, p.inputs[me].tokens).map(|_| ());
            refused(r, "a window dispatch in the pipelined mode", "pipelined mode")?;
        }
    }
    let random = Routing::Random { none: 0.15 };
    let big = Config { expert_alignment: 128, ..Config::new(128, 7168, 256, 8) }.pipelined(Some(16));
    let mut ep = ExpertParallel::new(comm, big)?;
    let (b, dt, ct) = ep.grid();
    let bf16 = |format, k, routing, tokens, seed| Case { format, dtype: DataType::Bf16, k, routing, tokens, seed };
    let f32_case = Case { dtype: DataType::F32, ..bf16(RecvFormat::Input, 4, random, [50, 128, 0, 128], seed + 71) };
    for (what, c) in [
        ("bf16 k=8", bf16(RecvFormat::Input, 8, Routing::Random { none: 0.0 }, [128, 100, 128, 77], seed + 70)),
        ("f32 k=4", f32_case),
        ("fp8 k=8", bf16(RecvFormat::E4m3, 8, Routing::Random { none: 0.0 }, [128, 100, 128, 77], seed + 72)),
        ("fp8 pow2 k=8", bf16(RecvFormat::E4m3Pow2, 8, random, [0, 128, 33, 1], seed + 73)),
        ("fp8 ue8m0 k=3 to rank 0", bf16(RecvFormat::E4m3Ue8m0, 3, Routing::ToRank(0), [128, 5, 128, 64], seed + 74)),
    ] {
        run_case(&mut ep, &c, &format!("pipelined deepseek {what} [rings of 16, {b} blocks x {dt}/{ct} threads]"))?;
        total += 1;
    }
    drop(ep);
    total += slots_cached_and_bias(comm, seed + 75, Some(8))?;
    let deepseek = Config::new(4096, 7168, 256, 8);
    let mib = |c: Config| c.shared_bytes(n, DEFAULT_BLOCKS).map(|b| b as f64 / (1 << 20) as f64);
    let ring = 64;
    println!(
        "mp_ep: rank {me}: pipelined: {total} cases ok, shared buffer {:.0} MiB vs {:.0} MiB unpipelined ({n} ranks, \
         4096 tokens, hidden 7168, f32 sizing, {DEFAULT_BLOCKS} blocks, rings of {ring} rows)",
        mib(deepseek.pipelined(Some(ring)))?,
        mib(deepseek)?
    );
    Ok(total)
}

/// Received rows, scales, ids, weights and sources, as bits.
type RecvBits = (Vec<u8>, Vec<u32>, Vec<i32>, Vec<u32>, Vec<i32>);

/// The received rows as bits (floats compared by their bits).
fn received_bits(r: &ReceivedRows) -> RecvBits {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (r.x.clone(), bits(&r.x_scales), r.topk_idx.clone(), bits(&r.topk_weights), r.src.clone())
}

/// One case dispatched and combined in each form on `ep` (each against the reference), then
/// compared bit for bit: the received counts and rows, the combined rows and (even k) the summed
/// weights; `cross`: the window dispatch combined in the peer-table form and the reverse.
fn both_forms(ep: &mut ExpertParallel, c: &Case, what: &str, cross: bool) -> Result<()> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let p = plan(c, &cfg, n, me);
    let gpu = ep.gpu().clone();
    let s = gpu.stream();
    let mut seen = vec![];
    for (dispatch_form, combine_form) in [(Form::PeerTable, Form::PeerTable), (Form::Window, Form::Window)]
        .into_iter()
        .map(|(d, c)| if cross { (d, if d == Form::Window { Form::PeerTable } else { Form::Window }) } else { (d, c) })
    {
        let what = format!("{what} [dispatch {dispatch_form:?}, combine {combine_form:?}]");
        let b = upload(ep, &p, me)?;
        ep.set_form(dispatch_form);
        let d = dispatch(ep, c, &b, p.inputs[me].tokens)?;
        check_received(ep, &what, &d, &p, c)?;
        let counts = ep.recv_counts(&d, s)?;
        let got = received_bits(&ep.read_received(&d, s)?);
        ep.set_form(combine_form);
        let w_out = DeviceBuffer::filled(&gpu, p.w_out.len() * 4 + TAIL, POISON)?;
        if c.k % 2 == 0 {
            let weights = CombineWeights { input: None, out: &w_out };
            ep.combine_with_weights(&d, (&b.y, &b.out), c.dtype, weights, s)?;
        } else {
            ep.combine(&d, &b.y, &b.out, c.dtype, s)?;
        }
        gpu.synchronize()?;
        check_out(&what, &b, &p.out)?;
        if c.k % 2 == 0 {
            check_weights(&what, &w_out, &p.w_out)?;
        }
        seen.push((counts, got, b.out.to_vec::<u8>()?, w_out.to_vec::<u8>()?));
    }
    let (a, w) = (&seen[0], &seen[1]);
    if a.0 != w.0 || a.1 != w.1 {
        return Err(fail(format!("{what}: the two forms received different counts or bits")));
    }
    if a.2 != w.2 || a.3 != w.3 {
        return Err(fail(format!("{what}: the two forms combined different bits")));
    }
    ep.set_form(Form::PeerTable);
    Ok(())
}

/// The window form (`Form::Window`) against the reference and the peer-table form, bit for bit.
fn window_form(comm: &Communicator, seed: u64) -> Result<usize> {
    let (me, n) = (comm.rank(), comm.world_size());
    let random = Routing::Random { none: 0.15 };
    let case = |dtype, k, routing, tokens, seed| Case { format: RecvFormat::Input, dtype, k, routing, tokens, seed };
    let cases = [
        ("window bf16 k=8", case(DataType::Bf16, 8, random, [300, 217, 9, 256], seed + 70)),
        ("window f32 k=3", case(DataType::F32, 3, random, [100, 300, 7, 64], seed + 71)),
        ("window all to the last rank", case(DataType::Bf16, 5, Routing::ToRank(n - 1), [300, 1, 150, 299], seed + 72)),
        ("window rank 0 empty", case(DataType::Bf16, 2, random, [0, 300, 300, 300], seed + 73)),
        ("window empty batches", case(DataType::F32, 4, random, [0; 4], seed + 74)),
    ];
    let mut total = 0;
    let cfg = Config { slots: 2, ..Config::new(300, 1000, 8 * n, 8) };
    let mut ep = ExpertParallel::new(comm, cfg)?;
    let (blocks, dt, ct) = ep.grid();
    let (wd, _, wc) = ep.window_threads();
    let grid = format!("{blocks} blocks x {dt}/{ct} threads, window {wd}/{wc}");
    for (i, (what, c)) in cases.iter().enumerate() {
        both_forms(&mut ep, c, &format!("{what} [{grid}]"), false)?;
        both_forms(&mut ep, c, &format!("{what}, crossed [{grid}]"), i % 2 == 0)?;
        total += 2;
    }
    // Every case in the window form with the whole inspection (layout, counts, rows, the
    // mixture), then pairs back to back in alternating forms with no host synchronisation.
    ep.set_form(Form::Window);
    for (what, c) in &cases {
        run_case(&mut ep, c, &format!("{what}, window form [{grid}]"))?;
        total += 1;
    }
    let plans: Vec<Plan> = cases.iter().map(|(_, c)| plan(c, &cfg, n, me)).collect();
    let bufs = plans.iter().map(|p| upload(&ep, p, me)).collect::<Result<Vec<_>>>()?;
    let gpu = ep.gpu().clone();
    for (i, (((_, c), p), b)) in cases.iter().zip(&plans).zip(&bufs).enumerate() {
        ep.set_form(if i % 2 == 0 { Form::Window } else { Form::PeerTable });
        let d = dispatch(&mut ep, c, b, p.inputs[me].tokens)?;
        ep.set_form(if i % 3 == 0 { Form::PeerTable } else { Form::Window });
        ep.combine(&d, &b.y, &b.out, c.dtype, gpu.stream())?;
    }
    gpu.synchronize()?;
    for (i, (p, b)) in plans.iter().zip(&bufs).enumerate() {
        check_out(&format!("window form, back-to-back pair {i}"), b, &p.out)?;
    }
    total += cases.len();
    // A cached dispatch in the window form: the reference and a fresh dispatch's bits.
    ep.set_form(Form::Window);
    let c0 = case(DataType::Bf16, 6, random, [300, 200, 3, 150], seed + 75);
    let p0 = plan(&c0, &cfg, n, me);
    let b0 = upload(&ep, &p0, me)?;
    let d0 = dispatch(&mut ep, &c0, &b0, p0.inputs[me].tokens)?;
    let c1 = case(DataType::F32, 6, random, [0; 4], seed + 76);
    let p1 = plan_with(&c1, &cfg, n, me, Some(&p0.inputs), 0);
    let b1 = upload(&ep, &p1, me)?;
    let d1 = ep.dispatch_cached(&d0, &b1.x, DataType::F32, gpu.stream())?;
    check_received(&ep, "window form, cached dispatch", &d1, &p1, &c1)?;
    ep.combine(&d1, &b1.y, &b1.out, c1.dtype, gpu.stream())?;
    gpu.synchronize()?;
    check_out("window form, cached dispatch", &b1, &p1.out)?;
    total += 1;
    drop(ep);

    // FP8 (each format) at a hidden size of 1024, and one block of 64 threads.
    let fp8 = |format, k, tokens, seed| Case { format, dtype: DataType::Bf16, k, routing: random, tokens, seed };
    let fp8_cases = [
        ("window fp8 k=8", fp8(RecvFormat::E4m3, 8, [128, 100, 128, 77], seed + 77)),
        ("window fp8 pow2 k=4", fp8(RecvFormat::E4m3Pow2, 4, [0, 128, 33, 1], seed + 78)),
        ("window fp8 ue8m0 k=8", fp8(RecvFormat::E4m3Ue8m0, 8, [128, 128, 1, 100], seed + 79)),
    ];
    for one in [false, true] {
        let base = Config::new(128, 1024, 8 * n, 8);
        let cfg = if one { Config { blocks: Some(1), threads: Some(64), overlap: false, ..base } } else { base };
        let mut ep = ExpertParallel::new(comm, cfg)?;
        let (blocks, (wd, w8, wc)) = (ep.grid().0, ep.window_threads());
        for (what, c) in fp8_cases.iter().chain(&cases[..2]) {
            let what = format!("{what} [{blocks} blocks, window {wd}/{w8}/{wc} threads]");
            both_forms(&mut ep, c, &what, false)?;
            total += 1;
        }
    }
    println!("mp_ep: rank {me}: window form: {total} cases, bit for bit with the peer-table form");
    Ok(total)
}
