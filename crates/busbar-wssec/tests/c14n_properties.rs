//! Property tests over generated and mutated documents: parsing never panics, the limits
//! hold, spans nest, and exclusive C14N is idempotent.
#![allow(clippy::unwrap_used)]

mod xmlgen;

use busbar_wssec::c14n::exclusive_to_vec;
use busbar_wssec::dom::{Document, Limits, NodeId, NodeKind, XmlError};
use xmlgen::Rng;

fn canonical_root(doc: &Document, prefixes: &[&str], comments: bool) -> Vec<u8> {
    exclusive_to_vec(doc, doc.root(), prefixes, comments).unwrap()
}

/// c14n(parse(c14n(x))) == c14n(x) for the subtree at `apex`.
fn assert_idempotent(doc: &Document, apex: NodeId, prefixes: &[&str], comments: bool, src: &str) {
    let Ok(once) = exclusive_to_vec(doc, apex, prefixes, comments) else {
        return;
    };
    let again = Document::parse(&once, &Limits::default()).unwrap_or_else(|e| {
        panic!(
            "canonical form does not reparse: {e}\n  source: {src:?}\n  c14n: {:?}",
            String::from_utf8_lossy(&once)
        )
    });
    let twice = canonical_root(&again, prefixes, comments);
    assert_eq!(
        String::from_utf8_lossy(&twice),
        String::from_utf8_lossy(&once),
        "not idempotent for {src:?} apex {} prefixes {prefixes:?}",
        apex.index()
    );
}

fn assert_spans_nest(doc: &Document) {
    let src = doc.source();
    for e in doc.elements() {
        let span = doc.span(e);
        let content = doc.content_span(e);
        assert_eq!(src[span.start], b'<');
        assert_eq!(src[span.end - 1], b'>');
        assert!(src[span.start + 1..].starts_with(doc.qname(e).as_bytes()));
        assert!(span.start < content.start && content.start <= content.end);
        assert!(content.end <= span.end);
        if content.end == span.end {
            assert_eq!(content.start, content.end);
            assert!(src[..span.end].ends_with(b"/>"));
        } else {
            assert!(src[content.end..span.end].starts_with(b"</"));
        }
        let mut at = content.start;
        for child in doc.children(e) {
            let s = doc.span(child);
            assert!(
                s.start >= at && s.end <= content.end,
                "child outside its parent"
            );
            at = s.end;
            assert_eq!(doc.parent(child), Some(e));
        }
    }
}

#[test]
fn generated_documents_parse_and_canonicalise_idempotently() {
    let mut rng = Rng::new(0xC14E_1DE5);
    let pool = ["#default", "a", "b", "soap", "wsu", "ds", "xml"];
    for _ in 0..2000 {
        let src = xmlgen::document(&mut rng);
        let doc = Document::parse(src.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("generated document refused: {e}\n{src:?}"));
        assert_spans_nest(&doc);
        for comments in [false, true] {
            assert_idempotent(&doc, doc.root(), &[], comments, &src);
        }
        for apex in doc.elements() {
            let prefixes: Vec<&str> = pool.iter().copied().filter(|_| rng.chance(30)).collect();
            let comments = rng.chance(50);
            assert_idempotent(&doc, apex, &prefixes, comments, &src);
        }
    }
}

#[test]
fn canonical_form_of_a_whole_document_is_a_fixed_point() {
    let mut rng = Rng::new(42);
    for _ in 0..500 {
        let src = xmlgen::document(&mut rng);
        let doc = Document::parse(src.as_bytes(), &Limits::default()).unwrap();
        let once = canonical_root(&doc, &[], true);
        let reparsed = Document::parse(&once, &Limits::default()).unwrap();
        // A canonical document serialises to itself byte for byte.
        assert_eq!(
            reparsed.source(),
            canonical_root(&reparsed, &[], true).as_slice()
        );
    }
}

const SNIPPETS: &[&str] = &[
    "<",
    ">",
    "&",
    "&amp;",
    "&foo;",
    "&#0;",
    "&#x1F600;",
    "\"",
    "'",
    "]]>",
    "<!--",
    "-->",
    "<![CDATA[",
    "<!DOCTYPE x>",
    "<?pi?>",
    "<?xml version='1.0'?>",
    "xmlns=''",
    " xmlns:p='u'",
    " p:a='1'",
    "</a>",
    "<a>",
    "<b/>",
    "\r",
    "\u{0}",
    "\u{FFFF}",
    "\u{e9}",
    ":",
    "=",
    "/",
];

fn mutate(rng: &mut Rng, src: &str) -> Vec<u8> {
    let mut bytes = src.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(4) {
            0 => {
                let end = (at + 1 + rng.below(8)).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            1 => {
                let snippet = rng.pick(SNIPPETS).as_bytes();
                bytes.splice(at..at, snippet.iter().copied());
            }
            2 => {
                if at < bytes.len() {
                    bytes[at] = (rng.next() & 0xFF) as u8;
                }
            }
            _ => {
                let end = (at + rng.below(16)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
        }
    }
    bytes
}

#[test]
fn mutated_documents_never_panic_and_stay_idempotent_when_accepted() {
    let mut rng = Rng::new(7);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..6000 {
        let src = xmlgen::document(&mut rng);
        let bytes = mutate(&mut rng, &src);
        match Document::parse(&bytes, &Limits::default()) {
            Ok(doc) => {
                accepted += 1;
                assert_spans_nest(&doc);
                let label = String::from_utf8_lossy(&bytes).into_owned();
                for apex in doc.elements() {
                    assert_idempotent(&doc, apex, &["#default", "a"], true, &label);
                }
                for i in 0..doc.node_count() {
                    let id = doc.node_at(i).unwrap();
                    if doc.kind(id) != NodeKind::Element {
                        let _ = exclusive_to_vec(&doc, id, &[], true);
                    }
                }
            }
            Err(e) => {
                refused += 1;
                // Every refusal names a position inside (or just past) the input.
                if let Some(at) = e.offset() {
                    assert!(at <= bytes.len(), "{e} beyond {} bytes", bytes.len());
                }
            }
        }
    }
    assert!(
        accepted > 100 && refused > 100,
        "accepted {accepted}, refused {refused}"
    );
}

#[test]
fn small_limits_are_enforced_on_generated_documents() {
    let mut rng = Rng::new(99);
    for _ in 0..2000 {
        let src = xmlgen::document(&mut rng);
        let limits = Limits {
            max_depth: 1 + rng.below(6),
            max_nodes: 1 + rng.below(30),
            max_attributes: rng.below(4),
        };
        match Document::parse(src.as_bytes(), &limits) {
            Ok(doc) => {
                assert!(doc.node_count() <= limits.max_nodes);
                for e in doc.elements() {
                    let depth = std::iter::successors(Some(e), |n| doc.parent(*n)).count();
                    assert!(depth <= limits.max_depth);
                    let attrs = doc.attributes(e).len() + doc.ns_decls(e).len();
                    assert!(attrs <= limits.max_attributes);
                }
            }
            Err(XmlError::TooDeep { .. })
            | Err(XmlError::TooManyNodes { .. })
            | Err(XmlError::TooManyAttributes { .. }) => {}
            Err(e) => panic!("unexpected refusal {e} for {src:?}"),
        }
    }
}
