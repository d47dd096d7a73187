//! Device halves of the window phases of `tests/mp_patterns/` (symmetric memory windows): puts
//! through `Window::peer` ordered by signals and the team barrier, LL packets, and the one-shot allreduce
//! written on a window. One block per rank (ranks may share one GPU); thread 0 signals, waits
//! and runs the barriers, the block barrier orders the other threads around it. Then a window's
//! switch group (`Window::switch_group`): the switch-channel allreduce and barrier rounds of
//! [`crate::switch`], the same code, with several blocks, block b on signal slot b.

use mscclpp_device::channel::switch::SwitchGroup;
use mscclpp_device::copy::{Threads, copy_widest};
use mscclpp_device::packet::LL16Packet;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::sreg;
use mscclpp_device::sync::block_barrier;
use mscclpp_device::vec::{Bf16x8, F32x4};
use mscclpp_device::window::{Scope, Window};

use crate::kernels;
use crate::switch::{allreduce_in_place, barrier_rounds};

const BUDGET: SpinBudget = SpinBudget::from_millis(20_000);

/// The team barrier of the calling block: every thread's earlier accesses are ordered before
/// every thread's later ones, on every rank.
///
/// # Safety
/// `w` is a live window; every rank's block calls it the same number of times.
#[inline(always)]
unsafe fn team_barrier(w: &Window) {
    block_barrier();
    if Threads::block().index == 0 {
        // SAFETY: forwarded; thread 0 alone runs the barrier.
        unsafe { w.barrier(BUDGET) };
    }
    block_barrier();
}

/// Scope `code` of the scoped kernel: 0 a thread, 1 a warp, anything else the block.
#[inline(always)]
fn scope_of(code: u32) -> Scope {
    match code {
        0 => Scope::Thread,
        1 => Scope::Warp,
        _ => Scope::Block,
    }
}

kernels! {
    /// Launch `round` (1, 2, ...) of the scoped pattern, for `Window::put`, `put_signal` and
    /// `get` with the group of `scope` (0 thread 0 alone, 1 warp 0, 2 the block; the other
    /// threads return at once): the group copies chunk `p` of `src` to byte
    /// `me * chunk + skew` of rank `p`'s window (`put` for itself, `put_signal` on slot `scope`
    /// for every peer), waits until every peer's signal on that slot has reached `round`, then
    /// a team barrier, and it gets `chunk` bytes at `next * chunk + skew` of every rank `p`'s
    /// window (what rank `next = me + 1` put there) into chunk `p` of `out`; a closing barrier.
    fn win_scoped(w: Window, src: GlobalPtr<u8>, out: GlobalPtr<u8>, chunk: u64, skew: u64, scope: u32, round: u64) {
        let s = scope_of(scope);
        let tid = Threads::block().index;
        if (s == Scope::Thread && tid > 0) || (s == Scope::Warp && tid >= 32) {
            return;
        }
        for p in 0..w.size {
            let from = src.byte_add((p as u64 * chunk) as usize);
            let at = w.rank as u64 * chunk + skew;
            if p == w.rank {
                w.put(p, at, from, chunk, s);
            } else {
                w.put_signal(p, at, from, chunk, scope, s);
            }
        }
        for q in (0..w.size).filter(|&q| q != w.rank) {
            w.wait_signal_in(s, scope, q, round, BUDGET);
        }
        w.barrier_in(s, BUDGET);
        let next = if w.rank + 1 < w.size { w.rank + 1 } else { 0 };
        for p in 0..w.size {
            w.get(p, next as u64 * chunk + skew, out.byte_add((p as u64 * chunk) as usize), chunk, s);
        }
        w.barrier_in(s, BUDGET);
    }

    /// Launch `round` (1, 2, ...) of the packet pattern, for `Window::put_packets` and
    /// `read_packets` with the group of `scope` (as in `win_scoped`): the group writes chunk `p`
    /// of `src` as LL16 packets with flag `round` to region `me` of half `round & 1` of rank
    /// `p`'s window (itself included; regions of `2 * chunk` bytes, halves of `size` regions),
    /// then reads region `q` of that half of its own window into chunk `q` of `out`, for every
    /// `q`. No signal and no barrier: the flags alone order the reads after the writes.
    fn win_packets(w: Window, src: GlobalPtr<u8>, out: GlobalPtr<u8>, chunk: u64, scope: u32, round: u64) {
        let s = scope_of(scope);
        let tid = Threads::block().index;
        if (s == Scope::Thread && tid > 0) || (s == Scope::Warp && tid >= 32) {
            return;
        }
        let region = |r: u32| ((round & 1) * w.size as u64 + r as u64) * 2 * chunk;
        for p in 0..w.size {
            let from = src.byte_add((p as u64 * chunk) as usize);
            w.put_packets::<LL16Packet>(p, region(w.rank), from, chunk, round as u32, s);
        }
        for q in 0..w.size {
            let to = out.byte_add((q as u64 * chunk) as usize);
            w.read_packets::<LL16Packet>(region(q), to, chunk, round as u32, s, BUDGET);
        }
    }

    /// Launch `round` (1, 2, ...) of the put pattern: the block copies chunk `p` of `src` (this
    /// rank's data for rank `p`) to offset `me * chunk` of rank `p`'s window, for every rank `p`
    /// (itself included); thread 0 signals slot 0 of every peer and waits until every peer's
    /// signal has reached `round`; then a team barrier, and the block reads chunk `p` of the
    /// window of rank `p`, at offset `((me + 1) % size) * chunk` (what rank `me + 1` wrote
    /// there), into chunk `p` of `out`; a closing barrier lets the next round overwrite windows.
    fn win_put(w: Window, src: GlobalPtr<u8>, out: GlobalPtr<u8>, chunk: u64, round: u64) {
        let t = Threads::block();
        for p in 0..w.size {
            let from = src.byte_add((p as u64 * chunk) as usize);
            copy_widest(w.peer::<u8>(p, w.rank as u64 * chunk), from, chunk, t);
        }
        block_barrier();
        if t.index == 0 {
            for p in (0..w.size).filter(|&p| p != w.rank) {
                // Partner: rank p's wait_signal below (release, after the block barrier).
                w.signal(p, 0);
            }
            for p in (0..w.size).filter(|&p| p != w.rank) {
                w.wait_signal(0, p, round, BUDGET);
            }
        }
        team_barrier(&w);
        let next = if w.rank + 1 < w.size { w.rank + 1 } else { 0 }; // (no division: no panic path)
        for p in 0..w.size {
            let to = out.byte_add((p as u64 * chunk) as usize);
            copy_widest(to, w.peer::<u8>(p, next as u64 * chunk), chunk, t);
        }
        team_barrier(&w);
    }

    /// One-shot allreduce (sum of `n` f32) on a window of `n` f32 per rank: copy `input` into
    /// this rank's window, team barrier, every element summed over every rank's window in rank
    /// order (rank 0's value first) into `out`, and a closing barrier before the window is
    /// written again.
    fn win_allreduce_f32(w: Window, input: GlobalPtr<f32>, out: GlobalPtr<f32>, n: u64) {
        let t = Threads::block();
        for i in t.stride(n) {
            w.local::<f32>(i * 4).as_ptr().write(input.add(i as usize).as_ptr().read());
        }
        team_barrier(&w);
        for i in t.stride(n) {
            let mut sum = w.peer::<f32>(0, i * 4).as_ptr().read();
            for r in 1..w.size {
                sum += w.peer::<f32>(r, i * 4).as_ptr().read();
            }
            out.add(i as usize).as_ptr().write(sum);
        }
        team_barrier(&w);
    }
}

// The README's fused kernel ("Symmetric memory windows"), line for line.

/// `out = (sum over ranks of alpha * x) + beta` in one launch, on a window of `size * n` f32 with
/// one region per rank (one block per rank; launch `round` = 1, 2, ...).
///
/// # Safety
/// `w` is a live window of `size * n` f32 with slot 0; `x` and `out` hold `n` f32; every rank
/// launches one block of the same size with the same `n` and `round`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scaled_sum_window(
    w: Window,
    x: GlobalPtr<f32>,
    out: GlobalPtr<f32>,
    n: u64,
    alpha: f32,
    beta: f32,
    round: u64,
) {
    let t = Threads::block();
    let mine = w.rank as u64 * 4 * n; // my region, at the same offset in every rank's window
    // SAFETY: the kernel's contract (its `# Safety` above).
    unsafe {
        for i in t.stride(n) {
            // The elementwise step, stored straight into my region of every rank's window.
            let v = alpha * x.add(i as usize).as_ptr().read();
            for p in 0..w.size {
                w.peer::<f32>(p, mine + 4 * i).as_ptr().write(v);
            }
        }
        Scope::Block.sync(); // every thread's stores are ordered before the signals
        if t.index == 0 {
            for p in 0..w.size {
                w.signal(p, 0); // release: my region of rank p's window is written
            }
            for q in 0..w.size {
                w.wait_signal(0, q, round, BUDGET); // acquire: rank q's region of mine is
            }
        }
        Scope::Block.sync();
        for i in t.stride(n) {
            let mut sum = w.local::<f32>(4 * i).as_ptr().read(); // rank order: same bits everywhere
            for r in 1..w.size {
                sum += w.local::<f32>(r as u64 * 4 * n + 4 * i).as_ptr().read();
            }
            out.add(i as usize).as_ptr().write(sum + beta);
        }
        w.barrier_in(Scope::Block, BUDGET); // every region read before the next launch writes
    }
}

kernels! {
    /// In-place f32 allreduce (16-byte vectors) of `bytes` at `offset` of every rank's window:
    /// the code of `switch_allreduce_f32x4` and `emu_allreduce_f32x4`
    /// (`crate::switch::allreduce_in_place`) on `w.switch_group(offset, bytes, blockIdx.x)`.
    fn win_switch_allreduce_f32x4(w: Window, offset: u64, bytes: u64, budget: SpinBudget) {
        allreduce_in_place::<_, F32x4>(w.switch_group(offset, bytes, sreg::ctaid_x()), w.rank, w.size, budget);
    }
    /// `win_switch_allreduce_f32x4` for bf16 (8 lanes per access, bf16 accumulation in rank order).
    fn win_switch_allreduce_bf16x8(w: Window, offset: u64, bytes: u64, budget: SpinBudget) {
        allreduce_in_place::<_, Bf16x8>(w.switch_group(offset, bytes, sreg::ctaid_x()), w.rank, w.size, budget);
    }
    /// `rounds` barrier rounds of every block, on the switch group of the window from `offset`
    /// to its end with slot `blockIdx.x`: with data when `relaxed == 0`
    /// (`crate::switch::barrier_rounds`, which reports into `report` as `emu_barrier_rounds`
    /// does), else the relaxed signal and wait by each block's thread 0 alone, without data
    /// (the host checks the slots' signal words).
    fn win_switch_barrier_rounds(w: Window, offset: u64, rounds: u32, relaxed: u32, report: *mut u64, budget: SpinBudget) {
        let chan = w.switch_group(offset, w.bytes.saturating_sub(offset), sreg::ctaid_x());
        if relaxed == 0 {
            barrier_rounds(&chan, w.rank, w.size, rounds, report, budget);
        } else if sreg::tid_x() == 0 {
            for _ in 0..rounds {
                chan.relaxed_signal();
                chan.relaxed_wait(budget);
            }
        }
    }
}
