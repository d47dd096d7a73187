//! Storage and builders for the device semaphores of one process (the multi-process builders
//! exchange the same storage's addresses between ranks).

use std::sync::Arc;

use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::DeviceBuffer;

/// The counters of one side of a semaphore: a 32-byte slot in GPU memory, the one place that
/// knows its layout.
///
/// ```text
///  offset  0: inbound   what the peer (or a proxy) increments; this side waits on it
///  offset  8: expected  the count this side waits for next (private)
///  offset 16: outbound  signals this side has sent (private)
///  offset 24: padding
/// ```
///
/// A single semaphore ([`SemaphoreStorage`]) is one slot; the cross-process builders allocate an
/// array of slots, one per peer, and name slot `i` with [`SemaphoreSlot::at`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SemaphoreSlot {
    base: u64,
}

impl SemaphoreSlot {
    /// Bytes of one slot.
    pub const BYTES: usize = 32;
    /// Offset of the inbound counter.
    pub const INBOUND: usize = 0;
    /// Offset of the expected counter.
    pub const EXPECTED: usize = 8;
    /// Offset of the outbound counter.
    pub const OUTBOUND: usize = 16;

    /// Slot `index` of an array of slots that starts at device address `base`.
    pub fn at(base: u64, index: usize) -> Self {
        Self { base: base.wrapping_add((index as u64).wrapping_mul(Self::BYTES as u64)) }
    }
    /// The slot's first byte.
    pub fn addr(self) -> u64 {
        self.base
    }
    /// The inbound counter.
    pub fn inbound(self) -> GlobalPtr<u64> {
        GlobalPtr::from_addr(self.base.wrapping_add(Self::INBOUND as u64))
    }
    /// The expected counter.
    pub fn expected(self) -> GlobalPtr<u64> {
        GlobalPtr::from_addr(self.base.wrapping_add(Self::EXPECTED as u64))
    }
    /// The outbound counter.
    pub fn outbound(self) -> GlobalPtr<u64> {
        GlobalPtr::from_addr(self.base.wrapping_add(Self::OUTBOUND as u64))
    }
    /// The handle of a host-to-device semaphore waiting on this slot.
    pub fn host_to_device(self) -> Host2DeviceSemaphore {
        Host2DeviceSemaphore { inbound: self.inbound(), expected: self.expected() }
    }
    /// The handle of a memory semaphore over this slot whose peer's inbound counter is at
    /// `remote_inbound` (mapped into this GPU's address space).
    pub fn device_to_device(self, remote_inbound: GlobalPtr<u64>) -> MemoryDevice2DeviceSemaphore {
        MemoryDevice2DeviceSemaphore {
            inbound: self.inbound(),
            remote_inbound,
            expected: self.expected(),
            outbound: self.outbound(),
        }
    }
    /// Bytes of an array of `count` slots, or an error when that overflows.
    pub fn array_bytes(count: usize) -> Result<usize> {
        count
            .checked_mul(Self::BYTES)
            .ok_or_else(|| Error::InvalidArgument(format!("{count} semaphore slots of {} bytes overflow", Self::BYTES)))
    }
    /// Checks that slot `index` lies inside rank `peer`'s slot array of `len` bytes, as the peer
    /// reported it: a peer that claims a short buffer must not get this rank writing past its
    /// end.
    pub fn check_within(peer: usize, len: u64, index: usize) -> Result<()> {
        let end = index.checked_add(1).and_then(|s| s.checked_mul(Self::BYTES)).and_then(|e| u64::try_from(e).ok());
        match end {
            Some(end) if end <= len => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "rank {peer}'s semaphore buffer of {len} bytes has no slot {index} ({} bytes each)",
                Self::BYTES
            ))),
        }
    }
}

/// A port channel's inbound counter in shared host memory ([`crate::shm`]), which replaces the
/// inbound counter of its [`SemaphoreSlot`] when every rank runs on this machine (the `expected`
/// counter stays in the slot): the one place that knows that layout.
///
/// ```text
///  rank r's array (one per rank, one word per peer):  [ from rank 0 | from rank 1 | ... | from rank N-1 ]
///  word p: u64 at offset 8 * p, what rank p's proxy thread stores (through its mapping of the
///          array) and rank r's GPU waits on (through the array's device address)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInboundWord {
    addr: u64,
}

impl HostInboundWord {
    /// Bytes of one word.
    pub const BYTES: usize = 8;

    /// Peer `peer`'s word of an array that starts at address `base` (the device address of
    /// this rank's array, or, as a number, the host address of a peer's mapping).
    pub fn at(base: u64, peer: usize) -> Self {
        Self { addr: base.wrapping_add(Self::offset(peer) as u64) }
    }
    /// Bytes from the start of an array to peer `peer`'s word.
    pub const fn offset(peer: usize) -> usize {
        peer.wrapping_mul(Self::BYTES)
    }
    /// The word's address.
    pub fn addr(self) -> u64 {
        self.addr
    }
    /// The word as a device pointer (for the semaphore a kernel waits on).
    pub fn ptr(self) -> GlobalPtr<u64> {
        GlobalPtr::from_addr(self.addr)
    }
    /// Bytes of an array for `ranks` ranks, or an error when that overflows.
    pub fn array_bytes(ranks: usize) -> Result<usize> {
        ranks.checked_mul(Self::BYTES).ok_or_else(|| {
            Error::InvalidArgument(format!("{ranks} shared inbound counters of {} bytes overflow", Self::BYTES))
        })
    }
}

/// The counters of one side of a semaphore (one [`SemaphoreSlot`]), zeroed, in a GPU's memory.
#[derive(Debug)]
pub struct SemaphoreStorage {
    counters: DeviceBuffer,
}

impl SemaphoreStorage {
    /// Allocates zeroed counters on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        Ok(Self { counters: DeviceBuffer::filled(gpu, SemaphoreSlot::BYTES, 0)? })
    }
    /// The slot these counters fill.
    pub fn slot(&self) -> SemaphoreSlot {
        SemaphoreSlot::at(self.counters.addr(), 0)
    }
    /// The address of the inbound counter (what the peer or the proxy increments).
    pub fn inbound(&self) -> GlobalPtr<u64> {
        self.slot().inbound()
    }
    /// The address of the expected counter (private to this side).
    pub fn expected(&self) -> GlobalPtr<u64> {
        self.slot().expected()
    }
    /// The address of the outbound counter (signals sent by this side; private).
    pub fn outbound(&self) -> GlobalPtr<u64> {
        self.slot().outbound()
    }
    /// The counters' buffer (for exporting to other processes).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.counters
    }
    /// The handle of a host-to-device semaphore over these counters.
    pub fn host_to_device(&self) -> Host2DeviceSemaphore {
        self.slot().host_to_device()
    }
    /// The handle of a memory semaphore whose peer's inbound counter is at `remote_inbound`
    /// (mapped into this GPU's address space).
    pub fn device_to_device(&self, remote_inbound: GlobalPtr<u64>) -> MemoryDevice2DeviceSemaphore {
        self.slot().device_to_device(remote_inbound)
    }
    /// Reads (inbound, expected) back, after synchronising the owning GPU's stream.
    pub fn read(&self) -> Result<(u64, u64)> {
        // The two counters are adjacent (see the layout test).
        let mut v = [0u64; 2];
        self.counters.read(SemaphoreSlot::INBOUND, &mut v)?;
        Ok((v[0], v[1]))
    }
    /// Reads the outbound counter back.
    pub fn read_outbound(&self) -> Result<u64> {
        let mut v = [0u64; 1];
        self.counters.read(SemaphoreSlot::OUTBOUND, &mut v)?;
        Ok(v[0])
    }
}

/// A memory semaphore between two GPUs of this process: both storages and both handles.
/// Enables peer access in both directions.
#[derive(Debug)]
pub struct MemorySemaphorePair {
    /// Storage on the first GPU.
    pub a: SemaphoreStorage,
    /// Storage on the second GPU.
    pub b: SemaphoreStorage,
}

impl MemorySemaphorePair {
    /// Allocates both sides.
    pub fn new(a: &Arc<Gpu>, b: &Arc<Gpu>) -> Result<Self> {
        if a.ordinal() != b.ordinal() {
            a.enable_peer_access(b)?;
            b.enable_peer_access(a)?;
        }
        Ok(Self { a: SemaphoreStorage::new(a)?, b: SemaphoreStorage::new(b)? })
    }
    /// The first GPU's handle (signals the second).
    pub fn handle_a(&self) -> MemoryDevice2DeviceSemaphore {
        self.a.device_to_device(self.b.inbound())
    }
    /// The second GPU's handle (signals the first).
    pub fn handle_b(&self) -> MemoryDevice2DeviceSemaphore {
        self.b.device_to_device(self.a.inbound())
    }
}

#[cfg(test)]
mod tests {
    use super::SemaphoreSlot;

    #[test]
    fn slot_layout_is_inbound_expected_outbound_padding() {
        assert_eq!(SemaphoreSlot::BYTES, 32);
        assert_eq!((SemaphoreSlot::INBOUND, SemaphoreSlot::EXPECTED, SemaphoreSlot::OUTBOUND), (0, 8, 16));
        // `SemaphoreStorage::read` reads inbound and expected as two adjacent words.
        assert_eq!(SemaphoreSlot::EXPECTED, SemaphoreSlot::INBOUND + 8);
        const { assert!(SemaphoreSlot::OUTBOUND + 8 <= SemaphoreSlot::BYTES) };
    }

    #[test]
    fn slots_of_an_array_are_32_bytes_apart() {
        let s = SemaphoreSlot::at(0x1000, 3);
        assert_eq!(s.addr(), 0x1000 + 3 * 32);
        assert_eq!(s.inbound().addr(), 0x1060);
        assert_eq!(s.expected().addr(), 0x1068);
        assert_eq!(s.outbound().addr(), 0x1070);
        assert_eq!(SemaphoreSlot::at(0x1000, 0).inbound().addr(), 0x1000);
    }

    #[test]
    fn handles_take_their_counters_from_the_slot() {
        let s = SemaphoreSlot::at(0x2000, 1);
        let h = s.host_to_device();
        assert_eq!((h.inbound.addr(), h.expected.addr()), (0x2020, 0x2028));
        let remote = SemaphoreSlot::at(0x9000, 2).inbound();
        let d = s.device_to_device(remote);
        assert_eq!(
            (d.inbound.addr(), d.remote_inbound.addr(), d.expected.addr(), d.outbound.addr()),
            (0x2020, 0x9040, 0x2028, 0x2030)
        );
    }

    #[test]
    fn shared_inbound_words_are_8_bytes_apart_in_peer_order() {
        use super::HostInboundWord;
        assert_eq!(HostInboundWord::BYTES, std::mem::size_of::<u64>());
        assert_eq!(HostInboundWord::at(0x4000, 0).addr(), 0x4000);
        assert_eq!(HostInboundWord::at(0x4000, 3).addr(), 0x4018);
        assert_eq!(HostInboundWord::at(0x4000, 3).ptr().addr(), 0x4018);
        // The proxy's host pointer and the GPU's device pointer name the same word.
        for p in [0, 1, 7, 255] {
            assert_eq!(HostInboundWord::at(0, p).addr(), HostInboundWord::offset(p) as u64);
            assert!(
                HostInboundWord::offset(p) + HostInboundWord::BYTES <= HostInboundWord::array_bytes(p + 1).unwrap()
            );
        }
        assert_eq!(HostInboundWord::array_bytes(4).unwrap(), 32);
        assert!(HostInboundWord::array_bytes(usize::MAX).is_err());
    }

    #[test]
    fn array_sizes_overflow_into_errors() {
        assert_eq!(SemaphoreSlot::array_bytes(4).unwrap(), 128);
        assert!(SemaphoreSlot::array_bytes(usize::MAX).is_err());
    }
}
