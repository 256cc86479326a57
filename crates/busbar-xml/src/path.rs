//! Compiling XPath text into a [`StreamPath`].
//!
//! The expression is first parsed against the whole XPath 1.0 grammar, so that a typo is told
//! apart from valid XPath that a stream cannot answer (a function, a reverse axis, a boolean
//! operator). Only then is the parse lowered to the forward-only subset.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::CompileError;

/// The namespace URI bound to the `xml` prefix by the Namespaces in XML recommendation.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";
/// The SOAP 1.1 envelope namespace.
pub const SOAP11_ENV_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The SOAP 1.2 envelope namespace.
pub const SOAP12_ENV_NS: &str = "http://www.w3.org/2003/05/soap-envelope";

/// More steps than this are refused: the matcher keeps one bit per step.
pub const MAX_STEPS: usize = 64;

/// Prefix → namespace URI bindings used to resolve prefixed name tests. The `xml` prefix is
/// always bound; there is no default namespace for paths (an unprefixed name test means "no
/// namespace", as XPath 1.0 says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaces {
    map: BTreeMap<String, String>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Self::new()
    }
}

impl Namespaces {
    /// Only the predeclared `xml` prefix.
    pub fn new() -> Self {
        let mut map = BTreeMap::new();
        map.insert("xml".to_owned(), XML_NS.to_owned());
        Namespaces { map }
    }

    /// Bindings from `(prefix, uri)` pairs, e.g. a route's `namespaces:` map.
    pub fn from_pairs<P, U>(pairs: impl IntoIterator<Item = (P, U)>) -> Result<Self, CompileError>
    where
        P: Into<String>,
        U: Into<String>,
    {
        let mut ns = Namespaces::new();
        for (p, u) in pairs {
            ns.insert(p, u)?;
        }
        Ok(ns)
    }

    /// Bind `prefix` to `uri`, replacing an earlier binding of the same prefix.
    pub fn insert(
        &mut self,
        prefix: impl Into<String>,
        uri: impl Into<String>,
    ) -> Result<(), CompileError> {
        let prefix = prefix.into();
        let uri = uri.into();
        let bad = |message: &str| CompileError::BadNamespace {
            prefix: prefix.clone(),
            message: message.to_owned(),
        };
        if !is_ncname(&prefix) {
            return Err(bad("a prefix must be an XML name without a colon"));
        }
        if uri.is_empty() {
            return Err(bad("the namespace URI is empty"));
        }
        if prefix == "xmlns" {
            return Err(bad("the 'xmlns' prefix cannot be bound"));
        }
        if (prefix == "xml") != (uri == XML_NS) {
            return Err(bad("the 'xml' prefix and its namespace only go together"));
        }
        self.map.insert(prefix, uri);
        Ok(())
    }

    /// The URI bound to `prefix`, if any.
    pub fn get(&self, prefix: &str) -> Option<&str> {
        self.map.get(prefix).map(String::as_str)
    }
}

/// Which nodes a step looks at, relative to its context node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axis {
    /// `/step`: children (or attributes, for an attribute step).
    Child,
    /// `//step`: children of the context node or of any of its descendants.
    Descendant,
}

/// A name test with its namespace already turned into an index into [`StreamPath::uris`]
/// (0 = no namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NameTest {
    Any,
    AnyIn(u32),
    Name { ns: u32, local: Box<[u8]> },
}

impl NameTest {
    #[inline]
    pub(crate) fn matches(&self, ns: u32, local: &[u8]) -> bool {
        match self {
            NameTest::Any => true,
            NameTest::AnyIn(want) => *want == ns,
            NameTest::Name { ns: want, local: l } => *want == ns && **l == *local,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Element(NameTest),
    Text,
    Attribute(NameTest),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) axis: Axis,
    pub(crate) kind: Kind,
    /// `Some(n)`: only the n-th node (1-based) among the siblings this step's test selects;
    /// `Some(0)` selects nothing (e.g. `[0]`, `[1.5]`, or `[2][2]`).
    pub(crate) position: Option<u32>,
    /// A SOAP `Header` step directly under a SOAP `Envelope` step: SOAP allows the Header only
    /// as the first child of the Envelope, which lets a header route decide at `</Header>` (or
    /// at the start of Body) instead of at the end of the document.
    pub(crate) soap_header: bool,
}

/// A compiled streaming path. Immutable and cheap to share (`Send + Sync`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPath {
    pub(crate) source: String,
    pub(crate) steps: Vec<Step>,
    /// Namespace URIs the path mentions; name tests refer to them as index + 1.
    pub(crate) uris: Vec<String>,
}

impl StreamPath {
    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for StreamPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

pub use busbar_core::Test;

/// Compile `expr` against the prefix bindings `ns`.
pub fn compile(expr: &str, ns: &Namespaces) -> Result<StreamPath, CompileError> {
    let toks = lex(expr)?;
    let mut p = Parser {
        toks: &toks,
        i: 0,
        len: expr.len(),
        depth: 0,
    };
    let parsed = p.expr()?;
    if p.i < toks.len() {
        return Err(syntax(
            toks[p.i].at,
            "unexpected token after the expression",
        ));
    }
    lower(expr, parsed, ns)
}

// ---------------------------------------------------------------------------------------------
// Lexing (XPath 1.0 §3.7, including its operator/name-test disambiguation rule).

#[derive(Debug, Clone, PartialEq)]
enum T {
    LParen,
    RParen,
    LBrack,
    RBrack,
    Dot,
    DotDot,
    At,
    Comma,
    ColonColon,
    Slash,
    SlashSlash,
    Pipe,
    Plus,
    Minus,
    Eq,
    Neq,
    Lt,
    Le,
    Gt,
    Ge,
    Mul,
    /// `and`, `or`, `div`, `mod` in operator position.
    OpName(String),
    /// A name test, QName or `*`/`p:*` (local = "*").
    Name {
        prefix: Option<String>,
        local: String,
    },
    Literal,
    Number(f64),
    Var,
}

#[derive(Debug, Clone)]
struct Tok {
    t: T,
    at: usize,
}

fn syntax(position: usize, message: &str) -> CompileError {
    CompileError::Syntax {
        position,
        message: message.to_owned(),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic()
        || c == '_'
        || matches!(c as u32,
            0xC0..=0xD6 | 0xD8..=0xF6 | 0xF8..=0x2FF | 0x370..=0x37D | 0x37F..=0x1FFF
            | 0x200C..=0x200D | 0x2070..=0x218F | 0x2C00..=0x2FEF | 0x3001..=0xD7FF
            | 0xF900..=0xFDCF | 0xFDF0..=0xFFFD | 0x10000..=0xEFFFF)
}

fn is_name_char(c: char) -> bool {
    is_name_start(c)
        || c.is_ascii_digit()
        || c == '-'
        || c == '.'
        || matches!(c as u32, 0xB7 | 0x300..=0x36F | 0x203F..=0x2040)
}

/// An XML name without a colon (Namespaces in XML's NCName, on XML 1.0's name characters).
pub fn is_ncname(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if is_name_start(c)) && cs.all(is_name_char)
}

fn lex(s: &str) -> Result<Vec<Tok>, CompileError> {
    let b = s.as_bytes();
    let mut out: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
            continue;
        }
        let at = i;
        // §3.7: after a token that is not @ :: ( [ , or an operator, `*` multiplies and an
        // NCName is an operator name.
        let operand_done = out.last().is_some_and(|t| {
            !matches!(
                t.t,
                T::At
                    | T::ColonColon
                    | T::LParen
                    | T::LBrack
                    | T::Comma
                    | T::Slash
                    | T::SlashSlash
                    | T::Pipe
                    | T::Plus
                    | T::Minus
                    | T::Eq
                    | T::Neq
                    | T::Lt
                    | T::Le
                    | T::Gt
                    | T::Ge
                    | T::Mul
                    | T::OpName(_)
            )
        });
        let two = b.get(i + 1).copied();
        let (t, len) = match c {
            b'(' => (T::LParen, 1),
            b')' => (T::RParen, 1),
            b'[' => (T::LBrack, 1),
            b']' => (T::RBrack, 1),
            b'@' => (T::At, 1),
            b',' => (T::Comma, 1),
            b'|' => (T::Pipe, 1),
            b'+' => (T::Plus, 1),
            b'-' => (T::Minus, 1),
            b'=' => (T::Eq, 1),
            b':' if two == Some(b':') => (T::ColonColon, 2),
            b'/' if two == Some(b'/') => (T::SlashSlash, 2),
            b'/' => (T::Slash, 1),
            b'!' if two == Some(b'=') => (T::Neq, 2),
            b'<' if two == Some(b'=') => (T::Le, 2),
            b'<' => (T::Lt, 1),
            b'>' if two == Some(b'=') => (T::Ge, 2),
            b'>' => (T::Gt, 1),
            b'*' if operand_done => (T::Mul, 1),
            b'*' => (
                T::Name {
                    prefix: None,
                    local: "*".to_owned(),
                },
                1,
            ),
            b'"' | b'\'' => match s[i + 1..].find(c as char) {
                Some(end) => (T::Literal, end + 2),
                None => return Err(syntax(at, "unterminated string literal")),
            },
            b'.' if two == Some(b'.') => (T::DotDot, 2),
            b'.' if two.is_some_and(|d| d.is_ascii_digit()) => number(s, i)?,
            b'.' => (T::Dot, 1),
            b'0'..=b'9' => number(s, i)?,
            b'$' => {
                let n = qname_len(&s[i + 1..]);
                if n == 0 {
                    return Err(syntax(at, "'$' must be followed by a variable name"));
                }
                (T::Var, n + 1)
            }
            _ => {
                let rest = &s[i..];
                let n = ncname_len(rest);
                if n == 0 {
                    return Err(syntax(at, "unexpected character"));
                }
                let first = &rest[..n];
                let after = &rest[n..];
                if operand_done {
                    if matches!(first, "and" | "or" | "div" | "mod") {
                        (T::OpName(first.to_owned()), n)
                    } else {
                        return Err(syntax(at, "expected an operator"));
                    }
                } else if after.starts_with(":*") {
                    (
                        T::Name {
                            prefix: Some(first.to_owned()),
                            local: "*".to_owned(),
                        },
                        n + 2,
                    )
                } else if after.starts_with(':') && !after.starts_with("::") {
                    let m = ncname_len(&after[1..]);
                    if m == 0 {
                        return Err(syntax(at + n, "a prefix must be followed by a local name"));
                    }
                    let local = after[1..1 + m].to_owned();
                    (
                        T::Name {
                            prefix: Some(first.to_owned()),
                            local,
                        },
                        n + 1 + m,
                    )
                } else {
                    (
                        T::Name {
                            prefix: None,
                            local: first.to_owned(),
                        },
                        n,
                    )
                }
            }
        };
        out.push(Tok { t, at });
        i += len;
    }
    Ok(out)
}

fn ncname_len(s: &str) -> usize {
    let mut n = 0;
    for (k, c) in s.char_indices() {
        let ok = if k == 0 {
            is_name_start(c)
        } else {
            is_name_char(c)
        };
        if !ok {
            break;
        }
        n = k + c.len_utf8();
    }
    n
}

fn qname_len(s: &str) -> usize {
    let n = ncname_len(s);
    if n > 0 && s[n..].starts_with(':') {
        let m = ncname_len(&s[n + 1..]);
        if m > 0 {
            return n + 1 + m;
        }
    }
    n
}

fn number(s: &str, i: usize) -> Result<(T, usize), CompileError> {
    let b = s.as_bytes();
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    if j < b.len() && b[j] == b'.' {
        j += 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
    }
    let v: f64 = s[i..j].parse().map_err(|_| syntax(i, "invalid number"))?;
    Ok((T::Number(v), j - i))
}

// ---------------------------------------------------------------------------------------------
// Parsing: the full XPath 1.0 grammar, keeping detail only for what the subset can use.

#[derive(Debug)]
enum P {
    Path {
        steps: Vec<RawStep>,
    },
    Number(f64),
    /// Valid XPath outside the subset; the string says what it was.
    Other(String),
}

#[derive(Debug)]
struct RawStep {
    axis: String,
    test: RawTest,
    preds: Vec<P>,
}

#[derive(Debug)]
enum RawTest {
    Name {
        prefix: Option<String>,
        local: String,
    },
    NodeType(String),
}

struct Parser<'t> {
    toks: &'t [Tok],
    i: usize,
    len: usize,
    /// Expressions open around the current token (parentheses, predicates, arguments).
    depth: usize,
}

/// Deepest nesting of expressions the parser descends into. It recurses once per level, so
/// this bounds its stack; no routing path needs more, and a deeper expression is left to the
/// full XPath compiler.
const MAX_NESTING: usize = 32;

const AXES: &[&str] = &[
    "ancestor",
    "ancestor-or-self",
    "attribute",
    "child",
    "descendant",
    "descendant-or-self",
    "following",
    "following-sibling",
    "namespace",
    "parent",
    "preceding",
    "preceding-sibling",
    "self",
];
const NODE_TYPES: &[&str] = &["comment", "text", "processing-instruction", "node"];

impl Parser<'_> {
    fn peek(&self) -> Option<&T> {
        self.toks.get(self.i).map(|t| &t.t)
    }
    fn peek2(&self) -> Option<&T> {
        self.toks.get(self.i + 1).map(|t| &t.t)
    }
    fn here(&self) -> usize {
        self.toks.get(self.i).map_or(self.len, |t| t.at)
    }
    fn eat(&mut self, t: &T) -> bool {
        if self.peek() == Some(t) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, t: &T, what: &str) -> Result<(), CompileError> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(syntax(self.here(), &format!("expected {what}")))
        }
    }

    fn expr(&mut self) -> Result<P, CompileError> {
        if self.depth == MAX_NESTING {
            return Err(not_streamable(format!(
                "expressions nested more than {MAX_NESTING} deep"
            )));
        }
        self.depth += 1;
        let parsed = self.binary(0);
        self.depth -= 1;
        parsed
    }

    /// Levels: or, and, equality, relational, additive, multiplicative.
    fn binary(&mut self, level: usize) -> Result<P, CompileError> {
        if level == 6 {
            return self.unary();
        }
        let mut left = self.binary(level + 1)?;
        loop {
            let op = match (level, self.peek()) {
                (0, Some(T::OpName(o))) if o == "or" => "or",
                (1, Some(T::OpName(o))) if o == "and" => "and",
                (2, Some(T::Eq)) => "=",
                (2, Some(T::Neq)) => "!=",
                (3, Some(T::Lt)) => "<",
                (3, Some(T::Le)) => "<=",
                (3, Some(T::Gt)) => ">",
                (3, Some(T::Ge)) => ">=",
                (4, Some(T::Plus)) => "+",
                (4, Some(T::Minus)) => "-",
                (5, Some(T::Mul)) => "*",
                (5, Some(T::OpName(o))) if o == "div" => "div",
                (5, Some(T::OpName(o))) if o == "mod" => "mod",
                _ => return Ok(left),
            };
            self.i += 1;
            self.binary(level + 1)?;
            left = P::Other(format!(
                "the operator '{op}' (write the comparison as the route's condition)"
            ));
        }
    }

    fn unary(&mut self) -> Result<P, CompileError> {
        // A loop, not recursion: any number of minus signs costs no stack.
        let mut negated = false;
        while self.eat(&T::Minus) {
            negated = true;
        }
        let first = self.path_expr()?;
        let parsed = if self.peek() == Some(&T::Pipe) {
            while self.eat(&T::Pipe) {
                self.path_expr()?;
            }
            P::Other("a union '|'".to_owned())
        } else {
            first
        };
        if negated {
            return Ok(P::Other("unary minus".to_owned()));
        }
        Ok(parsed)
    }

    fn path_expr(&mut self) -> Result<P, CompileError> {
        let filter = match self.peek() {
            Some(T::Var | T::LParen | T::Literal | T::Number(_)) => true,
            Some(T::Name { local, .. }) if local != "*" => {
                self.peek2() == Some(&T::LParen)
                    && !(NODE_TYPES.contains(&local.as_str())
                        && matches!(self.peek(), Some(T::Name { prefix: None, .. })))
            }
            _ => false,
        };
        if !filter {
            return self.location_path();
        }
        let at = self.here();
        let primary = match self.peek().cloned() {
            Some(T::Var) => {
                self.i += 1;
                P::Other("a variable reference".to_owned())
            }
            Some(T::LParen) => {
                self.i += 1;
                self.expr()?;
                self.expect(&T::RParen, "')'")?;
                P::Other("a parenthesised expression".to_owned())
            }
            Some(T::Literal) => {
                self.i += 1;
                P::Other("a string literal".to_owned())
            }
            Some(T::Number(v)) => {
                self.i += 1;
                P::Number(v)
            }
            Some(T::Name { prefix, local }) => {
                self.i += 2;
                if !self.eat(&T::RParen) {
                    loop {
                        self.expr()?;
                        if self.eat(&T::RParen) {
                            break;
                        }
                        self.expect(&T::Comma, "',' or ')'")?;
                    }
                }
                let name = match prefix {
                    Some(p) => format!("{p}:{local}"),
                    None => local,
                };
                P::Other(format!("the function '{name}()'"))
            }
            _ => return Err(syntax(at, "expected an expression")),
        };
        let mut result = primary;
        while self.peek() == Some(&T::LBrack) {
            self.predicate()?;
            result = P::Other("a predicate on a non-path expression".to_owned());
        }
        if matches!(self.peek(), Some(T::Slash | T::SlashSlash)) {
            self.i += 1;
            self.relative(&mut Vec::new())?;
            result = P::Other("a path starting from a non-path expression".to_owned());
        }
        Ok(result)
    }

    fn starts_step(&self) -> bool {
        matches!(
            self.peek(),
            Some(T::Name { .. } | T::At | T::Dot | T::DotDot)
        )
    }

    fn location_path(&mut self) -> Result<P, CompileError> {
        let mut steps = Vec::new();
        match self.peek() {
            Some(T::Slash) => {
                self.i += 1;
                if !self.starts_step() {
                    return Ok(P::Path { steps });
                }
            }
            Some(T::SlashSlash) => {
                self.i += 1;
                steps.push(desc_or_self());
            }
            _ => {}
        }
        self.relative(&mut steps)?;
        Ok(P::Path { steps })
    }

    fn relative(&mut self, steps: &mut Vec<RawStep>) -> Result<(), CompileError> {
        steps.push(self.step()?);
        loop {
            if self.eat(&T::Slash) {
            } else if self.eat(&T::SlashSlash) {
                steps.push(desc_or_self());
            } else {
                return Ok(());
            }
            steps.push(self.step()?);
        }
    }

    fn step(&mut self) -> Result<RawStep, CompileError> {
        let at = self.here();
        if self.eat(&T::Dot) {
            let test = RawTest::NodeType("node".to_owned());
            return Ok(RawStep {
                axis: "self".to_owned(),
                test,
                preds: vec![],
            });
        }
        if self.eat(&T::DotDot) {
            let test = RawTest::NodeType("node".to_owned());
            return Ok(RawStep {
                axis: "parent".to_owned(),
                test,
                preds: vec![],
            });
        }
        let axis = if self.eat(&T::At) {
            "attribute".to_owned()
        } else if let (
            Some(T::Name {
                prefix: None,
                local,
            }),
            Some(T::ColonColon),
        ) = (self.peek(), self.peek2())
        {
            let local = local.clone();
            if !AXES.contains(&local.as_str()) {
                return Err(syntax(at, &format!("unknown axis '{local}'")));
            }
            self.i += 2;
            local
        } else {
            "child".to_owned()
        };
        let test = match self.peek().cloned() {
            Some(T::Name { prefix, local }) => {
                self.i += 1;
                if prefix.is_none()
                    && NODE_TYPES.contains(&local.as_str())
                    && self.peek() == Some(&T::LParen)
                {
                    self.i += 1;
                    if local == "processing-instruction" {
                        self.eat(&T::Literal);
                    }
                    self.expect(&T::RParen, "')' after a node type")?;
                    RawTest::NodeType(local)
                } else {
                    RawTest::Name { prefix, local }
                }
            }
            _ => return Err(syntax(self.here(), "expected a name test or a node type")),
        };
        let mut preds = Vec::new();
        while self.peek() == Some(&T::LBrack) {
            preds.push(self.predicate()?);
        }
        Ok(RawStep { axis, test, preds })
    }

    fn predicate(&mut self) -> Result<P, CompileError> {
        self.expect(&T::LBrack, "'['")?;
        if self.peek() == Some(&T::RBrack) {
            return Err(syntax(self.here(), "empty predicate"));
        }
        let p = self.expr()?;
        self.expect(&T::RBrack, "']'")?;
        Ok(p)
    }
}

fn desc_or_self() -> RawStep {
    RawStep {
        axis: "descendant-or-self".to_owned(),
        test: RawTest::NodeType("node".to_owned()),
        preds: vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// Lowering to the streaming subset.

fn not_streamable(reason: impl Into<String>) -> CompileError {
    CompileError::NotStreamable {
        reason: reason.into(),
    }
}

fn lower(source: &str, parsed: P, ns: &Namespaces) -> Result<StreamPath, CompileError> {
    let raw = match parsed {
        P::Path { steps, .. } if steps.is_empty() => {
            return Err(not_streamable(
                "the root node '/' alone selects the whole document",
            ))
        }
        // A relative path is evaluated with the document node as context, which makes it the
        // same as the absolute one.
        P::Path { steps, .. } => steps,
        P::Number(_) => return Err(not_streamable("a number is not a path")),
        P::Other(what) => return Err(not_streamable(what)),
    };
    let mut uris: Vec<String> = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut pending_descendant = false;
    let count = raw.len();
    for (idx, s) in raw.into_iter().enumerate() {
        let is_last = idx + 1 == count;
        if s.axis == "descendant-or-self"
            && matches!(&s.test, RawTest::NodeType(t) if t == "node")
            && s.preds.is_empty()
            && !is_last
        {
            if pending_descendant {
                return Err(not_streamable("two descendant-or-self steps in a row"));
            }
            pending_descendant = true;
            continue;
        }
        let axis = if pending_descendant {
            Axis::Descendant
        } else {
            Axis::Child
        };
        pending_descendant = false;
        let name_test = |prefix: &Option<String>, local: &str, uris: &mut Vec<String>| {
            let ns_index = match prefix {
                None => 0,
                Some(p) => {
                    let uri = ns
                        .get(p)
                        .ok_or_else(|| CompileError::UnknownPrefix { prefix: p.clone() })?;
                    match uris.iter().position(|u| u == uri) {
                        Some(k) => k as u32 + 1,
                        None => {
                            uris.push(uri.to_owned());
                            uris.len() as u32
                        }
                    }
                }
            };
            Ok::<NameTest, CompileError>(match (prefix, local) {
                (None, "*") => NameTest::Any,
                (Some(_), "*") => NameTest::AnyIn(ns_index),
                _ => NameTest::Name {
                    ns: ns_index,
                    local: local.as_bytes().into(),
                },
            })
        };
        let kind = match (s.axis.as_str(), &s.test) {
            ("child", RawTest::Name { prefix, local }) => {
                Kind::Element(name_test(prefix, local, &mut uris)?)
            }
            ("child", RawTest::NodeType(t)) if t == "text" => Kind::Text,
            ("attribute", RawTest::Name { prefix, local }) => {
                if prefix.is_none() && local == "xmlns" {
                    return Err(not_streamable(
                        "namespace declarations are not attributes in XPath",
                    ));
                }
                Kind::Attribute(name_test(prefix, local, &mut uris)?)
            }
            ("child", RawTest::NodeType(t)) => {
                return Err(not_streamable(format!("the node test '{t}()'")))
            }
            ("attribute", RawTest::NodeType(_)) => {
                return Err(not_streamable("a node-type test on the attribute axis"))
            }
            (axis, _) => return Err(not_streamable(format!("the '{axis}' axis"))),
        };
        if !is_last && !matches!(kind, Kind::Element(_)) {
            return Err(not_streamable(
                "text() and attributes can only be the last step",
            ));
        }
        let mut position = None;
        for p in s.preds {
            let n = match p {
                P::Number(v) if v.fract() == 0.0 && v >= 0.0 && v <= f64::from(u32::MAX) => {
                    v as u32
                }
                P::Number(_) => 0,
                P::Path { .. } => {
                    return Err(not_streamable(
                        "a path inside a predicate (only positional predicates [n] stream)",
                    ))
                }
                P::Other(what) => {
                    return Err(not_streamable(format!(
                        "{what} inside a predicate (only positional predicates [n] stream)"
                    )))
                }
            };
            // After a positional predicate at most one node is left, at position 1.
            position = Some(match position {
                None => n,
                Some(prev) if n == 1 => prev,
                Some(_) => 0,
            });
        }
        steps.push(Step {
            axis,
            kind,
            position,
            soap_header: false,
        });
    }
    if steps.len() > MAX_STEPS {
        return Err(not_streamable(format!("more than {MAX_STEPS} steps")));
    }
    for k in 1..steps.len() {
        let env_ns = match &steps[k - 1].kind {
            Kind::Element(NameTest::Name { ns, local }) if &**local == b"Envelope" && *ns > 0 => {
                *ns
            }
            _ => continue,
        };
        let uri = uris[env_ns as usize - 1].as_str();
        if uri != SOAP11_ENV_NS && uri != SOAP12_ENV_NS {
            continue;
        }
        if let (Axis::Child, Kind::Element(NameTest::Name { ns, local })) =
            (steps[k].axis, &steps[k].kind)
        {
            if *ns == env_ns && &**local == b"Header" {
                steps[k].soap_header = true;
            }
        }
    }
    Ok(StreamPath {
        source: source.to_owned(),
        steps,
        uris,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespaces {
        Namespaces::from_pairs([
            ("soapenv", SOAP11_ENV_NS),
            ("m", "http://services.samples/xsd"),
            ("r", "http://someuri"),
        ])
        .unwrap()
    }

    #[test]
    fn compiles_routing_paths_of_the_subset() {
        for e in [
            "//order[1]/symbol",
            "/soapenv:Envelope/soapenv:Body/m:buyStocks/order[1]/symbol",
            "/soapenv:Envelope/soapenv:Header/r:routing",
            "//m:*/order[2]/@id",
            "//@xml:lang",
            "/a//b/text()[2]",
            "child::a/attribute::b",
            "a/b",
            "//*[1]",
        ] {
            assert!(compile(e, &ns()).is_ok(), "{e}");
        }
    }

    #[test]
    fn descendant_step_and_positions_are_lowered() {
        let p = compile("//order[1]/symbol", &ns()).unwrap();
        assert_eq!(p.steps.len(), 2);
        assert_eq!(p.steps[0].axis, Axis::Descendant);
        assert_eq!(p.steps[0].position, Some(1));
        assert_eq!(p.steps[1].axis, Axis::Child);
        assert_eq!(p.steps[1].position, None);
        let p = compile("a[2][1]/b[2][2]", &ns()).unwrap();
        assert_eq!(p.steps[0].position, Some(2));
        assert_eq!(p.steps[1].position, Some(0));
    }

    #[test]
    fn soap_header_step_is_recognised_only_under_a_soap_envelope() {
        let p = compile("/soapenv:Envelope/soapenv:Header/r:routing", &ns()).unwrap();
        assert!(p.steps[1].soap_header);
        let p = compile("/r:Envelope/r:Header/r:routing", &ns()).unwrap();
        assert!(!p.steps[1].soap_header);
    }

    #[test]
    fn unknown_prefix_is_named() {
        assert_eq!(
            compile("//q:order", &ns()),
            Err(CompileError::UnknownPrefix {
                prefix: "q".to_owned()
            })
        );
    }

    #[test]
    fn valid_xpath_outside_the_subset_is_not_streamable() {
        for e in [
            "count(//order)",
            "//order[1]/symbol = 'IBM'",
            "//order[last()]",
            "//order[@id]",
            "//order[position() = 1]",
            "//a | //b",
            "../a",
            "//a/ancestor::b",
            "//a/following-sibling::b",
            "//comment()",
            "//node()",
            "/",
            "$v",
            "42",
            "//a and //b",
            "//text()/a",
            "@xmlns",
        ] {
            assert!(
                matches!(compile(e, &ns()), Err(CompileError::NotStreamable { .. })),
                "{e}: {:?}",
                compile(e, &ns())
            );
        }
    }

    #[test]
    fn invalid_xpath_is_a_syntax_error() {
        for e in [
            "", "//", "/a/", "a[", "a[]", "'abc", "a b", "//a[1", "a::b", "#", "a/(", "@", "a:",
            "f(", "a]",
        ] {
            assert!(
                matches!(compile(e, &ns()), Err(CompileError::Syntax { .. })),
                "{e:?}: {:?}",
                compile(e, &ns())
            );
        }
    }

    #[test]
    fn deep_nesting_is_left_to_the_full_compiler_without_exhausting_the_stack() {
        let predicates = format!("//a{}", "[b".repeat(100_000));
        let parens = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let minus = format!("{}1", "-".repeat(1_000_000));
        for e in [predicates, parens, minus] {
            assert!(
                matches!(compile(&e, &ns()), Err(CompileError::NotStreamable { .. })),
                "{:?}",
                compile(&e, &ns())
            );
        }
        // Nesting within the limit is parsed as before.
        let nested = format!("//a[{}1{}]", "(".repeat(20), ")".repeat(20));
        assert!(
            !compile(&nested, &ns()).is_err_and(|e| e.to_string().contains("nested")),
            "{:?}",
            compile(&nested, &ns())
        );
    }

    #[test]
    fn namespace_map_refuses_reserved_and_empty_bindings() {
        let mut n = Namespaces::new();
        assert!(n.insert("xmlns", "urn:x").is_err());
        assert!(n.insert("xml", "urn:x").is_err());
        assert!(n.insert("p", XML_NS).is_err());
        assert!(n.insert("p", "").is_err());
        assert!(n.insert("a:b", "urn:x").is_err());
        assert!(n.insert("p", "urn:x").is_ok());
        assert_eq!(n.get("xml"), Some(XML_NS));
    }
}
