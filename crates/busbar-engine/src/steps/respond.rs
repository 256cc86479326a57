//! The `respond` step: answers the client now with the current message, or with a fixed
//! status and body. Config: `busbar_config::RespondConfig`.

use busbar_config::RespondConfig;
use busbar_core::{Body, Exchange, Flow, MediationError};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::{Apply, BuildCx, Failed, StepCx};

/// A built `respond`.
#[derive(Debug)]
pub struct RespondStep {
    status: Option<StatusCode>,
    body: Option<(Bytes, Option<HeaderValue>)>,
}

impl RespondStep {
    /// Checks the status and content type.
    pub fn build(cfg: &RespondConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let status = match cfg.status {
            Some(s) => Some(
                StatusCode::from_u16(s)
                    .map_err(|e| cx.fail(None, format!("{here}.status"), e.to_string()))?,
            ),
            None => None,
        };
        let content_type = match &cfg.content_type {
            Some(c) => Some(HeaderValue::from_str(c).map_err(|_| {
                cx.fail(
                    None,
                    format!("{here}.content_type"),
                    format!("invalid header value '{c}'"),
                )
            })?),
            None => None,
        };
        Ok(Self {
            status,
            body: cfg
                .body
                .as_ref()
                .map(|b| (Bytes::from(b.clone()), content_type)),
        })
    }
}

impl Apply for RespondStep {
    async fn apply(&self, ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        if ex.response.is_none() {
            // Answering in the request phase sends the request back (the classic "respond"
            // mediator), with its content type.
            let body = std::mem::take(&mut ex.request_body);
            let mut resp = Response::new(body);
            for name in [CONTENT_TYPE, CONTENT_LENGTH] {
                if let Some(v) = ex.request.headers.get(&name) {
                    resp.headers_mut().insert(name, v.clone());
                }
            }
            ex.response = Some(resp);
        }
        if let Some((bytes, ct)) = &self.body {
            ex.set_body(Body::full(bytes.clone()));
            if let Some(ct) = ct {
                ex.headers_mut().insert(CONTENT_TYPE, ct.clone());
            }
        }
        if let (Some(status), Some(resp)) = (self.status, ex.response.as_mut()) {
            *resp.status_mut() = status;
        }
        Ok(Flow::Respond)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use busbar_core::Flow;

    #[test]
    fn respond_in_the_request_phase_sends_the_request_back() {
        let l = loaded(
            "sequences:\n  s:\n    - respond: {}\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[("content-type", "text/xml")], b"<a/>");
        assert_eq!(run_steps(&steps, &mut ex).ok(), Some(Flow::Respond));
        assert_eq!(ex.headers()["content-type"], "text/xml");
        assert_eq!(body_of(&mut ex), b"<a/>");
        assert_eq!(ex.response.as_ref().map(|r| r.status().as_u16()), Some(200));
    }

    #[test]
    fn a_fixed_body_and_status_replace_the_message() {
        let l = loaded(
            "sequences:\n  s:\n    - respond: { status: 201, body: '{\"ok\":true}', content_type: application/json }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(
            &[("content-type", "text/xml"), ("content-length", "4")],
            b"<a/>",
        );
        assert_eq!(run_steps(&steps, &mut ex).ok(), Some(Flow::Respond));
        assert_eq!(ex.headers()["content-type"], "application/json");
        assert!(
            ex.headers().get("content-length").is_none(),
            "stale length kept"
        );
        assert_eq!(body_of(&mut ex), br#"{"ok":true}"#);
        assert_eq!(ex.response.as_ref().map(|r| r.status().as_u16()), Some(201));
    }
}
