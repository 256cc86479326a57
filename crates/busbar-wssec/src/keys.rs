//! Keys, certificates and trust: loading an identity from PKCS#12 or PEM, parsing X.509
//! certificates once into what WS-Security looks up (SKI, thumbprint, issuer and serial), and
//! deciding whether a sender's certificate chains to a configured anchor.
//!
//! Only RSA keys of 2048 to 8192 bits are accepted, in line with [`crate::crypto`].

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha1::Digest as _;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::{
    Oid, OID_PKCS1_RSAENCRYPTION, OID_PKCS1_SHA1WITHRSA, OID_PKCS1_SHA256WITHRSA,
    OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER, OID_X509_EXT_BASIC_CONSTRAINTS,
    OID_X509_EXT_EXTENDED_KEY_USAGE, OID_X509_EXT_KEY_USAGE, OID_X509_EXT_SUBJECT_ALT_NAME,
    OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
};
use x509_parser::pem::Pem;

use crate::crypto::{CryptoError, PrivateKey, PublicKey, SignatureAlg};
use crate::dn::{read_name, Attribute};
pub use crate::dn::{DnRule, SubjectRule};

/// Why a key or certificate could not be loaded. File-related variants name the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{}: unreadable: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: wrong password or corrupt PKCS#12", path.display())]
    Pkcs12 { path: PathBuf },
    #[error("{}: no private key", path.display())]
    NoPrivateKey { path: PathBuf },
    #[error("{}: no certificate", path.display())]
    NoCertificate { path: PathBuf },
    /// The key itself is unusable: not RSA, too short, malformed.
    #[error("{}: {source}", path.display())]
    Key { path: PathBuf, source: CryptoError },
    #[error("{}: private key does not match the certificate in {}", key_path.display(), cert_path.display())]
    KeyMismatch {
        key_path: PathBuf,
        cert_path: PathBuf,
    },
    #[error("{}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    /// A certificate given as bytes rather than read from a file.
    #[error("invalid certificate: {reason}")]
    Certificate { reason: String },
}

/// An X.509 certificate with an RSA key, parsed once.
#[derive(Clone)]
pub struct Certificate(Arc<CertificateInner>);

struct CertificateInner {
    der: Vec<u8>,
    /// SHA-256 of `der`: the certificate's key in a [`TrustStore`]'s memory.
    sha256: [u8; 32],
    subject: String,
    subject_attrs: Vec<Attribute>,
    subject_rfc4514: String,
    issuer: String,
    subject_der: Vec<u8>,
    issuer_der: Vec<u8>,
    serial: String,
    not_before: i64,
    not_after: i64,
    ski: Vec<u8>,
    thumbprint: [u8; 20],
    public_key: PublicKey,
    is_ca: bool,
    /// keyUsage is absent or includes keyCertSign.
    key_cert_sign: bool,
    /// keyUsage is absent or includes digitalSignature or nonRepudiation.
    key_usage_signs: bool,
    /// extendedKeyUsage is absent or names a purpose that covers signing messages.
    purpose_signs: bool,
    /// A critical extension this code does not act on; RFC 5280 then forbids relying on it.
    unhandled_critical: bool,
    tbs: Vec<u8>,
    /// None for signature algorithms outside the profile: such a certificate can be a leaf or
    /// an anchor, but never be shown to be signed by anything.
    signature_alg: Option<SignatureAlg>,
    signature: Vec<u8>,
}

impl Certificate {
    pub fn from_der(der: &[u8]) -> Result<Self, KeyError> {
        let bad = |reason: &str| KeyError::Certificate {
            reason: reason.to_string(),
        };
        let (rest, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| bad(&format!("not a DER X.509 certificate ({e})")))?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes after the certificate"));
        }
        let tbs = &cert.tbs_certificate;
        let spki = tbs.public_key();
        if spki.algorithm.algorithm != OID_PKCS1_RSAENCRYPTION {
            return Err(bad("not an RSA key"));
        }
        let public_key = PublicKey::from_spki_der(spki.raw).map_err(|e| bad(&e.to_string()))?;
        let ski = match tbs.get_extension_unique(&OID_X509_EXT_SUBJECT_KEY_IDENTIFIER) {
            Ok(Some(ext)) => match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => id.0.to_vec(),
                _ => return Err(bad("malformed subjectKeyIdentifier")),
            },
            Ok(None) => sha1::Sha1::digest(&spki.subject_public_key.data).to_vec(),
            Err(_) => return Err(bad("duplicate subjectKeyIdentifier")),
        };
        let (key_cert_sign, key_usage_signs) = match tbs.key_usage() {
            Ok(Some(ku)) => (
                ku.value.key_cert_sign(),
                ku.value.digital_signature() || ku.value.non_repudiation(),
            ),
            Ok(None) => (true, true),
            Err(_) => (false, false),
        };
        let purpose_signs = match tbs.extended_key_usage() {
            Ok(Some(eku)) => {
                let eku = eku.value;
                eku.any
                    || eku.client_auth
                    || eku.server_auth
                    || eku
                        .other
                        .iter()
                        .any(|oid| oid.to_id_string() == OID_KP_DOCUMENT_SIGNING)
            }
            Ok(None) => true,
            Err(_) => false,
        };
        let outer_alg = &cert.signature_algorithm.algorithm;
        let signature_alg = if *outer_alg != tbs.signature.algorithm {
            None
        } else if *outer_alg == OID_PKCS1_SHA256WITHRSA {
            Some(SignatureAlg::RsaSha256)
        } else if *outer_alg == OID_PKCS1_SHA1WITHRSA {
            Some(SignatureAlg::RsaSha1)
        } else {
            None
        };
        let thumbprint: [u8; 20] = sha1::Sha1::digest(der).into();
        let (subject_attrs, subject_rfc4514) = read_name(tbs.subject());
        Ok(Certificate(Arc::new(CertificateInner {
            der: der.to_vec(),
            sha256: sha2::Sha256::digest(der).into(),
            subject: tbs.subject().to_string(),
            subject_attrs,
            subject_rfc4514,
            issuer: tbs.issuer().to_string(),
            subject_der: tbs.subject().as_raw().to_vec(),
            issuer_der: tbs.issuer().as_raw().to_vec(),
            serial: tbs.serial.to_str_radix(10),
            not_before: tbs.validity().not_before.timestamp(),
            not_after: tbs.validity().not_after.timestamp(),
            ski,
            thumbprint,
            public_key,
            is_ca: tbs.is_ca(),
            key_cert_sign,
            key_usage_signs,
            purpose_signs,
            unhandled_critical: has_unhandled_critical(&cert),
            tbs: tbs.as_ref().to_vec(),
            signature_alg,
            signature: cert.signature_value.data.to_vec(),
        })))
    }

    pub fn der(&self) -> &[u8] {
        &self.0.der
    }

    /// The subject as x509-parser renders it, RFC 4514 style in encoding order, e.g.
    /// "C=US, O=Example, CN=client".
    pub fn subject(&self) -> &str {
        &self.0.subject
    }

    /// The subject's attributes as parsed, in encoding order (what [`crate::dn::DnRule`]
    /// compares).
    pub fn subject_attributes(&self) -> &[Attribute] {
        &self.0.subject_attrs
    }

    /// The subject in RFC 4514 form, e.g. `CN=client,O=busbar test` (what
    /// [`SubjectRule::Pattern`] matches).
    pub fn subject_rfc4514(&self) -> &str {
        &self.0.subject_rfc4514
    }

    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }

    /// The issuer Name exactly as encoded, for byte comparisons.
    pub fn issuer_der(&self) -> &[u8] {
        &self.0.issuer_der
    }

    /// The subject Name exactly as encoded, for byte comparisons.
    pub fn subject_der(&self) -> &[u8] {
        &self.0.subject_der
    }

    /// The serial number in decimal, as `ds:X509SerialNumber` wants it.
    pub fn serial_decimal(&self) -> String {
        self.0.serial.clone()
    }

    /// Start of validity, in unix seconds.
    pub fn not_before(&self) -> i64 {
        self.0.not_before
    }

    /// End of validity, in unix seconds.
    pub fn not_after(&self) -> i64 {
        self.0.not_after
    }

    /// The subjectKeyIdentifier extension or, when it is absent, the SHA-1 of the
    /// subjectPublicKey bits (RFC 5280 method 1), which is what WSS4J sends then.
    pub fn subject_key_identifier(&self) -> Vec<u8> {
        self.0.ski.clone()
    }

    /// SHA-1 of the whole DER certificate.
    pub fn thumbprint_sha1(&self) -> [u8; 20] {
        self.0.thumbprint
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.0.public_key
    }

    /// basicConstraints says CA:TRUE.
    pub fn is_ca(&self) -> bool {
        self.0.is_ca
    }

    fn may_issue(&self) -> bool {
        self.0.is_ca && self.0.key_cert_sign && !self.0.unhandled_critical
    }

    /// Whether the certificate itself lets its key sign a message (RFC 5280 §4.2): no critical
    /// extension left unprocessed, digitalSignature or nonRepudiation when keyUsage is present,
    /// and a purpose that covers signing messages when extendedKeyUsage is present.
    fn may_sign(&self) -> Result<(), TrustError> {
        if self.0.unhandled_critical {
            Err(TrustError::UnhandledCritical)
        } else if !self.0.key_usage_signs {
            Err(TrustError::KeyUsage)
        } else if !self.0.purpose_signs {
            Err(TrustError::ExtendedKeyUsage)
        } else {
            Ok(())
        }
    }

    fn valid_at(&self, now: i64) -> Result<(), TrustError> {
        if now < self.0.not_before {
            Err(TrustError::NotYetValid)
        } else if now > self.0.not_after {
            Err(TrustError::Expired)
        } else {
            Ok(())
        }
    }

    /// Whether `issuer` issued this certificate: its subject is exactly our issuer Name and
    /// its key verifies our signature (RSA with SHA-256 or SHA-1).
    pub fn is_signed_by(&self, issuer: &Certificate) -> bool {
        if self.0.issuer_der != issuer.0.subject_der {
            return false;
        }
        match self.0.signature_alg {
            Some(alg) => issuer
                .0
                .public_key
                .verify(alg, &self.0.tbs, &self.0.signature),
            None => false,
        }
    }
}

/// Extensions whose meaning either does not restrict trust here or is checked above. Anything
/// else marked critical (name constraints, policy constraints...) would need enforcing.
const HANDLED_EXTENSIONS: [&Oid<'static>; 6] = [
    &OID_X509_EXT_BASIC_CONSTRAINTS,
    &OID_X509_EXT_KEY_USAGE,
    &OID_X509_EXT_EXTENDED_KEY_USAGE,
    &OID_X509_EXT_SUBJECT_ALT_NAME,
    &OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
    &OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER,
];

/// id-kp-documentSigning (RFC 9336), the one registered purpose for signing documents.
const OID_KP_DOCUMENT_SIGNING: &str = "1.3.6.1.5.5.7.3.36";

fn has_unhandled_critical(cert: &X509Certificate<'_>) -> bool {
    cert.extensions()
        .iter()
        .any(|ext| ext.critical && !HANDLED_EXTENSIONS.contains(&&ext.oid))
}

impl PartialEq for Certificate {
    fn eq(&self, other: &Self) -> bool {
        self.0.der == other.0.der
    }
}

impl Eq for Certificate {}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("subject", &self.0.subject)
            .field("issuer", &self.0.issuer)
            .field("serial", &self.0.serial)
            .finish_non_exhaustive()
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, KeyError> {
    busbar_core::file::read(path).map_err(|source| KeyError::Unreadable {
        path: path.to_path_buf(),
        source,
    })
}

fn pem_blocks(path: &Path, data: &[u8]) -> Result<Vec<Pem>, KeyError> {
    Pem::iter_from_buffer(data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| KeyError::Malformed {
            path: path.to_path_buf(),
            reason: format!("bad PEM: {e}"),
        })
}

fn certificates_from_pem(path: &Path, blocks: &[Pem]) -> Result<Vec<Certificate>, KeyError> {
    blocks
        .iter()
        .filter(|b| b.label == "CERTIFICATE")
        .enumerate()
        .map(|(i, b)| {
            Certificate::from_der(&b.contents).map_err(|e| KeyError::Malformed {
                path: path.to_path_buf(),
                reason: match e {
                    KeyError::Certificate { reason } => format!("certificate {}: {reason}", i + 1),
                    other => other.to_string(),
                },
            })
        })
        .collect()
}

/// Every "CERTIFICATE" block of a PEM file, in file order; other blocks are skipped.
pub fn load_pem_certificates(path: &Path) -> Result<Vec<Certificate>, KeyError> {
    let data = read_file(path)?;
    let certs = certificates_from_pem(path, &pem_blocks(path, &data)?)?;
    if certs.is_empty() {
        return Err(KeyError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// A private key with its certificate and the rest of the chain the key's file carried.
pub struct Identity {
    pub key: PrivateKey,
    pub cert: Certificate,
    pub chain: Vec<Certificate>,
}

impl Identity {
    /// Loads the first private key and its certificate chain from a PKCS#12 file: OpenSSL 3's
    /// default (PBES2 with AES-256-CBC and PBKDF2, HMAC-SHA256 MAC) and the legacy PBES1
    /// schemes (3DES, RC2) alike.
    pub fn from_pkcs12(path: &Path, password: &str) -> Result<Self, KeyError> {
        let data = read_file(path)?;
        let store = p12_keystore::KeyStore::from_pkcs12(
            &data,
            password,
            p12_keystore::Pkcs12ImportPolicy::Strict,
        )
        .map_err(|_| KeyError::Pkcs12 {
            path: path.to_path_buf(),
        })?;
        let (_, chain) = store
            .private_key_chain()
            .ok_or_else(|| KeyError::NoPrivateKey {
                path: path.to_path_buf(),
            })?;
        let key =
            PrivateKey::from_pkcs8_der(chain.key().as_der()).map_err(|source| KeyError::Key {
                path: path.to_path_buf(),
                source,
            })?;
        let mut certs = chain
            .certs()
            .iter()
            .map(|c| {
                Certificate::from_der(c.as_der()).map_err(|e| KeyError::Malformed {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        let cert = certs.next().ok_or_else(|| KeyError::NoCertificate {
            path: path.to_path_buf(),
        })?;
        if key.public_key() != *cert.public_key() {
            return Err(KeyError::KeyMismatch {
                key_path: path.to_path_buf(),
                cert_path: path.to_path_buf(),
            });
        }
        Ok(Identity {
            key,
            cert,
            chain: certs.collect(),
        })
    }

    /// Loads an unencrypted PEM private key (PKCS#8 "PRIVATE KEY" or PKCS#1 "RSA PRIVATE KEY")
    /// and a PEM certificate file whose first certificate must hold the matching public key;
    /// further certificates there form the chain.
    pub fn from_pem(key_path: &Path, cert_path: &Path) -> Result<Self, KeyError> {
        let key_data = read_file(key_path)?;
        let blocks = pem_blocks(key_path, &key_data)?;
        let parsed = blocks.iter().find_map(|b| match b.label.as_str() {
            "PRIVATE KEY" => Some(PrivateKey::from_pkcs8_der(&b.contents)),
            "RSA PRIVATE KEY" => Some(PrivateKey::from_pkcs1_der(&b.contents)),
            _ => None,
        });
        let key = match parsed {
            Some(Ok(key)) => key,
            Some(Err(source)) => {
                return Err(KeyError::Key {
                    path: key_path.to_path_buf(),
                    source,
                })
            }
            None if blocks.iter().any(|b| b.label == "ENCRYPTED PRIVATE KEY") => {
                return Err(KeyError::Malformed {
                    path: key_path.to_path_buf(),
                    reason: "encrypted PEM keys are not supported; use PKCS#12".to_string(),
                })
            }
            None => {
                return Err(KeyError::NoPrivateKey {
                    path: key_path.to_path_buf(),
                })
            }
        };
        let mut certs = load_pem_certificates(cert_path)?.into_iter();
        let cert = certs.next().ok_or_else(|| KeyError::NoCertificate {
            path: cert_path.to_path_buf(),
        })?;
        if key.public_key() != *cert.public_key() {
            return Err(KeyError::KeyMismatch {
                key_path: key_path.to_path_buf(),
                cert_path: cert_path.to_path_buf(),
            });
        }
        Ok(Identity {
            key,
            cert,
            chain: certs.collect(),
        })
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("key", &self.key)
            .field("cert", &self.cert)
            .field("chain", &self.chain)
            .finish()
    }
}

/// Why a certificate is not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("certificate expired")]
    Expired,
    #[error("certificate not yet valid")]
    NotYetValid,
    #[error("certificate does not chain to a trusted anchor")]
    Untrusted,
    #[error("certificate subject does not match the required subject")]
    SubjectMismatch,
    #[error("certificate has a critical extension that is not processed here")]
    UnhandledCritical,
    #[error("certificate keyUsage allows neither digitalSignature nor nonRepudiation")]
    KeyUsage,
    #[error(
        "certificate extendedKeyUsage names no purpose for signing messages \
         (anyExtendedKeyUsage, clientAuth, serverAuth or documentSigning)"
    )]
    ExtendedKeyUsage,
}

/// How many certificates above the leaf a chain may have.
const MAX_CHAIN_DEPTH: usize = 8;
/// Bound on remembered certificates; the map is simply emptied when it fills up.
const CACHE_CAPACITY: usize = 10_000;

/// The period during which a successfully checked chain stays valid as a whole.
#[derive(Debug, Clone, Copy)]
struct Window {
    not_before: i64,
    not_after: i64,
}

impl Window {
    fn of(cert: &Certificate) -> Self {
        Window {
            not_before: cert.not_before(),
            not_after: cert.not_after(),
        }
    }

    fn narrow(&mut self, cert: &Certificate) {
        self.not_before = self.not_before.max(cert.not_before());
        self.not_after = self.not_after.min(cert.not_after());
    }

    fn contains(&self, now: i64) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// Trust anchors, an optional subject constraint, and a cache of certificates already found
/// trustworthy.
///
/// Anchors issue certificates only when they are CAs (basicConstraints CA:TRUE, keyCertSign if
/// keyUsage is present); any anchor, CA or not, is trusted as itself. Path length and name
/// constraints are not evaluated: a certificate with any critical extension other than basic
/// constraints, key usage, extended key usage, subject alternative name and key identifiers
/// cannot issue, nor sign a message. The certificate checked is the signer's: besides its
/// chain, its own keyUsage and extendedKeyUsage must allow signing (see [`TrustError`]).
pub struct TrustStore {
    anchors: Vec<Certificate>,
    subject: Option<SubjectRule>,
    /// SHA-256 of a trusted certificate's DER → the certificate, and when its chain is valid.
    cache: RwLock<HashMap<[u8; 32], Trusted>>,
}

/// A certificate a [`TrustStore`] accepted, kept parsed.
struct Trusted {
    cert: Certificate,
    window: Window,
}

impl TrustStore {
    /// Trust in `anchors`, with `subject` searched anywhere in [`Certificate::subject`]
    /// ([`SubjectRule::Search`]: unanchored, so `CN=client` also accepts `CN=client2`).
    /// Prefer [`TrustStore::with_subject`] and a [`SubjectRule::Dn`].
    pub fn new(anchors: Vec<Certificate>, subject: Option<regex::Regex>) -> Self {
        TrustStore::with_subject(anchors, subject.map(SubjectRule::Search))
    }

    /// Trust in `anchors`, for signers whose subject satisfies `subject` when one is given.
    pub fn with_subject(anchors: Vec<Certificate>, subject: Option<SubjectRule>) -> Self {
        TrustStore {
            anchors,
            subject,
            cache: RwLock::new(HashMap::new()),
        }
    }

    /// Accepts `cert` as a message's signer if it is valid at `now` (unix seconds), satisfies
    /// the [`SubjectRule`] when one is set, either is an anchor or chains to one through
    /// `intermediates`, every link valid at `now` and verified by exact issuer/subject Name
    /// bytes and signature, and its own extensions let it sign (no unprocessed critical
    /// extension; keyUsage and extendedKeyUsage, when present, allow signing).
    ///
    /// A certificate once accepted is remembered, parsed, with the validity window of its whole
    /// chain, so repeating it costs a lookup, intermediates or not.
    pub fn check(
        &self,
        cert: &Certificate,
        intermediates: &[Certificate],
        now: i64,
    ) -> Result<(), TrustError> {
        let key = cert.0.sha256;
        {
            let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
            if cache.get(&key).is_some_and(|t| t.window.contains(now)) {
                return Ok(());
            }
        }
        let window = self.verify(cert, intermediates, now)?;
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(
            key,
            Trusted {
                cert: cert.clone(),
                window,
            },
        );
        Ok(())
    }

    /// The certificate this store accepted earlier whose DER is exactly `der`, as it was parsed
    /// then (a client signs every message with the same certificate: it is parsed once).
    /// Whether it is trusted at a given time is still for [`TrustStore::check`] to say.
    pub fn accepted(&self, der: &[u8]) -> Option<Certificate> {
        let key: [u8; 32] = sha2::Sha256::digest(der).into();
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        cache
            .get(&key)
            .filter(|t| t.cert.der() == der)
            .map(|t| t.cert.clone())
    }

    /// How many certificates are remembered as trusted.
    pub fn cached_len(&self) -> usize {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn verify(
        &self,
        cert: &Certificate,
        intermediates: &[Certificate],
        now: i64,
    ) -> Result<Window, TrustError> {
        let window = self.chain(cert, intermediates, now)?;
        // Asked of a certificate only once it is trusted: an untrusted one is refused as
        // untrusted, whatever it says it may do.
        cert.may_sign()?;
        Ok(window)
    }

    /// The validity window of `cert`'s path to an anchor.
    fn chain(
        &self,
        cert: &Certificate,
        intermediates: &[Certificate],
        now: i64,
    ) -> Result<Window, TrustError> {
        cert.valid_at(now)?;
        if let Some(rule) = &self.subject {
            if !rule.matches(cert) {
                return Err(TrustError::SubjectMismatch);
            }
        }
        let mut window = Window::of(cert);
        if self.anchors.iter().any(|a| a.der() == cert.der()) {
            return Ok(window);
        }
        let mut used = vec![false; intermediates.len()];
        let mut current = cert;
        // An issuer that would do but for its dates makes a better answer than "untrusted".
        let mut time_error = None;
        for _ in 0..=MAX_CHAIN_DEPTH {
            let mut usable = |issuer: &Certificate| -> bool {
                if !issuer.may_issue() || !current.is_signed_by(issuer) {
                    return false;
                }
                match issuer.valid_at(now) {
                    Ok(()) => true,
                    Err(e) => {
                        time_error = Some(e);
                        false
                    }
                }
            };
            if let Some(anchor) = self.anchors.iter().find(|a| usable(a)) {
                window.narrow(anchor);
                return Ok(window);
            }
            let next = intermediates
                .iter()
                .enumerate()
                .find(|(i, c)| !used[*i] && usable(c));
            match next {
                Some((i, issuer)) => {
                    used[i] = true;
                    window.narrow(issuer);
                    current = issuer;
                }
                None => break,
            }
        }
        Err(time_error.unwrap_or(TrustError::Untrusted))
    }
}

impl fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustStore")
            .field("anchors", &self.anchors)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}
