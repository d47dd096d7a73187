//! NVLink multicast (NVLS) buffers, behind a guard.
//!
//! **Creating multicast objects on a machine where multicast is disabled can put its GPUs out of
//! service**, so
//! nothing in this module reaches the driver without a [`MulticastPermit`], and the only way to
//! get one is [`multicast_allowed_by_env`], which looks at nothing but the environment and refuses when
//!
//! * `NCCL_NVLS_ENABLE` is set to anything but a clear "on" (`1`, `true`, `yes` or `on`, any
//!   case, surrounding spaces ignored): `0`, `00`, `2`, the empty string and a value that is
//!   not UTF-8 all count as off,
//! * `NVSHMEM_DISABLE_NVLS` or `TORCH_SYMM_MEM_DISABLE_MULTICAST` is set to anything but a clear
//!   "no" (`0`, `false`, `no` or `off`): again the empty string and non-UTF-8 values disable,
//! * or, otherwise, `MSCCLPP_RS_ALLOW_MULTICAST` is not exactly `1` (explicit opt-in).
//!
//! Variables are read with [`std::env::var_os`], so a value that is not valid UTF-8 is seen (and
//! refuses) instead of passing for unset. The public entry points read this process's
//! environment and run the guard first, before any argument check or driver call; the variants
//! that take an environment snapshot are private to the crate (its tests use them), so no caller
//! can hand the guard a made-up environment.
//!
//! ```compile_fail,E0603
//! // The snapshot form of the guard is not public: a permit cannot be had from a made-up
//! // environment.
//! let _ = mscclpp_host::nvls::multicast_allowed(|_| Some("1".into()));
//! ```
//!
//! ```compile_fail,E0624
//! use mscclpp_host::nvls::MulticastBuffer;
//! let _ = MulticastBuffer::create(&[], 1 << 21, |_| Some("1".into()));
//! ```
//!
//! What `MulticastBuffer::create` does for a group of GPUs of this process:
//!
//! ```text
//!  guard ─► each GPU: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
//!        ─► cuMulticastGetGranularity (recommended) ─► size rounded up to it and to the
//!           allocation granularity (cuMemGetAllocationGranularity)
//!        ─► cuMulticastCreate {numDevices, size, POSIX fd handles}
//!        ─► cuMulticastAddDevice for every GPU (all before any bind)
//!        ─► each GPU: cuMemCreate (pinned, on the GPU) ─► cuMulticastBindMem(mc, 0, mem, 0, size)
//!        ─► each GPU: map its memory (unicast) and the multicast handle:
//!           cuMemAddressReserve ─► cuMemMap ─► cuMemSetAccess (read/write for that GPU)
//! ```
//!
//! Teardown runs in reverse (unmap, free the ranges, unbind, release). The driver calls sit
//! behind the [`NvlsDriver`] trait so the sequence and the guard are tested on the CPU with a
//! recording fake; the real implementation is private to this module. Groups that span
//! processes (the multicast handle exported as a POSIX fd to the other ranks) build on the same
//! steps once the bootstrap can pass file descriptors.

//!
//! The module's files: `guard.rs` (the environment rules and [`MulticastPermit`]), `steps.rs`
//! (the driver steps over [`NvlsDriver`]: support query, setup, teardown), `cuda.rs` (the
//! CUDA driver behind the trait, private) and `buffer.rs` ([`MulticastBuffer`]).

mod buffer;
mod cuda;
mod guard;
mod steps;
#[cfg(test)]
mod tests;

pub use buffer::MulticastBuffer;
// Crate-private, and named here so that the snapshot form of the guard has a path that outside
// code is refused (the first `compile_fail` example above); the crate's tests use it.
#[allow(unused_imports)]
pub(crate) use guard::multicast_allowed;
pub use guard::{ALLOW_VAR, DISABLE_VARS, MulticastPermit, multicast_allowed_by_env};
pub use steps::{Handle, Member, MulticastSupport, NvlsAttr, NvlsDriver, NvlsLayout, query_support, setup, teardown};
