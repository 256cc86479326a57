//! Keys and certificates for the WS-Security steps, each file read (and a PKCS#12 file
//! decrypted, the slow part of a start) once per build however many steps name it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use busbar_config::{line_of, KeySourceConfig, Spanned};
use busbar_wssec::keys::{Certificate, Identity};

use super::{BuildCx, Failed};

/// What a build has loaded, by file (and password).
#[derive(Debug, Default)]
pub struct KeyCache {
    identities: HashMap<(PathBuf, Option<PathBuf>, String), Arc<Identity>>,
    certificates: HashMap<PathBuf, Vec<Certificate>>,
}

impl BuildCx<'_> {
    /// The private key and certificate of `k`: a PKCS#12 file with its password, or PEM files.
    pub fn identity(&mut self, k: &KeySourceConfig, at: &str) -> Result<Arc<Identity>, Failed> {
        self.identity_reported_at(k, at, None)
    }

    /// [`BuildCx::identity`], with a load failure reported at `key_path` instead of the file's
    /// own key (for configs whose key file is not written as `pkcs12`).
    pub fn identity_reported_at(
        &mut self,
        k: &KeySourceConfig,
        at: &str,
        key_path: Option<String>,
    ) -> Result<Arc<Identity>, Failed> {
        let (file, second, password, line, own_path) = match (&k.pkcs12, &k.key, &k.cert) {
            (Some(p12), None, None) => (
                self.loaded.resolve(&p12.value),
                None,
                k.password
                    .as_ref()
                    .map_or(String::new(), |p| p.expose().clone()),
                line_of(p12),
                format!("{at}.pkcs12"),
            ),
            (None, Some(key), Some(cert)) => (
                self.loaded.resolve(&key.value),
                Some(self.loaded.resolve(&cert.value)),
                String::new(),
                line_of(key),
                format!("{at}.key"),
            ),
            _ => {
                return Err(self.fail(
                    None,
                    at,
                    "give either 'pkcs12' (with 'password') or both 'key' and 'cert'",
                ))
            }
        };
        let reported_at = key_path;
        let key_path = own_path;
        let cache_key = (file, second, password);
        if let Some(id) = self.keys.identities.get(&cache_key) {
            return Ok(id.clone());
        }
        let (file, second, password) = &cache_key;
        let loaded = match second {
            None => Identity::from_pkcs12(file, password),
            Some(cert) => Identity::from_pem(file, cert),
        };
        match loaded {
            Ok(id) => {
                let id = Arc::new(id);
                self.keys.identities.insert(cache_key, id.clone());
                Ok(id)
            }
            Err(e) => Err(self.fail(line, reported_at.unwrap_or(key_path), e.to_string())),
        }
    }

    /// The certificates of PEM file `file` (at least one).
    pub fn certificates(
        &mut self,
        file: &Spanned<String>,
        at: &str,
    ) -> Result<Vec<Certificate>, Failed> {
        let path = self.loaded.resolve(&file.value);
        if let Some(certs) = self.keys.certificates.get(&path) {
            return Ok(certs.clone());
        }
        match busbar_wssec::keys::load_pem_certificates(&path) {
            Ok(certs) if certs.is_empty() => Err(self.fail(
                line_of(file),
                at,
                format!("no certificate in {}", path.display()),
            )),
            Ok(certs) => {
                self.keys.certificates.insert(path, certs.clone());
                Ok(certs)
            }
            Err(e) => Err(self.fail(line_of(file), at, e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::super::testing::loaded;
    use super::super::BuildCx;
    use busbar_core::metrics::Registry;

    /// Test keys made with openssl by tests/interop/keys.sh, once per test process.
    fn keys() -> PathBuf {
        static KEYS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        KEYS.get_or_init(|| {
            // keys.sh is idempotent and serialised with a lock: one directory serves every run.
            let dir = std::env::temp_dir().join("busbar-unit-keys");
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/interop/keys.sh");
            let status = std::process::Command::new("bash")
                .arg(&script)
                .arg(&dir)
                .status()
                .unwrap_or_else(|e| panic!("run tests/interop/keys.sh (needs openssl): {e}"));
            assert!(status.success(), "tests/interop/keys.sh failed");
            dir
        })
        .clone()
    }

    #[test]
    fn a_key_file_named_by_several_steps_is_loaded_once() {
        let dir = keys();
        let yaml = "sequences:\n  s:\n    - wsse_verify: { require: [encryption], decrypt_key: { pkcs12: server.p12, password: server-pass } }\n    - wsse_secure: { sign: { key: server.p12, password: server-pass } }\n    - wsse_verify: { require: [encryption], decrypt_key: { pkcs12: server.p12, password: server-pass } }\n";
        let l = loaded(yaml, &dir);
        let metrics = Registry::default();
        let endpoints = BTreeMap::new();
        let databases = std::collections::BTreeMap::new();
        let mut cx = BuildCx::new(&l, &metrics, &endpoints, &databases);
        let steps = l
            .config
            .sequences
            .get("s")
            .map(|s| cx.steps(s, "sequences.s"))
            .unwrap_or_default();
        assert!(cx.is_ok(), "{:?}", cx.into_errors());
        assert_eq!(steps.len(), 3);
        assert_eq!(
            cx.keys.identities.len(),
            1,
            "the file was loaded more than once"
        );
    }

    #[test]
    fn a_wrong_password_is_reported_at_the_file_key() {
        let dir = keys();
        let yaml = "sequences:\n  s:\n    - wsse_verify: { require: [encryption], decrypt_key: { pkcs12: server.p12, password: wrong } }\n";
        let errors = super::super::testing::build(&loaded(yaml, &dir))
            .err()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:5: sequences.s[0].wsse_verify.decrypt_key.pkcs12: "),
            "{errors:?}"
        );
    }
}
