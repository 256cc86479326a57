//! Per-step cost of the XSLTProxy request transform (reverse element names) at the benchmark's
//! 1 KB, 10 KB and 100 KB buyStocks sizes: parse, transform + serialise, the whole
//! bytes-to-bytes step, and serialising a parsed input of the same size.

use std::path::Path;

use busbar_libxml::{Document, DocumentAccess, Stylesheet};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

#[path = "../tests/common/payload.rs"]
mod payload;

fn steps(c: &mut Criterion) {
    busbar_libxml::init();
    let sheet_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xslt/reverse-request.xsl");
    let sheet = match Stylesheet::compile_file(&sheet_path, DocumentAccess::Off) {
        Ok(sheet) => sheet,
        Err(e) => panic!("reverse-request.xsl must compile: {e}"),
    };
    let mut group = c.benchmark_group("libxslt");
    for size in [1024usize, 10 * 1024, 100 * 1024] {
        let input = payload::buy_stocks(size);
        let doc = match Document::parse(&input) {
            Ok(doc) => doc,
            Err(e) => panic!("payload must parse: {e}"),
        };
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("parse", size), &input, |b, input| {
            b.iter(|| Document::parse(input).map(std::hint::black_box))
        });
        group.bench_with_input(
            BenchmarkId::new("transform+serialize", size),
            &doc,
            |b, doc| {
                b.iter(|| {
                    sheet
                        .transform(doc, &[])
                        .map(|t| std::hint::black_box(t.bytes))
                })
            },
        );
        group.bench_with_input(BenchmarkId::new("serialize-input", size), &doc, |b, doc| {
            b.iter(|| std::hint::black_box(doc.to_bytes()))
        });
        group.bench_with_input(
            BenchmarkId::new("parse+transform+serialize", size),
            &input,
            |b, input| {
                b.iter(|| {
                    sheet
                        .transform_bytes(input, &[])
                        .map(|t| std::hint::black_box(t.bytes))
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
