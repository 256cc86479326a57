//! The `route` step: content-based routing on HTTP headers and on the body (XPath). Config:
//! `busbar_config::RouteCase` (a list of `{ when, then }` cases and an optional last
//! `{ otherwise }`).
//!
//! A forward-only XPath (the subset `busbar-xml` compiles) is evaluated while the body
//! streams: the step reads only as many chunks as the decision needs, keeps them, and the
//! body then forwards "what was read + the rest" untouched. What was read is checked; with
//! `xml_check: whole` the rest is checked for well-formedness on its way too (a malformed
//! tail aborts the forwarded message), at the cost of tokenizing every byte. Any other XPath
//! 1.0 expression buffers the body and runs on libxml2, through the exchange's cached
//! document (a later full-XPath route or `xslt` on the same message does not parse again)
//! and the bounded CPU pool. Which one is used is decided when the config is built, never
//! per request.

use std::sync::Arc;

use busbar_config::{line_of, RouteCase};
use busbar_core::body::TailCheck;
use busbar_core::{Blame, ErrorKind, Exchange, Flow, MediationError, Test};
use busbar_libxml::{XPathExpr, XPathValue};
use busbar_xml::{Matcher, StreamPath, WellFormed, XmlError};
use http::HeaderName;

use super::xslt::with_document;
use super::{run_nested, Apply, BuildCx, BuiltStep, Failed, StepCx};

/// A built `route` step.
#[derive(Debug)]
pub struct RouteStep {
    /// The `{ when, then }` cases, in order.
    cases: Vec<(Condition, Vec<BuiltStep>)>,
    /// The `otherwise` steps, if any.
    otherwise: Option<Vec<BuiltStep>>,
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

impl RouteStep {
    /// Compiles every condition; the cases' steps were built from `StepConfig::children()`
    /// (one list per case: its `then` or its `otherwise`).
    pub fn build(cases: &[RouteCase], cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let mut lists = cx.take_children().into_iter();
        let mut built = RouteStep {
            cases: Vec::new(),
            otherwise: None,
        };
        let mut failed = None;
        for (j, case) in cases.iter().enumerate() {
            let steps = lists.next().unwrap_or_default();
            if case.otherwise.is_some() {
                built.otherwise = Some(steps);
                continue;
            }
            let Some(when) = &case.when else { continue };
            match condition(when, cx, &format!("{here}[{j}].when")) {
                Ok(c) => built.cases.push((c, steps)),
                Err(f) => failed = Some(f),
            }
        }
        match failed {
            Some(f) => Err(f),
            None => Ok(built),
        }
    }
}

impl Apply for RouteStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        for (condition, steps) in &self.cases {
            if condition.holds(ex, cx).await? {
                return run_nested(steps, ex, cx.proxy).await;
            }
        }
        match &self.otherwise {
            Some(steps) => run_nested(steps, ex, cx.proxy).await,
            None => Ok(Flow::Continue),
        }
    }
}

fn condition(
    when: &busbar_config::Condition,
    cx: &mut BuildCx<'_>,
    at: &str,
) -> Result<Condition, Failed> {
    let test = if let Some(s) = &when.equals {
        Test::Equals(s.clone())
    } else if let Some(re) = &when.matches {
        match regex::Regex::new(&re.value) {
            Ok(r) => Test::Matches(r),
            Err(e) => {
                return Err(cx.fail(
                    line_of(re),
                    format!("{at}.matches"),
                    format!("invalid regex: {e}"),
                ))
            }
        }
    } else {
        Test::Exists
    };
    if let Some(h) = &when.header {
        return match HeaderName::from_bytes(h.value.as_bytes()) {
            Ok(name) => Ok(Condition::Header(name, test)),
            Err(_) => Err(cx.fail(
                line_of(h),
                format!("{at}.header"),
                format!("invalid header name '{}'", h.value),
            )),
        };
    }
    let Some(xpath) = when.xpath.as_ref() else {
        return Err(cx.fail(None, at, "give exactly one of 'header' or 'xpath'"));
    };
    let ns = busbar_xml::Namespaces::from_pairs(cx.namespaces.iter())
        .map_err(|e| cx.fail(None, "namespaces", e.to_string()))?;
    match busbar_xml::compile(&xpath.value, &ns) {
        Ok(path) => Ok(Condition::Streaming(path, test)),
        Err(busbar_xml::CompileError::NotStreamable { .. }) => {
            let pairs: Vec<(String, String)> = cx
                .namespaces
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            match XPathExpr::compile(&xpath.value, &pairs) {
                Ok(expr) => Ok(Condition::Full(Arc::new(expr), test)),
                Err(e) => Err(cx.fail(
                    line_of(xpath),
                    format!("{at}.xpath"),
                    e.message.trim().to_owned(),
                )),
            }
        }
        Err(e) => Err(cx.fail(line_of(xpath), format!("{at}.xpath"), e.to_string())),
    }
}

impl Condition {
    /// Evaluates the condition on the current message.
    pub async fn holds(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<bool, MediationError> {
        match self {
            Condition::Header(name, test) => Ok(header_holds(ex, name, test)),
            Condition::Streaming(path, test) => streaming_holds(ex, path, test, cx).await,
            Condition::Full(expr, test) => full_holds(ex, expr.clone(), test, cx).await,
        }
    }
}

fn header_holds(ex: &Exchange, name: &HeaderName, test: &Test) -> bool {
    let mut values = ex.headers().get_all(name).iter();
    match test {
        Test::Exists => values.next().is_some(),
        Test::Equals(s) => values.any(|v| v.as_bytes() == s.as_bytes()),
        Test::Matches(_) => values.any(|v| v.to_str().is_ok_and(|v| test.accepts(v))),
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
    cx: &StepCx<'_>,
) -> Result<bool, MediationError> {
    let max_body = cx.max_body();
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
    if !cx.proxy.check_xml_tail || body.has_tail_check() {
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
    cx: &StepCx<'_>,
) -> Result<bool, MediationError> {
    let value = with_document(ex, cx, move |doc| doc.eval(&expr)).await?;
    let value = value.map_err(|e| {
        let reason = match e.kind {
            busbar_libxml::ErrorKind::Forbidden => "XML with a DOCTYPE is not accepted".to_owned(),
            busbar_libxml::ErrorKind::Limit => format!("XML limit exceeded: {}", e.message.trim()),
            _ => format!("Malformed XML: {}", e.message.trim()),
        };
        MediationError::new(ErrorKind::BadRequest, Blame::Client, reason).with_source(e)
    })?;
    Ok(match (test, &value) {
        (Test::Exists, v) => v.to_xpath_boolean(),
        (_, XPathValue::NodeSet(nodes)) => nodes.iter().any(|n| test.accepts(n)),
        (_, v) => test.accepts(&v.to_xpath_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::xslt::ParsedXml;

    const ROUTE: &str = "namespaces: { m: 'urn:m' }\nsequences:\n  s:\n    - route:\n        - when: { header: x-r, equals: a }\n          then: [ { respond: { body: by-header } } ]\n        - when: { xpath: '//m:sym', equals: IBM }\n          then: [ { respond: { body: by-stream } } ]\n        - when: { xpath: 'count(//m:sym) > 2' }\n          then: [ { respond: { body: by-full } } ]\n        - when: { xpath: 'count(//m:sym) = 2' }\n          then: [ { respond: { body: by-full-2 } } ]\n        - otherwise: [ { fault: { status: 400, reason: none } } ]\n";

    fn answer(headers: &[(&str, &str)], body: &str) -> Result<String, String> {
        let steps = build(&loaded(ROUTE, &std::env::temp_dir())).map_err(|e| format!("{e:?}"))?;
        let mut ex = exchange(headers, body.as_bytes());
        match run_steps(&steps, &mut ex) {
            Ok(_) => Ok(String::from_utf8_lossy(&body_of(&mut ex)).into_owned()),
            Err(e) => Err(format!("{}: {}", e.step.as_deref().unwrap_or(""), e.reason)),
        }
    }

    #[test]
    fn each_kind_of_condition_picks_its_case_in_order() {
        let one = "<m:o xmlns:m='urn:m'><m:sym>IBM</m:sym></m:o>";
        let two = "<m:o xmlns:m='urn:m'><m:sym>X</m:sym><m:sym>Y</m:sym></m:o>";
        let three = "<m:o xmlns:m='urn:m'><m:sym>X</m:sym><m:sym>Y</m:sym><m:sym>Z</m:sym></m:o>";
        assert_eq!(answer(&[("x-r", "a")], one).as_deref(), Ok("by-header"));
        assert_eq!(answer(&[("x-r", "b")], one).as_deref(), Ok("by-stream"));
        assert_eq!(answer(&[], three).as_deref(), Ok("by-full"));
        assert_eq!(answer(&[], two).as_deref(), Ok("by-full-2"));
        assert_eq!(
            answer(&[], "<m:o xmlns:m='urn:m'/>"),
            Err("sequences.s[0].route[4].otherwise[0].fault: none".to_owned())
        );
    }

    #[test]
    fn malformed_xml_is_the_clients_error() {
        let e = answer(&[], "<m:o xmlns:m='urn:m'><m:sym>X</m:o>");
        assert!(
            e.as_ref().is_err_and(|e| e.contains("Malformed XML")),
            "{e:?}"
        );
    }

    #[test]
    fn full_xpath_conditions_parse_the_body_once() {
        let steps =
            build(&loaded(ROUTE, &std::env::temp_dir())).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"<m:o xmlns:m='urn:m'><m:sym>X</m:sym></m:o>");
        assert!(run_steps(&steps, &mut ex).is_err());
        // Both full-XPath cases ran; the document they shared is still cached.
        assert!(ex.take_view::<ParsedXml>().is_some());
    }

    #[test]
    fn a_bad_xpath_is_a_build_error_with_its_path_and_line() {
        let yaml = "sequences:\n  s:\n    - route:\n        - when: { xpath: '//a[' }\n          then: [ { respond: {} } ]\n";
        let errors = build(&loaded(yaml, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:6: sequences.s[0].route[0].when.xpath: "),
            "{errors:?}"
        );
    }
}
