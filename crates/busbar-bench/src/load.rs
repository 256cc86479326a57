//! The load generator: closed loop (default), open loop at a fixed arrival rate, and the
//! legacy JavaBench mode (docs/bench.md).
//!
//! One `current_thread` tokio runtime per worker thread; each runtime runs its share of the
//! client connections as local tasks writing into one per-thread histogram, so the hot path
//! takes no locks. A controller on the calling thread owns the phases (warm-up, measure,
//! stop), the clock and Ctrl-C.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::check::{Check, Failure, Scenario, Suite};
use crate::client::{Conn, ExchangeError, RequestSpec, Url, Version};
use crate::error::{runtime, BenchError};
use crate::integrator::{self, Shape};
use crate::payload::{buy_stocks, soap_action, Variant};
use crate::util::{parse_count, parse_duration, parse_positive_duration, parse_size, round};

/// Options of `bench load`.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Target URL, e.g. http://127.0.0.1:8280/service/DirectProxy or, in the integrator suite,
    /// http://127.0.0.1:8281/api/route (scatter-gather: .../api/product, ids are appended).
    pub url: String,
    /// Scenario suite: `classic` (SOAP, the default), `integrator` (JSON/REST; needs
    /// --verify SCENARIO or --body) or `bpel` (the SimpleInvoke processes and HelloWorld;
    /// needs --verify bpel --x N or --verify bpel-direct).
    #[arg(long, default_value = "classic")]
    pub suite: Suite,
    /// Request body file (sent as is).
    #[arg(long, conflicts_with = "size")]
    pub body: Option<std::path::PathBuf>,
    /// Generate the body at this exact size (bytes, or with k/m suffix); default 1024: a
    /// buyStocks request, or in the integrator suite the scenario's JSON document(s).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<usize>,
    /// Seed of the generated JSON documents' values (integrator suite).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Concurrent connections (clients).
    #[arg(short = 'c', long, default_value = "20", value_parser = parse_count)]
    pub concurrency: usize,
    /// Total measured requests (in legacy mode: requests per client).
    #[arg(short = 'n', long, conflicts_with = "duration", value_parser = parse_count)]
    pub requests: Option<usize>,
    /// Measured duration (default 10s when -n is not given).
    #[arg(short = 'd', long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,
    /// Discarded warm-up before measuring.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Open loop: total requests per second, latency measured from the intended send time.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open a new connection for every request.
    #[arg(long)]
    pub no_keepalive: bool,
    /// Speak HTTP/1.0 (keep-alive requested with `Connection: keep-alive` unless disabled).
    #[arg(long = "http1.0")]
    pub http10: bool,
    /// Extra or overriding header, `name: value`; `name:` alone removes a default header.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Verify every response as this scenario expects (classic: direct, cbr, cbr-soap-header,
    /// cbr-transport-header, xslt, and with --keys secure, secure-modern; integrator:
    /// json-passthrough, json-cbr, json-cbr-filter, json-map, json-transform, scatter-gather,
    /// json-to-soap, db-read, db-write, which also pick the requests; bpel: bpel with --x,
    /// bpel-x0 … bpel-x3, or bpel-direct); without it, success is any HTTP 200.
    #[arg(long)]
    pub verify: Option<String>,
    /// The bpel suite: how many times the process under test calls HelloWorld (0 to 3, as in
    /// SimpleInvoke0 to SimpleInvoke3), which decides its answer.
    #[arg(long, value_parser = crate::bpel::parse_x)]
    pub x: Option<::std::vec::Vec<u8>>,
    /// Legacy JavaBench semantics: -n requests per client, TPS = successes / mean client time.
    #[arg(long)]
    pub legacy: bool,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Worker threads, each with its own single-threaded runtime.
    #[arg(long, default_value = "1", value_parser = parse_count)]
    pub threads: usize,
    /// WS-Security scenarios: the directory holding client.p12, server.pem and ca.pem
    /// (as tests/interop/keys.sh makes them).
    #[arg(long)]
    pub keys: Option<std::path::PathBuf>,
    /// WS-Security scenarios: fresh messages built before the run; later ones are built as
    /// they are sent.
    #[arg(long, default_value = "2000", value_parser = parse_count)]
    pub pool: usize,
    /// WS-Security scenarios: send one message over and over (the classic rounds; the
    /// proxy's replay cache must be off).
    #[arg(long)]
    pub replay: bool,
}

/// When a measurement ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopRule {
    /// After this long.
    Duration(Duration),
    /// After this many measured requests in total.
    Requests(u64),
    /// After this many measured requests per client (legacy).
    PerClient(u64),
}

/// A request as sent on the wire and the check of its answer.
pub type Prepared = (Arc<Vec<u8>>, Arc<Check>);

/// Where each request of a run, and the check of its answer, come from.
#[derive(Clone, Debug)]
pub enum Requests {
    /// The same request every time.
    One(Prepared),
    /// A fixed list taken in turn: each client starts at its own place and goes round, so every
    /// client sends the list's mix in the list's order (JsonCBR's premium/standard halves,
    /// ScatterGather's product ids).
    Rotation(Arc<[Prepared]>),
    /// Fresh WS-Security messages.
    Secure(Arc<crate::secure::Feed>),
    /// Fresh database writes (`db-write`), read back after the run.
    DbWrite(Arc<crate::db::WriteFeed>),
}

impl Requests {
    /// The next request of a feed that makes each one fresh (WS-Security, `db-write`).
    fn fresh(&self) -> Result<Prepared, String> {
        match self {
            Requests::Secure(feed) => feed.next(),
            Requests::DbWrite(feed) => feed.next(),
            Requests::One(_) | Requests::Rotation(_) => Err("not a feed of fresh requests".into()),
        }
    }

    /// One request, or a rotation of several, from their specs.
    pub fn from_specs(specs: Vec<(RequestSpec, Check)>) -> Result<Requests, String> {
        let mut list: Vec<Prepared> = specs
            .into_iter()
            .map(|(spec, check)| (Arc::new(spec.to_bytes()), Arc::new(check)))
            .collect();
        match list.len() {
            0 => Err("no requests to send".into()),
            1 => Ok(Requests::One(list.remove(0))),
            _ => Ok(Requests::Rotation(list.into())),
        }
    }
}

/// The positive requests of `scenario` under a suite's base URL at `size` (ignored by
/// ScatterGather), with their checks: one buyStocks request for a classic scenario, the
/// integrator scenario's rotation otherwise.
pub fn scenario_requests(
    scenario: Scenario,
    base: &str,
    shape: Shape,
) -> Result<Vec<(RequestSpec, Check)>, BenchError> {
    scenario_requests_at(scenario, &scenario.url(base), shape)
}

/// [`scenario_requests`] at the scenario's own URL (an ESB that serves it at another path).
pub fn scenario_requests_at(
    scenario: Scenario,
    url: &str,
    shape: Shape,
) -> Result<Vec<(RequestSpec, Check)>, BenchError> {
    let url = Url::parse(url).map_err(BenchError::Usage)?;
    match scenario.suite() {
        Suite::Classic => {
            let body = buy_stocks(shape.size, Variant::Plain)
                .map_err(|e| BenchError::Usage(e.to_string()))?;
            let check = Check::for_scenario(scenario, &body).map_err(BenchError::Failed)?;
            Ok(vec![(
                RequestSpec::soap(url, body, soap_action(shape.size)),
                check,
            )])
        }
        Suite::Integrator => integrator::requests(scenario, &url, shape).map_err(BenchError::Usage),
        Suite::Bpel => {
            crate::bpel::requests(scenario, &url, crate::bpel::NAMES).map_err(BenchError::Usage)
        }
    }
}

/// A fully resolved load run.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    /// Target URL.
    pub url: Url,
    /// Resolved address (checked reachable).
    pub addr: SocketAddr,
    /// The requests and the checks of their answers.
    pub requests: Requests,
    /// Request body size in bytes.
    pub body_len: usize,
    /// Concurrent connections.
    pub concurrency: usize,
    /// Worker threads.
    pub threads: usize,
    /// End of the measurement.
    pub stop: StopRule,
    /// Discarded warm-up.
    pub warmup: Duration,
    /// Open-loop total arrival rate (requests per second).
    pub rate: Option<f64>,
    /// Reuse connections.
    pub keep_alive: bool,
    /// HTTP version.
    pub version: Version,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// Error counts by class.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Could not open a connection.
    pub connect: u64,
    /// No complete response within the timeout.
    pub timeout: u64,
    /// Reading the response failed, the peer closed early or the response was malformed.
    pub read: u64,
    /// Writing the request failed.
    pub write: u64,
    /// Unexpected HTTP status.
    pub status: u64,
    /// Expected status but wrong content (the corruption checker's finding).
    pub verify: u64,
}

impl ErrorCounts {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.read + self.write + self.status + self.verify
    }
    /// Adds another run's counts.
    pub fn add(&mut self, o: &ErrorCounts) {
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.read += o.read;
        self.write += o.write;
        self.status += o.status;
        self.verify += o.verify;
    }
}

/// Latency percentiles of successful requests, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile (absent from results written before it was measured).
    #[serde(default)]
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// Legacy (JavaBench) figures.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct LegacyFigures {
    /// Successes divided by the mean per-client elapsed time.
    pub tps: f64,
    /// Mean per-client elapsed time in seconds.
    pub mean_client_elapsed_s: f64,
    /// Mean time per request seen by one client: concurrency × 1000 / TPS.
    pub time_per_request_ms: f64,
    /// Mean time per request across all clients: 1000 / TPS.
    pub time_per_request_all_ms: f64,
}

/// The outcome of a load run (the JSON written by `--json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoadResult {
    /// Target URL.
    pub url: String,
    /// `closed`, `open` or `legacy`.
    pub mode: String,
    /// Concurrent connections.
    pub concurrency: usize,
    /// Worker threads.
    pub threads: usize,
    /// Open-loop rate, if any.
    pub rate: Option<f64>,
    /// Whether connections were reused.
    pub keep_alive: bool,
    /// `1.1` or `1.0`.
    pub http_version: String,
    /// Request body size.
    pub request_bytes: usize,
    /// Warm-up, seconds.
    pub warmup_s: f64,
    /// Measured wall-clock time, seconds.
    pub elapsed_s: f64,
    /// True when Ctrl-C cut the measurement short.
    pub interrupted: bool,
    /// Measured requests (successes + errors).
    pub requests: u64,
    /// Successful (and verified, when verifying) requests.
    pub successes: u64,
    /// Errors by class.
    pub errors: ErrorCounts,
    /// Clients that got no answer at all while the measurement lasted (their one request, sent
    /// during the measurement or during the warm-up, was still waiting when it ended, or their
    /// connection was still opening): neither
    /// successes nor errors, and the sign of a server slower than the measurement lasts. In a
    /// closed loop every client has a request waiting at the end; this counts only those that
    /// waited the whole time.
    #[serde(default)]
    pub unanswered: u64,
    /// Open loop: requests the schedule made due during the measurement that were never sent,
    /// because every connection was still waiting for an answer when they came due (too few
    /// connections for the rate × latency product). Neither successes nor errors, and left
    /// out of the latency figures: the rate actually sent is lower by this much. 0 in the
    /// other modes.
    #[serde(default)]
    pub unsent: u64,
    /// Wall-clock throughput: successes / elapsed.
    pub tps: f64,
    /// Mean response body size of successes, bytes.
    pub response_bytes_mean: f64,
    /// Latency of successes.
    pub latency_ms: Latency,
    /// The distinct body sizes of the answers with the expected status (verified or not), per
    /// request of the rotation: a correct ESB answers one request with one size, so a second
    /// size is a sign of corruption even when nothing is verified. Empty for fresh-request
    /// feeds (WS-Security, `db-write`), whose requests all differ.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub response_sizes: Vec<ResponseSizes>,
    /// Legacy figures (legacy mode only).
    pub legacy: Option<LegacyFigures>,
    /// The first error seen, for diagnosis.
    pub first_error: Option<String>,
}

impl LoadResult {
    /// The legacy 8-column CSV header.
    pub const LEGACY_CSV_HEADER: &'static str =
        "service,size,concurrency,completed,failed,writeErrors,TPS,timePerRequest_ms";

    /// The legacy CSV line (legacy TPS when present, wall-clock TPS otherwise).
    pub fn legacy_csv_line(&self) -> String {
        let service = self
            .url
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or("service");
        let (tps, tpr) = match &self.legacy {
            Some(l) => (l.tps, l.time_per_request_ms),
            None => (
                self.tps,
                if self.tps > 0.0 {
                    self.concurrency as f64 * 1000.0 / self.tps
                } else {
                    0.0
                },
            ),
        };
        format!(
            "{service},{},{},{},{},{},{:.2},{:.3}",
            self.request_bytes,
            self.concurrency,
            self.successes,
            self.requests - self.successes,
            self.errors.write,
            tps,
            tpr
        )
    }

    /// The ab-style text block of legacy mode.
    pub fn legacy_block(&self) -> String {
        let l = self.legacy.unwrap_or(LegacyFigures {
            tps: self.tps,
            mean_client_elapsed_s: self.elapsed_s,
            time_per_request_ms: 0.0,
            time_per_request_all_ms: 0.0,
        });
        format!(
            "Server URL:             {}\n\
             Document Length:        {:.0} bytes\n\
             Request Length:         {} bytes\n\
             Concurrency Level:      {}\n\
             Time taken for tests:   {:.3} seconds (mean per client)\n\
             Complete requests:      {}\n\
             Failed requests:        {}\n\
             Write errors:           {}\n\
             Requests per second:    {:.2} [#/sec] (mean)\n\
             Time per request:       {:.3} [ms] (mean)\n\
             Time per request:       {:.3} [ms] (mean, across all concurrent requests)\n",
            self.url,
            self.response_bytes_mean,
            self.request_bytes,
            self.concurrency,
            l.mean_client_elapsed_s,
            self.successes,
            self.requests - self.successes,
            self.errors.write,
            l.tps,
            l.time_per_request_ms,
            l.time_per_request_all_ms,
        )
    }

    /// A short human summary.
    pub fn summary(&self) -> String {
        let l = &self.latency_ms;
        let e = &self.errors;
        format!(
            "{} ({} loop, c={}, {} thread(s), {}, HTTP/{}, {} B request)\n  \
             {} requests in {:.2} s: {} ok, {:.1} req/s{}\n  \
             latency ms: mean {:.3}  p50 {:.3}  p90 {:.3}  p95 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n  \
             errors: connect {}, timeout {}, read {}, write {}, status {}, verify {}; clients never answered {}{}{}\n",
            self.url,
            self.mode,
            self.concurrency,
            self.threads,
            if self.keep_alive {
                "keep-alive"
            } else {
                "no keep-alive"
            },
            self.http_version,
            self.request_bytes,
            self.requests,
            self.elapsed_s,
            self.successes,
            self.tps,
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            },
            l.mean,
            l.p50,
            l.p90,
            l.p95,
            l.p99,
            l.p999,
            l.max,
            e.connect,
            e.timeout,
            e.read,
            e.write,
            e.status,
            e.verify,
            self.unanswered,
            match (self.rate, self.unsent) {
                (Some(rate), unsent) => format!(
                    "\n  open loop at {rate} req/s: {unsent} scheduled requests never sent{}",
                    if unsent > 0 {
                        " (every connection was waiting for an answer when they came due: \
                         give more connections than rate × latency)"
                    } else {
                        ""
                    }
                ),
                (None, _) => String::new(),
            },
            match &self.first_error {
                Some(m) => format!("\n  first error: {m}"),
                None => String::new(),
            }
        )
    }
}

/// The answer sizes of one request of a run (see [`LoadResult::response_sizes`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResponseSizes {
    /// The request's place in the rotation (0 for a single request).
    pub request: usize,
    /// Distinct body sizes and how many answers had each, in order of first appearance.
    pub sizes: Vec<SizeCount>,
    /// Answers whose size was beyond the first [`MAX_DISTINCT_SIZES`] distinct ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other: u64,
}

/// One answer size and its count.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SizeCount {
    /// Body size in bytes.
    pub bytes: u64,
    /// Answers of that size.
    pub count: u64,
}

/// Distinct answer sizes kept per request.
pub const MAX_DISTINCT_SIZES: usize = 8;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ResponseSizes {
    fn record(&mut self, bytes: u64) {
        if let Some(s) = self.sizes.iter_mut().find(|s| s.bytes == bytes) {
            s.count += 1;
        } else if self.sizes.len() < MAX_DISTINCT_SIZES {
            self.sizes.push(SizeCount { bytes, count: 1 });
        } else {
            self.other += 1;
        }
    }

    fn merge(&mut self, o: &ResponseSizes) {
        for s in &o.sizes {
            if let Some(mine) = self.sizes.iter_mut().find(|m| m.bytes == s.bytes) {
                mine.count += s.count;
            } else if self.sizes.len() < MAX_DISTINCT_SIZES {
                self.sizes.push(*s);
            } else {
                self.other += s.count;
            }
        }
        self.other += o.other;
    }
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

struct Shared {
    phase: AtomicU8,
    stop_tx: watch::Sender<bool>,
    tickets: AtomicU64,
    start: Instant,
    /// When the measurement started and ended (set by the controller before it stops the
    /// clients): the open loop counts the requests due between them that were never sent.
    measured: std::sync::OnceLock<(Instant, Instant)>,
}

struct Stats {
    hist: Histogram<u64>,
    successes: u64,
    errors: ErrorCounts,
    unanswered: u64,
    unsent: u64,
    response_bytes: u64,
    /// By request index of the rotation.
    sizes: Vec<ResponseSizes>,
    client_elapsed: Vec<Duration>,
    first_error: Option<String>,
}

impl Stats {
    fn new() -> Result<Stats, String> {
        // 1 µs to 1 hour at 3 significant digits: about 180 KB per worker thread.
        let hist = Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|e| e.to_string())?;
        Ok(Stats {
            hist,
            successes: 0,
            errors: ErrorCounts::default(),
            unanswered: 0,
            unsent: 0,
            response_bytes: 0,
            sizes: Vec::new(),
            client_elapsed: Vec::new(),
            first_error: None,
        })
    }

    fn error(&mut self, kind: fn(&mut ErrorCounts) -> &mut u64, msg: impl FnOnce() -> String) {
        *kind(&mut self.errors) += 1;
        if self.first_error.is_none() {
            self.first_error = Some(msg());
        }
    }

    fn sizes_of(&mut self, request: usize) -> &mut ResponseSizes {
        if self.sizes.len() <= request {
            self.sizes.resize_with(request + 1, ResponseSizes::default);
            for (i, s) in self.sizes.iter_mut().enumerate() {
                s.request = i;
            }
        }
        &mut self.sizes[request]
    }

    fn merge(&mut self, o: Stats) -> Result<(), String> {
        self.hist.add(&o.hist).map_err(|e| e.to_string())?;
        self.successes += o.successes;
        self.errors.add(&o.errors);
        self.unanswered += o.unanswered;
        self.unsent += o.unsent;
        self.response_bytes += o.response_bytes;
        for theirs in &o.sizes {
            self.sizes_of(theirs.request).merge(theirs);
        }
        self.client_elapsed.extend(o.client_elapsed);
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        Ok(())
    }
}

/// Resolves `bench load` options into a plan, checking the target is reachable.
pub fn plan_from_args(args: &LoadArgs) -> Result<LoadPlan, BenchError> {
    let url = Url::parse(&args.url).map_err(BenchError::Usage)?;
    check_concurrency(args.concurrency)?;
    let scenario: Option<Scenario> = match &args.verify {
        Some(s) if s.trim().eq_ignore_ascii_case("bpel") => {
            Some(crate::bpel::process_for(args.x.as_deref()).map_err(BenchError::Usage)?)
        }
        Some(s) => Some(s.parse().map_err(BenchError::Usage)?),
        None => None,
    };
    if let Some(s) = scenario {
        args.suite.admit(&[s]).map_err(BenchError::Usage)?;
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(BenchError::Usage(format!(
                "--rate {rate} must be a positive number"
            )));
        }
        if args.legacy {
            return Err(BenchError::Usage(
                "--rate cannot be combined with --legacy".into(),
            ));
        }
    }
    let stop = match (args.legacy, args.requests, args.duration) {
        (true, Some(n), _) => StopRule::PerClient(n as u64),
        (true, None, _) => {
            return Err(BenchError::Usage(
                "--legacy needs -n (requests per client)".into(),
            ))
        }
        (false, Some(n), _) => StopRule::Requests(n as u64),
        (false, None, d) => StopRule::Duration(d.unwrap_or(Duration::from_secs(10))),
    };
    let read_body = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| BenchError::io(format!("cannot read body file {}", path.display()), e))
    };
    let profile = scenario.and_then(Scenario::secure_profile);
    let mut db_feed = None;
    let mut specs: Vec<(RequestSpec, Check)> = match args.suite {
        Suite::Classic => {
            let body = match (&args.body, args.size) {
                (Some(path), _) => read_body(path)?,
                (None, size) => buy_stocks(size.unwrap_or(1024), Variant::Plain)
                    .map_err(|e| BenchError::Usage(e.to_string()))?,
            };
            let check = match (scenario, profile) {
                (Some(_), Some(_)) | (None, _) => Check::Status200,
                (Some(scenario), None) => Check::for_scenario(scenario, &body).map_err(|e| {
                    BenchError::Usage(format!("body cannot be verified as {scenario}: {e}"))
                })?,
            };
            let mut spec =
                RequestSpec::soap(url.clone(), body, soap_action(args.size.unwrap_or(1024)));
            if args.body.is_some() {
                spec.set_header("SOAPAction", &soap_action(spec.body.len().max(1)));
            }
            vec![(spec, check)]
        }
        Suite::Integrator => match (scenario, &args.body) {
            (Some(Scenario::ScatterGather), Some(_)) => {
                return Err(BenchError::Usage(
                    "scatter-gather sends GETs by product id: no --body".into(),
                ))
            }
            (Some(scenario), Some(path)) => {
                let body = read_body(path)?;
                let check = integrator::check(scenario, &body).map_err(|e| {
                    BenchError::Usage(format!("body cannot be verified as {scenario}: {e}"))
                })?;
                vec![(RequestSpec::json(url.clone(), body), check)]
            }
            (None, Some(path)) => vec![(
                RequestSpec::json(url.clone(), read_body(path)?),
                Check::Status200,
            )],
            (Some(Scenario::DbWrite), None) => {
                // The feed makes every request; this one stands for their shape.
                db_feed = Some(Arc::new(crate::db::WriteFeed::new(url.clone())));
                vec![(
                    RequestSpec::json(url.clone(), b"{}".to_vec()),
                    Check::Status200,
                )]
            }
            (Some(scenario), None) => {
                let shape = Shape {
                    size: args.size.unwrap_or(1024),
                    seed: args.seed,
                    products: integrator::PRODUCTS,
                };
                integrator::requests(scenario, &url, shape).map_err(BenchError::Usage)?
            }
            (None, None) => {
                return Err(BenchError::Usage(
                    "the integrator suite needs --verify SCENARIO (it picks the requests and \
                     their check) or --body FILE"
                        .into(),
                ))
            }
        },
        Suite::Bpel => match (scenario, &args.body) {
            (Some(scenario), None) => crate::bpel::requests(scenario, &url, crate::bpel::NAMES)
                .map_err(BenchError::Usage)?,
            (_, Some(_)) => {
                return Err(BenchError::Usage(
                    "the bpel suite makes its own requests (a name per request): no --body".into(),
                ))
            }
            (None, None) => {
                return Err(BenchError::Usage(
                    "the bpel suite needs --verify bpel --x N (the process SimpleInvokeN) or \
                     --verify bpel-direct (HelloWorld)"
                        .into(),
                ))
            }
        },
    };
    for (spec, _) in &mut specs {
        for h in &args.headers {
            spec.apply_header_option(h).map_err(BenchError::Usage)?;
        }
        spec.keep_alive = !args.no_keepalive;
        spec.version = if args.http10 {
            Version::Http10
        } else {
            Version::Http11
        };
    }
    let addr = resolve(&url)?;
    let (body_len, keep_alive, version) = specs
        .first()
        .map(|(s, _)| (s.body.len(), s.keep_alive, s.version))
        .unwrap_or((0, !args.no_keepalive, Version::Http11));
    let requests = match profile {
        _ if db_feed.is_some() => Requests::DbWrite(
            db_feed
                .take()
                .ok_or_else(|| BenchError::Usage("no database feed".into()))?,
        ),
        Some(profile) => {
            let keys = args
                .keys
                .as_deref()
                .ok_or_else(|| BenchError::Usage("WS-Security scenarios need --keys DIR".into()))?;
            let client = crate::secure::SecureClient::load(keys, profile)?;
            let spec = specs.remove(0).0;
            Requests::Secure(Arc::new(crate::secure::Feed::new(
                client,
                spec,
                args.pool,
                args.replay,
            )?))
        }
        None => Requests::from_specs(specs).map_err(BenchError::Usage)?,
    };
    Ok(LoadPlan {
        addr,
        body_len,
        requests,
        url,
        concurrency: args.concurrency,
        threads: args.threads.min(args.concurrency),
        stop,
        warmup: args.warmup,
        rate: args.rate,
        keep_alive,
        version,
        timeout: args.timeout,
    })
}

/// The most clients the kit runs at once, whatever the open-file limit allows: as many as Linux
/// lets one process open by default (`fs.nr_open`), and about a gigabyte of client state.
pub const MAX_CONCURRENCY: usize = 1 << 20;

/// Files the kit keeps open besides its clients' connections (runtimes, standard streams,
/// result files), a generous bound.
const OTHER_FILES: u64 = 64;

/// Refuses, as a usage error, a concurrency this process cannot hold: each client holds a
/// connection, so the clients and the kit's own files must fit under the open-file limit
/// (`RLIMIT_NOFILE`'s soft limit, which the kit does not raise), and never more than
/// [`MAX_CONCURRENCY`]. Past the limit connects fail for want of a descriptor, and a count
/// past any limit only grows the clients' memory (gigabytes) before a single one connects.
pub fn check_concurrency(clients: usize) -> Result<(), BenchError> {
    if clients > MAX_CONCURRENCY {
        return Err(BenchError::Usage(format!(
            "concurrency {clients} is more than the kit runs: {MAX_CONCURRENCY} clients at most"
        )));
    }
    let Some((soft, hard)) = open_file_limits() else {
        return Ok(());
    };
    let needed = clients as u64 + OTHER_FILES;
    if needed <= soft {
        return Ok(());
    }
    let at_most = soft.saturating_sub(OTHER_FILES);
    let raise = if needed <= hard {
        format!("raise it with `ulimit -n {needed}` (the hard limit is {hard})")
    } else {
        format!(
            "the hard limit is {hard}: raise that first (as root: `ulimit -Hn`, \
             /etc/security/limits.conf or systemd's LimitNOFILE), then `ulimit -n {needed}`"
        )
    };
    Err(BenchError::Usage(format!(
        "concurrency {clients} needs {needed} open files, more than this process may have \
         (its open-file limit is {soft}): {raise}, or use at most {at_most} clients"
    )))
}

/// The soft and hard open-file limits of this process (`unlimited` as `u64::MAX`), or `None`
/// where the kernel does not say (not Linux).
pub fn open_file_limits() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line.split_whitespace().skip(3);
    let mut limit = || match fields.next()? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    };
    Some((limit()?, limit()?))
}

/// Resolves a URL and checks it accepts connections (the clear error before any run).
pub fn resolve(url: &Url) -> Result<SocketAddr, BenchError> {
    runtime()?
        .block_on(url.resolve_reachable(Duration::from_secs(5)))
        .map_err(BenchError::Unreachable)
}

/// Runs `bench load`.
pub fn command(args: &LoadArgs) -> Result<LoadResult, BenchError> {
    let plan = plan_from_args(args)?;
    let result = execute(&plan)?;
    if let Requests::DbWrite(feed) = &plan.requests {
        // Every answer was checked; now every row written must be in the table as written.
        let summary = feed
            .read_back(plan.addr, plan.timeout)
            .map_err(BenchError::Failed)?;
        eprintln!("{summary}");
    }
    if args.legacy {
        print!("{}", result.legacy_block());
        println!("{}", LoadResult::LEGACY_CSV_HEADER);
        println!("{}", result.legacy_csv_line());
    } else {
        print!("{}", result.summary());
    }
    if let Some(path) = &args.json {
        crate::write_json(path, &result)?;
    }
    Ok(result)
}

/// Runs a plan to completion (or Ctrl-C) and returns what was measured.
pub fn execute(plan: &LoadPlan) -> Result<LoadResult, BenchError> {
    check_concurrency(plan.concurrency)?;
    let (stop_tx, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        phase: AtomicU8::new(if plan.warmup.is_zero() {
            MEASURE
        } else {
            WARMUP
        }),
        stop_tx,
        tickets: AtomicU64::new(0),
        start: Instant::now(),
        measured: std::sync::OnceLock::new(),
    });
    let plan = Arc::new(plan.clone());
    let threads = plan.threads.clamp(1, plan.concurrency);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<Stats, String>>();
    let mut handles = Vec::with_capacity(threads);
    let mut first_client = 0;
    for t in 0..threads {
        let clients = plan.concurrency / threads + usize::from(t < plan.concurrency % threads);
        let ids = first_client..first_client + clients;
        first_client += clients;
        let (plan, shared, done_tx) = (plan.clone(), shared.clone(), done_tx.clone());
        let handle = std::thread::Builder::new()
            .name(format!("load-{t}"))
            .spawn(move || {
                let result = worker(plan, shared, ids);
                // The controller may have gone away on an error path; nothing to report then.
                let _ = done_tx.send(result);
            })
            .map_err(|e| BenchError::io("cannot start a load thread", e))?;
        handles.push(handle);
    }
    drop(done_tx);

    let rt = runtime()?;
    let (measure_start, measure_end, interrupted, stats) = rt.block_on(async {
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut interrupted = false;
        let mut merged: Option<Stats> = None;
        let mut pending = threads;
        let absorb = |s: Result<Stats, String>, merged: &mut Option<Stats>| -> Result<(), String> {
            let s = s?;
            match merged {
                Some(m) => m.merge(s),
                None => {
                    *merged = Some(s);
                    Ok(())
                }
            }
        };
        if !plan.warmup.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(plan.warmup) => {}
                _ = &mut ctrl_c => interrupted = true,
            }
        }
        shared.phase.store(MEASURE, Ordering::SeqCst);
        // Without a warm-up the clients measure from their first request, and the open loop's
        // schedule starts then: so does the measurement.
        let start = if plan.warmup.is_zero() {
            shared.start
        } else {
            Instant::now()
        };
        let mut end = None;
        if !interrupted {
            let deadline = match plan.stop {
                StopRule::Duration(d) => Some(tokio::time::Instant::from_std(start + d)),
                _ => None,
            };
            loop {
                tokio::select! {
                    _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                        // The measurement lasts the duration, whenever the timer fired after it.
                        end = deadline.map(tokio::time::Instant::into_std);
                        break;
                    }
                    _ = &mut ctrl_c => { interrupted = true; break; }
                    msg = done_rx.recv() => match msg {
                        Some(s) => {
                            absorb(s, &mut merged)?;
                            pending -= 1;
                            if pending == 0 { end = Some(Instant::now()); break; }
                        }
                        None => { end = Some(Instant::now()); break; }
                    }
                }
            }
        }
        let end = end.unwrap_or_else(Instant::now);
        // Before the stop: every client reads it once it has stopped.
        let _ = shared.measured.set((start, end));
        shared.phase.store(STOP, Ordering::SeqCst);
        shared.stop_tx.send_replace(true);
        while pending > 0 {
            match done_rx.recv().await {
                Some(s) => {
                    absorb(s, &mut merged)?;
                    pending -= 1;
                }
                None => break,
            }
        }
        Ok::<_, String>((start, end, interrupted, merged))
    }).map_err(BenchError::Failed)?;
    for h in handles {
        if h.join().is_err() {
            return Err(BenchError::Failed("a load thread panicked".into()));
        }
    }
    let stats = stats.ok_or_else(|| BenchError::Failed("no load thread reported".into()))?;
    Ok(summarize(
        &plan,
        &stats,
        measure_end.duration_since(measure_start),
        interrupted,
    ))
}

fn summarize(plan: &LoadPlan, s: &Stats, elapsed: Duration, interrupted: bool) -> LoadResult {
    let secs = elapsed.as_secs_f64();
    let ms = |us: u64| round(us as f64 / 1000.0, 3);
    let h = &s.hist;
    let latency = if h.is_empty() {
        Latency::default()
    } else {
        Latency {
            mean: round(h.mean() / 1000.0, 3),
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    };
    let legacy = matches!(plan.stop, StopRule::PerClient(_)).then(|| {
        let n = s.client_elapsed.len().max(1) as f64;
        let mean = s
            .client_elapsed
            .iter()
            .map(Duration::as_secs_f64)
            .sum::<f64>()
            / n;
        let tps = if mean > 0.0 {
            s.successes as f64 / mean
        } else {
            0.0
        };
        LegacyFigures {
            tps: round(tps, 2),
            mean_client_elapsed_s: round(mean, 6),
            time_per_request_ms: round(
                if tps > 0.0 {
                    plan.concurrency as f64 * 1000.0 / tps
                } else {
                    0.0
                },
                3,
            ),
            time_per_request_all_ms: round(if tps > 0.0 { 1000.0 / tps } else { 0.0 }, 3),
        }
    });
    let mode = match (plan.stop, plan.rate) {
        (StopRule::PerClient(_), _) => "legacy",
        (_, Some(_)) => "open",
        _ => "closed",
    };
    LoadResult {
        url: plan.url.raw.clone(),
        mode: mode.into(),
        concurrency: plan.concurrency,
        threads: plan.threads,
        rate: plan.rate,
        keep_alive: plan.keep_alive,
        http_version: match plan.version {
            Version::Http11 => "1.1".into(),
            Version::Http10 => "1.0".into(),
        },
        request_bytes: plan.body_len,
        warmup_s: round(plan.warmup.as_secs_f64(), 3),
        elapsed_s: round(secs, 3),
        interrupted,
        requests: s.successes + s.errors.total(),
        successes: s.successes,
        errors: s.errors,
        unanswered: s.unanswered,
        unsent: s.unsent,
        tps: round(
            if secs > 0.0 {
                s.successes as f64 / secs
            } else {
                0.0
            },
            2,
        ),
        response_bytes_mean: round(
            if s.successes > 0 {
                s.response_bytes as f64 / s.successes as f64
            } else {
                0.0
            },
            1,
        ),
        latency_ms: latency,
        response_sizes: s
            .sizes
            .iter()
            .filter(|r| !r.sizes.is_empty() || r.other > 0)
            .cloned()
            .collect(),
        legacy,
        first_error: s.first_error.clone(),
    }
}

fn worker(
    plan: Arc<LoadPlan>,
    shared: Arc<Shared>,
    ids: std::ops::Range<usize>,
) -> Result<Stats, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a load runtime: {e}"))?;
    let stats = Rc::new(RefCell::new(Stats::new()?));
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let tasks: Vec<_> = ids
            .map(|id| {
                tokio::task::spawn_local(client(id, plan.clone(), shared.clone(), stats.clone()))
            })
            .collect();
        for t in tasks {
            // A client task only ends by returning; a join error would mean a panic.
            if t.await.is_err() {
                stats
                    .borrow_mut()
                    .error(|e| &mut e.read, || "a client task panicked".into());
            }
        }
    });
    Rc::try_unwrap(stats)
        .map(RefCell::into_inner)
        .map_err(|_| "client tasks still hold the statistics".to_string())
}

async fn client(id: usize, plan: Arc<LoadPlan>, shared: Arc<Shared>, stats: Rc<RefCell<Stats>>) {
    let mut stop_rx = shared.stop_tx.subscribe();
    let mut conn: Option<Conn> = None;
    let mut body: Vec<u8> = Vec::with_capacity(plan.body_len + 1024);
    let mut measured_here = 0u64;
    // Answers and errors of this client counted in the measurement. A client stopped while it
    // still waits for a connection or an answer, with none counted, is unanswered, whichever
    // phase its request was sent in: a connect still pending, or a request sent during the
    // warm-up and never answered, belongs to no other count.
    let mut counted_here = 0u64;
    let mut stopped_waiting = false;
    let mut first_measured: Option<Instant> = None;
    let mut last_done: Option<Instant> = None;
    // This client's place in a rotation: clients start apart and each goes round.
    let mut turn = id;
    // Open loop: each client owns 1/c of the rate, offset so arrivals interleave evenly.
    let interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(plan.concurrency as f64 / r));
    let mut next_send = match interval {
        Some(iv) => shared.start + iv.mul_f64(id as f64 / plan.concurrency as f64),
        None => shared.start,
    };
    loop {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == STOP {
            // A closed loop is never idle: this client would send now.
            stopped_waiting = interval.is_none();
            break;
        }
        let measuring = phase == MEASURE;
        if measuring {
            match plan.stop {
                StopRule::Requests(n) if shared.tickets.fetch_add(1, Ordering::Relaxed) >= n => {
                    break
                }
                StopRule::PerClient(n) if measured_here >= n => break,
                _ => {}
            }
        }
        let intended = match interval {
            Some(iv) => {
                let t = next_send;
                next_send += iv;
                if t > Instant::now() {
                    tokio::select! {
                        _ = tokio::time::sleep_until(t.into()) => {}
                        _ = stop_rx.wait_for(|v| *v) => {
                            next_send = t; // not sent
                            break;
                        }
                    }
                }
                t
            }
            None => Instant::now(),
        };
        if measuring {
            measured_here += 1;
            first_measured.get_or_insert(intended);
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                let opened = tokio::select! {
                    r = tokio::time::timeout(plan.timeout, Conn::connect(plan.addr)) => r,
                    _ = stop_rx.wait_for(|v| *v) => {
                        stopped_waiting = true;
                        break;
                    }
                };
                match opened {
                    Ok(Ok(c)) => conn.insert(c),
                    Ok(Err(e)) => {
                        if measuring {
                            stats.borrow_mut().error(
                                |e| &mut e.connect,
                                || format!("connect {}: {e}", plan.addr),
                            );
                            counted_here += 1;
                            last_done = Some(Instant::now());
                        }
                        // Do not spin on a refusing target: pause briefly before retrying.
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                            _ = stop_rx.wait_for(|v| *v) => {
                                stopped_waiting = true;
                                break;
                            }
                        }
                        continue;
                    }
                    Err(_) => {
                        if measuring {
                            stats.borrow_mut().error(
                                |e| &mut e.connect,
                                || format!("connect {}: timed out", plan.addr),
                            );
                            counted_here += 1;
                            last_done = Some(Instant::now());
                        }
                        continue;
                    }
                }
            }
        };
        let (request, check, index) = match &plan.requests {
            Requests::One((request, check)) => (request.clone(), check.clone(), Some(0)),
            Requests::Rotation(list) => {
                let index = turn % list.len();
                let (request, check) = &list[index];
                turn += 1;
                (request.clone(), check.clone(), Some(index))
            }
            Requests::DbWrite(_) | Requests::Secure(_) => match plan.requests.fresh() {
                Ok((request, check)) => (request, check, None),
                Err(why) => {
                    if measuring {
                        stats.borrow_mut().error(|e| &mut e.write, || why);
                        counted_here += 1;
                        last_done = Some(Instant::now());
                    }
                    continue;
                }
            },
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(plan.timeout, c.exchange(&request, &mut body)) => r,
            _ = stop_rx.wait_for(|v| *v) => {
                stopped_waiting = true;
                break;
            }
        };
        let done = Instant::now();
        let mut keep = plan.keep_alive;
        if measuring {
            counted_here += 1;
            last_done = Some(done);
        }
        let mut s = stats.borrow_mut();
        match outcome {
            Ok(Ok(head)) => {
                keep &= head.keep_alive;
                if measuring {
                    let verdict = check.check(head.status, c.headers(), &body);
                    if let (Some(i), Ok(()) | Err(Failure::Content(_))) = (index, &verdict) {
                        s.sizes_of(i).record(body.len() as u64);
                    }
                    match verdict {
                        Ok(()) => {
                            s.successes += 1;
                            s.response_bytes += body.len() as u64;
                            let us = done.duration_since(intended).as_micros();
                            s.hist
                                .saturating_record(u64::try_from(us).unwrap_or(u64::MAX).max(1));
                        }
                        Err(Failure::Status(code)) => s.error(
                            |e| &mut e.status,
                            || {
                                format!(
                                    "HTTP status {code}: {}",
                                    String::from_utf8_lossy(&body[..body.len().min(200)])
                                )
                            },
                        ),
                        Err(Failure::Content(why)) => s.error(|e| &mut e.verify, || why),
                    }
                }
            }
            Ok(Err(err)) => {
                keep = false;
                if measuring {
                    match err {
                        ExchangeError::Write(_) => s.error(|e| &mut e.write, || err.to_string()),
                        _ => s.error(|e| &mut e.read, || err.to_string()),
                    }
                }
            }
            Err(_) => {
                keep = false;
                if measuring {
                    s.error(
                        |e| &mut e.timeout,
                        || format!("no response within {:?}", plan.timeout),
                    );
                }
            }
        }
        drop(s);
        if !keep {
            conn = None;
        }
    }
    // A measurement cut off before it began (Ctrl-C in the warm-up) left nobody unanswered.
    let measured = shared.measured.get().is_some_and(|&(from, to)| to > from);
    if stopped_waiting && counted_here == 0 && measured {
        stats.borrow_mut().unanswered += 1;
    }
    // Open loop over a duration: the requests that came due while this client was still
    // waiting for an answer, and were still not sent when the measurement ended. (With -n the
    // run lasts until every measured request is sent, so none is left out.)
    if let (Some(iv), StopRule::Duration(_), Some(&(from, to))) =
        (interval, plan.stop, shared.measured.get())
    {
        stats.borrow_mut().unsent += due_between(next_send, iv, from, to);
    }
    if let (Some(a), Some(b)) = (first_measured, last_done) {
        if matches!(plan.stop, StopRule::PerClient(_)) {
            stats
                .borrow_mut()
                .client_elapsed
                .push(b.saturating_duration_since(a));
        }
    }
}

/// How many of the times `first`, `first + every`, `first + 2 × every`, … fall in
/// `[from, to)`.
fn due_between(first: Instant, every: Duration, from: Instant, to: Instant) -> u64 {
    if every.is_zero() || to <= from {
        return 0;
    }
    // Slots before `from`, skipped; then those before `to`.
    let slots_before = |t: Instant| -> u64 {
        match t.checked_duration_since(first) {
            Some(d) if !d.is_zero() => {
                let n = d.as_nanos().div_ceil(every.as_nanos());
                u64::try_from(n).unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    };
    slots_before(to).saturating_sub(slots_before(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_slots_are_counted_in_a_half_open_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Slots at 0, 100, 200, … ms.
        assert_eq!(due_between(t0, ms(100), t0, t0 + ms(1000)), 10);
        assert_eq!(due_between(t0, ms(100), t0 + ms(50), t0 + ms(1000)), 9);
        assert_eq!(due_between(t0, ms(100), t0 + ms(100), t0 + ms(101)), 1);
        assert_eq!(due_between(t0 + ms(500), ms(100), t0, t0 + ms(1000)), 5);
        assert_eq!(due_between(t0 + ms(2000), ms(100), t0, t0 + ms(1000)), 0);
        assert_eq!(due_between(t0, ms(100), t0 + ms(1000), t0), 0);
    }
}
