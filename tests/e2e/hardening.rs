//! The serving side under a hostile client or a faulty network: stalled bodies, clients that
//! never read, a stuck transform at shutdown, bodies a back end would never see, taken ports, bad Host
//! headers and the admin API's guards.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use busbar_engine::Engine;

use crate::support::*;

/// Starts an engine with `listener` as the extra fields of listener `http` and `yaml` after.
fn engine_with(listener: &str, yaml: &str) -> Harness {
    engine_with_admin("", listener, yaml)
}

/// [`engine_with`], with `admin` as the extra fields of the admin listener.
fn engine_with_admin(admin: &str, listener: &str, yaml: &str) -> Harness {
    let dir = temp_dir("hardening");
    let config = dir.join("busbar.yaml");
    let full = format!(
        "workers: 2\nlog: {{ level: warn }}\nadmin: {{ bind: \"127.0.0.1:0\"{admin} }}\nshutdown: {{ drain_timeout: 5s }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:0\"{listener} }}\n{yaml}"
    );
    std::fs::write(&config, full).expect("write config");
    let engine = Engine::start(&config).unwrap_or_else(|e| panic!("engine start: {e}"));
    Harness {
        engine: Some(engine),
        dir,
        config,
    }
}

/// A back end that reads what it is sent and never answers; reports on the channel when its
/// connection is closed by busbar.
fn silent_back_end() -> (SocketAddr, mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                let _ = tx.send(());
            });
        }
    });
    (addr, rx)
}

/// Reads until the server closes; true when it did (EOF or reset), false on a read timeout.
fn closed_by_server(stream: &mut impl Read) -> bool {
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                )
            }
        }
    }
}

#[test]
fn a_stalled_request_body_gets_408_and_releases_the_back_end_connection() {
    let (backend, released) = silent_back_end();
    let h = engine_with(
        ", client_body_timeout: 300ms",
        &format!("endpoints:\n  be: {{ url: \"http://{backend}/x\", timeout: 60s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - call: be\n"),
    );
    for head in [
        // Part of the body, then nothing.
        "POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/xml\r\nContent-Length: 100\r\n\r\n0123456789",
        // 100-continue, then nothing.
        "POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/xml\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
    ] {
        let mut c = Client::connect(h.http());
        c.stream
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        c.send_raw(head.as_bytes());
        let r = c.read_response().expect("an answer to a stalled body");
        assert_eq!(r.status, 408, "{head:?}: {}", r.text());
        assert!(closed_by_server(&mut c.stream), "{head:?}: connection kept open");
    }
    // The first request reached the back end (the call streams the body); its connection
    // is given up. The second may or may not have: at least one release is seen.
    assert!(
        released.recv_timeout(Duration::from_secs(15)).is_ok(),
        "the back-end connection was not released"
    );
}

#[test]
fn a_client_that_never_reads_is_disconnected_and_the_back_end_released() {
    // A back end that streams a huge answer and reports when busbar stops taking it.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    let (tx, released) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = l.accept() else { return };
        let mut r = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
        }
        let s = r.get_mut();
        let total: u64 = 1 << 30;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {total}\r\n\r\n"
        );
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0u64;
        while sent < total {
            if s.write_all(&chunk).is_err() {
                let _ = tx.send(sent);
                return;
            }
            sent += chunk.len() as u64;
        }
    });
    let h = engine_with(
        ", send_timeout: 300ms",
        &format!("endpoints:\n  be: {{ url: \"http://{backend}/x\", timeout: 60s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - call: be\n"),
    );
    let mut c = TcpStream::connect(h.http()).expect("connect");
    c.write_all(b"GET /p HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    // The client reads nothing: busbar gives up on it, and on the back end feeding it.
    let sent = released
        .recv_timeout(Duration::from_secs(30))
        .expect("the back-end connection was not released");
    assert!(sent < 1 << 30);
    c.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    assert!(closed_by_server(&mut c), "the client connection was kept");
}

#[test]
fn a_get_with_a_chunked_body_is_never_forwarded_without_it() {
    let (backend, seen) = recording_back_end();
    let h = engine(&direct_proxy_yaml(backend, "5s"));
    let mut c = Client::connect(h.http());
    c.send_raw(b"GET /service/DirectProxy HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    let r = c.read_response().expect("answer");
    let seen = seen.lock().expect("lock").clone();
    match r.status {
        400 => assert!(seen.is_empty(), "refused, yet forwarded: {seen:?}"),
        200 => assert_eq!(seen, vec![b"hello".to_vec()], "forwarded without its body"),
        other => panic!("unexpected status {other}: {}", r.text()),
    }
    // With Content-Length it is forwarded whole.
    let mut c = Client::connect(h.http());
    c.send_raw(b"GET /service/DirectProxy HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(c.read_response().expect("answer").status, 200);
}

#[test]
fn a_request_without_host_or_with_two_is_refused() {
    let h = engine("proxies:\n  P:\n    path: /p\n    in:\n      - respond: { body: ok }\n");
    for (req, status) in [
        ("GET /p HTTP/1.1\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: x/y\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: x@y\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: x:99999\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
        ("GET /p HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200),
        ("GET /p HTTP/1.1\r\nHost: my-host_1.example:\r\n\r\n", 200),
        ("GET /p HTTP/1.0\r\n\r\n", 200),
        ("GET /p HTTP/1.1\r\nHost: a\r\n\r\n", 200),
    ] {
        let mut c = Client::connect(h.http());
        c.send_raw(req.as_bytes());
        let r = c.read_response().expect("answer");
        assert_eq!(r.status, status, "{req:?}: {}", r.text());
        let mut c = Client::connect(h.admin());
        c.send_raw(req.replace("/p", "/readyz").as_bytes());
        let r = c.read_response().expect("admin answer");
        assert_eq!(r.status, status, "admin {req:?}: {}", r.text());
    }
}

#[test]
fn a_port_taken_by_another_engine_is_refused_unless_shared_on_purpose() {
    let a = engine_with(
        ", reuse_port: true",
        "echo: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n",
    );
    let (http, admin, echo) = (a.http(), a.admin(), a.engine().echo.expect("echo address"));
    let write = |name: &str, yaml: String| {
        let file = a.dir.join(name);
        std::fs::write(&file, yaml).expect("write");
        file
    };
    let proxies = "proxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n";
    for (what, yaml) in [
        (
            format!("listeners.http.bind: cannot listen on {http}: address already in use"),
            format!("workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"{http}\" }}\n{proxies}"),
        ),
        (
            format!("admin.bind: cannot listen on {admin}: address already in use"),
            format!("workers: 1\nadmin: {{ bind: \"{admin}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:0\" }}\n{proxies}"),
        ),
        (
            format!("echo.bind: cannot listen on {echo}: address already in use"),
            format!("workers: 1\nadmin: {{ enabled: false }}\necho: {{ bind: \"{echo}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:0\" }}\n{proxies}"),
        ),
    ] {
        let file = write("b.yaml", yaml);
        let err = Engine::start(&file).expect_err("a taken port must be refused");
        assert!(err.to_string().contains(&what), "want {what:?}, got: {err}");
    }
    // `busbar run` says so and exits non-zero.
    let file = write(
        "c.yaml",
        format!("workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"{http}\" }}\n{proxies}"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("run")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("busbar run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on a taken port: {stderr}");
    assert!(
        stderr.contains("listeners.http.bind") && stderr.contains("address already in use"),
        "{stderr}"
    );
    // Shared on purpose by both: a hand-over.
    let file = write(
        "d.yaml",
        format!("workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"{http}\", reuse_port: true }}\n{proxies}"),
    );
    let b = Engine::start(&file).unwrap_or_else(|e| panic!("shared port refused: {e}"));
    b.shutdown();
}

fn admin_call(addr: SocketAddr, req: &str) -> Resp {
    let mut c = Client::connect(addr);
    c.send_raw(req.as_bytes());
    c.read_response().expect("admin answer")
}

#[test]
fn reload_refuses_browser_requests() {
    let h = engine("proxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n");
    let admin = h.admin();
    let reload = |headers: &str| {
        admin_call(
            admin,
            &format!("POST /reload HTTP/1.1\r\n{headers}Content-Length: 0\r\n\r\n"),
        )
        .status
    };
    assert_eq!(
        reload("Host: 127.0.0.1\r\nOrigin: http://evil.example\r\n"),
        403
    );
    assert_eq!(reload("Host: evil.example:9901\r\n"), 403);
    assert_eq!(reload(&format!("Host: {admin}\r\n")), 200);
    assert_eq!(reload("Host: localhost:9901\r\n"), 200);
}

#[test]
fn the_admin_token_protects_every_route_but_healthz() {
    let h = engine_with_admin(
        ", token: s3cr3t-t0ken",
        "",
        "proxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n",
    );
    let admin = h.admin();
    let get = |path: &str, auth: &str| {
        admin_call(
            admin,
            &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n"),
        )
    };
    assert_eq!(get("/healthz", "").status, 200);
    for path in ["/readyz", "/metrics", "/config", "/nope"] {
        let r = get(path, "");
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{path}");
        assert_eq!(
            get(path, "Authorization: Bearer wrong-token\r\n").status,
            401,
            "{path}"
        );
    }
    assert_eq!(
        get("/readyz", "Authorization: Bearer s3cr3t-t0ken\r\n").status,
        200
    );
    let cfg = get("/config", "Authorization: Bearer s3cr3t-t0ken\r\n");
    assert_eq!(cfg.status, 200);
    assert!(!cfg.text().contains("s3cr3t"), "{}", cfg.text());
    let r = admin_call(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 401);
    let r = admin_call(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cr3t-t0ken\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn config_hides_the_values_of_sensitive_headers() {
    let h = engine(
        "proxies:\n  P:\n    path: /p\n    in:\n      - set_header: { name: Authorization, value: Basic dXNlcjpodW50ZXIy }\n      - set_header: { name: X-Upstream-Token, value: tok-hunter2 }\n      - set_header: { name: Cookie, value: sid=hunter2 }\n      - set_header: { name: X-Trace, value: visible-value }\n      - respond: {}\n",
    );
    let cfg = Client::connect(h.admin())
        .get("/config")
        .expect("config")
        .text();
    for secret in ["dXNlcjpodW50ZXIy", "tok-hunter2", "sid=hunter2"] {
        assert!(!cfg.contains(secret), "{secret} shown:\n{cfg}");
    }
    assert!(cfg.contains("visible-value"), "{cfg}");
    assert!(cfg.contains("X-Upstream-Token"), "{cfg}");
}

/// A transform that never ends (a binary recursion 60 levels deep: 2^60 template calls).
const ENDLESS_XSL: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:template match="/"><r><xsl:call-template name="f"><xsl:with-param name="n" select="60"/></xsl:call-template></r></xsl:template>
  <xsl:template name="f">
    <xsl:param name="n"/>
    <xsl:if test="$n &gt; 0">
      <xsl:call-template name="f"><xsl:with-param name="n" select="$n - 1"/></xsl:call-template>
      <xsl:call-template name="f"><xsl:with-param name="n" select="$n - 1"/></xsl:call-template>
    </xsl:if>
  </xsl:template>
</xsl:stylesheet>
"#;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

#[test]
fn the_drain_timeout_bounds_the_stop_even_with_a_transform_stuck() {
    let dir = temp_dir("stuck-drain");
    std::fs::write(dir.join("endless.xsl"), ENDLESS_XSL).expect("write xsl");
    let (listen, admin) = (free_port(), free_port());
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        format!(
            "workers: 1\nshutdown: {{ drain_timeout: 300ms }}\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - xslt: {{ stylesheet: endless.xsl }}\n      - respond: {{}}\n"
        ),
    )
    .expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("run")
        .arg(&file)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let addr: SocketAddr = format!("127.0.0.1:{listen}").parse().expect("addr");
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let up = eventually(Duration::from_secs(10), || {
        TcpStream::connect(admin).is_ok() && TcpStream::connect(addr).is_ok()
    });
    assert!(up, "did not start listening");
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(
        b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n<a/>",
    )
    .expect("send");
    let busy = eventually(Duration::from_secs(10), || {
        metric(admin, "busbar_proxy_in_flight{proxy=\"P\"}") == Some(1.0)
    });
    assert!(busy, "the transform did not start");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let exited = eventually(Duration::from_secs(20), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("still running 20 s after SIGTERM with a 300ms drain timeout");
    }
    let out = child.wait_with_output().expect("wait");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {log}", out.status);
    assert!(log.contains("abandoned"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_sent_before_the_whole_request_body_says_the_connection_closes() {
    let echo = echo(busbar_engine::echo::EchoOptions::default());
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/e\" }}\nproxies:\n  Direct:\n    path: /direct\n    in: [ {{ call: echo }} ]\n  Header:\n    path: /header\n    in:\n      - route:\n          - when: {{ header: x-route, equals: yes }}\n            then: [ {{ call: echo }} ]\n          - otherwise: [ {{ fault: {{ status: 500, reason: no route }} }} ]\n",
        echo.addr
    ));
    let small = vec![b'a'; 1024];
    let large = vec![b'b'; 200 * 1024];
    // Small unread bodies are read and dropped: the connection carries the next request.
    let mut c = Client::connect(h.http());
    for path in ["/nope", "/header", "/direct"] {
        let r = c.post(path, &[], &small).expect("answer");
        assert_ne!(
            r.header("connection"),
            Some("close"),
            "{path}: {}",
            r.status
        );
    }
    let r = c
        .post("/direct", &[], &small)
        .expect("the same connection goes on");
    assert_eq!((r.status, r.body.len()), (200, small.len()));
    // Large unread bodies are not read: the answer says the connection ends, and it does.
    for path in ["/nope", "/header"] {
        let mut c = Client::connect(h.http());
        let r = c.post(path, &[], &large).expect("answer");
        assert!(r.status == 404 || r.status == 500, "{path}: {}", r.status);
        assert_eq!(r.header("connection"), Some("close"), "{path}");
    }
    // A body streamed whole to the back end leaves the connection open.
    let mut c = Client::connect(h.http());
    for _ in 0..2 {
        let r = c.post("/direct", &[], &large).expect("answer");
        assert_eq!((r.status, r.body.len()), (200, large.len()));
        assert_ne!(r.header("connection"), Some("close"));
    }
    echo.stop();
}

/// Requests the HTTP parser refuses never reach a proxy; they are answered 400 or 431 by the HTTP
/// layer, access-logged with what is known of them and counted per listener and status.
#[test]
fn requests_the_http_parser_refuses_are_logged_and_counted() {
    let dir = temp_dir("unparsed");
    let log = dir.join("access.log");
    let h = engine(&format!(
        "access_log: {{ path: \"{}\", format: json }}\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {{ body: ok }}\n",
        log.display()
    ));
    let many_fields: String = (0..120).map(|i| format!("X-F{i}: v\r\n")).collect();
    let big_head = format!("X-Big: {}\r\n", "a".repeat(70_000));
    let cases = [
        ("GET /a b HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 400),
        ("HELLO\r\n\r\n".to_owned(), 400),
        (
            "GET /p HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n".to_owned(),
            400,
        ),
        (
            "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"
                .to_owned(),
            400,
        ),
        (
            format!("GET /p HTTP/1.1\r\nHost: t\r\n{many_fields}\r\n"),
            431,
        ),
        (format!("GET /p HTTP/1.1\r\nHost: t\r\n{big_head}\r\n"), 431),
        ("CONNECT /p HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(), 501),
    ];
    for (request, status) in &cases {
        let mut c = Client::connect(h.http());
        // The server may answer and close before it read everything.
        let _ = c.stream.get_mut().write_all(request.as_bytes());
        let r = c.read_response().expect("answer");
        assert_eq!(r.status, *status, "{:?}", &request[..request.len().min(60)]);
    }
    // A request that parses is logged as before.
    assert_eq!(
        Client::connect(h.http()).get("/p").expect("answer").status,
        200
    );
    let mut lines = Vec::new();
    let all = eventually(Duration::from_secs(5), || {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .collect();
        lines.len() == cases.len() + 1
    });
    assert!(all, "{lines:#?}");
    let mut statuses: Vec<u64> = Vec::new();
    for line in lines.iter().filter(|l| l["proxy"] == "-") {
        assert!(line["method"].is_null(), "{line}");
        assert!(line["target"].is_null(), "{line}");
        assert!(line["trace_id"].is_null(), "{line}");
        assert!(line["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")));
        statuses.push(line["status"].as_u64().expect("status"));
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [400, 400, 400, 400, 431, 431, 501]);
    let counted = |status: &str| {
        metric(
            h.admin(),
            &format!("busbar_listener_bad_requests_total{{listener=\"http\",status=\"{status}\"}}"),
        )
    };
    assert_eq!(counted("400"), Some(4.0));
    assert_eq!(counted("431"), Some(2.0));
    assert_eq!(counted("414"), Some(0.0));
    assert_eq!(counted("501"), Some(1.0));
}

/// What a slow client of the body budget test saw before it sent the rest of its body.
enum Held {
    /// Answered before its body was whole: status, `Retry-After`, `Connection`.
    Refused(u16, Option<String>, Option<String>),
    /// Still waiting, its body held: sends the rest when told, and reports the status.
    Waiting(mpsc::Sender<()>, std::thread::JoinHandle<u16>),
}

/// Slow clients whose bodies a JSON route must hold whole: a request whose body would take
/// the bodies held past `max_buffered_bodies` is answered 503 with `Retry-After` at once, its
/// connection closed, while the bodies already held are served; once they are done their
/// bytes are given back and a new request passes.
#[test]
fn request_bodies_past_the_memory_budget_get_503_at_once_and_the_budget_comes_back() {
    const LEN: usize = 400_000;
    // Three prefixes pass 1 MiB, two whole bodies fit in it: at most two clients are held.
    const PREFIX: usize = 350_000;
    let echo = echo(busbar_engine::echo::EchoOptions::default());
    let h = engine(&format!(
        "max_buffered_bodies: 1MiB\nendpoints:\n  echo: {{ url: \"http://{}/e\", timeout: 10s }}\nproxies:\n  Buf:\n    path: /buf\n    methods: [POST]\n    max_body: 512KiB\n    in:\n      - route:\n          - when: {{ json: \"$..x\", equals: never }}\n            then: [ {{ respond: {{ status: 200, body: x }} }} ]\n          - otherwise: [ {{ call: echo }} ]\n",
        echo.addr
    ));
    let addr = h.http();
    let mut body = b"{\"pad\":\"".to_vec();
    body.resize(LEN - 2, b'a');
    body.extend_from_slice(b"\"}");
    let body = std::sync::Arc::new(body);
    let head = format!(
        "POST /buf HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {LEN}\r\n\r\n"
    );
    let (report, reports) = mpsc::channel();
    for _ in 0..5 {
        let (body, head, report) = (body.clone(), head.clone(), report.clone());
        std::thread::spawn(move || {
            let stream = TcpStream::connect(addr).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let mut writer = stream.try_clone().expect("clone");
            // A refused client's connection is closed under its write: that is not a failure.
            let _ = writer
                .write_all(head.as_bytes())
                .and_then(|()| writer.write_all(&body[..PREFIX]));
            stream
                .set_read_timeout(Some(Duration::from_secs(3)))
                .expect("timeout");
            let mut c = Client {
                stream: BufReader::new(stream),
            };
            match c.read_response() {
                Ok(r) => {
                    let header = |n: &str| r.header(n).map(str::to_owned);
                    let _ = report.send(Held::Refused(
                        r.status,
                        header("retry-after"),
                        header("connection"),
                    ));
                }
                Err(_) => {
                    let (go, wait) = mpsc::channel::<()>();
                    let rest = std::thread::spawn(move || {
                        let _ = wait.recv();
                        writer.write_all(&body[PREFIX..]).expect("the rest");
                        c.stream
                            .get_ref()
                            .set_read_timeout(Some(Duration::from_secs(30)))
                            .expect("timeout");
                        let r = c.read_response().expect("answer");
                        assert_eq!(r.body.len(), LEN, "echoed whole");
                        r.status
                    });
                    let _ = report.send(Held::Waiting(go, rest));
                }
            }
        });
    }
    drop(report);
    let held: Vec<Held> = reports.iter().collect();
    assert_eq!(held.len(), 5);
    let mut waiting = Vec::new();
    let mut refused = 0;
    for h in held {
        match h {
            Held::Refused(status, retry_after, connection) => {
                assert_eq!(status, 503);
                assert_eq!(retry_after.as_deref(), Some("1"));
                assert_eq!(connection.as_deref(), Some("close"));
                refused += 1;
            }
            Held::Waiting(go, rest) => waiting.push((go, rest)),
        }
    }
    assert!(
        (1..=2).contains(&waiting.len()),
        "{} held, {refused} refused",
        waiting.len()
    );
    let admin = h.admin();
    let in_use = metric(admin, "busbar_buffered_request_bytes ").expect("gauge");
    assert!(in_use <= (1 << 20) as f64, "{in_use}");
    assert_eq!(
        metric(admin, "busbar_buffered_request_refused_total "),
        Some(refused as f64)
    );
    for (go, _) in &waiting {
        go.send(()).expect("go");
    }
    for (_, rest) in waiting {
        assert_eq!(rest.join().expect("client"), 200);
    }
    assert!(
        eventually(Duration::from_secs(5), || metric(
            admin,
            "busbar_buffered_request_bytes "
        ) == Some(0.0)),
        "the held bytes were not given back"
    );
    let r = Client::connect(addr)
        .post("/buf", &[("Content-Type", "application/json")], &body)
        .expect("answer");
    assert_eq!((r.status, r.body.len()), (200, LEN));
    echo.stop();
}
