//! Device halves of the switch-channel tests (multi-rank, NVLink multicast): an allreduce over
//! [`SwitchChannel`] in its two shapes, and a barrier loop. They build and assemble everywhere;
//! they run only where the host was allowed to create a multicast object.
//!
//! Every kernel takes one channel (or semaphore) handle per block, `handles[blockIdx.x]`: the
//! handles of one block index share the buffer but each has its own barrier counter and
//! generation, since a barrier handle is used by one thread at a time.
//!
//! Why per-block barriers suffice for the allreduce: element `i` of rank `r`'s slice is handled
//! by block `((i - start) / blockDim) % gridDim` on that rank, so block `b`'s closing barrier
//! covers every element written by block `b` of every rank, and once every block of a rank has
//! passed its closing wait (the kernel has finished) its whole local copy holds the sums.

use mscclpp_device::channel::emulated_switch::EmulatedSwitchChannel;
use mscclpp_device::channel::switch::{SwitchChannel, SwitchElem, SwitchGroup};
use mscclpp_device::copy::Threads;
use mscclpp_device::multimem::{Red, op};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::{atom_red, misc::barrier_sync, sreg};
use mscclpp_device::semaphore::SwitchSemaphore;
use mscclpp_device::vec::{Bf16x2, Bf16x8, F16x2, F16x8, F32x2, F32x4};

use crate::kernels;

/// One barrier round of the calling block: its leader signals (release) and waits (acquire),
/// then the block synchronises so every thread is ordered after the wait. The CTA barriers are
/// the unaligned form: the leader reaches the second one after a spin-wait its warp-mates skip.
///
/// # Safety
/// `chan` describes a live buffer and barrier of this block.
#[inline(always)]
unsafe fn block_barrier<C: SwitchGroup>(chan: &C, budget: SpinBudget) {
    // The CTA barrier first: the leader's release then covers every thread's earlier writes.
    barrier_sync();
    if sreg::tid_x() == 0 {
        // RELEASE (signal) pairs with the ACQUIRE (wait) of the same block index on every rank;
        // the closing bar.sync orders the block's threads after this thread's acquire.
        // SAFETY: forwarded from the caller.
        unsafe {
            chan.signal();
            chan.wait(budget);
        }
    }
    barrier_sync();
}

/// Rank `rank`'s slice of `n` elements: `[n * rank / n_ranks, n * (rank + 1) / n_ranks)`
/// (empty when `n_ranks` is 0, so no division can fault).
#[inline(always)]
fn slice(n: u64, rank: u32, n_ranks: u32) -> (u64, u64) {
    let r = rank as u64;
    match n_ranks as u64 {
        0 => (0, 0),
        nr => (n * r / nr, n * (r + 1) / nr),
    }
}

/// Allreduce (sum) in place over the channel's buffer as elements of `V`: reduce this rank's
/// slice (`multimem.ld_reduce`, or loads from every rank's copy when emulated) and broadcast each
/// sum (`multimem.st`, or stores into every copy). Written once against [`SwitchGroup`]: the
/// switch channel, the emulated one and a window's switch group
/// (`mscclpp_device::window::WindowSwitch`, `crate::window`) all run this code.
///
/// # Safety
/// `chan` is this block's live handle (its own barrier); every rank runs the same grid.
#[inline(always)]
pub(crate) unsafe fn allreduce_in_place<C: SwitchGroup, V: SwitchElem>(
    chan: C,
    rank: u32,
    n_ranks: u32,
    budget: SpinBudget,
) {
    // SAFETY: forwarded from the caller (opening round: every member's input is written).
    unsafe { block_barrier(&chan, budget) };
    let (lo, hi) = slice(chan.elements::<V>(), rank, n_ranks);
    let stride = sreg::nctaid_x() as u64 * sreg::ntid_x() as u64;
    let mut i = lo + sreg::ctaid_x() as u64 * sreg::ntid_x() as u64 + sreg::tid_x() as u64;
    while i < hi {
        // SAFETY: `i` is inside the buffer (below `len_of::<V>()`).
        unsafe {
            let sum = chan.reduce::<V>(i as usize);
            chan.broadcast::<V>(i as usize, sum);
        }
        i += stride;
    }
    // SAFETY: forwarded from the caller (closing round: every slice is broadcast).
    unsafe { block_barrier(&chan, budget) };
}

/// [`allreduce_in_place`] with handle `chans[blockIdx.x]`.
///
/// # Safety
/// `chans` holds one live channel per block; every rank runs the same grid.
#[inline(always)]
unsafe fn allreduce_ld_reduce_st<C: SwitchGroup, V: SwitchElem>(
    chans: *const C,
    rank: u32,
    n_ranks: u32,
    budget: SpinBudget,
) {
    // SAFETY: the caller passes one handle per block; the rest is forwarded.
    unsafe { allreduce_in_place::<C, V>(*chans.add(sreg::ctaid_x() as usize), rank, n_ranks, budget) }
}

/// Allreduce (sum) of `input` (this rank's `len_of::<V>()` elements) into the channel's buffer,
/// which every rank has zeroed before the launch: every rank adds its whole input into every
/// copy with `multimem.red`.
///
/// # Safety
/// As for [`allreduce_ld_reduce_st`]; `input` holds as many elements as the buffer.
#[inline(always)]
unsafe fn allreduce_red<V: Copy>(
    chans: *const SwitchChannel,
    input: GlobalPtr<V>,
    rank: u32,
    n_ranks: u32,
    budget: SpinBudget,
) where
    op::Add: Red<V>,
{
    // SAFETY: the caller passes one handle per block.
    let chan = unsafe { *chans.add(sreg::ctaid_x() as usize) };
    // SAFETY: forwarded from the caller (opening round: every member's buffer is zeroed).
    unsafe { block_barrier(&chan, budget) };
    let n = chan.len_of::<V>();
    let stride = sreg::nctaid_x() as u64 * sreg::ntid_x() as u64;
    // Start each rank at a different place so the ranks' reductions spread over the buffer.
    let (start, _) = slice(n, rank, n_ranks);
    let mut k = sreg::ctaid_x() as u64 * sreg::ntid_x() as u64 + sreg::tid_x() as u64;
    while k < n {
        let i = (start + k) % n.max(1);
        // SAFETY: `i` is inside the buffer and the input.
        unsafe { chan.store_reduce::<V>(i as usize, *input.as_ptr().add(i as usize)) };
        k += stride;
    }
    // SAFETY: forwarded from the caller (closing round: every rank's additions are done).
    unsafe { block_barrier(&chan, budget) };
}

kernels! {
    /// In-place f32 allreduce over `SwitchChannel` (16-byte vectors): reduce + broadcast.
    fn switch_allreduce_f32x4(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<SwitchChannel, F32x4>(chans, rank, n_ranks, budget);
    }
    /// In-place bf16 allreduce (8 lanes per access, bf16 accumulation): reduce + broadcast.
    fn switch_allreduce_bf16x8(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<SwitchChannel, Bf16x8>(chans, rank, n_ranks, budget);
    }
    /// In-place f16 allreduce (8 lanes per access): reduce + broadcast.
    fn switch_allreduce_f16x8(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<SwitchChannel, F16x8>(chans, rank, n_ranks, budget);
    }
    /// f32 allreduce of `input` into the (zeroed) channel buffer with `multimem.red`.
    fn switch_allreduce_red_f32x4(
        chans: *const SwitchChannel,
        input: GlobalPtr<F32x4>,
        rank: u32,
        n_ranks: u32,
        budget: SpinBudget,
    ) {
        allreduce_red::<F32x4>(chans, input, rank, n_ranks, budget);
    }
    /// `rounds` barrier rounds on `sems[blockIdx.x]` by each block's thread 0 (release/acquire
    /// when `relaxed == 0`, else the relaxed forms); thread 0 of block 0 then records how many
    /// rounds it completed in `done`.
    fn switch_barrier_rounds(sems: *const SwitchSemaphore, rounds: u32, relaxed: u32, done: *mut u32, budget: SpinBudget) {
        if sreg::tid_x() != 0 { return; }
        let sem = *sems.add(sreg::ctaid_x() as usize);
        for _ in 0..rounds {
            if relaxed == 0 {
                sem.signal();
                sem.wait(budget);
            } else {
                sem.relaxed_signal();
                sem.relaxed_wait(budget);
            }
        }
        if sreg::ctaid_x() == 0 { *done = rounds; }
    }
}

kernels! {
    /// The same in-place f32 allreduce as `switch_allreduce_f32x4`, on the emulated channel.
    fn emu_allreduce_f32x4(chans: *const EmulatedSwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<EmulatedSwitchChannel, F32x4>(chans, rank, n_ranks, budget);
    }
    /// The same in-place bf16 allreduce as `switch_allreduce_bf16x8`, on the emulated channel.
    fn emu_allreduce_bf16x8(chans: *const EmulatedSwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<EmulatedSwitchChannel, Bf16x8>(chans, rank, n_ranks, budget);
    }

    /// `barrier_rounds` on `chans[blockIdx.x]`.
    fn emu_barrier_rounds(chans: *const EmulatedSwitchChannel, rounds: u32, report: *mut u64, budget: SpinBudget) {
        let chan = *chans.add(sreg::ctaid_x() as usize);
        barrier_rounds(&chan, chan.rank, chan.n_ranks, rounds, report, budget);
    }
}

/// `rounds` barrier rounds of the calling block with data: the leader of block b broadcasts the
/// round number into element `(b * n_ranks + rank) * 2 + round % 2` (u32) of every copy before
/// the barrier and checks after it that every rank's element of this block holds the round.
/// `report[0]` += stale elements, `report[1]` += elements checked (`rounds * n_ranks` per block).
///
/// # Safety
/// `chan` is this block's live handle, its buffer holds `gridDim * n_ranks * 2` u32; every rank
/// runs the same grid.
#[inline(always)]
pub(crate) unsafe fn barrier_rounds<C: SwitchGroup>(
    chan: &C,
    rank: u32,
    n_ranks: u32,
    rounds: u32,
    report: *mut u64,
    budget: SpinBudget,
) {
    let (b, n, me) = (sreg::ctaid_x(), n_ranks, rank);
    let (mut bad, mut checked) = (0u64, 0u64);
    // SAFETY: forwarded from the caller; every element index is below `gridDim * n * 2`.
    unsafe {
        for r in 1..=rounds {
            if sreg::tid_x() == 0 {
                chan.broadcast::<u32>(((b * n + me) * 2 + r % 2) as usize, r);
            }
            block_barrier(chan, budget);
            if sreg::tid_x() == 0 {
                for p in 0..n {
                    if chan.local::<u32>(((b * n + p) * 2 + r % 2) as usize).as_ptr().read_volatile() != r {
                        bad += 1;
                    }
                    checked += 1;
                }
            }
        }
        if sreg::tid_x() == 0 {
            atom_red::red_relaxed_gpu_add_u64(report, bad);
            atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
        }
    }
}

/// Every element of the buffer reduced over all ranks into `out` (one block), between two
/// barrier rounds, then this rank's slice of `input` broadcast into every copy and a closing
/// barrier: the reduce and the broadcast of one type in one launch.
#[inline(always)]
unsafe fn emu_reduce_broadcast<V: SwitchElem>(
    chan: &EmulatedSwitchChannel,
    out: *mut V,
    input: *const V,
    budget: SpinBudget,
) {
    // SAFETY: forwarded from the caller (one handle for this block, buffers of `elements` items).
    unsafe {
        block_barrier(chan, budget);
        let n = chan.elements::<V>();
        for i in Threads::block().stride(n) {
            *out.add(i as usize) = chan.reduce::<V>(i as usize);
        }
        // Every rank has read every copy before anyone overwrites it.
        block_barrier(chan, budget);
        let (lo, hi) = slice(n, chan.rank, chan.n_ranks);
        let mut i = lo + sreg::tid_x() as u64;
        while i < hi {
            chan.broadcast::<V>(i as usize, *input.add(i as usize));
            i += sreg::ntid_x() as u64;
        }
        block_barrier(chan, budget);
    }
}

macro_rules! emu_types {
    ($($name:ident: $t:ty;)*) => {
        kernels! { $(
            /// `emu_reduce_broadcast` for one element type (one block).
            fn $name(chan: EmulatedSwitchChannel, out: *mut $t, input: *const $t, budget: SpinBudget) {
                emu_reduce_broadcast::<$t>(&chan, out, input, budget);
            }
        )* }
    };
}

emu_types! {
    emu_reduce_broadcast_f32: f32;
    emu_reduce_broadcast_u32: u32;
    emu_reduce_broadcast_i32: i32;
    emu_reduce_broadcast_f32x2: F32x2;
    emu_reduce_broadcast_f32x4: F32x4;
    emu_reduce_broadcast_f16x2: F16x2;
    emu_reduce_broadcast_f16x8: F16x8;
    emu_reduce_broadcast_bf16x2: Bf16x2;
    emu_reduce_broadcast_bf16x8: Bf16x8;
}
