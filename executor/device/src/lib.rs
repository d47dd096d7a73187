//! The plan executor's device side: one rank's execution plan encoded as flat `#[repr(C)]`
//! records that one generic kernel interprets (`ExecPlan::run`, compiled for nvptx64 only),
//! with the channel APIs of `mscclpp-device` doing the work.
//!
//! ```text
//!  ExecPlan { ops, tb_start, memory, port, switch, arena, epochs, ... }
//!  block b runs ops[tb_start[b] .. tb_start[b + 1]] in order, all its threads together:
//!    data ops (put, get, copy, reductions, packets, switch reduce / broadcast) share the work
//!    among the block's threads;
//!    signal / wait / flush / port requests, barriers among blocks and semaphores between them
//!    are made by thread 0, with a bar.sync on each side.
//! ```
//!
//! Offsets are bytes into an *arena*: one exportable buffer per rank holding its input, output
//! and scratch buffers. A memory channel's `src` is this rank's arena and its `dst` the peer's, so
//! a remote offset is an offset into the peer's arena; a port channel's memories are the same
//! two arenas; a switch channel's buffer is every rank's arena (laid out alike on every rank), so
//! a switch offset is the same offset into every copy. Switch operations go through the
//! [`SwitchGroup`](mscclpp_device::channel::switch::SwitchGroup) API of an
//! [`EmulatedSwitchChannel`] (peer pointers; NVLink multicast is not used). The host encoder
//! (`mscclpp-executor`) turns a checked plan into these records.
//!
//! Relaxed signals and waits order no data of the launch, but they do order the input the
//! stream wrote before it: each block's thread 0 runs `fence.acq_rel.sys` before its first
//! relaxed signal (releasing what the stream completed before the launch) and after every
//! relaxed wait (acquiring what the signalling block released that way), so a rank that has
//! seen a relaxed signal from a peer may read that peer's input. `mscclpp_plan::check` models exactly
//! this (see its "Relaxed signals and the input" section).
//!
//! Packets (LL16) carry a flag: block `b` uses `epochs[b]` (1 at the first launch, one more at
//! every launch, so every rank's blocks agree on it), and packet operands in scratch
//! ([`flags::DST_PKT_SCRATCH`], [`flags::SRC_PKT_SCRATCH`]) alternate between two copies of the
//! packet scratch by the flag's parity, so a rank one launch ahead never overwrites packets its
//! peer is still reading.
//!
//! This crate is the device code of `mscclpp-executor`, shared by its host crate (the encoder)
//! and its kernel crate.
#![cfg_attr(not(test), no_std)]

use mscclpp_device::abi::DeviceAbi;
use mscclpp_device::channel::emulated_switch::EmulatedSwitchChannel;
use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::ptr::GlobalPtr;

/// Most operands of a reduction besides its first (`src`): 7, enough for 8 ranks.
pub const MAX_OTHERS: usize = 7;

/// Operation codes of [`ExecOp::kind`].
pub mod opcode {
    /// Memory channel: `remote[dst] = local[src]`.
    pub const PUT: u32 = 1;
    /// Memory channel: `local[dst] = remote[src]`.
    pub const GET: u32 = 2;
    /// Memory channel: signal the peer (relaxed with [`super::flags::RELAXED`]).
    pub const SIGNAL: u32 = 3;
    /// Memory channel: wait for the peer's signal.
    pub const WAIT: u32 = 4;
    /// Memory channel: `remote[dst] = packets(local[src])` with this launch's flag.
    pub const PUT_PACKETS: u32 = 5;
    /// Memory channel: `remote[dst] = local packets at src` (forwarded with the same flag).
    pub const READ_PUT_PACKETS: u32 = 6;
    /// Local: `local[dst] = local[src]`.
    pub const COPY: u32 = 7;
    /// Local: `local[dst] = packets(local[src])`.
    pub const COPY_PACKETS: u32 = 8;
    /// Local: `local[dst] = data of the packets at local[src]`.
    pub const UNPACK_PACKETS: u32 = 9;
    /// Local: `local[dst] = local[src] + sum of others` (others as packets with
    /// [`super::flags::PACKET_OTHERS`]).
    pub const REDUCE: u32 = 10;
    /// Port channel: a put request.
    pub const PORT_PUT: u32 = 11;
    /// Port channel: a put and a signal in one request.
    pub const PORT_PUT_WITH_SIGNAL: u32 = 12;
    /// Port channel: put, signal and wait for completion.
    pub const PORT_PUT_WITH_SIGNAL_AND_FLUSH: u32 = 13;
    /// Port channel: a signal request.
    pub const PORT_SIGNAL: u32 = 14;
    /// Port channel: wait for the peer's signal.
    pub const PORT_WAIT: u32 = 15;
    /// Port channel: wait until this proxy completed the earlier requests.
    pub const PORT_FLUSH: u32 = 16;
    /// Memory channel: `local[dst] = local[src] + sum of remote[others]` (the peer's arena).
    pub const CHANNEL_REDUCE: u32 = 17;
    /// Switch channel: `local[dst] = sum over every rank of its copy at src`.
    pub const SWITCH_REDUCE: u32 = 18;
    /// Switch channel: `local[src]` stored at `dst` of every rank's copy.
    pub const SWITCH_BROADCAST: u32 = 19;
    /// Switch channel: the LL16 packets at local `src` (`bytes` of data), each read once its flag
    /// is this launch's, stored at `dst` of every rank's copy.
    pub const SWITCH_BROADCAST_PACKETS: u32 = 23;
    /// Barrier among `bytes` blocks of this rank on counter `channel` of [`super::ExecPlan::sync`].
    pub const BARRIER: u32 = 20;
    /// Adds one to semaphore counter `channel` of [`super::ExecPlan::sync`] (release).
    pub const SEM_RELEASE: u32 = 21;
    /// Waits until semaphore counter `channel` is positive and takes one (acquire); one block
    /// acquires each semaphore.
    pub const SEM_ACQUIRE: u32 = 22;
}

/// Bits of [`ExecOp::flags`].
pub mod flags {
    /// Signal / wait without ordering the data (relaxed).
    pub const RELAXED: u32 = 1;
    /// The reduction's other operands are LL16 packets.
    pub const PACKET_OTHERS: u32 = 2;
    /// `dst` is in the packet scratch (shifted by the flag's parity).
    pub const DST_PKT_SCRATCH: u32 = 4;
    /// `src` (and a reduction's packet operands) are in the packet scratch.
    pub const SRC_PKT_SCRATCH: u32 = 8;
}

/// Element types of a reduction ([`ExecPlan::dtype`]).
pub mod dtype {
    /// `f32`.
    pub const F32: u32 = 0;
    /// `bf16`.
    pub const BF16: u32 = 1;
    /// `f16`.
    pub const F16: u32 = 2;
    /// `i32` (wrapping).
    pub const I32: u32 = 3;
    /// `u32` (wrapping).
    pub const U32: u32 = 4;
}

/// One operation of a thread block (96 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExecOp {
    /// One of [`opcode`].
    pub kind: u32,
    /// Index into [`ExecPlan::memory`] or [`ExecPlan::port`] (by kind); 0 for local operations.
    pub channel: u32,
    /// Bits of [`flags`].
    pub flags: u32,
    /// Number of used entries of `others`.
    pub n_others: u32,
    /// Destination offset in bytes (local or remote arena, by kind).
    pub dst: u64,
    /// Source offset in bytes (local or remote arena, by kind).
    pub src: u64,
    /// Bytes of data (packets take twice as many bytes of scratch).
    pub bytes: u64,
    /// Offsets of a reduction's other operands: in the local arena, or in the peer's for
    /// [`opcode::CHANNEL_REDUCE`].
    pub others: [u64; MAX_OTHERS],
}
static_assertions::assert_eq_size!(ExecOp, [u64; 12]);
// SAFETY: repr(C), integers only, no implicit padding (asserted size).
unsafe impl DeviceAbi for ExecOp {}

/// One rank's plan on the device, passed to the executor kernel by value (88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExecPlan {
    /// Every block's operations, block after block.
    pub ops: GlobalPtr<ExecOp>,
    /// `n_blocks + 1` indices into `ops`: block b runs `ops[tb_start[b]..tb_start[b + 1]]`.
    pub tb_start: GlobalPtr<u32>,
    /// Memory channels of this rank, by [`ExecOp::channel`].
    pub memory: GlobalPtr<MemoryChannel>,
    /// Port channels of this rank, by [`ExecOp::channel`].
    pub port: GlobalPtr<PortChannel>,
    /// Switch channels of the plan, by [`ExecOp::channel`].
    pub switch: GlobalPtr<EmulatedSwitchChannel>,
    /// This rank's arena (input, output, scratch).
    pub arena: GlobalPtr<u8>,
    /// One launch counter per block, starting at 1: the packet flag.
    pub epochs: GlobalPtr<u32>,
    /// This rank's counters of barriers (arrivals since the arena was made) and semaphores
    /// between its blocks (their values), by [`ExecOp::channel`].
    pub sync: GlobalPtr<u64>,
    /// Bytes of one copy of the packet scratch (the shift for odd flags).
    pub pkt_shift: u64,
    /// Blocks the plan has (the grid must have exactly this many).
    pub n_blocks: u32,
    /// Element type of reductions (one of [`dtype`]).
    pub dtype: u32,
    /// Size of the arena in bytes.
    pub arena_bytes: u64,
}
static_assertions::assert_eq_size!(ExecPlan, [u64; 11]);
// SAFETY: repr(C) of addresses and integers, no implicit padding (asserted size).
unsafe impl DeviceAbi for ExecPlan {}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::*;
    use mscclpp_device::atomic::{self, AcqRel, Acquire, Gpu, Relaxed, Release, Sys, fence_acq_rel};
    use mscclpp_device::channel::switch::{SwitchElem, SwitchGroup};
    use mscclpp_device::copy::{Threads, copy_widest};
    use mscclpp_device::element::Element;
    use mscclpp_device::packet::{LL16Packet, copy_from_packets, copy_to_packets};
    use mscclpp_device::poll::{SpinBudget, fail, spin_until};
    use mscclpp_device::ptx::ld_st;
    use mscclpp_device::ptx::misc::barrier_sync;
    use mscclpp_device::ptx::sreg;
    use mscclpp_device::vec::{Bf16x8, F16x8, F32x4};

    /// `dst = src + others...` with the others as LL16 packets, in 8-byte words (a packet's
    /// payload), in operand order.
    ///
    /// # Safety
    /// `src` and `dst` valid for `bytes` (a multiple of 8) and 8-byte aligned; packet operands
    /// valid for `2 * bytes` and 16-byte aligned.
    #[inline(always)]
    unsafe fn reduce_packets<E: Element>(
        arena: GlobalPtr<u8>,
        op: &ExecOp,
        shift: u64,
        flag: u32,
        t: Threads,
        b: SpinBudget,
    ) {
        let words = op.bytes / 8;
        let src = arena.byte_add(op.src as usize).cast::<u64>();
        let dst = arena.byte_add(op.dst as usize).cast::<u64>();
        for i in t.stride(words) {
            // SAFETY: word i lies inside every operand (caller's contract).
            unsafe {
                let mut acc = ld_st::ld_global_u64(src.add(i as usize).as_ptr());
                for &other in op.others.iter().take(op.n_others as usize) {
                    let p = arena.byte_add((other + shift) as usize).cast::<LL16Packet>();
                    acc = E::add_dwords(acc, p.add(i as usize).read(flag, b));
                }
                ld_st::st_global_u64(dst.add(i as usize).as_ptr(), acc);
            }
        }
    }

    /// `dst = src + others...` in 16-byte words, in operand order: `src` and `dst` in `arena`,
    /// the others at their offsets in `others` (this rank's arena, or a peer's mapped here).
    ///
    /// # Safety
    /// Every operand valid for `bytes` (a multiple of 16) and 16-byte aligned; the others'
    /// memory written before this block was ordered after the writes (a wait, or the launch).
    #[inline(always)]
    unsafe fn reduce_plain<E: Element>(arena: GlobalPtr<u8>, others: GlobalPtr<u8>, op: &ExecOp, t: Threads) {
        let words = op.bytes / 16;
        let src = arena.byte_add(op.src as usize);
        let dst = arena.byte_add(op.dst as usize);
        for i in t.stride(words) {
            let at = (i * 16) as usize;
            // SAFETY: word i lies inside every operand (caller's contract).
            unsafe {
                let mut acc = ld_st::ld_global_v4_u32(src.byte_add(at).cast::<u32>().as_ptr());
                for &other in op.others.iter().take(op.n_others as usize) {
                    let v = ld_st::ld_global_v4_u32(others.byte_add(other as usize + at).cast::<u32>().as_ptr());
                    for (a, b) in acc.iter_mut().zip(v) {
                        *a = E::add_words(*a, b);
                    }
                }
                ld_st::st_global_v4_u32(dst.byte_add(at).cast::<u32>().as_ptr(), acc);
            }
        }
    }

    /// `local[dst..dst + bytes] = reduce(switch[src..src + bytes])` as elements of `V`.
    ///
    /// # Safety
    /// `c` built by the host for this rank; `src`, `dst` and `bytes` multiples of `size_of::<V>()`,
    /// both ranges inside the arena (every rank's copy for the switch range); every rank's data
    /// in the range written before a synchronisation this block passed.
    #[inline(always)]
    unsafe fn switch_reduce<C: SwitchGroup, V: SwitchElem>(
        c: &C,
        arena: GlobalPtr<u8>,
        dst: u64,
        src: u64,
        bytes: u64,
        t: Threads,
    ) {
        let size = core::mem::size_of::<V>() as u64;
        let (first, n) = (src / size, bytes / size);
        let out = arena.byte_add(dst as usize).cast::<V>();
        for i in t.stride(n) {
            // SAFETY: element `first + i` of every copy and element `i` at `dst` are in range
            // (caller's contract).
            unsafe { out.add(i as usize).as_ptr().write(c.reduce::<V>((first + i) as usize)) };
        }
    }

    /// `switch[dst..dst + bytes] = local[src..src + bytes]` on every rank, as elements of `V`.
    ///
    /// # Safety
    /// As for [`switch_reduce`]; nothing reads the switch range on any rank until a
    /// synchronisation after this.
    #[inline(always)]
    unsafe fn switch_broadcast<C: SwitchGroup, V: SwitchElem>(
        c: &C,
        arena: GlobalPtr<u8>,
        dst: u64,
        src: u64,
        bytes: u64,
        t: Threads,
    ) {
        let size = core::mem::size_of::<V>() as u64;
        let (first, n) = (dst / size, bytes / size);
        let from = arena.byte_add(src as usize).cast::<V>();
        for i in t.stride(n) {
            // SAFETY: as for `switch_reduce`.
            unsafe { c.broadcast::<V>((first + i) as usize, from.add(i as usize).as_ptr().read()) };
        }
    }

    impl ExecPlan {
        /// Runs this block's operations (see the module documentation). Every thread of every
        /// block calls it; the grid has `n_blocks` 1-D blocks.
        ///
        /// # Safety
        /// The plan comes from the host encoder of `mscclpp-executor` (offsets inside the arenas,
        /// channels and tables alive), every rank runs its plan of the same program, and nothing
        /// else uses the arenas while it runs.
        #[inline(always)]
        pub unsafe fn run(&self, budget: SpinBudget) {
            let b = sreg::ctaid_x();
            if b >= self.n_blocks {
                fail(c"exec_plan: the grid has more blocks than the plan");
            }
            let t = Threads::block();
            let leader = t.index == 0;
            // SAFETY: the tables hold n_blocks + 1 indices and n_blocks epochs (encoder).
            let (start, end, flag) = unsafe {
                (
                    self.tb_start.add(b as usize).as_ptr().read(),
                    self.tb_start.add(b as usize + 1).as_ptr().read(),
                    self.epochs.add(b as usize).as_ptr().read(),
                )
            };
            let shift = if flag & 1 == 1 { self.pkt_shift } else { 0 };
            let arena = self.arena;
            // Whether thread 0 has fenced since the launch began: before the first relaxed
            // signal it releases what the stream did before the launch (the host's input).
            let mut launch_released = false;
            for i in start..end {
                // SAFETY: indices below tb_start[n_blocks] are inside `ops` (encoder).
                let op = unsafe { self.ops.add(i as usize).as_ptr().read() };
                let dshift = if op.flags & flags::DST_PKT_SCRATCH != 0 { shift } else { 0 };
                let sshift = if op.flags & flags::SRC_PKT_SCRATCH != 0 { shift } else { 0 };
                let (dst, src) = (op.dst + dshift, op.src + sshift);
                let mem = || {
                    // SAFETY: the encoder only names channels of the table.
                    unsafe { self.memory.add(op.channel as usize).as_ptr().read() }
                };
                let port = || {
                    // SAFETY: as above.
                    unsafe { self.port.add(op.channel as usize).as_ptr().read() }
                };
                let switch = || {
                    // SAFETY: as above.
                    unsafe { self.switch.add(op.channel as usize).as_ptr().read() }
                };
                // SAFETY: offsets and sizes were checked by the encoder against both arenas, and
                // counter indices against the sync table;
                // every thread of the block runs the same operation; one thread signals, waits
                // and makes port requests, with barriers around it.
                unsafe {
                    match op.kind {
                        opcode::PUT => mem().put(dst, src, op.bytes, t),
                        opcode::GET => mem().get(src, dst, op.bytes, t),
                        opcode::COPY => {
                            copy_widest(arena.byte_add(dst as usize), arena.byte_add(src as usize), op.bytes, t)
                        }
                        opcode::PUT_PACKETS => {
                            let c = mem();
                            copy_to_packets::<LL16Packet>(
                                c.dst.byte_add(dst as usize).cast(),
                                arena.byte_add(src as usize),
                                op.bytes,
                                flag,
                                t,
                            )
                        }
                        opcode::READ_PUT_PACKETS => {
                            let c = mem();
                            let from = arena.byte_add(src as usize).cast::<LL16Packet>();
                            let to = c.dst.byte_add(dst as usize).cast::<LL16Packet>();
                            for k in t.stride(op.bytes / 8) {
                                to.add(k as usize).write(from.add(k as usize).read(flag, budget), flag);
                            }
                        }
                        opcode::COPY_PACKETS => copy_to_packets::<LL16Packet>(
                            arena.byte_add(dst as usize).cast(),
                            arena.byte_add(src as usize),
                            op.bytes,
                            flag,
                            t,
                        ),
                        opcode::UNPACK_PACKETS => copy_from_packets::<LL16Packet>(
                            arena.byte_add(dst as usize),
                            arena.byte_add(src as usize).cast(),
                            op.bytes,
                            flag,
                            t,
                            budget,
                        ),
                        opcode::REDUCE if op.flags & flags::PACKET_OTHERS != 0 => {
                            // Packet operands are in the packet scratch, shifted by the parity.
                            let o = ExecOp { dst, ..op };
                            match self.dtype {
                                dtype::F32 => reduce_packets::<f32>(arena, &o, shift, flag, t, budget),
                                dtype::BF16 => reduce_packets::<half::bf16>(arena, &o, shift, flag, t, budget),
                                dtype::F16 => reduce_packets::<half::f16>(arena, &o, shift, flag, t, budget),
                                dtype::I32 => reduce_packets::<i32>(arena, &o, shift, flag, t, budget),
                                dtype::U32 => reduce_packets::<u32>(arena, &o, shift, flag, t, budget),
                                _ => fail(c"exec_plan: unknown element type"),
                            }
                        }
                        opcode::REDUCE | opcode::CHANNEL_REDUCE => {
                            // A channel reduction reads its other operands in the peer's arena.
                            let others = if op.kind == opcode::CHANNEL_REDUCE { mem().dst } else { arena };
                            let o = ExecOp { dst, src, ..op };
                            match self.dtype {
                                dtype::F32 => reduce_plain::<f32>(arena, others, &o, t),
                                dtype::BF16 => reduce_plain::<half::bf16>(arena, others, &o, t),
                                dtype::F16 => reduce_plain::<half::f16>(arena, others, &o, t),
                                dtype::I32 => reduce_plain::<i32>(arena, others, &o, t),
                                dtype::U32 => reduce_plain::<u32>(arena, others, &o, t),
                                _ => fail(c"exec_plan: unknown element type"),
                            }
                        }
                        opcode::SWITCH_REDUCE => {
                            let c = switch();
                            let (d, s, n) = (dst, src, op.bytes);
                            match self.dtype {
                                dtype::F32 => switch_reduce::<_, F32x4>(&c, arena, d, s, n, t),
                                dtype::BF16 => switch_reduce::<_, Bf16x8>(&c, arena, d, s, n, t),
                                dtype::F16 => switch_reduce::<_, F16x8>(&c, arena, d, s, n, t),
                                dtype::I32 => switch_reduce::<_, i32>(&c, arena, d, s, n, t),
                                dtype::U32 => switch_reduce::<_, u32>(&c, arena, d, s, n, t),
                                _ => fail(c"exec_plan: unknown element type"),
                            }
                        }
                        // Bytes are bytes: 16 at a time whatever the element type.
                        opcode::SWITCH_BROADCAST => {
                            switch_broadcast::<_, F32x4>(&switch(), arena, dst, src, op.bytes, t)
                        }
                        opcode::SIGNAL => {
                            barrier_sync();
                            if leader {
                                if op.flags & flags::RELAXED != 0 {
                                    if !launch_released {
                                        fence_acq_rel::<Sys>();
                                        launch_released = true;
                                    }
                                    mem().relaxed_signal()
                                } else {
                                    mem().signal()
                                }
                            }
                        }
                        opcode::WAIT => {
                            if leader {
                                if op.flags & flags::RELAXED != 0 {
                                    mem().relaxed_wait(budget);
                                    // Acquires what the signaller released: its host's input,
                                    // by the fence before its block's first relaxed signal.
                                    fence_acq_rel::<Sys>();
                                } else {
                                    mem().wait(budget)
                                }
                            }
                        }
                        opcode::PORT_PUT
                        | opcode::PORT_PUT_WITH_SIGNAL
                        | opcode::PORT_PUT_WITH_SIGNAL_AND_FLUSH
                        | opcode::PORT_SIGNAL
                        | opcode::PORT_WAIT
                        | opcode::PORT_FLUSH => {
                            // The proxy copies what the whole block wrote before the request.
                            barrier_sync();
                            if leader {
                                let c = port();
                                match op.kind {
                                    opcode::PORT_PUT => {
                                        c.put(dst, src, op.bytes, budget);
                                    }
                                    opcode::PORT_PUT_WITH_SIGNAL => {
                                        c.put_with_signal(dst, src, op.bytes, budget);
                                    }
                                    opcode::PORT_PUT_WITH_SIGNAL_AND_FLUSH => {
                                        c.put_with_signal_and_flush(dst, src, op.bytes, budget)
                                    }
                                    opcode::PORT_SIGNAL => {
                                        c.signal(budget);
                                    }
                                    opcode::PORT_WAIT => c.wait(budget),
                                    _ => c.flush(budget),
                                }
                            }
                        }
                        opcode::SWITCH_BROADCAST_PACKETS => {
                            // A packet is 16 bytes holding 8 of data: read it whole once valid,
                            // then store it whole to every copy (bytes are bytes).
                            let c = switch();
                            let from = arena.byte_add(src as usize).cast::<LL16Packet>();
                            let first = dst / 16;
                            for k in t.stride(op.bytes / 8) {
                                let p = from.add(k as usize);
                                p.read(flag, budget);
                                let whole = p.cast::<F32x4>().as_ptr().read_volatile();
                                c.broadcast::<F32x4>((first + k) as usize, whole);
                            }
                        }
                        opcode::BARRIER => {
                            barrier_sync();
                            if leader {
                                let p = self.sync.add(op.channel as usize).as_ptr();
                                // Arrival `old` belongs to crossing old / count, which is over
                                // once every block of it has arrived (counts never reset).
                                let count = op.bytes.max(1);
                                let old = atomic::fetch_add::<AcqRel, Gpu, u64>(p, 1);
                                let target = (old / count + 1) * count;
                                spin_until(budget, c"exec_plan: barrier", || {
                                    atomic::load::<Acquire, Gpu, u64>(p) >= target
                                });
                            }
                        }
                        opcode::SEM_RELEASE => {
                            barrier_sync();
                            if leader {
                                atomic::red_add::<Release, Gpu, u64>(self.sync.add(op.channel as usize).as_ptr(), 1);
                            }
                        }
                        opcode::SEM_ACQUIRE => {
                            if leader {
                                let p = self.sync.add(op.channel as usize).as_ptr();
                                spin_until(budget, c"exec_plan: sem_acquire", || {
                                    atomic::load::<Acquire, Gpu, u64>(p) > 0
                                });
                                // The only acquirer (checker): the value cannot drop in between.
                                atomic::fetch_add::<Relaxed, Gpu, u64>(p, u64::MAX);
                            }
                        }
                        _ => fail(c"exec_plan: unknown operation"),
                    }
                }
                // Every operation ends with the block in step: the next one may read what this
                // one wrote (or what the leader's wait made visible).
                barrier_sync();
            }
            if leader {
                // 0 marks an empty packet slot: after u32::MAX comes 2, keeping the parity turn.
                let next = if flag == u32::MAX { 2 } else { flag + 1 };
                // SAFETY: this block's own counter; the next launch reads it after this grid.
                unsafe { self.epochs.add(b as usize).as_ptr().write(next) };
            }
        }
    }
}
