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
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::oneshot;

use crate::deploy::ServiceRef;
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
#[derive(Clone, Debug)]
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

struct Live {
    process: Arc<Process>,
    deployed: crate::deploy::DeployedProcess,
    dir: std::path::PathBuf,
    router: Mutex<Router>,
    instances: Mutex<HashMap<u64, (Instant, tokio::task::AbortHandle)>>,
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
            }),
        }
    }

    /// Adds deployed processes.
    pub fn add(&self, deployed: Vec<Deployed>) {
        let mut ps = self
            .inner
            .processes
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for d in deployed {
            ps.push(Arc::new(Live {
                process: d.process,
                deployed: d.descriptor,
                dir: d.dir,
                router: Mutex::new(Router::default()),
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
                for (id, (t, _)) in m.iter() {
                    out.push(InstanceInfo {
                        id: *id,
                        process: l.process.name.clone(),
                        age: t.elapsed(),
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
            let h = l.instances.lock().ok().and_then(|mut m| m.remove(&id));
            if let Some((_, h)) = h {
                h.abort();
                self.inner.alive.fetch_sub(1, Ordering::Relaxed);
                l.alive.fetch_sub(1, Ordering::Relaxed);
                let mut r = l.router.lock().unwrap_or_else(|e| e.into_inner());
                r.waiters.retain(|w| w.instance != id);
                r.keys.retain(|_, v| *v != id);
                r.mailbox.retain(|p| p.instance != id);
                l.faulted.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
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
        let outcome = match self.provider(service) {
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
        let inst = Arc::new(Instance {
            id,
            engine: self.clone(),
            live: live.clone(),
            first: Mutex::new(Some((pl, operation, first))),
            open: Mutex::new(Vec::new()),
            keys: Mutex::new(Vec::new()),
        });
        self.inner.alive.fetch_add(1, Ordering::Relaxed);
        live.alive.fetch_add(1, Ordering::Relaxed);
        self.inner.busy.fetch_add(1, Ordering::SeqCst);
        live.started.fetch_add(1, Ordering::Relaxed);
        let ttl = self.inner.limits.instance_ttl;
        // The entry is made before the task can finish, under the same lock it removes with.
        let mut map = live.instances.lock().unwrap_or_else(|e| e.into_inner());
        let task = {
            let inst = inst.clone();
            tokio::spawn(async move {
                let outcome = match tokio::time::timeout(ttl, inst.run_process()).await {
                    Ok(r) => r,
                    Err(_) => Err(Stop::Fault(Fault::busbar(
                        "instanceExpired",
                        format!("the instance ran longer than {ttl:?}"),
                    ))),
                };
                inst.finish(outcome);
            })
        };
        map.insert(id, (Instant::now(), task.abort_handle()));
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

impl Frame {
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
}

impl Instance {
    fn process(&self) -> &Process {
        &self.live.process
    }

    async fn run_process(self: &Arc<Self>) -> Result<(), Stop> {
        let root = &self.live.process.root;
        let frame = Frame::new(&root.frame, None, None);
        self.run_scope(root, frame).await
    }

    fn finish(&self, outcome: Result<(), Stop>) {
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
            let _ = o.tx.send(Outcome::Fault(f));
        }
    }

    fn run<'a>(
        self: &'a Arc<Self>,
        a: &'a Activity,
        frame: &'a Arc<Frame>,
    ) -> BoxFuture<'a, Result<(), Stop>> {
        Box::pin(async move {
            match &a.act {
                Act::Empty => Ok(()),
                Act::Sequence(v) => {
                    for x in v {
                        self.run(x, frame).await?;
                    }
                    Ok(())
                }
                Act::Flow(v) => {
                    let mut set: FuturesUnordered<_> =
                        v.iter().map(|x| self.run(x, frame)).collect();
                    while let Some(r) = set.next().await {
                        r?;
                    }
                    Ok(())
                }
                Act::Receive(r) => {
                    let (_, d) = self.receive(std::slice::from_ref(&**r), &[], frame).await?;
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
                    let _ = o.tx.send(outcome);
                    Ok(())
                }
                Act::Invoke(inv) => self.invoke(inv, frame).await,
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
                    for (c, act) in branches {
                        if self.eval(c, frame, None)?.to_bool() {
                            return self.run(act, frame).await;
                        }
                    }
                    match otherwise {
                        Some(o) => self.run(o, frame).await,
                        None => Ok(()),
                    }
                }
                Act::While(c, body) => {
                    while self.eval(c, frame, None)?.to_bool() {
                        self.run(body, frame).await?;
                        tokio::task::yield_now().await;
                    }
                    Ok(())
                }
                Act::RepeatUntil(body, c) => loop {
                    self.run(body, frame).await?;
                    if self.eval(c, frame, None)?.to_bool() {
                        return Ok(());
                    }
                    tokio::task::yield_now().await;
                },
                Act::ForEach(fe) => self.for_each(fe, frame).await,
                Act::Scope(s) => {
                    let f = Frame::new(&s.frame, Some(frame.clone()), None);
                    self.run_scope(s, f).await
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
                Act::Wait(t) => {
                    let d = self.timer(t, frame)?;
                    self.park();
                    tokio::time::sleep(d).await;
                    self.unpark();
                    Ok(())
                }
                Act::Pick(p) => {
                    let defs: Vec<ReceiveDef> =
                        p.on_message.iter().map(|(r, _)| r.clone()).collect();
                    let mut alarms = Vec::new();
                    for (t, _) in &p.on_alarm {
                        alarms.push(self.timer(t, frame)?);
                    }
                    let (i, d) = self.receive(&defs, &alarms, frame).await?;
                    if i >= defs.len() {
                        return self.run(&p.on_alarm[i - defs.len()].1, frame).await;
                    }
                    let d =
                        d.ok_or_else(|| Fault::busbar("internal", "pick woke without a message"))?;
                    self.accept(&defs[i], Some(d), frame)?;
                    self.run(&p.on_message[i].1, frame).await
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

    async fn run_scope(self: &Arc<Self>, s: &ScopeDef, frame: Arc<Frame>) -> Result<(), Stop> {
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
        let r = self.run(&s.activity, &frame).await;
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
            return self.run(&c.activity, &f).await;
        }
        if let Some(all) = &h.catch_all {
            let f = Frame::new(
                &FrameDef::default(),
                Some(frame.clone()),
                Some(fault.clone()),
            );
            return self.run(all, &f).await;
        }
        Err(Stop::Fault(fault))
    }

    async fn for_each(self: &Arc<Self>, fe: &ForEachDef, frame: &Arc<Frame>) -> Result<(), Stop> {
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
        let branch = |i: u64| {
            let f = Frame::new(&fe.scope.frame, Some(frame.clone()), None);
            let (mut d, root) = Doc::with_root(Name::new("", "value"));
            d.append_text(root, &i.to_string());
            if let Ok(mut v) = f.vars.lock() {
                v[0] = Some(Arc::new(d));
            }
            let me = self.clone();
            async move { me.run_scope(&fe.scope, f).await }
        };
        let mut done = 0u64;
        if fe.parallel {
            let mut set: FuturesUnordered<_> = (start..=end).map(branch).collect();
            while let Some(r) = set.next().await {
                r?;
                done += 1;
                if wanted.is_some_and(|w| done >= w) {
                    return Ok(());
                }
            }
        } else {
            for i in start..=end {
                branch(i).await?;
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
                let _ = tx.send(Outcome::Accepted);
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
        let reply = self.engine.inner.partners.invoke(call).await.map_err(|e| {
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
