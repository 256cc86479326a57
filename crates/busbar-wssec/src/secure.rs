//! Sending: timestamps, signs and encrypts a SOAP message, the way a WS-Security client or
//! service does (timestamp, then signature over Body and Timestamp, then encryption of the
//! Body's content).
//!
//! The message is never re-serialised: the new header, the Body's `wsu:Id` and the
//! EncryptedData are spliced into the original bytes. Elements we write are written in
//! canonical form where they are signed (SignedInfo, Timestamp), so what we sign is exactly
//! what a verifier's exclusive C14N of them yields.

use std::sync::Arc;
use std::time::SystemTime;

use crate::c14n;
use crate::crypto::{self, BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use crate::dom::{Document, Limits, NodeId};
use crate::error::{fail, FaultKind, WsseError};
use crate::keys::{Certificate, Identity};
use crate::ns;
use crate::soap::{encode_base64, escape, new_id, Envelope, Soap};
use crate::time::{format_datetime, now_millis};

/// How a signature or an encrypted key names a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyReference {
    /// A BinarySecurityToken carrying the certificate, and a direct reference to it.
    Bst,
    /// The SubjectKeyIdentifier.
    Ski,
    /// Issuer and serial number.
    IssuerSerial,
    /// SHA-1 thumbprint.
    Thumbprint,
}

/// Signing settings.
#[derive(Debug, Clone)]
pub struct SignSettings {
    /// The signer.
    pub identity: Arc<Identity>,
    /// Signature algorithm.
    pub algorithm: SignatureAlg,
    /// Reference digests.
    pub digest: DigestAlg,
    /// How the signature names the certificate.
    pub key_reference: KeyReference,
    /// Sign the Body (always, in a service; off only to build test messages).
    pub sign_body: bool,
    /// Sign the timestamp, when there is one.
    pub sign_timestamp: bool,
}

/// Encryption settings (the recipient is given per message).
#[derive(Debug, Clone)]
pub struct EncryptSettings {
    /// Data cipher.
    pub cipher: BlockCipher,
    /// Key transport.
    pub transport: KeyTransport,
    /// How the encrypted key names the recipient's certificate.
    pub key_reference: KeyReference,
}

/// A built `wsse_secure`.
#[derive(Debug, Clone)]
pub struct Securer {
    /// Timestamp lifetime in milliseconds, when a timestamp is added.
    pub timestamp_ttl_ms: Option<i64>,
    /// Signing, when the message is signed.
    pub sign: Option<SignSettings>,
    /// Encryption, when the Body's content is encrypted.
    pub encrypt: Option<EncryptSettings>,
    /// Parser limits for the message.
    pub limits: Limits,
}

/// A secured message, and the plain message a receiver recovers from it (the input with the
/// Body's `wsu:Id` and, when the input had none, an empty Header).
#[derive(Debug, Clone)]
pub struct Secured {
    /// What is sent.
    pub message: Vec<u8>,
    /// What the receiver gets back after decryption and the header's removal.
    pub plain: Vec<u8>,
}

/// Why a message was not secured.
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    /// The message already carries a Security header for the receiver the new one would be
    /// for (no actor or role, `next`, or `ultimateReceiver`). A second one makes the message
    /// one its receiver must refuse (WSS 1.1 §6.1: one Security header per role); merging into
    /// it or dropping it would change what its author secured.
    #[error("the message already carries a Security header for its receiver")]
    AlreadySecured,
    /// The message is not one this code secures (not a SOAP envelope, over the limits...), or
    /// signing or encryption failed.
    #[error(transparent)]
    Message(#[from] WsseError),
}

struct Edit {
    at: std::ops::Range<usize>,
    text: Vec<u8>,
}

fn apply(src: &[u8], mut edits: Vec<Edit>) -> Vec<u8> {
    edits.sort_by_key(|e| (e.at.start, e.at.end));
    let extra: usize = edits.iter().map(|e| e.text.len()).sum();
    let mut out = Vec::with_capacity(src.len() + extra);
    let mut pos = 0;
    for e in edits {
        out.extend_from_slice(&src[pos..e.at.start]);
        out.extend_from_slice(&e.text);
        pos = e.at.end;
    }
    out.extend_from_slice(&src[pos..]);
    out
}

impl Securer {
    /// Secures `input`; `recipient` is whom the Body is encrypted for.
    pub fn secure(
        &self,
        input: &[u8],
        recipient: Option<&Certificate>,
        now: SystemTime,
    ) -> Result<Vec<u8>, SecureError> {
        self.secure_keeping_plain(input, recipient, now)
            .map(|s| s.message)
    }

    /// Like [`Securer::secure`], also returning the plain form a receiver recovers.
    pub fn secure_keeping_plain(
        &self,
        input: &[u8],
        recipient: Option<&Certificate>,
        now: SystemTime,
    ) -> Result<Secured, SecureError> {
        let doc = parse(input, &self.limits)?;
        let env = Envelope::find(&doc)?;
        let secured = env.header.is_some_and(|h| {
            doc.element_children(h)
                .any(|b| doc.is(b, ns::WSSE, "Security") && env.for_receiver(&doc, b))
        });
        if secured {
            return Err(SecureError::AlreadySecured);
        }
        Ok(self.secure_envelope(&doc, env, recipient, now_millis(now))?)
    }

    /// Secures the envelope `env` of `doc`, which has no Security header for its receiver.
    fn secure_envelope(
        &self,
        doc: &Document,
        env: Envelope,
        recipient: Option<&Certificate>,
        now_ms: i64,
    ) -> Result<Secured, WsseError> {
        let soap_prefix = doc.prefix(env.envelope).to_owned();

        // Pass 1: the Body gets an id; a Security header with only the timestamp goes first
        // in the Header. Parsing that gives the exact canonical forms to sign and the
        // offsets for pass 2.
        let mut edits = Vec::new();
        let body_id = match doc.attr(env.body, ns::WSU, "Id") {
            Some(id) => id.to_owned(),
            None => {
                let id = new_id("id");
                let text = format!(" xmlns:wsu=\"{}\" wsu:Id=\"{id}\"", ns::WSU);
                let at = start_tag_end(doc, env.body);
                edits.push(Edit {
                    at: at..at,
                    text: text.into_bytes(),
                });
                id
            }
        };
        let ts_id = new_id("TS");
        let mut security = String::with_capacity(512);
        let q = |local: &str| {
            if soap_prefix.is_empty() {
                local.to_owned()
            } else {
                format!("{soap_prefix}:{local}")
            }
        };
        security.push_str("<wsse:Security xmlns:wsse=\"");
        security.push_str(ns::WSSE);
        security.push_str("\" xmlns:wsu=\"");
        security.push_str(ns::WSU);
        security.push('"');
        let must = match env.soap {
            Soap::V11 => "1",
            Soap::V12 => "true",
        };
        if soap_prefix.is_empty() {
            // A default-namespace envelope: the attribute needs a prefix of its own.
            security.push_str(&format!(
                " xmlns:soapenv=\"{}\" soapenv:mustUnderstand=\"{must}\"",
                env.soap.namespace()
            ));
        } else {
            security.push_str(&format!(" {soap_prefix}:mustUnderstand=\"{must}\""));
        }
        security.push('>');
        if let Some(ttl) = self.timestamp_ttl_ms {
            let ts = format!(
                "<wsu:Timestamp wsu:Id=\"{ts_id}\"><wsu:Created>{}</wsu:Created><wsu:Expires>{}</wsu:Expires></wsu:Timestamp>",
                format_datetime(now_ms),
                format_datetime(now_ms + ttl)
            );
            security.push_str(&ts);
        }
        security.push_str("</wsse:Security>");
        match env.header {
            Some(h) => {
                let span = doc.span(h);
                let content = doc.content_span(h);
                if content.start == span.end {
                    // `<soapenv:Header/>`: reopen it around the new block.
                    let tag = &doc.source()[span.start..span.end];
                    let open = tag.strip_suffix(b"/>").unwrap_or(tag);
                    let mut text = open.to_vec();
                    text.push(b'>');
                    text.extend_from_slice(security.as_bytes());
                    text.extend_from_slice(format!("</{}>", q("Header")).as_bytes());
                    edits.push(Edit { at: span, text });
                } else {
                    edits.push(Edit {
                        at: content.start..content.start,
                        text: security.into_bytes(),
                    });
                }
            }
            None => {
                let at = doc.content_span(env.envelope).start;
                let text = format!("<{}>{security}</{}>", q("Header"), q("Header"));
                edits.push(Edit {
                    at: at..at,
                    text: text.into_bytes(),
                });
            }
        }
        let pass1 = apply(doc.source(), edits);
        let doc = parse(&pass1, &self.limits)?;
        let env = Envelope::find(&doc)?;
        let Some(header) = env.header else {
            return fail(FaultKind::InvalidSecurity, "lost the Header while securing");
        };
        let Some(sec) = doc
            .element_children(header)
            .find(|&c| doc.is(c, ns::WSSE, "Security"))
        else {
            return fail(
                FaultKind::InvalidSecurity,
                "lost the Security header while securing",
            );
        };
        let ts_node = doc
            .element_children(sec)
            .find(|&c| doc.is(c, ns::WSU, "Timestamp"));

        let mut head = String::with_capacity(4096);
        let mut edits = Vec::new();
        if let Some(enc) = &self.encrypt {
            let Some(cert) = recipient else {
                return fail(
                    FaultKind::SecurityTokenUnavailable,
                    "no recipient certificate to encrypt for",
                );
            };
            let content = doc.content_span(env.body);
            if content.is_empty() {
                return fail(
                    FaultKind::InvalidSecurity,
                    "an empty Body has no content to encrypt",
                );
            }
            let plain = &doc.source()[content.clone()];
            let key = crypto::random_bytes(enc.cipher.key_len());
            let data = crypto::encrypt(enc.cipher, &key, plain).map_err(|e| {
                WsseError::new(FaultKind::FailedCheck, format!("encryption failed: {e}"))
            })?;
            let wrapped = cert
                .public_key()
                .wrap_key(enc.transport, &key)
                .map_err(|e| {
                    WsseError::new(FaultKind::FailedCheck, format!("key wrap failed: {e}"))
                })?;
            let (ek_id, ed_id) = (new_id("EK"), new_id("ED"));
            head.push_str(&format!(
                "<xenc:EncryptedKey xmlns:xenc=\"{}\" Id=\"{ek_id}\"><xenc:EncryptionMethod Algorithm=\"{}\">",
                ns::XENC,
                enc.transport.uri()
            ));
            if enc.transport == KeyTransport::RsaOaepMgf1p {
                head.push_str(&format!(
                    "<ds:DigestMethod xmlns:ds=\"{}\" Algorithm=\"{}\"/>",
                    ns::DS,
                    DigestAlg::Sha1.uri()
                ));
            }
            head.push_str(&format!(
                "</xenc:EncryptionMethod><ds:KeyInfo xmlns:ds=\"{}\">",
                ns::DS
            ));
            head.push_str(&token_reference(cert, enc.key_reference, None));
            head.push_str(&format!(
                "</ds:KeyInfo><xenc:CipherData><xenc:CipherValue>{}</xenc:CipherValue></xenc:CipherData><xenc:ReferenceList><xenc:DataReference URI=\"#{ed_id}\"/></xenc:ReferenceList></xenc:EncryptedKey>",
                encode_base64(&wrapped)
            ));
            let ed = format!(
                "<xenc:EncryptedData xmlns:xenc=\"{xenc}\" Id=\"{ed_id}\" Type=\"{content_type}\"><xenc:EncryptionMethod Algorithm=\"{alg}\"/><ds:KeyInfo xmlns:ds=\"{ds}\"><wsse:SecurityTokenReference xmlns:wsse=\"{wsse}\" xmlns:wsse11=\"{wsse11}\" wsse11:TokenType=\"{ekt}\"><wsse:Reference URI=\"#{ek_id}\"/></wsse:SecurityTokenReference></ds:KeyInfo><xenc:CipherData><xenc:CipherValue>{cv}</xenc:CipherValue></xenc:CipherData></xenc:EncryptedData>",
                xenc = ns::XENC,
                content_type = ns::ENC_CONTENT,
                alg = enc.cipher.uri(),
                ds = ns::DS,
                wsse = ns::WSSE,
                wsse11 = ns::WSSE11,
                ekt = ns::ENCRYPTED_KEY_TOKEN,
                cv = encode_base64(&data),
            );
            edits.push(Edit {
                at: content,
                text: ed.into_bytes(),
            });
        }
        if let Some(sign) = &self.sign {
            let mut references: Vec<(String, NodeId)> = Vec::new();
            if sign.sign_body {
                references.push((body_id.clone(), env.body));
            }
            if let (Some(ts), true) = (ts_node, sign.sign_timestamp) {
                references.push((ts_id.clone(), ts));
            }
            let mut signed_info = format!(
                "<ds:SignedInfo xmlns:ds=\"{ds}\"><ds:CanonicalizationMethod Algorithm=\"{c}\"></ds:CanonicalizationMethod><ds:SignatureMethod Algorithm=\"{sm}\"></ds:SignatureMethod>",
                ds = ns::DS,
                c = ns::EXC_C14N,
                sm = sign.algorithm.uri()
            );
            let mut buf = Vec::new();
            for (id, node) in &references {
                buf.clear();
                c14n::exclusive(&doc, *node, &[], false, &mut buf).map_err(|e| {
                    WsseError::new(
                        FaultKind::InvalidSecurity,
                        format!("cannot canonicalize: {e}"),
                    )
                })?;
                signed_info.push_str(&format!(
                    "<ds:Reference URI=\"#{id}\"><ds:Transforms><ds:Transform Algorithm=\"{c}\"></ds:Transform></ds:Transforms><ds:DigestMethod Algorithm=\"{dm}\"></ds:DigestMethod><ds:DigestValue>{dv}</ds:DigestValue></ds:Reference>",
                    c = ns::EXC_C14N,
                    dm = sign.digest.uri(),
                    dv = encode_base64(&crypto::digest(sign.digest, &buf))
                ));
            }
            signed_info.push_str("</ds:SignedInfo>");
            let value = sign
                .identity
                .key
                .sign(sign.algorithm, signed_info.as_bytes())
                .map_err(|e| {
                    WsseError::new(FaultKind::FailedCheck, format!("signing failed: {e}"))
                })?;
            let cert = &sign.identity.cert;
            let bst_id = new_id("X509");
            if sign.key_reference == KeyReference::Bst {
                head.push_str(&format!(
                    "<wsse:BinarySecurityToken EncodingType=\"{}\" ValueType=\"{}\" wsu:Id=\"{bst_id}\">{}</wsse:BinarySecurityToken>",
                    ns::BASE64_BINARY,
                    ns::X509V3,
                    encode_base64(cert.der())
                ));
            }
            head.push_str(&format!(
                "<ds:Signature xmlns:ds=\"{}\" Id=\"{}\">",
                ns::DS,
                new_id("SIG")
            ));
            head.push_str(&signed_info);
            head.push_str(&format!(
                "<ds:SignatureValue>{}</ds:SignatureValue><ds:KeyInfo>",
                encode_base64(&value)
            ));
            head.push_str(&token_reference(cert, sign.key_reference, Some(&bst_id)));
            head.push_str("</ds:KeyInfo></ds:Signature>");
        }
        let at = doc.content_span(sec).start;
        edits.push(Edit {
            at: at..at,
            text: head.into_bytes(),
        });
        let span = doc.span(sec);
        let src = doc.source();
        let mut plain = Vec::with_capacity(src.len() - span.len());
        plain.extend_from_slice(&src[..span.start]);
        plain.extend_from_slice(&src[span.end..]);
        Ok(Secured {
            message: apply(src, edits),
            plain,
        })
    }
}

/// Where attributes can be added to an element's start tag: before its `>` or `/>`.
fn start_tag_end(doc: &Document, el: NodeId) -> usize {
    let content = doc.content_span(el);
    let span = doc.span(el);
    let src = doc.source();
    if content.start == span.end && src[..span.end].ends_with(b"/>") {
        span.end - 2
    } else {
        content.start - 1
    }
}

fn token_reference(cert: &Certificate, how: KeyReference, bst_id: Option<&str>) -> String {
    let mut s = format!("<wsse:SecurityTokenReference xmlns:wsse=\"{}\">", ns::WSSE);
    match (how, bst_id) {
        (KeyReference::Bst, Some(id)) => {
            s.push_str(&format!(
                "<wsse:Reference URI=\"#{id}\" ValueType=\"{}\"/>",
                ns::X509V3
            ));
        }
        (KeyReference::Bst, None) => {
            // An encrypted key names its recipient's certificate by value instead.
            s.push_str(&format!(
                "<wsse:KeyIdentifier EncodingType=\"{}\" ValueType=\"{}\">{}</wsse:KeyIdentifier>",
                ns::BASE64_BINARY,
                ns::X509V3,
                encode_base64(cert.der())
            ));
        }
        (KeyReference::Ski, _) => s.push_str(&format!(
            "<wsse:KeyIdentifier EncodingType=\"{}\" ValueType=\"{}\">{}</wsse:KeyIdentifier>",
            ns::BASE64_BINARY,
            ns::X509_SKI,
            encode_base64(&cert.subject_key_identifier())
        )),
        (KeyReference::Thumbprint, _) => s.push_str(&format!(
            "<wsse:KeyIdentifier EncodingType=\"{}\" ValueType=\"{}\">{}</wsse:KeyIdentifier>",
            ns::BASE64_BINARY,
            ns::THUMBPRINT_SHA1,
            encode_base64(&cert.thumbprint_sha1())
        )),
        (KeyReference::IssuerSerial, _) => {
            let mut issuer = String::new();
            escape(&mut issuer, &rfc2253(cert.issuer()));
            s.push_str(&format!(
                "<ds:X509Data xmlns:ds=\"{}\"><ds:X509IssuerSerial><ds:X509IssuerName>{issuer}</ds:X509IssuerName><ds:X509SerialNumber>{}</ds:X509SerialNumber></ds:X509IssuerSerial></ds:X509Data>",
                ns::DS,
                cert.serial_decimal()
            ));
        }
    }
    s.push_str("</wsse:SecurityTokenReference>");
    s
}

/// RFC 2253 order (most specific first, no spaces) from x509-parser's display order.
fn rfc2253(dn: &str) -> String {
    let parts: Vec<&str> = dn.split(", ").collect();
    parts.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn parse(input: &[u8], limits: &Limits) -> Result<Document, WsseError> {
    Document::parse(input, limits)
        .map_err(|e| WsseError::new(FaultKind::InvalidSecurity, format!("unacceptable XML: {e}")))
}
