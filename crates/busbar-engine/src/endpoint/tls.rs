//! TLS to back ends (rustls): trusted roots (the system's, or a configured CA file), an
//! optional client certificate for mutual TLS, SNI from the URL's host or a configured name,
//! and handshake failures told in words ("certificate not trusted for host X").

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use busbar_core::BoxError;

/// The TLS client settings of one endpoint, built once.
#[derive(Debug, Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
}

/// TLS towards one URL: the connector and the name checked in the certificate.
#[derive(Clone)]
pub struct TlsTarget {
    connector: TlsConnector,
    name: ServerName<'static>,
    shown: String,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTarget")
            .field("name", &self.shown)
            .finish()
    }
}

/// Why a handshake failed, in words a client may read.
#[derive(Debug)]
pub struct TlsFailure {
    /// What failed, like "certificate not trusted for host localhost (unknown issuer)".
    pub message: String,
    /// True when trying again could help (network trouble, not a certificate problem).
    pub retryable: bool,
    /// The underlying error.
    pub source: BoxError,
}

/// The system's trusted roots, read once per process.
fn system_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut store = RootCertStore::empty();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                return Err(format!(
                    "no trusted CA certificates found on this system{why}; set 'tls.ca'"
                ));
            }
            Ok(Arc::new(store))
        })
        .clone()
}

fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .map_err(|e| format!("cannot read certificates from {}: {e}", file.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("invalid certificate in {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in {}", file.display()));
    }
    Ok(certs)
}

/// Which part of the `tls` section a build error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsField {
    /// `tls.ca`.
    Ca,
    /// `tls.cert`.
    Cert,
    /// `tls.key`.
    Key,
    /// `tls` as a whole.
    Section,
}

/// Builds the client settings: `ca` replaces the system roots; `cert` + `key` are presented
/// when the back end asks for a client certificate.
pub fn client(
    ca: Option<&Path>,
    cert_key: Option<(&Path, &Path)>,
    server_name: Option<String>,
) -> Result<TlsClient, (TlsField, String)> {
    let roots = match ca {
        Some(file) => {
            let mut store = RootCertStore::empty();
            for cert in read_certs(file).map_err(|m| (TlsField::Ca, m))? {
                store.add(cert).map_err(|e| {
                    (
                        TlsField::Ca,
                        format!("unusable CA certificate in {}: {e}", file.display()),
                    )
                })?;
            }
            Arc::new(store)
        }
        None => system_roots().map_err(|m| (TlsField::Section, m))?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| (TlsField::Section, format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots);
    let mut config = match cert_key {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certs(cert).map_err(|m| (TlsField::Cert, m))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                (
                    TlsField::Key,
                    format!("cannot read a private key from {}: {e}", key.display()),
                )
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                (
                    TlsField::Cert,
                    format!("client certificate and key do not match or are unusable: {e}"),
                )
            })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsClient {
        config: Arc::new(config),
        server_name,
    })
}

impl TlsClient {
    /// The rustls settings themselves (for clients other than the endpoints', such as a
    /// database's).
    pub fn rustls(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The same settings offering `protocols` in ALPN (`h2` for gRPC).
    pub fn with_alpn(&self, protocols: Vec<Vec<u8>>) -> TlsClient {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols;
        TlsClient {
            config: Arc::new(config),
            server_name: self.server_name.clone(),
        }
    }

    /// TLS towards a URL whose host is `host` (the configured `server_name` wins).
    pub fn target(&self, host: &str) -> Result<TlsTarget, String> {
        let shown = self.server_name.clone().unwrap_or_else(|| host.to_owned());
        let name = ServerName::try_from(shown.clone())
            .map_err(|e| format!("'{shown}' cannot be used as a TLS server name: {e}"))?;
        Ok(TlsTarget {
            connector: TlsConnector::from(self.config.clone()),
            name,
            shown,
        })
    }
}

impl TlsTarget {
    /// Runs the handshake over `tcp`.
    pub async fn connect(&self, tcp: TcpStream) -> Result<TlsStream<TcpStream>, TlsFailure> {
        self.connector
            .connect(self.name.clone(), tcp)
            .await
            .map_err(|e| self.explain(e))
    }

    fn explain(&self, e: std::io::Error) -> TlsFailure {
        let host = &self.shown;
        let tls = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        let (message, retryable) = match tls {
            Some(rustls::Error::InvalidCertificate(c)) => (
                match c {
                    CertificateError::UnknownIssuer => {
                        format!("certificate not trusted for host {host} (unknown issuer)")
                    }
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. } => {
                        format!("certificate not valid for host {host} (name mismatch)")
                    }
                    CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                        format!("certificate of host {host} has expired")
                    }
                    CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                        format!("certificate of host {host} is not valid yet")
                    }
                    CertificateError::Revoked => {
                        format!("certificate of host {host} is revoked")
                    }
                    other => format!("certificate of host {host} rejected: {other:?}"),
                },
                false,
            ),
            Some(rustls::Error::AlertReceived(alert)) => (
                format!(
                    "host {host} refused the handshake ({alert:?}); it may require a client certificate (tls.cert, tls.key)"
                ),
                false,
            ),
            Some(other) => (format!("TLS error with host {host}: {other}"), false),
            None => (format!("connection to host {host} failed: {e}"), true),
        };
        TlsFailure {
            message,
            retryable,
            source: Box::new(e),
        }
    }
}

/// What a TLS alert found in `err`'s chain says, when the back end ended the connection with
/// one after the handshake (TLS 1.3 servers check a client certificate only then).
pub fn alert_in(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::AlertReceived(alert)) = tls {
            return Some(format!(
                "ended the TLS connection ({alert:?}); it may require a client certificate (tls.cert, tls.key)"
            ));
        }
        next = e.source();
    }
    None
}
