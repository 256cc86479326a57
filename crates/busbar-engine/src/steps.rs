//! The closed set of built-in steps and the executor that runs a sequence of them.
//!
//! Steps are built once from their config (see [`crate::runtime`]) and are immutable; a
//! request only reads them. Nested sequences are shared (`Arc`) and run recursively.

use std::sync::Arc;

use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::client::Endpoint;

/// A built step.
#[derive(Debug)]
pub enum Step {
    /// Send the request to an endpoint.
    Call(Arc<Endpoint>),
    /// Answer with a fault.
    Fault(FaultStep),
    /// Answer now.
    Respond(RespondStep),
    /// Set a header on the current message.
    SetHeader(HeaderName, HeaderValue),
    /// Remove a header from the current message.
    RemoveHeader(HeaderName),
    /// Log a line.
    Log(LogStep),
    /// Run a named sequence.
    Sequence(Arc<Sequence>),
    /// Content-based routing.
    Route(crate::route::RouteStep),
    /// XSLT transformation.
    Xslt(crate::xslt::XsltStep),
    /// WS-Security verification.
    WsseVerify(crate::wsse::VerifyStep),
    /// WS-Security timestamp, signature, encryption.
    WsseSecure(crate::wsse::SecureStep),
}

impl Step {
    /// The step's config name.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Call(_) => "call",
            Step::Fault(_) => "fault",
            Step::Respond(_) => "respond",
            Step::SetHeader(..) => "set_header",
            Step::RemoveHeader(_) => "remove_header",
            Step::Log(_) => "log",
            Step::Sequence(_) => "sequence",
            Step::Route(_) => "route",
            Step::Xslt(_) => "xslt",
            Step::WsseVerify(_) => "wsse_verify",
            Step::WsseSecure(_) => "wsse_secure",
        }
    }
}

/// A step with the counters the executor keeps for it (count, errors, latency).
#[derive(Debug)]
pub struct BuiltStep {
    /// The step.
    pub step: Step,
    /// Its metrics, labelled with its config path.
    pub counters: Arc<busbar_core::metrics::Counters>,
}

/// A named, reusable list of steps.
#[derive(Debug, Default)]
pub struct Sequence {
    /// Its name (empty for a proxy's own sequences).
    pub name: String,
    /// The steps, in order.
    pub steps: Vec<BuiltStep>,
}

/// The `fault` step.
#[derive(Debug)]
pub struct FaultStep {
    /// Answer status.
    pub status: StatusCode,
    /// Faultstring / problem title.
    pub reason: Arc<str>,
    /// True for a client (sender) fault code.
    pub client: bool,
}

/// The `respond` step.
#[derive(Debug)]
pub struct RespondStep {
    /// Fixed status.
    pub status: Option<StatusCode>,
    /// Fixed body and its content type.
    pub body: Option<(bytes::Bytes, Option<HeaderValue>)>,
}

/// The `log` step.
#[derive(Debug)]
pub struct LogStep {
    /// The message.
    pub message: String,
    /// Its level.
    pub level: tracing::Level,
}

/// What steps of one proxy may do with a body, from the proxy's config.
#[derive(Debug, Clone, Copy)]
pub struct StepCx {
    /// Largest body a step may buffer.
    pub max_body: u64,
    /// Check the rest of an XML body a streaming route decided on early (`xml_check: whole`).
    pub check_xml_tail: bool,
}

/// Runs `steps` in order until one answers or fails.
pub async fn run(
    steps: &[BuiltStep],
    ex: &mut Exchange,
    cx: &StepCx,
) -> Result<Flow, MediationError> {
    use std::sync::atomic::Ordering::Relaxed;
    for BuiltStep { step, counters } in steps {
        let started = std::time::Instant::now();
        counters.requests.fetch_add(1, Relaxed);
        let result = apply(step, ex, cx).await;
        counters.latency.observe(started.elapsed());
        let flow = result.map_err(|e| {
            counters.error(e.kind);
            e.in_step(step.kind())
        })?;
        if flow == Flow::Respond {
            return Ok(Flow::Respond);
        }
    }
    Ok(Flow::Continue)
}

async fn apply(step: &Step, ex: &mut Exchange, cx: &StepCx) -> Result<Flow, MediationError> {
    match step {
        Step::Call(endpoint) => {
            if ex.response.is_some() {
                return Err(MediationError::internal(
                    "'call' after a response: only one call per exchange is supported",
                ));
            }
            endpoint.call(ex).await?;
            Ok(Flow::Continue)
        }
        Step::Fault(f) => {
            let mut e = MediationError::policy(f.status, f.reason.to_string());
            if f.client {
                e.blame = Blame::Client;
            }
            Err(e)
        }
        Step::Respond(r) => {
            respond(r, ex);
            Ok(Flow::Respond)
        }
        Step::SetHeader(name, value) => {
            ex.headers_mut().insert(name.clone(), value.clone());
            Ok(Flow::Continue)
        }
        Step::RemoveHeader(name) => {
            ex.headers_mut().remove(name);
            Ok(Flow::Continue)
        }
        Step::Log(l) => {
            log(l, ex);
            Ok(Flow::Continue)
        }
        Step::Sequence(seq) => Box::pin(run(&seq.steps, ex, cx)).await,
        Step::Xslt(x) => {
            x.apply(ex, cx.max_body).await?;
            Ok(Flow::Continue)
        }
        Step::WsseVerify(w) => {
            w.apply(ex, cx.max_body).await?;
            Ok(Flow::Continue)
        }
        Step::WsseSecure(w) => {
            w.apply(ex, cx.max_body).await?;
            Ok(Flow::Continue)
        }
        Step::Route(route) => {
            for (condition, steps) in &route.cases {
                if condition.holds(ex, cx).await? {
                    return Box::pin(run(steps, ex, cx)).await;
                }
            }
            match &route.otherwise {
                Some(steps) => Box::pin(run(steps, ex, cx)).await,
                None => Ok(Flow::Continue),
            }
        }
    }
}

fn respond(r: &RespondStep, ex: &mut Exchange) {
    if ex.response.is_none() {
        // Answering in the request phase sends the request back (the classic "respond"
        // mediator), with its content type.
        let body = std::mem::take(&mut ex.request_body);
        let mut resp = Response::new(body);
        if let Some(ct) = ex.request.headers.get(CONTENT_TYPE) {
            resp.headers_mut().insert(CONTENT_TYPE, ct.clone());
        }
        if let Some(len) = ex.request.headers.get(http::header::CONTENT_LENGTH) {
            resp.headers_mut()
                .insert(http::header::CONTENT_LENGTH, len.clone());
        }
        ex.response = Some(resp);
    }
    if let Some((bytes, ct)) = &r.body {
        ex.set_body(Body::full(bytes.clone()));
        if let Some(ct) = ct {
            ex.headers_mut().insert(CONTENT_TYPE, ct.clone());
        }
    }
    if let (Some(status), Some(resp)) = (r.status, ex.response.as_mut()) {
        *resp.status_mut() = status;
    }
}

fn log(l: &LogStep, ex: &Exchange) {
    let method = &ex.request.method;
    let path = ex.request.uri.path();
    let proxy = &*ex.proxy;
    let status = ex.response.as_ref().map(|r| r.status().as_u16());
    let msg = &l.message;
    match l.level {
        tracing::Level::ERROR => tracing::error!(proxy, %method, path, ?status, "{msg}"),
        tracing::Level::WARN => tracing::warn!(proxy, %method, path, ?status, "{msg}"),
        tracing::Level::INFO => tracing::info!(proxy, %method, path, ?status, "{msg}"),
        tracing::Level::DEBUG => tracing::debug!(proxy, %method, path, ?status, "{msg}"),
        tracing::Level::TRACE => tracing::trace!(proxy, %method, path, ?status, "{msg}"),
    }
}

/// The error for an `in` sequence that finished without producing a response.
pub fn no_response() -> MediationError {
    MediationError::new(
        ErrorKind::Internal,
        Blame::Internal,
        "The proxy's steps ended without a response (add a 'call' or 'respond' step)",
    )
}
