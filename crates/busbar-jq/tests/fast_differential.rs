//! The fast interpreter against jaq: for a corpus of programs and thousands of random
//! documents (numbers in every form, strings with escapes, duplicate keys, missing fields,
//! wrong types), whenever the fast interpreter gives an answer it is jaq's, byte for byte. It
//! must also really answer (not give every run up) where the program and input are ordinary.

use busbar_jq::{Program, Strict};

#[path = "../../../tests/shared/random.rs"]
mod random;

use random::Rng;

const KEYS: &[&str] = &[
    "a", "b", "c", "n", "s", "items", "qty", "price", "tier", "id", "date", "x y", "é",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "2",
    "7",
    "-3",
    "42",
    "1.10",
    "2.5",
    "3.5",
    "-2.5",
    "0.1",
    "1e5",
    "1E-2",
    "-0.0",
    "42.80",
    "9007199254740993",
    "9223372036854775807",
    "-9223372036854775807",
    "12345678901234567890123",
    "100",
    "0.5",
    "1.5e300",
    "1e400",
];

const STRINGS: &[&str] = &[
    r#""""#,
    r#""gold""#,
    r#""silver""#,
    r#""premium""#,
    r#""C-21541""#,
    r#""C-x""#,
    r#""2026-09-28T10:15:00Z""#,
    r#""Ada Lovelace""#,
    r#""MiXeD Case É""#,
    r#""a\"b\\c\/d\n\t\r\b\f\u0001\u007f""#,
    r#""\u00e9\ud83d\ude00 snow ☃""#,
    r#""12""#,
    r#"" 12 ""#,
    r#""1.50""#,
    r#""1e2""#,
    r#""abc,def,,g""#,
    r#""T""#,
];

fn ws(r: &mut Rng, out: &mut String) {
    if r.below(6) == 0 {
        out.push_str(r.pick(&[" ", "\n", "\t ", "\r\n  "]));
    }
}

fn value(r: &mut Rng, depth: u32, out: &mut String) {
    ws(r, out);
    let kind = if depth >= 4 { r.below(5) } else { r.below(8) };
    match kind {
        0 => out.push_str(r.pick(&["null", "true", "false"])),
        1 | 2 => out.push_str(r.pick(NUMBERS)),
        3 | 4 => out.push_str(r.pick(STRINGS)),
        5 => {
            out.push('[');
            let n = r.below(5);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                value(r, depth + 1, out);
            }
            ws(r, out);
            out.push(']');
        }
        _ => object(r, depth, out),
    }
    ws(r, out);
}

fn object(r: &mut Rng, depth: u32, out: &mut String) {
    out.push('{');
    let n = r.below(7);
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        ws(r, out);
        out.push('"');
        out.push_str(r.pick(KEYS));
        out.push('"');
        ws(r, out);
        out.push(':');
        value(r, depth + 1, out);
    }
    out.push('}');
}

/// An order-like document: the fields the programs use, each sometimes of another type.
fn order(r: &mut Rng) -> String {
    let mut out = String::from("{");
    let field = |r: &mut Rng, out: &mut String, key: &str, usual: &dyn Fn(&mut Rng) -> String| {
        if r.below(12) == 0 {
            return;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&format!("\"{key}\":"));
        if r.below(10) == 0 {
            value(r, 3, out);
        } else {
            out.push_str(&usual(r));
        }
    };
    field(r, &mut out, "orderId", &|r| r.pick(STRINGS).to_owned());
    field(r, &mut out, "orderDate", &|r| {
        r.pick(&[
            r#""2026-09-28T10:15:00Z""#,
            r#""2026-01-02T00:00:00Z""#,
            r#""x""#,
        ])
        .to_owned()
    });
    field(r, &mut out, "customer", &|r| {
        format!(
            r#"{{"id":{},"firstName":{},"lastName":{},"email":{},"tier":{},"address":{{"line1":{},"city":"London","zip":"N1","country":"GB"}}}}"#,
            r.pick(&[r#""C-21541""#, r#""C-7""#, r#""C-x""#, r#""21""#]),
            r.pick(STRINGS),
            r.pick(STRINGS),
            r.pick(STRINGS),
            r.pick(&[r#""gold""#, r#""silver""#, r#""bronze""#, "null", "1"]),
            r.pick(STRINGS),
        )
    });
    field(r, &mut out, "currency", &|r| r.pick(STRINGS).to_owned());
    field(r, &mut out, "items", &|r| {
        let n = r.below(6);
        let items: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"sku":"S-{i}","qty":{},"unitPrice":{}}}"#,
                    r.pick(&["1", "2", "7", "0", "-3", "100"]),
                    r.pick(&["10.5", "3.25", "0.1", "175.30", "2", "42.80", "1e2"]),
                )
            })
            .collect();
        format!("[{}]", items.join(","))
    });
    out.push('}');
    out
}

/// A Ballerina-shaped orders document.
fn orders(r: &mut Rng) -> String {
    let n = r.below(6);
    let items: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"symbol":{},"buyerID":"user{i}","price":{},"volume":{}}}"#,
                r.pick(&[r#""GOOG""#, r#""IBM""#, r#""MSFT""#]),
                r.pick(&["42.8", "42.80", "2.5", "3.5", "168.50", "0.5", "-2.5", "7", "\"42.8\""]),
                r.pick(&["990", "1", "0", "-4", "3"]),
            )
        })
        .collect();
    format!(
        r#"{{"size":{n},"payload":{{"order":[{}]}}}}"#,
        items.join(",")
    )
}

fn random_doc(r: &mut Rng) -> String {
    let mut out = String::new();
    match r.below(3) {
        0 => object(r, 0, &mut out),
        1 => value(r, 0, &mut out),
        _ => {
            // Objects with many keys and duplicates, and large integers.
            out.push('{');
            let n = 10 + r.below(20);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                let k = r.pick(KEYS);
                out.push_str(&format!("\"{k}{}\":", r.below(12)));
                value(r, 2, &mut out);
            }
            out.push('}');
        }
    }
    out
}

const GENERIC: &[&str] = &[
    ".",
    ".a",
    ".a.b.c",
    ".a?",
    ".[0]",
    ".[-1]",
    ".[]?",
    "[.[]?]",
    ".a, .b",
    "[.a, .b // \"none\"]",
    ".a // .b // 7",
    "{a, b: .c, \"x y\": .n, (.s // \"k\"): 1, $params}",
    "{a: 1, a: 2, b: 3}",
    "{(.a): 1}",
    "\"v: \\(.a) \\(.b) \\(.n)\"",
    "\"\\(.)\"",
    ".a + .b",
    ".a - .b",
    ".a * .b",
    ".a / .b",
    ".a % .b",
    "-.a",
    "(.a + 1) * 2 - 0.5",
    ".n + 0",
    ".a == .b",
    ".a != .b",
    ".a < .b",
    ".a >= .b",
    "[.a, .b] | .[0] <= .[1]",
    ".a and .b",
    ".a or .b",
    "(.a | not)",
    "if .a then .b elif .c then .n else 0 end",
    "if .a == null then \"none\" end",
    "reduce .[]? as $x (0; . + ($x | length))",
    "reduce (.a, .b) as $x (null; . + $x)",
    ".a as $x | .b as $y | [$x, $y, $params.id]",
    "[.[]? | select(. != null)]",
    "[.[]? | numbers?]",
    "map(.a?)",
    "[.[]? | type]",
    "[.[]? | length]",
    "length",
    "keys",
    "to_entries",
    "has(\"a\")",
    "add",
    "[.[]? | tostring]",
    "[.[]? | tojson]",
    "[.[]? | tonumber?]",
    ".s | tonumber",
    ".s | ascii_downcase",
    ".s | ascii_upcase",
    ".s | split(\",\")",
    ".s | split(\"\")",
    ".s | ltrimstr(\"C-\")",
    ".s | rtrimstr(\"Z\")",
    ".s | startswith(\"a\")",
    ".s | endswith(\"Z\")",
    "[.[]? | tostring] | join(\"-\")",
    ".a | floor",
    ".a | ceil",
    ".a | round",
    ".a | abs",
    "first",
    "last",
    "[.[]? | values]",
    "def f: . + 1; def g($x): $x * 2; [.a | f, g(.b)]",
    "def twice(f): f | f; .a | twice(. + 1)",
    "def outer: def inner: .a; [inner, .b]; outer",
    "def r: r; 1",
    "[.[]? as $x | $x]",
    "{a: (.a, .b)}",
    "[.a, .b] | map(. * 2)",
    ".items | length",
    "empty",
    "error(\"x\")",
    "[limit(1; .[]?)]",
];

const ORDER_PROGRAMS: &[&str] = &[
    include_str!("../../../examples/integrator/transform.jq"),
    "[.items[] | .qty * .unitPrice] | add",
    "{total: (reduce .items[] as $i (0; . + $i.qty * $i.unitPrice)), n: (.items | length)}",
    ".customer | {id, tier, city: .address.city}",
    "\"\\(.customer.firstName) \\(.customer.lastName)\"",
    ".orderDate | split(\"T\")[0] | split(\"-\") | \"\\(.[2])/\\(.[1])/\\(.[0])\"",
    "({gold: 0.1, silver: 0.05}[.customer.tier] // 0)",
];

const ORDERS_PROGRAMS: &[&str] = &[
    include_str!("../../../examples/integrator/map.jq"),
    "[.payload.order[] | select(.symbol == \"GOOG\") | .price]",
    ".payload.order | map({symbol, p: (.price | floor), r: (.price | round), c: (.price | ceil)})",
    ".payload.order | map(.volume % 3)",
    "[.payload.order[] | .price * .volume] | add",
];

fn check(
    programs: &[&str],
    docs: &dyn Fn(&mut Rng) -> String,
    seed: u64,
    per: usize,
) -> (usize, usize) {
    let (mut fast, mut total) = (0, 0);
    let vars: [&[u8]; 1] = [br#"{"id":"7"}"#];
    for program in programs {
        let p = Program::compile(program, &["params"]).unwrap_or_else(|e| panic!("{program}: {e}"));
        let mut r = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        for i in 0..per {
            let doc = docs(&mut r);
            total += 1;
            let quick = p.run_fast(doc.as_bytes(), &vars);
            // Strict reading answers only for documents busbar's JSON check accepts, and
            // then as the lenient reading does.
            let strict = Strict {
                max_depth: 3,
                reject_duplicates: true,
            };
            if let Some(answer) = p.run_strict(doc.as_bytes(), &vars, strict) {
                let limits = busbar_json::Limits {
                    max_depth: 3,
                    reject_duplicates: true,
                };
                if let Err(e) = busbar_json::check(doc.as_bytes(), limits) {
                    panic!("seed {seed}: {program} answered strictly on {doc}, which the check refuses: {e}");
                }
                assert_eq!(Some(&answer), quick.as_ref(), "{program} on {doc}");
            }
            if let Some(Err(e)) = &quick {
                // Refused outright: only what would make jaq exhaust memory.
                assert!(
                    e.to_string().contains("repeating a string"),
                    "{program} on {doc}: {e}"
                );
                continue;
            }
            // jaq panics on some arithmetic overflows in a debug build (`length` of the
            // smallest integer): such a case is not compared.
            let Ok(slow) = std::panic::catch_unwind(|| p.run_jaq(doc.as_bytes(), &vars)) else {
                assert!(
                    quick.is_none(),
                    "{program} on {doc}: jaq panicked, the fast path did not"
                );
                continue;
            };
            if let Some(Ok(out)) = quick {
                fast += 1;
                let want = slow.as_ref().unwrap_or_else(|e| {
                    panic!(
                        "seed {seed}, case {i}: {program}\n  input: {doc}\n  fast: {}\n  jaq failed: {e}",
                        String::from_utf8_lossy(&out)
                    )
                });
                assert!(
                    &out == want,
                    "seed {seed}, case {i}: {program}\n  input: {doc}\n  fast: {}\n  jaq:  {}",
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(want)
                );
            }
        }
    }
    (fast, total)
}

#[test]
fn fast_answers_are_jaqs_on_random_documents() {
    let seed = random::seed();
    let (fast, total) = check(GENERIC, &random_doc, seed, 400);
    eprintln!("generic: {fast} of {total} runs answered by the fast interpreter");
    assert!(fast * 4 > total, "only {fast} of {total} fast");
    let (fast, total) = check(ORDER_PROGRAMS, &order, seed, 1000);
    eprintln!("orders: {fast} of {total}");
    assert!(fast * 2 > total, "only {fast} of {total} fast");
    let (fast, total) = check(ORDERS_PROGRAMS, &orders, seed, 1000);
    eprintln!("ballerina orders: {fast} of {total}");
    assert!(fast * 2 > total, "only {fast} of {total} fast");
}

#[test]
fn the_integrator_programs_run_fast_on_their_documents() {
    for (file, doc) in [
        (
            include_str!("../../../examples/integrator/transform.jq"),
            r#"{"orderId":"O-1","orderDate":"2026-09-28T10:15:00Z","currency":"EUR","customer":{"id":"C-21541","firstName":"Ada","lastName":"Lovelace","email":"Ada.L@Example.COM","tier":"gold","address":{"line1":"12 St James's Square","city":"London","zip":"SW1Y 4LB","country":"GB"}},"items":[{"sku":"A","qty":4,"unitPrice":175.30},{"sku":"B","qty":2,"unitPrice":69.65}]}"#,
        ),
        (
            include_str!("../../../examples/integrator/map.jq"),
            r#"{"size":2,"payload":{"order":[{"symbol":"GOOG","buyerID":"u0","price":42.5,"volume":990},{"symbol":"IBM","buyerID":"u1","price":3.5,"volume":1}]}}"#,
        ),
    ] {
        let p = Program::compile(file, &["params"]).expect("compiles");
        assert_eq!(p.fast_path(), Ok(()));
        let vars: [&[u8]; 1] = [b"null"];
        let fast = p
            .run_fast(doc.as_bytes(), &vars)
            .expect("answered fast")
            .expect("no error");
        assert_eq!(fast, p.run_jaq(doc.as_bytes(), &vars).expect("jaq"));
        let strict = Strict {
            max_depth: 64,
            reject_duplicates: true,
        };
        let answer = p.run_strict(doc.as_bytes(), &vars, strict);
        assert_eq!(answer.and_then(Result::ok), Some(fast));
    }
}

#[test]
fn programs_outside_the_subset_say_why() {
    for (program, what) in [
        ("try .a catch 1", "try"),
        (".a |= 1", "assignments"),
        ("[.[] | @base64]", "base64"),
        (
            "def f: if . > 0 then (. - 1 | f) else . end; f",
            "recursion",
        ),
        ("[paths]", "paths"),
        (".a[1:2]", "slices"),
        (".a | test(\"x\")", "test"),
    ] {
        let p = Program::compile(program, &[]).expect("compiles");
        let why = p.fast_path().expect_err(program);
        assert!(why.contains(what), "{program}: {why}");
        // Still runs (on jaq).
        let _ = p.run(br#"{"a":[1,2,3]}"#, &[]);
    }
}

#[test]
fn a_huge_string_repetition_fails_the_run_instead_of_exhausting_memory() {
    let p = Program::compile(".a * .b", &[]).expect("compiles");
    for doc in [
        r#"{"a":"xy","b":9007199254740993}"#,
        r#"{"a":"x","b":12345678901234567890123}"#,
        r#"{"b":"x","a":9223372036854775807}"#,
    ] {
        let e = p.run(doc.as_bytes(), &[]).expect_err(doc);
        assert!(e.to_string().contains("repeating a string"), "{e}");
    }
    assert_eq!(
        p.run(br#"{"a":"ab","b":3}"#, &[]).as_deref().ok(),
        Some(&b"\"ababab\""[..])
    );
    // An overflow first (a big integer, as jaq makes), then the repetition: still refused.
    let q = Program::compile("{q: (.b * 2), c: (.a * .b)}", &[]).expect("compiles");
    let e = q
        .run(br#"{"a":"x","b":4611686018427387904}"#, &[])
        .expect_err("refused");
    assert!(e.to_string().contains("repeating a string"), "{e}");
    let q = Program::compile("[.b * 2, .b + .b, -.c, .c - 1]", &[]).expect("compiles");
    let doc = br#"{"b":9223372036854775807,"c":-9223372036854775808}"#;
    let fast = q.run_fast(doc, &[]).and_then(Result::ok);
    assert!(fast.is_some(), "big integers stay on the fast path");
    assert_eq!(fast, q.run_jaq(doc, &[]).ok());
    assert_eq!(
        p.run(br#"{"a":"ab","b":-1}"#, &[]).as_deref().ok(),
        Some(&b"null"[..])
    );
}
