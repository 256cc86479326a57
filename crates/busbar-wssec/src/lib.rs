//! WS-Security for busbar: the machinery of the `wsse_verify` and `wsse_secure` steps.
//!
//! Layout: `dom` is a small read-only XML tree over quick-xml that keeps original prefixes
//! and byte offsets; `c14n` is Exclusive XML Canonicalization 1.0 over that tree; `crypto`
//! holds the fixed algorithm profile (RSA via aws-lc-rs, digests and AES from RustCrypto);
//! `keys` loads keys and certificates and checks trust, with `dn` reading subject Names and
//! matching them against the configured signer subject. `verify` checks a secured message
//! and returns it plain; `secure` timestamps, signs and encrypts one. `soap`, `time`,
//! `cache`, `ns` and `error` are what those two share.

pub mod c14n;
pub mod cache;
pub mod crypto;
pub mod dn;
pub mod dom;
pub mod error;
pub mod keys;
pub mod ns;
pub mod secure;
pub mod soap;
pub mod time;
pub mod verify;

pub use error::{FaultKind, WsseError};
pub use secure::{EncryptSettings, KeyReference, SecureError, Secured, Securer, SignSettings};
pub use soap::Soap;
pub use verify::{Verified, Verifier, VerifyPolicy};
