//! Cost of the tree parse and of exclusive canonicalisation of a SOAP Body, on buyStocks-shaped
//! envelopes (one `order` element of four children per record, as the benchmark payloads).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use busbar_wssec::c14n;
use busbar_wssec::dom::{Document, Limits};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn envelope(size: usize) -> Vec<u8> {
    let head = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
        <soapenv:Header/><soapenv:Body><m:buyStocks xmlns:m=\"http://services.samples/xsd\">\n";
    let tail = "</m:buyStocks></soapenv:Body></soapenv:Envelope>";
    let mut doc = head.to_owned();
    let mut i = 0;
    while doc.len() + tail.len() < size {
        doc.push_str(&format!(
            "<order><symbol>S{i}</symbol><buyerID>buyer{i}</buyerID><price>{}.{:02}</price><volume>{}</volume></order>\n",
            i % 200,
            i % 100,
            i * 7 % 10_000
        ));
        i += 1;
    }
    doc.push_str(tail);
    doc.into_bytes()
}

fn body(doc: &Document) -> busbar_wssec::dom::NodeId {
    let root = doc.root();
    let mut children = doc.element_children(root);
    let _header = children.next();
    children.next().unwrap()
}

fn c14n_bench(c: &mut Criterion) {
    let limits = Limits::default();
    let mut g = c.benchmark_group("wssec_tree");
    for size in [1024usize, 10_240, 102_400] {
        let src = envelope(size);
        g.throughput(Throughput::Bytes(src.len() as u64));
        g.bench_with_input(BenchmarkId::new("parse", size), &src, |b, s| {
            b.iter(|| Document::parse(black_box(s), &limits).unwrap())
        });
        let doc = Document::parse(&src, &limits).unwrap();
        let node = body(&doc);
        let mut out = Vec::new();
        g.bench_with_input(
            BenchmarkId::new("exclusive_c14n_body", size),
            &doc,
            |b, d| {
                b.iter(|| {
                    out.clear();
                    c14n::exclusive(black_box(d), node, &[], false, &mut out).unwrap();
                    out.len()
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, c14n_bench);
criterion_main!(benches);
