//! LL ("low latency") packets: data and a flag written together, so a reader that sees the flag
//! also sees the data, with no separate signal and no fence.
//!
//! ```text
//!  LL16Packet (16 bytes, one 16-byte volatile access):  [ data lo | flag | data hi | flag ]
//!  LL8Packet  ( 8 bytes, one  8-byte volatile access):  [ data    | flag ]
//!
//!  sender                                  receiver (owns the packet buffer)
//!  p.write(data, flag) ──── NVLink ──────► p.read(flag, budget): spin on one volatile load
//!                                          until every flag word == flag, return the data
//! ```
//!
//! What makes a packet safe to accept is that each 8-byte half (a data word and its flag) is
//! written by one aligned 8-byte store and arrives as a unit. That is why an LL16 packet carries
//! two flags: the 16-byte access is for efficiency only, and a reader that sees one half of a new
//! packet and one half of an old one rejects it and polls again.
//!
//! Flag discipline (the caller's part):
//! * Flag `0` means "empty": packet buffers start zeroed, and
//!   [`GlobalPtr::clear`](crate::ptr::GlobalPtr::clear) writes zeros. Never send with flag 0.
//! * Every message (round) that reuses a packet slot uses a new flag, e.g. `round + 1` counting
//!   from the first use of the buffer, both sides computing it the same way. A reader waiting for
//!   flag `f` then never accepts a stale packet of an earlier round (its flag differs), and
//!   needs no clearing between rounds. A `u32` flag repeats after 2^32 - 1 rounds; skip 0 when it
//!   wraps.
//! * A sender may overwrite a slot only after the receiver has read it. Ping-pong protocols get
//!   this for free (the reply proves the read); one-way streams alternate two halves of the
//!   buffer by flag parity, which suffices when each round's reader finishes before it takes
//!   part in the next round.

/// 8 bytes of data in 16 bytes: two data words, each followed by its own copy of the flag.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LL16Packet {
    /// Low 32 bits of the data.
    pub data1: u32,
    /// The flag, written with `data1`.
    pub flag1: u32,
    /// High 32 bits of the data.
    pub data2: u32,
    /// The flag, written with `data2`.
    pub flag2: u32,
}
static_assertions::assert_eq_size!(LL16Packet, [u64; 2]);
static_assertions::const_assert_eq!(core::mem::align_of::<LL16Packet>(), 16);
static_assertions::const_assert_eq!(core::mem::offset_of!(LL16Packet, flag1), 4);
static_assertions::const_assert_eq!(core::mem::offset_of!(LL16Packet, data2), 8);
static_assertions::const_assert_eq!(core::mem::offset_of!(LL16Packet, flag2), 12);
// SAFETY: repr(C) of four u32, no padding (asserted), the same on host and device.
unsafe impl crate::abi::DeviceAbi for LL16Packet {}

/// 4 bytes of data in 8 bytes: a data word followed by the flag.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LL8Packet {
    /// The data.
    pub data: u32,
    /// The flag, written with the data.
    pub flag: u32,
}
static_assertions::assert_eq_size!(LL8Packet, u64);
static_assertions::const_assert_eq!(core::mem::align_of::<LL8Packet>(), 8);
static_assertions::const_assert_eq!(core::mem::offset_of!(LL8Packet, flag), 4);
// SAFETY: repr(C) of two u32, no padding (asserted).
unsafe impl crate::abi::DeviceAbi for LL8Packet {}

impl LL16Packet {
    /// The packet carrying `data` (low word first) with `flag`, as the device writes it.
    pub const fn new(data: u64, flag: u32) -> Self {
        Self { data1: data as u32, flag1: flag, data2: (data >> 32) as u32, flag2: flag }
    }
    /// The data, when both flags equal `flag`.
    pub const fn data_if(self, flag: u32) -> Option<u64> {
        if self.flag1 == flag && self.flag2 == flag {
            Some(self.data1 as u64 | (self.data2 as u64) << 32)
        } else {
            None
        }
    }
}

impl LL8Packet {
    /// The packet carrying `data` with `flag`.
    pub const fn new(data: u32, flag: u32) -> Self {
        Self { data, flag }
    }
    /// The data, when the flag equals `flag`.
    pub const fn data_if(self, flag: u32) -> Option<u32> {
        if self.flag == flag { Some(self.data) } else { None }
    }
}

mod sealed {
    pub trait Sealed {}
}
impl sealed::Sealed for LL16Packet {}
impl sealed::Sealed for LL8Packet {}

/// An LL packet type: [`LL16Packet`] or [`LL8Packet`] (sealed).
pub trait Packet: sealed::Sealed + bytemuck::Pod {
    /// The data one packet carries: `u64` (LL16) or `u32` (LL8).
    type Payload: Copy + Default + PartialEq + core::fmt::Debug;
    /// Bytes of data per packet (8 or 4); a packet takes twice that in the packet buffer.
    const PAYLOAD_BYTES: u64;
    /// The name a timed-out read prints.
    #[doc(hidden)]
    const READ_NAME: &'static core::ffi::CStr;

    /// One volatile store of the whole packet.
    ///
    /// # Safety
    /// `p` valid for the packet in the global state space and aligned to it.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn store(p: *mut Self, data: Self::Payload, flag: u32);
    /// One volatile load of the whole packet; the data if every flag equals `flag`.
    ///
    /// # Safety
    /// As for `store`, for reads.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn load(p: *const Self, flag: u32) -> Option<Self::Payload>;
    /// A plain load of one payload from a data buffer.
    ///
    /// # Safety
    /// `p` valid for `PAYLOAD_BYTES` in the global state space and aligned to it.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn load_payload(p: *const u8) -> Self::Payload;
    /// A plain store of one payload into a data buffer.
    ///
    /// # Safety
    /// As for `load_payload`, for writes.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn store_payload(p: *mut u8, v: Self::Payload);
}

impl Packet for LL16Packet {
    type Payload = u64;
    const PAYLOAD_BYTES: u64 = 8;
    const READ_NAME: &'static core::ffi::CStr = c"LL16Packet::read";

    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn store(p: *mut Self, data: u64, flag: u32) {
        // SAFETY: forwarded from the caller.
        unsafe {
            crate::ptx::ld_st::st_volatile_global_v4_u32(p.cast(), [data as u32, flag, (data >> 32) as u32, flag])
        }
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn load(p: *const Self, flag: u32) -> Option<u64> {
        // SAFETY: forwarded from the caller.
        let [d1, f1, d2, f2] = unsafe { crate::ptx::ld_st::ld_volatile_global_v4_u32(p.cast()) };
        LL16Packet { data1: d1, flag1: f1, data2: d2, flag2: f2 }.data_if(flag)
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn load_payload(p: *const u8) -> u64 {
        // SAFETY: forwarded from the caller.
        unsafe { crate::ptx::ld_st::ld_global_u64(p.cast()) }
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn store_payload(p: *mut u8, v: u64) {
        // SAFETY: forwarded from the caller.
        unsafe { crate::ptx::ld_st::st_global_u64(p.cast(), v) }
    }
}

impl Packet for LL8Packet {
    type Payload = u32;
    const PAYLOAD_BYTES: u64 = 4;
    const READ_NAME: &'static core::ffi::CStr = c"LL8Packet::read";

    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn store(p: *mut Self, data: u32, flag: u32) {
        // SAFETY: forwarded from the caller.
        unsafe { crate::ptx::ld_st::st_volatile_global_v2_u32(p.cast(), [data, flag]) }
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn load(p: *const Self, flag: u32) -> Option<u32> {
        // SAFETY: forwarded from the caller.
        let [data, f] = unsafe { crate::ptx::ld_st::ld_volatile_global_v2_u32(p.cast()) };
        LL8Packet { data, flag: f }.data_if(flag)
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn load_payload(p: *const u8) -> u32 {
        // SAFETY: forwarded from the caller.
        unsafe { crate::ptx::ld_st::ld_global_u32(p.cast()) }
    }
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[inline(always)]
    unsafe fn store_payload(p: *mut u8, v: u32) {
        // SAFETY: forwarded from the caller.
        unsafe { crate::ptx::ld_st::st_global_u32(p.cast(), v) }
    }
}

/// Bytes of packet buffer that `bytes` of data take as packets of type `P` (`u64::MAX` when that
/// does not fit in a u64, which no allocation can satisfy).
pub const fn packet_bytes<P: Packet>(bytes: u64) -> u64 {
    (bytes / P::PAYLOAD_BYTES).saturating_mul(core::mem::size_of::<P>() as u64)
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::copy::Threads;
    use crate::device_assert;
    use crate::poll::{SpinBudget, spin_until};
    use crate::ptr::GlobalPtr;

    impl<P: Packet> GlobalPtr<P> {
        /// Writes `data` with `flag` in one volatile access (the flag must not be 0).
        ///
        /// # Safety
        /// `self` points to a packet slot in global memory (local or peer-mapped) that no
        /// reader still needs (see the module docs' flag discipline).
        #[inline(always)]
        pub unsafe fn write(self, data: P::Payload, flag: u32) {
            // SAFETY: forwarded from the caller.
            unsafe { P::store(self.as_ptr(), data, flag) }
        }

        /// One look at the packet: its data if it carries `flag` (in every flag word).
        ///
        /// # Safety
        /// `self` points to a packet slot in global memory.
        #[inline(always)]
        pub unsafe fn poll(self, flag: u32) -> Option<P::Payload> {
            // SAFETY: forwarded from the caller.
            unsafe { P::load(self.as_ptr(), flag) }
        }

        /// Waits until the packet carries `flag` and returns its data. Traps with a message
        /// naming the packet type if `budget` runs out.
        ///
        /// # Safety
        /// As for [`GlobalPtr::poll`].
        #[inline(always)]
        pub unsafe fn read(self, flag: u32, budget: SpinBudget) -> P::Payload {
            let mut got = None;
            spin_until(budget, P::READ_NAME, || {
                // SAFETY: forwarded from the caller.
                got = unsafe { P::load(self.as_ptr(), flag) };
                got.is_some()
            });
            match got {
                Some(v) => v,
                None => crate::poll::fail(c"packet read returned without data"),
            }
        }

        /// Writes zeros (data and flags): the slot reads as empty.
        ///
        /// # Safety
        /// As for [`GlobalPtr::write`].
        #[inline(always)]
        pub unsafe fn clear(self) {
            // SAFETY: forwarded from the caller.
            unsafe { P::store(self.as_ptr(), P::Payload::default(), 0) }
        }
    }

    /// Writes `bytes` of data from `src` as packets with `flag` to `dst[0..]`, shared by the
    /// threads of `t` (packet `i` by thread `i % t.count`).
    ///
    /// # Safety
    /// `src` valid global memory for `bytes`, aligned to `P::PAYLOAD_BYTES`; `bytes` a multiple of
    /// it (checked in debug/`checks` builds); `dst` valid for `packet_bytes::<P>(bytes)` and
    /// aligned to the packet; the slots free for writing (module docs).
    #[inline(always)]
    pub unsafe fn copy_to_packets<P: Packet>(dst: GlobalPtr<P>, src: GlobalPtr<u8>, bytes: u64, flag: u32, t: Threads) {
        device_assert!(bytes.is_multiple_of(P::PAYLOAD_BYTES), "put_packets: size not a multiple of the payload");
        device_assert!(src.is_aligned_to(P::PAYLOAD_BYTES as usize), "put_packets: source not aligned to the payload");
        let n = bytes / P::PAYLOAD_BYTES;
        for i in t.stride(n) {
            // SAFETY: packet i and payload i lie inside the ranges the caller vouched for.
            unsafe {
                let v = P::load_payload(src.as_ptr().add((i * P::PAYLOAD_BYTES) as usize));
                dst.add(i as usize).write(v, flag);
            }
        }
    }

    /// Waits for the packets `src[0..]` carrying `bytes` of data with `flag` and writes their data
    /// to `dst`, shared by the threads of `t` (packet `i` by thread `i % t.count`). Traps if a
    /// packet does not arrive within `budget`.
    ///
    /// # Safety
    /// As for [`copy_to_packets`] with the roles swapped.
    #[inline(always)]
    pub unsafe fn copy_from_packets<P: Packet>(
        dst: GlobalPtr<u8>,
        src: GlobalPtr<P>,
        bytes: u64,
        flag: u32,
        t: Threads,
        budget: SpinBudget,
    ) {
        device_assert!(bytes.is_multiple_of(P::PAYLOAD_BYTES), "unpack_packets: size not a multiple of the payload");
        device_assert!(
            dst.is_aligned_to(P::PAYLOAD_BYTES as usize),
            "unpack_packets: target not aligned to the payload"
        );
        let n = bytes / P::PAYLOAD_BYTES;
        for i in t.stride(n) {
            // SAFETY: as for `copy_to_packets`.
            unsafe {
                let v = src.add(i as usize).read(flag, budget);
                P::store_payload(dst.as_ptr().add((i * P::PAYLOAD_BYTES) as usize), v);
            }
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
pub use device::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_hold_data_and_flags_in_order() {
        let p = LL16Packet::new(0x1122_3344_5566_7788, 9);
        let words: [u32; 4] = bytemuck::cast(p);
        assert_eq!(words, [0x5566_7788, 9, 0x1122_3344, 9]);
        assert_eq!(p.data_if(9), Some(0x1122_3344_5566_7788));
        assert_eq!(p.data_if(8), None);
        // A torn packet (one half from another round) is rejected.
        let torn = LL16Packet { flag2: 8, ..p };
        assert_eq!(torn.data_if(9), None);
        assert_eq!(torn.data_if(8), None);
        assert_eq!(LL16Packet::default().data_if(0), Some(0), "a cleared slot carries flag 0 only");
        let q = LL8Packet::new(0xdead_beef, 3);
        assert_eq!(bytemuck::cast::<_, u64>(q), 0x0000_0003_dead_beef);
        assert_eq!(q.data_if(3), Some(0xdead_beef));
        assert_eq!(q.data_if(4), None);
    }

    #[test]
    fn packet_buffer_sizes() {
        assert_eq!(packet_bytes::<LL16Packet>(64), 128);
        assert_eq!(packet_bytes::<LL8Packet>(64), 128);
        // Sizes beyond a u64 saturate (they overflowed, a panic in debug builds).
        assert_eq!(packet_bytes::<LL16Packet>(u64::MAX), u64::MAX);
        assert_eq!(packet_bytes::<LL8Packet>(u64::MAX), u64::MAX);
        assert_eq!(packet_bytes::<LL16Packet>(u64::MAX / 2 + 1), u64::MAX);
        assert_eq!(LL16Packet::PAYLOAD_BYTES, 8);
        assert_eq!(LL8Packet::PAYLOAD_BYTES, 4);
    }
}
