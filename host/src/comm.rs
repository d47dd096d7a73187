//! A rank's view of the other ranks' GPU memory, and the cross-process builders of semaphores
//! and port channels.
//!
//! ```text
//!  every rank                       exchange (bootstrap all-gather of IPC handles)
//!  DeviceBuffer ──ExportedMemory──►  rank r imports every other rank's buffer:
//!                                    PeerBuffers[p] = address of rank p's buffer, valid here
//! ```
//!
//! Semaphores: every rank allocates one counter slot per peer (inbound, expected, outbound) and
//! exchanges the slots' buffer; rank r's handle toward p reads its own slot p and writes rank p's
//! slot r. Port channels: every rank runs one proxy that copies from its source buffer into the
//! peers' imported destination buffers and signals the peers' imported host-to-device counters.
//!
//! Drop order is part of the types: a proxy stops before the mappings it copies through are
//! closed, and mappings close before the local buffers they may still reference are freed.

use std::sync::Arc;

use mscclpp_device::channel::emulated_switch::EmulatedSwitchChannel;
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ipc::{ExportedMemory, ImportedMemory};
use crate::memory::DeviceBuffer;
use crate::proxy::{MemoryRegion, ProxyBuilder, ProxyService};

/// Bytes of one semaphore slot: inbound, expected, outbound, padding.
const SLOT: usize = 32;

/// A bootstrap plus the GPU this rank uses.
#[derive(Clone)]
pub struct Communicator {
    boot: Arc<Bootstrap>,
    gpu: Arc<Gpu>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Communicator(rank {} of {}, GPU {})", self.rank(), self.world_size(), self.gpu.ordinal())
    }
}

/// Every rank's buffer, as addresses valid in this process (imported mappings for the others).
pub struct PeerBuffers {
    addrs: Vec<u64>,
    sizes: Vec<u64>,
    _imports: Vec<Option<ImportedMemory>>,
}

impl std::fmt::Debug for PeerBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerBuffers").field("addrs", &self.addrs).field("sizes", &self.sizes).finish()
    }
}

impl PeerBuffers {
    /// Rank `r`'s buffer address, valid on this rank's GPU.
    pub fn addr(&self, r: usize) -> u64 {
        self.addrs[r]
    }
    /// Rank `r`'s buffer as a typed pointer.
    pub fn ptr<T>(&self, r: usize) -> GlobalPtr<T> {
        GlobalPtr::from_addr(self.addrs[r])
    }
    /// Rank `r`'s buffer size in bytes.
    pub fn len(&self, r: usize) -> u64 {
        self.sizes[r]
    }
    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.addrs.len()
    }
    /// Every rank's address, in rank order (for a device-side table).
    pub fn addrs(&self) -> &[u64] {
        &self.addrs
    }
}

/// Memory semaphores from this rank to every other rank.
pub struct MemorySemaphores {
    handles: Vec<Option<MemoryDevice2DeviceSemaphore>>,
    remote: PeerBuffers,
    storage: DeviceBuffer,
}

impl std::fmt::Debug for MemorySemaphores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySemaphores").field("handles", &self.handles).finish_non_exhaustive()
    }
}

impl MemorySemaphores {
    /// The handle toward rank `peer` (`None` for this rank itself).
    pub fn get(&self, peer: usize) -> Option<MemoryDevice2DeviceSemaphore> {
        self.handles[peer]
    }
    /// A table in rank order for device code: this rank's own entry is zeroed.
    pub fn table(&self) -> Vec<MemoryDevice2DeviceSemaphore> {
        self.handles.iter().map(|h| h.unwrap_or(bytemuck::Zeroable::zeroed())).collect()
    }
    /// The counters' buffer (inbound, expected, outbound per peer).
    pub fn storage(&self) -> &DeviceBuffer {
        &self.storage
    }
    /// The other ranks' counter buffers as mapped here.
    pub fn remote(&self) -> &PeerBuffers {
        &self.remote
    }
}

/// Port channels from this rank to every other rank, served by this rank's proxy.
pub struct PortChannels {
    channels: Vec<Option<PortChannel>>,
    // Field order is drop order: the proxy first, then the mappings it uses, then local memory.
    proxy: ProxyService,
    _dst: PeerBuffers,
    _sems: PeerBuffers,
    _storage: DeviceBuffer,
}

impl std::fmt::Debug for PortChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortChannels").field("channels", &self.channels).finish_non_exhaustive()
    }
}

impl PortChannels {
    /// The channel toward rank `peer` (`None` for this rank).
    pub fn get(&self, peer: usize) -> Option<PortChannel> {
        self.channels[peer]
    }
    /// A table in rank order for device code: this rank's own entry is zeroed.
    pub fn table(&self) -> Vec<PortChannel> {
        self.channels.iter().map(|h| h.unwrap_or(bytemuck::Zeroable::zeroed())).collect()
    }
    /// The proxy serving these channels (its `check` reports a failed request).
    pub fn proxy(&self) -> &ProxyService {
        &self.proxy
    }
    /// Stops the proxy and returns the first error it hit, if any.
    pub fn stop(self) -> Result<()> {
        let Self { proxy, .. } = self;
        proxy.stop()
    }
}

/// Emulated switch channels over one buffer: one handle per block (each with its own
/// semaphores), and what keeps their tables and mappings alive.
pub struct EmulatedSwitchChannels {
    handles: Vec<EmulatedSwitchChannel>,
    _tables: Vec<DeviceBuffer>,
    _semaphores: Vec<MemorySemaphores>,
    _buffers: PeerBuffers,
}

impl std::fmt::Debug for EmulatedSwitchChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedSwitchChannels").field("handles", &self.handles).finish_non_exhaustive()
    }
}

impl EmulatedSwitchChannels {
    /// The handles, one per block, for a device-side table indexed by block.
    pub fn handles(&self) -> &[EmulatedSwitchChannel] {
        &self.handles
    }
}

/// The switch channels a communicator could build: multicast where it is allowed and
/// implemented, the emulation otherwise (with the reason).
#[derive(Debug)]
pub enum SwitchChannels {
    /// Peer-pointer emulation, and why multicast was not used.
    Emulated {
        /// The channels.
        channels: EmulatedSwitchChannels,
        /// Why not NVLink multicast.
        reason: String,
    },
}

impl Communicator {
    /// A communicator over `boot` for this rank's `gpu`.
    pub fn new(boot: Arc<Bootstrap>, gpu: Arc<Gpu>) -> Self {
        Self { boot, gpu }
    }
    /// This rank.
    pub fn rank(&self) -> usize {
        self.boot.rank()
    }
    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.boot.world_size()
    }
    /// The bootstrap.
    pub fn bootstrap(&self) -> &Arc<Bootstrap> {
        &self.boot
    }
    /// This rank's GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Every rank contributes `buf` (allocated with [`DeviceBuffer::alloc_exportable`]); returns
    /// every rank's buffer as addresses valid here.
    pub fn exchange(&self, buf: &DeviceBuffer) -> Result<PeerBuffers> {
        if buf.gpu().ordinal() != self.gpu.ordinal() {
            return Err(Error::InvalidArgument(format!(
                "buffer on GPU {} but this rank uses GPU {}",
                buf.gpu().ordinal(),
                self.gpu.ordinal()
            )));
        }
        let mine = ExportedMemory::of(buf)?;
        let all = self.boot.all_gather_pod(&mine)?;
        let me = self.rank();
        let mut addrs = Vec::with_capacity(all.len());
        let mut sizes = Vec::with_capacity(all.len());
        let mut imports = Vec::with_capacity(all.len());
        for (r, e) in all.iter().enumerate() {
            if r == me {
                addrs.push(buf.addr());
                sizes.push(buf.len() as u64);
                imports.push(None);
            } else {
                let m = ImportedMemory::open(&self.gpu, e).map_err(|e| Error::Bootstrap {
                    rank: me,
                    step: format!("importing rank {r}'s buffer"),
                    cause: Box::new(e),
                })?;
                addrs.push(m.addr());
                sizes.push(m.len() as u64);
                imports.push(Some(m));
            }
        }
        Ok(PeerBuffers { addrs, sizes, _imports: imports })
    }

    /// Memory semaphores toward every other rank.
    pub fn memory_semaphores(&self) -> Result<MemorySemaphores> {
        let n = self.world_size();
        let me = self.rank();
        let storage = DeviceBuffer::exportable_filled(&self.gpu, n * SLOT, 0)?;
        let remote = self.exchange(&storage)?;
        let handles = (0..n)
            .map(|p| {
                (p != me).then(|| MemoryDevice2DeviceSemaphore {
                    inbound: storage.ptr::<u8>().byte_add(p * SLOT).cast(),
                    remote_inbound: remote.ptr::<u8>(p).byte_add(me * SLOT).cast(),
                    expected: storage.ptr::<u8>().byte_add(p * SLOT + 8).cast(),
                    outbound: storage.ptr::<u8>().byte_add(p * SLOT + 16).cast(),
                })
            })
            .collect();
        Ok(MemorySemaphores { handles, remote, storage })
    }

    /// Emulated switch channels over `buf` (exportable, the same size on every rank): every
    /// rank's copy mapped here, and `blocks` independent barriers, one per block.
    pub fn emulated_switch_channels(&self, buf: &DeviceBuffer, blocks: usize) -> Result<EmulatedSwitchChannels> {
        let buffers = self.exchange(buf)?;
        let n = self.world_size();
        if (0..n).any(|r| buffers.len(r) != buf.len() as u64) {
            return Err(Error::InvalidArgument("switch channel buffers differ in size between ranks".into()));
        }
        let buffer_table = DeviceBuffer::from_slice(&self.gpu, buffers.addrs())?;
        let mut tables = vec![];
        let mut semaphores = Vec::with_capacity(blocks);
        let mut handles = Vec::with_capacity(blocks);
        for _ in 0..blocks {
            let sems = self.memory_semaphores()?;
            let table = DeviceBuffer::from_slice(&self.gpu, &sems.table())?;
            handles.push(EmulatedSwitchChannel {
                buffers: buffer_table.ptr(),
                semaphores: table.ptr(),
                size: buf.len() as u64,
                rank: self.rank() as u32,
                n_ranks: n as u32,
            });
            tables.push(table);
            semaphores.push(sems);
        }
        tables.push(buffer_table);
        Ok(EmulatedSwitchChannels { handles, _tables: tables, _semaphores: semaphores, _buffers: buffers })
    }

    /// Switch channels over `buf` for `blocks` blocks. NVLink multicast is used only where the
    /// guard allows it ([`crate::nvls::multicast_allowed_by_env`]) and the processes could share a
    /// multicast object; today the multicast object is built for the GPUs of one process only
    /// ([`crate::nvls::MulticastBuffer`]), so across processes the emulation is returned, with
    /// the reason.
    pub fn switch_channels(&self, buf: &DeviceBuffer, blocks: usize) -> Result<SwitchChannels> {
        let reason = match crate::nvls::multicast_allowed_by_env() {
            Err(e) => e.to_string(),
            Ok(_) => "multicast objects are not yet shared between processes; using peer pointers".into(),
        };
        Ok(SwitchChannels::Emulated { channels: self.emulated_switch_channels(buf, blocks)?, reason })
    }

    /// Port channels toward every other rank: puts copy from this rank's `src` (offsets into it)
    /// to the peer's `dst` (offsets into the peer's buffer), on this rank's proxy.
    pub fn port_channels(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<PortChannels> {
        let n = self.world_size();
        let me = self.rank();
        let storage = DeviceBuffer::exportable_filled(&self.gpu, n * SLOT, 0)?;
        let sems = self.exchange(&storage)?;
        let dsts = self.exchange(dst)?;
        let mut b = ProxyBuilder::new(&self.gpu);
        let src_id = b.add_memory(MemoryRegion { base: src.addr(), bytes: src.len() as u64 })?;
        let mut ids = Vec::with_capacity(n);
        for p in 0..n {
            if p == me {
                ids.push(None);
                continue;
            }
            let dst_id = b.add_memory(MemoryRegion { base: dsts.addr(p), bytes: dsts.len(p) })?;
            // Rank p waits for this rank's signals in its slot `me`.
            let sem_id = b.add_semaphore(sems.addr(p) + (me * SLOT) as u64)?;
            ids.push(Some((dst_id, sem_id)));
        }
        let proxy = b.start()?;
        let channels = ids
            .iter()
            .enumerate()
            .map(|(p, ids)| {
                ids.map(|(dst_id, sem_id)| PortChannel {
                    fifo: proxy.fifo_handle(),
                    semaphore: Host2DeviceSemaphore {
                        inbound: storage.ptr::<u8>().byte_add(p * SLOT).cast(),
                        expected: storage.ptr::<u8>().byte_add(p * SLOT + 8).cast(),
                    },
                    semaphore_id: sem_id.0,
                    dst_memory_id: dst_id.0,
                    src_memory_id: src_id.0,
                    _pad: 0,
                })
            })
            .collect();
        Ok(PortChannels { channels, proxy, _dst: dsts, _sems: sems, _storage: storage })
    }
}
