//! Spreading requests over an endpoint's URLs: round robin, weighted (a smooth interleaved
//! schedule computed once, as nginx does), or least pending requests.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// How the next URL is chosen.
#[derive(Debug)]
pub struct Balancer {
    /// URL indexes in the order they take turns (each URL `weight` times per round).
    schedule: Vec<usize>,
    least_pending: bool,
    next: AtomicUsize,
}

impl Balancer {
    /// Round robin over `n` URLs.
    pub fn round_robin(n: usize) -> Self {
        Self::weighted(&vec![1; n])
    }

    /// Turns in proportion to `weights`, interleaved (weights 5, 1, 1 give a a b a c a a).
    pub fn weighted(weights: &[u32]) -> Self {
        let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
        let mut current = vec![0i64; weights.len()];
        let mut schedule = Vec::with_capacity(total.max(1) as usize);
        for _ in 0..total {
            let mut best = 0;
            for (i, w) in weights.iter().enumerate() {
                current[i] += i64::from(*w);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            schedule.push(best);
        }
        if schedule.is_empty() {
            schedule.push(0);
        }
        Self {
            schedule,
            least_pending: false,
            next: AtomicUsize::new(0),
        }
    }

    /// The URL with the fewest requests in progress; ties go round robin.
    pub fn least_pending(n: usize) -> Self {
        Self {
            least_pending: true,
            ..Self::round_robin(n)
        }
    }

    /// The URL for a request among `n`, skipping those `usable` refuses; `pending` tells the
    /// requests in progress per URL. `None` when no URL is usable.
    pub fn pick(
        &self,
        n: usize,
        usable: impl Fn(usize) -> bool,
        pending: impl Fn(usize) -> i64,
    ) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Relaxed);
        if self.least_pending {
            let start = turn % n;
            return (0..n)
                .map(|k| (start + k) % n)
                .filter(|i| usable(*i))
                .min_by_key(|i| pending(*i));
        }
        let first = self.schedule[turn % self.schedule.len()];
        (0..n).map(|k| (first + k) % n).find(|i| usable(*i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_interleave_in_proportion() {
        let b = Balancer::weighted(&[5, 1, 1]);
        let picks: Vec<usize> = (0..7)
            .map(|_| b.pick(3, |_| true, |_| 0).unwrap_or(9))
            .collect();
        assert_eq!(picks.iter().filter(|i| **i == 0).count(), 5);
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn round_robin_skips_unusable_urls() {
        let b = Balancer::round_robin(3);
        let picks: Vec<Option<usize>> = (0..4).map(|_| b.pick(3, |i| i != 1, |_| 0)).collect();
        assert_eq!(picks, vec![Some(0), Some(2), Some(2), Some(0)]);
        assert_eq!(b.pick(3, |_| false, |_| 0), None);
    }

    #[test]
    fn least_pending_takes_the_idlest() {
        let b = Balancer::least_pending(3);
        let pending = [4, 1, 2];
        for _ in 0..3 {
            assert_eq!(b.pick(3, |_| true, |i| pending[i]), Some(1));
        }
    }
}
