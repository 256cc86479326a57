//! The `route` step: content-based routing on HTTP headers and on the body (XPath, JSONPath).
//! Config:
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
use busbar_core::{Blame, ErrorKind, Exchange, Flow, MediationError, Phase, Test};
use busbar_json::{Decision, Found, Query, Scanner, SimplePath};
use busbar_libxml::{XPathExpr, XPathValue};
use busbar_xml::{Matcher, StreamPath, WellFormed, XmlError};
use http::HeaderName;

use super::json;
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
    /// A JSONPath of names and indexes, decided while the body streams.
    JsonStreaming(SimplePath, JsonCondition),
    /// Any JSONPath, over the parsed body.
    JsonFull(Arc<Query>, JsonCondition),
}

/// What a JSON condition checks on the first node its path selects.
#[derive(Debug)]
pub struct JsonCondition {
    /// The path as written (for messages).
    text: Arc<str>,
    test: JsonTest,
    /// Nothing at the path is a 400 rather than a case that does not hold.
    required: bool,
}

/// The test of a JSON condition.
#[derive(Debug)]
enum JsonTest {
    Exists,
    Equals(String),
    Matches(regex::Regex),
    Number(NumOp, f64),
}

#[derive(Debug, Clone, Copy)]
enum NumOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl JsonTest {
    fn compare(op: NumOp, n: f64, to: f64) -> bool {
        match op {
            NumOp::Eq => n == to,
            NumOp::Ne => n != to,
            NumOp::Lt => n < to,
            NumOp::Le => n <= to,
            NumOp::Gt => n > to,
            NumOp::Ge => n >= to,
        }
    }

    fn holds_found(&self, f: &Found) -> bool {
        match (self, f) {
            (JsonTest::Exists, _) => true,
            (JsonTest::Equals(s), Found::String(v)) => s == v,
            (JsonTest::Matches(re), Found::String(v)) => re.is_match(v),
            (JsonTest::Number(op, to), Found::Number(text)) => text
                .parse::<f64>()
                .is_ok_and(|n| Self::compare(*op, n, *to)),
            _ => false,
        }
    }

    fn holds_value(&self, v: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (self, v) {
            (JsonTest::Exists, _) => true,
            (JsonTest::Equals(s), Value::String(v)) => s == v,
            (JsonTest::Matches(re), Value::String(v)) => re.is_match(v),
            (JsonTest::Number(op, to), Value::Number(n)) => {
                n.as_f64().is_some_and(|n| Self::compare(*op, n, *to))
            }
            _ => false,
        }
    }
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
    let given = [
        when.header.is_some(),
        when.xpath.is_some(),
        when.json.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(cx.fail(None, at, "give exactly one of 'header', 'xpath' or 'json'"));
    }
    let numeric = [
        (when.eq, NumOp::Eq),
        (when.ne, NumOp::Ne),
        (when.lt, NumOp::Lt),
        (when.le, NumOp::Le),
        (when.gt, NumOp::Gt),
        (when.ge, NumOp::Ge),
    ];
    let numeric: Vec<(f64, NumOp)> = numeric
        .into_iter()
        .filter_map(|(v, op)| v.map(|v| (v, op)))
        .collect();
    if let Some(json) = &when.json {
        let tests = numeric.len()
            + usize::from(when.equals.is_some())
            + usize::from(when.matches.is_some());
        if tests > 1 {
            return Err(cx.fail(
                line_of(json),
                format!("{at}.json"),
                "give at most one test: equals, matches, eq, ne, lt, le, gt or ge",
            ));
        }
        let test = match (&test, numeric.first()) {
            (_, Some((v, op))) => JsonTest::Number(*op, *v),
            (Test::Equals(s), None) => JsonTest::Equals(s.clone()),
            (Test::Matches(re), None) => JsonTest::Matches(re.clone()),
            (Test::Exists, None) => JsonTest::Exists,
        };
        let query = Query::compile(&json.value).map_err(|e| {
            cx.fail(
                line_of(json),
                format!("{at}.json"),
                format!("invalid JSONPath '{}': {e}", json.value),
            )
        })?;
        let condition = JsonCondition {
            text: json.value.as_str().into(),
            test,
            required: when.required,
        };
        return Ok(match query.simple() {
            Some(path) => Condition::JsonStreaming(path.clone(), condition),
            None => Condition::JsonFull(Arc::new(query), condition),
        });
    }
    if !numeric.is_empty() || when.required {
        return Err(cx.fail(
            None,
            at,
            "eq, ne, lt, le, gt, ge and required apply to 'json' conditions only",
        ));
    }
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
        return Err(cx.fail(None, at, "give exactly one of 'header', 'xpath' or 'json'"));
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
        let phase = ex.phase();
        self.evaluate(ex, cx)
            .await
            .map_err(|e| the_answers_fault(e, phase))
    }

    async fn evaluate(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<bool, MediationError> {
        match self {
            Condition::Header(name, test) => Ok(header_holds(ex, name, test)),
            Condition::Streaming(path, test) => streaming_holds(ex, path, test, cx).await,
            Condition::Full(expr, test) => full_holds(ex, expr.clone(), test, cx).await,
            Condition::JsonStreaming(path, c) => json_streaming_holds(ex, path, c, cx).await,
            Condition::JsonFull(query, c) => {
                let value = json::parsed(ex, cx).await?;
                match query.first(&value) {
                    Some(node) => Ok(c.test.holds_value(node)),
                    None => c.absent(),
                }
            }
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

impl JsonCondition {
    /// Nothing at the path: the case does not hold, or the request is refused.
    fn absent(&self) -> Result<bool, MediationError> {
        if self.required {
            return Err(MediationError::new(
                ErrorKind::BadRequest,
                Blame::Client,
                format!("JSON field {} is missing", self.text),
            ));
        }
        Ok(false)
    }
}

/// The rest of an early-decided JSON document, checked as it streams (`json_check: whole`):
/// the scanner that decided goes on, so a duplicate of a name read before the decision is
/// caught too.
struct JsonTail(Scanner);

impl TailCheck for JsonTail {
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.0
            .feed(chunk)
            .map(|_| ())
            .map_err(|e| format!("malformed JSON: {e}"))
    }
    fn finish(&mut self) -> Result<(), String> {
        self.0
            .finish()
            .map(|_| ())
            .map_err(|e| format!("malformed JSON: {e}"))
    }
}

/// Decides a simple JSONPath while the body streams: reads chunks until the scanner decides,
/// keeps them, and leaves the body as "what was read + the rest". What was read is checked
/// strictly (duplicate names included); with `json_check: whole` so is the rest, as it streams.
async fn json_streaming_holds(
    ex: &mut Exchange,
    path: &SimplePath,
    c: &JsonCondition,
    cx: &StepCx<'_>,
) -> Result<bool, MediationError> {
    let max_body = cx.max_body();
    let phase = ex.phase();
    let mut scanner = Scanner::with_path(path, json::limits(cx));
    let bad = |e: busbar_json::JsonError| json::malformed(phase, &e);
    let known: Vec<bytes::Bytes> = ex.body_mut().read_chunks().cloned().collect();
    let mut fed: Vec<bytes::Bytes> = Vec::with_capacity(known.len() + 4);
    let mut decided = None;
    for chunk in known {
        let d = scanner.feed(&chunk).map_err(bad)?;
        fed.push(chunk);
        if d.is_some() {
            decided = d;
            break;
        }
    }
    let body = ex.body_mut();
    let mut ended = false;
    let decision = match decided {
        Some(d) => d,
        None => loop {
            match body.read_chunk(max_body).await? {
                Some(chunk) => {
                    let d = scanner.feed(&chunk).map_err(bad)?;
                    fed.push(chunk);
                    if let Some(d) = d {
                        break d;
                    }
                }
                None => {
                    ended = true;
                    break scanner.finish().map_err(bad)?.unwrap_or(Decision::Absent);
                }
            }
        },
    };
    if !ended && cx.proxy.check_json_tail && !body.has_tail_check() {
        // What was read past the deciding byte, then the rest as it streams.
        let consumed = scanner.bytes_consumed();
        let mut offset = 0u64;
        for chunk in &fed {
            let end = offset + chunk.len() as u64;
            if end > consumed {
                let from = consumed.saturating_sub(offset) as usize;
                scanner.feed(&chunk[from..]).map_err(bad)?;
            }
            offset = end;
        }
        body.set_tail_check(Box::new(JsonTail(scanner)))?;
    }
    match decision {
        Decision::Found(found) => Ok(c.test.holds_found(&found)),
        Decision::Absent => c.absent(),
    }
}

/// A message a condition cannot read is the client's fault in a request, and the back end's
/// in its answer: 502, saying so.
fn the_answers_fault(e: MediationError, phase: Phase) -> MediationError {
    if matches!(phase, Phase::Response)
        && e.blame == Blame::Client
        && e.kind == ErrorKind::BadRequest
    {
        let (kind, blame) = super::senders_fault(phase);
        MediationError {
            kind,
            blame,
            reason: format!("The back end's answer: {}", e.reason).into(),
            ..e
        }
    } else {
        e
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
            busbar_libxml::ErrorKind::Parse => format!("Malformed XML: {}", e.message.trim()),
            // The document parsed, so the expression failed on it: the config's fault, not
            // the message's. What libxml2 said goes to the log only.
            _ => {
                return MediationError::internal("The XPath condition could not be evaluated")
                    .with_source(e)
            }
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

    const JSON_ROUTE: &str = "sequences:\n  s:\n    - route:\n        - when: { json: '$.tier', equals: premium, required: true }\n          then: [ { respond: { body: premium } } ]\n        - when: { json: \"$..[?(@.symbol == 'GOOG')].price\", eq: 42.8 }\n          then: [ { respond: { body: goog } } ]\n        - when: { json: '$.n', ge: 10 }\n          then: [ { respond: { body: big } } ]\n        - when: { json: '$.s', matches: '^x+$' }\n          then: [ { respond: { body: xs } } ]\n        - otherwise: [ { respond: { body: other } } ]\n";

    fn json_answer(body: &str) -> Result<String, String> {
        super::super::testing::answer(JSON_ROUTE, body)
    }

    #[test]
    fn json_conditions_test_the_first_node_by_type() {
        assert_eq!(
            json_answer(r#"{"tier":"premium"}"#).as_deref(),
            Ok("premium")
        );
        assert_eq!(json_answer(r#"{"tier":"gold"}"#).as_deref(), Ok("other"));
        // A number or a string of digits is not the string "premium"; numbers compare as
        // numbers, strings never do.
        assert_eq!(json_answer(r#"{"tier":1,"n":10.0}"#).as_deref(), Ok("big"));
        assert_eq!(
            json_answer(r#"{"tier":1,"n":"10"}"#).as_deref(),
            Ok("other")
        );
        assert_eq!(
            json_answer(r#"{"tier":1,"n":9.99}"#).as_deref(),
            Ok("other")
        );
        assert_eq!(
            json_answer(r#"{"tier":null,"s":"xxx"}"#).as_deref(),
            Ok("xs")
        );
        let goog = r#"{"tier":"t","payload":{"order":[{"symbol":"IBM","price":42.8},{"symbol":"GOOG","price":42.80}]}}"#;
        assert_eq!(json_answer(goog).as_deref(), Ok("goog"));
        let as_text = r#"{"tier":"t","order":[{"symbol":"GOOG","price":"42.8"}]}"#;
        assert_eq!(json_answer(as_text).as_deref(), Ok("other"));
        // Only the first GOOG price counts.
        let second =
            r#"{"tier":"t","o":[{"symbol":"GOOG","price":1},{"symbol":"GOOG","price":42.8}]}"#;
        assert_eq!(json_answer(second).as_deref(), Ok("other"));
    }

    #[test]
    fn a_required_field_that_is_missing_or_a_bad_document_is_a_400() {
        assert_eq!(
            json_answer(r#"{"other":1}"#),
            Err("JSON field $.tier is missing".to_owned())
        );
        assert_eq!(
            json_answer(r#"["tier"]"#),
            Err("JSON field $.tier is missing".to_owned())
        );
        // Bad in the part read before the decision (with `json_check: read`, what follows the
        // deciding value is not read here).
        for bad in [
            r#"{"tier":"prem"#,
            r#"{"tier":prem}"#,
            "",
            r#"{"x":1,"x":2,"tier":"premium"}"#,
            "{\"tier\":\"\u{1}\"}",
        ] {
            let e = json_answer(bad).err().unwrap_or_default();
            assert!(e.starts_with("Malformed JSON"), "{bad}: {e}");
        }
        assert_eq!(
            json_answer(r#"{"tier":"premium""#).as_deref(),
            Ok("premium")
        );
    }

    #[test]
    fn json_condition_errors_are_build_errors_at_their_key() {
        for (when, want) in [
            (
                "{ json: '$[', equals: a }",
                "route[0].when.json: invalid JSONPath",
            ),
            (
                "{ json: '$.a', equals: a, eq: 1 }",
                "route[0].when.json: give at most one test",
            ),
            ("{ header: x, eq: 1 }", "route[0].when: eq, ne, lt"),
            (
                "{ header: x, json: '$.a' }",
                "route[0].when: give exactly one of",
            ),
        ] {
            let yaml = format!(
                "sequences:\n  s:\n    - route:\n        - when: {when}\n          then: [ {{ respond: {{}} }} ]\n"
            );
            let errors = build(&loaded(&yaml, &std::env::temp_dir()))
                .err()
                .unwrap_or_default();
            assert_eq!(errors.len(), 1, "{when}: {errors:?}");
            assert!(errors[0].contains(want), "{when}: {errors:?}");
        }
    }
}
