//! Random documents and random subset paths: the streaming answer, at any split, equals an
//! independent DOM evaluation of the XPath 1.0 definitions over a quick-xml parse.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use busbar_xml::{compile, Namespaces, Test};
use common::*;
use proptest::prelude::*;

const URIS: [&str; 3] = ["urn:one", "urn:two", "urn:three"];
const PREFIXES: [&str; 3] = ["p", "q", "r"];
const LOCALS: [&str; 3] = ["a", "b", "c"];
/// The path's own bindings: p and q as in documents, r is not bound in paths.
const PATH_NS: [(&str, &str); 2] = [("p", "urn:one"), ("q", "urn:two")];

#[derive(Debug, Clone)]
enum Bit {
    Word(&'static str),
    Cdata(&'static str),
    Comment,
    Pi,
}

#[derive(Debug, Clone)]
struct GElem {
    prefix: Option<usize>,
    local: usize,
    /// (prefix or default, uri index or none = undeclare default)
    decls: Vec<(Option<usize>, Option<usize>)>,
    attrs: Vec<(Option<usize>, usize, &'static str)>,
    children: Vec<GChild>,
}

#[derive(Debug, Clone)]
enum GChild {
    Text(Vec<Bit>),
    Elem(GElem),
}

fn bit() -> impl Strategy<Value = Bit> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "x", "y", "IBM", " ", "\n", "&amp;", "&lt;", "&#65;", "&#x263A;", "é", "😀", ">", "a]",
            "a&gt;b", "\t",
        ])
        .prop_map(Bit::Word),
        1 => prop::sample::select(vec!["x", "<&>", "]]", "a]b", ""]).prop_map(Bit::Cdata),
        1 => Just(Bit::Comment),
        1 => Just(Bit::Pi),
    ]
}

fn elem() -> impl Strategy<Value = GElem> {
    let leaf = (
        prop::option::of(0..3usize),
        0..3usize,
        prop::collection::vec(
            (prop::option::of(0..3usize), prop::option::of(0..3usize)),
            0..2,
        ),
        prop::collection::vec(
            (
                prop::option::of(0..3usize),
                0..3usize,
                prop::sample::select(vec!["x", "IBM", "a&amp;b", "&#65; z", "", "1\t2"]),
            ),
            0..3,
        ),
        prop::collection::vec(prop::collection::vec(bit(), 1..4), 0..2),
    )
        .prop_map(|(prefix, local, decls, attrs, texts)| GElem {
            prefix,
            local,
            decls,
            attrs,
            children: texts.into_iter().map(GChild::Text).collect(),
        });
    leaf.prop_recursive(4, 40, 5, |inner| {
        (
            (
                prop::option::of(0..3usize),
                0..3usize,
                prop::collection::vec(
                    (prop::option::of(0..3usize), prop::option::of(0..3usize)),
                    0..2,
                ),
                prop::collection::vec(
                    (
                        prop::option::of(0..3usize),
                        0..3usize,
                        prop::sample::select(vec!["x", "y"]),
                    ),
                    0..2,
                ),
            ),
            prop::collection::vec(
                prop_oneof![
                    2 => inner.prop_map(GChild::Elem),
                    1 => prop::collection::vec(bit(), 1..4).prop_map(GChild::Text),
                ],
                0..5,
            ),
        )
            .prop_map(|((prefix, local, decls, attrs), children)| GElem {
                prefix,
                local,
                decls,
                attrs,
                children,
            })
    })
}

fn render_elem(e: &GElem, scope: &BTreeMap<String, String>, out: &mut String) {
    let mut scope = scope.clone();
    let mut decl_text = String::new();
    let mut declared: Vec<String> = Vec::new();
    let mut declare = |p: String, uri: String, scope: &mut BTreeMap<String, String>| {
        if declared.contains(&p) {
            return;
        }
        if p.is_empty() {
            decl_text.push_str(&format!(" xmlns='{uri}'"));
        } else {
            decl_text.push_str(&format!(" xmlns:{p}='{uri}'"));
        }
        declared.push(p.clone());
        scope.insert(p, uri);
    };
    for (p, u) in &e.decls {
        match p {
            None => declare(
                String::new(),
                u.map_or(String::new(), |u| URIS[u].to_owned()),
                &mut scope,
            ),
            Some(p) => declare(
                PREFIXES[*p].to_owned(),
                URIS[u.unwrap_or(*p)].to_owned(),
                &mut scope,
            ),
        }
    }
    // Prefixes in use but not in scope get declared here.
    let used = e
        .prefix
        .iter()
        .chain(e.attrs.iter().filter_map(|a| a.0.as_ref()));
    for p in used.copied().collect::<Vec<_>>() {
        let name = PREFIXES[p].to_owned();
        if !scope.contains_key(&name) {
            declare(name, URIS[(p + e.local) % 3].to_owned(), &mut scope);
        }
    }
    let qname = |p: Option<usize>, l: usize| match p {
        Some(p) => format!("{}:{}", PREFIXES[p], LOCALS[l]),
        None => LOCALS[l].to_owned(),
    };
    let name = qname(e.prefix, e.local);
    out.push('<');
    out.push_str(&name);
    out.push_str(&decl_text);
    let mut seen: Vec<(Option<String>, usize)> = Vec::new();
    for (p, l, v) in &e.attrs {
        let expanded = (p.map(|p| scope[PREFIXES[p]].clone()), *l);
        if seen.contains(&expanded) {
            continue;
        }
        seen.push(expanded);
        out.push_str(&format!(" {}=\"{v}\"", qname(*p, *l)));
    }
    if e.children.is_empty() {
        out.push_str("/>");
        return;
    }
    out.push('>');
    for c in &e.children {
        match c {
            GChild::Elem(x) => render_elem(x, &scope, out),
            GChild::Text(bits) => {
                for b in bits {
                    match b {
                        Bit::Word(w) => out.push_str(w),
                        Bit::Cdata(c) => out.push_str(&format!("<![CDATA[{c}]]>")),
                        Bit::Comment => out.push_str("<!-- c -->"),
                        Bit::Pi => out.push_str("<?pi d?>"),
                    }
                }
            }
        }
    }
    out.push_str(&format!("</{name}>"));
}

fn step() -> impl Strategy<Value = TStep> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["p", "q"])),
        prop::sample::select(vec!["a", "b", "c", "*"]),
        prop::option::of(1..4u32),
    )
        .prop_map(|(desc, prefix, local, pos)| TStep {
            desc,
            kind: TKind::Elem(prefix, local),
            pos,
        })
}

fn steps() -> impl Strategy<Value = Vec<TStep>> {
    (
        prop::collection::vec(step(), 1..4),
        prop_oneof![
            3 => Just(None),
            1 => (any::<bool>(), prop::option::of(1..3u32))
                .prop_map(|(desc, pos)| Some(TStep { desc, kind: TKind::Text, pos })),
            1 => (
                any::<bool>(),
                prop::option::of(prop::sample::select(vec!["p", "q"])),
                prop::sample::select(vec!["a", "b", "c", "*"]),
            )
                .prop_map(|(desc, p, l)| Some(TStep { desc, kind: TKind::Attr(p, l), pos: None })),
        ],
    )
        .prop_map(|(mut s, last)| {
            s.extend(last);
            s
        })
}

fn test_case() -> impl Strategy<Value = Test> {
    prop_oneof![
        1 => Just(Test::Exists),
        3 => prop::sample::select(vec!["x", "y", "IBM", "xy", "&", "<&>", "1 2", "A z", "☺", ""])
            .prop_map(|s| Test::Equals(s.to_owned())),
        1 => prop::sample::select(vec!["^x", "y$", "IBM", "é", "^$", "\\]"])
            .prop_map(|r| Test::Matches(regex::Regex::new(r).unwrap())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn streaming_answer_equals_the_dom_reference(
        root in elem(),
        path_steps in steps(),
        test in test_case(),
        seed in any::<u64>(),
    ) {
        let mut doc = String::new();
        render_elem(&root, &BTreeMap::new(), &mut doc);
        let dom = parse_reference(&doc);
        let expected = reference_answer(&reference_values(&dom, &path_steps, &PATH_NS), &test);
        let expr = render(&path_steps);
        let ns = Namespaces::from_pairs(PATH_NS).unwrap();
        let path = compile(&expr, &ns).unwrap();
        let full = whole(&path, &test, doc.as_bytes());
        prop_assert_eq!(&full.answer, &Ok(expected), "{} on {}", expr, doc);
        let mut rng = Lcg(seed);
        let random = feed_chunks(&path, &test, doc.as_bytes(), &mut || (rng.next() % 9) as usize + 1);
        prop_assert_eq!(&random, &full);
        let bytes = feed_chunks(&path, &test, doc.as_bytes(), &mut || 1);
        prop_assert_eq!(&bytes, &full);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Corrupted documents: never a panic, and the same answer or error at every split.
    #[test]
    fn corrupted_documents_give_the_same_outcome_at_any_split(
        root in elem(),
        edits in prop::collection::vec(
            (any::<prop::sample::Index>(), prop::sample::select(vec![
                b'<', b'>', b'&', b'/', b'"', b'\'', b'=', b':', b'!', b'?', b'-', b']', b'[', 0u8,
                0xC3, 0xA9, 0xFF, b'\r', b' ', b'x',
            ])),
            1..4,
        ),
        steps in steps(),
        test in test_case(),
        seed in any::<u64>(),
    ) {
        let mut doc = String::new();
        render_elem(&root, &BTreeMap::new(), &mut doc);
        let mut doc = doc.into_bytes();
        for (i, b) in edits {
            let k = i.index(doc.len());
            doc[k] = b;
        }
        let ns = Namespaces::from_pairs(PATH_NS).unwrap();
        let path = compile(&render(&steps), &ns).unwrap();
        let full = whole(&path, &test, &doc);
        let mut rng = Lcg(seed);
        let random = feed_chunks(&path, &test, &doc, &mut || (rng.next() % 9) as usize + 1);
        prop_assert_eq!(&random, &full);
        let bytes = feed_chunks(&path, &test, &doc, &mut || 1);
        prop_assert_eq!(&bytes, &full);
    }
}
