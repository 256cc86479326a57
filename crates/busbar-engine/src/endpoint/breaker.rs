//! The circuit breaker of one URL, in the manner of Synapse's endpoint suspension.
//!
//! Closed: calls go through; `failures` consecutive failures (or a failure ratio over a
//! window) open it. Open: the URL is suspended and skipped until its suspension ends. Then one
//! call is let through as a probe (half-open): success closes the breaker, failure suspends
//! the URL again for twice as long, up to `max_suspend`. Lock-free: a few atomics per URL.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use busbar_core::metrics::{clock_ms, UpstreamCounters};

use super::retry::Window;

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// Breaker settings, from the endpoint's config.
#[derive(Debug, Clone)]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// Failure share over `window` that opens it, once `min_calls` were made.
    pub failure_ratio: Option<f64>,
    /// The window of `failure_ratio`.
    pub window: Duration,
    /// Calls needed before the ratio counts.
    pub min_calls: u32,
    /// First suspension.
    pub suspend: Duration,
    /// Longest suspension.
    pub max_suspend: Duration,
}

/// The breaker of one URL.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    state: AtomicU8,
    consecutive: AtomicU32,
    /// When the suspension ends, in ms since `epoch`.
    open_until: AtomicU64,
    /// The current suspension, in ms (grows with each failed probe).
    suspend_ms: AtomicU64,
    /// (calls, failures).
    window: Window,
    epoch: Instant,
    stats: Arc<UpstreamCounters>,
}

/// Whether a call may go to this URL now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Yes, normally.
    Yes,
    /// Yes, as the probe of a half-open breaker: its outcome decides.
    Probe,
    /// No: the URL is suspended.
    No,
}

impl Breaker {
    /// A closed breaker; its state is published in `stats`.
    pub fn new(settings: BreakerSettings, stats: Arc<UpstreamCounters>) -> Self {
        stats.breaker_state.set(u64::from(CLOSED));
        Self {
            suspend_ms: AtomicU64::new(settings.suspend.as_millis() as u64),
            window: Window::new(settings.window),
            settings,
            state: AtomicU8::new(CLOSED),
            consecutive: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            epoch: Instant::now(),
            stats,
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn set(&self, state: u8) {
        self.state.store(state, Relaxed);
        self.stats.breaker_state.set(u64::from(state));
    }

    /// When the current suspension ends, on the metrics clock.
    pub fn open_until_clock_ms(&self) -> u64 {
        let left = self.open_until.load(Relaxed).saturating_sub(self.now_ms());
        clock_ms() + left
    }

    /// 0 closed, 1 open, 2 half-open.
    pub fn state(&self) -> u8 {
        self.state.load(Relaxed)
    }

    /// True when a call could be admitted now (no side effect).
    pub fn available(&self) -> bool {
        match self.state.load(Relaxed) {
            CLOSED => true,
            OPEN => self.now_ms() >= self.open_until.load(Relaxed),
            _ => false,
        }
    }

    /// What is left of the suspension: zero unless open (a half-open breaker's probe is under
    /// way).
    pub fn remaining(&self) -> Duration {
        if self.state.load(Relaxed) != OPEN {
            return Duration::ZERO;
        }
        let left = self.open_until.load(Relaxed).saturating_sub(self.now_ms());
        Duration::from_millis(left)
    }

    /// Admits a call, turning an expired suspension into a half-open probe.
    pub fn admit(&self) -> Admit {
        match self.state.load(Relaxed) {
            CLOSED => Admit::Yes,
            OPEN if self.now_ms() >= self.open_until.load(Relaxed) => {
                if self
                    .state
                    .compare_exchange(OPEN, HALF_OPEN, Relaxed, Relaxed)
                    .is_ok()
                {
                    self.stats.breaker_state.set(u64::from(HALF_OPEN));
                    Admit::Probe
                } else {
                    Admit::No
                }
            }
            _ => Admit::No,
        }
    }

    /// Records the outcome of an admitted call.
    pub fn record(&self, admit: Admit, ok: bool) {
        self.window.add(1, u64::from(!ok));
        if ok {
            self.consecutive.store(0, Relaxed);
            if admit == Admit::Probe {
                self.close();
            }
            return;
        }
        let consecutive = self.consecutive.fetch_add(1, Relaxed) + 1;
        if admit == Admit::Probe {
            let max = self.settings.max_suspend.as_millis() as u64;
            let grown = (self.suspend_ms.load(Relaxed) * 2).min(max);
            self.suspend_ms.store(grown, Relaxed);
            self.open_for(grown);
            return;
        }
        self.maybe_open(consecutive);
    }

    /// Records a call whose answer head was good and whose body still streams: a call in the
    /// window, and a probe's success. Its end ([`Breaker::body_ended`]) or its cut
    /// ([`Breaker::body_cut`]) completes it, so a back end that cuts every answer still makes
    /// consecutive failures.
    pub fn record_head(&self, admit: Admit) {
        self.window.add(1, 0);
        if admit == Admit::Probe {
            self.close();
        }
    }

    /// The body of a call recorded with [`Breaker::record_head`] ended whole.
    pub fn body_ended(&self) {
        self.consecutive.store(0, Relaxed);
    }

    /// The body of a call recorded with [`Breaker::record_head`] was cut short (a reset, a
    /// close before its end, a pause past the timeout): a failure.
    pub fn body_cut(&self) {
        self.window.add(0, 1);
        let consecutive = self.consecutive.fetch_add(1, Relaxed) + 1;
        self.maybe_open(consecutive);
    }

    fn close(&self) {
        self.consecutive.store(0, Relaxed);
        self.suspend_ms
            .store(self.settings.suspend.as_millis() as u64, Relaxed);
        self.set(CLOSED);
    }

    /// Opens a closed breaker when the failures say so.
    fn maybe_open(&self, consecutive: u32) {
        if self.state.load(Relaxed) != CLOSED {
            return;
        }
        let by_count = consecutive >= self.settings.failures;
        let by_ratio = self.settings.failure_ratio.is_some_and(|r| {
            let (calls, failures) = self.window.sums();
            calls >= u64::from(self.settings.min_calls) && failures as f64 >= r * calls as f64
        });
        if by_count || by_ratio {
            self.open_for(self.suspend_ms.load(Relaxed));
        }
    }

    /// A probe whose caller went away: let the next call probe again.
    pub fn abandon(&self, admit: Admit) {
        if admit == Admit::Probe {
            self.open_for(0);
        }
    }

    fn open_for(&self, ms: u64) {
        self.open_until.store(self.now_ms() + ms, Relaxed);
        self.state.store(OPEN, Relaxed);
        self.stats.breaker_state.set_open_until(clock_ms() + ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(suspend_ms: u64) -> Breaker {
        Breaker::new(
            BreakerSettings {
                failures: 3,
                failure_ratio: None,
                window: Duration::from_secs(10),
                min_calls: 20,
                suspend: Duration::from_millis(suspend_ms),
                max_suspend: Duration::from_millis(suspend_ms * 3),
            },
            Arc::default(),
        )
    }

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets_the_count() {
        let b = breaker(60_000);
        b.record(Admit::Yes, false);
        b.record(Admit::Yes, false);
        b.record(Admit::Yes, true);
        b.record(Admit::Yes, false);
        b.record(Admit::Yes, false);
        assert_eq!(b.admit(), Admit::Yes);
        b.record(Admit::Yes, false);
        assert_eq!(b.state(), OPEN);
        assert_eq!(b.admit(), Admit::No);
        assert!(!b.available());
    }

    #[test]
    fn a_streamed_answer_counts_when_its_body_ends_or_is_cut() {
        let b = breaker(60_000);
        for _ in 0..3 {
            b.record_head(Admit::Yes);
            assert_eq!(b.state(), CLOSED);
            b.body_cut();
        }
        assert_eq!(b.state(), OPEN, "three cuts in a row");

        let b = breaker(60_000);
        b.record(Admit::Yes, false);
        b.record(Admit::Yes, false);
        b.record_head(Admit::Yes);
        b.body_ended();
        b.record(Admit::Yes, false);
        assert_eq!(b.state(), CLOSED, "a whole body ends the run of failures");
    }

    #[test]
    fn a_probe_closes_on_success_and_suspends_longer_on_failure() {
        let b = breaker(0);
        for _ in 0..3 {
            b.record(Admit::Yes, false);
        }
        assert_eq!(b.state(), OPEN);
        assert_eq!(b.admit(), Admit::Probe);
        // Only one probe at a time.
        assert_eq!(b.admit(), Admit::No);
        b.record(Admit::Probe, true);
        assert_eq!(b.state(), CLOSED);

        let b = breaker(1000);
        b.suspend_ms.store(0, Relaxed);
        for _ in 0..3 {
            b.record(Admit::Yes, false);
        }
        assert_eq!(b.admit(), Admit::Probe);
        b.suspend_ms.store(1000, Relaxed);
        b.record(Admit::Probe, false);
        assert_eq!(b.state(), OPEN);
        assert_eq!(b.suspend_ms.load(Relaxed), 2000);
        b.record(Admit::Probe, false);
        assert_eq!(b.suspend_ms.load(Relaxed), 3000, "capped at max_suspend");
    }

    #[test]
    fn a_failure_ratio_over_the_window_opens_it_once_enough_calls_were_made() {
        let b = Breaker::new(
            BreakerSettings {
                failures: 100,
                failure_ratio: Some(0.5),
                window: Duration::from_secs(60),
                min_calls: 10,
                suspend: Duration::from_secs(60),
                max_suspend: Duration::from_secs(60),
            },
            Arc::default(),
        );
        // Alternating outcomes never make 100 in a row; half of 10 calls is enough.
        for i in 0..9 {
            b.record(Admit::Yes, i % 2 == 0);
            assert_eq!(b.state(), CLOSED, "after {} calls", i + 1);
        }
        b.record(Admit::Yes, false);
        assert_eq!(b.state(), OPEN);
    }
}
