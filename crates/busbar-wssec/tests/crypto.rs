//! The algorithm profile against OpenSSL: signatures, key transport and AES-CBC must be
//! byte-compatible in both directions.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Instant;

use busbar_wssec::crypto::{
    decrypt, encrypt, random_bytes, BlockCipher, CryptoError, KeyTransport, PrivateKey, PublicKey,
    SignatureAlg,
};
use busbar_wssec::keys::Identity;
use common::{fixture, hex, openssl, openssl_ok, scratch};

fn server() -> Identity {
    let f = fixture();
    Identity::from_pem(&f.path("server.key"), &f.path("server.pem")).unwrap()
}

fn der_of(args: &[&str]) -> Vec<u8> {
    openssl(&fixture().dir, args)
}

/// `openssl pkey -outform DER` writes RSA keys as PKCS#1; `pkcs8 -topk8` gives PKCS#8.
fn pkcs8_der(key_file: &str) -> Vec<u8> {
    der_of(&[
        "pkcs8", "-topk8", "-nocrypt", "-in", key_file, "-outform", "DER",
    ])
}

fn digest_flag(alg: SignatureAlg) -> &'static str {
    match alg {
        SignatureAlg::RsaSha1 => "-sha1",
        SignatureAlg::RsaSha256 => "-sha256",
    }
}

#[test]
fn signatures_match_openssl_in_both_directions() {
    let f = fixture();
    let id = server();
    let data =
        b"<ds:SignedInfo xmlns:ds=\"http://www.w3.org/2000/09/xmldsig#\">...</ds:SignedInfo>";
    let data_path = scratch("signed-info.xml");
    std::fs::write(&data_path, data).unwrap();
    let data_arg = data_path.to_str().unwrap();

    for alg in [SignatureAlg::RsaSha1, SignatureAlg::RsaSha256] {
        let ours = id.key.sign(alg, data).unwrap();
        assert_eq!(ours.len(), 256);
        assert!(id.cert.public_key().verify(alg, data, &ours));
        assert!(!id.cert.public_key().verify(alg, b"other data", &ours));

        // OpenSSL verifies ours.
        let sig_path = scratch("ours.sig");
        std::fs::write(&sig_path, &ours).unwrap();
        let verified = openssl(
            &f.dir,
            &[
                "dgst",
                digest_flag(alg),
                "-verify",
                "server.pub.pem",
                "-signature",
                sig_path.to_str().unwrap(),
                data_arg,
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&verified).trim(),
            "Verified OK",
            "{alg:?}"
        );

        // We verify OpenSSL's, which for deterministic PKCS#1 v1.5 is also byte-identical.
        let theirs = openssl(
            &f.dir,
            &["dgst", digest_flag(alg), "-sign", "server.key", data_arg],
        );
        assert!(id.cert.public_key().verify(alg, data, &theirs), "{alg:?}");
        assert_eq!(hex(&theirs), hex(&ours), "{alg:?}");

        // The other digest does not verify.
        let other = match alg {
            SignatureAlg::RsaSha1 => SignatureAlg::RsaSha256,
            SignatureAlg::RsaSha256 => SignatureAlg::RsaSha1,
        };
        assert!(!id.cert.public_key().verify(other, data, &theirs));
    }
}

#[test]
fn flipped_signature_bits_fail_verification() {
    let id = server();
    let sig = id.key.sign(SignatureAlg::RsaSha256, b"data").unwrap();
    for i in [0, 100, 255] {
        let mut bad = sig.clone();
        bad[i] ^= 0x80;
        assert!(!id
            .cert
            .public_key()
            .verify(SignatureAlg::RsaSha256, b"data", &bad));
    }
    assert!(!id
        .cert
        .public_key()
        .verify(SignatureAlg::RsaSha256, b"data", &sig[1..]));
}

#[test]
fn key_transport_round_trips_and_matches_openssl() {
    let f = fixture();
    let id = server();
    let public = id.cert.public_key();
    for (kt, mode) in [
        (KeyTransport::RsaOaepMgf1p, "rsa_padding_mode:oaep"),
        (KeyTransport::Rsa15, "rsa_padding_mode:pkcs1"),
    ] {
        for len in [16, 32] {
            let session = random_bytes(len);
            let wrapped = public.wrap_key(kt, &session).unwrap();
            assert_eq!(wrapped.len(), 256);
            assert_eq!(
                id.key.unwrap_key(kt, &wrapped, len).unwrap(),
                session,
                "{kt:?}"
            );

            // OpenSSL unwraps ours.
            let wrapped_path = scratch("ours.wrapped");
            std::fs::write(&wrapped_path, &wrapped).unwrap();
            let unwrapped = openssl(
                &f.dir,
                &[
                    "pkeyutl",
                    "-decrypt",
                    "-inkey",
                    "server.key",
                    "-pkeyopt",
                    mode,
                    "-in",
                    wrapped_path.to_str().unwrap(),
                ],
            );
            assert_eq!(unwrapped, session, "{kt:?}");

            // We unwrap OpenSSL's (its OAEP defaults are SHA-1 and MGF1-SHA1, as mgf1p wants).
            let session_path = scratch("session.key");
            std::fs::write(&session_path, &session).unwrap();
            let theirs = openssl(
                &f.dir,
                &[
                    "pkeyutl",
                    "-encrypt",
                    "-pubin",
                    "-inkey",
                    "server.pub.pem",
                    "-pkeyopt",
                    mode,
                    "-in",
                    session_path.to_str().unwrap(),
                ],
            );
            assert_eq!(
                id.key.unwrap_key(kt, &theirs, len).unwrap(),
                session,
                "{kt:?}"
            );
        }
    }
}

#[test]
fn oaep_unwrap_failures_are_errors() {
    let id = server();
    let wrapped = id
        .cert
        .public_key()
        .wrap_key(KeyTransport::RsaOaepMgf1p, &[5u8; 16])
        .unwrap();
    let mut tampered = wrapped.clone();
    tampered[10] ^= 1;
    for (data, len) in [
        (&tampered[..], 16),
        (&wrapped[..200], 16),
        (&random_bytes(256)[..], 16),
        (&wrapped[..], 32),
    ] {
        assert!(matches!(
            id.key.unwrap_key(KeyTransport::RsaOaepMgf1p, data, len),
            Err(CryptoError::KeyTransport)
        ));
    }
}

#[test]
fn rsa15_unwrap_of_garbage_yields_the_same_replacement_key_each_time_not_an_error() {
    let id = server();
    let kt = KeyTransport::Rsa15;
    let garbage = random_bytes(256);
    let a = id.key.unwrap_key(kt, &garbage, 16).unwrap();
    let b = id.key.unwrap_key(kt, &garbage, 16).unwrap();
    assert_eq!(a.len(), 16);
    // A key that changed from one try to the next would tell a failed unwrap from one that
    // worked (whose key never changes).
    assert_eq!(a, b, "the replacement key must not change between tries");
    let other = random_bytes(256);
    assert_ne!(a, id.key.unwrap_key(kt, &other, 16).unwrap());
    assert_ne!(
        &a[..],
        &id.key.unwrap_key(kt, &garbage, 32).unwrap()[..16],
        "each length gets its own replacement"
    );
    // The same key loaded again (another process) replaces the same way.
    assert_eq!(a, server().key.unwrap_key(kt, &garbage, 16).unwrap());

    // Wrong ciphertext length, and a valid wrap of a key of the wrong length.
    let short = id.key.unwrap_key(kt, &garbage[..100], 32).unwrap();
    assert_eq!(short.len(), 32);
    let wrapped16 = id.cert.public_key().wrap_key(kt, &[9u8; 16]).unwrap();
    let wrong_len = id.key.unwrap_key(kt, &wrapped16, 32).unwrap();
    assert_eq!(wrong_len.len(), 32);
    assert_ne!(&wrong_len[..16], &[9u8; 16]);

    // OAEP ciphertext given as RSA-1.5: a padding failure, answered the same way.
    let oaep = id
        .cert
        .public_key()
        .wrap_key(KeyTransport::RsaOaepMgf1p, &[9u8; 16])
        .unwrap();
    let c = id.key.unwrap_key(kt, &oaep, 16).unwrap();
    assert_ne!(c, vec![9u8; 16]);

    // The caller then fails at data decryption with the generic error.
    let sealed = encrypt(BlockCipher::Aes128Gcm, &[9u8; 16], b"<Body/>").unwrap();
    assert!(matches!(
        decrypt(BlockCipher::Aes128Gcm, &c, &sealed),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn aes_cbc_matches_openssl_enc_in_both_directions() {
    let f = fixture();
    for (cipher, name) in [
        (BlockCipher::Aes128Cbc, "-aes-128-cbc"),
        (BlockCipher::Aes256Cbc, "-aes-256-cbc"),
    ] {
        for len in [0usize, 1, 15, 16, 17, 100] {
            let key = random_bytes(cipher.key_len());
            let plaintext = random_bytes(len);
            let plain_path = scratch("plain.bin");
            std::fs::write(&plain_path, &plaintext).unwrap();

            // OpenSSL's PKCS#7 padding is one valid XML Encryption padding.
            let iv = random_bytes(16);
            let ct = openssl(
                &f.dir,
                &[
                    "enc",
                    name,
                    "-K",
                    &hex(&key),
                    "-iv",
                    &hex(&iv),
                    "-in",
                    plain_path.to_str().unwrap(),
                ],
            );
            let mut data = iv.clone();
            data.extend_from_slice(&ct);
            assert_eq!(
                decrypt(cipher, &key, &data).unwrap(),
                plaintext,
                "{cipher:?} {len}"
            );

            // Ours pads PKCS#7-style, so even a strict PKCS#7 check in OpenSSL accepts it.
            let ours = encrypt(cipher, &key, &plaintext).unwrap();
            assert_eq!(ours.len(), 16 + (len / 16 + 1) * 16);
            let (iv, ct) = ours.split_at(16);
            let ct_path = scratch("ours.enc");
            std::fs::write(&ct_path, ct).unwrap();
            let back = openssl(
                &f.dir,
                &[
                    "enc",
                    "-d",
                    name,
                    "-K",
                    &hex(&key),
                    "-iv",
                    &hex(iv),
                    "-in",
                    ct_path.to_str().unwrap(),
                ],
            );
            assert_eq!(back, plaintext, "{cipher:?} {len}");
        }
    }
}

#[test]
fn aes_gcm_round_trips_and_rejects_tampering() {
    for cipher in [BlockCipher::Aes128Gcm, BlockCipher::Aes256Gcm] {
        let key = random_bytes(cipher.key_len());
        let plaintext = b"<soap:Body><m:Order>42</m:Order></soap:Body>";
        let sealed = encrypt(cipher, &key, plaintext).unwrap();
        assert_eq!(sealed.len(), 12 + plaintext.len() + 16);
        assert_ne!(
            encrypt(cipher, &key, plaintext).unwrap()[..12],
            sealed[..12],
            "fresh IV each time"
        );
        assert_eq!(decrypt(cipher, &key, &sealed).unwrap(), plaintext);

        let mut tampered = sealed.clone();
        tampered[20] ^= 0x01;
        assert!(matches!(
            decrypt(cipher, &key, &tampered),
            Err(CryptoError::Decrypt)
        ));
        let wrong_key = random_bytes(cipher.key_len());
        assert!(matches!(
            decrypt(cipher, &wrong_key, &sealed),
            Err(CryptoError::Decrypt)
        ));
    }
}

#[test]
fn keys_load_from_pkcs8_and_pkcs1_der_alike() {
    let pkcs8 = pkcs8_der("server.key");
    let pkcs1 = der_of(&[
        "rsa",
        "-in",
        "server.key",
        "-traditional",
        "-outform",
        "DER",
    ]);
    let spki = der_of(&["pkey", "-in", "server.key", "-pubout", "-outform", "DER"]);
    let a = PrivateKey::from_pkcs8_der(&pkcs8).unwrap();
    let b = PrivateKey::from_pkcs1_der(&pkcs1).unwrap();
    let public = PublicKey::from_spki_der(&spki).unwrap();
    assert_eq!(a.bits(), 2048);
    assert_eq!(a.public_key(), public);
    assert_eq!(b.public_key(), public);
    assert_eq!(public.bits(), 2048);
    let sig = b.sign(SignatureAlg::RsaSha256, b"x").unwrap();
    assert!(public.verify(SignatureAlg::RsaSha256, b"x", &sig));
}

#[test]
fn a_3072_bit_key_works_throughout() {
    let der = pkcs8_der("big.key");
    let key = PrivateKey::from_pkcs8_der(&der).unwrap();
    assert_eq!(key.bits(), 3072);
    let public = key.public_key();
    let data_path = scratch("payload.txt");
    std::fs::write(&data_path, b"payload").unwrap();
    for alg in [SignatureAlg::RsaSha1, SignatureAlg::RsaSha256] {
        let sig = key.sign(alg, b"payload").unwrap();
        assert_eq!(sig.len(), 384);
        assert!(public.verify(alg, b"payload", &sig));
        let theirs = der_of(&[
            "dgst",
            digest_flag(alg),
            "-sign",
            "big.key",
            data_path.to_str().unwrap(),
        ]);
        assert_eq!(hex(&theirs), hex(&sig), "{alg:?}");
    }
    for kt in [KeyTransport::RsaOaepMgf1p, KeyTransport::Rsa15] {
        let wrapped = public.wrap_key(kt, &[3u8; 32]).unwrap();
        assert_eq!(key.unwrap_key(kt, &wrapped, 32).unwrap(), vec![3u8; 32]);
    }
}

#[test]
fn short_and_non_rsa_keys_are_refused() {
    let small = pkcs8_der("small.key");
    assert!(matches!(
        PrivateKey::from_pkcs8_der(&small),
        Err(CryptoError::KeyTooSmall)
    ));
    let small_pub = der_of(&["pkey", "-in", "small.key", "-pubout", "-outform", "DER"]);
    assert!(matches!(
        PublicKey::from_spki_der(&small_pub),
        Err(CryptoError::KeyTooSmall)
    ));
    let ec = pkcs8_der("ec.key");
    assert!(matches!(
        PrivateKey::from_pkcs8_der(&ec),
        Err(CryptoError::NotRsa)
    ));
    assert!(PrivateKey::from_pkcs8_der(b"not a key").is_err());
    assert!(PublicKey::from_spki_der(b"not a key").is_err());
}

#[test]
fn openssl_rejects_a_tampered_signature_of_ours() {
    // Guards the cross-check itself: a broken verify invocation must not read as success.
    let f = fixture();
    let id = server();
    let mut sig = id.key.sign(SignatureAlg::RsaSha256, b"abc").unwrap();
    sig[0] ^= 1;
    let sig_path = scratch("bad.sig");
    let data_path = scratch("abc.txt");
    std::fs::write(&sig_path, &sig).unwrap();
    std::fs::write(&data_path, b"abc").unwrap();
    assert!(!openssl_ok(
        &f.dir,
        &[
            "dgst",
            "-sha256",
            "-verify",
            "server.pub.pem",
            "-signature",
            sig_path.to_str().unwrap(),
            data_path.to_str().unwrap(),
        ],
    ));
}

/// Rough per-operation cost; run with
/// `cargo test --release -p busbar-wssec --test crypto -- --ignored --nocapture rsa_costs`.
#[test]
#[ignore]
fn rsa_costs() {
    let id = server();
    let public = id.cert.public_key().clone();
    let oaep = public
        .wrap_key(KeyTransport::RsaOaepMgf1p, &[1u8; 16])
        .unwrap();
    let pkcs1 = public.wrap_key(KeyTransport::Rsa15, &[1u8; 16]).unwrap();
    let data = vec![0x5a; 1024];
    let sig256 = id.key.sign(SignatureAlg::RsaSha256, &data).unwrap();
    let sig1 = id.key.sign(SignatureAlg::RsaSha1, &data).unwrap();

    fn time(name: &str, n: u32, mut f: impl FnMut()) {
        for _ in 0..n / 10 {
            f();
        }
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        let each = start.elapsed() / n;
        println!("{name:<36} {:>9.1} µs", each.as_secs_f64() * 1e6);
    }
    let n = 500;
    time("RSA-2048 OAEP unwrap", n, || {
        id.key
            .unwrap_key(KeyTransport::RsaOaepMgf1p, &oaep, 16)
            .unwrap();
    });
    time("RSA-2048 RSA-1.5 unwrap", n, || {
        id.key.unwrap_key(KeyTransport::Rsa15, &pkcs1, 16).unwrap();
    });
    time("RSA-2048 RSA-1.5 unwrap (bad padding)", n, || {
        id.key.unwrap_key(KeyTransport::Rsa15, &oaep, 16).unwrap();
    });
    time("RSA-2048 SHA-256 sign (aws-lc-rs)", n, || {
        id.key.sign(SignatureAlg::RsaSha256, &data).unwrap();
    });
    time("RSA-2048 SHA-1 sign (aws-lc RSA_sign)", n, || {
        id.key.sign(SignatureAlg::RsaSha1, &data).unwrap();
    });
    time("RSA-2048 SHA-256 verify", n * 10, || {
        assert!(public.verify(SignatureAlg::RsaSha256, &data, &sig256));
    });
    time("RSA-2048 SHA-1 verify", n * 10, || {
        assert!(public.verify(SignatureAlg::RsaSha1, &data, &sig1));
    });
    time("RSA-2048 OAEP wrap", n * 10, || {
        public
            .wrap_key(KeyTransport::RsaOaepMgf1p, &[1u8; 16])
            .unwrap();
    });
}
