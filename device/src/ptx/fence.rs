//! Memory and proxy fences.

use super::asm;

/// `fence.proxy.async.shared::cta;` (PTX 8.0, sm_90): orders this thread's generic-proxy accesses
/// to shared memory against the async proxy (the bulk-copy engine), in both directions.
#[inline(always)]
pub fn fence_proxy_async_shared_cta() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// `fence.mbarrier_init.release.cluster;` (PTX 8.0, sm_90): makes prior `mbarrier.init`s visible
/// to the async proxy and to other threads before the barrier is used.
#[inline(always)]
pub fn fence_mbarrier_init_release_cluster() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
}

/// `fence.acq_rel.cta;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_acq_rel_cta() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.acq_rel.cta;", options(nostack)) };
}
/// `fence.acq_rel.gpu;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}
/// `fence.acq_rel.sys;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_acq_rel_sys() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack)) };
}
/// `fence.sc.cta;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_sc_cta() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.sc.cta;", options(nostack)) };
}
/// `fence.sc.gpu;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_sc_gpu() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.sc.gpu;", options(nostack)) };
}
/// `fence.sc.sys;` (PTX 6.0, sm_70)
#[inline(always)]
pub fn fence_sc_sys() {
    // SAFETY: a fence; no operands.
    unsafe { asm!("fence.sc.sys;", options(nostack)) };
}
