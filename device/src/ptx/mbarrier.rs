//! `mbarrier` on shared memory (`.shared::cta`, 8-byte objects).
//!
//! The barrier operand is a [`SharedPtr<u64>`](crate::ptr::SharedPtr): the 8-byte object in this
//! CTA's shared memory, so neither a global address nor a count can stand in for it.
//!
//! The check kernels read their operands from memory: `p[0]` the barrier's shared address, `p[1]`
//! a count, byte total or parity.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;
#[cfg(any(target_arch = "nvptx64", doc))]
use crate::ptr::SharedPtr;

hand! {
    table = MBARRIER;

    #[check("mbarrier.init.shared::cta.b64", sass ["SYNCS.EXCH.64"],
        kernel |p: *mut u32| { mbarrier_init(SharedPtr::from_addr(*p), *p.add(1)); })]
    /// `mbarrier.init.shared::cta.b64 [a], count;` (PTX 7.0, sm_80)
    ///
    /// # Safety
    /// `bar` must be an 8-byte aligned slot of this CTA's shared memory not in use by any pending operation.
    #[inline(always)]
    pub unsafe fn mbarrier_init(bar: SharedPtr<u64>, count: u32) {
        // SAFETY: caller guarantees `bar` is a valid, idle barrier slot.
        unsafe { asm!(concat!(mnemonic!(), " [{b}], {c};"), b = in(reg32) bar.addr(), c = in(reg32) count, options(nostack)) };
    }

    #[check("mbarrier.expect_tx.relaxed.cta.shared::cta.b64", sass ["SYNCS.ARRIVE.TRANS64.RED.A0TR"],
        kernel |p: *mut u32| { mbarrier_expect_tx(SharedPtr::from_addr(*p), *p.add(1)); })]
    /// `mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [a], tx;` (PTX 8.0, sm_90): adds `tx` to the
    /// transaction bytes the current phase waits for, without arriving.
    ///
    /// # Safety
    /// `bar` must be an initialised barrier in this CTA's shared memory.
    #[inline(always)]
    pub unsafe fn mbarrier_expect_tx(bar: SharedPtr<u64>, tx: u32) {
        // SAFETY: caller guarantees `bar` is an initialised barrier.
        unsafe { asm!(concat!(mnemonic!(), " [{b}], {t};"), b = in(reg32) bar.addr(), t = in(reg32) tx, options(nostack)) };
    }

    #[check("mbarrier.arrive.release.cta.shared::cta.b64", also ["mbarrier.arrive.release.cta.shared::cta.b64 _"],
        sass ["SYNCS.ARRIVE.TRANS64.A1T0"], kernel |p: *mut u32| { mbarrier_arrive(SharedPtr::from_addr(*p)); })]
    /// `mbarrier.arrive.release.cta.shared::cta.b64 _, [a];` (PTX 8.0, sm_90): one arrival.
    ///
    /// # Safety
    /// `bar` must be an initialised barrier in this CTA's shared memory.
    #[inline(always)]
    pub unsafe fn mbarrier_arrive(bar: SharedPtr<u64>) {
        // SAFETY: caller guarantees `bar` is an initialised barrier.
        unsafe { asm!(concat!(mnemonic!(), " _, [{b}];"), b = in(reg32) bar.addr(), options(nostack)) };
    }

    #[check("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64",
        also ["mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _"], sass ["SYNCS.ARRIVE.TRANS64"],
        kernel |p: *mut u32| { mbarrier_arrive_expect_tx(SharedPtr::from_addr(*p), *p.add(1)); })]
    /// `mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [a], tx;` (PTX 8.0, sm_90): adds
    /// `tx` to the expected transaction bytes, then arrives.
    ///
    /// # Safety
    /// `bar` must be an initialised barrier in this CTA's shared memory.
    #[inline(always)]
    pub unsafe fn mbarrier_arrive_expect_tx(bar: SharedPtr<u64>, tx: u32) {
        // SAFETY: caller guarantees `bar` is an initialised barrier.
        unsafe { asm!(concat!(mnemonic!(), " _, [{b}], {t};"), b = in(reg32) bar.addr(), t = in(reg32) tx, options(nostack)) };
    }

    #[check("mbarrier.test_wait.parity.shared::cta.b64", sass ["SYNCS.PHASECHK.TRANS64"],
        kernel |p: *mut u32| { *p.add(2) = mbarrier_test_wait_parity(SharedPtr::from_addr(*p), *p.add(1)) as u32; })]
    /// `mbarrier.test_wait.parity.shared::cta.b64 p, [a], parity;` (PTX 7.1, sm_80): true if the phase
    /// with the given parity has completed (acquire at CTA scope); never suspends.
    ///
    /// # Safety
    /// `bar` must be an initialised barrier in this CTA's shared memory.
    #[inline(always)]
    pub unsafe fn mbarrier_test_wait_parity(bar: SharedPtr<u64>, parity: u32) -> bool {
        let done: u32;
        // SAFETY: caller guarantees `bar` is an initialised barrier.
        unsafe {
            asm!(
                concat!("{{ .reg .pred p; ", mnemonic!(), " p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}"),
                d = out(reg32) done, b = in(reg32) bar.addr(), ph = in(reg32) parity, options(nostack)
            )
        };
        done != 0
    }

    #[check("mbarrier.try_wait.parity.shared::cta.b64", sass ["SYNCS.PHASECHK.TRANS64.TRYWAIT"],
        kernel |p: *mut u32| { *p.add(2) = mbarrier_try_wait_parity(SharedPtr::from_addr(*p), *p.add(1)) as u32; })]
    /// `mbarrier.try_wait.parity.shared::cta.b64 p, [a], parity;` (PTX 7.8, sm_90): true once the
    /// phase with the given parity has completed (acquire at CTA scope). May suspend the thread for a
    /// system-dependent time before returning false.
    ///
    /// # Safety
    /// `bar` must be an initialised barrier in this CTA's shared memory.
    #[inline(always)]
    pub unsafe fn mbarrier_try_wait_parity(bar: SharedPtr<u64>, parity: u32) -> bool {
        let done: u32;
        // SAFETY: caller guarantees `bar` is an initialised barrier.
        unsafe {
            asm!(
                concat!("{{ .reg .pred p; ", mnemonic!(), " p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}"),
                d = out(reg32) done, b = in(reg32) bar.addr(), ph = in(reg32) parity, options(nostack)
            )
        };
        done != 0
    }
}
