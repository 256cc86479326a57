//! The back-end side of a faulty network: back ends that frame an answer wrongly, cut it short
//! or stop reading, and clients whose uploads are slow, malformed or abandoned while a call is
//! sending them. Each back end here is a script over a raw socket.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;

/// A request head as a scripted back end read it.
struct Head {
    path: String,
    chunked: bool,
    length: usize,
}

/// Reads a request head; `None` when the peer closed first.
fn read_head<R: BufRead>(r: &mut R) -> Option<Head> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut head = Head {
        path: line.split_whitespace().nth(1).unwrap_or("").to_owned(),
        chunked: false,
        length: 0,
    };
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            return Some(head);
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            head.length = v.trim().parse().ok()?;
        }
        if h.starts_with("transfer-encoding:") && h.contains("chunked") {
            head.chunked = true;
        }
    }
}

/// Reads the body `head` announces; `None` when the peer closed or broke the framing first.
fn read_body<R: BufRead>(r: &mut R, head: &Head) -> Option<Vec<u8>> {
    if !head.chunked {
        let mut body = vec![0; head.length];
        r.read_exact(&mut body).ok()?;
        return Some(body);
    }
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        if r.read_line(&mut size).ok()? == 0 {
            return None;
        }
        let n = usize::from_str_radix(size.trim(), 16).ok()?;
        if n == 0 {
            // Trailer fields, up to the empty line.
            loop {
                let mut t = String::new();
                if r.read_line(&mut t).ok()? == 0 {
                    return None;
                }
                if t.trim_end().is_empty() {
                    return Some(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + n, 0);
        r.read_exact(&mut body[start..]).ok()?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf).ok()?;
    }
}

/// A back end running `script` on each connection, on a thread of its own.
/// Reads a whole request (head and body) and returns its head: `None` when the client went
/// away first.
fn read_request<R: BufRead>(r: &mut R) -> Option<Head> {
    let head = read_head(r)?;
    read_body(r, &head)?;
    Some(head)
}

fn scripted(script: impl Fn(BufReader<TcpStream>) + Send + Sync + 'static) -> SocketAddr {
    serve_scripted(TcpListener::bind("127.0.0.1:0").expect("bind"), script)
}

/// Runs `script` on each connection `l` accepts, each on a thread of its own.
fn serve_scripted(
    l: TcpListener,
    script: impl Fn(BufReader<TcpStream>) + Send + Sync + 'static,
) -> SocketAddr {
    let addr = l.local_addr().expect("addr");
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let script = script.clone();
            std::thread::spawn(move || script(BufReader::new(stream)));
        }
    });
    addr
}

/// As [`scripted`], on a listener whose connections have a receive buffer of `size` bytes
/// (set before `listen`, so the kernel does not grow it).
fn scripted_with_receive_buffer(
    size: usize,
    script: impl Fn(BufReader<TcpStream>) + Send + Sync + 'static,
) -> SocketAddr {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(size).expect("receive buffer");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("address");
    socket.bind(&any.into()).expect("bind");
    socket.listen(16).expect("listen");
    serve_scripted(socket.into(), script)
}

/// A keep-alive back end that reads each request whole and answers it with `answer`.
fn answering_with(answer: &'static [u8]) -> SocketAddr {
    scripted(move |mut r| {
        while let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_none() || r.get_mut().write_all(answer).is_err() {
                return;
            }
        }
    })
}

/// What a recording back end saw.
#[derive(Default)]
struct Seen {
    /// Connections accepted.
    connections: AtomicUsize,
    /// Request heads read.
    heads: AtomicUsize,
    /// Each request: its body when it arrived whole, `None` when the connection ended
    /// mid-body.
    bodies: Mutex<Vec<Option<Vec<u8>>>>,
}

impl Seen {
    fn bodies(&self) -> Vec<Option<Vec<u8>>> {
        self.bodies.lock().expect("lock").clone()
    }
}

/// A back end that reads each request whole (Content-Length or chunked) and records it; when
/// `answer`, it answers 200 with the body, otherwise it closes without answering.
fn recording(answer: bool) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let record = seen.clone();
    let addr = scripted(move |mut r| {
        record.connections.fetch_add(1, Ordering::SeqCst);
        while let Some(head) = read_head(&mut r) {
            record.heads.fetch_add(1, Ordering::SeqCst);
            let body = read_body(&mut r, &head);
            record.bodies.lock().expect("lock").push(body.clone());
            let Some(body) = body else { return };
            if !answer {
                return;
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let w = r.get_mut();
            if w.write_all(head.as_bytes())
                .and_then(|()| w.write_all(&body))
                .is_err()
            {
                return;
            }
        }
    });
    (addr, seen)
}

fn proxy_yaml(endpoint: &str) -> String {
    format!(
        "endpoints:\n  svc:\n{endpoint}proxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n"
    )
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn an_answer_with_content_length_and_chunked_reaches_the_client_whole() {
    // RFC 9112 6.3: Transfer-Encoding wins; the Content-Length is wrong.
    let addr = answering_with(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let mut c = Client::connect(h.http());
    // Twice on one client connection: the first answer's framing must leave it usable.
    for i in 0..2 {
        let r = c.post("/p", &[JSON], b"{}").expect("response");
        assert_eq!(r.status, 200, "answer {i}: {}", r.text());
        assert_eq!(r.text(), "hello world", "answer {i}");
        assert_ne!(r.header("content-length"), Some("3"), "answer {i}");
    }
}

#[test]
fn a_response_cut_mid_body_is_counted_on_the_endpoint() {
    let addr = scripted(|mut r| {
        if read_request(&mut r).is_none() {
            return;
        }
        // 10 of the 100 bytes announced, then the connection closes.
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
    });
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let r = Client::connect(h.http()).post("/p", &[JSON], b"{}");
    assert!(
        !r.as_ref().is_ok_and(|r| r.body.len() == 100),
        "a cut answer looked complete: {r:?}"
    );
    let admin = h.admin();
    assert!(
        eventually(Duration::from_secs(5), || metric(
            admin,
            "busbar_endpoint_responses_cut_total{endpoint=\"svc\"}"
        ) == Some(1.0)),
        "the cut is counted on the endpoint"
    );
    assert_eq!(
        metric(
            admin,
            "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"upstream_reset\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn a_slow_upload_to_a_healthy_back_end_is_not_a_back_end_timeout() {
    let (addr, seen) = recording(true);
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    timeout: 500ms\n"
    )));
    let body = b"0123456789abcdefghij";
    let mut c = Client::connect(h.http());
    c.send_raw(
        format!(
            "POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    // 2 bytes every 150 ms: the upload takes three times the endpoint's timeout.
    for pair in body.chunks(2) {
        std::thread::sleep(Duration::from_millis(150));
        if c.stream.get_mut().write_all(pair).is_err() {
            break;
        }
    }
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, body);
    assert_eq!(seen.bodies(), vec![Some(body.to_vec())]);
}

#[test]
fn a_back_end_that_stops_reading_the_upload_still_times_out() {
    // Reads the head, then neither reads the body nor answers.
    let addr = scripted(|mut r| {
        let _ = read_head(&mut r);
        loop {
            std::thread::park();
        }
    });
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    timeout: 500ms\n"
    )));
    // Far more than the socket buffers on the way hold.
    let body = vec![b'x'; 32 << 20];
    let r = Client::connect(h.http()).post("/p", &[JSON], &body);
    let admin = h.admin();
    assert!(
        eventually(Duration::from_secs(10), || metric(
            admin,
            "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"response_timeout\"}"
        ) == Some(1.0)),
        "the stalled back end times out"
    );
    // The answer may be lost to the reset of the unread upload; when it arrives, it says why.
    if let Ok(r) = r {
        assert_eq!(r.status, 504, "{}", r.text());
        assert!(
            r.text().contains("stopped reading the request"),
            "{}",
            r.text()
        );
    }
}

#[test]
fn a_malformed_chunked_upload_is_the_clients_error_and_spares_the_endpoint() {
    let (addr, seen) = recording(true);
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    retries: 2\n    breaker: {{ failures: 1, suspend: 1m }}\n"
    )));
    let mut c = Client::connect(h.http());
    // An idempotent method, so nothing but the blame stops a retry.
    c.send_raw(b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\nZZ\r\n");
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("Reading the request body failed"),
        "{}",
        r.text()
    );
    let admin = h.admin();
    assert_eq!(
        metric(
            admin,
            "busbar_proxy_errors_total{proxy=\"P\",kind=\"client_body\"}"
        ),
        Some(1.0)
    );
    for kind in ["upstream_reset", "client_body"] {
        assert_eq!(
            metric(
                admin,
                &format!("busbar_endpoint_errors_total{{endpoint=\"svc\",kind=\"{kind}\"}}")
            ),
            Some(0.0),
            "{kind}"
        );
    }
    assert_eq!(
        metric(
            admin,
            &format!("busbar_upstream_failures_total{{endpoint=\"svc\",url=\"http://{addr}/e\"}}")
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(admin, "busbar_endpoint_retries_total{endpoint=\"svc\"}"),
        Some(0.0)
    );
    assert!(
        seen.connections.load(Ordering::SeqCst) <= 1,
        "not sent again"
    );
    assert!(
        seen.bodies().iter().all(Option::is_none),
        "the back end never got the body as if complete: {:?}",
        seen.bodies()
    );
    // The breaker (one failure opens it for a minute) is still closed.
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{\"ok\":1}")
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"{\"ok\":1}");
}

#[test]
fn a_client_gone_mid_upload_is_not_held_against_the_endpoint() {
    let (addr, seen) = recording(true);
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    breaker: {{ failures: 1, suspend: 1m }}\n"
    )));
    {
        let mut c = Client::connect(h.http());
        c.send_raw(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"partial\":");
        // The call is under way: the back end has the head and waits for the body.
        assert!(eventually(Duration::from_secs(5), || seen
            .heads
            .load(Ordering::SeqCst)
            == 1));
    }
    let admin = h.admin();
    let url = format!("http://{addr}/e");
    assert!(
        eventually(Duration::from_secs(5), || {
            metric(admin, "busbar_endpoint_in_flight{endpoint=\"svc\"}") == Some(0.0)
                && metric(
                    admin,
                    &format!("busbar_upstream_pending{{endpoint=\"svc\",url=\"{url}\"}}"),
                ) == Some(0.0)
        }),
        "the abandoned call ended"
    );
    assert_eq!(
        metric(
            admin,
            "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"upstream_reset\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(
            admin,
            &format!("busbar_upstream_failures_total{{endpoint=\"svc\",url=\"{url}\"}}")
        ),
        Some(0.0)
    );
    assert!(
        eventually(Duration::from_secs(5), || seen.bodies() == vec![None]),
        "the back end saw the request end mid-body: {:?}",
        seen.bodies()
    );
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{\"ok\":1}")
        .expect("response");
    assert_eq!(r.status, 200, "the breaker is still closed: {}", r.text());
}

#[test]
fn a_call_in_on_error_after_a_failed_upload_sends_nothing() {
    let (addr, _) = recording(true);
    let (backup, backup_seen) = recording(true);
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n  backup:\n    url: \"http://{backup}/e\"\nproxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n    on_error:\n      - call: backup\n      - respond: {{}}\n"
    ));
    let mut c = Client::connect(h.http());
    c.send_raw(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\nZZ\r\n");
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("Cannot call endpoint 'backup': the request body could not be read"),
        "{}",
        r.text()
    );
    assert_eq!(
        backup_seen.connections.load(Ordering::SeqCst),
        0,
        "the backup got nothing: {:?}",
        backup_seen.bodies()
    );
}

#[test]
fn a_call_in_on_error_resends_a_kept_chunked_body_and_not_one_past_the_replay_buffer() {
    // Reads each request whole, then closes without answering.
    let (broken, broken_seen) = recording(false);
    let (backup, backup_seen) = recording(true);
    let h = engine(&format!(
        "endpoints:\n  broken:\n    url: \"http://{broken}/e\"\n    replay_buffer: 16KiB\n  backup:\n    url: \"http://{backup}/e\"\nproxies:\n  P:\n    path: /p\n    in:\n      - call: broken\n    on_error:\n      - call: backup\n      - respond: {{}}\n"
    ));
    let small = payload(8_000, 7);
    let r = Client::connect(h.http())
        .post_chunked("/p", &small, 1000)
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, small);
    assert_eq!(backup_seen.bodies(), vec![Some(small.clone())]);

    let large = payload(100_000, 8);
    let r = Client::connect(h.http())
        .post_chunked("/p", &large, 4096)
        .expect("response");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("Cannot call endpoint 'backup'") && r.text().contains("replay_buffer"),
        "{}",
        r.text()
    );
    // The broken back end had it all; the backup got nothing more.
    assert_eq!(
        broken_seen.bodies(),
        vec![Some(small.clone()), Some(large.clone())]
    );
    assert_eq!(backup_seen.bodies(), vec![Some(small)]);
    assert_eq!(backup_seen.heads.load(Ordering::SeqCst), 1);
}

#[test]
fn a_call_abandoned_by_its_client_leaves_no_request_in_progress() {
    // Reads each request whole, then holds the connection without answering.
    let seen = Arc::new(Seen::default());
    let record = seen.clone();
    let addr = scripted(move |mut r| {
        if let Some(head) = read_head(&mut r) {
            let body = read_body(&mut r, &head);
            record.bodies.lock().expect("lock").push(body);
        }
        loop {
            std::thread::park();
        }
    });
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    timeout: 1h\n    balance: least_pending\n"
    )));
    {
        let mut c = Client::connect(h.http());
        c.send_raw(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
        assert!(eventually(Duration::from_secs(5), || seen.bodies().len() == 1));
    }
    let admin = h.admin();
    let url = format!("http://{addr}/e");
    assert!(
        eventually(Duration::from_secs(5), || {
            metric(admin, "busbar_endpoint_in_flight{endpoint=\"svc\"}") == Some(0.0)
                && metric(
                    admin,
                    &format!("busbar_upstream_pending{{endpoint=\"svc\",url=\"{url}\"}}"),
                ) == Some(0.0)
        }),
        "in progress: endpoint {:?}, URL {:?}",
        metric(admin, "busbar_endpoint_in_flight{endpoint=\"svc\"}"),
        metric(
            admin,
            &format!("busbar_upstream_pending{{endpoint=\"svc\",url=\"{url}\"}}")
        )
    );
}

/// A back end that reads each request whole and answers with `answer(path)`, keeping the
/// connection open; an empty answer closes it instead.
fn answering(answer: fn(&str) -> String) -> SocketAddr {
    scripted(move |mut r| loop {
        let Some(head) = read_head(&mut r) else {
            return;
        };
        let answer = answer(&head.path);
        if read_body(&mut r, &head).is_none()
            || answer.is_empty()
            || r.get_mut().write_all(answer.as_bytes()).is_err()
        {
            return;
        }
    })
}

#[test]
fn an_answer_with_status_101_or_past_599_is_a_bad_gateway_naming_the_status() {
    // The status is the last segment of the path the back end is called with.
    let addr = answering(|path| {
        let status = path.rsplit('/').next().unwrap_or("200");
        match status {
            "102" | "103" => format!(
                "HTTP/1.1 {status} Wait\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            ),
            _ => format!("HTTP/1.1 {status} Odd\r\nContent-Length: 2\r\n\r\nok"),
        }
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\nproxies:\n  P:\n    path: /p/{{status}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{status}}\" }}\n"
    ));
    let mut c = Client::connect(h.http());
    for status in ["101", "600", "999"] {
        let r = c
            .post(&format!("/p/{status}"), &[JSON], b"{}")
            .expect("response");
        assert_eq!(r.status, 502, "{status}: {}", r.text());
        assert!(
            r.text().contains(&format!(
                "Endpoint 'svc' answered with an invalid status {status}"
            )),
            "{status}: {}",
            r.text()
        );
    }
    // Informational answers before the final one are skipped.
    for status in ["102", "103"] {
        let r = c
            .post(&format!("/p/{status}"), &[JSON], b"{}")
            .expect("response");
        assert_eq!(r.status, 200, "{status}: {}", r.text());
        assert_eq!(r.text(), "ok", "{status}");
    }
    assert_eq!(
        metric(
            h.admin(),
            "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"upstream_reset\"}"
        ),
        Some(3.0)
    );
}

#[test]
fn a_malformed_answer_is_reported_as_such_and_a_close_as_a_close() {
    // The case is the last segment of the path the back end is called with.
    let addr = answering(|path| match path.rsplit('/').next().unwrap_or("") {
        "fold" => "HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nok".to_owned(),
        "nul" => "HTTP/1.1 200 OK\r\nX-A: o\0ne\r\nContent-Length: 2\r\n\r\nok".to_owned(),
        "status" => "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok".to_owned(),
        "fields" => {
            let fields: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
            format!("HTTP/1.1 200 OK\r\n{fields}Content-Length: 2\r\n\r\nok")
        }
        "fields100" => {
            let fields: String = (0..99).map(|i| format!("X-{i}: v\r\n")).collect();
            format!("HTTP/1.1 200 OK\r\n{fields}Content-Length: 2\r\n\r\nok")
        }
        // Nothing: the connection closes at the end of the script.
        _ => String::new(),
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\nproxies:\n  P:\n    path: /p/{{case}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{case}}\" }}\n"
    ));
    let mut c = Client::connect(h.http());
    for (case, cause) in [
        ("fold", "a header field is malformed"),
        ("nul", "a header field is malformed"),
        ("status", "the status code is malformed"),
        ("fields", "more than 100 header fields"),
    ] {
        let r = c
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .expect("response");
        assert_eq!(r.status, 502, "{case}: {}", r.text());
        let text = r.text();
        assert!(
            text.contains("Endpoint 'svc' sent a malformed answer") && text.contains(cause),
            "{case}: {text}"
        );
    }
    let r = c.post("/p/fields100", &[JSON], b"{}").expect("response");
    assert_eq!(
        r.status,
        200,
        "100 header fields are accepted: {}",
        r.text()
    );
    let r = c.post("/p/close", &[JSON], b"{}").expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text().contains("Endpoint 'svc' closed the connection"),
        "{}",
        r.text()
    );
}

#[test]
fn a_client_gone_while_an_echo_streams_its_answer_is_the_clients_error() {
    // The echo answers while the request still uploads; the client leaves (closes, or resets)
    // mid-body, which cuts the answer: counted as the client's, not as a back-end reset.
    let echo = echo(busbar_engine::echo::EchoOptions::default());
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{}/e\"\n",
        echo.addr
    )));
    let admin = h.admin();
    for reset in [false, true] {
        let mut s = TcpStream::connect(h.http()).expect("connect");
        s.write_all(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
            .expect("head");
        s.write_all(&[b'y'; 30_000]).expect("part of the body");
        // The echo's answer is under way.
        std::thread::sleep(Duration::from_millis(300));
        if reset {
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .expect("linger");
        }
        drop(s);
    }
    let kind = |k: &str| {
        metric(
            admin,
            &format!("busbar_proxy_errors_total{{proxy=\"P\",kind=\"{k}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(
        eventually(Duration::from_secs(5), || kind("client_body") == 2.0),
        "client_body {}, upstream_reset {}",
        kind("client_body"),
        kind("upstream_reset")
    );
    assert_eq!(kind("upstream_reset"), 0.0);
    echo.stop();
}

#[test]
fn an_http_1_0_back_end_does_not_change_the_clients_http_version() {
    let addr = scripted(|mut r| {
        if read_request(&mut r).is_none() {
            return;
        }
        // An HTTP/1.0 answer, then the connection closes (1.0 without keep-alive).
        let _ = r.get_mut().write_all(
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
        );
    });
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let mut s = BufReader::new(TcpStream::connect(h.http()).expect("connect"));
    // Twice on one client connection: the first answer leaves it open.
    for i in 0..2 {
        s.get_mut()
            .write_all(b"GET /p HTTP/1.1\r\nHost: t\r\n\r\n")
            .expect("request");
        let mut status = String::new();
        s.read_line(&mut status).expect("status line");
        assert!(status.starts_with("HTTP/1.1 200"), "answer {i}: {status:?}");
        let mut length = 0;
        loop {
            let mut h = String::new();
            s.read_line(&mut h).expect("header");
            let h = h.trim_end().to_ascii_lowercase();
            if h.is_empty() {
                break;
            }
            assert_ne!(h, "connection: close", "answer {i}");
            if let Some(v) = h.strip_prefix("content-length:") {
                length = v.trim().parse().expect("length");
            }
        }
        let mut body = vec![0; length];
        std::io::Read::read_exact(&mut s, &mut body).expect("body");
        assert_eq!(body, b"ok", "answer {i}");
    }
}

/// An answer whose body fails before any of it came (the connection closed right after the
/// head, a malformed first chunk, a chunked body that ends at once) has sent the client
/// nothing yet: the client gets the error answer naming the endpoint, in its own format, not a
/// connection closed with no status. A body that fails later is still cut.
#[test]
fn an_answer_that_fails_before_its_body_is_a_bad_gateway_not_a_silent_close() {
    let addr = scripted(|mut r| {
        let Some(head) = read_request(&mut r) else {
            return;
        };
        let case = head.path.rsplit('/').next().unwrap_or("").to_owned();
        if case == "apart" || case == "slow" {
            // The head, then the body in writes of their own (a moment later, or after the
            // head has surely gone to the client alone).
            let w = r.get_mut();
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
            if case == "slow" {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = w.write_all(b"01234");
            let _ = w.write_all(b"56789");
            return;
        }
        let answer: &[u8] = match case.as_str() {
            "close" => b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
            "chunk" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nhello\r\n",
            "unended" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "empty" => b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            _ => b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234",
        };
        // The answer and the close in one segment (corked, then shut down), so that busbar
        // finds the end of the connection with the head whatever the timing.
        let w = r.get_mut();
        let _ = socket2::SockRef::from(&*w).set_tcp_cork(true);
        let _ = w.write_all(answer);
        let _ = w.shutdown(std::net::Shutdown::Write);
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\nproxies:\n  P:\n    path: /p/{{case}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{case}}\" }}\n"
    ));
    let mut c = Client::connect(h.http());
    for (case, cause) in [
        ("close", "the connection closed before the body's end"),
        ("chunk", "chunk"),
        ("unended", "the connection closed before the body's end"),
    ] {
        let r = c
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .unwrap_or_else(|e| panic!("{case}: no answer: {e}"));
        assert_eq!(r.status, 502, "{case}: {}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{case}"
        );
        let text = r.text();
        assert!(
            text.contains("endpoint 'svc'") && text.contains(cause),
            "{case}: {text}"
        );
    }
    // A SOAP client gets a SOAP fault, on the same connection.
    let soap = [
        ("Content-Type", "text/xml; charset=UTF-8"),
        ("SOAPAction", "\"\""),
    ];
    let r = c
        .post("/p/close", &soap, b"<e:Envelope xmlns:e=\"http://schemas.xmlsoap.org/soap/envelope/\"><e:Body/></e:Envelope>")
        .expect("answer");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("<faultcode>") && r.text().contains("endpoint 'svc'"),
        "{}",
        r.text()
    );
    let r = c.post("/p/empty", &[JSON], b"{}").expect("answer");
    assert_eq!((r.status, r.body.len()), (200, 0), "{}", r.text());
    for case in ["apart", "slow"] {
        let r = c
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .expect("answer");
        assert_eq!((r.status, r.text()), (200, "0123456789".into()), "{case}");
    }
    // Part of the body came: the client's copy is cut, never completed.
    let r = Client::connect(h.http()).post("/p/later", &[JSON], b"{}");
    assert!(
        !r.as_ref()
            .is_ok_and(|r| r.status == 200 && r.body.len() == 10),
        "a cut answer looked complete: {r:?}"
    );
    // Four error answers and one cut, each counted once.
    let series = "busbar_proxy_errors_total{proxy=\"P\",kind=\"upstream_reset\"}";
    assert!(
        eventually(Duration::from_secs(5), || metric(h.admin(), series)
            == Some(5.0)),
        "{series}: {:?}",
        metric(h.admin(), series)
    );
}

#[test]
fn a_response_cut_or_stalled_mid_body_is_a_failure_of_its_url_and_opens_its_breaker() {
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    // The case is the last segment of the path: 5 of the 10 bytes announced, then a close
    // ("cut") or a pause longer than the endpoint's timeout ("stall").
    let addr = scripted(move |mut r| {
        let Some(head) = read_request(&mut r) else {
            return;
        };
        seen.fetch_add(1, Ordering::SeqCst);
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234");
        if head.path.ends_with("/stall") {
            std::thread::sleep(Duration::from_secs(3));
        }
    });
    let url = format!("http://{addr}/e");
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"{url}\"\n    timeout: 300ms\n    breaker: {{ failures: 2, suspend: 1m }}\nproxies:\n  P:\n    path: /p/{{case}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{case}}\" }}\n"
    ));
    let admin = h.admin();
    let failures = || {
        metric(
            admin,
            &format!("busbar_upstream_failures_total{{endpoint=\"svc\",url=\"{url}\"}}"),
        )
    };
    for (i, case) in ["cut", "stall"].into_iter().enumerate() {
        let r = Client::connect(h.http()).post(&format!("/p/{case}"), &[JSON], b"{}");
        assert!(
            !r.as_ref().is_ok_and(|r| r.body.len() == 10),
            "{case}: a cut answer looked complete: {r:?}"
        );
        let want = (i + 1) as f64;
        assert!(
            eventually(Duration::from_secs(5), || failures() == Some(want)),
            "{case}: failures {:?}",
            failures()
        );
    }
    assert_eq!(
        metric(
            admin,
            "busbar_endpoint_responses_cut_total{endpoint=\"svc\"}"
        ),
        Some(2.0)
    );
    // The proxy counts each as what it was, as the endpoint does.
    for kind in ["upstream_reset", "response_timeout"] {
        let series = format!("busbar_proxy_errors_total{{proxy=\"P\",kind=\"{kind}\"}}");
        assert!(
            eventually(Duration::from_secs(5), || metric(admin, &series)
                == Some(1.0)),
            "{series}: {:?}",
            metric(admin, &series)
        );
    }
    // Two failures in a row opened the breaker: the next call goes nowhere.
    let r = Client::connect(h.http())
        .post("/p/cut", &[JSON], b"{}")
        .expect("response");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("circuit breaker is open"), "{}", r.text());
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[test]
fn a_step_reading_an_answer_paused_past_the_timeout_fails_as_a_timeout() {
    // 5 of the 10 bytes announced, then a pause longer than the endpoint's timeout ("stall")
    // or a close ("cut"): the step that reads the whole answer fails as the back end did.
    let addr = scripted(|mut r| {
        let Some(head) = read_request(&mut r) else {
            return;
        };
        let _ = r.get_mut().write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n[1,2,",
        );
        if head.path.ends_with("/stall") {
            std::thread::sleep(Duration::from_secs(3));
        }
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    timeout: 300ms\nproxies:\n  P:\n    path: /p/{{case}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{case}}\" }}\n    out:\n      - jq: '.'\n"
    ));
    for (case, status, what) in [
        ("stall", 504, "paused longer than 300ms after 5 bytes"),
        ("cut", 502, "broke off"),
    ] {
        let r = Client::connect(h.http())
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .expect("an answer");
        assert_eq!(r.status, status, "{case}: {}", r.text());
        assert!(r.text().contains(what), "{case}: {}", r.text());
    }
}

/// A back end that reads each request whole, sends the head of a 100 000-byte JSON answer
/// and then one byte of it every 200 ms, for as long as the connection takes them; `ended`
/// counts the connections that ended under it.
fn trickling(ended: Arc<AtomicUsize>) -> SocketAddr {
    scripted(move |mut r| {
        if read_request(&mut r).is_none() {
            return;
        }
        let w = r.get_mut();
        let mut sent = w.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[",
        );
        while sent.is_ok() {
            std::thread::sleep(Duration::from_millis(200));
            sent = w.write_all(b"1");
        }
        ended.fetch_add(1, Ordering::SeqCst);
    })
}

#[test]
fn an_answer_trickling_past_the_endpoints_deadline_is_cut_at_the_deadline() {
    // The back end never pauses for the 5 s `timeout`: only the 1 s deadline ends it.
    let ended = Arc::new(AtomicUsize::new(0));
    let addr = trickling(ended.clone());
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    timeout: 5s\n    deadline: 1s\nproxies:\n  Whole:\n    path: /whole\n    in:\n      - call: svc\n    out:\n      - jq: '.'\n  Through:\n    path: /through\n    in:\n      - call: svc\n"
    ));
    let in_time =
        |took: Duration| took >= Duration::from_millis(900) && took < Duration::from_secs(4);

    // A step that reads the whole answer fails at the deadline, as the back end's timeout.
    let mut c = Client::connect(h.http());
    c.stream
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let start = std::time::Instant::now();
    let r = c.post("/whole", &[JSON], b"{}").expect("an answer");
    let took = start.elapsed();
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        r.text()
            .contains("endpoint 'svc' passed its deadline of 1s"),
        "{}",
        r.text()
    );
    assert!(in_time(took), "answered after {took:?}");

    // Passed on as it comes, the answer's head reaches the client, and its connection is cut
    // at the deadline: never a body that looks complete.
    let stream = TcpStream::connect(h.http()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut s = BufReader::new(stream);
    let start = std::time::Instant::now();
    s.get_mut()
        .write_all(b"POST /through HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        .expect("send");
    let head = read_answer_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-length: 100000"),
        "{head}"
    );
    let mut body = Vec::new();
    let end = std::io::Read::read_to_end(&mut s, &mut body);
    let took = start.elapsed();
    assert!(
        !matches!(&end, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "the connection was not cut: {end:?} after {took:?}"
    );
    assert!(
        !body.is_empty() && body.len() < 100,
        "{} bytes of the body",
        body.len()
    );
    assert!(in_time(took), "cut after {took:?}");

    // Both are counted as the endpoint's timeouts, and both back-end connections were closed.
    let admin = h.admin();
    for series in [
        "busbar_endpoint_responses_cut_total{endpoint=\"svc\"}",
        "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"response_timeout\"}",
    ] {
        assert!(
            eventually(Duration::from_secs(5), || metric(admin, series)
                == Some(2.0)),
            "{series}: {:?}",
            metric(admin, series)
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || ended.load(Ordering::SeqCst) == 2),
        "back-end connections ended: {}",
        ended.load(Ordering::SeqCst)
    );
}

#[test]
fn an_answer_head_later_than_the_deadline_is_a_gateway_timeout_retried_as_one() {
    // The head comes after 3 s, well within the 5 s `timeout`, but past the 1 s deadline.
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    let addr = scripted(move |mut r| {
        while let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_none() {
                return;
            }
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(3));
            if r.get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
                .is_err()
            {
                return;
            }
        }
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    timeout: 5s\n    deadline: 1s\n    retries: 1\nproxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n"
    ));
    // A POST that reached the back end is not sent again, as after a timeout.
    let start = std::time::Instant::now();
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("an answer");
    let took = start.elapsed();
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        r.text()
            .contains("Endpoint 'svc' did not answer within its deadline of 1s"),
        "{}",
        r.text()
    );
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    // A GET is tried once more, with a deadline of its own.
    let start = std::time::Instant::now();
    let r = Client::connect(h.http()).get("/p").expect("an answer");
    let took = start.elapsed();
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(3),
        "answered after {took:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 3);
    let admin = h.admin();
    assert_eq!(
        metric(admin, "busbar_endpoint_retries_total{endpoint=\"svc\"}"),
        Some(1.0)
    );
}

#[test]
fn a_prompt_answer_passes_a_deadline_unchanged_on_a_connection_kept_for_the_next() {
    let (addr, seen) = recording(true);
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    deadline: 1s\nproxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n"
    ));
    let sent = payload(1 << 20, 7);
    let mut c = Client::connect(h.http());
    for i in 0..2 {
        if i == 1 {
            // Longer than the deadline: the next attempt's runs from its own start.
            std::thread::sleep(Duration::from_millis(1200));
        }
        let r = c
            .post("/p", &[("Content-Type", "application/octet-stream")], &sent)
            .expect("an answer");
        assert_eq!(r.status, 200, "answer {i}: {}", r.text());
        assert_eq!(r.header("content-length"), Some("1048576"), "answer {i}");
        assert!(r.body == sent, "answer {i}: the body changed");
    }
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn a_reload_applies_a_changed_deadline() {
    // Six bytes of JSON, one every 200 ms: whole within 5 s, cut at 500 ms.
    let addr = scripted(|mut r| {
        while let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_none() {
                return;
            }
            let w = r.get_mut();
            if w.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 6\r\n\r\n",
            )
            .is_err()
            {
                return;
            }
            for b in b"[1,22]" {
                std::thread::sleep(Duration::from_millis(200));
                if w.write_all(&[*b]).is_err() {
                    return;
                }
            }
        }
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    deadline: 5s\nproxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n    out:\n      - jq: '.'\n"
    ));
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("an answer");
    assert_eq!((r.status, r.text()), (200, "[1,22]".to_owned()));
    let text = std::fs::read_to_string(&h.config).expect("read the config");
    std::fs::write(&h.config, text.replace("deadline: 5s", "deadline: 500ms")).expect("write");
    h.engine().reload().expect("reload");
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("an answer");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(r.text().contains("deadline of 500ms"), "{}", r.text());
}

/// A keep-alive back end that answers each request with "ok" and records when a client
/// connection ended (`closed`); with `close_after`, it closes each connection itself that long
/// after its first answer.
fn keep_alive_back_end(
    close_after: Option<Duration>,
) -> (SocketAddr, Arc<Mutex<Vec<std::time::Instant>>>) {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let record = closed.clone();
    let addr = scripted(move |mut r| {
        if read_request(&mut r).is_none() {
            return;
        }
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        if let Some(after) = close_after {
            std::thread::sleep(after);
            return;
        }
        // Waits for the next request, or the end of the connection.
        if read_head(&mut r).is_none() {
            record.lock().expect("lock").push(std::time::Instant::now());
        }
    });
    (addr, closed)
}

/// The idle gauge of endpoint `svc`'s URL `url`.
fn idle_connections(admin: std::net::SocketAddr, url: &str) -> Option<f64> {
    metric(
        admin,
        &format!("busbar_upstream_idle_connections{{endpoint=\"svc\",url=\"{url}\"}}"),
    )
}

#[test]
fn an_idle_pooled_connection_is_closed_after_keep_alive() {
    let (addr, closed) = keep_alive_back_end(None);
    let url = format!("http://{addr}/e");
    let h = engine(&proxy_yaml(&format!(
        "    url: \"{url}\"\n    keep_alive: 1s\n"
    )));
    let admin = h.admin();
    let idle = || idle_connections(admin, &url);
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = std::time::Instant::now();
    assert!(eventually(Duration::from_secs(2), || idle() == Some(1.0)));
    assert!(
        eventually(Duration::from_secs(5), || !closed
            .lock()
            .expect("lock")
            .is_empty()),
        "the idle connection is still open; idle gauge {:?}",
        idle()
    );
    let after = closed.lock().expect("lock")[0].duration_since(answered);
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(3),
        "closed after {after:?}"
    );
    assert!(eventually(Duration::from_secs(2), || idle() == Some(0.0)));
}

#[test]
fn a_pooled_connection_the_back_end_closed_leaves_the_idle_gauge() {
    let (addr, _) = keep_alive_back_end(Some(Duration::from_millis(800)));
    let url = format!("http://{addr}/e");
    let h = engine(&proxy_yaml(&format!(
        "    url: \"{url}\"\n    keep_alive: 1m\n"
    )));
    let admin = h.admin();
    let idle = || idle_connections(admin, &url);
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(eventually(Duration::from_secs(2), || idle() == Some(1.0)));
    assert!(
        eventually(Duration::from_secs(3), || idle() == Some(0.0)),
        "idle gauge {:?}",
        idle()
    );
    // The next call opens a new connection and is answered.
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_connection_is_used_again_only_after_an_answer_that_leaves_it_in_a_known_state() {
    // Each case answers the first request on a connection in its own way; a request that
    // comes second on the same connection is answered "reused". An answer framed both ways,
    // one followed by bytes nobody asked for, or one with `Connection: close` must not leave
    // its connection in the pool, where the next request would read the leftovers as its
    // answer.
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let addr = scripted(move |mut r| {
        counted.fetch_add(1, Ordering::SeqCst);
        let mut first = true;
        while let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_none() {
                return;
            }
            let case = head.path.rsplit('/').next().unwrap_or("").to_owned();
            let answer = if !first {
                "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nreused".to_owned()
            } else {
                match case.as_str() {
                    "both" => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled".to_owned(),
                    "extra" => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled".to_owned(),
                    "close" => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nfirst".to_owned(),
                    // Interim answers before the final one, which leaves the connection usable.
                    "interim" => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_owned(),
                    _ => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_owned(),
                }
            };
            first = false;
            if r.get_mut().write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\nproxies:\n  P:\n    path: /p/{{case}}\n    in:\n      - call: {{ endpoint: svc, path: \"/{{case}}\" }}\n"
    ));
    let mut c = Client::connect(h.http());
    for (case, reused) in [
        ("both", false),
        ("extra", false),
        ("close", false),
        ("interim", true),
    ] {
        let before = connections.load(Ordering::SeqCst);
        let r = c
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .expect("response");
        assert_eq!((r.status, r.text()), (200, "first".to_owned()), "{case}");
        let r = c
            .post(&format!("/p/{case}"), &[JSON], b"{}")
            .expect("response");
        assert_eq!(r.status, 200, "{case}: {}", r.text());
        let second = r.text();
        let opened = connections.load(Ordering::SeqCst) - before;
        if reused {
            assert_eq!((second.as_str(), opened), ("reused", 1), "{case}");
        } else {
            // A fresh connection: its first answer, never the leftovers.
            assert_eq!((second.as_str(), opened), ("first", 2), "{case}");
        }
    }
}

#[test]
fn an_answer_sent_before_the_back_end_closed_on_the_upload_reaches_the_client() {
    // The back end refuses a large upload at once (413, `Connection: close`) and closes its
    // socket with the body unread, which resets the connection while busbar is still sending:
    // the client gets the back end's own answer, not a 502 for the reset.
    let addr = scripted(|mut r| {
        if read_head(&mut r).is_none() {
            return;
        }
        let w = r.get_mut();
        let _ = w.write_all(
            b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big\n",
        );
        // Unread data in the socket: closing it sends a reset, right behind the answer.
        let _ = w.shutdown(std::net::Shutdown::Both);
    });
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    for _ in 0..10 {
        let mut s = TcpStream::connect(h.http()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let body = vec![b'x'; 8 << 20];
        s.write_all(
            format!(
                "POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .expect("head");
        // The proxy may stop reading once it has its answer: a failed write is fine.
        let _ = s.write_all(&body);
        let mut answer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        assert!(text.contains("too big"), "{text}");
    }
}

#[test]
fn a_get_on_a_pooled_connection_the_back_end_closes_as_it_goes_out_is_sent_again() {
    // The back end closes every connection right after its answer, as a server at its
    // keep-alive limit does: the close can cross the next request on the pooled connection.
    // A GET (safe to repeat, no body) goes once more on a fresh connection instead of a 502.
    let addr = scripted(|mut r| {
        if let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_some() {
                let _ = r
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
        }
    });
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let mut c = Client::connect(h.http());
    for i in 0..400 {
        let r = c.get("/p").expect("response");
        assert_eq!((r.status, r.text()), (200, "ok".to_owned()), "request {i}");
    }
}

#[test]
fn a_back_end_answering_as_it_reads_a_slow_upload_is_not_timed_while_the_client_pauses() {
    // The back end sends each chunk of the request back as it reads it; the client pauses
    // longer than the endpoint's timeout between chunks. The answer waits for the client,
    // not for the back end: nothing times out.
    let addr = scripted(|mut r| {
        let Some(head) = read_head(&mut r) else {
            return;
        };
        assert!(head.chunked, "the upload goes out chunked");
        if r.get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .is_err()
        {
            return;
        }
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                return;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut data = vec![0; n + 2];
            if std::io::Read::read_exact(&mut r, &mut data).is_err() {
                return;
            }
            if n == 0 {
                let _ = r.get_mut().write_all(b"0\r\n\r\n");
                return;
            }
            let chunk = format!("{n:x}\r\n");
            let w = r.get_mut();
            if w.write_all(chunk.as_bytes())
                .and_then(|()| w.write_all(&data))
                .is_err()
            {
                return;
            }
        }
    });
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    timeout: 1s\n"
    )));
    let mut s = TcpStream::connect(h.http()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        .expect("head");
    for part in ["one ", "two ", "three"] {
        s.write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
            .expect("chunk");
        std::thread::sleep(Duration::from_millis(1600));
    }
    s.write_all(b"0\r\n\r\n").expect("end");
    let mut r = std::io::BufReader::new(s);
    let head = read_answer_head(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = read_body(
        &mut r,
        &Head {
            path: String::new(),
            chunked: true,
            length: 0,
        },
    )
    .expect("the whole answer");
    assert_eq!(String::from_utf8_lossy(&body), "one two three");
}

/// The status line and fields of an answer, up to the empty line.
fn read_answer_head<R: BufRead>(r: &mut R) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

#[test]
fn a_large_request_the_back_end_reads_slowly_but_steadily_is_not_an_answer_timeout() {
    // 16 MiB in one frame (a `jq` step buffers the request), read by the back end at about
    // 8 MiB/s with a 1 s endpoint timeout: the answer clock starts when the last of the
    // request is handed to the kernel, not when the frame is taken, so nothing times out.
    // (The kernels still hold what was handed over: a send buffer of up to 4 MiB here, and
    // the back end's receive buffer, kept small.)
    let addr = scripted_with_receive_buffer(64 * 1024, |mut r| {
        let Some(head) = read_head(&mut r) else {
            return;
        };
        let mut left = head.length;
        let mut buf = vec![0; 64 * 1024];
        while left > 0 {
            let n = std::io::Read::read(&mut r, &mut buf[..left.min(64 * 1024)]).unwrap_or(0);
            if n == 0 {
                return;
            }
            left -= n;
            std::thread::sleep(Duration::from_millis(8));
        }
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone");
    });
    let h = engine(&format!(
        "endpoints:\n  svc:\n    url: \"http://{addr}/e\"\n    timeout: 1s\nproxies:\n  P:\n    path: /p\n    max_body: 20MiB\n    in:\n      - jq: '.'\n      - call: svc\n"
    ));
    let text = format!("{{\"pad\":\"{}\"}}", "x".repeat(16 << 20));
    let r = Client::connect(h.http())
        .post("/p", &[JSON], text.as_bytes())
        .expect("response");
    assert_eq!((r.status, r.text()), (200, "done".to_owned()));
}

#[test]
fn transfer_codings_other_than_chunked_are_refused_both_ways() {
    // An answer still gzip-coded would reach the client with the coding applied and no
    // longer announced; a request likewise. busbar decodes chunked alone.
    let addr = answering_with(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let r = Client::connect(h.http())
        .post("/p", &[JSON], b"{}")
        .expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("not chunked alone"), "{}", r.text());
    let mut s = TcpStream::connect(h.http()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .expect("request");
    let head = read_answer_head(&mut std::io::BufReader::new(s));
    assert!(head.starts_with("HTTP/1.1 501"), "{head}");
}

#[test]
fn posts_to_a_back_end_that_closes_each_connection_after_its_answer_all_arrive_once() {
    // The back end answers one request per connection and then closes it, without saying so
    // (no `Connection: close`): busbar keeps the connection, and its close either is seen when
    // the connection is taken, or crosses the next request on it. Every POST is answered with
    // its own body, and the back end gets each body exactly once. The close (FIN) goes out with
    // the answer, so it always comes before a next request: a back end that closes only once
    // that request has reached its socket resets the connection with the request taken by its
    // TCP, and whether it read it no one can tell (busbar answers 502 then, as it must).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let addr = scripted(move |mut r| {
        let Some(head) = read_head(&mut r) else {
            return;
        };
        let Some(body) = read_body(&mut r, &head) else {
            return;
        };
        record.lock().expect("lock").push(body.clone());
        let s = r.get_mut();
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = socket2::SockRef::from(&*s).set_tcp_cork(true);
        let _ = s
            .write_all(head.as_bytes())
            .and_then(|()| s.write_all(&body))
            .and_then(|()| s.shutdown(std::net::Shutdown::Write));
    });
    let h = engine(&proxy_yaml(&format!("    url: \"http://{addr}/e\"\n")));
    let mut c = Client::connect(h.http());
    let mut sent = Vec::new();
    for i in 0..300 {
        // Sizes on both sides of the first read and of a socket buffer's worth.
        let body = payload([10, 16 * 1024 + 1, 70_000][i % 3], i as u64);
        let r = c.post("/p", &[JSON], &body).expect("response");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert!(r.body == body, "request {i}: the answer is not its body");
        sent.push(body);
    }
    assert!(
        *seen.lock().expect("lock") == sent,
        "the back end got each body once, in order"
    );
}

#[test]
fn a_back_end_that_states_its_keep_alive_timeout_has_its_connections_closed_before_it() {
    // The back end says it keeps idle connections 2 s (`Keep-Alive: timeout=2`) and never
    // closes one itself. busbar uses a connection again after 300 ms idle, and opens a new
    // one after 1.4 s: a second before the stated timeout, whatever its own keep_alive.
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let addr = scripted(move |mut r| {
        counted.fetch_add(1, Ordering::SeqCst);
        while let Some(head) = read_head(&mut r) {
            if read_body(&mut r, &head).is_none()
                || r.get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=2, max=100\r\nContent-Length: 2\r\n\r\nok")
                    .is_err()
            {
                return;
            }
        }
    });
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/e\"\n    keep_alive: 1m\n"
    )));
    let mut c = Client::connect(h.http());
    let mut call = || {
        let r = c.post("/p", &[JSON], b"{}").expect("response");
        assert_eq!((r.status, r.text()), (200, "ok".to_owned()));
        assert_eq!(r.header("keep-alive"), None, "a hop-by-hop field");
    };
    call();
    std::thread::sleep(Duration::from_millis(300));
    call();
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "used again after 300 ms"
    );
    std::thread::sleep(Duration::from_millis(1400));
    call();
    assert_eq!(
        connections.load(Ordering::SeqCst),
        2,
        "a new one after 1.4 s"
    );
}

#[test]
fn a_back_end_answer_over_max_body_is_a_502_that_keeps_the_client_connection() {
    // The answers are 4 KiB, the proxies read at most 1 KiB of a body. The JSON answer is
    // chunked (found too large while read), the SOAP one has a Content-Length (found at once).
    let json = format!("[{}0]", "0,".repeat(2048));
    let chunked: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{json}\r\n0\r\n\r\n",
            json.len()
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let xml = format!(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><r>{}</r></soapenv:Body></soapenv:Envelope>",
        "x".repeat(4096)
    );
    let sized: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=UTF-8\r\nContent-Length: {}\r\n\r\n{xml}",
            xml.len()
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let (json_back, soap_back) = (answering_with(chunked), answering_with(sized));
    let dir = temp_dir("answer-over-max-body");
    let sheet = dir.join("copy.xsl");
    std::fs::write(&sheet, "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"><xsl:template match=\"/\"><xsl:copy-of select=\".\"/></xsl:template></xsl:stylesheet>").expect("write");
    let h = engine(&format!(
        "endpoints:\n  j: {{ url: \"http://{json_back}/j\", timeout: 5s }}\n  s: {{ url: \"http://{soap_back}/s\", timeout: 5s }}\nproxies:\n  J:\n    path: /j\n    max_body: 1KiB\n    in:\n      - call: j\n    out:\n      - jq: '.'\n  S:\n    path: /s\n    max_body: 1KiB\n    in:\n      - call: s\n    out:\n      - xslt: {{ stylesheet: \"{}\" }}\n  Ok:\n    path: /ok\n    in:\n      - respond: {{ status: 200, body: \"ok\", content_type: text/plain }}\n",
        sheet.display()
    ));
    let mut c = Client::connect(h.http());
    let r = c.post("/j", &[JSON], b"{}").expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(
        r.text()
            .contains("The back end's answer is larger than max_body (1024 bytes)"),
        "{}",
        r.text()
    );
    assert_ne!(r.header("connection"), Some("close"));
    // The client sent nothing wrong: its connection carries the next request.
    let r = c.get("/ok").expect("the connection is still open");
    assert_eq!((r.status, r.text()), (200, "ok".to_owned()));

    let soap = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><q/></soapenv:Body></soapenv:Envelope>";
    let r = c
        .post("/s", &[("Content-Type", "text/xml; charset=UTF-8")], soap)
        .expect("response");
    let t = r.text();
    assert_eq!(r.status, 500, "{t}");
    assert!(t.contains("<faultcode>soapenv:Server</faultcode>"), "{t}");
    assert!(
        t.contains("The back end's answer is larger than max_body (1024 bytes)"),
        "{t}"
    );
    assert_ne!(r.header("connection"), Some("close"));
    let r = c.get("/ok").expect("the connection is still open");
    assert_eq!((r.status, r.text()), (200, "ok".to_owned()));

    // Counted as a body over the limit, on the proxies whose back ends sent them.
    for proxy in ["J", "S"] {
        assert_eq!(
            metric(
                h.admin(),
                &format!("busbar_proxy_errors_total{{proxy=\"{proxy}\",kind=\"body_too_large\"}}")
            ),
            Some(1.0),
            "{proxy}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
