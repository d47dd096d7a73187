//! Device halves of the multi-rank pattern tests (`tests/mp_patterns/`). Tables of per-rank
//! addresses and handles live in device memory, indexed by rank; this rank's own entry of a
//! semaphore or channel table is unused.

use core::ptr::{read_volatile, write_volatile};

use mscclpp_device::atomic::{self, AcqRel, Gpu};
use mscclpp_device::bulk::{self, BulkPipeline};
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::copy::Threads;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::{GlobalPtr, SharedPtr};
use mscclpp_device::ptx::{atom_red, misc::barrier_sync, sreg};
use mscclpp_device::semaphore::MemoryDevice2DeviceSemaphore;

use crate::kernels;

const BUDGET: SpinBudget = SpinBudget::from_millis(20_000);
/// Most ranks a gather table holds.
const MAX_RANKS: usize = 8;

/// The value the all-to-all pattern puts at word `i` of the chunk rank `from` sends rank `to` in
/// iteration `k` (a mixing hash, so misplaced or stale words are caught).
#[inline(always)]
pub fn a2a_word(k: u32, from: u32, to: u32, i: u32) -> u32 {
    let mut x = k.wrapping_mul(0x9e37_79b9) ^ from.wrapping_mul(0x85eb_ca6b) ^ to.wrapping_mul(0xc2b2_ae35) ^ i;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x
}

#[inline(always)]
unsafe fn at(table: *const u64, r: u32) -> GlobalPtr<u8> {
    // SAFETY: the caller passes a table of `world` addresses and r < world.
    GlobalPtr::from_addr(unsafe { *table.add(r as usize) })
}

/// The wrapping sum of word `i` over the `world` per-rank slices of `words` words in `buf` (a
/// pipeline stage holding one tile from every rank).
///
/// # Safety
/// `buf` points to `world * words` readable i32 and `i < words`.
#[inline(always)]
unsafe fn sum_over_ranks(buf: *const i32, world: u32, words: u32, i: u32) -> i32 {
    let mut s = 0i32;
    for r in 0..world {
        // SAFETY: `r * words + i < world * words` (caller's contract).
        s = s.wrapping_add(unsafe { *buf.add((r * words + i) as usize) });
    }
    s
}

kernels! {
    /// Staged dispatch: block `p` bulk-copies this rank's slice `p` of `send` into receive slot
    /// `me` of rank `p`, waits for the stores, signals rank `p`, then waits for rank `p`'s signal.
    fn mp_dispatch(send: GlobalPtr<u8>, recv: *const u64, sems: *const MemoryDevice2DeviceSemaphore, world: u32, me: u32, bytes: u64, tile: u32) {
        let p = sreg::ctaid_x();
        if p >= world || p == me || sreg::tid_x() != 0 { return; }
        let pipe = BulkPipeline::<2>::new(SharedPtr::dynamic(), tile, true);
        pipe.copy(at(recv, p).byte_add((me as u64 * bytes) as usize), send.byte_add((p as u64 * bytes) as usize), bytes, 0, 1, BUDGET);
        let s = &*sems.add(p as usize);
        // Partner: rank p's wait; the bulk stores above completed (copy waits for them).
        s.signal();
        s.wait(BUDGET);
    }

    /// Multi-source combine: tile `t` of the output (i32 sum over all ranks) is gathered from
    /// every rank's `srcs[r]` in one barrier phase, two stages deep, summed in shared memory.
    fn mp_combine(srcs: *const u64, world: u32, out: *mut i32, bytes: u64, tile: u32) {
        let leader = sreg::tid_x() == 0;
        let pipe = BulkPipeline::<2>::new(SharedPtr::dynamic(), world * tile, leader);
        barrier_sync();
        let all = bytes.div_ceil(tile as u64);
        let (b, g) = (sreg::ctaid_x() as u64, sreg::nctaid_x() as u64);
        let count = if b < all { (all - b).div_ceil(g) as u32 } else { 0 };
        let tile_of = |j: u32| b + j as u64 * g;
        let len_of = |j: u32| -> u32 { let o = tile_of(j) * tile as u64; if o + tile as u64 <= bytes { tile } else { (bytes - o) as u32 } };
        let issue = |j: u32| {
            let mut list = [(GlobalPtr::<u8>::null(), 0u32); MAX_RANKS];
            for r in 0..world {
                list[r as usize] = (at(srcs, r).byte_add((tile_of(j) * tile as u64) as usize), len_of(j));
            }
            pipe.load_gather(j, &list[..world as usize]);
        };
        if leader {
            for j in 0..count.min(2) { issue(j); }
        }
        for j in 0..count {
            let buf = pipe.wait(j, BUDGET).cast::<i32>().as_generic();
            let len = len_of(j);
            let words = len / 4;
            let base = (tile_of(j) * tile as u64 / 4) as usize;
            for i in Threads::block().stride(words) {
                *out.add(base + i as usize) = sum_over_ranks(buf, world, words, i);
            }
            // Every thread is done with this stage before it is refilled.
            barrier_sync();
            if leader && j + 2 < count {
                bulk::bulk_fence();
                issue(j + 2);
            }
        }
    }

    /// All-pairs barrier, `rounds` times: thread t (t != me) writes the round into its slot on
    /// rank t, signals rank t and waits for it; after a CTA barrier it checks the slot rank t
    /// wrote here. Slots alternate by round parity. `report[0]` += stale slots, `report[1]` +=
    /// slots checked (`rounds * (world - 1)` in all).
    fn mp_barrier(sems: *const MemoryDevice2DeviceSemaphore, world: u32, me: u32, rounds: u32, remote_slots: *const u64, my_slots: *const u64, report: *mut u64) {
        let t = sreg::tid_x();
        let part = t < world && t != me;
        let (mut bad, mut checked) = (0u64, 0u64);
        for r in 1..=rounds as u64 {
            if part {
                let slot = (*remote_slots.add(t as usize) as *mut u64).add((me * 2) as usize + (r % 2) as usize);
                write_volatile(slot, r);
                let s = &*sems.add(t as usize);
                // Partner: rank t's wait (its acquire makes our slot write visible there).
                s.signal();
                s.wait(BUDGET);
            }
            barrier_sync();
            if part {
                if read_volatile(my_slots.add((t * 2) as usize + (r % 2) as usize)) != r {
                    bad += 1;
                }
                checked += 1;
            }
        }
        if part {
            atom_red::red_relaxed_gpu_add_u64(report, bad);
            atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
        }
    }

    /// Port-channel all-to-all, `iters` iterations: fill `src` (chunk p for rank p), put it with a
    /// signal into slot `me` of rank p's receive buffer (double-buffered by iteration parity),
    /// wait for every peer, check what arrived, then flush so `src` can be rewritten.
    /// `report[0]` += wrong words, `report[1]` += words checked (`iters * (world - 1) *
    /// chunk_words` in all).
    fn mp_port_alltoall(chans: *const PortChannel, world: u32, me: u32, chunk_words: u32, iters: u32, src: *mut u32, recv: *const u32, report: *mut u64) {
        let t = sreg::tid_x();
        let n = world * chunk_words;
        let (mut bad, mut checked) = (0u64, 0u64);
        for k in 0..iters {
            for i in Threads::block().stride(n) {
                write_volatile(src.add(i as usize), a2a_word(k, me, i / chunk_words, i % chunk_words));
            }
            barrier_sync();
            if t < world && t != me {
                let c = &*chans.add(t as usize);
                let bytes = (chunk_words * 4) as u64;
                c.put_with_signal((((k % 2) * world + me) as u64) * bytes, t as u64 * bytes, bytes, BUDGET);
                // Partner: rank t's proxy signal after its put into our slot t.
                c.wait(BUDGET);
            }
            barrier_sync();
            let base = ((k % 2) * n) as usize;
            for i in Threads::block().stride(n) {
                let from = i / chunk_words;
                if from != me {
                    if read_volatile(recv.add(base + i as usize)) != a2a_word(k, from, me, i % chunk_words) {
                        bad += 1;
                    }
                    checked += 1;
                }
            }
            barrier_sync();
            // One flush drains this rank's proxy: every put above has completed after it.
            if t == if me == 0 { 1 } else { 0 } && world > 1 {
                (*chans.add(t as usize)).flush(BUDGET);
            }
            barrier_sync();
        }
        atom_red::red_relaxed_gpu_add_u64(report, bad);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
    }

    /// All-gather: block p bulk-copies `src` into slot `me` of rank p's `dsts[p]` (p == me: this
    /// rank's own buffer), then for p != me signals rank p and waits for it.
    fn mp_allgather(src: GlobalPtr<u8>, dsts: *const u64, sems: *const MemoryDevice2DeviceSemaphore, world: u32, me: u32, bytes: u64, tile: u32) {
        let p = sreg::ctaid_x();
        if p >= world || sreg::tid_x() != 0 { return; }
        let pipe = BulkPipeline::<2>::new(SharedPtr::dynamic(), tile, true);
        pipe.copy(at(dsts, p).byte_add((me as u64 * bytes) as usize), src, bytes, 0, 1, BUDGET);
        if p != me {
            let s = &*sems.add(p as usize);
            // Partner: rank p's wait.
            s.signal();
            s.wait(BUDGET);
        }
    }

    /// `out[i] = sum over r of slots[r * n + i]` (i32, wrapping), grid-stride.
    fn mp_reduce_slots(slots: *const i32, world: u32, n: u32, out: *mut i32) {
        for i in Threads::grid().stride(n) {
            let mut s = 0i32;
            for r in 0..world {
                s = s.wrapping_add(*slots.add((r * n + i) as usize));
            }
            *out.add(i as usize) = s;
        }
    }

    /// One-shot allreduce (i32 sum) for large inputs: this rank reduces its chunk (`bytes / world`
    /// at offset `me * chunk`) by gathering it from every rank's input, and bulk-stores the sum
    /// into every rank's output; the last block to finish then signals and waits for every peer,
    /// so when the kernel ends every rank's chunk has landed here.
    fn mp_allreduce(srcs: *const u64, outs: *const u64, sems: *const MemoryDevice2DeviceSemaphore, world: u32, me: u32, bytes: u64, tile: u32, done: *mut u32) {
        let leader = sreg::tid_x() == 0;
        let pipe = BulkPipeline::<2>::new(SharedPtr::dynamic(), world * tile, leader);
        let result = SharedPtr::<u8>::dynamic().byte_add(BulkPipeline::<2>::smem_bytes(world * tile) as usize);
        barrier_sync();
        let chunk = bytes / world as u64;
        let off = me as u64 * chunk;
        let all = chunk.div_ceil(tile as u64);
        let (b, g) = (sreg::ctaid_x() as u64, sreg::nctaid_x() as u64);
        let count = if b < all { (all - b).div_ceil(g) as u32 } else { 0 };
        let pos = |j: u32| off + (b + j as u64 * g) * tile as u64;
        let len_of = |j: u32| -> u32 { let o = (b + j as u64 * g) * tile as u64; if o + tile as u64 <= chunk { tile } else { (chunk - o) as u32 } };
        let issue = |j: u32| {
            let mut list = [(GlobalPtr::<u8>::null(), 0u32); MAX_RANKS];
            for r in 0..world {
                list[r as usize] = (at(srcs, r).byte_add(pos(j) as usize), len_of(j));
            }
            pipe.load_gather(j, &list[..world as usize]);
        };
        if leader {
            for j in 0..count.min(2) { issue(j); }
        }
        for j in 0..count {
            let buf = pipe.wait(j, BUDGET).cast::<i32>().as_generic();
            // The result tile is free once the previous tile's stores have read it.
            if leader { bulk::bulk_store_wait_source::<0>(); }
            barrier_sync();
            let words = len_of(j) / 4;
            let res = result.cast::<i32>().as_generic();
            for i in Threads::block().stride(words) {
                *res.add(i as usize) = sum_over_ranks(buf, world, words, i);
            }
            // Partner: the bulk stores below read the result through the async proxy.
            bulk::bulk_fence();
            barrier_sync();
            if leader {
                for r in 0..world {
                    bulk::bulk_store(at(outs, r).byte_add(pos(j) as usize), result, len_of(j));
                }
                bulk::bulk_store_commit();
                if j + 2 < count {
                    issue(j + 2);
                }
            }
        }
        if leader {
            bulk::bulk_store_wait::<0>();
            // Partner: the acquire of the last block's fetch_add.
            let before = atomic::fetch_add::<AcqRel, Gpu, u32>(done, 1);
            if before + 1 == sreg::nctaid_x() {
                for p in 0..world {
                    if p != me { (*sems.add(p as usize)).signal(); }
                }
                for p in 0..world {
                    if p != me { (*sems.add(p as usize)).wait(BUDGET); }
                }
            }
        }
    }
}
