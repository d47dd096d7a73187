//! Device halves of the bulk-copy tests and benches.

use mscclpp_device::bulk::{self, BulkBarrier, BulkPipeline, BulkReduceOp};
use mscclpp_device::copy::Threads;
use mscclpp_device::op;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::{GlobalPtr, SharedPtr};
use mscclpp_device::ptx::{misc::barrier_sync, sreg};

use crate::kernels;

const BUDGET: SpinBudget = SpinBudget::DEFAULT;

/// Barrier at the start of dynamic shared memory, data from byte 128.
#[inline(always)]
fn layout() -> (SharedPtr<BulkBarrier>, SharedPtr<u8>) {
    let base = SharedPtr::<u8>::dynamic();
    (base.cast(), base.byte_add(128))
}

kernels! {
    /// One thread: global -> shared (one bulk load on one barrier) -> global (one bulk store).
    fn bulk_roundtrip(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u32) {
        if sreg::tid_x() != 0 { return; }
        let (bar, tile) = layout();
        bar.init(1);
        bar.arrive_and_expect(bytes);
        bulk::bulk_load(tile, src, bytes, bar); // trap site: bulk_roundtrip size check
        let mut phase = 0;
        bar.wait(&mut phase, BUDGET);
        bulk::bulk_store(dst, tile, bytes);
        bulk::bulk_store_commit();
        bulk::bulk_store_wait::<0>();
    }

    /// Gathers `n` tiles of `tile_bytes` from `n` different source buffers (`srcs[i]`) into one
    /// shared buffer under ONE barrier phase, then every thread copies the buffer out with
    /// generic loads (so the data must be complete when the phase completes).
    fn bulk_gather(dst: *mut u32, srcs: *const GlobalPtr<u8>, n: u32, tile_bytes: u32) {
        let (bar, buf) = layout();
        if sreg::tid_x() == 0 {
            bar.init(1);
            bar.arrive_and_expect(n * tile_bytes);
            for i in 0..n {
                bulk::bulk_load(buf.byte_add((i * tile_bytes) as usize), *srcs.add(i as usize), tile_bytes, bar);
            }
        }
        barrier_sync();
        let mut phase = 0;
        bar.wait(&mut phase, BUDGET);
        let words = (n * tile_bytes / 4) as usize;
        let b = buf.cast::<u32>().as_generic();
        for i in Threads::block().stride(words) {
            *dst.add(i) = *b.add(i);
        }
    }

    /// One barrier, initialised once, reused for `phases` phases: phase k loads tile k of `src`,
    /// every thread checks the phase bit flipped, then the leader stores it to tile k of `dst`.
    fn bulk_barrier_reuse(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, tile_bytes: u32, phases: u32) {
        let (bar, tile) = layout();
        let leader = sreg::tid_x() == 0;
        if leader { bar.init(1); }
        barrier_sync();
        let mut phase = 0;
        for k in 0..phases {
            let off = (k as usize) * tile_bytes as usize;
            if leader {
                bar.arrive_and_expect(tile_bytes);
                bulk::bulk_load(tile, src.byte_add(off), tile_bytes, bar);
            }
            bar.wait(&mut phase, BUDGET);
            if leader {
                bulk::bulk_store(dst.byte_add(off), tile, tile_bytes);
                bulk::bulk_store_commit();
                bulk::bulk_store_wait_source::<0>();
            }
            // Nobody may arm the barrier's next phase before every thread saw this one complete.
            barrier_sync();
        }
        if leader { bulk::bulk_store_wait::<0>(); }
    }

    /// Double-buffered store pipeline: all threads write tile k into buffer k % 2 with generic
    /// stores (`out = 3 * in + k`), fence, the leader bulk-stores it; before buffer k % 2 is
    /// rewritten for tile k + 2, the leader waits until at most one store still reads its source.
    fn bulk_store_double_buffer(dst: GlobalPtr<u32>, src: *const u32, tiles: u32, tile_bytes: u32) {
        let base = SharedPtr::<u8>::dynamic();
        let leader = sreg::tid_x() == 0;
        let words = (tile_bytes / 4) as usize;
        for k in 0..tiles {
            let buf = base.byte_add(((k % 2) * tile_bytes) as usize).cast::<u32>();
            if k >= 2 {
                // Buffer k % 2 was the source of tile k - 2: at most one newer group may still read.
                if leader { bulk::bulk_store_wait_source::<1>(); }
                barrier_sync();
            }
            let g = buf.as_generic();
            for i in Threads::block().stride(words) {
                *g.add(i) = 3 * *src.add(k as usize * words + i) + k;
            }
            // Partner: the bulk store below reads these generic writes through the async proxy.
            bulk::bulk_fence();
            barrier_sync();
            if leader {
                bulk::bulk_store(dst.add(k as usize * words), buf, tile_bytes);
                bulk::bulk_store_commit();
            }
        }
        if leader { bulk::bulk_store_wait::<0>(); }
    }

    /// Streams `bytes` from `src` to `dst` through a 2-stage pipeline per CTA (thread 0 of each
    /// CTA), the tiles interleaved across CTAs.
    fn bulk_copy_s2(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32) {
        stream_copy::<2>(dst, src, bytes, tile_bytes);
    }
    /// As `bulk_copy_s2` with 3 stages.
    fn bulk_copy_s3(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32) {
        stream_copy::<3>(dst, src, bytes, tile_bytes);
    }
    /// As `bulk_copy_s2` with 4 stages.
    fn bulk_copy_s4(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32) {
        stream_copy::<4>(dst, src, bytes, tile_bytes);
    }

    /// Streams `bytes` of f32 from `src`, bulk-reduce-storing (add) every tile into `dst`.
    fn bulk_reduce_stream_f32(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32) {
        stream_reduce::<f32, op::Add, 3>(dst, src, bytes, tile_bytes, 1);
    }
    /// Streams `bytes` of u64 from `src`, bulk-reduce-storing (add) every tile into `dst`, `reps`
    /// times over (for concurrent-accumulation tests).
    fn bulk_reduce_stream_u64(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32, reps: u32) {
        stream_reduce::<u64, op::Add, 3>(dst, src, bytes, tile_bytes, reps);
    }

    /// Arms a barrier for 16 bytes that never arrive and waits with a `budget_ns` budget: the wait
    /// must trap with its name.
    fn bulk_wait_timeout(budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        let (bar, _) = layout();
        bar.init(1);
        bar.arrive_and_expect(16);
        let mut phase = 0;
        bar.wait(&mut phase, SpinBudget::from_nanos(budget_ns));
    }

    /// Plain SM copy with 16-byte vectors, grid-stride (baseline).
    fn sm_copy_v4(dst: *mut [u32; 4], src: *const [u32; 4], n: u64) {
        for i in Threads::grid().stride(n) {
            *dst.add(i as usize) = *src.add(i as usize);
        }
    }
}

#[inline(always)]
unsafe fn stream_copy<const N: usize>(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, tile_bytes: u32) {
    if sreg::tid_x() != 0 {
        return;
    }
    // SAFETY: the launch gives BulkPipeline::<N>::smem_bytes(tile_bytes) bytes of dynamic shared memory.
    unsafe {
        let pipe = BulkPipeline::<N>::new(SharedPtr::dynamic(), tile_bytes, true);
        pipe.copy(dst, src, bytes, sreg::ctaid_x(), sreg::nctaid_x(), BUDGET);
    }
}

/// Thread 0 of each CTA streams the tiles `ctaid, ctaid + nctaid, ...` of `src` through an
/// N-stage pipeline and reduce-stores each into the same place of `dst`, `reps` times over.
#[inline(always)]
unsafe fn stream_reduce<T, O: BulkReduceOp<T>, const N: usize>(
    dst: GlobalPtr<u8>,
    src: GlobalPtr<u8>,
    bytes: u64,
    tile_bytes: u32,
    reps: u32,
) {
    if sreg::tid_x() != 0 {
        return;
    }
    let tile = tile_bytes as u64;
    let all = bytes.div_ceil(tile);
    let (part, parts) = (sreg::ctaid_x() as u64, sreg::nctaid_x() as u64);
    let per = if part < all { (all - part).div_ceil(parts) as u32 } else { 0 };
    if per == 0 {
        return;
    }
    let total = per * reps;
    // Stream tile j is tile (j % per) of this CTA's share.
    let at = |j: u32| ((part + (j % per) as u64 * parts) * tile) as usize;
    let size = |j: u32| -> u32 {
        let o = at(j) as u64;
        if o + tile <= bytes { tile as u32 } else { (bytes - o) as u32 }
    };
    // SAFETY: shared memory sized by the host as for the copy pipeline; every range lies in [0, bytes).
    unsafe {
        let pipe = BulkPipeline::<N>::new(SharedPtr::dynamic(), tile_bytes, true);
        for j in 0..(N as u32).min(total) {
            pipe.load(j, src.byte_add(at(j)), size(j));
        }
        for k in 0..total {
            let buf = pipe.wait(k, BUDGET);
            bulk::bulk_reduce_store::<T, O>(dst.byte_add(at(k)).cast(), buf.cast(), size(k));
            bulk::bulk_store_commit();
            if k >= 1 && k - 1 + (N as u32) < total {
                bulk::bulk_store_wait_source::<1>();
                let r = k - 1 + N as u32;
                pipe.load(r, src.byte_add(at(r)), size(r));
            }
        }
        bulk::bulk_store_wait::<0>();
    }
}

/// One thread loads `bytes` of `T` into shared memory, then reduce-stores them into `dst`.
#[inline(always)]
unsafe fn reduce_once<T, O: BulkReduceOp<T>>(dst: GlobalPtr<T>, src: GlobalPtr<T>, bytes: u32) {
    if sreg::tid_x() != 0 {
        return;
    }
    let (bar, tile) = layout();
    // SAFETY: the launch gives 128 + bytes of dynamic shared memory; ranges valid (host contract).
    unsafe {
        bar.init(1);
        bar.arrive_and_expect(bytes);
        bulk::bulk_load(tile.cast::<T>(), src, bytes, bar);
        let mut phase = 0;
        bar.wait(&mut phase, BUDGET);
        bulk::bulk_reduce_store::<T, O>(dst, tile.cast(), bytes);
        bulk::bulk_store_commit();
        bulk::bulk_store_wait::<0>();
    }
}

macro_rules! reduce_kernels {
    ($($name:ident: $t:ty, $op:ident;)*) => {
        kernels! { $(
            /// Loads `bytes` of the element type and reduce-stores them into `dst` (one thread).
            fn $name(dst: GlobalPtr<$t>, src: GlobalPtr<$t>, bytes: u32) { reduce_once::<$t, op::$op>(dst, src, bytes); }
        )* }
    };
}

reduce_kernels! {
    bulk_reduce_add_f16: half::f16, Add;
    bulk_reduce_add_bf16: half::bf16, Add;
    bulk_reduce_add_f32: f32, Add;
    bulk_reduce_add_f64: f64, Add;
    bulk_reduce_add_u32: u32, Add;
    bulk_reduce_add_i32: i32, Add;
    bulk_reduce_add_u64: u64, Add;
    bulk_reduce_min_f16: half::f16, Min;
    bulk_reduce_min_bf16: half::bf16, Min;
    bulk_reduce_min_u32: u32, Min;
    bulk_reduce_min_i32: i32, Min;
    bulk_reduce_min_u64: u64, Min;
    bulk_reduce_min_i64: i64, Min;
    bulk_reduce_max_f16: half::f16, Max;
    bulk_reduce_max_bf16: half::bf16, Max;
    bulk_reduce_max_u32: u32, Max;
    bulk_reduce_max_i32: i32, Max;
    bulk_reduce_max_u64: u64, Max;
    bulk_reduce_max_i64: i64, Max;
    bulk_reduce_inc_u32: u32, Inc;
    bulk_reduce_dec_u32: u32, Dec;
    bulk_reduce_and_u32: u32, And;
    bulk_reduce_and_i32: i32, And;
    bulk_reduce_and_u64: u64, And;
    bulk_reduce_and_i64: i64, And;
    bulk_reduce_or_u32: u32, Or;
    bulk_reduce_or_i32: i32, Or;
    bulk_reduce_or_u64: u64, Or;
    bulk_reduce_or_i64: i64, Or;
    bulk_reduce_xor_u32: u32, Xor;
    bulk_reduce_xor_i32: i32, Xor;
    bulk_reduce_xor_u64: u64, Xor;
    bulk_reduce_xor_i64: i64, Xor;
}
