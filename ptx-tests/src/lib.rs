//! Device programs of the mscclpp-rs test suite and benches.
//!
//! * `check_*` kernels: one per instruction wrapper in `mscclpp_device::ptx`, as small as possible
//!   so that the CPU-side PTX/SASS checks can find the instruction in the kernel's body.
//! * the other kernels are the device halves of the unit tests, pattern tests and benches.
#![no_std]
#![feature(abi_ptx)]
#![allow(clippy::missing_safety_doc, clippy::macro_metavars_in_unsafe)]

pub mod bulk;
pub mod checks;
pub mod memchan;
pub mod mp;
pub mod multimem;
pub mod shared;
pub mod switch;
pub mod sync;
