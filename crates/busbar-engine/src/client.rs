//! The back-end client: endpoints with per-worker pools of keep-alive HTTP/1.1 connections.
//!
//! Each worker thread has its own idle list per endpoint (no cross-core sharing on the hot path;
//! the mutex is uncontended). A connection goes back to its pool only when the response body
//! has been read to its end; a response dropped early (client gone) aborts the connection, so
//! the back end sees the cancellation.

use std::cell::Cell;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use busbar_core::body::Origin;
use busbar_core::metrics::Counters;
use busbar_core::{Blame, Body, BoxError, ErrorKind, Exchange, MediationError};
use bytes::Bytes;
use http::header::{HeaderValue, HOST};
use http::{Request, Response, Uri, Version};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::headers::strip_hop_by_hop;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Marks the current thread as worker `index` (its pools are used from here).
pub fn set_worker_index(index: usize) {
    WORKER.with(|w| w.set(index));
}

fn worker_index() -> usize {
    WORKER.with(Cell::get)
}

/// Settings of an endpoint, from its config.
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    /// Time to open a connection.
    pub connect_timeout: Duration,
    /// Time to the response head, and the longest pause while the body streams.
    pub timeout: Duration,
    /// Idle connections kept per worker.
    pub pool_size: usize,
    /// Longest idle time of a pooled connection.
    pub keep_alive: Duration,
    /// Retries of calls that failed before anything was sent.
    pub retries: u32,
}

/// A back-end endpoint.
#[derive(Debug)]
pub struct Endpoint {
    /// Its name in the config.
    pub name: Arc<str>,
    authority: String,
    host_header: HeaderValue,
    path: String,
    settings: EndpointSettings,
    pools: Vec<Mutex<Vec<Idle>>>,
    /// Its metrics.
    pub counters: Arc<Counters>,
}

struct Idle {
    sender: http1::SendRequest<Body>,
    conn: AbortHandle,
    since: Instant,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("since", &self.since).finish()
    }
}

/// A connection in use: aborted on drop unless it went back to the pool.
struct Lease {
    endpoint: Arc<Endpoint>,
    sender: Option<http1::SendRequest<Body>>,
    conn: AbortHandle,
    reused: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.sender.take().is_some() {
            self.conn.abort();
        }
    }
}

impl Lease {
    fn release(mut self) {
        if let Some(sender) = self.sender.take() {
            self.endpoint.put_back(sender, self.conn.clone());
        }
    }
}

impl Endpoint {
    /// A new endpoint for `url` with `workers` pools.
    pub fn new(
        name: &str,
        url: &str,
        settings: EndpointSettings,
        workers: usize,
        counters: Arc<Counters>,
    ) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid URL '{url}': {e}"))?;
        let host = uri.host().ok_or_else(|| format!("no host in '{url}'"))?;
        let port = uri.port_u16().unwrap_or(80);
        let authority = format!("{host}:{port}");
        let host_header = HeaderValue::from_str(uri.authority().map_or(host, |a| a.as_str()))
            .map_err(|e| format!("invalid host in '{url}': {e}"))?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Self {
            name: name.into(),
            authority,
            host_header,
            path,
            settings,
            pools: (0..workers.max(1))
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
            counters,
        })
    }

    fn pool(&self) -> &Mutex<Vec<Idle>> {
        &self.pools[worker_index() % self.pools.len()]
    }

    fn put_back(&self, sender: http1::SendRequest<Body>, conn: AbortHandle) {
        if sender.is_closed() || self.settings.pool_size == 0 {
            conn.abort();
            return;
        }
        let mut pool = self.pool().lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() >= self.settings.pool_size {
            conn.abort();
            return;
        }
        pool.push(Idle {
            sender,
            conn,
            since: Instant::now(),
        });
    }

    fn take_idle(&self) -> Option<Idle> {
        let mut pool = self.pool().lock().unwrap_or_else(|p| p.into_inner());
        while let Some(idle) = pool.pop() {
            if idle.since.elapsed() < self.settings.keep_alive
                && !idle.sender.is_closed()
                && idle.sender.is_ready()
            {
                return Some(idle);
            }
            idle.conn.abort();
        }
        None
    }

    async fn connect(self: &Arc<Self>) -> Result<Lease, MediationError> {
        let connect = TcpStream::connect(&self.authority);
        let stream = match tokio::time::timeout(self.settings.connect_timeout, connect).await {
            Err(_) => {
                return Err(MediationError::new(
                    ErrorKind::ConnectTimeout,
                    Blame::Upstream,
                    format!("Connecting to endpoint '{}' timed out", self.name),
                ))
            }
            Ok(Err(e)) => {
                let kind = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    ErrorKind::ConnectRefused
                } else {
                    ErrorKind::Connect
                };
                let what = if kind == ErrorKind::ConnectRefused {
                    "refused the connection"
                } else {
                    "could not be reached"
                };
                return Err(MediationError::new(
                    kind,
                    Blame::Upstream,
                    format!("Endpoint '{}' {what}", self.name),
                )
                .with_source(e));
            }
            Ok(Ok(s)) => s,
        };
        // Small requests and responses must not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::Builder::new()
            .handshake::<_, Body>(TokioIo::new(stream))
            .await
            .map_err(|e| {
                MediationError::new(
                    ErrorKind::Connect,
                    Blame::Upstream,
                    format!("Connecting to endpoint '{}' failed", self.name),
                )
                .with_source(e)
            })?;
        let task = tokio::spawn(async move {
            // The connection ends when the back end closes it or the lease aborts it; either
            // way the request that used it has already seen the outcome.
            let _ = conn.await;
        });
        self.counters.connections.fetch_add(1, Relaxed);
        Ok(Lease {
            endpoint: self.clone(),
            sender: Some(sender),
            conn: task.abort_handle(),
            reused: false,
        })
    }

    async fn lease(self: &Arc<Self>) -> Result<Lease, MediationError> {
        if let Some(idle) = self.take_idle() {
            return Ok(Lease {
                endpoint: self.clone(),
                sender: Some(idle.sender),
                conn: idle.conn,
                reused: true,
            });
        }
        let mut attempt = 0;
        loop {
            match self.connect().await {
                Ok(lease) => return Ok(lease),
                Err(e) if attempt < self.settings.retries => {
                    attempt += 1;
                    tracing::debug!(endpoint = %self.name, attempt, error = %e, "retrying connect");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends the exchange's request to this endpoint; the response becomes the current message.
    pub async fn call(self: &Arc<Self>, ex: &mut Exchange) -> Result<(), MediationError> {
        let started = Instant::now();
        self.counters.requests.fetch_add(1, Relaxed);
        self.counters.in_flight.fetch_add(1, Relaxed);
        let result = self.call_inner(ex).await;
        self.counters.in_flight.fetch_sub(1, Relaxed);
        match &result {
            Ok(()) => self.counters.latency.observe(started.elapsed()),
            Err(e) => self.counters.error(e.kind),
        }
        result
    }

    async fn call_inner(self: &Arc<Self>, ex: &mut Exchange) -> Result<(), MediationError> {
        let mut request = self.build_request(ex)?;
        let mut lease = self.lease().await?;
        let mut fresh_retry_done = false;
        let mut retries_left = self.settings.retries;
        let response = loop {
            let Some(sender) = lease.sender.as_mut() else {
                return Err(MediationError::internal(
                    "connection lease without a sender",
                ));
            };
            let send = sender.try_send_request(request);
            match tokio::time::timeout(self.settings.timeout, send).await {
                Err(_) => {
                    return Err(MediationError::new(
                        ErrorKind::ResponseTimeout,
                        Blame::Upstream,
                        format!(
                            "Endpoint '{}' did not answer within {:?}",
                            self.name, self.settings.timeout
                        ),
                    ))
                }
                Ok(Ok(response)) => break response,
                Ok(Err(mut e)) => {
                    let unsent = e.take_message();
                    let cause = e.into_error();
                    match unsent {
                        // A pooled connection the back end had already closed: the request
                        // was never sent, so it goes once more on a fresh connection. This
                        // is not a user-visible retry.
                        Some(req) if lease.reused && !fresh_retry_done => {
                            fresh_retry_done = true;
                            request = req;
                            lease = self.connect().await?;
                        }
                        Some(req) if retries_left > 0 => {
                            retries_left -= 1;
                            request = req;
                            lease = self.connect().await?;
                        }
                        _ => {
                            return Err(MediationError::new(
                                ErrorKind::UpstreamReset,
                                Blame::Upstream,
                                format!("Endpoint '{}' closed the connection", self.name),
                            )
                            .with_source(cause))
                        }
                    }
                }
            }
        };
        let (mut parts, incoming) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let exact = http_body::Body::size_hint(&incoming).exact();
        let body = if http_body::Body::is_end_stream(&incoming) {
            lease.release();
            Body::empty()
        } else {
            let guarded = LeasedBody {
                inner: incoming,
                lease: Some(lease),
                idle_timeout: self.settings.timeout,
                timer: None,
                counters: self.counters.clone(),
            };
            Body::stream(guarded, exact, Origin::Upstream)
        };
        ex.response = Some(Response::from_parts(parts, body));
        Ok(())
    }

    fn build_request(&self, ex: &mut Exchange) -> Result<Request<Body>, MediationError> {
        let req = &ex.request;
        let uri = match req.uri.query() {
            Some(q) if !q.is_empty() => {
                let sep = if self.path.contains('?') { '&' } else { '?' };
                format!("{}{sep}{q}", self.path)
            }
            _ => self.path.clone(),
        };
        let mut builder = Request::builder()
            .method(req.method.clone())
            .uri(uri)
            .version(Version::HTTP_11);
        if let Some(headers) = builder.headers_mut() {
            headers.reserve(req.headers.len());
            for (name, value) in &req.headers {
                headers.append(name.clone(), value.clone());
            }
            strip_hop_by_hop(headers);
            // 100-continue was answered (or not) on the client side; the back end gets the
            // body without waiting.
            headers.remove(http::header::EXPECT);
            headers.insert(HOST, self.host_header.clone());
        }
        let body = std::mem::take(&mut ex.request_body);
        builder.body(body).map_err(|e| {
            MediationError::internal(format!("building the request for '{}' failed", self.name))
                .with_source(e)
        })
    }
}

/// A back-end response body that returns its connection to the pool once read to the end,
/// and fails if the back end stalls longer than the endpoint's timeout.
struct LeasedBody {
    inner: Incoming,
    lease: Option<Lease>,
    idle_timeout: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    counters: Arc<Counters>,
}

impl http_body::Body for LeasedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer = None;
                if let Some(data) = frame.data_ref() {
                    this.counters.bytes_in.fetch_add(data.len() as u64, Relaxed);
                }
                if this.inner.is_end_stream() {
                    if let Some(lease) = this.lease.take() {
                        lease.release();
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.lease = None;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                if let Some(lease) = this.lease.take() {
                    lease.release();
                }
                Poll::Ready(None)
            }
            Poll::Pending => {
                let timeout = this.idle_timeout;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.lease = None;
                        this.counters.error(ErrorKind::ResponseTimeout);
                        Poll::Ready(Some(Err(format!(
                            "back end paused longer than {timeout:?} while sending its response"
                        )
                        .into())))
                    }
                    Poll::Pending => Poll::Pending,
                }
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

use std::future::Future as _;

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Idle connections of a replaced runtime are closed, not left to time out.
        for pool in &self.pools {
            let pool = pool.lock().unwrap_or_else(|p| p.into_inner());
            for idle in pool.iter() {
                idle.conn.abort();
            }
        }
    }
}
