//! Builders of channel handles.

use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};

use crate::error::Result;
use crate::memory::DeviceBuffer;
use crate::proxy::{MemoryId, ProxyService, SemaphoreId};
use crate::semaphore::{MemorySemaphorePair, SemaphoreStorage};

/// A port channel served by `proxy`: puts copy from `src` to `dst` (ids registered with the
/// proxy's builder), signals increment the peer semaphore `semaphore` (registered with the
/// proxy), and this side waits on `local` (the counters the peer's proxy signals).
pub fn port_channel(
    proxy: &ProxyService,
    semaphore: SemaphoreId,
    dst: MemoryId,
    src: MemoryId,
    local: &SemaphoreStorage,
) -> PortChannel {
    port_channel_from(proxy, semaphore, dst, src, local.host_to_device())
}

/// The one constructor of port channel handles: [`port_channel`] and the cross-process builder
/// ([`crate::comm::Communicator::port_channels`]) both call it. `wait_on` is the semaphore this
/// side waits on (its inbound counter may be in GPU memory or in registered host memory);
/// the other arguments are as for [`port_channel`].
pub fn port_channel_from(
    proxy: &ProxyService,
    semaphore: SemaphoreId,
    dst: MemoryId,
    src: MemoryId,
    wait_on: Host2DeviceSemaphore,
) -> PortChannel {
    PortChannel {
        fifo: proxy.fifo_handle(),
        semaphore: wait_on,
        semaphore_id: semaphore.0,
        dst_memory_id: dst.0,
        src_memory_id: src.0,
        _pad: 0,
    }
}

/// A memory channel handle from plain device addresses, all valid in the calling side's GPU
/// address space: `dst` and `src` are (address, bytes) of the peer's buffer (mapped here) and of
/// this side's buffer; `packets` is this side's zeroed packet buffer and `remote_packets` the
/// peer's (mapped here), both of `packet_bytes`. The cross-process builders exchange these
/// addresses between ranks and call this.
pub fn memory_channel(
    semaphore: MemoryDevice2DeviceSemaphore,
    dst: (u64, u64),
    src: (u64, u64),
    packets: u64,
    remote_packets: u64,
    packet_bytes: u64,
) -> MemoryChannel {
    MemoryChannel {
        semaphore,
        dst: GlobalPtr::from_addr(dst.0),
        src: GlobalPtr::from_addr(src.0),
        packets: GlobalPtr::from_addr(packets),
        remote_packets: GlobalPtr::from_addr(remote_packets),
        dst_bytes: dst.1,
        src_bytes: src.1,
        packet_bytes,
    }
}

/// What the two handles of [`memory_channel_pair`] point to besides the data buffers: the
/// semaphore counters and the zeroed packet buffers of both sides. Keep it alive while kernels
/// use the handles.
#[derive(Debug)]
pub struct MemoryChannelStorage {
    /// The semaphore counters (side a: the first buffer's GPU).
    pub semaphores: MemorySemaphorePair,
    /// The first side's packet buffer (the second side writes packets here).
    pub packets_a: DeviceBuffer,
    /// The second side's packet buffer.
    pub packets_b: DeviceBuffer,
}

/// A memory channel between two buffers of this process, usually on two GPUs: the first
/// handle runs on `buf_a`'s GPU (its `src` is `buf_a`, its `dst` is `buf_b`), the second on
/// `buf_b`'s GPU. Enables peer access both ways, allocates the semaphores and a zeroed packet
/// buffer of `packet_bytes` on each side.
pub fn memory_channel_pair(
    buf_a: &DeviceBuffer,
    buf_b: &DeviceBuffer,
    packet_bytes: usize,
) -> Result<(MemoryChannel, MemoryChannel, MemoryChannelStorage)> {
    let (ga, gb) = (buf_a.gpu(), buf_b.gpu());
    let semaphores = MemorySemaphorePair::new(ga, gb)?;
    let packets_a = DeviceBuffer::filled(ga, packet_bytes, 0)?;
    let packets_b = DeviceBuffer::filled(gb, packet_bytes, 0)?;
    let (la, lb) = ((buf_a.addr(), buf_a.len() as u64), (buf_b.addr(), buf_b.len() as u64));
    let pb = packet_bytes as u64;
    let a = memory_channel(semaphores.handle_a(), lb, la, packets_a.addr(), packets_b.addr(), pb);
    let b = memory_channel(semaphores.handle_b(), la, lb, packets_b.addr(), packets_a.addr(), pb);
    Ok((a, b, MemoryChannelStorage { semaphores, packets_a, packets_b }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_channel_from_plain_addresses() {
        let sem = MemoryDevice2DeviceSemaphore {
            inbound: GlobalPtr::from_addr(0x10),
            remote_inbound: GlobalPtr::from_addr(0x20),
            expected: GlobalPtr::from_addr(0x18),
            outbound: GlobalPtr::from_addr(0x28),
        };
        let c = memory_channel(sem, (0x1000, 64), (0x2000, 32), 0x3000, 0x4000, 128);
        assert_eq!(c.semaphore, sem);
        assert_eq!((c.dst.addr(), c.dst_bytes, c.src.addr(), c.src_bytes), (0x1000, 64, 0x2000, 32));
        assert_eq!((c.packets.addr(), c.remote_packets.addr(), c.packet_bytes), (0x3000, 0x4000, 128));
    }
}
