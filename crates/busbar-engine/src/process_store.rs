//! Durable WS-BPEL instances in a database: [`SqlStore`] implements
//! [`busbar_flow::store::Store`] over a [`busbar_sql::Database`], with one table layout for
//! SQLite and PostgreSQL.
//!
//! Layout: `busbar_bpel_instances` holds one row per instance (state, owner, earliest due
//! timer, last snapshot, final variables), `busbar_bpel_keys` a waiting instance's
//! correlation keys and `busbar_bpel_nodes` one heartbeat per node; times are ms since the
//! Unix epoch. Instance ids are `u64` kept in a BIGINT: ids past `i64::MAX` are stored as
//! negative numbers and read back unchanged. Every statement is parsed once, in
//! [`SqlStore::new`]; values are bound by parameter name.
//!
//! Why the SQL looks as it does:
//! - A write refused because another node took the instance over must change nothing, and
//!   there is no way to raise an error from plain SQL that both dialects accept. So every
//!   statement after the instance row's own write is conditional on the row being this
//!   node's, and the transaction ends by reading the owner back: another node's name there
//!   is the refusal. On PostgreSQL that first write (an upsert, or a delete) locks the row,
//!   so the owner cannot change between the statements.
//! - A snapshot never brings back an instance that ended (an administrator terminated it
//!   while its node still ran it): the upsert leaves a finished row as it is.
//! - On PostgreSQL a claim locks its rows with `FOR UPDATE SKIP LOCKED`, and the owner's
//!   heartbeat is checked by a subquery in the WHERE clause, not by a join. When another
//!   node claimed a row after this statement's snapshot was taken, PostgreSQL checks the
//!   WHERE clause again on the row's new version: a subquery is evaluated again for the new
//!   owner, whereas a joined heartbeat row stays the one found for the old owner (none, for
//!   an unowned row), and the row would be claimed twice.
//! - SQLite has one owner per file, and nothing in the file says who: a second busbar on the
//!   same file would resume, accept and time out the same instances. [`Store::hold`] takes
//!   an exclusive lock on `FILE.lock` beside it ([`busbar_sql::FileLock`]) for the life of
//!   the process's stores; the stores of one process (a reload's beside the old one's)
//!   share it through [`HELD`].

use std::sync::Arc;
use std::time::Duration;

use busbar_flow::runtime::BoxFuture;
use busbar_flow::store::{Beat, Counts, Finish, KeyOwner, Save, State, Store, Stored, Terminated};
use busbar_sql::{
    Database, DbError, FileLock, LockError, NumericAs, Output, Query, Shape, Statement, Value,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;

const CREATE: [&str; 7] = [
    "CREATE TABLE IF NOT EXISTS busbar_bpel_nodes (
       node TEXT PRIMARY KEY,
       heartbeat BIGINT NOT NULL,
       boot TEXT
     )",
    "CREATE TABLE IF NOT EXISTS busbar_bpel_instances (
       id BIGINT PRIMARY KEY,
       process TEXT NOT NULL,
       state TEXT NOT NULL,
       owner TEXT,
       started BIGINT NOT NULL,
       updated BIGINT NOT NULL,
       due BIGINT,
       snapshot TEXT,
       final TEXT
     )",
    "CREATE INDEX IF NOT EXISTS busbar_bpel_instances_state_due
       ON busbar_bpel_instances (state, due)",
    "CREATE INDEX IF NOT EXISTS busbar_bpel_instances_owner ON busbar_bpel_instances (owner)",
    "CREATE INDEX IF NOT EXISTS busbar_bpel_instances_process_state
       ON busbar_bpel_instances (process, state)",
    "CREATE TABLE IF NOT EXISTS busbar_bpel_keys (
       process TEXT NOT NULL,
       key TEXT NOT NULL,
       instance BIGINT NOT NULL,
       PRIMARY KEY (process, key)
     )",
    "CREATE INDEX IF NOT EXISTS busbar_bpel_keys_instance ON busbar_bpel_keys (instance)",
];

/// Nodes starting together on an empty PostgreSQL database would race to create the same
/// tables (`CREATE … IF NOT EXISTS` is not atomic there); a transaction-scoped advisory lock
/// makes them take turns. The number is arbitrary, the same in every busbar.
const PG_INIT_LOCK: &str = "SELECT pg_advisory_xact_lock(7310293695437070962)";

const UPSERT_WAITING: &str = "
INSERT INTO busbar_bpel_instances (id, process, state, owner, started, updated, due, snapshot, final)
VALUES (:id, :process, 'waiting', :node, :started, :now, :due, :snapshot, NULL)
ON CONFLICT (id) DO UPDATE SET
  state = 'waiting', owner = excluded.owner, updated = excluded.updated, due = excluded.due,
  snapshot = excluded.snapshot, final = NULL
WHERE (busbar_bpel_instances.owner = excluded.owner OR busbar_bpel_instances.owner IS NULL)
  AND busbar_bpel_instances.state = 'waiting'";

/// The snapshot of an instance that waited is kept; one that never did is inserted without.
const UPSERT_FINISHED: &str = "
INSERT INTO busbar_bpel_instances (id, process, state, owner, started, updated, due, snapshot, final)
VALUES (:id, :process, :state, :node, :started, :now, NULL, NULL, :final)
ON CONFLICT (id) DO UPDATE SET
  state = excluded.state, owner = excluded.owner, updated = excluded.updated, due = NULL,
  final = excluded.final
WHERE busbar_bpel_instances.owner = excluded.owner OR busbar_bpel_instances.owner IS NULL";

const DELETE_KEYS_IF_OWNED: &str = "
DELETE FROM busbar_bpel_keys WHERE instance = :id
  AND EXISTS (SELECT 1 FROM busbar_bpel_instances WHERE id = :id AND owner = :node)";

/// The casts type the parameters on PostgreSQL, where a bare parameter in a select list
/// would be text.
const INSERT_KEY_IF_OWNED: &str = "
INSERT INTO busbar_bpel_keys (process, key, instance)
SELECT CAST(:process AS TEXT), CAST(:key AS TEXT), CAST(:id AS BIGINT)
WHERE EXISTS (SELECT 1 FROM busbar_bpel_instances WHERE id = :id AND owner = :node)
ON CONFLICT (process, key) DO UPDATE SET instance = excluded.instance";

const DELETE_IF_OWNED: &str = "
DELETE FROM busbar_bpel_instances WHERE id = :id AND (owner = :node OR owner IS NULL)";

const DELETE_KEYS_IF_GONE: &str = "
DELETE FROM busbar_bpel_keys WHERE instance = :id
  AND NOT EXISTS (SELECT 1 FROM busbar_bpel_instances WHERE id = :id)";

const OWNER: &str = "SELECT owner FROM busbar_bpel_instances WHERE id = :id";

/// The owners of the instances a group of writes touched (`:ids`: a JSON array).
const OWNERS_SQLITE: &str = "
SELECT id, owner FROM busbar_bpel_instances WHERE id IN (SELECT value FROM json_each(:ids))";
const OWNERS_POSTGRES: &str = "
SELECT id, owner FROM busbar_bpel_instances
WHERE id IN (SELECT CAST(json_array_elements_text(CAST(:ids AS json)) AS BIGINT))";

/// Finished instances never written before, many rows in one statement (`:rows`: a JSON
/// array of objects).
const INSERT_FIRST_SQLITE: &str = "
INSERT INTO busbar_bpel_instances (id, process, state, owner, started, updated, final)
SELECT json_extract(value, '$.id'), json_extract(value, '$.process'),
  json_extract(value, '$.state'), json_extract(value, '$.owner'),
  json_extract(value, '$.started'), json_extract(value, '$.updated'),
  json_extract(value, '$.final')
FROM json_each(:rows)";
const INSERT_FIRST_POSTGRES: &str = "
INSERT INTO busbar_bpel_instances (id, process, state, owner, started, updated, final)
SELECT r.id, r.process, r.state, r.owner, r.started, r.updated, r.final
FROM json_to_recordset(CAST(:rows AS json))
  AS r(id BIGINT, process TEXT, state TEXT, owner TEXT, started BIGINT, updated BIGINT, final TEXT)";

/// Most writes committed in one transaction.
const GROUP: usize = 256;

/// Tables made by a busbar before nodes had boot ids get the column (PostgreSQL; SQLite,
/// which has no `IF NOT EXISTS` here, runs [`ADD_BOOT_SQLITE`] and ignores "duplicate column").
const ADD_BOOT_POSTGRES: &str = "ALTER TABLE busbar_bpel_nodes ADD COLUMN IF NOT EXISTS boot TEXT";
const ADD_BOOT_SQLITE: &str = "ALTER TABLE busbar_bpel_nodes ADD COLUMN boot TEXT";

/// A process writes its node's heartbeat only when the row is its own (its boot id), has no
/// boot id (written by an older busbar), is older than the lease, or still holds the value
/// the process saw before (`:seen`: the process that wrote it has stopped beating). The
/// row read back after it tells whether the write happened.
const HEARTBEAT: &str = "
INSERT INTO busbar_bpel_nodes (node, heartbeat, boot) VALUES (:node, :now, :boot)
ON CONFLICT (node) DO UPDATE SET heartbeat = excluded.heartbeat, boot = excluded.boot
WHERE busbar_bpel_nodes.boot IS NULL OR busbar_bpel_nodes.boot = excluded.boot
   OR busbar_bpel_nodes.heartbeat < :stale OR busbar_bpel_nodes.heartbeat = :seen";

const NODE_ROW: &str = "SELECT boot, heartbeat FROM busbar_bpel_nodes WHERE node = :node";

/// A waiting instance no live node other than `:node` runs: no owner, this node, or an
/// owner whose heartbeat is older than the lease.
const UNRUN: &str = "(owner IS NULL OR owner = :node
  OR NOT EXISTS (SELECT 1 FROM busbar_bpel_nodes n
                 WHERE n.node = busbar_bpel_instances.owner AND n.heartbeat >= :stale))";

/// The instance, its owner and the owner's heartbeat.
const RUNNER: &str = "
SELECT i.state, i.owner, n.heartbeat
FROM busbar_bpel_instances i LEFT JOIN busbar_bpel_nodes n ON n.node = i.owner
WHERE i.id = :id";

/// Which waiting instances a node may claim; `{processes}` is the dialect's way of reading
/// the JSON array of process names bound to `:processes`. `:paged` = 1 keeps only ids after
/// `:after` (the last of the page before), in the stored (signed) order the claim sorts by.
const CLAIMABLE: &str = "
i.state = 'waiting'
AND i.process IN ({processes})
AND (:paged = 0 OR i.id > :after)
AND (i.owner IS NULL
     OR (:own = 1 AND i.owner = :node)
     OR NOT EXISTS (SELECT 1 FROM busbar_bpel_nodes n
                    WHERE n.node = i.owner AND n.heartbeat >= :stale))";

const COLUMNS: &str = "id, process, state, owner, started, updated, due, snapshot, final";

const KEY_OWNER: &str = "
SELECT i.id, i.owner, n.heartbeat
FROM busbar_bpel_keys k
JOIN busbar_bpel_instances i ON i.id = k.instance
LEFT JOIN busbar_bpel_nodes n ON n.node = i.owner
WHERE k.process = :process AND k.key = :key AND i.state = 'waiting'";

const GET: &str = "
SELECT id, process, state, owner, started, updated, due, snapshot, final
FROM busbar_bpel_instances WHERE id = :id";

/// Locks the row (PostgreSQL) when it is in state `from`, so the statements after it see the
/// same state.
const LOCK_IN_STATE: &str =
    "UPDATE busbar_bpel_instances SET state = state WHERE id = :id AND state = :from";

const DELETE_KEYS_IN_STATE: &str = "
DELETE FROM busbar_bpel_keys WHERE instance = :id
  AND EXISTS (SELECT 1 FROM busbar_bpel_instances WHERE id = :id AND state = :from)";

const TO_WAITING: &str = "
UPDATE busbar_bpel_instances SET state = 'waiting', owner = :node, updated = :now
WHERE id = :id AND state = :from";

const TO_FINISHED: &str = "
UPDATE busbar_bpel_instances SET state = :to, owner = :node, updated = :now, due = NULL
WHERE id = :id AND state = :from";

const COUNTS: &str = "
SELECT process, state, COUNT(*) AS n FROM busbar_bpel_instances
GROUP BY process, state ORDER BY process, state";

/// The SQLite lock files this process holds, by the database file's canonical path; an
/// entry lives as long as a store holding it.
static HELD: std::sync::Mutex<Vec<(std::path::PathBuf, std::sync::Weak<FileLock>)>> =
    std::sync::Mutex::new(Vec::new());

/// Takes (or shares, within this process) the lock of SQLite database `file`.
fn lock_sqlite(file: &std::path::Path) -> Result<Arc<FileLock>, String> {
    let key = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.retain(|(_, w)| w.strong_count() > 0);
    if let Some(l) = held
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(l);
    }
    let mut name = key.clone().into_os_string();
    name.push(".lock");
    let path = std::path::PathBuf::from(name);
    let l = busbar_sql::lock_file(&path).map_err(|e| match e {
        LockError::Held => format!(
            "the SQLite database {} keeps the durable instances of another running busbar \
             (it holds {}): a SQLite file has one node only; give each busbar a file of its \
             own, or use PostgreSQL to share instances",
            key.display(),
            path.display()
        ),
        LockError::Failed(e) => format!("cannot lock {}: {e}", path.display()),
    })?;
    let l = Arc::new(l);
    held.push((key, Arc::downgrade(&l)));
    Ok(l)
}

/// A [`Store`] in a SQLite or PostgreSQL database.
pub struct SqlStore {
    db: Arc<Database>,
    sql: Arc<Sql>,
    /// The lock of a SQLite file, once [`Store::hold`] took it.
    held: std::sync::OnceLock<Arc<FileLock>>,
    /// Saves and finishes go to one writer that commits what has queued up meanwhile in one
    /// transaction (group commit); started by the first write.
    writer: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Write>>,
    /// The tables exist (created by the first use, or by [`Store::init`]).
    ready: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// Every statement, parsed for the database's dialect.
struct Sql {
    init: Vec<Arc<Statement>>,
    upsert_waiting: Arc<Statement>,
    upsert_finished: Arc<Statement>,
    delete_keys_if_owned: Arc<Statement>,
    insert_key_if_owned: Arc<Statement>,
    delete_if_owned: Arc<Statement>,
    delete_keys_if_gone: Arc<Statement>,
    owner: Arc<Statement>,
    owners: Arc<Statement>,
    insert_first: Arc<Statement>,
    heartbeat: Arc<Statement>,
    node_row: Arc<Statement>,
    terminate_keys: Arc<Statement>,
    terminate: Arc<Statement>,
    runner: Arc<Statement>,
    /// Adds the boot id column to an older table.
    add_boot: Arc<Statement>,
    claim: Arc<Statement>,
    key_owner: Arc<Statement>,
    /// By (process filter, state filter).
    list: [Arc<Statement>; 4],
    get: Arc<Statement>,
    lock_in_state: Arc<Statement>,
    delete_keys_in_state: Arc<Statement>,
    to_waiting: Arc<Statement>,
    to_finished: Arc<Statement>,
    cleanup_keys: Arc<Statement>,
    cleanup: Arc<Statement>,
    counts: Arc<Statement>,
}

fn parse(sql: &str) -> Result<Arc<Statement>, String> {
    Statement::parse(sql)
        .map(Arc::new)
        .map_err(|e| format!("{e}: {sql}"))
}

impl Sql {
    fn new(postgres: bool) -> Result<Self, String> {
        let mut init = Vec::with_capacity(CREATE.len() + 1);
        if postgres {
            init.push(parse(PG_INIT_LOCK)?);
        }
        for c in CREATE {
            init.push(parse(c)?);
        }
        if postgres {
            init.push(parse(ADD_BOOT_POSTGRES)?);
        }
        let claim = if postgres {
            let claimable = CLAIMABLE.replace(
                "{processes}",
                "SELECT json_array_elements_text(CAST(:processes AS json))",
            );
            format!(
                "WITH picked AS (
                   SELECT i.id FROM busbar_bpel_instances i
                   WHERE {claimable}
                   ORDER BY i.id LIMIT :limit
                   FOR UPDATE OF i SKIP LOCKED
                 )
                 UPDATE busbar_bpel_instances AS t SET owner = :node, updated = :now
                 FROM picked WHERE t.id = picked.id
                 RETURNING t.id, t.process, t.state, t.owner, t.started, t.updated, t.due,
                           t.snapshot, t.final"
            )
        } else {
            // One writer at a time: the statement alone is the transaction that claims.
            let claimable =
                CLAIMABLE.replace("{processes}", "SELECT value FROM json_each(:processes)");
            format!(
                "UPDATE busbar_bpel_instances SET owner = :node, updated = :now
                 WHERE id IN (SELECT i.id FROM busbar_bpel_instances i
                              WHERE {claimable}
                              ORDER BY i.id LIMIT :limit)
                 RETURNING {COLUMNS}"
            )
        };
        // Newest by last change, not by id: ids need not grow with time across nodes.
        let list = |filter: &str| {
            parse(&format!(
                "SELECT id, process, state, owner, started, updated, due
                 FROM busbar_bpel_instances {filter}
                 ORDER BY updated DESC, id DESC LIMIT :limit"
            ))
        };
        let finished = State::ALL
            .iter()
            .filter(|s| **s != State::Waiting)
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Self {
            init,
            upsert_waiting: parse(UPSERT_WAITING)?,
            upsert_finished: parse(UPSERT_FINISHED)?,
            delete_keys_if_owned: parse(DELETE_KEYS_IF_OWNED)?,
            insert_key_if_owned: parse(INSERT_KEY_IF_OWNED)?,
            delete_if_owned: parse(DELETE_IF_OWNED)?,
            delete_keys_if_gone: parse(DELETE_KEYS_IF_GONE)?,
            owner: parse(OWNER)?,
            owners: parse(if postgres {
                OWNERS_POSTGRES
            } else {
                OWNERS_SQLITE
            })?,
            insert_first: parse(if postgres {
                INSERT_FIRST_POSTGRES
            } else {
                INSERT_FIRST_SQLITE
            })?,
            heartbeat: parse(HEARTBEAT)?,
            node_row: parse(NODE_ROW)?,
            terminate_keys: parse(&format!(
                "DELETE FROM busbar_bpel_keys WHERE instance = :id
                   AND EXISTS (SELECT 1 FROM busbar_bpel_instances
                               WHERE id = :id AND state = 'waiting' AND {UNRUN})"
            ))?,
            terminate: parse(&format!(
                "UPDATE busbar_bpel_instances
                 SET state = 'terminated', owner = :node, updated = :now, due = NULL
                 WHERE id = :id AND state = 'waiting' AND {UNRUN}"
            ))?,
            runner: parse(RUNNER)?,
            add_boot: parse(if postgres {
                ADD_BOOT_POSTGRES
            } else {
                ADD_BOOT_SQLITE
            })?,
            claim: parse(&claim)?,
            key_owner: parse(KEY_OWNER)?,
            list: [
                list("")?,
                list("WHERE state = :state")?,
                list("WHERE process = :process")?,
                list("WHERE process = :process AND state = :state")?,
            ],
            get: parse(GET)?,
            lock_in_state: parse(LOCK_IN_STATE)?,
            delete_keys_in_state: parse(DELETE_KEYS_IN_STATE)?,
            to_waiting: parse(TO_WAITING)?,
            to_finished: parse(TO_FINISHED)?,
            cleanup_keys: parse(&format!(
                "DELETE FROM busbar_bpel_keys
                 WHERE instance IN (SELECT id FROM busbar_bpel_instances
                                    WHERE state IN ({finished}) AND updated < :before)
                    OR NOT EXISTS (SELECT 1 FROM busbar_bpel_instances i
                                   WHERE i.id = busbar_bpel_keys.instance)"
            ))?,
            cleanup: parse(&format!(
                "DELETE FROM busbar_bpel_instances
                 WHERE state IN ({finished}) AND updated < :before"
            ))?,
            counts: parse(COUNTS)?,
        })
    }
}

/// Statements to run in one transaction, with their values bound by name.
struct Batch {
    statements: Vec<Arc<Statement>>,
    values: Vec<Vec<Value>>,
}

impl Batch {
    fn new() -> Self {
        Self {
            statements: Vec::new(),
            values: Vec::new(),
        }
    }

    fn of(statement: &Arc<Statement>, params: &[(&str, Value)]) -> Result<Self, String> {
        let mut b = Self::new();
        b.push(statement, params)?;
        Ok(b)
    }

    /// Adds `statement` with the values of its parameters taken from `params`.
    fn push(&mut self, statement: &Arc<Statement>, params: &[(&str, Value)]) -> Result<(), String> {
        let values = statement
            .names
            .iter()
            .map(|name| {
                params
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| format!("no value for parameter '{name}'"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.statements.push(statement.clone());
        self.values.push(values);
        Ok(())
    }
}

/// An instance row as the database returns it.
#[derive(Debug, Deserialize)]
struct InstanceRow {
    id: i64,
    process: String,
    state: String,
    owner: Option<String>,
    started: i64,
    updated: i64,
    due: Option<i64>,
    snapshot: Option<String>,
    #[serde(rename = "final")]
    final_state: Option<String>,
}

impl InstanceRow {
    fn into_stored(self) -> Result<Stored, String> {
        Ok(Stored {
            id: self.id as u64,
            state: state(&self.state, self.id)?,
            process: self.process,
            owner: self.owner,
            started_ms: self.started,
            updated_ms: self.updated,
            due_ms: self.due,
            snapshot: self.snapshot,
            final_state: self.final_state,
        })
    }
}

fn state(s: &str, id: i64) -> Result<State, String> {
    State::parse(s).ok_or_else(|| format!("instance {} has an unknown state '{s}'", id as u64))
}

#[derive(Debug, Deserialize)]
struct OwnerRow {
    owner: Option<String>,
}

#[derive(Debug, Deserialize)]
struct KeyRow {
    id: i64,
    owner: Option<String>,
    heartbeat: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct NodeRow {
    boot: Option<String>,
    heartbeat: i64,
}

#[derive(Debug, Deserialize)]
struct RunnerRow {
    state: String,
    owner: Option<String>,
    heartbeat: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct CountRow {
    process: String,
    state: String,
    n: i64,
}

fn id(id: u64) -> Value {
    Value::Int(id as i64)
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn opt_text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, text)
}

fn opt_int(i: Option<i64>) -> Value {
    i.map_or(Value::Null, Value::Int)
}

fn count(n: usize) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The earliest heartbeat of a node still within the lease.
fn stale(now_ms: i64, lease: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

fn db_error(e: DbError) -> String {
    format!("{}: {}", e.message, e.detail)
}

/// Every row of a `Rows` answer.
async fn rows<T: DeserializeOwned>(out: Output) -> Result<Vec<T>, String> {
    let bytes = match out {
        Output::Json(b) => b.to_vec(),
        Output::Stream(mut rx) => {
            let mut all = Vec::new();
            while let Some(chunk) = rx.recv().await {
                all.extend_from_slice(&chunk.map_err(db_error)?);
            }
            all
        }
        Output::NoRow => return Ok(Vec::new()),
        Output::Done { .. } => return Err("the database answered without rows".into()),
    };
    serde_json::from_slice(&bytes).map_err(|e| format!("unexpected rows from the database: {e}"))
}

/// The row of a `Row` answer, if any.
fn row<T: DeserializeOwned>(out: Output) -> Result<Option<T>, String> {
    match out {
        Output::Json(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| format!("unexpected row from the database: {e}")),
        Output::NoRow => Ok(None),
        Output::Done { .. } | Output::Stream(_) => {
            Err("the database answered without a row".into())
        }
    }
}

/// The count of rows an `Empty` answer changed.
fn affected(out: Output) -> Result<u64, String> {
    match out {
        Output::Done { affected } => Ok(affected),
        _ => Err("the database answered without a count".into()),
    }
}

/// Runs `batch` (one transaction when it has several statements).
async fn run_batch(db: &Database, batch: Batch, shape: Shape) -> Result<Output, String> {
    db.run(Query {
        statements: &batch.statements,
        values: batch.values,
        shape,
        numeric: NumericAs::Number,
    })
    .await
    .map_err(db_error)
}

/// What one instance's write is.
enum Op {
    Save(Save),
    Finish(Finish),
}

impl Op {
    fn id(&self) -> u64 {
        match self {
            Op::Save(s) => s.id,
            Op::Finish(f) => f.id,
        }
    }

    fn node(&self) -> &str {
        match self {
            Op::Save(s) => &s.node,
            Op::Finish(f) => &f.node,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Op::Save(_) => "saved",
            Op::Finish(_) => "finished",
        }
    }

    /// A finished instance never written before: a row of the group's multi-row insert.
    fn first_row(&self) -> Option<serde_json::Value> {
        match self {
            Op::Finish(f) if f.first && f.keep => Some(serde_json::json!({
                "id": f.id as i64,
                "process": f.process,
                "state": f.state.as_str(),
                "owner": f.node,
                "started": f.started_ms,
                "updated": f.at_ms,
                "final": f.final_state,
            })),
            _ => None,
        }
    }

    /// Adds the write's statements to `batch`, each acting only on a row this node owns
    /// (or none does): a waiting instance's snapshot and keys, or a finished one kept or
    /// deleted.
    fn push_to(&self, sql: &Sql, batch: &mut Batch) -> Result<(), String> {
        match self {
            Op::Save(save) => {
                let mut params = vec![
                    ("id", id(save.id)),
                    ("process", text(&save.process)),
                    ("node", text(&save.node)),
                    ("started", Value::Int(save.started_ms)),
                    ("now", Value::Int(save.at_ms)),
                    ("due", opt_int(save.due_ms)),
                    ("snapshot", text(&save.snapshot)),
                    ("key", Value::Null),
                ];
                batch.push(&sql.upsert_waiting, &params)?;
                batch.push(&sql.delete_keys_if_owned, &params)?;
                for key in &save.keys {
                    if let Some(slot) = params.last_mut() {
                        slot.1 = text(key);
                    }
                    batch.push(&sql.insert_key_if_owned, &params)?;
                }
            }
            Op::Finish(finish) => {
                let params = [
                    ("id", id(finish.id)),
                    ("process", text(&finish.process)),
                    ("state", text(finish.state.as_str())),
                    ("node", text(&finish.node)),
                    ("started", Value::Int(finish.started_ms)),
                    ("now", Value::Int(finish.at_ms)),
                    ("final", text(&finish.final_state)),
                ];
                if finish.keep {
                    batch.push(&sql.upsert_finished, &params)?;
                    batch.push(&sql.delete_keys_if_owned, &params)?;
                } else {
                    batch.push(&sql.delete_if_owned, &params)?;
                    batch.push(&sql.delete_keys_if_gone, &params)?;
                }
            }
        }
        Ok(())
    }
}

/// One instance's write waiting for the group writer.
struct Write {
    op: Op,
    done: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// Commits queued writes: what queued up while the last transactions ran goes into the next
/// one, so a busy node pays one commit for many instances. On PostgreSQL as many groups as
/// the pool has connections commit at once (the server flushes their commits together); on
/// SQLite, which has one writer, one at a time. Two writes of one instance are never in
/// flight together: the engine waits for one to commit before it sends the next. Each write's statements only act
/// on rows this node owns; the owners read back at the end of the transaction tell which
/// writes were refused (another node took the instance over). When a group fails as a
/// whole, each of its writes is tried alone, so one bad write fails only itself.
async fn group_writer(
    db: Arc<Database>,
    sql: Arc<Sql>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Write>,
) {
    let parallel = match db.kind() {
        "postgres" => db.pool_status().1.max(1),
        _ => 1,
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(parallel));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut group = vec![first];
        while group.len() < GROUP {
            match rx.try_recv() {
                Ok(w) => group.push(w),
                Err(_) => break,
            }
        }
        let (db, sql) = (db.clone(), sql.clone());
        tokio::spawn(async move {
            commit_group(&db, &sql, group).await;
            drop(slot);
        });
    }
}

/// Commits one group of writes and tells each its outcome.
async fn commit_group(db: &Arc<Database>, sql: &Sql, group: Vec<Write>) {
    let tell_all = |group: Vec<Write>, e: &str| {
        for w in group {
            let (what, id) = (w.op.what(), w.op.id());
            let _ = w.done.send(Err(format!("{what} instance {id}: {e}")));
        }
    };
    let mut batch = Batch::new();
    let mut first_rows = Vec::new();
    for w in &group {
        let pushed = match w.op.first_row() {
            Some(r) => {
                first_rows.push(r);
                Ok(())
            }
            None => w.op.push_to(sql, &mut batch),
        };
        if let Err(e) = pushed {
            return tell_all(group, &e);
        }
    }
    let only_first = first_rows.len() == group.len();
    if !first_rows.is_empty() {
        let json = Value::Text(serde_json::to_string(&first_rows).unwrap_or_default());
        if let Err(e) = batch.push(&sql.insert_first, &[("rows", json)]) {
            return tell_all(group, &e);
        }
    }
    let result = if only_first {
        // Only new rows: one statement, its own transaction, one round trip; a taken id
        // fails it (and the writes are then tried alone).
        let expected = first_rows.len() as u64;
        match run_batch(db, batch, Shape::Empty).await {
            Ok(Output::Done { affected }) if affected == expected => Ok(Vec::new()),
            Ok(_) => Err(format!("inserted fewer than {expected} instances")),
            Err(e) => Err(e),
        }
    } else {
        let ids: Vec<i64> = group.iter().map(|w| w.op.id() as i64).collect();
        let ids = Value::Text(serde_json::to_string(&ids).unwrap_or_default());
        match batch.push(&sql.owners, &[("ids", ids)]) {
            Ok(()) => match run_batch(db, batch, Shape::Rows).await {
                Ok(out) => rows::<IdOwnerRow>(out).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(found) => {
            for w in group {
                let other = found
                    .iter()
                    .find(|r| r.id as u64 == w.op.id())
                    .and_then(|r| r.owner.clone())
                    .filter(|o| o != w.op.node());
                let r = match other {
                    Some(other) => Err(refused(&w.op, &other)),
                    None => Ok(()),
                };
                let _ = w.done.send(r);
            }
        }
        Err(_) if group.len() > 1 => {
            for w in group {
                let r = commit_alone(db, sql, &w.op).await;
                let _ = w.done.send(r);
            }
        }
        Err(e) => tell_all(group, &e),
    }
}

/// One write in a transaction of its own, ending with its row's owner read back.
async fn commit_alone(db: &Database, sql: &Sql, op: &Op) -> Result<(), String> {
    let mut batch = Batch::new();
    op.push_to(sql, &mut batch)?;
    batch.push(&sql.owner, &[("id", id(op.id()))])?;
    match run_batch(db, batch, Shape::Row).await {
        Ok(out) => match row::<OwnerRow>(out)? {
            Some(OwnerRow { owner: Some(o) }) if o != op.node() => Err(refused(op, &o)),
            _ => Ok(()),
        },
        Err(e) => Err(format!("{} instance {}: {e}", op.what(), op.id())),
    }
}

fn refused(op: &Op, other: &str) -> String {
    format!(
        "instance {} is owned by node '{other}' now (it was taken over): not {} by '{}'",
        op.id(),
        op.what(),
        op.node()
    )
}

#[derive(Deserialize)]
struct IdOwnerRow {
    id: i64,
    owner: Option<String>,
}

impl SqlStore {
    /// A store in `db`; its tables are created when missing by [`Store::init`] or before
    /// the first statement, whichever comes first.
    pub fn new(db: Arc<Database>) -> Result<SqlStore, String> {
        let sql = Arc::new(Sql::new(db.kind() == "postgres")?);
        Ok(SqlStore {
            db,
            sql,
            writer: std::sync::OnceLock::new(),
            ready: tokio::sync::OnceCell::new(),
            held: std::sync::OnceLock::new(),
        })
    }

    /// Creates the tables once.
    async fn ensure(&self) -> Result<(), String> {
        self.ready
            .get_or_try_init(|| async {
                let mut batch = Batch::new();
                for s in &self.sql.init {
                    batch.push(s, &[])?;
                }
                self.run_raw(batch, Shape::Empty)
                    .await
                    .map_err(|e| format!("creating the process tables: {e}"))?;
                if self.db.kind() != "postgres" {
                    match self
                        .run_raw(Batch::of(&self.sql.add_boot, &[])?, Shape::Empty)
                        .await
                    {
                        Err(e) if !e.contains("duplicate column") => {
                            return Err(format!("updating the process tables: {e}"))
                        }
                        _ => {}
                    }
                }
                Ok::<(), String>(())
            })
            .await
            .map(|_| ())
    }

    async fn run(&self, batch: Batch, shape: Shape) -> Result<Output, String> {
        self.ensure().await?;
        self.run_raw(batch, shape).await
    }

    async fn run_raw(&self, batch: Batch, shape: Shape) -> Result<Output, String> {
        run_batch(&self.db, batch, shape).await
    }

    async fn save_now(&self, save: Save) -> Result<(), String> {
        self.write(Op::Save(save)).await
    }

    async fn finish_now(&self, finish: Finish) -> Result<(), String> {
        if finish.state == State::Waiting {
            return Err(format!(
                "instance {} cannot finish in state 'waiting'",
                finish.id
            ));
        }
        self.write(Op::Finish(finish)).await
    }

    /// Queues a write for the group writer and waits for its commit.
    async fn write(&self, op: Op) -> Result<(), String> {
        self.ensure().await?;
        let (id, what) = (op.id(), op.what());
        let tx = self.writer.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(group_writer(self.db.clone(), self.sql.clone(), rx));
            tx
        });
        let (done, wait) = tokio::sync::oneshot::channel();
        tx.send(Write { op, done })
            .map_err(|_| format!("{what} instance {id}: the writer has stopped"))?;
        wait.await
            .unwrap_or_else(|_| Err(format!("{what} instance {id}: the writer has stopped")))
    }

    #[allow(clippy::too_many_arguments)]
    async fn claim_now(
        &self,
        node: &str,
        own: bool,
        stale_ms: i64,
        now_ms: i64,
        processes: Vec<String>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Stored>, String> {
        if processes.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let params = [
            ("node", text(node)),
            ("own", Value::Int(i64::from(own))),
            ("stale", Value::Int(stale_ms)),
            ("now", Value::Int(now_ms)),
            ("processes", Value::Json(processes.into())),
            ("paged", Value::Int(i64::from(after.is_some()))),
            ("after", id(after.unwrap_or(0))),
            ("limit", count(limit)),
        ];
        let out = self
            .run(Batch::of(&self.sql.claim, &params)?, Shape::Rows)
            .await
            .map_err(|e| format!("claiming instances for '{node}': {e}"))?;
        let mut claimed = rows::<InstanceRow>(out)
            .await?
            .into_iter()
            .map(InstanceRow::into_stored)
            .collect::<Result<Vec<_>, _>>()?;
        // In the order the statement pages by: the stored, signed, value of the id.
        claimed.sort_by_key(|s| s.id as i64);
        Ok(claimed)
    }

    async fn transition_now(
        &self,
        instance: u64,
        from: State,
        to: State,
        node: Option<String>,
        now_ms: i64,
    ) -> Result<bool, String> {
        let params = [
            ("id", id(instance)),
            ("from", text(from.as_str())),
            ("to", text(to.as_str())),
            ("node", opt_text(node.as_deref())),
            ("now", Value::Int(now_ms)),
        ];
        let batch = if to == State::Waiting {
            Batch::of(&self.sql.to_waiting, &params)?
        } else {
            let mut b = Batch::of(&self.sql.lock_in_state, &params)?;
            b.push(&self.sql.delete_keys_in_state, &params)?;
            b.push(&self.sql.to_finished, &params)?;
            b
        };
        let out = self.run(batch, Shape::Empty).await.map_err(|e| {
            format!(
                "moving instance {instance} from '{}' to '{}': {e}",
                from.as_str(),
                to.as_str()
            )
        })?;
        Ok(affected(out)? > 0)
    }
}

impl Store for SqlStore {
    fn kind(&self) -> &'static str {
        self.db.kind()
    }

    fn init(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.ensure())
    }

    fn hold(&self) -> Result<(), String> {
        let Some(file) = self.db.sqlite_file() else {
            return Ok(());
        };
        if self.held.get().is_none() {
            let l = lock_sqlite(file)?;
            let _ = self.held.set(l);
        }
        Ok(())
    }

    fn save(&self, save: Save) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.save_now(save))
    }

    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.finish_now(finish))
    }

    fn heartbeat(
        &self,
        node: &str,
        boot: &str,
        now_ms: i64,
        lease: Duration,
        seen: Option<i64>,
    ) -> BoxFuture<'_, Result<Beat, String>> {
        let params = [
            ("node", text(node)),
            ("boot", text(boot)),
            ("now", Value::Int(now_ms)),
            ("stale", Value::Int(stale(now_ms, lease))),
            // No heartbeat is ever i64::MIN: nothing was seen.
            ("seen", Value::Int(seen.unwrap_or(i64::MIN))),
        ];
        let (node, boot) = (node.to_owned(), boot.to_owned());
        Box::pin(async move {
            let mut batch = Batch::of(&self.sql.heartbeat, &params)?;
            batch.push(&self.sql.node_row, &params)?;
            let out = self
                .run(batch, Shape::Row)
                .await
                .map_err(|e| format!("recording the heartbeat of '{node}': {e}"))?;
            Ok(match row::<NodeRow>(out)? {
                Some(NodeRow {
                    boot: Some(other),
                    heartbeat,
                }) if other != boot => Beat::Held {
                    boot: other,
                    heartbeat_ms: heartbeat,
                },
                _ => Beat::Written,
            })
        })
    }

    fn claim(
        &self,
        node: &str,
        own: bool,
        lease: Duration,
        now_ms: i64,
        processes: &[String],
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Stored>, String>> {
        let node = node.to_owned();
        let processes = processes.to_vec();
        Box::pin(async move {
            self.claim_now(
                &node,
                own,
                stale(now_ms, lease),
                now_ms,
                processes,
                after,
                limit,
            )
            .await
        })
    }

    fn key_owner(
        &self,
        process: &str,
        key: &str,
        lease: Duration,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Option<KeyOwner>, String>> {
        let params = [("process", text(process)), ("key", text(key))];
        let stale_ms = stale(now_ms, lease);
        Box::pin(async move {
            let out = self
                .run(Batch::of(&self.sql.key_owner, &params)?, Shape::Row)
                .await
                .map_err(|e| format!("looking up a correlation key: {e}"))?;
            Ok(row::<KeyRow>(out)?.map(|r| KeyOwner {
                id: r.id as u64,
                alive: r.heartbeat.is_some_and(|h| h >= stale_ms),
                owner: r.owner,
            }))
        })
    }

    fn list(
        &self,
        process: Option<&str>,
        state: Option<State>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Stored>, String>> {
        let statement =
            &self.sql.list[usize::from(process.is_some()) * 2 + usize::from(state.is_some())];
        let params = [
            ("process", opt_text(process)),
            ("state", opt_text(state.map(State::as_str))),
            ("limit", count(limit)),
        ];
        Box::pin(async move {
            let out = self
                .run(Batch::of(statement, &params)?, Shape::Rows)
                .await
                .map_err(|e| format!("listing instances: {e}"))?;
            rows::<InstanceRow>(out)
                .await?
                .into_iter()
                .map(InstanceRow::into_stored)
                .collect()
        })
    }

    fn get(&self, instance: u64) -> BoxFuture<'_, Result<Option<Stored>, String>> {
        Box::pin(async move {
            let out = self
                .run(
                    Batch::of(&self.sql.get, &[("id", id(instance))])?,
                    Shape::Row,
                )
                .await
                .map_err(|e| format!("reading instance {instance}: {e}"))?;
            row::<InstanceRow>(out)?
                .map(InstanceRow::into_stored)
                .transpose()
        })
    }

    fn transition(
        &self,
        id: u64,
        from: State,
        to: State,
        node: Option<&str>,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<bool, String>> {
        let node = node.map(str::to_owned);
        Box::pin(self.transition_now(id, from, to, node, now_ms))
    }

    fn terminate_waiting(
        &self,
        instance: u64,
        node: &str,
        lease: Duration,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Terminated, String>> {
        let stale_ms = stale(now_ms, lease);
        let params = [
            ("id", id(instance)),
            ("from", text(State::Waiting.as_str())),
            ("node", text(node)),
            ("now", Value::Int(now_ms)),
            ("stale", Value::Int(stale_ms)),
        ];
        Box::pin(async move {
            let what = |e: String| format!("terminating instance {instance}: {e}");
            // The row is locked first (PostgreSQL), so its owner cannot change meanwhile.
            let mut batch = Batch::of(&self.sql.lock_in_state, &params)?;
            batch.push(&self.sql.terminate_keys, &params)?;
            batch.push(&self.sql.terminate, &params)?;
            let out = self.run(batch, Shape::Empty).await.map_err(what)?;
            if affected(out)? > 0 {
                return Ok(Terminated::Done);
            }
            let out = self
                .run(Batch::of(&self.sql.runner, &params)?, Shape::Row)
                .await
                .map_err(what)?;
            Ok(match row::<RunnerRow>(out)? {
                Some(r) if r.state == State::Waiting.as_str() => match r.owner {
                    Some(o) if r.heartbeat.is_some_and(|h| h >= stale_ms) => Terminated::RunBy(o),
                    // Its node's lease ran out just now: not terminated, but nobody runs it.
                    _ => Terminated::NotWaiting,
                },
                _ => Terminated::NotWaiting,
            })
        })
    }

    fn cleanup(&self, before_ms: i64) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let params = [("before", Value::Int(before_ms))];
            let mut batch = Batch::of(&self.sql.cleanup_keys, &params)?;
            batch.push(&self.sql.cleanup, &params)?;
            let out = self
                .run(batch, Shape::Empty)
                .await
                .map_err(|e| format!("deleting finished instances: {e}"))?;
            affected(out)
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts, String>> {
        Box::pin(async move {
            let out = self
                .run(Batch::of(&self.sql.counts, &[])?, Shape::Rows)
                .await
                .map_err(|e| format!("counting instances: {e}"))?;
            rows::<CountRow>(out)
                .await?
                .into_iter()
                .map(|r| {
                    let s = State::parse(&r.state).ok_or_else(|| {
                        format!(
                            "instances of '{}' have an unknown state '{}'",
                            r.process, r.state
                        )
                    })?;
                    Ok((r.process, s, r.n as u64))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use busbar_sql::testing::TempPostgres;
    use busbar_sql::{Kind, Options, PgConfig};

    use super::*;

    /// Now, in the tests' clock (ms since the epoch).
    const NOW: i64 = 1_800_000_000_000;
    const LEASE: Duration = Duration::from_secs(30);
    const P: &str = "{urn:test}Order";
    const Q: &str = "{urn:test}Invoice";
    const R: &str = "{urn:test}Refund";

    /// A heartbeat of `node` by a process whose boot id is the node's name.
    async fn beat(s: &SqlStore, node: &str, at: i64) -> Result<Beat, String> {
        s.heartbeat(node, node, at, LEASE, None).await
    }

    fn must<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn options(kind: Kind) -> Options {
        Options {
            kind,
            pool: 4,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            statement_cache: true,
            init: None,
            tls: None,
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "busbar-process-store-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        must(std::fs::create_dir_all(&d));
        d
    }

    async fn sqlite_store(dir: &Path) -> SqlStore {
        let kind = Kind::Sqlite {
            path: dir.join("instances.sqlite"),
            busy_timeout: Duration::from_secs(5),
        };
        let store = must(SqlStore::new(must(Database::open("flows", options(kind)))));
        must(store.init().await);
        store
    }

    async fn postgres_store(pg: &TempPostgres, statement_cache: bool) -> SqlStore {
        let config: PgConfig = must(pg.url().parse());
        let mut o = options(Kind::Postgres(Box::new(config)));
        o.statement_cache = statement_cache;
        let db = must(Database::open("flows", o));
        for _ in 0..200 {
            if db.ready().is_ok() {
                let store = must(SqlStore::new(db));
                must(store.init().await);
                return store;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the database never became ready: {:?}", db.ready());
    }

    /// Runs SQL the store has no method for (checks, set-up, clean-up).
    async fn sql(s: &SqlStore, text: &str, shape: Shape) -> Output {
        must(
            s.db.run(Query {
                statements: &[must(parse(text))],
                values: vec![vec![]],
                shape,
                numeric: NumericAs::Number,
            })
            .await,
        )
    }

    async fn wipe(s: &SqlStore) {
        for table in [
            "busbar_bpel_keys",
            "busbar_bpel_instances",
            "busbar_bpel_nodes",
        ] {
            sql(s, &format!("DELETE FROM {table}"), Shape::Empty).await;
        }
    }

    async fn keys_of(s: &SqlStore, instance: u64) -> Vec<String> {
        #[derive(Deserialize)]
        struct Key {
            key: String,
        }
        let text = format!(
            "SELECT key FROM busbar_bpel_keys WHERE instance = {} ORDER BY key",
            instance as i64
        );
        let keys: Vec<Key> = must(rows(sql(s, &text, Shape::Rows).await).await);
        keys.into_iter().map(|k| k.key).collect()
    }

    fn waiting(id: u64, process: &str, node: &str, at_ms: i64, keys: &[&str]) -> Save {
        Save {
            id,
            process: process.to_owned(),
            node: node.to_owned(),
            started_ms: at_ms - 1_000,
            at_ms,
            due_ms: None,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            snapshot: format!(r#"{{"format":1,"at":{at_ms}}}"#),
        }
    }

    fn finished(id: u64, node: &str, state: State, keep: bool) -> Finish {
        Finish {
            id,
            process: P.to_owned(),
            node: node.to_owned(),
            started_ms: NOW - 5_000,
            at_ms: NOW,
            state,
            keep,
            final_state: format!(r#"{{"final":{id}}}"#),
            first: false,
        }
    }

    async fn claim_ids(
        s: &SqlStore,
        node: &str,
        own: bool,
        processes: &[&str],
        limit: usize,
    ) -> Vec<u64> {
        let processes: Vec<String> = processes.iter().map(|p| (*p).to_owned()).collect();
        let claimed = must(
            s.claim(node, own, LEASE, NOW, &processes, None, limit)
                .await,
        );
        for c in &claimed {
            assert_eq!(c.owner.as_deref(), Some(node), "{c:?}");
            assert_eq!(c.updated_ms, NOW, "{c:?}");
            assert!(c.snapshot.is_some(), "{c:?}");
        }
        claimed.into_iter().map(|c| c.id).collect()
    }

    async fn save_then_get_round_trips_ids_past_i64_max(s: &SqlStore) {
        let big = u64::MAX - 1;
        for id in [7, big] {
            let mut save = waiting(id, P, "a", NOW, &["k1", "k2"]);
            save.due_ms = Some(NOW + 60_000);
            must(s.save(save.clone()).await);
            let got = must(s.get(id).await);
            assert_eq!(
                got,
                Some(Stored {
                    id,
                    process: P.to_owned(),
                    state: State::Waiting,
                    owner: Some("a".to_owned()),
                    started_ms: NOW - 1_000,
                    updated_ms: NOW,
                    due_ms: Some(NOW + 60_000),
                    snapshot: Some(save.snapshot),
                    final_state: None,
                })
            );
        }
        // Stored as the negative BIGINT with the same bits.
        #[derive(Deserialize)]
        struct Id {
            id: i64,
        }
        let negative: Vec<Id> = must(
            rows(
                sql(
                    s,
                    "SELECT id FROM busbar_bpel_instances WHERE id < 0",
                    Shape::Rows,
                )
                .await,
            )
            .await,
        );
        assert_eq!(negative.len(), 1);
        assert_eq!(negative[0].id, -2);
        let owner = must(s.key_owner(P, "k2", LEASE, NOW).await).map(|k| k.id);
        assert_eq!(owner, Some(big), "the last save holds the key");
        assert_eq!(must(s.get(8).await), None);
    }

    async fn saving_again_replaces_keys_and_snapshot(s: &SqlStore) {
        must(s.save(waiting(1, P, "a", NOW, &["a", "b"])).await);
        let mut again = waiting(1, P, "a", NOW + 10, &["b", "c"]);
        again.due_ms = None;
        must(s.save(again.clone()).await);
        assert_eq!(keys_of(s, 1).await, ["b", "c"]);
        let got = must(s.get(1).await).unwrap_or_else(|| panic!("instance 1 gone"));
        assert_eq!(got.snapshot, Some(again.snapshot));
        assert_eq!(got.updated_ms, NOW + 10);
        assert_eq!(must(s.key_owner(P, "a", LEASE, NOW).await), None);
        // A key another instance of the same process held moves to the one saving it.
        must(s.save(waiting(2, P, "a", NOW, &["c"])).await);
        assert_eq!(keys_of(s, 1).await, ["b"]);
        assert_eq!(
            must(s.key_owner(P, "c", LEASE, NOW).await).map(|k| k.id),
            Some(2)
        );
        // The same key in another process is another key.
        must(s.save(waiting(3, Q, "a", NOW, &["c"])).await);
        assert_eq!(
            must(s.key_owner(P, "c", LEASE, NOW).await).map(|k| k.id),
            Some(2)
        );
    }

    async fn a_taken_over_instance_refuses_the_old_owners_writes(s: &SqlStore) {
        must(beat(s, "a", NOW - 60_000).await);
        must(s.save(waiting(1, P, "a", NOW - 60_000, &["k"])).await);
        let before = must(s.get(1).await);
        must(beat(s, "b", NOW).await);
        assert_eq!(claim_ids(s, "b", false, &[P], 10).await, [1]);

        let e = s
            .save(waiting(1, P, "a", NOW, &["k2"]))
            .await
            .err()
            .unwrap_or_else(|| panic!("a saved an instance b owns"));
        assert!(e.contains("instance 1") && e.contains("'b'"), "{e}");
        for keep in [true, false] {
            let e = s
                .finish(finished(1, "a", State::Completed, keep))
                .await
                .err()
                .unwrap_or_else(|| panic!("a finished an instance b owns (keep: {keep})"));
            assert!(e.contains("instance 1") && e.contains("'b'"), "{e}");
        }
        // Nothing changed but the claim.
        let now = must(s.get(1).await).unwrap_or_else(|| panic!("instance 1 gone"));
        let before = before.unwrap_or_else(|| panic!("instance 1 never saved"));
        assert_eq!(now.owner.as_deref(), Some("b"));
        assert_eq!(now.state, State::Waiting);
        assert_eq!(now.snapshot, before.snapshot);
        assert_eq!(keys_of(s, 1).await, ["k"]);

        must(s.save(waiting(1, P, "b", NOW + 1, &["k2"])).await);
        assert_eq!(keys_of(s, 1).await, ["k2"]);
    }

    async fn finish_keeps_or_deletes_and_drops_the_keys(s: &SqlStore) {
        must(s.save(waiting(1, P, "a", NOW - 10, &["k1"])).await);
        let snapshot = must(s.get(1).await).and_then(|i| i.snapshot);
        must(s.finish(finished(1, "a", State::Completed, true)).await);
        let kept = must(s.get(1).await).unwrap_or_else(|| panic!("instance 1 not kept"));
        assert_eq!(kept.state, State::Completed);
        assert_eq!(kept.final_state.as_deref(), Some(r#"{"final":1}"#));
        assert_eq!(kept.snapshot, snapshot);
        assert_eq!((kept.due_ms, kept.updated_ms), (None, NOW));
        assert!(keys_of(s, 1).await.is_empty());

        must(s.save(waiting(2, P, "a", NOW - 10, &["k2"])).await);
        must(s.finish(finished(2, "a", State::Faulted, false)).await);
        assert_eq!(must(s.get(2).await), None);
        assert!(keys_of(s, 2).await.is_empty());

        // An instance that never waited is inserted finished (or not at all).
        must(s.finish(finished(3, "a", State::Faulted, true)).await);
        let never = must(s.get(3).await).unwrap_or_else(|| panic!("instance 3 not kept"));
        assert_eq!((never.state, never.snapshot), (State::Faulted, None));
        assert_eq!(never.started_ms, NOW - 5_000);
        must(s.finish(finished(4, "a", State::Completed, false)).await);
        assert_eq!(must(s.get(4).await), None);

        let e = s.finish(finished(5, "a", State::Waiting, true)).await;
        assert!(e.is_err(), "{e:?}");
    }

    /// Many first-time finishes at once go in one multi-row insert; one whose id another
    /// node holds fails alone, the others are written.
    async fn first_finishes_commit_together_and_a_clash_fails_alone(s: &SqlStore) {
        must(s.finish(finished(100, "b", State::Completed, true)).await);
        let writes = (100..400u64).map(|id| {
            let mut f = finished(id, "a", State::Completed, true);
            f.first = true;
            f.final_state = format!(r#"{{"n":{id},"text":"it's \"quoted\" ü"}}"#);
            s.finish(f)
        });
        let results = futures_util::future::join_all(writes).await;
        assert!(results[0].is_err(), "id 100 is node b's: {:?}", results[0]);
        assert_eq!(
            must(s.get(100).await).and_then(|i| i.owner).as_deref(),
            Some("b")
        );
        assert!(results[1..].iter().all(Result::is_ok), "{results:?}");
        for id in [101u64, 250, 399] {
            let got = must(s.get(id).await).unwrap_or_else(|| panic!("instance {id} missing"));
            assert_eq!(got.state, State::Completed);
            assert_eq!(got.owner.as_deref(), Some("a"));
            assert_eq!(
                got.final_state,
                Some(format!(r#"{{"n":{id},"text":"it's \"quoted\" ü"}}"#))
            );
        }
    }

    async fn claims_take_unowned_and_dead_instances_and_own_ones_when_asked(s: &SqlStore) {
        must(beat(s, "dead", NOW - LEASE.as_millis() as i64 - 1).await);
        must(beat(s, "live", NOW - LEASE.as_millis() as i64).await);
        must(beat(s, "me", NOW).await);
        for (id, node) in [(1, "me"), (2, "dead"), (3, "live"), (4, "me"), (5, "never")] {
            must(s.save(waiting(id, P, node, NOW - 100_000, &[])).await);
        }
        // Instance 1 loses its owner.
        assert!(must(
            s.transition(1, State::Waiting, State::Waiting, None, NOW - 100_000)
                .await
        ));
        assert_eq!(must(s.get(1).await).and_then(|i| i.owner), None);

        assert_eq!(claim_ids(s, "me", false, &[P], 10).await, [1, 2, 5]);
        assert!(claim_ids(s, "me", false, &[P], 10).await.is_empty());
        assert_eq!(claim_ids(s, "me", true, &[P], 10).await, [1, 2, 4, 5]);
        // Instances of live nodes are never taken, finished ones neither; once "me" stops
        // beating, its instances are.
        must(s.finish(finished(4, "me", State::Completed, true)).await);
        assert!(claim_ids(s, "other", true, &[P], 10).await.is_empty());
        must(beat(s, "me", NOW - 2 * LEASE.as_millis() as i64).await);
        assert_eq!(claim_ids(s, "other", true, &[P], 10).await, [1, 2, 5]);
        assert_eq!(
            must(s.get(3).await).and_then(|i| i.owner).as_deref(),
            Some("live")
        );
    }

    async fn claims_respect_the_limit_and_the_processes(s: &SqlStore) {
        must(beat(s, "me", NOW).await);
        for id in 1..=10 {
            let process = match id {
                1..=5 => P,
                6..=8 => Q,
                _ => R,
            };
            must(
                s.save(waiting(id, process, "gone", NOW - 100_000, &[]))
                    .await,
            );
        }
        assert_eq!(claim_ids(s, "me", false, &[P], 2).await, [1, 2]);
        assert_eq!(claim_ids(s, "me", false, &[P], 10).await, [3, 4, 5]);
        assert!(claim_ids(s, "me", false, &[P, "{urn:x}"], 10)
            .await
            .is_empty());
        assert!(claim_ids(s, "me", false, &[Q, R], 0).await.is_empty());
        assert!(claim_ids(s, "me", false, &[], 10).await.is_empty());
        assert_eq!(
            claim_ids(s, "me", false, &[Q, R], 10).await,
            [6, 7, 8, 9, 10]
        );
    }

    /// A node taking up its own instances after a restart matches the rows it just claimed
    /// again: pages that start after the last id still take each one once, ids past
    /// `i64::MAX` (stored negative) included.
    async fn claims_page_by_id_and_take_own_instances_once(s: &SqlStore) {
        must(beat(s, "me", NOW).await);
        let big = u64::MAX - 2;
        let ids: Vec<u64> = (1..=7).chain([big, big + 1]).collect();
        for id in &ids {
            must(s.save(waiting(*id, P, "me", NOW - 100_000, &[])).await);
        }
        let processes = vec![P.to_owned()];
        let mut after = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let page = must(s.claim("me", true, LEASE, NOW, &processes, after, 2).await);
            assert!(page.len() <= 2, "{page:?}");
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            seen.extend(page.iter().map(|r| r.id));
        }
        let mut want = ids.clone();
        // The stored order: ids past i64::MAX are negative there, so they come first.
        want.sort_by_key(|i| *i as i64);
        assert_eq!(seen, want);
        // Without a starting point the same rows come again (they are this node's).
        assert_eq!(
            must(s.claim("me", true, LEASE, NOW, &processes, None, 2).await).len(),
            2
        );
    }

    /// Past a buffer's worth of rows the database streams its answer; it is read whole.
    async fn claims_return_large_snapshots_whole(s: &SqlStore) {
        let big = format!(r#"{{"format":1,"vars":"{}"}}"#, "x".repeat(4_000));
        for id in 1..=20 {
            let mut save = waiting(id, P, "gone", NOW - 100_000, &[]);
            save.snapshot = big.clone();
            must(s.save(save).await);
        }
        let processes = [P.to_owned()];
        let claimed = must(s.claim("me", false, LEASE, NOW, &processes, None, 50).await);
        assert_eq!(claimed.len(), 20);
        assert!(claimed
            .iter()
            .all(|c| c.snapshot.as_deref() == Some(big.as_str())));
    }

    async fn key_owner_tells_whether_the_owner_is_alive(s: &SqlStore) {
        must(beat(s, "a", NOW - 1_000).await);
        must(s.save(waiting(1, P, "a", NOW, &["k"])).await);
        let alive = KeyOwner {
            id: 1,
            owner: Some("a".to_owned()),
            alive: true,
        };
        assert_eq!(
            must(s.key_owner(P, "k", LEASE, NOW).await),
            Some(alive.clone())
        );
        let later = NOW + LEASE.as_millis() as i64;
        assert_eq!(
            must(s.key_owner(P, "k", LEASE, later).await),
            Some(KeyOwner {
                alive: false,
                ..alive
            })
        );
        assert_eq!(must(s.key_owner(Q, "k", LEASE, NOW).await), None);
        assert_eq!(must(s.key_owner(P, "other", LEASE, NOW).await), None);
        // No heartbeat at all, or no owner: not alive.
        must(s.save(waiting(2, P, "b", NOW, &["k2"])).await);
        assert_eq!(
            must(s.key_owner(P, "k2", LEASE, NOW).await).map(|k| k.alive),
            Some(false)
        );
        assert!(must(
            s.transition(2, State::Waiting, State::Waiting, None, NOW)
                .await
        ));
        assert_eq!(
            must(s.key_owner(P, "k2", LEASE, NOW).await),
            Some(KeyOwner {
                id: 2,
                owner: None,
                alive: false
            })
        );
    }

    async fn transitions_happen_only_from_the_given_state(s: &SqlStore) {
        let mut save = waiting(1, P, "a", NOW, &["k"]);
        save.due_ms = Some(NOW + 5);
        must(s.save(save).await);
        assert!(!must(
            s.transition(1, State::Completed, State::Terminated, None, NOW + 1)
                .await
        ));
        assert!(!must(
            s.transition(9, State::Waiting, State::Terminated, None, NOW + 1)
                .await
        ));
        assert_eq!(keys_of(s, 1).await, ["k"]);
        assert_eq!(must(s.get(1).await).map(|i| i.state), Some(State::Waiting));

        assert!(must(
            s.transition(1, State::Waiting, State::Terminated, Some("admin"), NOW + 1)
                .await
        ));
        let got = must(s.get(1).await).unwrap_or_else(|| panic!("instance 1 gone"));
        assert_eq!(got.state, State::Terminated);
        assert_eq!(got.owner.as_deref(), Some("admin"));
        assert_eq!((got.due_ms, got.updated_ms), (None, NOW + 1));
        assert!(got.snapshot.is_some());
        assert!(keys_of(s, 1).await.is_empty());
        assert!(!must(
            s.transition(1, State::Waiting, State::Terminated, None, NOW + 2)
                .await
        ));

        assert!(must(
            s.transition(1, State::Terminated, State::Waiting, Some("b"), NOW + 3)
                .await
        ));
        let got = must(s.get(1).await).unwrap_or_else(|| panic!("instance 1 gone"));
        assert_eq!(
            (got.state, got.owner.as_deref(), got.updated_ms),
            (State::Waiting, Some("b"), NOW + 3)
        );
    }

    async fn cleanup_removes_only_old_finished_instances(s: &SqlStore) {
        let old = NOW - 10_000;
        for (id, state) in [
            (1, State::Completed),
            (2, State::Faulted),
            (3, State::Terminated),
        ] {
            let mut f = finished(id, "a", state, true);
            f.at_ms = old;
            must(s.finish(f).await);
        }
        must(s.finish(finished(4, "a", State::Completed, true)).await);
        must(s.save(waiting(5, P, "a", old, &["k5"])).await);
        sql(
            s,
            "INSERT INTO busbar_bpel_keys (process, key, instance) VALUES ('p', 'orphan', 99)",
            Shape::Empty,
        )
        .await;

        assert_eq!(must(s.cleanup(NOW).await), 3);
        let left: BTreeSet<u64> = must(s.list(None, None, 100).await)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(left, BTreeSet::from([4, 5]));
        assert!(keys_of(s, 99).await.is_empty());
        assert_eq!(keys_of(s, 5).await, ["k5"]);
        assert_eq!(must(s.cleanup(NOW).await), 0);
    }

    async fn counts_are_per_process_and_state(s: &SqlStore) {
        for id in 1..=3 {
            must(s.save(waiting(id, P, "a", NOW, &[])).await);
        }
        must(s.finish(finished(3, "a", State::Completed, true)).await);
        let mut f = finished(4, "a", State::Faulted, true);
        f.process = Q.to_owned();
        must(s.finish(f).await);
        let mut counts = must(s.counts().await);
        counts.sort();
        let mut want = vec![
            (P.to_owned(), State::Waiting, 2),
            (P.to_owned(), State::Completed, 1),
            (Q.to_owned(), State::Faulted, 1),
        ];
        want.sort();
        assert_eq!(counts, want);
    }

    async fn lists_filter_and_show_the_newest_first(s: &SqlStore) {
        for (id, process, at) in [(1, P, NOW), (2, Q, NOW + 2), (3, P, NOW + 1)] {
            must(s.save(waiting(id, process, "a", at, &[])).await);
        }
        let mut f = finished(4, "a", State::Completed, true);
        f.at_ms = NOW - 1;
        must(s.finish(f).await);
        let ids = |list: Vec<Stored>| list.into_iter().map(|i| i.id).collect::<Vec<_>>();
        let all = must(s.list(None, None, 10).await);
        assert!(all
            .iter()
            .all(|i| i.snapshot.is_none() && i.final_state.is_none()));
        assert_eq!(ids(all), [2, 3, 1, 4]);
        assert_eq!(ids(must(s.list(None, None, 2).await)), [2, 3]);
        assert_eq!(ids(must(s.list(Some(P), None, 10).await)), [3, 1, 4]);
        assert_eq!(
            ids(must(s.list(None, Some(State::Completed), 10).await)),
            [4]
        );
        assert_eq!(
            ids(must(s.list(Some(P), Some(State::Waiting), 10).await)),
            [3, 1]
        );
        assert!(must(s.list(Some(R), None, 10).await).is_empty());
    }

    async fn init_runs_again_without_harm(s: &SqlStore) {
        must(s.save(waiting(1, P, "a", NOW, &["k"])).await);
        must(s.init().await);
        assert!(must(s.get(1).await).is_some());
    }

    async fn a_node_beating_in_another_process_holds_its_name(s: &SqlStore) {
        let lease_ms = LEASE.as_millis() as i64;
        assert_eq!(
            must(s.heartbeat("n", "boot1", NOW, LEASE, None).await),
            Beat::Written
        );
        // A second process with the same node name is refused while the first one beats.
        let held = Beat::Held {
            boot: "boot1".into(),
            heartbeat_ms: NOW,
        };
        let r = must(s.heartbeat("n", "boot2", NOW + 10, LEASE, None).await);
        assert_eq!(r, held);
        must(s.heartbeat("n", "boot1", NOW + 20, LEASE, None).await);
        // What it saw has moved on: the first one is alive, still refused.
        let r = must(s.heartbeat("n", "boot2", NOW + 30, LEASE, Some(NOW)).await);
        assert!(
            matches!(r, Beat::Held { heartbeat_ms, .. } if heartbeat_ms == NOW + 20),
            "{r:?}"
        );
        // A heartbeat that stood still since it was seen, or one older than the lease, is
        // taken; then the first process is the one refused.
        let r = must(
            s.heartbeat("n", "boot2", NOW + 40, LEASE, Some(NOW + 20))
                .await,
        );
        assert_eq!(r, Beat::Written);
        let r = must(s.heartbeat("n", "boot1", NOW + 50, LEASE, None).await);
        assert!(
            matches!(r, Beat::Held { ref boot, .. } if boot == "boot2"),
            "{r:?}"
        );
        let later = NOW + 40 + lease_ms + 1;
        assert_eq!(
            must(s.heartbeat("n", "boot3", later, LEASE, None).await),
            Beat::Written
        );
    }

    async fn a_terminate_spares_an_instance_a_live_node_runs(s: &SqlStore) {
        must(beat(s, "a", NOW).await);
        must(s.save(waiting(1, P, "a", NOW, &["k1"])).await);
        must(s.save(waiting(2, P, "gone", NOW, &["k2"])).await);
        must(s.save(waiting(3, P, "b", NOW, &["k3"])).await);
        let r = must(s.terminate_waiting(1, "b", LEASE, NOW + 1).await);
        assert_eq!(r, Terminated::RunBy("a".into()));
        assert_eq!(must(s.get(1).await).map(|r| r.state), Some(State::Waiting));
        assert_eq!(keys_of(s, 1).await, ["k1"]);
        // A node without heartbeat, or this node itself, runs nothing here.
        for id in [2, 3] {
            let r = must(s.terminate_waiting(id, "b", LEASE, NOW + 1).await);
            assert_eq!(r, Terminated::Done);
            let got = must(s.get(id).await).expect("row");
            assert_eq!(
                (got.state, got.owner.as_deref()),
                (State::Terminated, Some("b"))
            );
            assert!(keys_of(s, id).await.is_empty());
        }
        let r = must(s.terminate_waiting(2, "b", LEASE, NOW + 1).await);
        assert_eq!(r, Terminated::NotWaiting);
        let r = must(s.terminate_waiting(99, "b", LEASE, NOW + 1).await);
        assert_eq!(r, Terminated::NotWaiting);
        // Once node a's lease ran out, its instance may go.
        let later = NOW + LEASE.as_millis() as i64 + 1;
        let r = must(s.terminate_waiting(1, "b", LEASE, later).await);
        assert_eq!(r, Terminated::Done);
    }

    /// Every case, each on empty tables.
    async fn suite(s: &SqlStore) {
        macro_rules! cases {
            ($($case:ident),* $(,)?) => {$(
                wipe(s).await;
                eprintln!("{} {}", s.kind(), stringify!($case));
                $case(s).await;
            )*};
        }
        cases!(
            save_then_get_round_trips_ids_past_i64_max,
            saving_again_replaces_keys_and_snapshot,
            a_taken_over_instance_refuses_the_old_owners_writes,
            finish_keeps_or_deletes_and_drops_the_keys,
            first_finishes_commit_together_and_a_clash_fails_alone,
            claims_take_unowned_and_dead_instances_and_own_ones_when_asked,
            claims_respect_the_limit_and_the_processes,
            claims_page_by_id_and_take_own_instances_once,
            claims_return_large_snapshots_whole,
            key_owner_tells_whether_the_owner_is_alive,
            transitions_happen_only_from_the_given_state,
            cleanup_removes_only_old_finished_instances,
            counts_are_per_process_and_state,
            lists_filter_and_show_the_newest_first,
            init_runs_again_without_harm,
            a_node_beating_in_another_process_holds_its_name,
            a_terminate_spares_an_instance_a_live_node_runs,
        );
    }

    /// Two nodes claim the same 1,000 instances at once, 50 at a time, until none is left:
    /// between them they take every one, and never the same one.
    async fn concurrent_claims_never_share_an_instance(s: Arc<SqlStore>) {
        wipe(&s).await;
        const INSTANCES: u64 = 1_000;
        for id in 1..=INSTANCES {
            must(s.save(waiting(id, P, "gone", NOW - 100_000, &[])).await);
        }
        must(beat(&s, "a", NOW).await);
        must(beat(&s, "b", NOW).await);
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let node = |name: &'static str| {
            let s = s.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let mut taken = Vec::new();
                loop {
                    let batch = claim_ids(&s, name, false, &[P], 50).await;
                    if batch.is_empty() {
                        return taken;
                    }
                    assert!(batch.len() <= 50);
                    taken.extend(batch);
                }
            })
        };
        let (a, b) = (node("a"), node("b"));
        let (a, b) = (must(a.await), must(b.await));
        eprintln!("{}: a took {}, b took {}", s.kind(), a.len(), b.len());
        let (a, b): (BTreeSet<u64>, BTreeSet<u64>) =
            (a.into_iter().collect(), b.into_iter().collect());
        assert!(
            a.is_disjoint(&b),
            "both took {:?}",
            a.intersection(&b).collect::<Vec<_>>()
        );
        let all: BTreeSet<u64> = a.union(&b).copied().collect();
        assert_eq!(all, (1..=INSTANCES).collect::<BTreeSet<_>>());
        for id in [1, INSTANCES / 2, INSTANCES] {
            let owner = must(s.get(id).await).and_then(|i| i.owner);
            let want = if a.contains(&id) { "a" } else { "b" };
            assert_eq!(owner.as_deref(), Some(want), "instance {id}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_keeps_instances() {
        let dir = tempdir("suite");
        let s = sqlite_store(&dir).await;
        assert_eq!(s.kind(), "sqlite");
        suite(&s).await;
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// One process's stores on a file share its lock (a reload builds a second one beside
    /// the first); anyone else holding it (another busbar) makes `hold` fail, naming the
    /// file, until it lets go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sqlite_store_is_held_by_one_process_and_shared_within_it() {
        let dir = tempdir("hold");
        let file = dir.join("instances.sqlite");
        let other = must(busbar_sql::lock_file(&dir.join("instances.sqlite.lock")));
        let first = sqlite_store(&dir).await;
        let e = first.hold().err().unwrap_or_default();
        assert!(
            e.contains("instances.sqlite") && e.contains("another"),
            "{e}"
        );
        drop(other);
        must(first.hold());
        let second = sqlite_store(&dir).await;
        must(second.hold());
        // Anyone else is refused while either store lives.
        drop(first);
        assert!(matches!(
            busbar_sql::lock_file(&dir.join("instances.sqlite.lock")),
            Err(LockError::Held)
        ));
        drop(second);
        drop(must(busbar_sql::lock_file(
            &dir.join("instances.sqlite.lock"),
        )));
        assert!(file.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_store_keeps_instances() {
        let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
        let s = postgres_store(&pg, true).await;
        assert_eq!(s.kind(), "postgres");
        suite(&s).await;
        // Without server-side prepared statements (PgBouncer), the server infers the types.
        let s = postgres_store(&pg, false).await;
        suite(&s).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_claims_from_two_nodes_never_share_an_instance() {
        let dir = tempdir("claims");
        concurrent_claims_never_share_an_instance(Arc::new(sqlite_store(&dir).await)).await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_claims_from_two_nodes_never_share_an_instance() {
        let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
        let s = Arc::new(postgres_store(&pg, true).await);
        concurrent_claims_never_share_an_instance(s).await;
    }

    /// Nodes starting together on an empty database create the tables once between them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_nodes_starting_together_create_the_tables_once() {
        let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
        let config: PgConfig = must(pg.url().parse());
        let db = must(Database::open(
            "flows",
            options(Kind::Postgres(Box::new(config))),
        ));
        for _ in 0..200 {
            if db.ready().is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stores: Vec<Arc<SqlStore>> = (0..4)
            .map(|_| Arc::new(must(SqlStore::new(db.clone()))))
            .collect();
        let inits: Vec<_> = stores
            .iter()
            .map(|s| {
                let s = s.clone();
                tokio::spawn(async move { s.init().await })
            })
            .collect();
        for i in inits {
            must(must(i.await));
        }
        must(stores[0].save(waiting(1, P, "a", NOW, &["k"])).await);
    }
}
