//! What a failed check tells the client (a fault code and its standard, generic string) and
//! what it tells the log (the detail).

/// The WS-Security fault codes (OASIS WSS 1.1 §12) plus the two SOAP-level ones a security
/// processor raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `wsse:UnsupportedSecurityToken`.
    UnsupportedSecurityToken,
    /// `wsse:UnsupportedAlgorithm`.
    UnsupportedAlgorithm,
    /// `wsse:InvalidSecurity`.
    InvalidSecurity,
    /// `wsse:InvalidSecurityToken`.
    InvalidSecurityToken,
    /// `wsse:FailedAuthentication`.
    FailedAuthentication,
    /// `wsse:FailedCheck`.
    FailedCheck,
    /// `wsse:SecurityTokenUnavailable`.
    SecurityTokenUnavailable,
    /// `wsu:MessageExpired`.
    MessageExpired,
    /// The envelope is not SOAP 1.1 or 1.2, or not the version the Content-Type announced.
    VersionMismatch,
    /// A header block addressed to this node with `mustUnderstand` that it does not know.
    MustUnderstand,
}

impl FaultKind {
    /// The fault code's namespace prefix, namespace and local name; `None` for the SOAP codes.
    pub fn qname(self) -> Option<(&'static str, &'static str, &'static str)> {
        let wsse = |l| Some(("wsse", crate::ns::WSSE, l));
        match self {
            FaultKind::UnsupportedSecurityToken => wsse("UnsupportedSecurityToken"),
            FaultKind::UnsupportedAlgorithm => wsse("UnsupportedAlgorithm"),
            FaultKind::InvalidSecurity => wsse("InvalidSecurity"),
            FaultKind::InvalidSecurityToken => wsse("InvalidSecurityToken"),
            FaultKind::FailedAuthentication => wsse("FailedAuthentication"),
            FaultKind::FailedCheck => wsse("FailedCheck"),
            FaultKind::SecurityTokenUnavailable => wsse("SecurityTokenUnavailable"),
            FaultKind::MessageExpired => Some(("wsu", crate::ns::WSU, "MessageExpired")),
            FaultKind::VersionMismatch | FaultKind::MustUnderstand => None,
        }
    }

    /// The generic text clients see: the standard fault strings, so a fault tells an
    /// attacker nothing the code does not.
    pub fn faultstring(self) -> &'static str {
        match self {
            FaultKind::UnsupportedSecurityToken => "An unsupported token was provided",
            FaultKind::UnsupportedAlgorithm => {
                "An unsupported signature or encryption algorithm was used"
            }
            FaultKind::InvalidSecurity => "An error was discovered processing the Security header",
            FaultKind::InvalidSecurityToken => "An invalid security token was provided",
            FaultKind::FailedAuthentication => {
                "The security token could not be authenticated or authorized"
            }
            FaultKind::FailedCheck => "The signature or decryption was invalid",
            FaultKind::SecurityTokenUnavailable => {
                "Referenced security token could not be retrieved"
            }
            FaultKind::MessageExpired => "The message has expired",
            FaultKind::VersionMismatch => "The SOAP envelope version is not supported",
            FaultKind::MustUnderstand => "A mandatory header block was not understood",
        }
    }
}

/// A failed WS-Security check.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind:?}: {detail}")]
pub struct WsseError {
    /// The fault clients get.
    pub kind: FaultKind,
    /// What exactly failed: for the log only.
    pub detail: String,
}

impl WsseError {
    /// A new error.
    pub fn new(kind: FaultKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }
}

/// Shorthand for building an `Err`.
pub(crate) fn fail<T>(kind: FaultKind, detail: impl Into<String>) -> Result<T, WsseError> {
    Err(WsseError::new(kind, detail))
}
