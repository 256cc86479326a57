//! SecureProxy end to end: busbar-wssec plays the client (it signs and encrypts requests
//! with the client's key and checks the responses with it); busbar serves the proxy; a
//! recording back end shows what was forwarded. The interop tests (tests/interop) repeat the
//! positive cases with WSS4J and python-xmlsec as the client.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use busbar_bench::payload::{buy_stocks, Variant};
use busbar_wssec::keys::{load_pem_certificates, Certificate, Identity, TrustStore};
use busbar_wssec::{
    EncryptSettings, KeyReference, Secured, Securer, SignSettings, Verifier, VerifyPolicy,
};

use crate::support::*;

const SOAP11: (&str, &str) = ("Content-Type", "text/xml; charset=UTF-8");
const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Profile {
    Legacy,
    Modern,
}

impl Profile {
    fn path(self) -> &'static str {
        match self {
            Profile::Legacy => "/service/SecureProxy",
            Profile::Modern => "/service/SecureProxyModern",
        }
    }
}

fn identity(keys: &Path, name: &str) -> Arc<Identity> {
    Arc::new(
        Identity::from_pkcs12(&keys.join(format!("{name}.p12")), &format!("{name}-pass"))
            .unwrap_or_else(|e| panic!("{name}.p12: {e}")),
    )
}

fn cert(keys: &Path, name: &str) -> Certificate {
    load_pem_certificates(&keys.join(format!("{name}.pem")))
        .expect("pem")
        .remove(0)
}

/// What a client of each profile sends: signed by `signer`, encrypted for `recipient`.
fn client(profile: Profile, keys: &Path, signer: &str, encrypt: bool) -> Securer {
    let (algorithm, digest, cipher, transport) = match profile {
        Profile::Legacy => busbar_bench::secure::Profile::Legacy,
        Profile::Modern => busbar_bench::secure::Profile::Modern,
    }
    .algorithms();
    Securer {
        timestamp_ttl_ms: Some(300_000),
        sign: Some(SignSettings {
            identity: identity(keys, signer),
            algorithm,
            digest,
            key_reference: KeyReference::Bst,
            sign_body: true,
            sign_timestamp: true,
        }),
        encrypt: encrypt.then_some(EncryptSettings {
            cipher,
            transport,
            key_reference: KeyReference::Ski,
        }),
        limits: Default::default(),
    }
}

/// How the client checks a response: decrypt with its key, verify against the CA.
fn response_checker(keys: &Path) -> Verifier {
    let ca = load_pem_certificates(&keys.join("ca.pem")).expect("ca");
    Verifier::new(
        VerifyPolicy {
            require_timestamp: true,
            require_signature: true,
            require_encryption: true,
            require_username_token: false,
            trust: Some(TrustStore::new(
                ca,
                Some(regex::Regex::new("CN=server").expect("re")),
            )),
            known_certs: Vec::new(),
            decrypt: Some(identity(keys, "client")),
            max_skew_ms: 300_000,
            max_age_ms: 300_000,
            require_expires: true,
            legacy: true,
            remove_header: true,
            users: Default::default(),
            limits: Default::default(),
        },
        None,
        None,
    )
}

fn yaml(backend: std::net::SocketAddr, keys: &Path) -> String {
    let k = keys.display();
    let verify = |alg: &str, require: &str| {
        format!(
            "      - wsse_verify:\n          require: [{require}]\n          trust: {{ ca: \"{k}/ca.pem\", subject: \"CN=client\" }}\n          decrypt_key: {{ pkcs12: \"{k}/server.p12\", password: server-pass }}\n          algorithms: {alg}\n          users: {{ alice: \"s3cret\" }}\n"
        )
    };
    let secure = |digest: &str, data: &str, kt: &str| {
        format!(
            "    out:\n      - wsse_secure:\n          timestamp: {{ ttl: 5m }}\n          sign: {{ key: \"{k}/server.p12\", password: server-pass, digest: {digest} }}\n          encrypt: {{ for: request_signer, data: {data}, key_transport: {kt} }}\n"
        )
    };
    format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/service/EchoService\" }}\nproxies:\n  SecureProxy:\n    path: /service/SecureProxy\n    in:\n{}      - call: echo\n{}  SecureProxyModern:\n    path: /service/SecureProxyModern\n    in:\n{}      - call: echo\n{}  SignedProxy:\n    path: /service/SignedProxy\n    in:\n{}      - call: echo\n  UsernameProxy:\n    path: /service/UsernameProxy\n    in:\n{}      - call: echo\n",
        verify("legacy", "timestamp, signature, encryption"),
        secure("sha1", "aes128-cbc", "rsa-1_5"),
        verify("modern", "timestamp, signature, encryption"),
        secure("sha256", "aes256-gcm", "rsa-oaep"),
        verify("legacy", "timestamp, signature"),
        verify("modern", "username_token"),
    )
}

fn secured(securer: &Securer, keys: &Path, body: &[u8]) -> Secured {
    securer
        .secure_keeping_plain(body, Some(&cert(keys, "server")), SystemTime::now())
        .expect("secure")
}

/// Sends one request; checks the response decrypts and verifies and equals what the back end
/// echoed (the plain request).
fn round_trip(h: &Harness, checker: &Verifier, profile: Profile, securer: &Securer, size: usize) {
    let keys = test_keys();
    let plain = buy_stocks(size, Variant::Plain).expect("payload");
    let s = secured(securer, &keys, &plain);
    let r = Client::connect(h.http())
        .post(profile.path(), &[SOAP11], &s.message)
        .expect("post");
    assert_eq!(r.status, 200, "{profile:?} {size}: {}", r.text());
    let text = r.text();
    assert!(
        text.contains("EncryptedData"),
        "the response body is not encrypted"
    );
    assert!(!text.contains("<order>"), "plain orders in the response");
    let got = checker
        .verify(&r.body, None, SystemTime::now())
        .unwrap_or_else(|e| panic!("{profile:?} {size}: response does not verify: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&got.message),
        String::from_utf8_lossy(&s.plain),
        "{profile:?} {size}"
    );
    assert!(got
        .signer
        .is_some_and(|c| c.subject().contains("CN=server")));
}

#[test]
fn secure_proxy_round_trips_both_profiles_at_every_size() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let checker = response_checker(&keys);
    for profile in [Profile::Legacy, Profile::Modern] {
        let securer = client(profile, &keys, "client", true);
        for size in [
            512,
            1024,
            4095,
            4096,
            10 * 1024,
            16 * 1024 - 1,
            16 * 1024 + 1,
            100 * 1024,
        ] {
            round_trip(&h, &checker, profile, &securer, size);
            // The back end got the plain message: no Security header, the Body decrypted.
            let last = seen
                .lock()
                .expect("lock")
                .last()
                .cloned()
                .expect("forwarded");
            let last = String::from_utf8_lossy(&last).into_owned();
            assert!(
                !last.contains(WSSE),
                "{profile:?} {size}: Security header forwarded"
            );
            assert!(last.contains("<symbol>IBM</symbol>"), "{profile:?} {size}");
            assert!(
                last.contains("xadmin;server1;community#1.0##"),
                "other headers stay"
            );
        }
    }
}

#[test]
fn secure_proxy_serves_fifty_concurrent_clients() {
    let keys = test_keys();
    let echo = echo(Default::default());
    let h = Arc::new(engine(&yaml(echo.addr, &keys)));
    let checker = Arc::new(response_checker(&keys));
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let (h, checker, keys) = (h.clone(), checker.clone(), keys.clone());
            std::thread::spawn(move || {
                let profile = if i % 2 == 0 {
                    Profile::Legacy
                } else {
                    Profile::Modern
                };
                let securer = client(profile, &keys, "client", true);
                for size in [512, 10 * 1024] {
                    round_trip(&h, &checker, profile, &securer, size);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    echo.stop();
}

/// The fault code a response carries, e.g. `wsse:FailedCheck`.
fn fault_code(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let start = text.find("<faultcode").expect("a SOAP 1.1 fault");
    let from = start + text[start..].find('>').expect(">") + 1;
    let to = from + text[from..].find("</faultcode>").expect("</faultcode>");
    text[from..to].to_owned()
}

struct Attack {
    name: &'static str,
    path: &'static str,
    message: Vec<u8>,
    code: &'static str,
}

fn replace_once(message: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(message);
    assert!(text.contains(from), "'{from}' not in the message");
    text.replacen(from, to, 1).into_bytes()
}

/// `base64` with the character at `at` changed (to another base64 character).
fn flip_char(base64: &str, at: usize) -> String {
    let mut b = base64.as_bytes().to_vec();
    b[at] = if b[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8_lossy(&b).into_owned()
}

/// The value of the first `attr="..."` after `after` in `text`.
fn attr_after(text: &str, after: &str, attr: &str) -> String {
    let at = text.find(after).expect("anchor");
    let key = format!("{attr}=\"");
    let from = at + text[at..].find(&key).expect("attr") + key.len();
    let to = from + text[from..].find('"').expect("quote");
    text[from..to].to_owned()
}

/// The text between `<tag ...>` and `</tag>` of the first such element.
fn element_text(text: &str, tag: &str) -> String {
    let at = text.find(&format!("<{tag}")).expect("element");
    let from = at + text[at..].find('>').expect(">") + 1;
    let to = from + text[from..].find(&format!("</{tag}>")).expect("end");
    text[from..to].to_owned()
}

fn element(text: &str, tag: &str) -> String {
    let from = text.find(&format!("<{tag}")).expect("element");
    let end = format!("</{tag}>");
    let to = from + text[from..].find(&end).expect("end") + end.len();
    text[from..to].to_owned()
}

fn attacks(keys: &Path) -> Vec<Attack> {
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    let legacy = client(Profile::Legacy, keys, "client", true);
    let signed_only = client(Profile::Legacy, keys, "client", false);
    let now = SystemTime::now();
    let server = cert(keys, "server");
    let make = |s: &Securer| s.secure(&plain, Some(&server), now).expect("secure");
    let good = make(&legacy);
    let good_text = String::from_utf8_lossy(&good).into_owned();
    let signed = make(&signed_only);
    let signed_text = String::from_utf8_lossy(&signed).into_owned();
    let mut out = Vec::new();
    let mut add = |name, path, message: Vec<u8>, code| {
        out.push(Attack {
            name,
            path,
            message,
            code,
        })
    };

    // Tampering.
    add(
        "tampered body",
        "/service/SignedProxy",
        replace_once(&signed, "<symbol>IBM</symbol>", "<symbol>EVIL</symbol>"),
        "wsse:FailedCheck",
    );
    let sig_value = element_text(&good_text, "ds:SignatureValue");
    add(
        "bit-flipped SignatureValue",
        "/service/SecureProxy",
        replace_once(&good, &sig_value, &flip_char(&sig_value, 10)),
        "wsse:FailedCheck",
    );
    // Each attack that gets as far as decryption alters a message of its own: the first
    // altered copy of a message is decrypted (and refused), the next is a replay.
    let fresh = || {
        let m = make(&legacy);
        let t = String::from_utf8_lossy(&m).into_owned();
        (m, t)
    };
    let (msg, text) = fresh();
    let cipher = element_text(&element(&text, "xenc:EncryptedData"), "xenc:CipherValue");
    add(
        "tampered ciphertext",
        "/service/SecureProxy",
        replace_once(&msg, &cipher, &flip_char(&cipher, 40)),
        "wsse:FailedCheck",
    );
    let (msg, text) = fresh();
    let ek_cipher = element_text(&element(&text, "xenc:EncryptedKey"), "xenc:CipherValue");
    add(
        "RSA-1.5 key with broken padding",
        "/service/SecureProxy",
        replace_once(&msg, &ek_cipher, &flip_char(&ek_cipher, 20)),
        "wsse:FailedCheck",
    );

    // Signature wrapping: the signed Body moves into a header; a new Body replaces it.
    let body = element(&signed_text, "soapenv:Body");
    let evil_body = "<soapenv:Body><m:buyStocks xmlns:m=\"http://services.samples/xsd\"><order><symbol>EVIL</symbol></order></m:buyStocks></soapenv:Body>";
    let wrapped = signed_text.replacen(&body, evil_body, 1).replacen(
        "<soapenv:Header>",
        &format!(
            "<soapenv:Header><w:Wrapper xmlns:w=\"urn:evil\">{}</w:Wrapper>",
            body
        ),
        1,
    );
    add(
        "signature wrapping (signed Body moved into a header)",
        "/service/SignedProxy",
        wrapped.into_bytes(),
        "wsse:InvalidSecurity",
    );
    // Unsigned content after the Body (SOAP 1.1 allows it, WS-I BP R1011 does not), each in
    // a message of its own: a message the replay cache has seen would be refused as a replay.
    let injected = "<x:Injected xmlns:x=\"urn:x\">UNSIGNED</x:Injected></soapenv:Envelope>";
    add(
        "unsigned element after the signed Body",
        "/service/SignedProxy",
        replace_once(&make(&signed_only), "</soapenv:Envelope>", injected),
        "wsse:InvalidSecurity",
    );
    add(
        "unsigned element after the encrypted Body",
        "/service/SecureProxy",
        replace_once(&fresh().0, "</soapenv:Envelope>", injected),
        "wsse:InvalidSecurity",
    );
    let body_id = attr_after(&signed_text, "<soapenv:Body", "wsu:Id");
    let dup = signed_text.replacen(
        "<soapenv:Header>",
        &format!("<soapenv:Header><Other xmlns=\"urn:x\" xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\" wsu:Id=\"{body_id}\"/>"),
        1,
    );
    add(
        "duplicated wsu:Id",
        "/service/SignedProxy",
        dup.into_bytes(),
        "wsse:InvalidSecurity",
    );

    // Missing or partial protection.
    let sig = element(&signed_text, "ds:Signature");
    add(
        "signature removed",
        "/service/SignedProxy",
        signed_text.replacen(&sig, "", 1).into_bytes(),
        "wsse:InvalidSecurity",
    );
    let mut ts_only = client(Profile::Legacy, keys, "client", false);
    if let Some(s) = ts_only.sign.as_mut() {
        s.sign_body = false;
    }
    add(
        "signature covering only the timestamp",
        "/service/SignedProxy",
        make(&ts_only),
        "wsse:InvalidSecurity",
    );
    let mut unsigned_ts = client(Profile::Legacy, keys, "client", false);
    if let Some(s) = unsigned_ts.sign.as_mut() {
        s.sign_timestamp = false;
    }
    add(
        "unsigned timestamp",
        "/service/SignedProxy",
        make(&unsigned_ts),
        "wsse:InvalidSecurity",
    );
    add(
        "missing body encryption when required",
        "/service/SecureProxy",
        signed.clone(),
        "wsse:InvalidSecurity",
    );
    let security = element(&signed_text, "wsse:Security");
    add(
        "two Security headers",
        "/service/SignedProxy",
        signed_text
            .replacen(&security, &format!("{security}{security}"), 1)
            .into_bytes(),
        "wsse:InvalidSecurity",
    );

    // Timestamps.
    let at = |offset_s: i64| {
        let t = if offset_s >= 0 {
            now + Duration::from_secs(offset_s as u64)
        } else {
            now - Duration::from_secs((-offset_s) as u64)
        };
        legacy.secure(&plain, Some(&server), t).expect("secure")
    };
    add(
        "expired timestamp",
        "/service/SecureProxy",
        at(-3600),
        "wsu:MessageExpired",
    );
    add(
        "timestamp in the future",
        "/service/SecureProxy",
        at(3600),
        "wsu:MessageExpired",
    );
    let mut no_ts = client(Profile::Legacy, keys, "client", true);
    no_ts.timestamp_ttl_ms = None;
    add(
        "missing timestamp",
        "/service/SecureProxy",
        make(&no_ts),
        "wsse:InvalidSecurity",
    );
    let ts = element(&signed_text, "wsu:Timestamp");
    add(
        "duplicate timestamp",
        "/service/SignedProxy",
        signed_text
            .replacen(
                &ts,
                &format!("{ts}{}", ts.replace("wsu:Id=\"TS-", "wsu:Id=\"TS2-")),
                1,
            )
            .into_bytes(),
        "wsse:InvalidSecurity",
    );

    // Trust.
    for (name, who, code) in [
        (
            "rogue self-signed certificate with the client's DN",
            "rogue",
            "wsse:FailedAuthentication",
        ),
        (
            "certificate of an untrusted CA",
            "untrusted",
            "wsse:FailedAuthentication",
        ),
        (
            "expired certificate",
            "expired",
            "wsse:FailedAuthentication",
        ),
    ] {
        add(
            name,
            "/service/SecureProxy",
            make(&client(Profile::Legacy, keys, who, true)),
            code,
        );
    }

    // Algorithms and transforms outside the profile.
    add(
        "HMAC signature method",
        "/service/SignedProxy",
        replace_once(
            &signed,
            "http://www.w3.org/2000/09/xmldsig#rsa-sha1",
            "http://www.w3.org/2000/09/xmldsig#hmac-sha1",
        ),
        "wsse:UnsupportedAlgorithm",
    );
    for (name, uri) in [
        (
            "XSLT transform",
            "http://www.w3.org/TR/1999/REC-xslt-19991116",
        ),
        (
            "XPath transform",
            "http://www.w3.org/TR/1999/REC-xpath-19991116",
        ),
        (
            "enveloped-signature transform",
            "http://www.w3.org/2000/09/xmldsig#enveloped-signature",
        ),
    ] {
        let t = format!("<ds:Transform Algorithm=\"{uri}\"></ds:Transform>");
        add(
            name,
            "/service/SignedProxy",
            replace_once(&signed, "<ds:Transform Algorithm=\"http://www.w3.org/2001/10/xml-exc-c14n#\"></ds:Transform>", &t),
            "wsse:UnsupportedAlgorithm",
        );
    }
    add(
        "external-URI reference",
        "/service/SignedProxy",
        replace_once(
            &signed,
            &format!("URI=\"#{body_id}\""),
            "URI=\"http://evil.example/doc\"",
        ),
        "wsse:UnsupportedAlgorithm",
    );
    add(
        "legacy RSA-1.5 key transport on the modern profile",
        "/service/SecureProxyModern",
        good.clone(),
        "wsse:UnsupportedAlgorithm",
    );

    // Token references.
    let bst = element(&signed_text, "wsse:BinarySecurityToken");
    add(
        "token reference to a BST outside this header",
        "/service/SignedProxy",
        signed_text
            .replacen(&bst, "", 1)
            .replacen("<soapenv:Header>", &format!("<soapenv:Header><Tokens xmlns=\"urn:x\" xmlns:wsse=\"{WSSE}\" xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\">{bst}</Tokens>"), 1)
            .into_bytes(),
        "wsse:SecurityTokenUnavailable",
    );

    // Encryption targets.
    let (_, text) = fresh();
    let ed_id = attr_after(&text, "<xenc:EncryptedData", "Id");
    let good_ids = text.replacen(
        &format!("<xenc:DataReference URI=\"#{ed_id}\""),
        &format!(
            "<xenc:DataReference URI=\"#{}\"",
            attr_after(&text, "<soapenv:Body", "wsu:Id")
        ),
        1,
    );
    add(
        "DataReference to the wrong element",
        "/service/SecureProxy",
        good_ids.into_bytes(),
        "wsse:InvalidSecurity",
    );
    let for_client = legacy
        .secure(&plain, Some(&cert(keys, "client")), now)
        .expect("secure");
    add(
        "EncryptedKey for another recipient",
        "/service/SecureProxy",
        for_client,
        "wsse:FailedCheck",
    );

    // Parser limits.
    add(
        "XXE and entity expansion",
        "/service/SecureProxy",
        [
            b"<!DOCTYPE x [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;\">]>".as_slice(),
            &good,
        ]
        .concat(),
        "wsse:InvalidSecurity",
    );
    let deep = format!("{}{}", "<x>".repeat(200), "</x>".repeat(200));
    add(
        "deeply nested input",
        "/service/SecureProxy",
        replace_once(
            &good,
            "<soapenv:Header>",
            &format!("<soapenv:Header><n xmlns=\"urn:n\">{deep}</n>"),
        ),
        "wsse:InvalidSecurity",
    );

    // SOAP level.
    add(
        "unknown envelope version",
        "/service/SecureProxy",
        replace_once(
            &good,
            "http://schemas.xmlsoap.org/soap/envelope/",
            "http://example.com/not-soap/",
        ),
        "soapenv:VersionMismatch",
    );
    add(
        "unknown mustUnderstand header for this node",
        "/service/SecureProxy",
        replace_once(
            &good,
            "<soapenv:Header>",
            "<soapenv:Header><x:Unknown xmlns:x=\"urn:x\" soapenv:mustUnderstand=\"1\" soapenv:actor=\"http://schemas.xmlsoap.org/soap/actor/next\"/>",
        ),
        "soapenv:MustUnderstand",
    );
    out
}

#[test]
fn every_attack_gets_its_fault_and_nothing_reaches_the_back_end() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let mut failures = Vec::new();
    for a in attacks(&keys) {
        let before = seen.lock().expect("lock").len();
        let r = Client::connect(h.http())
            .post(a.path, &[SOAP11], &a.message)
            .expect("post");
        let forwarded = seen.lock().expect("lock").len() - before;
        let code = if r.status == 500 {
            fault_code(&r.body)
        } else {
            format!("HTTP {}", r.status)
        };
        if code != a.code || forwarded != 0 {
            failures.push(format!(
                "{}: got {code} (want {}), forwarded {forwarded}",
                a.name, a.code
            ));
        }
        if r.status == 500 {
            assert!(
                r.text().contains("Security validation failed: ") || code.starts_with("soapenv:"),
                "{}: {}",
                a.name,
                r.text()
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn key_failures_all_look_the_same_to_the_client() {
    // RSA-1.5 padding-oracle resistance: a broken key and broken data give one answer.
    let keys = test_keys();
    let echo = echo(Default::default());
    let h = engine(&yaml(echo.addr, &keys));
    let bodies: Vec<Vec<u8>> = attacks(&keys)
        .into_iter()
        .filter(|a| {
            a.name == "tampered ciphertext"
                || a.name == "RSA-1.5 key with broken padding"
                || a.name == "EncryptedKey for another recipient"
        })
        .map(|a| {
            Client::connect(h.http())
                .post(a.path, &[SOAP11], &a.message)
                .expect("post")
                .body
        })
        .collect();
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "fault bodies differ"
    );
    echo.stop();
}

#[test]
fn a_replayed_message_is_refused() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    let msg = secured(
        &client(Profile::Modern, &keys, "client", true),
        &keys,
        &plain,
    )
    .message;
    let first = Client::connect(h.http())
        .post("/service/SecureProxyModern", &[SOAP11], &msg)
        .expect("post");
    assert_eq!(first.status, 200, "{}", first.text());
    let again = Client::connect(h.http())
        .post("/service/SecureProxyModern", &[SOAP11], &msg)
        .expect("post");
    assert_eq!(again.status, 500);
    assert_eq!(fault_code(&again.body), "wsse:InvalidSecurity");
    // A copy with its ciphertext altered is the same message to the replay cache: refused
    // before it is decrypted (a decryption failure would be wsse:FailedCheck).
    let text = String::from_utf8_lossy(&msg).into_owned();
    let cipher = element_text(&element(&text, "xenc:EncryptedData"), "xenc:CipherValue");
    let altered = replace_once(&msg, &cipher, &flip_char(&cipher, 40));
    let r = Client::connect(h.http())
        .post("/service/SecureProxyModern", &[SOAP11], &altered)
        .expect("post");
    assert_eq!(r.status, 500);
    assert_eq!(fault_code(&r.body), "wsse:InvalidSecurity");
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

fn username_token(user: &str, password: &str, nonce: &[u8], created: &str, digest: bool) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let (kind, value) = if digest {
        let mut h = sha1::Sha1::new();
        h.update(nonce);
        h.update(created.as_bytes());
        h.update(password.as_bytes());
        ("PasswordDigest", b64(&h.finalize()))
    } else {
        ("PasswordText", password.to_owned())
    };
    format!(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header><wsse:Security xmlns:wsse=\"{WSSE}\" xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\" soapenv:mustUnderstand=\"1\"><wsse:UsernameToken><wsse:Username>{user}</wsse:Username><wsse:Password Type=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#{kind}\">{value}</wsse:Password><wsse:Nonce EncodingType=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary\">{}</wsse:Nonce><wsu:Created>{created}</wsu:Created></wsse:UsernameToken></wsse:Security></soapenv:Header><soapenv:Body><m:buyStocks xmlns:m=\"http://services.samples/xsd\"><order><symbol>IBM</symbol></order></m:buyStocks></soapenv:Body></soapenv:Envelope>",
        b64(nonce)
    )
}

#[test]
fn username_tokens_are_checked_and_their_nonces_used_once() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let now =
        busbar_wssec::time::format_datetime(busbar_wssec::time::now_millis(SystemTime::now()));
    let stale = busbar_wssec::time::format_datetime(
        busbar_wssec::time::now_millis(SystemTime::now()) - 3_600_000,
    );
    let cases = [
        (
            "digest ok",
            username_token("alice", "s3cret", b"nonce-1", &now, true),
            "200",
        ),
        (
            "text ok",
            username_token("alice", "s3cret", b"nonce-2", &now, false),
            "200",
        ),
        (
            "reused nonce",
            username_token("alice", "s3cret", b"nonce-1", &now, true),
            "wsse:FailedAuthentication",
        ),
        (
            "wrong password",
            username_token("alice", "guess", b"nonce-3", &now, true),
            "wsse:FailedAuthentication",
        ),
        (
            "unknown user",
            username_token("mallory", "s3cret", b"nonce-4", &now, false),
            "wsse:FailedAuthentication",
        ),
        (
            "stale",
            username_token("alice", "s3cret", b"nonce-5", &stale, true),
            "wsu:MessageExpired",
        ),
    ];
    for (name, msg, want) in cases {
        let before = seen.lock().expect("lock").len();
        let r = Client::connect(h.http())
            .post("/service/UsernameProxy", &[SOAP11], msg.as_bytes())
            .expect("post");
        let forwarded = seen.lock().expect("lock").len() - before;
        if want == "200" {
            assert_eq!(r.status, 200, "{name}: {}", r.text());
            assert_eq!(forwarded, 1, "{name}");
            let last = seen
                .lock()
                .expect("lock")
                .last()
                .cloned()
                .expect("forwarded");
            assert!(
                !String::from_utf8_lossy(&last).contains("UsernameToken"),
                "{name}"
            );
        } else {
            assert_eq!(r.status, 500, "{name}");
            assert_eq!(fault_code(&r.body), want, "{name}");
            assert_eq!(forwarded, 0, "{name}");
        }
    }
}

#[test]
fn soap12_requests_get_soap12_faults_with_a_wsse_subcode() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let msg = "<env:Envelope xmlns:env=\"http://www.w3.org/2003/05/soap-envelope\"><env:Body><x/></env:Body></env:Envelope>";
    let r = Client::connect(h.http())
        .post(
            "/service/SecureProxy",
            &[("Content-Type", "application/soap+xml; charset=utf-8")],
            msg.as_bytes(),
        )
        .expect("post");
    let text = r.text();
    assert!(
        text.contains("<env:Value>env:Sender</env:Value><env:Subcode><env:Value xmlns:wsse="),
        "{text}"
    );
    assert!(text.contains("wsse:InvalidSecurity</env:Value>"), "{text}");
    // A SOAP 1.2 envelope announced as SOAP 1.1 is a version mismatch.
    let r = Client::connect(h.http())
        .post("/service/SecureProxy", &[SOAP11], msg.as_bytes())
        .expect("post");
    assert_eq!(
        fault_code(&r.body),
        "soapenv:VersionMismatch",
        "{}",
        r.text()
    );
    assert!(seen.lock().expect("lock").is_empty());
}

#[test]
fn an_answer_that_already_carries_a_security_header_gets_a_server_fault() {
    let keys = test_keys();
    let (backend, _seen) = recording_back_end();
    let k = keys.display();
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/service/EchoService\" }}\nproxies:\n  SignsAnswers:\n    path: /service/SignsAnswers\n    in:\n      - call: echo\n    out:\n      - wsse_secure:\n          timestamp: {{ ttl: 5m }}\n          sign: {{ key: \"{k}/server.p12\", password: server-pass }}\n"
    ));
    // The back end echoes the request: its answer carries the request's headers.
    let message = |header: &str| {
        format!(
            "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Header>{header}</soapenv:Header><soapenv:Body><m:ping xmlns:m=\"urn:m\"/></soapenv:Body></soapenv:Envelope>"
        )
    };
    let post = |header: &str| {
        Client::connect(h.http())
            .post(
                "/service/SignsAnswers",
                &[SOAP11],
                message(header).as_bytes(),
            )
            .expect("post")
    };
    let plain = post("");
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(plain.text().matches("<wsse:Security ").count(), 1);
    for header in [
        format!("<wsse:Security xmlns:wsse=\"{WSSE}\"><x:Mine xmlns:x=\"urn:x\"/></wsse:Security>"),
        format!("<wsse:Security xmlns:wsse=\"{WSSE}\" soapenv:actor=\"http://schemas.xmlsoap.org/soap/actor/next\"/>"),
    ] {
        let r = post(&header);
        assert_eq!(r.status, 500, "{header}: {}", r.text());
        assert_eq!(fault_code(&r.body), "soapenv:Server", "{}", r.text());
        assert!(
            r.text().contains(
                "<faultstring>The back end's answer already carries a Security header</faultstring>"
            ),
            "{}",
            r.text()
        );
    }
    // One for another actor travels on beside busbar's.
    let r = post(&format!(
        "<wsse:Security xmlns:wsse=\"{WSSE}\" soapenv:actor=\"urn:other\"/>"
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text().matches("<wsse:Security ").count(), 2);
}

#[test]
fn wrong_key_password_fails_validate_naming_the_file() {
    let keys = test_keys();
    let dir = temp_dir("wsse-validate");
    let yaml = format!(
        "listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\nendpoints:\n  echo: {{ url: \"http://127.0.0.1:9/x\" }}\nproxies:\n  S:\n    path: /s\n    in:\n      - wsse_verify:\n          require: [encryption]\n          decrypt_key: {{ pkcs12: \"{}/server.p12\", password: wrong }}\n      - call: echo\n",
        keys.display()
    );
    let (code, stderr) = validate_in(&dir, &yaml);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("server.p12"), "{stderr}");
    assert!(
        stderr.contains("proxies.S.in[0].wsse_verify.decrypt_key.pkcs12"),
        "{stderr}"
    );
    assert!(stderr.contains(":11:"), "line of the key: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn secure_proxies_pass_the_project_verifier() {
    let keys = test_keys();
    let echo = echo(Default::default());
    let h = engine(&yaml(echo.addr, &keys));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
        .args([
            "bench",
            "verify",
            &format!("http://{}/service", h.http()),
            "--scenarios",
            "secure,secure-modern",
            "--sizes",
            "512,16383,16385,102400",
            "--concurrency",
            "1,50",
            "--keys",
        ])
        .arg(&keys)
        .args(["--timeout", "120s"])
        .output()
        .expect("run verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("tampered-signature"), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
    echo.stop();
}

#[test]
fn with_the_replay_cache_off_a_repeated_message_is_served_from_the_session_key_cache() {
    let keys = test_keys();
    let echo = echo(Default::default());
    let k = keys.display();
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/service/EchoService\" }}\nproxies:\n  Cached:\n    path: /service/Cached\n    in:\n      - wsse_verify:\n          require: [timestamp, signature, encryption]\n          trust: {{ ca: \"{k}/ca.pem\" }}\n          decrypt_key: {{ pkcs12: \"{k}/server.p12\", password: server-pass }}\n          algorithms: legacy\n          replay_cache: {{ enabled: false }}\n          session_key_cache: {{ enabled: true, size: 16 }}\n      - call: echo\n",
        echo.addr
    ));
    let plain = buy_stocks(2048, Variant::Plain).expect("payload");
    let s = secured(
        &client(Profile::Legacy, &keys, "client", true),
        &keys,
        &plain,
    );
    for _ in 0..3 {
        let r = Client::connect(h.http())
            .post("/service/Cached", &[SOAP11], &s.message)
            .expect("post");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body, s.plain);
    }
    // A different key for the same data is not confused with the cached one.
    let other = secured(
        &client(Profile::Legacy, &keys, "client", true),
        &keys,
        &plain,
    );
    let r = Client::connect(h.http())
        .post("/service/Cached", &[SOAP11], &other.message)
        .expect("post");
    assert_eq!(r.body, other.plain);
    echo.stop();
}

/// A Body reference of a signed message, and the message with it written `copies` times.
fn with_body_reference_repeated(message: &[u8], copies: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(message).into_owned();
    let body_id = attr_after(&text, "<soapenv:Body", "wsu:Id");
    let open = format!("<ds:Reference URI=\"#{body_id}\">");
    let from = text.find(&open).expect("the Body's reference");
    let to = from + text[from..].find("</ds:Reference>").expect("end") + "</ds:Reference>".len();
    replace_once(message, &text[from..to], &text[from..to].repeat(copies))
}

#[test]
fn a_signature_with_thousands_of_references_is_refused_before_any_digest() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    let signer = client(Profile::Legacy, &keys, "client", false);
    let signed = secured(&signer, &keys, &plain).message;
    // 10,000 copies of the Body's reference and a broken SignatureValue: no key is needed to
    // send this, and each reference would cost a canonicalization of the Body.
    let many = with_body_reference_repeated(&signed, 10_000);
    let text = String::from_utf8_lossy(&many).into_owned();
    let sig_value = element_text(&text, "ds:SignatureValue");
    let attack = replace_once(&many, &sig_value, &flip_char(&sig_value, 10));
    // The same Body signed twice (a valid signature over both references) is refused too.
    let twice = with_body_reference_repeated(&signed, 2);
    for (name, message) in [
        ("10,000 references", attack),
        ("a duplicate reference", twice),
    ] {
        let r = Client::connect(h.http())
            .post("/service/SignedProxy", &[SOAP11], &message)
            .expect("post");
        assert_eq!(r.status, 500, "{name}: {}", r.text());
        assert_eq!(fault_code(&r.body), "wsse:InvalidSecurity", "{name}");
    }
    assert!(seen.lock().expect("lock").is_empty());
    // The message as signed still passes.
    let r = Client::connect(h.http())
        .post("/service/SignedProxy", &[SOAP11], &signed)
        .expect("post");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A key and a certificate for `subject` (OpenSSL `-subj` syntax) issued by the test CA.
fn issue_identity(keys: &Path, dir: &Path, name: &str, subject: &str) -> Arc<Identity> {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let (ca, ca_key) = (keys.join("ca.pem"), keys.join("ca.key"));
    run(&[
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-subj", subject, "-out",
        &csr,
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        ca.to_str().expect("path"),
        "-CAkey",
        ca_key.to_str().expect("path"),
        "-set_serial",
        "4242",
        "-days",
        "2",
        "-sha256",
        "-out",
        &pem,
    ]);
    Arc::new(Identity::from_pem(&dir.join(&key), &dir.join(&pem)).expect("issued identity"))
}

/// A certificate for the client's key and subject, issued by the test CA with the openssl
/// extensions `extensions` (lines of an extensions section).
fn client_cert_with(keys: &Path, dir: &Path, name: &str, extensions: &str) -> Arc<Identity> {
    let (cnf, csr, pem) = (
        dir.join(format!("{name}.cnf")),
        dir.join(format!("{name}.csr")),
        dir.join(format!("{name}.pem")),
    );
    std::fs::write(
        &cnf,
        format!("[req]\ndistinguished_name = dn\n[dn]\n[ext]\n{extensions}\n"),
    )
    .expect("write cnf");
    let path = |p: &Path| p.to_str().expect("path").to_owned();
    let key = path(&keys.join("client.key"));
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            &path(&cnf),
            "-key",
            &key,
            "-subj",
            "/O=busbar test/CN=client",
            "-out",
            &path(&csr),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &path(&csr),
            "-CA",
            &path(&keys.join("ca.pem")),
            "-CAkey",
            &path(&keys.join("ca.key")),
            "-days",
            "2",
            "-sha256",
            "-extfile",
            &path(&cnf),
            "-extensions",
            "ext",
            "-out",
            &path(&pem),
        ],
    );
    Arc::new(Identity::from_pem(&keys.join("client.key"), &pem).expect("issued identity"))
}

#[test]
fn a_signer_whose_certificate_may_not_sign_is_refused() {
    let keys = test_keys();
    let dir = temp_dir("signer-usage");
    let (backend, seen) = recording_back_end();
    let h = engine(&yaml(backend, &keys));
    let cases = [
        (
            "unknown critical extension",
            "keyUsage = critical, digitalSignature\n1.2.3.4.5 = critical, DER:05:00",
            "wsse:FailedAuthentication",
        ),
        (
            "keyUsage keyCertSign only",
            "keyUsage = critical, keyCertSign",
            "wsse:FailedAuthentication",
        ),
        (
            "keyUsage keyEncipherment only",
            "keyUsage = critical, keyEncipherment",
            "wsse:FailedAuthentication",
        ),
        (
            "extendedKeyUsage codeSigning only",
            "keyUsage = critical, digitalSignature\nextendedKeyUsage = codeSigning",
            "wsse:FailedAuthentication",
        ),
        (
            "keyUsage nonRepudiation",
            "keyUsage = critical, nonRepudiation",
            "200",
        ),
        (
            "extendedKeyUsage clientAuth",
            "keyUsage = critical, digitalSignature\nextendedKeyUsage = clientAuth",
            "200",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (name, extensions, want)) in cases.into_iter().enumerate() {
        let signer = client_cert_with(&keys, &dir, &format!("usage{i}"), extensions);
        let before = seen.lock().expect("lock").len();
        let r = Client::connect(h.http())
            .post("/service/SignedProxy", &[SOAP11], &signed_by(&keys, signer))
            .expect("post");
        let forwarded = seen.lock().expect("lock").len() - before;
        let got = if r.status == 500 {
            fault_code(&r.body)
        } else {
            r.status.to_string()
        };
        if got != want || forwarded != usize::from(want == "200") {
            failures.push(format!(
                "{name}: got {got} (want {want}), forwarded {forwarded}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

fn signed_by(keys: &Path, identity: Arc<Identity>) -> Vec<u8> {
    let mut signer = client(Profile::Legacy, keys, "client", false);
    if let Some(sign) = signer.sign.as_mut() {
        sign.identity = identity;
    }
    let plain = buy_stocks(1024, Variant::Plain).expect("payload");
    secured(&signer, keys, &plain).message
}

fn subject_yaml(backend: std::net::SocketAddr, keys: &Path) -> String {
    let k = keys.display();
    let proxy = |name: &str, subject: &str| {
        format!(
            "  {name}:\n    path: /service/{name}\n    in:\n      - wsse_verify:\n          require: [timestamp, signature]\n          trust: {{ ca: \"{k}/ca.pem\", subject: {subject} }}\n          algorithms: legacy\n      - call: echo\n"
        )
    };
    format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/service/EchoService\" }}\nproxies:\n{}{}{}",
        proxy("ByCn", "\"CN=client\""),
        proxy("ByDn", "\"cn=client,o=busbar test\""),
        proxy(
            "ByPattern",
            "{ pattern: \"CN=client[0-9]*,O=busbar test\" }"
        ),
    )
}

#[test]
fn a_trusted_subject_is_matched_by_its_attributes_not_searched_for() {
    let keys = test_keys();
    let dir = temp_dir("subjects");
    let (backend, _seen) = recording_back_end();
    let h = engine(&subject_yaml(backend, &keys));
    let client2 = issue_identity(&keys, &dir, "client2", "/O=busbar test/CN=client2");
    let mallory = issue_identity(&keys, &dir, "mallory", "/O=CN=client/CN=mallory");
    assert!(
        mallory.cert.subject().contains("CN=client"),
        "{}",
        mallory.cert.subject()
    );
    let cases = [
        ("client", "ByCn", None, "200"),
        ("client", "ByDn", None, "200"),
        ("client", "ByPattern", None, "200"),
        (
            "client2",
            "ByCn",
            Some(&client2),
            "wsse:FailedAuthentication",
        ),
        (
            "client2",
            "ByDn",
            Some(&client2),
            "wsse:FailedAuthentication",
        ),
        ("client2", "ByPattern", Some(&client2), "200"),
        (
            "mallory",
            "ByCn",
            Some(&mallory),
            "wsse:FailedAuthentication",
        ),
        (
            "mallory",
            "ByDn",
            Some(&mallory),
            "wsse:FailedAuthentication",
        ),
        (
            "mallory",
            "ByPattern",
            Some(&mallory),
            "wsse:FailedAuthentication",
        ),
    ];
    let mut failures = Vec::new();
    for (who, proxy, issued, want) in cases {
        let signer = issued.cloned().unwrap_or_else(|| identity(&keys, "client"));
        let r = Client::connect(h.http())
            .post(
                &format!("/service/{proxy}"),
                &[SOAP11],
                &signed_by(&keys, signer),
            )
            .expect("post");
        let got = if r.status == 500 {
            fault_code(&r.body)
        } else {
            r.status.to_string()
        };
        if got != want {
            failures.push(format!("{who} at {proxy}: got {got}, want {want}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_message_accepted_by_one_secure_proxy_is_a_replay_at_another() {
    let keys = test_keys();
    let (backend, seen) = recording_back_end();
    let h = engine(&subject_yaml(backend, &keys));
    let message = signed_by(&keys, identity(&keys, "client"));
    let first = Client::connect(h.http())
        .post("/service/ByCn", &[SOAP11], &message)
        .expect("post");
    assert_eq!(first.status, 200, "{}", first.text());
    for proxy in ["ByDn", "ByPattern", "ByCn"] {
        let again = Client::connect(h.http())
            .post(&format!("/service/{proxy}"), &[SOAP11], &message)
            .expect("post");
        assert_eq!(again.status, 500, "{proxy}: {}", again.text());
        assert_eq!(fault_code(&again.body), "wsse:InvalidSecurity", "{proxy}");
    }
    assert_eq!(seen.lock().expect("lock").len(), 1);
}
