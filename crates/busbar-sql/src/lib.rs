//! Databases for the `sql` step: SQLite (embedded, on dedicated threads: never on the async
//! workers) and PostgreSQL (tokio-postgres behind a bounded pool).
//!
//! A [`Database`] runs a [`Query`]: one statement, or several in one transaction, with
//! positional values already bound from the statement's named parameters. Results come back
//! as JSON: one row as an object, rows as an array (streamed once they pass a buffer's worth),
//! or `{"affected": n, "id": …}` for writes. Errors carry a class ([`ErrorClass`]) the engine
//! turns into a status, a message safe for clients, and the detail for the log.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

mod postgres;
mod sqlite;
mod statement;
#[cfg(feature = "testing")]
pub mod testing;
mod value;

pub use sqlite::{lock_file, FileLock, LockError};
pub use statement::Statement;
/// Whether a PostgreSQL URL asked for TLS (`sslmode=`).
pub use tokio_postgres::config::SslMode as PgSslMode;
/// PostgreSQL connection settings (parsed from a URL or built field by field).
pub use tokio_postgres::Config as PgConfig;
pub use value::{NumericAs, Value};

/// Rows are buffered up to this many bytes of JSON; past it, the answer streams.
pub const STREAM_AFTER: usize = 16 * 1024;

/// Where a database is and how it is used.
#[derive(Debug, Clone)]
pub struct Options {
    /// The database.
    pub kind: Kind,
    /// Connections (SQLite: threads, one connection each).
    pub pool: usize,
    /// Longest wait for a free connection before a 503.
    pub acquire_timeout: Duration,
    /// Longest time a statement may run before it is cancelled (504).
    pub statement_timeout: Duration,
    /// Longest time to open a connection.
    pub connect_timeout: Duration,
    /// Keep prepared statements per connection (off for PgBouncer in transaction mode).
    pub statement_cache: bool,
    /// SQL run once at start (schema, seed rows); it should be idempotent.
    pub init: Option<String>,
    /// PostgreSQL over TLS with these settings (the server's certificate is checked against
    /// their roots and the host name); `None`: plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Which database.
#[derive(Clone)]
pub enum Kind {
    /// A SQLite file (created when missing), or `:memory:`.
    Sqlite {
        /// The file.
        path: std::path::PathBuf,
        /// How long a writer waits for a lock before giving up (503).
        busy_timeout: Duration,
    },
    /// A PostgreSQL server.
    Postgres(Box<tokio_postgres::Config>),
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Sqlite { path, .. } => write!(f, "sqlite:{}", path.display()),
            Kind::Postgres(c) => write!(
                f,
                "postgres://{}@{:?}/{}",
                c.get_user().unwrap_or(""),
                c.get_hosts(),
                c.get_dbname().unwrap_or("")
            ),
        }
    }
}

/// What a query's answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The first row as an object; [`Output::NoRow`] when there is none.
    Row,
    /// Every row, as an array.
    Rows,
    /// `{"affected": n}`, with `"id"`: the first column of the first row the statement
    /// returned (`RETURNING id`), or SQLite's last insert id after an INSERT.
    Affected,
    /// Nothing but the count of rows changed ([`Output::Done`]).
    Empty,
}

/// A query to run: statements with their values, in one transaction when more than one.
#[derive(Debug)]
pub struct Query<'a> {
    /// The statements, in order; the last one's result is the answer.
    pub statements: &'a [Arc<Statement>],
    /// Values for each statement, by position.
    pub values: Vec<Vec<Value>>,
    /// The answer's shape.
    pub shape: Shape,
    /// How NUMERIC columns are written.
    pub numeric: NumericAs,
}

/// A query's answer.
#[derive(Debug)]
pub enum Output {
    /// A complete JSON document.
    Json(Bytes),
    /// A `row` query found no row.
    NoRow,
    /// No body: the statement ran and changed `affected` rows.
    Done {
        /// Rows inserted, updated or deleted.
        affected: u64,
    },
    /// A JSON array too long to buffer: its chunks in order. An error mid-way ends the
    /// stream with it (the client's connection is then cut, never given a truncated array
    /// as complete).
    Stream(mpsc::Receiver<Result<Bytes, DbError>>),
}

/// What kind of failure, for the status a client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A unique, primary-key or foreign-key constraint (409).
    Conflict,
    /// A value of the wrong type, a missing or NULL value where one is required (400).
    BadValue,
    /// No connection was free in time (503 with Retry-After).
    Busy,
    /// The database is down, not reachable or not initialised (503).
    Unavailable,
    /// A statement ran past its timeout (504).
    Timeout,
    /// Anything else: a broken statement, a type with no JSON form (500).
    Other,
}

/// A database failure: its class, a message safe to show a client, and the detail to log.
#[derive(Debug, Clone)]
pub struct DbError {
    /// What kind of failure.
    pub class: ErrorClass,
    /// For clients: no SQL text, no credentials.
    pub message: String,
    /// For the log: the database's own message (which column or constraint), never a bound
    /// value, as those may be secrets.
    pub detail: String,
    /// A prepared statement the server no longer runs as it was prepared (its tables
    /// changed): preparing it again and running it once more is safe, as nothing ran.
    pub(crate) stale_statement: bool,
}

impl DbError {
    pub(crate) fn new(
        class: ErrorClass,
        message: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            class,
            message: message.into(),
            detail: detail.into(),
            stale_statement: false,
        }
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.message, self.detail)
    }
}

impl std::error::Error for DbError {}

const STARTING: u8 = 0;
const READY: u8 = 1;
const DOWN: u8 = 2;

/// Whether a database is usable, as `/readyz` reports it.
#[derive(Debug, Default)]
pub(crate) struct Health {
    state: AtomicU8,
    last_error: Mutex<String>,
}

impl Health {
    pub fn up(&self) {
        self.state.store(READY, Ordering::Relaxed);
    }

    pub fn down(&self, why: &str) {
        self.state.store(DOWN, Ordering::Relaxed);
        if let Ok(mut e) = self.last_error.lock() {
            why.clone_into(&mut e);
        }
    }

    pub fn is_up(&self) -> bool {
        self.state.load(Ordering::Relaxed) == READY
    }

    pub fn is_starting(&self) -> bool {
        self.state.load(Ordering::Relaxed) == STARTING
    }

    fn report(&self) -> Result<(), String> {
        match self.state.load(Ordering::Relaxed) {
            READY => Ok(()),
            STARTING => Err("starting".into()),
            _ => Err(self
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default()),
        }
    }
}

/// An open database.
pub struct Database {
    name: String,
    backend: Backend,
    health: Arc<Health>,
}

enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(postgres::Postgres),
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("name", &self.name)
            .field("kind", &self.kind())
            .finish()
    }
}

impl Database {
    /// Opens database `name`. SQLite opens (and runs `init`) now, and any failure is
    /// returned; PostgreSQL connects in the background, so the engine starts while it is
    /// unreachable and [`Database::ready`] says why.
    pub fn open(name: &str, options: Options) -> Result<Arc<Database>, String> {
        let health = Arc::new(Health::default());
        let backend = match &options.kind {
            Kind::Sqlite { .. } => Backend::Sqlite(sqlite::Sqlite::open(&options, &health)?),
            Kind::Postgres(_) => {
                Backend::Postgres(postgres::Postgres::open(name, &options, &health)?)
            }
        };
        Ok(Arc::new(Database {
            name: name.to_owned(),
            backend,
            health,
        }))
    }

    /// The database's name in the config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The file of a SQLite database (none for PostgreSQL and SQLite's `:memory:`).
    pub fn sqlite_file(&self) -> Option<&std::path::Path> {
        match &self.backend {
            Backend::Sqlite(s) => s.file(),
            Backend::Postgres(_) => None,
        }
    }

    /// True while a PostgreSQL database has not connected and run its `init` yet (requests
    /// to it are refused meanwhile); never for SQLite, which opens before `open` returns.
    pub fn is_starting(&self) -> bool {
        self.health.is_starting()
    }

    /// Ok when the database answered its last use or probe; why not, otherwise.
    pub fn ready(&self) -> Result<(), String> {
        self.health.report()
    }

    /// Connections checked out now, and the pool's size.
    pub fn pool_status(&self) -> (usize, usize) {
        match &self.backend {
            Backend::Sqlite(s) => s.status(),
            Backend::Postgres(p) => p.status(),
        }
    }

    /// Runs `query`.
    pub async fn run(&self, query: Query<'_>) -> Result<Output, DbError> {
        if query.values.len() != query.statements.len() {
            return Err(DbError::new(
                ErrorClass::Other,
                "Internal error",
                "values for a different number of statements",
            ));
        }
        match &self.backend {
            Backend::Sqlite(s) => s.run(query).await,
            Backend::Postgres(p) => {
                if self.health.is_starting() {
                    return Err(DbError::new(
                        ErrorClass::Unavailable,
                        format!("Database '{}' is not ready", self.name),
                        "not initialised yet",
                    ));
                }
                p.run(query).await
            }
        }
    }
}
