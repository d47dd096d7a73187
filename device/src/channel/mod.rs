//! Channels: `#[repr(C)]` handles built by the host and passed to kernels by value, each
//! composing a memory window with the semaphore that orders it.

pub mod emulated_switch;
pub mod memory;
pub mod port;
pub mod switch;
