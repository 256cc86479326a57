//! Span export over OTLP, checked by an in-process collector over real sockets: OTLP/HTTP
//! and OTLP/gRPC, parent/child links through two busbar hops into a back end, sampling, and
//! a collector that is down.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::support::*;

/// A received span with the `service.name` of its resource.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        let kv = self.span.attributes.iter().find(|kv| kv.key == key)?;
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(n) => Some(n.to_string()),
            Value::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        }
    }
    fn id(&self) -> String {
        hex(&self.span.span_id)
    }
    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

type Spans = Arc<Mutex<Vec<Got>>>;

fn store(spans: &Spans, request: &[u8]) {
    let req = ExportTraceServiceRequest::decode(request).expect("an OTLP export request");
    let mut out = spans.lock().expect("lock");
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                out.push(Got {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
}

/// An OTLP/HTTP collector: `POST /v1/traces` with a protobuf body.
fn http_collector() -> (SocketAddr, Spans) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let spans: Spans = Arc::default();
    let keep = spans.clone();
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let spans = keep.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                assert!(line.starts_with("POST /v1/traces "), "{line}");
                let (mut len, mut ctype) = (0usize, String::new());
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 {
                        return;
                    }
                    let h = h.trim_end().to_ascii_lowercase();
                    if h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if let Some(v) = h.strip_prefix("content-type:") {
                        ctype = v.trim().to_owned();
                    }
                }
                assert_eq!(ctype, "application/x-protobuf");
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                store(&spans, &body);
                let _ = r.get_mut().write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    (addr, spans)
}

/// An OTLP/gRPC collector (HTTP/2 without TLS): answers "Trailers-Only" with grpc-status 0.
fn grpc_collector() -> (SocketAddr, Spans) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let addr = l.local_addr().expect("addr");
    let spans: Spans = Arc::default();
    let keep = spans.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).expect("listener");
            loop {
                let Ok((tcp, _)) = l.accept().await else {
                    continue;
                };
                let spans = keep.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let spans = spans.clone();
                            async move {
                                assert_eq!(
                                    req.uri().path(),
                                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                                );
                                assert_eq!(req.headers()["content-type"], "application/grpc");
                                let body =
                                    req.into_body().collect().await.expect("body").to_bytes();
                                assert_eq!(body[0], 0, "uncompressed");
                                let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]])
                                    as usize;
                                assert_eq!(len + 5, body.len());
                                store(&spans, &body[5..]);
                                let resp = http::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .header("grpc-status", "0")
                                    .body(Full::new(Bytes::new()))
                                    .expect("response");
                                Ok::<_, Infallible>(resp)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
                });
            }
        });
    });
    (addr, spans)
}

fn wait_for(spans: &Spans, n: usize) -> Vec<Got> {
    let mut got = Vec::new();
    let ok = eventually(Duration::from_secs(10), || {
        got = spans.lock().expect("lock").clone();
        got.len() >= n
    });
    assert!(ok, "expected {n} spans, got {}: {got:#?}", got.len());
    got
}

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn spans_join_up_through_two_hops_over_http_and_grpc_export() {
    let (http_addr, a_spans) = http_collector();
    let (grpc_addr, b_spans) = grpc_collector();
    let back = header_back_end(&["traceparent"]);
    let b = engine(&format!(
        "tracing:\n  service_name: hop-b\n  otlp: {{ endpoint: \"http://{grpc_addr}\", protocol: grpc }}\nendpoints:\n  back: {{ url: \"http://{back}/x\", timeout: 5s }}\nproxies:\n  B:\n    path: /b\n    in:\n      - call: back\n"
    ));
    let a = engine(&format!(
        "tracing:\n  service_name: hop-a\n  otlp: {{ endpoint: \"http://{http_addr}/v1/traces\" }}\nendpoints:\n  b: {{ url: \"http://{}/b\", timeout: 5s }}\nproxies:\n  A:\n    path: /a\n    in:\n      - set_header: {{ name: x-hop, value: a }}\n      - call: b\n",
        b.http()
    ));
    let r = Client::connect(a.http())
        .post("/a", &[("traceparent", PARENT)], b"hello")
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let at_back = r.text();

    // hop A: server, set_header, call, client; hop B: server, call, client.
    let a_got = wait_for(&a_spans, 4);
    let b_got = wait_for(&b_spans, 3);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    for g in a_got.iter().chain(&b_got) {
        assert_eq!(g.trace(), trace, "{g:?}");
    }
    assert!(a_got.iter().all(|g| g.service == "hop-a"));
    assert!(b_got.iter().all(|g| g.service == "hop-b"));
    let find = |got: &[Got], kind: SpanKind, name: &str| -> Got {
        got.iter()
            .find(|g| g.span.kind == kind as i32 && g.span.name == name)
            .unwrap_or_else(|| panic!("no {kind:?} span {name}: {got:#?}"))
            .clone()
    };
    let a_server = find(&a_got, SpanKind::Server, "POST A");
    let a_header = find(&a_got, SpanKind::Internal, "set_header");
    let a_call = find(&a_got, SpanKind::Internal, "call");
    let a_client = find(&a_got, SpanKind::Client, "POST");
    assert_eq!(a_server.parent(), "00f067aa0ba902b7", "the caller's span");
    assert_eq!(a_server.span.flags & 0x300, 0x300, "a remote parent");
    assert_eq!(
        a_server.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(a_server.attr("busbar.proxy").as_deref(), Some("A"));
    assert_eq!(a_header.parent(), a_server.id());
    assert_eq!(
        a_header.attr("busbar.step.path").as_deref(),
        Some("proxies.A.in[0].set_header")
    );
    assert_eq!(a_call.parent(), a_server.id());
    assert_eq!(a_client.parent(), a_call.id());
    assert_eq!(a_client.attr("busbar.endpoint").as_deref(), Some("b"));
    assert_eq!(
        a_client.attr("busbar.attempt.reason").as_deref(),
        Some("first")
    );
    assert_eq!(
        a_client.attr("http.response.status_code").as_deref(),
        Some("200")
    );

    let b_server = find(&b_got, SpanKind::Server, "POST B");
    let b_call = find(&b_got, SpanKind::Internal, "call");
    let b_client = find(&b_got, SpanKind::Client, "POST");
    assert_eq!(
        b_server.parent(),
        a_client.id(),
        "hop B continues hop A's attempt"
    );
    assert_eq!(b_call.parent(), b_server.id());
    assert_eq!(b_client.parent(), b_call.id());
    assert_eq!(at_back, format!("00-{trace}-{}-01", b_client.id()));
    // Children lie within their parents.
    assert!(a_client.span.start_time_unix_nano >= a_server.span.start_time_unix_nano);
    assert!(a_client.span.end_time_unix_nano <= a_server.span.end_time_unix_nano);
    assert_eq!(
        metric(a.admin(), "busbar_trace_spans_total{outcome=\"exported\"}"),
        Some(4.0)
    );
}

#[test]
fn unsampled_traces_are_propagated_but_not_exported() {
    let (collector, spans) = http_collector();
    let back = header_back_end(&["traceparent"]);
    let h = engine(&format!(
        "tracing:\n  sample: 0\n  otlp: {{ endpoint: \"http://{collector}/v1/traces\" }}\nendpoints:\n  back: {{ url: \"http://{back}/x\", timeout: 5s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - call: back\n"
    ));
    let mut c = Client::connect(h.http());
    // New traces at a ratio of 0, and a caller's unsampled trace: nothing recorded.
    let r = c.post("/p", &[], b"x").expect("answer");
    assert!(r.text().ends_with("-00"), "{}", r.text());
    let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let r = c
        .post("/p", &[("traceparent", unsampled)], b"x")
        .expect("answer");
    assert!(r.text().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
    // A caller's sampled trace is recorded whatever the ratio.
    let r = c
        .post("/p", &[("traceparent", PARENT)], b"x")
        .expect("answer");
    assert_eq!(r.status, 200);
    let got = wait_for(&spans, 3);
    std::thread::sleep(Duration::from_millis(1500));
    let got_later = spans.lock().expect("lock").len();
    assert_eq!(got_later, 3, "only the sampled request's spans: {got:#?}");
    assert!(got
        .iter()
        .all(|g| g.trace() == "4bf92f3577b34da6a3ce929d0e0e4736"));
}

#[test]
fn a_collector_that_is_down_costs_spans_not_requests() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let h = engine(&format!(
        "tracing:\n  otlp: {{ endpoint: \"http://{closed}/v1/traces\", timeout: 1s }}\nproxies:\n  R:\n    path: /r\n    in:\n      - respond: {{ status: 200, body: ok }}\n"
    ));
    let mut c = Client::connect(h.http());
    for _ in 0..50 {
        assert_eq!(c.get("/r").expect("answer").text(), "ok");
    }
    // Each request records a server span and a `respond` step span.
    let dropped = eventually(Duration::from_secs(10), || {
        metric(h.admin(), "busbar_trace_spans_total{outcome=\"dropped\"}") == Some(100.0)
    });
    assert!(
        dropped,
        "{:?}",
        metric(h.admin(), "busbar_trace_spans_total{outcome=\"dropped\"}")
    );
    assert_eq!(
        metric(h.admin(), "busbar_trace_spans_total{outcome=\"exported\"}"),
        Some(0.0)
    );
}

#[test]
fn a_bad_otlp_endpoint_is_a_config_error() {
    let dir = temp_dir("otlp-config");
    let (code, out) = validate_in(
        &dir,
        "listeners: { http: { bind: \"127.0.0.1:0\" } }\ntracing:\n  sample: 1.5\n  otlp: { endpoint: \"ftp://x\", queue: 0 }\n",
    );
    assert_ne!(code, Some(0));
    assert!(out.contains("tracing.sample"), "{out}");
    assert!(out.contains("tracing.otlp.endpoint"), "{out}");
    assert!(out.contains("tracing.otlp.queue"), "{out}");
}

/// `busbar run` as a process: its listener and admin addresses, read from what it prints.
fn run_busbar(config: &std::path::Path) -> (std::process::Child, SocketAddr, SocketAddr) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("run")
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("busbar run");
    let stdout = child.stdout.take().expect("stdout");
    let (mut http, mut admin) = (None, None);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("stdout line");
        let addr = |prefix: &str| {
            line.strip_prefix(prefix)
                .and_then(|a| a.parse::<SocketAddr>().ok())
        };
        http = http.or_else(|| addr("listener http on http://"));
        admin = admin.or_else(|| addr("admin on http://"));
        if http.is_some() && admin.is_some() {
            break;
        }
    }
    match (http, admin) {
        (Some(h), Some(a)) => (child, h, a),
        _ => panic!("busbar run did not print its addresses"),
    }
}

/// Requests that finish while a SIGTERM drains them are in the access log and their spans are
/// exported before the process exits.
#[test]
fn requests_finished_during_the_shutdown_drain_are_logged_and_exported() {
    let (collector, spans) = http_collector();
    let slow = echo(busbar_engine::echo::EchoOptions {
        delay: Some(Duration::from_secs(2)),
        ..Default::default()
    });
    let dir = temp_dir("drain-flush");
    let log = dir.join("access.log");
    let config = dir.join("busbar.yaml");
    std::fs::write(
        &config,
        format!(
            "workers: 2\nlog: {{ level: warn }}\nadmin: {{ bind: \"127.0.0.1:0\" }}\nshutdown: {{ drain_timeout: 10s }}\naccess_log: {{ path: \"{}\", format: json }}\ntracing:\n  otlp: {{ endpoint: \"http://{collector}/v1/traces\", timeout: 2s }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:0\" }}\nendpoints:\n  slow: {{ url: \"http://{}/s\", timeout: 10s }}\nproxies:\n  F:\n    path: /f\n    in:\n      - respond: {{ body: fast }}\n  S:\n    path: /s\n    in:\n      - call: slow\n",
            log.display(),
            slow.addr
        ),
    )
    .expect("write config");
    let (mut child, http, admin) = run_busbar(&config);
    assert_eq!(Client::connect(http).get("/f").expect("answer").status, 200);
    let slow_requests: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(move || Client::connect(http).get("/s").map(|r| r.status)))
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || {
            metric(admin, "busbar_proxy_in_flight{proxy=\"S\"}") == Some(3.0)
        }),
        "three slow requests in flight"
    );
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("wait");
    assert!(status.success(), "exit {status:?}");
    for r in slow_requests {
        assert_eq!(r.join().expect("client").expect("answer"), 200);
    }
    // Read once the process has gone: nothing may arrive later.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("access log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"proxy\":\"S\""))
            .count(),
        3,
        "{lines:#?}"
    );
    // F: server and respond; each S: server, call and client.
    let got = spans.lock().expect("lock").len();
    assert_eq!(got, 2 + 3 * 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that leaves before the answer: the access log says 499, and the request's spans
/// (server, step and back-end attempt) are all exported, as cancelled.
#[test]
fn a_request_the_client_abandons_is_logged_499_and_its_spans_end_cancelled() {
    let (collector, spans) = http_collector();
    let slow = echo(busbar_engine::echo::EchoOptions {
        delay: Some(Duration::from_secs(3)),
        ..Default::default()
    });
    let dir = temp_dir("abandoned");
    let log = dir.join("access.log");
    let h = engine(&format!(
        "access_log: {{ path: \"{}\", format: json }}\ntracing:\n  otlp: {{ endpoint: \"http://{collector}/v1/traces\" }}\nendpoints:\n  slow: {{ url: \"http://{}/s\", timeout: 10s }}\nproxies:\n  S:\n    path: /s\n    in:\n      - call: slow\n",
        log.display(),
        slow.addr
    ));
    let mut c = Client::connect(h.http());
    c.send_raw(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(eventually(Duration::from_secs(5), || {
        metric(h.admin(), "busbar_endpoint_in_flight{endpoint=\"slow\"}") == Some(1.0)
    }));
    drop(c);
    let got = wait_for(&spans, 3);
    assert_eq!(got.len(), 3, "{got:#?}");
    let error = |g: &Got| {
        g.span
            .status
            .as_ref()
            .filter(|s| s.code == 2)
            .map(|s| s.message.clone())
    };
    for g in &got {
        assert_eq!(g.attr("error.type").as_deref(), Some("cancelled"), "{g:#?}");
        assert!(error(g).is_some(), "{g:#?}");
        assert_eq!(g.attr("http.response.status_code"), None, "{g:#?}");
    }
    let kinds: std::collections::BTreeSet<(i32, String)> = got
        .iter()
        .map(|g| (g.span.kind, g.span.name.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (SpanKind::Server as i32, "GET S".to_owned()),
            (SpanKind::Internal as i32, "call".to_owned()),
            (SpanKind::Client as i32, "GET".to_owned()),
        ]
        .into_iter()
        .collect()
    );
    let step = got.iter().find(|g| g.span.name == "call").expect("step");
    assert_eq!(
        step.attr("busbar.step.path").as_deref(),
        Some("proxies.S.in[0].call")
    );
    let mut line = serde_json::Value::Null;
    assert!(eventually(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        match text.lines().next() {
            Some(l) => {
                line = serde_json::from_str(l).expect("a JSON line");
                true
            }
            None => false,
        }
    }));
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["complete"], false, "{line}");
    assert_eq!(line["proxy"], "S", "{line}");
}
