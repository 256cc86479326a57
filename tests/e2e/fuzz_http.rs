//! Fuzzing the HTTP request path with mutated raw requests (see docs/fuzzing.md): one engine
//! serving the benchmark example (direct, content-based routing, XSLT, WS-Security) is sent
//! smuggling-shaped heads, bad chunking and huge headers over real sockets. Each request gets
//! an answer or a close, never a hang; no engine thread panics; and after each one the engine
//! still serves a good request.

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

use busbar_engine::echo::EchoOptions;

use crate::support::*;

/// Longest wait for an answer or a close after the whole request was sent.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

const DICTIONARY: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"\r",
    b" ",
    b"\t",
    b":",
    b"\x00",
    b"\x7f",
    b"\xff",
    b"GET / HTTP/1.1\r\n",
    b"POST /service/DirectProxy HTTP/1.1\r\n",
    b"POST /service/CBRProxy HTTP/1.1\r\n",
    b"POST /service/CBRSOAPHeaderProxy HTTP/1.1\r\n",
    b"POST /service/XSLTProxy HTTP/1.1\r\n",
    b"POST /service/SecureProxy HTTP/1.1\r\n",
    b"POST http://x/service/DirectProxy HTTP/1.1\r\n",
    b"CONNECT a:1 HTTP/1.1\r\n",
    b"HTTP/1.0",
    b"HTTP/2.0",
    b"Host: a\r\n",
    b"Host: a\r\nHost: b\r\n",
    b"Content-Length: 5\r\n",
    b"Content-Length: 0\r\n",
    b"Content-Length: -1\r\n",
    b"Content-Length: 5, 6\r\n",
    b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: chunked, identity\r\n",
    b"Transfer-Encoding : chunked\r\n",
    b"Transfer-Encoding:\x0bchunked\r\n",
    b" folded\r\n",
    b"0\r\n\r\n",
    b"5\r\nhello\r\n",
    b"5;ext=\"x\"\r\n",
    b"ffffffffffffffff\r\n",
    b"0\r\nTrailer: x\r\n\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n",
    b"Content-Type: text/xml; charset=UTF-8\r\n",
    b"Content-Type: application/soap+xml\r\n",
    b"Content-Type: application/json\r\n",
    b"Accept: application/json\r\n",
    b"SOAPAction: \"urn:x\"\r\n",
    b"routing: xadmin;server1;community#1.0##\r\n",
    b"X-Big: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"<order><symbol>IBM</symbol></order>",
    b"<!DOCTYPE a>",
    b"]]>",
];

/// The benchmark example's proxies, pointed at this test's echo back end and test keys.
fn example_yaml(echo: SocketAddr) -> String {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/esb-benchmark.yaml"
    ))
    .expect("example");
    let from = example.find("namespaces:").expect("namespaces");
    let xslt_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/xslt/");
    example[from..]
        .replace("${BUSBAR_ECHO:-127.0.0.1:9000}", &echo.to_string())
        .replace("xslt/reverse-", &format!("{xslt_dir}reverse-"))
        .replace(
            "${BUSBAR_KEYS:-../target/keys}",
            &test_keys().display().to_string(),
        )
        .replace("timeout: 30s", "timeout: 5s")
}

/// Panics on the engine's threads (workers, admin, echo, blocking pool): a panicking
/// connection task does not fail the request visibly, so it is counted here.
static ENGINE_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_engine_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread
                .name()
                .is_some_and(|n| n.starts_with("busbar-") || n.starts_with("tokio-"))
            {
                ENGINE_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// Sends `request` on a new connection, closes the sending side, and reads until the engine
/// closes: what came back, or why nothing came back in time.
fn send(addr: SocketAddr, request: &[u8]) -> Result<Vec<u8>, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    writer
        .set_write_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = request.to_vec();
    // From another thread: the engine may echo the body back while it is still going out.
    let sending = std::thread::spawn(move || {
        // The engine may answer and close before reading everything: not an error here.
        let _ = writer.write_all(&request);
        let _ = writer.shutdown(Shutdown::Write);
    });
    let mut answer = Vec::new();
    let mut reader = &stream;
    let read = reader.read_to_end(&mut answer);
    let _ = sending.join();
    match read {
        Ok(_) => Ok(answer),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(format!(
                "neither answered nor closed within {ANSWER_TIMEOUT:?} ({} bytes came back)",
                answer.len()
            ))
        }
        // A reset is a close.
        Err(_) => Ok(answer),
    }
}

fn check(addr: SocketAddr, good_body: &[u8], request: &[u8]) -> Result<(), String> {
    let before = ENGINE_PANICS.load(Ordering::SeqCst);
    let answer = send(addr, request)?;
    if !answer.is_empty() && !answer.starts_with(b"HTTP/1.") {
        return Err(format!(
            "answer is not HTTP/1.x: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        ));
    }
    let mut client = Client::connect(addr);
    let resp = client
        .post(
            "/service/DirectProxy",
            &[("Content-Type", "text/xml; charset=UTF-8")],
            good_body,
        )
        .map_err(|e| format!("the good request after it failed: {e}"))?;
    if resp.status != 200 || resp.body != good_body {
        return Err(format!(
            "the good request after it got {} and {} bytes",
            resp.status,
            resp.body.len()
        ));
    }
    let after = ENGINE_PANICS.load(Ordering::SeqCst);
    if after != before {
        return Err(format!("{} engine thread(s) panicked", after - before));
    }
    Ok(())
}

#[test]
fn mutated_requests_get_an_answer_or_a_close_and_the_engine_keeps_serving() {
    count_engine_panics();
    let echo = echo(EchoOptions::default());
    let h = engine(&example_yaml(echo.addr));
    let addr = h.http();
    let good_body = payload(1500, 7);
    harness::run(
        harness::Target {
            name: "http",
            extra_seeds: Vec::new(),
            dictionary: DICTIONARY,
            max_len: 256 * 1024,
            case_timeout: Duration::from_secs(60),
        },
        |request| check(addr, &good_body, request),
    );
}
