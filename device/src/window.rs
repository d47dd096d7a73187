//! Symmetric memory windows: memory that every rank of a team registered together, the same
//! number of bytes on each, so that an offset means the same place in every rank's copy. A kernel
//! turns `(rank, offset)` into a pointer with [`Window::peer`] (the peer's memory, mapped into
//! this GPU's address space) and orders its accesses with per-rank signal words and a team
//! barrier. This is the model of NCCL's device API (windows, LSA pointers and barriers) and of
//! NVSHMEM's symmetric heap, built on this crate's atomics and bounded waits.
//!
//! ```text
//!  rank r's window:       [ bytes of data ]                  (the same size on every rank)
//!  rank r's signal area:  [ barrier: N words | slot 0: N words | ... | slot S-1: N words | epoch ]
//!                           word p: written by rank p only (its barrier epoch, its signal count)
//!
//!  peer(p, off)       = bases[p] + off     (bases: every rank's window as mapped here)
//!  signal(p, s)       : red.release.sys.add  peer_signals[p][N * (1 + s) + r] += 1
//!  wait_signal(s, q, v): ld.acquire.sys      signals[N * (1 + s) + q] until it reaches v
//!  barrier()          : st.release.sys  peer_signals[p][r] = epoch, for every p != r;
//!                       ld.acquire.sys  signals[p] until it reaches epoch, for every p != r
//!
//!  put_packets::<P>(p, off, src, n, f): st.volatile  bases[p] + off: n bytes of src as packets P,
//!                                                    each payload beside flag f (2n bytes there)
//!  read_packets::<P>(off, dst, n, f)  : ld.volatile  local + off until each packet carries f;
//!                                                    its payload to dst
//! ```
//!
//! Signal words only grow (a signal adds, a barrier stores its next epoch), so every wait
//! compares with [`crate::semaphore::reached`] and an early signal is never lost. The handle is
//! built by the host (`Communicator::window` in `mscclpp-host`), which allocates the signal area
//! zeroed; [`Window::reset`] zeroes one word again between uses.
//!
//! The data path orders nothing by itself, as with a memory channel: the threads that wrote a
//! peer's window synchronise with the one thread that signals (a `bar.sync`, or a grid barrier
//! when several blocks wrote), and the peer reads only after its wait.
//!
//! LL packets ([`crate::packet`]) need no signal: each payload travels in one store with its
//! flag, and the reader polls every packet until it carries the flag it expects, so neither side
//! fences or synchronises ([`Window::put_packets`], [`Window::read_packets`]). The price is twice
//! the bytes, and the packets' flag discipline: a flag per use of a range, never 0, and a range
//! rewritten only after its reader is done with it (two halves alternating by launch parity, say).
//!
//! # A window as a switch group
//!
//! [`Window::switch_group(offset, bytes, slot)`](Window::switch_group) views `bytes` at `offset`
//! of every rank's window as the buffer of a switch channel: the [`WindowSwitch`] it returns
//! implements [`SwitchGroup`], so an algorithm written once against that trait (reduce,
//! broadcast, and a barrier split in signal and wait) runs on a window as it runs on a
//! [`SwitchChannel`] or an [`EmulatedSwitchChannel`].
//!
//! ```text
//!  at(i)         = offset + i * size_of::<V>()               (the same offset in every window)
//!  reduce(i)     : multimem.ld_reduce add at multicast + at(i)      where the handle has one,
//!                  else  *(bases[0] + at(i)) + *(bases[1] + at(i)) + ...   (rank order)
//!  broadcast(i,v): multimem.st at multicast + at(i),
//!                  else  *(bases[p] + at(i)) = v   for every rank p
//!  signal()      : signal_add(p, slot, 1)   for every rank p, this rank included     (release)
//!  wait()        : c = this rank's own word of `slot`  (how often it has signalled);
//!                  wait until the word of every other rank q reaches c                (acquire)
//! ```
//!
//! Emulated, every rank adds the same values in the same order, so every rank gets the same
//! bits (those of a host sum in rank order); with multicast the switch adds, in its own order.
//! **`mscclpp-host` never provides a multicast address today**: `multicast` is 0 in every handle
//! it builds (it creates no multicast object for windows), so every window switch group emulates
//! and moves `size` times the bytes the switch would.
//!
//! signal and wait are an all-ranks barrier over the slot's words: after round k every rank's
//! word from every rank is at least k, and waits compare with [`crate::semaphore::reached`], so a
//! rank that is already a round ahead never holds another back. `wait` reads its own word after
//! its own signal: that word lives in this rank's signal area (`peer_signals[rank]` is `signals`
//! itself, checked with [`crate::ASSERTS`]), only this rank's signals add to it, and the thread
//! that waits is the one that signalled (one thread per handle at a time), so program order on
//! one address makes the load see that add (coherence) and nothing later: exactly this rank's
//! count. A slot serves one thread per rank at a time: give each block its own slot (its own
//! [`WindowSwitch`]) over the same bytes, as one gives each block its own emulated channel, and
//! use the slot for nothing else (no [`Window::signal`] on it, no [`Window::reset`] on one rank
//! alone).
//!
//! [`SwitchGroup`]: crate::channel::switch::SwitchGroup
//! [`SwitchChannel`]: crate::channel::switch::SwitchChannel
//! [`EmulatedSwitchChannel`]: crate::channel::emulated_switch::EmulatedSwitchChannel

use crate::abi::DeviceAbi;
use crate::packet::{Packet, packet_bytes};
use crate::ptr::{GlobalPtr, MultimemPtr};

/// The threads that share one cooperative window operation ([`Window::put`], [`Window::get`],
/// [`Window::put_signal`], [`Window::barrier_in`], [`Window::put_packets`],
/// [`Window::read_packets`]): every thread of the group calls it with the same arguments, the
/// group shares the bytes, and its first thread signals or waits.
///
/// | scope | threads | first thread | the group's barrier |
/// | --- | --- | --- | --- |
/// | `Thread` | the caller alone | the caller | none |
/// | `Warp` | the 32 lanes of the caller's warp | lane 0 | `bar.warp.sync 0xffffffff` |
/// | `Block` | every thread of the caller's (1-D) block | thread 0 | `barrier.sync 0` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One thread.
    Thread,
    /// A whole warp (all 32 lanes reach the call).
    Warp,
    /// A whole 1-D block (every thread reaches the call).
    Block,
}

/// A symmetric memory window of one team, as seen by one of its ranks: built by the host and
/// passed to kernels by value (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Window {
    /// This rank in the team.
    pub rank: u32,
    /// The number of ranks in the team.
    pub size: u32,
    /// Bytes of the window, the same on every rank.
    pub bytes: u64,
    /// This rank's window.
    pub local: GlobalPtr<u8>,
    /// `size` addresses: every rank's window as mapped here (this rank's is `local`).
    pub bases: GlobalPtr<u64>,
    /// This rank's signal area ([`Window::signal_words`] words, zeroed at registration).
    pub signals: GlobalPtr<u64>,
    /// `size` addresses: every rank's signal area as mapped here.
    pub peer_signals: GlobalPtr<u64>,
    /// User signal slots per rank pair (`slot` of [`Window::signal`] is below it).
    pub slots: u32,
    /// Zero (explicit padding).
    pub reserved: u32,
    /// The window's address in an NVLink multicast mapping on this GPU (every rank's window bound
    /// to one multicast object), or 0 for none. `mscclpp-host` always writes 0: it creates no
    /// multicast object for windows, so [`Window::multimem`] is `None` and a
    /// [`WindowSwitch`] emulates.
    pub multicast: u64,
}
static_assertions::assert_eq_size!(Window, [u64; 8]);
static_assertions::assert_eq_align!(Window, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, bytes), 8);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, local), 16);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, bases), 24);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, signals), 32);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, peer_signals), 40);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, slots), 48);
static_assertions::const_assert_eq!(core::mem::offset_of!(Window, multicast), 56);
// SAFETY: repr(C) of integers and addresses; no implicit padding (asserted above).
unsafe impl DeviceAbi for Window {}

impl Window {
    /// The signal slots a window gets unless the host asks for another number.
    pub const DEFAULT_SLOTS: u32 = 8;

    /// Words of one rank's signal area for a team of `size` with `slots` user slots: a barrier
    /// word and `slots` signal words per rank, and this rank's barrier epoch. `None` on overflow.
    pub const fn signal_words(size: u32, slots: u32) -> Option<u64> {
        match (size as u64).checked_mul(slots as u64 + 1) {
            Some(w) => w.checked_add(1),
            None => None,
        }
    }

    /// The word of a signal area that rank `from` writes in barriers.
    pub const fn barrier_word(from: u32) -> u64 {
        from as u64
    }

    /// The word of a signal area that rank `from` adds to with signals of `slot`, in a team of
    /// `size`.
    pub const fn signal_word(size: u32, slot: u32, from: u32) -> u64 {
        size as u64 * (slot as u64 + 1) + from as u64
    }

    /// The word that holds this rank's barrier epoch (read and written by this rank only).
    pub const fn epoch_word(size: u32, slots: u32) -> u64 {
        size as u64 * (slots as u64 + 1)
    }

    /// Whether `[offset, offset + len)` lies inside a window of `bytes`.
    pub const fn fits(offset: u64, len: u64, bytes: u64) -> bool {
        match offset.checked_add(len) {
            Some(end) => end <= bytes,
            None => false,
        }
    }

    /// Whether a copy of `len` bytes at `offset` stays inside the window: what [`Window::put`],
    /// [`Window::get`] and [`Window::put_signal`] check with [`crate::ASSERTS`].
    #[inline(always)]
    pub const fn spans(&self, offset: u64, len: u64) -> bool {
        Self::fits(offset, len, self.bytes)
    }

    /// Whether `bytes` of data as packets of type `P` fit at byte `offset` of the window: `bytes`
    /// whole payloads, `offset` aligned to the packet, and the [`packet_bytes`] they take (twice
    /// `bytes`) inside the window. What [`Window::put_packets`] and [`Window::read_packets`] check
    /// with [`crate::ASSERTS`].
    #[inline(always)]
    pub const fn holds_packets<P: Packet>(&self, offset: u64, bytes: u64) -> bool {
        bytes.is_multiple_of(P::PAYLOAD_BYTES)
            && offset.is_multiple_of(core::mem::size_of::<P>() as u64)
            && self.spans(offset, packet_bytes::<P>(bytes))
    }

    /// Whether `rank` is a member of the team.
    #[inline(always)]
    pub const fn is_member(&self, rank: u32) -> bool {
        rank < self.size
    }

    /// Whether a `T` at `offset` lies inside the window and is aligned for `T` (the window's
    /// start is aligned for every `T` up to 256 bytes on every rank).
    #[inline(always)]
    pub const fn holds<T>(&self, offset: u64) -> bool {
        Self::fits(offset, core::mem::size_of::<T>() as u64, self.bytes)
            && offset.is_multiple_of(core::mem::align_of::<T>() as u64)
    }

    /// A `T` at byte `offset` of this rank's window.
    ///
    /// With [`crate::ASSERTS`], fails (prints and traps; panics on the host) when the `T` does
    /// not lie inside the window or is misaligned.
    #[inline(always)]
    #[track_caller]
    pub fn local<T>(&self, offset: u64) -> GlobalPtr<T> {
        crate::device_assert!(self.holds::<T>(offset), "Window::local: offset outside the window or misaligned");
        self.local.byte_add(offset as usize).cast()
    }

    /// A `T` at byte `offset` of the window's multicast mapping (`multimem.*` at it reaches every
    /// rank's copy), or `None` when the handle has none ([`Window::multicast`] is 0, as in every
    /// handle `mscclpp-host` builds today).
    ///
    /// With [`crate::ASSERTS`], fails (prints and traps; panics on the host) when the `T` does
    /// not lie inside the window or is misaligned.
    ///
    /// # Safety
    /// The handle comes from the host runtime for this GPU: a non-zero `multicast` is a live
    /// multicast mapping of the whole window (a `MultimemPtr` is only ever such an address).
    #[inline(always)]
    #[track_caller]
    pub unsafe fn multimem<T>(&self, offset: u64) -> Option<MultimemPtr<T>> {
        crate::device_assert!(self.holds::<T>(offset), "Window::multimem: offset outside the window or misaligned");
        match self.multicast {
            0 => None,
            // SAFETY: inside the window's multicast mapping (the caller's contract, and in bounds).
            mc => Some(unsafe { MultimemPtr::from_addr(mc.wrapping_add(offset)) }),
        }
    }

    /// `bytes` at byte `offset` of every rank's window as one switch group, ordered by signal
    /// slot `slot` (see the module docs, "A window as a switch group"): a [`WindowSwitch`], whose
    /// [`SwitchGroup`](crate::channel::switch::SwitchGroup) methods reduce over and broadcast to
    /// every rank's copy of the range.
    ///
    /// With [`crate::ASSERTS`], fails (prints and traps; panics on the host) when the range does
    /// not lie inside the window or `slot` is not below [`Window::slots`].
    #[inline(always)]
    #[track_caller]
    pub fn switch_group(&self, offset: u64, bytes: u64, slot: u32) -> WindowSwitch {
        crate::device_assert!(self.spans(offset, bytes), "Window::switch_group: range outside the window");
        crate::device_assert!(slot < self.slots, "Window::switch_group: slot out of range");
        WindowSwitch { window: *self, offset, bytes, slot }
    }
}

/// `bytes` at one offset of every rank's window as a switch group, with its barrier on one signal
/// slot: built by [`Window::switch_group`] (in a kernel, or on the host), used through
/// [`SwitchGroup`](crate::channel::switch::SwitchGroup) (its methods exist on nvptx64 only). See
/// the module docs, "A window as a switch group".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSwitch {
    window: Window,
    offset: u64,
    bytes: u64,
    slot: u32,
}

impl WindowSwitch {
    /// The window.
    pub const fn window(&self) -> &Window {
        &self.window
    }
    /// Where the range starts in every rank's window (bytes).
    pub const fn offset(&self) -> u64 {
        self.offset
    }
    /// Bytes of the range.
    pub const fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The signal slot of the barrier.
    pub const fn slot(&self) -> u32 {
        self.slot
    }
    /// How many whole elements of type `V` the range holds (0 for a zero-sized `V`, which has no
    /// elements to address).
    pub const fn len_of<V>(&self) -> u64 {
        match self.bytes.checked_div(core::mem::size_of::<V>() as u64) {
            Some(n) => n,
            None => 0,
        }
    }
    /// The byte offset in every rank's window of element `index` of type `V`.
    pub const fn at<V>(&self, index: usize) -> u64 {
        self.offset.wrapping_add((index as u64).wrapping_mul(core::mem::size_of::<V>() as u64))
    }
    /// Whether element `index` of type `V` lies inside the range (and so the window) and is
    /// aligned for `V` (the range's offset is a multiple of `V`'s alignment).
    pub const fn holds<V>(&self, index: usize) -> bool {
        (index as u64) < self.len_of::<V>() && self.window.holds::<V>(self.at::<V>(index))
    }
    /// This rank's copy of element `index` of type `V`.
    ///
    /// With [`crate::ASSERTS`], fails (prints and traps; panics on the host) unless
    /// [`WindowSwitch::holds`].
    #[inline(always)]
    #[track_caller]
    pub fn element<V>(&self, index: usize) -> GlobalPtr<V> {
        crate::device_assert!(self.holds::<V>(index), "WindowSwitch: element index out of range or misaligned");
        self.window.local.byte_add(self.at::<V>(index) as usize).cast()
    }
    /// The word of a signal area that rank `from`'s signals of this group add to: slot
    /// [`WindowSwitch::slot`]'s word for `from` ([`Window::signal_word`]).
    pub const fn signal_word(&self, from: u32) -> u64 {
        Window::signal_word(self.window.size, self.slot, from)
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, LoadOrder, Relaxed, Release, StoreOrder, Sys};
    use crate::channel::switch::{SwitchElem, SwitchGroup};
    use crate::copy::{Threads, copy_widest};
    use crate::device_assert;
    use crate::packet::{copy_from_packets, copy_to_packets};
    use crate::poll::{SpinBudget, spin_until};
    use crate::semaphore::reached;

    impl Scope {
        /// The calling thread's place in the group (the share of a copy it takes).
        #[inline(always)]
        pub fn threads(self) -> Threads {
            match self {
                Scope::Thread => Threads::new(0, 1),
                Scope::Warp => Threads::new(crate::ptx::sreg::laneid(), 32),
                Scope::Block => Threads::block(),
            }
        }

        /// Whether the calling thread is the group's first (the one that signals and waits).
        #[inline(always)]
        pub fn is_leader(self) -> bool {
            self.threads().index == 0
        }

        /// The group's barrier: what any thread of the group wrote before it is visible to every
        /// thread of the group after it (nothing for `Thread`).
        ///
        /// # Safety
        /// Every thread of the group reaches it: all 32 lanes for `Warp` (none exited), every
        /// thread of the block for `Block`.
        #[inline(always)]
        pub unsafe fn sync(self) {
            match self {
                Scope::Thread => {}
                // SAFETY: the whole warp reaches it (the caller's contract).
                Scope::Warp => unsafe { crate::ptx::misc::bar_warp_sync_all() },
                Scope::Block => crate::sync::block_barrier(),
            }
        }
    }

    impl Window {
        /// The start of rank `rank`'s window, as mapped here.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `rank` is in the team.
        #[inline(always)]
        unsafe fn base(&self, rank: u32) -> GlobalPtr<u8> {
            // SAFETY: `bases` holds `size` addresses (the caller's contract), `rank` is below it.
            GlobalPtr::from_addr(unsafe { self.bases.add(rank as usize).as_ptr().read() })
        }

        /// Copies `bytes` from `src` (any global memory of this GPU: an input buffer, or this
        /// rank's window through [`Window::local`]) to byte `dst_off` of rank `peer`'s window,
        /// shared by the threads of `scope` (the widest accesses both addresses allow, as
        /// [`crate::copy::copy_widest`]). Orders nothing: the group synchronises and one thread
        /// signals before the peer reads ([`Window::put_signal`] does both).
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) for a peer outside the team or a
        /// destination outside the window.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `src` valid for `bytes` and not overlapping the destination;
        /// every thread of `scope` calls it with the same arguments; nobody reads or writes the
        /// destination range concurrently.
        #[inline(always)]
        pub unsafe fn put(&self, peer: u32, dst_off: u64, src: GlobalPtr<u8>, bytes: u64, scope: Scope) {
            device_assert!(self.is_member(peer), "Window::put: peer outside the team");
            device_assert!(self.spans(dst_off, bytes), "Window::put: destination outside the window");
            // SAFETY: forwarded from the caller; the range lies inside the peer's window.
            unsafe { copy_widest(self.base(peer).byte_add(dst_off as usize), src, bytes, scope.threads()) }
        }

        /// Copies `bytes` at byte `src_off` of rank `peer`'s window to `dst` (any global memory of
        /// this GPU), shared by the threads of `scope`: the reverse of [`Window::put`].
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) for a peer outside the team or a
        /// source outside the window.
        ///
        /// # Safety
        /// As for [`Window::put`], with `dst` written; the peer finished writing the range (this
        /// rank waited for its signal, or a barrier came between).
        #[inline(always)]
        pub unsafe fn get(&self, peer: u32, src_off: u64, dst: GlobalPtr<u8>, bytes: u64, scope: Scope) {
            device_assert!(self.is_member(peer), "Window::get: peer outside the team");
            device_assert!(self.spans(src_off, bytes), "Window::get: source outside the window");
            // SAFETY: forwarded from the caller; the range lies inside the peer's window.
            unsafe { copy_widest(dst, self.base(peer).byte_add(src_off as usize), bytes, scope.threads()) }
        }

        /// Writes `bytes` from `src` as LL packets of type `P` carrying `flag` to byte `dst_off` of
        /// rank `peer`'s window (`peer` may be this rank), where they take
        /// [`packet_bytes`]`::<P>(bytes)`: twice `bytes`. Shared by the threads of `scope` (packet
        /// `i` by its thread `i % count`, [`crate::packet::copy_to_packets`]). No signal, no fence
        /// and no barrier: every payload is stored with its flag in one volatile access, and the
        /// peer's [`Window::read_packets`] waits for the flag packet by packet.
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) for a peer outside the team, packets
        /// outside the window or misaligned, or a size that is not whole payloads
        /// ([`Window::holds_packets`]), a source not aligned to the payload, or flag 0.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `src` valid for `bytes` and aligned to `P::PAYLOAD_BYTES`;
        /// every thread of `scope` calls it with the same arguments; the destination packets are
        /// free (the flag discipline of [`crate::packet`]): whoever reads them has read what they
        /// carried before, and `flag` is not the flag they carry now.
        #[inline(always)]
        pub unsafe fn put_packets<P: Packet>(
            &self,
            peer: u32,
            dst_off: u64,
            src: GlobalPtr<u8>,
            bytes: u64,
            flag: u32,
            scope: Scope,
        ) {
            device_assert!(self.is_member(peer), "Window::put_packets: peer outside the team");
            device_assert!(
                self.holds_packets::<P>(dst_off, bytes),
                "Window::put_packets: packets outside the window, misaligned, or not whole payloads"
            );
            device_assert!(flag != 0, "Window::put_packets: flag 0 marks an empty packet");
            // SAFETY: forwarded from the caller; the packets lie inside the peer's window,
            // aligned (checked above with ASSERTS, the caller's contract without).
            unsafe {
                let dst = self.base(peer).byte_add(dst_off as usize).cast::<P>();
                copy_to_packets::<P>(dst, src, bytes, flag, scope.threads());
            }
        }

        /// Waits for the LL packets of type `P` that carry `bytes` of data with `flag` at byte
        /// `src_off` of this rank's own window (written there by [`Window::put_packets`] of any
        /// rank) and writes their data to `dst` (any global memory of this GPU), shared by the
        /// threads of `scope` (packet `i` by its thread `i % count`: each thread waits for its
        /// own packets only, [`crate::packet::copy_from_packets`]). Prints and traps when a
        /// packet does not arrive within `budget` (each packet has the whole budget).
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) as [`Window::put_packets`] does for
        /// the packets, and for a destination not aligned to the payload.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `dst` valid for `bytes`, aligned to `P::PAYLOAD_BYTES`, and
        /// not overlapping the packets; every thread of `scope` calls it with the same arguments.
        #[inline(always)]
        pub unsafe fn read_packets<P: Packet>(
            &self,
            src_off: u64,
            dst: GlobalPtr<u8>,
            bytes: u64,
            flag: u32,
            scope: Scope,
            budget: SpinBudget,
        ) {
            device_assert!(
                self.holds_packets::<P>(src_off, bytes),
                "Window::read_packets: packets outside the window, misaligned, or not whole payloads"
            );
            // SAFETY: forwarded from the caller; the packets lie inside this rank's window.
            unsafe {
                let src = self.local.byte_add(src_off as usize).cast::<P>();
                copy_from_packets::<P>(dst, src, bytes, flag, scope.threads(), budget);
            }
        }

        /// [`Window::put`], then the group's barrier ([`Scope::sync`]), then its first thread
        /// [`Window::signal`]s `slot` of `peer`: a peer that waits for the signal
        /// ([`Window::wait_signal`], [`Window::wait_signal_in`]) sees every byte of the put.
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) as [`Window::put`] does, and for a
        /// slot out of range (before copying).
        ///
        /// # Safety
        /// As for [`Window::put`] and [`Scope::sync`].
        #[inline(always)]
        pub unsafe fn put_signal(
            &self,
            peer: u32,
            dst_off: u64,
            src: GlobalPtr<u8>,
            bytes: u64,
            slot: u32,
            scope: Scope,
        ) {
            device_assert!(slot < self.slots, "Window::put_signal: slot out of range");
            // SAFETY: forwarded from the caller. Partner of the signal: the peer's acquire in
            // `wait_signal`, after the group's barrier has gathered every thread's stores.
            unsafe {
                self.put(peer, dst_off, src, bytes, scope);
                scope.sync();
                if scope.is_leader() {
                    self.signal(peer, slot);
                }
            }
        }

        /// [`Window::wait_signal`] by the group's first thread, then the group's barrier: every
        /// thread of `scope` may read what `from` wrote before its signals.
        ///
        /// # Safety
        /// As for [`Window::wait_signal`] and [`Scope::sync`].
        #[inline(always)]
        pub unsafe fn wait_signal_in(&self, scope: Scope, slot: u32, from: u32, value: u64, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe {
                if scope.is_leader() {
                    self.wait_signal(slot, from, value, budget);
                }
                scope.sync();
            }
        }

        /// The team barrier ([`Window::barrier`]) for a group: the group's barrier, its first
        /// thread runs the team barrier, the group's barrier again. Afterwards every thread of
        /// the group sees what any thread of any rank's group wrote before it.
        ///
        /// # Safety
        /// As for [`Window::barrier`] and [`Scope::sync`]: one group per rank uses the barrier at
        /// a time, every rank's group the same number of times.
        #[inline(always)]
        pub unsafe fn barrier_in(&self, scope: Scope, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe {
                scope.sync();
                if scope.is_leader() {
                    self.barrier(budget);
                }
                scope.sync();
            }
        }

        /// A `T` at byte `offset` of rank `rank`'s window, as mapped into this GPU's address
        /// space (this rank's own window for `rank == self.rank`). Plain loads and stores through
        /// it reach the peer's memory over NVLink (or the same GPU's memory).
        ///
        /// With [`crate::ASSERTS`], fails (prints and traps) for a rank outside the team, or a
        /// `T` outside the window or misaligned.
        ///
        /// Compiled for nvptx64 only (it reads the table of addresses in device memory).
        ///
        /// # Safety
        /// The handle must come from the host runtime for this GPU, and its window must still be
        /// registered.
        #[inline(always)]
        pub unsafe fn peer<T>(&self, rank: u32, offset: u64) -> GlobalPtr<T> {
            device_assert!(self.is_member(rank), "Window::peer: rank outside the team");
            device_assert!(self.holds::<T>(offset), "Window::peer: offset outside the window or misaligned");
            // SAFETY: forwarded from the caller; `rank` is in the team.
            unsafe { self.base(rank) }.byte_add(offset as usize).cast()
        }

        /// Word `word` of rank `rank`'s signal area, as mapped here.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `rank` is in the team.
        #[inline(always)]
        unsafe fn peer_signal(&self, rank: u32, word: u64) -> *mut u64 {
            // SAFETY: `peer_signals` holds `size` addresses (the caller's contract).
            let base = unsafe { self.peer_signals.add(rank as usize).as_ptr().read() };
            GlobalPtr::<u64>::from_addr(base).add(word as usize).as_ptr()
        }

        /// Adds 1 to rank `peer`'s signal word of `slot` for this rank: a release at system
        /// scope, so every write this thread made (or synchronised with) before it is visible to
        /// a peer whose [`Window::wait_signal`] sees the new value. `peer` may be this rank.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `peer` in the team and `slot` below `slots` (checked with
        /// [`crate::ASSERTS`]).
        #[inline(always)]
        pub unsafe fn signal(&self, peer: u32, slot: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { self.signal_add(peer, slot, 1) }
        }

        /// Adds `value` to rank `peer`'s signal word of `slot` for this rank (release, system
        /// scope; see [`Window::signal`]). Several threads may add to one word.
        ///
        /// # Safety
        /// As for [`Window::signal`].
        #[inline(always)]
        pub unsafe fn signal_add(&self, peer: u32, slot: u32, value: u64) {
            device_assert!(self.is_member(peer), "Window::signal: peer outside the team");
            device_assert!(slot < self.slots, "Window::signal: slot out of range");
            // SAFETY: the peer's signal word for this rank (caller's contract); only atomics
            // touch it. Partner: the peer's acquire load in `wait_signal`.
            unsafe {
                let word = self.peer_signal(peer, Self::signal_word(self.size, slot, self.rank));
                atomic::red_add::<Release, Sys, u64>(word, value);
            }
        }

        /// The value of this rank's signal word of `slot` from rank `from` (an acquire load).
        ///
        /// # Safety
        /// As for [`Window::peer`]; `from` in the team and `slot` below `slots` (checked with
        /// [`crate::ASSERTS`]).
        #[inline(always)]
        pub unsafe fn signal_value(&self, slot: u32, from: u32) -> u64 {
            device_assert!(self.is_member(from), "Window::signal_value: rank outside the team");
            device_assert!(slot < self.slots, "Window::signal_value: slot out of range");
            let word = self.signals.add(Self::signal_word(self.size, slot, from) as usize);
            // SAFETY: this rank's signal word (caller's contract). Partner: `signal_add`.
            unsafe { atomic::load::<Acquire, Sys, u64>(word.as_ptr()) }
        }

        /// Waits until this rank's signal word of `slot` from rank `from` reaches `value`
        /// (wrap-around safe), with acquire: what `from` wrote before the signals that made it
        /// reach `value` is visible afterwards. Prints and traps when `budget` runs out.
        ///
        /// # Safety
        /// As for [`Window::signal_value`].
        #[inline(always)]
        pub unsafe fn wait_signal(&self, slot: u32, from: u32, value: u64, budget: SpinBudget) {
            device_assert!(self.is_member(from), "Window::wait_signal: rank outside the team");
            device_assert!(slot < self.slots, "Window::wait_signal: slot out of range");
            let word = self.signals.add(Self::signal_word(self.size, slot, from) as usize);
            spin_until(budget, c"Window::wait_signal", || {
                // SAFETY: as for `signal_value`. Partner: `signal_add` (release).
                reached(unsafe { atomic::load::<Acquire, Sys, u64>(word.as_ptr()) }, value)
            });
        }

        /// Sets this rank's signal word of `slot` from rank `from` back to 0.
        ///
        /// # Safety
        /// As for [`Window::signal_value`]; no signal toward this word may be in flight or come
        /// before the reset is ordered before it (for instance by a barrier), or it is lost.
        #[inline(always)]
        pub unsafe fn reset(&self, slot: u32, from: u32) {
            device_assert!(self.is_member(from), "Window::reset: rank outside the team");
            device_assert!(slot < self.slots, "Window::reset: slot out of range");
            let word = self.signals.add(Self::signal_word(self.size, slot, from) as usize);
            // SAFETY: this rank's signal word (caller's contract).
            unsafe { atomic::store::<Relaxed, Sys, u64>(word.as_ptr(), 0) }
        }

        /// A barrier of the whole team: this rank stores its next barrier epoch into every
        /// peer's barrier word for it (release, system scope), then waits until every peer's
        /// word here has reached that epoch (acquire). Afterwards every write that any rank made
        /// (or synchronised with) before its barrier is visible here. Prints and traps when one
        /// wait runs out of `budget`.
        ///
        /// One thread per rank calls it, every rank the same number of times (the epoch persists
        /// across launches in the signal area); the other threads of the kernel synchronise
        /// with that thread before (their writes) and after (their reads), with `bar.sync` or a
        /// grid barrier.
        ///
        /// # Safety
        /// As for [`Window::peer`]; no other thread of this rank uses the barrier concurrently.
        #[inline(always)]
        pub unsafe fn barrier(&self, budget: SpinBudget) {
            let epoch_at = self.signals.add(Self::epoch_word(self.size, self.slots) as usize).as_ptr();
            // SAFETY: this rank's private epoch word, used by the one barrier thread (caller's
            // contract): plain accesses.
            let epoch = unsafe { epoch_at.read() }.wrapping_add(1);
            // SAFETY: as above.
            unsafe { epoch_at.write(epoch) };
            for p in (0..self.size).filter(|&p| p != self.rank) {
                // SAFETY: the peer's barrier word for this rank, written by this rank only.
                // Partner: the peer's acquire loads below.
                unsafe {
                    let word = self.peer_signal(p, Self::barrier_word(self.rank));
                    atomic::store::<Release, Sys, u64>(word, epoch);
                }
            }
            for p in (0..self.size).filter(|&p| p != self.rank) {
                let word = self.signals.add(Self::barrier_word(p) as usize);
                spin_until(budget, c"Window::barrier", || {
                    // SAFETY: this rank's barrier word for `p`. Partner: `p`'s release store.
                    reached(unsafe { atomic::load::<Acquire, Sys, u64>(word.as_ptr()) }, epoch)
                });
            }
        }
    }

    impl WindowSwitch {
        /// Rank `rank`'s copy of element `index`, as mapped here.
        ///
        /// # Safety
        /// As for [`Window::peer`]; `rank` is in the team.
        #[inline(always)]
        unsafe fn copy_of<V>(&self, rank: u32, index: usize) -> *mut V {
            device_assert!(self.holds::<V>(index), "WindowSwitch: element index out of range or misaligned");
            // SAFETY: forwarded from the caller; the element lies inside the window.
            unsafe { self.window.base(rank) }.byte_add(self.at::<V>(index) as usize).cast::<V>().as_ptr()
        }

        /// Element `index` in the window's multicast mapping, or `None` without one.
        ///
        /// # Safety
        /// As for [`Window::multimem`].
        #[inline(always)]
        unsafe fn mc<V>(&self, index: usize) -> Option<MultimemPtr<V>> {
            device_assert!(self.holds::<V>(index), "WindowSwitch: element index out of range or misaligned");
            // SAFETY: forwarded from the caller.
            unsafe { self.window.multimem::<V>(self.at::<V>(index)) }
        }

        /// Adds 1 to this rank's word of the slot in every rank's signal area (this rank's own
        /// included), with order `O` at system scope.
        ///
        /// # Safety
        /// As for [`SwitchGroup::signal`].
        #[inline(always)]
        unsafe fn signal_with<O: StoreOrder>(&self) {
            let w = &self.window;
            device_assert!(self.slot < w.slots, "WindowSwitch: slot out of range");
            let word = self.signal_word(w.rank);
            for p in 0..w.size {
                // SAFETY: rank p's signal word for this rank (the caller's contract: a handle
                // from the host), written by this rank only, through atomics only. Partner:
                // rank p's loads in `wait_with` (and this rank's own, for p == rank).
                unsafe { atomic::red_add::<O, Sys, u64>(w.peer_signal(p, word), 1) };
            }
        }

        /// Waits until every other rank's word of the slot here has reached this rank's own
        /// (loads with order `O`, system scope); `budget` per rank.
        ///
        /// # Safety
        /// As for [`SwitchGroup::wait`].
        #[inline(always)]
        unsafe fn wait_with<O: LoadOrder>(&self, budget: SpinBudget) {
            let w = &self.window;
            device_assert!(self.slot < w.slots, "WindowSwitch: slot out of range");
            let own = w.signals.add(self.signal_word(w.rank) as usize).as_ptr();
            // This rank's signals reach its own word through `peer_signals[rank]`: the same
            // address as `own`, so that program order orders the load below after them.
            // SAFETY: the handle's table holds `size` addresses (the caller's contract).
            let unaliased = || unsafe { w.peer_signal(w.rank, 0) } == w.signals.as_ptr();
            device_assert!(unaliased(), "WindowSwitch: own signals aliased");
            // SAFETY: this rank's own word of the slot, written by this thread's signals only
            // (one thread per handle at a time): it reads this rank's count. Relaxed: what it
            // orders comes from the other ranks' words.
            let count = unsafe { atomic::load::<Relaxed, Sys, u64>(own) };
            for q in (0..w.size).filter(|&q| q != w.rank) {
                let word = w.signals.add(self.signal_word(q) as usize).as_ptr();
                spin_until(budget, c"WindowSwitch::wait", || {
                    // SAFETY: rank q's word of the slot here. Partner: q's `signal_with`.
                    reached(unsafe { atomic::load::<O, Sys, u64>(word) }, count)
                });
            }
        }
    }

    impl SwitchGroup for WindowSwitch {
        #[inline(always)]
        fn elements<V>(&self) -> u64 {
            self.len_of::<V>()
        }

        #[inline(always)]
        unsafe fn local<V>(&self, index: usize) -> GlobalPtr<V> {
            self.element::<V>(index)
        }

        #[inline(always)]
        unsafe fn reduce<V: SwitchElem>(&self, index: usize) -> V {
            // SAFETY: an in-bounds element of every rank's copy (the caller's contract), written
            // before the barrier round this thread is ordered after.
            unsafe {
                if let Some(mc) = self.mc::<V>(index) {
                    return V::mc_reduce(mc);
                }
                // Ranks in order 0..size, so every rank computes the same sum bit for bit.
                let mut acc = self.copy_of::<V>(0, index).read();
                for r in 1..self.window.size {
                    acc = acc.add(self.copy_of::<V>(r, index).read());
                }
                acc
            }
        }

        #[inline(always)]
        unsafe fn broadcast<V: SwitchElem>(&self, index: usize, value: V) {
            // SAFETY: an in-bounds element of every rank's copy (the caller's contract).
            unsafe {
                if let Some(mc) = self.mc::<V>(index) {
                    return crate::multimem::multimem_st::<V>(mc, value);
                }
                for r in 0..self.window.size {
                    self.copy_of::<V>(r, index).write(value);
                }
            }
        }

        #[inline(always)]
        unsafe fn signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.signal_with::<Release>() }
        }

        #[inline(always)]
        unsafe fn relaxed_signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.signal_with::<Relaxed>() }
        }

        #[inline(always)]
        unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.wait_with::<Acquire>(budget) }
        }

        #[inline(always)]
        unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.wait_with::<Relaxed>(budget) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(size: u32, bytes: u64) -> Window {
        Window {
            rank: 1,
            size,
            bytes,
            local: GlobalPtr::from_addr(0x10_0000),
            bases: GlobalPtr::from_addr(0x20_0000),
            signals: GlobalPtr::from_addr(0x30_0000),
            peer_signals: GlobalPtr::from_addr(0x40_0000),
            slots: Window::DEFAULT_SLOTS,
            reserved: 0,
            multicast: 0,
        }
    }

    /// The layout is what the host writes and the GPU reads: every field's offset, the size.
    #[test]
    fn layout_is_pinned() {
        use core::mem::{align_of, offset_of, size_of};
        assert_eq!(size_of::<Window>(), 64);
        assert_eq!(align_of::<Window>(), 8);
        assert_eq!(offset_of!(Window, rank), 0);
        assert_eq!(offset_of!(Window, size), 4);
        assert_eq!(offset_of!(Window, bytes), 8);
        assert_eq!(offset_of!(Window, local), 16);
        assert_eq!(offset_of!(Window, bases), 24);
        assert_eq!(offset_of!(Window, signals), 32);
        assert_eq!(offset_of!(Window, peer_signals), 40);
        assert_eq!(offset_of!(Window, slots), 48);
        assert_eq!(offset_of!(Window, reserved), 52);
        assert_eq!(offset_of!(Window, multicast), 56);
        let w = Window { multicast: 0x50_0000, ..window(4, 1 << 20) };
        let b = bytemuck::bytes_of(&w);
        assert_eq!(&b[4..8], &4u32.to_le_bytes());
        assert_eq!(&b[16..24], &0x10_0000u64.to_le_bytes());
        assert_eq!(&b[56..64], &0x50_0000u64.to_le_bytes());
    }

    /// Every word of the signal area has one writer: barrier words, then slot after slot, then
    /// the epoch, all distinct and inside the area.
    #[test]
    fn signal_words_are_distinct_and_inside_the_area() {
        for size in [1u32, 2, 3, 8] {
            for slots in [0u32, 1, 8] {
                let words = Window::signal_words(size, slots).unwrap();
                let mut seen = std::collections::BTreeSet::new();
                for from in 0..size {
                    assert!(seen.insert(Window::barrier_word(from)));
                    for slot in 0..slots {
                        assert!(seen.insert(Window::signal_word(size, slot, from)));
                    }
                }
                assert!(seen.insert(Window::epoch_word(size, slots)));
                assert_eq!(seen.len() as u64, words);
                assert_eq!(*seen.last().unwrap(), words - 1);
            }
        }
        assert_eq!(Window::signal_words(u32::MAX, u32::MAX), Some(u32::MAX as u64 * (1 << 32) + 1));
    }

    #[test]
    fn bounds_and_alignment() {
        let w = window(4, 4096);
        assert!(w.is_member(0) && w.is_member(3) && !w.is_member(4) && !w.is_member(u32::MAX));
        assert!(w.holds::<u64>(0));
        assert!(w.holds::<u64>(4088));
        assert!(!w.holds::<u64>(4089), "past the end");
        assert!(!w.holds::<u64>(4092), "past the end and misaligned");
        assert!(!w.holds::<u64>(4), "misaligned");
        assert!(w.holds::<u8>(4095));
        assert!(!w.holds::<u8>(4096));
        assert!(!w.holds::<u8>(u64::MAX), "offset + size wraps");
        assert!(w.holds::<[u8; 0]>(4096), "an empty element at the end");
        assert!(Window::fits(0, 0, 0));
        assert!(!Window::fits(u64::MAX, 2, u64::MAX));
        assert_eq!(w.local::<u32>(8).addr(), 0x10_0008);
    }

    /// The bounds `put`, `get` and `put_signal` check: any offset and length (no alignment),
    /// the end of the window included, nothing past it, no wrap-around.
    #[test]
    fn copy_spans() {
        let w = window(4, 4096);
        assert!(w.spans(0, 4096));
        assert!(w.spans(4095, 1) && w.spans(3, 13), "unaligned ranges are fine");
        assert!(w.spans(4096, 0), "an empty copy at the end");
        assert!(!w.spans(4096, 1));
        assert!(!w.spans(1, 4096), "one byte past the end");
        assert!(!w.spans(0, 4097));
        assert!(!w.spans(u64::MAX, 2), "offset + length wraps");
        assert!(!w.spans(2, u64::MAX), "offset + length wraps");
        assert!(!window(4, 0).spans(0, 1));
    }

    /// The bounds `put_packets` and `read_packets` check: whole payloads, packet-aligned, and
    /// the packets (twice the data) inside the window, without wrap-around.
    #[test]
    fn packet_spans() {
        use crate::packet::{LL8Packet, LL16Packet};
        let w = window(4, 4096);
        assert!(w.holds_packets::<LL16Packet>(0, 2048), "2 KiB of data fill the window");
        assert!(!w.holds_packets::<LL16Packet>(0, 2056), "one packet past the end");
        assert!(w.holds_packets::<LL16Packet>(4096, 0), "no packets at the end");
        assert!(w.holds_packets::<LL16Packet>(2048, 1024) && !w.holds_packets::<LL16Packet>(2064, 1024));
        assert!(!w.holds_packets::<LL16Packet>(8, 8), "LL16 packets are 16-byte aligned");
        assert!(!w.holds_packets::<LL16Packet>(0, 4), "half a payload");
        assert!(w.holds_packets::<LL8Packet>(8, 4) && w.holds_packets::<LL8Packet>(4088, 4));
        assert!(!w.holds_packets::<LL8Packet>(4, 4), "LL8 packets are 8-byte aligned");
        assert!(!w.holds_packets::<LL8Packet>(0, 6), "not whole payloads");
        assert!(!w.holds_packets::<LL16Packet>(0, u64::MAX - 7), "the packets' size saturates");
        assert!(!w.holds_packets::<LL16Packet>(u64::MAX - 15, 8), "offset + packets wraps");
        assert!(!window(4, 0).holds_packets::<LL8Packet>(0, 4));
    }

    #[test]
    #[should_panic(expected = "Window::local: offset outside the window")]
    fn local_refuses_an_offset_past_the_window() {
        let _ = window(2, 64).local::<u64>(64);
    }

    #[test]
    #[should_panic(expected = "Window::local: offset outside the window")]
    fn local_refuses_a_misaligned_offset() {
        let _ = window(2, 64).local::<u32>(2);
    }

    /// A multicast address only where the handle has one, at the window's offsets.
    #[test]
    fn multimem_only_with_a_multicast_address() {
        // SAFETY: no multicast address: none is made.
        let none = unsafe { window(2, 4096).multimem::<u64>(8) };
        assert_eq!(none, None, "the host's handles have none");
        let w = Window { multicast: 0x50_0000, ..window(2, 4096) };
        // SAFETY: an address value only, never dereferenced.
        let some = unsafe { w.multimem::<u64>(4088) };
        assert_eq!(some.map(|p| p.addr()), Some(0x50_0ff8));
    }

    #[test]
    #[should_panic(expected = "Window::multimem: offset outside the window")]
    fn multimem_refuses_an_offset_past_the_window() {
        let w = Window { multicast: 0x50_0000, ..window(2, 64) };
        // SAFETY: refused before any address is made.
        let _ = unsafe { w.multimem::<u64>(64) };
    }

    /// A switch group's elements: whole elements of the range (none of a zero-sized type), at
    /// the range's offset in this rank's window; only those inside the window and aligned.
    #[test]
    fn switch_group_elements_and_bounds() {
        use crate::vec::{Bf16x8, F32x4};
        let w = window(4, 4096);
        let g = w.switch_group(256, 100, 3);
        assert_eq!((g.offset(), g.bytes(), g.slot(), *g.window()), (256, 100, 3, w));
        assert_eq!((g.len_of::<F32x4>(), g.len_of::<Bf16x8>(), g.len_of::<u32>(), g.len_of::<u8>()), (6, 6, 25, 100));
        assert!(g.holds::<F32x4>(5) && !g.holds::<F32x4>(6));
        assert!(g.holds::<u8>(99) && !g.holds::<u8>(100));
        assert_eq!(g.at::<F32x4>(5), 256 + 80);
        assert_eq!(g.element::<F32x4>(5).addr(), 0x10_0000 + 256 + 80);
        assert_eq!(g.element::<u8>(0).addr(), 0x10_0100);
        // A zero-sized element divided by zero: no elements.
        assert_eq!(g.len_of::<()>(), 0);
        assert!(!g.holds::<()>(0));
        // The whole window, and the empty range at its end.
        let all = w.switch_group(0, 4096, 0);
        assert_eq!(all.len_of::<u64>(), 512);
        assert!(all.holds::<u64>(511) && !all.holds::<u64>(512));
        assert_eq!(w.switch_group(4096, 0, 7).len_of::<u8>(), 0);
        // A range at an offset `V` does not divide: elements exist, none is aligned.
        let odd = w.switch_group(4, 64, 0);
        assert_eq!(odd.len_of::<F32x4>(), 4);
        assert!(odd.holds::<u32>(0) && !odd.holds::<F32x4>(0) && !odd.holds::<u64>(1));
        // Indices far past the range wrap nowhere.
        assert!(!all.holds::<u64>(usize::MAX) && !all.holds::<u8>(1 << 40));
    }

    /// The words a switch group's signals add to: its slot's word of each rank, distinct for
    /// distinct slots and inside the signal area.
    #[test]
    fn switch_group_signal_words_are_its_slots() {
        for size in [1u32, 2, 8] {
            let w = window(size, 4096);
            let words = Window::signal_words(size, w.slots).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for slot in 0..w.slots {
                let g = w.switch_group(0, 64, slot);
                for from in 0..size {
                    assert_eq!(g.signal_word(from), Window::signal_word(size, slot, from));
                    assert!(g.signal_word(from) < words && seen.insert(g.signal_word(from)));
                    assert!((0..size).all(|p| g.signal_word(from) != Window::barrier_word(p)));
                }
            }
            assert!(!seen.contains(&Window::epoch_word(size, w.slots)));
        }
    }

    #[test]
    #[should_panic(expected = "Window::switch_group: range outside the window")]
    fn switch_group_refuses_a_range_past_the_window() {
        let _ = window(2, 4096).switch_group(4000, 97, 0);
    }

    #[test]
    #[should_panic(expected = "Window::switch_group: range outside the window")]
    fn switch_group_refuses_a_wrapping_range() {
        let _ = window(2, 4096).switch_group(16, u64::MAX, 0);
    }

    #[test]
    #[should_panic(expected = "Window::switch_group: slot out of range")]
    fn switch_group_refuses_a_slot_past_the_slots() {
        let _ = window(2, 4096).switch_group(0, 64, Window::DEFAULT_SLOTS);
    }

    #[test]
    #[should_panic(expected = "WindowSwitch: element index out of range or misaligned")]
    fn switch_group_element_refuses_an_index_past_the_range() {
        let _ = window(2, 4096).switch_group(64, 64, 0).element::<u64>(8);
    }
}
