//! The device side of the allreduce example: allgather and allreduce (f32 sum) among `n_ranks`
//! ranks, one GPU each, over a table of [`MemoryChannel`]s (entry `p` is this rank's channel
//! toward rank `p`; this rank's own entry is unused).
//!
//! * Small messages travel as LL16 packets: every 8 bytes of data carry the operation's flag, so
//!   a receiver needs no signal and no fence. Each channel has a packet region of its own in both
//!   directions; operations alternate between its two halves by flag parity, so back-to-back
//!   launches never overwrite packets a peer is still reading.
//! * Large messages are copied with `put` by every thread of the grid; a grid barrier then lets
//!   one thread signal every peer and wait for every peer before anyone uses the data. The host
//!   synchronises its GPU and joins a bootstrap barrier between two operations, so no rank's
//!   next `put` overwrites a scratch area a peer is still reading.
//!
//! The last kernel, `scale_allreduce_shift`, calls the library's device-callable allreduce
//! (`mscclpp_collectives_device`) between two elementwise steps of its own, in one launch.
//!
//! Reductions add the ranks' values in rank order (rank 0's + rank 1's + ...), so every rank, and
//! the host's reference, get the same bits.
#![no_std]
#![feature(abi_ptx)]

use mscclpp_collectives_device::{Algorithm, Collective};
use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::copy::Threads;
use mscclpp_device::packet::LL16Packet;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::sreg;
use mscclpp_device::sync::DeviceSyncer;

/// How long any wait may spin before the kernel traps with a message. Generous: ranks that share
/// a GPU take turns on it, so a peer's part may only run in a later time slice.
const BUDGET: SpinBudget = SpinBudget::from_millis(10_000);

/// This rank's channel toward rank `peer`.
///
/// # Safety
/// `chans` holds at least `peer + 1` channels.
#[inline(always)]
unsafe fn channel(chans: GlobalPtr<MemoryChannel>, peer: u32) -> MemoryChannel {
    // SAFETY: forwarded from the caller.
    unsafe { chans.add(peer as usize).as_ptr().read() }
}

/// The ranks other than `rank`, in rank order.
#[inline(always)]
fn peers(rank: u32, n_ranks: u32) -> impl Iterator<Item = u32> {
    (0..n_ranks).filter(move |&p| p != rank)
}

/// Byte offset, in every channel's packet region, of this operation's half.
#[inline(always)]
fn packet_half(chan: &MemoryChannel, flag: u32) -> u64 {
    (flag as u64 & 1) * (chan.packet_bytes / 2)
}

/// `value(0) + value(1) + ... + value(n_ranks - 1)`, added in that order (element-wise).
#[inline(always)]
fn sum_in_rank_order<const L: usize>(n_ranks: u32, mut value: impl FnMut(u32) -> [f32; L]) -> [f32; L] {
    let mut acc = value(0);
    for q in 1..n_ranks {
        let v = value(q);
        for (a, b) in acc.iter_mut().zip(v) {
            *a += b;
        }
    }
    acc
}

/// Allgather of small chunks: every rank's buffer holds every rank's chunk of `bytes` (rank q's at
/// byte `q * bytes`). Sends this rank's chunk as packets with `flag` to every peer, then unpacks
/// every peer's chunk into place.
///
/// # Safety
/// `chans` is this rank's channel table (`n_ranks >= 2` entries, from the host's
/// `memory_channels`); every buffer holds `n_ranks * bytes`; `bytes` is a multiple of 8 and its
/// packets fit in half of a channel's packet region, whose size is a multiple of 32; `flag` is
/// new for this operation and not 0; every rank runs the same operation with the same `bytes`
/// and `flag`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allgather_packets(
    chans: GlobalPtr<MemoryChannel>,
    rank: u32,
    n_ranks: u32,
    bytes: u64,
    flag: u32,
) {
    let t = Threads::grid();
    // SAFETY: the caller's contract above.
    unsafe {
        let pkts = packet_half(&channel(chans, (rank + 1) % n_ranks), flag);
        for p in peers(rank, n_ranks) {
            channel(chans, p).put_packets::<LL16Packet>(pkts, rank as u64 * bytes, bytes, flag, t);
        }
        for p in peers(rank, n_ranks) {
            channel(chans, p).unpack_packets::<LL16Packet>(p as u64 * bytes, pkts, bytes, flag, t, BUDGET);
        }
    }
}

/// Allgather of large chunks (same layout as [`allgather_packets`]): every thread puts its share
/// of this rank's chunk to the same place in every peer's buffer; after a grid barrier one thread
/// signals every peer and waits for every peer's signal.
///
/// # Safety
/// As for [`allgather_packets`] without the packet conditions; `syncer` (zeroed once, used by
/// this rank's grids only) comes from the host; the kernel is launched cooperatively.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allgather_put(
    chans: GlobalPtr<MemoryChannel>,
    syncer: GlobalPtr<DeviceSyncer>,
    rank: u32,
    n_ranks: u32,
    bytes: u64,
) {
    let t = Threads::grid();
    let mine = rank as u64 * bytes;
    // SAFETY: the caller's contract above.
    unsafe {
        for p in peers(rank, n_ranks) {
            channel(chans, p).put(mine, mine, bytes, t);
        }
        // Every block's share is written before the signals below.
        syncer.sync(sreg::nctaid_x(), BUDGET);
        if t.index == 0 {
            for p in peers(rank, n_ranks) {
                // Release: our puts (all blocks, through the barrier). Partner: the peer's wait.
                channel(chans, p).signal();
            }
            for p in peers(rank, n_ranks) {
                // Acquire. Partner: the peer's signal after its puts into our buffer.
                channel(chans, p).wait(BUDGET);
            }
        }
    }
}

/// Allreduce (sum) of `n` f32 (`n` even) in place, small messages: sends this rank's values as
/// packets to every peer, then each thread sums its pairs of values over all ranks in rank order
/// (this rank's from its buffer, the others' from their packets) and stores the sums.
///
/// # Safety
/// As for [`allgather_packets`], with `4 * n` bytes of data at the start of every buffer.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allreduce_packets(
    chans: GlobalPtr<MemoryChannel>, // my channel toward every rank
    rank: u32,
    n_ranks: u32,
    n: u64,    // f32 values, in place at the start of my buffer
    flag: u32, // new for every operation, never 0
) {
    let t = Threads::grid(); // this thread's index among all threads of the grid
    // SAFETY: the caller keeps the kernel's contract (its `# Safety` documentation).
    unsafe {
        let any = channel(chans, (rank + 1) % n_ranks);
        let pkts = packet_half(&any, flag); // alternate halves of each region by flag parity
        let first = (pkts / size_of::<LL16Packet>() as u64) as usize;
        let pairs = any.src.cast::<[f32; 2]>(); // my buffer
        // My n floats, as packets carrying `flag`, into every peer's region for me.
        for p in peers(rank, n_ranks) {
            channel(chans, p).put_packets::<LL16Packet>(pkts, 0, 4 * n, flag, t);
        }
        // Every peer's packets arrive in my regions: wait for each (traps after BUDGET) and add
        // in rank order, so every rank gets the same bits. Packet i went out from thread
        // i % count above, so each thread only rewrites values it has already sent.
        for i in t.stride((n / 2) as usize) {
            let p = pairs.add(i).as_ptr();
            let own = p.read();
            let sum = sum_in_rank_order(n_ranks, |q| {
                if q == rank {
                    own
                } else {
                    let v = channel(chans, q).packet::<LL16Packet>(first + i).read(flag, BUDGET);
                    [f32::from_bits(v as u32), f32::from_bits((v >> 32) as u32)]
                }
            });
            p.write(sum);
        }
    }
}

/// Allreduce (sum) of `n` f32 in place, large messages. Every rank's buffer holds its `n` values
/// followed by `n_ranks` slots of `n` floats of scratch: this rank's values go into slot `rank` of
/// every peer's scratch; after the signals every thread sums its values over all ranks in rank
/// order (this rank's from its values, the others' from their slots).
///
/// # Safety
/// As for [`allgather_put`]; every buffer holds `4 * n * (n_ranks + 1)` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allreduce_put(
    chans: GlobalPtr<MemoryChannel>,
    syncer: GlobalPtr<DeviceSyncer>,
    rank: u32,
    n_ranks: u32,
    n: u64,
) {
    let t = Threads::grid();
    let bytes = 4 * n;
    // SAFETY: the caller's contract above.
    unsafe {
        for p in peers(rank, n_ranks) {
            // My values -> slot `rank` of p's scratch.
            channel(chans, p).put(bytes * (1 + rank as u64), 0, bytes, t);
        }
        syncer.sync(sreg::nctaid_x(), BUDGET); // every block has written its share
        if t.index == 0 {
            for p in peers(rank, n_ranks) {
                // Release: our puts (all blocks, through the barrier). Partner: the peer's wait.
                channel(chans, p).signal();
            }
            for p in peers(rank, n_ranks) {
                // Acquire. Partner: the peer's signal after its puts into our scratch.
                channel(chans, p).wait(BUDGET);
            }
        }
        // Every peer's values are in the scratch for every thread after this barrier (and every
        // block has finished reading this rank's values for its puts).
        syncer.sync(sreg::nctaid_x(), BUDGET);
        // values[i] = sum over ranks q, in order, of (q == rank ? values[i] : scratch[q][i])
        let values = channel(chans, (rank + 1) % n_ranks).src.cast::<f32>().as_ptr();
        let scratch = values.add(n as usize);
        for i in t.stride(n as usize) {
            let own = *values.add(i);
            let [sum] = sum_in_rank_order(n_ranks, |q| {
                [if q == rank { own } else { *scratch.add(q as usize * n as usize + i) }]
            });
            *values.add(i) = sum;
        }
    }
}

/// The device-callable collective, fused with elementwise work in one launch:
/// `out = sum over ranks of (alpha * x) + beta`. `coll` is the handle of the host's
/// `mscclpp_collectives::Collectives`, `algorithm` its plan's algorithm (0 one-shot LL,
/// 1 two-shot LL, 2 pipelined, 3 direct); `tmp` and `out` hold `n` floats; `syncer` is a zeroed
/// grid barrier. Launched cooperatively with the plan's grid on every rank.
///
/// # Safety
/// As for `Collective::allreduce`; the grid is co-resident (cooperative launch).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn scale_allreduce_shift(
    coll: Collective,
    algorithm: u32,
    syncer: GlobalPtr<DeviceSyncer>,
    x: GlobalPtr<f32>,
    tmp: GlobalPtr<f32>,
    out: GlobalPtr<f32>,
    n: u64,
    alpha: f32,
    beta: f32,
) {
    let t = Threads::grid();
    let algorithm = match algorithm {
        0 => Algorithm::OneShotLl,
        1 => Algorithm::TwoShotLl,
        3 => Algorithm::Direct,
        _ => Algorithm::Pipelined,
    };
    // SAFETY: the host's contract above: every pointer holds `n` floats of this GPU.
    unsafe {
        // Before the collective: scale this rank's input.
        for i in t.stride(n) {
            tmp.add(i as usize).as_ptr().write(alpha * x.add(i as usize).as_ptr().read());
        }
        // The collective reads any element from any block: every block's writes first.
        syncer.sync(sreg::nctaid_x(), BUDGET); // every block's `tmp = alpha * x` written
        coll.allreduce::<f32>(algorithm, tmp.cast(), out.cast(), 4 * n, BUDGET);
        syncer.sync(sreg::nctaid_x(), BUDGET); // every block's share of the sum written
        for i in t.stride(n) {
            let p = out.add(i as usize).as_ptr();
            p.write(p.read() + beta);
        }
    }
}
