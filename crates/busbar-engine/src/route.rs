//! The `route` step: content-based routing on HTTP headers and on the body (XPath).
//!
//! A forward-only XPath (the subset `busbar-xml` compiles) is evaluated while the body
//! streams: the step reads only as many chunks as the decision needs, keeps them, and the
//! body then forwards "what was read + the rest" untouched. What was read is checked; with
//! `xml_check: whole` the rest is checked for well-formedness on its way too (a malformed
//! tail aborts the forwarded message), at the cost of tokenizing every byte. Any other XPath
//! 1.0 expression buffers the body and runs on libxml2. Which one is used is decided when the
//! config is built, never per request.

use std::sync::Arc;

use busbar_core::body::TailCheck;
use busbar_core::{Blame, ErrorKind, Exchange, MediationError};
use busbar_libxml::{Document, XPathExpr, XPathValue};
use busbar_xml::{Matcher, StreamPath, Test, WellFormed, XmlError};
use http::HeaderName;

use crate::steps::{BuiltStep, StepCx};

/// Bodies larger than this are parsed for a full-XPath condition on the blocking pool, so a
/// large document does not stall the other connections of the worker's event loop.
const OFF_LOOP_BYTES: usize = 64 * 1024;

/// A built `route` step.
#[derive(Debug)]
pub struct RouteStep {
    /// The `{ when, then }` cases, in order.
    pub cases: Vec<(Condition, Vec<BuiltStep>)>,
    /// The `otherwise` steps, if any.
    pub otherwise: Option<Vec<BuiltStep>>,
}

/// A built condition.
#[derive(Debug)]
pub enum Condition {
    /// An HTTP header of the current message.
    Header(HeaderName, Test),
    /// A forward-only XPath, evaluated while the body streams.
    Streaming(StreamPath, Test),
    /// Any XPath 1.0 expression, over the buffered body.
    Full(Arc<XPathExpr>, Test),
}

impl Condition {
    /// Evaluates the condition on the current message.
    pub async fn holds(&self, ex: &mut Exchange, cx: &StepCx) -> Result<bool, MediationError> {
        match self {
            Condition::Header(name, test) => Ok(header_holds(ex, name, test)),
            Condition::Streaming(path, test) => streaming_holds(ex, path, test, cx).await,
            Condition::Full(expr, test) => full_holds(ex, expr.clone(), test, cx.max_body).await,
        }
    }
}

fn header_holds(ex: &Exchange, name: &HeaderName, test: &Test) -> bool {
    let mut values = ex.headers().get_all(name).iter();
    match test {
        Test::Exists => values.next().is_some(),
        Test::Equals(s) => values.any(|v| v.as_bytes() == s.as_bytes()),
        Test::Matches(re) => values.any(|v| v.to_str().is_ok_and(|v| re.is_match(v))),
    }
}

fn xml_error(e: XmlError) -> MediationError {
    let reason = match &e {
        XmlError::Doctype { .. } => "XML with a DOCTYPE is not accepted".to_owned(),
        XmlError::Limit { .. } => format!("XML message exceeds a limit: {e}"),
        _ => format!("Malformed XML: {e}"),
    };
    MediationError::new(ErrorKind::BadRequest, Blame::Client, reason).with_source(e)
}

/// The rest of an early-decided document must still be well-formed.
struct WellFormedTail(WellFormed);

impl TailCheck for WellFormedTail {
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.0
            .feed(chunk)
            .map_err(|e| format!("malformed XML: {e}"))
    }
    fn finish(&mut self) -> Result<(), String> {
        self.0.finish().map_err(|e| format!("malformed XML: {e}"))
    }
}

async fn streaming_holds(
    ex: &mut Exchange,
    path: &StreamPath,
    test: &Test,
    cx: &StepCx,
) -> Result<bool, MediationError> {
    let max_body = cx.max_body;
    let mut matcher = Matcher::new(path, test);
    // Chunks an earlier step already read are fed first (cheap `Bytes` clones).
    let known: Vec<bytes::Bytes> = ex.body_mut().read_chunks().cloned().collect();
    let mut fed: Vec<bytes::Bytes> = Vec::with_capacity(known.len() + 4);
    let mut decided = None;
    for chunk in known {
        let d = matcher.feed(&chunk).map_err(xml_error)?;
        fed.push(chunk);
        if d.is_some() {
            decided = d;
            break;
        }
    }
    let body = ex.body_mut();
    let answer = match decided {
        Some(answer) => answer,
        None => loop {
            match body.read_chunk(max_body).await? {
                Some(chunk) => {
                    let d = matcher.feed(&chunk).map_err(xml_error)?;
                    fed.push(chunk);
                    if let Some(answer) = d {
                        break answer;
                    }
                }
                None => break matcher.finish().map_err(xml_error)?,
            }
        },
    };
    if !cx.check_xml_tail || body.has_tail_check() {
        return Ok(answer);
    }
    // Decided before the end: what follows the deciding token must still be well-formed.
    // Feed the well-formedness checker the bytes already read past that token, then let
    // the body check the rest as it streams through.
    let consumed = matcher.bytes_consumed();
    let mut wf = WellFormedTail(matcher.into_well_formed());
    let mut offset = 0usize;
    for chunk in &fed {
        let end = offset + chunk.len();
        if end > consumed {
            let from = consumed.saturating_sub(offset);
            wf.feed(&chunk[from..]).map_err(|m| bad_xml(&m))?;
        }
        offset = end;
    }
    body.set_tail_check(Box::new(wf))?;
    Ok(answer)
}

fn bad_xml(msg: &str) -> MediationError {
    MediationError::new(
        ErrorKind::BadRequest,
        Blame::Client,
        format!("Malformed XML: {msg}"),
    )
}

async fn full_holds(
    ex: &mut Exchange,
    expr: Arc<XPathExpr>,
    test: &Test,
    max_body: u64,
) -> Result<bool, MediationError> {
    let bytes = ex.body_mut().bytes(max_body).await?;
    let eval = move || -> Result<XPathValue, busbar_libxml::LibxmlError> {
        let doc = Document::parse(&bytes)?;
        doc.eval(&expr)
    };
    let value = if ex.body_mut().exact_len().unwrap_or(0) as usize > OFF_LOOP_BYTES {
        tokio::task::spawn_blocking(eval)
            .await
            .map_err(|e| MediationError::internal("XPath evaluation failed").with_source(e))?
    } else {
        eval()
    };
    let value = value.map_err(|e| {
        let reason = match e.kind {
            busbar_libxml::ErrorKind::Forbidden => "XML with a DOCTYPE is not accepted".to_owned(),
            _ => format!("Malformed XML: {}", e.message.trim()),
        };
        MediationError::new(ErrorKind::BadRequest, Blame::Client, reason).with_source(e)
    })?;
    Ok(match (test, &value) {
        (Test::Exists, v) => v.to_xpath_boolean(),
        (Test::Equals(s), XPathValue::NodeSet(nodes)) => nodes.iter().any(|n| n == s),
        (Test::Matches(re), XPathValue::NodeSet(nodes)) => nodes.iter().any(|n| re.is_match(n)),
        (Test::Equals(s), v) => v.to_xpath_string() == *s,
        (Test::Matches(re), v) => re.is_match(&v.to_xpath_string()),
    })
}
