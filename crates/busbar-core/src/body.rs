//! The lazy message body.
//!
//! A [`Body`] starts as a stream (the client's request or the back end's response) and stays one
//! until a step asks for content. `read_chunk` pulls one more frame and keeps it, so a streaming
//! check can look at the first bytes and the body still forwards "what was read + the rest",
//! byte for byte and with its original exact length (a changed length would make the HTTP layer
//! switch to chunked encoding or, worse, send a stale Content-Length).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use crate::BoxError;

/// A streaming body source (a listener's request body, a back end's answer, or a wrapper
/// around one), behind the one allocation of its [`Streamed`] state.
trait Source: Send {
    fn poll_source(&mut self, cx: &mut Context<'_>)
        -> Poll<Option<Result<Frame<Bytes>, BoxError>>>;
}

/// An `http_body::Body` as a [`Source`]: its error boxed.
struct Adapt<B>(B);

impl<B> Source for Adapt<B>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send,
    B::Error: Into<BoxError>,
{
    fn poll_source(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.0)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }
}

/// Which side of the exchange a streamed body comes from; decides who is blamed when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The client's request body.
    Client,
    /// A back end's response body.
    Upstream,
}

/// Why reading a body failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The peer reset, timed out or sent malformed framing while the body was read.
    #[error("reading the {} body failed: {source}", origin_name(*origin))]
    Read {
        /// Which side sent the body.
        origin: Origin,
        /// The transport error.
        source: BoxError,
    },
    /// A check of the streamed rest of the body (see [`TailCheck`]) refused it.
    #[error("{0}")]
    Rejected(String),
    /// A step needed the whole body, and it is larger than the configured `max_body`.
    #[error("{} larger than max_body ({limit} bytes)", too_large_name(*origin))]
    TooLarge {
        /// The configured limit, in bytes.
        limit: u64,
        /// Which side sent the body; `None` for a body a step built in memory, which neither
        /// side sent as it is.
        origin: Option<Origin>,
    },
    /// Holding more of this request body would take the request bodies held in memory at
    /// once past the process's budget (`max_buffered_bodies`).
    #[error("the request bodies held in memory reached max_buffered_bodies ({limit} bytes)")]
    OverBudget {
        /// The budget, in bytes.
        limit: u64,
    },
}

/// The default of `max_buffered_bodies`: 1 GiB.
pub const DEFAULT_BODY_BUDGET: u64 = 1 << 30;

/// A process-wide bound on the bytes of request bodies held in memory because a step needs
/// them whole or in part (a JSON or XPath route, `jq`, `xslt`, `sql`, a process service).
///
/// `max_body` bounds one request; nothing else bounded their sum, so slow clients each
/// sending just under `max_body` could hold any amount of memory. Bodies that only stream
/// through are never counted: a body is charged as a step reads it ([`Body::read_chunk`]),
/// one relaxed atomic add per chunk, and its [`Charge`] gives the bytes back when the body
/// is dropped, whichever way the request ended.
#[derive(Debug)]
pub struct BodyBudget {
    limit: AtomicU64,
    held: AtomicU64,
    refused: AtomicU64,
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(DEFAULT_BODY_BUDGET)
    }
}

impl BodyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            limit: AtomicU64::new(limit),
            held: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Changes the limit (a reload); bodies already held keep their bytes.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Relaxed);
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit.load(Relaxed)
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }

    /// Request bodies refused so far because the budget was spent.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Takes `n` bytes, or none when that would pass the limit. Concurrent takers near the
    /// limit may both be refused where one would have fitted: the bound is never passed.
    fn take(&self, n: u64) -> bool {
        let before = self.held.fetch_add(n, Relaxed);
        if before.saturating_add(n) <= self.limit.load(Relaxed) {
            return true;
        }
        self.held.fetch_sub(n, Relaxed);
        self.refused.fetch_add(1, Relaxed);
        false
    }
}

/// The bytes one body holds against a [`BodyBudget`], given back when it is dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<BodyBudget>,
    bytes: u64,
}

impl Charge {
    /// Nothing held yet against `budget`.
    pub fn new(budget: Arc<BodyBudget>) -> Self {
        Self { budget, bytes: 0 }
    }

    /// Holds `n` more bytes; refused (holding nothing more) when the budget is spent.
    pub fn add(&mut self, n: u64) -> Result<(), BodyError> {
        if !self.budget.take(n) {
            return Err(BodyError::OverBudget {
                limit: self.budget.limit(),
            });
        }
        self.bytes += n;
        Ok(())
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Relaxed);
    }
}

/// How much of a body a step may hold: its own `max_body`, and the process's budget that
/// a request body's bytes are charged to (`None`: not charged, as in tests or for a back
/// end's answer read with a plain number).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit<'a> {
    /// Largest body, in bytes (413 past it).
    pub max: u64,
    /// The budget request bodies are charged to.
    pub budget: Option<&'a Arc<BodyBudget>>,
}

impl From<u64> for BodyLimit<'static> {
    fn from(max: u64) -> Self {
        Self { max, budget: None }
    }
}

fn origin_name(origin: Origin) -> &'static str {
    match origin {
        Origin::Client => "request",
        Origin::Upstream => "response",
    }
}

fn too_large_name(origin: Option<Origin>) -> &'static str {
    match origin {
        Some(Origin::Client) => "request body",
        Some(Origin::Upstream) => "response body",
        None => "body",
    }
}

/// Checks the part of a body that streams through after a step decided early on its prefix
/// (for example that the rest of an XML document is well-formed). An error aborts the body
/// wherever it is going, so the next hop never sees it complete.
pub trait TailCheck: Send {
    /// Checks the next chunk.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String>;
    /// Checks the end of the body.
    fn finish(&mut self) -> Result<(), String>;
}

/// A message body: empty, fully buffered, or a stream with an optional already-read prefix.
pub struct Body {
    kind: Kind,
}

#[derive(Default)]
enum Kind {
    #[default]
    Empty,
    Full(Option<Bytes>),
    Stream(Box<Streamed>),
}

/// A stream's state with its source last, so both live in one allocation.
struct Streamed<S: ?Sized + Source = dyn Source> {
    /// Frames already read by a step, not yet handed on; replayed first.
    read: VecDeque<Bytes>,
    /// Bytes in `read` in total (what a step has seen so far).
    read_len: u64,
    /// Bytes already handed on when the body is polled as an `http_body::Body`.
    emitted: u64,
    /// The exact length announced by the peer (Content-Length), if any.
    exact_len: Option<u64>,
    origin: Origin,
    finished: bool,
    check: Option<Box<dyn TailCheck>>,
    /// What `read` holds against the process's budget (a request body a step read).
    charge: Option<Charge>,
    source: S,
}

impl Streamed {
    /// Runs the tail check on data pulled from the source, and at its end.
    fn checked(&mut self, data: Option<&[u8]>) -> Result<(), BodyError> {
        let Some(check) = self.check.as_mut() else {
            return Ok(());
        };
        let result = match data {
            Some(d) => check.feed(d),
            None => check.finish(),
        };
        result.map_err(|msg| {
            self.check = None;
            BodyError::Rejected(msg)
        })
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Body::Empty"),
            Kind::Full(b) => write!(f, "Body::Full({} bytes)", b.as_ref().map_or(0, Bytes::len)),
            Kind::Stream(s) => write!(
                f,
                "Body::Stream(read {} bytes, exact {:?}, {:?})",
                s.read_len, s.exact_len, s.origin
            ),
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::empty()
    }
}

impl Body {
    /// An empty body.
    pub fn empty() -> Self {
        Self { kind: Kind::Empty }
    }

    /// A fully buffered body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Self::empty();
        }
        Self {
            kind: Kind::Full(Some(bytes)),
        }
    }

    /// A streamed body from `origin`, `exact_len` being its Content-Length when known.
    /// A source that is not `Unpin` goes in as `Box::pin(source)`.
    pub fn stream<B>(source: B, exact_len: Option<u64>, origin: Origin) -> Self
    where
        B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if exact_len == Some(0) {
            return Self::empty();
        }
        let streamed: Box<Streamed> = Box::new(Streamed {
            read: VecDeque::new(),
            read_len: 0,
            emitted: 0,
            exact_len,
            origin,
            finished: false,
            check: None,
            charge: None,
            source: Adapt(source),
        });
        Self {
            kind: Kind::Stream(streamed),
        }
    }

    /// True when the whole body is in memory (no stream left to read).
    pub fn is_buffered(&self) -> bool {
        match &self.kind {
            Kind::Empty | Kind::Full(_) => true,
            Kind::Stream(s) => s.finished,
        }
    }

    /// The exact length in bytes, when it is known without reading (Content-Length or buffered).
    pub fn exact_len(&self) -> Option<u64> {
        match &self.kind {
            Kind::Empty => Some(0),
            Kind::Full(b) => Some(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) if s.finished => Some(s.read_len),
            Kind::Stream(s) => s.exact_len,
        }
    }

    /// The bytes read so far by steps (the whole body when buffered), as separate chunks.
    pub fn read_chunks(&self) -> impl Iterator<Item = &Bytes> {
        let (full, read) = match &self.kind {
            Kind::Empty => (None, None),
            Kind::Full(b) => (b.as_ref(), None),
            Kind::Stream(s) => (None, Some(s.read.iter())),
        };
        full.into_iter().chain(read.into_iter().flatten())
    }

    /// Reads one more chunk from the stream and keeps it for forwarding.
    ///
    /// Returns `Ok(None)` at the end of the body; `limit` caps how much may be held in memory,
    /// and a request body's chunks are charged to its budget.
    pub async fn read_chunk<'a>(
        &mut self,
        limit: impl Into<BodyLimit<'a>>,
    ) -> Result<Option<Bytes>, BodyError> {
        let limit = limit.into();
        let Kind::Stream(s) = &mut self.kind else {
            return Ok(None);
        };
        if s.finished {
            return Ok(None);
        }
        loop {
            let frame = std::future::poll_fn(|cx| s.source.poll_source(cx)).await;
            match frame {
                None => {
                    s.finished = true;
                    s.checked(None)?;
                    return Ok(None);
                }
                Some(Err(source)) => {
                    return Err(BodyError::Read {
                        origin: s.origin,
                        source,
                    })
                }
                Some(Ok(frame)) => {
                    // Trailers are not forwarded by busbar; only data counts.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    s.checked(Some(&data))?;
                    s.read_len += data.len() as u64;
                    if s.read_len > limit.max {
                        return Err(BodyError::TooLarge {
                            limit: limit.max,
                            origin: Some(s.origin),
                        });
                    }
                    if let (Origin::Client, Some(budget)) = (s.origin, limit.budget) {
                        s.charge
                            .get_or_insert_with(|| Charge::new(budget.clone()))
                            .add(data.len() as u64)?;
                    }
                    s.read.push_back(data.clone());
                    return Ok(Some(data));
                }
            }
        }
    }

    /// Attaches a check of the part of the body not read yet. When the body is already
    /// complete, the check's end runs now and its verdict is returned.
    pub fn set_tail_check(&mut self, mut check: Box<dyn TailCheck>) -> Result<(), BodyError> {
        match &mut self.kind {
            Kind::Stream(s) if !s.finished => {
                s.check = Some(check);
                Ok(())
            }
            _ => check.finish().map_err(BodyError::Rejected),
        }
    }

    /// True when a tail check is attached.
    pub fn has_tail_check(&self) -> bool {
        matches!(&self.kind, Kind::Stream(s) if s.check.is_some())
    }

    /// Reads the whole body into memory (at most `limit` bytes) and returns it.
    ///
    /// The body stays readable afterwards: it becomes a buffered body with the same bytes (a
    /// request body charged to a budget keeps its charge until it is dropped).
    pub async fn bytes<'a>(&mut self, limit: impl Into<BodyLimit<'a>>) -> Result<Bytes, BodyError> {
        let limit = limit.into();
        if let Some(len) = self.exact_len() {
            if len > limit.max {
                let origin = match &self.kind {
                    Kind::Stream(s) => Some(s.origin),
                    Kind::Empty | Kind::Full(_) => None,
                };
                return Err(BodyError::TooLarge {
                    limit: limit.max,
                    origin,
                });
            }
        }
        while self.read_chunk(limit).await?.is_some() {}
        let all = match std::mem::take(&mut self.kind) {
            Kind::Empty => Bytes::new(),
            Kind::Full(b) => b.unwrap_or_default(),
            Kind::Stream(mut s) => {
                let all = if s.read.len() == 1 {
                    s.read.pop_front().unwrap_or_default()
                } else {
                    let mut buf = BytesMut::with_capacity(s.read_len as usize);
                    for chunk in &s.read {
                        buf.extend_from_slice(chunk);
                    }
                    buf.freeze()
                };
                if s.charge.is_some() {
                    // A finished stream of one chunk is a buffered body that keeps its charge.
                    s.read.clear();
                    s.read.push_back(all.clone());
                    self.kind = Kind::Stream(s);
                    return Ok(all);
                }
                all
            }
        };
        *self = Self::full(all.clone());
        Ok(all)
    }

    /// Takes what the body holds against the process's budget, for whoever keeps its bytes
    /// after it is gone (a call's replay buffer).
    pub fn take_charge(&mut self) -> Option<Charge> {
        match &mut self.kind {
            Kind::Stream(s) => s.charge.take(),
            _ => None,
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(s) => {
                if let Some(chunk) = s.read.pop_front() {
                    s.emitted += chunk.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                if s.finished {
                    return Poll::Ready(None);
                }
                loop {
                    match s.source.poll_source(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(None) => {
                            s.finished = true;
                            if let Err(e) = s.checked(None) {
                                return Poll::Ready(Some(Err(e.into())));
                            }
                            // A peer that announced more bytes than it sent must not produce
                            // a body the next hop could take as complete.
                            if let Some(exact) = s.exact_len {
                                if s.emitted != exact {
                                    return Poll::Ready(Some(Err(format!(
                                        "{} body ended after {} of {} bytes",
                                        origin_name(s.origin),
                                        s.emitted,
                                        exact
                                    )
                                    .into())));
                                }
                            }
                            return Poll::Ready(None);
                        }
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                        Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                            Ok(data) => {
                                if let Err(e) = s.checked(Some(&data)) {
                                    return Poll::Ready(Some(Err(e.into())));
                                }
                                s.emitted += data.len() as u64;
                                return Poll::Ready(Some(Ok(Frame::data(data))));
                            }
                            // Trailers are dropped: HTTP/1.1 proxies may drop them, and
                            // forwarding them would need TE: trailers negotiation.
                            Err(_) => continue,
                        },
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(b) => b.is_none(),
            Kind::Stream(s) => s.read.is_empty() && (s.finished || s.exact_len == Some(s.emitted)),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(s) => {
                if s.finished {
                    SizeHint::with_exact(s.read_len - s.emitted)
                } else if let Some(exact) = s.exact_len {
                    SizeHint::with_exact(exact.saturating_sub(s.emitted))
                } else {
                    let mut hint = SizeHint::new();
                    hint.set_lower(s.read_len - s.emitted);
                    hint
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that yields the given chunks, one per poll.
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
    }

    fn chunks(parts: &[&'static [u8]]) -> Chunks {
        Chunks(parts.iter().map(|p| Bytes::from_static(p)).collect())
    }

    #[tokio::test]
    async fn peeked_prefix_is_forwarded_before_the_rest_with_exact_length() {
        let mut body = Body::stream(chunks(&[b"ab", b"cd", b"ef"]), Some(6), Origin::Client);
        let first = body.read_chunk(100).await.expect("read").expect("chunk");
        assert_eq!(&first[..], b"ab");
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(6));
        let all = body.collect().await.expect("collect").to_bytes();
        assert_eq!(&all[..], b"abcdef");
    }

    #[tokio::test]
    async fn whole_body_is_buffered_and_still_readable() {
        let mut body = Body::stream(chunks(&[b"ab", b"cd"]), None, Origin::Client);
        assert_eq!(&body.bytes(10).await.expect("bytes")[..], b"abcd");
        assert_eq!(body.exact_len(), Some(4));
        let all = body.collect().await.expect("collect").to_bytes();
        assert_eq!(&all[..], b"abcd");
    }

    #[tokio::test]
    async fn buffering_more_than_the_limit_is_refused() {
        let mut body = Body::stream(chunks(&[b"abc", b"def"]), None, Origin::Client);
        let err = body.bytes(4).await.expect_err("too large");
        assert!(matches!(
            err,
            BodyError::TooLarge {
                limit: 4,
                origin: Some(Origin::Client)
            }
        ));
    }

    #[tokio::test]
    async fn a_too_large_body_names_the_side_that_sent_it() {
        // Found out while reading, and at once from the announced length.
        for exact in [None, Some(6)] {
            let mut body = Body::stream(chunks(&[b"abc", b"def"]), exact, Origin::Upstream);
            let err = body.bytes(4).await.expect_err("too large");
            assert!(
                matches!(
                    err,
                    BodyError::TooLarge {
                        limit: 4,
                        origin: Some(Origin::Upstream)
                    }
                ),
                "{exact:?}: {err:?}"
            );
            assert_eq!(
                err.to_string(),
                "response body larger than max_body (4 bytes)"
            );
        }
        let mut built = Body::full(&b"abcdef"[..]);
        let err = built.bytes(4).await.expect_err("too large");
        assert!(matches!(
            err,
            BodyError::TooLarge {
                limit: 4,
                origin: None
            }
        ));
    }

    #[tokio::test]
    async fn request_bodies_hold_their_bytes_against_the_budget_until_dropped() {
        let budget = Arc::new(BodyBudget::new(10));
        let limit = BodyLimit {
            max: 100,
            budget: Some(&budget),
        };
        let mut a = Body::stream(chunks(&[b"abcd", b"efgh"]), None, Origin::Client);
        assert_eq!(&a.bytes(limit).await.expect("fits")[..], b"abcdefgh");
        assert_eq!(budget.held(), 8, "buffered, it keeps its charge");
        // The next body passes the budget on its second chunk: refused and counted; what it
        // held is given back when it is dropped, as on any error or cancellation.
        let mut b = Body::stream(chunks(&[b"ab", b"cd"]), None, Origin::Client);
        let err = b.bytes(limit).await.expect_err("over the budget");
        assert!(matches!(err, BodyError::OverBudget { limit: 10 }), "{err}");
        assert_eq!((budget.held(), budget.refused()), (10, 1));
        drop(b);
        assert_eq!(budget.held(), 8);
        // A kept charge moves with the bytes (a replay buffer), and ends with them.
        let charge = a.take_charge().expect("charged");
        assert_eq!(charge.bytes(), 8);
        let all = a.collect().await.expect("collect").to_bytes();
        assert_eq!(&all[..], b"abcdefgh", "still forwarded whole");
        assert_eq!(budget.held(), 8);
        drop(charge);
        assert_eq!(budget.held(), 0);
        // Neither a back end's answer nor a body read without a budget is charged; nor a
        // body that only streams through.
        let mut up = Body::stream(chunks(&[b"xyz"]), None, Origin::Upstream);
        up.bytes(limit).await.expect("answer");
        let mut plain = Body::stream(chunks(&[b"xyz"]), None, Origin::Client);
        plain.bytes(100).await.expect("plain");
        let through = Body::stream(chunks(&[b"xyz"]), None, Origin::Client);
        through.collect().await.expect("streamed");
        assert_eq!((budget.held(), budget.refused()), (0, 1));
    }

    #[tokio::test]
    async fn a_short_stream_under_a_content_length_ends_in_an_error() {
        let body = Body::stream(chunks(&[b"abc"]), Some(10), Origin::Upstream);
        assert!(body.collect().await.is_err());
    }
}
