//! Compiled XPath 1.0 expressions and their results.

use std::ffi::CString;
use std::ptr::NonNull;

use crate::document::Document;
use crate::error::{self, cstr_lossy, ErrorKind, LibxmlError};
use crate::ffi;
use crate::security::init;

/// A compiled XPath 1.0 expression with its namespace bindings (prefix → URI). Compiled once
/// and shared: `Send + Sync`.
#[derive(Debug)]
pub struct XPathExpr {
    comp: NonNull<ffi::XmlXPathCompExpr>,
    namespaces: Vec<(CString, CString)>,
    source: String,
}

// SAFETY: after compilation libxml2 only reads a compiled expression during evaluation (each
// evaluation has its own parser context and, for streamable paths, its own stream state), so
// it may be evaluated from several threads at once and dropped from any thread.
unsafe impl Send for XPathExpr {}
// SAFETY: as above.
unsafe impl Sync for XPathExpr {}

impl Drop for XPathExpr {
    fn drop(&mut self) {
        // SAFETY: we own the compiled expression; no evaluation can be running (we hold &mut).
        unsafe { ffi::xmlXPathFreeCompExpr(self.comp.as_ptr()) }
    }
}

/// The result of an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum XPathValue {
    /// The string-value of each selected node, in document order.
    NodeSet(Vec<String>),
    Boolean(bool),
    Number(f64),
    String(String),
}

impl XPathValue {
    /// XPath 1.0 `string()`: the first node's string-value, `true`/`false`, or the number in
    /// XPath notation (`NaN`, `Infinity`, integers without a decimal point, no exponent).
    pub fn to_xpath_string(&self) -> String {
        match self {
            XPathValue::NodeSet(nodes) => nodes.first().cloned().unwrap_or_default(),
            XPathValue::Boolean(b) => b.to_string(),
            XPathValue::Number(n) => number_to_string(*n),
            XPathValue::String(s) => s.clone(),
        }
    }

    /// XPath 1.0 `boolean()`: a non-empty node-set, a non-zero non-NaN number, a non-empty
    /// string.
    pub fn to_xpath_boolean(&self) -> bool {
        match self {
            XPathValue::NodeSet(nodes) => !nodes.is_empty(),
            XPathValue::Boolean(b) => *b,
            XPathValue::Number(n) => *n != 0.0 && !n.is_nan(),
            XPathValue::String(s) => !s.is_empty(),
        }
    }
}

/// Number → string per XPath 1.0 §4.2. Rust's `Display` for `f64` already prints the
/// shortest round-tripping decimal without an exponent.
pub(crate) fn number_to_string(n: f64) -> String {
    if n.is_nan() {
        "NaN".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if n == 0.0 {
        "0".to_owned()
    } else {
        format!("{n}")
    }
}

impl XPathExpr {
    /// Compiles `expr`. Every namespace prefix it uses must be bound in `namespaces` (or be
    /// `xml`), every function it calls must be one of XPath 1.0's core functions with as many
    /// arguments as it takes, and it may read no variable: [`Document::eval`] provides
    /// nothing else, so a typo fails here rather than on every message.
    pub fn compile(expr: &str, namespaces: &[(String, String)]) -> Result<XPathExpr, LibxmlError> {
        init();
        let compile_err = |m: String| LibxmlError::new(ErrorKind::XPathCompile, m);
        let mut bound = Vec::with_capacity(namespaces.len());
        for (prefix, uri) in namespaces {
            if prefix.is_empty() || !is_ncname(prefix) {
                return Err(compile_err(format!(
                    "'{prefix}' is not a valid namespace prefix"
                )));
            }
            let p = CString::new(prefix.as_str())
                .map_err(|_| compile_err(format!("prefix '{prefix}' contains NUL")))?;
            let u = CString::new(uri.as_str())
                .map_err(|_| compile_err(format!("namespace URI for '{prefix}' contains NUL")))?;
            bound.push((p, u));
        }
        for prefix in prefixes_used(expr) {
            if prefix != "xml" && !namespaces.iter().any(|(p, _)| p == prefix) {
                return Err(compile_err(format!(
                    "unknown namespace prefix '{prefix}' in XPath expression '{expr}'"
                )));
            }
        }
        let text = CString::new(expr)
            .map_err(|_| compile_err("XPath expression contains NUL".to_owned()))?;
        let scope = error::begin();
        // SAFETY: a context without a document is only used to carry the namespace bindings
        // through compilation and is freed before returning; the strings outlive both calls.
        let comp = unsafe {
            let ctxt = ffi::xmlXPathNewContext(std::ptr::null_mut());
            if ctxt.is_null() {
                std::ptr::null_mut()
            } else {
                for (p, u) in &bound {
                    ffi::xmlXPathRegisterNs(ctxt, p.as_ptr().cast(), u.as_ptr().cast());
                }
                let comp = ffi::xmlXPathCtxtCompile(ctxt, text.as_ptr().cast());
                ffi::xmlXPathFreeContext(ctxt);
                comp
            }
        };
        let captured = scope.finish();
        match NonNull::new(comp) {
            Some(comp) if !captured.has_errors() => {
                let compiled = XPathExpr {
                    comp,
                    namespaces: bound,
                    source: expr.to_owned(),
                };
                check_calls(expr, namespaces, true)
                    .map_err(|m| compile_err(format!("{m} in '{expr}'")))?;
                Ok(compiled)
            }
            other => {
                if let Some(comp) = other {
                    // SAFETY: ours and not returned.
                    unsafe { ffi::xmlXPathFreeCompExpr(comp.as_ptr()) };
                }
                let mut err =
                    captured.into_error(ErrorKind::XPathCompile, "invalid XPath expression");
                err.message = format!("{} in '{expr}'", err.message);
                Err(err)
            }
        }
    }

    /// Checks only the syntax of `expr`, for expressions another evaluator runs with its own
    /// functions, variables and namespaces (a stylesheet parameter, which libxslt evaluates).
    pub fn check_syntax(expr: &str) -> Result<(), LibxmlError> {
        init();
        let text = CString::new(expr).map_err(|_| {
            LibxmlError::new(ErrorKind::XPathCompile, "XPath expression contains NUL")
        })?;
        let scope = error::begin();
        // SAFETY: compiling a NUL-terminated string we own; the result is ours and freed here.
        let ok = unsafe {
            let comp = ffi::xmlXPathCompile(text.as_ptr().cast());
            let ok = !comp.is_null();
            if ok {
                ffi::xmlXPathFreeCompExpr(comp);
            }
            ok
        };
        let captured = scope.finish();
        if ok && !captured.has_errors() {
            return check_calls(expr, &[], false).map_err(|m| {
                LibxmlError::new(ErrorKind::XPathCompile, format!("{m} in '{expr}'"))
            });
        }
        let mut err = captured.into_error(ErrorKind::XPathCompile, "invalid XPath expression");
        err.message = format!("{} in '{expr}'", err.message);
        Err(err)
    }

    /// The expression text as given to [`XPathExpr::compile`].
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl Document {
    /// Evaluates `expr` with the document node as context node.
    pub fn eval(&self, expr: &XPathExpr) -> Result<XPathValue, LibxmlError> {
        init();
        let scope = error::begin();
        // SAFETY: the context lives only for this call and points at a document we borrow;
        // the compiled expression is only read. The result object is converted and freed
        // before the context, while the nodes it references are still alive.
        let value = unsafe {
            let doc = self.as_ptr();
            let ctxt = ffi::xmlXPathNewContext(doc);
            if ctxt.is_null() {
                None
            } else {
                ffi::xmlXPathSetContextNode(doc.cast(), ctxt);
                for (p, u) in &expr.namespaces {
                    ffi::xmlXPathRegisterNs(ctxt, p.as_ptr().cast(), u.as_ptr().cast());
                }
                let obj = ffi::xmlXPathCompiledEval(expr.comp.as_ptr(), ctxt);
                let value = convert(obj);
                if !obj.is_null() {
                    ffi::xmlXPathFreeObject(obj);
                }
                ffi::xmlXPathFreeContext(ctxt);
                value
            }
        };
        let captured = scope.finish();
        match value {
            Some(Ok(value)) if !captured.has_errors() => Ok(value),
            Some(Err(message)) => Err(LibxmlError::new(ErrorKind::XPathEval, message)),
            _ => {
                let mut err = captured.into_error(ErrorKind::XPathEval, "XPath evaluation failed");
                err.message = format!("{} in '{}'", err.message, expr.source);
                Err(err)
            }
        }
    }
}

/// # Safety
/// `obj` is null or a live XPath object whose nodes belong to a live document.
unsafe fn convert(obj: *mut ffi::XmlXPathObject) -> Option<Result<XPathValue, String>> {
    // SAFETY: guaranteed by the caller.
    let obj = unsafe { obj.as_ref() }?;
    Some(match obj.kind {
        ffi::XPATH_NODESET => {
            let mut values = Vec::new();
            // SAFETY: a node-set's table holds `node_nr` valid node pointers.
            unsafe {
                if let Some(set) = obj.nodesetval.as_ref() {
                    let count = usize::try_from(set.node_nr).unwrap_or(0);
                    values.reserve(count);
                    for i in 0..count {
                        let node = *set.node_tab.add(i);
                        let s = ffi::xmlXPathCastNodeToString(node);
                        values.push(cstr_lossy(s.cast()));
                        if !s.is_null() {
                            ffi::xmlFree(s.cast());
                        }
                    }
                }
            }
            Ok(XPathValue::NodeSet(values))
        }
        ffi::XPATH_BOOLEAN => Ok(XPathValue::Boolean(obj.boolval != 0)),
        ffi::XPATH_NUMBER => Ok(XPathValue::Number(obj.floatval)),
        // SAFETY: a string object's value is NUL-terminated (or null for "").
        ffi::XPATH_STRING => Ok(XPathValue::String(unsafe {
            cstr_lossy(obj.stringval.cast())
        })),
        other => Err(format!("unsupported XPath result type {other}")),
    })
}

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '\u{b7}')
}

fn is_ncname(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

/// The namespace prefixes an expression uses (`p:name`, `p:*`, `$p:v`, `p:f()`), skipping
/// string literals and axis separators (`child::`).
pub(crate) fn prefixes_used(expr: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '\'' || c == '"' {
            for (_, d) in chars.by_ref() {
                if d == c {
                    break;
                }
            }
            continue;
        }
        if !is_name_start(c) {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, d)) = chars.peek() {
            if !is_name_char(d) {
                break;
            }
            end = i + d.len_utf8();
            chars.next();
        }
        let rest = &expr[end..];
        if let Some(after) = rest.strip_prefix(':') {
            if after.starts_with('*') || after.chars().next().is_some_and(is_name_start) {
                found.push(&expr[start..end]);
                chars.next(); // the ':'; the local part is scanned as a name next
                              // Skip the local name so it is not read as another prefix candidate.
                while let Some(&(_, d)) = chars.peek() {
                    if !(is_name_char(d) || d == '*') {
                        break;
                    }
                    chars.next();
                }
            }
        }
    }
    found
}

/// The XPath 1.0 core function library, as libxml2 registers it in every evaluation context
/// (`xmlXPathRegisterAllFunctions`): name, fewest and most arguments (`None`: no most).
const CORE_FUNCTIONS: &[(&str, usize, Option<usize>)] = &[
    ("boolean", 1, Some(1)),
    ("ceiling", 1, Some(1)),
    ("concat", 2, None),
    ("contains", 2, Some(2)),
    ("count", 1, Some(1)),
    ("false", 0, Some(0)),
    ("floor", 1, Some(1)),
    ("id", 1, Some(1)),
    ("lang", 1, Some(1)),
    ("last", 0, Some(0)),
    ("local-name", 0, Some(1)),
    ("name", 0, Some(1)),
    ("namespace-uri", 0, Some(1)),
    ("normalize-space", 0, Some(1)),
    ("not", 1, Some(1)),
    ("number", 0, Some(1)),
    ("position", 0, Some(0)),
    ("round", 1, Some(1)),
    ("starts-with", 2, Some(2)),
    ("string", 0, Some(1)),
    ("string-length", 0, Some(1)),
    ("substring", 2, Some(3)),
    ("substring-after", 2, Some(2)),
    ("substring-before", 2, Some(2)),
    ("sum", 1, Some(1)),
    ("translate", 3, Some(3)),
    ("true", 0, Some(0)),
];

/// libxml2 also registers `escape-uri` in this namespace.
const XQUERY_FUNCTIONS: &str = "http://www.w3.org/2002/08/xquery-functions";

/// Functions of XSLT 1.0 (§12) and EXSLT's common ones, named in the error so that an
/// expression copied from a stylesheet says why it cannot run here.
const XSLT_FUNCTIONS: &[&str] = &[
    "current",
    "document",
    "element-available",
    "format-number",
    "function-available",
    "generate-id",
    "key",
    "system-property",
    "unparsed-entity-uri",
];

/// A function call or a variable reference in an expression, by its written QName.
#[derive(Debug, PartialEq)]
enum NameUse<'a> {
    Call {
        prefix: Option<&'a str>,
        local: &'a str,
        args: usize,
    },
    Variable(&'a str),
}

/// Checks what evaluation needs beyond the syntax libxml2 compiles: every `(` and `[` is
/// closed (libxml2 takes `concat(` for `concat()`), and a core function is given as many
/// arguments as it takes; with `only_core`, also that every function called is a core one and
/// no variable is read (what [`Document::eval`] provides). libxml2 looks functions and
/// variables up only when it reaches them, so without this a typo compiles and then fails on
/// every message (or on the few that reach a short-circuited branch).
fn check_calls(expr: &str, namespaces: &[(String, String)], only_core: bool) -> Result<(), String> {
    let (uses, closed) = names_used(expr);
    if !closed {
        return Err("a '(' or '[' is not closed".to_owned());
    }
    for used in uses {
        match used {
            NameUse::Variable(_) if !only_core => {}
            NameUse::Call {
                prefix: Some(_), ..
            } if !only_core => {}
            NameUse::Variable(name) => {
                return Err(format!(
                    "undefined variable '${name}' (no variables are defined here)"
                ))
            }
            NameUse::Call {
                prefix: Some(prefix),
                local,
                args,
            } => {
                let uri = namespaces
                    .iter()
                    .find(|(p, _)| p == prefix)
                    .map(|(_, u)| u.as_str());
                if !(uri == Some(XQUERY_FUNCTIONS) && local == "escape-uri" && args == 2) {
                    return Err(format!(
                        "unknown function '{prefix}:{local}()' (only the XPath 1.0 core functions are available)"
                    ));
                }
            }
            NameUse::Call {
                prefix: None,
                local,
                args,
            } => {
                let Some((_, least, most)) = CORE_FUNCTIONS.iter().find(|(n, ..)| *n == local)
                else {
                    if !only_core {
                        continue;
                    }
                    let why = if XSLT_FUNCTIONS.contains(&local) {
                        "an XSLT function; only the XPath 1.0 core functions are available"
                    } else {
                        "only the XPath 1.0 core functions are available"
                    };
                    return Err(format!("unknown function '{local}()' ({why})"));
                };
                if args < *least || most.is_some_and(|m| args > m) {
                    let wanted = match most {
                        Some(m) if m == least => format!("{least}"),
                        Some(m) => format!("{least} to {m}"),
                        None => format!("at least {least}"),
                    };
                    let plural = if *least == 1 && *most == Some(1) {
                        ""
                    } else {
                        "s"
                    };
                    return Err(format!(
                        "function '{local}()' takes {wanted} argument{plural}, not {args}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The function calls and variable references of an expression libxml2 compiled, found by
/// XPath 1.0's lexical rules (§3.7): a name followed by `(` is a function call unless it is
/// a node type, and a name where an operator is expected is an operator (`and`, `or`, `div`,
/// `mod`), never a call. Arguments are counted at their own nesting level. The flag is false
/// when a `(` or `[` is left open.
fn names_used(expr: &str) -> (Vec<NameUse<'_>>, bool) {
    #[derive(Clone, Copy, PartialEq)]
    enum Prev {
        /// Start, `@`, `::`, `(`, `[`, `,` or an operator: an operand comes next.
        OperandNext,
        /// After an operand (a name, a literal, `)`, `]`, `.`, `*` as a name test).
        OperatorNext,
    }
    struct Open {
        call: Option<usize>,
        commas: usize,
        empty: bool,
    }
    let bytes = expr.as_bytes();
    let mut found = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut prev = Prev::OperandNext;
    let mut pending_call: Option<usize> = None;
    let mut i = 0;
    let name_end = |from: usize| -> usize {
        let mut end = from;
        for (k, c) in expr[from..].char_indices() {
            if (k == 0 && is_name_start(c)) || (k > 0 && is_name_char(c)) {
                end = from + k + c.len_utf8();
            } else {
                break;
            }
        }
        end
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if let Some(top) = open.last_mut() {
            if c != b')' && c != b']' {
                top.empty = false;
            }
        }
        match c {
            b'\'' | b'"' => {
                i = memchr::memchr(c, &bytes[i + 1..]).map_or(bytes.len(), |at| i + 1 + at + 1);
                prev = Prev::OperatorNext;
            }
            b'(' | b'[' => {
                open.push(Open {
                    call: if c == b'(' { pending_call.take() } else { None },
                    commas: 0,
                    empty: true,
                });
                i += 1;
                prev = Prev::OperandNext;
            }
            b')' | b']' => {
                if let Some(Open {
                    call: Some(at),
                    commas,
                    empty,
                }) = open.pop()
                {
                    if let Some(NameUse::Call { args, .. }) = found.get_mut(at) {
                        *args = if empty { 0 } else { commas + 1 };
                    }
                }
                i += 1;
                prev = Prev::OperatorNext;
            }
            b',' => {
                if let Some(top) = open.last_mut() {
                    top.commas += 1;
                }
                i += 1;
                prev = Prev::OperandNext;
            }
            b'@' => {
                i += 1;
                prev = Prev::OperandNext;
            }
            b':' if bytes.get(i + 1) == Some(&b':') => {
                i += 2;
                prev = Prev::OperandNext;
            }
            b'*' => {
                i += 1;
                // A name test where an operand is expected, else the multiply operator.
                prev = match prev {
                    Prev::OperandNext => Prev::OperatorNext,
                    Prev::OperatorNext => Prev::OperandNext,
                };
            }
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                prev = Prev::OperatorNext;
            }
            b'.' => {
                i += if bytes.get(i + 1) == Some(&b'.') {
                    2
                } else {
                    1
                };
                prev = Prev::OperatorNext;
            }
            b'0'..=b'9' => {
                while bytes
                    .get(i)
                    .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
                {
                    i += 1;
                }
                prev = Prev::OperatorNext;
            }
            b'$' => {
                let start = i + 1;
                let mut end = name_end(start);
                if bytes.get(end) == Some(&b':') && end + 1 < bytes.len() && end > start {
                    let local_end = name_end(end + 1);
                    if local_end > end + 1 {
                        end = local_end;
                    }
                }
                found.push(NameUse::Variable(&expr[start..end]));
                i = end.max(start);
                prev = Prev::OperatorNext;
            }
            _ => {
                let start = i;
                let end = name_end(start);
                if end == start {
                    // An operator (`/`, `|`, `+`, `-`, `=`, `!=`, `<`, `>`...) or a stray
                    // character libxml2 accepted.
                    i += expr[i..].chars().next().map_or(1, char::len_utf8);
                    prev = Prev::OperandNext;
                    continue;
                }
                if prev == Prev::OperatorNext {
                    // `and`, `or`, `div` or `mod`.
                    i = end;
                    prev = Prev::OperandNext;
                    continue;
                }
                let (prefix, local, after) = match (bytes.get(end), bytes.get(end + 1)) {
                    (Some(b':'), Some(b'*')) => (None, "", end + 2),
                    (Some(b':'), Some(b':')) => (None, &expr[start..end], end),
                    (Some(b':'), Some(_)) if name_end(end + 1) > end + 1 => {
                        let local_end = name_end(end + 1);
                        (
                            Some(&expr[start..end]),
                            &expr[end + 1..local_end],
                            local_end,
                        )
                    }
                    _ => (None, &expr[start..end], end),
                };
                i = after;
                let next = expr[after..].trim_start().as_bytes().first().copied();
                let node_type = prefix.is_none()
                    && matches!(
                        local,
                        "comment" | "text" | "processing-instruction" | "node"
                    );
                if next == Some(b'(') && !node_type && !local.is_empty() {
                    pending_call = Some(found.len());
                    found.push(NameUse::Call {
                        prefix,
                        local,
                        args: 0,
                    });
                }
                prev = Prev::OperatorNext;
            }
        }
    }
    (found, open.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_found_outside_literals_and_axes() {
        assert_eq!(
            prefixes_used("/soapenv:Envelope/child::m:buyStocks[@a='x:y']/m:*"),
            vec!["soapenv", "m", "m"]
        );
        assert!(prefixes_used("count(//order) div 2 + ancestor::a").is_empty());
        assert_eq!(prefixes_used("$p:v = \"q:r\""), vec!["p"]);
    }

    #[test]
    fn calls_and_variables_are_found_by_xpaths_lexical_rules() {
        let used = |e| names_used(e).0;
        let call = |prefix, local, args| NameUse::Call {
            prefix,
            local,
            args,
        };
        assert_eq!(
            used("count(//a[text() and node()]) div 2 mod last()"),
            vec![call(None, "count", 1), call(None, "last", 0)]
        );
        assert_eq!(
            used("concat('f(', substring(., 1, 2), \"x,y\") = $v"),
            vec![
                call(None, "concat", 3),
                call(None, "substring", 3),
                NameUse::Variable("v")
            ]
        );
        assert_eq!(
            used("//and/or[div = 1] | child::mod * 2 and p:f ( ) or f:*"),
            vec![call(Some("p"), "f", 0)]
        );
        assert_eq!(
            used("processing-instruction('p') and $p:v"),
            vec![NameUse::Variable("p:v")]
        );
    }

    #[test]
    fn only_what_the_evaluation_context_provides_compiles() {
        for good in [
            "count(//a) > 1 and not(//b)",
            "substring(//a, 2) = 'x' or string-length() = 0",
            "concat(//a, 'b', 'c')",
            "//text()[normalize-space()]",
            "1.5 * 2 - .5 = 2.5",
        ] {
            assert!(check_calls(good, &[], true).is_ok(), "{good}");
        }
        let ns = [("fn".to_owned(), XQUERY_FUNCTIONS.to_owned())];
        assert!(check_calls("fn:escape-uri(//a, true())", &ns, true).is_ok());
        for (bad, says) in [
            ("nosuchfn(//a)", "unknown function 'nosuchfn()'"),
            ("false() and nosuchfn()", "unknown function 'nosuchfn()'"),
            ("//b[nosuchfn()]", "unknown function 'nosuchfn()'"),
            ("current()", "an XSLT function"),
            ("document('x')", "an XSLT function"),
            ("key('k', 1)", "an XSLT function"),
            ("$undefined", "undefined variable '$undefined'"),
            ("count()", "'count()' takes 1 argument, not 0"),
            ("substring('a')", "takes 2 to 3 arguments, not 1"),
            ("concat('a')", "takes at least 2 arguments, not 1"),
            ("p:f(1)", "unknown function 'p:f()'"),
            ("concat(", "not closed"),
            ("//a[1", "not closed"),
        ] {
            let got = check_calls(bad, &[], true).err().unwrap_or_default();
            assert!(got.contains(says), "{bad}: {got}");
        }
    }

    #[test]
    fn a_parameter_may_use_what_a_stylesheet_provides_but_not_a_broken_call() {
        for good in [
            "current()/a",
            "$v + key('k', 1)",
            "ex:node-set($t)",
            "count(//a)",
        ] {
            assert!(check_calls(good, &[], false).is_ok(), "{good}");
        }
        for bad in ["concat(", "count()", "substring('a')"] {
            assert!(check_calls(bad, &[], false).is_err(), "{bad}");
        }
        assert!(XPathExpr::check_syntax("concat(").is_err());
        assert!(XPathExpr::check_syntax("1 +").is_err());
        assert!(XPathExpr::check_syntax("document('d.xml')//a[$x]").is_ok());
    }

    #[test]
    fn numbers_format_as_xpath_requires() {
        assert_eq!(number_to_string(2.0), "2");
        assert_eq!(number_to_string(-0.0), "0");
        assert_eq!(number_to_string(0.5), "0.5");
        assert_eq!(number_to_string(1e21), "1000000000000000000000");
        assert_eq!(number_to_string(f64::NAN), "NaN");
        assert_eq!(number_to_string(f64::NEG_INFINITY), "-Infinity");
    }
}
