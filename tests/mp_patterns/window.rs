//! The window phase: symmetric memory windows (`Communicator::window`, `register_window` and
//! `register_window_slice`, the device handle `mscclpp_device::window::Window`); memory CUDA
//! IPC cannot map exactly (a plain buffer, a cudarc `CudaSlice`) accepted for ranks as threads,
//! refused by name between processes. Puts through `peer()` ordered by
//! signals and the team barrier, every byte checked on the host, over several launches (the
//! signal counts and the barrier epoch persist); LL packets (`put_packets`, `read_packets`);
//! then the one-shot allreduce written on a
//! window, bit for bit against the host's sum in rank order.

use mscclpp_device::poll::SpinBudget;
use mscclpp_device::vec::{Bf16x8, F32x4};
use mscclpp_device::window::Window as WindowHandle;
use mscclpp_host::bootstrap::BootstrapExt;
use mscclpp_host::comm::Communicator;
use mscclpp_host::{Args, DeviceBuffer, LaunchConfig};
use rand::RngExt;

use crate::switch::Sample;
use crate::{
    Ctx, POISON, PhaseResult, as_threads, barrier, comm, compare, counted, e2s, rng_for, run, same, share_of_sms,
    upload,
};

/// What rank `from` sends rank `to` in launch `round`: random bytes from a generator seeded by
/// both ranks and the round, so a chunk from the wrong rank, place or round is caught.
fn chunk_data(seed: u64, from: usize, to: usize, round: u64, chunk: usize) -> Vec<u8> {
    let mut v = vec![0u8; chunk];
    rng_for(seed, from, round as usize, 40 + to as u64).fill(&mut v[..]);
    v
}

/// Rank `rank`'s allreduce input of launch `round`.
fn floats(seed: u64, rank: usize, round: usize, n: usize) -> Vec<f32> {
    let mut rng = rng_for(seed, rank, round, 41);
    (0..n).map(|_| rng.random_range(-64.0f32..64.0)).collect()
}

/// `got` must be an error that says `says`.
fn expect_refusal(what: &str, got: Result<(), String>, says: &str) -> PhaseResult {
    match got {
        Err(e) if e.contains(says) => Ok(()),
        Err(e) => Err(format!("{what}: refused, but with \"{e}\" (expected it to say \"{says}\")")),
        Ok(()) => Err(format!("{what}: registered")),
    }
}

/// `Window::put`, `put_signal` and `get` at thread, warp and block scope, on a window of the node
/// team (`Communicator::team_window`): 2 launches each, chunks
/// of a random size at a random byte skew (so every copy has an unaligned head or tail), fresh
/// random data and a poisoned output every launch, every byte of the window and of the gets
/// checked on the host.
fn scoped(c: &Ctx, cm: &mscclpp_host::comm::Communicator) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let chunk = rng_for(c.seed, 0, 0, 44).random_range(1..6000usize);
    let skew = rng_for(c.seed, 0, 0, 45).random_range(0..16usize);
    let bytes = (n * chunk + skew).div_ceil(16) * 16;
    // Over the node team (every rank here: one machine), whose ranks are the world's.
    let team = cm.node_team().map_err(e2s)?;
    if (team.rank(), team.size(), team.world_rank(team.rank())) != (me, n, Some(me)) {
        return Err(format!("node team {team:?} for rank {me} of {n} on one machine"));
    }
    let win = cm.team_window(&team, bytes).map_err(e2s)?;
    let h = win.handle();
    if (h.rank as usize, h.size as usize) != (me, n) {
        return Err(format!("team window handle {h:?} for rank {me} of {n}"));
    }
    let buf = win.buffer().ok_or("Communicator::window gave no buffer")?;
    let out = DeviceBuffer::alloc(&g, n * chunk).map_err(e2s)?;
    for (code, name) in [(0u32, "thread"), (1, "warp"), (2, "block")] {
        for round in 1..=2u64 {
            let tag = 10 * round + code as u64;
            let src: Vec<u8> = (0..n).flat_map(|p| chunk_data(c.seed, me, p, tag, chunk)).collect();
            let src = upload(&g, &src)?;
            buf.fill(POISON).map_err(e2s)?;
            out.fill(POISON).map_err(e2s)?;
            barrier(c)?;
            let args = Args::new()
                .arg(win.handle())
                .arg(src.ptr::<u8>())
                .arg(out.ptr::<u8>())
                .arg(chunk as u64)
                .arg(skew as u64)
                .arg(code)
                .arg(round);
            run(&g, "win_scoped", LaunchConfig::new(1, 128), args)?;
            let what = format!("{name} scope, launch {round}, {chunk} B at skew {skew}");
            // This rank's window: the poison before the skew and after the last chunk, rank q's
            // data for this rank at `q * chunk + skew`.
            let mut want = vec![POISON; bytes];
            for q in 0..n {
                let at = q * chunk + skew;
                want[at..at + chunk].copy_from_slice(&chunk_data(c.seed, q, me, tag, chunk));
            }
            compare(
                &format!("{what}: this rank's window (put, put_signal)"),
                &buf.to_vec::<u8>().map_err(e2s)?,
                &want,
            )?;
            let next = (me + 1) % n;
            let want: Vec<u8> = (0..n).flat_map(|p| chunk_data(c.seed, next, p, tag, chunk)).collect();
            compare(&format!("{what}: gets from the peers' windows"), &out.to_vec::<u8>().map_err(e2s)?, &want)?;
            barrier(c)?;
        }
    }
    win.free().map_err(e2s)
}

/// `Window::put_packets` and `read_packets` at thread, warp and block scope: 3 launches each
/// (both halves, a new flag every launch, no signal or barrier in the kernel), a random chunk of
/// whole 8-byte payloads, fresh random data and a poisoned output every launch; the reads and
/// this rank's window (every packet: its payload beside the launch's flag, twice the bytes)
/// checked on the host.
fn packets(c: &Ctx, cm: &mscclpp_host::comm::Communicator) -> PhaseResult {
    use mscclpp_device::packet::{LL16Packet, packet_bytes};
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let chunk = 8 * rng_for(c.seed, 0, 0, 47).random_range(1..2000usize);
    let region = packet_bytes::<LL16Packet>(chunk as u64) as usize;
    let win = cm.window((2 * n * region).div_ceil(16) * 16).map_err(e2s)?;
    let buf = win.buffer().ok_or("Communicator::window gave no buffer")?;
    let out = DeviceBuffer::alloc(&g, n * chunk).map_err(e2s)?;
    for (code, name) in [(0u32, "thread"), (1, "warp"), (2, "block")] {
        for round in 1..=3u64 {
            // A flag of its own per launch of this window (the halves alternate by its parity).
            let flag = 3 * code as u64 + round;
            let tag = 100 + flag;
            let src: Vec<u8> = (0..n).flat_map(|p| chunk_data(c.seed, me, p, tag, chunk)).collect();
            let src = upload(&g, &src)?;
            out.fill(POISON).map_err(e2s)?;
            barrier(c)?;
            let args = Args::new()
                .arg(win.handle())
                .arg(src.ptr::<u8>())
                .arg(out.ptr::<u8>())
                .arg(chunk as u64)
                .arg(code)
                .arg(flag);
            run(&g, "win_packets", LaunchConfig::new(1, 128), args)?;
            let what = format!("{name} scope, launch {round}, {chunk} B as packets");
            let want: Vec<u8> = (0..n).flat_map(|q| chunk_data(c.seed, q, me, tag, chunk)).collect();
            compare(
                &format!("{what}: read_packets from this rank's window"),
                &out.to_vec::<u8>().map_err(e2s)?,
                &want,
            )?;
            // Region q of this launch's half: rank q's chunk for this rank, 8 bytes per packet.
            let window = buf.to_vec::<u8>().map_err(e2s)?;
            for q in 0..n {
                let at = ((flag as usize & 1) * n + q) * region;
                let data = chunk_data(c.seed, q, me, tag, chunk);
                let want: Vec<u8> = data
                    .chunks(8)
                    .flat_map(|w| {
                        let p = LL16Packet::new(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])), flag as u32);
                        bytemuck::bytes_of(&p).to_vec()
                    })
                    .collect();
                compare(&format!("{what}: rank {q}'s packets in this rank's window"), &window[at..at + region], &want)?;
            }
            barrier(c)?;
        }
    }
    win.free().map_err(e2s)
}

/// The README's fused kernel (`scaled_sum_window`): `(sum over ranks of alpha * x) + beta`, 2
/// launches, fresh data and a poisoned output each, bit for bit against the host's sum in rank
/// order of the same products.
fn fused(c: &Ctx, cm: &mscclpp_host::comm::Communicator) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 4 * rng_for(c.seed, 0, 0, 46).random_range(1..4096usize);
    let (alpha, beta) = (1.25f32, -0.5f32);
    let win = cm.window(n * elems * 4).map_err(e2s)?;
    let out = DeviceBuffer::alloc(&g, elems * 4).map_err(e2s)?;
    for round in 1..=2u64 {
        let x = upload(&g, &floats(c.seed, me, 10 + round as usize, elems))?;
        out.fill(POISON).map_err(e2s)?;
        barrier(c)?;
        let args = Args::new()
            .arg(win.handle())
            .arg(x.ptr::<f32>())
            .arg(out.ptr::<f32>())
            .arg(elems as u64)
            .arg(alpha)
            .arg(beta)
            .arg(round);
        run(&g, "scaled_sum_window", LaunchConfig::new(1, 256), args)?;
        let xs: Vec<Vec<f32>> = (0..n).map(|r| floats(c.seed, r, 10 + round as usize, elems)).collect();
        let want: Vec<u32> =
            (0..elems).map(|i| ((1..n).fold(alpha * xs[0][i], |a, r| a + alpha * xs[r][i]) + beta).to_bits()).collect();
        let got: Vec<u32> = out.to_vec::<f32>().map_err(e2s)?.into_iter().map(f32::to_bits).collect();
        same(&format!("launch {round}: the README's fused window kernel, {elems} f32 (bits)"), &got, &want)?;
        barrier(c)?;
    }
    win.free().map_err(e2s)
}

/// `rounds` launches of `win_put` on `win` (whose memory on this rank is `local`): every rank
/// puts a chunk of `chunk` bytes into every rank's window, signals, waits, and reads from every
/// window; fresh random data (seeded by `tag` and the launch), this rank's window and the output
/// poisoned before every launch, both checked on the host after it.
fn put_rounds(
    c: &Ctx,
    cm: &Communicator,
    win: &mscclpp_host::window::Window,
    local: &DeviceBuffer,
    chunk: usize,
    rounds: u64,
    tag: u64,
) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let out = DeviceBuffer::alloc(&g, n * chunk).map_err(e2s)?;
    for round in 1..=rounds {
        let data = tag + round;
        let src: Vec<u8> = (0..n).flat_map(|p| chunk_data(c.seed, me, p, data, chunk)).collect();
        let src = upload(&g, &src)?;
        out.fill(POISON).map_err(e2s)?;
        local.fill(POISON).map_err(e2s)?;
        barrier(c)?;
        let args = Args::new().arg(win.handle()).arg(src.ptr::<u8>()).arg(out.ptr::<u8>()).arg(chunk as u64).arg(round);
        run(&g, "win_put", LaunchConfig::new(1, 256), args)?;
        // Slot q of this rank's window: what rank q sent this rank.
        let want: Vec<u8> = (0..n).flat_map(|q| chunk_data(c.seed, q, me, data, chunk)).collect();
        compare(&format!("launch {round}: this rank's window"), &local.to_vec::<u8>().map_err(e2s)?, &want)?;
        // Chunk p of `out`: slot `me + 1` of rank p's window, what rank `me + 1` sent rank p.
        let next = (me + 1) % n;
        let want: Vec<u8> = (0..n).flat_map(|p| chunk_data(c.seed, next, p, data, chunk)).collect();
        compare(&format!("launch {round}: read from the peers' windows"), &out.to_vec::<u8>().map_err(e2s)?, &want)?;
        // No rank writes into a window again before every rank has read its own.
        barrier(c)?;
    }
    Ok(())
}

/// Windows over memory CUDA IPC cannot map exactly: a plain `cuMemAlloc` buffer
/// (`DeviceBuffer::alloc`) on rank 0, then a cudarc `CudaSlice` (stream-ordered pool memory) on
/// every rank (`register_window_slice`). Ranks that are threads of one process get a window (the
/// slice's only on one GPU: another GPU does not reach pool memory) and move data through it
/// with `win_put`; ranks in several processes are refused on every rank, naming rank 0.
fn unexportable(c: &Ctx, cm: &Communicator) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let one_process = n == 1 || as_threads(c);
    let ordinals = c.boot.all_gather_pod(&(g.ordinal() as u32)).map_err(e2s)?;
    let one_gpu = ordinals.windows(2).all(|w| w[0] == w[1]);
    let chunk = 16 * rng_for(c.seed, 0, 0, 51).random_range(1..512usize);
    let plain =
        if me == 0 { DeviceBuffer::alloc(&g, n * chunk) } else { DeviceBuffer::alloc_exportable(&g, n * chunk) };
    let plain = plain.map_err(e2s)?;
    let got = cm.register_window(&plain);
    if one_process {
        let win = got.map_err(|e| format!("a plain buffer, ranks as threads: {e}"))?;
        put_rounds(c, cm, &win, &plain, chunk, 2, 200)?;
        win.free().map_err(e2s)?;
    } else {
        let got = got.map(|_| ()).map_err(e2s);
        expect_refusal("a buffer that is not exportable", got, "rank 0 has memory CUDA IPC cannot map exactly")?;
    }
    barrier(c)?;
    let slice = g.stream().alloc_zeros::<u8>(n * chunk).map_err(|e| e.to_string())?;
    let got = cm.register_window_slice(slice);
    if one_process && one_gpu {
        let win = got.map_err(|e| format!("a CudaSlice, ranks as threads on one GPU: {e}"))?;
        let view = win.buffer().ok_or("a window over a CudaSlice gave no buffer")?;
        if win.cuda_slice::<u8>().map(|s| s.len()) != Some(n * chunk) {
            return Err("a window over a CudaSlice does not give its slice back".into());
        }
        put_rounds(c, cm, &win, view, chunk, 2, 300)?;
        win.free().map_err(e2s)?;
    } else {
        let says = if one_process {
            "rank 0 has memory that ranks on other GPUs of this process cannot reach"
        } else {
            "rank 0 has memory CUDA IPC cannot map exactly"
        };
        expect_refusal("a CudaSlice", got.map(|_| ()).map_err(e2s), says)?;
    }
    barrier(c)
}

pub(crate) fn window(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let cfg = LaunchConfig::new(1, 256);

    // Refusals, on every rank, naming the odd one (none of them may leave a rank waiting).
    if n > 1 {
        let last = n - 1;
        let odd = cm.window(if me == last { 32 } else { 16 }).map(|_| ()).map_err(e2s);
        expect_refusal("a window of another size", odd, &format!("rank {last} has 32 bytes"))?;
    }
    unexportable(c, &cm)?;

    // Puts, signals and barriers, 3 launches.
    let chunk = 16 * rng_for(c.seed, 0, 0, 42).random_range(256..4096usize);
    let win = cm.window(n * chunk).map_err(e2s)?;
    let h = win.handle();
    if (h.rank as usize, h.size as usize, h.bytes) != (me, n, (n * chunk) as u64) {
        return Err(format!("handle {h:?} for rank {me} of {n}, {} bytes", n * chunk));
    }
    let buf = win.buffer().ok_or("Communicator::window gave no buffer")?;
    let rounds = 3u64;
    put_rounds(c, &cm, &win, buf, chunk, rounds, 0)?;
    // The signal area after the launches: one signal per launch from every peer, two barriers
    // per launch (every peer's barrier word and this rank's epoch).
    let words = win.signals().to_vec::<u64>().map_err(e2s)?;
    let size = n as u32;
    for p in (0..size).filter(|&p| p as usize != me) {
        let got =
            [words[WindowHandle::signal_word(size, 0, p) as usize], words[WindowHandle::barrier_word(p) as usize]];
        same(&format!("signal and barrier words from rank {p}"), &got, &[rounds, 2 * rounds])?;
    }
    let epoch = words[WindowHandle::epoch_word(size, h.slots) as usize];
    same("this rank's barrier epoch", &[epoch], &[2 * rounds])?;
    win.free().map_err(e2s)?;

    scoped(c, &cm)?;
    packets(c, &cm)?;
    fused(c, &cm)?;

    // The one-shot allreduce on a window over this rank's own buffer, 2 launches.
    let elems = 4 * rng_for(c.seed, 0, 0, 43).random_range(4096..16384usize);
    let data = DeviceBuffer::alloc_exportable(&g, elems * 4).map_err(e2s)?;
    let win = cm.register_window(&data).map_err(e2s)?;
    let out = DeviceBuffer::alloc(&g, elems * 4).map_err(e2s)?;
    for round in 1..=2 {
        let input = upload(&g, &floats(c.seed, me, round, elems))?;
        out.fill(POISON).map_err(e2s)?;
        barrier(c)?;
        let args = Args::new().arg(win.handle()).arg(input.ptr::<f32>()).arg(out.ptr::<f32>()).arg(elems as u64);
        run(&g, "win_allreduce_f32", cfg, args)?;
        let inputs: Vec<Vec<f32>> = (0..n).map(|r| floats(c.seed, r, round, elems)).collect();
        let want: Vec<u32> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a + inputs[r][i]).to_bits()).collect();
        let got: Vec<u32> = out.to_vec::<f32>().map_err(e2s)?.into_iter().map(f32::to_bits).collect();
        same(&format!("launch {round}: window allreduce of {elems} f32 (bits)"), &got, &want)?;
        same(&format!("launch {round}: this rank's window"), &data.to_vec::<f32>().map_err(e2s)?, &inputs[me])?;
    }
    if me == 0 {
        println!("rank 0: window: {rounds} put launches of {chunk} B per pair, allreduce of {elems} f32");
    }
    win.free().map_err(e2s)
}

/// The bytes around a switch group's range: before it, the range, after it.
struct Margins {
    lo: usize,
    group: usize,
    hi: usize,
}

/// One launch of a window switch-group allreduce kernel of `V` (`kernel`, `blocks` blocks, block
/// b on slot b) over the range `m.lo..m.lo + m.group` of `win`: fresh random inputs in the range
/// and poison around it on every rank, then every rank's range must hold the sum over the ranks in
/// rank order bit for bit (f16/bf16 rounded after every add, as the device adds) and the margins
/// their poison.
fn switch_allreduce_launch<V: Sample>(
    c: &Ctx,
    cm: &Communicator,
    win: &mscclpp_host::window::Window,
    m: &Margins,
    blocks: u32,
    kernel: &str,
    launch: u64,
) -> PhaseResult {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let buf = win.buffer().ok_or("Communicator::window gave no buffer")?;
    let elems = m.group / std::mem::size_of::<V>();
    let seed = c.seed.wrapping_add(launch.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut init = vec![POISON; m.lo + m.group + m.hi];
    init[m.lo..m.lo + m.group].copy_from_slice(bytemuck::cast_slice(&V::sample(seed, me, elems)));
    buf.write(0, &init).map_err(e2s)?;
    barrier(c)?;
    let args = Args::new().arg(win.handle()).arg(m.lo as u64).arg(m.group as u64).arg(SpinBudget::from_millis(20_000));
    run(&g, kernel, LaunchConfig::new(blocks, 256), args)?;
    let what = format!("{kernel}, launch {launch}, {blocks} blocks, {elems} elements at byte {}", m.lo);
    let got = buf.to_vec::<u8>().map_err(e2s)?;
    compare(&format!("{what}: the bytes before the range"), &got[..m.lo], &init[..m.lo])?;
    compare(&format!("{what}: the bytes after the range"), &got[m.lo + m.group..], &init[m.lo + m.group..])?;
    let inputs: Vec<Vec<V>> = (0..n).map(|r| V::sample(seed, r, elems)).collect();
    let sum: Vec<V> = (0..elems).map(|i| (1..n).fold(inputs[0][i], |a, r| a.add(inputs[r][i]))).collect();
    let mut range = vec![V::zeroed(); elems];
    bytemuck::cast_slice_mut::<V, u8>(&mut range).copy_from_slice(&got[m.lo..m.lo + m.group]);
    same(&format!("{what}: the sums (bits)"), &range, &sum)?;
    // No rank writes its window again before every rank has read its own.
    barrier(c)
}

/// The signal words of `slots` slots from every rank in this rank's signal area are `want`, those
/// of the other slots and the barrier words 0.
fn slot_words(win: &mscclpp_host::window::Window, slots: u32, want: u64) -> PhaseResult {
    let h = win.handle();
    let words = win.signals().to_vec::<u64>().map_err(e2s)?;
    for p in 0..h.size {
        let got: Vec<u64> = (0..h.slots).map(|s| words[WindowHandle::signal_word(h.size, s, p) as usize]).collect();
        let expect: Vec<u64> = (0..h.slots).map(|s| if s < slots { want } else { 0 }).collect();
        same(&format!("the signal words of every slot from rank {p}"), &got, &expect)?;
        same(&format!("the barrier word from rank {p}"), &[words[WindowHandle::barrier_word(p) as usize]], &[0])?;
    }
    Ok(())
}

/// A window's switch group (`Window::switch_group`, `WindowSwitch`): the switch channels'
/// allreduce (`allreduce_in_place` in `ptx-tests/src/switch.rs`, the code `switch_allreduce`
/// runs on the emulated channel) over a range of a window at a random 16-byte offset with
/// poisoned margins, f32 and bf16, 2 launches each, several blocks each on its own signal slot;
/// then the switch barrier rounds with data (as `switch_barrier`) and relaxed rounds on a
/// window, and the slots' signal words (one add per round from every rank, itself included).
pub(crate) fn window_switch(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me) = (cm.world_size(), cm.rank());
    // Blocks wait for the other ranks' blocks: at most any rank's share of the SMs (the same
    // number on every rank), one slot each.
    let mine = share_of_sms(&cm)?.clamp(1, 4).min(WindowHandle::DEFAULT_SLOTS);
    let blocks = c.boot.all_gather_pod(&mine).map_err(e2s)?.into_iter().min().unwrap_or(1);
    let m = Margins {
        lo: 16 * rng_for(c.seed, 0, 0, 47).random_range(1..64usize),
        // (16-byte elements: F32x4 and Bf16x8)
        group: 16 * rng_for(c.seed, 0, 0, 48).random_range(256..65536usize),
        hi: 16 * rng_for(c.seed, 0, 0, 49).random_range(1..64usize),
    };
    let win = cm.window(m.lo + m.group + m.hi).map_err(e2s)?;
    let mut launches = 0;
    for launch in 1..=2u64 {
        switch_allreduce_launch::<F32x4>(c, &cm, &win, &m, blocks, "win_switch_allreduce_f32x4", launch)?;
        switch_allreduce_launch::<Bf16x8>(c, &cm, &win, &m, blocks, "win_switch_allreduce_bf16x8", launch)?;
        launches += 2;
    }
    // Two barrier rounds per launch (opening and closing), one signal each to every rank.
    slot_words(&win, blocks, 2 * launches)?;
    win.free().map_err(e2s)?;

    // Barrier rounds: element `(b * n + p) * 2 + round % 2` (u32) of the range is rank p's in
    // block b, from a random 16-byte offset.
    let rounds: u32 = if c.boot.local_size() <= c.gpu_count || as_threads(c) { 2_000 } else { 100 };
    let lo = 16 * rng_for(c.seed, 0, 0, 50).random_range(0..64usize);
    let win = cm.window((lo + blocks as usize * n * 2 * 4).next_multiple_of(16)).map_err(e2s)?;
    let g = cm.gpu().clone();
    let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
    for relaxed in [0u32, 1] {
        barrier(c)?;
        let args = Args::new()
            .arg(win.handle())
            .arg(lo as u64)
            .arg(rounds)
            .arg(relaxed)
            .arg(report.addr())
            .arg(SpinBudget::from_millis(20_000));
        run(&g, "win_switch_barrier_rounds", LaunchConfig::new(blocks, 64), args)?;
    }
    // Every block, every round, every rank's element, checked after the barrier.
    counted(
        &format!("elements after {rounds} window switch barriers"),
        &report,
        (blocks as usize * n) as u64 * rounds as u64,
    )?;
    slot_words(&win, blocks, 2 * rounds as u64)?;
    barrier(c)?;
    if me == 0 {
        println!(
            "rank 0: window_switch: {launches} allreduce launches of {} B at byte {} ({blocks} blocks), {rounds} + {rounds} barrier rounds",
            m.group, m.lo
        );
    }
    win.free().map_err(e2s)
}
