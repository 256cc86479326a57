//! Parse and exclusive C14N cost on a ~100 KB SOAP message. Ignored by default; run with
//! `cargo test --release -p busbar-wssec --test c14n_timing -- --ignored --nocapture`.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use busbar_wssec::c14n::exclusive;
use busbar_wssec::dom::{Document, Limits};

const NS_ENV: &str = "http://schemas.xmlsoap.org/soap/envelope/";

fn soap_message(target_len: usize) -> String {
    let mut s = String::from(concat!(
        r#"<?xml version="1.0" encoding="UTF-8"?>"#,
        "\n",
        r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" "#,
        r#"xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd">"#,
        "\n  <soapenv:Header>\n    ",
        r#"<wsse:Security xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd" soapenv:mustUnderstand="1">"#,
        r#"<wsu:Timestamp wsu:Id="TS-1"><wsu:Created>2024-01-01T00:00:00Z</wsu:Created>"#,
        r#"<wsu:Expires>2024-01-01T00:05:00Z</wsu:Expires></wsu:Timestamp></wsse:Security>"#,
        "\n  </soapenv:Header>\n  ",
        r#"<soapenv:Body wsu:Id="id-1"><ord:orders xmlns:ord="urn:example:orders" count="many">"#,
        "\n"
    ));
    let mut i = 0;
    while s.len() < target_len {
        s.push_str(&format!(
            "    <ord:order id=\"o{i}\" status=\"open\" priority=\"{}\">\n      \
             <ord:customer ref=\"c{i}\">Customer &amp; Sons {i}</ord:customer>\n      \
             <ord:line sku=\"SKU-{i}\" qty=\"3\"><ord:price currency=\"EUR\">12.50</ord:price>\
             <ord:note>Deliver before noon; ring twice &lt;door&gt;</ord:note></ord:line>\n    \
             </ord:order>\n",
            i % 5
        ));
        i += 1;
    }
    s.push_str("  </ord:orders></soapenv:Body>\n</soapenv:Envelope>\n");
    s
}

#[test]
#[ignore = "timing figure; run in release mode with --ignored --nocapture"]
fn parse_and_canonicalise_a_100_kb_soap_message() {
    let msg = soap_message(100 * 1024);
    let limits = Limits::default();
    let iterations = 2000;
    let mut out = Vec::with_capacity(msg.len());

    let doc = Document::parse(msg.as_bytes(), &limits).unwrap();
    let body = doc
        .element_children(doc.root())
        .find(|e| doc.is(*e, NS_ENV, "Body"))
        .unwrap();

    // Same-run baseline: quick-xml's event loop alone, which the tree is built over.
    let start = Instant::now();
    for _ in 0..iterations {
        let mut reader = quick_xml::Reader::from_str(black_box(&msg));
        loop {
            match reader.read_event().unwrap() {
                quick_xml::events::Event::Eof => break,
                event => {
                    black_box(&event);
                }
            }
        }
    }
    let events = start.elapsed() / iterations;

    let start = Instant::now();
    for _ in 0..iterations {
        black_box(Document::parse(black_box(msg.as_bytes()), &limits).unwrap());
    }
    let parse = start.elapsed() / iterations;

    let start = Instant::now();
    for _ in 0..iterations {
        out.clear();
        exclusive(&doc, body, &[], false, &mut out).unwrap();
        black_box(&out);
    }
    let c14n = start.elapsed() / iterations;

    let start = Instant::now();
    for _ in 0..iterations {
        let doc = Document::parse(black_box(msg.as_bytes()), &limits).unwrap();
        let body = doc
            .element_children(doc.root())
            .find(|e| doc.is(*e, NS_ENV, "Body"))
            .unwrap();
        out.clear();
        exclusive(&doc, body, &[], false, &mut out).unwrap();
        black_box(&out);
    }
    let both = start.elapsed() / iterations;

    println!(
        "{} byte message, {} nodes: quick-xml events alone {events:?}, parse {parse:?}, \
         c14n of Body {c14n:?} ({} bytes), parse + c14n {both:?}",
        msg.len(),
        doc.node_count(),
        out.len()
    );
}
