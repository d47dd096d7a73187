//! The window form of dispatch and combine ([`Form::Window`], [`ExpertParallel::set_form`]):
//! the symmetric-window API (`mscclpp_host::window`, `mscclpp_device::window::Window`) serving
//! expert parallelism. Every rank's shared buffer is registered as a window when the object is
//! built (its table of addresses is also what the peer-table form reads); the window kernels
//! (`ep/kernels/src/window.rs`) run the same bodies with every cross-rank address taken from
//! `Window::peer(rank, offset)` and the per-block "rows are there" counted in the window's
//! signals, so both forms give the same bits.

use cudarc::driver::CudaFunction;
use mscclpp_host::{Args, Gpu, Result};

use crate::shared::{EpHandle, SIGNATURE_WINDOW};
use crate::{ExpertParallel, PTX};

/// How dispatch and combine address the other ranks ([`ExpertParallel::set_form`]). Both forms
/// move the same bytes to the same places: the same results, bit for bit, and handles
/// ([`crate::Dispatched`]) of one form combine in the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Form {
    /// The kernels read a table of every rank's mapped buffer and signal with one flag per
    /// (sender, block): `ep_dispatch`, `ep_combine_*` (the default).
    #[default]
    PeerTable,
    /// The symmetric-window form: every cross-rank address is `Window::peer(rank, offset)` of a
    /// window over the shared buffers, and every block's arrival is a window signal
    /// (`Window::signal`, `Window::wait_signal`): `ep_dispatch_window*`, `ep_combine_window_*`.
    Window,
}

/// A kernel of dispatch or combine, in either form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Dispatch,
    DispatchFp8,
    CombineBf16,
    CombineF32,
}

/// The window form's kernels, their threads per block, the form of the next calls and the
/// window operations so far.
pub(crate) struct WindowForm {
    /// Per [`Kernel`], in its order.
    f: [CudaFunction; 4],
    threads: [u32; 4],
    form: Form,
    /// Window dispatches and combines enqueued so far (the same on every rank: calls are
    /// collective).
    rounds: [u64; 2],
}

impl WindowForm {
    /// Loads the window kernels on `gpu`; `pick` gives the threads per block from a kernel's
    /// limit.
    pub(crate) fn load(gpu: &Gpu, pick: impl Fn(u32) -> u32) -> Result<Self> {
        let names = ["ep_dispatch_window", "ep_dispatch_window_fp8", "ep_combine_window_bf16", "ep_combine_window_f32"];
        let f = names.map(|name| gpu.function(PTX, name));
        let f = f.into_iter().collect::<Result<Vec<_>>>()?;
        let limit = |i: usize| mscclpp_host::launch::max_threads_per_block(&f[i]).map(&pick);
        // The two combines share a thread count, as in the peer-table form.
        let (d, d8, c) = (limit(0)?, limit(1)?, limit(2)?.min(limit(3)?));
        let f: [CudaFunction; 4] = f.try_into().unwrap_or_else(|_| unreachable!("four names, four functions"));
        Ok(Self { f, threads: [d, d8, c, c], form: Form::PeerTable, rounds: [0; 2] })
    }

    /// At most the peer-table form's threads per block (dispatch, combine, FP8 dispatch), so
    /// that both forms run the same grid and differ only in how they reach the peers.
    pub(crate) fn capped(mut self, (d, c, d8): (u32, u32, u32)) -> Self {
        for (t, cap) in self.threads.iter_mut().zip([d, d8, c, c]) {
            *t = (*t).min(cap);
        }
        self
    }
}

impl ExpertParallel {
    /// Sets the form of the next dispatches and combines (of every kind: fresh, FP8, cached,
    /// with weights or bias): [`Form::PeerTable`] (the default) or [`Form::Window`], the
    /// symmetric-window form. The results are the same bits either way, and a dispatch of one
    /// form may be combined in the other. Every rank sets the same form at the same point of its
    /// sequence of calls: a dispatch whose form differs between ranks traps with a message; a
    /// combine whose form differs waits until [`crate::Config::budget`] runs out, then traps.
    /// The window form is not capturable: a dispatch or combine of it on a stream being
    /// captured into a CUDA graph is an error (its kernels take a round counted here).
    pub fn set_form(&mut self, form: Form) {
        self.wf.form = form;
    }

    /// The form of the next dispatches and combines ([`ExpertParallel::set_form`]).
    pub fn form(&self) -> Form {
        self.wf.form
    }

    /// Threads per block of the window form's dispatch, FP8 dispatch and combine (each window
    /// kernel has registers of its own).
    pub fn window_threads(&self) -> (u32, u32, u32) {
        let t = self.wf.threads;
        (t[0], t[1], t[2])
    }

    /// The function of `kernel` in the current form, its threads per block, its first
    /// arguments (the handle `h`; in the window form also the window and the round, counted
    /// here: call it once per launch) and the bits the form adds to a dispatch's signature.
    pub(crate) fn kernel(&mut self, kernel: Kernel, h: EpHandle) -> (CudaFunction, u32, Args, u32) {
        let args = Args::new().arg(h);
        if self.wf.form == Form::Window {
            let i = kernel as usize;
            let round = &mut self.wf.rounds[i / 2];
            *round += 1;
            let args = args.arg(self.window.handle()).arg(*round);
            return (self.wf.f[i].clone(), self.wf.threads[i], args, SIGNATURE_WINDOW);
        }
        let (f, threads) = match kernel {
            Kernel::Dispatch => (&self.f_dispatch, self.threads.0),
            Kernel::DispatchFp8 => (&self.f_dispatch_fp8, self.threads.2),
            Kernel::CombineBf16 => (&self.f_combine_bf16, self.threads.1),
            Kernel::CombineF32 => (&self.f_combine_f32, self.threads.1),
        };
        (f.clone(), threads, args, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatches_and_combines_count_their_own_rounds_and_signal_slots() {
        // `kernel` counts kernel `k`'s rounds in `rounds[k / 2]`; the kernels signal slot 0
        // (dispatch) and 1 (combine) of a window with the default slots.
        assert_eq!([Kernel::Dispatch, Kernel::DispatchFp8].map(|k| k as usize / 2), [0, 0]);
        assert_eq!([Kernel::CombineBf16, Kernel::CombineF32].map(|k| k as usize / 2), [1, 1]);
        const { assert!(mscclpp_device::window::Window::DEFAULT_SLOTS >= 2) };
        assert_eq!(Form::default(), Form::PeerTable);
        assert_eq!(
            SIGNATURE_WINDOW
                & (crate::shared::signature(crate::MAX_TOPK as u32, 3, 3) | crate::shared::SIGNATURE_CACHED),
            0
        );
    }
}
