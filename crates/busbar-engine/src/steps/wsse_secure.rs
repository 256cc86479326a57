//! The `wsse_secure` step: secures the current message (usually the response): timestamp,
//! signature, encryption of the Body's content. Config: `busbar_config::WsseSecureConfig`.
//!
//! The signing key and the recipient's certificate are loaded when the config is built (once
//! per file, see `keys.rs`). Small messages run on the event loop, large ones on the bounded
//! CPU pool.

use std::sync::Arc;
use std::time::SystemTime;

use busbar_config::{
    KeySourceConfig, WsseCipher, WsseDigest, WsseKeyReference, WsseKeyTransport, WsseRecipient,
    WsseSecureConfig,
};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError};
use busbar_wssec::crypto::{BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use busbar_wssec::keys::Certificate;
use busbar_wssec::{EncryptSettings, KeyReference, SecureError, Securer, SignSettings};

use super::wsse_verify::{millis, RequestSigner};
use super::{Apply, BuildCx, Failed, StepCx};

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

impl SecureStep {
    /// Builds the step, loading its keys.
    pub fn build(c: &WsseSecureConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
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
                let id = cx.identity_reported_at(
                    &source,
                    &format!("{here}.sign"),
                    Some(format!("{here}.sign.key")),
                )?;
                let (algorithm, digest) = match s.digest {
                    WsseDigest::Sha1 => (SignatureAlg::RsaSha1, DigestAlg::Sha1),
                    WsseDigest::Sha256 => (SignatureAlg::RsaSha256, DigestAlg::Sha256),
                };
                Some(SignSettings {
                    identity: id,
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
                            cx.certificates(cert, &format!("{here}.encrypt.for.cert"))?;
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
}

impl Apply for SecureStep {
    /// Secures the current message.
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
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
        let answer = ex.response.is_some();
        let input = ex.body_mut().bytes(cx.max_body()).await?;
        let size = input.len() as u64;
        let securer = self.securer.clone();
        let run = move || securer.secure(&input, recipient.as_deref(), SystemTime::now());
        let out = cx.offload(size, run).await?.map_err(|e| {
            // Two Security headers for one receiver would be refused by it (busbar's own
            // wsse_verify does), and dropping the back end's would drop what it secured: the
            // answer is refused instead, saying why, since the config or the back end must
            // change.
            let reason = match (&e, answer) {
                (SecureError::AlreadySecured, true) => {
                    "The back end's answer already carries a Security header"
                }
                (SecureError::AlreadySecured, false) => {
                    "The message already carries a Security header"
                }
                (SecureError::Message(_), _) => "The response could not be secured",
            };
            MediationError::new(ErrorKind::Internal, Blame::Upstream, reason).with_source(e)
        })?;
        ex.set_body(Body::full(out));
        Ok(Flow::Continue)
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn a_missing_signing_key_is_a_build_error_at_sign_key() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_secure: { sign: { key: nope.p12, password: x } }\n",
            &std::env::temp_dir(),
        );
        let errors = build(&l).err().unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:5: sequences.s[0].wsse_secure.sign.key: "),
            "{errors:?}"
        );
    }

    #[test]
    fn a_timestamp_is_added_to_the_message() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_secure: { timestamp: { ttl: 1m } }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let soap = b"<soapenv:Envelope xmlns:soapenv='http://schemas.xmlsoap.org/soap/envelope/'><soapenv:Body><a/></soapenv:Body></soapenv:Envelope>";
        let mut ex = exchange(&[], soap);
        ex.response = Some(http::Response::new(busbar_core::Body::full(&soap[..])));
        assert!(run_steps(&steps, &mut ex).is_ok());
        let out = String::from_utf8_lossy(&body_of(&mut ex)).into_owned();
        assert!(
            out.contains("Timestamp") && out.contains("Expires"),
            "{out}"
        );
        assert!(out.contains("<a/>"), "{out}");
    }

    #[test]
    fn an_answer_that_already_carries_a_security_header_is_not_secured() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_secure: { timestamp: { ttl: 1m } }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let wsse =
            "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
        let answer = |security: &str| {
            format!(
                "<soapenv:Envelope xmlns:soapenv='http://schemas.xmlsoap.org/soap/envelope/'><soapenv:Header>{security}</soapenv:Header><soapenv:Body><a/></soapenv:Body></soapenv:Envelope>"
            )
        };
        let secure = |soap: &str| {
            let mut ex = exchange(&[], soap.as_bytes());
            ex.response = Some(http::Response::new(busbar_core::Body::full(
                soap.as_bytes().to_vec(),
            )));
            run_steps(&steps, &mut ex).map(|_| body_of(&mut ex))
        };
        let next = "http://schemas.xmlsoap.org/soap/actor/next";
        for security in [
            format!("<wsse:Security xmlns:wsse='{wsse}'/>"),
            format!("<wsse:Security xmlns:wsse='{wsse}' soapenv:actor='{next}'/>"),
        ] {
            let e = secure(&answer(&security)).expect_err(&security);
            assert_eq!(
                e.reason, "The back end's answer already carries a Security header",
                "{security}"
            );
            assert_eq!(e.blame, busbar_core::Blame::Upstream);
            assert_eq!(e.status(busbar_core::MessageFormat::Problem), 502);
        }
        // One for another actor is no concern of ours: it travels on beside the new one.
        let other = format!("<wsse:Security xmlns:wsse='{wsse}' soapenv:actor='urn:other'/>");
        let out = secure(&answer(&other)).unwrap_or_else(|e| panic!("{e}"));
        let out = String::from_utf8_lossy(&out);
        assert_eq!(out.matches("<wsse:Security ").count(), 2, "{out}");
    }

    #[test]
    fn an_answer_with_an_element_after_its_body_is_not_secured() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_secure: { timestamp: { ttl: 1m } }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let soap = b"<soapenv:Envelope xmlns:soapenv='http://schemas.xmlsoap.org/soap/envelope/'><soapenv:Body><a/></soapenv:Body><x:Trailer xmlns:x='urn:x'/></soapenv:Envelope>";
        let mut ex = exchange(&[], soap);
        ex.response = Some(http::Response::new(busbar_core::Body::full(&soap[..])));
        let e = run_steps(&steps, &mut ex).expect_err("secured an answer with a trailer");
        assert_eq!(e.reason, "The response could not be secured");
        assert_eq!(e.blame, busbar_core::Blame::Upstream);
    }
}
