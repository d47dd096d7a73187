//! The kernels of `mscclpp-collectives`: one entry point per (operation, algorithm, element
//! type), each a thin call of the device-callable collective in `mscclpp_collectives_device`.
//!
//! Every kernel takes `(handle: Collective, input, output, bytes: u64, budget: SpinBudget)`.
#![no_std]
#![feature(abi_ptx)]

use half::{bf16, f16};
use mscclpp_collectives_device::{Algorithm, Collective};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;

macro_rules! kernels {
    ($($name:ident => $op:ident::<$ty:ty>($algo:ident);)*) => { $(
        /// See the crate documentation.
        ///
        /// # Safety
        /// Launched by `mscclpp_collectives::Collectives` on every rank with the same grid,
        /// a valid handle and buffers (the device-callable function's contract).
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: Collective,
            input: GlobalPtr<u8>,
            output: GlobalPtr<u8>,
            bytes: u64,
            budget: SpinBudget,
        ) {
            // SAFETY: forwarded from the launch contract.
            unsafe { h.$op::<$ty>(Algorithm::$algo, input, output, bytes, budget) }
        }
    )* };
}

macro_rules! gather_kernels {
    ($($name:ident => $algo:ident;)*) => { $(
        /// See the crate documentation.
        ///
        /// # Safety
        /// As for the other kernels.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            h: Collective,
            input: GlobalPtr<u8>,
            output: GlobalPtr<u8>,
            bytes: u64,
            budget: SpinBudget,
        ) {
            // SAFETY: forwarded from the launch contract.
            unsafe { h.allgather(Algorithm::$algo, input, output, bytes, budget) }
        }
    )* };
}

kernels! {
    allreduce_oneshot_f32 => allreduce::<f32>(OneShotLl);
    allreduce_oneshot_f16 => allreduce::<f16>(OneShotLl);
    allreduce_oneshot_bf16 => allreduce::<bf16>(OneShotLl);
    allreduce_oneshot_i32 => allreduce::<i32>(OneShotLl);
    allreduce_oneshot_u32 => allreduce::<u32>(OneShotLl);
    allreduce_twoshot_f32 => allreduce::<f32>(TwoShotLl);
    allreduce_twoshot_f16 => allreduce::<f16>(TwoShotLl);
    allreduce_twoshot_bf16 => allreduce::<bf16>(TwoShotLl);
    allreduce_twoshot_i32 => allreduce::<i32>(TwoShotLl);
    allreduce_twoshot_u32 => allreduce::<u32>(TwoShotLl);
    allreduce_pipelined_f32 => allreduce::<f32>(Pipelined);
    allreduce_pipelined_f16 => allreduce::<f16>(Pipelined);
    allreduce_pipelined_bf16 => allreduce::<bf16>(Pipelined);
    allreduce_pipelined_i32 => allreduce::<i32>(Pipelined);
    allreduce_pipelined_u32 => allreduce::<u32>(Pipelined);
    allreduce_direct_f32 => allreduce::<f32>(Direct);
    allreduce_direct_f16 => allreduce::<f16>(Direct);
    allreduce_direct_bf16 => allreduce::<bf16>(Direct);
    allreduce_direct_i32 => allreduce::<i32>(Direct);
    allreduce_direct_u32 => allreduce::<u32>(Direct);
    reduce_scatter_oneshot_f32 => reduce_scatter::<f32>(OneShotLl);
    reduce_scatter_oneshot_f16 => reduce_scatter::<f16>(OneShotLl);
    reduce_scatter_oneshot_bf16 => reduce_scatter::<bf16>(OneShotLl);
    reduce_scatter_oneshot_i32 => reduce_scatter::<i32>(OneShotLl);
    reduce_scatter_oneshot_u32 => reduce_scatter::<u32>(OneShotLl);
    reduce_scatter_pipelined_f32 => reduce_scatter::<f32>(Pipelined);
    reduce_scatter_pipelined_f16 => reduce_scatter::<f16>(Pipelined);
    reduce_scatter_pipelined_bf16 => reduce_scatter::<bf16>(Pipelined);
    reduce_scatter_pipelined_i32 => reduce_scatter::<i32>(Pipelined);
    reduce_scatter_pipelined_u32 => reduce_scatter::<u32>(Pipelined);
}

gather_kernels! {
    allgather_oneshot => OneShotLl;
    allgather_pipelined => Pipelined;
}

/// The one-shot allreduce of f32 written on a symmetric memory window, put form
/// (`mscclpp_collectives_device::window`): launched by `mscclpp_collectives::WindowAllreduce`
/// for messages above its LL limit.
///
/// # Safety
/// As for `allreduce_window_f32`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allreduce_window_f32(
    w: mscclpp_device::window::Window,
    input: GlobalPtr<u8>,
    output: GlobalPtr<u8>,
    bytes: u64,
    max_bytes: u64,
    ll_bytes: u64,
    budget: SpinBudget,
) {
    // SAFETY: forwarded from the launch contract.
    unsafe {
        mscclpp_collectives_device::window::allreduce_window_f32(&w, input, output, bytes, max_bytes, ll_bytes, budget)
    }
}

/// The one-shot allreduce of f32 written on a symmetric memory window, LL form
/// (`mscclpp_collectives_device::window`): launched by `mscclpp_collectives::WindowAllreduce`
/// for messages up to its LL limit.
///
/// # Safety
/// As for `allreduce_window_ll_f32`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn allreduce_window_ll_f32(
    w: mscclpp_device::window::Window,
    input: GlobalPtr<u8>,
    output: GlobalPtr<u8>,
    bytes: u64,
    max_bytes: u64,
    ll_bytes: u64,
    max_blocks: u32,
    budget: SpinBudget,
) {
    // SAFETY: forwarded from the launch contract.
    unsafe {
        mscclpp_collectives_device::window::allreduce_window_ll_f32(
            &w, input, output, bytes, max_bytes, ll_bytes, max_blocks, budget,
        )
    }
}
