//! The SecureProxy scenario's client side (docs/scenarios.md): requests timestamped, signed with
//! the client's key and encrypted for the server's certificate, and responses decrypted with
//! the client's key and verified against the CA before their plain form is compared.
//!
//! Messages are fresh per request: a pool is built before the run (so the client's own
//! RSA work is not inside the measured window), and when a run outlasts it, each further
//! message is built as it is sent. `--replay` sends one message over and over instead, as the
//! classic rounds did; the proxy's replay cache must then be off.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use busbar_wssec::crypto::{BlockCipher, DigestAlg, KeyTransport, SignatureAlg};
use busbar_wssec::keys::{load_pem_certificates, Certificate, Identity, TrustStore};
use busbar_wssec::{EncryptSettings, KeyReference, Securer, SignSettings, Verifier, VerifyPolicy};

use crate::check::Check;
use crate::client::RequestSpec;
use crate::error::BenchError;

/// The two WS-Security profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// RSA-1.5, AES-128-CBC, RSA-SHA1.
    Legacy,
    /// RSA-OAEP, AES-256-GCM, RSA-SHA256.
    Modern,
}

impl Profile {
    /// The signature, digest, data cipher and key transport a client of this profile uses.
    pub fn algorithms(self) -> (SignatureAlg, DigestAlg, BlockCipher, KeyTransport) {
        match self {
            Profile::Legacy => (
                SignatureAlg::RsaSha1,
                DigestAlg::Sha1,
                BlockCipher::Aes128Cbc,
                KeyTransport::Rsa15,
            ),
            Profile::Modern => (
                SignatureAlg::RsaSha256,
                DigestAlg::Sha256,
                BlockCipher::Aes256Gcm,
                KeyTransport::RsaOaepMgf1p,
            ),
        }
    }
}

/// Keys and settings of a secure client.
#[derive(Clone)]
pub struct SecureClient {
    securer: Securer,
    server: Certificate,
    checker: Arc<Verifier>,
}

impl std::fmt::Debug for SecureClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecureClient")
    }
}

fn key_error(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::Usage(format!("{}: {e}", path.display()))
}

impl SecureClient {
    /// Loads the client's keys from `dir` (the layout of tests/interop/keys.sh: client.p12
    /// with password `client-pass`, server.pem, ca.pem).
    pub fn load(dir: &Path, profile: Profile) -> Result<SecureClient, BenchError> {
        let p12 = dir.join("client.p12");
        let client =
            Arc::new(Identity::from_pkcs12(&p12, "client-pass").map_err(|e| key_error(&p12, e))?);
        let server_pem = dir.join("server.pem");
        let server = load_pem_certificates(&server_pem)
            .map_err(|e| key_error(&server_pem, e))?
            .into_iter()
            .next()
            .ok_or_else(|| key_error(&server_pem, "no certificate"))?;
        let ca_pem = dir.join("ca.pem");
        let ca = load_pem_certificates(&ca_pem).map_err(|e| key_error(&ca_pem, e))?;
        let (algorithm, digest, cipher, transport) = profile.algorithms();
        let securer = Securer {
            timestamp_ttl_ms: Some(300_000),
            sign: Some(SignSettings {
                identity: client.clone(),
                algorithm,
                digest,
                key_reference: KeyReference::Bst,
                sign_body: true,
                sign_timestamp: true,
            }),
            encrypt: Some(EncryptSettings {
                cipher,
                transport,
                key_reference: KeyReference::Ski,
            }),
            limits: Default::default(),
        };
        let checker = Verifier::new(
            VerifyPolicy {
                require_timestamp: true,
                require_signature: true,
                require_encryption: true,
                require_username_token: false,
                trust: Some(TrustStore::new(ca, None)),
                known_certs: Vec::new(),
                decrypt: Some(client),
                max_skew_ms: 300_000,
                max_age_ms: 600_000,
                require_expires: true,
                legacy: profile == Profile::Legacy,
                remove_header: true,
                users: Default::default(),
                limits: Default::default(),
            },
            None,
            None,
        );
        Ok(SecureClient {
            securer,
            server,
            checker: Arc::new(checker),
        })
    }

    /// A copy sharing the keys.
    pub fn clone_of(c: &Arc<SecureClient>) -> SecureClient {
        SecureClient::clone(c)
    }

    /// One fresh secured request body and the check its response must pass.
    pub fn message(&self, plain: &[u8]) -> Result<(Vec<u8>, Check), String> {
        let s = self
            .securer
            .secure_keeping_plain(plain, Some(&self.server), SystemTime::now())
            .map_err(|e| format!("cannot secure the request: {e}"))?;
        Ok((
            s.message,
            Check::Secure {
                checker: self.checker.clone(),
                plain: Arc::new(s.plain),
            },
        ))
    }
}

/// A request ready for the wire and the check of its response.
type Prepared = (Arc<Vec<u8>>, Arc<Check>);

/// Secured requests for a load run.
#[derive(Debug)]
pub struct Feed {
    client: SecureClient,
    spec: RequestSpec,
    pool: Vec<(Arc<Vec<u8>>, Arc<Check>)>,
    next: AtomicUsize,
    replay: bool,
}

impl Feed {
    /// Builds `pool` messages up front from `spec`'s body (on every core).
    pub fn new(
        client: SecureClient,
        spec: RequestSpec,
        pool: usize,
        replay: bool,
    ) -> Result<Feed, BenchError> {
        let pool = if replay { 1 } else { pool.max(1) };
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(pool);
        let built: Vec<Result<Vec<Prepared>, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (client, spec) = (&client, &spec);
                    s.spawn(move || {
                        (t..pool)
                            .step_by(threads)
                            .map(|_| wire(client, spec))
                            .collect::<Result<Vec<_>, String>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a builder thread panicked".into()))
                })
                .collect()
        });
        let mut all = Vec::with_capacity(pool);
        for part in built {
            all.extend(part.map_err(BenchError::Failed)?);
        }
        Ok(Feed {
            client,
            spec,
            pool: all,
            next: AtomicUsize::new(0),
            replay,
        })
    }

    /// The next request and its check.
    pub fn next(&self) -> Result<(Arc<Vec<u8>>, Arc<Check>), String> {
        if self.replay {
            let (r, c) = &self.pool[0];
            return Ok((r.clone(), c.clone()));
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        match self.pool.get(i) {
            Some((r, c)) => Ok((r.clone(), c.clone())),
            None => wire(&self.client, &self.spec),
        }
    }

    /// Messages built before the run.
    pub fn pooled(&self) -> usize {
        self.pool.len()
    }
}

fn wire(client: &SecureClient, spec: &RequestSpec) -> Result<(Arc<Vec<u8>>, Arc<Check>), String> {
    let (body, check) = client.message(&spec.body)?;
    let mut s = spec.clone();
    s.body = body;
    Ok((Arc::new(s.to_bytes()), Arc::new(check)))
}

/// A secured message with one bit of its SignatureValue flipped.
pub fn tamper_signature(message: &[u8]) -> Result<Vec<u8>, BenchError> {
    let text = String::from_utf8_lossy(message);
    let at = text
        .find("<ds:SignatureValue>")
        .ok_or_else(|| BenchError::Failed("no SignatureValue to tamper with".into()))?;
    let i = at + "<ds:SignatureValue>".len() + 8;
    let mut out = message.to_vec();
    out[i] = if out[i] == b'A' { b'B' } else { b'A' };
    Ok(out)
}
