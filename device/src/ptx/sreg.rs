//! Special registers.

use super::{asm, nvptx};

/// `%tid.x` (PTX 1.0).
#[inline(always)]
pub fn tid_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_thread_idx_x() as u32 }
}
/// `%ntid.x` (PTX 1.0).
#[inline(always)]
pub fn ntid_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_dim_x() as u32 }
}
/// `%ctaid.x` (PTX 1.0).
#[inline(always)]
pub fn ctaid_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_idx_x() as u32 }
}
/// `%nctaid.x` (PTX 1.0).
#[inline(always)]
pub fn nctaid_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `mov.u32 d, %laneid;` (PTX 1.3).
#[inline(always)]
pub fn laneid() -> u32 {
    let r: u32;
    // SAFETY: reads a special register; no memory access.
    unsafe { asm!("mov.u32 {r}, %laneid;", r = out(reg32) r, options(nomem, nostack, pure)) };
    r
}

/// `mov.u32 d, %smid;` (PTX 1.3): the multiprocessor this thread runs on (may change).
#[inline(always)]
pub fn smid() -> u32 {
    let r: u32;
    // SAFETY: reads a special register; volatile because it may change between reads.
    unsafe { asm!("mov.u32 {r}, %smid;", r = out(reg32) r, options(nomem, nostack)) };
    r
}

/// `mov.u64 d, %globaltimer;` (PTX 3.1, sm_30): nanoseconds, coarse ticks.
#[inline(always)]
pub fn globaltimer() -> u64 {
    let r: u64;
    // SAFETY: reads a special register; volatile so that every call reads the clock again.
    unsafe { asm!("mov.u64 {r}, %globaltimer;", r = out(reg64) r, options(nomem, nostack)) };
    r
}

/// `mov.u64 d, %clock64;` (PTX 2.0): this multiprocessor's cycle counter.
#[inline(always)]
pub fn clock64() -> u64 {
    let r: u64;
    // SAFETY: reads a special register; volatile so that every call reads the counter again.
    unsafe { asm!("mov.u64 {r}, %clock64;", r = out(reg64) r, options(nomem, nostack)) };
    r
}

/// `mov.u32 d, %dynamic_smem_size;` (PTX 4.1): bytes of dynamic shared memory of this launch.
#[inline(always)]
pub fn dynamic_smem_size() -> u32 {
    let r: u32;
    // SAFETY: reads a special register; no memory access.
    unsafe { asm!("mov.u32 {r}, %dynamic_smem_size;", r = out(reg32) r, options(nomem, nostack, pure)) };
    r
}
