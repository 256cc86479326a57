//! Compiled XSLT 1.0 stylesheets and transforms.

use std::ffi::{c_char, c_int, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use crate::document::{parse_raw, take_xml_buffer, Document};
use crate::error::{self, opt_cstr, ErrorKind, LibxmlError};
use crate::ffi;
use crate::security::{init, prefs, resolve_dir, with_access, PARSE_OPTIONS};

/// Which files `document()`, `xsl:include` and `xsl:import` may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentAccess {
    /// No file may be read.
    Off,
    /// Only files under this directory (after resolving symlinks and `..`).
    UnderDir(PathBuf),
}

/// The stylesheet's effective `xsl:output` settings (imports included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSettings {
    /// `xml`, `html` or `text` when declared; `None` lets libxslt choose per result (`html`
    /// when the result's root element is an unqualified `html`, else `xml`).
    pub method: Option<String>,
    pub encoding: Option<String>,
    pub indent: bool,
    pub omit_xml_declaration: bool,
    pub media_type: Option<String>,
}

/// A transform's serialised result.
#[derive(Debug, Clone, PartialEq)]
pub struct Transformed {
    /// Serialised as xsltproc would (xsltSaveResultToString), honouring `xsl:output`.
    pub bytes: Vec<u8>,
    /// From `xsl:output media-type`, else the method's default (text/xml, text/html,
    /// text/plain).
    pub media_type: String,
    /// From `xsl:output encoding`; `None` means UTF-8.
    pub encoding: Option<String>,
    /// The output method used: `xml`, `html` or `text`.
    pub method: String,
    /// Text of each non-terminating `xsl:message`, in order.
    pub messages: Vec<String>,
    /// Warnings libxml2/libxslt reported while transforming.
    pub warnings: Vec<String>,
}

/// Quotes values for stylesheet parameters, which libxslt evaluates as XPath expressions.
#[derive(Debug, Clone, Copy)]
pub struct Param;

impl Param {
    /// An XPath expression whose value is the string `value`, whatever quotes it holds.
    pub fn string(value: &str) -> String {
        if !value.contains('\'') {
            format!("'{value}'")
        } else if !value.contains('"') {
            format!("\"{value}\"")
        } else {
            // Both quote kinds: XPath 1.0 literals cannot escape, so build it with concat().
            let mut parts = Vec::new();
            for (i, piece) in value.split('\'').enumerate() {
                if i > 0 {
                    parts.push("\"'\"".to_owned());
                }
                if !piece.is_empty() {
                    parts.push(format!("'{piece}'"));
                }
            }
            format!("concat({})", parts.join(", "))
        }
    }
}

/// A compiled stylesheet, shared read-only across threads (`Send + Sync`).
#[derive(Debug)]
pub struct Stylesheet {
    ptr: NonNull<ffi::XsltStylesheet>,
    access: Option<PathBuf>,
    output: OutputSettings,
    /// `xsl:strip-space` edits the source tree in place, so a borrowed Document is copied.
    strips_space: bool,
}

// SAFETY: a compiled stylesheet is read-only during transforms (all per-run state lives in the
// transform context; its dictionary is reference-counted under a mutex), which is how libxslt
// documents sharing it between threads. It is freed only on drop, with exclusive access.
unsafe impl Send for Stylesheet {}
// SAFETY: as above.
unsafe impl Sync for Stylesheet {}

impl Drop for Stylesheet {
    fn drop(&mut self) {
        // SAFETY: we own the stylesheet (and through it the stylesheet document).
        unsafe { ffi::xsltFreeStylesheet(self.ptr.as_ptr()) }
    }
}

impl Stylesheet {
    /// Compiles the stylesheet at `path`. Errors name the file and line.
    pub fn compile_file(path: &Path, access: DocumentAccess) -> Result<Stylesheet, LibxmlError> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let name = absolute.display().to_string();
        let bytes = std::fs::read(&absolute).map_err(|e| LibxmlError {
            kind: ErrorKind::StylesheetCompile,
            message: format!("cannot read stylesheet: {e}"),
            file: Some(name.clone()),
            line: None,
        })?;
        Stylesheet::compile_bytes(&bytes, &name, access)
    }

    /// Compiles a stylesheet held in memory; `base_uri` resolves relative includes and names
    /// the stylesheet in errors.
    pub fn compile_bytes(
        bytes: &[u8],
        base_uri: &str,
        access: DocumentAccess,
    ) -> Result<Stylesheet, LibxmlError> {
        init();
        let located = |kind, message: String| LibxmlError {
            kind,
            message,
            file: Some(base_uri.to_owned()),
            line: None,
        };
        let access = match access {
            DocumentAccess::Off => None,
            DocumentAccess::UnderDir(dir) => Some(resolve_dir(&dir).map_err(|e| {
                located(
                    ErrorKind::StylesheetCompile,
                    format!("document access directory {}: {e}", dir.display()),
                )
            })?),
        };
        let url = CString::new(base_uri).map_err(|_| {
            located(
                ErrorKind::StylesheetCompile,
                "base URI contains NUL".to_owned(),
            )
        })?;
        let doc =
            parse_raw(bytes, Some(&url), ErrorKind::StylesheetCompile, None).map_err(|mut e| {
                e.file.get_or_insert_with(|| base_uri.to_owned());
                e
            })?;
        let scope = error::begin();
        // SAFETY: xsltParseStylesheetDoc takes ownership of `doc` on success and leaves it to
        // us on failure, when we free it.
        let style = with_access(access.as_deref(), || unsafe {
            ffi::xsltParseStylesheetDoc(doc.as_ptr())
        });
        let captured = scope.finish();
        let style = match NonNull::new(style) {
            // libxslt reports an unknown `xsl:` instruction (outside forwards-compatible mode)
            // but counts it as a warning and returns the stylesheet; every transform that
            // reaches the instruction then fails. Other errors it reports and goes on from
            // are kept (`version="2.0"` gives "only 1.1 features are supported", and runs).
            Some(style) if captured.has_unknown_instruction() => {
                // SAFETY: we own the stylesheet, which owns the document; neither is used again.
                unsafe { ffi::xsltFreeStylesheet(style.as_ptr()) };
                None
            }
            Some(style) => Some(style),
            None => {
                // SAFETY: compilation failed, so the document is still ours.
                unsafe { ffi::xmlFreeDoc(doc.as_ptr()) };
                None
            }
        };
        let Some(style) = style else {
            let mut err = captured.into_error(
                ErrorKind::StylesheetCompile,
                "the stylesheet could not be compiled",
            );
            err.file.get_or_insert_with(|| base_uri.to_owned());
            return Err(err);
        };
        // SAFETY: `style` is a valid compiled stylesheet that we now own.
        let (output, strips_space) = unsafe { (read_output(style.as_ptr()), strips_space(style)) };
        Ok(Stylesheet {
            ptr: style,
            access,
            output,
            strips_space,
        })
    }

    /// The effective `xsl:output` settings.
    pub fn output(&self) -> &OutputSettings {
        &self.output
    }

    /// Transforms `input`. `params` are (name, XPath expression) pairs: quote string values
    /// with [`Param::string`].
    pub fn transform(
        &self,
        input: &Document,
        params: &[(String, String)],
    ) -> Result<Transformed, LibxmlError> {
        init();
        if self.strips_space {
            // SAFETY: deep-copying a document we borrow; the copy is owned by `Document`.
            let copy = unsafe { ffi::xmlCopyDoc(input.as_ptr(), 1) };
            let copy = NonNull::new(copy).map(Document::from_raw).ok_or_else(|| {
                LibxmlError::new(ErrorKind::Transform, "could not copy the input document")
            })?;
            self.run(&copy, params)
        } else {
            self.run(input, params)
        }
    }

    /// Transforms a document the caller gives up: whitespace stripping may change it in
    /// place, so no copy is made (what [`Stylesheet::transform_bytes`] does after parsing).
    pub fn transform_owned(
        &self,
        input: Document,
        params: &[(String, String)],
    ) -> Result<Transformed, LibxmlError> {
        self.run(&input, params)
    }

    /// Parses `input` and transforms it.
    pub fn transform_bytes(
        &self,
        input: &[u8],
        params: &[(String, String)],
    ) -> Result<Transformed, LibxmlError> {
        let doc = Document::parse(input)?;
        self.run(&doc, params)
    }

    fn run(
        &self,
        input: &Document,
        params: &[(String, String)],
    ) -> Result<Transformed, LibxmlError> {
        let mut owned = Vec::with_capacity(params.len() * 2);
        for (name, value) in params {
            if name.is_empty() {
                return Err(LibxmlError::new(
                    ErrorKind::Transform,
                    "empty parameter name",
                ));
            }
            for part in [name, value] {
                owned.push(CString::new(part.as_str()).map_err(|_| {
                    LibxmlError::new(
                        ErrorKind::Transform,
                        format!("parameter '{name}' contains NUL"),
                    )
                })?);
            }
        }
        let mut raw: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        raw.push(std::ptr::null());

        let scope = error::begin();
        let style = self.ptr.as_ptr();
        // SAFETY: the transform context is created, used and freed within this call; it reads
        // the shared stylesheet and our borrowed document. `raw` is NULL-terminated and its
        // strings outlive the call. The result document is ours; it is serialised and freed
        // before returning.
        let outcome = with_access(self.access.as_deref(), || unsafe {
            let ctxt = ffi::xsltNewTransformContext(style, input.as_ptr());
            if ctxt.is_null() {
                return None;
            }
            ffi::xsltSetCtxtSecurityPrefs(prefs(), ctxt);
            ffi::xsltSetCtxtParseOptions(ctxt, PARSE_OPTIONS);
            ffi::xsltSetTransformErrorFunc(
                ctxt,
                std::ptr::null_mut(),
                Some(ffi::busbar_libxml_generic_error),
            );
            let result = ffi::xsltApplyStylesheetUser(
                style,
                input.as_ptr(),
                raw.as_mut_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
                ctxt,
            );
            ffi::xsltFreeTransformContext(ctxt);
            let result = NonNull::new(result)?;
            let mut mem: *mut ffi::XmlChar = std::ptr::null_mut();
            let mut len: c_int = 0;
            let status = ffi::xsltSaveResultToString(&mut mem, &mut len, result.as_ptr(), style);
            let bytes = take_xml_buffer(mem, len);
            let html =
                (*result.as_ptr().cast::<ffi::XmlNodeHead>()).kind == ffi::XML_HTML_DOCUMENT_NODE;
            ffi::xmlFreeDoc(result.as_ptr());
            Some((status, bytes, html))
        });
        let captured = scope.finish();
        match outcome {
            Some((status, bytes, html)) if status >= 0 && !captured.has_errors() => {
                let method = self
                    .output
                    .method
                    .clone()
                    .unwrap_or_else(|| if html { "html" } else { "xml" }.to_owned());
                let media_type = self.output.media_type.clone().unwrap_or_else(|| {
                    match method.as_str() {
                        "html" => "text/html",
                        "text" => "text/plain",
                        _ => "text/xml",
                    }
                    .to_owned()
                });
                Ok(Transformed {
                    bytes,
                    media_type,
                    encoding: self.output.encoding.clone(),
                    method,
                    warnings: captured.warnings(),
                    messages: captured.messages,
                })
            }
            _ => {
                if !captured.has_errors() {
                    if let Some(last) = captured.messages.last() {
                        // Only xsl:message terminate="yes" stops a transform without an error.
                        return Err(LibxmlError::new(
                            ErrorKind::Transform,
                            format!("xsl:message terminated the transform: {last}"),
                        ));
                    }
                }
                Err(captured.into_error(ErrorKind::Transform, "the transform failed"))
            }
        }
    }
}

/// Reads the effective output settings, walking imports in precedence order as libxslt's
/// XSLT_GET_IMPORT_PTR / XSLT_GET_IMPORT_INT macros do.
///
/// # Safety
/// `style` is a valid compiled stylesheet.
unsafe fn read_output(style: *mut ffi::XsltStylesheet) -> OutputSettings {
    // SAFETY: walking the import tree of a valid stylesheet; string fields are NUL-terminated.
    unsafe {
        let text = |get: fn(&ffi::XsltStylesheet) -> *mut ffi::XmlChar| -> Option<String> {
            let mut st = style;
            while let Some(s) = st.as_ref() {
                let v = get(s);
                if !v.is_null() {
                    return opt_cstr(v.cast());
                }
                st = ffi::xsltNextImport(st);
            }
            None
        };
        let flag = |get: fn(&ffi::XsltStylesheet) -> c_int| -> bool {
            let mut st = style;
            while let Some(s) = st.as_ref() {
                let v = get(s);
                if v != -1 {
                    return v == 1;
                }
                st = ffi::xsltNextImport(st);
            }
            false
        };
        OutputSettings {
            method: text(|s| s.method),
            encoding: text(|s| s.encoding),
            indent: flag(|s| s.indent),
            omit_xml_declaration: flag(|s| s.omit_xml_declaration),
            media_type: text(|s| s.media_type),
        }
    }
}

/// # Safety
/// `style` is a valid compiled stylesheet.
unsafe fn strips_space(style: NonNull<ffi::XsltStylesheet>) -> bool {
    let mut st = style.as_ptr();
    // SAFETY: walking the import tree of a valid stylesheet.
    unsafe {
        while let Some(s) = st.as_ref() {
            if !s.strip_spaces.is_null() || s.strip_all == 1 {
                return true;
            }
            st = ffi::xsltNextImport(st);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_string_quotes_any_value() {
        assert_eq!(Param::string("eu"), "'eu'");
        assert_eq!(Param::string("it's"), "\"it's\"");
        assert_eq!(Param::string("a'b\"c"), "concat('a', \"'\", 'b\"c')");
        assert_eq!(Param::string("'\""), "concat(\"'\", '\"')");
    }
}
