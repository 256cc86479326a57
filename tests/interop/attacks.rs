//! Bad requests made by WSS4J itself: each gets its fault, and nothing reaches the back end.

use busbar_bench::payload::{buy_stocks, Variant};

use crate::peers::work_dir;
use crate::service::{
    judge, send_all, wss4j_requests, Case, Service, Want, CERTS, MODERN, SECURE, SIGNED, USERNAME,
};

const EXPIRED: Want = Want::Fault("wsu:MessageExpired");
const INVALID: Want = Want::Fault("wsse:InvalidSecurity");
const FAILED_CHECK: Want = Want::Fault("wsse:FailedCheck");
const AUTHENTICATION: Want = Want::Fault("wsse:FailedAuthentication");
const NO_TOKEN: Want = Want::Fault("wsse:SecurityTokenUnavailable");

fn cases() -> Vec<Case> {
    let ut = |user: &'static str, password: &'static str| {
        [
            "--actions",
            "UsernameToken",
            "--user",
            user,
            "--password",
            password,
            "--pw-type",
            "digest",
        ]
    };
    let mut c = vec![
        // Freshness.
        Case::new(
            "an hour-old timestamp",
            SECURE,
            EXPIRED,
            &["--time-offset", "-3600"],
        ),
        Case::new(
            "an hour-old timestamp, SOAP 1.2",
            SECURE,
            EXPIRED,
            &["--time-offset", "-3600", "--soap", "12"],
        ),
        Case::new(
            "a timestamp an hour ahead",
            SECURE,
            EXPIRED,
            &["--time-offset", "3600"],
        ),
        Case::new(
            "a timestamp without Expires",
            SECURE,
            INVALID,
            &["--ttl", "0"],
        ),
        // Coverage.
        Case::new(
            "a signature covering only the Timestamp",
            SECURE,
            INVALID,
            &["--sign-parts", "Timestamp"],
        ),
        Case::new(
            "a signature covering only the Body",
            SECURE,
            INVALID,
            &["--sign-parts", "Body"],
        ),
        Case::new(
            "no encryption where it is required",
            SECURE,
            INVALID,
            &["--actions", "Timestamp Signature"],
        ),
        Case::new(
            "no signature where it is required",
            SECURE,
            INVALID,
            &["--actions", "Timestamp Encrypt"],
        ),
        Case::new(
            "no timestamp where it is required",
            SECURE,
            INVALID,
            &["--actions", "Signature Encrypt", "--sign-parts", "Body"],
        ),
        Case::new(
            "only a timestamp on the signed proxy",
            SIGNED,
            INVALID,
            &["--actions", "Timestamp"],
        ),
        // Signers.
        Case::new(
            "a rogue self-signed certificate with the client's DN",
            SECURE,
            AUTHENTICATION,
            &["--signer", "rogue"],
        ),
        Case::new(
            "an expired certificate",
            SECURE,
            AUTHENTICATION,
            &["--signer", "expired"],
        ),
        Case::new(
            "a certificate of an untrusted CA",
            SECURE,
            AUTHENTICATION,
            &["--signer", "untrusted"],
        ),
        Case::new(
            "a signer named by issuer and serial, unknown to the proxy",
            SECURE,
            NO_TOKEN,
            &["--sig-key-id", "IssuerSerial"],
        ),
        Case::new(
            "a rogue signer named by its SubjectKeyIdentifier",
            CERTS,
            NO_TOKEN,
            &["--signer", "rogue", "--sig-key-id", "SKIKeyIdentifier"],
        ),
        Case::new(
            "an untrusted signer named by issuer and serial",
            CERTS,
            NO_TOKEN,
            &["--signer", "untrusted", "--sig-key-id", "IssuerSerial"],
        ),
        // Encryption.
        Case::new(
            "encrypted for another recipient",
            SECURE,
            FAILED_CHECK,
            &["--recipient", "client"],
        ),
        Case::new(
            "encrypted for another key of the service's name",
            MODERN,
            FAILED_CHECK,
            &["--profile", "modern", "--recipient", "server3072"],
        ),
        // UsernameToken.
        Case::new(
            "a wrong password",
            USERNAME,
            AUTHENTICATION,
            &ut("alice", "guess"),
        ),
        Case::new(
            "an unknown user",
            USERNAME,
            AUTHENTICATION,
            &ut("mallory", "s3cret"),
        ),
    ];
    let mut stale_ut = ut("alice", "s3cret").to_vec();
    stale_ut.extend(["--time-offset", "-3600"]);
    c.push(Case::new(
        "an hour-old UsernameToken",
        USERNAME,
        EXPIRED,
        &stale_ut,
    ));
    c
}

#[test]
fn wss4j_made_attacks_get_their_faults_and_nothing_is_forwarded() {
    let dir = work_dir("attacks");
    let mut cases = cases();
    // Two more made by WSS4J and then misused here.
    let tampered = cases.len();
    cases.push(Case::new(
        "a Body changed after signing",
        SIGNED,
        FAILED_CHECK,
        &["--actions", "Timestamp Signature"],
    ));
    let replayed = cases.len();
    cases.push(Case::new(
        "a good request (replayed below)",
        MODERN,
        Want::Accept,
        &["--profile", "modern"],
    ));
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    let mut messages = wss4j_requests(&dir, "attacks", &cases, &plain);
    let text = String::from_utf8_lossy(&messages[tampered]).into_owned();
    assert!(text.contains("<symbol>IBM</symbol>"), "{text}");
    messages[tampered] = text
        .replacen("<symbol>IBM</symbol>", "<symbol>EVIL</symbol>", 1)
        .into_bytes();

    let service = Service::start();
    let mut failures = send_all(&service, &cases, &messages);
    let again = service.send(MODERN, false, &messages[replayed]);
    if let Err(e) = judge(INVALID, &again) {
        failures.push(format!("the same request again: {e}"));
    }
    assert!(
        failures.is_empty(),
        "{} of {} attacks went wrong (messages in {}):\n{}",
        failures.len(),
        cases.len() + 1,
        dir.display(),
        failures.join("\n")
    );
}
