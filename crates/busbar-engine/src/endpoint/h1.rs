//! The HTTP/1.1 client side of a back-end connection, driven by the request that uses it.
//!
//! A [`Conn`] is a socket (plain or TLS) and its read buffer, nothing else: no task of its
//! own, no channel. The request's task writes the request head and body and reads the answer
//! head ([`Exchange`]); the answer's body then reads straight from the same socket and, when
//! the back end answered before it had the whole request, goes on sending the rest of it
//! ([`Upload`]). A connection is used again only after a whole answer that leaves it in a known
//! state: framed by `Content-Length` or chunked encoding, no `Connection: close`, the whole
//! request sent and nothing unasked-for after the answer.
//!
//! Answers are read strictly (RFC 9112): a head of at most [`MAX_HEAD`] bytes and
//! [`MAX_FIELDS`] fields, no obsolete line folding, one `Content-Length` value, chunk sizes
//! and chunk lines bounded. Anything else fails the exchange with what was wrong.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, EXPECT, HOST};
use http::{HeaderMap, Method, Response, StatusCode, Version};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use busbar_core::trace::{Traceparent, TRACEPARENT, TRACESTATE};
use busbar_core::Body;

use crate::headers::HopByHop;

/// Most header fields taken in an answer head.
pub const MAX_FIELDS: usize = 100;
/// Most bytes of an answer head.
pub const MAX_HEAD: usize = 408 * 1024;
/// Longest chunk-size line (size, extensions and CRLF) and trailer section of a chunked answer.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;
/// Most bytes of chunk extensions in one chunked body (they carry nothing busbar uses).
const MAX_EXTENSIONS: usize = 16 * 1024;
/// The first read size of a connection, and the most it grows to: it doubles after each read
/// that filled it and halves after one that used less than a quarter, so a large answer is
/// read in few system calls and a small one in one, without large buffers for small answers.
pub(crate) const READ_FIRST: usize = 16 * 1024;
pub(crate) const READ_MOST: usize = 256 * 1024;

/// Told how a request body goes out: what an attempt's timeouts and counts need.
pub trait Progress: Send + Sync {
    /// The body has nothing ready: the client is the one holding things up.
    fn waiting(&self);
    /// A frame of `n` bytes was taken from the body to go out.
    fn took(&self, n: usize);
    /// The back end took more of the request.
    fn wrote(&self);
    /// The whole request went out.
    fn ended(&self);
    /// The body failed (the client's error).
    fn failed(&self, e: busbar_core::BoxError);
}

/// The socket of a back-end connection.
pub enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Io {
    fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Why an exchange on a connection failed.
#[derive(Debug)]
pub enum Failure {
    /// The socket failed, or the back end closed the connection before a whole answer.
    Closed(Option<io::Error>),
    /// The answer head (or its chunked framing) broke the protocol: what was wrong.
    Malformed(String),
    /// The request body failed (its source keeps the error for the attempt).
    RequestBody,
}

impl Failure {
    fn io(e: io::Error) -> Self {
        Failure::Closed(Some(e))
    }
}

/// A back-end connection: its socket and what has been read from it and not yet used.
pub struct Conn {
    io: Io,
    rbuf: BytesMut,
    /// Head bytes still to go out (and, coalesced, the first bytes of the body).
    wbuf: Vec<u8>,
    /// Bytes asked of the next read that needs room.
    read_size: usize,
    /// Something was read since the current request began.
    read_any: bool,
    /// Scratch for the positions of an answer's header fields.
    spans: Vec<Span>,
    /// Requests begun on it.
    pub used: u32,
    /// How long the back end said it keeps the connection open while idle (the `timeout` of
    /// its last answer's `Keep-Alive` field).
    pub server_idle: Option<Duration>,
    /// Bytes written to the socket since it opened (over TLS, the plain text).
    sent: u64,
    /// How much of the stream the back end had acknowledged, at most, when the current
    /// request began (TCP's count: the bytes, plus one for the SYN). Over plain TCP, what was
    /// sent before it; over TLS, known only when the connection was looked at when taken.
    acked_before: Option<u64>,
    /// What the kernel said was acknowledged when [`Conn::still_open`] last looked, for the
    /// next request.
    looked: Option<u64>,
}

impl Conn {
    pub fn new(io: Io) -> Self {
        Self {
            io,
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            read_size: READ_FIRST,
            read_any: false,
            spans: Vec::new(),
            used: 0,
            server_idle: None,
            sent: 0,
            acked_before: None,
            looked: None,
        }
    }

    /// For a connection that was idle a while: asks the kernel, with one system call, whether
    /// the back end closed it (the kernel knows of a close before the event loop has seen the
    /// socket readable), and notes how much of the stream the back end had acknowledged, for
    /// [`Conn::never_delivered`]. False when it cannot carry a request.
    pub fn still_open(&mut self) -> bool {
        let state = busbar_os::tcp_state(self.io.tcp().as_fd());
        self.looked = state.as_ref().ok().map(|s| s.bytes_acked);
        !state.is_ok_and(|s| s.peer_closed)
    }

    /// True when the kernel says the back end closed the connection.
    #[cfg(test)]
    pub(crate) fn closed_by_peer(&self) -> bool {
        busbar_os::tcp_state(self.io.tcp().as_fd()).is_ok_and(|s| s.peer_closed)
    }

    /// After a request failed on this connection with nothing read: true when the back end
    /// closed the connection before its TCP took any byte of the request. It sent its FIN (the
    /// read saw the end of the stream, over TLS with or without `close_notify`, or the reset
    /// that came after a FIN: `EPIPE`), and
    /// acknowledged nothing past what came before the request. A server reads only what its
    /// TCP acknowledged, and one that closed its side handles no more requests (it could not
    /// answer them), so the request was never applied and may go again whatever its method:
    /// the back end's idle timeout crossed it.
    pub fn never_delivered(&self, error: Option<&io::Error>) -> bool {
        let Some(before) = self.acked_before else {
            return false;
        };
        let fin = error.is_none_or(|e| {
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
            )
        });
        fin && !self.read_any
            && busbar_os::tcp_state(self.io.tcp().as_fd()).is_ok_and(|s| s.bytes_acked <= before)
    }

    /// Looks, without waiting, whether the back end closed the idle connection or sent
    /// something unasked-for; either way it cannot carry a request. `cx` is woken when that
    /// changes (the pool's sweeper passes its own). The socket is read only when the event
    /// loop has seen it readable, so a live connection costs no system call.
    pub fn poll_gone(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.rbuf.is_empty() {
            return true;
        }
        match self.io.tcp().poll_read_ready(cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                // The end of the stream, an error, bytes nobody asked for, or (TLS) a record
                // with no data in it, such as a session ticket: only the last leaves it usable.
                let mut byte = [0u8; 1];
                let mut buf = ReadBuf::new(&mut byte);
                Pin::new(&mut self.io).poll_read(cx, &mut buf).is_ready()
            }
        }
    }

    /// Nothing came from the back end since the current request began (not even an
    /// interim answer).
    pub fn nothing_read(&self) -> bool {
        !self.read_any
    }

    /// As [`Conn::poll_gone`], waking nobody.
    pub fn gone(&mut self) -> bool {
        self.poll_gone(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// Starts an exchange: `head` is the request head as it goes out, `body` its body;
    /// framing headers are set here.
    pub fn exchange(
        &mut self,
        head: &Outgoing<'_>,
        body: Body,
        progress: Arc<dyn Progress>,
    ) -> Exchange {
        self.used += 1;
        self.read_any = false;
        let looked = self.looked.take();
        self.acked_before = match self.io {
            Io::Plain(_) => Some(1 + self.sent),
            Io::Tls(_) => looked,
        };
        let head_request = *head.method == Method::HEAD;
        let chunked = encode_head(&mut self.wbuf, head, &body);
        let body = (!body.is_end_stream()).then_some(body);
        Exchange {
            upload: Upload {
                body,
                progress,
                chunked,
                frame: Bytes::new(),
                chunk_head: Vec::new(),
                chunk_tail: false,
                finished: false,
                written: 0,
            },
            head_request,
            stopped: None,
        }
    }

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
        let n = ready!(poll_read_some(
            &mut self.io,
            &mut self.rbuf,
            &mut self.read_size,
            left,
            cx
        ))?;
        self.read_any |= n > 0;
        Poll::Ready(Ok(n))
    }
}

/// Reads what `io` has into `rbuf`, with room for `left` more bytes of a body whose length is
/// known (up to the largest read), else for the adaptive `read_size`, which doubles after a read
/// that filled its room and halves after one that used less than a quarter of it. Both sides
/// of busbar's HTTP/1.1 read this way.
pub(crate) fn poll_read_some<R: AsyncRead + Unpin + ?Sized>(
    io: &mut R,
    rbuf: &mut BytesMut,
    read_size: &mut usize,
    left: Option<u64>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    // One byte more than the body has left: a read that does not fill its room tells the event
    // loop the socket is drained, so no read is tried in vain after the body.
    let want = left.map_or(*read_size, |n| n.min(READ_MOST as u64) as usize + 1);
    // An empty buffer is taken back whole (from the front of its allocation if need be) when
    // nothing else holds it and it is large enough, so that a whole message fits in one read,
    // not in the tail the last one left; otherwise it gets a new allocation, rather than one
    // grown from the old, which would copy every byte already used along. A body of known
    // length is read in as few reads as it can be.
    let room = rbuf.capacity() - rbuf.len();
    let at_least = want.max(1024);
    if rbuf.is_empty() {
        if !rbuf.try_reclaim(at_least) {
            *rbuf = BytesMut::with_capacity(at_least);
        }
    } else if room < at_least {
        rbuf.reserve(at_least);
    }
    let room = rbuf.capacity() - rbuf.len();
    let n = ready!(tokio_util::io::poll_read_buf(Pin::new(io), cx, rbuf))?;
    if n == room {
        *read_size = (*read_size * 2).min(READ_MOST);
    } else if n < *read_size / 4 {
        *read_size = (*read_size / 2).max(READ_FIRST);
    }
    Poll::Ready(Ok(n))
}

/// A request head as it goes to the back end, written straight from the flow's head: no copy
/// of its fields is made for an attempt.
pub struct Outgoing<'a> {
    pub method: &'a Method,
    /// The request target: path and query.
    pub target: &'a str,
    /// The flow's fields. Those that describe one connection (RFC 9110 7.6.1), `Host`,
    /// `Expect` (answered on the client's side) and the body's framing do not go out.
    pub headers: &'a HeaderMap,
    /// `Host`: the URL's authority. It goes first (RFC 9110 7.2).
    pub host: &'a HeaderValue,
    /// `Authorization` to send when the flow's head has none that goes out.
    pub authorization: Option<&'a HeaderValue>,
    /// `traceparent` and `tracestate` of the attempt's span: they replace the caller's, and
    /// without a state of its own the caller's `tracestate` does not go out either.
    pub trace: Option<(&'a Traceparent, Option<&'a HeaderValue>)>,
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &HeaderValue) {
    push_raw(out, name, value.as_bytes());
}

/// A field whose value is known to be valid.
fn push_raw(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes `head` into `out`, with the body's framing; true when the body goes chunked.
fn encode_head(out: &mut Vec<u8>, head: &Outgoing<'_>, body: &Body) -> bool {
    out.clear();
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    if head.target.is_empty() {
        out.push(b'/');
    } else {
        out.extend_from_slice(head.target.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    push_field(out, "host", head.host);
    let hop = HopByHop::of(head.headers);
    let mut authorized = false;
    for (name, value) in head.headers {
        let left_out = name == CONTENT_LENGTH
            || name == HOST
            || name == EXPECT
            || hop.contains(name)
            || (head.trace.is_some() && (name == TRACEPARENT || name == TRACESTATE));
        if !left_out {
            authorized |= name == AUTHORIZATION;
            push_field(out, name.as_str(), value);
        }
    }
    if let (Some(auth), false) = (head.authorization, authorized) {
        push_field(out, "authorization", auth);
    }
    if let Some((parent, state)) = head.trace {
        push_raw(out, "traceparent", parent.as_bytes());
        if let Some(state) = state {
            push_field(out, "tracestate", state);
        }
    }
    let chunked = if body.is_end_stream() {
        // A request without content says so where its method usually has some (RFC 9110
        // 8.6), as browsers and hyper do.
        if !matches!(
            *head.method,
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
        ) {
            out.extend_from_slice(b"content-length: 0\r\n");
        }
        false
    } else if let Some(n) = body.size_hint().exact() {
        out.extend_from_slice(b"content-length: ");
        push_number(out, n, 10);
        out.extend_from_slice(b"\r\n");
        false
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        true
    };
    out.extend_from_slice(b"\r\n");
    chunked
}

/// The request as it goes out: its head (in the connection's write buffer), then its body.
pub struct Upload {
    body: Option<Body>,
    progress: Arc<dyn Progress>,
    chunked: bool,
    /// Data of the current frame not yet written.
    frame: Bytes,
    /// The current chunk's size line, not yet written (chunked only).
    chunk_head: Vec<u8>,
    /// The CRLF after the current chunk is still to go.
    chunk_tail: bool,
    /// The whole request is written.
    pub finished: bool,
    /// Bytes written so far, head included.
    pub written: u64,
}

impl Upload {
    /// Writes as much of the request as the socket takes and the body has ready.
    pub fn poll(&mut self, conn: &mut Conn, cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
        loop {
            if self.finished {
                return Poll::Ready(Ok(()));
            }
            // The head, with the first frame's data beside it in the same vectored write when
            // it is ready (one system call for most requests, and no copy of the body).
            if !conn.wbuf.is_empty() {
                if self.frame.is_empty() && !self.chunked && self.body.is_some() {
                    if let Poll::Ready(frame) = self.poll_body(cx) {
                        if let Some(data) = frame? {
                            self.frame = data;
                        }
                    }
                }
                let n = if self.frame.is_empty() {
                    ready!(Pin::new(&mut conn.io).poll_write(cx, &conn.wbuf))
                } else {
                    let bufs = [IoSlice::new(&conn.wbuf), IoSlice::new(&self.frame)];
                    ready!(Pin::new(&mut conn.io).poll_write_vectored(cx, &bufs))
                }
                .map_err(Failure::io)?;
                self.wrote(conn, n)?;
                if n >= conn.wbuf.len() {
                    let rest = n - conn.wbuf.len();
                    conn.wbuf.clear();
                    self.frame.advance(rest);
                } else {
                    conn.wbuf.drain(..n);
                }
                continue;
            }
            if !self.chunk_head.is_empty() {
                let n = ready!(Pin::new(&mut conn.io).poll_write(cx, &self.chunk_head))
                    .map_err(Failure::io)?;
                self.wrote(conn, n)?;
                self.chunk_head.drain(..n);
                continue;
            }
            if !self.frame.is_empty() {
                let n = ready!(Pin::new(&mut conn.io).poll_write(cx, &self.frame))
                    .map_err(Failure::io)?;
                self.wrote(conn, n)?;
                self.frame.advance(n);
                continue;
            }
            if self.chunk_tail {
                self.chunk_tail = false;
                self.chunk_head.extend_from_slice(b"\r\n");
                continue;
            }
            if self.body.is_none() {
                self.finished = true;
                self.progress.ended();
                continue;
            }
            match ready!(self.poll_body(cx))? {
                Some(data) => {
                    if self.chunked {
                        self.chunk_head.clear();
                        push_number(&mut self.chunk_head, data.len() as u64, 16);
                        self.chunk_head.extend_from_slice(b"\r\n");
                        self.chunk_tail = true;
                    }
                    self.frame = data;
                }
                None if self.body.is_none() && self.chunked => {
                    self.chunk_head.extend_from_slice(b"0\r\n\r\n");
                }
                // A frame without data (trailers, which are not sent: an HTTP/1.1 back end is
                // not known to take them), or an empty one.
                None => {}
            }
        }
    }

    /// Counts `n` bytes the socket took; a socket that takes none has failed.
    fn wrote(&mut self, conn: &mut Conn, n: usize) -> Result<(), Failure> {
        if n == 0 {
            return Err(Failure::io(io::ErrorKind::WriteZero.into()));
        }
        self.written += n as u64;
        conn.sent += n as u64;
        self.progress.wrote();
        Ok(())
    }

    /// The body's next data, reported to the progress: `None` for a frame without data, and
    /// at the end (then `body` is gone).
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Failure>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(Ok(None));
        };
        match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Pending => {
                self.progress.waiting();
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => {
                let data = frame.into_data().ok().filter(|d| !d.is_empty());
                self.progress.took(data.as_ref().map_or(0, Bytes::len));
                Poll::Ready(Ok(data))
            }
            Poll::Ready(Some(Err(e))) => {
                self.progress.failed(e);
                Poll::Ready(Err(Failure::RequestBody))
            }
            Poll::Ready(None) => {
                self.body = None;
                Poll::Ready(Ok(None))
            }
        }
    }
}

/// One request and its answer head on a connection.
pub struct Exchange {
    pub upload: Upload,
    head_request: bool,
    /// The socket failed while the request went out: what failed, kept until the answer the
    /// back end may have sent before is read (or not).
    stopped: Option<Failure>,
}

/// How an answer's body is framed (RFC 9112 6.3).
#[derive(Debug)]
pub enum Framing {
    /// No body (an answer to HEAD, 1xx, 204, 304, or `Content-Length: 0`).
    Empty,
    /// This many bytes are left.
    Length(u64),
    /// Chunked, in this state.
    Chunked(Chunk),
    /// Until the back end closes the connection.
    Close,
}

/// Where a chunked body is, and what its framing has held so far.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    at: ChunkAt,
    /// Bytes of chunk extensions in the body so far.
    extensions: usize,
}

impl Chunk {
    /// The start of a chunked body.
    pub const START: Chunk = Chunk {
        at: ChunkAt::Size,
        extensions: 0,
    };
}

#[derive(Debug, Clone, Copy)]
enum ChunkAt {
    /// A chunk-size line is next.
    Size,
    /// This many data bytes of the current chunk are left.
    Data(u64),
    /// The CRLF after a chunk's data is next.
    DataEnd,
    /// The trailer section (after the last chunk), with its bytes and fields so far.
    Trailers(usize, usize),
}

/// An answer head and how its body is framed.
pub struct Answer {
    pub response: Response<()>,
    pub framing: Framing,
    /// The connection may carry another request after this answer's body.
    pub keep: bool,
    /// The `timeout` of a `Keep-Alive` field: how long the back end keeps the connection
    /// open while idle.
    pub server_idle: Option<Duration>,
}

impl Exchange {
    /// Sends the request and reads the answer head; the request may still be going out when
    /// the head arrives.
    pub fn poll(&mut self, conn: &mut Conn, cx: &mut Context<'_>) -> Poll<Result<Answer, Failure>> {
        if self.stopped.is_none() {
            match self.upload.poll(conn, cx) {
                Poll::Ready(Err(Failure::RequestBody)) => {
                    return Poll::Ready(Err(Failure::RequestBody))
                }
                // The back end stopped taking the request, or reset the connection: it may
                // have answered first (a refusal sent before it closed), and that answer is
                // what the client gets.
                Poll::Ready(Err(e)) => self.stopped = Some(e),
                _ => {}
            }
        }
        loop {
            if let Some(mut answer) =
                parse_answer(&mut conn.rbuf, &mut conn.spans, self.head_request)?
            {
                answer.keep &= self.stopped.is_none();
                conn.server_idle = answer.server_idle;
                return Poll::Ready(Ok(answer));
            }
            if conn.rbuf.len() >= MAX_HEAD {
                return Poll::Ready(Err(too_large()));
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) => {
                    return Poll::Ready(Err(self.stopped.take().unwrap_or(Failure::Closed(None))))
                }
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(self.stopped.take().unwrap_or(Failure::io(e)))),
            }
        }
    }

    /// The request stopped going out because the socket failed.
    pub fn stopped(&self) -> bool {
        self.stopped.is_some()
    }
}

fn too_large() -> Failure {
    Failure::Malformed(format!(
        "its head has more than {MAX_FIELDS} header fields or {} KiB",
        MAX_HEAD / 1024
    ))
}

/// Where a header field lies in an answer head: its name's start and end, its value's.
type Span = (usize, usize, usize, usize);

/// Parses one answer head from the front of `buf` (interim 1xx answers are read and dropped).
fn parse_answer(
    buf: &mut BytesMut,
    spans: &mut Vec<Span>,
    head_request: bool,
) -> Result<Option<Answer>, Failure> {
    loop {
        // Left uninitialised: httparse writes the fields it finds, and filling all of them
        // first cost more than the parse of a short head.
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut parsed = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut parsed,
            buf,
            &mut fields,
        ) {
            Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
            Ok(httparse::Status::Complete(_)) => return Err(too_large()),
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
            Err(e) => return Err(Failure::Malformed(malformed(e).to_owned())),
        };
        let code = parsed.code.unwrap_or(0);
        let status = StatusCode::from_u16(code).map_err(|_| {
            Failure::Malformed("the status code is not a number of three digits".into())
        })?;
        let version = if parsed.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        // A 1xx other than 101 is an interim answer: the final one follows.
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            buf.advance(len);
            continue;
        }
        let base = buf.as_ptr() as usize;
        let mut said = Said::default();
        // Where each field's name and value lie in the head (in the connection's own list,
        // reused): the values become slices of the head once it is split off, without a copy.
        spans.clear();
        for h in parsed.headers.iter() {
            said.field(h.name.as_bytes(), h.value);
            let name = h.name.as_ptr() as usize - base;
            let start = h.value.as_ptr() as usize - base;
            spans.push((name, name + h.name.len(), start, start + h.value.len()));
        }
        let head = buf.split_to(len).freeze();
        let mut headers = HeaderMap::with_capacity(spans.len());
        for &(name, name_end, start, end) in spans.iter() {
            let malformed = || Failure::Malformed("a header field is malformed".into());
            let name = HeaderName::from_bytes(&head[name..name_end]).map_err(|_| malformed())?;
            let value =
                HeaderValue::from_maybe_shared(head.slice(start..end)).map_err(|_| malformed())?;
            headers.append(name, value);
        }
        // RFC 9112 6.1: an HTTP/1.0 message has no transfer codings; one that says it has
        // is framed in a way neither side can trust.
        if version == Version::HTTP_10 && said.transfer_encoding {
            return Err(Failure::Malformed(
                "it has Transfer-Encoding in an HTTP/1.0 answer".into(),
            ));
        }
        let (framing, mut keep) = framing(&said, status, head_request)?;
        // RFC 9110 8.6: a list of equal values is one length, sent on as one number.
        if let (true, Some(n)) = (said.length_rewrite, said.length) {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
        }
        keep &= match version {
            Version::HTTP_10 => said.keep_alive,
            _ => !said.close,
        };
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = headers;
        return Ok(Some(Answer {
            response,
            framing,
            keep,
            server_idle: said.idle_seconds.map(Duration::from_secs),
        }));
    }
}

fn malformed(e: httparse::Error) -> &'static str {
    match e {
        // Obsolete line folding (a line that starts with a space) is one of these.
        httparse::Error::HeaderName | httparse::Error::HeaderValue | httparse::Error::NewLine => {
            "a header field is malformed"
        }
        httparse::Error::Status => "the status code is malformed",
        httparse::Error::Version => "the HTTP version is malformed",
        httparse::Error::Token => "the status line is malformed",
        httparse::Error::TooManyHeaders => "it has too many header fields",
    }
}

/// What the fields of an answer head say about its framing and its connection, gathered while
/// they are read (no lookups in the header map afterwards).
#[derive(Default)]
struct Said {
    /// A `Transfer-Encoding` field, how many codings it lists, and whether the last one is
    /// `chunked`.
    transfer_encoding: bool,
    codings: u32,
    chunked: bool,
    /// The `Content-Length` value, or what is wrong with the field.
    length: Option<u64>,
    length_problem: Option<&'static str>,
    /// The value was not one plain number (a list, or several fields): it is sent on as one.
    length_rewrite: bool,
    /// `Connection: close` and `Connection: keep-alive`.
    close: bool,
    keep_alive: bool,
    /// The `timeout` parameter of a `Keep-Alive` field, in seconds (the smallest given).
    idle_seconds: Option<u64>,
}

impl Said {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        let tokens = || {
            value
                .split(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
                .filter(|t| !t.is_empty())
        };
        if name.eq_ignore_ascii_case(b"content-length") {
            self.length_rewrite |= self.length.is_some() || value.contains(&b',');
            for part in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                match parse_decimal(part) {
                    None => self.length_problem = Some("its Content-Length is not a number"),
                    Some(n) if self.length.is_some_and(|l| l != n) => {
                        self.length_problem = Some("it has two different Content-Length values")
                    }
                    Some(n) => self.length = Some(n),
                }
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
            for t in tokens() {
                self.codings += 1;
                self.chunked = t.eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in tokens() {
                self.close |= t.eq_ignore_ascii_case(b"close");
                self.keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"keep-alive") {
            // `timeout=5, max=100` (RFC 2068 19.7.1.1, as Apache httpd and Node.js send it).
            for t in tokens() {
                let Some(eq) = t.iter().position(|b| *b == b'=') else {
                    continue;
                };
                let (key, value) = (&t[..eq], &t[eq + 1..]);
                if key.trim_ascii().eq_ignore_ascii_case(b"timeout") {
                    let value = value.trim_ascii();
                    let value = value
                        .strip_prefix(b"\"")
                        .and_then(|v| v.strip_suffix(b"\""))
                        .unwrap_or(value);
                    if let Some(n) = parse_decimal(value) {
                        self.idle_seconds = Some(self.idle_seconds.map_or(n, |m| m.min(n)));
                    }
                }
            }
        }
    }
}

/// The body framing of an answer (RFC 9112 6.3), and whether it lets the connection be used
/// again.
fn framing(
    said: &Said,
    status: StatusCode,
    head_request: bool,
) -> Result<(Framing, bool), Failure> {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, status != StatusCode::SWITCHING_PROTOCOLS));
    }
    if said.transfer_encoding {
        // Another coding (gzip, …) would reach the client still applied and no longer
        // announced (Transfer-Encoding is hop-by-hop): refused, as busbar decodes none.
        if said.codings != 1 || !said.chunked {
            return Err(Failure::Malformed(
                "its Transfer-Encoding is not chunked alone, and busbar decodes no other coding"
                    .into(),
            ));
        }
        // With a Content-Length too, the encoding decides and the connection is not trusted
        // again (RFC 9112 6.3, point 3).
        let alone = said.length.is_none() && said.length_problem.is_none();
        return Ok((Framing::Chunked(Chunk::START), alone));
    }
    if let Some(problem) = said.length_problem {
        return Err(Failure::Malformed(problem.into()));
    }
    Ok(match said.length {
        Some(0) => (Framing::Empty, true),
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

/// Appends `n` in `radix` (10 or 16, lower-case digits) to `out`, without the formatting
/// machinery: a length goes into every head.
pub(crate) fn push_number(out: &mut Vec<u8>, mut n: u64, radix: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[(n % radix) as usize];
        n /= radix;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Reads the next data of an answer body framed by `framing` from `conn`: `None` at its end.
pub fn poll_body(
    conn: &mut Conn,
    framing: &mut Framing,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Bytes, Failure>>> {
    loop {
        match framing {
            Framing::Empty => return Poll::Ready(None),
            Framing::Length(left) => {
                if !conn.rbuf.is_empty() {
                    let take = (*left).min(conn.rbuf.len() as u64) as usize;
                    *left -= take as u64;
                    let data = conn.rbuf.split_to(take).freeze();
                    if *left == 0 {
                        *framing = Framing::Empty;
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                match ready!(conn.poll_fill_for(cx, Some(*left))) {
                    Ok(0) => return Poll::Ready(Some(Err(Failure::Closed(None)))),
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Some(Err(Failure::io(e)))),
                }
            }
            Framing::Close => {
                if !conn.rbuf.is_empty() {
                    let data = conn.rbuf.split().freeze();
                    return Poll::Ready(Some(Ok(data)));
                }
                match ready!(conn.poll_fill(cx)) {
                    Ok(0) => {
                        *framing = Framing::Empty;
                        return Poll::Ready(None);
                    }
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Some(Err(Failure::io(e)))),
                }
            }
            Framing::Chunked(state) => {
                match step_chunked(&mut conn.rbuf, state).map_err(chunk_error) {
                    Err(e) => return Poll::Ready(Some(Err(e))),
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(data))),
                    Ok(Step::End) => {
                        *framing = Framing::Empty;
                        return Poll::Ready(None);
                    }
                    Ok(Step::Again) => continue,
                    Ok(Step::More) => {}
                }
                match ready!(conn.poll_fill(cx)) {
                    Ok(0) => return Poll::Ready(Some(Err(Failure::Closed(None)))),
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Some(Err(Failure::io(e)))),
                }
            }
        }
    }
}

pub(crate) enum Step {
    Data(Bytes),
    End,
    /// State moved on; look again.
    Again,
    /// More bytes are needed.
    More,
}

fn chunk_error(what: &'static str) -> Failure {
    Failure::Malformed(format!("its chunked body is malformed: {what}"))
}

/// One step of decoding a chunked body from `buf` (RFC 9112 §7.1): chunk-size lines of at most
/// [`MAX_CHUNK_LINE`] bytes whose extensions hold no control character and add up to at most
/// [`MAX_EXTENSIONS`] in the body, and a trailer section of well-formed fields, at most
/// [`MAX_FIELDS`] of them and [`MAX_TRAILERS`] bytes. A bare CR or LF anywhere in the framing
/// is refused: a peer that ends lines there would read other messages from the same bytes.
pub(crate) fn step_chunked(buf: &mut BytesMut, state: &mut Chunk) -> Result<Step, &'static str> {
    match state.at {
        ChunkAt::Size => {
            let Some(eol) = find_crlf(buf) else {
                if buf.len() > MAX_CHUNK_LINE {
                    return Err("a chunk-size line is too long");
                }
                return Ok(Step::More);
            };
            if eol > MAX_CHUNK_LINE {
                return Err("a chunk-size line is too long");
            }
            let line = &buf[..eol];
            let digits = line
                .iter()
                .position(|b| !b.is_ascii_hexdigit())
                .unwrap_or(line.len());
            if digits == 0 || digits > 16 {
                return Err("a chunk size is not a hexadecimal number");
            }
            // After the size: nothing, or extensions (`;name=value`, whitespace allowed
            // before the semicolon), with no control character in them.
            let rest = &line[digits..];
            if !rest.is_empty() {
                let ext = rest.trim_ascii_start();
                if ext.first() != Some(&b';') {
                    return Err("a chunk size is not a hexadecimal number");
                }
                let space = &rest[..rest.len() - ext.len()];
                if space.iter().any(|&b| b != b' ' && b != b'\t')
                    || !ext.iter().all(|&b| field_byte(b))
                {
                    return Err("a chunk extension holds a control character");
                }
                state.extensions += rest.len();
                if state.extensions > MAX_EXTENSIONS {
                    return Err("its chunk extensions are too large");
                }
            }
            let size = line[..digits].iter().fold(0u64, |n, d| {
                (n << 4) | u64::from(char::from(*d).to_digit(16).unwrap_or(0))
            });
            buf.advance(eol + 2);
            state.at = if size == 0 {
                ChunkAt::Trailers(0, 0)
            } else {
                ChunkAt::Data(size)
            };
            Ok(Step::Again)
        }
        ChunkAt::Data(left) => {
            if buf.is_empty() {
                return Ok(Step::More);
            }
            let take = left.min(buf.len() as u64) as usize;
            let data = buf.split_to(take).freeze();
            state.at = if left == take as u64 {
                ChunkAt::DataEnd
            } else {
                ChunkAt::Data(left - take as u64)
            };
            Ok(Step::Data(data))
        }
        ChunkAt::DataEnd => {
            if buf.len() < 2 {
                return Ok(Step::More);
            }
            if &buf[..2] != b"\r\n" {
                return Err("a chunk's data is longer than its size");
            }
            buf.advance(2);
            state.at = ChunkAt::Size;
            Ok(Step::Again)
        }
        ChunkAt::Trailers(seen, fields) => {
            let Some(eol) = find_crlf(buf) else {
                if seen + buf.len() > MAX_TRAILERS {
                    return Err("its trailer section is too large");
                }
                return Ok(Step::More);
            };
            if eol == 0 {
                buf.advance(2);
                return Ok(Step::End);
            }
            if seen + eol + 2 > MAX_TRAILERS {
                return Err("its trailer section is too large");
            }
            if fields == MAX_FIELDS {
                return Err("its trailer section has too many fields");
            }
            if !trailer_field(&buf[..eol]) {
                return Err("a trailer field is malformed");
            }
            buf.advance(eol + 2);
            state.at = ChunkAt::Trailers(seen + eol + 2, fields + 1);
            Ok(Step::Again)
        }
    }
}

/// A byte a field value or chunk extension may hold: visible, space, tab or obs-text.
fn field_byte(b: u8) -> bool {
    b == b'\t' || b == b' ' || (b >= 0x21 && b != 0x7f)
}

/// `name: value` with a token name (RFC 9110 §5.1, §5.6.2) and a value of field bytes.
fn trailer_field(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && value.iter().all(|&b| field_byte(b))
}

pub(crate) fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// After a whole answer: whether bytes the back end sent beyond it make the connection
/// unusable.
pub fn clean_after_answer(conn: &Conn) -> bool {
    conn.rbuf.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use busbar_core::body::Origin;
    use http_body::Frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn answer(text: &str, head_request: bool) -> Result<Option<Answer>, Failure> {
        let mut buf = BytesMut::from(text.as_bytes());
        parse_answer(&mut buf, &mut Vec::new(), head_request)
    }

    fn framed(text: &str) -> (StatusCode, String, bool) {
        match answer(text, false) {
            Ok(Some(a)) => (a.response.status(), format!("{:?}", a.framing), a.keep),
            Ok(None) => panic!("partial: {text:?}"),
            Err(e) => panic!("{text:?}: {e:?}"),
        }
    }

    fn refused(text: &str) -> String {
        match answer(text, false) {
            Err(Failure::Malformed(what)) => what,
            Err(e) => panic!("{text:?}: {e:?}"),
            Ok(_) => panic!("taken: {text:?}"),
        }
    }

    /// One `poll_read_some` off `src` into `rbuf`.
    async fn read_some(src: &mut &[u8], rbuf: &mut BytesMut, read_size: &mut usize) -> usize {
        std::future::poll_fn(|cx| poll_read_some(src, rbuf, read_size, None, cx))
            .await
            .expect("read")
    }

    #[tokio::test]
    async fn an_empty_buffer_is_taken_back_or_replaced_and_what_it_reads_is_whole() {
        let next: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        // Nothing else holds it and it is large enough: the same allocation.
        let mut rbuf = BytesMut::with_capacity(64 * 1024);
        let base = rbuf.as_ptr();
        rbuf.extend_from_slice(&[b'x'; 5000]);
        drop(rbuf.split_to(5000));
        let mut read_size = READ_FIRST;
        let n = read_some(&mut &next[..], &mut rbuf, &mut read_size).await;
        assert_eq!((n, &rbuf[..]), (next.len(), &next[..]));
        let at = rbuf.as_ptr() as usize - base as usize;
        assert!(at + READ_FIRST <= 64 * 1024, "not the same allocation");
        // Too small for the read size: a new allocation with room for it, only the new bytes in.
        let mut rbuf = BytesMut::with_capacity(4096);
        rbuf.extend_from_slice(&[b'y'; 4000]);
        drop(rbuf.split_to(4000));
        let n = read_some(&mut &next[..], &mut rbuf, &mut read_size).await;
        assert_eq!((n, &rbuf[..]), (next.len(), &next[..]));
        assert!(rbuf.capacity() >= READ_FIRST, "room {}", rbuf.capacity());
        // Still held by a message taken from it: that message stays as it was.
        let mut rbuf = BytesMut::with_capacity(64 * 1024);
        rbuf.extend_from_slice(&[b'z'; 1000]);
        let held = rbuf.split_to(1000).freeze();
        let n = read_some(&mut &next[..], &mut rbuf, &mut read_size).await;
        assert_eq!((n, &rbuf[..]), (next.len(), &next[..]));
        assert_eq!(&held[..], &[b'z'; 1000][..]);
        // Not empty: what it held comes first.
        let mut rbuf = BytesMut::with_capacity(1024);
        rbuf.extend_from_slice(&[b'w'; 1000]);
        drop(rbuf.split_to(990));
        let n = read_some(&mut &next[..], &mut rbuf, &mut read_size).await;
        assert_eq!(n, next.len());
        assert_eq!(&rbuf[..10], &[b'w'; 10][..]);
        assert_eq!(&rbuf[10..], &next[..]);
    }

    /// The head `encode_head` writes for `head`, as text.
    fn encoded(head: &Outgoing<'_>, body: &Body) -> (String, bool) {
        let mut out = Vec::new();
        let chunked = encode_head(&mut out, head, body);
        (String::from_utf8(out).expect("text"), chunked)
    }

    #[test]
    fn a_forwarded_head_leaves_out_what_describes_the_hop_and_adds_its_own_fields() {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("x-a", "1"),
            ("host", "client.example"),
            ("connection", "keep-alive, X-Private"),
            ("x-private", "secret"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("expect", "100-continue"),
            ("content-length", "999"),
            ("transfer-encoding", "chunked"),
            ("x-a", "2"),
            (
                "traceparent",
                "00-11111111111111111111111111111111-2222222222222222-01",
            ),
            ("tracestate", "caller=1"),
            ("x-b", ""),
        ] {
            h.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let host = HeaderValue::from_static("backend:9000");
        let auth = HeaderValue::from_static("Basic dTpw");
        let mut context = busbar_core::TraceContext::detached();
        context.trace_id = busbar_core::trace::TraceId(0x3333_3333_3333_3333_3333_3333_3333_3333);
        context.sampled = true;
        let parent = context.traceparent_bytes(busbar_core::trace::SpanId(0x4444_4444_4444_4444));
        let state = HeaderValue::from_static("busbar=2");
        let head = |trace, authorization| Outgoing {
            method: &Method::POST,
            target: "/svc?q=1",
            headers: &h,
            host: &host,
            authorization,
            trace,
        };
        let kept = "x-a: 1\r\nx-a: 2\r\n";
        // Untraced: the caller's trace fields pass as they came.
        let (text, chunked) = encoded(&head(None, None), &Body::full("hello"));
        assert!(!chunked);
        assert_eq!(
            text,
            format!(
                "POST /svc?q=1 HTTP/1.1\r\nhost: backend:9000\r\n{kept}\
                 traceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\
                 tracestate: caller=1\r\nx-b: \r\ncontent-length: 5\r\n\r\n"
            )
        );
        // Traced: the attempt's fields replace the caller's; an added Authorization goes last
        // but one.
        let (text, _) = encoded(
            &head(Some((&parent, Some(&state))), Some(&auth)),
            &Body::full("hello"),
        );
        assert_eq!(
            text,
            format!(
                "POST /svc?q=1 HTTP/1.1\r\nhost: backend:9000\r\n{kept}x-b: \r\n\
                 authorization: Basic dTpw\r\n\
                 traceparent: 00-33333333333333333333333333333333-4444444444444444-01\r\n\
                 tracestate: busbar=2\r\ncontent-length: 5\r\n\r\n"
            )
        );
        // The caller's own Authorization goes out instead of the URL's, unless `Connection`
        // names it: then the URL's does.
        let with_basic = |headers: &HeaderMap| {
            let head = Outgoing {
                headers,
                ..head(None, Some(&auth))
            };
            encoded(&head, &Body::empty()).0
        };
        let mut with_auth = h.clone();
        with_auth.append(AUTHORIZATION, HeaderValue::from_static("Bearer caller"));
        let text = with_basic(&with_auth);
        assert!(text.contains("authorization: Bearer caller\r\n"), "{text}");
        assert!(!text.contains("dTpw"), "{text}");
        with_auth.append(
            http::header::CONNECTION,
            HeaderValue::from_static("authorization"),
        );
        let text = with_basic(&with_auth);
        assert!(text.contains("authorization: Basic dTpw\r\n"), "{text}");
        assert!(!text.contains("Bearer"), "{text}");
        // A span without a state of its own: the caller's tracestate does not go out either.
        let (text, _) = encoded(&head(Some((&parent, None)), None), &Body::empty());
        assert!(!text.contains("tracestate"), "{text}");
        assert!(text.ends_with("content-length: 0\r\n\r\n"), "{text}");
        // An empty target is `/`; a GET without a body says nothing of one.
        let bare = Outgoing {
            method: &Method::GET,
            target: "",
            headers: &HeaderMap::new(),
            host: &host,
            authorization: None,
            trace: None,
        };
        let (text, _) = encoded(&bare, &Body::empty());
        assert_eq!(text, "GET / HTTP/1.1\r\nhost: backend:9000\r\n\r\n");
    }

    #[test]
    fn numbers_are_written_as_format_writes_them() {
        for n in [0, 1, 9, 10, 15, 16, 255, 4096, 65535, 1 << 40, u64::MAX] {
            let (mut dec, mut hex) = (Vec::new(), Vec::new());
            push_number(&mut dec, n, 10);
            push_number(&mut hex, n, 16);
            assert_eq!(dec, n.to_string().into_bytes());
            assert_eq!(hex, format!("{n:x}").into_bytes());
        }
    }

    #[test]
    fn the_framing_of_an_answer_follows_rfc_9112() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                "Length(5)",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
                "Length(5)",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                "Empty",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                "Chunked(Chunk { at: Size, extensions: 0 })",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding:  Chunked \r\n\r\n",
                "Chunked(Chunk { at: Size, extensions: 0 })",
                true,
            ),
            // Both: the encoding decides, and the connection is not trusted again.
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "Chunked(Chunk { at: Size, extensions: 0 })",
                false,
            ),
            // No framing at all: the body runs to the close.
            ("HTTP/1.1 200 OK\r\n\r\n", "Close", false),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
                "Empty",
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
                "Empty",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
                "Length(5)",
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
                "Length(5)",
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive\r\n\r\n",
                "Length(5)",
                true,
            ),
        ];
        for (text, framing, keep) in cases {
            let (_, f, k) = framed(text);
            assert_eq!((f.as_str(), k), (framing, keep), "{text:?}");
        }
    }

    #[test]
    fn a_content_length_list_goes_on_as_one_number() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        ] {
            let a = answer(text, false).ok().flatten().expect("head");
            let values: Vec<_> = a
                .response
                .headers()
                .get_all(CONTENT_LENGTH)
                .iter()
                .collect();
            assert_eq!(values, ["5"], "{text:?}");
        }
    }

    #[test]
    fn interim_answers_are_skipped_and_head_answers_have_no_body() {
        let (status, framing, keep) =
            framed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(
            (status.as_u16(), framing.as_str(), keep),
            (201, "Length(2)", true)
        );
        let a = answer("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .ok()
            .flatten()
            .expect("head");
        assert!(matches!(a.framing, Framing::Empty));
        assert_eq!(a.response.headers()[CONTENT_LENGTH], "9");
        // A 101 is handed back (the caller refuses it) and never reused.
        let (status, _, keep) = framed("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n");
        assert_eq!((status.as_u16(), keep), (101, false));
        // Not complete yet.
        assert!(matches!(
            answer("HTTP/1.1 200 OK\r\nContent-Le", false),
            Ok(None)
        ));
    }

    #[test]
    fn malformed_heads_are_refused_with_what_was_wrong() {
        assert!(
            refused("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n").contains("two different")
        );
        assert!(
            refused("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
                .contains("two different")
        );
        for bad in ["-1", "+5", "0x10", "5 5", "", "99999999999999999999"] {
            let text = format!("HTTP/1.1 200 OK\r\nContent-Length: {bad}\r\n\r\n");
            assert!(refused(&text).contains("not a number"), "{bad:?}");
        }
        assert!(refused("HTTP/1.1 2x0 OK\r\n\r\n").contains("status code"));
        // Codings busbar does not decode, or chunked twice.
        for te in [
            "gzip",
            "gzip, chunked",
            "chunked, identity",
            "chunked, chunked",
            "",
        ] {
            let text = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert!(refused(&text).contains("not chunked alone"), "{te:?}");
        }
        let split =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(refused(split).contains("not chunked alone"));
        // A head over the limit, even when it arrives whole in one read.
        let big = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert!(refused(&big).contains("KiB"));
        assert!(
            refused("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").contains("HTTP/1.0")
        );
        assert!(refused("HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\n\r\n").contains("header field"));
        assert!(refused("HTTP/1.1 200 OK\r\nX-A: o\0ne\r\n\r\n").contains("header field"));
        let fields = |n: usize| -> String {
            let f: String = (0..n).map(|i| format!("X-{i}: v\r\n")).collect();
            format!("HTTP/1.1 200 OK\r\n{f}Content-Length: 0\r\n\r\n")
        };
        assert!(framed(&fields(MAX_FIELDS - 1)).0.is_success());
        assert!(refused(&fields(MAX_FIELDS)).contains("more than 100 header fields"));
    }

    /// Decodes a chunked body fed `step` bytes at a time.
    fn dechunk(wire: &[u8], step: usize) -> Result<Vec<u8>, String> {
        let mut buf = BytesMut::new();
        let mut state = Chunk::START;
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match step_chunked(&mut buf, &mut state) {
                Err(what) => return Err(format!("its chunked body is malformed: {what}")),
                Ok(Step::Data(d)) => out.extend_from_slice(&d),
                Ok(Step::End) => return Ok(out),
                Ok(Step::Again) => {}
                Ok(Step::More) => {
                    if fed == wire.len() {
                        return Err("cut".into());
                    }
                    let next = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_reads_and_refuse_bad_framing() {
        let data: Vec<u8> = (0..80_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = Vec::new();
        let mut at = 0;
        for (i, size) in [1usize, 4095, 4096, 4097, 16_384, 45_417]
            .into_iter()
            .enumerate()
        {
            let ext = if i % 2 == 0 { ";name=\"v\"" } else { " ; a" };
            wire.extend_from_slice(format!("{size:X}{ext}\r\n").as_bytes());
            wire.extend_from_slice(&data[at..at + size]);
            wire.extend_from_slice(b"\r\n");
            at += size;
        }
        wire.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
        for step in [1, 2, 3, 1000, 8192, wire.len()] {
            assert_eq!(
                dechunk(&wire, step).as_deref(),
                Ok(&data[..at]),
                "step {step}"
            );
        }
        let bad = [
            (&b"10000000000000000\r\n"[..], "hexadecimal"),
            (b"zz\r\n", "hexadecimal"),
            (b"\r\n", "hexadecimal"),
            (b"5x\r\nhello\r\n0\r\n\r\n", "hexadecimal"),
            (b"3\r\nhello\r\n0\r\n\r\n", "longer than its size"),
            (b"5 \r\nhello\r\n0\r\n\r\n", "hexadecimal"),
            // A bare LF or CR in a chunk line: a peer ending lines there reads other messages.
            (
                b"3;\nabc\r\n0\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
                "control character",
            ),
            (b"5;a\rb\r\nhello\r\n0\r\n\r\n", "control character"),
            (b"5\n;\r\nhello\r\n0\r\n\r\n", "control character"),
            (b"5;a\x01\r\nhello\r\n0\r\n\r\n", "control character"),
            // Trailer lines are fields, or the next message is swallowed as one.
            (
                b"5\r\nhello\r\n0\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n",
                "trailer field",
            ),
            (b"0\r\nX: y\nGET / HTTP/1.1\r\n\r\n", "trailer field"),
            (b"0\r\nGARBAGE\x01\r\n\r\n", "trailer field"),
            (b"0\r\n: v\r\n\r\n", "trailer field"),
            (b"0\r\nX y: v\r\n\r\n", "trailer field"),
        ];
        for (wire, what) in bad {
            let got = dechunk(wire, 1).expect_err("refused");
            assert!(
                got.contains(what),
                "{:?}: {got}",
                String::from_utf8_lossy(wire)
            );
        }
        let long_line = format!("5;{}\r\n", "x".repeat(MAX_CHUNK_LINE));
        assert!(dechunk(long_line.as_bytes(), 4096)
            .expect_err("refused")
            .contains("too long"));
        let mut trailers = b"0\r\n".to_vec();
        while trailers.len() <= MAX_TRAILERS {
            trailers.extend_from_slice(b"X-T: 0123456789012345678901234567890123456789\r\n");
        }
        trailers.extend_from_slice(b"\r\n");
        assert!(dechunk(&trailers, 100)
            .expect_err("refused")
            .contains("trailer"));
        assert_eq!(dechunk(b"5\r\nhel", 1).expect_err("cut"), "cut");
        let many: String = (0..=MAX_FIELDS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(dechunk(format!("0\r\n{many}\r\n").as_bytes(), 1000)
            .expect_err("refused")
            .contains("too many"));
        let mut extended = Vec::new();
        while extended.len() <= MAX_EXTENSIONS + 4096 {
            extended.extend_from_slice(format!("1;{}\r\nz\r\n", "e".repeat(4000)).as_bytes());
        }
        extended.extend_from_slice(b"0\r\n\r\n");
        assert!(dechunk(&extended, 8192)
            .expect_err("refused")
            .contains("extensions are too large"));
        // What stays accepted: whitespace before extensions, quoted values, trailers.
        let fine = b"5 ;a=\"x y\"\r\nhello\r\n2\t;b\r\n!!\r\n0\r\nX-A: 1\r\nX-B:\t\xe9\r\n\r\n";
        assert_eq!(dechunk(fine, 1).expect("taken"), b"hello!!");
    }

    /// Progress nobody watches.
    struct Quiet;

    impl Progress for Quiet {
        fn waiting(&self) {}
        fn took(&self, _: usize) {}
        fn wrote(&self) {}
        fn ended(&self) {}
        fn failed(&self, _: busbar_core::BoxError) {}
    }

    /// A request body that yields `parts` one at a time, with a pause between them.
    struct Paced {
        parts: std::collections::VecDeque<Bytes>,
        pause: bool,
    }

    impl http_body::Body for Paced {
        type Data = Bytes;
        type Error = busbar_core::BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            // Every other poll is Pending: the sender must cope with a body not yet there.
            self.pause = !self.pause;
            if self.pause {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(self.parts.pop_front().map(|p| Ok(Frame::data(p))))
        }
        fn is_end_stream(&self) -> bool {
            self.parts.is_empty()
        }
    }

    /// Sends `body` on a fresh connection to a raw server that records the request
    /// bytes and answers with `reply`; returns what the server got and the body read back.
    async fn round_trip(body: Body, reply: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = vec![0u8; 7000];
            // Reads until the request is whole: a head, then its framed body.
            loop {
                let n = s.read(&mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
                if n == 0 || request_complete(&got) {
                    break;
                }
            }
            // The answer in pieces, to cross every read size of the client.
            for piece in reply.chunks(7919) {
                s.write_all(piece).await.expect("write");
                tokio::task::yield_now().await;
            }
            got
        });
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut conn = Conn::new(Io::Plain(tcp));
        let answer = post_on(&mut conn, body).await.expect("answer");
        let mut framing = answer.framing;
        let mut back = Vec::new();
        loop {
            match std::future::poll_fn(|cx| poll_body(&mut conn, &mut framing, cx)).await {
                Some(Ok(d)) => back.extend_from_slice(&d),
                Some(Err(e)) => panic!("body: {e:?}"),
                None => break,
            }
        }
        (server.await.expect("server"), back)
    }

    fn request_complete(got: &[u8]) -> bool {
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let body = &got[end + 4..];
        if let Some(cl) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
        {
            return body.len() >= cl.trim().parse::<usize>().expect("length");
        }
        if head.contains("transfer-encoding: chunked") {
            return body.ends_with(b"0\r\n\r\n");
        }
        true
    }

    fn body_of(request: &[u8]) -> (String, &[u8]) {
        let end = request
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("head");
        (
            String::from_utf8_lossy(&request[..end]).into_owned(),
            &request[end + 4..],
        )
    }

    fn payload(n: usize) -> Bytes {
        (0..n).map(|i| (i % 253) as u8).collect::<Vec<u8>>().into()
    }

    #[tokio::test]
    async fn requests_and_answers_cross_every_buffer_size_whole() {
        for n in [
            0,
            1,
            1023,
            1024,
            1025,
            4095,
            4096,
            4097,
            READ_FIRST - 1,
            READ_FIRST,
            READ_FIRST + 1,
            READ_MOST - 1,
            READ_MOST,
            READ_MOST + 1,
            3 * READ_MOST + 17,
        ] {
            let data = payload(n);
            // A whole body: sent with its length; the answer framed by Content-Length.
            let mut reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
            reply.extend_from_slice(&data);
            let (got, back) = round_trip(Body::full(data.clone()), reply).await;
            let (head, body) = body_of(&got);
            if n == 0 {
                assert!(head.contains("content-length: 0"), "{head}");
            } else {
                assert!(head.contains(&format!("content-length: {n}")), "{head}");
            }
            assert_eq!(body, &data[..], "request body of {n}");
            assert_eq!(back, &data[..], "answer body of {n}");

            if n == 0 {
                continue;
            }
            // A streamed body of unknown length: chunked out; the answer chunked back.
            let parts: std::collections::VecDeque<Bytes> =
                data.chunks(4095).map(Bytes::copy_from_slice).collect();
            let streamed = Body::stream(
                Paced {
                    parts,
                    pause: false,
                },
                None,
                Origin::Client,
            );
            let mut reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for c in data.chunks(READ_FIRST - 3) {
                reply.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                reply.extend_from_slice(c);
                reply.extend_from_slice(b"\r\n");
            }
            reply.extend_from_slice(b"0\r\n\r\n");
            let (got, back) = round_trip(streamed, reply).await;
            let (head, body) = body_of(&got);
            assert!(head.contains("transfer-encoding: chunked"), "{head}");
            assert_eq!(
                dechunk(body, 4096).as_deref(),
                Ok(&data[..]),
                "chunked request of {n}"
            );
            assert_eq!(back, &data[..], "chunked answer of {n}");
        }
    }

    /// Reads one whole request off `s` (false at the end of the stream).
    async fn read_request(s: &mut TcpStream) -> bool {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !request_complete(&got) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        true
    }

    /// Sends a POST of `body` on `conn`: the answer head, or why there is none.
    async fn post_on(conn: &mut Conn, body: Body) -> Result<Answer, Failure> {
        let head = Outgoing {
            method: &Method::POST,
            target: "/t",
            headers: &HeaderMap::new(),
            host: &HeaderValue::from_static("h"),
            authorization: None,
            trace: None,
        };
        let mut exchange = conn.exchange(&head, body, Arc::new(Quiet));
        std::future::poll_fn(|cx| exchange.poll(conn, cx)).await
    }

    /// A connection to a back end that has answered one request on it, idle now, and the
    /// back end's side of it.
    async fn used_connection() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            assert!(read_request(&mut s).await);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await
                .expect("answer");
            s
        });
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut conn = Conn::new(Io::Plain(tcp));
        let answer = post_on(&mut conn, Body::full(&b"first"[..]))
            .await
            .expect("first answer");
        assert_eq!(answer.response.status(), StatusCode::OK);
        (conn, server.await.expect("server"))
    }

    /// Waits until the kernel has the back end's FIN on `conn`.
    async fn until_closed(conn: &Conn) {
        for _ in 0..500 {
            if busbar_os::tcp_state(conn.io.tcp().as_fd()).is_ok_and(|s| s.peer_closed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the back end's close never arrived");
    }

    #[tokio::test]
    async fn a_request_that_an_idle_close_crossed_is_told_from_one_the_back_end_took() {
        // The back end closes the idle connection after it was looked at and before the
        // request reaches it (its keep-alive timeout crossing the request).
        let (mut conn, server) = used_connection().await;
        assert!(conn.still_open(), "a live idle connection");
        drop(server);
        until_closed(&conn).await;
        match post_on(&mut conn, Body::full(&b"second"[..])).await {
            Err(Failure::Closed(e)) => {
                assert!(conn.nothing_read());
                assert!(conn.never_delivered(e.as_ref()), "not delivered: {e:?}");
            }
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("an answer from a closed connection"),
        }

        // The back end reads the request (its TCP acknowledges it), then closes without an
        // answer: it may have acted on the request, which must not go again.
        let (mut conn, mut server) = used_connection().await;
        assert!(conn.still_open());
        let took = tokio::spawn(async move {
            let whole = read_request(&mut server).await;
            drop(server);
            whole
        });
        match post_on(&mut conn, Body::full(&b"second"[..])).await {
            Err(Failure::Closed(e)) => assert!(!conn.never_delivered(e.as_ref()), "{e:?}"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("an answer from a closed connection"),
        }
        assert!(took.await.expect("server"), "the back end read the request");

        // Over plain TCP, a connection in steady use, taken without a look, is judged the
        // same way: what went before the request is counted as it is written.
        let (mut conn, server) = used_connection().await;
        drop(server);
        until_closed(&conn).await;
        match post_on(&mut conn, Body::full(&b"second"[..])).await {
            Err(Failure::Closed(e)) => assert!(conn.never_delivered(e.as_ref()), "{e:?}"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("an answer from a closed connection"),
        }

        // A back end that closed before the look: the connection is not taken.
        let (mut conn, server) = used_connection().await;
        drop(server);
        until_closed(&conn).await;
        assert!(!conn.still_open());
    }

    #[test]
    fn a_keep_alive_timeout_is_read_from_the_answer() {
        let idle = |fields: &str| {
            let text = format!("HTTP/1.1 200 OK\r\n{fields}Content-Length: 0\r\n\r\n");
            match answer(&text, false) {
                Ok(Some(a)) => a.server_idle.map(|d| d.as_secs()),
                _ => panic!("{text:?}"),
            }
        };
        assert_eq!(idle(""), None);
        assert_eq!(idle("Keep-Alive: timeout=5\r\n"), Some(5));
        assert_eq!(idle("keep-alive: max=100, Timeout = 15\r\n"), Some(15));
        assert_eq!(idle("Keep-Alive: timeout=\"7\"\r\n"), Some(7));
        assert_eq!(
            idle("Keep-Alive: timeout=9\r\nKeep-Alive: timeout=4\r\n"),
            Some(4)
        );
        assert_eq!(idle("Keep-Alive: timeout=0\r\n"), Some(0));
        for junk in [
            "timeout=",
            "timeout=-1",
            "timeout=5s",
            "timeouts=5",
            "max=5",
            "5",
        ] {
            assert_eq!(idle(&format!("Keep-Alive: {junk}\r\n")), None, "{junk}");
        }
    }
}
