//! Starting, reloading and stopping the engine.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use busbar_config::{ConfigErrors, LoadedConfig, Workers};
use busbar_core::metrics::Registry;
use tokio::sync::watch;

use crate::echo::EchoOptions;
use crate::runtime::Runtime;
use crate::server::{accept_loop, ConnSettings, ConnTracker, Service, Shared};

/// Entry points of the engine.
#[derive(Debug)]
pub struct Engine;

/// A started engine: its addresses, and the handles to reload and stop it.
#[derive(Debug)]
pub struct RunningEngine {
    /// Bound address of each listener, by name.
    pub listeners: BTreeMap<String, SocketAddr>,
    /// Bound address of the admin listener.
    pub admin: Option<SocketAddr>,
    /// Bound address of the embedded echo back end.
    pub echo: Option<SocketAddr>,
    /// Worker threads serving traffic.
    pub workers: usize,
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

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
}

fn workers_of(cfg: &busbar_config::Config) -> usize {
    match cfg.workers {
        Workers::Count(n) => n,
        Workers::Auto => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Loads and builds `file` without serving: what `busbar validate` runs.
pub fn check(file: &Path) -> Result<Runtime, ConfigErrors> {
    let loaded = busbar_config::load(file)?;
    let workers = workers_of(&loaded.config);
    Runtime::build(&loaded, &Registry::default(), workers).map_err(ConfigErrors)
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
    ConfigErrors(vec![loaded.error(
        None,
        path,
        format!("cannot listen on {a}: {e}"),
    )])
}

impl Engine {
    /// Loads `file`, binds every listener and starts serving on worker threads.
    pub fn start(file: &Path) -> Result<RunningEngine, ConfigErrors> {
        let loaded = busbar_config::load(file)?;
        let cfg = &loaded.config;
        let workers = workers_of(cfg);
        let metrics = Arc::new(Registry::default());
        let runtime = Runtime::build(&loaded, &metrics, workers).map_err(ConfigErrors)?;

        // Bind everything before starting threads, so a taken port fails the start cleanly.
        let mut sockets: Vec<(Vec<StdListener>, Service, ConnSettings)> = Vec::new();
        let mut listeners = BTreeMap::new();
        let shared = Arc::new(Shared {
            runtime: arc_swap::ArcSwap::from_pointee(runtime),
            metrics,
            draining: AtomicBool::new(false),
        });
        let listener_names: Vec<String> = cfg.listeners.keys().cloned().collect();
        for (index, name) in listener_names.iter().enumerate() {
            let l = &cfg.listeners[name];
            let path = format!("listeners.{name}.bind");
            let a = addr(&loaded, &path, &l.bind.value)?;
            let socks = crate::net::bind_reuseport(a, workers)
                .map_err(|e| bind_error(&loaded, &path, a, e))?;
            if let Some(first) = socks.first() {
                listeners.insert(name.clone(), first.local_addr().unwrap_or(a));
            }
            let settings = ConnSettings {
                max_header_size: usize::try_from(l.max_header_size.0).unwrap_or(usize::MAX),
                header_read_timeout: l.header_read_timeout.0,
                keep_alive: l.keep_alive,
            };
            sockets.push((
                socks,
                Service::Proxy {
                    shared: shared.clone(),
                    index,
                },
                settings,
            ));
        }
        let mut echo = None;
        if let Some(e) = &cfg.echo {
            let a = addr(&loaded, "echo.bind", &e.bind)?;
            let socks = crate::net::bind_reuseport(a, workers)
                .map_err(|err| bind_error(&loaded, "echo.bind", a, err))?;
            echo = socks.first().and_then(|s| s.local_addr().ok());
            let opts = EchoOptions {
                delay: e.delay.map(|d| d.0),
                ..EchoOptions::default()
            };
            sockets.push((
                socks,
                Service::Echo(Arc::new(opts)),
                default_conn_settings(),
            ));
        }
        let admin_socket = if cfg.admin.enabled {
            let a = addr(&loaded, "admin.bind", &cfg.admin.bind)?;
            Some(crate::net::bind_one(a).map_err(|e| bind_error(&loaded, "admin.bind", a, e))?)
        } else {
            None
        };
        let admin = admin_socket.as_ref().and_then(|s| s.local_addr().ok());

        let (shutdown, _) = watch::channel(false);
        let control = Arc::new(Control {
            shared: shared.clone(),
            file: file.to_path_buf(),
            workers,
            reload_lock: Mutex::new(()),
            shutdown,
            stopped: AtomicBool::new(false),
        });
        let drain = cfg.shutdown.drain_timeout.0;
        let mut per_worker: Vec<Vec<(StdListener, Service, ConnSettings)>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (socks, service, settings) in sockets {
            for (i, s) in socks.into_iter().enumerate() {
                per_worker[i].push((s, service.clone(), settings.clone()));
            }
        }
        let mut threads = Vec::with_capacity(workers + 1);
        for (i, jobs) in per_worker.into_iter().enumerate() {
            let rx = control.shutdown.subscribe();
            let t = std::thread::Builder::new()
                .name(format!("busbar-worker-{i}"))
                .spawn(move || worker(i, jobs, rx, drain))
                .map_err(|e| {
                    ConfigErrors(vec![loaded.error(
                        None,
                        "workers",
                        format!("cannot start worker thread: {e}"),
                    )])
                })?;
            threads.push(t);
        }
        if let Some(sock) = admin_socket {
            let rx = control.shutdown.subscribe();
            let c = control.clone();
            let t = std::thread::Builder::new()
                .name("busbar-admin".into())
                .spawn(move || crate::admin::run(sock, c, rx))
                .map_err(|e| {
                    ConfigErrors(vec![loaded.error(
                        None,
                        "admin",
                        format!("cannot start admin thread: {e}"),
                    )])
                })?;
            threads.push(t);
        }
        tracing::info!(
            workers,
            listeners = ?listeners,
            admin = ?admin,
            echo = ?echo,
            "busbar started"
        );
        Ok(RunningEngine {
            listeners,
            admin,
            echo,
            workers,
            control,
            threads,
        })
    }
}

pub(crate) fn default_conn_settings() -> ConnSettings {
    ConnSettings {
        max_header_size: 64 * 1024,
        header_read_timeout: Duration::from_secs(30),
        keep_alive: true,
    }
}

pub(crate) fn worker(
    index: usize,
    jobs: Vec<(StdListener, Service, ConnSettings)>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    crate::client::set_worker_index(index);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, worker = index, "cannot start worker event loop");
            return;
        }
    };
    rt.block_on(async move {
        let tracker = Arc::new(ConnTracker::default());
        for (listener, service, settings) in jobs {
            tokio::spawn(accept_loop(
                listener,
                service,
                settings,
                shutdown.clone(),
                tracker.clone(),
            ));
        }
        let _ = shutdown.wait_for(|stop| *stop).await;
        if tokio::time::timeout(drain, tracker.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                worker = index,
                "drain timeout: closing the remaining connections"
            );
        }
    });
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
        let loaded = busbar_config::load(&self.file)?;
        let old = self.shared.runtime.load();
        let before = &old.config.config;
        let after = &loaded.config;
        let binds = |c: &busbar_config::Config| -> Vec<(String, String)> {
            c.listeners
                .iter()
                .map(|(k, v)| (k.clone(), v.bind.value.clone()))
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
        if before.echo.as_ref().map(|e| &e.bind) != after.echo.as_ref().map(|e| &e.bind) {
            restart.push("echo");
        }
        if !restart.is_empty() {
            return Err(ConfigErrors(vec![loaded.error(
                None,
                restart.join(", "),
                "changed: these take effect only after a restart; nothing was reloaded",
            )]));
        }
        let runtime =
            Runtime::build(&loaded, &self.shared.metrics, self.workers).map_err(ConfigErrors)?;
        let proxies = loaded.config.proxies.len();
        // In-flight exchanges keep the old runtime alive through their own `Arc` and finish
        // on it; new requests see the new one from here on.
        self.shared.runtime.store(Arc::new(runtime));
        Ok(format!(
            "reloaded {} ({proxies} proxies)",
            self.file.display()
        ))
    }

    /// Starts a graceful shutdown: stop accepting, finish in-flight requests, then exit.
    pub fn shutdown(&self) {
        if !self.stopped.swap(true, Relaxed) {
            self.shared.draining.store(true, Relaxed);
            tracing::info!("shutting down: draining in-flight requests");
            let _ = self.shutdown.send(true);
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

    /// Waits until the engine has stopped (after a shutdown from a signal or the admin).
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}
