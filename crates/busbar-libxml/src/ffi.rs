//! Hand-written declarations of the libxml2 2.9 / libxslt 1.1 / libexslt symbols this crate
//! uses, and nothing more. Structs are mirrored only where a field must be read; the mirrored
//! prefixes follow Debian's installed headers (`libxml/xmlerror.h`, `libxml/xpath.h`,
//! `libxslt/xsltInternals.h`), whose layouts are part of those libraries' stable ABI.

use std::ffi::{c_char, c_double, c_int, c_void};

/// `xmlChar` is UTF-8 bytes.
pub type XmlChar = u8;

/// Opaque libxml2/libxslt objects: only ever handled through pointers.
#[repr(C)]
pub struct XmlDoc {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlNode {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlParserCtxt {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlParserInput {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlDict {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlDtd {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlXPathContext {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XmlXPathCompExpr {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XsltTransformContext {
    _private: [u8; 0],
}
#[repr(C)]
pub struct XsltSecurityPrefs {
    _private: [u8; 0],
}

/// Leading fields of `struct _xmlDoc` / `struct _xmlNode`: the node type is the second field
/// of every libxml2 node ("must be second!" in tree.h).
#[repr(C)]
pub struct XmlNodeHead {
    pub private: *mut c_void,
    pub kind: c_int,
}
pub const XML_HTML_DOCUMENT_NODE: c_int = 13;

/// `struct _xmlError` (xmlerror.h), passed to structured error handlers.
#[repr(C)]
pub struct XmlError {
    pub domain: c_int,
    pub code: c_int,
    pub message: *mut c_char,
    pub level: c_int,
    pub file: *mut c_char,
    pub line: c_int,
    pub str1: *mut c_char,
    pub str2: *mut c_char,
    pub str3: *mut c_char,
    pub int1: c_int,
    pub int2: c_int,
    pub ctxt: *mut c_void,
    pub node: *mut c_void,
}
pub const XML_ERR_WARNING: c_int = 1;

/// Leading field of `struct _xmlParserCtxt` and of `struct _xmlSAXHandler`: the parser context
/// starts with its SAX handler pointer, and the handler starts with `internalSubset`, the
/// callback fired on `<!DOCTYPE`. Each context owns its own handler copy (xmlInitParserCtxt
/// allocates it), so overriding it affects that parse only.
#[repr(C)]
pub struct XmlParserCtxtHead {
    pub sax: *mut XmlSaxHandlerHead,
}
#[repr(C)]
pub struct XmlSaxHandlerHead {
    pub internal_subset: Option<InternalSubsetFn>,
}
pub type InternalSubsetFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    name: *const XmlChar,
    external_id: *const XmlChar,
    system_id: *const XmlChar,
);

/// `struct _xmlNodeSet` (xpath.h).
#[repr(C)]
pub struct XmlNodeSet {
    pub node_nr: c_int,
    pub node_max: c_int,
    pub node_tab: *mut *mut XmlNode,
}

/// `struct _xmlXPathObject` (xpath.h).
#[repr(C)]
pub struct XmlXPathObject {
    pub kind: c_int,
    pub nodesetval: *mut XmlNodeSet,
    pub boolval: c_int,
    pub floatval: c_double,
    pub stringval: *mut XmlChar,
    pub user: *mut c_void,
    pub index: c_int,
    pub user2: *mut c_void,
    pub index2: c_int,
}
pub const XPATH_NODESET: c_int = 1;
pub const XPATH_BOOLEAN: c_int = 2;
pub const XPATH_NUMBER: c_int = 3;
pub const XPATH_STRING: c_int = 4;

/// Prefix of `struct _xsltStylesheet` (xsltInternals.h) up to the output settings, which have
/// no accessor functions in libxslt 1.1.
#[repr(C)]
pub struct XsltStylesheet {
    pub parent: *mut XsltStylesheet,
    pub next: *mut XsltStylesheet,
    pub imports: *mut XsltStylesheet,
    pub doc_list: *mut c_void,
    pub doc: *mut XmlDoc,
    pub strip_spaces: *mut c_void,
    pub strip_all: c_int,
    pub cdata_section: *mut c_void,
    pub variables: *mut c_void,
    pub templates: *mut c_void,
    pub templates_hash: *mut c_void,
    pub root_match: *mut c_void,
    pub key_match: *mut c_void,
    pub elem_match: *mut c_void,
    pub attr_match: *mut c_void,
    pub parent_match: *mut c_void,
    pub text_match: *mut c_void,
    pub pi_match: *mut c_void,
    pub comment_match: *mut c_void,
    pub ns_aliases: *mut c_void,
    pub attribute_sets: *mut c_void,
    pub ns_hash: *mut c_void,
    pub ns_defs: *mut c_void,
    pub keys: *mut c_void,
    pub method: *mut XmlChar,
    pub method_uri: *mut XmlChar,
    pub version: *mut XmlChar,
    pub encoding: *mut XmlChar,
    pub omit_xml_declaration: c_int,
    pub decimal_format: *mut c_void,
    pub standalone: c_int,
    pub doctype_public: *mut XmlChar,
    pub doctype_system: *mut XmlChar,
    pub indent: c_int,
    pub media_type: *mut XmlChar,
}

// xmlParserOption (parser.h)
pub const XML_PARSE_NONET: c_int = 1 << 11;
pub const XML_PARSE_NOCDATA: c_int = 1 << 14;
pub const XML_PARSE_NOENT: c_int = 1 << 1;
pub const XML_PARSE_DTDLOAD: c_int = 1 << 2;
pub const XML_PARSE_DTDATTR: c_int = 1 << 3;
pub const XML_PARSE_DTDVALID: c_int = 1 << 4;
pub const XML_PARSE_XINCLUDE: c_int = 1 << 10;
pub const XML_PARSE_HUGE: c_int = 1 << 19;

// xsltSecurityOption (security.h)
pub const XSLT_SECPREF_READ_FILE: c_int = 1;
pub const XSLT_SECPREF_WRITE_FILE: c_int = 2;
pub const XSLT_SECPREF_CREATE_DIRECTORY: c_int = 3;
pub const XSLT_SECPREF_READ_NETWORK: c_int = 4;
pub const XSLT_SECPREF_WRITE_NETWORK: c_int = 5;

pub type XmlStructuredErrorFn = unsafe extern "C" fn(user: *mut c_void, error: *mut XmlError);
/// A printf-style `xmlGenericErrorFunc`; only ever implemented by the C shim.
pub type XmlGenericErrorFn = unsafe extern "C" fn(ctx: *mut c_void, msg: *const c_char, ...);
pub type XmlExternalEntityLoader = unsafe extern "C" fn(
    url: *const c_char,
    id: *const c_char,
    ctxt: *mut XmlParserCtxt,
) -> *mut XmlParserInput;
pub type XsltSecurityCheck = unsafe extern "C" fn(
    sec: *mut XsltSecurityPrefs,
    ctxt: *mut XsltTransformContext,
    value: *const c_char,
) -> c_int;
pub type XsltDocLoaderFn = unsafe extern "C" fn(
    uri: *const XmlChar,
    dict: *mut XmlDict,
    options: c_int,
    ctxt: *mut c_void,
    kind: c_int,
) -> *mut XmlDoc;

#[link(name = "xml2")]
extern "C" {
    pub static xmlFree: unsafe extern "C" fn(ptr: *mut c_void);

    pub fn xmlInitParser();
    pub fn xmlSetStructuredErrorFunc(ctx: *mut c_void, handler: Option<XmlStructuredErrorFn>);
    pub fn xmlSetGenericErrorFunc(ctx: *mut c_void, handler: Option<XmlGenericErrorFn>);
    pub fn xmlGetExternalEntityLoader() -> Option<XmlExternalEntityLoader>;
    pub fn xmlSetExternalEntityLoader(f: Option<XmlExternalEntityLoader>);

    pub fn xmlNewParserCtxt() -> *mut XmlParserCtxt;
    pub fn xmlFreeParserCtxt(ctxt: *mut XmlParserCtxt);
    pub fn xmlStopParser(ctxt: *mut XmlParserCtxt);
    pub fn xmlCtxtReadMemory(
        ctxt: *mut XmlParserCtxt,
        buffer: *const c_char,
        size: c_int,
        url: *const c_char,
        encoding: *const c_char,
        options: c_int,
    ) -> *mut XmlDoc;
    pub fn xmlGetIntSubset(doc: *const XmlDoc) -> *mut XmlDtd;
    pub fn xmlFreeDoc(doc: *mut XmlDoc);
    pub fn xmlCopyDoc(doc: *mut XmlDoc, recursive: c_int) -> *mut XmlDoc;
    pub fn xmlDocDumpMemory(doc: *mut XmlDoc, mem: *mut *mut XmlChar, size: *mut c_int);

    pub fn xmlXPathNewContext(doc: *mut XmlDoc) -> *mut XmlXPathContext;
    pub fn xmlXPathFreeContext(ctxt: *mut XmlXPathContext);
    pub fn xmlXPathRegisterNs(
        ctxt: *mut XmlXPathContext,
        prefix: *const XmlChar,
        uri: *const XmlChar,
    ) -> c_int;
    pub fn xmlXPathSetContextNode(node: *mut XmlNode, ctxt: *mut XmlXPathContext) -> c_int;
    pub fn xmlXPathCtxtCompile(
        ctxt: *mut XmlXPathContext,
        expr: *const XmlChar,
    ) -> *mut XmlXPathCompExpr;
    pub fn xmlXPathCompile(expr: *const XmlChar) -> *mut XmlXPathCompExpr;
    pub fn xmlXPathFreeCompExpr(comp: *mut XmlXPathCompExpr);
    pub fn xmlXPathCompiledEval(
        comp: *mut XmlXPathCompExpr,
        ctxt: *mut XmlXPathContext,
    ) -> *mut XmlXPathObject;
    pub fn xmlXPathFreeObject(obj: *mut XmlXPathObject);
    pub fn xmlXPathCastNodeToString(node: *mut XmlNode) -> *mut XmlChar;
}

#[link(name = "xslt")]
extern "C" {
    pub static mut xsltDocDefaultLoader: Option<XsltDocLoaderFn>;

    pub fn xsltInit();
    pub fn xsltSetGenericErrorFunc(ctx: *mut c_void, handler: Option<XmlGenericErrorFn>);
    pub fn xsltSetLoaderFunc(f: Option<XsltDocLoaderFn>);

    pub fn xsltNewSecurityPrefs() -> *mut XsltSecurityPrefs;
    pub fn xsltSetSecurityPrefs(
        sec: *mut XsltSecurityPrefs,
        option: c_int,
        func: Option<XsltSecurityCheck>,
    ) -> c_int;
    pub fn xsltSetDefaultSecurityPrefs(sec: *mut XsltSecurityPrefs);
    pub fn xsltSetCtxtSecurityPrefs(
        sec: *mut XsltSecurityPrefs,
        ctxt: *mut XsltTransformContext,
    ) -> c_int;

    pub fn xsltParseStylesheetDoc(doc: *mut XmlDoc) -> *mut XsltStylesheet;
    pub fn xsltFreeStylesheet(style: *mut XsltStylesheet);
    pub fn xsltNextImport(style: *mut XsltStylesheet) -> *mut XsltStylesheet;

    pub fn xsltNewTransformContext(
        style: *mut XsltStylesheet,
        doc: *mut XmlDoc,
    ) -> *mut XsltTransformContext;
    pub fn xsltFreeTransformContext(ctxt: *mut XsltTransformContext);
    pub fn xsltSetCtxtParseOptions(ctxt: *mut XsltTransformContext, options: c_int) -> c_int;
    pub fn xsltSetTransformErrorFunc(
        ctxt: *mut XsltTransformContext,
        ctx: *mut c_void,
        handler: Option<XmlGenericErrorFn>,
    );
    pub fn xsltApplyStylesheetUser(
        style: *mut XsltStylesheet,
        doc: *mut XmlDoc,
        params: *mut *const c_char,
        output: *const c_char,
        profile: *mut c_void,
        user_ctxt: *mut XsltTransformContext,
    ) -> *mut XmlDoc;
    pub fn xsltSaveResultToString(
        doc_txt: *mut *mut XmlChar,
        doc_txt_len: *mut c_int,
        result: *mut XmlDoc,
        style: *mut XsltStylesheet,
    ) -> c_int;
}

#[link(name = "exslt")]
extern "C" {
    pub fn exsltRegisterAll();
}

extern "C" {
    /// The C shim in `src/shim.c`.
    pub fn busbar_libxml_generic_error(ctx: *mut c_void, msg: *const c_char, ...);
}
