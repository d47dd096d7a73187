//! Bounded waiting.
//!
//! Every blocking wait in this crate takes a [`SpinBudget`]. When the budget runs out, the wait
//! prints which wait expired (block and thread included) and executes `trap;`: the kernel fails,
//! the host's next synchronize returns `CUDA_ERROR_LAUNCH_FAILED`, and nothing hangs silently.
//!
//! The budget is wall-clock time read from `%globaltimer` (nanoseconds), checked every
//! [`CHECK_EVERY`] polls so that the common path costs one load and one compare.

/// How many failed polls pass between two reads of the clock.
pub const CHECK_EVERY: u32 = 64;

/// How long a wait may spin before it traps. Negative means "never trap".
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SpinBudget {
    nanos: i64,
}

// SAFETY: transparent over i64.
unsafe impl crate::abi::DeviceAbi for SpinBudget {}
static_assertions::assert_eq_size!(SpinBudget, i64);

impl SpinBudget {
    /// Ten seconds: long enough for ranks started seconds apart, short enough to fail a test run.
    pub const DEFAULT: Self = Self::from_millis(10_000);

    /// A budget of `ms` milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        Self { nanos: ms.saturating_mul(1_000_000) }
    }
    /// A budget of `us` microseconds.
    pub const fn from_micros(us: i64) -> Self {
        Self { nanos: us.saturating_mul(1_000) }
    }
    /// A budget of `ns` nanoseconds; a negative value never expires.
    pub const fn from_nanos(ns: i64) -> Self {
        Self { nanos: ns }
    }
    /// A budget that never expires.
    pub const fn unbounded() -> Self {
        Self { nanos: -1 }
    }
    /// Whether this budget never expires.
    pub const fn is_unbounded(self) -> bool {
        self.nanos < 0
    }
    /// The budget in nanoseconds (negative: unbounded).
    pub const fn nanos(self) -> i64 {
        self.nanos
    }
    /// Whether `elapsed_ns` exceeds this budget.
    #[inline(always)]
    pub const fn expired(self, elapsed_ns: u64) -> bool {
        self.nanos >= 0 && elapsed_ns > self.nanos as u64
    }
}

impl Default for SpinBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Prints `msg` (NUL-terminated) with the calling block and thread, then traps.
///
/// On the host this panics with the message instead (host builds only use it in tests).
#[cold]
#[inline(never)]
#[track_caller]
pub fn fail(msg: &'static str) -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        let loc = core::panic::Location::caller();
        crate::ptx::print::print_failure(msg, loc.file(), loc.line());
        crate::ptx::misc::trap()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        panic!("{}", msg.trim_end_matches('\0'))
    }
}

/// Spins until `cond()` returns true or `budget` runs out; on expiry prints `name` and traps.
///
/// `name` must be NUL-terminated (`"BulkBarrier::wait\0"`).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub fn spin_until(budget: SpinBudget, name: &'static str, mut cond: impl FnMut() -> bool) {
    if cond() {
        return;
    }
    let start = crate::ptx::sreg::globaltimer();
    let mut polls: u32 = 0;
    loop {
        if cond() {
            return;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(CHECK_EVERY) {
            let now = crate::ptx::sreg::globaltimer();
            if budget.expired(now.wrapping_sub(start)) {
                expired(name, now.wrapping_sub(start));
            }
        }
    }
}

#[cfg(target_arch = "nvptx64")]
#[cold]
#[inline(never)]
fn expired(name: &'static str, elapsed_ns: u64) -> ! {
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
        assert!(!SpinBudget::unbounded().expired(u64::MAX));
        assert!(!SpinBudget::from_nanos(-7).expired(u64::MAX));
        assert!(SpinBudget::from_nanos(0).expired(1));
        assert_eq!(SpinBudget::from_millis(i64::MAX).nanos(), i64::MAX);
        assert_eq!(SpinBudget::default(), SpinBudget::DEFAULT);
    }
}
