//! The kernels' bodies (`ep/kernels/src/body.rs`, the code the GPU runs) on CPU threads, against
//! the host references, bit for bit. Every GPU thread is an OS thread; a block's barrier, its
//! shared memory (filled with garbage), the acquire/release words and the vector copies have
//! their CPU meaning (`hw` below), and every rank's buffers live in one address space as on
//! GPUs that mapped each other's memory. Each rank runs its operations in its own thread with no
//! synchronisation between ranks other than the kernels' own, as separate GPUs would: the
//! epochs, the parity of the count slots and the flags are exercised with ranks running ahead.
//!
//! What this cannot check: the GPU memory model's details, the generated PTX, the launches (the
//! multi-rank GPU test `mp_ep` does those).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::window::Window;
use mscclpp_ep::reference::{self, Layout, RankInput, Received, Routing};
use mscclpp_ep::shared::{
    BiasArgs, DTYPE_BF16, DTYPE_F32, EpHandle, FORMAT_COPY, FORMAT_E4M3, FORMAT_E4M3_POW2, FORMAT_E4M3_UE8M0,
    SIGNATURE_WINDOW, WeightsArgs, scale_row_bytes, signature,
};
use mscclpp_ep::{Config, DEFAULT_BLOCKS, DataType, ExpertIds, RecvFormat, TopkIdx};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[path = "../kernels/src/body.rs"]
#[allow(dead_code)]
mod body;
#[path = "../kernels/src/decode.rs"]
mod decode;

#[path = "../kernels/src/window.rs"]
mod window;

#[path = "../kernels/src/pipe.rs"]
mod pipe;

/// The device operations of `body.rs` on CPU threads.
mod hw {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    use mscclpp_device::poll::SpinBudget;
    use mscclpp_device::semaphore::reached;
    use mscclpp_device::window::Window;

    /// How long any wait may last before the emulation calls it a hang.
    const HANG: Duration = Duration::from_secs(60);

    /// A block barrier that gives up when another thread failed or after [`HANG`].
    pub struct Barrier {
        state: Mutex<(u32, u64)>,
        cv: Condvar,
        n: u32,
    }

    impl Barrier {
        fn new(n: u32) -> Self {
            Self { state: Mutex::new((0, 0)), cv: Condvar::new(), n }
        }
        fn wait(&self, failed: &AtomicBool) {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let generation = s.1;
            s.0 += 1;
            if s.0 == self.n {
                *s = (0, generation + 1);
                self.cv.notify_all();
                return;
            }
            let start = Instant::now();
            while s.1 == generation {
                s = self.cv.wait_timeout(s, Duration::from_millis(20)).unwrap_or_else(|e| e.into_inner()).0;
                if failed.load(Ordering::Relaxed) || start.elapsed() > HANG {
                    drop(s); // give up without poisoning the lock
                    assert!(!failed.load(Ordering::Relaxed), "emulation: another thread failed");
                    panic!("emulation: a block barrier waited {HANG:?}");
                }
            }
        }
    }

    /// What a thread knows about itself.
    struct Ctx {
        tid: u32,
        ntid: u32,
        ctaid: u32,
        nctaid: u32,
        shared: *mut u8,
        barrier: Arc<Barrier>,
        failed: Arc<AtomicBool>,
    }

    thread_local! {
        static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
    }

    fn with<T>(f: impl FnOnce(&Ctx) -> T) -> T {
        CTX.with(|c| f(c.borrow().as_ref().expect("a kernel body outside an emulated launch")))
    }

    /// Runs `body` as a grid of `grid` blocks of `block` threads with `shared_bytes` of shared
    /// memory each (garbage-filled); returns when every thread has; a thread's panic becomes this
    /// call's panic, after the others gave up.
    pub fn launch(grid: u32, block: u32, shared_bytes: usize, failed: &Arc<AtomicBool>, body: impl Fn() + Sync) {
        let mut memories: Vec<Vec<u128>> =
            (0..grid).map(|_| vec![0xa5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5u128; shared_bytes.div_ceil(16)]).collect();
        let bases: Vec<usize> = memories.iter_mut().map(|m| m.as_mut_ptr() as usize).collect();
        let body = &body;
        let first_panic: Mutex<Option<String>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for (b, &base) in bases.iter().enumerate() {
                let barrier = Arc::new(Barrier::new(block));
                for t in 0..block {
                    let (barrier, failed, first_panic) = (barrier.clone(), failed.clone(), &first_panic);
                    std::thread::Builder::new()
                        .stack_size(256 << 10)
                        .spawn_scoped(scope, move || {
                            let ctx = Ctx {
                                tid: t,
                                ntid: block,
                                ctaid: b as u32,
                                nctaid: grid,
                                shared: base as *mut u8,
                                barrier,
                                failed: failed.clone(),
                            };
                            CTX.with(|c| *c.borrow_mut() = Some(ctx));
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
                            CTX.with(|c| *c.borrow_mut() = None);
                            if let Err(e) = r {
                                failed.store(true, Ordering::Relaxed);
                                let msg = e
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                                    .unwrap_or_default();
                                let mut f = first_panic.lock().unwrap_or_else(|e| e.into_inner());
                                if f.is_none() || f.as_deref().is_some_and(|m| m.contains("another thread failed")) {
                                    *f = Some(msg);
                                }
                            }
                        })
                        .expect("spawning an emulated GPU thread");
                }
            }
        });
        drop(memories);
        if let Some(msg) = first_panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            panic!("{msg}");
        }
    }

    /// Kernels of one emulated stream run one after the other: nothing to wait for.
    pub fn follow_previous_grid() {}
    pub fn tid() -> u32 {
        with(|c| c.tid)
    }
    pub fn ntid() -> u32 {
        with(|c| c.ntid)
    }
    pub fn ctaid() -> u32 {
        with(|c| c.ctaid)
    }
    pub fn nctaid() -> u32 {
        with(|c| c.nctaid)
    }
    pub fn sync_threads() {
        with(|c| c.barrier.wait(&c.failed))
    }
    pub fn shared_base() -> *mut u8 {
        with(|c| c.shared)
    }
    /// # Safety
    /// `p` valid and 8-aligned, only accessed atomically.
    pub unsafe fn load_acquire(p: *const u64) -> u64 {
        // SAFETY: forwarded.
        unsafe { AtomicU64::from_ptr(p.cast_mut()) }.load(Ordering::Acquire)
    }
    /// # Safety
    /// As for [`load_acquire`].
    pub unsafe fn store_release(p: *mut u64, v: u64) {
        // SAFETY: forwarded.
        unsafe { AtomicU64::from_ptr(p) }.store(v, Ordering::Release)
    }
    /// # Safety
    /// `p` valid and 4-aligned, only accessed atomically while others add.
    pub unsafe fn red_add_cta(p: *mut u32, v: u32) {
        // SAFETY: forwarded.
        unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
    }
    /// # Safety
    /// `p` valid and 16-aligned.
    pub unsafe fn ld_v4(p: *const u32) -> [u32; 4] {
        assert!(p as usize % 16 == 0, "misaligned vector load");
        // SAFETY: forwarded.
        unsafe { p.cast::<[u32; 4]>().read_volatile() }
    }
    /// # Safety
    /// `p` valid and 16-aligned.
    pub unsafe fn st_v4(p: *mut u32, v: [u32; 4]) {
        assert!(p as usize % 16 == 0, "misaligned vector store");
        // SAFETY: forwarded.
        unsafe { p.cast::<[u32; 4]>().write_volatile(v) }
    }
    pub fn spin_until(_budget: SpinBudget, name: &'static core::ffi::CStr, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            if with(|c| c.failed.load(Ordering::Relaxed)) {
                panic!("emulation: another thread failed");
            }
            assert!(start.elapsed() < HANG, "emulation: {name:?} waited {HANG:?}");
            std::thread::yield_now();
        }
    }
    pub fn fail(msg: &'static core::ffi::CStr) -> ! {
        panic!("{}", msg.to_str().unwrap_or("?"))
    }
    /// `Window::peer::<u8>` with its checks on (as with `mscclpp_device::ASSERTS`): the table of
    /// every rank's window.
    ///
    /// # Safety
    /// `w` is a window of the emulated world.
    pub unsafe fn window_peer(w: &Window, rank: u32, offset: u64) -> u64 {
        assert!(w.is_member(rank), "Window::peer: rank outside the team");
        assert!(w.holds::<u8>(offset), "Window::peer: offset outside the window or misaligned");
        // SAFETY: `bases` holds `size` addresses.
        unsafe { (w.bases.addr() as *const u64).add(rank as usize).read() + offset }
    }
    /// `Window::signal`: adds 1 (release) to `peer`'s signal word of `slot` for this rank.
    ///
    /// # Safety
    /// As for [`window_peer`].
    pub unsafe fn window_signal(w: &Window, peer: u32, slot: u32) {
        assert!(w.is_member(peer) && slot < w.slots, "Window::signal: peer or slot out of range");
        // SAFETY: `peer_signals` holds `size` addresses of signal areas of `signal_words` words.
        let word = unsafe {
            let area = (w.peer_signals.addr() as *const u64).add(peer as usize).read() as *mut u64;
            area.add(Window::signal_word(w.size, slot, w.rank) as usize)
        };
        // SAFETY: only atomics touch signal words.
        unsafe { AtomicU64::from_ptr(word) }.fetch_add(1, Ordering::Release);
    }
    /// `Window::wait_signal`: waits (acquire) until this rank's word of `slot` from `from` reaches
    /// `value`.
    ///
    /// # Safety
    /// As for [`window_peer`].
    pub unsafe fn window_wait_signal(w: &Window, slot: u32, from: u32, value: u64, budget: SpinBudget) {
        assert!(w.is_member(from) && slot < w.slots, "Window::wait_signal: rank or slot out of range");
        let word = (w.signals.addr() as *mut u64).wrapping_add(Window::signal_word(w.size, slot, from) as usize);
        spin_until(budget, c"Window::wait_signal", || {
            // SAFETY: this rank's signal word; only atomics touch it.
            reached(unsafe { AtomicU64::from_ptr(word) }.load(Ordering::Acquire), value)
        });
    }
}

const BUDGET: SpinBudget = SpinBudget::from_millis(60_000);
/// Threads of the emulated layout kernel (fewer than the tokens: several tokens per thread).
const LAYOUT_THREADS: u32 = 32;

/// 16-byte aligned host memory standing for device memory.
struct Mem(Vec<u128>);

impl Mem {
    fn zeroed(bytes: usize) -> Self {
        Mem(vec![0; bytes.div_ceil(16).max(1)])
    }
    fn from_bytes(b: &[u8]) -> Self {
        let mut m = Self::zeroed(b.len());
        m.bytes_mut()[..b.len()].copy_from_slice(b);
        m
    }
    fn from_pod<T: bytemuck::Pod>(v: &[T]) -> Self {
        Self::from_bytes(bytemuck::cast_slice(v))
    }
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
    fn read<T: bytemuck::Pod>(&self, offset: u64, count: usize) -> Vec<T> {
        let b = &self.bytes()[offset as usize..offset as usize + count * std::mem::size_of::<T>()];
        b.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect()
    }
}

/// One emulated rank: its handle, its window over the shared buffers and its memory.
struct Rank {
    h: EpHandle,
    win: Window,
    shared: Mem,
    /// The pipelined mode's received rows, ids, weights, sources and scales.
    local: Mem,
    layout: Mem,
    info: Mem,
    _state: Mem,
    _peers: Mem,
    signals: Mem,
    _peer_signals: Mem,
}

/// Every rank's memory, allocated and wired as `ExpertParallel::new` does.
fn world(cfg: &Config, n: usize, blocks: u32) -> Vec<Rank> {
    cfg.check(n).unwrap();
    let mut ranks: Vec<Rank> = (0..n)
        .map(|r| {
            let mut h = cfg.kernel_handle(r, n, blocks);
            let shared = Mem::zeroed(h.shared_regions().total as usize);
            let slots = h.slot_count() as usize;
            let layout = Mem::zeroed((slots + 1) * h.layout_slot_bytes() as usize);
            let info = Mem::zeroed(slots * h.info_slot_bytes() as usize);
            let state = Mem::from_pod(&vec![1u64; 2 * blocks as usize]);
            let local = Mem::zeroed(if h.pipelined() { slots * h.local_slot_bytes() as usize } else { 0 });
            if h.pipelined() {
                h.local = local.addr();
            }
            h.shared = shared.addr();
            h.layout = layout.addr();
            h.info = info.addr();
            h.state = state.addr();
            let words = Window::signal_words(n as u32, Window::DEFAULT_SLOTS).unwrap() as usize;
            let win = Window {
                rank: r as u32,
                size: n as u32,
                bytes: h.shared_regions().total,
                local: GlobalPtr::from_addr(shared.addr()),
                bases: GlobalPtr::from_addr(0),
                signals: GlobalPtr::from_addr(0),
                peer_signals: GlobalPtr::from_addr(0),
                slots: Window::DEFAULT_SLOTS,
                reserved: 0,
                multicast: 0,
            };
            let (signals, none) = (Mem::zeroed(words * 8), Mem::zeroed(8));
            Rank {
                h,
                win,
                shared,
                local,
                layout,
                info,
                _state: state,
                _peers: none,
                signals,
                _peer_signals: Mem::zeroed(8),
            }
        })
        .collect();
    // Every rank's shared buffer and signal area as mapped "here" (one address space), as
    // `ExpertParallel::new` registers them: the window's table of bases is the handle's `peers`.
    let table: Vec<u64> = ranks.iter().map(|r| r.shared.addr()).collect();
    let signal_table: Vec<u64> = ranks.iter().map(|r| r.signals.addr()).collect();
    for r in &mut ranks {
        r._peers = Mem::from_pod(&table);
        r._peer_signals = Mem::from_pod(&signal_table);
        r.h.peers = r._peers.addr();
        r.win.bases = GlobalPtr::from_addr(r._peers.addr());
        r.win.signals = GlobalPtr::from_addr(r.signals.addr());
        r.win.peer_signals = GlobalPtr::from_addr(r._peer_signals.addr());
    }
    ranks
}

/// One operation of a sequence: a batch per rank (known to all), dispatched (the rows arriving
/// in `format`), then combined unless `combine` is false.
#[derive(Clone, Copy, Debug)]
struct Op {
    dtype: DataType,
    format: RecvFormat,
    k: usize,
    routing: Routing,
    tokens: [usize; 4],
    combine: bool,
    /// A cached dispatch: op `j`'s routing (tokens, ids, weights) with new rows.
    cached: Option<usize>,
    /// Bias tensors the combine adds (0 to 2).
    bias: usize,
    /// The window form (`ep_dispatch_window*`, `ep_combine_window_*`) for the dispatch and for
    /// the combine; else the peer-table form.
    window: (bool, bool),
}

impl Op {
    fn new(dtype: DataType, k: usize, routing: Routing, tokens: [usize; 4], combine: bool) -> Self {
        Op {
            dtype,
            format: RecvFormat::Input,
            k,
            routing,
            tokens,
            combine,
            cached: None,
            bias: 0,
            window: (false, false),
        }
    }
}

/// A step of a rank's sequence: op `i`'s dispatch, or its combine.
#[derive(Clone, Copy, Debug)]
enum Step {
    Dispatch(usize),
    Combine(usize),
}

/// Every op dispatched then (unless it says not) combined at once.
fn in_order(ops: &[Op]) -> Vec<Step> {
    ops.iter()
        .enumerate()
        .flat_map(|(i, op)| std::iter::once(Step::Dispatch(i)).chain(op.combine.then_some(Step::Combine(i))))
        .collect()
}

/// The host side of an operation for every rank.
struct Expect {
    inputs: Vec<RankInput>,
    layouts: Vec<Layout>,
    recv: Vec<Received>,
    /// The received rows as the dispatch delivers them (cast to FP8 for an FP8 format) and
    /// their scales (bits; empty unless FP8).
    recv_x: Vec<(Vec<u8>, Vec<u32>)>,
    ys: Vec<Vec<u8>>,
    outs: Vec<Vec<u8>>,
    /// The weights a caller gives combine (per rank, one per received row and slot).
    w_ins: Vec<Vec<f32>>,
    /// What combine sums from the delivered weights, from the caller's.
    w_outs: [Vec<Vec<f32>>; 2],
    /// Per rank, the bias tensors its combine adds (`op.bias` of them).
    biases: Vec<Vec<Vec<u8>>>,
}

/// How operation `i` of a sequence combines the weights: from the delivered ones (0), from the
/// caller's (1), not at all (2). The same on every rank.
fn weights_mode(i: usize) -> usize {
    i % 3
}

fn expect(op: &Op, cfg: &Config, n: usize, seed: u64, earlier: &[Expect]) -> Expect {
    let inputs: Vec<RankInput> = (0..n)
        .map(|r| {
            let from = op.cached.map(|j| &earlier[j].inputs[r]);
            let t = from.map_or(op.tokens[r % 4].min(cfg.max_tokens), |i| i.tokens);
            let mut i = reference::random_input(seed, r, op.dtype, t, cfg.hidden, op.k, (cfg.experts, n), op.routing);
            if let Some(from) = from {
                // The same routing, new rows.
                assert_eq!(from.k, op.k, "a cached dispatch has its handle's k");
                (i.topk_idx, i.topk_weights) = (from.topk_idx.clone(), from.topk_weights.clone());
            }
            if op.format.is_fp8() {
                i.x = reference::spread_magnitudes(&i.x, cfg.hidden);
            }
            i
        })
        .collect();
    let layouts: Vec<Layout> =
        inputs.iter().map(|i| reference::layout(&i.topk_idx, i.tokens, op.k, cfg.experts, n)).collect();
    let row = cfg.hidden * op.dtype.bytes();
    let recv: Vec<Received> = (0..n)
        .map(|d| reference::received(&inputs, &layouts, d, (cfg.experts, row), cfg.expert_ids, cfg.expert_alignment))
        .collect();
    let recv_x = recv
        .iter()
        .map(|r| match op.format {
            RecvFormat::Input => (r.x.clone(), vec![]),
            RecvFormat::E4m3Ue8m0 => {
                let (q, scales) = reference::cast_e4m3(&r.x, cfg.hidden, op.format);
                (q, reference::pack_ue8m0(&scales, cfg.hidden / 128))
            }
            fp8 => {
                let (q, scales) = reference::cast_e4m3(&r.x, cfg.hidden, fp8);
                (q, scales.iter().map(|s| s.to_bits()).collect())
            }
        })
        .collect();
    // The experts compute from the rows as sent (the combine does not depend on the format).
    let ys: Vec<Vec<u8>> = (0..n)
        .map(|d| reference::scaled_experts(op.dtype, &recv[d], op.k, (d, n), cfg.experts, cfg.expert_ids))
        .collect();
    let offsets: Vec<Vec<usize>> = recv.iter().map(|r| r.offsets.clone()).collect();
    let biases: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|s| {
            let t = inputs[s].tokens;
            (0..op.bias)
                .map(|b| {
                    reference::random_input(seed + 100 + b as u64, s, op.dtype, t, cfg.hidden, 1, (1, 1), op.routing).x
                })
                .collect()
        })
        .collect();
    let outs = (0..n)
        .map(|s| {
            let bias: Vec<&[u8]> = biases[s].iter().map(|b| &b[..]).collect();
            reference::combine_with_bias(op.dtype, &layouts[s], (s, inputs[s].tokens), (&ys, &offsets), row, &bias)
        })
        .collect();
    let w_ins: Vec<Vec<f32>> = recv.iter().map(|r| r.topk_weights.iter().map(|w| w * 0.5 + 1.0).collect()).collect();
    let delivered: Vec<Vec<f32>> = recv.iter().map(|r| r.topk_weights.clone()).collect();
    let w_outs = [&delivered, &w_ins].map(|w| {
        (0..n).map(|s| reference::combine_weights(&layouts[s], s, (inputs[s].tokens, op.k), (w, &offsets))).collect()
    });
    Expect { inputs, layouts, recv, recv_x, ys, outs, w_ins, w_outs, biases }
}

/// What a rank saw after one dispatch and combine.
#[derive(Default, Debug, PartialEq)]
struct Seen {
    layout: Option<Layout>,
    info: Vec<u32>,
    x: Vec<u8>,
    scales: Vec<u32>,
    idx: Vec<i32>,
    w: Vec<u32>,
    src: Vec<i32>,
    out: Vec<u8>,
    w_out: Vec<u8>,
}

fn code(dtype: DataType) -> u32 {
    if dtype == DataType::F32 { DTYPE_F32 } else { DTYPE_BF16 }
}

fn format_code(format: RecvFormat) -> u32 {
    match format {
        RecvFormat::Input => FORMAT_COPY,
        RecvFormat::E4m3 => FORMAT_E4M3,
        RecvFormat::E4m3Pow2 => FORMAT_E4M3_POW2,
        RecvFormat::E4m3Ue8m0 => FORMAT_E4M3_UE8M0,
    }
}

/// The layout kernel of rank `r` (its handle `h`, of a slot) on `idx`, then its results.
fn run_layout(r: &Rank, h: EpHandle, idx: &Mem, tokens: usize, k: usize, failed: &Arc<AtomicBool>) -> Layout {
    let lr = h.layout_regions();
    let shared = ((h.n_ranks * LAYOUT_THREADS + h.experts) * 4) as usize;
    let idx_addr = idx.addr();
    hw::launch(1, LAYOUT_THREADS, shared, failed, || {
        // SAFETY: the buffers hold what the layout kernel touches (sizes from the handle).
        unsafe {
            body::layout(
                GlobalPtr::from_addr(idx_addr),
                h.idx_bytes,
                tokens as u32,
                k as u32,
                h.experts,
                h.n_ranks,
                GlobalPtr::from_addr(h.layout + lr.per_rank),
                GlobalPtr::from_addr(h.layout + lr.per_expert),
                GlobalPtr::from_addr(h.layout + lr.in_rank),
                GlobalPtr::from_addr(h.layout + lr.send_index),
            )
        }
    });
    read_layout(r, h, tokens)
}

/// The layout of `h`'s slot.
fn read_layout(r: &Rank, h: EpHandle, tokens: usize) -> Layout {
    let lr = h.layout_regions();
    let at = h.layout - r.layout.addr();
    let n = h.n_ranks as usize;
    Layout {
        tokens_per_rank: r.layout.read(at + lr.per_rank, n),
        tokens_per_expert: r.layout.read(at + lr.per_expert, h.experts as usize),
        is_token_in_rank: r.layout.read::<u8>(at + lr.in_rank, tokens * n).iter().map(|&b| b == 1).collect(),
        send_index: r.layout.read(at + lr.send_index, tokens * n),
    }
}

/// Rank `me`'s sequence of operations (`schedule`), as its stream would run them: every dispatch
/// takes the next receive slot of the ring, as `ExpertParallel` does.
#[allow(clippy::too_many_arguments)]
fn run_rank(
    r: &Rank,
    me: usize,
    (ops, schedule): (&[Op], &[Step]),
    exp: &[Expect],
    (blocks, threads): (u32, u32),
    sig: Option<(usize, RecvFormat, bool, bool)>,
    failed: &Arc<AtomicBool>,
) -> Vec<Seen> {
    let slots = r.h.slot_count() as usize;
    // Window dispatches and combines so far (every rank runs the same schedule).
    let mut rounds = (0u64, 0u64);
    let mut next_slot = 0;
    let mut slot_of = vec![usize::MAX; ops.len()];
    let mut seen: Vec<Seen> = ops.iter().map(|_| Seen::default()).collect();
    let at_slot = |slot: usize| r.h.for_slot(slot as u32, r.layout.addr(), r.info.addr());
    // Where the received rows, ids, weights, sources and scales are.
    let recv = if r.h.pipelined() { &r.local } else { &r.shared };
    for (step_no, &step) in schedule.iter().enumerate() {
        // Ranks reach their kernels at different times (as GPUs with different loads would).
        std::thread::sleep(std::time::Duration::from_millis(((me * 7 + step_no * 3) % 5) as u64));
        let i = match step {
            Step::Dispatch(i) | Step::Combine(i) => i,
        };
        let (op, e) = (&ops[i], &exp[i]);
        let inp = &e.inputs[me];
        let row = r.h.hidden as usize * op.dtype.bytes();
        let s = &mut seen[i];
        if let Step::Dispatch(_) = step {
            let slot = next_slot;
            next_slot = (next_slot + 1) % slots;
            slot_of[i] = slot;
            let h = at_slot(slot);
            let sr = h.shared_regions();
            let idx = if h.idx_bytes == 8 {
                Mem::from_pod(&reference::widen_ids(&inp.topk_idx))
            } else {
                Mem::from_pod(&inp.topk_idx)
            };
            let (x, w) = (Mem::from_bytes(&inp.x), Mem::from_pod(&inp.topk_weights));
            let mut sig_bits = 0;
            if let Some(j) = op.cached {
                // `dispatch_cached`: no layout kernel; the routing and the received ids, weights
                // and sources copied from op j's slot when this is another.
                let from = at_slot(slot_of[j]);
                assert_ne!(slot_of[j], usize::MAX, "op {i} caches op {j}, not dispatched before");
                if slot_of[j] != slot {
                    let fr = from.shared_regions();
                    // SAFETY: two disjoint ranges of this rank's layout and shared memories.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            from.layout as *const u8,
                            h.layout as *mut u8,
                            h.layout_slot_bytes() as usize,
                        );
                        std::ptr::copy_nonoverlapping(
                            (recv.addr() + fr.recv_idx) as *const u8,
                            (recv.addr() + sr.recv_idx) as *mut u8,
                            (fr.recv_scales - fr.recv_idx) as usize,
                        );
                    }
                }
                s.layout = Some(read_layout(r, h, inp.tokens));
                sig_bits = mscclpp_ep::shared::SIGNATURE_CACHED;
            } else {
                s.layout = Some(run_layout(r, h, &idx, inp.tokens, op.k, failed));
            }
            let format = format_code(op.format);
            // A claimed signature: another k or format, or a cached dispatch (its bit), or the
            // other form (run in that form).
            let (sig_k, sig_format, sig_bits) = sig.map_or((op.k, format, sig_bits), |(k, f, cached, _)| {
                (k, format_code(f), if cached { mscclpp_ep::shared::SIGNATURE_CACHED } else { 0 })
            });
            let win = op.window.0 != sig.is_some_and(|s| s.3);
            if win {
                rounds.0 += 1;
            }
            let (round, wh) = (rounds.0, r.win);
            let sig =
                signature(sig_k as u32, code(op.dtype), sig_format) | sig_bits | if win { SIGNATURE_WINDOW } else { 0 };
            let (xa, ia, wa) = (x.addr(), idx.addr(), w.addr());
            let (ia, wa) = if op.cached.is_some() { (0, 0) } else { (ia, wa) };
            hw::launch(blocks, threads, mscclpp_ep::shared::EXCHANGE_SHARED_BYTES as usize, failed, || {
                let args = (GlobalPtr::from_addr(xa), GlobalPtr::from_addr(ia), GlobalPtr::from_addr(wa));
                let (t, k) = (inp.tokens as u32, op.k as u32);
                macro_rules! go {
                    ($cast:literal, $peers:expr) => {
                        body::dispatch::<$cast, _>(
                            $peers,
                            h,
                            args.0,
                            args.1,
                            args.2,
                            t,
                            k,
                            row as u32,
                            (sig, format),
                            BUDGET,
                        )
                    };
                }
                // SAFETY: the inputs hold the batch; the world's buffers the handle's regions; the
                // window is over them, `round` counts this rank's window dispatches.
                unsafe {
                    if h.pipelined() {
                        assert!(!win, "the pipelined mode has no window form");
                        return match op.format.is_fp8() {
                            true => pipe::dispatch::<true, _>(
                                body::PeerTable::in_block(),
                                h,
                                args.0,
                                args.1,
                                args.2,
                                t,
                                k,
                                row as u32,
                                (sig, format),
                                BUDGET,
                            ),
                            false => pipe::dispatch::<false, _>(
                                body::PeerTable::in_block(),
                                h,
                                args.0,
                                args.1,
                                args.2,
                                t,
                                k,
                                row as u32,
                                (sig, format),
                                BUDGET,
                            ),
                        };
                    }
                    match (op.format.is_fp8(), win) {
                        (true, false) => go!(true, body::PeerTable::in_block()),
                        (false, false) => go!(false, body::PeerTable::in_block()),
                        (true, true) => go!(true, window::WindowPeers::new(wh, round)),
                        (false, true) => go!(false, window::WindowPeers::new(wh, round)),
                    }
                }
            });
            // What arrived, read before this rank's next dispatch (as a stream-ordered reader
            // would).
            let info_at = h.info - r.info.addr();
            s.info = r.info.read(info_at, h.info_words() as usize);
            let rows = s.info[0] as usize;
            if op.format.is_fp8() {
                s.x = recv.read(sr.recv_x, rows * h.hidden as usize);
                s.scales = recv.read(sr.recv_scales, rows * scale_row_bytes(format, h.scales_per_row()) as usize / 4);
            } else {
                s.x = recv.read(sr.recv_x, rows * row);
            }
            s.idx = recv.read(sr.recv_idx, rows * op.k);
            s.w = recv.read(sr.recv_w, rows * op.k);
            s.src = recv.read(sr.recv_src, rows);
        } else {
            let h = at_slot(slot_of[i]);
            let sr = h.shared_regions();
            std::thread::sleep(std::time::Duration::from_millis(((me * 5 + i) % 4) as u64));
            let y = Mem::from_bytes(&e.ys[me]);
            let out = Mem::from_bytes(&vec![0xa5; inp.tokens * row + 64]);
            let (ya, oa, y_bytes) = (y.addr(), out.addr(), e.ys[me].len() as u64);
            let w_in = Mem::from_pod(&e.w_ins[me]);
            let w_bytes = inp.tokens * op.k * 4 + 64;
            let w_out = Mem::from_bytes(&vec![0xa5; w_bytes]);
            let biases: Vec<Mem> = e.biases[me].iter().map(|b| Mem::from_bytes(b)).collect();
            let mut bias = BiasArgs::default();
            for (a, m) in bias.bias.iter_mut().zip(&biases) {
                *a = m.addr();
            }
            let k = op.k as u32;
            let wt = match weights_mode(i) {
                0 => WeightsArgs {
                    input: recv.addr() + sr.recv_w,
                    input_bytes: h.max_recv_rows() * op.k as u64 * 4,
                    out: w_out.addr(),
                    k,
                    reserved: 0,
                },
                1 => WeightsArgs {
                    input: w_in.addr(),
                    input_bytes: e.w_ins[me].len() as u64 * 4,
                    out: w_out.addr(),
                    k,
                    reserved: 0,
                },
                _ => WeightsArgs::default(),
            };
            if op.window.1 {
                rounds.1 += 1;
            }
            let (win, round, wh) = (op.window.1, rounds.1, r.win);
            hw::launch(blocks, threads, mscclpp_ep::shared::EXCHANGE_SHARED_BYTES as usize, failed, || {
                let (y, out) = (GlobalPtr::from_addr(ya), GlobalPtr::from_addr(oa));
                let (t, args) = (inp.tokens as u32, (wt, bias));
                use mscclpp_device::vec::{Bf16x8, F32x4};
                macro_rules! go {
                    ($lanes:ty, $peers:expr) => {
                        body::combine::<$lanes, _>($peers, h, y, y_bytes, out, t, row as u32, args, BUDGET)
                    };
                }
                // SAFETY: `y` holds the received rows' outputs, `out` the tokens' rows, the
                // weights their rows and slots, the biases the tokens' rows; the window is over
                // the world's buffers, `round` counts this rank's window combines.
                unsafe {
                    if h.pipelined() {
                        assert!(!win, "the pipelined mode has no window form");
                        let p = body::PeerTable::in_block();
                        return match op.dtype == DataType::F32 {
                            true => pipe::combine::<F32x4, _>(p, h, y, y_bytes, out, t, row as u32, args, BUDGET),
                            false => pipe::combine::<Bf16x8, _>(p, h, y, y_bytes, out, t, row as u32, args, BUDGET),
                        };
                    }
                    match (op.dtype == DataType::F32, win) {
                        (true, false) => go!(F32x4, body::PeerTable::in_block()),
                        (false, false) => go!(Bf16x8, body::PeerTable::in_block()),
                        (true, true) => go!(F32x4, window::WindowPeers::new(wh, round)),
                        (false, true) => go!(Bf16x8, window::WindowPeers::new(wh, round)),
                    }
                }
            });
            s.out = out.bytes()[..inp.tokens * row + 64].to_vec();
            s.w_out = w_out.bytes()[..w_bytes].to_vec();
        }
    }
    seen
}

/// Runs `ops` on `n` emulated ranks (each in its own thread), every op dispatched then
/// combined, and checks everything.
fn run_world(cfg: &Config, n: usize, grid: (u32, u32), ops: &[Op], seed: u64) -> Vec<Vec<Seen>> {
    run_schedule(cfg, n, grid, (ops, &in_order(ops)), seed)
}

/// Runs `ops` on `n` emulated ranks in the order `schedule` says and checks everything (the
/// combined outputs of the ops the schedule combines); returns what every rank saw.
fn run_schedule(
    cfg: &Config,
    n: usize,
    grid: (u32, u32),
    (ops, schedule): (&[Op], &[Step]),
    seed: u64,
) -> Vec<Vec<Seen>> {
    let ranks = world(cfg, n, grid.0);
    let mut exp: Vec<Expect> = vec![];
    for (i, op) in ops.iter().enumerate() {
        let e = expect(op, cfg, n, seed + i as u64, &exp);
        exp.push(e);
    }
    let combined: Vec<bool> =
        (0..ops.len()).map(|i| schedule.iter().any(|s| matches!(s, Step::Combine(j) if *j == i))).collect();
    let failed = Arc::new(AtomicBool::new(false));
    let seen: Vec<Vec<Seen>> = std::thread::scope(|scope| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(me, r)| {
                let (exp, failed) = (&exp, &failed);
                scope.spawn(move || run_rank(r, me, (ops, schedule), exp, grid, None, failed))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    for (me, per_op) in seen.iter().enumerate() {
        for (i, (s, (op, e))) in per_op.iter().zip(ops.iter().zip(&exp)).enumerate() {
            if !schedule.iter().any(|s| matches!(s, Step::Dispatch(j) if *j == i)) {
                continue;
            }
            let what = format!("{n} ranks {grid:?}, rank {me}, op {i} {op:?}");
            let h = ranks[me].h;
            assert_eq!(s.layout.as_ref(), Some(&e.layouts[me]), "{what}: layout");
            let want = &e.recv[me];
            let nn = n as u32;
            assert_eq!(s.info[0] as usize, want.rows, "{what}: rows");
            let offsets: Vec<usize> = s.info[1..1 + n + 1].iter().map(|&v| v as usize).collect();
            assert_eq!(offsets, want.offsets, "{what}: offsets");
            let m = h.info_matrix() as usize;
            assert_eq!(&s.info[m..m + n * n], &want.matrix[..], "{what}: matrix");
            let pe = h.info_per_expert() as usize;
            assert_eq!(&s.info[pe..pe + (h.experts / nn) as usize], &want.per_expert[..], "{what}: per expert");
            assert!(s.x == e.recv_x[me].0, "{what}: received rows differ");
            assert_eq!(s.scales, e.recv_x[me].1, "{what}: received scales");
            assert_eq!(s.idx, want.topk_idx, "{what}: ids");
            assert_eq!(s.w, want.topk_weights.iter().map(|w| w.to_bits()).collect::<Vec<_>>(), "{what}: weights");
            assert_eq!(s.src, want.src, "{what}: source indices");
            if combined[i] {
                let t = e.outs[me].len();
                assert!(s.out[..t] == e.outs[me][..], "{what}: combine output differs");
                assert!(s.out[t..].iter().all(|&b| b == 0xa5), "{what}: combine wrote past the output");
                let mode = weights_mode(i);
                let tk = e.inputs[me].tokens * op.k * 4;
                if mode < 2 {
                    let got: Vec<u32> =
                        s.w_out[..tk].as_chunks::<4>().0.iter().map(|c| u32::from_le_bytes(*c)).collect();
                    let want: Vec<u32> = e.w_outs[mode][me].iter().map(|w| w.to_bits()).collect();
                    assert_eq!(got, want, "{what}: summed weights ({})", ["delivered", "caller's"][mode]);
                }
                let tail = if mode < 2 { &s.w_out[tk..] } else { &s.w_out[..] };
                assert!(tail.iter().all(|&b| b == 0xa5), "{what}: combine wrote weights it was not asked for");
            }
        }
    }
    seen
}

fn ops(n: usize) -> Vec<Op> {
    let random = Routing::Random { none: 0.2 };
    let op = Op::new;
    vec![
        op(DataType::Bf16, 3, random, [40, 17, 33, 1], true),
        op(DataType::F32, 1, random, [5, 40, 0, 39], true),
        op(DataType::Bf16, 4, Routing::ToRank(n - 1), [40, 40, 12, 30], true),
        op(DataType::Bf16, 2, random, [0, 0, 0, 0], true),
        op(DataType::F32, 4, Routing::Random { none: 0.0 }, [0, 40, 40, 40], true),
        // A dispatch nobody combines, then more: the slots and flags go on.
        op(DataType::Bf16, 4, random, [21, 22, 23, 24], false),
        op(DataType::Bf16, 2, Routing::ToRank(0), [40, 3, 7, 40], true),
        op(DataType::F32, 3, random, [9, 8, 7, 6], true),
    ]
}

#[test]
fn two_ranks_dispatch_and_combine_match_the_references() {
    let cfg = Config::new(40, 24, 12, 4);
    run_world(&cfg, 2, (2, 32), &ops(2), 11);
}

#[test]
fn three_ranks_with_more_threads() {
    let cfg = Config::new(40, 16, 12, 4);
    run_world(&cfg, 3, (3, 64), &ops(3), 12);
}

#[test]
fn eight_ranks_the_most_one_gpu_runs_as_threads() {
    // Eight ranks (the count the multi-rank test runs as threads on one GPU), two experts each.
    let cfg = Config::new(40, 8, 16, 4);
    run_world(&cfg, 8, (2, 32), &ops(8), 15);
}

#[test]
fn every_block_budget_down_to_one() {
    // DeepEP's default of 20 SMs and fewer, down to one block per rank: the same bits at every
    // budget (each block has its own flags and share of the rows; block 0 alone publishes the
    // counts and writes the receive info).
    for (n, experts, seed) in [(2, 8, 20), (4, 16, 30)] {
        let cfg = Config::new(40, 16, experts, 4);
        for blocks in [1, 2, 3, DEFAULT_BLOCKS] {
            run_world(&cfg, n, (blocks, 32), &ops(n), seed + blocks as u64);
        }
    }
}

#[test]
fn global_ids_and_aligned_counts() {
    // The ids and weights as given; counts per local expert rounded up to multiples of 8.
    let cfg = Config { expert_ids: ExpertIds::Global, expert_alignment: 8, ..Config::new(40, 16, 12, 4) };
    run_world(&cfg, 3, (2, 32), &ops(3), 16);
    let cfg = Config { expert_alignment: 3, ..cfg };
    run_world(&cfg, 2, (3, 32), &ops(2)[..3], 17);
}

#[test]
fn i64_ids() {
    // Every -1 is an i64 that names no expert, some of which an i32 truncation would read as one.
    let cfg = Config { topk_idx: TopkIdx::I64, ..Config::new(40, 16, 12, 4) };
    run_world(&cfg, 3, (2, 32), &ops(3), 19);
    let cfg = Config { expert_ids: ExpertIds::Global, ..cfg };
    run_world(&cfg, 2, (1, 32), &ops(2), 20);
}

/// `ops(n)` with the bf16 operations' rows cast to FP8 (the second and fifth to `format`, the
/// first with f32 scales), the rest as given: both dispatch kernels and several formats on the
/// same buffers, one after the other.
fn fp8_ops(n: usize, format: RecvFormat) -> Vec<Op> {
    let mut bf16 = 0;
    ops(n)
        .into_iter()
        .map(|op| {
            if op.dtype != DataType::Bf16 {
                return op;
            }
            bf16 += 1;
            // The first with f32 scales (every rank receives some): UE8M0's padding is written
            // over them afterwards.
            let format = match bf16 {
                1 => RecvFormat::E4m3,
                2 | 5 => format,
                _ => RecvFormat::Input,
            };
            Op { format, ..op }
        })
        .collect()
}

#[test]
fn fp8_dispatch_at_several_shapes_and_budgets() {
    // Rows of 1 to 5 groups of 128 columns, 1 to 20 blocks, 2 to 4 ranks, each format: the e4m3
    // bytes and the scales (UE8M0: with 1 to 3 padding bytes) bit for bit, every magnitude
    // (`reference::spread_magnitudes`).
    let cases = [
        (2, 256, 8, (1, 32)),
        (3, 384, 12, (3, 64)),
        (2, 640, 4, (2, 32)),
        (4, 256, 16, (2, 32)),
        (2, 128, 4, (DEFAULT_BLOCKS, 32)),
        (3, 512, 6, (1, 64)),
    ];
    let formats = [RecvFormat::E4m3, RecvFormat::E4m3Pow2, RecvFormat::E4m3Ue8m0];
    for (i, (n, hidden, experts, grid)) in cases.into_iter().enumerate() {
        let cfg = Config::new(40, hidden, experts, 4);
        let format = formats[i % 3];
        run_world(&cfg, n, grid, &fp8_ops(n, format), 40 + i as u64);
    }
}

#[test]
fn fp8_dispatch_with_global_i64_ids_and_one_rank() {
    let cfg = Config { topk_idx: TopkIdx::I64, expert_ids: ExpertIds::Global, ..Config::new(40, 128, 12, 4) };
    run_world(&cfg, 3, (2, 32), &fp8_ops(3, RecvFormat::E4m3), 50);
    let cfg = Config::new(40, 256, 4, 4);
    run_world(&cfg, 1, (1, 32), &fp8_ops(1, RecvFormat::E4m3Ue8m0), 51);
}

#[test]
fn local_ids_are_the_default() {
    let cfg = Config::new(40, 16, 12, 4);
    assert_eq!((cfg.expert_ids, cfg.expert_alignment, cfg.blocks), (ExpertIds::Local, 1, None));
    // Every rank hosts experts of the tokens, so every received row has -1 slots (other ranks').
    let op = Op::new(DataType::Bf16, 4, Routing::Random { none: 0.0 }, [40; 4], true);
    let e = expect(&op, &cfg, 3, 18, &[]);
    assert!(e.recv.iter().all(|r| r.topk_idx.iter().all(|&id| (-1..4).contains(&id))));
    assert!(e.recv.iter().all(|r| r.topk_idx.contains(&-1) && r.topk_weights.contains(&0.0)));
    run_world(&cfg, 3, (2, 32), &[op], 18);
}

#[test]
fn one_rank_and_one_block() {
    let cfg = Config::new(40, 8, 4, 4);
    run_world(&cfg, 1, (1, 32), &ops(1)[..4], 13);
}

#[test]
fn few_tokens_are_cut_into_pieces() {
    // 8 warps, rows of 16 (f32) or 8 (bf16) vectors, 0 to 3 tokens per rank: each row is cut into
    // up to 8 pieces, each copied and summed by another warp.
    let cfg = Config::new(4, 64, 8, 4);
    let random = Routing::Random { none: 0.1 };
    let op = |dtype, k, tokens| Op::new(dtype, k, random, tokens, true);
    let ops = [
        op(DataType::F32, 4, [1, 2, 3, 0]),
        op(DataType::Bf16, 3, [3, 1, 0, 2]),
        op(DataType::F32, 1, [2, 2, 2, 2]),
        op(DataType::Bf16, 4, [4, 4, 1, 3]),
    ];
    run_world(&cfg, 2, (4, 64), &ops, 14);
    assert_eq!(body::pieces(8, 1, 16), 8);
    assert_eq!(body::pieces(8, 3, 16), 2);
    assert_eq!(body::pieces(8, 3, 1), 1);
    assert_eq!(body::pieces(3696, 4096, 896), 1);
    assert_eq!(body::pieces(3696, 128, 896), 28);
    assert_eq!(body::pieces(8, 0, 16), 1);
}

#[test]
fn layout_kernel_matches_the_reference() {
    let mut rng = StdRng::seed_from_u64(7);
    let failed = Arc::new(AtomicBool::new(false));
    for case in 0..24 {
        let n = 1 + case % 8;
        let epr = 1 + rng.random_range(0..6usize);
        let k = 1 + rng.random_range(0..8usize);
        let tokens = rng.random_range(0..150usize);
        // Every other case with i64 ids (each -1 replaced by a value an i32 truncation misreads).
        let topk_idx = if case % 2 == 1 { TopkIdx::I64 } else { TopkIdx::I32 };
        let cfg = Config { topk_idx, ..Config::new(150, 8, n * epr, 8) };
        let ranks = world(&cfg, n, 1);
        let e = (n * epr) as i32;
        let idx: Vec<i32> = (0..tokens * k).map(|_| rng.random_range(-2..e + 2)).collect();
        let buf = match topk_idx {
            TopkIdx::I64 => Mem::from_pod(&reference::widen_ids(&idx)),
            TopkIdx::I32 => Mem::from_pod(&idx),
        };
        let got = run_layout(&ranks[0], ranks[0].h, &buf, tokens, k, &failed);
        assert_eq!(
            got,
            reference::layout(&idx, tokens, k, n * epr, n),
            "case {case}: {n} ranks, {tokens} tokens, k {k}"
        );
    }
}

/// Runs one dispatch where rank 1 claims another k, format or a cached dispatch, or dispatches in
/// the other form (`claim`); returns the ranks' failure messages.
fn mismatched(claim: (usize, RecvFormat, bool, bool)) -> Vec<String> {
    let cfg = Config::new(8, 8, 4, 4);
    let ranks = world(&cfg, 2, 1);
    let op = Op::new(DataType::Bf16, 2, Routing::Random { none: 0.0 }, [8; 4], false);
    let exp = vec![expect(&op, &cfg, 2, 5, &[])];
    let failed = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(me, r)| {
                let (exp, failed) = (&exp, &failed);
                scope.spawn(move || {
                    catch_unwind(AssertUnwindSafe(|| {
                        run_rank(r, me, (&[op], &[Step::Dispatch(0)]), exp, (1, 32), (me == 1).then_some(claim), failed)
                    }))
                })
            })
            .collect();
        hs.into_iter()
            .filter_map(|h| h.join().expect("the rank thread catches its panics").err())
            .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
            .collect()
    })
}

#[test]
fn ranks_that_disagree_on_k_format_or_cached_fail_with_a_message() {
    for claim in [
        (3, RecvFormat::Input, false, false),
        (2, RecvFormat::E4m3, false, false),
        (2, RecvFormat::E4m3Ue8m0, false, false),
        (2, RecvFormat::Input, true, false),
        // Rank 1 dispatches in the window form, rank 0 in the peer-table form.
        (2, RecvFormat::Input, false, true),
    ] {
        let msgs = mismatched(claim);
        // Whichever rank reads the other's signature first reports it; the other may only see
        // that a thread failed (on a GPU: the trap of the first, then the budget or the abort).
        let what = "the ranks were called with different k, element types or received formats, or mixed cached";
        assert!(msgs.iter().any(|m| m.contains(what)), "{claim:?}: {msgs:?}");
    }
}

#[test]
fn dispatches_in_flight_combined_in_any_order() {
    // Two slots: A, B dispatched, B combined before A; then three in flight (C overwrites A's
    // slot, whose handle `ExpertParallel` refuses): C and B combined, newest first; then more
    // in order, on the ring's later turns. Every received row and combined output bit for bit.
    let random = Routing::Random { none: 0.2 };
    let ops = [
        Op::new(DataType::Bf16, 3, random, [40, 17, 33, 1], true),
        Op::new(DataType::F32, 2, random, [5, 40, 0, 39], true),
        Op::new(DataType::Bf16, 4, random, [21, 22, 23, 24], false),
        Op::new(DataType::F32, 4, Routing::ToRank(0), [30, 3, 7, 40], true),
        Op::new(DataType::Bf16, 1, random, [40, 40, 40, 40], true),
        Op::new(DataType::Bf16, 2, random, [9, 8, 7, 6], true),
        Op::new(DataType::F32, 3, random, [0, 12, 40, 2], true),
    ];
    use Step::{Combine as C, Dispatch as D};
    let schedule = [D(0), D(1), C(1), C(0), D(2), D(3), D(4), C(4), C(3), D(5), C(5), D(6), C(6)];
    for (n, grid, seed) in [(2, (2, 32), 60), (3, (3, 64), 61), (4, (1, 32), 62)] {
        let cfg = Config { slots: 2, ..Config::new(40, 16, 4 * n, 4) };
        run_schedule(&cfg, n, grid, (&ops, &schedule), seed);
    }
    // Three slots, combined oldest last.
    let cfg = Config { slots: 3, ..Config::new(40, 24, 12, 4) };
    let schedule = [D(0), D(1), D(3), C(3), C(1), C(0), D(4), D(5), D(6), C(5), C(6), C(4)];
    run_schedule(&cfg, 3, (2, 32), (&ops, &schedule), 63);
}

#[test]
fn cached_dispatch_equals_a_fresh_dispatch_of_the_routing() {
    // Cached dispatches (no layout kernel, new rows along an earlier dispatch's routing) into the
    // same slot (one slot) and into another (two, three slots: the routing and received ids
    // copied), of another element type than the original, with FP8 originals, combined with the
    // weights they carry (op index % 3 == 0: the delivered ones): the references of a fresh
    // dispatch, bit for bit.
    let random = Routing::Random { none: 0.2 };
    let cached = |j, dtype, k| Op { cached: Some(j), ..Op::new(dtype, k, random, [0; 4], true) };
    let ops = [
        Op::new(DataType::Bf16, 3, random, [40, 17, 33, 1], true),
        cached(0, DataType::F32, 3),
        cached(1, DataType::Bf16, 3),
        Op::new(DataType::F32, 2, Routing::ToRank(1), [5, 40, 0, 39], false),
        cached(3, DataType::Bf16, 2),
        cached(4, DataType::F32, 2),
    ];
    use Step::{Combine as C, Dispatch as D};
    let schedule = [D(0), C(0), D(1), C(1), D(2), C(2), D(3), D(4), D(5), C(5), C(4)];
    for (slots, n, seed) in [(1, 2, 70), (2, 3, 71), (3, 2, 72)] {
        let cfg = Config { slots, ..Config::new(40, 16, 4 * n, 4) };
        // One slot: the last dispatch alone is combinable.
        let schedule: Vec<Step> = if slots == 1 {
            schedule.iter().copied().filter(|s| !matches!(s, Step::Combine(4))).collect()
        } else {
            schedule.to_vec()
        };
        run_schedule(&cfg, n, (2, 32), (&ops, &schedule), seed);
    }
    let fp8 = Op { format: RecvFormat::E4m3, ..Op::new(DataType::Bf16, 2, random, [40, 20, 3, 0], true) };
    let cfg = Config { slots: 2, ..Config::new(40, 128, 8, 4) };
    run_world(&cfg, 2, (2, 32), &[fp8, cached(0, DataType::Bf16, 2), cached(1, DataType::F32, 2)], 73);
}

#[test]
fn combine_adds_one_or_two_biases() {
    // Bias rows added to the sums (also for tokens that went nowhere), bf16 and f32, with and
    // without the weights: the host reference (0 + bias0 + bias1, then the rows in rank order,
    // f32, one rounding) bit for bit.
    let random = Routing::Random { none: 0.3 };
    let biased = |dtype, k, tokens, bias| Op { bias, ..Op::new(dtype, k, random, tokens, true) };
    let ops = [
        biased(DataType::Bf16, 3, [40, 17, 33, 1], 1),
        biased(DataType::F32, 2, [5, 40, 0, 39], 2),
        biased(DataType::Bf16, 4, [21, 22, 23, 24], 2),
        biased(DataType::F32, 1, [40, 3, 7, 40], 1),
        biased(DataType::Bf16, 2, [2, 1, 3, 0], 2),
    ];
    run_world(&Config::new(40, 24, 12, 4), 3, (2, 32), &ops, 80);
    run_world(&Config::new(4, 64, 8, 4), 2, (4, 64), &ops, 81);
}

// The decode (low-latency) mode: `decode.rs`'s bodies against `reference::decode`.

/// Every rank's decode buffer, wired as `LowLatency::new` does.
fn decode_world(cfg: &Config, n: usize, blocks: u32) -> Vec<Rank> {
    cfg.check(n).unwrap();
    let mut ranks: Vec<Rank> = (0..n)
        .map(|r| {
            let mut h = cfg.kernel_handle(r, n, blocks);
            let shared = Mem::zeroed(h.decode_regions().total as usize);
            let state = Mem::from_pod(&vec![1u64; 2 * blocks as usize]);
            h.shared = shared.addr();
            h.state = state.addr();
            let (layout, info, _peers, signals, _peer_signals) =
                (Mem::zeroed(8), Mem::zeroed(8), Mem::zeroed(8), Mem::zeroed(8), Mem::zeroed(8));
            // (No window: the decode kernels have no window form.)
            let win = bytemuck::Zeroable::zeroed();
            let local = Mem::zeroed(8);
            Rank { h, win, shared, local, layout, info, _state: state, _peers, signals, _peer_signals }
        })
        .collect();
    let table: Vec<u64> = ranks.iter().map(|r| r.shared.addr()).collect();
    for r in &mut ranks {
        r._peers = Mem::from_pod(&table);
        r.h.peers = r._peers.addr();
    }
    ranks
}

/// One decode dispatch and its combine on every rank.
#[derive(Clone, Copy, Debug)]
struct DecodeOp {
    dtype: DataType,
    format: RecvFormat,
    k: usize,
    routing: Routing,
    tokens: [usize; 4],
}

/// The host side of a decode operation for every rank.
struct DecodeExpect {
    inputs: Vec<RankInput>,
    recv: Vec<reference::decode::Received>,
    /// Per rank, per local expert: the rows as delivered (FP8: cast) and the scales' bits.
    recv_x: Vec<Vec<(Vec<u8>, Vec<u32>)>>,
    /// Per rank: the expert outputs in the expert-major layout.
    ys: Vec<Vec<u8>>,
    outs: Vec<Vec<u8>>,
}

fn decode_expect(op: &DecodeOp, cfg: &Config, n: usize, seed: u64) -> DecodeExpect {
    let inputs: Vec<RankInput> = (0..n)
        .map(|r| {
            let t = op.tokens[r % 4].min(cfg.max_tokens);
            let mut i = reference::random_input(seed, r, op.dtype, t, cfg.hidden, op.k, (cfg.experts, n), op.routing);
            if op.format.is_fp8() {
                i.x = reference::spread_magnitudes(&i.x, cfg.hidden);
            }
            i
        })
        .collect();
    let row = cfg.hidden * op.dtype.bytes();
    let recv: Vec<_> = (0..n).map(|d| reference::decode::received(&inputs, d, cfg.experts, row)).collect();
    let recv_x = recv
        .iter()
        .map(|r| {
            r.x.iter()
                .map(|x| match op.format {
                    RecvFormat::Input => (x.clone(), vec![]),
                    RecvFormat::E4m3Ue8m0 => {
                        let (q, scales) = reference::cast_e4m3(x, cfg.hidden, op.format);
                        (q, reference::pack_ue8m0(&scales, cfg.hidden / 128))
                    }
                    fp8 => {
                        let (q, scales) = reference::cast_e4m3(x, cfg.hidden, fp8);
                        (q, scales.iter().map(|s| s.to_bits()).collect())
                    }
                })
                .collect()
        })
        .collect();
    let outputs: Vec<Vec<Vec<u8>>> =
        (0..n).map(|d| reference::decode::scaled_experts(op.dtype, &recv[d], (d, n), cfg.experts)).collect();
    let cap = n * cfg.max_tokens;
    let ys = outputs.iter().map(|o| reference::decode::expert_major(o, cap, row)).collect();
    let outs = (0..n)
        .map(|s| reference::decode::combine(op.dtype, &inputs[s], s, (&recv, &outputs), cfg.experts, row))
        .collect();
    DecodeExpect { inputs, recv, recv_x, ys, outs }
}

/// What a rank saw after one decode dispatch and combine.
#[derive(Default)]
struct DecodeSeen {
    count: Vec<u32>,
    range: Vec<u64>,
    x: Vec<Vec<u8>>,
    scales: Vec<Vec<u32>>,
    src: Vec<Vec<i32>>,
    out: Vec<u8>,
}

/// Rank `me`'s decode operations, as its stream would run them.
fn run_decode_rank(
    r: &Rank,
    me: usize,
    ops: &[DecodeOp],
    exp: &[DecodeExpect],
    (blocks, threads): (u32, u32),
    failed: &Arc<AtomicBool>,
) -> Vec<DecodeSeen> {
    let h = r.h;
    let dr = h.decode_regions();
    let (epr, cap) = (h.experts_per_rank() as usize, h.decode_capacity());
    let mut seen = vec![];
    for (i, (op, e)) in ops.iter().zip(exp).enumerate() {
        std::thread::sleep(std::time::Duration::from_millis(((me * 7 + i * 3) % 5) as u64));
        let inp = &e.inputs[me];
        let idx = if h.idx_bytes == 8 {
            Mem::from_pod(&reference::widen_ids(&inp.topk_idx))
        } else {
            Mem::from_pod(&inp.topk_idx)
        };
        let (x, w) = (Mem::from_bytes(&inp.x), Mem::from_pod(&inp.topk_weights));
        let row = h.hidden as usize * op.dtype.bytes();
        let (t, k) = (inp.tokens as u32, op.k as u32);
        let (xa, ia, wa) = (x.addr(), idx.addr(), w.addr());
        // The layout kernel: 3 blocks (several experts each) of 4 threads (several tokens each).
        hw::launch(3, 4, 16, failed, || {
            // SAFETY: the ids hold the batch; the buffer holds the counts and positions.
            unsafe {
                decode::layout(
                    GlobalPtr::from_addr(ia),
                    h.idx_bytes,
                    t,
                    k,
                    h.experts,
                    GlobalPtr::from_addr(h.shared + dr.per_expert),
                    GlobalPtr::from_addr(h.shared + dr.positions),
                )
            }
        });
        let format = format_code(op.format);
        let sig = signature(k, code(op.dtype), format);
        hw::launch(blocks, threads, mscclpp_ep::shared::EXCHANGE_SHARED_BYTES as usize, failed, || {
            let (x, idx) = (GlobalPtr::from_addr(xa), GlobalPtr::from_addr(ia));
            // SAFETY: the inputs hold the batch; the world's buffers the handle's regions.
            unsafe {
                if op.format.is_fp8() {
                    decode::dispatch::<true>(h, x, idx, t, k, row as u32, (sig, format), BUDGET)
                } else {
                    decode::dispatch::<false>(h, x, idx, t, k, row as u32, (sig, format), BUDGET)
                }
            }
        });
        let mut s = DecodeSeen {
            count: r.shared.read(dr.recv_count, epr),
            range: r.shared.read(dr.recv_range, epr * h.n_ranks as usize),
            ..DecodeSeen::default()
        };
        let (stride, scale_row) = if op.format.is_fp8() {
            (h.hidden as u64, scale_row_bytes(format, h.scales_per_row()) as u64)
        } else {
            (row as u64, 0)
        };
        for j in 0..epr {
            let (rows, first) = (s.count[j] as usize, j as u64 * cap);
            assert!(rows as u64 <= cap, "rank {me}: {rows} rows for expert {j}");
            s.x.push(r.shared.read(dr.recv_x + first * stride, rows * stride as usize));
            s.scales.push(r.shared.read(dr.recv_scales + first * scale_row, rows * scale_row as usize / 4));
            s.src.push(r.shared.read(dr.recv_src + first * 4, rows));
        }
        std::thread::sleep(std::time::Duration::from_millis(((me * 5 + i) % 4) as u64));
        let y = Mem::from_bytes(&e.ys[me]);
        let out = Mem::from_bytes(&vec![0xa5; inp.tokens * row + 64]);
        let (ya, oa) = (y.addr(), out.addr());
        hw::launch(blocks, threads, mscclpp_ep::shared::EXCHANGE_SHARED_BYTES as usize, failed, || {
            let (y, out) = (GlobalPtr::from_addr(ya), GlobalPtr::from_addr(oa));
            let ids = (GlobalPtr::from_addr(ia), GlobalPtr::from_addr(wa));
            // SAFETY: `y` holds every expert's capacity of rows, `out` the tokens' rows.
            unsafe {
                if op.dtype == DataType::F32 {
                    decode::combine::<mscclpp_device::vec::F32x4>(h, y, ids, out, t, k, row as u32, BUDGET)
                } else {
                    decode::combine::<mscclpp_device::vec::Bf16x8>(h, y, ids, out, t, k, row as u32, BUDGET)
                }
            }
        });
        s.out = out.bytes()[..inp.tokens * row + 64].to_vec();
        seen.push(s);
    }
    seen
}

/// Runs decode `ops` on `n` emulated ranks (each in its own thread) and checks everything.
fn run_decode_world(cfg: &Config, n: usize, grid: (u32, u32), ops: &[DecodeOp], seed: u64) {
    let ranks = decode_world(cfg, n, grid.0);
    let exp: Vec<DecodeExpect> =
        ops.iter().enumerate().map(|(i, op)| decode_expect(op, cfg, n, seed + i as u64)).collect();
    let failed = Arc::new(AtomicBool::new(false));
    let seen: Vec<Vec<DecodeSeen>> = std::thread::scope(|scope| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(me, r)| {
                let (exp, failed) = (&exp, &failed);
                scope.spawn(move || run_decode_rank(r, me, ops, exp, grid, failed))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    for (me, per_op) in seen.iter().enumerate() {
        for (i, (s, (op, e))) in per_op.iter().zip(ops.iter().zip(&exp)).enumerate() {
            let what = format!("decode, {n} ranks {grid:?}, rank {me}, op {i} {op:?}");
            let want = &e.recv[me];
            assert_eq!(s.count, want.count, "{what}: rows per local expert");
            assert_eq!(s.range, want.range, "{what}: layout ranges");
            assert_eq!(s.src, want.src, "{what}: source indices");
            for (j, (x, scales)) in e.recv_x[me].iter().enumerate() {
                assert!(s.x[j] == *x, "{what}: received rows of local expert {j} differ");
                assert_eq!(&s.scales[j], scales, "{what}: received scales of local expert {j}");
            }
            let t = e.outs[me].len();
            assert!(s.out[..t] == e.outs[me][..], "{what}: combine output differs");
            assert!(s.out[t..].iter().all(|&b| b == 0xa5), "{what}: combine wrote past the output");
        }
    }
}

fn decode_ops(n: usize) -> Vec<DecodeOp> {
    let random = Routing::Random { none: 0.2 };
    let op = |dtype, k, routing, tokens| DecodeOp { dtype, format: RecvFormat::Input, k, routing, tokens };
    vec![
        op(DataType::Bf16, 3, random, [12, 5, 11, 1]),
        op(DataType::F32, 1, random, [5, 12, 0, 9]),
        // More slots than the rank has experts: every token names some expert twice.
        op(DataType::Bf16, 8, Routing::ToRank(n - 1), [12, 12, 4, 10]),
        op(DataType::Bf16, 2, random, [0, 0, 0, 0]),
        op(DataType::F32, 8, Routing::Random { none: 0.0 }, [0, 12, 12, 12]),
        op(DataType::Bf16, 5, Routing::ToRank(0), [12, 3, 7, 12]),
        op(DataType::F32, 4, random, [9, 8, 7, 6]),
        op(DataType::Bf16, 6, random, [1, 2, 3, 4]),
    ]
}

#[test]
fn decode_dispatch_and_weighted_combine_match_the_reference() {
    let cfg = Config::new(12, 24, 12, 8);
    run_decode_world(&cfg, 2, (2, 32), &decode_ops(2), 60);
    run_decode_world(&cfg, 3, (3, 64), &decode_ops(3), 61);
}

#[test]
fn decode_at_every_block_budget_and_with_one_rank() {
    for (n, experts, blocks) in [(4, 16, 1), (2, 8, 3), (4, 8, DEFAULT_BLOCKS)] {
        let cfg = Config::new(12, 16, experts, 8);
        run_decode_world(&cfg, n, (blocks, 32), &decode_ops(n)[..5], 70 + blocks as u64);
    }
    run_decode_world(&Config::new(12, 8, 4, 8), 1, (1, 32), &decode_ops(1), 75);
}

#[test]
fn decode_with_i64_ids_and_eight_ranks() {
    let cfg = Config { topk_idx: TopkIdx::I64, ..Config::new(12, 16, 12, 8) };
    run_decode_world(&cfg, 3, (2, 32), &decode_ops(3), 80);
    run_decode_world(&Config::new(6, 8, 16, 8), 8, (2, 32), &decode_ops(8)[..4], 81);
}

#[test]
fn decode_fp8_dispatch_in_every_format() {
    // bf16 rows of 1 to 3 groups of 128 columns, cast in the dispatch kernel; the combine that
    // follows takes bf16 rows.
    let formats = [RecvFormat::E4m3, RecvFormat::E4m3Pow2, RecvFormat::E4m3Ue8m0];
    for (i, (n, hidden, experts, grid)) in
        [(2, 128, 8, (2, 32)), (3, 384, 12, (1, 64)), (2, 256, 4, (3, 32))].into_iter().enumerate()
    {
        let cfg = Config::new(12, hidden, experts, 8);
        let ops: Vec<DecodeOp> = decode_ops(n)
            .into_iter()
            .filter(|op| op.dtype == DataType::Bf16)
            .enumerate()
            .map(|(j, op)| DecodeOp { format: formats[(i + j) % 3], ..op })
            .collect();
        run_decode_world(&cfg, n, grid, &ops, 90 + i as u64);
    }
}

#[test]
fn decode_layout_kernel_matches_its_definition() {
    // Random ids with repeats within a token and ids outside the experts; token counts around
    // the block's thread count; i32 and i64 ids.
    let mut rng = StdRng::seed_from_u64(8);
    let failed = Arc::new(AtomicBool::new(false));
    for case in 0..16 {
        let (experts, k, threads) =
            (1 + rng.random_range(0..20u32), 1 + rng.random_range(0..8u32), [4, 8, 32][case % 3]);
        let tokens = rng.random_range(0..100u32);
        let idx: Vec<i32> = (0..tokens * k).map(|_| rng.random_range(-2..experts as i32 + 2)).collect();
        let buf = if case % 2 == 1 { Mem::from_pod(&reference::widen_ids(&idx)) } else { Mem::from_pod(&idx) };
        let idx_bytes = if case % 2 == 1 { 8 } else { 4 };
        let (per_expert, positions) = (Mem::zeroed(experts as usize * 4), Mem::zeroed((tokens * k) as usize * 4 + 4));
        let (ia, pa, qa) = (buf.addr(), per_expert.addr(), positions.addr());
        hw::launch(3, threads, threads as usize * 4, &failed, || {
            // SAFETY: the buffers hold the ids, the counts and the positions.
            unsafe {
                decode::layout(
                    GlobalPtr::from_addr(ia),
                    idx_bytes,
                    tokens,
                    k,
                    experts,
                    GlobalPtr::from_addr(pa),
                    GlobalPtr::from_addr(qa),
                )
            }
        });
        let got_positions: Vec<u32> = positions.read(0, (tokens * k) as usize);
        let mut count = vec![0u32; experts as usize];
        for (t, ids) in idx.chunks(k as usize).enumerate() {
            for e in 0..experts as i32 {
                if let Some(j) = ids.iter().position(|&id| id == e) {
                    let at = t * k as usize + j;
                    assert_eq!(got_positions[at], count[e as usize], "case {case}: token {t} slot {j}");
                    count[e as usize] += 1;
                }
            }
        }
        assert_eq!(per_expert.read::<u32>(0, experts as usize), count, "case {case}: tokens per expert");
    }
}

#[test]
fn decode_ranks_that_disagree_on_k_or_format_fail_with_a_message() {
    let cfg = Config::new(8, 128, 4, 4);
    for (k1, format1) in [(3, RecvFormat::Input), (2, RecvFormat::E4m3)] {
        let ranks = decode_world(&cfg, 2, 1);
        let failed = Arc::new(AtomicBool::new(false));
        let msgs: Vec<String> = std::thread::scope(|scope| {
            let hs: Vec<_> = ranks
                .iter()
                .enumerate()
                .map(|(me, r)| {
                    let failed = &failed;
                    scope.spawn(move || {
                        let (k, format) = if me == 1 { (k1, format1) } else { (2, RecvFormat::Input) };
                        let routing = Routing::Random { none: 0.0 };
                        let inp = reference::random_input(9, me, DataType::Bf16, 8, 128, k, (4, 2), routing);
                        let (x, idx) = (Mem::from_bytes(&inp.x), Mem::from_pod(&inp.topk_idx));
                        let (xa, ia, h) = (x.addr(), idx.addr(), r.h);
                        let dr = h.decode_regions();
                        catch_unwind(AssertUnwindSafe(|| {
                            hw::launch(1, 4, 16, failed, || {
                                // SAFETY: the ids hold the batch; the buffer the counts and positions.
                                unsafe {
                                    decode::layout(
                                        GlobalPtr::from_addr(ia),
                                        4,
                                        8,
                                        k as u32,
                                        4,
                                        GlobalPtr::from_addr(h.shared + dr.per_expert),
                                        GlobalPtr::from_addr(h.shared + dr.positions),
                                    )
                                }
                            });
                            let f = format_code(format);
                            let sig = signature(k as u32, DTYPE_BF16, f);
                            hw::launch(1, 32, mscclpp_ep::shared::EXCHANGE_SHARED_BYTES as usize, failed, || {
                                let (x, idx) = (GlobalPtr::from_addr(xa), GlobalPtr::from_addr(ia));
                                // SAFETY: the inputs hold the batch; the world's buffers the regions.
                                unsafe {
                                    if format.is_fp8() {
                                        decode::dispatch::<true>(h, x, idx, 8, k as u32, 256, (sig, f), BUDGET)
                                    } else {
                                        decode::dispatch::<false>(h, x, idx, 8, k as u32, 256, (sig, f), BUDGET)
                                    }
                                }
                            });
                        }))
                    })
                })
                .collect();
            hs.into_iter()
                .filter_map(|h| h.join().expect("the rank thread catches its panics").err())
                .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
                .collect()
        });
        let what = "ep_decode_dispatch: the ranks were called with different k, element types or received formats";
        assert!(msgs.iter().any(|m| m.contains(what)), "k {k1} {format1:?}: {msgs:?}");
    }
}

/// `ops` with the dispatch and the combine of op `i` in the forms `forms(i)` says (true: the
/// window form).
fn with_forms(ops: &[Op], forms: impl Fn(usize) -> (bool, bool)) -> Vec<Op> {
    ops.iter().enumerate().map(|(i, op)| Op { window: forms(i), ..*op }).collect()
}

/// Asserts that two runs of the same ops and seed saw the same bits on every rank.
fn assert_same(what: &str, a: &[Vec<Seen>], b: &[Vec<Seen>]) {
    for (me, (a, b)) in a.iter().zip(b).enumerate() {
        for (i, (a, b)) in a.iter().zip(b).enumerate() {
            assert!(a == b, "{what}: rank {me}, op {i}: the two forms saw different bits");
        }
    }
}

#[test]
fn window_form_matches_the_references_and_the_peer_table_form() {
    // The window kernels' bodies (`Window::peer` addressing, window signals) against the
    // references and against the peer-table form, bit for bit: every op in the window form, and
    // the forms mixed between and within ops (a window dispatch combined in the peer-table form
    // and the reverse) on the same buffers, with 1 to 3 blocks.
    let cases = [
        (2, Config::new(40, 24, 12, 4), (2, 32), 90),
        (3, Config::new(40, 16, 12, 4), (3, 64), 91),
        (4, Config::new(40, 16, 16, 4), (1, 32), 92),
    ];
    for (n, cfg, grid, seed) in cases {
        let peer = run_world(&cfg, n, grid, &ops(n), seed);
        let window = run_world(&cfg, n, grid, &with_forms(&ops(n), |_| (true, true)), seed);
        assert_same(&format!("{n} ranks, window form"), &peer, &window);
        let mixed = run_world(&cfg, n, grid, &with_forms(&ops(n), |i| (i % 2 == 0, i % 3 != 0)), seed);
        assert_same(&format!("{n} ranks, mixed forms"), &peer, &mixed);
    }
}

#[test]
fn window_form_of_fp8_slots_and_cached_dispatches() {
    // FP8 (each format), dispatches in flight combined out of order and cached dispatches, in the
    // window form (and mixed): the references of the peer-table form, bit for bit.
    for (i, format) in [RecvFormat::E4m3, RecvFormat::E4m3Pow2, RecvFormat::E4m3Ue8m0].into_iter().enumerate() {
        let cfg = Config::new(40, 256, 8, 4);
        let peer = run_world(&cfg, 2, (2, 32), &fp8_ops(2, format), 93 + i as u64);
        let window =
            run_world(&cfg, 2, (2, 32), &with_forms(&fp8_ops(2, format), |i| (true, i % 2 == 0)), 93 + i as u64);
        assert_same("fp8, window form", &peer, &window);
    }
    let random = Routing::Random { none: 0.2 };
    let ops = [
        Op::new(DataType::Bf16, 3, random, [40, 17, 33, 1], true),
        Op::new(DataType::F32, 2, random, [5, 40, 0, 39], true),
        Op { cached: Some(0), ..Op::new(DataType::F32, 3, random, [0; 4], true) },
        Op::new(DataType::Bf16, 4, Routing::ToRank(0), [30, 3, 7, 40], true),
        Op { cached: Some(3), ..Op::new(DataType::Bf16, 4, random, [0; 4], true) },
    ];
    use Step::{Combine as C, Dispatch as D};
    let schedule = [D(0), D(1), C(1), C(0), D(2), D(3), C(2), D(4), C(4), C(3)];
    let cfg = Config { slots: 3, ..Config::new(40, 16, 12, 4) };
    let peer = run_schedule(&cfg, 3, (2, 32), (&ops, &schedule), 96);
    let window = run_schedule(&cfg, 3, (2, 32), (&with_forms(&ops, |_| (true, true)), &schedule), 96);
    assert_same("slots and cached, window form", &peer, &window);
    let mixed = run_schedule(&cfg, 3, (2, 32), (&with_forms(&ops, |i| (i % 2 == 1, i % 2 == 0)), &schedule), 96);
    assert_same("slots and cached, mixed forms", &peer, &mixed);
}

// The pipelined mode (`Config::ring_rows`): `pipe.rs`'s bodies against the same references.

#[test]
fn pipelined_mode_matches_the_references_with_rings_that_wrap() {
    // Rings of 1 to 64 rows (40 tokens a rank: the small rings wrap many times), 2 to 8 ranks,
    // 1 to 3 channels (2 to 7 blocks, an odd last one idle), uneven and empty batches, bf16 and
    // f32, weights (delivered, the caller's) and no weights, local and global ids.
    let cases = [
        (2, 1, (2, 32), 24),
        (2, 2, (4, 32), 16),
        (3, 3, (3, 64), 16),
        (4, 5, (5, 32), 16),
        (3, 64, (2, 64), 16),
        (8, 2, (2, 32), 8),
        // Three warps a block: batches of 3 tokens into rings of 8 rows.
        (3, 8, (3, 96), 16),
    ];
    for (i, (n, ring, grid, hidden)) in cases.into_iter().enumerate() {
        let cfg = Config::new(40, hidden, 4 * n, 4).pipelined(Some(ring));
        run_world(&cfg, n, grid, &ops(n), 200 + i as u64);
    }
    let cfg = Config { expert_ids: ExpertIds::Global, topk_idx: TopkIdx::I64, ..Config::new(40, 16, 12, 4) };
    run_world(&cfg.pipelined(Some(3)), 3, (4, 32), &ops(3), 210);
    run_world(&Config::new(40, 8, 4, 4).pipelined(Some(1)), 1, (2, 32), &ops(1), 211);
}

#[test]
fn pipelined_mode_fp8_bias_slots_and_cached_dispatches() {
    for (i, format) in [RecvFormat::E4m3, RecvFormat::E4m3Pow2, RecvFormat::E4m3Ue8m0].into_iter().enumerate() {
        let cfg = Config::new(40, 256, 8, 4).pipelined(Some([1, 4, 7][i]));
        run_world(&cfg, 2, (4, 32), &fp8_ops(2, format), 220 + i as u64);
    }
    let random = Routing::Random { none: 0.3 };
    let biased = |dtype, k, tokens, bias| Op { bias, ..Op::new(dtype, k, random, tokens, true) };
    let ops = [biased(DataType::Bf16, 3, [40, 17, 33, 1], 1), biased(DataType::F32, 2, [5, 40, 0, 39], 2)];
    run_world(&Config::new(40, 24, 12, 4).pipelined(Some(2)), 3, (2, 32), &ops, 225);
    // Slots (combined out of order) and cached dispatches, as `dispatch_cached` copies them.
    let random = Routing::Random { none: 0.2 };
    let ops = [
        Op::new(DataType::Bf16, 3, random, [40, 17, 33, 1], true),
        Op::new(DataType::F32, 2, random, [5, 40, 0, 39], true),
        Op { cached: Some(0), ..Op::new(DataType::F32, 3, random, [0; 4], true) },
        Op::new(DataType::Bf16, 4, Routing::ToRank(0), [30, 3, 7, 40], true),
        Op { cached: Some(3), ..Op::new(DataType::Bf16, 4, random, [0; 4], true) },
    ];
    use Step::{Combine as C, Dispatch as D};
    let schedule = [D(0), D(1), C(1), C(0), D(2), D(3), C(2), D(4), C(4), C(3)];
    for (ring, grid) in [(1, (2, 32)), (3, (4, 64))] {
        let cfg = Config { slots: 3, ..Config::new(40, 16, 12, 4) }.pipelined(Some(ring));
        run_schedule(&cfg, 3, grid, (&ops, &schedule), 230 + ring as u64);
    }
}

#[test]
fn pipelined_shared_memory_does_not_grow_with_the_tokens() {
    let at = |tokens| Config::new(tokens, 7168, 256, 8).pipelined(Some(64));
    let (a, b) = (at(128).shared_bytes(8, 20).unwrap(), at(1 << 20).shared_bytes(8, 20).unwrap());
    assert!(b - a < 1 << 20, "{a} {b}: only the count words' and flags' sizes may differ");
    assert!(
        at(4096).local_bytes(8, 20).unwrap() > 0 && Config::new(4096, 7168, 256, 8).local_bytes(8, 20).unwrap() == 0
    );
    let e = |c: Config| c.check(2).unwrap_err().to_string();
    assert!(e(at(8).pipelined(Some(0))).contains("ring rows"));
    assert!(e(Config { blocks: Some(1), ..at(8) }).contains("pipelined"));
}
