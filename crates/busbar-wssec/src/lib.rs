//! WS-Security for busbar: the `wsse_verify` and `wsse_secure` steps' machinery.
//!
//! Layout: `dom` is a small read-only XML tree over quick-xml that keeps original prefixes
//! and byte offsets; `c14n` is Exclusive XML Canonicalization 1.0 over that tree; `crypto`
//! holds the fixed algorithm profile (RSA via aws-lc-rs, digests and AES from RustCrypto);
//! `keys` loads keys and certificates and checks trust.

pub mod c14n;
pub mod crypto;
pub mod dom;
pub mod keys;
