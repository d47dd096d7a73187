//! Host runtime for mscclpp-rs.
//!
//! Built on `cudarc`'s driver API with dynamic loading: it compiles with no CUDA installed and
//! loads `libcuda` at run time, so a machine without a GPU reports zero devices (with the reason)
//! instead of failing to build or panicking.
//!
//! * [`gpu`]: discovery ([`gpu::inventory`]) and a [`gpu::Gpu`] per device (context, module
//!   cache, properties).
//! * [`launch`]: typed kernel arguments and launches, dynamic shared memory above 48 KiB.
//! * [`memory`]: device buffers (exportable to other processes), pinned host memory.
//! * [`shm`]: host memory shared by the processes of one machine (host-written semaphores).
//! * [`bulk`]: host-side validation for bulk-copy work.
//! * [`nvls`]: NVLink multicast buffers, only behind the multicast guard.
//! * [`frame`]: the bootstrap's wire frames and the session token.
//! * [`bootstrap`]: rank discovery (mpirun, PMI, Slurm, the built-in launcher), TCP rendezvous,
//!   all-gather / barrier / send / recv between ranks, and the launcher itself.
//! * [`fifo`], [`proxy`], [`semaphore`], [`channel`]: the trigger FIFO, the proxy thread that
//!   executes port-channel requests, semaphore storage and channel builders.
//! * [`ipc`], [`comm`]: GPU memory shared between processes, and the [`comm::Communicator`] that
//!   builds semaphores and memory, port and switch channels between ranks.
//! * [`topology`], [`transport`]: where every rank runs (machine, GPU), and how a port channel's
//!   operations reach a peer: CUDA IPC on one machine, TCP between machines
//!   (`MSCCLPP_RS_TRANSPORT=tcp` forces it on one machine).
//! * [`window`]: symmetric memory windows ([`Communicator::window`](comm::Communicator::window)),
//!   the same size on every rank, addressed by kernels as `(rank, offset)`.
//!
//! Every fallible call returns the one [`Error`] type.
//!
//! # Getting started
//!
//! Kernels are written with `mscclpp-device` in a crate of their own and built to PTX by the host
//! crate's build script (`nvptx-builder`); the repository's README shows the whole project. The
//! host side opens a GPU, allocates memory and launches with typed arguments:
//!
//! ```no_run
//! use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
//! # const PTX: &str = "";
//! // const PTX: &str = include_str!(env!("KERNELS_PTX")); // set by build.rs
//!
//! # fn main() -> mscclpp_host::Result<()> {
//! let inventory = mscclpp_host::gpu::inventory(); // never fails: no GPU comes with a reason
//! if inventory.devices.is_empty() {
//!     println!("no GPU: {}", inventory.reason.unwrap_or_default());
//!     return Ok(());
//! }
//! let gpu = Gpu::open(0)?;
//! let src = DeviceBuffer::from_slice(&gpu, &[7u8; 4096])?;
//! let dst = DeviceBuffer::alloc(&gpu, 4096)?;
//! let args = Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(4096u32);
//! // SAFETY: `copy_tile` takes (GlobalPtr<u8>, GlobalPtr<u8>, u32) and this shared memory.
//! unsafe { gpu.launch(PTX, "copy_tile", LaunchConfig::new(1, 32).shared(128 + 4096), args)? };
//! gpu.synchronize()?;
//! assert_eq!(dst.to_vec::<u8>()?, vec![7u8; 4096]);
//! # Ok(())
//! # }
//! ```
//!
//! Between ranks (one process per GPU, under `mpirun`, Slurm or the built-in launcher),
//! [`TcpBootstrap`] (or the program's own [`Bootstrap`]) connects the processes and a [`comm::Communicator`] shares memory and builds
//! the channels whose handles the kernels take. [`cudarc`] is re-exported for streams, events and
//! graphs, so that programs use the version this crate is built with.

pub mod abort;
mod auth;
pub mod bootstrap;
pub mod bulk;
pub mod channel;
pub mod comm;
mod driver;
pub mod dtype;
pub mod error;
pub mod fifo;
pub mod frame;
pub mod gpu;
pub mod ipc;
pub mod launch;
pub mod memory;
pub mod nvls;
mod pinned;
pub mod proxy;
pub mod semaphore;
pub mod shm;
pub mod topology;
pub mod transport;
pub mod window;

pub use bootstrap::{Bootstrap, BootstrapExt, TcpBootstrap};
/// The CUDA driver bindings this crate is built on (streams, events, graphs), re-exported so that
/// programs use the same version.
pub use cudarc;
pub use dtype::{DataType, ReduceOp};
pub use error::{Error, Result};
pub use gpu::Gpu;
pub use launch::{Args, LaunchConfig};
pub use memory::{DeviceBuffer, PinnedBuffer};
