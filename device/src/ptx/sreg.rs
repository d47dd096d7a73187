//! Special registers.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::{asm, nvptx};

hand! {
    table = SREG;

    #[check("%tid.x", sass ["SR_TID.X"], kernel |p: *mut u32| { *p = tid_x(); })]
    /// `%tid.x` (PTX 1.0).
    #[inline(always)]
    pub fn tid_x() -> u32 {
        // SAFETY: reading a special register has no preconditions.
        unsafe { nvptx::_thread_idx_x() as u32 }
    }

    #[check("%ntid.x", sass [], no_sass "read from the constant bank, an ordinary LDC",
        kernel |p: *mut u32| { *p = ntid_x(); })]
    /// `%ntid.x` (PTX 1.0).
    #[inline(always)]
    pub fn ntid_x() -> u32 {
        // SAFETY: reading a special register has no preconditions.
        unsafe { nvptx::_block_dim_x() as u32 }
    }

    #[check("%ctaid.x", sass ["SR_CTAID.X"], kernel |p: *mut u32| { *p = ctaid_x(); })]
    /// `%ctaid.x` (PTX 1.0).
    #[inline(always)]
    pub fn ctaid_x() -> u32 {
        // SAFETY: reading a special register has no preconditions.
        unsafe { nvptx::_block_idx_x() as u32 }
    }

    #[check("%nctaid.x", sass [], no_sass "read from the constant bank, an ordinary LDC",
        kernel |p: *mut u32| { *p = nctaid_x(); })]
    /// `%nctaid.x` (PTX 1.0).
    #[inline(always)]
    pub fn nctaid_x() -> u32 {
        // SAFETY: reading a special register has no preconditions.
        unsafe { nvptx::_grid_dim_x() as u32 }
    }

    #[check("%laneid", also ["mov.u32"], sass ["SR_LANEID"], kernel |p: *mut u32| { *p = laneid(); })]
    /// `mov.u32 d, %laneid;` (PTX 1.3).
    #[inline(always)]
    pub fn laneid() -> u32 {
        let r: u32;
        // SAFETY: reads a special register; no memory access.
        unsafe { asm!(concat!("mov.u32 {r}, ", mnemonic!(), ";"), r = out(reg32) r, options(nomem, nostack, pure)) };
        r
    }

    #[check("%smid", also ["mov.u32"], sass ["SR_VIRTUALSMID"], kernel |p: *mut u32| { *p = smid(); })]
    /// `mov.u32 d, %smid;` (PTX 1.3): the multiprocessor this thread runs on (may change).
    #[inline(always)]
    pub fn smid() -> u32 {
        let r: u32;
        // SAFETY: reads a special register; volatile because it may change between reads.
        unsafe { asm!(concat!("mov.u32 {r}, ", mnemonic!(), ";"), r = out(reg32) r, options(nomem, nostack)) };
        r
    }

    #[check("%globaltimer", also ["mov.u64"], sass ["SR_GLOBALTIMERLO"], kernel |p: *mut u64| { *p = globaltimer(); })]
    /// `mov.u64 d, %globaltimer;` (PTX 3.1, sm_30): nanoseconds, coarse ticks.
    #[inline(always)]
    pub fn globaltimer() -> u64 {
        let r: u64;
        // SAFETY: reads a special register; volatile so that every call reads the clock again.
        unsafe { asm!(concat!("mov.u64 {r}, ", mnemonic!(), ";"), r = out(reg64) r, options(nomem, nostack)) };
        r
    }

    #[check("%clock64", also ["mov.u64"], sass ["SR_CLOCKLO"], kernel |p: *mut u64| { *p = clock64(); })]
    /// `mov.u64 d, %clock64;` (PTX 2.0): this multiprocessor's cycle counter.
    #[inline(always)]
    pub fn clock64() -> u64 {
        let r: u64;
        // SAFETY: reads a special register; volatile so that every call reads the counter again.
        unsafe { asm!(concat!("mov.u64 {r}, ", mnemonic!(), ";"), r = out(reg64) r, options(nomem, nostack)) };
        r
    }
}
