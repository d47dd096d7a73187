//! The bodies of the kernels, written against `crate::hw` (the device operations) and
//! `mscclpp_ep_device` (the layouts): the kernel crate's entry points call them on the GPU, and the
//! host crate's emulation test runs them on CPU threads. See the crate documentation.

use core::ops::{Add, Mul};

use mscclpp_device::copy::Threads;
use mscclpp_device::element::Element;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;

use crate::hw::{
    ctaid, fail, follow_previous_grid, ld_v4, load_acquire, nctaid, ntid, red_add_cta, shared_base, spin_until, st_v4,
    store_release, sync_threads, tid,
};
use mscclpp_ep_device::*;

pub(crate) const WARP: u32 = 32;

/// Top-k entry `i` of `topk_idx`: an i32, or an i64 when `idx_bytes` is 8 (read as
/// [`id_from_i64`] says: -1 unless it names an expert).
///
/// # Safety
/// `topk_idx` holds more than `i` entries of `idx_bytes` bytes, aligned.
#[inline(always)]
pub(crate) unsafe fn read_id(topk_idx: GlobalPtr<u8>, idx_bytes: u32, i: usize, experts: u32) -> i32 {
    // SAFETY: entry i of the buffer (caller's contract).
    unsafe {
        if idx_bytes == 8 {
            id_from_i64((topk_idx.addr() as *const i64).add(i).read(), experts)
        } else {
            (topk_idx.addr() as *const i32).add(i).read()
        }
    }
}

/// The rank mask of token `t`: bit r set when one of its `k` experts lives on rank r.
///
/// # Safety
/// `topk_idx` holds `(t + 1) * k` entries of `idx_bytes` bytes.
#[inline(always)]
unsafe fn token_mask(topk_idx: GlobalPtr<u8>, idx_bytes: u32, t: u32, k: u32, experts: u32, ranks: u32) -> u32 {
    let mut mask = 0u32;
    for j in 0..k {
        // SAFETY: entry t * k + j < (t + 1) * k (caller's contract).
        let id = unsafe { read_id(topk_idx, idx_bytes, t as usize * k as usize + j as usize, experts) };
        if valid_expert(id, experts) {
            mask |= 1 << rank_of_expert(id as u32, experts, ranks);
        }
    }
    mask
}

/// The dispatch layout of `tokens` tokens (see the crate documentation). One block; dynamic
/// shared memory `(ranks * ntid + experts) * 4` bytes.
///
/// # Safety
/// `topk_idx` holds `tokens * k` i32 (`idx_bytes` 4) or i64 (`idx_bytes` 8); `per_rank` `ranks`
/// u32, `per_expert` `experts` u32, `in_rank` `tokens * ranks` bytes, `send_index` `tokens *
/// ranks` i32; `1 <= ranks <= MAX_RANKS`, `experts` a positive multiple of `ranks`; one block.
#[allow(clippy::too_many_arguments)]
pub unsafe fn layout(
    topk_idx: GlobalPtr<u8>,
    idx_bytes: u32,
    tokens: u32,
    k: u32,
    experts: u32,
    ranks: u32,
    per_rank: GlobalPtr<u32>,
    per_expert: GlobalPtr<u32>,
    in_rank: GlobalPtr<u8>,
    send_index: GlobalPtr<i32>,
) {
    follow_previous_grid();
    let tid = tid();
    let p = ntid();
    // [rank][thread] counts (then their inclusive prefix over threads), then [expert] counts.
    let sh: *mut u32 = shared_base().cast::<u32>();
    let cell = |r: usize, th: u32| -> *mut u32 {
        // SAFETY: r < ranks and th < p: inside the first region.
        unsafe { sh.add(r * p as usize + th as usize) }
    };
    // SAFETY: the expert region follows the `ranks * p` counts (launch contract).
    let ex = unsafe { sh.add(ranks as usize * p as usize) };
    for e in Threads::new(tid, p).stride(experts) {
        // SAFETY: e < experts.
        unsafe { ex.add(e as usize).write(0) };
    }
    // Thread `tid` owns the tokens [lo, hi): consecutive runs in thread order, so a prefix over
    // threads is a prefix in token order.
    let per = tokens.div_ceil(p);
    let lo = (tid * per).min(tokens);
    let hi = (lo + per).min(tokens);
    sync_threads(); // the expert counters are zero
    let mut own = [0u32; MAX_RANKS];
    for t in lo..hi {
        let mut mask = 0u32;
        for j in 0..k {
            // SAFETY: t < tokens, j < k.
            let id = unsafe { read_id(topk_idx, idx_bytes, t as usize * k as usize + j as usize, experts) };
            if valid_expert(id, experts) {
                mask |= 1 << rank_of_expert(id as u32, experts, ranks);
                // SAFETY: id < experts; shared-memory counter of this block.
                unsafe { red_add_cta(ex.add(id as usize), 1) };
            }
        }
        for (r, c) in own.iter_mut().enumerate() {
            *c += (mask >> r) & 1;
        }
    }
    for (r, &c) in own.iter().enumerate() {
        if (r as u32) < ranks {
            // SAFETY: this thread's own cell.
            unsafe { cell(r, tid).write(c) };
        }
    }
    sync_threads();
    // Inclusive prefix over threads (Hillis-Steele), every rank at once.
    let mut off = 1;
    while off < p {
        let mut add = [0u32; MAX_RANKS];
        if tid >= off {
            for (r, a) in add.iter_mut().enumerate() {
                if (r as u32) < ranks {
                    // SAFETY: tid - off < p.
                    *a = unsafe { cell(r, tid - off).read() };
                }
            }
        }
        sync_threads();
        for (r, &a) in add.iter().enumerate() {
            if (r as u32) < ranks {
                // SAFETY: this thread's own cell; every read of this step happened before the barrier.
                unsafe { cell(r, tid).write(cell(r, tid).read() + a) };
            }
        }
        sync_threads();
        off *= 2;
    }
    let mut next = [0u32; MAX_RANKS];
    for (r, nx) in next.iter_mut().enumerate() {
        if (r as u32) < ranks {
            // SAFETY: this thread's own cell.
            *nx = unsafe { cell(r, tid).read() } - own[r];
        }
    }
    for t in lo..hi {
        // SAFETY: t < tokens.
        let mask = unsafe { token_mask(topk_idx, idx_bytes, t, k, experts, ranks) };
        for (r, nx) in next.iter_mut().enumerate() {
            if (r as u32) < ranks {
                let i = t as usize * ranks as usize + r;
                let hit = (mask >> r) & 1 == 1;
                // SAFETY: i < tokens * ranks.
                unsafe {
                    in_rank.as_ptr().add(i).write(hit as u8);
                    send_index.as_ptr().add(i).write(if hit { *nx as i32 } else { -1 });
                }
                if hit {
                    *nx += 1;
                }
            }
        }
    }
    if tid < ranks {
        // SAFETY: the last thread's inclusive prefix is the total; tid < ranks.
        unsafe { per_rank.as_ptr().add(tid as usize).write(cell(tid as usize, p - 1).read()) };
    }
    for e in Threads::new(tid, p).stride(experts) {
        // SAFETY: e < experts; every count was added before the barriers above.
        unsafe { per_expert.as_ptr().add(e as usize).write(ex.add(e as usize).read()) };
    }
}

const TABLE_BASE: usize = MAX_RANKS * 8;
const TABLE_CNT: usize = TABLE_BASE + (MAX_RANKS + 4) * 4;
const _: () = assert!(TABLE_CNT + MAX_RANKS * (MAX_RANKS + 1) * 4 <= EXCHANGE_SHARED_BYTES as usize);

/// The per-block tables of dispatch and combine in dynamic shared memory: every rank's shared
/// buffer (`MAX_RANKS` u64: [`PeerTable`]'s, also read here by the decode kernels),
/// `MAX_RANKS + 1` row bases or offsets (u32), and the count matrix (`[sender][1 + rank]` u32;
/// combine uses its first `n` entries).
pub(crate) struct Tables {
    pub(crate) peer: *mut u64,
    pub(crate) base: *mut u32,
    pub(crate) cnt: *mut u32,
}

impl Tables {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        let at = shared_base();
        // SAFETY: offsets inside EXCHANGE_SHARED_BYTES (asserted above).
        unsafe {
            Self {
                peer: at.cast::<u64>(),
                base: at.add(TABLE_BASE).cast::<u32>(),
                cnt: at.add(TABLE_CNT).cast::<u32>(),
            }
        }
    }
    /// Rank `r`'s shared buffer as mapped here.
    #[inline(always)]
    pub(crate) fn peer(&self, r: u32) -> u64 {
        // SAFETY: r < n_ranks <= MAX_RANKS, filled before the first barrier.
        unsafe { self.peer.add(r as usize).read() }
    }
}

/// Which operation a rank tells another that its rows are there ([`Peers::arrive`]); its value is
/// the window signal slot it uses.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    /// The dispatch's rows, ids, weights and sources.
    Dispatch = 0,
    /// The combine's rows pushed back (and their weights).
    Combine = 1,
}

/// How dispatch and combine reach the other ranks' shared buffers and tell them that their rows
/// are there: [`PeerTable`] (a table of mapped addresses and one flag per (sender, block), the
/// `ep_dispatch` and `ep_combine_*` kernels) or a symmetric window and its signals
/// (`crate::window::WindowPeers`, the `ep_dispatch_window*` and `ep_combine_window_*` kernels).
/// Both move the same bytes to the same places.
pub trait Peers {
    /// Called by every thread of the block before the kernel's first block barrier.
    ///
    /// # Safety
    /// `h` is the kernel's handle, built by the host (its table of peers is read here).
    unsafe fn init(&self, h: &EpHandle, tid: u32);
    /// Address of byte `offset` of rank `r`'s shared buffer, as mapped here (a rank at or past
    /// the team's size names a rank of it instead: the address is only computed, never read).
    fn at(&self, r: u32, offset: u64) -> u64;
    /// Tells rank `to` that this rank's block `b` has written its rows of `phase` (epoch `e`), with
    /// release at system scope. One thread per destination, after the block barrier that follows
    /// the block's writes.
    ///
    /// # Safety
    /// `h` is the kernel's handle; `to < h.n_ranks`, `b` this block.
    unsafe fn arrive(&self, h: &EpHandle, phase: Phase, to: u32, b: u32, e: u64);
    /// Waits, sharing the work among the `threads` (this one, of how many) that call it, until every block of
    /// every rank (of every other rank for [`Phase::Combine`]) has arrived here for epoch `e`
    /// (acquire). A block barrier after it orders the block's later reads.
    ///
    /// # Safety
    /// As for [`Peers::arrive`].
    unsafe fn wait(&self, h: &EpHandle, phase: Phase, threads: (u32, u32), e: u64, budget: SpinBudget);
}

/// The kernel name of `phase` in a wait's message.
const fn waiting(phase: Phase) -> &'static core::ffi::CStr {
    match phase {
        Phase::Dispatch => c"ep_dispatch: waiting for a rank's rows",
        Phase::Combine => c"ep_combine: waiting for a rank's rows",
    }
}

/// Every rank's shared buffer from the handle's table of addresses (`h.peers`), copied into the
/// block's shared memory, and one flag per (sender, block) that stores the epoch: the
/// `ep_dispatch` and `ep_combine_*` kernels.
#[derive(Clone, Copy)]
pub struct PeerTable(*mut u64);

impl PeerTable {
    /// The table at the start of the block's dynamic shared memory ([`EXCHANGE_SHARED_BYTES`]).
    ///
    /// # Safety
    /// The kernel was launched with at least [`EXCHANGE_SHARED_BYTES`] of dynamic shared memory.
    #[inline(always)]
    pub unsafe fn in_block() -> Self {
        Self(shared_base().cast::<u64>())
    }
}

impl Peers for PeerTable {
    #[inline(always)]
    unsafe fn init(&self, h: &EpHandle, tid: u32) {
        if tid < h.n_ranks {
            // SAFETY: the handle's table holds n addresses; the block's table MAX_RANKS.
            unsafe { self.0.add(tid as usize).write((h.peers as *const u64).add(tid as usize).read()) };
        }
    }
    #[inline(always)]
    fn at(&self, r: u32, offset: u64) -> u64 {
        const { assert!(MAX_RANKS.is_power_of_two()) };
        // SAFETY: the index is below MAX_RANKS whatever `r` is: inside the block's table
        // (`in_block`'s contract), filled before the first barrier for every r < n_ranks.
        unsafe { self.0.add(r as usize & (MAX_RANKS - 1)).read() + offset }
    }
    #[inline(always)]
    unsafe fn arrive(&self, h: &EpHandle, phase: Phase, to: u32, b: u32, e: u64) {
        let flag = match phase {
            Phase::Dispatch => h.dispatch_flag(h.rank, b),
            Phase::Combine => h.combine_flag(h.rank, b),
        };
        // SAFETY: rank `to`'s flag (rank, b) of `phase`, written only by this block. Partner: the
        // waits of rank `to`.
        unsafe { store_release(self.at(to, flag) as *mut u64, e) };
    }
    #[inline(always)]
    unsafe fn wait(&self, h: &EpHandle, phase: Phase, (g, gn): (u32, u32), e: u64, budget: SpinBudget) {
        let nb = nctaid();
        for j in Threads::new(g, gn).stride(h.n_ranks * nb) {
            let (s, blk) = (j / nb, j % nb);
            let flag = match phase {
                Phase::Dispatch => h.dispatch_flag(s, blk),
                Phase::Combine if s == h.rank => continue,
                Phase::Combine => h.combine_flag(s, blk),
            };
            // SAFETY: this rank's flag (s, blk) of `phase`.
            unsafe { wait_at_least(h.shared + flag, e, budget, waiting(phase)) };
        }
    }
}

/// Waits until the u64 at `p` reaches `target` (acquire, system scope).
///
/// # Safety
/// `p` valid and 8-aligned.
#[inline(always)]
pub(crate) unsafe fn wait_at_least(p: u64, target: u64, budget: SpinBudget, name: &'static core::ffi::CStr) {
    // SAFETY: forwarded. Partner: a sender's release store of its epoch.
    spin_until(budget, name, || unsafe { load_acquire(p as *const u64) } >= target);
}

/// Waits until the count word at `p` carries `tag` and returns its value (acquire).
///
/// # Safety
/// `p` valid and 8-aligned.
#[inline(always)]
pub(crate) unsafe fn wait_count(p: u64, tag: u32, budget: SpinBudget) -> u32 {
    let mut v = 0u64;
    spin_until(budget, c"ep_dispatch: waiting for a rank's token counts", || {
        // SAFETY: forwarded. Partner: the sender's release store in `ep_dispatch`.
        v = unsafe { load_acquire(p as *const u64) };
        (v >> 32) as u32 == tag
    });
    v as u32
}

/// Into how many pieces each token's row of `vecs` 16-byte vectors is cut so that `warps` warps
/// all have work when there are few tokens (a decoding batch): 1 when the tokens outnumber the
/// warps, at most one piece per vector.
pub const fn pieces(warps: u32, tokens: u32, vecs: u32) -> u32 {
    if tokens == 0 || vecs == 0 {
        return 1;
    }
    let p = warps / tokens;
    if p < 1 {
        1
    } else if p > vecs {
        vecs
    } else {
        p
    }
}

/// Address of 16-byte vector `v` of the row at `row`.
#[inline(always)]
pub(crate) fn vec_at(row: u64, v: u32) -> *mut u32 {
    (row + v as u64 * 16) as *mut u32
}

/// Copies the 16-byte vectors `v, v + step, ..` below `end` from `src` to `dst`, four loads in
/// flight. The index type is the caller's (u32 where it fits, so the loop counts in 32 bits).
///
/// # Safety
/// Every vector copied lies in both ranges, which are 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn copy_vecs<I>(src: u64, dst: u64, mut v: I, end: I, step: I)
where
    I: Copy + PartialOrd + Add<Output = I> + Mul<Output = I> + From<u8> + Into<u64>,
{
    let at = |base: u64, v: I| (base + v.into() * 16) as *mut u32;
    let [two, three, four] = [2, 3, 4].map(I::from);
    while v + three * step < end {
        // SAFETY: vectors v .. v + 3 * step lie below end (loop condition).
        unsafe {
            let a = ld_v4(at(src, v));
            let b = ld_v4(at(src, v + step));
            let c = ld_v4(at(src, v + two * step));
            let d = ld_v4(at(src, v + three * step));
            st_v4(at(dst, v), a);
            st_v4(at(dst, v + step), b);
            st_v4(at(dst, v + two * step), c);
            st_v4(at(dst, v + three * step), d);
        }
        v = v + four * step;
    }
    while v < end {
        // SAFETY: as above, one vector.
        unsafe { st_v4(at(dst, v), ld_v4(at(src, v))) };
        v = v + step;
    }
}

/// |x| of the f32 whose bits are `bits` (a bf16 widened: its 16 bits in the high half).
#[inline(always)]
fn bf16_abs(bits: u32) -> f32 {
    f32::from_bits(bits & 0x7fff_ffff)
}

/// The multiplier and the stored scale of the 128 bf16 at `src` (16 vectors): their largest
/// magnitude, at least [`FP8_MARGIN`], through [`e4m3_scales`].
///
/// # Safety
/// `src` holds 256 bytes, 16-aligned.
#[inline(always)]
pub(crate) unsafe fn fp8_group_scales(src: u64, pow2: bool) -> (f32, f32) {
    let mut amax = FP8_MARGIN;
    // The larger magnitude of a word's two bf16.
    let m = |w: u32| bf16_abs(w << 16).max(bf16_abs(w & 0xffff_0000));
    for v in 0..16 {
        // SAFETY: vector v of the group (caller's contract).
        let a = unsafe { ld_v4(vec_at(src, v)) };
        amax = amax.max(m(a[0])).max(m(a[1])).max(m(a[2])).max(m(a[3]));
    }
    e4m3_scales(amax, pow2)
}

/// 16 bf16 (two vectors, `lo` then `hi`) times `mul` as one vector of 16 e4m3: two words of 2
/// bf16 each (low half first) make one of 4 e4m3 (low byte first).
#[inline(always)]
pub(crate) fn fp8_vector(lo: [u32; 4], hi: [u32; 4], mul: f32) -> [u32; 4] {
    let q = |bits: u32| e4m3_from_f32(f32::from_bits(bits) * mul) as u32;
    let pack = |a: u32, b: u32| q(a << 16) | q(a & 0xffff_0000) << 8 | q(b << 16) << 16 | q(b & 0xffff_0000) << 24;
    [pack(lo[0], lo[1]), pack(lo[2], lo[3]), pack(hi[0], hi[1]), pack(hi[2], hi[3])]
}

/// Stores `scale`, group `grp` of `groups`, into the scales of a received row at `at`
/// (`scale_row` bytes): an f32, or with `ue8m0` its exponent byte (the last group zeroes the
/// padding of the row's last word).
///
/// # Safety
/// `at` holds `scale_row` bytes ([`scale_row_bytes`] of the format and `groups`), 4-aligned.
#[inline(always)]
pub(crate) unsafe fn fp8_store_scale(at: u64, (grp, groups, scale_row): (u32, u32, u64), scale: f32, ue8m0: bool) {
    // SAFETY: inside the row's scales (caller's contract): at most 4 bytes per group.
    unsafe {
        if !ue8m0 {
            ((at + grp as u64 * 4) as *mut u32).write(scale.to_bits());
        } else {
            ((at + grp as u64) as *mut u8).write((scale.to_bits() >> 23) as u8);
            if grp + 1 == groups {
                for p in groups as u64..scale_row {
                    ((at + p) as *mut u8).write(0);
                }
            }
        }
    }
}

/// Word `j` of token `t`'s `2k + 1` words for destination rank `d`: id `j` (local or global),
/// weight `j - k` (0 where the local id is -1), or the source index (`j == 2k`).
///
/// # Safety
/// `t` below the tokens of `topk_idx` and `topk_w` (ids of `h.idx_bytes` bytes), `j < 2k + 1`.
#[inline(always)]
pub(crate) unsafe fn meta_value(
    h: &EpHandle,
    (topk_idx, topk_w): (GlobalPtr<u8>, GlobalPtr<u32>),
    (t, k, j): (u32, u32, u32),
    d: u32,
) -> u32 {
    let at = t as usize * k as usize;
    // SAFETY: entries of token t (caller's contract).
    unsafe {
        if j < k {
            let id = read_id(topk_idx, h.idx_bytes, at + j as usize, h.experts);
            (if h.global_ids != 0 { id } else { local_expert(id, d, h.experts, h.n_ranks) }) as u32
        } else if j < 2 * k {
            let slot = at + (j - k) as usize;
            let elsewhere = h.global_ids == 0
                && local_expert(read_id(topk_idx, h.idx_bytes, slot, h.experts), d, h.experts, h.n_ranks) < 0;
            // Zero (+0.0) for the slots whose local id is -1, as DeepEP gives them.
            if elsewhere { 0 } else { topk_w.as_ptr().add(slot).read() }
        } else {
            t
        }
    }
}

/// Word `j` of token `t`'s `2k + 1` words for destination rank `d` (whose shared buffer is at
/// `base`, its regions at `sr`), received as row `row` ([`meta_value`]).
///
/// # Safety
/// `t` below the tokens of `topk_idx` and `topk_w` (ids of `h.idx_bytes` bytes), `j < 2k + 1`,
/// `k <= h.max_topk`, `d < h.n_ranks`, `row < h.max_recv_rows()`.
#[inline(always)]
unsafe fn write_meta(
    (h, sr): (&EpHandle, &SharedRegions),
    ids: (GlobalPtr<u8>, GlobalPtr<u32>),
    (t, k, j): (u32, u32, u32),
    (d, base, row): (u32, u64, u64),
) {
    let addr = if j < k {
        base + sr.recv_idx + (row * k as u64 + j as u64) * 4
    } else if j < 2 * k {
        base + sr.recv_w + (row * k as u64 + (j - k) as u64) * 4
    } else {
        base + sr.recv_src + row * 4
    };
    // SAFETY: the word of token t (caller's contract); the destination inside the regions (row
    // below n * max_tokens, slot below k <= max_topk).
    unsafe { (addr as *mut u32).write(meta_value(h, ids, (t, k, j), d)) };
}

/// Steps 1 and 2 of a dispatch: block 0 publishes this rank's counts (the layout's, and
/// `tokens`) in every rank's count slot of the epoch's parity; every block reads every rank's
/// signature and counts toward every rank into `tb.cnt`, and this rank's first row at every rank
/// into `tb.base`; block 0 writes the receive info. Ends with a block barrier.
///
/// # Safety
/// As for [`dispatch`]; `tb` the block's tables, `peers` initialised and a barrier passed since.
pub(crate) unsafe fn exchange_counts<P: Peers>(
    peers: &P,
    h: &EpHandle,
    tb: &Tables,
    (tokens, signature, e): (u32, u32, u64),
    budget: SpinBudget,
) {
    let (n, me) = (h.n_ranks, h.rank);
    let (b, tid, nt) = (ctaid(), tid(), ntid());
    let lr = h.layout_regions();
    let epr = h.experts_per_rank();
    let tag = count_tag(e);
    let parity = e & 1;
    let words = h.count_words();
    // 1. Block 0 publishes this rank's counts in every rank's slot `me` of this parity. The
    // release orders them after everything this rank did before (its earlier kernels).
    if b == 0 {
        for i in Threads::new(tid, nt).stride(n * words) {
            let (d, w) = (i / words, i % words);
            // SAFETY: the layout kernel wrote n per-rank and `experts` per-expert counts.
            let value = unsafe {
                if w == 0 {
                    signature
                } else if w == words - 1 {
                    tokens
                } else if w <= n {
                    ((h.layout + lr.per_rank) as *const u32).add(w as usize - 1).read()
                } else {
                    ((h.layout + lr.per_expert) as *const u32).add((d * epr + w - 1 - n) as usize).read()
                }
            };
            let at = peers.at(d, h.count_word(parity, me, w));
            // SAFETY: rank d's count slot, written only by this rank's block 0. Partner: the
            // acquire in `wait_count` on rank d.
            unsafe { store_release(at as *mut u64, pack_count(tag, value)) };
        }
    }

    // 2. Every block reads every rank's signature and counts toward every rank.
    for i in Threads::new(tid, nt).stride(n * (1 + n)) {
        let (s, w) = (i / (1 + n), i % (1 + n));
        // SAFETY: this rank's count slot s (written by rank s's block 0).
        let v = unsafe { wait_count(h.shared + h.count_word(parity, s, w), tag, budget) };
        if w == 0 && v != signature {
            fail(c"ep_dispatch: the ranks were called with different k, element types or received formats, or mixed cached and fresh dispatches, or window and peer-table forms");
        }
        if w > 0 && v > h.max_tokens {
            fail(c"ep_dispatch: a rank sends more tokens than max_tokens");
        }
        // SAFETY: s < n, w <= n: inside the matrix.
        unsafe { tb.cnt.add((s * (1 + n) + w) as usize).write(v) };
    }
    sync_threads();
    let cnt = |s: u32, d: u32| -> u32 {
        // SAFETY: s, d < n; filled before the barrier.
        unsafe { tb.cnt.add((s * (1 + n) + 1 + d) as usize).read() }
    };
    if tid < n {
        // My rows at rank d start after those of the ranks below me.
        let mut base = 0;
        for s in 0..me {
            base += cnt(s, tid);
        }
        // SAFETY: tid < n.
        unsafe { tb.base.add(tid as usize).write(base) };
    }
    if b == 0 {
        // What this rank receives: rows, offsets by source, the matrix, rows per local expert.
        let info = h.info as *mut u32;
        if tid == 0 {
            let mut off = 0;
            for s in 0..n {
                // SAFETY: inside the info buffer (info_words).
                unsafe { info.add((EpHandle::INFO_OFFSETS + s) as usize).write(off) };
                off += cnt(s, me);
            }
            // SAFETY: as above.
            unsafe {
                info.add((EpHandle::INFO_OFFSETS + n) as usize).write(off);
                info.write(off);
            }
        }
        for i in Threads::new(tid, nt).stride(n * n) {
            // SAFETY: as above.
            unsafe { info.add((h.info_matrix() + i) as usize).write(cnt(i / n, i % n)) };
        }
        for j in Threads::new(tid, nt).stride(epr) {
            let mut sum = 0;
            for s in 0..n {
                // SAFETY: this rank's count slot s, word 1 + n + j < count_words.
                sum += unsafe { wait_count(h.shared + h.count_word(parity, s, 1 + n + j), tag, budget) };
            }
            // SAFETY: as above.
            unsafe { info.add((h.info_per_expert() + j) as usize).write(align_count(sum, h.expert_alignment)) };
        }
        for s in Threads::new(tid, nt).stride(n) {
            // SAFETY: this rank's count slot s, its last word; inside the info buffer.
            unsafe {
                let v = wait_count(h.shared + h.count_word(parity, s, words - 1), tag, budget);
                info.add((h.info_tokens() + s) as usize).write(v);
            }
        }
    }
    sync_threads();
}

/// Dispatch: every token of this rank (`tokens` rows of `row_bytes` at `x`, with `k` expert ids
/// and weights each) to every rank that hosts one of its experts, once per rank. The layout
/// kernel ran before on the stream (its results are in `h.layout`). `signature` is
/// `signature(k, element type, format)`, the same on every rank. `CAST` false: the rows are
/// copied as they are (`format` is `FORMAT_COPY`); true: bf16 rows are cast to e4m3 on the way,
/// one f32 scale per 128 columns into `recv_scales` (`format` `FORMAT_E4M3` or
/// `FORMAT_E4M3_POW2`, see [`e4m3_scales`]; or `FORMAT_E4M3_UE8M0`, those scales as bytes,
/// [`scale_row_bytes`] per row). A null `topk_idx` is a cached dispatch: the layout is an
/// earlier dispatch's (same routing), whose received ids, weights and sources the host copied
/// into this slot, so only the rows (and scales) are sent.
///
/// # Safety
/// Launched by `mscclpp_ep::ExpertParallel` on every rank with `h.blocks` blocks (resident at
/// once), `EXCHANGE_SHARED_BYTES` of dynamic shared memory and at least `MAX_RANKS` threads per
/// block (a multiple of 32); `x`, `topk_idx` and `topk_w` hold the tokens' rows, ids (of
/// `h.idx_bytes` bytes) and weights (or `topk_idx` is null: a cached dispatch, whose layout and
/// received ids, weights and sources in `h`'s slot are those of the same routing); `tokens <= h.max_tokens`, `k <= h.max_topk`, `row_bytes` a
/// multiple of 16 at most `4 * h.hidden`; with `CAST`, the rows are bf16 (`row_bytes` is
/// `2 * h.hidden`) and `h.hidden` is a multiple of 128.
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
    let (n, me) = (h.n_ranks, h.rank);
    let (b, nb, tid, nt) = (ctaid(), nctaid(), tid(), ntid());
    let sr = h.shared_regions();
    let lr = h.layout_regions();
    let state = h.state as *mut u64;
    // SAFETY: one epoch per block, written by this block's thread 0 at the end of the last
    // dispatch (an earlier kernel on the stream).
    let e = unsafe { state.add(b as usize).read() };
    let tb = Tables::new();
    // SAFETY: the kernel's handle (this function's contract).
    unsafe { peers.init(&h, tid) };
    sync_threads();

    // SAFETY: the kernel's handle; the tables are this block's.
    unsafe { exchange_counts(&peers, &h, &tb, (tokens, signature, e), budget) };

    let send_index = (h.layout + lr.send_index) as *const i32;
    if CAST {
        // 3. FP8: one (token, 128 columns) per thread, cast once and stored to every rank the
        // token goes to; then the ids, weights and source indices, one word per thread. (Each
        // thread reads its 256 bytes twice, the second time from L1; no thread waits for another.)
        let row_of = |t: u32, d: u32| -> Option<u64> {
            // SAFETY: t < tokens, d < n.
            let si = unsafe { send_index.add(t as usize * n as usize + d as usize).read() };
            // SAFETY: d < n.
            (si >= 0).then(|| (unsafe { tb.base.add(d as usize).read() } + si as u32) as u64)
        };
        let (g, gn) = (b * nt + tid, nb * nt);
        let groups = h.scales_per_row();
        let (pow2, ue8m0) = (format != FORMAT_E4M3, format == FORMAT_E4M3_UE8M0);
        let scale_row = scale_row_bytes(format, groups) as u64;
        for u in Threads::new(g, gn).stride(tokens as u64 * groups as u64) {
            let (t, grp) = ((u / groups as u64) as u32, (u % groups as u64) as u32);
            // The token's row at every rank it goes to (`mask`: which ranks).
            let mut rows = [0u64; MAX_RANKS];
            let mut mask = 0u32;
            for (d, row) in rows.iter_mut().enumerate().take(n as usize) {
                if let Some(r) = row_of(t, d as u32) {
                    *row = r;
                    mask |= 1 << d;
                }
            }
            if mask == 0 {
                continue;
            }
            // 128 bf16: 16 vectors of 8.
            let src = x.addr() + t as u64 * row_bytes as u64 + grp as u64 * (FP8_GROUP as u64 * 2);
            // SAFETY: this group of token t's row.
            let (mul, scale) = unsafe { fp8_group_scales(src, pow2) };
            for (d, &row) in rows.iter().enumerate() {
                if (mask >> d) & 1 == 1 {
                    let at = peers.at(d as u32, sr.recv_scales + row * scale_row);
                    // SAFETY: the scales of a received row (below n * max_tokens).
                    unsafe { fp8_store_scale(at, (grp, groups, scale_row), scale, ue8m0) };
                }
            }
            for v in 0..8 {
                // SAFETY: vectors 2v, 2v + 1 of the group.
                let (lo, hi) = unsafe { (ld_v4(vec_at(src, 2 * v)), ld_v4(vec_at(src, 2 * v + 1))) };
                let out = fp8_vector(lo, hi, mul);
                for (d, &row) in rows.iter().enumerate() {
                    if (mask >> d) & 1 == 1 {
                        let row = peers.at(d as u32, sr.recv_x + row * h.hidden as u64);
                        // SAFETY: vector v of this group of a received row (below n * max_tokens)
                        // of `hidden` bytes, 16-aligned (hidden a multiple of 128).
                        unsafe { st_v4(vec_at(row + grp as u64 * FP8_GROUP as u64, v), out) };
                    }
                }
            }
        }
        // A cached dispatch (no ids): the host copied the ids, weights and sources.
        let words = if topk_idx.addr() == 0 { 0 } else { 2 * k + 1 };
        for u in Threads::new(g, gn).stride(tokens * words) {
            let (t, j) = (u / words, u % words);
            for d in 0..n {
                let d = (me + 1 + d) % n;
                if let Some(row) = row_of(t, d) {
                    // SAFETY: t < tokens, j < 2k + 1, the row below n * max_tokens.
                    unsafe { write_meta((&h, &sr), (topk_idx, topk_w), (t, k, j), (d, peers.at(d, 0), row)) };
                }
            }
        }
    }
    // 3. Rows (or pieces of rows, when tokens are few), one warp each, one destination rank
    // after the other (a second read of the row comes from L2). Few live registers, so blocks
    // of up to 896 threads fit.
    let lane = tid % WARP;
    let wpb = nt / WARP;
    let (gw, nw) = (b * wpb + tid / WARP, nb * wpb);
    let vecs = row_bytes / 16;
    let per = pieces(nw, tokens, vecs);
    let mut u = gw;
    // tokens * per <= max(tokens, nw): no overflow. (FP8 cast its rows above.)
    while !CAST && u < tokens * per {
        let (t, piece) = (u / per, u % per);
        let (v0, v1) =
            ((vecs as u64 * piece as u64 / per as u64) as u32, (vecs as u64 * (piece as u64 + 1) / per as u64) as u32);
        let src = x.addr() + t as u64 * row_bytes as u64;
        for d in 0..n {
            // Remote ranks first, this rank last.
            let d = (me + 1 + d) % n;
            // SAFETY: t < tokens, d < n.
            let si = unsafe { send_index.add(t as usize * n as usize + d as usize).read() };
            if si < 0 {
                continue;
            }
            // SAFETY: d < n.
            let row = (unsafe { tb.base.add(d as usize).read() } + si as u32) as u64;
            let base = peers.at(d, 0);
            let dst = peers.at(d, sr.recv_x + row * row_bytes as u64);
            // SAFETY: vectors below v1 <= vecs of the token's row; the destination row is below
            // n * max_tokens (counts checked above).
            unsafe { copy_vecs(src, dst, v0 + lane, v1, WARP) };
            // The k ids, the k weights and the source index, by the warp of the first piece.
            // (None for a cached dispatch: the host copied them.)
            let mut j = if piece == 0 && topk_idx.addr() != 0 { lane } else { 2 * k + 1 };
            while j < 2 * k + 1 {
                // SAFETY: t < tokens, j < 2k + 1, the row below n * max_tokens.
                unsafe { write_meta((&h, &sr), (topk_idx, topk_w), (t, k, j), (d, base, row)) };
                j += WARP;
            }
        }
        u += nw;
    }
    sync_threads();

    // 4. Tell every rank this block's rows are there (release, after the block's barrier).
    if tid < n {
        // SAFETY: tid < n, b this block. Partner: the waits below on rank tid.
        unsafe { peers.arrive(&h, Phase::Dispatch, tid, b, e) };
    }
    // 5. Wait for every block of every rank (the grid's threads share the waits).
    // SAFETY: the kernel's handle.
    unsafe { peers.wait(&h, Phase::Dispatch, (b * nt + tid, nb * nt), e, budget) };
    sync_threads();
    if tid == 0 {
        // SAFETY: this block's epoch; every thread read it before the barriers above.
        unsafe { state.add(b as usize).write(e + 1) };
    }
}

/// Adds the lanes of the 16-byte vector `v` of `V` to the accumulators (f32, one rounding per
/// addition).
#[inline(always)]
pub(crate) fn accumulate<V: Element>(acc: &mut [f32; 8], v: [u32; 4]) {
    let v: V = bytemuck::cast(v);
    for (i, a) in acc.iter_mut().enumerate().take(V::LANES) {
        *a += v.lane_f32(i);
    }
}

/// The accumulators as one 16-byte vector of `V` (each rounded once).
#[inline(always)]
pub(crate) fn pack<V: Element>(acc: &[f32; 8]) -> [u32; 4] {
    bytemuck::cast(V::from_f32_lanes(acc))
}

/// Combine: this rank's rows of `y` (one per received row, `row_bytes` each, as the dispatch
/// of `h`'s slot laid them out) go back to their source ranks; every token of this rank gets the sum,
/// in rank order, of what the ranks it went to computed for it. With `wt.out` (not 0), the
/// same for the received rows' `k` weights at `wt.input`: every token's `k` weights summed in
/// rank order (f32, from 0) into `wt.out`. Each non-zero address of `bias` is a row per token
/// (of `V`) added first: a token's sum starts at `0 + bias0 + bias1` (f32), as DeepEP's.
///
/// # Safety
/// As for [`dispatch`]; `h.slot` holds a dispatch not yet combined, every rank combining the
/// same one (its info, layout and combine landing are this combine's; the landing of another
/// slot may be written meanwhile by another rank's next combine); `y` holds `y_bytes` bytes, `out` `tokens * row_bytes`; every rank passes the
/// same `row_bytes` and the same `wt.k` (the dispatch's k) and `wt.out` zero or not on all; with
/// `wt.out`, `wt.input` holds `wt.input_bytes` bytes (4-aligned) and `wt.out` `tokens * k` f32;
/// every non-zero `bias` address holds `tokens * row_bytes` bytes, 16-aligned.
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
    let (n, me) = (h.n_ranks, h.rank);
    let (b, nb, tid, nt) = (ctaid(), nctaid(), tid(), ntid());
    let lr = h.layout_regions();
    // SAFETY: the combine epochs follow the dispatch epochs.
    let state = unsafe { (h.state as *mut u64).add(h.blocks as usize + b as usize) };
    // SAFETY: this block's combine epoch (see `ep_dispatch`).
    let e = unsafe { state.read() };
    let info = h.info as *const u32;
    let tb = Tables::new();
    // SAFETY: the kernel's handle (this function's contract).
    unsafe { peers.init(&h, tid) };
    if tid < n {
        // SAFETY: the info buffer holds its words. Rows received from rank tid (the matrix's
        // column `me`).
        unsafe { tb.cnt.add(tid as usize).write(info.add((h.info_matrix() + tid * n + me) as usize).read()) };
    }
    if tid <= n {
        // SAFETY: offsets 0..=n.
        unsafe { tb.base.add(tid as usize).write(info.add((EpHandle::INFO_OFFSETS + tid) as usize).read()) };
    }
    sync_threads();
    // SAFETY: word 0 of the info buffer.
    let received = unsafe { info.read() } as u64;
    if received * row_bytes as u64 > y_bytes {
        fail(c"ep_combine: the expert-output buffer holds fewer rows than this rank received");
    }
    let (weights, wk) = (wt.out != 0, wt.k as u64);
    if weights && received * wk * 4 > wt.input_bytes {
        fail(c"ep_combine: the weights buffer holds fewer rows than this rank received");
    }
    let offset = |s: u32| -> u64 {
        // SAFETY: s <= n.
        unsafe { tb.base.add(s as usize).read() as u64 }
    };

    // 1. Push the rows of every other source back into its landing region `me`.
    let (g, gn) = (b * nt + tid, nb * nt);
    for s in 0..n {
        if s == me {
            continue;
        }
        // SAFETY: s < n.
        let rows = unsafe { tb.cnt.add(s as usize).read() } as u64;
        let vecs = rows * row_bytes as u64 / 16;
        let src = y.addr() + offset(s) * row_bytes as u64;
        let dst = peers.at(s, h.combine_region(me));
        // SAFETY: vectors inside this source's rows of `y` (checked against y_bytes) and inside
        // rank s's landing region (rows <= max_tokens).
        unsafe { copy_vecs(src, dst, g as u64, vecs, gn as u64) };
        if weights {
            let (src, dst) = (wt.input + offset(s) * wk * 4, peers.at(s, h.combine_w_region(me)));
            let mut i = g as u64;
            while i < rows * wk {
                // SAFETY: words of this source's rows of the weights (checked against
                // input_bytes) and of rank s's weight landing region (rows <= max_tokens, k <=
                // max_topk).
                unsafe { ((dst + i * 4) as *mut u32).write(((src + i * 4) as *const u32).read()) };
                i += gn as u64;
            }
        }
    }
    sync_threads();
    // 2. Signal every other rank, then wait for every block of every other rank.
    if tid < n && tid != me {
        // SAFETY: tid < n, b this block. Partner: the waits below on rank tid.
        unsafe { peers.arrive(&h, Phase::Combine, tid, b, e) };
    }
    // (Every block waits for all: each reads every landing region.)
    // SAFETY: the kernel's handle.
    unsafe { peers.wait(&h, Phase::Combine, (tid, nt), e, budget) };
    sync_threads();

    // 3. Sum every token's rows in rank order (f32), round once: rows (or pieces of rows, when
    // tokens are few) one warp each.
    let lane = tid % WARP;
    let wpb = nt / WARP;
    let (gw, nw) = (b * wpb + tid / WARP, nb * wpb);
    let vecs = row_bytes / 16;
    let per = pieces(nw, tokens, vecs);
    let send_index = (h.layout + lr.send_index) as *const i32;
    for u in Threads::new(gw, nw).stride(tokens * per) {
        let (t, piece) = (u / per, u % per);
        let (v0, v1) =
            ((vecs as u64 * piece as u64 / per as u64) as u32, (vecs as u64 * (piece as u64 + 1) / per as u64) as u32);
        let mut mask = 0u32;
        let mut src = [0u64; MAX_RANKS];
        for (r, sr) in src.iter_mut().enumerate() {
            if (r as u32) < n {
                // SAFETY: t < tokens, r < n.
                let si = unsafe { send_index.add(t as usize * n as usize + r).read() };
                if si >= 0 {
                    mask |= 1 << r;
                    *sr = if r as u32 == me {
                        y.addr() + (offset(me) + si as u64) * row_bytes as u64
                    } else {
                        h.shared + h.combine_region(r as u32) + si as u64 * row_bytes as u64
                    };
                }
            }
        }
        let dst = out.addr() + t as u64 * row_bytes as u64;
        // Two vectors per lane at a time: both loads of a rank are in flight together.
        let mut v = v0 + lane;
        while v < v1 {
            let two = v + WARP < v1;
            let (mut acc0, mut acc1) = ([0f32; 8], [0f32; 8]);
            for &at in &bias.bias {
                if at != 0 {
                    let row = at + t as u64 * row_bytes as u64;
                    // SAFETY: vectors v and v + WARP (when below vecs) of token t's bias row.
                    unsafe {
                        accumulate::<V>(&mut acc0, ld_v4(vec_at(row, v)));
                        if two {
                            accumulate::<V>(&mut acc1, ld_v4(vec_at(row, v + WARP)));
                        }
                    }
                }
            }
            for (r, &s) in src.iter().enumerate() {
                if (mask >> r) & 1 == 1 {
                    // SAFETY: vectors v and v + WARP (when below vecs) of a row of `y` or of a
                    // landing region.
                    unsafe {
                        let a = ld_v4(vec_at(s, v));
                        if two {
                            let b1 = ld_v4(vec_at(s, v + WARP));
                            accumulate::<V>(&mut acc0, a);
                            accumulate::<V>(&mut acc1, b1);
                        } else {
                            accumulate::<V>(&mut acc0, a);
                        }
                    }
                }
            }
            // SAFETY: vectors of token t's output row.
            unsafe {
                st_v4(vec_at(dst, v), pack::<V>(&acc0));
                if two {
                    st_v4(vec_at(dst, v + WARP), pack::<V>(&acc1));
                }
            }
            v += 2 * WARP;
        }
    }
    // 4. The same for the weights, one (token, slot) per thread.
    let mut i = g;
    while weights && i < tokens * wt.k {
        let (t, j) = ((i / wt.k) as u64, (i % wt.k) as u64);
        let mut acc = 0f32;
        for r in 0..n {
            // SAFETY: t < tokens, r < n.
            let si = unsafe { send_index.add(t as usize * n as usize + r as usize).read() };
            if si >= 0 {
                let at = if r == me {
                    wt.input + ((offset(me) + si as u64) * wk + j) * 4
                } else {
                    h.shared + h.combine_w_region(r) + (si as u64 * wk + j) * 4
                };
                // SAFETY: a weight of this rank's received rows or of a landing region, written
                // before the flags waited for above.
                acc += f32::from_bits(unsafe { (at as *const u32).read() });
            }
        }
        // SAFETY: t < tokens, j < k: inside `wt.out`.
        unsafe { ((wt.out + (t * wk + j) * 4) as *mut u32).write(acc.to_bits()) };
        i += gn;
    }
    sync_threads();
    if tid == 0 {
        // SAFETY: this block's combine epoch; read by every thread before the barriers.
        unsafe { state.write(e + 1) };
    }
}
