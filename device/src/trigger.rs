//! The 16-byte trigger a GPU pushes to the host proxy: its wire format, [`ProxyTrigger::encode`]
//! and its mirror [`ProxyTrigger::decode`].
//!
//! A leaf module: the FIFO protocol ([`crate::protocol::fifo`]), the FIFO's device handle
//! ([`crate::fifo`]), the port channel and the host proxy all depend on it, and it depends on
//! none of them.
//!
//! ```text
//! word 0: size (bits 0..32) | src_offset (32..64)          (atomic add: the value)
//! word 1: dst_offset (0..32) | src_memory_id (32..41) | dst_memory_id (41..50)
//!         | type (50..53: Data=1, Flag=2, Sync=4; 0 = atomic add) | semaphore_id (53..63)
//!         | commit bit (63, set by the FIFO)
//! ```

use crate::abi::DeviceAbi;

/// Bit 63 of word 1: the commit bit the FIFO sets from the position's lap
/// ([`crate::protocol::fifo::commit_bit`]).
pub const COMMIT_BIT: u64 = 1 << 63;

/// Trigger type bits (word 1, bits 50..53). Type 0 is the atomic add.
pub mod kind {
    /// Copy `size` bytes from the source memory to the destination memory.
    pub const DATA: u8 = 1;
    /// Signal the channel's semaphore on the peer, after the earlier data is complete.
    pub const FLAG: u8 = 2;
    /// Drain outstanding copies, then publish the position (flush).
    pub const SYNC: u8 = 4;
    /// Type 0: add word 0 (a u64) to the u64 at `dst_offset` of the destination memory.
    pub const ATOMIC_ADD: u8 = 0;
}

/// Field widths and positions of the 16-byte trigger.
pub mod layout {
    /// Word 0, bits 0..32: bytes to copy.
    pub const SIZE_BITS: u32 = 32;
    /// Word 0, bits 32..64: source offset.
    pub const SRC_OFFSET_BITS: u32 = 32;
    /// Word 1, bits 0..32: destination offset.
    pub const DST_OFFSET_BITS: u32 = 32;
    /// Width of a memory id: the source's is word 1 bits 32..41, the destination's 41..50.
    pub const MEMORY_ID_BITS: u32 = 9;
    /// Shift of the source memory id in word 1.
    pub const SRC_MEMORY_SHIFT: u32 = 32;
    /// Shift of the destination memory id in word 1.
    pub const DST_MEMORY_SHIFT: u32 = 41;
    /// Shift of the 3 type bits in word 1.
    pub const TYPE_SHIFT: u32 = 50;
    /// Width of the type field.
    pub const TYPE_BITS: u32 = 3;
    /// Shift of the semaphore id in word 1.
    pub const SEMAPHORE_SHIFT: u32 = 53;
    /// Width of the semaphore id (bits 53..63).
    pub const SEMAPHORE_BITS: u32 = 10;
}

/// Largest memory id (9 bits).
pub const MAX_MEMORY_ID: u32 = (1 << layout::MEMORY_ID_BITS) - 1;
/// Largest semaphore id (10 bits).
pub const MAX_SEMAPHORE_ID: u32 = (1 << layout::SEMAPHORE_BITS) - 1;

/// One request to the host proxy: two 64-bit words (layout in the module docs). Built with
/// [`ProxyTrigger::encode`], read with [`ProxyTrigger::decode`].
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ProxyTrigger {
    /// Word 0.
    pub fst: u64,
    /// Word 1.
    pub snd: u64,
}
static_assertions::assert_eq_size!(ProxyTrigger, [u64; 2]);
static_assertions::assert_eq_align!(ProxyTrigger, u128);
// SAFETY: repr(C) of two u64 words.
unsafe impl DeviceAbi for ProxyTrigger {}

/// Why a trigger could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerError {
    /// The size does not fit in 32 bits.
    SizeTooLarge,
    /// The source offset does not fit in 32 bits.
    SrcOffsetTooLarge,
    /// The destination offset does not fit in 32 bits.
    DstOffsetTooLarge,
    /// A memory id is above 511.
    MemoryIdTooLarge,
    /// The semaphore id is above 1023.
    SemaphoreIdTooLarge,
    /// The type has bits outside Data | Flag | Sync.
    BadType,
}

impl TriggerError {
    /// A description as a C string (printable from the device).
    pub const fn message(self) -> &'static core::ffi::CStr {
        match self {
            Self::SizeTooLarge => c"proxy trigger: size does not fit in 32 bits",
            Self::SrcOffsetTooLarge => c"proxy trigger: source offset does not fit in 32 bits",
            Self::DstOffsetTooLarge => c"proxy trigger: destination offset does not fit in 32 bits",
            Self::MemoryIdTooLarge => c"proxy trigger: memory id above 511",
            Self::SemaphoreIdTooLarge => c"proxy trigger: semaphore id above 1023",
            Self::BadType => c"proxy trigger: type bits outside Data|Flag|Sync",
        }
    }
}

impl core::fmt::Display for TriggerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.message().to_str().unwrap_or("proxy trigger: invalid"))
    }
}

/// A trigger's request, field by field: what [`ProxyTrigger::encode`] takes and
/// [`ProxyTrigger::decode`] returns. Fields are named, destination before source, as in
/// `PortChannel::put(dst_off, src_off, bytes)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Data / Flag / Sync, any combination (Data first, then Flag, then Sync).
    Transfer {
        /// Type bits ([`kind`]: a non-empty combination of Data, Flag and Sync).
        kind: u8,
        /// Offset in the destination memory.
        dst_offset: u32,
        /// Offset in the source memory.
        src_offset: u32,
        /// Bytes to copy (Data).
        size: u32,
        /// Destination memory id (at most [`MAX_MEMORY_ID`]).
        dst_memory: u32,
        /// Source memory id (at most [`MAX_MEMORY_ID`]).
        src_memory: u32,
        /// Semaphore id (Flag; at most [`MAX_SEMAPHORE_ID`]).
        semaphore: u32,
    },
    /// Add `value` to the u64 at `dst_offset` of `dst_memory`.
    AtomicAdd {
        /// Offset in the destination memory.
        dst_offset: u32,
        /// The addend.
        value: u64,
        /// Destination memory id (at most [`MAX_MEMORY_ID`]).
        dst_memory: u32,
    },
}

/// `v` as a 32-bit trigger field, or `too_large` (for callers that hold 64-bit sizes and offsets,
/// such as the port channel).
#[inline(always)]
pub const fn field32(v: u64, too_large: TriggerError) -> Result<u32, TriggerError> {
    if v > u32::MAX as u64 { Err(too_large) } else { Ok(v as u32) }
}

impl ProxyTrigger {
    /// Encodes `request`, checking the ids and the type bits (the commit bit is left clear; the
    /// FIFO sets it). The mirror of [`ProxyTrigger::decode`]: `decode(encode(r)) == r` for every
    /// request that encodes.
    #[inline(always)]
    pub const fn encode(request: Request) -> Result<Self, TriggerError> {
        match request {
            Request::Transfer { kind, dst_offset, src_offset, size, dst_memory, src_memory, semaphore } => {
                if kind == 0 || kind & !(kind::DATA | kind::FLAG | kind::SYNC) != 0 {
                    return Err(TriggerError::BadType);
                }
                if src_memory > MAX_MEMORY_ID || dst_memory > MAX_MEMORY_ID {
                    return Err(TriggerError::MemoryIdTooLarge);
                }
                if semaphore > MAX_SEMAPHORE_ID {
                    return Err(TriggerError::SemaphoreIdTooLarge);
                }
                Ok(Self {
                    fst: size as u64 | ((src_offset as u64) << layout::SIZE_BITS),
                    snd: dst_offset as u64
                        | ((src_memory as u64) << layout::SRC_MEMORY_SHIFT)
                        | ((dst_memory as u64) << layout::DST_MEMORY_SHIFT)
                        | ((kind as u64) << layout::TYPE_SHIFT)
                        | ((semaphore as u64) << layout::SEMAPHORE_SHIFT),
                })
            }
            Request::AtomicAdd { dst_offset, value, dst_memory } => {
                if dst_memory > MAX_MEMORY_ID {
                    return Err(TriggerError::MemoryIdTooLarge);
                }
                Ok(Self { fst: value, snd: dst_offset as u64 | ((dst_memory as u64) << layout::DST_MEMORY_SHIFT) })
            }
        }
    }

    /// The type bits (0 = atomic add).
    #[inline(always)]
    pub const fn kind(&self) -> u8 {
        ((self.snd >> layout::TYPE_SHIFT) & 0b111) as u8
    }

    /// Decodes (the commit bit is ignored). The mirror of [`ProxyTrigger::encode`].
    #[inline(always)]
    pub const fn decode(&self) -> Request {
        let kind = self.kind();
        let dst_offset = self.snd as u32;
        let dst_memory = ((self.snd >> layout::DST_MEMORY_SHIFT) as u32) & MAX_MEMORY_ID;
        if kind == 0 {
            return Request::AtomicAdd { dst_offset, value: self.fst, dst_memory };
        }
        Request::Transfer {
            kind,
            dst_offset,
            src_offset: (self.fst >> layout::SIZE_BITS) as u32,
            size: self.fst as u32,
            dst_memory,
            src_memory: ((self.snd >> layout::SRC_MEMORY_SHIFT) as u32) & MAX_MEMORY_ID,
            semaphore: ((self.snd >> layout::SEMAPHORE_SHIFT) as u32) & MAX_SEMAPHORE_ID,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn transfer(kind: u8, dst_offset: u32, src_offset: u32, size: u32, dst: u32, src: u32, sem: u32) -> Request {
        Request::Transfer { kind, dst_offset, src_offset, size, dst_memory: dst, src_memory: src, semaphore: sem }
    }

    proptest! {
        #[test]
        fn transfer_round_trips(kind in 1u8..8, d: u32, so: u32, size: u32, dm in 0u32..512, sm in 0u32..512, sem in 0u32..1024) {
            let r = transfer(kind, d, so, size, dm, sm, sem);
            let t = ProxyTrigger::encode(r).unwrap();
            prop_assert_eq!(t.snd & COMMIT_BIT, 0);
            prop_assert_eq!(t.decode(), r);
            // The commit bit never disturbs the fields.
            let c = ProxyTrigger { fst: t.fst, snd: t.snd | COMMIT_BIT };
            prop_assert_eq!(c.decode(), t.decode());
        }

        #[test]
        fn atomic_add_round_trips(d: u32, v: u64, dm in 0u32..512) {
            let r = Request::AtomicAdd { dst_offset: d, value: v, dst_memory: dm };
            let t = ProxyTrigger::encode(r).unwrap();
            prop_assert_eq!(t.decode(), r);
        }

        /// Whatever the words hold, what they decode to encodes back to the same request.
        #[test]
        fn every_decoded_request_re_encodes(fst: u64, snd: u64) {
            let r = (ProxyTrigger { fst, snd }).decode();
            prop_assert_eq!(ProxyTrigger::encode(r).map(|t| t.decode()), Ok(r));
        }

        #[test]
        fn out_of_range_is_rejected(big in (1u64 << 32)..u64::MAX, id in 512u32..u32::MAX, sem in 1024u32..u32::MAX, bad in 8u8..=255) {
            let enc = ProxyTrigger::encode;
            prop_assert_eq!(enc(transfer(1, 0, 0, 0, id, 0, 0)), Err(TriggerError::MemoryIdTooLarge));
            prop_assert_eq!(enc(transfer(1, 0, 0, 0, 0, id, 0)), Err(TriggerError::MemoryIdTooLarge));
            prop_assert_eq!(enc(transfer(1, 0, 0, 0, 0, 0, sem)), Err(TriggerError::SemaphoreIdTooLarge));
            prop_assert_eq!(enc(transfer(bad, 0, 0, 0, 0, 0, 0)), Err(TriggerError::BadType));
            prop_assert_eq!(enc(transfer(0, 0, 0, 0, 0, 0, 0)), Err(TriggerError::BadType));
            prop_assert_eq!(enc(Request::AtomicAdd { dst_offset: 0, value: 1, dst_memory: id }), Err(TriggerError::MemoryIdTooLarge));
            prop_assert_eq!(field32(big, TriggerError::SizeTooLarge), Err(TriggerError::SizeTooLarge));
            prop_assert_eq!(field32(big, TriggerError::DstOffsetTooLarge), Err(TriggerError::DstOffsetTooLarge));
            prop_assert_eq!(field32(big & u32::MAX as u64, TriggerError::SrcOffsetTooLarge), Ok(big as u32));
            prop_assert_eq!(field32(u32::MAX as u64, TriggerError::SizeTooLarge), Ok(u32::MAX));
        }
    }

    #[test]
    fn field_positions() {
        let t = ProxyTrigger::encode(transfer(kind::DATA | kind::FLAG, 0x80, 0x40, 0x1234, 5, 3, 1023)).unwrap();
        assert_eq!(t.fst, 0x1234 | (0x40 << 32));
        assert_eq!(t.snd & 0xffff_ffff, 0x80);
        assert_eq!((t.snd >> 32) & 0x1ff, 3);
        assert_eq!((t.snd >> 41) & 0x1ff, 5);
        assert_eq!((t.snd >> 50) & 0x7, 3);
        assert_eq!((t.snd >> 53) & 0x3ff, 1023);
        assert_eq!(t.snd >> 63, 0);
        let a =
            ProxyTrigger::encode(Request::AtomicAdd { dst_offset: 0x88, value: u64::MAX, dst_memory: 511 }).unwrap();
        assert_eq!((a.fst, a.snd), (u64::MAX, 0x88 | (511 << 41)));
        assert_eq!(a.kind(), kind::ATOMIC_ADD);
    }
}
