//! The admin listener: `/healthz`, `/readyz`, `/metrics`, `/config` and `POST /reload`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use busbar_core::Body;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use crate::engine::Control;
use crate::serve::{ConnInfo, Handler, ResponseBody};

/// The admin API as a [`Handler`], served on its own thread by the engine.
#[derive(Debug, Clone)]
pub struct AdminHandler {
    /// Reload and the engine state.
    pub control: Arc<Control>,
}

impl Handler for AdminHandler {
    async fn handle(&self, req: Request<Incoming>, _conn: &ConnInfo) -> Response<ResponseBody> {
        handle(&self.control, req).await.map(ResponseBody::plain)
    }
}

fn text(status: StatusCode, ct: &'static str, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut r = Response::new(Body::full(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

async fn handle(control: &Control, req: Request<Incoming>) -> Response<Body> {
    let shared = &control.shared;
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/readyz") => {
            if shared.draining.load(Relaxed) {
                text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "draining\n")
            } else {
                text(StatusCode::OK, "text/plain", "ready\n")
            }
        }
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            shared.metrics.render(),
        ),
        (&Method::GET, "/config") => {
            let rt = shared.runtime.load();
            match serde_json::to_value(&rt.config.config) {
                Ok(mut v) => {
                    redact(&mut v, None);
                    let body = serde_json::to_vec_pretty(&v).unwrap_or_default();
                    text(StatusCode::OK, "application/json", body)
                }
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("cannot render the config: {e}\n"),
                ),
            }
        }
        (&Method::POST, "/reload") => {
            // Building a runtime reads files and compiles; it blocks only the admin thread,
            // never a worker, and reloads are serialised anyway.
            match control.reload() {
                Ok(msg) => text(StatusCode::OK, "text/plain", format!("{msg}\n")),
                Err(e) => text(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n")),
            }
        }
        (_, "/healthz" | "/readyz" | "/metrics" | "/config" | "/reload") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// Replaces secrets in the rendered config: credentials in URLs and any value under a key
/// that names a secret.
fn redact(v: &mut Value, key: Option<&str>) {
    const SECRET_KEYS: [&str; 4] = ["password", "secret", "token", "passphrase"];
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                redact(child, Some(k));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact(i, key)),
        Value::String(s) => {
            let k = key.unwrap_or("").to_ascii_lowercase();
            if SECRET_KEYS.iter().any(|sk| k.contains(sk)) {
                *s = "<redacted>".into();
            } else if let Some(rest) = s
                .strip_prefix("http://")
                .or_else(|| s.strip_prefix("https://"))
            {
                if let Some(at) = rest.find('@').filter(|at| !rest[..*at].contains('/')) {
                    let scheme = if s.starts_with("https") {
                        "https"
                    } else {
                        "http"
                    };
                    *s = format!("{scheme}://<redacted>@{}", &rest[at + 1..]);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_url_credentials_are_redacted() {
        let mut v = serde_json::json!({
            "endpoints": { "a": { "url": "http://user:pw@host:1/p" } },
            "keys": { "password": "hunter2" },
            "plain": "http://host/p@x"
        });
        redact(&mut v, None);
        assert_eq!(v["endpoints"]["a"]["url"], "http://<redacted>@host:1/p");
        assert_eq!(v["keys"]["password"], "<redacted>");
        assert_eq!(v["plain"], "http://host/p@x");
    }
}
