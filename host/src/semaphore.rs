//! Storage and builders for the device semaphores of one process (the multi-process builders
//! exchange the same storage's addresses between ranks).

use std::sync::Arc;

use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};

use crate::error::Result;
use crate::gpu::Gpu;
use crate::memory::DeviceBuffer;

/// The counters of one side of a semaphore (`inbound`, `expected`, `outbound`), zeroed, in a
/// GPU's memory.
#[derive(Debug)]
pub struct SemaphoreStorage {
    counters: DeviceBuffer,
}

impl SemaphoreStorage {
    /// Allocates zeroed counters on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        Ok(Self { counters: DeviceBuffer::filled(gpu, 32, 0)? })
    }
    /// The address of the inbound counter (what the peer or the proxy increments).
    pub fn inbound(&self) -> GlobalPtr<u64> {
        self.counters.ptr()
    }
    /// The address of the expected counter (private to this side).
    pub fn expected(&self) -> GlobalPtr<u64> {
        self.counters.ptr::<u64>().add(1)
    }
    /// The address of the outbound counter (signals sent by this side; private).
    pub fn outbound(&self) -> GlobalPtr<u64> {
        self.counters.ptr::<u64>().add(2)
    }
    /// The counters' buffer (for exporting to other processes).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.counters
    }
    /// The handle of a host-to-device semaphore over these counters.
    pub fn host_to_device(&self) -> Host2DeviceSemaphore {
        Host2DeviceSemaphore { inbound: self.inbound(), expected: self.expected() }
    }
    /// The handle of a memory semaphore whose peer's inbound counter is at `remote_inbound`
    /// (mapped into this GPU's address space).
    pub fn device_to_device(&self, remote_inbound: GlobalPtr<u64>) -> MemoryDevice2DeviceSemaphore {
        MemoryDevice2DeviceSemaphore {
            inbound: self.inbound(),
            remote_inbound,
            expected: self.expected(),
            outbound: self.outbound(),
        }
    }
    /// Reads (inbound, expected) back, after synchronising the owning GPU's stream.
    pub fn read(&self) -> Result<(u64, u64)> {
        let mut v = [0u64; 2];
        self.counters.read(0, &mut v)?;
        Ok((v[0], v[1]))
    }
    /// Reads the outbound counter back.
    pub fn read_outbound(&self) -> Result<u64> {
        let mut v = [0u64; 1];
        self.counters.read(16, &mut v)?;
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
