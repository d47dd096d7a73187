//! The one-shot allreduce written on a symmetric memory window (the kernels are
//! [`mscclpp_collectives_device::window`]), beside the one-shot LL allreduce of
//! [`Collectives`](crate::Collectives): the same sums in the same order, so the same bits. Small
//! messages go as LL packets (the one-shot LL's grid for the size), larger ones as a put and a
//! signal per block (faster there: half the bytes, and the signal's cost spread over more data).

use cudarc::driver::{CudaFunction, CudaStream};
use mscclpp_collectives_device::window::{LL_COUNTERS, WindowLayout};
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_host::comm::Communicator;
use mscclpp_host::window::Window;
use mscclpp_host::{Args, DeviceBuffer, Error, LaunchConfig, Result};

/// One rank's window allreduce of f32: a window laid out as [`WindowLayout`] (LL packet halves
/// for messages up to [`WindowAllreduce::ll_bytes`], put halves for larger ones) with one signal
/// slot per put-form block, and the two kernels. Built collectively ([`WindowAllreduce::new`]);
/// every put-form launch uses the grid chosen at construction, the LL form a grid by size.
pub struct WindowAllreduce {
    window: Window,
    put_fn: CudaFunction,
    ll_fn: CudaFunction,
    comm: Communicator,
    layout: WindowLayout,
    blocks: u32,
    forced_blocks: bool,
    /// The most blocks of an LL launch (this rank's SM share or the blocks given, at most
    /// [`LL_COUNTERS`]): the kernel keeps that many launch counters in step.
    ll_cap: u32,
    /// The most threads per block the LL kernel allows.
    ll_thread_limit: u32,
    overlap: bool,
    budget: SpinBudget,
}

/// What one window allreduce launches ([`WindowAllreduce::plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// The LL form (packets), else the put form (put and signal).
    pub ll: bool,
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
}

impl WindowAllreduce {
    /// Threads per block of the put form.
    pub const THREADS: u32 = 512;

    /// The blocks of the put form for messages of `bytes`: one per 32 KiB, at least 1, at most
    /// `sm_share` (every rank's blocks resident at once) and the largest slot count.
    pub fn blocks_for(bytes: u64, sm_share: u32) -> u32 {
        let cap = sm_share.clamp(1, mscclpp_host::window::MAX_SIGNAL_SLOTS);
        bytes.div_ceil(32 << 10).clamp(1, cap as u64) as u32
    }

    /// The largest message (bytes per rank) that goes as LL packets by default among `n_ranks`:
    /// where the packets' doubled bytes start to cost more than the put form's signals. From the
    /// graph times of both forms on one H200 (ranks sharing it): at 2 ranks LL ahead at 2 MiB
    /// (7.10 against 7.92 us), behind at 3 MiB (11.63 against 10.79); at 4 ranks ahead at 512 KiB,
    /// behind at 1 MiB; at 8 ranks ahead at 256 KiB, behind at 512 KiB.
    pub const fn default_ll_limit(n_ranks: usize) -> u64 {
        match n_ranks {
            0..=2 => 2 << 20,
            3..=4 => 512 << 10,
            _ => 256 << 10,
        }
    }

    /// The LL form's grid for `bytes`, as the one-shot LL allreduce of
    /// [`Collectives`](crate::Collectives) picks it: 256 threads up to 64 KiB, 1024 above (at
    /// most `thread_limit`, in whole warps), one packet (8 bytes) per thread, at least 1 and at
    /// most `cap` blocks.
    pub fn ll_grid(bytes: u64, cap: u32, thread_limit: u32) -> (u32, u32) {
        let threads = if bytes <= 64 << 10 { 256 } else { 1024 }.min(thread_limit).max(32) / 32 * 32;
        let blocks = bytes.div_ceil(8).div_ceil(threads as u64).clamp(1, cap.max(1) as u64) as u32;
        (blocks, threads)
    }

    /// The window allreduce for messages of up to `max_bytes` (a positive multiple of 16) on
    /// `blocks` blocks ([`Self::blocks_for`] when `None`, for `max_bytes`; when given, the LL
    /// form uses it too), messages up to [`Self::default_ll_limit`] as LL packets: collective,
    /// every rank with the same arguments.
    pub fn new(comm: &Communicator, max_bytes: u64, blocks: Option<u32>) -> Result<Self> {
        Self::with_ll_limit(comm, max_bytes, blocks, Self::default_ll_limit(comm.world_size()))
    }

    /// [`Self::new`] with messages up to `ll_limit` bytes (rounded down to a multiple of 16, at
    /// most `max_bytes`) as LL packets: 0 sends everything with the put form, `max_bytes` or
    /// more everything as packets (the window then has no put halves).
    pub fn with_ll_limit(comm: &Communicator, max_bytes: u64, blocks: Option<u32>, ll_limit: u64) -> Result<Self> {
        if max_bytes == 0 || !max_bytes.is_multiple_of(16) {
            return Err(Error::InvalidArgument(format!("window allreduce: {max_bytes} bytes, not a multiple of 16")));
        }
        // Every rank's blocks resident at once (ranks sharing a GPU share its SMs).
        let share = comm.sm_share()?;
        let (blocks, forced_blocks) = match blocks {
            Some(b) if b == 0 || b > mscclpp_host::window::MAX_SIGNAL_SLOTS => {
                return Err(Error::InvalidArgument(format!(
                    "window allreduce: {b} blocks (1 to {})",
                    mscclpp_host::window::MAX_SIGNAL_SLOTS
                )));
            }
            Some(b) if b > share => {
                return Err(Error::InvalidArgument(format!(
                    "window allreduce: {b} blocks, more than this rank's share of the GPU ({share} SMs)"
                )));
            }
            Some(b) => (b, true),
            None => (Self::blocks_for(max_bytes, share), false),
        };
        let n = comm.world_size() as u32;
        let layout = WindowLayout { n_ranks: n, max_bytes, ll_bytes: (ll_limit / 16 * 16).min(max_bytes) };
        let bytes = layout.bytes().and_then(|b| usize::try_from(b).ok()).ok_or_else(|| {
            Error::InvalidArgument(format!("window allreduce: {max_bytes} bytes for {n} ranks overflow"))
        })?;
        // The kernels first: looking one up may load it (lazily loaded modules), which waits for
        // the kernels running on the GPU; after the window's closing all-gather a peer may
        // already be running a kernel of this allreduce, waiting for this rank. (Every rank loads
        // the same PTX: a lookup fails on all of them or on none.)
        let put_fn = comm.gpu().function(crate::PTX, "allreduce_window_f32")?;
        let ll_fn = comm.gpu().function(crate::PTX, "allreduce_window_ll_f32")?;
        let ll_thread_limit = mscclpp_host::launch::max_threads_per_block(&ll_fn)?;
        let overlap = comm.may_overlap_launches()?;
        let window = comm.window_with_slots(bytes, blocks)?;
        Ok(Self {
            window,
            put_fn,
            ll_fn,
            comm: comm.clone(),
            layout,
            blocks,
            forced_blocks,
            ll_cap: if forced_blocks { blocks } else { share }.clamp(1, LL_COUNTERS),
            ll_thread_limit,
            overlap,
            budget: SpinBudget::from_millis(20_000),
        })
    }

    /// Blocks of every put-form launch.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// The largest message (bytes per rank) that goes as LL packets.
    pub fn ll_bytes(&self) -> u64 {
        self.layout.ll_bytes
    }

    /// The form and grid of an allreduce of `bytes`: LL up to [`Self::ll_bytes`] (the one-shot
    /// LL's grid, [`Self::ll_grid`], or the blocks given at construction), the put form above.
    pub fn plan(&self, bytes: u64) -> WindowPlan {
        if bytes <= self.layout.ll_bytes {
            let (blocks, threads) = Self::ll_grid(bytes, self.ll_cap, self.ll_thread_limit);
            let blocks = if self.forced_blocks { self.ll_cap } else { blocks };
            WindowPlan { ll: true, blocks, threads }
        } else {
            WindowPlan { ll: false, blocks: self.blocks, threads: Self::THREADS }
        }
    }

    /// Allreduce (sum) of `count` f32: `recv` = the sum over ranks of `send`, in rank order.
    /// `count * 4` a multiple of 16, at most the `max_bytes` of [`Self::new`]; `send` and `recv`
    /// different buffers of this rank's GPU. Enqueued on `stream` (this rank's GPU); collective
    /// (every rank the same counts in the same order). A count of 0 launches nothing.
    pub fn allreduce_f32(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("window allreduce: {m}")));
        let max_bytes = self.layout.max_bytes;
        let Some(bytes) = (count as u64).checked_mul(4) else {
            return bad(format!("{count} f32 overflow"));
        };
        if !bytes.is_multiple_of(16) || bytes > max_bytes {
            return bad(format!("{count} f32 (a multiple of 4, at most {max_bytes} bytes)"));
        }
        if (send.len() as u64) < bytes || (recv.len() as u64) < bytes || send.addr() == recv.addr() {
            return bad(format!("buffers of {} and {} bytes for {bytes} (and not the same)", send.len(), recv.len()));
        }
        if !send.addr().is_multiple_of(16) || !recv.addr().is_multiple_of(16) {
            return bad("buffers not 16-byte aligned".into());
        }
        // Nothing to send: a launch would end without hearing from the peers, and the LL form's
        // halves rely on every launch doing so (`mscclpp_collectives_device::window`).
        if bytes == 0 {
            return Ok(());
        }
        let gpu = self.comm.gpu();
        let plan = self.plan(bytes);
        let mut args = Args::new()
            .arg(self.window.handle())
            .arg(GlobalPtr::<u8>::from_addr(send.addr()))
            .arg(GlobalPtr::<u8>::from_addr(recv.addr()))
            .arg(bytes)
            .arg(max_bytes)
            .arg(self.layout.ll_bytes);
        if plan.ll {
            args = args.arg(self.ll_cap);
        }
        args = args.arg(self.budget);
        let f = if plan.ll { &self.ll_fn } else { &self.put_fn };
        let cfg = LaunchConfig::new(plan.blocks, plan.threads);
        // SAFETY: the put kernel takes (Window, ptr, ptr, u64, u64, u64, SpinBudget), the LL
        // kernel a u32 (its `max_blocks`) before the budget, as passed; both buffers hold `bytes`
        // (checked) and the window, laid out as `self.layout`, lives as long as `self`; every rank
        // launches the same form for the same size, the put form always on the grid fixed at
        // construction (at most the slots and the SM share), the LL form on at most `ll_cap`
        // blocks (the SM share or the blocks given, at most `LL_COUNTERS`), its `max_blocks`
        // every launch. Both kernels wait for the previous grid (`griddepcontrol.wait`) before
        // their first memory access, so they may overlap it (not where ranks share the GPU:
        // `may_overlap_launches`).
        unsafe {
            if self.overlap {
                mscclpp_host::launch::launch_overlapped_on(gpu, stream, f, cfg, &mut args)
            } else {
                mscclpp_host::launch::launch_on(gpu, stream, f, cfg, &mut args)
            }
        }
    }

    /// Frees the window collectively ([`Window::free`]).
    pub fn free(self) -> Result<()> {
        self.window.free()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LL grid is the one-shot LL allreduce's for the same size (`Collectives::plan` with
    /// its default threads), within the SM share and the kernel's thread limit.
    #[test]
    fn ll_grid_follows_the_one_shot_ll() {
        assert_eq!(WindowAllreduce::ll_grid(16, 132, 1024), (1, 256));
        assert_eq!(WindowAllreduce::ll_grid(1 << 10, 132, 1024), (1, 256));
        assert_eq!(WindowAllreduce::ll_grid(64 << 10, 132, 1024), (32, 256));
        assert_eq!(WindowAllreduce::ll_grid((64 << 10) + 16, 132, 1024), (9, 1024));
        assert_eq!(WindowAllreduce::ll_grid(1 << 20, 132, 1024), (128, 1024));
        assert_eq!(WindowAllreduce::ll_grid(4 << 20, 66, 1024), (66, 1024), "at most the SM share");
        assert_eq!(WindowAllreduce::ll_grid(1 << 20, 132, 512), (132, 512), "at most the kernel's threads");
        assert_eq!(WindowAllreduce::ll_grid(1 << 20, 132, 500), (132, 480), "whole warps");
        assert_eq!(WindowAllreduce::ll_grid(1 << 10, 0, 0), (1, 32), "at least a block of a warp");
    }

    #[test]
    fn default_ll_limits_shrink_with_the_ranks() {
        let limits: Vec<u64> = [1, 2, 3, 4, 8, 16].map(WindowAllreduce::default_ll_limit).to_vec();
        assert!(limits.windows(2).all(|w| w[0] >= w[1]));
        assert!(limits.iter().all(|l| l.is_multiple_of(16)));
        assert_eq!(limits[1..5], [2 << 20, 512 << 10, 512 << 10, 256 << 10]);
    }
}
