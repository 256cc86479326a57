//! A fast path for simple XSLT 1.0 stylesheets: those that only rename, drop, wrap and
//! re-order elements with fixed templates (version adapters).
//!
//! [`FastStylesheet::analyse`] reads a stylesheet and either compiles it or says, in
//! [`NotFast`], the first construct that puts it outside the class. A compiled stylesheet
//! transforms a message with [`FastStylesheet::transform`]: the input is read once by the
//! crate's own tokenizer into a light tree (elements the stylesheet names, everything else
//! reduced to its text), the templates run over that tree, and the result is written as
//! libxslt 1.1 over libxml2 2.9 serialises it, byte for byte. Whenever the input holds
//! something whose handling is not certain to be identical (a DOCTYPE, another encoding,
//! XML 1.1, anything the tokenizer refuses, sizes near libxml2's limits), `transform` returns
//! `None` and the caller runs the stylesheet through libxslt instead, so errors stay libxslt's.
//!
//! The class: `xsl:stylesheet` (or `xsl:transform`) version 1.0 with namespace declarations
//! only on itself (each URI bound to one prefix) and at most `exclude-result-prefixes`; one
//! `xsl:output method="xml"` with `omit-xml-declaration`, `indent="no"`, `encoding="UTF-8"`
//! and `media-type` as the only other settings; `xsl:template`s matching `/` or one QName,
//! each pattern once, without name, mode or priority. Template bodies hold literal result
//! elements (with literal, unprefixed attributes), literal text and `xsl:text`,
//! `xsl:apply-templates` (without `select`, or selecting a child path such as `a/p:b`, or
//! `/a/b` from the root in the template for `/`) and `xsl:value-of` (of such a path, from the
//! context node or the root, or of `.`). XSLT's built-in rules apply to elements no template
//! matches: their children are processed, text is copied.

use std::ops::Range;

use crate::error::XmlError;
use crate::path::{is_ncname, XML_NS};
use crate::reader::{decode_attr, Reader, Sink, StartTag};

/// The XSLT namespace.
pub const XSLT_NS: &str = "http://www.w3.org/1999/XSL/Transform";

/// Inputs larger than this go to libxslt: libxml2 limits a text node to 10 MB.
const MAX_INPUT: usize = 8 * 1024 * 1024;
/// Deeper inputs go to libxslt, which refuses more than 256 levels.
const MAX_INPUT_DEPTH: usize = 200;
/// Inputs with more attributes on one element, or more namespace declarations in scope, go
/// to libxslt (whose pre-scan refuses more than 256 of either).
const MAX_INPUT_ATTRS: usize = 200;
/// Inputs with more nodes go to libxslt (whose pre-scan refuses more than 1,000,000).
const MAX_INPUT_NODES: usize = 500_000;
/// Start tags longer than this go to libxslt (libxml2 refuses names over 50,000 bytes).
const MAX_INPUT_TAG: usize = 32 * 1024;

/// Why a stylesheet is outside the class the fast path handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFast(pub String);

impl std::fmt::Display for NotFast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stylesheet of the simple class, compiled for [`FastStylesheet::transform`].
#[derive(Debug, Clone)]
pub struct FastStylesheet {
    /// Namespace URIs the patterns and paths mention; the tokenizer numbers them from 1.
    uris: Vec<String>,
    /// Element names the patterns and paths mention: (namespace id, local name). A name's id
    /// is its index plus one; 0 stands for any other name.
    names: Vec<(u32, Box<[u8]>)>,
    /// Template body per name id (index 0 unused).
    by_name: Vec<Option<usize>>,
    /// The body of the template matching `/`.
    root: Option<usize>,
    bodies: Vec<Vec<Instr>>,
    /// Namespaces every template's outermost literal result elements carry (XSLT's
    /// namespace nodes of a literal result element, less the excluded ones).
    inherited: Vec<(Box<str>, Box<str>)>,
    omit_declaration: bool,
    encoding_declared: bool,
    /// libxslt ends the result with a newline unless `indent` is given at all.
    final_newline: bool,
}

#[derive(Debug, Clone)]
enum Instr {
    Element(Box<Literal>),
    /// Literal text, already escaped.
    Text(Box<[u8]>),
    /// `xsl:apply-templates`; `None` for the context node's children.
    Apply(Option<Select>),
    /// `xsl:value-of`; `None` for `.`.
    ValueOf(Option<Select>),
}

#[derive(Debug, Clone)]
struct Literal {
    /// As written: `p:local` or `local`.
    qname: Box<[u8]>,
    prefix: Box<str>,
    /// The element's namespace, if any.
    uri: Option<Box<str>>,
    /// Its attributes, serialised: ` a="v"` each.
    attrs: Box<[u8]>,
    /// A direct child of its template (XSLT copies the namespace nodes onto those only).
    outermost: bool,
    body: Vec<Instr>,
}

#[derive(Debug, Clone)]
struct Select {
    absolute: bool,
    /// Name ids of the child steps.
    steps: Vec<u32>,
}

// ---------------------------------------------------------------------------------------------
// Reading the stylesheet.

#[derive(Debug)]
enum SNode {
    Element(SElement),
    Text(Vec<u8>),
}

#[derive(Debug)]
struct SElement {
    uri: String,
    prefix: String,
    local: String,
    /// (prefix, local, value) of attributes, declarations excluded.
    attrs: Vec<(String, String, String)>,
    /// (prefix, URI) declared on this element; "" prefix for the default namespace.
    decls: Vec<(String, String)>,
    children: Vec<SNode>,
}

impl SElement {
    fn qname(&self) -> String {
        if self.prefix.is_empty() {
            self.local.clone()
        } else {
            format!("{}:{}", self.prefix, self.local)
        }
    }

    fn is_xsl(&self, local: &str) -> bool {
        self.uri == XSLT_NS && self.local == local
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(p, l, _)| p.is_empty() && l == name)
            .map(|(_, _, v)| v.as_str())
    }
}

/// Builds the stylesheet's tree, resolving namespaces itself (the tokenizer only numbers
/// the URIs it is given).
#[derive(Default)]
struct TreeSink {
    open: Vec<SElement>,
    scope: Vec<(String, String)>,
    marks: Vec<usize>,
    root: Option<SElement>,
    in_text: bool,
}

impl TreeSink {
    fn resolve(&self, prefix: &str) -> Option<String> {
        if prefix == "xml" {
            return Some(XML_NS.to_owned());
        }
        match self.scope.iter().rev().find(|(p, _)| p == prefix) {
            Some((_, u)) => Some(u.clone()),
            None if prefix.is_empty() => Some(String::new()),
            None => None,
        }
    }
}

impl Sink for TreeSink {
    fn start(&mut self, el: &StartTag<'_>) -> Result<bool, XmlError> {
        let tag = el.tag;
        let text = |r: Range<usize>| String::from_utf8_lossy(&tag[r]).into_owned();
        self.marks.push(self.scope.len());
        let mut decls = Vec::new();
        let mut attrs = Vec::new();
        for a in el.attrs {
            let mut value = Vec::new();
            decode_attr(&tag[a.value.clone()], &mut value);
            let value = String::from_utf8_lossy(&value).into_owned();
            if a.is_decl {
                let prefix = if a.prefix.is_some() {
                    text(a.local.clone())
                } else {
                    String::new()
                };
                decls.push((prefix, value));
            } else {
                let prefix = a.prefix.clone().map(text).unwrap_or_default();
                attrs.push((prefix, text(a.local.clone()), value));
            }
        }
        self.scope.extend(decls.iter().cloned());
        let name_len = tag[1..]
            .iter()
            .position(|&b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'/' | b'>'))
            .unwrap_or(tag.len() - 1);
        let qname = String::from_utf8_lossy(&tag[1..1 + name_len]).into_owned();
        let (prefix, local) = match qname.split_once(':') {
            Some((p, l)) => (p.to_owned(), l.to_owned()),
            None => (String::new(), qname),
        };
        let uri = self.resolve(&prefix).unwrap_or_default();
        self.open.push(SElement {
            uri,
            prefix,
            local,
            attrs,
            decls,
            children: Vec::new(),
        });
        self.in_text = false;
        Ok(false)
    }

    fn end(&mut self) -> Result<bool, XmlError> {
        self.in_text = false;
        if let Some(mark) = self.marks.pop() {
            self.scope.truncate(mark);
        }
        if let Some(done) = self.open.pop() {
            match self.open.last_mut() {
                Some(parent) => parent.children.push(SNode::Element(done)),
                None => self.root = Some(done),
            }
        }
        Ok(false)
    }

    fn text(&mut self, piece: &[u8], _at: usize) -> Result<bool, XmlError> {
        if let Some(parent) = self.open.last_mut() {
            match parent.children.last_mut() {
                Some(SNode::Text(t)) if self.in_text => t.extend_from_slice(piece),
                _ => parent.children.push(SNode::Text(piece.to_vec())),
            }
            self.in_text = true;
        }
        Ok(false)
    }

    fn boundary(&mut self) -> Result<bool, XmlError> {
        // A comment or processing instruction splits text nodes: whitespace on either side
        // is stripped on its own.
        self.in_text = false;
        Ok(false)
    }

    fn wants_text(&self) -> bool {
        true
    }
}

fn not_fast<T>(reason: impl Into<String>) -> Result<T, NotFast> {
    Err(NotFast(reason.into()))
}

fn is_blank(t: &[u8]) -> bool {
    t.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// A namespace URI the serialiser writes unescaped, as libxml2 does: keep to plain ASCII.
fn plain_uri(u: &str) -> bool {
    u.bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'<' | b'>' | b'&'))
}

struct Compiler<'a> {
    /// Bindings declared on the stylesheet element: (prefix, URI), "" for the default.
    bindings: &'a [(String, String)],
    /// Without a declared output encoding libxml2 writes non-ASCII characters of attribute
    /// values as character references.
    ascii_attrs: bool,
    /// Compiling the template for `/`: the only one whose `xsl:apply-templates` may select
    /// from the root (elsewhere that could recurse without end, which libxslt stops with an
    /// error).
    in_root_template: bool,
    uris: Vec<String>,
    names: Vec<(u32, Box<[u8]>)>,
    bodies: Vec<Vec<Instr>>,
}

impl Compiler<'_> {
    fn uri_of(&self, prefix: &str) -> Option<&str> {
        self.bindings
            .iter()
            .find(|(p, _)| p == prefix)
            .map(|(_, u)| u.as_str())
    }

    /// The name id of a QName in a pattern or path (unprefixed means no namespace).
    fn name_id(&mut self, qname: &str) -> Result<u32, NotFast> {
        let (prefix, local) = match qname.split_once(':') {
            Some((p, l)) => (p, l),
            None => ("", qname),
        };
        if !is_ncname(local) || (!prefix.is_empty() && !is_ncname(prefix)) || prefix == "xml" {
            return not_fast(format!("'{qname}' is not a plain element name"));
        }
        let ns = if prefix.is_empty() {
            0
        } else {
            let Some(uri) = self.uri_of(prefix) else {
                return not_fast(format!(
                    "prefix '{prefix}' is not declared on the stylesheet element"
                ));
            };
            let uri = uri.to_owned();
            match self.uris.iter().position(|u| *u == uri) {
                Some(k) => k as u32 + 1,
                None => {
                    self.uris.push(uri);
                    self.uris.len() as u32
                }
            }
        };
        let local = local.as_bytes();
        match self
            .names
            .iter()
            .position(|(n, l)| *n == ns && &**l == local)
        {
            Some(k) => Ok(k as u32 + 1),
            None => {
                self.names.push((ns, local.into()));
                Ok(self.names.len() as u32)
            }
        }
    }

    fn select(&mut self, text: &str, what: &str) -> Result<Option<Select>, NotFast> {
        if text == "." {
            return Ok(None);
        }
        let (absolute, rest) = match text.strip_prefix('/') {
            Some(r) => (true, r),
            None => (false, text),
        };
        if rest.is_empty() {
            return not_fast(format!("{what} select=\"{text}\" is not a child path"));
        }
        let mut steps = Vec::new();
        for step in rest.split('/') {
            if step.is_empty() || step.contains(['[', '(', '*', '@', '.', ' ', '|']) {
                return not_fast(format!("{what} select=\"{text}\" is not a child path"));
            }
            if step.contains("::") {
                return not_fast(format!("{what} select=\"{text}\" uses an axis"));
            }
            steps.push(
                self.name_id(step)
                    .map_err(|e| NotFast(format!("{what} select=\"{text}\": {}", e.0)))?,
            );
        }
        Ok(Some(Select { absolute, steps }))
    }

    fn body(&mut self, children: &[SNode], outermost: bool) -> Result<Vec<Instr>, NotFast> {
        let mut out = Vec::new();
        for c in children {
            match c {
                SNode::Text(t) if is_blank(t) => {}
                SNode::Text(t) => out.push(Instr::Text(escape_text(t).into())),
                SNode::Element(e) => out.push(self.instruction(e, outermost)?),
            }
        }
        Ok(out)
    }

    fn only_attrs(e: &SElement, allowed: &[&str]) -> Result<(), NotFast> {
        for (p, l, _) in &e.attrs {
            if !p.is_empty() || !allowed.contains(&l.as_str()) {
                let name = if p.is_empty() {
                    l.clone()
                } else {
                    format!("{p}:{l}")
                };
                return not_fast(format!("{} with attribute '{name}'", e.qname()));
            }
        }
        if !e.decls.is_empty() {
            return not_fast(format!(
                "namespace declarations on {} (only the stylesheet element may declare)",
                e.qname()
            ));
        }
        Ok(())
    }

    fn no_content(e: &SElement) -> Result<(), NotFast> {
        let content = e.children.iter().any(|c| match c {
            SNode::Text(t) => !is_blank(t),
            SNode::Element(_) => true,
        });
        if content {
            return not_fast(format!("content inside {}", e.qname()));
        }
        Ok(())
    }

    fn instruction(&mut self, e: &SElement, outermost: bool) -> Result<Instr, NotFast> {
        if e.uri == XSLT_NS {
            return match e.local.as_str() {
                "text" => {
                    Self::only_attrs(e, &[])?;
                    let mut text = Vec::new();
                    for c in &e.children {
                        match c {
                            SNode::Text(t) => text.extend_from_slice(t),
                            SNode::Element(_) => {
                                return not_fast("an element inside xsl:text");
                            }
                        }
                    }
                    Ok(Instr::Text(escape_text(&text).into()))
                }
                "value-of" => {
                    Self::only_attrs(e, &["select"])?;
                    Self::no_content(e)?;
                    let select = e.attr("select").unwrap_or_default();
                    Ok(Instr::ValueOf(self.select(select, "xsl:value-of")?))
                }
                "apply-templates" => {
                    Self::only_attrs(e, &["select"])?;
                    Self::no_content(e)?;
                    match e.attr("select") {
                        None => Ok(Instr::Apply(None)),
                        Some(s) => match self.select(s, "xsl:apply-templates")? {
                            None => not_fast("xsl:apply-templates select=\".\""),
                            Some(p) if p.absolute && !self.in_root_template => not_fast(format!(
                                "xsl:apply-templates select=\"{s}\" from the root outside the template for '/'"
                            )),
                            some => Ok(Instr::Apply(some)),
                        },
                    }
                }
                other => not_fast(format!("xsl:{other} in a template")),
            };
        }
        let qname = e.qname();
        if !e.decls.is_empty() {
            return not_fast(format!(
                "namespace declarations on <{qname}> (only the stylesheet element may declare)"
            ));
        }
        if e.prefix == "xml" {
            return not_fast(format!("the element name <{qname}>"));
        }
        let uri = if e.uri.is_empty() {
            None
        } else {
            Some(e.uri.clone().into_boxed_str())
        };
        let mut attrs = Vec::new();
        for (p, l, v) in &e.attrs {
            if !p.is_empty() {
                return not_fast(format!("the prefixed attribute {p}:{l} on <{qname}>"));
            }
            if v.contains(['{', '}']) {
                return not_fast(format!(
                    "an attribute value template in {l}=\"{v}\" on <{qname}>"
                ));
            }
            attrs.push(b' ');
            attrs.extend_from_slice(l.as_bytes());
            attrs.extend_from_slice(b"=\"");
            escape_attr(v.as_bytes(), self.ascii_attrs, &mut attrs);
            attrs.push(b'"');
        }
        let body = self.body(&e.children, false)?;
        Ok(Instr::Element(Box::new(Literal {
            qname: qname.into_bytes().into(),
            prefix: e.prefix.clone().into(),
            uri,
            attrs: attrs.into(),
            outermost,
            body,
        })))
    }
}

impl FastStylesheet {
    /// Compiles `stylesheet` (its bytes) if it is inside the class, else says why not. The
    /// stylesheet is expected to have compiled with libxslt already: this only classifies.
    pub fn analyse(stylesheet: &[u8]) -> Result<FastStylesheet, NotFast> {
        let mut reader = Reader::new();
        let mut sink = TreeSink::default();
        let uris = [XSLT_NS.to_owned()];
        reader
            .feed(stylesheet, &uris, &mut sink)
            .and_then(|_| reader.finish())
            .map_err(|e| NotFast(format!("the stylesheet could not be read here: {e}")))?;
        let Some(root) = sink.root else {
            return not_fast("no stylesheet element");
        };
        if !(root.is_xsl("stylesheet") || root.is_xsl("transform")) {
            return not_fast("a literal result element as the stylesheet");
        }
        for (p, l, v) in &root.attrs {
            match (p.as_str(), l.as_str()) {
                ("", "version") if v == "1.0" => {}
                ("", "version") => return not_fast(format!("version=\"{v}\"")),
                ("", "exclude-result-prefixes") => {}
                _ => {
                    let name = if p.is_empty() {
                        l.clone()
                    } else {
                        format!("{p}:{l}")
                    };
                    return not_fast(format!("the stylesheet attribute '{name}'"));
                }
            }
        }
        let bindings = &root.decls;
        for (k, (p, u)) in bindings.iter().enumerate() {
            if u.is_empty() {
                return not_fast("xmlns=\"\" on the stylesheet element");
            }
            if !plain_uri(u) {
                return not_fast(format!("the namespace URI '{u}'"));
            }
            if p == "xml" {
                return not_fast("a declaration of the xml prefix");
            }
            if bindings[..k].iter().any(|(_, v)| v == u) {
                return not_fast(format!("namespace '{u}' bound to two prefixes"));
            }
        }
        let mut excluded: Vec<&str> = Vec::new();
        if let Some(list) = root.attr("exclude-result-prefixes") {
            for token in list.split_ascii_whitespace() {
                let prefix = if token == "#default" { "" } else { token };
                match bindings.iter().find(|(p, _)| p == prefix) {
                    Some((_, u)) => excluded.push(u),
                    None => {
                        return not_fast(format!(
                            "exclude-result-prefixes names '{token}', not declared there"
                        ))
                    }
                }
            }
        }
        let inherited = bindings
            .iter()
            .filter(|(_, u)| u != XSLT_NS && !excluded.contains(&u.as_str()))
            .map(|(p, u)| (p.clone().into_boxed_str(), u.clone().into_boxed_str()))
            .collect();
        let encoding_declared = root.children.iter().any(|c| {
            matches!(c, SNode::Element(e) if e.is_xsl("output") && e.attr("encoding").is_some())
        });
        let mut c = Compiler {
            bindings,
            ascii_attrs: !encoding_declared,
            in_root_template: false,
            uris: Vec::new(),
            names: Vec::new(),
            bodies: Vec::new(),
        };
        let mut output = None;
        let mut root_template = None;
        let mut templates: Vec<(u32, usize)> = Vec::new();
        for child in &root.children {
            let e = match child {
                SNode::Text(t) if is_blank(t) => continue,
                SNode::Text(_) => return not_fast("text between top-level elements"),
                SNode::Element(e) => e,
            };
            if e.is_xsl("output") {
                if output.is_some() {
                    return not_fast("more than one xsl:output");
                }
                Compiler::only_attrs(
                    e,
                    &[
                        "method",
                        "omit-xml-declaration",
                        "indent",
                        "encoding",
                        "media-type",
                    ],
                )?;
                Compiler::no_content(e)?;
                if e.attr("method") != Some("xml") {
                    return not_fast("xsl:output without method=\"xml\"");
                }
                let omit = match e.attr("omit-xml-declaration") {
                    None | Some("no") => false,
                    Some("yes") => true,
                    Some(v) => return not_fast(format!("omit-xml-declaration=\"{v}\"")),
                };
                match e.attr("indent") {
                    None | Some("no") => {}
                    Some(v) => return not_fast(format!("indent=\"{v}\"")),
                }
                match e.attr("encoding") {
                    None | Some("UTF-8") => {}
                    Some(v) => return not_fast(format!("encoding=\"{v}\"")),
                }
                output = Some((
                    omit,
                    e.attr("encoding").is_some(),
                    e.attr("indent").is_none(),
                ));
            } else if e.is_xsl("template") {
                Compiler::only_attrs(e, &["match"])?;
                let Some(pattern) = e.attr("match") else {
                    return not_fast("a template without match");
                };
                c.in_root_template = pattern == "/";
                let body = c.body(&e.children, true)?;
                c.bodies.push(body);
                let index = c.bodies.len() - 1;
                if pattern == "/" {
                    if root_template.replace(index).is_some() {
                        return not_fast("two templates match '/'");
                    }
                } else {
                    if pattern.contains(['/', '|', '[', '*', '@', '(', ' ']) {
                        return not_fast(format!("the pattern match=\"{pattern}\""));
                    }
                    let id = c
                        .name_id(pattern)
                        .map_err(|e| NotFast(format!("match=\"{pattern}\": {}", e.0)))?;
                    if templates.iter().any(|(n, _)| *n == id) {
                        return not_fast(format!("two templates match '{pattern}'"));
                    }
                    templates.push((id, index));
                }
            } else if e.uri == XSLT_NS {
                return not_fast(format!("xsl:{} at the top level", e.local));
            } else {
                return not_fast(format!("the top-level element <{}>", e.qname()));
            }
        }
        let Some((omit_declaration, encoding_declared, final_newline)) = output else {
            return not_fast("no xsl:output method=\"xml\"");
        };
        let mut by_name = vec![None; c.names.len() + 1];
        for (id, body) in templates {
            by_name[id as usize] = Some(body);
        }
        Ok(FastStylesheet {
            uris: c.uris,
            names: c.names,
            by_name,
            root: root_template,
            bodies: c.bodies,
            inherited,
            omit_declaration,
            encoding_declared,
            final_newline,
        })
    }

    /// Transforms `input`, serialised as libxslt would; `None` when the input is not one the
    /// fast path is sure to handle exactly as libxslt (run libxslt on it then).
    pub fn transform(&self, input: &[u8]) -> Option<Vec<u8>> {
        if input.len() > MAX_INPUT || !plain_declaration(input) {
            return None;
        }
        let mut sink = InputSink {
            sheet: self,
            nodes: Vec::with_capacity(64),
            text: Vec::with_capacity(input.len() / 2),
            open: Vec::new(),
            in_text: false,
            count: 0,
            declared: Vec::new(),
            in_scope: 0,
            bail: false,
        };
        let mut reader = Reader::new();
        let stopped = reader.feed(input, &self.uris, &mut sink).ok()?;
        if stopped || sink.bail {
            return None;
        }
        reader.finish().ok()?;
        let tree = Tree {
            nodes: sink.nodes,
            text: sink.text,
        };
        let mut out = Writer {
            buf: Vec::with_capacity(input.len() + 64),
            scope: Vec::new(),
            open: Vec::new(),
            tag_open: false,
        };
        if !self.omit_declaration {
            out.buf.extend_from_slice(if self.encoding_declared {
                b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            } else {
                b"<?xml version=\"1.0\"?>\n"
            });
        }
        let start = out.buf.len();
        let mut run = Run {
            sheet: self,
            tree: &tree,
            out,
            top_elements: 0,
            top_text: false,
        };
        match self.root {
            Some(body) => run.body(&self.bodies[body], DOC),
            None => run.apply_children(DOC),
        }
        let Run {
            mut out,
            top_elements,
            top_text,
            ..
        } = run;
        // A result that is not one element (top-level text, several elements, nothing) is
        // serialised by libxslt in ways not reproduced here.
        if top_elements != 1 || top_text {
            return None;
        }
        debug_assert!(out.open.is_empty() && out.buf.len() > start);
        if self.final_newline {
            out.buf.push(b'\n');
        }
        Some(out.buf)
    }
}

/// True unless the input starts with an XML declaration that names an encoding other than
/// UTF-8 or a version other than 1.0.
fn plain_declaration(input: &[u8]) -> bool {
    let body = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let Some(rest) = body.strip_prefix(b"<?xml") else {
        return true;
    };
    if !rest.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return true;
    }
    let Some(end) = memchr::memmem::find(&rest[..rest.len().min(512)], b"?>") else {
        return false;
    };
    let decl = &rest[..end];
    let value = |name: &[u8]| -> Option<Option<&[u8]>> {
        let at = match memchr::memmem::find(decl, name) {
            None => return Some(None),
            Some(at) => at,
        };
        let mut i = at + name.len();
        while decl
            .get(i)
            .is_some_and(|b| b.is_ascii_whitespace() || *b == b'=')
        {
            i += 1;
        }
        let q = *decl.get(i)?;
        if q != b'"' && q != b'\'' {
            return None;
        }
        let len = memchr::memchr(q, &decl[i + 1..])?;
        Some(Some(&decl[i + 1..i + 1 + len]))
    };
    let version_ok = matches!(value(b"version"), Some(Some(b"1.0")));
    let encoding_ok = match value(b"encoding") {
        Some(None) => true,
        Some(Some(e)) => e.eq_ignore_ascii_case(b"UTF-8"),
        None => false,
    };
    version_ok && encoding_ok
}

// ---------------------------------------------------------------------------------------------
// Reading the input.

/// The document node's index in a [`Tree`].
const DOC: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
enum Node {
    /// An element: its name id (0 when the stylesheet does not name it) and the index just
    /// past its subtree.
    Element { name: u32, end: u32 },
    /// Text (adjacent runs merged; comments and processing instructions contribute nothing
    /// to the result, so they are left out): a range of `Tree::text`.
    Text { start: u32, end: u32 },
}

/// The input in document order; an element's children follow it up to its `end`.
struct Tree {
    nodes: Vec<Node>,
    text: Vec<u8>,
}

impl Tree {
    /// The first child of `parent` (or the root element for [`DOC`]) and the end of the
    /// children.
    fn children(&self, parent: u32) -> Range<u32> {
        if parent == DOC {
            return 0..self.nodes.len().min(1) as u32;
        }
        match self.nodes[parent as usize] {
            Node::Element { end, .. } => parent + 1..end,
            Node::Text { .. } => 0..0,
        }
    }

    /// Index of the next sibling of node `i`.
    fn next(&self, i: u32) -> u32 {
        match self.nodes[i as usize] {
            Node::Element { end, .. } => end,
            Node::Text { .. } => i + 1,
        }
    }

    /// The string-value of node `i`: all the text inside it, in order.
    fn string_value(&self, i: u32, out: &mut Writer) {
        let range = if i == DOC {
            0..self.nodes.len() as u32
        } else {
            match self.nodes[i as usize] {
                Node::Element { end, .. } => i + 1..end,
                Node::Text { .. } => i..i + 1,
            }
        };
        for k in range {
            if let Node::Text { start, end } = self.nodes[k as usize] {
                out.text(&self.text[start as usize..end as usize]);
            }
        }
    }
}

struct InputSink<'s> {
    sheet: &'s FastStylesheet,
    nodes: Vec<Node>,
    text: Vec<u8>,
    open: Vec<u32>,
    in_text: bool,
    /// Nodes and attributes read, for the fall-back limit.
    count: usize,
    /// Namespace declarations per open element, and in scope, for the fall-back limits.
    declared: Vec<usize>,
    in_scope: usize,
    bail: bool,
}

impl InputSink<'_> {
    fn bail(&mut self) -> Result<bool, XmlError> {
        self.bail = true;
        Ok(true)
    }
}

impl Sink for InputSink<'_> {
    fn start(&mut self, el: &StartTag<'_>) -> Result<bool, XmlError> {
        self.in_text = false;
        let decls = el.attrs.iter().filter(|a| a.is_decl).count();
        let in_scope = self.in_scope + decls;
        self.count += 1 + el.attrs.len();
        if self.open.len() >= MAX_INPUT_DEPTH
            || el.attrs.len() > MAX_INPUT_ATTRS
            || in_scope > MAX_INPUT_ATTRS
            || self.count > MAX_INPUT_NODES
            || el.tag.len() > MAX_INPUT_TAG
        {
            return self.bail();
        }
        for a in el.attrs.iter().filter(|a| a.is_decl) {
            if !plain_ns_uri(&el.tag[a.value.clone()]) {
                return self.bail();
            }
        }
        self.declared.push(decls);
        self.in_scope = in_scope;
        let mut name = 0;
        for (k, (ns, local)) in self.sheet.names.iter().enumerate() {
            if *ns == el.ns && **local == *el.local {
                name = k as u32 + 1;
                break;
            }
        }
        self.open.push(self.nodes.len() as u32);
        self.nodes.push(Node::Element { name, end: 0 });
        Ok(false)
    }

    fn end(&mut self) -> Result<bool, XmlError> {
        self.in_text = false;
        self.in_scope -= self.declared.pop().unwrap_or(0);
        let end = self.nodes.len() as u32;
        if let Some(i) = self.open.pop() {
            if let Node::Element { end: e, .. } = &mut self.nodes[i as usize] {
                *e = end;
            }
        }
        Ok(false)
    }

    fn text(&mut self, piece: &[u8], _at: usize) -> Result<bool, XmlError> {
        // Every piece counts: libxml2 makes a node of each text run and CDATA section, which
        // arrive here as separate pieces (a long run may come in several: counting too many
        // only hands a document over sooner).
        self.count += 1;
        if self.count > MAX_INPUT_NODES {
            return self.bail();
        }
        let start = self.text.len() as u32;
        self.text.extend_from_slice(piece);
        let end = self.text.len() as u32;
        if self.in_text {
            if let Some(Node::Text { end: e, .. }) = self.nodes.last_mut() {
                *e = end;
                return Ok(false);
            }
        }
        self.in_text = true;
        self.nodes.push(Node::Text { start, end });
        Ok(false)
    }

    fn boundary(&mut self) -> Result<bool, XmlError> {
        self.count += 1;
        if self.count > MAX_INPUT_NODES {
            return self.bail();
        }
        Ok(false)
    }

    fn empty_cdata(&mut self) -> Result<bool, XmlError> {
        self.count += 1;
        if self.count > MAX_INPUT_NODES {
            return self.bail();
        }
        // libxslt copies the empty node into the result, where it keeps an element that
        // holds nothing else from being written `<e/>`; after text it changes nothing.
        if !self.in_text {
            let at = self.text.len() as u32;
            self.in_text = true;
            self.nodes.push(Node::Text { start: at, end: at });
        }
        Ok(false)
    }

    fn wants_text(&self) -> bool {
        true
    }
}

/// A namespace URI (as written) that libxml2 surely takes without a word: empty, or an
/// absolute URI of plain characters (`scheme:path`, or `scheme://host[:port]/path`). libxml2
/// refuses a document whose namespace URI it cannot parse and warns about relative ones; any
/// other URI goes to libxslt.
fn plain_ns_uri(v: &[u8]) -> bool {
    if v.is_empty() {
        return true;
    }
    let path_char =
        |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-' | b'/' | b':');
    let Some(colon) = v.iter().position(|&b| b == b':') else {
        return false;
    };
    let (scheme, rest) = (&v[..colon], &v[colon + 1..]);
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return false;
    }
    match rest.strip_prefix(b"//") {
        Some(after) => {
            let end = after.iter().position(|&b| b == b'/').unwrap_or(after.len());
            let (authority, path) = after.split_at(end);
            let (host, port) = match authority.iter().position(|&b| b == b':') {
                Some(c) => (&authority[..c], &authority[c + 1..]),
                None => (authority, &b"0"[..]),
            };
            !host.is_empty()
                && host
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
                && !port.is_empty()
                && port.iter().all(u8::is_ascii_digit)
                && path.iter().all(path_char)
        }
        None => !rest.starts_with(b"/") && rest.iter().all(path_char),
    }
}

// ---------------------------------------------------------------------------------------------
// Running the templates and writing the result.

struct Writer<'s> {
    buf: Vec<u8>,
    /// Namespace declarations in scope in the result: (prefix, URI), "" for the default.
    scope: Vec<(&'s str, &'s str)>,
    /// Open result elements: qname, scope length before it, whether it has a namespace.
    open: Vec<(&'s [u8], usize, bool)>,
    /// The last start tag is not closed yet (`>` or `/>` still to come).
    tag_open: bool,
}

impl<'s> Writer<'s> {
    fn lookup(&self, prefix: &str) -> Option<&'s str> {
        self.scope
            .iter()
            .rev()
            .find(|(p, _)| *p == prefix)
            .map(|(_, u)| *u)
    }

    fn declare(&mut self, prefix: &'s str, uri: &'s str) {
        self.scope.push((prefix, uri));
        self.buf.extend_from_slice(b" xmlns");
        if !prefix.is_empty() {
            self.buf.push(b':');
            self.buf.extend_from_slice(prefix.as_bytes());
        }
        self.buf.extend_from_slice(b"=\"");
        self.buf.extend_from_slice(uri.as_bytes());
        self.buf.push(b'"');
    }

    fn close_tag(&mut self) {
        if self.tag_open {
            self.buf.push(b'>');
            self.tag_open = false;
        }
    }

    fn start(&mut self, el: &'s Literal, inherited: &'s [(Box<str>, Box<str>)]) {
        self.close_tag();
        let parent_has_ns = self.open.last().is_some_and(|o| o.2);
        let mark = self.scope.len();
        self.buf.push(b'<');
        self.buf.extend_from_slice(&el.qname);
        match &el.uri {
            Some(uri) => {
                if self.lookup(&el.prefix) != Some(&**uri) {
                    self.declare(&el.prefix, uri);
                }
            }
            None => {
                // libxslt undeclares a default namespace in scope for an element in none.
                if parent_has_ns && self.lookup("").is_some_and(|u| !u.is_empty()) {
                    self.declare("", "");
                }
            }
        }
        if el.outermost {
            for (p, u) in inherited {
                if self.lookup(p) != Some(&**u) {
                    self.declare(p, u);
                }
            }
        }
        self.buf.extend_from_slice(&el.attrs);
        self.tag_open = true;
        self.open.push((&el.qname, mark, el.uri.is_some()));
    }

    fn end(&mut self) {
        let Some((qname, mark, _)) = self.open.pop() else {
            return;
        };
        if self.tag_open {
            self.buf.extend_from_slice(b"/>");
            self.tag_open = false;
        } else {
            self.buf.extend_from_slice(b"</");
            self.buf.extend_from_slice(qname);
            self.buf.push(b'>');
        }
        self.scope.truncate(mark);
    }

    /// Appends text from the input, escaping it.
    fn text(&mut self, t: &[u8]) {
        if t.is_empty() {
            return;
        }
        self.close_tag();
        escape_text_into(t, &mut self.buf);
    }

    /// Appends text already escaped.
    fn escaped(&mut self, t: &[u8]) {
        if t.is_empty() {
            return;
        }
        self.close_tag();
        self.buf.extend_from_slice(t);
    }
}

struct Run<'s, 't> {
    sheet: &'s FastStylesheet,
    tree: &'t Tree,
    out: Writer<'s>,
    /// Elements and text written at the top level of the result.
    top_elements: usize,
    top_text: bool,
}

impl<'s> Run<'s, '_> {
    fn body(&mut self, body: &'s [Instr], ctx: u32) {
        for instr in body {
            match instr {
                Instr::Element(el) => {
                    if self.out.open.is_empty() {
                        self.top_elements += 1;
                    }
                    self.out.start(el, &self.sheet.inherited);
                    self.body(&el.body, ctx);
                    self.out.end();
                }
                Instr::Text(t) => {
                    self.note_text(t);
                    self.out.escaped(t);
                }
                Instr::Apply(None) => self.apply_children(ctx),
                Instr::Apply(Some(select)) => {
                    let from = if select.absolute { DOC } else { ctx };
                    self.apply_path(from, &select.steps);
                }
                Instr::ValueOf(None) => {
                    let at = self.out.buf.len();
                    self.tree.string_value(ctx, &mut self.out);
                    self.note_written(at);
                }
                Instr::ValueOf(Some(select)) => {
                    let from = if select.absolute { DOC } else { ctx };
                    if let Some(first) = self.first(from, &select.steps) {
                        let at = self.out.buf.len();
                        self.tree.string_value(first, &mut self.out);
                        self.note_written(at);
                    }
                }
            }
        }
    }

    fn note_text(&mut self, t: &[u8]) {
        if self.out.open.is_empty() && !t.is_empty() {
            self.top_text = true;
        }
    }

    fn note_written(&mut self, at: usize) {
        if self.out.open.is_empty() && self.out.buf.len() > at {
            self.top_text = true;
        }
    }

    /// Applies templates to node `i`: its template, or the built-in rules.
    fn apply(&mut self, i: u32) {
        match self.tree.nodes[i as usize] {
            Node::Element { name, .. } => match self.sheet.by_name.get(name as usize) {
                Some(Some(body)) if name != 0 => {
                    let body = &self.sheet.bodies[*body];
                    self.body(body, i);
                }
                _ => self.apply_children(i),
            },
            Node::Text { start, end } => {
                let at = self.out.buf.len();
                // A copied text node closes the start tag even when empty (an empty CDATA
                // section: `<e></e>`, as libxslt writes it).
                self.out.close_tag();
                self.out.text(&self.tree.text[start as usize..end as usize]);
                self.note_written(at);
            }
        }
    }

    fn apply_children(&mut self, parent: u32) {
        let Range { mut start, end } = self.tree.children(parent);
        while start < end {
            self.apply(start);
            start = self.tree.next(start);
        }
    }

    /// Applies templates to the elements `steps` select from `from`, in document order.
    fn apply_path(&mut self, from: u32, steps: &[u32]) {
        let Some((&first, rest)) = steps.split_first() else {
            self.apply(from);
            return;
        };
        let Range { mut start, end } = self.tree.children(from);
        while start < end {
            if let Node::Element { name, .. } = self.tree.nodes[start as usize] {
                if name == first {
                    self.apply_path(start, rest);
                }
            }
            start = self.tree.next(start);
        }
    }

    /// The first element in document order that `steps` select from `from`.
    fn first(&self, from: u32, steps: &[u32]) -> Option<u32> {
        let Some((&first, rest)) = steps.split_first() else {
            return Some(from);
        };
        let Range { mut start, end } = self.tree.children(from);
        while start < end {
            if let Node::Element { name, .. } = self.tree.nodes[start as usize] {
                if name == first {
                    if let Some(found) = self.first(start, rest) {
                        return Some(found);
                    }
                }
            }
            start = self.tree.next(start);
        }
        None
    }
}

/// Text content as libxml2 writes it: `<`, `>`, `&` and CR as references.
fn escape_text(t: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(t.len());
    escape_text_into(t, &mut out);
    out
}

fn escape_text_into(t: &[u8], out: &mut Vec<u8>) {
    escape_into(t, false, out);
}

/// `t` escaped as libxml2 writes text (`attr` false) or an attribute value (`attr` true:
/// quotes, tabs and newlines too).
fn escape_into(t: &[u8], attr: bool, out: &mut Vec<u8>) {
    let mut from = 0;
    for (i, &b) in t.iter().enumerate() {
        let rep: &[u8] = match b {
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'&' => b"&amp;",
            b'\r' => b"&#13;",
            b'"' if attr => b"&quot;",
            b'\n' if attr => b"&#10;",
            b'\t' if attr => b"&#9;",
            _ => continue,
        };
        out.extend_from_slice(&t[from..i]);
        out.extend_from_slice(rep);
        from = i + 1;
    }
    out.extend_from_slice(&t[from..]);
}

/// An attribute value as libxml2 writes it; `ascii`: non-ASCII characters as hexadecimal
/// character references.
fn escape_attr(t: &[u8], ascii: bool, out: &mut Vec<u8>) {
    if ascii && !t.is_ascii() {
        let text = String::from_utf8_lossy(t);
        let mut plain = Vec::new();
        for c in text.chars() {
            if c.is_ascii() {
                plain.push(c as u8);
            } else {
                escape_attr(&plain, false, out);
                plain.clear();
                out.extend_from_slice(format!("&#x{:X};", c as u32).as_bytes());
            }
        }
        escape_attr(&plain, false, out);
        return;
    }
    escape_into(t, true, out);
}
