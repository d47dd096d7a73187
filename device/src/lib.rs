//! GPU communication primitives for Rust kernels compiled to `nvptx64-nvidia-cuda`.
//!
//! The crate is `#![no_std]` and builds for two targets:
//!
//! * **nvptx64** (through `nvptx-builder`): everything, including the instruction wrappers in
//!   [`ptx`] and the device-side methods of every handle.
//! * **the host**: the `#[repr(C)]` handle types, encodings and the target-independent protocol
//!   logic, so that host code builds handles with exactly the layout the GPU reads.
//!
//! All inline assembly lives in [`ptx`] (only on nvptx64): one thin wrapper per instruction form.
//! Everything else composes those wrappers.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch, stdarch_nvptx))]

pub mod abi;
pub mod atomic;
pub mod bulk;
pub mod channel;
pub mod collective;
pub mod copy;
pub mod fifo;
pub mod multimem;
pub mod packet;
pub mod poll;
pub mod protocol;
pub mod ptr;
pub mod semaphore;
pub mod switch;
pub mod sync;
pub mod vec;

#[cfg(any(target_arch = "nvptx64", doc))]
pub mod ptx;

#[cfg(all(target_arch = "nvptx64", feature = "panic-handler"))]
mod panic;

/// Whether device-side argument assertions are compiled in (debug builds, or feature `checks`).
pub const CHECKS: bool = cfg!(any(debug_assertions, feature = "checks"));

/// Checks a condition on the device when [`CHECKS`] is on; on failure prints the message with the
/// caller's location and traps, so the host sees a launch failure instead of corrupted memory.
#[macro_export]
macro_rules! device_assert {
    ($cond:expr, $msg:literal) => {
        if $crate::CHECKS && !($cond) {
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
