//! The decode (low-latency) mode on GPUs (see `mp_ep.rs`'s documentation for what is checked).

use cudarc::driver::{DriverError, sys};
use mscclpp_ep::reference::decode as rd;
use mscclpp_ep::reference::{self, RankInput, Routing};
use mscclpp_ep::{
    Config, DataType, DecodeCombineInput, DecodeDispatched, DecodeInput, LowLatency, RecvFormat, TopkIdx,
};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};

use super::{POISON, TAIL, check_eq, fail};

/// One collective decode case (every rank's batch generated from the seed).
#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DataType,
    format: RecvFormat,
    k: usize,
    routing: Routing,
    /// Tokens of rank r: `tokens[r % 4]` capped at max_tokens.
    tokens: [usize; 4],
    seed: u64,
}

/// The host side of one case for this rank.
struct Plan {
    dtype: DataType,
    input: RankInput,
    recv: rd::Received,
    /// Per local expert: the rows as delivered (FP8: cast) and their scales (empty unless FP8).
    recv_x: Vec<(Vec<u8>, Vec<f32>)>,
    /// This rank's expert outputs in the expert-major layout (unused rows NaN).
    y: Vec<u8>,
    out: Vec<u8>,
}

fn plan(c: &Case, cfg: &Config, n: usize, me: usize) -> Plan {
    let inputs: Vec<RankInput> = (0..n)
        .map(|r| {
            let t = c.tokens[r % 4].min(cfg.max_tokens);
            let mut i = reference::random_input(c.seed, r, c.dtype, t, cfg.hidden, c.k, (cfg.experts, n), c.routing);
            if c.format.is_fp8() {
                i.x = reference::spread_magnitudes(&i.x, cfg.hidden);
            }
            i
        })
        .collect();
    let row = cfg.hidden * c.dtype.bytes();
    let mut recv: Vec<rd::Received> = (0..n).map(|d| rd::received(&inputs, d, cfg.experts, row)).collect();
    let outputs: Vec<Vec<Vec<u8>>> =
        (0..n).map(|d| rd::scaled_experts(c.dtype, &recv[d], (d, n), cfg.experts)).collect();
    let recv_x = recv[me]
        .x
        .iter()
        .map(|x| match c.format {
            RecvFormat::Input => (x.clone(), vec![]),
            fp8 => reference::cast_e4m3(x, cfg.hidden, fp8),
        })
        .collect();
    let y = rd::expert_major(&outputs[me], n * cfg.max_tokens, row);
    let out = rd::combine(c.dtype, &inputs[me], me, (&recv, &outputs), cfg.experts, row);
    Plan { dtype: c.dtype, input: inputs[me].clone(), recv: recv.swap_remove(me), recv_x, y, out }
}

/// This rank's device buffers of one case.
struct Bufs {
    x: DeviceBuffer,
    idx: DeviceBuffer,
    w: DeviceBuffer,
    y: DeviceBuffer,
    out: DeviceBuffer,
}

fn ids(ll: &LowLatency, ids: &[i32]) -> Vec<u8> {
    match ll.config().topk_idx {
        TopkIdx::I32 => bytemuck::cast_slice(ids).to_vec(),
        TopkIdx::I64 => bytemuck::cast_slice(&reference::widen_ids(ids)).to_vec(),
    }
}

fn upload(ll: &LowLatency, p: &Plan) -> Result<Bufs> {
    let gpu = ll.gpu();
    Ok(Bufs {
        x: DeviceBuffer::from_slice(gpu, &p.input.x)?,
        idx: DeviceBuffer::from_slice(gpu, &ids(ll, &p.input.topk_idx))?,
        w: DeviceBuffer::from_slice(gpu, &p.input.topk_weights)?,
        y: DeviceBuffer::from_slice(gpu, &p.y)?,
        out: DeviceBuffer::filled(gpu, p.out.len() + TAIL, POISON)?,
    })
}

/// Overwrites the buffers with another plan of the same sizes, the output poisoned again.
fn rewrite(ll: &LowLatency, b: &Bufs, p: &Plan) -> Result<()> {
    b.x.write(0, &p.input.x)?;
    b.idx.write(0, &ids(ll, &p.input.topk_idx))?;
    b.w.write(0, &p.input.topk_weights)?;
    b.y.write(0, &p.y)?;
    b.out.fill(POISON)
}

fn dispatch(ll: &mut LowLatency, c: &Case, b: &Bufs, tokens: usize) -> Result<DecodeDispatched> {
    let input = DecodeInput { x: &b.x, dtype: c.dtype, topk_idx: &b.idx, tokens, k: c.k };
    ll.dispatch(&input, c.format, ll.gpu().clone().stream())
}

fn combine(ll: &mut LowLatency, d: &DecodeDispatched, b: &Bufs) -> Result<()> {
    let input = DecodeCombineInput { y: &b.y, topk_idx: &b.idx, topk_weights: &b.w, out: &b.out };
    ll.combine(d, &input, ll.gpu().clone().stream())
}

/// Everything dispatch `d` delivered and the combine output, against the plan.
fn check(ll: &LowLatency, d: &DecodeDispatched, p: &Plan, b: &Bufs, what: &str) -> Result<()> {
    let got = ll.read_received(d, ll.gpu().stream())?;
    check_eq(&format!("{what}: rows per local expert"), &got.count, &p.recv.count)?;
    check_eq(&format!("{what}: layout ranges"), &got.range, &p.recv.range)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (j, (x, scales)) in p.recv_x.iter().enumerate() {
        check_eq(&format!("{what}: rows of local expert {j}"), &got.x[j], x)?;
        check_eq(&format!("{what}: scales of local expert {j}"), &bits(&got.x_scales[j]), &bits(scales))?;
        check_eq(&format!("{what}: source indices of local expert {j}"), &got.src[j], &p.recv.src[j])?;
    }
    let out = b.out.to_vec::<u8>()?;
    check_eq(&format!("{what}: combine output"), &out[..p.out.len()], &p.out)?;
    if out[p.out.len()..].iter().any(|&x| x != POISON) {
        return Err(fail(format!("{what}: combine wrote past the output")));
    }
    // The reference itself is the mixture (within rounding).
    let dtype = p.dtype;
    let (exact, mag) = reference::moe_exact(dtype, &p.input, ll.config().experts);
    let eps = if dtype == DataType::Bf16 { 3.0 / 256.0 } else { 1e-5 };
    let outf = reference::to_f32(dtype, &p.out);
    if let Some(i) = (0..outf.len()).find(|&i| (outf[i] as f64 - exact[i]).abs() > eps * mag[i] + 1e-30) {
        return Err(fail(format!(
            "{what}: the reference differs from the mixture at {i}: {} vs {}",
            outf[i], exact[i]
        )));
    }
    Ok(())
}

fn run_case(ll: &mut LowLatency, c: &Case, what: &str) -> Result<()> {
    let (me, n) = ll.rank();
    let p = plan(c, ll.config(), n, me);
    let b = upload(ll, &p)?;
    let d = dispatch(ll, c, &b, p.input.tokens)?;
    if d.format() != c.format || d.recv_x_scales_addr().is_some() != c.format.is_fp8() {
        return Err(fail(format!("{what}: the dispatch result says {:?}", d.format())));
    }
    combine(ll, &d, &b)?;
    ll.gpu().synchronize()?;
    check(ll, &d, &p, &b, what)
}

/// Dispatch and combine captured in a CUDA graph, replayed twice with other data in the same
/// buffers (the same token counts), each replay checked.
fn graph(ll: &mut LowLatency, c: &Case, what: &str) -> Result<()> {
    let (me, n) = ll.rank();
    let plans = [plan(c, ll.config(), n, me), plan(&Case { seed: c.seed ^ 0x5eed, ..*c }, ll.config(), n, me)];
    if plans[0].input.x == plans[1].input.x && !plans[0].input.x.is_empty() {
        return Err(fail(format!("{what}: the two replays' data are the same")));
    }
    let b = upload(ll, &plans[1])?;
    let gpu = ll.gpu().clone();
    let stream = gpu.stream();
    let drv = |what: &'static str| move |source: DriverError| Error::Driver { context: what.into(), source };
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).map_err(drv("begin capture"))?;
    let captured = dispatch(ll, c, &b, plans[0].input.tokens).and_then(|d| combine(ll, &d, &b).map(|()| d));
    // End the capture whatever happened, so the stream is usable.
    let g = stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(drv("end capture"));
    let d = captured?;
    let g = g?.ok_or_else(|| fail(format!("{what}: the capture made no graph")))?;
    for (i, p) in plans.iter().enumerate() {
        rewrite(ll, &b, p)?;
        g.launch().map_err(drv("graph launch"))?;
        gpu.synchronize()?;
        check(ll, &d, p, &b, &format!("{what}, replay {i}"))?;
    }
    Ok(())
}

/// Requests beyond the configuration and stale handles: errors before any launch.
fn refusals(ll: &mut LowLatency, c: &Case) -> Result<()> {
    let (me, n) = ll.rank();
    let p = plan(c, ll.config(), n, me);
    let b = upload(ll, &p)?;
    let s = ll.gpu().clone();
    let s = s.stream();
    let input = DecodeInput { x: &b.x, dtype: c.dtype, topk_idx: &b.idx, tokens: ll.config().max_tokens + 1, k: c.k };
    if ll.dispatch(&input, RecvFormat::Input, s).is_ok() {
        return Err(fail("decode: a batch beyond max_tokens accepted".into()));
    }
    let f32_rows = DecodeInput { dtype: DataType::F32, tokens: 0, ..input };
    if ll.dispatch(&f32_rows, RecvFormat::E4m3, s).is_ok() {
        return Err(fail("decode: an FP8 dispatch of f32 rows accepted".into()));
    }
    let d = dispatch(ll, c, &b, p.input.tokens)?;
    let short = DeviceBuffer::filled(ll.gpu(), 16, 0)?;
    let bad = DecodeCombineInput { y: &short, topk_idx: &b.idx, topk_weights: &b.w, out: &b.out };
    if ll.combine(&d, &bad, s).is_ok() {
        return Err(fail("decode: a y buffer shorter than the experts' rows accepted".into()));
    }
    combine(ll, &d, &b)?;
    if combine(ll, &d, &b).is_ok() {
        return Err(fail("decode: a second combine of one dispatch accepted".into()));
    }
    ll.gpu().synchronize()?;
    check(ll, &d, &p, &b, "decode refusals")
}

/// The decode cases; returns how many ran.
pub fn run(comm: &Communicator, seed: u64) -> Result<usize> {
    let (me, n) = (comm.rank(), comm.world_size());
    let random = Routing::Random { none: 0.15 };
    let case = |dtype, format, k, routing, tokens, s| Case { dtype, format, k, routing, tokens, seed: seed + 100 + s };
    let (bf16, f32) = (DataType::Bf16, DataType::F32);
    let input = RecvFormat::Input;
    let mut cases: Vec<(String, Case)> = (1..=8)
        .map(|k| {
            let tokens = [128 - 9 * k, 100 + k, 1 + k, 64];
            (format!("decode random bf16 k={k}"), case(bf16, input, k, random, tokens, k as u64))
        })
        .collect();
    let last = n - 1;
    cases.extend([
        ("decode random f32 k=2".into(), case(f32, input, 2, random, [100, 128, 7, 64], 20)),
        ("decode random f32 k=8".into(), case(f32, input, 8, random, [128, 127, 126, 125], 21)),
        (
            format!("decode all to rank {last} bf16 k=8"),
            case(bf16, input, 8, Routing::ToRank(last), [128, 50, 1, 99], 22),
        ),
        ("decode all to rank 0 f32 k=3".into(), case(f32, input, 3, Routing::ToRank(0), [10, 128, 100, 0], 23)),
        ("decode empty batches".into(), case(bf16, input, 4, random, [0; 4], 24)),
        ("decode rank 0 empty".into(), case(bf16, input, 6, random, [0, 128, 128, 128], 25)),
        ("decode full, every slot an expert".into(), case(bf16, input, 8, Routing::Random { none: 0.0 }, [128; 4], 26)),
        ("decode fp8 k=8".into(), case(bf16, RecvFormat::E4m3, 8, random, [128, 100, 3, 77], 27)),
        ("decode fp8 pow2 k=4".into(), case(bf16, RecvFormat::E4m3Pow2, 4, random, [0, 128, 33, 1], 28)),
        (
            "decode fp8 ue8m0 k=6".into(),
            case(bf16, RecvFormat::E4m3Ue8m0, 6, Routing::ToRank(0), [128, 5, 128, 64], 29),
        ),
    ]);
    let mut total = 0;

    // The default grid: 64 experts, hidden 1024, a decode batch of 128.
    let cfg = Config::new(128, 1024, 64, 8);
    let mut ll = LowLatency::new(comm, cfg)?;
    if ll.buffer_bytes() != cfg.decode_bytes(n, ll.grid().0)? {
        return Err(fail("decode: buffer_bytes differs from Config::decode_bytes".into()));
    }
    let (blocks, dt, ct, ft) = ll.grid();
    for (what, c) in &cases {
        run_case(&mut ll, c, &format!("{what} [{blocks} blocks x {dt}/{ct}/{ft} threads]"))?;
        total += 1;
    }
    graph(&mut ll, &cases[7].1, "decode graph bf16 k=8")?;
    graph(&mut ll, &cases[15].1, "decode graph fp8 k=8")?;
    refusals(&mut ll, &cases[2].1)?;
    total += 3;
    drop(ll);

    // Few blocks and threads, plain launches, i64 ids, 16 experts (4 per rank on 4 ranks: k = 8
    // to one rank names experts twice).
    let small = Config {
        blocks: Some(3),
        threads: Some(64),
        overlap: false,
        topk_idx: TopkIdx::I64,
        ..Config::new(50, 512, 16, 8)
    };
    let mut ll = LowLatency::new(comm, small)?;
    let (blocks, dt, ct, ft) = ll.grid();
    for i in [7, 9, 10, 12, 17] {
        let (what, c) = &cases[i];
        run_case(&mut ll, c, &format!("{what} [{blocks} blocks x {dt}/{ct}/{ft} threads, i64 ids]"))?;
        total += 1;
    }
    graph(&mut ll, &cases[5].1, "decode graph bf16 k=6, plain launches")?;
    total += 1;
    drop(ll);

    // DeepSeek-V3's decode shape: 256 experts, hidden 7168, 128 tokens, top-8.
    let big = Config::new(128, 7168, 256, 8);
    let mut ll = LowLatency::new(comm, big)?;
    let (blocks, dt, ct, ft) = ll.grid();
    let full = Routing::Random { none: 0.0 };
    for (what, c) in [
        ("decode deepseek bf16 k=8", case(bf16, input, 8, full, [128, 100, 128, 77], 40)),
        ("decode deepseek fp8 k=8", case(bf16, RecvFormat::E4m3, 8, full, [128, 128, 1, 100], 41)),
    ] {
        run_case(&mut ll, &c, &format!("{what} [{blocks} blocks x {dt}/{ct}/{ft} threads]"))?;
        total += 1;
    }
    if me == 0 {
        println!("mp_ep: decode buffer of {} MiB per rank at DeepSeek-V3's decode shape", ll.buffer_bytes() >> 20);
    }
    Ok(total)
}
