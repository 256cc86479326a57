//! Sleeps that end within tens of microseconds of their deadline, for the echo back end's delay.
//!
//! tokio's timer counts whole milliseconds and rounds each deadline up to the next one, and its
//! event loop waits in whole milliseconds too: a 5 ms sleep lasts 5 to 7 ms, and one that
//! starts a few microseconds later than another can end a whole millisecond later. The echo's
//! delay stands for a back end's service time, which a latency benchmark subtracts from what a
//! proxy adds, so that rounding would be charged to the proxy. Here one thread keeps the
//! deadlines in order and wakes each task at its own, with the kernel's timer precision.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Waits `delay`, ending within the kernel's timer slack (about 50 µs) of the deadline.
pub async fn sleep(delay: Duration) {
    let at = Instant::now() + delay;
    match timers() {
        Some(timers) => Sleep { at, timers }.await,
        // No thread for the deadlines: tokio's timer is the fallback.
        None => tokio::time::sleep_until(at.into()).await,
    }
}

struct Sleep {
    at: Instant,
    timers: &'static Timers,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        // Registered again on every early poll: a stale entry only wakes the task once more.
        self.timers.add(self.at, cx.waker().clone());
        Poll::Pending
    }
}

struct Entry {
    at: Instant,
    seq: u64,
    waker: Waker,
}

impl Entry {
    fn key(&self) -> (Instant, u64) {
        (self.at, self.seq)
    }
}

// Reversed, so that the max-heap yields the earliest deadline first.
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Entry {}

#[derive(Default)]
struct Pending {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

struct Timers {
    pending: Mutex<Pending>,
    changed: Condvar,
}

impl Timers {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, at: Instant, waker: Waker) {
        let mut pending = self.lock();
        let earliest = pending.heap.peek().is_none_or(|e| at < e.at);
        pending.seq += 1;
        let seq = pending.seq;
        pending.heap.push(Entry { at, seq, waker });
        drop(pending);
        if earliest {
            self.changed.notify_one();
        }
    }

    /// The thread's loop: wakes every task whose deadline has passed, then waits for the next
    /// deadline or for an earlier one to arrive.
    fn run(&self) {
        let mut due = Vec::new();
        let mut pending = self.lock();
        loop {
            let now = Instant::now();
            while pending.heap.peek().is_some_and(|e| e.at <= now) {
                if let Some(e) = pending.heap.pop() {
                    due.push(e.waker);
                }
            }
            if !due.is_empty() {
                drop(pending);
                due.drain(..).for_each(Waker::wake);
                pending = self.lock();
                continue;
            }
            pending = match pending.heap.peek().map(|e| e.at - now) {
                Some(wait) => {
                    self.changed
                        .wait_timeout(pending, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

fn timers() -> Option<&'static Timers> {
    static TIMERS: OnceLock<Option<&'static Timers>> = OnceLock::new();
    *TIMERS.get_or_init(|| {
        let timers: &'static Timers = Box::leak(Box::new(Timers {
            pending: Mutex::new(Pending::default()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("echo-delay".into())
            .spawn(move || timers.run())
            .ok()
            .map(|_| timers)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn sleeps_end_at_their_deadlines_in_order() {
        let start = Instant::now();
        let waits = [7u64, 1, 4, 3, 2, 9, 0];
        let ends = futures_util::future::join_all(waits.iter().map(|&ms| async move {
            sleep(Duration::from_millis(ms)).await;
            start.elapsed()
        }))
        .await;
        for (ms, end) in waits.iter().zip(&ends) {
            assert!(
                *end >= Duration::from_millis(*ms),
                "a {ms} ms sleep ended after {end:?}"
            );
        }
        let mut by_wait: Vec<_> = waits.iter().zip(&ends).collect();
        by_wait.sort_by_key(|(ms, _)| **ms);
        // Sleeps woken together (a busy machine can run late by more than the 1 ms between
        // two deadlines) are polled in the order `join_all` holds them, microseconds apart.
        let together = Duration::from_micros(500);
        assert!(
            by_wait.windows(2).all(|w| *w[0].1 <= *w[1].1 + together),
            "sleeps ended out of order: {by_wait:?}"
        );
    }
}
