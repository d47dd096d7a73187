//! GPU communication primitives for Rust kernels compiled to `nvptx64-nvidia-cuda`, in the spirit
//! of MSCCL++'s device API: Hopper bulk copies, scoped atomics, semaphores between GPUs, the
//! trigger FIFO to a host proxy, memory / port / switch channels, LL packets and multimem
//! reductions, every wait bounded.
//!
//! # Two targets
//!
//! The crate is `#![no_std]` and builds for two targets:
//!
//! * **nvptx64** (through `nvptx-builder`): everything, including the instruction wrappers in
//!   [`ptx`] and the device-side methods of every handle.
//! * **the host**: the `#[repr(C)]` handle types, encodings and the target-independent protocol
//!   logic, so that host code (`mscclpp-host`) builds handles with exactly the layout the GPU reads.
//!
//! This documentation shows both: items that exist only in device code (the [`ptx`] module,
//! methods such as [`SharedPtr::<BulkBarrier>::init`](ptr::SharedPtr) or
//! [`MemoryChannel::put`](channel::memory::MemoryChannel), functions such as
//! [`bulk::bulk_load`]) are compiled for nvptx64 only and say so where it matters.
//!
//! # Writing a kernel
//!
//! Kernels live in a crate of their own, `crate-type = ["cdylib"]`, with a nightly toolchain that
//! has `rust-src`; the host crate's build script turns it into PTX with
//! `nvptx_builder::Builder::new("kernels").build()`. The repository's README shows a complete
//! project (kernel crate, host crate, build script). A kernel takes handles by value (device code
//! only, so this is not a doc test: the repository's `ptx-tests/src/doc_examples.rs` compiles it,
//! held to this text by `tests/doc_examples.rs`):
//!
//! ```ignore
//! #![no_std]
//! #![feature(abi_ptx)]
//! use mscclpp_device::channel::memory::MemoryChannel;
//! use mscclpp_device::copy::Threads;
//! use mscclpp_device::ptr::GlobalPtr;
//!
//! /// Copies `bytes` of my buffer to the peer of `chan`, then tells it the data is there.
//! #[unsafe(no_mangle)]
//! pub unsafe extern "ptx-kernel" fn send(chan: GlobalPtr<MemoryChannel>, bytes: u64) {
//!     let t = Threads::grid();
//!     // SAFETY: the host passes a channel it built for this GPU, whose buffers hold `bytes`.
//!     unsafe {
//!         let chan = chan.as_ptr().read();
//!         chan.put(0, 0, bytes, t); // every thread of the grid copies its share over NVLink
//!         // ... a grid barrier (sync::DeviceSyncer) so that every share is written, then:
//!         if t.index == 0 {
//!             chan.signal(); // release: the peer's wait() returns after this
//!         }
//!     }
//! }
//! ```
//!
//! # Symmetric windows
//!
//! The model of NCCL's device API and NVSHMEM: every rank registers the same number of bytes
//! together, and a kernel reaches any rank's copy by `(rank, offset)`.
//!
//! **Allocate** (host, every rank at the same point): `Communicator::window(bytes)` (or
//! `register_window(&buf)`, `register_window_slice(slice)` over memory the rank has: any when
//! the ranks are threads of one process, exportable memory between processes;
//! `window_with_slots` for more signal slots) allocates, exchanges and maps every rank's memory
//! and a signal area; a rank with another size makes every rank fail, naming it. `team_window(&team, bytes)` spans a
//! team: `world_team()` or `node_team()`, the ranks of this machine; the handle's `rank` and
//! `size` are then the team's, and `Team::world_rank` maps back.
//!
//! **Launch**: the window's `handle()` is a [`window::Window`], passed to kernels by value.
//!
//! **Use the peers**:
//!
//! * [`local::<T>(offset)`](window::Window::local) is this rank's memory,
//!   [`peer::<T>(rank, offset)`](window::Window) another rank's, mapped here (plain loads and
//!   stores over NVLink); a rank outside the team or an offset past the window fails with
//!   [`device_assert!`];
//! * [`put(peer, dst_off, src, bytes, scope)`](window::Window), `get(peer, src_off, dst, bytes,
//!   scope)` and `put_signal(.., slot, scope)` copy with every thread of a [`window::Scope`] (a
//!   thread, a warp or a block; the copy paths of [`copy`]), bounds checked with `device_assert!`;
//!   `put_signal` is `put`, the group's barrier, then one [`signal`](window::Window);
//! * `signal(peer, slot)` / `signal_add` add to the peer's signal word for this rank (release,
//!   system scope), `wait_signal(slot, from, value, budget)` waits for this rank's word from
//!   `from` to reach `value` (acquire), `wait_signal_in(scope, ..)` has the group's first thread
//!   wait and the group follow, `reset` zeroes a word.
//!
//! **Barrier**: [`barrier(budget)`](window::Window) is a barrier of the whole team, run by one
//! thread per rank; `barrier_in(scope, budget)` wraps it in the group's barriers. After it,
//! every rank's earlier writes are visible.
//!
//! **A switch group**: [`switch_group(offset, bytes, slot)`](window::Window::switch_group) views
//! `bytes` at `offset` of every rank's window as a switch channel's buffer. The
//! [`window::WindowSwitch`] it returns implements
//! [`SwitchGroup`](channel::switch::SwitchGroup): `reduce` sums element `i` over every rank's copy
//! in rank order (the same bits on every rank), `broadcast` stores into every copy, and `signal` /
//! `wait` are a barrier of all ranks on signal slot `slot` (one slot per block), so an algorithm
//! written for switch channels runs on a window unchanged. With a multicast address in the handle
//! ([`multimem`](window::Window::multimem)) it would use the multimem instructions; the host
//! provides none today, so it emulates.
//!
//! ```ignore
//! use mscclpp_device::copy::Threads;
//! use mscclpp_device::poll::SpinBudget;
//! use mscclpp_device::ptr::GlobalPtr;
//! use mscclpp_device::window::{Scope, Window};
//!
//! /// Sums every rank's `n` f32 of `input` into `out` in rank order (one block per rank, a
//! /// window of `size * n` f32 with slot 0; launch `round` = 1, 2, ...).
//! #[unsafe(no_mangle)]
//! pub unsafe extern "ptx-kernel" fn window_sum(w: Window, input: GlobalPtr<u8>, out: *mut f32, n: u64, round: u64) {
//!     let (block, bytes) = (Scope::Block, 4 * n);
//!     // SAFETY: the host passes a live window of `size * n` f32, `input` and `out` of `n` f32.
//!     unsafe {
//!         for p in 0..w.size {
//!             // My data into region `rank` of every rank's window, then a signal on slot 0.
//!             w.put_signal(p, w.rank as u64 * bytes, input, bytes, 0, block);
//!         }
//!         for q in 0..w.size {
//!             w.wait_signal_in(block, 0, q, round, SpinBudget::DEFAULT); // rank q's region is here
//!         }
//!         for i in Threads::block().stride(n) {
//!             let mut sum = w.local::<f32>(4 * i).as_ptr().read();
//!             for r in 1..w.size {
//!                 sum += w.local::<f32>(r as u64 * bytes + 4 * i).as_ptr().read();
//!             }
//!             *out.add(i as usize) = sum;
//!         }
//!         w.barrier_in(block, SpinBudget::DEFAULT); // every region read before the next launch
//!     }
//! }
//! ```
//!
//! # Where things are
//!
//! * [`ptr`]: typed addresses ([`ptr::GlobalPtr`], [`ptr::SharedPtr`], [`ptr::MultimemPtr`]) and
//!   the dynamic shared-memory window ([`SharedPtr::dynamic`](ptr::SharedPtr), device only).
//! * [`bulk`]: Hopper bulk copies with [`bulk::BulkBarrier`] and the N-stage [`bulk::BulkPipeline`].
//! * [`atomic`]: scoped atomics, with order and scope as type parameters.
//! * [`semaphore`]: every semaphore: between GPUs, from the host, over NVLink multicast and
//!   inside one GPU.
//! * [`trigger`], [`fifo`], [`channel`]: the proxy's trigger encoding, the trigger FIFO to the
//!   host proxy, and the memory, port and switch channels.
//! * [`packet`], [`copy`], [`sync`], [`op`], [`element`], [`multimem`]: LL packets,
//!   cooperative copies, the block barrier ([`sync::block_barrier`]) and the grid barrier, the
//!   reduction operation markers, the one trait of values that sum ([`element::Element`]), and
//!   NVLink SHARP forms.
//! * [`window`]: symmetric memory windows (see above).
//!
//! Algorithms built on these primitives live in crates of their own, each a small `no_std`
//! crate of device code shared by its host crate and its kernels: `mscclpp-collectives-device`,
//! `mscclpp-executor-device`, `mscclpp-ep-device`, `mscclpp-nccl-device`.
//! * [`poll`]: [`poll::SpinBudget`], the bound on every wait: when it runs out the kernel prints
//!   which wait and executes `trap;`, so a lost signal fails the launch instead of hanging it;
//!   and [`poll::now_ns`], the global timer the budgets are measured in.
//!
//! # Safety and checks
//!
//! Device methods that touch memory are `unsafe`: each says in `# Safety` what the caller
//! guarantees (addresses, alignment, which threads call it). With debug builds or the `checks`
//! feature, arguments are also checked on the device ([`device_assert!`]). Feature
//! `panic-handler` (default) provides the kernel crate's panic handler (prints the location,
//! then `trap;`); feature `sm100a` adds the fp8 multimem forms.
//!
//! All inline assembly lives in [`ptx`] (the wrappers exist on nvptx64 only; on the host the
//! module holds their expected PTX and SASS, [`ptx::CHECKS`]): one thin wrapper per instruction
//! form, each checked against ptxas and the SASS it produces. Everything else composes those
//! wrappers.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch, stdarch_nvptx))]
#![cfg_attr(all(target_arch = "nvptx64", feature = "check-kernels"), feature(abi_ptx))]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod abi;
pub mod abort;
pub mod atomic;
pub mod bulk;
pub mod channel;
pub mod copy;
pub mod element;
pub mod fifo;
pub mod multimem;
pub mod op;
pub mod packet;
pub mod poll;
pub mod protocol;
pub mod ptr;
pub mod semaphore;
mod smem;
pub mod sync;
pub mod trigger;
pub mod vec;
pub mod window;

pub mod ptx;

#[cfg(all(target_arch = "nvptx64", feature = "panic-handler"))]
mod panic;

/// Whether device-side argument assertions ([`device_assert!`]) are compiled in (debug builds, or
/// feature `checks`). Not to be confused with [`ptx::CHECKS`], the wrappers' expected PTX/SASS.
pub const ASSERTS: bool = cfg!(any(debug_assertions, feature = "checks"));

/// Checks a condition on the device when [`ASSERTS`] is on; on failure prints the message with the
/// caller's location and traps, so the host sees a launch failure instead of corrupted memory.
#[macro_export]
macro_rules! device_assert {
    ($cond:expr, $msg:literal) => {
        if $crate::ASSERTS && !($cond) {
            $crate::poll::fail(
                const {
                    match ::core::ffi::CStr::from_bytes_with_nul(::core::concat!($msg, "\0").as_bytes()) {
                        ::core::result::Result::Ok(c) => c,
                        ::core::result::Result::Err(_) => ::core::panic!("device_assert!: the message contains a NUL"),
                    }
                },
            );
        }
    };
}
