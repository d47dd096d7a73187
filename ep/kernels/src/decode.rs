//! The bodies of the decode (low-latency) kernels, DeepEP's `low_latency_dispatch` and
//! `low_latency_combine`: the received rows grouped by local expert, the top-k weights applied
//! in the combine. Written against `crate::hw` and the helpers of `crate::body` (row copies,
//! count words, flags, the FP8 cast), so that the host crate's emulation test runs them on CPU
//! threads too. The buffer is described in `mscclpp_ep_device::decode`.
//!
//! * [`layout`]: every expert's token count and every (token, slot)'s position among this
//!   rank's tokens toward the slot's expert (token order; a token counts once per expert): a
//!   block per expert, a prefix sum over its threads.
//! * [`dispatch`]: publishes the counts in every rank's count slot, reads everybody's, then
//!   copies (or casts to FP8) every (token, expert) row straight into its place in the
//!   destination's expert-major buffer: `local expert * cap + rows of the ranks below + position`.
//! * [`combine`]: every received row's expert output goes back to its source's landing row of
//!   (token, slot); then every token sums `weight * output` over its slots, in slot order, in
//!   f32, rounded once.

use mscclpp_device::copy::Threads;
use mscclpp_device::element::Element;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;

use crate::body::{
    Tables, WARP, copy_vecs, fp8_group_scales, fp8_store_scale, fp8_vector, pack, pieces, read_id, vec_at,
    wait_at_least, wait_count,
};
use crate::hw::{
    ctaid, fail, follow_previous_grid, ld_v4, load_acquire, nctaid, ntid, shared_base, st_v4, store_release,
    sync_threads, tid,
};
use mscclpp_ep_device::*;

/// The first slot of the token whose ids start at entry `at` that names `id`, looking at slots
/// `0..=j` (`j` when no earlier slot does).
///
/// # Safety
/// `topk_idx` holds more than `at + j` entries of `idx_bytes` bytes.
#[inline(always)]
unsafe fn first_slot(topk_idx: GlobalPtr<u8>, idx_bytes: u32, at: usize, j: u32, id: i32, experts: u32) -> u32 {
    for i in 0..j {
        // SAFETY: entry at + i < at + j (caller's contract).
        if unsafe { read_id(topk_idx, idx_bytes, at + i as usize, experts) } == id {
            return i;
        }
    }
    j
}

/// The slot of token `t` (ids at `t * k`) that first names expert `e`, if one does.
///
/// # Safety
/// `topk_idx` holds `(t + 1) * k` entries of `idx_bytes` bytes.
#[inline(always)]
unsafe fn slot_of(topk_idx: GlobalPtr<u8>, idx_bytes: u32, (t, k): (u32, u32), e: u32, experts: u32) -> Option<u32> {
    // SAFETY: entries t * k + j < (t + 1) * k (caller's contract).
    (0..k).find(|&j| unsafe { read_id(topk_idx, idx_bytes, t as usize * k as usize + j as usize, experts) } == e as i32)
}

/// The decode layout of `tokens` tokens: for every expert (one block each, over the grid) the
/// number of tokens that name it in some slot, and at the first such slot `j` of every such
/// token `t`, `positions[t * k + j]`, the token's position among them (token order: each thread
/// counts a contiguous run of tokens, then a prefix sum over the threads). Dynamic shared memory
/// `ntid * 4` bytes.
///
/// # Safety
/// `topk_idx` holds `tokens * k` ids of `idx_bytes` bytes (4 or 8); `per_expert` `experts` u32;
/// `positions` `tokens * k` u32.
#[allow(clippy::too_many_arguments)]
pub unsafe fn layout(
    topk_idx: GlobalPtr<u8>,
    idx_bytes: u32,
    tokens: u32,
    k: u32,
    experts: u32,
    per_expert: GlobalPtr<u32>,
    positions: GlobalPtr<u32>,
) {
    follow_previous_grid();
    let (tid, p) = (tid(), ntid());
    let sh = shared_base().cast::<u32>();
    // SAFETY: this thread's cell, or another below p (launch contract: p cells).
    let cell = |th: u32| unsafe { sh.add(th as usize) };
    let per = tokens.div_ceil(p);
    let lo = (tid * per).min(tokens);
    let hi = (lo + per).min(tokens);
    // Every thread of the block takes the same experts: the barriers below are uniform.
    for e in Threads::new(ctaid(), nctaid()).stride(experts) {
        let mut own = 0;
        for t in lo..hi {
            // SAFETY: t < tokens.
            own += unsafe { slot_of(topk_idx, idx_bytes, (t, k), e, experts) }.is_some() as u32;
        }
        // SAFETY: this thread's cell.
        unsafe { cell(tid).write(own) };
        sync_threads();
        // Inclusive prefix over the threads (Hillis-Steele).
        let mut off = 1;
        while off < p {
            // SAFETY: tid - off < p.
            let add = if tid >= off { unsafe { cell(tid - off).read() } } else { 0 };
            sync_threads();
            // SAFETY: this thread's cell; every read of this step happened before the barrier.
            unsafe { cell(tid).write(cell(tid).read() + add) };
            sync_threads();
            off *= 2;
        }
        // SAFETY: this thread's cell.
        let mut next = unsafe { cell(tid).read() } - own;
        for t in lo..hi {
            // SAFETY: t < tokens; the position of slot j of token t is inside `positions`.
            unsafe {
                if let Some(j) = slot_of(topk_idx, idx_bytes, (t, k), e, experts) {
                    positions.as_ptr().add(t as usize * k as usize + j as usize).write(next);
                    next += 1;
                }
            }
        }
        if tid == p - 1 {
            // SAFETY: e < experts; the last thread's inclusive prefix is the total.
            unsafe { per_expert.as_ptr().add(e as usize).write(cell(tid).read()) };
        }
        // Every thread read its cell before the next expert overwrites them.
        sync_threads();
    }
}

/// Decode dispatch: every token of this rank (`tokens` rows of `row_bytes` at `x`, `k` expert
/// ids each) to each of its experts once, into the expert's rows on the rank that hosts it:
/// row `local expert * n * max_tokens + (tokens of the ranks below toward the expert) +
/// position`, so every local expert's rows are contiguous, by source rank, in token order
/// (DeepEP's `packed_recv_x`); with the token's index (`recv_src`) and its source rank and
/// slot (`recv_route`). Every rank writes its own rows per local expert (`recv_count`) and
/// every source's begin and count (`recv_range`). The decode layout kernel ran before on the
/// stream. `CAST`: bf16 rows cast to e4m3 on the way (`format`), one scale per 128 columns, as
/// `body::dispatch` casts them; the rows are then `hidden` bytes.
///
/// # Safety
/// Launched by `mscclpp_ep::LowLatency` on every rank with `h.blocks` blocks (resident at once),
/// `EXCHANGE_SHARED_BYTES` of dynamic shared memory and at least `MAX_RANKS` threads per block (a
/// multiple of 32); `h` describes a decode buffer (`h.shared`, `h.state` with `2 * h.blocks`
/// epochs); `x` and `topk_idx` hold the tokens' rows and ids (of `h.idx_bytes` bytes); `tokens
/// <= h.max_tokens`, `k <= h.max_topk`, `row_bytes` a multiple of 16 at most `4 * h.hidden`;
/// with `CAST`, the rows are bf16 (`row_bytes` is `2 * h.hidden`), `h.hidden` a multiple of 128.
#[allow(clippy::too_many_arguments)]
pub unsafe fn dispatch<const CAST: bool>(
    h: EpHandle,
    x: GlobalPtr<u8>,
    topk_idx: GlobalPtr<u8>,
    tokens: u32,
    k: u32,
    row_bytes: u32,
    (signature, format): (u32, u32),
    budget: SpinBudget,
) {
    follow_previous_grid();
    let (n, me) = (h.n_ranks, h.rank);
    let (b, nb, tid, nt) = (ctaid(), nctaid(), tid(), ntid());
    let dr = h.decode_regions();
    let (epr, cap, words) = (h.experts_per_rank(), h.decode_capacity(), h.decode_count_words());
    let state = h.state as *mut u64;
    // SAFETY: this block's dispatch epoch, written by its thread 0 at the end of the last one.
    let e = unsafe { state.add(b as usize).read() };
    let (tag, parity) = (count_tag(e), e & 1);
    let tb = Tables::new();
    if tid < n {
        // SAFETY: the peer table holds n addresses.
        unsafe { tb.peer.add(tid as usize).write((h.peers as *const u64).add(tid as usize).read()) };
    }
    sync_threads();

    // 1. Block 0 publishes this rank's signature and token count toward every expert in every
    // rank's slot `me` of this parity (release: after the layout kernel's writes).
    if b == 0 {
        let per_expert = (h.shared + dr.per_expert) as *const u32;
        for i in Threads::new(tid, nt).stride(n * words) {
            let (d, w) = (i / words, i % words);
            // SAFETY: the layout kernel wrote `experts` counts.
            let value = if w == 0 { signature } else { unsafe { per_expert.add(w as usize - 1).read() } };
            let at = tb.peer(d) + h.decode_count_word(parity, me, w);
            // SAFETY: rank d's count slot, written only by this rank's block 0. Partner: the
            // acquire in `wait_count` below on rank d.
            unsafe { store_release(at as *mut u64, pack_count(tag, value)) };
        }
    }
    // 2. Every block waits for every rank's words (each a token count toward one expert, at
    // most max_tokens: a token goes to an expert once).
    for i in Threads::new(tid, nt).stride(n * words) {
        let (s, w) = (i / words, i % words);
        // SAFETY: this rank's count slot s (written by rank s's block 0).
        let v = unsafe { wait_count(h.shared + h.decode_count_word(parity, s, w), tag, budget) };
        if w == 0 && v != signature {
            fail(c"ep_decode_dispatch: the ranks were called with different k, element types or received formats");
        }
        if w > 0 && v > h.max_tokens {
            fail(c"ep_decode_dispatch: a rank sends more tokens to one expert than max_tokens");
        }
    }
    sync_threads();
    // Rank s's tokens toward global expert `x` (its word carries this dispatch's tag: every word
    // was waited for above, and none is rewritten before every rank finished this dispatch).
    let count = |s: u32, x: u32| -> u32 {
        // SAFETY: this rank's count slot s, word 1 + x < 1 + experts.
        unsafe { load_acquire((h.shared + h.decode_count_word(parity, s, 1 + x)) as *const u64) as u32 }
    };
    if b == 0 {
        // What this rank receives: rows per local expert, every source's begin and count.
        for j in Threads::new(tid, nt).stride(epr) {
            let mut begin = 0u32;
            for s in 0..n {
                let c = count(s, me * epr + j);
                // SAFETY: inside recv_range ([epr][n] u64) and recv_count ([epr] u32).
                unsafe {
                    ((h.shared + dr.recv_range + (j * n + s) as u64 * 8) as *mut u64).write(pack_count(begin, c))
                };
                begin += c;
            }
            // SAFETY: as above.
            unsafe { ((h.shared + dr.recv_count + j as u64 * 4) as *mut u32).write(begin) };
        }
    }

    let positions = (h.shared + dr.positions) as *const u32;
    // Where slot j of token t goes: its expert's rank and row there; None when the slot names no
    // expert or an earlier slot of the token names the same one.
    let dest = |t: u32, j: u32| -> Option<(u32, u64)> {
        let at = t as usize * k as usize;
        // SAFETY: t < tokens, j < k.
        let id = unsafe { read_id(topk_idx, h.idx_bytes, at + j as usize, h.experts) };
        // SAFETY: as above.
        if !valid_expert(id, h.experts) || unsafe { first_slot(topk_idx, h.idx_bytes, at, j, id, h.experts) } != j {
            return None;
        }
        let d = rank_of_expert(id as u32, h.experts, n);
        let mut begin = 0u64;
        for s in 0..me {
            begin += count(s, id as u32) as u64;
        }
        // SAFETY: written by the layout kernel at the token's first slot naming the expert.
        let pos = unsafe { positions.add(at + j as usize).read() } as u64;
        // begin + pos < n * max_tokens: every count was checked against max_tokens.
        Some((d, (id as u32 - d * epr) as u64 * cap + begin + pos))
    };
    // The token index and the route (this rank, the slot) of received row `row` of rank d.
    let route = |d: u32, row: u64, t: u32, j: u32| {
        let base = tb.peer(d);
        // SAFETY: row < epr * cap: inside recv_src and recv_route.
        unsafe {
            ((base + dr.recv_src + row * 4) as *mut u32).write(t);
            ((base + dr.recv_route + row * 4) as *mut u32).write((me << 16) | j);
        }
    };

    // 3. The rows: one (token, slot), or a piece of its row when they are few, per warp.
    let lane = tid % WARP;
    let wpb = nt / WARP;
    let (gw, nw) = (b * wpb + tid / WARP, nb * wpb);
    let vecs = row_bytes / 16;
    let units = tokens * k;
    let per = pieces(nw, units, vecs);
    let mut u = gw;
    // units * per <= max(units, nw): no overflow. (FP8 casts its rows below.)
    while !CAST && u < units * per {
        let (p, piece) = (u / per, u % per);
        let (t, j) = (p / k, p % k);
        if let Some((d, row)) = dest(t, j) {
            let (v0, v1) = (
                (vecs as u64 * piece as u64 / per as u64) as u32,
                (vecs as u64 * (piece as u64 + 1) / per as u64) as u32,
            );
            let src = x.addr() + t as u64 * row_bytes as u64;
            let dst = tb.peer(d) + dr.recv_x + row * row_bytes as u64;
            // SAFETY: vectors below v1 <= vecs of token t's row and of the destination row.
            unsafe { copy_vecs(src, dst, v0 + lane, v1, WARP) };
            if piece == 0 && lane == 0 {
                route(d, row, t, j);
            }
        }
        u += nw;
    }
    if CAST {
        // FP8: one (token, 128 columns) per thread, cast for each of the token's experts.
        let (g, gn) = (b * nt + tid, nb * nt);
        let groups = h.scales_per_row();
        let (pow2, ue8m0) = (format != FORMAT_E4M3, format == FORMAT_E4M3_UE8M0);
        let scale_row = scale_row_bytes(format, groups) as u64;
        for u in Threads::new(g, gn).stride(tokens as u64 * groups as u64) {
            let (t, grp) = ((u / groups as u64) as u32, (u % groups as u64) as u32);
            let src = x.addr() + t as u64 * row_bytes as u64 + grp as u64 * (FP8_GROUP as u64 * 2);
            let mut scales = None;
            for j in 0..k {
                let Some((d, row)) = dest(t, j) else { continue };
                // SAFETY: this group of token t's row.
                let (mul, scale) = *scales.get_or_insert_with(|| unsafe { fp8_group_scales(src, pow2) });
                let at = tb.peer(d) + dr.recv_scales + row * scale_row;
                // SAFETY: the scales of a received row (row < epr * cap).
                unsafe { fp8_store_scale(at, (grp, groups, scale_row), scale, ue8m0) };
                let dst = tb.peer(d) + dr.recv_x + row * h.hidden as u64 + grp as u64 * FP8_GROUP as u64;
                for v in 0..8 {
                    // SAFETY: vectors 2v, 2v + 1 of the group; vector v of the group's 128 bytes
                    // of a received row (16-aligned: hidden a multiple of 128).
                    unsafe {
                        let (lo, hi) = (ld_v4(vec_at(src, 2 * v)), ld_v4(vec_at(src, 2 * v + 1)));
                        st_v4(vec_at(dst, v), fp8_vector(lo, hi, mul));
                    }
                }
            }
        }
        for p in Threads::new(g, gn).stride(units) {
            if let Some((d, row)) = dest(p / k, p % k) {
                route(d, row, p / k, p % k);
            }
        }
    }
    sync_threads();

    // 4. Tell every rank this block's rows are there; wait for every block of every rank (the
    // grid's threads share the flags; the rows are read by later kernels).
    if tid < n {
        // SAFETY: rank tid's flag (me, b), written only by this block.
        unsafe { store_release((tb.peer(tid) + h.decode_dispatch_flag(me, b)) as *mut u64, e) };
    }
    for g in Threads::new(b * nt + tid, nb * nt).stride(n * nb) {
        // SAFETY: this rank's flag (g / nb, g % nb).
        unsafe {
            wait_at_least(
                h.shared + h.decode_dispatch_flag(g / nb, g % nb),
                e,
                budget,
                c"ep_decode_dispatch: waiting for a rank's rows",
            )
        };
    }
    sync_threads();
    if tid == 0 {
        // SAFETY: this block's epoch; every thread read it before the barriers above.
        unsafe { state.add(b as usize).write(e + 1) };
    }
}

/// Adds `w` times the lanes of the 16-byte vector `v` of `V` to the accumulators (f32: the
/// product rounded, then the sum).
#[inline(always)]
fn accumulate_weighted<V: Element>(acc: &mut [f32; 8], w: f32, v: [u32; 4]) {
    let v: V = bytemuck::cast(v);
    for (i, a) in acc.iter_mut().enumerate().take(V::LANES) {
        *a += w * v.lane_f32(i);
    }
}

/// Decode combine: the expert outputs `y` (the dispatch's expert-major layout: row `local
/// expert * n * max_tokens + i`, `row_bytes` each) go back to their source ranks' landing rows
/// of (token, slot); then every token `t` of this rank gets `sum over its slots j, in slot order,
/// of topk_w[t][j] * output(t, j)` in f32 from 0, rounded once (slots naming no expert add
/// nothing; a slot naming the expert of an earlier slot reads that slot's output). `topk_idx`
/// must be the ids the last dispatch was given.
///
/// # Safety
/// As for [`dispatch`]; the last decode operation on this buffer was a dispatch with the same
/// `tokens`, `k` and ids; `y` holds `h.experts_per_rank() * n * max_tokens` rows of `row_bytes`,
/// `topk_w` `tokens * k` f32 and `out` `tokens * row_bytes`; every rank passes the same
/// `row_bytes`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn combine<V: Element>(
    h: EpHandle,
    y: GlobalPtr<u8>,
    (topk_idx, topk_w): (GlobalPtr<u8>, GlobalPtr<u32>),
    out: GlobalPtr<u8>,
    tokens: u32,
    k: u32,
    row_bytes: u32,
    budget: SpinBudget,
) {
    follow_previous_grid();
    let (n, me) = (h.n_ranks, h.rank);
    let (b, nb, tid, nt) = (ctaid(), nctaid(), tid(), ntid());
    let dr = h.decode_regions();
    let (epr, cap) = (h.experts_per_rank(), h.decode_capacity());
    // SAFETY: the combine epochs follow the dispatch epochs.
    let state = unsafe { (h.state as *mut u64).add(h.blocks as usize + b as usize) };
    // SAFETY: this block's combine epoch.
    let e = unsafe { state.read() };
    let tb = Tables::new();
    if tid < n {
        // SAFETY: the peer table holds n addresses.
        unsafe { tb.peer.add(tid as usize).write((h.peers as *const u64).add(tid as usize).read()) };
    }
    sync_threads();
    let lane = tid % WARP;
    let wpb = nt / WARP;
    let (gw, nw) = (b * wpb + tid / WARP, nb * wpb);
    let vecs = row_bytes / 16;
    let landing = |t: u64, j: u64| h.max_topk as u64 * t + j;

    // 1. Every received row's output to its source's landing row (token, slot), this rank's
    // own included (one warp per row, or per piece of a row).
    for j in 0..epr {
        // SAFETY: written by this rank's last dispatch (an earlier kernel).
        let rows = unsafe { ((h.shared + dr.recv_count) as *const u32).add(j as usize).read() };
        if rows as u64 > cap {
            fail(c"ep_decode_combine: an expert received more rows than the buffer holds");
        }
        let per = pieces(nw, rows, vecs);
        for u in Threads::new(gw, nw).stride(rows * per) {
            let (i, piece) = (u / per, u % per);
            let row = j as u64 * cap + i as u64;
            // SAFETY: row < epr * cap: inside recv_src and recv_route.
            let (t, r) = unsafe {
                (
                    ((h.shared + dr.recv_src + row * 4) as *const u32).read(),
                    ((h.shared + dr.recv_route + row * 4) as *const u32).read(),
                )
            };
            let (s, slot) = (r >> 16, r & 0xffff);
            if s >= n || slot >= h.max_topk || t >= h.max_tokens {
                fail(c"ep_decode_combine: a received row names no (rank, token, slot)");
            }
            let (v0, v1) = (
                (vecs as u64 * piece as u64 / per as u64) as u32,
                (vecs as u64 * (piece as u64 + 1) / per as u64) as u32,
            );
            let src = y.addr() + row * row_bytes as u64;
            let dst = tb.peer(s) + dr.landing + landing(t as u64, slot as u64) * row_bytes as u64;
            // SAFETY: vectors of row `row` of `y` (it holds epr * cap rows) and of a landing row
            // (t < max_tokens, slot < max_topk, row_bytes <= 4 * hidden).
            unsafe { copy_vecs(src, dst, v0 + lane, v1, WARP) };
        }
    }
    sync_threads();
    // 2. Signal every rank, then wait for every block of every rank: this block reads what all
    // of them wrote.
    if tid < n {
        // SAFETY: rank tid's combine flag (me, b), written only by this block.
        unsafe { store_release((tb.peer(tid) + h.decode_combine_flag(me, b)) as *mut u64, e) };
    }
    for g in Threads::new(tid, nt).stride(n * nb) {
        // SAFETY: this rank's combine flag (g / nb, g % nb).
        unsafe {
            wait_at_least(
                h.shared + h.decode_combine_flag(g / nb, g % nb),
                e,
                budget,
                c"ep_decode_combine: waiting for a rank's rows",
            )
        };
    }
    sync_threads();

    // 3. Every token's weighted sum over its slots, in slot order (f32), rounded once: tokens
    // (or pieces of them) one warp each.
    let per = pieces(nw, tokens, vecs);
    for u in Threads::new(gw, nw).stride(tokens * per) {
        let (t, piece) = (u / per, u % per);
        let (v0, v1) =
            ((vecs as u64 * piece as u64 / per as u64) as u32, (vecs as u64 * (piece as u64 + 1) / per as u64) as u32);
        let at = t as usize * k as usize;
        let dst = out.addr() + t as u64 * row_bytes as u64;
        let mut v = v0 + lane;
        while v < v1 {
            let mut acc = [0f32; 8];
            for j in 0..k {
                // SAFETY: t < tokens, j < k.
                let id = unsafe { read_id(topk_idx, h.idx_bytes, at + j as usize, h.experts) };
                if !valid_expert(id, h.experts) {
                    continue;
                }
                // SAFETY: as above.
                let (j0, w) = unsafe {
                    (
                        first_slot(topk_idx, h.idx_bytes, at, j, id, h.experts),
                        f32::from_bits(topk_w.as_ptr().add(at + j as usize).read()),
                    )
                };
                let src = h.shared + dr.landing + landing(t as u64, j0 as u64) * row_bytes as u64;
                // SAFETY: vector v < vecs of a landing row, written before the flags waited for.
                accumulate_weighted::<V>(&mut acc, w, unsafe { ld_v4(vec_at(src, v)) });
            }
            // SAFETY: vector v of token t's output row.
            unsafe { st_v4(vec_at(dst, v), pack::<V>(&acc)) };
            v += WARP;
        }
    }
    sync_threads();
    if tid == 0 {
        // SAFETY: this block's combine epoch; read by every thread before the barriers.
        unsafe { state.write(e + 1) };
    }
}
