//! Building, serving, reloading and stopping the engine.
//!
//! [`Engine::build`] checks and builds a config; [`Engine::bind`] binds its addresses;
//! [`Engine::serve`] serves already-bound sockets until a shutdown signal (tests bind port 0
//! themselves); [`Engine::start`] does all three for a config file, as `busbar run` does.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use busbar_config::{ConfigError, ConfigErrors, LoadedConfig, Workers};
use busbar_core::metrics::Registry;
use http::HeaderValue;
use tokio::sync::watch;

use crate::access_log::AccessLog;
use crate::admin::AdminHandler;
use crate::echo::{EchoHandler, EchoOptions};
use crate::otlp::Exporter;
use crate::proxy::ProxyHandler;
use crate::runtime::Runtime;
use crate::serve::{spawn_workers, spread, ConnSettings, Job};

/// State shared by every worker: the current runtime and the metrics.
#[derive(Debug)]
pub struct Shared {
    /// The runtime serving new requests; swapped whole on reload.
    pub runtime: ArcSwap<Runtime>,
    /// Metrics of the process.
    pub metrics: Arc<Registry>,
    /// True once shutdown started (readiness turns false).
    pub draining: AtomicBool,
    /// The access log, when the config has one.
    pub access_log: arc_swap::ArcSwapOption<AccessLog>,
    /// The span exporter, when the config has `tracing.otlp`.
    pub exporter: arc_swap::ArcSwapOption<Exporter>,
}

/// Starts the span exporter of `loaded`, if it has one.
fn start_exporter(
    loaded: &LoadedConfig,
    metrics: &Arc<Registry>,
) -> Result<Option<Arc<Exporter>>, ConfigErrors> {
    let tracing = &loaded.config.tracing;
    let Some(otlp) = &tracing.otlp else {
        return Ok(None);
    };
    Exporter::start(tracing, otlp, metrics.clone())
        .map(|e| Some(Arc::new(e)))
        .map_err(|e| ConfigErrors(vec![loaded.error(None, "tracing.otlp", e)]))
}

/// Starts the access log of `loaded`, if it has one.
fn start_access_log(
    loaded: &LoadedConfig,
    metrics: &Arc<Registry>,
) -> Result<Option<Arc<AccessLog>>, ConfigErrors> {
    let Some(config) = &loaded.config.access_log else {
        return Ok(None);
    };
    AccessLog::start(config, &loaded.base_dir, metrics.clone())
        .map(|log| Some(Arc::new(log)))
        .map_err(|e| {
            ConfigErrors(vec![loaded.error(
                None,
                "access_log.path",
                format!("cannot open the access log: {e}"),
            )])
        })
}

/// A built engine, not serving yet.
#[derive(Debug)]
pub struct Engine {
    loaded: LoadedConfig,
    shared: Arc<Shared>,
    workers: usize,
}

/// Sockets to serve, already bound (and listening), by what they serve.
#[derive(Debug, Default)]
pub struct Listeners {
    /// Client listeners by their config name. With fewer sockets than workers, the workers
    /// share clones of them; [`Engine::bind`] gives one `SO_REUSEPORT` socket per worker.
    /// A configured listener missing here is not served.
    pub listeners: BTreeMap<String, Vec<StdListener>>,
    /// The admin listener.
    pub admin: Option<StdListener>,
    /// The embedded echo back end (`echo:`).
    pub echo: Vec<StdListener>,
    /// The named echo back ends (`echoes:`), by name.
    pub echoes: BTreeMap<String, Vec<StdListener>>,
}

/// A started engine: its addresses, and the handles to reload and stop it.
#[derive(Debug)]
pub struct RunningEngine {
    /// Bound address of each listener, by name.
    pub listeners: BTreeMap<String, SocketAddr>,
    /// Bound address of the admin listener.
    pub admin: Option<SocketAddr>,
    /// Bound address of the embedded echo back end.
    pub echo: Option<SocketAddr>,
    /// Bound address of each named echo back end.
    pub echoes: BTreeMap<String, SocketAddr>,
    /// Worker threads serving traffic.
    pub workers: usize,
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
    /// The admin listener's thread, stopped only once the workers' drain is over, so
    /// `/readyz` answers `draining` and `/metrics` can be read all through it.
    admin_threads: Vec<JoinHandle<()>>,
    admin_stop: watch::Sender<bool>,
    drain: Duration,
}

/// Time the admin allows for a request head (from the connection's start or the end of the
/// previous request): an idle or slow connection is closed after it.
const ADMIN_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after the drain timeout [`RunningEngine::wait`] still waits for the threads to
/// close their connections and end.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The longest a shutdown waits for the access log's last lines to be written.
const ACCESS_LOG_FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// How long a reload waits for the new runtime's PostgreSQL databases to connect before it
/// swaps the runtimes anyway (a database that is down must not stop a config from changing).
const DATABASE_START_WAIT: Duration = Duration::from_secs(5);

/// What reload and shutdown need, shared with the admin listener.
#[derive(Debug)]
pub struct Control {
    /// Engine state shared with the workers.
    pub shared: Arc<Shared>,
    file: PathBuf,
    workers: usize,
    reload_lock: Mutex<()>,
    shutdown: watch::Sender<bool>,
    stopped: AtomicBool,
    /// When shutdown started; [`RunningEngine::wait`] waits on it.
    stopping: Mutex<Option<Instant>>,
    stopping_cv: Condvar,
    /// The first worker's runtime: where durable instances are resumed and kept.
    first_worker: std::sync::OnceLock<tokio::runtime::Handle>,
    /// Applies a new `log.level`, when the process's logging can change it live.
    log_level: std::sync::OnceLock<LogLevelSetter>,
    /// Why the engine stopped on its own, when it did ([`Control::fail`]).
    failure: std::sync::OnceLock<String>,
}

/// Sets the process's log filter to a checked `log.level`, or says why it could not.
pub type SetLogLevel = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// A [`SetLogLevel`] that [`Control`] keeps.
pub struct LogLevelSetter(pub Box<SetLogLevel>);

impl std::fmt::Debug for LogLevelSetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogLevelSetter")
    }
}

/// Takes up the durable instances of `engine`'s processes (`own`: those this node ran
/// before a restart as well) and starts its heartbeat, take-over and clean-up. Fails when
/// another running busbar process uses this node's name on a store: then nothing is taken up.
async fn keep_durable(engine: busbar_flow::Engine, own: bool) -> Result<(), String> {
    if engine.persistence().is_empty() {
        return Ok(());
    }
    // The database may not be reachable yet (PostgreSQL connects in the background).
    let mut tries = 0u32;
    loop {
        match engine.recover(own).await {
            Ok(0) => break,
            Ok(n) => {
                tracing::info!("resumed {n} durable process instances");
                break;
            }
            Err(busbar_flow::runtime::RecoverError::NodeTaken(e)) => return Err(e),
            Err(e) => {
                if tries.is_multiple_of(20) {
                    tracing::warn!("cannot resume durable process instances yet: {e}");
                }
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
    engine.maintain();
    Ok(())
}

/// Takes the stores of durable processes that allow one node only (a SQLite file) for this
/// process: a second busbar on the same file is refused here, before it serves. Not done
/// by `busbar validate`, which may check the config of a running node.
fn hold_stores(loaded: &LoadedConfig, runtime: &Runtime) -> Result<(), ConfigErrors> {
    let Some(p) = &runtime.processes else {
        return Ok(());
    };
    let errors: Vec<_> = p
        .engine
        .persistence()
        .iter()
        .filter_map(|s| s.store.hold().err())
        .map(|e| loaded.error(None, "processes", e))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

fn workers_of(cfg: &busbar_config::Config) -> usize {
    match cfg.workers {
        Workers::Count(n) => n,
        Workers::Auto => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Loads and builds `file` without serving: what `busbar validate` runs.
pub fn check(file: &Path) -> Result<Runtime, ConfigErrors> {
    let mut attempt = busbar_config::load_attempt(file);
    let Some(loaded) = &attempt.loaded else {
        return Err(ConfigErrors(attempt.errors));
    };
    let workers = workers_of(&loaded.config);
    // A config with problems is still compiled, as far as it goes: a bad XPath, jq program or
    // stylesheet is reported in the same run as a misspelt key elsewhere. Not one whose
    // sequences run themselves or nest too deep: its problems are known, and compiling it is
    // what they make go wrong.
    if !attempt.errors.is_empty() && !busbar_config::nesting::check(loaded).is_empty() {
        return Err(ConfigErrors(attempt.errors));
    }
    match Runtime::build(loaded, &Registry::default(), workers) {
        Ok(rt) if attempt.errors.is_empty() => Ok(rt),
        Ok(_) => Err(ConfigErrors(attempt.errors)),
        Err(later) => {
            attempt.add_later(later);
            Err(ConfigErrors(attempt.errors))
        }
    }
}

/// Whether two config sections say the same (rendered as `/config` shows them).
fn same<T: serde::Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

fn addr(loaded: &LoadedConfig, path: &str, text: &str) -> Result<SocketAddr, ConfigErrors> {
    text.parse().map_err(|e| {
        ConfigErrors(vec![loaded.error(
            None,
            path,
            format!("invalid address '{text}': {e}"),
        )])
    })
}

fn bind_error(loaded: &LoadedConfig, path: &str, a: SocketAddr, e: std::io::Error) -> ConfigErrors {
    let msg = if e.kind() == std::io::ErrorKind::AddrInUse {
        format!("cannot listen on {a}: address already in use (by another process?)")
    } else {
        format!("cannot listen on {a}: {e}")
    };
    ConfigErrors(vec![loaded.error(None, path, msg)])
}

fn local_addr(sockets: &[StdListener]) -> Option<SocketAddr> {
    sockets.first().and_then(|s| s.local_addr().ok())
}

/// The echo options of `echo:` or of `echoes.NAME` (`key`), which names itself by default.
fn echo_options(
    loaded: &LoadedConfig,
    e: &busbar_config::EchoConfig,
    key: Option<&str>,
    at: &str,
) -> Result<EchoOptions, ConfigErrors> {
    let json = match (
        e.json.as_deref().filter(|j| !j.is_empty()),
        e.json_file.as_deref().filter(|f| !f.is_empty()),
    ) {
        (Some(text), _) => Some(bytes::Bytes::from(text.to_owned())),
        (None, Some(file)) => {
            let path = loaded.resolve(file);
            let bytes = busbar_core::file::read(&path).map_err(|err| {
                ConfigErrors(vec![loaded.error(
                    None,
                    format!("{at}.json_file"),
                    format!("cannot read {}: {err}", path.display()),
                )])
            })?;
            Some(bytes::Bytes::from(bytes))
        }
        (None, None) => None,
    };
    Ok(EchoOptions {
        delay: e.delay.map(|d| d.0).filter(|d| !d.is_zero()),
        // Validation checked that names are header values.
        name: e
            .name
            .as_deref()
            .or(key)
            .and_then(|n| HeaderValue::from_str(n).ok()),
        json,
        catalog: e.catalog,
        buffer: e.buffer,
    })
}

impl Engine {
    /// Loads `file`, binds every listener and starts serving on worker threads.
    pub fn start(file: &Path) -> Result<RunningEngine, ConfigErrors> {
        let mut attempt = busbar_config::load_attempt(file);
        let loaded = match attempt.loaded.take() {
            Some(loaded) if attempt.errors.is_empty() => loaded,
            _ => return Err(ConfigErrors(attempt.errors)),
        };
        let engine = Engine::build(loaded).map_err(|e| {
            // Each with its line in the file.
            attempt.add_later(e.0);
            ConfigErrors(std::mem::take(&mut attempt.errors))
        })?;
        let listeners = engine.bind()?;
        let loaded = engine.loaded.clone();
        engine
            .serve(listeners, std::future::pending())
            .map_err(|e| {
                ConfigErrors(vec![loaded.error(
                    None,
                    "workers",
                    format!("cannot start worker threads: {e}"),
                )])
            })
    }

    /// Validates and builds `loaded` (compiling every expression, loading every key): every
    /// problem at once.
    pub fn build(loaded: LoadedConfig) -> Result<Engine, ConfigErrors> {
        let errors = busbar_config::validate(&loaded);
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let workers = workers_of(&loaded.config);
        let metrics = Arc::new(Registry::default());
        metrics
            .bodies
            .set_limit(loaded.config.max_buffered_bodies.0);
        let runtime = Runtime::build(&loaded, &metrics, workers).map_err(ConfigErrors)?;
        hold_stores(&loaded, &runtime)?;
        let access_log = start_access_log(&loaded, &metrics)?;
        let exporter = start_exporter(&loaded, &metrics)?;
        let shared = Arc::new(Shared {
            runtime: ArcSwap::from_pointee(runtime),
            metrics,
            draining: AtomicBool::new(false),
            access_log: arc_swap::ArcSwapOption::new(access_log),
            exporter: arc_swap::ArcSwapOption::new(exporter),
        });
        Ok(Engine {
            loaded,
            shared,
            workers,
        })
    }

    /// The worker threads this engine runs.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Binds every address of the config: one `SO_REUSEPORT` socket per worker for the
    /// listeners and echo back ends, one for the admin. A port another socket listens on fails
    /// here ("address already in use"), before any thread starts, unless the listener sets
    /// `reuse_port`.
    pub fn bind(&self) -> Result<Listeners, ConfigErrors> {
        let loaded = &self.loaded;
        let cfg = &loaded.config;
        let workers = self.workers;
        let group =
            |path: &str, text: &str, shared: bool| -> Result<Vec<StdListener>, ConfigErrors> {
                let a = addr(loaded, path, text)?;
                crate::net::bind_group(a, workers, shared)
                    .map_err(|e| bind_error(loaded, path, a, e))
            };
        let mut out = Listeners::default();
        for (name, l) in &cfg.listeners {
            let sockets = group(
                &format!("listeners.{name}.bind"),
                &l.bind.value,
                l.reuse_port,
            )?;
            out.listeners.insert(name.clone(), sockets);
        }
        if let Some(e) = &cfg.echo {
            out.echo = group("echo.bind", &e.bind, false)?;
        }
        for (name, e) in &cfg.echoes {
            let sockets = group(&format!("echoes.{name}.bind"), &e.bind, false)?;
            out.echoes.insert(name.clone(), sockets);
        }
        if cfg.admin.enabled {
            let a = addr(loaded, "admin.bind", &cfg.admin.bind)?;
            out.admin =
                Some(crate::net::bind_one(a).map_err(|e| bind_error(loaded, "admin.bind", a, e))?);
        }
        Ok(out)
    }

    /// Serves `listeners` until `shutdown` completes (or [`Control::shutdown`] is called), then
    /// drains: in-flight requests get `shutdown.drain_timeout` to finish.
    pub fn serve(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<RunningEngine> {
        let Engine {
            loaded,
            shared,
            workers,
        } = self;
        let cfg = &loaded.config;
        let (shutdown_tx, _) = watch::channel(false);
        let control = Arc::new(Control {
            shared: shared.clone(),
            file: loaded.file.clone(),
            workers,
            reload_lock: Mutex::new(()),
            shutdown: shutdown_tx,
            stopped: AtomicBool::new(false),
            stopping: Mutex::new(None),
            stopping_cv: Condvar::new(),
            first_worker: std::sync::OnceLock::new(),
            log_level: std::sync::OnceLock::new(),
            failure: std::sync::OnceLock::new(),
        });
        let mut per_worker: Vec<Vec<Job>> = (0..workers.max(1)).map(|_| Vec::new()).collect();
        let names = shared.runtime.load().listener_names.clone();
        let mut bound = BTreeMap::new();
        for (name, sockets) in listeners.listeners {
            let Some(index) = names.iter().position(|n| *n == name) else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no listener '{name}' in the config"),
                ));
            };
            let l = &cfg.listeners[&name];
            let settings = ConnSettings {
                max_header_size: usize::try_from(l.max_header_size.0).unwrap_or(usize::MAX),
                header_read_timeout: l.header_read_timeout.0,
                keep_alive: l.keep_alive,
                send_timeout: l.send_timeout.0,
                connections: Some(shared.metrics.listener(&name)),
            };
            if let Some(a) = local_addr(&sockets) {
                bound.insert(name.clone(), a);
            }
            let handler = Arc::new(ProxyHandler {
                shared: shared.clone(),
                index,
                body_timeout: l.client_body_timeout.0,
            });
            spread(sockets, &handler, &settings, &mut per_worker)?;
        }
        let echo = local_addr(&listeners.echo);
        if let Some(e) = &cfg.echo {
            let opts = echo_options(&loaded, e, None, "echo").map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            let handler = Arc::new(EchoHandler(opts));
            spread(
                listeners.echo,
                &handler,
                &ConnSettings::default(),
                &mut per_worker,
            )?;
        }
        let mut echoes = BTreeMap::new();
        for (name, sockets) in listeners.echoes {
            let Some(e) = cfg.echoes.get(&name) else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no echo back end '{name}' in the config"),
                ));
            };
            if let Some(a) = local_addr(&sockets) {
                echoes.insert(name.clone(), a);
            }
            let opts =
                echo_options(&loaded, e, Some(&name), &format!("echoes.{name}")).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                })?;
            let handler = Arc::new(EchoHandler(opts));
            spread(sockets, &handler, &ConnSettings::default(), &mut per_worker)?;
        }
        let c = control.clone();
        if let Some(first) = per_worker.first_mut() {
            first.push(Job::task(async move {
                shutdown.await;
                c.shutdown();
            }));
            let c = control.clone();
            let processes = shared.runtime.load().processes.clone();
            first.push(Job::task(async move {
                let _ = c.first_worker.set(tokio::runtime::Handle::current());
                if let Some(p) = processes {
                    if let Err(e) = keep_durable(p.engine.clone(), true).await {
                        c.fail(e);
                    }
                }
            }));
        }
        let admin = listeners.admin.as_ref().and_then(|s| s.local_addr().ok());
        let drain = cfg.shutdown.drain_timeout.0;
        // The admin runs on its own thread, so it answers (readiness, metrics) even when the
        // workers are saturated, and a reload blocks nobody's traffic.
        let mut admin_jobs = vec![Vec::new()];
        if let Some(sock) = listeners.admin {
            let handler = Arc::new(AdminHandler {
                control: control.clone(),
                local: admin,
            });
            let settings = ConnSettings {
                header_read_timeout: ADMIN_HEAD_TIMEOUT,
                ..ConnSettings::default()
            };
            spread(vec![sock], &handler, &settings, &mut admin_jobs)?;
        }
        let mut threads = spawn_workers(
            "busbar-worker",
            per_worker,
            &control.shutdown,
            drain,
            crate::endpoint::set_worker_index,
        );
        let (admin_stop, _) = watch::channel(false);
        let mut admin_threads = Vec::new();
        if admin.is_some() && threads.is_ok() {
            match spawn_workers("busbar-admin", admin_jobs, &admin_stop, drain, |_| {}) {
                Ok(t) => admin_threads = t,
                Err(e) => threads = Err(e),
            }
        }
        let threads = match threads {
            Ok(t) => t,
            Err(e) => {
                // Stop whatever started.
                control.shutdown();
                let _ = admin_stop.send(true);
                return Err(e);
            }
        };
        tracing::info!(
            workers,
            listeners = ?bound,
            admin = ?admin,
            echo = ?echo,
            echoes = ?echoes,
            "busbar started"
        );
        Ok(RunningEngine {
            listeners: bound,
            admin,
            echo,
            echoes,
            workers,
            control,
            threads,
            admin_threads,
            admin_stop,
            drain,
        })
    }
}

impl Control {
    /// Reloads the config file: builds a new runtime beside the old one and swaps it in.
    /// A config that fails to build leaves the old one serving; the errors say why.
    pub fn reload(&self) -> Result<String, ConfigErrors> {
        let _one_at_a_time = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let result = self.try_reload();
        match &result {
            Ok(msg) => {
                self.shared.metrics.reloads.fetch_add(1, Relaxed);
                tracing::info!("{msg}");
            }
            Err(e) => {
                self.shared.metrics.reload_failures.fetch_add(1, Relaxed);
                tracing::error!("reload failed, the previous config keeps serving:\n{e}");
            }
        }
        result
    }

    fn try_reload(&self) -> Result<String, ConfigErrors> {
        if self.shared.draining.load(Relaxed) {
            return Err(ConfigErrors(vec![ConfigError {
                file: self.file.display().to_string(),
                line: None,
                path: String::new(),
                message: "shutting down: nothing was reloaded".into(),
            }]));
        }
        let loaded = busbar_config::load(&self.file)?;
        let old = self.shared.runtime.load();
        let before = &old.config.config;
        let after = &loaded.config;
        let binds = |c: &busbar_config::Config| -> Vec<(String, String, bool)> {
            c.listeners
                .iter()
                .map(|(k, v)| (k.clone(), v.bind.value.clone(), v.reuse_port))
                .collect()
        };
        let mut restart = Vec::new();
        if binds(before) != binds(after) {
            restart.push("listeners");
        }
        if workers_of(after) != self.workers {
            restart.push("workers");
        }
        if before.admin.bind != after.admin.bind || before.admin.enabled != after.admin.enabled {
            restart.push("admin");
        }
        // The echo back ends and the drain are set up once, at start: any change to them
        // would be shown by /config and not be in force.
        if !same(&before.echo, &after.echo) {
            restart.push("echo");
        }
        if !same(&before.echoes, &after.echoes) {
            restart.push("echoes");
        }
        if !same(&before.shutdown, &after.shutdown) {
            restart.push("shutdown");
        }
        // The log's format is fixed when logging starts; its level is not (below).
        if before.log.format != after.log.format {
            restart.push("log.format");
        }
        if !restart.is_empty() {
            return Err(ConfigErrors(vec![loaded.error(
                None,
                restart.join(", "),
                "changed: these take effect only after a restart; nothing was reloaded",
            )]));
        }
        let runtime = Runtime::build_after(&loaded, &self.shared.metrics, self.workers, Some(&old))
            .map_err(ConfigErrors)?;
        hold_stores(&loaded, &runtime)?;
        // Before anything is swapped: a level that cannot be applied fails the whole reload.
        if before.log.level != after.log.level {
            if let Some(set) = self.log_level.get() {
                (set.0)(&after.log.level).map_err(|e| {
                    ConfigErrors(vec![loaded.error(
                        None,
                        "log.level",
                        format!("cannot apply: {e}"),
                    )])
                })?;
            }
        }
        let proxies = loaded.config.proxies.len();
        let current = self.shared.access_log.load();
        if current.as_ref().map(|l| &l.config) != loaded.config.access_log.as_ref() {
            let log = start_access_log(&loaded, &self.shared.metrics)?;
            self.shared.access_log.store(log);
        }
        let current = self.shared.exporter.load();
        if current.as_ref().map(|e| &e.config) != Some(&loaded.config.tracing) {
            let exporter = start_exporter(&loaded, &self.shared.metrics)?;
            self.shared.exporter.store(exporter);
        }
        // Process instances of the old runtime keep running there; messages for them that
        // reach the new one are passed on.
        let previous = self.shared.runtime.load();
        if let (Some(new), Some(old)) = (&runtime.processes, &previous.processes) {
            new.engine.succeed(&old.engine);
        }
        if let (Some(new), Some(worker)) = (&runtime.processes, self.first_worker.get()) {
            // The instances this node runs stay with the old runtime; the new one takes
            // over only from nodes that died.
            let own = previous.processes.is_none();
            let engine = new.engine.clone();
            worker.spawn(async move {
                if let Err(e) = keep_durable(engine, own).await {
                    tracing::error!(
                        "the reloaded processes' durable instances are not taken up: {e}"
                    );
                }
            });
        }
        // A PostgreSQL database of the new runtime connects in the background and refuses
        // requests until it has: the old runtime's pool serves them until then, for a while.
        let until = Instant::now() + DATABASE_START_WAIT;
        for (name, db) in &runtime.databases {
            while db.is_starting() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            if db.is_starting() {
                tracing::warn!(
                    "database {name} has not connected {DATABASE_START_WAIT:?} into the reload: \
                     its requests get 503 until it does"
                );
            }
        }
        // In-flight exchanges keep the old runtime alive through their own `Arc` and finish
        // on it; new requests see the new one from here on. The body budget is the
        // process's: bodies held now keep their bytes under the new limit.
        self.shared
            .metrics
            .bodies
            .set_limit(runtime.config.config.max_buffered_bodies.0);
        self.shared.runtime.store(Arc::new(runtime));
        Ok(format!(
            "reloaded {} ({proxies} proxies)",
            self.file.display()
        ))
    }

    /// Lets a reload apply a changed `log.level` with `set` (the process's logging is not the
    /// engine's: `busbar run` sets it up). Without it, a reload leaves the level as it was.
    pub fn on_log_level(&self, set: LogLevelSetter) {
        let _ = self.log_level.set(set);
    }

    /// Reopens the access log file (after logrotate moved it away): SIGUSR1.
    pub fn reopen_logs(&self) {
        if let Some(log) = &*self.shared.access_log.load() {
            log.reopen();
        }
    }

    /// Writes out what the access log and the span exporter hold queued (their threads take
    /// it every 50 ms): the lines and spans of requests that finished during the drain. Bounded:
    /// [`ACCESS_LOG_FLUSH_LIMIT`] for the log, the exporter's `timeout` capped at
    /// [`crate::otlp::FLUSH_LIMIT`] for spans; what is not out by then is lost, with a warning.
    pub fn flush_outputs(&self) {
        if let Some(log) = self.shared.access_log.load_full() {
            if !log.flush(ACCESS_LOG_FLUSH_LIMIT) {
                tracing::warn!(
                    "the access log did not take its last lines within {ACCESS_LOG_FLUSH_LIMIT:?}"
                );
            }
        }
        if let Some(exporter) = self.shared.exporter.load_full() {
            if !exporter.flush() {
                tracing::warn!("the last spans were not exported in time: dropped");
            }
        }
    }

    /// Stops the engine because it cannot run as configured (`why`): logged, kept for
    /// [`Control::failure`], then a graceful shutdown.
    pub fn fail(&self, why: String) {
        tracing::error!("{why}");
        let _ = self.failure.set(why);
        self.shutdown();
    }

    /// Why the engine stopped on its own ([`Control::fail`]), if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// Starts a graceful shutdown: stop accepting, finish in-flight requests, then exit.
    pub fn shutdown(&self) {
        if !self.stopped.swap(true, Relaxed) {
            self.shared.draining.store(true, Relaxed);
            tracing::info!("shutting down: draining in-flight requests");
            let _ = self.shutdown.send(true);
            let mut stopping = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
            stopping.get_or_insert_with(Instant::now);
            self.stopping_cv.notify_all();
        }
    }
}

impl RunningEngine {
    /// The control handle (reload, shutdown).
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// Reloads the config file.
    pub fn reload(&self) -> Result<String, ConfigErrors> {
        self.control.reload()
    }

    /// Stops gracefully and waits for every thread.
    pub fn shutdown(self) {
        self.control.shutdown();
        self.wait();
    }

    /// Waits until the engine has stopped (after a shutdown from a signal or the admin). Once
    /// shutdown started, the wait is bounded by the drain timeout (and a second of grace): a
    /// thread still stuck then (a transform that never yields) is abandoned, and logged. Then
    /// the access log lines and spans of the requests finished meanwhile are written out
    /// ([`Control::flush_outputs`]).
    pub fn wait(self) {
        let control = self.control;
        join_threads(&control, self.threads, self.drain);
        // The admin goes last: it answers `draining` until the drain is over.
        let _ = self.admin_stop.send(true);
        join_until(self.admin_threads, Instant::now() + STOP_GRACE, STOP_GRACE);
        control.flush_outputs();
    }
}

/// Joins `threads` once shutdown started, until the drain timeout (and [`STOP_GRACE`]) passed.
fn join_threads(control: &Control, threads: Vec<JoinHandle<()>>, drain: Duration) {
    let started = {
        let mut stopping = control.stopping.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(at) = *stopping {
                break at;
            }
            if threads.iter().all(JoinHandle::is_finished) {
                break Instant::now();
            }
            stopping = control
                .stopping_cv
                .wait_timeout(stopping, Duration::from_millis(200))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    };
    join_until(threads, started + drain + STOP_GRACE, drain);
}

/// Joins `threads` until `deadline`, then abandons (and logs) those still running.
fn join_until(mut threads: Vec<JoinHandle<()>>, deadline: Instant, drain: Duration) {
    loop {
        let (done, running): (Vec<_>, Vec<_>) =
            threads.into_iter().partition(JoinHandle::is_finished);
        for t in done {
            let _ = t.join();
        }
        threads = running;
        if threads.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = threads
                .iter()
                .map(|t| t.thread().name().unwrap_or("unnamed").to_owned())
                .collect();
            tracing::warn!(
                threads = ?names,
                drain_timeout = ?drain,
                "stopped with work still running after the drain timeout: abandoned"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
