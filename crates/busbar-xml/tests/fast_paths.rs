//! Inputs at the edges of the reader's ASCII shortcuts (name-only tags, plain text runs, end
//! tags compared in place): the outcome is the same whole and at every split, and matches the
//! general rules.
#![allow(clippy::unwrap_used)]

use busbar_xml::{WellFormed, XmlError, MAX_TOKEN};

fn check(doc: &[u8], chunk: usize) -> Result<(), XmlError> {
    let mut wf = WellFormed::new();
    for c in doc.chunks(chunk.max(1)) {
        wf.feed(c)?;
    }
    wf.finish()
}

/// The outcome of `doc`, asserted equal at several chunkings.
fn outcome(doc: &[u8]) -> Result<(), XmlError> {
    outcome_in(doc, &[1, 2, 3, 5, 8, 13, 64])
}

fn outcome_in(doc: &[u8], chunks: &[usize]) -> Result<(), XmlError> {
    let whole = check(doc, usize::MAX);
    for &n in chunks {
        assert_eq!(
            check(doc, n),
            whole,
            "{} in {n}-byte chunks",
            doc.escape_ascii()
        );
    }
    whole
}

fn malformed_at(doc: &str) -> usize {
    match outcome(doc.as_bytes()) {
        Err(XmlError::Malformed { offset, .. }) => offset,
        other => panic!("{doc}: expected Malformed, got {other:?}"),
    }
}

#[test]
fn names_just_outside_the_ascii_rule_are_judged_by_the_full_rules() {
    for ok in [
        "<a/>",
        "<a:b xmlns:a='u'/>",
        "<_x-1.2/>",
        "<a\t/>",
        "<a\r\n></a>",
        "<é/>",
        "<aé></aé>",
        "<a:é xmlns:a='u'/>",
        "<a·b/>",
        "<a><b>t</b >\n</a\t>",
        "<a>x]y</a>",
        "<a>x&amp;y</a>",
        "<a>\u{7F}</a>",
    ] {
        assert_eq!(outcome(ok.as_bytes()), Ok(()), "{ok}");
    }
    let cases: &[(&str, usize)] = &[
        ("<a:b:c xmlns:a='u'/>", 1),
        ("<a:/>", 1),
        ("<:a/>", 1),
        ("<a:1 xmlns:a='u'/>", 1),
        ("<a$/>", 1),
        ("<a/ >", 2),
        ("<a\"b'>'/>", 9),
        ("<1/>", 1),
        ("<-a/>", 1),
        ("<a></b>", 3),
        ("<a></ab>", 3),
        ("<ab></a>", 4),
        ("<a>x\u{1}y</a>", 4),
        ("<a>x]]>y</a>", 4),
        ("<a>\u{FFFE}</a>", 3),
    ];
    for (doc, offset) in cases {
        assert_eq!(malformed_at(doc), *offset, "{doc}");
    }
}

#[test]
fn long_names_and_text_runs_at_the_token_limit() {
    // Coarse chunks: a token carried over many tiny chunks is re-read on each, which is slow
    // for tokens this long in an unoptimised build.
    let outcome = |doc: &[u8]| outcome_in(doc, &[1000, 4096, 65_535]);
    // A name filling the start tag up to the limit: the start tag fits, the end tag does not.
    let name = "n".repeat(MAX_TOKEN - 2);
    let doc = format!("<{name}></{name}>");
    assert!(matches!(
        outcome(doc.as_bytes()),
        Err(XmlError::Limit { offset, .. }) if offset == MAX_TOKEN
    ));
    let name = "n".repeat(MAX_TOKEN - 3);
    let doc = format!("<{name}></{name}>");
    assert_eq!(outcome(doc.as_bytes()), Ok(()));
    let doc = format!("<{}/>", "n".repeat(MAX_TOKEN - 2));
    assert!(matches!(
        outcome(doc.as_bytes()),
        Err(XmlError::Limit { offset: 0, .. })
    ));
    // Text and attribute values longer than the shortcuts' windows.
    let doc = format!(
        "<a b='{}' c=\"x>y\">{}é{}</a>",
        "v".repeat(300),
        "t".repeat(100),
        "u".repeat(70)
    );
    assert_eq!(outcome(doc.as_bytes()), Ok(()));
}
