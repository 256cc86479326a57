//! TLS for listeners: certificates and keys loaded (and checked) when a runtime is built, so
//! `busbar validate` reports a bad file and a reload picks up renewed certificates.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// Builds a TLS server config from PEM files: the certificate chain and its private key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let certs = read_certs(cert)?;
    let key = read_key(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not match or are unusable: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a PEM file (at least one), read with the bound every file a config
/// names has.
pub(crate) fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = busbar_core::file::read(file)
        .map_err(|e| format!("cannot read certificates from {}: {e}", file.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("invalid certificate in {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in {}", file.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file, read with the bound every file a config names has.
pub(crate) fn read_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    busbar_core::file::read(file)
        .map_err(|e| e.to_string())
        .and_then(|pem| PrivateKeyDer::from_pem_slice(&pem).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot read a private key from {}: {e}", file.display()))
}
