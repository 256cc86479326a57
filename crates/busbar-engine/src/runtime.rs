//! Config → Runtime: everything a request needs, compiled once and immutable.

use std::collections::BTreeMap;

use std::sync::Arc;

use busbar_config::{line_of, ConfigError, LoadedConfig};
use busbar_core::metrics::{Counters, Registry};
use http::Method;

use crate::endpoint::Endpoint;
use crate::offload::Offload;
use crate::processes::{ProcessService, Processes};
use crate::router::{Match, Router};
use crate::steps::{BuildCx, BuiltStep, ProxyCx};

/// A proxy service, built.
#[derive(Debug)]
pub struct Proxy {
    /// Its name.
    pub name: Arc<str>,
    /// Accepted methods; empty means any.
    pub methods: Vec<Method>,
    /// What its steps share at run time: limits, endpoints, the CPU pool.
    pub cx: ProxyCx,
    /// Request steps.
    pub in_seq: Vec<BuiltStep>,
    /// Response steps.
    pub out_seq: Vec<BuiltStep>,
    /// Error steps.
    pub on_error: Vec<BuiltStep>,
    /// Its metrics.
    pub counters: Arc<Counters>,
    /// The process service it serves instead of steps (`processes:`).
    pub process: Option<Arc<ProcessService>>,
}

/// Everything built from one config; replaced whole on reload.
#[derive(Debug)]
pub struct Runtime {
    /// Proxies by listener index, then by method and path pattern.
    routes: Vec<Router<Arc<Proxy>>>,
    /// Listener names, in the order listener indexes use.
    pub listener_names: Vec<String>,
    /// TLS config of each listener (by index), `None` for plain HTTP.
    pub tls: Vec<Option<Arc<rustls::ServerConfig>>>,
    /// Endpoints by name.
    pub endpoints: Arc<BTreeMap<String, Arc<Endpoint>>>,
    /// Databases by name.
    pub databases: BTreeMap<String, Arc<busbar_sql::Database>>,
    /// The deployed processes, when the config has any.
    pub processes: Option<Arc<Processes>>,
    /// The config this was built from.
    pub config: LoadedConfig,
    /// The engine of each `xslt` and `jq` step of the proxies and sequences.
    pub engines: Vec<crate::steps::StepEngine>,
}

impl Runtime {
    /// This runtime's endpoint `name`, when `config` describes it as this runtime's config did
    /// and it has no TLS to read again.
    fn unchanged_endpoint(
        &self,
        name: &str,
        config: &busbar_config::EndpointConfig,
    ) -> Option<Arc<Endpoint>> {
        let old = self.config.config.endpoints.get(name)?;
        let urls = |c: &busbar_config::EndpointConfig| -> Vec<String> {
            c.url_list()
                .iter()
                .map(|u| u.url.expose().to_owned())
                .collect()
        };
        let tls = urls(config)
            .iter()
            .any(|u| u.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("https:")))
            || config.0.tls.is_some();
        let same = serde_json::to_value(old).ok() == serde_json::to_value(config).ok()
            && urls(old) == urls(config);
        (same && !tls).then(|| self.endpoints.get(name).cloned())?
    }

    /// The proxy serving `method` and `path` on listener `listener`, with the path parameters.
    pub fn route(&self, listener: usize, method: &Method, path: &str) -> Match<'_, Arc<Proxy>> {
        match self.routes.get(listener) {
            Some(router) => router.find(method, path),
            None => Match::NotFound,
        }
    }

    /// Builds a runtime; every problem is reported, with its path and line.
    pub fn build(
        loaded: &LoadedConfig,
        metrics: &Registry,
        workers: usize,
    ) -> Result<Runtime, Vec<ConfigError>> {
        Self::build_after(loaded, metrics, workers, None)
    }

    /// Builds the runtime that replaces `previous` (a reload): an endpoint the new config
    /// describes exactly as the old one did is taken over as it is, with its open
    /// connections, its breakers' state and its balancer's place, unless it speaks TLS (a
    /// reload is how renewed certificate files are read).
    pub fn build_after(
        loaded: &LoadedConfig,
        metrics: &Registry,
        workers: usize,
        previous: Option<&Runtime>,
    ) -> Result<Runtime, Vec<ConfigError>> {
        let cfg = &loaded.config;
        busbar_libxml::init();
        let mut errors = Vec::new();
        let mut endpoints = BTreeMap::new();
        for (name, e) in &cfg.endpoints {
            if let Some(old) = previous.and_then(|p| p.unchanged_endpoint(name, e)) {
                endpoints.insert(name.clone(), old);
                continue;
            }
            match Endpoint::build(name, e, loaded, metrics, workers) {
                Ok(ep) => {
                    endpoints.insert(name.clone(), ep);
                }
                Err(e) => errors.extend(e),
            }
        }
        let shared_endpoints = Arc::new(endpoints);
        let mut databases = BTreeMap::new();
        for (name, d) in &cfg.databases {
            match crate::databases::open(loaded, name, d, workers) {
                Ok(db) => {
                    databases.insert(name.clone(), db);
                }
                Err(e) => errors.push(e),
            }
        }
        let mut b = BuildCx::new(loaded, metrics, &shared_endpoints, &databases);
        // Each sequence after those it runs: building one then never follows a chain of
        // references (thousands of sequences long, in a config that validation refused).
        for name in busbar_config::nesting::build_order(&cfg.sequences) {
            b.sequence(name);
        }
        let listener_names: Vec<String> = cfg.listeners.keys().cloned().collect();
        let mut tls = Vec::with_capacity(listener_names.len());
        for name in &listener_names {
            let Some(t) = &cfg.listeners[name].tls else {
                tls.push(None);
                continue;
            };
            let (cert, key) = (loaded.resolve(&t.cert.value), loaded.resolve(&t.key.value));
            match crate::tls::server_config(&cert, &key) {
                Ok(c) => tls.push(Some(c)),
                Err(msg) => {
                    b.fail(line_of(&t.cert), format!("listeners.{name}.tls"), msg);
                    tls.push(None);
                }
            }
        }
        let mut routes: Vec<Router<Arc<Proxy>>> =
            listener_names.iter().map(|_| Router::default()).collect();
        for (name, p) in &cfg.proxies {
            let path = format!("proxies.{name}");
            b.scope_namespaces(&format!("{path}.namespaces"), &p.namespaces);
            let proxy = Arc::new(Proxy {
                name: name.as_str().into(),
                methods: p
                    .methods
                    .iter()
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect(),
                cx: ProxyCx {
                    max_body: p.max_body.0,
                    bodies: metrics.bodies.clone(),
                    check_xml_tail: p.xml_check == busbar_config::XmlCheck::Whole,
                    check_json_tail: p.json_check == busbar_config::XmlCheck::Whole,
                    json_max_depth: p.json_max_depth,
                    endpoints: shared_endpoints.clone(),
                    offload: Offload::shared(),
                },
                in_seq: b.steps(&p.in_seq, &format!("{path}.in")),
                out_seq: b.steps(&p.out_seq, &format!("{path}.out")),
                on_error: b.steps(&p.on_error, &format!("{path}.on_error")),
                counters: metrics.proxy(name),
                process: None,
            });
            for (i, l) in listener_names.iter().enumerate() {
                if p.listeners.is_empty() || p.listeners.iter().any(|x| &x.value == l) {
                    if let Err(msg) = routes[i].add(&p.path.value, &proxy.methods, proxy.clone()) {
                        b.fail(line_of(&p.path), format!("{path}.path"), msg);
                    }
                }
            }
        }
        let engines = std::mem::take(&mut b.engines);
        errors.extend(b.into_errors());
        let processes = crate::processes::build(
            loaded,
            &shared_endpoints,
            &databases,
            &listener_names,
            metrics,
            workers,
            &mut errors,
        )
        .map(|(processes, services)| {
            let post = [Method::POST];
            // Service QName → the folder that provides it first; the folders that provide one
            // again, told once each.
            let mut provided: BTreeMap<String, String> = BTreeMap::new();
            let mut told: std::collections::BTreeSet<(String, String)> = Default::default();
            for (listener, path, svc) in services {
                let at = format!("processes.{}", svc.folder);
                let line = cfg.processes.get(&*svc.folder).and_then(|p| line_of(&p.dir));
                let qname = svc.service.service.service.clark();
                let first = provided
                    .entry(qname.clone())
                    .or_insert_with(|| svc.folder.to_string());
                if **first != *svc.folder {
                    if told.insert((svc.folder.to_string(), qname.clone())) {
                        errors.push(loaded.error(
                            line,
                            at,
                            format!("service {qname} is already provided by processes.{first}: one folder provides a service"),
                        ));
                    }
                    continue;
                }
                let listener_name = &listener_names[listener];
                let proxy_clash = cfg.proxies.iter().find(|(_, p)| {
                    p.path.value == path
                        && (p.methods.is_empty() || p.methods.iter().any(|m| m == "POST"))
                        && (p.listeners.is_empty()
                            || p.listeners.iter().any(|l| &l.value == listener_name))
                });
                let taken = match proxy_clash {
                    Some((other, _)) => Some(format!("proxy '{other}'")),
                    None => match routes[listener].find(&Method::POST, &path) {
                        Match::Found { target, .. } if target.process.is_some() => {
                            Some(format!("'{}'", target.name))
                        }
                        _ => None,
                    },
                };
                if let Some(other) = taken {
                    errors.push(loaded.error(
                        line,
                        at,
                        format!("path '{path}' of service {} is already served by {other} on listener '{listener_name}'", svc.service.service.service.clark()),
                    ));
                    continue;
                }
                let name = format!("{}.{}", svc.folder, svc.service.service.service.local);
                let proxy = Arc::new(Proxy {
                    counters: metrics.proxy(&name),
                    name: name.into(),
                    methods: post.to_vec(),
                    cx: ProxyCx {
                        max_body: crate::processes::MAX_BODY,
                        bodies: metrics.bodies.clone(),
                        check_xml_tail: false,
                        check_json_tail: false,
                        json_max_depth: 64,
                        endpoints: shared_endpoints.clone(),
                        offload: Offload::shared(),
                    },
                    in_seq: Vec::new(),
                    out_seq: Vec::new(),
                    on_error: Vec::new(),
                    process: Some(svc),
                });
                if let Err(msg) = routes[listener].add(&path, &post, proxy) {
                    errors.push(loaded.error(line, at, msg));
                }
            }
            processes
        });
        if errors.is_empty() {
            Ok(Runtime {
                routes,
                listener_names,
                tls,
                endpoints: shared_endpoints,
                databases,
                processes,
                config: loaded.clone(),
                engines,
            })
        } else {
            Err(errors)
        }
    }
}
