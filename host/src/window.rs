//! Symmetric memory windows: memory registered by every rank together, the same size on each,
//! that kernels address as `(rank, offset)` through the device handle
//! [`mscclpp_device::window::Window`] (see that module for the signal area and the barrier).
//!
//! ```text
//!  every rank:  agree (all-gather of the size, the slots and any local problem: all fail or none)
//!               window memory ──exchange──► bases[p]          (every rank's window, mapped here)
//!               signal area   ──exchange──► peer_signals[p]   (zeroed; one word per writer)
//!               table on the GPU: [bases | peer_signals]  → the device handle
//! ```
//!
//! Registration is collective: every rank calls [`Communicator::window`] (or
//! [`Communicator::register_window`]) at the same point. Before anything is mapped the ranks
//! all-gather what each brings, so that a rank with another size, another number of signal
//! slots, no memory or a misaligned buffer makes *every* rank return an error naming it, instead
//! of leaving the others waiting in a later exchange.
//!
//! A window spans a [`Team`]: the world ([`Communicator::world_team`]) or the ranks of this
//! machine ([`Communicator::node_team`], which works when the world spans several machines).
//! The device handle's `rank` and `size` are the team's, its `barrier` is the team's barrier, and
//! [`Team::world_rank`] maps a team rank back to the world.
//!
//! Memory the caller already has is registered as a [`DeviceBuffer`]
//! ([`Communicator::register_window`]), a cudarc `CudaSlice`
//! ([`Communicator::register_window_slice`]), or a raw device pointer with its length
//! ([`Communicator::register_window_raw`]). How the ranks reach each other's memory decides what
//! memory they may bring:
//!
//! - **Every rank a thread of this process** (the ranks' claims carry a token of their process,
//!   all equal): one address space, so the ranks exchange addresses, not IPC handles. Any device
//!   memory of the rank's GPU is accepted: the middle of an allocation, a small one, cudarc's
//!   stream-ordered pool memory (`CudaStream::alloc`). A rank on another GPU of this process
//!   reaches `cuMemAlloc` memory through peer access (enabled at registration); pool memory it
//!   would reach only after `cuMemPoolSetAccess` opened the whole pool (every allocation in it,
//!   for good) to its GPU, so pool memory (or any memory that is not `cuMemAlloc`'s) is refused,
//!   naming the rank, when the ranks are not all on one GPU.
//! - **Ranks in several processes**: memory is mapped with CUDA IPC, which exports whole driver
//!   allocations, so each rank's memory must be exactly one: from
//!   [`DeviceBuffer::alloc_exportable`], or the start of a `cuMemAlloc` allocation of a multiple
//!   of [`crate::memory::EXPORT_GRANULARITY`] bytes (a smaller one may share a driver allocation
//!   with other buffers, which the peers would then map too); pool memory cannot be exported
//!   this way. Other memory is refused on every rank, naming the rank.
//!
//! Lifetime: a window holds its rank's memory (the [`DeviceBuffer`]'s allocation, or the
//! `CudaSlice` itself, which it owns) and its signal area; in one process every peer's window
//! holds them too, so memory is freed when the last window over it is gone, whatever order the
//! ranks drop theirs in (between processes, [`Window::free`] waits for every rank before any
//! lets go). A window over a raw pointer does not keep that memory: the caller does, until the
//! window is freed or dropped on every rank.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::{CudaSlice, DevicePtr};
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::window::Window as WindowHandle;

use crate::bootstrap::{Bootstrap, BootstrapExt};
use crate::comm::{Communicator, PeerBuffers};
use crate::error::{DriverContext, Error, Result};
use crate::gpu::Gpu;
use crate::memory::DeviceBuffer;

/// Window sizes are multiples of this many bytes, so that 16-byte vector accesses tile a window.
pub const WINDOW_ALIGN: usize = 16;

/// Window memory starts at a multiple of this many bytes on every rank (an exportable buffer is a
/// driver allocation of its own, which starts far more aligned).
pub const WINDOW_BASE_ALIGN: u64 = 256;

/// The most signal slots a window may have.
pub const MAX_SIGNAL_SLOTS: u32 = 1024;

/// A registered window: holds this rank's window memory, its signal area and the mappings of
/// every peer's, for as long as it lives. Dropping it unmaps the peers' memory; [`Window::free`]
/// first waits for every rank, so that no rank lets go while a peer may still use its memory.
pub struct Window {
    handle: WindowHandle,
    team: Team,
    comm: Communicator,
    // Fields drop in order: the mappings close before the local memory they sit beside is freed.
    _peers: Peers,
    _table: DeviceBuffer,
    signals: DeviceBuffer,
    _own: Arc<LocalMemory>,
    owned: Option<DeviceBuffer>,
    slice: Option<Keep>,
}

/// Something held only to keep device memory allocated (a [`crate::memory::Retained`], a
/// `CudaSlice`).
type Keep = Arc<dyn Any + Send + Sync>;

/// What a window holds of its peers' memory.
#[allow(dead_code)]
enum Peers {
    /// Imported with [`Communicator::exchange`]: window memory, then signal areas.
    Ipc(PeerBuffers, PeerBuffers),
    /// Every team rank's memory, found by address in this process (this rank's included).
    Local(Vec<Arc<LocalMemory>>),
}

/// A rank's window memory and signal area as ranks that are threads of one process share them:
/// addresses, and holds that keep both allocated while any window over them lives.
struct LocalMemory {
    gpu: Arc<Gpu>,
    addr: u64,
    bytes: u64,
    signals: u64,
    signal_bytes: u64,
    /// Held, never read.
    _keep: Vec<Keep>,
}

/// The window memory this process's ranks registered, by the key their claims carry, held
/// weakly (the windows hold it).
fn local_windows() -> &'static Mutex<HashMap<u64, Weak<LocalMemory>>> {
    static M: OnceLock<Mutex<HashMap<u64, Weak<LocalMemory>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

impl LocalMemory {
    /// Registers `self` for this process's other ranks; returns its key (never 0) and the hold.
    fn publish(self) -> (u64, Arc<LocalMemory>) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let key = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let held = Arc::new(self);
        let mut reg = local_windows().lock().unwrap_or_else(|e| e.into_inner());
        // Forget windows freed since.
        reg.retain(|_, w| w.strong_count() > 0);
        reg.insert(key, Arc::downgrade(&held));
        (key, held)
    }

    /// The memory registered under `key`, while a window holds it.
    fn find(key: u64) -> Option<Arc<LocalMemory>> {
        local_windows().lock().unwrap_or_else(|e| e.into_inner()).get(&key).and_then(Weak::upgrade)
    }
}

/// A random token of this process: ranks whose claims carry the same one are threads of it
/// (a process id alone is not enough: processes of other pid namespaces may share it).
fn process_token() -> u64 {
    static T: OnceLock<u64> = OnceLock::new();
    *T.get_or_init(|| {
        use std::hash::{BuildHasher, Hash, Hasher};
        // RandomState is seeded from the operating system's randomness.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        std::process::id().hash(&mut h);
        std::time::SystemTime::now().hash(&mut h);
        h.finish() | 1
    })
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Window(rank {} of {}, {} B at {:#x}, {} signal slots)",
            self.handle.rank,
            self.handle.size,
            self.handle.bytes,
            self.handle.local.addr(),
            self.handle.slots
        )
    }
}

impl Window {
    /// The device handle, to pass to kernels by value.
    pub fn handle(&self) -> WindowHandle {
        self.handle
    }
    /// The team that shares the window (the handle's ranks are its ranks).
    pub fn team(&self) -> &Team {
        &self.team
    }
    /// Bytes of the window (the same on every rank).
    pub fn len(&self) -> usize {
        self.handle.bytes as usize
    }
    /// Always false: a window has at least [`WINDOW_ALIGN`] bytes.
    pub fn is_empty(&self) -> bool {
        self.handle.bytes == 0
    }
    /// This rank's window memory.
    pub fn local(&self) -> GlobalPtr<u8> {
        self.handle.local
    }
    /// The buffer [`Communicator::window`] allocated, or a view of the `CudaSlice` given to
    /// [`Communicator::register_window_slice`] (to read and write this rank's window from the
    /// host); `None` for a window over the caller's buffer or pointer.
    pub fn buffer(&self) -> Option<&DeviceBuffer> {
        self.owned.as_ref()
    }
    /// The `CudaSlice` given to [`Communicator::register_window_slice`] (`None` for other
    /// windows, or when `T` is not its element type). The window owns it: to write it from the
    /// host, use [`Self::buffer`].
    pub fn cuda_slice<T: 'static>(&self) -> Option<&CudaSlice<T>> {
        self.slice.as_ref()?.downcast_ref()
    }
    /// This rank's signal area ([`WindowHandle::signal_words`] words).
    pub fn signals(&self) -> &DeviceBuffer {
        &self.signals
    }
    /// Frees the window collectively: a barrier of every rank, then the mappings and memory are
    /// released. Call it on every rank, after this rank's kernels that use the window are done.
    pub fn free(self) -> Result<()> {
        self.comm.bootstrap().barrier()
    }
}

/// The ranks that share a window: world ranks in increasing order, this rank among them. Team
/// rank `i` (the device handle's rank) is world rank `ranks()[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    ranks: Vec<usize>,
    me: usize,
}

impl Team {
    /// The team of the world ranks that `member` selects, as seen by world rank `world_me`
    /// (which must be selected). `None` when it is not.
    pub fn from_members(world: usize, world_me: usize, member: impl Fn(usize) -> bool) -> Option<Self> {
        let ranks: Vec<usize> = (0..world).filter(|&p| p == world_me || member(p)).collect();
        let me = ranks.iter().position(|&p| p == world_me)?;
        member(world_me).then_some(Self { ranks, me })
    }
    /// This rank in the team.
    pub fn rank(&self) -> usize {
        self.me
    }
    /// The number of ranks in the team.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }
    /// The world ranks of the team, in team order.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }
    /// The world rank of team rank `r` (`None` past the team).
    pub fn world_rank(&self, r: usize) -> Option<usize> {
        self.ranks.get(r).copied()
    }
    /// The team rank of world rank `p` (`None` when it is not a member).
    pub fn team_rank(&self, p: usize) -> Option<usize> {
        self.ranks.binary_search(&p).ok()
    }
}

/// What a rank brings to a registration, all-gathered before anything is mapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Claim {
    bytes: u64,
    slots: u32,
    /// A [`Problem`] code (0: none).
    problem: u32,
    /// The rank's [`process_token`].
    process: u64,
    /// The key of its memory in its process's registry ([`LocalMemory::publish`]; 0: none).
    entry: u64,
    /// [`MEM_EXPORTABLE`] and [`MEM_PEER_REACHABLE`] bits of its window memory.
    kind: u32,
    /// Its GPU's ordinal (in its process).
    ordinal: u32,
}

/// Window memory that CUDA IPC maps exactly (windows between processes need it).
const MEM_EXPORTABLE: u32 = 1;
/// `cuMemAlloc` window memory, which another GPU of the process reaches through peer access.
const MEM_PEER_REACHABLE: u32 = 2;

/// Why a rank cannot take part, as all-gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Problem {
    ZeroBytes = 1,
    SizeNotAligned = 2,
    BaseNotAligned = 3,
    NotExportable = 4,
    OtherGpu = 5,
    Allocation = 6,
    TooManySlots = 7,
    NotDeviceMemory = 8,
    BadTeam = 9,
    /// Found by [`check_claims`] (memory another rank's GPU cannot reach), never sent.
    Unreachable = 10,
}

impl Problem {
    fn from_code(code: u32) -> Option<Self> {
        use Problem::*;
        [
            ZeroBytes,
            SizeNotAligned,
            BaseNotAligned,
            NotExportable,
            OtherGpu,
            Allocation,
            TooManySlots,
            NotDeviceMemory,
            BadTeam,
            Unreachable,
        ]
        .into_iter()
        .find(|p| *p as u32 == code)
    }
    fn says(self, c: &Claim) -> String {
        match self {
            Problem::ZeroBytes => "has a window of 0 bytes".into(),
            Problem::SizeNotAligned => {
                format!("has a window of {} bytes, not a multiple of {WINDOW_ALIGN}", c.bytes)
            }
            Problem::BaseNotAligned => format!("has window memory not aligned to {WINDOW_BASE_ALIGN} bytes"),
            Problem::NotExportable => "has memory CUDA IPC cannot map exactly (DeviceBuffer::alloc_exportable, or the start of a cuMemAlloc allocation of a multiple of 2 MiB; not stream-ordered pool memory), which ranks in other processes need".into(),
            Problem::Unreachable => "has memory that ranks on other GPUs of this process cannot reach (only cuMemAlloc memory is reached through peer access; stream-ordered pool memory is not)".into(),
            Problem::NotDeviceMemory => "has no device memory of that size at that address on its GPU".into(),
            Problem::BadTeam => "has a team that is not its own, or one with a rank on another machine".into(),
            Problem::OtherGpu => "has a buffer on another GPU than its communicator's".into(),
            Problem::Allocation => format!("could not allocate its window of {} bytes or its signal area", c.bytes),
            Problem::TooManySlots => format!("asks for {} signal slots, more than {MAX_SIGNAL_SLOTS}", c.slots),
        }
    }
}

impl Claim {
    /// What a rank with `bytes` of window memory at `addr` and `slots` signal slots brings; the
    /// first problem found locally, if any.
    pub(crate) fn of(bytes: usize, addr: u64, slots: u32) -> Self {
        let problem = if bytes == 0 {
            Some(Problem::ZeroBytes)
        } else if !bytes.is_multiple_of(WINDOW_ALIGN) {
            Some(Problem::SizeNotAligned)
        } else if !addr.is_multiple_of(WINDOW_BASE_ALIGN) {
            Some(Problem::BaseNotAligned)
        } else if slots > MAX_SIGNAL_SLOTS {
            Some(Problem::TooManySlots)
        } else {
            None
        };
        Self {
            bytes: bytes as u64,
            slots,
            problem: problem.map_or(0, |p| p as u32),
            process: process_token(),
            entry: 0,
            kind: MEM_EXPORTABLE | MEM_PEER_REACHABLE,
            ordinal: 0,
        }
    }

    fn with(self, problem: Problem) -> Self {
        Self { problem: problem as u32, ..self }
    }

    /// The claim of window memory like `buf` (its kind and GPU).
    fn over(self, buf: &DeviceBuffer) -> Self {
        let kind = (if buf.is_exportable() { MEM_EXPORTABLE } else { 0 })
            | if buf.is_peer_reachable() { MEM_PEER_REACHABLE } else { 0 };
        Self { kind, ordinal: buf.gpu().ordinal() as u32, ..self }
    }
}

/// Whether every rank is a thread of one process (every claim carries the same token).
fn one_process(all: &[Claim]) -> bool {
    all.windows(2).all(|w| w[0].process == w[1].process)
}

/// Checks every rank's claim: the first rank with a problem, then the first whose memory the
/// others cannot reach (between processes: memory CUDA IPC cannot map exactly; in one process:
/// memory that is not `cuMemAlloc`'s while the ranks are on several GPUs), then every rank whose
/// size or slot count differs from rank 0's, is an [`Error::InvalidArgument`] naming it. Every
/// rank sees the same claims, so every rank returns the same verdict.
pub(crate) fn check_claims(all: &[Claim]) -> Result<()> {
    let one = one_process(all);
    // One ordinal is one context here: a `Gpu` of this process is its device's primary context.
    let one_gpu = all.windows(2).all(|w| w[0].ordinal == w[1].ordinal);
    let own = all.iter().enumerate().find(|(_, c)| c.problem != 0).map(|(r, c)| (r, Problem::from_code(c.problem)));
    let memory = || {
        all.iter().enumerate().find_map(|(r, c)| {
            if !one && c.kind & MEM_EXPORTABLE == 0 {
                Some((r, Some(Problem::NotExportable)))
            } else if one && !one_gpu && c.kind & MEM_PEER_REACHABLE == 0 {
                Some((r, Some(Problem::Unreachable)))
            } else {
                None
            }
        })
    };
    if let Some((r, problem)) = own.or_else(memory) {
        let c = &all[r];
        let why = problem.map_or_else(|| format!("reports an unknown problem {}", c.problem), |p| p.says(c));
        return Err(Error::InvalidArgument(format!("window registration: rank {r} {why}")));
    }
    let Some(first) = all.first() else { return Ok(()) };
    let odd: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, c)| (c.bytes, c.slots) != (first.bytes, first.slots))
        .map(|(r, c)| format!("rank {r} has {} bytes and {} slots", c.bytes, c.slots))
        .collect();
    if !odd.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "window registration: every rank must register the same size: rank 0 has {} bytes and {} slots, {}",
            first.bytes,
            first.slots,
            odd.join(", ")
        )));
    }
    Ok(())
}

/// All-gathers this rank's claim and checks every rank's ([`check_claims`]); `local` is this
/// rank's own error behind its problem, returned instead of the common message on this rank.
/// Returns every rank's claim.
pub(crate) fn agree(boot: &dyn Bootstrap, mine: Claim, local: Option<Error>) -> Result<Vec<Claim>> {
    let all = boot.all_gather_pod(&mine)?;
    match (check_claims(&all), local) {
        (Err(_), Some(own)) => Err(own),
        (verdict, _) => verdict.map(|()| all),
    }
}

impl Communicator {
    /// The team of every rank.
    pub fn world_team(&self) -> Team {
        Team { ranks: (0..self.world_size()).collect(), me: self.rank() }
    }

    /// The team of the ranks on this rank's machine ([`crate::topology::Topology::same_machine`]):
    /// collective at its first call, as [`Self::topology`].
    pub fn node_team(&self) -> Result<Team> {
        let topo = self.topology()?;
        Team::from_members(self.world_size(), self.rank(), |p| topo.same_machine(p))
            .ok_or_else(|| Error::InvalidArgument("node team: this rank is not on its own machine".into()))
    }

    /// A window of `bytes` shared by `team` only (zeroed, [`WindowHandle::DEFAULT_SLOTS`] signal
    /// slots): the handle's rank and size are the team's, and its barrier waits for the team's
    /// ranks only. Collective over the world: every rank calls it at the same point with the same
    /// `bytes`, each with its own team of the same kind (every rank's [`Self::node_team`], say),
    /// and maps only its team's memory. The team's ranks must all run on this machine.
    pub fn team_window(&self, team: &Team, bytes: usize) -> Result<Window> {
        self.window_over(team, bytes, WindowHandle::DEFAULT_SLOTS)
    }

    /// A window of `bytes` (a multiple of [`WINDOW_ALIGN`], not 0) with
    /// [`WindowHandle::DEFAULT_SLOTS`] signal slots, zeroed: a collective call, every rank with
    /// the same `bytes`. Every rank allocates exportable memory, the ranks exchange it and map
    /// each other's, and the table of every rank's addresses and signal area is built on this
    /// rank's GPU. A rank with another size (or a problem of its own) makes every rank return
    /// [`Error::InvalidArgument`] naming it. Every rank must run on this machine.
    pub fn window(&self, bytes: usize) -> Result<Window> {
        self.window_with_slots(bytes, WindowHandle::DEFAULT_SLOTS)
    }

    /// [`Self::window`] with `slots` signal slots (at most [`MAX_SIGNAL_SLOTS`]; 0 leaves only
    /// the barrier).
    pub fn window_with_slots(&self, bytes: usize, slots: u32) -> Result<Window> {
        self.window_over(&self.world_team(), bytes, slots)
    }

    fn window_over(&self, team: &Team, bytes: usize, slots: u32) -> Result<Window> {
        let mut claim = Claim::of(bytes, 0, slots);
        let mut local = None;
        let mut mem = None;
        // A team that is not this rank's fails every rank at the agreement, not this one alone.
        if claim.problem == 0
            && let Err(e) = self.check_team(team)
        {
            claim = claim.with(Problem::BadTeam);
            local = Some(e);
        }
        if claim.problem == 0 {
            // Everything this rank allocates is allocated before the agreement, so that a failure
            // fails every rank instead of leaving them in the exchanges.
            match DeviceBuffer::exportable_filled(self.gpu(), bytes, 0)
                .and_then(|b| Ok((b, self.signal_area(team, slots)?)))
            {
                Ok((buf, signals)) => {
                    let (key, own) = self.local_memory(&buf, &signals);
                    claim = claim.over(&buf);
                    claim.entry = key;
                    mem = Some((buf, signals, own));
                }
                Err(e) => {
                    claim = claim.with(Problem::Allocation);
                    local = Some(e);
                }
            }
        }
        let all = agree(&**self.bootstrap(), claim, local)?;
        let (buf, signals, own) =
            mem.ok_or_else(|| Error::InvalidArgument("window registration: no buffer after agreement".into()))?;
        let mut w = self.build_window(team, &buf, signals, slots, &all, own)?;
        w.owned = Some(buf);
        Ok(w)
    }

    /// A window over `buf`, memory this rank already has on its GPU, with
    /// [`WindowHandle::DEFAULT_SLOTS`] signal slots: collective as [`Self::window`], every rank
    /// with a buffer of the same size. When every rank is a thread of this process any buffer
    /// will do (on several GPUs, any from `cuMemAlloc`: every [`DeviceBuffer`] this crate
    /// allocates); between processes it must be exportable ([`DeviceBuffer::alloc_exportable`]),
    /// as the module docs say. The window holds the buffer's memory while it lives (and so do the
    /// peers' windows, in one process); its contents are left as they are.
    pub fn register_window(&self, buf: &DeviceBuffer) -> Result<Window> {
        self.register_over(buf)
    }

    /// A window over a cudarc `CudaSlice` of this rank's GPU (from `CudaStream::alloc*`:
    /// stream-ordered pool memory), with [`WindowHandle::DEFAULT_SLOTS`] signal slots: collective
    /// as [`Self::register_window`]. Accepted when every rank is a thread of this process, on one
    /// GPU (pool memory is not reached through peer access); between processes CUDA IPC cannot
    /// export it, and every rank fails, naming this one (see the module docs).
    ///
    /// The window owns the slice, and in one process every peer's window holds it too: it is
    /// freed (on its stream) when the last window over it is gone, on success or failure alike.
    /// Its stream is synchronised first, so that the allocation and earlier writes are done.
    /// [`Window::buffer`] reads and writes it from the host, [`Window::cuda_slice`] gives it back
    /// as a slice; its contents are left as they are.
    pub fn register_window_slice<T: 'static>(&self, slice: CudaSlice<T>) -> Result<Window> {
        let bytes = slice.num_bytes();
        let stream = slice.stream().clone();
        let (ptr, read) = slice.device_ptr(&stream);
        drop(read);
        let ready = stream.synchronize().ctx(|| format!("synchronising the stream of a slice of {bytes} bytes"));
        let keep: Keep = Arc::new(slice);
        let view = ready.and_then(|()| {
            // SAFETY: the memory is the slice's, which the view owns through `keep`: the view and
            // every hold on it (the window's, every peer window's in this process, whatever the
            // caller builds over `Window::buffer`) keep the slice.
            unsafe { DeviceBuffer::from_raw_owned_by(self.gpu(), ptr, bytes, Some(keep.clone())) }
        });
        match view {
            Ok(view) => {
                let mut w = self.register_over(&view)?;
                w.owned = Some(view);
                w.slice = Some(keep);
                Ok(w)
            }
            Err(e) => self.refuse(ptr, bytes, e),
        }
    }

    /// [`Self::register_window`].
    fn register_over(&self, buf: &DeviceBuffer) -> Result<Window> {
        let mut claim = Claim::of(buf.len(), buf.addr(), WindowHandle::DEFAULT_SLOTS).over(buf);
        if claim.problem == 0 && buf.gpu().ordinal() != self.gpu().ordinal() {
            claim = claim.with(Problem::OtherGpu);
        }
        let (mut local, mut mem) = (None, None);
        if claim.problem == 0 {
            match self.signal_area(&self.world_team(), WindowHandle::DEFAULT_SLOTS) {
                Ok(signals) => {
                    let (key, own) = self.local_memory(buf, &signals);
                    claim.entry = key;
                    mem = Some((signals, own));
                }
                Err(e) => {
                    claim = claim.with(Problem::Allocation);
                    local = Some(e);
                }
            }
        }
        let all = agree(&**self.bootstrap(), claim, local)?;
        let (signals, own) =
            mem.ok_or_else(|| Error::InvalidArgument("window registration: no signal area after agreement".into()))?;
        self.build_window(&self.world_team(), buf, signals, WindowHandle::DEFAULT_SLOTS, &all, own)
    }

    /// A window over `bytes` of device memory at `ptr` that this rank allocated on its GPU, with
    /// [`WindowHandle::DEFAULT_SLOTS`] signal slots: collective as [`Self::register_window`], and
    /// the same memory is accepted (any device memory of this rank's GPU when every rank is a
    /// thread of this process, `cuMemAlloc` memory when they are on several GPUs, memory CUDA IPC
    /// can map exactly between processes: see the module docs). Memory that is not accepted, or
    /// that is not on this rank's GPU, makes every rank fail, naming this one.
    ///
    /// # Safety
    /// The memory stays allocated until the window has been freed ([`Window::free`]) or dropped on
    /// every rank, and every kernel using it is done.
    pub unsafe fn register_window_raw(&self, ptr: u64, bytes: usize) -> Result<Window> {
        // SAFETY: the caller's contract covers the buffer's lifetime, which ends with the window.
        match unsafe { DeviceBuffer::from_raw(self.gpu(), ptr, bytes) } {
            Ok(buf) => self.register_window(&buf),
            Err(e) => self.refuse(ptr, bytes, e),
        }
    }

    /// Takes part in the agreement with `bytes` at `ptr` that are not device memory of this rank's
    /// GPU (`e` says why): every rank fails.
    fn refuse(&self, ptr: u64, bytes: usize, e: Error) -> Result<Window> {
        let claim = Claim::of(bytes, ptr, WindowHandle::DEFAULT_SLOTS);
        let claim = if claim.problem == 0 { claim.with(Problem::NotDeviceMemory) } else { claim };
        agree(&**self.bootstrap(), claim, Some(e))?;
        Err(Error::InvalidArgument("window registration: a refused claim was agreed".into()))
    }

    /// This rank's window memory `buf` and signal area, registered for the ranks of this process
    /// ([`LocalMemory::publish`]), held.
    fn local_memory(&self, buf: &DeviceBuffer, signals: &DeviceBuffer) -> (u64, Arc<LocalMemory>) {
        let holds: Vec<Keep> = vec![Arc::new(buf.retain()), Arc::new(signals.retain())];
        LocalMemory {
            gpu: self.gpu().clone(),
            addr: buf.addr(),
            bytes: buf.len() as u64,
            signals: signals.addr(),
            signal_bytes: signals.len() as u64,
            _keep: holds,
        }
        .publish()
    }
    /// An error unless `team` is a team of this communicator with this rank in it.
    fn check_team(&self, team: &Team) -> Result<()> {
        // First, on every rank: the topology is collective at its first use.
        let topo = self.topology()?;
        let n = self.world_size();
        let sorted = team.ranks.windows(2).all(|w| w[0] < w[1]);
        if !sorted || team.ranks.last().is_some_and(|&p| p >= n) || team.world_rank(team.me) != Some(self.rank()) {
            return Err(Error::InvalidArgument(format!(
                "window: team {:?} (member {}) is not a team of this rank {} of {n}",
                team.ranks,
                team.me,
                self.rank()
            )));
        }
        // Window memory is mapped with CUDA IPC: every member on this machine.
        if let Some(&p) = team.ranks.iter().find(|&&p| !topo.same_machine(p)) {
            return Err(Error::InvalidArgument(format!(
                "window: team {:?} has rank {p}, which runs on another machine (window memory is mapped within one machine)",
                team.ranks
            )));
        }
        Ok(())
    }

    /// Words of the signal area for `team` and `slots`.
    fn signal_words(&self, team: &Team, slots: u32) -> Result<(u32, usize)> {
        let n = team.size();
        let size = u32::try_from(n).map_err(|_| Error::InvalidArgument(format!("a team of {n} ranks")))?;
        let words = WindowHandle::signal_words(size, slots)
            .and_then(|w| usize::try_from(w).ok())
            .ok_or_else(|| Error::InvalidArgument(format!("a signal area for {n} ranks and {slots} slots")))?;
        Ok((size, words))
    }

    /// This rank's zeroed, exportable signal area.
    fn signal_area(&self, team: &Team, slots: u32) -> Result<DeviceBuffer> {
        let (_, words) = self.signal_words(team, slots)?;
        DeviceBuffer::exportable_filled(self.gpu(), words * 8, 0)
    }

    /// The collective steps after agreement (`all`: every rank's claim): the exchanges of the
    /// window and the signal area (of addresses when every rank is a thread of this process, with
    /// CUDA IPC otherwise), the table, the handle.
    fn build_window(
        &self,
        team: &Team,
        buf: &DeviceBuffer,
        signals: DeviceBuffer,
        slots: u32,
        all: &[Claim],
        own: Arc<LocalMemory>,
    ) -> Result<Window> {
        let (n, me) = (team.size(), team.rank());
        let (size, words) = self.signal_words(team, slots)?;
        let want = (buf.len() as u64, words as u64 * 8);
        // Every rank takes the same path: the claims are the same everywhere.
        let (table, odd, peers) = if one_process(all) {
            match self.local_peers(team, all, &own) {
                Ok(found) => {
                    let odd = found.iter().zip(team.ranks()).find(|(m, _)| (m.bytes, m.signal_bytes) != want).map(
                        |(m, p)| {
                            format!(
                                "rank {p} registered {} bytes of window and {} of signals, expected {} and {}",
                                m.bytes, m.signal_bytes, want.0, want.1
                            )
                        },
                    );
                    let table = found.iter().map(|m| m.addr).chain(found.iter().map(|m| m.signals)).collect();
                    (table, odd, Peers::Local(found))
                }
                Err(e) => (Vec::new(), Some(e.to_string()), Peers::Local(Vec::new())),
            }
        } else {
            // The world's window maps every rank (and refuses ranks off this machine); a smaller
            // team's maps its members only.
            let (peers, peer_signals) = if n == self.world_size() {
                (self.exchange(buf)?, self.exchange(&signals)?)
            } else {
                let member = |p: usize| team.team_rank(p).is_some();
                (self.exchange_where(buf, member)?, self.exchange_where(&signals, member)?)
            };
            // Agreed above; the exchange reports what each exporter actually has.
            let odd = team.ranks().iter().copied().find(|&p| (peers.len(p), peer_signals.len(p)) != want).map(|p| {
                format!(
                    "rank {p} exported {} bytes of window and {} of signals, expected {} and {}",
                    peers.len(p),
                    peer_signals.len(p),
                    want.0,
                    want.1
                )
            });
            let table: Vec<u64> = team
                .ranks()
                .iter()
                .map(|&p| peers.addr(p))
                .chain(team.ranks().iter().map(|&p| peer_signals.addr(p)))
                .collect();
            (table, odd, Peers::Ipc(peers, peer_signals))
        };
        // The last allocation, then every rank waits for every other's: a rank that launches a
        // kernel on the window as soon as this returns must not find a peer still allocating
        // (an allocation may wait for the kernels already running on the GPU, and so for this
        // rank's, which waits for that peer: ranks that are threads of one process would
        // deadlock). The all-gather is that barrier, and tells every rank whether all succeeded
        // (a rank that found an odd export, or could not allocate its table, fails them all).
        // It also keeps every rank's memory registered until every peer holds it.
        let table = DeviceBuffer::from_slice(self.gpu(), &table);
        let failed: Vec<usize> = self
            .bootstrap()
            .all_gather_pod(&u32::from(table.is_err() || odd.is_some()))?
            .iter()
            .enumerate()
            .filter(|(_, f)| **f != 0)
            .map(|(r, _)| r)
            .collect();
        if let Some(why) = odd {
            return Err(Error::InvalidArgument(format!("window registration: {why}")));
        }
        let table = table?;
        if !failed.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "window registration: rank(s) {failed:?} could not map the window or allocate its address table"
            )));
        }
        let handle = WindowHandle {
            rank: me as u32,
            size,
            bytes: buf.len() as u64,
            local: buf.ptr(),
            bases: table.ptr(),
            signals: signals.ptr(),
            peer_signals: table.ptr::<u64>().add(n),
            slots,
            reserved: 0,
            // No multicast object for windows: a window's switch group emulates.
            multicast: 0,
        };
        Ok(Window {
            handle,
            team: team.clone(),
            comm: self.clone(),
            _peers: peers,
            _table: table,
            signals,
            _own: own,
            owned: None,
            slice: None,
        })
    }

    /// Every team rank's memory, registered in this process (every rank is a thread of it), in
    /// team order, with peer access enabled to each rank's GPU.
    fn local_peers(&self, team: &Team, all: &[Claim], own: &Arc<LocalMemory>) -> Result<Vec<Arc<LocalMemory>>> {
        team.ranks()
            .iter()
            .map(|&p| {
                if p == self.rank() {
                    return Ok(own.clone());
                }
                let m = all.get(p).and_then(|c| LocalMemory::find(c.entry)).ok_or_else(|| {
                    Error::InvalidArgument(format!("rank {p}'s window memory is not registered in this process"))
                })?;
                self.gpu().enable_peer_access(&m.gpu)?;
                Ok(m)
            })
            .collect()
    }
}

/// Every rank's claim of `bytes` with the default slots.
#[cfg(test)]
fn claims_from(bytes: &[usize]) -> Vec<Claim> {
    bytes.iter().map(|&b| Claim::of(b, 0, WindowHandle::DEFAULT_SLOTS)).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bootstrap::LocalBootstrap;

    /// Runs `f(rank, bootstrap)` on one thread per rank of an in-process group of `n`.
    fn on_ranks<T: Send + 'static>(
        n: usize,
        f: impl Fn(usize, &LocalBootstrap) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let f = Arc::new(f);
        let threads: Vec<_> = LocalBootstrap::group(n)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(r, b)| {
                let f = f.clone();
                std::thread::spawn(move || f(r, &b))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn a_rank_with_another_size_makes_every_rank_fail_naming_it() {
        let out = on_ranks(4, |r, b| agree(b, Claim::of(if r == 2 { 8192 } else { 4096 }, 0, 8), None));
        for (r, got) in out.into_iter().enumerate() {
            let e = got.expect_err("every rank refuses").to_string();
            assert!(e.contains("rank 2 has 8192 bytes"), "rank {r}: {e}");
            assert!(e.contains("rank 0 has 4096 bytes"), "rank {r}: {e}");
            assert!(!e.contains("rank 1 has"), "rank {r} names only the odd rank: {e}");
        }
        // The same size everywhere passes on every rank.
        assert!(on_ranks(3, |_, b| agree(b, Claim::of(1 << 20, 0, 8), None)).into_iter().all(|v| v.is_ok()));
    }

    #[test]
    fn a_rank_with_a_bad_input_makes_every_rank_fail_naming_it() {
        for (bad, says) in
            [(0usize, "rank 1 has a window of 0 bytes"), (4100, "rank 1 has a window of 4100 bytes, not a multiple")]
        {
            let out = on_ranks(3, move |r, b| agree(b, Claim::of(if r == 1 { bad } else { 4096 }, 0, 8), None));
            for (r, got) in out.into_iter().enumerate() {
                let e = got.expect_err("every rank refuses").to_string();
                assert!(e.contains(says), "rank {r}: {e}");
            }
        }
        // The failing rank returns its own, more precise error; the others name it.
        let out = on_ranks(2, |r, b| {
            let c = Claim::of(4096, 0, 8);
            if r == 0 {
                agree(b, c.with(Problem::Allocation), Some(Error::Unsupported("out of memory".into())))
            } else {
                agree(b, c, None)
            }
        });
        assert!(out[0].as_ref().unwrap_err().to_string().contains("out of memory"));
        assert!(out[1].as_ref().unwrap_err().to_string().contains("rank 0 could not allocate"));
    }

    #[test]
    fn teams_map_team_ranks_to_world_ranks() {
        // World ranks 1, 3 and 4 on one machine, seen by world rank 3.
        let t = Team::from_members(6, 3, |p| [1, 3, 4].contains(&p)).unwrap();
        assert_eq!((t.rank(), t.size(), t.ranks()), (1, 3, &[1usize, 3, 4][..]));
        assert_eq!((t.world_rank(0), t.world_rank(2), t.world_rank(3)), (Some(1), Some(4), None));
        assert_eq!((t.team_rank(4), t.team_rank(2), t.team_rank(9)), (Some(2), None, None));
        assert!(Team::from_members(6, 2, |p| p != 2).is_none(), "a rank outside its own team");
        let world = Team::from_members(4, 0, |_| true).unwrap();
        assert_eq!((world.rank(), world.ranks()), (0, &[0usize, 1, 2, 3][..]));
    }

    #[test]
    fn local_inputs_are_checked() {
        assert_eq!(Claim::of(4096, 1 << 21, 8).problem, 0);
        assert_eq!(Claim::of(0, 0, 8).problem, Problem::ZeroBytes as u32);
        assert_eq!(Claim::of(17, 0, 8).problem, Problem::SizeNotAligned as u32);
        assert_eq!(Claim::of(4096, 0x1010, 8).problem, Problem::BaseNotAligned as u32);
        assert_eq!(Claim::of(4096, 0, MAX_SIGNAL_SLOTS + 1).problem, Problem::TooManySlots as u32);
        assert!(check_claims(&claims_from(&[4096, 4096])).is_ok());
        assert!(check_claims(&[]).is_ok());
        let slots = [Claim::of(4096, 0, 8), Claim::of(4096, 0, 4)];
        assert!(check_claims(&slots).unwrap_err().to_string().contains("rank 1 has 4096 bytes and 4 slots"));
        let raw = [Claim::of(4096, 0, 8), Claim::of(4096, 0, 8).with(Problem::NotDeviceMemory)];
        let e = check_claims(&raw).unwrap_err().to_string();
        assert!(e.contains("rank 1 has no device memory of that size"), "{e}");
        let team = [Claim::of(4096, 0, 8), Claim::of(4096, 0, 8), Claim::of(4096, 0, 8).with(Problem::BadTeam)];
        let e = check_claims(&team).unwrap_err().to_string();
        assert!(e.contains("rank 2 has a team that is not its own"), "{e}");
        let raw = [Claim::of(4096, 0, 8).with(Problem::NotExportable), Claim::of(4096, 0, 8)];
        let e = check_claims(&raw).unwrap_err().to_string();
        assert!(e.contains("rank 0 has memory CUDA IPC cannot map exactly"), "{e}");
        let unknown = [Claim { problem: 99, ..Claim::of(16, 0, 0) }];
        assert!(check_claims(&unknown).unwrap_err().to_string().contains("unknown problem 99"));
    }

    /// A claim of 4096 bytes of memory of `kind` on GPU `ordinal`, from process `process`.
    fn memory(kind: u32, ordinal: u32, process: u64) -> Claim {
        Claim { kind, ordinal, process, ..Claim::of(4096, 0, 8) }
    }

    const EXPORTABLE: u32 = MEM_EXPORTABLE | MEM_PEER_REACHABLE;
    /// `cuMemAlloc` memory CUDA IPC cannot map exactly (the middle of an allocation, a small one).
    const CUMEMALLOC: u32 = MEM_PEER_REACHABLE;
    /// Stream-ordered pool memory (a cudarc `CudaSlice`).
    const POOL: u32 = 0;

    #[test]
    fn any_memory_is_accepted_when_every_rank_is_a_thread_of_one_process_on_one_gpu() {
        for kind in [EXPORTABLE, CUMEMALLOC, POOL] {
            let all = [memory(EXPORTABLE, 0, 7), memory(kind, 0, 7), memory(kind, 0, 7)];
            assert!(one_process(&all));
            check_claims(&all).unwrap_or_else(|e| panic!("kind {kind}: {e}"));
        }
        // Claims made here carry this process's token.
        assert!(one_process(&[Claim::of(16, 0, 0), Claim::of(32, 0, 0)]));
        assert!(one_process(&[]));
    }

    #[test]
    fn on_several_gpus_of_one_process_only_cumemalloc_memory_is_accepted() {
        let all = [memory(EXPORTABLE, 0, 7), memory(CUMEMALLOC, 1, 7)];
        assert!(check_claims(&all).is_ok());
        // Pool memory on GPU 0, a peer on GPU 1: refused naming the rank with pool memory.
        let all = [memory(EXPORTABLE, 1, 7), memory(EXPORTABLE, 1, 7), memory(POOL, 0, 7)];
        let e = check_claims(&all).unwrap_err().to_string();
        assert!(e.contains("rank 2 has memory that ranks on other GPUs of this process cannot reach"), "{e}");
        // Whichever rank is on the other GPU.
        let all = [memory(POOL, 0, 7), memory(EXPORTABLE, 1, 7)];
        let e = check_claims(&all).unwrap_err().to_string();
        assert!(e.contains("rank 0 has memory that ranks on other GPUs"), "{e}");
    }

    #[test]
    fn between_processes_only_memory_ipc_maps_exactly_is_accepted() {
        // Two processes (tokens 7 and 8), one GPU each or a shared one: the ordinals do not matter.
        for ordinal in [0, 1] {
            let all = [memory(EXPORTABLE, 0, 7), memory(EXPORTABLE, ordinal, 8)];
            assert!(!one_process(&all));
            assert!(check_claims(&all).is_ok());
            for kind in [CUMEMALLOC, POOL] {
                let all = [memory(EXPORTABLE, 0, 7), memory(EXPORTABLE, 0, 7), memory(kind, ordinal, 8)];
                let e = check_claims(&all).unwrap_err().to_string();
                assert!(e.contains("rank 2 has memory CUDA IPC cannot map exactly"), "kind {kind}: {e}");
                assert!(e.contains("which ranks in other processes need"), "kind {kind}: {e}");
            }
        }
        // Threads of one process beside another process are not one process.
        let all = [memory(CUMEMALLOC, 0, 7), memory(EXPORTABLE, 0, 7), memory(EXPORTABLE, 0, 8)];
        assert!(check_claims(&all).unwrap_err().to_string().contains("rank 0 has memory CUDA IPC cannot map"));
        // A rank's own problem is named before another's memory.
        let all = [memory(POOL, 0, 7), memory(EXPORTABLE, 0, 8).with(Problem::OtherGpu)];
        assert!(check_claims(&all).unwrap_err().to_string().contains("rank 1 has a buffer on another GPU"));
    }

    #[test]
    fn the_agreement_returns_every_ranks_claim() {
        let out = on_ranks(3, |r, b| agree(b, Claim { entry: 10 + r as u64, ..Claim::of(4096, 0, 8) }, None));
        for got in out {
            let entries: Vec<u64> = got.unwrap().iter().map(|c| c.entry).collect();
            assert_eq!(entries, [10, 11, 12]);
        }
    }
}
