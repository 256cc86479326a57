//! Decrypted data must be a balanced run of whole nodes where its EncryptedData stood. Each
//! case re-encrypts a chosen plaintext under the session key of a genuinely encrypted message
//! (recovered with the server's private key) and hands the message to the verifier.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use busbar_wssec::crypto::{self, BlockCipher, KeyTransport};
use busbar_wssec::keys::Identity;
use busbar_wssec::{
    EncryptSettings, FaultKind, KeyReference, Securer, Verifier, VerifyPolicy, WsseError,
};
use common::{cipher_values, fixture, P12_PASSWORD};

const MESSAGE: &str = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header/><soapenv:Body>\n  <m:buy xmlns:m=\"urn:m\"><symbol>IBM</symbol><note>a &amp; b</note></m:buy>\n</soapenv:Body></soapenv:Envelope>";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn server() -> Identity {
    Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap()
}

fn verifier() -> Verifier {
    Verifier::new(
        VerifyPolicy {
            require_timestamp: false,
            require_signature: false,
            require_encryption: true,
            require_username_token: false,
            trust: None,
            known_certs: Vec::new(),
            decrypt: Some(Arc::new(server())),
            max_skew_ms: 300_000,
            max_age_ms: 3_600_000,
            require_expires: false,
            legacy: true,
            remove_header: true,
            users: Default::default(),
            limits: Default::default(),
        },
        None,
        None,
    )
}

/// An encrypted message, and a way to put another plaintext in its Body's EncryptedData.
struct Encrypted {
    message: String,
    key: Vec<u8>,
    body_cipher: std::ops::Range<usize>,
}

impl Encrypted {
    fn new() -> Encrypted {
        let securer = Securer {
            timestamp_ttl_ms: None,
            sign: None,
            encrypt: Some(EncryptSettings {
                cipher: BlockCipher::Aes128Cbc,
                transport: KeyTransport::Rsa15,
                key_reference: KeyReference::IssuerSerial,
            }),
            limits: Default::default(),
        };
        let id = server();
        let message = securer
            .secure(MESSAGE.as_bytes(), Some(&id.cert), SystemTime::now())
            .unwrap();
        let message = String::from_utf8(message).unwrap();
        let values = cipher_values(&message);
        assert_eq!(
            values.len(),
            2,
            "one EncryptedKey and one EncryptedData: {message}"
        );
        let wrapped = B64.decode(&message[values[0].clone()]).unwrap();
        let key = id
            .key
            .unwrap_key(KeyTransport::Rsa15, &wrapped, 16)
            .unwrap();
        Encrypted {
            message,
            key,
            body_cipher: values[1].clone(),
        }
    }

    /// The message with `plain` as the Body's encrypted data, of `Type` `kind`.
    fn with(&self, plain: &str, kind: &str) -> Vec<u8> {
        let data = crypto::encrypt(BlockCipher::Aes128Cbc, &self.key, plain.as_bytes()).unwrap();
        let mut m = self.message.clone();
        m.replace_range(self.body_cipher.clone(), &B64.encode(data));
        m.replacen(
            "Type=\"http://www.w3.org/2001/04/xmlenc#Content\"",
            &format!("Type=\"http://www.w3.org/2001/04/xmlenc#{kind}\""),
            1,
        )
        .into_bytes()
    }
}

fn verify(message: &[u8]) -> Result<String, WsseError> {
    verifier()
        .verify(message, None, SystemTime::now())
        .map(|v| String::from_utf8(v.message).unwrap())
}

fn refused_as_unbalanced(plain: &str, kind: &str, e: &Encrypted) {
    match verify(&e.with(plain, kind)) {
        Ok(m) => panic!("{plain:?} ({kind}) was accepted: {m}"),
        Err(err) => {
            assert_eq!(err.kind, FaultKind::FailedCheck, "{plain:?}: {err:?}");
            assert!(
                (err.detail.contains("decrypted") && err.detail.contains("fragment"))
                    || err.detail.contains("not one element"),
                "{plain:?}: {}",
                err.detail
            );
        }
    }
}

#[test]
fn the_genuine_plaintext_and_balanced_ones_are_accepted() {
    let e = Encrypted::new();
    let out = verify(e.message.as_bytes()).unwrap();
    assert!(
        out.contains("\">\n  <m:buy xmlns:m=\"urn:m\"><symbol>IBM</symbol><note>a &amp; b</note></m:buy>\n</soapenv:Body></soapenv:Envelope>"),
        "{out}"
    );
    for plain in [
        "",
        "just text",
        " lead <a/> middle <b>x &amp; y <![CDATA[<c>]]></b><!-- note --> tail ",
        "<soapenv:Fault/>",
        "<m:buy xmlns:m=\"urn:m\"><symbol>EVIL</symbol></m:buy>",
    ] {
        let out = verify(&e.with(plain, "Content"))
            .unwrap_or_else(|err| panic!("{plain:?} was refused: {err:?}"));
        assert!(out.contains(plain), "{plain:?} is not in {out}");
    }
    for plain in ["<a/>", "\n <a>text<b/></a>\t"] {
        verify(&e.with(plain, "Element"))
            .unwrap_or_else(|err| panic!("{plain:?} (Element) was refused: {err:?}"));
    }
}

#[test]
fn plaintexts_that_break_out_of_their_place_are_refused() {
    let e = Encrypted::new();
    for plain in [
        // Closing the Body and opening another one.
        "</soapenv:Body><soapenv:Body><m:evil xmlns:m=\"urn:m\"/>",
        "<m:a xmlns:m=\"urn:m\"/></soapenv:Body><soapenv:Body>",
        // Closing more than it opens, or opening more than it closes.
        "</soapenv:Body>",
        "<a>",
        "<a></b>",
        // Markup cut at an edge.
        "<a/><b",
        "x &amp",
        "<!-- open",
        "<![CDATA[ open",
        "<a attr=\"",
        // Undeclared prefix, DOCTYPE and a processing instruction.
        "<zz:a/>",
        "<!DOCTYPE x>",
        "<?pi x?>",
    ] {
        refused_as_unbalanced(plain, "Content", &e);
    }
    for plain in ["<a/><b/>", "text only", "", "<a/>text<b/>"] {
        refused_as_unbalanced(plain, "Element", &e);
    }
}
