//! CTA barriers in divergent code: kernels whose PTX and SASS must hold exactly one barrier
//! instruction per barrier in their source (the root crate's `BARRIER_COUNTS`).

use mscclpp_device::ptx::{misc, sreg};

use crate::kernels;

// CTA barriers in divergent code: the documented pattern `if leader { init } barrier(); if leader
// { use }`. The compiler may thread the second branch through the first by copying the barrier
// into both arms; a `.aligned` barrier copied there is undefined behaviour (the warp arrives at two
// different barrier instructions). The SASS check counts the BAR.SYNC instructions: exactly one per
// source barrier. `p[0]` decides the leader so nothing folds.
kernels! {
    fn divergent_bar_sync(p: *mut u32) {
        let leader = sreg::tid_x() == *p;
        if leader {
            *p.add(1) = 1;
        }
        misc::bar_sync();
        if leader {
            *p.add(2) = *p.add(3);
        }
    }
    fn divergent_device_syncer(s: mscclpp_device::ptr::GlobalPtr<mscclpp_device::sync::DeviceSyncer>, p: *mut u32) {
        if sreg::tid_x() == 0 {
            *p = 1;
        }
        s.sync(*p.add(1), mscclpp_device::poll::SpinBudget::DEFAULT);
        if sreg::tid_x() == 0 {
            *p.add(2) = *p.add(3);
        }
    }
}
