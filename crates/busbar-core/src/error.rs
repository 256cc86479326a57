//! The one error type of the request path, and its mapping to a response.

use std::borrow::Cow;

use http::StatusCode;

use crate::body::{BodyError, Origin};
use crate::fault::{self, FaultCode, MessageFormat, RenderedFault};
use crate::BoxError;

/// Who caused an error; decides the status class and the SOAP fault code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The client sent something wrong (4xx, SOAP `Client`).
    Client,
    /// The back end failed (502/504, or 500 with a SOAP `Server` fault).
    Upstream,
    /// busbar itself failed (500).
    Internal,
    /// A configured rule rejected the message (the configured status).
    Policy,
}

/// What went wrong, coarse enough to count in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The back end refused the connection.
    ConnectRefused,
    /// Connecting to the back end timed out.
    ConnectTimeout,
    /// Connecting failed otherwise (DNS, unreachable, TLS).
    Connect,
    /// The back end did not answer within the response timeout.
    ResponseTimeout,
    /// The back end reset or closed the connection, or sent malformed HTTP.
    UpstreamReset,
    /// The client's request could not be read (reset, malformed framing).
    ClientBody,
    /// A body a step buffers exceeded `max_body`: the client's request (413), a back end's
    /// answer (502) or a step's own output (500).
    BodyTooLarge,
    /// The request was malformed for the step that read it (bad XML, bad JSON).
    BadRequest,
    /// No proxy serves the path.
    NotFound,
    /// The proxy does not accept the method.
    MethodNotAllowed,
    /// A `fault` step or a routing rule answered with a fault.
    Fault,
    /// A WS-Security check failed (signature, decryption, trust, freshness).
    Security,
    /// Any other failure inside busbar.
    Internal,
    /// A back end is unavailable on purpose: its circuit breaker is open, or its connection
    /// limit and queue are full (503).
    Unavailable,
}

impl ErrorKind {
    /// Every kind, in the order metrics list them.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::Connect,
        ErrorKind::ResponseTimeout,
        ErrorKind::UpstreamReset,
        ErrorKind::ClientBody,
        ErrorKind::BodyTooLarge,
        ErrorKind::BadRequest,
        ErrorKind::NotFound,
        ErrorKind::MethodNotAllowed,
        ErrorKind::Fault,
        ErrorKind::Security,
        ErrorKind::Internal,
        ErrorKind::Unavailable,
    ];

    /// A stable snake_case name, used as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::ResponseTimeout => "response_timeout",
            ErrorKind::UpstreamReset => "upstream_reset",
            ErrorKind::ClientBody => "client_body",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Fault => "fault",
            ErrorKind::Security => "security",
            ErrorKind::Internal => "internal",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// Index into [`ErrorKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// An error on the request path: what, who is to blame, whether a retry may help, where, why.
#[derive(Debug)]
pub struct MediationError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Who is to blame.
    pub blame: Blame,
    /// True when repeating the call could succeed: nothing was sent yet, or the request is
    /// idempotent and its body can be sent again. Set where the error is made, read by the
    /// endpoint's retry policy.
    pub retryable: bool,
    /// The config path of the step that failed (`proxies.XSLTProxy.out[0].xslt`), if any.
    pub step: Option<std::sync::Arc<str>>,
    /// The message a client sees (the SOAP faultstring or the problem title).
    pub reason: Cow<'static, str>,
    /// For policy faults: the configured status.
    pub status: Option<StatusCode>,
    /// The underlying cause, logged but not shown to clients.
    pub source: Option<BoxError>,
    /// A SOAP fault code chosen by the step, instead of the one the blame implies.
    pub fault_code: Option<FaultCode>,
    /// For a 503: when trying again makes sense (`Retry-After`), when known; 1 second
    /// otherwise.
    pub retry_after_secs: Option<std::num::NonZeroU16>,
}

impl std::fmt::Display for MediationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(step) = &self.step {
            write!(f, "{step}: ")?;
        }
        f.write_str(&self.reason)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for MediationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl MediationError {
    /// A new error with no source.
    pub fn new(kind: ErrorKind, blame: Blame, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            blame,
            retryable: false,
            step: None,
            reason: reason.into(),
            status: None,
            source: None,
            fault_code: None,
            retry_after_secs: None,
        }
    }

    /// A fault answered on purpose (a `fault` step or a routing rule), with its status.
    pub fn policy(status: StatusCode, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status: Some(status),
            ..Self::new(ErrorKind::Fault, Blame::Policy, reason)
        }
    }

    /// An internal failure.
    pub fn internal(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Internal, Blame::Internal, reason)
    }

    /// Marks the error as worth a retry (or not).
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets the status clients get.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = Some(status);
        self
    }

    /// Says when a retry makes sense (`Retry-After` of a 503): `after` rounded up to whole
    /// seconds, at least 1.
    pub fn with_retry_after(mut self, after: std::time::Duration) -> Self {
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        let secs = u16::try_from(secs.max(1)).unwrap_or(u16::MAX);
        self.retry_after_secs = std::num::NonZeroU16::new(secs);
        self
    }

    /// Sets the SOAP fault code clients see.
    pub fn with_fault_code(mut self, code: FaultCode) -> Self {
        self.fault_code = Some(code);
        self
    }

    /// Names the step that failed by its config path; the innermost step wins.
    pub fn in_step(mut self, path: &std::sync::Arc<str>) -> Self {
        self.step.get_or_insert_with(|| path.clone());
        self
    }

    /// The HTTP status this error answers with in `format`.
    ///
    /// The SOAP 1.1 and 1.2 HTTP bindings send every fault with 500, except `env:Sender`
    /// faults in SOAP 1.2 (400; its `VersionMismatch` and `MustUnderstand` stay 500, SOAP 1.2
    /// part 2 §7.5.1.2); JSON clients get the status of the blame.
    pub fn status(&self, format: MessageFormat) -> StatusCode {
        if let Some(status) = self.status {
            return status;
        }
        let by_kind = match self.kind {
            ErrorKind::NotFound => Some(StatusCode::NOT_FOUND),
            ErrorKind::MethodNotAllowed => Some(StatusCode::METHOD_NOT_ALLOWED),
            // Only the client's own body is too large for the client to fix; a back end's
            // answer over the limit is a failed back end, as the blame below answers it.
            ErrorKind::BodyTooLarge if self.blame == Blame::Client => {
                Some(StatusCode::PAYLOAD_TOO_LARGE)
            }
            ErrorKind::Unavailable => Some(StatusCode::SERVICE_UNAVAILABLE),
            _ => None,
        };
        if let Some(status) = by_kind {
            return status;
        }
        match (format, self.blame) {
            (MessageFormat::Soap(crate::SoapVersion::V12), Blame::Client)
                if !matches!(
                    self.fault_code,
                    Some(FaultCode::VersionMismatch | FaultCode::MustUnderstand)
                ) =>
            {
                StatusCode::BAD_REQUEST
            }
            (MessageFormat::Soap(_), _) => StatusCode::INTERNAL_SERVER_ERROR,
            (MessageFormat::Problem, Blame::Client) => StatusCode::BAD_REQUEST,
            (MessageFormat::Problem, Blame::Upstream) => match self.kind {
                ErrorKind::ConnectTimeout | ErrorKind::ResponseTimeout => {
                    StatusCode::GATEWAY_TIMEOUT
                }
                _ => StatusCode::BAD_GATEWAY,
            },
            (MessageFormat::Problem, _) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The body a client gets for this error in `format`.
    pub fn render(&self, format: MessageFormat) -> (StatusCode, RenderedFault) {
        let status = self.status(format);
        let code = self.fault_code.unwrap_or(match self.blame {
            Blame::Client => FaultCode::Client,
            _ => FaultCode::Server,
        });
        (
            status,
            fault::render(format, code, &self.reason, None, status.as_u16()),
        )
    }
}

/// A back end's answer that broke off, paused past its endpoint's timeout or passed its
/// deadline mid-body: what it is counted as (`upstream_reset` or `response_timeout`) and what
/// happened. A step that reads such a body fails as that kind (a timeout is a 504).
#[derive(Debug)]
pub struct AnswerCut {
    /// The error kind it counts as.
    pub kind: ErrorKind,
    /// What happened, naming the endpoint.
    pub message: String,
}

impl AnswerCut {
    /// The kind of the [`AnswerCut`] in `e` or anywhere in its causes.
    pub fn kind_in(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
        let mut cause = Some(e);
        while let Some(c) = cause {
            if let Some(cut) = c.downcast_ref::<AnswerCut>() {
                return Some(cut.kind);
            }
            cause = c.source();
        }
        None
    }
}

impl std::fmt::Display for AnswerCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AnswerCut {}

impl From<BodyError> for MediationError {
    fn from(e: BodyError) -> Self {
        match &e {
            BodyError::TooLarge {
                limit,
                origin: Some(Origin::Client),
            } => MediationError::new(
                ErrorKind::BodyTooLarge,
                Blame::Client,
                format!("Message body larger than {limit} bytes"),
            ),
            // The client sent nothing wrong: the back end answered more than the proxy reads.
            BodyError::TooLarge {
                limit,
                origin: Some(Origin::Upstream),
            } => MediationError::new(
                ErrorKind::BodyTooLarge,
                Blame::Upstream,
                format!("The back end's answer is larger than max_body ({limit} bytes)"),
            ),
            BodyError::TooLarge {
                limit,
                origin: None,
            } => MediationError::new(
                ErrorKind::BodyTooLarge,
                Blame::Internal,
                format!("A step's output is larger than max_body ({limit} bytes)"),
            ),
            // Not the client's fault nor a back end's: busbar holds as many request bodies as
            // it was told to, and a later try may fit (503 with Retry-After, a SOAP Server
            // fault). Counted in busbar_buffered_request_refused_total, not logged
            // above debug: under a flood that would be a line per refused request.
            BodyError::OverBudget { .. } => MediationError::new(
                ErrorKind::Unavailable,
                Blame::Policy,
                "Too many request bodies are held in memory now: try again shortly",
            ),
            BodyError::Rejected(msg) => MediationError::new(
                ErrorKind::BadRequest,
                Blame::Client,
                format!("The message was rejected: {msg}"),
            ),
            BodyError::Read {
                origin: Origin::Client,
                ..
            } => MediationError::new(
                ErrorKind::ClientBody,
                Blame::Client,
                "Reading the request body failed",
            ),
            // What the back end did (it names the endpoint) is the client's to know, as for
            // an answer that never came; a body cut for time is a timeout, as a late head is.
            BodyError::Read {
                origin: Origin::Upstream,
                source,
            } => MediationError::new(
                AnswerCut::kind_in(source.as_ref()).unwrap_or(ErrorKind::UpstreamReset),
                Blame::Upstream,
                format!("Reading the back-end response failed: {source}"),
            ),
        }
        .with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SoapVersion;

    #[test]
    fn a_back_end_body_that_failed_says_what_the_back_end_did() {
        let e = MediationError::from(BodyError::Read {
            origin: Origin::Upstream,
            source: "endpoint 'svc' broke off after 5 bytes of its response body".into(),
        });
        assert_eq!(e.kind, ErrorKind::UpstreamReset);
        assert_eq!(
            e.reason,
            "Reading the back-end response failed: endpoint 'svc' broke off after 5 bytes of its \
             response body"
        );
        assert_eq!(e.status(MessageFormat::Problem), 502);
    }

    #[test]
    fn a_back_end_answer_over_max_body_is_the_back_ends_failure_not_the_clients() {
        let e = MediationError::from(BodyError::TooLarge {
            limit: 1024,
            origin: Some(Origin::Upstream),
        });
        assert_eq!(e.kind, ErrorKind::BodyTooLarge);
        assert_eq!(e.blame, Blame::Upstream);
        assert_eq!(
            e.reason,
            "The back end's answer is larger than max_body (1024 bytes)"
        );
        assert_eq!(e.status(MessageFormat::Problem), 502);
        for (v, code) in [
            (SoapVersion::V11, "soapenv:Server"),
            (SoapVersion::V12, "env:Receiver"),
        ] {
            let (status, fault) = e.render(MessageFormat::Soap(v));
            assert_eq!(status, 500, "{v:?}");
            let body = String::from_utf8_lossy(&fault.body).into_owned();
            assert!(body.contains(code), "{body}");
        }

        let client = MediationError::from(BodyError::TooLarge {
            limit: 1024,
            origin: Some(Origin::Client),
        });
        assert_eq!(client.blame, Blame::Client);
        assert_eq!(client.reason, "Message body larger than 1024 bytes");
        assert_eq!(client.status(MessageFormat::Problem), 413);
        assert_eq!(client.status(MessageFormat::Soap(SoapVersion::V11)), 413);

        let built = MediationError::from(BodyError::TooLarge {
            limit: 1024,
            origin: None,
        });
        assert_eq!(built.blame, Blame::Internal);
        assert_eq!(built.status(MessageFormat::Problem), 500);
    }

    #[test]
    fn a_back_end_body_cut_for_time_is_a_gateway_timeout() {
        let cut = |kind| AnswerCut {
            kind,
            message: "endpoint 'svc' paused longer than 1s after 5 bytes of its response body"
                .into(),
        };
        let e = MediationError::from(BodyError::Read {
            origin: Origin::Upstream,
            source: Box::new(cut(ErrorKind::ResponseTimeout)),
        });
        assert_eq!(e.kind, ErrorKind::ResponseTimeout);
        assert_eq!(e.status(MessageFormat::Problem), 504);
        let e = MediationError::from(BodyError::Read {
            origin: Origin::Upstream,
            source: Box::new(cut(ErrorKind::UpstreamReset)),
        });
        assert_eq!(e.status(MessageFormat::Problem), 502);
    }

    #[test]
    fn a_spent_body_budget_is_a_503_and_a_soap_server_fault() {
        let e = MediationError::from(BodyError::OverBudget { limit: 1024 });
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert_eq!(e.status(MessageFormat::Problem), 503);
        assert_eq!(e.status(MessageFormat::Soap(SoapVersion::V11)), 503);
        let (_, rendered) = e.render(MessageFormat::Soap(SoapVersion::V11));
        let body = String::from_utf8_lossy(&rendered.body).into_owned();
        assert!(body.contains("Server"), "{body}");
    }

    #[test]
    fn upstream_errors_are_500_for_soap_and_502_or_504_for_json() {
        let e = MediationError::new(ErrorKind::ConnectRefused, Blame::Upstream, "refused");
        assert_eq!(e.status(MessageFormat::Soap(SoapVersion::V11)), 500);
        assert_eq!(e.status(MessageFormat::Problem), 502);
        let t = MediationError::new(ErrorKind::ResponseTimeout, Blame::Upstream, "slow");
        assert_eq!(t.status(MessageFormat::Problem), 504);
    }

    #[test]
    fn soap_12_sender_faults_are_400_but_version_and_must_understand_faults_500() {
        let v12 = MessageFormat::Soap(SoapVersion::V12);
        let sender = MediationError::new(ErrorKind::Security, Blame::Client, "bad");
        assert_eq!(sender.status(v12), 400);
        for code in [FaultCode::VersionMismatch, FaultCode::MustUnderstand] {
            let e = MediationError::new(ErrorKind::Security, Blame::Client, "bad")
                .with_fault_code(code);
            assert_eq!(e.status(v12), 500, "{code:?}");
            assert_eq!(e.status(MessageFormat::Soap(SoapVersion::V11)), 500);
        }
    }

    #[test]
    fn every_kind_is_in_all_exactly_once_at_its_index() {
        // The list must name every variant, or the exhaustive match it expands to does not
        // compile: a new kind fails here until it is listed, then below until it is in ALL.
        macro_rules! every_kind {
            ($($kind:ident),* $(,)?) => {{
                fn exhaustive(k: ErrorKind) {
                    match k {
                        $(ErrorKind::$kind => {})*
                    }
                }
                let _ = exhaustive;
                [$(ErrorKind::$kind),*]
            }};
        }
        let every = every_kind!(
            ConnectRefused,
            ConnectTimeout,
            Connect,
            ResponseTimeout,
            UpstreamReset,
            ClientBody,
            BodyTooLarge,
            BadRequest,
            NotFound,
            MethodNotAllowed,
            Fault,
            Security,
            Internal,
            Unavailable,
        );
        assert_eq!(
            ErrorKind::ALL.len(),
            every.len(),
            "ALL misses or repeats a kind"
        );
        for kind in every {
            let times = ErrorKind::ALL.iter().filter(|k| **k == kind).count();
            assert_eq!(times, 1, "{kind:?} is in ALL {times} times");
            assert_eq!(ErrorKind::ALL.get(kind.index()), Some(&kind), "{kind:?}");
        }
        let mut names: Vec<&str> = every.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), every.len(), "two kinds share a metrics name");
    }

    #[test]
    fn unavailable_is_503_for_soap_and_json() {
        let e = MediationError::new(ErrorKind::Unavailable, Blame::Upstream, "breaker open");
        assert_eq!(e.status(MessageFormat::Soap(SoapVersion::V11)), 503);
        assert_eq!(e.status(MessageFormat::Problem), 503);
        assert!(ErrorKind::ALL.contains(&ErrorKind::Unavailable));
        assert_eq!(
            ErrorKind::ALL[ErrorKind::Unavailable.index()],
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn policy_faults_keep_their_status() {
        let e = MediationError::policy(StatusCode::FORBIDDEN, "no");
        assert_eq!(e.status(MessageFormat::Soap(SoapVersion::V11)), 403);
    }
}
