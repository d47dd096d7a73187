//! The window form of dispatch and combine: the same bodies ([`body::dispatch`],
//! [`body::combine`]) with every cross-rank address taken from a symmetric window over the shared
//! buffers (`Window::peer(rank, offset)`: every rank's base, `Window::peer(rank, 0)`, read once
//! per block into its shared memory, as the peer-table form copies its table, plus the offset)
//! and the "rows are there" of every block counted in the
//! window's signals (`Window::signal`, `Window::wait_signal`) instead of per-block flags. The
//! count words stay in the buffers, reached through `peer` like the rows. The same bytes go to
//! the same places as with `ep_dispatch` and `ep_combine_*`, so the results are the same bits.
//!
//! ```text
//!  rank r's window: rank r's shared buffer (flags, count words, receive slots, landing)
//!  peer(d, off)                 = rank d's byte `off`, as mapped here
//!  signal slot 0 (dispatch),    every block b: signal(d, slot) for every rank d (itself too;
//!  slot 1 (combine)             combine: every other rank), after its block barrier
//!  wait: signal_value(slot, s) reaches round * blocks, for every rank s   (round: the host's
//!                               count of window dispatches, or combines, of this object)
//! ```

use mscclpp_device::copy::Threads;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::window::Window;
use mscclpp_ep_device::{EXCHANGE_SHARED_BYTES, EpHandle, MAX_RANKS};

use crate::body::{Peers, Phase};
use crate::hw::{nctaid, shared_base, window_peer, window_signal, window_wait_signal};

/// A window over every rank's shared buffer and the round of the operation: the
/// [`Peers`] of the window form.
#[derive(Clone, Copy)]
pub struct WindowPeers {
    w: Window,
    round: u64,
    /// Every rank's window base (`Window::peer(rank, 0)`), in the block's shared memory.
    bases: *mut u64,
}

impl WindowPeers {
    /// The window form over `w`, for the `round`-th (1, 2, ...) window operation of its kind
    /// (dispatch or combine) on this object.
    ///
    /// # Safety
    /// `w` is the host's handle of a live window whose memory on every rank is that rank's shared
    /// buffer of the handle the kernel runs with (the same layout), with at least 2 signal slots,
    /// used by these kernels alone; every rank passes the same `round`, one more than its last
    /// window operation of the kind; the kernel was launched with at least
    /// `EXCHANGE_SHARED_BYTES` of dynamic shared memory (the bases take its first `MAX_RANKS`
    /// words, as the peer-table form's table does).
    #[inline(always)]
    pub unsafe fn new(w: Window, round: u64) -> Self {
        Self { w, round, bases: shared_base().cast::<u64>() }
    }
}

impl Peers for WindowPeers {
    #[inline(always)]
    unsafe fn init(&self, _h: &EpHandle, tid: u32) {
        const { assert!(MAX_RANKS * 8 <= EXCHANGE_SHARED_BYTES as usize) };
        if tid < self.w.size && (tid as usize) < MAX_RANKS {
            // SAFETY: a live window of the team and tid a rank of it (`new`'s contract); word tid
            // of the block's table, inside its dynamic shared memory (`new`'s contract).
            unsafe { self.bases.add(tid as usize).write(window_peer(&self.w, tid, 0)) };
        }
    }

    #[inline(always)]
    fn at(&self, r: u32, offset: u64) -> u64 {
        let r = if r < self.w.size { r } else { 0 };
        // SAFETY: r is a rank of the team (made one above), at most MAX_RANKS of them (the
        // handle's contract), whose base `init` stored before the first block barrier.
        unsafe { self.bases.add(r as usize & (MAX_RANKS - 1)).read() + offset }
    }

    #[inline(always)]
    unsafe fn arrive(&self, _h: &EpHandle, phase: Phase, to: u32, _b: u32, _e: u64) {
        // SAFETY: `to` in the team, the slot below 2 (`new`'s contract). Partner: the waits of
        // rank `to`.
        unsafe { window_signal(&self.w, to, phase as u32) };
    }

    #[inline(always)]
    unsafe fn wait(&self, h: &EpHandle, phase: Phase, (g, gn): (u32, u32), _e: u64, budget: SpinBudget) {
        // Every block of every rank signals once per round.
        let target = self.round * nctaid() as u64;
        for s in Threads::new(g, gn).stride(h.n_ranks) {
            if phase == Phase::Combine && s == h.rank {
                continue;
            }
            // SAFETY: s in the team, the slot below 2. Partner: rank s's `arrive`.
            unsafe { window_wait_signal(&self.w, phase as u32, s, target, budget) };
        }
    }
}

#[cfg(target_arch = "nvptx64")]
mod kernels {
    use mscclpp_device::poll::SpinBudget;
    use mscclpp_device::ptr::GlobalPtr;
    use mscclpp_device::vec::{Bf16x8, F32x4};
    use mscclpp_device::window::Window;
    use mscclpp_ep_device::{BiasArgs, EpHandle, WeightsArgs};

    use super::WindowPeers;
    use crate::body;

    /// The window form of `ep_dispatch` (`CAST` false) and `ep_dispatch_fp8` (true).
    macro_rules! dispatch_kernels {
        ($($name:ident => $cast:literal;)*) => { $(
            /// [`body::dispatch`] through the window `w` ([`WindowPeers`]), the `round`-th window
            /// dispatch of the object.
            ///
            /// # Safety
            /// As for [`body::dispatch`] and [`WindowPeers::new`].
            #[unsafe(no_mangle)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "ptx-kernel" fn $name(
                h: EpHandle,
                w: Window,
                round: u64,
                x: GlobalPtr<u8>,
                topk_idx: GlobalPtr<u8>,
                topk_w: GlobalPtr<u32>,
                tokens: u32,
                k: u32,
                row_bytes: u32,
                signature: u32,
                format: u32,
                budget: SpinBudget,
            ) {
                // SAFETY: forwarded from the launch contract.
                unsafe {
                    let (p, sig) = (WindowPeers::new(w, round), (signature, format));
                    body::dispatch::<$cast, _>(p, h, x, topk_idx, topk_w, tokens, k, row_bytes, sig, budget)
                }
            }
        )* };
    }

    dispatch_kernels! {
        ep_dispatch_window => false;
        ep_dispatch_window_fp8 => true;
    }

    /// The window form of `ep_combine_bf16` and `ep_combine_f32`.
    macro_rules! combine_kernels {
        ($($name:ident => $lanes:ty;)*) => { $(
            /// [`body::combine`] through the window `w` ([`WindowPeers`]), the `round`-th window
            /// combine of the object.
            ///
            /// # Safety
            /// As for [`body::combine`] and [`WindowPeers::new`].
            #[unsafe(no_mangle)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "ptx-kernel" fn $name(
                h: EpHandle,
                w: Window,
                round: u64,
                y: GlobalPtr<u8>,
                y_bytes: u64,
                out: GlobalPtr<u8>,
                tokens: u32,
                row_bytes: u32,
                wt: WeightsArgs,
                bias: BiasArgs,
                budget: SpinBudget,
            ) {
                // SAFETY: forwarded from the launch contract.
                unsafe {
                    let p = WindowPeers::new(w, round);
                    body::combine::<$lanes, _>(p, h, y, y_bytes, out, tokens, row_bytes, (wt, bias), budget)
                }
            }
        )* };
    }

    combine_kernels! {
        ep_combine_window_bf16 => Bf16x8;
        ep_combine_window_f32 => F32x4;
    }
}
