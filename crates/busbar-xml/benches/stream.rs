//! Cost of one routing decision on buyStocks payloads (docs/scenarios.md), whole body in memory.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;

use busbar_xml::{compile, evaluate, Matcher, Namespaces, Test, WellFormed};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn decisions(c: &mut Criterion) {
    let ns = Namespaces::from_pairs([
        ("soapenv", common::SOAP11),
        ("m", "http://services.samples/xsd"),
        ("r", "http://someuri"),
    ])
    .unwrap();
    let ibm = Test::Equals("IBM".to_owned());
    let routing = Test::Equals(common::ROUTING.to_owned());
    let mut g = c.benchmark_group("stream_decision");
    for size in [1024usize, 10_240, 102_400] {
        let doc = common::buy_stocks(size, "IBM", Some(common::ROUTING));
        let orders = doc.windows(7).filter(|w| w == b"<order>").count();
        let symbol = ["IBM", "MSFT", "SUN", "GOOG"][(orders - 1) % 4];
        let last = Test::Equals(symbol.to_owned());
        let top = compile("//order[1]/symbol", &ns).unwrap();
        let deep = compile(&format!("//order[{orders}]/symbol"), &ns).unwrap();
        let header = compile("/soapenv:Envelope/soapenv:Header/r:routing", &ns).unwrap();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("top_order1", size), &doc, |b, d| {
            b.iter(|| assert!(evaluate(&top, &ibm, black_box(d)).unwrap()))
        });
        g.bench_with_input(BenchmarkId::new("deep_last_order", size), &doc, |b, d| {
            b.iter(|| assert!(evaluate(&deep, &last, black_box(d)).unwrap()))
        });
        g.bench_with_input(
            BenchmarkId::new("deep_last_order_16k_chunks", size),
            &doc,
            |b, d| {
                b.iter(|| {
                    let mut m = Matcher::new(&deep, &last);
                    let mut answer = None;
                    for chunk in black_box(d).chunks(16 * 1024) {
                        answer = m.feed(chunk).unwrap();
                        if answer.is_some() {
                            break;
                        }
                    }
                    assert_eq!(answer, Some(true));
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("soap_header", size), &doc, |b, d| {
            b.iter(|| assert!(evaluate(&header, &routing, black_box(d)).unwrap()))
        });
        g.bench_with_input(BenchmarkId::new("well_formed_check", size), &doc, |b, d| {
            b.iter(|| {
                let mut wf = WellFormed::new();
                wf.feed(black_box(d)).unwrap();
                wf.finish().unwrap();
            })
        });
        // The alternative design's second pass alone: quick-xml's NsReader over the whole
        // buffer, reading every event with namespace resolution and doing nothing else.
        let text = String::from_utf8(doc.clone()).unwrap();
        g.bench_with_input(
            BenchmarkId::new("quick_xml_nsreader_scan", size),
            &text,
            |b, d| {
                b.iter(|| {
                    let mut r = quick_xml::NsReader::from_str(black_box(d));
                    let mut n = 0usize;
                    loop {
                        match r.read_resolved_event().unwrap() {
                            (_, quick_xml::events::Event::Eof) => break,
                            _ => n += 1,
                        }
                    }
                    n
                })
            },
        );
    }
    g.finish();
}

/// One start tag just under the 64 KiB token limit, with as many attributes as fit (7,383):
/// the duplicate-attribute check must stay linear in their number.
fn wide_start_tag(c: &mut Criterion) {
    let mut doc = b"<r".to_vec();
    let mut n = 0;
    loop {
        let attr = format!(" a{n}=''");
        if doc.len() + attr.len() + 2 >= busbar_xml::MAX_TOKEN {
            break;
        }
        doc.extend_from_slice(attr.as_bytes());
        n += 1;
    }
    doc.extend_from_slice(b"/>");
    let mut g = c.benchmark_group("wide_start_tag");
    g.throughput(Throughput::Bytes(doc.len() as u64));
    g.bench_with_input(BenchmarkId::new("well_formed_check", n), &doc, |b, d| {
        b.iter(|| {
            let mut wf = WellFormed::new();
            wf.feed(black_box(d)).unwrap();
            wf.finish().unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, decisions, wide_start_tag);
criterion_main!(benches);
