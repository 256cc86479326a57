//! The `wsse_verify` and `wsse_secure` steps: WS-Security through busbar-wssec.
//!
//! Keys, certificates and trust anchors are loaded when the config is built, so a wrong
//! password or an unreadable key fails `busbar validate`. Both steps need the whole body and
//! cost about a millisecond of RSA per request: small messages run on the event loop, large
//! ones on the shared blocking pool, like XSLT.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use busbar_config::{
    line_of, KeySourceConfig, LoadedConfig, Spanned, WsseAction, WsseAlgorithms, WsseCipher,
    WsseDigest, WsseKeyReference, WsseKeyTransport, WsseRecipient, WsseSecureConfig,
    WsseVerifyConfig,
};
use busbar_core::{
    Blame, Body, ErrorKind, Exchange, FaultCode, MediationError, MessageFormat, QName,
};
use busbar_wssec::crypto::{BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use busbar_wssec::keys::{Certificate, Identity, TrustStore};
use busbar_wssec::{
    EncryptSettings, FaultKind, KeyReference, Securer, SignSettings, Soap, Verifier, VerifyPolicy,
    WsseError,
};

/// The certificate that signed the request, kept for the response's encryption.
#[derive(Debug, Clone)]
pub struct RequestSigner(pub Arc<Certificate>);

/// A built `wsse_verify`.
#[derive(Debug)]
pub struct VerifyStep {
    verifier: Arc<Verifier>,
}

/// Whom a built `wsse_secure` encrypts for.
#[derive(Debug, Clone)]
enum Recipient {
    RequestSigner,
    Cert(Arc<Certificate>),
}

/// A built `wsse_secure`.
#[derive(Debug)]
pub struct SecureStep {
    securer: Arc<Securer>,
    recipient: Option<Recipient>,
}

/// Build errors: the line, the config key that failed, and why.
pub type BuildError = (Option<u64>, String, String);

fn identity(loaded: &LoadedConfig, k: &KeySourceConfig, at: &str) -> Result<Identity, BuildError> {
    match (&k.pkcs12, &k.key, &k.cert) {
        (Some(p12), None, None) => Identity::from_pkcs12(
            &loaded.resolve(&p12.value),
            k.password.as_ref().map_or("", |p| p.expose().as_str()),
        )
        .map_err(|e| (line_of(p12), format!("{at}.pkcs12"), e.to_string())),
        (None, Some(key), Some(cert)) => {
            Identity::from_pem(&loaded.resolve(&key.value), &loaded.resolve(&cert.value))
                .map_err(|e| (line_of(key), format!("{at}.key"), e.to_string()))
        }
        _ => Err((
            None,
            at.to_owned(),
            "give either 'pkcs12' (with 'password') or both 'key' and 'cert'".into(),
        )),
    }
}

fn certificates(
    loaded: &LoadedConfig,
    file: &Spanned<String>,
    at: &str,
) -> Result<Vec<Certificate>, BuildError> {
    let path = loaded.resolve(&file.value);
    let certs = busbar_wssec::keys::load_pem_certificates(&path)
        .map_err(|e| (line_of(file), at.to_owned(), e.to_string()))?;
    if certs.is_empty() {
        return Err((
            line_of(file),
            at.to_owned(),
            format!("no certificate in {}", path.display()),
        ));
    }
    Ok(certs)
}

impl VerifyStep {
    /// Builds the step, loading every key and certificate it names.
    pub fn build(
        loaded: &LoadedConfig,
        c: &WsseVerifyConfig,
        here: &str,
    ) -> Result<Self, BuildError> {
        let trust = match &c.trust {
            Some(t) => {
                let anchors = certificates(loaded, &t.ca, &format!("{here}.trust.ca"))?;
                let subject = match &t.subject {
                    Some(s) => Some(regex::Regex::new(&s.value).map_err(|e| {
                        (
                            line_of(s),
                            format!("{here}.trust.subject"),
                            format!("invalid regular expression: {e}"),
                        )
                    })?),
                    None => None,
                };
                Some(TrustStore::new(anchors, subject))
            }
            None => None,
        };
        let known_certs = match c.trust.as_ref().and_then(|t| t.certs.as_ref()) {
            Some(f) => certificates(loaded, f, &format!("{here}.trust.certs"))?,
            None => Vec::new(),
        };
        let decrypt = match &c.decrypt_key {
            Some(k) => Some(Arc::new(identity(
                loaded,
                k,
                &format!("{here}.decrypt_key"),
            )?)),
            None => None,
        };
        let policy = VerifyPolicy {
            require_timestamp: c.require.contains(&WsseAction::Timestamp),
            require_signature: c.require.contains(&WsseAction::Signature),
            require_encryption: c.require.contains(&WsseAction::Encryption),
            require_username_token: c.require.contains(&WsseAction::UsernameToken),
            trust,
            known_certs,
            decrypt,
            max_skew_ms: millis(c.timestamp.max_skew.0),
            max_age_ms: millis(c.timestamp.max_age.0),
            require_expires: c.timestamp.require_expires,
            legacy: c.algorithms == WsseAlgorithms::Legacy,
            remove_header: c.remove_header,
            users: c
                .users
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().clone()))
                .collect::<HashMap<_, _>>(),
            limits: busbar_wssec::dom::Limits {
                max_depth: c.max_depth,
                ..Default::default()
            },
        };
        let verifier = Verifier::new(
            policy,
            c.replay_cache.enabled.then_some(c.replay_cache.size),
            c.session_key_cache
                .enabled
                .then_some(c.session_key_cache.size),
        );
        Ok(Self {
            verifier: Arc::new(verifier),
        })
    }

    /// Verifies the request and replaces it with its plain form.
    pub async fn apply(&self, ex: &mut Exchange, max_body: u64) -> Result<(), MediationError> {
        let input = ex.body_mut().bytes(max_body).await?;
        let expected = match ex.format {
            MessageFormat::Soap(busbar_core::SoapVersion::V11) => Some(Soap::V11),
            MessageFormat::Soap(busbar_core::SoapVersion::V12) => Some(Soap::V12),
            MessageFormat::Problem => None,
        };
        let verifier = self.verifier.clone();
        let run = move || verifier.verify(&input, expected, SystemTime::now());
        let verified = crate::xslt::run_cpu_bound(ex, run)
            .await?
            .map_err(|e| fault(e, ex))?;
        if let Some(cert) = verified.signer {
            ex.request.extensions.insert(RequestSigner(cert));
        }
        ex.set_body(Body::full(verified.message));
        Ok(())
    }
}

impl SecureStep {
    /// Builds the step, loading its keys.
    pub fn build(
        loaded: &LoadedConfig,
        c: &WsseSecureConfig,
        here: &str,
    ) -> Result<Self, BuildError> {
        let sign = match &c.sign {
            Some(s) => {
                let source = match &s.cert {
                    Some(cert) => KeySourceConfig {
                        pkcs12: None,
                        password: None,
                        key: Some(s.key.clone()),
                        cert: Some(cert.clone()),
                    },
                    None => KeySourceConfig {
                        pkcs12: Some(s.key.clone()),
                        password: s.password.clone(),
                        key: None,
                        cert: None,
                    },
                };
                let id = identity(loaded, &source, &format!("{here}.sign"))
                    .map_err(|(_, _, msg)| (line_of(&s.key), format!("{here}.sign.key"), msg))?;
                let (algorithm, digest) = match s.digest {
                    WsseDigest::Sha1 => (SignatureAlg::RsaSha1, DigestAlg::Sha1),
                    WsseDigest::Sha256 => (SignatureAlg::RsaSha256, DigestAlg::Sha256),
                };
                Some(SignSettings {
                    identity: Arc::new(id),
                    algorithm,
                    digest,
                    key_reference: key_reference(s.key_reference),
                    sign_body: true,
                    sign_timestamp: true,
                })
            }
            None => None,
        };
        let (encrypt, recipient) = match &c.encrypt {
            Some(e) => {
                let recipient = match &e.recipient {
                    WsseRecipient::Named(_) => Recipient::RequestSigner,
                    WsseRecipient::Cert { cert } => {
                        let mut certs =
                            certificates(loaded, cert, &format!("{here}.encrypt.for.cert"))?;
                        Recipient::Cert(Arc::new(certs.remove(0)))
                    }
                };
                let settings = EncryptSettings {
                    cipher: match e.data {
                        WsseCipher::Aes128Cbc => BlockCipher::Aes128Cbc,
                        WsseCipher::Aes256Cbc => BlockCipher::Aes256Cbc,
                        WsseCipher::Aes128Gcm => BlockCipher::Aes128Gcm,
                        WsseCipher::Aes256Gcm => BlockCipher::Aes256Gcm,
                    },
                    transport: match e.key_transport {
                        WsseKeyTransport::RsaOaep => KeyTransport::RsaOaepMgf1p,
                        WsseKeyTransport::Rsa15 => KeyTransport::Rsa15,
                    },
                    key_reference: key_reference(e.key_reference),
                };
                (Some(settings), Some(recipient))
            }
            None => (None, None),
        };
        Ok(Self {
            securer: Arc::new(Securer {
                timestamp_ttl_ms: c.timestamp.as_ref().map(|t| millis(t.ttl.0)),
                sign,
                encrypt,
                limits: busbar_wssec::dom::Limits::default(),
            }),
            recipient,
        })
    }

    /// Secures the current message.
    pub async fn apply(&self, ex: &mut Exchange, max_body: u64) -> Result<(), MediationError> {
        let recipient = match &self.recipient {
            None => None,
            Some(Recipient::Cert(c)) => Some(c.clone()),
            Some(Recipient::RequestSigner) => match ex.request.extensions.get::<RequestSigner>() {
                Some(s) => Some(s.0.clone()),
                None => {
                    return Err(MediationError::internal(
                        "wsse_secure encrypts for the request's signer, but no wsse_verify \
                         verified a signature on this request",
                    ))
                }
            },
        };
        let input = ex.body_mut().bytes(max_body).await?;
        let securer = self.securer.clone();
        let run = move || securer.secure(&input, recipient.as_deref(), SystemTime::now());
        let out = crate::xslt::run_cpu_bound(ex, run).await?.map_err(|e| {
            MediationError::new(
                ErrorKind::Internal,
                Blame::Upstream,
                "The response could not be secured",
            )
            .with_source(e)
        })?;
        ex.set_body(Body::full(out));
        Ok(())
    }
}

fn key_reference(k: WsseKeyReference) -> KeyReference {
    match k {
        WsseKeyReference::Bst => KeyReference::Bst,
        WsseKeyReference::Ski => KeyReference::Ski,
        WsseKeyReference::IssuerSerial => KeyReference::IssuerSerial,
        WsseKeyReference::Thumbprint => KeyReference::Thumbprint,
    }
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The client sees the fault code and a generic string; the detail goes to the log only.
fn fault(e: WsseError, ex: &Exchange) -> MediationError {
    tracing::warn!(proxy = &*ex.proxy, code = ?e.kind, "WS-Security check failed: {}", e.detail);
    let code = match (e.kind, e.kind.qname()) {
        (FaultKind::VersionMismatch, _) => FaultCode::VersionMismatch,
        (FaultKind::MustUnderstand, _) => FaultCode::MustUnderstand,
        (_, Some((prefix, ns, local))) => FaultCode::Sender(QName { prefix, ns, local }),
        (_, None) => FaultCode::Client,
    };
    MediationError::new(
        ErrorKind::Security,
        Blame::Client,
        format!("Security validation failed: {}", e.kind.faultstring()),
    )
    .with_fault_code(code)
}
