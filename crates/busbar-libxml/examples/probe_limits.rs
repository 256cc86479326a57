//! What the pre-parse limits cost and save (docs/security.md):
//! `cargo run --release -p busbar-libxml --example probe_limits`.
//!
//! Prints the time to refuse an element with 12,500 and 50,000 attributes, the time libxml2
//! takes for the same input with the attribute and start-tag limits lifted, and the cost of the
//! scan on a dense 1 MB document next to the parse itself.

use std::time::Instant;

use busbar_libxml::{Document, ParseLimits};

fn wide(n: usize) -> Vec<u8> {
    let mut doc = b"<r".to_vec();
    for i in 0..n {
        doc.extend_from_slice(format!(" attr{i}=\"x\"").as_bytes());
    }
    doc.extend_from_slice(b"/>");
    doc
}

fn main() {
    let lifted = ParseLimits {
        max_attributes: usize::MAX,
        max_start_tag: usize::MAX,
        ..Default::default()
    };
    for n in [12_500usize, 50_000] {
        let doc = wide(n);
        let t = Instant::now();
        let refused = Document::parse(&doc).err().map(|e| e.message);
        println!(
            "{n} attributes ({} bytes): {refused:?} in {:?}",
            doc.len(),
            t.elapsed()
        );
        let t = Instant::now();
        let parsed = Document::parse_with_limits(&doc, &lifted).is_ok();
        println!("  limits lifted: parsed={parsed} in {:?}", t.elapsed());
    }

    let order = b"<order><symbol>IBM</symbol><buyerID>asankha</buyerID><price>140.34</price><volume>2000</volume></order>";
    let mut body = b"<m:buyStocks xmlns:m='urn:m'>".to_vec();
    while body.len() < 1 << 20 {
        body.extend_from_slice(order);
    }
    // The same megabyte with an over-wide element at its very end: scanned to the end, then
    // refused without parsing.
    let mut late = body.clone();
    late.extend_from_slice(&wide(300)[..wide(300).len() - 2]);
    late.extend_from_slice(b"/></m:buyStocks>");
    body.extend_from_slice(b"</m:buyStocks>");
    for _ in 0..3 {
        let t = Instant::now();
        let scanned = Document::parse(&late).is_err();
        let scan = t.elapsed();
        let t = Instant::now();
        let parsed = Document::parse(&body).is_ok();
        println!(
            "1 MB: scan alone {scan:?} (refused={scanned}), scan and parse {:?} (parsed={parsed})",
            t.elapsed()
        );
    }
}
