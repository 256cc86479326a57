//! The `jq` step over real sockets, and the integrator example's JsonMap and JsonTransform
//! checked against an independent Python reference (tests/integrator/reference.py).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::*;

const JSON: (&str, &str) = ("Content-Type", "application/json");

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A Ballerina-shaped order list; prices include exact halves (to check half-to-even).
fn orders_doc(rng: &mut Rng, n: usize) -> String {
    let symbols = ["GOOG", "IBM", "MSFT", "ORCL", "AAPL"];
    let orders: Vec<String> = (0..n)
        .map(|i| {
            let price = match rng.below(3) {
                0 => format!("{}.5", rng.below(100)),
                1 => format!("{}.{:02}", rng.below(1000), rng.below(100)),
                _ => format!("{}", rng.below(500)),
            };
            format!(
                "{{\"symbol\":\"{}\",\"buyerID\":\"user-{i}\",\"price\":{price},\"volume\":{}}}",
                symbols[rng.below(5) as usize],
                1 + rng.below(1000)
            )
        })
        .collect();
    format!(
        "{{\"size\":{n},\"payload\":{{\"order\":[{}]}}}}",
        orders.join(",")
    )
}

/// The transform's order document (docs/integrator.md) with `items` items.
fn order_doc(rng: &mut Rng, items: usize) -> String {
    let tiers = ["gold", "silver", "bronze", "standard"];
    let list: Vec<String> = (0..items)
        .map(|i| {
            format!(
                "{{\"sku\":\"SKU-{i:04}\",\"qty\":{},\"unitPrice\":{}.{:02}}}",
                1 + rng.below(9),
                rng.below(200),
                rng.below(100)
            )
        })
        .collect();
    format!(
        "{{\"orderId\":\"O-{}\",\"orderDate\":\"2026-{:02}-{:02}T10:15:00Z\",\"currency\":\"EUR\",\"customer\":{{\"id\":\"C-{}\",\"firstName\":\"Ada\",\"lastName\":\"Lövelace\",\"email\":\"Ada.L@Example.COM\",\"tier\":\"{}\",\"address\":{{\"line1\":\"12 St James's Square\",\"city\":\"London\",\"zip\":\"SW1Y 4LB\",\"country\":\"GB\"}}}},\"items\":[{}],\"filler\":\"{}\"}}",
        rng.below(1_000_000),
        1 + rng.below(12),
        1 + rng.below(28),
        rng.below(100_000),
        tiers[rng.below(4) as usize],
        list.join(","),
        "x".repeat(1000)
    )
}

fn reference(mode: &str, input: &str) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/integrator/reference.py"
    );
    let mut child = Command::new("python3")
        .arg(script)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("reference");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("reference JSON")
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn json_map_and_transform_match_the_independent_reference() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for i in 0..40 {
        let doc = orders_doc(&mut rng, [0, 1, 3, 10, 50][i % 5]);
        let r = c.post("/api/map", &[JSON], doc.as_bytes()).expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let got: Value = serde_json::from_slice(&r.body).expect("JSON");
        let want = reference("map", &doc);
        assert!(same(&got, &want), "{doc}\n busbar: {got}\n python: {want}");

        let doc = order_doc(&mut rng, 1 + i % 25);
        let r = c
            .post("/api/transform", &[JSON], doc.as_bytes())
            .expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        let got: Value = serde_json::from_slice(&r.body).expect("JSON");
        let want = reference("transform", &doc);
        assert!(same(&got, &want), "{doc}\n busbar: {got}\n python: {want}");
        assert_eq!(got.as_object().map(|o| o.len()), Some(20));
    }
    // Bad input: 400 problems, the back end never called.
    for bad in [
        "{",
        "[1,2]",
        "{\"payload\":{\"order\":[{\"price\":\"x\",\"volume\":1}]}}",
    ] {
        let r = c.post("/api/map", &[JSON], bad.as_bytes()).expect("answer");
        assert!(r.status == 400 || r.status == 500, "{bad}: {}", r.status);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
}

#[test]
fn the_jq_step_sees_params_and_headers_and_fails_cleanly() {
    let (back, seen) = recording_back_end();
    let h = engine(&format!(
        "endpoints:\n  b: {{ url: \"http://{back}/b\", timeout: 5s }}\nproxies:\n  P:\n    path: /orders/{{id}}\n    in:\n      - jq: '{{id: $params.id, tier: $headers[\"x-tier\"], q: $query.page, n: (.items | length)}}'\n      - call: b\n  E:\n    path: /e\n    in:\n      - jq: '.[] | .a'\n      - call: b\n"
    ));
    let mut c = Client::connect(h.http());
    let big = format!("{{\"items\":[{}]}}", vec!["{\"a\":1.10}"; 80_000].join(","));
    assert!(big.len() > 800_000);
    let r = c
        .post(
            "/orders/a%20b?page=2",
            &[JSON, ("X-Tier", "gold")],
            big.as_bytes(),
        )
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), r#"{"id":"a b","tier":"gold","q":"2","n":80000}"#);
    assert_eq!(seen.lock().expect("lock").len(), 1);
    // Two outputs: a 500 problem naming the step; nothing sent.
    let r = c
        .post("/e", &[JSON], b"[{\"a\":1},{\"a\":2}]")
        .expect("answer");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.text().contains("proxies.E.in[0].jq"), "{}", r.text());
    // Not JSON: 400.
    let r = c.post("/e", &[JSON], b"<x/>").expect("answer");
    assert_eq!(r.status, 400);
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[test]
fn json_to_soap_round_trips_every_order_through_a_soap_back_end() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    let mut rng = Rng(0xfeed_beef_0000_0042);
    for n in [1usize, 2, 5, 40, 400] {
        let doc = orders_doc(&mut rng, n);
        let r = c
            .post("/api/soap", &[JSON], doc.as_bytes())
            .expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let got: Value = serde_json::from_slice(&r.body).expect("JSON");
        let want: Value = serde_json::from_str(&doc).expect("JSON");
        assert!(
            same(&got, &want),
            "{n} orders\n busbar: {got}\n sent:   {want}"
        );
    }
    // A document as deep as the proxy accepts (64 levels) comes back from its envelope, three
    // elements deeper; one level more is refused before anything is sent.
    for (levels, status) in [(64usize, 200), (65, 400)] {
        let doc = format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
        let r = c
            .post("/api/soap", &[JSON], doc.as_bytes())
            .expect("answer");
        assert_eq!(r.status, status, "{levels} levels: {}", r.text());
        if status == 200 {
            let got: Value = serde_json::from_slice(&r.body).expect("JSON");
            let want: Value = serde_json::from_str(&doc).expect("JSON");
            assert_eq!(got, want, "{levels} levels");
        }
    }
    // What went to the back end is SOAP 1.1: check through a recording back end.
    let (back, seen) = recording_back_end();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/integrator.yaml"
    ))
    .expect("example");
    let from = example.find("  JsonToSoap:").expect("JsonToSoap");
    let h = engine(&format!(
        "endpoints:\n  standard: {{ url: \"http://{back}/s\" }}\nproxies:\n{}",
        &example[from..]
    ));
    let doc = r#"{"size":1,"payload":{"order":[{"symbol":"A&B","buyerID":"u<1>","price":1.5,"volume":2}]}}"#;
    let r = Client::connect(h.http())
        .post("/api/soap", &[JSON], doc.as_bytes())
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = String::from_utf8(seen.lock().expect("lock")[0].clone()).expect("UTF-8");
    assert!(sent.contains("<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><buyStocks xmlns=\"http://services.samples\">"), "{sent}");
    assert!(
        sent.contains("<symbol>A&amp;B</symbol><buyerID>u&lt;1&gt;</buyerID>"),
        "{sent}"
    );
    // Not JSON in, or a key that cannot be an element name: 400, nothing sent.
    for bad in [&b"{\"a b\":1}"[..], b"<x/>"] {
        let r = Client::connect(h.http())
            .post("/api/soap", &[JSON], bad)
            .expect("answer");
        assert_eq!(r.status, 400, "{}", r.text());
    }
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[test]
fn validate_names_each_jq_steps_engine() {
    let dir = temp_dir("jq-engines");
    std::fs::copy(
        examples_dir().join("integrator").join("transform.jq"),
        dir.join("t.jq"),
    )
    .expect("copy");
    let yaml = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  F:\n    path: /f\n    in:\n      - jq: { file: t.jq }\n      - respond: {}\n  S:\n    path: /s\n    in:\n      - jq: 'try .a catch 0'\n      - respond: {}\n";
    let (ok, text) = validate_stdout(&dir, yaml);
    assert!(ok, "{text}");
    assert!(
        text.contains("proxies.F.in[0].jq: t.jq runs on the fast path"),
        "{text}"
    );
    assert!(
        text.contains(
            "proxies.S.in[0].jq: its program runs on jaq (outside the fast path's class: it uses try)"
        ),
        "{text}"
    );
}

#[test]
fn the_fast_jq_path_refuses_what_the_json_check_refuses_and_survives_a_huge_repetition() {
    let (back, seen) = recording_back_end();
    let h = engine(&format!(
        "endpoints:\n  b: {{ url: \"http://{back}/b\", timeout: 5s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - jq: '{{x: (.a * .b)}}'\n      - call: b\n"
    ));
    let mut c = Client::connect(h.http());
    let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
    for (body, why) in [
        (r#"{"a":1,"a":2,"b":3}"#.to_owned(), "duplicate"),
        (r#"{"a":1e400,"b":3}"#.to_owned(), "range"),
        (format!(r#"{{"a":{deep},"b":1}}"#), "deep"),
        (r#"{"a":1,"b":2,}"#.to_owned(), ""),
        ("{\"a\":\"\u{1}\",\"b\":2}".to_owned(), ""),
    ] {
        let r = c.post("/p", &[JSON], body.as_bytes()).expect("answer");
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.text().contains(why), "{body}: {}", r.text());
    }
    assert!(seen.lock().expect("lock").is_empty(), "nothing forwarded");
    // "ab" × 2^62: a 500 naming the step, and busbar goes on answering.
    let r = c
        .post("/p", &[JSON], br#"{"a":"ab","b":4611686018427387904}"#)
        .expect("answer");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("repeating a string"), "{}", r.text());
    let r = c
        .post("/p", &[JSON], br#"{"a":2.5,"b":4}"#)
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[test]
fn a_program_that_nests_a_value_without_end_fails_its_request_and_busbar_goes_on() {
    let h = engine(
        "proxies:\n  Deep:\n    path: /deep\n    in:\n      - jq: 'reduce range(0; .n) as $i (null; [.])'\n      - respond: {}\n  DeepJaq:\n    path: /deep-jaq\n    in:\n      - jq: 'reduce .items[] as $i (null; {next: ., v: $i}) | getpath([])'\n      - respond: {}\n  Inf:\n    path: /inf\n    in:\n      - jq: '{total: (.price * .volume), ratio: (.x | sqrt)}'\n      - respond: {}\n",
    );
    let mut c = Client::connect(h.http());
    let items = format!("{{\"items\":[{}0]}}", "0,".repeat(200_000));
    for (path, body) in [("/deep", r#"{"n":5000}"#.to_owned()), ("/deep-jaq", items)] {
        let r = c.post(path, &[JSON], body.as_bytes()).expect("answer");
        assert_eq!(r.status, 500, "{path}: {}", r.text());
        assert!(
            r.text().contains("nested deeper than 1024 levels"),
            "{path}: {}",
            r.text()
        );
    }
    let r = c.post("/deep", &[JSON], br#"{"n":3}"#).expect("answer");
    assert_eq!((r.status, r.text()), (200, "[[[null]]]".to_owned()));
    // JSON has no Infinity or NaN: written as jq writes them, and the answer is JSON.
    let r = c
        .post("/inf", &[JSON], br#"{"price":1e308,"volume":10,"x":-1}"#)
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(v["total"].as_f64(), Some(f64::MAX));
    assert!(v["ratio"].is_null(), "{v}");
}
