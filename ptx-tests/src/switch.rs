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

use mscclpp_device::channel::switch::SwitchChannel;
use mscclpp_device::multimem::{LdReduce, Red, Store, op};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::{misc::bar_sync, sreg};
use mscclpp_device::switch::SwitchSemaphore;
use mscclpp_device::vec::{Bf16x8, F16x8, F32x4};

use crate::kernels;

/// One barrier round of the calling block: its leader signals (release) and waits (acquire),
/// then the block synchronises so every thread is ordered after the wait.
///
/// # Safety
/// `chan` describes a live multicast buffer and barrier of this block.
#[inline(always)]
unsafe fn block_barrier(chan: &SwitchChannel, budget: SpinBudget) {
    // The CTA barrier first: the leader's release then covers every thread's earlier writes.
    bar_sync();
    if sreg::tid_x() == 0 {
        // RELEASE (signal) pairs with the ACQUIRE (wait) of the same block index on every rank;
        // the closing bar.sync orders the block's threads after this thread's acquire.
        // SAFETY: forwarded from the caller.
        unsafe {
            chan.signal();
            chan.wait(budget);
        }
    }
    bar_sync();
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
/// slice with `multimem.ld_reduce` and broadcast each sum with `multimem.st`.
///
/// # Safety
/// `chans` holds one live channel per block; every rank runs the same grid.
#[inline(always)]
unsafe fn allreduce_ld_reduce_st<V: Store>(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget)
where
    op::Add: LdReduce<V>,
{
    // SAFETY: the caller passes one handle per block.
    let chan = unsafe { *chans.add(sreg::ctaid_x() as usize) };
    // SAFETY: forwarded from the caller (opening round: every member's input is written).
    unsafe { block_barrier(&chan, budget) };
    let (lo, hi) = slice(chan.len_of::<V>(), rank, n_ranks);
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
        allreduce_ld_reduce_st::<F32x4>(chans, rank, n_ranks, budget);
    }
    /// In-place bf16 allreduce (8 lanes per access, bf16 accumulation): reduce + broadcast.
    fn switch_allreduce_bf16x8(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<Bf16x8>(chans, rank, n_ranks, budget);
    }
    /// In-place f16 allreduce (8 lanes per access): reduce + broadcast.
    fn switch_allreduce_f16x8(chans: *const SwitchChannel, rank: u32, n_ranks: u32, budget: SpinBudget) {
        allreduce_ld_reduce_st::<F16x8>(chans, rank, n_ranks, budget);
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
