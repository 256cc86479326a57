//! The lazy message body.
//!
//! A [`Body`] starts as a stream (the client's request or the back end's response) and stays one
//! until a step asks for content. `read_chunk` pulls one more frame and keeps it, so a streaming
//! check can look at the first bytes and the body still forwards "what was read + the rest",
//! byte for byte and with its original exact length (a changed length would make the HTTP layer
//! switch to chunked encoding or, worse, send a stale Content-Length).

use std::collections::VecDeque;
use std::pin::Pin;
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
    /// Returns `Ok(None)` at the end of the body; `limit` caps how much may be held in memory.
    pub async fn read_chunk(&mut self, limit: u64) -> Result<Option<Bytes>, BodyError> {
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
                    if s.read_len > limit {
                        return Err(BodyError::TooLarge {
                            limit,
                            origin: Some(s.origin),
                        });
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
    /// The body stays readable afterwards: it becomes a buffered body with the same bytes.
    pub async fn bytes(&mut self, limit: u64) -> Result<Bytes, BodyError> {
        if let Some(len) = self.exact_len() {
            if len > limit {
                let origin = match &self.kind {
                    Kind::Stream(s) => Some(s.origin),
                    Kind::Empty | Kind::Full(_) => None,
                };
                return Err(BodyError::TooLarge { limit, origin });
            }
        }
        while self.read_chunk(limit).await?.is_some() {}
        let all = match std::mem::take(&mut self.kind) {
            Kind::Empty => Bytes::new(),
            Kind::Full(b) => b.unwrap_or_default(),
            Kind::Stream(mut s) => {
                if s.read.len() == 1 {
                    s.read.pop_front().unwrap_or_default()
                } else {
                    let mut buf = BytesMut::with_capacity(s.read_len as usize);
                    for chunk in &s.read {
                        buf.extend_from_slice(chunk);
                    }
                    buf.freeze()
                }
            }
        };
        *self = Self::full(all.clone());
        Ok(all)
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
    async fn a_short_stream_under_a_content_length_ends_in_an_error() {
        let body = Body::stream(chunks(&[b"abc"]), Some(10), Origin::Upstream);
        assert!(body.collect().await.is_err());
    }
}
