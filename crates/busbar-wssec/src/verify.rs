//! Receiving: checks a secured SOAP message and returns it plain.
//!
//! The order is fixed (docs/config.md, `wsse_verify`): limits and envelope, the one Security
//! header for us; then all the received message proves by itself: the signature (its
//! references' number and shape, the signer's trust, its value over SignedInfo, and only then
//! the digests of the signed header elements), the coverage policy, freshness and replay; then
//! decryption (spliced back as bytes, then the message is parsed again) and the digests of the
//! Body's references; last the header's removal. Every failure is a [`WsseError`] whose fault
//! code is all a client learns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use sha2::Digest as _;

use crate::c14n;
use crate::cache::{KeyCache, ReplayCache};
use crate::crypto::{self, BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use crate::dom::{Boundary, Document, Limits, NodeId, NodeKind};
use crate::error::{fail, FaultKind, WsseError};
use crate::keys::{Certificate, Identity, TrustStore};
use crate::ns;
use crate::soap::{child, ct_eq, decode_base64, normalize_dn, only_child, Envelope, Soap};
use crate::time::{now_millis, parse_datetime};

/// What a request must carry, and what is accepted.
#[derive(Debug)]
pub struct VerifyPolicy {
    /// A timestamp is required.
    pub require_timestamp: bool,
    /// A signature covering the Body is required.
    pub require_signature: bool,
    /// The Body's content must have been encrypted.
    pub require_encryption: bool,
    /// A UsernameToken is required.
    pub require_username_token: bool,
    /// Signers must chain to these anchors.
    pub trust: Option<TrustStore>,
    /// Signer certificates requests may refer to without carrying them.
    pub known_certs: Vec<Certificate>,
    /// The service's own key, for decryption.
    pub decrypt: Option<Arc<Identity>>,
    /// Clock skew tolerated, in milliseconds.
    pub max_skew_ms: i64,
    /// Oldest `Created` accepted, in milliseconds.
    pub max_age_ms: i64,
    /// Refuse timestamps without `Expires`.
    pub require_expires: bool,
    /// Accept RSA-1.5, RSA-SHA1 and SHA-1 digests.
    pub legacy: bool,
    /// Remove our Security header from the forwarded message.
    pub remove_header: bool,
    /// UsernameToken users: name → password.
    pub users: HashMap<String, String>,
    /// Parser limits.
    pub limits: Limits,
}

/// A verified message.
#[derive(Debug)]
pub struct Verified {
    /// The message to forward: decrypted, and without our Security header when so configured.
    pub message: Vec<u8>,
    /// Its SOAP version.
    pub soap: Soap,
    /// The certificate whose signature was verified.
    pub signer: Option<Arc<Certificate>>,
    /// The authenticated UsernameToken user.
    pub username: Option<String>,
}

/// References a SignedInfo may hold unless [`Verifier::with_max_references`] says otherwise.
/// A message signs its Body, its Timestamp and perhaps a token and a few addressing headers;
/// each reference costs a canonicalization and a digest of what it names.
pub const DEFAULT_MAX_REFERENCES: usize = 16;

/// A built `wsse_verify`: the policy plus its caches.
#[derive(Debug)]
pub struct Verifier {
    policy: VerifyPolicy,
    replay: Option<Arc<ReplayCache>>,
    session_keys: Option<KeyCache>,
    max_references: usize,
}

/// EncryptedKeys one Security header may hold: each costs an RSA private-key operation.
pub const MAX_ENCRYPTED_KEYS: usize = 4;

/// What a signature proved before anything was decrypted: its signer (trusted) and value,
/// the header elements whose digests matched (the Timestamp among them), whether it names the
/// Body, and the references to the Body and into it, whose digests wait for the plain Body.
struct SignatureCheck {
    cert: Arc<Certificate>,
    value: Vec<u8>,
    covered: Vec<NodeId>,
    covers_body: bool,
    late: Vec<LateReference>,
}

/// One reference of a SignedInfo, read but not yet digested; `target` is `None` when the
/// received message has no element of its id (it may be in the encrypted part).
struct ReferenceCheck<'d> {
    uri: &'d str,
    target: Option<NodeId>,
    prefixes: Vec<String>,
    digest_alg: DigestAlg,
    expected: Vec<u8>,
}

/// A reference to the Body or into it, digested once the Body is plain.
struct LateReference {
    uri: String,
    prefixes: Vec<String>,
    digest_alg: DigestAlg,
    expected: Vec<u8>,
}

/// An EncryptedKey with everything about it checked, not yet unwrapped.
struct PlannedKey {
    transport: KeyTransport,
    wrapped: Vec<u8>,
    cipher: BlockCipher,
    parts: Vec<PlannedPart>,
}

/// One EncryptedData to decrypt: where it is, its ciphertext, and whether it is `Type`
/// Element.
struct PlannedPart {
    at: std::ops::Range<usize>,
    data: Vec<u8>,
    element: bool,
}

struct Found {
    security: Option<NodeId>,
    timestamps: Vec<NodeId>,
    tokens: Vec<NodeId>,
    encrypted_keys: Vec<NodeId>,
    signatures: Vec<NodeId>,
    username_tokens: Vec<NodeId>,
}

impl Verifier {
    /// A verifier; a cache size of `None` switches that cache off.
    pub fn new(
        policy: VerifyPolicy,
        replay_cache: Option<usize>,
        session_key_cache: Option<usize>,
    ) -> Self {
        Self {
            policy,
            replay: replay_cache.map(|n| Arc::new(ReplayCache::new(n))),
            session_keys: session_key_cache.map(KeyCache::new),
            max_references: DEFAULT_MAX_REFERENCES,
        }
    }

    /// Uses `cache` for replay detection (or none), instead of a cache of its own: verifiers
    /// that protect the same back ends share one, so a message accepted by one is a replay
    /// for all.
    pub fn with_replay_cache(mut self, cache: Option<Arc<ReplayCache>>) -> Self {
        self.replay = cache;
        self
    }

    /// Refuses a signature with more than `n` references (at least 1), before any of them is
    /// canonicalized or digested.
    pub fn with_max_references(mut self, n: usize) -> Self {
        self.max_references = n.max(1);
        self
    }

    /// The policy this verifier enforces.
    pub fn policy(&self) -> &VerifyPolicy {
        &self.policy
    }

    /// Checks `input` at time `now`. `expected` is the SOAP version the transport announced
    /// (its Content-Type), when it announced one.
    ///
    /// Everything the header alone can prove comes before any decryption: the signature's
    /// value and its signer's trust, the digests of the signed header elements (the
    /// Timestamp), freshness and replay. A captured message with its ciphertext altered is
    /// then refused as a replay or as expired before any of it is decrypted, so it cannot be
    /// used to ask the service what a ciphertext decrypts to (the padding and parser oracles
    /// of XML Encryption); and a forger without a trusted key costs no RSA private-key
    /// operation. The Body's references are digested once it is decrypted; every failure
    /// until they all match is `FailedCheck`, the same as a failed decryption.
    pub fn verify(
        &self,
        input: &[u8],
        expected: Option<Soap>,
        now: SystemTime,
    ) -> Result<Verified, WsseError> {
        let now_ms = now_millis(now);
        let p = &self.policy;
        let doc = parse(input, &p.limits)?;
        let env = Envelope::find(&doc)?;
        if expected.is_some_and(|v| v != env.soap) {
            return fail(
                FaultKind::VersionMismatch,
                "the envelope's version differs from the Content-Type's",
            );
        }
        let found = self.scan_header(&doc, &env)?;
        let encrypted = !found.encrypted_keys.is_empty();
        if !encrypted && has_encrypted_data(&doc, env.body) {
            return fail(
                FaultKind::FailedCheck,
                "EncryptedData in the Body without an EncryptedKey for it",
            );
        }
        let Some(security) = found.security else {
            return fail(
                FaultKind::InvalidSecurity,
                "no Security header for this service",
            );
        };
        if found.encrypted_keys.len() > MAX_ENCRYPTED_KEYS {
            return fail(
                FaultKind::InvalidSecurity,
                format!(
                    "{} EncryptedKeys in the Security header (at most {MAX_ENCRYPTED_KEYS})",
                    found.encrypted_keys.len()
                ),
            );
        }

        let ids = id_map(&doc)?;
        let signature = match found.signatures.as_slice() {
            [] => None,
            [sig] => Some(self.check_signature(&doc, &env, security, *sig, &ids, now_ms)?),
            _ => return fail(FaultKind::InvalidSecurity, "more than one Signature"),
        };
        // Coverage: what raw signature engines leave to the application.
        if p.require_signature && signature.is_none() {
            return fail(FaultKind::InvalidSecurity, "no signature");
        }
        if signature.as_ref().is_some_and(|s| !s.covers_body) {
            return fail(
                FaultKind::InvalidSecurity,
                "the signature does not cover the SOAP Body",
            );
        }
        if p.require_encryption && !encrypted {
            return fail(FaultKind::InvalidSecurity, "the Body was not encrypted");
        }
        if p.require_encryption && !wholly_encrypted(&doc, env.body) {
            return fail(
                FaultKind::InvalidSecurity,
                "the Body holds more than its EncryptedData: its content is not all encrypted",
            );
        }
        let timestamp = match found.timestamps.as_slice() {
            [] if p.require_timestamp => {
                return fail(FaultKind::InvalidSecurity, "no Timestamp");
            }
            [] => None,
            [ts] => Some(*ts),
            _ => return fail(FaultKind::InvalidSecurity, "more than one Timestamp"),
        };
        if let (Some(ts), Some(s)) = (timestamp, &signature) {
            if !s.covered.contains(&ts) {
                return fail(
                    FaultKind::InvalidSecurity,
                    "the signature does not cover the Timestamp",
                );
            }
        }

        let username = match found.username_tokens.as_slice() {
            [] if p.require_username_token => {
                return fail(FaultKind::InvalidSecurity, "no UsernameToken");
            }
            [] => None,
            [ut] => Some(self.check_username_token(&doc, *ut, now_ms)?),
            _ => return fail(FaultKind::InvalidSecurity, "more than one UsernameToken"),
        };

        if let Some(ts) = timestamp {
            let (created, created_text, expires) = self.check_timestamp(&doc, ts, now_ms)?;
            if let (Some(cache), Some(s)) = (&self.replay, &signature) {
                let mut h = sha2::Sha256::new();
                h.update(b"ts\0");
                h.update(created_text.as_bytes());
                h.update(b"\0");
                h.update(&s.value);
                // Past `Created` + max_age (+ skew) the message is refused as too old whatever
                // its `Expires` says, so it need not be remembered longer: an `Expires` a year
                // ahead would otherwise hold its entry, and the cache's room, for a year.
                let oldest = created + p.max_age_ms;
                let until = expires.map_or(oldest, |e| e.min(oldest)) + p.max_skew_ms;
                if !cache.insert(h.finalize().into(), now_ms, until) {
                    return fail(FaultKind::InvalidSecurity, "replayed message");
                }
            }
        }

        // Decryption changes the bytes; the rest works on the plain message, parsed again.
        let decrypted = if encrypted {
            let (plain, spliced) = self.decrypt(&doc, &env, &found, &ids)?;
            Some(
                self.parse_decrypted(&plain, &spliced)
                    .map_err(before_authentication)?,
            )
        } else {
            None
        };
        let (doc, env, security) = match &decrypted {
            Some((d, e, s)) => (d, *e, *s),
            None => (&doc, env, security),
        };
        if encrypted || signature.is_some() {
            let late = signature.as_ref().map_or(&[][..], |s| &s.late[..]);
            let checked = match &decrypted {
                // Ids inside the decrypted parts are checked for repeats like the others.
                Some(_) => id_map(doc).and_then(|ids| check_late_references(doc, &ids, late)),
                None => check_late_references(doc, &ids, late),
            }
            .and_then(|covered| match &signature {
                Some(_) if !covered.contains(&env.body) => fail(
                    FaultKind::InvalidSecurity,
                    "the signature does not cover the SOAP Body",
                ),
                _ => Ok(()),
            });
            checked.map_err(|e| {
                if encrypted {
                    before_authentication(e)
                } else {
                    e
                }
            })?;
        }

        let message = if p.remove_header {
            let span = doc.span(security);
            let src = doc.source();
            let mut out = Vec::with_capacity(src.len() - span.len());
            out.extend_from_slice(&src[..span.start]);
            out.extend_from_slice(&src[span.end..]);
            out
        } else {
            doc.source().to_vec()
        };
        Ok(Verified {
            message,
            soap: env.soap,
            signer: signature.map(|s| s.cert),
            username,
        })
    }

    /// The decrypted message parsed (each decrypted part checked, [`parse_spliced`]), its
    /// envelope and its Security header.
    fn parse_decrypted(
        &self,
        plain: &[u8],
        spliced: &[Spliced],
    ) -> Result<(Document, Envelope, NodeId), WsseError> {
        let doc = parse_spliced(plain, &self.policy.limits, spliced)?;
        let env = Envelope::find(&doc)?;
        let Some(security) = self.scan_header(&doc, &env)?.security else {
            return fail(
                FaultKind::InvalidSecurity,
                "no Security header in the decrypted message",
            );
        };
        Ok((doc, env, security))
    }
    /// Finds our Security header and sorts its children; checks `mustUnderstand` blocks.
    fn scan_header(&self, doc: &Document, env: &Envelope) -> Result<Found, WsseError> {
        let mut found = Found {
            security: None,
            timestamps: Vec::new(),
            tokens: Vec::new(),
            encrypted_keys: Vec::new(),
            signatures: Vec::new(),
            username_tokens: Vec::new(),
        };
        let Some(header) = env.header else {
            return Ok(found);
        };
        let env_ns = env.soap.namespace();
        for block in doc.element_children(header) {
            let role = env.role(doc, block);
            let for_us = crate::soap::receives(role);
            if doc.is(block, ns::WSSE, "Security") {
                if for_us {
                    if found.security.is_some() {
                        return fail(
                            FaultKind::InvalidSecurity,
                            "more than one Security header for this service",
                        );
                    }
                    found.security = Some(block);
                }
                continue;
            }
            let must = doc
                .attr(block, env_ns, "mustUnderstand")
                .is_some_and(|v| v.trim() == "1" || v.trim() == "true");
            // Blocks without a role are for the ultimate receiver (the back end) and travel
            // on; blocks for the next node are ours to understand.
            let next = role.is_some_and(|r| r == ns::ACTOR_NEXT_11 || r == ns::ROLE_NEXT_12);
            if must && next {
                return fail(
                    FaultKind::MustUnderstand,
                    format!(
                        "header block {{{}}}{} not understood",
                        doc.namespace(block),
                        doc.local_name(block)
                    ),
                );
            }
        }
        let Some(sec) = found.security else {
            return Ok(found);
        };
        for c in doc.element_children(sec) {
            match (doc.namespace(c), doc.local_name(c)) {
                (ns::WSU, "Timestamp") => found.timestamps.push(c),
                (ns::WSSE, "BinarySecurityToken") => found.tokens.push(c),
                (ns::XENC, "EncryptedKey") => found.encrypted_keys.push(c),
                (ns::DS, "Signature") => found.signatures.push(c),
                (ns::WSSE, "UsernameToken") => found.username_tokens.push(c),
                // Lists of what an EncryptedKey decrypts, and signature confirmations, need no
                // processing of their own here.
                (ns::XENC, "ReferenceList") | (ns::WSSE11, "SignatureConfirmation") => {}
                (n, l) => {
                    return fail(
                        FaultKind::InvalidSecurity,
                        format!("unsupported element {{{n}}}{l} in the Security header"),
                    )
                }
            }
        }
        Ok(found)
    }

    /// Decrypts every EncryptedData an EncryptedKey of our header names; returns the
    /// message with each spliced back, and where each decrypted text now lies in it. `ids` are
    /// the received message's, mapped once by the caller.
    ///
    /// Everything about the encrypted parts (algorithms, `Type`, where they are, their
    /// ciphertext's encoding) is checked before the first key is unwrapped, so that no answer
    /// depends on what a ciphertext decrypts to: every unwrap or decryption failure, and every
    /// failure of the decrypted message until its signature's digests match, is `FailedCheck`.
    fn decrypt(
        &self,
        doc: &Document,
        env: &Envelope,
        found: &Found,
        ids: &HashMap<&str, NodeId>,
    ) -> Result<(Vec<u8>, Vec<Spliced>), WsseError> {
        let Some(identity) = &self.policy.decrypt else {
            return fail(
                FaultKind::FailedCheck,
                "the message is encrypted but no decrypt_key is configured",
            );
        };
        let Some(security) = found.security else {
            return fail(
                FaultKind::InvalidSecurity,
                "EncryptedKey outside our Security header",
            );
        };
        let mut keys: Vec<PlannedKey> = Vec::with_capacity(found.encrypted_keys.len());
        for &ek in &found.encrypted_keys {
            let method = only_child(doc, ek, ns::XENC, "EncryptionMethod")?;
            let transport = self.key_transport(doc, method)?;
            self.check_recipient(doc, security, ek, identity)?;
            let wrapped = cipher_value(doc, ek)?;

            // What this key decrypts: its ReferenceList, or EncryptedData naming it.
            let mut targets = Vec::new();
            if let Some(list) = child(doc, ek, ns::XENC, "ReferenceList") {
                for r in doc.element_children(list) {
                    if !doc.is(r, ns::XENC, "DataReference") {
                        return fail(
                            FaultKind::UnsupportedAlgorithm,
                            "only DataReference is supported",
                        );
                    }
                    let uri = doc.attr(r, "", "URI").unwrap_or("");
                    targets.push(resolve(ids, uri)?);
                }
            } else if let Some(id) = doc.attr(ek, "", "Id") {
                for ed in doc.descendants(env.body) {
                    if doc.is(ed, ns::XENC, "EncryptedData") && key_info_refers_to(doc, ed, id) {
                        targets.push(ed);
                    }
                }
            }
            let mut cipher = None;
            let mut parts = Vec::with_capacity(targets.len());
            for t in targets {
                if !doc.is(t, ns::XENC, "EncryptedData") {
                    return fail(
                        FaultKind::InvalidSecurity,
                        "a DataReference to something other than EncryptedData",
                    );
                }
                if !is_inside(doc, t, env.body) {
                    return fail(FaultKind::InvalidSecurity, "EncryptedData outside the Body");
                }
                let m = only_child(doc, t, ns::XENC, "EncryptionMethod")?;
                let alg = doc.attr(m, "", "Algorithm").unwrap_or("");
                let Some(c) = BlockCipher::from_uri(alg) else {
                    return fail(
                        FaultKind::UnsupportedAlgorithm,
                        format!("data encryption '{alg}'"),
                    );
                };
                if cipher.is_some_and(|prev| prev != c) {
                    return fail(FaultKind::InvalidSecurity, "one key used with two ciphers");
                }
                cipher = Some(c);
                let kind = doc.attr(t, "", "Type").unwrap_or(ns::ENC_ELEMENT);
                if kind != ns::ENC_CONTENT && kind != ns::ENC_ELEMENT {
                    return fail(
                        FaultKind::UnsupportedAlgorithm,
                        format!("EncryptedData Type '{kind}'"),
                    );
                }
                parts.push(PlannedPart {
                    at: doc.span(t),
                    data: cipher_value_of(doc, t)?,
                    element: kind == ns::ENC_ELEMENT,
                });
            }
            let Some(cipher) = cipher else {
                return fail(
                    FaultKind::InvalidSecurity,
                    "an EncryptedKey that decrypts nothing",
                );
            };
            keys.push(PlannedKey {
                transport,
                wrapped,
                cipher,
                parts,
            });
        }
        // Anything still encrypted in the Body was addressed to no key we hold.
        let starts: Vec<usize> = keys
            .iter()
            .flat_map(|k| k.parts.iter().map(|p| p.at.start))
            .collect();
        for ed in doc.descendants(env.body) {
            if doc.is(ed, ns::XENC, "EncryptedData") && !starts.contains(&doc.span(ed).start) {
                return fail(
                    FaultKind::FailedCheck,
                    "EncryptedData no EncryptedKey decrypts",
                );
            }
        }
        // Each part once, none inside another.
        let mut ranges: Vec<std::ops::Range<usize>> = keys
            .iter()
            .flat_map(|k| k.parts.iter().map(|p| p.at.clone()))
            .collect();
        ranges.sort_by_key(|r| r.start);
        if ranges.windows(2).any(|w| w[1].start < w[0].end) {
            return fail(
                FaultKind::InvalidSecurity,
                "nested or repeated EncryptedData references",
            );
        }

        let mut splices: Vec<(std::ops::Range<usize>, Vec<u8>, bool)> = Vec::new();
        for k in keys {
            let key = self.unwrap(identity, k.transport, &k.wrapped, k.cipher.key_len())?;
            for part in k.parts {
                let plain = crypto::decrypt(k.cipher, &key, &part.data).map_err(|_| {
                    WsseError::new(FaultKind::FailedCheck, "data decryption failed")
                })?;
                splices.push((part.at, plain, part.element));
            }
            self.remember(&k.wrapped, &key);
        }
        splices.sort_by_key(|(r, ..)| r.start);
        let src = doc.source();
        let mut out = Vec::with_capacity(src.len());
        let mut placed = Vec::with_capacity(splices.len());
        let mut at = 0;
        for (range, plain, element) in splices {
            out.extend_from_slice(&src[at..range.start]);
            let start = out.len();
            out.extend_from_slice(&plain);
            placed.push(Spliced {
                at: start..out.len(),
                element,
            });
            at = range.end;
        }
        out.extend_from_slice(&src[at..]);
        Ok((out, placed))
    }

    fn key_transport(&self, doc: &Document, method: NodeId) -> Result<KeyTransport, WsseError> {
        let alg = doc.attr(method, "", "Algorithm").unwrap_or("");
        let Some(kt) = KeyTransport::from_uri(alg) else {
            return fail(
                FaultKind::UnsupportedAlgorithm,
                format!("key transport '{alg}'"),
            );
        };
        if kt.is_legacy() && !self.policy.legacy {
            return fail(
                FaultKind::UnsupportedAlgorithm,
                format!("legacy key transport '{alg}'"),
            );
        }
        for c in doc.element_children(method) {
            let a = doc.attr(c, "", "Algorithm").unwrap_or("");
            let ok = match (doc.namespace(c), doc.local_name(c)) {
                (ns::DS, "DigestMethod") => a == DigestAlg::Sha1.uri(),
                (ns::XENC11, "MGF") => a == ns::MGF1_SHA1,
                (ns::XENC, "OAEPparams") => false,
                _ => false,
            };
            if !ok {
                return fail(
                    FaultKind::UnsupportedAlgorithm,
                    format!("key transport parameter '{a}'"),
                );
            }
        }
        Ok(kt)
    }

    /// The EncryptedKey must name our certificate; anything else is for another recipient.
    fn check_recipient(
        &self,
        doc: &Document,
        security: NodeId,
        ek: NodeId,
        identity: &Identity,
    ) -> Result<(), WsseError> {
        let ours = &identity.cert;
        let Some(info) = child(doc, ek, ns::DS, "KeyInfo") else {
            return fail(FaultKind::FailedCheck, "EncryptedKey without KeyInfo");
        };
        let matches = match token_reference(doc, security, info, self.policy.trust.as_ref())? {
            TokenRef::Cert(c) => c.der() == ours.der(),
            TokenRef::Ski(ski) => ct_eq(&ski, &ours.subject_key_identifier()),
            TokenRef::Thumbprint(t) => ct_eq(&t, &ours.thumbprint_sha1()),
            TokenRef::IssuerSerial(issuer, serial) => {
                normalize_dn(&issuer) == normalize_dn(ours.issuer())
                    && serial == ours.serial_decimal()
            }
        };
        if matches {
            Ok(())
        } else {
            fail(FaultKind::FailedCheck, "EncryptedKey for another recipient")
        }
    }

    fn unwrap(
        &self,
        identity: &Identity,
        transport: KeyTransport,
        wrapped: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, WsseError> {
        let fingerprint: [u8; 32] = sha2::Sha256::digest(wrapped).into();
        if let Some(key) = self.session_keys.as_ref().and_then(|c| c.get(&fingerprint)) {
            if key.len() == len {
                return Ok(key);
            }
        }
        identity
            .key
            .unwrap_key(transport, wrapped, len)
            .map_err(|_| WsseError::new(FaultKind::FailedCheck, "key unwrap failed"))
    }

    /// Remembers a session key once its data decrypted: an RSA-1.5 failure yields a random
    /// key, which must never be served again for the same bytes.
    fn remember(&self, wrapped: &[u8], key: &[u8]) {
        if let Some(cache) = &self.session_keys {
            cache.put(sha2::Sha256::digest(wrapped).into(), key.to_vec());
        }
    }

    /// Checks the signature as far as the received message allows: the references' number
    /// and shape, the signer's certificate and trust, the one public-key operation over
    /// SignedInfo, and the digests of the references outside the Body. References to the Body
    /// and into it are returned for [`check_late_references`], once the Body is plain.
    fn check_signature(
        &self,
        doc: &Document,
        env: &Envelope,
        security: NodeId,
        sig: NodeId,
        ids: &HashMap<&str, NodeId>,
        now_ms: i64,
    ) -> Result<SignatureCheck, WsseError> {
        let p = &self.policy;
        let signed_info = only_child(doc, sig, ns::DS, "SignedInfo")?;
        let c14n_method = only_child(doc, signed_info, ns::DS, "CanonicalizationMethod")?;
        let si_prefixes = c14n_prefixes(doc, c14n_method)?;
        let sm = only_child(doc, signed_info, ns::DS, "SignatureMethod")?;
        let sm_alg = doc.attr(sm, "", "Algorithm").unwrap_or("");
        let Some(alg) = SignatureAlg::from_uri(sm_alg) else {
            return fail(
                FaultKind::UnsupportedAlgorithm,
                format!("signature method '{sm_alg}'"),
            );
        };
        if alg.is_legacy() && !p.legacy {
            return fail(
                FaultKind::UnsupportedAlgorithm,
                format!("legacy signature method '{sm_alg}'"),
            );
        }
        // The references' shape first (cheap: no canonicalization), with their number capped
        // and no node signed twice; then the signer's trust and the one public-key operation
        // over SignedInfo; only a trusted signature that verifies earns the digests' work.
        let references: Vec<NodeId> = doc
            .element_children(signed_info)
            .filter(|&r| doc.is(r, ns::DS, "Reference"))
            .collect();
        if references.is_empty() {
            return fail(FaultKind::InvalidSecurity, "a signature without references");
        }
        if references.len() > self.max_references {
            return fail(
                FaultKind::InvalidSecurity,
                format!(
                    "{} references in SignedInfo (at most {})",
                    references.len(),
                    self.max_references
                ),
            );
        }
        let mut checks: Vec<ReferenceCheck> = Vec::with_capacity(references.len());
        for r in references {
            let uri = doc.attr(r, "", "URI").unwrap_or("");
            let id = reference_id(uri)?;
            // An id the received message lacks may lie in its encrypted part.
            let target = ids.get(id).copied();
            if checks
                .iter()
                .any(|c| c.uri == uri || (target.is_some() && c.target == target))
            {
                return fail(
                    FaultKind::InvalidSecurity,
                    format!("'{uri}' is referenced twice"),
                );
            }
            let transforms = only_child(doc, r, ns::DS, "Transforms")?;
            let mut list = doc.element_children(transforms);
            let (Some(t), None) = (list.next(), list.next()) else {
                return fail(
                    FaultKind::UnsupportedAlgorithm,
                    "a reference needs exactly one transform",
                );
            };
            if !doc.is(t, ns::DS, "Transform") {
                return fail(FaultKind::InvalidSecurity, "malformed Transforms");
            }
            let prefixes = c14n_prefixes(doc, t)?;
            let dm = only_child(doc, r, ns::DS, "DigestMethod")?;
            let dm_alg = doc.attr(dm, "", "Algorithm").unwrap_or("");
            let Some(digest_alg) = DigestAlg::from_uri(dm_alg) else {
                return fail(
                    FaultKind::UnsupportedAlgorithm,
                    format!("digest method '{dm_alg}'"),
                );
            };
            if digest_alg.is_legacy() && !p.legacy {
                return fail(
                    FaultKind::UnsupportedAlgorithm,
                    format!("legacy digest '{dm_alg}'"),
                );
            }
            let expected =
                decode_base64(&doc.text_content(only_child(doc, r, ns::DS, "DigestValue")?))?;
            checks.push(ReferenceCheck {
                uri,
                target,
                prefixes,
                digest_alg,
                expected,
            });
        }
        let value =
            decode_base64(&doc.text_content(only_child(doc, sig, ns::DS, "SignatureValue")?))?;
        let Some(info) = child(doc, sig, ns::DS, "KeyInfo") else {
            return fail(
                FaultKind::SecurityTokenUnavailable,
                "a signature without KeyInfo",
            );
        };
        let cert = match token_reference(doc, security, info, self.policy.trust.as_ref())? {
            TokenRef::Cert(c) => c,
            other => self.known_cert(&other)?,
        };
        let Some(trust) = &p.trust else {
            return fail(
                FaultKind::FailedAuthentication,
                "no trust anchors configured for signatures",
            );
        };
        trust.check(&cert, &[], now_ms / 1000).map_err(|e| {
            WsseError::new(
                FaultKind::FailedAuthentication,
                format!("signer not trusted: {e}"),
            )
        })?;
        let mut buf = Vec::new();
        let refs: Vec<&str> = si_prefixes.iter().map(String::as_str).collect();
        c14n::exclusive(doc, signed_info, &refs, false, &mut buf).map_err(c14n_failed)?;
        if !cert.public_key().verify(alg, &buf, &value) {
            return fail(FaultKind::FailedCheck, "signature value does not verify");
        }
        let mut covered = Vec::with_capacity(checks.len());
        let mut covers_body = false;
        let mut late = Vec::new();
        for c in checks {
            match c.target {
                Some(t) if t != env.body && !is_inside(doc, t, env.body) => {
                    check_digest(
                        doc,
                        t,
                        &c.prefixes,
                        c.digest_alg,
                        &c.expected,
                        c.uri,
                        &mut buf,
                    )?;
                    covered.push(t);
                }
                target => {
                    covers_body |= target == Some(env.body);
                    late.push(LateReference {
                        uri: c.uri.to_owned(),
                        prefixes: c.prefixes,
                        digest_alg: c.digest_alg,
                        expected: c.expected,
                    });
                }
            }
        }
        Ok(SignatureCheck {
            cert,
            value,
            covered,
            covers_body,
            late,
        })
    }

    fn known_cert(&self, r: &TokenRef) -> Result<Arc<Certificate>, WsseError> {
        let found = self.policy.known_certs.iter().find(|c| match r {
            TokenRef::Ski(ski) => ct_eq(ski, &c.subject_key_identifier()),
            TokenRef::Thumbprint(t) => ct_eq(t, &c.thumbprint_sha1()),
            TokenRef::IssuerSerial(issuer, serial) => {
                normalize_dn(issuer) == normalize_dn(c.issuer()) && *serial == c.serial_decimal()
            }
            TokenRef::Cert(_) => false,
        });
        match found {
            Some(c) => Ok(Arc::new(c.clone())),
            None => fail(
                FaultKind::SecurityTokenUnavailable,
                "the signer's certificate is neither in the message nor among trust.certs",
            ),
        }
    }

    /// Returns `Created` (ms), its text, and `Expires` (ms).
    fn check_timestamp(
        &self,
        doc: &Document,
        ts: NodeId,
        now_ms: i64,
    ) -> Result<(i64, String, Option<i64>), WsseError> {
        let p = &self.policy;
        let created_text = doc.text_content(only_child(doc, ts, ns::WSU, "Created")?);
        let Some(created) = parse_datetime(&created_text) else {
            return fail(FaultKind::InvalidSecurity, "unreadable Timestamp/Created");
        };
        let expires = match doc
            .element_children(ts)
            .filter(|&c| doc.is(c, ns::WSU, "Expires"))
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] if p.require_expires => {
                return fail(FaultKind::InvalidSecurity, "Timestamp without Expires");
            }
            [] => None,
            [e] => match parse_datetime(&doc.text_content(*e)) {
                Some(v) => Some(v),
                None => return fail(FaultKind::InvalidSecurity, "unreadable Timestamp/Expires"),
            },
            _ => return fail(FaultKind::InvalidSecurity, "more than one Expires"),
        };
        if expires.is_some_and(|e| e < created) {
            return fail(
                FaultKind::InvalidSecurity,
                "Timestamp expires before it is created",
            );
        }
        if created > now_ms + p.max_skew_ms {
            return fail(FaultKind::MessageExpired, "Timestamp created in the future");
        }
        if now_ms - created > p.max_age_ms + p.max_skew_ms {
            return fail(FaultKind::MessageExpired, "Timestamp too old");
        }
        if expires.is_some_and(|e| now_ms > e + p.max_skew_ms) {
            return fail(FaultKind::MessageExpired, "Timestamp expired");
        }
        Ok((created, created_text.trim().to_owned(), expires))
    }

    fn check_username_token(
        &self,
        doc: &Document,
        ut: NodeId,
        now_ms: i64,
    ) -> Result<String, WsseError> {
        let p = &self.policy;
        let name = doc.text_content(only_child(doc, ut, ns::WSSE, "Username")?);
        let name = name.trim();
        let password = only_child(doc, ut, ns::WSSE, "Password")?;
        let kind = doc.attr(password, "", "Type").unwrap_or(ns::PASSWORD_TEXT);
        let given = doc.text_content(password);
        let nonce = child(doc, ut, ns::WSSE, "Nonce").map(|n| doc.text_content(n));
        let created = child(doc, ut, ns::WSU, "Created").map(|c| doc.text_content(c));
        let Some(expected) = p.users.get(name) else {
            return fail(
                FaultKind::FailedAuthentication,
                format!("unknown user '{name}'"),
            );
        };
        let ok = match kind {
            ns::PASSWORD_TEXT => ct_eq(given.as_bytes(), expected.as_bytes()),
            ns::PASSWORD_DIGEST => {
                let (Some(nonce), Some(created)) = (&nonce, &created) else {
                    return fail(
                        FaultKind::FailedAuthentication,
                        "a password digest needs Nonce and Created",
                    );
                };
                let mut h = sha1::Sha1::new();
                h.update(decode_base64(nonce)?);
                h.update(created.trim().as_bytes());
                h.update(expected.as_bytes());
                let want = crate::soap::encode_base64(&h.finalize());
                ct_eq(given.trim().as_bytes(), want.as_bytes())
            }
            other => {
                return fail(
                    FaultKind::UnsupportedSecurityToken,
                    format!("password type '{other}'"),
                )
            }
        };
        if !ok {
            return fail(
                FaultKind::FailedAuthentication,
                format!("wrong password for '{name}'"),
            );
        }
        let created_ms = match &created {
            Some(c) => match parse_datetime(c) {
                Some(v) => Some(v),
                None => {
                    return fail(
                        FaultKind::InvalidSecurity,
                        "unreadable UsernameToken/Created",
                    )
                }
            },
            None => None,
        };
        if let Some(c) = created_ms {
            if c > now_ms + p.max_skew_ms {
                return fail(
                    FaultKind::MessageExpired,
                    "UsernameToken created in the future",
                );
            }
            if now_ms - c > p.max_age_ms + p.max_skew_ms {
                return fail(FaultKind::MessageExpired, "stale UsernameToken");
            }
        }
        if let (Some(cache), Some(nonce)) = (&self.replay, &nonce) {
            let mut h = sha2::Sha256::new();
            h.update(b"nonce\0");
            h.update(name.as_bytes());
            h.update(b"\0");
            h.update(nonce.trim().as_bytes());
            let until = created_ms.unwrap_or(now_ms) + p.max_age_ms + 2 * p.max_skew_ms;
            if !cache.insert(h.finalize().into(), now_ms, until) {
                return fail(
                    FaultKind::FailedAuthentication,
                    "reused UsernameToken nonce",
                );
            }
        }
        Ok(name.to_owned())
    }
}

/// Digests the late references in the plain message (`ids` are its ids); returns what they
/// cover.
fn check_late_references(
    doc: &Document,
    ids: &HashMap<&str, NodeId>,
    late: &[LateReference],
) -> Result<Vec<NodeId>, WsseError> {
    let mut covered = Vec::with_capacity(late.len());
    let mut buf = Vec::new();
    for r in late {
        let target = resolve(ids, &r.uri)?;
        if covered.contains(&target) {
            return fail(
                FaultKind::InvalidSecurity,
                format!("'{}' is referenced twice", r.uri),
            );
        }
        check_digest(
            doc,
            target,
            &r.prefixes,
            r.digest_alg,
            &r.expected,
            &r.uri,
            &mut buf,
        )?;
        covered.push(target);
    }
    Ok(covered)
}

fn check_digest(
    doc: &Document,
    target: NodeId,
    prefixes: &[String],
    alg: DigestAlg,
    expected: &[u8],
    uri: &str,
    buf: &mut Vec<u8>,
) -> Result<(), WsseError> {
    buf.clear();
    let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    c14n::exclusive(doc, target, &refs, false, buf).map_err(c14n_failed)?;
    if !ct_eq(&crypto::digest(alg, buf), expected) {
        return fail(
            FaultKind::FailedCheck,
            format!("digest mismatch for '{uri}'"),
        );
    }
    Ok(())
}

/// A failure found in a decrypted message before its signature's digests all matched. Its
/// plaintext is not authenticated yet, so whatever an answer told about it would tell an
/// attacker about a ciphertext: all such failures answer as a failed decryption does.
fn before_authentication(e: WsseError) -> WsseError {
    WsseError {
        kind: FaultKind::FailedCheck,
        detail: e.detail,
    }
}

/// The Body's content is encrypted as a whole: beside its EncryptedData, white space only.
fn wholly_encrypted(doc: &Document, body: NodeId) -> bool {
    let mut any = false;
    for c in doc.children(body) {
        match doc.kind(c) {
            NodeKind::Element if doc.is(c, ns::XENC, "EncryptedData") => any = true,
            NodeKind::Text if doc.text(c).bytes().all(|b| b.is_ascii_whitespace()) => {}
            _ => return false,
        }
    }
    any
}

fn c14n_failed(e: c14n::C14nError) -> WsseError {
    WsseError::new(
        FaultKind::InvalidSecurity,
        format!("cannot canonicalize: {e}"),
    )
}

fn parse(input: &[u8], limits: &Limits) -> Result<Document, WsseError> {
    Document::parse(input, limits)
        .map_err(|e| WsseError::new(FaultKind::InvalidSecurity, format!("unacceptable XML: {e}")))
}

fn has_encrypted_data(doc: &Document, body: NodeId) -> bool {
    doc.descendants(body)
        .any(|e| doc.is(e, ns::XENC, "EncryptedData"))
}

fn is_inside(doc: &Document, mut node: NodeId, ancestor: NodeId) -> bool {
    while let Some(p) = doc.parent(node) {
        if p == ancestor {
            return true;
        }
        node = p;
    }
    false
}

/// Every `wsu:Id` and unqualified `Id` of the document; a repeated one is an attack (the
/// wrapping attacks rely on a second element with the signed element's id).
fn id_map(doc: &Document) -> Result<HashMap<&str, NodeId>, WsseError> {
    let mut ids = HashMap::new();
    for e in doc.elements() {
        for id in [doc.attr(e, ns::WSU, "Id"), doc.attr(e, "", "Id")]
            .into_iter()
            .flatten()
        {
            if ids.insert(id, e).is_some_and(|prev| prev != e) {
                return fail(FaultKind::InvalidSecurity, format!("duplicate Id '{id}'"));
            }
        }
    }
    Ok(ids)
}

/// The id of a same-document `#id` reference; anything else (external URIs, XPointer, the
/// whole document) is outside the profile.
fn reference_id(uri: &str) -> Result<&str, WsseError> {
    let Some(id) = uri.strip_prefix('#') else {
        return fail(
            FaultKind::UnsupportedAlgorithm,
            format!("reference URI '{uri}' is not '#id'"),
        );
    };
    if id.is_empty() || id.starts_with("xpointer(") {
        return fail(
            FaultKind::UnsupportedAlgorithm,
            format!("reference URI '{uri}'"),
        );
    }
    Ok(id)
}

/// The element a same-document `#id` reference names.
fn resolve(ids: &HashMap<&str, NodeId>, uri: &str) -> Result<NodeId, WsseError> {
    let id = reference_id(uri)?;
    match ids.get(id) {
        Some(&n) => Ok(n),
        None => fail(
            FaultKind::InvalidSecurity,
            format!("reference to a missing element '{uri}'"),
        ),
    }
}

/// The InclusiveNamespaces PrefixList of an exclusive-C14N method or transform.
fn c14n_prefixes(doc: &Document, method: NodeId) -> Result<Vec<String>, WsseError> {
    let alg = doc.attr(method, "", "Algorithm").unwrap_or("");
    if alg != ns::EXC_C14N {
        return fail(
            FaultKind::UnsupportedAlgorithm,
            format!("transform or canonicalization '{alg}'"),
        );
    }
    let mut out = Vec::new();
    for c in doc.element_children(method) {
        if !doc.is(c, ns::EXC_C14N, "InclusiveNamespaces") {
            return fail(
                FaultKind::UnsupportedAlgorithm,
                "unexpected canonicalization parameter",
            );
        }
        out.extend(
            doc.attr(c, "", "PrefixList")
                .unwrap_or("")
                .split_ascii_whitespace()
                .map(str::to_owned),
        );
    }
    Ok(out)
}

enum TokenRef {
    Cert(Arc<Certificate>),
    Ski(Vec<u8>),
    Thumbprint(Vec<u8>),
    IssuerSerial(String, String),
}

/// Reads the SecurityTokenReference (or X509Data) inside a KeyInfo. Direct references must
/// point to a BinarySecurityToken of this Security header: a token elsewhere in the message
/// is under the attacker's control and outside what the header vouches for.
fn token_reference(
    doc: &Document,
    security: NodeId,
    info: NodeId,
    trust: Option<&TrustStore>,
) -> Result<TokenRef, WsseError> {
    if let Some(data) = child(doc, info, ns::DS, "X509Data") {
        return x509_data(doc, data, trust);
    }
    let Some(str_) = child(doc, info, ns::WSSE, "SecurityTokenReference") else {
        return fail(
            FaultKind::SecurityTokenUnavailable,
            "KeyInfo without a token reference",
        );
    };
    if let Some(r) = child(doc, str_, ns::WSSE, "Reference") {
        let uri = doc.attr(r, "", "URI").unwrap_or("");
        let Some(id) = uri.strip_prefix('#') else {
            return fail(
                FaultKind::SecurityTokenUnavailable,
                format!("token reference '{uri}'"),
            );
        };
        let token = doc.element_children(security).find(|&t| {
            doc.is(t, ns::WSSE, "BinarySecurityToken") && doc.attr(t, ns::WSU, "Id") == Some(id)
        });
        let Some(token) = token else {
            return fail(
                FaultKind::SecurityTokenUnavailable,
                format!("token '{uri}' is not a BinarySecurityToken of this Security header"),
            );
        };
        if let Some(vt) = doc.attr(token, "", "ValueType") {
            if vt != ns::X509V3 {
                return fail(
                    FaultKind::UnsupportedSecurityToken,
                    format!("token type '{vt}'"),
                );
            }
        }
        if let Some(et) = doc.attr(token, "", "EncodingType") {
            if et != ns::BASE64_BINARY {
                return fail(
                    FaultKind::UnsupportedSecurityToken,
                    format!("token encoding '{et}'"),
                );
            }
        }
        return certificate(&decode_base64(&doc.text_content(token))?, trust).map(TokenRef::Cert);
    }
    if let Some(k) = child(doc, str_, ns::WSSE, "KeyIdentifier") {
        let value = decode_base64(&doc.text_content(k))?;
        return match doc.attr(k, "", "ValueType").unwrap_or("") {
            ns::X509_SKI => Ok(TokenRef::Ski(value)),
            ns::THUMBPRINT_SHA1 => Ok(TokenRef::Thumbprint(value)),
            ns::X509V3 => certificate(&value, trust).map(TokenRef::Cert),
            other => fail(
                FaultKind::UnsupportedSecurityToken,
                format!("key identifier type '{other}'"),
            ),
        };
    }
    if let Some(data) = child(doc, str_, ns::DS, "X509Data") {
        return x509_data(doc, data, trust);
    }
    fail(
        FaultKind::UnsupportedSecurityToken,
        "unsupported token reference",
    )
}

fn x509_data(
    doc: &Document,
    data: NodeId,
    trust: Option<&TrustStore>,
) -> Result<TokenRef, WsseError> {
    if let Some(is) = child(doc, data, ns::DS, "X509IssuerSerial") {
        let issuer = doc.text_content(only_child(doc, is, ns::DS, "X509IssuerName")?);
        let serial = doc.text_content(only_child(doc, is, ns::DS, "X509SerialNumber")?);
        return Ok(TokenRef::IssuerSerial(
            issuer.trim().to_owned(),
            serial.trim().to_owned(),
        ));
    }
    if let Some(c) = child(doc, data, ns::DS, "X509Certificate") {
        return certificate(&decode_base64(&doc.text_content(c))?, trust).map(TokenRef::Cert);
    }
    fail(FaultKind::UnsupportedSecurityToken, "unsupported X509Data")
}

/// The certificate of `der`: one the trust store accepted before, or parsed now.
fn certificate(der: &[u8], trust: Option<&TrustStore>) -> Result<Arc<Certificate>, WsseError> {
    if let Some(cert) = trust.and_then(|t| t.accepted(der)) {
        return Ok(Arc::new(cert));
    }
    Certificate::from_der(der).map(Arc::new).map_err(|e| {
        WsseError::new(
            FaultKind::InvalidSecurityToken,
            format!("bad certificate: {e}"),
        )
    })
}

fn key_info_refers_to(doc: &Document, ed: NodeId, id: &str) -> bool {
    let Some(info) = child(doc, ed, ns::DS, "KeyInfo") else {
        return false;
    };
    let Some(str_) = child(doc, info, ns::WSSE, "SecurityTokenReference") else {
        return false;
    };
    child(doc, str_, ns::WSSE, "Reference")
        .and_then(|r| doc.attr(r, "", "URI"))
        .is_some_and(|u| u.strip_prefix('#') == Some(id))
}

fn cipher_value(doc: &Document, parent: NodeId) -> Result<Vec<u8>, WsseError> {
    let data = only_child(doc, parent, ns::XENC, "CipherData")?;
    decode_base64(&doc.text_content(only_child(doc, data, ns::XENC, "CipherValue")?))
}

fn cipher_value_of(doc: &Document, ed: NodeId) -> Result<Vec<u8>, WsseError> {
    cipher_value(doc, ed)
        .map_err(|_| WsseError::new(FaultKind::FailedCheck, "unreadable CipherValue"))
}

/// Where one EncryptedData's plain text lies in the decrypted message.
#[derive(Debug)]
struct Spliced {
    at: std::ops::Range<usize>,
    /// `Type` Element: the text must hold one element (text and comments may stand beside it).
    element: bool,
}

/// Parses the decrypted message. Each decrypted text must be a balanced run of whole nodes of
/// the element that held its EncryptedData: a plaintext that closes the Body and opens another
/// would otherwise rewrite the envelope. The original message parsed, so a decrypted message
/// that does not is the plaintext's doing too.
fn parse_spliced(
    plain: &[u8],
    limits: &Limits,
    spliced: &[Spliced],
) -> Result<Document, WsseError> {
    let not_a_fragment = |detail: &str| {
        WsseError::new(
            FaultKind::FailedCheck,
            format!("decrypted data is not a balanced XML fragment{detail}"),
        )
    };
    let marks: Vec<usize> = spliced
        .iter()
        .flat_map(|s| [s.at.start, s.at.end])
        .collect();
    let (doc, boundaries) = Document::parse_marked(plain, limits, &marks)
        .map_err(|e| not_a_fragment(&format!(": {e}")))?;
    for (s, ends) in spliced.iter().zip(boundaries.chunks(2)) {
        let parent = match ends {
            [Boundary::Between(Some(a)), Boundary::Between(Some(b))] if a == b => *a,
            _ => return Err(not_a_fragment("")),
        };
        if s.element {
            let elements = doc
                .element_children(parent)
                .filter(|&c| s.at.contains(&doc.span(c).start))
                .count();
            if elements != 1 {
                return fail(
                    FaultKind::FailedCheck,
                    "decrypted Element data is not one element",
                );
            }
        }
    }
    Ok(doc)
}
