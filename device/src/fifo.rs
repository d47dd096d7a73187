//! The trigger FIFO's device side: trigger encoding and the producer handle.
//!
//! The protocol (positions, laps, commit bit) is in [`crate::protocol::fifo`]; this module
//! provides the wire format shared with the host and the GPU memory facade.

use crate::abi::DeviceAbi;
use crate::ptr::GlobalPtr;

/// Bit 63 of word 1: the commit bit the producer sets to the lap's parity.
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
    /// Word 1, bits 32..41: source memory id.
    pub const MEMORY_ID_BITS: u32 = 9;
    /// Word 1, bits 41..50: destination memory id (same width).
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

/// One request to the host proxy: two 64-bit words.
///
/// ```text
/// word 0: size (bits 0..32) | src_offset (32..64)          (atomic add: the value)
/// word 1: dst_offset (0..32) | src_memory_id (32..41) | dst_memory_id (41..50)
///         | type (50..53: Data=1, Flag=2, Sync=4; 0 = atomic add) | semaphore_id (53..63)
///         | commit bit (63, set by the FIFO)
/// ```
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

/// A decoded trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Data / Flag / Sync, any combination (Data first, then Flag, then Sync).
    Transfer {
        /// Type bits.
        kind: u8,
        /// Bytes to copy (Data).
        size: u32,
        /// Offset in the source memory.
        src_offset: u32,
        /// Offset in the destination memory.
        dst_offset: u32,
        /// Source memory id.
        src_memory: u32,
        /// Destination memory id.
        dst_memory: u32,
        /// Semaphore id (Flag).
        semaphore: u32,
    },
    /// Add `value` to the u64 at `dst_offset` of `dst_memory`.
    AtomicAdd {
        /// The addend.
        value: u64,
        /// Offset in the destination memory.
        dst_offset: u32,
        /// Destination memory id.
        dst_memory: u32,
    },
}

impl ProxyTrigger {
    /// Encodes a Data/Flag/Sync trigger, checking every field's range.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub const fn transfer(
        kind: u8,
        size: u64,
        src_offset: u64,
        dst_offset: u64,
        src_memory: u32,
        dst_memory: u32,
        semaphore: u32,
    ) -> Result<Self, TriggerError> {
        if kind == 0 || kind & !(kind::DATA | kind::FLAG | kind::SYNC) != 0 {
            return Err(TriggerError::BadType);
        }
        if size > u32::MAX as u64 {
            return Err(TriggerError::SizeTooLarge);
        }
        if src_offset > u32::MAX as u64 {
            return Err(TriggerError::SrcOffsetTooLarge);
        }
        if dst_offset > u32::MAX as u64 {
            return Err(TriggerError::DstOffsetTooLarge);
        }
        if src_memory > MAX_MEMORY_ID || dst_memory > MAX_MEMORY_ID {
            return Err(TriggerError::MemoryIdTooLarge);
        }
        if semaphore > MAX_SEMAPHORE_ID {
            return Err(TriggerError::SemaphoreIdTooLarge);
        }
        Ok(Self {
            fst: size | (src_offset << 32),
            snd: dst_offset
                | ((src_memory as u64) << layout::SRC_MEMORY_SHIFT)
                | ((dst_memory as u64) << layout::DST_MEMORY_SHIFT)
                | ((kind as u64) << layout::TYPE_SHIFT)
                | ((semaphore as u64) << layout::SEMAPHORE_SHIFT),
        })
    }

    /// Encodes an atomic add of `value` at `dst_offset` of `dst_memory`.
    #[inline(always)]
    pub const fn atomic_add(value: u64, dst_offset: u64, dst_memory: u32) -> Result<Self, TriggerError> {
        if dst_offset > u32::MAX as u64 {
            return Err(TriggerError::DstOffsetTooLarge);
        }
        if dst_memory > MAX_MEMORY_ID {
            return Err(TriggerError::MemoryIdTooLarge);
        }
        Ok(Self { fst: value, snd: dst_offset | ((dst_memory as u64) << layout::DST_MEMORY_SHIFT) })
    }

    /// The type bits (0 = atomic add).
    #[inline(always)]
    pub const fn kind(&self) -> u8 {
        ((self.snd >> layout::TYPE_SHIFT) & 0b111) as u8
    }

    /// Decodes (the commit bit is ignored).
    #[inline(always)]
    pub const fn decode(&self) -> Request {
        let kind = self.kind();
        let dst_offset = self.snd as u32;
        let dst_memory = ((self.snd >> layout::DST_MEMORY_SHIFT) as u32) & MAX_MEMORY_ID;
        if kind == 0 {
            return Request::AtomicAdd { value: self.fst, dst_offset, dst_memory };
        }
        Request::Transfer {
            kind,
            size: self.fst as u32,
            src_offset: (self.fst >> 32) as u32,
            dst_offset,
            src_memory: ((self.snd >> layout::SRC_MEMORY_SHIFT) as u32) & MAX_MEMORY_ID,
            dst_memory,
            semaphore: ((self.snd >> layout::SEMAPHORE_SHIFT) as u32) & MAX_SEMAPHORE_ID,
        }
    }
}

/// The producer side of a trigger FIFO, passed to kernels by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FifoDeviceHandle {
    /// The ring of `size` triggers (pinned host memory mapped into the GPU).
    pub triggers: GlobalPtr<ProxyTrigger>,
    /// The next free position (this GPU's memory; all producers increment it).
    pub head: GlobalPtr<u64>,
    /// The consumer's tail: positions below it are handled (pinned host memory).
    pub tail: GlobalPtr<u64>,
    /// The producers' cached copy of the tail (this GPU's memory).
    pub tail_cache: GlobalPtr<u64>,
    /// `size - 1`.
    pub mask: u64,
    /// Number of slots (a power of two).
    pub size: u32,
    /// `log2(size)`.
    pub shift: u32,
}
static_assertions::assert_eq_size!(FifoDeviceHandle, [u64; 6]);
static_assertions::const_assert_eq!(core::mem::offset_of!(FifoDeviceHandle, mask), 32);
static_assertions::const_assert_eq!(core::mem::offset_of!(FifoDeviceHandle, size), 40);
// SAFETY: repr(C), no padding (asserted), addresses and integers only.
unsafe impl DeviceAbi for FifoDeviceHandle {}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, Gpu, Sys};
    use crate::poll::{SpinBudget, spin_until};
    use crate::protocol::{Waiter, fifo as proto};

    struct Budgeted {
        budget: SpinBudget,
        name: &'static core::ffi::CStr,
    }
    impl Waiter for Budgeted {
        #[inline(always)]
        fn wait_until<F: FnMut() -> bool>(&mut self, cond: F) {
            spin_until(self.budget, self.name, cond);
        }
    }

    /// The producer facade of a handle. Built only inside the `unsafe` methods of
    /// [`FifoDeviceHandle`], whose contract is that the handle describes a live FIFO: a handle
    /// itself is plain data that safe code can fill with any addresses.
    struct Producer<'a>(&'a FifoDeviceHandle);

    // SAFETY: a `Producer` exists only inside `FifoDeviceHandle::{push, poll, sync}`, whose
    // callers guarantee that the handle was built by the host for this GPU: `size` is the ring's
    // power-of-two slot count, the ring, head, tail and cache addresses are valid for the
    // accesses below, and each method uses the ordering the trait asks for (the table
    // `protocol::fifo::order`, which `tests/fifo_ptx.rs` holds these instructions to).
    unsafe impl proto::ProducerMem for Producer<'_> {
        #[inline(always)]
        fn size(&self) -> u64 {
            self.0.size as u64
        }
        #[inline(always)]
        fn fetch_add_head(&self) -> u64 {
            // SAFETY: `head` is this GPU's counter (handle built by the host).
            unsafe { crate::ptx::atom_red::atom_relaxed_gpu_global_add_u64(self.0.head.as_ptr(), 1) }
        }
        #[inline(always)]
        fn tail_cache(&self) -> u64 {
            // Partner: the release max in `refresh_tail` (any producer of this GPU).
            // SAFETY: as above.
            unsafe { atomic::load::<Acquire, Gpu, u64>(self.0.tail_cache.as_ptr()) }
        }
        #[inline(always)]
        fn load_tail(&self) -> u64 {
            // Partner: the consumer's release store of the tail (host `store_tail`).
            // SAFETY: `tail` is mapped host memory.
            unsafe { atomic::load::<Acquire, Sys, u64>(self.0.tail.as_ptr()) }
        }
        #[inline(always)]
        fn raise_cache(&self, tail: u64) {
            // Partner: the acquire load in `tail_cache`.
            // SAFETY: `tail_cache` is this GPU's memory.
            unsafe { crate::ptx::atom_red::atom_release_gpu_global_max_u64(self.0.tail_cache.as_ptr(), tail) };
        }
        #[inline(always)]
        fn publish(&self, slot: u64, w0: u64, w1: u64) {
            // Partner: the consumer's acquire read of word 1 (host `read_slot`). One 16-byte store
            // so both words land together.
            // SAFETY: `slot < size`; the ring is 16-byte aligned mapped host memory.
            unsafe {
                crate::ptx::ld_st::st_release_sys_global_v2_u64(
                    self.0.triggers.add(slot as usize).as_ptr().cast(),
                    [w0, w1],
                )
            };
        }
    }

    impl FifoDeviceHandle {
        /// Pushes a trigger and returns its position. When the ring is full, waits for the
        /// consumer (traps with a message if `budget` runs out).
        ///
        /// # Safety
        /// The handle must have been built by the host for this GPU and its consumer must be
        /// running (or the wait will time out).
        #[inline(always)]
        pub unsafe fn push(&self, trigger: ProxyTrigger, budget: SpinBudget) -> u64 {
            proto::push(&Producer(self), trigger, &mut Budgeted { budget, name: c"Fifo::push" })
        }

        /// Whether the consumer has handled position `pos`.
        ///
        /// # Safety
        /// As for [`FifoDeviceHandle::push`].
        #[inline(always)]
        pub unsafe fn poll(&self, pos: u64) -> bool {
            proto::poll(&Producer(self), pos)
        }

        /// Waits until the consumer has handled position `pos` (traps if `budget` runs out).
        ///
        /// # Safety
        /// As for [`FifoDeviceHandle::push`].
        #[inline(always)]
        pub unsafe fn sync(&self, pos: u64, budget: SpinBudget) {
            proto::sync(&Producer(self), pos, &mut Budgeted { budget, name: c"Fifo::sync" });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn transfer_round_trips(kind in 1u8..8, size: u32, so: u32, d: u32, sm in 0u32..512, dm in 0u32..512, sem in 0u32..1024) {
            let t = ProxyTrigger::transfer(kind, size as u64, so as u64, d as u64, sm, dm, sem).unwrap();
            prop_assert_eq!(t.snd & COMMIT_BIT, 0);
            prop_assert_eq!(t.decode(), Request::Transfer { kind, size, src_offset: so, dst_offset: d, src_memory: sm, dst_memory: dm, semaphore: sem });
            // The commit bit never disturbs the fields.
            let c = ProxyTrigger { fst: t.fst, snd: t.snd | COMMIT_BIT };
            prop_assert_eq!(c.decode(), t.decode());
        }

        #[test]
        fn atomic_add_round_trips(v: u64, d: u32, dm in 0u32..512) {
            let t = ProxyTrigger::atomic_add(v, d as u64, dm).unwrap();
            prop_assert_eq!(t.decode(), Request::AtomicAdd { value: v, dst_offset: d, dst_memory: dm });
        }

        #[test]
        fn out_of_range_is_rejected(big in (1u64 << 32)..u64::MAX, id in 512u32..u32::MAX, sem in 1024u32..u32::MAX, bad in 8u8..=255) {
            prop_assert_eq!(ProxyTrigger::transfer(1, big, 0, 0, 0, 0, 0), Err(TriggerError::SizeTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(1, 0, big, 0, 0, 0, 0), Err(TriggerError::SrcOffsetTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(1, 0, 0, big, 0, 0, 0), Err(TriggerError::DstOffsetTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(1, 0, 0, 0, id, 0, 0), Err(TriggerError::MemoryIdTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(1, 0, 0, 0, 0, id, 0), Err(TriggerError::MemoryIdTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(1, 0, 0, 0, 0, 0, sem), Err(TriggerError::SemaphoreIdTooLarge));
            prop_assert_eq!(ProxyTrigger::transfer(bad, 0, 0, 0, 0, 0, 0), Err(TriggerError::BadType));
            prop_assert_eq!(ProxyTrigger::transfer(0, 0, 0, 0, 0, 0, 0), Err(TriggerError::BadType));
            prop_assert_eq!(ProxyTrigger::atomic_add(1, big, 0), Err(TriggerError::DstOffsetTooLarge));
            prop_assert_eq!(ProxyTrigger::atomic_add(1, 0, id), Err(TriggerError::MemoryIdTooLarge));
        }
    }

    #[test]
    fn field_positions() {
        let t = ProxyTrigger::transfer(kind::DATA | kind::FLAG, 0x1234, 0x40, 0x80, 3, 5, 1023).unwrap();
        assert_eq!(t.fst, 0x1234 | (0x40 << 32));
        assert_eq!(t.snd & 0xffff_ffff, 0x80);
        assert_eq!((t.snd >> 32) & 0x1ff, 3);
        assert_eq!((t.snd >> 41) & 0x1ff, 5);
        assert_eq!((t.snd >> 50) & 0x7, 3);
        assert_eq!((t.snd >> 53) & 0x3ff, 1023);
        assert_eq!(t.snd >> 63, 0);
    }
}
