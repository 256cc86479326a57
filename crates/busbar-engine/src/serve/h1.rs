//! HTTP/1.1 for the listeners, in the connection's own task: read a request head, hand the
//! request to the listener's [`Handler`], write its answer, read the next head.
//!
//! Layout: [`serve`] is a connection's loop; a [`Wire`] is the socket and the bytes read from
//! it and not yet used, shared with the request's [`RequestBody`], which reads the body
//! straight from it (no task, no channel in between); [`parse_head`] reads a request head
//! and says why it refuses one ([`Refusal`], answered here: the handler never sees it).
//!
//! Requests are read strictly (RFC 9112): a head of at most `max_header_size` bytes and
//! [`MAX_FIELDS`] fields, a target of at most [`MAX_TARGET`] bytes, no obsolete line folding,
//! one `Content-Length` value, `Transfer-Encoding` only in HTTP/1.1 and only ending in
//! `chunked` (which then wins over a `Content-Length`, and the connection closes after the
//! answer). A connection carries the next request only when the current one's body was read
//! to its end and nobody asked it to close; a connection closed with a request body unread is
//! shut for writing first and read a little longer, so the client gets the answer rather than
//! a reset.

use std::future::{poll_fn, Future};
use std::io::{self, IoSlice, Write as _};
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, EXPECT, TRAILER, TRANSFER_ENCODING,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body::{Body as _, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::{ConnInfo, ConnSettings, Handler, ResponseBody};
use crate::endpoint::h1::{
    parse_decimal, poll_read_some, push_number, step_chunked, Chunk, Step, READ_FIRST,
};

/// Most header fields taken in a request head; more gets 431.
pub const MAX_FIELDS: usize = 100;
/// Longest request target; longer gets 414.
pub const MAX_TARGET: usize = 65_534;
/// Most bytes of the next requests read ahead while the current one is answered.
const READ_AHEAD: usize = 64 * 1024;
/// Most bytes taken by one read ahead into an empty buffer ([`Wire::poll_read_ahead`]).
const AHEAD_PIECE: usize = 8 * 1024;
/// How long, and how much, a connection closed with a request body unread is still read.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 << 20;
/// How long the end of a connection (a TLS close_notify, a FIN) may take to go out.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// How long a request head under way when shutdown starts may still take.
const STOP_HEAD_WAIT: Duration = Duration::from_secs(1);

/// How long an answer's head waits for the first bytes of its body when they are not there
/// yet. A back end that writes its head and its body apart, or closes right after the head,
/// does so within moments: the head then goes out with the body in one write, or an answer
/// that failed before its body is still replaced by an error answer. A body slower than this
/// gets its head sent alone.
const HEAD_HOLD: Duration = Duration::from_millis(1);

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// What an HTTP/2 connection starts with (RFC 9113 §3.4), up to where HTTP/1.1 parsing fails.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// A client connection's byte stream (TCP, or TLS over it).
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {
    /// The TCP socket under the stream.
    fn tcp(&self) -> &TcpStream;
}

impl Stream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

/// True when the client's bytes wait in the kernel (asked with one system call, since the
/// event loop may not have seen them yet); false when nothing does, or the client closed.
fn bytes_waiting(tcp: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    socket2::SockRef::from(tcp)
        .peek(&mut byte)
        .is_ok_and(|n| n > 0)
}

/// A connection's socket and what was read from it and not yet used.
struct Wire {
    io: Box<dyn Stream>,
    rbuf: BytesMut,
    read_size: usize,
    /// A [`RequestBody`] of the current request is alive.
    body_held: bool,
    /// The current request's body was read to its end.
    body_ended: bool,
    /// Bytes of `100 Continue` already written, while it is still to go out before the body
    /// is read; `None` when not asked for, sent, or too late (the answer went first).
    continue_at: Option<usize>,
}

impl Wire {
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.poll_fill_for(cx, None)
    }

    /// Reads what the socket has, with room for `left` more bytes of a body whose length is
    /// known ([`poll_read_some`]).
    fn poll_fill_for(
        &mut self,
        cx: &mut Context<'_>,
        left: Option<u64>,
    ) -> Poll<io::Result<usize>> {
        poll_read_some(&mut *self.io, &mut self.rbuf, &mut self.read_size, left, cx)
    }

    /// Writes what is left of `100 Continue`.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(at) = self.continue_at {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &CONTINUE[at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.continue_at = (at + n < CONTINUE.len()).then_some(at + n);
            if self.continue_at.is_none() {
                ready!(Pin::new(&mut self.io).poll_flush(cx))?;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Whether the client closed the connection (or it failed) while its request is being
    /// answered. Reads ahead (the next requests, kept) only when the request's body is done
    /// with; a body dropped unread is discarded, since the connection ends after the answer.
    fn poll_client_gone(&mut self, cx: &mut Context<'_>) -> bool {
        if self.body_held {
            return false;
        }
        loop {
            if self.rbuf.len() >= READ_AHEAD {
                return false;
            }
            let polled = if self.rbuf.is_empty() {
                self.poll_read_ahead(cx)
            } else {
                self.poll_fill(cx)
            };
            match polled {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return true,
                Poll::Ready(Ok(_)) => {
                    if !self.body_ended {
                        self.rbuf.clear();
                    }
                }
                Poll::Pending => return false,
            }
        }
    }

    /// Reads what the client sent after its request, while that request is answered, without
    /// making room in `rbuf` first: the request's head and body still share the buffer's
    /// allocation, so room there would be a new allocation for every request, for a read that
    /// nearly always finds nothing. What does come is copied in.
    fn poll_read_ahead(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut room = [MaybeUninit::<u8>::uninit(); AHEAD_PIECE];
        let mut buf = tokio::io::ReadBuf::uninit(&mut room);
        ready!(Pin::new(&mut *self.io).poll_read(cx, &mut buf))?;
        self.rbuf.extend_from_slice(buf.filled());
        Poll::Ready(Ok(buf.filled().len()))
    }
}

fn lock(wire: &Mutex<Wire>) -> MutexGuard<'_, Wire> {
    wire.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a request body could not be read whole.
#[derive(Debug, Clone)]
pub enum RequestBodyError {
    /// The client closed the connection (or it failed) before the end of the body.
    Closed(String),
    /// The chunked framing is broken: what was wrong.
    Malformed(&'static str),
}

impl std::fmt::Display for RequestBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestBodyError::Closed(why) => {
                write!(
                    f,
                    "the client's connection ended before the whole body: {why}"
                )
            }
            RequestBodyError::Malformed(what) => {
                write!(f, "the request's chunked body is malformed: {what}")
            }
        }
    }
}

impl std::error::Error for RequestBodyError {}

/// How a request body is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// Chunked, in this state.
    Chunked(Chunk),
}

/// A request's body, read from the client's connection as it is asked for. Dropping it
/// before its end means the connection closes after the answer.
pub struct RequestBody {
    wire: Option<Arc<Mutex<Wire>>>,
    framing: Framing,
    failed: Option<RequestBodyError>,
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

impl RequestBody {
    /// A body with nothing in it.
    pub fn empty() -> Self {
        Self {
            wire: None,
            framing: Framing::Length(0),
            failed: None,
        }
    }

    /// Ends the body's hold on the connection: `ended` when it was read whole.
    fn release(&mut self, ended: bool) {
        if let Some(wire) = self.wire.take() {
            let mut w = lock(&wire);
            w.body_held = false;
            w.body_ended = ended;
            w.continue_at = None;
        }
    }

    fn fail(
        &mut self,
        e: RequestBodyError,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        self.release(false);
        self.failed = Some(e.clone());
        Poll::Ready(Some(Err(e)))
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.release(false);
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = &mut *self;
        if let Some(e) = &this.failed {
            return Poll::Ready(Some(Err(e.clone())));
        }
        let Some(shared) = this.wire.clone() else {
            return Poll::Ready(None);
        };
        let mut wire = lock(&shared);
        if let Err(e) = ready!(wire.poll_continue(cx)) {
            drop(wire);
            return this.fail(RequestBodyError::Closed(e.to_string()));
        }
        loop {
            let data = match &mut this.framing {
                Framing::Length(0) => None,
                Framing::Length(left) => {
                    if wire.rbuf.is_empty() {
                        None
                    } else {
                        let take = (*left).min(wire.rbuf.len() as u64) as usize;
                        *left -= take as u64;
                        Some(Ok(wire.rbuf.split_to(take).freeze()))
                    }
                }
                Framing::Chunked(state) => match step_chunked(&mut wire.rbuf, state) {
                    Err(what) => Some(Err(RequestBodyError::Malformed(what))),
                    Ok(Step::Data(data)) => Some(Ok(data)),
                    Ok(Step::End) => {
                        this.framing = Framing::Length(0);
                        None
                    }
                    Ok(Step::Again) => continue,
                    Ok(Step::More) => None,
                },
            };
            let done = matches!(this.framing, Framing::Length(0));
            match data {
                Some(Ok(data)) => {
                    drop(wire);
                    if done {
                        this.release(true);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    drop(wire);
                    return this.fail(e);
                }
                None if done => {
                    drop(wire);
                    this.release(true);
                    return Poll::Ready(None);
                }
                None => {}
            }
            let left = match this.framing {
                Framing::Length(n) => Some(n),
                Framing::Chunked(_) => None,
            };
            let closed = match ready!(wire.poll_fill_for(cx, left)) {
                Ok(0) => "the client closed it".to_owned(),
                Ok(_) => continue,
                Err(e) => e.to_string(),
            };
            drop(wire);
            return this.fail(RequestBodyError::Closed(closed));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed.is_none() && matches!(self.framing, Framing::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(n) => SizeHint::with_exact(n),
            Framing::Chunked(_) => SizeHint::default(),
        }
    }
}

/// A request the HTTP layer refuses: the status it answers and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: &'static str,
}

fn refuse(status: StatusCode, why: &'static str) -> Refusal {
    Refusal { status, why }
}

/// A request head as read, and what its framing fields said.
#[derive(Debug)]
pub struct Head {
    pub request: Request<()>,
    framing: Framing,
    /// The client lets the connection carry another request after this one.
    pub keep_alive: bool,
    /// The client waits for `100 Continue` before it sends the body.
    pub expect_continue: bool,
}

/// Positions in the head of a field's name and value.
type Span = (usize, usize, usize, usize);

/// Reads a request head off the front of `buf`: `None` when it is not all there yet. `spans`
/// is scratch space kept between calls.
pub fn parse_head(
    buf: &mut BytesMut,
    max_head: usize,
    spans: &mut Vec<Span>,
) -> Result<Option<Head>, Refusal> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let start = buf.as_ptr() as usize;
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut fields,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > max_head => {
            return Err(refuse(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "the request head is larger than the listener takes",
            ))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(malformed(e)),
    };
    if len > max_head {
        return Err(refuse(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request head is larger than the listener takes",
        ));
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the request line is incomplete",
        ));
    };
    if target.len() > MAX_TARGET {
        return Err(refuse(
            StatusCode::URI_TOO_LONG,
            "the request target is longer than 65534 bytes",
        ));
    }
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| refuse(StatusCode::BAD_REQUEST, "the method is not a token"))?;
    if method == Method::CONNECT {
        // A 2xx to CONNECT opens a tunnel (RFC 9110 §9.3.6): busbar is no forward proxy, and a
        // back end's 2xx forwarded would leave the client sending raw bytes it reads as HTTP.
        return Err(refuse(
            StatusCode::NOT_IMPLEMENTED,
            "CONNECT is not served: busbar is not a forward proxy",
        ));
    }
    let target_at = target.as_ptr() as usize - start;
    let target_span = (target_at, target_at + target.len());
    spans.clear();
    for f in req.headers.iter() {
        let name = f.name.as_ptr() as usize - start;
        let value = f.value.as_ptr() as usize - start;
        spans.push((name, name + f.name.len(), value, value + f.value.len()));
    }
    let http11 = version == 1;
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target_span.0..target_span.1))
        .map_err(|_| refuse(StatusCode::BAD_REQUEST, "the request target is not a URI"))?;
    let mut headers = HeaderMap::with_capacity(spans.len());
    let mut keep_alive = http11;
    let mut saw_close = false;
    let mut expect_continue = false;
    let mut length: Option<u64> = None;
    let mut coded: Option<bool> = None;
    for &(n0, n1, v0, v1) in spans.iter() {
        let name = HeaderName::from_bytes(&head[n0..n1])
            .map_err(|_| refuse(StatusCode::BAD_REQUEST, "a header name is not a token"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(v0..v1)).map_err(|_| {
            refuse(
                StatusCode::BAD_REQUEST,
                "a header value holds a control character",
            )
        })?;
        if name == TRANSFER_ENCODING {
            if !http11 {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "Transfer-Encoding is not allowed in an HTTP/1.0 request",
                ));
            }
            coded = Some(last_token_is(value.as_bytes(), b"chunked"));
        } else if name == CONTENT_LENGTH {
            let n = parse_decimal(value.as_bytes()).ok_or_else(|| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    "Content-Length is not one decimal number",
                )
            })?;
            match length {
                Some(m) if m != n => {
                    return Err(refuse(
                        StatusCode::BAD_REQUEST,
                        "the request has two different Content-Length values",
                    ))
                }
                Some(_) => continue,
                None => length = Some(n),
            }
        } else if name == CONNECTION {
            if saw_close || has_token(value.as_bytes(), b"close") {
                saw_close = true;
                keep_alive = false;
            } else if !keep_alive {
                keep_alive = has_token(value.as_bytes(), b"keep-alive");
            }
        } else if name == EXPECT {
            expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        }
        headers.append(name, value);
    }
    let framing = match (coded, length) {
        (Some(false), _) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "the request's Transfer-Encoding does not end in chunked",
            ))
        }
        (Some(true), cl) => {
            if cl.is_some() {
                // Both framings: chunked wins, the length goes, and so does the connection
                // after the answer (RFC 9112 §6.3).
                headers.remove(CONTENT_LENGTH);
                keep_alive = false;
            }
            Framing::Chunked(Chunk::START)
        }
        (None, cl) => Framing::Length(cl.unwrap_or(0)),
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = if http11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    *request.headers_mut() = headers;
    Ok(Some(Head {
        request,
        framing,
        keep_alive,
        expect_continue: expect_continue && http11,
    }))
}

fn malformed(e: httparse::Error) -> Refusal {
    use httparse::Error as E;
    match e {
        E::TooManyHeaders => refuse(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request has more than 100 header fields",
        ),
        E::HeaderName => refuse(StatusCode::BAD_REQUEST, "a header name is malformed"),
        E::HeaderValue => refuse(StatusCode::BAD_REQUEST, "a header value is malformed"),
        E::Version => refuse(
            StatusCode::BAD_REQUEST,
            "the HTTP version is not 1.0 or 1.1",
        ),
        E::Token => refuse(StatusCode::BAD_REQUEST, "the method or target is malformed"),
        E::NewLine | E::Status => refuse(StatusCode::BAD_REQUEST, "the request line is malformed"),
    }
}

/// The comma-separated list `value` holds `token` (case-insensitively).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The last entry of the comma-separated list `value` is `token`.
fn last_token_is(value: &[u8], token: &[u8]) -> bool {
    value
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// How an answer's body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// No body (HEAD, 1xx, 204, 304; CONNECT is refused before any handler).
    None,
    /// This many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client, a length unknown).
    Close,
}

/// What became of a connection's request.
enum Served {
    /// The connection can carry the next request.
    Next,
    /// The connection ends: `unread` when the client may still be sending.
    Close { unread: bool },
}

/// Serves the requests of one client connection until it closes, fails, times out waiting
/// for a head, or shutdown stops it between requests.
pub async fn serve<H: Handler>(
    io: Box<dyn Stream>,
    handler: &H,
    info: &ConnInfo,
    settings: &ConnSettings,
    shutdown: &watch::Receiver<bool>,
) {
    let wire = Arc::new(Mutex::new(Wire {
        io,
        rbuf: BytesMut::new(),
        read_size: READ_FIRST,
        body_held: false,
        body_ended: true,
        continue_at: None,
    }));
    let mut told = shutdown.clone();
    let mut stop = pin!(async move {
        let _ = told.wait_for(|s| *s).await;
    });
    let mut timer = pin!(tokio::time::sleep(settings.header_read_timeout));
    let mut spans = Vec::new();
    let mut wbuf = Vec::with_capacity(512);
    // Shutdown started (the `stop` future is done and not polled again).
    let mut stopped = false;
    // The wait for the next request was extended once: it arrived as the wait ran out.
    let mut extended = false;
    loop {
        timer
            .as_mut()
            .reset(tokio::time::Instant::now() + settings.header_read_timeout);
        let mut draining = false;
        let head = poll_fn(|cx| {
            let mut w = lock(&wire);
            loop {
                if !w.rbuf.is_empty() {
                    match parse_head(&mut w.rbuf, settings.max_header_size, &mut spans) {
                        Ok(Some(head)) => return Poll::Ready(Some(Ok(head))),
                        // An HTTP/2 client that tried its luck: no HTTP/1.1 answer means
                        // anything to it, and it is no malformed request.
                        Err(_) if w.rbuf.starts_with(H2_PREFACE) => return Poll::Ready(None),
                        Err(refusal) => return Poll::Ready(Some(Err(refusal))),
                        Ok(None) => {}
                    }
                }
                match w.poll_fill(cx) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
                    Poll::Ready(Ok(_)) => {}
                    Poll::Pending => {
                        if w.rbuf.is_empty() && w.rbuf.capacity() > READ_AHEAD {
                            // Nothing came yet: a connection waiting for its next request
                            // holds no large buffer (the read size it learnt is kept).
                            w.rbuf = BytesMut::new();
                        }
                        break;
                    }
                }
            }
            if !stopped && stop.as_mut().poll(cx).is_ready() {
                stopped = true;
            }
            if stopped {
                if w.rbuf.is_empty() {
                    return Poll::Ready(None);
                }
                // A head under way at shutdown gets a little more time, not all of
                // header_read_timeout.
                let soon = tokio::time::Instant::now() + STOP_HEAD_WAIT;
                if !draining && soon < timer.deadline() {
                    timer.as_mut().reset(soon);
                }
                draining = true;
            }
            if timer.as_mut().poll(cx).is_ready() {
                // Idle past header_read_timeout, unless the next request arrived just now: the
                // kernel has its bytes and the event loop has not reported them. Closing then
                // would drop a request the client sent in time (a client's pool crossing this
                // idle close); it gets the time a head gets, once.
                if w.rbuf.is_empty() && !stopped && !extended && bytes_waiting(w.io.tcp()) {
                    extended = true;
                    timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + settings.header_read_timeout);
                    if timer.as_mut().poll(cx).is_pending() {
                        // Woken by the socket once the event loop sees its bytes.
                        return Poll::Pending;
                    }
                }
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        extended = false;
        let served = match head {
            None => Served::Close { unread: false },
            Some(Err(refusal)) => {
                if let Some(counters) = &settings.connections {
                    counters.bad_request(refusal.status.as_u16());
                }
                handler.refused(refusal.status.as_u16(), info);
                tracing::debug!(status = refusal.status.as_u16(), "{}", refusal.why);
                // Written out before the wait: the head is not kept in the connection's state.
                encode_refusal(&refusal, &mut wbuf);
                let _ = write_all(&wire, &mut [&wbuf[..]]).await;
                Served::Close { unread: true }
            }
            // One request and its answer, written out here rather than as an async fn of its
            // own: that future would carry the head and the request beside the handler's
            // future, which takes the request, in this connection's state, last touched a
            // round of all the connections ago (at hundreds of them, memory out of the cache).
            Some(Ok(head)) => {
                let (request, asked) = open(&wire, head);
                let answer = {
                    let mut answering = pin!(handler.handle(request, info));
                    poll_fn(|cx| {
                        if let Poll::Ready(resp) = answering.as_mut().poll(cx) {
                            return Poll::Ready(Some(resp));
                        }
                        if lock(&wire).poll_client_gone(cx) {
                            return Poll::Ready(None);
                        }
                        Poll::Pending
                    })
                    .await
                };
                match answer {
                    // The client left first: the handler's work is dropped with its future.
                    None => Served::Close { unread: false },
                    Some(answer) => {
                        let (body, out, mut close) =
                            ready_answer(&wire, answer, &asked, settings, shutdown, &mut wbuf);
                        let sent = match send_body(&wire, &wbuf, body, out).await {
                            Ok(()) => Ok(()),
                            Err(Unsent::Cut(e)) => Err(e),
                            // Boxed: this path's future stays out of every request's.
                            Err(Unsent::Failed(e, body)) => {
                                Box::pin(answer_failed(
                                    &wire, e, body, &asked, &mut close, &mut wbuf,
                                ))
                                .await
                            }
                        };
                        served(&wire, sent, close)
                    }
                }
            }
        };
        match served {
            Served::Next if !*shutdown.borrow() => {}
            Served::Next => return close(&wire, false).await,
            Served::Close { unread } => return close(&wire, unread).await,
        }
    }
}

/// What the answer to a request depends on, of the request's head.
struct Asked {
    method: Method,
    version: Version,
    keep_alive: bool,
}

/// The request of `head` with its body, which reads from `wire`.
fn open(wire: &Arc<Mutex<Wire>>, head: Head) -> (Request<RequestBody>, Asked) {
    let Head {
        request,
        framing,
        keep_alive,
        expect_continue,
    } = head;
    let asked = Asked {
        method: request.method().clone(),
        version: request.version(),
        keep_alive,
    };
    let body = if matches!(framing, Framing::Length(0)) {
        RequestBody::empty()
    } else {
        let mut w = lock(wire);
        w.body_held = true;
        w.body_ended = false;
        w.continue_at = expect_continue.then_some(0);
        RequestBody {
            wire: Some(wire.clone()),
            framing,
            failed: None,
        }
    };
    (request.map(|()| body), asked)
}

/// Writes the head of the handler's answer into `wbuf`: the answer's body, how it goes out,
/// and whether the connection closes after it.
fn ready_answer(
    wire: &Mutex<Wire>,
    answer: Response<ResponseBody>,
    asked: &Asked,
    settings: &ConnSettings,
    shutdown: &watch::Receiver<bool>,
    wbuf: &mut Vec<u8>,
) -> (ResponseBody, Out, bool) {
    // Shutdown that started while the handler worked closes the connection after this answer,
    // so the answer says so: a client must not send another request on it.
    let mut close = !asked.keep_alive || !settings.keep_alive || *shutdown.borrow();
    {
        let w = lock(wire);
        if !w.body_held && !w.body_ended {
            close = true;
        }
    }
    let (body, out, told) = encode_answer(wbuf, answer, asked, close);
    (body, out, told || out == Out::Close)
}

/// Nothing of the answer went out, its body failed first: the client gets the error answer
/// in its place.
async fn answer_failed(
    wire: &Mutex<Wire>,
    e: busbar_core::BoxError,
    body: ResponseBody,
    asked: &Asked,
    close: &mut bool,
    wbuf: &mut Vec<u8>,
) -> io::Result<()> {
    match body.failed_before_sending(&e) {
        Some(answer) => {
            let (body, out, told) = encode_answer(wbuf, answer, asked, *close);
            *close = told;
            send_body(wire, wbuf, body, out)
                .await
                .map_err(Unsent::into_io)
        }
        None => Err(io::Error::other(e)),
    }
}

/// Whether the connection carries another request, once the answer was `sent`.
fn served(wire: &Mutex<Wire>, sent: io::Result<()>, close: bool) -> Served {
    let w = lock(wire);
    match sent {
        Ok(()) if !close && !w.body_held && w.body_ended => Served::Next,
        Ok(()) => Served::Close {
            unread: !w.body_ended,
        },
        Err(e) => {
            tracing::debug!(error = %e, "the answer was not sent whole");
            Served::Close { unread: false }
        }
    }
}

/// Writes the head of `answer` into `wbuf`: its body, how the body goes out, and `close` or
/// whether the head told the client the connection closes (the handler asked for that).
fn encode_answer(
    wbuf: &mut Vec<u8>,
    answer: Response<ResponseBody>,
    asked: &Asked,
    close: bool,
) -> (ResponseBody, Out, bool) {
    let (parts, body) = answer.into_parts();
    let out = answer_framing(
        &asked.method,
        asked.version,
        parts.status,
        &parts.headers,
        &body,
    );
    let closing = encode_head(
        wbuf,
        &parts,
        &asked.method,
        out,
        close,
        asked.version,
        &body,
    );
    (body, out, close || closing)
}

/// How the answer's body goes out (RFC 9112 §6): its exact length when the body knows it or
/// the handler set one, else chunked to an HTTP/1.1 client and until the close to an
/// HTTP/1.0 one.
fn answer_framing(
    method: &Method,
    version: Version,
    status: StatusCode,
    headers: &HeaderMap,
    body: &ResponseBody,
) -> Out {
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Out::None;
    }
    match body
        .size_hint()
        .exact()
        .or_else(|| declared_length(headers))
    {
        Some(n) => Out::Length(n),
        None if version == Version::HTTP_11 => Out::Chunked,
        None => Out::Close,
    }
}

/// The handler's `Content-Length`, when it is one number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(CONTENT_LENGTH).iter();
    let n = parse_decimal(values.next()?.as_bytes())?;
    values
        .all(|v| parse_decimal(v.as_bytes()) == Some(n))
        .then_some(n)
}

/// Writes the answer head into `out`; says whether it told the client the connection closes
/// (it asked for that itself with `Connection: close`).
fn encode_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    method: &Method,
    framing: Out,
    close: bool,
    version: Version,
    body: &ResponseBody,
) -> bool {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    let mut dated = false;
    let mut closing = false;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH
            || name == TRANSFER_ENCODING
            || (name == TRAILER && framing != Out::Chunked)
        {
            continue;
        }
        if name == DATE {
            dated = true;
        } else if name == CONNECTION {
            closing |= has_token(value.as_bytes(), b"close");
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let length = match framing {
        Out::Length(n) => Some(n),
        // The head of an answer to HEAD says the length GET's body would have.
        Out::None
            if method == Method::HEAD
                && parts.status != StatusCode::NO_CONTENT
                && parts.status != StatusCode::NOT_MODIFIED
                && !parts.status.is_informational() =>
        {
            // A body that is empty (the answer to a HEAD a back end gave) tells nothing.
            declared_length(&parts.headers).or_else(|| body.size_hint().exact().filter(|&n| n > 0))
        }
        _ => None,
    };
    if let Some(n) = length {
        out.extend_from_slice(b"content-length: ");
        push_number(out, n, 10);
        out.extend_from_slice(b"\r\n");
    } else if framing == Out::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        http_date(out);
        out.extend_from_slice(b"\r\n");
    }
    if (close || framing == Out::Close) && !closing {
        out.extend_from_slice(b"connection: close\r\n");
    } else if !close && !closing && version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    closing
}

/// Why an answer was not sent whole.
enum Unsent {
    /// The answer is cut (the body failed, the client stopped reading or left): the
    /// connection must close.
    Cut(io::Error),
    /// The body failed before anything was written, head included: it is given back, so
    /// that another answer can go in its place.
    Failed(busbar_core::BoxError, ResponseBody),
}

impl Unsent {
    fn into_io(self) -> io::Error {
        match self {
            Unsent::Cut(e) => e,
            Unsent::Failed(e, _) => io::Error::other(e),
        }
    }
}

impl From<io::Error> for Unsent {
    fn from(e: io::Error) -> Self {
        Unsent::Cut(e)
    }
}

/// Writes `head` and the answer's body framed by `out`.
///
/// Not an async fn: that future would keep `body` twice, as its argument and as the local the
/// argument is moved into; this one keeps it once.
#[allow(clippy::manual_async_fn)]
fn send_body<'a>(
    wire: &'a Mutex<Wire>,
    head: &'a [u8],
    mut body: ResponseBody,
    out: Out,
) -> impl Future<Output = Result<(), Unsent>> + Send + 'a {
    async move {
        let mut head = head;
        // The body is dropped as soon as it ended, before its last bytes are written: the request
        // is over for its meter (latency, access log) when the answer is all handed over.
        if out == Out::None {
            drop(body);
            return Ok(write_all(wire, &mut [head]).await?);
        }
        let mut sent: u64 = 0;
        let mut size_line = Vec::with_capacity(18);
        // The body's last data, kept to go out with what ends the body.
        let mut last = None;
        loop {
            // The next frame; when none is ready yet, the head waits for it a moment (`HEAD_HOLD`),
            // then goes first on its own.
            let polled = poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await;
            let next = match polled {
                Poll::Ready(next) => next,
                Poll::Pending if !head.is_empty() => {
                    let first = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
                    // Boxed: the timer stays out of every exchange's future.
                    match Box::pin(tokio::time::timeout(HEAD_HOLD, first)).await {
                        Ok(next) => next,
                        Err(_) => {
                            write_all(wire, &mut [head]).await?;
                            head = &[];
                            continue;
                        }
                    }
                }
                Poll::Pending => {
                    let waited = poll_fn(|cx| {
                        if let Poll::Ready(next) = Pin::new(&mut body).poll_frame(cx) {
                            return Poll::Ready(Some(next));
                        }
                        if lock(wire).poll_client_gone(cx) {
                            return Poll::Ready(None);
                        }
                        Poll::Pending
                    })
                    .await;
                    match waited {
                        Some(next) => next,
                        None => {
                            return Err(io::Error::other("the client closed the connection").into())
                        }
                    }
                }
            };
            let data = match next {
                None => break,
                Some(Err(e)) if sent == 0 && !head.is_empty() => {
                    return Err(Unsent::Failed(e, body))
                }
                Some(Err(e)) => return Err(io::Error::other(e).into()),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    // Trailers are not sent.
                    Err(_) => continue,
                },
            };
            if data.is_empty() {
                continue;
            }
            sent += data.len() as u64;
            if let Out::Length(n) = out {
                if sent > n {
                    return Err(
                        io::Error::other(format!("the body is longer than its {n} bytes")).into(),
                    );
                }
            }
            if body.is_end_stream() {
                last = Some(data);
                break;
            }
            if out == Out::Chunked {
                chunk_size_line(&mut size_line, data.len());
                write_all(wire, &mut [head, &size_line, &data, b"\r\n"]).await?;
            } else {
                write_all(wire, &mut [head, &data]).await?;
            }
            head = &[];
        }
        drop(body);
        let short = matches!(out, Out::Length(n) if sent != n);
        let ended_short = || {
            io::Error::other(format!(
                "the body ended after {sent} bytes, not the length its head said"
            ))
        };
        if short && last.is_none() {
            return Err(ended_short().into());
        }
        // The last bytes and what ends the body go out together.
        match (out, &last) {
            (Out::Chunked, Some(data)) => {
                chunk_size_line(&mut size_line, data.len());
                write_all(wire, &mut [head, &size_line, data, b"\r\n0\r\n\r\n"]).await?;
            }
            (Out::Chunked, None) => write_all(wire, &mut [head, b"0\r\n\r\n"]).await?,
            (_, Some(data)) => write_all(wire, &mut [head, data]).await?,
            (_, None) => write_all(wire, &mut [head]).await?,
        }
        if short {
            return Err(ended_short().into());
        }
        Ok(())
    }
}

/// `size` in hexadecimal and CRLF: a chunk's first line.
fn chunk_size_line(line: &mut Vec<u8>, size: usize) {
    line.clear();
    push_number(line, size as u64, 16);
    line.extend_from_slice(b"\r\n");
}

/// Writes all of `bufs` (the answer), in as few system calls as the socket takes, then
/// flushes.
async fn write_all(wire: &Mutex<Wire>, bufs: &mut [&[u8]]) -> io::Result<()> {
    poll_fn(|cx| {
        let mut w = lock(wire);
        // Too late for `100 Continue` once the answer goes (the client sends the body or
        // not), unless it is half written.
        match w.continue_at {
            Some(0) => w.continue_at = None,
            Some(_) => ready!(w.poll_continue(cx))?,
            None => {}
        }
        loop {
            let first = bufs.iter().position(|b| !b.is_empty());
            let Some(first) = first else {
                return Pin::new(&mut w.io).poll_flush(cx);
            };
            let mut slices = [IoSlice::new(&[]); 4];
            let mut count = 0;
            for b in bufs[first..].iter().filter(|b| !b.is_empty()).take(4) {
                slices[count] = IoSlice::new(b);
                count += 1;
            }
            let mut n = ready!(Pin::new(&mut w.io).poll_write_vectored(cx, &slices[..count]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            for b in bufs[first..].iter_mut() {
                let take = n.min(b.len());
                *b = &b[take..];
                n -= take;
                if n == 0 {
                    break;
                }
            }
        }
    })
    .await
}

/// The answer to a refused request, plain text saying why; the connection closes after it.
fn encode_refusal(refusal: &Refusal, wbuf: &mut Vec<u8>) {
    wbuf.clear();
    let reason = refusal.status.canonical_reason().unwrap_or("Unknown");
    let _ = write!(
        wbuf,
        "HTTP/1.1 {} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\ndate: ",
        refusal.status.as_str(),
        refusal.why.len() + 1
    );
    http_date(wbuf);
    wbuf.extend_from_slice(b"\r\n\r\n");
    wbuf.extend_from_slice(refusal.why.as_bytes());
    wbuf.push(b'\n');
}

/// Ends the connection. With a request body maybe still coming (`unread`), the write side is
/// shut first and the rest read and dropped for a while: closing a socket with unread bytes
/// resets it, and the client could lose the answer it was sent.
async fn close(wire: &Mutex<Wire>, unread: bool) {
    let shut = poll_fn(|cx| Pin::new(&mut lock(wire).io).poll_shutdown(cx));
    if tokio::time::timeout(SHUTDOWN_WAIT, shut).await.is_err() || !unread {
        return;
    }
    let mut dropped = 0;
    let drain = poll_fn(|cx| loop {
        let mut w = lock(wire);
        w.rbuf.clear();
        match ready!(w.poll_fill(cx)) {
            Ok(0) | Err(_) => return Poll::Ready(()),
            Ok(n) => {
                dropped += n;
                if dropped > LINGER_BYTES {
                    return Poll::Ready(());
                }
            }
        }
    });
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Today's date as an HTTP date (RFC 9110 §5.6.7), formatted once a second per thread.
fn http_date(out: &mut Vec<u8>) {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, String)> = const {
            std::cell::RefCell::new((u64::MAX, String::new()))
        };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use busbar_core::body::Origin;
    use busbar_core::Body;
    use http::Response;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn head(text: &str) -> Result<Option<Head>, Refusal> {
        let mut buf = BytesMut::from(text.as_bytes());
        parse_head(&mut buf, 64 * 1024, &mut Vec::new())
    }

    fn whole(text: &str) -> Head {
        match head(text) {
            Ok(Some(h)) => h,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    fn status(text: &str) -> u16 {
        match head(text) {
            Err(r) => r.status.as_u16(),
            Ok(h) => panic!("{text:?} was taken: {h:?}"),
        }
    }

    #[test]
    fn a_head_is_read_whole_and_what_follows_stays() {
        let mut buf = BytesMut::from(
            &b"\r\nPOST /a?b=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nX-A: 1\r\nX-A: 2\r\n\r\nabcGET"[..],
        );
        let h = parse_head(&mut buf, 1024, &mut Vec::new())
            .expect("taken")
            .expect("whole");
        assert_eq!(h.request.method(), Method::POST);
        assert_eq!(h.request.uri(), "/a?b=1");
        assert_eq!(h.request.version(), Version::HTTP_11);
        let a: Vec<_> = h.request.headers().get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
        assert!(matches!(h.framing, Framing::Length(3)));
        assert!(h.keep_alive && !h.expect_continue);
        assert_eq!(&buf[..], b"abcGET");
        // Not all there yet.
        for cut in [0, 5, 20, 39] {
            let text = "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
            assert!(head(&text[..cut]).expect("no refusal").is_none(), "{cut}");
        }
    }

    #[test]
    fn framing_and_keep_alive_follow_rfc_9112() {
        let h = whole("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert!(matches!(h.framing, Framing::Chunked(_)) && h.keep_alive);
        // Both framings: chunked wins, the length is dropped, the connection closes after.
        let h = whole("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(h.framing, Framing::Chunked(_)) && !h.keep_alive);
        assert!(h.request.headers().get(CONTENT_LENGTH).is_none());
        let h = whole("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n");
        assert!(matches!(h.framing, Framing::Chunked(_)) && !h.keep_alive);
        assert!(h.request.headers().get(CONTENT_LENGTH).is_none());
        let h = whole("POST / HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n");
        assert!(matches!(h.framing, Framing::Length(7)));
        assert_eq!(
            h.request.headers().get_all(CONTENT_LENGTH).iter().count(),
            1
        );
        assert!(!whole("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(whole("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(!whole("GET / HTTP/1.1\r\nConnection: x, close\r\n\r\n").keep_alive);
        assert!(
            !whole("GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n")
                .keep_alive
        );
        assert!(
            whole("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert!(
            !whole("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert!(matches!(
            whole("GET / HTTP/1.1\r\n\r\n").framing,
            Framing::Length(0)
        ));
    }

    #[test]
    fn malformed_heads_are_refused_with_the_status_that_says_why() {
        for (text, expected) in [
            ("GET /a b HTTP/1.1\r\n\r\n", 400),
            ("HELLO\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nName : v\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nA: b\x01c\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nA: b\nc\r\n\r\n", 400),
            ("GET / HTTP/2.0\r\n\r\n", 400),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
            ("G(T / HTTP/1.1\r\n\r\n", 400),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", 400),
            (
                "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                400,
            ),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                400,
            ),
            ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("GET http://[::1 HTTP/1.1\r\n\r\n", 400),
            (
                "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
                501,
            ),
            ("CONNECT /p HTTP/1.1\r\nHost: t\r\n\r\n", 501),
        ] {
            assert_eq!(status(text), expected, "{text:?}");
        }
        let fields: String = (0..=MAX_FIELDS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{fields}\r\n")), 431);
        let fields: String = (0..MAX_FIELDS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(head(&format!("GET / HTTP/1.1\r\n{fields}\r\n")).is_ok());
        // Too large, whether the head is whole or still coming.
        let big = "a".repeat(70_000);
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nX: {big}\r\n\r\n")), 431);
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nX: {big}")), 431);
        let target = format!("/{}", "t".repeat(MAX_TARGET));
        let mut buf = BytesMut::from(format!("GET {target} HTTP/1.1\r\n\r\n").as_bytes());
        let refused = parse_head(&mut buf, 1 << 20, &mut Vec::new()).map(|_| ());
        assert_eq!(refused.map_err(|r| r.status.as_u16()), Err(414));
    }

    /// Answers by path: `/echo` streams the body back with its length, `/stream` without it,
    /// `/early` answers 413 without reading it, `/hang` never answers (and counts its
    /// dropping), anything else answers `hello`.
    struct Test {
        dropped: Arc<AtomicUsize>,
    }

    struct Dropped(Arc<AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Handler for Test {
        async fn handle(&self, req: Request<RequestBody>, _: &ConnInfo) -> Response<ResponseBody> {
            let path = req.uri().path().to_owned();
            let body = req.into_body();
            let exact = body.size_hint().exact();
            let body = match path.as_str() {
                "/echo" => Body::stream(body, exact, Origin::Client),
                "/stream" => Body::stream(body, None, Origin::Client),
                "/early" => {
                    let mut r = Response::new(ResponseBody::plain(Body::full("too big")));
                    *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
                    return r;
                }
                "/empty" => Body::empty(),
                "/slow" => {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    Body::full("slow")
                }
                "/hang" => {
                    let _guard = Dropped(self.dropped.clone());
                    std::future::pending::<()>().await;
                    Body::empty()
                }
                _ => Body::full("hello"),
            };
            Response::new(ResponseBody::plain(body))
        }
    }

    async fn start(settings: ConnSettings) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let (addr, dropped, stop) = start_stoppable(settings).await;
        // Never stops.
        std::mem::forget(stop);
        (addr, dropped)
    }

    async fn start_stoppable(
        settings: ConnSettings,
    ) -> (std::net::SocketAddr, Arc<AtomicUsize>, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let dropped = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(Test {
            dropped: dropped.clone(),
        });
        let (stop, rx) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    return;
                };
                let (handler, settings, rx) = (handler.clone(), settings.clone(), rx.clone());
                tokio::spawn(async move {
                    let info = ConnInfo {
                        peer: Some(peer),
                        tls: false,
                    };
                    serve(Box::new(stream), &*handler, &info, &settings, &rx).await;
                });
            }
        });
        (addr, dropped, stop)
    }

    /// One answer read off `s`: status, lower-case headers, body (de-chunked), and whether
    /// it was framed (else it ran to the close).
    async fn answer<S: AsyncRead + Unpin>(
        s: &mut S,
        buf: &mut Vec<u8>,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        loop {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut fields);
            if let Ok(httparse::Status::Complete(n)) = resp.parse(buf) {
                let code = resp.code.unwrap_or(0);
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                buf.drain(..n);
                let get = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                };
                let mut body = Vec::new();
                if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
                    while buf.len() < len {
                        fill(s, buf).await;
                    }
                    body.extend(buf.drain(..len));
                } else if get("transfer-encoding").as_deref() == Some("chunked") {
                    loop {
                        let eol = loop {
                            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                                break i;
                            }
                            fill(s, buf).await;
                        };
                        let size = usize::from_str_radix(
                            std::str::from_utf8(&buf[..eol]).expect("size"),
                            16,
                        )
                        .expect("hex size");
                        buf.drain(..eol + 2);
                        while buf.len() < size + 2 {
                            fill(s, buf).await;
                        }
                        body.extend(buf.drain(..size));
                        buf.drain(..2);
                        if size == 0 {
                            break;
                        }
                    }
                } else if code != 204 && code != 304 && code >= 200 {
                    let _ = s.read_to_end(buf).await;
                    body.append(buf);
                }
                return (code, headers, body);
            }
            fill(s, buf).await;
        }
    }

    async fn fill<S: AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) {
        let mut chunk = [0u8; 65536];
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the server closed the connection early");
        buf.extend_from_slice(&chunk[..n]);
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[tokio::test]
    async fn bodies_of_every_boundary_size_come_back_byte_for_byte_on_one_connection() {
        let (addr, _) = start(ConnSettings::default()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut buf = Vec::new();
        for n in [
            0,
            1,
            1023,
            1024,
            16383,
            16384,
            16385,
            65535,
            65536,
            65537,
            262_145,
            1 << 20,
        ] {
            let body = payload(n);
            for (path, chunked) in [("/echo", false), ("/stream", false), ("/echo", true)] {
                let mut req = format!("POST {path} HTTP/1.1\r\nHost: t\r\n").into_bytes();
                if chunked {
                    req.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                    for part in body.chunks(7001) {
                        req.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
                        req.extend_from_slice(part);
                        req.extend_from_slice(b"\r\n");
                    }
                    req.extend_from_slice(b"0\r\nTrailer: x\r\n\r\n");
                } else {
                    req.extend_from_slice(format!("Content-Length: {n}\r\n\r\n").as_bytes());
                    req.extend_from_slice(&body);
                }
                let (mut rd, mut wr) = s.split();
                let (sent, (code, headers, got)) =
                    tokio::join!(wr.write_all(&req), answer(&mut rd, &mut buf));
                sent.expect("sent");
                assert_eq!(code, 200, "{path} {n} {chunked}");
                assert!(
                    got == body,
                    "{path} {n} chunked={chunked}: {} bytes back",
                    got.len()
                );
                let framing = (
                    header(&headers, "content-length").is_some(),
                    header(&headers, "transfer-encoding").is_some(),
                );
                let expected = if path == "/stream" || chunked {
                    (false, true)
                } else {
                    (true, false)
                };
                assert_eq!(framing, expected, "{path} {n} {chunked}");
                assert!(header(&headers, "date").is_some());
            }
        }
    }

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order() {
        let (addr, _) = start(ConnSettings::default()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut all = Vec::new();
        for i in 0..20 {
            let body = format!("request {i}");
            all.extend_from_slice(
                format!(
                    "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
        all.extend_from_slice(b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        s.write_all(&all).await.expect("sent");
        let mut buf = Vec::new();
        for i in 0..20 {
            let (code, _, body) = answer(&mut s, &mut buf).await;
            assert_eq!((code, body), (200, format!("request {i}").into_bytes()));
        }
        let (code, headers, body) = answer(&mut s, &mut buf).await;
        assert_eq!((code, &body[..]), (200, &b"hello"[..]));
        assert_eq!(header(&headers, "connection"), Some("close"));
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).await.expect("closed"), 0);
    }

    #[tokio::test]
    async fn a_request_sent_while_the_one_before_is_answered_is_read_ahead_whole() {
        let (addr, _) = start(ConnSettings::default()).await;
        // Around the size of one read ahead into an empty buffer, and around READ_AHEAD.
        for n in [
            1,
            AHEAD_PIECE - 1,
            AHEAD_PIECE,
            AHEAD_PIECE + 1,
            3 * AHEAD_PIECE + 7,
            READ_AHEAD - 1,
            READ_AHEAD,
            READ_AHEAD + 1,
            100_000,
        ] {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .expect("sent");
            tokio::time::sleep(Duration::from_millis(30)).await;
            let body: Vec<u8> = (0..n).map(|i| b"0123456789abcdefghij"[i % 20]).collect();
            let mut next = format!("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n")
                .into_bytes();
            next.extend_from_slice(&body);
            // In two pieces, both while the first request is still answered.
            let half = next.len() / 2;
            s.write_all(&next[..half]).await.expect("sent");
            tokio::time::sleep(Duration::from_millis(20)).await;
            s.write_all(&next[half..]).await.expect("sent");
            let mut buf = Vec::new();
            let (code, _, got) = answer(&mut s, &mut buf).await;
            assert_eq!((code, &got[..]), (200, &b"slow"[..]), "{n}");
            let (code, _, got) = answer(&mut s, &mut buf).await;
            assert_eq!(code, 200, "{n}");
            assert!(got == body, "{n}: {} bytes back", got.len());
        }
    }

    #[tokio::test]
    async fn expect_100_continue_is_answered_when_the_body_is_first_read() {
        let (addr, _) = start(ConnSettings::default()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            b"PUT /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        )
        .await
        .expect("sent");
        let mut got = vec![0u8; CONTINUE.len()];
        s.read_exact(&mut got).await.expect("interim answer");
        assert_eq!(got, CONTINUE);
        s.write_all(b"abcde").await.expect("body");
        let (code, _, body) = answer(&mut s, &mut Vec::new()).await;
        assert_eq!((code, &body[..]), (200, &b"abcde"[..]));
        // An answer that does not read the body goes without `100 Continue`, and the
        // connection ends after it.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            b"PUT /early HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        )
        .await
        .expect("sent");
        let (code, headers, _) = answer(&mut s, &mut Vec::new()).await;
        assert_eq!(code, 413);
        assert_eq!(header(&headers, "connection"), Some("close"));
    }

    #[tokio::test]
    async fn head_http_1_0_and_early_answers_are_framed_for_the_client() {
        let (addr, _) = start(ConnSettings::default()).await;
        // HEAD: the length GET would have, no body; the connection goes on.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\nGET /x HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("sent");
        let mut buf = Vec::new();
        loop {
            fill(&mut s, &mut buf).await;
            let mut fields = [httparse::EMPTY_HEADER; 16];
            let mut resp = httparse::Response::new(&mut fields);
            if let Ok(httparse::Status::Complete(n)) = resp.parse(&buf) {
                let length = resp.headers.iter().find(|h| h.name == "content-length");
                assert_eq!(length.map(|h| h.value.to_vec()), Some(b"5".to_vec()));
                buf.drain(..n);
                break;
            }
        }
        let (code, _, body) = answer(&mut s, &mut buf).await;
        assert_eq!(
            (code, &body[..]),
            (200, &b"hello"[..]),
            "the GET after the HEAD"
        );
        // An empty body (a back end's answer to HEAD) says nothing of GET's length.
        s.write_all(
            b"HEAD /empty HTTP/1.1\r\nHost: t\r\n\r\nGET /empty HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .await
        .expect("sent");
        loop {
            fill(&mut s, &mut buf).await;
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                assert!(!head.contains("content-length"), "{head}");
                buf.drain(..end + 4);
                break;
            }
        }
        let (code, headers, body) = answer(&mut s, &mut buf).await;
        assert_eq!((code, body.len()), (200, 0));
        assert_eq!(header(&headers, "content-length"), Some("0"));
        // HTTP/1.0 and a length nobody knows: the body runs to the close.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"POST /stream HTTP/1.0\r\nContent-Length: 3\r\n\r\nxyz")
            .await
            .expect("sent");
        let (code, headers, body) = answer(&mut s, &mut Vec::new()).await;
        assert_eq!((code, &body[..]), (200, &b"xyz"[..]));
        assert_eq!(header(&headers, "transfer-encoding"), None);
        assert_eq!(header(&headers, "connection"), Some("close"));
        // HTTP/1.0 asking to keep the connection, with a known length, keeps it.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut buf = Vec::new();
        for _ in 0..2 {
            s.write_all(b"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .await
                .expect("sent");
            let (code, headers, _) = answer(&mut s, &mut buf).await;
            assert_eq!(code, 200);
            assert_eq!(header(&headers, "connection"), Some("keep-alive"));
        }
        // An answer before a large body: the client gets it whole (no reset), told the
        // connection closes, while it is still sending.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let big = payload(8 << 20);
        let head = format!(
            "POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            big.len()
        );
        s.write_all(head.as_bytes()).await.expect("head");
        let (mut rd, mut wr) = s.split();
        let mut buf = Vec::new();
        let (_, (code, headers, body)) = tokio::join!(
            async {
                let _ = wr.write_all(&big).await;
            },
            answer(&mut rd, &mut buf)
        );
        assert_eq!((code, &body[..]), (413, &b"too big"[..]));
        assert_eq!(header(&headers, "connection"), Some("close"));
    }

    #[tokio::test]
    async fn bytes_waiting_in_the_kernel_are_seen_before_the_event_loop_sees_them() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        assert!(!bytes_waiting(&server), "nothing sent yet");
        std::io::Write::write_all(&mut client, b"GET / HTTP/1.1\r\n").expect("write");
        // This thread does not yield: the event loop cannot have seen the bytes.
        let mut seen = false;
        for _ in 0..500 {
            seen = bytes_waiting(&server);
            if seen {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(seen, "the bytes in the kernel are seen");
        assert!(bytes_waiting(&server), "and left there (a peek)");
        let leaving =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (other, _) = listener.accept().await.expect("accept");
        drop(leaving);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!bytes_waiting(&other), "a client that closed sent nothing");
    }

    #[tokio::test]
    async fn a_client_that_leaves_cancels_its_request_and_an_idle_one_is_let_go() {
        let settings = ConnSettings {
            header_read_timeout: Duration::from_millis(300),
            ..ConnSettings::default()
        };
        let (addr, dropped) = start(settings).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /hang HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("sent");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        drop(s);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while dropped.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the handler was not dropped"
        );
        // Idle past header_read_timeout, or a head sent too slowly: closed without an answer.
        for sent in [&b""[..], b"GET / HTTP/1.1\r\n"] {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(sent).await.expect("sent");
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
            assert!(matches!(read, Ok(Ok(0))), "{read:?} {rest:?}");
        }
    }

    #[tokio::test]
    async fn a_broken_chunked_body_fails_the_request_and_ends_the_connection() {
        let (addr, _) = start(ConnSettings::default()).await;
        for wire in [
            &b"5\r\nabcdefg\r\n0\r\n\r\n"[..],
            b"zz\r\nab\r\n0\r\n\r\n",
            b"5\r\nab",
        ] {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            let mut req =
                b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            req.extend_from_slice(wire);
            s.write_all(&req).await.expect("sent");
            s.shutdown().await.expect("half close");
            // The answer started before the body failed: it is cut, never completed.
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
            let text = String::from_utf8_lossy(&got);
            assert!(!text.ends_with("0\r\n\r\n"), "{text:?}");
        }
    }

    #[tokio::test]
    async fn an_http2_preface_is_closed_unanswered_and_shutdown_cuts_a_slow_head_short() {
        let (addr, _, stop) = start_stoppable(ConnSettings::default()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .expect("sent");
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?} {got:?}");
        // A head under way when shutdown starts gets about a second, not header_read_timeout
        // (30 s here); an idle connection closes at once.
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET / HTTP/1.1\r\nHost")
            .await
            .expect("sent");
        let mut idle = TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = tokio::time::Instant::now();
        stop.send_replace(true);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(3), "{waited:?}");
    }
}
