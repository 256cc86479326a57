//! JSON content-based routing over real sockets: the example's JsonCBR and JsonCBRFilter,
//! decisions at 1-byte and random chunk splits and around buffer sizes, byte-exact
//! forwarding, and refused requests that never reach a back end.

use busbar_engine::echo::NAME_HEADER;

use crate::support::*;

const JSON: (&str, &str) = ("Content-Type", "application/json");

/// A `customerTier` document of exactly `len` bytes (≥ 64), the field first or last.
fn tier_doc(tier: &str, len: usize, field_last: bool) -> Vec<u8> {
    let field = format!("\"customerTier\":\"{tier}\"");
    let mut doc = String::from("{");
    if !field_last {
        doc.push_str(&field);
        doc.push(',');
    }
    doc.push_str("\"filler\":\"");
    let tail = if field_last {
        format!("\",{field}}}")
    } else {
        "\"}".to_owned()
    };
    while doc.len() + tail.len() < len {
        doc.push(['a', 'é', 'x', '9'][doc.len() % 4]);
    }
    while doc.len() + tail.len() > len {
        doc.pop();
    }
    doc.push_str(&tail);
    let mut bytes = doc.into_bytes();
    while bytes.len() < len {
        bytes.insert(1, b' ');
    }
    assert_eq!(bytes.len(), len);
    bytes
}

fn sizes() -> Vec<usize> {
    vec![
        64,
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
        1 << 20,
    ]
}

#[test]
fn json_cbr_routes_by_tier_and_forwards_byte_for_byte_at_every_size() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    for size in sizes() {
        for (tier, backend) in [
            ("premium", "premium"),
            ("standard", "standard"),
            ("gold", "standard"),
        ] {
            for last in [false, true] {
                let body = tier_doc(tier, size, last);
                let r = c.post("/api/route", &[JSON], &body).expect("answer");
                assert_eq!(r.status, 200, "{size} {tier}: {}", r.text());
                assert_eq!(
                    r.header(NAME_HEADER.as_str()),
                    Some(backend),
                    "{size} {tier} last={last}"
                );
                assert_eq!(r.body, body, "{size} {tier}");
            }
        }
    }
}

#[test]
fn json_cbr_decides_at_any_chunk_split() {
    let ex = Example::start("integrator.yaml", &[]);
    let body = tier_doc("premium", 300, false);
    for chunk in [1, 2, 3, 7, 13, 64, 299] {
        let r = Client::connect(ex.listen())
            .post_chunked("/api/route", &body, chunk)
            .expect("answer");
        assert_eq!(r.status, 200, "chunk {chunk}: {}", r.text());
        assert_eq!(
            r.header(NAME_HEADER.as_str()),
            Some("premium"),
            "chunk {chunk}"
        );
        assert_eq!(r.body, body, "chunk {chunk}");
    }
    // The name split inside an escape and a multi-byte character: still premium.
    let tricky = "{\"pad\":\"日本\",\"customer\\u0054ier\":\"premium\"}"
        .as_bytes()
        .to_vec();
    for chunk in 1..8 {
        let r = Client::connect(ex.listen())
            .post_chunked("/api/route", &tricky, chunk)
            .expect("answer");
        assert_eq!(
            r.header(NAME_HEADER.as_str()),
            Some("premium"),
            "chunk {chunk}"
        );
        assert_eq!(r.body, tricky);
    }
}

#[test]
fn bad_json_cbr_requests_are_400_problems_and_reach_no_back_end() {
    let (back, seen) = recording_back_end();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/integrator.yaml"
    ))
    .expect("example");
    let from = example.find("  JsonCBR:").expect("JsonCBR");
    let to = example[from..]
        .find("  JsonCBRFilter:")
        .map_or(example.len(), |i| from + i);
    let yaml = format!(
        "endpoints:\n  premium: {{ url: \"http://{back}/p\" }}\n  standard: {{ url: \"http://{back}/s\" }}\nproxies:\n{}",
        &example[from..to]
    );
    let h = engine(&yaml);
    // Nested too deep in the part read before the decision.
    let deep = format!(
        "{{\"a\":{}1{},\"customerTier\":\"premium\"}}",
        "[".repeat(70),
        "]".repeat(70)
    );
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"{\"other\":1}".to_vec(),
            "JSON field $.customerTier is missing",
        ),
        (
            b"[{\"customerTier\":\"premium\"}]".to_vec(),
            "JSON field $.customerTier is missing",
        ),
        (
            b"\"premium\"".to_vec(),
            "JSON field $.customerTier is missing",
        ),
        (b"{\"customerTier\":\"prem".to_vec(), "Malformed JSON"),
        (b"{\"customerTier\":premium}".to_vec(), "Malformed JSON"),
        (b"<xml/>".to_vec(), "Malformed JSON"),
        (b"".to_vec(), "Malformed JSON"),
        (
            b"{\"a\":1e999,\"customerTier\":\"premium\"}".to_vec(),
            "beyond the range",
        ),
        (
            b"{\"a\":1,\"a\":2,\"customerTier\":\"premium\"}".to_vec(),
            "duplicate member name",
        ),
        (b"{\"customerTier\":\"\xff\"}".to_vec(), "invalid UTF-8"),
        (
            b"{\"a\":\"\\ud800\",\"customerTier\":\"premium\"}".to_vec(),
            "surrogate",
        ),
        (deep.into_bytes(), "nesting deeper than 64"),
    ];
    for (body, want) in cases {
        let r = Client::connect(h.http())
            .post("/api/route", &[JSON], &body)
            .expect("answer");
        assert_eq!(
            r.status,
            400,
            "{}: {}",
            String::from_utf8_lossy(&body),
            r.text()
        );
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let problem: serde_json::Value = serde_json::from_slice(&r.body).expect("problem JSON");
        let text = problem.to_string();
        assert!(
            text.contains(want),
            "{}: {text}",
            String::from_utf8_lossy(&body)
        );
    }
    assert!(
        seen.lock().expect("lock").is_empty(),
        "a refused request reached the back end"
    );
}

#[test]
fn json_check_whole_aborts_a_bad_tail_and_read_forwards_it() {
    let (back, seen) = recording_back_end();
    let yaml = |check: &str| {
        format!(
            "endpoints:\n  b: {{ url: \"http://{back}/b\", timeout: 5s }}\nproxies:\n  R:\n    path: /r\n    json_check: {check}\n    in:\n      - route:\n          - when: {{ json: '$.t', equals: a }}\n            then: [ {{ call: b }} ]\n          - otherwise: [ {{ fault: {{ status: 404, reason: no }} }} ]\n"
        )
    };
    // A tail that is malformed, and one with a duplicate of the routing key.
    let big = "x".repeat(200_000);
    let broken = format!("{{\"t\":\"a\",\"pad\":\"{big}\",}}");
    let duplicate = format!("{{\"t\":\"a\",\"pad\":\"{big}\",\"t\":\"b\"}}");
    let h = engine(&yaml("read"));
    for body in [&broken, &duplicate] {
        let r = Client::connect(h.http())
            .post("/r", &[JSON], body.as_bytes())
            .expect("answer");
        assert_eq!(
            r.status,
            200,
            "read forwards the tail unchecked: {}",
            r.text()
        );
    }
    assert_eq!(seen.lock().expect("lock").len(), 2);
    drop(h);
    seen.lock().expect("lock").clear();
    let h = engine(&yaml("whole"));
    for body in [&broken, &duplicate] {
        let r = Client::connect(h.http()).post("/r", &[JSON], body.as_bytes());
        if let Ok(r) = r {
            assert_ne!(r.status, 200, "whole refuses the tail");
        }
    }
    // A good document still goes through in full.
    let good = format!("{{\"t\":\"a\",\"pad\":\"{big}\"}}");
    let r = Client::connect(h.http())
        .post("/r", &[JSON], good.as_bytes())
        .expect("answer");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, good.as_bytes());
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 1, "only the good document arrived whole");
    assert_eq!(seen[0], good.as_bytes());
}

fn orders(items: &[(&str, &str)]) -> Vec<u8> {
    let list: Vec<String> = items
        .iter()
        .enumerate()
        .map(|(i, (sym, price))| {
            format!(
                "{{\"symbol\":\"{sym}\",\"buyerID\":\"u{i}\",\"price\":{price},\"volume\":{}}}",
                10 + i
            )
        })
        .collect();
    format!(
        "{{\"size\":{},\"payload\":{{\"order\":[{}]}}}}",
        items.len(),
        list.join(",")
    )
    .into_bytes()
}

#[test]
fn json_cbr_filter_posts_the_price_or_the_list() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (orders(&[("GOOG", "42.8"), ("IBM", "1")]), "42.8"),
        (
            orders(&[("IBM", "42.8"), ("GOOG", "42.80"), ("GOOG", "7")]),
            "42.8",
        ),
        (orders(&[("GOOG", "40"), ("GOOG", "42.8")]), "[40,42.8]"),
        (orders(&[("GOOG", "\"42.8\"")]), "[\"42.8\"]"),
        (orders(&[("IBM", "1"), ("MSFT", "2")]), "[]"),
        (orders(&[]), "[]"),
    ];
    for (body, want) in cases {
        let r = c.post("/api/route/filter", &[JSON], &body).expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), want, "{}", String::from_utf8_lossy(&body));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let r = c
        .post("/api/route/filter", &[JSON], b"{\"payload\":")
        .expect("answer");
    assert_eq!(r.status, 400);
}
