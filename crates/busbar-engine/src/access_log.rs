//! The access log: one line per request, written by a thread of its own that takes the
//! queued records every 50 ms. Workers hand a record over a bounded queue and never wait: when the writer falls behind (a slow disk),
//! records are dropped and counted. SIGUSR1 (through [`AccessLog::reopen`]) makes the writer
//! reopen its file, for logrotate. At shutdown, [`AccessLog::flush`] has the lines still
//! queued written before the process exits.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use busbar_config::{AccessLogConfig, AccessLogFormat};
use busbar_core::metrics::Registry;
use busbar_core::trace::TraceId;
use http::{Method, Version};

use crate::flush::FlushSignal;

/// What one request leaves in the access log.
#[derive(Debug, Clone)]
pub struct AccessRecord {
    /// When the request arrived.
    pub time: SystemTime,
    /// The client's address.
    pub client: Option<SocketAddr>,
    /// Request method; `None` for a request the HTTP parser refused, whose request line is
    /// not known (nor its target and version).
    pub method: Option<Method>,
    /// Request target as received (path and query); empty when `method` is `None`.
    pub target: String,
    /// HTTP version of the request.
    pub version: Option<Version>,
    /// The proxy that served it.
    pub proxy: Arc<str>,
    /// Response status.
    pub status: u16,
    /// Request body bytes received.
    pub bytes_in: u64,
    /// Response body bytes sent.
    pub bytes_out: u64,
    /// From the request's arrival to the last byte of the response.
    pub total: Duration,
    /// Time spent waiting for back ends.
    pub backend: Duration,
    /// The W3C trace id (none for a request the HTTP parser refused).
    pub trace_id: Option<TraceId>,
    /// True when the response body was not sent whole (the client left, a back end cut it).
    pub incomplete: bool,
}

impl AccessRecord {
    /// A request the HTTP parser refused from `client` (answered `status`, 400 or 431, by
    /// the HTTP layer): only the client, the status and the time are known.
    pub fn unparsed(client: Option<SocketAddr>, status: u16) -> AccessRecord {
        AccessRecord {
            time: SystemTime::now(),
            client,
            method: None,
            target: String::new(),
            version: None,
            proxy: Arc::from("-"),
            status,
            bytes_in: 0,
            bytes_out: 0,
            total: Duration::ZERO,
            backend: Duration::ZERO,
            trace_id: None,
            incomplete: false,
        }
    }
}

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Stdout,
    File(PathBuf),
}

/// A running access log.
#[derive(Debug)]
pub struct AccessLog {
    tx: SyncSender<AccessRecord>,
    reopen: Arc<AtomicBool>,
    flush: Arc<FlushSignal>,
    metrics: Arc<Registry>,
    /// The config it runs with (a reload with the same config keeps it).
    pub config: AccessLogConfig,
}

impl AccessLog {
    /// Opens the log (relative paths are relative to `base`) and starts its writer thread,
    /// which ends once every handle is dropped and the queue is written.
    pub fn start(
        config: &AccessLogConfig,
        base: &Path,
        metrics: Arc<Registry>,
    ) -> std::io::Result<AccessLog> {
        let target = match config.path.as_str() {
            "stdout" | "-" => Target::Stdout,
            p => Target::File(base.join(p)),
        };
        let out = open(&target)?;
        let (tx, rx) = sync_channel(config.buffer.max(1));
        let reopen = Arc::new(AtomicBool::new(false));
        let flush = Arc::new(FlushSignal::default());
        let writer = Writer {
            rx,
            target,
            out,
            format: config.format,
            reopen: reopen.clone(),
            flush: flush.clone(),
            metrics: metrics.clone(),
        };
        std::thread::Builder::new()
            .name("busbar-access-log".into())
            .spawn(move || writer.run())?;
        Ok(AccessLog {
            tx,
            reopen,
            flush,
            metrics,
            config: config.clone(),
        })
    }

    /// Queues one record; drops it (and counts it) when the queue is full.
    pub fn log(&self, record: AccessRecord) {
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.metrics.access_log_dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Makes the writer reopen its file before the next line (after logrotate moved it).
    pub fn reopen(&self) {
        self.reopen.store(true, Relaxed);
    }

    /// Writes out the lines queued now (the writer would within 50 ms) and waits until they
    /// are, at most `limit`: at shutdown, so the requests finished during the drain are in the
    /// log. False when the limit passed first (a disk or pipe that does not take the lines).
    pub fn flush(&self, limit: Duration) -> bool {
        self.flush.flush(limit)
    }
}

enum Out {
    Stdout(std::io::Stdout),
    File(File),
}

impl Out {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Stdout(s) => {
                let mut lock = s.lock();
                lock.write_all(bytes)?;
                lock.flush()
            }
            Out::File(f) => f.write_all(bytes),
        }
    }
}

fn open(target: &Target) -> std::io::Result<Out> {
    Ok(match target {
        Target::Stdout => Out::Stdout(std::io::stdout()),
        Target::File(path) => Out::File(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
        ),
    })
}

struct Writer {
    rx: Receiver<AccessRecord>,
    target: Target,
    out: Out,
    format: AccessLogFormat,
    reopen: Arc<AtomicBool>,
    flush: Arc<FlushSignal>,
    metrics: Arc<Registry>,
}

impl Writer {
    fn run(mut self) {
        let mut buf = String::with_capacity(64 * 1024);
        loop {
            // A timer, not the queue, wakes the writer: a wake-up per line would cost the
            // workers more than writing the line. A flush (at shutdown) wakes it early.
            let covered = self.flush.sleep(Duration::from_millis(50));
            if self.reopen.swap(false, Relaxed) {
                match open(&self.target) {
                    Ok(out) => self.out = out,
                    Err(e) => tracing::error!(error = %e, "cannot reopen the access log"),
                }
            }
            let mut open_queue = true;
            loop {
                // Whole lines, in writes of about 64 KiB.
                let mut lines = 0u64;
                while buf.len() < 60 * 1024 {
                    match self.rx.try_recv() {
                        Ok(r) => {
                            format_line(&mut buf, &r, self.format);
                            lines += 1;
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            open_queue = false;
                            break;
                        }
                    }
                }
                if lines == 0 {
                    break;
                }
                match self.out.write_all(buf.as_bytes()) {
                    Ok(()) => {
                        self.metrics.access_log_lines.fetch_add(lines, Relaxed);
                    }
                    Err(e) => {
                        self.metrics.access_log_dropped.fetch_add(lines, Relaxed);
                        tracing::error!(error = %e, "cannot write the access log");
                    }
                }
                buf.clear();
            }
            self.flush.done(covered);
            if !open_queue {
                self.flush.close();
                return;
            }
        }
    }
}

/// Appends one record as a line.
pub fn format_line(out: &mut String, r: &AccessRecord, format: AccessLogFormat) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    match format {
        AccessLogFormat::Json => {
            let client = r.client.map(|c| c.to_string());
            // A request the HTTP parser refused has no known request line: null fields.
            let known = r.method.is_some();
            let line = serde_json::json!({
                "time": rfc3339(r.time),
                "client": client,
                "method": r.method.as_ref().map(Method::as_str),
                "target": known.then_some(&r.target),
                "proto": r.version.map(|v| format!("{v:?}")),
                "proxy": &*r.proxy,
                "status": r.status,
                "bytes_in": r.bytes_in,
                "bytes_out": r.bytes_out,
                "duration_ms": round3(ms(r.total)),
                "backend_ms": round3(ms(r.backend)),
                "trace_id": r.trace_id.map(|t| t.to_string()),
                "complete": !r.incomplete,
            });
            let _ = writeln!(out, "{line}");
        }
        AccessLogFormat::Common => {
            let client = r
                .client
                .map_or_else(|| "-".to_owned(), |c| c.ip().to_string());
            // The target is the client's: quote-safe so a line always parses. A request the
            // HTTP parser refused has no known request line: `"-"`, as nginx writes it.
            let request = match (&r.method, r.version) {
                (Some(method), Some(version)) => {
                    let target: String = r
                        .target
                        .chars()
                        .map(|c| if c == '"' || c.is_control() { '_' } else { c })
                        .collect();
                    format!("{method} {target} {version:?}")
                }
                _ => "-".to_owned(),
            };
            let trace_id = r.trace_id.map_or_else(|| "-".to_owned(), |t| t.to_string());
            // The proxy's name is one unquoted field: whitespace, quotes and control
            // characters in it would split the line or shift the fields after it.
            let proxy: String = r
                .proxy
                .chars()
                .map(|c| {
                    if c == '"' || c.is_whitespace() || c.is_control() {
                        '_'
                    } else {
                        c
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "{client} - - [{}] \"{request}\" {} {} {} {:.3} {:.3} {} {trace_id}{}",
                clf_time(r.time),
                r.status,
                r.bytes_out,
                proxy,
                ms(r.total),
                ms(r.backend),
                r.bytes_in,
                if r.incomplete { " incomplete" } else { "" },
            );
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// (year, month, day, hour, minute, second, millisecond) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = busbar_core::calendar::civil_from_days(days);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
        d.subsec_millis(),
    )
}

/// `2026-11-24T15:49:01.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, ms) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

/// `24/Nov/2026:15:49:01 +0000`.
fn clf_time(t: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s, _) = civil(t);
    let month = MONTHS[(mo as usize).saturating_sub(1).min(11)];
    format!("{d:02}/{month}/{y:04}:{h:02}:{mi:02}:{s:02} +0000")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AccessRecord {
        AccessRecord {
            // 2026-11-24T15:49:01.250Z
            time: UNIX_EPOCH + Duration::from_millis(1_795_535_341_250),
            client: Some("10.0.0.7:51234".parse().expect("addr")),
            method: Some(Method::POST),
            target: "/api/x?q=\"1\"".into(),
            version: Some(Version::HTTP_11),
            proxy: Arc::from("P"),
            status: 200,
            bytes_in: 10,
            bytes_out: 20,
            total: Duration::from_micros(1500),
            backend: Duration::from_micros(1000),
            trace_id: Some(TraceId(0xabc)),
            incomplete: false,
        }
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(record().time),
            "2026-11-24T15:49:01.250Z",
            "a date checked with `date -u -d @1795535341`"
        );
        // Leap day.
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(clf_time(record().time), "24/Nov/2026:15:49:01 +0000");
    }

    #[test]
    fn json_lines_parse_and_carry_every_field() {
        let mut out = String::new();
        format_line(&mut out, &record(), AccessLogFormat::Json);
        assert!(out.ends_with('\n') && out.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["target"], "/api/x?q=\"1\"");
        assert_eq!(v["status"], 200);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["backend_ms"], 1.0);
        assert_eq!(v["trace_id"], "00000000000000000000000000000abc");
        assert_eq!(v["client"], "10.0.0.7:51234");
        assert_eq!(v["proto"], "HTTP/1.1");
    }

    #[test]
    fn a_request_the_parser_refused_has_null_request_fields_and_a_dash_in_common_format() {
        let mut r = AccessRecord::unparsed(Some("10.0.0.7:51234".parse().expect("addr")), 431);
        r.time = record().time;
        let mut out = String::new();
        format_line(&mut out, &r, AccessLogFormat::Json);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        for null in ["method", "target", "proto", "trace_id"] {
            assert!(v[null].is_null(), "{null}: {out}");
        }
        assert_eq!(v["status"], 431);
        assert_eq!(v["proxy"], "-");
        assert_eq!(v["client"], "10.0.0.7:51234");
        let mut out = String::new();
        format_line(&mut out, &r, AccessLogFormat::Common);
        assert_eq!(
            out,
            "10.0.0.7 - - [24/Nov/2026:15:49:01 +0000] \"-\" 431 0 - 0.000 0.000 0 -\n"
        );
    }

    #[test]
    fn common_lines_keep_a_proxy_name_one_field() {
        let mut out = String::new();
        let mut r = record();
        r.proxy = "Order Service\n\"x\"\t".into();
        r.target = "/a".into();
        format_line(&mut out, &r, AccessLogFormat::Common);
        assert_eq!(
            out,
            "10.0.0.7 - - [24/Nov/2026:15:49:01 +0000] \"POST /a HTTP/1.1\" 200 20 Order_Service__x__ 1.500 1.000 10 00000000000000000000000000000abc\n"
        );
    }

    #[test]
    fn common_lines_keep_quotes_out_of_the_request_field() {
        let mut out = String::new();
        let mut r = record();
        r.target = "/a\"b\nc".into();
        format_line(&mut out, &r, AccessLogFormat::Common);
        assert_eq!(
            out,
            "10.0.0.7 - - [24/Nov/2026:15:49:01 +0000] \"POST /a_b_c HTTP/1.1\" 200 20 P 1.500 1.000 10 00000000000000000000000000000abc\n"
        );
    }
}
