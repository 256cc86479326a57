//! `scatter_gather` over real sockets: the example's ScatterGather, and branches that are
//! slow, failing or dead under both failure policies, timeouts, cancellation, a shared body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use busbar_engine::echo::catalog_answer;
use serde_json::Value;

use crate::support::*;

#[test]
fn the_example_aggregates_the_three_services_per_id() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    for (id, raw) in [
        ("42", "42"),
        ("a b", "a%20b"),
        ("\"x\"", "%22x%22"),
        ("é", "%C3%A9"),
        ("P-1000", "P-1000"),
    ] {
        let r = c.get(&format!("/api/product/{raw}")).expect("answer");
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let got: Value = serde_json::from_slice(&r.body).expect("JSON");
        let keys: Vec<&String> = got.as_object().expect("object").keys().collect();
        assert_eq!(keys.len(), 3);
        for kind in ["stock", "price", "reviews"] {
            let want: Value = serde_json::from_slice(
                &catalog_answer(&format!("/{kind}/{raw}")).expect("catalog"),
            )
            .expect("JSON");
            assert_eq!(got[kind], want, "{id} {kind}");
            assert_eq!(got[kind]["id"], id);
        }
    }
    assert_eq!(
        c.post("/api/product/1", &[], b"x").expect("answer").status,
        405
    );
}

/// A back end for `/slow`, `/fail`, `/ok`, `/echo`: counts requests and connections closed
/// before it answered (abandoned calls).
struct Back {
    addr: SocketAddr,
    abandoned: Arc<AtomicUsize>,
}

fn back_end(slow: Duration) -> Back {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let abandoned = Arc::new(AtomicUsize::new(0));
    let count = abandoned.clone();
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let mut len = 0usize;
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
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let (status, out) = if path.starts_with("/slow") {
                        // Wait, watching for the caller hanging up.
                        let s = r.get_mut();
                        let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
                        let until = Instant::now() + slow;
                        let mut byte = [0u8; 1];
                        while Instant::now() < until {
                            match s.read(&mut byte) {
                                Ok(0) => {
                                    count.fetch_add(1, Ordering::SeqCst);
                                    return;
                                }
                                _ => continue,
                            }
                        }
                        let _ = s.set_read_timeout(None);
                        ("200 OK", b"{\"slow\":true}".to_vec())
                    } else if path.starts_with("/fail") {
                        if path.starts_with("/failslow") {
                            std::thread::sleep(Duration::from_millis(300));
                        }
                        ("500 Internal Server Error", b"{\"error\":1}".to_vec())
                    } else if path.starts_with("/notjson") {
                        ("200 OK", b"<html/>".to_vec())
                    } else if path.starts_with("/dup") {
                        ("200 OK", b"{\"a\":1,\"a\":2}".to_vec())
                    } else if path.starts_with("/echo") {
                        (
                            "200 OK",
                            format!(
                                "{{\"len\":{},\"sum\":{}}}",
                                body.len(),
                                body.iter().map(|b| *b as u64).sum::<u64>()
                            )
                            .into_bytes(),
                        )
                    } else {
                        ("200 OK", format!("{{\"path\":\"{path}\"}}").into_bytes())
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        out.len()
                    );
                    let s = r.get_mut();
                    if s.write_all(head.as_bytes())
                        .and_then(|_| s.write_all(&out))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Back { addr, abandoned }
}

fn sg_yaml(back: SocketAddr, dead: SocketAddr, branches: &[(&str, &str)], extra: &str) -> String {
    let mut yaml = format!(
        "endpoints:\n  b: {{ url: \"http://{back}/\", timeout: 10s }}\n  dead: {{ url: \"http://{dead}/\", connect_timeout: 1s }}\nproxies:\n  S:\n    path: /s/{{id}}\n    in:\n      - scatter_gather:\n{extra}          branches:\n"
    );
    for (name, target) in branches {
        let (endpoint, path) = target.split_once(':').unwrap_or(("b", target));
        yaml.push_str(&format!(
            "            - name: {name}\n              steps: [ {{ call: {{ endpoint: {endpoint}, method: GET, path: \"{path}\", body: none }} }} ]\n"
        ));
    }
    yaml
}

fn closed() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

#[test]
fn fail_answers_502_naming_the_branch_and_cancels_the_slow_one() {
    let back = back_end(Duration::from_secs(5));
    let dead = closed();
    // The first failure comes after the slow branch's request reached its back end, so the
    // back end sees the abandoned request's connection close.
    for (failing, why) in [
        ("b:/failslow/{id}", "answered 500"),
        ("dead:/x", "refused"),
        ("b:/notjson", "not JSON"),
        ("b:/dup", "duplicate"),
    ] {
        let yaml = sg_yaml(
            back.addr,
            dead,
            &[("ok", "/ok/{id}"), ("slow", "/slow"), ("bad", failing)],
            "",
        );
        let h = engine(&yaml);
        let before = back.abandoned.load(Ordering::SeqCst);
        let started = Instant::now();
        let r = Client::connect(h.http()).get("/s/7").expect("answer");
        assert_eq!(r.status, 502, "{failing}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.text().contains("Branch 'bad' failed"), "{}", r.text());
        assert!(r.text().contains(why), "{why}: {}", r.text());
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the slow branch was waited for"
        );
        // The slow branch's back-end request was abandoned: its connection closed.
        if failing.contains("failslow") {
            assert!(
                eventually(Duration::from_secs(3), || back
                    .abandoned
                    .load(Ordering::SeqCst)
                    > before),
                "the slow branch was not cancelled"
            );
        }
        assert!(eventually(Duration::from_secs(3), || metric(
            h.admin(),
            "busbar_endpoint_in_flight{endpoint=\"b\"}"
        ) == Some(0.0)));
    }
}

#[test]
fn partial_answers_with_what_came_and_names_what_is_missing() {
    let back = back_end(Duration::from_secs(5));
    let dead = closed();
    let yaml = sg_yaml(
        back.addr,
        dead,
        &[
            ("ok", "/ok/{id}"),
            ("failing", "/fail/{id}"),
            ("gone", "dead:/x"),
            ("slow", "/slow"),
        ],
        "          on_failure: partial\n          branch_timeout: 500ms\n",
    );
    let h = engine(&yaml);
    let r = Client::connect(h.http()).get("/s/a%2Fb").expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-busbar-partial"), Some("failing,gone,slow"));
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(
        v["ok"]["path"], "/ok/a%2Fb",
        "the parameter is one encoded segment"
    );
    assert_eq!(v["failing"]["error"]["status"], 500);
    assert!(
        v["gone"]["error"]["reason"]
            .as_str()
            .is_some_and(|s| s.contains("refused")),
        "{v}"
    );
    assert!(
        v["slow"]["error"]["reason"]
            .as_str()
            .is_some_and(|s| s.contains("500ms")),
        "{v}"
    );
    // Nothing answered at all: 502.
    let yaml = sg_yaml(
        back.addr,
        dead,
        &[("a", "/fail/1"), ("b", "dead:/x")],
        "          on_failure: partial\n",
    );
    let h = engine(&yaml);
    assert_eq!(
        Client::connect(h.http())
            .get("/s/1")
            .expect("answer")
            .status,
        502
    );
}

#[test]
fn the_overall_timeout_is_a_504_naming_the_branches_still_running() {
    let back = back_end(Duration::from_secs(5));
    let yaml = sg_yaml(
        back.addr,
        closed(),
        &[("ok", "/ok/1"), ("slow", "/slow")],
        "          timeout: 300ms\n",
    );
    let h = engine(&yaml);
    let started = Instant::now();
    let r = Client::connect(h.http()).get("/s/1").expect("answer");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        r.text().contains("slow") && !r.text().contains("ok,"),
        "{}",
        r.text()
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn array_results_follow_branch_order_and_every_branch_gets_the_whole_body() {
    let back = back_end(Duration::from_millis(300));
    let mut yaml = format!(
        "endpoints:\n  b: {{ url: \"http://{}/\", timeout: 10s }}\nproxies:\n  S:\n    path: /s\n    in:\n      - scatter_gather:\n          aggregate: array\n          branches:\n",
        back.addr
    );
    yaml.push_str("            - name: first\n              steps: [ { call: { endpoint: b, path: \"/slow\" } } ]\n");
    for i in 0..3 {
        yaml.push_str(&format!(
            "            - name: e{i}\n              steps: [ {{ call: {{ endpoint: b, path: \"/echo\" }} }} ]\n"
        ));
    }
    let h = engine(&yaml);
    let body = payload(1 << 20, 5);
    let sum: u64 = body.iter().map(|b| *b as u64).sum();
    let r = Client::connect(h.http())
        .post("/s", &[], &body)
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(
        v[0],
        serde_json::json!({"slow": true}),
        "the slowest branch stays first"
    );
    for i in 1..4 {
        assert_eq!(
            v[i],
            serde_json::json!({"len": 1 << 20, "sum": sum}),
            "branch {i}"
        );
    }
}
