//! The order in which a signature is checked: what a forged message can make the verifier do
//! before it is refused.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::SystemTime;

use busbar_wssec::crypto::{DigestAlg, SignatureAlg};
use busbar_wssec::keys::{load_pem_certificates, Identity, TrustStore};
use busbar_wssec::{FaultKind, KeyReference, Securer, SignSettings, Verifier, VerifyPolicy};
use common::{fixture, P12_PASSWORD};

const MESSAGE: &[u8] = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header/><soapenv:Body><m:buy xmlns:m=\"urn:m\"><symbol>IBM</symbol></m:buy></soapenv:Body></soapenv:Envelope>";

fn signed() -> String {
    let identity =
        Arc::new(Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap());
    let securer = Securer {
        timestamp_ttl_ms: Some(300_000),
        sign: Some(SignSettings {
            identity,
            algorithm: SignatureAlg::RsaSha256,
            digest: DigestAlg::Sha256,
            key_reference: KeyReference::Bst,
            sign_body: true,
            sign_timestamp: true,
        }),
        encrypt: None,
        limits: Default::default(),
    };
    String::from_utf8(securer.secure(MESSAGE, None, SystemTime::now()).unwrap()).unwrap()
}

fn verifier() -> Verifier {
    let ca = load_pem_certificates(&fixture().path("ca.pem")).unwrap();
    Verifier::new(
        VerifyPolicy {
            require_timestamp: true,
            require_signature: true,
            require_encryption: false,
            require_username_token: false,
            trust: Some(TrustStore::new(ca, None)),
            known_certs: Vec::new(),
            decrypt: None,
            max_skew_ms: 300_000,
            max_age_ms: 300_000,
            require_expires: true,
            legacy: false,
            remove_header: true,
            users: Default::default(),
            limits: Default::default(),
        },
        Some(100),
        None,
    )
}

#[test]
fn a_bad_signature_value_is_found_before_any_digest_is_computed() {
    let good = signed();
    assert!(verifier()
        .verify(good.as_bytes(), None, SystemTime::now())
        .is_ok());
    // The Body changed and the SignatureValue broken: the value is checked first, so the
    // Body's digest is never computed.
    let from = good.find("<ds:SignatureValue>").unwrap() + "<ds:SignatureValue>".len();
    let mut forged = good.replace("<symbol>IBM</symbol>", "<symbol>EVIL</symbol>");
    let at = from + 5;
    let flipped = if &forged[at..=at] == "A" { "B" } else { "A" };
    forged.replace_range(at..=at, flipped);
    let e = verifier()
        .verify(forged.as_bytes(), None, SystemTime::now())
        .unwrap_err();
    assert_eq!(e.kind, FaultKind::FailedCheck);
    assert_eq!(e.detail, "signature value does not verify");
}

#[test]
fn references_over_the_limit_are_refused_before_the_signature_is_checked() {
    let good = signed();
    // Body and Timestamp: two references.
    let e = verifier()
        .with_max_references(1)
        .verify(good.as_bytes(), None, SystemTime::now())
        .unwrap_err();
    assert_eq!(e.kind, FaultKind::InvalidSecurity);
    assert!(e.detail.contains("2 references"), "{}", e.detail);
    assert!(verifier()
        .with_max_references(2)
        .verify(good.as_bytes(), None, SystemTime::now())
        .is_ok());
}
