//! Memory and proxy fences.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;

no_operands! {
    table = FENCES;
    /// Orders this thread's generic-proxy accesses to shared memory against the async proxy (the
    /// bulk-copy engine), in both directions.
    pub fn fence_proxy_async_shared_cta() = "fence.proxy.async.shared::cta" ("PTX 8.0, sm_90"),
        sass ["FENCE.VIEW.ASYNC.S"];
    /// Makes prior `mbarrier.init`s visible to the async proxy and to other threads before the
    /// barrier is used.
    pub fn fence_mbarrier_init_release_cluster() = "fence.mbarrier_init.release.cluster" ("PTX 8.0, sm_90"),
        sass [], no_sass "ptxas emits no instruction for it in this kernel, which has no cluster shape";
    /// An acquire-release fence at CTA scope.
    pub fn fence_acq_rel_cta() = "fence.acq_rel.cta" ("PTX 6.0, sm_70"), sass ["MEMBAR.ALL.CTA"];
    /// An acquire-release fence at GPU scope.
    pub fn fence_acq_rel_gpu() = "fence.acq_rel.gpu" ("PTX 6.0, sm_70"), sass ["MEMBAR.ALL.GPU", "CCTL.IVALL"];
    /// An acquire-release fence at system scope.
    pub fn fence_acq_rel_sys() = "fence.acq_rel.sys" ("PTX 6.0, sm_70"), sass ["MEMBAR.ALL.SYS", "CCTL.IVALL"];
    /// A sequentially consistent fence at CTA scope.
    pub fn fence_sc_cta() = "fence.sc.cta" ("PTX 6.0, sm_70"), sass ["MEMBAR.SC.CTA"];
    /// A sequentially consistent fence at GPU scope.
    pub fn fence_sc_gpu() = "fence.sc.gpu" ("PTX 6.0, sm_70"), sass ["MEMBAR.SC.GPU", "CCTL.IVALL"];
    /// A sequentially consistent fence at system scope.
    pub fn fence_sc_sys() = "fence.sc.sys" ("PTX 6.0, sm_70"), sass ["MEMBAR.SC.SYS", "CCTL.IVALL"];
}
