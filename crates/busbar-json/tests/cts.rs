//! The RFC 9535 JSONPath compliance suite, read in place from
//! `../shared/conformance/jsonpath-cts/cts.json` (or `$BUSBAR_CONFORMANCE/jsonpath-cts`):
//! every selector through [`Query`] (invalid ones must be refused when compiled, valid ones
//! must select one of the expected node lists), and every test whose selector is a simple
//! path also through the streaming scanner (its first node, or its absence).

use std::path::PathBuf;

use busbar_json::{Decision, Found, Limits, Query, Scanner};
use serde_json::Value;

fn suite() -> Option<PathBuf> {
    let base = std::env::var_os("BUSBAR_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/conformance"
            ))
        });
    let file = base.join("jsonpath-cts/cts.json");
    file.exists().then_some(file)
}

/// Tests that do not pass, with the reason. Empty: every test passes.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

fn to_found(v: &Value) -> Found {
    match v {
        Value::String(s) => Found::String(s.clone()),
        Value::Number(n) => Found::Number(n.to_string()),
        Value::Bool(b) => Found::Bool(*b),
        Value::Null => Found::Null,
        Value::Object(_) => Found::Object,
        Value::Array(_) => Found::Array,
    }
}

#[test]
fn the_rfc_9535_compliance_suite_passes() {
    let Some(file) = suite() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the JSONPath compliance suite is missing (../shared/conformance/jsonpath-cts)"
        );
        eprintln!("skipped: ../shared/conformance/jsonpath-cts/cts.json is missing");
        return;
    };
    let text = std::fs::read_to_string(&file).expect("cts.json");
    let cts: Value = serde_json::from_str(&text).expect("cts.json is JSON");
    let tests = cts["tests"].as_array().expect("tests");
    let (mut passed, mut streamed) = (0, 0);
    let mut failures = Vec::new();
    for t in tests {
        let name = t["name"].as_str().unwrap_or("?");
        let selector = t["selector"].as_str().unwrap_or("");
        let compiled = Query::compile(selector);
        let ok = if t["invalid_selector"].as_bool() == Some(true) {
            compiled.is_err()
        } else {
            match &compiled {
                Err(e) => {
                    failures.push(format!("{name}: refused {selector}: {e}"));
                    continue;
                }
                Ok(q) => {
                    let doc = &t["document"];
                    let got: Vec<Value> = q.all(doc).into_iter().cloned().collect();
                    let accepted: Vec<Vec<Value>> = match t.get("results") {
                        Some(Value::Array(alts)) => alts
                            .iter()
                            .map(|a| a.as_array().cloned().unwrap_or_default())
                            .collect(),
                        _ => vec![t["result"].as_array().cloned().unwrap_or_default()],
                    };
                    let mut ok = accepted.contains(&got);
                    // The streaming scanner agrees on the first node for simple paths.
                    if let (true, Some(simple)) = (ok, q.simple()) {
                        let bytes = serde_json::to_vec(doc).expect("serialize");
                        let mut s = Scanner::with_path(simple, Limits::default());
                        let mut d = None;
                        for chunk in bytes.chunks(3) {
                            if d.is_none() {
                                d = s.feed(chunk).expect("valid document");
                            }
                        }
                        let d = d.or_else(|| s.finish().ok().flatten());
                        let want = match got.first() {
                            Some(v) => Decision::Found(to_found(v)),
                            None => Decision::Absent,
                        };
                        let same = match (&d, &want) {
                            (
                                Some(Decision::Found(Found::Number(a))),
                                Decision::Found(Found::Number(b)),
                            ) => a.parse::<f64>().ok() == b.parse::<f64>().ok(),
                            (Some(d), w) => d == w,
                            (None, _) => false,
                        };
                        if !same {
                            failures.push(format!(
                                "{name}: streaming {selector} gave {d:?}, want {want:?}"
                            ));
                            continue;
                        }
                        streamed += 1;
                    }
                    if !ok && accepted.is_empty() {
                        ok = got.is_empty();
                    }
                    ok
                }
            }
        };
        if ok {
            passed += 1;
        } else if !KNOWN_FAILURES.iter().any(|(n, _)| *n == name) {
            failures.push(format!("{name}: {selector}"));
        }
    }
    eprintln!(
        "JSONPath CTS: {passed} of {} passed ({streamed} also through the streaming scanner)",
        tests.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(streamed > 20, "too few simple paths streamed: {streamed}");
}
