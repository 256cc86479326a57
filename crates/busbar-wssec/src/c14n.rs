//! Exclusive XML Canonicalization 1.0 (`http://www.w3.org/2001/10/xml-exc-c14n#` and
//! `#WithComments`) of one element's subtree.
//!
//! Layout: [`exclusive`] walks the subtree in document order (a subtree is a contiguous
//! run of node ids in [`Document`]) and keeps, per open element, which namespace
//! declarations the output already carries. The node-set is the one a same-document
//! `#id` reference selects: the apex element and everything below it, with the apex's
//! ancestors outside the set. So namespaces declared above the apex appear only where an
//! output element visibly uses them, or where the InclusiveNamespaces PrefixList asks for
//! them, and `xml:*` attributes of ancestors are not pulled in.

use crate::dom::{Attr, Document, NodeId, NodeKind, Scope};

#[derive(Debug, thiserror::Error)]
pub enum C14nError {
    /// Canonical XML 1.0 §2.1: implementations must report an operation failure on
    /// documents containing relative namespace URIs.
    #[error(
        "the document declares the relative namespace URI {0:?}, which cannot be canonicalised"
    )]
    RelativeNamespace(String),
}

/// Canonicalises the subtree rooted at `node` into `out`.
///
/// `inclusive_prefixes` is the InclusiveNamespaces PrefixList; `#default` (or "") names
/// the default namespace. Prefixes on it follow the inclusive Canonical XML rules: they
/// are output where in scope, used or not. Fails, writing nothing, when a namespace in
/// scope anywhere in the subtree is a relative URI.
pub fn exclusive(
    doc: &Document,
    node: NodeId,
    inclusive_prefixes: &[&str],
    with_comments: bool,
    out: &mut Vec<u8>,
) -> Result<(), C14nError> {
    check_absolute_namespaces(doc, node)?;
    match doc.kind(node) {
        NodeKind::Text => {
            escape_text(doc.text(node), out);
            return Ok(());
        }
        NodeKind::Comment => {
            if with_comments {
                write_comment(doc.text(node), out);
            }
            return Ok(());
        }
        NodeKind::Element => {}
    }
    let inclusive: Vec<&str> = inclusive_prefixes
        .iter()
        .map(|p| if *p == "#default" { "" } else { *p })
        // The xml namespace is never declared in the output and xmlns is not a prefix.
        .filter(|p| *p != "xml" && *p != "xmlns")
        .collect();
    out.reserve(doc.span(node).len());
    let mut canon = Canon {
        doc,
        inclusive,
        with_comments,
        out,
        rendered: Scope::new(),
        namespaces: Vec::new(),
        attrs: Vec::new(),
    };
    canon.subtree(node);
    Ok(())
}

/// [`exclusive`] into a fresh buffer.
pub fn exclusive_to_vec(
    doc: &Document,
    node: NodeId,
    inclusive_prefixes: &[&str],
    with_comments: bool,
) -> Result<Vec<u8>, C14nError> {
    let mut out = Vec::new();
    exclusive(doc, node, inclusive_prefixes, with_comments, &mut out)?;
    Ok(out)
}

struct Canon<'d, 'o> {
    doc: &'d Document,
    inclusive: Vec<&'d str>,
    with_comments: bool,
    out: &'o mut Vec<u8>,
    /// Prefix → namespace URI as declared by the output so far, scoped to open elements.
    /// A missing default entry means no default namespace, same as "".
    rendered: Scope<'d, &'d str>,
    namespaces: Vec<(&'d str, &'d str)>,
    attrs: Vec<&'d Attr>,
}

impl<'d> Canon<'d, '_> {
    fn subtree(&mut self, apex: NodeId) {
        let doc = self.doc;
        // (subtree end, element, rendered-scope mark) of each open element.
        let mut open: Vec<(usize, NodeId, usize)> = Vec::new();
        for index in apex.index()..doc.subtree_end(apex) {
            let Some(id) = doc.node_at(index) else { break };
            while let Some(&(end, element, mark)) = open.last() {
                if end > index {
                    break;
                }
                self.end_tag(element);
                self.rendered.unwind(mark);
                open.pop();
            }
            match doc.kind(id) {
                NodeKind::Element => {
                    let mark = self.rendered.mark();
                    self.start_tag(id, id == apex);
                    open.push((doc.subtree_end(id), id, mark));
                }
                NodeKind::Text => escape_text(doc.text(id), self.out),
                NodeKind::Comment => {
                    if self.with_comments {
                        write_comment(doc.text(id), self.out);
                    }
                }
            }
        }
        while let Some((_, element, mark)) = open.pop() {
            self.end_tag(element);
            self.rendered.unwind(mark);
        }
    }

    fn start_tag(&mut self, id: NodeId, is_apex: bool) {
        let doc = self.doc;
        // Candidate namespace nodes: those the element visibly utilizes, then those the
        // PrefixList asks for. An unprefixed element utilizes the default namespace even
        // when it has none, which is what produces xmlns="" under a defaulted ancestor.
        self.namespaces.clear();
        let prefix = doc.prefix(id);
        if prefix != "xml" {
            self.namespaces.push((prefix, doc.namespace(id)));
        }
        for attr in doc.attributes(id) {
            let p = attr.prefix();
            if !p.is_empty() && p != "xml" {
                self.namespaces.push((p, attr.namespace()));
            }
        }
        if !self.inclusive.is_empty() {
            if is_apex {
                // Inclusive rules at the apex: everything in scope, inherited or not.
                for &p in &self.inclusive {
                    match doc.lookup_namespace(id, p) {
                        Some(uri) => self.namespaces.push((p, uri)),
                        None if p.is_empty() => self.namespaces.push(("", "")),
                        None => {}
                    }
                }
            } else {
                // Below the apex an in-scope binding only changes where it is declared.
                for (p, uri) in doc.ns_decls(id) {
                    if self.inclusive.contains(&p.as_str()) {
                        self.namespaces.push((p, uri));
                    }
                }
            }
        }
        if self.namespaces.len() > 1 {
            self.namespaces.sort_unstable();
            self.namespaces.dedup_by(|a, b| a.0 == b.0);
        }

        self.out.push(b'<');
        self.out.extend_from_slice(doc.qname(id).as_bytes());
        for &(p, uri) in &self.namespaces {
            if same(self.rendered.get(p).unwrap_or(""), uri) {
                continue;
            }
            self.rendered.bind(p, uri);
            if p.is_empty() {
                self.out.extend_from_slice(b" xmlns=\"");
            } else {
                self.out.extend_from_slice(b" xmlns:");
                self.out.extend_from_slice(p.as_bytes());
                self.out.extend_from_slice(b"=\"");
            }
            escape_attr(uri, self.out);
            self.out.push(b'"');
        }

        self.attrs.clear();
        self.attrs.extend(doc.attributes(id));
        if self.attrs.len() > 1 {
            self.attrs.sort_unstable_by(|a, b| {
                let by_namespace = if a.same_namespace(b) {
                    std::cmp::Ordering::Equal
                } else {
                    a.namespace().cmp(b.namespace())
                };
                by_namespace.then_with(|| a.local_name().cmp(b.local_name()))
            });
        }
        for attr in &self.attrs {
            self.out.push(b' ');
            self.out.extend_from_slice(attr.qname().as_bytes());
            self.out.extend_from_slice(b"=\"");
            escape_attr(attr.value(), self.out);
            self.out.push(b'"');
        }
        self.out.push(b'>');
    }

    fn end_tag(&mut self, id: NodeId) {
        self.out.extend_from_slice(b"</");
        self.out.extend_from_slice(self.doc.qname(id).as_bytes());
        self.out.push(b'>');
    }
}

/// String equality that skips the comparison for one string seen twice (namespace URIs are
/// stored once per document) and for the empty string.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

/// Canonical XML's failure on relative namespace URIs, applied to the namespace nodes of
/// the node-set: those in scope at the apex (inherited ones included) and those declared
/// below it. Declarations elsewhere in the document do not matter, as with libxml2 and
/// Santuario.
fn check_absolute_namespaces(doc: &Document, apex: NodeId) -> Result<(), C14nError> {
    let check = |uri: &str| {
        if uri.is_empty() || is_absolute_uri(uri) {
            Ok(())
        } else {
            Err(C14nError::RelativeNamespace(uri.to_owned()))
        }
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut at = Some(apex);
    while let Some(element) = at {
        for (prefix, uri) in doc.ns_decls(element) {
            // Only the nearest binding of a prefix is in scope.
            if !seen.contains(&prefix.as_str()) {
                seen.push(prefix);
                check(uri)?;
            }
        }
        at = doc.parent(element);
    }
    for element in doc.descendants(apex) {
        for (_, uri) in doc.ns_decls(element) {
            check(uri)?;
        }
    }
    Ok(())
}

/// RFC 3986 `absolute-URI` as far as it matters here: it starts with a scheme.
fn is_absolute_uri(uri: &str) -> bool {
    match uri.split_once(':') {
        Some((scheme, _)) => {
            let mut chars = scheme.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

fn write_comment(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<!--");
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"-->");
}

const fn byte_set(members: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut i = 0;
    while i < members.len() {
        set[members[i] as usize] = true;
        i += 1;
    }
    set
}

/// Characters text nodes escape (Canonical XML 1.0, section 2.3).
static TEXT_SPECIAL: [bool; 256] = byte_set(b"&<>\r");
/// Characters attribute values (and namespace URIs) escape.
static ATTR_SPECIAL: [bool; 256] = byte_set(b"&<\"\t\n\r");

fn escape_text(s: &str, out: &mut Vec<u8>) {
    escape(s, out, &TEXT_SPECIAL);
}

fn escape_attr(s: &str, out: &mut Vec<u8>) {
    escape(s, out, &ATTR_SPECIAL);
}

fn escape(s: &str, out: &mut Vec<u8>, special: &[bool; 256]) {
    let mut rest = s.as_bytes();
    while let Some(i) = rest.iter().position(|&b| special[b as usize]) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(replacement(rest[i]));
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
}

fn replacement(b: u8) -> &'static [u8] {
    match b {
        b'&' => b"&amp;",
        b'<' => b"&lt;",
        b'>' => b"&gt;",
        b'"' => b"&quot;",
        b'\t' => b"&#x9;",
        b'\n' => b"&#xA;",
        _ => b"&#xD;",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::dom::Limits;

    fn doc(s: &str) -> Document {
        Document::parse(s.as_bytes(), &Limits::default()).unwrap()
    }

    fn element(d: &Document, local: &str) -> NodeId {
        d.elements().find(|e| d.local_name(*e) == local).unwrap()
    }

    fn c14n(s: &str, local: &str, prefixes: &[&str], comments: bool) -> String {
        let d = doc(s);
        let out = exclusive_to_vec(&d, element(&d, local), prefixes, comments).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn plain(s: &str, local: &str) -> String {
        c14n(s, local, &[], false)
    }

    #[test]
    fn spec_example_drops_unused_ancestor_namespaces() {
        // Exclusive XML Canonicalization 1.0, section 2.2.
        let src = "<n0:local xmlns:n0=\"foo:bar\" xmlns:n3=\"ftp://example.org\">\n  \
            <n1:elem2 xmlns:n1=\"http://example.net\" xml:lang=\"en\">\n     \
            <n3:stuff xmlns:n3=\"ftp://example.org\"/>\n  </n1:elem2>\n</n0:local>";
        assert_eq!(
            plain(src, "elem2"),
            "<n1:elem2 xmlns:n1=\"http://example.net\" xml:lang=\"en\">\n     \
             <n3:stuff xmlns:n3=\"ftp://example.org\"></n3:stuff>\n  </n1:elem2>"
        );
    }

    #[test]
    fn namespace_uris_are_escaped_like_attribute_values() {
        assert_eq!(
            plain(r#"<p:a xmlns:p="urn:x?a=1&amp;b=&#9;&quot;"/>"#, "a"),
            r#"<p:a xmlns:p="urn:x?a=1&amp;b=&#x9;&quot;"></p:a>"#
        );
    }

    #[test]
    fn many_rendered_prefixes_are_tracked_past_the_index_threshold() {
        let mut src = String::from("<r");
        for i in 0..30 {
            src.push_str(&format!(" xmlns:p{i}='urn:{i}' p{i}:a='{i}'"));
        }
        src.push_str("><p7:c p29:b='x'/><p7:d xmlns:p7='urn:other'/></r>");
        let limits = Limits {
            max_attributes: 64,
            ..Limits::default()
        };
        let d = Document::parse(src.as_bytes(), &limits).unwrap();
        // Prefixes and URIs share the decimal suffix, so both sort the same way.
        let mut order: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        order.sort();
        let mut expected = String::from("<r");
        for i in &order {
            expected.push_str(&format!(" xmlns:p{i}=\"urn:{i}\""));
        }
        for i in &order {
            expected.push_str(&format!(" p{i}:a=\"{i}\""));
        }
        expected.push_str("><p7:c p29:b=\"x\"></p7:c><p7:d xmlns:p7=\"urn:other\"></p7:d></r>");
        let out = exclusive_to_vec(&d, d.root(), &[], false).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn empty_elements_become_start_end_pairs() {
        assert_eq!(
            plain("<a><b/><c x='1'/></a>", "a"),
            "<a><b></b><c x=\"1\"></c></a>"
        );
    }

    #[test]
    fn attributes_sort_by_namespace_then_local_name_unqualified_first() {
        let src =
            r#"<e xmlns:b="urn:b" xmlns:a="urn:a" b:z="1" a:y="2" z="3" a:a="4" b:a="5" m="6"/>"#;
        assert_eq!(
            plain(src, "e"),
            r#"<e xmlns:a="urn:a" xmlns:b="urn:b" m="6" z="3" a:a="4" a:y="2" b:a="5" b:z="1"></e>"#
        );
    }

    #[test]
    fn namespace_declarations_sort_by_prefix_with_default_first() {
        let src = r#"<z:e xmlns:z="urn:z" xmlns="urn:d" xmlns:a="urn:a" a:x="1"><d/></z:e>"#;
        assert_eq!(
            plain(src, "e"),
            r#"<z:e xmlns:a="urn:a" xmlns:z="urn:z" a:x="1"><d xmlns="urn:d"></d></z:e>"#
        );
    }

    #[test]
    fn namespaces_are_sorted_by_prefix_not_by_uri() {
        let src = r#"<b:e xmlns:b="urn:a" xmlns:a="urn:b" a:x="1"/>"#;
        assert_eq!(
            plain(src, "e"),
            r#"<b:e xmlns:a="urn:b" xmlns:b="urn:a" a:x="1"></b:e>"#
        );
    }

    #[test]
    fn inherited_namespaces_appear_where_first_used() {
        let src = r#"<p:a xmlns:p="urn:p" xmlns:q="urn:q"><b><q:c p:x="1"/><q:d/></b></p:a>"#;
        assert_eq!(
            plain(src, "b"),
            r#"<b><q:c xmlns:p="urn:p" xmlns:q="urn:q" p:x="1"></q:c><q:d xmlns:q="urn:q"></q:d></b>"#
        );
    }

    #[test]
    fn superfluous_redeclarations_are_dropped() {
        let src =
            r#"<p:a xmlns:p="urn:p"><p:b xmlns:p="urn:p"><p:c xmlns:p="urn:other"/></p:b></p:a>"#;
        assert_eq!(
            plain(src, "a"),
            r#"<p:a xmlns:p="urn:p"><p:b><p:c xmlns:p="urn:other"></p:c></p:b></p:a>"#
        );
    }

    #[test]
    fn default_namespace_of_an_ancestor_is_declared_on_the_apex() {
        let src = r#"<a xmlns="urn:d"><b><c/></b></a>"#;
        assert_eq!(plain(src, "b"), r#"<b xmlns="urn:d"><c></c></b>"#);
    }

    #[test]
    fn undeclared_default_namespace_is_output_only_under_a_rendered_default() {
        let src =
            r#"<a xmlns="urn:d"><b xmlns=""><c/></b><p:e xmlns:p="urn:p" xmlns=""><f/></p:e></a>"#;
        assert_eq!(
            plain(src, "a"),
            r#"<a xmlns="urn:d"><b xmlns=""><c></c></b><p:e xmlns:p="urn:p"><f xmlns=""></f></p:e></a>"#
        );
        // With the apex already in no namespace there is nothing to undeclare.
        assert_eq!(plain(src, "b"), "<b><c></c></b>");
    }

    #[test]
    fn prefixed_apex_does_not_carry_an_unused_default() {
        let src = r#"<a xmlns="urn:d" xmlns:p="urn:p"><p:b><c/></p:b></a>"#;
        assert_eq!(
            plain(src, "b"),
            r#"<p:b xmlns:p="urn:p"><c xmlns="urn:d"></c></p:b>"#
        );
    }

    #[test]
    fn prefix_list_renders_namespaces_used_only_in_content() {
        let src = r#"<s:E xmlns:s="urn:s" xmlns:xsi="urn:xsi" xmlns:t="urn:t"><s:B><v xsi:type="t:T">t:x</v></s:B></s:E>"#;
        assert_eq!(
            plain(src, "B"),
            r#"<s:B xmlns:s="urn:s"><v xmlns:xsi="urn:xsi" xsi:type="t:T">t:x</v></s:B>"#
        );
        assert_eq!(
            c14n(src, "B", &["t", "xsi"], false),
            r#"<s:B xmlns:s="urn:s" xmlns:t="urn:t" xmlns:xsi="urn:xsi"><v xsi:type="t:T">t:x</v></s:B>"#
        );
    }

    #[test]
    fn prefix_list_default_renders_the_inherited_default_namespace() {
        let src = r#"<E xmlns="urn:d" xmlns:p="urn:p"><p:B><p:c/><d xmlns=""/></p:B></E>"#;
        assert_eq!(
            c14n(src, "B", &["#default"], false),
            r#"<p:B xmlns="urn:d" xmlns:p="urn:p"><p:c></p:c><d xmlns=""></d></p:B>"#
        );
        assert_eq!(
            plain(src, "B"),
            r#"<p:B xmlns:p="urn:p"><p:c></p:c><d></d></p:B>"#
        );
    }

    #[test]
    fn prefix_list_entries_not_in_scope_are_ignored() {
        assert_eq!(
            c14n("<a/>", "a", &["q", "#default", "xml"], false),
            "<a></a>"
        );
    }

    #[test]
    fn prefix_list_redeclaration_below_the_apex_is_rendered() {
        let src = r#"<r xmlns:t="urn:1"><a><b xmlns:t="urn:2"><c xmlns:t="urn:2"/></b></a></r>"#;
        assert_eq!(
            c14n(src, "a", &["t"], false),
            r#"<a xmlns:t="urn:1"><b xmlns:t="urn:2"><c></c></b></a>"#
        );
    }

    #[test]
    fn xml_attributes_are_not_inherited_and_xml_namespace_is_never_declared() {
        let src = r#"<a xml:lang="en" xml:space="preserve"><b xml:lang="fr"><c/></b><d/></a>"#;
        assert_eq!(plain(src, "d"), "<d></d>");
        assert_eq!(plain(src, "b"), r#"<b xml:lang="fr"><c></c></b>"#);
        let src = r#"<xml:a xmlns:xml="http://www.w3.org/XML/1998/namespace" xml:id="x"/>"#;
        assert_eq!(plain(src, "a"), r#"<xml:a xml:id="x"></xml:a>"#);
    }

    #[test]
    fn text_escapes_amp_lt_gt_and_carriage_return() {
        let src = "<a>&amp;&lt;&gt;\"'&#13;\t\n<![CDATA[<&>]]]]></a>";
        assert_eq!(
            plain(src, "a"),
            "<a>&amp;&lt;&gt;\"'&#xD;\t\n&lt;&amp;&gt;]]</a>"
        );
    }

    #[test]
    fn attribute_values_escape_amp_lt_quot_and_whitespace_references() {
        let src = "<a v=\"&amp;&lt;&gt;&quot;'&#9;&#10;&#13;\ta\r\nb\"/>";
        assert_eq!(
            plain(src, "a"),
            "<a v=\"&amp;&lt;>&quot;'&#x9;&#xA;&#xD; a b\"></a>"
        );
    }

    #[test]
    fn comments_are_kept_only_with_comments() {
        let src = "<a><!-- one --><b>x<!--two--></b></a>";
        assert_eq!(plain(src, "a"), "<a><b>x</b></a>");
        assert_eq!(
            c14n(src, "a", &[], true),
            "<a><!-- one --><b>x<!--two--></b></a>"
        );
    }

    #[test]
    fn whitespace_and_non_ascii_text_pass_through() {
        let src = "<a>\n  <b> \u{e9}\u{4e2d}&#x1F600; </b>\n</a>";
        assert_eq!(
            plain(src, "a"),
            "<a>\n  <b> \u{e9}\u{4e2d}\u{1F600} </b>\n</a>"
        );
    }

    #[test]
    fn text_and_comment_nodes_canonicalise_alone() {
        let d = doc("<a>x&amp;<!--c--></a>");
        let mut kids = d.children(d.root());
        let text = kids.next().unwrap();
        let comment = kids.next().unwrap();
        assert_eq!(exclusive_to_vec(&d, text, &[], false).unwrap(), b"x&amp;");
        assert_eq!(
            exclusive_to_vec(&d, comment, &[], true).unwrap(),
            b"<!--c-->"
        );
        assert_eq!(exclusive_to_vec(&d, comment, &[], false).unwrap(), b"");
    }

    #[test]
    fn relative_namespace_uris_in_scope_in_the_subtree_are_refused() {
        let d = doc(concat!(
            r#"<r xmlns:q="urn:q" xmlns:h="http://x/y"><a xmlns="DAV:"/>"#,
            r##"<b xmlns:p="rel/p"><c xmlns:q="rel"/></b><d xmlns="#f"/></r>"##
        ));
        let refused = |local: &str| {
            let mut out = Vec::new();
            let result = exclusive(&d, element(&d, local), &[], false, &mut out);
            if result.is_err() {
                assert!(out.is_empty(), "{local}: output written before the refusal");
            }
            result.err().map(|C14nError::RelativeNamespace(uri)| uri)
        };
        assert_eq!(refused("a"), None);
        assert_eq!(refused("b"), Some("rel/p".to_owned()));
        assert_eq!(refused("c"), Some("rel".to_owned()));
        assert_eq!(refused("d"), Some("#f".to_owned()));
        assert_eq!(refused("r"), Some("rel/p".to_owned()));
        assert!(!is_absolute_uri("1x:y"));
        assert!(!is_absolute_uri("x"));
        assert!(is_absolute_uri("urn:a:b"));
        assert!(is_absolute_uri("a+b.c-d:"));
    }

    #[test]
    fn soap_body_keeps_its_envelope_prefix_and_wsu_namespace() {
        let src = concat!(
            r#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" "#,
            r#"xmlns:wsu="urn:wsu" xmlns:wsse="urn:wsse"><soap:Header><wsse:Security/></soap:Header>"#,
            r#"<soap:Body wsu:Id="b"><m:Op xmlns:m="urn:m"/></soap:Body></soap:Envelope>"#
        );
        assert_eq!(
            plain(src, "Body"),
            concat!(
                r#"<soap:Body xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" "#,
                r#"xmlns:wsu="urn:wsu" wsu:Id="b"><m:Op xmlns:m="urn:m"></m:Op></soap:Body>"#
            )
        );
    }
}
