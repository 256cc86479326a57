//! What a retry needs: the request body kept as it goes out ([`Replay`]), and a budget that
//! caps retries to a share of the requests ([`RetryBudget`]).
//!
//! A streamed request body cannot be read twice, so the body each attempt sends is a [`Tee`]:
//! it hands on the bytes already kept, then pulls the rest from the client, keeping up to
//! `replay_buffer` bytes of it. When an attempt fails, its tee is dropped (by hyper's
//! connection task, or by us when the request was never sent) and gives the unread rest back,
//! so the next attempt sends "kept bytes + rest" byte for byte. Once more than the limit went
//! out, the kept bytes are incomplete and the request can no longer be sent again (like
//! tower's `clone_request` returning `None`, decided as the body streams).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use busbar_core::body::{Charge, Origin};
use busbar_core::{Body, BoxError};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::Notify;

/// How long a retry waits for a failed attempt to give the request body back (the aborted
/// connection task drops it on its next turn of the event loop, so this is normally at once).
const GIVE_BACK_WAIT: Duration = Duration::from_secs(1);

/// A request body that can be sent again, within its limit.
#[derive(Debug, Clone)]
pub struct Replay {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    returned: Notify,
    limit: u64,
    exact_len: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// The bytes that went out so far (all of them unless `overflow`).
    kept: Vec<Bytes>,
    kept_len: u64,
    /// More than `limit` bytes went out: `kept` was cleared and cannot be replayed.
    overflow: bool,
    /// The source reached its end: `kept` is the whole body (unless `overflow`).
    ended: bool,
    /// The part of the source not read yet, given back by a dropped tee.
    rest: Option<Body>,
    /// What a body a step read holds against the process's budget, kept with its bytes.
    _charge: Option<Charge>,
}

/// Placed in a request's extensions so the client can tell, when an attempt fails after its
/// body started to go out, whether the body could still be sent again.
#[derive(Debug, Clone)]
pub struct ReplayProbe(Replay);

impl ReplayProbe {
    /// True while the kept bytes are complete.
    pub fn replayable(&self) -> bool {
        !self.0.lock().overflow
    }

    /// The body for another attempt ([`Replay::body`]).
    pub async fn body(&self) -> Result<Body, String> {
        self.0.body().await
    }
}

impl Replay {
    /// Wraps `body`, keeping up to `limit` bytes of it as it streams out. A body already in
    /// memory is kept whole whatever its size (it costs nothing more).
    pub fn new(mut body: Body, limit: u64) -> Self {
        let exact_len = body.exact_len();
        let mut state = State::default();
        if body.is_buffered() {
            state._charge = body.take_charge();
            state.kept = body.read_chunks().cloned().collect();
            state.kept_len = state.kept.iter().map(|b| b.len() as u64).sum();
            state.ended = true;
        } else {
            state.rest = Some(body);
        }
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                returned: Notify::new(),
                limit,
                exact_len,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the state is whole.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The probe to put in a request's extensions.
    pub fn probe(&self) -> ReplayProbe {
        ReplayProbe(self.clone())
    }

    /// Why the body can no longer be sent again, if so.
    pub fn lost(&self) -> Option<String> {
        self.lock().overflow.then(|| self.too_large())
    }

    fn too_large(&self) -> String {
        format!(
            "the request body is larger than replay_buffer ({} bytes) and part of it already went to the failed attempt",
            self.shared.limit
        )
    }

    /// The body for the next attempt: the kept bytes, then the rest of the source.
    pub async fn body(&self) -> Result<Body, String> {
        let deadline = Instant::now() + GIVE_BACK_WAIT;
        loop {
            let returned = self.shared.returned.notified();
            {
                let mut state = self.lock();
                if state.overflow {
                    return Err(self.too_large());
                }
                if state.ended {
                    let chunks: VecDeque<Bytes> = state.kept.iter().cloned().collect();
                    let len = state.kept_len;
                    drop(state);
                    return Ok(Body::stream(Chunks(chunks), Some(len), Origin::Client));
                }
                if let Some(rest) = state.rest.take() {
                    let pos = state.kept.len();
                    drop(state);
                    let tee = Tee {
                        replay: self.clone(),
                        pos: 0,
                        skip_to: pos,
                        source: Some(rest),
                    };
                    return Ok(Body::stream(tee, self.shared.exact_len, Origin::Client));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, returned).await.is_err() {
                return Err("the request body is still held by the failed attempt".into());
            }
        }
    }
}

/// A fully kept body, replayed chunk by chunk.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|b| b.len() as u64).sum())
    }
}

/// The body one attempt sends: the kept chunks first, then the source, keeping what it reads.
struct Tee {
    replay: Replay,
    /// Kept chunks handed on so far.
    pos: usize,
    /// Kept chunks that existed when this tee started (replayed before the source).
    skip_to: usize,
    source: Option<Body>,
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.pos < this.skip_to {
            let chunk = this.replay.lock().kept.get(this.pos).cloned();
            this.pos += 1;
            if let Some(chunk) = chunk {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
        }
        let Some(source) = this.source.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(source).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let limit = this.replay.shared.limit;
                    let mut state = this.replay.lock();
                    if !state.overflow {
                        if state.kept_len + data.len() as u64 <= limit {
                            state.kept_len += data.len() as u64;
                            state.kept.push(data.clone());
                        } else {
                            state.overflow = true;
                            state.kept = Vec::new();
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.source = None;
                this.replay.lock().ended = true;
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pos >= self.skip_to && self.source.as_ref().is_none_or(|s| s.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // The outer Body carries the exact length; this is only a lower bound.
        SizeHint::new()
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        if let Some(rest) = self.source.take() {
            self.replay.lock().rest = Some(rest);
            self.replay.shared.returned.notify_one();
        }
    }
}

/// Counts in a sliding window: ten slots of a tenth of the window each.
#[derive(Debug)]
pub struct Window {
    slots: [Slot; 10],
    slot_ms: u64,
    epoch: Instant,
}

#[derive(Debug, Default)]
struct Slot {
    id: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
}

impl Window {
    /// A window of `length`.
    pub fn new(length: Duration) -> Self {
        Self {
            slots: Default::default(),
            slot_ms: (length.as_millis() as u64 / 10).max(1),
            epoch: Instant::now(),
        }
    }

    fn now_id(&self) -> u64 {
        // Ids start at 1 so that a fresh slot (id 0) never counts as current.
        self.epoch.elapsed().as_millis() as u64 / self.slot_ms + 1
    }

    /// Adds `a` and `b` to the current slot. Two threads resetting the same stale slot at
    /// once may lose a count: a budget and a breaker tolerate that.
    pub fn add(&self, a: u64, b: u64) {
        let id = self.now_id();
        let slot = &self.slots[(id % 10) as usize];
        let seen = slot.id.load(Relaxed);
        if seen != id && slot.id.compare_exchange(seen, id, Relaxed, Relaxed).is_ok() {
            slot.a.store(0, Relaxed);
            slot.b.store(0, Relaxed);
        }
        slot.a.fetch_add(a, Relaxed);
        slot.b.fetch_add(b, Relaxed);
    }

    /// The sums over the window.
    pub fn sums(&self) -> (u64, u64) {
        let id = self.now_id();
        self.slots
            .iter()
            .filter(|s| {
                let sid = s.id.load(Relaxed);
                sid + 10 > id && sid <= id
            })
            .fold((0, 0), |(a, b), s| {
                (a + s.a.load(Relaxed), b + s.b.load(Relaxed))
            })
    }
}

/// Retries allowed: `min_retries` plus `ratio` of the requests in the window.
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_retries: u64,
    /// (requests, retries) per slot.
    window: Window,
}

impl RetryBudget {
    /// A budget of `min_retries + ratio × requests` per `window`.
    pub fn new(ratio: f64, min_retries: u32, window: Duration) -> Self {
        Self {
            ratio,
            min_retries: u64::from(min_retries),
            window: Window::new(window),
        }
    }

    /// Counts one request.
    pub fn request(&self) {
        self.window.add(1, 0);
    }

    /// Takes one retry from the budget, if there is one left.
    pub fn try_retry(&self) -> bool {
        let (requests, retries) = self.window.sums();
        let allowed = self.min_retries as f64 + self.ratio * requests as f64;
        if (retries as f64) < allowed {
            self.window.add(0, 1);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    struct Parts(VecDeque<Bytes>);

    impl http_body::Body for Parts {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn streamed(parts: &[&'static [u8]]) -> Body {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        Body::stream(
            Parts(parts.iter().map(|p| Bytes::from_static(p)).collect()),
            Some(len),
            Origin::Client,
        )
    }

    async fn read_some(body: &mut Body, frames: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..frames {
            if let Some(Ok(f)) = body.frame().await {
                out.extend_from_slice(f.data_ref().map_or(&[][..], |d| &d[..]));
            }
        }
        out
    }

    #[tokio::test]
    async fn a_partly_sent_body_is_replayed_whole_within_the_limit() {
        let replay = Replay::new(streamed(&[b"ab", b"cd", b"ef"]), 100);
        let mut first = replay.body().await.expect("first");
        assert_eq!(read_some(&mut first, 2).await, b"abcd");
        drop(first);
        let second = replay.body().await.expect("second");
        assert_eq!(second.exact_len(), Some(6));
        let all = second.collect().await.expect("collect").to_bytes();
        assert_eq!(&all[..], b"abcdef");
        let third = replay.body().await.expect("third");
        let all = third.collect().await.expect("collect").to_bytes();
        assert_eq!(&all[..], b"abcdef");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_cannot_be_replayed_and_says_why() {
        let replay = Replay::new(streamed(&[b"abc", b"def"]), 4);
        let first = replay.body().await.expect("first");
        let _ = first.collect().await.expect("collect");
        assert!(!replay.probe().replayable());
        let err = replay.body().await.expect_err("too large");
        assert!(err.contains("replay_buffer (4 bytes)"), "{err}");
    }

    #[tokio::test]
    async fn an_unsent_body_of_any_size_can_be_sent_again() {
        let replay = Replay::new(streamed(&[b"abc", b"def"]), 1);
        drop(replay.body().await.expect("first"));
        let all = replay.body().await.expect("second").collect().await;
        assert_eq!(&all.expect("collect").to_bytes()[..], b"abcdef");
    }

    #[test]
    fn the_budget_allows_the_minimum_then_the_ratio() {
        let b = RetryBudget::new(0.2, 2, Duration::from_secs(60));
        assert!(b.try_retry());
        assert!(b.try_retry());
        assert!(!b.try_retry());
        for _ in 0..10 {
            b.request();
        }
        assert!(b.try_retry());
        assert!(b.try_retry());
        assert!(!b.try_retry());
    }
}
