//! What every PTX wrapper of `mscclpp_device::ptx` must compile to.
//!
//! One [`Check`] per public wrapper `w`: the kernel `check_w` in `ptx-tests` must contain each
//! `ptx` text in its body, contain no `call` (unless the wrapper is a call by nature), stay short,
//! assemble with `ptxas -arch=sm_90`, and its SASS must contain each `sass` text. SASS texts were
//! taken from `cuobjdump -sass` of ptxas 13.5's output; an empty list means the instruction leaves
//! no distinctive opcode (address arithmetic, a fence the hardware folds away without clusters).
//!
//! The expectations live in several tables: [`CHECKS`] (the sm_90 module's general wrappers),
//! [`MEMCHAN_CHECKS`] (the global accesses of copies and LL packets), [`MULTIMEM_CHECKS`]
//! (multimem, sm_90) and [`SM100A_CHECKS`] (fp8 multimem, checked against the
//! sm_100a module). [`sm90_checks`], [`sm100a_checks`] and [`all_checks`] combine them.

mod memchan;
mod multimem;

pub use memchan::MEMCHAN_CHECKS;
pub use multimem::{MULTIMEM_CHECKS, SM100A_CHECKS};

/// The expectation for one wrapper.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// The wrapper's name in `mscclpp_device::ptx::*`.
    pub wrapper: &'static str,
    /// Texts that must appear in the check kernel's PTX instructions, as whole tokens (see
    /// [`crate::ptxcheck::holds`]).
    pub ptx: &'static [&'static str],
    /// Texts that must appear in the check kernel's SASS, as whole tokens.
    pub sass: &'static [&'static str],
    /// Texts that must appear nowhere in the kernel's PTX instructions or SASS (substrings): what
    /// tells this wrapper from a near neighbour, such as `multimem` for a unicast store.
    pub forbid: &'static [&'static str],
    /// The function the wrapper calls by design (device printing), if any; any other check
    /// allows no `call` at all.
    pub callee: Option<&'static str>,
    /// Why [`Check::sass`] is empty, when it is.
    pub no_sass: Option<&'static str>,
}

impl Check {
    /// An expectation with no call allowed and nothing forbidden.
    pub const fn new(wrapper: &'static str, ptx: &'static [&'static str], sass: &'static [&'static str]) -> Self {
        Self { wrapper, ptx, sass, forbid: &[], callee: None, no_sass: None }
    }
    /// The same expectation, calling `callee`.
    pub const fn calls(mut self, callee: &'static str) -> Self {
        self.callee = Some(callee);
        self
    }
    /// The same expectation, with texts that must not appear.
    pub const fn forbid(mut self, forbid: &'static [&'static str]) -> Self {
        self.forbid = forbid;
        self
    }
    /// The same expectation, saying why it has no SASS texts.
    pub const fn no_sass(mut self, why: &'static str) -> Self {
        self.no_sass = Some(why);
        self
    }
    /// The check kernel's name.
    pub fn kernel(&self) -> String {
        format!("check_{}", self.wrapper)
    }
}

const fn c(w: &'static str, ptx: &'static [&'static str], sass: &'static [&'static str]) -> Check {
    Check::new(w, ptx, sass)
}

/// Every expectation checked against the sm_90 module ([`CHECKS`], [`MEMCHAN_CHECKS`] and
/// [`MULTIMEM_CHECKS`]).
pub fn sm90_checks() -> impl Iterator<Item = &'static Check> {
    CHECKS.iter().chain(MEMCHAN_CHECKS).chain(MULTIMEM_CHECKS)
}

/// Every expectation checked against the sm_100a module ([`SM100A_CHECKS`]).
pub fn sm100a_checks() -> impl Iterator<Item = &'static Check> {
    SM100A_CHECKS.iter()
}

/// Every expectation of every table (what the coverage test compares with the wrappers).
pub fn all_checks() -> impl Iterator<Item = &'static Check> {
    sm90_checks().chain(sm100a_checks())
}

/// Kernels of `ptx-tests` (in its `checks` module) that use a CTA barrier in divergent code, with
/// the number of barriers in their source. Their PTX and their SASS must hold exactly that many
/// barrier instructions: a compiler that copies a barrier into both arms of a branch (legal for
/// an ordinary call, undefined for `bar.sync`, which is `barrier.sync.aligned`) shows up as one
/// more.
pub const BARRIER_COUNTS: &[(&str, usize)] = &[
    // `if leader { init } bar_sync(); if leader { use }`: threading the second test through the
    // first is what copies the barrier.
    ("divergent_bar_sync", 1),
    // The same pattern around `DeviceSyncer::sync` (two barriers inside).
    ("divergent_device_syncer", 2),
];

/// The general wrappers' expectations (sm_90 module).
pub const CHECKS: &[Check] = &[
    // ld_st
    c("ld_relaxed_cta_u32", &["ld.relaxed.cta.u32"], &["LD.E.STRONG.SM"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_relaxed_gpu_u32", &["ld.relaxed.gpu.u32"], &["LD.E.STRONG.GPU"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_relaxed_sys_u32", &["ld.relaxed.sys.u32"], &["LD.E.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_acquire_cta_u32", &["ld.acquire.cta.u32"], &["LD.E.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("ld_acquire_gpu_u32", &["ld.acquire.gpu.u32"], &["LD.E.STRONG.GPU", "CCTL.IVALL"]).forbid(&["MEMBAR"]),
    c("ld_acquire_sys_u32", &["ld.acquire.sys.u32"], &["LD.E.STRONG.SYS", "CCTL.IVALL"]).forbid(&["MEMBAR"]),
    c("ld_relaxed_cta_u64", &["ld.relaxed.cta.u64"], &["LD.E.64.STRONG.SM"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_relaxed_gpu_u64", &["ld.relaxed.gpu.u64"], &["LD.E.64.STRONG.GPU"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_relaxed_sys_u64", &["ld.relaxed.sys.u64"], &["LD.E.64.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_acquire_cta_u64", &["ld.acquire.cta.u64"], &["LD.E.64.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("ld_acquire_gpu_u64", &["ld.acquire.gpu.u64"], &["LD.E.64.STRONG.GPU", "CCTL.IVALL"]).forbid(&["MEMBAR"]),
    c("ld_acquire_sys_u64", &["ld.acquire.sys.u64"], &["LD.E.64.STRONG.SYS", "CCTL.IVALL"]).forbid(&["MEMBAR"]),
    c("ld_volatile_u32", &["ld.volatile.u32"], &["LD.E.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("ld_volatile_u64", &["ld.volatile.u64"], &["LD.E.64.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("st_relaxed_cta_u32", &["st.relaxed.cta.u32"], &["ST.E.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("st_relaxed_gpu_u32", &["st.relaxed.gpu.u32"], &["ST.E.STRONG.GPU"]).forbid(&["MEMBAR"]),
    c("st_relaxed_sys_u32", &["st.relaxed.sys.u32"], &["ST.E.STRONG.SYS"]).forbid(&["MEMBAR"]),
    c("st_release_cta_u32", &["st.release.cta.u32"], &["MEMBAR.ALL.CTA", "ST.E.STRONG.SM"]),
    c("st_release_gpu_u32", &["st.release.gpu.u32"], &["MEMBAR.ALL.GPU", "ST.E.STRONG.GPU"]),
    c("st_release_sys_u32", &["st.release.sys.u32"], &["MEMBAR.ALL.SYS", "ST.E.STRONG.SYS"]),
    c("st_relaxed_cta_u64", &["st.relaxed.cta.u64"], &["ST.E.64.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("st_relaxed_gpu_u64", &["st.relaxed.gpu.u64"], &["ST.E.64.STRONG.GPU"]).forbid(&["MEMBAR"]),
    c("st_relaxed_sys_u64", &["st.relaxed.sys.u64"], &["ST.E.64.STRONG.SYS"]).forbid(&["MEMBAR"]),
    c("st_release_cta_u64", &["st.release.cta.u64"], &["MEMBAR.ALL.CTA", "ST.E.64.STRONG.SM"]),
    c("st_release_gpu_u64", &["st.release.gpu.u64"], &["MEMBAR.ALL.GPU", "ST.E.64.STRONG.GPU"]),
    c("st_release_sys_u64", &["st.release.sys.u64"], &["MEMBAR.ALL.SYS", "ST.E.64.STRONG.SYS"]),
    c("st_volatile_u32", &["st.volatile.u32"], &["ST.E.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("st_volatile_u64", &["st.volatile.u64"], &["ST.E.64.STRONG.SYS"]).forbid(&["CCTL.IVALL", "MEMBAR"]),
    // atom_red, fences, 16-byte accesses
    c("atom_relaxed_cta_add_u32", &["atom.relaxed.cta.add.u32"], &["ATOM.E.ADD.STRONG.SM"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_relaxed_cta_add_u64", &["atom.relaxed.cta.add.u64"], &["ATOM.E.ADD.64.STRONG.SM"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_relaxed_gpu_add_u32", &["atom.relaxed.gpu.add.u32"], &["ATOM.E.ADD.STRONG.GPU"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_relaxed_gpu_add_u64", &["atom.relaxed.gpu.add.u64"], &["ATOM.E.ADD.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_relaxed_sys_add_u32", &["atom.relaxed.sys.add.u32"], &["ATOM.E.ADD.STRONG.SYS"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_relaxed_sys_add_u64", &["atom.relaxed.sys.add.u64"], &["ATOM.E.ADD.64.STRONG.SYS"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("atom_acquire_cta_add_u32", &["atom.acquire.cta.add.u32"], &["ATOM.E.ADD.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("atom_acquire_cta_add_u64", &["atom.acquire.cta.add.u64"], &["ATOM.E.ADD.64.STRONG.SM"]).forbid(&["MEMBAR"]),
    c("atom_acquire_gpu_add_u32", &["atom.acquire.gpu.add.u32"], &["CCTL.IVALL", "ATOM.E.ADD.STRONG.GPU"])
        .forbid(&["MEMBAR"]),
    c("atom_acquire_gpu_add_u64", &["atom.acquire.gpu.add.u64"], &["CCTL.IVALL", "ATOM.E.ADD.64.STRONG.GPU"])
        .forbid(&["MEMBAR"]),
    c("atom_acquire_sys_add_u32", &["atom.acquire.sys.add.u32"], &["CCTL.IVALL", "ATOM.E.ADD.STRONG.SYS"])
        .forbid(&["MEMBAR"]),
    c("atom_acquire_sys_add_u64", &["atom.acquire.sys.add.u64"], &["CCTL.IVALL", "ATOM.E.ADD.64.STRONG.SYS"])
        .forbid(&["MEMBAR"]),
    c("atom_release_cta_add_u32", &["atom.release.cta.add.u32"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_cta_add_u64", &["atom.release.cta.add.u64"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_gpu_add_u32", &["atom.release.gpu.add.u32"], &["MEMBAR.ALL.GPU", "ATOM.E.ADD.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_gpu_add_u64", &["atom.release.gpu.add.u64"], &["MEMBAR.ALL.GPU", "ATOM.E.ADD.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_sys_add_u32", &["atom.release.sys.add.u32"], &["MEMBAR.ALL.SYS", "ATOM.E.ADD.STRONG.SYS"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_sys_add_u64", &["atom.release.sys.add.u64"], &["MEMBAR.ALL.SYS", "ATOM.E.ADD.64.STRONG.SYS"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_acq_rel_cta_add_u32", &["atom.acq_rel.cta.add.u32"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"]),
    c("atom_acq_rel_cta_add_u64", &["atom.acq_rel.cta.add.u64"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"]),
    c(
        "atom_acq_rel_gpu_add_u32",
        &["atom.acq_rel.gpu.add.u32"],
        &["MEMBAR.ALL.GPU", "CCTL.IVALL", "ATOM.E.ADD.STRONG.GPU"],
    ),
    c(
        "atom_acq_rel_gpu_add_u64",
        &["atom.acq_rel.gpu.add.u64"],
        &["MEMBAR.ALL.GPU", "CCTL.IVALL", "ATOM.E.ADD.64.STRONG.GPU"],
    ),
    c(
        "atom_acq_rel_sys_add_u32",
        &["atom.acq_rel.sys.add.u32"],
        &["MEMBAR.ALL.SYS", "CCTL.IVALL", "ATOM.E.ADD.STRONG.SYS"],
    ),
    c(
        "atom_acq_rel_sys_add_u64",
        &["atom.acq_rel.sys.add.u64"],
        &["MEMBAR.ALL.SYS", "CCTL.IVALL", "ATOM.E.ADD.64.STRONG.SYS"],
    ),
    c("red_relaxed_cta_add_u32", &["red.relaxed.cta.add.u32"], &["ATOM.E.ADD.STRONG.SM"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_relaxed_cta_add_u64", &["red.relaxed.cta.add.u64"], &["ATOM.E.ADD.64.STRONG.SM"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_relaxed_gpu_add_u32", &["red.relaxed.gpu.add.u32"], &["ATOM.E.ADD.STRONG.GPU"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_relaxed_gpu_add_u64", &["red.relaxed.gpu.add.u64"], &["ATOM.E.ADD.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_relaxed_sys_add_u32", &["red.relaxed.sys.add.u32"], &["ATOM.E.ADD.STRONG.SYS"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_relaxed_sys_add_u64", &["red.relaxed.sys.add.u64"], &["ATOM.E.ADD.64.STRONG.SYS"])
        .forbid(&["CCTL.IVALL", "MEMBAR"]),
    c("red_release_cta_add_u32", &["red.release.cta.add.u32"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.STRONG.SM"])
        .forbid(&["CCTL.IVALL"]),
    c("red_release_cta_add_u64", &["red.release.cta.add.u64"], &["MEMBAR.ALL.CTA", "ATOM.E.ADD.64.STRONG.SM"])
        .forbid(&["CCTL.IVALL"]),
    c("red_release_gpu_add_u32", &["red.release.gpu.add.u32"], &["MEMBAR.ALL.GPU", "ATOM.E.ADD.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c("red_release_gpu_add_u64", &["red.release.gpu.add.u64"], &["MEMBAR.ALL.GPU", "ATOM.E.ADD.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c("red_release_sys_add_u32", &["red.release.sys.add.u32"], &["MEMBAR.ALL.SYS", "ATOM.E.ADD.STRONG.SYS"])
        .forbid(&["CCTL.IVALL"]),
    c("red_release_sys_add_u64", &["red.release.sys.add.u64"], &["MEMBAR.ALL.SYS", "ATOM.E.ADD.64.STRONG.SYS"])
        .forbid(&["CCTL.IVALL"]),
    c("atom_release_gpu_max_u64", &["atom.release.gpu.max.u64"], &["MEMBAR.ALL.GPU", "ATOM.E.MAX.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c(
        "atom_acq_rel_gpu_inc_u32",
        &["atom.acq_rel.gpu.inc.u32"],
        &["MEMBAR.ALL.GPU", "ATOM.E.INC.STRONG.GPU", "CCTL.IVALL"],
    ),
    c("atom_relaxed_gpu_global_add_u64", &["atom.relaxed.gpu.global.add.u64"], &["ATOMG.E.ADD.64.STRONG.GPU"])
        .forbid(&["CCTL.IVALL"]),
    c(
        "atom_release_gpu_global_max_u64",
        &["atom.release.gpu.global.max.u64"],
        &["MEMBAR.ALL.GPU", "ATOMG.E.MAX.64.STRONG.GPU"],
    ),
    c(
        "red_release_sys_global_add_u64",
        &["red.release.sys.global.add.u64"],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.64.STRONG.SYS"],
    )
    .forbid(&["multimem"]),
    c("red_relaxed_sys_global_add_u64", &["red.relaxed.sys.global.add.u64"], &["REDG.E.ADD.64.STRONG.SYS"])
        .forbid(&["multimem", "MEMBAR"]),
    c("fence_acq_rel_cta", &["fence.acq_rel.cta;"], &["MEMBAR.ALL.CTA"]),
    c("fence_acq_rel_gpu", &["fence.acq_rel.gpu;"], &["MEMBAR.ALL.GPU", "CCTL.IVALL"]),
    c("fence_acq_rel_sys", &["fence.acq_rel.sys;"], &["MEMBAR.ALL.SYS", "CCTL.IVALL"]),
    c("fence_sc_cta", &["fence.sc.cta;"], &["MEMBAR.SC.CTA"]),
    c("fence_sc_gpu", &["fence.sc.gpu;"], &["MEMBAR.SC.GPU", "CCTL.IVALL"]),
    c("fence_sc_sys", &["fence.sc.sys;"], &["MEMBAR.SC.SYS", "CCTL.IVALL"]),
    c("st_release_sys_global_u64", &["st.release.sys.global.u64"], &["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"])
        .forbid(&["multimem"]),
    c("st_relaxed_sys_global_u64", &["st.relaxed.sys.global.u64"], &["STG.E.64.STRONG.SYS"])
        .forbid(&["multimem", "MEMBAR"]),
    c("st_release_sys_global_v2_u64", &["st.release.sys.global.v2.u64"], &["MEMBAR.ALL.SYS", "STG.E.128.STRONG.SYS"]),
    c("ld_acquire_sys_global_v2_u64", &["ld.acquire.sys.global.v2.u64"], &["LDG.E.128.STRONG.SYS", "CCTL.IVALL"]),
    // sreg
    c("tid_x", &["%tid.x"], &["SR_TID.X"]),
    c("ntid_x", &["%ntid.x"], &[]).no_sass("read from the constant bank, an ordinary LDC"),
    c("ctaid_x", &["%ctaid.x"], &["SR_CTAID.X"]),
    c("nctaid_x", &["%nctaid.x"], &[]).no_sass("read from the constant bank, an ordinary LDC"),
    c("laneid", &["mov.u32", "%laneid"], &["SR_LANEID"]),
    c("smid", &["mov.u32", "%smid"], &["SR_VIRTUALSMID"]),
    c("globaltimer", &["mov.u64", "%globaltimer"], &["SR_GLOBALTIMERLO"]),
    c("clock64", &["mov.u64", "%clock64"], &["SR_CLOCKLO"]),
    c("dynamic_smem_size", &["%dynamic_smem_size"], &[]).no_sass("a constant-bank value (LDC)"),
    // arith
    c("add_rn_f16x2", &["add.rn.f16x2"], &["HFMA2.MMA"]), // a + b as fma(a, 1, b)
    c("add_rn_bf16x2", &["add.rn.bf16x2"], &["HFMA2.MMA.BF16_V2"]),
    // misc
    c("trap", &["trap;"], &["BPT.TRAP"]),
    c("exit", &["exit;"], &["EXIT"]),
    c("nanosleep", &["nanosleep.u32"], &["NANOSLEEP"]),
    c("bar_sync", &["bar.sync"], &["BAR.SYNC.DEFER_BLOCKING 0x0"]), // the convergent intrinsic: `bar.sync\t0;`
    c("barrier_sync", &["barrier.sync 0;"], &["BAR.SYNC.DEFER_BLOCKING 0x0"]),
    c("griddepcontrol_wait", &["griddepcontrol.wait;"], &["ACQBULK"]),
    c("griddepcontrol_launch_dependents", &["griddepcontrol.launch_dependents;"], &["PREEXIT"]),
    // fence
    c("fence_proxy_async_shared_cta", &["fence.proxy.async.shared::cta;"], &["FENCE.VIEW.ASYNC.S"]),
    c("fence_mbarrier_init_release_cluster", &["fence.mbarrier_init.release.cluster;"], &[])
        .no_sass("ptxas emits no instruction for it in this kernel, which has no cluster shape"),
    // smem
    c("dynamic_smem_base", &["mov.u32", "mscclpp_dynamic_smem"], &[])
        .no_sass("a shared address built from SR_CgaCtaId with ordinary integer code"),
    c("cvta_shared_u64", &["cvta.shared.u64"], &[]).no_sass("address arithmetic"),
    c("cvta_to_shared_u64", &["cvta.to.shared.u64"], &[]).no_sass("address arithmetic"),
    // print
    // Each calls its own function (which calls `vprintf`: `print_wrappers_call_vprintf`).
    c("print_failure", &[], &["CALL.REL.NOINC", "CALL.ABS.NOINC"]).calls("print_failure"),
    c("print_timeout", &[], &["CALL.REL.NOINC", "CALL.ABS.NOINC"]).calls("print_timeout"),
    c("print_panic", &[], &["CALL.REL.NOINC", "CALL.ABS.NOINC"]).calls("print_panic"),
    c("print_abort", &[], &["CALL.REL.NOINC", "CALL.ABS.NOINC"]).calls("print_abort"),
    // mbarrier
    c("mbarrier_init", &["mbarrier.init.shared::cta.b64"], &["SYNCS.EXCH.64"]),
    c("mbarrier_inval", &["mbarrier.inval.shared::cta.b64"], &["SYNCS.CCTL.IV"]),
    c("mbarrier_expect_tx", &["mbarrier.expect_tx.relaxed.cta.shared::cta.b64"], &["SYNCS.ARRIVE.TRANS64.RED.A0TR"]),
    c("mbarrier_arrive", &["mbarrier.arrive.release.cta.shared::cta.b64 _,"], &["SYNCS.ARRIVE.TRANS64.A1T0"]),
    c(
        "mbarrier_arrive_expect_tx",
        &["mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _,"],
        &["SYNCS.ARRIVE.TRANS64"],
    ),
    c("mbarrier_test_wait_parity", &["mbarrier.test_wait.parity.shared::cta.b64"], &["SYNCS.PHASECHK.TRANS64"]),
    c("mbarrier_try_wait_parity", &["mbarrier.try_wait.parity.shared::cta.b64"], &["SYNCS.PHASECHK.TRANS64.TRYWAIT"]),
    // cp_async_bulk
    c(
        "cp_async_bulk_shared_global",
        &["cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes"],
        &["UBLKCP.S.G"],
    )
    .forbid(&[".L2::cache_hint"]),
    c("cp_async_bulk_global_shared", &["cp.async.bulk.global.shared::cta.bulk_group"], &["UBLKCP.G.S"])
        .forbid(&[".L2::cache_hint"]),
    c(
        "cp_async_bulk_shared_global_hint",
        &["cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint"],
        &["UBLKCP.S.G"],
    ),
    c(
        "cp_async_bulk_global_shared_hint",
        &["cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint"],
        &["UBLKCP.G.S"],
    ),
    c("cp_async_bulk_prefetch_l2", &["cp.async.bulk.prefetch.L2.global"], &["UBLKPF.L2"]),
    c("cp_async_bulk_commit_group", &["cp.async.bulk.commit_group;"], &["UTMACMDFLUSH"]),
    c("cp_async_bulk_wait_group", &["cp.async.bulk.wait_group 3;"], &["DEPBAR.LE SB0, 0x3"]),
    c("cp_async_bulk_wait_group_read", &["cp.async.bulk.wait_group.read 2;"], &["DEPBAR.LE SB0, 0x2"]),
    c("createpolicy_fractional_l2_evict_first", &["createpolicy.fractional.L2::evict_first.b64"], &[])
        .no_sass("the policy word is built from constants with ordinary uniform integer code"),
    c("createpolicy_fractional_l2_evict_last", &["createpolicy.fractional.L2::evict_last.b64"], &[])
        .no_sass("the policy word is built from constants with ordinary uniform integer code"),
    c(
        "cp_reduce_async_bulk_add_noftz_f16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16"],
        &["UBLKRED.G.S.ADD.F16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_add_noftz_bf16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16"],
        &["UBLKRED.G.S.ADD.BF16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_add_f32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"],
        &["UBLKRED.G.S.ADD.F32.RN"],
    ),
    c(
        "cp_reduce_async_bulk_add_f64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64"],
        &["UBLKRED.G.S.ADD.F64.RN"],
    ),
    c(
        "cp_reduce_async_bulk_add_u32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32"],
        &["UBLKRED.G.S.ADD "],
    ),
    c(
        "cp_reduce_async_bulk_add_s32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32"],
        &["UBLKRED.G.S.ADD.S32"],
    ),
    c(
        "cp_reduce_async_bulk_add_u64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64"],
        &["UBLKRED.G.S.ADD.U64"],
    ),
    c(
        "cp_reduce_async_bulk_min_f16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f16"],
        &["UBLKRED.G.S.MIN.F16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_min_bf16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.bf16"],
        &["UBLKRED.G.S.MIN.BF16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_min_u32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u32"],
        &["UBLKRED.G.S.MIN "],
    ),
    c(
        "cp_reduce_async_bulk_min_s32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s32"],
        &["UBLKRED.G.S.MIN.S32"],
    ),
    c(
        "cp_reduce_async_bulk_min_u64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.u64"],
        &["UBLKRED.G.S.MIN.U64"],
    ),
    c(
        "cp_reduce_async_bulk_min_s64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s64"],
        &["UBLKRED.G.S.MIN.S64"],
    ),
    c(
        "cp_reduce_async_bulk_max_f16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.f16"],
        &["UBLKRED.G.S.MAX.F16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_max_bf16",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.bf16"],
        &["UBLKRED.G.S.MAX.BF16.RN"],
    ),
    c(
        "cp_reduce_async_bulk_max_u32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u32"],
        &["UBLKRED.G.S.MAX "],
    ),
    c(
        "cp_reduce_async_bulk_max_s32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s32"],
        &["UBLKRED.G.S.MAX.S32"],
    ),
    c(
        "cp_reduce_async_bulk_max_u64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.u64"],
        &["UBLKRED.G.S.MAX.U64"],
    ),
    c(
        "cp_reduce_async_bulk_max_s64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s64"],
        &["UBLKRED.G.S.MAX.S64"],
    ),
    c(
        "cp_reduce_async_bulk_inc_u32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.inc.u32"],
        &["UBLKRED.G.S.INC"],
    ),
    c(
        "cp_reduce_async_bulk_dec_u32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.dec.u32"],
        &["UBLKRED.G.S.DEC"],
    ),
    c(
        "cp_reduce_async_bulk_and_b32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b32"],
        &["UBLKRED.G.S.AND "],
    ),
    c(
        "cp_reduce_async_bulk_or_b32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b32"],
        &["UBLKRED.G.S.OR "],
    ),
    c(
        "cp_reduce_async_bulk_xor_b32",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b32"],
        &["UBLKRED.G.S.XOR "],
    ),
    c(
        "cp_reduce_async_bulk_and_b64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.and.b64"],
        &["UBLKRED.G.S.AND.U64"],
    ),
    c(
        "cp_reduce_async_bulk_or_b64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.or.b64"],
        &["UBLKRED.G.S.OR.U64"],
    ),
    c(
        "cp_reduce_async_bulk_xor_b64",
        &["cp.reduce.async.bulk.global.shared::cta.bulk_group.xor.b64"],
        &["UBLKRED.G.S.XOR.U64"],
    ),
];
