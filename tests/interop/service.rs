//! The busbar under test: WS-Security proxies in front of a recording back end (the proxies
//! of tests/e2e/wsse.rs, plus one that knows the client's certificate), and how the outcome
//! of one request is judged.

use std::path::Path;
use std::sync::{Arc, Mutex};

use busbar_bench::payload::ROUTING_VALUE;

use crate::peers::{peers, Batch};
use crate::support::{engine, recording_back_end, Client, Harness, Resp};

pub const SOAP11: &str = "text/xml; charset=UTF-8";
pub const SOAP12: &str = "application/soap+xml; charset=UTF-8";

/// Legacy profile: RSA-1.5, RSA-SHA1 and SHA-1 accepted too; the signer's certificate must
/// travel in the message.
pub const SECURE: &str = "/service/SecureProxy";
/// Modern profile: RSA-OAEP, RSA-SHA256, SHA-256 only.
pub const MODERN: &str = "/service/SecureProxyModern";
/// Legacy profile, and `trust.certs` holds client.pem, so requests may name their signer by
/// issuer and serial, SubjectKeyIdentifier or thumbprint.
pub const CERTS: &str = "/service/SecureProxyCerts";
/// Timestamp and signature required, no encryption; the response is not secured.
pub const SIGNED: &str = "/service/SignedProxy";
/// A UsernameToken of alice / s3cret required, nothing else.
pub const USERNAME: &str = "/service/UsernameProxy";
/// Like MODERN, but responses name the service's certificate by SubjectKeyIdentifier and
/// the client's by issuer and serial.
pub const BY_SKI: &str = "/service/SecureProxyBySki";
/// Like MODERN with AES-128-GCM; responses name the service's certificate by issuer and
/// serial, the client's by thumbprint.
pub const BY_ISSUER_SERIAL: &str = "/service/SecureProxyByIssuerSerial";
/// Like SECURE with AES-256-CBC; responses name the service's certificate by thumbprint and
/// carry the client's in a BinarySecurityToken.
pub const BY_THUMBPRINT: &str = "/service/SecureProxyByThumbprint";

fn yaml(backend: std::net::SocketAddr, keys: &Path) -> String {
    let k = keys.display();
    let verify = |alg: &str, require: &str, certs: bool| {
        let certs = if certs {
            format!(", certs: \"{k}/client.pem\"")
        } else {
            String::new()
        };
        format!(
            "      - wsse_verify:\n          require: [{require}]\n          trust: {{ ca: \"{k}/ca.pem\", subject: \"CN=client\"{certs} }}\n          decrypt_key: {{ pkcs12: \"{k}/server.p12\", password: server-pass }}\n          algorithms: {alg}\n          users: {{ alice: \"s3cret\" }}\n"
        )
    };
    let secure_by = |digest: &str, data: &str, kt: &str, sign_ref: &str, enc_ref: &str| {
        format!(
            "    out:\n      - wsse_secure:\n          timestamp: {{ ttl: 5m }}\n          sign: {{ key: \"{k}/server.p12\", password: server-pass, digest: {digest}, key_reference: {sign_ref} }}\n          encrypt: {{ for: request_signer, data: {data}, key_transport: {kt}, key_reference: {enc_ref} }}\n"
        )
    };
    let secure = |digest: &str, data: &str, kt: &str| secure_by(digest, data, kt, "bst", "ski");
    let all = "timestamp, signature, encryption";
    let proxy = |name: &str, path: &str, verify: String, secure: &str| {
        format!("  {name}:\n    path: {path}\n    in:\n{verify}      - call: echo\n{secure}")
    };
    let legacy_out = secure("sha1", "aes128-cbc", "rsa-1_5");
    let modern_out = secure("sha256", "aes256-gcm", "rsa-oaep");
    [
        format!(
            "endpoints:\n  echo: {{ url: \"http://{backend}/service/EchoService\" }}\nproxies:\n"
        ),
        proxy(
            "SecureProxy",
            SECURE,
            verify("legacy", all, false),
            &legacy_out,
        ),
        proxy(
            "SecureProxyModern",
            MODERN,
            verify("modern", all, false),
            &modern_out,
        ),
        proxy(
            "SecureProxyCerts",
            CERTS,
            verify("legacy", all, true),
            &legacy_out,
        ),
        proxy(
            "SignedProxy",
            SIGNED,
            verify("legacy", "timestamp, signature", false),
            "",
        ),
        proxy(
            "SecureProxyBySki",
            BY_SKI,
            verify("modern", all, false),
            &secure_by("sha256", "aes256-gcm", "rsa-oaep", "ski", "issuer_serial"),
        ),
        proxy(
            "SecureProxyByIssuerSerial",
            BY_ISSUER_SERIAL,
            verify("modern", all, false),
            &secure_by(
                "sha256",
                "aes128-gcm",
                "rsa-oaep",
                "issuer_serial",
                "thumbprint",
            ),
        ),
        proxy(
            "SecureProxyByThumbprint",
            BY_THUMBPRINT,
            verify("legacy", all, false),
            &secure_by("sha1", "aes256-cbc", "rsa-1_5", "thumbprint", "bst"),
        ),
        proxy(
            "UsernameProxy",
            USERNAME,
            verify("modern", "username_token", false),
            "",
        ),
    ]
    .concat()
}

/// A busbar engine serving the proxies above, and what its back end received.
pub struct Service {
    harness: Harness,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// What one request led to.
pub struct Outcome {
    pub response: Resp,
    /// `200`, the fault code (`wsse:FailedCheck`; for SOAP 1.2 the Subcode) when the HTTP
    /// status is the one for a client's fault, or else `HTTP n`.
    pub code: String,
    /// What reached the back end because of this request.
    pub forwarded: Vec<Vec<u8>>,
}

impl Service {
    pub fn start() -> Service {
        let (backend, seen) = recording_back_end();
        let harness = engine(&yaml(backend, &peers().keys));
        Service { harness, seen }
    }

    /// POSTs `message` to `path` as SOAP 1.1 or 1.2 (by Content-Type).
    pub fn send(&self, path: &str, soap12: bool, message: &[u8]) -> Outcome {
        let before = self.seen.lock().expect("lock").len();
        let content_type = if soap12 { SOAP12 } else { SOAP11 };
        let response = Client::connect(self.harness.http())
            .post(path, &[("Content-Type", content_type)], message)
            .expect("post");
        let forwarded = self.seen.lock().expect("lock")[before..].to_vec();
        // SOAP 1.1 faults come with 500; SOAP 1.2 Sender faults (all of WS-Security's)
        // with 400, as the SOAP 1.2 HTTP binding says.
        let code = match (response.status, soap12) {
            (200, _) => "200".to_owned(),
            (500, false) | (400, true) => fault_code(&response.text()),
            (n, _) => format!("HTTP {n}"),
        };
        Outcome {
            response,
            code,
            forwarded,
        }
    }
}

/// The fault code of a SOAP 1.1 fault, or the Subcode of a SOAP 1.2 one.
pub fn fault_code(text: &str) -> String {
    let value_after = |anchor: &str| -> Option<String> {
        let at = text.find(anchor)?;
        let rest = &text[at + anchor.len()..];
        let open = rest.find('>')? + 1;
        let close = open + rest[open..].find('<')?;
        Some(rest[open..close].trim().to_owned())
    };
    if text.contains("<faultcode") {
        value_after("<faultcode")
    } else {
        text.find("Subcode>").and_then(|at| {
            let rest = &text[at..];
            let v = rest.find("Value")?;
            let open = v + rest[v..].find('>')? + 1;
            let close = open + rest[open..].find('<')?;
            Some(rest[open..close].trim().to_owned())
        })
    }
    .unwrap_or_else(|| format!("no fault code in {text}"))
}

/// The start of a long text, for failure messages.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(600) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// What a request should lead to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want {
    /// HTTP 200, and the back end got the plain message.
    Accept,
    /// A fault with this code, and nothing forwarded.
    Fault(&'static str),
}

/// Judges an outcome; the error says what went wrong.
pub fn judge(want: Want, o: &Outcome) -> Result<(), String> {
    match want {
        Want::Accept => {
            if o.code != "200" {
                return Err(format!(
                    "refused with {} (HTTP {}): {}",
                    o.code,
                    o.response.status,
                    clip(&o.response.text())
                ));
            }
            let [plain] = o.forwarded.as_slice() else {
                return Err(format!("forwarded {} messages", o.forwarded.len()));
            };
            let plain = String::from_utf8_lossy(plain);
            // Namespace declarations may stay (a sender may declare wsse on the Envelope);
            // the elements must not.
            for (bad, what) in [
                ("Security", "the Security header"),
                ("EncryptedData", "encrypted data"),
                ("EncryptedKey", "an EncryptedKey"),
                ("UsernameToken", "the UsernameToken"),
            ] {
                let tag = regex::Regex::new(&format!(r"<([\w.-]+:)?{bad}[\s/>]")).expect("re");
                if tag.is_match(&plain) {
                    return Err(format!("the back end got {what}: {}", clip(&plain)));
                }
            }
            if !plain.contains("<symbol>IBM</symbol>") {
                return Err(format!("the back end got no plain Body: {}", clip(&plain)));
            }
            if !plain.contains(ROUTING_VALUE) {
                return Err(format!("the routing header was lost: {}", clip(&plain)));
            }
            Ok(())
        }
        Want::Fault(code) => {
            if o.code != code {
                return Err(format!(
                    "got {} (HTTP {}), want {code}: {}",
                    o.code,
                    o.response.status,
                    clip(&o.response.text())
                ));
            }
            if !o.forwarded.is_empty() {
                return Err(format!("forwarded {} messages", o.forwarded.len()));
            }
            Ok(())
        }
    }
}

/// A request WSS4J makes (`secure` with these options) and what busbar should do with it.
pub struct Case {
    pub name: String,
    pub path: &'static str,
    pub soap12: bool,
    pub want: Want,
    pub secure: Vec<String>,
    /// The plain message to secure, when not the one all cases share.
    pub plain: Option<Vec<u8>>,
}

impl Case {
    pub fn new(name: impl Into<String>, path: &'static str, want: Want, secure: &[&str]) -> Case {
        let secure: Vec<String> = secure.iter().map(|s| s.to_string()).collect();
        let soap12 = secure.windows(2).any(|w| w[0] == "--soap" && w[1] == "12");
        Case {
            name: name.into(),
            path,
            soap12,
            want,
            secure,
            plain: None,
        }
    }

    /// This case secures `plain` instead of the shared message.
    pub fn with_plain(mut self, plain: Vec<u8>) -> Case {
        self.plain = Some(plain);
        self
    }
}

/// Secures every case's request (from its own plain message, or else from `plain`) with
/// WSS4J, in one JVM; returns the messages.
pub fn wss4j_requests(dir: &Path, label: &str, cases: &[Case], plain: &[u8]) -> Vec<Vec<u8>> {
    let input = dir.join(format!("{label}-plain.xml"));
    if cases.iter().any(|c| c.plain.is_none()) {
        std::fs::write(&input, plain).expect("write plain");
    }
    let input = input.display().to_string();
    let mut batch = Batch::new(dir);
    let files: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let out = dir
                .join(format!("{label}-{i:02}.xml"))
                .display()
                .to_string();
            let own = c.plain.as_ref().map(|p| {
                let f = dir.join(format!("{label}-{i:02}-plain.xml"));
                std::fs::write(&f, p).expect("write plain");
                f.display().to_string()
            });
            let mut args: Vec<&str> = c.secure.iter().map(String::as_str).collect();
            args.extend(["--in", own.as_deref().unwrap_or(&input), "--out", &out]);
            batch.add("secure", &args);
            out
        })
        .collect();
    let results = batch.run(label);
    let failed: Vec<String> = cases
        .iter()
        .zip(&results)
        .filter(|(_, r)| !r.ok)
        .map(|(c, r)| format!("{}: WSS4J could not make it: {}", c.name, r.detail))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    files
        .iter()
        .map(|f| std::fs::read(f).expect("read WSS4J output"))
        .collect()
}

/// Sends each case's message and judges it; returns one line per failed case.
pub fn send_all(service: &Service, cases: &[Case], messages: &[Vec<u8>]) -> Vec<String> {
    cases
        .iter()
        .zip(messages)
        .filter_map(|(c, m)| {
            let o = service.send(c.path, c.soap12, m);
            judge(c.want, &o)
                .and_then(|()| {
                    let text = o.response.text();
                    let secured = ![SIGNED, USERNAME].contains(&c.path);
                    if c.want == Want::Accept
                        && secured
                        && (!text.contains("EncryptedData") || text.contains("<symbol>"))
                    {
                        Err(format!("the response is not encrypted: {}", clip(&text)))
                    } else {
                        Ok(())
                    }
                })
                .err()
                .map(|e| format!("{} ({}): {e}", c.name, c.path))
        })
        .collect()
}
