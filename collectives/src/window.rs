//! The one-shot allreduce written on a symmetric memory window (the kernel is
//! [`mscclpp_collectives_device::window`]), beside the one-shot LL allreduce of
//! [`Collectives`](crate::Collectives): the same sums in the same order, so the same bits.

use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_collectives_device::window::window_bytes;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_host::comm::Communicator;
use mscclpp_host::window::Window;
use mscclpp_host::{Args, DeviceBuffer, Error, LaunchConfig, Result};

/// One rank's window allreduce of f32: a window of two regions of `max_bytes` per rank and one
/// signal slot per block, and the kernel. Built collectively ([`WindowAllreduce::new`]); every
/// launch uses the grid chosen at construction.
pub struct WindowAllreduce {
    window: Window,
    function: CudaFunction,
    comm: Communicator,
    max_bytes: u64,
    blocks: u32,
    threads: u32,
    budget: SpinBudget,
}

impl WindowAllreduce {
    /// Threads per block.
    pub const THREADS: u32 = 512;

    /// The blocks for messages of `bytes`: one per 32 KiB, at least 1, at most `sm_share` (every
    /// rank's blocks resident at once) and the largest slot count.
    pub fn blocks_for(bytes: u64, sm_share: u32) -> u32 {
        let cap = sm_share.clamp(1, mscclpp_host::window::MAX_SIGNAL_SLOTS);
        bytes.div_ceil(32 << 10).clamp(1, cap as u64) as u32
    }

    /// The window allreduce for messages of up to `max_bytes` (a positive multiple of 16) on
    /// `blocks` blocks ([`Self::blocks_for`] when `None`, for `max_bytes`): collective, every
    /// rank with the same arguments.
    pub fn new(comm: &Communicator, max_bytes: u64, blocks: Option<u32>) -> Result<Self> {
        if max_bytes == 0 || !max_bytes.is_multiple_of(16) {
            return Err(Error::InvalidArgument(format!("window allreduce: {max_bytes} bytes, not a multiple of 16")));
        }
        let blocks = match blocks {
            Some(b) if b == 0 || b > mscclpp_host::window::MAX_SIGNAL_SLOTS => {
                return Err(Error::InvalidArgument(format!(
                    "window allreduce: {b} blocks (1 to {})",
                    mscclpp_host::window::MAX_SIGNAL_SLOTS
                )));
            }
            Some(b) => {
                // Every rank's blocks resident at once (ranks sharing a GPU share its SMs).
                let share = comm.sm_share()?;
                if b > share {
                    return Err(Error::InvalidArgument(format!(
                        "window allreduce: {b} blocks, more than this rank's share of the GPU ({share} SMs)"
                    )));
                }
                b
            }
            None => Self::blocks_for(max_bytes, comm.sm_share()?),
        };
        let n = comm.world_size() as u32;
        let bytes = usize::try_from(window_bytes(n, max_bytes))
            .map_err(|_| Error::InvalidArgument(format!("window allreduce: {max_bytes} bytes for {n} ranks")))?;
        // The kernel first: looking it up may load it (lazily loaded modules), which waits for
        // the kernels running on the GPU; after the window's closing all-gather a peer may
        // already be running this kernel, waiting for this rank. (Every rank loads the same
        // PTX: a lookup fails on all of them or on none.)
        let function = comm.gpu().function(crate::PTX, "allreduce_window_f32")?;
        let window = comm.window_with_slots(bytes, blocks)?;
        Ok(Self {
            window,
            function,
            comm: comm.clone(),
            max_bytes,
            blocks,
            threads: Self::THREADS,
            budget: SpinBudget::from_millis(20_000),
        })
    }

    /// Blocks of every launch.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Allreduce (sum) of `count` f32: `recv` = the sum over ranks of `send`, in rank order.
    /// `count * 4` a multiple of 16, at most the `max_bytes` of [`Self::new`]; `send` and `recv`
    /// different buffers of this rank's GPU. Enqueued on `stream` (this rank's GPU); collective.
    pub fn allreduce_f32(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("window allreduce: {m}")));
        let Some(bytes) = (count as u64).checked_mul(4) else {
            return bad(format!("{count} f32 overflow"));
        };
        if !bytes.is_multiple_of(16) || bytes > self.max_bytes {
            return bad(format!("{count} f32 (a multiple of 4, at most {} bytes)", self.max_bytes));
        }
        if (send.len() as u64) < bytes || (recv.len() as u64) < bytes || send.addr() == recv.addr() {
            return bad(format!("buffers of {} and {} bytes for {bytes} (and not the same)", send.len(), recv.len()));
        }
        if !send.addr().is_multiple_of(16) || !recv.addr().is_multiple_of(16) {
            return bad("buffers not 16-byte aligned".into());
        }
        let gpu = self.comm.gpu();
        let mut args = Args::new()
            .arg(self.window.handle())
            .arg(GlobalPtr::<u8>::from_addr(send.addr()))
            .arg(GlobalPtr::<u8>::from_addr(recv.addr()))
            .arg(bytes)
            .arg(self.max_bytes)
            .arg(self.budget);
        // SAFETY: the kernel takes (Window, ptr, ptr, u64, u64, SpinBudget) as passed; both
        // buffers hold `bytes` (checked) and the window lives as long as `self`; every rank
        // launches the same grid (fixed at construction, at most the slots and the SM share).
        unsafe {
            mscclpp_host::launch::launch_on(
                gpu,
                stream,
                &self.function,
                LaunchConfig::new(self.blocks, self.threads),
                &mut args,
            )
        }
    }

    /// Frees the window collectively ([`Window::free`]).
    pub fn free(self) -> Result<()> {
        self.window.free()
    }
}
