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
    /// `xml`), so a typo fails here rather than on the first message.
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
            Some(comp) if !captured.has_errors() => Ok(XPathExpr {
                comp,
                namespaces: bound,
                source: expr.to_owned(),
            }),
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
    fn numbers_format_as_xpath_requires() {
        assert_eq!(number_to_string(2.0), "2");
        assert_eq!(number_to_string(-0.0), "0");
        assert_eq!(number_to_string(0.5), "0.5");
        assert_eq!(number_to_string(1e21), "1000000000000000000000");
        assert_eq!(number_to_string(f64::NAN), "NaN");
        assert_eq!(number_to_string(f64::NEG_INFINITY), "-Infinity");
    }
}
