//! The serde model: mirrors the YAML file one to one. Every field's doc comment is its user doc.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::units::{ByteSize, Duration};

/// A whole config file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Worker threads, one event loop each: a number, or `auto` (the cores this process may use).
    #[serde(default)]
    pub workers: Workers,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The admin listener (`/healthz`, `/readyz`, `/metrics`, `/config`, `POST /reload`).
    #[serde(default)]
    pub admin: AdminConfig,
    /// An embedded echo back end started with the engine (for examples and benchmarks).
    #[serde(default)]
    pub echo: Option<EchoConfig>,
    /// Shutdown behaviour.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Listeners by name.
    pub listeners: BTreeMap<String, ListenerConfig>,
    /// Back-end endpoints by name.
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// Namespace prefixes (prefix → URI) for every XPath in the file; a proxy may add its own.
    #[serde(default)]
    pub namespaces: BTreeMap<String, String>,
    /// Named step sequences, reusable with `- sequence: NAME`.
    #[serde(default)]
    pub sequences: BTreeMap<String, Vec<StepConfig>>,
    /// Proxy services by name.
    #[serde(default)]
    pub proxies: BTreeMap<String, ProxyConfig>,
}

/// The number of worker threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Workers {
    /// One per core available to the process.
    #[default]
    Auto,
    /// Exactly this many.
    Count(usize),
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(0) => Err(serde::de::Error::custom("workers must be at least 1")),
            Raw::N(n) => Ok(Workers::Count(n.min(1024) as usize)),
            Raw::S(s) if s == "auto" => Ok(Workers::Auto),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "invalid workers '{s}': expected a number or 'auto'"
            ))),
        }
    }
}

impl Serialize for Workers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Workers::Auto => s.serialize_str("auto"),
            Workers::Count(n) => s.serialize_u64(*n as u64),
        }
    }
}

/// Log output.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`, or a tracing filter like `busbar=debug`.
    /// `RUST_LOG` overrides it.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// `text` or `json`.
    #[serde(default)]
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: default_log_level(),
            format: LogFormat::Text,
        }
    }
}

fn default_log_level() -> String {
    "info".to_owned()
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The admin listener.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to listen on; keep it on loopback unless a firewall protects it.
    #[serde(default = "default_admin_bind")]
    pub bind: String,
    /// Set to false to run without an admin listener.
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: default_admin_bind(),
            enabled: true,
        }
    }
}

fn default_admin_bind() -> String {
    "127.0.0.1:9901".to_owned()
}

fn yes() -> bool {
    true
}

/// The embedded echo back end.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EchoConfig {
    /// Address to listen on.
    #[serde(default = "default_echo_bind")]
    pub bind: String,
    /// A fixed delay before each answer.
    #[serde(default)]
    pub delay: Option<Duration>,
}

fn default_echo_bind() -> String {
    "127.0.0.1:9000".to_owned()
}

/// Shutdown behaviour.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT (and after a reload,
    /// for the old config) before their connections are closed.
    #[serde(default = "default_drain")]
    pub drain_timeout: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            drain_timeout: default_drain(),
        }
    }
}

fn default_drain() -> Duration {
    Duration(std::time::Duration::from_secs(30))
}

/// A listener for client traffic.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Address to listen on, like `0.0.0.0:8280`.
    pub bind: Spanned<String>,
    /// TLS: when set, the listener speaks HTTPS.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Largest request head (request line and headers) accepted; larger gets 431.
    #[serde(default = "default_max_header")]
    pub max_header_size: ByteSize,
    /// How long a client may take to send a request head.
    #[serde(default = "default_header_timeout")]
    pub header_read_timeout: Duration,
    /// Keep client connections open between requests.
    #[serde(default = "yes")]
    pub keep_alive: bool,
}

fn default_max_header() -> ByteSize {
    ByteSize(64 * 1024)
}

fn default_header_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(30))
}

/// TLS settings of a listener.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, relative to the config file.
    pub cert: Spanned<String>,
    /// PEM file with the private key, relative to the config file.
    pub key: Spanned<String>,
}

/// A back-end endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// The back end's URL (`http://host:port/path`); the request goes to this path, with the
    /// client's query string appended.
    pub url: Spanned<String>,
    /// Time allowed to open a connection.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// Time allowed for the back end to start answering once the request is sent, and for
    /// each pause while its response body streams.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Idle keep-alive connections kept per worker thread.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// How long an idle pooled connection is kept; keep it below the back end's own
    /// keep-alive timeout.
    #[serde(default = "default_keep_alive")]
    pub keep_alive: Duration,
    /// Retries of a failed call (connect errors, or errors before any response byte on a
    /// request whose body can be sent again). None unless configured.
    #[serde(default)]
    pub retries: u32,
}

fn default_connect_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(5))
}

fn default_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(30))
}

fn default_pool_size() -> usize {
    1024
}

fn default_keep_alive() -> Duration {
    Duration(std::time::Duration::from_secs(60))
}

/// A proxy service.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The request path served, like `/service/DirectProxy` (query strings are ignored).
    pub path: Spanned<String>,
    /// HTTP methods accepted; empty means any.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Listeners serving this proxy; empty means all.
    #[serde(default)]
    pub listeners: Vec<Spanned<String>>,
    /// Largest body a step may buffer (pass-through bodies are never buffered); larger is 413.
    #[serde(default = "default_max_body")]
    pub max_body: ByteSize,
    /// How much of an XML body a streaming `route` checks: `read` (what the decision read;
    /// the rest streams on untouched and unparsed, the fastest) or `whole` (the rest is also
    /// checked for well-formedness as it streams, and a malformed tail aborts the forwarded
    /// request so the back end never receives it complete).
    #[serde(default)]
    pub xml_check: XmlCheck,
    /// Namespace prefixes for this proxy's XPath expressions, added to the global ones.
    #[serde(default)]
    pub namespaces: BTreeMap<String, String>,
    /// Steps run on the request.
    #[serde(default, rename = "in")]
    pub in_seq: Vec<StepConfig>,
    /// Steps run on the response.
    #[serde(default, rename = "out")]
    pub out_seq: Vec<StepConfig>,
    /// Steps run when a step fails; a `fault` or `respond` here decides the answer.
    #[serde(default)]
    pub on_error: Vec<StepConfig>,
}

fn default_max_body() -> ByteSize {
    ByteSize(10 * 1024 * 1024)
}

/// One step of a sequence. Written as a one-key map: `- call: echo`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StepConfig {
    /// Send the current request to an endpoint; the response becomes the current message.
    Call(Spanned<String>),
    /// Answer with a fault: a SOAP fault of the request's SOAP version, or a JSON problem.
    Fault(FaultConfig),
    /// Answer the client now with the current message (or with the given status and body).
    Respond(RespondConfig),
    /// Set a header on the current message.
    SetHeader(SetHeaderConfig),
    /// Remove a header from the current message.
    RemoveHeader(String),
    /// Write a log line.
    Log(LogStepConfig),
    /// Run a named sequence.
    Sequence(Spanned<String>),
    /// Content-based routing: the first case whose `when` holds runs its `then` steps;
    /// `otherwise` runs when none does.
    Route(Vec<RouteCase>),
    /// Transform the current message's body with an XSLT 1.0 stylesheet.
    Xslt(XsltConfig),
}

impl StepConfig {
    /// The step's name as written in YAML.
    pub fn kind(&self) -> &'static str {
        match self {
            StepConfig::Call(_) => "call",
            StepConfig::Fault(_) => "fault",
            StepConfig::Respond(_) => "respond",
            StepConfig::SetHeader(_) => "set_header",
            StepConfig::RemoveHeader(_) => "remove_header",
            StepConfig::Log(_) => "log",
            StepConfig::Sequence(_) => "sequence",
            StepConfig::Route(_) => "route",
            StepConfig::Xslt(_) => "xslt",
        }
    }
}

/// The `fault` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// HTTP status of the answer.
    #[serde(default = "default_fault_status")]
    pub status: u16,
    /// The faultstring (SOAP) or title (JSON problem).
    pub reason: String,
    /// `server` (the default) or `client`: the SOAP fault code.
    #[serde(default)]
    pub code: FaultCodeConfig,
}

fn default_fault_status() -> u16 {
    500
}

/// SOAP fault code class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultCodeConfig {
    /// `soapenv:Server` / `env:Receiver`.
    #[default]
    Server,
    /// `soapenv:Client` / `env:Sender`.
    Client,
}

/// The `respond` step.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RespondConfig {
    /// Status of the answer; default 200, or the current response's status.
    #[serde(default)]
    pub status: Option<u16>,
    /// A fixed body instead of the current message's body.
    #[serde(default)]
    pub body: Option<String>,
    /// Content-Type of the fixed body.
    #[serde(default)]
    pub content_type: Option<String>,
}

/// The `set_header` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SetHeaderConfig {
    /// Header name.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// The `log` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogStepConfig {
    /// The message.
    pub message: String,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    #[serde(default)]
    pub level: LogLevel,
}

/// A log level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Errors.
    Error,
    /// Warnings.
    Warn,
    /// Information (default).
    #[default]
    Info,
    /// Debugging detail.
    Debug,
    /// Everything.
    Trace,
}

/// One case of a `route` step: `{ when, then }`, or `{ otherwise }` (last).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteCase {
    /// The condition.
    #[serde(default)]
    pub when: Option<Condition>,
    /// Steps run when the condition holds.
    #[serde(default)]
    pub then: Option<Vec<StepConfig>>,
    /// Steps run when no case before holds.
    #[serde(default)]
    pub otherwise: Option<Vec<StepConfig>>,
}

/// A routing condition: what to look at (`header` or `xpath`) and the test (`equals`,
/// `matches` or `exists`; `exists: true` when none is given).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// An HTTP header of the current message (never reads the body).
    #[serde(default)]
    pub header: Option<Spanned<String>>,
    /// An XPath 1.0 expression over the current message's body. Forward-only paths are
    /// evaluated while the body streams and decide as early as possible; other expressions
    /// buffer the body (up to `max_body`) and use libxml2.
    #[serde(default)]
    pub xpath: Option<Spanned<String>>,
    /// True when the value (any selected node's string-value) equals this string.
    #[serde(default)]
    pub equals: Option<String>,
    /// True when the value matches this regular expression (unanchored).
    #[serde(default)]
    pub matches: Option<Spanned<String>>,
    /// True when the header is present / the XPath selects something (or is true).
    #[serde(default)]
    pub exists: Option<bool>,
}

/// The `xslt` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct XsltConfig {
    /// The stylesheet file, relative to the config file; compiled when the config is built
    /// and again on reload.
    pub stylesheet: Spanned<String>,
    /// Stylesheet parameters: a string, or `{ xpath: EXPR }` evaluated on the input document.
    #[serde(default)]
    pub params: BTreeMap<String, XsltParam>,
    /// What `document()`, `xsl:include` and `xsl:import` may read: `config_dir` (files under
    /// the config file's directory, the default) or `none`. Network access is always refused.
    #[serde(default)]
    pub document_access: DocumentAccessConfig,
}

/// A stylesheet parameter value.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum XsltParam {
    /// A literal string.
    String(String),
    /// An XPath expression evaluated by the processor on the input document.
    XPath {
        /// The expression.
        xpath: String,
    },
}

/// Files a stylesheet may read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentAccessConfig {
    /// Files under the config file's directory.
    #[default]
    ConfigDir,
    /// No file at all.
    None,
}

/// How much of an XML body a streaming route checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XmlCheck {
    /// What the routing decision read.
    #[default]
    Read,
    /// The whole body, as it streams.
    Whole,
}
