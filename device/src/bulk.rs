//! Hopper bulk copies (the TMA engine's non-tensor `cp.async.bulk` forms) and their barrier.
//!
//! ```text
//!  load:   leader: bar.arrive_and_expect(bytes) ─┐
//!          leader: bulk_load(dst_smem, src, bytes, bar) ──► copy engine ──► complete_tx(bytes)
//!          every consumer: bar.wait(&mut phase) ◄──────────────────────────── phase flips
//!          bulk_fence() if generic stores to that tile follow and a bulk op reads it later
//!
//!  store:  write tile (generic st) ─► bulk_fence() ─► bulk_store(dst, tile) ─► bulk_store_commit()
//!          bulk_store_wait_source::<N>()  → tile reusable        (sources read)
//!          bulk_store_wait::<N>()         → destination written  (signal a peer only after this)
//! ```
//!
//! The trap in expectations: a barrier phase completes when its pending arrivals reach zero
//! *and* its transaction count is balanced. Every `expect` of a batch must therefore happen
//! before the arrival that completes the phase; otherwise the phase may complete early and a
//! consumer reads a tile that is still being written. [`SharedPtr::<BulkBarrier>::arrive_and_expect`]
//! with the batch total, issued before the copies, is the safe form.
//!
//! Addresses are typed ([`SharedPtr`] vs [`GlobalPtr`](crate::ptr::GlobalPtr)), must be 16-byte aligned, and sizes must be
//! non-zero multiples of 16. Debug builds (or feature `checks`) verify this on the device and trap;
//! host code validates with [`validate`] before launch.

use crate::op;
use crate::ptr::SharedPtr;

/// An `mbarrier` object in shared memory, counting arrivals and transaction bytes of bulk copies.
/// 8 bytes, 8-byte aligned: host code uses its size to lay out dynamic shared memory.
///
/// Device code works on `SharedPtr<BulkBarrier>`.
#[repr(C, align(8))]
pub struct BulkBarrier {
    _state: u64,
}
static_assertions::assert_eq_size!(BulkBarrier, u64);
static_assertions::assert_eq_align!(BulkBarrier, u64);

/// Alignment every bulk address must have.
pub const BULK_ALIGN: u64 = 16;
/// Largest dynamic shared memory one CTA can have on sm_90 (227 KiB).
pub const MAX_SHARED_BYTES_SM90: u32 = 227 * 1024;

/// Why bulk-copy arguments were rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkArgError {
    /// The destination address is not 16-byte aligned.
    DstMisaligned,
    /// The source address is not 16-byte aligned.
    SrcMisaligned,
    /// The size is zero.
    ZeroSize,
    /// The size is not a multiple of 16 bytes.
    SizeNotMultipleOf16,
    /// The size does not fit the 32-bit size operand.
    SizeTooLarge,
}

impl BulkArgError {
    /// A one-line description.
    pub const fn message(self) -> &'static str {
        match self {
            Self::DstMisaligned => "bulk copy destination is not 16-byte aligned",
            Self::SrcMisaligned => "bulk copy source is not 16-byte aligned",
            Self::ZeroSize => "bulk copy size is zero",
            Self::SizeNotMultipleOf16 => "bulk copy size is not a multiple of 16 bytes",
            Self::SizeTooLarge => "bulk copy size does not fit in 32 bits",
        }
    }
}

impl core::fmt::Display for BulkArgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.message())
    }
}

/// Checks the arguments of one bulk copy: both addresses 16-byte aligned, size a non-zero
/// multiple of 16 that fits in 32 bits. The same rule the device asserts in debug builds.
pub const fn validate(dst: u64, src: u64, bytes: u64) -> Result<(), BulkArgError> {
    if !dst.is_multiple_of(BULK_ALIGN) {
        Err(BulkArgError::DstMisaligned)
    } else if !src.is_multiple_of(BULK_ALIGN) {
        Err(BulkArgError::SrcMisaligned)
    } else if bytes == 0 {
        Err(BulkArgError::ZeroSize)
    } else if !bytes.is_multiple_of(16) {
        Err(BulkArgError::SizeNotMultipleOf16)
    } else if bytes > u32::MAX as u64 {
        Err(BulkArgError::SizeTooLarge)
    } else {
        Ok(())
    }
}

mod sealed {
    pub trait Sealed<T> {}
}

/// An (element type, operation) pair that `cp.reduce.async.bulk` to global memory accepts.
///
/// Sealed: only the 27 PTX forms are implemented (f16/bf16 add uses `.noftz`; bitwise ops on
/// 32/64-bit integers map to `.b32`/`.b64`), so an unsupported pair is a compile error:
///
/// ```compile_fail
/// fn needs<T, O: mscclpp_device::bulk::BulkReduceOp<T>>() {}
/// needs::<f32, mscclpp_device::op::Xor>(); // no xor on floats
/// ```
pub trait BulkReduceOp<T>: sealed::Sealed<T> {
    /// The instruction, from the wrapper's row: e.g.
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`.
    const PTX: &'static str;

    /// Issues the reduction.
    ///
    /// # Safety
    /// As for [`bulk_reduce_store`].
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn issue(dst: *mut u8, src: SharedPtr<u8>, bytes: u32);
}

/// Implements [`BulkReduceOp`] for rows `Op, Type => wrapper;` of `ptx::cp_async_bulk::REDUCE`: a
/// row names the wrapper only, its `PTX` is the mnemonic of the wrapper's row (a wrapper missing
/// from the table fails the build on every target).
macro_rules! reduce_pairs {
    ($($op:ident, $t:ty => $wrapper:ident;)*) => { $(
        impl sealed::Sealed<$t> for op::$op {}
        // Evaluated on every build, so a wrapper without a row fails it.
        const _: &str = <op::$op as BulkReduceOp<$t>>::PTX;
        impl BulkReduceOp<$t> for op::$op {
            const PTX: &'static str =
                crate::ptx::check::mnemonic(crate::ptx::cp_async_bulk::REDUCE, stringify!($wrapper));
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn issue(dst: *mut u8, src: SharedPtr<u8>, bytes: u32) {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::cp_async_bulk::$wrapper(dst, src, bytes) }
            }
        }
    )* };
}

reduce_pairs! {
    Add, half::f16 => cp_reduce_async_bulk_add_noftz_f16;
    Add, half::bf16 => cp_reduce_async_bulk_add_noftz_bf16;
    Add, f32 => cp_reduce_async_bulk_add_f32;
    Add, f64 => cp_reduce_async_bulk_add_f64;
    Add, u32 => cp_reduce_async_bulk_add_u32;
    Add, i32 => cp_reduce_async_bulk_add_s32;
    Add, u64 => cp_reduce_async_bulk_add_u64;
    Min, half::f16 => cp_reduce_async_bulk_min_f16;
    Min, half::bf16 => cp_reduce_async_bulk_min_bf16;
    Min, u32 => cp_reduce_async_bulk_min_u32;
    Min, i32 => cp_reduce_async_bulk_min_s32;
    Min, u64 => cp_reduce_async_bulk_min_u64;
    Min, i64 => cp_reduce_async_bulk_min_s64;
    Max, half::f16 => cp_reduce_async_bulk_max_f16;
    Max, half::bf16 => cp_reduce_async_bulk_max_bf16;
    Max, u32 => cp_reduce_async_bulk_max_u32;
    Max, i32 => cp_reduce_async_bulk_max_s32;
    Max, u64 => cp_reduce_async_bulk_max_u64;
    Max, i64 => cp_reduce_async_bulk_max_s64;
    Inc, u32 => cp_reduce_async_bulk_inc_u32;
    Dec, u32 => cp_reduce_async_bulk_dec_u32;
    And, u32 => cp_reduce_async_bulk_and_b32;
    And, i32 => cp_reduce_async_bulk_and_b32;
    And, u64 => cp_reduce_async_bulk_and_b64;
    And, i64 => cp_reduce_async_bulk_and_b64;
    Or, u32 => cp_reduce_async_bulk_or_b32;
    Or, i32 => cp_reduce_async_bulk_or_b32;
    Or, u64 => cp_reduce_async_bulk_or_b64;
    Or, i64 => cp_reduce_async_bulk_or_b64;
    Xor, u32 => cp_reduce_async_bulk_xor_b32;
    Xor, i32 => cp_reduce_async_bulk_xor_b32;
    Xor, u64 => cp_reduce_async_bulk_xor_b64;
    Xor, i64 => cp_reduce_async_bulk_xor_b64;
}

/// Bytes of dynamic shared memory a [`BulkPipeline`] of `stages` stages of `tile_bytes` needs.
pub const fn pipeline_smem_bytes(stages: u32, tile_bytes: u32) -> u32 {
    // Barriers first (8 bytes each), tiles from the next 128-byte boundary.
    let bars = (stages * 8).div_ceil(128) * 128;
    bars + stages * tile_bytes
}

/// An N-stage ring of shared-memory tiles, each with its own [`BulkBarrier`], for streaming data
/// global -> shared -> (compute) -> global without hand-managed phase bits.
///
/// Tile `k` lives in stage `k % N`; its barrier phase parity is `(k / N) & 1`, so any thread
/// that consumes tiles in order knows the phase from `k` alone. One *leader* thread issues loads
/// (and, for [`BulkPipeline::copy`], stores); every thread may wait.
///
/// Reusing a stage for tile `k + N` is the caller's decision: all readers of tile `k` must be
/// done (a CTA barrier for generic readers, `bulk_store_wait_source` for bulk stores).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(target_arch = "nvptx64"), allow(dead_code))]
pub struct BulkPipeline<const N: usize> {
    bars: SharedPtr<BulkBarrier>,
    tiles: SharedPtr<u8>,
    tile_bytes: u32,
}

impl<const N: usize> BulkPipeline<N> {
    /// Bytes of shared memory this pipeline needs for `tile_bytes` tiles.
    pub const fn smem_bytes(tile_bytes: u32) -> u32 {
        pipeline_smem_bytes(N as u32, tile_bytes)
    }
    /// The tile size in bytes.
    pub const fn tile_bytes(&self) -> u32 {
        self.tile_bytes
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::poll::{SpinBudget, spin_until};
    use crate::ptr::GlobalPtr;
    use crate::ptx::{cp_async_bulk as cp, fence, mbarrier as mb};

    /// Traps with a message naming the caller's caller: every public copy below is
    /// `#[track_caller]`, so the location printed is the kernel's call site.
    #[inline(always)]
    #[track_caller]
    fn check(dst: u64, src: u64, bytes: u32) {
        if crate::ASSERTS
            && let Err(e) = validate(dst, src, bytes as u64)
        {
            crate::poll::fail(match e {
                BulkArgError::DstMisaligned => c"bulk copy destination is not 16-byte aligned",
                BulkArgError::SrcMisaligned => c"bulk copy source is not 16-byte aligned",
                BulkArgError::ZeroSize => c"bulk copy size is zero",
                BulkArgError::SizeNotMultipleOf16 => c"bulk copy size is not a multiple of 16 bytes",
                BulkArgError::SizeTooLarge => c"bulk copy size does not fit in 32 bits",
            });
        }
    }

    impl SharedPtr<BulkBarrier> {
        /// Initialises the barrier for `arrivals` arrivals per phase and makes the initialisation
        /// visible to the copy engine and the CTA (`fence.mbarrier_init`). One thread calls it;
        /// the CTA must synchronise (e.g. `bar.sync`) before other threads use the barrier.
        ///
        /// # Safety
        /// `self` is an 8-byte aligned slot of this CTA's shared memory with no pending operation.
        #[inline(always)]
        pub unsafe fn init(self, arrivals: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_init(self.cast(), arrivals) };
            // Partner: the first bulk_load/arrive on this barrier (any thread, after a CTA sync).
            fence::fence_mbarrier_init_release_cluster();
        }

        /// Initialises without the fence: for initialising many barriers under one
        /// [`bulk_init_fence`] call.
        ///
        /// # Safety
        /// As for [`SharedPtr::<BulkBarrier>::init`]; call [`bulk_init_fence`] before use.
        #[inline(always)]
        pub unsafe fn relaxed_init(self, arrivals: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_init(self.cast(), arrivals) };
        }

        /// Adds `bytes` to the transaction count the current phase waits for (no arrival).
        ///
        /// # Safety
        /// The barrier must be initialised. Every expect of a batch must precede the arrival
        /// that completes the phase (see the module docs).
        #[inline(always)]
        pub unsafe fn expect(self, bytes: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_expect_tx(self.cast(), bytes) };
        }

        /// One arrival (release at CTA scope).
        ///
        /// # Safety
        /// The barrier must be initialised and expect this arrival in its current phase.
        #[inline(always)]
        pub unsafe fn arrive(self) {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_arrive(self.cast()) };
        }

        /// Expects `bytes` more transaction bytes and arrives, atomically: the safe way to
        /// announce a batch of bulk loads before issuing them.
        ///
        /// # Safety
        /// The barrier must be initialised and expect this arrival in its current phase.
        #[inline(always)]
        pub unsafe fn arrive_and_expect(self, bytes: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_arrive_expect_tx(self.cast(), bytes) };
        }

        /// Whether the phase with parity `phase` has completed (never blocks).
        ///
        /// # Safety
        /// The barrier must be initialised.
        #[inline(always)]
        pub unsafe fn poll(self, phase: u32) -> bool {
            // SAFETY: forwarded from the caller.
            unsafe { mb::mbarrier_test_wait_parity(self.cast(), phase & 1) }
        }

        /// Waits until the phase with parity `*phase` completes, then flips `*phase` for the next
        /// wait. Traps with a message if `budget` runs out.
        ///
        /// # Safety
        /// The barrier must be initialised.
        #[inline(always)]
        pub unsafe fn wait(self, phase: &mut u32, budget: SpinBudget) {
            let p = *phase & 1;
            let bar = self.cast();
            // SAFETY: forwarded from the caller.
            spin_until(budget, c"BulkBarrier::wait", || unsafe { mb::mbarrier_try_wait_parity(bar, p) });
            *phase = p ^ 1;
        }
    }

    /// Makes earlier [`SharedPtr::<BulkBarrier>::relaxed_init`]s visible to the copy engine and the
    /// CTA (`fence.mbarrier_init.release.cluster`).
    #[inline(always)]
    pub fn bulk_init_fence() {
        fence::fence_mbarrier_init_release_cluster();
    }

    /// Copies `bytes` from global memory (local or peer-mapped) to shared memory; completion is
    /// counted on `bar` as transaction bytes.
    ///
    /// # Safety
    /// Both ranges valid; 16-byte aligned addresses, `bytes` a non-zero multiple of 16; `bar`
    /// initialised and expecting these bytes in its current phase.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn bulk_load<T>(dst: SharedPtr<T>, src: GlobalPtr<T>, bytes: u32, bar: SharedPtr<BulkBarrier>) {
        check(dst.addr() as u64, src.addr(), bytes);
        // SAFETY: forwarded from the caller; arguments checked above in checked builds.
        unsafe { cp::cp_async_bulk_shared_global(dst.cast(), src.as_ptr().cast(), bytes, bar.cast()) };
    }

    /// Copies `bytes` from shared memory to global memory (local or peer) in this thread's open
    /// bulk group. Close the group with [`bulk_store_commit`].
    ///
    /// # Safety
    /// Both ranges valid; 16-byte aligned addresses, `bytes` a non-zero multiple of 16. Generic
    /// writes to the source must be fenced with [`bulk_fence`] before this call, and the source
    /// must stay unchanged until [`bulk_store_wait_source`] covers the group.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn bulk_store<T>(dst: GlobalPtr<T>, src: SharedPtr<T>, bytes: u32) {
        check(dst.addr(), src.addr() as u64, bytes);
        // SAFETY: forwarded from the caller.
        unsafe { cp::cp_async_bulk_global_shared(dst.as_ptr().cast(), src.cast(), bytes) };
    }

    /// Reduces `bytes` of `T` from shared memory into global memory (`dst[i] = op(dst[i], src[i])`),
    /// done by the copy engine; with a peer destination this is a remote accumulate. Joins the open
    /// bulk group. No mixed precision: f16/bf16 accumulate in f16/bf16.
    ///
    /// # Safety
    /// As for [`bulk_store`]; both ranges hold `T`s.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn bulk_reduce_store<T, Op: BulkReduceOp<T>>(dst: GlobalPtr<T>, src: SharedPtr<T>, bytes: u32) {
        check(dst.addr(), src.addr() as u64, bytes);
        // SAFETY: forwarded from the caller.
        unsafe { Op::issue(dst.as_ptr().cast(), src.cast(), bytes) };
    }

    /// Closes this thread's open bulk group (stores and reduce-stores issued since the last commit).
    #[inline(always)]
    pub fn bulk_store_commit() {
        cp::cp_async_bulk_commit_group();
    }

    /// Waits until at most `N` committed bulk groups of this thread are pending: their
    /// destinations are written and visible. Wait for this before signalling a peer.
    #[inline(always)]
    pub fn bulk_store_wait<const N: u32>() {
        cp::cp_async_bulk_wait_group::<N>();
    }

    /// Waits until at most `N` committed bulk groups of this thread still read their sources:
    /// the source tiles of the older groups may be overwritten (destinations may still be in flight).
    #[inline(always)]
    pub fn bulk_store_wait_source<const N: u32>() {
        cp::cp_async_bulk_wait_group_read::<N>();
    }

    /// Orders this thread's generic shared-memory accesses against the copy engine
    /// (`fence.proxy.async.shared::cta`). Needed after writing a tile with generic stores and
    /// before a bulk store or reduce reads it; before a bulk load overwrites a tile that generic
    /// code read; and after [`SharedPtr::<BulkBarrier>::relaxed_init`] when no init fence follows.
    #[inline(always)]
    pub fn bulk_fence() {
        fence::fence_proxy_async_shared_cta();
    }

    impl<const N: usize> BulkPipeline<N> {
        /// Lays the pipeline over `smem` ([`BulkPipeline::smem_bytes`] bytes, 128-byte aligned).
        /// The `leader` initialises the N barriers (one arrival each); afterwards the CTA must
        /// synchronise before any thread uses the pipeline.
        ///
        /// # Safety
        /// `smem` must be this CTA's shared memory of the required size, used by nothing else;
        /// `tile_bytes` a non-zero multiple of 16.
        #[inline(always)]
        pub unsafe fn new(smem: SharedPtr<u8>, tile_bytes: u32, leader: bool) -> Self {
            crate::device_assert!(
                tile_bytes % 16 == 0 && tile_bytes != 0,
                "pipeline tile size must be a multiple of 16"
            );
            crate::device_assert!(smem.is_aligned_to(128), "pipeline shared memory must be 128-byte aligned");
            let bars = smem.cast::<BulkBarrier>();
            let tiles = smem.byte_add(pipeline_smem_bytes(N as u32, 0) as usize);
            if leader {
                let mut s = 0;
                while s < N {
                    // SAFETY: the caller hands us this shared region.
                    unsafe { bars.add(s).relaxed_init(1) };
                    s += 1;
                }
                bulk_init_fence();
            }
            Self { bars, tiles, tile_bytes }
        }

        /// The shared buffer of tile `k` (stage `k % N`).
        #[inline(always)]
        pub fn tile(&self, k: u32) -> SharedPtr<u8> {
            self.tiles.byte_add(((k as usize) % N) * self.tile_bytes as usize)
        }

        /// The barrier of tile `k`'s stage.
        #[inline(always)]
        pub fn barrier(&self, k: u32) -> SharedPtr<BulkBarrier> {
            self.bars.add((k as usize) % N)
        }

        /// Leader only: loads `bytes` (<= tile size) from `src` into tile `k`'s stage.
        ///
        /// # Safety
        /// Tile `k - N` (the previous user of this stage) must be fully consumed; `src` valid
        /// and aligned as for [`bulk_load`].
        #[inline(always)]
        pub unsafe fn load(&self, k: u32, src: GlobalPtr<u8>, bytes: u32) {
            crate::device_assert!(bytes <= self.tile_bytes, "pipeline load larger than a tile");
            let bar = self.barrier(k);
            // SAFETY: expect-then-copy on an initialised barrier; forwarded from the caller.
            unsafe {
                bar.arrive_and_expect(bytes);
                bulk_load(self.tile(k), src, bytes, bar);
            }
        }

        /// Leader only: gathers several sources into tile `k`, one after another, completing as
        /// one phase. The sum of the sizes must not exceed the tile.
        ///
        /// # Safety
        /// As for [`BulkPipeline::load`], for every source.
        #[inline(always)]
        pub unsafe fn load_gather(&self, k: u32, srcs: &[(GlobalPtr<u8>, u32)]) {
            let mut total = 0u32;
            for &(_, b) in srcs {
                total += b;
            }
            crate::device_assert!(total <= self.tile_bytes, "pipeline gather larger than a tile");
            let bar = self.barrier(k);
            let mut off = 0usize;
            // SAFETY: the whole batch is expected before any copy is issued.
            unsafe {
                bar.arrive_and_expect(total);
                for &(src, b) in srcs {
                    bulk_load(self.tile(k).byte_add(off), src, b, bar);
                    off += b as usize;
                }
            }
        }

        /// Any thread: waits until tile `k` has landed and returns its buffer.
        #[inline(always)]
        pub fn wait(&self, k: u32, budget: SpinBudget) -> SharedPtr<u8> {
            let mut phase = (k / N as u32) & 1;
            // SAFETY: the barriers were initialised in `new` (and the CTA synchronised after).
            unsafe { self.barrier(k).wait(&mut phase, budget) };
            self.tile(k)
        }

        /// Leader only: copies the tiles `part`, `part + parts`, `part + 2 * parts`, ... of the
        /// range `[0, bytes)` from `src` to `dst` through the stages, with bulk loads and bulk
        /// stores, keeping `N - 1` loads and up to two stores in flight; returns after every store
        /// has completed. With `part` = CTA index and `parts` = CTA count, the CTAs of a grid
        /// interleave tile by tile, which keeps the DRAM accesses of the whole grid close together
        /// (NOTES.md, "Bulk copy", compares it with contiguous chunks per CTA).
        ///
        /// # Safety
        /// Both ranges valid for `bytes`; addresses 16-byte aligned, `bytes` a multiple of 16, the
        /// tile size a multiple of 16. No other work may be using the pipeline's stages.
        #[inline(always)]
        pub unsafe fn copy(
            &self,
            dst: GlobalPtr<u8>,
            src: GlobalPtr<u8>,
            bytes: u64,
            part: u32,
            parts: u32,
            budget: SpinBudget,
        ) {
            let tile = self.tile_bytes as u64;
            let all = bytes.div_ceil(tile);
            let (part, parts) = (part as u64, parts.max(1) as u64);
            let count = if part < all { (all - part).div_ceil(parts) as u32 } else { 0 };
            let at = |j: u32| (part + j as u64 * parts) * tile;
            let len = |j: u32| -> u32 {
                let o = at(j);
                if o + tile <= bytes { tile as u32 } else { (bytes - o) as u32 }
            };
            let pre = if count < N as u32 { count } else { N as u32 };
            for j in 0..pre {
                // SAFETY: stage j is fresh; the source range lies inside [src, src + bytes).
                unsafe { self.load(j, src.byte_add(at(j) as usize), len(j)) };
            }
            for k in 0..count {
                let buf = self.wait(k, budget);
                // SAFETY: tile k has landed in `buf`; the destination range is the caller's.
                unsafe { bulk_store(dst.byte_add(at(k) as usize), buf, len(k)) };
                bulk_store_commit();
                // Refill the stage of tile k - 1 once its store has read it (two stores in flight).
                if k >= 1 && k - 1 + (N as u32) < count {
                    bulk_store_wait_source::<1>();
                    let r = k - 1 + N as u32;
                    // SAFETY: the store that read this stage (tile k - 1) has finished reading.
                    unsafe { self.load(r, src.byte_add(at(r) as usize), len(r)) };
                }
            }
            bulk_store_wait::<0>();
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
pub use device::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rules() {
        assert_eq!(validate(0, 0, 16), Ok(()));
        assert_eq!(validate(8, 0, 16), Err(BulkArgError::DstMisaligned));
        assert_eq!(validate(0, 4, 16), Err(BulkArgError::SrcMisaligned));
        assert_eq!(validate(0, 0, 0), Err(BulkArgError::ZeroSize));
        assert_eq!(validate(0, 0, 24), Err(BulkArgError::SizeNotMultipleOf16));
        assert_eq!(validate(0, 0, 1 << 33), Err(BulkArgError::SizeTooLarge));
        assert_eq!(validate(32, 48, 227 * 1024), Ok(()));
    }

    #[test]
    fn pipeline_layout() {
        assert_eq!(pipeline_smem_bytes(2, 1024), 128 + 2048);
        assert_eq!(pipeline_smem_bytes(16, 16), 128 + 256);
        assert_eq!(pipeline_smem_bytes(17, 0), 256);
        assert_eq!(BulkPipeline::<4>::smem_bytes(32 * 1024), 128 + 4 * 32 * 1024);
    }

    #[test]
    fn reduce_pairs_name_the_ptx_form() {
        fn ptx<T, O: BulkReduceOp<T>>() -> &'static str {
            O::PTX
        }
        const PREFIX: &str = "cp.reduce.async.bulk.global.shared::cta.bulk_group.";
        assert_eq!(ptx::<half::bf16, op::Add>().strip_prefix(PREFIX), Some("add.noftz.bf16"));
        assert_eq!(ptx::<i64, op::Min>().strip_prefix(PREFIX), Some("min.s64"));
        assert_eq!(ptx::<i32, op::Xor>().strip_prefix(PREFIX), Some("xor.b32"));
        assert_eq!(ptx::<u32, op::Dec>().strip_prefix(PREFIX), Some("dec.u32"));
    }
}
