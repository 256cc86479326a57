//! busbar-libxml: full XPath 1.0 and XSLT 1.0 for busbar, through a small audited FFI over
//! Debian's libxml2 2.9 and libxslt 1.1 (with EXSLT, as xsltproc has it).
//!
//! Layout: `ffi` declares by hand the few C symbols used (no bindgen) and `src/shim.c`
//! formats the libraries' printf-style error callbacks; `security` runs the one-time set-up
//! ([`init`]) and enforces the file/network policy; `limits` pre-scans every message
//! document against [`ParseLimits`]; `error` turns everything the libraries
//! report on the calling thread into a [`LibxmlError`] (nothing is printed on stderr);
//! `document`, `xpath` and `xslt` hold the three public types, [`Document`], [`XPathExpr`]
//! and [`Stylesheet`].
//!
//! This is one of the two busbar crates allowed `unsafe` (the other is busbar-awslc, for
//! AWS-LC): every block carries a `SAFETY:` comment.
//!
//! Threads: call [`init`] on the main thread before starting workers. A [`Document`] is
//! `Send` but not `Sync`; an [`XPathExpr`] and a [`Stylesheet`] are compiled once and shared
//! (`Send + Sync`). Error handlers are installed on each call, on whatever thread it runs.
//!
//! Security: documents are parsed without network access and without DTDs (a DOCTYPE is
//! refused), after a linear pre-scan (`limits`) has checked them against [`ParseLimits`]
//! (attributes per element, start-tag size, depth, namespaces in scope, nodes), which
//! libxml2 would otherwise spend quadratic time on; stylesheets may not write files, create
//! directories or touch the network, and read files only under the directory their
//! [`DocumentAccess`] names.
//!
//! ```
//! use busbar_libxml::{Document, DocumentAccess, Param, Stylesheet, XPathExpr};
//!
//! let doc = Document::parse(b"<m:r xmlns:m='urn:m'><v>7</v></m:r>")?;
//! let ns = [("m".to_owned(), "urn:m".to_owned())];
//! let sum = XPathExpr::compile("/m:r/v * 6", &ns)?;
//! assert_eq!(doc.eval(&sum)?.to_xpath_string(), "42");
//!
//! let sheet = Stylesheet::compile_bytes(
//!     br#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
//!           <xsl:output method="text"/><xsl:param name="who"/>
//!           <xsl:template match="/">hello <xsl:value-of select="$who"/></xsl:template>
//!         </xsl:stylesheet>"#,
//!     "inline.xsl",
//!     DocumentAccess::Off,
//! )?;
//! let out = sheet.transform(&doc, &[("who".to_owned(), Param::string("o'neil"))])?;
//! assert_eq!(out.bytes, b"hello o'neil");
//! assert_eq!(out.media_type, "text/plain");
//! # Ok::<(), busbar_libxml::LibxmlError>(())
//! ```

mod document;
mod error;
mod ffi;
mod limits;
mod security;
mod xpath;
mod xslt;

pub use document::{Document, MAX_DOCUMENT_BYTES};
pub use error::{ErrorKind, LibxmlError};
pub use limits::ParseLimits;
pub use security::init;
pub use xpath::{XPathExpr, XPathValue};
pub use xslt::{DocumentAccess, OutputSettings, Param, Stylesheet, Transformed};
