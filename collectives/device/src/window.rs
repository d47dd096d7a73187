//! The one-shot allreduce written on a symmetric memory window
//! ([`Window`](mscclpp_device::window::Window)): the same result as
//! the one-shot LL allreduce of [`Collective`](crate::Collective), bit for bit (sums in rank
//! order), in a few dozen lines of the window API. Two forms, chosen by size (the host picks):
//! LL packets up to [`WindowLayout::ll_bytes`] (no signal, no fence, twice the bytes), and above
//! it a put of the raw data with a release signal per block and peer.
//!
//! ```text
//!  window of each rank: [ counters | LL half 0: region 0 | ... | region n-1 | LL half 1: ... |
//!                         put half 0: region 0 | ... | region n-1 | put half 1: ... ]
//!                       (LL regions of 2 * ll_bytes, packets; put regions of max_bytes, raw data;
//!                        no put halves when max_bytes <= ll_bytes)
//!
//!  LL form, rank r, launch e (block b: its counter b, + 1), flag ll_flag(e), the whole grid
//!  striding over the input's 8-byte words j (the one-shot LL allreduce's data path):
//!    word j as packet j of region r of LL half e&1 (with the flag)      in every rank p != r
//!    then word j of output = x0 + x1 + ... + x(n-1)                     (rank order)
//!      xq: packet j of region q of its own window, waited for until it carries the flag
//!          (xr: its own input)
//!    counter b = e   (block 0 also sets those of the blocks up to max_blocks the grid lacks)
//!  put form, block b of rank r, launch e (its slot b counts its launches):
//!    put_signal(p, put half e&1, region r, part b of the input, slot b)   for every rank p (r too)
//!    wait until slot b from every rank q has reached e
//!    part b of output = region 0 + region 1 + ... + region n-1        (rank order, its own window)
//! ```
//!
//! No closing barrier: each form counts its own launches and alternates its own halves, and
//! launch `e + 2` of a form writes half `e & 1` into a peer's window only after this rank's launch
//! `e + 1` of that form ended, which received every peer's part of launch `e + 1` (LL: every
//! packet; put: every block's signal). A peer sends those only after its launch `e` ended: its
//! launch `e + 1` starts after launch `e` in stream order (a kernel launched to overlap its
//! predecessor waits for it in `griddepcontrol.wait` before its first memory access), so it has
//! read all of half `e & 1`. Hence launches of no bytes must not run (the host skips them): they
//! would end without hearing from the peers. Every rank launches the same sequence of sizes, so
//! launch numbers (and flags) agree. The two forms never share bytes, so a stale raw value is
//! never taken for a packet, and an LL flag differs from the one its packet last carried (two
//! launches earlier; `u32` flags repeat only after 2^32 launches).
//!
//! Every put-form launch on one window uses the same grid (each block's slot counts its
//! launches), at most the window's `slots` blocks, all co-resident on every rank. The LL form
//! may use any co-resident grid of at most `max_blocks` blocks (the same bound for every LL
//! launch on the window, at most [`LL_COUNTERS`]), a different one per size: block 0 keeps the
//! counters of the blocks it lacks in step, and each packet carries its own flag, so even the
//! ranks' grids may differ.

/// Launch counters of the LL form at the start of every rank's window: one `u64` per block, read
/// and written by this rank only. The LL form's grid has at most this many blocks.
pub const LL_COUNTERS: u32 = 1024;

/// Where the window allreduce keeps what in every rank's window (the same on every rank), for
/// `n_ranks` ranks, messages of at most `max_bytes` and the LL form up to `ll_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLayout {
    /// Ranks of the team.
    pub n_ranks: u32,
    /// The largest message (bytes per rank, a multiple of 16).
    pub max_bytes: u64,
    /// The largest message of the LL form (a multiple of 16, at most `max_bytes`; 0: none).
    pub ll_bytes: u64,
}

impl WindowLayout {
    /// Bytes of the counters ([`LL_COUNTERS`] words), where the LL halves start.
    pub const COUNTER_BYTES: u64 = LL_COUNTERS as u64 * 8;

    /// Byte offset of block `b`'s launch counter.
    pub const fn counter(b: u32) -> u64 {
        8 * b as u64
    }

    /// Byte offset of region `rank` of LL half `half` (what `rank` sends, as LL16 packets:
    /// `2 * ll_bytes` bytes).
    pub const fn ll_region(&self, half: u64, rank: u32) -> u64 {
        Self::COUNTER_BYTES + (half * self.n_ranks as u64 + rank as u64) * 2 * self.ll_bytes
    }

    /// Whether the window has the put form's halves (messages above `ll_bytes` exist).
    pub const fn has_put(&self) -> bool {
        self.max_bytes > self.ll_bytes
    }

    /// Byte offset of region `rank` of put half `half` (what `rank` puts: `max_bytes` bytes).
    pub const fn put_region(&self, half: u64, rank: u32) -> u64 {
        let n = self.n_ranks as u64;
        Self::COUNTER_BYTES + 4 * n * self.ll_bytes + (half * n + rank as u64) * self.max_bytes
    }

    /// Bytes of the window: the counters, two LL halves of `n_ranks` regions, and two put halves
    /// when [`Self::has_put`]. `None` when that overflows a `u64`.
    pub const fn bytes(&self) -> Option<u64> {
        let n = self.n_ranks as u64;
        let Some(ll) = n.checked_mul(4) else { return None };
        let Some(ll) = ll.checked_mul(self.ll_bytes) else { return None };
        let put = if self.has_put() {
            match (2 * n).checked_mul(self.max_bytes) {
                Some(p) => p,
                None => return None,
            }
        } else {
            0
        };
        match ll.checked_add(put) {
            Some(t) => t.checked_add(Self::COUNTER_BYTES),
            None => None,
        }
    }

    /// Whether the layout fits a window of `window_bytes` and is well formed (sizes multiples
    /// of 16, `ll_bytes` at most `max_bytes`): what both kernels check with `ASSERTS`.
    pub const fn fits(&self, window_bytes: u64) -> bool {
        let sized = self.max_bytes.is_multiple_of(16) && self.ll_bytes.is_multiple_of(16);
        sized
            && self.ll_bytes <= self.max_bytes
            && match self.bytes() {
                Some(b) => b <= window_bytes,
                None => false,
            }
    }
}

/// Block `b`'s part of `bytes` (a multiple of 16) in a grid of `blocks`: `(offset, length)`,
/// whole 16-byte vectors, the first blocks one vector more.
pub const fn block_part(bytes: u64, blocks: u32, b: u32) -> (u64, u64) {
    let (vecs, blocks, b) = (bytes / 16, blocks as u64, b as u64);
    let (base, extra) = (vecs / blocks, vecs % blocks);
    let start = b * base + if b < extra { b } else { extra };
    (start * 16, (base + if b < extra { 1 } else { 0 }) * 16)
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::*;
    use mscclpp_device::copy::Threads;
    use mscclpp_device::device_assert;
    use mscclpp_device::element::Element;
    use mscclpp_device::packet::LL16Packet;
    use mscclpp_device::poll::SpinBudget;
    use mscclpp_device::ptr::GlobalPtr;
    use mscclpp_device::ptx::misc::{griddepcontrol_launch_dependents, griddepcontrol_wait};
    use mscclpp_device::ptx::{ld_st, sreg};
    use mscclpp_device::vec::F32x4;
    use mscclpp_device::window::{Scope, Window};

    /// The put form of the one-shot allreduce (sum) of `bytes` of f32 on window `w`: `output` =
    /// the sum over ranks of `input`, in rank order. Every thread of every block calls it.
    ///
    /// # Safety
    /// `w` a live window that holds the [`WindowLayout`] of (`w.size`, `max_bytes`, `ll_bytes`)
    /// with put halves, with at least as many slots as blocks, used only by this allreduce, every
    /// put-form launch with the same 1-D co-resident grid on every rank, every rank launching the
    /// same sequence of sizes; `input` and `output` 16-byte aligned, valid for `bytes` (a
    /// positive multiple of 16, at most `max_bytes`: checked with `ASSERTS`), not overlapping.
    #[inline(always)]
    pub unsafe fn allreduce_window_f32(
        w: &Window,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        max_bytes: u64,
        ll_bytes: u64,
        budget: SpinBudget,
    ) {
        let l = WindowLayout { n_ranks: w.size, max_bytes, ll_bytes };
        device_assert!(bytes.is_multiple_of(16) && bytes <= max_bytes, "window allreduce: size");
        device_assert!(l.fits(w.bytes) && l.has_put(), "window allreduce: window too small");
        let (n, me, b) = (w.size, w.rank, sreg::ctaid_x());
        let (off, len) = block_part(bytes, sreg::nctaid_x(), b);
        // The previous kernel on the stream has finished (when this one was launched to overlap it).
        griddepcontrol_wait();
        griddepcontrol_launch_dependents();
        // SAFETY: the caller's contract: slot b exists, every region lies in the window (sizes
        // checked above), every block of every rank runs this; the signal of slot b orders each
        // put before the reads of its region, and the halves alternate (module docs).
        unsafe {
            // This block's launch number: its own signal to itself counts the launches before.
            let e = w.signal_value(b, me) + 1;
            let region = |r: u32| l.put_region(e & 1, r) + off;
            for k in 0..n {
                let p = if me + k < n { me + k } else { me + k - n }; // from the next rank on
                w.put_signal(p, region(me), input.byte_add(off as usize), len, b, Scope::Block);
            }
            if Scope::Block.is_leader() {
                for q in 0..n {
                    w.wait_signal(b, q, e, budget);
                }
            }
            Scope::Block.sync();
            for i in Threads::block().stride(len / 16) {
                let at = |r: u32| w.local::<F32x4>(region(r) + i * 16).as_ptr();
                let mut acc = at(0).read().0;
                for r in 1..n {
                    let v = at(r).read().0;
                    for l in 0..4 {
                        acc[l] += v[l];
                    }
                }
                output.byte_add((off + i * 16) as usize).cast::<F32x4>().as_ptr().write(F32x4(acc));
            }
        }
    }

    /// The LL form of the one-shot allreduce (sum) of `bytes` of f32 on window `w`: `output` =
    /// the sum over ranks of `input`, in rank order (the one-shot LL allreduce's data path and
    /// additions, word by word). Every thread of every block calls it.
    ///
    /// # Safety
    /// `w` a live window that holds the [`WindowLayout`] of (`w.size`, `max_bytes`, `ll_bytes`),
    /// used only by this allreduce; a 1-D co-resident grid of at most `max_blocks` blocks, the
    /// same `max_blocks` (at most [`LL_COUNTERS`]) for every LL launch on the window; every rank
    /// launching the same sequence of sizes; `input` and `output` 16-byte aligned, valid for
    /// `bytes` (a positive multiple of 16, at most `ll_bytes`: checked with `ASSERTS`), not
    /// overlapping.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn allreduce_window_ll_f32(
        w: &Window,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        max_bytes: u64,
        ll_bytes: u64,
        max_blocks: u32,
        budget: SpinBudget,
    ) {
        let l = WindowLayout { n_ranks: w.size, max_bytes, ll_bytes };
        device_assert!(bytes.is_multiple_of(16) && bytes <= ll_bytes, "window allreduce (LL): size");
        device_assert!(l.fits(w.bytes), "window allreduce (LL): window too small");
        device_assert!(
            sreg::nctaid_x() <= max_blocks && max_blocks <= LL_COUNTERS,
            "window allreduce (LL): more blocks than max_blocks, or max_blocks than counters"
        );
        let (n, me, b) = (w.size, w.rank, sreg::ctaid_x());
        // The previous kernel on the stream has finished (when this one was launched to overlap it).
        griddepcontrol_wait();
        griddepcontrol_launch_dependents();
        let counters = w.local::<u64>(WindowLayout::counter(0));
        let word = |p: GlobalPtr<u8>, j: u64| p.byte_add((8 * j) as usize).cast::<u64>().as_ptr();
        let (t, words) = (Threads::grid(), bytes / 8);
        // SAFETY: the caller's contract: the counters and every region lie in the window (sizes
        // checked above); the halves alternate and every packet carries this launch's flag
        // (module docs); word j of the input and output lies in `bytes`, packet j in a region.
        unsafe {
            // This block's launch number: its counter, which block 0 keeps in step for all.
            let e = counters.add(b as usize).as_ptr().read() + 1;
            let (flag, half) = (crate::ll_flag(e), e & 1);
            let mine = l.ll_region(half, me);
            // Each word loaded once and sent to every peer at once, as the one-shot LL does.
            for j in t.stride(words) {
                let v = ld_st::ld_global_u64(word(input, j));
                for p in 0..n {
                    if p != me {
                        w.peer::<LL16Packet>(p, mine + 16 * j).write(v, flag);
                    }
                }
            }
            for j in t.stride(words) {
                let own = ld_st::ld_global_u64(word(input, j));
                let mut acc = 0u64;
                for q in 0..n {
                    let v = if q == me {
                        own
                    } else {
                        w.local::<LL16Packet>(l.ll_region(half, q) + 16 * j).read(flag, budget)
                    };
                    acc = if q == 0 { v } else { <f32 as Element>::add_dwords(acc, v) };
                }
                ld_st::st_global_u64(word(output, j), acc);
            }
            // Every thread has read the counter before it moves; the next launch reads it after
            // this one ended.
            Scope::Block.sync();
            let t = Threads::block();
            if t.index == 0 {
                counters.add(b as usize).as_ptr().write(e);
            }
            if b == 0 {
                for j in Threads::new(sreg::nctaid_x() + t.index, t.count).stride(max_blocks) {
                    counters.add(j as usize).as_ptr().write(e);
                }
            }
        }
    }
}

#[cfg(target_arch = "nvptx64")]
pub use device::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_parts_tile_the_message_in_vectors() {
        for bytes in [0u64, 16, 48, 1024, 16 * 1001, 64 << 20] {
            for blocks in [1u32, 2, 3, 16, 132] {
                let mut next = 0;
                for b in 0..blocks {
                    let (off, len) = block_part(bytes, blocks, b);
                    assert_eq!(off, next, "{bytes} B over {blocks}: block {b} starts where {} ended", b.max(1) - 1);
                    assert!(len.is_multiple_of(16));
                    next = off + len;
                }
                assert_eq!(next, bytes);
            }
        }
    }

    /// Counters, LL regions (packets: twice the data) and put regions never share a byte, stay
    /// 16-byte aligned, and end where the window ends.
    #[test]
    fn layout_regions_are_disjoint_aligned_and_inside() {
        for n in [1u32, 2, 3, 8] {
            for (max_bytes, ll_bytes) in [(16u64, 16u64), (1 << 20, 1 << 20), (64 << 20, 3 << 20), (4096, 0), (48, 32)]
            {
                let l = WindowLayout { n_ranks: n, max_bytes, ll_bytes };
                let total = l.bytes().unwrap();
                assert!(l.fits(total) && !l.fits(total - 16));
                let mut spans = vec![(0, WindowLayout::COUNTER_BYTES)];
                for half in 0..2 {
                    for r in 0..n {
                        spans.push((l.ll_region(half, r), 2 * ll_bytes));
                        if l.has_put() {
                            spans.push((l.put_region(half, r), max_bytes));
                        }
                    }
                }
                spans.retain(|s| s.1 > 0);
                spans.sort();
                for pair in spans.windows(2) {
                    assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{l:?}: {pair:?} overlap");
                }
                assert!(spans.iter().all(|s| s.0 % 16 == 0));
                assert_eq!(spans.last().map(|s| s.0 + s.1), Some(total), "{l:?}: the last region ends the window");
            }
        }
        assert_eq!(WindowLayout::counter(LL_COUNTERS - 1) + 8, WindowLayout::COUNTER_BYTES);
        // 8 ranks, 64 MiB, LL up to 1 MiB: 1 GiB of put halves, 32 MiB of packets, the counters.
        let big = WindowLayout { n_ranks: 8, max_bytes: 64 << 20, ll_bytes: 1 << 20 };
        assert_eq!(big.bytes(), Some((1 << 30) + (32 << 20) + 8192));
        // No put halves when the LL form carries every size.
        assert!(!WindowLayout { n_ranks: 2, max_bytes: 1024, ll_bytes: 1024 }.has_put());
    }

    #[test]
    fn layout_refuses_overflow_and_bad_sizes() {
        assert_eq!(WindowLayout { n_ranks: u32::MAX, max_bytes: u64::MAX / 16 * 16, ll_bytes: 0 }.bytes(), None);
        assert_eq!(WindowLayout { n_ranks: 8, max_bytes: 1 << 62, ll_bytes: 1 << 62 }.bytes(), None);
        assert_eq!(WindowLayout { n_ranks: 2, max_bytes: 1 << 62, ll_bytes: 16 }.bytes(), None);
        let ok = WindowLayout { n_ranks: 2, max_bytes: 4096, ll_bytes: 1024 };
        assert!(ok.fits(u64::MAX));
        assert!(!WindowLayout { ll_bytes: 8192, ..ok }.fits(u64::MAX), "LL beyond the largest message");
        assert!(!WindowLayout { ll_bytes: 1000, ..ok }.fits(u64::MAX), "not a multiple of 16");
        assert!(!WindowLayout { max_bytes: 4100, ..ok }.fits(u64::MAX), "not a multiple of 16");
    }
}
