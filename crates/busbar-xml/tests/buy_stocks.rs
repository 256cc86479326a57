//! Routing decisions on the benchmark's buyStocks payloads, at every size and every split.
#![allow(clippy::unwrap_used)]

mod common;

use busbar_xml::{compile, Matcher, Namespaces, StreamPath, Test, MAX_TOKEN};
use common::*;

fn ns() -> Namespaces {
    Namespaces::from_pairs([
        ("soapenv", SOAP11),
        ("m", "http://services.samples/xsd"),
        ("r", "http://someuri"),
    ])
    .unwrap()
}

fn path(e: &str) -> StreamPath {
    compile(e, &ns()).unwrap()
}

fn ibm() -> Test {
    Test::Equals("IBM".to_owned())
}

/// Sizes around every internal limit and the classic buffer boundaries.
fn sizes() -> Vec<usize> {
    let mut v = vec![512, 1024, 5120, 10240, 102_400];
    for center in [4096usize, 8192, 16_384, 65_536, MAX_TOKEN] {
        for d in [-101i64, -1, 0, 1, 101] {
            v.push((center as i64 + d) as usize);
        }
    }
    v
}

#[test]
fn generator_makes_exact_benchmark_sizes_with_ibm_first() {
    for size in sizes().into_iter().chain([1 << 20]) {
        let doc = buy_stocks(size, "IBM", Some(ROUTING));
        assert_eq!(doc.len(), size);
        assert_eq!(offset_of(&doc, "<order>"), 250);
    }
    let doc = buy_stocks(1024, "IBM", Some(ROUTING));
    assert_eq!(doc.iter().filter(|&&b| b == b'\n').count(), 4 + 7 + 3);
    assert_eq!(doc.windows(7).filter(|w| w == b"<order>").count(), 7);
}

#[test]
fn first_order_ibm_routes_true_at_every_size_and_split() {
    let plain = path("//order[1]/symbol");
    let qualified = path("/soapenv:Envelope/soapenv:Body/m:buyStocks/order[1]/symbol");
    for size in sizes() {
        let doc = buy_stocks(size, "IBM", Some(ROUTING));
        let symbol_end = offset_of(&doc, "</symbol>") + "</symbol>".len();
        for p in [&plain, &qualified] {
            let out = split_invariant(p, &ibm(), &doc);
            assert_eq!(out.answer, Ok(true), "{p} at {size}");
            // Decided right after the first symbol closes: the rest is never read.
            assert_eq!(out.consumed, Some(symbol_end), "{p} at {size}");
        }
    }
}

#[test]
fn non_ibm_first_order_routes_false_even_though_ibm_follows() {
    for size in sizes() {
        let doc = buy_stocks(size, "MSFT", Some(ROUTING));
        for e in [
            "//order[1]/symbol",
            "/soapenv:Envelope/soapenv:Body/m:buyStocks/order[1]/symbol",
        ] {
            let out = split_invariant(&path(e), &ibm(), &doc);
            assert_eq!(out.answer, Ok(false), "{e} at {size}");
        }
        // An IBM order exists further down (the 5th), so "any order" is true.
        if size >= 1024 {
            let out = split_invariant(&path("//order/symbol"), &ibm(), &doc);
            assert_eq!(out.answer, Ok(true));
        }
    }
}

fn order_count(doc: &[u8]) -> usize {
    doc.windows(7).filter(|w| w == b"<order>").count()
}

#[test]
fn deep_order_is_found_at_its_position() {
    let doc = buy_stocks(102_400, "IBM", Some(ROUTING));
    let n = order_count(&doc);
    // Records cycle IBM, MSFT, SUN, GOOG: the last order's symbol follows from its index.
    let symbol = ["IBM", "MSFT", "SUN", "GOOG"][(n - 1) % 4];
    let out = split_invariant(
        &path(&format!("//order[{n}]/symbol")),
        &Test::Equals(symbol.into()),
        &doc,
    );
    assert_eq!(out.answer, Ok(true));
    let out = split_invariant(
        &path(&format!("//order[{}]/symbol", n + 1)),
        &Test::Exists,
        &doc,
    );
    assert_eq!(out.answer, Ok(false));
    // The padded last volume is read whole, across every chunk boundary.
    let volume = path(&format!("//order[{n}]/volume"));
    let padded = Test::Matches(regex::Regex::new("^[0-9]+7{20,}$").unwrap());
    assert_eq!(split_invariant(&volume, &padded, &doc).answer, Ok(true));
}

#[test]
fn soap_header_routing_decides_before_the_body_is_read() {
    let p = path("/soapenv:Envelope/soapenv:Header/r:routing");
    let good = Test::Equals(ROUTING.to_owned());
    for size in [512, 1024, 16_384, 102_400] {
        let doc = buy_stocks(size, "IBM", Some(ROUTING));
        let body = offset_of(&doc, "<soapenv:Body>");
        let out = split_invariant(&p, &good, &doc);
        assert_eq!(out.answer, Ok(true));
        assert!(out.consumed.unwrap() < body);

        let wrong = buy_stocks(size, "IBM", Some("xadmin;server1;community#1.0#"));
        let body = offset_of(&wrong, "<soapenv:Body>");
        let out = split_invariant(&p, &good, &wrong);
        assert_eq!(out.answer, Ok(false));
        // Decided at </soapenv:Header>.
        assert_eq!(
            out.consumed,
            Some(offset_of(&wrong, "</soapenv:Header>") + 17)
        );
        assert!(out.consumed.unwrap() < body);

        let missing = buy_stocks(size, "IBM", None);
        let body = offset_of(&missing, "<soapenv:Body>");
        let out = split_invariant(&p, &good, &missing);
        assert_eq!(out.answer, Ok(false));
        assert!(out.consumed.unwrap() < body);
    }
}

#[test]
fn soap_header_route_without_a_header_decides_at_the_start_of_body() {
    let p = path("/soapenv:Envelope/soapenv:Header/r:routing");
    let doc = format!(
        "<soapenv:Envelope xmlns:soapenv=\"{SOAP11}\"><soapenv:Body><x/></soapenv:Body></soapenv:Envelope>"
    );
    let doc = doc.as_bytes();
    let out = split_invariant(&p, &Test::Exists, doc);
    assert_eq!(out.answer, Ok(false));
    assert_eq!(out.consumed, Some(offset_of(doc, "<x/>")));
}

#[test]
fn soap_12_header_is_matched_by_its_own_namespace_only() {
    let ns12 = Namespaces::from_pairs([
        ("env", "http://www.w3.org/2003/05/soap-envelope"),
        ("r", "http://someuri"),
    ])
    .unwrap();
    let p = compile("/env:Envelope/env:Header/r:routing", &ns12).unwrap();
    let v12 = format!(
        "<e:Envelope xmlns:e='http://www.w3.org/2003/05/soap-envelope'><e:Header><routing xmlns='http://someuri'>{ROUTING}</routing></e:Header><e:Body/></e:Envelope>"
    );
    assert_eq!(
        split_invariant(&p, &Test::Equals(ROUTING.into()), v12.as_bytes()).answer,
        Ok(true)
    );
    let v11 = buy_stocks(1024, "IBM", Some(ROUTING));
    assert_eq!(split_invariant(&p, &Test::Exists, &v11).answer, Ok(false));
}

#[test]
fn match_in_the_first_chunk_and_in_the_last_one() {
    let doc = buy_stocks(60_000, "IBM", Some(ROUTING));
    let chunks: Vec<&[u8]> = doc.chunks(16_384).collect();
    // First chunk: the header alone decides.
    let p = path("/soapenv:Envelope/soapenv:Header/r:routing");
    let t = Test::Equals(ROUTING.into());
    let mut m = Matcher::new(&p, &t);
    assert_eq!(m.feed(chunks[0]).unwrap(), Some(true));
    // Last chunk: the last order, or the end of the root for an order that does not exist.
    let n = order_count(&doc);
    for (e, want) in [
        (format!("//order[{n}]/volume"), true),
        (format!("//order[{}]", n + 1), false),
    ] {
        let p = path(&e);
        let mut m = Matcher::new(&p, &Test::Exists);
        for c in &chunks[..chunks.len() - 1] {
            assert_eq!(m.feed(c).unwrap(), None, "{e}");
        }
        assert_eq!(m.feed(chunks[chunks.len() - 1]).unwrap(), Some(want), "{e}");
        assert_eq!(m.finish(), Ok(want));
    }
}

#[test]
fn one_mebibyte_document_is_read_in_network_sized_chunks() {
    let doc = buy_stocks(1 << 20, "IBM", Some(ROUTING));
    for (e, t, want) in [
        ("//order[1]/symbol", ibm(), true),
        ("//order/symbol", Test::Equals("NONE".into()), false),
        ("//order[9000]/volume", Test::Exists, true),
        ("//order[20000]/volume", Test::Exists, false),
    ] {
        let p = path(e);
        let reference = whole(&p, &t, &doc);
        assert_eq!(reference.answer, Ok(want), "{e}");
        for n in [1usize, 4096, 16_384, 65_535] {
            assert_eq!(
                feed_chunks(&p, &t, &doc, &mut || n),
                reference,
                "{e} in {n}-byte chunks"
            );
        }
    }
}
