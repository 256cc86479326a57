use busbar_bench::payload::{buy_stocks, Variant};
use busbar_engine::echo::EchoOptions;

use crate::support::*;

const SOAP11: (&str, &str) = ("Content-Type", "text/xml; charset=UTF-8");
const ROUTING: (&str, &str) = ("routing", "xadmin;server1;community#1.0##");

fn cbr_yaml(echo: std::net::SocketAddr) -> String {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/esb-benchmark.yaml"
    ))
    .expect("example");
    // The example's namespaces and proxies, pointed at this test's echo back end.
    let from = example.find("namespaces:").expect("namespaces");
    let xslt_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/xslt/");
    example[from..]
        .replace("${BUSBAR_ECHO:-127.0.0.1:9000}", &echo.to_string())
        .replace("xslt/reverse-", &format!("{xslt_dir}reverse-"))
        .replace(
            "${BUSBAR_KEYS:-../target/keys}",
            &test_keys().display().to_string(),
        )
}

fn sizes() -> Vec<usize> {
    let mut v = vec![
        512,
        1024,
        4095,
        4096,
        4097,
        8191,
        8192,
        8193,
        16383,
        16384,
        16385,
        65535,
        65536,
        65537,
        102_400,
        1 << 20,
    ];
    v.extend([16384 - 104, 16384 + 104]);
    v
}

#[test]
fn cbr_proxies_forward_matching_requests_byte_for_byte_at_every_size_and_split() {
    let echo = echo(EchoOptions::default());
    let h = engine(&cbr_yaml(echo.addr));
    let mut c = Client::connect(h.http());
    for size in sizes() {
        let body = buy_stocks(size, Variant::Plain).expect("payload");
        for proxy in ["CBRProxy", "CBRSOAPHeaderProxy", "CBRTransportHeaderProxy"] {
            let path = format!("/service/{proxy}");
            let r = c.post(&path, &[SOAP11, ROUTING], &body).expect("response");
            assert_eq!(r.status, 200, "{proxy} {size}: {}", r.text());
            assert_eq!(sha256(&r.body), sha256(&body), "{proxy} {size}");
            for chunk in [1usize, 7, 1000, 16384] {
                if size > 70_000 && chunk < 1000 {
                    continue;
                }
                let mut cc = Client::connect(h.http());
                let r = cc.post_chunked(&path, &body, chunk).expect("chunked");
                if proxy == "CBRTransportHeaderProxy" {
                    assert_eq!(r.status, 500, "no routing header on the chunked request");
                    continue;
                }
                assert_eq!(r.status, 200, "{proxy} {size} chunk {chunk}: {}", r.text());
                assert_eq!(
                    sha256(&r.body),
                    sha256(&body),
                    "{proxy} {size} chunk {chunk}"
                );
            }
        }
    }
    echo.stop();
}

#[test]
fn cbr_negative_cases_get_the_exact_soap_faults() {
    let echo = echo(EchoOptions::default());
    let h = engine(&cbr_yaml(echo.addr));
    let non_ibm = buy_stocks(1024, Variant::NonIbm).expect("payload");
    let r = Client::connect(h.http())
        .post("/service/CBRProxy", &[SOAP11], &non_ibm)
        .expect("r");
    assert_eq!(r.status, 500);
    assert!(
        r.text()
            .contains("<faultstring>First order must be for the symbol IBM</faultstring>"),
        "{}",
        r.text()
    );

    for variant in [Variant::NoSoapHeader, Variant::BadSoapHeader] {
        let body = buy_stocks(1024, variant).expect("payload");
        let r = Client::connect(h.http())
            .post("/service/CBRSOAPHeaderProxy", &[SOAP11], &body)
            .expect("r");
        assert_eq!(r.status, 500);
        assert!(r
            .text()
            .contains("<faultstring>Invalid routing header</faultstring>"));
    }
    let body = buy_stocks(1024, Variant::Plain).expect("payload");
    for headers in [vec![SOAP11], vec![SOAP11, ("routing", "wrong")]] {
        let r = Client::connect(h.http())
            .post("/service/CBRTransportHeaderProxy", &headers, &body)
            .expect("r");
        assert_eq!(r.status, 500);
        assert!(r
            .text()
            .contains("<faultstring>Invalid routing header</faultstring>"));
    }
    echo.stop();
}

#[test]
fn malformed_and_doctype_xml_get_client_faults_and_never_reach_the_back_end_complete() {
    let echo = echo(EchoOptions::default());
    let whole = cbr_yaml(echo.addr).replace(
        "    path: /service/CBRProxy\n",
        "    path: /service/CBRProxy\n    xml_check: whole\n",
    );
    assert!(whole.contains("xml_check: whole"));
    let h = engine(&whole);
    let cases: [&[u8]; 3] = [
        b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><a></b>",
        b"<!DOCTYPE x [<!ENTITY e \"boom\">]><x>&e;</x>",
        b"not xml at all",
    ];
    for body in cases {
        let r = Client::connect(h.http())
            .post("/service/CBRProxy", &[SOAP11], body)
            .expect("r");
        assert_eq!(r.status, 500, "{}", r.text());
        assert!(
            r.text().contains("<faultcode>soapenv:Client</faultcode>"),
            "{}",
            r.text()
        );
    }
    // With `xml_check: whole`: decided early (IBM first), but the tail is malformed: the
    // forwarded request is aborted, so the client gets no 200.
    let mut good = buy_stocks(10_240, Variant::Plain).expect("payload");
    let n = good.len();
    good[n - 20..].copy_from_slice(b"</wrong></wrong></x>");
    let r = Client::connect(h.http()).post("/service/CBRProxy", &[SOAP11], &good);
    if let Ok(r) = r {
        assert_ne!(
            r.status, 200,
            "a malformed document was forwarded and answered"
        );
    }
    let requests = metric(
        h.admin(),
        "busbar_endpoint_requests_total{endpoint=\"echo\"}",
    )
    .unwrap_or(0.0);
    // Whether it started depends on how much of the body the first read brought: with the
    // malformed tail already read, no call starts at all.
    assert!(
        requests <= 1.0,
        "only the early-decided request may have started a call: {requests}"
    );
    echo.stop();
}

#[test]
fn full_xpath_conditions_use_libxml2_and_agree_with_streaming_ones() {
    let echo = echo(EchoOptions::default());
    let h = engine(&format!(
        "namespaces: {{ m: \"http://services.samples/xsd\" }}\nendpoints:\n  echo: {{ url: \"http://{}/e\" }}\nproxies:\n  Full:\n    path: /full\n    in:\n      - route:\n          - when: {{ xpath: \"count(//order) > 5 and //m:buyStocks/order[1]/symbol = 'IBM'\" }}\n            then: [ {{ call: echo }} ]\n          - otherwise: [ {{ fault: {{ status: 500, reason: few }} }} ]\n",
        echo.addr
    ));
    let many = buy_stocks(1024, Variant::Plain).expect("7 orders");
    let r = Client::connect(h.http())
        .post("/full", &[SOAP11], &many)
        .expect("r");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, many);
    let few = buy_stocks(512, Variant::Plain).expect("2 orders");
    let r = Client::connect(h.http())
        .post("/full", &[SOAP11], &few)
        .expect("r");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("<faultstring>few</faultstring>"));
    echo.stop();
}

#[test]
fn bad_xpath_fails_validation_with_its_path() {
    let dir = temp_dir("badxpath");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - route:\n          - when: { xpath: \"//q:order\" }\n            then: [ { respond: {} } ]\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains(":8: proxies.P.in[0].route[0].when.xpath:"),
        "{err}"
    );
    assert!(err.contains('q'), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_refuses_xpath_functions_and_variables_no_message_could_evaluate() {
    let dir = temp_dir("xpath-names");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - route:\n          - when: { xpath: \"nosuchfn(//a)\" }\n            then: [ { respond: {} } ]\n          - when: { xpath: \"$undefined\" }\n            then: [ { respond: {} } ]\n          - when: { xpath: \"false() and current()\" }\n            then: [ { respond: {} } ]\n          - when: { xpath: \"count(//a) > 1 and not(//b[normalize-space()])\" }\n            then: [ { respond: {} } ]\n",
    );
    assert_eq!(code, Some(1), "{err}");
    assert_each_line(
        &err,
        &[
            (
                ":8: proxies.P.in[0].route[0].when.xpath:",
                "unknown function 'nosuchfn()'",
            ),
            (
                ":10: proxies.P.in[0].route[1].when.xpath:",
                "undefined variable '$undefined'",
            ),
            (
                ":12: proxies.P.in[0].route[2].when.xpath:",
                "'current()' (an XSLT function",
            ),
        ],
    );
    assert!(
        err.contains("3 problem(s)"),
        "the core functions pass:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_reports_each_bad_namespace_binding_at_its_line_beside_other_errors() {
    let dir = temp_dir("ns-bindings");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nnamespaces:\n  ok: \"urn:ok\"\n  \"1a\": \"urn:bad\"\n  e: \"\"\nproxies:\n  A:\n    path: /a\n    namespaces:\n      xmlns: \"urn:x\"\n    in:\n      - route:\n          - when: { xpath: \"/zz:a\" }\n            then: [ { respond: {} } ]\n          - when: { xpath: \"count(/ok:a) = 1\" }\n            then: [ { respond: {} } ]\n",
    );
    assert_eq!(code, Some(1), "{err}");
    assert_each_line(
        &err,
        &[
            (":5: namespaces.1a:", "'1a'"),
            (":6: namespaces.e:", "empty"),
            (":11: proxies.A.namespaces.xmlns:", "'xmlns'"),
            (":14: proxies.A.in[0].route[0].when.xpath:", "zz"),
        ],
    );
    assert!(
        err.contains("4 problem(s)"),
        "the good binding serves:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_xpath_that_fails_on_a_well_formed_message_is_a_server_fault() {
    // A path step from a number compiles, but no document can evaluate it.
    let h = engine(
        "proxies:\n  P:\n    path: /p\n    in:\n      - route:\n          - when: { xpath: \"(1)/a\" }\n            then: [ { respond: { body: yes } } ]\n      - respond: { body: no }\n",
    );
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a/>")
        .expect("r");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("<faultcode>soapenv:Server</faultcode>"),
        "{}",
        r.text()
    );
    let r = Client::connect(h.http())
        .post("/p", &[("Content-Type", "application/json")], b"<a/>")
        .expect("r");
    assert_eq!(r.status, 500, "{}", r.text());
    // A message that is not XML is still the client's.
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a>")
        .expect("r");
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>"),
        "{}",
        r.text()
    );
}

#[test]
fn by_default_the_unread_rest_of_a_routed_document_streams_on_untouched() {
    let echo = echo(EchoOptions::default());
    let h = engine(&cbr_yaml(echo.addr));
    // The decision needs only the first order; the malformed tail is not parsed, and the
    // back end gets the bytes exactly as sent.
    let mut body = buy_stocks(10_240, Variant::Plain).expect("payload");
    let n = body.len();
    body[n - 20..].copy_from_slice(b"</wrong></wrong></x>");
    let r = Client::connect(h.http())
        .post("/service/CBRProxy", &[SOAP11], &body)
        .expect("r");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, body);
    echo.stop();
}

#[test]
fn a_full_xpath_route_refuses_an_element_with_fifty_thousand_attributes() {
    let (backend, seen) = recording_back_end();
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/e\" }}\nproxies:\n  Full:\n    path: /full\n    in:\n      - route:\n          - when: {{ xpath: \"count(//order) > 1\" }}\n            then: [ {{ call: echo }} ]\n          - otherwise: [ {{ fault: {{ status: 500, reason: few }} }} ]\n"
    ));
    let body = crate::xslt::wide_element_request(50_000);
    let r = Client::connect(h.http())
        .post("/full", &[SOAP11], &body)
        .expect("r");
    assert_eq!(r.status, 500, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("<faultcode>soapenv:Client</faultcode>"),
        "{text}"
    );
    assert!(
        text.contains("XML limit exceeded: the document exceeds the limit of 256 attributes"),
        "{text}"
    );
    assert!(seen.lock().expect("lock").is_empty(), "forwarded");
}

#[test]
fn a_nul_character_after_the_root_is_refused_by_full_xpath_routes_and_never_forwarded() {
    // libxml2 takes a NUL for the end of its input; the bytes after it must not ride along
    // unchecked to the back end.
    let (backend, seen) = recording_back_end();
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/e\" }}\nproxies:\n  Full:\n    path: /full\n    in:\n      - route:\n          - when: {{ xpath: \"//order[1]/symbol = 'IBM' and true()\" }}\n            then: [ {{ call: echo }} ]\n          - otherwise: [ {{ fault: {{ status: 500, reason: other }} }} ]\n"
    ));
    let good = buy_stocks(1024, Variant::Plain).expect("payload");
    let r = Client::connect(h.http())
        .post("/full", &[SOAP11], &good)
        .expect("r");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut body = good.clone();
    body.extend_from_slice(b"\0<unclosed><x>&bogus;");
    let r = Client::connect(h.http())
        .post("/full", &[SOAP11], &body)
        .expect("r");
    let text = r.text();
    assert_eq!(r.status, 500, "{text}");
    assert!(
        text.contains("<faultcode>soapenv:Client</faultcode>"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "a NUL character (byte {}) is not allowed in XML",
            good.len()
        )),
        "{text}"
    );
    assert_eq!(
        seen.lock().expect("lock").len(),
        1,
        "only the good request was forwarded"
    );
}

#[test]
fn validate_reports_compile_errors_beside_a_misspelt_key_elsewhere() {
    let dir = temp_dir("hidden-compile-errors");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  echo: { url: \"http://127.0.0.1:9/\", timout: 30s }\nproxies:\n  A:\n    path: /a\n    in:\n      - route:\n          - when: { xpath: \"//a[\" }\n            then: [ { call: echo } ]\n  B: { path: /b, in: [ { jq: '{a: .b' } ] }\n  C: { path: /c, in: [ { xslt: { stylesheet: missing.xsl } } ] }\n",
    );
    assert_eq!(code, Some(1));
    assert_each_line(
        &err,
        &[
            (":4: ", "unknown field `timout`"),
            (":10: proxies.A.in[0].route[0].when.xpath:", "invalid XPath"),
            (":12: proxies.B.in[0].jq:", "expected closing brace"),
            (":13: proxies.C.in[0].xslt.stylesheet:", "file not found"),
        ],
    );
    assert!(err.contains("4 problem(s)"), "one line per problem:\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_names_a_database_problem_once_with_its_line() {
    let dir = temp_dir("db-diagnostics");
    // A database that does not open: its own line, and no "unknown database" at the step.
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\ndatabases:\n  d: { path: /nonexistent/dir/x.sqlite }\nproxies:\n  A:\n    path: /a\n    in:\n      - sql:\n          database: d\n          query: \"SELECT :a\"\n          params: { a: { query: a, type: int } }\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains(":4: databases.d: cannot open SQLite database"),
        "{err}"
    );
    assert!(!err.contains("unknown database"), "{err}");
    assert!(err.contains("1 problem(s)"), "{err}");
    // A statement that does not parse: its error alone, not also its parameters as unused.
    let (code, err) = validate_in(
        &dir,
        &format!("listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\ndatabases:\n  d: {{ path: {}/ok.sqlite }}\nproxies:\n  A:\n    path: /a\n    in:\n      - sql:\n          database: d\n          query: \"SELECT :a FROM t WHERE x = 'unterminated\"\n          params: {{ a: {{ query: a, type: int }} }}\n", dir.display()),
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("unterminated string literal"), "{err}");
    assert!(!err.contains("no statement has a parameter"), "{err}");
    assert!(err.contains("1 problem(s)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A route in `out` that cannot read the back end's answer blames the back end (502, a Server
/// fault), as every other step reading an answer does; the same message in a request is the
/// client's.
#[test]
fn a_route_on_an_answer_that_is_not_xml_is_the_back_ends_fault() {
    let echo = echo(EchoOptions::default());
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/e\" }}\nproxies:\n  P:\n    path: /p\n    in: [ {{ call: echo }} ]\n    out:\n      - route:\n          - when: {{ xpath: \"//a\" }}\n            then: [ {{ set_header: {{ name: x-a, value: yes }} }} ]\n          - when: {{ xpath: \"count(//b) > 0\" }}\n            then: [ {{ set_header: {{ name: x-b, value: yes }} }} ]\n  Q:\n    path: /q\n    in:\n      - route:\n          - when: {{ xpath: \"//a\" }}\n            then: [ {{ respond: {{}} }} ]\n",
        echo.addr
    ));
    for body in [&b"not xml"[..], b"<b>x</b><c/>", b"<b></c>"] {
        let r = Client::connect(h.http())
            .post("/p", &[("Content-Type", "application/xml")], body)
            .expect("r");
        assert_eq!(r.status, 502, "{}", r.text());
        assert!(r.text().contains("The back end's answer"), "{}", r.text());
        let r = Client::connect(h.http())
            .post("/p", &[SOAP11], body)
            .expect("r");
        assert_eq!(r.status, 500, "{}", r.text());
        assert!(
            r.text().contains("<faultcode>soapenv:Server</faultcode>"),
            "{}",
            r.text()
        );
    }
    let r = Client::connect(h.http())
        .post("/q", &[SOAP11], b"not xml")
        .expect("r");
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>"),
        "{}",
        r.text()
    );
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a>x</a>")
        .expect("r");
    assert_eq!(
        (r.status, r.header("x-a")),
        (200, Some("yes")),
        "{}",
        r.text()
    );
    echo.stop();
}
