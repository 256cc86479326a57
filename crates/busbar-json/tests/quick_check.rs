//! `check`'s quick path against the scanner alone (`scan`): on random documents and on
//! mutations of them (bytes flipped, dropped, duplicated; names repeated, some escaped; deep
//! nesting; huge numbers; bad escapes and UTF-8), `check` and `scan` give the same verdict and,
//! for a refused document, the same error.

use busbar_json::{check, scan, Limits};

#[path = "../../../tests/shared/random.rs"]
mod random;

use random::Rng;

const NAMES: &[&str] = &[
    "a",
    "b",
    "\\u0061",
    "\\u0062",
    "a\\/b",
    "a/b",
    "\\ud83d\\ude00",
    "😀",
    "é",
    "\\u00e9",
    "x y",
    "\\n",
    "\\u000a",
    "k1",
    "k2",
    "k3",
];

const SCALARS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1.5",
    "1e5",
    "1E-400",
    "1e400",
    "-1e309",
    "0.1",
    "01",
    "1.",
    ".5",
    "-",
    "1e",
    "12345678901234567890",
    "null",
    "true",
    "false",
    "nul",
    "tru",
    "\"\"",
    "\"a\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"\\ud800\\u0041\"",
    "\"\\ud83d\\ude00\"",
    "\"\\x\"",
    "\"\\u12\"",
    "\"é😀\"",
    "\"\t\"",
    "\"\\t\"",
    "\"\\/\"",
];

fn value(r: &mut Rng, depth: u32, out: &mut String) {
    if r.below(8) == 0 {
        out.push_str(r.pick(&[" ", "\n", "\t", "\r"]));
    }
    match if depth > 5 { 0 } else { r.below(4) } {
        0 | 1 => out.push_str(r.pick(SCALARS)),
        2 => {
            out.push('[');
            for i in 0..r.below(4) {
                if i > 0 {
                    out.push(',');
                }
                value(r, depth + 1, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            let n = if r.below(4) == 0 { 20 } else { r.below(5) };
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                if n > 16 {
                    out.push_str(&format!("n{}", r.below(40)));
                } else {
                    out.push_str(r.pick(NAMES));
                }
                out.push_str("\":");
                value(r, depth + 1, out);
            }
            out.push('}');
        }
    }
}

fn mutate(r: &mut Rng, doc: &mut Vec<u8>) {
    if doc.is_empty() {
        return;
    }
    let at = r.below(doc.len() as u64) as usize;
    match r.below(6) {
        0 => {
            doc.remove(at);
        }
        1 => doc.insert(at, doc[at]),
        2 => {
            doc[at] = *b"{}[],:\"\\ 0e-.\xff\xc3\x01"
                .get(r.below(17) as usize)
                .unwrap_or(&b'x')
        }
        3 => doc.truncate(at),
        4 => doc
            .splice(at..at, b"\xed\xa0\x80".iter().copied())
            .for_each(drop),
        _ => {
            let deep = "[".repeat(70) + &"]".repeat(70);
            doc.splice(at..at, deep.bytes()).for_each(drop);
        }
    }
}

#[test]
fn the_quick_check_agrees_with_the_scanner() {
    let seed = random::seed();
    let mut r = Rng(seed);
    let (mut valid, mut total) = (0, 0);
    for i in 0..30_000 {
        let mut doc = String::new();
        value(&mut r, 0, &mut doc);
        let mut doc = doc.into_bytes();
        if i % 2 == 1 {
            mutate(&mut r, &mut doc);
        }
        for limits in [
            Limits {
                max_depth: 64,
                reject_duplicates: true,
            },
            Limits {
                max_depth: 3,
                reject_duplicates: false,
            },
        ] {
            total += 1;
            let quick = check(&doc, limits);
            let slow = scan(&doc, limits);
            assert_eq!(
                quick,
                slow,
                "seed {seed}, case {i}: {}",
                String::from_utf8_lossy(&doc)
            );
            valid += usize::from(slow.is_ok());
        }
    }
    eprintln!("{valid} of {total} valid");
    assert!(
        valid * 5 > total,
        "too few valid documents: {valid} of {total}"
    );
}

#[test]
fn the_quick_check_refuses_what_the_rules_refuse() {
    let strict = Limits {
        max_depth: 2,
        reject_duplicates: true,
    };
    for (doc, why) in [
        (r#"{"a":1,"\u0061":2}"#, "duplicate"),
        (r#"{"😀":1,"\ud83d\ude00":2}"#, "duplicate"),
        ("[[[1]]]", "deep"),
        ("1e400", "range"),
        (r#""\ud800""#, "surrogate"),
        ("\u{feff}1", ""),
    ] {
        let e = check(doc.as_bytes(), strict).expect_err(doc);
        assert!(e.message.contains(why), "{doc}: {e}");
    }
    assert!(check(br#"{"a":1,"b":{"a":2}}"#, strict).is_ok());
}

#[test]
fn whole_documents_parse_to_127_levels_and_deeper_ones_get_the_limit_and_its_place() {
    let limits = |max_depth| busbar_json::Limits {
        max_depth,
        ..busbar_json::Limits::default()
    };
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    for depth in [1, 64, 127] {
        let doc = nested(depth);
        let v = busbar_json::parse_strict(doc.as_bytes(), limits(1024))
            .unwrap_or_else(|e| panic!("{depth}: {}", e.message));
        assert_eq!(serde_json::to_string(&v).expect("text"), doc);
    }
    // Past serde_json's 127 levels, whatever the configured limit: the limit named, at the
    // bracket that broke it (serde_json's own error said "recursion limit exceeded" at byte 0).
    for configured in [128, 1024] {
        let e = busbar_json::parse_strict(nested(300).as_bytes(), limits(configured))
            .expect_err("past 127");
        assert!(
            e.message.contains("deeper than 127 levels"),
            "{}",
            e.message
        );
        assert_eq!(e.offset, 127);
    }
    let e = busbar_json::parse_strict(nested(65).as_bytes(), limits(64)).expect_err("past 64");
    assert!(e.message.contains("deeper than 64 levels"), "{}", e.message);
}

#[test]
fn jsonpath_escapes_take_hex_digits_in_either_case() {
    let doc: serde_json::Value =
        serde_json::from_str(r#"{"😀":1,"é":2,"a\\ud83d":3}"#).expect("doc");
    for (path, want) in [
        (r#"$['\ud83d\ude00']"#, 1),
        (r#"$['\uD83D\uDE00']"#, 1),
        (r#"$["\ud83D\uDe00"]"#, 1),
        (r#"$['\u00e9']"#, 2),
        // An escaped backslash before `u` is not an escape.
        (r#"$['a\\ud83d']"#, 3),
    ] {
        let q = busbar_json::Query::compile(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(q.all(&doc), vec![&serde_json::json!(want)], "{path}");
    }
    assert!(
        busbar_json::Query::compile(r#"$['\ud83d']"#).is_err(),
        "a lone surrogate"
    );
}
