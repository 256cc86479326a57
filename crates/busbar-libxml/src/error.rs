//! The error value every entry point returns, and the per-thread capture of everything libxml2
//! and libxslt report while one call runs. libxml2 2.9 keeps its error handlers per thread and
//! libxslt has one global generic handler, so both are pointed at sinks that append to a
//! thread-local [`Capture`]; nothing ever reaches stderr.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;

use crate::ffi;

/// What went wrong, by the stage that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The input is not well-formed (namespace-well-formed) XML.
    Parse,
    /// An XPath expression is invalid or uses an unbound namespace prefix.
    XPathCompile,
    /// An XPath expression failed while being evaluated.
    XPathEval,
    /// A stylesheet is not well-formed XML or not valid XSLT 1.0.
    StylesheetCompile,
    /// A transform failed at run time, including `xsl:message terminate="yes"`.
    Transform,
    /// An input exceeded a size or nesting limit.
    Limit,
    /// The input asked for something the security policy refuses: a DOCTYPE, network access,
    /// a file outside the allowed directory, or a file write.
    Forbidden,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Parse => "XML parse error",
            ErrorKind::XPathCompile => "XPath compile error",
            ErrorKind::XPathEval => "XPath evaluation error",
            ErrorKind::StylesheetCompile => "XSLT compile error",
            ErrorKind::Transform => "XSLT transform error",
            ErrorKind::Limit => "limit exceeded",
            ErrorKind::Forbidden => "forbidden",
        })
    }
}

/// An error from libxml2/libxslt, with the place it names when it names one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}: {message}{}", location(.file, .line))]
pub struct LibxmlError {
    pub kind: ErrorKind,
    pub message: String,
    /// The file (or base URI) the error is in, for stylesheets.
    pub file: Option<String>,
    /// 1-based line number in `file` (or in the input) when known.
    pub line: Option<u32>,
}

fn location(file: &Option<String>, line: &Option<u32>) -> String {
    match (file, line) {
        (Some(file), Some(line)) => format!(" ({file}:{line})"),
        (Some(file), None) => format!(" ({file})"),
        (None, Some(line)) => format!(" (line {line})"),
        (None, None) => String::new(),
    }
}

impl LibxmlError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        LibxmlError {
            kind,
            message: message.into(),
            file: None,
            line: None,
        }
    }
}

/// One error or warning reported by the libraries.
#[derive(Debug, Clone)]
pub(crate) struct Diagnostic {
    pub text: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub warning: bool,
    /// Still receiving text (a libxslt context line announces a message that follows).
    open: bool,
}

/// Everything reported on this thread since the current call began.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    pub diagnostics: Vec<Diagnostic>,
    /// `xsl:message` output, one entry per message.
    pub messages: Vec<String>,
    /// Set when the security policy refused something; wins over other diagnostics.
    pub forbidden: Option<String>,
    pending_message: Option<String>,
    dropped: usize,
}

/// Bounds keep a runaway `xsl:message` loop from growing memory without limit.
const MAX_DIAGNOSTICS: usize = 64;
const MAX_MESSAGES: usize = 10_000;

thread_local! {
    static CAPTURE: RefCell<Capture> = RefCell::new(Capture::default());
}

/// A call in progress: handlers are installed for this thread and the capture starts empty.
pub(crate) struct Scope(());

pub(crate) fn begin() -> Scope {
    // SAFETY: both setters only store the pointers in libxml2's per-thread global state; the
    // handlers are `'static` functions that never unwind and only touch thread-local data.
    unsafe {
        ffi::xmlSetStructuredErrorFunc(std::ptr::null_mut(), Some(structured_error));
        ffi::xmlSetGenericErrorFunc(std::ptr::null_mut(), Some(ffi::busbar_libxml_generic_error));
    }
    with_capture(|c| *c = Capture::default());
    Scope(())
}

impl Scope {
    pub(crate) fn finish(self) -> Capture {
        with_capture(|c| {
            let mut taken = std::mem::take(c);
            if let Some(pending) = taken.pending_message.take() {
                taken.messages.push(pending);
            }
            taken
        })
    }
}

fn with_capture<R: Default>(f: impl FnOnce(&mut Capture) -> R) -> R {
    // A sink re-entered while the capture is borrowed would drop its text rather than panic
    // across the FFI boundary; the capture is only borrowed for these short closures.
    CAPTURE.with(|cell| {
        cell.try_borrow_mut()
            .map(|mut c| f(&mut c))
            .unwrap_or_default()
    })
}

pub(crate) fn record_forbidden(message: String) {
    with_capture(|c| {
        if c.forbidden.is_none() {
            c.forbidden = Some(message);
        }
    });
}

impl Capture {
    fn push(&mut self, diagnostic: Diagnostic) {
        if self.diagnostics.len() < MAX_DIAGNOSTICS {
            self.diagnostics.push(diagnostic);
        } else {
            self.dropped += 1;
        }
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.forbidden.is_some() || self.diagnostics.iter().any(|d| !d.warning)
    }

    /// libxslt met an `xsl:` element it has no instruction for.
    pub(crate) fn has_unknown_instruction(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| !d.warning && d.text.contains("xsltStylePreCompute: unknown xsl:"))
    }

    pub(crate) fn warnings(&self) -> Vec<String> {
        self.diagnostics
            .iter()
            .filter(|d| d.warning)
            .map(|d| d.text.clone())
            .collect()
    }

    /// The error for a failed call: a policy refusal first, else the first error reported
    /// (usually the root cause) with later ones appended.
    pub(crate) fn into_error(self, kind: ErrorKind, fallback: &str) -> LibxmlError {
        if let Some(message) = self.forbidden {
            return LibxmlError::new(ErrorKind::Forbidden, message);
        }
        let errors: Vec<&Diagnostic> = self.diagnostics.iter().filter(|d| !d.warning).collect();
        let Some(first) = errors.first() else {
            return LibxmlError::new(kind, fallback);
        };
        let mut message = errors
            .iter()
            .map(|d| d.text.as_str())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        if message.is_empty() {
            message = fallback.to_owned();
        }
        if self.dropped > 0 {
            message.push_str(&format!("; and {} more", self.dropped));
        }
        let kind = if is_limit(&message) {
            ErrorKind::Limit
        } else {
            kind
        };
        let located = errors
            .iter()
            .find(|d| d.line.is_some() || d.file.is_some())
            .copied();
        LibxmlError {
            kind,
            message,
            file: located
                .and_then(|d| d.file.clone())
                .or_else(|| first.file.clone()),
            line: located.and_then(|d| d.line),
        }
    }
}

/// libxml2's built-in safety limits (nesting depth, huge text nodes, entity amplification)
/// are reported as ordinary errors; they are limits, not malformed input.
fn is_limit(message: &str) -> bool {
    message.contains("Excessive depth")
        || message.contains("use XML_PARSE_HUGE")
        || message.contains("amplification")
        || message.contains("potential infinite template recursion")
}

/// Structured handler for libxml2 (parser, XPath, I/O errors).
unsafe extern "C" fn structured_error(_user: *mut c_void, error: *mut ffi::XmlError) {
    if error.is_null() {
        return;
    }
    // SAFETY: libxml2 passes a valid xmlError for the duration of the call; its string fields
    // are NUL-terminated or null.
    let (text, file, line, warning) = unsafe {
        let e = &*error;
        (
            cstr_lossy(e.message),
            opt_cstr(e.file),
            e.line,
            e.level == ffi::XML_ERR_WARNING,
        )
    };
    let text = text.trim_end().to_owned();
    let line = u32::try_from(line).ok().filter(|l| *l > 0);
    with_capture(|c| {
        c.push(Diagnostic {
            text,
            file,
            line,
            warning,
            open: false,
        })
    });
}

/// Receives every printf-style message once the C shim has formatted it.
#[no_mangle]
unsafe extern "C" fn busbar_libxml_sink(
    _ctx: *mut c_void,
    format: *const c_char,
    text: *const c_char,
) {
    // SAFETY: the shim passes the caller's NUL-terminated format and its own formatted buffer.
    let (format, text) = unsafe { (cstr_lossy(format), cstr_lossy(text)) };
    with_capture(|c| c.take_generic(&format, text));
}

impl Capture {
    /// Sorts libxslt's generic output into error records and `xsl:message` text.
    /// `xsltTransformError` first prints a context line ("runtime error: file F line N element
    /// E") and then the message with format "%s"; `xsl:message` prints its text with "%s",
    /// followed by "\n" when the text does not end with one.
    fn take_generic(&mut self, format: &str, text: String) {
        if let Some((file, line)) = context_line(format, &text) {
            let warning = text.starts_with("compilation warning");
            self.push(Diagnostic {
                text: String::new(),
                file,
                line,
                warning,
                open: true,
            });
            return;
        }
        if let Some(last) = self.diagnostics.last_mut().filter(|d| d.open) {
            last.text.push_str(&text);
            if text.ends_with('\n') {
                last.open = false;
                last.text.truncate(last.text.trim_end().len());
            }
            return;
        }
        if format == "%s" {
            let mut message = self.pending_message.take().unwrap_or_default();
            message.push_str(&text);
            if message.ends_with('\n') {
                message.pop();
                self.push_message(message);
            } else {
                self.pending_message = Some(message);
            }
            return;
        }
        if format == "\n" {
            if let Some(message) = self.pending_message.take() {
                self.push_message(message);
            }
            return;
        }
        let text_done = text.ends_with('\n');
        let text = text.trim_end().to_owned();
        self.push(Diagnostic {
            text,
            file: None,
            line: None,
            warning: false,
            open: !text_done,
        });
    }

    fn push_message(&mut self, message: String) {
        if self.messages.len() < MAX_MESSAGES {
            self.messages.push(message);
        }
    }
}

/// Parses libxslt's error context line into (file, line).
fn context_line(format: &str, text: &str) -> Option<(Option<String>, Option<u32>)> {
    let is_context_format =
        format.starts_with("%s: file ") || format.starts_with("%s: element ") || format == "%s\n";
    if !is_context_format {
        return None;
    }
    let rest = [
        "runtime error",
        "compilation error",
        "compilation warning",
        "error",
    ]
    .iter()
    .find_map(|kind| text.strip_prefix(kind))?;
    let rest = rest.trim_end_matches('\n');
    let Some(rest) = rest.strip_prefix(": file ") else {
        return Some((None, None));
    };
    let without_element = match rest.rfind(" element ") {
        Some(at) => &rest[..at],
        None => rest,
    };
    if let Some(at) = without_element.rfind(" line ") {
        let digits = &without_element[at + " line ".len()..];
        if let Ok(line) = digits.parse::<u32>() {
            return Some((Some(without_element[..at].to_owned()), Some(line)));
        }
    }
    Some((Some(without_element.to_owned()), None))
}

/// # Safety
/// `ptr` is null or a NUL-terminated string valid for the call.
pub(crate) unsafe fn cstr_lossy(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// # Safety
/// As [`cstr_lossy`].
pub(crate) unsafe fn opt_cstr(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: guaranteed by the caller.
        Some(unsafe { cstr_lossy(ptr) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_line_yields_file_and_line() {
        let got = context_line(
            "%s: file %s line %d element %s\n",
            "compilation error: file /a b/s.xsl line 12 element template\n",
        );
        assert_eq!(got, Some((Some("/a b/s.xsl".to_owned()), Some(12))));
    }

    #[test]
    fn message_text_is_not_mistaken_for_a_context_line() {
        assert_eq!(context_line("%s", "runtime error: file x line 3"), None);
    }

    #[test]
    fn generic_output_splits_into_errors_and_messages() {
        let mut c = Capture::default();
        c.take_generic("%s", "hello".to_owned());
        c.take_generic("\n", "\n".to_owned());
        c.take_generic(
            "%s: file %s line %d element %s\n",
            "runtime error: file s line 4 element x\n".to_owned(),
        );
        c.take_generic("%s", "Variable 'v' has not been declared.\n".to_owned());
        c.take_generic("%s", "two\nlines\n".to_owned());
        assert_eq!(
            c.messages,
            vec!["hello".to_owned(), "two\nlines".to_owned()]
        );
        assert_eq!(c.diagnostics.len(), 1);
        assert_eq!(c.diagnostics[0].text, "Variable 'v' has not been declared.");
        assert_eq!(c.diagnostics[0].line, Some(4));
    }

    #[test]
    fn limit_messages_become_limit_errors() {
        let mut c = Capture::default();
        c.push(Diagnostic {
            text: "Excessive depth in document: 256 use XML_PARSE_HUGE option".to_owned(),
            file: None,
            line: Some(1),
            warning: false,
            open: false,
        });
        assert_eq!(c.into_error(ErrorKind::Parse, "x").kind, ErrorKind::Limit);
    }
}
