//! The pooled client to one back-end URL: per-worker pools of keep-alive HTTP/1.1 connections,
//! plain or TLS.
//!
//! Each worker thread has its own idle list (no cross-core sharing on the hot path; the mutex
//! is uncontended). A connection goes back to its pool only when the response body has been
//! read to its end; a response dropped early (client gone) aborts the connection, so the back
//! end sees the cancellation. An optional semaphore caps the requests in progress, with a
//! bounded queue in front of it.
//!
//! The request body reports to a [`Sending`] as it goes out, so the attempt knows who it is
//! waiting for: the client (a slow upload is not the back end's fault, and a request body that
//! fails is the client's error), or the back end (it stopped reading the request, or it has
//! the whole request and has not answered within `timeout`).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use busbar_core::body::Origin;
use busbar_core::metrics::{Counters, UpstreamCounters};
use busbar_core::{Blame, Body, BodyError, BoxError, ErrorKind, MediationError};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{Method, Response, StatusCode, Uri, Version};
use http_body::{Frame, SizeHint};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::breaker::Breaker;
use super::h1::{self, Conn};
use super::retry::ReplayProbe;
use super::tls::TlsTarget;
use crate::headers::strip_hop_by_hop;

/// Connection settings of one URL, from its endpoint's config.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Time to open a connection (TCP and TLS handshake), and the longest wait in the queue.
    pub connect_timeout: Duration,
    /// Time to the response head once the request is sent, the longest pause while the back
    /// end does not read the request body, and the longest pause while the response body
    /// streams.
    pub timeout: Duration,
    /// The most one attempt may take, from when it starts sending the request to the last
    /// byte of the answer's body; none when `None`.
    pub deadline: Option<Duration>,
    /// Idle connections kept per worker.
    pub pool_size: usize,
    /// Longest idle time of a pooled connection.
    pub keep_alive: Duration,
    /// Requests in progress at once, when limited.
    pub max_connections: Option<usize>,
    /// Requests that may wait for one of `max_connections`.
    pub queue: usize,
}

/// What a URL's health is made of, for its client: its counters, its breaker, and the statuses
/// its endpoint counts as failures. Response bodies keep it, so a body the back end cuts short
/// counts as a failure of its URL after the call returned.
#[derive(Debug)]
pub struct UrlHealth {
    /// Counters of the URL.
    pub stats: Arc<UpstreamCounters>,
    /// Its circuit breaker, if the endpoint has one.
    pub breaker: Option<Arc<Breaker>>,
    /// Statuses that make an answer a failure (`breaker.on_status`, `failover.on_status`,
    /// `retry_on_status`).
    pub fails_on: Vec<StatusCode>,
}

/// A path a shaped `call` appends to the endpoint URL's path (starts with `/`, already
/// percent-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSuffix(pub String);

/// The pooled client to one URL.
#[derive(Debug)]
pub struct Upstream {
    /// The URL with credentials redacted: what errors and metrics show.
    pub label: Arc<str>,
    /// Name of the endpoint this URL belongs to, for error messages.
    endpoint: Arc<str>,
    /// Added to error messages of endpoints with several URLs, to say which one failed.
    suffix: String,
    connect_addr: String,
    host_header: HeaderValue,
    /// The URL's path and query: the request target when the call adds neither a path nor a
    /// query.
    target: Uri,
    basic_auth: Option<HeaderValue>,
    tls: Option<TlsTarget>,
    settings: UpstreamSettings,
    pools: Arc<Pools>,
    limit: Option<Limit>,
    counters: Arc<Counters>,
    /// Counters of this URL.
    pub stats: Arc<UpstreamCounters>,
    /// What its response bodies report to.
    body_cx: Arc<BodyContext>,
}

/// What a response body reports to once its call returned: one per URL, shared by its bodies.
#[derive(Debug)]
struct BodyContext {
    counters: Arc<Counters>,
    health: UrlHealth,
    endpoint: Arc<str>,
    /// As [`Upstream::suffix`].
    suffix: String,
    /// As [`UpstreamSettings::deadline`]: what a body cut at its deadline says.
    deadline: Option<Duration>,
}

#[derive(Debug)]
struct Limit {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    max: usize,
    queue: usize,
}

/// The idle lists, one per worker; shared with the leases that return connections to them.
///
/// Each list has a sweeper task on its worker, started when the list first keeps a connection:
/// it closes connections idle for `keep_alive`, waking when the oldest one is due, and drops
/// those the back end closed as soon as their sockets say so (it looks at each connection put
/// back within [`LOOK_AGAIN`], and is woken by the sockets it has looked at). Nothing of it runs
/// on the request path.
#[derive(Debug)]
struct Pools {
    lists: Vec<Mutex<IdleList>>,
    pool_size: usize,
    keep_alive: Duration,
    /// Where the number of idle connections is shown (`busbar_upstream_idle_connections`).
    stats: Arc<UpstreamCounters>,
}

#[derive(Debug, Default)]
struct IdleList {
    idle: Vec<Idle>,
    /// Its sweeper was started.
    swept: bool,
}

struct Idle {
    conn: Box<Conn>,
    since: Instant,
    /// When it is closed: `keep_alive` after `since`, or sooner when the back end said it
    /// keeps idle connections for less.
    until: Instant,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle")
            .field("since", &self.since)
            .field("until", &self.until)
            .finish()
    }
}

/// The sweeper's longest sleep when its list is empty: a connection put back meanwhile is due
/// no earlier than `keep_alive` after, so it is never late.
const MIN_SWEEP: Duration = Duration::from_millis(100);

/// The longest a connection put back waits for the sweeper's first look: a back end that
/// closes it before then is noticed when the connection is taken, or at that look.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// A connection idle for longer than this is asked of its socket when taken
/// ([`Conn::still_open`]): a back end's idle timeout may have closed it a moment ago, before
/// the event loop saw it. Connections in steady use are taken sooner and cost nothing.
const LOOK_AFTER: Duration = Duration::from_millis(100);

/// How long a connection may stay idle in the pool when the back end said (`Keep-Alive:
/// timeout=N`) that it keeps idle connections `said`: a second less, so that its close does
/// not cross a request on the way; half of it when it is under two seconds.
fn short_of(said: Duration) -> Duration {
    if said >= Duration::from_secs(2) {
        said - Duration::from_secs(1)
    } else {
        said / 2
    }
}

impl Pools {
    fn new(
        workers: usize,
        pool_size: usize,
        keep_alive: Duration,
        stats: Arc<UpstreamCounters>,
    ) -> Self {
        Self {
            lists: (0..workers).map(|_| Mutex::default()).collect(),
            pool_size,
            keep_alive,
            stats,
        }
    }

    fn index(&self) -> usize {
        super::worker_index() % self.lists.len()
    }

    fn lock(&self, index: usize) -> std::sync::MutexGuard<'_, IdleList> {
        self.lists[index].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put_back(self: &Arc<Self>, conn: Box<Conn>) {
        if self.pool_size == 0 {
            return;
        }
        let keep = conn
            .server_idle
            .map_or(self.keep_alive, |said| self.keep_alive.min(short_of(said)));
        if keep.is_zero() {
            return;
        }
        let index = self.index();
        let mut pool = self.lock(index);
        if pool.idle.len() >= self.pool_size {
            return;
        }
        let since = Instant::now();
        pool.idle.push(Idle {
            conn,
            since,
            until: since + keep,
        });
        self.stats.idle.fetch_add(1, Relaxed);
        if !pool.swept {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                pool.swept = true;
                rt.spawn(sweeper(Arc::downgrade(self), index));
            }
        }
    }

    fn take_idle(&self) -> Option<Box<Conn>> {
        let mut pool = self.lock(self.index());
        while let Some(mut idle) = pool.idle.pop() {
            self.stats.idle.fetch_sub(1, Relaxed);
            let now = Instant::now();
            if now < idle.until
                && !idle.conn.gone()
                && (now - idle.since < LOOK_AFTER || idle.conn.still_open())
            {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Closes the connections of list `index` idle for `keep_alive` and those the back end
    /// closed, and has `cx` woken when one of the others is; says when the next one is due.
    fn sweep(&self, index: usize, cx: &mut Context<'_>) -> Option<Instant> {
        let now = Instant::now();
        let mut pool = self.lock(index);
        let before = pool.idle.len();
        pool.idle
            .retain_mut(|idle| now < idle.until && !idle.conn.poll_gone(cx));
        let closed = before - pool.idle.len();
        if closed > 0 {
            self.stats.idle.fetch_sub(closed as i64, Relaxed);
        }
        pool.idle.iter().map(|i| i.until).min()
    }
}

/// Sweeps one idle list until its pools go away (a reload replaced them).
async fn sweeper(pools: std::sync::Weak<Pools>, index: usize) {
    let mut timer = Box::pin(tokio::time::sleep(MIN_SWEEP));
    std::future::poll_fn(|cx| loop {
        let Some(pools) = pools.upgrade() else {
            return Poll::Ready(());
        };
        let look = Instant::now() + pools.keep_alive.max(MIN_SWEEP).min(LOOK_AGAIN);
        let next = pools.sweep(index, cx).map_or(look, |due| due.min(look));
        drop(pools);
        timer.as_mut().reset(next.into());
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
    })
    .await;
}

impl Drop for Pools {
    fn drop(&mut self) {
        // Idle connections of a replaced runtime are closed (dropped with the lists), not left
        // to time out; they are no longer counted.
        for pool in &self.lists {
            let pool = pool.lock().unwrap_or_else(|p| p.into_inner());
            self.stats.idle.fetch_sub(pool.idle.len() as i64, Relaxed);
        }
    }
}

/// A connection in use: closed when dropped unless it went back to the pool. It holds the
/// connection-limit permit, if any, until the response body ends.
struct Lease {
    pools: Arc<Pools>,
    conn: Option<Box<Conn>>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    fn release(mut self) {
        if let Some(conn) = self.conn.take() {
            self.pools.put_back(conn);
        }
    }
}

/// True for methods whose repetition has the same effect as one request (RFC 9110 9.2.2).
pub fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// A parsed back-end URL.
struct Target {
    connect_addr: String,
    host_header: HeaderValue,
    path: String,
    basic_auth: Option<HeaderValue>,
    https: bool,
    host: String,
}

fn parse_target(url: &str, shown: &str) -> Result<Target, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("invalid URL '{shown}': {e}"))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(format!("invalid URL '{shown}': use http:// or https://")),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| format!("no host in '{shown}'"))?;
    let host = authority.host();
    if host.is_empty() {
        return Err(format!("no host in '{shown}'"));
    }
    // The port as written after the host (`http` keeps a port it cannot read as `None`, which
    // would quietly become the scheme's default): empty means the default (RFC 3986 3.2.3).
    let host_and_port = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, h)| h);
    let written = host_and_port
        .strip_prefix(host)
        .and_then(|rest| rest.strip_prefix(':'))
        .filter(|p| !p.is_empty());
    let port = match written {
        None => {
            if https {
                443
            } else {
                80
            }
        }
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("invalid port '{p}' in '{shown}': use 1 to 65535")),
        },
    };
    // The Host header is the authority without credentials.
    let host_port = match written {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let host_header =
        HeaderValue::from_str(&host_port).map_err(|e| format!("invalid host in '{shown}': {e}"))?;
    let basic_auth = match authority.as_str().rsplit_once('@') {
        Some((userinfo, _)) => {
            use base64::Engine as _;
            let decoded = percent_decode(userinfo);
            let token = base64::engine::general_purpose::STANDARD.encode(decoded);
            let mut v = HeaderValue::from_str(&format!("Basic {token}"))
                .map_err(|e| format!("invalid credentials in '{shown}': {e}"))?;
            v.set_sensitive(true);
            Some(v)
        }
        None => None,
    };
    // `[::1]` connects as `[::1]:port`; other hosts as `host:port`.
    let connect_addr = format!("{host}:{port}");
    // A URL with a query and no path (`http://host?x=1`) asks for `/` with that query.
    let path = match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") => "/".to_owned(),
        Some(p) if p.starts_with('?') => format!("/{p}"),
        Some(p) => p.to_owned(),
    };
    Ok(Target {
        connect_addr,
        host_header,
        path,
        basic_auth,
        https,
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    })
}

/// `%XX` escapes of URL user-info decoded (RFC 3986 2.1); anything else kept as written.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

impl Upstream {
    /// A client for `url` (`shown` is the URL with credentials redacted).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        endpoint: &Arc<str>,
        url: &str,
        shown: &str,
        several: bool,
        tls: Option<&super::tls::TlsClient>,
        settings: UpstreamSettings,
        workers: usize,
        counters: Arc<Counters>,
        health: UrlHealth,
    ) -> Result<Self, String> {
        let stats = health.stats.clone();
        let target = parse_target(url, shown)?;
        let tls = match (target.https, tls) {
            (false, _) => None,
            (true, Some(client)) => Some(client.target(&target.host)?),
            (true, None) => return Err(format!("no TLS settings for '{shown}'")),
        };
        let limit = settings.max_connections.map(|max| Limit {
            permits: Arc::new(Semaphore::new(max)),
            waiting: AtomicUsize::new(0),
            max,
            queue: settings.queue,
        });
        let suffix = if several {
            format!(" ({shown})")
        } else {
            String::new()
        };
        let body_cx = Arc::new(BodyContext {
            counters: counters.clone(),
            health,
            endpoint: endpoint.clone(),
            suffix: suffix.clone(),
            deadline: settings.deadline,
        });
        Ok(Self {
            label: shown.into(),
            endpoint: endpoint.clone(),
            suffix,
            connect_addr: target.connect_addr,
            host_header: target.host_header,
            target: target
                .path
                .parse()
                .map_err(|e| format!("invalid path in '{shown}': {e}"))?,
            basic_auth: target.basic_auth,
            tls,
            pools: Arc::new(Pools::new(
                workers.max(1),
                settings.pool_size,
                settings.keep_alive,
                stats.clone(),
            )),
            settings,
            limit,
            counters,
            stats,
            body_cx,
        })
    }

    /// True when the kernel says the back end closed an idle connection of the pools.
    #[cfg(test)]
    pub(crate) fn idle_closed_by_peer(&self) -> bool {
        self.pools.lists.iter().any(|list| {
            let list = list.lock().unwrap_or_else(|p| p.into_inner());
            list.idle.iter().any(|i| i.conn.closed_by_peer())
        })
    }

    /// True when the endpoint counts an answer with `status` as a failure of its URL.
    pub fn fails_on(&self, status: StatusCode) -> bool {
        self.body_cx.health.fails_on.contains(&status)
    }

    fn error(&self, kind: ErrorKind, what: impl std::fmt::Display) -> MediationError {
        MediationError::new(
            kind,
            Blame::Upstream,
            format!("Endpoint '{}' {what}{}", self.endpoint, self.suffix),
        )
    }

    /// Sends the request `head` with `body` to this URL and returns the response head with a
    /// streaming body.
    ///
    /// The request's path is replaced by the URL's, its query string appended; hop-by-hop
    /// headers and `Expect` are left out and `Host` is the URL's authority. `trace` is the
    /// attempt's `traceparent` and `tracestate`, which replace the caller's.
    /// `probe` tells, when the attempt fails after its body went out, whether the body can be
    /// sent again.
    pub fn call<'a>(
        &'a self,
        head: &'a http::request::Parts,
        trace: Option<(&'a busbar_core::trace::Traceparent, Option<&'a HeaderValue>)>,
        body: Body,
        probe: Option<ReplayProbe>,
    ) -> impl Future<Output = Result<Response<Body>, MediationError>> + 'a {
        // Not an async fn: that future would keep `body` and `probe` twice, as its arguments
        // and as the locals the arguments are moved into.
        let replayable_after_send = idempotent(&head.method)
            && probe
                .as_ref()
                .map_or_else(|| body.is_buffered(), |p| p.replayable());
        let bodyless = http_body::Body::is_end_stream(&body);
        let mut body = Some(body);
        async move {
            let permit = self.permit().await?;
            // Past the queue of max_connections: the attempt goes to this URL.
            self.stats.attempts.fetch_add(1, Relaxed);
            let target = self.target_of(head)?;
            let outgoing = h1::Outgoing {
                method: &head.method,
                target: target.path_and_query().map_or("", |pq| pq.as_str()),
                headers: &head.headers,
                host: &self.host_header,
                authorization: self.basic_auth.as_ref(),
                trace,
            };
            let sending = Arc::new(Sending::new(self.counters.clone()));
            let mut lease = match self.pools.take_idle() {
                Some(conn) => Lease {
                    pools: self.pools.clone(),
                    conn: Some(conn),
                    _permit: permit,
                },
                None => self.connect(permit).await?,
            };
            // The attempt's deadline runs from here, through a fresh connection taken below,
            // to the end of the answer's body. Without one, no clock is read for it.
            let deadline = self.settings.deadline.map(|d| Instant::now() + d);
            // A request goes once more on a fresh connection when a reused one closes before any
            // answer byte (the back end's keep-alive timeout crossing the request): a request that
            // is safe to repeat and has no body, and any request shown never to have reached the
            // back end ([`Conn::never_delivered`]) whose body can be sent again.
            let repeatable = idempotent(&head.method) && bodyless;
            let mut again = true;
            let (answer, exchange) = loop {
                let Some(conn) = lease.conn.as_mut() else {
                    return Err(MediationError::internal(
                        "connection lease without a connection",
                    ));
                };
                let reused = conn.used > 0;
                sending.restart();
                let mut exchange =
                    conn.exchange(&outgoing, body.take().unwrap_or_default(), sending.clone());
                let sent = self
                    .answer(
                        std::future::poll_fn(|cx| exchange.poll(conn, cx)),
                        &sending,
                        deadline,
                    )
                    .await;
                if let Ok(Err(h1::Failure::Closed(error))) = &sent {
                    let resend = again
                        && reused
                        && conn.nothing_read()
                        && (repeatable
                            || (conn.never_delivered(error.as_ref())
                                && (bodyless || probe.as_ref().is_some_and(|p| p.replayable()))));
                    if resend {
                        again = false;
                        self.stats.resent.fetch_add(1, Relaxed);
                        if let (false, Some(probe)) = (bodyless, &probe) {
                            // The attempt's body gives back what it did not send.
                            drop(exchange);
                            let whole = probe.body().await;
                            body = Some(
                                whole.map_err(|why| self.error(ErrorKind::UpstreamReset, why))?,
                            );
                        }
                        let permit = lease._permit.take();
                        lease = self.connect(permit).await?;
                        continue;
                    }
                }
                break (sent, exchange);
            };
            let answer = match answer {
                Err(stalled) => {
                    let what = match stalled {
                        Stalled::Reading => format!(
                            "stopped reading the request for {:?}",
                            self.settings.timeout
                        ),
                        Stalled::Answering => {
                            format!("did not answer within {:?}", self.settings.timeout)
                        }
                        Stalled::Deadline => format!(
                            "did not answer within its deadline of {:?}",
                            self.settings.deadline.unwrap_or_default()
                        ),
                    };
                    return Err(self
                        .error(ErrorKind::ResponseTimeout, what)
                        .retryable(replayable_after_send));
                }
                Ok(Ok(answer)) => answer,
                Ok(Err(failure)) => {
                    // The request body failed (the client reset, sent malformed chunks, or a
                    // check refused it): the back end is not to blame, and sending the request
                    // again cannot help.
                    if let Some(failure) = sending.take_failure() {
                        return Err(client_body_error(failure));
                    }
                    let (what, cause) = no_answer(failure);
                    let mut error = self
                        .error(ErrorKind::UpstreamReset, what)
                        .retryable(replayable_after_send);
                    if let Some(cause) = cause {
                        error = error.with_source(cause);
                    }
                    return Err(error);
                }
            };
            let h1::Answer {
                response,
                framing,
                keep,
                ..
            } = answer;
            // RFC 9110 15: a status is 100 to 599, and a 101 switches to the protocol an `Upgrade`
            // asked for, which busbar never sends (hop-by-hop). Forwarded, either would leave the
            // client reading a connection in a state it cannot know; the back end's connection is
            // closed with the lease.
            let status = response.status();
            if status == StatusCode::SWITCHING_PROTOCOLS || status.as_u16() >= 600 {
                return Err(self
                    .error(
                        ErrorKind::UpstreamReset,
                        format_args!("answered with an invalid status {}", status.as_u16()),
                    )
                    .retryable(replayable_after_send));
            }
            let (mut parts, ()) = response.into_parts();
            // A proxy answers in its own HTTP version (RFC 9110 6.2, 7.6.3): an HTTP/1.0 back end
            // must not turn the client's keep-alive HTTP/1.1 connection into a 1.0 one.
            parts.version = Version::HTTP_11;
            // RFC 9112 6.3: with Transfer-Encoding, a Content-Length is wrong (the body is read by
            // the encoding); forwarded, it would cut the client's copy at its count.
            if parts.headers.contains_key(TRANSFER_ENCODING) {
                parts.headers.remove(CONTENT_LENGTH);
            }
            strip_hop_by_hop(&mut parts.headers);
            // The rest of a request the back end answered before it had all of it goes on going
            // out while the answer is read, unless the socket already failed under it.
            let upload =
                (!exchange.upload.finished && !exchange.stopped()).then_some(exchange.upload);
            let body = match framing {
                h1::Framing::Empty => {
                    // Used again only if the whole request went out and nothing else came.
                    if keep
                        && upload.is_none()
                        && lease.conn.as_deref().is_some_and(h1::clean_after_answer)
                    {
                        lease.release();
                    }
                    Body::empty()
                }
                framing => {
                    let exact = match framing {
                        h1::Framing::Length(n) => Some(n),
                        _ => None,
                    };
                    let guarded = LeasedBody {
                        lease: Some(lease),
                        framing,
                        keep,
                        upload,
                        idle_timeout: self.settings.timeout,
                        timer: None,
                        deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at.into()))),
                        cx: self.body_cx.clone(),
                        settles: !self.fails_on(status),
                        received: 0,
                        cut: false,
                        sending,
                    };
                    Body::stream(guarded, exact, Origin::Upstream)
                }
            };
            Ok(Response::from_parts(parts, body))
        }
    }

    /// Waits for the response head. The endpoint's `timeout` runs only while the back end is
    /// the one holding things up: from the moment the whole request is sent, or from the last
    /// chunk of the request body it took while more is ready to go. While the request body
    /// waits for the client, the back end is not timed. The attempt's `deadline`, when it has
    /// one, runs throughout.
    async fn answer<F: std::future::Future>(
        &self,
        send: F,
        sending: &Sending,
        deadline: Option<Instant>,
    ) -> Result<F::Output, Stalled> {
        let timeout = self.settings.timeout;
        let mut send = std::pin::pin!(send);
        loop {
            let (phase, since) = sending.phase();
            let now = Instant::now();
            let mut wake = match phase {
                // Looked at again later: the client may send more, and the back end's time
                // starts then.
                Phase::WaitingForClient => now + timeout,
                Phase::Writing => since + timeout,
                Phase::Sent => since + timeout,
            };
            if let Some(at) = deadline {
                if now >= at {
                    return Err(Stalled::Deadline);
                }
                wake = wake.min(at);
            }
            if phase != Phase::WaitingForClient && now >= wake {
                return Err(if phase == Phase::Sent {
                    Stalled::Answering
                } else {
                    Stalled::Reading
                });
            }
            tokio::select! {
                biased;
                out = &mut send => return Ok(out),
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Waits for a connection-limit permit, if the URL has a limit.
    async fn permit(&self) -> Result<Option<OwnedSemaphorePermit>, MediationError> {
        let Some(limit) = &self.limit else {
            return Ok(None);
        };
        if let Ok(p) = limit.permits.clone().try_acquire_owned() {
            return Ok(Some(p));
        }
        let full = || {
            self.error(
                ErrorKind::Unavailable,
                format_args!(
                    "is unavailable: all {} connections (max_connections) are in use and its queue of {} is full",
                    limit.max, limit.queue
                ),
            )
        };
        if limit.waiting.fetch_add(1, Relaxed) >= limit.queue {
            limit.waiting.fetch_sub(1, Relaxed);
            return Err(full().retryable(true));
        }
        let waited = tokio::time::timeout(
            self.settings.connect_timeout,
            limit.permits.clone().acquire_owned(),
        )
        .await;
        limit.waiting.fetch_sub(1, Relaxed);
        match waited {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(self
                .error(
                    ErrorKind::Unavailable,
                    format_args!(
                        "is unavailable: no connection of max_connections ({}) became free within {:?}",
                        limit.max, self.settings.connect_timeout
                    ),
                )
                .retryable(true)),
        }
    }

    /// The request target: the URL's own, unless a shaped `call` adds a path (appended to the
    /// URL's, before the URL's own query) or the request has a query (appended last).
    fn target_of(&self, head: &http::request::Parts) -> Result<Cow<'_, Uri>, MediationError> {
        let suffix = head.extensions.get::<PathSuffix>();
        let query = head.uri.query().filter(|q| !q.is_empty());
        if suffix.is_none() && query.is_none() {
            return Ok(Cow::Borrowed(&self.target));
        }
        let base = match suffix {
            Some(suffix) => {
                let joined = format!("{}{}", self.target.path().trim_end_matches('/'), suffix.0);
                match self.target.query() {
                    Some(q) => format!("{joined}?{q}"),
                    None => joined,
                }
            }
            None => self.target.to_string(),
        };
        let uri = match query {
            Some(q) => {
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}{q}")
            }
            None => base,
        };
        uri.parse().map(Cow::Owned).map_err(|e| {
            MediationError::internal(format!(
                "building the request for '{}' failed",
                self.endpoint
            ))
            .with_source(e)
        })
    }

    /// Boxed: opening a connection (TCP, TLS, handshake) is the rare path, and inline its
    /// future would more than double the size of every call's.
    fn connect(
        &self,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<Lease, MediationError>> + Send + '_>> {
        Box::pin(self.open_lease(permit))
    }

    async fn open_lease(
        &self,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Lease, MediationError> {
        let opened = tokio::time::timeout(self.settings.connect_timeout, self.open()).await;
        let conn = match opened {
            Err(_) => {
                return Err(MediationError::new(
                    ErrorKind::ConnectTimeout,
                    Blame::Upstream,
                    format!(
                        "Connecting to endpoint '{}' timed out{}",
                        self.endpoint, self.suffix
                    ),
                )
                .retryable(true))
            }
            Ok(r) => r?,
        };
        self.counters.connections.fetch_add(1, Relaxed);
        Ok(Lease {
            pools: self.pools.clone(),
            conn: Some(conn),
            _permit: permit,
        })
    }

    /// Opens a connection: TCP, then TLS for https.
    async fn open(&self) -> Result<Box<Conn>, MediationError> {
        let stream = TcpStream::connect(&self.connect_addr).await.map_err(|e| {
            // Refused says it all; otherwise the reason (a name that does not resolve, a
            // network that is unreachable) is the client's to know, as in the log.
            let (kind, what) = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                (
                    ErrorKind::ConnectRefused,
                    "refused the connection".to_owned(),
                )
            } else {
                (ErrorKind::Connect, format!("could not be reached ({e})"))
            };
            self.error(kind, what).retryable(true).with_source(e)
        })?;
        // Small requests and responses must not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        match &self.tls {
            None => Ok(Box::new(Conn::new(h1::Io::Plain(stream)))),
            Some(tls) => {
                let stream = tls.connect(stream).await.map_err(|failure| {
                    self.error(
                        ErrorKind::Connect,
                        format_args!("failed the TLS handshake: {}", failure.message),
                    )
                    .retryable(failure.retryable)
                    .with_source(failure.source)
                })?;
                Ok(Box::new(Conn::new(h1::Io::Tls(Box::new(stream)))))
            }
        }
    }
}

/// Where an attempt's request body is: what the answer timeout needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Request bytes are ready and the back end has not taken them all yet (the head, or body
    /// data); the clock restarts whenever it takes some.
    Writing,
    /// The connection asked for more and the client has not sent it yet.
    WaitingForClient,
    /// The whole request was written: the back end has it.
    Sent,
}

/// What held an attempt up past the endpoint's timeout.
#[derive(Debug, Clone, Copy)]
enum Stalled {
    /// The back end did not take the request body.
    Reading,
    /// The back end had the whole request and did not answer.
    Answering,
    /// The attempt's deadline passed before the answer's head.
    Deadline,
}

/// Shared by one attempt, the upload that reports to it, and the answer's body.
#[derive(Debug)]
struct Sending {
    state: Mutex<SendState>,
    /// Where the bytes sent are counted (`busbar_endpoint_sent_bytes_total`).
    counters: Arc<Counters>,
}

#[derive(Debug)]
struct SendState {
    phase: Phase,
    /// When `phase` began (for `Writing`: when the connection last took a chunk).
    since: Instant,
    /// The request body's error, kept for the attempt.
    failure: Option<BoxError>,
}

impl Sending {
    fn new(counters: Arc<Counters>) -> Self {
        Self {
            state: Mutex::new(SendState {
                phase: Phase::Writing,
                since: Instant::now(),
                failure: None,
            }),
            counters,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SendState> {
        // Poisoned only by a panic elsewhere while holding it; the state stays whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, phase: Phase) {
        let mut state = self.lock();
        state.phase = phase;
        state.since = Instant::now();
    }

    /// The request starts going out (again, on a fresh connection): its clock starts now.
    fn restart(&self) {
        self.lock().since = Instant::now();
    }

    fn phase(&self) -> (Phase, Instant) {
        let state = self.lock();
        (state.phase, state.since)
    }

    fn take_failure(&self) -> Option<BoxError> {
        self.lock().failure.take()
    }
}

impl h1::Progress for Sending {
    fn waiting(&self) {
        self.set(Phase::WaitingForClient);
    }

    fn took(&self, n: usize) {
        self.counters.bytes_out.fetch_add(n as u64, Relaxed);
        self.set(Phase::Writing);
    }

    fn wrote(&self) {
        // The back end is taking the request: its pause clock starts again.
        let mut state = self.lock();
        if state.phase == Phase::Writing {
            state.since = Instant::now();
        }
    }

    fn ended(&self) {
        self.set(Phase::Sent);
    }

    fn failed(&self, e: BoxError) {
        self.lock().failure = Some(e);
    }
}

/// The error of a request whose body failed while it went out: the client's (a reset, a
/// malformed chunk, a body a check refused), never retried.
fn client_body_error(failure: BoxError) -> MediationError {
    match failure.downcast::<BodyError>() {
        Ok(e) => MediationError::from(*e),
        Err(cause) => MediationError::new(
            ErrorKind::ClientBody,
            Blame::Client,
            "Reading the request body failed",
        )
        .with_source(cause),
    }
}

/// What the back end did, from a failed exchange: an answer that broke the protocol (with what
/// was wrong), or a connection closed or reset before a whole answer; and the socket's error.
fn no_answer(failure: h1::Failure) -> (String, Option<std::io::Error>) {
    match failure {
        h1::Failure::Malformed(what) => (format!("sent a malformed answer ({what})"), None),
        h1::Failure::Closed(cause) => {
            let what = cause
                .as_ref()
                .and_then(|e| super::tls::alert_in(e))
                .unwrap_or_else(|| "closed the connection".to_owned());
            (what, cause)
        }
        // Reported by the request body's own error, which the caller looks at first.
        h1::Failure::RequestBody => ("stopped taking the request body".to_owned(), None),
    }
}

/// An error and its causes, `outer: inner: innermost` (hyper's own message is only the outer
/// one).
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A back-end response body, read from its connection, that returns the connection to the pool
/// once read to the end, and fails if the back end stalls longer than the endpoint's timeout or
/// is still sending at the attempt's deadline.
/// While it is read, the rest of a request the back end answered early goes on going out. A
/// body the back end cuts short is counted once on the endpoint (`responses_cut`) and as a
/// failure of its URL (its failures counter and breaker), and fails with an error that names
/// the endpoint and how far it got, so the client's copy never looks complete.
struct LeasedBody {
    lease: Option<Lease>,
    framing: h1::Framing,
    /// The answer lets the connection carry another request.
    keep: bool,
    /// The rest of the request, when the back end answered before it had all of it.
    upload: Option<h1::Upload>,
    idle_timeout: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Fires at the attempt's deadline, when it has one.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    cx: Arc<BodyContext>,
    /// The answer's status counted as a success so far: the body's end or cut settles it on
    /// the breaker. An answer already counted as a failure is not counted again.
    settles: bool,
    /// Body bytes received so far.
    received: u64,
    /// The body failed once already: counted, not again.
    cut: bool,
    /// The request's progress: a back end that answered early loses its connection when the
    /// client's request body fails, which is not the back end cutting its answer.
    sending: Arc<Sending>,
}

impl LeasedBody {
    /// Counts the cut (once) and says what happened, as `kind`.
    fn cut(&mut self, kind: ErrorKind, what: impl std::fmt::Display) -> BoxError {
        self.lease = None;
        self.timer = None;
        self.deadline = None;
        if !std::mem::replace(&mut self.cut, true) {
            self.cx.counters.responses_cut.fetch_add(1, Relaxed);
            if std::mem::take(&mut self.settles) {
                // The answer was sent on already: nothing is retried, but its URL failed.
                self.cx.health.stats.failures.fetch_add(1, Relaxed);
                if let Some(b) = &self.cx.health.breaker {
                    b.body_cut();
                }
            }
        }
        Box::new(crate::serve::AnswerCut {
            kind,
            message: format!(
                "endpoint '{}'{} {what} after {} bytes of its response body",
                self.cx.endpoint, self.cx.suffix, self.received
            ),
        })
    }

    /// The request body failed while the answer streamed: the client's error.
    fn client_failed(&mut self, failure: BoxError) -> BoxError {
        self.lease = None;
        self.timer = None;
        self.deadline = None;
        self.cut = true;
        Box::new(crate::serve::ClientBodyFailed(failure))
    }

    /// The body reached its end: the connection goes back to the pool if it may carry another
    /// request, and the answer counts as a success of its URL.
    fn ended(&mut self) {
        if let Some(lease) = self.lease.take() {
            let clean = lease.conn.as_deref().is_some_and(h1::clean_after_answer);
            if self.keep && self.upload.is_none() && clean {
                lease.release();
            }
        }
        self.upload = None;
        self.deadline = None;
        if std::mem::take(&mut self.settles) {
            if let Some(b) = &self.cx.health.breaker {
                b.body_ended();
            }
        }
    }
}

impl http_body::Body for LeasedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.cut {
            return Poll::Ready(None);
        }
        // Past the deadline the body is cut however steadily it comes, as after a pause.
        if this
            .deadline
            .as_mut()
            .is_some_and(|d| d.as_mut().poll(cx).is_ready())
        {
            this.cx.counters.error(ErrorKind::ResponseTimeout);
            let what = format!(
                "passed its deadline of {:?}",
                this.cx.deadline.unwrap_or_default()
            );
            return Poll::Ready(Some(Err(this.cut(ErrorKind::ResponseTimeout, what))));
        }
        let Some(conn) = this.lease.as_mut().and_then(|l| l.conn.as_deref_mut()) else {
            return Poll::Ready(None);
        };
        if let Some(upload) = this.upload.as_mut() {
            match upload.poll(conn, cx) {
                Poll::Pending => {}
                Poll::Ready(Ok(())) => this.upload = None,
                Poll::Ready(Err(_)) => {
                    if let Some(failure) = this.sending.take_failure() {
                        return Poll::Ready(Some(Err(this.client_failed(failure))));
                    }
                    // The back end stopped taking the request it has answered: its answer
                    // goes on, and the connection is not used again.
                    this.upload = None;
                    this.keep = false;
                }
            }
        }
        let Some(conn) = this.lease.as_mut().and_then(|l| l.conn.as_deref_mut()) else {
            return Poll::Ready(None);
        };
        match h1::poll_body(conn, &mut this.framing, cx) {
            Poll::Ready(Some(Ok(data))) => {
                this.timer = None;
                this.cx
                    .counters
                    .bytes_in
                    .fetch_add(data.len() as u64, Relaxed);
                this.received += data.len() as u64;
                if matches!(this.framing, h1::Framing::Empty) {
                    this.ended();
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Some(Err(failure))) => {
                if let Some(failure) = this.sending.take_failure() {
                    return Poll::Ready(Some(Err(this.client_failed(failure))));
                }
                this.cx.counters.error(ErrorKind::UpstreamReset);
                let what = match failure {
                    h1::Failure::Malformed(what) => format!("broke off ({what})"),
                    h1::Failure::Closed(Some(e)) => format!("broke off ({})", with_causes(&e)),
                    _ => "broke off (the connection closed before the body's end)".to_owned(),
                };
                Poll::Ready(Some(Err(this.cut(ErrorKind::UpstreamReset, what))))
            }
            Poll::Ready(None) => {
                this.ended();
                Poll::Ready(None)
            }
            Poll::Pending => {
                // The rest of the request waits for the client, and the back end's answer may
                // wait for it too (it answers as it reads): the back end is not timed.
                if this.upload.is_some() && this.sending.phase().0 == Phase::WaitingForClient {
                    this.timer = None;
                    return Poll::Pending;
                }
                let timeout = this.idle_timeout;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.cx.counters.error(ErrorKind::ResponseTimeout);
                        let what = format!("paused longer than {timeout:?}");
                        Poll::Ready(Some(Err(this.cut(ErrorKind::ResponseTimeout, what))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut || matches!(self.framing, h1::Framing::Empty)
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            h1::Framing::Length(n) => SizeHint::with_exact(n),
            h1::Framing::Empty => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_path_asks_for_the_root_with_its_query() {
        let path = |url| parse_target(url, "shown").map(|t| t.path);
        assert_eq!(path("http://h:1"), Ok("/".to_owned()));
        assert_eq!(path("http://h:1?x=1"), Ok("/?x=1".to_owned()));
        assert_eq!(path("http://h:1/?x=1"), Ok("/?x=1".to_owned()));
    }

    #[test]
    fn url_credentials_become_basic_auth_and_stay_out_of_host() {
        let t =
            parse_target("http://us%40er:p%3Aw@example.com:8080/svc?x=1", "shown").expect("target");
        assert_eq!(t.host_header, "example.com:8080");
        assert_eq!(t.connect_addr, "example.com:8080");
        assert_eq!(t.path, "/svc?x=1");
        // base64("us@er:p:w")
        assert_eq!(
            t.basic_auth.as_ref().and_then(|v| v.to_str().ok()),
            Some("Basic dXNAZXI6cDp3")
        );
    }

    #[test]
    fn https_defaults_to_port_443_and_keeps_the_host_header_as_written() {
        let t = parse_target("https://example.com/a", "shown").expect("target");
        assert!(t.https);
        assert_eq!(t.connect_addr, "example.com:443");
        assert_eq!(t.host_header, "example.com");
        assert_eq!(t.host, "example.com");
    }

    #[test]
    fn a_port_outside_1_to_65535_is_refused_not_defaulted() {
        for url in [
            "http://127.0.0.1:99999/",
            "http://h:0/",
            "https://u:p@h:65536/x",
            "http://[::1]:70000/",
        ] {
            let err = parse_target(url, url).err().unwrap_or_default();
            assert!(err.starts_with("invalid port"), "{url}: {err:?}");
        }
        let t = parse_target("http://[::1]:8080/", "shown").expect("target");
        assert_eq!(t.connect_addr, "[::1]:8080");
        let t = parse_target("http://u:p@h:65535/", "shown").expect("target");
        assert_eq!(t.connect_addr, "h:65535");
        let t = parse_target("http://h:/", "shown").expect("target");
        assert_eq!(t.connect_addr, "h:80");
    }

    #[test]
    fn only_safe_methods_and_put_delete_are_idempotent() {
        assert!(idempotent(&Method::GET));
        assert!(idempotent(&Method::PUT));
        assert!(!idempotent(&Method::POST));
        assert!(!idempotent(&Method::PATCH));
    }
}
