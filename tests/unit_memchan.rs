//! GPU tests of the memory channel, the LL packets, the cooperative copies and the grid-wide
//! synchronisation (one process; two GPUs for the channel tests). Fresh random data every run,
//! poisoned outputs, results compared on the host.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::packet::{LL8Packet, LL16Packet, Packet, packet_bytes};
use mscclpp_device::semaphore::DeviceSemaphore;
use mscclpp_device::sync::DeviceSyncer;
use mscclpp_host::channel::{MemoryChannelStorage, memory_channel_pair};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::PTX;
use mscclpp_rs::testing::{self, DeviceMessage, POISON, assert_same, expect_trap, gpus_or_skip, trap_test};

fn launch(g: &Arc<Gpu>, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: each call site passes the kernel's parameters in order with matching types; the
    // buffers outlive the synchronizes of the test.
    unsafe { g.launch(PTX, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

/// Launches the two sides of a two-GPU kernel (the waiting side first). Tests run in parallel
/// and share each GPU's stream, so the two launches are made under one lock: otherwise two
/// tests could queue their sides in opposite orders on the two streams, and each waiting side
/// would wait for a partner stuck behind the other test's kernel.
fn launch_pair(name: &str, cfg: LaunchConfig, sides: [(&Arc<Gpu>, Args); 2]) {
    static PAIRS: Mutex<()> = Mutex::new(());
    let _one_pair_at_a_time = PAIRS.lock().unwrap_or_else(|e| e.into_inner());
    for (g, args) in sides {
        launch(g, name, cfg, args);
    }
}

fn sync(g: &Arc<Gpu>, what: &str) {
    g.synchronize().unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Compares quickly (memcmp), and only on a mismatch reports the first differing bytes.
fn assert_bytes(what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        assert_same(what, got, want);
    }
}

/// GPU 0's buffer holds random data, GPU 1's is poisoned. `put` runs on GPU 0 (its channel's
/// `dst` is GPU 1's buffer), `get` on GPU 1 (its channel's `dst` is GPU 0's buffer): both copy
/// from GPU 0's buffer into GPU 1's.
struct CopySetup {
    g0: Arc<Gpu>,
    g1: Arc<Gpu>,
    data: Vec<u8>,
    out: DeviceBuffer,
    c0: MemoryChannel,
    c1: MemoryChannel,
    _input: DeviceBuffer,
    _storage: MemoryChannelStorage,
}

/// Room after the largest case, so that writes past the end would land in checked poison.
const PAD: usize = 64;

fn copy_setup(gpus: &[Arc<Gpu>], max_bytes: usize) -> CopySetup {
    let (g0, g1) = (gpus[0].clone(), gpus[1].clone());
    let data = testing::random_bytes(max_bytes + PAD);
    let input = DeviceBuffer::from_slice(&g0, &data).unwrap();
    let out = DeviceBuffer::filled(&g1, max_bytes + PAD, POISON).unwrap();
    let (c0, c1, storage) = memory_channel_pair(&input, &out, 4096).unwrap();
    CopySetup { g0, g1, data, out, c0, c1, _input: input, _storage: storage }
}

/// One put or get of `bytes` from offset `from` of GPU 0's buffer to offset `to` of GPU 1's,
/// over the whole GPU; checks the copied range and the poison around it, then re-poisons.
fn copy_case(s: &CopySetup, get: bool, from: usize, to: usize, bytes: usize) {
    // put(dst_off = GPU 1 offset, src_off = GPU 0 offset); get(dst_off = GPU 0 offset (the
    // peer), src_off = GPU 1 offset (local)).
    let (g, kernel, chan, a, b) =
        if get { (&s.g1, "memchan_get", s.c1, from, to) } else { (&s.g0, "memchan_put", s.c0, to, from) };
    let cfg = LaunchConfig::new(g.info().sm_count, 512);
    launch(g, kernel, cfg, Args::new().arg(chan).arg(a as u64).arg(b as u64).arg(bytes as u64));
    sync(g, kernel);
    let end = (to + bytes + PAD).min(s.out.len());
    let mut got = vec![0u8; end];
    s.out.read(0, &mut got).unwrap();
    let mut want = vec![POISON; end];
    want[to..to + bytes].copy_from_slice(&s.data[from..from + bytes]);
    assert_bytes(&format!("{kernel} of {bytes} B from offset {from} to offset {to}"), &got, &want);
    s.out.fill(POISON).unwrap();
}

/// Sizes of the full alignment matrix: tiny, around 16, around a page, 1 MiB + 3, and one
/// random size.
fn matrix_sizes() -> Vec<usize> {
    vec![1, 3, 15, 16, 17, 4095, 4096 + 5, (1 << 20) + 3, testing::random_range(1, 65_536) as usize]
}

fn every_alignment(test: &str, get: bool) {
    let Some(gpus) = testing::peers_or_skip(test) else { return };
    let sizes = matrix_sizes();
    let s = copy_setup(&gpus, *sizes.iter().max().unwrap() + 16);
    for &bytes in &sizes {
        for from in 0..16 {
            for to in 0..16 {
                copy_case(&s, get, from, to, bytes);
            }
        }
    }
}

#[test]
fn memchan_put_every_alignment_and_size() {
    every_alignment("memchan_put_every_alignment_and_size", false);
}

#[test]
fn memchan_get_every_alignment_and_size() {
    every_alignment("memchan_get_every_alignment_and_size", true);
}

#[test]
fn memchan_put_and_get_256_mib() {
    let Some(gpus) = testing::peers_or_skip("memchan_put_and_get_256_mib") else { return };
    let bytes = 256 << 20;
    let s = copy_setup(&gpus, bytes + 16);
    // 16-byte elements; head + 16-byte elements + remainder; 8-byte elements after a 4-byte
    // head; byte by byte (offsets differ modulo 4).
    for (from, to) in [(0, 0), (7, 7), (12, 4), (1, 2)] {
        copy_case(&s, false, from, to, bytes);
        copy_case(&s, true, from, to, bytes);
    }
}

#[test]
fn copy_forms_every_width_with_and_without_remainder() {
    let Some(gpus) = gpus_or_skip("copy_forms_every_width_with_and_without_remainder", 1) else { return };
    let g = &gpus[0];
    let max = (1 << 20) + 64;
    let data = testing::random_bytes(max);
    let src = DeviceBuffer::from_slice(g, &data).unwrap();
    let dst = DeviceBuffer::filled(g, max, POISON).unwrap();
    let cfg = LaunchConfig::new(g.info().sm_count, 256);
    let run = |form: u32, from: usize, to: usize, bytes: usize| {
        let args = Args::new()
            .arg(dst.ptr::<u8>().byte_add(to))
            .arg(src.ptr::<u8>().byte_add(from))
            .arg(bytes as u64)
            .arg(form);
        launch(g, "copy_form", cfg, args);
        sync(g, "copy_form");
        let end = to + bytes + 32;
        let mut got = vec![0u8; end];
        dst.read(0, &mut got).unwrap();
        let mut want = vec![POISON; end];
        want[to..to + bytes].copy_from_slice(&data[from..from + bytes]);
        assert_bytes(&format!("copy form {form}: {bytes} B from offset {from} to offset {to}"), &got, &want);
        dst.fill(POISON).unwrap();
    };
    for (i, w) in [4usize, 8, 16].into_iter().enumerate() {
        let offsets: Vec<usize> = (0..16).step_by(w).collect();
        for &from in &offsets {
            for &to in &offsets {
                // copy::<W>: whole elements only.
                for bytes in [w, 3 * w, 4096, 1 << 20] {
                    run(i as u32, from, to, bytes);
                }
                // copy_with_remainder::<W>: any size.
                for bytes in [1, w - 1, w + 1, 4095, (1 << 20) + 3] {
                    run(3 + i as u32, from, to, bytes);
                }
            }
        }
    }
    // copy_widest on one GPU (the channel tests cover it across GPUs).
    for (from, to) in [(0, 0), (5, 5), (3, 11), (2, 9)] {
        run(6, from, to, (1 << 20) + 7);
    }
}

/// The packet ping-pong of `ptx_tests::memchan::packet_pingpong`: 10,000 rounds with flag =
/// round; A checks every round's echo or answer, B every even round's message.
fn packet_pingpong<P: Packet>(test: &str, kernel: &str) {
    let Some(gpus) = testing::peers_or_skip(test) else { return };
    let (g0, g1) = (&gpus[0], &gpus[1]);
    let rounds = 10_000u32;
    // 1000 to 1099 packets over 256 threads: some threads carry one packet more than others.
    let bytes = P::PAYLOAD_BYTES as usize * (1000 + testing::random_range(0, 100) as usize);
    let seed = testing::random_range(0, 1 << 32) as u32;
    let b0 = DeviceBuffer::filled(g0, 2 * bytes, POISON).unwrap();
    let b1 = DeviceBuffer::filled(g1, 2 * bytes, POISON).unwrap();
    let pkts = packet_bytes::<P>(bytes as u64) as usize;
    let (c0, c1, _storage) = memory_channel_pair(&b0, &b1, pkts).unwrap();
    let r0 = DeviceBuffer::filled(g0, 16, 0).unwrap();
    let r1 = DeviceBuffer::filled(g1, 16, 0).unwrap();
    let cfg = LaunchConfig::new(2, 128);
    let t = Instant::now();
    let args = |chan, first: u32, report: &DeviceBuffer| {
        Args::new().arg(chan).arg(rounds).arg(first).arg(bytes as u64).arg(seed).arg(report.addr())
    };
    launch_pair(kernel, cfg, [(g1, args(c1, 0, &r1)), (g0, args(c0, 1, &r0))]);
    sync(g0, kernel);
    sync(g1, kernel);
    println!("{test}: {rounds} rounds of {bytes} B in {:?}", t.elapsed());
    let words = (bytes / 4) as u64;
    let (a, b) = (r0.to_vec::<u64>().unwrap(), r1.to_vec::<u64>().unwrap());
    assert_eq!(a, [0, rounds as u64 * words], "GPU 0: [mismatching words, words checked]");
    assert_eq!(b, [0, (rounds / 2) as u64 * words], "GPU 1: [mismatching words, words checked]");
}

#[test]
fn ll8_packet_pingpong_10k_rounds() {
    packet_pingpong::<LL8Packet>("ll8_packet_pingpong_10k_rounds", "packet_pingpong_ll8");
}

#[test]
fn ll16_packet_pingpong_10k_rounds() {
    packet_pingpong::<LL16Packet>("ll16_packet_pingpong_10k_rounds", "packet_pingpong_ll16");
}

#[test]
fn memchan_write_signal_wait_read_pingpong() {
    let Some(gpus) = testing::peers_or_skip("memchan_write_signal_wait_read_pingpong") else { return };
    let (g0, g1) = (&gpus[0], &gpus[1]);
    let (rounds, n) = (2000u32, 4096u32);
    let seed = testing::random_range(0, 1 << 32) as u32;
    let b0 = DeviceBuffer::filled(g0, 16 * n as usize, POISON).unwrap();
    let b1 = DeviceBuffer::filled(g1, 16 * n as usize, POISON).unwrap();
    let (c0, c1, storage) = memory_channel_pair(&b0, &b1, 16).unwrap();
    let r0 = DeviceBuffer::filled(g0, 16, 0).unwrap();
    let r1 = DeviceBuffer::filled(g1, 16, 0).unwrap();
    let args = |chan, first: u32, report: &DeviceBuffer| {
        Args::new().arg(chan).arg(rounds).arg(first).arg(n).arg(seed).arg(report.addr())
    };
    launch_pair("memchan_rw_pingpong", LaunchConfig::new(1, 512), [(g1, args(c1, 0, &r1)), (g0, args(c0, 1, &r0))]);
    sync(g0, "memchan_rw_pingpong on GPU 0");
    sync(g1, "memchan_rw_pingpong on GPU 1");
    let per_side = (rounds / 2) as u64 * 2 * n as u64;
    assert_eq!(r0.to_vec::<u64>().unwrap(), [0, per_side], "GPU 0: [mismatches, values checked]");
    assert_eq!(r1.to_vec::<u64>().unwrap(), [0, per_side], "GPU 1: [mismatches, values checked]");
    let half = (rounds / 2) as u64;
    assert_eq!(storage.semaphores.a.read().unwrap(), (half, half), "GPU 0 semaphore (inbound, expected)");
    assert_eq!(storage.semaphores.b.read().unwrap(), (half, half), "GPU 1 semaphore (inbound, expected)");
}

/// Blocks of `grid_barrier_check` per SM that can be co-resident with 256 threads.
fn barrier_blocks_per_sm(g: &Arc<Gpu>) -> u32 {
    let f = g.function(PTX, "grid_barrier_check").unwrap();
    // The occupancy query runs in the calling thread's current context.
    g.bind().unwrap();
    f.occupancy_max_active_blocks_per_multiprocessor(256, 0, None).unwrap()
}

#[test]
fn grid_barrier_every_sm_10k_rounds() {
    let Some(gpus) = gpus_or_skip("grid_barrier_every_sm_10k_rounds", 1) else { return };
    let g = &gpus[0];
    let rounds = 10_000u32;
    let per_sm = barrier_blocks_per_sm(g);
    let sms = g.info().sm_count;
    for blocks in [1, sms, sms * per_sm] {
        let syncer = DeviceBuffer::filled(g, size_of::<DeviceSyncer>(), 0).unwrap();
        let slots = DeviceBuffer::filled(g, 2 * 4 * blocks as usize, 0).unwrap();
        let report = DeviceBuffer::filled(g, 16, 0).unwrap();
        let t = Instant::now();
        // Two launches on the same syncer: it must be reusable across launches.
        for launch in 0..2u32 {
            let args = Args::new()
                .arg(syncer.ptr::<DeviceSyncer>())
                .arg(slots.addr())
                .arg(rounds)
                .arg(launch * rounds)
                .arg(report.addr());
            // SAFETY: parameters match `grid_barrier_check`; the buffers outlive the synchronize.
            unsafe { g.launch_cooperative(PTX, "grid_barrier_check", LaunchConfig::new(blocks, 256), args) }
                .unwrap_or_else(|e| panic!("cooperative launch of {blocks} blocks: {e}"));
            sync(g, "grid_barrier_check");
        }
        println!("{blocks} blocks ({per_sm} per SM max): {} barriers in {:?}", 2 * rounds, t.elapsed());
        let seen = 2 * rounds as u64 * blocks as u64 * blocks as u64;
        assert_eq!(report.to_vec::<u64>().unwrap(), [0, seen], "{blocks} blocks: [stale slots, slots read]");
        // Every round ends with no block arrived (what lets any grid reuse the syncer).
        assert_eq!(
            syncer.to_vec::<DeviceSyncer>().unwrap()[0].count,
            0,
            "{blocks} blocks: arrivals left after the launches"
        );
        // The same syncer then serves a grid of another size.
        let other = if blocks == 2 { 3 } else { 2 };
        let (slots, report) =
            (DeviceBuffer::filled(g, 2 * 4 * other as usize, 0).unwrap(), DeviceBuffer::filled(g, 16, 0).unwrap());
        let args = Args::new()
            .arg(syncer.ptr::<DeviceSyncer>())
            .arg(slots.addr())
            .arg(100u32)
            .arg(2 * rounds)
            .arg(report.addr());
        // SAFETY: parameters match `grid_barrier_check`; the buffers outlive the synchronize.
        unsafe { g.launch_cooperative(PTX, "grid_barrier_check", LaunchConfig::new(other, 256), args) }
            .unwrap_or_else(|e| panic!("cooperative launch of {other} blocks: {e}"));
        sync(g, "grid_barrier_check on a reused syncer");
        let seen = 100 * other as u64 * other as u64;
        assert_eq!(
            report.to_vec::<u64>().unwrap(),
            [0, seen],
            "{other} blocks after {blocks} on the same syncer: [stale slots, slots read]"
        );
    }
}

#[test]
fn cooperative_launch_with_too_many_blocks_is_refused() {
    let Some(gpus) = gpus_or_skip("cooperative_launch_with_too_many_blocks_is_refused", 1) else { return };
    let g = &gpus[0];
    let blocks = barrier_blocks_per_sm(g) * g.info().sm_count + 1;
    let syncer = DeviceBuffer::filled(g, size_of::<DeviceSyncer>(), 0).unwrap();
    let slots = DeviceBuffer::filled(g, 2 * 4 * blocks as usize, 0).unwrap();
    let report = DeviceBuffer::filled(g, 16, 0).unwrap();
    let args = Args::new().arg(syncer.ptr::<DeviceSyncer>()).arg(slots.addr()).arg(1u32).arg(0u32).arg(report.addr());
    // SAFETY: parameters match `grid_barrier_check`; the launch is refused before it runs.
    let r = unsafe { g.launch_cooperative(PTX, "grid_barrier_check", LaunchConfig::new(blocks, 256), args) };
    let e = r.expect_err("a grid that cannot be co-resident must be refused").to_string();
    assert!(e.contains("cannot be co-resident") && e.contains(&format!("{blocks} blocks")), "{e}");
    // Nothing ran and the context is healthy.
    sync(g, "after the refused launch");
    assert_eq!(report.to_vec::<u64>().unwrap(), [0, 0]);
}

#[test]
fn device_semaphore_limits_holders_and_orders_their_writes() {
    let Some(gpus) = gpus_or_skip("device_semaphore_limits_holders_and_orders_their_writes", 1) else { return };
    let g = &gpus[0];
    let (blocks, rounds) = (g.info().sm_count, 200u32);
    let total = blocks as u64 * rounds as u64;
    for permits in [1u32, 3] {
        let sem = DeviceBuffer::from_slice(g, &[DeviceSemaphore::new(permits)]).unwrap();
        let report = DeviceBuffer::filled(g, 24, 0).unwrap();
        let args = Args::new().arg(sem.ptr::<DeviceSemaphore>()).arg(rounds).arg(report.addr());
        launch(g, "device_semaphore_check", LaunchConfig::new(blocks, 32), args);
        sync(g, "device_semaphore_check");
        let [inside, max, counter] = report.to_vec::<u64>().unwrap()[..] else { unreachable!() };
        assert_eq!(inside, 0, "permits {permits}: holders left inside");
        assert!((1..=permits as u64).contains(&max), "permits {permits}: {max} holders at once");
        if permits == 1 {
            assert_eq!(counter, total, "plain increments under mutual exclusion lost updates");
        }
        let state = sem.to_vec::<DeviceSemaphore>().unwrap()[0];
        assert_eq!((state.tickets, state.released), (total as u32, total as u32), "permits {permits}: counters");
    }
}

#[test]
fn device_semaphore_admits_all_its_permits_at_once() {
    let Some(gpus) = gpus_or_skip("device_semaphore_admits_all_its_permits_at_once", 1) else { return };
    let g = &gpus[0];
    // One block per permit, each holding its permit until every block is inside (or 2 s have
    // passed): only a semaphore that admits `permits` holders at once lets every block see all.
    for permits in [2u32, 3, 8, g.info().sm_count.min(64)] {
        let sem = DeviceBuffer::from_slice(g, &[DeviceSemaphore::new(permits)]).unwrap();
        let report = DeviceBuffer::filled(g, 16, 0).unwrap();
        let args = Args::new()
            .arg(sem.ptr::<DeviceSemaphore>())
            .arg(report.addr())
            .arg(mscclpp_device::poll::SpinBudget::from_millis(2_000));
        launch(g, "device_semaphore_rendezvous", LaunchConfig::new(permits, 32), args);
        sync(g, "device_semaphore_rendezvous");
        let p = permits as u64;
        assert_eq!(
            report.to_vec::<u64>().unwrap(),
            [p, p],
            "permits {permits}: [blocks that acquired, blocks that saw all {permits} inside at once]"
        );
        let state = sem.to_vec::<DeviceSemaphore>().unwrap()[0];
        assert_eq!((state.tickets, state.released), (permits, permits), "permits {permits}: counters");
    }
}

#[test]
fn packet_read_never_satisfied_traps_within_its_budget() {
    trap_test(
        "packet_read_never_satisfied_traps_within_its_budget",
        1,
        |g| {
            let pkt = DeviceBuffer::filled(&g[0], 16, 0).unwrap();
            let t = Instant::now();
            let args = Args::new().arg(pkt.ptr::<LL16Packet>()).arg(20_000_000i64);
            launch(&g[0], "packet_read_timeout", LaunchConfig::new(1, 32), args);
            expect_trap(&g[0], t);
        },
        &["LAUNCH_FAILED"],
        DeviceMessage::Timeout { name: "LL16Packet::read", budget_ns: 20_000_000 },
        (1, 32),
    );
}

#[test]
fn grid_barrier_missing_block_traps_within_its_budget() {
    trap_test(
        "grid_barrier_missing_block_traps_within_its_budget",
        1,
        |g| {
            let syncer = DeviceBuffer::filled(&g[0], size_of::<DeviceSyncer>(), 0).unwrap();
            let t = Instant::now();
            let args = Args::new().arg(syncer.ptr::<DeviceSyncer>()).arg(20_000_000i64);
            launch(&g[0], "grid_barrier_timeout", LaunchConfig::new(2, 64), args);
            expect_trap(&g[0], t);
        },
        &["LAUNCH_FAILED"],
        DeviceMessage::Timeout { name: "DeviceSyncer::sync", budget_ns: 20_000_000 },
        (2, 64),
    );
}

/// A [`DeviceBuffer::retain`] hold keeps the memory allocated after the buffer is dropped (what
/// channel sets rely on for the buffers they were built over), and the memory is freed with the
/// last hold: the driver knows the address while a hold lives, and not after.
#[test]
fn retained_memory_outlives_its_buffer_and_is_freed_with_the_last_hold() {
    use mscclpp_host::cudarc::driver::sys;
    let Some(gpus) = gpus_or_skip("retained_memory_outlives_its_buffer_and_is_freed_with_the_last_hold", 1) else {
        return;
    };
    let g = &gpus[0];
    let bytes = 1 << 20;
    let data = testing::random_bytes(bytes);
    let b = DeviceBuffer::from_slice(g, &data).unwrap();
    let addr = b.addr();
    let (hold, second) = (b.retain(), b.retain());
    drop(b);
    drop(second);
    g.bind().unwrap();
    let range = |a: u64| {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out-pointers to locals; the context is bound on this thread.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, a) };
        (r, base, size)
    };
    let (r, base, size) = range(addr);
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "the held memory is still allocated");
    assert!(base <= addr && addr + bytes as u64 <= base + size as u64);
    // Its contents are intact.
    let mut back = vec![POISON; bytes];
    // SAFETY: `addr` holds `bytes` bytes (held above); `back` is that long.
    unsafe { mscclpp_host::cudarc::driver::result::memcpy_dtoh_sync(&mut back, addr) }.unwrap();
    assert_same("the held memory", &back, &data);
    drop(hold);
    let (r, _, _) = range(addr);
    assert_ne!(r, sys::CUresult::CUDA_SUCCESS, "the memory is freed with the last hold");
}

/// Ranks that are threads of one process (a `LocalBootstrap`, each with its own GPU handle, on
/// one GPU or two) exchange buffers through `Communicator::exchange` without CUDA IPC: each sees
/// the other's buffer at its own address, with its size; the import holds the exporter's memory,
/// so it stays readable after the exporter drops its buffer; and the communicator counts the
/// ranks that share a GPU.
#[test]
fn exchange_between_threads_of_one_process_uses_and_holds_the_buffers() {
    let test = "exchange_between_threads_of_one_process_uses_and_holds_the_buffers";
    let Some(gpus) = gpus_or_skip(test, 1) else { return };
    use mscclpp_host::bootstrap::{Bootstrap, BootstrapExt, LocalBootstrap};
    use mscclpp_host::comm::Communicator;
    let count = gpus.len();
    let bytes = 4096 + testing::random_range(0, 4096) as usize;
    let data: Arc<Vec<Vec<u8>>> = Arc::new((0..2).map(|_| testing::random_bytes(bytes)).collect());
    let threads: Vec<_> = LocalBootstrap::group(2)
        .unwrap()
        .into_iter()
        .map(|boot| {
            let data = data.clone();
            std::thread::spawn(move || {
                let me = boot.rank();
                let gpu = Gpu::open(me % count).unwrap();
                let comm = Communicator::new(Arc::new(boot), gpu.clone());
                let buf = DeviceBuffer::exportable_from_slice(&gpu, &data[me]).unwrap();
                let peers = comm.exchange(&buf).unwrap();
                let addrs = comm.bootstrap().all_gather_pod(&buf.addr()).unwrap();
                assert_eq!(peers.addrs(), &addrs[..], "rank {me}: every buffer at its own address");
                assert!((0..2).all(|r| peers.len(r) == bytes as u64), "rank {me}: sizes");
                let sharing = if count == 1 { 2 } else { 1 };
                assert_eq!(comm.ranks_sharing_gpu().unwrap(), sharing, "rank {me}");
                assert_eq!(comm.sm_share().unwrap(), (gpu.info().sm_count / sharing as u32).max(1));
                // Rank 1 lets go of its buffer; rank 0's import still holds the memory.
                drop(buf);
                comm.bootstrap().barrier().unwrap();
                if me == 0 {
                    let mut got = vec![0u8; bytes];
                    gpu.bind().unwrap();
                    // SAFETY: `peers` holds rank 1's allocation of `bytes` bytes (at least) at
                    // this address, reachable from this context (same GPU, or peer access).
                    unsafe { mscclpp_host::cudarc::driver::result::memcpy_dtoh_sync(&mut got, peers.addr(1)) }.unwrap();
                    assert_bytes(
                        "rank 1's buffer read through rank 0's import after rank 1 dropped it",
                        &got,
                        &data[1],
                    );
                }
                comm.bootstrap().barrier().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a rank failed");
    }
}
