//! Device halves of the memory-channel, packet, copy and grid-synchronisation tests and benches.

use mscclpp_device::atomic::{self, Gpu, Relaxed};
use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::copy::{self, Threads};
use mscclpp_device::packet::{LL8Packet, LL16Packet, Packet};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::ptx::{atom_red, misc::barrier_sync, sreg};
use mscclpp_device::semaphore::DeviceSemaphore;
use mscclpp_device::sync::DeviceSyncer;

use crate::kernels;
use crate::shared::message_word;

const BUDGET: SpinBudget = SpinBudget::DEFAULT;

/// The data words packet `j` of type `P` carries.
#[inline(always)]
fn words_of<P: Packet>() -> u32 {
    (P::PAYLOAD_BYTES / 4) as u32
}

/// Writes this thread's packets' words of side `side`'s round-`round` message into `buf`.
#[inline(always)]
unsafe fn fill_message<P: Packet>(buf: *mut u32, packets: u32, seed: u32, side: u32, round: u32, t: Threads) {
    let w = words_of::<P>();
    for j in t.stride(packets) {
        for k in j * w..(j + 1) * w {
            // SAFETY: the kernel's caller passes a buffer that holds `packets` packets' words.
            unsafe { *buf.add(k as usize) = message_word(seed, side, round, k) };
        }
    }
}

/// Counts this thread's packets' words in `buf` that differ from side `side`'s message.
#[inline(always)]
unsafe fn check_message<P: Packet>(
    buf: *const u32,
    packets: u32,
    seed: u32,
    side: u32,
    round: u32,
    t: Threads,
    bad: &mut u32,
) -> u32 {
    let w = words_of::<P>();
    let mut checked = 0;
    for j in t.stride(packets) {
        for k in j * w..(j + 1) * w {
            // SAFETY: the kernel's caller passes a buffer that holds `packets` packets' words.
            if unsafe { *buf.add(k as usize) } != message_word(seed, side, round, k) {
                *bad += 1;
            }
            checked += 1;
        }
    }
    checked
}

/// The packet ping-pong test: side A (`first != 0`) sends its round-r message as packets with
/// flag r. In odd rounds B forwards the packets back unchanged (`read_put_packets`) and A checks
/// the echo; in even rounds B unpacks and checks A's message, then answers with its own, which
/// A unpacks and checks. `src` layout: [0, bytes) outgoing, [bytes, 2 bytes) incoming.
/// `report[0]` += mismatching words, `report[1]` += words checked.
#[inline(always)]
unsafe fn packet_pingpong<P: Packet>(
    chan: MemoryChannel,
    rounds: u32,
    first: u32,
    bytes: u64,
    seed: u32,
    report: *mut u64,
) {
    // SAFETY: the kernel's caller passes a channel (or buffers) from the host runtime.
    unsafe {
        let t = Threads::grid();
        let packets = (bytes / P::PAYLOAD_BYTES) as u32;
        let out = chan.src.as_ptr().cast::<u32>();
        let inc = chan.src.byte_add(bytes as usize).as_ptr().cast::<u32>();
        let (mut bad, mut checked) = (0u32, 0u64);
        for r in 1..=rounds {
            if first != 0 {
                fill_message::<P>(out, packets, seed, 0, r, t);
                chan.put_packets::<P>(0, 0, bytes, r, t);
                chan.unpack_packets::<P>(bytes, 0, bytes, r, t, BUDGET);
                let from = if r % 2 == 1 { 0 } else { 1 };
                checked += check_message::<P>(inc, packets, seed, from, r, t, &mut bad) as u64;
            } else if r % 2 == 1 {
                chan.read_put_packets::<P>(0, 0, bytes, r, t, BUDGET);
            } else {
                chan.unpack_packets::<P>(bytes, 0, bytes, r, t, BUDGET);
                checked += check_message::<P>(inc, packets, seed, 0, r, t, &mut bad) as u64;
                fill_message::<P>(out, packets, seed, 1, r, t);
                chan.put_packets::<P>(0, 0, bytes, r, t);
            }
        }
        atom_red::red_relaxed_gpu_add_u64(report, bad as u64);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
    }
}

/// Latency bench: ping-pong of `bytes` as packets (one block), flags `flag_base + 1 ..`.
#[inline(always)]
unsafe fn packet_pingpong_bench<P: Packet>(chan: MemoryChannel, bytes: u64, rounds: u32, first: u32, flag_base: u32) {
    // SAFETY: the kernel's caller passes a channel (or buffers) from the host runtime.
    unsafe {
        let t = Threads::block();
        for r in 1..=rounds {
            let flag = flag_base.wrapping_add(r);
            if first != 0 {
                chan.put_packets::<P>(0, 0, bytes, flag, t);
                chan.unpack_packets::<P>(bytes, 0, bytes, flag, t, BUDGET);
            } else {
                chan.unpack_packets::<P>(bytes, 0, bytes, flag, t, BUDGET);
                chan.put_packets::<P>(0, 0, bytes, flag, t);
            }
        }
    }
}

kernels! {
    /// Every thread of the grid: `chan.put(dst_off, src_off, bytes)`.
    fn memchan_put(chan: MemoryChannel, dst_off: u64, src_off: u64, bytes: u64) {
        chan.put(dst_off, src_off, bytes, Threads::grid());
    }

    /// Every thread of the grid: `chan.get(dst_off, src_off, bytes)`.
    fn memchan_get(chan: MemoryChannel, dst_off: u64, src_off: u64, bytes: u64) {
        chan.get(dst_off, src_off, bytes, Threads::grid());
    }

    /// One of the copy forms over the whole grid: 0/1/2 = copy::<4/8/16>, 3/4/5 =
    /// copy_with_remainder::<4/8/16>, 6 = copy_widest.
    fn copy_form(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, form: u32) {
        let t = Threads::grid();
        match form {
            0 => copy::copy::<4>(dst, src, bytes, t),
            1 => copy::copy::<8>(dst, src, bytes, t),
            2 => copy::copy::<16>(dst, src, bytes, t),
            3 => copy::copy_with_remainder::<4>(dst, src, bytes, t),
            4 => copy::copy_with_remainder::<8>(dst, src, bytes, t),
            5 => copy::copy_with_remainder::<16>(dst, src, bytes, t),
            _ => copy::copy_widest(dst, src, bytes, t),
        }
    }

    /// The LL16 packet ping-pong test (see `packet_pingpong`).
    fn packet_pingpong_ll16(chan: MemoryChannel, rounds: u32, first: u32, bytes: u64, seed: u32, report: *mut u64) {
        packet_pingpong::<LL16Packet>(chan, rounds, first, bytes, seed, report);
    }

    /// The LL8 packet ping-pong test (see `packet_pingpong`).
    fn packet_pingpong_ll8(chan: MemoryChannel, rounds: u32, first: u32, bytes: u64, seed: u32, report: *mut u64) {
        packet_pingpong::<LL8Packet>(chan, rounds, first, bytes, seed, report);
    }

    /// Latency bench, LL16 packets.
    fn packet_pingpong_bench_ll16(chan: MemoryChannel, bytes: u64, rounds: u32, first: u32, flag_base: u32) {
        packet_pingpong_bench::<LL16Packet>(chan, bytes, rounds, first, flag_base);
    }

    /// Latency bench, LL8 packets.
    fn packet_pingpong_bench_ll8(chan: MemoryChannel, bytes: u64, rounds: u32, first: u32, flag_base: u32) {
        packet_pingpong_bench::<LL8Packet>(chan, bytes, rounds, first, flag_base);
    }

    /// Latency bench: ping-pong of `bytes` with put + signal / wait (one block). The message
    /// lands at [bytes, 2 bytes) of the peer's buffer.
    fn put_signal_pingpong(chan: MemoryChannel, bytes: u64, rounds: u32, first: u32) {
        let t = Threads::block();
        let send = || {
            chan.put(bytes, 0, bytes, t);
            // Every thread's stores before thread 0's release signal.
            barrier_sync();
            if t.index == 0 { chan.signal(); }
        };
        let recv = || {
            if t.index == 0 { chan.wait(BUDGET); }
            // Thread 0's acquire before any thread touches the message.
            barrier_sync();
        };
        for _ in 0..rounds {
            if first != 0 { send(); recv(); } else { recv(); send(); }
        }
    }

    /// Put + signal / wait ping-pong that checks every round (one block): in round r the sender
    /// (A, `first != 0`, first; side 0) fills [0, bytes) of its own buffer with its round-r
    /// message (`message_word(seed, side, r, k)`, u32 words), puts it to [bytes, 2 bytes) of the
    /// peer's buffer and signals; the receiver waits, then every thread checks its words of
    /// [bytes, 2 bytes) against the peer's round-r message. Each round's message differs, so a
    /// read before the data arrived sees the previous round's. `report[0]` += mismatching words,
    /// `report[1]` += words checked.
    fn memchan_put_signal_rounds(chan: MemoryChannel, bytes: u64, rounds: u32, first: u32, seed: u32, report: *mut u64) {
        let t = Threads::block();
        let words = (bytes / 4) as u32;
        let out = chan.src.cast::<u32>().as_ptr();
        let inc = chan.src.byte_add(bytes as usize).cast::<u32>().as_ptr();
        let (side, peer) = if first != 0 { (0, 1) } else { (1, 0) };
        let (mut bad, mut checked) = (0u64, 0u64);
        for r in 1..=rounds {
            for sending in [first != 0, first == 0] {
                if sending {
                    for k in t.stride(words) {
                        *out.add(k as usize) = message_word(seed, side, r, k);
                    }
                    // The message is whole before the threads copy it out (in other slices).
                    barrier_sync();
                    chan.put(bytes, 0, bytes, t);
                    // Every thread's stores before thread 0's release signal.
                    barrier_sync();
                    if t.index == 0 { chan.signal(); }
                } else {
                    if t.index == 0 { chan.wait(BUDGET); }
                    // Thread 0's acquire before any thread reads the message.
                    barrier_sync();
                    for k in t.stride(words) {
                        if core::ptr::read_volatile(inc.add(k as usize)) != message_word(seed, peer, r, k) { bad += 1; }
                        checked += 1;
                    }
                }
            }
        }
        atom_red::red_relaxed_gpu_add_u64(report, bad);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
    }

    /// Reads an LL16 packet that never arrives with a `budget_ns` budget: must trap.
    fn packet_read_timeout(pkt: GlobalPtr<LL16Packet>, budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        let _ = pkt.read(1, SpinBudget::from_nanos(budget_ns));
    }

    /// Grid-barrier test: in round r (values base + r) thread `block % threads` of every block
    /// writes its block's slot of half r % 2 of `slots` with a plain store, all blocks sync,
    /// then the block's threads read every block's slot of that half with plain loads.
    /// `report[0]` += slots that did not hold the round's value, `report[1]` += slots read.
    fn grid_barrier_check(syncer: GlobalPtr<DeviceSyncer>, slots: *mut u32, rounds: u32, base: u32, report: *mut u64) {
        let (nb, b) = (sreg::nctaid_x(), sreg::ctaid_x());
        let t = Threads::block();
        let (mut bad, mut seen) = (0u64, 0u64);
        for r in 1..=rounds {
            let v = base.wrapping_add(r);
            let half = slots.add(((r & 1) * nb) as usize);
            if t.index == b % t.count {
                *half.add(b as usize) = v;
            }
            syncer.sync(nb, BUDGET);
            for j in t.stride(nb) {
                if *half.add(j as usize) != v { bad += 1; }
                seen += 1;
            }
        }
        atom_red::red_relaxed_gpu_add_u64(report, bad);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), seen);
    }

    /// Syncs with one block more than the grid has, with a `budget_ns` budget: must trap.
    fn grid_barrier_timeout(syncer: GlobalPtr<DeviceSyncer>, budget_ns: i64) {
        syncer.sync(sreg::nctaid_x() + 1, SpinBudget::from_nanos(budget_ns));
    }

    /// Counting-semaphore rendezvous, thread 0 of every block (launch as many blocks as the
    /// semaphore has permits): acquire, count the arrival in `report[0]`, wait (at most `budget`,
    /// without trapping) until every block of the grid has arrived, add 1 to `report[1]` if they
    /// all did, release. A block releases only after seeing every block inside or after its
    /// budget, so `report[1]` reaches the grid size only if all the permits were held at once
    /// (a semaphore that admits fewer holders, a mutex say, leaves it lower).
    fn device_semaphore_rendezvous(sem: GlobalPtr<DeviceSemaphore>, report: *mut u64, budget: SpinBudget) {
        if sreg::tid_x() != 0 { return; }
        let all = sreg::nctaid_x() as u64;
        sem.acquire(BUDGET);
        atomic::fetch_add::<Relaxed, Gpu, u64>(report, 1);
        let start = sreg::globaltimer();
        while atomic::load::<Relaxed, Gpu, u64>(report) < all && !budget.expired(sreg::globaltimer().wrapping_sub(start)) {}
        if atomic::load::<Relaxed, Gpu, u64>(report) >= all {
            atomic::fetch_add::<Relaxed, Gpu, u64>(report.add(1), 1);
        }
        sem.release();
    }

    /// Counting-semaphore test, thread 0 of every block, `rounds` times: acquire; count itself in
    /// `inside` (report[0]) and raise the maximum seen (report[1]); increment report[2] with a
    /// plain load and store (exact only under mutual exclusion); leave; release.
    fn device_semaphore_check(sem: GlobalPtr<DeviceSemaphore>, rounds: u32, report: *mut u64) {
        if sreg::tid_x() != 0 { return; }
        for _ in 0..rounds {
            sem.acquire(BUDGET);
            let now = atomic::fetch_add::<Relaxed, Gpu, u64>(report, 1) + 1;
            atom_red::atom_release_gpu_max_u64(report.add(1), now);
            *report.add(2) += 1;
            atomic::fetch_add::<Relaxed, Gpu, u64>(report, u64::MAX);
            sem.release();
        }
    }
}

kernels! {
    /// Ping-pong through the data path (one block): in round r the sender (A in odd rounds, B in
    /// even) writes n u64 into the peer's buffer with `write` and n into its own buffer's second
    /// half, synchronises the block and signals; the receiver waits, then checks its first half
    /// with plain loads and the sender's second half with `read`. report[0] += mismatches,
    /// report[1] += values checked.
    fn memchan_rw_pingpong(chan: MemoryChannel, rounds: u32, first: u32, n: u32, seed: u32, report: *mut u64) {
        let t = Threads::block();
        let local = chan.src.cast::<u64>().as_ptr();
        let val = |r: u32, i: u32, which: u32| ((message_word(seed, which, r, i) as u64) << 32) | i as u64;
        let (mut bad, mut checked) = (0u64, 0u64);
        for r in 1..=rounds {
            if (r % 2 == 1) == (first != 0) {
                for i in t.stride(n) {
                    chan.write::<u64>(i as usize, val(r, i, 0));
                    *local.add((n + i) as usize) = val(r, i, 1);
                }
                // Every thread's stores before thread 0's release signal.
                barrier_sync();
                if t.index == 0 { chan.signal(); }
            } else {
                if t.index == 0 { chan.wait(BUDGET); }
                // Thread 0's acquire before any thread reads.
                barrier_sync();
                for i in t.stride(n) {
                    if *local.add(i as usize) != val(r, i, 0) { bad += 1; }
                    if chan.read::<u64>((n + i) as usize) != val(r, i, 1) { bad += 1; }
                    checked += 2;
                }
            }
        }
        atom_red::red_relaxed_gpu_add_u64(report, bad);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
    }
}
