//! Bounded waiting.
//!
//! Every blocking wait in this crate takes a [`SpinBudget`]. When the budget runs out, the wait
//! prints which wait expired (block and thread included) and executes `trap;`: the kernel fails,
//! the host's next synchronize returns `CUDA_ERROR_LAUNCH_FAILED`, and nothing hangs silently.
//!
//! The budget is wall-clock time read from `%globaltimer` ([`now_ns`], nanoseconds), checked
//! every [`CHECK_EVERY`] polls so that the common path costs one load and one compare. A wait that has
//! spun for [`crate::abort::POLL_AFTER_NS`] also reads the host's abort word at those checks, and
//! gives up at once when the host has set it: the thread exits, and the first to do so prints the
//! cause, naming the lost rank (see [`crate::abort`]).

/// How many failed polls pass between two reads of the clock.
pub const CHECK_EVERY: u32 = 64;

use core::ffi::CStr;

/// How long a wait may spin before it traps.
///
/// Every constructor that takes a number gives a *bounded* budget: a negative count saturates to
/// zero (the wait traps at its first clock check) rather than meaning "forever". A budget that
/// never expires exists, but only through the `unsafe` [`SpinBudget::unbounded`], so that
/// removing the bound from a wait is an explicit decision visible in the source.
///
/// The layout is one `i64` of nanoseconds, shared with the host (kernel arguments). The value
/// [`SpinBudget::UNBOUNDED_NANOS`] (`i64::MIN`) is the unbounded budget; any other negative
/// value, which only raw bytes can produce, counts as zero.
///
/// A budget crosses to the device as a kernel argument ([`crate::abi::DeviceAbi`]) and can be
/// read as bytes (`bytemuck::NoUninit`) or zeroed (a zero budget is bounded), but it is not
/// `bytemuck::Pod` or `AnyBitPattern`: safe code cannot make one from an integer or from bytes,
/// which would give it the unbounded value without [`SpinBudget::unbounded`]:
///
/// ```compile_fail,E0277
/// use mscclpp_device::poll::SpinBudget;
/// let forever: SpinBudget = bytemuck::cast(i64::MIN);
/// ```
///
/// ```compile_fail,E0277
/// use mscclpp_device::poll::SpinBudget;
/// let forever: SpinBudget = bytemuck::pod_read_unaligned(&i64::MIN.to_ne_bytes());
/// ```
///
/// ```
/// use mscclpp_device::poll::SpinBudget;
/// // Reading one as bytes still works (and a zeroed one is a zero budget).
/// let b = SpinBudget::from_nanos(5);
/// assert_eq!(bytemuck::bytes_of(&b), &5i64.to_ne_bytes());
/// assert_eq!(<SpinBudget as bytemuck::Zeroable>::zeroed(), SpinBudget::from_nanos(0));
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::NoUninit, bytemuck::Zeroable)]
pub struct SpinBudget {
    nanos: i64,
}

// SAFETY: transparent over i64.
unsafe impl crate::abi::DeviceAbi for SpinBudget {}
static_assertions::assert_eq_size!(SpinBudget, i64);

impl SpinBudget {
    /// Ten seconds: long enough for ranks started seconds apart, short enough to fail a test run.
    pub const DEFAULT: Self = Self::from_millis(10_000);

    /// The raw value of the unbounded budget.
    pub const UNBOUNDED_NANOS: i64 = i64::MIN;

    /// A budget of `ms` milliseconds; a negative value counts as zero.
    pub const fn from_millis(ms: i64) -> Self {
        Self::from_nanos(ms.saturating_mul(1_000_000))
    }
    /// A budget of `us` microseconds; a negative value counts as zero.
    pub const fn from_micros(us: i64) -> Self {
        Self::from_nanos(us.saturating_mul(1_000))
    }
    /// A budget of `ns` nanoseconds; a negative value counts as zero (never as unbounded).
    pub const fn from_nanos(ns: i64) -> Self {
        Self { nanos: if ns < 0 { 0 } else { ns } }
    }
    /// A budget that never expires: a wait given it spins until its condition holds.
    ///
    /// # Safety
    /// Not a memory-safety contract but a liveness one, made explicit on purpose: the caller
    /// must know that the condition of every wait given this budget eventually becomes true
    /// (its partner is guaranteed to run and signal). Otherwise the kernel hangs with no message
    /// and only killing the process frees the GPU.
    pub const unsafe fn unbounded() -> Self {
        Self { nanos: Self::UNBOUNDED_NANOS }
    }
    /// Whether this budget never expires.
    pub const fn is_unbounded(self) -> bool {
        self.nanos == Self::UNBOUNDED_NANOS
    }
    /// The budget in nanoseconds ([`SpinBudget::UNBOUNDED_NANOS`]: unbounded).
    pub const fn nanos(self) -> i64 {
        self.nanos
    }
    /// Whether `elapsed_ns` exceeds this budget.
    #[inline(always)]
    pub const fn expired(self, elapsed_ns: u64) -> bool {
        if self.nanos == Self::UNBOUNDED_NANOS {
            return false;
        }
        // Other negative values only come from raw bytes: treat them as zero.
        let limit = if self.nanos < 0 { 0 } else { self.nanos as u64 };
        elapsed_ns > limit
    }
}

impl Default for SpinBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Prints `msg` with the caller's location and the calling block and thread, then traps.
///
/// `msg` is a C string (`c"..."`), so the device's `%s` always finds its terminating NUL. The
/// caller's file name (from `#[track_caller]`) is not NUL-terminated in the binary; it is copied
/// into a small stack buffer with a NUL (truncated to [`LOCATION_CAPACITY`] bytes) before printing.
///
/// On the host this panics with the message instead (host builds only use it in tests).
#[cold]
#[inline(never)]
#[track_caller]
pub fn fail(msg: &'static CStr) -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        let loc = core::panic::Location::caller();
        let mut buf = [0u8; LOCATION_CAPACITY];
        let file = nul_terminated(loc.file(), &mut buf);
        crate::ptx::print::print_failure(msg, file, loc.line());
        crate::ptx::misc::trap()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        panic!("{}", msg.to_str().unwrap_or("(message not UTF-8)"))
    }
}

/// Bytes of stack a device message may use for a string that is not NUL-terminated in the
/// binary (a `#[track_caller]` file name, a panic's message), NUL included.
pub const LOCATION_CAPACITY: usize = 128;

/// Copies `s` into `buf` followed by a NUL and returns it as a C string. A string that does not
/// fit is cut (its last three bytes before the NUL become `...`); an interior NUL ends it early.
pub fn nul_terminated<'a, const N: usize>(s: &str, buf: &'a mut [u8; N]) -> &'a CStr {
    const { assert!(N >= 4, "room for \"...\" and the NUL") };
    let bytes = s.as_bytes();
    let n = if bytes.len() < N { bytes.len() } else { N - 1 };
    buf[..n].copy_from_slice(&bytes[..n]);
    if n < bytes.len() {
        buf[n - 3..n].copy_from_slice(b"...");
    }
    buf[n] = 0;
    match CStr::from_bytes_until_nul(&buf[..=n]) {
        Ok(c) => c,
        // Unreachable: `buf[n]` is a NUL.
        Err(_) => c"",
    }
}

/// The GPU's global timer (`%globaltimer`): nanoseconds of wall-clock time, the clock every
/// [`SpinBudget`] is measured in. The origin is unspecified and the timer ticks coarsely (its low
/// bits may stand still for a while), so use the difference of two readings on one GPU,
/// `now_ns().wrapping_sub(start)`, for elapsed time. For cycle counts of one multiprocessor, see
/// [`crate::ptx::sreg::clock64`].
///
/// Compiled for nvptx64 only.
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub fn now_ns() -> u64 {
    crate::ptx::sreg::globaltimer()
}

/// Spins until `cond()` returns true or `budget` runs out; on expiry prints `name` and traps.
/// When the host sets the abort word, the calling thread exits instead ([`crate::abort`]).
///
/// `name` is a C string literal (`c"BulkBarrier::wait"`).
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(always)]
pub fn spin_until(budget: SpinBudget, name: &'static CStr, mut cond: impl FnMut() -> bool) {
    if cond() {
        return;
    }
    let start = now_ns();
    let mut polls: u32 = 0;
    loop {
        if cond() {
            return;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(CHECK_EVERY) {
            let elapsed = now_ns().wrapping_sub(start);
            if budget.expired(elapsed) {
                expired(name, elapsed);
            }
            crate::abort::check(name, elapsed);
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
#[cold]
#[inline(never)]
fn expired(name: &'static CStr, elapsed_ns: u64) -> ! {
    crate::ptx::print::print_timeout(name, elapsed_ns);
    crate::ptx::misc::trap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_expiry() {
        let b = SpinBudget::from_micros(5);
        assert!(!b.expired(5_000));
        assert!(b.expired(5_001));
        // SAFETY: a test of the value, used by no wait.
        let unbounded = unsafe { SpinBudget::unbounded() };
        assert!(unbounded.is_unbounded());
        assert!(!unbounded.expired(u64::MAX));
        assert!(SpinBudget::from_nanos(0).expired(1));
        assert_eq!(SpinBudget::from_millis(i64::MAX).nanos(), i64::MAX);
        assert_eq!(SpinBudget::default(), SpinBudget::DEFAULT);
    }

    #[test]
    fn negative_budgets_are_bounded() {
        for b in [
            SpinBudget::from_nanos(-7),
            SpinBudget::from_nanos(-1),
            SpinBudget::from_nanos(i64::MIN),
            SpinBudget::from_micros(-1),
            SpinBudget::from_micros(i64::MIN),
            SpinBudget::from_millis(-1),
            SpinBudget::from_millis(i64::MIN),
        ] {
            assert!(!b.is_unbounded(), "{b:?}");
            assert_eq!(b.nanos(), 0);
            assert!(b.expired(1), "{b:?}");
            assert!(b.expired(u64::MAX), "{b:?}");
        }
        // Raw bytes (kernel arguments) with a negative value other than the sentinel: zero.
        // SAFETY: `SpinBudget` is `repr(transparent)` over an `i64`; this stands for the bytes a
        // kernel argument may hold (only the device reads them so).
        let raw: SpinBudget = unsafe { core::mem::transmute(-5i64) };
        assert!(!raw.is_unbounded());
        assert!(raw.expired(1));
    }

    #[test]
    fn nul_terminated_copies_and_truncates() {
        let mut buf = [0xffu8; 16];
        assert_eq!(nul_terminated("src/lib.rs", &mut buf).to_bytes(), b"src/lib.rs");
        assert_eq!(nul_terminated("", &mut buf).to_bytes(), b"");
        let exact = "0123456789abcde"; // 15 bytes + NUL = 16
        assert_eq!(nul_terminated(exact, &mut buf).to_bytes(), exact.as_bytes());
        let long = "0123456789abcdefghij";
        assert_eq!(nul_terminated(long, &mut buf).to_bytes(), b"0123456789ab...");
        assert_eq!(nul_terminated("a\0b", &mut buf).to_bytes(), b"a");
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn fail_on_the_host_panics_with_the_message() {
        fail(c"boom")
    }

    /// A string of exactly the buffer's size has no room for its NUL: it is cut like a longer one
    /// (a surviving mutant of `./x mutants spin-budget`, `<` read as `<=`, wrote the NUL past the
    /// buffer's end). Random lengths around the size, each cut or kept as it must be.
    #[test]
    fn nul_terminated_cuts_a_string_as_long_as_the_buffer() {
        let mut buf = [0xffu8; 16];
        assert_eq!(nul_terminated("0123456789abcdef", &mut buf).to_bytes(), b"0123456789ab...");
        let len = 13
            + (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as usize) % 8;
        let s: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let got = nul_terminated(&s, &mut buf).to_bytes().to_vec();
        if len < 16 {
            assert_eq!(got, s.as_bytes(), "{len} bytes");
        } else {
            assert_eq!(got, [&s.as_bytes()[..12], b"..."].concat(), "{len} bytes");
        }
    }
}
