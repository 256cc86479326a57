//! busbar's configuration: YAML in, a checked [`Config`] out, every problem at once.
//!
//! Layout: [`model`] is the serde model that mirrors the file (its doc comments are the user
//! doc), [`units`] parses durations and sizes, [`interpolate`] resolves `${ENV:-default}`
//! before parsing, and this module loads a file and validates what can be checked without
//! compiling anything (names, addresses, files). The engine adds the errors of its build stage
//! (expressions, stylesheets, keys) in the same [`ConfigError`] form.

pub mod interpolate;
pub mod model;
pub mod nesting;
pub mod pattern;
mod recover;
pub mod secret;
pub mod units;

use std::collections::BTreeMap;
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

/// Reads, interpolates, parses and validates the config at `file`: every problem at once.
pub fn load(file: &Path) -> Result<LoadedConfig, ConfigErrors> {
    load_attempt(file).into_result()
}

/// What loading a config found, problems and all: the config as recovery left it (each bad
/// part replaced by a placeholder), so that a check can go on and compile the rest, and the
/// errors so far. See [`load_text`].
#[derive(Debug)]
pub struct Attempt {
    /// The config, when the text parsed at all (with placeholders where it had problems).
    pub loaded: Option<LoadedConfig>,
    /// Every problem found so far, in the order of the file.
    pub errors: Vec<ConfigError>,
    recovered: Option<recover::Recovered>,
    /// The text parsed (after interpolation, with the file's lines), to find a key's line.
    text: Option<String>,
}

impl Attempt {
    /// The config, or every problem found.
    pub fn into_result(self) -> Result<LoadedConfig, ConfigErrors> {
        match self.loaded {
            Some(loaded) if self.errors.is_empty() => Ok(loaded),
            _ => Err(ConfigErrors(self.errors)),
        }
    }

    /// Adds problems found later (compiling the config): those about a placeholder are not
    /// the user's and are dropped, as are those about a key already reported (a stylesheet
    /// file that is missing is not also unreadable), lines are the original file's, and all
    /// are kept in the order of the file.
    pub fn add_later(&mut self, later: Vec<ConfigError>) {
        for mut e in later {
            if let Some(r) = &self.recovered {
                if r.hides(&e.path) {
                    continue;
                }
                e.line = e.line.and_then(|l| r.original_line(l));
            }
            if let Some(text) = &self.text {
                fill_line(&mut e, text);
            }
            let known = self
                .errors
                .iter()
                .any(|x| x == &e || (!e.path.is_empty() && x.path == e.path));
            if !known {
                self.errors.push(e);
            }
        }
        self.errors.sort_by_key(|e| e.line.unwrap_or(u64::MAX));
    }
}

/// Reads, interpolates, parses and validates `file`, going on after problems ([`Attempt`]).
pub fn load_attempt(file: &Path) -> Attempt {
    match busbar_core::file::read_to_string(file) {
        Ok(text) => attempt_text(&text, file, |k| std::env::var(k).ok()),
        Err(e) => Attempt {
            loaded: None,
            errors: vec![ConfigError {
                file: file.display().to_string(),
                line: None,
                path: String::new(),
                message: format!("cannot read config: {e}"),
            }],
            recovered: None,
            text: None,
        },
    }
}

/// Interpolates, parses and validates config `text`, read from `file`.
///
/// Every problem is reported, not only the first: after a parse error (an unknown key, an
/// unknown step, a bad value) parsing goes on past it, and what parses is validated too.
pub fn load_text(
    text: &str,
    file: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigErrors> {
    attempt_text(text, file, env).into_result()
}

fn attempt_text(text: &str, file: &Path, env: impl Fn(&str) -> Option<String>) -> Attempt {
    let name = file.display().to_string();
    let text = match interpolate_text(text, &name, env) {
        Ok(t) => t,
        Err(e) => {
            return Attempt {
                loaded: None,
                errors: e.0,
                recovered: None,
                text: None,
            }
        }
    };
    let parsed = recover::parse_all(&text, plain_message);
    let mut errors = parse_errors(&parsed, &name);
    let Some(mut config) = parsed.config.clone() else {
        return Attempt {
            loaded: None,
            errors,
            recovered: None,
            text: Some(text),
        };
    };
    // A back end that is not started is not part of the config the engine builds.
    if config.echo.as_ref().is_some_and(|e| !e.enabled) {
        config.echo = None;
    }
    config.echoes.retain(|_, e| e.enabled);
    // A bare file name (`busbar validate esb-benchmark.yaml`) has an empty parent: its
    // directory is the current one, like any other relative path's.
    let base_dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let loaded = LoadedConfig {
        file: file.to_path_buf(),
        base_dir,
        config,
    };
    // Errors about the placeholders that stand in for bad parts are not the user's.
    errors.extend(
        validate(&loaded)
            .into_iter()
            .filter(|e| !parsed.hides(&e.path))
            .map(|mut e| {
                e.line = e.line.and_then(|l| parsed.original_line(l));
                e
            }),
    );
    for e in &mut errors {
        fill_line(e, &text);
    }
    // Both kinds together, in the order of the file.
    errors.sort_by_key(|e| e.line.unwrap_or(u64::MAX));
    Attempt {
        loaded: Some(loaded),
        errors,
        recovered: Some(parsed),
        text: Some(text),
    }
}

/// Gives a problem found from a value the parser kept no position for (a database that does
/// not open, a file that is missing) the line of its key in `text`.
fn fill_line(e: &mut ConfigError, text: &str) {
    if e.line.is_none() && !e.path.is_empty() {
        e.line = recover::key_line(text, &e.path);
    }
}

/// Interpolates and parses config `text`; `file` names it in errors. Every parse error is
/// reported; validation is [`validate`]'s (or [`load_text`]'s) job.
pub fn parse(
    text: &str,
    file: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let text = interpolate_text(text, file, env)?;
    let parsed = recover::parse_all(&text, plain_message);
    let errors = parse_errors(&parsed, file);
    match parsed.config {
        Some(config) if errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(errors)),
    }
}

fn interpolate_text(
    text: &str,
    file: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigErrors> {
    interpolate::interpolate(text, env).map_err(|bad| {
        ConfigErrors(
            bad.into_iter()
                .map(|m| ConfigError {
                    file: file.to_owned(),
                    line: Some(m.line as u64),
                    path: String::new(),
                    message: match m.problem {
                        interpolate::Problem::Missing => format!(
                            "environment variable '{}' is not set and has no default (write ${{{}:-default}})",
                            m.name, m.name
                        ),
                        interpolate::Problem::LineBreak => format!(
                            "environment variable '{}' holds a line break, which only a double-quoted value can take (write \"${{{}}}\")",
                            m.name, m.name
                        ),
                    },
                })
                .collect(),
        )
    })
}

/// The parse errors in [`ConfigError`] form.
///
/// The key path follows the message (`unknown field `timout` ... (at endpoints.echo.timout)`)
/// rather than preceding it, so that the message still comes right after `file:line:`.
fn parse_errors(parsed: &recover::Recovered, file: &str) -> Vec<ConfigError> {
    let mut errors: Vec<ConfigError> = parsed
        .errors
        .iter()
        .map(|e| ConfigError {
            file: file.to_owned(),
            line: e.line,
            path: String::new(),
            message: if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{} (at {})", e.message, e.path)
            },
        })
        .collect();
    if parsed.truncated {
        errors.push(ConfigError {
            file: file.to_owned(),
            line: None,
            path: String::new(),
            message: format!("more errors follow; stopped after {}", recover::MAX_ERRORS),
        });
    }
    errors
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
    match msg.strip_prefix("data did not match any variant of untagged enum ") {
        Some(name) => forms_of(name.trim()),
        None => msg.to_owned(),
    }
}

/// What a value that takes several forms may be, for the parser's "did not match any
/// variant" (which names a type of ours, not what to write).
fn forms_of(name: &str) -> String {
    let forms = match name {
        "CallConfig" => {
            "an endpoint's name, or a mapping of `endpoint` and optional `method`, `path` and \
             `body` (keep or none)"
        }
        "UrlEntry" => "a URL, or a mapping of `url` and optional `weight`",
        "Failover" => "true, false, or a mapping of `on_status` (a list of statuses)",
        "AggregateConfig" => "object, array, or a mapping of `jq` (a program)",
        "JqConfig" => "a jq program, or a mapping of `program` or `file`",
        "XsltParam" => "a string, or a mapping of `xpath` (an expression)",
        "WsseSubjectConfig" => "a subject's attributes (`CN=…, O=…`), or a mapping of `pattern`",
        "WsseRecipient" => "request_signer, or a mapping of `cert` (a PEM file)",
        "InitConfig" => "an SQL file, or a mapping of `sqlite` and/or `postgres` files",
        "QueryText" => "SQL text, or a mapping of `sqlite` and/or `postgres` SQL text",
        "Literal" => "true, false, a number or a string",
        _ => return format!("a value of none of the forms {name} takes"),
    };
    format!("expected {forms}; check the keys and the types of the values")
}

/// Checks what can be checked without compiling: names, addresses, files, statuses.
pub fn validate(loaded: &LoadedConfig) -> Vec<ConfigError> {
    let cfg = &loaded.config;
    let mut errors = Vec::new();
    let mut err = |line: Option<u64>, path: String, msg: String| {
        errors.push(loaded.error(line, path, msg));
    };

    // A config of echo back ends alone (a benchmark round's shared back end) needs none.
    if cfg.listeners.is_empty() && cfg.echo.is_none() && cfg.echoes.is_empty() {
        err(
            None,
            "listeners".into(),
            "at least one listener (or echo back end) is needed".into(),
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
    if let Some(token) = &cfg.admin.token {
        let t = token.expose();
        if t.is_empty() || t.bytes().any(|b| !b.is_ascii_graphic()) {
            err(
                None,
                "admin.token".into(),
                "must be non-empty printable ASCII without spaces".into(),
            );
        }
    }
    if let Err(e) = check_log_filter(&cfg.log.level) {
        err(None, "log.level".into(), e);
    }
    if let Some(log) = &cfg.access_log {
        if log.path.trim().is_empty() {
            err(
                None,
                "access_log.path".into(),
                "give 'stdout' or a file path".into(),
            );
        }
        let path = log.path.trim();
        if !path.is_empty() && path != "stdout" && path != "-" {
            if let Some(problem) = log_file_problem(&loaded.resolve(path)) {
                err(None, "access_log.path".into(), problem);
            }
        }
        if log.buffer == 0 {
            err(
                None,
                "access_log.buffer".into(),
                "must be at least 1".into(),
            );
        }
    }
    if !(0.0..=1.0).contains(&cfg.tracing.sample) {
        err(
            None,
            "tracing.sample".into(),
            format!("{} is not a ratio from 0 to 1", cfg.tracing.sample),
        );
    }
    if let Some(otlp) = &cfg.tracing.otlp {
        if let Err(e) = check_url(&otlp.endpoint) {
            err(None, "tracing.otlp.endpoint".into(), e);
        }
        if otlp.timeout.0.is_zero() {
            err(
                None,
                "tracing.otlp.timeout".into(),
                "must be more than 0".into(),
            );
        }
        if otlp.queue == 0 {
            err(
                None,
                "tracing.otlp.queue".into(),
                "must be at least 1".into(),
            );
        }
        if otlp.batch == 0 {
            err(
                None,
                "tracing.otlp.batch".into(),
                "must be at least 1".into(),
            );
        }
        for (name, value) in &otlp.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                err(
                    None,
                    format!("tracing.otlp.headers.{name}"),
                    format!("invalid header name '{name}'"),
                );
            } else if http::HeaderValue::from_str(value.expose()).is_err() {
                err(
                    None,
                    format!("tracing.otlp.headers.{name}"),
                    "not a valid header value (a line break or another control character)".into(),
                );
            }
        }
    }
    let echoes = cfg.echo.iter().map(|e| ("echo".to_owned(), e));
    let named = cfg.echoes.iter().map(|(k, e)| (format!("echoes.{k}"), e));
    for (path, echo) in echoes.chain(named) {
        if let Some(file) = echo.json_file.as_deref().filter(|f| !f.is_empty()) {
            if let Some(problem) = file_problem(&loaded.resolve(file)) {
                err(None, format!("{path}.json_file"), problem);
            }
        }
        if let Some(json) = echo.json.as_deref().filter(|j| !j.is_empty()) {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(json) {
                err(None, format!("{path}.json"), format!("not JSON: {e}"));
            }
        }
        if let Err(e) = echo.bind.parse::<SocketAddr>() {
            err(
                None,
                format!("{path}.bind"),
                format!("invalid address '{}': {e}", echo.bind),
            );
        }
        if let Some(name) = &echo.name {
            if http::HeaderValue::from_str(name).is_err() {
                err(
                    None,
                    format!("{path}.name"),
                    format!("'{name}' is not a valid header value"),
                );
            }
        }
    }
    for name in cfg.echoes.keys() {
        if http::HeaderValue::from_str(name).is_err() {
            err(
                None,
                format!("echoes.{name}"),
                format!(
                    "'{name}' is not a valid header value (it names the instance in x-echo-name)"
                ),
            );
        }
    }
    // A budget below a proxy's max_body would refuse that proxy's largest bodies for ever,
    // each with a Retry-After that promises otherwise.
    let budget = cfg.max_buffered_bodies.0;
    if budget == 0 {
        err(
            None,
            "max_buffered_bodies".into(),
            "must be more than 0".into(),
        );
    } else if let Some((name, p)) = cfg.proxies.iter().find(|(_, p)| p.max_body.0 > budget) {
        err(
            None,
            "max_buffered_bodies".into(),
            format!(
                "{budget} bytes is less than proxies.{name}.max_body ({} bytes): such a body \
                 could never be held",
                p.max_body.0
            ),
        );
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
                check_file(loaded, file, format!("{path}.tls.{key}"), &mut err);
            }
        }
        if l.max_header_size.0 < 1024 {
            err(
                None,
                format!("{path}.max_header_size"),
                "must be at least 1KiB".into(),
            );
        }
        for (key, d) in [
            ("header_read_timeout", l.header_read_timeout),
            ("client_body_timeout", l.client_body_timeout),
            ("send_timeout", l.send_timeout),
        ] {
            if d.0.is_zero() {
                err(None, format!("{path}.{key}"), "must be more than 0".into());
            }
        }
    }
    for (name, e) in &cfg.endpoints {
        check_endpoint(loaded, name, e, &mut err);
    }
    for (line, path, msg) in shared_addresses(cfg) {
        err(line, path, msg);
    }
    check_databases(loaded, &mut err);
    check_processes(loaded, &mut err);
    for (name, steps) in &cfg.sequences {
        check_steps(loaded, steps, &format!("sequences.{name}"), &mut err);
    }
    for e in nesting::check(loaded) {
        err(e.line, e.path, e.message);
    }
    // Per listener: the patterns served so far, with their proxy and methods.
    type Served<'a> = Vec<(pattern::PathPattern, &'a str, &'a [String])>;
    let mut served: BTreeMap<String, Served<'_>> = BTreeMap::new();
    for (name, p) in &cfg.proxies {
        let path = format!("proxies.{name}");
        if !(1..=1024).contains(&p.json_max_depth) {
            err(
                None,
                format!("{path}.json_max_depth"),
                format!("{} is not from 1 to 1024", p.json_max_depth),
            );
        }
        let parsed = match pattern::PathPattern::parse(&p.path.value) {
            Ok(parsed) => Some(parsed),
            Err(msg) => {
                err(line_of(&p.path), format!("{path}.path"), msg);
                None
            }
        };
        for m in &p.methods {
            if http::Method::from_bytes(m.as_bytes()).is_err() {
                err(
                    None,
                    format!("{path}.methods"),
                    format!("invalid HTTP method '{m}'"),
                );
            } else if m.bytes().any(|b| b.is_ascii_lowercase()) {
                err(
                    None,
                    format!("{path}.methods"),
                    format!(
                        "method '{m}': methods are case-sensitive (RFC 9110 §9.1) and clients send '{}'",
                        m.to_ascii_uppercase()
                    ),
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
        if let Some(parsed) = parsed {
            for l in listeners {
                let on = served.entry(l.clone()).or_default();
                // Two proxies may share a pattern when their methods do not overlap.
                let clash = on.iter().find(|(other, _, methods)| {
                    other.same_shape(&parsed) && methods_overlap(methods, &p.methods)
                });
                if let Some((other, other_name, _)) = clash {
                    let what = if other.to_string() == parsed.to_string() {
                        format!("path '{}'", p.path.value)
                    } else {
                        format!("path '{}' (the same pattern as '{other}')", p.path.value)
                    };
                    err(
                        line_of(&p.path),
                        format!("{path}.path"),
                        format!(
                            "{what} is already served by proxy '{other_name}' on listener '{l}'"
                        ),
                    );
                }
                on.push((parsed.clone(), name, &p.methods));
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

/// Checks a log filter (`log.level`, `RUST_LOG`): a level (`trace`, `debug`, `info`, `warn`,
/// `error` or `off`, in any case), or a comma list of levels and `target=level` directives
/// (`info,busbar_engine=debug`). tracing's own parser takes any other word as a target name to
/// log at every level, so a misspelt level (`warnning`) would turn off every line, errors
/// included, and say nothing.
pub fn check_log_filter(text: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let is_level = |l: &str| LEVELS.iter().any(|x| x.eq_ignore_ascii_case(l.trim()));
    let is_target = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-' | b'.'))
    };
    let ok = !text.trim().is_empty()
        && text.split(',').all(|d| match d.split_once('=') {
            Some((target, level)) => is_target(target.trim()) && is_level(level),
            None => is_level(d),
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{text}' is not a log level: give trace, debug, info, warn, error or off, or \
             directives like 'info,busbar_engine=debug'"
        ))
    }
}

/// True when a request method could reach both proxies (no `methods` means any).
fn methods_overlap(a: &[String], b: &[String]) -> bool {
    a.is_empty() || b.is_empty() || a.iter().any(|m| b.contains(m))
}

fn check_endpoint(
    loaded: &LoadedConfig,
    name: &str,
    e: &EndpointConfig,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    let path = format!("endpoints.{name}");
    let urls = e.url_list();
    match (&e.url, e.urls.is_empty()) {
        (None, true) => err(None, path.clone(), "give 'url' or 'urls'".into()),
        (Some(u), false) => err(
            line_of(u),
            path.clone(),
            "give either 'url' or 'urls', not both".into(),
        ),
        _ => {}
    }
    let mut https = false;
    for u in &urls {
        match check_url(u.url.expose()) {
            Ok(secure) => https |= secure,
            Err(msg) => err(u.line, format!("{path}.{}", u.path), msg),
        }
        if !(1..=1000).contains(&u.weight) {
            let at = u.path.trim_end_matches(".url");
            err(
                u.line,
                format!("{path}.{at}.weight"),
                format!("weight {} is not between 1 and 1000", u.weight),
            );
        }
    }
    for (key, d) in [
        ("timeout", e.timeout),
        ("connect_timeout", e.connect_timeout),
    ] {
        if d.0.is_zero() {
            err(
                None,
                format!("{path}.{key}"),
                "must be greater than zero".into(),
            );
        }
    }
    if let Some(d) = e.deadline.as_ref().filter(|d| d.value.0.is_zero()) {
        err(
            line_of(d),
            format!("{path}.deadline"),
            "must be greater than zero".into(),
        );
    }
    check_statuses(&e.retry_on_status, &format!("{path}.retry_on_status"), err);
    if let Failover::OnStatus(f) = &e.failover {
        check_statuses(&f.on_status, &format!("{path}.failover.on_status"), err);
    }
    let b = &e.retry_budget;
    if !(0.0..=1.0).contains(&b.ratio) {
        err(
            None,
            format!("{path}.retry_budget.ratio"),
            format!("ratio {} is not between 0 and 1", b.ratio),
        );
    }
    if b.window.0.is_zero() {
        err(
            None,
            format!("{path}.retry_budget.window"),
            "must be greater than zero".into(),
        );
    }
    if let Some(br) = &e.breaker {
        let at = format!("{path}.breaker");
        if br.failures == 0 {
            err(None, format!("{at}.failures"), "must be at least 1".into());
        }
        if let Some(r) = br.failure_ratio {
            if !(r > 0.0 && r <= 1.0) {
                err(
                    None,
                    format!("{at}.failure_ratio"),
                    format!("ratio {r} is not above 0 and at most 1"),
                );
            }
        }
        if br.window.0.is_zero() {
            err(
                None,
                format!("{at}.window"),
                "must be greater than zero".into(),
            );
        }
        if br.suspend.0.is_zero() {
            err(
                None,
                format!("{at}.suspend"),
                "must be greater than zero".into(),
            );
        }
        if br.max_suspend.0 < br.suspend.0 {
            err(
                None,
                format!("{at}.max_suspend"),
                "must not be shorter than 'suspend'".into(),
            );
        }
        check_statuses(&br.on_status, &format!("{at}.on_status"), err);
    }
    if e.max_connections == Some(0) {
        err(
            None,
            format!("{path}.max_connections"),
            "must be at least 1".into(),
        );
    }
    if let Some(tls) = &e.tls {
        let at = format!("{path}.tls");
        for (key, file) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
            if let Some(f) = file {
                check_file(loaded, f, format!("{at}.{key}"), err);
            }
        }
        match (&tls.cert, &tls.key) {
            (Some(c), None) => err(
                line_of(c),
                format!("{at}.key"),
                "a client 'cert' needs its 'key'".into(),
            ),
            (None, Some(k)) => err(
                line_of(k),
                format!("{at}.cert"),
                "a client 'key' needs its 'cert'".into(),
            ),
            _ => {}
        }
        if let Some(sn) = &tls.server_name {
            if sn.value.is_empty() {
                err(
                    line_of(sn),
                    format!("{at}.server_name"),
                    "must not be empty".into(),
                );
            }
        }
        if !https && !urls.is_empty() {
            err(
                None,
                at,
                "'tls' is set but no URL of this endpoint is https".into(),
            );
        }
    }
}

fn check_statuses(list: &[u16], at: &str, err: &mut impl FnMut(Option<u64>, String, String)) {
    for s in list {
        if !(100..=599).contains(s) {
            err(None, at.to_owned(), format!("invalid HTTP status {s}"));
        }
    }
}

/// Checks a back-end URL; true when it is `https`.
fn check_url(url: &str) -> Result<bool, String> {
    let shown = secret::redact_url(url);
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("invalid URL '{shown}': {e}"))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => {
            return Err(format!(
                "unsupported scheme '{other}' in '{shown}': use http or https"
            ))
        }
        None => {
            return Err(format!(
                "invalid URL '{shown}': expected http://host:port/path"
            ))
        }
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL '{shown}': no host"));
    }
    Ok(https)
}

fn check_sql(
    cfg: &Config,
    sql: &Spanned<SqlConfig>,
    here: &str,
    err: &mut impl FnMut(Option<u64>, String, String),
) {
    let line = line_of(sql);
    let c = &sql.value;
    if !cfg.databases.contains_key(&c.database) {
        err(
            line,
            format!("{here}.database"),
            format!("unknown database '{}'", c.database),
        );
    }
    match (&c.query, c.transaction.is_empty()) {
        (None, true) => err(
            line,
            here.to_owned(),
            "give 'query' (one statement) or 'transaction' (a list of them)".into(),
        ),
        (Some(_), false) => err(
            line,
            here.to_owned(),
            "give 'query' or 'transaction', not both".into(),
        ),
        _ => {}
    }
    if let Some(status) = c.status {
        if !(200..=299).contains(&status) {
            err(
                line,
                format!("{here}.status"),
                format!("{status} is not a success status (200-299)"),
            );
        }
    }
    let lists = std::iter::once((format!("{here}.params"), &c.params)).chain(
        c.transaction
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("{here}.transaction[{i}].params"), &t.params)),
    );
    for (at, params) in lists {
        for (name, p) in params {
            let sources = p.sources();
            if sources.len() != 1 {
                err(
                    line,
                    format!("{at}.{name}"),
                    format!(
                        "give exactly one of path, query, header, json, var or value (found {})",
                        if sources.is_empty() {
                            "none".to_owned()
                        } else {
                            sources.join(", ")
                        }
                    ),
                );
            }
            if let Some(h) = &p.header {
                if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    err(
                        line,
                        format!("{at}.{name}.header"),
                        format!("invalid header name '{h}'"),
                    );
                }
            }
            if (p.min.is_some() || p.max.is_some()) && p.ty != SqlType::Int {
                err(
                    line,
                    format!("{at}.{name}"),
                    "min and max need type: int".into(),
                );
            }
        }
    }
}

fn check_databases(loaded: &LoadedConfig, err: &mut impl FnMut(Option<u64>, String, String)) {
    for (name, d) in &loaded.config.databases {
        let at = format!("databases.{name}");
        // A URL wins over `path` (so one file can switch with a variable); an empty one (an
        // unset variable's default) stands aside for `path` or `host`.
        let url = d.url.as_ref().filter(|u| !u.expose().is_empty());
        if url.is_none() && d.path.is_some() == d.host.is_some() {
            err(
                None,
                at.clone(),
                "give url, path (SQLite) or host (PostgreSQL)".into(),
            );
        }
        if url.is_some() && d.host.is_some() {
            err(None, at.clone(), "give url or host, not both".into());
        }
        if let Some(url) = url {
            let u = url.expose();
            if !(u.starts_with("sqlite:")
                || u.starts_with("postgres://")
                || u.starts_with("postgresql://"))
            {
                err(
                    None,
                    format!("{at}.url"),
                    format!(
                        "unsupported database URL '{}': use sqlite:PATH, sqlite::memory: or postgres://…",
                        url.redacted()
                    ),
                );
            }
        }
        let files: Vec<&Spanned<String>> = match &d.init {
            Some(InitConfig::File(f)) => vec![f],
            Some(InitConfig::ByKind { sqlite, postgres }) => {
                sqlite.iter().chain(postgres.iter()).collect()
            }
            None => Vec::new(),
        };
        for f in files {
            check_file(loaded, f, format!("{at}.init"), err);
        }
    }
}

fn check_processes(loaded: &LoadedConfig, err: &mut impl FnMut(Option<u64>, String, String)) {
    let cfg = &loaded.config;
    for (name, p) in &cfg.processes {
        let at = format!("processes.{name}");
        let dir = loaded.resolve(&p.dir.value);
        if !dir.is_dir() {
            err(
                line_of(&p.dir),
                format!("{at}.dir"),
                format!("no such folder: {}", dir.display()),
            );
        }
        for (link, endpoint) in &p.partners {
            if !cfg.endpoints.contains_key(&endpoint.value) {
                err(
                    line_of(endpoint),
                    format!("{at}.partners.{link}"),
                    format!("no endpoint '{}'", endpoint.value),
                );
            }
        }
        if let Some(l) = &p.listener {
            if !cfg.listeners.contains_key(&l.value) {
                err(
                    line_of(l),
                    format!("{at}.listener"),
                    format!("unknown listener '{}'", l.value),
                );
            }
        }
        if p.max_instances == 0 {
            err(
                None,
                format!("{at}.max_instances"),
                "must be at least 1".into(),
            );
        }
        if p.instance_ttl.0.is_zero() {
            err(
                None,
                format!("{at}.instance_ttl"),
                "must be more than 0".into(),
            );
        }
        if let Some(ps) = &p.persistence {
            if !cfg.databases.contains_key(&ps.database.value) {
                err(
                    line_of(&ps.database),
                    format!("{at}.persistence.database"),
                    format!("no database '{}'", ps.database.value),
                );
            }
            if ps.lease.0 < std::time::Duration::from_secs(1) {
                err(
                    None,
                    format!("{at}.persistence.lease"),
                    "must be at least 1s".into(),
                );
            }
            if ps.node.as_deref().is_some_and(str::is_empty) {
                err(
                    None,
                    format!("{at}.persistence.node"),
                    "must not be empty".into(),
                );
            }
        }
    }
}

/// Why a file busbar appends to could not be opened, if that shows before opening it: a
/// folder in its place, or no folder to create it in.
fn log_file_problem(file: &Path) -> Option<String> {
    if file.is_dir() {
        return Some(format!("{} is a directory, not a file", file.display()));
    }
    let folder = file.parent().filter(|p| !p.as_os_str().is_empty())?;
    (!folder.is_dir()).then(|| {
        format!(
            "{} cannot be created: there is no folder {}",
            file.display(),
            folder.display()
        )
    })
}

/// Listeners of the one config that would take the same address: the second could not start
/// (two on one port and host, or one on every host of a port another takes on one host). Each
/// clash is reported once, at the one that comes later in listeners, admin, echo, echoes.
fn shared_addresses(cfg: &Config) -> Vec<(Option<u64>, String, String)> {
    let listeners = cfg.listeners.iter().map(|(name, l)| {
        (
            line_of(&l.bind),
            format!("listeners.{name}.bind"),
            l.bind.value.as_str(),
        )
    });
    let admin = cfg
        .admin
        .enabled
        .then(|| (None, "admin.bind".to_owned(), cfg.admin.bind.as_str()));
    let echo = cfg
        .echo
        .iter()
        .filter(|e| e.enabled)
        .map(|e| (None, "echo.bind".to_owned(), e.bind.as_str()));
    let echoes = cfg
        .echoes
        .iter()
        .filter(|(_, e)| e.enabled)
        .map(|(k, e)| (None, format!("echoes.{k}.bind"), e.bind.as_str()));
    let mut taken: Vec<(String, SocketAddr)> = Vec::new();
    let mut clashes = Vec::new();
    for (line, path, bind) in listeners.chain(admin).chain(echo).chain(echoes) {
        // A bad address is reported where it is checked; port 0 is any free port.
        let Ok(addr) = bind.parse::<SocketAddr>() else {
            continue;
        };
        if addr.port() == 0 {
            continue;
        }
        let overlaps = |other: &SocketAddr| {
            other.port() == addr.port()
                && other.is_ipv4() == addr.is_ipv4()
                && (other.ip() == addr.ip()
                    || other.ip().is_unspecified()
                    || addr.ip().is_unspecified())
        };
        match taken.iter().find(|(_, other)| overlaps(other)) {
            Some((first, other)) => clashes.push((
                line,
                path,
                format!(
                    "{addr} overlaps {first} ({other}): each listener needs an address of its own"
                ),
            )),
            None => taken.push((path, addr)),
        }
    }
    clashes
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
            StepConfig::Call(call) => {
                let name = call.value.endpoint();
                if !cfg.endpoints.contains_key(name) {
                    err(
                        line_of(call),
                        here.clone(),
                        format!("unknown endpoint '{name}'"),
                    );
                }
                if let CallConfig::Shaped(shape) = &call.value {
                    if let Some(m) = &shape.method {
                        if http::Method::from_bytes(m.as_bytes()).is_err() {
                            err(
                                line_of(call),
                                format!("{here}.method"),
                                format!("invalid method '{m}'"),
                            );
                        }
                    }
                    if let Some(p) = &shape.path {
                        if !p.starts_with('/') {
                            err(
                                line_of(call),
                                format!("{here}.path"),
                                format!("'{p}' must start with '/'"),
                            );
                        }
                    }
                }
            }
            StepConfig::ScatterGather(sg) => {
                if sg.branches.is_empty() {
                    err(
                        None,
                        format!("{here}.branches"),
                        "give at least one branch".into(),
                    );
                }
                let mut names = std::collections::BTreeSet::new();
                for (i, b) in sg.branches.iter().enumerate() {
                    if !names.insert(b.name.as_str()) {
                        err(
                            None,
                            format!("{here}.branches[{i}].name"),
                            format!("'{}' is used twice", b.name),
                        );
                    }
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
                    // A 1xx is not a final answer: the client would wait for one after it.
                    if (100..=199).contains(&s) {
                        err(
                            None,
                            format!("{here}.status"),
                            format!("{s} is an interim status, not an answer (give 200-599)"),
                        );
                    } else if !(200..=599).contains(&s) {
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
            StepConfig::Log(_)
            | StepConfig::JsonSelect(_)
            | StepConfig::Jq(_)
            | StepConfig::JsonToXml(_)
            | StepConfig::XmlToJson(_) => {}
            StepConfig::Sql(sql) => check_sql(cfg, sql, &here, err),
            StepConfig::WsseVerify(v) => check_wsse_verify(loaded, v, &here, err),
            StepConfig::WsseSecure(w) => check_wsse_secure(loaded, w, &here, err),
            StepConfig::Xslt(x) => {
                check_file(loaded, &x.stylesheet, format!("{here}.stylesheet"), err);
            }
            StepConfig::Route(cases) => {
                for (j, case) in cases.iter().enumerate() {
                    let at = format!("{here}[{j}]");
                    match (&case.when, &case.then, &case.otherwise) {
                        (Some(when), Some(_), None) => {
                            let sources = usize::from(when.header.is_some())
                                + usize::from(when.xpath.is_some())
                                + usize::from(when.json.is_some());
                            if sources != 1 {
                                err(
                                    None,
                                    format!("{at}.when"),
                                    "give exactly one of 'header', 'xpath' or 'json'".into(),
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
    if let Some(problem) = file_problem(&loaded.resolve(&file.value)) {
        err(line_of(file), at, problem);
    }
}

/// Why `path` cannot be one of the files a config names, if it cannot: it must be a regular
/// file (after symbolic links).
fn file_problem(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => None,
        Ok(m) if m.is_dir() => Some(format!("a directory, not a file: {}", path.display())),
        Ok(_) => Some(format!("not a regular file: {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("file not found: {}", path.display()))
        }
        Err(e) => Some(format!("cannot read {}: {e}", path.display())),
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
    fn echo_back_ends_can_be_left_out_and_can_stand_alone() {
        let text = "listeners: {}\necho:\n  enabled: ${OFF:-true}\n  bind: 127.0.0.1:9000\nechoes:\n  a: { enabled: false, bind: 127.0.0.1:9001 }\n  b: { bind: 127.0.0.1:9002 }\n";
        let on = load_text(text, Path::new("e.yaml"), |_| None).expect("echoes alone are a config");
        assert!(on.config.echo.is_some());
        assert_eq!(on.config.echoes.keys().collect::<Vec<_>>(), ["b"]);
        assert!(on.config.listeners.is_empty());
        let off = load_text(text, Path::new("e.yaml"), |k| {
            (k == "OFF").then(|| "false".into())
        })
        .expect("valid");
        assert!(off.config.echo.is_none());
        // Nothing to serve at all is still an error.
        let none = "listeners: {}\necho: { enabled: false }\n";
        let errs = load_text(none, Path::new("n.yaml"), |_| None).expect_err("nothing to serve");
        assert!(
            errs.to_string()
                .contains("at least one listener (or echo back end) is needed"),
            "{errs}"
        );
    }

    #[test]
    fn process_folders_are_checked_with_their_paths() {
        let yaml = format!(
            "{OK}processes:\n  Hello:\n    dir: src\n    partners: {{ helloWorld: echo, other: nowhere }}\n  Gone:\n    dir: no/such/folder\n    listener: web\n    max_instances: 0\n    instance_ttl: 0s\n    timout: 1s\n"
        );
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].contains("unknown field `timout`"), "{errs:#?}");
        let errs = check(&yaml.replace("    timout: 1s\n", ""));
        assert_eq!(
            errs,
            vec![
                "t.yaml:15: processes.Gone.dir: no such folder: ./no/such/folder".to_owned(),
                "t.yaml:16: processes.Gone.listener: unknown listener 'web'".to_owned(),
                "t.yaml: processes.Gone.max_instances: must be at least 1".to_owned(),
                "t.yaml: processes.Gone.instance_ttl: must be more than 0".to_owned(),
                "t.yaml:13: processes.Hello.partners.other: no endpoint 'nowhere'".to_owned(),
            ]
        );
    }

    #[test]
    fn process_persistence_is_checked_with_its_paths() {
        let yaml = format!(
            "{OK}processes:\n  Hello:\n    dir: src\n    persistence:\n      database: nowhere\n      node: \"\"\n      lease: 10ms\n      completion: sometimes\n"
        );
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].contains("sometimes"), "{errs:#?}");
        let errs = check(&yaml.replace(
            "      completion: sometimes\n",
            "      completion: always\n",
        ));
        assert_eq!(
            errs,
            vec![
                "t.yaml:14: processes.Hello.persistence.database: no database 'nowhere'".to_owned(),
                "t.yaml: processes.Hello.persistence.lease: must be at least 1s".to_owned(),
                "t.yaml: processes.Hello.persistence.node: must not be empty".to_owned(),
            ]
        );
    }

    #[test]
    fn a_valid_config_has_no_errors() {
        assert_eq!(check(OK), Vec::<String>::new());
    }

    #[test]
    fn the_body_budget_is_more_than_0_and_holds_every_proxys_largest_body() {
        let zero = format!("max_buffered_bodies: 0\n{OK}");
        assert_eq!(
            load_errors(&zero),
            ["t.yaml:1: max_buffered_bodies: must be more than 0"]
        );
        // The proxy's max_body is the default, 10MiB.
        let small = format!("max_buffered_bodies: 1MiB\n{OK}");
        assert_eq!(
            load_errors(&small),
            [
                "t.yaml:1: max_buffered_bodies: 1048576 bytes is less than proxies.P.max_body \
              (10485760 bytes): such a body could never be held"
            ]
        );
        let fits = small.replace("    path: /p\n", "    path: /p\n    max_body: 1MiB\n");
        assert_eq!(load_errors(&fits), Vec::<String>::new());
    }

    #[test]
    fn serving_timeouts_must_be_positive_and_the_admin_token_printable() {
        let yaml = OK.replace(
            "http: { bind: \"127.0.0.1:0\" }",
            "http: { bind: \"127.0.0.1:0\", header_read_timeout: 0s, client_body_timeout: 0s, send_timeout: 0ms, reuse_port: true }\nadmin: { token: \"a b\" }",
        );
        let errs = check(&yaml);
        for want in [
            "listeners.http.header_read_timeout: must be more than 0",
            "listeners.http.client_body_timeout: must be more than 0",
            "listeners.http.send_timeout: must be more than 0",
            "admin.token: must be non-empty printable ASCII without spaces",
        ] {
            assert!(errs.iter().any(|e| e.ends_with(want)), "{want}: {errs:?}");
        }
        assert_eq!(errs.len(), 4, "{errs:?}");
    }

    #[test]
    fn set_header_values_of_credential_headers_serialise_redacted() {
        let step = |name: &str| model::SetHeaderConfig {
            name: name.into(),
            value: "v4lue".into(),
        };
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "Set-Cookie",
            "X-API-Key",
            "X-Auth-Token",
            "x-client-secret",
        ] {
            let v = serde_json::to_value(step(name)).unwrap_or_default();
            assert_eq!(v["value"], "<redacted>", "{name}");
            assert_eq!(v["name"], name);
        }
        let v = serde_json::to_value(step("X-Trace")).unwrap_or_default();
        assert_eq!(v["value"], "v4lue");
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
    fn an_endpoint_deadline_of_zero_or_not_a_duration_is_refused_with_its_line() {
        let at = |d: &str| {
            OK.replace(
                "timeout: 2s }",
                &format!("timeout: 2s,\n    deadline: {d} }}"),
            )
        };
        assert_eq!(
            check(&at("0s")),
            ["t.yaml:5: endpoints.echo.deadline: must be greater than zero"]
        );
        let errs = check(&at("soon"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:5: "), "{errs:?}");
        assert!(errs[0].contains("invalid duration 'soon'"), "{errs:?}");
        assert_eq!(check(&at("1500ms")), Vec::<String>::new());
    }

    #[test]
    fn a_number_or_flag_of_the_wrong_kind_says_what_was_written_and_what_is_expected() {
        for (from, to, want) in [
            (
                "timeout: 2s",
                "timeout: 2s, retries: -1",
                "invalid value '-1': expected a whole number from 0 to 4294967295",
            ),
            (
                "timeout: 2s",
                "timeout: 2s, retries: 1.5",
                "invalid value '1.5': expected a whole number from 0 to 4294967295",
            ),
            (
                "timeout: 2s",
                "timeout: 2s, retries: \"two\"",
                "invalid value '\"two\"': expected a whole number from 0 to 4294967295",
            ),
            (
                "path: /p",
                "path: /p\n    json_max_depth: -5 # too shallow",
                "invalid value '-5': expected a whole number from 0 to 18446744073709551615",
            ),
        ] {
            let yaml = OK.replace(from, to);
            assert_ne!(yaml, OK, "{from}");
            let errs = check(&yaml);
            assert!(errs.iter().any(|e| e.contains(want)), "{to}: {errs:#?}");
        }
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

    #[test]
    fn log_level_is_a_level_or_a_list_of_target_directives() {
        for good in [
            "info",
            "WARN",
            " off ",
            "error,busbar_engine=debug",
            "busbar=debug, hyper=Warn",
            "busbar_engine::proxy=trace",
        ] {
            assert_eq!(check_log_filter(good), Ok(()), "{good}");
        }
        for bad in [
            "warnning",
            "info\"",
            "",
            "info,",
            "busbar",
            "busbar=loud",
            "=info",
            "a b=info",
        ] {
            assert!(check_log_filter(bad).is_err(), "{bad:?}");
        }
        let errs = check(&format!("log: {{ level: warnning }}\n{OK}"));
        assert_eq!(
            errs,
            ["t.yaml: log.level: 'warnning' is not a log level: give trace, debug, info, warn, error or off, or directives like 'info,busbar_engine=debug'"]
        );
    }

    #[test]
    fn respond_answers_with_a_final_status() {
        let errs = check(&OK.replace(
            "- call: echo",
            "- respond: { status: 101 }\n      - respond: { status: 200 }\n      - respond: { status: 600 }",
        ));
        assert_eq!(
            errs,
            [
                "t.yaml: proxies.P.in[0].respond.status: 101 is an interim status, not an answer (give 200-599)",
                "t.yaml: proxies.P.in[2].respond.status: invalid HTTP status 600",
            ]
        );
    }

    #[test]
    fn the_span_export_timeout_must_be_more_than_0() {
        let errs = check(&format!(
            "tracing: {{ otlp: {{ endpoint: \"http://127.0.0.1:4318/v1/traces\", timeout: 0s }} }}\n{OK}"
        ));
        assert_eq!(errs, ["t.yaml: tracing.otlp.timeout: must be more than 0"]);
    }

    /// A chain of `n` sequences `s0` → … → `s{n-1}`, the last one calling `echo`.
    fn chain(n: usize) -> String {
        let mut yaml = String::from("sequences:\n");
        for i in 0..n - 1 {
            yaml.push_str(&format!("  s{i}: [ {{ sequence: s{} }} ]\n", i + 1));
        }
        yaml.push_str(&format!("  s{}: [ {{ call: echo }} ]\n", n - 1));
        yaml
    }

    #[test]
    fn steps_nest_at_most_32_levels_counted_through_the_sequences_they_run() {
        // The proxy's step is level 1, the last sequence's call level n + 1.
        let at = |n: usize| {
            check(&format!(
                "{OK}  Q:\n    path: /q\n    in:\n      - sequence: s0\n{}",
                chain(n)
            ))
        };
        assert_eq!(at(31), Vec::<String>::new());
        let errs = at(32);
        assert_eq!(
            errs,
            [
                "t.yaml:13: proxies.Q.in[0].sequence: steps nest 33 levels deep here, through sequences 's0' → 's1' → 's2' → … → 's31' (32 sequences); at most 32 are allowed"
            ]
        );
        // Nested steps count too: a route and a scatter-gather branch are a level each.
        let yaml = format!(
            "{OK}      - route:\n          - when: {{ header: x, exists: true }}\n            then:\n              - scatter_gather: {{ branches: [ {{ name: a, steps: [ {{ sequence: s0 }} ] }} ] }}\n{}",
            chain(29)
        );
        assert_eq!(check(&yaml), Vec::<String>::new());
        let errs = check(&yaml.replace(&chain(29), &chain(30)));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("t.yaml: proxies.P.in[1].route: steps nest 33 levels deep here"),
            "{errs:#?}"
        );
    }

    #[test]
    fn sequences_too_deep_that_no_proxy_runs_are_refused_once_at_the_outermost() {
        let started = std::time::Instant::now();
        let errs = check(&format!("{OK}{}", chain(10_000)));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with(
                "t.yaml: sequences.s0: steps nest 10000 levels deep here, through sequences 's1'"
            ),
            "{errs:#?}"
        );
        // Sequences that run themselves, used or not, are refused without measuring them.
        let errs = check(&format!(
            "{OK}sequences:\n  a: [ {{ sequence: a }} ]\n  b: [ {{ sequence: c }} ]\n  c: [ {{ route: [ {{ otherwise: [ {{ sequence: b }} ] }} ] }} ]\n"
        ));
        assert_eq!(
            errs,
            [
                "t.yaml:11: sequences.a: sequence 'a' runs itself (through 'a')",
                "t.yaml:12: sequences.b: sequence 'c' runs itself (through 'b')",
                "t.yaml:13: sequences.c: sequence 'b' runs itself (through 'c')",
            ]
        );
    }

    /// Every error `load_text` reports, as printed.
    fn load_errors(yaml: &str) -> Vec<String> {
        match load_text(yaml, Path::new("t.yaml"), |_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn validation_errors_after_a_supplied_missing_field_keep_their_own_lines() {
        // Q lacks its path: recovery gives it one on a line of its own, and R's lines in the
        // repaired text move down by one. R's problem is still reported on its own line (16).
        let yaml = format!(
            "{OK}  Q:\n    in:\n      - call: echo\n  R:\n    path: /r\n    in:\n      - call: ech\n"
        );
        let errs = load_errors(&yaml);
        assert!(
            errs.iter()
                .any(|e| e == "t.yaml:16: proxies.R.in[0].call: unknown endpoint 'ech'"),
            "{errs:#?}"
        );
        // At the end of a file without a final line break: never past its last line.
        let yaml = format!("{OK}  Q:\n    in:\n      - call: echo\n  R:\n    path: /r");
        let errs = load_errors(&yaml);
        assert!(
            errs.iter()
                .any(|e| e == "t.yaml:14: proxies.R.in: a proxy needs at least one step in 'in'"),
            "{errs:#?}"
        );
    }

    #[test]
    fn an_unknown_key_an_unknown_step_and_an_unknown_endpoint_are_reported_together() {
        let yaml = format!(
            "{}      - bogus_step: {{}}\n      - call: nope\n",
            OK.replace("timeout: 2s", "timout: 2s")
        );
        let errs = load_errors(&yaml);
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(
            errs[0].starts_with("t.yaml:4: unknown field `timout`")
                && errs[0].ends_with("(at endpoints.echo.timout)"),
            "{errs:#?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:10: unknown variant `bogus_step`")
                && errs[1].ends_with("(at proxies.P.in[1])"),
            "{errs:#?}"
        );
        assert_eq!(
            errs[2],
            "t.yaml:11: proxies.P.in[2].call: unknown endpoint 'nope'"
        );
    }

    #[test]
    fn every_bad_value_is_reported_with_its_line_and_path() {
        let yaml = "listeners:\n  http:\n    bind: \"127.0.0.1:0\"\n    header_read_timeout: soon\n    keep_alive: [1]\nendpoints:\n  echo: { url: \"http://127.0.0.1:9000/e\", timeout: 2 }\nlog: { level: info, format: fancy }\nproxies:\n  P:\n    path: /p\n    in:\n      - log: { message: m, level: loud }\n      - call: echo\n";
        let errs = load_errors(yaml);
        let lines: Vec<&str> = errs
            .iter()
            .map(|e| e.split(": ").next().unwrap_or(""))
            .collect();
        assert_eq!(
            lines,
            ["t.yaml:4", "t.yaml:5", "t.yaml:7", "t.yaml:8", "t.yaml:13"],
            "{errs:#?}"
        );
        assert!(errs[0].contains("invalid duration 'soon'"), "{errs:#?}");
        assert!(errs[0].ends_with("(at listeners.http.header_read_timeout)"));
        assert!(
            errs[1].ends_with("(at listeners.http.keep_alive)"),
            "{errs:#?}"
        );
        assert!(errs[2].contains("needs a unit"), "{errs:#?}");
        assert!(errs[3].contains("unknown variant `fancy`"), "{errs:#?}");
        assert!(
            errs[4].ends_with("(at proxies.P.in[0].log.level)"),
            "{errs:#?}"
        );
    }

    #[test]
    fn unknown_keys_are_found_at_any_depth_and_in_flow_and_block_style() {
        let yaml = format!(
            "{OK}      - route:\n          - when: {{ hedaer: X-A, equals: a }}\n            then: [ {{ call: echo, extra: 1 }} ]\n          - otherwise:\n              - fault: {{ reason: no, stauts: 500 }}\nsequences:\n  s:\n    - set_header:\n        nme: X\n        value: y\n"
        );
        let mut errs = load_errors(&yaml);
        // In the order of the file, the checks' errors among the parser's.
        assert_eq!(
            errs.remove(1),
            "t.yaml:11: proxies.P.in[1].route[0].when: give exactly one of 'header', 'xpath' or 'json'"
        );
        let expect = [
            (
                "t.yaml:11:",
                "hedaer",
                "proxies.P.in[1].route[0].when.hedaer",
            ),
            (
                "t.yaml:12:",
                "extra",
                "proxies.P.in[1].route[0].then[0].extra",
            ),
            (
                "t.yaml:14:",
                "stauts",
                "proxies.P.in[1].route[1].otherwise[0].fault.stauts",
            ),
            // The misspelt key leaves the step without what it needs; both are said, the
            // missing field on the line of its step.
            (
                "t.yaml:17:",
                "missing field `name`",
                "sequences.s[0].set_header.name",
            ),
            ("t.yaml:18:", "nme", "sequences.s[0].set_header.nme"),
        ];
        assert_eq!(errs.len(), expect.len(), "{errs:#?}");
        for (e, (line, what, path)) in errs.iter().zip(expect) {
            assert!(
                e.starts_with(line) && e.contains(what) && e.ends_with(&format!("(at {path})")),
                "{e} ({errs:#?})"
            );
        }
    }

    #[test]
    fn placeholders_for_bad_parts_never_show_in_errors() {
        // The only step is bad: its stand-in must not make 'in' empty, nor call an unknown
        // endpoint. A listener address of the wrong type must not be reported as invalid too.
        let yaml = "listeners:\n  http: { bind: [1] }\nproxies:\n  P:\n    path: /p\n    in:\n      - calll: echo\n";
        let errs = load_errors(yaml);
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(errs[0].starts_with("t.yaml:2: ") && errs[0].ends_with("(at listeners.http.bind)"));
        assert!(
            errs[1].starts_with("t.yaml:7: unknown variant `calll`"),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_missing_field_is_reported_once_and_parsing_goes_on() {
        let yaml = "listeners:\n  http:\n    bnd: \"127.0.0.1:0\"\nendpoints:\n  e: { timeout: 2s }\nproxies:\n  P:\n    path: /p\n    in: [ { call: nope } ]";
        let errs = load_errors(yaml);
        // A missing field is reported on the line of its mapping's key.
        assert_eq!(errs.len(), 4, "{errs:#?}");
        assert!(
            errs[0].starts_with("t.yaml:2: missing field `bind`"),
            "{errs:#?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:3: unknown field `bnd`"),
            "{errs:#?}"
        );
        assert!(
            errs[2].starts_with("t.yaml:5: missing field `url`"),
            "{errs:#?}"
        );
        assert_eq!(
            errs[3],
            "t.yaml:9: proxies.P.in[0].call: unknown endpoint 'nope'"
        );
    }

    #[test]
    fn broken_files_give_one_clear_error() {
        let cases = [
            ("", "t.yaml: the config is empty"),
            ("# nothing\n", "t.yaml: the config is empty"),
            ("- a\n- b\n", "t.yaml:1: a config is a mapping of sections"),
            ("just text", "t.yaml:1: a config is a mapping of sections"),
            ("listeners:\n\thttp: 1\n", "t.yaml:2: tabs"),
            ("listeners: {\n", "t.yaml:"),
        ];
        for (yaml, start) in cases {
            let errs = load_errors(yaml);
            assert_eq!(errs.len(), 1, "{yaml:?}: {errs:#?}");
            assert!(errs[0].starts_with(start), "{yaml:?}: {errs:#?}");
        }
    }

    #[test]
    fn a_duplicate_key_is_reported_at_its_second_place() {
        let yaml = format!("{OK}  P:\n    path: /q\n    in: [ {{ call: nope }} ]\n");
        assert_eq!(
            load_errors(&yaml),
            ["t.yaml:10: duplicate key 'P' (at proxies.P)"]
        );
    }

    #[test]
    fn hundreds_of_errors_stop_at_the_bound_quickly() {
        let mut yaml = OK.to_owned();
        yaml.push_str("log:\n");
        for i in 0..200 {
            yaml.push_str(&format!("  unknown{i}: {i}\n"));
        }
        let started = std::time::Instant::now();
        let errs = load_errors(&yaml);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert_eq!(errs.len(), recover::MAX_ERRORS + 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("t.yaml:11: unknown field `unknown0`"),
            "{errs:#?}"
        );
        assert!(errs[99].starts_with("t.yaml:110: unknown field `unknown99`"));
        assert_eq!(errs[100], "t.yaml: more errors follow; stopped after 100");
    }

    #[test]
    fn parse_reports_every_parse_error_but_does_not_validate() {
        let yaml = OK
            .replace("timeout: 2s", "timout: 2s")
            .replace("call: echo", "cal: echo");
        let errs = match parse(&yaml, "t.yaml", |_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0,
        };
        let lines: Vec<Option<u64>> = errs.iter().map(|e| e.line).collect();
        assert_eq!(lines, [Some(4), Some(9)], "{errs:#?}");
    }

    #[test]
    fn mangled_configs_never_panic_hang_or_repeat_an_error() {
        // Every one-character change of a config with most shapes of YAML in it: errors must
        // come back (or none), each once, on a line of the file.
        let base = format!(
            "{OK}      - route:\n          - when: {{ header: X-A, equals: a }}\n            then: [ {{ call: echo }}, {{ set_header: {{ name: X, value: y }} }} ]\n          - otherwise:\n              - fault: {{ reason: no, status: 500 }}\n    on_error:\n      - respond: |\n          body\nsequences:\n  s: [ {{ log: {{ message: m }} }} ]\n"
        );
        let chars: Vec<(usize, char)> = base.char_indices().collect();
        for &(at, c) in &chars {
            let next = at + c.len_utf8();
            for with in ["", ":", "-", " ", "x", "{", "\t", "\n"] {
                let yaml = format!("{}{with}{}", &base[..at], &base[next..]);
                let errs = load_errors(&yaml);
                let lines = yaml.split('\n').count() as u64;
                let mut unique = errs.clone();
                unique.sort();
                unique.dedup();
                assert_eq!(unique.len(), errs.len(), "{yaml}\n{errs:#?}");
                for e in &errs {
                    let line = e
                        .strip_prefix("t.yaml:")
                        .and_then(|r| r.split(':').next())
                        .and_then(|n| n.parse::<u64>().ok());
                    assert!(line.is_none_or(|l| l >= 1 && l <= lines), "{yaml}\n{e}");
                }
            }
        }
    }

    #[test]
    fn values_of_the_wrong_shape_are_reported_once_each_without_follow_on_errors() {
        // Each stand-in must satisfy validation too: no "needs at least one step", no
        // "require at least one of", no "unknown endpoint ''".
        let yaml = format!(
            "{OK}      - bogus: echo\n      - respond: 5\n      - wsse_verify: {{ require: [signatur] }}\n  Q:\n    path: /q\n    methods: GET\n    in: {{ call: echo }}\nworkers: lots\n"
        );
        let errs = load_errors(&yaml);
        let expect = [
            ("t.yaml:10: unknown variant `bogus`", "proxies.P.in[1]"),
            ("t.yaml:11: ", "proxies.P.in[2].respond"),
            (
                "t.yaml:12: unknown variant `signatur`",
                "proxies.P.in[3].wsse_verify.require[0]",
            ),
            ("t.yaml:15: ", "proxies.Q.methods"),
            ("t.yaml:16: ", "proxies.Q.in"),
            ("t.yaml:17: invalid workers 'lots'", "workers"),
        ];
        assert_eq!(errs.len(), expect.len(), "{errs:#?}");
        for (e, (start, path)) in errs.iter().zip(expect) {
            assert!(
                e.starts_with(start) && e.ends_with(&format!("(at {path})")),
                "{e} ({errs:#?})"
            );
        }
    }

    #[test]
    fn a_missing_section_is_reported_for_the_whole_file() {
        let yaml = OK.replace("listeners:\n  http: { bind: \"127.0.0.1:0\" }\n", "");
        assert_eq!(
            load_errors(&yaml),
            ["t.yaml: missing field `listeners` (at listeners)"]
        );
    }

    #[test]
    fn path_patterns_are_checked_with_their_line() {
        let yaml = OK.replace("path: /p", "path: /p/{id}/{id}");
        assert_eq!(
            check(&yaml),
            vec![
                "t.yaml:7: proxies.P.path: path '/p/{id}/{id}': parameter 'id' appears twice"
                    .to_owned()
            ]
        );
        let yaml = OK.replace("path: /p", "path: /p/*/x");
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("may only be the last segment"), "{errs:?}");
    }

    #[test]
    fn two_proxies_share_a_pattern_only_when_their_methods_do_not_overlap() {
        let two = |a: &str, b: &str| {
            format!(
                "{OK}  G:\n    path: /c/{{id}}\n{a}    in: [ {{ call: echo }} ]\n  U:\n    path: /c/{{key}}\n{b}    in: [ {{ call: echo }} ]\n"
            )
        };
        assert_eq!(
            check(&two("    methods: [GET]\n", "    methods: [PUT]\n")),
            Vec::<String>::new()
        );
        assert_eq!(
            check(&two("    methods: [GET, PUT]\n", "    methods: [PUT]\n")),
            vec!["t.yaml:15: proxies.U.path: path '/c/{key}' (the same pattern as '/c/{id}') is already served by proxy 'G' on listener 'http'".to_owned()]
        );
        let errs = check(&two("", "    methods: [PUT]\n"));
        assert_eq!(errs.len(), 1, "no methods means any: {errs:?}");
        let same = format!("{OK}  Q:\n    path: /p\n    in: [ {{ call: echo }} ]\n");
        assert_eq!(
            check(&same),
            vec!["t.yaml:11: proxies.Q.path: path '/p' is already served by proxy 'P' on listener 'http'".to_owned()]
        );
    }

    #[test]
    fn named_echo_back_ends_are_checked() {
        let yaml = format!(
            "{OK}echoes:\n  a: {{ bind: \"127.0.0.1:0\", delay: 5ms }}\n  b: {{ bind: nowhere }}\n  c: {{ bind: \"127.0.0.1:0\", name: \"bad\\nname\" }}\n"
        );
        let errs = check(&yaml);
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(
            errs[0].contains("echoes.b.bind: invalid address 'nowhere'"),
            "{errs:#?}"
        );
        assert!(errs[1].contains("echoes.c.name: "), "{errs:#?}");
    }

    #[test]
    fn aliases_that_expand_past_the_node_limit_are_one_error_found_at_once() {
        let mut yaml = format!("{OK}sequences:\n  s0: &s0 [ {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}}, {{log: {{message: x}}}} ]\n");
        for level in 1..8 {
            let branches: Vec<String> = (0..10)
                .map(|b| format!("{{when: {{header: h{b}}}, then: *s{}}}", level - 1))
                .collect();
            yaml.push_str(&format!(
                "  s{level}: &s{level} [ {{route: [ {} ]}} ]\n",
                branches.join(", ")
            ));
        }
        let started = std::time::Instant::now();
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].contains("the config grows past 250000 nodes once its aliases are expanded"),
            "{errs:#?}"
        );
        assert!(errs[0].starts_with("t.yaml:1"), "{errs:#?}");
        // One parse, not one per alias: the bound is generous for a debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn a_config_nested_past_the_depth_limit_is_one_error() {
        // Routes in routes, 20 deep: four levels of YAML each.
        let mut steps = "[ {log: {message: x}} ]".to_owned();
        for _ in 0..20 {
            steps = format!("[ {{route: [ {{when: {{header: a}}, then: {steps}}} ]}} ]");
        }
        let yaml = format!("{OK}sequences:\n  s: {steps}\n");
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].contains("the config is nested more than 64 levels deep"),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_value_of_none_of_its_forms_is_told_what_the_forms_are() {
        let yaml = OK.replace("- call: echo", "- call: { endpoint: echo, methd: GET }");
        let errs = check(&yaml);
        assert_eq!(
            errs,
            vec!["t.yaml:9: expected an endpoint's name, or a mapping of `endpoint` and optional `method`, `path` and `body` (keep or none); check the keys and the types of the values (at proxies.P.in[0].call)".to_owned()]
        );
        for (workers, why) in [
            ("-3", "workers -3 is not from 1 to 1024 (or 'auto')"),
            ("100000", "workers 100000 is not from 1 to 1024 (or 'auto')"),
            ("0", "workers 0 is not from 1 to 1024 (or 'auto')"),
            (
                "many",
                "invalid workers 'many': expected a number from 1 to 1024 or 'auto'",
            ),
            (
                "[2]",
                "invalid workers: expected a number from 1 to 1024 or 'auto'",
            ),
        ] {
            let errs = check(&format!("workers: {workers}\n{OK}"));
            assert_eq!(errs, vec![format!("t.yaml:1: {why} (at workers)")]);
        }
        assert!(check(&format!("workers: 1024\n{OK}")).is_empty());
    }

    #[test]
    fn problems_are_reported_in_the_order_of_the_file() {
        let yaml = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  echo: { url: \"http://127.0.0.1:9000/e\" }\nproxies:\n  Z:\n    path: /z\n    json_max_depth: 0\n    in: [ { call: echo } ]\n  A:\n    path: /a\n    json_max_depth: 2000\n    in: [ { call: echo } ]\n";
        let lines: Vec<String> = load_errors(yaml)
            .iter()
            .map(|e| e.split(": ").next().unwrap_or("").to_owned())
            .collect();
        assert_eq!(lines, ["t.yaml:8", "t.yaml:12"]);
    }

    #[test]
    fn an_access_log_that_cannot_be_opened_is_found_by_validate() {
        let dir = std::env::temp_dir();
        let with = |path: &str| {
            let config = parse(
                &format!("{OK}access_log: {{ path: \"{path}\" }}\n"),
                "t.yaml",
                |_| None,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let loaded = LoadedConfig {
                file: "t.yaml".into(),
                base_dir: dir.clone(),
                config,
            };
            validate(&loaded)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let folder = dir.display().to_string();
        assert_eq!(
            with(&folder),
            vec![format!(
                "t.yaml: access_log.path: {folder} is a directory, not a file"
            )]
        );
        let errs = with("no-such-folder-here/access.log");
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].contains("cannot be created: there is no folder"),
            "{errs:#?}"
        );
        assert!(with("access.log").is_empty());
        assert!(with("stdout").is_empty());
    }

    #[test]
    fn paths_and_methods_no_request_could_have_are_refused() {
        for (bad, why) in [
            ("/service/x?a=b", "a path has no '?'"),
            ("/a#top", "a path has no '#'"),
            ("/with space", "no spaces or control characters"),
            ("/tab\\there", "no spaces or control characters"),
        ] {
            let errs = check(&OK.replace("path: /p", &format!("path: \"{bad}\"")));
            assert_eq!(errs.len(), 1, "{bad}: {errs:#?}");
            assert!(
                errs[0].starts_with("t.yaml:7: proxies.P.path: ") && errs[0].contains(why),
                "{errs:#?}"
            );
        }
        let errs =
            load_errors(&OK.replace("path: /p", "path: /p\n    methods: [get, POST, PURGE]"));
        assert_eq!(
            errs,
            vec!["t.yaml:8: proxies.P.methods: method 'get': methods are case-sensitive (RFC 9110 §9.1) and clients send 'GET'".to_owned()]
        );
    }

    #[test]
    fn two_listeners_of_one_config_on_one_address_are_refused() {
        let yaml = "admin: { bind: \"127.0.0.1:9901\" }\nlisteners:\n  a: { bind: \"127.0.0.1:8280\" }\n  b: { bind: \"0.0.0.0:8280\" }\n  c: { bind: \"127.0.0.1:9901\" }\n  d: { bind: \"127.0.0.2:8281\" }\n  e: { bind: \"127.0.0.1:8281\" }\n  f: { bind: \"127.0.0.1:0\" }\n  g: { bind: \"127.0.0.1:0\" }\necho: { bind: \"127.0.0.1:8280\" }\necho_off: 1\n";
        let yaml = yaml.replace("echo_off: 1\n", "echoes:\n  off: { bind: \"127.0.0.1:8281\", enabled: false }\n  on: { bind: \"[::1]:8280\" }\n");
        let errs = check(&yaml);
        assert_eq!(
            errs,
            vec![
                "t.yaml:4: listeners.b.bind: 0.0.0.0:8280 overlaps listeners.a.bind (127.0.0.1:8280): each listener needs an address of its own".to_owned(),
                "t.yaml: admin.bind: 127.0.0.1:9901 overlaps listeners.c.bind (127.0.0.1:9901): each listener needs an address of its own".to_owned(),
                "t.yaml: echo.bind: 127.0.0.1:8280 overlaps listeners.a.bind (127.0.0.1:8280): each listener needs an address of its own".to_owned(),
            ]
        );
    }

    #[test]
    fn an_otlp_header_value_with_a_line_break_is_refused() {
        let yaml = format!(
            "{OK}tracing:\n  otlp:\n    endpoint: \"http://127.0.0.1:4318\"\n    headers: {{ authorization: \"Bearer a\\nb\", x-ok: \"fine\" }}\n"
        );
        let errs = check(&yaml);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].contains("tracing.otlp.headers.authorization: not a valid header value"),
            "{errs:#?}"
        );
        assert!(!errs[0].contains("Bearer"), "{errs:#?}");
    }

    fn endpoint(body: &str) -> String {
        format!("listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\nendpoints:\n  svc:\n{body}proxies:\n  P:\n    path: /p\n    in:\n      - call: svc\n")
    }

    #[test]
    fn endpoints_take_a_list_of_urls_with_weights_and_a_policy() {
        let yaml = endpoint(
            "    urls:\n      - \"http://127.0.0.1:9001/a\"\n      - { url: \"https://user:pw@example.com/b\", weight: 3 }\n    balance: weighted\n    failover: { on_status: [502, 503] }\n    retries: 2\n    retry_on_status: [503]\n    retry_budget: { ratio: 0.1, window: 5s }\n    replay_buffer: 128KiB\n    breaker: { failures: 3, suspend: 500ms, max_suspend: 10s }\n    max_connections: 10\n    queue: 5\n",
        );
        assert_eq!(check(&yaml), Vec::<String>::new());
        let config = parse(&yaml, "t.yaml", |_| None).expect("parse");
        let e = &config.endpoints["svc"];
        let urls = e.url_list();
        assert_eq!(urls.len(), 2);
        assert_eq!(urls[1].path, "urls[1].url");
        assert_eq!(urls[1].weight, 3);
        assert_eq!(urls[1].url.expose(), "https://user:pw@example.com/b");
        assert_eq!(urls[1].line, Some(7));
        // /config shows no credentials.
        let shown = serde_json::to_string(&config.endpoints).expect("json");
        assert!(
            shown.contains("https://<redacted>@example.com/b"),
            "{shown}"
        );
        assert!(!shown.contains("pw"), "{shown}");
    }

    #[test]
    fn endpoint_problems_are_reported_with_their_paths() {
        let yaml = endpoint(
            "    urls: [ \"http://127.0.0.1:1/a\", \"ftp://h/b\", { url: \"http://h/c\", weight: 0 } ]\n    retry_on_status: [42]\n    breaker: { failures: 0, suspend: 2s, max_suspend: 1s }\n    tls: { ca: missing-ca.pem }\n",
        );
        let errs = check(&yaml);
        let has = |needle: &str| errs.iter().any(|e| e.contains(needle));
        assert!(
            has("endpoints.svc.urls[1]: unsupported scheme 'ftp'"),
            "{errs:#?}"
        );
        assert!(has("endpoints.svc.urls[2].weight: weight 0"), "{errs:#?}");
        assert!(
            has("endpoints.svc.retry_on_status: invalid HTTP status 42"),
            "{errs:#?}"
        );
        assert!(has("endpoints.svc.breaker.failures"), "{errs:#?}");
        assert!(has("endpoints.svc.breaker.max_suspend"), "{errs:#?}");
        assert!(has("endpoints.svc.tls.ca: file not found"), "{errs:#?}");
        assert!(
            has("endpoints.svc.tls: 'tls' is set but no URL"),
            "{errs:#?}"
        );
        assert_eq!(errs.len(), 7, "{errs:#?}");
    }

    #[test]
    fn an_endpoint_needs_exactly_one_of_url_and_urls() {
        let none = check(&endpoint("    timeout: 1s\n"));
        assert_eq!(
            none,
            vec!["t.yaml:4: missing field `url` (at endpoints.svc.url)".to_owned()]
        );
        let both = check(&endpoint(
            "    url: \"http://h/a\"\n    urls: [ \"http://h/b\" ]\n",
        ));
        assert_eq!(both.len(), 1, "{both:#?}");
        assert!(both[0].contains("either 'url' or 'urls'"), "{both:#?}");
    }

    #[test]
    fn credentials_in_a_bad_url_are_not_shown_in_the_error() {
        let errs = check(&endpoint("    url: \"gopher://user:secret@h/a\"\n"));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(!errs[0].contains("secret"), "{errs:#?}");
        assert!(errs[0].contains("<redacted>"), "{errs:#?}");
    }
}
