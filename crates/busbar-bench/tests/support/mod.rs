//! Test servers: a correct reference implementation of every classic scenario (hyper, echo
//! based) and deliberately faulty variants, all on 127.0.0.1 with OS-chosen ports.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use busbar_bench::check::{parse_orders, Order, FAULT_NOT_IBM, FAULT_ROUTING};
use busbar_bench::payload::ROUTING_VALUE;

/// How the server misbehaves (or not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behaviour {
    /// Correct reference implementation.
    Reference,
    /// Flips one byte 7 bytes after the first 16 KiB of every echoed body.
    FlipAfter16K,
    /// Drops the last 10 bytes of every answer body, echoed, transformed or fault (with a
    /// matching Content-Length).
    Truncate,
    /// Answers 200 with the request echoed where it must reject (CBR negative case).
    WrongBodyOnNegative,
    /// Swaps the first two orders of the XSLT answer.
    XsltSwap,
    /// Reference answers, sent chunked.
    Chunked,
    /// Reference answers after a fixed delay.
    Delay(Duration),
}

/// A running server; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    /// The base URL the proxy names are appended to.
    pub fn base(&self) -> String {
        format!("http://{}/service", self.addr)
    }

    /// The URL of one proxy.
    pub fn url(&self, proxy: &str) -> String {
        format!("http://{}/service/{proxy}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind() -> (std::net::TcpListener, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.set_nonblocking(true).expect("nonblocking");
    let addr = l.local_addr().expect("local addr");
    (l, addr)
}

/// Runs an accept loop on its own thread and event loop, handing each connection to
/// `on_conn`. The listener is bound before this returns, so the server accepts connections at
/// once (no readiness wait needed).
fn serve<F, Fut>(on_conn: F) -> TestServer
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Copy + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    serve_with(on_conn)
}

/// [`serve`] for a connection handler that holds state (cloned per connection).
fn serve_with<F, Fut>(on_conn: F) -> TestServer
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (listener, addr) = bind();
    let (tx, mut rx) = oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        tokio::spawn(on_conn(stream));
                    }
                }
            }
        });
    });
    TestServer {
        addr,
        stop: Some(tx),
        thread: Some(thread),
    }
}

/// Starts a hyper server with `behaviour`.
pub fn start(behaviour: Behaviour) -> TestServer {
    serve(move |stream| async move {
        let _ = stream.set_nodelay(true);
        let svc = hyper::service::service_fn(move |req| handle(req, behaviour));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    })
}

/// Starts a raw HTTP/1.0 echo server: one request per connection, close-delimited response
/// (no Content-Length), like the oldest servers.
pub fn start_http10() -> TestServer {
    serve(|mut stream| async move {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let Ok(n) = stream.read(&mut chunk).await else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let Ok(n) = stream.read(&mut chunk).await else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let mut out = b"HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\n\r\n".to_vec();
        out.extend_from_slice(&buf[head_end..head_end + len]);
        let _ = stream.write_all(&out).await;
        let _ = stream.shutdown().await;
    })
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, body: Vec<u8>, chunked: bool) -> Response<Body> {
    let body: Body = if chunked && body.len() > 1 {
        let mid = body.len() / 2;
        let b = Bytes::from(body);
        Pieces([b.slice(..mid), b.slice(mid..)].into_iter().collect()).boxed()
    } else {
        Full::new(Bytes::from(body)).boxed()
    };
    Response::builder()
        .status(status)
        .header("content-type", "text/xml; charset=UTF-8")
        .body(body)
        .expect("response")
}

/// A body sent as several frames with no known length, so hyper frames it chunked.
struct Pieces(std::collections::VecDeque<Bytes>);

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

fn fault(reason: &str) -> Vec<u8> {
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body>\
         <soapenv:Fault><faultcode>soapenv:Server</faultcode><faultstring>{reason}</faultstring>\
         </soapenv:Fault></soapenv:Body></soapenv:Envelope>"
    )
    .into_bytes()
}

fn first_symbol_is_ibm(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    text.find("<symbol>")
        .map(|i| text[i + 8..].starts_with("IBM</symbol>"))
        .unwrap_or(false)
}

fn soap_routing_ok(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    let Some(start) = text.find("<soapenv:Header>") else {
        return false;
    };
    let Some(end) = text[start..].find("</soapenv:Header>") else {
        return false;
    };
    let header = &text[start..start + end];
    header.contains(&format!(
        "<routing xmlns=\"http://someuri\">{ROUTING_VALUE}</routing>"
    ))
}

fn xslt_round_trip(body: &[u8], swap: bool) -> Option<Vec<u8>> {
    // Request transform (names reversed), then the response transform back: the echo in
    // between returns the reversed document unchanged.
    let mut orders: Vec<Order> = parse_orders(body, "buyStocks").ok()?;
    if swap && orders.len() > 1 {
        orders.swap(0, 1);
    }
    let mut out = String::from(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body>\
         <m:buyStocks xmlns:m=\"http://services.samples/xsd\">",
    );
    for o in &orders {
        out.push_str(&format!(
            "<order><symbol>{}</symbol><buyerID>{}</buyerID><price>{}</price><volume>{}</volume></order>",
            o.symbol, o.buyer_id, o.price, o.volume
        ));
    }
    out.push_str("</m:buyStocks></soapenv:Body></soapenv:Envelope>");
    Some(out.into_bytes())
}

async fn handle(
    req: Request<Incoming>,
    behaviour: Behaviour,
) -> Result<Response<Body>, Infallible> {
    let routing_header = req
        .headers()
        .get("routing")
        .map(|v| v.as_bytes() == ROUTING_VALUE.as_bytes())
        .unwrap_or(false);
    let proxy = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => return Ok(full(400, Vec::new(), false)),
    };
    if let Behaviour::Delay(d) = behaviour {
        tokio::time::sleep(d).await;
    }
    let chunked = behaviour == Behaviour::Chunked;
    let echo = |mut b: Vec<u8>| {
        match behaviour {
            Behaviour::FlipAfter16K if b.len() > 16 * 1024 + 7 => b[16 * 1024 + 7] ^= 0x01,
            Behaviour::Truncate if b.len() > 10 => b.truncate(b.len() - 10),
            _ => {}
        }
        full(200, b, chunked)
    };
    let cut = |mut b: Vec<u8>| {
        if behaviour == Behaviour::Truncate && b.len() > 10 {
            b.truncate(b.len() - 10);
        }
        b
    };
    let reject = |reason: &str, b: Vec<u8>| {
        if behaviour == Behaviour::WrongBodyOnNegative {
            full(200, b, chunked)
        } else {
            full(500, cut(fault(reason)), chunked)
        }
    };
    Ok(match proxy.as_str() {
        "CBRProxy" if !first_symbol_is_ibm(&body) => reject(FAULT_NOT_IBM, body),
        "CBRSOAPHeaderProxy" if !soap_routing_ok(&body) => reject(FAULT_ROUTING, body),
        "CBRTransportHeaderProxy" if !routing_header => reject(FAULT_ROUTING, body),
        "XSLTProxy" => match xslt_round_trip(&body, behaviour == Behaviour::XsltSwap) {
            Some(out) => full(200, cut(out), chunked),
            None => full(500, fault("Transformation failed"), chunked),
        },
        _ => echo(body),
    })
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "busbar-bench-{tag}-{}-{n}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// How the integrator test server misbehaves (or not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Integrator {
    /// Correct answers (the computed ones from the kit's own mappings: this server tests the
    /// kit's plumbing; the mappings are held against the Python reference elsewhere).
    Reference,
    /// JsonCBR always answers from the standard back end.
    CbrAlwaysStandard,
    /// JsonCBR answers name the right back end, then the other one, in a second
    /// `x-echo-name` header.
    CbrTwoNames,
    /// ScatterGather's stock count is one too many.
    AggregateOffByOne,
}

/// Counts of the JsonCBR answers by back end, kept by the integrator test server.
#[derive(Debug, Default)]
pub struct TierCounts {
    pub premium: AtomicUsize,
    pub standard: AtomicUsize,
}

fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Starts the integrator scenarios under `/api` with `behaviour`; the counts see every JsonCBR
/// answer.
pub fn start_integrator(behaviour: Integrator) -> (TestServer, std::sync::Arc<TierCounts>) {
    let counts = std::sync::Arc::new(TierCounts::default());
    let shared = counts.clone();
    let server = serve_with(move |stream| {
        let counts = shared.clone();
        async move {
            let _ = stream.set_nodelay(true);
            let svc = hyper::service::service_fn(move |req| {
                handle_integrator(req, behaviour, counts.clone())
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        }
    });
    (server, counts)
}

impl TestServer {
    /// The integrator suite's base URL.
    pub fn api(&self) -> String {
        format!("http://{}/api", self.addr)
    }
}

fn json_answer(status: u16, body: Vec<u8>, backend: Option<&str>) -> Response<Body> {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(name) = backend {
        r = r.header("x-echo-name", name);
    }
    r.body(Full::new(Bytes::from(body)).boxed())
        .expect("response")
}

async fn handle_integrator(
    req: Request<Incoming>,
    behaviour: Integrator,
    counts: std::sync::Arc<TierCounts>,
) -> Result<Response<Body>, Infallible> {
    use busbar_bench::integrator;
    let path = req.uri().path().to_owned();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => return Ok(json_answer(400, Vec::new(), None)),
    };
    let doc = || serde_json::from_slice::<serde_json::Value>(&body);
    let computed = |v: Result<serde_json::Value, String>| match v {
        Ok(v) => json_answer(200, v.to_string().into_bytes(), Some("standard")),
        Err(e) => json_answer(400, e.into_bytes(), None),
    };
    Ok(match path.as_str() {
        "/api/passthrough" | "/api/soap" => json_answer(200, body, Some("standard")),
        "/api/route" => {
            let premium = doc()
                .map(|d| d["customerTier"] == "premium")
                .unwrap_or(false);
            let name = if premium && behaviour != Integrator::CbrAlwaysStandard {
                counts.premium.fetch_add(1, Ordering::SeqCst);
                "premium"
            } else {
                counts.standard.fetch_add(1, Ordering::SeqCst);
                "standard"
            };
            let mut answer = json_answer(200, body, Some(name));
            if behaviour == Integrator::CbrTwoNames {
                let other = if name == "premium" {
                    "standard"
                } else {
                    "premium"
                };
                answer.headers_mut().append(
                    "x-echo-name",
                    hyper::header::HeaderValue::from_static(other),
                );
            }
            answer
        }
        "/api/route/filter" => computed(
            doc()
                .map(|d| integrator::goog_answer(&d))
                .map_err(|e| e.to_string()),
        ),
        "/api/map" => computed(
            doc()
                .map_err(|e| e.to_string())
                .and_then(|d| integrator::map(&d)),
        ),
        "/api/transform" => computed(
            doc()
                .map_err(|e| e.to_string())
                .and_then(|d| integrator::transform(&d)),
        ),
        p => match p.strip_prefix("/api/product/").and_then(percent_decode) {
            Some(id) => {
                let mut v = integrator::product(&id);
                if behaviour == Integrator::AggregateOffByOne {
                    let n = v["stock"]["inStock"].as_u64().unwrap_or(0);
                    v["stock"]["inStock"] = (n + 1).into();
                }
                json_answer(200, v.to_string().into_bytes(), None)
            }
            None => json_answer(404, Vec::new(), None),
        },
    })
}

/// How the BPEL-suite test server misbehaves (or not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bpel {
    /// The SimpleInvoke processes and HelloWorld as docs/scenarios.md describes them.
    Reference,
    /// The processes calling HelloWorld answer its greeting without ` and BPEL`.
    NoBpelSuffix,
    /// SimpleInvoke2 answers every request with a `selectionFailure` fault (HTTP 500).
    FaultOnTwo,
    /// Every answer loses its last 10 bytes (with a matching Content-Length).
    Truncate,
}

/// Starts the BPEL suite's services under `/service` with `behaviour`: the answers are made
/// here from the request's text, without the kit's code.
pub fn start_bpel(behaviour: Bpel) -> TestServer {
    serve(move |stream| async move {
        let _ = stream.set_nodelay(true);
        let svc = hyper::service::service_fn(move |req| handle_bpel(req, behaviour));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    })
}

/// The escaped text between `open` and `close` in `body`.
fn between<'a>(body: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = body.find(open)? + open.len();
    let len = body[start..].find(close)?;
    Some(&body[start..start + len])
}

async fn handle_bpel(
    req: Request<Incoming>,
    behaviour: Bpel,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let body = match req.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => return Ok(full(400, Vec::new(), false)),
    };
    let envelope = |inner: String| {
        format!(
            "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
             <soapenv:Body>{inner}</soapenv:Body></soapenv:Envelope>"
        )
    };
    let process = |text: String| {
        envelope(format!(
            "<p:sayHelloToResponse xmlns:p=\"urn:busbar:example:simple-invoke\">{text}</p:sayHelloToResponse>"
        ))
    };
    let answer = match path.as_str() {
        "/service/HelloWorld" => between(&body, "<toWhom>", "</toWhom>").map(|name| {
            envelope(format!(
                "<hw:sayHelloResponse xmlns:hw=\"http://jboss.org/samples/helloworld\">\
                 <return>Hello {name}. Sincerely, JBossWS</return></hw:sayHelloResponse>"
            ))
        }),
        "/service/SimpleInvoke2" if behaviour == Bpel::FaultOnTwo => {
            return Ok(full(500, fault("selectionFailure"), false))
        }
        "/service/SimpleInvoke0" => {
            between(&body, "<tns:sayHelloTo>", "</tns:sayHelloTo>").map(|n| process(n.into()))
        }
        "/service/SimpleInvoke1" | "/service/SimpleInvoke2" | "/service/SimpleInvoke3" => {
            between(&body, "<tns:sayHelloTo>", "</tns:sayHelloTo>").map(|name| {
                let suffix = if behaviour == Bpel::NoBpelSuffix {
                    ""
                } else {
                    " and BPEL"
                };
                process(format!("Hello {name}. Sincerely, JBossWS{suffix}"))
            })
        }
        _ => return Ok(full(404, Vec::new(), false)),
    };
    Ok(match answer {
        Some(text) => {
            let mut bytes = text.into_bytes();
            if behaviour == Bpel::Truncate {
                bytes.truncate(bytes.len() - 10);
            }
            full(200, bytes, false)
        }
        None => full(500, fault("no name in the request"), false),
    })
}
