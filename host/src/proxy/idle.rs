//! How the proxy thread waits while the FIFO is empty.

use std::time::{Duration, Instant};

/// How the proxy thread waits when the FIFO is empty: it spins for [`IdlePolicy::spin`] after the
/// last trigger (a burst of port-channel operations is served at spin latency), then sleeps in
/// steps that double from [`IdlePolicy::min_sleep`] up to [`IdlePolicy::max_sleep`]. An idle proxy
/// thus costs a few wake-ups per millisecond instead of a core, and a trigger pushed while it
/// sleeps waits at most about `max_sleep` (plus the scheduler's wake-up time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// How long to spin after the last trigger before the first sleep.
    pub spin: Duration,
    /// The first sleep.
    pub min_sleep: Duration,
    /// The longest sleep (bounds the wake-up latency of an idle proxy).
    pub max_sleep: Duration,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        Self {
            spin: Duration::from_micros(100),
            min_sleep: Duration::from_micros(1),
            max_sleep: Duration::from_micros(50),
        }
    }
}

impl IdlePolicy {
    /// A policy that never sleeps (spins, yielding the core now and then): the lowest latency,
    /// one core per proxy for as long as it runs.
    pub fn always_spin() -> Self {
        Self { spin: Duration::MAX, min_sleep: Duration::ZERO, max_sleep: Duration::ZERO }
    }

    /// What to do after `idle_for` without a trigger, when `sleeps` sleeps were taken since the
    /// last one.
    pub fn action(&self, idle_for: Duration, sleeps: u32) -> IdleAction {
        if idle_for < self.spin {
            return IdleAction::Spin;
        }
        // min_sleep * 2^sleeps, capped (saturating: a long idle time stays at the cap).
        let factor = 1u32.checked_shl(sleeps.min(31)).unwrap_or(u32::MAX);
        let step = self.min_sleep.saturating_mul(factor).min(self.max_sleep);
        if step.is_zero() { IdleAction::Yield } else { IdleAction::Sleep(step) }
    }
}

/// One step of the idle loop ([`IdlePolicy::action`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// Poll again at once.
    Spin,
    /// Give the core to another thread, then poll.
    Yield,
    /// Sleep this long, then poll.
    Sleep(Duration),
}

/// The idle state of the proxy loop: when the last trigger came and how many sleeps followed.
#[derive(Debug)]
pub(super) struct Backoff {
    pub(super) policy: IdlePolicy,
    pub(super) since: Option<Instant>,
    pub(super) sleeps: u32,
    pub(super) spins: u32,
}

impl Backoff {
    pub(super) fn new(policy: IdlePolicy) -> Self {
        Self { policy, since: None, sleeps: 0, spins: 0 }
    }

    /// Work arrived: the next idle period starts with spinning again.
    pub(super) fn reset(&mut self) {
        self.since = None;
        self.sleeps = 0;
    }

    /// Waits one idle step.
    pub(super) fn wait(&mut self) {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        match self.policy.action(now.saturating_duration_since(since), self.sleeps) {
            IdleAction::Spin => {
                // A yield now and then, so an oversubscribed machine still makes progress.
                self.spins = self.spins.wrapping_add(1);
                if self.spins.is_multiple_of(4096) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Sleep(d) => {
                self.sleeps = self.sleeps.saturating_add(1);
                std::thread::sleep(d);
            }
        }
    }
}
