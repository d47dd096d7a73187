//! The bootstrap phases (CPU only) and the rank-to-GPU mapping.

use mscclpp_host::bootstrap::BootstrapExt;

use crate::{Ctx, PhaseResult, compare, e2s, random_data};

/// Random contributions of random lengths (empty ones included), then one of several MiB from
/// every rank at once; each rank checks every other rank's contribution.
pub(crate) fn all_gather_random(c: &Ctx) -> PhaseResult {
    let me = c.boot.rank();
    for round in 0..10 {
        let max_len = if round == 9 { 4 << 20 } else { 64 << 10 };
        let mine = random_data(c.seed, me, round, 1, max_len);
        let all = c.boot.all_gather(&mine).map_err(e2s)?;
        if all.len() != c.boot.world_size() {
            return Err(format!("round {round}: {} contributions for {} ranks", all.len(), c.boot.world_size()));
        }
        for (r, got) in all.iter().enumerate() {
            compare(
                &format!("round {round}, rank {r}'s contribution"),
                got,
                &random_data(c.seed, r, round, 1, max_len),
            )?;
        }
    }
    Ok(())
}

pub(crate) fn barrier_x100(c: &Ctx) -> PhaseResult {
    for _ in 0..100 {
        c.boot.barrier().map_err(e2s)?;
    }
    Ok(())
}

/// Every rank sends several messages to both neighbours on the ring, then receives them: from
/// the left neighbour first on even ranks, from the right one first on odd ranks, so messages
/// from one peer wait in the queue while the other's are taken. With 1 or 2 ranks both
/// neighbours are the same rank (or this rank), and its messages arrive interleaved.
pub(crate) fn ring_send_recv(c: &Ctx) -> PhaseResult {
    const MESSAGES: usize = 8;
    let n = c.boot.world_size();
    let right = |r: usize| (r + 1) % n;
    let left = |r: usize| (r + n - 1) % n;
    let me = c.boot.rank();
    for k in 0..MESSAGES {
        c.boot.send(right(me), &random_data(c.seed, me, k, 2, 32 << 10)).map_err(e2s)?;
        c.boot.send(left(me), &random_data(c.seed, me, k, 3, 32 << 10)).map_err(e2s)?;
    }
    let mut peers = vec![left(me), right(me)];
    peers.dedup();
    if me % 2 == 1 {
        peers.reverse();
    }
    for peer in peers {
        // What `peer` sent to this rank, in its order: tag 2 to its right, tag 3 to its left.
        let mut expected = Vec::new();
        for k in 0..MESSAGES {
            for (to, tag) in [(right(peer), 2), (left(peer), 3)] {
                if to == me {
                    expected.push((k, tag));
                }
            }
        }
        for (i, (k, tag)) in expected.into_iter().enumerate() {
            let got = c.boot.recv(peer).map_err(e2s)?;
            let want = random_data(c.seed, peer, k, tag, 32 << 10);
            compare(&format!("message {i} from rank {peer}"), &got, &want)?;
        }
    }
    c.boot.barrier().map_err(e2s)
}

/// Opens this rank's GPU and checks the rank-to-GPU mapping: ranks on one machine use distinct
/// GPUs while there are enough of them.
pub(crate) fn gpu_mapping(c: &Ctx) -> PhaseResult {
    let ordinal = c.gpu.ok_or("no GPU assigned")?;
    let gpu = mscclpp_host::Gpu::open(ordinal).map_err(e2s)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host_id =
        host.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let me = [host_id, c.boot.local_rank() as u64, gpu.ordinal() as u64, c.gpu_count as u64];
    let all = c.boot.all_gather_pod(&me).map_err(e2s)?;
    for (a, x) in all.iter().enumerate() {
        for (b, y) in all.iter().enumerate().skip(a + 1) {
            let enough = c.boot.local_size() <= x[3] as usize;
            if x[0] == y[0] && x[2] == y[2] && enough {
                return Err(format!("ranks {a} and {b} share GPU {} on one machine with {} GPUs", x[2], x[3]));
            }
        }
    }
    Ok(())
}
