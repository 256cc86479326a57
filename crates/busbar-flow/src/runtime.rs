//! Running instances.
//!
//! An [`Engine`] holds the deployed processes. [`Engine::deliver`] routes an incoming message:
//! to an instance waiting in a receive or pick whose correlation matches, else to the mailbox
//! of a live instance whose correlation matches (it takes the message when it gets there),
//! else to a new instance when the operation starts one. Each instance is one task on the
//! caller's tokio runtime: waiting costs no thread and no CPU. State is plain data (XML
//! documents in frames), so it can be written out at wait points.
//!
//! Faults are values (`Stop::Fault`), `exit` is `Stop::Exit`; both unwind through `run`
//! until a scope's handler catches the fault or the instance ends. An instance that ends
//! with an open request-response exchange answers it with the fault that ended it, or with
//! `missingReply`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::oneshot;

use crate::deploy::ServiceRef;
use crate::durable::{self, At, Cur, FrameData, FrameView, Saved, SavedFrame};
use crate::model::*;
use crate::wsdl::Definitions;
use crate::xml::{Doc, Name, NodeId};
use crate::xpath::{Context, NodeRef, Value, XPathError};
use crate::{timeval, Deployed};

/// A boxed future that can move between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most branches a parallel `forEach` may run at once (its counter values may come from a
/// message).
pub const MAX_PARALLEL_BRANCHES: u64 = 10_000;

/// Namespace of busbar's own fault names.
pub const BUSBAR_FAULT_NS: &str = "urn:busbar:bpel";

/// A fault: its QName, its data (a message or an element) and a text for people.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub name: Name,
    pub data: Option<Arc<Doc>>,
    pub text: String,
}

impl Fault {
    /// A standard WS-BPEL fault.
    pub fn standard(local: &str, text: impl Into<String>) -> Self {
        Fault {
            name: Name::new(BPEL_NS, local).with_prefix("bpel"),
            data: None,
            text: text.into(),
        }
    }

    /// One of busbar's own faults.
    pub fn busbar(local: &str, text: impl Into<String>) -> Self {
        Fault {
            name: Name::new(BUSBAR_FAULT_NS, local).with_prefix("bb"),
            data: None,
            text: text.into(),
        }
    }
}

/// How a message delivered to the engine ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The reply message (`<message><part>…</part></message>`).
    Reply(Arc<Doc>),
    /// A fault: a `reply` with `faultName`, a standard fault, or the instance failing.
    Fault(Fault),
    /// A one-way operation: the message was accepted.
    Accepted,
}

/// One partner call an instance makes.
pub struct PartnerCall<'a> {
    pub process: &'a Name,
    pub partner_link: &'a str,
    /// The service and port `deploy.xml` names for this partner link.
    pub service: Option<&'a ServiceRef>,
    pub port_type: &'a Name,
    pub operation: &'a str,
    pub message: Arc<Doc>,
    pub one_way: bool,
    pub defs: &'a Definitions,
}

/// A partner's answer.
#[derive(Clone, Debug)]
pub enum PartnerReply {
    Output(Arc<Doc>),
    /// A WSDL fault of the operation: its name (local) and message.
    Fault {
        name: String,
        message: Option<Arc<Doc>>,
    },
    Accepted,
}

/// How the host calls partner services.
pub trait Partners: Send + Sync {
    /// Calls the partner; an `Err` is a transport failure (text for people).
    fn invoke<'a>(&'a self, call: PartnerCall<'a>) -> BoxFuture<'a, Result<PartnerReply, String>>;
}

/// Bounds on instances.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most instances alive at once across all processes; a message that would start one
    /// more gets a fault.
    pub max_instances: usize,
    /// An instance alive longer than this is ended with a fault.
    pub instance_ttl: Duration,
    /// Most messages waiting for live instances that have not reached their receive yet.
    pub max_mailbox: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_instances: 100_000,
            instance_ttl: Duration::from_secs(3600),
            max_mailbox: 10_000,
        }
    }
}

/// A running instance, as the admin API shows it.
#[derive(Clone, Debug)]
pub struct InstanceInfo {
    pub id: u64,
    pub process: Name,
    pub age: Duration,
}

/// A process as the admin API shows it.
#[derive(Clone, Debug)]
pub struct ProcessInfo {
    pub name: Name,
    pub dir: std::path::PathBuf,
    pub instances: usize,
    pub started: u64,
    pub completed: u64,
    pub faulted: u64,
}

/// One `provide` of a deployed process.
#[derive(Clone, Debug)]
pub struct ProvidedService {
    pub process: Name,
    pub partner_link: String,
    pub service: ServiceRef,
    pub port_type: Name,
    /// The port's WSDL address, when the WSDL defines the service.
    pub address: Option<String>,
    /// The port's binding, when defined.
    pub binding: Option<crate::wsdl::Binding>,
    pub defs: Arc<Process>,
}

enum Routed {
    Taken,
    Refused(Fault),
    Start(Delivery),
}

struct Delivery {
    message: Arc<Doc>,
    reply: Option<oneshot::Sender<Outcome>>,
    /// Request-response (the reply comes from a `reply`) rather than one-way.
    sync: bool,
}

struct WaitOption {
    partner_link: usize,
    operation: String,
    message_type: Name,
    /// (set id, values the message must carry).
    keys: Vec<(usize, Vec<String>)>,
}

struct Waiter {
    instance: u64,
    options: Vec<WaitOption>,
    tx: oneshot::Sender<(usize, Delivery)>,
}

struct Pending {
    instance: u64,
    partner_link: usize,
    operation: String,
    message: Arc<Doc>,
    reply: Option<oneshot::Sender<Outcome>>,
    sync: bool,
}

#[derive(Default)]
struct Router {
    waiters: Vec<Waiter>,
    mailbox: Vec<Pending>,
    keys: HashMap<(usize, Vec<String>), u64>,
}

/// What happens to a finished durable instance's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Deleted when it ends.
    Never,
    /// Kept when it ends with a fault (or is terminated).
    OnFault,
    /// Always kept, with its final variables.
    Always,
}

/// How a folder's durable processes are kept.
#[derive(Clone, Debug)]
pub struct Persistence {
    pub store: Arc<dyn crate::store::Store>,
    /// This node's name, unique among the nodes sharing the store.
    pub node: String,
    pub completion: Completion,
    /// A node whose heartbeat is older than this is taken for dead: other nodes take over
    /// its waiting instances.
    pub lease: Duration,
    /// Finished instances are kept this long.
    pub retention: Duration,
}

/// This process's boot id: random, chosen once per process. A node's heartbeat row carries
/// it, so a second process started with the same node name is told apart from the first
/// and refused ([`crate::store::Beat::Held`]).
pub fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        use std::hash::BuildHasher;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        // RandomState is seeded from the OS's random source.
        let h =
            std::collections::hash_map::RandomState::new().hash_one((std::process::id(), nanos));
        format!("{h:016x}")
    })
}

/// Why the saved instances of a store could not be taken up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoverError {
    /// The store failed (unreachable, a statement refused): worth trying again.
    Store(String),
    /// Another running busbar process uses this node's name on the store: this one must not
    /// run the node's instances.
    NodeTaken(String),
}

impl std::fmt::Display for RecoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoverError::Store(e) | RecoverError::NodeTaken(e) => f.write_str(e),
        }
    }
}

impl std::convert::From<String> for RecoverError {
    fn from(e: String) -> Self {
        RecoverError::Store(e)
    }
}

/// The error for a node name another process holds.
fn node_taken(p: &Persistence, other_ms: i64) -> RecoverError {
    RecoverError::NodeTaken(format!(
        "node '{}' is run by another busbar process (its heartbeat in the {} store was written \
         {} ms ago, within the lease of {:?}): two processes must not share a node name; set \
         `persistence.node` to a name of its own for each busbar process",
        p.node,
        p.store.kind(),
        durable::now_ms().saturating_sub(other_ms).max(0),
        p.lease
    ))
}

/// Longest a message waits for the saved instances to be taken up after a start.
const RECOVERY_WAIT: Duration = Duration::from_secs(30);

/// Saved instances claimed per statement while recovering; the next page starts after the
/// last id of the one before, so each is taken up once however many there are.
const CLAIM_PAGE: usize = 500;

/// Upper bounds (ms) of the write-latency histogram's buckets.
pub const WRITE_BUCKETS_MS: [f64; 10] =
    [0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0];

/// Counters of a store's writes (snapshots and completions).
#[derive(Debug, Default)]
pub struct WriteStats {
    pub writes: AtomicU64,
    pub failures: AtomicU64,
    /// Total time, µs.
    pub micros: AtomicU64,
    /// Writes per bucket of [`WRITE_BUCKETS_MS`] (the last one: slower).
    pub buckets: [AtomicU64; 11],
}

/// A durable process's settings and the digest of the file its snapshots fit.
struct Durability {
    persistence: Persistence,
    digest: String,
    /// The process frame's variable names (for the final state).
    names: Vec<String>,
    stats: Arc<WriteStats>,
    /// True once the store's saved instances have been taken up: until then messages for
    /// the process wait.
    recovered: Arc<tokio::sync::watch::Sender<bool>>,
    /// When this node last proved to the store that it is alive.
    fence: Arc<Fence>,
}

/// When this node's heartbeat was last written to a store. Once it is older than the lease,
/// other nodes may take the node's instances over; so no durable instance here starts a step
/// with side effects (an invoke, a reply, a timer firing) until a heartbeat is written again,
/// and the heartbeat loop drops the instances running here and takes back those the store
/// still gives this node. A clock check per step, no database round trip.
#[derive(Debug)]
struct Fence {
    lease: Duration,
    /// When the last written heartbeat was sent, in ms after [`mono_origin`], plus one
    /// (0: none yet).
    beat: AtomicU64,
    /// Set once the heartbeat is kept up ([`Engine::maintain`]); an engine that keeps none (a
    /// test harness) is never fenced.
    armed: AtomicBool,
}

/// The instant the fences' clocks count from.
fn mono_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// How often a step held by the fence looks again.
const FENCE_POLL: Duration = Duration::from_millis(20);

impl Fence {
    fn new(lease: Duration) -> Arc<Fence> {
        Arc::new(Fence {
            lease,
            beat: AtomicU64::new(0),
            armed: AtomicBool::new(false),
        })
    }

    /// A heartbeat sent at `sent` was written.
    fn renew(&self, sent: Instant) {
        let ms = sent.saturating_duration_since(mono_origin()).as_millis() as u64;
        self.beat.fetch_max(ms.saturating_add(1), Ordering::SeqCst);
    }

    /// True when the last written heartbeat is older than the lease (or there is none).
    fn lapsed(&self) -> bool {
        if !self.armed.load(Ordering::Relaxed) {
            return false;
        }
        let beat = self.beat.load(Ordering::SeqCst);
        let now = mono_origin().elapsed().as_millis() as u64;
        beat == 0 || now.saturating_sub(beat - 1) >= self.lease.as_millis() as u64
    }
}

/// A store of durable processes (one per store and node), and whether its saved instances
/// have been taken up since the engine started.
#[derive(Clone)]
struct StoreSlot {
    persistence: Persistence,
    recovered: Arc<tokio::sync::watch::Sender<bool>>,
    /// Its instances were dropped because the heartbeat lapsed: the next take-up claims this
    /// node's own instances again.
    fenced: Arc<AtomicBool>,
    fence: Arc<Fence>,
}

impl Durability {
    fn observe(&self, took: Duration, ok: bool) {
        let s = &self.stats;
        s.writes.fetch_add(1, Ordering::Relaxed);
        if !ok {
            s.failures.fetch_add(1, Ordering::Relaxed);
        }
        s.micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let ms = took.as_secs_f64() * 1000.0;
        let b = WRITE_BUCKETS_MS
            .iter()
            .position(|&u| ms <= u)
            .unwrap_or(WRITE_BUCKETS_MS.len());
        s.buckets[b].fetch_add(1, Ordering::Relaxed);
    }

    fn keep(&self, state: crate::store::State) -> bool {
        match self.persistence.completion {
            Completion::Never => false,
            Completion::OnFault => state != crate::store::State::Completed,
            Completion::Always => true,
        }
    }
}

/// A running instance, as its process knows it.
struct Running {
    since: Instant,
    task: tokio::task::AbortHandle,
    dur: Option<Arc<InstanceDur>>,
}

struct Live {
    process: Arc<Process>,
    deployed: crate::deploy::DeployedProcess,
    dir: std::path::PathBuf,
    router: Mutex<Router>,
    durable: Option<Arc<Durability>>,
    instances: Mutex<HashMap<u64, Running>>,
    started: AtomicU64,
    completed: AtomicU64,
    faulted: AtomicU64,
    alive: AtomicI64,
}

struct Inner {
    processes: RwLock<Vec<Arc<Live>>>,
    /// Engines this one replaced (a reload) whose instances still run: a message no process
    /// here can place goes to their waiting instances.
    older: Mutex<Vec<Engine>>,
    partners: Arc<dyn Partners>,
    limits: Limits,
    alive: AtomicI64,
    busy: AtomicI64,
    next_id: AtomicU64,
    /// The stores of durable processes (one per store and node). Each is recovered on its
    /// own: a store that cannot be reached holds up its processes' messages, not others'.
    stores: Mutex<Vec<StoreSlot>>,
    stats: Arc<WriteStats>,
}

/// The process engine: deployed processes and their instances.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine with no process yet.
    pub fn new(limits: Limits, partners: Arc<dyn Partners>) -> Self {
        Engine {
            inner: Arc::new(Inner {
                processes: RwLock::new(Vec::new()),
                older: Mutex::new(Vec::new()),
                partners,
                limits,
                alive: AtomicI64::new(0),
                busy: AtomicI64::new(0),
                next_id: AtomicU64::new(1),
                stores: Mutex::new(Vec::new()),
                stats: Arc::new(WriteStats::default()),
            }),
        }
    }

    /// Adds deployed processes.
    pub fn add(&self, deployed: Vec<Deployed>) {
        self.add_with(deployed, None);
    }

    /// Adds deployed processes, durable ones kept by `persistence` (a process whose
    /// `deploy.xml` says `<in-memory>true</in-memory>` stays transient).
    pub fn add_with(&self, deployed: Vec<Deployed>, persistence: Option<&Persistence>) {
        let recovered = persistence.map(|p| {
            let mut stores = self.inner.stores.lock().unwrap_or_else(|e| e.into_inner());
            let found = stores.iter().find(|s| {
                Arc::ptr_eq(&s.persistence.store, &p.store) && s.persistence.node == p.node
            });
            match found {
                Some(s) => (s.recovered.clone(), s.fence.clone()),
                None => {
                    // False until [`Engine::recover`] has taken up the saved instances:
                    // messages for the store's processes wait meanwhile, so none misses
                    // its instance.
                    let recovered = Arc::new(tokio::sync::watch::Sender::new(false));
                    let fence = Fence::new(p.lease);
                    stores.push(StoreSlot {
                        persistence: p.clone(),
                        recovered: recovered.clone(),
                        fenced: Arc::new(AtomicBool::new(false)),
                        fence: fence.clone(),
                    });
                    (recovered, fence)
                }
            }
        });
        if let Some(p) = persistence {
            // Ids stay unique across restarts and nodes: the start time in ms above 22
            // bits of this node's name's digest.
            if self.inner.next_id.load(Ordering::Relaxed) == 1 {
                let salt = u64::from_str_radix(&durable::digest(p.node.as_bytes())[..6], 16)
                    .unwrap_or(0)
                    & 0x3f_ffff;
                let base = ((durable::now_ms() as u64) << 22) | salt;
                self.inner.next_id.store(base.max(1), Ordering::Relaxed);
            }
        }
        let mut ps = self
            .inner
            .processes
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for d in deployed {
            let durable = match (persistence, &recovered) {
                (Some(p), Some((recovered, fence))) if !d.descriptor.in_memory => {
                    Some(Arc::new(Durability {
                        persistence: p.clone(),
                        digest: durable::digest(
                            &std::fs::read(&d.process.file).unwrap_or_default(),
                        ),
                        names: d
                            .process
                            .root
                            .frame
                            .vars
                            .iter()
                            .map(|v| v.name.clone())
                            .collect(),
                        stats: self.inner.stats.clone(),
                        recovered: recovered.clone(),
                        fence: fence.clone(),
                    }))
                }
                _ => None,
            };
            ps.push(Arc::new(Live {
                process: d.process,
                deployed: d.descriptor,
                dir: d.dir,
                router: Mutex::new(Router::default()),
                durable,
                instances: Mutex::new(HashMap::new()),
                started: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                faulted: AtomicU64::new(0),
                alive: AtomicI64::new(0),
            }));
        }
    }

    fn processes(&self) -> Vec<Arc<Live>> {
        self.inner
            .processes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every service the deployed processes provide.
    pub fn services(&self) -> Vec<ProvidedService> {
        let mut out = Vec::new();
        for live in self.processes() {
            for (pl, sref) in &live.deployed.provides {
                let Some(i) = live.process.partner_link(pl) else {
                    continue;
                };
                let Some(pt) = live.process.partner_links[i].my_port_type.clone() else {
                    continue;
                };
                let port = live
                    .process
                    .defs
                    .service(&sref.service)
                    .and_then(|s| s.ports.iter().find(|p| p.name == sref.port).cloned());
                let binding = port
                    .as_ref()
                    .and_then(|p| live.process.defs.binding(&p.binding).cloned());
                out.push(ProvidedService {
                    process: live.process.name.clone(),
                    partner_link: pl.clone(),
                    service: sref.clone(),
                    port_type: pt,
                    address: port.and_then(|p| p.address),
                    binding,
                    defs: live.process.clone(),
                });
            }
        }
        out
    }

    /// Takes over from `previous` (a reload): its running instances finish there, and a
    /// message none of this engine's instances waits for, and that starts none here, is
    /// offered to them. Engines without instances left are forgotten.
    pub fn succeed(&self, previous: &Engine) {
        if Arc::ptr_eq(&self.inner, &previous.inner) {
            return;
        }
        let mut older = self.inner.older.lock().unwrap_or_else(|e| e.into_inner());
        let theirs = std::mem::take(
            &mut *previous
                .inner
                .older
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        older.push(previous.clone());
        older.extend(theirs);
        older.retain(|e| e.alive() > 0);
    }

    /// Deployed processes with their counters.
    pub fn process_info(&self) -> Vec<ProcessInfo> {
        self.processes()
            .iter()
            .map(|l| ProcessInfo {
                name: l.process.name.clone(),
                dir: l.dir.clone(),
                instances: l.instances.lock().map(|i| i.len()).unwrap_or(0),
                started: l.started.load(Ordering::Relaxed),
                completed: l.completed.load(Ordering::Relaxed),
                faulted: l.faulted.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Running instances.
    pub fn instances(&self) -> Vec<InstanceInfo> {
        let mut out = Vec::new();
        for l in self.processes() {
            if let Ok(m) = l.instances.lock() {
                for (id, r) in m.iter() {
                    out.push(InstanceInfo {
                        id: *id,
                        process: l.process.name.clone(),
                        age: r.since.elapsed(),
                    });
                }
            }
        }
        out.sort_by_key(|i| i.id);
        out
    }

    /// Ends an instance now; its open requests get a fault. False when there is none.
    pub fn terminate(&self, id: u64) -> bool {
        for l in self.processes() {
            if let Some(Running { dur, .. }) = self.end_running(&l, id, None) {
                if let (Some(d), Some(durability)) = (dur, &l.durable) {
                    let finish = crate::store::Finish {
                        id,
                        process: l.process.name.clark(),
                        node: durability.persistence.node.clone(),
                        started_ms: d.started_ms,
                        at_ms: durable::now_ms(),
                        state: crate::store::State::Terminated,
                        keep: durability.keep(crate::store::State::Terminated),
                        final_state: durable::final_json(None, &[], None),
                        first: false,
                    };
                    d.write_finish(finish, Vec::new());
                }
                l.faulted.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Stops instance `id` of `l` if it runs here, and forgets it: its task, its waits, its
    /// correlations, the messages queued for it (answered with `fault`, when given).
    fn end_running(&self, l: &Arc<Live>, id: u64, fault: Option<&Fault>) -> Option<Running> {
        let running = l.instances.lock().ok().and_then(|mut m| m.remove(&id))?;
        running.task.abort();
        self.inner.alive.fetch_sub(1, Ordering::Relaxed);
        l.alive.fetch_sub(1, Ordering::Relaxed);
        let mut r = l.router.lock().unwrap_or_else(|e| e.into_inner());
        r.waiters.retain(|w| w.instance != id);
        r.keys.retain(|_, v| *v != id);
        let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut r.mailbox)
            .into_iter()
            .partition(|p| p.instance == id);
        r.mailbox = rest;
        drop(r);
        if let Some(f) = fault {
            for tx in mine.into_iter().filter_map(|p| p.reply) {
                let _ = tx.send(Outcome::Fault(f.clone()));
            }
        }
        Some(running)
    }

    /// False while the saved instances of durable processes have not been taken up yet
    /// (after a start, until [`Engine::recover`] succeeds).
    pub fn recovered(&self) -> bool {
        self.slots().iter().all(|s| *s.recovered.borrow())
    }

    fn slots(&self) -> Vec<StoreSlot> {
        self.inner
            .stores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Writes of durable instances' snapshots and ends.
    pub fn write_stats(&self) -> Arc<WriteStats> {
        self.inner.stats.clone()
    }

    /// The stores durable processes are kept in (one per store and node).
    pub fn persistence(&self) -> Vec<Persistence> {
        self.slots().into_iter().map(|s| s.persistence).collect()
    }

    /// The durable processes kept in `p`'s store, by name (Clark notation).
    fn durable_processes(&self, p: &Persistence) -> Vec<Arc<Live>> {
        self.processes()
            .into_iter()
            .filter(|l| {
                l.durable
                    .as_ref()
                    .is_some_and(|d| Arc::ptr_eq(&d.persistence.store, &p.store))
            })
            .collect()
    }

    /// Takes up waiting durable instances: after a start (`own`: this node's own too, which
    /// it ran before it stopped) or from nodes whose lease ran out. Each resumes from its
    /// last saved wait point. Returns how many resumed. Until a first call succeeds for a
    /// store, messages for the processes kept there wait (at most 30 s); processes kept
    /// elsewhere, or not at all, do not. A store that fails does not hold up the others:
    /// the first error is returned once every store was tried, and a call with `own` again
    /// takes up only the stores not recovered yet (this node's instances of the others run
    /// already). A node name that another running process holds on a store is
    /// [`RecoverError::NodeTaken`]; after a start (`own`) the node waits half a lease first
    /// to see whether that process still beats (it may be the one this process replaces).
    pub async fn recover(&self, own: bool) -> Result<usize, RecoverError> {
        let mut resumed = 0;
        let mut failed = None;
        for slot in self.slots() {
            if own && *slot.recovered.borrow() {
                continue;
            }
            let fenced = slot.fenced.load(Ordering::SeqCst);
            match self.recover_store(&slot, own || fenced).await {
                Ok(n) => {
                    resumed += n;
                    slot.fenced.store(false, Ordering::SeqCst);
                    slot.recovered.send_replace(true);
                }
                // A node name held by another process is the error to tell.
                Err(e @ RecoverError::NodeTaken(_)) => failed = Some(e),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(resumed),
        }
    }

    /// Writes this node's heartbeat on `p`'s store, unless another running process holds
    /// the node's name there. After a start (`own`) a heartbeat of another process is
    /// watched for half a lease: one that stood still meanwhile is a process that has
    /// stopped (the one this process replaces), and the node is taken.
    async fn beat(&self, slot: &StoreSlot, own: bool) -> Result<(), RecoverError> {
        use crate::store::Beat;
        let p = &slot.persistence;
        let sent = Instant::now();
        let beat = p
            .store
            .heartbeat(&p.node, boot_id(), durable::now_ms(), p.lease, None)
            .await;
        // Lapsed before this heartbeat counts: other nodes may have taken instances over.
        if slot.fence.lapsed() {
            self.fence_off(slot);
        }
        let seen = match beat? {
            Beat::Written => {
                slot.fence.renew(sent);
                return Ok(());
            }
            Beat::Held { heartbeat_ms, .. } if !own => return Err(node_taken(p, heartbeat_ms)),
            Beat::Held { heartbeat_ms, .. } => heartbeat_ms,
        };
        tracing::info!(node = %p.node, "another process wrote this node's heartbeat within the lease: waiting to see whether it still runs");
        tokio::time::sleep(p.lease / 2).await;
        let sent = Instant::now();
        match p
            .store
            .heartbeat(&p.node, boot_id(), durable::now_ms(), p.lease, Some(seen))
            .await?
        {
            Beat::Written => {
                slot.fence.renew(sent);
                Ok(())
            }
            Beat::Held { heartbeat_ms, .. } => Err(node_taken(p, heartbeat_ms)),
        }
    }

    /// Drops the instances of `slot`'s store that run here, without writing them, once this
    /// node's heartbeat has lapsed: other nodes may run them now. The next take-up claims
    /// back those the store still gives this node; until then their messages wait.
    fn fence_off(&self, slot: &StoreSlot) {
        if slot.fenced.swap(true, Ordering::SeqCst) {
            return;
        }
        slot.recovered.send_replace(false);
        let p = &slot.persistence;
        let f = Fault::busbar(
            "leaseLost",
            format!(
                "node '{}' did not write its heartbeat within the lease of {:?}: its instances \
                 may run on another node now, and resume from their last wait point",
                p.node, p.lease
            ),
        );
        let mut dropped = 0;
        for l in self.durable_processes(p) {
            let ids: Vec<u64> = l
                .instances
                .lock()
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default();
            for id in ids {
                if let Some(r) = self.end_running(&l, id, Some(&f)) {
                    if let Some(d) = r.dur {
                        let held = {
                            let mut q = d.quiet.lock().unwrap_or_else(|e| e.into_inner());
                            std::mem::take(&mut q.held)
                        };
                        for (tx, _) in held {
                            let _ = tx.send(Outcome::Fault(f.clone()));
                        }
                    }
                    dropped += 1;
                }
            }
        }
        tracing::warn!(node = %p.node, "this node's heartbeat is older than the lease: {dropped} instances running here were dropped; those still its own are taken back once the heartbeat is written");
    }

    async fn recover_store(&self, slot: &StoreSlot, own: bool) -> Result<usize, RecoverError> {
        let p = &slot.persistence;
        let mut resumed = 0;
        self.beat(slot, own).await?;
        let lives = self.durable_processes(p);
        let names: Vec<String> = lives.iter().map(|l| l.process.name.clark()).collect();
        if names.is_empty() {
            return Ok(0);
        }
        // Page by id: a claim with `own` matches the rows it just claimed again, so
        // asking for "the next 500" without a starting point would return the same ones
        // for ever.
        let mut after = None;
        loop {
            let rows = p
                .store
                .claim(
                    &p.node,
                    own,
                    p.lease,
                    durable::now_ms(),
                    &names,
                    after,
                    CLAIM_PAGE,
                )
                .await?;
            let n = rows.len();
            after = rows.last().map(|r| r.id).or(after);
            for row in rows {
                if self.resume_row(p, &lives, row).await {
                    resumed += 1;
                }
            }
            if n < CLAIM_PAGE {
                break;
            }
        }
        Ok(resumed)
    }

    /// Resumes one claimed instance; one that cannot resume (its process changed, its
    /// snapshot is unreadable) is recorded as faulted with the reason.
    async fn resume_row(
        &self,
        p: &Persistence,
        lives: &[Arc<Live>],
        row: crate::store::Stored,
    ) -> bool {
        let Some(live) = lives.iter().find(|l| l.process.name.clark() == row.process) else {
            tracing::warn!(instance = row.id, process = %row.process, "a saved instance's process is not deployed here");
            return false;
        };
        let Some(durability) = live.durable.clone() else {
            return false;
        };
        let snapshot = row
            .snapshot
            .as_deref()
            .ok_or_else(|| "no wait point was saved".to_owned())
            .and_then(durable::Snapshot::from_json)
            .and_then(|s| {
                if s.digest == durability.digest {
                    Ok(s)
                } else {
                    Err(format!(
                        "{} changed since the instance was saved",
                        live.process.file.display()
                    ))
                }
            });
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(why) => {
                tracing::error!(instance = row.id, process = %row.process, "cannot resume the instance: {why}");
                let f = Fault::busbar("resumeFailed", format!("cannot resume: {why}"));
                let finish = crate::store::Finish {
                    id: row.id,
                    process: row.process.clone(),
                    node: p.node.clone(),
                    started_ms: row.started_ms,
                    at_ms: durable::now_ms(),
                    state: crate::store::State::Faulted,
                    keep: true,
                    final_state: durable::final_json(None, &[], Some(&f)),
                    first: false,
                };
                if let Err(e) = p.store.finish(finish).await {
                    tracing::error!(instance = row.id, "cannot record it: {e}");
                }
                live.faulted.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        if live
            .instances
            .lock()
            .map(|m| m.contains_key(&row.id))
            .unwrap_or(true)
        {
            return false;
        }
        let open = snapshot
            .open
            .iter()
            .map(|o| {
                // Its client went away with the node; a reply to it goes nowhere.
                let (tx, _) = oneshot::channel();
                OpenExchange {
                    partner_link: o.partner_link,
                    operation: o.operation.clone(),
                    message_exchange: o.message_exchange.clone(),
                    tx,
                }
            })
            .collect();
        {
            let mut r = live.router.lock().unwrap_or_else(|e| e.into_inner());
            for k in &snapshot.keys {
                r.keys.insert(k.clone(), row.id);
            }
        }
        let inst = Arc::new(Instance {
            id: row.id,
            engine: self.clone(),
            live: live.clone(),
            first: Mutex::new(None),
            open: Mutex::new(open),
            keys: Mutex::new(snapshot.keys.clone()),
            dur: Some(Arc::new(InstanceDur {
                durability,
                root: Cur::new(),
                quiet: Mutex::new(Quiet {
                    saved: true,
                    ..Quiet::default()
                }),
                writer: tokio::sync::Mutex::new(0),
                started_ms: row.started_ms,
            })),
        });
        let age = durable::now_ms().saturating_sub(row.started_ms).max(0) as u64;
        tracing::debug!(instance = row.id, process = %row.process, "instance resumed");
        self.start(inst, Some(snapshot.at), Duration::from_millis(age));
        true
    }

    /// Keeps this node's heartbeat, takes over the waiting instances of nodes whose lease
    /// ran out, and deletes finished instances past their retention, until the engine is
    /// dropped. Nothing when no process is durable.
    pub fn maintain(&self) -> Option<tokio::task::JoinHandle<()>> {
        let slots = self.slots();
        let lease = slots.iter().map(|s| s.persistence.lease).min()?;
        for s in &slots {
            s.fence.armed.store(true, Ordering::SeqCst);
        }
        let weak = Arc::downgrade(&self.inner);
        Some(tokio::spawn(async move {
            let tick = (lease / 3).max(Duration::from_millis(100));
            let mut last_cleanup = Instant::now();
            loop {
                tokio::time::sleep(tick).await;
                let Some(inner) = weak.upgrade() else { return };
                let engine = Engine { inner };
                for slot in engine.slots() {
                    if let Err(e) = engine.beat(&slot, false).await {
                        let node = &slot.persistence.node;
                        tracing::warn!(node = %node, "cannot write the heartbeat: {e}");
                    }
                }
                if let Err(e) = engine.recover(false).await {
                    tracing::warn!("cannot take over instances: {e}");
                }
                if last_cleanup.elapsed() >= tick * 3 {
                    last_cleanup = Instant::now();
                    for p in engine.persistence() {
                        let before = durable::now_ms()
                            .saturating_sub(p.retention.as_millis().min(i64::MAX as u128) as i64);
                        match p.store.cleanup(before).await {
                            Ok(0) => {}
                            Ok(n) => tracing::debug!("removed {n} finished instances"),
                            Err(e) => tracing::warn!("cannot remove finished instances: {e}"),
                        }
                    }
                }
            }
        }))
    }

    /// Stored instances of every store, newest first.
    pub async fn stored(
        &self,
        process: Option<&str>,
        state: Option<crate::store::State>,
        limit: usize,
    ) -> Result<Vec<crate::store::Stored>, String> {
        let mut out = Vec::new();
        for p in self.persistence() {
            out.extend(p.store.list(process, state, limit).await?);
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.id));
        out.truncate(limit);
        Ok(out)
    }

    /// One stored instance.
    pub async fn stored_one(&self, id: u64) -> Result<Option<crate::store::Stored>, String> {
        for p in self.persistence() {
            if let Some(s) = p.store.get(id).await? {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    /// One stored instance as an administrator sees it: state, node, timers, correlation
    /// keys, position and the process variables (of its last wait point, or final).
    pub async fn stored_detail(&self, id: u64) -> Result<Option<serde_json::Value>, String> {
        let Some(row) = self.stored_one(id).await? else {
            return Ok(None);
        };
        let names: Vec<String> = self
            .processes()
            .iter()
            .find(|l| l.process.name.clark() == row.process)
            .map(|l| {
                l.process
                    .root
                    .frame
                    .vars
                    .iter()
                    .map(|v| v.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let parse = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        };
        let snapshot = parse(&row.snapshot);
        let fin = parse(&row.final_state);
        let variables = match (&fin, &snapshot) {
            (Some(f), _) => f["variables"].clone(),
            (None, Some(s)) => {
                let vars = &s["at"]["scope"]["frame"]["vars"];
                serde_json::Value::Object(
                    names
                        .iter()
                        .enumerate()
                        .map(|(i, n)| (n.clone(), vars[i].clone()))
                        .collect(),
                )
            }
            _ => serde_json::Value::Null,
        };
        let live = self
            .processes()
            .iter()
            .any(|l| l.instances.lock().is_ok_and(|m| m.contains_key(&id)));
        Ok(Some(serde_json::json!({
            "id": row.id,
            "process": row.process,
            "state": row.state.as_str(),
            "node": row.owner,
            "running_here": live,
            "started_ms": row.started_ms,
            "updated_ms": row.updated_ms,
            "next_timer_ms": row.due_ms,
            "keys": snapshot.as_ref().map(|s| s["keys"].clone()),
            "position": snapshot.as_ref().map(|s| s["at"].clone()),
            "variables": variables,
            "fault": fin.as_ref().map(|f| f["fault"].clone()),
        })))
    }

    /// Instances per process and state, in every store.
    pub async fn stored_counts(&self) -> Result<Vec<(String, crate::store::State, u64)>, String> {
        let mut out = Vec::new();
        for p in self.persistence() {
            out.extend(p.store.counts().await?);
        }
        Ok(out)
    }

    /// Ends a waiting durable instance that no live node runs (not this one, which would
    /// have it in memory: see [`Engine::terminate`]). An instance that another node whose
    /// heartbeat is within the lease runs is left to it ([`Terminated::RunBy`]).
    ///
    /// [`Terminated::RunBy`]: crate::store::Terminated::RunBy
    pub async fn terminate_stored(&self, id: u64) -> Result<crate::store::Terminated, String> {
        use crate::store::Terminated;
        let mut out = Terminated::NotWaiting;
        for p in self.persistence() {
            match p
                .store
                .terminate_waiting(id, &p.node, p.lease, durable::now_ms())
                .await?
            {
                Terminated::NotWaiting => {}
                t => {
                    out = t;
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Runs a faulted durable instance again from its last saved wait point. An error
    /// says why it cannot (not faulted, never waited, process not deployed here).
    pub async fn retry(&self, id: u64) -> Result<(), String> {
        for p in self.persistence() {
            let Some(row) = p.store.get(id).await? else {
                continue;
            };
            if row.state != crate::store::State::Faulted {
                return Err(format!(
                    "instance {id} is {}, not faulted",
                    row.state.as_str()
                ));
            }
            if row.snapshot.is_none() {
                return Err(format!(
                    "instance {id} faulted before its first wait point: nothing to resume from"
                ));
            }
            let lives = self.durable_processes(&p);
            if !lives.iter().any(|l| l.process.name.clark() == row.process) {
                return Err(format!("process {} is not deployed here", row.process));
            }
            if !p
                .store
                .transition(
                    id,
                    crate::store::State::Faulted,
                    crate::store::State::Waiting,
                    Some(&p.node),
                    durable::now_ms(),
                )
                .await?
            {
                return Err(format!("instance {id} changed meanwhile"));
            }
            let row = crate::store::Stored {
                state: crate::store::State::Waiting,
                ..row
            };
            return if self.resume_row(&p, &lives, row).await {
                Ok(())
            } else {
                Err(format!("instance {id} could not resume (see the log)"))
            };
        }
        Err(format!("no stored instance {id}"))
    }

    /// True when no instance is running an activity (all are waiting or done).
    pub fn is_idle(&self) -> bool {
        self.inner.busy.load(Ordering::SeqCst) <= 0
    }

    /// Live instances of the processes named (cheap: one counter each).
    pub fn alive_of(&self, processes: &[Name]) -> usize {
        let ps = self
            .inner
            .processes
            .read()
            .unwrap_or_else(|e| e.into_inner());
        ps.iter()
            .filter(|l| processes.contains(&l.process.name))
            .map(|l| l.alive.load(Ordering::Relaxed).max(0) as usize)
            .sum()
    }

    /// Live instances.
    pub fn alive(&self) -> usize {
        self.inner.alive.load(Ordering::Relaxed).max(0) as usize
    }

    /// The process providing `service`, and the partner link it provides it on.
    fn provider(&self, service: &Name) -> Option<(Arc<Live>, usize)> {
        let ps = self
            .inner
            .processes
            .read()
            .unwrap_or_else(|e| e.into_inner());
        ps.iter().find_map(|l| {
            l.deployed
                .provides
                .iter()
                .find(|(_, s)| s.service == *service)
                .and_then(|(pl, _)| l.process.partner_link(pl))
                .map(|pl| (l.clone(), pl))
        })
    }

    /// Delivers a message for `operation` of the process providing `service` (the port is
    /// not needed to choose). Returns when the reply is known (one-way: when accepted).
    pub async fn deliver(&self, service: &Name, operation: &str, message: Arc<Doc>) -> Outcome {
        let provider = self.provider(service);
        // Only a durable process whose store is still being recovered waits.
        if let Some(d) = provider
            .as_ref()
            .and_then(|(live, _)| live.durable.as_ref())
        {
            if !*d.recovered.borrow() {
                let mut rx = d.recovered.subscribe();
                let _ = tokio::time::timeout(RECOVERY_WAIT, rx.wait_for(|r| *r)).await;
                // Its instance may well be in the store: "no such instance" would tell the
                // client to give up on a conversation that goes on.
                if !*d.recovered.borrow() {
                    return Outcome::Fault(Fault::busbar(
                        "storeUnavailable",
                        format!(
                            "the {} store of durable instances is not available yet: send again later",
                            d.persistence.store.kind()
                        ),
                    ));
                }
            }
        }
        let outcome = match provider {
            Some((live, pl)) => {
                self.deliver_to(&live, pl, operation, message.clone(), true)
                    .await
            }
            None => Outcome::Fault(Fault::busbar(
                "unknownService",
                format!("no process provides service {}", service.clark()),
            )),
        };
        match &outcome {
            Outcome::Fault(f)
                if f.name.ns == BUSBAR_FAULT_NS
                    && matches!(
                        f.name.local.as_str(),
                        "noMatchingInstance" | "unknownService"
                    ) =>
            {
                self.deliver_to_older(service, operation, message)
                    .await
                    .unwrap_or(outcome)
            }
            _ => outcome,
        }
    }

    /// Offers a message to the instances of the engines this one replaced; none when no
    /// instance there takes it.
    async fn deliver_to_older(
        &self,
        service: &Name,
        operation: &str,
        message: Arc<Doc>,
    ) -> Option<Outcome> {
        let older: Vec<Engine> = {
            let mut o = self.inner.older.lock().unwrap_or_else(|e| e.into_inner());
            o.retain(|e| e.alive() > 0);
            o.clone()
        };
        for e in older {
            let Some((live, pl)) = e.provider(service) else {
                continue;
            };
            let out = e
                .deliver_to(&live, pl, operation, message.clone(), false)
                .await;
            match &out {
                Outcome::Fault(f)
                    if f.name.ns == BUSBAR_FAULT_NS && f.name.local == "noMatchingInstance" => {}
                _ => return Some(out),
            }
        }
        None
    }

    async fn deliver_to(
        &self,
        live: &Arc<Live>,
        pl: usize,
        operation: &str,
        message: Arc<Doc>,
        may_start: bool,
    ) -> Outcome {
        let process = &live.process;
        let Some(pt) = process.partner_links[pl]
            .my_port_type
            .as_ref()
            .and_then(|pt| process.defs.port_type(pt))
        else {
            return Outcome::Fault(Fault::busbar("unknownOperation", "no port type"));
        };
        let Some(op) = pt.operation(operation) else {
            return Outcome::Fault(Fault::busbar(
                "unknownOperation",
                format!(
                    "operation '{operation}' is not in port type {}",
                    pt.name.clark()
                ),
            ));
        };
        if let Some(m) = op.input.as_ref().and_then(|m| process.defs.message(m)) {
            if let Err(f) = check_message(&message, m) {
                return Outcome::Fault(f);
            }
        }
        // A one-way message is answered once an instance has taken it, so a message sent
        // after it can never overtake it.
        let (reply_tx, reply_rx) = oneshot::channel();
        let reply_rx = Some(reply_rx);
        let delivery = Delivery {
            message,
            reply: Some(reply_tx),
            sync: op.is_sync(),
        };
        // 1. A waiting instance; 2. a live instance's mailbox; 3. a new instance.
        match self.route(live, pl, operation, delivery) {
            Routed::Taken => wait_reply(reply_rx).await,
            Routed::Refused(f) => Outcome::Fault(f),
            Routed::Start(_) if !may_start => Outcome::Fault(Fault::busbar(
                "noMatchingInstance",
                format!(
                    "no instance of {} waits for '{operation}'",
                    live.process.name.clark()
                ),
            )),
            Routed::Start(delivery) => {
                if self.inner.alive.load(Ordering::Relaxed)
                    >= self.inner.limits.max_instances as i64
                {
                    return Outcome::Fault(Fault::busbar(
                        "tooManyInstances",
                        format!(
                            "the limit of {} running instances is reached",
                            self.inner.limits.max_instances
                        ),
                    ));
                }
                self.spawn(live.clone(), pl, operation.to_string(), delivery);
                wait_reply(reply_rx).await
            }
        }
    }

    fn route(
        &self,
        live: &Arc<Live>,
        pl: usize,
        operation: &str,
        mut delivery: Delivery,
    ) -> Routed {
        let process = &live.process;
        let mut router = live.router.lock().unwrap_or_else(|e| e.into_inner());
        let mut hit = None;
        for (wi, w) in router.waiters.iter().enumerate() {
            for (oi, o) in w.options.iter().enumerate() {
                if o.partner_link == pl
                    && o.operation == operation
                    && keys_match(process, &o.keys, &o.message_type, &delivery.message)
                {
                    hit = Some((wi, oi));
                    break;
                }
            }
            if hit.is_some() {
                break;
            }
        }
        if let Some((wi, oi)) = hit {
            let w = router.waiters.swap_remove(wi);
            self.inner.busy.fetch_add(1, Ordering::SeqCst);
            match w.tx.send((oi, delivery)) {
                Ok(()) => return Routed::Taken,
                Err((_, d)) => {
                    // The instance went away between registering and now.
                    self.inner.busy.fetch_sub(1, Ordering::SeqCst);
                    delivery = d;
                }
            }
        }
        // A live instance correlated with this message?
        let owner = process
            .receives
            .iter()
            .filter(|r| r.partner_link == pl && r.operation == operation)
            .flat_map(|r| r.correlations.iter().map(move |c| (r, c)))
            .filter(|(_, c)| c.initiate != Initiate::Yes)
            .find_map(|(r, c)| {
                let vals = message_props(
                    process,
                    &delivery.message,
                    Some(&r.message_type),
                    &c.set.properties,
                )
                .ok()?;
                router.keys.get(&(c.set.id, vals)).copied()
            });
        if let Some(instance) = owner {
            if router.mailbox.len() >= self.inner.limits.max_mailbox {
                return Routed::Refused(Fault::busbar(
                    "tooManyMessages",
                    "too many messages waiting for instances",
                ));
            }
            router.mailbox.push(Pending {
                instance,
                partner_link: pl,
                operation: operation.to_string(),
                message: delivery.message,
                reply: delivery.reply,
                sync: delivery.sync,
            });
            return Routed::Taken;
        }
        let starts = process
            .receives
            .iter()
            .any(|r| r.create_instance && r.partner_link == pl && r.operation == operation);
        if starts {
            Routed::Start(delivery)
        } else {
            Routed::Refused(Fault::busbar(
                "noMatchingInstance",
                format!(
                    "no instance of {} waits for '{operation}' with this message's correlation values",
                    process.name.clark()
                ),
            ))
        }
    }

    fn spawn(&self, live: Arc<Live>, pl: usize, operation: String, first: Delivery) {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let dur = live.durable.as_ref().map(|d| {
            Arc::new(InstanceDur {
                durability: d.clone(),
                root: Cur::new(),
                quiet: Mutex::new(Quiet::default()),
                writer: tokio::sync::Mutex::new(0),
                started_ms: durable::now_ms(),
            })
        });
        let inst = Arc::new(Instance {
            id,
            engine: self.clone(),
            live: live.clone(),
            first: Mutex::new(Some((pl, operation, first))),
            open: Mutex::new(Vec::new()),
            keys: Mutex::new(Vec::new()),
            dur,
        });
        live.started.fetch_add(1, Ordering::Relaxed);
        self.start(inst, None, Duration::ZERO);
    }

    /// Runs an instance (from its start, or from a saved position) on its own task, for what
    /// is left of `instance_ttl` when it has lived `age` already (before a restart).
    fn start(&self, inst: Arc<Instance>, resume: Option<Saved>, age: Duration) {
        let limit = self.inner.limits.instance_ttl;
        let ttl = limit.saturating_sub(age);
        let live = inst.live.clone();
        let id = inst.id;
        self.inner.alive.fetch_add(1, Ordering::Relaxed);
        live.alive.fetch_add(1, Ordering::Relaxed);
        self.inner.busy.fetch_add(1, Ordering::SeqCst);
        // The entry is made before the task can finish, under the same lock it removes with.
        let mut map = live.instances.lock().unwrap_or_else(|e| e.into_inner());
        let dur = inst.dur.clone();
        let task = {
            let inst = inst.clone();
            tokio::spawn(async move {
                let outcome = match tokio::time::timeout(ttl, inst.run_process(resume)).await {
                    Ok(r) => r,
                    Err(_) => Err(Stop::Fault(Fault::busbar(
                        "instanceExpired",
                        format!("the instance ran longer than {limit:?}"),
                    ))),
                };
                inst.finish(outcome);
            })
        };
        map.insert(
            id,
            Running {
                since: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
                task: task.abort_handle(),
                dur,
            },
        );
    }
}

async fn wait_reply(rx: Option<oneshot::Receiver<Outcome>>) -> Outcome {
    match rx {
        None => Outcome::Accepted,
        Some(rx) => rx.await.unwrap_or_else(|_| {
            Outcome::Fault(Fault::busbar(
                "instanceTerminated",
                "the instance ended without replying",
            ))
        }),
    }
}

/// Checks that a message has every part of its WSDL message.
fn check_message(msg: &Doc, def: &crate::wsdl::Message) -> Result<(), Fault> {
    let Some(root) = msg.root_element() else {
        return Err(Fault::busbar("invalidMessage", "empty message"));
    };
    for p in &def.parts {
        let Some(part) = msg.child(root, "", &p.name) else {
            return Err(Fault::busbar(
                "invalidMessage",
                format!("message {} lacks part '{}'", def.name.clark(), p.name),
            ));
        };
        if let Some(e) = &p.element {
            let inner = msg.child_elements(part).next();
            if !inner
                .and_then(|i| msg.name(i))
                .is_some_and(|n| n.is(&e.ns, &e.local))
            {
                return Err(Fault::busbar(
                    "invalidMessage",
                    format!(
                        "part '{}' of message {} must hold element {}",
                        p.name,
                        def.name.clark(),
                        e.clark()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn keys_match(
    process: &Process,
    keys: &[(usize, Vec<String>)],
    message_type: &Name,
    msg: &Arc<Doc>,
) -> bool {
    keys.iter().all(|(id, want)| {
        let props = process
            .receives
            .iter()
            .flat_map(|r| r.correlations.iter())
            .find(|c| c.set.id == *id)
            .map(|c| c.set.properties.clone())
            .unwrap_or_default();
        message_props(process, msg, Some(message_type), &props).is_ok_and(|v| &v == want)
    })
}

/// The values of `props` in a message (by its type's property aliases).
fn message_props(
    process: &Process,
    msg: &Arc<Doc>,
    message_type: Option<&Name>,
    props: &[Name],
) -> Result<Vec<String>, Fault> {
    let root = msg
        .root_element()
        .ok_or_else(|| Fault::standard("selectionFailure", "empty message"))?;
    // The message type is not carried by the document: find an alias whose part exists.
    let mut out = Vec::new();
    for p in props {
        let mut found = None;
        let aliases = process.defs.aliases.iter().filter(|a| {
            a.property.is(&p.ns, &p.local)
                && match (message_type, &a.message_type) {
                    (Some(want), Some(have)) => have.is(&want.ns, &want.local),
                    _ => true,
                }
        });
        for a in aliases {
            let Some(part) = &a.part else { continue };
            let Some(pe) = msg.child(root, "", part) else {
                continue;
            };
            if let Some(mt) = &a.message_type {
                let Some(m) = process.defs.message(mt) else {
                    continue;
                };
                if !m
                    .parts
                    .iter()
                    .all(|x| msg.child(root, "", &x.name).is_some())
                {
                    continue;
                }
            }
            let ctx = part_node(msg, pe, process, a.message_type.as_ref(), part);
            let v = match &a.query {
                Some(q) => q
                    .eval(&NoVars, Some(&ctx))
                    .map_err(|e| Fault::standard("selectionFailure", e.to_string()))?,
                None => Value::NodeSet(vec![ctx]),
            };
            found = Some(single_string(v)?);
            break;
        }
        match found {
            Some(v) => out.push(v),
            None => {
                return Err(Fault::standard(
                    "selectionFailure",
                    format!("no property alias of {} applies to the message", p.clark()),
                ))
            }
        }
    }
    Ok(out)
}

fn single_string(v: Value) -> Result<String, Fault> {
    match v {
        Value::NodeSet(ns) if ns.len() == 1 => Ok(ns[0].doc.string_value(ns[0].id)),
        Value::NodeSet(ns) => Err(Fault::standard(
            "selectionFailure",
            format!("the query selected {} nodes instead of one", ns.len()),
        )),
        other => Ok(other.to_string_value()),
    }
}

/// The node `$var.part` stands for: an element part's element, else the part itself.
fn part_node(
    doc: &Arc<Doc>,
    part_elem: NodeId,
    process: &Process,
    message_type: Option<&Name>,
    part: &str,
) -> NodeRef {
    let element_part = message_type
        .and_then(|m| process.defs.message(m))
        .and_then(|m| m.part(part))
        .is_some_and(|p| p.element.is_some());
    let id = if element_part {
        doc.child_elements(part_elem).next().unwrap_or(part_elem)
    } else {
        part_elem
    };
    NodeRef {
        doc: doc.clone(),
        id,
    }
}

struct NoVars;

impl Context for NoVars {
    fn variable(&self, name: &str) -> Result<Value, XPathError> {
        Err(XPathError::Type(format!("no variable ${name} here")))
    }
    fn function(&self, name: &Name, _: Vec<Value>) -> Result<Value, XPathError> {
        Err(XPathError::Type(format!(
            "no function {} here",
            name.clark()
        )))
    }
}

/// Why running stopped.
#[derive(Clone, Debug)]
enum Stop {
    Fault(Fault),
    Exit,
}

impl std::convert::From<Fault> for Stop {
    fn from(f: Fault) -> Self {
        Stop::Fault(f)
    }
}

type Slot = Option<Arc<Doc>>;

struct Frame {
    vars: Mutex<Vec<Slot>>,
    corrs: Mutex<Vec<Option<Vec<String>>>>,
    parent: Option<Arc<Frame>>,
    /// The fault being handled, in a fault handler's frame.
    fault: Option<Fault>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame").finish_non_exhaustive()
    }
}

impl FrameView for Frame {
    fn data(&self) -> FrameData {
        let vars = self.vars.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let corrs = self.corrs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (vars, corrs, self.fault.clone())
    }
}

impl Frame {
    /// Puts back a saved frame's contents (same shape, or the process changed).
    fn restore(&self, saved: &SavedFrame, a: &Activity) -> Result<(), Stop> {
        let mut vars = self.vars.lock().unwrap_or_else(|e| e.into_inner());
        let mut corrs = self.corrs.lock().unwrap_or_else(|e| e.into_inner());
        if vars.len() != saved.vars.len() || corrs.len() != saved.corrs.len() {
            return Err(misfit(a));
        }
        vars.clone_from(&saved.vars);
        corrs.clone_from(&saved.corrs);
        Ok(())
    }

    fn new(def: &FrameDef, parent: Option<Arc<Frame>>, fault: Option<Fault>) -> Arc<Frame> {
        Arc::new(Frame {
            vars: Mutex::new(vec![None; def.vars.len()]),
            corrs: Mutex::new(vec![None; def.corrs.len()]),
            parent,
            fault,
        })
    }

    fn up(self: &Arc<Frame>, hops: u16) -> Arc<Frame> {
        let mut f = self.clone();
        for _ in 0..hops {
            match f.parent.clone() {
                Some(p) => f = p,
                None => break,
            }
        }
        f
    }

    fn get(self: &Arc<Frame>, r: &VarRef) -> Slot {
        let f = self.up(r.hops);
        let v = f.vars.lock().unwrap_or_else(|e| e.into_inner());
        v.get(r.index as usize).cloned().flatten()
    }

    fn take(self: &Arc<Frame>, r: &VarRef) -> Slot {
        let f = self.up(r.hops);
        let mut v = f.vars.lock().unwrap_or_else(|e| e.into_inner());
        v.get_mut(r.index as usize).and_then(Option::take)
    }

    fn put(self: &Arc<Frame>, r: &VarRef, slot: Slot) {
        let f = self.up(r.hops);
        let mut v = f.vars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = v.get_mut(r.index as usize) {
            *s = slot;
        }
    }

    fn set(self: &Arc<Frame>, r: &VarRef, doc: Arc<Doc>) {
        let f = self.up(r.hops);
        let mut v = f.vars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = v.get_mut(r.index as usize) {
            *s = Some(doc);
        }
    }

    fn corr(self: &Arc<Frame>, c: &CorrRef) -> Option<Vec<String>> {
        let f = self.up(c.hops);
        let v = f.corrs.lock().unwrap_or_else(|e| e.into_inner());
        v.get(c.index as usize).cloned().flatten()
    }

    fn set_corr(self: &Arc<Frame>, c: &CorrRef, vals: Vec<String>) {
        let f = self.up(c.hops);
        let mut v = f.corrs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = v.get_mut(c.index as usize) {
            *s = Some(vals);
        }
    }

    fn handled_fault(self: &Arc<Frame>) -> Option<Fault> {
        let mut f = Some(self.clone());
        while let Some(x) = f {
            if let Some(fault) = &x.fault {
                return Some(fault.clone());
            }
            f = x.parent.clone();
        }
        None
    }
}

struct OpenExchange {
    partner_link: usize,
    operation: String,
    message_exchange: Option<String>,
    tx: oneshot::Sender<Outcome>,
}

struct Instance {
    id: u64,
    engine: Engine,
    live: Arc<Live>,
    first: Mutex<Option<(usize, String, Delivery)>>,
    open: Mutex<Vec<OpenExchange>>,
    keys: Mutex<Vec<(usize, Vec<String>)>>,
    /// Durable instances only: their position and what waits for the next write.
    dur: Option<Arc<InstanceDur>>,
}

/// A durable instance's bookkeeping.
struct InstanceDur {
    durability: Arc<Durability>,
    /// The process scope's position.
    root: Arc<Cur>,
    quiet: Mutex<Quiet>,
    /// The last snapshot written (its sequence number); writes queue here in order.
    writer: tokio::sync::Mutex<u64>,
    started_ms: i64,
}

impl InstanceDur {
    /// Records the instance's end after any write queued before it, then sends the answers
    /// it held. When the record fails, the database still holds the instance at its last
    /// wait point, and a restart resumes it from there and runs the steps after it again:
    /// a client told of success would repeat nothing, yet its step would happen twice. So
    /// each held answer becomes a `persistenceFailed` fault, as when a snapshot fails.
    fn write_finish(
        self: &Arc<Self>,
        finish: crate::store::Finish,
        held: Vec<(oneshot::Sender<Outcome>, Outcome)>,
    ) {
        let d = self.clone();
        tokio::spawn(async move {
            let id = finish.id;
            let written = d.writer.lock().await;
            let t0 = Instant::now();
            let r = d.durability.persistence.store.finish(finish).await;
            d.durability.observe(t0.elapsed(), r.is_ok());
            drop(written);
            match r {
                Ok(()) => {
                    for (tx, o) in held {
                        let _ = tx.send(o);
                    }
                }
                Err(e) => {
                    tracing::error!(instance = id, "cannot record the instance's end: {e}");
                    let f = Fault::busbar(
                        "persistenceFailed",
                        format!("the instance's end could not be saved: {e}"),
                    );
                    for (tx, _) in held {
                        let _ = tx.send(Outcome::Fault(f.clone()));
                    }
                }
            }
        });
    }
}

/// Branches of a durable instance that run and that are parked at a wait point; when they
/// are equal, the instance is at rest and its snapshot is written.
#[derive(Default)]
struct Quiet {
    strands: i64,
    parked: i64,
    /// Snapshots taken so far.
    seq: u64,
    /// A snapshot was written (so the row exists).
    saved: bool,
    /// Answers (replies, one-way acceptances) sent once the next snapshot is written, so a
    /// client never hears of a step the database does not hold yet.
    held: Vec<(oneshot::Sender<Outcome>, Outcome)>,
}

/// Counts a running branch of a durable instance while it lives.
struct StrandGuard(Option<Arc<InstanceDur>>);

impl Drop for StrandGuard {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).strands -= 1;
        }
    }
}

/// A composite activity waiting for its branches: not a running branch itself meanwhile.
struct Suspended(Option<Arc<InstanceDur>>);

impl Drop for Suspended {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).strands += 1;
        }
    }
}

/// Counts a branch parked at a wait point while it waits.
struct ParkGuard(Option<Arc<InstanceDur>>);

impl Drop for ParkGuard {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).parked -= 1;
        }
    }
}

/// Where an activity keeps its position (durable instances), and where it resumes from.
#[derive(Default)]
struct Track {
    cur: Option<Arc<Cur>>,
    resume: Option<Saved>,
}

impl Track {
    fn at(cur: Option<Arc<Cur>>, resume: Option<Saved>) -> Track {
        Track { cur, resume }
    }

    fn set(&self, at: At) {
        if let Some(c) = &self.cur {
            c.set(at);
        }
    }

    /// A position for a child activity, when positions are kept.
    fn child(&self) -> Option<Arc<Cur>> {
        self.cur.as_ref().map(|_| Cur::new())
    }
}

/// A saved position that does not fit the process (it changed, or the snapshot is broken).
fn misfit(a: &Activity) -> Stop {
    Stop::Fault(Fault::busbar(
        "resumeFailed",
        format!(
            "line {}: the saved position does not fit this activity",
            a.line
        ),
    ))
}

/// The time `d` from now, in ms since the Unix epoch.
fn due_ms(d: Duration) -> i64 {
    durable::now_ms().saturating_add(d.as_millis().min(i64::MAX as u128) as i64)
}

/// The time left until `due` (ms since the Unix epoch); zero when it has passed.
fn until_ms(due: i64) -> Duration {
    Duration::from_millis(due.saturating_sub(durable::now_ms()).max(0) as u64)
}

impl Instance {
    fn process(&self) -> &Process {
        &self.live.process
    }

    async fn run_process(self: &Arc<Self>, resume: Option<Saved>) -> Result<(), Stop> {
        let root = &self.live.process.root;
        let frame = Frame::new(&root.frame, None, None);
        let top = Activity {
            act: Act::Empty,
            name: None,
            line: 0,
        };
        let t = Track::at(self.dur.as_ref().map(|d| d.root.clone()), resume);
        let _strand = self.strand_guard();
        self.run_scope(&top, root, frame, t).await
    }

    fn strand_guard(&self) -> StrandGuard {
        if let Some(d) = &self.dur {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).strands += 1;
        }
        StrandGuard(self.dur.clone())
    }

    fn suspend(&self) -> Suspended {
        if let Some(d) = &self.dur {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).strands -= 1;
        }
        Suspended(self.dur.clone())
    }

    /// Counts this branch as parked (durable instances) and writes the snapshot when every
    /// branch is.
    fn parked(self: &Arc<Self>) -> ParkGuard {
        if let Some(d) = &self.dur {
            d.quiet.lock().unwrap_or_else(|e| e.into_inner()).parked += 1;
            self.check_quiet();
        }
        ParkGuard(self.dur.clone())
    }

    /// Counts this branch as parked while it calls a partner. The call is a wait point only
    /// when answers wait for a write: then the snapshot is written (the call runs again
    /// after a restart) and they go out, so a partner that calls back into this engine
    /// before replying gets its answer. Otherwise nothing is written here.
    fn calling(self: &Arc<Self>) -> ParkGuard {
        if let Some(d) = &self.dur {
            let holding = {
                let mut q = d.quiet.lock().unwrap_or_else(|e| e.into_inner());
                q.parked += 1;
                !q.held.is_empty()
            };
            if holding {
                self.check_quiet();
            }
        }
        ParkGuard(self.dur.clone())
    }

    /// A branch of a flow or parallel forEach: counted while it runs, marked done when it
    /// ends well (which may leave the instance at rest).
    fn strand<'a, F>(
        self: &'a Arc<Self>,
        cur: Option<Arc<Cur>>,
        f: F,
    ) -> impl Future<Output = Result<(), Stop>> + 'a
    where
        F: Future<Output = Result<(), Stop>> + 'a,
    {
        let guard = self.strand_guard();
        async move {
            let r = f.await;
            if r.is_ok() {
                if let Some(c) = &cur {
                    c.set(At::Done);
                }
                drop(guard);
                self.check_quiet();
            }
            r
        }
    }

    fn branch<'a>(
        self: &'a Arc<Self>,
        x: &'a Activity,
        frame: &'a Arc<Frame>,
        t: Track,
    ) -> impl Future<Output = Result<(), Stop>> + 'a {
        let cur = t.cur.clone();
        self.strand(cur, self.run(x, frame, t))
    }

    /// Holds a durable instance before a step with side effects while this node's heartbeat
    /// is older than the lease ([`Fence`]): the heartbeat loop drops it meanwhile, or the
    /// heartbeat is written again (in time: no other node could take the instance over).
    async fn fence(&self) {
        let Some(d) = &self.dur else { return };
        while d.durability.fence.lapsed() {
            tokio::time::sleep(FENCE_POLL).await;
        }
    }

    /// Answers a client: now, or for a durable instance once its next snapshot is written.
    fn answer(&self, tx: oneshot::Sender<Outcome>, outcome: Outcome) {
        match &self.dur {
            Some(d) => d
                .quiet
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .held
                .push((tx, outcome)),
            None => {
                let _ = tx.send(outcome);
            }
        }
    }

    /// Runs a pick's chosen handler: onMessage `i`, or onAlarm `i - onMessage`.
    async fn pick_handler(
        self: &Arc<Self>,
        p: &PickDef,
        i: usize,
        frame: &Arc<Frame>,
        t: &Track,
        resume: Option<Saved>,
    ) -> Result<(), Stop> {
        let act = match p.on_message.get(i) {
            Some((_, act)) => act,
            None => &p.on_alarm[i - p.on_message.len()].1,
        };
        let child = t.child();
        if let (Some(c), Some(ch)) = (&t.cur, &child) {
            c.set(At::Pick {
                alarms: Vec::new(),
                chosen: Some((i, ch.clone())),
            });
        }
        self.run(act, frame, Track::at(child, resume)).await
    }

    /// Writes the snapshot when every branch of this durable instance is at a wait point.
    fn check_quiet(self: &Arc<Self>) {
        let Some(d) = &self.dur else { return };
        let (seq, held, at) = {
            let mut q = d.quiet.lock().unwrap_or_else(|e| e.into_inner());
            if q.strands <= 0 || q.parked < q.strands {
                return;
            }
            let Some(at) = durable::capture(&d.root) else {
                return;
            };
            q.seq += 1;
            q.saved = true;
            (q.seq, std::mem::take(&mut q.held), at)
        };
        let snapshot = durable::Snapshot {
            process: self.live.process.name.clark(),
            digest: d.durability.digest.clone(),
            keys: self.keys.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            open: self
                .open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|o| durable::SavedExchange {
                    partner_link: o.partner_link,
                    operation: o.operation.clone(),
                    message_exchange: o.message_exchange.clone(),
                })
                .collect(),
            at,
        };
        let me = self.clone();
        tokio::spawn(async move { me.write_snapshot(seq, snapshot, held).await });
    }

    async fn write_snapshot(
        self: Arc<Self>,
        seq: u64,
        snapshot: durable::Snapshot,
        held: Vec<(oneshot::Sender<Outcome>, Outcome)>,
    ) {
        let Some(d) = &self.dur else { return };
        let mut written = d.writer.lock().await;
        if seq > *written {
            let p = &d.durability.persistence;
            let save = crate::store::Save {
                id: self.id,
                process: snapshot.process.clone(),
                node: p.node.clone(),
                started_ms: d.started_ms,
                at_ms: durable::now_ms(),
                due_ms: snapshot.at.due(),
                keys: snapshot
                    .keys
                    .iter()
                    .map(|(s, v)| durable::key_string(*s, v))
                    .collect(),
                snapshot: snapshot.to_json(),
            };
            let t0 = Instant::now();
            let r = p.store.save(save).await;
            d.durability.observe(t0.elapsed(), r.is_ok());
            match r {
                Ok(()) => *written = seq,
                Err(e) => {
                    drop(written);
                    self.lost(&e, held);
                    return;
                }
            }
        }
        drop(written);
        for (tx, o) in held {
            let _ = tx.send(o);
        }
    }

    /// A snapshot could not be written: the instance is no longer durable, so it ends, and
    /// the answers it held get a fault instead.
    fn lost(&self, why: &str, held: Vec<(oneshot::Sender<Outcome>, Outcome)>) {
        tracing::error!(process = %self.live.process.name.clark(), instance = self.id, "cannot save the instance: {why}");
        let f = Fault::busbar(
            "persistenceFailed",
            format!("the instance's state could not be saved: {why}"),
        );
        for (tx, _) in held {
            let _ = tx.send(Outcome::Fault(f.clone()));
        }
        self.engine.terminate(self.id);
    }

    fn finish(self: &Arc<Self>, outcome: Result<(), Stop>) {
        let live = &self.live;
        let removed = live
            .instances
            .lock()
            .map(|mut m| m.remove(&self.id).is_some())
            .unwrap_or(false);
        if removed {
            self.engine.inner.alive.fetch_sub(1, Ordering::Relaxed);
            live.alive.fetch_sub(1, Ordering::Relaxed);
        }
        self.engine.inner.busy.fetch_sub(1, Ordering::SeqCst);
        {
            let mut r = live.router.lock().unwrap_or_else(|e| e.into_inner());
            r.waiters.retain(|w| w.instance != self.id);
            r.keys.retain(|_, v| *v != self.id);
            let mine: Vec<Pending> = {
                let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut r.mailbox)
                    .into_iter()
                    .partition(|p| p.instance == self.id);
                r.mailbox = rest;
                mine
            };
            for p in mine {
                if let Some(tx) = p.reply {
                    let _ = tx.send(Outcome::Fault(Fault::busbar(
                        "instanceCompleted",
                        "the instance this message correlates with has completed",
                    )));
                }
            }
        }
        let fault = match outcome {
            Ok(()) | Err(Stop::Exit) => {
                live.completed.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(Stop::Fault(f)) => {
                live.faulted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(process = %live.process.name.clark(), instance = self.id, fault = %f.name.clark(), "instance faulted: {}", f.text);
                Some(f)
            }
        };
        // Open requests get the fault that ended the instance (a durable one's once its end
        // is written).
        let open = std::mem::take(&mut *self.open.lock().unwrap_or_else(|e| e.into_inner()));
        for o in open {
            let f = fault.clone().unwrap_or_else(|| {
                Fault::standard(
                    "missingReply",
                    format!(
                        "the instance completed without replying to '{}'",
                        o.operation
                    ),
                )
            });
            self.answer(o.tx, Outcome::Fault(f));
        }
        if let Some(d) = &self.dur {
            self.finish_durable(d, fault.as_ref());
        }
    }

    /// Records a durable instance's end (kept or deleted by the completion policy), then
    /// sends the answers it held.
    fn finish_durable(self: &Arc<Self>, d: &Arc<InstanceDur>, fault: Option<&Fault>) {
        let state = match fault {
            Some(_) => crate::store::State::Faulted,
            None => crate::store::State::Completed,
        };
        let keep = d.durability.keep(state);
        let (held, saved) = {
            let mut q = d.quiet.lock().unwrap_or_else(|e| e.into_inner());
            q.seq += 1;
            (std::mem::take(&mut q.held), q.saved)
        };
        if !keep && !saved {
            // Never written and not to be kept: nothing to tell the database.
            for (tx, o) in held {
                let _ = tx.send(o);
            }
            return;
        }
        let root = d.root.with(|at| match at {
            At::Scope { frame, .. } => {
                let (vars, corrs, fault) = frame.data();
                Some(SavedFrame { vars, corrs, fault })
            }
            _ => None,
        });
        let finish = crate::store::Finish {
            id: self.id,
            process: self.live.process.name.clark(),
            node: d.durability.persistence.node.clone(),
            started_ms: d.started_ms,
            at_ms: durable::now_ms(),
            state,
            keep,
            final_state: durable::final_json(root.as_ref(), &d.durability.names, fault),
            first: !saved,
        };
        d.write_finish(finish, held);
    }

    fn run<'a>(
        self: &'a Arc<Self>,
        a: &'a Activity,
        frame: &'a Arc<Frame>,
        mut t: Track,
    ) -> BoxFuture<'a, Result<(), Stop>> {
        Box::pin(async move {
            if t.resume.is_some()
                && !matches!(
                    a.act,
                    Act::Sequence(_)
                        | Act::Flow(_)
                        | Act::Receive(_)
                        | Act::Invoke(_)
                        | Act::If(..)
                        | Act::While(..)
                        | Act::RepeatUntil(..)
                        | Act::ForEach(_)
                        | Act::Scope(_)
                        | Act::Wait(_)
                        | Act::Pick(_)
                )
            {
                return Err(misfit(a));
            }
            match &a.act {
                Act::Empty => Ok(()),
                Act::Sequence(v) => {
                    let (start, mut resume) = match t.resume.take() {
                        None => (0, None),
                        Some(Saved::Seq(i, r)) if i < v.len() => (i, Some(*r)),
                        Some(_) => return Err(misfit(a)),
                    };
                    for (k, x) in v.iter().enumerate().skip(start) {
                        let child = t.child();
                        if let (Some(c), Some(ch)) = (&t.cur, &child) {
                            c.set(At::Seq(k, ch.clone()));
                        }
                        self.run(x, frame, Track::at(child, resume.take())).await?;
                    }
                    Ok(())
                }
                Act::Flow(v) => {
                    let mut resumes: Vec<Option<Saved>> = match t.resume.take() {
                        None => vec![None; v.len()],
                        Some(Saved::Flow(r)) if r.len() == v.len() => {
                            r.into_iter().map(Some).collect()
                        }
                        Some(_) => return Err(misfit(a)),
                    };
                    let curs: Vec<Option<Arc<Cur>>> = v.iter().map(|_| t.child()).collect();
                    if let Some(c) = &t.cur {
                        c.set(At::Flow(curs.iter().flatten().cloned().collect()));
                    }
                    let _suspended = self.suspend();
                    let mut set: FuturesUnordered<_> = FuturesUnordered::new();
                    for (i, (x, cur)) in v.iter().zip(curs).enumerate() {
                        let resume = resumes[i].take();
                        if matches!(resume, Some(Saved::Done)) {
                            if let Some(c) = &cur {
                                c.set(At::Done);
                            }
                            continue;
                        }
                        set.push(self.branch(x, frame, Track::at(cur, resume)));
                    }
                    while let Some(r) = set.next().await {
                        r?;
                    }
                    Ok(())
                }
                Act::Receive(r) => {
                    if !matches!(t.resume, None | Some(Saved::Receive)) {
                        return Err(misfit(a));
                    }
                    t.set(At::Receive);
                    let (_, d) = self.receive(std::slice::from_ref(&**r), &[], frame).await?;
                    t.set(At::Run);
                    self.accept(r, d, frame)
                }
                Act::Reply {
                    partner_link,
                    operation,
                    variable,
                    fault,
                    message_exchange,
                } => {
                    let msg = match variable {
                        Some(v) => Some(self.read_var(frame, v)?),
                        None => None,
                    };
                    let tx = {
                        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
                        let i = open.iter().position(|o| {
                            o.partner_link == *partner_link
                                && o.operation == *operation
                                && o.message_exchange == *message_exchange
                        });
                        i.map(|i| open.remove(i))
                    };
                    let Some(o) = tx else {
                        return Err(Fault::standard(
                            "missingRequest",
                            format!("reply to '{operation}' without an open request"),
                        )
                        .into());
                    };
                    let outcome = match fault {
                        Some(f) => Outcome::Fault(Fault {
                            name: f.clone(),
                            data: msg,
                            text: format!("fault {} replied by the process", f.clark()),
                        }),
                        None => match msg {
                            Some(m) => Outcome::Reply(m),
                            None => {
                                Outcome::Reply(Arc::new(Doc::with_root(Name::new("", "message")).0))
                            }
                        },
                    };
                    self.fence().await;
                    self.answer(o.tx, outcome);
                    Ok(())
                }
                Act::Invoke(inv) => {
                    if !matches!(t.resume.take(), None | Some(Saved::Invoke)) {
                        return Err(misfit(a));
                    }
                    t.set(At::Invoke);
                    self.fence().await;
                    let r = self.invoke(inv, frame).await;
                    t.set(At::Run);
                    r
                }
                Act::Assign(copies) => {
                    // An assign is atomic: a fault in one copy puts back what the copies
                    // before it wrote. A single copy writes only once it has read everything.
                    if let [one] = copies.as_slice() {
                        return self.copy(one, frame);
                    }
                    let before: Vec<(&VarRef, Slot)> =
                        written(copies).map(|r| (r, frame.get(r))).collect();
                    for c in copies {
                        if let Err(e) = self.copy(c, frame) {
                            for (r, v) in before.into_iter().rev() {
                                frame.put(r, v);
                            }
                            return Err(e);
                        }
                    }
                    Ok(())
                }
                Act::If(branches, otherwise) => {
                    let (chosen, resume) = match t.resume.take() {
                        None => {
                            let mut chosen = branches.len();
                            for (i, (c, _)) in branches.iter().enumerate() {
                                if self.eval(c, frame, None)?.to_bool() {
                                    chosen = i;
                                    break;
                                }
                            }
                            (chosen, None)
                        }
                        Some(Saved::If(i, r)) if i <= branches.len() => (i, Some(*r)),
                        Some(_) => return Err(misfit(a)),
                    };
                    let act = match branches.get(chosen) {
                        Some((_, act)) => act,
                        None => match otherwise {
                            Some(o) => o,
                            None if resume.is_none() => return Ok(()),
                            None => return Err(misfit(a)),
                        },
                    };
                    let child = t.child();
                    if let (Some(c), Some(ch)) = (&t.cur, &child) {
                        c.set(At::If(chosen, ch.clone()));
                    }
                    self.run(act, frame, Track::at(child, resume)).await
                }
                Act::While(c, body) => {
                    let mut resume = match t.resume.take() {
                        None => None,
                        Some(Saved::Loop(r)) => Some(*r),
                        Some(_) => return Err(misfit(a)),
                    };
                    while resume.is_some() || self.eval(c, frame, None)?.to_bool() {
                        let child = t.child();
                        if let (Some(c), Some(ch)) = (&t.cur, &child) {
                            c.set(At::Loop(ch.clone()));
                        }
                        self.run(body, frame, Track::at(child, resume.take()))
                            .await?;
                        tokio::task::yield_now().await;
                    }
                    Ok(())
                }
                Act::RepeatUntil(body, c) => {
                    let mut resume = match t.resume.take() {
                        None => None,
                        Some(Saved::Loop(r)) => Some(*r),
                        Some(_) => return Err(misfit(a)),
                    };
                    loop {
                        let child = t.child();
                        if let (Some(c), Some(ch)) = (&t.cur, &child) {
                            c.set(At::Loop(ch.clone()));
                        }
                        self.run(body, frame, Track::at(child, resume.take()))
                            .await?;
                        if self.eval(c, frame, None)?.to_bool() {
                            return Ok(());
                        }
                        tokio::task::yield_now().await;
                    }
                }
                Act::ForEach(fe) => self.for_each(a, fe, frame, t).await,
                Act::Scope(s) => {
                    let f = Frame::new(&s.frame, Some(frame.clone()), None);
                    self.run_scope(a, s, f, t).await
                }
                Act::Throw { fault, variable } => {
                    let data = match variable {
                        Some(v) => Some(self.read_var(frame, v)?),
                        None => None,
                    };
                    Err(Stop::Fault(Fault {
                        name: fault.clone(),
                        data,
                        text: format!("fault {} thrown by the process", fault.clark()),
                    }))
                }
                Act::Rethrow => match frame.handled_fault() {
                    Some(f) => Err(Stop::Fault(f)),
                    None => Ok(()),
                },
                Act::Exit => Err(Stop::Exit),
                Act::Wait(timer) => {
                    let d = match t.resume.take() {
                        None => self.timer(timer, frame)?,
                        Some(Saved::Wait(due)) => until_ms(due),
                        Some(_) => return Err(misfit(a)),
                    };
                    if let Some(c) = &t.cur {
                        c.set(At::Wait(due_ms(d)));
                    }
                    self.park();
                    let parked = self.parked();
                    if d.is_zero() {
                        // A wait that is already over: no trip through the timer (whose
                        // resolution is a millisecond), but still a point where others run.
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(d).await;
                    }
                    self.fence().await;
                    drop(parked);
                    self.unpark();
                    t.set(At::Run);
                    Ok(())
                }
                Act::Pick(p) => {
                    let total = p.on_message.len() + p.on_alarm.len();
                    let saved_alarms = match t.resume.take() {
                        None => None,
                        Some(Saved::Pick {
                            chosen: Some((i, r)),
                            ..
                        }) if i < total => {
                            return self.pick_handler(p, i, frame, &t, Some(*r)).await;
                        }
                        Some(Saved::Pick {
                            alarms,
                            chosen: None,
                        }) if alarms.len() == p.on_alarm.len() => Some(alarms),
                        Some(_) => return Err(misfit(a)),
                    };
                    let defs: Vec<ReceiveDef> =
                        p.on_message.iter().map(|(r, _)| r.clone()).collect();
                    let mut alarms = Vec::new();
                    match &saved_alarms {
                        Some(due) => alarms.extend(due.iter().map(|d| until_ms(*d))),
                        None => {
                            for (timer, _) in &p.on_alarm {
                                alarms.push(self.timer(timer, frame)?);
                            }
                        }
                    }
                    if let Some(c) = &t.cur {
                        c.set(At::Pick {
                            alarms: saved_alarms
                                .unwrap_or_else(|| alarms.iter().map(|d| due_ms(*d)).collect()),
                            chosen: None,
                        });
                    }
                    let (i, d) = self.receive(&defs, &alarms, frame).await?;
                    if i < defs.len() {
                        let d = d.ok_or_else(|| {
                            Fault::busbar("internal", "pick woke without a message")
                        })?;
                        self.accept(&defs[i], Some(d), frame)?;
                    } else {
                        self.fence().await;
                    }
                    self.pick_handler(p, i, frame, &t, None).await
                }
            }
        })
    }

    fn park(&self) {
        self.engine.inner.busy.fetch_sub(1, Ordering::SeqCst);
    }

    fn unpark(&self) {
        self.engine.inner.busy.fetch_add(1, Ordering::SeqCst);
    }

    fn timer(&self, t: &Timer, frame: &Arc<Frame>) -> Result<Duration, Stop> {
        match t {
            Timer::For(e) => {
                let s = self.eval(e, frame, None)?.to_string_value();
                timeval::parse_duration(&s).ok_or_else(|| {
                    Fault::standard(
                        "invalidExpressionValue",
                        format!("'{s}' is not an xs:duration"),
                    )
                    .into()
                })
            }
            Timer::Until(e) => {
                let s = self.eval(e, frame, None)?.to_string_value();
                timeval::parse_datetime(&s)
                    .map(timeval::until)
                    .ok_or_else(|| {
                        Fault::standard(
                            "invalidExpressionValue",
                            format!("'{s}' is not an xs:dateTime"),
                        )
                        .into()
                    })
            }
        }
    }

    async fn run_scope(
        self: &Arc<Self>,
        a: &Activity,
        s: &ScopeDef,
        frame: Arc<Frame>,
        mut t: Track,
    ) -> Result<(), Stop> {
        let (body_resume, handler_resume) = match t.resume.take() {
            None => (None, None),
            Some(Saved::Scope(saved)) => {
                let saved = *saved;
                frame.restore(&saved.frame, a)?;
                (Some(saved.body), saved.handler)
            }
            Some(_) => return Err(misfit(a)),
        };
        let body = t.child();
        if let (Some(c), Some(b)) = (&t.cur, &body) {
            c.set(At::Scope {
                frame: frame.clone(),
                body: b.clone(),
                handler: None,
            });
        }
        if let Some((catch, hframe, at)) = handler_resume {
            // The body had faulted and this handler was running.
            let fault = hframe.fault.clone().ok_or_else(|| misfit(a))?;
            let (def, activity) = match catch {
                Some(i) => {
                    let c = s.handlers.catches.get(i).ok_or_else(|| misfit(a))?;
                    (c.var.as_ref().map(|(d, _)| d), &*c.activity)
                }
                None => (
                    None,
                    s.handlers.catch_all.as_deref().ok_or_else(|| misfit(a))?,
                ),
            };
            let empty = FrameDef::default();
            let f = Frame::new(def.unwrap_or(&empty), Some(frame.clone()), Some(fault));
            f.restore(&hframe, a)?;
            return self.run_handler(catch, f, activity, &t, Some(at)).await;
        }
        if body_resume.is_some() {
            let r = self
                .run(&s.activity, &frame, Track::at(body, body_resume))
                .await;
            return self.handle(s, frame, r, &t).await;
        }
        for (i, v) in s.frame.vars.iter().enumerate() {
            if let Some(from) = &v.init {
                let r = VarRef {
                    name: v.name.clone(),
                    hops: 0,
                    index: i as u16,
                    kind: v.kind.clone(),
                };
                let c = Copy {
                    from: from.clone(),
                    to: To::Var {
                        var: r,
                        part: None,
                        query: None,
                    },
                    keep_src_element_name: false,
                    ignore_missing_from_data: false,
                    line: 0,
                };
                self.copy(&c, &frame)?;
            }
        }
        let r = self.run(&s.activity, &frame, Track::at(body, None)).await;
        self.handle(s, frame, r, &t).await
    }

    /// What a scope's body ended with, given to its fault handlers.
    async fn handle(
        self: &Arc<Self>,
        s: &ScopeDef,
        frame: Arc<Frame>,
        r: Result<(), Stop>,
        t: &Track,
    ) -> Result<(), Stop> {
        let fault = match r {
            Ok(()) | Err(Stop::Exit) => return r,
            Err(Stop::Fault(f)) => f,
        };
        if s.exit_on_standard_fault && fault.name.ns == BPEL_NS {
            return Err(Stop::Exit);
        }
        // Catch by name and data, then by name, then by data, then catchAll.
        let by_data = |c: &Catch| match (&c.var, &fault.data) {
            (Some((_, kind)), Some(d)) => data_fits(kind, d),
            _ => false,
        };
        let by_name = |c: &Catch| {
            c.fault
                .as_ref()
                .is_some_and(|n| n.is(&fault.name.ns, &fault.name.local))
        };
        let h = &s.handlers;
        let chosen = h
            .catches
            .iter()
            .find(|c| by_name(c) && c.var.is_some() && by_data(c))
            .or_else(|| h.catches.iter().find(|c| by_name(c) && c.var.is_none()))
            .or_else(|| h.catches.iter().find(|c| c.fault.is_none() && by_data(c)));
        if let Some(c) = chosen {
            let index = h.catches.iter().position(|x| std::ptr::eq(x, c));
            let f = match &c.var {
                Some((def, _)) => {
                    let f = Frame::new(def, Some(frame.clone()), Some(fault.clone()));
                    if let Some(d) = &fault.data {
                        let mut v = f.vars.lock().unwrap_or_else(|e| e.into_inner());
                        v[0] = Some(d.clone());
                    }
                    f
                }
                None => Frame::new(
                    &FrameDef::default(),
                    Some(frame.clone()),
                    Some(fault.clone()),
                ),
            };
            return self.run_handler(index, f, &c.activity, t, None).await;
        }
        if let Some(all) = &h.catch_all {
            let f = Frame::new(
                &FrameDef::default(),
                Some(frame.clone()),
                Some(fault.clone()),
            );
            return self.run_handler(None, f, all, t, None).await;
        }
        Err(Stop::Fault(fault))
    }

    /// Runs a scope's fault handler (catch `index`, `None`: catchAll) in its frame.
    async fn run_handler(
        self: &Arc<Self>,
        index: Option<usize>,
        f: Arc<Frame>,
        activity: &Activity,
        t: &Track,
        resume: Option<Saved>,
    ) -> Result<(), Stop> {
        let child = t.child();
        if let (Some(c), Some(ch)) = (&t.cur, &child) {
            c.with(|at| {
                if let At::Scope { handler, .. } = at {
                    *handler = Some((index, f.clone(), ch.clone()));
                }
            });
        }
        self.run(activity, &f, Track::at(child, resume)).await
    }

    async fn for_each(
        self: &Arc<Self>,
        a: &Activity,
        fe: &ForEachDef,
        frame: &Arc<Frame>,
        mut t: Track,
    ) -> Result<(), Stop> {
        let (start, end, wanted, mut done, mut resumed) = match t.resume.take() {
            Some(Saved::Each {
                end,
                done,
                wanted,
                branches,
            }) => {
                let first = branches.first().map_or(end + 1, |(i, _)| *i);
                (first, end, wanted, done, Some(branches))
            }
            Some(_) => return Err(misfit(a)),
            None => {
                let start = self.counter_value(&fe.start, frame)?;
                let end = self.counter_value(&fe.end, frame)?;
                let wanted = match &fe.completion {
                    Some((e, _)) => {
                        let n = self.counter_value(e, frame)?;
                        if end >= start && n > end - start + 1 {
                            return Err(Fault::standard(
                                "invalidBranchCondition",
                                format!(
                                    "completion condition {n} exceeds the {} branches",
                                    end - start + 1
                                ),
                            )
                            .into());
                        }
                        Some(n)
                    }
                    None => None,
                };
                if end < start || wanted == Some(0) {
                    return Ok(());
                }
                if fe.parallel && end - start >= MAX_PARALLEL_BRANCHES {
                    return Err(Fault::busbar(
                        "tooManyBranches",
                        format!(
                            "a parallel forEach of {} branches (at most {MAX_PARALLEL_BRANCHES})",
                            end - start + 1
                        ),
                    )
                    .into());
                }
                (start, end, wanted, 0, None)
            }
        };
        let branch = |i: u64, cur: Option<Arc<Cur>>, resume: Option<Saved>| {
            let f = Frame::new(&fe.scope.frame, Some(frame.clone()), None);
            let (mut d, root) = Doc::with_root(Name::new("", "value"));
            d.append_text(root, &i.to_string());
            if let Ok(mut v) = f.vars.lock() {
                v[0] = Some(Arc::new(d));
            }
            let me = self.clone();
            async move { me.run_scope(a, &fe.scope, f, Track::at(cur, resume)).await }
        };
        if fe.parallel {
            let plan: Vec<(u64, Option<Saved>)> = match resumed.take() {
                Some(b) => b.into_iter().map(|(i, r)| (i, Some(r))).collect(),
                None => (start..=end).map(|i| (i, None)).collect(),
            };
            let curs: Vec<(u64, Option<Arc<Cur>>)> =
                plan.iter().map(|(i, _)| (*i, t.child())).collect();
            if let Some(c) = &t.cur {
                c.set(At::Each {
                    end,
                    done,
                    wanted,
                    branches: curs
                        .iter()
                        .filter_map(|(i, c)| c.clone().map(|c| (*i, c)))
                        .collect(),
                });
            }
            let _suspended = self.suspend();
            let mut set = FuturesUnordered::new();
            for ((i, resume), (_, cur)) in plan.into_iter().zip(curs) {
                if matches!(resume, Some(Saved::Done)) {
                    if let Some(c) = &cur {
                        c.set(At::Done);
                    }
                    continue;
                }
                let done_cur = cur.clone();
                set.push(self.strand(done_cur, branch(i, cur, resume)));
            }
            while let Some(r) = set.next().await {
                r?;
                done += 1;
                if let Some(c) = &t.cur {
                    c.with(|at| {
                        if let At::Each { done: d, .. } = at {
                            *d = done;
                        }
                    });
                }
                if wanted.is_some_and(|w| done >= w) {
                    return Ok(());
                }
            }
        } else {
            let mut resume = resumed.and_then(|mut b| b.pop()).map(|(_, r)| r);
            for i in start..=end {
                let child = t.child();
                if let (Some(c), Some(ch)) = (&t.cur, &child) {
                    c.set(At::Each {
                        end,
                        done,
                        wanted,
                        branches: vec![(i, ch.clone())],
                    });
                }
                branch(i, child, resume.take()).await?;
                done += 1;
                if wanted.is_some_and(|w| done >= w) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn counter_value(&self, e: &Expr, frame: &Arc<Frame>) -> Result<u64, Stop> {
        let n = self.eval(e, frame, None)?.to_number();
        if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n < 4.0e9) {
            return Err(Fault::standard(
                "invalidExpressionValue",
                format!("'{}' is not an unsigned integer", e.xpath.text()),
            )
            .into());
        }
        Ok(n as u64)
    }

    /// Waits for one of `defs` (or an alarm: index `defs.len() + i`).
    async fn receive(
        self: &Arc<Self>,
        defs: &[ReceiveDef],
        alarms: &[Duration],
        frame: &Arc<Frame>,
    ) -> Result<(usize, Option<Delivery>), Stop> {
        // The message that started the instance goes to the first creating receive.
        if defs.iter().any(|d| d.create_instance) {
            let first = self.first.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((pl, op, d)) = first {
                if let Some(i) = defs
                    .iter()
                    .position(|r| r.partner_link == pl && r.operation == op)
                {
                    return Ok((i, Some(d)));
                }
                if let Some(tx) = d.reply {
                    let _ = tx.send(Outcome::Fault(Fault::busbar(
                        "internal",
                        "start message not taken",
                    )));
                }
            }
        }
        let mut options = Vec::new();
        for d in defs {
            let mut keys = Vec::new();
            for c in &d.correlations {
                if let Some(v) = frame.corr(&c.set) {
                    if c.initiate != Initiate::Yes {
                        keys.push((c.set.id, v));
                    }
                }
            }
            options.push(WaitOption {
                partner_link: d.partner_link,
                operation: d.operation.clone(),
                message_type: d.message_type.clone(),
                keys,
            });
        }
        let process = self.process();
        let rx = {
            let mut router = self.live.router.lock().unwrap_or_else(|e| e.into_inner());
            let hit = router.mailbox.iter().enumerate().find_map(|(pi, p)| {
                if p.instance != self.id {
                    return None;
                }
                options
                    .iter()
                    .position(|o| {
                        o.partner_link == p.partner_link
                            && o.operation == p.operation
                            && keys_match(process, &o.keys, &o.message_type, &p.message)
                    })
                    .map(|oi| (pi, oi))
            });
            if let Some((pi, oi)) = hit {
                let p = router.mailbox.remove(pi);
                return Ok((
                    oi,
                    Some(Delivery {
                        message: p.message,
                        reply: p.reply,
                        sync: p.sync,
                    }),
                ));
            }
            let (tx, rx) = oneshot::channel();
            router.waiters.push(Waiter {
                instance: self.id,
                options,
                tx,
            });
            rx
        };
        self.park();
        let _parked = self.parked();
        if alarms.is_empty() {
            return match rx.await {
                Ok((i, d)) => Ok((i, Some(d))),
                Err(_) => {
                    self.unpark();
                    Err(Fault::busbar("internal", "receive abandoned").into())
                }
            };
        }
        let (ai, shortest) = alarms
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| **d)
            .map(|(i, d)| (i, *d))
            .unwrap_or((0, Duration::ZERO));
        let mut rx = rx;
        tokio::select! {
            r = &mut rx => match r {
                Ok((i, d)) => Ok((i, Some(d))),
                Err(_) => { self.unpark(); Err(Fault::busbar("internal", "pick abandoned").into()) }
            },
            _ = tokio::time::sleep(shortest) => {
                let mut router = self.live.router.lock().unwrap_or_else(|e| e.into_inner());
                router.waiters.retain(|w| w.instance != self.id);
                drop(router);
                // A message may have been handed over just before the alarm won.
                if let Ok((i, d)) = rx.try_recv() {
                    return Ok((i, Some(d)));
                }
                self.unpark();
                Ok((defs.len() + ai, None))
            }
        }
    }

    /// Takes a received message: the variable, correlations, the open exchange.
    fn accept(&self, r: &ReceiveDef, d: Option<Delivery>, frame: &Arc<Frame>) -> Result<(), Stop> {
        let Some(d) = d else { return Ok(()) };
        let process = self.process();
        let mut reply = d.reply;
        let fail = |reply: &mut Option<oneshot::Sender<Outcome>>, f: Fault| {
            if let Some(tx) = reply.take() {
                let _ = tx.send(Outcome::Fault(f.clone()));
            }
            Stop::Fault(f)
        };
        for c in &r.correlations {
            let vals = match message_props(
                process,
                &d.message,
                Some(&r.message_type),
                &c.set.properties,
            ) {
                Ok(v) => v,
                Err(f) => return Err(fail(&mut reply, f)),
            };
            match (frame.corr(&c.set), c.initiate) {
                (Some(_), Initiate::Yes) => {
                    return Err(fail(
                        &mut reply,
                        Fault::standard(
                            "correlationViolation",
                            format!("correlation set '{}' is already initiated", c.set.name),
                        ),
                    ))
                }
                (Some(have), _) if have != vals => {
                    return Err(fail(
                        &mut reply,
                        Fault::standard(
                            "correlationViolation",
                            format!(
                                "the message does not match correlation set '{}'",
                                c.set.name
                            ),
                        ),
                    ))
                }
                (Some(_), _) => {}
                (None, Initiate::No) => {
                    return Err(fail(
                        &mut reply,
                        Fault::standard(
                            "correlationViolation",
                            format!("correlation set '{}' is not initiated", c.set.name),
                        ),
                    ))
                }
                (None, _) => self.initiate(c, vals, frame),
            }
        }
        if let Some(v) = &r.variable {
            frame.set(v, d.message);
        }
        if !d.sync {
            if let Some(tx) = reply.take() {
                self.answer(tx, Outcome::Accepted);
            }
        }
        if let Some(tx) = reply {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if open.iter().any(|o| {
                o.partner_link == r.partner_link
                    && o.operation == r.operation
                    && o.message_exchange == r.message_exchange
            }) {
                let f = Fault::standard(
                    "conflictingRequest",
                    format!("a request for '{}' is already open", r.operation),
                );
                let _ = tx.send(Outcome::Fault(f.clone()));
                return Err(f.into());
            }
            open.push(OpenExchange {
                partner_link: r.partner_link,
                operation: r.operation.clone(),
                message_exchange: r.message_exchange.clone(),
                tx,
            });
        }
        Ok(())
    }

    fn initiate(&self, c: &CorrUse, vals: Vec<String>, frame: &Arc<Frame>) {
        frame.set_corr(&c.set, vals.clone());
        let key = (c.set.id, vals);
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(key.clone());
        let mut r = self.live.router.lock().unwrap_or_else(|e| e.into_inner());
        r.keys.insert(key, self.id);
    }

    async fn invoke(self: &Arc<Self>, inv: &InvokeDef, frame: &Arc<Frame>) -> Result<(), Stop> {
        let process = self.process();
        let input = match &inv.input {
            Some(v) => self.read_var(frame, v)?,
            None => Arc::new(Doc::with_root(Name::new("", "message")).0),
        };
        self.correlate_out(
            inv,
            &input,
            inv.input_type.as_ref(),
            frame,
            &[Pattern::Request, Pattern::RequestResponse],
        )?;
        let pl = &process.partner_links[inv.partner_link];
        let service = self
            .live
            .deployed
            .invokes
            .iter()
            .find(|(p, _)| *p == pl.name)
            .map(|(_, s)| s);
        let call = PartnerCall {
            process: &process.name,
            partner_link: &pl.name,
            service,
            port_type: &inv.port_type,
            operation: &inv.operation,
            message: input,
            one_way: inv.output.is_none(),
            defs: &process.defs,
        };
        let calling = self.calling();
        let reply = self.engine.inner.partners.invoke(call).await;
        drop(calling);
        let reply = reply.map_err(|e| {
            Fault::busbar(
                "invokeFailed",
                format!(
                    "invoke of '{}' on partner link '{}' failed: {e}",
                    inv.operation, pl.name
                ),
            )
        })?;
        match reply {
            PartnerReply::Output(m) => {
                if let Some(out) = &inv.output {
                    self.correlate_out(
                        inv,
                        &m,
                        inv.output_type.as_ref(),
                        frame,
                        &[Pattern::Response, Pattern::RequestResponse],
                    )?;
                    frame.set(out, m);
                }
                Ok(())
            }
            PartnerReply::Accepted => Ok(()),
            PartnerReply::Fault { name, message } => {
                let ns = inv.port_type.ns.clone();
                Err(Stop::Fault(Fault {
                    name: Name::new(ns, name.clone()),
                    data: message,
                    text: format!("partner '{}' answered fault '{name}'", pl.name),
                }))
            }
        }
    }

    fn correlate_out(
        &self,
        inv: &InvokeDef,
        msg: &Arc<Doc>,
        message_type: Option<&Name>,
        frame: &Arc<Frame>,
        patterns: &[Pattern],
    ) -> Result<(), Stop> {
        for c in &inv.correlations {
            if !c.pattern.is_some_and(|p| patterns.contains(&p)) {
                continue;
            }
            let vals = message_props(self.process(), msg, message_type, &c.set.properties)?;
            match frame.corr(&c.set) {
                Some(have) if c.initiate != Initiate::Yes => {
                    if have != vals {
                        return Err(Fault::standard(
                            "correlationViolation",
                            format!(
                                "the message does not match correlation set '{}'",
                                c.set.name
                            ),
                        )
                        .into());
                    }
                }
                Some(_) => {
                    return Err(Fault::standard(
                        "correlationViolation",
                        format!("correlation set '{}' is already initiated", c.set.name),
                    )
                    .into())
                }
                None if c.initiate == Initiate::No => {
                    return Err(Fault::standard(
                        "correlationViolation",
                        format!("correlation set '{}' is not initiated", c.set.name),
                    )
                    .into())
                }
                None => self.initiate(c, vals, frame),
            }
        }
        Ok(())
    }

    fn read_var(&self, frame: &Arc<Frame>, v: &VarRef) -> Result<Arc<Doc>, Stop> {
        frame.get(v).ok_or_else(|| {
            Fault::standard(
                "uninitializedVariable",
                format!("variable '{}' is read before it is set", v.name),
            )
            .into()
        })
    }

    fn eval(&self, e: &Expr, frame: &Arc<Frame>, node: Option<&NodeRef>) -> Result<Value, Stop> {
        let cx = EvalCx {
            inst: self,
            frame,
            expr: e,
        };
        e.xpath.eval(&cx, node).map_err(|err| match err {
            XPathError::Raised(name, text) => Stop::Fault(Fault {
                name,
                data: None,
                text,
            }),
            other => Stop::Fault(Fault::standard(
                "subLanguageExecutionFault",
                format!("line {}: {other}", e.line),
            )),
        })
    }

    /// The node `$var` or `$var.part` stands for.
    fn var_node(
        &self,
        frame: &Arc<Frame>,
        v: &VarRef,
        part: Option<&str>,
    ) -> Result<NodeRef, Stop> {
        let doc = self.read_var(frame, v)?;
        let root = doc.root_element().ok_or_else(|| {
            Stop::Fault(Fault::standard(
                "uninitializedVariable",
                format!("variable '{}' is empty", v.name),
            ))
        })?;
        match (&v.kind, part) {
            (VarKind::Message(m), Some(p)) => {
                let Some(pe) = doc.child(root, "", p) else {
                    return Err(Fault::standard(
                        "uninitializedVariable",
                        format!("part '{p}' of variable '{}' is not set", v.name),
                    )
                    .into());
                };
                Ok(part_node(&doc, pe, self.process(), Some(m), p))
            }
            _ => Ok(NodeRef { doc, id: root }),
        }
    }

    fn property(&self, frame: &Arc<Frame>, v: &VarRef, prop: &Name) -> Result<NodeRef, Stop> {
        let defs = &self.process().defs;
        let (alias, base) = match &v.kind {
            VarKind::Message(m) => {
                let a = defs.alias_for_message(prop, m).ok_or_else(|| {
                    Stop::Fault(Fault::standard(
                        "selectionFailure",
                        format!(
                            "no alias of property {} for message {}",
                            prop.clark(),
                            m.clark()
                        ),
                    ))
                })?;
                let base = self.var_node(frame, v, a.part.as_deref())?;
                (a, base)
            }
            VarKind::Element(e) => {
                let a = defs.alias_for_value(prop, Some(e), None).ok_or_else(|| {
                    Stop::Fault(Fault::standard(
                        "selectionFailure",
                        format!("no alias of property {}", prop.clark()),
                    ))
                })?;
                (a, self.var_node(frame, v, None)?)
            }
            VarKind::Type(t) => {
                let a = defs.alias_for_value(prop, None, Some(t)).ok_or_else(|| {
                    Stop::Fault(Fault::standard(
                        "selectionFailure",
                        format!("no alias of property {}", prop.clark()),
                    ))
                })?;
                (a, self.var_node(frame, v, None)?)
            }
        };
        let Some(q) = &alias.query else {
            return Ok(base);
        };
        match q.eval(&NoVars, Some(&base)) {
            Ok(Value::NodeSet(ns)) if ns.len() == 1 => Ok(ns[0].clone()),
            Ok(Value::NodeSet(ns)) => Err(Fault::standard(
                "selectionFailure",
                format!("property {} selected {} nodes", prop.clark(), ns.len()),
            )
            .into()),
            Ok(_) => Err(Fault::standard(
                "selectionFailure",
                "a property query must select a node",
            )
            .into()),
            Err(e) => Err(Fault::standard("selectionFailure", e.to_string()).into()),
        }
    }

    fn copy(&self, c: &Copy, frame: &Arc<Frame>) -> Result<(), Stop> {
        let src = match self.source(&c.from, frame) {
            Ok(Some(s)) => s,
            Ok(None) if c.ignore_missing_from_data => return Ok(()),
            Ok(None) => {
                return Err(Fault::standard(
                    "selectionFailure",
                    format!("line {}: <from> selected nothing", c.line),
                )
                .into())
            }
            Err(Stop::Fault(f))
                if c.ignore_missing_from_data
                    && f.name.ns == BPEL_NS
                    && (f.name.local == "selectionFailure"
                        || f.name.local == "uninitializedVariable") =>
            {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        match &c.to {
            To::Var { var, part, query } => {
                // Whole message to whole message.
                if part.is_none() && query.is_none() {
                    if let (VarKind::Message(_), Src::Message(d)) = (&var.kind, &src) {
                        frame.set(var, d.clone());
                        return Ok(());
                    }
                }
                // Nothing is written until everything is read, so a failing copy leaves the
                // variable as it was; an existing target is edited in place (no copy of the
                // document when nothing else holds it).
                let existing = frame.get(var);
                let found = existing
                    .as_ref()
                    .and_then(|d| self.find_target(d, var, part.as_deref()));
                let (mut doc, target) = match (existing, found) {
                    (Some(d), Some(t)) => (d, t),
                    (existing, _) => {
                        let mut d = existing
                            .map(|a| (*a).clone())
                            .unwrap_or_else(|| self.fresh(var));
                        let t = self.ensure_target(&mut d, var, part.as_deref(), &src);
                        (Arc::new(d), t)
                    }
                };
                let target = match query {
                    Some(q) => {
                        let base = NodeRef {
                            doc: doc.clone(),
                            id: target,
                        };
                        let v = self.eval(q, frame, Some(&base))?;
                        drop(base);
                        single_node(v, &doc, c.line)?
                    }
                    None => target,
                };
                check_depth(&doc, target, &src)?;
                drop(frame.take(var));
                apply(
                    Arc::make_mut(&mut doc),
                    target,
                    &src,
                    c.keep_src_element_name,
                );
                frame.set(var, doc);
                Ok(())
            }
            To::Property { var, property } => {
                let node = self.property(frame, var, property)?;
                let id = node.id;
                drop(node);
                let mut doc = self.read_var(frame, var)?;
                let text = Src::Text(src.text());
                check_depth(&doc, id, &text)?;
                apply(Arc::make_mut(&mut doc), id, &text, false);
                frame.set(var, doc);
                Ok(())
            }
            To::Expr(e) => {
                let v = self.eval(e, frame, None)?;
                let Value::NodeSet(ns) = v else {
                    return Err(
                        Fault::standard("selectionFailure", "<to> did not select a node").into(),
                    );
                };
                if ns.len() != 1 {
                    return Err(Fault::standard(
                        "selectionFailure",
                        format!(
                            "line {}: <to> selected {} nodes instead of one",
                            c.line,
                            ns.len()
                        ),
                    )
                    .into());
                }
                let node = &ns[0];
                // Which variable holds the node's document?
                let owner = e
                    .vars
                    .iter()
                    .find(|(_, r, _)| frame.get(r).is_some_and(|d| Arc::ptr_eq(&d, &node.doc)));
                let Some((_, r, _)) = owner else {
                    return Err(Fault::standard(
                        "selectionFailure",
                        "<to> must select a node of a variable",
                    )
                    .into());
                };
                let r = r.clone();
                let id = node.id;
                drop(ns);
                let mut doc = self.read_var(frame, &r)?;
                check_depth(&doc, id, &src)?;
                apply(Arc::make_mut(&mut doc), id, &src, c.keep_src_element_name);
                frame.set(&r, doc);
                Ok(())
            }
        }
    }

    /// An empty value for a variable about to be written.
    fn fresh(&self, v: &VarRef) -> Doc {
        match &v.kind {
            VarKind::Message(_) => Doc::with_root(Name::new("", "message")).0,
            VarKind::Element(e) => Doc::with_root(e.clone()).0,
            VarKind::Type(_) => Doc::with_root(Name::new("", "value")).0,
        }
    }

    /// The node a `to variable [part]` writes to, created when missing.
    /// The existing node a `to variable [part]` writes to, if there is one.
    fn find_target(&self, d: &Doc, v: &VarRef, part: Option<&str>) -> Option<NodeId> {
        let root = d.root_element()?;
        let (VarKind::Message(m), Some(p)) = (&v.kind, part) else {
            return Some(root);
        };
        let pe = d.child(root, "", p)?;
        let element_part = self
            .process()
            .defs
            .message(m)
            .and_then(|m| m.part(p))
            .is_some_and(|x| x.element.is_some());
        if element_part {
            d.child_elements(pe).next()
        } else {
            Some(pe)
        }
    }

    /// The node a `to variable [part]` writes to, created when missing.
    fn ensure_target(&self, d: &mut Doc, v: &VarRef, part: Option<&str>, src: &Src) -> NodeId {
        let root = match d.root_element() {
            Some(r) => r,
            None => {
                *d = self.fresh(v);
                d.root_element().unwrap_or(NodeId::ROOT)
            }
        };
        let (VarKind::Message(m), Some(p)) = (&v.kind, part) else {
            return root;
        };
        let pe = match d.child(root, "", p) {
            Some(x) => x,
            None => d.append_element(root, Name::new("", p)),
        };
        let def = self
            .process()
            .defs
            .message(m)
            .and_then(|m| m.part(p))
            .cloned();
        if let Some(el) = def.and_then(|x| x.element) {
            if let Some(inner) = d.child_elements(pe).next() {
                return inner;
            }
            // A missing element part is created with the source's name when it has one.
            let name = match src {
                Src::Node(n) if n.doc.is_element(n.id) => n.doc.name(n.id).cloned().unwrap_or(el),
                _ => el,
            };
            return d.append_element(pe, name);
        }
        pe
    }

    fn source(&self, f: &From, frame: &Arc<Frame>) -> Result<Option<Src>, Stop> {
        match f {
            From::Literal(doc) => {
                let holder = doc
                    .root_element()
                    .ok_or_else(|| Fault::busbar("internal", "empty literal"))?;
                let elems: Vec<NodeId> = doc.child_elements(holder).collect();
                if elems.len() == 1 {
                    return Ok(Some(Src::Node(NodeRef {
                        doc: doc.clone(),
                        id: elems[0],
                    })));
                }
                Ok(Some(Src::Text(doc.string_value(holder))))
            }
            From::Var { var, part, query } => {
                if part.is_none() && query.is_none() {
                    if let VarKind::Message(_) = var.kind {
                        return Ok(Some(Src::Message(self.read_var(frame, var)?)));
                    }
                }
                let base = self.var_node(frame, var, part.as_deref())?;
                match query {
                    None => Ok(Some(Src::Node(base))),
                    Some(q) => {
                        let v = self.eval(q, frame, Some(&base))?;
                        value_source(v)
                    }
                }
            }
            From::Property { var, property } => {
                let n = self.property(frame, var, property)?;
                Ok(Some(Src::Text(n.doc.string_value(n.id))))
            }
            From::Expr(e) => value_source(self.eval(e, frame, None)?),
        }
    }
}

/// What a copy copies.
enum Src {
    Node(NodeRef),
    Text(String),
    Message(Arc<Doc>),
}

impl Src {
    fn text(&self) -> String {
        match self {
            Src::Node(n) => n.doc.string_value(n.id),
            Src::Text(t) => t.clone(),
            Src::Message(d) => d.string_value(NodeId::ROOT),
        }
    }
}

fn value_source(v: Value) -> Result<Option<Src>, Stop> {
    match v {
        Value::NodeSet(mut ns) => match ns.len() {
            0 => Ok(None),
            1 => Ok(ns.pop().map(Src::Node)),
            n => Err(Fault::standard(
                "selectionFailure",
                format!("<from> selected {n} nodes instead of one"),
            )
            .into()),
        },
        other => Ok(Some(Src::Text(other.to_string_value()))),
    }
}

fn single_node(v: Value, doc: &Arc<Doc>, line: u32) -> Result<NodeId, Stop> {
    match v {
        Value::NodeSet(ns) if ns.len() == 1 && Arc::ptr_eq(&ns[0].doc, doc) => Ok(ns[0].id),
        Value::NodeSet(ns) => Err(Fault::standard(
            "selectionFailure",
            format!(
                "line {line}: <to> query selected {} nodes instead of one",
                ns.len()
            ),
        )
        .into()),
        _ => Err(Fault::standard("selectionFailure", "<to> query must select a node").into()),
    }
}

/// Most a variable's value may weigh (text and attribute bytes plus 64 per node): a loop that
/// doubles a value stops here instead of exhausting memory.
pub const MAX_VALUE_WEIGHT: usize = 64 << 20;

/// Refuses a copy that would nest elements deeper than a parsed document may (documents stay
/// within [`crate::xml::MAX_DEPTH`], so nothing that walks them can run out of stack) or make
/// the variable weigh more than [`MAX_VALUE_WEIGHT`].
fn check_depth(d: &Doc, target: NodeId, src: &Src) -> Result<(), Stop> {
    let (height, added) = match src {
        Src::Node(n) => n.doc.measure(n.id),
        Src::Message(m) => m.measure(NodeId::ROOT),
        Src::Text(t) => (0, t.len()),
    };
    if d.depth(target) + height > crate::xml::MAX_DEPTH {
        return Err(Fault::busbar(
            "documentTooDeep",
            format!(
                "the copy would nest elements deeper than {} levels",
                crate::xml::MAX_DEPTH
            ),
        )
        .into());
    }
    if added > MAX_VALUE_WEIGHT
        || d.measure(NodeId::ROOT).1.saturating_add(added) > MAX_VALUE_WEIGHT
    {
        return Err(Fault::busbar(
            "valueTooLarge",
            format!(
                "the copy would make the variable larger than {} MiB",
                MAX_VALUE_WEIGHT >> 20
            ),
        )
        .into());
    }
    Ok(())
}

/// The WS-BPEL replacement rules: an element target takes the source element's content
/// (or the element itself with keepSrcElementName), anything else the source's string value.
fn apply(d: &mut Doc, target: NodeId, src: &Src, keep_name: bool) {
    match src {
        Src::Node(n) if d.is_element(target) && n.doc.is_element(n.id) => {
            if keep_name {
                d.replace_node(target, &n.doc, n.id);
            } else {
                d.replace_content(target, &n.doc, n.id);
            }
        }
        Src::Message(m) if d.is_element(target) => {
            if let Some(r) = m.root_element() {
                d.replace_content(target, m, r);
            }
        }
        _ => d.set_string(target, &src.text()),
    }
}

/// Whether fault data fits a catch's variable.
fn data_fits(kind: &VarKind, d: &Doc) -> bool {
    match kind {
        VarKind::Message(_) => d
            .root_element()
            .and_then(|r| d.name(r))
            .is_some_and(|n| n.is("", "message")),
        VarKind::Element(e) => d
            .root_element()
            .and_then(|r| d.name(r))
            .is_some_and(|n| n.is(&e.ns, &e.local)),
        VarKind::Type(_) => true,
    }
}

/// The variables an assign's copies write.
fn written(copies: &[Copy]) -> impl Iterator<Item = &VarRef> {
    copies.iter().flat_map(|c| -> Vec<&VarRef> {
        match &c.to {
            To::Var { var, .. } | To::Property { var, .. } => vec![var],
            To::Expr(e) => e.vars.iter().map(|(_, r, _)| r).collect(),
        }
    })
}

struct EvalCx<'a> {
    inst: &'a Instance,
    frame: &'a Arc<Frame>,
    expr: &'a Expr,
}

impl Context for EvalCx<'_> {
    fn variable(&self, name: &str) -> Result<Value, XPathError> {
        let Some((_, r, part)) = self.expr.vars.iter().find(|(n, _, _)| n == name) else {
            return Err(XPathError::Type(format!("unknown variable ${name}")));
        };
        let node = match self.inst.var_node(self.frame, r, part.as_deref()) {
            Ok(n) => n,
            Err(Stop::Fault(f)) => return Err(XPathError::Raised(f.name, f.text)),
            Err(Stop::Exit) => return Err(XPathError::Type("exit".into())),
        };
        // A variable of a simple schema type is its typed value, as XPath 2.0 sees it.
        if let VarKind::Type(t) = &r.kind {
            if t.ns == XSD_NS {
                let text = node.doc.string_value(node.id);
                return Ok(typed_value(&t.local, text));
            }
        }
        Ok(Value::NodeSet(vec![node]))
    }

    fn function(&self, name: &Name, args: Vec<Value>) -> Result<Value, XPathError> {
        let fail = |f: Fault| XPathError::Raised(f.name, f.text);
        let var_name = args
            .first()
            .map(|a| a.to_string_value())
            .unwrap_or_default();
        let r = self
            .expr
            .vars
            .iter()
            .find(|(_, r, _)| r.name == var_name)
            .map(|(_, r, _)| r.clone())
            .or_else(|| self.expr_scope_var(&var_name))
            .ok_or_else(|| {
                XPathError::Type(format!("{}: unknown variable '{var_name}'", name.local))
            })?;
        match name.local.as_str() {
            "getVariableProperty" => {
                let pname = args.get(1).map(|a| a.to_string_value()).unwrap_or_default();
                let prop = self.resolve_property(&pname).ok_or_else(|| {
                    XPathError::Type(format!("getVariableProperty: unknown property '{pname}'"))
                })?;
                match self.inst.property(self.frame, &r, &prop) {
                    Ok(n) => Ok(Value::NodeSet(vec![n])),
                    Err(Stop::Fault(f)) => Err(fail(f)),
                    Err(Stop::Exit) => Err(XPathError::Type("exit".into())),
                }
            }
            _ => {
                let part = args.get(1).map(|a| a.to_string_value());
                match self.inst.var_node(self.frame, &r, part.as_deref()) {
                    Ok(n) => Ok(Value::NodeSet(vec![n])),
                    Err(Stop::Fault(f)) => Err(fail(f)),
                    Err(Stop::Exit) => Err(XPathError::Type("exit".into())),
                }
            }
        }
    }
}

impl EvalCx<'_> {
    fn expr_scope_var(&self, name: &str) -> Option<VarRef> {
        // Variables named only in a string argument: look through the frames' declarations.
        let root = &self.inst.process().root;
        root.frame
            .vars
            .iter()
            .position(|v| v.name == name)
            .map(|i| {
                let mut hops = 0u16;
                let mut f = Some(self.frame.clone());
                while let Some(x) = f {
                    if x.parent.is_none() {
                        break;
                    }
                    hops += 1;
                    f = x.parent.clone();
                }
                VarRef {
                    name: name.to_string(),
                    hops,
                    index: i as u16,
                    kind: root.frame.vars[i].kind.clone(),
                }
            })
    }

    fn resolve_property(&self, text: &str) -> Option<Name> {
        let (p, l) = text.trim().split_once(':')?;
        self.inst
            .process()
            .defs
            .properties
            .keys()
            .find(|k| k.local == l && self.expr.ns_for(p).is_some_and(|ns| ns == k.ns))
            .cloned()
    }
}

/// The value of a simple-typed variable: booleans and numbers typed, anything else a string.
fn typed_value(type_local: &str, text: String) -> Value {
    match type_local {
        "boolean" => Value::Boolean(matches!(text.trim(), "true" | "1")),
        "double" | "float" | "decimal" | "integer" | "int" | "long" | "short" | "byte"
        | "unsignedInt" | "unsignedLong" | "unsignedShort" | "unsignedByte"
        | "nonNegativeInteger" | "positiveInteger" | "negativeInteger" | "nonPositiveInteger" => {
            Value::Number(crate::xpath::parse_number(text.trim()))
        }
        _ => Value::String(text),
    }
}
