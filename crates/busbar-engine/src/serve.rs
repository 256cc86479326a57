//! Serving HTTP/1.1 over a [`Handler`]: worker threads with one `current_thread` event loop
//! each, accept loops (with TLS on accept), connection tracking for a graceful drain, and the
//! one body that meters traffic.
//!
//! Layout: a [`Handler`] answers requests (the proxy path, admin, echo); a [`Job`] is what one
//! worker runs (an accept loop over one socket, or a task); [`spawn_workers`] starts the
//! threads; [`Metered`] counts the bytes of a request or response body and, on the response,
//! records latency and in-flight requests when dropped. A client that stalls is let go:
//! [`SendTimeout`] fails a write the client leaves waiting (`send_timeout`), [`BodyTimeout`] a
//! request body it stops sending (`client_body_timeout`).

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use busbar_core::metrics::Counters;

use busbar_core::trace::Recording;

use crate::access_log::{AccessLog, AccessRecord};
use busbar_core::{Body, BoxError, ErrorKind};
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Frame, SizeHint};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

mod h1;

pub use h1::{RequestBody, RequestBodyError, MAX_FIELDS, MAX_TARGET};

/// Answers the requests of one kind of listener.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. Errors are answers too: a handler never fails.
    fn handle(
        &self,
        req: Request<RequestBody>,
        conn: &ConnInfo,
    ) -> impl Future<Output = Response<ResponseBody>> + Send;

    /// A request the HTTP parser refused on `conn` (malformed, or a head too large): the HTTP
    /// layer answered it with `status` and closes the connection. Nothing by default; a proxy
    /// listener logs it.
    fn refused(&self, _status: u16, _conn: &ConnInfo) {}

    /// The TLS config for a new connection, if the listener speaks HTTPS. Asked on every
    /// accept, so a reload that renews certificates takes effect for new connections.
    fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        None
    }
}

/// What a handler knows about the connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// True when the connection is TLS.
    pub tls: bool,
}

/// Per-connection HTTP settings of a listener.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    /// Read buffer limit (largest request head).
    pub max_header_size: usize,
    /// Time allowed for a request head (and for a TLS handshake).
    pub header_read_timeout: Duration,
    /// Keep connections alive between requests.
    pub keep_alive: bool,
    /// Longest pause while writing to the client before the connection is closed.
    pub send_timeout: Duration,
    /// Where the listener's connections are counted (proxy listeners).
    pub connections: Option<Arc<busbar_core::metrics::ListenerCounters>>,
}

impl Default for ConnSettings {
    fn default() -> Self {
        Self {
            max_header_size: 64 * 1024,
            header_read_timeout: Duration::from_secs(30),
            keep_alive: true,
            send_timeout: Duration::from_secs(60),
            connections: None,
        }
    }
}

/// A request that RFC 9112 §3.2 says to refuse with 400: an HTTP/1.1 request without a `Host`
/// header, any request with more than one, or one whose value is not a host (a name, an IPv4
/// address or a bracketed IPv6 literal, RFC 3986 §3.2.2) with an optional port. The reason, if so.
pub fn host_problem<B>(req: &Request<B>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("The request has more than one Host header"),
        (None, _) if req.version() >= http::Version::HTTP_11 => {
            Some("The request has no Host header")
        }
        (Some(host), None) if !valid_host(host.as_bytes()) => {
            Some("The request's Host header is not a host name or address with an optional port")
        }
        _ => None,
    }
}

/// `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2): a reg-name (unreserved
/// characters, sub-delims and `%XX` escapes; it may be empty), an IPv4 address (a reg-name's
/// characters cover it) or `[` IPv6 or IPvFuture `]`, then a port of at most 65535, whose
/// digits may be left out.
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.strip_prefix(b"[") {
        Some(rest) => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            if !valid_ip_literal(&rest[..end]) {
                return false;
            }
            (&[][..], &rest[end + 1..])
        }
        None => {
            let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
            (&value[..end], &value[end..])
        }
    };
    let port_ok = match port {
        [] | [b':'] => true,
        [b':', digits @ ..] => {
            digits.iter().all(u8::is_ascii_digit)
                && std::str::from_utf8(digits).is_ok_and(|d| d.parse::<u16>().is_ok())
        }
        _ => false,
    };
    port_ok && valid_reg_name(host)
}

/// The bytes a reg-name takes as they are: unreserved characters and sub-delims.
const REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~!$&'()*+,;=";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

/// Unreserved characters, sub-delims and `%XX` escapes (RFC 3986 §3.2.2 `reg-name`).
fn valid_reg_name(name: &[u8]) -> bool {
    // The common case (a name, an address) at one table look-up a byte.
    if name.iter().all(|&b| REG_NAME[usize::from(b)]) {
        return true;
    }
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => {
                if !name
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                {
                    return false;
                }
                i += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// The inside of `[...]`: an IPv6 address (with a zone, `%25` then unreserved characters or
/// escapes, RFC 6874), or an IPvFuture (`v` HEXDIG+ `.` then unreserved, sub-delims or `:`).
fn valid_ip_literal(inside: &[u8]) -> bool {
    if let Some(future) = inside
        .strip_prefix(b"v")
        .or_else(|| inside.strip_prefix(b"V"))
    {
        let Some(dot) = future.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, rest) = (&future[..dot], &future[dot + 1..]);
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !rest.is_empty()
            && rest
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:".contains(&b));
    }
    let Ok(text) = std::str::from_utf8(inside) else {
        return false;
    };
    let (address, zone) = match text.split_once("%25") {
        Some((a, z)) => (a, Some(z)),
        None => (text, None),
    };
    let zone_ok = zone.is_none_or(|z| {
        !z.is_empty()
            && valid_reg_name(z.as_bytes())
            && !z.bytes().any(|b| b"!$&'()*+,;=".contains(&b))
    });
    zone_ok && address.parse::<std::net::Ipv6Addr>().is_ok()
}

/// A connection's stream that fails a write the client has not made room for within `limit`
/// (a client that stopped reading): the connection then ends, and whatever fed the
/// response (a back-end body) is dropped with it.
pub struct SendTimeout<S> {
    inner: S,
    limit: Duration,
    /// Running while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl h1::Stream for SendTimeout<tokio::net::TcpStream> {
    fn tcp(&self) -> &tokio::net::TcpStream {
        &self.inner
    }
}

impl h1::Stream for tokio_rustls::server::TlsStream<SendTimeout<tokio::net::TcpStream>> {
    fn tcp(&self) -> &tokio::net::TcpStream {
        &self.get_ref().0.inner
    }
}

impl<S> SendTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => {
                let limit = self.limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {limit:?} (send_timeout)"),
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.check(cx, polled)
    }
}

/// The error of a request body the client stopped sending ([`BodyTimeout`]).
#[derive(Debug)]
pub struct BodyTimedOut(pub Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client sent nothing of the request body for {:?} (client_body_timeout)",
            self.0
        )
    }
}

impl std::error::Error for BodyTimedOut {}

/// A back end's answer cut because the client's request body failed while it still went out
/// (the back end had answered early, an echo does): the client's error, not the back end's.
#[derive(Debug)]
pub struct ClientBodyFailed(pub BoxError);

impl std::fmt::Display for ClientBodyFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the client's request body failed: {}", self.0)
    }
}

impl std::error::Error for ClientBodyFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

pub use busbar_core::error::AnswerCut;

/// What became of a request body, for the answer: whoever read it (a step, or a call
/// streaming it to a back end).
#[derive(Debug, Default)]
pub struct BodyOutcome {
    /// The client stalled longer than the limit: the answer is a 408.
    pub timed_out: AtomicBool,
    /// The body was read to its end: the connection can carry the client's next request.
    pub ended: AtomicBool,
}

/// A request body that fails when the client sends nothing for `limit` while it is read
/// (`Expect: 100-continue` included: the wait starts when the body is first asked for), and
/// tells its [`BodyOutcome`] whether it timed out or was read to its end.
pub struct BodyTimeout<B> {
    inner: B,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    outcome: Arc<BodyOutcome>,
}

impl<B> BodyTimeout<B> {
    /// Wraps `inner`, reporting to `outcome`.
    pub fn new(inner: B, limit: Duration, outcome: Arc<BodyOutcome>) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
            outcome,
        }
    }
}

impl<B> http_body::Body for BodyTimeout<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let limit = this.limit;
                let timer = this
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    this.outcome.timed_out.store(true, Relaxed);
                    return Poll::Ready(Some(Err(Box::new(BodyTimedOut(limit)))));
                }
                Poll::Pending
            }
            Poll::Ready(frame) => {
                this.stalled = None;
                let ended = match &frame {
                    None => true,
                    Some(Ok(_)) => this.inner.is_end_stream(),
                    Some(Err(_)) => false,
                };
                if ended {
                    this.outcome.ended.store(true, Relaxed);
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Lets at most one line a second through, counting the ones held back.
#[derive(Debug, Default)]
pub struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// `Some(n)` when a line may be written now, `n` being how many were held back since the
    /// last one; `None` to stay quiet.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < Duration::from_secs(1) => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Counts a worker's open connections so shutdown can wait for them.
#[derive(Debug, Default)]
pub struct ConnTracker {
    open: AtomicUsize,
    idle: Notify,
}

impl ConnTracker {
    fn enter(self: &Arc<Self>) -> ConnGuard {
        self.open.fetch_add(1, Relaxed);
        ConnGuard(self.clone())
    }

    /// Waits until every tracked connection has closed.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.open.load(Relaxed) == 0 {
                return;
            }
            notified.await;
        }
    }
}

struct ConnGuard(Arc<ConnTracker>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Relaxed) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// What a worker's event loop gets to start its part.
pub struct WorkerCx {
    /// Turns true when shutdown starts.
    pub shutdown: watch::Receiver<bool>,
    /// The worker's open connections.
    pub tracker: Arc<ConnTracker>,
}

/// One thing a worker runs: an accept loop, or a task.
pub struct Job(Box<dyn FnOnce(&WorkerCx) + Send>);

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl Job {
    /// Accepts connections on `listener` and serves them with `handler`.
    pub fn accept<H: Handler>(
        listener: StdListener,
        handler: Arc<H>,
        settings: ConnSettings,
    ) -> Job {
        Job(Box::new(move |cx: &WorkerCx| {
            tokio::spawn(accept_loop(
                listener,
                handler,
                settings,
                cx.shutdown.clone(),
                cx.tracker.clone(),
            ));
        }))
    }

    /// Runs `task` on the worker's event loop (it ends with the loop).
    pub fn task(task: impl Future<Output = ()> + Send + 'static) -> Job {
        Job(Box::new(move |_: &WorkerCx| {
            tokio::spawn(task);
        }))
    }
}

/// Spreads the sockets of one listener over `workers` workers: socket `i` goes to worker
/// `i % workers`; workers left without one share a clone of a socket (one accept queue).
pub fn spread<H: Handler>(
    sockets: Vec<StdListener>,
    handler: &Arc<H>,
    settings: &ConnSettings,
    per_worker: &mut [Vec<Job>],
) -> io::Result<()> {
    let workers = per_worker.len();
    if sockets.is_empty() || workers == 0 {
        return Ok(());
    }
    let n = sockets.len();
    let mut clones = Vec::new();
    for i in n..workers {
        clones.push(sockets[i % n].try_clone()?);
    }
    for (i, s) in sockets.into_iter().chain(clones).enumerate() {
        s.set_nonblocking(true)?;
        per_worker[i % workers].push(Job::accept(s, handler.clone(), settings.clone()));
    }
    Ok(())
}

/// Starts one thread per entry of `per_worker`, named `{name}-{index}`, each running its jobs
/// on its own event loop until `shutdown` turns true, then waiting up to `drain` for open
/// connections to finish. `init` runs first on each thread with its index.
pub fn spawn_workers(
    name: &str,
    per_worker: Vec<Vec<Job>>,
    shutdown: &watch::Sender<bool>,
    drain: Duration,
    init: fn(usize),
) -> io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::with_capacity(per_worker.len());
    for (index, jobs) in per_worker.into_iter().enumerate() {
        let rx = shutdown.subscribe();
        let t = std::thread::Builder::new()
            .name(format!("{name}-{index}"))
            .spawn(move || {
                init(index);
                run_worker(index, jobs, rx, drain);
            })?;
        threads.push(t);
    }
    Ok(threads)
}

fn run_worker(index: usize, jobs: Vec<Job>, shutdown: watch::Receiver<bool>, drain: Duration) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, worker = index, "cannot start worker event loop");
            return;
        }
    };
    rt.block_on(async move {
        let mut cx = WorkerCx {
            shutdown,
            tracker: Arc::new(ConnTracker::default()),
        };
        for job in jobs {
            (job.0)(&cx);
        }
        let _ = cx.shutdown.wait_for(|stop| *stop).await;
        if tokio::time::timeout(drain, cx.tracker.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                worker = index,
                "drain timeout: closing the remaining connections"
            );
        }
    });
    // Work handed to the blocking pool (a long transform) is abandoned, not waited for: the
    // drain timeout bounds the stop.
    rt.shutdown_timeout(Duration::from_millis(100));
}

/// Accepts connections on `listener` until `shutdown` turns true.
async fn accept_loop<H: Handler>(
    listener: StdListener,
    handler: Arc<H>,
    settings: ConnSettings,
    mut shutdown: watch::Receiver<bool>,
    tracker: Arc<ConnTracker>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot register listener");
            return;
        }
    };
    let mut log = LogLimiter::default();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors or a transient network error: back off briefly
                // rather than spinning, and log at most a line a second.
                if let Some(suppressed) = log.allow(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let stream = SendTimeout::new(stream, settings.send_timeout);
        let guard = tracker.enter();
        let counted = settings.connections.clone().map(ConnCount::enter);
        let tls = handler.tls();
        let handler = handler.clone();
        let settings = settings.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut info = ConnInfo {
                peer: Some(peer),
                tls: false,
            };
            match tls {
                None => serve_connection(stream, handler, info, settings, shutdown).await,
                Some(config) => {
                    info.tls = true;
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    let handshake = acceptor.accept(stream);
                    match tokio::time::timeout(settings.header_read_timeout, handshake).await {
                        Ok(Ok(tls)) => {
                            serve_connection(tls, handler, info, settings, shutdown).await
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(guard);
            drop(counted);
        });
    }
}

/// A client connection counted open for as long as it lives.
struct ConnCount(Arc<busbar_core::metrics::ListenerCounters>);

impl ConnCount {
    fn enter(c: Arc<busbar_core::metrics::ListenerCounters>) -> Self {
        c.accepted.fetch_add(1, Relaxed);
        c.open.fetch_add(1, Relaxed);
        ConnCount(c)
    }
}

impl Drop for ConnCount {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

async fn serve_connection<S, H>(
    stream: S,
    handler: Arc<H>,
    info: ConnInfo,
    settings: ConnSettings,
    shutdown: watch::Receiver<bool>,
) where
    S: h1::Stream + 'static,
    H: Handler,
{
    h1::serve(Box::new(stream), &*handler, &info, &settings, &shutdown).await;
}

/// Holds a request in flight: when dropped (the response body ended or was abandoned) it
/// records the latency and the end of the request.
pub struct Meter {
    counters: Arc<Counters>,
    started: Instant,
    /// The format the request's errors are answered in.
    format: busbar_core::MessageFormat,
    access: Option<Box<PendingAccess>>,
    span: Option<Box<SpanEnd>>,
}

/// The server span of a request, ended with the request.
#[derive(Debug)]
struct SpanEnd {
    span: Recording,
    status: u16,
    bytes_out: u64,
    ended: bool,
    errored: bool,
}

/// An access log record waiting for the end of its response.
#[derive(Debug)]
pub struct PendingAccess {
    /// Where it goes.
    pub log: Arc<AccessLog>,
    /// The record; sizes, durations and completeness are filled in at the end.
    pub record: AccessRecord,
    /// The request body's bytes, counted by its [`Metered`] body.
    pub bytes_in: Arc<AtomicU64>,
    /// The response body reached its end.
    pub ended: bool,
    /// The response body failed on the way.
    pub errored: bool,
}

impl Meter {
    /// Starts metering one request on `counters`: counts it and marks it in flight.
    pub fn start(counters: Arc<Counters>) -> Meter {
        counters.requests.fetch_add(1, Relaxed);
        counters.in_flight.fetch_add(1, Relaxed);
        Meter {
            counters,
            started: Instant::now(),
            format: busbar_core::MessageFormat::Problem,
            access: None,
            span: None,
        }
    }

    /// The counters this meter records into.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Writes `pending` to the access log when the request ends (with the response's status
    /// set here and its body's size counted as it is sent).
    pub fn with_access(mut self, pending: Option<PendingAccess>) -> Meter {
        self.access = pending.map(Box::new);
        self
    }

    /// Ends `span` (the request's server span) when the request ends.
    pub fn with_span(mut self, span: Option<Recording>) -> Meter {
        self.span = span.map(|span| {
            Box::new(SpanEnd {
                span,
                status: 0,
                bytes_out: 0,
                ended: false,
                errored: false,
            })
        });
        self
    }

    fn body_bytes(&mut self, n: u64, end: bool) {
        if let Some(a) = &mut self.access {
            a.record.bytes_out += n;
            a.ended |= end;
        }
        if let Some(s) = &mut self.span {
            s.bytes_out += n;
            s.ended |= end;
        }
    }

    fn body_end(&mut self, error: bool) {
        if let Some(a) = &mut self.access {
            a.ended |= !error;
            a.errored |= error;
        }
        if let Some(s) = &mut self.span {
            s.ended |= !error;
            s.errored |= error;
        }
    }

    /// Sets the back-end time the access log records.
    pub fn set_backend(&mut self, backend: Duration) {
        if let Some(a) = &mut self.access {
            a.record.backend = backend;
        }
    }

    /// Sets the format the request's errors are answered in.
    pub fn set_format(&mut self, format: busbar_core::MessageFormat) {
        self.format = format;
    }

    /// Sets the status the access log records.
    pub fn set_status(&mut self, status: u16) {
        if let Some(a) = &mut self.access {
            a.record.status = status;
        }
        if let Some(s) = &mut self.span {
            s.status = status;
        }
    }
}

/// The access log status of a request that ended before it had an answer: the client closed
/// the connection first (or shutdown abandoned it after the drain timeout). Nothing was sent;
/// 499 is nginx's "client closed request".
pub const CLIENT_CLOSED: u16 = 499;

impl Drop for Meter {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        self.counters.latency.observe(elapsed);
        self.counters.in_flight.fetch_sub(1, Relaxed);
        if let Some(s) = self.span.take() {
            let SpanEnd {
                mut span,
                status,
                bytes_out,
                ended,
                errored,
            } = *s;
            if status == 0 {
                // No answer was sent: no status code (OpenTelemetry's HTTP conventions set it
                // only for a response), and the span says why.
                span.set("error.type", "cancelled");
                span.fail("the client closed the connection before the answer");
            } else {
                span.set("http.response.status_code", i64::from(status));
                span.set("http.response.body.size", bytes_out);
                if status >= 500 {
                    span.fail(format!("answered {status}"));
                } else if errored || !ended {
                    span.fail("the response body was not sent whole");
                }
            }
            span.finish();
        }
        if let Some(mut a) = self.access.take() {
            if a.record.status == 0 {
                a.record.status = CLIENT_CLOSED;
            }
            a.record.total = elapsed;
            a.record.bytes_in = a.bytes_in.load(Relaxed);
            a.record.incomplete = !a.ended || a.errored;
            a.log.log(a.record);
        }
    }
}

/// Which byte counter a [`Metered`] body adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

/// A body that counts its bytes into a proxy's metrics as they pass (chunked bodies
/// included). As a response body it also holds the request's [`Meter`], so latency covers the
/// whole answer, and a failing response stream counts as an upstream reset.
pub struct Metered<B> {
    inner: B,
    counters: Option<Arc<Counters>>,
    direction: Direction,
    /// Held for its `Drop`: the request ends when the response body does.
    _meter: Option<Meter>,
    /// This request's own byte count (for the access log), besides the proxy's.
    own: Option<Arc<AtomicU64>>,
}

/// The response body sent to clients.
pub type ResponseBody = Metered<Body>;

/// The kind a back end's failed answer body counts as: its [`AnswerCut`]'s, anywhere in its
/// causes, or `upstream_reset`.
fn cut_kind(e: &BoxError) -> ErrorKind {
    AnswerCut::kind_in(e.as_ref()).unwrap_or(ErrorKind::UpstreamReset)
}

/// True when `e`, or an error it wraps, is the client's: its request body failed (reset,
/// malformed, stalled past `client_body_timeout`).
fn client_caused(e: &BoxError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        if c.is::<BodyTimedOut>()
            || c.is::<ClientBodyFailed>()
            || matches!(
                c.downcast_ref::<busbar_core::BodyError>(),
                Some(busbar_core::BodyError::Read {
                    origin: busbar_core::body::Origin::Client,
                    ..
                })
            )
        {
            return true;
        }
        cause = c.source();
    }
    false
}

impl ResponseBody {
    /// A body not tied to any metrics (admin, echo, unknown paths).
    pub fn plain(inner: Body) -> Self {
        Self {
            inner,
            counters: None,
            direction: Direction::Out,
            _meter: None,
            own: None,
        }
    }

    /// The answer to send instead of this one, whose body failed with `e` before any of it
    /// was sent: the error answer for a failed back end (a back end that closed the connection
    /// right after its head, or whose first chunk was malformed), in the request's format and
    /// counted into the same meter. `None` when the failure is the client's, or the body has
    /// no request to answer.
    pub fn failed_before_sending(mut self, e: &BoxError) -> Option<Response<ResponseBody>> {
        if client_caused(e) {
            return None;
        }
        let mut meter = self._meter.take()?;
        let failure = busbar_core::MediationError::new(
            cut_kind(e),
            busbar_core::Blame::Upstream,
            format!("The back end's answer failed before its body: {e}"),
        );
        // The cut this body recorded is replaced by a whole error answer.
        if let Some(a) = &mut meter.access {
            a.errored = false;
        }
        if let Some(s) = &mut meter.span {
            s.errored = false;
        }
        let format = meter.format;
        Some(crate::proxy::error_response(&failure, format, Some(meter)))
    }

    /// A response body counted into `meter`'s counters; the meter ends when the body is done.
    pub fn response(inner: Body, mut meter: Meter) -> Self {
        if http_body::Body::is_end_stream(&inner) {
            meter.body_bytes(0, true);
        }
        Self {
            inner,
            counters: Some(meter.counters.clone()),
            direction: Direction::Out,
            _meter: Some(meter),
            own: None,
        }
    }
}

impl<B> Metered<B> {
    /// A request body whose bytes are counted as received into `counters`.
    pub fn request(inner: B, counters: Arc<Counters>) -> Self {
        Self {
            inner,
            counters: Some(counters),
            direction: Direction::In,
            _meter: None,
            own: None,
        }
    }

    /// Also counts the bytes into `own` (this request's count, for the access log).
    pub fn counting_into(mut self, own: Option<Arc<AtomicU64>>) -> Self {
        self.own = own;
        self
    }
}

impl<B> http_body::Body for Metered<B>
where
    B: http_body::Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(counters) = &this.counters {
            match (&polled, this.direction) {
                (Poll::Ready(Some(Ok(frame))), dir) => {
                    if let Some(d) = frame.data_ref() {
                        let n = d.len() as u64;
                        match dir {
                            Direction::In => counters.bytes_in.fetch_add(n, Relaxed),
                            Direction::Out => counters.bytes_out.fetch_add(n, Relaxed),
                        };
                        if let Some(own) = &this.own {
                            own.fetch_add(n, Relaxed);
                        }
                        let end = this.inner.is_end_stream();
                        if let (Some(m), Direction::Out) = (this._meter.as_mut(), dir) {
                            m.body_bytes(n, end);
                        }
                    }
                }
                (Poll::Ready(None), Direction::Out) => {
                    if let Some(m) = this._meter.as_mut() {
                        m.body_end(false);
                    }
                }
                (Poll::Ready(Some(Err(e))), Direction::Out) => {
                    if let Some(m) = this._meter.as_mut() {
                        m.body_end(true);
                    }
                    // Where a streamed answer's failure is handled: the client's copy is cut.
                    // A back end that answered while the client was still uploading loses its
                    // connection when the client's body fails: that is the client's doing.
                    if client_caused(e) {
                        counters.error(ErrorKind::ClientBody);
                        tracing::debug!(kind = "client_body", "response cut mid-body: {e}");
                    } else {
                        let kind = cut_kind(e);
                        counters.error(kind);
                        tracing::warn!(kind = kind.as_str(), "response cut mid-body: {e}");
                    }
                }
                _ => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_limiter_lets_one_line_a_second_through_and_counts_the_rest() {
        let mut log = LogLimiter::default();
        let t0 = Instant::now();
        assert_eq!(log.allow(t0), Some(0));
        assert_eq!(log.allow(t0 + Duration::from_millis(10)), None);
        assert_eq!(log.allow(t0 + Duration::from_millis(999)), None);
        assert_eq!(log.allow(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(log.allow(t0 + Duration::from_millis(1500)), None);
    }

    #[test]
    fn host_is_required_once_from_http_1_1() {
        let req = |version, hosts: &[&str]| {
            let mut b = Request::builder().version(version).uri("/");
            for h in hosts {
                b = b.header(http::header::HOST, *h);
            }
            b.body(()).unwrap_or_default()
        };
        assert!(host_problem(&req(http::Version::HTTP_11, &[])).is_some());
        assert!(host_problem(&req(http::Version::HTTP_11, &["a", "b"])).is_some());
        assert!(host_problem(&req(http::Version::HTTP_10, &["a", "b"])).is_some());
        assert!(host_problem(&req(http::Version::HTTP_11, &["a"])).is_none());
        assert!(host_problem(&req(http::Version::HTTP_10, &[])).is_none());
    }

    #[test]
    fn host_must_be_a_host_with_an_optional_port() {
        let problem = |host: &str| {
            let req = Request::builder()
                .uri("/")
                .header(http::header::HOST, host)
                .body(())
                .unwrap_or_default();
            host_problem(&req)
        };
        for good in [
            "example.com",
            "example.com:8080",
            "host:",
            "",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[v1.fe80::a+en1]",
            "[fe80::1%25en0]:8080",
            "[fe80::1%25eth%2E0]",
            "my-host_1~x",
            "caf%C3%A9.example",
            "a!$&'()*+,;=b",
        ] {
            assert_eq!(problem(good), None, "{good:?}");
        }
        for bad in [
            "a b",
            "x/y",
            "x@y",
            "x:99999",
            "x:8o",
            "x:1:2",
            "[::1",
            "[::1]x",
            "[x]",
            "x\ty",
            "%zz",
            "%4",
            "a?b",
            "a#b",
            "[fe80::1%25]",
            "[fe80::1%en0]",
            "[::1%25a+b]",
        ] {
            assert!(problem(bad).is_some(), "{bad:?}");
        }
    }
}
