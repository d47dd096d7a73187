//! Bulk copies by the Tensor Memory Accelerator (non-tensor `cp.async.bulk` forms).

use super::asm;

/// `cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar];`
/// (PTX 8.6, sm_90): copies `bytes` from global memory to shared memory; completion is counted
/// on the barrier as transaction bytes.
///
/// # Safety
/// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid, `bar` an
/// initialised barrier of this CTA that expects these bytes in its current phase.
#[inline(always)]
pub unsafe fn cp_async_bulk_shared_global(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    // SAFETY: caller guarantees the alignment, sizes and barrier state.
    unsafe {
        asm!(
            "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
            d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, options(nostack)
        )
    };
}

/// `cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size;` (PTX 8.0, sm_90): copies
/// `bytes` from shared memory to global memory (local or peer), in the thread's open bulk group.
///
/// # Safety
/// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid; the source must
/// stay unchanged until a `cp.async.bulk.wait_group.read` covers this group.
#[inline(always)]
pub unsafe fn cp_async_bulk_global_shared(dst: *mut u8, src: u32, bytes: u32) {
    // SAFETY: caller guarantees the alignment and sizes.
    unsafe {
        asm!(
            "cp.async.bulk.global.shared::cta.bulk_group [{d}], [{s}], {n};",
            d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, options(nostack)
        )
    };
}

/// `cp.async.bulk.commit_group;` (PTX 8.0, sm_90): closes the thread's open bulk group.
#[inline(always)]
pub fn cp_async_bulk_commit_group() {
    // SAFETY: no operands; only affects this thread's bulk-group bookkeeping.
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// `cp.async.bulk.wait_group N;` (PTX 8.0, sm_90): waits until at most `N` of this thread's
/// committed bulk groups are pending (their writes complete and visible).
#[inline(always)]
pub fn cp_async_bulk_wait_group<const N: u32>() {
    // SAFETY: a wait on this thread's own bulk groups.
    unsafe { asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack)) };
}

/// `cp.async.bulk.wait_group.read N;` (PTX 8.0, sm_90): waits until at most `N` of this thread's
/// committed bulk groups still read their sources (sources reusable; writes may be in flight).
#[inline(always)]
pub fn cp_async_bulk_wait_group_read<const N: u32>() {
    // SAFETY: a wait on this thread's own bulk groups.
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack)) };
}

/// `cp.async.bulk.prefetch.L2.global [src], size;` (PTX 8.0, sm_90): asks the copy engine to
/// bring `bytes` into L2.
///
/// # Safety
/// `src` 16-byte aligned and `bytes` a multiple of 16 (a prefetch of unmapped memory is ignored
/// by the hardware, but the operands must still be well formed).
#[inline(always)]
pub unsafe fn cp_async_bulk_prefetch_l2(src: *const u8, bytes: u32) {
    // SAFETY: caller guarantees the operand constraints.
    unsafe {
        asm!("cp.async.bulk.prefetch.L2.global [{s}], {n};", s = in(reg64) src, n = in(reg32) bytes, options(nostack))
    };
}

/// `cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint [dst], [src],
/// size, [bar], policy;` (PTX 8.6, sm_90): [`cp_async_bulk_shared_global`] with an L2 policy from
/// `createpolicy`.
///
/// # Safety
/// As for [`cp_async_bulk_shared_global`]; `policy` must come from a `createpolicy` instruction.
#[inline(always)]
pub unsafe fn cp_async_bulk_shared_global_hint(dst: u32, src: *const u8, bytes: u32, bar: u32, policy: u64) {
    // SAFETY: caller guarantees the alignment, sizes and barrier state.
    unsafe {
        asm!(
            "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint [{d}], [{s}], {n}, [{b}], {p};",
            d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, p = in(reg64) policy,
            options(nostack)
        )
    };
}

/// `cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [dst], [src], size, policy;`
/// (PTX 8.0, sm_90): [`cp_async_bulk_global_shared`] with an L2 policy.
///
/// # Safety
/// As for [`cp_async_bulk_global_shared`]; `policy` must come from a `createpolicy` instruction.
#[inline(always)]
pub unsafe fn cp_async_bulk_global_shared_hint(dst: *mut u8, src: u32, bytes: u32, policy: u64) {
    // SAFETY: caller guarantees the alignment and sizes.
    unsafe {
        asm!(
            "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [{d}], [{s}], {n}, {p};",
            d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, p = in(reg64) policy, options(nostack)
        )
    };
}

/// `createpolicy.fractional.L2::evict_first.b64 d, 1.0;` (PTX 7.4, sm_80)
#[inline(always)]
pub fn createpolicy_fractional_l2_evict_first() -> u64 {
    let p: u64;
    // SAFETY: computes a policy value; no memory access.
    unsafe {
        asm!("createpolicy.fractional.L2::evict_first.b64 {p}, 1.0;", p = out(reg64) p, options(nomem, nostack, pure))
    };
    p
}

/// `createpolicy.fractional.L2::evict_last.b64 d, 1.0;` (PTX 7.4, sm_80)
#[inline(always)]
pub fn createpolicy_fractional_l2_evict_last() -> u64 {
    let p: u64;
    // SAFETY: computes a policy value; no memory access.
    unsafe {
        asm!("createpolicy.fractional.L2::evict_last.b64 {p}, 1.0;", p = out(reg64) p, options(nomem, nostack, pure))
    };
    p
}

macro_rules! bulk_reduce {
    ($( $(#[$doc:meta])* pub fn $name:ident = $op:literal; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid and holding
        /// elements of the instruction's type; the source must stay unchanged until a
        /// `cp.async.bulk.wait_group.read` covers this group.
        #[inline(always)]
        pub unsafe fn $name(dst: *mut u8, src: u32, bytes: u32) {
            // SAFETY: caller guarantees the alignment and sizes.
            unsafe {
                asm!(
                    concat!("cp.reduce.async.bulk.global.shared::cta.bulk_group.", $op, " [{d}], [{s}], {n};"),
                    d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, options(nostack)
                )
            };
        }
    )* };
}

bulk_reduce! {
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_noftz_f16 = "add.noftz.f16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_noftz_bf16 = "add.noftz.bf16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_f32 = "add.f32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_f64 = "add.f64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_u32 = "add.u32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_s32 = "add.s32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_add_u64 = "add.u64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_f16 = "min.f16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.bf16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_bf16 = "min.bf16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_u32 = "min.u32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_s32 = "min.s32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_u64 = "min.u64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_min_s64 = "min.s64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.f16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_f16 = "max.f16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.bf16 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_bf16 = "max.bf16";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_u32 = "max.u32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_s32 = "max.s32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_u64 = "max.u64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_max_s64 = "max.s64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.inc.u32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_inc_u32 = "inc.u32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.dec.u32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_dec_u32 = "dec.u32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_and_b32 = "and.b32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_or_b32 = "or.b32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b32 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_xor_b32 = "xor.b32";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_and_b64 = "and.b64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_or_b64 = "or.b64";
    /// `cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b64 [d], [s], n;` (PTX 8.0, sm_90)
    pub fn cp_reduce_async_bulk_xor_b64 = "xor.b64";
}
