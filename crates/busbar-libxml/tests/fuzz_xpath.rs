//! Fuzzing libxml2's XPath compiler through `XPathExpr::compile` with mutated expressions (see
//! docs/fuzzing.md): no expression panics, crashes or hangs compiling or evaluating it over a
//! buyStocks document, and every failure is reported as the error of its stage.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::time::Duration;

use busbar_libxml::{Document, ErrorKind, XPathExpr};

const NS: [(&str, &str); 4] = [
    ("soapenv", "http://schemas.xmlsoap.org/soap/envelope/"),
    ("m", "http://services.samples/xsd"),
    ("r", "http://someuri"),
    ("p", "urn:two"),
];

/// XPath 1.0's tokens and functions.
const DICTIONARY: &[&[u8]] = &[
    b"/",
    b"//",
    b"[",
    b"]",
    b"[1]",
    b"[last()]",
    b"(",
    b")",
    b"@",
    b"*",
    b"p:*",
    b"q:",
    b"::",
    b"ancestor::",
    b"following-sibling::",
    b"namespace::",
    b"preceding::",
    b"text()",
    b"node()",
    b"processing-instruction('x')",
    b".",
    b"..",
    b"|",
    b" and ",
    b" or ",
    b" div ",
    b" mod ",
    b"=",
    b"!=",
    b"<",
    b"-",
    b"'",
    b"\"",
    b"$v",
    b",",
    b"1e3",
    b"-0",
    b"99999999999999999999",
    b"count(",
    b"sum(",
    b"id(",
    b"lang(",
    b"substring(",
    b"translate(",
    b"normalize-space(",
    b"string-length(",
    b"concat('a',",
    b"document('x')",
    b"key('k',",
    b"((((((((",
    b" ",
    b"\xc3\xa9",
    b"\x00",
];

fn check(ns: &[(String, String)], doc: &Document, input: &[u8]) -> Result<(), String> {
    let expr = String::from_utf8_lossy(input);
    match XPathExpr::compile(&expr, ns) {
        Ok(compiled) => match doc.eval(&compiled) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.kind, ErrorKind::XPathEval | ErrorKind::Limit) => Ok(()),
            Err(e) => Err(format!(
                "evaluating {expr:?}: error of kind {:?}: {e}",
                e.kind
            )),
        },
        Err(e) if e.kind == ErrorKind::XPathCompile => Ok(()),
        Err(e) => Err(format!(
            "compiling {expr:?}: error of kind {:?}: {e}",
            e.kind
        )),
    }
}

#[test]
fn mutated_expressions_never_crash_libxml2_xpath() {
    let ns: Vec<(String, String)> = NS
        .iter()
        .map(|(p, u)| ((*p).to_owned(), (*u).to_owned()))
        .collect();
    let doc = Document::parse(&common::payload::buy_stocks(2048)).unwrap();
    harness::run(
        harness::Target {
            name: "xpath",
            extra_seeds: Vec::new(),
            dictionary: DICTIONARY,
            max_len: 4096,
            case_timeout: Duration::from_secs(20),
        },
        |input| check(&ns, &doc, input),
    );
}
