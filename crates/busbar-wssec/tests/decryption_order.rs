//! What an attacker can learn from the verifier about a ciphertext, and what a forged or
//! captured message can make it do, before it is refused.
//!
//! A signed and encrypted request (the client's key, encrypted for the server with RSA-1.5
//! and AES-128-CBC, the legacy profile) is altered the ways the XML Encryption attacks alter
//! one: its IV and ciphertext flipped byte by byte, its `Type` changed, its EncryptedKey
//! repeated, clear text put beside its EncryptedData.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use busbar_wssec::crypto::{self, BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use busbar_wssec::keys::{load_pem_certificates, Identity, TrustStore};
use busbar_wssec::{
    EncryptSettings, FaultKind, KeyReference, Securer, SignSettings, Verifier, VerifyPolicy,
    WsseError,
};
use common::{cipher_values, fixture, P12_PASSWORD};

const MESSAGE: &[u8] = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header/><soapenv:Body><m:buy xmlns:m=\"urn:m\"><card>4111111111111111</card><symbol>IBM</symbol></m:buy></soapenv:Body></soapenv:Envelope>";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn server() -> Identity {
    Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap()
}

fn signer(name: &str) -> Option<SignSettings> {
    let f = fixture();
    let identity = Identity::from_pem(
        &f.path(&format!("{name}.key")),
        &f.path(&format!("{name}.pem")),
    )
    .unwrap();
    Some(SignSettings {
        identity: Arc::new(identity),
        algorithm: SignatureAlg::RsaSha1,
        digest: DigestAlg::Sha1,
        key_reference: KeyReference::Bst,
        sign_body: true,
        sign_timestamp: true,
    })
}

/// The request as a client sends it: signed by `sign`, encrypted for the server.
fn request(sign: Option<SignSettings>) -> String {
    let securer = Securer {
        timestamp_ttl_ms: Some(300_000),
        sign,
        encrypt: Some(EncryptSettings {
            cipher: BlockCipher::Aes128Cbc,
            transport: KeyTransport::Rsa15,
            key_reference: KeyReference::IssuerSerial,
        }),
        limits: Default::default(),
    };
    let id = server();
    let m = securer
        .secure(MESSAGE, Some(&id.cert), SystemTime::now())
        .unwrap();
    String::from_utf8(m).unwrap()
}

fn verifier(require_signature: bool, replay_cache: Option<usize>) -> Verifier {
    let ca = load_pem_certificates(&fixture().path("ca.pem")).unwrap();
    Verifier::new(
        VerifyPolicy {
            require_timestamp: require_signature,
            require_signature,
            require_encryption: true,
            require_username_token: false,
            trust: Some(TrustStore::new(ca, None)),
            known_certs: Vec::new(),
            decrypt: Some(Arc::new(server())),
            max_skew_ms: 300_000,
            max_age_ms: 300_000,
            require_expires: true,
            legacy: true,
            remove_header: true,
            users: Default::default(),
            limits: Default::default(),
        },
        replay_cache,
        None,
    )
}

fn verify(v: &Verifier, message: &str) -> Result<Vec<u8>, WsseError> {
    v.verify(message.as_bytes(), None, SystemTime::now())
        .map(|ok| ok.message)
}

/// `message` with byte `at` of the Body's ciphertext (IV first) replaced by `value`.
fn with_cipher_byte(message: &str, at: usize, value: u8) -> String {
    let body = cipher_values(message)[1].clone();
    let mut data = B64.decode(&message[body.clone()]).unwrap();
    data[at] = value;
    let mut m = message.to_owned();
    m.replace_range(body, &B64.encode(data));
    m
}

/// Every answer to the last byte of the ciphertext's second-to-last block set to each of its
/// 255 other values: the probe of a CBC padding oracle, which changes the padding byte of the
/// decrypted last block (and garbles the block before it).
fn answers_to_padding_probe(v: &Verifier, message: &str) -> BTreeSet<String> {
    let body = cipher_values(message)[1].clone();
    let data = B64.decode(&message[body]).unwrap();
    let at = data.len() - 17;
    (0..=255u8)
        .filter(|&b| b != data[at])
        .map(|b| match verify(v, &with_cipher_byte(message, at, b)) {
            Ok(_) => "accepted".to_owned(),
            Err(e) => format!("{:?}", e.kind),
        })
        .collect()
}

#[test]
fn a_captured_message_with_its_ciphertext_altered_is_a_replay_before_anything_is_decrypted() {
    let v = verifier(true, Some(1_000));
    let m = request(signer("client"));
    verify(&v, &m).unwrap();
    for b in [0u8, 1, 0x41, 0xff] {
        let e = verify(&v, &with_cipher_byte(&m, 15, b)).unwrap_err();
        assert_eq!(e.kind, FaultKind::InvalidSecurity, "{e:?}");
        assert_eq!(e.detail, "replayed message");
    }
}

#[test]
fn an_old_captured_message_with_its_ciphertext_altered_is_refused_as_expired() {
    let v = verifier(true, None);
    let m = request(signer("client"));
    let later = SystemTime::now() + Duration::from_secs(2 * 3600);
    let altered = with_cipher_byte(&m, 15, 0x55);
    let e = v.verify(altered.as_bytes(), None, later).unwrap_err();
    assert_eq!(e.kind, FaultKind::MessageExpired, "{e:?}");
}

#[test]
fn every_altered_ciphertext_gets_one_and_the_same_answer() {
    // No replay cache: the signature and timestamp stay valid, so each altered message is
    // decrypted; whatever its plaintext, the answer must not tell.
    let v = verifier(true, None);
    let m = request(signer("client"));
    assert_eq!(
        answers_to_padding_probe(&v, &m),
        BTreeSet::from(["FailedCheck".to_owned()])
    );
    // An unknown Type is found before decryption, whatever the ciphertext.
    let bogus = m.replacen(
        "Type=\"http://www.w3.org/2001/04/xmlenc#Content\"",
        "Type=\"urn:bogus\"",
        1,
    );
    assert_ne!(bogus, m);
    assert_eq!(
        answers_to_padding_probe(&v, &bogus),
        BTreeSet::from(["UnsupportedAlgorithm".to_owned()])
    );
}

#[test]
fn a_decrypted_part_that_repeats_a_signed_id_answers_as_a_failed_decryption() {
    // The chosen plaintext, encrypted under the message's own session key (recovered here
    // with the server's key), repeats the Timestamp's id: a repeated id is refused anyway,
    // but in a decrypted part it must look like any other failure there.
    let v = verifier(true, None);
    let m = request(signer("client"));
    let values = cipher_values(&m);
    let wrapped = B64.decode(&m[values[0].clone()]).unwrap();
    let key = server()
        .key
        .unwrap_key(KeyTransport::Rsa15, &wrapped, 16)
        .unwrap();
    let ts = &m[m.find("<wsu:Timestamp").unwrap()..];
    let id_at = ts.find("wsu:Id=\"").unwrap() + "wsu:Id=\"".len();
    let id = &ts[id_at..id_at + ts[id_at..].find('"').unwrap()];
    let plain = format!(
        "<x xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\" wsu:Id=\"{id}\"/>"
    );
    let data = crypto::encrypt(BlockCipher::Aes128Cbc, &key, plain.as_bytes()).unwrap();
    let mut altered = m.clone();
    altered.replace_range(values[1].clone(), &B64.encode(data));
    let e = verify(&v, &altered).unwrap_err();
    assert_eq!(e.kind, FaultKind::FailedCheck, "{e:?}");
    assert!(e.detail.contains("duplicate Id"), "{}", e.detail);
}

#[test]
fn an_untrusted_signer_is_refused_before_anything_is_digested_or_decrypted() {
    let v = verifier(true, None);
    // Signed by a self-signed key with the client's subject; its Body then altered, and its
    // ciphertext too: trust is what fails, not a digest or the decryption.
    let m = request(signer("rogue"));
    let e = verify(&v, &with_cipher_byte(&m, 20, 0)).unwrap_err();
    assert_eq!(e.kind, FaultKind::FailedAuthentication, "{e:?}");
    assert!(e.detail.starts_with("signer not trusted"), "{}", e.detail);
}

#[test]
fn a_signers_kept_certificate_is_trusted_again_for_every_message() {
    // The verifier keeps a trusted signer's certificate parsed; trust is still decided per
    // message: at a time past the certificate's validity the same message is refused, and a
    // rogue signer with the client's subject stays untrusted after the client's was kept.
    let v = verifier(true, None);
    let m = request(signer("client"));
    assert!(verify(&v, &m).is_ok());
    assert!(verify(&v, &request(signer("client"))).is_ok());
    let later = SystemTime::now() + Duration::from_secs(60 * 60 * 24 * 365 * 200);
    let e = v.verify(m.as_bytes(), None, later).unwrap_err();
    assert_eq!(e.kind, FaultKind::FailedAuthentication, "{e:?}");
    assert!(e.detail.starts_with("signer not trusted"), "{}", e.detail);
    let e = verify(&v, &request(signer("rogue"))).unwrap_err();
    assert_eq!(e.kind, FaultKind::FailedAuthentication, "{e:?}");
    assert!(verify(&v, &request(signer("client"))).is_ok());
}

#[test]
fn an_unsigned_message_is_refused_before_its_key_is_unwrapped_when_a_signature_is_required() {
    let v = verifier(true, None);
    let m = request(None);
    // Its EncryptedKey replaced by garbage: were it unwrapped, decryption would fail.
    let ek = cipher_values(&m)[0].clone();
    let mut altered = m.clone();
    altered.replace_range(ek, &B64.encode([7u8; 256]));
    let e = verify(&v, &altered).unwrap_err();
    assert_eq!(e.kind, FaultKind::InvalidSecurity, "{e:?}");
    assert_eq!(e.detail, "no signature");
}

#[test]
fn more_encrypted_keys_than_the_limit_are_refused_before_any_is_unwrapped() {
    let v = verifier(false, None);
    let m = request(None);
    let start = m.find("<xenc:EncryptedKey").unwrap();
    let end = m.find("</xenc:EncryptedKey>").unwrap() + "</xenc:EncryptedKey>".len();
    let ek = m[start..end].to_owned();
    for copies in [4usize, 5] {
        let mut flood = m.clone();
        for i in 1..copies {
            // Each copy with an id of its own, naming the same EncryptedData.
            flood.insert_str(end, &ek.replacen("Id=\"", &format!("Id=\"copy{i}-"), 1));
        }
        let r = verify(&v, &flood);
        if copies <= busbar_wssec::verify::MAX_ENCRYPTED_KEYS {
            // Four keys for one EncryptedData: refused later, for naming it twice.
            let e = r.unwrap_err();
            assert!(e.detail.contains("repeated"), "{e:?}");
        } else {
            let e = r.unwrap_err();
            assert_eq!(e.kind, FaultKind::InvalidSecurity, "{e:?}");
            assert_eq!(
                e.detail,
                "5 EncryptedKeys in the Security header (at most 4)"
            );
        }
    }
}

#[test]
fn clear_text_beside_the_encrypted_data_is_refused_when_encryption_is_required() {
    let v = verifier(false, None);
    let m = request(None);
    assert!(verify(&v, &m).is_ok());
    let ed = m.find("<xenc:EncryptedData").unwrap();
    for extra in [
        "<card>4111111111111111</card>",
        "4111111111111111",
        "<!-- 4111111111111111 -->",
    ] {
        let mut leaky = m.clone();
        leaky.insert_str(ed, extra);
        let e = verify(&v, &leaky).unwrap_err();
        assert_eq!(e.kind, FaultKind::InvalidSecurity, "{extra}: {e:?}");
        assert!(e.detail.contains("not all encrypted"), "{}", e.detail);
    }
    // White space beside it is no content.
    let mut spaced = m.clone();
    spaced.insert_str(ed, "\n  ");
    assert!(verify(&v, &spaced).is_ok());
}
