//! busbar-awslc: the few AWS-LC operations busbar needs that aws-lc-rs's safe API does not
//! offer, called through `aws-lc-sys`, the bindings of the very AWS-LC build aws-lc-rs links
//! (one library in the binary, at one version).
//!
//! So far that is one operation: RSASSA-PKCS1-v1_5 signing with SHA-1, which the legacy
//! WS-Security profile (`http://www.w3.org/2000/09/xmldsig#rsa-sha1`) needs. aws-lc-rs verifies
//! such signatures but signs PKCS#1 v1.5 only with SHA-256 and longer digests.
//! [`RsaSha1Signer`] signs with AWS-LC's own `RSA_sign`, the code path behind aws-lc-rs's
//! SHA-256 signing: constant-time CRT exponentiation, blinding, and a check of the result
//! against the public key before it is returned.
//!
//! Threads: a signer is parsed once and shared (`Send + Sync`); see its documentation for why.
//!
//! ```
//! # fn demo(pkcs8_der: &[u8]) -> Result<(), busbar_awslc::Error> {
//! use busbar_awslc::RsaSha1Signer;
//!
//! let signer = RsaSha1Signer::from_pkcs8_der(pkcs8_der)?;
//! let signature = signer.sign_sha1(b"<ds:SignedInfo>...</ds:SignedInfo>")?;
//! assert_eq!(signature.len(), signer.signature_len());
//! # Ok(())
//! # }
//! ```

// The workspace denies `unsafe_code`. This crate is an audited exception, as busbar-libxml is:
// it is the boundary to AWS-LC's C API. The unsafe code is a handful of calls, each preceded by
// a `SAFETY:` comment (enforced below), behind a safe API that owns every pointer it holds.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::c_uint;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Once;

use aws_lc_sys as sys;
use sha1::Digest as _;

/// Length of a SHA-1 digest in bytes.
pub const SHA1_DIGEST_LEN: usize = 20;

/// The smallest RSA modulus accepted, in bits (as aws-lc-rs accepts for signing).
pub const MIN_BITS: usize = 2048;

/// The largest RSA modulus accepted, in bits: private-key operations grow with the cube of the
/// size, so a key from configuration must not be able to make every signature arbitrarily slow.
pub const MAX_BITS: usize = 8192;

/// Why a key was refused or a signature could not be made. Nothing more specific is passed on
/// from AWS-LC: its error queue is cleared whenever a call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("malformed RSA private key")]
    InvalidKey,
    #[error("not an RSA key")]
    NotRsa,
    #[error("RSA key shorter than 2048 bits")]
    KeyTooSmall,
    #[error("RSA key longer than 8192 bits")]
    KeyTooLarge,
    #[error("RSA signing failed")]
    Sign,
}

/// An RSA private key that makes RSASSA-PKCS1-v1_5 signatures with SHA-1.
///
/// Only complete keys are accepted: with the public exponent and the CRT parameters, so that
/// AWS-LC blinds every private-key operation and checks its result (it can do neither for a key
/// given as modulus and private exponent alone, which its parser otherwise lets through).
///
/// `Send + Sync`: one signer may sign from any number of threads at once. AWS-LC documents
/// `RSA_sign` as non-mutating for thread-safety purposes and allows concurrent use of an `RSA`
/// by non-mutating functions; the state a private-key operation does update internally (the
/// precomputed values, frozen on first use, and the cache of blinding values) is guarded by the
/// key's own lock. The quotations are at the `unsafe impl`s below.
pub struct RsaSha1Signer {
    /// Owned: one reference, released in `Drop`.
    rsa: NonNull<sys::RSA>,
    bits: usize,
    /// Modulus length in bytes, which is also the signature length.
    len: usize,
}

// SAFETY: the `RSA` is owned by this value alone (one reference, taken at construction) and has
// no thread affinity: AWS-LC's only per-thread state is the error queue, which this crate
// clears on the thread that made a failing call. The key may therefore be used and freed on
// any thread it is moved to.
unsafe impl Send for RsaSha1Signer {}

// SAFETY: through `&self` only `RSA_sign` runs on the key (`RSA_bits` and `RSA_size` run before
// the value is shared, `RSA_free` needs `&mut self` in `Drop`). include/openssl/rsa.h, under
// "Allocation and destruction": "A given object may be used concurrently on multiple threads by
// non-mutating functions, provided no other thread is concurrently calling a mutating
// function." Under "Signing / Verification", which declares `RSA_sign`: "These functions are
// considered non-mutating for thread-safety purposes and may be used concurrently." (Its
// `RSA *` parameter is not `const` because of that internal state: in
// crypto/fipsmodule/rsa/rsa_impl.c, `freeze_private_key` and `rsa_blinding_get` update it only
// under `rsa->lock`.)
unsafe impl Sync for RsaSha1Signer {}

impl Drop for RsaSha1Signer {
    fn drop(&mut self) {
        // SAFETY: `rsa` is a reference we own and nothing uses it after this; `&mut self` means
        // no signing is in progress on another thread.
        unsafe { sys::RSA_free(self.rsa.as_ptr()) }
    }
}

impl RsaSha1Signer {
    /// Parses a DER PKCS#8 `PrivateKeyInfo` (PEM label "PRIVATE KEY") holding an RSA key of
    /// [`MIN_BITS`] to [`MAX_BITS`] bits. Bytes after the structure are refused.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, Error> {
        init();
        let mut cbs = sys::CBS {
            data: std::ptr::null(),
            len: 0,
        };
        // SAFETY: CBS_init only records the pointer and length; `der` outlives `cbs`, which
        // does not leave this function.
        unsafe { sys::CBS_init(&mut cbs, der.as_ptr(), der.len()) };
        // SAFETY: `cbs` views `der`, readable for `der.len()` bytes. EVP_parse_private_key reads
        // within it, advances it past the structure, and returns a new EVP_PKEY owned by the
        // caller, or null.
        let pkey = unsafe { sys::EVP_parse_private_key(&mut cbs) };
        let pkey = Pkey(NonNull::new(pkey).ok_or_else(|| fail(Error::InvalidKey))?);
        // SAFETY: `cbs` still views `der`; CBS_len only reads its length field.
        if unsafe { sys::CBS_len(&cbs) } != 0 {
            return Err(Error::InvalidKey);
        }
        // SAFETY: `pkey` is a valid EVP_PKEY we own; EVP_PKEY_id only reads its type.
        if unsafe { sys::EVP_PKEY_id(pkey.0.as_ptr()) } != sys::EVP_PKEY_RSA {
            return Err(Error::NotRsa);
        }
        // SAFETY: `pkey` is a valid RSA EVP_PKEY. EVP_PKEY_get1_RSA returns the key with its
        // reference count raised (a reference we then own, freed by `from_owned_rsa` or the
        // signer's `Drop`), or null; `pkey`'s own reference is released when it drops.
        let rsa = unsafe { sys::EVP_PKEY_get1_RSA(pkey.0.as_ptr()) };
        let rsa = NonNull::new(rsa).ok_or_else(|| fail(Error::NotRsa))?;
        Self::from_owned_rsa(rsa)
    }

    /// Parses a DER PKCS#1 `RSAPrivateKey` (PEM label "RSA PRIVATE KEY") of [`MIN_BITS`] to
    /// [`MAX_BITS`] bits. Bytes after the structure are refused.
    pub fn from_pkcs1_der(der: &[u8]) -> Result<Self, Error> {
        init();
        // SAFETY: `der` is readable for `der.len()` bytes during the call, which does not keep
        // the pointer. It returns a new RSA owned by the caller (handed to `from_owned_rsa`), or
        // null; it refuses trailing bytes itself.
        let rsa = unsafe { sys::RSA_private_key_from_bytes(der.as_ptr(), der.len()) };
        let rsa = NonNull::new(rsa).ok_or_else(|| fail(Error::InvalidKey))?;
        Self::from_owned_rsa(rsa)
    }

    /// Takes ownership of one reference to `rsa` (released on every path) and checks that it is
    /// a complete private key of an acceptable size.
    fn from_owned_rsa(rsa: NonNull<sys::RSA>) -> Result<Self, Error> {
        let mut signer = RsaSha1Signer {
            rsa,
            bits: 0,
            len: 0,
        };
        let key = signer.rsa.as_ptr();
        // SAFETY: `key` is a valid RSA we own and nothing else uses yet. These getters only
        // read: a flag word and pointers to the key's own components, which are not kept.
        let complete = unsafe {
            sys::RSA_test_flags(
                key,
                sys::RSA_FLAG_NO_BLINDING | sys::RSA_FLAG_NO_PUBLIC_EXPONENT,
            ) == 0
                && !sys::RSA_get0_d(key).is_null()
                && !sys::RSA_get0_e(key).is_null()
                && !sys::RSA_get0_p(key).is_null()
                && !sys::RSA_get0_q(key).is_null()
                && !sys::RSA_get0_dmp1(key).is_null()
                && !sys::RSA_get0_dmq1(key).is_null()
                && !sys::RSA_get0_iqmp(key).is_null()
        };
        if !complete {
            return Err(Error::InvalidKey);
        }
        // SAFETY: as above; RSA_bits and RSA_size read the modulus size.
        let (bits, len) = unsafe { (sys::RSA_bits(key), sys::RSA_size(key)) };
        let bits = usize::try_from(bits).map_err(|_| Error::KeyTooLarge)?;
        if bits < MIN_BITS {
            return Err(Error::KeyTooSmall);
        }
        if bits > MAX_BITS {
            return Err(Error::KeyTooLarge);
        }
        signer.bits = bits;
        signer.len = usize::try_from(len).map_err(|_| Error::KeyTooLarge)?;
        Ok(signer)
    }

    /// Modulus size in bits.
    pub fn bits(&self) -> usize {
        self.bits
    }

    /// Length of every signature in bytes: the modulus length.
    pub fn signature_len(&self) -> usize {
        self.len
    }

    /// RSASSA-PKCS1-v1_5 signature with SHA-1 over `msg`.
    pub fn sign_sha1(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let digest: [u8; SHA1_DIGEST_LEN] = sha1::Sha1::digest(msg).into();
        self.sign_sha1_digest(&digest)
    }

    /// RSASSA-PKCS1-v1_5 signature over a SHA-1 digest the caller computed: AWS-LC prefixes
    /// the SHA-1 `DigestInfo`, pads, and runs the blinded, result-checked private-key operation.
    pub fn sign_sha1_digest(&self, digest: &[u8; SHA1_DIGEST_LEN]) -> Result<Vec<u8>, Error> {
        let mut signature = vec![0u8; self.len];
        let mut written: c_uint = 0;
        // SAFETY: the key is valid for the borrow of `self`, and concurrent calls are allowed
        // (see `unsafe impl Sync`). `digest` is readable for the 20 bytes passed, as SHA-1
        // requires. rsa.h: RSA_sign "writes, at most, |RSA_size(rsa)| bytes to |out|", and
        // `signature` holds exactly RSA_size bytes (`self.len`); `written` receives the count.
        // Neither pointer is kept after the call.
        let ok = unsafe {
            sys::RSA_sign(
                sys::NID_sha1,
                digest.as_ptr(),
                digest.len(),
                signature.as_mut_ptr(),
                &mut written,
                self.rsa.as_ptr(),
            )
        };
        if ok != 1 {
            return Err(fail(Error::Sign));
        }
        // A PKCS#1 v1.5 signature is always as long as the modulus.
        if usize::try_from(written).ok() != Some(self.len) {
            return Err(Error::Sign);
        }
        Ok(signature)
    }
}

impl fmt::Debug for RsaSha1Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RsaSha1Signer")
            .field("bits", &self.bits)
            .finish_non_exhaustive()
    }
}

/// An owned EVP_PKEY reference, released on drop.
struct Pkey(NonNull<sys::EVP_PKEY>);

impl Drop for Pkey {
    fn drop(&mut self) {
        // SAFETY: we own this reference and nothing uses it afterwards; an RSA taken from it
        // with EVP_PKEY_get1_RSA holds its own reference and stays valid.
        unsafe { sys::EVP_PKEY_free(self.0.as_ptr()) }
    }
}

/// AWS-LC initialises itself from a static constructor unless built without one; this makes
/// sure either way, as aws-lc-rs does before its first call.
fn init() {
    static INIT: Once = Once::new();
    // SAFETY: crypto.h: CRYPTO_library_init "is safe to call this function multiple times and
    // concurrently from multiple threads"; it takes no arguments.
    INIT.call_once(|| unsafe { sys::CRYPTO_library_init() });
}

/// Clears what a failed call left on this thread's AWS-LC error queue, so that it cannot be
/// mistaken later for the cause of an unrelated failure, and returns `err`.
fn fail(err: Error) -> Error {
    // SAFETY: ERR_clear_error takes no arguments and only touches the calling thread's queue.
    unsafe { sys::ERR_clear_error() };
    err
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn signer_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<RsaSha1Signer>();
    }

    #[test]
    fn garbage_is_refused_and_leaves_no_error_behind() {
        for der in [&b""[..], b"not a key", &[0x30, 0x03, 0x02, 0x01, 0x00]] {
            assert_eq!(
                RsaSha1Signer::from_pkcs8_der(der).unwrap_err(),
                Error::InvalidKey
            );
            assert_eq!(
                RsaSha1Signer::from_pkcs1_der(der).unwrap_err(),
                Error::InvalidKey
            );
            // SAFETY: ERR_peek_error only reads this thread's error queue.
            assert_eq!(unsafe { sys::ERR_peek_error() }, 0);
        }
    }
}
