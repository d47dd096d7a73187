//! The kernels of `mscclpp-ep`: the dispatch layout, the dispatch and the combine of expert
//! parallelism among the GPUs of one machine. The buffers, the handle and the protocol are
//! described in `mscclpp_ep_device` (the device code the host crate shares) and in the host
//! crate's documentation.
//!
//! * `ep_layout` (one block): from the top-k expert ids, every rank's token count, every
//!   expert's (token, slot) count, and for every (token, rank) whether the token goes there and
//!   its position among the tokens that do (a prefix sum in token order).
//! * `ep_dispatch` (`blocks` blocks, one per SM at most): publishes this rank's counts in every
//!   rank's count slot, reads everybody's, then every warp copies whole tokens (16-byte vectors)
//!   to each destination rank in turn, signals every rank and waits for every rank's signals.
//!   `ep_dispatch_fp8` does the same with bf16 rows cast to FP8 E4M3 on the way (one thread per
//!   128 columns of a token, with their f32 scale).
//! * `ep_combine_bf16` / `ep_combine_f32`: pushes each received row's result back into its
//!   source rank's landing region, signals, waits, then sums every token's results (after the
//!   optional bias rows) in rank order in f32 and rounds once.
//!
//! * `ep_dispatch_pipe` / `ep_dispatch_pipe_fp8`, `ep_combine_pipe_bf16` / `ep_combine_pipe_f32`:
//!   the pipelined mode (see [`pipe`]): the same results through fixed rings, half the blocks
//!   sending and half receiving, the received rows in a local buffer.
//!
//! * `ep_decode_layout`, `ep_decode_dispatch` / `ep_decode_dispatch_fp8`, `ep_decode_combine_bf16`
//!   / `ep_decode_combine_f32`: the decode (low-latency) mode (see [`decode`]): the received rows
//!   grouped by local expert, the top-k weights applied in the combine.
//!
//! Dispatch and combine need every block of the grid resident at once (they wait for each
//! other); the host launches at most one block per SM.
#![no_std]
#![feature(abi_ptx)]

pub mod body;
pub mod decode;
pub mod hw;
pub mod pipe;
pub mod window;

use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::vec::{Bf16x8, F32x4};
use mscclpp_ep_device::{BiasArgs, EpHandle, WeightsArgs};

/// The dispatch layout (see [`body::layout`]).
///
/// # Safety
/// As for [`body::layout`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn ep_layout(
    topk_idx: GlobalPtr<u8>,
    idx_bytes: u32,
    tokens: u32,
    k: u32,
    experts: u32,
    ranks: u32,
    per_rank: GlobalPtr<u32>,
    per_expert: GlobalPtr<u32>,
    in_rank: GlobalPtr<u8>,
    send_index: GlobalPtr<i32>,
) {
    // SAFETY: forwarded from the launch contract.
    unsafe { body::layout(topk_idx, idx_bytes, tokens, k, experts, ranks, per_rank, per_expert, in_rank, send_index) }
}

/// One dispatch entry point per received format: `body::dispatch` copying the rows, or casting
/// them to FP8 (each with its own registers).
macro_rules! dispatch_kernels {
    ($($(#[doc = $doc:literal])* $name:ident => $cast:literal, $body:ident;)*) => { $(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// As for the body it names.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: EpHandle,
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
                let p = body::PeerTable::in_block();
                $body::dispatch::<$cast, _>(p, h, x, topk_idx, topk_w, tokens, k, row_bytes, (signature, format), budget)
            }
        }
    )* };
}

dispatch_kernels! {
    /// Dispatch of the rows as they are (see [`body::dispatch`]).
    ep_dispatch => false, body;
    /// Dispatch of bf16 rows cast to FP8 E4M3 with per-128-column scales (see [`body::dispatch`]).
    ep_dispatch_fp8 => true, body;
    /// Pipelined dispatch of the rows as they are (see [`pipe::dispatch`]).
    ep_dispatch_pipe => false, pipe;
    /// Pipelined dispatch of bf16 rows cast to FP8 E4M3 (see [`pipe::dispatch`]).
    ep_dispatch_pipe_fp8 => true, pipe;
}

/// One combine entry point per element type (an `extern "ptx-kernel"` function cannot be
/// generic): `body::combine` with that type's lanes.
macro_rules! combine_kernels {
    ($($(#[doc = $doc:literal])* $name:ident => $lanes:ty, $body:ident;)*) => { $(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// As for the body it names.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: EpHandle,
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
                let p = body::PeerTable::in_block();
                $body::combine::<$lanes, _>(p, h, y, y_bytes, out, tokens, row_bytes, (wt, bias), budget)
            }
        }
    )* };
}

combine_kernels! {
    /// Combine of bf16 rows (sums in f32, rounded once to bf16). See [`body::combine`].
    ep_combine_bf16 => Bf16x8, body;
    /// Combine of f32 rows. See [`body::combine`].
    ep_combine_f32 => F32x4, body;
    /// Pipelined combine of bf16 rows. See [`pipe::combine`].
    ep_combine_pipe_bf16 => Bf16x8, pipe;
    /// Pipelined combine of f32 rows. See [`pipe::combine`].
    ep_combine_pipe_f32 => F32x4, pipe;
}

/// The decode layout (see [`decode::layout`]).
///
/// # Safety
/// As for [`decode::layout`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn ep_decode_layout(
    topk_idx: GlobalPtr<u8>,
    idx_bytes: u32,
    tokens: u32,
    k: u32,
    experts: u32,
    per_expert: GlobalPtr<u32>,
    positions: GlobalPtr<u32>,
) {
    // SAFETY: forwarded from the launch contract.
    unsafe { decode::layout(topk_idx, idx_bytes, tokens, k, experts, per_expert, positions) }
}

/// One decode dispatch entry point per received format.
macro_rules! decode_dispatch_kernels {
    ($($(#[doc = $doc:literal])* $name:ident => $cast:literal;)*) => { $(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// As for [`decode::dispatch`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: EpHandle,
            x: GlobalPtr<u8>,
            topk_idx: GlobalPtr<u8>,
            tokens: u32,
            k: u32,
            row_bytes: u32,
            signature: u32,
            format: u32,
            budget: SpinBudget,
        ) {
            // SAFETY: forwarded from the launch contract.
            unsafe { decode::dispatch::<$cast>(h, x, topk_idx, tokens, k, row_bytes, (signature, format), budget) }
        }
    )* };
}

decode_dispatch_kernels! {
    /// Decode dispatch of the rows as they are (see [`decode::dispatch`]).
    ep_decode_dispatch => false;
    /// Decode dispatch of bf16 rows cast to FP8 E4M3 (see [`decode::dispatch`]).
    ep_decode_dispatch_fp8 => true;
}

/// One decode combine entry point per element type.
macro_rules! decode_combine_kernels {
    ($($(#[doc = $doc:literal])* $name:ident => $lanes:ty;)*) => { $(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// As for [`decode::combine`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: EpHandle,
            y: GlobalPtr<u8>,
            topk_idx: GlobalPtr<u8>,
            topk_w: GlobalPtr<u32>,
            out: GlobalPtr<u8>,
            tokens: u32,
            k: u32,
            row_bytes: u32,
            budget: SpinBudget,
        ) {
            // SAFETY: forwarded from the launch contract.
            unsafe { decode::combine::<$lanes>(h, y, (topk_idx, topk_w), out, tokens, k, row_bytes, budget) }
        }
    )* };
}

decode_combine_kernels! {
    /// Decode combine of bf16 rows (weighted sums in f32, rounded once). See [`decode::combine`].
    ep_decode_combine_bf16 => Bf16x8;
    /// Decode combine of f32 rows. See [`decode::combine`].
    ep_decode_combine_f32 => F32x4;
}
