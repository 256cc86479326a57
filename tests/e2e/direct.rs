use std::time::Duration;

use busbar_engine::echo::EchoOptions;

use crate::support::*;

const SIZES: [usize; 16] = [
    0,
    1,
    511,
    512,
    4095,
    4096,
    8191,
    8192,
    16383,
    16384,
    16385,
    65535,
    65536,
    65537,
    1 << 20,
    64 << 20,
];

#[test]
fn direct_proxy_returns_byte_identical_bodies_at_every_boundary_size_over_keep_alive() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let mut c = Client::connect(h.http());
    for (i, size) in SIZES.into_iter().enumerate() {
        let body = payload(size, i as u64);
        let r = c
            .post(
                "/service/DirectProxy",
                &[("Content-Type", "text/xml; charset=UTF-8")],
                &body,
            )
            .expect("response");
        assert_eq!(r.status, 200, "size {size}: {}", r.text());
        assert_eq!(r.body.len(), size, "size {size}");
        assert_eq!(sha256(&r.body), sha256(&body), "size {size}: body differs");
        assert_eq!(r.header("content-type"), Some("text/xml; charset=UTF-8"));
        assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
    }
    echo.stop();
}

#[test]
fn chunked_requests_stay_chunked_and_identical() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let mut c = Client::connect(h.http());
    for (i, size) in [1usize, 8191, 16385, 65537, 1 << 20]
        .into_iter()
        .enumerate()
    {
        for chunk in [1usize, 7, 4096, 16384] {
            if size > 70_000 && chunk < 4096 {
                continue;
            }
            let body = payload(size, 100 + i as u64);
            let r = c
                .post_chunked("/service/DirectProxy", &body, chunk)
                .expect("response");
            assert_eq!(r.status, 200);
            assert_eq!(r.header("transfer-encoding"), Some("chunked"));
            assert_eq!(sha256(&r.body), sha256(&body), "size {size} chunk {chunk}");
        }
    }
    echo.stop();
}

#[test]
fn http10_clients_get_the_whole_body_and_the_connection_closes() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    for size in [0usize, 100, 70_000] {
        let body = payload(size, 7);
        let mut c = Client::connect(h.http());
        let head = format!(
            "POST /service/DirectProxy HTTP/1.0\r\nHost: t\r\nContent-Type: text/xml\r\nContent-Length: {size}\r\n\r\n"
        );
        c.send_raw(head.as_bytes());
        c.send_raw(&body);
        let r = c.read_response().expect("response");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, body);
        let mut rest = Vec::new();
        use std::io::Read;
        let n = c.stream.read_to_end(&mut rest).expect("closed cleanly");
        assert_eq!(n, 0, "HTTP/1.0 connection must close after the response");
    }
    echo.stop();
}

#[test]
fn expect_100_continue_is_honoured() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let mut c = Client::connect(h.http());
    let body = payload(5000, 3);
    let head = format!(
        "POST /service/DirectProxy HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    c.send_raw(head.as_bytes());
    let mut line = String::new();
    use std::io::BufRead;
    c.stream.read_line(&mut line).expect("interim response");
    assert!(line.starts_with("HTTP/1.1 100"), "{line:?}");
    let mut blank = String::new();
    c.stream.read_line(&mut blank).expect("blank line");
    c.send_raw(&body);
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body);
    echo.stop();
}

#[test]
fn five_hundred_concurrent_clients_all_get_their_own_body_back() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let addr = h.http();
    let threads: Vec<_> = (0..500)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for j in 0..4 {
                    let body = payload(1000 + (i * 37 + j * 101) % 20_000, (i * 10 + j) as u64);
                    let r = c
                        .post("/service/DirectProxy", &[], &body)
                        .expect("response");
                    assert_eq!(r.status, 200);
                    assert_eq!(r.body, body, "client {i} request {j}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    echo.stop();
}

#[test]
fn reload_under_load_loses_no_request() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let addr = h.http();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let body = payload(2000 + i * 100, n);
                    let r = c
                        .post("/service/DirectProxy", &[], &body)
                        .expect("no request lost");
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_eq!(r.body, body);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let base = std::fs::read_to_string(&h.config).expect("config");
    for round in 0..5 {
        std::thread::sleep(Duration::from_millis(150));
        let extra = format!(
            "  Extra{round}:\n    path: /service/Extra{round}\n    in:\n      - respond: {{ body: \"r{round}\" }}\n"
        );
        std::fs::write(&h.config, format!("{base}{extra}")).expect("rewrite");
        let msg = h.engine().reload().expect("reload");
        assert!(msg.contains("reloaded"), "{msg}");
        let r = Client::connect(addr)
            .post(&format!("/service/Extra{round}"), &[], b"")
            .expect("new proxy");
        assert_eq!(r.text(), format!("r{round}"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let total: u64 = clients.into_iter().map(|t| t.join().expect("client")).sum();
    assert!(total > 0);
    echo.stop();
}

#[test]
fn graceful_shutdown_lets_an_in_flight_request_finish_with_connection_close() {
    let echo = echo(EchoOptions {
        delay: Some(Duration::from_millis(1500)),
        ..Default::default()
    });
    let mut h = engine(&direct_proxy_yaml(echo.addr, "30s"));
    let addr = h.http();
    let client = std::thread::spawn(move || {
        Client::connect(addr)
            .post("/service/DirectProxy", &[], b"in flight")
            .expect("answered")
    });
    let admin = h.admin();
    assert!(eventually(Duration::from_secs(10), || {
        metric(admin, "busbar_proxy_in_flight{proxy=\"DirectProxy\"}") == Some(1.0)
    }));
    let engine = h.engine.take().expect("engine");
    let stopping = std::thread::spawn(move || engine.shutdown());
    // The admin answers through the drain: readiness says so, and the in-flight request is
    // still in the metrics.
    assert!(eventually(Duration::from_secs(10), || {
        Client::connect(admin)
            .get("/readyz")
            .is_ok_and(|r| r.status == 503 && r.text() == "draining\n")
    }));
    assert_eq!(
        metric(admin, "busbar_proxy_in_flight{proxy=\"DirectProxy\"}"),
        Some(1.0)
    );
    // A reload now would build what is about to stop: refused.
    let reload = Client::connect(admin)
        .request("POST", "/reload", &[], b"")
        .expect("reload answered");
    assert_eq!(reload.status, 503, "{}", reload.text());
    assert!(reload
        .text()
        .contains("shutting down: nothing was reloaded"));
    let r = client.join().expect("client");
    stopping.join().expect("stopped");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"in flight");
    // The connection closes after this answer, and the answer says so: a client that sent its
    // next request on it would lose it.
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener must be closed"
    );
    assert!(
        std::net::TcpStream::connect(admin).is_err(),
        "the admin listener closes once the drain is over"
    );
    echo.stop();
}

/// A buffering echo answers only once the whole request is in, byte for byte at every size;
/// a body declared over its limit gets 413 at once.
#[test]
fn a_buffering_echo_answers_after_the_whole_request() {
    use std::io::{Read, Write};
    let echo = echo(EchoOptions {
        buffer: true,
        ..Default::default()
    });
    for &size in &SIZES {
        let body = payload(size, size as u64);
        let r = Client::connect(echo.addr)
            .post(
                "/service/EchoService",
                &[("Content-Type", "text/xml")],
                &body,
            )
            .expect("answered");
        assert_eq!(r.status, 200, "size {size}");
        assert_eq!(sha256(&r.body), sha256(&body), "size {size}");
        assert_eq!(r.header("content-type"), Some("text/xml"));
    }
    let mut s = std::net::TcpStream::connect(echo.addr).expect("connect");
    s.write_all(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        .expect("send half");
    s.set_read_timeout(Some(Duration::from_millis(400)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => panic!(
            "answered before the body was in: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    s.write_all(b"world").expect("send the rest");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut answer = Vec::new();
    while !answer.ends_with(b"helloworld") {
        let n = s.read(&mut buf).expect("answer");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"));

    let over = busbar_engine::echo::MAX_BUFFERED + 1;
    let mut s = std::net::TcpStream::connect(echo.addr).expect("connect");
    s.write_all(
        format!("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: {over}\r\n\r\nabc").as_bytes(),
    )
    .expect("send");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("an answer before the body");
    assert_eq!(&head, b"HTTP/1.1 413");
    echo.stop();
}
