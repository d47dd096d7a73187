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
//! * [`bootstrap`]: rank discovery (mpirun, PMI, Slurm, the built-in launcher), TCP rendezvous,
//!   all-gather / barrier / send / recv between ranks, and the launcher itself.
//! * [`fifo`], [`proxy`], [`semaphore`], [`channel`]: the trigger FIFO, the proxy thread that
//!   executes port-channel requests, semaphore storage and channel builders.
//! * [`ipc`], [`comm`]: GPU memory shared between processes, and the [`comm::Communicator`] that
//!   builds semaphores and memory, port and switch channels between ranks.
//!
//! Every fallible call returns the one [`Error`] type.

pub mod bootstrap;
pub mod bulk;
pub mod channel;
pub mod comm;
pub mod error;
pub mod fifo;
pub mod gpu;
pub mod ipc;
pub mod launch;
pub mod memory;
pub mod nvls;
pub mod proxy;
pub mod semaphore;
pub mod shm;

pub use bootstrap::Bootstrap;
/// The CUDA driver bindings this crate is built on (streams, events, graphs), re-exported so that
/// programs use the same version.
pub use cudarc;
pub use error::{Error, Result};
pub use gpu::Gpu;
pub use launch::{Args, LaunchConfig};
pub use memory::{DeviceBuffer, PinnedBuffer};
