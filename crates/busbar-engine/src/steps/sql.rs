//! The `sql` step: one statement, or several in a transaction, on a database from
//! `databases:`, with every `:name` bound from the request (path and query parameters,
//! headers, JSON body fields, variables) or a literal, never spliced into the SQL. The
//! result becomes the response: rows as a JSON array (streamed when long), one row as an
//! object (404 when none), or `{"affected": n, "id": …}`. Config: `busbar_config::SqlConfig`;
//! docs/databases.md.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use busbar_config::{
    line_of, Literal, NotFoundConfig, NumericConfig, QueryText, SqlConfig, SqlParamConfig,
    SqlResult, SqlType,
};
use busbar_core::body::Origin;
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError};
use busbar_json::Query as JsonPath;
use busbar_sql::{Database, DbError, ErrorClass, NumericAs, Output, Shape, Statement, Value};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::Value as Json;
use tokio::sync::mpsc;

use super::{json, Apply, BuildCx, Failed, StepCx};

/// A built `sql` step.
#[derive(Debug)]
pub struct SqlStep {
    db: Arc<Database>,
    statements: Vec<Arc<Statement>>,
    /// For each statement, where each position's value comes from.
    binds: Vec<Vec<Arc<Param>>>,
    shape: Shape,
    null_when_none: bool,
    status: StatusCode,
    numeric: NumericAs,
    uses_json: bool,
}

/// Where one parameter's value comes from, and what it must be.
#[derive(Debug)]
struct Param {
    name: String,
    source: Source,
    ty: SqlType,
    default: Option<Value>,
    nullable: bool,
    min: Option<i64>,
    max: Option<i64>,
}

#[derive(Debug)]
enum Source {
    Path(String),
    Query(String),
    Header(HeaderName),
    Json(JsonPath, String),
    Var(String),
    Value(Value),
}

/// A statement as configured: its config path, its text, its own parameters.
type Listed<'a> = (
    String,
    &'a QueryText,
    Option<&'a BTreeMap<String, SqlParamConfig>>,
);

impl SqlStep {
    /// Parses the statements and ties every `:name` to its source.
    pub fn build(
        config: &busbar_config::Spanned<SqlConfig>,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        let line = line_of(config);
        let c = &config.value;
        let Some(db) = cx.databases.get(&c.database).cloned() else {
            if cx.loaded.config.databases.contains_key(&c.database) {
                // Declared, and not open: its own error (at `databases.NAME`) says why.
                return Err(Failed);
            }
            return Err(cx.fail(
                line,
                format!("{here}.database"),
                format!("unknown database '{}'", c.database),
            ));
        };
        let step_params = build_params(&c.params, cx, line, &format!("{here}.params"))?;
        let mut used: Vec<String> = Vec::new();
        let mut statements = Vec::new();
        let mut binds = Vec::new();
        let list: Vec<Listed<'_>> = match &c.query {
            Some(q) => vec![(format!("{here}.query"), q, None)],
            None => c
                .transaction
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    (
                        format!("{here}.transaction[{i}]"),
                        &t.query,
                        Some(&t.params),
                    )
                })
                .collect(),
        };
        let mut failed = false;
        let mut unparsed = false;
        for (at, text, own) in list {
            let Some(sql) = text.for_kind(db.kind()) else {
                cx.fail(
                    line,
                    at,
                    format!("no statement for a {} database", db.kind()),
                );
                failed = true;
                continue;
            };
            let statement = match Statement::parse(sql) {
                Ok(s) => s,
                Err(e) => {
                    cx.fail(line, at, e);
                    failed = true;
                    unparsed = true;
                    continue;
                }
            };
            let own = match own {
                Some(p) => build_params(p, cx, line, &format!("{at}.params"))?,
                None => BTreeMap::new(),
            };
            let mut positions = Vec::new();
            for name in &statement.names {
                match own.get(name).or_else(|| step_params.get(name)) {
                    Some(p) => {
                        if !own.contains_key(name) {
                            used.push(name.clone());
                        }
                        positions.push(p.clone());
                    }
                    None => {
                        cx.fail(
                            line,
                            at.clone(),
                            format!("parameter ':{name}' has no entry in params"),
                        );
                        failed = true;
                    }
                }
            }
            for name in own.keys() {
                if !statement.names.contains(name) {
                    cx.fail(
                        line,
                        format!("{at}.params.{name}"),
                        format!("the statement has no parameter ':{name}'"),
                    );
                    failed = true;
                }
            }
            statements.push(Arc::new(statement));
            binds.push(positions);
        }
        // A statement that did not parse names no parameters: its error is the one to fix.
        for name in step_params.keys().filter(|_| !unparsed) {
            if !used.contains(name) {
                cx.fail(
                    line,
                    format!("{here}.params.{name}"),
                    format!("no statement has a parameter ':{name}'"),
                );
                failed = true;
            }
        }
        let status = match c.status {
            Some(s) => StatusCode::from_u16(s)
                .map_err(|e| cx.fail(line, format!("{here}.status"), e.to_string()))?,
            None if c.result == SqlResult::None => StatusCode::NO_CONTENT,
            None => StatusCode::OK,
        };
        if failed {
            return Err(Failed);
        }
        let uses_json = binds
            .iter()
            .flatten()
            .any(|p| matches!(p.source, Source::Json(..)));
        Ok(Self {
            db,
            statements,
            binds,
            shape: match c.result {
                SqlResult::Rows => Shape::Rows,
                SqlResult::Row => Shape::Row,
                SqlResult::Affected => Shape::Affected,
                SqlResult::None => Shape::Empty,
            },
            null_when_none: c.not_found == NotFoundConfig::Null,
            status,
            numeric: match c.numeric {
                NumericConfig::Number => NumericAs::Number,
                NumericConfig::String => NumericAs::String,
            },
            uses_json,
        })
    }
}

fn build_params(
    params: &BTreeMap<String, SqlParamConfig>,
    cx: &mut BuildCx<'_>,
    line: Option<u64>,
    at: &str,
) -> Result<BTreeMap<String, Arc<Param>>, Failed> {
    let mut out = BTreeMap::new();
    let mut failed = false;
    for (name, p) in params {
        let source = if let Some(v) = &p.path {
            Source::Path(v.clone())
        } else if let Some(v) = &p.query {
            Source::Query(v.clone())
        } else if let Some(v) = &p.header {
            match HeaderName::from_bytes(v.as_bytes()) {
                Ok(h) => Source::Header(h),
                Err(_) => {
                    cx.fail(
                        line,
                        format!("{at}.{name}.header"),
                        format!("invalid header name '{v}'"),
                    );
                    failed = true;
                    continue;
                }
            }
        } else if let Some(v) = &p.json {
            match JsonPath::compile(v) {
                Ok(q) => Source::Json(q, v.clone()),
                Err(e) => {
                    cx.fail(
                        line,
                        format!("{at}.{name}.json"),
                        format!("invalid JSONPath '{v}': {e}"),
                    );
                    failed = true;
                    continue;
                }
            }
        } else if let Some(v) = &p.var {
            Source::Var(v.clone())
        } else if let Some(v) = &p.value {
            Source::Value(literal(v))
        } else {
            cx.fail(
                line,
                format!("{at}.{name}"),
                "give one of path, query, header, json, var or value",
            );
            failed = true;
            continue;
        };
        out.insert(
            name.clone(),
            Arc::new(Param {
                name: name.clone(),
                source,
                ty: p.ty,
                default: p.default.as_ref().map(literal),
                nullable: p.nullable,
                min: p.min,
                max: p.max,
            }),
        );
    }
    if failed {
        Err(Failed)
    } else {
        Ok(out)
    }
}

fn literal(l: &Literal) -> Value {
    match l {
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(i) => Value::Int(*i),
        Literal::Float(f) => Value::Float(*f),
        Literal::Text(t) => Value::Text(t.clone()),
    }
}

impl Param {
    /// The value for this request: from its source, converted to its type; a missing one is
    /// the default, NULL when nullable, or a 400.
    #[cfg(test)]
    fn value(&self, ex: &Exchange, body: Option<&Json>) -> Result<Value, MediationError> {
        self.value_in(ex, body, None)
    }

    /// As [`Param::value`], with `text` the JSON body as sent (where a number's written
    /// digits are found).
    fn value_in(
        &self,
        ex: &Exchange,
        body: Option<&Json>,
        text: Option<&[u8]>,
    ) -> Result<Value, MediationError> {
        let raw: Option<Value> = match &self.source {
            Source::Path(p) => ex.param(p).map(|v| Value::Text(v.to_owned())),
            // Text is UTF-8: other bytes are refused, never replaced (two different values
            // would bind as the same one).
            Source::Query(q) => match query_param(ex, q) {
                Some(v) => Some(Value::Text(
                    String::from_utf8(v).map_err(|_| self.bad("is not UTF-8 text"))?,
                )),
                None => None,
            },
            Source::Header(h) => match ex.request.headers.get(h) {
                Some(v) => Some(Value::Text(
                    std::str::from_utf8(v.as_bytes())
                        .map_err(|_| self.bad("is not UTF-8 text"))?
                        .to_owned(),
                )),
                None => None,
            },
            Source::Json(q, _) => body.and_then(|b| {
                q.first(b).map(|node| {
                    let literal = match (node, text) {
                        (Json::Number(n), Some(text)) if n.is_f64() => {
                            number_literal(text, b, node, n.as_f64())
                        }
                        _ => None,
                    };
                    Value::from_json(node, literal)
                })
            }),
            Source::Var(v) => match ex.var(v) {
                Some(var) => Some(Value::Text(
                    var.as_str()
                        .ok_or_else(|| self.bad("is not text"))?
                        .to_owned(),
                )),
                None => None,
            },
            Source::Value(v) => Some(v.clone()),
        };
        let value = match raw {
            Some(v) => v,
            None => match (&self.default, self.nullable) {
                (Some(d), _) => d.clone(),
                (None, true) => return Ok(Value::Null),
                (None, false) => {
                    return Err(MediationError::new(
                        ErrorKind::BadRequest,
                        Blame::Client,
                        format!(
                            "Parameter '{}' is missing ({})",
                            self.name,
                            self.source.describe()
                        ),
                    ))
                }
            },
        };
        self.convert(value)
    }

    fn convert(&self, v: Value) -> Result<Value, MediationError> {
        if v == Value::Null {
            return if self.nullable {
                Ok(v)
            } else {
                Err(self.bad("is null"))
            };
        }
        match self.ty {
            SqlType::Any => Ok(v),
            SqlType::Text => match v {
                Value::Text(_) => Ok(v),
                other if self.text_source() => Ok(other),
                _ => Err(self.bad("must be text")),
            },
            SqlType::Int => {
                let i = match &v {
                    Value::Int(i) => Some(*i),
                    Value::Text(t) if self.text_source() => t.parse::<i64>().ok(),
                    _ => None,
                };
                let i = i.ok_or_else(|| self.bad("must be an integer"))?;
                let i = self.min.map_or(i, |m| i.max(m));
                Ok(Value::Int(self.max.map_or(i, |m| i.min(m))))
            }
            SqlType::Float => match &v {
                Value::Int(i) => Ok(Value::Float(*i as f64)),
                Value::Float(_) => Ok(v),
                // `type: float` asks for a double: its rounding is the type's.
                Value::Decimal(t) => t
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(Value::Float)
                    .ok_or_else(|| self.bad("must be a number")),
                Value::Text(t) if self.text_source() => t
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(Value::Float)
                    .ok_or_else(|| self.bad("must be a number")),
                _ => Err(self.bad("must be a number")),
            },
            SqlType::Bool => match &v {
                Value::Bool(_) => Ok(v),
                Value::Text(t) if self.text_source() => match t.as_str() {
                    "true" | "1" => Ok(Value::Bool(true)),
                    "false" | "0" => Ok(Value::Bool(false)),
                    _ => Err(self.bad("must be true or false")),
                },
                _ => Err(self.bad("must be true or false")),
            },
            SqlType::Json => match v {
                Value::Text(t) if self.text_source() => serde_json::from_str::<Json>(&t)
                    .map(Value::Json)
                    .map_err(|_| self.bad("must be JSON")),
                Value::Text(t) => Ok(Value::Json(Json::String(t))),
                Value::Bool(b) => Ok(Value::Json(Json::Bool(b))),
                Value::Int(i) => Ok(Value::Json(Json::from(i))),
                Value::Float(f) => Ok(Value::Json(Json::from(f))),
                // Its written digits, as JSON text: a serde_json number would round them.
                Value::Decimal(t) => Ok(Value::Text(t)),
                other => Ok(other),
            },
        }
    }

    /// True when the source gives text (path, query, header, variable): typed values are
    /// parsed from it; JSON and literals keep their own types.
    fn text_source(&self) -> bool {
        matches!(
            self.source,
            Source::Path(_) | Source::Query(_) | Source::Header(_) | Source::Var(_)
        )
    }

    fn bad(&self, what: &str) -> MediationError {
        MediationError::new(
            ErrorKind::BadRequest,
            Blame::Client,
            format!(
                "Parameter '{}' {what} ({})",
                self.name,
                self.source.describe()
            ),
        )
    }
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Path(p) => format!("path parameter '{p}'"),
            Source::Query(q) => format!("query parameter '{q}'"),
            Source::Header(h) => format!("header '{h}'"),
            Source::Json(_, path) => format!("JSON field {path}"),
            Source::Var(v) => format!("variable '{v}'"),
            Source::Value(_) => "literal".into(),
        }
    }
}

/// The bytes of the first value of query parameter `name`, percent-decoded.
fn query_param(ex: &Exchange, name: &str) -> Option<Vec<u8>> {
    let q = ex.request.uri.query()?;
    q.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (crate::router::query_decode(k) == name).then(|| crate::router::query_decode_bytes(v))
    })
}

/// The text of `node`, a number of `doc`, as `text` (the document `doc` was parsed from)
/// wrote it. serde_json keeps a decimal as an `f64` only; its digits are found again as the
/// k-th number literal of the text, k being the node's place among the numbers of the tree
/// in document order (objects keep their members' order, and a name twice is refused when
/// the body is parsed). `None` when not found, or when it does not read back as `value`.
fn number_literal<'a>(
    text: &'a [u8],
    doc: &Json,
    node: &Json,
    value: Option<f64>,
) -> Option<&'a str> {
    fn place(at: &Json, node: &Json, k: &mut usize) -> bool {
        if std::ptr::eq(at, node) {
            return true;
        }
        match at {
            Json::Number(_) => {
                *k += 1;
                false
            }
            Json::Array(a) => a.iter().any(|v| place(v, node, k)),
            Json::Object(o) => o.values().any(|v| place(v, node, k)),
            _ => false,
        }
    }
    let mut k = 0;
    if !place(doc, node, &mut k) {
        return None;
    }
    let mut seen = 0;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while i < text.len() {
                    match text[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                if seen == k {
                    let literal = std::str::from_utf8(&text[start..i]).ok()?;
                    return (literal.parse::<f64>().ok() == value).then_some(literal);
                }
                seen += 1;
            }
            _ => i += 1,
        }
    }
    None
}

impl Apply for SqlStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let (body, text) = if self.uses_json {
            let body = json::parsed(ex, cx).await?;
            // The text it was parsed from (kept by the body): the written digits of numbers.
            let text = ex.body_mut().bytes(cx.max_body()).await?;
            (Some(body), Some(text))
        } else {
            (None, None)
        };
        let mut values = Vec::with_capacity(self.binds.len());
        for positions in &self.binds {
            let mut v = Vec::with_capacity(positions.len());
            for p in positions {
                v.push(p.value_in(ex, body.as_deref(), text.as_deref())?);
            }
            values.push(v);
        }
        let out = self
            .db
            .run(busbar_sql::Query {
                statements: &self.statements,
                values,
                shape: self.shape,
                numeric: self.numeric,
            })
            .await
            .map_err(failure)?;
        let body = match out {
            Output::Json(b) => Body::full(b),
            Output::Done { affected: 0 } if self.shape == Shape::Empty && !self.null_when_none => {
                return Err(MediationError::new(
                    ErrorKind::NotFound,
                    Blame::Client,
                    "Not found",
                ))
            }
            Output::Done { .. } => Body::empty(),
            Output::NoRow if self.null_when_none => Body::full(Bytes::from_static(b"null")),
            Output::NoRow => {
                return Err(MediationError::new(
                    ErrorKind::NotFound,
                    Blame::Client,
                    "Not found",
                ))
            }
            Output::Stream(rx) => Body::stream(Rows(rx), None, Origin::Upstream),
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status;
        if self.shape != Shape::Empty {
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        ex.response = Some(resp);
        Ok(Flow::Continue)
    }
}

/// The error a client gets for a database failure; the detail goes to the log, not to the
/// client.
fn failure(e: DbError) -> MediationError {
    let (kind, blame, status) = match e.class {
        ErrorClass::Conflict => (ErrorKind::BadRequest, Blame::Client, StatusCode::CONFLICT),
        ErrorClass::BadValue => (
            ErrorKind::BadRequest,
            Blame::Client,
            StatusCode::BAD_REQUEST,
        ),
        ErrorClass::Busy | ErrorClass::Unavailable => (
            ErrorKind::Unavailable,
            Blame::Upstream,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        ErrorClass::Timeout => (
            ErrorKind::ResponseTimeout,
            Blame::Upstream,
            StatusCode::GATEWAY_TIMEOUT,
        ),
        ErrorClass::Other => (
            ErrorKind::Internal,
            Blame::Internal,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    };
    // A 503 carries `Retry-After` (the proxy adds it to every 503).
    MediationError::new(kind, blame, e.message.clone())
        .with_status(status)
        .with_source(e)
}

/// Streamed rows as a response body.
struct Rows(mpsc::Receiver<Result<Bytes, DbError>>);

impl http_body::Body for Rows {
    type Data = Bytes;
    type Error = DbError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, DbError>>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|r| r.map(http_body::Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::exchange;
    use super::*;
    use busbar_core::Var;

    fn param(source: Source, ty: SqlType) -> Param {
        Param {
            name: "p".into(),
            source,
            ty,
            default: None,
            nullable: false,
            min: None,
            max: None,
        }
    }

    #[test]
    fn query_and_header_text_must_be_utf8_and_is_never_replaced() {
        let mut ex = exchange(&[], b"");
        let text = |ex: &Exchange, source: Source| {
            param(source, SqlType::Any)
                .value(ex, None)
                .map_err(|e| e.reason.to_string())
        };
        for (query, want) in [
            ("q=%C3%A9t%C3%A9+x", Ok(Value::Text("été x".into()))),
            (
                "q=%FF",
                Err("Parameter 'p' is not UTF-8 text (query parameter 'q')".to_owned()),
            ),
            (
                "q=%FE",
                Err("Parameter 'p' is not UTF-8 text (query parameter 'q')".to_owned()),
            ),
            (
                "q=%C3%28",
                Err("Parameter 'p' is not UTF-8 text (query parameter 'q')".to_owned()),
            ),
        ] {
            ex.request.uri = format!("/p?{query}").parse().expect("uri");
            assert_eq!(text(&ex, Source::Query("q".into())), want, "{query}");
        }
        let utf8 = http::HeaderValue::from_bytes("Zoë".as_bytes()).expect("value");
        ex.request.headers.insert("x-a", utf8);
        assert_eq!(
            text(&ex, Source::Header(http::HeaderName::from_static("x-a"))),
            Ok(Value::Text("Zoë".into()))
        );
        let latin1 = http::HeaderValue::from_bytes(b"Zo\xEB").expect("value");
        ex.request.headers.insert("x-a", latin1);
        assert_eq!(
            text(&ex, Source::Header(http::HeaderName::from_static("x-a"))),
            Err("Parameter 'p' is not UTF-8 text (header 'x-a')".to_owned())
        );
    }

    #[test]
    fn a_variable_is_bound_as_text_and_typed_like_other_text() {
        let mut ex = exchange(&[], b"");
        let evil = "x'); DROP TABLE t; --";
        ex.set_var("v", Var::Text(evil.into()));
        ex.set_var("n", Var::Text("42".into()));
        let p = param(Source::Var("v".into()), SqlType::Any);
        assert_eq!(p.value(&ex, None).ok(), Some(Value::Text(evil.into())));
        let n = param(Source::Var("n".into()), SqlType::Int);
        assert_eq!(n.value(&ex, None).ok(), Some(Value::Int(42)));
        let bad = param(Source::Var("v".into()), SqlType::Int);
        let e = bad.value(&ex, None).err().map(|e| e.reason.to_string());
        assert_eq!(
            e.as_deref(),
            Some("Parameter 'p' must be an integer (variable 'v')")
        );
        let missing = param(Source::Var("none".into()), SqlType::Any);
        assert!(missing.value(&ex, None).is_err());
    }

    #[test]
    fn json_fields_keep_their_type_and_limits_clamp() {
        let ex = exchange(&[], b"");
        let body: Json = serde_json::json!({"n": "12", "m": 12, "big": 5000, "o": {"a": [1]}});
        let path = |p: &str| {
            Source::Json(
                JsonPath::compile(p).unwrap_or_else(|e| panic!("{e}")),
                p.into(),
            )
        };
        assert!(param(path("$.n"), SqlType::Int)
            .value(&ex, Some(&body))
            .is_err());
        assert_eq!(
            param(path("$.m"), SqlType::Int)
                .value(&ex, Some(&body))
                .ok(),
            Some(Value::Int(12))
        );
        let mut capped = param(path("$.big"), SqlType::Int);
        capped.max = Some(1000);
        assert_eq!(capped.value(&ex, Some(&body)).ok(), Some(Value::Int(1000)));
        assert_eq!(
            param(path("$.o"), SqlType::Json)
                .value(&ex, Some(&body))
                .ok(),
            Some(Value::Json(serde_json::json!({"a": [1]})))
        );
        let mut nullable = param(path("$.gone"), SqlType::Text);
        assert!(nullable.value(&ex, Some(&body)).is_err());
        nullable.nullable = true;
        assert_eq!(nullable.value(&ex, Some(&body)).ok(), Some(Value::Null));
    }
}
