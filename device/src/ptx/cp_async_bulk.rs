//! Bulk copies by the Tensor Memory Accelerator (non-tensor `cp.async.bulk` forms).
//!
//! Shared-memory operands are [`SharedPtr`]s: `SharedPtr<u8>` for data,
//! `SharedPtr<u64>` for the `mbarrier` object, so a global address or a size cannot stand in for
//! either.
//!
//! The check kernels read their operands from memory: `p[0]` the global address, `p[1]` the
//! shared address (low word) and the size (high word), `p[2]` the barrier.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;
#[cfg(any(target_arch = "nvptx64", doc))]
use crate::ptr::SharedPtr;

hand! {
    table = COPIES;

    #[check("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes", sass ["UBLKCP.S.G"],
        forbid [".L2::cache_hint"],
        kernel |p: *mut u64| {
            let w = *p.add(1);
            cp_async_bulk_shared_global(
                SharedPtr::from_addr(w as u32),
                *p as *const u8,
                (w >> 32) as u32,
                SharedPtr::from_addr(*p.add(2) as u32),
            );
        })]
    /// `cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar];`
    /// (PTX 8.6, sm_90): copies `bytes` from global memory to shared memory; completion is counted
    /// on the barrier as transaction bytes.
    ///
    /// # Safety
    /// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid, `bar` an
    /// initialised barrier of this CTA that expects these bytes in its current phase.
    #[inline(always)]
    pub unsafe fn cp_async_bulk_shared_global(dst: SharedPtr<u8>, src: *const u8, bytes: u32, bar: SharedPtr<u64>) {
        // SAFETY: caller guarantees the alignment, sizes and barrier state.
        unsafe {
            asm!(
                concat!(mnemonic!(), " [{d}], [{s}], {n}, [{b}];"),
                d = in(reg32) dst.addr(), s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar.addr(), options(nostack)
            )
        };
    }

    #[check("cp.async.bulk.global.shared::cta.bulk_group", sass ["UBLKCP.G.S"], forbid [".L2::cache_hint"],
        kernel |p: *mut u64| {
            let w = *p.add(1);
            cp_async_bulk_global_shared(*p as *mut u8, SharedPtr::from_addr(w as u32), (w >> 32) as u32);
        })]
    /// `cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size;` (PTX 8.0, sm_90): copies
    /// `bytes` from shared memory to global memory (local or peer), in the thread's open bulk group.
    ///
    /// # Safety
    /// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid; the source must
    /// stay unchanged until a `cp.async.bulk.wait_group.read` covers this group.
    #[inline(always)]
    pub unsafe fn cp_async_bulk_global_shared(dst: *mut u8, src: SharedPtr<u8>, bytes: u32) {
        // SAFETY: caller guarantees the alignment and sizes.
        unsafe {
            asm!(
                concat!(mnemonic!(), " [{d}], [{s}], {n};"),
                d = in(reg64) dst, s = in(reg32) src.addr(), n = in(reg32) bytes, options(nostack)
            )
        };
    }
}

no_operands! {
    table = COMMIT;
    /// Closes the thread's open bulk group.
    pub fn cp_async_bulk_commit_group() = "cp.async.bulk.commit_group" ("PTX 8.0, sm_90"), sass ["UTMACMDFLUSH"];
}

hand! {
    table = WAIT;

    #[check("cp.async.bulk.wait_group", also ["cp.async.bulk.wait_group 3"], sass ["DEPBAR.LE SB0, 0x3"],
        kernel |p: *mut u64| { *p = 1; cp_async_bulk_wait_group::<3>(); })]
    /// `cp.async.bulk.wait_group N;` (PTX 8.0, sm_90): waits until at most `N` of this thread's
    /// committed bulk groups are pending (their writes complete and visible).
    #[inline(always)]
    pub fn cp_async_bulk_wait_group<const N: u32>() {
        // SAFETY: a wait on this thread's own bulk groups.
        unsafe { asm!(concat!(mnemonic!(), " {n};"), n = const N, options(nostack)) };
    }

    #[check("cp.async.bulk.wait_group.read", also ["cp.async.bulk.wait_group.read 2"], sass ["DEPBAR.LE SB0, 0x2"],
        kernel |p: *mut u64| { *p = 1; cp_async_bulk_wait_group_read::<2>(); })]
    /// `cp.async.bulk.wait_group.read N;` (PTX 8.0, sm_90): waits until at most `N` of this thread's
    /// committed bulk groups still read their sources (sources reusable; writes may be in flight).
    #[inline(always)]
    pub fn cp_async_bulk_wait_group_read<const N: u32>() {
        // SAFETY: a wait on this thread's own bulk groups.
        unsafe { asm!(concat!(mnemonic!(), " {n};"), n = const N, options(nostack)) };
    }
}

bulk_reduce! {
    table = REDUCE, isa = "PTX 8.0, sm_90";
    pub unsafe fn cp_reduce_async_bulk_add_noftz_f16 =
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16",
        sass ["UBLKRED.G.S.ADD.F16.RN"];
    pub unsafe fn cp_reduce_async_bulk_add_noftz_bf16 =
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16",
        sass ["UBLKRED.G.S.ADD.BF16.RN"];
    pub unsafe fn cp_reduce_async_bulk_add_f32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32",
        sass ["UBLKRED.G.S.ADD.F32.RN"];
    pub unsafe fn cp_reduce_async_bulk_add_f64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64",
        sass ["UBLKRED.G.S.ADD.F64.RN"];
    pub unsafe fn cp_reduce_async_bulk_add_u32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32",
        sass ["UBLKRED.G.S.ADD"];
    pub unsafe fn cp_reduce_async_bulk_add_s32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32",
        sass ["UBLKRED.G.S.ADD.S32"];
    pub unsafe fn cp_reduce_async_bulk_add_u64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64",
        sass ["UBLKRED.G.S.ADD.U64"];
    pub unsafe fn cp_reduce_async_bulk_min_f16 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f16",
        sass ["UBLKRED.G.S.MIN.F16.RN"];
    pub unsafe fn cp_reduce_async_bulk_min_bf16 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.bf16",
        sass ["UBLKRED.G.S.MIN.BF16.RN"];
    pub unsafe fn cp_reduce_async_bulk_min_u32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u32",
        sass ["UBLKRED.G.S.MIN"];
    pub unsafe fn cp_reduce_async_bulk_min_s32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s32",
        sass ["UBLKRED.G.S.MIN.S32"];
    pub unsafe fn cp_reduce_async_bulk_min_u64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u64",
        sass ["UBLKRED.G.S.MIN.U64"];
    pub unsafe fn cp_reduce_async_bulk_min_s64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s64",
        sass ["UBLKRED.G.S.MIN.S64"];
    pub unsafe fn cp_reduce_async_bulk_max_f16 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.f16",
        sass ["UBLKRED.G.S.MAX.F16.RN"];
    pub unsafe fn cp_reduce_async_bulk_max_bf16 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.bf16",
        sass ["UBLKRED.G.S.MAX.BF16.RN"];
    pub unsafe fn cp_reduce_async_bulk_max_u32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u32",
        sass ["UBLKRED.G.S.MAX"];
    pub unsafe fn cp_reduce_async_bulk_max_s32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s32",
        sass ["UBLKRED.G.S.MAX.S32"];
    pub unsafe fn cp_reduce_async_bulk_max_u64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u64",
        sass ["UBLKRED.G.S.MAX.U64"];
    pub unsafe fn cp_reduce_async_bulk_max_s64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s64",
        sass ["UBLKRED.G.S.MAX.S64"];
    pub unsafe fn cp_reduce_async_bulk_inc_u32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.inc.u32",
        sass ["UBLKRED.G.S.INC"];
    pub unsafe fn cp_reduce_async_bulk_dec_u32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.dec.u32",
        sass ["UBLKRED.G.S.DEC"];
    pub unsafe fn cp_reduce_async_bulk_and_b32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b32",
        sass ["UBLKRED.G.S.AND"];
    pub unsafe fn cp_reduce_async_bulk_or_b32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b32",
        sass ["UBLKRED.G.S.OR"];
    pub unsafe fn cp_reduce_async_bulk_xor_b32 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b32",
        sass ["UBLKRED.G.S.XOR"];
    pub unsafe fn cp_reduce_async_bulk_and_b64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b64",
        sass ["UBLKRED.G.S.AND.U64"];
    pub unsafe fn cp_reduce_async_bulk_or_b64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b64",
        sass ["UBLKRED.G.S.OR.U64"];
    pub unsafe fn cp_reduce_async_bulk_xor_b64 = "cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b64",
        sass ["UBLKRED.G.S.XOR.U64"];
}
