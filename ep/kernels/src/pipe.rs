//! The pipelined mode of dispatch and combine (`EpHandle::ring_rows` not 0): the rows stream
//! through fixed rings in the shared buffers, `[channel][peer]` of `ring_rows` rows each, so the
//! shared memory does not grow with the token count; the received rows, ids, weights, sources
//! and scales land in the rank's *local* buffer (`EpHandle::local`).
//!
//! The grid splits in two: block `c < channels` sends channel `c`, block `channels + c`
//! receives it (a last odd block idles). A channel is a contiguous range of a rank's tokens
//! (`chan_range`). Every ring has a tail (rows ever pushed, stored by the sender into the
//! receiver's buffer) and a head (rows ever consumed, stored by the receiver into the sender's
//! buffer); both only grow, across calls, and each side keeps its own count in its `cursors`.
//! Thread 0 of a block does the bookkeeping and every wait (with the budget); the block copies.
//!
//! Dispatch: the sender walks its tokens in batches of at most `min(warps, ring_rows)` tokens,
//! waits for room for the batch's rows at every destination, writes them (rows and metadata:
//! the destination row, ids, weights, source index, FP8 scales) and publishes its tails; at the
//! end a done word per destination (the call's tag and row count). The receiver polls all its
//! sources without waiting on any one of them (so that no sender waits on a receiver that waits
//! on another sender), drains what arrived into the local buffers at the carried rows and
//! stores its heads back, until every source's done count is drained.
//!
//! Combine: the sender (expert side) pushes, for every source rank `s`, the rows it received
//! from `s` whose token falls in `s`'s channel `c` (contiguous: the rows are in `s`'s token
//! order), with room to spare at whichever destination has it (never waiting on one while
//! another has room). The receiver (token side) walks its channel's tokens in batches of at
//! most `min(warps, ring_rows)`, waits until every rank's rows of the batch are there and sums
//! them per token in rank order, as the unpipelined combine does: the same bits.

use mscclpp_device::element::Element;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;

use crate::body::{
    Peers, Tables, WARP, accumulate, copy_vecs, exchange_counts, fp8_group_scales, fp8_store_scale, fp8_vector,
    meta_value, pack, vec_at,
};
use crate::hw::{
    ctaid, fail, follow_previous_grid, ld_v4, load_acquire, ntid, shared_base, spin_until, st_v4, store_release,
    sync_threads, tid,
};
use mscclpp_ep_device::*;

/// Token range `[lo, hi)` of channel `c` of `channels` over `tokens` tokens.
#[inline(always)]
pub const fn chan_range(tokens: u32, c: u32, channels: u32) -> (u32, u32) {
    let t = tokens as u64;
    ((t * c as u64 / channels as u64) as u32, (t * (c as u64 + 1) / channels as u64) as u32)
}

/// Offset of the pipelined tables in the block's dynamic shared memory (after [`Tables`]').
const PIPE_BASE: usize = 512;
const _: () = assert!(PIPE_BASE + MAX_RANKS * 16 + 16 <= EXCHANGE_SHARED_BYTES as usize);

/// The per-round table thread 0 fills for the block: per peer a running count (`base`), a row
/// count (`m`) and a first index (`first`), and a control word.
struct PipeTable {
    base: *mut u64,
    m: *mut u32,
    first: *mut u32,
    ctl: *mut u32,
}

impl PipeTable {
    #[inline(always)]
    fn new() -> Self {
        let at = shared_base();
        // SAFETY: offsets inside EXCHANGE_SHARED_BYTES (asserted above).
        unsafe {
            Self {
                base: at.add(PIPE_BASE).cast::<u64>(),
                m: at.add(PIPE_BASE + MAX_RANKS * 8).cast::<u32>(),
                first: at.add(PIPE_BASE + MAX_RANKS * 12).cast::<u32>(),
                ctl: at.add(PIPE_BASE + MAX_RANKS * 16).cast::<u32>(),
            }
        }
    }
    /// Entry `p` (below `MAX_RANKS`): its base, count and first index.
    #[inline(always)]
    fn get(&self, p: u32) -> (u64, u32, u32) {
        let i = p as usize % MAX_RANKS;
        // SAFETY: inside the table; written by thread 0 before the block barrier that precedes
        // every read.
        unsafe { (self.base.add(i).read(), self.m.add(i).read(), self.first.add(i).read()) }
    }
    #[inline(always)]
    fn set(&self, p: u32, (base, m, first): (u64, u32, u32)) {
        let i = p as usize % MAX_RANKS;
        // SAFETY: inside the table; only thread 0 writes, between the barriers.
        unsafe {
            self.base.add(i).write(base);
            self.m.add(i).write(m);
            self.first.add(i).write(first);
        }
    }
    #[inline(always)]
    fn ctl(&self) -> u32 {
        // SAFETY: inside the table (as `get`).
        unsafe { self.ctl.read() }
    }
    #[inline(always)]
    fn set_ctl(&self, v: u32) {
        // SAFETY: inside the table (as `set`).
        unsafe { self.ctl.write(v) }
    }
    /// The round's rows, entry after entry (`m` rows for each of the `n` entries), one per
    /// warp: warp `w` of `warps` takes rows `w, w + warps, ..` and calls `f(p, j)` for row `j`
    /// of entry `p`.
    #[inline(always)]
    fn for_each_row(&self, n: u32, (w, warps): (u32, u32), mut f: impl FnMut(u32, u32)) {
        let (mut p, mut before, mut w) = (0, 0, w);
        loop {
            while p < n && w >= before + self.get(p).1 {
                before += self.get(p).1;
                p += 1;
            }
            if p >= n {
                break;
            }
            f(p, w - before);
            w += warps;
        }
    }
}

/// Tokens a block moves per batch: one per warp, at most the ring's rows.
const fn batch_tokens(threads: u32, ring: u64) -> u32 {
    let warps = threads / WARP;
    if (warps as u64) < ring { warps } else { ring as u32 }
}

/// Where token `t` goes on rank `d`: its position among this rank's tokens for `d`, or -1
/// (the layout's send index).
///
/// # Safety
/// `t` below the layout's tokens, `d < h.n_ranks`.
#[inline(always)]
unsafe fn send_index(h: &EpHandle, t: u32, d: u32) -> i32 {
    let at = (h.layout + h.layout_regions().send_index) as *const i32;
    // SAFETY: inside the layout (caller's contract).
    unsafe { at.add(t as usize * h.n_ranks as usize + d as usize).read() }
}

/// For the tokens `t0..t1` of a batch: how many go to each rank, and the position (send index)
/// of the first of them on that rank.
///
/// # Safety
/// `t0 <= t1`, both at most the layout's tokens.
#[inline(always)]
unsafe fn batch_rows(h: &EpHandle, (t0, t1): (u32, u32)) -> ([u32; MAX_RANKS], [u32; MAX_RANKS]) {
    let (mut m, mut first) = ([0u32; MAX_RANKS], [0u32; MAX_RANKS]);
    for t in t0..t1 {
        for d in 0..h.n_ranks as usize {
            // SAFETY: t < t1 (caller's contract), d < n_ranks.
            let s = unsafe { send_index(h, t, d as u32) };
            if s >= 0 {
                if m[d] == 0 {
                    first[d] = s as u32;
                }
                m[d] += 1;
            }
        }
    }
    (m, first)
}

/// The running counts `[kind][channel c][peer]` of this rank (`cursors` region), kind 0 to 3:
/// dispatch sent, dispatch consumed, combine sent, combine consumed.
#[inline(always)]
fn cursor(h: &EpHandle, kind: u32, c: u32, p: u32) -> *mut u64 {
    let rr = h.ring_regions();
    let words = h.channels() as u64 * h.n_ranks as u64 * 8;
    (h.shared + h.ring_word(rr.cursors + kind as u64 * words, c, p)) as *mut u64
}

/// Byte offset of word `j` of the `2k + 2` metadata words of a ring entry: ids (`j < k`),
/// weights (`j < 2k`), source index (`2k`), destination row (`2k + 1`).
#[inline(always)]
const fn meta_offset(h: &EpHandle, k: u32, j: u32) -> u64 {
    if j < k {
        8 + j as u64 * 4
    } else if j < 2 * k {
        8 + (h.max_topk + j - k) as u64 * 4
    } else if j == 2 * k {
        4
    } else {
        0
    }
}

/// The pipelined dispatch: as [`crate::body::dispatch`] (same arguments, same results), through
/// the rings into the local buffer of `h`'s slot.
///
/// # Safety
/// As for [`crate::body::dispatch`], with `h.ring_rows > 0`, `h.local` this rank's local buffer
/// (its `slots` of `local_slot_bytes`), `h.blocks >= 2` and at least `MAX_RANKS` threads.
#[allow(clippy::too_many_arguments)]
pub unsafe fn dispatch<const CAST: bool, P: Peers>(
    peers: P,
    h: EpHandle,
    x: GlobalPtr<u8>,
    topk_idx: GlobalPtr<u8>,
    topk_w: GlobalPtr<u32>,
    tokens: u32,
    k: u32,
    row_bytes: u32,
    (signature, format): (u32, u32),
    budget: SpinBudget,
) {
    follow_previous_grid();
    let (b, tid) = (ctaid(), tid());
    let state = h.state as *mut u64;
    // SAFETY: this block's epoch (see `body::dispatch`).
    let e = unsafe { state.add(b as usize).read() };
    let tb = Tables::new();
    // SAFETY: the kernel's handle (this function's contract).
    unsafe { peers.init(&h, tid) };
    sync_threads();
    // SAFETY: the kernel's handle; the tables are this block's.
    unsafe { exchange_counts(&peers, &h, &tb, (tokens, signature, e), budget) };
    let ch = h.channels();
    if b < ch {
        // SAFETY: forwarded (this function's contract).
        unsafe {
            dispatch_send::<CAST, P>(&peers, &h, &tb, (x, topk_idx, topk_w), (tokens, k, row_bytes, format), e, budget)
        };
    } else if b < 2 * ch {
        // SAFETY: forwarded.
        unsafe {
            dispatch_receive::<CAST>(&peers, &h, b - ch, (topk_idx.addr() == 0, k, row_bytes, format), e, budget)
        };
    }
    sync_threads();
    if tid == 0 {
        // SAFETY: this block's epoch; every thread read it before the barriers above.
        unsafe { state.add(b as usize).write(e + 1) };
    }
}

/// The sender of dispatch channel `ctaid()`.
///
/// # Safety
/// As for [`dispatch`]; the counts exchanged (`tb.base` holds this rank's first row at every
/// rank).
#[allow(clippy::too_many_arguments)]
unsafe fn dispatch_send<const CAST: bool, P: Peers>(
    peers: &P,
    h: &EpHandle,
    tb: &Tables,
    (x, topk_idx, topk_w): (GlobalPtr<u8>, GlobalPtr<u8>, GlobalPtr<u32>),
    (tokens, k, row_bytes, format): (u32, u32, u32, u32),
    e: u64,
    budget: SpinBudget,
) {
    let (n, me, c) = (h.n_ranks, h.rank, ctaid());
    let (tid, nt) = (tid(), ntid());
    let rr = h.ring_regions();
    let ring = h.ring_rows as u64;
    let pt = PipeTable::new();
    let (lo, hi) = chan_range(tokens, c, h.channels());
    let (warps, batch) = (nt / WARP, batch_tokens(nt, ring));
    let mut sent = [0u64; MAX_RANKS];
    let mut total = [0u32; MAX_RANKS];
    if tid == 0 {
        for d in 0..n {
            // SAFETY: this rank's own cursor.
            sent[d as usize] = unsafe { cursor(h, 0, c, d).read() };
        }
    }
    let cached = topk_idx.addr() == 0;
    let words = if cached { 1 } else { 2 * k + 2 };
    let (groups, meta_bytes, row_stride) = (h.scales_per_row(), h.ring_meta_bytes(), h.max_row_bytes());
    let (pow2, ue8m0) = (format != FORMAT_E4M3, format == FORMAT_E4M3_UE8M0);
    let scale_row = scale_row_bytes(format, groups) as u64;
    let mut t0 = lo;
    while t0 < hi {
        let t1 = if hi - t0 > batch { t0 + batch } else { hi };
        if tid == 0 {
            // SAFETY: t0 <= t1 <= tokens (the channel's range).
            let (m, first) = unsafe { batch_rows(h, (t0, t1)) };
            spin_until(budget, c"ep_dispatch (pipelined): waiting for room in a rank's ring", || {
                (0..n as usize).all(|d| {
                    // SAFETY: this rank's head word of (c, d), stored by rank d's receiver.
                    m[d] == 0 || sent[d] + m[d] as u64 - unsafe { load_acquire(own(h, rr.heads, c, d as u32)) } <= ring
                })
            });
            for d in 0..n {
                pt.set(d, (sent[d as usize], m[d as usize], first[d as usize]));
            }
        }
        sync_threads();
        // Where token t's entry toward d is: (entry index, its destination row), or None.
        let entry = |t: u32, d: u32| -> Option<(u64, u32)> {
            // SAFETY: t < tokens (the batch lies in the channel's range), d < n.
            let s = unsafe { send_index(h, t, d) };
            if s < 0 {
                return None;
            }
            let (base, _, first) = pt.get(d);
            // SAFETY: d < n.
            let row = unsafe { tb.base.add(d as usize).read() } + s as u32;
            Some((h.ring_entry(c, me, base + (s as u32 - first) as u64), row))
        };
        if CAST {
            // One (token, 128 columns) per thread, cast once, stored to every destination.
            let units = (t1 - t0) * groups;
            let mut u = tid;
            while u < units {
                let (t, grp) = (t0 + u / groups, u % groups);
                let src = x.addr() + t as u64 * row_bytes as u64 + grp as u64 * (FP8_GROUP as u64 * 2);
                // SAFETY: this group of token t's row.
                let (mul, scale) = unsafe { fp8_group_scales(src, pow2) };
                for d in 0..n {
                    if let Some((i, _)) = entry(t, d) {
                        let at = peers.at(d, rr.meta + i * meta_bytes + h.ring_meta_scales());
                        // SAFETY: the scales of a ring entry (scale_row <= 4 * groups bytes).
                        unsafe { fp8_store_scale(at, (grp, groups, scale_row), scale, ue8m0) };
                    }
                }
                for v in 0..8 {
                    // SAFETY: vectors 2v, 2v + 1 of the group.
                    let (a, bb) = unsafe { (ld_v4(vec_at(src, 2 * v)), ld_v4(vec_at(src, 2 * v + 1))) };
                    let out = fp8_vector(a, bb, mul);
                    for d in 0..n {
                        if let Some((i, _)) = entry(t, d) {
                            let row = peers.at(d, rr.rows + i * row_stride + grp as u64 * FP8_GROUP as u64);
                            // SAFETY: vector v of this group of a ring row (hidden <= row_stride).
                            unsafe { st_v4(vec_at(row, v), out) };
                        }
                    }
                }
                u += nt;
            }
        }
        // Rows (unless cast above), one warp per token, then the metadata words by its lanes.
        let (lane, mut w) = (tid % WARP, tid / WARP);
        while w < t1 - t0 {
            let t = t0 + w;
            for d in 0..n {
                let Some((i, row)) = entry(t, d) else { continue };
                if !CAST {
                    let src = x.addr() + t as u64 * row_bytes as u64;
                    let dst = peers.at(d, rr.rows + i * row_stride);
                    // SAFETY: the token's row and a ring row (row_bytes <= row_stride).
                    unsafe { copy_vecs(src, dst, lane, row_bytes / 16, WARP) };
                }
                let meta = peers.at(d, rr.meta + i * meta_bytes);
                let mut j = lane;
                while j < words {
                    let j2 = if cached { 2 * k + 1 } else { j };
                    let v = if j2 == 2 * k + 1 {
                        row
                    } else {
                        // SAFETY: t < tokens, j2 < 2k + 1.
                        unsafe { meta_value(h, (topk_idx, topk_w), (t, k, j2), d) }
                    };
                    // SAFETY: a word of the ring entry's metadata (k <= max_topk).
                    unsafe { ((meta + meta_offset(h, k, j2)) as *mut u32).write(v) };
                    j += WARP;
                }
            }
            w += warps;
        }
        sync_threads();
        if tid == 0 {
            for d in 0..n {
                let (_, m, _) = pt.get(d);
                if m > 0 {
                    sent[d as usize] += m as u64;
                    total[d as usize] += m;
                    let at = peers.at(d, h.ring_word(rr.tails, c, me));
                    // SAFETY: rank d's tail word of (c, me), written only by this block.
                    // Partner: the receiver's acquire.
                    unsafe { store_release(at as *mut u64, sent[d as usize]) };
                }
            }
        }
        t0 = t1;
    }
    if tid == 0 {
        for d in 0..n {
            // SAFETY: this rank's own cursor.
            unsafe { cursor(h, 0, c, d).write(sent[d as usize]) };
            let at = peers.at(d, h.ring_word(rr.dones, c, me));
            // SAFETY: rank d's done word of (c, me), written only by this block, after its tail.
            unsafe { store_release(at as *mut u64, pack_count(count_tag(e), total[d as usize])) };
        }
    }
}

/// Address of this rank's counter word `[c][p]` of the region at `region`.
#[inline(always)]
fn own(h: &EpHandle, region: u64, c: u32, p: u32) -> *const u64 {
    (h.shared + h.ring_word(region, c, p)) as *const u64
}

/// The receiver of dispatch channel `c`.
///
/// # Safety
/// As for [`dispatch`].
unsafe fn dispatch_receive<const CAST: bool>(
    peers: &impl Peers,
    h: &EpHandle,
    c: u32,
    (cached, k, row_bytes, format): (bool, u32, u32, u32),
    e: u64,
    budget: SpinBudget,
) {
    let (n, me) = (h.n_ranks, h.rank);
    let (tid, nt) = (tid(), ntid());
    let rr = h.ring_regions();
    let sr = h.shared_regions();
    let pt = PipeTable::new();
    let tag = count_tag(e);
    let recv_row = if CAST { h.hidden } else { row_bytes } as u64;
    let scale_row = if CAST { scale_row_bytes(format, h.scales_per_row()) as u64 } else { 0 };
    let (meta_bytes, row_stride) = (h.ring_meta_bytes(), h.max_row_bytes());
    let words = if cached { 0 } else { 2 * k + 1 };
    let mut got = [0u64; MAX_RANKS];
    let mut end = [u64::MAX; MAX_RANKS];
    if tid == 0 {
        for s in 0..n {
            // SAFETY: this rank's own cursor.
            got[s as usize] = unsafe { cursor(h, 1, c, s).read() };
        }
    }
    let start = got;
    loop {
        if tid == 0 {
            let mut rows = [0u32; MAX_RANKS];
            let mut done = false;
            spin_until(budget, c"ep_dispatch (pipelined): waiting for a rank's rows", || {
                let mut progress = false;
                done = true;
                for s in 0..n as usize {
                    if end[s] == u64::MAX {
                        // SAFETY: this rank's done word of (c, s).
                        let v = unsafe { load_acquire(own(h, rr.dones, c, s as u32)) };
                        if (v >> 32) as u32 == tag {
                            end[s] = start[s] + v as u32 as u64;
                        }
                    }
                    // SAFETY: this rank's tail word of (c, s).
                    let tail = unsafe { load_acquire(own(h, rr.tails, c, s as u32)) };
                    rows[s] = (tail - got[s]) as u32;
                    progress |= rows[s] > 0;
                    done &= got[s] == end[s];
                }
                progress || done
            });
            for s in 0..n {
                pt.set(s, (got[s as usize], rows[s as usize], 0));
            }
            pt.set_ctl(done as u32);
        }
        sync_threads();
        if pt.ctl() == 1 {
            break;
        }
        // Every row that arrived, one warp each: rows, metadata, scales.
        let lane = tid % WARP;
        pt.for_each_row(n, (tid / WARP, nt / WARP), |s, j| {
            let i = h.ring_entry(c, s, pt.get(s).0 + j as u64);
            let meta = h.shared + rr.meta + i * meta_bytes;
            // SAFETY: word 0 of the entry: the destination row, written before the tail.
            let row = unsafe { (meta as *const u32).read() } as u64;
            if row >= h.max_recv_rows() {
                fail(c"ep_dispatch (pipelined): a ring entry names a row past the receive buffer");
            }
            let dst = h.local + sr.recv_x + row * recv_row;
            // SAFETY: the ring row and the local row (recv_row <= row_stride).
            unsafe { copy_vecs(h.shared + rr.rows + i * row_stride, dst, lane, (recv_row / 16) as u32, WARP) };
            let mut j = lane;
            while j < words {
                let to = if j < k {
                    sr.recv_idx + (row * k as u64 + j as u64) * 4
                } else if j < 2 * k {
                    sr.recv_w + (row * k as u64 + (j - k) as u64) * 4
                } else {
                    sr.recv_src + row * 4
                };
                // SAFETY: a metadata word of the entry and its place in the local buffer.
                unsafe { ((h.local + to) as *mut u32).write(((meta + meta_offset(h, k, j)) as *const u32).read()) };
                j += WARP;
            }
            let mut j = lane as u64;
            while j * 4 < scale_row {
                let from = meta + h.ring_meta_scales() + j * 4;
                // SAFETY: a word of the entry's scales and of the row's local scales.
                unsafe {
                    ((h.local + sr.recv_scales + row * scale_row + j * 4) as *mut u32)
                        .write((from as *const u32).read())
                };
                j += WARP as u64;
            }
        });
        sync_threads();
        if tid == 0 {
            for s in 0..n {
                let m = pt.get(s).1;
                if m > 0 {
                    got[s as usize] += m as u64;
                    let at = peers.at(s, h.ring_word(rr.heads, c, me));
                    // SAFETY: rank s's head word of (c, me), written only by this block.
                    // Partner: the sender's acquire before it overwrites the entries.
                    unsafe { store_release(at as *mut u64, got[s as usize]) };
                }
            }
        }
    }
    if tid == 0 {
        for s in 0..n {
            // SAFETY: this rank's own cursor.
            unsafe { cursor(h, 1, c, s).write(got[s as usize]) };
        }
    }
}

/// The pipelined combine: as [`crate::body::combine`] (same arguments, same bits), the rows
/// streaming back through the combine rings.
///
/// # Safety
/// As for [`crate::body::combine`] and [`dispatch`]; `h`'s slot holds a pipelined dispatch.
#[allow(clippy::too_many_arguments)]
pub unsafe fn combine<V: Element, P: Peers>(
    peers: P,
    h: EpHandle,
    y: GlobalPtr<u8>,
    y_bytes: u64,
    out: GlobalPtr<u8>,
    tokens: u32,
    row_bytes: u32,
    (wt, bias): (WeightsArgs, BiasArgs),
    budget: SpinBudget,
) {
    follow_previous_grid();
    let (n, b, tid) = (h.n_ranks, ctaid(), tid());
    let info = h.info as *const u32;
    let tb = Tables::new();
    // SAFETY: the kernel's handle (this function's contract).
    unsafe { peers.init(&h, tid) };
    if tid <= n {
        // SAFETY: offsets 0..=n of the info buffer.
        unsafe { tb.base.add(tid as usize).write(info.add((EpHandle::INFO_OFFSETS + tid) as usize).read()) };
    }
    sync_threads();
    // SAFETY: word 0 of the info buffer.
    let received = unsafe { info.read() } as u64;
    if received * row_bytes as u64 > y_bytes {
        fail(c"ep_combine: the expert-output buffer holds fewer rows than this rank received");
    }
    if wt.out != 0 && received * wt.k as u64 * 4 > wt.input_bytes {
        fail(c"ep_combine: the weights buffer holds fewer rows than this rank received");
    }
    let ch = h.channels();
    if b < ch {
        // SAFETY: forwarded.
        unsafe { combine_send(&peers, &h, &tb, (y, row_bytes, wt), budget) };
    } else if b < 2 * ch {
        // SAFETY: forwarded.
        unsafe { combine_receive::<V>(&peers, &h, b - ch, (out, tokens, row_bytes), (wt, bias), budget) };
    }
}

/// The first of rows `[a, b)` of the local sources whose token index is at least `v` (they
/// ascend).
///
/// # Safety
/// Rows below `b` of the slot's sources are written.
#[inline(always)]
unsafe fn lower_bound(src: *const i32, (mut a, mut b): (u32, u32), v: u32) -> u32 {
    while a < b {
        let mid = a + (b - a) / 2;
        // SAFETY: mid < b.
        if (unsafe { src.add(mid as usize).read() } as u32) < v {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    a
}

/// The sender of combine channel `ctaid()`.
///
/// # Safety
/// As for [`combine`]; `tb.base` holds the offsets by source.
unsafe fn combine_send(
    peers: &impl Peers,
    h: &EpHandle,
    tb: &Tables,
    (y, row_bytes, wt): (GlobalPtr<u8>, u32, WeightsArgs),
    budget: SpinBudget,
) {
    let (n, me, c) = (h.n_ranks, h.rank, ctaid());
    let (tid, nt) = (tid(), ntid());
    let rr = h.ring_regions();
    let sr = h.shared_regions();
    let ring = h.ring_rows as u64;
    let pt = PipeTable::new();
    let info = h.info as *const u32;
    let (k, row_stride) = (wt.k, h.max_row_bytes());
    let mut sent = [0u64; MAX_RANKS];
    let (mut cur, mut end) = ([0u32; MAX_RANKS], [0u32; MAX_RANKS]);
    if tid == 0 {
        let src = (h.local + sr.recv_src) as *const i32;
        for s in 0..n {
            // SAFETY: offsets s and s + 1, and rank s's token count, in the info buffer.
            let (a, bb, t) = unsafe {
                (
                    tb.base.add(s as usize).read(),
                    tb.base.add(s as usize + 1).read(),
                    info.add((h.info_tokens() + s) as usize).read(),
                )
            };
            let (lo, hi) = chan_range(t, c, h.channels());
            // SAFETY: rows below the received rows, whose sources the dispatch wrote.
            unsafe {
                cur[s as usize] = lower_bound(src, (a, bb), lo);
                end[s as usize] = lower_bound(src, (cur[s as usize], bb), hi);
                sent[s as usize] = cursor(h, 2, c, s).read();
            }
        }
    }
    loop {
        if tid == 0 {
            let mut amt = [0u32; MAX_RANKS];
            let mut done = false;
            spin_until(budget, c"ep_combine (pipelined): waiting for room in a rank's ring", || {
                let mut progress = false;
                done = true;
                for s in 0..n as usize {
                    if cur[s] < end[s] {
                        done = false;
                        // SAFETY: this rank's combine head word of (c, s).
                        let free = ring - (sent[s] - unsafe { load_acquire(own(h, rr.combine_heads, c, s as u32)) });
                        amt[s] = (end[s] - cur[s]).min(free as u32);
                        progress |= amt[s] > 0;
                    }
                }
                progress || done
            });
            for s in 0..n {
                let i = s as usize;
                pt.set(s, (sent[i], amt[i], cur[i]));
            }
            pt.set_ctl(done as u32);
        }
        sync_threads();
        if pt.ctl() == 1 {
            break;
        }
        let lane = tid % WARP;
        pt.for_each_row(n, (tid / WARP, nt / WARP), |s, r| {
            let (base, _, first) = pt.get(s);
            let row = (first + r) as u64;
            let i = h.ring_entry(c, me, base + r as u64);
            let dst = peers.at(s, rr.combine_rows + i * row_stride);
            // SAFETY: a received row's output (checked against y_bytes) and a ring row.
            unsafe { copy_vecs(y.addr() + row * row_bytes as u64, dst, lane, row_bytes / 16, WARP) };
            if wt.out != 0 {
                let mut j = lane;
                while j < k {
                    let at = peers.at(s, rr.combine_w + (i * h.max_topk as u64 + j as u64) * 4);
                    // SAFETY: a weight of the row (checked against input_bytes) and of the entry.
                    unsafe {
                        (at as *mut u32).write(((wt.input + (row * k as u64 + j as u64) * 4) as *const u32).read())
                    };
                    j += WARP;
                }
            }
        });
        sync_threads();
        if tid == 0 {
            for s in 0..n {
                let m = pt.get(s).1;
                if m > 0 {
                    let i = s as usize;
                    sent[i] += m as u64;
                    cur[i] += m;
                    let at = peers.at(s, h.ring_word(rr.combine_tails, c, me));
                    // SAFETY: rank s's combine tail word of (c, me), written only by this block.
                    unsafe { store_release(at as *mut u64, sent[i]) };
                }
            }
        }
    }
    if tid == 0 {
        for s in 0..n {
            // SAFETY: this rank's own cursor.
            unsafe { cursor(h, 2, c, s).write(sent[s as usize]) };
        }
    }
}

/// The receiver of combine channel `c`: this rank's tokens of the channel, summed.
///
/// # Safety
/// As for [`combine`].
unsafe fn combine_receive<V: Element>(
    peers: &impl Peers,
    h: &EpHandle,
    c: u32,
    (out, tokens, row_bytes): (GlobalPtr<u8>, u32, u32),
    (wt, bias): (WeightsArgs, BiasArgs),
    budget: SpinBudget,
) {
    let (n, me) = (h.n_ranks, h.rank);
    let (tid, nt) = (tid(), ntid());
    let rr = h.ring_regions();
    let ring = h.ring_rows as u64;
    let pt = PipeTable::new();
    let (lo, hi) = chan_range(tokens, c, h.channels());
    let batch = batch_tokens(nt, ring);
    let (k, row_stride, vecs) = (wt.k, h.max_row_bytes(), row_bytes / 16);
    let mut got = [0u64; MAX_RANKS];
    if tid == 0 {
        for d in 0..n {
            // SAFETY: this rank's own cursor.
            got[d as usize] = unsafe { cursor(h, 3, c, d).read() };
        }
    }
    let mut t0 = lo;
    while t0 < hi {
        let t1 = if hi - t0 > batch { t0 + batch } else { hi };
        if tid == 0 {
            // SAFETY: t0 <= t1 <= tokens (the channel's range).
            let (m, first) = unsafe { batch_rows(h, (t0, t1)) };
            spin_until(budget, c"ep_combine (pipelined): waiting for a rank's rows", || {
                (0..n as usize).all(|d| {
                    // SAFETY: this rank's combine tail word of (c, d).
                    m[d] == 0 || unsafe { load_acquire(own(h, rr.combine_tails, c, d as u32)) } >= got[d] + m[d] as u64
                })
            });
            for d in 0..n {
                pt.set(d, (got[d as usize], m[d as usize], first[d as usize]));
            }
        }
        sync_threads();
        let (lane, w) = (tid % WARP, tid / WARP);
        if w < t1 - t0 {
            let t = t0 + w;
            let mut mask = 0u32;
            let mut src = [0u64; MAX_RANKS];
            for d in 0..n {
                // SAFETY: t < tokens (the batch lies in the channel's range), d < n.
                let s = unsafe { send_index(h, t, d) };
                if s >= 0 {
                    let (base, _, first) = pt.get(d);
                    mask |= 1 << d;
                    src[d as usize] = h.ring_entry(c, d, base + (s as u32 - first) as u64);
                }
            }
            let dst = out.addr() + t as u64 * row_bytes as u64;
            let mut v = lane;
            while v < vecs {
                let mut acc = [0f32; 8];
                for &at in &bias.bias {
                    if at != 0 {
                        // SAFETY: vector v of token t's bias row.
                        accumulate::<V>(&mut acc, unsafe { ld_v4(vec_at(at + t as u64 * row_bytes as u64, v)) });
                    }
                }
                for d in 0..n {
                    if (mask >> d) & 1 == 1 {
                        let row = h.shared + rr.combine_rows + src[d as usize] * row_stride;
                        // SAFETY: vector v of a combine ring row, pushed before the tail waited for.
                        accumulate::<V>(&mut acc, unsafe { ld_v4(vec_at(row, v)) });
                    }
                }
                // SAFETY: vector v of token t's output row.
                unsafe { st_v4(vec_at(dst, v), pack::<V>(&acc)) };
                v += WARP;
            }
            let mut j = lane;
            while wt.out != 0 && j < k {
                let mut acc = 0f32;
                for d in 0..n {
                    if (mask >> d) & 1 == 1 {
                        let at = h.shared + rr.combine_w + (src[d as usize] * h.max_topk as u64 + j as u64) * 4;
                        // SAFETY: a weight of a combine ring entry.
                        acc += f32::from_bits(unsafe { (at as *const u32).read() });
                    }
                }
                // SAFETY: t < tokens, j < k: inside `wt.out`.
                unsafe { ((wt.out + (t as u64 * k as u64 + j as u64) * 4) as *mut u32).write(acc.to_bits()) };
                j += WARP;
            }
        }
        sync_threads();
        if tid == 0 {
            for d in 0..n {
                let m = pt.get(d).1;
                if m > 0 {
                    got[d as usize] += m as u64;
                    let at = peers.at(d, h.ring_word(rr.combine_heads, c, me));
                    // SAFETY: rank d's combine head word of (c, me), written only by this block.
                    unsafe { store_release(at as *mut u64, got[d as usize]) };
                }
            }
        }
        t0 = t1;
    }
    if tid == 0 {
        for d in 0..n {
            // SAFETY: this rank's own cursor.
            unsafe { cursor(h, 3, c, d).write(got[d as usize]) };
        }
    }
}
