//! Fuzzing the streaming XPath compiler with mutated expressions (see docs/fuzzing.md): no
//! expression panics or hangs `compile`, a syntax error points within the expression, a
//! compiled path evaluates a document without panicking, and libxml2's full XPath 1.0
//! compiler accepts every ASCII expression of the streaming subset.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::time::Duration;

use busbar_libxml::XPathExpr;
use busbar_xml::{compile, evaluate, CompileError, Namespaces, Test};

const NS: [(&str, &str); 4] = [
    ("soapenv", "http://schemas.xmlsoap.org/soap/envelope/"),
    ("m", "http://services.samples/xsd"),
    ("r", "http://someuri"),
    ("p", "urn:two"),
];

/// XPath 1.0's tokens, and what the streaming subset refuses.
const DICTIONARY: &[&[u8]] = &[
    b"/",
    b"//",
    b"[",
    b"]",
    b"[1]",
    b"[0]",
    b"[1.5]",
    b"[last()]",
    b"(",
    b")",
    b"@",
    b"@*",
    b"*",
    b"p:*",
    b"q:",
    b"::",
    b"child::",
    b"descendant-or-self::",
    b"attribute::",
    b"text()",
    b"node()",
    b".",
    b"..",
    b"|",
    b" and ",
    b" or ",
    b" div ",
    b" mod ",
    b"=",
    b"!=",
    b"<=",
    b">",
    b"-",
    b"'",
    b"\"",
    b"$v",
    b",",
    b"1e3",
    b".5",
    b"99999999999999999999",
    b"count(",
    b"concat('a',",
    b" ",
    b"\xc3\xa9",
    b"\xe2\x80\x8c",
    b"\x00",
];

fn check(
    ns: &Namespaces,
    lib_ns: &[(String, String)],
    doc: &[u8],
    input: &[u8],
) -> Result<(), String> {
    let expr = String::from_utf8_lossy(input);
    match compile(&expr, ns) {
        Ok(path) => {
            if path.as_str() != expr {
                return Err(format!("compiled {:?} from {expr:?}", path.as_str()));
            }
            // Evaluating must not panic; its answer is reference.rs's business.
            let _ = evaluate(&path, &Test::Exists, doc);
            // Only ASCII: names are XML 1.0 fifth edition's here and fourth edition's in
            // libxml2 2.9, which differ outside ASCII (U+FFFD starts a name only in the fifth).
            if !expr.is_ascii() {
                return Ok(());
            }
            if let Err(e) = XPathExpr::compile(&expr, lib_ns) {
                return Err(format!(
                    "streaming path {expr:?} is refused by libxml2: {e}"
                ));
            }
            Ok(())
        }
        Err(CompileError::Syntax { position, .. }) if position > expr.len() => Err(format!(
            "syntax error at {position}, past the end of {expr:?} ({} bytes)",
            expr.len()
        )),
        Err(_) => Ok(()),
    }
}

#[test]
fn mutated_expressions_never_panic_the_streaming_compiler() {
    let ns = Namespaces::from_pairs(NS).unwrap();
    let lib_ns: Vec<(String, String)> = NS
        .iter()
        .map(|(p, u)| ((*p).to_owned(), (*u).to_owned()))
        .collect();
    let doc = common::buy_stocks(2048, "IBM", Some(common::ROUTING));
    harness::run(
        harness::Target {
            name: "xpath",
            extra_seeds: Vec::new(),
            dictionary: DICTIONARY,
            max_len: 4096,
            case_timeout: Duration::from_secs(20),
        },
        |input| check(&ns, &lib_ns, &doc, input),
    );
}
