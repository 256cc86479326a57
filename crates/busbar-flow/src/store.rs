//! Durable instances: what the engine writes at each wait point and at completion, and the
//! [`Store`] a host implements over its database.
//!
//! One row per instance holds everything about it: its state, the node running it, the
//! earliest due timer, the snapshot of its last wait point and, once finished, its final
//! variables. Correlation keys of a waiting instance are rows of their own, written in the
//! same transaction as its snapshot. Nodes prove they are alive with one heartbeat row each;
//! an instance whose node's heartbeat is older than the lease may be taken over by another
//! node. No table is written by every instance on every step.

use std::time::Duration;

use crate::runtime::BoxFuture;

/// The version of the snapshot format this build writes and reads.
pub const FORMAT: u32 = 1;

/// Where an instance is in its life, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Parked at a wait point (receive, pick, wait) or resumable from one.
    Waiting,
    /// Completed normally (kept by the completion policy).
    Completed,
    /// Ended with an uncaught fault (kept by the completion policy).
    Faulted,
    /// Ended by an administrator.
    Terminated,
}

impl State {
    /// The state's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Completed => "completed",
            State::Faulted => "faulted",
            State::Terminated => "terminated",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "waiting" => State::Waiting,
            "completed" => State::Completed,
            "faulted" => State::Faulted,
            "terminated" => State::Terminated,
            _ => return None,
        })
    }

    /// Every state, in order.
    pub const ALL: [State; 4] = [
        State::Waiting,
        State::Completed,
        State::Faulted,
        State::Terminated,
    ];
}

/// A waiting instance's snapshot, written at a wait point.
#[derive(Clone, Debug)]
pub struct Save {
    pub id: u64,
    /// The process's name in Clark notation (`{ns}local`).
    pub process: String,
    /// The node running it.
    pub node: String,
    /// When it started (ms since the Unix epoch).
    pub started_ms: i64,
    /// Now (ms since the Unix epoch).
    pub at_ms: i64,
    /// The earliest timer it waits for (ms since the Unix epoch), if any.
    pub due_ms: Option<i64>,
    /// Its correlation keys (each one string: the set and its values), replacing the ones
    /// saved before.
    pub keys: Vec<String>,
    /// The snapshot (JSON, [`FORMAT`]).
    pub snapshot: String,
}

/// A finished instance.
#[derive(Clone, Debug)]
pub struct Finish {
    pub id: u64,
    pub process: String,
    pub node: String,
    pub started_ms: i64,
    pub at_ms: i64,
    /// `Completed`, `Faulted` or `Terminated`.
    pub state: State,
    /// Keep the row (with `final_state`) by the completion policy; otherwise it is deleted
    /// with its keys.
    pub keep: bool,
    /// The final variables and the fault, if any (JSON).
    pub final_state: String,
    /// Nothing was written for the instance before (it never waited): the row is new.
    pub first: bool,
}

/// An instance as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub id: u64,
    pub process: String,
    pub state: State,
    /// The node running it (or that last ran it).
    pub owner: Option<String>,
    pub started_ms: i64,
    pub updated_ms: i64,
    pub due_ms: Option<i64>,
    /// The last wait point's snapshot (`None` in listings, or when it never waited).
    pub snapshot: Option<String>,
    /// The final variables and fault (`None` in listings, or while it runs).
    pub final_state: Option<String>,
}

/// Where a correlation key leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOwner {
    pub id: u64,
    /// The node that runs the instance.
    pub owner: Option<String>,
    /// Whether that node's heartbeat is within the lease.
    pub alive: bool,
}

/// What a heartbeat found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Beat {
    /// Written: this process (its boot id) holds the node's name.
    Written,
    /// Not written: another process (boot id `boot`) wrote the node's heartbeat at
    /// `heartbeat_ms`, within the lease.
    Held { boot: String, heartbeat_ms: i64 },
}

/// How a terminate of a waiting instance went ([`Store::terminate_waiting`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Terminated {
    /// Terminated now.
    Done,
    /// No such instance, or it is not waiting.
    NotWaiting,
    /// Another node whose heartbeat is within the lease runs it.
    RunBy(String),
}

/// Instances per process and state, as [`Store::counts`] returns them.
pub type Counts = Vec<(String, State, u64)>;

/// A database holding durable instances. Every method is one transaction.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Creates the tables when missing (idempotent).
    fn init(&self) -> BoxFuture<'_, Result<(), String>>;

    /// Takes the store for this process, for as long as the store lives, where it may have
    /// one node only (a SQLite file): a second process that asks fails, with an error
    /// naming the store. Stores of one process share the hold, so a reload, which builds
    /// a new store beside the old one, keeps it. Nothing to do for a shared store.
    fn hold(&self) -> Result<(), String> {
        Ok(())
    }

    /// Writes a waiting instance's snapshot and keys (insert or replace), as owned by
    /// `save.node`. Fails when another node owns the instance now (it was taken over).
    fn save(&self, save: Save) -> BoxFuture<'_, Result<(), String>>;

    /// Records a finished instance (kept or deleted by `finish.keep`) and drops its keys.
    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), String>>;

    /// Records that `node`, run by the process with boot id `boot` (random at its start), is
    /// alive now (`now_ms`). Refused ([`Beat::Held`]) while the node's heartbeat was written
    /// within the lease by another process, so two processes never run one node's
    /// instances; unless that heartbeat is still `seen` (read by an earlier refused call):
    /// a process whose heartbeat stood still is gone, and its node is taken.
    fn heartbeat(
        &self,
        node: &str,
        boot: &str,
        now_ms: i64,
        lease: Duration,
        seen: Option<i64>,
    ) -> BoxFuture<'_, Result<Beat, String>>;

    /// Claims up to `limit` waiting instances of `processes` for `node`, with their
    /// snapshots: those whose owner's heartbeat is older than `now_ms - lease` (or that have
    /// no owner) and, when `own`, those `node` owns already (after its restart). On
    /// PostgreSQL the rows are locked with `FOR UPDATE SKIP LOCKED`, so nodes claiming at the
    /// same time take different instances.
    ///
    /// Rows come in the store's order of ids, and only those after `after` (the last id of
    /// the page before; `None`: from the first): a caller pages through them with it, and
    /// takes each once even when `own` makes the rows it claimed claimable again.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &self,
        node: &str,
        own: bool,
        lease: Duration,
        now_ms: i64,
        processes: &[String],
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Stored>, String>>;

    /// The waiting instance of `process` that holds correlation key `key`, if any.
    fn key_owner(
        &self,
        process: &str,
        key: &str,
        lease: Duration,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Option<KeyOwner>, String>>;

    /// Instances (without snapshot or final state), newest first, filtered by process and
    /// state, at most `limit`.
    fn list(
        &self,
        process: Option<&str>,
        state: Option<State>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Stored>, String>>;

    /// One instance, with its snapshot and final state.
    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<Stored>, String>>;

    /// Moves instance `id` from state `from` to `to` (owned by `node`, or by none), as an
    /// administrator's terminate or retry does. False when it is not in state `from`.
    fn transition(
        &self,
        id: u64,
        from: State,
        to: State,
        node: Option<&str>,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<bool, String>>;

    /// Terminates waiting instance `id` (recorded as owned by `node`) unless a node other
    /// than `node` whose heartbeat is within the lease runs it.
    fn terminate_waiting(
        &self,
        id: u64,
        node: &str,
        lease: Duration,
        now_ms: i64,
    ) -> BoxFuture<'_, Result<Terminated, String>>;

    /// Deletes finished instances (completed, faulted, terminated) last updated before
    /// `before_ms`; returns how many.
    fn cleanup(&self, before_ms: i64) -> BoxFuture<'_, Result<u64, String>>;

    /// Instances per process and state.
    fn counts(&self) -> BoxFuture<'_, Result<Counts, String>>;
}
