//! The kernels of `mscclpp-nccl` (see `mscclpp_nccl_device` for their arguments):
//! `nccl_copy`, `nccl_reduce_<type>` for every NCCL data type, and `nccl_sync`.
#![no_std]
#![feature(abi_ptx)]

use mscclpp_device::copy::{Threads, copy_widest};
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::sreg;
use mscclpp_nccl_device::{
    Bf16, CopyList, Elem, F8E4M3, F8E5M2, F16, MAX_COPIES, ReduceArgs, ReduceOp, ScalarKind, SyncArgs,
};

/// Copies `list.items`: the grid's blocks are cut into `list.n` equal runs, run `y` copying item
/// `y` (launch a multiple of `list.n` blocks).
///
/// # Safety
/// Every copy's ranges are valid device memory that do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn nccl_copy(list: CopyList) {
    let n = (list.n as usize).min(MAX_COPIES);
    if n == 0 {
        return;
    }
    let per_item = (sreg::nctaid_x() as usize / n).max(1);
    let y = sreg::ctaid_x() as usize / per_item;
    if y >= n {
        return;
    }
    let c = list.items[y];
    let block = (sreg::ctaid_x() as usize % per_item) as u32;
    let t = Threads::new(block * sreg::ntid_x() + sreg::tid_x(), per_item as u32 * sreg::ntid_x());
    // SAFETY: the caller's contract.
    unsafe { copy_widest(GlobalPtr::from_addr(c.dst), GlobalPtr::from_addr(c.src), c.bytes, t) }
}

/// # Safety
/// As for the `nccl_reduce_<type>` kernels.
#[inline(always)]
unsafe fn reduce<T: Elem>(a: &ReduceArgs) {
    let Some(op) = ReduceOp::from_u32(a.op) else { return };
    // SAFETY: for a device scalar the host passes the address of one element of the type.
    let device_scalar = (a.scalar_kind == ScalarKind::Device as u32).then(|| unsafe { (a.scalar as *const T).read() });
    // SAFETY: forwarded.
    unsafe { reduce_with::<T>(a, op, device_scalar, a.scalar) }
}

/// # Safety
/// As for the `nccl_reduce_<type>` kernels.
#[inline(always)]
unsafe fn reduce_with<T: Elem>(a: &ReduceArgs, op: ReduceOp, device_scalar: Option<T>, scalar_bits: u64) {
    let t = Threads::grid();
    let table = a.table as *const u64;
    let n = a.n_src.max(1) as usize;
    let out = a.out as *mut T;
    let pre = |x: T| match (op, device_scalar) {
        (ReduceOp::PreMulSum, Some(s)) => T::combine(ReduceOp::Prod, x, s),
        (ReduceOp::PreMulSum, None) => T::scale(x, scalar_bits),
        _ => x,
    };
    for i in t.stride(a.count) {
        // SAFETY: the host built the table and the sources to hold `count` elements at the
        // offsets given; `out` holds `count` elements.
        unsafe {
            let src = |q: usize| (*table.add(q) + a.offset + q as u64 * a.stride) as *const T;
            let mut acc = pre(src(0).add(i as usize).read());
            for q in 1..n {
                acc = T::combine(op, acc, pre(src(q).add(i as usize).read()));
            }
            if op == ReduceOp::Avg {
                acc = T::div(acc, n as u32);
            }
            out.add(i as usize).write(acc);
        }
    }
}

macro_rules! reduce_kernels {
    ($($name:ident: $t:ty;)*) => { $(
        /// `out[i] = src_0[i] op src_1[i] op ...` (see `ReduceArgs`).
        ///
        /// # Safety
        /// The addresses in `a` and its table are valid for the elements named.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(a: ReduceArgs) {
            // SAFETY: forwarded.
            unsafe { reduce::<$t>(&a) }
        }
    )* };
}

reduce_kernels! {
    nccl_reduce_i8: i8;
    nccl_reduce_u8: u8;
    nccl_reduce_i32: i32;
    nccl_reduce_u32: u32;
    nccl_reduce_i64: i64;
    nccl_reduce_u64: u64;
    nccl_reduce_f16: F16;
    nccl_reduce_f32: f32;
    nccl_reduce_f64: f64;
    nccl_reduce_bf16: Bf16;
    nccl_reduce_f8e4m3: F8E4M3;
    nccl_reduce_f8e5m2: F8E5M2;
}

/// Signals the peers of `a.signal`, then waits for the peers of `a.wait` (one block; thread `t`
/// takes peers `t`, `t + blockDim`, ...). Memory written before this kernel on the stream is
/// visible to a peer once its wait for this rank's signal returns.
///
/// # Safety
/// The table holds valid semaphores toward every rank; no other kernel signals or waits on the
/// same semaphores at the same time.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn nccl_sync(a: SyncArgs) {
    let t = Threads::block();
    // Partner: the peers' acquiring waits. Orders everything this rank wrote before the launch
    // (earlier kernels and copies on the stream) before the signals below.
    mscclpp_device::atomic::fence_acq_rel::<mscclpp_device::atomic::Sys>();
    for p in t.stride(a.n_ranks) {
        if a.signals(p) {
            // SAFETY: entry p is the semaphore toward peer p; only this thread signals it here.
            unsafe { (*a.table.as_ptr().add(p as usize)).signal() }
        }
    }
    for p in t.stride(a.n_ranks) {
        if a.waits(p) {
            // SAFETY: as above; only this thread waits on it here.
            unsafe { (*a.table.as_ptr().add(p as usize)).wait(a.budget) }
        }
    }
    // Partner: the peers' signals; later kernels on this stream read what the peers published.
    mscclpp_device::atomic::fence_acq_rel::<mscclpp_device::atomic::Sys>();
}
