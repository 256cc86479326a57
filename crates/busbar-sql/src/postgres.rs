//! PostgreSQL: tokio-postgres behind a deadpool pool. Values go to the server in text form
//! and it parses them for the parameter's type; rows come back binary and are written as JSON
//! by column type. A monitor thread runs `init` once the server answers and probes it while
//! the engine runs, for `/readyz`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures_util::TryStreamExt;
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Format, FromSql, IsNull, Kind as TypeKind, ToSql, Type};
use tokio_postgres::{NoTls, RowStream};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::value::{rfc3339_micros, RowWriter};
use crate::{
    DbError, ErrorClass, Health, Kind, NumericAs, Options, Output, Query, Shape, Statement, Value,
    STREAM_AFTER,
};

/// Seconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH: i64 = 946_684_800;

pub(crate) struct Postgres {
    name: String,
    pool: Pool,
    statement_cache: bool,
    statement_timeout: Duration,
    initialised: Arc<AtomicBool>,
    health: Arc<Health>,
    /// The monitor thread ends once this is dropped.
    _alive: Arc<()>,
}

impl Postgres {
    pub fn open(name: &str, options: &Options, health: &Arc<Health>) -> Result<Self, String> {
        let Kind::Postgres(config) = &options.kind else {
            return Err("not a PostgreSQL database".into());
        };
        let mut config = (**config).clone();
        config.connect_timeout(options.connect_timeout);
        // The server cancels a statement past the timeout (SQLSTATE 57014: a 504).
        let mut server_options = config.get_options().unwrap_or_default().to_owned();
        if !server_options.is_empty() {
            server_options.push(' ');
        }
        server_options.push_str(&format!(
            "-c statement_timeout={}",
            options.statement_timeout.as_millis().max(1)
        ));
        config.options(&server_options);
        if config.get_application_name().is_none() {
            config.application_name("busbar");
        }
        let tls = options
            .tls
            .clone()
            .map(|c| MakeRustlsConnect::new((*c).clone()));
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match &tls {
            Some(t) => {
                // TLS or nothing: no fallback to plain TCP.
                config.ssl_mode(tokio_postgres::config::SslMode::Require);
                Manager::from_config(config.clone(), t.clone(), manager_config)
            }
            None => {
                config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                Manager::from_config(config.clone(), NoTls, manager_config)
            }
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool.max(1))
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| format!("cannot create the pool: {e}"))?;
        let alive = Arc::new(());
        let initialised = Arc::new(AtomicBool::new(false));
        let monitor = Monitor {
            name: name.to_owned(),
            config,
            tls,
            init: options.init.clone(),
            initialised: initialised.clone(),
            health: Arc::downgrade(health),
            alive: Arc::downgrade(&alive),
        };
        std::thread::Builder::new()
            .name(format!("busbar-pg-{name}"))
            .spawn(move || monitor.run())
            .map_err(|e| format!("cannot start the database monitor: {e}"))?;
        Ok(Self {
            name: name.to_owned(),
            pool,
            statement_cache: options.statement_cache,
            statement_timeout: options.statement_timeout,
            initialised,
            health: health.clone(),
            _alive: alive,
        })
    }

    pub fn status(&self) -> (usize, usize) {
        let s = self.pool.status();
        (s.size.saturating_sub(s.available), s.max_size)
    }

    pub async fn run(&self, query: Query<'_>) -> Result<Output, DbError> {
        if !self.initialised.load(Ordering::Relaxed) {
            return Err(DbError::new(
                ErrorClass::Unavailable,
                format!("Database '{}' is not ready", self.name),
                "the server has not answered since the start (or init failed)",
            ));
        }
        let mut client = match self.pool.get().await {
            Ok(c) => c,
            Err(e) => {
                let e = self.pool_error(e);
                if e.class == ErrorClass::Unavailable {
                    self.health.down(&e.detail);
                }
                return Err(e);
            }
        };
        // Past the server's own statement timeout, the connection itself is suspect (a hung
        // network): it is closed rather than handed to the next request.
        let limit = self.statement_timeout * query.statements.len() as u32 + Duration::from_secs(1);
        let result = tokio::time::timeout(limit, self.execute(&mut client, &query)).await;
        let result = match result {
            Ok(r) => r,
            Err(_) => {
                drop(Object::take(client));
                return Err(DbError::new(
                    ErrorClass::Timeout,
                    "The database did not answer in time",
                    format!("no answer within {limit:?}"),
                ));
            }
        };
        let result = match result {
            Ok(Step::Done(out)) => Ok(out),
            Ok(Step::More {
                head,
                w,
                cols,
                rows,
            }) => Ok(stream_rest(client, head, w, cols, rows)),
            Err(e) => Err(e),
        };
        match &result {
            Err(e) if e.class == ErrorClass::Unavailable => self.health.down(&e.detail),
            _ => self.health.up(),
        }
        result
    }

    /// Runs the query; when a cached statement went stale (a table it reads changed since
    /// it was prepared: "cached plan must not change result type"), the connection's cached
    /// statements are dropped and the query runs once more, prepared afresh. The server
    /// refuses such a statement before running it (and a transaction is rolled back), so
    /// nothing runs twice.
    async fn execute(&self, client: &mut Object, query: &Query<'_>) -> Result<Step, DbError> {
        match self.execute_once(client, query).await {
            Err(e) if e.stale_statement && self.statement_cache => {
                client.statement_cache.clear();
                self.execute_once(client, query).await
            }
            other => other,
        }
    }

    async fn execute_once(&self, client: &mut Object, query: &Query<'_>) -> Result<Step, DbError> {
        if query.statements.len() == 1 {
            let rows = query_raw(
                Conn::Client(client),
                &query.statements[0],
                &query.values[0],
                self.statement_cache,
            )
            .await?;
            return collect(rows, query.shape, query.numeric, true).await;
        }
        let tx = client.transaction().await.map_err(classify)?;
        let mut last = Step::Done(Output::Done { affected: 0 });
        for (i, (s, v)) in query.statements.iter().zip(&query.values).enumerate() {
            let shape = if i + 1 == query.statements.len() {
                query.shape
            } else {
                Shape::Empty
            };
            let rows = query_raw(Conn::Tx(&tx), s, v, self.statement_cache).await?;
            // In a transaction every row is read before the commit.
            last = collect(rows, shape, query.numeric, false).await?;
        }
        // Dropping the transaction on an error above rolls it back.
        tx.commit().await.map_err(classify)?;
        Ok(last)
    }

    fn pool_error(&self, e: deadpool_postgres::PoolError) -> DbError {
        use deadpool_postgres::{PoolError, TimeoutType};
        match e {
            PoolError::Timeout(TimeoutType::Wait) => DbError::new(
                ErrorClass::Busy,
                "The database is busy: no connection was free in time",
                format!("database '{}': pool exhausted", self.name),
            ),
            PoolError::Backend(e) => {
                let mut d = classify(e);
                if d.class == ErrorClass::Other {
                    d.class = ErrorClass::Unavailable;
                    d.message = "The database is unavailable".into();
                }
                d
            }
            other => DbError::new(
                ErrorClass::Unavailable,
                "The database is unavailable",
                format!("database '{}': {other}", self.name),
            ),
        }
    }
}

/// Either the pooled client or a transaction on it.
enum Conn<'a> {
    Client(&'a Object),
    Tx(&'a deadpool_postgres::Transaction<'a>),
}

async fn query_raw(
    conn: Conn<'_>,
    statement: &Statement,
    values: &[Value],
    cache: bool,
) -> Result<RowStream, DbError> {
    let sql = statement.postgres();
    if cache {
        let prepared = match &conn {
            Conn::Client(c) => c.prepare_cached(sql).await,
            Conn::Tx(t) => t.prepare_cached(sql).await,
        }
        .map_err(classify)?;
        check_types(statement, prepared.params(), values)?;
        let params = values.iter().map(Param);
        match conn {
            Conn::Client(c) => c.query_raw(&prepared, params).await,
            Conn::Tx(t) => t.query_raw(&prepared, params).await,
        }
        .map_err(classify)
    } else {
        // No server-side prepared statement to keep (PgBouncer in transaction mode): the
        // unnamed statement, with types left for the server to infer.
        let unspecified = Type::new("unspecified".into(), 0, TypeKind::Simple, String::new());
        let params = values.iter().map(|v| (Param(v), unspecified.clone()));
        match conn {
            Conn::Client(c) => c.query_typed_raw(sql, params).await,
            Conn::Tx(t) => t.query_typed_raw(sql, params).await,
        }
        .map_err(classify)
    }
}

/// Integer and boolean parameters are checked here, so the error can name the parameter.
fn check_types(statement: &Statement, types: &[Type], values: &[Value]) -> Result<(), DbError> {
    for ((ty, v), name) in types.iter().zip(values).zip(&statement.names) {
        let fits = match *ty {
            Type::INT2 | Type::INT4 | Type::INT8 => match v {
                Value::Int(_) | Value::Null => true,
                Value::Float(f) => f.fract() == 0.0,
                Value::Text(t) | Value::Decimal(t) => t.trim().parse::<i64>().is_ok(),
                _ => false,
            },
            Type::BOOL => {
                matches!(v, Value::Bool(_) | Value::Null)
                    || matches!(v, Value::Text(t) if t == "true" || t == "false")
            }
            Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => match v {
                Value::Int(_) | Value::Float(_) | Value::Decimal(_) | Value::Null => true,
                Value::Text(t) => t.trim().parse::<f64>().is_ok(),
                _ => false,
            },
            _ => true,
        };
        if !fits {
            return Err(DbError::new(
                ErrorClass::BadValue,
                format!(
                    "Parameter '{name}' must be {}, not {}",
                    expected(ty),
                    v.kind()
                ),
                format!("parameter '{name}' of type {ty}"),
            ));
        }
    }
    Ok(())
}

fn expected(ty: &Type) -> &'static str {
    match *ty {
        Type::BOOL => "a boolean",
        Type::INT2 | Type::INT4 | Type::INT8 => "an integer",
        _ => "a number",
    }
}

/// A value sent in PostgreSQL's text form; the server parses it for the parameter's type.
#[derive(Debug)]
struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0.to_text() {
            None => Ok(IsNull::Yes),
            Some(t) => {
                out.extend_from_slice(t.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column's value as the server sent it (binary), decoded by [`write_cell`].
struct Raw<'a>(&'a [u8]);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// Where reading a statement's rows got to.
enum Step {
    Done(Output),
    /// More than a buffer's worth of rows: the first part and the rest still to read.
    More {
        head: Bytes,
        w: RowWriter,
        cols: Vec<(String, Type)>,
        rows: std::pin::Pin<Box<RowStream>>,
    },
}

async fn collect(
    rows: RowStream,
    shape: Shape,
    numeric: NumericAs,
    may_stream: bool,
) -> Result<Step, DbError> {
    let mut rows = Box::pin(rows);
    let Some(first) = rows.as_mut().try_next().await.map_err(classify)? else {
        return Ok(Step::Done(match shape {
            Shape::Row => Output::NoRow,
            Shape::Rows => Output::Json(Bytes::from_static(b"[]")),
            Shape::Affected => Output::Json(affected_json(rows.rows_affected(), None)),
            Shape::Empty => Output::Done {
                affected: rows.rows_affected().unwrap_or(0),
            },
        }));
    };
    let cols: Vec<(String, Type)> = first
        .columns()
        .iter()
        .map(|c| (c.name().to_owned(), c.type_().clone()))
        .collect();
    let mut w = RowWriter::new(cols.iter().map(|c| &c.0), numeric);
    let out = match shape {
        Shape::Row => {
            write_row(&mut w, &first, &cols)?;
            Output::Json(Bytes::new())
        }
        Shape::Affected => {
            if let Some((name, ty)) = cols.first() {
                let id = first.try_get::<_, Option<Raw>>(0).map_err(classify)?;
                let mut one = RowWriter::new([""], numeric);
                write_cell(&mut one, id, ty, name)?;
                w.out = one.out;
            }
            Output::Json(Bytes::new())
        }
        Shape::Empty => Output::Done { affected: 0 },
        Shape::Rows => {
            w.out.push(b'[');
            write_row(&mut w, &first, &cols)?;
            while let Some(row) = rows.as_mut().try_next().await.map_err(classify)? {
                write_row(&mut w, &row, &cols)?;
                if may_stream && w.out.len() >= STREAM_AFTER {
                    let head = Bytes::from(std::mem::take(&mut w.out));
                    return Ok(Step::More {
                        head,
                        w,
                        cols,
                        rows,
                    });
                }
            }
            w.out.push(b']');
            return Ok(Step::Done(Output::Json(Bytes::from(w.out))));
        }
    };
    // The rest of the rows are read and dropped, so the connection is left clean and the
    // count of affected rows is known.
    while rows.as_mut().try_next().await.map_err(classify)?.is_some() {}
    Ok(Step::Done(match (shape, out) {
        (Shape::Affected, _) => Output::Json(affected_json(rows.rows_affected(), Some(&w.out))),
        (Shape::Row, _) => Output::Json(Bytes::from(w.out)),
        (Shape::Empty, _) => Output::Done {
            affected: rows.rows_affected().unwrap_or(0),
        },
        (_, out) => out,
    }))
}

/// Streams the rows left, holding the connection until the last one is read.
fn stream_rest(
    client: Object,
    head: Bytes,
    mut w: RowWriter,
    cols: Vec<(String, Type)>,
    mut rows: std::pin::Pin<Box<RowStream>>,
) -> Output {
    let (tx, rx) = mpsc::channel(4);
    let _ = tx.try_send(Ok(head));
    tokio::spawn(async move {
        let _client = client;
        loop {
            let next = rows.as_mut().try_next().await.map_err(classify);
            let row = match next {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            if let Err(e) = write_row(&mut w, &row, &cols) {
                let _ = tx.send(Err(e)).await;
                return;
            }
            if w.out.len() >= STREAM_AFTER {
                let chunk = Bytes::from(std::mem::take(&mut w.out));
                if tx.send(Ok(chunk)).await.is_err() {
                    // The client left; dropping the stream lets the connection skip the rest.
                    return;
                }
            }
        }
        w.out.push(b']');
        let _ = tx.send(Ok(Bytes::from(w.out))).await;
    });
    Output::Stream(rx)
}

fn affected_json(n: Option<u64>, id: Option<&[u8]>) -> Bytes {
    let mut out = format!("{{\"affected\":{}", n.unwrap_or(0)).into_bytes();
    if let Some(id) = id.filter(|i| !i.is_empty()) {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(id);
    }
    out.push(b'}');
    Bytes::from(out)
}

fn write_row(
    w: &mut RowWriter,
    row: &tokio_postgres::Row,
    cols: &[(String, Type)],
) -> Result<(), DbError> {
    w.begin_row(true);
    for (i, (name, ty)) in cols.iter().enumerate() {
        w.key(i);
        let raw = row.try_get::<_, Option<Raw>>(i).map_err(classify)?;
        write_cell(w, raw, ty, name)?;
    }
    w.end_row();
    Ok(())
}

fn write_cell(
    w: &mut RowWriter,
    raw: Option<Raw<'_>>,
    ty: &Type,
    column: &str,
) -> Result<(), DbError> {
    let Some(Raw(b)) = raw else {
        w.null();
        return Ok(());
    };
    let bad = || {
        DbError::new(
            ErrorClass::Other,
            "The database sent a value that cannot be read",
            format!("column '{column}' of type {ty}: malformed value"),
        )
    };
    let be = |n: usize| -> Result<i64, DbError> {
        match (n, b.len()) {
            (2, 2) => Ok(i64::from(i16::from_be_bytes([b[0], b[1]]))),
            (4, 4) => Ok(i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
            (8, 8) => Ok(i64::from_be_bytes([
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
            ])),
            _ => Err(bad()),
        }
    };
    match *ty {
        Type::BOOL => w.bool(b.first().is_some_and(|&v| v != 0)),
        Type::INT2 => w.int(be(2)?),
        Type::INT4 => w.int(be(4)?),
        Type::INT8 => w.int(be(8)?),
        Type::OID => w.int(i64::from(be(4)? as u32)),
        Type::FLOAT4 => {
            let v: [u8; 4] = b.try_into().map_err(|_| bad())?;
            w.float32(f32::from_be_bytes(v));
        }
        Type::FLOAT8 => {
            let v: [u8; 8] = b.try_into().map_err(|_| bad())?;
            w.float(f64::from_be_bytes(v));
        }
        Type::NUMERIC => w.numeric(&numeric_text(b).ok_or_else(bad)?),
        Type::TIMESTAMPTZ | Type::TIMESTAMP => {
            let us = be(8)?;
            match us {
                i64::MAX => w.string("infinity"),
                i64::MIN => w.string("-infinity"),
                _ => w.string(&rfc3339_micros(us.saturating_add(PG_EPOCH * 1_000_000))),
            }
        }
        Type::DATE => {
            let days = be(4)?;
            match days {
                d if d == i64::from(i32::MAX) => w.string("infinity"),
                d if d == i64::from(i32::MIN) => w.string("-infinity"),
                d => {
                    let (y, m, dd) = busbar_core::calendar::civil_from_days(d + PG_EPOCH / 86_400);
                    w.string(&format!("{y:04}-{m:02}-{dd:02}"));
                }
            }
        }
        Type::UUID => {
            if b.len() != 16 {
                return Err(bad());
            }
            let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
            w.string(&format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            ));
        }
        Type::BYTEA => w.bytes(b),
        Type::JSON => w.raw_json(b),
        Type::JSONB => match b.split_first() {
            Some((1, text)) => w.raw_json(text),
            _ => return Err(bad()),
        },
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            w.string(std::str::from_utf8(b).map_err(|_| bad())?)
        }
        _ if matches!(ty.kind(), TypeKind::Enum(_)) || ty.name() == "citext" => {
            w.string(std::str::from_utf8(b).map_err(|_| bad())?)
        }
        _ => {
            return Err(DbError::new(
                ErrorClass::Other,
                "A column has a type with no JSON form",
                format!(
                    "column '{column}' has type {ty}, which has no JSON form: cast it in the query (for example {column}::text)"
                ),
            ))
        }
    }
    Ok(())
}

/// PostgreSQL's binary NUMERIC (base-10000 digits, weight, sign, display scale) as decimal
/// text.
fn numeric_text(b: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])) };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    let mut digits = Vec::with_capacity(ndigits);
    for i in 0..ndigits {
        let d = word(8 + 2 * i)?;
        if d > 9999 {
            return None;
        }
        digits.push(d);
    }
    let digit = |j: i64| -> u16 {
        usize::try_from(j)
            .ok()
            .and_then(|j| digits.get(j).copied())
            .unwrap_or(0)
    };
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    if weight < 0 {
        s.push('0');
    } else {
        for j in 0..=weight {
            if j == 0 {
                s.push_str(&digit(j).to_string());
            } else {
                s.push_str(&format!("{:04}", digit(j)));
            }
        }
    }
    if dscale > 0 {
        let mut frac = String::with_capacity(dscale + 4);
        let mut p = 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", digit(weight + p)));
            p += 1;
        }
        frac.truncate(dscale);
        s.push('.');
        s.push_str(&frac);
    }
    Some(s)
}

/// The server's message for a refused value (class 22, a data exception) or row (class 23,
/// an integrity violation) without the values the request bound, which may be secrets: the
/// DETAIL of these quotes the row or key ("Failing row contains (…)", "Key (email)=(…)"), and
/// a data exception's message may quote the value (`invalid input syntax for type integer:
/// "…"`). What failed stays: the message's words, the code, and the column, constraint,
/// table and type the server names.
fn value_free(db: &tokio_postgres::error::DbError) -> String {
    let code = db.code().code();
    let mut out = if code.starts_with("22") {
        redact_quoted(db.message())
    } else {
        // An integrity violation's message names identifiers only (relation, constraint,
        // column).
        db.message().to_owned()
    };
    out.push_str(" (");
    out.push_str(code);
    for (name, value) in [
        ("table", db.table()),
        ("column", db.column()),
        ("constraint", db.constraint()),
        ("type", db.datatype()),
    ] {
        if let Some(v) = value {
            out.push_str(&format!(", {name} {v}"));
        }
    }
    out.push(')');
    out
}

/// `text` with what each pair of double quotes holds replaced by `…` (after an unpaired
/// quote, the rest).
fn redact_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        if c == '"' {
            if !inside {
                out.push_str("\"…\"");
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out
}

/// The class and safe message of a PostgreSQL error.
fn classify(e: tokio_postgres::Error) -> DbError {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    let Some(db) = e.as_db_error() else {
        return if e.is_closed()
            || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>())
        {
            DbError::new(
                ErrorClass::Unavailable,
                "The database is unavailable",
                detail,
            )
        } else {
            DbError::new(ErrorClass::Other, "The database failed", detail)
        };
    };
    let code = db.code();
    let detail = if code.code().starts_with("22") || code.code().starts_with("23") {
        value_free(db)
    } else {
        format!(
            "{} ({}): {}",
            db.message(),
            code.code(),
            db.detail().unwrap_or("")
        )
    };
    let stale = (*code == SqlState::FEATURE_NOT_SUPPORTED
        && db
            .message()
            .starts_with("cached plan must not change result type"))
        || *code == SqlState::INVALID_SQL_STATEMENT_NAME;
    let (class, message) = if *code == SqlState::UNIQUE_VIOLATION {
        (
            ErrorClass::Conflict,
            "A row with the same unique value already exists",
        )
    } else if *code == SqlState::FOREIGN_KEY_VIOLATION || *code == SqlState::EXCLUSION_VIOLATION {
        (
            ErrorClass::Conflict,
            "The change conflicts with a reference between rows",
        )
    } else if *code == SqlState::NOT_NULL_VIOLATION {
        (ErrorClass::BadValue, "A required value is missing or null")
    } else if *code == SqlState::CHECK_VIOLATION {
        (
            ErrorClass::BadValue,
            "A value is outside what the table accepts",
        )
    } else if code.code().starts_with("22") {
        (
            ErrorClass::BadValue,
            "A value has the wrong type or is out of range",
        )
    } else if *code == SqlState::QUERY_CANCELED {
        (ErrorClass::Timeout, "The database did not answer in time")
    } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
    {
        (ErrorClass::Busy, "The database is busy: try again")
    } else if code.code().starts_with("08")
        || code.code().starts_with("57P")
        || *code == SqlState::TOO_MANY_CONNECTIONS
    {
        (ErrorClass::Unavailable, "The database is unavailable")
    } else {
        (ErrorClass::Other, "The database failed")
    };
    DbError {
        stale_statement: stale,
        ..DbError::new(class, message, detail)
    }
}

/// Runs `init` once the server answers, then probes it, on a thread of its own.
struct Monitor {
    name: String,
    config: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
    init: Option<String>,
    initialised: Arc<AtomicBool>,
    health: Weak<Health>,
    alive: Weak<()>,
}

impl Monitor {
    fn run(self) {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let mut said_down = false;
        loop {
            if self.alive.upgrade().is_none() {
                return;
            }
            let Some(health) = self.health.upgrade() else {
                return;
            };
            let result = rt.block_on(self.probe());
            match result {
                Ok(()) => {
                    if said_down || !health.is_up() {
                        tracing::info!(database = %self.name, "database is available");
                    }
                    said_down = false;
                    self.initialised.store(true, Ordering::Relaxed);
                    health.up();
                }
                Err(e) => {
                    if !said_down {
                        tracing::warn!(database = %self.name, "database is unavailable: {e}");
                        said_down = true;
                    }
                    health.down(&e);
                }
            }
            drop(health);
            let pause = if said_down { 500 } else { 2000 };
            for _ in 0..pause / 100 {
                std::thread::sleep(Duration::from_millis(100));
                if self.alive.upgrade().is_none() {
                    return;
                }
            }
        }
    }

    /// Connects and asks `SELECT 1`, each within `connect_timeout`: a server that accepts
    /// connections but answers nothing (stopped, or hung) is down, not waited for.
    async fn probe(&self) -> Result<(), String> {
        let limit = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10));
        let silent = || format!("no answer within {limit:?}");
        let (client, task) = match &self.tls {
            Some(tls) => {
                let (client, conn) = tokio::time::timeout(limit, self.config.connect(tls.clone()))
                    .await
                    .map_err(|_| silent())?
                    .map_err(|e| classify(e).detail)?;
                (client, tokio::spawn(async move { drop(conn.await) }))
            }
            None => {
                let (client, conn) = tokio::time::timeout(limit, self.config.connect(NoTls))
                    .await
                    .map_err(|_| silent())?
                    .map_err(|e| classify(e).detail)?;
                (client, tokio::spawn(async move { drop(conn.await) }))
            }
        };
        let result = async {
            if !self.initialised.load(Ordering::Relaxed) {
                if let Some(init) = &self.init {
                    client
                        .batch_execute(init)
                        .await
                        .map_err(|e| format!("init failed: {}", classify(e).detail))?;
                    tracing::info!(database = %self.name, "database initialised");
                }
            }
            tokio::time::timeout(limit, client.simple_query("SELECT 1"))
                .await
                .map_err(|_| silent())?
                .map(|_| ())
                .map_err(|e| classify(e).detail)
        }
        .await;
        drop(client);
        if result.is_err() {
            // The connection may hang as the server does: it is dropped, not waited for.
            task.abort();
        }
        let _ = task.await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b
    }

    #[test]
    fn quoted_values_are_left_out_of_a_message() {
        for (message, want) in [
            (
                r#"invalid input syntax for type integer: "s3cret""#,
                r#"invalid input syntax for type integer: "…""#,
            ),
            (
                r#"value "99999999999" is out of range for type integer"#,
                r#"value "…" is out of range for type integer"#,
            ),
            ("numeric field overflow", "numeric field overflow"),
            (r#"a "b" then "c"#, r#"a "…" then "…""#),
        ] {
            assert_eq!(redact_quoted(message), want);
        }
    }

    #[test]
    fn numerics_decode_to_their_digits() {
        assert_eq!(
            numeric_text(&numeric(0, 0, 0, 0, &[])).as_deref(),
            Some("0")
        );
        assert_eq!(
            numeric_text(&numeric(2, 0, 0, 2, &[1234, 5600])).as_deref(),
            Some("1234.56")
        );
        assert_eq!(
            numeric_text(&numeric(2, 1, 0x4000, 0, &[12, 3456])).as_deref(),
            Some("-123456")
        );
        assert_eq!(
            numeric_text(&numeric(1, -2, 0, 8, &[12])).as_deref(),
            Some("0.00000012")
        );
        assert_eq!(
            numeric_text(&numeric(1, 2, 0, 1, &[7])).as_deref(),
            Some("700000000.0")
        );
        assert_eq!(
            numeric_text(&numeric(0, 0, 0xC000, 0, &[])).as_deref(),
            Some("NaN")
        );
        assert_eq!(numeric_text(&numeric(1, 0, 0, 0, &[10000])), None);
    }
}
