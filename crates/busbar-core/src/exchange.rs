//! The per-request [`Exchange`] that steps read and change.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use http::{request, HeaderMap, Response};

use crate::body::Body;
use crate::fault::MessageFormat;

/// What a step tells the executor to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Run the next step.
    Continue,
    /// Stop the sequence and answer the client with the current message.
    Respond,
}

/// Which message steps currently act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No response yet: steps act on the request.
    Request,
    /// A back end (or a step) produced a response: steps act on it.
    Response,
}

/// One request travelling through a proxy: owned by one task, never shared.
#[derive(Debug)]
pub struct Exchange {
    /// The request head as received (hop-by-hop headers included).
    pub request: request::Parts,
    /// The request body; `call` takes it.
    pub request_body: Body,
    /// The response, once a `call` or a step produced one.
    pub response: Option<Response<Body>>,
    /// The format errors answer in (SOAP version or JSON problem).
    pub format: MessageFormat,
    /// When the request arrived.
    pub started: Instant,
    /// Name of the proxy serving this exchange.
    pub proxy: Arc<str>,
    /// Path parameters the router matched (`/api/product/{id}` gives `id`), in pattern order.
    pub params: Vec<(Arc<str>, String)>,
    /// Variables steps set and read, by name; they live as long as the exchange.
    pub vars: BTreeMap<String, Var>,
    /// The W3C trace this exchange belongs to (the caller's, or one started here).
    pub trace: crate::trace::TraceContext,
    /// Time spent waiting for back ends (each attempt until its response head), for the
    /// access log.
    pub backend_time: std::time::Duration,
    /// Parsed views of the current bodies, so that a body is parsed at most once.
    views: Vec<View>,
    /// Set once a call took the request body and it cannot be sent again: a later call fails
    /// at once instead of sending a head whose Content-Length would lie.
    pub body_gone: Option<BodyGone>,
}

/// Why an exchange's request body can no longer be sent.
#[derive(Debug, Clone)]
pub enum BodyGone {
    /// A call to this endpoint sent it.
    SentTo(Arc<str>),
    /// The client's body failed (it is the client's error, not busbar's).
    Unreadable,
    /// A failed call kept too little of it to send it again.
    Lost(Arc<str>),
}

impl BodyGone {
    /// What happened to the body, for an error message.
    pub fn why(&self) -> std::borrow::Cow<'_, str> {
        match self {
            BodyGone::SentTo(endpoint) => {
                format!("the request body was already sent to endpoint '{endpoint}'").into()
            }
            BodyGone::Unreadable => "the request body could not be read".into(),
            BodyGone::Lost(why) => (**why).into(),
        }
    }
}

/// A parsed form of one message's body (a JSON value, an XML document), kept until the body
/// changes.
struct View {
    phase: Phase,
    value: Box<dyn Any + Send>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("phase", &self.phase).finish()
    }
}

/// The value of an exchange variable.
#[derive(Debug, Clone, PartialEq)]
pub enum Var {
    /// Text.
    Text(String),
    /// Raw bytes (a body kept for later, a binary value).
    Bytes(bytes::Bytes),
}

impl Var {
    /// The value as text, when it is text or UTF-8 bytes.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Var::Text(s) => Some(s),
            Var::Bytes(b) => std::str::from_utf8(b).ok(),
        }
    }
}

impl Exchange {
    /// A new exchange for a request received by `proxy`.
    pub fn new(request: request::Parts, body: Body, proxy: Arc<str>) -> Self {
        let format = MessageFormat::from_request_headers(&request.headers);
        Self {
            request,
            request_body: body,
            response: None,
            format,
            started: Instant::now(),
            proxy,
            params: Vec::new(),
            vars: BTreeMap::new(),
            trace: crate::trace::TraceContext::detached(),
            backend_time: std::time::Duration::ZERO,
            views: Vec::new(),
            body_gone: None,
        }
    }

    /// Takes the cached view of type `T` of the current message's body, if there is one
    /// (give it back with [`Exchange::put_view`] once used).
    pub fn take_view<T: Any + Send>(&mut self) -> Option<T> {
        let phase = self.phase();
        let i = self
            .views
            .iter()
            .position(|v| v.phase == phase && v.value.is::<T>())?;
        let view = self.views.swap_remove(i);
        view.value.downcast::<T>().ok().map(|b| *b)
    }

    /// Keeps `view` as the parsed form of the current message's body until the body changes.
    pub fn put_view<T: Any + Send>(&mut self, view: T) {
        let phase = self.phase();
        self.views
            .retain(|v| !(v.phase == phase && v.value.is::<T>()));
        self.views.push(View {
            phase,
            value: Box::new(view),
        });
    }

    /// The path parameter `name`, if the router matched one.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The variable `name`, if a step set it.
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.vars.get(name)
    }

    /// Sets the variable `name`.
    pub fn set_var(&mut self, name: impl Into<String>, value: Var) {
        self.vars.insert(name.into(), value);
    }

    /// The phase steps act in.
    pub fn phase(&self) -> Phase {
        if self.response.is_some() {
            Phase::Response
        } else {
            Phase::Request
        }
    }

    /// Headers of the current message.
    pub fn headers(&self) -> &HeaderMap {
        match &self.response {
            Some(r) => r.headers(),
            None => &self.request.headers,
        }
    }

    /// Headers of the current message, to change.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        match &mut self.response {
            Some(r) => r.headers_mut(),
            None => &mut self.request.headers,
        }
    }

    /// Body of the current message.
    pub fn body_mut(&mut self) -> &mut Body {
        match &mut self.response {
            Some(r) => r.body_mut(),
            None => &mut self.request_body,
        }
    }

    /// Replaces the body of the current message, dropping the length headers of the old one
    /// (a stale Content-Length would make the next hop wait for bytes that never come).
    pub fn set_body(&mut self, body: Body) {
        let phase = self.phase();
        self.views.retain(|v| v.phase != phase);
        let headers = self.headers_mut();
        headers.remove(http::header::CONTENT_LENGTH);
        headers.remove(http::header::TRANSFER_ENCODING);
        *self.body_mut() = body;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(body: &'static [u8]) -> Exchange {
        let (parts, ()) = http::Request::builder()
            .uri("/p")
            .body(())
            .map(http::Request::into_parts)
            .unwrap_or_else(|e| panic!("{e}"));
        Exchange::new(parts, Body::full(body), "P".into())
    }

    #[test]
    fn a_response_does_not_see_the_requests_views() {
        let mut ex = exchange(b"x");
        ex.put_view(7u32);
        ex.response = Some(http::Response::new(Body::empty()));
        assert_eq!(ex.take_view::<u32>(), None);
        ex.response = None;
        assert_eq!(ex.take_view::<u32>(), Some(7));
    }

    #[test]
    fn variables_and_parameters_read_back() {
        let mut ex = exchange(b"");
        ex.params.push(("id".into(), "42".into()));
        ex.set_var("tier", Var::Text("gold".into()));
        assert_eq!(ex.param("id"), Some("42"));
        assert_eq!(ex.param("nope"), None);
        assert_eq!(ex.var("tier").and_then(Var::as_str), Some("gold"));
    }
}
