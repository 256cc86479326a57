//! One-time library set-up and the file/network policy. Every file libxml2 or libxslt would
//! open (`document()`, `xsl:include`, `xsl:import`, external entities) passes three gates: the
//! libxslt security preferences (`xsltCheckRead`), the libxslt document loader (which re-parses
//! with safe options and refuses DOCTYPEs), and libxml2's external entity loader (which refuses
//! anything but a local file under the directory the current call allows). The allowed
//! directory is per call and lives in a thread-local, because all three callbacks run
//! synchronously on the calling thread.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};

use crate::error::{cstr_lossy, record_forbidden};
use crate::ffi;

static INIT: Once = Once::new();
static ORIGINAL_ENTITY_LOADER: OnceLock<Option<ffi::XmlExternalEntityLoader>> = OnceLock::new();
static ORIGINAL_DOC_LOADER: OnceLock<Option<ffi::XsltDocLoaderFn>> = OnceLock::new();
/// The process-wide libxslt security preferences (never freed: they live as long as libxslt).
static PREFS: OnceLock<SecurityPrefs> = OnceLock::new();

struct SecurityPrefs(*mut ffi::XsltSecurityPrefs);
// SAFETY: the preferences are written once during `init` and only read afterwards (libxslt's
// xsltGetSecurityPrefs is a plain array read), so sharing the pointer across threads is sound.
unsafe impl Send for SecurityPrefs {}
// SAFETY: as above.
unsafe impl Sync for SecurityPrefs {}

/// Parser options for everything this crate parses: no network, CDATA merged into text (the
/// XSLT data model has no CDATA nodes, and xsltproc parses the same way); never NOENT,
/// DTDLOAD or HUGE.
pub(crate) const PARSE_OPTIONS: c_int = ffi::XML_PARSE_NONET | ffi::XML_PARSE_NOCDATA;

/// Initialise libxml2 and libxslt once (xmlInitParser, xsltInit, EXSLT, error sinks, loaders,
/// security preferences). Idempotent and thread-safe. Call it on the main thread before worker
/// threads start; every other entry point calls it too, so forgetting it is harmless.
pub fn init() {
    INIT.call_once(|| {
        // SAFETY: this runs once, before any other call into the libraries made by this crate.
        // The installed callbacks are `'static` functions that never unwind. The security
        // preferences object is leaked on purpose: libxslt keeps a pointer to it.
        unsafe {
            ffi::xmlInitParser();
            ffi::xsltInit();
            ffi::exsltRegisterAll();
            // libxslt's generic handler is a process global (unlike libxml2's); the shim routes
            // to thread-local storage so one global setting serves every thread.
            ffi::xsltSetGenericErrorFunc(
                std::ptr::null_mut(),
                Some(ffi::busbar_libxml_generic_error),
            );
            let _ = ORIGINAL_ENTITY_LOADER.set(ffi::xmlGetExternalEntityLoader());
            ffi::xmlSetExternalEntityLoader(Some(gated_entity_loader));
            let _ = ORIGINAL_DOC_LOADER.set(ffi::xsltDocDefaultLoader);
            ffi::xsltSetLoaderFunc(Some(safe_doc_loader));

            let prefs = ffi::xsltNewSecurityPrefs();
            if !prefs.is_null() {
                ffi::xsltSetSecurityPrefs(
                    prefs,
                    ffi::XSLT_SECPREF_READ_FILE,
                    Some(check_read_file),
                );
                for option in [
                    ffi::XSLT_SECPREF_WRITE_FILE,
                    ffi::XSLT_SECPREF_CREATE_DIRECTORY,
                    ffi::XSLT_SECPREF_READ_NETWORK,
                    ffi::XSLT_SECPREF_WRITE_NETWORK,
                ] {
                    ffi::xsltSetSecurityPrefs(prefs, option, Some(refuse));
                }
                ffi::xsltSetDefaultSecurityPrefs(prefs);
                let _ = PREFS.set(SecurityPrefs(prefs));
            }
        }
    });
}

/// The preferences to attach to each transform context (null if allocation failed at init, in
/// which case the loaders below still enforce the policy).
pub(crate) fn prefs() -> *mut ffi::XsltSecurityPrefs {
    PREFS.get().map_or(std::ptr::null_mut(), |p| p.0)
}

thread_local! {
    static ALLOWED_DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Runs `f` with reads allowed under `dir` (canonical) on this thread, or none when `None`.
pub(crate) fn with_access<R>(dir: Option<&Path>, f: impl FnOnce() -> R) -> R {
    let previous = ALLOWED_DIR.with(|a| a.replace(dir.map(Path::to_path_buf)));
    let result = f();
    ALLOWED_DIR.with(|a| a.replace(previous));
    result
}

fn read_allowed(path: &Path) -> bool {
    let Some(dir) = ALLOWED_DIR.with(|a| a.borrow().clone()) else {
        return false;
    };
    // Canonicalising resolves `..` and symlinks, so a link inside the directory that points
    // outside it is refused too.
    path.canonicalize().is_ok_and(|p| p.starts_with(&dir))
}

/// The local path a URL names, or `None` for anything that is not a local file.
fn local_path(url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        return rest
            .starts_with('/')
            .then(|| PathBuf::from(percent_decode(rest)));
    }
    let scheme_end = url.find(':');
    let has_scheme = scheme_end.is_some_and(|end| {
        end > 1
            && url[..end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    (!has_scheme).then(|| PathBuf::from(url))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `xsltCheckRead` hook for local files (`value` is the URI's path).
unsafe extern "C" fn check_read_file(
    _sec: *mut ffi::XsltSecurityPrefs,
    _ctxt: *mut ffi::XsltTransformContext,
    value: *const c_char,
) -> c_int {
    // SAFETY: libxslt passes the NUL-terminated path of the parsed URI, or null.
    let path = unsafe { cstr_lossy(value) };
    if !path.is_empty() && read_allowed(Path::new(&path)) {
        1
    } else {
        record_forbidden(format!(
            "reading '{path}' is not allowed by the document access policy"
        ));
        0
    }
}

/// Hook for network access, file writes and directory creation: always refused.
unsafe extern "C" fn refuse(
    _sec: *mut ffi::XsltSecurityPrefs,
    _ctxt: *mut ffi::XsltTransformContext,
    value: *const c_char,
) -> c_int {
    // SAFETY: libxslt passes a NUL-terminated URL/path, or null.
    let what = unsafe { cstr_lossy(value) };
    record_forbidden(format!(
        "access to '{what}' is forbidden (no network, no file writes)"
    ));
    0
}

/// libxml2's external entity loader: every file libxml2 opens by URL comes through here.
unsafe extern "C" fn gated_entity_loader(
    url: *const c_char,
    id: *const c_char,
    ctxt: *mut ffi::XmlParserCtxt,
) -> *mut ffi::XmlParserInput {
    // SAFETY: libxml2 passes a NUL-terminated URL or null.
    let url_text = unsafe { cstr_lossy(url) };
    let allowed = local_path(&url_text).is_some_and(|p| read_allowed(&p));
    let original = ORIGINAL_ENTITY_LOADER.get().copied().flatten();
    match original {
        // SAFETY: forwarding the caller's own arguments to libxml2's default loader.
        Some(load) if allowed => unsafe { load(url, id, ctxt) },
        _ => {
            record_forbidden(format!(
                "loading '{url_text}' is not allowed by the document access policy"
            ));
            std::ptr::null_mut()
        }
    }
}

/// libxslt's loader for `document()`, includes and imports: libxslt asks for NOENT and DTDLOAD
/// there; this strips them, adds NONET, and refuses a loaded document with a DOCTYPE.
unsafe extern "C" fn safe_doc_loader(
    uri: *const ffi::XmlChar,
    dict: *mut ffi::XmlDict,
    options: c_int,
    ctxt: *mut c_void,
    kind: c_int,
) -> *mut ffi::XmlDoc {
    let unsafe_options = ffi::XML_PARSE_NOENT
        | ffi::XML_PARSE_DTDLOAD
        | ffi::XML_PARSE_DTDATTR
        | ffi::XML_PARSE_DTDVALID
        | ffi::XML_PARSE_XINCLUDE
        | ffi::XML_PARSE_HUGE;
    let options = (options & !unsafe_options) | ffi::XML_PARSE_NONET;
    let Some(load) = ORIGINAL_DOC_LOADER.get().copied().flatten() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding to libxslt's default loader with the caller's pointers unchanged.
    let doc = unsafe { load(uri, dict, options, ctxt, kind) };
    // SAFETY: `doc` is null or a document the loader just created and we exclusively own.
    if !doc.is_null() && unsafe { !ffi::xmlGetIntSubset(doc).is_null() } {
        // SAFETY: as above; nothing else refers to it yet.
        unsafe { ffi::xmlFreeDoc(doc) };
        // SAFETY: `uri` is a NUL-terminated string from libxslt.
        let name = unsafe { cstr_lossy(uri.cast()) };
        record_forbidden(format!("'{name}' has a DOCTYPE, which is not accepted"));
        return std::ptr::null_mut();
    }
    doc
}

/// Resolves a [`crate::DocumentAccess`] to the canonical directory reads are allowed under.
pub(crate) fn resolve_dir(dir: &Path) -> std::io::Result<PathBuf> {
    dir.canonicalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_urls_are_not_local_paths() {
        assert_eq!(local_path("http://example.com/a.xml"), None);
        assert_eq!(local_path("ftp://h/x"), None);
        assert_eq!(
            local_path("file:///etc/passwd"),
            Some(PathBuf::from("/etc/passwd"))
        );
        assert_eq!(
            local_path("/tmp/a%20b.xml"),
            Some(PathBuf::from("/tmp/a%20b.xml"))
        );
        assert_eq!(
            local_path("file:///tmp/a%20b.xml"),
            Some(PathBuf::from("/tmp/a b.xml"))
        );
        assert_eq!(local_path("rel/x.xml"), Some(PathBuf::from("rel/x.xml")));
    }

    #[test]
    fn reads_outside_the_allowed_dir_are_refused() {
        let dir = std::env::temp_dir().canonicalize().expect("temp dir");
        let inside = dir.join("busbar-libxml-access-probe.xml");
        std::fs::write(&inside, "<a/>").expect("write probe");
        with_access(Some(&dir), || {
            assert!(read_allowed(&inside));
            assert!(!read_allowed(Path::new("/etc/passwd")));
        });
        assert!(!read_allowed(&inside), "no directory means no reads");
        let _ = std::fs::remove_file(inside);
    }
}
