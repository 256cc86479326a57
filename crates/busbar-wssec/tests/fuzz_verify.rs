//! Fuzzing the WS-Security verifier with mutated secured messages (see docs/fuzzing.md): no
//! message panics or hangs `Verifier::verify`, every refusal is a `WsseError` with a detail
//! for the log, and a verifier that requires a signature never accepts a message without a
//! signer. The seeds are the corpus files plus messages signed (and encrypted) at start with
//! this run's test keys, so mutations reach the digest, signature and decryption checks.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use busbar_wssec::crypto::{BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use busbar_wssec::keys::{load_pem_certificates, Identity, TrustStore};
use busbar_wssec::{
    EncryptSettings, KeyReference, Securer, SignSettings, Verifier, VerifyPolicy, WsseError,
};
use common::{fixture, P12_PASSWORD};

const MESSAGE: &[u8] = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header/><soapenv:Body><m:buy xmlns:m=\"urn:m\"><symbol>IBM</symbol><note>a &amp; b</note></m:buy></soapenv:Body></soapenv:Envelope>";

/// The syntax of XML and of the WS-Security vocabulary.
const DICTIONARY: &[&[u8]] = &[
    b"<",
    b">",
    b"</",
    b"/>",
    b"\"",
    b"=",
    b"#",
    b"&amp;",
    b"&#x",
    b"<![CDATA[",
    b"]]>",
    b"<!--x-->",
    b"<!DOCTYPE a>",
    b" xmlns=\"\"",
    b" xmlns:ds=\"http://www.w3.org/2000/09/xmldsig#\"",
    b" wsu:Id=\"Body-1\"",
    b" Id=\"x\"",
    b" URI=\"#",
    b" URI=\"\"",
    b"<ds:Reference URI=\"#TS-1\">",
    b"<ds:Transform Algorithm=\"http://www.w3.org/TR/1999/REC-xpath-19991116\"/>",
    b"<ds:Transform Algorithm=\"http://www.w3.org/2000/09/xmldsig#enveloped-signature\"/>",
    b"http://www.w3.org/2001/04/xmlenc#sha512",
    b"http://www.w3.org/2000/09/xmldsig#hmac-sha1",
    b"<wsse:Security>",
    b"</wsse:Security>",
    b"<wsu:Timestamp>",
    b"9999-12-31T23:59:59Z",
    b"2000-02-30T25:61:61.5+14:00",
    b"====",
    b"AAAA",
    b"\r\n",
    b"\t",
    b"\xc3\x28",
    b"\x00",
];

fn policy(strict: bool) -> VerifyPolicy {
    let ca = load_pem_certificates(&fixture().path("ca.pem")).unwrap();
    let server =
        Arc::new(Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap());
    VerifyPolicy {
        require_timestamp: strict,
        require_signature: strict,
        require_encryption: false,
        require_username_token: false,
        trust: Some(TrustStore::new(ca, None)),
        // For the signatures that name their certificate instead of carrying it.
        known_certs: load_pem_certificates(&fixture().path("client.pem")).unwrap(),
        decrypt: Some(server),
        max_skew_ms: 300_000,
        max_age_ms: 3_600_000,
        require_expires: false,
        legacy: !strict,
        remove_header: strict,
        users: [("alice".to_owned(), "secret".to_owned())]
            .into_iter()
            .collect(),
        limits: Default::default(),
    }
}

/// Messages secured with this run's keys: signed in both profiles, with each key reference,
/// and encrypted for the verifier's own key.
fn secured(now: SystemTime) -> Vec<Vec<u8>> {
    let client = Arc::new(
        Identity::from_pem(&fixture().path("client.key"), &fixture().path("client.pem")).unwrap(),
    );
    let server = Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap();
    let profiles = [
        (
            KeyReference::Bst,
            SignatureAlg::RsaSha256,
            DigestAlg::Sha256,
            None,
        ),
        (
            KeyReference::IssuerSerial,
            SignatureAlg::RsaSha1,
            DigestAlg::Sha1,
            Some((
                BlockCipher::Aes128Cbc,
                KeyTransport::Rsa15,
                KeyReference::IssuerSerial,
            )),
        ),
        (
            KeyReference::Ski,
            SignatureAlg::RsaSha256,
            DigestAlg::Sha256,
            Some((
                BlockCipher::Aes256Gcm,
                KeyTransport::RsaOaepMgf1p,
                KeyReference::Ski,
            )),
        ),
    ];
    profiles
        .into_iter()
        .map(|(key_reference, algorithm, digest, encrypt)| {
            let securer = Securer {
                timestamp_ttl_ms: Some(300_000),
                sign: Some(SignSettings {
                    identity: client.clone(),
                    algorithm,
                    digest,
                    key_reference,
                    sign_body: true,
                    sign_timestamp: true,
                }),
                encrypt: encrypt.map(|(cipher, transport, key_reference)| EncryptSettings {
                    cipher,
                    transport,
                    key_reference,
                }),
                limits: Default::default(),
            };
            securer.secure(MESSAGE, Some(&server.cert), now).unwrap()
        })
        .collect()
}

fn refusal_ok(e: &WsseError, what: &str) -> Result<(), String> {
    if e.detail.trim().is_empty() {
        return Err(format!("{what}: refusal {:?} without a detail", e.kind));
    }
    Ok(())
}

fn check(lenient: &Verifier, strict: &Verifier, now: SystemTime, msg: &[u8]) -> Result<(), String> {
    match lenient.verify(msg, None, now) {
        Ok(v) if v.message.is_empty() => return Err("lenient: accepted, but empty".into()),
        Ok(_) => {}
        Err(e) => refusal_ok(&e, "lenient")?,
    }
    match strict.verify(msg, None, now) {
        Ok(v) if v.signer.is_none() => Err("strict: accepted without a signer".into()),
        Ok(_) => Ok(()),
        Err(e) => refusal_ok(&e, "strict"),
    }
}

#[test]
fn mutated_secured_messages_never_panic_the_verifier() {
    // After the keys are made: their certificates are valid from the moment they are.
    fixture();
    let now = SystemTime::now();
    let seeds = secured(now);
    let lenient = Verifier::new(policy(false), None, Some(16));
    let strict = Verifier::new(policy(true), None, None);
    for s in &seeds {
        // The seeds themselves verify, so mutations start from accepted messages.
        lenient.verify(s, None, now).unwrap();
    }
    harness::run(
        harness::Target {
            name: "wssec",
            extra_seeds: seeds,
            dictionary: DICTIONARY,
            max_len: 64 * 1024,
            case_timeout: Duration::from_secs(20),
        },
        |msg| check(&lenient, &strict, now, msg),
    );
}
