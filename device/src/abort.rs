//! The abort word: how the host tells every bounded wait on a GPU to give up now.
//!
//! A wait whose partner has died would otherwise spin out its whole [`SpinBudget`] (seconds)
//! before trapping. Each loaded module carries one global, [`SYMBOL`], that holds the address
//! of a word of host-mapped pinned memory (or 0 when no host has set it). The host runtime
//! writes that address into every module it loads, and writes a non-zero [`cause`](AbortCause)
//! into the word when the bootstrap loses a peer or the program calls `abort()`.
//!
//! A wait reads the word only after it has spun for [`POLL_AFTER_NS`], at its clock checks, so
//! the waits of a healthy run never pay for the read over PCIe. Once the word is non-zero, the
//! waiting thread gives up: the first one in the module prints which wait and why (the lost
//! rank, or an explicit abort), and each *exits* (it does not trap, see `aborted`). The kernel
//! then ends quickly with unusable results, and the context stays usable; the host runtime's
//! synchronize reports the abort as an error from then on.
//!
//! Encoding of the word: `0` is "no abort", `u64::MAX` is an abort the host requested, and any
//! other value `v` is "rank `v - 1` was lost". The host and the device both use [`AbortCause`].
//!
//! [`SpinBudget`]: crate::poll::SpinBudget

/// The name of the module global that holds the abort word's address (a `u64`, 0 when unset).
pub const SYMBOL: &str = "mscclpp_abort_word";

/// A wait starts reading the abort word once it has waited this long (1 ms): waits that end
/// sooner never touch host memory, and a dead peer is noticed well within a second.
pub const POLL_AFTER_NS: u64 = 1_000_000;

/// Why the host aborted the GPU's waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortCause {
    /// The program asked for it (`abort()` on the host).
    Requested,
    /// The bootstrap lost its connection to this rank before it said goodbye.
    PeerLost(u64),
}

impl AbortCause {
    /// The value of the abort word for this cause (never 0).
    pub const fn encode(self) -> u64 {
        match self {
            AbortCause::Requested => u64::MAX,
            // A rank number is below u64::MAX - 1 on any machine; saturate rather than wrap to
            // the "no abort" value.
            AbortCause::PeerLost(rank) => {
                if rank >= u64::MAX - 1 {
                    u64::MAX - 1
                } else {
                    rank + 1
                }
            }
        }
    }

    /// The cause a word holds; `None` for 0 (no abort).
    pub const fn decode(word: u64) -> Option<Self> {
        match word {
            0 => None,
            u64::MAX => Some(AbortCause::Requested),
            v => Some(AbortCause::PeerLost(v - 1)),
        }
    }
}

#[cfg(target_arch = "nvptx64")]
mod device {
    /// The address of the host-mapped abort word, written by the host runtime after it loads
    /// the module (`cuModuleGetGlobal` on [`super::SYMBOL`]); 0 when no host set it.
    ///
    /// `static mut` so the compiler cannot fold the initial 0 into the reads; nothing on the
    /// device writes it.
    #[unsafe(no_mangle)]
    #[allow(non_upper_case_globals)]
    static mut mscclpp_abort_word: u64 = 0;

    /// Threads of this module that gave up on an abort; only the first prints.
    static mut ABORTED_THREADS: u32 = 0;

    /// The abort word's value, or 0 when the module's abort address is unset.
    #[inline(always)]
    pub(super) fn read() -> u64 {
        // SAFETY: a plain read of a module global that only the host writes (between launches,
        // through the driver); a raw pointer, never a reference.
        let addr = unsafe { core::ptr::read_volatile(&raw const mscclpp_abort_word) };
        if addr == 0 || !addr.is_multiple_of(8) {
            return 0;
        }
        // SAFETY: the host runtime stores here only the device address of a live, 8-byte
        // aligned word of mapped pinned memory, which it keeps for the life of the context. A
        // volatile load (uncached, system-wide): the word carries no data to order, only a value.
        unsafe { crate::ptx::ld_st::ld_volatile_u64(addr as *const u64) }
    }

    /// Whether this is the first thread of the module to give up (it prints the message).
    pub(super) fn first_to_abort() -> bool {
        // SAFETY: an atomic add on a module global through a raw pointer.
        unsafe {
            crate::atomic::fetch_add::<crate::atomic::Relaxed, crate::atomic::Gpu, u32>(&raw mut ABORTED_THREADS, 1)
                == 0
        }
    }
}

/// At a wait's clock check: once the host has set the abort word (read only after
/// [`POLL_AFTER_NS`] of waiting), the calling thread gives up: the first such thread of the
/// module prints which wait and why, and every one of them exits.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn check(name: &'static core::ffi::CStr, elapsed_ns: u64) {
    if elapsed_ns >= POLL_AFTER_NS {
        let word = device::read();
        if word != 0 {
            aborted(name, word);
        }
    }
}

/// Ends the calling thread (not the kernel with a trap): a trapped kernel takes the driver
/// hundreds of milliseconds to report and leaves the context unusable, and two processes
/// trapping on one GPU at once have left one of them stuck for seconds. Exited threads count
/// as arrived at CTA barriers, and every other thread still waiting gives up at its own next
/// check, so the kernel ends within about a millisecond; the host's synchronize then reports
/// the abort (its results are not to be used).
#[cfg(target_arch = "nvptx64")]
#[cold]
#[inline(never)]
fn aborted(name: &'static core::ffi::CStr, word: u64) -> ! {
    if device::first_to_abort() {
        crate::ptx::print::print_abort(name, word);
    }
    crate::ptx::misc::exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_round_trip_and_never_encode_to_zero() {
        for cause in
            [AbortCause::Requested, AbortCause::PeerLost(0), AbortCause::PeerLost(1), AbortCause::PeerLost(4095)]
        {
            assert_ne!(cause.encode(), 0, "{cause:?}");
            assert_eq!(AbortCause::decode(cause.encode()), Some(cause));
        }
        assert_eq!(AbortCause::decode(0), None);
        assert_eq!(AbortCause::PeerLost(3).encode(), 4);
        assert_eq!(AbortCause::decode(4), Some(AbortCause::PeerLost(3)));
        // Ranks at the very top saturate instead of wrapping to 0 or to "requested".
        assert_eq!(AbortCause::PeerLost(u64::MAX).encode(), u64::MAX - 1);
        assert_eq!(AbortCause::PeerLost(u64::MAX - 1).encode(), u64::MAX - 1);
    }
}
