//! Loading identities and certificates, the values WS-Security looks certificates up by, and
//! trust decisions, against keys and certificates made by OpenSSL.

#![allow(clippy::unwrap_used)]

mod common;

use busbar_wssec::crypto::{KeyTransport, SignatureAlg};
use busbar_wssec::keys::{
    load_pem_certificates, Certificate, Identity, KeyError, TrustError, TrustStore,
};
use common::{fixture, openssl, unhex, CLIENT_SERIAL, P12_PASSWORD};

fn cert(name: &str) -> Certificate {
    let mut certs = load_pem_certificates(&fixture().path(&format!("{name}.pem"))).unwrap();
    assert_eq!(certs.len(), 1, "{name}.pem");
    certs.remove(0)
}

fn openssl_x509(name: &str, args: &[&str]) -> String {
    let file = format!("{name}.pem");
    let mut all = vec!["x509", "-in", &file, "-noout"];
    all.extend_from_slice(args);
    String::from_utf8(openssl(&fixture().dir, &all)).unwrap()
}

/// Mid-validity of the freshly issued certificates.
fn now() -> i64 {
    cert("client").not_before() + 3600
}

fn store(anchors: &[&str]) -> TrustStore {
    TrustStore::new(anchors.iter().map(|n| cert(n)).collect(), None)
}

#[test]
fn pkcs12_with_the_right_password_yields_key_cert_and_chain() {
    let id = Identity::from_pkcs12(&fixture().path("server.p12"), P12_PASSWORD).unwrap();
    assert_eq!(id.cert.subject(), "C=US, O=Example, CN=server");
    assert_eq!(id.chain.len(), 1);
    assert_eq!(id.chain[0], cert("ca"));
    assert_eq!(id.key.bits(), 2048);
    assert_eq!(id.key.public_key(), *id.cert.public_key());
    let sig = id.key.sign(SignatureAlg::RsaSha256, b"m").unwrap();
    assert!(id
        .cert
        .public_key()
        .verify(SignatureAlg::RsaSha256, b"m", &sig));
}

#[test]
fn pkcs12_with_a_wrong_password_names_the_file() {
    let path = fixture().path("server.p12");
    let err = Identity::from_pkcs12(&path, "wrong").unwrap_err();
    assert!(matches!(err, KeyError::Pkcs12 { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(path.to_str().unwrap()), "{message}");
    assert!(
        message.contains("wrong password or corrupt PKCS#12"),
        "{message}"
    );
}

#[test]
fn legacy_pkcs12_loads() {
    let id = Identity::from_pkcs12(&fixture().path("server-legacy.p12"), P12_PASSWORD).unwrap();
    assert_eq!(id.cert, cert("server"));
}

#[test]
fn a_missing_or_garbage_file_is_reported_with_its_path() {
    let missing = fixture().path("does-not-exist.p12");
    let err = Identity::from_pkcs12(&missing, "x").unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, KeyError::Unreadable { .. }), "{err:?}");
    assert!(
        message.contains("does-not-exist.p12: unreadable:"),
        "{message}"
    );

    let not_p12 = fixture().path("ca.pem");
    assert!(matches!(
        Identity::from_pkcs12(&not_p12, "x"),
        Err(KeyError::Pkcs12 { .. })
    ));
    let err = load_pem_certificates(&fixture().path("server.key")).unwrap_err();
    assert!(matches!(err, KeyError::NoCertificate { .. }), "{err:?}");
}

#[test]
fn pem_identity_loads_in_pkcs8_and_pkcs1_form() {
    let f = fixture();
    let a = Identity::from_pem(&f.path("server.key"), &f.path("server.pem")).unwrap();
    let b = Identity::from_pem(&f.path("server-pkcs1.key"), &f.path("server.pem")).unwrap();
    assert_eq!(a.cert, b.cert);
    assert_eq!(a.key.public_key(), b.key.public_key());
    assert!(a.chain.is_empty());
    let wrapped = a
        .cert
        .public_key()
        .wrap_key(KeyTransport::RsaOaepMgf1p, &[4u8; 16])
        .unwrap();
    assert_eq!(
        b.key
            .unwrap_key(KeyTransport::RsaOaepMgf1p, &wrapped, 16)
            .unwrap(),
        vec![4u8; 16]
    );
}

#[test]
fn pem_key_and_certificate_that_do_not_match_are_refused() {
    let f = fixture();
    let err = Identity::from_pem(&f.path("client.key"), &f.path("server.pem")).unwrap_err();
    assert!(matches!(err, KeyError::KeyMismatch { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("client.key") && message.contains("server.pem"),
        "{message}"
    );
}

#[test]
fn non_rsa_and_short_keys_are_refused_with_the_reason() {
    let f = fixture();
    let err = Identity::from_pem(&f.path("ec.key"), &f.path("server.pem")).unwrap_err();
    assert!(err.to_string().ends_with("ec.key: not an RSA key"), "{err}");
    let err = Identity::from_pem(&f.path("small.key"), &f.path("server.pem")).unwrap_err();
    assert!(err.to_string().contains("shorter than 2048 bits"), "{err}");
    let err = Identity::from_pem(&f.path("server.pem"), &f.path("server.pem")).unwrap_err();
    assert!(matches!(err, KeyError::NoPrivateKey { .. }), "{err:?}");
}

#[test]
fn certificate_fields_match_openssl() {
    let client = cert("client");
    assert_eq!(client.subject(), "C=US, O=Example, CN=client");
    assert_eq!(client.issuer(), "C=US, O=Example, CN=Example CA");
    assert_eq!(client.serial_decimal(), CLIENT_SERIAL);
    assert_eq!(client.issuer_der(), cert("ca").subject_der());
    assert!(!client.is_ca());
    assert!(cert("ca").is_ca());
    assert_eq!(client.public_key().bits(), 2048);

    let ski = openssl_x509("client", &["-ext", "subjectKeyIdentifier"]);
    let ski = ski.lines().nth(1).unwrap();
    assert_eq!(client.subject_key_identifier(), unhex(ski));

    let fp = openssl_x509("client", &["-fingerprint", "-sha1"]);
    let fp = fp.trim().split_once('=').unwrap().1;
    assert_eq!(client.thumbprint_sha1().to_vec(), unhex(fp));

    let dates = openssl_x509("client", &["-dates"]);
    assert!(dates.contains("notBefore="));
    let expired = cert("expired");
    assert_eq!(expired.not_before(), 1_577_836_800); // 2020-01-01T00:00:00Z
    assert_eq!(expired.not_after(), 1_580_515_200); // 2020-02-01T00:00:00Z
}

#[test]
fn random_serials_convert_to_decimal() {
    let server = cert("server");
    let hex = openssl_x509("server", &["-serial"]);
    let hex = hex.trim().trim_start_matches("serial=");
    // Decimal of a big hex number, by repeated multiply-add on base-10 digits.
    let mut digits = vec![0u32];
    for h in hex.chars() {
        let mut carry = h.to_digit(16).unwrap();
        for d in digits.iter_mut() {
            let v = *d * 16 + carry;
            *d = v % 10;
            carry = v / 10;
        }
        while carry > 0 {
            digits.push(carry % 10);
            carry /= 10;
        }
    }
    let decimal: String = digits
        .iter()
        .rev()
        .map(|d| char::from_digit(*d, 10).unwrap())
        .collect();
    assert_eq!(server.serial_decimal(), decimal.trim_start_matches('0'));
}

#[test]
fn missing_ski_falls_back_to_the_sha1_of_the_public_key_bits() {
    let noski = cert("noski");
    // The subjectPublicKey BIT STRING holds the PKCS#1 RSAPublicKey.
    let pkcs1_pub = openssl(
        &fixture().dir,
        &[
            "rsa",
            "-in",
            "client.key",
            "-RSAPublicKey_out",
            "-outform",
            "DER",
        ],
    );
    let expected = busbar_wssec::crypto::digest(busbar_wssec::crypto::DigestAlg::Sha1, &pkcs1_pub);
    assert_eq!(noski.subject_key_identifier(), expected);
    // With the extension present the two differ only if the issuer chose another method;
    // OpenSSL's "hash" is method 1 too.
    assert_eq!(
        cert("client").subject_key_identifier(),
        noski.subject_key_identifier()
    );
}

#[test]
fn signature_checks_between_certificates() {
    let ca = cert("ca");
    let client = cert("client");
    assert!(client.is_signed_by(&ca));
    assert!(ca.is_signed_by(&ca));
    assert!(!client.is_signed_by(&client));
    assert!(!cert("rogue-leaf").is_signed_by(&ca));
    // Same subject as the CA, different key.
    assert!(!client.is_signed_by(&cert("rogue-ca")));
    let sha1 = cert("client-sha1");
    assert!(openssl_x509("client-sha1", &["-text"]).contains("sha1WithRSAEncryption"));
    assert!(sha1.is_signed_by(&ca));
    assert_eq!(store(&["ca"]).check(&sha1, &[], now()), Ok(()));
}

#[test]
fn a_certificate_issued_by_the_anchor_is_trusted() {
    let trust = store(&["ca"]);
    assert_eq!(trust.check(&cert("client"), &[], now()), Ok(()));
    // An anchor is trusted as itself, as far as its key may sign: the CA's may only issue.
    assert_eq!(store(&["big"]).check(&cert("big"), &[], now()), Ok(()));
    assert_eq!(
        trust.check(&cert("ca"), &[], now()),
        Err(TrustError::KeyUsage)
    );
}

/// The openssl sections [`issued_with`] can give a certificate.
const USAGE_CNF: &str = "\
[req]
distinguished_name = dn
[dn]
[unknown_critical]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
1.2.3.4.5 = critical, DER:05:00
[key_cert_sign]
keyUsage = critical, keyCertSign
[key_encipherment]
keyUsage = critical, keyEncipherment
[non_repudiation]
keyUsage = critical, nonRepudiation
[code_signing]
keyUsage = critical, digitalSignature
extendedKeyUsage = codeSigning
[client_auth]
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
[document_signing]
extendedKeyUsage = 1.3.6.1.5.5.7.3.36
[email_and_time]
extendedKeyUsage = emailProtection, timeStamping
[ca_unknown_critical]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign
subjectKeyIdentifier = hash
1.2.3.4.5 = critical, DER:05:00
";

/// A certificate for `key` (a fixture key name) issued by `issuer` (a fixture CA, or one made
/// here) with the extensions of `section` in [`USAGE_CNF`].
fn issued_with(section: &str, key: &str, issuer: &str) -> Certificate {
    let dir = fixture().dir.join("usage");
    std::fs::create_dir_all(&dir).unwrap();
    // Names of their own: tests run side by side.
    let name = format!("{section}-by-{issuer}");
    let cnf = format!("{name}.cnf");
    std::fs::write(dir.join(&cnf), USAGE_CNF).unwrap();
    let (key, csr, pem) = (
        format!("../{key}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let (ca, ca_key) = match issuer {
        "ca" => ("../ca.pem".to_owned(), "../ca.key".to_owned()),
        other => (format!("{other}-by-ca.pem"), "../inter.key".to_owned()),
    };
    let subject = format!("/O=Example/CN={section}");
    openssl(
        &dir,
        &[
            "req", "-new", "-config", &cnf, "-key", &key, "-subj", &subject, "-out", &csr,
        ],
    );
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-days",
            "30",
            "-sha256",
            "-extfile",
            &cnf,
            "-extensions",
            section,
            "-out",
            &pem,
        ],
    );
    load_pem_certificates(&dir.join(&pem)).unwrap().remove(0)
}

#[test]
fn a_signer_whose_own_extensions_forbid_signing_is_refused() {
    let trust = store(&["ca"]);
    let check = |section: &str| trust.check(&issued_with(section, "client", "ca"), &[], now());
    // RFC 5280 §4.2: a critical extension nobody here processes.
    assert_eq!(
        check("unknown_critical"),
        Err(TrustError::UnhandledCritical)
    );
    // keyUsage without digitalSignature or nonRepudiation.
    assert_eq!(check("key_cert_sign"), Err(TrustError::KeyUsage));
    assert_eq!(check("key_encipherment"), Err(TrustError::KeyUsage));
    assert_eq!(check("non_repudiation"), Ok(()));
    // extendedKeyUsage naming only purposes that are not signing messages.
    assert_eq!(check("code_signing"), Err(TrustError::ExtendedKeyUsage));
    assert_eq!(check("email_and_time"), Err(TrustError::ExtendedKeyUsage));
    assert_eq!(check("client_auth"), Ok(()));
    assert_eq!(check("document_signing"), Ok(()));
    // None of the refused ones is remembered.
    assert_eq!(trust.cached_len(), 3);
}

#[test]
fn an_intermediate_with_an_unknown_critical_extension_cannot_issue() {
    let trust = store(&["ca"]);
    let inter = issued_with("ca_unknown_critical", "inter", "ca");
    let leaf = issued_with("client_auth", "client", "ca_unknown_critical");
    assert!(leaf.is_signed_by(&inter));
    assert_eq!(
        trust.check(&leaf, &[inter], now()),
        Err(TrustError::Untrusted)
    );
}

#[test]
fn a_chain_through_an_intermediate_is_trusted() {
    let trust = store(&["ca"]);
    let deep = cert("deep");
    assert_eq!(
        trust.check(&deep, &[], now()),
        Err(TrustError::Untrusted),
        "needs the intermediate"
    );
    assert_eq!(trust.check(&deep, &[cert("inter")], now()), Ok(()));
    // Unrelated extra certificates do not matter.
    assert_eq!(
        trust.check(&deep, &[cert("other-ca"), cert("inter")], now()),
        Ok(())
    );
}

#[test]
fn rogue_self_signed_certificate_with_the_clients_subject_is_rejected() {
    let trust = TrustStore::new(
        vec![cert("ca")],
        Some(regex::Regex::new("CN=client$").unwrap()),
    );
    let rogue = cert("rogue");
    assert_eq!(rogue.subject(), cert("client").subject());
    assert_eq!(trust.check(&rogue, &[], now()), Err(TrustError::Untrusted));
    // Nor through a fake CA with the real CA's name.
    assert_eq!(
        trust.check(&cert("rogue-leaf"), &[cert("rogue-ca")], now()),
        Err(TrustError::Untrusted)
    );
    assert_eq!(
        trust.check(&cert("rogue-ca"), &[], now()),
        Err(TrustError::SubjectMismatch)
    );
    let any_subject = store(&["ca"]);
    assert_eq!(
        any_subject.check(&cert("rogue-ca"), &[], now()),
        Err(TrustError::Untrusted)
    );
}

#[test]
fn a_certificate_from_an_untrusted_ca_is_rejected() {
    let trust = store(&["ca"]);
    assert_eq!(
        trust.check(&cert("other-leaf"), &[cert("other-ca")], now()),
        Err(TrustError::Untrusted)
    );
    assert_eq!(
        store(&["other-ca"]).check(&cert("other-leaf"), &[], now()),
        Ok(())
    );
}

#[test]
fn a_leaf_cannot_act_as_an_intermediate() {
    let trust = store(&["ca"]);
    let sub = cert("sub-by-leaf");
    assert!(sub.is_signed_by(&cert("client")));
    assert_eq!(
        trust.check(&sub, &[cert("client")], now()),
        Err(TrustError::Untrusted)
    );
}

#[test]
fn expired_and_not_yet_valid_certificates_are_rejected() {
    let trust = store(&["ca"]);
    let expired = cert("expired");
    assert!(expired.is_signed_by(&cert("ca")));
    assert_eq!(trust.check(&expired, &[], now()), Err(TrustError::Expired));
    // Inside its own window it would have been fine, had the CA existed then.
    let client = cert("client");
    assert_eq!(
        trust.check(&client, &[], client.not_before() - 1),
        Err(TrustError::NotYetValid)
    );
    assert_eq!(
        trust.check(&client, &[], client.not_after() + 1),
        Err(TrustError::Expired)
    );
    // An intermediate that has expired breaks the chain with that reason, the leaf being fine.
    let inter = cert("inter-short");
    let deep = cert("deep-short");
    let later = inter.not_after() + 1;
    assert!(later < deep.not_after());
    assert_eq!(
        trust.check(&deep, std::slice::from_ref(&inter), now()),
        Ok(())
    );
    let fresh = store(&["ca"]);
    assert_eq!(
        fresh.check(&deep, &[inter], later),
        Err(TrustError::Expired)
    );
}

#[test]
fn subject_pattern_is_enforced() {
    let trust = TrustStore::new(
        vec![cert("ca")],
        Some(regex::Regex::new("O=Example, CN=(client|server)$").unwrap()),
    );
    assert_eq!(trust.check(&cert("client"), &[], now()), Ok(()));
    assert_eq!(trust.check(&cert("server"), &[], now()), Ok(()));
    assert_eq!(
        trust.check(&cert("deep"), &[cert("inter")], now()),
        Err(TrustError::SubjectMismatch)
    );
}

#[test]
fn a_trusted_certificate_is_remembered_until_its_chain_expires() {
    let trust = store(&["ca"]);
    let deep = cert("deep");
    assert_eq!(trust.cached_len(), 0);
    assert_eq!(trust.check(&deep, &[cert("inter")], now()), Ok(()));
    assert_eq!(trust.cached_len(), 1);
    // Served from the cache: without the intermediate a fresh check would fail.
    assert_eq!(trust.check(&deep, &[], now()), Ok(()));
    assert_eq!(trust.cached_len(), 1);
    // Outside the remembered window the full check runs again.
    assert_eq!(
        trust.check(&deep, &[], deep.not_after() + 1),
        Err(TrustError::Expired)
    );
    // That window is the whole chain's: here it ends with the intermediate, before the leaf.
    let short = cert("deep-short");
    let inter = cert("inter-short");
    assert_eq!(
        trust.check(&short, std::slice::from_ref(&inter), now()),
        Ok(())
    );
    assert_eq!(trust.check(&short, &[], inter.not_after()), Ok(()));
    assert_eq!(
        trust.check(&short, &[], inter.not_after() + 1),
        Err(TrustError::Untrusted)
    );
    assert_eq!(trust.cached_len(), 2);
    // Failures are not remembered.
    assert_eq!(
        trust.check(&cert("rogue"), &[], now()),
        Err(TrustError::Untrusted)
    );
    assert_eq!(trust.cached_len(), 2);
}

#[test]
fn certificate_from_der_rejects_what_it_cannot_use() {
    assert!(matches!(
        Certificate::from_der(b"garbage"),
        Err(KeyError::Certificate { .. })
    ));
    let mut der = cert("client").der().to_vec();
    der.push(0);
    assert!(Certificate::from_der(&der).is_err());
    let f = fixture();
    openssl(
        &f.dir,
        &[
            "req", "-x509", "-new", "-key", "ec.key", "-subj", "/CN=ec", "-days", "1", "-out",
            "ec.pem",
        ],
    );
    let err = load_pem_certificates(&f.path("ec.pem")).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("ec.pem: certificate 1: not an RSA key"),
        "{err}"
    );
}

#[test]
fn types_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Certificate>();
    assert_send_sync::<TrustStore>();
    assert_send_sync::<Identity>();
}

#[test]
fn a_trust_store_keeps_the_certificates_it_accepted_by_their_exact_bytes() {
    let ca = cert("ca");
    let trust = TrustStore::new(vec![ca], None);
    let (client, rogue) = (cert("client"), cert("rogue"));
    assert!(trust.accepted(client.der()).is_none());
    trust.check(&client, &[], now()).unwrap();
    let kept = trust.accepted(client.der()).unwrap();
    assert_eq!(kept.der(), client.der());
    assert_eq!(kept.subject(), client.subject());
    // One byte more or less is another certificate.
    let mut longer = client.der().to_vec();
    longer.push(0);
    assert!(trust.accepted(&longer).is_none());
    assert!(trust
        .accepted(&client.der()[..client.der().len() - 1])
        .is_none());
    // Accepted twice is kept once.
    trust.check(&kept, &[], now()).unwrap();
    assert_eq!(trust.cached_len(), 1);
    // A certificate the store refused is not kept.
    assert!(trust.check(&rogue, &[], now()).is_err());
    assert!(trust.accepted(rogue.der()).is_none());
    // Kept is not trusted at any time: past its validity, the kept certificate is refused.
    assert!(trust.check(&kept, &[], kept.not_after() + 1).is_err());
}
