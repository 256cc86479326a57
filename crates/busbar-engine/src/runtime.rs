//! Config → Runtime: everything a request needs, compiled once and immutable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use busbar_config::{line_of, ConfigError, LoadedConfig, StepConfig};
use busbar_core::metrics::{Counters, Registry};
use http::{HeaderName, HeaderValue, Method, StatusCode};

use crate::client::{Endpoint, EndpointSettings};
use crate::steps::{BuiltStep, FaultStep, LogStep, RespondStep, Sequence, Step};

/// A proxy service, built.
#[derive(Debug)]
pub struct Proxy {
    /// Its name.
    pub name: Arc<str>,
    /// Accepted methods; empty means any.
    pub methods: Vec<Method>,
    /// Body limits and checks for its steps.
    pub cx: crate::steps::StepCx,
    /// Request steps.
    pub in_seq: Vec<BuiltStep>,
    /// Response steps.
    pub out_seq: Vec<BuiltStep>,
    /// Error steps.
    pub on_error: Vec<BuiltStep>,
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
    /// TLS config of each listener (by index), `None` for plain HTTP.
    pub tls: Vec<Option<Arc<rustls::ServerConfig>>>,
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
        busbar_libxml::init();
        let mut b = Builder {
            loaded,
            metrics,
            namespaces: cfg.namespaces.clone(),
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
                    b.error(line_of(&t.cert), format!("listeners.{name}.tls"), msg);
                    tls.push(None);
                }
            }
        }
        let mut routes: Vec<HashMap<String, Arc<Proxy>>> =
            vec![HashMap::new(); listener_names.len()];
        for (name, p) in &cfg.proxies {
            let path = format!("proxies.{name}");
            b.namespaces = cfg.namespaces.clone();
            b.namespaces
                .extend(p.namespaces.iter().map(|(k, v)| (k.clone(), v.clone())));
            let proxy = Arc::new(Proxy {
                name: name.as_str().into(),
                methods: p
                    .methods
                    .iter()
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect(),
                cx: crate::steps::StepCx {
                    max_body: p.max_body.0,
                    check_xml_tail: p.xml_check == busbar_config::XmlCheck::Whole,
                },
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
                tls,
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
    metrics: &'a Registry,
    /// Namespace prefixes in scope for the steps being built.
    namespaces: BTreeMap<String, String>,
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
        // Named sequences see the global namespaces only, wherever they are used from.
        let scoped = std::mem::replace(&mut self.namespaces, self.loaded.config.namespaces.clone());
        let steps = self.steps(cfg, path);
        self.namespaces = scoped;
        let seq = Arc::new(Sequence {
            name: name.to_owned(),
            steps,
        });
        self.sequences.insert(name.to_owned(), seq.clone());
        Some(seq)
    }

    fn steps(&mut self, cfgs: &[StepConfig], path: &str) -> Vec<BuiltStep> {
        let mut out = Vec::with_capacity(cfgs.len());
        for (i, cfg) in cfgs.iter().enumerate() {
            let here = format!("{path}[{i}].{}", cfg.kind());
            if let Some(step) = self.step(cfg, &here) {
                out.push(BuiltStep {
                    step,
                    counters: self.metrics.step(&here),
                });
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
            StepConfig::Route(cases) => {
                let mut built = crate::route::RouteStep {
                    cases: Vec::new(),
                    otherwise: None,
                };
                for (j, case) in cases.iter().enumerate() {
                    let at = format!("{here}[{j}]");
                    if let Some(steps) = &case.otherwise {
                        built.otherwise = Some(self.steps(steps, &format!("{at}.otherwise")));
                        continue;
                    }
                    let (Some(when), Some(then)) = (&case.when, &case.then) else {
                        continue;
                    };
                    let condition = self.condition(when, &format!("{at}.when"));
                    let steps = self.steps(then, &format!("{at}.then"));
                    if let Some(c) = condition {
                        built.cases.push((c, steps));
                    }
                }
                Some(Step::Route(built))
            }
            StepConfig::Xslt(x) => {
                let file = self.loaded.resolve(&x.stylesheet.value);
                let access = match x.document_access {
                    busbar_config::DocumentAccessConfig::ConfigDir => {
                        busbar_libxml::DocumentAccess::UnderDir(self.loaded.base_dir.clone())
                    }
                    busbar_config::DocumentAccessConfig::None => busbar_libxml::DocumentAccess::Off,
                };
                match busbar_libxml::Stylesheet::compile_file(&file, access) {
                    Ok(sheet) => Some(Step::Xslt(crate::xslt::XsltStep {
                        sheet: Arc::new(sheet),
                        name: x.stylesheet.value.as_str().into(),
                        params: Arc::new(
                            x.params
                                .iter()
                                .map(|(k, v)| {
                                    let expr = match v {
                                        busbar_config::XsltParam::String(s) => {
                                            busbar_libxml::Param::string(s)
                                        }
                                        busbar_config::XsltParam::XPath { xpath } => xpath.clone(),
                                    };
                                    (k.clone(), expr)
                                })
                                .collect(),
                        ),
                    })),
                    Err(e) => {
                        let line = e.line.map(|l| format!(" (line {l})")).unwrap_or_default();
                        self.error(
                            line_of(&x.stylesheet),
                            format!("{here}.stylesheet"),
                            format!("{}: {}{line}", file.display(), e.message.trim()),
                        );
                        None
                    }
                }
            }
            StepConfig::WsseVerify(c) => match crate::wsse::VerifyStep::build(self.loaded, c, here)
            {
                Ok(step) => Some(Step::WsseVerify(step)),
                Err((line, at, msg)) => {
                    self.error(line, at, msg);
                    None
                }
            },
            StepConfig::WsseSecure(c) => match crate::wsse::SecureStep::build(self.loaded, c, here)
            {
                Ok(step) => Some(Step::WsseSecure(step)),
                Err((line, at, msg)) => {
                    self.error(line, at, msg);
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

impl Builder<'_> {
    fn condition(
        &mut self,
        when: &busbar_config::Condition,
        at: &str,
    ) -> Option<crate::route::Condition> {
        use crate::route::Condition;
        use busbar_xml::Test;
        let test = if let Some(s) = &when.equals {
            Test::Equals(s.clone())
        } else if let Some(re) = &when.matches {
            match regex::Regex::new(&re.value) {
                Ok(r) => Test::Matches(r),
                Err(e) => {
                    self.error(
                        line_of(re),
                        format!("{at}.matches"),
                        format!("invalid regex: {e}"),
                    );
                    return None;
                }
            }
        } else {
            Test::Exists
        };
        if let Some(h) = &when.header {
            return match HeaderName::from_bytes(h.value.as_bytes()) {
                Ok(name) => Some(Condition::Header(name, test)),
                Err(_) => {
                    self.error(
                        line_of(h),
                        format!("{at}.header"),
                        format!("invalid header name '{}'", h.value),
                    );
                    None
                }
            };
        }
        let xpath = when.xpath.as_ref()?;
        let ns = match busbar_xml::Namespaces::from_pairs(self.namespaces.iter()) {
            Ok(ns) => ns,
            Err(e) => {
                self.error(None, "namespaces".into(), e.to_string());
                return None;
            }
        };
        match busbar_xml::compile(&xpath.value, &ns) {
            Ok(path) => Some(Condition::Streaming(path, test)),
            Err(busbar_xml::CompileError::NotStreamable { .. }) => {
                let pairs: Vec<(String, String)> = self
                    .namespaces
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                match busbar_libxml::XPathExpr::compile(&xpath.value, &pairs) {
                    Ok(expr) => Some(Condition::Full(Arc::new(expr), test)),
                    Err(e) => {
                        self.error(
                            line_of(xpath),
                            format!("{at}.xpath"),
                            e.message.trim().to_owned(),
                        );
                        None
                    }
                }
            }
            Err(e) => {
                self.error(line_of(xpath), format!("{at}.xpath"), e.to_string());
                None
            }
        }
    }
}
