//! What the reader accepts and refuses, and that every split gives the same answer or error.
#![allow(clippy::unwrap_used)]

mod common;

use busbar_xml::{compile, evaluate, Matcher, Namespaces, StreamPath, Test, WellFormed, XmlError};
use common::*;

fn ns() -> Namespaces {
    Namespaces::from_pairs([("p", "urn:one"), ("q", "urn:two")]).unwrap()
}

fn path(e: &str) -> StreamPath {
    compile(e, &ns()).unwrap()
}

fn eq(s: &str) -> Test {
    Test::Equals(s.to_owned())
}

/// Every two-way split as well as the standard chunkings.
fn answer(e: &str, t: &Test, doc: &str) -> Result<bool, XmlError> {
    let p = path(e);
    let out = split_invariant(&p, t, doc.as_bytes());
    for cut in 0..=doc.len() {
        let mut first = true;
        let got = feed_chunks(&p, t, doc.as_bytes(), &mut || {
            let n = if first { cut.max(1) } else { usize::MAX };
            first = false;
            n
        });
        assert_eq!(got, out, "split at {cut}: {e} on {doc}");
    }
    out.answer
}

#[test]
fn namespaces_are_matched_by_uri_not_prefix() {
    let doc = "<x:a xmlns:x='urn:one'><y:b xmlns:y='urn:one'>v</y:b><b>w</b></x:a>";
    assert_eq!(answer("/p:a/p:b", &eq("v"), doc), Ok(true));
    assert_eq!(answer("/p:a/b", &eq("w"), doc), Ok(true));
    assert_eq!(answer("/p:a/q:b", &Test::Exists, doc), Ok(false));
    assert_eq!(answer("/a", &Test::Exists, doc), Ok(false));
}

#[test]
fn default_namespace_applies_to_elements_not_attributes_and_can_be_undeclared() {
    let doc = "<a xmlns='urn:two' k='1'><b><c xmlns=''>in-none</c></b><c>in-two</c></a>";
    assert_eq!(answer("/q:a/@k", &eq("1"), doc), Ok(true));
    assert_eq!(answer("/q:a/@q:k", &Test::Exists, doc), Ok(false));
    assert_eq!(answer("/q:a/q:b/c", &eq("in-none"), doc), Ok(true));
    assert_eq!(answer("/q:a/q:c", &eq("in-two"), doc), Ok(true));
    assert_eq!(answer("//q:c", &eq("in-none"), doc), Ok(false));
}

#[test]
fn redeclared_prefix_is_scoped_to_its_element() {
    let doc = "<p:a xmlns:p='urn:one'><p:b xmlns:p='urn:two'>two</p:b><p:b>one</p:b></p:a>";
    assert_eq!(answer("/p:a/q:b", &eq("two"), doc), Ok(true));
    assert_eq!(answer("/p:a/p:b", &eq("one"), doc), Ok(true));
    assert_eq!(answer("/p:a/p:b", &eq("two"), doc), Ok(false));
}

#[test]
fn string_value_joins_descendant_text_cdata_and_references_but_not_comments_or_pis() {
    let doc = "<r><s>A<!-- no -->T<?pi no?>&amp;<i>T</i><![CDATA[<&>]]>&#x263A;&#65;</s></r>";
    assert_eq!(answer("//s", &eq("AT&T<&>☺A"), doc), Ok(true));
    // The comment and the PI split the text nodes of s.
    assert_eq!(answer("//s/text()[1]", &eq("A"), doc), Ok(true));
    assert_eq!(answer("//s/text()[2]", &eq("T"), doc), Ok(true));
    assert_eq!(answer("//s/text()[3]", &eq("&"), doc), Ok(true));
    assert_eq!(answer("//s/text()[4]", &eq("<&>☺A"), doc), Ok(true));
    assert_eq!(answer("//s/text()[5]", &Test::Exists, doc), Ok(false));
}

#[test]
fn routing_key_with_entity_reference_is_not_cut_at_the_reference() {
    let doc = "<o><symbol>AT&amp;T</symbol></o>";
    assert_eq!(answer("//symbol", &eq("AT&T"), doc), Ok(true));
    assert_eq!(answer("//symbol", &eq("AT"), doc), Ok(false));
    assert_eq!(answer("//symbol", &eq("T"), doc), Ok(false));
}

#[test]
fn attribute_values_are_decoded_and_whitespace_normalised() {
    let doc = "<a v='x&#10;y&#9;z' w=\"1\t2\r\n3\n4\" e='&lt;&quot;&apos;&gt;'/>";
    assert_eq!(answer("/a/@v", &eq("x\ny\tz"), doc), Ok(true));
    assert_eq!(answer("/a/@w", &eq("1 2 3 4"), doc), Ok(true));
    assert_eq!(answer("/a/@e", &eq("<\"'>"), doc), Ok(true));
    assert_eq!(answer("/a/@*[2]", &eq("1 2 3 4"), doc), Ok(true));
}

#[test]
fn line_ends_are_normalised_in_text_but_not_in_character_references() {
    let doc = "<a>1\r\n2\r3&#13;\n</a>";
    assert_eq!(answer("/a", &eq("1\n2\n3\r\n"), doc), Ok(true));
}

#[test]
fn multibyte_characters_survive_every_split() {
    let doc = "<a><b>é☺😀</b><b>ü</b></a>";
    assert_eq!(answer("/a/b[1]", &eq("é☺😀"), doc), Ok(true));
    let re = Test::Matches(regex::Regex::new("^ü$").unwrap());
    assert_eq!(answer("/a/b[2]", &re, doc), Ok(true));
}

#[test]
fn bom_declaration_comments_and_pis_around_the_root_are_accepted() {
    let doc = "\u{FEFF}<?xml version=\"1.0\" encoding=\"UTF-8\" standalone='yes'?>\n<!-- c -->\n<?pi?><a>x</a>\n<!-- end -->\n";
    assert_eq!(answer("/a", &eq("x"), doc), Ok(true));
    let doc = "<a>x</a><!-- tail -->";
    assert_eq!(answer("/b", &Test::Exists, doc), Ok(false));
}

#[test]
fn positional_predicates_count_siblings_per_parent() {
    let doc = "<r><g><o>1</o><x/><o>2</o></g><g><o>3</o></g><o>4</o></r>";
    // Every o that is the first o child of its parent.
    assert_eq!(answer("//o[1]", &eq("3"), doc), Ok(true));
    assert_eq!(answer("//o[1]", &eq("4"), doc), Ok(true));
    assert_eq!(answer("//o[1]", &eq("2"), doc), Ok(false));
    assert_eq!(answer("//o[2]", &eq("2"), doc), Ok(true));
    assert_eq!(answer("/r/*[2]/o", &eq("3"), doc), Ok(true));
    assert_eq!(answer("//g[2]/o[1]", &eq("3"), doc), Ok(true));
    assert_eq!(answer("//o[0]", &Test::Exists, doc), Ok(false));
}

#[test]
fn nested_candidates_each_get_their_own_string_value() {
    let doc = "<a><a>in</a>out</a>";
    assert_eq!(answer("//a", &eq("inout"), doc), Ok(true));
    assert_eq!(answer("//a", &eq("in"), doc), Ok(true));
    assert_eq!(answer("//a", &eq("out"), doc), Ok(false));
}

/// The well-formedness error of `doc`, the same at every chunking; a matcher that has not
/// decided before the error reports the same one.
fn error(doc: &str) -> XmlError {
    let check = |sizes: &mut dyn FnMut() -> usize| {
        let mut wf = WellFormed::new();
        let mut fed = 0;
        while fed < doc.len() {
            let n = sizes().clamp(1, doc.len() - fed);
            wf.feed(&doc.as_bytes()[fed..fed + n])?;
            fed += n;
        }
        wf.finish()
    };
    let reference = check(&mut || usize::MAX).unwrap_err();
    for n in [1usize, 2, 3, 7] {
        assert_eq!(
            check(&mut || n).unwrap_err(),
            reference,
            "{doc} in {n}-byte chunks"
        );
    }
    let p = path("//nothing");
    let out = split_invariant(&p, &Test::Exists, doc.as_bytes());
    if let Err(e) = out.answer {
        assert_eq!(e, reference, "{doc}");
    }
    reference
}

fn malformed_at(doc: &str) -> usize {
    match error(doc) {
        XmlError::Malformed { offset, .. } => offset,
        other => panic!("{doc}: expected Malformed, got {other:?}"),
    }
}

#[test]
fn malformed_documents_give_the_same_error_at_every_split() {
    let cases: &[(&str, usize)] = &[
        ("<a><b></a></b>", 6),
        ("<a>\u{1}</a>", 3),
        ("<a>&nbsp;</a>", 3),
        ("<p:a/>", 0),
        ("text<a/>", 0),
        ("<a/><b/>", 4),
        ("<a/>x", 4),
        ("<a>", 3),
        ("<a><!-- x", 9),
        ("<a><![CDATA[x", 13),
        ("<a x='1' x='2'/>", 0),
        ("<a p:x='1' q:x='2' xmlns:p='u' xmlns:q='u'/>", 0),
        ("<a>]]></a>", 3),
        ("<a x='<'/>", 6),
        ("<a><!-- a -- b --></a>", 10),
        ("<a>&#0;</a>", 3),
        ("<a>\u{FFFE}</a>", 3),
        ("<a xmlns:p=''/>", 0),
        ("<a>&amp</a>", 3),
        ("<a b></a>", 4),
        ("<1a/>", 1),
        ("</a>", 0),
        ("", 0),
        ("<a/>\n<?xml version='1.0'?>", 5),
        ("<a>x</a >y", 9),
        ("<a><?pi??></a>", 7),
        ("<a/><?pi?x?>", 8),
    ];
    for (doc, offset) in cases {
        assert_eq!(malformed_at(doc), *offset, "{doc}");
    }
}

#[test]
fn invalid_utf8_is_malformed_at_its_offset_at_every_split() {
    let mut doc = b"<a>ok".to_vec();
    doc.extend_from_slice(&[0xC3, 0x28]);
    doc.extend_from_slice(b"</a>");
    let p = path("//a");
    let out = split_invariant(&p, &Test::Exists, &doc);
    // Exists decides at <a> already; a value test must read the text.
    assert_eq!(out.answer, Ok(true));
    let out = split_invariant(&p, &eq("x"), &doc);
    assert!(
        matches!(out.answer, Err(XmlError::Malformed { offset: 5, .. })),
        "{out:?}"
    );
}

#[test]
fn doctype_is_refused_without_reading_it() {
    for doc in [
        "<!DOCTYPE a [<!ENTITY x 'y'>]><a>&x;</a>",
        "<?xml version='1.0'?><!DOCTYPE a SYSTEM 'http://x/'><a/>",
    ] {
        assert!(matches!(error(doc), XmlError::Doctype { .. }), "{doc}");
    }
}

#[test]
fn non_utf8_encodings_are_refused() {
    assert!(matches!(
        error("<?xml version='1.0' encoding='ISO-8859-1'?><a/>"),
        XmlError::UnsupportedEncoding { .. }
    ));
    let p = path("/a");
    let r = evaluate(&p, &Test::Exists, b"\xFF\xFE<\0a\0/\0>\0");
    assert!(matches!(r, Err(XmlError::UnsupportedEncoding { .. })));
}

#[test]
fn oversized_tokens_give_a_limit_error_at_every_split() {
    let doc = format!("<a {}='1'/>", "n".repeat(busbar_xml::MAX_TOKEN));
    assert!(matches!(error(&doc), XmlError::Limit { offset: 0, .. }));
    let p = path("//a");
    let re = Test::Matches(regex::Regex::new("x").unwrap());
    let doc = format!("<a>{}</a>", "y".repeat(busbar_xml::MAX_VALUE + 1));
    let out = split_invariant(&p, &re, doc.as_bytes());
    assert!(
        matches!(out.answer, Err(XmlError::Limit { offset: 0, .. })),
        "{out:?}"
    );
}

#[test]
fn errors_stick_and_input_after_an_error_is_refused() {
    let p = path("//a");
    let t = eq("x");
    let mut m = Matcher::new(&p, &t);
    let e = m.feed(b"<a><b></a>").unwrap_err();
    assert_eq!(m.feed(b"</b>").unwrap_err(), e);
    assert_eq!(m.finish().unwrap_err(), e);
}

#[test]
fn well_formed_checker_resumes_where_an_early_decision_stopped() {
    let p = path("//symbol");
    let t = eq("IBM");
    let good = buy_stocks(2048, "IBM", Some(ROUTING));
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 5] = b'X'; // </soapenv:EnvelXpe>
    for doc in [&good, &bad] {
        let mut m = Matcher::new(&p, &t);
        assert_eq!(m.feed(&doc[..1000]).unwrap(), Some(true));
        let at = m.bytes_consumed();
        let mut wf = m.into_well_formed();
        let r = wf
            .feed(&doc[at..1000])
            .and_then(|_| wf.feed(&doc[1000..]))
            .and_then(|_| wf.finish());
        if doc == &good {
            assert_eq!(r, Ok(()));
        } else {
            assert!(matches!(r, Err(XmlError::Malformed { .. })));
        }
    }
}
