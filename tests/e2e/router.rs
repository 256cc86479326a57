//! The router over real sockets: path parameters, prefixes, precedence, 404 and 405 with
//! `Allow`, proxies split by method; an engine built in-process; named echo back ends.

use std::net::SocketAddr;

use busbar_config::LoadedConfig;
use busbar_engine::engine::Listeners;
use busbar_engine::Engine;

use crate::support::*;

/// Sends `METHOD path` with an empty body on a new connection.
fn request(addr: SocketAddr, method: &str, path: &str) -> Resp {
    let mut c = Client::connect(addr);
    c.send_raw(
        format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    );
    c.read_response().expect("response")
}

fn answering(name: &str, path: &str, extra: &str, body: &str) -> String {
    format!(
        "  {name}:\n    path: \"{path}\"\n{extra}    in:\n      - respond: {{ body: {body} }}\n"
    )
}

#[test]
fn a_parameter_matches_exactly_one_segment() {
    let h = engine(&format!(
        "proxies:\n{}",
        answering("Product", "/api/product/{id}", "", "product")
    ));
    let r = request(h.http(), "GET", "/api/product/42");
    assert_eq!((r.status, r.text().as_str()), (200, "product"));
    let r = request(h.http(), "GET", "/api/product/caf%C3%A9?x=1");
    assert_eq!((r.status, r.text().as_str()), (200, "product"));
    for path in [
        "/api/product/",
        "/api/product",
        "/api/product/42/x",
        "/api/product/..",
    ] {
        assert_eq!(request(h.http(), "GET", path).status, 404, "{path}");
    }
}

#[test]
fn a_parameter_that_is_not_utf_8_is_a_400_naming_it() {
    let h = engine(&format!(
        "proxies:\n{}",
        answering("ByName", "/byname/{name}", "", "found")
    ));
    for path in ["/byname/%FF", "/byname/caf%C3", "/byname/%ED%A0%80"] {
        let r = request(h.http(), "GET", path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.text().contains("path parameter 'name'"), "{}", r.text());
    }
    let r = request(h.http(), "GET", "/byname/caf%C3%A9");
    assert_eq!((r.status, r.text().as_str()), (200, "found"));
}

#[test]
fn exact_paths_beat_parameters_and_parameters_beat_prefixes() {
    let h = engine(&format!(
        "proxies:\n{}{}{}{}",
        answering("Prefix", "/api/orders/*", "", "prefix"),
        answering("Param", "/api/orders/{id}", "", "param"),
        answering("Exact", "/api/orders/special", "", "exact"),
        answering("Root", "/*", "", "root"),
    ));
    for (path, want) in [
        ("/api/orders/special", "exact"),
        ("/api/orders/7", "param"),
        ("/api/orders/7/lines", "prefix"),
        ("/api/orders/", "prefix"),
        ("/api/orders", "root"),
        ("/elsewhere", "root"),
    ] {
        let r = request(h.http(), "POST", path);
        assert_eq!((r.status, r.text().as_str()), (200, want), "{path}");
    }
}

#[test]
fn two_proxies_on_one_pattern_split_by_method_and_others_get_405_with_allow() {
    let h = engine(&format!(
        "proxies:\n{}{}",
        answering("Get", "/api/customers/{id}", "    methods: [GET]\n", "got"),
        answering("Put", "/api/customers/{key}", "    methods: [PUT]\n", "put"),
    ));
    let r = request(h.http(), "GET", "/api/customers/1");
    assert_eq!((r.status, r.text().as_str()), (200, "got"));
    let r = request(h.http(), "PUT", "/api/customers/1");
    assert_eq!((r.status, r.text().as_str()), (200, "put"));
    let r = request(h.http(), "DELETE", "/api/customers/1");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, PUT"));
    // HEAD is answered where GET is (RFC 9110 §9.3.2), without the body: the whole answer is
    // its head.
    let mut s = std::net::TcpStream::connect(h.http()).expect("connect");
    std::io::Write::write_all(
        &mut s,
        b"HEAD /api/customers/1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .expect("send");
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "a body came: {answer}");
    assert!(!answer.contains("got"), "{answer}");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let r = request(h.http(), "DELETE", "/api/customers");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("allow"), None);
}

#[test]
fn an_engine_built_in_process_serves_a_port_0_listener_until_its_shutdown_signal() {
    let yaml = "workers: 2\nlog: { level: warn }\nadmin: { enabled: false }\nshutdown: { drain_timeout: 5s }\nlisteners:\n  http: { bind: \"127.0.0.1:1\" }\nproxies:\n  P:\n    path: /hello/{name}\n    in:\n      - respond: { body: hi }\n";
    let config = busbar_config::parse(yaml, "inline.yaml", |_| None).expect("parse");
    let loaded = LoadedConfig {
        file: "inline.yaml".into(),
        base_dir: ".".into(),
        config,
    };
    let engine = Engine::build(loaded).expect("build");
    // The config's own address (port 1) is never bound: the test brings its socket.
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    let mut listeners = Listeners::default();
    listeners.listeners.insert("http".into(), vec![socket]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = engine
        .serve(listeners, async {
            let _ = stopped.await;
        })
        .expect("serve");
    assert_eq!(running.listeners["http"], addr);
    assert_eq!(running.admin, None);
    // Two workers share the one socket: several connections all get answers.
    for _ in 0..4 {
        let r = request(addr, "GET", "/hello/world");
        assert_eq!((r.status, r.text().as_str()), (200, "hi"));
    }
    stop.send(())
        .expect("engine listening for its shutdown signal");
    running.wait();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the socket closes when the engine stops"
    );
}

#[test]
fn an_in_process_build_reports_every_config_error() {
    let yaml = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /a/{x}/{x}\n    in:\n      - call: nowhere\n";
    let config = busbar_config::parse(yaml, "inline.yaml", |_| None).expect("parse");
    let loaded = LoadedConfig {
        file: "inline.yaml".into(),
        base_dir: ".".into(),
        config,
    };
    let errors = Engine::build(loaded).expect_err("invalid").to_string();
    assert!(
        errors.contains("proxies.P.path: path '/a/{x}/{x}': parameter 'x' appears twice"),
        "{errors}"
    );
    assert!(
        errors.contains("proxies.P.in[0].call: unknown endpoint 'nowhere'"),
        "{errors}"
    );
}

#[test]
fn named_echo_back_ends_answer_with_their_name() {
    let h = engine(
        "echoes:\n  a: { bind: \"127.0.0.1:0\", delay: 5ms }\n  b: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n",
    );
    let echoes = &h.engine().echoes;
    assert_eq!(echoes.len(), 2, "{echoes:?}");
    for (name, addr) in echoes {
        let r = Client::connect(*addr)
            .post("/any", &[("Content-Type", "text/plain")], b"ping")
            .expect("echo");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-echo-name"), Some(name.as_str()));
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.body, b"ping");
    }
    assert_ne!(echoes["a"], echoes["b"]);
}

#[test]
fn the_single_echo_sends_no_name_unless_given_one() {
    let h = engine("echo: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n");
    let addr = h.engine().echo.expect("echo");
    let r = Client::connect(addr).post("/x", &[], b"x").expect("echo");
    assert_eq!(r.header("x-echo-name"), None);
    let h = engine("echo: { bind: \"127.0.0.1:0\", name: solo }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {}\n");
    let addr = h.engine().echo.expect("echo");
    let r = Client::connect(addr).post("/x", &[], b"x").expect("echo");
    assert_eq!(r.header("x-echo-name"), Some("solo"));
}

#[test]
fn a_reload_that_moves_a_named_echo_is_refused_until_a_restart() {
    let h = engine(
        "echoes:\n  a: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: { body: old }\n",
    );
    let good = std::fs::read_to_string(&h.config).expect("read");
    std::fs::write(
        &h.config,
        good.replace(
            "a: { bind: \"127.0.0.1:0\" }",
            "a: { bind: \"127.0.0.1:1\" }",
        )
        .replace("body: old", "body: new"),
    )
    .expect("write");
    let err = h.engine().reload().expect_err("refused").to_string();
    assert!(err.contains("echoes"), "{err}");
    let r = request(h.http(), "GET", "/p");
    assert_eq!(r.text(), "old");
    let a = h.engine().echoes["a"];
    let r = Client::connect(a).post("/x", &[], b"still").expect("echo");
    assert_eq!(r.body, b"still");
}
