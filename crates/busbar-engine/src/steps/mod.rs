//! Steps: one module per step, the closed set of them, the builder context and the executor.
//!
//! Layout: each `steps/<name>.rs` holds, in this order, a pointer to its config struct (in
//! busbar-config's `model.rs`), `build` (compiles expressions, loads files and keys, resolves
//! endpoint names; every problem is recorded in the [`BuildCx`] with its config path), the
//! runtime struct, its [`Apply`] implementation, and unit tests on a hand-built `Exchange`.
//! This module lists the steps once (the `steps!` table below: one line per step), builds
//! nested step lists generically from `StepConfig::children()`, and runs sequences: the
//! executor, not each step, records per-step count, latency and errors and names a failing
//! step by its config path. See docs/contributing.md for adding a step.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use busbar_config::{ConfigError, LoadedConfig, StepConfig};
use busbar_core::body::{BodyBudget, BodyLimit};
use busbar_core::metrics::{Counters, Registry};
use busbar_core::trace::SpanKind;
use busbar_core::{Blame, ErrorKind, Exchange, Flow, MediationError, Phase};
use tracing::Instrument;

use crate::endpoint::Endpoint;
use crate::offload::Offload;

mod call;
mod fault;
mod jq;
pub mod json;
mod json_select;
mod json_xml;
mod keys;
mod log;
mod remove_header;
mod respond;
mod route;
mod scatter_gather;
mod sequence;
mod set_header;
mod sql;
mod wsse_secure;
mod wsse_verify;
mod xslt;

pub use route::Condition;
pub use sequence::Sequence;
pub use wsse_verify::RequestSigner;

/// Which engine a step with a fast path of its own (`xslt`, `jq`) runs on, as `busbar
/// validate` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEngine {
    /// The step's config path.
    pub step: String,
    /// What it runs: the stylesheet or program file as the config names it.
    pub subject: String,
    /// `Ok` for the fast path; otherwise the general engine, with the first reason the step
    /// is outside the fast path's class.
    pub fast: Result<(), String>,
    /// The general engine: `libxslt`, `jaq`.
    pub general: &'static str,
}

/// What every step does at run time: act on the current message, then say what comes next.
pub trait Apply {
    /// Applies the step to `ex`.
    fn apply(
        &self,
        ex: &mut Exchange,
        cx: &StepCx<'_>,
    ) -> impl Future<Output = Result<Flow, MediationError>> + Send;
}

/// The closed set of steps: config variant → module → runtime type, one line each. It
/// generates the [`Step`] enum, the build dispatch and the apply dispatch.
macro_rules! steps {
    ($($variant:ident => $module:ident :: $ty:ident),* $(,)?) => {
        /// A built step.
        #[derive(Debug)]
        pub enum Step {
            $(
                #[doc = concat!("The `", stringify!($module), "` step.")]
                $variant($module::$ty),
            )*
        }

        fn build_one(cfg: &StepConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Step, Failed> {
            match cfg {
                $(StepConfig::$variant(c) => $module::$ty::build(c, cx, here).map(Step::$variant),)*
            }
        }

        impl Step {
            // Each step's future is boxed: inline, this future would be as large as the
            // largest step's (kilobytes), and it is moved on every step of every request.
            async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
                match self {
                    $(Step::$variant(s) => Box::pin(s.apply(ex, cx)).await,)*
                }
            }
        }
    };
}

steps! {
    Call => call::CallStep,
    Fault => fault::FaultStep,
    Respond => respond::RespondStep,
    SetHeader => set_header::SetHeaderStep,
    RemoveHeader => remove_header::RemoveHeaderStep,
    Log => log::LogStep,
    Sequence => sequence::SequenceStep,
    Route => route::RouteStep,
    Xslt => xslt::XsltStep,
    WsseVerify => wsse_verify::VerifyStep,
    WsseSecure => wsse_secure::SecureStep,
    JsonSelect => json_select::JsonSelectStep,
    Jq => jq::JqStep,
    ScatterGather => scatter_gather::ScatterGatherStep,
    JsonToXml => json_xml::JsonToXmlStep,
    XmlToJson => json_xml::XmlToJsonStep,
    Sql => sql::SqlStep,
}

/// A step with what the executor keeps for it.
#[derive(Debug)]
pub struct BuiltStep {
    /// The step.
    pub step: Step,
    /// Its config name (`call`, `route`, ...).
    pub kind: &'static str,
    /// Its config path, like `proxies.XSLTProxy.out[0].xslt`: in errors, logs, metrics, spans.
    pub path: Arc<str>,
    /// Its metrics, labelled with its config path.
    pub counters: Arc<Counters>,
}

/// What the steps of one proxy share at run time, from the proxy's config.
#[derive(Debug, Clone)]
pub struct ProxyCx {
    /// Largest body a step may buffer.
    pub max_body: u64,
    /// The process's budget for request bodies held in memory, shared by every proxy.
    pub bodies: Arc<BodyBudget>,
    /// Check the rest of an XML body a streaming route decided on early (`xml_check: whole`).
    pub check_xml_tail: bool,
    /// Check the rest of a JSON body a streaming route decided on early (`json_check: whole`).
    pub check_json_tail: bool,
    /// Deepest JSON nesting accepted.
    pub json_max_depth: usize,
    /// Every endpoint of the runtime, by name.
    pub endpoints: Arc<BTreeMap<String, Arc<Endpoint>>>,
    /// The bounded pool CPU-heavy work runs on.
    pub offload: &'static Offload,
}

impl ProxyCx {
    /// Largest body a step may buffer, and the budget a request body is charged to.
    pub fn body_limit(&self) -> BodyLimit<'_> {
        BodyLimit {
            max: self.max_body,
            budget: Some(&self.bodies),
        }
    }
}

/// What one step sees at run time.
#[derive(Debug)]
pub struct StepCx<'a> {
    /// The proxy's limits, endpoints and CPU pool.
    pub proxy: &'a ProxyCx,
    /// This step's config path.
    pub path: &'a Arc<str>,
    /// This step's tracing span.
    pub span: &'a tracing::Span,
}

impl StepCx<'_> {
    /// Largest body the step may buffer, and the budget a request body it reads is charged
    /// to.
    pub fn max_body(&self) -> BodyLimit<'_> {
        self.proxy.body_limit()
    }

    /// Runs CPU-heavy `work` for a body of `size` bytes: inline when small, else on the
    /// bounded pool (see [`Offload`]).
    pub async fn offload<T: Send + 'static>(
        &self,
        size: u64,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, MediationError> {
        self.proxy.offload.run(size, work).await
    }
}

/// Runs `steps` in order until one answers or fails.
pub async fn run(
    steps: &[BuiltStep],
    ex: &mut Exchange,
    proxy: &ProxyCx,
) -> Result<Flow, MediationError> {
    use std::sync::atomic::Ordering::Relaxed;
    for s in steps {
        let span = tracing::trace_span!("step", kind = s.kind, path = &*s.path);
        let cx = StepCx {
            proxy,
            path: &s.path,
            span: &span,
        };
        let started = Instant::now();
        s.counters.requests.fetch_add(1, Relaxed);
        // A guard: an exchange abandoned mid-step (the client left) still leaves the step.
        let in_flight = InFlight::enter(&s.counters);
        // A sampled exchange records a span per step; spans the step starts (back-end
        // attempts, nested steps) hang under it. Named before the step runs: a step abandoned
        // mid-way (the client left) still exports its span, as cancelled.
        let recording = ex
            .trace
            .start_span(s.kind, SpanKind::Internal, None)
            .map(|mut r| {
                r.set("busbar.step.kind", s.kind);
                r.set("busbar.step.path", &*s.path);
                r
            });
        let outer = ex.trace.current;
        if let Some(r) = &recording {
            ex.trace.current = r.id();
        }
        let result = s.step.apply(ex, &cx).instrument(span.clone()).await;
        ex.trace.current = outer;
        drop(in_flight);
        s.counters.latency.observe(started.elapsed());
        if let Some(mut r) = recording {
            match &result {
                Ok(flow) => r.set("busbar.step.flow", format!("{flow:?}").to_lowercase()),
                Err(e) => {
                    r.set("error.type", e.kind.as_str());
                    r.fail(e.to_string());
                }
            }
            r.finish();
        }
        let flow = result.map_err(|e| {
            s.counters.error(e.kind);
            e.in_step(&s.path)
        })?;
        if flow == Flow::Respond {
            return Ok(Flow::Respond);
        }
    }
    Ok(Flow::Continue)
}

/// Counts a step in progress for as long as it lives.
struct InFlight<'a>(&'a Counters);

impl<'a> InFlight<'a> {
    fn enter(counters: &'a Counters) -> Self {
        counters
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(counters)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`run`] behind a box: what a step that runs nested steps (`route`, `sequence`) awaits, so
/// the future of a sequence does not contain itself.
pub fn run_nested<'a>(
    steps: &'a [BuiltStep],
    ex: &'a mut Exchange,
    proxy: &'a ProxyCx,
) -> Pin<Box<dyn Future<Output = Result<Flow, MediationError>> + Send + 'a>> {
    Box::pin(run(steps, ex, proxy))
}

/// The error for an `in` sequence that finished without producing a response.
pub fn no_response() -> MediationError {
    MediationError::new(
        ErrorKind::Internal,
        Blame::Internal,
        "The proxy's steps ended without a response (add a 'call' or 'respond' step)",
    )
}

/// Who is at fault for a message a step cannot read: its sender. In a request that is the
/// client (400); in the back end's answer, the back end (502).
pub fn senders_fault(phase: Phase) -> (ErrorKind, Blame) {
    match phase {
        Phase::Request => (ErrorKind::BadRequest, Blame::Client),
        Phase::Response => (ErrorKind::UpstreamReset, Blame::Upstream),
    }
}

/// A build problem already recorded in the [`BuildCx`] (with its path and line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

/// What building steps needs: the config, the endpoints, namespaces in scope, the built
/// named sequences, loaded keys; and where every problem is recorded.
pub struct BuildCx<'a> {
    /// The config being built.
    pub loaded: &'a LoadedConfig,
    /// The metrics registry steps take their counters from.
    pub metrics: &'a Registry,
    /// The endpoints, built.
    pub endpoints: &'a BTreeMap<String, Arc<Endpoint>>,
    /// The databases, open.
    pub databases: &'a BTreeMap<String, Arc<busbar_sql::Database>>,
    /// Namespace prefixes in scope for the steps being built.
    pub namespaces: BTreeMap<String, String>,
    /// The global bindings an XPath can use (the bad ones are reported once, at their keys).
    global_namespaces: BTreeMap<String, String>,
    errors: Vec<ConfigError>,
    sequences: HashMap<String, Arc<Sequence>>,
    /// The named sequences being built, outermost first.
    building: Vec<String>,
    /// The nested step lists of the step being built, in `StepConfig::children()` order.
    children: Vec<Vec<BuiltStep>>,
    /// Keys and certificates, each file read (and decrypted) once per build.
    pub keys: keys::KeyCache,
    /// The engine of each `xslt` and `jq` step built, for `busbar validate`.
    pub engines: Vec<StepEngine>,
}

impl<'a> BuildCx<'a> {
    /// A context for building the steps of `loaded`.
    pub fn new(
        loaded: &'a LoadedConfig,
        metrics: &'a Registry,
        endpoints: &'a BTreeMap<String, Arc<Endpoint>>,
        databases: &'a BTreeMap<String, Arc<busbar_sql::Database>>,
    ) -> Self {
        let mut cx = Self {
            loaded,
            metrics,
            endpoints,
            databases,
            namespaces: BTreeMap::new(),
            global_namespaces: BTreeMap::new(),
            errors: Vec::new(),
            sequences: HashMap::new(),
            building: Vec::new(),
            children: Vec::new(),
            keys: keys::KeyCache::default(),
            engines: Vec::new(),
        };
        cx.global_namespaces = cx.usable_namespaces("namespaces", &loaded.config.namespaces);
        cx.namespaces = cx.global_namespaces.clone();
        cx
    }

    /// Puts in scope the global bindings and a proxy's own (`proxies.NAME.namespaces`, which
    /// win), reporting the proxy's bad ones.
    pub fn scope_namespaces(&mut self, at: &str, own: &BTreeMap<String, String>) {
        let own = self.usable_namespaces(at, own);
        self.namespaces = self.global_namespaces.clone();
        self.namespaces.extend(own);
    }

    /// The bindings of `map` that an XPath can use. Each one that cannot is reported at its
    /// own key (`namespaces.1a`) and left out, so that it hides neither the others nor what
    /// is wrong in the expressions themselves.
    fn usable_namespaces(
        &mut self,
        at: &str,
        map: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut usable = BTreeMap::new();
        for (prefix, uri) in map {
            match busbar_xml::Namespaces::new().insert(prefix.as_str(), uri.as_str()) {
                Ok(()) => {
                    usable.insert(prefix.clone(), uri.clone());
                }
                Err(e) => {
                    self.fail(None, format!("{at}.{prefix}"), e.to_string());
                }
            }
        }
        usable
    }

    /// Records a problem at `path` (and `line`, from a spanned value) and returns the proof.
    pub fn fail(
        &mut self,
        line: Option<u64>,
        path: impl Into<String>,
        msg: impl Into<String>,
    ) -> Failed {
        self.errors.push(self.loaded.error(line, path, msg));
        Failed
    }

    /// The problems recorded so far.
    pub fn into_errors(self) -> Vec<ConfigError> {
        self.errors
    }

    /// True when no problem was recorded.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Builds a list of steps found at `path`; a step that fails is left out (its problem is
    /// recorded) so every problem of the config is found in one pass.
    pub fn steps(&mut self, cfgs: &[StepConfig], path: &str) -> Vec<BuiltStep> {
        let mut out = Vec::with_capacity(cfgs.len());
        for (i, cfg) in cfgs.iter().enumerate() {
            let here = format!("{path}[{i}].{}", cfg.kind());
            let nested: Vec<Vec<BuiltStep>> = cfg
                .children()
                .into_iter()
                .map(|(below, list)| self.steps(list, &format!("{here}{below}")))
                .collect();
            let outer = std::mem::replace(&mut self.children, nested);
            let built = build_one(cfg, self, &here);
            self.children = outer;
            if let Ok(step) = built {
                out.push(BuiltStep {
                    step,
                    kind: cfg.kind(),
                    counters: self.metrics.step(&here),
                    path: here.into(),
                });
            }
        }
        out
    }

    /// True while named sequence `name` is being built: a reference to it now is a cycle.
    pub fn is_building(&self, name: &str) -> bool {
        self.building.iter().any(|b| b == name)
    }

    /// The nested step lists of the step being built, in `StepConfig::children()` order
    /// (taken: a second call returns none).
    pub fn take_children(&mut self) -> Vec<Vec<BuiltStep>> {
        std::mem::take(&mut self.children)
    }

    /// Builds named sequence `name` once; `None` if there is no such sequence, or if it is
    /// being built (it runs itself: validation reports that, and [`BuildCx::is_building`]
    /// tells it apart).
    pub fn sequence(&mut self, name: &str) -> Option<Arc<Sequence>> {
        if let Some(s) = self.sequences.get(name) {
            return Some(s.clone());
        }
        if self.is_building(name) {
            return None;
        }
        let cfg = self.loaded.config.sequences.get(name)?;
        self.building.push(name.to_owned());
        // Named sequences see the global namespaces only, wherever they are used from.
        let scoped = std::mem::replace(&mut self.namespaces, self.global_namespaces.clone());
        let children = std::mem::take(&mut self.children);
        let steps = self.steps(cfg, &format!("sequences.{name}"));
        self.children = children;
        self.namespaces = scoped;
        self.building.pop();
        let seq = Arc::new(Sequence {
            name: name.to_owned(),
            steps,
        });
        self.sequences.insert(name.to_owned(), seq.clone());
        Some(seq)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Hand-built exchanges and build contexts for the steps' unit tests.

    use super::*;
    use busbar_core::Body;

    /// A config parsed from `yaml` (a listener is added), with `dir` as its directory.
    pub fn loaded(yaml: &str, dir: &std::path::Path) -> LoadedConfig {
        let text = format!("listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\n{yaml}");
        let config = busbar_config::parse(&text, "t.yaml", |_| None)
            .unwrap_or_else(|e| panic!("test config: {e}"));
        LoadedConfig {
            file: "t.yaml".into(),
            base_dir: dir.to_path_buf(),
            config,
        }
    }

    /// Builds the steps of sequence `s` of `loaded`, or the problems found.
    pub fn build(loaded: &LoadedConfig) -> Result<Vec<BuiltStep>, Vec<String>> {
        let metrics = Registry::default();
        let endpoints = BTreeMap::new();
        let databases = BTreeMap::new();
        let mut cx = BuildCx::new(loaded, &metrics, &endpoints, &databases);
        let steps = loaded
            .config
            .sequences
            .get("s")
            .map(|s| cx.steps(s, "sequences.s"))
            .unwrap_or_default();
        if cx.is_ok() {
            Ok(steps)
        } else {
            Err(cx.into_errors().iter().map(ToString::to_string).collect())
        }
    }

    /// Builds sequence `s` of `yaml`, runs it on a request with `body`, and gives the
    /// resulting body as text, or the error's reason.
    pub fn answer(yaml: &str, body: &str) -> Result<String, String> {
        let steps = build(&loaded(yaml, &std::env::temp_dir())).map_err(|e| format!("{e:?}"))?;
        let mut ex = exchange(&[], body.as_bytes());
        match run_steps(&steps, &mut ex) {
            Ok(_) => Ok(String::from_utf8_lossy(&body_of(&mut ex)).into_owned()),
            Err(e) => Err(e.reason.to_string()),
        }
    }

    /// A request exchange with `headers` and `body`.
    pub fn exchange(headers: &[(&str, &str)], body: &[u8]) -> Exchange {
        let mut b = http::Request::builder()
            .method("POST")
            .uri("/service/P?x=1");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (parts, ()) = b
            .body(())
            .map(http::Request::into_parts)
            .unwrap_or_else(|e| panic!("{e}"));
        Exchange::new(parts, Body::full(body.to_vec()), "P".into())
    }

    /// The proxy context steps run with in tests.
    pub fn proxy_cx() -> ProxyCx {
        ProxyCx {
            max_body: 1 << 20,
            bodies: Arc::default(),
            check_xml_tail: false,
            check_json_tail: false,
            json_max_depth: 64,
            endpoints: Arc::new(BTreeMap::new()),
            offload: Offload::shared(),
        }
    }

    /// Runs `steps` on `ex`.
    pub fn run_steps(steps: &[BuiltStep], ex: &mut Exchange) -> Result<Flow, MediationError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let cx = proxy_cx();
        rt.block_on(run(steps, ex, &cx))
    }

    /// The current message's body.
    pub fn body_of(ex: &mut Exchange) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(ex.body_mut().bytes(1 << 24))
            .map(|b| b.to_vec())
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

#[cfg(test)]
mod future_sizes {
    use super::testing::*;
    use super::*;

    /// A step's future and the executor's stay small, whatever the largest step holds: they
    /// are moved on every step of every request (and nested sequences box them again).
    #[test]
    fn step_and_executor_futures_stay_small() {
        let yaml = "sequences:\n  s:\n    - respond: { body: 'x' }\n    - scatter_gather:\n        branches:\n          - name: a\n            steps: [ { respond: { body: '{\"x\":1}' } } ]\n";
        let steps = build(&loaded(yaml, &std::env::temp_dir())).expect("steps");
        let cx = proxy_cx();
        let mut ex = exchange(&[], b"{}");
        let span = tracing::trace_span!("s");
        for s in &steps {
            let scx = StepCx {
                proxy: &cx,
                path: &s.path,
                span: &span,
            };
            let f = s.step.apply(&mut ex, &scx);
            assert!(
                std::mem::size_of_val(&f) <= 128,
                "{}: {}",
                s.kind,
                std::mem::size_of_val(&f)
            );
        }
        let f = run(&steps, &mut ex, &cx);
        assert!(
            std::mem::size_of_val(&f) <= 1024,
            "{}",
            std::mem::size_of_val(&f)
        );
    }
}
