//! Builders of channel handles.

use mscclpp_device::channel::port::PortChannel;

use crate::proxy::{MemoryId, ProxyService, SemaphoreId};
use crate::semaphore::SemaphoreStorage;

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
    PortChannel {
        fifo: proxy.fifo_handle(),
        semaphore: local.host_to_device(),
        semaphore_id: semaphore.0,
        dst_memory_id: dst.0,
        src_memory_id: src.0,
        _pad: 0,
    }
}
