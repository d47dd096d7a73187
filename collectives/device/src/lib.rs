//! Collectives among the ranks of one machine (NVLink peer memory): allreduce (sum), allgather
//! and reduce-scatter, callable from inside a kernel, so an elementwise step before or after
//! can be fused into the same launch.
//!
//! Every rank owns a scratch buffer that the others have mapped (the host's
//! `mscclpp_collectives::Collectives` builds it and hands kernels a [`Collective`] handle). Data
//! always moves by *pushing*: a rank writes into its peers' scratch with plain NVLink stores and
//! reads only its own memory, so the users' input and output buffers never need to be shared.
//!
//! Four building blocks, chosen by size (the host picks; device code may call any of them):
//!
//! ```text
//!  one-shot LL   every rank writes its whole input as LL16 packets into every peer's scratch,
//!                then reads the peers' packets from its own scratch and sums (rank order).
//!                One hop, no separate signal; twice the bytes on the wire.
//!  two-shot LL   shard p of the input goes, as packets, to rank p; rank p sums its shard and
//!                sends the sum, as packets, to everyone. Two hops; (N-1)/N of the one-shot
//!                traffic per hop: pays when N > 2.
//!  pipelined     every block streams a part of every shard through two slots of its own in each
//!                peer's scratch, with a 64-bit flag per (block, peer, phase):
//!                  round k:  A(k)  push input piece k of shard p to rank p, flag RS(k)
//!                            F(k-1) wait AG(k-1) from every peer, copy its reduced piece out
//!                            wait RS(k) from every peer
//!                            D(k)  sum piece k of my shard, write it, push it to every peer,
//!                                  flag AG(k)
//!                Two slots suffice: A(k) reuses the slot of round k-2, which the peer finished
//!                reading before it sent AG(k-2) (waited for in F(k-2)); D(k) reuses the AG slot
//!                of round k-2, which the peer copied out (F(k-2)) before its A(k) (waited for).
//!  direct        every block streams its part of the whole buffer to every peer through two
//!                acknowledged slots and sums locally: one hop, (N-1) * bytes out per rank.
//!                For two ranks that is the same traffic as two-shot with one hop and no copy.
//! ```
//!
//! Allgather and reduce-scatter use the one-shot LL block for small sizes and, above, a
//! pipelined block in which the receiver acknowledges every consumed slot (the direct allreduce
//! shares it): a sender reuses a slot only after the acknowledgement of the round that last
//! filled it, and at the start of an operation only after the receiver acknowledged the whole
//! previous operation of this family (or has already started this one).
//!
//! **Per-operation state lives on the GPU**: an operation counter (the *epoch*) per block in this
//! rank's state buffer. Every call starts with each block reading its own counter and ends with
//! each block advancing it; block 0 also advances the counters of the blocks the grid does not
//! have, so all counters stay equal and every block of every rank tags operation `e` alike. No
//! block waits for another to start, and launches need no new host-side values (CUDA-graph
//! capturable). LL packets carry the low 32 bits of the epoch (never 0) and alternate between
//! two halves of the packet region by its parity: a rank writes operation `e + 2`'s packets into
//! a half only after it received the peers' packets of `e + 1`, which they send only after they
//! finished operation `e` (the previous kernel completed, or, inside one kernel, the grid barrier
//! the rules below ask for). Pipelined flags carry `epoch << 24 | round`.
//!
//! **Rules for device callers** (each function's `# Safety` repeats them): every block of a 1-D,
//! co-resident grid (at most one block per SM is always safe) calls the same functions with the
//! same arguments on every rank, in the same order; grids may differ between calls but not
//! between ranks; at most `max_blocks` blocks; inputs, outputs and sizes as documented. Two
//! collective calls in one kernel are separated by a grid barrier (e.g.
//! [`DeviceSyncer`](mscclpp_device::sync::DeviceSyncer)): every block of this rank has finished the first
//! before any block starts the second. Between kernels the stream order does this.
//!
//! Sums are computed in rank order (`x0 + x1 + ... + xN-1`, each addition rounded), so every
//! rank gets the same bits, and so does a host reference that adds in the same order.
//!
//! This crate is the device code of `mscclpp-collectives`, shared by its host crate (which
//! builds the handle and sizes the scratch with the same layout functions) and its kernel crate;
//! a kernel of your own depends on it to call the collectives inside a launch.
#![cfg_attr(not(test), no_std)]

/// The smallest piece a pipelined round moves when `min_rounds` asks for more rounds.
pub const MIN_PIECE_BYTES: u64 = 8 << 10;

/// Round numbers take the low 24 bits of a pipelined flag; the epoch the bits above.
pub const ROUND_BITS: u32 = 24;

/// Bytes of one LL16 packet, which carries 8 bytes of data.
pub const LL_PACKET_BYTES: u64 = 16;

/// The device handle of a collective communicator (one per rank), built by the host and passed
/// to kernels by value (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Collective {
    /// This rank's scratch buffer ([`Collective::scratch_bytes`] bytes, zeroed at creation).
    pub scratch: mscclpp_device::ptr::GlobalPtr<u8>,
    /// `n_ranks` addresses: rank q's scratch as mapped on this GPU (this rank's own entry is
    /// `scratch`).
    pub peers: mscclpp_device::ptr::GlobalPtr<u64>,
    /// This rank's state: one u64 epoch per block (`max_blocks` of them, all 1 at creation and
    /// equal between operations).
    pub state: mscclpp_device::ptr::GlobalPtr<u64>,
    /// Bytes of one LL slot (one sender's packets in one half of one region); a multiple of 16.
    pub ll_bytes: u64,
    /// Bytes of one pipelined slot; a multiple of 16.
    pub chunk_bytes: u64,
    /// This rank.
    pub rank: u32,
    /// Number of ranks (at least 1).
    pub n_ranks: u32,
    /// Most blocks a call may use (the flags and slots exist for this many).
    pub max_blocks: u32,
    /// The pipelined forms cut each block's part into at least this many rounds (smaller
    /// pieces than a slot, so that sending, summing and copying out overlap), as long as a
    /// piece stays at least [`MIN_PIECE_BYTES`].
    pub min_rounds: u32,
}
static_assertions::assert_eq_size!(Collective, [u64; 7]);
// SAFETY: repr(C) of pointers and integers, no implicit padding (asserted by size), Pod.
unsafe impl mscclpp_device::abi::DeviceAbi for Collective {}

/// Where the regions of the scratch buffer start (the same on every rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Flags of the pipelined allreduce: `[block][sender][phase]` u64.
    pub flags_allreduce: u64,
    /// Flags of the pipelined allgather / reduce-scatter: `[block][sender][data, ack]` u64.
    pub flags_gather: u64,
    /// LL packets: `[half][region A, B][sender]` slots of `ll_bytes`.
    pub ll: u64,
    /// Pipelined allreduce slots: `[block][sender][phase RS, AG][slot]` of `chunk_bytes`.
    pub data_allreduce: u64,
    /// Pipelined allgather / reduce-scatter slots: `[block][sender][slot]` of `chunk_bytes`.
    pub data_gather: u64,
    /// Total bytes.
    pub total: u64,
}

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl Collective {
    /// The scratch layout for these parameters.
    pub const fn layout(&self) -> Layout {
        let (n, b) = (self.n_ranks as u64, self.max_blocks as u64);
        let flags = b * n * 2 * 8;
        let flags_allreduce = 0;
        let flags_gather = flags;
        let ll = round_up(2 * flags, 256);
        let data_allreduce = ll + 2 * 2 * n * self.ll_bytes;
        let data_gather = data_allreduce + b * n * 4 * self.chunk_bytes;
        let total = data_gather + b * n * 2 * self.chunk_bytes;
        Layout { flags_allreduce, flags_gather, ll, data_allreduce, data_gather, total }
    }
    /// Bytes of scratch every rank needs.
    pub const fn scratch_bytes(&self) -> u64 {
        self.layout().total
    }
    /// Bytes of the state buffer.
    pub const fn state_bytes(&self) -> u64 {
        8 * self.max_blocks as u64
    }
    /// Bytes of one pipelined round's piece for a block part of `part` bytes: a slot, or less so
    /// that the part takes `min_rounds` rounds, but not below [`MIN_PIECE_BYTES`]; a multiple of
    /// 16.
    pub const fn piece_bytes(&self, part: u64) -> u64 {
        let rounds = if self.min_rounds == 0 { 1 } else { self.min_rounds as u64 };
        let want = part.div_ceil(rounds).div_ceil(16) * 16;
        let floor = if MIN_PIECE_BYTES < self.chunk_bytes { MIN_PIECE_BYTES } else { self.chunk_bytes };
        let p = if want > floor { want } else { floor };
        if p < self.chunk_bytes { p } else { self.chunk_bytes }
    }
    /// Largest message (bytes per rank) the one-shot LL path carries.
    pub const fn ll_one_shot_capacity(&self) -> u64 {
        self.ll_bytes / LL_PACKET_BYTES * 8
    }
    /// Largest message the two-shot LL path carries (every shard must fit a slot).
    pub const fn ll_two_shot_capacity(&self) -> u64 {
        // Shards are whole 8-byte words, at most ceil(words / n) each.
        self.ll_bytes / LL_PACKET_BYTES * self.n_ranks as u64 * 8
    }
    /// Byte offset of LL slot (`half`, `region`, `sender`).
    pub const fn ll_offset(&self, half: u64, region: u64, sender: u32) -> u64 {
        self.layout().ll + ((half * 2 + region) * self.n_ranks as u64 + sender as u64) * self.ll_bytes
    }
    /// Byte offset of an allreduce flag.
    pub const fn flag_allreduce_offset(&self, block: u32, sender: u32, phase: u64) -> u64 {
        self.layout().flags_allreduce + ((block as u64 * self.n_ranks as u64 + sender as u64) * 2 + phase) * 8
    }
    /// Byte offset of an allgather / reduce-scatter flag (phase 0: data, 1: ack).
    pub const fn flag_gather_offset(&self, block: u32, sender: u32, phase: u64) -> u64 {
        self.layout().flags_gather + ((block as u64 * self.n_ranks as u64 + sender as u64) * 2 + phase) * 8
    }
    /// Byte offset of an allreduce slot.
    pub const fn data_allreduce_offset(&self, block: u32, sender: u32, phase: u64, slot: u64) -> u64 {
        self.layout().data_allreduce
            + (((block as u64 * self.n_ranks as u64 + sender as u64) * 2 + phase) * 2 + slot) * self.chunk_bytes
    }
    /// Byte offset of an allgather / reduce-scatter slot.
    pub const fn data_gather_offset(&self, block: u32, sender: u32, slot: u64) -> u64 {
        self.layout().data_gather + ((block as u64 * self.n_ranks as u64 + sender as u64) * 2 + slot) * self.chunk_bytes
    }
}

/// The LL flag of epoch `e`: its low 32 bits, never 0 (0 marks an empty packet).
pub const fn ll_flag(e: u64) -> u32 {
    let f = e as u32;
    if f == 0 { 1 } else { f }
}

/// The pipelined flag of round `k` of epoch `e` (a round's flag is `k + 1`, so 0 means "none").
pub const fn round_flag(e: u64, k: u64) -> u64 {
    (e << ROUND_BITS) | k
}

/// The acknowledgement that every slot of epoch `e` has been consumed.
pub const fn done_flag(e: u64) -> u64 {
    (e << ROUND_BITS) | ((1 << ROUND_BITS) - 1)
}

/// Whether a sender at round `k < 2` of epoch `e` may reuse its slots toward a peer, given the
/// peer's acknowledgement word `ack` and the peer's data flag `data` toward this rank (the same
/// block). The streamed operations are symmetric (every pair exchanges the same rounds in both
/// directions), so `data` names the last operation whose pieces this block exchanged with the
/// peer: none (free), this one (the peer is in it, so it finished the last: free), or an older
/// one, whose pieces from this rank the peer must have acknowledged in full. A done flag of any
/// older epoch is not enough: a sender that finished an operation without waiting for the acks
/// of its last rounds would overwrite pieces a slower peer has not read yet.
pub const fn slots_free_at_start(ack: u64, data: u64, e: u64) -> bool {
    let last = data >> ROUND_BITS;
    data == 0 || last >= e || ack >= done_flag(last)
}

/// `[start, end)` of part `i` when `len` items are split into `parts` nearly equal parts.
pub const fn split(len: u64, parts: u64, i: u64) -> (u64, u64) {
    (len * i / parts, len * (i + 1) / parts)
}

/// Which building block carries an operation (see the module documentation).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Every rank sends everything as LL packets to every peer; one hop.
    OneShotLl = 0,
    /// Reduce-scatter then allgather, both as LL packets (allreduce only).
    TwoShotLl = 1,
    /// Reduce-scatter then allgather: every block streams its part of every shard through two
    /// slots per peer with 64-bit flags.
    Pipelined = 2,
    /// Every rank streams its whole buffer to every peer through acknowledged slots and sums
    /// locally (allreduce only): one hop, `(N - 1) * bytes` out per rank, nothing copied out.
    Direct = 3,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 4] =
        [Algorithm::OneShotLl, Algorithm::TwoShotLl, Algorithm::Pipelined, Algorithm::Direct];
    /// A short name (`"oneshot"`, `"twoshot"`, `"pipelined"`, `"direct"`), as in the kernels'
    /// names.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::OneShotLl => "oneshot",
            Algorithm::TwoShotLl => "twoshot",
            Algorithm::Pipelined => "pipelined",
            Algorithm::Direct => "direct",
        }
    }
}

pub use mscclpp_device::element::Element;

pub mod window;

#[cfg(target_arch = "nvptx64")]
mod device;

#[cfg(test)]
mod tests {
    use super::*;
    use mscclpp_device::ptr::GlobalPtr;

    fn handle(n: u32, blocks: u32) -> Collective {
        Collective {
            scratch: GlobalPtr::null(),
            peers: GlobalPtr::null(),
            state: GlobalPtr::null(),
            ll_bytes: 1 << 20,
            chunk_bytes: 64 << 10,
            rank: 0,
            n_ranks: n,
            max_blocks: blocks,
            min_rounds: 4,
        }
    }

    #[test]
    fn regions_do_not_overlap_and_stay_aligned() {
        for n in 1..=8 {
            for blocks in [1, 7, 132] {
                let h = handle(n, blocks);
                let l = h.layout();
                let last_flag = h.flag_gather_offset(blocks - 1, n - 1, 1) + 8;
                assert!(h.flag_allreduce_offset(blocks - 1, n - 1, 1) + 8 <= l.flags_gather);
                assert!(last_flag <= l.ll);
                assert!(h.ll_offset(1, 1, n - 1) + h.ll_bytes <= l.data_allreduce);
                assert!(h.data_allreduce_offset(blocks - 1, n - 1, 1, 1) + h.chunk_bytes <= l.data_gather);
                assert_eq!(h.data_gather_offset(blocks - 1, n - 1, 1) + h.chunk_bytes, l.total);
                for off in [l.ll, l.data_allreduce, l.data_gather, h.ll_offset(1, 0, n - 1)] {
                    assert_eq!(off % 16, 0);
                }
                // Distinct slots never share bytes.
                assert_eq!(h.ll_offset(0, 0, 1) - h.ll_offset(0, 0, 0), h.ll_bytes);
                assert_eq!(h.data_gather_offset(0, 0, 1) - h.data_gather_offset(0, 0, 0), h.chunk_bytes);
            }
        }
    }

    #[test]
    fn flags_order_rounds_and_epochs() {
        assert!(round_flag(5, 1) < round_flag(5, 2));
        assert!(done_flag(5) > round_flag(5, (1 << ROUND_BITS) - 2));
        assert!(done_flag(5) < round_flag(6, 0));
        assert_eq!(ll_flag(1 << 32), 1, "flag 0 is reserved for empty packets");
        assert_eq!(ll_flag(7), 7);
        // The start rule: free when the pair never exchanged, when the peer finished the last
        // operation they exchanged in, or when it has already started this one; not while it is
        // inside that last operation.
        assert!(slots_free_at_start(0, 0, 9));
        assert!(slots_free_at_start(done_flag(4), round_flag(4, 2), 9));
        assert!(slots_free_at_start(done_flag(8), round_flag(8, 1), 9));
        assert!(slots_free_at_start(done_flag(4), round_flag(9, 1), 9));
        assert!(slots_free_at_start(round_flag(9, 1), round_flag(9, 1), 9));
        assert!(!slots_free_at_start(round_flag(4, 3), round_flag(4, 5), 9));
        // The peer finished an older operation (done flag of epoch 4) but has not read the pieces
        // of operation 8, the last one this block exchanged with it (found by back-to-back
        // operations of ranks sharing one GPU: a done flag of any epoch used to mean free).
        assert!(!slots_free_at_start(done_flag(4), round_flag(8, 2), 9));
        assert!(!slots_free_at_start(0, round_flag(8, 1), 9));
        assert!(!slots_free_at_start(round_flag(8, 1), round_flag(8, 2), 9));
    }

    #[test]
    fn capacities_match_the_slot_size() {
        let h = handle(2, 4);
        assert_eq!(h.ll_one_shot_capacity(), 512 << 10);
        // Two-shot: shards of ceil(words / 2) words must fit one slot of 65536 packets.
        let cap = h.ll_two_shot_capacity();
        let words = cap / 8;
        assert!(words.div_ceil(2) <= h.ll_bytes / 16);
        assert_eq!(split(10, 3, 0), (0, 3));
        // Pieces: a quarter of the part, at least 8 KiB, at most a slot, multiples of 16.
        assert_eq!(h.piece_bytes(64 << 10), 16 << 10);
        assert_eq!(h.piece_bytes(4 << 20), 64 << 10);
        assert_eq!(h.piece_bytes(1000), 8 << 10);
        assert_eq!(h.piece_bytes(100_001) % 16, 0);
        assert_eq!(split(10, 3, 2), (6, 10));
    }
}
