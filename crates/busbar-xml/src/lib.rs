//! Streaming XPath for content-based routing, and SOAP envelope helpers.
//!
//! Layout: [`path`] compiles an XPath text into a [`StreamPath`] (the forward-only subset:
//! `/` and `//` steps, namespaced name tests, `*`, positional `[n]`, `text()` and `@attr` as
//! the last step); `reader` is a resumable XML 1.0 + Namespaces tokenizer that checks
//! well-formedness and never needs the whole document; [`matcher`] runs a path and a [`Test`]
//! over chunks as they arrive ([`Matcher`], [`evaluate`]) and checks the tail of an early
//! decided document ([`WellFormed`]); [`soap`] tells SOAP 1.1 from 1.2 by the first start tag;
//! [`xslt`] runs simple XSLT 1.0 stylesheets (renames, wrappers, re-ordering) over the reader.
//!
//! Semantics are XPath 1.0's: a test holds when ANY selected node's string-value satisfies it
//! (the string-value of an element is all its descendant text, CDATA included, comments and
//! processing instructions excluded, references decoded, line ends normalised). One SOAP rule is
//! built in: a `Header` step under a SOAP `Envelope` step only selects the Envelope's first
//! child, as SOAP requires, so a header route decides at `</Header>` (or at `<Body>`).
//!
//! The engine compiles each route's path once when it builds the config, then per request
//! feeds body chunks to a [`Matcher`] while keeping the bytes it fed; once
//! [`Matcher::feed`] returns `Some(answer)`, it forwards the kept bytes followed by the rest of
//! the stream unchanged, and may pass the rest through [`Matcher::into_well_formed`] to abort a
//! forwarded request whose tail turns out malformed.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod error;
pub mod matcher;
pub mod path;
mod reader;
pub mod soap;
pub mod xslt;

pub use error::{CompileError, XmlError};
pub use matcher::{evaluate, Matcher, WellFormed, MAX_VALUE};
pub use path::{
    compile, is_ncname, Namespaces, StreamPath, Test, SOAP11_ENV_NS, SOAP12_ENV_NS, XML_NS,
};
pub use reader::{MAX_DEPTH, MAX_REFERENCE, MAX_TOKEN};
pub use soap::{sniff_envelope, Sniff, SoapVersion};
