//! The serde model: mirrors the YAML file one to one. Every field's doc comment is its user doc.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::secret::{Secret, SecretUrl};
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
    /// The access log: one line per request. Absent: no access log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogConfig>,
    /// Distributed tracing: W3C trace context propagation (always on), sampling, and span
    /// export over OTLP.
    #[serde(default)]
    pub tracing: TracingConfig,
    /// The admin listener (`/healthz`, `/readyz`, `/metrics`, `/config`, `POST /reload`).
    #[serde(default)]
    pub admin: AdminConfig,
    /// An embedded echo back end started with the engine (for examples and benchmarks).
    #[serde(default)]
    pub echo: Option<EchoConfig>,
    /// Named embedded echo back ends, each on its own address and answering with the header
    /// `x-echo-name: NAME` (to see which instance a load balancer or a route picked).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub echoes: BTreeMap<String, EchoConfig>,
    /// Shutdown behaviour.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// The most bytes of request bodies held in memory at once, over every proxy and
    /// connection: the bodies steps read (a JSON or XPath route, `jq`, `xslt`, `sql`, a
    /// process service). A request whose body would take the total past it is answered 503
    /// with `Retry-After`. Bodies that stream through are not counted.
    #[serde(default = "default_max_buffered_bodies")]
    pub max_buffered_bodies: ByteSize,
    /// Listeners by name (`{}` only in a config of echo back ends alone).
    pub listeners: BTreeMap<String, ListenerConfig>,
    /// Back-end endpoints by name.
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// Databases by name, for the `sql` step: SQLite (embedded) or PostgreSQL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub databases: BTreeMap<String, DatabaseConfig>,
    /// Folders of WS-BPEL processes by name: each process's `provide` services are served as
    /// SOAP endpoints (docs/processes.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub processes: BTreeMap<String, ProcessConfig>,
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

/// The most worker threads a config may ask for.
pub const MAX_WORKERS: i64 = 1024;

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
            N(i64),
            S(String),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("invalid workers: expected a number from 1 to 1024 or 'auto'")
        })?;
        match raw {
            Raw::N(n @ 1..=MAX_WORKERS) => Ok(Workers::Count(n as usize)),
            Raw::N(n) => Err(serde::de::Error::custom(format!(
                "workers {n} is not from 1 to {MAX_WORKERS} (or 'auto')"
            ))),
            Raw::S(s) if s == "auto" => Ok(Workers::Auto),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "invalid workers '{s}': expected a number from 1 to {MAX_WORKERS} or 'auto'"
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
    /// `trace`, `debug`, `info`, `warn`, `error` or `off` (any case), or a comma list of them
    /// and `target=level` directives like `info,busbar_engine=debug`; anything else is an
    /// error. `RUST_LOG` overrides it (and is ignored, with a line saying so, when it is not
    /// such a filter).
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

/// The access log.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// `stdout`, or a file (relative paths are relative to the config file) opened for
    /// appending and created if missing. SIGUSR1 reopens it (for logrotate's `create` mode).
    #[serde(default = "default_access_log_path")]
    pub path: String,
    /// `json` (one object per line) or `common` (the Common Log Format, followed by the proxy,
    /// the durations and the trace id).
    #[serde(default)]
    pub format: AccessLogFormat,
    /// Lines held for the writer thread when the disk falls behind; past it lines are dropped
    /// (and counted in `busbar_access_log_lines_total{outcome="dropped"}`), so a slow disk never slows requests.
    #[serde(default = "default_access_log_buffer")]
    pub buffer: usize,
}

fn default_access_log_path() -> String {
    "stdout".to_owned()
}

fn default_access_log_buffer() -> usize {
    16384
}

/// Access log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// `host - - [time] "METHOD target HTTP/x" status bytes` then `proxy total backend
    /// bytes_in trace_id`.
    Common,
}

/// Distributed tracing.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// Propagate W3C trace context: continue a caller's `traceparent` and send one to back
    /// ends. `false` forwards the client's trace headers untouched and records no spans.
    #[serde(default = "yes")]
    pub propagate: bool,
    /// The share of new traces (requests without a `traceparent`) that are recorded, from 0
    /// to 1; a request with a `traceparent` follows its sampled flag. Spans are recorded only
    /// when `otlp` is set; propagation happens either way.
    #[serde(default = "default_sample")]
    pub sample: f64,
    /// The `service.name` resource attribute of exported spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Where spans are exported; absent: not exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpConfig>,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            propagate: true,
            sample: default_sample(),
            service_name: default_service_name(),
            otlp: None,
        }
    }
}

fn default_sample() -> f64 {
    1.0
}

fn default_service_name() -> String {
    "busbar".to_owned()
}

/// An OTLP span exporter.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The collector: `http://host:4318/v1/traces` for `http`, `http://host:4317` for `grpc`.
    pub endpoint: String,
    /// `http` (OTLP/HTTP, protobuf) or `grpc` (OTLP/gRPC).
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// Time allowed for one export; more than 0.
    #[serde(default = "default_otlp_timeout")]
    pub timeout: Duration,
    /// Finished spans held for export; past it spans are dropped and counted in
    /// `busbar_trace_spans_total{outcome="dropped"}`, so export never slows a request.
    #[serde(default = "default_otlp_queue")]
    pub queue: usize,
    /// Spans sent per export request.
    #[serde(default = "default_otlp_batch")]
    pub batch: usize,
    /// Headers sent with every export (credentials of a hosted collector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret<String>>,
}

fn default_otlp_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(10))
}

fn default_otlp_queue() -> usize {
    8192
}

fn default_otlp_batch() -> usize {
    512
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies.
    #[default]
    Http,
    /// OTLP/gRPC.
    Grpc,
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
    /// A bearer token every admin route except `/healthz` requires
    /// (`Authorization: Bearer TOKEN`; 401 without it). Unset, the admin API is open to
    /// whoever reaches its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret<String>>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: default_admin_bind(),
            enabled: true,
            token: None,
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
    /// Start this back end (default). `false` leaves it out, so that another process (a
    /// benchmark round's shared back end) can serve its address; an example switches with
    /// `enabled: ${BUSBAR_ECHO_EMBEDDED:-true}`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Address to listen on.
    #[serde(default = "default_echo_bind")]
    pub bind: String,
    /// A fixed delay before each answer.
    #[serde(default)]
    pub delay: Option<Duration>,
    /// The value of the `x-echo-name` header on every answer. Under `echoes` it defaults to
    /// the instance's key; the single `echo` sends no such header unless this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Answer every request with this JSON text instead of echoing (the integrator
    /// benchmarks' "static JSON after a delay"). Empty means echo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<String>,
    /// The same, from a file (relative to the config). Empty means echo, so an example can
    /// switch with `json_file: "${BUSBAR_ECHO_JSON:-}"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_file: Option<String>,
    /// Answer `GET /stock/{id}`, `/price/{id}` and `/reviews/{id}` with small JSON naming the
    /// id (docs/config.md gives the values); other requests are echoed.
    #[serde(default)]
    pub catalog: bool,
    /// Read the whole request before answering (some clients, Apache Synapse 2.1's among them,
    /// stop sending when the answer starts early); streamed back as it arrives otherwise.
    #[serde(default)]
    pub buffer: bool,
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
    /// Longest pause allowed while the client sends a request body (between two reads, and
    /// from `Expect: 100-continue` to the first byte). Past it the request is answered with 408
    /// and the connection closed; a back-end call carrying the body is abandoned.
    #[serde(default = "default_io_timeout")]
    pub client_body_timeout: Duration,
    /// Longest pause allowed while writing to the client (a client that stops reading its
    /// response). Past it the connection is closed and any back-end response feeding it is
    /// abandoned.
    #[serde(default = "default_io_timeout")]
    pub send_timeout: Duration,
    /// Share the port with other processes that also set it (`SO_REUSEPORT`), for a hand-over
    /// between two busbar versions. Off by default: a port another process listens on is a
    /// start-up error ("address already in use"), never a silent split of the traffic.
    #[serde(default)]
    pub reuse_port: bool,
}

fn default_io_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(60))
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

/// A back-end endpoint: one URL, or several with load balancing and failover, wrapped in
/// a policy (timeout, retry, failover, circuit breaker, connection limit). Its fields are
/// those of [`EndpointFields`]; one of `url` and `urls` is required.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct EndpointConfig(pub EndpointFields);

impl EndpointConfig {
    /// An endpoint to `url` with every other setting at its default: for a partner service
    /// known only by its WSDL address.
    pub fn for_url(url: &str) -> Result<EndpointConfig, String> {
        let quoted = serde_json::to_string(url).map_err(|e| e.to_string())?;
        serde_saphyr::from_str(&format!("url: {quoted}\n")).map_err(|e| e.to_string())
    }
}

impl std::ops::Deref for EndpointConfig {
    type Target = EndpointFields;
    fn deref(&self) -> &EndpointFields {
        &self.0
    }
}

impl<'de> Deserialize<'de> for EndpointConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = EndpointConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an endpoint: a mapping with `url` or `urls`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<EndpointConfig, A::Error> {
                let fields =
                    EndpointFields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                // Without either, the endpoint has nowhere to send: said (inside the mapping,
                // so with its line and path) the way serde says a required field is missing,
                // and recovered from like one.
                if fields.url.is_none() && fields.urls.is_empty() {
                    return Err(serde::de::Error::missing_field("url"));
                }
                Ok(EndpointConfig(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// The fields of an endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointFields {
    /// The back end's URL (`http://host:port/path` or `https://...`); the request goes to this
    /// path, with the client's query string appended. `user:password@` in the URL is sent as
    /// HTTP Basic authentication (when the request has no `Authorization`) and never shown by
    /// `/config`. Give either `url` or `urls`.
    #[serde(default)]
    pub url: Option<Spanned<SecretUrl>>,
    /// Several URLs of the same service: each a string, or `{ url, weight }`. Requests are
    /// spread over them by `balance`; `failover` moves a failed request to the next one.
    #[serde(default)]
    pub urls: Vec<Spanned<UrlEntry>>,
    /// How requests are spread over `urls`: `round_robin` (the default), `weighted` (in
    /// proportion to each URL's `weight`) or `least_pending` (the URL with the fewest
    /// requests in progress).
    #[serde(default)]
    pub balance: Balance,
    /// Failover to the next URL: `true` (the default) on connection failures (nothing was
    /// sent, so this is always safe), `false` never, or `{ on_status: [502, 503, 504] }` also
    /// when a back end answers with one of these statuses (and the request can be sent again).
    #[serde(default)]
    pub failover: Failover,
    /// Time allowed to open a connection (and, for `https`, to finish the TLS handshake).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// Time allowed for the back end to start answering once the request is sent, and for
    /// each pause while its response body streams.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// The most one attempt may take, from when it starts sending the request to the last byte
    /// of the answer's body, however steadily the back end answers. Past it the attempt fails
    /// as a `timeout` does: before the response head, with 504 (and retried or failed over as
    /// a timeout is); while the body streams, the body is cut. Off unless set.
    #[serde(default)]
    pub deadline: Option<Spanned<Duration>>,
    /// Idle keep-alive connections kept per worker thread and URL.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// How long an idle pooled connection is kept; keep it below the back end's own
    /// keep-alive timeout. A back end that states its timeout (`Keep-Alive: timeout=N`) has
    /// its connections closed a second before it.
    #[serde(default = "default_keep_alive")]
    pub keep_alive: Duration,
    /// Retries of a failed call: at most this many more attempts (failovers to untried URLs
    /// come on top). A call is retried when nothing was sent, or when its method is idempotent
    /// (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) and its body can be sent again, or when the
    /// back end answered a status of `retry_on_status`. None unless configured.
    #[serde(default)]
    pub retries: u32,
    /// Response statuses that are retried (the back end said it did not process the request,
    /// like 503), when `retries` allows and the body can be sent again.
    #[serde(default)]
    pub retry_on_status: Vec<u16>,
    /// Caps retries to a share of the requests, so a failing back end does not get a storm of
    /// retries on top of its load.
    #[serde(default)]
    pub retry_budget: RetryBudgetConfig,
    /// How much of a streamed request body is kept as it goes out, so a retry or failover can
    /// send it again. A request whose body is larger is not retried once its body started to
    /// go out (the error says so). Bodies already in memory are always kept.
    #[serde(default = "default_replay_buffer")]
    pub replay_buffer: ByteSize,
    /// Circuit breaker per URL: after repeated failures the URL is suspended and skipped;
    /// when every URL is suspended, calls fail at once with 503.
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
    /// Requests in progress at once to one URL (each holds its own connection); more wait in
    /// the queue. Unlimited when not set.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Requests that may wait for one of `max_connections` (at most `connect_timeout` each);
    /// when the queue is full a call fails at once with 503.
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// TLS settings for `https` URLs. Without them the system's trusted roots are used and the
    /// server name is the URL's host.
    #[serde(default)]
    pub tls: Option<EndpointTlsConfig>,
}

impl EndpointFields {
    /// Every URL in order: its config path (`url`, `urls[1]`, `urls[2].url`), the URL, the
    /// line it is on when known, and its weight.
    pub fn url_list(&self) -> Vec<UrlRef<'_>> {
        fn line<T>(s: &Spanned<T>) -> Option<u64> {
            let line = s.referenced.line();
            (line > 0).then_some(line)
        }
        let mut out = Vec::new();
        if let Some(u) = &self.url {
            out.push(UrlRef {
                path: "url".to_owned(),
                url: &u.value,
                line: line(u),
                weight: 1,
            });
        }
        for (i, entry) in self.urls.iter().enumerate() {
            let (path, url, weight) = match &entry.value {
                UrlEntry::Plain(u) => (format!("urls[{i}]"), u, 1),
                UrlEntry::Weighted(w) => (format!("urls[{i}].url"), &w.url, w.weight),
            };
            out.push(UrlRef {
                path,
                url,
                line: line(entry),
                weight,
            });
        }
        out
    }
}

/// One URL of an endpoint, as [`EndpointFields::url_list`] lists it.
#[derive(Debug, Clone)]
pub struct UrlRef<'a> {
    /// Config path below the endpoint, like `urls[1]`.
    pub path: String,
    /// The URL.
    pub url: &'a SecretUrl,
    /// Its line in the file, when known.
    pub line: Option<u64>,
    /// Its weight.
    pub weight: u32,
}

/// One entry of `urls`: a URL, or a URL with a weight.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum UrlEntry {
    /// Just the URL (weight 1).
    Plain(SecretUrl),
    /// `{ url, weight }`.
    Weighted(WeightedUrl),
}

/// A URL with its share of the requests under `balance: weighted`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedUrl {
    /// The URL.
    pub url: SecretUrl,
    /// Its relative share of the requests (1 to 1000).
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// How requests are spread over an endpoint's URLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Each URL in turn.
    #[default]
    RoundRobin,
    /// In proportion to the URLs' weights, interleaved.
    Weighted,
    /// The URL with the fewest requests in progress.
    LeastPending,
}

/// When a failed request moves on to the next URL.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Failover {
    /// `true`: on connection failures; `false`: never.
    Enabled(bool),
    /// On connection failures, and on these response statuses.
    OnStatus(FailoverConfig),
}

impl Default for Failover {
    fn default() -> Self {
        Failover::Enabled(true)
    }
}

/// Failover settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverConfig {
    /// Response statuses that also move the request to the next URL (like 502, 503, 504).
    pub on_status: Vec<u16>,
}

/// The retry budget: retries allowed in a sliding window.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBudgetConfig {
    /// Retries allowed as a share of the requests in the window (0.2: one retry per five
    /// requests).
    #[serde(default = "default_budget_ratio")]
    pub ratio: f64,
    /// Retries always allowed per window on top of the ratio, so a quiet endpoint can retry.
    #[serde(default = "default_budget_min")]
    pub min_retries: u32,
    /// The sliding window.
    #[serde(default = "default_budget_window")]
    pub window: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        Self {
            ratio: default_budget_ratio(),
            min_retries: default_budget_min(),
            window: default_budget_window(),
        }
    }
}

fn default_budget_ratio() -> f64 {
    0.2
}

fn default_budget_min() -> u32 {
    10
}

fn default_budget_window() -> Duration {
    Duration(std::time::Duration::from_secs(10))
}

fn default_replay_buffer() -> ByteSize {
    ByteSize(64 * 1024)
}

fn default_queue() -> usize {
    1024
}

/// The circuit breaker of each URL of an endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures (connection errors, timeouts, resets, `on_status` answers) that
    /// open the breaker.
    #[serde(default = "default_breaker_failures")]
    pub failures: u32,
    /// Also open when this share of the calls in `window` failed (0.5: half), once at least
    /// `min_calls` were made. Off when not set.
    #[serde(default)]
    pub failure_ratio: Option<f64>,
    /// The window of `failure_ratio`.
    #[serde(default = "default_budget_window")]
    pub window: Duration,
    /// Calls needed in `window` before `failure_ratio` is considered.
    #[serde(default = "default_min_calls")]
    pub min_calls: u32,
    /// How long the URL is suspended when the breaker opens; then one probe call is let
    /// through (half-open). A failed probe suspends it again for twice as long, up to
    /// `max_suspend`; a successful probe closes the breaker.
    #[serde(default = "default_suspend")]
    pub suspend: Duration,
    /// The longest suspension.
    #[serde(default = "default_max_suspend")]
    pub max_suspend: Duration,
    /// Response statuses counted as failures (like 502, 503, 504); none by default.
    #[serde(default)]
    pub on_status: Vec<u16>,
}

fn default_breaker_failures() -> u32 {
    5
}

fn default_min_calls() -> u32 {
    20
}

fn default_suspend() -> Duration {
    Duration(std::time::Duration::from_secs(1))
}

fn default_max_suspend() -> Duration {
    Duration(std::time::Duration::from_secs(60))
}

/// TLS settings of an endpoint (for its `https` URLs).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointTlsConfig {
    /// PEM file of the CA certificates the back end's certificate must chain to, instead of
    /// the system's trusted roots.
    #[serde(default)]
    pub ca: Option<Spanned<String>>,
    /// PEM certificate chain presented to the back end (mutual TLS); needs `key`.
    #[serde(default)]
    pub cert: Option<Spanned<String>>,
    /// PEM private key of `cert`.
    #[serde(default)]
    pub key: Option<Spanned<String>>,
    /// The name sent in SNI and checked against the back end's certificate, instead of the
    /// URL's host.
    #[serde(default)]
    pub server_name: Option<Spanned<String>>,
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

/// Below the idle close of busbar's own listeners (`header_read_timeout`, 30 s) and of common
/// servers (Tomcat 20 s, Jetty 30 s, nginx 75 s); servers that close sooner (Node.js and
/// Apache httpd, 5 s) say so in `Keep-Alive`, which the pool follows.
fn default_keep_alive() -> Duration {
    Duration(std::time::Duration::from_secs(15))
}

/// A proxy service.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The request path served (query strings are ignored): an exact path like
    /// `/service/DirectProxy`, a pattern with parameters like `/api/product/{id}` (each matches
    /// one non-empty segment, percent-decoded, and steps read it as a path parameter), or a
    /// prefix like `/api/orders/*` (`/api/orders/` and everything below it, not `/api/orders`).
    /// The most specific pattern wins: compared segment by segment from the left, a literal
    /// beats a parameter and a parameter beats the `*` of a prefix.
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
    /// How much of a JSON body a streaming `route` checks: `read` (what the decision read,
    /// strictly; the rest streams on unparsed) or `whole` (the rest is checked as it streams,
    /// duplicate member names included, and a bad tail aborts the forwarded request).
    #[serde(default)]
    pub json_check: XmlCheck,
    /// Deepest nesting of JSON objects and arrays a step accepts; deeper is 400.
    #[serde(default = "default_json_depth")]
    pub json_max_depth: usize,
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

fn default_json_depth() -> usize {
    64
}

fn default_max_buffered_bodies() -> ByteSize {
    ByteSize(1 << 30)
}

fn default_max_body() -> ByteSize {
    ByteSize(10 * 1024 * 1024)
}

/// One step of a sequence. Written as a one-key map: `- call: echo`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StepConfig {
    /// Send the current request to an endpoint; the response becomes the current message.
    /// `- call: NAME`, or `- call: { endpoint: NAME, method: GET, path: "/stock/{id}", body: none }`.
    Call(Spanned<CallConfig>),
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
    /// Check a WS-Security request (decrypt, verify the signature and its coverage, check
    /// trust and freshness) and forward it without its `wsse:Security` header.
    WsseVerify(Box<WsseVerifyConfig>),
    /// Secure the current message (usually the response): timestamp, sign, encrypt the body.
    WsseSecure(Box<WsseSecureConfig>),
    /// Replace the JSON body with what a JSONPath selects.
    JsonSelect(JsonSelectConfig),
    /// Transform the JSON body with a jq program.
    Jq(Spanned<JqConfig>),
    /// Run branches (each a step list, typically one `call`) in parallel on copies of the
    /// request and answer with their JSON results aggregated.
    ScatterGather(Box<ScatterGatherConfig>),
    /// Turn the JSON body into XML (optionally a SOAP envelope): docs/json-xml.md.
    JsonToXml(JsonToXmlConfig),
    /// Turn the XML body (optionally a SOAP envelope's Body) into JSON: docs/json-xml.md.
    XmlToJson(XmlToJsonConfig),
    /// Run SQL on a database with values bound from the request; the result (JSON) is the
    /// response: docs/databases.md.
    Sql(Box<Spanned<SqlConfig>>),
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
            StepConfig::WsseVerify(_) => "wsse_verify",
            StepConfig::WsseSecure(_) => "wsse_secure",
            StepConfig::JsonSelect(_) => "json_select",
            StepConfig::Jq(_) => "jq",
            StepConfig::ScatterGather(_) => "scatter_gather",
            StepConfig::JsonToXml(_) => "json_to_xml",
            StepConfig::XmlToJson(_) => "xml_to_json",
            StepConfig::Sql(_) => "sql",
        }
    }

    /// The step lists nested in this step, each with its path below the step's own
    /// (`[0].then`, `[1].otherwise` for a `route`). The one place that knows how steps nest:
    /// validation, the sequence-cycle check and the engine's builder all walk it.
    pub fn children(&self) -> Vec<(String, &[StepConfig])> {
        match self {
            StepConfig::Route(cases) => cases
                .iter()
                .enumerate()
                .flat_map(|(j, case)| {
                    let then = case.then.as_deref().map(|s| (format!("[{j}].then"), s));
                    let otherwise = case
                        .otherwise
                        .as_deref()
                        .map(|s| (format!("[{j}].otherwise"), s));
                    then.into_iter().chain(otherwise)
                })
                .collect(),
            StepConfig::ScatterGather(sg) => sg
                .branches
                .iter()
                .enumerate()
                .map(|(i, b)| (format!(".branches[{i}].steps"), b.steps.as_slice()))
                .collect(),
            StepConfig::Call(_)
            | StepConfig::Fault(_)
            | StepConfig::Respond(_)
            | StepConfig::SetHeader(_)
            | StepConfig::RemoveHeader(_)
            | StepConfig::Log(_)
            | StepConfig::Sequence(_)
            | StepConfig::Xslt(_)
            | StepConfig::WsseVerify(_)
            | StepConfig::WsseSecure(_)
            | StepConfig::JsonSelect(_)
            | StepConfig::Jq(_)
            | StepConfig::JsonToXml(_)
            | StepConfig::XmlToJson(_)
            | StepConfig::Sql(_) => Vec::new(),
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
    /// Status of the answer (200-599; a 1xx is not an answer); default 200, or the current
    /// response's status.
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
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetHeaderConfig {
    /// Header name.
    pub name: String,
    /// Header value. The admin's `/config` shows it as `<redacted>` when the header carries
    /// credentials ([`SetHeaderConfig::is_sensitive`]).
    pub value: String,
}

impl SetHeaderConfig {
    /// True when the header carries credentials ([`crate::secret::names_a_credential`]:
    /// `authorization`, `cookie`, `x-api-key`, `x-auth`, …).
    pub fn is_sensitive(&self) -> bool {
        crate::secret::names_a_credential(&self.name)
    }
}

impl Serialize for SetHeaderConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("SetHeaderConfig", 2)?;
        st.serialize_field("name", &self.name)?;
        if self.is_sensitive() {
            st.serialize_field("value", crate::secret::REDACTED)?;
        } else {
            st.serialize_field("value", &self.value)?;
        }
        st.end()
    }
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
    /// An RFC 9535 JSONPath over the current message's JSON body; the test applies to the
    /// first node it selects. Paths of member names and indexes only (`$.a.b[0]`) decide
    /// while the body streams; others (filters, `..`, wildcards) read the whole body.
    #[serde(default)]
    pub json: Option<Spanned<String>>,
    /// JSON only: true when the first node is a number equal to this one (`42.80` equals
    /// 42.8; the string `"42.8"` does not).
    #[serde(default)]
    pub eq: Option<f64>,
    /// JSON only: a number different from this one.
    #[serde(default)]
    pub ne: Option<f64>,
    /// JSON only: a number below this one.
    #[serde(default)]
    pub lt: Option<f64>,
    /// JSON only: a number at most this one.
    #[serde(default)]
    pub le: Option<f64>,
    /// JSON only: a number above this one.
    #[serde(default)]
    pub gt: Option<f64>,
    /// JSON only: a number at least this one.
    #[serde(default)]
    pub ge: Option<f64>,
    /// JSON only: when the path selects nothing, the request fails with 400 naming the path
    /// (instead of the case not holding).
    #[serde(default)]
    pub required: bool,
}

/// The `json_to_xml` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JsonToXmlConfig {
    /// The root element's name; without it the JSON must be an object of one member, whose
    /// name is the root's.
    #[serde(default)]
    pub root: Option<String>,
    /// The default namespace of the elements (on the root).
    #[serde(default)]
    pub namespace: Option<String>,
    /// `"1.1"` or `"1.2"`: wrap the document in a SOAP envelope's Body.
    #[serde(default)]
    pub soap: Option<SoapWrap>,
    /// The element name of a top-level array's items.
    #[serde(default = "default_item")]
    pub item: String,
}

fn default_item() -> String {
    "item".to_owned()
}

/// A SOAP version to wrap in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum SoapWrap {
    /// SOAP 1.1 (`text/xml`).
    #[serde(rename = "1.1")]
    V11,
    /// SOAP 1.2 (`application/soap+xml`).
    #[serde(rename = "1.2")]
    V12,
}

/// The `xml_to_json` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct XmlToJsonConfig {
    /// `unwrap`: the document is a SOAP envelope (1.1 or 1.2); its Body's first element is
    /// converted.
    #[serde(default)]
    pub soap: Option<SoapUnwrap>,
    /// Element names always rendered as arrays, even when they occur once.
    #[serde(default)]
    pub arrays: Vec<String>,
    /// `drop` (the default): the JSON is the root element's content; `keep`: an object with
    /// the root's name as its one member.
    #[serde(default)]
    pub root: RootMode,
    /// `infer` (the default): texts that are JSON numbers, `true` or `false` become them;
    /// `string`: every text stays a string.
    #[serde(default)]
    pub types: JsonXmlTypes,
}

/// What to do with a SOAP envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoapUnwrap {
    /// Take the Body's first element.
    Unwrap,
}

/// Whether the root element's name is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootMode {
    /// The JSON is the root's content.
    #[default]
    Drop,
    /// `{"root": content}`.
    Keep,
}

/// How element texts become JSON values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonXmlTypes {
    /// Numbers and booleans where the text is one.
    #[default]
    Infer,
    /// Strings only.
    String,
}

/// The `call` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum CallConfig {
    /// The endpoint's name: the request goes as it is.
    Name(String),
    /// The endpoint and how to shape the request.
    Shaped(CallShape),
}

impl CallConfig {
    /// The endpoint's name.
    pub fn endpoint(&self) -> &str {
        match self {
            CallConfig::Name(n) => n,
            CallConfig::Shaped(s) => &s.endpoint,
        }
    }
}

/// A `call` that shapes the request.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CallShape {
    /// The endpoint's name.
    pub endpoint: String,
    /// The method sent instead of the request's.
    #[serde(default)]
    pub method: Option<String>,
    /// A path appended to the endpoint URL's path (`http://h/` + `/stock/{id}` →
    /// `/stock/42`); `{name}` is the route's path parameter `name`, percent-encoded as one
    /// segment.
    #[serde(default)]
    pub path: Option<String>,
    /// `keep` (the default) sends the request's body; `none` sends no body.
    #[serde(default)]
    pub body: CallBody,
}

/// What body a shaped `call` sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallBody {
    /// The current request's body.
    #[default]
    Keep,
    /// None (and no Content-Type).
    None,
}

/// The `scatter_gather` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScatterGatherConfig {
    /// The branches, run in parallel; their order is the aggregate's order.
    pub branches: Vec<BranchConfig>,
    /// `object` (`{"NAME": result, …}`), `array` (results in branch order), or
    /// `{ jq: PROGRAM }`: the program runs on the object and its one output is the answer.
    #[serde(default)]
    pub aggregate: AggregateConfig,
    /// Time allowed for the whole step; past it, 504 naming the branches still running.
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Time allowed for each branch; a branch over it has failed.
    #[serde(default)]
    pub branch_timeout: Option<Duration>,
    /// `fail` (a failed branch answers 502 naming it and cancels the others) or `partial`
    /// (the failed branch's place holds an error object and `x-busbar-partial` names it).
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// One branch of a `scatter_gather`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BranchConfig {
    /// Its name: the key of its result in an `object` aggregate.
    pub name: String,
    /// Its steps, run on a copy of the request; the response they end with is its result.
    pub steps: Vec<StepConfig>,
}

/// How branch results are combined, as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AggregateConfig {
    /// `object` or `array`.
    Kind(Aggregate),
    /// A jq program over the `object` aggregate.
    Jq {
        /// The program (`$params` holds the path parameters).
        jq: String,
    },
}

impl Default for AggregateConfig {
    fn default() -> Self {
        AggregateConfig::Kind(Aggregate::Object)
    }
}

/// How branch results are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// A JSON object keyed by branch name.
    #[default]
    Object,
    /// A JSON array in branch order.
    Array,
}

/// What a failed branch does to a `scatter_gather`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Answer 502 naming the branch; cancel the others.
    #[default]
    Fail,
    /// Answer with what the others gave.
    Partial,
}

/// The `jq` step: `- jq: 'PROGRAM'`, `- jq: { program: 'PROGRAM' }` or
/// `- jq: { file: mappings/x.jq }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum JqConfig {
    /// The program inline.
    Inline(Spanned<String>),
    /// The program inline or in a file.
    Full(JqSource),
}

/// Where a jq program is.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JqSource {
    /// The program.
    #[serde(default)]
    pub program: Option<Spanned<String>>,
    /// A file holding the program, relative to the config file; read when the config is
    /// built and again on reload.
    #[serde(default)]
    pub file: Option<Spanned<String>>,
}

/// The `json_select` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSelectConfig {
    /// An RFC 9535 JSONPath over the current message's JSON body.
    pub path: Spanned<String>,
    /// `false` (the default): the new body is the JSON array of every selected node, in the
    /// RFC's order (`[]` when none). `true`: the first node itself, and nothing selected is a
    /// 400 (for a request) naming the path.
    #[serde(default)]
    pub first: bool,
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
    pub params: BTreeMap<String, Spanned<XsltParam>>,
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

/// The `wsse_verify` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseVerifyConfig {
    /// What the request must carry: any of `timestamp`, `signature`, `encryption`,
    /// `username_token`. What is present is always checked, required or not.
    pub require: Vec<WsseAction>,
    /// Who may sign: certificates must chain to `ca`.
    #[serde(default)]
    pub trust: Option<WsseTrustConfig>,
    /// The key that decrypts requests (the service's own); needed for `encryption`.
    #[serde(default)]
    pub decrypt_key: Option<KeySourceConfig>,
    /// Freshness of `wsu:Timestamp` (and of UsernameToken `Created`).
    #[serde(default)]
    pub timestamp: WsseTimestampConfig,
    /// Rejects a message seen before (same `Created` and signature, or same UsernameToken
    /// nonce) within its lifetime. One cache serves every `wsse_verify` of the config that
    /// enables it, so a message accepted by one proxy is a replay for all of them (they may
    /// forward to the same back end); it holds the largest `size` they ask for, and is kept
    /// across reloads of the same config file.
    #[serde(default)]
    pub replay_cache: ReplayCacheConfig,
    /// Remembers unwrapped session keys by their encrypted form, so a repeated EncryptedKey
    /// costs no RSA operation. Off by default.
    #[serde(default = "CacheConfig::off")]
    pub session_key_cache: CacheConfig,
    /// `modern` (RSA-OAEP, RSA-SHA256, SHA-256 digests) or `legacy` (also RSA-1.5 key
    /// transport, RSA-SHA1 and SHA-1 digests).
    #[serde(default)]
    pub algorithms: WsseAlgorithms,
    /// Remove the `wsse:Security` header before forwarding (other headers stay).
    #[serde(default = "default_true")]
    pub remove_header: bool,
    /// UsernameToken users: name → password (a secret: `/config` never shows it).
    #[serde(default)]
    pub users: BTreeMap<String, Secret<String>>,
    /// Deepest element nesting accepted.
    #[serde(default = "default_max_depth")]
    pub max_depth: usize,
    /// Most references a signature's SignedInfo may hold (1 to 1024). A message signs its
    /// Body, its Timestamp and perhaps a token and a few headers; every reference costs a
    /// canonicalization and a digest, so a signature with more is refused
    /// (`wsse:InvalidSecurity`) before any is computed, as is one that references the same
    /// element twice.
    #[serde(default = "default_max_references")]
    pub max_references: usize,
}

fn default_max_references() -> usize {
    16
}

fn default_true() -> bool {
    true
}

fn default_max_depth() -> usize {
    64
}

/// A WS-Security action a request must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsseAction {
    /// A `wsu:Timestamp`, signed when a signature is present.
    Timestamp,
    /// An XML signature covering the SOAP Body (and the timestamp when there is one).
    Signature,
    /// The Body's content encrypted for `decrypt_key`.
    Encryption,
    /// A `wsse:UsernameToken` of a configured user.
    #[serde(alias = "usernametoken")]
    UsernameToken,
}

/// Trusted signers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseTrustConfig {
    /// PEM file of trust anchors (CA certificates).
    pub ca: Spanned<String>,
    /// Who may sign, by certificate subject. A DN, as `"CN=client"` or
    /// `"CN=client, O=busbar test"` (RFC 4514 syntax, RDNs in any order): for every attribute
    /// type it names, the certificate's values of that type must be exactly the ones given
    /// (compared ignoring case and extra white space); types it does not name are not looked
    /// at. So `CN=client` accepts `CN=client,O=busbar test` and refuses `CN=client2`,
    /// `CN=client+CN=mallory` and `O=CN=client,CN=mallory`. Or `{ pattern: REGEX }`: a
    /// regular expression that must match the whole subject written as RFC 4514 does
    /// (`CN=client,O=busbar test`: last RDN first, no space after commas), anchored at both
    /// ends even when written without `^` and `$`.
    #[serde(default)]
    pub subject: Option<WsseSubjectConfig>,
    /// PEM file of signer certificates that requests may refer to by key identifier or
    /// issuer and serial instead of carrying them; each must itself chain to `ca`.
    #[serde(default)]
    pub certs: Option<Spanned<String>>,
}

/// A signer subject rule: a DN, or `{ pattern: REGEX }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum WsseSubjectConfig {
    /// The attributes the subject must have (see `subject`).
    Dn(Spanned<String>),
    /// A regular expression over the whole subject.
    Pattern(WsseSubjectPattern),
}

/// `{ pattern: REGEX }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseSubjectPattern {
    /// The expression; anchored at both ends.
    pub pattern: Spanned<String>,
}

/// A private key with its certificate: a PKCS#12 file (`pkcs12` + `password`) or PEM files
/// (`key` + `cert`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeySourceConfig {
    /// PKCS#12 file.
    #[serde(default)]
    pub pkcs12: Option<Spanned<String>>,
    /// Its password (a secret: `/config` never shows it).
    #[serde(default)]
    pub password: Option<Secret<String>>,
    /// PEM private key (PKCS#8 or PKCS#1).
    #[serde(default)]
    pub key: Option<Spanned<String>>,
    /// PEM certificate of `key`.
    #[serde(default)]
    pub cert: Option<Spanned<String>>,
}

/// Timestamp freshness rules.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseTimestampConfig {
    /// Clock difference tolerated between sender and us.
    #[serde(default = "five_minutes")]
    pub max_skew: Duration,
    /// Oldest `Created` accepted.
    #[serde(default = "five_minutes")]
    pub max_age: Duration,
    /// Refuse timestamps without `Expires`.
    #[serde(default = "default_true")]
    pub require_expires: bool,
}

impl Default for WsseTimestampConfig {
    fn default() -> Self {
        Self {
            max_skew: five_minutes(),
            max_age: five_minutes(),
            require_expires: true,
        }
    }
}

fn five_minutes() -> Duration {
    Duration(std::time::Duration::from_secs(300))
}

/// A bounded cache that can be switched off.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// On or off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Entries kept at most.
    #[serde(default = "default_cache_size")]
    pub size: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            size: default_cache_size(),
        }
    }
}

impl CacheConfig {
    fn off() -> Self {
        Self {
            enabled: false,
            size: default_cache_size(),
        }
    }
}

fn default_cache_size() -> usize {
    100_000
}

/// The replay cache: [`CacheConfig`] with room for a million messages, what a message is
/// remembered for (`max_age` + `max_skew`, up to `max_age` + 2 × `max_skew` from a client
/// clock ahead: 10 to 15 minutes by default) comes to at 1,100 to 1,600 messages a second. An
/// entry takes about 75 bytes (75 MB measured for a full cache of a million).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayCacheConfig {
    /// On or off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Entries kept at most.
    #[serde(default = "default_replay_cache_size")]
    pub size: usize,
}

impl Default for ReplayCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            size: default_replay_cache_size(),
        }
    }
}

fn default_replay_cache_size() -> usize {
    1_000_000
}

/// Algorithm profile accepted by `wsse_verify`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsseAlgorithms {
    /// RSA-OAEP, RSA-SHA256, SHA-256 digests, AES-CBC/GCM.
    #[default]
    Modern,
    /// Also RSA-1.5 key transport, RSA-SHA1 and SHA-1 digests.
    Legacy,
}

/// The `wsse_secure` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseSecureConfig {
    /// Add a `wsu:Timestamp` (signed when `sign` is set).
    #[serde(default)]
    pub timestamp: Option<WsseTtlConfig>,
    /// Sign the Body (and the timestamp) with the service's key.
    #[serde(default)]
    pub sign: Option<WsseSignConfig>,
    /// Encrypt the Body's content for a recipient.
    #[serde(default)]
    pub encrypt: Option<WsseEncryptConfig>,
}

/// Timestamp lifetime.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseTtlConfig {
    /// `Expires` is `Created` plus this.
    #[serde(default = "five_minutes")]
    pub ttl: Duration,
}

/// Signing settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseSignConfig {
    /// The signing key: a PKCS#12 file (with `password`), or a PEM key (with `cert`).
    pub key: Spanned<String>,
    /// Password of a PKCS#12 `key` (a secret: `/config` never shows it).
    #[serde(default)]
    pub password: Option<Secret<String>>,
    /// PEM certificate of a PEM `key`.
    #[serde(default)]
    pub cert: Option<Spanned<String>>,
    /// `sha256` (RSA-SHA256, SHA-256 digests) or `sha1` (RSA-SHA1, SHA-1 digests; legacy).
    #[serde(default)]
    pub digest: WsseDigest,
    /// How the signature names its certificate.
    #[serde(default)]
    pub key_reference: WsseKeyReference,
}

/// Digest family of a signature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsseDigest {
    /// SHA-1 (legacy).
    Sha1,
    /// SHA-256.
    #[default]
    Sha256,
}

/// A reference to a certificate from a signature or an encrypted key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsseKeyReference {
    /// The certificate travels in a `wsse:BinarySecurityToken`.
    #[default]
    Bst,
    /// Its X.509 SubjectKeyIdentifier.
    Ski,
    /// Its issuer and serial number.
    IssuerSerial,
    /// Its SHA-1 thumbprint.
    Thumbprint,
}

/// Encryption settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WsseEncryptConfig {
    /// The recipient: `request_signer` (the certificate that signed the request) or
    /// `{ cert: FILE }`.
    #[serde(rename = "for")]
    pub recipient: WsseRecipient,
    /// Data cipher: `aes128-cbc`, `aes256-cbc`, `aes128-gcm` or `aes256-gcm`.
    #[serde(default)]
    pub data: WsseCipher,
    /// Key transport: `rsa-oaep` or `rsa-1_5` (legacy).
    #[serde(default)]
    pub key_transport: WsseKeyTransport,
    /// How the encrypted key names the recipient's certificate.
    #[serde(default = "default_ski")]
    pub key_reference: WsseKeyReference,
}

fn default_ski() -> WsseKeyReference {
    WsseKeyReference::Ski
}

/// Who a response is encrypted for.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum WsseRecipient {
    /// `request_signer`.
    Named(WsseNamedRecipient),
    /// A certificate file.
    Cert {
        /// PEM certificate file.
        cert: Spanned<String>,
    },
}

/// Recipients named by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsseNamedRecipient {
    /// The certificate that signed the request, as `wsse_verify` checked it.
    RequestSigner,
}

/// Data ciphers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum WsseCipher {
    /// AES-128-CBC.
    #[serde(rename = "aes128-cbc")]
    Aes128Cbc,
    /// AES-256-CBC.
    #[serde(rename = "aes256-cbc")]
    Aes256Cbc,
    /// AES-128-GCM.
    #[serde(rename = "aes128-gcm")]
    Aes128Gcm,
    /// AES-256-GCM.
    #[default]
    #[serde(rename = "aes256-gcm")]
    Aes256Gcm,
}

/// Key transports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum WsseKeyTransport {
    /// RSA-OAEP (MGF1 with SHA-1).
    #[default]
    #[serde(rename = "rsa-oaep")]
    RsaOaep,
    /// RSA PKCS#1 v1.5 (legacy).
    #[serde(rename = "rsa-1_5")]
    Rsa15,
}

/// A folder of WS-BPEL 2.0 processes (`processes.NAME`), as Apache ODE deploys them: a
/// `deploy.xml`, the `.bpel` files it names and their WSDLs. Each `provide` of `deploy.xml`
/// is served as a SOAP endpoint at the path of its port's WSDL `soap:address`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// The folder, relative to the config file. It is read (and every process compiled) when
    /// the config is built, and again on each reload; a construct outside the supported
    /// subset is an error naming its file and line.
    pub dir: Spanned<String>,
    /// Partner links the processes invoke → the endpoint (in `endpoints`) that serves them,
    /// with its timeouts, retries and pool. A partner link not named here is called at the
    /// WSDL `soap:address` of the service and port `deploy.xml` gives it, with default
    /// endpoint settings.
    #[serde(default)]
    pub partners: BTreeMap<String, Spanned<String>>,
    /// The listener serving the processes' SOAP endpoints. Default: the first listener (in
    /// name order).
    #[serde(default)]
    pub listener: Option<Spanned<String>>,
    /// Most instances of this folder's processes alive at once; a message that would start one
    /// more is answered with a `tooManyInstances` fault.
    #[serde(default = "default_max_instances")]
    pub max_instances: usize,
    /// Longest life of an instance; an older one ends with an `instanceExpired` fault.
    #[serde(default = "default_instance_ttl")]
    pub instance_ttl: Duration,
    /// Durable instances (docs/processes.md, "Durable instances"): absent, every process of
    /// the folder is transient (in memory only).
    #[serde(default)]
    pub persistence: Option<PersistenceConfig>,
}

/// Where and how a folder's processes keep durable instances (`processes.NAME.persistence`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PersistenceConfig {
    /// The database (a `databases` entry: SQLite, or PostgreSQL for several nodes).
    pub database: Spanned<String>,
    /// `durable` (default) or `transient`; a process whose `deploy.xml` says
    /// `<in-memory>true</in-memory>` is transient either way.
    #[serde(default)]
    pub mode: PersistenceMode,
    /// This node's name, unique among the nodes sharing the database. Default: the host name.
    #[serde(default)]
    pub node: Option<String>,
    /// Which finished instances are kept (with their final variables): `never`,
    /// `on_fault` (default) or `always`.
    #[serde(default)]
    pub completion: CompletionPolicy,
    /// How long finished instances are kept.
    #[serde(default = "default_retention")]
    pub retention: Duration,
    /// A node silent for this long is taken for dead: another takes over its instances.
    #[serde(default = "default_lease")]
    pub lease: Duration,
}

/// Whether a folder's processes are durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PersistenceMode {
    #[default]
    Durable,
    Transient,
}

/// Which finished instances are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionPolicy {
    Never,
    #[default]
    OnFault,
    Always,
}

fn default_retention() -> Duration {
    Duration(std::time::Duration::from_secs(7 * 24 * 3600))
}

fn default_lease() -> Duration {
    Duration(std::time::Duration::from_secs(30))
}

fn default_max_instances() -> usize {
    100_000
}

fn default_instance_ttl() -> Duration {
    Duration(std::time::Duration::from_secs(3600))
}

/// A database (`databases.NAME`): SQLite or PostgreSQL, given by `url` (`sqlite:PATH`,
/// `sqlite::memory:`, `postgres://user:password@host:port/db`), by `path` (SQLite) or by
/// `host`, `port`, `user`, `password` and `dbname` (PostgreSQL). A `url` wins over `path`, and an
/// empty one stands aside, so `url: "${DB_URL:-}"` beside a `path` picks the URL's database
/// only when the variable is set.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// The database as a URL; its password is a secret.
    #[serde(default)]
    pub url: Option<SecretUrl>,
    /// A SQLite file, relative to the config file (created when missing).
    #[serde(default)]
    pub path: Option<String>,
    /// PostgreSQL's host (or a Unix socket directory).
    #[serde(default)]
    pub host: Option<String>,
    /// PostgreSQL's port (5432).
    #[serde(default)]
    pub port: Option<u16>,
    /// PostgreSQL's user.
    #[serde(default)]
    pub user: Option<String>,
    /// PostgreSQL's password.
    #[serde(default)]
    pub password: Option<Secret<String>>,
    /// PostgreSQL's database.
    #[serde(default)]
    pub dbname: Option<String>,
    /// Connections: PostgreSQL's pool size, SQLite's threads. Default (or 0): the worker
    /// count.
    #[serde(default)]
    pub pool: Option<usize>,
    /// Longest wait for a free connection; past it, 503 with Retry-After.
    #[serde(default = "default_acquire_timeout")]
    pub acquire_timeout: Duration,
    /// Longest time a statement may run; past it, it is cancelled and the answer is 504.
    #[serde(default = "default_statement_timeout")]
    pub statement_timeout: Duration,
    /// Longest time to open a PostgreSQL connection.
    #[serde(default = "default_db_connect_timeout")]
    pub connect_timeout: Duration,
    /// How long a SQLite writer waits for another's lock.
    #[serde(default = "default_busy_timeout")]
    pub busy_timeout: Duration,
    /// Keep prepared statements per connection; turn off behind PgBouncer in transaction
    /// mode.
    #[serde(default = "default_true")]
    pub statement_cache: bool,
    /// SQL run at start (schema, seed rows; it must be safe to run again): a file, or one
    /// file per kind (`{ sqlite: FILE, postgres: FILE }`), relative to the config file.
    #[serde(default)]
    pub init: Option<InitConfig>,
    /// PostgreSQL over TLS: `disable` (the default, unless the URL says `sslmode=require`)
    /// or `require` (TLS or no connection; the server's certificate is checked against the
    /// system's roots or `tls_ca`, and its name against the host).
    #[serde(default)]
    pub tls: DbTls,
    /// A PEM file of the CA certificates trusted for the server (instead of the system's).
    #[serde(default)]
    pub tls_ca: Option<String>,
}

/// TLS to PostgreSQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DbTls {
    /// Plain TCP (or a Unix socket).
    #[default]
    Disable,
    /// TLS with the server's certificate checked.
    Require,
}

fn default_acquire_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(2))
}

fn default_statement_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(10))
}

fn default_db_connect_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(5))
}

fn default_busy_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(5))
}

/// A database's start-up SQL.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum InitConfig {
    /// One file for whichever kind the database is.
    File(Spanned<String>),
    /// A file per kind.
    ByKind {
        /// For SQLite.
        #[serde(default)]
        sqlite: Option<Spanned<String>>,
        /// For PostgreSQL.
        #[serde(default)]
        postgres: Option<Spanned<String>>,
    },
}

/// The `sql` step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConfig {
    /// The database's name in `databases`.
    pub database: String,
    /// One statement, with `:name` parameters (or one per database kind).
    #[serde(default)]
    pub query: Option<QueryText>,
    /// Or several, run in one transaction (all or nothing); the last one's result answers.
    #[serde(default)]
    pub transaction: Vec<SqlStatementConfig>,
    /// Where each `:name` of `query` gets its value.
    #[serde(default)]
    pub params: BTreeMap<String, SqlParamConfig>,
    /// The answer: `rows` (a JSON array), `row` (the first row as an object), `affected`
    /// (`{"affected": n, "id": …}`) or `none` (no body).
    #[serde(default)]
    pub result: SqlResult,
    /// For `row` when there is no row: `error` (404, the default) or `null` (200 with the
    /// body `null`).
    #[serde(default)]
    pub not_found: NotFoundConfig,
    /// The answer's status (default 200; 204 for `none`).
    #[serde(default)]
    pub status: Option<u16>,
    /// NUMERIC/DECIMAL columns as JSON `number`s (the database's digits, unrounded) or
    /// `string`s.
    #[serde(default)]
    pub numeric: NumericConfig,
}

/// One statement of a `sql` transaction.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SqlStatementConfig {
    /// The statement, with `:name` parameters (or one per database kind).
    pub query: QueryText,
    /// Where each `:name` gets its value (the step's `params` are used for names not here).
    #[serde(default)]
    pub params: BTreeMap<String, SqlParamConfig>,
}

/// A statement's text: the same for every database, or one per kind where their SQL
/// differs (`{ sqlite: "…", postgres: "…" }`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum QueryText {
    /// For any database.
    Any(String),
    /// Per kind.
    ByKind {
        /// For SQLite.
        #[serde(default)]
        sqlite: Option<String>,
        /// For PostgreSQL.
        #[serde(default)]
        postgres: Option<String>,
    },
}

impl QueryText {
    /// The text for a database of `kind` (`sqlite` or `postgres`).
    pub fn for_kind(&self, kind: &str) -> Option<&str> {
        match self {
            QueryText::Any(t) => Some(t),
            QueryText::ByKind { sqlite, postgres } => match kind {
                "sqlite" => sqlite.as_deref(),
                _ => postgres.as_deref(),
            },
        }
    }
}

/// Where a statement parameter's value comes from: exactly one of `path`, `query`, `header`,
/// `json`, `var` or `value`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SqlParamConfig {
    /// A path parameter of the route (`/api/customers/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A query-string parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// A request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// An RFC 9535 JSONPath into the JSON body (its first node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<String>,
    /// An exchange variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var: Option<String>,
    /// A literal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Literal>,
    /// The value's type, checked (and text converted) before the database sees it: `any`
    /// (the default), `int`, `float`, `text`, `bool` or `json`.
    #[serde(default, rename = "type")]
    pub ty: SqlType,
    /// The value when the source has none; without it (and without `nullable`), a missing
    /// value is a 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Literal>,
    /// A missing value is NULL.
    #[serde(default)]
    pub nullable: bool,
    /// For `int`: smaller values are raised to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// For `int`: larger values are capped at this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
}

impl SqlParamConfig {
    /// The sources given, by name.
    pub fn sources(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (name, set) in [
            ("path", self.path.is_some()),
            ("query", self.query.is_some()),
            ("header", self.header.is_some()),
            ("json", self.json.is_some()),
            ("var", self.var.is_some()),
            ("value", self.value.is_some()),
        ] {
            if set {
                out.push(name);
            }
        }
        out
    }
}

/// A literal value in the config.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Literal {
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// Text.
    Text(String),
}

/// A `sql` parameter's type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SqlType {
    /// As the source gives it: text from paths, queries, headers and variables; JSON's own
    /// type from the body.
    #[default]
    Any,
    /// An integer.
    Int,
    /// A number.
    Float,
    /// Text.
    Text,
    /// A boolean.
    Bool,
    /// A JSON document.
    Json,
}

/// A `sql` step's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SqlResult {
    /// Every row, as a JSON array.
    #[default]
    Rows,
    /// The first row, as a JSON object.
    Row,
    /// `{"affected": n, "id": …}`.
    Affected,
    /// No body.
    None,
}

/// What a `row` answer is when there is no row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotFoundConfig {
    /// 404 as a problem.
    #[default]
    Error,
    /// 200 with the body `null`.
    Null,
}

/// How NUMERIC columns are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NumericConfig {
    /// JSON numbers.
    #[default]
    Number,
    /// JSON strings.
    String,
}
