//! The normal mode (`ExpertParallel`) captured in CUDA graphs (see `mp_ep.rs`'s documentation
//! for what is checked).

use cudarc::driver::{CudaGraph, DriverError, sys};
use mscclpp_ep::reference::Routing;
use mscclpp_ep::{CombineWeights, Config, DataType, Dispatched, ExpertParallel, Form, RecvFormat, TopkIdx};
use mscclpp_host::comm::Communicator;
use mscclpp_host::{DeviceBuffer, Error, Result};

use super::{
    Bufs, Case, POISON, Plan, TAIL, check_layout, check_out, check_received, check_weights, dispatch, fail, plan,
    refused, run_case,
};

/// Replays of every captured graph, each with other data.
const REPLAYS: usize = 3;

fn drv(what: &'static str) -> impl Fn(DriverError) -> Error {
    move |source| Error::Driver { context: what.into(), source }
}

/// The input buffers of a graph, holding `p`: `y` sized for every row this rank can receive
/// (the replays' routings differ), the summed weights' output besides.
fn buffers(ep: &ExpertParallel, c: &Case, p: &Plan) -> Result<(Bufs, DeviceBuffer)> {
    let (me, n) = ep.rank();
    let (gpu, cfg) = (ep.gpu(), ep.config());
    let b = Bufs {
        x: DeviceBuffer::alloc(gpu, p.inputs[me].x.len())?,
        idx: DeviceBuffer::alloc(gpu, p.inputs[me].topk_idx.len() * 4)?,
        w: DeviceBuffer::alloc(gpu, p.inputs[me].topk_weights.len() * 4)?,
        y: DeviceBuffer::alloc(gpu, n * cfg.max_tokens * cfg.hidden * c.dtype.bytes())?,
        out: DeviceBuffer::alloc(gpu, p.out.len() + TAIL)?,
    };
    let w_out = DeviceBuffer::alloc(gpu, p.w_out.len() * 4 + TAIL)?;
    rewrite(ep, &b, &w_out, p)?;
    Ok((b, w_out))
}

/// Writes plan `p` into the input buffers (the same sizes), `y` poisoned past this rank's
/// expert rows, the outputs poisoned.
fn rewrite(ep: &ExpertParallel, b: &Bufs, w_out: &DeviceBuffer, p: &Plan) -> Result<()> {
    let me = ep.rank().0;
    let i = &p.inputs[me];
    b.x.write(0, &i.x)?;
    b.idx.write(0, &i.topk_idx)?;
    b.w.write(0, &i.topk_weights)?;
    b.y.fill(POISON)?;
    b.y.write(0, &p.ys[me])?;
    b.out.fill(POISON)?;
    w_out.fill(POISON)
}

/// Dispatch and combine (with the delivered weights summed) captured on the GPU's stream.
fn capture(
    ep: &mut ExpertParallel,
    c: &Case,
    (b, w_out): (&Bufs, &DeviceBuffer),
    tokens: usize,
) -> Result<(Dispatched, CudaGraph)> {
    let gpu = ep.gpu().clone();
    let stream = gpu.stream();
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).map_err(drv("begin capture"))?;
    let captured = dispatch(ep, c, b, tokens).and_then(|d| {
        let weights = CombineWeights { input: None, out: w_out };
        ep.combine_with_weights(&d, (&b.y, &b.out), c.dtype, weights, stream).map(|()| d)
    });
    // End the capture whatever happened, so the stream is usable.
    let g = stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(drv("end capture"));
    let d = captured?;
    let g = g?.ok_or_else(|| fail("the capture made no graph".into()))?;
    Ok((d, g))
}

/// Case `c` captured once and replayed [`REPLAYS`] times with other data written into the same
/// buffers (the same token counts), every replay checked against the reference: the layout,
/// the received counts, rows (FP8: bytes and scales), ids, weights and sources, the combined
/// rows and the summed weights, nothing written past the outputs. `eager` runs after the second
/// replay on the same object (the other receive slot; then the layout is that case's, so the
/// last replay's is not read). Returns the replays.
fn replayed(ep: &mut ExpertParallel, c: &Case, eager: &Case, what: &str) -> Result<usize> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let plans: Vec<Plan> =
        (0..REPLAYS as u64).map(|i| plan(&Case { seed: c.seed.wrapping_add(0x5eed * i), ..*c }, &cfg, n, me)).collect();
    if plans[0].inputs[me].x == plans[1].inputs[me].x && !plans[0].inputs[me].x.is_empty() {
        return Err(fail(format!("{what}: the replays' data are the same")));
    }
    let tokens = plans[0].inputs[me].tokens;
    let (b, w_out) = buffers(ep, c, &plans[REPLAYS - 1])?;
    let (d, g) = capture(ep, c, (&b, &w_out), tokens)?;
    let gpu = ep.gpu().clone();
    for (i, p) in plans.iter().enumerate() {
        let what = format!("{what}, replay {i}");
        rewrite(ep, &b, &w_out, p)?;
        g.launch().map_err(drv("graph launch"))?;
        gpu.synchronize()?;
        if i < 2 {
            check_layout(&what, &ep.read_layout(gpu.stream())?, &p.layouts[me])?;
        }
        check_received(ep, &what, &d, p, c)?;
        check_out(&what, &b, &p.out)?;
        check_weights(&what, &w_out, &p.w_out)?;
        if i == 1 {
            run_case(ep, eager, &format!("{what}: an eager case between replays"))?;
        }
    }
    Ok(REPLAYS)
}

/// The window form on a stream being captured: its dispatch and its combine refused before
/// anything is enqueued, the capture ended, then the peer-table combine of the same dispatch
/// checked.
fn window_refused(ep: &mut ExpertParallel, c: &Case) -> Result<()> {
    let (me, n) = ep.rank();
    let cfg = *ep.config();
    let p = plan(c, &cfg, n, me);
    let (b, _) = buffers(ep, c, &p)?;
    let gpu = ep.gpu().clone();
    let stream = gpu.stream();
    let tokens = p.inputs[me].tokens;
    let in_capture = |ep: &mut ExpertParallel,
                      call: &dyn Fn(&mut ExpertParallel) -> Result<()>|
     -> Result<Result<()>> {
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).map_err(drv("begin capture"))?;
        ep.set_form(Form::Window);
        let r = call(ep);
        ep.set_form(Form::PeerTable);
        // An empty graph (or none), never launched.
        drop(stream.end_capture(sys::CUgraphInstantiate_flags(0)));
        if stream.capture_status().map_err(drv("capture status"))?
            != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            return Err(fail("the stream is still capturing".into()));
        }
        Ok(r)
    };
    let needle = "Form::Window) in a CUDA graph capture";
    let r = in_capture(ep, &|ep| dispatch(ep, c, &b, tokens).map(|_| ()))?;
    refused(r, "a window-form dispatch in a graph capture", needle)?;
    let d = dispatch(ep, c, &b, tokens)?;
    let r = in_capture(ep, &|ep| ep.combine(&d, &b.y, &b.out, c.dtype, stream))?;
    refused(r, "a window-form combine in a graph capture", needle)?;
    ep.combine(&d, &b.y, &b.out, c.dtype, stream)?;
    gpu.synchronize()?;
    check_received(ep, "after the window form's refused capture", &d, &p, c)?;
    check_out("after the window form's refused capture", &b, &p.out)
}

/// Normal-mode graphs, unpipelined and pipelined (rings of 8 rows, which wrap): bf16, FP8 and
/// f32 cases captured and replayed; the window form's capture refused. Returns the cases.
pub fn run(comm: &Communicator, seed: u64) -> Result<usize> {
    let (me, n) = (comm.rank(), comm.world_size());
    let random = Routing::Random { none: 0.15 };
    let case = |dtype, format, k, tokens, s| Case { dtype, format, k, routing: random, tokens, seed: seed + 200 + s };
    let (bf16, f32, input) = (DataType::Bf16, DataType::F32, RecvFormat::Input);
    let cases = [
        ("bf16 k=8", case(bf16, input, 8, [300, 217, 9, 256], 0)),
        ("fp8 k=6", case(bf16, RecvFormat::E4m3, 6, [128, 300, 33, 0], 1)),
        ("f32 k=3", case(f32, input, 3, [0, 300, 300, 17], 2)),
    ];
    let eager = case(bf16, input, 5, [100, 3, 300, 250], 3);
    let base = Config { slots: 2, ..Config::new(300, 1024, 8 * n, 8) };
    let (mut replays, mut total) = (0, 0);
    for ring in [None, Some(8)] {
        let cfg = base.pipelined(ring);
        let mut ep = ExpertParallel::new(comm, cfg)?;
        if ep.config().topk_idx != TopkIdx::I32 {
            return Err(fail("graphs: the ids are written as i32".into()));
        }
        let (blocks, dt, ct) = ep.grid();
        let mode = ring.map_or("unpipelined".to_string(), |r| format!("pipelined, rings of {r}"));
        for (what, c) in &cases {
            replays +=
                replayed(&mut ep, c, &eager, &format!("graph {what} [{mode}, {blocks} blocks x {dt}/{ct} threads]"))?;
            total += 2;
        }
        if ring.is_none() {
            window_refused(&mut ep, &cases[0].1)?;
            total += 1;
        }
    }
    println!(
        "mp_ep: rank {me}: normal-mode graphs: {replays} replays ok (unpipelined, pipelined), the window form's capture refused"
    );
    Ok(total)
}
