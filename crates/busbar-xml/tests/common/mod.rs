//! Shared test helpers: the buyStocks payload generator, chunked feeding, and an independent
//! DOM-based XPath reference evaluator built on quick-xml.
#![allow(dead_code, clippy::unwrap_used)]

use busbar_xml::{Matcher, StreamPath, Test, XmlError};

pub const SOAP11: &str = "http://schemas.xmlsoap.org/soap/envelope/";
pub const ROUTING: &str = "xadmin;server1;community#1.0##";

const ORDERS: [(&str, &str, &str, &str); 4] = [
    ("IBM", "asankha", "140.34", "2000"),
    ("MSFT", "ruwan", "23.56", "8030"),
    ("SUN", "indika", "14.56", "500"),
    ("GOOG", "chathura", "60.24", "40000"),
];

fn order_line(i: usize, first_symbol: &str, extra: &str) -> String {
    let (s, b, p, v) = ORDERS[i % 4];
    let s = if i == 0 { first_symbol } else { s };
    format!(
        "<order><symbol>{s}</symbol><buyerID>{b}</buyerID><price>{p}</price><volume>{v}{extra}</volume></order>\n"
    )
}

/// A buyStocks request of exactly `size` bytes (docs/scenarios.md): 250-byte head, cycling orders,
/// 51-byte tail, the last volume padded with digits. `routing: None` leaves the header empty
/// of a routing element (the head is then padded with a comment to keep its size).
pub fn buy_stocks(size: usize, first_symbol: &str, routing: Option<&str>) -> Vec<u8> {
    let header = match routing {
        Some(r) => format!("<routing xmlns=\"http://someuri\">{r}</routing>"),
        None => String::new(),
    };
    let mut head = format!(
        "<soapenv:Envelope xmlns:soapenv=\"{SOAP11}\">\n<soapenv:Header>{header}</soapenv:Header>\n<soapenv:Body>\n<m:buyStocks xmlns:m=\"http://services.samples/xsd\">\n"
    );
    if routing.is_none() {
        // Same head size as the standard one, so body offsets stay comparable.
        let pad = 250usize.saturating_sub(head.len() + 8);
        head = head.replacen(
            "<soapenv:Body>",
            &format!("<!--{}--><soapenv:Body>", " ".repeat(pad + 1)),
            1,
        );
    }
    let tail = "</m:buyStocks>\n</soapenv:Body>\n</soapenv:Envelope>\n";
    let mut lines: Vec<String> = Vec::new();
    let mut total = head.len() + tail.len();
    loop {
        let next = order_line(lines.len(), first_symbol, "");
        if !lines.is_empty() && total + next.len() > size {
            break;
        }
        total += next.len();
        lines.push(next);
    }
    let pad = size.saturating_sub(total);
    let last = lines.len() - 1;
    lines[last] = order_line(last, first_symbol, &"7".repeat(pad));
    let mut out = head.into_bytes();
    for l in &lines {
        out.extend_from_slice(l.as_bytes());
    }
    out.extend_from_slice(tail.as_bytes());
    out
}

/// Offset of the first byte of `needle` in `hay`.
pub fn offset_of(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap()
}

/// A small deterministic generator for chunk sizes (no external RNG needed).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Outcome of feeding a document: the answer (or error) and where the matcher stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub answer: Result<bool, XmlError>,
    pub consumed: Option<usize>,
}

/// Feed `doc` in chunks whose sizes come from `sizes` (cycled), checking on the way that
/// `bytes_consumed` never exceeds what was fed.
pub fn feed_chunks(
    path: &StreamPath,
    test: &Test,
    doc: &[u8],
    sizes: &mut dyn FnMut() -> usize,
) -> Outcome {
    let mut m = Matcher::new(path, test);
    let mut fed = 0;
    while fed < doc.len() {
        let n = sizes().clamp(1, doc.len() - fed);
        let r = m.feed(&doc[fed..fed + n]);
        fed += n;
        assert!(
            m.bytes_consumed() <= fed,
            "consumed {} > fed {fed}",
            m.bytes_consumed()
        );
        match r {
            Err(e) => {
                return Outcome {
                    answer: Err(e),
                    consumed: None,
                }
            }
            Ok(Some(d)) => {
                return Outcome {
                    answer: Ok(d),
                    consumed: Some(m.bytes_consumed()),
                }
            }
            Ok(None) => {}
        }
    }
    let answer = m.finish();
    let consumed = answer.as_ref().ok().map(|_| m.bytes_consumed());
    Outcome { answer, consumed }
}

pub fn whole(path: &StreamPath, test: &Test, doc: &[u8]) -> Outcome {
    feed_chunks(path, test, doc, &mut || usize::MAX)
}

/// Feeds the document whole, byte by byte, in 7-byte, 16 KiB and several random chunkings,
/// and asserts that every one gives the same outcome; returns it.
pub fn split_invariant(path: &StreamPath, test: &Test, doc: &[u8]) -> Outcome {
    let reference = whole(path, test, doc);
    let fixed: [usize; 3] = [1, 7, 16 * 1024];
    for n in fixed {
        let got = feed_chunks(path, test, doc, &mut || n);
        assert_eq!(got, reference, "chunks of {n} bytes, path {path}");
    }
    for seed in 1..=4u64 {
        let mut rng = Lcg(seed);
        let max = [3u64, 64, 1500, 20000][seed as usize - 1];
        let got = feed_chunks(path, test, doc, &mut || (rng.next() % max) as usize + 1);
        assert_eq!(got, reference, "random chunks (seed {seed}), path {path}");
    }
    reference
}

// ---------------------------------------------------------------------------------------------
// Reference evaluator: a DOM built by quick-xml from the whole document, and the path evaluated
// by the XPath 1.0 definitions, node set by node set.

#[derive(Debug, Clone)]
pub enum RNode {
    Elem(usize),
    Text(String),
    Other,
}

#[derive(Debug, Clone)]
pub struct RElem {
    pub ns: Option<String>,
    pub local: String,
    pub attrs: Vec<(Option<String>, String, String)>,
    pub children: Vec<RNode>,
}

#[derive(Debug, Default)]
pub struct RDoc {
    pub elems: Vec<RElem>,
    pub top: Vec<RNode>,
}

fn push_text(list: &mut Vec<RNode>, s: &str) {
    if s.is_empty() {
        return;
    }
    if let Some(RNode::Text(t)) = list.last_mut() {
        t.push_str(s);
    } else {
        list.push(RNode::Text(s.to_owned()));
    }
}

fn owned_ns(r: quick_xml::name::ResolveResult<'_>) -> Option<String> {
    match r {
        quick_xml::name::ResolveResult::Bound(ns) => Some(ns.0.to_owned()),
        _ => None,
    }
}

pub fn parse_reference(doc: &str) -> RDoc {
    use quick_xml::events::Event;
    let mut reader = quick_xml::NsReader::from_str(doc);
    let mut d = RDoc::default();
    let mut stack: Vec<usize> = Vec::new();
    loop {
        let (res, ev) = reader.read_resolved_event().unwrap();
        let ns = owned_ns(res);
        let (start, empty) = match &ev {
            Event::Start(s) => (Some(s.clone()), false),
            Event::Empty(s) => (Some(s.clone()), true),
            _ => (None, false),
        };
        if let Some(s) = start {
            let mut attrs = Vec::new();
            for a in s.attributes() {
                let a = a.unwrap();
                let key = a.key.0.to_owned();
                if key == "xmlns" || key.starts_with("xmlns:") {
                    continue;
                }
                let (r, local) = reader.resolver().resolve_attribute(a.key);
                let ans = owned_ns(r);
                let local = AsRef::<str>::as_ref(&local).to_owned();
                let v = a
                    .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .unwrap()
                    .into_owned();
                attrs.push((ans, local, v));
            }
            let local = AsRef::<str>::as_ref(&s.local_name()).to_owned();
            let idx = d.elems.len();
            match stack.last() {
                Some(&i) => d.elems[i].children.push(RNode::Elem(idx)),
                None => d.top.push(RNode::Elem(idx)),
            }
            d.elems.push(RElem {
                ns,
                local,
                attrs,
                children: Vec::new(),
            });
            if !empty {
                stack.push(idx);
            }
            continue;
        }
        let target: &mut Vec<RNode> = match stack.last() {
            Some(&i) => &mut d.elems[i].children,
            None => &mut d.top,
        };
        match ev {
            Event::End(_) => {
                stack.pop();
            }
            Event::Text(t) => push_text(target, &t.xml10_content()),
            Event::CData(c) => push_text(target, &c.xml10_content()),
            Event::GeneralRef(r) => {
                let s = match r.resolve_char_ref().unwrap() {
                    Some(c) => c.to_string(),
                    None => match &*r {
                        "lt" => "<".into(),
                        "gt" => ">".into(),
                        "amp" => "&".into(),
                        "apos" => "'".into(),
                        "quot" => "\"".into(),
                        other => panic!("unknown entity {other}"),
                    },
                };
                push_text(target, &s);
            }
            Event::Comment(_) | Event::PI(_) if !stack.is_empty() => target.push(RNode::Other),
            Event::Eof => break,
            _ => {}
        }
    }
    d
}

/// A path step in test form, rendered to XPath text and evaluated by the reference.
#[derive(Debug, Clone)]
pub struct TStep {
    pub desc: bool,
    pub kind: TKind,
    pub pos: Option<u32>,
}

#[derive(Debug, Clone)]
pub enum TKind {
    /// (prefix, local or "*")
    Elem(Option<&'static str>, &'static str),
    Text,
    Attr(Option<&'static str>, &'static str),
}

pub fn render(steps: &[TStep]) -> String {
    let mut s = String::new();
    for st in steps {
        s.push_str(if st.desc { "//" } else { "/" });
        match &st.kind {
            TKind::Elem(p, l) | TKind::Attr(p, l) => {
                if matches!(st.kind, TKind::Attr(..)) {
                    s.push('@');
                }
                if let Some(p) = p {
                    s.push_str(p);
                    s.push(':');
                }
                s.push_str(l);
            }
            TKind::Text => s.push_str("text()"),
        }
        if let Some(n) = st.pos {
            s.push_str(&format!("[{n}]"));
        }
    }
    s
}

fn name_ok(
    prefix: &Option<&str>,
    local: &str,
    ns_map: &[(&str, &str)],
    ns: &Option<String>,
    l: &str,
) -> bool {
    if prefix.is_none() && local == "*" {
        return true;
    }
    let want_ns = prefix.map(|p| ns_map.iter().find(|(q, _)| *q == p).unwrap().1.to_owned());
    want_ns == *ns && (local == "*" || local == l)
}

pub fn string_value(d: &RDoc, i: usize) -> String {
    let mut s = String::new();
    for c in &d.elems[i].children {
        match c {
            RNode::Text(t) => s.push_str(t),
            RNode::Elem(j) => s.push_str(&string_value(d, *j)),
            RNode::Other => {}
        }
    }
    s
}

/// String-values of every node the path selects.
pub fn reference_values(d: &RDoc, steps: &[TStep], ns_map: &[(&str, &str)]) -> Vec<String> {
    // None = the document node.
    let mut ctx: Vec<Option<usize>> = vec![None];
    for (k, st) in steps.iter().enumerate() {
        let last = k + 1 == steps.len();
        let mut bases: Vec<Option<usize>> = Vec::new();
        for c in &ctx {
            if st.desc {
                descendants_or_self(d, *c, &mut bases);
            } else {
                bases.push(*c);
            }
        }
        bases.sort();
        bases.dedup();
        let mut next: Vec<Option<usize>> = Vec::new();
        let mut values = Vec::new();
        for b in bases {
            let children = match b {
                None => &d.top,
                Some(i) => &d.elems[i].children,
            };
            let mut pos = 0;
            match &st.kind {
                TKind::Elem(p, l) => {
                    for c in children {
                        if let RNode::Elem(j) = c {
                            let e = &d.elems[*j];
                            if name_ok(p, l, ns_map, &e.ns, &e.local) {
                                pos += 1;
                                if st.pos.is_none_or(|n| n == pos) {
                                    next.push(Some(*j));
                                }
                            }
                        }
                    }
                }
                TKind::Text => {
                    for c in children {
                        if let RNode::Text(t) = c {
                            pos += 1;
                            if st.pos.is_none_or(|n| n == pos) {
                                values.push(t.clone());
                            }
                        }
                    }
                }
                TKind::Attr(p, l) => {
                    if let Some(i) = b {
                        for (ans, al, v) in &d.elems[i].attrs {
                            if name_ok(p, l, ns_map, ans, al) {
                                pos += 1;
                                if st.pos.is_none_or(|n| n == pos) {
                                    values.push(v.clone());
                                }
                            }
                        }
                    }
                }
            }
        }
        if last {
            if matches!(st.kind, TKind::Elem(..)) {
                return next.iter().flatten().map(|&i| string_value(d, i)).collect();
            }
            return values;
        }
        next.sort();
        next.dedup();
        ctx = next;
    }
    Vec::new()
}

fn descendants_or_self(d: &RDoc, n: Option<usize>, out: &mut Vec<Option<usize>>) {
    out.push(n);
    let children = match n {
        None => &d.top,
        Some(i) => &d.elems[i].children,
    };
    for c in children {
        if let RNode::Elem(j) = c {
            descendants_or_self(d, Some(*j), out);
        }
    }
}

pub fn reference_answer(values: &[String], test: &Test) -> bool {
    values.iter().any(|v| match test {
        Test::Exists => true,
        Test::Equals(l) => v == l,
        Test::Matches(r) => r.is_match(v),
    })
}
