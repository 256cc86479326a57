//! A small read-only XML tree for WS-Security processing.
//!
//! Layout: [`Document::parse`] drives a quick-xml [`Reader`] over a private copy of the
//! input and records every element, text and comment node in one vector, in document
//! order, so a subtree is a contiguous index range. Element names stay as ranges into the
//! source (original prefixes kept), namespace URIs are interned, and text that needed no
//! decoding is a range into the source too; decoded text lives in one shared arena. Byte
//! spans of every element are kept so callers can splice the original bytes (swap an
//! `EncryptedData` for its plaintext, drop the `wsse:Security` header) without
//! re-serialising anything else.
//!
//! The parser is deliberately strict: it refuses DOCTYPE (so no entity expansion and no
//! external entities), processing instructions, unknown entities, unbound prefixes and
//! anything over the configured [`Limits`], and it stops at the first problem.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use quick_xml::errors::{Error as QxError, IllFormedError};
use quick_xml::events::{BytesDecl, Event};
use quick_xml::Reader;

/// The namespace the `xml` prefix is permanently bound to.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";
/// The namespace of `xmlns` declarations themselves; nothing may be bound to it.
pub const XMLNS_NS: &str = "http://www.w3.org/2000/xmlns/";

const NONE: u32 = u32::MAX;
/// Interned id of the empty namespace ("no namespace").
const NS_EMPTY: u32 = 0;
/// Interned id of [`XML_NS`].
const NS_XML: u32 = 1;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bounds enforced while parsing, before the whole input has been looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest element nesting accepted; the root element is at depth 1.
    pub max_depth: usize,
    /// Most element, text and comment nodes accepted in one document.
    pub max_nodes: usize,
    /// Most attributes on one element, namespace declarations included.
    pub max_attributes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_nodes: 1_000_000,
            max_attributes: 64,
        }
    }
}

/// The longest start tag accepted, `<` to `>`, as the streaming parser has it.
pub const MAX_START_TAG: usize = 64 * 1024;

/// Why a document was refused. `at` is a byte offset into the input.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    #[error("malformed XML at byte {at}: {reason}")]
    Malformed { at: usize, reason: String },
    #[error("unsupported encoding {0:?}: only UTF-8 is accepted")]
    UnsupportedEncoding(String),
    #[error("DOCTYPE at byte {at} is not allowed")]
    Doctype { at: usize },
    #[error("processing instruction at byte {at} is not allowed")]
    ProcessingInstruction { at: usize },
    #[error("unknown entity &{name}; at byte {at}: only the five predefined entities are allowed")]
    UnknownEntity { at: usize, name: String },
    #[error("namespace prefix {prefix:?} at byte {at} is not bound")]
    UnboundPrefix { at: usize, prefix: String },
    #[error("invalid namespace declaration at byte {at}: {reason}")]
    BadNamespace { at: usize, reason: &'static str },
    #[error("elements nested deeper than {limit} levels at byte {at}")]
    TooDeep { at: usize, limit: usize },
    #[error("more than {limit} nodes (reached at byte {at})")]
    TooManyNodes { at: usize, limit: usize },
    #[error("more than {limit} attributes on the element at byte {at}")]
    TooManyAttributes { at: usize, limit: usize },
    #[error("the start tag at byte {at} is longer than {limit} bytes")]
    StartTagTooLong { at: usize, limit: usize },
    #[error("duplicate attribute {name:?} at byte {at}")]
    DuplicateAttribute { at: usize, name: String },
    #[error("end tag </{found}> at byte {at} does not match start tag <{expected}>")]
    MismatchedEndTag {
        at: usize,
        expected: String,
        found: String,
    },
    #[error("{reason} at byte {at}: a document has exactly one root element")]
    NotOneRoot { at: usize, reason: &'static str },
}

impl XmlError {
    /// The byte offset the error was found at, when there is one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            XmlError::UnsupportedEncoding(_) => None,
            XmlError::Malformed { at, .. }
            | XmlError::Doctype { at }
            | XmlError::ProcessingInstruction { at }
            | XmlError::UnknownEntity { at, .. }
            | XmlError::UnboundPrefix { at, .. }
            | XmlError::BadNamespace { at, .. }
            | XmlError::TooDeep { at, .. }
            | XmlError::TooManyNodes { at, .. }
            | XmlError::TooManyAttributes { at, .. }
            | XmlError::StartTagTooLong { at, .. }
            | XmlError::DuplicateAttribute { at, .. }
            | XmlError::MismatchedEndTag { at, .. }
            | XmlError::NotOneRoot { at, .. } => Some(*at),
        }
    }
}

fn malformed(at: usize, reason: impl Into<String>) -> XmlError {
    XmlError::Malformed {
        at,
        reason: reason.into(),
    }
}

/// A node of one [`Document`]. Ids from another document index the wrong node or panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// Position in document order among all nodes of the document.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Element,
    Text,
    Comment,
}

/// One attribute of an element, namespace declarations excluded.
///
/// All attributes of a document share one reference-counted text buffer, so building
/// them costs no allocation each.
#[derive(Clone, Debug)]
pub struct Attr {
    text: Arc<str>,
    qname: [u32; 2],
    /// Length of the prefix; 0 when the name is unprefixed.
    prefix_len: u32,
    ns: [u32; 2],
    value: [u32; 2],
}

impl Attr {
    fn slice(&self, r: [u32; 2]) -> &str {
        self.text.get(range(r)).unwrap_or("")
    }

    /// The prefix as written; "" when none.
    pub fn prefix(&self) -> &str {
        self.slice([self.qname[0], self.qname[0] + self.prefix_len])
    }

    pub fn local_name(&self) -> &str {
        let skip = if self.prefix_len == 0 {
            0
        } else {
            self.prefix_len + 1
        };
        self.slice([self.qname[0] + skip, self.qname[1]])
    }

    /// The name as written, `prefix:local` or `local`.
    pub fn qname(&self) -> &str {
        self.slice(self.qname)
    }

    /// The namespace URI; "" for unprefixed attributes, which are in no namespace.
    pub fn namespace(&self) -> &str {
        self.slice(self.ns)
    }

    /// The value after reference decoding and XML 1.0 §3.3.3 normalisation.
    pub fn value(&self) -> &str {
        self.slice(self.value)
    }

    /// Cheap namespace equality for attributes of one document, whose namespace URIs
    /// are stored once each.
    pub(crate) fn same_namespace(&self, other: &Attr) -> bool {
        self.ns == other.ns && Arc::ptr_eq(&self.text, &other.text)
    }
}

impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        self.qname() == other.qname()
            && self.namespace() == other.namespace()
            && self.value() == other.value()
    }
}

impl Eq for Attr {}

#[derive(Clone, Debug)]
struct Node {
    kind: NodeKind,
    /// Text and comments: the value lives in the arena rather than in the source.
    in_arena: bool,
    parent: u32,
    first_child: u32,
    next_sibling: u32,
    /// One past the last node of this subtree.
    end: u32,
    span: [u32; 2],
    /// Elements: the content span. Text and comments: the value's range.
    inner: [u32; 2],
    /// Elements: index into `Document::elements`.
    element: u32,
}

impl Node {
    fn new(kind: NodeKind) -> Node {
        Node {
            kind,
            in_arena: false,
            parent: NONE,
            first_child: NONE,
            next_sibling: NONE,
            end: 0,
            span: [0, 0],
            inner: [0, 0],
            element: NONE,
        }
    }
}

/// What only elements have; kept apart so text nodes stay small.
#[derive(Clone, Debug)]
struct ElementData {
    /// The qualified name's range in the source.
    name: [u32; 2],
    prefix_len: u32,
    ns: u32,
    attrs: [u32; 2],
    decls: [u32; 2],
}

impl ElementData {
    fn prefix(&self) -> [u32; 2] {
        [self.name[0], self.name[0] + self.prefix_len]
    }

    fn local(&self) -> [u32; 2] {
        let skip = if self.prefix_len == 0 {
            0
        } else {
            self.prefix_len + 1
        };
        [self.name[0] + skip, self.name[1]]
    }
}

const NO_ELEMENT: &ElementData = &ElementData {
    name: [0, 0],
    prefix_len: 0,
    ns: NS_EMPTY,
    attrs: [0, 0],
    decls: [0, 0],
};

fn range(r: [u32; 2]) -> Range<usize> {
    r[0] as usize..r[1] as usize
}

/// A parsed, immutable XML document that owns a copy of its source bytes.
#[derive(Clone, Debug)]
pub struct Document {
    src: Box<str>,
    nodes: Vec<Node>,
    elements: Vec<ElementData>,
    attrs: Vec<Attr>,
    decls: Vec<(String, String)>,
    arena: String,
    namespaces: Vec<Box<str>>,
    root: u32,
}

/// Where a parse stood at a byte offset of its source (see [`Document::parse_marked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// Between two tokens, or within a run of character data, with this element the innermost
    /// open one (`None`: outside the document element).
    Between(Option<NodeId>),
    /// Inside a tag, a comment, a CDATA section, a reference or another markup token, or past
    /// the end of the source.
    Inside,
}

impl Document {
    /// Parses UTF-8 XML, enforcing `limits` as it goes.
    pub fn parse(src: &[u8], limits: &Limits) -> Result<Document, XmlError> {
        Self::parse_marked(src, limits, &[]).map(|(doc, _)| doc)
    }

    /// [`Document::parse`], also telling for each offset of `marks` where the parse stood
    /// there. A run of bytes between two marks that are both [`Boundary::Between`] with the
    /// same element is a balanced sequence of whole nodes of that element (text at its edges
    /// may join the text around it).
    pub fn parse_marked(
        src: &[u8],
        limits: &Limits,
        marks: &[usize],
    ) -> Result<(Document, Vec<Boundary>), XmlError> {
        // Offsets are stored as u32, and attribute text (names, values and namespace
        // URIs) can take up to about twice the input.
        if src.len() >= (u32::MAX / 2) as usize {
            return Err(malformed(0, "document larger than 2 GiB"));
        }
        let text =
            std::str::from_utf8(src).map_err(|e| malformed(e.valid_up_to(), "invalid UTF-8"))?;
        let mut builder = Builder::new(text, limits);
        let mut order: Vec<(usize, usize)> = marks.iter().copied().zip(0..).collect();
        order.sort_unstable();
        builder.marks = order;
        builder.boundaries = vec![Boundary::Inside; marks.len()];
        builder.run()?;
        let boundaries = std::mem::take(&mut builder.boundaries);
        let root = builder.root.unwrap_or(0);
        let attrs = builder.finish_attributes();
        let doc = Document {
            src: text.into(),
            nodes: builder.nodes,
            elements: builder.elements,
            attrs,
            decls: builder.decls,
            arena: builder.arena,
            namespaces: builder.namespaces,
            root,
        };
        Ok((doc, boundaries))
    }

    pub fn source(&self) -> &[u8] {
        self.src.as_bytes()
    }

    /// The document element.
    pub fn root(&self) -> NodeId {
        NodeId(self.root)
    }

    /// Number of nodes (elements, text and comments) in the document.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// Element data of `id`; empty data for text and comments.
    fn element(&self, id: NodeId) -> &ElementData {
        self.elements
            .get(self.node(id).element as usize)
            .unwrap_or(NO_ELEMENT)
    }

    fn src_str(&self, r: [u32; 2]) -> &str {
        self.src.get(range(r)).unwrap_or("")
    }

    pub fn kind(&self, id: NodeId) -> NodeKind {
        self.node(id).kind
    }

    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        let p = self.node(id).parent;
        (p != NONE).then_some(NodeId(p))
    }

    pub fn children(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let first = self.node(id).first_child;
        std::iter::successors((first != NONE).then_some(NodeId(first)), move |c| {
            let next = self.node(*c).next_sibling;
            (next != NONE).then_some(NodeId(next))
        })
    }

    pub fn element_children(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.children(id)
            .filter(move |c| self.node(*c).kind == NodeKind::Element)
    }

    /// Every element of the document, in document order.
    pub fn elements(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.element_ids(0..self.nodes.len() as u32)
    }

    /// The elements strictly below `id`, in document order.
    pub fn descendants(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.element_ids(id.0 + 1..self.node(id).end)
    }

    fn element_ids(&self, ids: Range<u32>) -> impl Iterator<Item = NodeId> + '_ {
        ids.map(NodeId)
            .filter(move |i| self.node(*i).kind == NodeKind::Element)
    }

    /// One past the last node of `id`'s subtree, so `id.index()..subtree_end(id)` is the
    /// subtree in document order.
    pub fn subtree_end(&self, id: NodeId) -> usize {
        self.node(id).end as usize
    }

    /// The node at `index` in document order.
    pub fn node_at(&self, index: usize) -> Option<NodeId> {
        (index < self.nodes.len()).then_some(NodeId(index as u32))
    }

    /// The element's prefix as written; "" when none (and for text and comments).
    pub fn prefix(&self, id: NodeId) -> &str {
        self.src_str(self.element(id).prefix())
    }

    pub fn local_name(&self, id: NodeId) -> &str {
        self.src_str(self.element(id).local())
    }

    /// The element's name as written, `prefix:local` or `local`.
    pub fn qname(&self, id: NodeId) -> &str {
        self.src_str(self.element(id).name)
    }

    /// The element's namespace URI; "" when it is in no namespace.
    pub fn namespace(&self, id: NodeId) -> &str {
        self.namespace_by_id(self.element(id).ns)
    }

    pub(crate) fn namespace_by_id(&self, ns: u32) -> &str {
        self.namespaces.get(ns as usize).map_or("", |s| s)
    }

    /// Whether `id` is an element named `local` in namespace `ns`.
    pub fn is(&self, id: NodeId, ns: &str, local: &str) -> bool {
        self.node(id).kind == NodeKind::Element
            && self.local_name(id) == local
            && self.namespace(id) == ns
    }

    /// The element's attributes in source order, namespace declarations excluded.
    pub fn attributes(&self, id: NodeId) -> &[Attr] {
        self.attrs.get(range(self.element(id).attrs)).unwrap_or(&[])
    }

    /// The value of the attribute with namespace `ns` ("" for unprefixed) and name `local`.
    pub fn attr(&self, id: NodeId, ns: &str, local: &str) -> Option<&str> {
        self.attributes(id)
            .iter()
            .find(|a| a.local_name() == local && a.namespace() == ns)
            .map(Attr::value)
    }

    /// Namespace declarations written on this element, in source order, as
    /// (prefix, URI); prefix "" is the default namespace and `xmlns=""` is ("", "").
    pub fn ns_decls(&self, id: NodeId) -> &[(String, String)] {
        self.decls.get(range(self.element(id).decls)).unwrap_or(&[])
    }

    /// The namespace bound to `prefix` ("" for the default namespace) in scope at `id`.
    /// `None` when unbound, including a default namespace undeclared with `xmlns=""`.
    pub fn lookup_namespace(&self, id: NodeId, prefix: &str) -> Option<&str> {
        match prefix {
            "xml" => return Some(XML_NS),
            "xmlns" => return Some(XMLNS_NS),
            _ => {}
        }
        let mut at = Some(id);
        while let Some(cur) = at {
            if let Some((_, uri)) = self.ns_decls(cur).iter().find(|(p, _)| p == prefix) {
                return (!uri.is_empty()).then_some(uri.as_str());
            }
            at = self.parent(cur);
        }
        None
    }

    /// A text or comment node's value: references decoded, CDATA content included, line
    /// endings normalised. "" for elements.
    pub fn text(&self, id: NodeId) -> &str {
        let n = self.node(id);
        match n.kind {
            NodeKind::Element => "",
            _ if n.in_arena => self.arena.get(range(n.inner)).unwrap_or(""),
            _ => self.src_str(n.inner),
        }
    }

    /// All text below `id` (or `id`'s own text) concatenated, comments excluded.
    pub fn text_content(&self, id: NodeId) -> String {
        let mut out = String::new();
        for i in id.0..self.node(id).end {
            if self.nodes[i as usize].kind == NodeKind::Text {
                out.push_str(self.text(NodeId(i)));
            }
        }
        out
    }

    /// Byte range of the node in the source. Elements: from the start tag's `<` to just
    /// after the end tag's `>` (or the empty-element tag's). Text: the raw text, CDATA
    /// sections and references included. Comments: `<!--` to `-->`.
    pub fn span(&self, id: NodeId) -> Range<usize> {
        range(self.node(id).span)
    }

    /// Byte range between the start tag's `>` and the end tag's `<`. For an empty-element
    /// tag this is the empty range at the tag's end. Text and comments: their span.
    pub fn content_span(&self, id: NodeId) -> Range<usize> {
        let n = self.node(id);
        match n.kind {
            NodeKind::Element => range(n.inner),
            _ => range(n.span),
        }
    }
}

/// Prefix bindings with shadowing, unwound when an element closes.
///
/// Small scopes, the usual case, are searched linearly from the innermost binding. Past
/// `INDEX_FROM` bindings a hash index takes over so that hostile documents with many
/// bindings in scope cannot make every lookup linear.
pub(crate) struct Scope<'a, V: Copy> {
    /// Key, value, and the index of the binding it shadows (only kept while indexed).
    entries: Vec<(&'a str, V, u32)>,
    index: Option<HashMap<&'a str, u32>>,
}

const INDEX_FROM: usize = 24;

/// Distinct namespace URIs a document may name before [`Builder::intern`] indexes them.
const NS_INDEX_FROM: usize = 16;

impl<'a, V: Copy> Scope<'a, V> {
    pub(crate) fn new() -> Self {
        Scope {
            entries: Vec::new(),
            index: None,
        }
    }

    pub(crate) fn bind(&mut self, key: &'a str, value: V) {
        let idx = self.entries.len() as u32;
        let shadowed = match &mut self.index {
            Some(index) => index.insert(key, idx).unwrap_or(NONE),
            None => NONE,
        };
        self.entries.push((key, value, shadowed));
        if self.index.is_none() && self.entries.len() > INDEX_FROM {
            let mut index = HashMap::with_capacity(self.entries.len() * 2);
            for (i, entry) in self.entries.iter_mut().enumerate() {
                entry.2 = index.insert(entry.0, i as u32).unwrap_or(NONE);
            }
            self.index = Some(index);
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        match &self.index {
            Some(index) => {
                let idx = *index.get(key)?;
                self.entries.get(idx as usize).map(|e| e.1)
            }
            None => self.entries.iter().rev().find(|e| e.0 == key).map(|e| e.1),
        }
    }

    pub(crate) fn mark(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn unwind(&mut self, mark: usize) {
        while self.entries.len() > mark {
            let Some((key, _, shadowed)) = self.entries.pop() else {
                break;
            };
            if let Some(index) = &mut self.index {
                if shadowed == NONE {
                    index.remove(key);
                } else {
                    index.insert(key, shadowed);
                }
            }
        }
        if self.entries.len() <= INDEX_FROM / 2 {
            self.index = None;
        }
    }
}

struct Open {
    node: u32,
    element: u32,
    last_child: u32,
    scope_mark: usize,
}

/// Text being gathered from consecutive text, CDATA and reference events.
struct PendingText {
    span_start: usize,
    span_end: usize,
    /// The value is `src[value]` as long as `arena_start` is `None`.
    value: Range<usize>,
    arena_start: Option<usize>,
}

struct RawAttr {
    name: Range<usize>,
    value: Range<usize>,
}

/// An attribute whose namespace URI is not yet placed in the shared text.
struct PendingAttr {
    qname: [u32; 2],
    prefix_len: u32,
    ns: u32,
    value: [u32; 2],
}

struct Builder<'s> {
    src: &'s str,
    /// Where quick-xml's offsets start: after a byte order mark, which it skips silently.
    base: usize,
    limits: &'s Limits,
    nodes: Vec<Node>,
    elements: Vec<ElementData>,
    attrs: Vec<PendingAttr>,
    /// Attribute names and values, shared by all [`Attr`]s once parsing is done.
    attr_text: String,
    decls: Vec<(String, String)>,
    arena: String,
    namespaces: Vec<Box<str>>,
    ns_ids: HashMap<Box<str>, u32>,
    scope: Scope<'s, u32>,
    open: Vec<Open>,
    pending: Option<PendingText>,
    root: Option<u32>,
    raw: Vec<RawAttr>,
    /// Offsets to report on, ascending, each with its index in the caller's list.
    marks: Vec<(usize, usize)>,
    /// The first of `marks` not reached yet.
    next_mark: usize,
    boundaries: Vec<Boundary>,
}

impl<'s> Builder<'s> {
    fn new(src: &'s str, limits: &'s Limits) -> Self {
        let base = if src.as_bytes().starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        Builder {
            src,
            base,
            limits,
            // Rough shares of a typical SOAP message, so growth rarely has to copy.
            nodes: Vec::with_capacity(src.len() / 24),
            elements: Vec::with_capacity(src.len() / 48),
            attrs: Vec::with_capacity(src.len() / 48),
            attr_text: String::with_capacity(src.len() / 4),
            decls: Vec::new(),
            arena: String::with_capacity(src.len() / 8),
            namespaces: vec![Box::from(""), Box::from(XML_NS)],
            ns_ids: HashMap::new(),
            scope: Scope::new(),
            open: Vec::new(),
            pending: None,
            root: None,
            raw: Vec::new(),
            marks: Vec::new(),
            next_mark: 0,
            boundaries: Vec::new(),
        }
    }

    fn run(&mut self) -> Result<(), XmlError> {
        let src = self.src;
        let mut reader = Reader::from_str(src.get(self.base..).unwrap_or(""));
        reader.config_mut().check_end_names = true;
        let mut first = true;
        loop {
            let start = self.base + reader.buffer_position() as usize;
            let event = match reader.read_event() {
                Ok(event) => event,
                Err(e) => {
                    let at = self.base + reader.error_position() as usize;
                    return Err(map_reader_error(e, at));
                }
            };
            let end = self.base + reader.buffer_position() as usize;
            if self.next_mark < self.marks.len() {
                self.pass_marks(start, end, matches!(event, Event::Text(_) | Event::Eof));
            }
            match event {
                Event::Decl(decl) if first && start == self.base => check_decl(&decl, start)?,
                Event::Decl(_) | Event::PI(_) => {
                    return Err(XmlError::ProcessingInstruction { at: start })
                }
                Event::DocType(_) => return Err(XmlError::Doctype { at: start }),
                Event::Start(_) | Event::Empty(_) if end - start > MAX_START_TAG => {
                    return Err(XmlError::StartTagTooLong {
                        at: start,
                        limit: MAX_START_TAG,
                    });
                }
                Event::Start(tag) => {
                    self.flush_text()?;
                    self.start_element(start, end, tag.name().as_ref().len(), false)?;
                }
                Event::Empty(tag) => {
                    self.flush_text()?;
                    self.start_element(start, end, tag.name().as_ref().len(), true)?;
                }
                Event::End(_) => {
                    self.flush_text()?;
                    self.end_element(start, end)?;
                }
                Event::Text(_) => self.text(start, end)?,
                Event::CData(_) => self.cdata(start, end)?,
                Event::GeneralRef(_) => self.reference(start, end)?,
                Event::Comment(_) => {
                    self.flush_text()?;
                    self.comment(start, end)?;
                }
                Event::Eof => break,
            }
            first = false;
        }
        self.flush_text()?;
        if let Some(open) = self.open.last() {
            let at = self
                .nodes
                .get(open.node as usize)
                .map_or(0, |n| n.span[0] as usize);
            return Err(malformed(
                at,
                "element not closed before the end of the document",
            ));
        }
        if self.root.is_none() {
            return Err(XmlError::NotOneRoot {
                at: self.src.len(),
                reason: "no root element",
            });
        }
        Ok(())
    }

    fn push_node(&mut self, mut node: Node, at: usize) -> Result<u32, XmlError> {
        if self.nodes.len() >= self.limits.max_nodes {
            return Err(XmlError::TooManyNodes {
                at,
                limit: self.limits.max_nodes,
            });
        }
        let idx = self.nodes.len() as u32;
        node.end = idx + 1;
        if let Some(open) = self.open.last_mut() {
            node.parent = open.node;
            let prev = std::mem::replace(&mut open.last_child, idx);
            if prev == NONE {
                self.nodes[open.node as usize].first_child = idx;
            } else {
                self.nodes[prev as usize].next_sibling = idx;
            }
        }
        self.nodes.push(node);
        Ok(idx)
    }

    /// Places the namespace URIs in the shared attribute text and builds the [`Attr`]s.
    fn finish_attributes(&mut self) -> Vec<Attr> {
        let mut text = std::mem::take(&mut self.attr_text);
        let ns_ranges: Vec<[u32; 2]> = self
            .namespaces
            .iter()
            .map(|uri| {
                let start = text.len() as u32;
                text.push_str(uri);
                [start, text.len() as u32]
            })
            .collect();
        let text: Arc<str> = Arc::from(text);
        self.attrs
            .iter()
            .map(|a| Attr {
                text: Arc::clone(&text),
                qname: a.qname,
                prefix_len: a.prefix_len,
                ns: ns_ranges.get(a.ns as usize).copied().unwrap_or([0, 0]),
                value: a.value,
            })
            .collect()
    }

    /// The id of a namespace URI. A message names a handful, found by comparing them; past
    /// `NS_INDEX_FROM` a hash index takes over, so a hostile document's thousands cost no
    /// linear search each.
    fn intern(&mut self, uri: &str) -> u32 {
        if self.namespaces.len() <= NS_INDEX_FROM {
            if let Some(i) = self.namespaces.iter().position(|n| **n == *uri) {
                return i as u32;
            }
        } else if let Some(id) = self.ns_ids.get(uri) {
            return *id;
        }
        let id = self.namespaces.len() as u32;
        self.namespaces.push(uri.into());
        if self.namespaces.len() > NS_INDEX_FROM {
            if self.ns_ids.is_empty() {
                for (i, n) in self.namespaces.iter().enumerate() {
                    self.ns_ids.insert(n.clone(), i as u32);
                }
            } else {
                self.ns_ids.insert(uri.into(), id);
            }
        }
        id
    }

    /// Records the marks up to the token `start..end`: those at or before its start lie
    /// between tokens; those inside it lie inside it, unless it is character data.
    fn pass_marks(&mut self, start: usize, end: usize, character_data: bool) {
        let open = self.open.last().map(|o| NodeId(o.node));
        while let Some(&(at, index)) = self.marks.get(self.next_mark) {
            let here = if at <= start || (character_data && at < end) {
                Boundary::Between(open)
            } else if at < end {
                Boundary::Inside
            } else {
                break;
            };
            if let Some(b) = self.boundaries.get_mut(index) {
                *b = here;
            }
            self.next_mark += 1;
        }
    }

    fn start_element(
        &mut self,
        start: usize,
        end: usize,
        name_len: usize,
        empty: bool,
    ) -> Result<(), XmlError> {
        let src = self.src;
        if self.open.is_empty() && self.root.is_some() {
            return Err(XmlError::NotOneRoot {
                at: start,
                reason: "second root element",
            });
        }
        if self.open.len() >= self.limits.max_depth {
            return Err(XmlError::TooDeep {
                at: start,
                limit: self.limits.max_depth,
            });
        }
        let name_start = start + 1;
        let name_end = name_start + name_len;
        let qname = src.get(name_start..name_end).unwrap_or("");
        let prefix_len = check_qname(qname, name_start)?;
        let attrs_end = if empty { end - 2 } else { end - 1 };
        self.scan_attributes(name_end, attrs_end, start)?;

        let scope_mark = self.scope.mark();
        let decl_start = self.decls.len();
        for i in 0..self.raw.len() {
            let (name, value) = (self.raw[i].name.clone(), self.raw[i].value.clone());
            let qn = src.get(name.clone()).unwrap_or("");
            let prefix = match qn.strip_prefix("xmlns") {
                Some("") => "",
                Some(rest) => match rest.strip_prefix(':') {
                    Some(p) => p,
                    None => continue,
                },
                None => continue,
            };
            if !prefix.is_empty() {
                check_ncname(prefix, name.start + 6)?;
            }
            if self.decls[decl_start..].iter().any(|(p, _)| p == prefix) {
                return Err(XmlError::DuplicateAttribute {
                    at: name.start,
                    name: qn.to_owned(),
                });
            }
            let uri = attr_value(src.get(value.clone()).unwrap_or(""), value.start)?;
            check_declaration(prefix, &uri, name.start)?;
            let id = self.intern(&uri);
            self.scope.bind(prefix, id);
            self.decls.push((prefix.to_owned(), uri.into_owned()));
        }

        let prefix = &qname[..prefix_len];
        // A child that declares nothing and shares its parent's prefix shares its
        // namespace too; that skips the scope lookup for most elements.
        let inherited = match self.open.last() {
            Some(open) if self.decls.len() == decl_start => {
                let parent = &self.elements[open.element as usize];
                (src.get(range(parent.prefix())) == Some(prefix)).then_some(parent.ns)
            }
            _ => None,
        };
        let ns = match inherited {
            Some(ns) => ns,
            None if prefix.is_empty() => self.scope.get("").unwrap_or(NS_EMPTY),
            None => self.resolve_prefix(prefix, name_start, true)?,
        };

        let attr_start = self.attrs.len();
        for i in 0..self.raw.len() {
            let (name, value) = (self.raw[i].name.clone(), self.raw[i].value.clone());
            let qn = src.get(name.clone()).unwrap_or("");
            if qn == "xmlns" || qn.starts_with("xmlns:") {
                continue;
            }
            let plen = check_qname(qn, name.start)?;
            let ns_id = if plen == 0 {
                NS_EMPTY
            } else {
                self.resolve_prefix(&qn[..plen], name.start, false)?
            };
            let val = attr_value(src.get(value.clone()).unwrap_or(""), value.start)?;
            let local = &qn[if plen == 0 { 0 } else { plen + 1 }..];
            for other in &self.attrs[attr_start..] {
                let skip = if other.prefix_len == 0 {
                    0
                } else {
                    other.prefix_len + 1
                };
                let other_local = [other.qname[0] + skip, other.qname[1]];
                if other.ns == ns_id && self.attr_text.get(range(other_local)) == Some(local) {
                    return Err(XmlError::DuplicateAttribute {
                        at: name.start,
                        name: qn.to_owned(),
                    });
                }
            }
            let qname_start = self.attr_text.len() as u32;
            self.attr_text.push_str(qn);
            let value_start = self.attr_text.len() as u32;
            self.attr_text.push_str(&val);
            self.attrs.push(PendingAttr {
                qname: [qname_start, value_start],
                prefix_len: plen as u32,
                ns: ns_id,
                value: [value_start, self.attr_text.len() as u32],
            });
        }

        let element = self.elements.len() as u32;
        let mut node = Node::new(NodeKind::Element);
        node.span = [start as u32, end as u32];
        node.inner = [end as u32, end as u32];
        node.element = element;
        let idx = self.push_node(node, start)?;
        self.elements.push(ElementData {
            name: [name_start as u32, name_end as u32],
            prefix_len: prefix_len as u32,
            ns,
            attrs: [attr_start as u32, self.attrs.len() as u32],
            decls: [decl_start as u32, self.decls.len() as u32],
        });
        if self.open.is_empty() {
            self.root = Some(idx);
        }
        if empty {
            self.scope.unwind(scope_mark);
        } else {
            self.open.push(Open {
                node: idx,
                element,
                last_child: NONE,
                scope_mark,
            });
        }
        Ok(())
    }

    fn resolve_prefix(&self, prefix: &str, at: usize, element: bool) -> Result<u32, XmlError> {
        match prefix {
            "xml" => Ok(NS_XML),
            "xmlns" if element => Err(XmlError::BadNamespace {
                at,
                reason: "the xmlns prefix cannot name an element",
            }),
            _ => self
                .scope
                .get(prefix)
                .ok_or_else(|| XmlError::UnboundPrefix {
                    at,
                    prefix: prefix.to_owned(),
                }),
        }
    }

    /// Splits the attributes of a start tag (`from..to` excludes the name and the closing
    /// `>` or `/>`) into `self.raw`. Duplicates are caught later, by expanded name.
    fn scan_attributes(&mut self, from: usize, to: usize, tag: usize) -> Result<(), XmlError> {
        let bytes = self.src.as_bytes();
        self.raw.clear();
        let mut i = from;
        loop {
            let ws = i;
            while i < to && is_ws(bytes[i]) {
                i += 1;
            }
            if i >= to {
                break;
            }
            if i == ws {
                return Err(malformed(i, "expected whitespace before an attribute"));
            }
            let name_start = i;
            while i < to && !is_ws(bytes[i]) && bytes[i] != b'=' {
                i += 1;
            }
            let name = name_start..i;
            while i < to && is_ws(bytes[i]) {
                i += 1;
            }
            if i >= to || bytes[i] != b'=' {
                return Err(malformed(i, "expected '=' after an attribute name"));
            }
            i += 1;
            while i < to && is_ws(bytes[i]) {
                i += 1;
            }
            let quote = match bytes.get(i) {
                Some(q @ (b'"' | b'\'')) if i < to => *q,
                _ => return Err(malformed(i, "attribute value must be quoted")),
            };
            let value_start = i + 1;
            let Some(len) = bytes[value_start..to].iter().position(|b| *b == quote) else {
                return Err(malformed(i, "unterminated attribute value"));
            };
            i = value_start + len + 1;
            if self.raw.len() >= self.limits.max_attributes {
                return Err(XmlError::TooManyAttributes {
                    at: tag,
                    limit: self.limits.max_attributes,
                });
            }
            self.raw.push(RawAttr {
                name,
                value: value_start..value_start + len,
            });
        }
        Ok(())
    }

    fn end_element(&mut self, start: usize, end: usize) -> Result<(), XmlError> {
        let Some(open) = self.open.pop() else {
            return Err(malformed(start, "end tag without a start tag"));
        };
        let count = self.nodes.len() as u32;
        let node = &mut self.nodes[open.node as usize];
        node.span[1] = end as u32;
        node.inner[1] = start as u32;
        node.end = count;
        self.scope.unwind(open.scope_mark);
        Ok(())
    }

    fn text(&mut self, start: usize, end: usize) -> Result<(), XmlError> {
        let raw = self.src.get(start..end).unwrap_or("");
        if self.open.is_empty() {
            return match raw.bytes().position(|b| !is_ws(b)) {
                None => Ok(()),
                Some(i) => Err(malformed(start + i, "text outside the root element")),
            };
        }
        let has_cr = scan_chars(raw, start, true)?;
        self.append_text(start, end, start..end, has_cr);
        Ok(())
    }

    fn cdata(&mut self, start: usize, end: usize) -> Result<(), XmlError> {
        if self.open.is_empty() {
            return Err(malformed(start, "CDATA section outside the root element"));
        }
        let value = start + "<![CDATA[".len()..end - "]]>".len();
        let has_cr = scan_chars(
            self.src.get(value.clone()).unwrap_or(""),
            value.start,
            false,
        )?;
        self.append_text(start, end, value, has_cr);
        Ok(())
    }

    fn reference(&mut self, start: usize, end: usize) -> Result<(), XmlError> {
        if self.open.is_empty() {
            return Err(malformed(start, "reference outside the root element"));
        }
        let name = self.src.get(start + 1..end - 1).unwrap_or("");
        let c = decode_reference(name, start)?;
        let pending = self.arena_pending(start);
        pending.span_end = end;
        self.arena.push(c);
        Ok(())
    }

    /// Adds raw text (`value` in the source) to the pending text node.
    fn append_text(&mut self, start: usize, end: usize, value: Range<usize>, has_cr: bool) {
        if self.pending.is_none() && !has_cr {
            self.pending = Some(PendingText {
                span_start: start,
                span_end: end,
                value,
                arena_start: None,
            });
            return;
        }
        let src = self.src;
        let pending = self.arena_pending(start);
        pending.span_end = end;
        push_line_normalised(&mut self.arena, src.get(value).unwrap_or(""));
    }

    /// The pending text node, switched to collecting its value in the arena.
    fn arena_pending(&mut self, start: usize) -> &mut PendingText {
        let pending = self.pending.get_or_insert(PendingText {
            span_start: start,
            span_end: start,
            value: start..start,
            arena_start: None,
        });
        if pending.arena_start.is_none() {
            pending.arena_start = Some(self.arena.len());
            self.arena
                .push_str(self.src.get(pending.value.clone()).unwrap_or(""));
        }
        pending
    }

    fn flush_text(&mut self) -> Result<(), XmlError> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let mut node = Node::new(NodeKind::Text);
        node.span = [p.span_start as u32, p.span_end as u32];
        match p.arena_start {
            Some(from) => {
                node.in_arena = true;
                node.inner = [from as u32, self.arena.len() as u32];
            }
            None => node.inner = [p.value.start as u32, p.value.end as u32],
        }
        self.push_node(node, p.span_start)?;
        Ok(())
    }

    fn comment(&mut self, start: usize, end: usize) -> Result<(), XmlError> {
        let value = start + "<!--".len()..end - "-->".len();
        let text = self.src.get(value.clone()).unwrap_or("");
        if text.contains("--") || text.ends_with('-') {
            return Err(malformed(start, "'--' inside a comment"));
        }
        let has_cr = scan_chars(text, value.start, false)?;
        if self.open.is_empty() {
            // Comments outside the document element are checked but not kept: nothing
            // downstream (same-document references, c14n of an element) can reach them.
            return Ok(());
        }
        let mut node = Node::new(NodeKind::Comment);
        node.span = [start as u32, end as u32];
        if has_cr {
            let from = self.arena.len();
            push_line_normalised(&mut self.arena, text);
            node.in_arena = true;
            node.inner = [from as u32, self.arena.len() as u32];
        } else {
            node.inner = [value.start as u32, value.end as u32];
        }
        self.push_node(node, start)?;
        Ok(())
    }
}

fn map_reader_error(e: QxError, at: usize) -> XmlError {
    match e {
        QxError::IllFormed(IllFormedError::MismatchedEndTag { expected, found }) => {
            XmlError::MismatchedEndTag {
                at,
                expected,
                found,
            }
        }
        other => malformed(at, other.to_string()),
    }
}

fn check_decl(decl: &BytesDecl<'_>, at: usize) -> Result<(), XmlError> {
    let version = decl.version().map_err(|e| malformed(at, e.to_string()))?;
    if version != "1.0" {
        return Err(malformed(
            at,
            format!("unsupported XML version {version:?}"),
        ));
    }
    if let Some(enc) = decl.encoding() {
        let enc = enc.map_err(|e| malformed(at, e.to_string()))?;
        if !enc.eq_ignore_ascii_case("utf-8") {
            return Err(XmlError::UnsupportedEncoding(enc.into_owned()));
        }
    }
    if let Some(sd) = decl.standalone() {
        let sd = sd.map_err(|e| malformed(at, e.to_string()))?;
        if sd != "yes" && sd != "no" {
            return Err(malformed(at, "standalone must be \"yes\" or \"no\""));
        }
    }
    Ok(())
}

/// Namespaces in XML 1.0 §3 constraints on one declaration.
fn check_declaration(prefix: &str, uri: &str, at: usize) -> Result<(), XmlError> {
    let bad = |reason| Err(XmlError::BadNamespace { at, reason });
    match prefix {
        "xml" if uri != XML_NS => bad("the xml prefix is bound to the XML namespace only"),
        "xml" => Ok(()),
        "xmlns" => bad("the xmlns prefix cannot be declared"),
        _ if uri == XML_NS => bad("only the xml prefix may be bound to the XML namespace"),
        _ if uri == XMLNS_NS => bad("nothing may be bound to the xmlns namespace"),
        "" => Ok(()),
        _ if uri.is_empty() => bad("a prefix cannot be undeclared in XML 1.0"),
        _ => Ok(()),
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_name_start(c: char) -> bool {
    matches!(c,
        'A'..='Z' | 'a'..='z' | '_'
        | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}' | '\u{F8}'..='\u{2FF}'
        | '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}' | '\u{200C}'..='\u{200D}'
        | '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}' | '\u{3001}'..='\u{D7FF}'
        | '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}' | '\u{10000}'..='\u{EFFFF}')
}

fn is_name_char(c: char) -> bool {
    is_name_start(c)
        || matches!(c, '-' | '.' | '0'..='9' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
}

const NAME_START: u8 = 1;
const NAME_CHAR: u8 = 2;

/// NCName start and name characters among single bytes; every byte from 0x80 up is 0 and
/// sends the check to the full Unicode classes.
static ASCII_NAME: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphabetic() || c == b'_' {
            table[b] = NAME_START | NAME_CHAR;
        } else if c.is_ascii_digit() || c == b'-' || c == b'.' {
            table[b] = NAME_CHAR;
        }
        b += 1;
    }
    table
};

/// An XML name without colons (Namespaces in XML 1.0 NCName).
fn check_ncname(name: &str, at: usize) -> Result<(), XmlError> {
    let bytes = name.as_bytes();
    // Nearly all names are ASCII; only fall back to the full character classes otherwise.
    let ascii_ok = bytes
        .first()
        .is_some_and(|b| ASCII_NAME[*b as usize] & NAME_START != 0)
        && bytes
            .iter()
            .all(|b| ASCII_NAME[*b as usize] & NAME_CHAR != 0);
    if ascii_ok {
        return Ok(());
    }
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(is_name_start) && chars.all(is_name_char);
    if ok {
        Ok(())
    } else {
        Err(malformed(at, format!("invalid name {name:?}")))
    }
}

/// Checks a qualified name and returns its prefix length (0 when unprefixed).
fn check_qname(name: &str, at: usize) -> Result<usize, XmlError> {
    let bytes = name.as_bytes();
    // One pass over the common all-ASCII case: name characters and at most one colon
    // that neither starts nor ends the name and is followed by a name start character.
    if let Some(&first) = bytes.first() {
        if ASCII_NAME[first as usize] & NAME_START != 0 {
            let mut colon = 0;
            let mut ok = true;
            for (i, &b) in bytes.iter().enumerate().skip(1) {
                if ASCII_NAME[b as usize] & NAME_CHAR != 0 {
                    continue;
                }
                let next_starts = bytes
                    .get(i + 1)
                    .is_some_and(|n| ASCII_NAME[*n as usize] & NAME_START != 0);
                if b == b':' && colon == 0 && next_starts {
                    colon = i;
                } else {
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(colon);
            }
        }
    }
    match name.bytes().position(|b| b == b':') {
        None => check_ncname(name, at).map(|()| 0),
        Some(colon) => {
            check_ncname(&name[..colon], at)?;
            check_ncname(&name[colon + 1..], at + colon + 1)?;
            Ok(colon)
        }
    }
}

/// Bytes worth a closer look: C0 controls other than TAB and LF (CR included, for
/// line-end normalisation), the lead byte of U+FFFE and U+FFFF, and the `]` of `]]>`.
fn is_suspect(b: u8) -> bool {
    (b < 0x20 && b != b'\t' && b != b'\n') || b == 0xEF || b == b']'
}

fn any_suspect(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(32);
    for chunk in &mut chunks {
        // Branch-free over a fixed-size chunk so that it compiles to vector compares.
        let mut hits = 0u8;
        for &b in chunk {
            hits |= (((b < 0x20) & (b != b'\t') & (b != b'\n')) | (b == 0xEF) | (b == b']')) as u8;
        }
        if hits != 0 {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| is_suspect(b))
}

/// Rejects characters outside XML 1.0's `Char` (and `]]>` in text when `text` is set);
/// returns whether `s` holds a carriage return that needs line-end normalisation.
fn scan_chars(s: &str, at: usize, text: bool) -> Result<bool, XmlError> {
    let bytes = s.as_bytes();
    if !any_suspect(bytes) {
        return Ok(false);
    }
    let mut has_cr = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\r' => has_cr = true,
            b'\t' | b'\n' => {}
            0..=0x1F => {
                return Err(malformed(
                    at + i,
                    format!("character U+{b:04X} is not allowed"),
                ))
            }
            // U+FFFE and U+FFFF are EF BF BE and EF BF BF in UTF-8.
            0xEF if bytes.get(i + 1) == Some(&0xBF)
                && matches!(bytes.get(i + 2), Some(0xBE | 0xBF)) =>
            {
                return Err(malformed(
                    at + i,
                    "character U+FFFE or U+FFFF is not allowed",
                ))
            }
            b']' if text && bytes[i..].starts_with(b"]]>") => {
                return Err(malformed(at + i, "']]>' is not allowed in text"))
            }
            _ => {}
        }
    }
    Ok(has_cr)
}

fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Decodes the name between `&` and `;`: one of the five predefined entities or a
/// character reference.
fn decode_reference(name: &str, at: usize) -> Result<char, XmlError> {
    match name {
        "lt" => return Ok('<'),
        "gt" => return Ok('>'),
        "amp" => return Ok('&'),
        "apos" => return Ok('\''),
        "quot" => return Ok('"'),
        _ => {}
    }
    let Some(num) = name.strip_prefix('#') else {
        return match check_ncname(name, at) {
            Ok(()) => Err(XmlError::UnknownEntity {
                at,
                name: name.to_owned(),
            }),
            Err(_) => Err(malformed(at, "malformed reference")),
        };
    };
    let (digits, radix) = match num.strip_prefix('x') {
        Some(hex) => (hex, 16),
        None => (num, 10),
    };
    // from_str_radix would also take a sign; the grammar allows digits only.
    let code = if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        u32::from_str_radix(digits, radix).ok()
    } else {
        None
    };
    match code.and_then(char::from_u32) {
        Some(c) if is_xml_char(c) => Ok(c),
        _ => Err(malformed(
            at,
            format!("invalid character reference &{name};"),
        )),
    }
}

/// Appends `s` with CRLF and lone CR turned into LF (XML 1.0 §2.11).
fn push_line_normalised(out: &mut String, s: &str) {
    let mut rest = s;
    while let Some(i) = rest.find('\r') {
        out.push_str(&rest[..i]);
        out.push('\n');
        rest = &rest[i + 1..];
        if let Some(after) = rest.strip_prefix('\n') {
            rest = after;
        }
    }
    out.push_str(rest);
}

/// Bytes an attribute value can hold as they are: no references, no whitespace to
/// normalise, no '<', no C0 controls and no lead byte of U+FFFE or U+FFFF.
static PLAIN_ATTR: [bool; 256] = {
    let mut table = [true; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = false;
        b += 1;
    }
    table[b'&' as usize] = false;
    table[b'<' as usize] = false;
    table[0xEF] = false;
    table
};

/// Decodes and normalises an attribute value (XML 1.0 §3.3.3): references resolved,
/// literal TAB, LF, CR and CRLF become one space each, character references keep their
/// character.
fn attr_value(raw: &str, at: usize) -> Result<Cow<'_, str>, XmlError> {
    if raw.bytes().all(|b| PLAIN_ATTR[b as usize]) {
        return Ok(Cow::Borrowed(raw));
    }
    scan_chars(raw, at, false)?;
    let mut out = String::with_capacity(raw.len());
    let bytes = raw.as_bytes();
    let mut i = 0;
    let mut run = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => {
                return Err(malformed(
                    at + i,
                    "'<' is not allowed in an attribute value",
                ))
            }
            b'&' => {
                out.push_str(&raw[run..i]);
                let Some(len) = raw[i + 1..].find(';') else {
                    return Err(malformed(at + i, "unterminated reference"));
                };
                out.push(decode_reference(&raw[i + 1..i + 1 + len], at + i)?);
                i += len + 2;
                run = i;
            }
            b'\t' | b'\n' | b'\r' => {
                out.push_str(&raw[run..i]);
                out.push(' ');
                if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
                run = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&raw[run..]);
    Ok(Cow::Owned(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Document {
        match Document::parse(s.as_bytes(), &Limits::default()) {
            Ok(doc) => doc,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    fn parse_err(s: &str) -> XmlError {
        parse_err_with(s, &Limits::default())
    }

    fn parse_err_with(s: &str, limits: &Limits) -> XmlError {
        match Document::parse(s.as_bytes(), limits) {
            Ok(_) => panic!("{s:?} should be refused"),
            Err(e) => e,
        }
    }

    fn find(doc: &Document, local: &str) -> NodeId {
        doc.elements()
            .find(|e| doc.local_name(*e) == local)
            .unwrap()
    }

    #[test]
    fn marks_tell_where_the_parse_stood() {
        let src = "<r><a x=\"1\">te&amp;xt<!--c--><![CDATA[d]]></a><b/></r>";
        let at = |needle: &str| src.find(needle).unwrap();
        let marks = [
            at("<a"),        // between tokens, in r
            at("x=") + 1,    // inside a start tag
            at("te") + 1,    // inside character data: between, in a
            at("&amp;") + 2, // inside a reference
            at("<!--") + 2,  // inside a comment
            at("<![CDATA[") + 3,
            at("</a>"),    // before a's end tag: still in a
            at("<b/>"),    // after a's end tag: in r
            src.len(),     // the end: outside the document element
            src.len() + 1, // past the end
            at("<a"),      // the same offset twice, out of order
        ];
        let (doc, b) = Document::parse_marked(src.as_bytes(), &Limits::default(), &marks).unwrap();
        let (r, a) = (Some(find(&doc, "r")), Some(find(&doc, "a")));
        use Boundary::{Between, Inside};
        assert_eq!(
            b,
            [
                Between(r),
                Inside,
                Between(a),
                Inside,
                Inside,
                Inside,
                Between(a),
                Between(r),
                Between(None),
                Inside,
                Between(r)
            ]
        );
    }

    const SOAP: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
        <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\" \
        xmlns:wsu=\"urn:wsu\">\r\n  <soap:Header/>\n  \
        <soap:Body wsu:Id=\"body-1\"><m:Op xmlns:m=\"urn:m\" a=\"1\">x &amp; y</m:Op></soap:Body>\n\
        </soap:Envelope>\n";

    #[test]
    fn names_keep_their_prefixes_and_resolve_namespaces() {
        let doc = parse(SOAP);
        let env = doc.root();
        assert_eq!(doc.prefix(env), "soap");
        assert_eq!(doc.local_name(env), "Envelope");
        assert_eq!(doc.qname(env), "soap:Envelope");
        assert!(doc.is(env, "http://schemas.xmlsoap.org/soap/envelope/", "Envelope"));
        let op = find(&doc, "Op");
        assert_eq!(doc.namespace(op), "urn:m");
        assert_eq!(doc.attr(op, "", "a"), Some("1"));
        let body = find(&doc, "Body");
        assert_eq!(doc.attr(body, "urn:wsu", "Id"), Some("body-1"));
        assert_eq!(doc.attr(body, "", "Id"), None);
        assert_eq!(doc.attributes(body)[0].qname(), "wsu:Id");
        assert_eq!(doc.attributes(body)[0].prefix(), "wsu");
        assert_eq!(doc.text_content(op), "x & y");
    }

    #[test]
    fn namespace_declarations_are_not_attributes_and_keep_source_order() {
        let doc =
            parse(r#"<a xmlns:z="urn:z" b="1" xmlns="urn:d" xmlns:y="urn:y"><c xmlns=""/></a>"#);
        let a = doc.root();
        assert_eq!(doc.attributes(a).len(), 1);
        let decls: Vec<_> = doc
            .ns_decls(a)
            .iter()
            .map(|(p, u)| (p.as_str(), u.as_str()))
            .collect();
        assert_eq!(decls, [("z", "urn:z"), ("", "urn:d"), ("y", "urn:y")]);
        assert_eq!(doc.namespace(a), "urn:d");
        let c = find(&doc, "c");
        assert_eq!(doc.ns_decls(c), [(String::new(), String::new())]);
        assert_eq!(doc.namespace(c), "");
        assert_eq!(doc.lookup_namespace(c, ""), None);
        assert_eq!(doc.lookup_namespace(a, ""), Some("urn:d"));
        assert_eq!(doc.lookup_namespace(c, "z"), Some("urn:z"));
        assert_eq!(doc.lookup_namespace(c, "xml"), Some(XML_NS));
        assert_eq!(doc.lookup_namespace(c, "q"), None);
    }

    #[test]
    fn unprefixed_attributes_have_no_namespace_even_under_a_default() {
        let doc = parse(r#"<a xmlns="urn:d" xmlns:p="urn:p" x="1" p:x="2" xml:lang="en"/>"#);
        let a = doc.root();
        assert_eq!(doc.attr(a, "", "x"), Some("1"));
        assert_eq!(doc.attr(a, "urn:p", "x"), Some("2"));
        assert_eq!(doc.attr(a, XML_NS, "lang"), Some("en"));
        assert_eq!(doc.attributes(a)[0].namespace(), "");
    }

    #[test]
    fn redeclared_prefixes_are_scoped_to_their_element() {
        let doc = parse(r#"<p:a xmlns:p="urn:1"><p:b xmlns:p="urn:2"><p:c/></p:b><p:d/></p:a>"#);
        assert_eq!(doc.namespace(find(&doc, "a")), "urn:1");
        assert_eq!(doc.namespace(find(&doc, "b")), "urn:2");
        assert_eq!(doc.namespace(find(&doc, "c")), "urn:2");
        assert_eq!(doc.namespace(find(&doc, "d")), "urn:1");
    }

    #[test]
    fn tree_navigation_follows_document_order() {
        let doc = parse("<a> <b><c/>t<!--k--></b><d/>\n</a>");
        let a = doc.root();
        let kinds: Vec<_> = doc.children(a).map(|c| doc.kind(c)).collect();
        assert_eq!(
            kinds,
            [
                NodeKind::Text,
                NodeKind::Element,
                NodeKind::Element,
                NodeKind::Text
            ]
        );
        let names: Vec<_> = doc.element_children(a).map(|c| doc.local_name(c)).collect();
        assert_eq!(names, ["b", "d"]);
        let all: Vec<_> = doc.elements().map(|c| doc.local_name(c)).collect();
        assert_eq!(all, ["a", "b", "c", "d"]);
        let below_b: Vec<_> = doc
            .descendants(find(&doc, "b"))
            .map(|c| doc.local_name(c))
            .collect();
        assert_eq!(below_b, ["c"]);
        let b = find(&doc, "b");
        assert_eq!(doc.parent(b), Some(a));
        assert_eq!(doc.parent(a), None);
        let comment = doc.children(b).last().unwrap();
        assert_eq!(doc.kind(comment), NodeKind::Comment);
        assert_eq!(doc.text(comment), "k");
        assert_eq!(doc.text_content(a), " t\n");
    }

    #[test]
    fn text_decodes_references_and_merges_cdata() {
        let doc = parse("<a>1 &lt;&gt;&amp;&apos;&quot; &#65;&#x42;&#x1F600; <![CDATA[<&>]]>z</a>");
        let t = doc.children(doc.root()).next().unwrap();
        assert_eq!(doc.children(doc.root()).count(), 1);
        assert_eq!(doc.text(t), "1 <>&'\" AB\u{1F600} <&>z");
        assert_eq!(
            &doc.source()[doc.span(t)],
            &b"1 &lt;&gt;&amp;&apos;&quot; &#65;&#x42;&#x1F600; <![CDATA[<&>]]>z"[..]
        );
    }

    #[test]
    fn line_endings_are_normalised_in_text_cdata_and_comments() {
        let doc = parse("<a>x\r\ny\rz<![CDATA[\r\n\r]]>&#13;<!--c\r\nd--></a>");
        let mut kids = doc.children(doc.root());
        let t = kids.next().unwrap();
        assert_eq!(doc.text(t), "x\ny\nz\n\n\r");
        let c = kids.next().unwrap();
        assert_eq!(doc.text(c), "c\nd");
    }

    #[test]
    fn attribute_values_are_normalised() {
        let doc = parse("<a v=\"x\ty\nz\r\nw\rq\" r=\"&#9;&#10;&#13;&amp;&lt;&#x20AC;\" s='\"'/>");
        let a = doc.root();
        assert_eq!(doc.attr(a, "", "v"), Some("x y z w q"));
        assert_eq!(doc.attr(a, "", "r"), Some("\t\n\r&<\u{20AC}"));
        assert_eq!(doc.attr(a, "", "s"), Some("\""));
    }

    #[test]
    fn spans_cover_exactly_the_element() {
        let doc = parse(SOAP);
        let src = doc.source();
        let body = find(&doc, "Body");
        let text = std::str::from_utf8(&src[doc.span(body)]).unwrap();
        assert!(text.starts_with("<soap:Body wsu:Id"), "{text}");
        assert!(text.ends_with("</soap:Body>"), "{text}");
        let inner = std::str::from_utf8(&src[doc.content_span(body)]).unwrap();
        assert_eq!(inner, "<m:Op xmlns:m=\"urn:m\" a=\"1\">x &amp; y</m:Op>");
        let header = find(&doc, "Header");
        assert_eq!(&src[doc.span(header)], b"<soap:Header/>");
        let cs = doc.content_span(header);
        assert!(cs.is_empty());
        assert_eq!(cs.start, doc.span(header).end);
        let env = doc.root();
        assert!(std::str::from_utf8(&src[doc.span(env)])
            .unwrap()
            .ends_with("</soap:Envelope>"));
    }

    #[test]
    fn end_tag_with_trailing_space_is_inside_the_span() {
        let doc = parse("<a><b x='1' >t</b  ></a >");
        let b = find(&doc, "b");
        assert_eq!(&doc.source()[doc.span(b)], b"<b x='1' >t</b  >");
        assert_eq!(&doc.source()[doc.content_span(b)], b"t");
        assert_eq!(doc.span(doc.root()), 0..doc.source().len());
    }

    #[test]
    fn splicing_into_the_body_content_reparses() {
        let doc = parse(SOAP);
        let body = find(&doc, "Body");
        let cs = doc.content_span(body);
        let mut spliced = doc.source()[..cs.start].to_vec();
        spliced.extend_from_slice(b"<n:New xmlns:n=\"urn:n\">plain</n:New>");
        spliced.extend_from_slice(&doc.source()[cs.end..]);
        let again = Document::parse(&spliced, &Limits::default()).unwrap();
        let new = find(&again, "New");
        assert_eq!(again.namespace(new), "urn:n");
        assert_eq!(again.parent(new), Some(find(&again, "Body")));
        assert_eq!(again.text_content(new), "plain");
    }

    #[test]
    fn removing_a_header_by_span_leaves_the_rest_intact() {
        let doc = parse(SOAP);
        let header = doc.span(find(&doc, "Header"));
        let mut cut = doc.source()[..header.start].to_vec();
        cut.extend_from_slice(&doc.source()[header.end..]);
        let again = Document::parse(&cut, &Limits::default()).unwrap();
        assert!(again.elements().all(|e| again.local_name(e) != "Header"));
        assert_eq!(
            again.attr(find(&again, "Body"), "urn:wsu", "Id"),
            Some("body-1")
        );
    }

    #[test]
    fn scope_lookups_match_a_plain_stack_past_the_index_threshold() {
        let keys: Vec<String> = (0..40).map(|i| format!("p{}", i % 13)).collect();
        let mut scope: Scope<'_, usize> = Scope::new();
        let mut model: Vec<(&str, usize)> = Vec::new();
        let mut marks = Vec::new();
        let mut x = 0x2545_F491u64;
        for step in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 | 1 if model.len() < 60 => {
                    let key = keys[(x as usize >> 8) % keys.len()].as_str();
                    scope.bind(key, step);
                    model.push((key, step));
                }
                2 => marks.push(scope.mark()),
                3 => {
                    if let Some(mark) = marks.pop() {
                        scope.unwind(mark);
                        model.truncate(mark);
                    }
                }
                _ => {}
            }
            for key in keys.iter().take(13) {
                let expected = model.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v);
                assert_eq!(scope.get(key), expected, "step {step}, key {key}");
            }
        }
    }

    #[test]
    fn many_bindings_in_scope_resolve_and_unwind() {
        let mut src = String::from("<r");
        for i in 0..40 {
            src.push_str(&format!(" xmlns:p{i}='urn:{i}'"));
        }
        src.push_str("><p3:a xmlns:p3='urn:x'><p39:b p0:c='1'/></p3:a><p3:d/></r>");
        let limits = Limits {
            max_attributes: 64,
            ..Limits::default()
        };
        let doc = Document::parse(src.as_bytes(), &limits).unwrap();
        assert_eq!(doc.namespace(find(&doc, "a")), "urn:x");
        assert_eq!(doc.namespace(find(&doc, "b")), "urn:39");
        assert_eq!(doc.attr(find(&doc, "b"), "urn:0", "c"), Some("1"));
        assert_eq!(doc.namespace(find(&doc, "d")), "urn:3");
    }

    #[test]
    fn one_namespace_under_two_prefixes_is_one_namespace_before_and_after_the_index() {
        // Two prefixes bound to one URI name the same attribute: a duplicate, whether the
        // document has named few namespaces (compared) or many (indexed) by then.
        for before in [
            0,
            3,
            NS_INDEX_FROM - 3,
            NS_INDEX_FROM,
            NS_INDEX_FROM + 5,
            60,
        ] {
            let mut src = String::from("<r");
            for i in 0..before {
                src.push_str(&format!(" xmlns:p{i}='urn:{i}'"));
            }
            src.push_str("><z xmlns:m='urn:same' xmlns:n='urn:same' m:k='1' n:k='2'/></r>");
            let limits = Limits {
                max_attributes: 128,
                ..Limits::default()
            };
            let err = Document::parse(src.as_bytes(), &limits).unwrap_err();
            assert!(
                matches!(err, XmlError::DuplicateAttribute { .. }),
                "{before}: {err:?}"
            );
            // A URI named again after the index exists is the one named before it.
            let mut src = String::from("<r xmlns:a='urn:first'");
            for i in 0..before {
                src.push_str(&format!(" xmlns:p{i}='urn:{i}'"));
            }
            src.push_str("><z xmlns:b='urn:first' a:k='1' b:k='2'/></r>");
            let err = Document::parse(src.as_bytes(), &limits).unwrap_err();
            assert!(
                matches!(err, XmlError::DuplicateAttribute { .. }),
                "{before}: {err:?}"
            );
            src = src.replace("b:k", "b:j");
            let doc = Document::parse(src.as_bytes(), &limits).unwrap();
            let z = find(&doc, "z");
            assert_eq!(doc.attr(z, "urn:first", "j"), Some("2"), "{before}");
            assert_eq!(doc.attr(z, "urn:first", "k"), Some("1"), "{before}");
        }
    }

    #[test]
    fn byte_order_mark_is_kept_in_offsets() {
        let doc = parse("\u{FEFF}<?xml version='1.0'?><a>t</a>");
        assert_eq!(&doc.source()[doc.span(doc.root())], b"<a>t</a>");
    }

    #[test]
    fn xml_declaration_is_allowed_only_at_the_start() {
        parse("<?xml version=\"1.0\" encoding=\"utf-8\" standalone=\"yes\"?><a/>");
        assert!(matches!(
            parse_err(" <?xml version=\"1.0\"?><a/>"),
            XmlError::ProcessingInstruction { at: 1 }
        ));
        assert!(matches!(
            parse_err("<a/><?xml version=\"1.0\"?>"),
            XmlError::ProcessingInstruction { .. }
        ));
        assert!(matches!(
            parse_err("<?xml version=\"1.1\"?><a/>"),
            XmlError::Malformed { .. }
        ));
    }

    #[test]
    fn other_encodings_are_refused() {
        let e = parse_err("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><a/>");
        assert!(
            matches!(e, XmlError::UnsupportedEncoding(ref n) if n == "ISO-8859-1"),
            "{e}"
        );
        let e = Document::parse(b"<a>\xE9</a>", &Limits::default()).unwrap_err();
        assert!(matches!(e, XmlError::Malformed { at: 3, .. }), "{e}");
    }

    #[test]
    fn doctype_is_refused() {
        let e = parse_err("<!DOCTYPE a [<!ENTITY x \"boom\">]><a>&x;</a>");
        assert!(matches!(e, XmlError::Doctype { at: 0 }), "{e}");
    }

    #[test]
    fn unknown_entities_are_refused() {
        let e = parse_err("<a>&foo;</a>");
        assert!(
            matches!(e, XmlError::UnknownEntity { at: 3, ref name } if name == "foo"),
            "{e}"
        );
        let e = parse_err("<a b='&nbsp;'/>");
        assert!(
            matches!(e, XmlError::UnknownEntity { ref name, .. } if name == "nbsp"),
            "{e}"
        );
        assert!(matches!(
            parse_err("<a>& b;</a>"),
            XmlError::Malformed { .. }
        ));
        assert!(matches!(
            parse_err("<a>a & b</a>"),
            XmlError::Malformed { .. }
        ));
        assert!(matches!(
            parse_err("<a b='a & b'/>"),
            XmlError::Malformed { .. }
        ));
    }

    #[test]
    fn invalid_character_references_are_refused() {
        for bad in [
            "&#0;",
            "&#x;",
            "&#xD800;",
            "&#x110000;",
            "&#+65;",
            "&#xFFFE;",
            "&#1;",
            "&#99999999999;",
        ] {
            let e = parse_err(&format!("<a>{bad}</a>"));
            assert!(matches!(e, XmlError::Malformed { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn processing_instructions_are_refused() {
        let e = parse_err("<a><?php echo 1; ?></a>");
        assert!(
            matches!(e, XmlError::ProcessingInstruction { at: 3 }),
            "{e}"
        );
        assert!(matches!(
            parse_err("<?xml-stylesheet href='x'?><a/>"),
            XmlError::ProcessingInstruction { at: 0 }
        ));
        assert!(matches!(
            parse_err("<a/><?pi?>"),
            XmlError::ProcessingInstruction { .. }
        ));
    }

    #[test]
    fn unbound_prefixes_are_refused() {
        let e = parse_err("<a><p:b/></a>");
        assert!(
            matches!(e, XmlError::UnboundPrefix { at: 4, ref prefix } if prefix == "p"),
            "{e}"
        );
        let e = parse_err("<a q:x='1'/>");
        assert!(
            matches!(e, XmlError::UnboundPrefix { ref prefix, .. } if prefix == "q"),
            "{e}"
        );
        // A binding ends with its element.
        let e = parse_err("<a><b xmlns:p='urn:p'/><p:c/></a>");
        assert!(matches!(e, XmlError::UnboundPrefix { .. }), "{e}");
    }

    #[test]
    fn bad_namespace_declarations_are_refused() {
        for bad in [
            "<a xmlns:p=''/>",
            "<a xmlns:xml='urn:x'/>",
            "<a xmlns:x='http://www.w3.org/XML/1998/namespace'/>",
            "<a xmlns='http://www.w3.org/XML/1998/namespace'/>",
            "<a xmlns:xmlns='urn:x'/>",
            "<a xmlns:p='http://www.w3.org/2000/xmlns/'/>",
            "<xmlns:a/>",
        ] {
            let e = parse_err(bad);
            assert!(matches!(e, XmlError::BadNamespace { .. }), "{bad}: {e}");
        }
        parse("<a xmlns:xml='http://www.w3.org/XML/1998/namespace'/>");
    }

    #[test]
    fn depth_limit_stops_parsing() {
        let limits = Limits {
            max_depth: 3,
            ..Limits::default()
        };
        assert!(Document::parse(b"<a><b><c/></b></a>", &limits).is_ok());
        let e = parse_err_with("<a><b><c><d/></c></b></a>", &limits);
        assert!(matches!(e, XmlError::TooDeep { at: 9, limit: 3 }), "{e}");
        let deep = "<a>".repeat(100_000);
        assert!(matches!(
            parse_err(&deep),
            XmlError::TooDeep { limit: 64, .. }
        ));
    }

    #[test]
    fn node_limit_counts_text_and_comments() {
        let limits = Limits {
            max_nodes: 5,
            ..Limits::default()
        };
        assert!(Document::parse(b"<a>t<b/><!--c-->u</a>", &limits).is_ok());
        let e = parse_err_with("<a>t<b/><!--c-->u<d/></a>", &limits);
        assert!(
            matches!(e, XmlError::TooManyNodes { at: 17, limit: 5 }),
            "{e}"
        );
    }

    #[test]
    fn attribute_limit_counts_namespace_declarations() {
        let limits = Limits {
            max_attributes: 2,
            ..Limits::default()
        };
        assert!(Document::parse(b"<a xmlns='urn:a' b='1'/>", &limits).is_ok());
        let e = parse_err_with("<r><a xmlns='urn:a' b='1' c='2'/></r>", &limits);
        assert!(
            matches!(e, XmlError::TooManyAttributes { at: 3, limit: 2 }),
            "{e}"
        );
    }

    #[test]
    fn a_start_tag_longer_than_64_kib_is_refused() {
        // `<r a="…"/>` or `<r a="…">`, exactly `len` bytes from `<` to `>`.
        let tag = |len: usize, empty: bool| {
            let close = if empty { "/>" } else { ">" };
            let fill = len - "<r a=\"\"".len() - close.len();
            format!("<r a=\"{}\"{close}", "x".repeat(fill))
        };
        for empty in [false, true] {
            let end = if empty { "" } else { "</r>" };
            let ok = format!("{}{end}", tag(MAX_START_TAG, empty));
            assert!(Document::parse(ok.as_bytes(), &Limits::default()).is_ok());
            let long = format!("{}{end}", tag(MAX_START_TAG + 1, empty));
            let e = parse_err_with(&long, &Limits::default());
            assert!(
                matches!(
                    e,
                    XmlError::StartTagTooLong {
                        at: 0,
                        limit: MAX_START_TAG
                    }
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn duplicate_attributes_are_refused_by_qname_and_by_expanded_name() {
        let e = parse_err("<a b='1' b='2'/>");
        assert!(
            matches!(e, XmlError::DuplicateAttribute { at: 9, ref name } if name == "b"),
            "{e}"
        );
        let e = parse_err("<a xmlns:p='urn:x' xmlns:q='urn:x' p:b='1' q:b='2'/>");
        assert!(
            matches!(e, XmlError::DuplicateAttribute { ref name, .. } if name == "q:b"),
            "{e}"
        );
        assert!(matches!(
            parse_err("<a xmlns='urn:1' xmlns='urn:2'/>"),
            XmlError::DuplicateAttribute { .. }
        ));
        // Same local name in different namespaces is fine.
        parse("<a xmlns:p='urn:x' b='1' p:b='2'/>");
    }

    #[test]
    fn exactly_one_root_is_required() {
        let e = parse_err("<a/><b/>");
        assert!(matches!(e, XmlError::NotOneRoot { at: 4, .. }), "{e}");
        assert!(matches!(parse_err(""), XmlError::NotOneRoot { .. }));
        assert!(matches!(
            parse_err("  <!-- c -->\n"),
            XmlError::NotOneRoot { .. }
        ));
        assert!(matches!(
            parse_err("<a/>text"),
            XmlError::Malformed { at: 4, .. }
        ));
        assert!(matches!(
            parse_err("x<a/>"),
            XmlError::Malformed { at: 0, .. }
        ));
        assert!(matches!(parse_err("<a/>&amp;"), XmlError::Malformed { .. }));
        parse("<!-- before -->\n<a/>\n<!-- after -->\n");
    }

    #[test]
    fn mismatched_and_unclosed_tags_are_refused() {
        let e = parse_err("<a><b></a></b>");
        assert!(
            matches!(e, XmlError::MismatchedEndTag { ref expected, ref found, .. } if expected == "b" && found == "a"),
            "{e}"
        );
        assert!(matches!(
            parse_err("<a><b></b>"),
            XmlError::Malformed { at: 0, .. }
        ));
        assert!(matches!(
            parse_err("<a></a></b>"),
            XmlError::Malformed { .. }
        ));
        // Prefixes must match literally even when they resolve to the same namespace.
        assert!(matches!(
            parse_err("<p:a xmlns:p='u' xmlns:q='u'></q:a>"),
            XmlError::MismatchedEndTag { .. }
        ));
    }

    #[test]
    fn malformed_markup_is_refused() {
        for bad in [
            "<a b=1/>",
            "<a b='1'c='2'/>",
            "<a b/>",
            "<a b='<'/>",
            "<a>]]></a>",
            "<a>\u{1}</a>",
            "<a b='\u{1}'/>",
            "<a>\u{FFFF}</a>",
            "<a><!-- a -- b --></a>",
            "<a><!-- a ---></a>",
            "<1a/>",
            "<a:b:c xmlns:a='u'/>",
            "<:a/>",
            "<a:/>",
            "< a/>",
            "<a><![CDATA[x]]></a>x",
            "<a",
            "<a b='1",
        ] {
            let e = parse_err(bad);
            assert!(matches!(e, XmlError::Malformed { .. }), "{bad:?}: {e}");
        }
    }

    #[test]
    fn error_messages_carry_the_offset() {
        let e = parse_err("<a><b></a>");
        assert!(e.to_string().contains("byte"), "{e}");
        assert!(e.offset().is_some());
    }
}
