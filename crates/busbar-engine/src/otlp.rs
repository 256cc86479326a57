//! Span export over OTLP (HTTP with protobuf bodies, or gRPC), from a thread of its own.
//!
//! Workers hand finished spans over a bounded queue and never wait: a full queue drops the
//! span and counts it. The exporter thread takes what queued every 50 ms and sends it in
//! batches of at most `batch` spans, over a connection kept between batches, with the OTLP protobuf messages of `opentelemetry-proto`; a batch the
//! collector refuses or does not answer within `timeout` is dropped and counted, never
//! retried into a growing backlog. At shutdown, [`Exporter::flush`] sends what is still queued,
//! waiting at most [`FLUSH_LIMIT`] (or `timeout`, when shorter).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use busbar_config::{OtlpConfig, OtlpProtocol, TracingConfig};
use busbar_core::metrics::Registry;
use busbar_core::trace::{AttrValue, SpanKind, SpanRecord, SpanSink};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;

use crate::endpoint::tls;
use crate::flush::FlushSignal;

/// How often the exporter thread takes the queued spans.
const POLL: Duration = Duration::from_millis(50);

/// The longest a shutdown waits for the last spans to be sent (the exporter's `timeout`, when
/// shorter): a collector that is down must not hold the exit up.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// The gRPC method of OTLP trace export.
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// A running exporter; a [`SpanSink`] for sampled exchanges.
#[derive(Debug)]
pub struct Exporter {
    tx: SyncSender<SpanRecord>,
    flush: Arc<FlushSignal>,
    /// How long [`Exporter::flush`] waits.
    flush_limit: Duration,
    metrics: Arc<Registry>,
    /// The config it runs with (a reload with the same config keeps it).
    pub config: TracingConfig,
}

impl SpanSink for Exporter {
    fn record(&self, span: SpanRecord) {
        match self.tx.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.metrics.spans_dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

impl Exporter {
    /// Starts the exporter thread of `config` (which has an `otlp` section); it ends once
    /// every handle is dropped and the queue is sent.
    pub fn start(
        config: &TracingConfig,
        otlp: &OtlpConfig,
        metrics: Arc<Registry>,
    ) -> Result<Exporter, String> {
        let target = Target::new(otlp)?;
        let (tx, rx) = sync_channel(otlp.queue.max(1));
        let resource = Resource {
            attributes: vec![
                kv("service.name", AttrValue::Str(config.service_name.clone())),
                kv(
                    "service.version",
                    AttrValue::Str(env!("CARGO_PKG_VERSION").to_owned()),
                ),
            ],
            ..Default::default()
        };
        let flush = Arc::new(FlushSignal::default());
        let worker = Worker {
            rx,
            flush: flush.clone(),
            target,
            resource,
            batch: otlp.batch.max(1),
            timeout: otlp.timeout.0,
            metrics: metrics.clone(),
            last_error_log: None,
        };
        std::thread::Builder::new()
            .name("busbar-otlp".into())
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start the exporter thread: {e}"))?;
        Ok(Exporter {
            tx,
            flush,
            flush_limit: otlp.timeout.0.min(FLUSH_LIMIT),
            metrics,
            config: config.clone(),
        })
    }

    /// Sends the spans queued now (the exporter would within 50 ms) and waits until they are
    /// sent or dropped, at most the exporter's `timeout` capped at [`FLUSH_LIMIT`]: at
    /// shutdown, so the spans of requests finished during the drain are exported. False when
    /// the limit passed first.
    pub fn flush(&self) -> bool {
        self.flush.flush(self.flush_limit)
    }
}

/// Where batches go, and how.
#[derive(Clone)]
struct Target {
    protocol: OtlpProtocol,
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<tls::TlsTarget>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Target {
    fn new(otlp: &OtlpConfig) -> Result<Target, String> {
        let uri: Uri = otlp
            .endpoint
            .parse()
            .map_err(|e| format!("invalid endpoint '{}': {e}", otlp.endpoint))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(format!("'{}': use http:// or https://", otlp.endpoint)),
        };
        let host = uri
            .host()
            .ok_or_else(|| format!("'{}': no host", otlp.endpoint))?
            .trim_matches(|c| c == '[' || c == ']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let uri = match otlp.protocol {
            OtlpProtocol::Http => uri,
            OtlpProtocol::Grpc => {
                let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
                let scheme = if https { "https" } else { "http" };
                format!("{scheme}://{authority}{GRPC_PATH}")
                    .parse()
                    .map_err(|e| format!("invalid endpoint '{}': {e}", otlp.endpoint))?
            }
        };
        let tls = if https {
            let client =
                tls::client(None, None, None).map_err(|(_, m)| format!("TLS setup: {m}"))?;
            let client = client.with_alpn(match otlp.protocol {
                OtlpProtocol::Http => vec![b"http/1.1".to_vec()],
                OtlpProtocol::Grpc => vec![b"h2".to_vec()],
            });
            Some(client.target(&host)?)
        } else {
            None
        };
        let mut headers = Vec::new();
        for (k, v) in &otlp.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("invalid header name '{k}'"))?;
            let value = HeaderValue::from_str(v.expose())
                .map_err(|_| format!("invalid value for header '{k}'"))?;
            headers.push((name, value));
        }
        Ok(Target {
            protocol: otlp.protocol,
            uri,
            host,
            port,
            tls,
            headers,
        })
    }
}

struct Worker {
    rx: Receiver<SpanRecord>,
    flush: Arc<FlushSignal>,
    target: Target,
    resource: Resource,
    batch: usize,
    timeout: Duration,
    metrics: Arc<Registry>,
    last_error_log: Option<Instant>,
}

impl Worker {
    fn run(mut self) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "span export disabled: cannot start its runtime");
                self.flush.close();
                return;
            }
        };
        let mut conn: Option<Conn> = None;
        loop {
            // The thread wakes on a timer and takes what queued meanwhile: producers never
            // wake it (a wake-up per span costs a worker more than recording the span). A
            // flush (at shutdown) wakes it early.
            let covered = self.flush.sleep(POLL);
            let mut spans = Vec::new();
            let mut open = true;
            loop {
                match self.rx.try_recv() {
                    Ok(s) => spans.push(s),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            while !spans.is_empty() {
                let rest = spans.split_off(spans.len().min(self.batch));
                let batch = std::mem::replace(&mut spans, rest);
                let n = batch.len() as u64;
                let body = self.encode(batch);
                let target = &self.target;
                let result = rt.block_on(async {
                    tokio::time::timeout(self.timeout, send(target, &mut conn, body))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
                });
                match result {
                    Ok(()) => {
                        self.metrics.spans_exported.fetch_add(n, Relaxed);
                    }
                    Err(e) => {
                        conn = None;
                        self.metrics.spans_dropped.fetch_add(n, Relaxed);
                        // One line a minute at most: a collector that is down must not flood
                        // the log.
                        let now = Instant::now();
                        if self
                            .last_error_log
                            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(60))
                        {
                            self.last_error_log = Some(now);
                            tracing::warn!(
                                endpoint = %self.target.uri,
                                "span export failed, {n} spans dropped: {e}"
                            );
                        }
                    }
                }
            }
            self.flush.done(covered);
            if !open {
                self.flush.close();
                return;
            }
        }
    }

    fn encode(&self, spans: Vec<SpanRecord>) -> Bytes {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "busbar".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans: spans.into_iter().map(to_proto).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        Bytes::from(request.encode_to_vec())
    }
}

fn kv(key: &str, value: AttrValue) -> KeyValue {
    let value = match value {
        AttrValue::Str(s) => any_value::Value::StringValue(s),
        AttrValue::Int(n) => any_value::Value::IntValue(n),
        AttrValue::Bool(b) => any_value::Value::BoolValue(b),
    };
    KeyValue {
        key: key.to_owned(),
        key_strindex: 0,
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A span in OTLP's shape. Flags carry the sampled bit and whether the parent is remote
/// (OTLP's `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` 0x100 and `…_IS_REMOTE_MASK` 0x200).
fn to_proto(s: SpanRecord) -> Span {
    let kind = match s.kind {
        SpanKind::Server => span::SpanKind::Server,
        SpanKind::Internal => span::SpanKind::Internal,
        SpanKind::Client => span::SpanKind::Client,
    };
    let status = match &s.error {
        Some(message) => Status {
            message: message.clone(),
            code: status::StatusCode::Error as i32,
        },
        None => Status::default(),
    };
    let flags = 0x01 | 0x100 | if s.remote_parent { 0x200 } else { 0 };
    Span {
        trace_id: s.trace_id.0.to_be_bytes().to_vec(),
        span_id: s.span_id.0.to_be_bytes().to_vec(),
        parent_span_id: s
            .parent
            .map(|p| p.0.to_be_bytes().to_vec())
            .unwrap_or_default(),
        flags,
        name: s.name,
        kind: kind as i32,
        start_time_unix_nano: nanos(s.start),
        end_time_unix_nano: nanos(s.end),
        attributes: s.attributes.into_iter().map(|(k, v)| kv(k, v)).collect(),
        status: Some(status),
        ..Default::default()
    }
}

/// A connection to the collector, kept between batches.
enum Conn {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

async fn connect(target: &Target) -> Result<Conn, String> {
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    match &target.tls {
        Some(t) => {
            let stream = t.connect(tcp).await.map_err(|e| e.message)?;
            handshake(target, TokioIo::new(stream)).await
        }
        None => handshake(target, TokioIo::new(tcp)).await,
    }
}

async fn handshake<IO>(target: &Target, io: IO) -> Result<Conn, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    match target.protocol {
        OtlpProtocol::Http => {
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
            tokio::spawn(conn);
            Ok(Conn::Http1(sender))
        }
        OtlpProtocol::Grpc => {
            let (sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
            tokio::spawn(conn);
            Ok(Conn::Http2(sender))
        }
    }
}

/// Sends one batch, on the kept connection when it is still usable. A kept connection the
/// collector closed while idle fails the first request: that one is sent again once on a new
/// connection.
async fn send(target: &Target, conn: &mut Option<Conn>, body: Bytes) -> Result<(), String> {
    let usable = match conn.as_mut() {
        Some(Conn::Http1(s)) => s.ready().await.is_ok(),
        Some(Conn::Http2(s)) => s.ready().await.is_ok(),
        None => false,
    };
    if usable {
        match send_on(target, conn, body.clone()).await {
            Err(SendError::Connection(_)) => {}
            other => return other.map_err(SendError::into_message),
        }
    }
    *conn = Some(connect(target).await?);
    send_on(target, conn, body)
        .await
        .map_err(SendError::into_message)
}

/// Why a batch was not accepted.
enum SendError {
    /// The connection failed before an answer: another connection may do.
    Connection(String),
    /// The collector answered, and refused.
    Refused(String),
}

impl SendError {
    fn into_message(self) -> String {
        match self {
            SendError::Connection(m) | SendError::Refused(m) => m,
        }
    }
}

async fn send_on(target: &Target, conn: &mut Option<Conn>, body: Bytes) -> Result<(), SendError> {
    use SendError::{Connection, Refused};
    let authority = target
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    match conn.as_mut() {
        None => Err(Connection("no connection".into())),
        Some(Conn::Http1(sender)) => {
            let path = target
                .uri
                .path_and_query()
                .map_or("/v1/traces", |p| p.as_str());
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header(http::header::HOST, authority)
                .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                .body(Full::new(body))
                .map_err(|e| Refused(e.to_string()))?;
            for (k, v) in &target.headers {
                req.headers_mut().insert(k.clone(), v.clone());
            }
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| Connection(format!("request failed: {e}")))?;
            let status = resp.status();
            let _ = resp.into_body().collect().await;
            if status.is_success() {
                Ok(())
            } else {
                Err(Refused(format!("the collector answered {status}")))
            }
        }
        Some(Conn::Http2(sender)) => {
            // gRPC framing: one uncompressed message with its 4-byte big-endian length.
            let mut framed = Vec::with_capacity(body.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
            framed.extend_from_slice(&body);
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(target.uri.clone())
                .header(http::header::CONTENT_TYPE, "application/grpc")
                .header(http::header::TE, "trailers")
                .body(Full::new(Bytes::from(framed)))
                .map_err(|e| Refused(e.to_string()))?;
            for (k, v) in &target.headers {
                req.headers_mut().insert(k.clone(), v.clone());
            }
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| Connection(format!("request failed: {e}")))?;
            if !resp.status().is_success() {
                return Err(Refused(format!("the collector answered {}", resp.status())));
            }
            // The outcome is `grpc-status`, in the headers (an immediate error) or trailers.
            let mut grpc_status = resp
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut message = resp
                .headers()
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let collected = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Connection(format!("answer failed: {e}")))?;
            if let Some(trailers) = collected.trailers() {
                if let Some(s) = trailers.get("grpc-status").and_then(|v| v.to_str().ok()) {
                    grpc_status = Some(s.to_owned());
                }
                if let Some(m) = trailers.get("grpc-message").and_then(|v| v.to_str().ok()) {
                    message = Some(m.to_owned());
                }
            }
            match grpc_status.as_deref() {
                Some("0") => Ok(()),
                Some(code) => Err(Refused(format!(
                    "the collector answered gRPC status {code}: {}",
                    message.unwrap_or_default()
                ))),
                None => Err(Refused("the collector's answer has no grpc-status".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use busbar_core::trace::{SpanId, TraceId};

    #[test]
    fn spans_keep_their_ids_parent_kind_times_and_error() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let p = to_proto(SpanRecord {
            trace_id: TraceId(0x0102),
            span_id: SpanId(0x0304),
            parent: Some(SpanId(0x0506)),
            remote_parent: true,
            name: "POST P".into(),
            kind: SpanKind::Server,
            start: t0,
            end: t0 + Duration::from_millis(3),
            attributes: vec![("http.response.status_code", AttrValue::Int(502))],
            error: Some("refused".into()),
        });
        assert_eq!(p.trace_id.len(), 16);
        assert_eq!(p.trace_id[15], 0x02);
        assert_eq!(p.trace_id[14], 0x01);
        assert_eq!(p.span_id, vec![0, 0, 0, 0, 0, 0, 3, 4]);
        assert_eq!(p.parent_span_id, vec![0, 0, 0, 0, 0, 0, 5, 6]);
        assert_eq!(p.kind, span::SpanKind::Server as i32);
        assert_eq!(p.end_time_unix_nano - p.start_time_unix_nano, 3_000_000);
        assert_eq!(p.flags & 0x300, 0x300);
        let status = p.status.expect("status");
        assert_eq!(status.code, status::StatusCode::Error as i32);
        assert_eq!(p.attributes[0].key, "http.response.status_code");
    }
}
