//! Scoped loads and stores (memory-consistency-model forms) on generic addresses.
//!
//! `relaxed`/`acquire` loads and `relaxed`/`release` stores at `cta`, `gpu` and `sys` scope on
//! 32- and 64-bit words, plus `volatile` forms. Generic addressing, so the pointer may point into
//! global memory (local or peer-mapped), mapped host memory, or shared memory. The `.global`
//! forms at the end take addresses of the global state space only: the 16-byte accesses of the
//! FIFO, the plain 4/8/16-byte accesses of the cooperative copies, and the volatile 8/16-byte
//! accesses of the LL packets.

use super::asm;

macro_rules! scoped_loads {
    ($( $(#[$doc:meta])* pub fn $name:ident($t:ty, $reg:ident) = $op:literal; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// `ptr` must be valid for reads of the type and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(ptr: *const $t) -> $t {
            let v: $t;
            // SAFETY: the caller guarantees `ptr` is valid and aligned.
            unsafe { asm!(concat!($op, " {v}, [{p}];"), v = out($reg) v, p = in(reg64) ptr, options(nostack)) };
            v
        }
    )* };
}

macro_rules! scoped_stores {
    ($( $(#[$doc:meta])* pub fn $name:ident($t:ty, $reg:ident) = $op:literal; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// `ptr` must be valid for writes of the type and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(ptr: *mut $t, value: $t) {
            // SAFETY: the caller guarantees `ptr` is valid and aligned.
            unsafe { asm!(concat!($op, " [{p}], {v};"), p = in(reg64) ptr, v = in($reg) value, options(nostack)) };
        }
    )* };
}

scoped_loads! {
    /// `ld.relaxed.cta.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_cta_u32(u32, reg32) = "ld.relaxed.cta.u32";
    /// `ld.relaxed.gpu.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_gpu_u32(u32, reg32) = "ld.relaxed.gpu.u32";
    /// `ld.relaxed.sys.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_sys_u32(u32, reg32) = "ld.relaxed.sys.u32";
    /// `ld.acquire.cta.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_cta_u32(u32, reg32) = "ld.acquire.cta.u32";
    /// `ld.acquire.gpu.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_gpu_u32(u32, reg32) = "ld.acquire.gpu.u32";
    /// `ld.acquire.sys.u32 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_sys_u32(u32, reg32) = "ld.acquire.sys.u32";
    /// `ld.relaxed.cta.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_cta_u64(u64, reg64) = "ld.relaxed.cta.u64";
    /// `ld.relaxed.gpu.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_gpu_u64(u64, reg64) = "ld.relaxed.gpu.u64";
    /// `ld.relaxed.sys.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_relaxed_sys_u64(u64, reg64) = "ld.relaxed.sys.u64";
    /// `ld.acquire.cta.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_cta_u64(u64, reg64) = "ld.acquire.cta.u64";
    /// `ld.acquire.gpu.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_gpu_u64(u64, reg64) = "ld.acquire.gpu.u64";
    /// `ld.acquire.sys.u64 d, [a];` (PTX 6.0, sm_70)
    pub fn ld_acquire_sys_u64(u64, reg64) = "ld.acquire.sys.u64";
    /// `ld.volatile.u32 d, [a];` (PTX 1.1)
    pub fn ld_volatile_u32(u32, reg32) = "ld.volatile.u32";
    /// `ld.volatile.u64 d, [a];` (PTX 1.1)
    pub fn ld_volatile_u64(u64, reg64) = "ld.volatile.u64";
}

scoped_stores! {
    /// `st.relaxed.cta.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_cta_u32(u32, reg32) = "st.relaxed.cta.u32";
    /// `st.relaxed.gpu.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_gpu_u32(u32, reg32) = "st.relaxed.gpu.u32";
    /// `st.relaxed.sys.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_sys_u32(u32, reg32) = "st.relaxed.sys.u32";
    /// `st.release.cta.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_cta_u32(u32, reg32) = "st.release.cta.u32";
    /// `st.release.gpu.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_gpu_u32(u32, reg32) = "st.release.gpu.u32";
    /// `st.release.sys.u32 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_sys_u32(u32, reg32) = "st.release.sys.u32";
    /// `st.relaxed.cta.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_cta_u64(u64, reg64) = "st.relaxed.cta.u64";
    /// `st.relaxed.gpu.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_gpu_u64(u64, reg64) = "st.relaxed.gpu.u64";
    /// `st.relaxed.sys.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_relaxed_sys_u64(u64, reg64) = "st.relaxed.sys.u64";
    /// `st.release.cta.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_cta_u64(u64, reg64) = "st.release.cta.u64";
    /// `st.release.gpu.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_gpu_u64(u64, reg64) = "st.release.gpu.u64";
    /// `st.release.sys.u64 [a], v;` (PTX 6.0, sm_70)
    pub fn st_release_sys_u64(u64, reg64) = "st.release.sys.u64";
    /// `st.volatile.u32 [a], v;` (PTX 1.1)
    pub fn st_volatile_u32(u32, reg32) = "st.volatile.u32";
    /// `st.volatile.u64 [a], v;` (PTX 1.1)
    pub fn st_volatile_u64(u64, reg64) = "st.volatile.u64";
}

/// `st.release.sys.global.u64 [a], v;` (PTX 6.0, sm_70): the semaphore signal (global state
/// space: local or peer-mapped memory).
///
/// # Safety
/// `ptr` must be valid for writes in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn st_release_sys_global_u64(ptr: *mut u64, value: u64) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("st.release.sys.global.u64 [{p}], {v};", p = in(reg64) ptr, v = in(reg64) value, options(nostack)) };
}

/// `st.relaxed.sys.global.u64 [a], v;` (PTX 6.0, sm_70)
///
/// # Safety
/// `ptr` must be valid for writes in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn st_relaxed_sys_global_u64(ptr: *mut u64, value: u64) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("st.relaxed.sys.global.u64 [{p}], {v};", p = in(reg64) ptr, v = in(reg64) value, options(nostack)) };
}

/// `st.release.sys.global.v2.u64 [a], {x, y};` (PTX 6.0, sm_70): one 16-byte store with release
/// semantics at system scope (the FIFO's trigger publication).
///
/// # Safety
/// `ptr` must be valid for a 16-byte write in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn st_release_sys_global_v2_u64(ptr: *mut u64, x: u64, y: u64) {
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "st.release.sys.global.v2.u64 [{p}], {{{x}, {y}}};",
            p = in(reg64) ptr, x = in(reg64) x, y = in(reg64) y, options(nostack)
        )
    };
}

/// `ld.acquire.sys.global.v2.u64 {x, y}, [a];` (PTX 6.0, sm_70): one 16-byte load with acquire
/// semantics at system scope.
///
/// # Safety
/// `ptr` must be valid for a 16-byte read in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn ld_acquire_sys_global_v2_u64(ptr: *const u64) -> (u64, u64) {
    let (x, y): (u64, u64);
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "ld.acquire.sys.global.v2.u64 {{{x}, {y}}}, [{p}];",
            x = out(reg64) x, y = out(reg64) y, p = in(reg64) ptr, options(nostack)
        )
    };
    (x, y)
}

/// `ld.global.u32 d, [a];` (PTX 1.0): a plain (weak) 4-byte load from the global state space
/// (local or peer-mapped memory), for copies.
///
/// # Safety
/// `ptr` must be valid for a 4-byte read in the global state space and 4-byte aligned.
#[inline(always)]
pub unsafe fn ld_global_u32(ptr: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("ld.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) ptr, options(nostack)) };
    v
}

/// `st.global.u32 [a], v;` (PTX 1.0): a plain 4-byte store to the global state space.
///
/// # Safety
/// `ptr` must be valid for a 4-byte write in the global state space and 4-byte aligned.
#[inline(always)]
pub unsafe fn st_global_u32(ptr: *mut u32, value: u32) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("st.global.u32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) value, options(nostack)) };
}

/// `ld.global.u64 d, [a];` (PTX 1.0): a plain 8-byte load from the global state space.
///
/// # Safety
/// `ptr` must be valid for an 8-byte read in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn ld_global_u64(ptr: *const u64) -> u64 {
    let v: u64;
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("ld.global.u64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) ptr, options(nostack)) };
    v
}

/// `st.global.u64 [a], v;` (PTX 1.0): a plain 8-byte store to the global state space.
///
/// # Safety
/// `ptr` must be valid for an 8-byte write in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn st_global_u64(ptr: *mut u64, value: u64) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe { asm!("st.global.u64 [{p}], {v};", p = in(reg64) ptr, v = in(reg64) value, options(nostack)) };
}

/// `ld.global.v4.u32 {a, b, c, d}, [p];` (PTX 1.0): a plain 16-byte vector load from the global
/// state space (one 128-bit access), for copies.
///
/// # Safety
/// `ptr` must be valid for a 16-byte read in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn ld_global_v4_u32(ptr: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) ptr,
            options(nostack)
        )
    };
    [a, b, c, d]
}

/// `st.global.v4.u32 [p], {a, b, c, d};` (PTX 1.0): a plain 16-byte vector store to the global
/// state space (one 128-bit access).
///
/// # Safety
/// `ptr` must be valid for a 16-byte write in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn st_global_v4_u32(ptr: *mut u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) ptr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack)
        )
    };
}

/// `ld.volatile.global.v2.u32 {a, b}, [p];` (PTX 1.1): one 8-byte volatile load (the LL8 packet
/// read: data and flag come from the same access).
///
/// # Safety
/// `ptr` must be valid for an 8-byte read in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn ld_volatile_global_v2_u32(ptr: *const u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: the caller guarantees `ptr` is valid and 8-byte aligned.
    unsafe {
        asm!(
            "ld.volatile.global.v2.u32 {{{a}, {b}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, p = in(reg64) ptr, options(nostack)
        )
    };
    [a, b]
}

/// `st.volatile.global.v2.u32 [p], {a, b};` (PTX 1.1): one 8-byte volatile store (the LL8 packet
/// write).
///
/// # Safety
/// `ptr` must be valid for an 8-byte write in the global state space and 8-byte aligned.
#[inline(always)]
pub unsafe fn st_volatile_global_v2_u32(ptr: *mut u32, v: [u32; 2]) {
    // SAFETY: the caller guarantees `ptr` is valid and 8-byte aligned.
    unsafe {
        asm!(
            "st.volatile.global.v2.u32 [{p}], {{{a}, {b}}};",
            p = in(reg64) ptr, a = in(reg32) v[0], b = in(reg32) v[1], options(nostack)
        )
    };
}

/// `ld.volatile.global.v4.u32 {a, b, c, d}, [p];` (PTX 1.1): one 16-byte volatile load (the LL16
/// packet read).
///
/// # Safety
/// `ptr` must be valid for a 16-byte read in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn ld_volatile_global_v4_u32(ptr: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "ld.volatile.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) ptr,
            options(nostack)
        )
    };
    [a, b, c, d]
}

/// `st.volatile.global.v4.u32 [p], {a, b, c, d};` (PTX 1.1): one 16-byte volatile store (the LL16
/// packet write).
///
/// # Safety
/// `ptr` must be valid for a 16-byte write in the global state space and 16-byte aligned.
#[inline(always)]
pub unsafe fn st_volatile_global_v4_u32(ptr: *mut u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `ptr` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "st.volatile.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) ptr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack)
        )
    };
}
