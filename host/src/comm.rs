//! A rank's view of the other ranks' GPU memory, and the cross-process builders of semaphores,
//! memory channels, port channels and switch channels.
//!
//! ```text
//!  every rank                       exchange (bootstrap all-gather of IPC handles)
//!  DeviceBuffer ──ExportedMemory──►  rank r imports every other rank's buffer:
//!                                    PeerBuffers[p] = address of rank p's buffer, valid here
//! ```
//!
//! Semaphores: every rank allocates one counter slot per peer (inbound, expected, outbound) and
//! exchanges the slots' buffer; rank r's handle toward p reads its own slot p and writes rank p's
//! slot r. Memory channels: every rank exchanges its data buffer and a zeroed packet buffer with
//! one region per peer; rank r's channel toward p writes p's buffer directly and writes packets
//! into region r of p's packet buffer, and reads the packets p sent it from its own region p:
//!
//! ```text
//!  rank r's packet buffer:  [ from rank 0 | from rank 1 | ... | from rank N-1 ]   (packet_bytes each)
//!  r's channel toward p:    dst = p's buffer, src = r's buffer,
//!                           packets = r.pkts + p * packet_bytes, remote_packets = p.pkts + r * packet_bytes
//! ```
//!
//! Port channels: every rank runs one proxy that copies from its source buffer into the
//! peers' imported destination buffers and signals the peers' host-to-device counters: words of
//! shared host memory when all ranks are on this machine (the proxy thread stores them), the
//! peers' imported GPU counters otherwise (the proxy's stream writes them). A peer on another
//! machine (or every peer, with `MSCCLPP_RS_TRANSPORT=tcp`) is reached through the TCP transport
//! instead ([`crate::transport::tcp`]): this rank's proxy sends to the peer's, whose receiver
//! lands the data in its destination buffer and increments its slot's inbound counter.
//!
//! Where every rank runs ([`Topology`]: machine and GPU) is exchanged once, at the first call
//! that needs it (every builder below, and [`Communicator::topology`]); memory channels, packets
//! and switch channels toward a rank on another machine fail with [`Error::OffMachine`].
//!
//! Drop order is part of the types: a proxy stops before the mappings it copies through are
//! closed, and mappings close before the local buffers they may still reference are freed.

use std::sync::Arc;

use mscclpp_device::channel::emulated_switch::EmulatedSwitchChannel;
use mscclpp_device::channel::memory::MemoryChannel;
use mscclpp_device::channel::port::PortChannel;
use mscclpp_device::packet::LL16Packet;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};

use crate::bootstrap::{Bootstrap, BootstrapExt};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ipc::{ExportedMemory, ImportedMemory};
use crate::memory::{DeviceBuffer, Retained};
use crate::proxy::{MemoryId, ProxyBuilder, ProxyOptions, ProxyService, SemaphoreId};
use crate::semaphore::{HostInboundWord, SemaphoreSlot};
use crate::shm::SharedHostMemory;
use crate::topology::Topology;
use crate::transport::TransportKind;
use crate::transport::engine::MemoryRegion;
use crate::transport::ipc::HostCounter;
use crate::transport::tcp::cuda::{CudaLanding, CudaSource};
use crate::transport::tcp::{
    ConnectOptions, Link, RemoteMemory, TcpConfig, TcpTransport, connect::PeerAddr, connect_peers,
};

/// A bootstrap (any [`Bootstrap`]: [`crate::bootstrap::TcpBootstrap`] or one of the program's
/// own) plus the GPU this rank uses.
#[derive(Clone)]
pub struct Communicator {
    boot: Arc<dyn Bootstrap>,
    gpu: Arc<Gpu>,
    /// Where every rank runs, once exchanged (shared by clones).
    topology: Arc<std::sync::Mutex<Option<Arc<Topology>>>>,
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
    ///
    /// # Panics
    /// If `r` is not below [`PeerBuffers::ranks`] (as slice indexing does).
    pub fn addr(&self, r: usize) -> u64 {
        self.addrs[r]
    }
    /// Rank `r`'s buffer as a typed pointer.
    ///
    /// # Panics
    /// If `r` is not below [`PeerBuffers::ranks`].
    pub fn ptr<T>(&self, r: usize) -> GlobalPtr<T> {
        GlobalPtr::from_addr(self.addrs[r])
    }
    /// Rank `r`'s buffer size in bytes.
    ///
    /// # Panics
    /// If `r` is not below [`PeerBuffers::ranks`].
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
    /// The handle toward rank `peer` (`None` for this rank itself, or a rank that does not
    /// exist).
    pub fn get(&self, peer: usize) -> Option<MemoryDevice2DeviceSemaphore> {
        self.handles.get(peer).copied().flatten()
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
    kinds: Vec<Option<TransportKind>>,
    // Field order is drop order: the proxy first, then the mappings it uses, then local memory.
    proxy: ProxyService,
    /// This rank's inbound counters in shared host memory, when used.
    _host: Option<Arc<SharedHostMemory>>,
    _dst: PeerBuffers,
    _sems: PeerBuffers,
    _storage: DeviceBuffer,
    /// This rank's `src` and `dst`: the proxy copies from the one, the peers' puts land in the
    /// other (through IPC or this rank's transport receivers), so they live as long as this.
    _buffers: [Retained; 2],
}

impl std::fmt::Debug for PortChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortChannels").field("channels", &self.channels).finish_non_exhaustive()
    }
}

impl PortChannels {
    /// The channel toward rank `peer` (`None` for this rank, or a rank that does not exist).
    pub fn get(&self, peer: usize) -> Option<PortChannel> {
        self.channels.get(peer).copied().flatten()
    }
    /// A table in rank order for device code: this rank's own entry is zeroed.
    pub fn table(&self) -> Vec<PortChannel> {
        self.channels.iter().map(|h| h.unwrap_or(bytemuck::Zeroable::zeroed())).collect()
    }
    /// The transport of the channel toward rank `peer` (`None` for this rank).
    pub fn transport(&self, peer: usize) -> Option<TransportKind> {
        self.kinds.get(peer).copied().flatten()
    }
    /// The proxy serving these channels (its `check` reports a failed request).
    pub fn proxy(&self) -> &ProxyService {
        &self.proxy
    }
    /// Stops the proxy and returns the first error it hit, if any (unless
    /// [`ProxyService::check`] already took it).
    pub fn stop(self) -> Result<()> {
        let Self { proxy, .. } = self;
        proxy.stop()
    }
}

/// Memory channels from this rank to every other rank over one exchanged buffer
/// ([`Communicator::memory_channels`]).
pub struct MemoryChannels {
    channels: Vec<Option<MemoryChannel>>,
    packet_bytes: usize,
    // Field order is drop order: the mappings of the peers' memory close before this rank's
    // packet buffer and semaphore counters (which the peers may have mapped) are freed.
    _remote_packets: Option<PeerBuffers>,
    _buffers: PeerBuffers,
    _semaphores: MemorySemaphores,
    _packets: Option<DeviceBuffer>,
    /// This rank's buffer, which the peers map and write: allocated as long as this lives.
    _buffer: Retained,
}

impl std::fmt::Debug for MemoryChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryChannels")
            .field("channels", &self.channels)
            .field("packet_bytes", &self.packet_bytes)
            .finish_non_exhaustive()
    }
}

impl MemoryChannels {
    /// The channel toward rank `peer` (`None` for this rank, or a rank that does not exist).
    pub fn get(&self, peer: usize) -> Option<MemoryChannel> {
        self.channels.get(peer).copied().flatten()
    }
    /// A table in rank order for device code: this rank's own entry is zeroed.
    pub fn table(&self) -> Vec<MemoryChannel> {
        self.channels.iter().map(|h| h.unwrap_or(bytemuck::Zeroable::zeroed())).collect()
    }
    /// Bytes of packet buffer each channel has (its `packet_bytes`).
    pub fn packet_bytes(&self) -> usize {
        self.packet_bytes
    }
}

/// Checks the packet region size of [`Communicator::memory_channels`] and returns the size of a
/// rank's whole packet buffer (one region per rank).
fn packet_buffer_bytes(packet_bytes: usize, world_size: usize) -> Result<usize> {
    let packet = std::mem::size_of::<LL16Packet>();
    if !packet_bytes.is_multiple_of(packet) {
        return Err(Error::InvalidArgument(format!(
            "memory channels: packet_bytes must be a multiple of {packet} (the LL16 packet size), got \
             {packet_bytes}"
        )));
    }
    packet_bytes.checked_mul(world_size).ok_or_else(|| {
        Error::InvalidArgument(format!("memory channels: {world_size} regions of {packet_bytes} packet bytes overflow"))
    })
}

/// Most blocks [`Communicator::switch_channels`] builds barriers for: each is an exchange of
/// its own semaphore buffer (a 2 MiB exportable allocation), and a grid of co-resident blocks
/// (what the barriers serve) has far fewer on any GPU.
pub const MAX_SWITCH_BLOCKS: usize = 1024;

fn check_switch_blocks(blocks: usize) -> Result<()> {
    if blocks > MAX_SWITCH_BLOCKS {
        return Err(Error::InvalidArgument(format!(
            "switch channels: {blocks} blocks (at most {MAX_SWITCH_BLOCKS}, each with barriers of its own)"
        )));
    }
    Ok(())
}

/// Whether two ranks' buffers come from one process (ranks as threads of it).
fn shares_a_process(all: &[ExportedMemory]) -> bool {
    let mut pids: Vec<u32> = all.iter().map(|e| e.pid).collect();
    pids.sort_unstable();
    pids.windows(2).any(|w| w[0] == w[1])
}

/// Rank `me`'s channel toward rank `peer`, from addresses valid on `me`'s GPU: `dst` is the
/// peer's buffer, `src` this rank's (address, bytes); `(packets, peer_packets)` are the starts of
/// this rank's packet buffer and of the peer's (each with one `packet_bytes` region per rank).
fn channel_toward(
    (me, peer): (usize, usize),
    semaphore: MemoryDevice2DeviceSemaphore,
    dst: (u64, u64),
    src: (u64, u64),
    (packets, peer_packets): (u64, u64),
    packet_bytes: u64,
) -> MemoryChannel {
    crate::channel::memory_channel(
        semaphore,
        dst,
        src,
        // The peer writes its packets for this rank into region `peer` here ...
        packets + peer as u64 * packet_bytes,
        // ... and this rank writes its packets for the peer into region `me` there.
        peer_packets + me as u64 * packet_bytes,
        packet_bytes,
    )
}

/// Emulated switch channels over one buffer: one handle per block (each with its own
/// semaphores), why NVLink multicast was not used, and what keeps their tables and mappings
/// alive.
pub struct EmulatedSwitchChannels {
    handles: Vec<EmulatedSwitchChannel>,
    reason: String,
    _tables: Vec<DeviceBuffer>,
    _semaphores: Vec<MemorySemaphores>,
    _buffers: PeerBuffers,
    /// This rank's buffer, which the peers map: allocated as long as this lives.
    _buffer: Retained,
}

impl std::fmt::Debug for EmulatedSwitchChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedSwitchChannels")
            .field("handles", &self.handles)
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl EmulatedSwitchChannels {
    /// The handles, one per block, for a device-side table indexed by block.
    pub fn handles(&self) -> &[EmulatedSwitchChannel] {
        &self.handles
    }
    /// Why NVLink multicast was not used (the guard's refusal, or what is missing).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl Communicator {
    /// A communicator over `boot` for this rank's `gpu`.
    ///
    /// It asks `boot` to report peers lost without a goodbye ([`Bootstrap::on_peer_lost`]); a
    /// loss sets `gpu`'s abort word ([`crate::abort`]), so that every bounded wait of its kernels
    /// gives up within milliseconds instead of spinning out its budget (the waiting threads exit,
    /// the first printing the lost rank) and the next [`Gpu::synchronize`] returns
    /// [`Error::PeerLost`] naming it.
    ///
    /// What `boot` says of this rank ([`Bootstrap::info`]: a program's own implementation fills
    /// in its [`RankInfo`](crate::bootstrap::RankInfo) itself) is checked by the first call that
    /// relies on it ([`Self::topology`], and with it every builder), which fails with
    /// [`Error::InvalidArgument`] naming the problem ([`Self::check_bootstrap`]);
    /// [`Self::try_new`] checks at once.
    pub fn new(boot: Arc<dyn Bootstrap>, gpu: Arc<Gpu>) -> Self {
        let target = gpu.clone();
        boot.on_peer_lost(Arc::new(move |peer, _why| {
            target.abort_word().set(crate::abort::AbortCause::PeerLost(peer as u64));
        }));
        Self { boot, gpu, topology: Arc::default() }
    }

    /// [`Self::new`], with `boot`'s rank information checked first ([`Self::check_bootstrap`]):
    /// a rank not below the world size, a world above
    /// [`MAX_WORLD_SIZE`](crate::bootstrap::env::MAX_WORLD_SIZE), ... is an error here, before
    /// anything is registered with `boot`.
    pub fn try_new(boot: Arc<dyn Bootstrap>, gpu: Arc<Gpu>) -> Result<Self> {
        Self::check_bootstrap(&*boot)?;
        Ok(Self::new(boot, gpu))
    }

    /// Checks what `boot` says of this rank, as a communicator relies on it: a world of 1 to
    /// [`MAX_WORLD_SIZE`](crate::bootstrap::env::MAX_WORLD_SIZE) ranks, this rank below it, a
    /// local rank below a local size no larger than the world, and [`Bootstrap::rank`] and
    /// [`Bootstrap::world_size`] agreeing with [`Bootstrap::info`]. An
    /// [`Error::InvalidArgument`] names the first problem.
    pub fn check_bootstrap(boot: &dyn Bootstrap) -> Result<()> {
        let info = boot.info();
        info.check("the bootstrap's RankInfo").map_err(|e| match e {
            Error::RankEnv(why) => Error::InvalidArgument(why),
            e => e,
        })?;
        if (boot.rank(), boot.world_size()) != (info.rank, info.world_size) {
            return Err(Error::InvalidArgument(format!(
                "the bootstrap says rank {} of {} but its RankInfo says rank {} of {}",
                boot.rank(),
                boot.world_size(),
                info.rank,
                info.world_size
            )));
        }
        Ok(())
    }

    /// Where every rank runs: its machine, its GPU, and the transport port channels toward it
    /// use. Exchanged through the bootstrap at the first call that needs it (this one, or any
    /// builder of semaphores or channels): a collective step, so every rank makes that first
    /// call at the same point, as with every builder. The bootstrap's rank information is
    /// checked first ([`Self::check_bootstrap`]).
    pub fn topology(&self) -> Result<Arc<Topology>> {
        let mut t = self.topology.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = &*t {
            return Ok(t.clone());
        }
        Self::check_bootstrap(&*self.boot)?;
        let fresh = Arc::new(Topology::exchange(&*self.boot, &self.gpu)?);
        *t = Some(fresh.clone());
        Ok(fresh)
    }

    /// How many ranks of this process drive this rank's GPU, this one included
    /// ([`Topology::ranks_sharing_gpu`]): ranks that are threads of one process
    /// ([`crate::bootstrap::LocalBootstrap`]) on one GPU run their kernels at the same time.
    /// Collective at its first call, as [`Self::topology`].
    pub fn ranks_sharing_gpu(&self) -> Result<usize> {
        Ok(self.topology()?.ranks_sharing_gpu())
    }

    /// This rank's share of its GPU's SMs: the SM count divided by [`Self::ranks_sharing_gpu`]
    /// (at least 1). A kernel whose blocks wait for other ranks' blocks must fit in it, so that
    /// every rank's blocks are resident at once; libraries size their default grids with it.
    pub fn sm_share(&self) -> Result<u32> {
        Ok(self.topology()?.sm_share(self.gpu.info().sm_count))
    }

    /// Whether this rank's kernels that wait for other ranks may be launched early, overlapped
    /// with the kernel before them (programmatic stream serialization): not where ranks of this
    /// process share the GPU ([`Self::ranks_sharing_gpu`]). An early kernel holds its blocks'
    /// SMs while it waits for its predecessor, so two kernels of every rank would have to be
    /// resident at once, and a rank's blocks could wait for SMs that other ranks' early kernels
    /// hold.
    pub fn may_overlap_launches(&self) -> Result<bool> {
        Ok(self.ranks_sharing_gpu()? <= 1)
    }

    /// An [`Error::OffMachine`] for `what` if some rank runs on another machine
    /// ([`Topology::require_one_machine`]).
    fn require_one_machine(&self, what: &str) -> Result<()> {
        self.topology()?.require_one_machine(what)
    }

    /// Aborts this GPU's waits: every bounded wait of its kernels that has waited a millisecond
    /// or more (and every later one that does) gives up and exits its thread (the first prints
    /// "aborted by the host"), and the next [`Gpu::synchronize`] returns [`Error::Aborted`]. For an error path on which peers may be waiting for
    /// this rank's GPU: abort, then exit. The word stays set; the context is not for reuse.
    pub fn abort(&self) {
        self.gpu.abort_word().set(crate::abort::AbortCause::Requested);
    }

    /// Gives up on the job, for an error path on which peers may be waiting for this rank:
    /// [`abort`](Self::abort)s this GPU's waits and [`abandon`](Bootstrap::abandon)s the
    /// bootstrap, so that every peer sees this rank as lost and its waits give up within
    /// milliseconds too, its next [`Gpu::synchronize`] returning [`Error::PeerLost`] naming this
    /// rank (where its bootstrap reports losses, as [`TcpBootstrap`](crate::TcpBootstrap) does).
    /// The bootstrap is of no further use.
    pub fn abandon(&self) {
        self.abort();
        self.boot.abandon();
    }

    /// Why this GPU's waits were aborted, once they were: as an error to report
    /// ([`Error::PeerLost`] naming the lost rank, or [`Error::Aborted`]).
    pub fn abort_error(&self) -> Option<Error> {
        self.gpu.abort_word().cause().map(crate::abort::abort_error)
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
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.boot
    }
    /// This rank's GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Every rank contributes `buf` (allocated with [`DeviceBuffer::alloc_exportable`]); returns
    /// every rank's buffer as addresses valid here. Every rank must run on this machine
    /// ([`Error::OffMachine`] otherwise).
    ///
    /// Ranks may be processes or threads of one process ([`crate::bootstrap::LocalBootstrap`]),
    /// on one GPU or several: a buffer of a rank in another process is mapped with CUDA IPC; a
    /// buffer of a rank in this process is used at its own address (with peer access enabled
    /// when it is on another GPU), and the [`PeerBuffers`] hold its memory allocated while they
    /// live ([`crate::ipc`]). When ranks share a process the exchange ends with a barrier, so that
    /// no rank lets go of its buffer before the others hold it.
    pub fn exchange(&self, buf: &DeviceBuffer) -> Result<PeerBuffers> {
        self.require_one_machine("mapping GPU memory")?;
        self.exchange_where(buf, |_| true)
    }

    /// [`Self::exchange`], importing only the ranks `import` selects (the others' entries are 0,
    /// with their sizes).
    pub(crate) fn exchange_where(&self, buf: &DeviceBuffer, import: impl Fn(usize) -> bool) -> Result<PeerBuffers> {
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
            } else if !import(r) {
                e.validate()?;
                addrs.push(0);
                sizes.push(e.bytes);
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
        // Ranks that are threads of one process hold each other's memory from the import on,
        // not before: keep every exporter's buffer (borrowed by this call) until every rank has
        // imported. All ranks see the same pids, so all take this barrier or none.
        if shares_a_process(&all) {
            self.boot.barrier()?;
        }
        Ok(PeerBuffers { addrs, sizes, _imports: imports })
    }

    /// Memory semaphores toward every other rank.
    pub fn memory_semaphores(&self) -> Result<MemorySemaphores> {
        self.require_one_machine("memory semaphores")?;
        let n = self.world_size();
        let me = self.rank();
        let storage = DeviceBuffer::exportable_filled(&self.gpu, SemaphoreSlot::array_bytes(n)?, 0)?;
        let remote = self.exchange(&storage)?;
        for p in (0..n).filter(|&p| p != me) {
            SemaphoreSlot::check_within(p, remote.len(p), me)?;
        }
        // Slot p here is this rank's side toward p; rank p's side toward this rank is its slot `me`.
        let handles = (0..n)
            .map(|p| {
                (p != me).then(|| {
                    let remote_inbound = SemaphoreSlot::at(remote.addr(p), me).inbound();
                    SemaphoreSlot::at(storage.addr(), p).device_to_device(remote_inbound)
                })
            })
            .collect();
        Ok(MemorySemaphores { handles, remote, storage })
    }

    /// Memory channels toward every other rank over `buf` (exportable:
    /// [`DeviceBuffer::alloc_exportable`] or [`DeviceBuffer::exportable_filled`], on this rank's
    /// GPU). Every rank calls it at the same point, each with its own buffer (the sizes may
    /// differ: each channel's `dst_bytes` is its peer's size).
    ///
    /// The channel toward peer `p` puts into and gets from `p`'s buffer (`dst`, mapped here) and
    /// this rank's `buf` (`src`); it signals and waits with a memory semaphore of its own; and it
    /// has `packet_bytes` of LL packet buffer each way (a multiple of 16 bytes, the LL16 packet
    /// size): this rank allocates a zeroed packet buffer of `world_size * packet_bytes` whose
    /// region `p` is where `p` writes its packets for this rank (see the module documentation).
    /// With `packet_bytes` 0 the channels have no packet buffer (nothing is allocated or
    /// exchanged for it, and the handles' packet addresses are 0): for kernels that send no
    /// packets through the channels. Every rank passes the same `packet_bytes`. Keep `buf` alive
    /// as long as kernels use the handles.
    pub fn memory_channels(&self, buf: &DeviceBuffer, packet_bytes: usize) -> Result<MemoryChannels> {
        self.require_one_machine("memory channels")?;
        let n = self.world_size();
        let me = self.rank();
        let total = packet_buffer_bytes(packet_bytes, n)?;
        if !buf.is_exportable() {
            return Err(Error::InvalidArgument(
                "memory channels: the buffer must come from DeviceBuffer::alloc_exportable (or exportable_*)".into(),
            ));
        }
        let buffers = self.exchange(buf)?;
        let packets = (total > 0).then(|| DeviceBuffer::exportable_filled(&self.gpu, total, 0)).transpose()?;
        let remote_packets = packets.as_ref().map(|b| self.exchange(b)).transpose()?;
        if let Some(r) = &remote_packets
            && let Some(p) = (0..n).find(|&p| r.len(p) != total as u64)
        {
            return Err(Error::InvalidArgument(format!(
                "memory channels: rank {p} has {} bytes of packet buffer, this rank {total} (ranks passed \
                 different packet_bytes)",
                r.len(p)
            )));
        }
        let semaphores = self.memory_semaphores()?;
        let channels = (0..n)
            .map(|p| {
                semaphores.get(p).map(|sem| {
                    channel_toward(
                        (me, p),
                        sem,
                        (buffers.addr(p), buffers.len(p)),
                        (buf.addr(), buf.len() as u64),
                        (
                            packets.as_ref().map_or(0, DeviceBuffer::addr),
                            remote_packets.as_ref().map_or(0, |r| r.addr(p)),
                        ),
                        packet_bytes as u64,
                    )
                })
            })
            .collect();
        Ok(MemoryChannels {
            channels,
            packet_bytes,
            _remote_packets: remote_packets,
            _buffers: buffers,
            _semaphores: semaphores,
            _packets: packets,
            _buffer: buf.retain(),
        })
    }

    /// Switch channels over `buf` (exportable, the same size on every rank) for `blocks`
    /// blocks: every rank's copy mapped here, and `blocks` independent barriers, one per block.
    /// NVLink multicast is used only where the guard allows it
    /// ([`crate::nvls::multicast_allowed_by_env`]) and the processes could share a multicast
    /// object; today the multicast object is built for the GPUs of one process only
    /// ([`crate::nvls::MulticastBuffer`]), so the emulation over peer pointers is returned, with
    /// the reason ([`EmulatedSwitchChannels::reason`]).
    pub fn switch_channels(&self, buf: &DeviceBuffer, blocks: usize) -> Result<EmulatedSwitchChannels> {
        check_switch_blocks(blocks)?;
        self.require_one_machine("switch channels")?;
        let reason = match crate::nvls::multicast_allowed_by_env() {
            Err(e) => e.to_string(),
            Ok(_) => "multicast objects are not yet shared between processes; using peer pointers".into(),
        };
        let buffers = self.exchange(buf)?;
        let n = self.world_size();
        if (0..n).any(|r| buffers.len(r) != buf.len() as u64) {
            return Err(Error::InvalidArgument("switch channel buffers differ in size between ranks".into()));
        }
        let as_u32 = |what: &str, v: usize| {
            u32::try_from(v).map_err(|_| Error::InvalidArgument(format!("switch channels: {what} {v} is above 2^32")))
        };
        let (rank, n_ranks) = (as_u32("rank", self.rank())?, as_u32("world size", n)?);
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
                rank,
                n_ranks,
            });
            tables.push(table);
            semaphores.push(sems);
        }
        tables.push(buffer_table);
        Ok(EmulatedSwitchChannels {
            handles,
            reason,
            _tables: tables,
            _semaphores: semaphores,
            _buffers: buffers,
            _buffer: buf.retain(),
        })
    }

    /// Port channels toward every other rank: puts copy from this rank's `src` (offsets into it)
    /// to the peer's `dst` (offsets into the peer's buffer), on this rank's proxy. The channels
    /// hold both buffers' memory ([`DeviceBuffer::retain`]): it stays allocated as long as they
    /// exist, even when the caller drops the buffers, since the proxy and the peers reach it by
    /// address.
    ///
    /// When every rank runs on this machine, the semaphore counters the proxies signal are in
    /// shared host memory ([`crate::shm`]): the receiver's GPU polls its word and the sender's
    /// proxy thread stores to it once the copies before the signal are complete, with no driver
    /// call for a signal on its own. Otherwise they are in the receiver's GPU memory, written by
    /// the proxy's stream. A peer on another machine, or every peer when a rank sets
    /// `MSCCLPP_RS_TRANSPORT=tcp`, is served by the TCP transport
    /// ([`PortChannels::transport`] says which); the kernels' side is the same either way.
    pub fn port_channels(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<PortChannels> {
        self.port_channels_with(src, dst, ProxyOptions::default())
    }

    /// [`Self::port_channels`] with a proxy thread configured by `options` (its idle policy, the
    /// CPU it is pinned to, its drain and flush timeouts).
    pub fn port_channels_with(
        &self,
        src: &DeviceBuffer,
        dst: &DeviceBuffer,
        options: ProxyOptions,
    ) -> Result<PortChannels> {
        let n = self.world_size();
        let me = self.rank();
        // (`dst` is checked by its exchange.) The proxy copies from `src` on this GPU's stream.
        if src.gpu().ordinal() != self.gpu.ordinal() {
            return Err(Error::InvalidArgument(format!(
                "port channels: the source buffer is on GPU {}, this rank uses GPU {}",
                src.gpu().ordinal(),
                self.gpu.ordinal()
            )));
        }
        let topo = self.topology()?;
        let kinds: Vec<Option<TransportKind>> = (0..n).map(|p| (p != me).then(|| topo.transport(p))).collect();
        let tcp = |p: usize| kinds[p] == Some(TransportKind::Tcp);
        let storage = DeviceBuffer::exportable_filled(&self.gpu, SemaphoreSlot::array_bytes(n)?, 0)?;
        let sems = self.exchange_where(&storage, |p| !tcp(p))?;
        let dsts = self.exchange_where(dst, |p| !tcp(p))?;
        // Shared host counters need every rank on this machine and reachable through IPC (the
        // same answer on every rank: host_counters is collective).
        let host = if topo.single_machine() && !topo.any_tcp() { Some(self.host_counters()?) } else { None };
        let hints = self.boot.hints();
        let cfg = TcpConfig { timeout: hints.timeout.unwrap_or(TcpConfig::default().timeout), ..TcpConfig::default() };
        let mut links = if topo.any_tcp() {
            let peers: Vec<PeerAddr> =
                (0..n).filter(|&p| tcp(p)).map(|p| PeerAddr { rank: p, same_machine: topo.same_machine(p) }).collect();
            let opts = ConnectOptions { max_chunk: cfg.chunk_bytes as u64, ..Default::default() };
            connect_peers(&*self.boot, &peers, &opts)?.into_iter().map(Some).collect()
        } else {
            Vec::new()
        };
        let options = ProxyOptions { flush_timeout: options.flush_timeout.or(hints.timeout), ..options };
        let mut b = options.apply(ProxyBuilder::new(&self.gpu));
        let src_region = MemoryRegion { base: src.addr(), bytes: src.len() as u64 };
        let src_id = b.add_memory(src_region)?;
        let mut ids = Vec::with_capacity(n);
        for (p, kind) in kinds.iter().enumerate() {
            let Some(kind) = *kind else {
                ids.push(None);
                continue;
            };
            SemaphoreSlot::check_within(p, sems.len(p), me)?;
            // One arm per transport kind: the ids this rank's proxy serves rank p's channel with.
            let route = match kind {
                TransportKind::CudaIpc => ipc_port(&mut b, (me, p), &dsts, &sems, host.as_ref())?,
                TransportKind::Tcp => {
                    let link = links
                        .iter_mut()
                        .find_map(|l| l.take_if(|l| l.peer == p))
                        .ok_or_else(|| Error::proxy(format!("no TCP connection with rank {p}")))?;
                    // This rank's receiver from p writes p's puts into `dst` and its signals into
                    // slot p's inbound counter, which the channel toward p waits on.
                    let inbound = SemaphoreSlot::at(storage.addr(), p).inbound().addr();
                    let dst_region = MemoryRegion { base: dst.addr(), bytes: dst.len() as u64 };
                    // SAFETY: `src` and `dst` are buffers on this GPU whose memory the channels
                    // retain (`_buffers`); the inbound counter is in `storage`, owned by the
                    // channels too; both are dropped after the proxy, which closes the transport
                    // (joining its receiver) when it stops; only this receiver writes slot p's
                    // inbound counter.
                    unsafe { tcp_port(&mut b, &self.gpu, link, (src_region, dst_region, inbound), dsts.len(p), &cfg)? }
                }
            };
            ids.push(Some((route, kind)));
        }
        let proxy = b.start()?;
        let channels = ids
            .iter()
            .enumerate()
            .map(|(p, ids)| {
                ids.map(|((dst_id, sem_id), kind)| {
                    let slot = SemaphoreSlot::at(storage.addr(), p);
                    let wait_on = match &host {
                        // The inbound word lives in shared host memory; `expected` stays in the slot.
                        Some(h) if kind == TransportKind::CudaIpc => Host2DeviceSemaphore {
                            inbound: HostInboundWord::at(h.own_device, p).ptr(),
                            expected: slot.expected(),
                        },
                        _ => slot.host_to_device(),
                    };
                    crate::channel::port_channel_from(&proxy, sem_id, dst_id, src_id, wait_on)
                })
            })
            .collect();
        Ok(PortChannels {
            channels,
            kinds,
            proxy,
            _host: host.map(|h| h.own),
            _dst: dsts,
            _sems: sems,
            _storage: storage,
            _buffers: [src.retain(), dst.retain()],
        })
    }

    /// Every rank's inbound counters for port channels ([`HostInboundWord`]s) in shared host memory:
    /// this rank's registered for its GPU, the others' mapped here for the proxy thread.
    fn host_counters(&self) -> Result<HostCounters> {
        let n = self.world_size();
        let me = self.rank();
        // Files left by ranks of earlier runs that died before unlinking theirs. Best effort: a
        // failure here leaves them, and does not stop this run.
        let _ = crate::shm::remove_stale_files();
        let name = format!("{}{}-{}-{:016x}", crate::shm::NAME_PREFIX, std::process::id(), me, rand::random::<u64>());
        let bytes = HostInboundWord::array_bytes(n)?;
        let mut own = SharedHostMemory::create(&name, bytes)?;
        own.register(&self.gpu)?;
        let own_device = own.device_addr().ok_or_else(|| Error::proxy("registered memory without an address"))?;
        let names = self.boot.all_gather_checked(name.as_bytes())?;
        let mut peers = Vec::with_capacity(n);
        for (r, other) in names.iter().enumerate() {
            if r == me {
                peers.push(None);
                continue;
            }
            let other = std::str::from_utf8(other)
                .map_err(|_| Error::proxy(format!("rank {r} sent a shared-memory name that is not UTF-8")))?;
            let m = SharedHostMemory::open(other, bytes).map_err(|e| Error::Bootstrap {
                rank: me,
                step: format!("opening rank {r}'s port-channel counters"),
                cause: Box::new(e),
            })?;
            peers.push(Some(Arc::new(m)));
        }
        // Everyone has everyone's file mapped: the names can go.
        self.boot.barrier()?;
        own.unlink()?;
        Ok(HostCounters { own: Arc::new(own), own_device, peers })
    }
}

/// See [`Communicator::host_counters`].
struct HostCounters {
    own: Arc<SharedHostMemory>,
    own_device: u64,
    peers: Vec<Option<Arc<SharedHostMemory>>>,
}

/// The CUDA IPC route from rank `me` toward rank `p`: p's destination buffer and the counter p
/// waits on (word `me` of p's shared host counters, else slot `me` of p's semaphore storage) are
/// mapped here, and this rank's proxy copies and signals through them.
fn ipc_port(
    b: &mut ProxyBuilder,
    (me, p): (usize, usize),
    dsts: &PeerBuffers,
    sems: &PeerBuffers,
    host: Option<&HostCounters>,
) -> Result<(MemoryId, SemaphoreId)> {
    let dst_id = b.add_memory(MemoryRegion { base: dsts.addr(p), bytes: dsts.len(p) })?;
    // Rank p waits for this rank's signals in its slot `me`.
    let sem_id = match host {
        Some(h) => {
            let peer = h.peers[p].clone().ok_or_else(|| Error::proxy(format!("no counters of rank {p}")))?;
            // SAFETY: word `me` of rank p's array of n counters (a page-aligned mapping of
            // HostInboundWord::array_bytes(n) bytes, and me < n), which only this rank's
            // proxy writes; the Arc it gets keeps the mapping alive.
            let counter =
                unsafe { HostCounter::from_raw(peer.host_ptr().add(HostInboundWord::offset(me)).cast::<u64>(), peer) };
            b.add_host_semaphore(counter)?
        }
        None => b.add_semaphore(SemaphoreSlot::at(sems.addr(p), me).inbound().addr())?,
    };
    Ok((dst_id, sem_id))
}

/// The TCP route toward the peer of `link`: a transport whose sender reads `src` and whose
/// receiver lands the peer's puts in `dst` and its signals in the counter at `inbound`
/// (`(src, dst, inbound)`, all on `gpu`); the peer's destination buffer has `peer_dst_bytes`.
///
/// # Safety
/// `src` and `dst` must stay valid device memory of `gpu`, and `inbound` an 8-aligned u64 of it
/// that nothing else writes, until the proxy built from `b` has stopped (it closes the transport,
/// joining its threads).
unsafe fn tcp_port(
    b: &mut ProxyBuilder,
    gpu: &Arc<Gpu>,
    link: Link,
    (src, dst, inbound): (MemoryRegion, MemoryRegion, u64),
    peer_dst_bytes: u64,
    cfg: &TcpConfig,
) -> Result<(MemoryId, SemaphoreId)> {
    // SAFETY: the caller's contract.
    let (source, landing) =
        unsafe { (CudaSource::new(gpu, vec![src], cfg)?, CudaLanding::new(gpu, vec![dst], vec![inbound], cfg)?) };
    let remote = RemoteMemory { regions: vec![peer_dst_bytes], semaphores: 1 };
    let t = b.add_transport(Box::new(TcpTransport::start(link, source, landing, remote, cfg)?));
    Ok((b.add_remote_memory(t, 0, peer_dst_bytes)?, b.add_remote_semaphore(t, 0)?))
}

#[cfg(test)]
mod packet_tests {
    use rand::RngExt;

    /// A packet region is a multiple of the LL16 packet size, 0 included (no packet buffer);
    /// the whole buffer is one region per rank, and a size that overflows is refused.
    #[test]
    fn packet_regions_are_whole_packets_or_none() {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let (bytes, n) = (rng.random_range(0..1usize << 20), rng.random_range(1..1024usize));
            let got = super::packet_buffer_bytes(bytes, n);
            if bytes % 16 == 0 {
                assert_eq!(got.unwrap(), bytes * n, "{bytes} bytes for {n} ranks");
            } else {
                assert!(got.unwrap_err().to_string().contains("multiple of 16"), "{bytes}");
            }
        }
        assert_eq!(super::packet_buffer_bytes(0, 8).unwrap(), 0);
        assert!(super::packet_buffer_bytes(usize::MAX - 15, 2).is_err());
    }
}

#[cfg(test)]
mod switch_tests {
    #[test]
    fn switch_channel_block_counts_are_bounded_before_anything_is_allocated() {
        assert!(super::check_switch_blocks(0).is_ok());
        assert!(super::check_switch_blocks(super::MAX_SWITCH_BLOCKS).is_ok());
        // `Vec::with_capacity(usize::MAX)` of handles was a capacity-overflow panic.
        for blocks in [super::MAX_SWITCH_BLOCKS + 1, 1 << 40, usize::MAX] {
            let e = super::check_switch_blocks(blocks).unwrap_err().to_string();
            assert!(e.contains(&format!("{blocks} blocks")), "{e}");
        }
    }
}

#[cfg(test)]
mod slot_tests {
    use crate::semaphore::SemaphoreSlot;

    const SLOT: usize = SemaphoreSlot::BYTES;

    fn check_slot(peer: usize, len: u64, slot: usize) -> crate::Result<()> {
        SemaphoreSlot::check_within(peer, len, slot)
    }

    #[test]
    fn semaphore_slots_must_lie_inside_the_peer_buffer() {
        assert!(check_slot(1, 4 * SLOT as u64, 3).is_ok());
        assert!(check_slot(1, 4 * SLOT as u64, 4).is_err());
        assert!(check_slot(1, 4 * SLOT as u64 - 1, 3).is_err());
        assert!(check_slot(1, 0, 0).is_err());
        assert!(check_slot(1, u64::MAX, usize::MAX).is_err());
        assert!(check_slot(1, u64::MAX, usize::MAX / SLOT).is_err());
    }
}
