//! Requests made by Apache WSS4J, as a CXF or Axis2 client sends them, in every variant
//! busbar supports: busbar accepts each and forwards the plain message; the modern profile
//! refuses the legacy algorithms.

use busbar_bench::payload::{buy_stocks, Variant};

use crate::peers::work_dir;
use crate::service::{
    send_all, wss4j_requests, Case, Service, Want, CERTS, MODERN, SECURE, USERNAME,
};

const OK: Want = Want::Accept;
const UNSUPPORTED: Want = Want::Fault("wsse:UnsupportedAlgorithm");

fn cases() -> Vec<Case> {
    let mut c = Vec::new();

    // Both profiles in both SOAP versions; the legacy proxy takes modern messages too.
    for (path, profiles) in [
        (SECURE, ["legacy", "modern"].as_slice()),
        (MODERN, ["modern"].as_slice()),
    ] {
        for p in profiles {
            for soap in ["11", "12"] {
                c.push(Case::new(
                    format!("{p} profile, SOAP {soap}"),
                    path,
                    OK,
                    &["--profile", p, "--soap", soap],
                ));
            }
        }
    }
    c.push(Case::new(
        "WSS4J's defaults (RSA-SHA1, SHA-1, RSA-OAEP, AES-128-CBC)",
        SECURE,
        OK,
        &[],
    ));

    // How the signature names its certificate. Only the BST and X509KeyIdentifier carry it;
    // the others need the proxy with trust.certs.
    for id in ["DirectReference", "X509KeyIdentifier"] {
        c.push(Case::new(
            format!("signature key id {id}"),
            SECURE,
            OK,
            &["--sig-key-id", id],
        ));
    }
    for p in ["legacy", "modern"] {
        for id in [
            "DirectReference",
            "IssuerSerial",
            "SKIKeyIdentifier",
            "Thumbprint",
            "X509KeyIdentifier",
        ] {
            c.push(Case::new(
                format!("signature key id {id}, {p} profile, trust.certs"),
                CERTS,
                OK,
                &["--profile", p, "--sig-key-id", id],
            ));
        }
    }

    // Signature algorithms and digests.
    for (alg, digest) in [
        ("rsa-sha1", "sha1"),
        ("rsa-sha256", "sha256"),
        ("rsa-sha256", "sha1"),
        ("rsa-sha1", "sha256"),
    ] {
        c.push(Case::new(
            format!("{alg} with {digest} digests"),
            SECURE,
            OK,
            &["--sig-alg", alg, "--digest", digest],
        ));
    }

    // Key transport and data cipher, every pair on the legacy profile, OAEP on the modern.
    for enc in ["aes128-cbc", "aes256-cbc", "aes128-gcm", "aes256-gcm"] {
        for kt in ["rsa15", "oaep"] {
            c.push(Case::new(
                format!("{kt} key transport, {enc}"),
                SECURE,
                OK,
                &["--key-transport", kt, "--enc", enc],
            ));
        }
        c.push(Case::new(
            format!("modern profile with {enc}"),
            MODERN,
            OK,
            &["--profile", "modern", "--enc", enc],
        ));
    }

    // How the EncryptedKey names the service's certificate.
    for id in [
        "SKIKeyIdentifier",
        "IssuerSerial",
        "Thumbprint",
        "DirectReference",
        "X509KeyIdentifier",
    ] {
        c.push(Case::new(
            format!("encryption key id {id}"),
            SECURE,
            OK,
            &["--enc-key-id", id],
        ));
        c.push(Case::new(
            format!("encryption key id {id}, modern profile"),
            MODERN,
            OK,
            &["--profile", "modern", "--enc-key-id", id],
        ));
    }

    // UsernameToken: with the full protection, and alone.
    for pw in ["text", "digest"] {
        c.push(Case::new(
            format!("UsernameToken ({pw}) with timestamp, signature and encryption"),
            SECURE,
            OK,
            &[
                "--actions",
                "UsernameToken Timestamp Signature Encrypt",
                "--user",
                "alice",
                "--password",
                "s3cret",
                "--pw-type",
                pw,
            ],
        ));
        c.push(Case::new(
            format!("UsernameToken ({pw}) under the signature"),
            SECURE,
            OK,
            &[
                "--actions",
                "UsernameToken Timestamp Signature Encrypt",
                "--sign-parts",
                "Timestamp;Body;UsernameToken",
                "--user",
                "alice",
                "--password",
                "s3cret",
                "--pw-type",
                pw,
            ],
        ));
        c.push(Case::new(
            format!("UsernameToken ({pw}) alone, SOAP 1.2"),
            USERNAME,
            OK,
            &[
                "--actions",
                "UsernameToken",
                "--soap",
                "12",
                "--user",
                "alice",
                "--password",
                "s3cret",
                "--pw-type",
                pw,
            ],
        ));
        c.push(Case::new(
            format!("UsernameToken ({pw}) alone"),
            USERNAME,
            OK,
            &[
                "--actions",
                "UsernameToken",
                "--user",
                "alice",
                "--password",
                "s3cret",
                "--pw-type",
                pw,
            ],
        ));
    }

    // Other shapes.
    c.push(Case::new(
        "RSA-3072 client key, modern profile",
        MODERN,
        OK,
        &["--profile", "modern", "--signer", "client3072"],
    ));
    c.push(Case::new(
        "Security header without mustUnderstand",
        SECURE,
        OK,
        &["--must-understand", "false"],
    ));
    c.push(Case::new(
        "signature also covering a header block",
        SECURE,
        OK,
        &[
            "--sign-parts",
            "Timestamp;Body;{Element}{http://someuri}routing",
        ],
    ));
    c.push(Case::new(
        "the Body's child encrypted as an Element",
        SECURE,
        OK,
        &[
            "--enc-parts",
            "{Element}{http://services.samples/xsd}buyStocks",
        ],
    ));
    c.push(Case::new(
        "modern profile, SOAP 1.2, signer and recipient by issuer and serial",
        CERTS,
        OK,
        &[
            "--profile",
            "modern",
            "--soap",
            "12",
            "--sig-key-id",
            "IssuerSerial",
            "--enc-key-id",
            "IssuerSerial",
        ],
    ));

    // The modern profile refuses every legacy algorithm.
    c.push(Case::new(
        "legacy profile on the modern proxy",
        MODERN,
        UNSUPPORTED,
        &["--profile", "legacy"],
    ));
    for (what, option, value) in [
        ("RSA-1.5 key transport", "--key-transport", "rsa15"),
        ("RSA-SHA1 signature", "--sig-alg", "rsa-sha1"),
        ("SHA-1 digests", "--digest", "sha1"),
    ] {
        c.push(Case::new(
            format!("{what} on the modern proxy"),
            MODERN,
            UNSUPPORTED,
            &["--profile", "modern", option, value],
        ));
    }
    c
}

#[test]
fn wss4j_requests_of_every_supported_variant_reach_the_back_end_plain() {
    let dir = work_dir("wss4j-requests");
    let cases = cases();
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    let messages = wss4j_requests(&dir, "requests", &cases, &plain);
    let service = Service::start();
    let failures = send_all(&service, &cases, &messages);
    assert!(
        failures.is_empty(),
        "{} of {} WSS4J requests went wrong (messages in {}):\n{}",
        failures.len(),
        cases.len(),
        dir.display(),
        failures.join("\n")
    );
}
