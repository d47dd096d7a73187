//! Device halves of the semaphore, FIFO and port-channel tests and benches.

use core::ptr::{read_volatile, write_volatile};

use mscclpp_device::atomic::{self, AcqRel, Acquire, Release, Sys};
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::copy::Threads;
use mscclpp_device::fifo::FifoDeviceHandle;
use mscclpp_device::poll::{SpinBudget, now_ns, spin_until};
use mscclpp_device::ptx::{atom_red, misc::barrier_sync, sreg};
use mscclpp_device::semaphore::{CachedMemorySemaphore, Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};
use mscclpp_device::sync::block_barrier;
use mscclpp_device::trigger::{ProxyTrigger, Request, kind};

use crate::kernels;
use crate::shared::{message_word, tagged_trigger};

const BUDGET: SpinBudget = SpinBudget::DEFAULT;

/// An empty Data request (nothing to copy): the cheapest trigger a proxy handles.
const EMPTY_DATA: Request = Request::Transfer {
    kind: kind::DATA,
    dst_offset: 0,
    src_offset: 0,
    size: 0,
    dst_memory: 0,
    src_memory: 0,
    semaphore: 0,
};

#[inline(always)]
fn gid() -> u32 {
    sreg::ctaid_x() * sreg::ntid_x() + sreg::tid_x()
}

kernels! {
    /// Every thread pushes `per_thread` tagged triggers.
    fn fifo_push_many(fifo: FifoDeviceHandle, per_thread: u32) {
        let g = gid();
        for i in 0..per_thread {
            fifo.push(tagged_trigger(g, i), BUDGET);
        }
    }

    /// Every thread `t` of the block writes `!t` to `words[t]`, meets the block at
    /// `sync::block_barrier`, then reads the word of the thread half a block away into `seen[t]`
    /// (another warp's). Without the barrier some reads come before the write.
    fn block_barrier_exchange(words: *mut u32, seen: *mut u32) {
        let (t, n) = (sreg::tid_x(), sreg::ntid_x());
        *words.add(t as usize) = !t;
        block_barrier();
        *seen.add(t as usize) = *words.add(((t + n / 2) % n) as usize);
    }

    /// Thread 0 writes `poll::now_ns()` to `*out`.
    fn global_timer_now(out: *mut u64) {
        if sreg::tid_x() != 0 { return; }
        *out = now_ns();
    }

    /// Thread 0 pushes `rounds` empty Data requests, waiting for each to be handled.
    fn fifo_roundtrip(fifo: FifoDeviceHandle, rounds: u32) {
        if sreg::tid_x() != 0 { return; }
        let t = match ProxyTrigger::encode(EMPTY_DATA) { Ok(t) => t, Err(_) => return };
        for _ in 0..rounds {
            let pos = fifo.push(t, BUDGET);
            fifo.sync(pos, BUDGET);
        }
    }

    /// Thread 0 of every block pushes `per_block` empty Data requests, then waits for its last.
    fn fifo_throughput(fifo: FifoDeviceHandle, per_block: u32) {
        if sreg::tid_x() != 0 || per_block == 0 { return; }
        let t = match ProxyTrigger::encode(EMPTY_DATA) { Ok(t) => t, Err(_) => return };
        let mut last = 0;
        for _ in 0..per_block {
            last = fifo.push(t, BUDGET);
        }
        fifo.sync(last, BUDGET);
    }

    /// Pushes one request and syncs on it with a `budget_ns` budget (the proxy is stopped: traps).
    fn fifo_sync_timeout(fifo: FifoDeviceHandle, budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        let t = match ProxyTrigger::encode(EMPTY_DATA) { Ok(t) => t, Err(_) => return };
        let pos = fifo.push(t, SpinBudget::from_nanos(budget_ns));
        fifo.sync(pos, SpinBudget::from_nanos(budget_ns));
    }

    /// GPU-CPU-GPU round trip baseline: thread 0 writes `base + r` to `to_host` (pinned) and waits
    /// for the host thread to echo it in `from_host` (pinned), for r in 1..=rounds.
    fn raw_host_roundtrip_from(to_host: *mut u64, from_host: *const u64, rounds: u32, base: u64) {
        if sreg::tid_x() != 0 { return; }
        for r in base + 1..=base + rounds as u64 {
            // Partner: the host thread's acquire load.
            atomic::store::<Release, Sys, u64>(to_host, r);
            // Partner: the host thread's release store.
            spin_until(BUDGET, c"raw_host_roundtrip", || atomic::load::<Acquire, Sys, u64>(from_host) >= r);
        }
    }

    /// Semaphore ping-pong between two GPUs, thread 0. Each round the sender writes the round
    /// number into the peer's `data` slot and signals; the receiver waits, then checks its slot.
    /// `mode`: 0 signal/wait, 1 relaxed signal/wait with explicit fences, 2 the same as 0 through
    /// a [`CachedMemorySemaphore`] (counters in registers, written back at the end).
    /// Mismatches counted in `errors`. With a null `peer_data` no data moves (the bench's pure
    /// signal/wait round trip). The tests use [`sem_pingpong_payload`], which moves a payload
    /// written by every thread and counts the words it checked.
    fn sem_pingpong(
        sem: MemoryDevice2DeviceSemaphore,
        rounds: u32,
        first: u32,
        mode: u32,
        my_data: *mut u64,
        peer_data: *mut u64,
        errors: *mut u32,
    ) {
        if sreg::tid_x() != 0 { return; }
        let mut bad = 0u32;
        let data = !peer_data.is_null();
        let mut cached: Option<CachedMemorySemaphore> = if mode == 2 { Some(sem.cached()) } else { None };
        let send = |r: u64, cached: &mut Option<CachedMemorySemaphore>| {
            if data { write_volatile(peer_data, r); }
            match cached {
                Some(c) => c.signal(),
                None if mode == 1 => {
                    // Partner: the receiver's fence after its relaxed wait.
                    atomic::fence_acq_rel::<Sys>();
                    sem.relaxed_signal();
                }
                None => sem.signal(),
            }
        };
        let recv = |r: u64, cached: &mut Option<CachedMemorySemaphore>, bad: &mut u32| {
            match cached {
                Some(c) => c.wait(BUDGET),
                None if mode == 1 => {
                    sem.relaxed_wait(BUDGET);
                    // Partner: the sender's fence before its relaxed signal.
                    atomic::fence_acq_rel::<Sys>();
                }
                None => sem.wait(BUDGET),
            }
            if data && read_volatile(my_data) != r { *bad += 1; }
        };
        for r in 1..=rounds as u64 {
            if first != 0 {
                send(r, &mut cached);
                recv(r, &mut cached, &mut bad);
            } else {
                recv(r, &mut cached, &mut bad);
                send(r, &mut cached);
            }
        }
        // Writes the cached counters back (a no-op for the other modes).
        drop(cached);
        *errors = bad;
    }

    /// Semaphore ping-pong with a payload between two GPUs, one block. Each round the sender's
    /// threads all write `words` words of the round's message (`message_word(seed, side, round,
    /// k)`, side 0 for `first != 0`) into the peer's `peer_data`, the block synchronises and
    /// thread 0 signals; the receiver's thread 0 waits, the block synchronises and every thread
    /// checks its words of `my_data` against the peer's message of the round. `mode` as for
    /// [`sem_pingpong`]. `report[0]` += mismatching words, `report[1]` += words checked.
    fn sem_pingpong_payload(
        sem: MemoryDevice2DeviceSemaphore,
        rounds: u32,
        first: u32,
        mode: u32,
        seed: u32,
        words: u32,
        my_data: *const u32,
        peer_data: *mut u32,
        report: *mut u64,
    ) {
        let t = Threads::block();
        let leader = t.index == 0;
        let (side, peer) = if first != 0 { (0, 1) } else { (1, 0) };
        let mut cached: Option<CachedMemorySemaphore> = if mode == 2 && leader { Some(sem.cached()) } else { None };
        let (mut bad, mut checked) = (0u64, 0u64);
        for r in 1..=rounds {
            for sending in [first != 0, first == 0] {
                if sending {
                    for k in t.stride(words) {
                        write_volatile(peer_data.add(k as usize), message_word(seed, side, r, k));
                    }
                    // Every thread's payload stores before thread 0's release signal.
                    barrier_sync();
                    if leader {
                        match &mut cached {
                            Some(c) => c.signal(),
                            None if mode == 1 => {
                                // Partner: the receiver's fence after its relaxed wait.
                                atomic::fence_acq_rel::<Sys>();
                                sem.relaxed_signal();
                            }
                            None => sem.signal(),
                        }
                    }
                } else {
                    if leader {
                        match &mut cached {
                            Some(c) => c.wait(BUDGET),
                            None if mode == 1 => {
                                sem.relaxed_wait(BUDGET);
                                // Partner: the sender's fence before its relaxed signal.
                                atomic::fence_acq_rel::<Sys>();
                            }
                            None => sem.wait(BUDGET),
                        }
                    }
                    // Thread 0's acquire before any thread reads the payload.
                    barrier_sync();
                    for k in t.stride(words) {
                        if read_volatile(my_data.add(k as usize)) != message_word(seed, peer, r, k) {
                            bad += 1;
                        }
                        checked += 1;
                    }
                }
            }
        }
        // Writes the cached counters back (thread 0 in mode 2; a no-op otherwise).
        drop(cached);
        atom_red::red_relaxed_gpu_add_u64(report, bad);
        atom_red::red_relaxed_gpu_add_u64(report.add(1), checked);
    }

    /// The semaphore ping-pong of the bench through a [`CachedMemorySemaphore`], written like
    /// [`raw_flag_pingpong`] (its baseline) so that only the primitive differs.
    fn sem_pingpong_cached(sem: MemoryDevice2DeviceSemaphore, rounds: u32, first: u32) {
        if sreg::tid_x() != 0 { return; }
        let mut s = sem.cached();
        for _ in 0..rounds {
            if first != 0 {
                s.signal();
                s.wait(BUDGET);
            } else {
                s.wait(BUDGET);
                s.signal();
            }
        }
    }

    /// Baseline for the semaphore ping-pong: raw flags with st.release.sys / ld.acquire.sys.
    fn raw_flag_pingpong(my_flag: *mut u64, peer_flag: *mut u64, rounds: u32, first: u32) {
        if sreg::tid_x() != 0 { return; }
        let base = read_volatile(my_flag);
        for r in 1..=rounds as u64 {
            if first != 0 {
                atomic::store::<Release, Sys, u64>(peer_flag, base + r);
                spin_until(BUDGET, c"raw_flag_pingpong", || atomic::load::<Acquire, Sys, u64>(my_flag) >= base + r);
            } else {
                spin_until(BUDGET, c"raw_flag_pingpong", || atomic::load::<Acquire, Sys, u64>(my_flag) >= base + r);
                atomic::store::<Release, Sys, u64>(peer_flag, base + r);
            }
        }
    }

    /// Thread 0 waits (`budget_ns`) for `*flag` to become nonzero, then writes what it saw to
    /// `*seen`. Only the late-lookup test uses it (and its partner below).
    fn late_lookup_waiter(flag: *const u64, seen: *mut u64, budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        spin_until(SpinBudget::from_nanos(budget_ns), c"late_lookup_waiter", || atomic::load::<Acquire, Sys, u64>(flag) != 0);
        write_volatile(seen, atomic::load::<Acquire, Sys, u64>(flag));
    }
    /// Thread 0 stores `value` to `*flag` (release): the partner of `late_lookup_waiter`.
    fn late_lookup_setter(flag: *mut u64, value: u64) {
        if sreg::tid_x() != 0 { return; }
        atomic::store::<Release, Sys, u64>(flag, value);
    }
    /// Waits on a semaphore that is never signalled, with a `budget_ns` budget: must trap.
    /// Reads element `i` of a four-element array: an index of 4 or more fails the bounds check,
    /// and the device crate's panic handler prints the location and traps.
    fn panic_out_of_bounds(p: *mut u32, i: u32) {
        let a = [1u32, 2, 3, 4];
        *p = a[i as usize]; // trap site: panic_out_of_bounds index
    }
    fn sem_wait_timeout(sem: MemoryDevice2DeviceSemaphore, budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        sem.wait(SpinBudget::from_nanos(budget_ns));
    }

    /// Thread 0: `count` put_with_signal requests of `bytes` each, at consecutive offsets.
    fn port_put_signal(chan: PortChannel, bytes: u64, count: u32) {
        if sreg::tid_x() != 0 { return; }
        for i in 0..count as u64 {
            chan.put_with_signal(i * bytes, i * bytes, bytes, BUDGET);
        }
    }

    /// Thread 0 waits for `count` signals on the semaphore, then every thread copies `words`
    /// words of `data` (written by the peer's puts) to `out`.
    fn port_wait_copy(sem: Host2DeviceSemaphore, count: u32, data: *const u32, out: *mut u32, words: u32) {
        if sreg::tid_x() == 0 {
            for _ in 0..count { sem.wait(BUDGET); }
        }
        barrier_sync();
        for i in Threads::block().stride(words) {
            *out.add(i as usize) = read_volatile(data.add(i as usize));
        }
    }

    /// put_with_signal_and_flush of `bytes` from offset 0, then every thread at once overwrites
    /// the source with its complement: the peer must still receive the old data.
    fn port_put_flush_overwrite(chan: PortChannel, src: *mut u32, bytes: u64) {
        if sreg::tid_x() == 0 {
            chan.put_with_signal_and_flush(0, 0, bytes, BUDGET);
        }
        barrier_sync();
        let words = (bytes / 4) as u32;
        for i in Threads::block().stride(words) {
            let p = src.add(i as usize);
            write_volatile(p, !read_volatile(p));
        }
    }

    /// Every thread of every block asks the proxy to add `values[gid]` to slot `gid % slots` of
    /// the destination; thread 0 of block 0 then flushes after a grid-wide count of finished
    /// threads, so the kernel ends with every add done.
    fn port_atomic_add(chan: PortChannel, values: *const u64, slots: u32, done: *mut u32) {
        let g = gid();
        chan.atomic_add(((g % slots) * 8) as u64, *values.add(g as usize), BUDGET);
        let total = sreg::nctaid_x() * sreg::ntid_x();
        // Partner: the acquire below in the last thread.
        let before = atomic::fetch_add::<AcqRel, mscclpp_device::atomic::Gpu, u32>(done, 1);
        if before + 1 == total {
            chan.flush(BUDGET);
        }
    }

    /// Flushes with a stopped proxy and a `budget_ns` budget: must trap in Fifo::sync.
    fn port_flush_timeout(chan: PortChannel, budget_ns: i64) {
        if sreg::tid_x() != 0 { return; }
        chan.flush(SpinBudget::from_nanos(budget_ns));
    }

    /// Port-channel ping-pong of `bytes` per message, `rounds` times (thread 0).
    fn port_pingpong(chan: PortChannel, bytes: u64, rounds: u32, first: u32) {
        if sreg::tid_x() != 0 { return; }
        for _ in 0..rounds {
            if first != 0 {
                chan.put_with_signal(0, 0, bytes, BUDGET);
                chan.wait(BUDGET);
            } else {
                chan.wait(BUDGET);
                chan.put_with_signal(0, 0, bytes, BUDGET);
            }
        }
    }
}
