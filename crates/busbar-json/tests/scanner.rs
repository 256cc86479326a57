//! The scanner against serde_json (validity) and serde_json_path (simple-path results), at
//! every split of a corpus and on random documents.

use busbar_json::{check, Decision, Found, Limits, Scanner, SimplePath};
use serde_json::Value;

const LIMITS: Limits = Limits {
    max_depth: 64,
    reject_duplicates: false,
};

/// Feeds `doc` in the given chunk sizes (cycled); returns the decision and the bytes consumed
/// when it came, then checks the rest.
fn scan(doc: &[u8], path: &str, chunks: &[usize]) -> Result<(Decision, u64), String> {
    let p = SimplePath::parse(path).ok_or("not simple")?;
    let mut s = Scanner::with_path(&p, LIMITS);
    let mut at = 0;
    let mut k = 0;
    let mut decision = None;
    while at < doc.len() {
        let n = chunks[k % chunks.len()].max(1).min(doc.len() - at);
        k += 1;
        let chunk = &doc[at..at + n];
        let d = s.feed(chunk).map_err(|e| e.to_string())?;
        if let Some(d) = d {
            let used = (s.bytes_consumed() as usize) - at;
            decision = Some((d, s.bytes_consumed()));
            // Go on checking the rest of the chunk, then the rest of the document.
            s.feed(&chunk[used..]).map_err(|e| e.to_string())?;
        }
        at += n;
    }
    if let Some(d) = s.finish().map_err(|e| e.to_string())? {
        decision = Some((d, s.bytes_consumed()));
    }
    decision.ok_or_else(|| "no decision".to_owned())
}

fn oracle(doc: &[u8], path: &str) -> Result<Decision, String> {
    let v: Value = serde_json::from_slice(doc).map_err(|e| e.to_string())?;
    let q = serde_json_path::JsonPath::parse(path).map_err(|e| e.to_string())?;
    Ok(match q.query(&v).all().first() {
        None => Decision::Absent,
        Some(Value::String(s)) => Decision::Found(Found::String(s.clone())),
        Some(Value::Number(n)) => Decision::Found(Found::Number(n.to_string())),
        Some(Value::Bool(b)) => Decision::Found(Found::Bool(*b)),
        Some(Value::Null) => Decision::Found(Found::Null),
        Some(Value::Object(_)) => Decision::Found(Found::Object),
        Some(Value::Array(_)) => Decision::Found(Found::Array),
    })
}

/// Numbers compare by value (the scanner keeps the source text).
fn same(a: &Decision, b: &Decision) -> bool {
    match (a, b) {
        (Decision::Found(Found::Number(x)), Decision::Found(Found::Number(y))) => {
            x.parse::<f64>().ok() == y.parse::<f64>().ok()
        }
        _ => a == b,
    }
}

const DOCS: &[&str] = &[
    r#"{"customerTier":"premium","id":1}"#,
    r#"{"id":1,"customerTier":"standard"}"#,
    r#"{"id":1,"nested":{"customerTier":"premium"}}"#,
    r#"{"customerTier":42}"#,
    r#"{"customerTier":null}"#,
    r#"{"customerTier":{"a":1}}"#,
    r#"{"customerTier":[1,2]}"#,
    r#"[{"customerTier":"premium"}]"#,
    r#""premium""#,
    r#"  {"a" : { "b" : [ 10 , 20 , { "c" : "x\u00e9\ud83d\ude00\n" } ] } }  "#,
    r#"{"a":{"b":[1.5e3,-0,0.25,true,false,null]}}"#,
    r#"{"payload":{"order":[{"symbol":"GOOG","price":42.80},{"symbol":"IBM","price":1}]}}"#,
    r#"{"k\u0065y":"escaped name","key2":"\"quoted\""}"#,
    r#"{"é":"accent","日本":"kanji"}"#,
    r#"{}"#,
    r#"[]"#,
    r#"{"a":[]}"#,
    r#"{"a":[[],[[]],{}]}"#,
];

const PATHS: &[&str] = &[
    "$",
    "$.customerTier",
    "$.id",
    "$.nested.customerTier",
    "$[0].customerTier",
    "$[0]",
    "$.a.b[2].c",
    "$.a.b[0]",
    "$.a.b[1]",
    "$.a.b[5]",
    "$.a.b[9]",
    "$['payload']['order'][0]['price']",
    "$.payload.order[1].symbol",
    "$.key",
    "$.key2",
    "$['é']",
    "$.日本",
    "$.a[1][0]",
    "$.a[2]",
    "$.missing.deeper",
];

#[test]
fn decisions_agree_with_serde_json_path_at_every_split() {
    let mut checked = 0;
    for doc in DOCS {
        let bytes = doc.as_bytes();
        for path in PATHS {
            let want = oracle(bytes, path).unwrap_or_else(|e| panic!("{doc} {path}: {e}"));
            for split in 0..=bytes.len() {
                let chunks = [split.max(1), bytes.len()];
                let (got, _) = scan(bytes, path, &chunks)
                    .unwrap_or_else(|e| panic!("{doc} {path} split {split}: {e}"));
                assert!(
                    same(&got, &want),
                    "{doc} {path} split {split}: {got:?} != {want:?}"
                );
                checked += 1;
            }
            let (got, _) = scan(bytes, path, &[1]).expect("1-byte chunks");
            assert!(
                same(&got, &want),
                "{doc} {path} 1-byte: {got:?} != {want:?}"
            );
        }
    }
    assert!(checked > 5000);
}

#[test]
fn a_field_near_the_start_is_decided_without_reading_the_rest() {
    let mut doc = br#"{"customerTier":"premium","filler":""#.to_vec();
    doc.extend(std::iter::repeat_n(b'x', 100_000));
    doc.extend_from_slice(br#""}"#);
    let p = SimplePath::parse("$.customerTier").expect("simple");
    let mut s = Scanner::with_path(&p, LIMITS);
    let d = s.feed(&doc).expect("valid");
    assert_eq!(d, Some(Decision::Found(Found::String("premium".into()))));
    assert_eq!(
        s.bytes_consumed(),
        25,
        "decided at the closing quote of the value"
    );
    // A top level that is not an object: absent at its first byte.
    let mut s = Scanner::with_path(&p, LIMITS);
    assert_eq!(s.feed(b"[1,2,3]").expect("valid"), Some(Decision::Absent));
    assert_eq!(s.bytes_consumed(), 1);
    // The object holding the name closed: absent there, before the rest.
    let p = SimplePath::parse("$.a.x").expect("simple");
    let mut s = Scanner::with_path(&p, LIMITS);
    assert_eq!(
        s.feed(br#"{"a":{"y":1},"z":[1,2,3]}"#).expect("valid"),
        Some(Decision::Absent)
    );
    assert_eq!(s.bytes_consumed(), 12);
}

const BAD: &[&str] = &[
    "",
    " ",
    "{",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\":1,}",
    "[1,]",
    "[1 2]",
    "{'a':1}",
    "{\"a\":01}",
    "{\"a\":1.}",
    "{\"a\":.5}",
    "{\"a\":-}",
    "{\"a\":1e}",
    "{\"a\":+1}",
    "{\"a\":tru}",
    "{\"a\":nul}",
    "{\"a\":True}",
    "{\"a\":\"\\x\"}",
    "{\"a\":\"\\u12\"}",
    "{\"a\":\"\\ud800\"}",
    "{\"a\":\"\\udc00\"}",
    "{\"a\":\"\\ud800\\u0041\"}",
    "{\"a\":\"tab\there\"}",
    "{\"a\":1}x",
    "{\"a\":1}{}",
    "{\"a\":1e400}",
    "{\"a\":-1e400}",
    "\u{feff}{}",
    "[1]]",
    "{]",
    "[}",
    "nul",
];

#[test]
fn malformed_documents_are_refused_like_serde_json_refuses_them() {
    for doc in BAD {
        assert!(
            serde_json::from_str::<Value>(doc).is_err(),
            "the oracle accepts {doc:?}"
        );
        assert!(check(doc.as_bytes(), LIMITS).is_err(), "accepted {doc:?}");
        for split in 1..doc.len().max(2) {
            let mut s = Scanner::new(LIMITS);
            let r = s
                .feed(&doc.as_bytes()[..split.min(doc.len())])
                .and_then(|_| s.feed(&doc.as_bytes()[split.min(doc.len())..]))
                .and_then(|_| s.finish());
            assert!(r.is_err(), "accepted {doc:?} split at {split}");
        }
    }
    // Invalid UTF-8 inside strings, including split across chunks.
    for bad in [
        &b"{\"a\":\"\xff\"}"[..],
        b"{\"a\":\"\xc3\"}",
        b"{\"a\":\"\xe0\x80\x80\"}",
        b"{\"a\":\"\xed\xa0\x80\"}",
        b"{\"a\":\"\xf4\x90\x80\x80\"}",
        b"{\"a\":\"\xc0\xaf\"}",
        b"{\"\xff\":1}",
        b"{\"a\":1\xc3\xa9}",
    ] {
        assert!(serde_json::from_slice::<Value>(bad).is_err());
        for split in 1..bad.len() {
            let mut s = Scanner::new(LIMITS);
            let r = s
                .feed(&bad[..split])
                .and_then(|_| s.feed(&bad[split..]))
                .and_then(|_| s.finish());
            assert!(r.is_err(), "accepted {bad:?} split at {split}");
        }
    }
    // Valid multi-byte text split anywhere is accepted.
    let good = "{\"a\":\"é日本😀\"}".as_bytes();
    for split in 1..good.len() {
        let mut s = Scanner::new(LIMITS);
        s.feed(&good[..split]).expect("first part");
        s.feed(&good[split..]).expect("second part");
        s.finish().expect("end");
    }
}

#[test]
fn nesting_is_limited_exactly() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let l = Limits {
        max_depth: 64,
        reject_duplicates: false,
    };
    assert!(check(nest(64).as_bytes(), l).is_ok());
    let e = check(nest(65).as_bytes(), l).expect_err("65 levels");
    assert!(e.message.contains("deeper than 64"), "{e}");
    assert_eq!(e.offset, 64);
}

#[test]
fn duplicate_names_are_refused_when_asked_anywhere_in_the_document() {
    let strict = Limits {
        max_depth: 64,
        reject_duplicates: true,
    };
    assert!(check(br#"{"a":1,"b":{"a":2}}"#, strict).is_ok());
    let e = check(br#"{"a":1,"b":{"x":2,"x":3}}"#, strict).expect_err("duplicate");
    assert!(e.message.contains("duplicate member name \"x\""), "{e}");
    // Escapes do not hide a duplicate.
    assert!(check(br#"{"tier":1,"ti\u0065r":2}"#, strict).is_err());
    assert!(check(br#"{"a":1,"a":2}"#, LIMITS).is_ok());
    // Without the check the path follows the first occurrence.
    let (d, _) = scan(br#"{"t":"premium","t":"standard"}"#, "$.t", &[3]).expect("scan");
    assert_eq!(d, Decision::Found(Found::String("premium".into())));
}

#[test]
fn simple_paths_are_recognised_and_others_refused() {
    use busbar_json::Segment::{Index, Name};
    assert_eq!(SimplePath::parse("$").map(|p| p.0), Some(vec![]));
    assert_eq!(
        SimplePath::parse("$.a['b c'][3][\"d\\\"\"]").map(|p| p.0),
        Some(vec![
            Name("a".into()),
            Name("b c".into()),
            Index(3),
            Name("d\"".into())
        ])
    );
    for not in [
        "$..a",
        "$.*",
        "$[*]",
        "$[-1]",
        "$[0:2]",
        "$[?@.a]",
        "$.a[01]",
        "a",
        "$.1a",
        "$['a'",
        "$[1,2]",
        "$.a.length()",
    ] {
        assert_eq!(SimplePath::parse(not), None, "{not}");
    }
}

/// A small deterministic generator of JSON documents.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn value(&mut self, depth: u32) -> String {
        let k = if depth > 3 {
            self.pick(5)
        } else {
            self.pick(7)
        };
        match k {
            0 => format!(
                "\"{}\"",
                ["a", "b\\n", "é", "\\u0041", "", "x y"][self.pick(6) as usize]
            ),
            1 => ["0", "-1", "3.25", "1e3", "-0.5E-2", "12345678901234567890"]
                [self.pick(6) as usize]
                .into(),
            2 => "true".into(),
            3 => "false".into(),
            4 => "null".into(),
            5 => {
                let n = self.pick(4);
                let mut names: Vec<&str> = vec!["a", "b", "c", "d"];
                let mut s = String::from("{");
                for i in 0..n {
                    if i > 0 {
                        s.push(',');
                    }
                    let at = self.pick(names.len() as u64) as usize;
                    let name = names.remove(at);
                    s.push_str(&format!("\"{name}\":{}", self.value(depth + 1)));
                }
                s.push('}');
                s
            }
            _ => {
                let n = self.pick(4);
                let items: Vec<String> = (0..n).map(|_| self.value(depth + 1)).collect();
                format!("[{}]", items.join(","))
            }
        }
    }
}

#[test]
fn random_documents_agree_with_the_oracle_at_random_splits() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let paths = [
        "$",
        "$.a",
        "$.a.b",
        "$[0]",
        "$.b[1]",
        "$.a[0].c",
        "$[1].d",
        "$.c[2][0]",
    ];
    for _ in 0..3000 {
        let doc = g.value(0);
        for path in paths {
            let want = oracle(doc.as_bytes(), path).expect("oracle");
            let chunks = [1 + g.pick(7) as usize, 1 + g.pick(3) as usize];
            let (got, _) =
                scan(doc.as_bytes(), path, &chunks).unwrap_or_else(|e| panic!("{doc} {path}: {e}"));
            assert!(same(&got, &want), "{doc} {path}: {got:?} != {want:?}");
        }
    }
}
