use crate::support::*;

#[test]
fn admin_serves_health_readiness_metrics_and_redacted_config() {
    let h = engine(
        "endpoints:\n  e: { url: \"http://user:hunter2@127.0.0.1:9/x\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n",
    );
    let mut c = Client::connect(h.admin());
    assert_eq!(c.get("/healthz").expect("healthz").status, 200);
    assert_eq!(c.get("/readyz").expect("readyz").status, 200);
    Client::connect(h.http())
        .post("/p", &[], b"x")
        .expect("request");
    Client::connect(h.http())
        .post_chunked("/p", b"chunked!", 3)
        .expect("chunked request");
    let m = c.get("/metrics").expect("metrics").text();
    for line in [
        "busbar_proxy_requests_total{proxy=\"P\"} 2",
        "busbar_proxy_latency_seconds_count{proxy=\"P\"} 2",
        "busbar_proxy_received_bytes_total{proxy=\"P\"} 9",
        "busbar_proxy_sent_bytes_total{proxy=\"P\"} 9",
        "busbar_step_requests_total{step=\"proxies.P.in[0].respond\"} 2",
        "busbar_step_latency_seconds_count{step=\"proxies.P.in[0].respond\"} 2",
    ] {
        assert!(m.contains(line), "missing {line}:\n{m}");
    }
    let cfg = c.get("/config").expect("config").text();
    assert!(cfg.contains("<redacted>@127.0.0.1:9"), "{cfg}");
    assert!(!cfg.contains("hunter2"), "{cfg}");
}

#[test]
fn a_broken_reload_keeps_the_old_config_serving_and_says_why() {
    let h = engine("proxies:\n  P:\n    path: /p\n    in:\n      - respond: { body: old }\n");
    let good = std::fs::read_to_string(&h.config).expect("read");
    std::fs::write(
        &h.config,
        good.replace("respond: { body: old }", "call: nowhere"),
    )
    .expect("write");
    let mut req = Client::connect(h.admin());
    req.send_raw(b"POST /reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    let r = req.read_response().expect("reload answer");
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("proxies.P.in[0].call: unknown endpoint 'nowhere'"),
        "{}",
        r.text()
    );
    let r = Client::connect(h.http())
        .post("/p", &[], b"")
        .expect("still served");
    assert_eq!(r.body, b"old");
    std::fs::write(&h.config, good.replace("body: old", "body: new")).expect("write");
    let mut req = Client::connect(h.admin());
    req.send_raw(b"POST /reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(req.read_response().expect("reload").status, 200);
    let r = Client::connect(h.http())
        .post("/p", &[], b"")
        .expect("new config");
    assert_eq!(r.body, b"new");
}

#[test]
fn config_on_the_admin_api_shows_no_secret_of_any_kind() {
    let k = test_keys().display().to_string();
    let h = engine(&format!(
        "endpoints:\n  e: {{ url: \"http://carol:endpoint-pw-7@127.0.0.1:9/x\" }}\n  q: {{ url: \"http://127.0.0.1:9/q?region=eu&api_key=query-key-8\" }}\nproxies:\n  H:\n    path: /h\n    in:\n      - set_header: {{ name: x-auth, value: header-auth-9 }}\n      - set_header: {{ name: x-region, value: eu-west }}\n      - call: q\n  S:\n    path: /s\n    in:\n      - wsse_verify:\n          require: [username_token, encryption]\n          decrypt_key: {{ pkcs12: \"{k}/server.p12\", password: server-pass }}\n          users: {{ alice: \"alice-pw-1\", bob: \"bob-pw-2\" }}\n      - call: e\n    out:\n      - wsse_secure:\n          sign: {{ key: \"{k}/client.p12\", password: client-pass }}\n"
    ));
    let r = Client::connect(h.admin()).get("/config").expect("config");
    assert_eq!(r.status, 200);
    let cfg = r.text();
    for secret in [
        "server-pass",
        "client-pass",
        "alice-pw-1",
        "bob-pw-2",
        "endpoint-pw-7",
        "carol",
        "query-key-8",
        "header-auth-9",
    ] {
        assert!(!cfg.contains(secret), "{secret} shows in /config:\n{cfg}");
    }
    // /config is pretty-printed JSON: one `"key": value` per line.
    for shown in [
        "\"alice\": \"<redacted>\"",
        "\"bob\": \"<redacted>\"",
        // The user name goes with the password: the whole user-info is replaced.
        "\"url\": \"http://<redacted>@127.0.0.1:9/x\"",
        // A query parameter naming a credential; the others are shown.
        "\"url\": \"http://127.0.0.1:9/q?region=eu&api_key=<redacted>\"",
        "\"value\": \"eu-west\"",
    ] {
        assert!(cfg.contains(shown), "no {shown} in /config:\n{cfg}");
    }
    // decrypt_key.password and sign.password.
    assert_eq!(
        cfg.matches("\"password\": \"<redacted>\"").count(),
        2,
        "{cfg}"
    );
}

/// Problems with `text` as the Prometheus text format (0.0.4) sees it: every sample line is a
/// metric name, optional labels whose values escape `\`, `"` and line feeds, and a number.
fn exposition_problems(text: &str) -> Vec<String> {
    fn sample(line: &str) -> Result<(), String> {
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(line.len());
        if name_end == 0 {
            return Err("no metric name".into());
        }
        let mut rest = &line[name_end..];
        if let Some(labels) = rest.strip_prefix('{') {
            let mut chars = labels.char_indices();
            loop {
                let mut name = String::new();
                let mut end = None;
                for (i, c) in chars.by_ref() {
                    match c {
                        '=' => break,
                        '}' if name.is_empty() => {
                            end = Some(i);
                            break;
                        }
                        c if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
                        c => return Err(format!("{c:?} in a label name")),
                    }
                }
                if let Some(i) = end {
                    rest = &labels[i + 1..];
                    break;
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(format!("label {name} has no quoted value"));
                }
                loop {
                    match chars.next() {
                        None => return Err("unterminated label value".into()),
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\' | '"' | 'n')) => {}
                            other => return Err(format!("bad escape {other:?}")),
                        },
                        Some((_, '"')) => break,
                        Some((_, '\n')) => return Err("line feed in a label value".into()),
                        Some(_) => {}
                    }
                }
                match chars.next() {
                    Some((_, ',')) => {}
                    Some((i, '}')) => {
                        rest = &labels[i + 1..];
                        break;
                    }
                    other => return Err(format!("{other:?} after a label value")),
                }
            }
        }
        let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
        match value {
            "+Inf" | "-Inf" | "NaN" => Ok(()),
            v => v
                .parse::<f64>()
                .map(|_| ())
                .map_err(|_| format!("value {v:?}")),
        }
    }
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| sample(l).err().map(|e| format!("{e}: {l}")))
        .collect()
}

#[test]
fn metrics_escape_quotes_and_backslashes_in_database_names() {
    let h = engine("databases:\n  \"d\\\"b\\\\\": { path: w.db }\n");
    let m = Client::connect(h.admin())
        .get("/metrics")
        .expect("metrics")
        .text();
    let problems = exposition_problems(&m);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        m.contains("busbar_database_pool_size{database=\"d\\\"b\\\\\"} "),
        "{m}"
    );
}

#[test]
fn head_on_admin_routes_answers_like_get_without_a_body() {
    use std::io::BufRead;
    let h = engine("proxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n");
    for path in ["/healthz", "/readyz", "/metrics", "/config"] {
        let mut c = Client::connect(h.admin());
        // A GET right behind the HEAD on the same connection: a body sent for the HEAD would
        // be read as the GET's answer.
        c.send_raw(
            format!(
                "HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            )
            .as_bytes(),
        );
        let mut status = String::new();
        c.stream.read_line(&mut status).expect("status line");
        assert!(status.starts_with("HTTP/1.1 200 "), "HEAD {path}: {status}");
        let mut length = None;
        loop {
            let mut line = String::new();
            c.stream.read_line(&mut line).expect("header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            }
        }
        assert!(length.is_some_and(|n| n > 0), "HEAD {path}: {length:?}");
        let next = c.read_response().expect("the GET's answer");
        assert_eq!(
            (next.status, next.text().as_str()),
            (200, "ok\n"),
            "after HEAD {path}"
        );
    }
}

/// A method a route does not take gets 405 with the methods it does take (RFC 9110 §15.5.6).
#[test]
fn wrong_methods_on_admin_routes_get_405_with_allow() {
    let h = engine("proxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n");
    for (method, path, allow) in [
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
        ("PUT", "/config", "GET, HEAD"),
        ("POST", "/readyz", "GET, HEAD"),
        ("GET", "/reload", "POST"),
        ("POST", "/processes", "GET, HEAD"),
        ("PUT", "/processes/instances/7", "GET, HEAD, DELETE"),
        ("GET", "/processes/instances/7/retry", "POST"),
    ] {
        let mut c = Client::connect(h.admin());
        c.send_raw(
            format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        let r = c.read_response().expect("answer");
        assert_eq!(
            (r.status, r.header("allow")),
            (405, Some(allow)),
            "{method} {path}"
        );
    }
}
