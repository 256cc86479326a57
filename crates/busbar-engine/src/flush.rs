//! The timer of a background writer thread (the access log's, the span exporter's) that a
//! flush can cut short: the thread wakes every poll interval on its own, never per record, and
//! at once when shutdown asks it to write out what is queued and waits for that, bounded.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Flushes asked for and done, shared by a writer thread and its handles.
#[derive(Debug, Default)]
pub struct FlushSignal {
    state: Mutex<FlushState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct FlushState {
    /// Flushes asked for so far.
    asked: u64,
    /// The last flush a completed pass covered (`u64::MAX` once the writer has ended).
    done: u64,
}

impl FlushSignal {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        // A writer that panicked leaves consistent counters.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// For the writer: waits `poll`, or less when a flush is asked for. Returns the flush the
    /// coming pass covers, for [`FlushSignal::done`].
    pub fn sleep(&self, poll: Duration) -> u64 {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, poll, |s| s.asked <= s.done)
            .unwrap_or_else(|p| p.into_inner());
        state.asked
    }

    /// For the writer: a pass that started after [`FlushSignal::sleep`] returned `covered`
    /// has written everything queued until then.
    pub fn done(&self, covered: u64) {
        let mut state = self.lock();
        state.done = state.done.max(covered);
        self.changed.notify_all();
    }

    /// For the writer: it has ended, so no flush waits for it any more.
    pub fn close(&self) {
        self.done(u64::MAX);
    }

    /// Asks the writer to write out what is queued now and waits until it has, at most
    /// `limit`. False when the limit passed first (a disk or collector that does not answer).
    pub fn flush(&self, limit: Duration) -> bool {
        let mut state = self.lock();
        state.asked += 1;
        let wanted = state.asked;
        self.changed.notify_all();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, limit, |s| s.done < wanted)
            .unwrap_or_else(|p| p.into_inner());
        state.done >= wanted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_flush_wakes_the_writer_and_waits_for_its_pass() {
        let signal = Arc::new(FlushSignal::default());
        let writer = {
            let signal = signal.clone();
            std::thread::spawn(move || {
                // A long poll: only the flush can wake it in time.
                let covered = signal.sleep(Duration::from_secs(60));
                signal.done(covered);
            })
        };
        let started = Instant::now();
        assert!(signal.flush(Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(5));
        writer.join().expect("writer");
        // Nobody writes any more: a bounded wait, then false.
        assert!(!signal.flush(Duration::from_millis(50)));
        signal.close();
        assert!(signal.flush(Duration::from_secs(10)));
    }
}
