//! GPU pattern phases: bulk copies, semaphores, port and memory channels and small collectives
//! between the ranks, each checked against data the host recomputes from the shared seed.

use mscclpp_host::comm::{Communicator, MemorySemaphores, PeerBuffers};
use mscclpp_host::{Args, DeviceBuffer, LaunchConfig};
use rand::RngExt;

use crate::{
    Ctx, POISON, PhaseResult, barrier, comm, counted, e2s, ints, rank_sum, rng_for, run, same, share_of_sms, shared,
    upload,
};

/// Exchanges `slots` (exportable, `world * bytes`) and memory semaphores with every rank, then
/// runs `kernel` (`mp_dispatch` or `mp_allgather`): block p bulk-stores `bytes` of `src` into slot
/// `rank` of rank p's `slots` through two stages of `tile` bytes, and signals and waits on rank p.
/// The caller keeps what it returns (the mappings and the semaphores) until the phase's last
/// barrier, so that nothing the peers map is freed while they may still run.
fn bulk_store_to_slots(
    c: &Ctx,
    cm: &Communicator,
    kernel: &str,
    src: &DeviceBuffer,
    slots: &DeviceBuffer,
    bytes: usize,
    tile: u32,
) -> Result<(PeerBuffers, MemorySemaphores), String> {
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu());
    let peers = cm.exchange(slots).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let slot_table = upload(g, peers.addrs())?;
    let sem_table = upload(g, &sems.table())?;
    barrier(c)?;
    run(
        g,
        kernel,
        LaunchConfig::new(n as u32, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(2, tile)),
        Args::new()
            .arg(src.ptr::<u8>())
            .arg(slot_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(bytes as u64)
            .arg(tile),
    )?;
    Ok((peers, sems))
}

/// Each rank bulk-stores a 1 MiB slice into slot `rank` of every peer's receive buffer and
/// signals; each receiver waits for every peer, then checks every peer's slot, and that its own
/// slot still holds the poison.
pub(crate) fn staged_dispatch(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = 1usize << 20;
    let send = upload(&g, &ints::<u8>(c.seed, me, 10, n * bytes))?;
    let recv = DeviceBuffer::exportable_filled(&g, n * bytes, POISON).map_err(e2s)?;
    let _mapped = bulk_store_to_slots(c, &cm, "mp_dispatch", &send, &recv, bytes, 32 * 1024)?;
    let got = recv.to_vec::<u8>().map_err(e2s)?;
    for p in (0..n).filter(|&p| p != me) {
        let theirs = ints::<u8>(c.seed, p, 10, n * bytes);
        same(&format!("slot from rank {p}"), &got[p * bytes..(p + 1) * bytes], &theirs[me * bytes..(me + 1) * bytes])?;
    }
    // Nobody sends to itself: a copy into a wrong slot (this rank's own, say) shows here.
    same("this rank's own slot (never written)", &got[me * bytes..(me + 1) * bytes], &vec![POISON; bytes])?;
    barrier(c)
}

/// Each rank bulk-loads every tile from every rank's input (peer-mapped), two stages deep,
/// sums in shared memory and writes the i32 sum; checked against the host's sum.
pub(crate) fn multi_source_combine(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, g) = (cm.world_size(), cm.gpu().clone());
    let elems = 2 << 20; // 8 MiB of i32
    let input = DeviceBuffer::exportable_from_slice(&g, &ints::<i32>(c.seed, cm.rank(), 11, elems)).map_err(e2s)?;
    let out = DeviceBuffer::filled(&g, elems * 4, POISON).map_err(e2s)?;
    let peers = cm.exchange(&input).map_err(e2s)?;
    let table = upload(&g, peers.addrs())?;
    barrier(c)?;
    let tile = if n <= 4 { 16 * 1024 } else { 8 * 1024 };
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(2, n as u32 * tile);
    run(
        &g,
        "mp_combine",
        LaunchConfig::new(share_of_sms(&cm)?, 256).shared(smem),
        Args::new().arg(table.addr()).arg(n as u32).arg(out.addr()).arg((elems * 4) as u64).arg(tile),
    )?;
    let want = rank_sum(c.seed, n, 11, elems);
    same("combined sum", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}

/// Every rank bulk-reduce-stores (u64 add) its input into rank 0's buffer at the same time;
/// rank 0 checks the exact sum.
pub(crate) fn push_combine(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 1 << 20; // 8 MiB of u64
    let shift = |v: Vec<u64>| v.into_iter().map(|x| x >> 8).collect::<Vec<u64>>();
    let acc = DeviceBuffer::exportable_from_slice(&g, &shift(ints::<u64>(c.seed, 0, 12, elems))).map_err(e2s)?;
    let src = upload(&g, &shift(ints::<u64>(c.seed, me, 13, elems)))?;
    let peers = cm.exchange(&acc).map_err(e2s)?;
    barrier(c)?;
    let tile = 16 * 1024u32;
    run(
        &g,
        "bulk_reduce_stream_u64",
        LaunchConfig::new(share_of_sms(&cm)?, 32).shared(mscclpp_device::bulk::pipeline_smem_bytes(3, tile)),
        Args::new().arg(peers.ptr::<u8>(0)).arg(src.ptr::<u8>()).arg((elems * 8) as u64).arg(tile).arg(1u32),
    )?;
    barrier(c)?;
    if me == 0 {
        let mut want = shift(ints::<u64>(c.seed, 0, 12, elems));
        for r in 0..n {
            for (w, x) in want.iter_mut().zip(shift(ints::<u64>(c.seed, r, 13, elems))) {
                *w = w.wrapping_add(x);
            }
        }
        same("sum at rank 0", &acc.to_vec::<u64>().map_err(e2s)?, &want)?;
    }
    barrier(c)
}

/// A barrier of signal/wait between every pair of ranks, 10,000 times (100 when ranks share a
/// GPU: their kernels then take turns on it), each round publishing data before and checking
/// it after; the kernel reports how many slots it checked.
pub(crate) fn all_pairs_barrier(c: &Ctx) -> PhaseResult {
    let t0 = std::time::Instant::now();
    let step = |what: &str| {
        if std::env::var("MSCCLPP_RS_VERBOSE").is_ok() {
            eprintln!("rank {}: all_pairs_barrier: {what} at {:?}", c.boot.rank(), t0.elapsed());
        }
    };
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let rounds: u32 = if c.boot.local_size() <= c.gpu_count { 10_000 } else { 100 };
    step("alloc");
    let slots = DeviceBuffer::exportable_filled(&g, n * 2 * 8, 0).map_err(e2s)?;
    step("exchange slots");
    let peers = cm.exchange(&slots).map_err(e2s)?;
    step("semaphores");
    let sems = cm.memory_semaphores().map_err(e2s)?;
    step("tables");
    let slot_table = upload(&g, peers.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
    step("barrier");
    barrier(c)?;
    step("launch");
    run(
        &g,
        "mp_barrier",
        LaunchConfig::new(1, 32.max(n as u32)),
        Args::new()
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(rounds)
            .arg(slot_table.addr())
            .arg(slots.addr())
            .arg(report.addr()),
    )?;
    // Every round, every peer's slot.
    counted(&format!("slots after {rounds} barriers"), &report, rounds as u64 * (n as u64 - 1))?;
    println!("rank {me}: all_pairs_barrier: {rounds} rounds");
    barrier(c)
}

/// Port-channel all-to-all with put_with_signal, 20 iterations of 64 KiB per peer, a flush
/// before every source rewrite; arrivals checked on the device, which reports how many words it
/// checked.
pub(crate) fn port_all_to_all(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let chunk_words = 16 * 1024u32;
    let iters = 20u32;
    let bytes = n * chunk_words as usize * 4;
    let src = DeviceBuffer::filled(&g, bytes, 0).map_err(e2s)?;
    let recv = DeviceBuffer::exportable_filled(&g, 2 * bytes, POISON).map_err(e2s)?;
    let ports = cm.port_channels(&src, &recv).map_err(e2s)?;
    let table = upload(&g, &ports.table())?;
    let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
    barrier(c)?;
    run(
        &g,
        "mp_port_alltoall",
        LaunchConfig::new(1, 256),
        Args::new()
            .arg(table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg(chunk_words)
            .arg(iters)
            .arg(src.addr())
            .arg(recv.addr())
            .arg(report.addr()),
    )?;
    ports.proxy().check().map_err(e2s)?;
    barrier(c)?;
    ports.stop().map_err(e2s)?;
    // Every iteration, every peer's chunk, every word.
    counted(
        &format!("words after {iters} all-to-all iterations"),
        &report,
        iters as u64 * (n as u64 - 1) * chunk_words as u64,
    )
}

/// `Communicator::memory_channels` between every pair of ranks, one pair at a time (the others
/// wait at a barrier): first a put + signal / wait ping-pong with a different message in every
/// round, checked on the device in every round (a read before the signal sees the previous
/// round's message) and on the host after the last, then, on the same channels, an LL16 packet
/// ping-pong that checks every message on the device.
pub(crate) fn memory_channels(c: &Ctx) -> PhaseResult {
    use mscclpp_device::packet::{LL16Packet, packet_bytes};
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = (8 << 10) + 8 * rng_for(c.seed, 0, 0, 17).random_range(0..128usize);
    // [0, bytes): what this rank sends; [bytes, 2 bytes): what the peer sent.
    let buf = DeviceBuffer::exportable_filled(&g, 2 * bytes, POISON).map_err(e2s)?;
    let chans = cm.memory_channels(&buf, packet_bytes::<LL16Packet>(bytes as u64) as usize).map_err(e2s)?;
    if chans.get(me).is_some() || chans.table().len() != n {
        return Err(format!("{n} ranks: a channel toward this rank, or a table of {}", chans.table().len()));
    }
    let pairs: Vec<(usize, usize)> = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
    let cfg = LaunchConfig::new(1, 256);
    let seed = c.seed as u32;
    let words = bytes / 4;
    barrier(c)?;
    let rounds = 20u32;
    for &(a, b) in &pairs {
        if me == a || me == b {
            let peer = a + b - me;
            let chan = chans.get(peer).ok_or(format!("no channel toward rank {peer}"))?;
            let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
            let first = u32::from(me == a);
            let args = Args::new().arg(chan).arg(bytes as u64).arg(rounds).arg(first).arg(seed).arg(report.addr());
            run(&g, "memchan_put_signal_rounds", cfg, args)?;
            counted(&format!("put + signal with rank {peer}, words"), &report, rounds as u64 * words as u64)?;
            // After the last round: this rank's last message, then the peer's (side 0 is rank a).
            let (mine, theirs) = if me == a { (0, 1) } else { (1, 0) };
            let message = |side| (0..words as u32).map(move |k| shared::message_word(seed, side, rounds, k));
            let want: Vec<u32> = message(mine).chain(message(theirs)).collect();
            same(
                &format!("buffer after the put + signal rounds with rank {peer}"),
                &buf.to_vec::<u32>().map_err(e2s)?,
                &want,
            )?;
            // The packet ping-pong below starts from the poison.
            buf.fill(POISON).map_err(e2s)?;
        }
        barrier(c)?;
    }
    for &(a, b) in &pairs {
        if me == a || me == b {
            let peer = a + b - me;
            let chan = chans.get(peer).ok_or(format!("no channel toward rank {peer}"))?;
            let report = DeviceBuffer::filled(&g, 16, 0).map_err(e2s)?;
            let first = u32::from(me == a);
            let args = Args::new().arg(chan).arg(rounds).arg(first).arg(bytes as u64).arg(seed).arg(report.addr());
            run(&g, "packet_pingpong_ll16", cfg, args)?;
            let checked = if first == 1 { rounds } else { rounds / 2 } as u64 * (bytes / 4) as u64;
            let got = report.to_vec::<u64>().map_err(e2s)?;
            if got != [0, checked] {
                return Err(format!(
                    "packets with rank {peer}: [mismatching words, words checked] = {got:?}, expected [0, {checked}]"
                ));
            }
        }
        barrier(c)?;
    }
    Ok(())
}

/// Every rank bulk-stores its 4 MiB into slot `rank` of every rank's gather buffer.
pub(crate) fn allgather(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let bytes = 4usize << 20;
    let src = upload(&g, &ints::<u8>(c.seed, me, 14, bytes))?;
    let dst = DeviceBuffer::exportable_filled(&g, n * bytes, POISON).map_err(e2s)?;
    let _mapped = bulk_store_to_slots(c, &cm, "mp_allgather", &src, &dst, bytes, 32 * 1024)?;
    let got = dst.to_vec::<u8>().map_err(e2s)?;
    for r in 0..n {
        same(&format!("slot of rank {r}"), &got[r * bytes..(r + 1) * bytes], &ints::<u8>(c.seed, r, 14, bytes))?;
    }
    barrier(c)
}

/// Small allreduce (64 KiB of i32): all-gather every input into every rank's slots, then a local
/// sum over the slots.
pub(crate) fn allreduce_small(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = 16 * 1024usize;
    let src = upload(&g, &ints::<i32>(c.seed, me, 15, elems))?;
    let slots = DeviceBuffer::exportable_filled(&g, n * elems * 4, POISON).map_err(e2s)?;
    let out = DeviceBuffer::filled(&g, elems * 4, POISON).map_err(e2s)?;
    let _mapped = bulk_store_to_slots(c, &cm, "mp_allgather", &src, &slots, elems * 4, 16 * 1024)?;
    run(
        &g,
        "mp_reduce_slots",
        LaunchConfig::new(64, 256),
        Args::new().arg(slots.addr()).arg(n as u32).arg(elems as u32).arg(out.addr()),
    )?;
    let want = rank_sum(c.seed, n, 15, elems);
    same("small allreduce", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}

/// Large allreduce (8 MiB of i32 per rank-chunk): every rank reduces its chunk from every rank's
/// input and bulk-stores the sum into every rank's output, then a signal/wait with every peer.
pub(crate) fn allreduce_large(c: &Ctx) -> PhaseResult {
    let cm = comm(c)?;
    let (n, me, g) = (cm.world_size(), cm.rank(), cm.gpu().clone());
    let elems = n * (2 << 20);
    let input = DeviceBuffer::exportable_from_slice(&g, &ints::<i32>(c.seed, me, 16, elems)).map_err(e2s)?;
    let out = DeviceBuffer::exportable_filled(&g, elems * 4, POISON).map_err(e2s)?;
    let ins = cm.exchange(&input).map_err(e2s)?;
    let outs = cm.exchange(&out).map_err(e2s)?;
    let sems = cm.memory_semaphores().map_err(e2s)?;
    let in_table = upload(&g, ins.addrs())?;
    let out_table = upload(&g, outs.addrs())?;
    let sem_table = upload(&g, &sems.table())?;
    let done = DeviceBuffer::filled(&g, 4, 0).map_err(e2s)?;
    barrier(c)?;
    let tile = 8 * 1024u32;
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(2, n as u32 * tile) + tile;
    run(
        &g,
        "mp_allreduce",
        LaunchConfig::new(share_of_sms(&cm)?, 256).shared(smem),
        Args::new()
            .arg(in_table.addr())
            .arg(out_table.addr())
            .arg(sem_table.addr())
            .arg(n as u32)
            .arg(me as u32)
            .arg((elems * 4) as u64)
            .arg(tile)
            .arg(done.addr()),
    )?;
    let want = rank_sum(c.seed, n, 16, elems);
    same("large allreduce", &out.to_vec::<i32>().map_err(e2s)?, &want)?;
    barrier(c)
}
