//! Lock-free counters and latency histograms, rendered in the Prometheus text format.
//!
//! Handles are created when a runtime is built (never on a request) and kept by name in a
//! [`Registry`], so figures survive a reload that keeps the proxy or endpoint.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::ErrorKind;

/// Upper bounds of the latency buckets, in seconds.
const BOUNDS: [f64; 16] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
];

/// A fixed-bucket latency histogram.
///
/// An observation is two relaxed atomic adds (its bucket and the sum). There is no separate
/// count: a scrape reads each bucket once and derives the cumulative buckets, `+Inf` and
/// `_count` from those same reads, so they always agree, and the buckets never decrease
/// along `le`, however many observations land while the scrape runs.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, bound) in BOUNDS.iter().enumerate() {
            cumulative += self.buckets[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        // `+Inf` and `_count` are the same figure, from the reads above.
        cumulative += self.buckets[BOUNDS.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// Counters of one proxy or one endpoint.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests started.
    pub requests: AtomicU64,
    /// Errors, indexed by [`ErrorKind::index`].
    pub errors: [AtomicU64; ErrorKind::ALL.len()],
    /// Requests started and not yet finished.
    pub in_flight: AtomicI64,
    /// Body bytes received (request bodies for proxies, response bodies for endpoints).
    pub bytes_in: AtomicU64,
    /// Body bytes sent (response bodies for proxies, request bodies for endpoints).
    pub bytes_out: AtomicU64,
    /// Latency: until the whole response was sent (proxies) or its head arrived (endpoints).
    pub latency: Histogram,
    /// New connections opened (endpoints only).
    pub connections: AtomicU64,
    /// Attempts made to back ends, first tries, retries and failovers (endpoints only).
    pub attempts: AtomicU64,
    /// Retries made (endpoints only).
    pub retries: AtomicU64,
    /// Failovers to another URL (endpoints only).
    pub failovers: AtomicU64,
    /// Breaker state of the endpoint as a whole (endpoints only): 0 closed (some URL is
    /// usable), 1 open (every URL suspended), 2 half-open (no URL closed; one probing, or a
    /// suspension is over and the next call probes).
    pub breaker_state: BreakerGauge,
    /// Responses whose body the back end cut short after their head arrived: a reset, a close
    /// before the announced end, or a pause longer than the endpoint's timeout (endpoints
    /// only).
    pub responses_cut: AtomicU64,
}

/// Counters of one URL of an endpoint.
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    /// Attempts sent to this URL.
    pub attempts: AtomicU64,
    /// Attempts that failed (errors, and statuses counted as failures).
    pub failures: AtomicU64,
    /// Requests in progress to this URL (what `least_pending` balancing reads).
    pub pending: AtomicI64,
    /// Its circuit breaker: 0 closed, 1 open, 2 half-open.
    pub breaker_state: BreakerGauge,
    /// Keep-alive connections to this URL waiting in the pools for a request.
    pub idle: AtomicI64,
    /// Requests sent again on a fresh connection because the back end closed the kept-alive
    /// one under them before any of it reached the back end.
    pub resent: AtomicU64,
}

/// A circuit breaker's state as a scrape sees it: 0 closed, 1 open, 2 half-open. An open
/// breaker keeps its state until a call arrives, however long after its suspension ended; the
/// gauge knows when the suspension ends and shows it half-open from then on (the next call is
/// let through as a probe), so a dashboard does not show a URL suspended that is not.
#[derive(Debug, Default)]
pub struct BreakerGauge {
    state: AtomicU64,
    /// When an open breaker's suspension ends, in ms since [`clock_ms`]'s epoch.
    open_until_ms: AtomicU64,
}

impl BreakerGauge {
    /// Closed (0) or half-open (2).
    pub fn set(&self, state: u64) {
        self.state.store(state, Relaxed);
    }

    /// Open until `until` (a [`clock_ms`] time).
    pub fn set_open_until(&self, until_ms: u64) {
        self.open_until_ms.store(until_ms, Relaxed);
        self.state.store(1, Relaxed);
    }

    /// The state as of now.
    pub fn get(&self) -> u64 {
        match self.state.load(Relaxed) {
            1 if clock_ms() >= self.open_until_ms.load(Relaxed) => 2,
            state => state,
        }
    }
}

/// Milliseconds on a monotonic clock shared by the process (its epoch is the first call).
pub fn clock_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Transforms made with one stylesheet, by the engine that made them.
#[derive(Debug, Default)]
pub struct XsltCounters {
    /// Made by busbar's own fast path for simple stylesheets.
    pub fast: AtomicU64,
    /// Made by libxslt: the stylesheet is outside the fast path's class, or the message was
    /// one the fast path hands over.
    pub libxslt: AtomicU64,
}

/// The statuses the HTTP parser answers a request it refuses with: 400 (malformed), 414 (a
/// target over 64 KiB), 431 (a head too large, or with too many fields) and 501 (`CONNECT`).
pub const BAD_REQUEST_STATUSES: [u16; 4] = [400, 414, 431, 501];

/// Connections of one listener.
#[derive(Debug, Default)]
pub struct ListenerCounters {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicI64,
    /// Requests the HTTP parser refused, by status (indexed like [`BAD_REQUEST_STATUSES`]).
    pub bad_requests: [AtomicU64; BAD_REQUEST_STATUSES.len()],
    /// Requests no proxy serves (answered 404 before any proxy ran).
    pub not_found: AtomicU64,
}

impl ListenerCounters {
    /// Counts a request the HTTP parser refused with `status` (one of
    /// [`BAD_REQUEST_STATUSES`]; another is counted as 400).
    pub fn bad_request(&self, status: u16) {
        let i = BAD_REQUEST_STATUSES
            .iter()
            .position(|s| *s == status)
            .unwrap_or(0);
        self.bad_requests[i].fetch_add(1, Relaxed);
    }
}

impl Counters {
    /// Counts one error of `kind`.
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind.index()].fetch_add(1, Relaxed);
    }

    /// Errors of `kind` so far.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors[kind.index()].load(Relaxed)
    }
}

/// All metrics of a process, by proxy and by endpoint name.
#[derive(Debug, Default)]
pub struct Registry {
    proxies: Mutex<BTreeMap<String, Arc<Counters>>>,
    endpoints: Mutex<BTreeMap<String, Arc<Counters>>>,
    steps: Mutex<BTreeMap<String, Arc<Counters>>>,
    upstreams: Mutex<BTreeMap<(String, String), Arc<UpstreamCounters>>>,
    listeners: Mutex<BTreeMap<String, Arc<ListenerCounters>>>,
    xslt: Mutex<BTreeMap<String, Arc<XsltCounters>>>,
    /// Config reloads that succeeded.
    pub reloads: AtomicU64,
    /// Config reloads that failed (the old config kept serving).
    pub reload_failures: AtomicU64,
    /// Access log lines written.
    pub access_log_lines: AtomicU64,
    /// Access log lines dropped because the writer fell behind.
    pub access_log_dropped: AtomicU64,
    /// Spans exported to the OTLP collector.
    pub spans_exported: AtomicU64,
    /// Spans dropped: export queue full, or the collector refused or did not answer.
    pub spans_dropped: AtomicU64,
    /// The request bodies held in memory by steps, against `max_buffered_bodies`.
    pub bodies: Arc<crate::body::BodyBudget>,
}

impl Registry {
    /// The counters of proxy `name`, created on first use (at build time).
    pub fn proxy(&self, name: &str) -> Arc<Counters> {
        Self::get(&self.proxies, name)
    }

    /// The counters of endpoint `name`, created on first use (at build time).
    pub fn endpoint(&self, name: &str) -> Arc<Counters> {
        Self::get(&self.endpoints, name)
    }

    /// The counters of the step at config path `path` (like `proxies.P.in[0].call`).
    pub fn step(&self, path: &str) -> Arc<Counters> {
        Self::get(&self.steps, path)
    }

    /// The connection counters of listener `name`.
    pub fn listener(&self, name: &str) -> Arc<ListenerCounters> {
        let mut map = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.to_owned()).or_default().clone()
    }

    /// The transform counters of stylesheet `name` (as the config names it).
    pub fn xslt(&self, name: &str) -> Arc<XsltCounters> {
        let mut map = self.xslt.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.to_owned()).or_default().clone()
    }

    /// The counters of URL `url` (shown with credentials redacted) of endpoint `endpoint`.
    pub fn upstream(&self, endpoint: &str, url: &str) -> Arc<UpstreamCounters> {
        let mut map = self.upstreams.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((endpoint.to_owned(), url.to_owned()))
            .or_default()
            .clone()
    }

    /// Drops the series of what no running config has any more (a proxy, endpoint, step,
    /// URL or stylesheet a reload took away, once the last request on the old config ended,
    /// or what a reload that failed had built): the registry is the only one left holding
    /// their counters. A name that comes back later starts from zero, as a new series.
    fn forget_unused(&self) {
        fn retain<K: Ord, V>(map: &Mutex<BTreeMap<K, Arc<V>>>) {
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, v| Arc::strong_count(v) > 1);
        }
        retain(&self.proxies);
        retain(&self.endpoints);
        retain(&self.steps);
        retain(&self.upstreams);
        retain(&self.listeners);
        retain(&self.xslt);
    }

    fn get(map: &Mutex<BTreeMap<String, Arc<Counters>>>, name: &str) -> Arc<Counters> {
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still consistent, so keep using it.
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.to_owned()).or_default().clone()
    }

    /// Renders every metric in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.forget_unused();
        let mut out = String::with_capacity(8192);
        let groups = [
            ("proxy", &self.proxies),
            ("endpoint", &self.endpoints),
            ("step", &self.steps),
        ];
        for (what, map) in groups {
            let map = map.lock().unwrap_or_else(|p| p.into_inner());
            let counters = [
                ("requests_total", "counter", "Requests started."),
                ("in_flight", "gauge", "Requests in progress."),
                ("received_bytes_total", "counter", "Body bytes received."),
                ("sent_bytes_total", "counter", "Body bytes sent."),
            ];
            for (suffix, kind, help) in counters {
                // A step moves no bytes of its own: the proxy and endpoint counts have them.
                if what == "step" && suffix.ends_with("bytes_total") {
                    continue;
                }
                let name = format!("busbar_{what}_{suffix}");
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (label, c) in map.iter() {
                    let v = match suffix {
                        "requests_total" => c.requests.load(Relaxed) as i64,
                        "in_flight" => c.in_flight.load(Relaxed),
                        "received_bytes_total" => c.bytes_in.load(Relaxed) as i64,
                        _ => c.bytes_out.load(Relaxed) as i64,
                    };
                    let _ = writeln!(out, "{name}{{{what}=\"{}\"}} {v}", escape(label));
                }
            }
            let name = format!("busbar_{what}_errors_total");
            let _ = writeln!(out, "# HELP {name} Errors by kind.\n# TYPE {name} counter");
            for (label, c) in map.iter() {
                for kind in ErrorKind::ALL {
                    let n = c.errors_of(kind);
                    let _ = writeln!(
                        out,
                        "{name}{{{what}=\"{}\",kind=\"{}\"}} {n}",
                        escape(label),
                        kind.as_str()
                    );
                }
            }
            if what == "endpoint" {
                let name = "busbar_endpoint_connections_total";
                let _ = writeln!(
                    out,
                    "# HELP {name} Connections opened to the back end.\n# TYPE {name} counter"
                );
                for (label, c) in map.iter() {
                    let n = c.connections.load(Relaxed);
                    let _ = writeln!(out, "{name}{{endpoint=\"{}\"}} {n}", escape(label));
                }
                let policy = [
                    ("attempts_total", "counter", "Attempts sent to back ends (first tries, retries, failovers)."),
                    ("retries_total", "counter", "Retries made."),
                    ("failovers_total", "counter", "Failovers to another URL."),
                    ("responses_cut_total", "counter", "Responses whose body the back end cut short after the head."),
                    ("breaker_state", "gauge", "Circuit breaker of the endpoint as a whole: 0 closed, 1 open (every URL suspended), 2 half-open."),
                ];
                for (suffix, kind, help) in policy {
                    let name = format!("busbar_endpoint_{suffix}");
                    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                    for (label, c) in map.iter() {
                        let v = match suffix {
                            "attempts_total" => c.attempts.load(Relaxed),
                            "retries_total" => c.retries.load(Relaxed),
                            "failovers_total" => c.failovers.load(Relaxed),
                            "responses_cut_total" => c.responses_cut.load(Relaxed),
                            _ => c.breaker_state.get(),
                        };
                        let _ = writeln!(out, "{name}{{endpoint=\"{}\"}} {v}", escape(label));
                    }
                }
                self.render_upstreams(&mut out);
            }
            let name = format!("busbar_{what}_latency_seconds");
            let _ = writeln!(out, "# HELP {name} Latency.\n# TYPE {name} histogram");
            for (label, c) in map.iter() {
                c.latency
                    .render(&mut out, &name, &format!("{what}=\"{}\"", escape(label)));
            }
        }
        {
            let map = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(out, "# HELP busbar_listener_connections Client connections open.\n# TYPE busbar_listener_connections gauge");
            for (name, c) in map.iter() {
                let _ = writeln!(
                    out,
                    "busbar_listener_connections{{listener=\"{}\"}} {}",
                    escape(name),
                    c.open.load(Relaxed)
                );
            }
            let _ = writeln!(out, "# HELP busbar_listener_connections_total Client connections accepted.\n# TYPE busbar_listener_connections_total counter");
            for (name, c) in map.iter() {
                let _ = writeln!(
                    out,
                    "busbar_listener_connections_total{{listener=\"{}\"}} {}",
                    escape(name),
                    c.accepted.load(Relaxed)
                );
            }
            let _ = writeln!(out, "# HELP busbar_listener_bad_requests_total Requests the HTTP parser refused, by the status answered.\n# TYPE busbar_listener_bad_requests_total counter");
            for (name, c) in map.iter() {
                for (status, n) in BAD_REQUEST_STATUSES.iter().zip(&c.bad_requests) {
                    let _ = writeln!(
                        out,
                        "busbar_listener_bad_requests_total{{listener=\"{}\",status=\"{status}\"}} {}",
                        escape(name),
                        n.load(Relaxed)
                    );
                }
            }
            let _ = writeln!(out, "# HELP busbar_listener_not_found_total Requests no proxy serves, answered 404.\n# TYPE busbar_listener_not_found_total counter");
            for (name, c) in map.iter() {
                let _ = writeln!(
                    out,
                    "busbar_listener_not_found_total{{listener=\"{}\"}} {}",
                    escape(name),
                    c.not_found.load(Relaxed)
                );
            }
        }
        {
            let map = self.xslt.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(out, "# HELP busbar_xslt_transforms_total XSLT transforms by stylesheet and engine.\n# TYPE busbar_xslt_transforms_total counter");
            for (name, c) in map.iter() {
                for (engine, n) in [("fast", &c.fast), ("libxslt", &c.libxslt)] {
                    let _ = writeln!(
                        out,
                        "busbar_xslt_transforms_total{{stylesheet=\"{}\",engine=\"{engine}\"}} {}",
                        escape(name),
                        n.load(Relaxed)
                    );
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP busbar_buffered_request_bytes Bytes of request bodies steps hold in memory now.\n# TYPE busbar_buffered_request_bytes gauge\nbusbar_buffered_request_bytes {}\n# HELP busbar_buffered_request_bytes_limit The most they may hold at once (max_buffered_bodies).\n# TYPE busbar_buffered_request_bytes_limit gauge\nbusbar_buffered_request_bytes_limit {}\n# HELP busbar_buffered_request_refused_total Requests answered 503 because holding their body would pass max_buffered_bodies.\n# TYPE busbar_buffered_request_refused_total counter\nbusbar_buffered_request_refused_total {}",
            self.bodies.held(),
            self.bodies.limit(),
            self.bodies.refused()
        );
        let _ = writeln!(
            out,
            "# HELP busbar_reloads_total Config reloads by result.\n# TYPE busbar_reloads_total counter\nbusbar_reloads_total{{result=\"ok\"}} {}\nbusbar_reloads_total{{result=\"failed\"}} {}",
            self.reloads.load(Relaxed),
            self.reload_failures.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP busbar_access_log_lines_total Access log lines by outcome.\n# TYPE busbar_access_log_lines_total counter\nbusbar_access_log_lines_total{{outcome=\"written\"}} {}\nbusbar_access_log_lines_total{{outcome=\"dropped\"}} {}",
            self.access_log_lines.load(Relaxed),
            self.access_log_dropped.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP busbar_trace_spans_total Spans handed to the OTLP exporter by outcome.\n# TYPE busbar_trace_spans_total counter\nbusbar_trace_spans_total{{outcome=\"exported\"}} {}\nbusbar_trace_spans_total{{outcome=\"dropped\"}} {}",
            self.spans_exported.load(Relaxed),
            self.spans_dropped.load(Relaxed)
        );
        out
    }
}

impl Registry {
    fn render_upstreams(&self, out: &mut String) {
        let map = self.upstreams.lock().unwrap_or_else(|p| p.into_inner());
        let metrics = [
            ("attempts_total", "counter", "Attempts sent to this URL."),
            (
                "failures_total",
                "counter",
                "Attempts to this URL that failed.",
            ),
            ("pending", "gauge", "Requests in progress to this URL."),
            (
                "idle_connections",
                "gauge",
                "Keep-alive connections to this URL waiting in the pools.",
            ),
            (
                "breaker_state",
                "gauge",
                "Circuit breaker of this URL: 0 closed, 1 open, 2 half-open.",
            ),
            (
                "resent_total",
                "counter",
                "Requests sent again on a fresh connection after the back end closed a kept-alive one under them.",
            ),
        ];
        for (suffix, kind, help) in metrics {
            let name = format!("busbar_upstream_{suffix}");
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((endpoint, url), c) in map.iter() {
                let v = match suffix {
                    "attempts_total" => c.attempts.load(Relaxed) as i64,
                    "failures_total" => c.failures.load(Relaxed) as i64,
                    "pending" => c.pending.load(Relaxed),
                    "idle_connections" => c.idle.load(Relaxed),
                    "resent_total" => c.resent.load(Relaxed) as i64,
                    _ => c.breaker_state.get() as i64,
                };
                let _ = writeln!(
                    out,
                    "{name}{{endpoint=\"{}\",url=\"{}\"}} {v}",
                    escape(endpoint),
                    escape(url)
                );
            }
        }
    }
}

/// A label value escaped for the Prometheus text format (`\\`, `\"`, `\n`).
pub fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_of_what_no_config_holds_are_dropped_and_those_held_kept() {
        let r = Registry::default();
        let kept = r.proxy("Kept");
        kept.requests.fetch_add(3, Relaxed);
        r.proxy("Gone").requests.fetch_add(5, Relaxed);
        let url = r.upstream("e", "http://h/x");
        drop(r.upstream("gone", "http://h/y"));
        let text = r.render();
        assert!(
            text.contains("busbar_proxy_requests_total{proxy=\"Kept\"} 3"),
            "{text}"
        );
        assert!(!text.contains("Gone") && !text.contains("gone"), "{text}");
        assert!(text.contains("url=\"http://h/x\""), "{text}");
        // A name that comes back is a new series.
        assert_eq!(r.proxy("Gone").requests.load(Relaxed), 0);
        drop((kept, url));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let r = Registry::default();
        let c = r.proxy("P");
        c.latency.observe(Duration::from_micros(100));
        c.latency.observe(Duration::from_millis(3));
        c.requests.fetch_add(2, Relaxed);
        c.error(ErrorKind::ConnectRefused);
        let text = r.render();
        assert!(text.contains("busbar_proxy_latency_seconds_bucket{proxy=\"P\",le=\"0.00025\"} 1"));
        assert!(text.contains("busbar_proxy_latency_seconds_bucket{proxy=\"P\",le=\"0.005\"} 2"));
        assert!(text.contains("busbar_proxy_latency_seconds_count{proxy=\"P\"} 2"));
        assert!(text.contains("busbar_proxy_requests_total{proxy=\"P\"} 2"));
        assert!(text.contains("busbar_proxy_errors_total{proxy=\"P\",kind=\"connect_refused\"} 1"));
    }

    /// A scrape taken while other threads observe shows `+Inf` equal to `_count` and
    /// buckets that never decrease along `le`.
    #[test]
    fn a_histogram_scraped_under_load_is_self_consistent() {
        let r = Arc::new(Registry::default());
        let c = r.proxy("P");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let observers: Vec<_> = (0..2)
            .map(|t| {
                let (c, stop) = (c.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Relaxed) {
                        n += 1;
                        c.latency
                            .observe(Duration::from_micros((n * 37 + t) % 40_000));
                    }
                })
            })
            .collect();
        let value = |line: &str| -> u64 {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no value in {line}"))
        };
        // Scrape only while the observers are at work: on a busy machine they may not have
        // been scheduled yet.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while c.latency.count() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the observers never ran"
            );
            std::thread::yield_now();
        }
        let mut inconsistent = Vec::new();
        for _ in 0..300 {
            let mut text = String::new();
            c.latency.render(&mut text, "h", "proxy=\"P\"");
            let buckets: Vec<u64> = text
                .lines()
                .filter(|l| l.starts_with("h_bucket"))
                .map(value)
                .collect();
            let count = text
                .lines()
                .find(|l| l.starts_with("h_count"))
                .map(value)
                .unwrap_or_default();
            let monotonic = buckets.windows(2).all(|w| w[0] <= w[1]);
            if !monotonic || buckets.last() != Some(&count) {
                inconsistent.push(text);
            }
        }
        stop.store(true, Relaxed);
        for o in observers {
            o.join().expect("observer");
        }
        assert!(
            inconsistent.is_empty(),
            "{} of 300 scrapes inconsistent, first:\n{}",
            inconsistent.len(),
            inconsistent[0]
        );
    }

    #[test]
    fn an_open_breaker_whose_suspension_ended_shows_half_open() {
        let g = BreakerGauge::default();
        assert_eq!(g.get(), 0);
        g.set_open_until(clock_ms() + 60_000);
        assert_eq!(g.get(), 1);
        g.set_open_until(clock_ms());
        assert_eq!(g.get(), 2);
        g.set(0);
        assert_eq!(g.get(), 0);
    }

    #[test]
    fn endpoint_policy_and_url_metrics_are_rendered() {
        let r = Registry::default();
        let e = r.endpoint("svc");
        e.retries.fetch_add(3, Relaxed);
        e.breaker_state.set_open_until(u64::MAX);
        let u = r.upstream("svc", "http://<redacted>@h:1/p");
        u.attempts.fetch_add(7, Relaxed);
        u.breaker_state.set(2);
        let text = r.render();
        assert!(
            text.contains("busbar_endpoint_retries_total{endpoint=\"svc\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("busbar_endpoint_breaker_state{endpoint=\"svc\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "busbar_upstream_attempts_total{endpoint=\"svc\",url=\"http://<redacted>@h:1/p\"} 7"
        ));
        assert!(text.contains(
            "busbar_upstream_breaker_state{endpoint=\"svc\",url=\"http://<redacted>@h:1/p\"} 2"
        ));
    }

    #[test]
    fn responses_cut_short_are_rendered_per_endpoint() {
        let r = Registry::default();
        let svc = r.endpoint("svc");
        svc.responses_cut.fetch_add(2, Relaxed);
        let text = r.render();
        assert!(
            text.contains("busbar_endpoint_responses_cut_total{endpoint=\"svc\"} 2"),
            "{text}"
        );
    }
}
