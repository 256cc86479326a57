//! The request path of a proxy listener, top to bottom: match (router) → Exchange (with the
//! path parameters) → `in` sequence → `out` sequence → reply; or `on_error` → the error
//! answer, rendered in one place ([`MediationError::render`]).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::serve::RequestBody;
use busbar_core::body::{BodyError, Origin};
use busbar_core::trace::{TraceContext, TraceId};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError, MessageFormat};
use busbar_sql::DbError;
use http::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{Method, Request, Response, StatusCode};

use crate::access_log::AccessRecord;
use crate::engine::Shared;
use crate::headers::strip_hop_by_hop;
use crate::router::Match;
use crate::runtime::Proxy;
use crate::serve::{
    host_problem, BodyOutcome, BodyTimeout, ConnInfo, Handler, Meter, Metered, PendingAccess,
    ResponseBody,
};
use crate::steps;

/// Serves the proxies of listener number `index` in the current runtime.
#[derive(Debug, Clone)]
pub struct ProxyHandler {
    /// Engine state: the runtime is read per request, so a reload applies to the next one.
    pub shared: Arc<Shared>,
    /// Listener index in the runtime.
    pub index: usize,
    /// The listener's `client_body_timeout`.
    pub body_timeout: Duration,
}

impl Handler for ProxyHandler {
    fn handle(
        &self,
        req: Request<RequestBody>,
        conn: &ConnInfo,
    ) -> impl std::future::Future<Output = Response<ResponseBody>> + Send {
        // The request's future as is, not wrapped in one more: every wrapper is one more copy
        // of it before it first runs.
        handle(&self.shared, self.index, self.body_timeout, req, conn.peer)
    }

    fn refused(&self, status: u16, conn: &ConnInfo) {
        if let Some(log) = self.shared.access_log.load_full() {
            log.log(AccessRecord::unparsed(conn.peer, status));
        }
    }

    fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.shared
            .runtime
            .load()
            .tls
            .get(self.index)
            .cloned()
            .flatten()
    }
}

/// Handles one request on listener `index`; the client may pause its body up to
/// `body_timeout`.
///
/// What comes before the proxy runs (routing, the trace, the meter, the exchange) is done when
/// the future is made rather than when it is first polled, which is right after: the future
/// keeps what the proxy needs, not the request. As an async fn it would keep the request
/// twice, as its argument and as the local the argument is moved into, in memory that is cold
/// when hundreds of connections take turns.
pub fn handle(
    shared: &Shared,
    index: usize,
    body_timeout: Duration,
    req: Request<RequestBody>,
    peer: Option<SocketAddr>,
) -> impl std::future::Future<Output = Response<ResponseBody>> + Send {
    let started = start(shared, index, body_timeout, req, peer);
    async move {
        // Dropped in the order they were made, the exchange first.
        let Started {
            _runtime,
            proxy,
            outcome,
            mut meter,
            mut ex,
        } = match started {
            Ok(started) => started,
            Err(unserved) => return unserved.await,
        };
        // Whoever read the body (a step, or the call streaming it to a back end), a client that
        // stalled its body gets 408, and the connection closes.
        let result = match run_proxy(&proxy, &mut ex).await {
            Err(e) if outcome.timed_out.load(Relaxed) => {
                let mut stalled = MediationError::new(
                    ErrorKind::ClientBody,
                    Blame::Client,
                    format!("The request body stalled for more than {body_timeout:?}"),
                )
                .with_source(e);
                stalled.status = Some(StatusCode::REQUEST_TIMEOUT);
                Err(stalled)
            }
            other => other,
        };
        meter.set_format(ex.format);
        let mut resp = match result {
            Ok(mut resp) => {
                strip_hop_by_hop(resp.headers_mut());
                meter.set_status(resp.status().as_u16());
                meter.set_backend(ex.backend_time);
                resp.map(|inner| ResponseBody::response(inner, meter))
            }
            Err(e) => {
                proxy.counters.error(e.kind);
                log_error(&proxy, &ex, &e);
                meter.set_backend(ex.backend_time);
                error_response(&e, ex.format, Some(meter))
            }
        };
        // Answered while the exchange still holds an unread request body (a `respond` before any
        // read, a header route's fault): a small rest is read so the connection can carry the
        // next request; a larger one is not, and the answer says the connection ends. A body a
        // call took is the back-end connection's to finish (an echo answers while it uploads).
        if !outcome.ended.load(Relaxed) && !http_body::Body::is_end_stream(&ex.request_body) {
            // An answer that closes the connection already (a body too large, or one the
            // memory budget refused) is not held back to read a rest no one needs.
            if resp.headers().get(CONNECTION) != Some(&HeaderValue::from_static("close")) {
                // Boxed: this path's future stays out of every request's.
                Box::pin(drain_small(&mut ex.request_body)).await;
            }
            if !outcome.ended.load(Relaxed) {
                close_after(&mut resp);
            }
        }
        resp
    }
}

/// A request routed to its proxy, ready to run.
struct Started {
    /// The runtime the request was routed in, held as long as the request.
    _runtime: Arc<crate::runtime::Runtime>,
    proxy: Arc<Proxy>,
    outcome: Arc<BodyOutcome>,
    meter: Meter,
    ex: Box<Exchange>,
}

/// The request's future when no proxy runs: the request is answered with an error.
type Unserved = Pin<Box<dyn std::future::Future<Output = Response<ResponseBody>> + Send>>;

/// Routes the request and makes its exchange; or the answer of a request no proxy takes.
fn start(
    shared: &Shared,
    index: usize,
    body_timeout: Duration,
    req: Request<RequestBody>,
    peer: Option<SocketAddr>,
) -> Result<Started, Unserved> {
    if let Some(e) = malformed(&req) {
        tracing::debug!(path = req.uri().path(), "{e}");
        let format = MessageFormat::from_request_headers(req.headers());
        let resp = error_response(&e, format, None);
        return Err(unserved(shared, req, peer, "-", resp));
    }
    let runtime = shared.runtime.load_full();
    let (proxy, params) = match runtime.route(index, req.method(), req.uri().path()) {
        Match::Found { target, params } => (target.clone(), params),
        Match::MethodNotAllowed { target, allow } => {
            let meter = Meter::start(target.counters.clone());
            let e = MediationError::new(
                ErrorKind::MethodNotAllowed,
                Blame::Client,
                format!("Method {} is not allowed here", req.method()),
            );
            target.counters.error(e.kind);
            let format = MessageFormat::from_request_headers(req.headers());
            let mut resp = error_response(&e, format, Some(meter));
            if let Some(allow) = allow_header(&allow) {
                resp.headers_mut().insert(ALLOW, allow);
            }
            return Err(unserved(shared, req, peer, &target.name, resp));
        }
        Match::BadParameter { target, name } => {
            let meter = Meter::start(target.counters.clone());
            let e = MediationError::new(
                ErrorKind::BadRequest,
                Blame::Client,
                format!("The path parameter '{name}' is not UTF-8 once percent-decoded"),
            );
            target.counters.error(e.kind);
            let format = MessageFormat::from_request_headers(req.headers());
            let resp = error_response(&e, format, Some(meter));
            return Err(unserved(shared, req, peer, &target.name, resp));
        }
        Match::NotFound => {
            // Rare enough to look the listener's counters up by name.
            if let Some(name) = runtime.listener_names.get(index) {
                shared
                    .metrics
                    .listener(name)
                    .not_found
                    .fetch_add(1, Relaxed);
            }
            let e = MediationError::new(
                ErrorKind::NotFound,
                Blame::Client,
                format!("No service at {}", req.uri().path()),
            );
            let format = MessageFormat::from_request_headers(req.headers());
            let resp = error_response(&e, format, None);
            return Err(unserved(shared, req, peer, "-", resp));
        }
    };
    let tracing = &runtime.config.config.tracing;
    let sample = tracing.sample;
    let mut trace = if tracing.propagate {
        TraceContext::from_headers(req.headers(), |id| sampled(id, sample))
    } else {
        TraceContext::detached()
    };
    if trace.sampled {
        if let Some(exporter) = shared.exporter.load_full() {
            trace.sink = Some(exporter);
        }
    }
    let server_span = trace
        .start_server_span(|| format!("{} {}", req.method(), proxy.name))
        .map(|mut span| {
            span.set("http.request.method", req.method().as_str());
            span.set("url.path", req.uri().path());
            span.set("busbar.proxy", &*proxy.name);
            if let Some(peer) = peer {
                span.set("client.address", peer.ip().to_string());
            }
            span
        });
    let log = shared.access_log.load_full();
    let bytes_in = log.as_ref().map(|_| Arc::new(AtomicU64::new(0)));
    let pending = log.map(|log| PendingAccess {
        log,
        record: AccessRecord {
            time: SystemTime::now(),
            client: peer,
            method: Some(req.method().clone()),
            target: target_of(req.uri()),
            version: Some(req.version()),
            proxy: proxy.name.clone(),
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            total: Duration::ZERO,
            backend: Duration::ZERO,
            trace_id: Some(trace.trace_id),
            incomplete: false,
        },
        bytes_in: bytes_in.clone().unwrap_or_default(),
        ended: false,
        errored: false,
    });
    let meter = Meter::start(proxy.counters.clone())
        .with_access(pending)
        .with_span(server_span);
    let (parts, incoming) = req.into_parts();
    let exact = http_body::Body::size_hint(&incoming).exact();
    let outcome = Arc::new(BodyOutcome::default());
    if exact == Some(0) || http_body::Body::is_end_stream(&incoming) {
        outcome.ended.store(true, Relaxed);
    }
    let timed = BodyTimeout::new(incoming, body_timeout, outcome.clone());
    let counted = Metered::request(timed, proxy.counters.clone()).counting_into(bytes_in);
    let body = Body::stream(counted, exact, Origin::Client);
    // Boxed: the exchange is the largest part of the request's state, and the future that
    // holds it is moved a few times before it first runs.
    let mut ex = Box::new(Exchange::new(parts, body, proxy.name.clone()));
    ex.params = params;
    ex.trace = trace;
    Ok(Started {
        _runtime: runtime,
        proxy,
        ex,
        meter,
        outcome,
    })
}

/// Marks an answer as the connection's last: sent while the request body is not read to its
/// end (answered early, too large to drain, given up by a call), the connection cannot carry
/// another request, and the client is told so rather than finding it closed.
fn close_after<B>(resp: &mut Response<B>) {
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
}

/// Access-logs a request answered before any proxy ran (malformed, no such path, wrong
/// method): its answer is a small error body, sent whole.
fn log_unserved<B>(
    shared: &Shared,
    req: &Request<B>,
    peer: Option<SocketAddr>,
    proxy: &str,
    resp: &Response<ResponseBody>,
) {
    let Some(log) = shared.access_log.load_full() else {
        return;
    };
    let trace = TraceContext::from_headers(req.headers(), |_| false);
    log.log(AccessRecord {
        time: SystemTime::now(),
        client: peer,
        method: Some(req.method().clone()),
        target: target_of(req.uri()),
        version: Some(req.version()),
        proxy: Arc::from(proxy),
        status: resp.status().as_u16(),
        bytes_in: 0,
        bytes_out: http_body::Body::size_hint(resp.body()).exact().unwrap_or(0),
        total: Duration::ZERO,
        backend: Duration::ZERO,
        trace_id: Some(trace.trace_id),
        incomplete: false,
    });
}

/// The request target as received: path and query.
fn target_of(uri: &http::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned())
}

/// The sampling decision for a new trace: a fixed share of trace ids, the same on every
/// node (the id's low 64 bits against the ratio), so a trace is recorded everywhere or nowhere.
fn sampled(id: TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let threshold = (ratio * u64::MAX as f64) as u64;
    (id.0 as u64) < threshold
}

/// A request refused before routing: a missing or repeated `Host` (RFC 9112 §3.2), or a body
/// on a GET or HEAD sent chunked (the back-end client would send such a request without its
/// body; with Content-Length it is forwarded).
fn malformed<B>(req: &Request<B>) -> Option<MediationError> {
    if let Some(reason) = host_problem(req) {
        return Some(MediationError::new(
            ErrorKind::BadRequest,
            Blame::Client,
            reason,
        ));
    }
    let mut codings = req.headers().get_all(TRANSFER_ENCODING).iter().peekable();
    // Most requests have no Transfer-Encoding: nothing more to look at.
    codings.peek()?;
    // RFC 9112 6.1: a coding the server does not understand is a 501. busbar decodes chunked
    // alone; a body still gzip-coded (say) would reach the back end undeclared.
    let mut count = 0;
    let mut chunked = false;
    for t in codings
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
    {
        count += 1;
        chunked = t.eq_ignore_ascii_case(b"chunked");
    }
    if count != 1 || !chunked {
        return Some(
            MediationError::new(
                ErrorKind::BadRequest,
                Blame::Client,
                "The request's Transfer-Encoding is not chunked alone; busbar decodes no other coding",
            )
            .with_status(http::StatusCode::NOT_IMPLEMENTED),
        );
    }
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return Some(MediationError::new(
            ErrorKind::ClientBody,
            Blame::Client,
            format!(
                "A {} request with a chunked body is not accepted; send it with Content-Length",
                req.method()
            ),
        ));
    }
    None
}

/// `in`, then `out` unless a step answered; on an error, `on_error` decides the answer.
async fn run_proxy(proxy: &Proxy, ex: &mut Exchange) -> Result<Response<Body>, MediationError> {
    if let Some(svc) = &proxy.process {
        // Boxed: a process's future is larger than a proxy's, and most proxies run steps.
        return Box::pin(crate::processes::serve(svc, ex, proxy.cx.body_limit())).await;
    }
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
            // otherwise the original error is answered as usual. Each error is logged once:
            // here when `on_error` answers or fails in its turn, by the caller otherwise.
            match steps::run(&proxy.on_error, ex, &proxy.cx).await {
                Ok(Flow::Respond) => {
                    log_error(proxy, ex, &e);
                    ex.response.take().ok_or(e)
                }
                Ok(Flow::Continue) => Err(e),
                Err(handled) => {
                    log_error(proxy, ex, &e);
                    Err(handled)
                }
            }
        }
    }
}

/// Largest unread request body read and discarded before an error answer, so the client's
/// keep-alive connection survives a fault (larger ones close the connection instead).
const DRAIN_MAX: u64 = 64 * 1024;

/// Reads and discards the rest of a small request body no one read; true when it was read to
/// its end (or had none), so the connection can carry the next request.
async fn drain_small<B>(body: &mut B) -> bool
where
    B: http_body::Body + Unpin,
{
    use bytes::Buf as _;
    use http_body_util::BodyExt as _;
    if body.is_end_stream() {
        return true;
    }
    if body.size_hint().exact().is_some_and(|n| n > DRAIN_MAX) {
        return false;
    }
    let drain = async {
        let mut read = 0u64;
        loop {
            match body.frame().await {
                None => return true,
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |d| d.remaining() as u64);
                    if read > DRAIN_MAX {
                        return false;
                    }
                }
                Some(Err(_)) => return false,
            }
        }
    };
    // A client that stops sending mid-body must not hold the answer back for long.
    tokio::time::timeout(Duration::from_secs(1), drain)
        .await
        .unwrap_or(false)
}

/// An answer sent before any proxy ran (malformed, no such path, wrong method): logged, and
/// the request's body ended (read and dropped when small, else the answer says the
/// connection closes after it).
fn unserved(
    shared: &Shared,
    mut req: Request<RequestBody>,
    peer: Option<SocketAddr>,
    proxy: &str,
    mut resp: Response<ResponseBody>,
) -> Unserved {
    log_unserved(shared, &req, peer, proxy, &resp);
    Box::pin(async move {
        if !drain_small(req.body_mut()).await {
            close_after(&mut resp);
        }
        resp
    })
}

/// Logs an error once, where it is handled: back-end and internal failures as warnings, a
/// database's refusal of a request (a constraint, a value it cannot take) at info level with
/// the database's own message, other client and policy errors at debug level.
fn log_error(proxy: &Proxy, ex: &Exchange, e: &MediationError) {
    let proxy = &*proxy.name;
    let path = ex.request.uri.path();
    let kind = e.kind.as_str();
    match e.blame {
        Blame::Upstream | Blame::Internal => tracing::warn!(proxy, path, kind, "{e}"),
        // The client saw a safe message ("A value is outside what the table accepts"); only
        // the database's says which column or constraint, and an operator needs it at the
        // default level. Its detail never holds bound values (busbar_sql::DbError).
        Blame::Client => match e
            .source
            .as_deref()
            .and_then(|s| s.downcast_ref::<DbError>())
        {
            Some(db) => {
                let step = e.step.as_deref().unwrap_or("sql");
                tracing::info!(proxy, path, kind, "{step}: {}: {}", e.reason, db.detail)
            }
            None => tracing::debug!(proxy, path, kind, "{e}"),
        },
        Blame::Policy => tracing::debug!(proxy, path, kind, "{e}"),
    }
}

/// The answer to an error: a SOAP fault or a JSON problem ([`MediationError::render`]).
pub(crate) fn error_response(
    e: &MediationError,
    format: MessageFormat,
    mut meter: Option<Meter>,
) -> Response<ResponseBody> {
    let (status, rendered) = e.render(format);
    if let Some(m) = &mut meter {
        m.set_status(status.as_u16());
    }
    let body = Body::full(rendered.body);
    let mut resp = Response::new(match meter {
        Some(meter) => ResponseBody::response(body, meter),
        None => ResponseBody::plain(body),
    });
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, rendered.content_type);
    if status == http::StatusCode::SERVICE_UNAVAILABLE {
        // Every 503 (a busy pool, a database or back end down on purpose or not) is worth
        // another try: when the error knows (an open breaker's suspension), or shortly.
        let after = match e.retry_after_secs {
            Some(secs) => HeaderValue::from(secs.get()),
            None => HeaderValue::from_static("1"),
        };
        resp.headers_mut().insert(http::header::RETRY_AFTER, after);
    }
    let over_budget = e
        .source
        .as_deref()
        .and_then(|s| s.downcast_ref::<BodyError>())
        .is_some_and(|b| matches!(b, BodyError::OverBudget { .. }));
    // Only a client's own body that was too large or failed: a back end's answer over
    // `max_body` leaves the request read and the connection fit for the next one.
    if (e.kind == ErrorKind::BodyTooLarge && e.blame == Blame::Client)
        || e.kind == ErrorKind::ClientBody
        || over_budget
    {
        // The rest of the request body was not read (and, over the memory budget, will not
        // be: a client trickling it would keep its connection): the connection cannot carry
        // another request.
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// `GET, PUT` from the methods a path accepts.
fn allow_header(methods: &[Method]) -> Option<HeaderValue> {
    let list: Vec<&str> = methods.iter().map(Method::as_str).collect();
    HeaderValue::from_str(&list.join(", ")).ok()
}
