//! The host side of the trigger FIFO: the ring in pinned host memory (mapped into the GPU), the
//! counters, and the consumer.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use mscclpp_device::fifo::FifoDeviceHandle;
use mscclpp_device::protocol::fifo::{Consumer, ConsumerMem, order};
use mscclpp_device::trigger::ProxyTrigger;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::{DeviceBuffer, PinnedBuffer};

/// Default number of slots.
pub const DEFAULT_FIFO_SIZE: u32 = 512;

/// A trigger FIFO whose producers are kernels on one GPU and whose consumer is a host thread.
pub struct Fifo {
    ring: PinnedBuffer,
    tail: PinnedBuffer,
    counters: DeviceBuffer,
    size: u32,
    consumer: Consumer,
}

impl std::fmt::Debug for Fifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fifo").field("size", &self.size).field("position", &self.consumer.position()).finish()
    }
}

struct HostView<'a> {
    ring: *const AtomicU64,
    size: u64,
    tail: &'a AtomicU64,
}

// SAFETY: a `HostView` is built only by `host_view` from a `Fifo`'s own buffers: `ring` holds
// `size` (a power of two, checked in `Fifo::new`) 16-byte triggers (two u64 words each) of pinned
// memory that outlive the view, and `tail` is that FIFO's tail word. The orderings are the
// table's (`order`), as the trait asks.
unsafe impl ConsumerMem for HostView<'_> {
    fn size(&self) -> u64 {
        self.size
    }
    fn load_word1(&self, slot: u64) -> u64 {
        // Partner: the producer's release store of word 1 (device `store_word1`), after its store
        // of word 0; `Consumer::peek` loads this word first, and word 0 only after it.
        // SAFETY: `slot < size`; the ring holds 2 * size aligned u64 words in pinned memory that
        // lives as long as the Fifo, which the GPU writes with 8-byte atomic stores.
        unsafe { (*self.ring.add(2 * slot as usize + 1)).load(order::READ_WORD1) }
    }
    fn load_word0(&self, slot: u64) -> u64 {
        // Ordered after the acquire load of word 1 (`load_word1`), which `Consumer::peek` made
        // first.
        // SAFETY: as for `load_word1`.
        unsafe { (*self.ring.add(2 * slot as usize)).load(order::READ_WORD0) }
    }
    fn store_tail(&self, tail: u64) {
        // Partner: the producers' acquire load of the tail (device `load_tail`).
        self.tail.store(tail, order::STORE_TAIL);
    }
}

fn host_view<'a>(ring: &'a PinnedBuffer, size: u32, tail: &'a PinnedBuffer) -> HostView<'a> {
    // SAFETY: the tail buffer is 64 bytes of pinned memory, 8-aligned, living as long as `tail`.
    let tail = unsafe { AtomicU64::from_ptr(tail.host_ptr().cast()) };
    HostView { ring: ring.host_ptr().cast(), size: size as u64, tail }
}

impl Fifo {
    /// A FIFO of `size` slots (a power of two) for kernels on `gpu`.
    pub fn new(gpu: &Arc<Gpu>, size: u32) -> Result<Self> {
        if size == 0 || !size.is_power_of_two() {
            return Err(Error::InvalidArgument(format!("FIFO size {size} is not a power of two")));
        }
        let ring = PinnedBuffer::zeroed(gpu, size as usize * std::mem::size_of::<ProxyTrigger>())?;
        let tail = PinnedBuffer::zeroed(gpu, 64)?;
        // head and tail cache, zeroed, on the producers' GPU.
        let counters = DeviceBuffer::filled(gpu, 16, 0)?;
        Ok(Self { ring, tail, counters, size, consumer: Consumer::new() })
    }

    /// The number of slots.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The handle kernels push with.
    pub fn device_handle(&self) -> FifoDeviceHandle {
        FifoDeviceHandle {
            triggers: self.ring.device_ptr(0),
            head: self.counters.ptr(),
            tail: self.tail.device_ptr(0),
            tail_cache: self.counters.ptr::<u64>().add(1),
            size: self.size,
            _pad: 0,
        }
    }

    /// The trigger at the consumer's position, if published (not consumed: call
    /// [`Fifo::complete`] once it is handled).
    pub fn peek(&self) -> Option<ProxyTrigger> {
        self.consumer.peek(&host_view(&self.ring, self.size, &self.tail))
    }

    /// Marks the current trigger handled and frees its slot; returns whether there was one. With
    /// no trigger published at the position (nothing to complete), nothing changes: moving the
    /// tail past the producers' head would lose their next trigger and let a kernel's flush
    /// return before the proxy handled its requests.
    pub fn complete(&mut self) -> bool {
        let view = host_view(&self.ring, self.size, &self.tail);
        if self.consumer.peek(&view).is_none() {
            return false;
        }
        self.consumer.complete(&view);
        true
    }

    /// Pops the next trigger if there is one (peek + complete).
    pub fn try_pop(&mut self) -> Option<ProxyTrigger> {
        let view = host_view(&self.ring, self.size, &self.tail);
        let t = self.consumer.peek(&view)?;
        self.consumer.complete(&view);
        Some(t)
    }

    /// The consumer's position (triggers handled so far).
    pub fn position(&self) -> u64 {
        self.consumer.position()
    }
}

// SAFETY: the FIFO owns its buffers; the raw pointers inside are only dereferenced through
// atomics, and the consumer state moves with the value.
unsafe impl Send for Fifo {}
