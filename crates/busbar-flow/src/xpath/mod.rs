//! XPath 1.0 over the [`crate::xml`] tree, plus the XPath 2.0 functions and XML Schema casts
//! that WS-BPEL processes written for XPath 2.0 use.
//!
//! Layout: `lexer` turns the text into tokens, applying the operator-versus-name rules of
//! XPath 1.0 §3.7; `parser` builds the syntax tree and resolves every prefix and function name
//! against the compile-time [`Env`], so a compiled [`XPath`] never fails on a name at run time;
//! `eval` walks the tree (axes, predicates, comparisons, node-set order); `functions` is the
//! function library and the casts. This file holds the public surface: compile once with
//! [`XPath::compile`], evaluate many times with [`XPath::eval`] against a [`Context`] that
//! supplies variables and extension functions.
//!
//! Node-sets are always free of duplicates and in document order; nodes of different
//! documents are ordered by the address of their shared [`Doc`], then by [`Doc::order`].

use std::sync::Arc;

use crate::xml::{Doc, Name, NodeId};

mod eval;
mod functions;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

/// The XPath (2.0 and later) function namespace, usually bound to `fn`.
pub const FN_NS: &str = "http://www.w3.org/2005/xpath-functions";
/// The XML Schema namespace: its type names are constructor functions (`xs:integer('3')`).
pub const XS_NS: &str = "http://www.w3.org/2001/XMLSchema";

/// A node in some document. Documents are shared: `Arc<Doc>`.
///
/// Two references are equal when they name the same node of the same document (the same
/// `Arc`), not when the nodes look alike.
#[derive(Clone, Debug)]
pub struct NodeRef {
    /// The document the node lives in.
    pub doc: Arc<Doc>,
    /// The node.
    pub id: NodeId,
}

impl NodeRef {
    /// A reference to `id` in `doc`.
    pub fn new(doc: Arc<Doc>, id: NodeId) -> Self {
        NodeRef { doc, id }
    }

    /// The document node of `doc`.
    pub fn root(doc: Arc<Doc>) -> Self {
        NodeRef {
            doc,
            id: NodeId::ROOT,
        }
    }

    /// The XPath string-value of the node.
    pub fn string_value(&self) -> String {
        self.doc.string_value(self.id)
    }

    /// Sort key giving document order, across documents by `Arc` address; the id last so
    /// that equal nodes are always adjacent after sorting, even detached ones.
    fn order_key(&self) -> (usize, u32, u32) {
        (
            Arc::as_ptr(&self.doc) as usize,
            self.doc.order(self.id),
            self.id.0,
        )
    }
}

impl PartialEq for NodeRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.doc, &other.doc) && self.id == other.id
    }
}

impl Eq for NodeRef {}

/// Puts nodes in document order and removes duplicates.
fn sort_nodes(nodes: &mut Vec<NodeRef>) {
    if nodes.len() > 1 {
        nodes.sort_by_key(NodeRef::order_key);
        nodes.dedup();
    }
}

/// The first node in document order (node-sets made by callers may be unsorted).
fn first_in_order(nodes: &[NodeRef]) -> Option<&NodeRef> {
    nodes.iter().min_by_key(|n| n.order_key())
}

/// The result of an expression: one of the four XPath 1.0 types.
#[derive(Clone, Debug)]
pub enum Value {
    /// Nodes, in document order without duplicates when produced by evaluation.
    NodeSet(Vec<NodeRef>),
    /// A boolean.
    Boolean(bool),
    /// A double.
    Number(f64),
    /// A string.
    String(String),
}

impl Value {
    /// XPath `boolean()`: a non-empty node-set, a number neither zero nor NaN, a non-empty
    /// string.
    pub fn to_bool(&self) -> bool {
        match self {
            Value::NodeSet(n) => !n.is_empty(),
            Value::Boolean(b) => *b,
            Value::Number(n) => *n != 0.0 && !n.is_nan(),
            Value::String(s) => !s.is_empty(),
        }
    }

    /// XPath `number()`: strings by the XPath 1.0 number grammar (NaN otherwise), a
    /// node-set through the string-value of its first node.
    pub fn to_number(&self) -> f64 {
        match self {
            Value::Number(n) => *n,
            Value::Boolean(b) => f64::from(u8::from(*b)),
            Value::String(s) => parse_number(s),
            Value::NodeSet(_) => parse_number(&self.to_string_value()),
        }
    }

    /// XPath `string()`: the string-value of the first node in document order ("" for an
    /// empty node-set), `true`/`false`, numbers as [`format_number`] writes them.
    pub fn to_string_value(&self) -> String {
        match self {
            Value::NodeSet(n) => first_in_order(n)
                .map(NodeRef::string_value)
                .unwrap_or_default(),
            Value::Boolean(b) => b.to_string(),
            Value::Number(n) => format_number(*n),
            Value::String(s) => s.clone(),
        }
    }
}

/// XPath whitespace (the XML `S` production).
fn is_xml_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// XPath 1.0 `number(string)`: optional whitespace, an optional `-`, digits with an optional
/// fraction (or `.digits`), optional whitespace. Anything else (exponents, `+`, `Infinity`)
/// is NaN.
pub fn parse_number(text: &str) -> f64 {
    let t = text.trim_matches(is_xml_space);
    let body = t.strip_prefix('-').unwrap_or(t);
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let valid = digits(int)
        && frac.is_none_or(digits)
        && (!int.is_empty() || frac.is_some_and(|f| !f.is_empty()));
    if !valid {
        return f64::NAN;
    }
    // Validated above: only digits, one optional '.' and a leading '-', which Rust parses.
    t.parse().unwrap_or(f64::NAN)
}

/// XPath 1.0 `string(number)`: `NaN`, `Infinity`, `-Infinity`, integers without a decimal
/// point (`-0` as `0`), everything else as the shortest decimal that reads back the same,
/// never with an exponent.
pub fn format_number(n: f64) -> String {
    if n.is_nan() {
        "NaN".to_string()
    } else if n.is_infinite() {
        if n > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else if n == 0.0 {
        "0".to_string()
    } else {
        // Rust's Display for f64 is already shortest round-trip and exponent-free.
        n.to_string()
    }
}

/// Why an expression did not compile or evaluate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum XPathError {
    /// The text is not an XPath expression; `at` is the 1-based character position.
    #[error("XPath syntax error at character {at} of '{expr}': {message}")]
    Syntax {
        /// The whole expression text.
        expr: String,
        /// 1-based character position of the problem (one past the end: at the end).
        at: usize,
        /// What is wrong.
        message: String,
    },
    /// No such function (or not with this number of arguments, for extension functions).
    #[error("unknown function {0}")]
    UnknownFunction(String),
    /// A prefix in a name test or function name that the environment does not bind.
    #[error("namespace prefix '{0}' is not bound")]
    UnboundPrefix(String),
    /// A run-time type error, e.g. a path step on a number.
    #[error("{0}")]
    Type(String),
    /// A named fault raised by the [`Context`], passed through unchanged.
    #[error("{0}: {1}")]
    Raised(Name, String),
}

impl XPathError {
    /// A syntax error at byte offset `byte` of `expr`.
    fn syntax(expr: &str, byte: usize, message: impl Into<String>) -> Self {
        let byte = byte.min(expr.len());
        XPathError::Syntax {
            expr: expr.to_string(),
            at: expr.get(..byte).map_or(byte, |s| s.chars().count()) + 1,
            message: message.into(),
        }
    }
}

/// What expression evaluation needs from its caller.
pub trait Context {
    /// Value of `$name` (name exactly as written, prefix included if any, e.g.
    /// "input.payload").
    fn variable(&self, name: &str) -> Result<Value, XPathError>;
    /// Calls an extension function (any function whose name has a namespace other than the
    /// XPath function and XML Schema namespaces), already accepted at compile time.
    fn function(&self, name: &Name, args: Vec<Value>) -> Result<Value, XPathError>;
}

/// Compile-time environment.
pub struct Env<'a> {
    /// Resolves a prefix to a namespace URI; None = unbound (compile error).
    pub ns: &'a dyn Fn(&str) -> Option<String>,
    /// Whether an extension function (namespaced, not fn:/xs:) with this arity exists.
    pub extension: &'a dyn Fn(&Name, usize) -> bool,
}

/// A compiled expression: immutable, cheap to clone, shareable between threads.
#[derive(Clone, Debug)]
pub struct XPath {
    text: String,
    expr: parser::Expr,
    variables: Vec<String>,
}

impl XPath {
    /// Parses `text` and resolves its prefixes and function names in `env`.
    pub fn compile(text: &str, env: &Env<'_>) -> Result<XPath, XPathError> {
        let tokens = lexer::lex(text)?;
        let (expr, variables) = parser::parse(text, tokens, env)?;
        Ok(XPath {
            text: text.to_string(),
            expr,
            variables,
        })
    }

    /// The text it was compiled from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every variable name referenced (for deploy-time checks), each once, in order of first
    /// appearance.
    pub fn variables(&self) -> Vec<String> {
        self.variables.clone()
    }

    /// Evaluates with an optional context node (position 1, size 1).
    pub fn eval(&self, cx: &dyn Context, node: Option<&NodeRef>) -> Result<Value, XPathError> {
        eval::evaluate(&self.expr, cx, node)
    }

    /// True when the expression is a pure location path or a variable-rooted path (usable as
    /// an assign target), e.g. `$v.part/a/b`, `/a/b`, `a/@x`, `$v`.
    pub fn is_path(&self) -> bool {
        self.expr.is_path()
    }
}
