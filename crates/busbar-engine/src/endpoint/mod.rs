//! Back-end endpoints: a policy around one or more URLs.
//!
//! Layout: [`upstream`] is the pooled keep-alive client to one URL (plain or TLS, with an
//! optional connection limit and queue); [`tls`] builds its TLS settings; [`balance`] picks a
//! URL; [`breaker`] suspends a failing URL; [`retry`] keeps the request body so it can be sent
//! again, and caps retries with a budget. [`Endpoint`] composes them, outermost first:
//! metrics → one retry loop (retries, failover to the next URL) → balancer and breakers →
//! the URL's client, whose `timeout` (and `deadline`) bound each attempt. Errors say whether a
//! retry may help ([`MediationError::retryable`]) where they are made; the loop here reads that.

pub mod balance;
pub mod breaker;
pub(crate) mod h1;
pub mod retry;
pub mod tls;
pub mod upstream;

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use busbar_config::{ConfigError, EndpointConfig, LoadedConfig};
use busbar_core::metrics::{Counters, Registry};
use busbar_core::trace::{SpanId, SpanKind, TraceContext};
use busbar_core::{Blame, Body, BodyGone, ErrorKind, Exchange, MediationError};
use http::{Request, Response, StatusCode};

use balance::Balancer;
use breaker::{Admit, Breaker, BreakerSettings};
use retry::{Replay, RetryBudget};
use upstream::{Upstream, UpstreamSettings, UrlHealth};

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Marks the current thread as worker `index` (its connection pools are used from here).
pub fn set_worker_index(index: usize) {
    WORKER.with(|w| w.set(index));
}

fn worker_index() -> usize {
    WORKER.with(Cell::get)
}

/// One URL of an endpoint with its breaker.
#[derive(Debug)]
struct Member {
    upstream: Upstream,
    breaker: Option<Arc<Breaker>>,
}

/// A back-end endpoint.
#[derive(Debug)]
pub struct Endpoint {
    /// Its name in the config.
    pub name: Arc<str>,
    members: Vec<Member>,
    balancer: Balancer,
    retries: u32,
    retry_on_status: Vec<StatusCode>,
    failover: bool,
    failover_on_status: Vec<StatusCode>,
    replay_buffer: u64,
    budget: RetryBudget,
    /// Its metrics.
    pub counters: Arc<Counters>,
}

/// Why an attempt failed, for the loop to decide what comes next.
enum Failure {
    Error(MediationError),
    Status(Response<Body>),
}

impl Endpoint {
    /// Built from config; every problem as a ConfigError with its path
    /// (`endpoints.NAME.urls[1].url`) and line.
    pub fn build(
        name: &str,
        cfg: &EndpointConfig,
        loaded: &LoadedConfig,
        metrics: &Registry,
        workers: usize,
    ) -> Result<Arc<Endpoint>, Vec<ConfigError>> {
        let path = format!("endpoints.{name}");
        let mut errors = Vec::new();
        let endpoint_name: Arc<str> = name.into();
        let counters = metrics.endpoint(name);
        let urls = cfg.url_list();
        if urls.is_empty() {
            errors.push(loaded.error(None, path.clone(), "give 'url' or 'urls'"));
        }
        let tls = if urls.iter().any(|u| u.url.expose().starts_with("https:")) {
            let t = cfg.tls.clone().unwrap_or_default();
            let file = |f: &Option<busbar_config::Spanned<String>>| {
                f.as_ref().map(|s| loaded.resolve(&s.value))
            };
            let (ca, cert, key) = (file(&t.ca), file(&t.cert), file(&t.key));
            let cert_key = cert.as_deref().zip(key.as_deref());
            let server_name = t.server_name.as_ref().map(|s| s.value.clone());
            match tls::client(ca.as_deref(), cert_key, server_name) {
                Ok(c) => Some(c),
                Err((field, msg)) => {
                    let (key, line) = match field {
                        tls::TlsField::Ca => ("tls.ca", t.ca.as_ref()),
                        tls::TlsField::Cert => ("tls.cert", t.cert.as_ref()),
                        tls::TlsField::Key => ("tls.key", t.key.as_ref()),
                        tls::TlsField::ServerName => ("tls.server_name", t.server_name.as_ref()),
                        tls::TlsField::Section => ("tls", None),
                    };
                    errors.push(loaded.error(
                        line.and_then(busbar_config::line_of),
                        format!("{path}.{key}"),
                        msg,
                    ));
                    None
                }
            }
        } else {
            None
        };
        let settings = UpstreamSettings {
            connect_timeout: cfg.connect_timeout.0,
            timeout: cfg.timeout.0,
            deadline: cfg.deadline.as_ref().map(|d| d.value.0),
            pool_size: cfg.pool_size,
            keep_alive: cfg.keep_alive.0,
            max_connections: cfg.max_connections,
            queue: cfg.queue,
        };
        let statuses = |list: &[u16], key: &str, errors: &mut Vec<ConfigError>| {
            list.iter()
                .filter_map(|s| match StatusCode::from_u16(*s) {
                    Ok(s) => Some(s),
                    Err(_) => {
                        errors.push(loaded.error(
                            None,
                            format!("{path}.{key}"),
                            format!("invalid HTTP status {s}"),
                        ));
                        None
                    }
                })
                .collect::<Vec<_>>()
        };
        let (failover, failover_on_status) = match &cfg.failover {
            busbar_config::Failover::Enabled(on) => (*on, Vec::new()),
            busbar_config::Failover::OnStatus(f) => (
                true,
                statuses(&f.on_status, "failover.on_status", &mut errors),
            ),
        };
        let retry_on_status = statuses(&cfg.retry_on_status, "retry_on_status", &mut errors);
        let breaker_on_status = match &cfg.breaker {
            Some(b) => statuses(&b.on_status, "breaker.on_status", &mut errors),
            None => Vec::new(),
        };
        // Statuses that make an answer a failure of its URL.
        let mut fails_on: Vec<StatusCode> = breaker_on_status
            .iter()
            .chain(&failover_on_status)
            .chain(&retry_on_status)
            .copied()
            .collect();
        fails_on.sort_unstable();
        fails_on.dedup();
        let several = urls.len() > 1;
        let mut members = Vec::with_capacity(urls.len());
        for u in &urls {
            let shown = u.url.redacted();
            let stats = metrics.upstream(name, &shown);
            let https = u.url.expose().starts_with("https:");
            if https && tls.is_none() {
                // The TLS error was reported above.
                continue;
            }
            let breaker = cfg.breaker.as_ref().map(|b| {
                Arc::new(Breaker::new(
                    BreakerSettings {
                        failures: b.failures.max(1),
                        failure_ratio: b.failure_ratio,
                        window: b.window.0,
                        min_calls: b.min_calls,
                        suspend: b.suspend.0,
                        max_suspend: b.max_suspend.0,
                    },
                    stats.clone(),
                ))
            });
            let health = UrlHealth {
                stats: stats.clone(),
                breaker: breaker.clone(),
                fails_on: fails_on.clone(),
            };
            match Upstream::new(
                &endpoint_name,
                u.url.expose(),
                &shown,
                several,
                tls.as_ref(),
                settings.clone(),
                workers,
                counters.clone(),
                health,
            ) {
                Ok(upstream) => members.push(Member { upstream, breaker }),
                Err(msg) => errors.push(loaded.error(u.line, format!("{path}.{}", u.path), msg)),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let weights: Vec<u32> = urls.iter().map(|u| u.weight.max(1)).collect();
        let balancer = match cfg.balance {
            busbar_config::Balance::RoundRobin => Balancer::round_robin(members.len()),
            busbar_config::Balance::Weighted => Balancer::weighted(&weights),
            busbar_config::Balance::LeastPending => Balancer::least_pending(members.len()),
        };
        counters.breaker_state.set(0);
        let b = &cfg.retry_budget;
        Ok(Arc::new(Endpoint {
            name: endpoint_name,
            members,
            balancer,
            retries: cfg.retries,
            retry_on_status,
            failover,
            failover_on_status,
            replay_buffer: cfg.replay_buffer.0,
            budget: RetryBudget::new(b.ratio, b.min_retries, b.window.0),
            counters,
        }))
    }

    /// The `call` step: sends the exchange's current request; the response becomes the
    /// current message.
    pub async fn call(self: &Arc<Self>, ex: &mut Exchange) -> Result<(), MediationError> {
        if let Some(gone) = &ex.body_gone {
            let reason = format!("Cannot call endpoint '{}': {}", self.name, gone.why());
            return Err(if matches!(gone, BodyGone::Unreadable) {
                MediationError::new(ErrorKind::ClientBody, Blame::Client, reason)
            } else {
                MediationError::internal(reason)
            });
        }
        let body = std::mem::take(&mut ex.request_body);
        let replay = Replay::new(body, self.replay_buffer);
        // Each attempt carries the exchange's trace to the back end (`traceparent`), unless
        // propagation is off (a detached trace: not sampled, no caller).
        let trace = ex.trace.propagated.then_some(&ex.trace);
        let started = Instant::now();
        let result = self.measured(&ex.request, &replay, trace).await;
        ex.backend_time += started.elapsed();
        match result {
            Ok(response) => {
                ex.body_gone = Some(BodyGone::SentTo(self.name.clone()));
                ex.response = Some(response);
                Ok(())
            }
            // The client's body failed: what was kept of it is not the whole request.
            Err(e) if e.blame == Blame::Client => {
                ex.body_gone = Some(BodyGone::Unreadable);
                Err(e)
            }
            // Boxed: this path's future stays out of every call's, and the result is not kept
            // across a wait in the common one.
            Err(e) => Box::pin(Self::keep_for_later(ex, replay, e)).await,
        }
    }

    /// After a failed call, what is left of the request body: a later call (in on_error, say)
    /// may send the request again if its body was kept whole; otherwise it fails at once,
    /// saying why.
    async fn keep_for_later(
        ex: &mut Exchange,
        replay: Replay,
        e: MediationError,
    ) -> Result<(), MediationError> {
        match replay.body().await {
            Ok(body) => ex.request_body = body,
            Err(why) => {
                ex.body_gone = Some(BodyGone::Lost(why.into()));
            }
        }
        Err(e)
    }

    /// One request through the whole policy (for future scatter-gather branches and BPEL
    /// invoke). The request's path is replaced by the URL's; its query string is kept.
    pub async fn send(
        self: &Arc<Self>,
        req: Request<Body>,
    ) -> Result<Response<Body>, MediationError> {
        let (parts, body) = req.into_parts();
        let replay = Replay::new(body, self.replay_buffer);
        let trace = parts.extensions.get::<TraceContext>();
        self.measured(&parts, &replay, trace).await
    }

    async fn measured(
        &self,
        head: &http::request::Parts,
        replay: &Replay,
        trace: Option<&TraceContext>,
    ) -> Result<Response<Body>, MediationError> {
        let started = Instant::now();
        self.counters.requests.fetch_add(1, Relaxed);
        let _in_flight = InProgress::enter(&self.counters.in_flight);
        let result = self.attempts(head, replay, trace).await;
        match &result {
            Ok(_) => self.counters.latency.observe(started.elapsed()),
            // The client's mistakes (a body that failed while it went out) are counted by
            // the proxy, not against the endpoint.
            Err(e) if e.blame == Blame::Client => {}
            Err(e) => self.counters.error(e.kind),
        }
        result
    }

    /// The one retry loop: each attempt goes to a URL the balancer picks (or, on failover, to
    /// the next untried one); a failed attempt is retried while `retries`, the budget and the
    /// request body allow.
    async fn attempts(
        &self,
        head: &http::request::Parts,
        replay: &Replay,
        trace: Option<&TraceContext>,
    ) -> Result<Response<Body>, MediationError> {
        let n = self.members.len();
        let mut tried = Tried::new(n);
        let mut retries_left = self.retries;
        let mut failover_from: Option<usize> = None;
        let mut attempt: u64 = 0;
        if self.retries > 0 {
            // Only an endpoint that retries needs the requests counted for its budget.
            self.budget.request();
        }
        // The URL of the next attempt is chosen (and admitted by its breaker) before the failed
        // one is let go: when none may be called, the client gets what the last attempt got.
        let Some(mut chosen) = self.choose(&tried, None) else {
            return Err(self.unavailable());
        };
        loop {
            let (index, admit) = chosen;
            tried.set(index);
            let member = &self.members[index];
            let guard = ProbeGuard {
                breaker: member.breaker.as_deref(),
                admit,
                done: false,
            };
            let body = match replay.body().await {
                Ok(b) => b,
                Err(why) => {
                    return Err(MediationError::internal(format!(
                        "Cannot call endpoint '{}': {why}",
                        self.name
                    )))
                }
            };
            let attempt_no = attempt;
            attempt += 1;
            let mut recording = None;
            // The attempt's client span is the back end's parent.
            let traced = trace.map(|trace| {
                let span = SpanId::random();
                recording = trace
                    .start_span(head.method.as_str(), SpanKind::Client, Some(span))
                    .map(|mut r| {
                        r.set("busbar.endpoint", &*self.name);
                        r.set("url.full", &*member.upstream.label);
                        r.set("http.request.method", head.method.as_str());
                        r.set("busbar.attempt", attempt_no);
                        r.set(
                            "busbar.attempt.reason",
                            match (attempt_no, failover_from) {
                                (0, _) => "first",
                                (_, Some(_)) => "failover",
                                _ => "retry",
                            },
                        );
                        r
                    });
                (trace.traceparent_bytes(span), trace.tracestate.clone())
            });

            self.counters.attempts.fetch_add(1, Relaxed);
            let stats = &member.upstream.stats;
            let pending = InProgress::enter(&stats.pending);
            let outcome = member
                .upstream
                .call(
                    head,
                    traced
                        .as_ref()
                        .map(|(parent, state)| (parent, state.as_ref())),
                    body,
                    Some(replay.probe()),
                )
                .await;
            drop(pending);
            if let Some(mut r) = recording {
                match &outcome {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        r.set("http.response.status_code", i64::from(status));
                        if status >= 500 {
                            r.fail(format!("answered {status}"));
                        }
                    }
                    Err(e) => {
                        r.set("error.type", e.kind.as_str());
                        r.fail(e.to_string());
                    }
                }
                r.finish();
            }

            let failure = match outcome {
                Ok(resp) => {
                    let status = resp.status();
                    let failed = member.upstream.fails_on(status);
                    if failed {
                        stats.failures.fetch_add(1, Relaxed);
                        guard.record(false);
                    } else if http_body::Body::is_end_stream(resp.body()) {
                        guard.record(true);
                    } else {
                        // The body still streams: its end, or its cut, completes the count.
                        guard.record_head();
                    }
                    self.update_breaker_gauge();
                    if !self.failover_on_status.contains(&status)
                        && !self.retry_on_status.contains(&status)
                    {
                        return Ok(resp);
                    }
                    Failure::Status(resp)
                }
                Err(e) => {
                    // A full queue is our own limit, not the URL failing.
                    let counts = e.blame == Blame::Upstream && e.kind != ErrorKind::Unavailable;
                    if counts {
                        stats.failures.fetch_add(1, Relaxed);
                        guard.record(false);
                    } else {
                        // Says nothing about the URL's health: a probe lets the next call
                        // probe instead.
                        drop(guard);
                    }
                    self.update_breaker_gauge();
                    Failure::Error(e)
                }
            };

            // Failover: to an untried URL, when nothing was sent or the status asks for it.
            let wants_failover = self.failover
                && match &failure {
                    Failure::Error(e) => nothing_sent(e),
                    Failure::Status(r) => self.failover_on_status.contains(&r.status()),
                };
            if wants_failover && replay.lost().is_none() {
                if let Some(next) = self.choose(&tried, Some(index)) {
                    self.counters.failovers.fetch_add(1, Relaxed);
                    failover_from = Some(index);
                    chosen = next;
                    // The failed attempt's response is dropped here, which closes its
                    // connection and gives the request body back for the next attempt.
                    continue;
                }
            }
            failover_from = None;

            let wants_retry = match &failure {
                Failure::Error(e) => e.retryable,
                Failure::Status(r) => self.retry_on_status.contains(&r.status()),
            };
            let why_not = if retries_left == 0 {
                None
            } else if !wants_retry {
                match &failure {
                    // Errors after the request went out; others (a certificate refused,
                    // say) are not worth a retry and need no explanation.
                    Failure::Error(e)
                        if matches!(
                            e.kind,
                            ErrorKind::UpstreamReset | ErrorKind::ResponseTimeout
                        ) =>
                    {
                        replay.lost().or_else(|| {
                            (!upstream::idempotent(&head.method)).then(|| {
                                format!(
                                    "{} is not idempotent and it reached the back end",
                                    head.method
                                )
                            })
                        })
                    }
                    _ => None,
                }
            } else if let Some(lost) = replay.lost() {
                Some(lost)
            } else {
                match self.choose(&tried, None) {
                    None => Some(self.suspended().to_owned()),
                    Some(next) if !self.budget.try_retry() => {
                        self.release(next);
                        Some("the retry budget is spent".to_owned())
                    }
                    Some(next) => {
                        retries_left -= 1;
                        self.counters.retries.fetch_add(1, Relaxed);
                        chosen = next;
                        continue;
                    }
                }
            };
            return match failure {
                Failure::Status(r) => {
                    if let Some(why) = why_not {
                        tracing::debug!(endpoint = %self.name, status = %r.status(), "not retried: {why}");
                    }
                    Ok(r)
                }
                Failure::Error(mut e) => {
                    if let Some(why) = why_not {
                        e.reason = format!("{}; not retried: {why}", e.reason).into();
                    }
                    Err(e)
                }
            };
        }
    }

    /// Lets go of a URL chosen for an attempt that will not be made: a probe it was admitted
    /// as goes to the next call.
    fn release(&self, (index, admit): (usize, Admit)) {
        if let Some(b) = &self.members[index].breaker {
            b.abandon(admit);
        }
    }

    /// Why no URL may be called now.
    fn suspended(&self) -> &'static str {
        if self.members.len() == 1 {
            "its circuit breaker is open"
        } else {
            "the circuit breakers of its URLs are open"
        }
    }

    /// The URL for the next attempt, admitted by its breaker.
    fn choose(&self, tried: &Tried, failover_from: Option<usize>) -> Option<(usize, Admit)> {
        let n = self.members.len();
        let available = |i: usize| {
            self.members[i]
                .breaker
                .as_deref()
                .is_none_or(Breaker::available)
        };
        for _ in 0..n {
            let index = match failover_from {
                // Failover goes to the next untried URL in the list.
                Some(from) => (1..n)
                    .map(|k| (from + k) % n)
                    .find(|i| !tried.get(*i) && available(*i)),
                None => self
                    .balancer
                    .pick(
                        n,
                        |i| !tried.get(i) && available(i),
                        |i| self.members[i].upstream.stats.pending.load(Relaxed),
                    )
                    .or_else(|| {
                        // Every URL was tried: a retry may use any available one.
                        self.balancer.pick(n, available, |i| {
                            self.members[i].upstream.stats.pending.load(Relaxed)
                        })
                    }),
            }?;
            let admit = match &self.members[index].breaker {
                None => Admit::Yes,
                Some(b) => b.admit(),
            };
            if admit != Admit::No {
                return Some((index, admit));
            }
        }
        None
    }

    /// The error of a call no URL may take: every breaker is open. Its `Retry-After` is what
    /// is left of the shortest suspension.
    fn unavailable(&self) -> MediationError {
        let urls: Vec<&str> = self.members.iter().map(|m| &*m.upstream.label).collect();
        let left = self
            .members
            .iter()
            .filter_map(|m| m.breaker.as_deref().map(Breaker::remaining))
            .min()
            .unwrap_or_default();
        MediationError::new(
            ErrorKind::Unavailable,
            Blame::Upstream,
            format!(
                "Endpoint '{}' is unavailable: its circuit breaker is open ({})",
                self.name,
                urls.join(", ")
            ),
        )
        .with_retry_after(left)
    }

    /// The endpoint's breaker gauge: open when no URL may be called, half-open when one is
    /// probing and none is closed.
    fn update_breaker_gauge(&self) {
        let mut states = self.members.iter().filter_map(|m| m.breaker.as_ref());
        let Some(first) = states.next() else {
            return;
        };
        let mut any_closed = first.state() == 0;
        let mut any_half = first.state() == 2;
        for b in states {
            any_closed |= b.state() == 0;
            any_half |= b.state() == 2;
        }
        if any_closed {
            self.counters.breaker_state.set(0);
        } else if any_half {
            self.counters.breaker_state.set(2);
        } else {
            // Every URL is suspended until the first of them may be probed.
            let until = self
                .members
                .iter()
                .filter_map(|m| m.breaker.as_deref().map(Breaker::open_until_clock_ms))
                .min()
                .unwrap_or_default();
            self.counters.breaker_state.set_open_until(until);
        }
    }
}

/// The URLs an exchange has tried: a bit each, in one word up to 64 URLs.
enum Tried {
    Word(u64),
    Many(Vec<bool>),
}

impl Tried {
    fn new(n: usize) -> Self {
        if n <= 64 {
            Tried::Word(0)
        } else {
            Tried::Many(vec![false; n])
        }
    }

    fn get(&self, i: usize) -> bool {
        match self {
            Tried::Word(w) => w & (1 << i) != 0,
            Tried::Many(v) => v[i],
        }
    }

    fn set(&mut self, i: usize) {
        match self {
            Tried::Word(w) => *w |= 1 << i,
            Tried::Many(v) => v[i] = true,
        }
    }
}

/// Failures after which another URL may have the request: nothing reached the back end (the
/// connection failed, TLS handshake included, or the URL's queue was full), or the request may
/// safely go again (`retryable` on a closed connection). Failover does not depend on
/// `retryable` otherwise: a certificate refused is not worth a retry on the same URL, but
/// another URL may well take the request. A timeout is not: the back end may be busy with it.
fn nothing_sent(e: &MediationError) -> bool {
    match e.kind {
        ErrorKind::ConnectRefused
        | ErrorKind::ConnectTimeout
        | ErrorKind::Connect
        | ErrorKind::Unavailable => true,
        ErrorKind::UpstreamReset => e.retryable,
        _ => false,
    }
}

/// Counts one call in progress on a gauge for as long as it lives, so a call abandoned
/// mid-way (its client went away) does not stay counted.
struct InProgress<'a>(&'a std::sync::atomic::AtomicI64);

impl<'a> InProgress<'a> {
    fn enter(gauge: &'a std::sync::atomic::AtomicI64) -> Self {
        gauge.fetch_add(1, Relaxed);
        Self(gauge)
    }
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Records an attempt's outcome on its URL's breaker; a probe whose caller went away (the
/// client disconnected mid-attempt) lets the next call probe instead.
struct ProbeGuard<'a> {
    breaker: Option<&'a Breaker>,
    admit: Admit,
    done: bool,
}

impl ProbeGuard<'_> {
    fn record(mut self, ok: bool) {
        self.done = true;
        if let Some(b) = self.breaker {
            b.record(self.admit, ok);
        }
    }

    /// A good answer head whose body still streams ([`Breaker::record_head`]).
    fn record_head(mut self) {
        self.done = true;
        if let Some(b) = self.breaker {
            b.record_head(self.admit);
        }
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(b) = self.breaker {
                b.abandon(self.admit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::{BufRead, BufReader, Read, Write};

    fn endpoint(yaml: &str, metrics: &Registry) -> Result<Arc<Endpoint>, Vec<ConfigError>> {
        let text = format!(
            "listeners: {{ http: {{ bind: \"127.0.0.1:0\" }} }}\nendpoints:\n  svc:\n{yaml}"
        );
        let config = busbar_config::parse(&text, "t.yaml", |_| None).map_err(|e| e.0)?;
        let loaded = LoadedConfig {
            file: "t.yaml".into(),
            base_dir: ".".into(),
            config,
        };
        Endpoint::build("svc", &loaded.config.endpoints["svc"], &loaded, metrics, 1)
    }

    /// Answers each request with "path|host|authorization|body".
    fn back_end() -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut r = BufReader::new(s);
                let (mut line, mut auth, mut len) = (String::new(), String::new(), 0);
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    continue;
                }
                let mut host_v = String::new();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap_or(("", ""));
                    match k.to_ascii_lowercase().as_str() {
                        "host" => host_v = v.trim().to_owned(),
                        "authorization" => auth = v.trim().to_owned(),
                        "content-length" => len = v.trim().parse().unwrap_or(0),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                let out = format!("{path}|{host_v}|{auth}|{}", String::from_utf8_lossy(&body));
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    out.len()
                );
                let _ = r.get_mut().write_all(head.as_bytes());
                let _ = r.get_mut().write_all(out.as_bytes());
            }
        });
        addr
    }

    #[tokio::test]
    async fn send_takes_the_urls_path_keeps_the_query_and_sends_url_credentials() {
        let addr = back_end();
        let metrics = Registry::default();
        let ep =
            endpoint(&format!("    url: \"http://u:p@{addr}/svc\"\n"), &metrics).expect("endpoint");
        let req = Request::post("/ignored?x=1")
            .body(Body::full("hi"))
            .expect("request");
        let resp = ep.send(req).await.expect("send");
        let text = resp.into_body().collect().await.expect("body").to_bytes();
        // base64("u:p") = dTpw
        assert_eq!(
            &text[..],
            format!("/svc?x=1|{addr}|Basic dTpw|hi").as_bytes()
        );
        assert_eq!(metrics.endpoint("svc").attempts.load(Relaxed), 1);
    }

    /// Reads one request with a Content-Length body off `r`: its body, or `None` at the end.
    fn read_post(r: &mut BufReader<std::net::TcpStream>) -> Option<Vec<u8>> {
        let mut len = 0;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return None;
            }
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).ok()?;
        Some(body)
    }

    #[tokio::test]
    async fn a_post_the_back_ends_idle_close_crossed_goes_again_on_a_new_connection() {
        // The back end closes a kept-alive connection just as the next request goes out on
        // it, before the event loop saw the close: the request meets the end of the stream.
        // The kernel shows that the back end acknowledged none of it, so the POST goes once
        // more, whole, on a new connection, and the back end gets each body once.
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (close, closing) = std::sync::mpsc::channel::<()>();
        let seen = bodies.clone();
        std::thread::spawn(move || {
            for (n, s) in l.incoming().flatten().enumerate() {
                let mut r = BufReader::new(s);
                while let Some(body) = read_post(&mut r) {
                    seen.lock().expect("lock").push(body.clone());
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    let _ = r.get_mut().write_all(head.as_bytes());
                    let _ = r.get_mut().write_all(&body);
                    if n == 0 {
                        // The first connection closes when told, as an idle timeout would.
                        let _ = closing.recv();
                        break;
                    }
                }
            }
        });
        let metrics = Registry::default();
        let ep = endpoint(&format!("    url: \"http://{addr}/e\"\n"), &metrics).expect("endpoint");
        let post = |body: &'static str| Request::post("/").body(Body::full(body)).expect("request");
        let resp = ep.send(post("one")).await.expect("first");
        let text = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&text[..], b"one");
        // The pool's sweeper looks at the connection once (the event loop then waits for its
        // socket to be readable).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // The close arrives while the event loop does not run (this thread is busy).
        close.send(()).expect("close");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let upstream = &ep.members[0].upstream;
        while std::time::Instant::now() < deadline && !upstream.idle_closed_by_peer() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            upstream.idle_closed_by_peer(),
            "the back end's close arrived"
        );
        let resp = ep.send(post("two")).await.expect("second");
        let text = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&text[..], b"two");
        assert_eq!(upstream.stats.resent.load(Relaxed), 1, "sent again once");
        assert_eq!(
            *bodies.lock().expect("lock"),
            vec![b"one".to_vec(), b"two".to_vec()],
            "the back end got each body once"
        );
    }

    #[test]
    fn tried_urls_are_kept_one_bit_each_at_any_count() {
        for n in [1, 2, 63, 64, 65, 130] {
            let mut t = Tried::new(n);
            for i in (0..n).step_by(3) {
                t.set(i);
            }
            for i in 0..n {
                assert_eq!(t.get(i), i % 3 == 0, "n = {n}, i = {i}");
            }
        }
    }

    #[test]
    fn an_unreadable_ca_is_a_build_error_at_its_path() {
        let metrics = Registry::default();
        let errors = endpoint(
            "    url: \"https://localhost:1/a\"\n    tls: { ca: /nonexistent/ca.pem }\n",
            &metrics,
        )
        .err()
        .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "endpoints.svc.tls.ca");
        assert_eq!(errors[0].line, Some(5));
        assert!(
            errors[0].message.contains("/nonexistent/ca.pem"),
            "{errors:?}"
        );
    }
}
