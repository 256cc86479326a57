//! Error values of the crate: one for compiling a path, one for reading a document.

use thiserror::Error;

/// Why an XPath expression could not be compiled into a streaming path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    /// The text is not a valid XPath 1.0 expression.
    #[error("invalid XPath at character {position}: {message}")]
    Syntax { position: usize, message: String },
    /// Valid XPath, but outside the forward-only subset a stream can answer.
    #[error("XPath is valid but cannot be evaluated on a stream: {reason}")]
    NotStreamable { reason: String },
    /// A name test uses a prefix that the namespace map does not bind.
    #[error("unknown prefix '{prefix}'")]
    UnknownPrefix { prefix: String },
    /// A namespace map entry is unusable (empty URI, reserved prefix, bad name).
    #[error("invalid namespace binding '{prefix}': {message}")]
    BadNamespace { prefix: String, message: String },
}

/// Why a document could not be read. Offsets count bytes from the start of the document
/// (including a byte-order mark) and do not depend on how the input was split into chunks.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum XmlError {
    /// Not well-formed XML 1.0 (with namespaces).
    #[error("malformed XML at byte {offset}: {message}")]
    Malformed { offset: usize, message: String },
    /// A document type declaration: refused outright, so no entity is ever expanded and no
    /// external resource is ever fetched.
    #[error("DOCTYPE declarations are not accepted (byte {offset})")]
    Doctype { offset: usize },
    /// A size limit of the streaming reader was exceeded.
    #[error("XML limit exceeded at byte {offset}: {what} is larger than {limit}")]
    Limit {
        offset: usize,
        what: &'static str,
        limit: usize,
    },
    /// The XML declaration names an encoding other than UTF-8, or the input starts with a
    /// UTF-16/UTF-32 byte-order mark.
    #[error("unsupported encoding '{encoding}' (only UTF-8 is read)")]
    UnsupportedEncoding { encoding: String },
}

impl XmlError {
    pub(crate) fn malformed(offset: usize, message: impl Into<String>) -> Self {
        XmlError::Malformed {
            offset,
            message: message.into(),
        }
    }
}
