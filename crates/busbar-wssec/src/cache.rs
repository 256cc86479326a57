//! Small bounded caches shared by every worker: replay detection and unwrapped session keys.
//!
//! Each is a map plus a queue behind one mutex (the replay cache's ordered by expiry, the key
//! cache's by insertion); entries are a few dozen bytes and the lock is held for a lookup or an
//! insert, never across I/O.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Remembers message fingerprints until they expire; a second sighting is a replay. One
/// cache may serve several verifiers ([`crate::Verifier::with_replay_cache`]).
#[derive(Debug)]
pub struct ReplayCache {
    capacity: AtomicUsize,
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Half of each fingerprint is kept: 128 bits, over content a trusted signer signed, with
    /// no collision to fear, at half the memory.
    expiry: HashMap<Fingerprint, i64>,
    /// The entries by expiry, soonest first.
    order: BinaryHeap<Reverse<(i64, Fingerprint)>>,
    /// When a full cache was last reported.
    warned: Option<std::time::Instant>,
}

type Fingerprint = [u8; 16];

/// How often a cache that stays full is reported.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl ReplayCache {
    /// A cache of at most `capacity` live entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: AtomicUsize::new(capacity.max(1)),
            inner: Mutex::new(Seen::default()),
        }
    }

    /// Raises the capacity to `capacity` if it is lower (a shared cache holds what its
    /// largest user asks for).
    pub fn ensure_capacity(&self, capacity: usize) {
        self.capacity.fetch_max(capacity, Ordering::Relaxed);
    }

    /// The most live entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Records `key` as seen until `expires_ms`; false when it was already seen and is still
    /// live (a replay).
    pub fn insert(&self, key: [u8; 32], now_ms: i64, expires_ms: i64) -> bool {
        let mut half = [0u8; 16];
        half.copy_from_slice(&key[..16]);
        let key = half;
        let mut seen = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        while seen
            .order
            .peek()
            .is_some_and(|Reverse((exp, _))| *exp <= now_ms)
        {
            seen.drop_soonest();
        }
        if seen.expiry.get(&key).is_some_and(|&exp| exp > now_ms) {
            return false;
        }
        if seen.order.len() >= self.capacity() {
            // Full of entries still live: the one nearest its expiry goes, and its message could
            // be replayed until then. The operator must hear of it.
            let now = std::time::Instant::now();
            if seen
                .warned
                .is_none_or(|at| now.duration_since(at) >= WARN_EVERY)
            {
                seen.warned = Some(now);
                tracing::warn!(
                    size = self.capacity(),
                    "the replay cache is full of messages still fresh: those nearest their \
                     expiry are forgotten and could be replayed until then; raise replay_cache.size to at least the messages \
                     accepted per second times (max_age + 2 × max_skew)"
                );
            }
        }
        while seen.order.len() >= self.capacity() {
            seen.drop_soonest();
        }
        seen.expiry.insert(key, expires_ms);
        seen.order.push(Reverse((expires_ms, key)));
        true
    }
}

impl Seen {
    fn drop_soonest(&mut self) {
        if let Some(Reverse((exp, k))) = self.order.pop() {
            // A key re-recorded later has a newer entry; only its own entry removes it.
            if self.expiry.get(&k) == Some(&exp) {
                self.expiry.remove(&k);
            }
        }
    }
}

/// Unwrapped session keys by the SHA-256 of their wrapped form.
#[derive(Debug)]
pub struct KeyCache {
    capacity: usize,
    inner: Mutex<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    map: HashMap<[u8; 32], Vec<u8>>,
    order: VecDeque<[u8; 32]>,
}

impl KeyCache {
    /// A cache of at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Keys::default()),
        }
    }

    /// The key unwrapped earlier from a wrapped key with this fingerprint.
    pub fn get(&self, fingerprint: &[u8; 32]) -> Option<Vec<u8>> {
        let keys = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        keys.map.get(fingerprint).cloned()
    }

    /// Remembers a key.
    pub fn put(&self, fingerprint: [u8; 32], key: Vec<u8>) {
        let mut keys = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if keys.map.insert(fingerprint, key).is_none() {
            keys.order.push_back(fingerprint);
        }
        while keys.order.len() > self.capacity {
            if let Some(old) = keys.order.pop_front() {
                keys.map.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_sighting_is_a_replay_until_it_expires() {
        let c = ReplayCache::new(10);
        assert!(c.insert([1; 32], 0, 100));
        assert!(!c.insert([1; 32], 50, 150));
        assert!(c.insert([1; 32], 101, 200));
    }

    #[test]
    fn a_full_replay_cache_forgets_the_entry_nearest_its_expiry() {
        let c = ReplayCache::new(2);
        assert!(c.insert([1; 32], 0, 3000));
        assert!(c.insert([2; 32], 0, 1000));
        assert!(c.insert([3; 32], 0, 2000));
        // [2] expired soonest and went; [1], inserted first, is still a replay.
        assert!(!c.insert([1; 32], 0, 3000));
        assert!(!c.insert([3; 32], 0, 2000));
        assert!(c.insert([2; 32], 0, 1000));
    }

    #[test]
    fn expired_entries_go_before_live_ones_whatever_their_order() {
        let c = ReplayCache::new(3);
        assert!(c.insert([1; 32], 0, 5000));
        assert!(c.insert([2; 32], 0, 100));
        assert!(c.insert([3; 32], 0, 200));
        // At 300 [2] and [3] have expired though [1], inserted before them, has not: the two
        // new entries take their room and [1] stays a replay.
        assert!(c.insert([4; 32], 300, 6000));
        assert!(c.insert([5; 32], 300, 6000));
        assert!(!c.insert([1; 32], 300, 5000));
        assert!(!c.insert([4; 32], 300, 6000));
    }

    #[test]
    fn key_cache_is_bounded() {
        let c = KeyCache::new(2);
        c.put([1; 32], vec![1]);
        c.put([2; 32], vec![2]);
        c.put([3; 32], vec![3]);
        assert_eq!(c.get(&[1; 32]), None);
        assert_eq!(c.get(&[3; 32]), Some(vec![3]));
    }
}
