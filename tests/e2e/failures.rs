use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use busbar_engine::echo::EchoOptions;

use crate::support::*;

const SOAP11: (&str, &str) = ("Content-Type", "text/xml; charset=UTF-8");

fn closed_port() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

#[test]
fn back_end_down_gives_a_soap_fault_naming_the_cause() {
    let h = engine(&direct_proxy_yaml(closed_port(), "5s"));
    let r = Client::connect(h.http())
        .post("/service/DirectProxy", &[SOAP11], b"<x/>")
        .expect("response");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("text/xml; charset=UTF-8"));
    let t = r.text();
    assert!(t.contains("<faultcode>soapenv:Server</faultcode>"), "{t}");
    assert!(t.contains("Endpoint 'echo' refused the connection"), "{t}");
    let refused = metric(
        h.admin(),
        "busbar_endpoint_errors_total{endpoint=\"echo\",kind=\"connect_refused\"}",
    );
    assert_eq!(refused, Some(1.0));
}

#[test]
fn back_end_down_gives_a_json_problem_with_502_to_json_clients() {
    let h = engine(&direct_proxy_yaml(closed_port(), "5s"));
    let r = Client::connect(h.http())
        .post(
            "/service/DirectProxy",
            &[("Content-Type", "application/json")],
            b"{}",
        )
        .expect("response");
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.text().contains("\"status\":502"));
}

/// A back end whose name does not resolve: the answer says why it could not be reached, not
/// only that it could not.
#[test]
fn a_back_end_name_that_does_not_resolve_is_a_502_that_says_so() {
    let h = engine(
        "endpoints:\n  gone:\n    url: \"http://no-such-host.invalid:9/x\"\nproxies:\n  P:\n    path: /p\n    in:\n      - call: gone\n",
    );
    let r = Client::connect(h.http())
        .post("/p", &[("Content-Type", "application/json")], b"{}")
        .expect("response");
    assert_eq!(r.status, 502, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("Endpoint 'gone' could not be reached (") && text.contains("lookup"),
        "{text}"
    );
}

#[test]
fn slow_back_end_times_out_within_the_configured_timeout() {
    let echo = echo(EchoOptions {
        delay: Some(Duration::from_secs(3)),
        ..Default::default()
    });
    let h = engine(&direct_proxy_yaml(echo.addr, "300ms"));
    let start = Instant::now();
    let r = Client::connect(h.http())
        .post("/service/DirectProxy", &[SOAP11], b"<x/>")
        .expect("response");
    let took = start.elapsed();
    assert_eq!(r.status, 500);
    assert!(r.text().contains("did not answer within"), "{}", r.text());
    assert!(took < Duration::from_secs(2), "took {took:?}");
    echo.stop();
}

/// A back end that announces `announced` bytes, sends `sent`, then closes.
fn truncating_back_end(announced: usize, sent: usize) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in l.incoming().take(4) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {announced}\r\n\r\n"
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&vec![b'a'; sent]);
            let _ = s.flush();
            drop(s);
        }
    });
    addr
}

#[test]
fn back_end_closing_mid_body_never_looks_complete_to_the_client() {
    let backend = truncating_back_end(100_000, 30_000);
    let h = engine(&direct_proxy_yaml(backend, "5s"));
    let mut c = Client::connect(h.http());
    let result = c.post("/service/DirectProxy", &[SOAP11], b"<x/>");
    match result {
        Err(_) => {}
        Ok(r) => assert!(
            r.status != 200 || r.body.len() != 100_000,
            "a truncated back-end body was delivered as complete"
        ),
    }
}

#[test]
fn client_aborting_mid_upload_is_cleaned_up_and_the_proxy_keeps_serving() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "5s"));
    {
        let mut c = Client::connect(h.http());
        c.send_raw(
            b"POST /service/DirectProxy HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n",
        );
        c.send_raw(&payload(20_000, 1));
        std::thread::sleep(Duration::from_millis(100));
    }
    let admin = h.admin();
    assert!(
        eventually(Duration::from_secs(5), || {
            metric(admin, "busbar_proxy_in_flight{proxy=\"DirectProxy\"}") == Some(0.0)
                && metric(admin, "busbar_endpoint_in_flight{endpoint=\"echo\"}") == Some(0.0)
        }),
        "the aborted exchange must end, on both sides"
    );
    let body = payload(3000, 2);
    let r = Client::connect(h.http())
        .post("/service/DirectProxy", &[], &body)
        .expect("response");
    assert_eq!(r.body, body);
    echo.stop();
}

#[test]
fn malformed_requests_get_400_and_oversize_headers_431() {
    let echo = echo(EchoOptions::default());
    let h = engine(&direct_proxy_yaml(echo.addr, "5s"));
    let mut c = Client::connect(h.http());
    c.send_raw(b"THIS IS NOT HTTP\r\n\r\n");
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 400);

    let mut c = Client::connect(h.http());
    let big = "x".repeat(100_000);
    c.send_raw(
        format!("GET /service/DirectProxy HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    );
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 431);
    echo.stop();
}

#[test]
fn fault_step_answers_in_the_request_soap_version_or_json() {
    let h = engine(
        "proxies:\n  F:\n    path: /f\n    in:\n      - fault: { status: 500, reason: \"First order must be for the symbol IBM\" }\n",
    );
    let r = Client::connect(h.http())
        .post("/f", &[SOAP11], b"<x/>")
        .expect("soap11");
    assert_eq!(r.status, 500);
    assert!(r
        .text()
        .contains("<faultstring>First order must be for the symbol IBM</faultstring>"));
    let r = Client::connect(h.http())
        .post(
            "/f",
            &[("Content-Type", "application/soap+xml; charset=utf-8")],
            b"<x/>",
        )
        .expect("soap12");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("http://www.w3.org/2003/05/soap-envelope"));
    assert!(r
        .text()
        .contains("<env:Text xml:lang=\"en\">First order must be for the symbol IBM</env:Text>"));
    let r = Client::connect(h.http())
        .post("/f", &[("Content-Type", "application/json")], b"{}")
        .expect("json");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
}

#[test]
fn unknown_paths_get_404_and_wrong_methods_405() {
    let h =
        engine("proxies:\n  P:\n    path: /p\n    methods: [POST]\n    in:\n      - respond: {}\n");
    let r = Client::connect(h.http()).get("/nope").expect("404");
    assert_eq!(r.status, 404);
    let r = Client::connect(h.http()).get("/p").expect("405");
    assert_eq!(r.status, 405);
    let r = Client::connect(h.http())
        .post("/p", &[], b"back")
        .expect("200");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"back");
}

#[test]
fn headers_are_set_and_removed_on_the_right_message() {
    let echo = echo(EchoOptions::default());
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/e\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - remove_header: x-secret\n      - call: echo\n    out:\n      - set_header: {{ name: x-served-by, value: busbar }}\n",
        echo.addr
    ));
    let r = Client::connect(h.http())
        .post("/p", &[("X-Secret", "s")], b"b")
        .expect("resp");
    assert_eq!(r.header("x-served-by"), Some("busbar"));
    echo.stop();
}
