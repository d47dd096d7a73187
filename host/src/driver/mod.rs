//! The one layer between this crate and the CUDA driver's C interface: every raw driver call of
//! the crate is here, each as a thin function that returns the driver's error as a
//! `DriverError` (callers add what they were doing with `DriverContext::ctx`), in the manner of
//! cudarc's own `result` module, which the crate uses directly wherever it has the call.
//!
//! * [`calls`]: calls of the bound driver API that cudarc does not wrap.
//! * [`symbols`]: entry points and values taken from the driver library at run time (newer than
//!   the bindings, or absent from older drivers).
//!
//! NVLink multicast is the exception: its calls stay in `crate::nvls::cuda`, behind the
//! multicast guard, so that nothing outside `nvls` can reach them.

pub(crate) mod calls;
pub(crate) mod symbols;

pub(crate) use symbols::*;
