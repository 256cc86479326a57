//! TLS to back ends (rustls): trusted roots (the system's, or a configured CA file), an
//! optional client certificate for mutual TLS, SNI from the URL's host or a configured name,
//! and handshake failures told in words ("certificate not trusted for host X").

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use busbar_core::BoxError;

use crate::tls::{read_certs, read_key};

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

/// Which part of the `tls` section a build error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsField {
    /// `tls.ca`.
    Ca,
    /// `tls.cert`.
    Cert,
    /// `tls.key`.
    Key,
    /// `tls.server_name`.
    ServerName,
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
    if let Some(name) = &server_name {
        ServerName::try_from(name.clone()).map_err(|e| {
            (
                TlsField::ServerName,
                format!("'{name}' cannot be used as a TLS server name: {e}"),
            )
        })?;
    }
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
            let key = read_key(key).map_err(|m| (TlsField::Key, m))?;
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
            Some(rustls::Error::InvalidCertificate(c)) => (certificate_problem(host, c), false),
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

/// Why the certificate of `host` was refused, in words.
fn certificate_problem(host: &str, c: &CertificateError) -> String {
    let why = match c {
        CertificateError::UnknownIssuer => {
            return format!("certificate not trusted for host {host} (unknown issuer)")
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            return format!("certificate not valid for host {host} (name mismatch)")
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            return format!("certificate of host {host} has expired")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            return format!("certificate of host {host} is not valid yet")
        }
        CertificateError::Revoked => return format!("certificate of host {host} is revoked"),
        CertificateError::BadEncoding => "it is malformed".into(),
        CertificateError::BadSignature => "its signature does not verify".into(),
        #[allow(deprecated)]
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "it is signed with an algorithm that is not supported".into()
        }
        CertificateError::UnhandledCriticalExtension => {
            "it has a critical extension that cannot be checked".into()
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "it is not meant for a TLS server (extended key usage)".into()
        }
        CertificateError::UnknownRevocationStatus => "its revocation status is unknown".into(),
        CertificateError::ExpiredRevocationList
        | CertificateError::ExpiredRevocationListContext { .. } => {
            "the revocation list to check it against has expired".into()
        }
        CertificateError::InvalidOcspResponse => "its stapled OCSP response is invalid".into(),
        CertificateError::ApplicationVerificationFailure => "the handshake was refused".into(),
        CertificateError::Other(other) => match other.0.downcast_ref::<webpki::Error>() {
            Some(e) => webpki_problem(e),
            None => other.to_string().into(),
        },
        other => other.to_string().into(),
    };
    format!("certificate of host {host} rejected: {why}")
}

/// The certificate checks' errors that rustls passes on as `Other`, in words (their own
/// Display is the variant's name).
fn webpki_problem(e: &webpki::Error) -> std::borrow::Cow<'static, str> {
    use webpki::Error as W;
    match e {
        W::CaUsedAsEndEntity => {
            "it is a CA certificate, used as the server's own certificate".into()
        }
        W::EndEntityUsedAsCa => {
            "a certificate of its chain that is not a CA certificate issued another".into()
        }
        W::CertDistrusted => "it is distrusted".into(),
        W::BadDer | W::BadDerTime | W::TrailingData(_) => "it is malformed".into(),
        W::EmptyEkuExtension => "its extended key usage extension is empty".into(),
        #[allow(deprecated)]
        W::RequiredEkuNotFound | W::RequiredEkuNotFoundContext(_) => {
            "it is not meant for a TLS server (extended key usage)".into()
        }
        W::ExtensionValueInvalid => "one of its extensions has an invalid value".into(),
        W::MalformedExtensions => "its extensions are malformed".into(),
        W::InvalidSerialNumber => "its serial number is invalid".into(),
        W::MalformedDnsIdentifier => "a DNS name in it is malformed".into(),
        W::InvalidNetworkMaskConstraint | W::MalformedNameConstraint => {
            "a name constraint of its chain is malformed".into()
        }
        W::NameConstraintViolation => "it violates a name constraint of its issuer".into(),
        W::PathLenConstraintViolated => {
            "its chain is longer than an issuer allows (path length constraint)".into()
        }
        W::MaximumNameConstraintComparisonsExceeded
        | W::MaximumPathBuildCallsExceeded
        | W::MaximumPathDepthExceeded
        | W::MaximumSignatureChecksExceeded => "its chain is too long or complex to check".into(),
        W::SignatureAlgorithmMismatch => {
            "its signature algorithm does not match its issuer's key".into()
        }
        W::UnsupportedCertVersion => "its X.509 version is not supported (v3 only)".into(),
        W::UnsupportedCriticalExtension => {
            "it has a critical extension that cannot be checked".into()
        }
        W::UnsupportedNameType => "it names its subject in a form that cannot be checked".into(),
        W::InvalidCertValidity => "its validity period is invalid".into(),
        W::CertExpired { .. } => "it has expired".into(),
        W::CertNotValidYet { .. } => "it is not valid yet".into(),
        W::CertRevoked => "it is revoked".into(),
        W::UnknownIssuer => "its issuer is not trusted".into(),
        W::CertNotValidForName(_) => "it is not valid for this host name".into(),
        other => other.to_string().into(),
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
