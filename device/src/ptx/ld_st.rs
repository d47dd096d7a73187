//! Loads and stores: the memory-consistency-model forms on generic addresses, and the accesses of
//! the global state space.
//!
//! `relaxed`/`acquire` loads and `relaxed`/`release` stores at `cta`, `gpu` and `sys` scope on
//! 32- and 64-bit words, plus `volatile` forms. Generic addressing, so the pointer may point into
//! global memory (local or peer-mapped), mapped host memory, or shared memory. The `.global`
//! forms take addresses of the global state space only (this GPU's memory, a peer's mapped memory,
//! or mapped host memory): the 8-byte stores of the FIFO's triggers, the plain 4/8/16-byte accesses
//! of the cooperative copies, the volatile 8/16-byte accesses of the LL packets, and the semaphore
//! signal.
//!
//! A vector access (`.v2`, `.v4`) is one instruction for the whole vector; its value is an array
//! of the lanes, lane 0 at the lowest address. The PTX memory model treats it as one access per
//! lane, in no order among them: a release or acquire vector access orders the thread's other
//! accesses against every lane, not the lanes against each other, so a reader that acquires one
//! lane of a release vector store may still see another lane's old value.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;

loads! {
    table = SCOPED_LOADS, safety = "`ptr` must be valid for reads of the type and naturally aligned.";
    pub unsafe fn ld_relaxed_cta_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.relaxed.cta.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_relaxed_gpu_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.relaxed.gpu.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_relaxed_sys_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.relaxed.sys.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_acquire_cta_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.acquire.cta.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn ld_acquire_gpu_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.acquire.gpu.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.GPU", "CCTL.IVALL"], forbid ["MEMBAR"];
    pub unsafe fn ld_acquire_sys_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.acquire.sys.u32" ("PTX 6.0, sm_70"),
        sass ["LD.E.STRONG.SYS", "CCTL.IVALL"], forbid ["MEMBAR"];
    pub unsafe fn ld_relaxed_cta_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.relaxed.cta.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.SM"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_relaxed_gpu_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.relaxed.gpu.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.GPU"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_relaxed_sys_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.relaxed.sys.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_acquire_cta_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.acquire.cta.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn ld_acquire_gpu_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.acquire.gpu.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.GPU", "CCTL.IVALL"], forbid ["MEMBAR"];
    pub unsafe fn ld_acquire_sys_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.acquire.sys.u64" ("PTX 6.0, sm_70"),
        sass ["LD.E.64.STRONG.SYS", "CCTL.IVALL"], forbid ["MEMBAR"];
    pub unsafe fn ld_volatile_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.volatile.u32" ("PTX 1.1"),
        sass ["LD.E.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn ld_volatile_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.volatile.u64" ("PTX 1.1"),
        sass ["LD.E.64.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
}

stores! {
    table = SCOPED_STORES, safety = "`ptr` must be valid for writes of the type and naturally aligned.";
    pub unsafe fn st_relaxed_cta_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.relaxed.cta.u32" ("PTX 6.0, sm_70"),
        sass ["ST.E.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn st_relaxed_gpu_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.relaxed.gpu.u32" ("PTX 6.0, sm_70"),
        sass ["ST.E.STRONG.GPU"], forbid ["MEMBAR"];
    pub unsafe fn st_relaxed_sys_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.relaxed.sys.u32" ("PTX 6.0, sm_70"),
        sass ["ST.E.STRONG.SYS"], forbid ["MEMBAR"];
    pub unsafe fn st_release_cta_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.release.cta.u32" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.CTA", "ST.E.STRONG.SM"];
    pub unsafe fn st_release_gpu_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.release.gpu.u32" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.GPU", "ST.E.STRONG.GPU"];
    pub unsafe fn st_release_sys_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.release.sys.u32" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.SYS", "ST.E.STRONG.SYS"];
    pub unsafe fn st_relaxed_cta_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.relaxed.cta.u64" ("PTX 6.0, sm_70"),
        sass ["ST.E.64.STRONG.SM"], forbid ["MEMBAR"];
    pub unsafe fn st_relaxed_gpu_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.relaxed.gpu.u64" ("PTX 6.0, sm_70"),
        sass ["ST.E.64.STRONG.GPU"], forbid ["MEMBAR"];
    pub unsafe fn st_relaxed_sys_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.relaxed.sys.u64" ("PTX 6.0, sm_70"),
        sass ["ST.E.64.STRONG.SYS"], forbid ["MEMBAR"];
    pub unsafe fn st_release_cta_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.release.cta.u64" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.CTA", "ST.E.64.STRONG.SM"];
    pub unsafe fn st_release_gpu_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.release.gpu.u64" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.GPU", "ST.E.64.STRONG.GPU"];
    pub unsafe fn st_release_sys_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.release.sys.u64" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.SYS", "ST.E.64.STRONG.SYS"];
    pub unsafe fn st_volatile_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.volatile.u32" ("PTX 1.1"),
        sass ["ST.E.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
    pub unsafe fn st_volatile_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.volatile.u64" ("PTX 1.1"),
        sass ["ST.E.64.STRONG.SYS"], forbid ["CCTL.IVALL", "MEMBAR"];
}

loads! {
    table = GLOBAL_LOADS,
    safety = "`ptr` must be an address of the global state space, valid for a read of the value's size \
              and aligned to it.";
    /// A plain (weak) 4-byte load, for copies.
    pub unsafe fn ld_global_u32(ptr: *const u32) -> u32: x1 reg32 = "ld.global.u32" ("PTX 1.0"),
        sass ["LDG.E"];
    /// A plain (weak) 8-byte load, for copies.
    pub unsafe fn ld_global_u64(ptr: *const u64) -> u64: x1 reg64 = "ld.global.u64" ("PTX 1.0"),
        sass ["LDG.E.64"];
    /// A plain (weak) 16-byte vector load (one 128-bit access), for copies.
    pub unsafe fn ld_global_v4_u32(ptr: *const u32) -> [u32; 4]: w4 = "ld.global.v4.u32" ("PTX 1.0"),
        sass ["LDG.E.128"];
    /// One 8-byte volatile load (the LL8 packet read: data and flag come from the same access).
    pub unsafe fn ld_volatile_global_v2_u32(ptr: *const u32) -> [u32; 2]: w2 = "ld.volatile.global.v2.u32" ("PTX 1.1"),
        sass ["LDG.E.64.STRONG.SYS"];
    /// One 16-byte volatile load (the LL16 packet read).
    pub unsafe fn ld_volatile_global_v4_u32(ptr: *const u32) -> [u32; 4]: w4 = "ld.volatile.global.v4.u32" ("PTX 1.1"),
        sass ["LDG.E.128.STRONG.SYS"];
    /// One 16-byte load with acquire semantics at system scope.
    pub unsafe fn ld_acquire_sys_global_v2_u64(ptr: *const u64) -> [u64; 2]: d2 =
        "ld.acquire.sys.global.v2.u64" ("PTX 6.0, sm_70"),
        sass ["LDG.E.128.STRONG.SYS", "CCTL.IVALL"];
}

stores! {
    table = GLOBAL_STORES,
    safety = "`ptr` must be an address of the global state space, valid for a write of the value's size \
              and aligned to it.";
    /// A plain 4-byte store, for copies.
    pub unsafe fn st_global_u32(ptr: *mut u32, value: u32): x1 reg32 = "st.global.u32" ("PTX 1.0"),
        sass ["STG.E"];
    /// A plain 8-byte store, for copies.
    pub unsafe fn st_global_u64(ptr: *mut u64, value: u64): x1 reg64 = "st.global.u64" ("PTX 1.0"),
        sass ["STG.E.64"];
    /// A plain 16-byte vector store (one 128-bit access), for copies.
    pub unsafe fn st_global_v4_u32(ptr: *mut u32, value: [u32; 4]): w4 = "st.global.v4.u32" ("PTX 1.0"),
        sass ["STG.E.128"];
    /// One 8-byte volatile store (the LL8 packet write).
    pub unsafe fn st_volatile_global_v2_u32(ptr: *mut u32, value: [u32; 2]): w2 =
        "st.volatile.global.v2.u32" ("PTX 1.1"),
        sass ["STG.E.64.STRONG.SYS"];
    /// One 16-byte volatile store (the LL16 packet write).
    pub unsafe fn st_volatile_global_v4_u32(ptr: *mut u32, value: [u32; 4]): w4 =
        "st.volatile.global.v4.u32" ("PTX 1.1"),
        sass ["STG.E.128.STRONG.SYS"];
    /// The semaphore signal, and the FIFO's publication of a trigger's word 1.
    pub unsafe fn st_release_sys_global_u64(ptr: *mut u64, value: u64): x1 reg64 =
        "st.release.sys.global.u64" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"], forbid ["multimem"];
    /// The FIFO's store of a trigger's word 0 (before the release store of word 1).
    pub unsafe fn st_relaxed_sys_global_u64(ptr: *mut u64, value: u64): x1 reg64 =
        "st.relaxed.sys.global.u64" ("PTX 6.0, sm_70"),
        sass ["STG.E.64.STRONG.SYS"], forbid ["multimem", "MEMBAR"];
    /// One 16-byte store with release semantics at system scope. Not a publication of both lanes
    /// at once: their order is unspecified (see the module docs), which is why the FIFO stores a
    /// trigger's two words with two 8-byte stores, the second with release.
    pub unsafe fn st_release_sys_global_v2_u64(ptr: *mut u64, value: [u64; 2]): d2 =
        "st.release.sys.global.v2.u64" ("PTX 6.0, sm_70"),
        sass ["MEMBAR.ALL.SYS", "STG.E.128.STRONG.SYS"];
}
