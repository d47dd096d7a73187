//! Every semaphore of the crate, over monotonically increasing counters:
//!
//! * [`MemoryDevice2DeviceSemaphore`] (and its register-cached form `CachedMemorySemaphore`):
//!   between two GPUs, through peer-mapped memory;
//! * [`Host2DeviceSemaphore`]: signalled by a host thread (the proxy), waited on by a GPU;
//! * [`SwitchSemaphore`]: a barrier of a group of GPUs over an NVLink multicast counter;
//! * [`DeviceSemaphore`]: a counting semaphore for the threads of one GPU.
//!
//! The counters only grow, so every wait compares with [`reached`] (wrap-around safe) and never
//! loses a signal: signals that arrive early are consumed by later waits.
//!
//! # Between two GPUs
//!
//! ```text
//!  GPU A (signal)                                   GPU B (wait)
//!  writes data for B ...                            expected += 1
//!  outbound += 1 (A's own memory)
//!  st.release.sys [B.inbound], outbound ──────────► spin: ld.acquire.sys [inbound] >= expected
//!  (release: A's earlier writes first)              (acquire: B then sees A's data)
//! ```
//!
//! A memory semaphore connects two GPUs: each side owns an `inbound` counter in its own memory,
//! which the *peer* writes, and `expected` / `outbound` counters only it uses. The signal is a
//! release *store* of the signaller's own running count rather than a remote atomic add: on
//! H200 over NVLink a `red.release.sys.add` made the ping-pong round trip measurably slower than
//! a raw flag store (NOTES.md has the numbers). So each inbound counter has exactly one
//! signaller: one semaphore handle per (peer, signalling thread). A host-to-device semaphore's
//! inbound is written by a host thread (the proxy, through the CUDA stream, after the copies it
//! must follow).
//!
//! One thread at a time may use a given handle (the `expected` counter is not shared).

mod counting;
mod memory;
mod switch;

pub use counting::DeviceSemaphore;
#[cfg(any(target_arch = "nvptx64", doc))]
pub use memory::CachedMemorySemaphore;
pub use memory::{Host2DeviceSemaphore, MemoryDevice2DeviceSemaphore};
pub use switch::SwitchSemaphore;

/// Whether a counter that reads `value` has reached `target`, allowing for wrap-around: true
/// when `value` is at most 2^63 - 1 steps past `target` (`value - target` as a signed number is
/// not negative), false when it is behind.
#[inline(always)]
pub const fn reached(value: u64, target: u64) -> bool {
    (value.wrapping_sub(target) as i64) >= 0
}

#[cfg(test)]
mod tests {
    use super::reached;

    #[test]
    fn wrap_safe_comparison() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(2, u64::MAX - 1)); // wrapped past the target
        assert!(!reached(u64::MAX - 1, 2));
    }

    #[test]
    fn reached_is_wrap_safe() {
        assert!(reached(8, 8));
        assert!(reached(9, 8));
        assert!(!reached(7, 8));
        // Targets and values across the u64 wrap.
        assert!(reached(2, u64::MAX - 1));
        assert!(reached(u64::MAX, u64::MAX - 1));
        assert!(!reached(u64::MAX - 2, u64::MAX - 1));
        assert!(!reached(u64::MAX, 3));
        // A value up to 2^63 - 1 ahead counts as reached; further ahead reads as behind.
        assert!(reached(5 + (i64::MAX as u64), 5));
        assert!(!reached(5 + (i64::MAX as u64) + 1, 5));
    }
}
