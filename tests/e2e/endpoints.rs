//! Endpoints as services: failover, load balancing, circuit breakers, retries with replayed
//! bodies and a budget, and HTTPS back ends (CA, untrusted certificates, client certificates).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use busbar_engine::echo::{EchoOptions, NAME_HEADER};
use http::HeaderValue;

use crate::support::*;

fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

fn named_echo(name: &'static str, delay: Option<Duration>) -> busbar_engine::echo::EchoServer {
    echo(EchoOptions {
        name: Some(HeaderValue::from_static(name)),
        delay,
        ..Default::default()
    })
}

/// One request as a raw back end saw it.
pub struct RawRequest {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// What a raw back end does with a request: answer `(status, body)`, or close the
/// connection without answering.
type Answer = Option<(u16, Vec<u8>)>;

/// Reads one request (Content-Length bodies); `None` when the peer closed.
fn read_request<R: BufRead>(r: &mut R) -> Option<RawRequest> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(RawRequest { method, path, body })
}

fn write_answer<W: Write>(w: &mut W, status: u16, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// A plain-HTTP back end answering as `answer` says; counts the requests it received.
fn raw_back_end(
    answer: impl Fn(&RawRequest) -> Answer + Send + Sync + 'static,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let (answer, seen) = (answer.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                while let Some(req) = read_request(&mut r) {
                    seen.fetch_add(1, Ordering::SeqCst);
                    match answer(&req) {
                        Some((status, body)) => {
                            if write_answer(r.get_mut(), status, &body).is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                }
            });
        }
    });
    (addr, count)
}

fn proxy_yaml(endpoint: &str) -> String {
    format!(
        "endpoints:\n  svc:\n{endpoint}proxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n"
    )
}

#[test]
fn failover_skips_a_dead_back_end_and_every_answer_is_byte_exact() {
    let live = echo(EchoOptions::default());
    let h = engine(&proxy_yaml(&format!(
        "    urls: [ \"http://{}/down\", \"http://{}/up\" ]\n    connect_timeout: 1s\n",
        closed_port(),
        live.addr
    )));
    let mut c = Client::connect(h.http());
    for i in 0..100 {
        let body = payload(1000 + i * 37, i as u64);
        let r = c.post("/p", &[], &body).expect("response");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.body, body, "request {i}");
    }
    let failovers = metric(
        h.admin(),
        "busbar_endpoint_failovers_total{endpoint=\"svc\"}",
    );
    // Round robin sends every other request to the dead URL first.
    assert_eq!(failovers, Some(50.0));
    live.stop();
}

/// Sends `n` requests over `threads` keep-alive connections; counts answers per back end.
fn spread(addr: SocketAddr, n: usize, threads: usize) -> HashMap<String, usize> {
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut mine: HashMap<String, usize> = HashMap::new();
                for i in 0..n / threads {
                    let r = c.post("/p", &[], b"x").expect("response");
                    assert_eq!(r.status, 200, "thread {t} request {i}");
                    let name = r.header(NAME_HEADER.as_str()).unwrap_or("?").to_owned();
                    *mine.entry(name).or_default() += 1;
                }
                let mut all = counts.lock().expect("lock");
                for (k, v) in mine {
                    *all.entry(k).or_default() += v;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    Arc::try_unwrap(counts)
        .expect("one owner")
        .into_inner()
        .expect("lock")
}

fn within_5_percent(got: usize, expected: usize) -> bool {
    got.abs_diff(expected) * 20 <= expected
}

#[test]
fn round_robin_and_weighted_spread_within_five_percent_over_ten_thousand_requests() {
    let (a, b) = (named_echo("a", None), named_echo("b", None));
    let h = engine(&format!(
        "endpoints:\n  rr:\n    urls: [ \"http://{a}/e\", \"http://{b}/e\" ]\n  w:\n    urls: [ {{ url: \"http://{a}/e\", weight: 3 }}, {{ url: \"http://{b}/e\", weight: 1 }} ]\n    balance: weighted\nproxies:\n  P:\n    path: /p\n    in:\n      - call: rr\n  W:\n    path: /w\n    in:\n      - call: w\n",
        a = a.addr,
        b = b.addr
    ));
    let rr = spread(h.http(), 10_000, 4);
    assert!(within_5_percent(rr["a"], 5000), "{rr:?}");
    assert!(within_5_percent(rr["b"], 5000), "{rr:?}");

    // The same over the weighted endpoint, through path /w.
    let counts = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let addr = h.http();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..2500 {
                    let r = c.post("/w", &[], b"x").expect("response");
                    assert_eq!(r.status, 200);
                    let name = r.header(NAME_HEADER.as_str()).unwrap_or("?").to_owned();
                    *counts.lock().expect("lock").entry(name).or_default() += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    let w = counts.lock().expect("lock").clone();
    assert!(within_5_percent(w["a"], 7500), "{w:?}");
    assert!(within_5_percent(w["b"], 2500), "{w:?}");
    a.stop();
    b.stop();
}

#[test]
fn least_pending_prefers_the_fast_back_end() {
    let fast = named_echo("fast", None);
    let slow = named_echo("slow", Some(Duration::from_millis(200)));
    let h = engine(&proxy_yaml(&format!(
        "    urls: [ \"http://{}/e\", \"http://{}/e\" ]\n    balance: least_pending\n",
        slow.addr, fast.addr
    )));
    let counts = spread(h.http(), 200, 4);
    let to_slow = counts.get("slow").copied().unwrap_or(0);
    // Round robin would send 100 to the slow one; least pending sends it only what arrives
    // while the fast one is busier than the slow one.
    assert!(to_slow < 30, "{counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 200);
    fast.stop();
    slow.stop();
}

#[test]
fn breaker_opens_answers_503_fast_and_closes_after_a_successful_probe() {
    let port = closed_port();
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{port}/e\"\n    breaker: {{ failures: 3, suspend: 1s, max_suspend: 5s }}\n"
    )));
    let json = [("Content-Type", "application/json")];
    let mut c = Client::connect(h.http());
    for i in 0..3 {
        let r = c.post("/p", &json, b"{}").expect("response");
        assert_eq!(r.status, 502, "failure {i}: {}", r.text());
    }
    let started = Instant::now();
    let r = c.post("/p", &json, b"{}").expect("response");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.text()
            .contains("Endpoint 'svc' is unavailable: its circuit breaker is open"),
        "{}",
        r.text()
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // While open, the dead URL is not even tried.
    assert_eq!(
        metric(
            h.admin(),
            &format!("busbar_upstream_attempts_total{{endpoint=\"svc\",url=\"http://{port}/e\"}}")
        ),
        Some(3.0)
    );
    let state = |h: &Harness| {
        metric(h.admin(), "busbar_endpoint_breaker_state{endpoint=\"svc\"}").unwrap_or(-1.0)
    };
    assert_eq!(state(&h), 1.0);
    assert_eq!(
        metric(
            h.admin(),
            &format!("busbar_upstream_breaker_state{{endpoint=\"svc\",url=\"http://{port}/e\"}}")
        ),
        Some(1.0)
    );
    // The back end comes up on the same port; after the suspension a probe gets through and
    // closes the breaker.
    let back = busbar_engine::echo::start(port, EchoOptions::default(), 1).expect("echo");
    assert!(eventually(Duration::from_secs(5), || {
        c.post("/p", &json, b"{\"up\":1}")
            .is_ok_and(|r| r.status == 200 && r.body == b"{\"up\":1}")
    }));
    assert_eq!(state(&h), 0.0);
    let r = c.post("/p", &json, b"{}").expect("response");
    assert_eq!(r.status, 200);
    back.stop();
}

#[test]
fn retries_are_capped_and_the_budget_stops_a_retry_storm() {
    // A back end that reads each request and closes without answering.
    let (addr, attempts) = raw_back_end(|_| None);
    let h = engine(&format!(
        "endpoints:\n  capped:\n    url: \"http://{addr}/a\"\n    retries: 2\n  storm:\n    url: \"http://{addr}/b\"\n    retries: 5\n    retry_budget: {{ ratio: 0, min_retries: 3, window: 60s }}\nproxies:\n  Capped:\n    path: /capped\n    in:\n      - call: capped\n  Storm:\n    path: /storm\n    in:\n      - call: storm\n"
    ));
    let mut c = Client::connect(h.http());
    let r = c.get("/capped").expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("closed the connection"), "{}", r.text());
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "one try and two retries"
    );

    attempts.store(0, Ordering::SeqCst);
    let mut last = String::new();
    for _ in 0..10 {
        let r = Client::connect(h.http()).get("/storm").expect("response");
        assert_eq!(r.status, 502);
        last = r.text();
    }
    // Ten requests, and only the three retries the budget allows.
    assert_eq!(attempts.load(Ordering::SeqCst), 13);
    assert!(
        last.contains("not retried: the retry budget is spent"),
        "{last}"
    );
    assert_eq!(
        metric(
            h.admin(),
            "busbar_endpoint_retries_total{endpoint=\"storm\"}"
        ),
        Some(3.0)
    );
}

/// A back end that answers 503 the first time it sees a body and 200 (with the body's
/// SHA-256) after; `/close` reads the body and closes without answering. Records the
/// SHA-256 of every body it received.
type Hashes = Arc<Mutex<Vec<[u8; 32]>>>;

fn flaky_back_end() -> (SocketAddr, Arc<AtomicUsize>, Hashes) {
    let hashes = Arc::new(Mutex::new(Vec::new()));
    let seen = hashes.clone();
    let (addr, count) = raw_back_end(move |req| {
        let hash = sha256(&req.body);
        let mut seen = seen.lock().expect("lock");
        let first = !seen.contains(&hash);
        seen.push(hash);
        if req.path.starts_with("/close") {
            return None;
        }
        assert_eq!(req.method, "POST");
        Some(if first {
            (503, b"busy".to_vec())
        } else {
            (200, hash.to_vec())
        })
    });
    (addr, count, hashes)
}

#[test]
fn a_post_is_retried_byte_exact_within_the_replay_buffer_and_not_past_it() {
    let (addr, attempts, hashes) = flaky_back_end();
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/flaky\"\n    retries: 1\n    retry_on_status: [503]\n    replay_buffer: 256KiB\n"
    )));
    let small = payload(100_000, 1);
    let r = Client::connect(h.http())
        .post("/p", &[], &small)
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.body,
        sha256(&small),
        "the back end got the body byte for byte"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(*hashes.lock().expect("lock"), vec![sha256(&small); 2]);

    let large = payload(1024 * 1024, 2);
    let r = Client::connect(h.http())
        .post("/p", &[], &large)
        .expect("response");
    // The back end's own 503: a second attempt would have needed the whole 1 MiB again.
    assert_eq!(r.status, 503);
    assert_eq!(r.body, b"busy");
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "the large body went once"
    );
}

#[test]
fn a_large_idempotent_request_is_not_retried_and_the_error_says_why() {
    let (addr, attempts, _) = flaky_back_end();
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/close\"\n    retries: 3\n"
    )));
    let large = payload(300_000, 3);
    let mut c = Client::connect(h.http());
    c.send_raw(
        format!(
            "PUT /p HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            large.len()
        )
        .as_bytes(),
    );
    c.send_raw(&large);
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text().contains("larger than replay_buffer (65536 bytes)"),
        "{}",
        r.text()
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);

    // A POST is not sent again once it went out, and the error says so.
    let r = Client::connect(h.http())
        .post("/p", &[], b"{}")
        .expect("response");
    assert_eq!(r.status, 502);
    assert!(r.text().contains("POST is not idempotent"), "{}", r.text());
}

#[test]
fn a_call_in_on_error_resends_a_kept_body_or_fails_at_once() {
    let (addr, attempts, _) = flaky_back_end();
    let (rec, seen) = recording_back_end();
    let h = engine(&format!(
        "endpoints:\n  broken:\n    url: \"http://{addr}/close\"\n  backup:\n    url: \"http://{rec}/ok\"\nproxies:\n  P:\n    path: /p\n    in:\n      - call: broken\n    on_error:\n      - call: backup\n      - respond: {{}}\n"
    ));
    let small = payload(20_000, 4);
    let r = Client::connect(h.http())
        .post("/p", &[], &small)
        .expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, small);
    assert_eq!(seen.lock().expect("lock").len(), 1);

    let large = payload(200_000, 5);
    let r = Client::connect(h.http())
        .post("/p", &[], &large)
        .expect("response");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("Cannot call endpoint 'backup'") && r.text().contains("replay_buffer"),
        "{}",
        r.text()
    );
    // The backup never saw a request whose Content-Length lied.
    assert_eq!(seen.lock().expect("lock").len(), 1);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

/// A CA, a server certificate for localhost and a client certificate, made with openssl.
fn make_pki(dir: &std::path::Path) {
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=busbar test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"),
        )
        .expect("write ext");
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }
}

/// A TLS echo back end (rustls, blocking): answers each request with its body, and tells
/// in headers the SNI name it got and whether the client presented a certificate.
fn tls_back_end(dir: &std::path::Path, require_client_cert: bool) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = if require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(dir.join("ca.pem")).expect("ca.pem") {
            roots.add(ca.expect("ca")).expect("add ca");
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = Arc::new(builder.with_single_cert(certs, key).expect("server config"));
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut r = BufReader::new(rustls::StreamOwned::new(conn, stream));
                while let Some(req) = read_request(&mut r) {
                    let tls = &r.get_ref().conn;
                    let sni = tls.server_name().unwrap_or("-").to_owned();
                    let cert = if tls.peer_certificates().is_some() {
                        "present"
                    } else {
                        "none"
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nx-sni: {sni}\r\nx-client-cert: {cert}\r\n\r\n",
                        req.body.len()
                    );
                    let w = r.get_mut();
                    if w.write_all(head.as_bytes())
                        .and_then(|()| w.write_all(&req.body))
                        .and_then(|()| w.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn https_back_ends_are_checked_against_the_configured_ca_and_failures_are_named() {
    let pki = temp_dir("pki");
    make_pki(&pki);
    let plain = tls_back_end(&pki, false);
    let mutual = tls_back_end(&pki, true);
    let ca = pki.join("ca.pem");
    let (cert, key) = (pki.join("client.pem"), pki.join("client.key"));
    let (p, m) = (plain.port(), mutual.port());
    let h = engine(&format!(
        "endpoints:
  trusted: {{ url: \"https://localhost:{p}/e\", tls: {{ ca: \"{ca}\" }} }}
  system: {{ url: \"https://localhost:{p}/e\" }}
  mismatch: {{ url: \"https://localhost:{p}/e\", tls: {{ ca: \"{ca}\", server_name: other.test }} }}
  mtls: {{ url: \"https://localhost:{m}/e\", tls: {{ ca: \"{ca}\", cert: \"{cert}\", key: \"{key}\" }} }}
  nocert: {{ url: \"https://localhost:{m}/e\", tls: {{ ca: \"{ca}\" }} }}
proxies:
  Trusted: {{ path: /trusted, in: [ {{ call: trusted }} ] }}
  System: {{ path: /system, in: [ {{ call: system }} ] }}
  Mismatch: {{ path: /mismatch, in: [ {{ call: mismatch }} ] }}
  Mtls: {{ path: /mtls, in: [ {{ call: mtls }} ] }}
  NoCert: {{ path: /nocert, in: [ {{ call: nocert }} ] }}
",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    ));
    let json = [("Content-Type", "application/json")];
    let mut c = Client::connect(h.http());
    let body = payload(70_000, 9);
    let r = c.post("/trusted", &json, &body).expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, body);
    assert_eq!(
        r.header("x-sni"),
        Some("localhost"),
        "SNI from the URL's host"
    );
    assert_eq!(r.header("x-client-cert"), Some("none"));

    let r = c.post("/system", &json, b"{}").expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text()
            .contains("certificate not trusted for host localhost"),
        "{}",
        r.text()
    );

    let r = c.post("/mismatch", &json, b"{}").expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text()
            .contains("certificate not valid for host other.test"),
        "{}",
        r.text()
    );

    let r = c.post("/mtls", &json, b"{\"m\":1}").expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-client-cert"), Some("present"));
    assert_eq!(r.body, b"{\"m\":1}");

    let r = Client::connect(h.http())
        .post("/nocert", &json, b"{}")
        .expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text().contains("may require a client certificate"),
        "{}",
        r.text()
    );
    let _ = std::fs::remove_dir_all(&pki);
}

/// A `busbar run` child process, stopped when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> SocketAddr {
    closed_port()
}

#[test]
fn the_resilience_example_fails_over_balances_and_breaks() {
    let (listen, echo, admin) = (free_addr(), free_addr(), free_addr());
    let (echo_a, echo_b, dead) = (free_addr(), free_addr(), closed_port());
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/resilience.yaml");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("run")
        .arg(&example)
        .envs([
            ("BUSBAR_LISTEN", listen.to_string()),
            ("BUSBAR_ECHO", echo.to_string()),
            ("BUSBAR_ADMIN", admin.to_string()),
            ("BUSBAR_WORKERS", "1".to_owned()),
            ("BUSBAR_ECHO_A", echo_a.to_string()),
            ("BUSBAR_ECHO_B", echo_b.to_string()),
            ("BUSBAR_DEAD", dead.to_string()),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("busbar run");
    let _running = Running(child);
    assert!(
        eventually(Duration::from_secs(10), || std::net::TcpStream::connect(
            listen
        )
        .is_ok()),
        "the example did not start listening"
    );
    let mut c = Client::connect(listen);
    for i in 0..50 {
        let body = payload(500 + i * 101, i as u64);
        let r = c
            .post("/service/FailoverProxy", &[], &body)
            .expect("FailoverProxy");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.body, body, "request {i}");
    }
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for _ in 0..100 {
        let r = c
            .post("/service/BalancedProxy", &[], b"x")
            .expect("BalancedProxy");
        assert_eq!(r.status, 200, "{}", r.text());
        let name = r.header(NAME_HEADER.as_str()).unwrap_or("?").to_owned();
        *by_name.entry(name).or_default() += 1;
    }
    assert_eq!(by_name.get("a"), Some(&50), "{by_name:?}");
    assert_eq!(by_name.get("b"), Some(&50), "{by_name:?}");
    let json = [("Content-Type", "application/json")];
    for i in 0..3 {
        let r = c
            .post("/service/BreakerProxy", &json, b"{}")
            .expect("BreakerProxy");
        assert_eq!(r.status, 502, "failure {i}: {}", r.text());
    }
    let r = c
        .post("/service/BreakerProxy", &json, b"{}")
        .expect("BreakerProxy");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.text()
            .contains("Endpoint 'down' is unavailable: its circuit breaker is open"),
        "{}",
        r.text()
    );
}

#[test]
fn max_connections_queues_then_answers_503_when_the_queue_is_full() {
    let slow = named_echo("slow", Some(Duration::from_millis(400)));
    let h = engine(&format!(
        "endpoints:\n  one:\n    url: \"http://{a}/e\"\n    max_connections: 1\n    queue: 0\n  queued:\n    url: \"http://{a}/e\"\n    max_connections: 1\n    queue: 1\n    connect_timeout: 3s\nproxies:\n  One:\n    path: /one\n    in:\n      - call: one\n  Queued:\n    path: /queued\n    in:\n      - call: queued\n",
        a = slow.addr
    ));
    let addr = h.http();
    let both = |path: &'static str| {
        let clients: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    let r = Client::connect(addr)
                        .post(path, &[("Content-Type", "application/json")], b"{}")
                        .expect("response");
                    (r.status, r.text())
                })
            })
            .collect();
        let mut out: Vec<(u16, String)> = clients
            .into_iter()
            .map(|c| c.join().expect("client"))
            .collect();
        out.sort();
        out
    };
    let one = both("/one");
    assert_eq!(one[0].0, 200, "{one:?}");
    assert_eq!(one[1].0, 503, "{one:?}");
    assert!(one[1].1.contains("max_connections"), "{one:?}");
    let queued = both("/queued");
    assert_eq!((queued[0].0, queued[1].0), (200, 200), "{queued:?}");
    slow.stop();
}

#[test]
fn validate_refuses_a_url_port_outside_1_to_65535_at_its_line() {
    let dir = temp_dir("badport");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  svc:\n    urls:\n      - \"http://127.0.0.1:8080/ok\"\n      - \"http://127.0.0.1:99999/svc\"\nproxies:\n  P: { path: /p, in: [ { call: svc } ] }\n",
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(":7: endpoints.svc.urls[1]") && err.contains("invalid port '99999'"),
        "{err}"
    );
    assert!(err.contains("c.yaml"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_refuses_an_endpoint_deadline_of_zero_or_not_a_duration_at_its_line() {
    let dir = temp_dir("deadline");
    for (value, what) in [
        ("0s", "endpoints.svc.deadline: must be greater than zero"),
        ("soon", "invalid duration 'soon'"),
    ] {
        let (code, err) = validate_in(
            &dir,
            &format!("listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\nendpoints:\n  svc:\n    url: \"http://127.0.0.1:8080/svc\"\n    deadline: {value}\nproxies:\n  P: {{ path: /p, in: [ {{ call: svc }} ] }}\n"),
        );
        assert_eq!(code, Some(1), "{value}: {err}");
        assert_each_line(&err, &[("c.yaml:6: ", what), ("c.yaml:6: ", "deadline")]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_retry_stopped_by_the_breaker_it_opened_answers_with_the_back_ends_own_status() {
    let (addr, seen) = raw_back_end(|_| Some((503, b"status 503 from the back end".to_vec())));
    let url = format!("http://{addr}/svc");
    let h = engine(&proxy_yaml(&format!(
        "    url: \"{url}\"\n    retries: 2\n    retry_on_status: [503]\n    breaker: {{ failures: 1, suspend: 5s }}\n"
    )));
    let admin = h.admin();
    let mut c = Client::connect(h.http());
    // The first answer opens the breaker: no retry can be sent, and the client gets it.
    let r = c.get("/p").expect("response");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.text(), "status 503 from the back end");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let counter = |name: &str| metric(admin, &format!("{name}{{endpoint=\"svc\"}}"));
    assert_eq!(counter("busbar_endpoint_attempts_total"), Some(1.0));
    assert_eq!(
        counter("busbar_endpoint_retries_total"),
        Some(0.0),
        "nothing was retried"
    );
    assert_eq!(
        metric(
            admin,
            "busbar_endpoint_errors_total{endpoint=\"svc\",kind=\"unavailable\"}"
        ),
        Some(0.0),
        "the back end answered"
    );
    // Now the breaker is open: the answer is busbar's, and says when to come back.
    let r = c.get("/p").expect("response");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.text()
            .contains("Endpoint 'svc' is unavailable: its circuit breaker is open"),
        "{}",
        r.text()
    );
    let after: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((4..=5).contains(&after), "Retry-After {after}");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the open breaker sent nothing"
    );
}

#[test]
fn retries_go_on_until_the_breaker_opens_and_the_last_real_answer_is_kept() {
    let (addr, seen) = raw_back_end(|_| Some((503, b"busy".to_vec())));
    let h = engine(&proxy_yaml(&format!(
        "    url: \"http://{addr}/svc\"\n    retries: 5\n    retry_on_status: [503]\n    breaker: {{ failures: 3, suspend: 5s }}\n"
    )));
    let r = Client::connect(h.http()).get("/p").expect("response");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.text(), "busy");
    // Three answers open the breaker; the retries after it are not sent.
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(
        metric(h.admin(), "busbar_endpoint_retries_total{endpoint=\"svc\"}"),
        Some(2.0)
    );
}

/// A self-signed certificate for localhost that is a CA certificate (basicConstraints
/// CA:TRUE), as `server.pem` and `server.key` in `dir`: what a quick test server often uses.
fn make_self_signed_ca_server(dir: &std::path::Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-keyout",
            "server.key",
            "-out",
            "server.pem",
        ],
    );
}

#[test]
fn a_ca_certificate_used_as_the_servers_own_is_refused_in_words() {
    let dir = temp_dir("selfca");
    make_self_signed_ca_server(&dir);
    let addr = tls_back_end(&dir, false);
    let h = engine(&proxy_yaml(&format!(
        "    url: \"https://localhost:{}/e\"\n    tls: {{ ca: \"{}\" }}\n",
        addr.port(),
        dir.join("server.pem").display()
    )));
    let r = Client::connect(h.http())
        .post("/p", &[("Content-Type", "application/json")], b"{}")
        .expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text().contains(
            "certificate of host localhost rejected: it is a CA certificate, used as the server's own certificate"
        ),
        "{}",
        r.text()
    );
    assert!(!r.text().contains("OtherError"), "{}", r.text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_url_whose_certificate_is_refused_fails_over_to_the_next_and_counts_as_its_failure() {
    let pki = temp_dir("pki-failover");
    make_pki(&pki);
    let good = tls_back_end(&pki, false);
    let rogue = temp_dir("rogue");
    make_self_signed_ca_server(&rogue);
    // Its certificate is not under the endpoint's CA: the handshake fails, nothing is sent.
    let bad = tls_back_end(&rogue, false);
    let bad_url = format!("https://localhost:{}/e", bad.port());
    let h = engine(&proxy_yaml(&format!(
        "    urls: [ \"{bad_url}\", \"https://localhost:{}/e\" ]\n    retries: 2\n    tls: {{ ca: \"{}\" }}\n",
        good.port(),
        pki.join("ca.pem").display()
    )));
    let mut c = Client::connect(h.http());
    for i in 0..4 {
        let r = c
            .post("/p", &[("Content-Type", "application/json")], b"{\"n\":1}")
            .expect("response");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.body, b"{\"n\":1}", "request {i}");
    }
    let admin = h.admin();
    // Round robin sends every other request to the bad URL first.
    assert_eq!(
        metric(admin, "busbar_endpoint_failovers_total{endpoint=\"svc\"}"),
        Some(2.0)
    );
    assert_eq!(
        metric(
            admin,
            &format!("busbar_upstream_failures_total{{endpoint=\"svc\",url=\"{bad_url}\"}}")
        ),
        Some(2.0)
    );
    // A refused certificate is not retried on its own URL: failover is the only way on.
    assert_eq!(
        metric(admin, "busbar_endpoint_retries_total{endpoint=\"svc\"}"),
        Some(0.0)
    );
    let _ = std::fs::remove_dir_all(&pki);
    let _ = std::fs::remove_dir_all(&rogue);
}

#[test]
fn breaker_gauges_show_half_open_once_the_suspension_is_over_without_a_call() {
    let port = closed_port();
    let url = format!("http://{port}/e");
    let h = engine(&proxy_yaml(&format!(
        "    url: \"{url}\"\n    breaker: {{ failures: 1, suspend: 500ms, max_suspend: 5s }}\n"
    )));
    let r = Client::connect(h.http())
        .post("/p", &[("Content-Type", "application/json")], b"{}")
        .expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    let admin = h.admin();
    let endpoint = || metric(admin, "busbar_endpoint_breaker_state{endpoint=\"svc\"}");
    let upstream = || {
        metric(
            admin,
            &format!("busbar_upstream_breaker_state{{endpoint=\"svc\",url=\"{url}\"}}"),
        )
    };
    let opened = Instant::now();
    assert_eq!((endpoint(), upstream()), (Some(1.0), Some(1.0)));
    // No call arrives: the gauges follow the clock.
    assert!(
        eventually(Duration::from_secs(5), || endpoint() == Some(2.0)
            && upstream() == Some(2.0)),
        "endpoint {:?}, URL {:?}",
        endpoint(),
        upstream()
    );
    assert!(opened.elapsed() >= Duration::from_millis(400));
}

#[test]
fn url_attempts_count_only_what_got_past_the_connection_limit() {
    let slow = named_echo("slow", Some(Duration::from_millis(400)));
    let url = format!("http://{}/e", slow.addr);
    let h = engine(&proxy_yaml(&format!(
        "    url: \"{url}\"\n    max_connections: 1\n    queue: 0\n"
    )));
    let addr = h.http();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                Client::connect(addr)
                    .post("/p", &[("Content-Type", "application/json")], b"{}")
                    .expect("response")
                    .status
            })
        })
        .collect();
    let mut statuses: Vec<u16> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    statuses.sort();
    assert_eq!(statuses, vec![200, 503]);
    assert_eq!(
        metric(
            h.admin(),
            &format!("busbar_upstream_attempts_total{{endpoint=\"svc\",url=\"{url}\"}}")
        ),
        Some(1.0),
        "the refused call never went to the URL"
    );
    slow.stop();
}
