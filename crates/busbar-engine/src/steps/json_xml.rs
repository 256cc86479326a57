//! The `json_to_xml` and `xml_to_json` steps: a REST façade for SOAP services and back.
//! Config: `busbar_config::JsonToXmlConfig`, `busbar_config::XmlToJsonConfig`. The convention
//! is in docs/json-xml.md:
//!
//! - an object's members become child elements in order; an array becomes the member's element
//!   repeated; a top-level array becomes `item` elements under the root;
//! - `@name` members are attributes, `#text` the element's own text;
//! - strings, numbers and booleans are the element's text; `null` is an empty element with
//!   `xsi:nil="true"`; `""` an empty element without it;
//! - back from XML, repeated names and the configured `arrays` are arrays, an element with
//!   `xsi:nil="true"` is `null`, and with `types: infer` a text that is a JSON number (no
//!   leading zeros, no `+`), `true` or `false` becomes one.

use busbar_config::{
    JsonToXmlConfig, JsonXmlTypes, RootMode, SoapUnwrap, SoapWrap, XmlToJsonConfig,
};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError, Phase};
use busbar_wssec::dom::{Document, Limits, NodeId, NodeKind};
use http::header::{HeaderValue, CONTENT_TYPE};
use serde_json::{Map, Value};

use super::{json, Apply, BuildCx, Failed, StepCx};

const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";
const SOAP11: &str = "http://schemas.xmlsoap.org/soap/envelope/";
const SOAP12: &str = "http://www.w3.org/2003/05/soap-envelope";

/// The deepest XML `xml_to_json` reads: the deepest `json_to_xml` writes, so that a document a
/// proxy accepted comes back from the same conversion. A JSON document is read whole to
/// [`busbar_json::WHOLE_MAX_DEPTH`] levels; the root element and a SOAP Envelope and Body add
/// three. The walk that converts the tree recurses once per level, well within a stack.
const XML_TO_JSON_MAX_DEPTH: usize = busbar_json::WHOLE_MAX_DEPTH + 3;

/// A built `json_to_xml`.
#[derive(Debug)]
pub struct JsonToXmlStep {
    root: Option<String>,
    namespace: Option<String>,
    soap: Option<SoapWrap>,
    item: String,
}

/// A built `xml_to_json`.
#[derive(Debug)]
pub struct XmlToJsonStep {
    unwrap_soap: bool,
    arrays: Vec<String>,
    keep_root: bool,
    infer: bool,
}

/// An XML name as the convention needs: an NCName (XML 1.0's name characters, no colon: a
/// prefix would need a namespace), never starting with `xml` (reserved).
fn is_name(s: &str) -> bool {
    busbar_xml::is_ncname(s) && !s.to_ascii_lowercase().starts_with("xml")
}

impl JsonToXmlStep {
    /// Checks the names.
    pub fn build(
        config: &JsonToXmlConfig,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        for (key, name) in [
            ("root", config.root.as_deref()),
            ("item", Some(config.item.as_str())),
        ] {
            if let Some(n) = name {
                if !is_name(n) {
                    return Err(cx.fail(
                        None,
                        format!("{here}.{key}"),
                        format!("'{n}' is not an XML name"),
                    ));
                }
            }
        }
        Ok(JsonToXmlStep {
            root: config.root.clone(),
            namespace: config.namespace.clone(),
            soap: config.soap,
            item: config.item.clone(),
        })
    }
}

/// Text with `<`, `>`, `&` (and in attributes `"`) escaped, and control characters XML 1.0
/// cannot hold refused. In attributes a tab and a line feed are written as references too:
/// written raw, every XML parser reads them back as spaces (attribute-value normalisation).
fn escape(out: &mut String, text: &str, attr: bool) -> Result<(), String> {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' if attr => out.push_str("&quot;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attr => out.push_str("&#9;"),
            '\n' if attr => out.push_str("&#10;"),
            '\t' | '\n' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                return Err(format!(
                    "the character U+{:04X} cannot be written in XML",
                    c as u32
                ))
            }
            c => out.push(c),
        }
    }
    Ok(())
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Writes `value` as element `name` (and repeats it for arrays).
fn element(
    out: &mut String,
    name: &str,
    value: &Value,
    ns: &str,
    nil_ns: &mut bool,
) -> Result<(), String> {
    if !is_name(name) {
        return Err(format!("the JSON member name '{name}' is not an XML name"));
    }
    match value {
        Value::Array(items) => {
            for item in items {
                if item.is_array() {
                    return Err(format!(
                        "'{name}' holds an array in an array, which XML elements cannot show"
                    ));
                }
                element(out, name, item, ns, nil_ns)?;
            }
            Ok(())
        }
        Value::Null => {
            *nil_ns = true;
            out.push_str(&format!("<{name}{ns} xsi:nil=\"true\"/>"));
            Ok(())
        }
        Value::Object(members) => {
            out.push('<');
            out.push_str(name);
            out.push_str(ns);
            let mut text = None;
            for (k, v) in members {
                if let Some(attr) = k.strip_prefix('@') {
                    if !is_name(attr) {
                        return Err(format!("'{k}' is not an XML attribute name"));
                    }
                    let t = scalar_text(v).ok_or_else(|| {
                        format!("the attribute '{k}' must be a string, number or boolean")
                    })?;
                    out.push(' ');
                    out.push_str(attr);
                    out.push_str("=\"");
                    escape(out, &t, true)?;
                    out.push('"');
                } else if k == "#text" {
                    text =
                        Some(scalar_text(v).ok_or("'#text' must be a string, number or boolean")?);
                }
            }
            out.push('>');
            if let Some(t) = text {
                escape(out, &t, false)?;
            }
            for (k, v) in members {
                if !k.starts_with('@') && k != "#text" {
                    element(out, k, v, "", nil_ns)?;
                }
            }
            out.push_str("</");
            out.push_str(name);
            out.push('>');
            Ok(())
        }
        scalar => {
            let t = scalar_text(scalar).unwrap_or_default();
            out.push('<');
            out.push_str(name);
            out.push_str(ns);
            out.push('>');
            escape(out, &t, false)?;
            out.push_str("</");
            out.push_str(name);
            out.push('>');
            Ok(())
        }
    }
}

impl JsonToXmlStep {
    fn convert(&self, value: &Value) -> Result<String, String> {
        let ns = match &self.namespace {
            Some(uri) => {
                let mut s = String::from(" xmlns=\"");
                escape(&mut s, uri, true)?;
                s.push('"');
                s
            }
            None => String::new(),
        };
        let mut nil = false;
        let mut body = String::new();
        match (&self.root, value) {
            (Some(root), Value::Array(items)) => {
                let wrapped = Value::Object(
                    [(self.item.clone(), Value::Array(items.clone()))]
                        .into_iter()
                        .collect(),
                );
                element(&mut body, root, &wrapped, &ns, &mut nil)?;
            }
            (Some(root), v) => element(&mut body, root, v, &ns, &mut nil)?,
            (None, Value::Object(m)) if m.len() == 1 => {
                let (k, v) = m.iter().next().ok_or("empty object")?;
                if let Value::Array(items) = v {
                    if items.len() != 1 {
                        // Each item would be a root element of its own.
                        return Err(format!(
                            "the JSON's one member '{k}' is an array of {} items, which would make as many root elements, and the step has no 'root'",
                            items.len()
                        ));
                    }
                }
                element(&mut body, k, v, &ns, &mut nil)?;
            }
            (None, _) => {
                return Err(
                    "the JSON is not an object of one member, and the step has no 'root'".into(),
                )
            }
        }
        if nil {
            // Declare xsi on the root element, right after its name.
            let end = body
                .get(1..)
                .and_then(|rest| rest.find([' ', '>', '/']))
                .map_or(body.len(), |i| i + 1);
            body.insert_str(end, &format!(" xmlns:xsi=\"{XSI}\""));
        }
        Ok(match self.soap {
            None => format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>{body}"),
            Some(SoapWrap::V11) => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenv=\"{SOAP11}\"><soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>"
            ),
            Some(SoapWrap::V12) => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><env:Envelope xmlns:env=\"{SOAP12}\"><env:Body>{body}</env:Body></env:Envelope>"
            ),
        })
    }
}

fn bad_input(phase: Phase, what: &str, msg: String) -> MediationError {
    let (kind, blame) = match phase {
        Phase::Request => (ErrorKind::BadRequest, Blame::Client),
        Phase::Response => (ErrorKind::UpstreamReset, Blame::Upstream),
    };
    MediationError::new(kind, blame, format!("{what}: {msg}"))
}

impl Apply for JsonToXmlStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let phase = ex.phase();
        let value = json::parsed(ex, cx).await?;
        let xml = self
            .convert(&value)
            .map_err(|m| bad_input(phase, "The JSON cannot be written as XML", m))?;
        ex.set_body(Body::full(xml.into_bytes()));
        let ct = match self.soap {
            Some(SoapWrap::V11) => "text/xml; charset=UTF-8",
            Some(SoapWrap::V12) => "application/soap+xml; charset=UTF-8",
            None => "application/xml",
        };
        ex.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        Ok(Flow::Continue)
    }
}

impl XmlToJsonStep {
    /// Takes the settings.
    pub fn build(
        config: &XmlToJsonConfig,
        _cx: &mut BuildCx<'_>,
        _here: &str,
    ) -> Result<Self, Failed> {
        Ok(XmlToJsonStep {
            unwrap_soap: config.soap == Some(SoapUnwrap::Unwrap),
            arrays: config.arrays.clone(),
            keep_root: config.root == RootMode::Keep,
            infer: config.types == JsonXmlTypes::Infer,
        })
    }

    fn scalar(&self, text: &str) -> Value {
        if self.infer {
            match text {
                "true" => return Value::Bool(true),
                "false" => return Value::Bool(false),
                _ => {}
            }
            if looks_like_number(text) {
                if let Ok(Value::Number(n)) = serde_json::from_str::<Value>(text) {
                    return Value::Number(n);
                }
            }
        }
        Value::String(text.to_owned())
    }

    fn value(&self, doc: &Document, id: NodeId) -> Result<Value, String> {
        if doc.attr(id, XSI, "nil") == Some("true") {
            return Ok(Value::Null);
        }
        let children: Vec<NodeId> = doc.element_children(id).collect();
        let attrs = doc.attributes(id);
        let own_text: String = doc
            .children(id)
            .filter(|c| doc.kind(*c) == NodeKind::Text)
            .map(|c| doc.text(c))
            .collect();
        let plain_attrs: Vec<_> = attrs.iter().filter(|a| a.namespace() != XSI).collect();
        if children.is_empty() && plain_attrs.is_empty() {
            return Ok(self.scalar(&own_text));
        }
        let mut map = Map::new();
        for a in plain_attrs {
            let name = format!("@{}", a.local_name());
            if map.contains_key(&name) {
                // Two attributes of one local name in different namespaces: one JSON member
                // could hold only one of them.
                return Err(format!(
                    "element '{}' has two attributes named '{}' (in different namespaces), and JSON names attributes by local name",
                    doc.local_name(id),
                    a.local_name()
                ));
            }
            map.insert(name, self.scalar(a.value()));
        }
        if !own_text.trim().is_empty() {
            map.insert("#text".into(), self.scalar(&own_text));
        }
        for c in children {
            let name = doc.local_name(c).to_owned();
            let v = self.value(doc, c)?;
            match map.get_mut(&name) {
                Some(Value::Array(items)) => items.push(v),
                Some(existing) => {
                    let first = std::mem::take(existing);
                    *existing = Value::Array(vec![first, v]);
                }
                None => {
                    if self.arrays.contains(&name) {
                        map.insert(name, Value::Array(vec![v]));
                    } else {
                        map.insert(name, v);
                    }
                }
            }
        }
        Ok(Value::Object(map))
    }

    fn convert(&self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        let limits = Limits {
            max_depth: XML_TO_JSON_MAX_DEPTH,
            ..Limits::default()
        };
        let doc = Document::parse(bytes, &limits).map_err(|e| e.to_string())?;
        let mut top = doc.root();
        if self.unwrap_soap {
            let is_env = doc.is(top, SOAP11, "Envelope") || doc.is(top, SOAP12, "Envelope");
            if !is_env {
                return Err("not a SOAP envelope".into());
            }
            let body = doc
                .element_children(top)
                .find(|c| doc.local_name(*c) == "Body" && doc.namespace(*c) == doc.namespace(top))
                .ok_or("the SOAP envelope has no Body")?;
            top = doc
                .element_children(body)
                .next()
                .ok_or("the SOAP Body is empty")?;
        }
        let value = self.value(&doc, top)?;
        let out = if self.keep_root {
            Value::Object(
                [(doc.local_name(top).to_owned(), value)]
                    .into_iter()
                    .collect(),
            )
        } else {
            value
        };
        serde_json::to_vec(&out).map_err(|e| e.to_string())
    }
}

/// RFC 8259's number grammar, which also rules out leading zeros (`007` stays text).
fn looks_like_number(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E' | b'+'))
        && !t.starts_with('+')
        && busbar_json::check(t.as_bytes(), busbar_json::Limits::default()).is_ok()
}

impl Apply for XmlToJsonStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let phase = ex.phase();
        let bytes = ex.body_mut().bytes(cx.max_body()).await?;
        let step = XmlToJsonStep {
            unwrap_soap: self.unwrap_soap,
            arrays: self.arrays.clone(),
            keep_root: self.keep_root,
            infer: self.infer,
        };
        let size = bytes.len() as u64;
        let out = cx
            .offload(size, move || step.convert(&bytes))
            .await?
            .map_err(|m| bad_input(phase, "The XML cannot be read as JSON", m))?;
        ex.set_body(Body::full(out));
        ex.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::SOAP11;

    const ROUND: &str = "sequences:\n  s:\n    - json_to_xml: { root: buyStocks, namespace: 'http://services.samples', soap: '1.1' }\n    - xml_to_json: { soap: unwrap, arrays: [order] }\n";

    fn run(yaml: &str, body: &str) -> Result<String, String> {
        answer(yaml, body)
    }

    fn same_json(a: &str, b: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(a).ok()
            == serde_json::from_str::<serde_json::Value>(b).ok()
    }

    #[test]
    fn orders_round_trip_through_soap() {
        for doc in [
            r#"{"size":3,"payload":{"order":[{"symbol":"IBM","buyerID":"u1","price":42.8,"volume":100},{"symbol":"A&B <c>","buyerID":"ü","price":-0.5,"volume":0},{"symbol":"x","buyerID":"007","price":1e3,"volume":7}]}}"#,
            r#"{"size":1,"payload":{"order":[{"symbol":"IBM","buyerID":"u1","price":42.8,"volume":100}]}}"#,
            r##"{"a":null,"b":"","c":true,"d":{"@id":"x","#text":"t"},"e":"line1\nline2\t]]>"}"##,
        ] {
            let got = run(ROUND, doc).unwrap_or_else(|e| panic!("{doc}: {e}"));
            // "007" stays a string: leading zeros never make a number.
            assert!(same_json(&got, doc), "{doc}\n -> {got}");
        }
    }

    #[test]
    fn a_document_as_deep_as_a_proxy_accepts_comes_back_from_its_soap_envelope() {
        // 64 objects, the default `json_max_depth`: 65 elements in the Body, 67 in all.
        let deep = format!("{}1{}", r#"{"a":"#.repeat(64), "}".repeat(64));
        let got = run(ROUND, &deep).unwrap_or_else(|e| panic!("64 levels: {e}"));
        assert!(same_json(&got, &deep), "{got}");
        // The deepest XML that `json_to_xml` writes (a whole document is read to 127 levels):
        // read back; one level more is refused, naming the limit.
        let yaml = "sequences:\n  s:\n    - xml_to_json: { soap: unwrap }\n";
        let envelope = |levels: usize| {
            format!(
                "<e:Envelope xmlns:e=\"{SOAP11}\"><e:Body>{}1{}</e:Body></e:Envelope>",
                "<a>".repeat(levels),
                "</a>".repeat(levels)
            )
        };
        let back = run(yaml, &envelope(128)).unwrap_or_else(|e| panic!("130 levels: {e}"));
        assert_eq!(back.matches('{').count(), 127, "{back}");
        let e = run(yaml, &envelope(129)).err().unwrap_or_default();
        assert!(e.contains("deeper than 130 levels"), "{e}");
    }

    /// A small generator of JSON documents inside the convention's round-trip class: objects
    /// of XML names, arrays of two or more items (or of any number under a name listed in
    /// `arrays`), strings that read back as strings, integers, booleans and `null`.
    struct Docs(u64);

    impl Docs {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn name(&mut self) -> &'static str {
            const NAMES: [&str; 8] = [
                "a",
                "order",
                "b-c",
                "_x.1",
                "Ωμέγα",
                "e\u{301}",
                "item",
                "z",
            ];
            NAMES[self.below(NAMES.len() as u64) as usize]
        }

        fn scalar(&mut self) -> serde_json::Value {
            use serde_json::Value;
            match self.below(6) {
                0 => Value::Null,
                1 => Value::Bool(self.below(2) == 0),
                2 => Value::from(self.next() as i64 / 7),
                3 => Value::String(String::new()),
                _ => {
                    const PARTS: [&str; 8] = [
                        "x",
                        "A&B",
                        "<c>",
                        "'q'",
                        "\"",
                        "line\nbreak",
                        "é中😀",
                        "]]>",
                    ];
                    let n = 1 + self.below(3);
                    let text: String = (0..n)
                        .map(|_| PARTS[self.below(PARTS.len() as u64) as usize])
                        .collect::<Vec<_>>()
                        .join(" ");
                    Value::String(text)
                }
            }
        }

        /// A value whose containers nest at most `depth` deep (an object is one level).
        fn value(&mut self, depth: usize) -> serde_json::Value {
            if depth == 0 || self.below(3) == 0 {
                return self.scalar();
            }
            self.object(depth)
        }

        fn object(&mut self, depth: usize) -> serde_json::Value {
            let mut map = serde_json::Map::new();
            let members = 1 + self.below(3);
            for _ in 0..members {
                let name = self.name();
                let v = if name == "item" || (self.below(4) == 0 && depth > 1) {
                    // `item` is listed in `arrays`: any length; other names need two or more.
                    let min = if name == "item" { 1 } else { 2 };
                    let n = min + self.below(3);
                    serde_json::Value::Array((0..n).map(|_| self.value(depth - 1)).collect())
                } else {
                    self.value(depth - 1)
                };
                map.insert(name.to_owned(), v);
            }
            serde_json::Value::Object(map)
        }

        /// An object whose deepest chain of objects is exactly `depth` levels.
        fn deep(&mut self, depth: usize) -> serde_json::Value {
            let mut v = serde_json::json!({ "z": self.scalar() });
            for _ in 1..depth {
                let mut outer = match self.object(1) {
                    serde_json::Value::Object(m) => m,
                    _ => serde_json::Map::new(),
                };
                outer.insert("a".into(), v);
                v = serde_json::Value::Object(outer);
            }
            v
        }
    }

    #[test]
    fn every_generated_document_a_proxy_accepts_comes_back_the_same_from_soap() {
        let yaml = "sequences:\n  s:\n    - json_to_xml: { root: r, soap: '1.2' }\n    - xml_to_json: { soap: unwrap, arrays: [item] }\n";
        let mut docs = Docs(0x9e37_79b9_7f4a_7c15);
        for case in 0..2_000 {
            let doc = if case % 10 == 0 {
                // The deepest a proxy accepts by default, and just under it.
                docs.deep(64 - (case / 10) % 3)
            } else {
                let depth = 1 + docs.below(8) as usize;
                docs.object(depth)
            };
            let text = doc.to_string();
            let back = run(yaml, &text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
            let back: serde_json::Value =
                serde_json::from_str(&back).unwrap_or_else(|e| panic!("case {case}: {e}\n{back}"));
            assert_eq!(back, doc, "case {case}");
        }
    }

    #[test]
    fn attribute_values_keep_their_tabs_and_line_breaks_through_a_round_trip() {
        let doc = r##"{"r":{"@note":"line1\nline2\tx\r\ny","#text":"a\nb\tc"}}"##;
        let yaml = "sequences:\n  s:\n    - json_to_xml: {}\n    - xml_to_json: { root: keep }\n";
        let xml = run("sequences:\n  s:\n    - json_to_xml: {}\n", doc).expect("xml");
        assert!(
            xml.contains(r#"note="line1&#10;line2&#9;x&#13;&#10;y""#),
            "{xml}"
        );
        let back = run(yaml, doc).expect("round trip");
        assert!(same_json(&back, doc), "{doc}\n -> {back}");
    }

    #[test]
    fn a_root_member_holding_several_items_needs_a_root_name() {
        let yaml = "sequences:\n  s:\n    - json_to_xml: {}\n";
        let e = run(yaml, r#"{"order":[{"s":"IBM"},{"s":"MSFT"}]}"#)
            .err()
            .unwrap_or_default();
        assert!(e.contains("array of 2 items"), "{e}");
        let e = run(yaml, r#"{"order":[]}"#).err().unwrap_or_default();
        assert!(e.contains("array of 0 items"), "{e}");
        let one = run(yaml, r#"{"order":[{"s":"IBM"}]}"#).expect("one item");
        assert!(one.ends_with("<order><s>IBM</s></order>"), "{one}");
    }

    #[test]
    fn two_attributes_of_one_local_name_are_refused_not_merged() {
        let yaml = "sequences:\n  s:\n    - xml_to_json: {}\n";
        let e = run(yaml, r#"<r xmlns:p="urn:p" id="1" p:id="2"/>"#)
            .err()
            .unwrap_or_default();
        assert!(e.contains("two attributes named 'id'"), "{e}");
        let ok = run(yaml, r#"<r xmlns:p="urn:p" id="1" p:other="2"/>"#).expect("distinct");
        assert!(same_json(&ok, r#"{"@id":1,"@other":2}"#), "{ok}");
    }

    #[test]
    fn every_xml_name_character_is_accepted() {
        let yaml = "sequences:\n  s:\n    - json_to_xml: { root: r }\n";
        // U+00B7, a combining mark, U+203F: name characters after the first.
        let doc = r#"{"a·b":1,"e\u0301":2,"a‿b":3,"Ωμέγα":4,"_x-1.2":5}"#;
        let xml = run(yaml, doc).expect("names");
        assert!(
            xml.ends_with("<r><a·b>1</a·b><e\u{301}>2</e\u{301}><a‿b>3</a‿b><Ωμέγα>4</Ωμέγα><_x-1.2>5</_x-1.2></r>"),
            "{xml}"
        );
    }

    #[test]
    fn names_that_are_not_xml_names_and_control_characters_are_400() {
        for (doc, want) in [
            (r#"{"a b":1}"#, "not an XML name"),
            (r#"{"a:b":1}"#, "not an XML name"),
            (r#"{"·a":1}"#, "not an XML name"),
            (r#"{"1a":1}"#, "not an XML name"),
            (r#"{"a":"\u0001"}"#, "cannot be written in XML"),
            (r#"{"a":[[1]]}"#, "array in an array"),
        ] {
            let e = run(ROUND, doc).err().unwrap_or_default();
            assert!(e.contains(want), "{doc}: {e}");
        }
    }
}
