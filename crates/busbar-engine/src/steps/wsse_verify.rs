//! The `wsse_verify` step: checks a WS-Security request (decrypts, verifies the signature and
//! its coverage, checks trust and freshness) and forwards it without its `wsse:Security`
//! header. Config: `busbar_config::WsseVerifyConfig`.
//!
//! Keys, certificates and trust anchors are loaded when the config is built (once per file,
//! see `keys.rs`), so a wrong password or an unreadable key fails `busbar validate`. A
//! verification costs about a millisecond of RSA: small messages run on the event loop, large
//! ones on the bounded CPU pool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use busbar_config::{line_of, WsseAction, WsseAlgorithms, WsseVerifyConfig};
use busbar_core::{
    Blame, Body, ErrorKind, Exchange, FaultCode, Flow, MediationError, MessageFormat, QName,
};
use busbar_wssec::keys::{Certificate, TrustStore};
use busbar_wssec::{FaultKind, Verifier, VerifyPolicy, WsseError};

use super::{Apply, BuildCx, Failed, StepCx};

/// The certificate that signed the request, kept for the response's encryption.
#[derive(Debug, Clone)]
pub struct RequestSigner(pub Arc<Certificate>);

/// A built `wsse_verify`.
#[derive(Debug)]
pub struct VerifyStep {
    verifier: Arc<Verifier>,
}

impl VerifyStep {
    /// Builds the step, loading every key and certificate it names.
    pub fn build(c: &WsseVerifyConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let trust = match &c.trust {
            Some(t) => {
                let anchors = cx.certificates(&t.ca, &format!("{here}.trust.ca"))?;
                let subject = match &t.subject {
                    Some(s) => Some(regex::Regex::new(&s.value).map_err(|e| {
                        cx.fail(
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
            Some(f) => cx.certificates(f, &format!("{here}.trust.certs"))?,
            None => Vec::new(),
        };
        let decrypt = match &c.decrypt_key {
            Some(k) => Some(cx.identity(k, &format!("{here}.decrypt_key"))?),
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
}

impl Apply for VerifyStep {
    /// Verifies the request and replaces it with its plain form.
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let input = ex.body_mut().bytes(cx.max_body()).await?;
        let expected = match ex.format {
            MessageFormat::Soap(v) => Some(v),
            MessageFormat::Problem => None,
        };
        let verifier = self.verifier.clone();
        let size = input.len() as u64;
        let run = move || verifier.verify(&input, expected, SystemTime::now());
        let verified = cx.offload(size, run).await?.map_err(|e| fault(e, ex))?;
        if let Some(cert) = verified.signer {
            ex.request.extensions.insert(RequestSigner(cert));
        }
        ex.set_body(Body::full(verified.message));
        Ok(Flow::Continue)
    }
}

pub(super) fn millis(d: std::time::Duration) -> i64 {
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use busbar_core::{ErrorKind, FaultCode};

    #[test]
    fn a_missing_trust_file_is_a_build_error_at_its_key_and_line() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_verify: { require: [signature], trust: { ca: nope.pem } }\n",
            &std::env::temp_dir(),
        );
        let errors = build(&l).err().unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:5: sequences.s[0].wsse_verify.trust.ca: "),
            "{errors:?}"
        );
    }

    #[test]
    fn a_message_without_a_security_header_gets_a_security_fault() {
        let l = loaded(
            "sequences:\n  s:\n    - wsse_verify: { require: [username_token], users: { alice: pw } }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let soap = b"<soapenv:Envelope xmlns:soapenv='http://schemas.xmlsoap.org/soap/envelope/'><soapenv:Body><a/></soapenv:Body></soapenv:Envelope>";
        let mut ex = exchange(&[("content-type", "text/xml")], soap);
        let e = run_steps(&steps, &mut ex)
            .err()
            .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(e.kind, ErrorKind::Security);
        assert!(
            matches!(e.fault_code, Some(FaultCode::Sender(_))),
            "{:?}",
            e.fault_code
        );
        assert_eq!(e.step.as_deref(), Some("sequences.s[0].wsse_verify"));
    }
}
