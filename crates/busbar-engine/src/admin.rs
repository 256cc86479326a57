//! The admin listener: `/healthz`, `/readyz`, `/metrics`, `/config`, `POST /reload`, and the
//! deployed processes (`/processes`, `/processes/instances`, `DELETE
//! /processes/instances/{id}`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::serve::RequestBody;
use busbar_core::metrics::escape;
use busbar_core::Body;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use serde_json::Value;

use crate::engine::Control;
use crate::serve::{host_problem, ConnInfo, Handler, ResponseBody};

/// The admin API as a [`Handler`], served on its own thread by the engine.
#[derive(Debug, Clone)]
pub struct AdminHandler {
    /// Reload and the engine state.
    pub control: Arc<Control>,
    /// The address the admin listens on: a `Host` naming it counts as local.
    pub local: Option<SocketAddr>,
}

impl Handler for AdminHandler {
    async fn handle(&self, req: Request<RequestBody>, _conn: &ConnInfo) -> Response<ResponseBody> {
        let refused = refuse(&self.control, self.local, &req);
        match refused {
            Some(resp) => resp,
            None => handle(&self.control, req).await,
        }
        .map(ResponseBody::plain)
    }
}

/// Checks a request before any route: a valid `Host`, the bearer token when `admin.token` is
/// set (every route but `/healthz`), and, for a call that changes something (any method but
/// GET and HEAD), no `Origin` and a local `Host`, so a web page cannot make a browser call it.
fn refuse<B>(
    control: &Control,
    local: Option<SocketAddr>,
    req: &Request<B>,
) -> Option<Response<Body>> {
    if let Some(reason) = host_problem(req) {
        return Some(text(
            StatusCode::BAD_REQUEST,
            "text/plain",
            format!("{reason}\n"),
        ));
    }
    let rt = control.shared.runtime.load();
    if let Some(token) = &rt.config.config.admin.token {
        if req.uri().path() != "/healthz" && !bearer_matches(req, token.expose()) {
            let mut r = text(StatusCode::UNAUTHORIZED, "text/plain", "unauthorized\n");
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return Some(r);
        }
    }
    if *req.method() != Method::GET && *req.method() != Method::HEAD {
        if req.headers().contains_key(ORIGIN) {
            return Some(text(
                StatusCode::FORBIDDEN,
                "text/plain",
                "forbidden: admin calls from web pages (with an Origin header) are refused\n",
            ));
        }
        let host = req
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !host.is_empty() && !is_local_host(host, local) {
            return Some(text(
                StatusCode::FORBIDDEN,
                "text/plain",
                "forbidden: the Host header must name this machine (localhost, a loopback address or the admin's address)\n",
            ));
        }
    }
    None
}

/// True when `Authorization` is `Bearer TOKEN` (compared in constant time).
fn bearer_matches<B>(req: &Request<B>, token: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// True when `host` (a Host header, with or without port) names this machine or its network:
/// `localhost` (or a name under it), a loopback address, the address the admin listens on, or
/// a single-label name (`ops-box`), which public DNS cannot serve. A page that rebinds its
/// own domain name to this address still sends that domain name, so it is refused.
fn is_local_host(host: &str, local: Option<SocketAddr>) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    if !lower.is_empty() && !lower.contains('.') && !lower.contains(':') {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => {
            ip.is_loopback() || local.is_some_and(|l| !l.ip().is_unspecified() && l.ip() == ip)
        }
        Err(_) => false,
    }
}

/// The databases' pool gauges and readiness, read when scraped.
fn database_metrics(
    databases: &std::collections::BTreeMap<String, std::sync::Arc<busbar_sql::Database>>,
    out: &mut String,
) {
    use std::fmt::Write;
    type Read = fn(&busbar_sql::Database) -> usize;
    let families: [(&str, &str, Read); 3] = [
        (
            "busbar_database_connections_in_use",
            "Connections (SQLite: threads) running a request now.",
            |db| db.pool_status().0,
        ),
        (
            "busbar_database_pool_size",
            "Most connections (SQLite: threads) the database may use.",
            |db| db.pool_status().1,
        ),
        (
            "busbar_database_up",
            "1 when the database answered its last use or probe, else 0.",
            |db| usize::from(db.ready().is_ok()),
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for db in databases.values() {
            let _ = writeln!(
                out,
                "{name}{{database=\"{}\"}} {}",
                escape(db.name()),
                value(db)
            );
        }
    }
}

/// The processes' gauges and counters, read when scraped (from the current runtime's engine:
/// they start again from zero after a reload).
fn process_metrics(processes: Option<&crate::processes::Processes>, out: &mut String) {
    use std::fmt::Write;
    let info = processes.map(|p| (p, p.engine.process_info()));
    let _ = writeln!(
        out,
        "# HELP busbar_process_instances Instances of the process alive now.\n# TYPE busbar_process_instances gauge"
    );
    for (_, i) in info.iter().flat_map(|(p, v)| v.iter().map(move |i| (p, i))) {
        let _ = writeln!(
            out,
            "busbar_process_instances{{process=\"{}\"}} {}",
            escape(&i.name.clark()),
            i.instances
        );
    }
    let _ = writeln!(
        out,
        "# HELP busbar_process_completed_total Instances that ended, by outcome (completed, faulted).\n# TYPE busbar_process_completed_total counter"
    );
    for (_, i) in info.iter().flat_map(|(p, v)| v.iter().map(move |i| (p, i))) {
        for (outcome, n) in [("completed", i.completed), ("faulted", i.faulted)] {
            let _ = writeln!(
                out,
                "busbar_process_completed_total{{process=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(&i.name.clark())
            );
        }
    }
}

/// Durable instances: how many the stores hold by state, and how long their writes take.
async fn store_metrics(processes: Option<&crate::processes::Processes>, out: &mut String) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let _ = writeln!(
        out,
        "# HELP busbar_process_stored_instances Durable instances in the process stores, by state.\n# TYPE busbar_process_stored_instances gauge"
    );
    if let Some(p) = processes.filter(|p| !p.engine.persistence().is_empty()) {
        match p.engine.stored_counts().await {
            Ok(counts) => {
                for (process, state, n) in counts {
                    let _ = writeln!(
                        out,
                        "busbar_process_stored_instances{{process=\"{}\",state=\"{}\"}} {n}",
                        escape(&process),
                        state.as_str()
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "# the process store did not answer: {}", escape(&e));
            }
        }
    }
    let stats = processes
        .map(|p| p.engine.write_stats())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "# HELP busbar_process_store_write_failures_total Snapshot and completion writes of durable instances that failed.\n# TYPE busbar_process_store_write_failures_total counter\nbusbar_process_store_write_failures_total {}",
        stats.failures.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP busbar_process_store_write_seconds Time to write a durable instance's snapshot or completion (one transaction).\n# TYPE busbar_process_store_write_seconds histogram"
    );
    // Each bucket is read once; `+Inf` and `_count` are derived from those reads (not from
    // the write counter, read at another moment), so one scrape is self-consistent.
    let bounds = busbar_flow::runtime::WRITE_BUCKETS_MS;
    let mut cumulative = 0;
    for (i, upper) in bounds.iter().enumerate() {
        cumulative += stats.buckets[i].load(Relaxed);
        let _ = writeln!(
            out,
            "busbar_process_store_write_seconds_bucket{{le=\"{}\"}} {cumulative}",
            upper / 1000.0
        );
    }
    let count = cumulative + stats.buckets[bounds.len()].load(Relaxed);
    let _ = writeln!(
        out,
        "busbar_process_store_write_seconds_bucket{{le=\"+Inf\"}} {count}\nbusbar_process_store_write_seconds_sum {}\nbusbar_process_store_write_seconds_count {count}",
        stats.micros.load(Relaxed) as f64 / 1e6
    );
}

/// A Prometheus label value, escaped.
/// `GET /processes`, `GET /processes/instances`, `DELETE /processes/instances/{id}`.
async fn processes_api(
    control: &Control,
    method: &Method,
    path: &str,
    query: &str,
) -> Response<Body> {
    let rt = control.shared.runtime.load();
    let processes = rt.processes.as_deref();
    let param = |k: &str| {
        query.split('&').find_map(|kv| {
            let (a, b) = kv.split_once('=').unwrap_or((kv, ""));
            (a == k).then(|| crate::router::query_decode(b))
        })
    };
    let failed = |e: String| {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("the process store failed: {e}\n"),
        )
    };
    let json = |v: Value| {
        text(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec_pretty(&v).unwrap_or_default(),
        )
    };
    match (method, path) {
        (&Method::GET, "/processes") => {
            let list: Vec<Value> = processes
                .map(|p| {
                    p.engine
                        .process_info()
                        .iter()
                        .map(|i| {
                            serde_json::json!({
                                "name": i.name.clark(),
                                "folder": p.folder_of(&i.name),
                                "dir": i.dir.display().to_string(),
                                "instances": i.instances,
                                "started": i.started,
                                "completed": i.completed,
                                "faulted": i.faulted,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            json(Value::Array(list))
        }
        (&Method::GET, "/processes/instances") => {
            let list: Vec<Value> = processes
                .map(|p| {
                    p.engine
                        .instances()
                        .iter()
                        .map(|i| {
                            serde_json::json!({
                                "id": i.id,
                                "process": i.process.clark(),
                                "age_ms": i.age.as_millis() as u64,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            json(Value::Array(list))
        }
        (&Method::GET, "/processes/stored") => {
            let Some(p) = processes else {
                return json(Value::Array(Vec::new()));
            };
            let state = match param("state") {
                None => None,
                Some(s) => match busbar_flow::store::State::parse(&s) {
                    Some(st) => Some(st),
                    None => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            "text/plain",
                            format!(
                                "unknown state '{s}': waiting, completed, faulted or terminated\n"
                            ),
                        )
                    }
                },
            };
            let limit = match param("limit").map(|l| l.parse::<usize>()) {
                None => 100,
                Some(Ok(n)) if (1..=10_000).contains(&n) => n,
                Some(_) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        "text/plain",
                        "limit must be a number from 1 to 10000\n",
                    )
                }
            };
            match p
                .engine
                .stored(param("process").as_deref(), state, limit)
                .await
            {
                Ok(rows) => json(Value::Array(
                    rows.iter()
                        .map(|r| {
                            serde_json::json!({
                                "id": r.id,
                                "process": r.process,
                                "state": r.state.as_str(),
                                "node": r.owner,
                                "started_ms": r.started_ms,
                                "updated_ms": r.updated_ms,
                                "next_timer_ms": r.due_ms,
                            })
                        })
                        .collect(),
                )),
                Err(e) => failed(e),
            }
        }
        (&Method::POST, _)
            if path.starts_with("/processes/instances/") && path.ends_with("/retry") =>
        {
            let id = &path["/processes/instances/".len()..path.len() - "/retry".len()];
            let Ok(n) = id.parse::<u64>() else {
                return no_such_id(id);
            };
            let Some(p) = processes else {
                return text(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    format!("no stored instance {n}\n"),
                );
            };
            match p.engine.retry(n).await {
                Ok(()) => text(
                    StatusCode::ACCEPTED,
                    "text/plain",
                    format!("instance {n} resumed from its last wait point\n"),
                ),
                Err(e) if e.starts_with("no stored instance") => {
                    text(StatusCode::NOT_FOUND, "text/plain", format!("{e}\n"))
                }
                Err(e) => text(StatusCode::CONFLICT, "text/plain", format!("{e}\n")),
            }
        }
        _ if path.starts_with("/processes/instances/") && path.ends_with("/retry") => {
            not_allowed("POST")
        }
        (&Method::GET, _) if path.starts_with("/processes/instances/") => {
            let id = &path["/processes/instances/".len()..];
            let Ok(n) = id.parse::<u64>() else {
                return no_such_id(id);
            };
            let Some(p) = processes else {
                return text(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    format!("no instance {n}\n"),
                );
            };
            match p.engine.stored_detail(n).await {
                Ok(Some(v)) => json(v),
                Ok(None) => match p.engine.instances().into_iter().find(|i| i.id == n) {
                    Some(i) => json(serde_json::json!({
                        "id": i.id,
                        "process": i.process.clark(),
                        "state": "running",
                        "running_here": true,
                        "age_ms": i.age.as_millis() as u64,
                    })),
                    None => text(
                        StatusCode::NOT_FOUND,
                        "text/plain",
                        format!("no instance {n}\n"),
                    ),
                },
                Err(e) => failed(e),
            }
        }
        (&Method::DELETE, _) if path.starts_with("/processes/instances/") => {
            let id = &path["/processes/instances/".len()..];
            let Ok(n) = id.parse::<u64>() else {
                return no_such_id(id);
            };
            use busbar_flow::store::Terminated;
            let done = match processes {
                Some(p) if p.engine.terminate(n) => Ok(Terminated::Done),
                Some(p) => p.engine.terminate_stored(n).await,
                None => Ok(Terminated::NotWaiting),
            };
            match done {
                Ok(Terminated::Done) => {
                    let mut r = text(StatusCode::NO_CONTENT, "text/plain", "");
                    r.headers_mut().remove(CONTENT_TYPE);
                    r
                }
                Ok(Terminated::RunBy(node)) => text(
                    StatusCode::CONFLICT,
                    "text/plain",
                    format!(
                        "instance {n} runs on node '{node}' (its heartbeat is within the lease): \
                         send the DELETE to that node's admin API\n"
                    ),
                ),
                Ok(Terminated::NotWaiting) => text(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    format!("no running or waiting instance {n}\n"),
                ),
                Err(e) => failed(e),
            }
        }
        (_, "/processes" | "/processes/instances" | "/processes/stored") => {
            not_allowed("GET, HEAD")
        }
        _ if path.starts_with("/processes/instances/") => not_allowed("GET, HEAD, DELETE"),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

fn no_such_id(id: &str) -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        "text/plain",
        format!("no instance '{id}': an instance id is a number\n"),
    )
}

/// 405 with the methods the resource takes (RFC 9110 §15.5.6).
fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain",
        format!("method not allowed: {allow}\n"),
    );
    r.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn text(status: StatusCode, ct: &'static str, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut r = Response::new(Body::full(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

async fn handle(control: &Control, req: Request<RequestBody>) -> Response<Body> {
    let shared = &control.shared;
    // HEAD is answered as GET: the listener sends the head (with the length GET's body would have)
    // and leaves the body out.
    let method = if req.method() == Method::HEAD {
        &Method::GET
    } else {
        req.method()
    };
    match (method, req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/readyz") => {
            if shared.draining.load(Relaxed) {
                return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "draining\n");
            }
            // Every database must have answered its last use or probe.
            let rt = shared.runtime.load();
            let down: Vec<String> = rt
                .databases
                .values()
                .filter_map(|db| {
                    db.ready()
                        .err()
                        .map(|why| format!("database {} ({}): {why}\n", db.name(), db.kind()))
                })
                .collect();
            let resuming = rt.processes.as_ref().is_some_and(|p| !p.engine.recovered());
            if resuming {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "durable process instances are being resumed\n",
                )
            } else if down.is_empty() {
                text(StatusCode::OK, "text/plain", "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", down.concat())
            }
        }
        (&Method::GET, "/metrics") => {
            let mut out = shared.metrics.render();
            let rt = shared.runtime.load();
            database_metrics(&rt.databases, &mut out);
            process_metrics(rt.processes.as_deref(), &mut out);
            store_metrics(rt.processes.as_deref(), &mut out).await;
            text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                out,
            )
        }
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
                // Not the config's fault: the engine is on its way out.
                Err(e) if shared.draining.load(Relaxed) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{e}\n"),
                ),
                Err(e) => text(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n")),
            }
        }
        (m, p) if p == "/processes" || p.starts_with("/processes/") => {
            let query = req.uri().query().unwrap_or("").to_owned();
            processes_api(control, m, p, &query).await
        }
        (_, "/healthz" | "/readyz" | "/metrics" | "/config") => not_allowed("GET, HEAD"),
        (_, "/reload") => not_allowed("POST"),
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
            } else if s.starts_with("http://") || s.starts_with("https://") {
                *s = busbar_config::secret::redact_url(s);
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

    #[test]
    fn local_hosts() {
        let local: Option<SocketAddr> = "10.0.0.5:9901".parse().ok();
        for h in [
            "localhost",
            "localhost:9901",
            "127.0.0.1:9901",
            "[::1]:9901",
            "10.0.0.5:9901",
            "ops-box:9901",
        ] {
            assert!(is_local_host(h, local), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:9901",
            "evil.example.:9901",
            "10.0.0.6:9901",
            "[::2]",
        ] {
            assert!(!is_local_host(h, local), "{h}");
        }
        let any: Option<SocketAddr> = "0.0.0.0:9901".parse().ok();
        assert!(!is_local_host("0.0.0.0:9901", any));
    }
}
