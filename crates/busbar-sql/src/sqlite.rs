//! SQLite: a fixed set of threads, each owning one connection. A request first takes a
//! permit (one per thread, waited for at most `acquire_timeout`), which guarantees an idle
//! thread: it takes that thread's channel from the idle list and hands it the job. A thread
//! goes back on the list before its permit is released. (One queue shared by every thread
//! cost a contended lock and a futex wake per request.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::value::{rfc3339_micros, RowWriter};
use crate::{
    DbError, ErrorClass, Health, Kind, NumericAs, Options, Output, Query, Shape, Statement, Value,
    STREAM_AFTER,
};

/// Work for one thread: the closure, the channel it came through (put back on the idle list
/// afterwards) and the permit (released last).
struct Job {
    work: Box<dyn FnOnce(&mut Connection) + Send>,
    back: std_mpsc::Sender<Job>,
    permit: OwnedSemaphorePermit,
}

type Idle = Arc<Mutex<Vec<std_mpsc::Sender<Job>>>>;

pub(crate) struct Sqlite {
    idle: Idle,
    permits: Arc<Semaphore>,
    size: usize,
    acquire_timeout: Duration,
    statement_timeout: Duration,
    health: Arc<Health>,
    /// The database file (none for `:memory:`).
    file: Option<std::path::PathBuf>,
}

impl Sqlite {
    pub fn open(options: &Options, health: &Arc<Health>) -> Result<Self, String> {
        let Kind::Sqlite { path, busy_timeout } = &options.kind else {
            return Err("not a SQLite database".into());
        };
        let memory = path.as_os_str() == ":memory:";
        // Each connection to ":memory:" would be a database of its own: one thread then.
        let size = if memory { 1 } else { options.pool.max(1) };
        let shown = path.display().to_string();
        let open = || -> Result<Connection, String> {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| format!("cannot open SQLite database '{shown}': {e}"))?;
            conn.busy_timeout(*busy_timeout)
                .map_err(|e| format!("'{shown}': {e}"))?;
            let journal = if memory { "MEMORY" } else { "WAL" };
            conn.execute_batch(&format!(
                "PRAGMA journal_mode={journal}; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
            ))
            .map_err(|e| format!("'{shown}': {e}"))?;
            conn.set_prepared_statement_cache_capacity(if options.statement_cache {
                64
            } else {
                0
            });
            Ok(conn)
        };
        let first = open()?;
        if let Some(init) = &options.init {
            first
                .execute_batch(init)
                .map_err(|e| format!("init of SQLite database '{shown}' failed: {e}"))?;
        }
        let mut conns = vec![first];
        for _ in 1..size {
            conns.push(open()?);
        }
        let idle: Idle = Arc::new(Mutex::new(Vec::with_capacity(size)));
        for (i, mut conn) in conns.into_iter().enumerate() {
            let (tx, rx) = std_mpsc::channel::<Job>();
            if let Ok(mut list) = idle.lock() {
                list.push(tx);
            }
            // The idle list holds the only sender of an idle thread: once the database is
            // dropped (a reload replaced it), the channel closes and the thread ends.
            let list = Arc::downgrade(&idle);
            std::thread::Builder::new()
                .name(format!("busbar-sqlite-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        (job.work)(&mut conn);
                        if let Some(list) = list.upgrade() {
                            if let Ok(mut l) = list.lock() {
                                l.push(job.back);
                            }
                        }
                        drop(job.permit);
                    }
                })
                .map_err(|e| format!("cannot start a SQLite thread: {e}"))?;
        }
        health.up();
        Ok(Self {
            idle,
            permits: Arc::new(Semaphore::new(size)),
            size,
            acquire_timeout: options.acquire_timeout,
            statement_timeout: options.statement_timeout,
            health: health.clone(),
            file: (!memory).then(|| path.clone()),
        })
    }

    pub fn file(&self) -> Option<&std::path::Path> {
        self.file.as_deref()
    }

    pub fn status(&self) -> (usize, usize) {
        (self.size - self.permits.available_permits(), self.size)
    }

    pub async fn run(&self, query: Query<'_>) -> Result<Output, DbError> {
        let permit =
            tokio::time::timeout(self.acquire_timeout, self.permits.clone().acquire_owned())
                .await
                .map_err(|_| {
                    DbError::new(
                        ErrorClass::Busy,
                        "The database is busy: no connection was free in time",
                        format!(
                            "no SQLite connection free within {:?}",
                            self.acquire_timeout
                        ),
                    )
                })?
                .map_err(|_| {
                    DbError::new(ErrorClass::Unavailable, "The database is closed", "closed")
                })?;
        let (tx, rx) = oneshot::channel();
        let work = Work {
            statements: query.statements.to_vec(),
            values: query.values,
            shape: query.shape,
            numeric: query.numeric,
            timeout: self.statement_timeout,
        };
        // A permit means a thread is idle (threads go back on the list before their permit
        // is released).
        let closed = || {
            DbError::new(
                ErrorClass::Unavailable,
                "The database is closed",
                "SQLite threads ended",
            )
        };
        let thread = self
            .idle
            .lock()
            .ok()
            .and_then(|mut l| l.pop())
            .ok_or_else(closed)?;
        let job = Job {
            work: Box::new(move |conn| work.run(conn, tx)),
            back: thread.clone(),
            permit,
        };
        thread.send(job).map_err(|_| closed())?;
        let result = rx.await.map_err(|_| {
            DbError::new(
                ErrorClass::Other,
                "The database failed",
                "a SQLite thread ended mid-job",
            )
        })?;
        match &result {
            Err(e) if e.class == ErrorClass::Unavailable => self.health.down(&e.detail),
            _ => self.health.up(),
        }
        result
    }
}

/// An exclusive lock on a file, held while this value lives; the system releases it when
/// the process ends, however it ends (`kill -9` included).
///
/// It is a SQLite connection to that file in exclusive locking mode that has written once:
/// SQLite then keeps its exclusive lock until the connection closes, and another
/// connection (of this process or another) gets "database is locked" at once. This needs no
/// `unsafe` and no locking crate, and works wherever SQLite's own locks do.
pub struct FileLock {
    _conn: Mutex<Connection>,
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLock").finish_non_exhaustive()
    }
}

/// Why [`lock_file`] did not lock.
#[derive(Debug)]
pub enum LockError {
    /// Someone else holds the lock.
    Held,
    /// The file could not be opened or locked.
    Failed(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held => f.write_str("the file is locked by another holder"),
            LockError::Failed(e) => f.write_str(e),
        }
    }
}

/// Takes an exclusive lock on `path` (created when missing), without waiting.
pub fn lock_file(path: &std::path::Path) -> Result<FileLock, LockError> {
    let failed = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            LockError::Held
        }
        _ => LockError::Failed(e.to_string()),
    };
    let conn = Connection::open(path).map_err(failed)?;
    conn.busy_timeout(Duration::ZERO).map_err(failed)?;
    conn.execute_batch(
        "PRAGMA locking_mode=EXCLUSIVE;
         BEGIN EXCLUSIVE;
         CREATE TABLE IF NOT EXISTS holder (since INTEGER);
         DELETE FROM holder;
         INSERT INTO holder VALUES (strftime('%s', 'now'));
         COMMIT;",
    )
    .map_err(failed)?;
    Ok(FileLock {
        _conn: Mutex::new(conn),
    })
}

/// One query's work, run on a SQLite thread.
struct Work {
    statements: Vec<Arc<Statement>>,
    values: Vec<Vec<Value>>,
    shape: Shape,
    numeric: NumericAs,
    timeout: Duration,
}

/// Where the answer goes: the first reply, then (when streaming) the rest.
struct Reply {
    first: Option<oneshot::Sender<Result<Output, DbError>>>,
    stream: Option<mpsc::Sender<Result<Bytes, DbError>>>,
}

impl Work {
    fn run(self, conn: &mut Connection, tx: oneshot::Sender<Result<Output, DbError>>) {
        // The statement timeout: checked every few thousand virtual-machine steps; time spent
        // waiting for a slow client to take streamed rows does not count.
        let start = Instant::now();
        let deadline = Arc::new(AtomicU64::new(self.timeout.as_millis() as u64));
        let d = deadline.clone();
        // Installing a handler fails only on a closed connection, which the statement then
        // reports.
        let _ = conn.progress_handler(
            4096,
            Some(move || start.elapsed().as_millis() as u64 > d.load(Ordering::Relaxed)),
        );
        let mut reply = Reply {
            first: Some(tx),
            stream: None,
        };
        let result = self.execute(conn, &mut reply, &deadline);
        let _ = conn.progress_handler(0, None::<fn() -> bool>);
        match (result, reply.first.take(), reply.stream.take()) {
            (Ok(out), Some(first), _) => {
                let _ = first.send(Ok(out));
            }
            (Err(e), Some(first), _) => {
                let _ = first.send(Err(e));
            }
            (Ok(Output::Json(last)), None, Some(stream)) => {
                let _ = stream.blocking_send(Ok(last));
            }
            (Err(e), None, Some(stream)) => {
                let _ = stream.blocking_send(Err(e));
            }
            _ => {}
        }
    }

    fn execute(
        &self,
        conn: &mut Connection,
        reply: &mut Reply,
        deadline: &AtomicU64,
    ) -> Result<Output, DbError> {
        if self.statements.len() == 1 {
            return run_one(
                conn,
                &self.statements[0],
                &self.values[0],
                self.shape,
                self.numeric,
                Some((reply, deadline)),
            );
        }
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(classify)?;
        let mut last = Output::Done { affected: 0 };
        for (i, (s, v)) in self.statements.iter().zip(&self.values).enumerate() {
            let shape = if i + 1 == self.statements.len() {
                self.shape
            } else {
                Shape::Empty
            };
            last = run_one(&tx, s, v, shape, self.numeric, None)?;
        }
        // Dropping the transaction on an error above rolls it back.
        tx.commit().map_err(classify)?;
        Ok(last)
    }
}

fn run_one(
    conn: &Connection,
    statement: &Statement,
    values: &[Value],
    shape: Shape,
    numeric: NumericAs,
    mut reply: Option<(&mut Reply, &AtomicU64)>,
) -> Result<Output, DbError> {
    exact(statement, values)?;
    let mut stmt = conn.prepare_cached(statement.sqlite()).map_err(classify)?;
    let binds: Vec<rusqlite::types::Value> = values.iter().map(to_sqlite).collect();
    let mut rows = stmt
        .query(rusqlite::params_from_iter(binds))
        .map_err(classify)?;
    // The columns are read once the statement has run its first step, not before: a cached
    // statement whose table changed since (a column dropped, another added) is prepared
    // again by SQLite at that step, and the names read before it would be the old ones,
    // each put over another column's values.
    let mut described: Option<(Vec<String>, Vec<Decl>)> = None;
    let mut w = RowWriter::new(std::iter::empty::<&str>(), numeric);
    let mut first_id: Option<Vec<u8>> = None;
    let mut count = 0u64;
    if shape == Shape::Rows {
        w.out.push(b'[');
    }
    while let Some(row) = rows.next().map_err(classify)? {
        count += 1;
        let (columns, decls) = described.get_or_insert_with(|| {
            let d = describe(row.as_ref());
            w.set_columns(&d.0);
            d
        });
        match shape {
            Shape::Row if count > 1 => continue,
            Shape::Row | Shape::Rows => {
                w.begin_row(true);
                for (i, decl) in decls.iter().enumerate() {
                    w.key(i);
                    let v = row.get_ref(i).map_err(classify)?;
                    write_cell(&mut w, v, *decl, &columns[i])?;
                }
                w.end_row();
            }
            Shape::Affected if count == 1 && !columns.is_empty() => {
                let mut one = RowWriter::new([""], numeric);
                let v = row.get_ref(0).map_err(classify)?;
                write_cell(&mut one, v, decls[0], &columns[0])?;
                first_id = Some(one.out);
            }
            Shape::Affected | Shape::Empty => {}
        }
        if shape == Shape::Rows && w.out.len() >= STREAM_AFTER {
            if let Some((r, deadline)) = reply.as_mut() {
                let chunk = Bytes::from(std::mem::take(&mut w.out));
                if !send_chunk(r, chunk, deadline) {
                    // The client left: stop reading rows.
                    return Ok(Output::Done { affected: 0 });
                }
            }
        }
    }
    drop(rows);
    let columns = match described {
        Some((columns, _)) => columns,
        None => describe(&stmt).0,
    };
    match shape {
        Shape::Rows => {
            w.out.push(b']');
            Ok(Output::Json(Bytes::from(w.out)))
        }
        Shape::Row if count == 0 => Ok(Output::NoRow),
        Shape::Row => Ok(Output::Json(Bytes::from(w.out))),
        Shape::Affected => {
            let affected = conn.changes();
            let id = first_id.or_else(|| {
                let upper = statement
                    .text
                    .trim_start()
                    .get(..6)
                    .map(str::to_ascii_uppercase);
                (upper.as_deref() == Some("INSERT") && affected > 0)
                    .then(|| conn.last_insert_rowid().to_string().into_bytes())
            });
            let mut out = format!("{{\"affected\":{affected}").into_bytes();
            if let Some(id) = id {
                out.extend_from_slice(b",\"id\":");
                out.extend_from_slice(&id);
            }
            out.push(b'}');
            Ok(Output::Json(Bytes::from(out)))
        }
        Shape::Empty => Ok(Output::Done {
            affected: if columns.is_empty() {
                conn.changes()
            } else {
                count
            },
        }),
    }
}

/// SQLite holds a number as a 64-bit integer or a double: one neither holds exactly is
/// refused, naming the parameter, rather than rounded (bound as text, a column of numeric
/// affinity would round it all the same).
fn exact(statement: &Statement, values: &[Value]) -> Result<(), DbError> {
    for (v, name) in values.iter().zip(&statement.names) {
        if let Value::Decimal(_) = v {
            return Err(DbError::new(
                ErrorClass::BadValue,
                format!(
                    "Parameter '{name}' is a number SQLite cannot hold exactly (more than 64 \
                     bits or about 17 digits): send it as a string"
                ),
                // Not the value itself: it may be a secret.
                format!("parameter '{name}': more digits than SQLite holds exactly"),
            ));
        }
    }
    Ok(())
}

/// A statement's column names and what their declared types say.
fn describe(stmt: &rusqlite::Statement<'_>) -> (Vec<String>, Vec<Decl>) {
    (
        stmt.column_names().map(str::to_owned).collect(),
        stmt.columns().map(|c| Decl::of(c.decl_type())).collect(),
    )
}

/// Hands a chunk on: the first one opens the stream. False when the client is gone.
fn send_chunk(r: &mut Reply, chunk: Bytes, deadline: &AtomicU64) -> bool {
    if let Some(first) = r.first.take() {
        let (tx, rx) = mpsc::channel(4);
        let _ = tx.try_send(Ok(chunk));
        r.stream = Some(tx);
        return first.send(Ok(Output::Stream(rx))).is_ok();
    }
    let Some(tx) = &r.stream else { return false };
    let waited = Instant::now();
    let sent = tx.blocking_send(Ok(chunk)).is_ok();
    let paused = waited.elapsed().as_millis() as u64;
    deadline.fetch_add(paused, Ordering::Relaxed);
    sent
}

/// What a column's declared type says about its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decl {
    Plain,
    Bool,
    Json,
    Numeric,
    Timestamp,
}

impl Decl {
    fn of(decl: Option<&str>) -> Self {
        let Some(d) = decl else { return Decl::Plain };
        let d = d.to_ascii_uppercase();
        if d.contains("BOOL") {
            Decl::Bool
        } else if d.contains("JSON") {
            Decl::Json
        } else if d.contains("NUMERIC") || d.contains("DECIMAL") {
            Decl::Numeric
        } else if d.contains("TIMESTAMP") || d.contains("DATETIME") {
            Decl::Timestamp
        } else {
            Decl::Plain
        }
    }
}

fn write_cell(w: &mut RowWriter, v: ValueRef<'_>, decl: Decl, column: &str) -> Result<(), DbError> {
    match (v, decl) {
        (ValueRef::Null, _) => w.null(),
        (ValueRef::Integer(i), Decl::Bool) => w.bool(i != 0),
        (ValueRef::Integer(i), Decl::Numeric) => w.numeric(&i.to_string()),
        (ValueRef::Integer(i), Decl::Timestamp) => match i.checked_mul(1_000_000) {
            Some(us) => w.string(&rfc3339_micros(us)),
            None => w.int(i),
        },
        (ValueRef::Integer(i), _) => w.int(i),
        (ValueRef::Real(f), Decl::Numeric) if f.is_finite() => {
            w.numeric(crate::value::shortest(&mut ryu::Buffer::new(), f))
        }
        (ValueRef::Real(f), _) => w.float(f),
        (ValueRef::Text(t), Decl::Json) => {
            // SQLite does not check a JSON column's text: only valid JSON goes out as JSON.
            if serde_json::from_slice::<serde::de::IgnoredAny>(t).is_ok() {
                w.raw_json(t);
            } else {
                return Err(DbError::new(
                    ErrorClass::Other,
                    "The database holds a value that cannot be returned",
                    format!("column '{column}' holds text that is not JSON"),
                ));
            }
        }
        (ValueRef::Text(t), _) => match std::str::from_utf8(t) {
            Ok(s) => w.string(s),
            Err(_) => w.bytes(t),
        },
        (ValueRef::Blob(b), _) => w.bytes(b),
    }
    Ok(())
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match v {
        Value::Null => V::Null,
        Value::Bool(b) => V::Integer(i64::from(*b)),
        Value::Int(i) => V::Integer(*i),
        Value::Float(f) => V::Real(*f),
        Value::Text(s) => V::Text(s.clone()),
        Value::Json(j) => V::Text(j.to_string()),
        // Refused before binding (`exact`): kept as text should it ever get here.
        Value::Decimal(t) => V::Text(t.clone()),
    }
}

/// The class and safe message of a SQLite error.
fn classify(e: rusqlite::Error) -> DbError {
    use rusqlite::ffi;
    let detail = e.to_string();
    let rusqlite::Error::SqliteFailure(f, _) = &e else {
        return DbError::new(ErrorClass::Other, "The database failed", detail);
    };
    let (class, message) = match f.code {
        rusqlite::ErrorCode::ConstraintViolation => match f.extended_code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => (
                ErrorClass::Conflict,
                "A row with the same unique value already exists",
            ),
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => (
                ErrorClass::Conflict,
                "The change conflicts with a reference between rows",
            ),
            ffi::SQLITE_CONSTRAINT_NOTNULL => {
                (ErrorClass::BadValue, "A required value is missing or null")
            }
            ffi::SQLITE_CONSTRAINT_CHECK => (
                ErrorClass::BadValue,
                "A value is outside what the table accepts",
            ),
            _ => (
                ErrorClass::Conflict,
                "The change conflicts with a constraint",
            ),
        },
        rusqlite::ErrorCode::TypeMismatch => (ErrorClass::BadValue, "A value has the wrong type"),
        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
            (ErrorClass::Busy, "The database is busy: try again")
        }
        rusqlite::ErrorCode::OperationInterrupted => {
            (ErrorClass::Timeout, "The database did not answer in time")
        }
        rusqlite::ErrorCode::CannotOpen
        | rusqlite::ErrorCode::SystemIoFailure
        | rusqlite::ErrorCode::DiskFull
        | rusqlite::ErrorCode::ReadOnly
        | rusqlite::ErrorCode::NotADatabase
        | rusqlite::ErrorCode::DatabaseCorrupt => {
            (ErrorClass::Unavailable, "The database is unavailable")
        }
        _ => (ErrorClass::Other, "The database failed"),
    };
    DbError::new(class, message, detail)
}
