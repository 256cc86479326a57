//! Fuzzing the streaming XML tokenizer with mutated documents (see docs/fuzzing.md): no input
//! panics or hangs it, an error's offset lies within the input, the answer does not depend on
//! how the input is split into chunks, and a route decided early never lets a malformed tail
//! pass the well-formedness check that follows it.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::time::Duration;

use busbar_xml::{compile, Matcher, Namespaces, StreamPath, Test, WellFormed, XmlError};
use common::{feed_chunks, whole, Lcg};

const DICTIONARY: &[&[u8]] = &[
    b"<",
    b">",
    b"</",
    b"/>",
    b"<a>",
    b"</a>",
    b"<order><symbol>IBM</symbol></order>",
    b"<![CDATA[",
    b"]]>",
    b"<!--",
    b"-->",
    b"<?",
    b"?>",
    b"<?xml version=\"1.0\" encoding=\"UTF-16\"?>",
    b"<!DOCTYPE a [<!ENTITY e \"x\">]>",
    b"&amp;",
    b"&e;",
    b"&#",
    b"&#x",
    b"&#xD800;",
    b"&#1114112;",
    b"&#0;",
    b";",
    b"=\"",
    b"'",
    b" xmlns=\"\"",
    b" xmlns:p=\"urn:two\"",
    b" xmlns:xml=\"urn:x\"",
    b" p:",
    b"soapenv:",
    b"\r\n",
    b"\r",
    b"\t",
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xef\xbf\xbe",
    b"\x00",
];

fn routes() -> Vec<(StreamPath, Test)> {
    let ns = Namespaces::from_pairs([
        ("soapenv", "http://schemas.xmlsoap.org/soap/envelope/"),
        ("m", "http://services.samples/xsd"),
        ("r", "http://someuri"),
        ("p", "urn:two"),
    ])
    .unwrap();
    let re = regex::Regex::new("^I.M$").unwrap();
    [
        ("//order[1]/symbol", Test::Equals("IBM".into())),
        (
            "/soapenv:Envelope/soapenv:Header/r:routing",
            Test::Equals("xadmin;server1;community#1.0##".into()),
        ),
        ("//p:b/text()", Test::Exists),
        ("//*[2]/@y", Test::Matches(re.clone())),
        ("/*/*/m:buyStocks//m:symbol", Test::Matches(re)),
    ]
    .into_iter()
    .map(|(p, t)| (compile(p, &ns).unwrap(), t))
    .collect()
}

fn offset(e: &XmlError) -> Option<usize> {
    match e {
        XmlError::Malformed { offset, .. }
        | XmlError::Doctype { offset }
        | XmlError::Limit { offset, .. } => Some(*offset),
        XmlError::UnsupportedEncoding { .. } => None,
    }
}

fn well_formed(doc: &[u8], chunk: usize) -> Result<(), XmlError> {
    let mut w = WellFormed::new();
    for c in doc.chunks(chunk.max(1)) {
        w.feed(c)?;
    }
    w.finish()
}

fn check(routes: &[(StreamPath, Test)], doc: &[u8]) -> Result<(), String> {
    let mut sizes = Lcg(doc.len() as u64 + 1);
    let chunk = (sizes.next() % 40) as usize + 1;

    let wf = well_formed(doc, usize::MAX);
    let wf_chunked = well_formed(doc, chunk);
    if wf != wf_chunked {
        return Err(format!(
            "well-formedness whole {wf:?} but in {chunk}-byte chunks {wf_chunked:?}"
        ));
    }
    if let Err(e) = &wf {
        if offset(e).is_some_and(|o| o > doc.len()) {
            return Err(format!("error offset past the input: {e:?}"));
        }
    }

    for (path, test) in routes {
        let reference = whole(path, test, doc);
        let mut rng = Lcg(chunk as u64);
        let split = feed_chunks(path, test, doc, &mut || (rng.next() % 64) as usize + 1);
        if split != reference {
            return Err(format!(
                "{path}: whole {reference:?}, random chunks {split:?}"
            ));
        }
        if doc.len() <= 4096 {
            let bytewise = feed_chunks(path, test, doc, &mut || 1);
            if bytewise != reference {
                return Err(format!(
                    "{path}: whole {reference:?}, byte by byte {bytewise:?}"
                ));
            }
        }
        match &reference.answer {
            Err(e) => {
                if offset(e).is_some_and(|o| o > doc.len()) {
                    return Err(format!("{path}: error offset past the input: {e:?}"));
                }
                if !matches!(e, XmlError::Limit { .. }) && wf.is_ok() {
                    return Err(format!("{path}: {e:?} on a document found well-formed"));
                }
            }
            Ok(_) => {
                let mut m = Matcher::new(path, test);
                let early = m.feed(doc).map_err(|e| format!("{path}: {e:?} after Ok"))?;
                if early.is_some() {
                    // What the engine does after an early decision: check the tail.
                    let consumed = m.bytes_consumed();
                    let mut tail = m.into_well_formed();
                    let rest = tail.feed(&doc[consumed..]).and_then(|()| tail.finish());
                    if rest.is_ok() != wf.is_ok() {
                        return Err(format!(
                            "{path}: decided early, tail check {rest:?}, whole document {wf:?}"
                        ));
                    }
                } else if let Err(e) = &wf {
                    return Err(format!("{path}: answered at the end, but {e:?}"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn mutated_documents_never_panic_and_answer_alike_at_any_split() {
    let routes = routes();
    harness::run(
        harness::Target {
            name: "xml",
            extra_seeds: vec![common::buy_stocks(2048, "IBM", Some(common::ROUTING))],
            dictionary: DICTIONARY,
            max_len: 64 * 1024,
            case_timeout: Duration::from_secs(20),
        },
        |doc| check(&routes, doc),
    );
}
