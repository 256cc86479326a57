//! W3C Trace Context (`traceparent`, `tracestate`): the trace an exchange belongs to, taken
//! from the request when it carries one and started here otherwise, and the header a back-end
//! call carries so the back end's spans join the same trace.
//!
//! Propagation is always on and costs a header parse and a random id per request and per
//! back-end attempt; recording spans (for export) is decided by the sampled flag and the
//! engine's tracing config, elsewhere.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The `traceparent` header.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The `tracestate` header.
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A 128-bit trace id (never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub u128);

/// A 64-bit span id (never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub u64);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::fmt::Display for SpanId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A `traceparent` value (version 00): always 55 bytes of visible ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent([u8; 55]);

impl Traceparent {
    /// The value's bytes, as they go on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Lower-case hex of `bytes` into `out` (twice as long).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xf)];
    }
}

impl TraceId {
    /// A new random trace id.
    pub fn random() -> Self {
        loop {
            let id = (u128::from(random_u64()) << 64) | u128::from(random_u64());
            if id != 0 {
                return TraceId(id);
            }
        }
    }
}

impl SpanId {
    /// A new random span id.
    pub fn random() -> Self {
        loop {
            let id = random_u64();
            if id != 0 {
                return SpanId(id);
            }
        }
    }
}

/// What a span stands for (OTLP's span kinds that busbar records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A request a client sent to busbar.
    Server,
    /// A step.
    Internal,
    /// An attempt to a back end.
    Client,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// Text.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_owned())
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}

impl From<i64> for AttrValue {
    fn from(n: i64) -> Self {
        AttrValue::Int(n)
    }
}

impl From<u64> for AttrValue {
    fn from(n: u64) -> Self {
        AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<bool> for AttrValue {
    fn from(b: bool) -> Self {
        AttrValue::Bool(b)
    }
}

/// A finished span, handed to a [`SpanSink`].
#[derive(Debug, Clone)]
pub struct SpanRecord {
    /// The trace.
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// Its parent, if any.
    pub parent: Option<SpanId>,
    /// True when the parent is the caller's (from `traceparent`).
    pub remote_parent: bool,
    /// The span's name (`POST /api/x`, `route`, `call stock`).
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// When it started.
    pub start: std::time::SystemTime,
    /// When it ended.
    pub end: std::time::SystemTime,
    /// Attributes (OpenTelemetry semantic-convention names where one exists).
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// The error, when the span failed.
    pub error: Option<String>,
}

/// Where recorded spans go (the OTLP exporter). Must never block.
pub trait SpanSink: Send + Sync + std::fmt::Debug {
    /// Takes a finished span.
    fn record(&self, span: SpanRecord);
}

/// A span being recorded: [`Recording::finish`] hands it to the sink. One dropped without
/// being finished (its work abandoned: the client went away, or shutdown gave up on it) is
/// handed over too, ended then, with an error status and `error.type` `cancelled`, so a trace
/// never lacks the spans of the steps and attempts a request was in.
#[derive(Debug)]
pub struct Recording {
    sink: std::sync::Arc<dyn SpanSink>,
    /// `None` once handed over.
    record: Option<SpanRecord>,
}

/// The status message of a span whose work was abandoned.
pub const CANCELLED: &str = "cancelled: the request ended before this work did";

impl Recording {
    fn new(sink: std::sync::Arc<dyn SpanSink>, record: SpanRecord) -> Self {
        Recording {
            sink,
            record: Some(record),
        }
    }

    /// The span's id.
    pub fn id(&self) -> SpanId {
        self.record.as_ref().map_or(SpanId(0), |r| r.span_id)
    }

    /// Adds an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<AttrValue>) {
        if let Some(r) = &mut self.record {
            r.attributes.push((key, value.into()));
        }
    }

    /// Marks the span failed.
    pub fn fail(&mut self, error: impl Into<String>) {
        if let Some(r) = &mut self.record {
            r.error = Some(error.into());
        }
    }

    /// Ends the span now and hands it over.
    pub fn finish(mut self) {
        self.hand_over();
    }

    fn hand_over(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.end = std::time::SystemTime::now();
            self.sink.record(record);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(r) = &mut self.record {
            r.attributes
                .push(("error.type", AttrValue::from("cancelled")));
            r.error = Some(CANCELLED.to_owned());
        }
        self.hand_over();
    }
}

/// The trace of one exchange.
#[derive(Clone)]
pub struct TraceContext {
    /// The trace id: the caller's, or a new one.
    pub trace_id: TraceId,
    /// The caller's span (the `parent-id` of its `traceparent`), when it sent one.
    pub remote_parent: Option<SpanId>,
    /// This exchange's server span.
    pub span_id: SpanId,
    /// The span new child spans hang under: the server span, or the step running now.
    pub current: SpanId,
    /// The sampled flag: whether spans of this trace are recorded (and exported).
    pub sampled: bool,
    /// The caller's `tracestate`, passed on unchanged.
    pub tracestate: Option<HeaderValue>,
    /// Where spans of this exchange are recorded: set only for a sampled trace when export
    /// is configured.
    pub sink: Option<std::sync::Arc<dyn SpanSink>>,
    /// False for a detached context (propagation off): back ends get no `traceparent`.
    pub propagated: bool,
}

impl std::fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceContext")
            .field("trace_id", &self.trace_id)
            .field("span_id", &self.span_id)
            .field("sampled", &self.sampled)
            .field("recording", &self.sink.is_some())
            .finish()
    }
}

impl TraceContext {
    /// Starts recording a span under the current one (when this exchange records spans):
    /// a step's or a back-end attempt's. `id` is the span's id when it was chosen already
    /// (a back-end attempt's, sent in `traceparent`).
    pub fn start_span(
        &self,
        name: impl Into<String>,
        kind: SpanKind,
        id: Option<SpanId>,
    ) -> Option<Recording> {
        let sink = self.sink.as_ref()?;
        Some(Recording::new(
            sink.clone(),
            SpanRecord {
                trace_id: self.trace_id,
                span_id: id.unwrap_or_else(SpanId::random),
                parent: Some(self.current),
                remote_parent: false,
                name: name.into(),
                kind,
                start: std::time::SystemTime::now(),
                end: std::time::SystemTime::now(),
                attributes: Vec::new(),
                error: None,
            },
        ))
    }

    /// Starts recording this exchange's server span (parented by the caller's span); `name`
    /// is asked for only when the span is recorded.
    pub fn start_server_span(&self, name: impl FnOnce() -> String) -> Option<Recording> {
        let sink = self.sink.as_ref()?;
        Some(Recording::new(
            sink.clone(),
            SpanRecord {
                trace_id: self.trace_id,
                span_id: self.span_id,
                parent: self.remote_parent,
                remote_parent: self.remote_parent.is_some(),
                name: name(),
                kind: SpanKind::Server,
                start: std::time::SystemTime::now(),
                end: std::time::SystemTime::now(),
                attributes: Vec::new(),
                error: None,
            },
        ))
    }

    /// The context of a request: continues the trace of a valid `traceparent` (its sampled
    /// flag decides recording), or starts a new trace, sampled when `sample` says so.
    pub fn from_headers(headers: &HeaderMap, sample: impl FnOnce(TraceId) -> bool) -> Self {
        let span_id = SpanId::random();
        let mut values = headers.get_all(&TRACEPARENT).iter();
        let parsed = match (values.next(), values.next()) {
            // Two traceparent headers are ambiguous: start a new trace (W3C §4.3).
            (Some(one), None) => parse_traceparent(one.as_bytes()),
            _ => None,
        };
        match parsed {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                remote_parent: Some(parent),
                span_id,
                current: span_id,
                sampled: flags & 1 == 1,
                tracestate: tracestate(headers),
                sink: None,
                propagated: true,
            },
            None => {
                let trace_id = TraceId::random();
                TraceContext {
                    trace_id,
                    remote_parent: None,
                    span_id,
                    current: span_id,
                    sampled: sample(trace_id),
                    tracestate: None,
                    sink: None,
                    propagated: true,
                }
            }
        }
    }

    /// A context for work that did not come from a request (tests, internal calls).
    pub fn detached() -> Self {
        let span_id = SpanId::random();
        TraceContext {
            trace_id: TraceId::random(),
            remote_parent: None,
            span_id,
            current: span_id,
            sampled: false,
            tracestate: None,
            sink: None,
            propagated: false,
        }
    }

    /// The `traceparent` value naming `span` (a back-end attempt's client span) as the parent.
    pub fn traceparent(&self, span: SpanId) -> HeaderValue {
        HeaderValue::from_bytes(self.traceparent_bytes(span).as_bytes())
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The same value as [`TraceContext::traceparent`], written in place: no allocation and
    /// no validation pass, for a back-end request head written straight to its buffer.
    pub fn traceparent_bytes(&self, span: SpanId) -> Traceparent {
        let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
        hex_into(&mut out[3..35], &self.trace_id.0.to_be_bytes());
        hex_into(&mut out[36..52], &span.0.to_be_bytes());
        if self.sampled {
            out[54] = b'1';
        }
        Traceparent(out)
    }

    /// Sets `traceparent` (child of `span`) and the caller's `tracestate` on an outgoing
    /// request, replacing whatever the client sent.
    pub fn inject(&self, headers: &mut HeaderMap, span: SpanId) {
        headers.insert(TRACEPARENT.clone(), self.traceparent(span));
        match &self.tracestate {
            Some(state) => {
                headers.insert(TRACESTATE.clone(), state.clone());
            }
            None => {
                if headers.contains_key(&TRACESTATE) {
                    headers.remove(&TRACESTATE);
                }
            }
        }
    }
}

/// The longest `tracestate` passed on: W3C Trace Context §3.3.1.5 has vendors propagate at
/// least 512 characters; 32 members of at most 256 characters each, with separators, fit.
const TRACESTATE_MAX: usize = 8192;

/// The caller's `tracestate`: several headers are joined with commas (W3C §3.3.1); a value
/// longer than [`TRACESTATE_MAX`] is cut to fit ([`truncate_tracestate`]); an unreadable one is
/// dropped.
fn tracestate(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut values = headers.get_all(&TRACESTATE).iter();
    let first = values.next()?;
    let Some(second) = values.next() else {
        // One header, the usual case: passed on as it came (a reference-counted copy).
        if first.len() <= TRACESTATE_MAX {
            return Some(first.clone());
        }
        return truncate_tracestate(first.as_bytes());
    };
    let mut joined = Vec::with_capacity(first.len() + second.len() + 1);
    joined.extend_from_slice(first.as_bytes());
    for v in std::iter::once(second).chain(values) {
        joined.push(b',');
        joined.extend_from_slice(v.as_bytes());
    }
    if joined.len() > TRACESTATE_MAX {
        return truncate_tracestate(&joined);
    }
    HeaderValue::from_bytes(&joined).ok()
}

/// Cuts a `tracestate` longer than [`TRACESTATE_MAX`] as W3C Trace Context §3.3.1.5 says:
/// whole list-members are removed, first those longer than 128 characters (the rightmost
/// first), then from the end of the list, until it fits. Empty members are left out; `None`
/// when nothing is left.
fn truncate_tracestate(value: &[u8]) -> Option<HeaderValue> {
    let mut members: Vec<&[u8]> = value
        .split(|&b| b == b',')
        .map(|m| m.trim_ascii())
        .filter(|m| !m.is_empty())
        .collect();
    let length = |members: &[&[u8]]| {
        members.iter().map(|m| m.len()).sum::<usize>() + members.len().saturating_sub(1)
    };
    while length(&members) > TRACESTATE_MAX {
        match members.iter().rposition(|m| m.len() > 128) {
            Some(long) => {
                members.remove(long);
            }
            None => break,
        }
    }
    while length(&members) > TRACESTATE_MAX {
        members.pop();
    }
    if members.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&members.join(&b","[..])).ok()
}

/// Parses a `traceparent` value: `version-traceid-parentid-flags`, lower-case hex. Version
/// `ff` and all-zero ids are invalid; a higher version than 00 is read by its first four
/// fields when it is at least as long (W3C §3.2.4).
pub fn parse_traceparent(value: &[u8]) -> Option<(TraceId, SpanId, u8)> {
    if value.len() < 55 {
        return None;
    }
    let version = hex(&value[0..2])? as u8;
    if version == 0xff || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    if version == 0 && value.len() != 55 {
        return None;
    }
    if version > 0 && value.len() > 55 && value[55] != b'-' {
        return None;
    }
    let trace = hex(&value[3..35])?;
    let span = u64::try_from(hex(&value[36..52])?).ok()?;
    let flags = hex(&value[53..55])? as u8;
    if trace == 0 || span == 0 {
        return None;
    }
    Some((TraceId(trace), SpanId(span), flags))
}

/// Lower-case hex digits only (upper case is invalid in traceparent).
fn hex(digits: &[u8]) -> Option<u128> {
    let mut n: u128 = 0;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        n = (n << 4) | u128::from(v);
    }
    Some(n)
}

thread_local! {
    static STATE: Cell<u64> = Cell::new({
        // Seeded from the standard library's per-thread random SipHash keys.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x9e37_79b9_7f4a_7c15);
        h.finish()
    });
}

/// A fast random 64-bit number (SplitMix64 over a randomly seeded per-thread state): ids
/// that do not collide, not secrets.
fn random_u64() -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_continued_with_its_flag_and_tracestate() {
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(GOOD));
        h.append(&TRACESTATE, HeaderValue::from_static("a=1"));
        h.append(&TRACESTATE, HeaderValue::from_static("b=2"));
        let t = TraceContext::from_headers(&h, |_| false);
        assert_eq!(t.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.remote_parent, Some(SpanId(0x00f0_67aa_0ba9_02b7)));
        assert!(t.sampled);
        assert_ne!(t.span_id, SpanId(0x00f0_67aa_0ba9_02b7));
        let mut out = HeaderMap::new();
        out.insert(&TRACESTATE, HeaderValue::from_static("stale=1"));
        let child = SpanId(0xabc);
        t.inject(&mut out, child);
        assert_eq!(
            out[&TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-01"
        );
        assert_eq!(out[&TRACESTATE], "a=1,b=2");
    }

    #[test]
    fn an_oversized_tracestate_loses_whole_members_long_ones_first_then_from_the_right() {
        let member = |key: usize, len: usize| format!("k{key:02}={}", "v".repeat(len - 4));
        let forwarded = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(&TRACEPARENT, HeaderValue::from_static(GOOD));
            h.insert(&TRACESTATE, HeaderValue::from_str(value).expect("value"));
            let mut out = HeaderMap::new();
            TraceContext::from_headers(&h, |_| false).inject(&mut out, SpanId(1));
            out.get(&TRACESTATE)
                .map(|v| v.to_str().expect("text").to_owned())
        };
        // 60 members of 100 characters and three of 1,000 (at 5, 30 and 50): 9,062 bytes.
        let mut members: Vec<String> = (0..60).map(|k| member(k, 100)).collect();
        for at in [50, 30, 5] {
            members.insert(at, member(90 + at, 1000));
        }
        let value = members.join(",");
        assert!(value.len() > TRACESTATE_MAX);
        let got = forwarded(&value).expect("a tracestate is passed on");
        // The rightmost long member is enough to fit.
        let mut want = members.clone();
        want.remove(52);
        assert_eq!(got, want.join(","));
        assert!(got.len() <= TRACESTATE_MAX);

        // No long members: removed from the end until it fits.
        let members: Vec<String> = (0..90).map(|k| member(k, 100)).collect();
        let got = forwarded(&members.join(", ")).expect("a tracestate is passed on");
        assert_eq!(got, members[..81].join(","));

        // Up to the limit, a value is passed on byte for byte.
        let members: Vec<String> = (0..81).map(|k| member(k, 100)).collect();
        let exact = format!("{},k99={}", members.join(","), "v".repeat(7));
        assert_eq!(exact.len(), TRACESTATE_MAX);
        assert_eq!(forwarded(&exact).as_deref(), Some(exact.as_str()));
    }

    #[test]
    fn invalid_traceparents_start_a_new_trace() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for b in bad {
            assert_eq!(parse_traceparent(b.as_bytes()), None, "{b}");
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(b) {
                h.insert(&TRACEPARENT, v);
            }
            let t = TraceContext::from_headers(&h, |_| true);
            assert_eq!(t.remote_parent, None, "{b}");
            assert!(t.sampled, "a new trace takes the sampler's decision");
        }
        // A later version with more fields is read by its first four.
        let v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-ever";
        assert!(parse_traceparent(v1.as_bytes()).is_some());
        // Two traceparent headers: ambiguous, a new trace.
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static(GOOD));
        h.append(&TRACEPARENT, HeaderValue::from_static(GOOD));
        assert_eq!(
            TraceContext::from_headers(&h, |_| false).remote_parent,
            None
        );
    }

    #[test]
    fn traceparent_is_written_in_lower_case_hex_with_the_flag() {
        let mut t = TraceContext::detached();
        t.trace_id = TraceId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(
            t.traceparent(SpanId(0xa1b2_c3d4_e5f6_0718)),
            "00-0123456789abcdeffedcba9876543210-a1b2c3d4e5f60718-00"
        );
        t.sampled = true;
        let v = t.traceparent(SpanId(1));
        assert_eq!(v, "00-0123456789abcdeffedcba9876543210-0000000000000001-01");
        assert!(parse_traceparent(v.as_bytes()).is_some());
        assert_eq!(t.traceparent_bytes(SpanId(1)).as_bytes(), v.as_bytes());
        t.sampled = false;
        let raw = t.traceparent_bytes(SpanId(u64::MAX));
        assert_eq!(
            raw.as_bytes(),
            b"00-0123456789abcdeffedcba9876543210-ffffffffffffffff-00"
        );
    }

    #[derive(Debug, Default)]
    struct Collect(std::sync::Mutex<Vec<SpanRecord>>);

    impl SpanSink for Collect {
        fn record(&self, span: SpanRecord) {
            self.0.lock().expect("lock").push(span);
        }
    }

    #[test]
    fn a_span_dropped_unfinished_is_handed_over_as_cancelled() {
        let sink = std::sync::Arc::new(Collect::default());
        let mut t = TraceContext::detached();
        t.sink = Some(sink.clone());
        let mut finished = t
            .start_span("call", SpanKind::Internal, None)
            .expect("span");
        finished.set("busbar.step.kind", "call");
        finished.finish();
        let mut dropped = t.start_span("POST", SpanKind::Client, None).expect("span");
        dropped.set("busbar.endpoint", "b");
        drop(dropped);
        let got = sink.0.lock().expect("lock");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].error, None);
        assert!(!got[0].attributes.iter().any(|(k, _)| *k == "error.type"));
        assert_eq!(got[1].error.as_deref(), Some(CANCELLED));
        assert!(got[1]
            .attributes
            .contains(&("error.type", AttrValue::from("cancelled"))));
        assert!(got[1]
            .attributes
            .contains(&("busbar.endpoint", AttrValue::from("b"))));
        assert!(got[1].end >= got[1].start);
    }

    #[test]
    fn ids_are_not_zero_and_do_not_repeat() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(SpanId::random().0));
        }
        assert_ne!(TraceId::random(), TraceId::random());
    }
}
