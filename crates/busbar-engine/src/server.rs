//! Serving client connections: accept loops, the per-connection HTTP/1.1 server and the
//! request handler that runs a proxy's sequences and maps errors to answers in one place.

use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use busbar_core::body::Origin;
use busbar_core::metrics::{Counters, Registry};
use busbar_core::{Body, BoxError, ErrorKind, Exchange, Flow, MediationError, MessageFormat};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::headers::strip_hop_by_hop;
use crate::runtime::{Proxy, Runtime};
use crate::steps;

/// State shared by every worker: the current runtime and the metrics.
#[derive(Debug)]
pub struct Shared {
    /// The runtime serving new requests; swapped whole on reload.
    pub runtime: ArcSwap<Runtime>,
    /// Metrics of the process.
    pub metrics: Arc<Registry>,
    /// True once shutdown started (readiness turns false).
    pub draining: AtomicBool,
}

/// Per-connection HTTP settings of a listener.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    /// Read buffer limit (largest request head).
    pub max_header_size: usize,
    /// Time allowed for a request head.
    pub header_read_timeout: Duration,
    /// Keep connections alive between requests.
    pub keep_alive: bool,
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

/// What a listener serves.
#[derive(Clone)]
pub enum Service {
    /// Proxies of listener number `index` in the current runtime.
    Proxy {
        /// Shared engine state.
        shared: Arc<Shared>,
        /// Listener index in the runtime.
        index: usize,
    },
    /// The echo back end.
    Echo(Arc<crate::echo::EchoOptions>),
}

impl Service {
    /// The TLS config new connections use, from the current runtime (so a reload renews it).
    fn tls_config(&self) -> Option<Arc<rustls::ServerConfig>> {
        match self {
            Service::Proxy { shared, index } => {
                shared.runtime.load().tls.get(*index).cloned().flatten()
            }
            Service::Echo(_) => None,
        }
    }
}

/// Accepts connections on `listener` until `shutdown` turns true.
pub async fn accept_loop(
    listener: StdListener,
    service: Service,
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
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors or a transient network error: back off briefly
                // rather than spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let guard = tracker.enter();
        let tls = service.tls_config();
        let service = service.clone();
        let settings = settings.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, service, settings, shutdown).await,
                Some(config) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    let handshake = acceptor.accept(stream);
                    match tokio::time::timeout(settings.header_read_timeout, handshake).await {
                        Ok(Ok(tls)) => serve_connection(tls, service, settings, shutdown).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(guard);
        });
    }
}

async fn serve_connection<S>(
    stream: S,
    service: Service,
    settings: ConnSettings,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .keep_alive(settings.keep_alive)
        .max_header_size(settings.max_header_size);
    let svc = service_fn(move |req: Request<Incoming>| {
        let service = service.clone();
        async move {
            let resp = match &service {
                Service::Proxy { shared, index } => handle(shared, *index, req).await,
                Service::Echo(opts) => crate::echo::handle(opts, req).await,
            };
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    let mut conn = pin!(conn);
    if *shutdown.borrow() {
        conn.as_mut().graceful_shutdown();
    }
    tokio::select! {
        r = conn.as_mut() => log_conn_end(r),
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            log_conn_end(conn.await);
        }
    }
}

fn log_conn_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        // Clients that disconnect or send garbage are routine for a server: debug level.
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}

/// The response body sent to clients: counts bytes and, when dropped, records latency.
pub struct ResponseBody {
    inner: Body,
    meter: Option<Meter>,
}

struct Meter {
    counters: Arc<Counters>,
    started: Instant,
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.counters.latency.observe(self.started.elapsed());
        self.counters.in_flight.fetch_sub(1, Relaxed);
    }
}

impl ResponseBody {
    /// A body not tied to a proxy's metrics.
    pub fn plain(inner: Body) -> Self {
        Self { inner, meter: None }
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(m)) = (&polled, &this.meter) {
            if let Some(d) = frame.data_ref() {
                m.counters.bytes_out.fetch_add(d.len() as u64, Relaxed);
            }
        }
        if let (Poll::Ready(Some(Err(_))), Some(m)) = (&polled, &this.meter) {
            m.counters.error(ErrorKind::UpstreamReset);
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

/// A request body that counts its bytes into the proxy's metrics as they arrive (chunked
/// bodies included).
struct CountedBody {
    inner: Incoming,
    counters: Arc<Counters>,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(d) = frame.data_ref() {
                self.counters.bytes_in.fetch_add(d.len() as u64, Relaxed);
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

/// Handles one request on listener `index`.
pub async fn handle(
    shared: &Shared,
    index: usize,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let runtime = shared.runtime.load_full();
    let path = req.uri().path();
    let Some(proxy) = runtime.route(index, path).cloned() else {
        let format = MessageFormat::from_request_headers(req.headers());
        let e = MediationError::new(
            ErrorKind::NotFound,
            busbar_core::Blame::Client,
            format!("No service at {path}"),
        );
        return error_response(&e, format, None);
    };
    let counters = proxy.counters.clone();
    counters.requests.fetch_add(1, Relaxed);
    counters.in_flight.fetch_add(1, Relaxed);
    let meter = Meter {
        counters: counters.clone(),
        started: Instant::now(),
    };
    if !proxy.methods.is_empty() && !proxy.methods.contains(req.method()) {
        let format = MessageFormat::from_request_headers(req.headers());
        let e = MediationError::new(
            ErrorKind::MethodNotAllowed,
            busbar_core::Blame::Client,
            format!("Method {} is not allowed here", req.method()),
        );
        counters.error(e.kind);
        return error_response(&e, format, Some(meter));
    }
    let (parts, incoming) = req.into_parts();
    let exact = http_body::Body::size_hint(&incoming).exact();
    let counted = CountedBody {
        inner: incoming,
        counters: counters.clone(),
    };
    let body = Body::stream(counted, exact, Origin::Client);
    let mut ex = Exchange::new(parts, body, proxy.name.clone());
    match run_proxy(&proxy, &mut ex).await {
        Ok(mut resp) => {
            strip_hop_by_hop(resp.headers_mut());
            resp.map(|inner| ResponseBody {
                inner,
                meter: Some(meter),
            })
        }
        Err(e) => {
            counters.error(e.kind);
            log_error(&proxy, &ex, &e);
            drain_small_body(&mut ex.request_body).await;
            error_response(&e, ex.format, Some(meter))
        }
    }
}

/// Largest unread request body read and discarded before an error answer, so the client's
/// keep-alive connection survives a fault (larger ones close the connection instead).
const DRAIN_MAX: u64 = 64 * 1024;

/// Reads and discards the rest of a small request body that no step consumed.
async fn drain_small_body(body: &mut Body) {
    if body.is_buffered() || body.exact_len().is_some_and(|n| n > DRAIN_MAX) {
        return;
    }
    let drain = async { while let Ok(Some(_)) = body.read_chunk(DRAIN_MAX).await {} };
    // A client that stops sending mid-body must not hold the answer back for long.
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

async fn run_proxy(proxy: &Proxy, ex: &mut Exchange) -> Result<Response<Body>, MediationError> {
    let result = async {
        let flow = steps::run(&proxy.in_seq, ex, &proxy.cx).await?;
        if ex.response.is_none() {
            return Err(steps::no_response());
        }
        if flow == Flow::Continue {
            steps::run(&proxy.out_seq, ex, &proxy.cx).await?;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => ex.response.take().ok_or_else(steps::no_response),
        Err(e) if proxy.on_error.is_empty() => Err(e),
        Err(e) => {
            // The error sequence decides the answer when it ends in `respond` or `fault`;
            // otherwise the original error is answered as usual.
            log_error(proxy, ex, &e);
            match steps::run(&proxy.on_error, ex, &proxy.cx).await {
                Ok(Flow::Respond) => ex.response.take().ok_or(e),
                Ok(Flow::Continue) => Err(e),
                Err(handled) => Err(handled),
            }
        }
    }
}

fn log_error(proxy: &Proxy, ex: &Exchange, e: &MediationError) {
    let proxy = &*proxy.name;
    let path = ex.request.uri.path();
    match e.blame {
        busbar_core::Blame::Upstream | busbar_core::Blame::Internal => {
            tracing::warn!(proxy, path, kind = e.kind.as_str(), "{e}")
        }
        _ => tracing::debug!(proxy, path, kind = e.kind.as_str(), "{e}"),
    }
}

fn error_response(
    e: &MediationError,
    format: MessageFormat,
    meter: Option<Meter>,
) -> Response<ResponseBody> {
    let (status, rendered) = e.render(format);
    let mut resp = Response::new(ResponseBody {
        inner: Body::full(rendered.body),
        meter,
    });
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, rendered.content_type);
    if e.kind == ErrorKind::BodyTooLarge || e.kind == ErrorKind::ClientBody {
        // The rest of the request body was not read: the connection cannot carry another
        // request.
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
