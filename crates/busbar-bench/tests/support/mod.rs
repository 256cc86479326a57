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
    /// Drops the last 10 bytes of every echoed body (with a matching Content-Length).
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
    let reject = |reason: &str, b: Vec<u8>| {
        if behaviour == Behaviour::WrongBodyOnNegative {
            full(200, b, chunked)
        } else {
            full(500, fault(reason), chunked)
        }
    };
    Ok(match proxy.as_str() {
        "CBRProxy" if !first_symbol_is_ibm(&body) => reject(FAULT_NOT_IBM, body),
        "CBRSOAPHeaderProxy" if !soap_routing_ok(&body) => reject(FAULT_ROUTING, body),
        "CBRTransportHeaderProxy" if !routing_header => reject(FAULT_ROUTING, body),
        "XSLTProxy" => match xslt_round_trip(&body, behaviour == Behaviour::XsltSwap) {
            Some(out) => full(200, out, chunked),
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
