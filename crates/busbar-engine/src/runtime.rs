//! Config → Runtime: everything a request needs, compiled once and immutable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use busbar_config::{line_of, ConfigError, LoadedConfig, StepConfig};
use busbar_core::metrics::{Counters, Registry};
use http::{HeaderName, HeaderValue, Method, StatusCode};

use crate::client::{Endpoint, EndpointSettings};
use crate::steps::{FaultStep, LogStep, RespondStep, Sequence, Step};

/// A proxy service, built.
#[derive(Debug)]
pub struct Proxy {
    /// Its name.
    pub name: Arc<str>,
    /// Accepted methods; empty means any.
    pub methods: Vec<Method>,
    /// Largest body a step may buffer.
    pub max_body: u64,
    /// Request steps.
    pub in_seq: Vec<Step>,
    /// Response steps.
    pub out_seq: Vec<Step>,
    /// Error steps.
    pub on_error: Vec<Step>,
    /// Its metrics.
    pub counters: Arc<Counters>,
}

/// Everything built from one config; replaced whole on reload.
#[derive(Debug)]
pub struct Runtime {
    /// Proxies by listener index, then by path.
    routes: Vec<HashMap<String, Arc<Proxy>>>,
    /// Listener names, in the order listener indexes use.
    pub listener_names: Vec<String>,
    /// Endpoints by name.
    pub endpoints: BTreeMap<String, Arc<Endpoint>>,
    /// The config this was built from.
    pub config: LoadedConfig,
}

impl Runtime {
    /// The proxy serving `path` on listener `listener`.
    pub fn route(&self, listener: usize, path: &str) -> Option<&Arc<Proxy>> {
        self.routes.get(listener)?.get(path)
    }

    /// Builds a runtime; every problem is reported, with its path and line.
    pub fn build(
        loaded: &LoadedConfig,
        metrics: &Registry,
        workers: usize,
    ) -> Result<Runtime, Vec<ConfigError>> {
        let cfg = &loaded.config;
        let mut b = Builder {
            loaded,
            errors: Vec::new(),
            endpoints: BTreeMap::new(),
            sequences: HashMap::new(),
        };
        for (name, e) in &cfg.endpoints {
            let settings = EndpointSettings {
                connect_timeout: e.connect_timeout.0,
                timeout: e.timeout.0,
                pool_size: e.pool_size,
                keep_alive: e.keep_alive.0,
                retries: e.retries,
            };
            match Endpoint::new(
                name,
                &e.url.value,
                settings,
                workers,
                metrics.endpoint(name),
            ) {
                Ok(ep) => {
                    b.endpoints.insert(name.clone(), Arc::new(ep));
                }
                Err(msg) => b.error(line_of(&e.url), format!("endpoints.{name}.url"), msg),
            }
        }
        for name in cfg.sequences.keys() {
            b.sequence(name, &format!("sequences.{name}"));
        }
        let listener_names: Vec<String> = cfg.listeners.keys().cloned().collect();
        let mut routes: Vec<HashMap<String, Arc<Proxy>>> =
            vec![HashMap::new(); listener_names.len()];
        for (name, p) in &cfg.proxies {
            let path = format!("proxies.{name}");
            let proxy = Arc::new(Proxy {
                name: name.as_str().into(),
                methods: p
                    .methods
                    .iter()
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect(),
                max_body: p.max_body.0,
                in_seq: b.steps(&p.in_seq, &format!("{path}.in")),
                out_seq: b.steps(&p.out_seq, &format!("{path}.out")),
                on_error: b.steps(&p.on_error, &format!("{path}.on_error")),
                counters: metrics.proxy(name),
            });
            for (i, l) in listener_names.iter().enumerate() {
                if p.listeners.is_empty() || p.listeners.iter().any(|x| &x.value == l) {
                    routes[i].insert(p.path.value.clone(), proxy.clone());
                }
            }
        }
        if b.errors.is_empty() {
            Ok(Runtime {
                routes,
                listener_names,
                endpoints: b.endpoints,
                config: loaded.clone(),
            })
        } else {
            Err(b.errors)
        }
    }
}

struct Builder<'a> {
    loaded: &'a LoadedConfig,
    errors: Vec<ConfigError>,
    endpoints: BTreeMap<String, Arc<Endpoint>>,
    sequences: HashMap<String, Arc<Sequence>>,
}

impl Builder<'_> {
    fn error(&mut self, line: Option<u64>, path: String, msg: String) {
        self.errors.push(self.loaded.error(line, path, msg));
    }

    /// Builds named sequence `name` once (validation has ruled out cycles).
    fn sequence(&mut self, name: &str, path: &str) -> Option<Arc<Sequence>> {
        if let Some(s) = self.sequences.get(name) {
            return Some(s.clone());
        }
        let cfg = self.loaded.config.sequences.get(name)?;
        let steps = self.steps(cfg, path);
        let seq = Arc::new(Sequence {
            name: name.to_owned(),
            steps,
        });
        self.sequences.insert(name.to_owned(), seq.clone());
        Some(seq)
    }

    fn steps(&mut self, cfgs: &[StepConfig], path: &str) -> Vec<Step> {
        let mut out = Vec::with_capacity(cfgs.len());
        for (i, cfg) in cfgs.iter().enumerate() {
            let here = format!("{path}[{i}].{}", cfg.kind());
            if let Some(step) = self.step(cfg, &here) {
                out.push(step);
            }
        }
        out
    }

    fn step(&mut self, cfg: &StepConfig, here: &str) -> Option<Step> {
        match cfg {
            StepConfig::Call(name) => match self.endpoints.get(&name.value) {
                Some(ep) => Some(Step::Call(ep.clone())),
                None => {
                    self.error(
                        line_of(name),
                        here.to_owned(),
                        format!("unknown endpoint '{}'", name.value),
                    );
                    None
                }
            },
            StepConfig::Sequence(name) => {
                let seq = self.sequence(&name.value, &format!("sequences.{}", name.value));
                if seq.is_none() {
                    self.error(
                        line_of(name),
                        here.to_owned(),
                        format!("unknown sequence '{}'", name.value),
                    );
                }
                seq.map(Step::Sequence)
            }
            StepConfig::Fault(f) => match StatusCode::from_u16(f.status) {
                Ok(status) => Some(Step::Fault(FaultStep {
                    status,
                    reason: f.reason.as_str().into(),
                    client: f.code == busbar_config::FaultCodeConfig::Client,
                })),
                Err(e) => {
                    self.error(None, format!("{here}.status"), e.to_string());
                    None
                }
            },
            StepConfig::Respond(r) => {
                let status = r.status.and_then(|s| StatusCode::from_u16(s).ok());
                let ct = r
                    .content_type
                    .as_deref()
                    .and_then(|c| HeaderValue::from_str(c).ok());
                Some(Step::Respond(RespondStep {
                    status,
                    body: r.body.as_ref().map(|b| (bytes::Bytes::from(b.clone()), ct)),
                }))
            }
            StepConfig::SetHeader(h) => {
                let name = HeaderName::from_bytes(h.name.as_bytes());
                let value = HeaderValue::from_str(&h.value);
                match (name, value) {
                    (Ok(n), Ok(v)) => Some(Step::SetHeader(n, v)),
                    _ => {
                        self.error(None, here.to_owned(), "invalid header name or value".into());
                        None
                    }
                }
            }
            StepConfig::RemoveHeader(name) => match HeaderName::from_bytes(name.as_bytes()) {
                Ok(n) => Some(Step::RemoveHeader(n)),
                Err(_) => {
                    self.error(
                        None,
                        here.to_owned(),
                        format!("invalid header name '{name}'"),
                    );
                    None
                }
            },
            StepConfig::Log(l) => Some(Step::Log(LogStep {
                message: l.message.clone(),
                level: match l.level {
                    busbar_config::LogLevel::Error => tracing::Level::ERROR,
                    busbar_config::LogLevel::Warn => tracing::Level::WARN,
                    busbar_config::LogLevel::Info => tracing::Level::INFO,
                    busbar_config::LogLevel::Debug => tracing::Level::DEBUG,
                    busbar_config::LogLevel::Trace => tracing::Level::TRACE,
                },
            })),
        }
    }
}
