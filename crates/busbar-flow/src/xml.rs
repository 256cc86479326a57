//! A small mutable XML tree: process files, WSDLs and every variable's value.
//!
//! Layout: a [`Doc`] is an arena of [`Node`]s addressed by [`NodeId`]; index 0 is the
//! document node. Attributes are nodes too (so XPath can select them and find their parent).
//! Ids are stable for the life of a document but, once it has been edited, no longer in
//! document order: [`Doc::order`] gives the document-order position of a node, computed once
//! per edit. Edits append new nodes and detach old ones; detached nodes stay in the arena
//! until [`Doc::compacted`] copies the live tree.
//!
//! Parsing is strict: no DOCTYPE (so no entity expansion), only the five predefined entities
//! and character references, every prefix bound. Element and attribute names keep the prefix
//! they were written with; serialisation declares a namespace wherever the one in scope
//! differs.

use std::fmt::Write as _;
use std::sync::OnceLock;

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;

/// The namespace the `xml` prefix is bound to.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";
const XMLNS_NS: &str = "http://www.w3.org/2000/xmlns/";
/// Deepest element nesting accepted when parsing.
pub const MAX_DEPTH: usize = 256;

/// A namespace-qualified name, with the prefix it was written with (empty: none or default).
/// Names are equal, hashed and ordered by namespace and local part: the prefix is only a hint.
#[derive(Clone, Debug, Default)]
pub struct Name {
    /// Namespace URI; empty for no namespace.
    pub ns: String,
    /// Local part.
    pub local: String,
    /// Prefix used when the name was read or created; a hint for serialisation only.
    pub prefix: String,
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.local == other.local && self.ns == other.ns
    }
}

impl Eq for Name {}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ns.hash(state);
        self.local.hash(state);
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.ns, &self.local).cmp(&(&other.ns, &other.local))
    }
}

impl Name {
    /// A name in `ns` (empty: no namespace) without a prefix.
    pub fn new(ns: impl Into<String>, local: impl Into<String>) -> Self {
        Name {
            ns: ns.into(),
            local: local.into(),
            prefix: String::new(),
        }
    }

    /// The same name with a prefix hint.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Same namespace and local part (prefixes are not compared).
    pub fn is(&self, ns: &str, local: &str) -> bool {
        self.ns == ns && self.local == local
    }

    /// `{ns}local`, or `local` without a namespace.
    pub fn clark(&self) -> String {
        if self.ns.is_empty() {
            self.local.clone()
        } else {
            format!("{{{}}}{}", self.ns, self.local)
        }
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            f.write_str(&self.local)
        } else {
            write!(f, "{}:{}", self.prefix, self.local)
        }
    }
}

/// A node's address in its [`Doc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The document node.
    pub const ROOT: NodeId = NodeId(0);

    fn ix(self) -> usize {
        self.0 as usize
    }
}

/// What a node is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// The document node (always id 0).
    Document,
    /// An element: its attributes (attribute nodes) and the namespaces it declares.
    Element {
        name: Name,
        attrs: Vec<NodeId>,
        /// Declarations on this element: (prefix, uri); prefix "" is the default namespace.
        decls: Vec<(String, String)>,
    },
    /// An attribute (its parent is the element).
    Attribute { name: Name, value: String },
    /// Character data (CDATA sections become text).
    Text(String),
    /// A comment.
    Comment(String),
    /// A processing instruction.
    Pi { target: String, data: String },
}

/// One node of the tree.
#[derive(Clone, Debug)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Its parent; none for the document node and detached nodes.
    pub parent: Option<NodeId>,
    /// Children in order (never attributes).
    pub children: Vec<NodeId>,
    /// 1-based line in the parsed source; 0 for nodes built in memory.
    pub line: u32,
}

/// Why a text was not accepted as XML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line of the problem.
    pub line: u32,
    /// What is wrong.
    pub message: String,
}

/// An XML document (or fragment holder): an arena of nodes under a document node.
#[derive(Debug)]
pub struct Doc {
    nodes: Vec<Node>,
    order: OnceLock<Vec<u32>>,
}

impl Clone for Doc {
    fn clone(&self) -> Self {
        Doc {
            nodes: self.nodes.clone(),
            order: OnceLock::new(),
        }
    }
}

impl Default for Doc {
    fn default() -> Self {
        Doc::new()
    }
}

impl PartialEq for Doc {
    /// Same serialisation.
    fn eq(&self, other: &Self) -> bool {
        self.to_xml(NodeId::ROOT) == other.to_xml(NodeId::ROOT)
    }
}

impl Doc {
    /// An empty document (just the document node).
    pub fn new() -> Self {
        Doc {
            nodes: vec![Node {
                kind: Kind::Document,
                parent: None,
                children: Vec::new(),
                line: 0,
            }],
            order: OnceLock::new(),
        }
    }

    /// A document whose root element is `name`, empty.
    pub fn with_root(name: Name) -> (Self, NodeId) {
        let mut d = Doc::new();
        let e = d.append_element(NodeId::ROOT, name);
        (d, e)
    }

    /// Parses a whole document. Whitespace-only text is kept.
    pub fn parse(text: &str) -> Result<Doc, ParseError> {
        Parser::new(text).run()
    }

    /// The node itself. Panics on an id from another document.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.ix()]
    }

    /// The node's kind.
    pub fn kind(&self, id: NodeId) -> &Kind {
        &self.nodes[id.ix()].kind
    }

    /// Its parent (the element, for an attribute).
    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        self.nodes[id.ix()].parent
    }

    /// Its children, attributes excluded.
    pub fn children(&self, id: NodeId) -> &[NodeId] {
        &self.nodes[id.ix()].children
    }

    /// Its element children.
    pub fn child_elements(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.children(id)
            .iter()
            .copied()
            .filter(|c| self.is_element(*c))
    }

    /// The first element child named `{ns}local`.
    pub fn child(&self, id: NodeId, ns: &str, local: &str) -> Option<NodeId> {
        self.child_elements(id)
            .find(|c| self.name(*c).is_some_and(|n| n.is(ns, local)))
    }

    /// The root element, if any.
    pub fn root_element(&self) -> Option<NodeId> {
        self.child_elements(NodeId::ROOT).next()
    }

    /// Whether it is an element.
    pub fn is_element(&self, id: NodeId) -> bool {
        matches!(self.nodes[id.ix()].kind, Kind::Element { .. })
    }

    /// The name of an element or attribute.
    pub fn name(&self, id: NodeId) -> Option<&Name> {
        match &self.nodes[id.ix()].kind {
            Kind::Element { name, .. } | Kind::Attribute { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The attribute nodes of an element (empty for anything else).
    pub fn attributes(&self, id: NodeId) -> &[NodeId] {
        match &self.nodes[id.ix()].kind {
            Kind::Element { attrs, .. } => attrs,
            _ => &[],
        }
    }

    /// The value of attribute `{ns}local` of an element.
    pub fn attr(&self, id: NodeId, ns: &str, local: &str) -> Option<&str> {
        self.attributes(id)
            .iter()
            .find_map(|a| match &self.nodes[a.ix()].kind {
                Kind::Attribute { name, value } if name.is(ns, local) => Some(value.as_str()),
                _ => None,
            })
    }

    /// The line an element was read from (0 when built in memory).
    pub fn line(&self, id: NodeId) -> u32 {
        self.nodes[id.ix()].line
    }

    /// The namespace `prefix` ("" for the default namespace) is bound to at `id`.
    pub fn lookup_ns(&self, id: NodeId, prefix: &str) -> Option<&str> {
        if prefix == "xml" {
            return Some(XML_NS);
        }
        let mut cur = Some(id);
        while let Some(n) = cur {
            if let Kind::Element { decls, .. } = &self.nodes[n.ix()].kind {
                if let Some((_, uri)) = decls.iter().find(|(p, _)| p == prefix) {
                    return Some(uri.as_str());
                }
            }
            cur = self.nodes[n.ix()].parent;
        }
        None
    }

    /// Every (prefix, uri) in scope at `id`, innermost first, each prefix once.
    pub fn namespaces_in_scope(&self, id: NodeId) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut cur = Some(id);
        while let Some(n) = cur {
            if let Kind::Element { decls, .. } = &self.nodes[n.ix()].kind {
                for (p, u) in decls {
                    if !out.iter().any(|(q, _)| q == p) {
                        out.push((p.clone(), u.clone()));
                    }
                }
            }
            cur = self.nodes[n.ix()].parent;
        }
        out
    }

    /// How many elements enclose `id` (the root element is at depth 1).
    pub fn depth(&self, id: NodeId) -> usize {
        let mut n = 0;
        let mut cur = self.parent(id);
        while let Some(p) = cur {
            n += 1;
            cur = self.parent(p);
        }
        n
    }

    /// The deepest element nesting under and including `id` (0 for a text node), and the
    /// subtree's weight: its text and attribute bytes plus 64 per node.
    pub fn measure(&self, id: NodeId) -> (usize, usize) {
        let mut most = 0;
        let mut weight = 0usize;
        let mut stack = vec![(id, 1usize)];
        while let Some((n, d)) = stack.pop() {
            weight = weight.saturating_add(64);
            match &self.nodes[n.ix()].kind {
                Kind::Element { attrs, .. } => {
                    most = most.max(d);
                    for a in attrs {
                        if let Kind::Attribute { value, .. } = &self.nodes[a.ix()].kind {
                            weight = weight.saturating_add(64 + value.len());
                        }
                    }
                    stack.extend(self.nodes[n.ix()].children.iter().map(|c| (*c, d + 1)));
                }
                Kind::Document => {
                    stack.extend(self.nodes[n.ix()].children.iter().map(|c| (*c, d)));
                }
                Kind::Text(t) | Kind::Comment(t) => weight = weight.saturating_add(t.len()),
                Kind::Attribute { value, .. } => weight = weight.saturating_add(value.len()),
                Kind::Pi { data, .. } => weight = weight.saturating_add(data.len()),
            }
        }
        (most, weight)
    }

    /// The prefixes a subtree needs bound: those of its element and attribute names, and any
    /// `p:` in its text or attribute values (QName values such as `xsi:type="p:T"`).
    pub fn used_prefixes(&self, id: NodeId) -> std::collections::HashSet<String> {
        let mut out = std::collections::HashSet::new();
        let mut texts: Vec<&str> = Vec::new();
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            match &self.nodes[n.ix()].kind {
                Kind::Element { name, attrs, .. } => {
                    out.insert(name.prefix.clone());
                    for a in attrs {
                        if let Kind::Attribute { name, value } = &self.nodes[a.ix()].kind {
                            out.insert(name.prefix.clone());
                            texts.push(value);
                        }
                    }
                    stack.extend(self.nodes[n.ix()].children.iter().copied());
                }
                Kind::Text(t) => texts.push(t),
                _ => {}
            }
        }
        for t in texts {
            for (i, _) in t.match_indices(':') {
                let start = t[..i]
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
                    .map(|j| j + 1)
                    .unwrap_or(0);
                if start < i {
                    out.insert(t[start..i].to_string());
                }
            }
        }
        out
    }

    /// Resolves `prefix:local` (or `local`, in no namespace unless `default_ns`) at `id`.
    pub fn resolve_qname(&self, id: NodeId, text: &str, default_ns: bool) -> Option<Name> {
        let text = text.trim();
        match text.split_once(':') {
            Some((p, l)) => Some(Name::new(self.lookup_ns(id, p)?, l).with_prefix(p)),
            None if default_ns => Some(Name::new(self.lookup_ns(id, "").unwrap_or(""), text)),
            None => Some(Name::new("", text)),
        }
    }

    /// The XPath string-value: all descendant text of an element or the document, the value of
    /// an attribute, the text of a text or comment node.
    pub fn string_value(&self, id: NodeId) -> String {
        match &self.nodes[id.ix()].kind {
            Kind::Attribute { value, .. } => value.clone(),
            Kind::Text(t) | Kind::Comment(t) => t.clone(),
            Kind::Pi { data, .. } => data.clone(),
            Kind::Document | Kind::Element { .. } => {
                let mut s = String::new();
                self.collect_text(id, &mut s);
                s
            }
        }
    }

    fn collect_text(&self, id: NodeId, out: &mut String) {
        for c in &self.nodes[id.ix()].children {
            match &self.nodes[c.ix()].kind {
                Kind::Text(t) => out.push_str(t),
                Kind::Element { .. } => self.collect_text(*c, out),
                _ => {}
            }
        }
    }

    /// Document-order position of a live node (attributes right after their element).
    pub fn order(&self, id: NodeId) -> u32 {
        let order = self.order.get_or_init(|| {
            let mut order = vec![u32::MAX; self.nodes.len()];
            let mut next = 0u32;
            let mut stack = vec![NodeId::ROOT];
            while let Some(n) = stack.pop() {
                order[n.ix()] = next;
                next += 1;
                for a in self.attributes(n) {
                    order[a.ix()] = next;
                    next += 1;
                }
                stack.extend(self.nodes[n.ix()].children.iter().rev());
            }
            order
        });
        order.get(id.ix()).copied().unwrap_or(u32::MAX)
    }

    fn push(&mut self, kind: Kind, parent: Option<NodeId>, line: u32) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node {
            kind,
            parent,
            children: Vec::new(),
            line,
        });
        id
    }

    fn edited(&mut self) {
        self.order = OnceLock::new();
    }

    /// Appends an empty element under `parent`.
    pub fn append_element(&mut self, parent: NodeId, name: Name) -> NodeId {
        let id = self.push(
            Kind::Element {
                name,
                attrs: Vec::new(),
                decls: Vec::new(),
            },
            Some(parent),
            0,
        );
        self.nodes[parent.ix()].children.push(id);
        self.edited();
        id
    }

    /// Appends a text node under `parent` (merged into a text node just before it).
    pub fn append_text(&mut self, parent: NodeId, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(last) = self.nodes[parent.ix()].children.last().copied() {
            if let Kind::Text(t) = &mut self.nodes[last.ix()].kind {
                t.push_str(text);
                return;
            }
        }
        let id = self.push(Kind::Text(text.to_string()), Some(parent), 0);
        self.nodes[parent.ix()].children.push(id);
        self.edited();
    }

    /// Sets (or adds) an attribute of an element.
    pub fn set_attr(&mut self, elem: NodeId, name: Name, value: &str) {
        let existing = self.attributes(elem).iter().copied().find(|a| {
            self.name(*a)
                .is_some_and(|n| n.ns == name.ns && n.local == name.local)
        });
        if let Some(a) = existing {
            if let Kind::Attribute { value: v, .. } = &mut self.nodes[a.ix()].kind {
                *v = value.to_string();
            }
            return;
        }
        let id = self.push(
            Kind::Attribute {
                name,
                value: value.to_string(),
            },
            Some(elem),
            0,
        );
        if let Kind::Element { attrs, .. } = &mut self.nodes[elem.ix()].kind {
            attrs.push(id);
        }
        self.edited();
    }

    /// Declares a namespace on an element (replacing a declaration of the same prefix).
    pub fn declare_ns(&mut self, elem: NodeId, prefix: &str, uri: &str) {
        if let Kind::Element { decls, .. } = &mut self.nodes[elem.ix()].kind {
            decls.retain(|(p, _)| p != prefix);
            decls.push((prefix.to_string(), uri.to_string()));
        }
    }

    /// Sets the value of an attribute node or the text of a text/comment node; for an element
    /// or the document, replaces all children with one text node.
    pub fn set_string(&mut self, id: NodeId, text: &str) {
        match &mut self.nodes[id.ix()].kind {
            Kind::Attribute { value, .. } => *value = text.to_string(),
            Kind::Text(t) | Kind::Comment(t) => *t = text.to_string(),
            Kind::Pi { data, .. } => *data = text.to_string(),
            Kind::Document | Kind::Element { .. } => {
                self.clear_children(id);
                self.append_text(id, text);
            }
        }
        self.edited();
    }

    /// Detaches every child of `id` (attributes stay).
    pub fn clear_children(&mut self, id: NodeId) {
        let old = std::mem::take(&mut self.nodes[id.ix()].children);
        for c in old {
            self.nodes[c.ix()].parent = None;
        }
        self.edited();
    }

    /// Detaches every attribute of an element.
    pub fn clear_attributes(&mut self, id: NodeId) {
        if let Kind::Element { attrs, .. } = &mut self.nodes[id.ix()].kind {
            for a in std::mem::take(attrs) {
                self.nodes[a.ix()].parent = None;
            }
        }
        self.edited();
    }

    /// Copies node `src` of `from` (deeply, with the namespaces in scope there that its names
    /// need) as the last child of `parent`; returns the copy.
    pub fn append_copy(&mut self, parent: NodeId, from: &Doc, src: NodeId) -> NodeId {
        let id = self.copy_node(from, src, Some(parent));
        if matches!(self.nodes[id.ix()].kind, Kind::Attribute { .. }) {
            if let Kind::Element { attrs, .. } = &mut self.nodes[parent.ix()].kind {
                attrs.push(id);
            }
        } else {
            self.nodes[parent.ix()].children.push(id);
        }
        // Keep the source's in-scope declarations on a copied element so prefixes used in
        // its text (QName values such as xsi:type) stay bound.
        if from.is_element(src) {
            let mut decls = from.namespaces_in_scope(src);
            let used = from.used_prefixes(src);
            decls.retain(|(p, _)| p != "xml" && used.contains(p));
            if let Kind::Element { decls: d, .. } = &mut self.nodes[id.ix()].kind {
                for (p, u) in decls {
                    if !d.iter().any(|(q, _)| *q == p) {
                        d.push((p, u));
                    }
                }
            }
        }
        self.edited();
        id
    }

    fn copy_node(&mut self, from: &Doc, src: NodeId, parent: Option<NodeId>) -> NodeId {
        let node = from.node(src);
        let kind = match &node.kind {
            Kind::Element { name, decls, .. } => Kind::Element {
                name: name.clone(),
                attrs: Vec::new(),
                decls: decls.clone(),
            },
            Kind::Document => Kind::Element {
                // A document is copied as its children by callers; a bare copy is an empty
                // placeholder element.
                name: Name::new("", "document"),
                attrs: Vec::new(),
                decls: Vec::new(),
            },
            k => k.clone(),
        };
        let id = self.push(kind, parent, node.line);
        let attrs: Vec<NodeId> = from
            .attributes(src)
            .iter()
            .map(|a| self.copy_node(from, *a, Some(id)))
            .collect();
        if let Kind::Element { attrs: slot, .. } = &mut self.nodes[id.ix()].kind {
            *slot = attrs;
        }
        let children: Vec<NodeId> = from
            .children(src)
            .iter()
            .map(|c| self.copy_node(from, *c, Some(id)))
            .collect();
        self.nodes[id.ix()].children = children;
        id
    }

    /// Replaces the children (and, for elements, the attributes) of `target` with copies of
    /// the children and attributes of `src` in `from`.
    pub fn replace_content(&mut self, target: NodeId, from: &Doc, src: NodeId) {
        self.clear_children(target);
        if self.is_element(target) && from.is_element(src) {
            // The source's namespaces come along, so prefixes in its content stay bound.
            let here = self.namespaces_in_scope(target);
            let used = from.used_prefixes(src);
            for (p, u) in from.namespaces_in_scope(src) {
                if p != "xml" && used.contains(&p) && !here.iter().any(|(q, v)| *q == p && *v == u)
                {
                    self.declare_ns(target, &p, &u);
                }
            }
        }
        if self.is_element(target) {
            self.clear_attributes(target);
            for a in from.attributes(src) {
                self.append_copy(target, from, *a);
            }
        }
        for c in from.children(src) {
            self.append_copy(target, from, *c);
        }
    }

    /// Puts a copy of `src` from `from` in place of `target` (same parent, same position).
    pub fn replace_node(&mut self, target: NodeId, from: &Doc, src: NodeId) -> NodeId {
        let Some(parent) = self.parent(target) else {
            return target;
        };
        let copy = self.append_copy(parent, from, src);
        if matches!(self.nodes[copy.ix()].kind, Kind::Attribute { .. }) {
            if let Kind::Element { attrs, .. } = &mut self.nodes[parent.ix()].kind {
                attrs.retain(|a| *a != target);
            }
        } else {
            let children = &mut self.nodes[parent.ix()].children;
            children.pop();
            if let Some(pos) = children.iter().position(|c| *c == target) {
                children[pos] = copy;
            }
        }
        self.nodes[target.ix()].parent = None;
        self.edited();
        copy
    }

    /// Renames an element, keeping its content.
    pub fn rename(&mut self, elem: NodeId, new: Name) {
        if let Kind::Element { name, .. } = &mut self.nodes[elem.ix()].kind {
            *name = new;
        }
    }

    /// A new document holding a copy of `id` (an element becomes the root element; the
    /// document node copies the whole document).
    pub fn extract(&self, id: NodeId) -> Doc {
        let mut d = Doc::new();
        if id == NodeId::ROOT {
            for c in self.children(id) {
                d.append_copy(NodeId::ROOT, self, *c);
            }
        } else {
            d.append_copy(NodeId::ROOT, self, id);
        }
        d
    }

    /// A copy holding only the live tree, ids in document order.
    pub fn compacted(&self) -> Doc {
        self.extract(NodeId::ROOT)
    }

    /// Serialises a node (the document node: all its children) as XML text.
    pub fn to_xml(&self, id: NodeId) -> String {
        let mut out = String::new();
        let mut scope: Vec<(String, String)> = Vec::new();
        if id != NodeId::ROOT && self.is_element(id) {
            // Names inside a detached subtree may depend on declarations above it.
            scope = Vec::new();
        }
        self.write(id, &mut out, &mut scope);
        out
    }

    /// Serialises the children of a node.
    pub fn content_to_xml(&self, id: NodeId) -> String {
        let mut out = String::new();
        let mut scope: Vec<(String, String)> = Vec::new();
        for c in self.children(id) {
            self.write(*c, &mut out, &mut scope);
        }
        out
    }

    fn write(&self, id: NodeId, out: &mut String, scope: &mut Vec<(String, String)>) {
        match &self.nodes[id.ix()].kind {
            Kind::Document => {
                for c in &self.nodes[id.ix()].children {
                    self.write(*c, out, scope);
                }
            }
            Kind::Text(t) => escape_into(out, t, false),
            Kind::Comment(t) => {
                out.push_str("<!--");
                out.push_str(t);
                out.push_str("-->");
            }
            Kind::Pi { target, data } => {
                let _ = write!(out, "<?{target} {data}?>");
            }
            Kind::Attribute { name, value } => {
                // A lone attribute serialises as its value.
                let _ = name;
                escape_into(out, value, true);
            }
            Kind::Element { name, attrs, decls } => {
                let mark = scope.len();
                let mut new_decls: Vec<(String, String)> = Vec::new();
                let in_scope =
                    |scope: &Vec<(String, String)>, new: &Vec<(String, String)>, p: &str| {
                        new.iter()
                            .rev()
                            .chain(scope.iter().rev())
                            .find(|(q, _)| q == p)
                            .map(|(_, u)| u.clone())
                    };
                // Declarations written in the source, kept where they still mean something.
                for (p, u) in decls {
                    if in_scope(scope, &new_decls, p).as_deref() != Some(u.as_str()) {
                        new_decls.push((p.clone(), u.clone()));
                    }
                }
                let elem_prefix = self.pick_prefix(name, true, scope, &mut new_decls);
                let mut attr_text = String::new();
                for a in attrs {
                    if let Kind::Attribute { name: an, value } = &self.nodes[a.ix()].kind {
                        let p = self.pick_prefix(an, false, scope, &mut new_decls);
                        attr_text.push(' ');
                        if !p.is_empty() {
                            attr_text.push_str(&p);
                            attr_text.push(':');
                        }
                        attr_text.push_str(&an.local);
                        attr_text.push_str("=\"");
                        escape_into(&mut attr_text, value, true);
                        attr_text.push('"');
                    }
                }
                out.push('<');
                if !elem_prefix.is_empty() {
                    out.push_str(&elem_prefix);
                    out.push(':');
                }
                out.push_str(&name.local);
                for (p, u) in &new_decls {
                    if p.is_empty() {
                        out.push_str(" xmlns=\"");
                    } else {
                        let _ = write!(out, " xmlns:{p}=\"");
                    }
                    escape_into(out, u, true);
                    out.push('"');
                }
                out.push_str(&attr_text);
                let children = &self.nodes[id.ix()].children;
                if children.is_empty() {
                    out.push_str("/>");
                } else {
                    out.push('>');
                    scope.extend(new_decls);
                    for c in children {
                        self.write(*c, out, scope);
                    }
                    out.push_str("</");
                    if !elem_prefix.is_empty() {
                        out.push_str(&elem_prefix);
                        out.push(':');
                    }
                    out.push_str(&name.local);
                    out.push('>');
                }
                scope.truncate(mark);
            }
        }
    }

    /// The prefix to write `name` with, adding a declaration to `new` when needed.
    fn pick_prefix(
        &self,
        name: &Name,
        element: bool,
        scope: &[(String, String)],
        new: &mut Vec<(String, String)>,
    ) -> String {
        let lookup = |p: &str, new: &Vec<(String, String)>| {
            new.iter()
                .rev()
                .chain(scope.iter().rev())
                .find(|(q, _)| q == p)
                .map(|(_, u)| u.clone())
        };
        if name.ns == XML_NS {
            return "xml".to_string();
        }
        if name.ns.is_empty() {
            if element && lookup("", new).is_some_and(|u| !u.is_empty()) {
                new.push((String::new(), String::new()));
            }
            return String::new();
        }
        // The name's own prefix, when it is bound to its namespace (or free).
        let own = name.prefix.as_str();
        if (element || !own.is_empty()) && lookup(own, new).as_deref() == Some(name.ns.as_str()) {
            return own.to_string();
        }
        if !element || !own.is_empty() {
            // Any prefix already bound to the namespace.
            if let Some((p, _)) = new
                .iter()
                .rev()
                .chain(scope.iter().rev())
                .find(|(p, u)| *u == name.ns && !p.is_empty())
            {
                if lookup(p, new).as_deref() == Some(name.ns.as_str()) {
                    return p.clone();
                }
            }
        }
        if element && own.is_empty() {
            new.push((String::new(), name.ns.clone()));
            return String::new();
        }
        let mut p = if own.is_empty() {
            "ns".to_string()
        } else {
            own.to_string()
        };
        if lookup(&p, new).is_some() {
            let base = p.clone();
            let mut i = 1;
            loop {
                p = format!("{base}{i}");
                if lookup(&p, new).is_none() {
                    break;
                }
                i += 1;
            }
        }
        new.push((p.clone(), name.ns.clone()));
        p
    }
}

/// Escapes `text` for element content (or an attribute value).
pub fn escape_into(out: &mut String, text: &str, attribute: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
}

/// The namespace a name resolved to, or the unbound prefix.
fn owned_ns(ns: ResolveResult<'_>) -> Result<String, String> {
    match ns {
        ResolveResult::Bound(n) => Ok(n.as_ref().to_string()),
        ResolveResult::Unbound => Ok(String::new()),
        ResolveResult::Unknown(p) => Err(p.to_string()),
    }
}

struct Parser<'a> {
    text: &'a str,
    reader: NsReader<&'a [u8]>,
    doc: Doc,
    stack: Vec<NodeId>,
    line: u32,
    counted: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut reader = NsReader::from_str(text);
        reader.config_mut().expand_empty_elements = true;
        reader.config_mut().check_end_names = true;
        let mut doc = Doc::new();
        // About one node per 24 bytes of markup: growing the arena moves every node.
        doc.nodes.reserve(text.len() / 24 + 4);
        Parser {
            text,
            reader,
            doc,
            stack: vec![NodeId::ROOT],
            line: 1,
            counted: 0,
        }
    }

    fn line_at(&mut self, pos: usize) -> u32 {
        let pos = pos.min(self.text.len());
        if pos > self.counted {
            self.line += self.text.as_bytes()[self.counted..pos]
                .iter()
                .filter(|b| **b == b'\n')
                .count() as u32;
            self.counted = pos;
        }
        self.line
    }

    fn err(&mut self, message: impl Into<String>) -> ParseError {
        let pos = self.reader.buffer_position() as usize;
        ParseError {
            line: self.line_at(pos),
            message: message.into(),
        }
    }

    fn top(&self) -> NodeId {
        self.stack.last().copied().unwrap_or(NodeId::ROOT)
    }

    fn run(mut self) -> Result<Doc, ParseError> {
        let mut seen_root = false;
        loop {
            let start = self.reader.buffer_position() as usize;
            let (ns, ev) = match self.reader.read_resolved_event() {
                Ok((ns, ev)) => (owned_ns(ns), ev),
                Err(e) => return Err(self.err(format!("malformed XML: {e}"))),
            };
            let line = self.line_at(start);
            match ev {
                Event::Start(e) => {
                    if self.stack.len() == 1 {
                        if seen_root {
                            return Err(self.err("more than one root element"));
                        }
                        seen_root = true;
                    }
                    if self.stack.len() > MAX_DEPTH {
                        return Err(self.err(format!("elements nested deeper than {MAX_DEPTH}")));
                    }
                    let local = e.local_name().as_ref().to_string();
                    let prefix = e
                        .name()
                        .prefix()
                        .map(|p| p.as_ref().to_string())
                        .unwrap_or_default();
                    let uri =
                        ns.map_err(|p| self.err(format!("namespace prefix '{p}' is not bound")))?;
                    let parent = self.top();
                    let id = self.doc.push(
                        Kind::Element {
                            name: Name {
                                ns: uri,
                                local,
                                prefix,
                            },
                            attrs: Vec::new(),
                            decls: Vec::new(),
                        },
                        Some(parent),
                        line,
                    );
                    self.doc.nodes[parent.ix()].children.push(id);
                    let mut attrs = Vec::new();
                    let mut decls = Vec::new();
                    for a in e.attributes() {
                        let a = a.map_err(|x| self.err(format!("malformed attribute: {x}")))?;
                        let value = a
                            .normalized_value(Default::default())
                            .map_err(|x| self.err(format!("bad attribute value: {x}")))?
                            .into_owned();
                        let key = a.key;
                        let raw = key.as_ref().to_string();
                        if raw == "xmlns" {
                            decls.push((String::new(), value));
                            continue;
                        }
                        if let Some(p) = raw.strip_prefix("xmlns:") {
                            if value.is_empty() {
                                return Err(self.err(format!("prefix '{p}' bound to nothing")));
                            }
                            decls.push((p.to_string(), value));
                            continue;
                        }
                        let (rns, lname) = self.reader.resolver().resolve_attribute(key);
                        let lname = lname.as_ref().to_string();
                        let ans = owned_ns(rns).map_err(|p| {
                            self.err(format!("namespace prefix '{p}' is not bound"))
                        })?;
                        if ans == XMLNS_NS {
                            continue;
                        }
                        let aprefix = key
                            .prefix()
                            .map(|p| p.as_ref().to_string())
                            .unwrap_or_default();
                        let aid = self.doc.push(
                            Kind::Attribute {
                                name: Name {
                                    ns: ans,
                                    local: lname,
                                    prefix: aprefix,
                                },
                                value,
                            },
                            Some(id),
                            line,
                        );
                        attrs.push(aid);
                    }
                    if let Kind::Element {
                        attrs: a, decls: d, ..
                    } = &mut self.doc.nodes[id.ix()].kind
                    {
                        *a = attrs;
                        *d = decls;
                    }
                    self.stack.push(id);
                }
                Event::End(_) => {
                    self.stack.pop();
                }
                Event::Empty(_) => {
                    // expand_empty_elements is on: never reported.
                }
                Event::Text(t) => {
                    if self.stack.len() == 1 {
                        if !t.chars().all(|b| b.is_ascii_whitespace()) {
                            return Err(self.err("text outside the root element"));
                        }
                        continue;
                    }
                    let s = t.xml_content(Default::default());
                    let top = self.top();
                    self.doc.append_text(top, &s);
                }
                Event::CData(t) => {
                    let s = (*t).to_string();
                    let top = self.top();
                    self.doc.append_text(top, &s);
                }
                Event::GeneralRef(r) => {
                    let s = if let Some(c) = r
                        .resolve_char_ref()
                        .map_err(|e| self.err(format!("bad character reference: {e}")))?
                    {
                        c.to_string()
                    } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(&r) {
                        s.to_string()
                    } else {
                        return Err(self.err(format!(
                            "unknown entity '&{};': only the five predefined entities are allowed",
                            &*r
                        )));
                    };
                    if self.stack.len() == 1 {
                        return Err(self.err("reference outside the root element"));
                    }
                    let top = self.top();
                    self.doc.append_text(top, &s);
                }
                Event::Comment(c) => {
                    let s = (*c).to_string();
                    let top = self.top();
                    let id = self.doc.push(Kind::Comment(s), Some(top), line);
                    self.doc.nodes[top.ix()].children.push(id);
                }
                Event::PI(p) => {
                    let raw = (*p).to_string();
                    let (target, data) = raw.split_once(char::is_whitespace).unwrap_or((&raw, ""));
                    let top = self.top();
                    let id = self.doc.push(
                        Kind::Pi {
                            target: target.to_string(),
                            data: data.trim_start().to_string(),
                        },
                        Some(top),
                        line,
                    );
                    self.doc.nodes[top.ix()].children.push(id);
                }
                Event::Decl(_) => {}
                Event::DocType(_) => return Err(self.err("DOCTYPE is not allowed")),
                Event::Eof => break,
            }
        }
        if self.stack.len() > 1 {
            return Err(self.err("unexpected end of document: an element is not closed"));
        }
        if !seen_root {
            return Err(self.err("no root element"));
        }
        self.doc.edited();
        Ok(self.doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_serialises_namespaces_attributes_and_text() {
        let src = r#"<a:root xmlns:a="urn:a" xmlns="urn:d" x="1" a:y="2"><child>t &amp; &#65;</child><!--c--><a:e/></a:root>"#;
        let d = Doc::parse(src).unwrap();
        let root = d.root_element().unwrap();
        assert!(d.name(root).unwrap().is("urn:a", "root"));
        assert_eq!(d.attr(root, "", "x"), Some("1"));
        assert_eq!(d.attr(root, "urn:a", "y"), Some("2"));
        let child = d.child(root, "urn:d", "child").unwrap();
        assert_eq!(d.string_value(child), "t & A");
        assert_eq!(
            d.to_xml(NodeId::ROOT),
            r#"<a:root xmlns:a="urn:a" xmlns="urn:d" x="1" a:y="2"><child>t &amp; A</child><!--c--><a:e/></a:root>"#
        );
    }

    #[test]
    fn refuses_doctype_unknown_entities_unbound_prefixes_and_junk() {
        assert!(Doc::parse("<!DOCTYPE a [<!ENTITY x 'y'>]><a>&x;</a>").is_err());
        assert!(Doc::parse("<a>&x;</a>").is_err());
        assert!(Doc::parse("<p:a/>").is_err());
        assert!(Doc::parse("<a></b>").is_err());
        assert!(Doc::parse("<a>").is_err());
        assert!(Doc::parse("<a/><b/>").is_err());
        assert!(Doc::parse("").is_err());
        let e = Doc::parse("<a>\n<b>\n</c></a>").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn copies_keep_their_namespaces_and_document_order_follows_edits() {
        let src = Doc::parse(r#"<p:x xmlns:p="urn:p"><p:y>v</p:y></p:x>"#).unwrap();
        let (mut d, root) = Doc::with_root(Name::new("", "message"));
        let part = d.append_element(root, Name::new("", "part"));
        let y = src
            .child(src.root_element().unwrap(), "urn:p", "y")
            .unwrap();
        d.append_copy(part, &src, y);
        assert_eq!(
            d.to_xml(NodeId::ROOT),
            r#"<message><part><p:y xmlns:p="urn:p">v</p:y></part></message>"#
        );
        let first = d.append_element(root, Name::new("", "later"));
        assert!(d.order(part) < d.order(first));
        d.set_string(part, "plain");
        assert_eq!(d.string_value(root), "plain");
        let c = d.compacted();
        assert_eq!(c.to_xml(NodeId::ROOT), d.to_xml(NodeId::ROOT));
    }

    #[test]
    fn names_without_prefix_in_a_namespace_get_a_default_declaration() {
        let (mut d, root) = Doc::with_root(Name::new("urn:a", "r"));
        let c = d.append_element(root, Name::new("", "c"));
        d.append_text(c, "<&>");
        d.set_attr(c, Name::new("urn:b", "at"), "q\"");
        assert_eq!(
            d.to_xml(NodeId::ROOT),
            r#"<r xmlns="urn:a"><c xmlns="" xmlns:ns="urn:b" ns:at="q&quot;">&lt;&amp;&gt;</c></r>"#
        );
        let back = Doc::parse(&d.to_xml(NodeId::ROOT)).unwrap();
        assert_eq!(back, d);
    }
}
