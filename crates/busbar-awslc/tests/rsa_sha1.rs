//! RSA-SHA1 signing against OpenSSL and aws-lc-rs, with keys generated at test time by the
//! `openssl` CLI (nothing secret is committed).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use aws_lc_rs::signature::{
    UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, RSA_PKCS1_2048_8192_SHA256,
};
use busbar_awslc::{Error, RsaSha1Signer, SHA1_DIGEST_LEN};
use sha1::Digest as _;

const MESSAGE: &[u8] =
    b"<ds:SignedInfo xmlns:ds=\"http://www.w3.org/2000/09/xmldsig#\">...</ds:SignedInfo>";

struct Keys {
    dir: PathBuf,
}

impl Keys {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn openssl(&self, args: &[&str]) -> Vec<u8> {
        openssl(&self.dir, args)
    }

    fn pkcs8(&self, key: &str) -> Vec<u8> {
        self.openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", key, "-outform", "DER"])
    }

    fn pkcs1(&self, key: &str) -> Vec<u8> {
        self.openssl(&["rsa", "-in", key, "-traditional", "-outform", "DER"])
    }

    fn spki(&self, key: &str) -> Vec<u8> {
        self.openssl(&["pkey", "-in", key, "-pubout", "-outform", "DER"])
    }
}

/// `rsa2048.key`, `rsa3072.key`, `rsa1024.key` and `p256.key`, generated once per test binary,
/// plus `message.bin` holding [`MESSAGE`].
fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("busbar-awslc-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for bits in [1024, 2048, 3072] {
            openssl(
                &dir,
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    &format!("rsa_keygen_bits:{bits}"),
                    "-out",
                    &format!("rsa{bits}.key"),
                ],
            );
        }
        openssl(
            &dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "p256.key",
            ],
        );
        std::fs::write(dir.join("message.bin"), MESSAGE).unwrap();
        Keys { dir }
    })
}

fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI is needed to generate test keys");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn verify_sha1(spki: &[u8], msg: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, spki)
        .verify(msg, signature)
        .is_ok()
}

#[test]
fn signatures_are_byte_identical_to_openssl_and_verify_in_aws_lc_rs() {
    let k = keys();
    let message = k.path("message.bin");
    for (key, bits) in [("rsa2048.key", 2048), ("rsa3072.key", 3072)] {
        let signer = RsaSha1Signer::from_pkcs8_der(&k.pkcs8(key)).unwrap();
        assert_eq!(signer.bits(), bits);
        assert_eq!(signer.signature_len(), bits / 8);

        let ours = signer.sign_sha1(MESSAGE).unwrap();
        let theirs = k.openssl(&["dgst", "-sha1", "-sign", key, message.to_str().unwrap()]);
        assert_eq!(ours.len(), bits / 8);
        assert_eq!(ours, theirs, "{key}");

        let spki = k.spki(key);
        assert!(verify_sha1(&spki, MESSAGE, &ours), "{key}");
        assert!(!verify_sha1(&spki, b"other message", &ours), "{key}");
        let mut flipped = ours.clone();
        flipped[bits / 16] ^= 0x01;
        assert!(!verify_sha1(&spki, MESSAGE, &flipped), "{key}");
        // A SHA-1 signature is no SHA-256 signature.
        assert!(UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &spki)
            .verify(MESSAGE, &ours)
            .is_err());
    }
}

#[test]
fn signing_a_digest_equals_signing_its_message() {
    let k = keys();
    let signer = RsaSha1Signer::from_pkcs8_der(&k.pkcs8("rsa2048.key")).unwrap();
    let digest: [u8; SHA1_DIGEST_LEN] = sha1::Sha1::digest(MESSAGE).into();
    assert_eq!(
        signer.sign_sha1_digest(&digest).unwrap(),
        signer.sign_sha1(MESSAGE).unwrap()
    );
    // The empty message, against OpenSSL too.
    let empty = k.path("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let theirs = k.openssl(&[
        "dgst",
        "-sha1",
        "-sign",
        "rsa2048.key",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(signer.sign_sha1(b"").unwrap(), theirs);
}

#[test]
fn pkcs1_and_pkcs8_forms_of_a_key_sign_alike() {
    let k = keys();
    for key in ["rsa2048.key", "rsa3072.key"] {
        let a = RsaSha1Signer::from_pkcs8_der(&k.pkcs8(key)).unwrap();
        let b = RsaSha1Signer::from_pkcs1_der(&k.pkcs1(key)).unwrap();
        assert_eq!(a.bits(), b.bits());
        assert_eq!(a.sign_sha1(MESSAGE).unwrap(), b.sign_sha1(MESSAGE).unwrap());
    }
}

#[test]
fn unsuitable_keys_are_refused() {
    let k = keys();
    assert_eq!(
        RsaSha1Signer::from_pkcs8_der(&k.pkcs8("rsa1024.key")).unwrap_err(),
        Error::KeyTooSmall
    );
    assert_eq!(
        RsaSha1Signer::from_pkcs1_der(&k.pkcs1("rsa1024.key")).unwrap_err(),
        Error::KeyTooSmall
    );
    assert_eq!(
        RsaSha1Signer::from_pkcs8_der(&k.pkcs8("p256.key")).unwrap_err(),
        Error::NotRsa
    );

    // Trailing bytes, truncation, and one form given as the other.
    let pkcs8 = k.pkcs8("rsa2048.key");
    let pkcs1 = k.pkcs1("rsa2048.key");
    let mut trailing = pkcs8.clone();
    trailing.push(0);
    assert_eq!(
        RsaSha1Signer::from_pkcs8_der(&trailing).unwrap_err(),
        Error::InvalidKey
    );
    let mut trailing = pkcs1.clone();
    trailing.push(0);
    assert_eq!(
        RsaSha1Signer::from_pkcs1_der(&trailing).unwrap_err(),
        Error::InvalidKey
    );
    assert_eq!(
        RsaSha1Signer::from_pkcs8_der(&pkcs8[..pkcs8.len() - 1]).unwrap_err(),
        Error::InvalidKey
    );
    assert_eq!(
        RsaSha1Signer::from_pkcs8_der(&pkcs1).unwrap_err(),
        Error::InvalidKey
    );
    assert_eq!(
        RsaSha1Signer::from_pkcs1_der(&pkcs8).unwrap_err(),
        Error::InvalidKey
    );
}

#[test]
fn a_key_with_inconsistent_components_is_refused() {
    // Flip one bit of the private exponent's last byte: AWS-LC's key check catches it. In
    // PKCS#1 the fields are n, e, d, p, ...; find d by parsing the DER lengths.
    let k = keys();
    let mut der = k.pkcs1("rsa2048.key");
    let mut pos = header_len(&der, 0); // into the SEQUENCE
    for _ in 0..3 {
        // version, n, e
        pos += header_len(&der, pos) + content_len(&der, pos);
    }
    let d_end = pos + header_len(&der, pos) + content_len(&der, pos);
    der[d_end - 1] ^= 0x02;
    assert_eq!(
        RsaSha1Signer::from_pkcs1_der(&der).unwrap_err(),
        Error::InvalidKey
    );
}

fn header_len(der: &[u8], pos: usize) -> usize {
    let first = der[pos + 1];
    if first < 0x80 {
        2
    } else {
        2 + usize::from(first & 0x7f)
    }
}

fn content_len(der: &[u8], pos: usize) -> usize {
    let first = der[pos + 1];
    if first < 0x80 {
        usize::from(first)
    } else {
        der[pos + 2..pos + 2 + usize::from(first & 0x7f)]
            .iter()
            .fold(0, |acc, b| (acc << 8) | usize::from(*b))
    }
}

#[test]
fn one_signer_signs_from_eight_threads_at_once() {
    let k = keys();
    let signer = RsaSha1Signer::from_pkcs8_der(&k.pkcs8("rsa2048.key")).unwrap();
    let spki = k.spki("rsa2048.key");
    let messages: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
    // PKCS#1 v1.5 is deterministic, so every thread must produce exactly these.
    let expected: Vec<Vec<u8>> = messages
        .iter()
        .map(|m| signer.sign_sha1(m).unwrap())
        .collect();
    let start = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (signer, spki, messages, expected, start) =
                (&signer, &spki, &messages, &expected, &start);
            scope.spawn(move || {
                start.wait();
                for round in 0..25 {
                    let i = (t + round) % messages.len();
                    let sig = signer.sign_sha1(&messages[i]).unwrap();
                    assert_eq!(sig, expected[i], "thread {t} round {round}");
                    assert!(verify_sha1(spki, &messages[i], &sig));
                }
            });
        }
    });
}

#[test]
fn a_signer_moves_to_another_thread_and_drops_there() {
    let k = keys();
    let signer = RsaSha1Signer::from_pkcs8_der(&k.pkcs8("rsa2048.key")).unwrap();
    let here = signer.sign_sha1(MESSAGE).unwrap();
    let there = std::thread::spawn(move || signer.sign_sha1(MESSAGE).unwrap())
        .join()
        .unwrap();
    assert_eq!(here, there);
}
