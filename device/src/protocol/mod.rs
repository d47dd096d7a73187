//! Target-independent protocol logic, written once over small memory facades.
//!
//! The GPU instantiates these facades with PTX atomics (`crate::fifo`); the host proxy with
//! `std::sync::atomic` over pinned memory; the model checks (`device/tests/fifo_model.rs`) with
//! `loom`'s atomics, so the code that is model-checked is the code that runs.

pub mod fifo;

/// How a protocol step waits for a condition: the GPU spins with a budget and traps when it runs
/// out; the CPU models yield to the scheduler.
pub trait Waiter {
    /// Returns once `cond()` is true (or does not return: traps or panics when out of budget).
    fn wait_until<F: FnMut() -> bool>(&mut self, cond: F);
}
