//! busbar's configuration: YAML in, a checked [`Config`] out, every problem at once.
//!
//! Layout: [`model`] is the serde model that mirrors the file (its doc comments are the user
//! doc), [`units`] parses durations and sizes, [`interpolate`] resolves `${ENV:-default}`
//! before parsing, and this module loads a file and validates what can be checked without
//! compiling anything (names, addresses, files). The engine adds the errors of its build stage
//! (expressions, stylesheets, keys) in the same [`ConfigError`] form.

pub mod interpolate;
pub mod model;
pub mod secret;
pub mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use model::*;
pub use secret::{Secret, SecretUrl};
pub use serde_saphyr::Spanned;

/// One problem in a config: the file, the line when known, the key path and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// Key path, like `proxies.DirectProxy.in[0].call`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A config read from a file, with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The file, as given.
    pub file: PathBuf,
    /// Directory relative paths in the config are resolved against.
    pub base_dir: PathBuf,
    /// The parsed config.
    pub config: Config,
}

impl LoadedConfig {
    /// Resolves a path written in the config against the config's directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// An error about this config at `line` (from a [`Spanned`] value) and `path`.
    pub fn error(
        &self,
        line: Option<u64>,
        path: impl Into<String>,
        msg: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.display().to_string(),
            line,
            path: path.into(),
            message: msg.into(),
        }
    }
}

/// The line of a spanned value, when the parser recorded one.
pub fn line_of<T>(s: &Spanned<T>) -> Option<u64> {
    let line = s.referenced.line();
    (line > 0).then_some(line)
}

/// Reads, interpolates, parses and validates the config at `file`.
pub fn load(file: &Path) -> Result<LoadedConfig, ConfigErrors> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: name.clone(),
            line: None,
            path: String::new(),
            message: format!("cannot read config: {e}"),
        }])
    })?;
    let base_dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let config = parse(&text, &name, |k| std::env::var(k).ok())?;
    let loaded = LoadedConfig {
        file: file.to_path_buf(),
        base_dir,
        config,
    };
    let errors = validate(&loaded);
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Interpolates and parses config `text`; `file` names it in errors.
pub fn parse(
    text: &str,
    file: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let text = interpolate::interpolate(text, env).map_err(|missing| {
        ConfigErrors(
            missing
                .into_iter()
                .map(|m| ConfigError {
                    file: file.to_owned(),
                    line: Some(m.line as u64),
                    path: String::new(),
                    message: format!(
                        "environment variable '{}' is not set and has no default (write ${{{}:-default}})",
                        m.name, m.name
                    ),
                })
                .collect(),
        )
    })?;
    serde_saphyr::from_str::<Config>(&text).map_err(|e| {
        let line = e.location().map(|l| l.line()).filter(|l| *l > 0);
        ConfigErrors(vec![ConfigError {
            file: file.to_owned(),
            line,
            path: String::new(),
            message: plain_message(&e),
        }])
    })
}

/// The parser's message without its rendered source snippet (we print file:line ourselves).
fn plain_message(e: &serde_saphyr::Error) -> String {
    let full = e.to_string();
    let first = full.lines().next().unwrap_or("invalid config").trim();
    // The first line reads "error: line L column C: message" or similar; keep the message.
    let msg = first.strip_prefix("error:").unwrap_or(first).trim();
    let msg = match msg.find(": ") {
        Some(i) if msg[..i].contains("line") => &msg[i + 2..],
        _ => msg,
    };
    msg.to_owned()
}

/// Checks what can be checked without compiling: names, addresses, files, statuses.
pub fn validate(loaded: &LoadedConfig) -> Vec<ConfigError> {
    let cfg = &loaded.config;
    let mut errors = Vec::new();
    let mut err = |line: Option<u64>, path: String, msg: String| {
        errors.push(loaded.error(line, path, msg));
    };

    if cfg.listeners.is_empty() {
        err(
            None,
            "listeners".into(),
            "at least one listener is needed".into(),
        );
    }
    if cfg.admin.enabled {
        if let Err(e) = cfg.admin.bind.parse::<SocketAddr>() {
            err(
                None,
                "admin.bind".into(),
                format!("invalid address '{}': {e}", cfg.admin.bind),
            );
        }
    }
    if let Some(echo) = &cfg.echo {
        if let Err(e) = echo.bind.parse::<SocketAddr>() {
            err(
                None,
                "echo.bind".into(),
                format!("invalid address '{}': {e}", echo.bind),
            );
        }
    }
    for (name, l) in &cfg.listeners {
        let path = format!("listeners.{name}");
        if let Err(e) = l.bind.value.parse::<SocketAddr>() {
            err(
                line_of(&l.bind),
                format!("{path}.bind"),
                format!("invalid address '{}': {e}", l.bind.value),
            );
        }
        if let Some(tls) = &l.tls {
            for (key, file) in [("cert", &tls.cert), ("key", &tls.key)] {
                let resolved = loaded.resolve(&file.value);
                if !resolved.is_file() {
                    err(
                        line_of(file),
                        format!("{path}.tls.{key}"),
                        format!("file not found: {}", resolved.display()),
                    );
                }
            }
        }
        if l.max_header_size.0 < 1024 {
            err(
                None,
                format!("{path}.max_header_size"),
                "must be at least 1KiB".into(),
            );
        }
    }
    for (name, e) in &cfg.endpoints {
        let path = format!("endpoints.{name}");
        if let Err(msg) = check_url(&e.url.value) {
            err(line_of(&e.url), format!("{path}.url"), msg);
        }
        if e.timeout.0.is_zero() {
            err(
                None,
                format!("{path}.timeout"),
                "must be greater than zero".into(),
            );
        }
        if e.connect_timeout.0.is_zero() {
            err(
                None,
                format!("{path}.connect_timeout"),
                "must be greater than zero".into(),
            );
        }
    }
    for (name, steps) in &cfg.sequences {
        check_steps(loaded, steps, &format!("sequences.{name}"), &mut err);
    }
    check_sequence_cycles(cfg, &mut err);
    let mut paths: BTreeMap<(String, String), String> = BTreeMap::new();
    for (name, p) in &cfg.proxies {
        let path = format!("proxies.{name}");
        if !p.path.value.starts_with('/') {
            err(
                line_of(&p.path),
                format!("{path}.path"),
                format!("path '{}' must start with '/'", p.path.value),
            );
        }
        for m in &p.methods {
            if http::Method::from_bytes(m.as_bytes()).is_err() {
                err(
                    None,
                    format!("{path}.methods"),
                    format!("invalid HTTP method '{m}'"),
                );
            }
        }
        let listeners: Vec<String> = if p.listeners.is_empty() {
            cfg.listeners.keys().cloned().collect()
        } else {
            for (i, l) in p.listeners.iter().enumerate() {
                if !cfg.listeners.contains_key(&l.value) {
                    err(
                        line_of(l),
                        format!("{path}.listeners[{i}]"),
                        format!("unknown listener '{}'", l.value),
                    );
                }
            }
            p.listeners.iter().map(|l| l.value.clone()).collect()
        };
        for l in listeners {
            if let Some(other) = paths.insert((l.clone(), p.path.value.clone()), name.clone()) {
                err(
                    line_of(&p.path),
                    format!("{path}.path"),
                    format!(
                        "path '{}' is already served by proxy '{other}' on listener '{l}'",
                        p.path.value
                    ),
                );
            }
        }
        if p.in_seq.is_empty() {
            err(
                line_of(&p.path),
                format!("{path}.in"),
                "a proxy needs at least one step in 'in'".into(),
            );
        }
        check_steps(loaded, &p.in_seq, &format!("{path}.in"), &mut err);
        check_steps(loaded, &p.out_seq, &format!("{path}.out"), &mut err);
        check_steps(loaded, &p.on_error, &format!("{path}.on_error"), &mut err);
    }
    errors
}

fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("invalid URL '{url}': {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(format!("unsupported scheme '{other}' in '{url}': use http")),
        None => {
            return Err(format!(
                "invalid URL '{url}': expected http://host:port/path"
            ))
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL '{url}': no host"));
    }
    Ok(())
}

fn check_steps(
    loaded: &LoadedConfig,
    steps: &[StepConfig],
    path: &str,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    let cfg = &loaded.config;
    for (i, step) in steps.iter().enumerate() {
        let here = format!("{path}[{i}].{}", step.kind());
        let nested_at = here.clone();
        match step {
            StepConfig::Call(name) => {
                if !cfg.endpoints.contains_key(&name.value) {
                    err(
                        line_of(name),
                        here,
                        format!("unknown endpoint '{}'", name.value),
                    );
                }
            }
            StepConfig::Sequence(name) => {
                if !cfg.sequences.contains_key(&name.value) {
                    err(
                        line_of(name),
                        here,
                        format!("unknown sequence '{}'", name.value),
                    );
                }
            }
            StepConfig::Fault(f) => {
                if !(400..=599).contains(&f.status) {
                    err(
                        None,
                        format!("{here}.status"),
                        format!("fault status {} is not an error status (400-599)", f.status),
                    );
                }
            }
            StepConfig::Respond(r) => {
                if let Some(s) = r.status {
                    if !(100..=599).contains(&s) {
                        err(
                            None,
                            format!("{here}.status"),
                            format!("invalid HTTP status {s}"),
                        );
                    }
                }
                if let Some(ct) = &r.content_type {
                    if http::HeaderValue::from_str(ct).is_err() {
                        err(
                            None,
                            format!("{here}.content_type"),
                            format!("invalid header value '{ct}'"),
                        );
                    }
                }
            }
            StepConfig::SetHeader(h) => {
                if http::HeaderName::from_bytes(h.name.as_bytes()).is_err() {
                    err(
                        None,
                        format!("{here}.name"),
                        format!("invalid header name '{}'", h.name),
                    );
                }
                if http::HeaderValue::from_str(&h.value).is_err() {
                    err(
                        None,
                        format!("{here}.value"),
                        format!("invalid header value '{}'", h.value),
                    );
                }
            }
            StepConfig::RemoveHeader(name) => {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    err(None, here, format!("invalid header name '{name}'"));
                }
            }
            StepConfig::Log(_) => {}
            StepConfig::WsseVerify(v) => check_wsse_verify(loaded, v, &here, err),
            StepConfig::WsseSecure(w) => check_wsse_secure(loaded, w, &here, err),
            StepConfig::Xslt(x) => {
                let file = loaded.resolve(&x.stylesheet.value);
                if !file.is_file() {
                    err(
                        line_of(&x.stylesheet),
                        format!("{here}.stylesheet"),
                        format!("file not found: {}", file.display()),
                    );
                }
            }
            StepConfig::Route(cases) => {
                for (j, case) in cases.iter().enumerate() {
                    let at = format!("{here}[{j}]");
                    match (&case.when, &case.then, &case.otherwise) {
                        (Some(when), Some(_), None) => {
                            let sources = usize::from(when.header.is_some())
                                + usize::from(when.xpath.is_some());
                            if sources != 1 {
                                err(
                                    None,
                                    format!("{at}.when"),
                                    "give exactly one of 'header' or 'xpath'".into(),
                                );
                            }
                            let tests = usize::from(when.equals.is_some())
                                + usize::from(when.matches.is_some())
                                + usize::from(when.exists.is_some());
                            if tests > 1 {
                                err(
                                    None,
                                    format!("{at}.when"),
                                    "give at most one of 'equals', 'matches' or 'exists'".into(),
                                );
                            }
                            if let Some(h) = &when.header {
                                if http::HeaderName::from_bytes(h.value.as_bytes()).is_err() {
                                    err(
                                        line_of(h),
                                        format!("{at}.when.header"),
                                        format!("invalid header name '{}'", h.value),
                                    );
                                }
                            }
                        }
                        (None, None, Some(_)) => {
                            if j + 1 != cases.len() {
                                err(None, at.clone(), "'otherwise' must be the last case".into());
                            }
                        }
                        _ => err(
                            None,
                            at,
                            "a case is either { when, then } or { otherwise }".into(),
                        ),
                    }
                }
            }
        }
        for (below, children) in step.children() {
            check_steps(loaded, children, &format!("{nested_at}{below}"), err);
        }
    }
}

fn check_file(
    loaded: &LoadedConfig,
    file: &Spanned<String>,
    at: String,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    let path = loaded.resolve(&file.value);
    if !path.is_file() {
        err(
            line_of(file),
            at,
            format!("file not found: {}", path.display()),
        );
    }
}

fn check_key_source(
    loaded: &LoadedConfig,
    k: &KeySourceConfig,
    at: &str,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    match (&k.pkcs12, &k.key, &k.cert) {
        (Some(p12), None, None) => check_file(loaded, p12, format!("{at}.pkcs12"), err),
        (None, Some(key), Some(cert)) => {
            check_file(loaded, key, format!("{at}.key"), err);
            check_file(loaded, cert, format!("{at}.cert"), err);
        }
        _ => err(
            None,
            at.to_owned(),
            "give either 'pkcs12' (with 'password') or both 'key' and 'cert'".into(),
        ),
    }
}

fn check_wsse_verify(
    loaded: &LoadedConfig,
    v: &WsseVerifyConfig,
    here: &str,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    if v.require.is_empty() {
        err(
            None,
            format!("{here}.require"),
            "require at least one of timestamp, signature, encryption, username_token".into(),
        );
    }
    match &v.trust {
        Some(t) => {
            check_file(loaded, &t.ca, format!("{here}.trust.ca"), err);
            if let Some(certs) = &t.certs {
                check_file(loaded, certs, format!("{here}.trust.certs"), err);
            }
        }
        None if v.require.contains(&WsseAction::Signature) => err(
            None,
            format!("{here}.trust"),
            "a required signature needs 'trust' (the CA its signers chain to)".into(),
        ),
        None => {}
    }
    match &v.decrypt_key {
        Some(k) => check_key_source(loaded, k, &format!("{here}.decrypt_key"), err),
        None if v.require.contains(&WsseAction::Encryption) => err(
            None,
            format!("{here}.decrypt_key"),
            "a required encryption needs 'decrypt_key' (the service's own key)".into(),
        ),
        None => {}
    }
    if v.require.contains(&WsseAction::UsernameToken) && v.users.is_empty() {
        err(
            None,
            format!("{here}.users"),
            "a required username_token needs at least one user".into(),
        );
    }
    if v.replay_cache.enabled && v.replay_cache.size == 0 {
        err(
            None,
            format!("{here}.replay_cache.size"),
            "size must be at least 1".into(),
        );
    }
    if !(4..=1024).contains(&v.max_depth) {
        err(
            None,
            format!("{here}.max_depth"),
            "max_depth must be between 4 and 1024".into(),
        );
    }
    if !(1..=1024).contains(&v.max_references) {
        err(
            None,
            format!("{here}.max_references"),
            "max_references must be between 1 and 1024".into(),
        );
    }
}

fn check_wsse_secure(
    loaded: &LoadedConfig,
    w: &WsseSecureConfig,
    here: &str,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    if w.timestamp.is_none() && w.sign.is_none() && w.encrypt.is_none() {
        err(
            None,
            here.to_owned(),
            "give at least one of 'timestamp', 'sign', 'encrypt'".into(),
        );
    }
    if let Some(sign) = &w.sign {
        check_file(loaded, &sign.key, format!("{here}.sign.key"), err);
        if let Some(cert) = &sign.cert {
            check_file(loaded, cert, format!("{here}.sign.cert"), err);
        }
    }
    if let Some(WsseRecipient::Cert { cert }) = w.encrypt.as_ref().map(|e| &e.recipient) {
        check_file(loaded, cert, format!("{here}.encrypt.for.cert"), err);
    }
}

/// A sequence that (indirectly) runs itself would recurse forever on the first request.
fn check_sequence_cycles(cfg: &Config, err: &mut impl FnMut(Option<u64>, String, String)) {
    fn refs(steps: &[StepConfig]) -> Vec<&Spanned<String>> {
        let mut out = Vec::new();
        for s in steps {
            if let StepConfig::Sequence(n) = s {
                out.push(n);
            }
            for (_, children) in s.children() {
                out.extend(refs(children));
            }
        }
        out
    }
    for start in cfg.sequences.keys() {
        let mut stack = vec![start.as_str()];
        let mut seen = BTreeSet::new();
        while let Some(name) = stack.pop() {
            let Some(steps) = cfg.sequences.get(name) else {
                continue;
            };
            for r in refs(steps) {
                if r.value == *start {
                    err(
                        line_of(r),
                        format!("sequences.{name}"),
                        format!("sequence '{start}' runs itself (through '{name}')"),
                    );
                } else if seen.insert(r.value.as_str()) {
                    stack.push(r.value.as_str());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Vec<String> {
        let config = match parse(yaml, "t.yaml", |_| None) {
            Ok(c) => c,
            Err(e) => return e.0.iter().map(ToString::to_string).collect(),
        };
        let loaded = LoadedConfig {
            file: "t.yaml".into(),
            base_dir: ".".into(),
            config,
        };
        validate(&loaded).iter().map(ToString::to_string).collect()
    }

    const OK: &str = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  echo: { url: \"http://127.0.0.1:9000/e\", timeout: 2s }\nproxies:\n  P:\n    path: /p\n    in:\n      - call: echo\n";

    #[test]
    fn a_valid_config_has_no_errors() {
        assert_eq!(check(OK), Vec::<String>::new());
    }

    #[test]
    fn unknown_endpoint_is_reported_with_path_and_line() {
        let yaml = OK.replace("call: echo", "call: ech");
        assert_eq!(
            check(&yaml),
            vec!["t.yaml:9: proxies.P.in[0].call: unknown endpoint 'ech'".to_owned()]
        );
    }

    #[test]
    fn unknown_key_is_reported_with_its_line_and_name() {
        let yaml = OK.replace("timeout: 2s", "timout: 2s");
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4: "), "{errs:?}");
        assert!(errs[0].contains("timout"), "{errs:?}");
    }

    #[test]
    fn bad_duration_is_reported_with_its_line() {
        let yaml = OK.replace("timeout: 2s", "timeout: 2 parsecs");
        let errs = check(&yaml);
        assert!(errs[0].starts_with("t.yaml:4: "), "{errs:?}");
        assert!(errs[0].contains("invalid duration '2 parsecs'"), "{errs:?}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let yaml = format!(
            "{OK}  Q:\n    path: q\n    listeners: [nope]\n    in:\n      - call: missing\n      - sequence: none\n      - fault: {{ status: 200, reason: x }}\n"
        );
        let errs = check(&yaml);
        assert_eq!(errs.len(), 5, "{errs:#?}");
    }

    #[test]
    fn self_referencing_sequences_are_refused() {
        let yaml =
            format!("{OK}sequences:\n  a: [ {{ sequence: b }} ]\n  b: [ {{ sequence: a }} ]\n");
        let errs = check(&yaml);
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(errs[0].contains("runs itself"), "{errs:#?}");
    }
}
