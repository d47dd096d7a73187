//! The device side of the allreduce example: allgather and allreduce (f32 sum) between two GPUs
//! over a [`MemoryChannel`].
//!
//! * Small messages travel as LL16 packets: every 8 bytes of data carry the operation's flag, so
//!   the receiver needs no signal and no fence. Operations alternate between the two halves of
//!   the packet buffer by flag parity, so back-to-back launches never overwrite packets the peer
//!   is still reading.
//! * Large messages are copied with `put` by every thread of the grid; a grid barrier then lets
//!   one thread signal the peer, and the peer waits before using the data. The host synchronises
//!   both GPUs between two large operations (the peer's next `put` must not overwrite a scratch
//!   area still being read).
#![no_std]
#![feature(abi_ptx)]

use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::copy::Threads;
use mscclpp_device::packet::LL16Packet;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::sreg;
use mscclpp_device::sync::DeviceSyncer;

/// How long any wait may spin before the kernel traps with a message.
const BUDGET: SpinBudget = SpinBudget::from_millis(5_000);

/// Byte offset of this operation's half of the packet buffer.
fn packet_half(chan: &MemoryChannel, flag: u32) -> u64 {
    (flag as u64 & 1) * (chan.packet_bytes / 2)
}

/// Allgather of small chunks: each rank's buffer holds both chunks of `bytes` (rank r's at byte
/// `r * bytes`). Sends this rank's chunk as packets with `flag` and unpacks the peer's.
///
/// # Safety
/// `chan` comes from the host's channel setup; `bytes` is a multiple of 8 and the packets fit in
/// half of the packet buffer; `flag` is new for this operation and not 0; the peer runs the same
/// operation with the same `bytes` and `flag`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allgather_packets(chan: MemoryChannel, rank: u32, bytes: u64, flag: u32) {
    let t = Threads::grid();
    let (mine, theirs) = (rank as u64 * bytes, (1 - rank as u64) * bytes);
    let pkts = packet_half(&chan, flag);
    // SAFETY: the caller's contract above.
    unsafe {
        chan.put_packets::<LL16Packet>(pkts, mine, bytes, flag, t);
        chan.unpack_packets::<LL16Packet>(theirs, pkts, bytes, flag, t, BUDGET);
    }
}

/// Allgather of large chunks (same layout as [`allgather_packets`]): every thread puts its share
/// of this rank's chunk to the same place in the peer's buffer, then one thread signals and
/// waits for the peer's signal.
///
/// # Safety
/// `chan` and `syncer` (zeroed, used by this grid only) come from the host; the kernel is
/// launched cooperatively; the peer runs the same operation.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allgather_put(
    chan: MemoryChannel,
    syncer: GlobalPtr<DeviceSyncer>,
    rank: u32,
    bytes: u64,
) {
    let t = Threads::grid();
    let mine = rank as u64 * bytes;
    // SAFETY: the caller's contract above.
    unsafe {
        chan.put(mine, mine, bytes, t);
        // Every block's share is written before the one signal below.
        syncer.sync(sreg::nctaid_x(), BUDGET);
        if t.index == 0 {
            // Release: our puts (all blocks, through the barrier). Partner: the peer's wait.
            chan.signal();
            // Acquire. Partner: the peer's signal after its puts into our buffer.
            chan.wait(BUDGET);
        }
    }
}

/// Allreduce (sum) of `n` f32 (even) in place, small messages: sends this rank's values as
/// packets, then adds the peer's packets into them.
///
/// # Safety
/// As for [`allgather_packets`], with `4 * n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allreduce_packets(chan: MemoryChannel, n: u64, flag: u32) {
    let t = Threads::grid();
    let pkts = packet_half(&chan, flag);
    let first = (pkts / size_of::<LL16Packet>() as u64) as usize;
    let pairs = chan.src.cast::<[f32; 2]>();
    // SAFETY: the caller's contract above.
    unsafe {
        chan.put_packets::<LL16Packet>(pkts, 0, 4 * n, flag, t);
        // Packet i goes to thread i % count in `put_packets` too, so each thread only rewrites
        // the values it has already sent.
        let mut i = t.index as usize;
        while i < (n / 2) as usize {
            let peer = chan.packet::<LL16Packet>(first + i).read(flag, BUDGET);
            let p = pairs.add(i).as_ptr();
            let [a, b] = p.read();
            p.write([a + f32::from_bits(peer as u32), b + f32::from_bits((peer >> 32) as u32)]);
            i += t.count as usize;
        }
    }
}

/// Allreduce (sum) of `n` f32 in place, large messages. Each rank's buffer holds its `n` values
/// followed by `n` floats of scratch: this rank's values go into the peer's scratch, and after
/// the signals every thread adds the scratch into the values.
///
/// # Safety
/// As for [`allgather_put`]; the buffer holds `8 * n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn allreduce_put(chan: MemoryChannel, syncer: GlobalPtr<DeviceSyncer>, n: u64) {
    let t = Threads::grid();
    let blocks = sreg::nctaid_x();
    // SAFETY: the caller's contract above.
    unsafe {
        chan.put(4 * n, 0, 4 * n, t);
        syncer.sync(blocks, BUDGET);
        if t.index == 0 {
            // Release: our puts (all blocks, through the barrier). Partner: the peer's wait.
            chan.signal();
            // Acquire. Partner: the peer's signal after its puts into our scratch.
            chan.wait(BUDGET);
        }
        // The peer's values are in the scratch for every thread after this barrier.
        syncer.sync(blocks, BUDGET);
        let values = chan.src.cast::<f32>().as_ptr();
        let scratch = values.add(n as usize);
        let mut i = t.index as usize;
        while i < n as usize {
            *values.add(i) += *scratch.add(i);
            i += t.count as usize;
        }
    }
}
