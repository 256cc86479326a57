//! The `wsse_verify` step: checks a WS-Security request (decrypts, verifies the signature and
//! its coverage, checks trust and freshness) and forwards it without its `wsse:Security`
//! header. Config: `busbar_config::WsseVerifyConfig`.
//!
//! Keys, certificates and trust anchors are loaded when the config is built (once per file,
//! see `keys.rs`), so a wrong password or an unreadable key fails `busbar validate`. The
//! replay cache is shared by every `wsse_verify` of a config and survives its reloads. A
//! verification costs about a millisecond of RSA: small messages run on the event loop, large
//! ones on the bounded CPU pool.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use busbar_config::{line_of, WsseAction, WsseAlgorithms, WsseSubjectConfig, WsseVerifyConfig};
use busbar_core::{
    Blame, Body, ErrorKind, Exchange, FaultCode, Flow, MediationError, MessageFormat, QName,
};
use busbar_wssec::cache::ReplayCache;
use busbar_wssec::keys::{Certificate, DnRule, SubjectRule, TrustStore};
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
                // Both are looked at, so both problems are reported at once.
                let anchors = cx.certificates(&t.ca, &format!("{here}.trust.ca"));
                let subject = match &t.subject {
                    Some(WsseSubjectConfig::Dn(dn)) => DnRule::parse(&dn.value)
                        .map(|r| Some(SubjectRule::Dn(r)))
                        .map_err(|e| {
                            cx.fail(
                                line_of(dn),
                                format!("{here}.trust.subject"),
                                format!("invalid DN: {e}"),
                            )
                        }),
                    Some(WsseSubjectConfig::Pattern(p)) => SubjectRule::pattern(&p.pattern.value)
                        .map(Some)
                        .map_err(|e| {
                            cx.fail(
                                line_of(&p.pattern),
                                format!("{here}.trust.subject.pattern"),
                                format!("invalid regular expression: {e}"),
                            )
                        }),
                    None => Ok(None),
                };
                let (anchors, subject) = (anchors?, subject?);
                Some(TrustStore::with_subject(anchors, subject))
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
        let replay = c
            .replay_cache
            .enabled
            .then(|| shared_replay_cache(&cx.loaded.file, c.replay_cache.size));
        let verifier = Verifier::new(
            policy,
            None,
            c.session_key_cache
                .enabled
                .then_some(c.session_key_cache.size),
        )
        .with_replay_cache(replay)
        .with_max_references(c.max_references);
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

/// The replay cache of every `wsse_verify` built from the config file `file`: one per config,
/// so that a message accepted by one proxy is a replay for the others, and kept while a
/// runtime built from that file holds it, so that a reload (built beside the old runtime)
/// takes it over. Engines started from different files (tests) do not share.
fn shared_replay_cache(file: &Path, size: usize) -> Arc<ReplayCache> {
    static CACHES: Mutex<Vec<(PathBuf, Weak<ReplayCache>)>> = Mutex::new(Vec::new());
    let key = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let mut caches = CACHES.lock().unwrap_or_else(|p| p.into_inner());
    caches.retain(|(_, w)| w.strong_count() > 0);
    if let Some(cache) = caches
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        cache.ensure_capacity(size);
        return cache;
    }
    let cache = Arc::new(ReplayCache::new(size));
    caches.push((key, Arc::downgrade(&cache)));
    cache
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

    #[test]
    fn a_bad_subject_is_a_build_error_at_its_key() {
        let dir = std::env::temp_dir();
        let ca = dir.join(format!("busbar-wsse-unit-ca-{}.pem", std::process::id()));
        // Not a certificate: only the subject's error is looked at below.
        std::fs::write(&ca, "").unwrap_or_else(|e| panic!("{e}"));
        for (subject, at) in [
            ("'XX=client'", "trust.subject: invalid DN"),
            (
                "{ pattern: '(' }",
                "trust.subject.pattern: invalid regular expression",
            ),
        ] {
            let l = loaded(
                &format!(
                    "sequences:\n  s:\n    - wsse_verify: {{ require: [signature], trust: {{ ca: {}, subject: {subject} }} }}\n",
                    ca.display()
                ),
                &dir,
            );
            let errors = build(&l).err().unwrap_or_default();
            assert!(
                errors.iter().any(|e| e.contains(at)),
                "{subject}: {errors:?}"
            );
        }
        let _ = std::fs::remove_file(ca);
    }

    #[test]
    fn steps_of_one_config_share_a_replay_cache_that_outlives_a_reload() {
        use super::shared_replay_cache;
        use std::sync::Arc;
        let file = std::path::Path::new("replay-unit-test.yaml");
        let a = shared_replay_cache(file, 10);
        let b = shared_replay_cache(file, 20);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.capacity(), 20);
        let other = shared_replay_cache(std::path::Path::new("other-unit-test.yaml"), 10);
        assert!(!Arc::ptr_eq(&a, &other));
        // A reload builds beside the running config, so it finds the cache and takes it over.
        let reloaded = shared_replay_cache(file, 5);
        drop((a, b));
        assert!(Arc::ptr_eq(&reloaded, &shared_replay_cache(file, 5)));
        // Once nothing uses it, a new config starts afresh.
        let weak = Arc::downgrade(&reloaded);
        drop(reloaded);
        assert!(weak.upgrade().is_none());
    }
}
