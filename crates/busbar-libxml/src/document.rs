//! Parsing and serialising XML documents.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;

use crate::error::{self, record_forbidden, ErrorKind, LibxmlError};
use crate::ffi;
use crate::limits::{self, ParseLimits};
use crate::security::{init, PARSE_OPTIONS};

/// Inputs larger than this are refused before parsing ([`ErrorKind::Limit`]). libxml2 itself
/// limits nesting to 256 levels and text nodes to 10 MB (no XML_PARSE_HUGE).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024 * 1024;

/// A parsed XML document. It may move between threads (`Send`) but not be shared (`!Sync`):
/// libxslt may touch a source document's nodes while it transforms it.
///
/// Parsed with XML_PARSE_NONET and without NOENT/DTDLOAD/HUGE; a document with a DOCTYPE is
/// refused ([`ErrorKind::Forbidden`]), so no entity is ever declared, let alone expanded.
#[derive(Debug)]
pub struct Document {
    ptr: NonNull<ffi::XmlDoc>,
}

// SAFETY: the document tree is owned exclusively by this value and libxml2 keeps no
// thread-affine state in it (its dictionary is reference-counted under a mutex), so it may be
// used from another thread once moved there. It is deliberately not Sync.
unsafe impl Send for Document {}

impl Drop for Document {
    fn drop(&mut self) {
        // SAFETY: we own the document and nothing else holds a pointer into it once dropped.
        unsafe { ffi::xmlFreeDoc(self.ptr.as_ptr()) }
    }
}

impl Document {
    /// Parses `bytes` (UTF-8 by default; UTF-16, ISO-8859-n and windows-125n as libxml2
    /// detects or the XML declaration names them) within [`ParseLimits::default`].
    pub fn parse(bytes: &[u8]) -> Result<Document, LibxmlError> {
        Document::parse_with_limits(bytes, &ParseLimits::default())
    }

    /// Parses `bytes` after a linear pre-scan has found them within `limits` (a document over
    /// a limit is refused with [`ErrorKind::Limit`] before libxml2 sees it).
    pub fn parse_with_limits(bytes: &[u8], limits: &ParseLimits) -> Result<Document, LibxmlError> {
        let ptr = parse_raw(bytes, None, ErrorKind::Parse, Some(limits))?;
        Ok(Document { ptr })
    }

    /// Serialises the document as `xmlDocDumpMemory` does: an XML declaration, then the tree.
    pub fn to_bytes(&self) -> Vec<u8> {
        init();
        let _scope = error::begin();
        let mut mem: *mut ffi::XmlChar = std::ptr::null_mut();
        let mut size: c_int = 0;
        // SAFETY: the document is valid for the borrow; libxml2 allocates `mem` (or leaves it
        // null on allocation failure) and we free it with xmlFree after copying.
        unsafe {
            ffi::xmlDocDumpMemory(self.ptr.as_ptr(), &mut mem, &mut size);
            take_xml_buffer(mem, size)
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::XmlDoc {
        self.ptr.as_ptr()
    }

    /// Takes ownership of a document pointer returned by libxml2.
    pub(crate) fn from_raw(ptr: NonNull<ffi::XmlDoc>) -> Document {
        Document { ptr }
    }
}

/// Copies and frees a buffer allocated by libxml2.
///
/// # Safety
/// `mem` is null or a libxml2 allocation of at least `size` bytes that nobody else frees.
pub(crate) unsafe fn take_xml_buffer(mem: *mut ffi::XmlChar, size: c_int) -> Vec<u8> {
    if mem.is_null() {
        return Vec::new();
    }
    let len = usize::try_from(size).unwrap_or(0);
    // SAFETY: guaranteed by the caller.
    unsafe {
        let out = std::slice::from_raw_parts(mem, len).to_vec();
        ffi::xmlFree(mem.cast());
        out
    }
}

/// Parses with the crate's safe options, refusing any DOCTYPE as soon as the parser meets it.
/// `url` becomes the document's base URI and the file named in error reports. `limits` are
/// checked first, for documents that come with a message (stylesheets come with the config).
pub(crate) fn parse_raw(
    bytes: &[u8],
    url: Option<&CStr>,
    kind: ErrorKind,
    limits: Option<&ParseLimits>,
) -> Result<NonNull<ffi::XmlDoc>, LibxmlError> {
    init();
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(LibxmlError::new(
            ErrorKind::Limit,
            format!(
                "document of {} bytes exceeds the {MAX_DOCUMENT_BYTES}-byte limit",
                bytes.len()
            ),
        ));
    }
    let size = c_int::try_from(bytes.len())
        .map_err(|_| LibxmlError::new(ErrorKind::Limit, "document too large"))?;
    if bytes.is_empty() {
        return Err(LibxmlError::new(kind, "empty document"));
    }
    if let Some(limits) = limits {
        limits::check(bytes, limits)?;
    }
    let scope = error::begin();
    // SAFETY: a fresh parser context is exclusively ours until freed below. Its first field is
    // its own SAX handler copy, whose first field is the internalSubset callback; replacing it
    // affects this parse only. `bytes` outlives the parse; `url` is NUL-terminated.
    let doc = unsafe {
        let ctxt = ffi::xmlNewParserCtxt();
        if ctxt.is_null() {
            return Err(LibxmlError::new(
                kind,
                "libxml2 could not allocate a parser",
            ));
        }
        let head = ctxt.cast::<ffi::XmlParserCtxtHead>();
        if !(*head).sax.is_null() {
            (*(*head).sax).internal_subset = Some(refuse_doctype);
        }
        let doc = ffi::xmlCtxtReadMemory(
            ctxt,
            bytes.as_ptr().cast::<c_char>(),
            size,
            url.map_or(std::ptr::null(), CStr::as_ptr),
            std::ptr::null(),
            PARSE_OPTIONS,
        );
        ffi::xmlFreeParserCtxt(ctxt);
        doc
    };
    let captured = scope.finish();
    match NonNull::new(doc) {
        // Namespace errors (an unbound prefix) leave a tree behind; they are still errors.
        Some(doc) if !captured.has_errors() => Ok(doc),
        other => {
            if let Some(doc) = other {
                // SAFETY: the document is ours and is not returned.
                unsafe { ffi::xmlFreeDoc(doc.as_ptr()) };
            }
            Err(captured.into_error(kind, "the document could not be parsed"))
        }
    }
}

/// SAX `internalSubset` callback: fires on `<!DOCTYPE` before any declaration is read.
unsafe extern "C" fn refuse_doctype(
    ctx: *mut c_void,
    _name: *const ffi::XmlChar,
    _external_id: *const ffi::XmlChar,
    _system_id: *const ffi::XmlChar,
) {
    record_forbidden("a DOCTYPE is not accepted (no DTDs, no entity declarations)".to_owned());
    // SAFETY: libxml2 calls SAX callbacks with the parser context as user data (the default
    // set by xmlInitParserCtxt, which this crate never changes).
    unsafe { ffi::xmlStopParser(ctx.cast()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_then_serialise_keeps_content() {
        let doc = Document::parse(b"<a x='1'><b>t&amp;u</b></a>").expect("parses");
        let out = String::from_utf8(doc.to_bytes()).expect("utf-8");
        assert_eq!(
            out,
            "<?xml version=\"1.0\"?>\n<a x=\"1\"><b>t&amp;u</b></a>\n"
        );
    }

    #[test]
    fn unbound_prefix_is_a_parse_error() {
        let err = Document::parse(b"<m:a/>").expect_err("namespace error");
        assert_eq!(err.kind, ErrorKind::Parse);
        assert!(err.message.contains("m"), "{err}");
    }

    #[test]
    fn empty_input_is_a_parse_error() {
        assert_eq!(
            Document::parse(b"").expect_err("empty").kind,
            ErrorKind::Parse
        );
    }
}
