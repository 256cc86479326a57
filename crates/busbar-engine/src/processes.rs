//! WS-BPEL processes (`processes:`): deployed when the runtime is built, served as SOAP
//! endpoints, calling their partners through endpoints.
//!
//! Layout: [`build`] deploys every folder into one shared [`busbar_flow::Engine`] (all of a
//! folder's problems at once, each naming its file and line), resolves each invoked partner
//! link to an endpoint (the one `partners:` names, else an endpoint for the WSDL address of
//! the service `deploy.xml` gives it) and returns a [`ProcessService`] per `provide`, routed
//! like a proxy at the path of its WSDL `soap:address`. [`serve`] is the request path of one
//! such service: SOAP in, `Engine::deliver`, SOAP out. [`EndpointPartners`] is how instances
//! call partners: a SOAP request through the endpoint's pool, timeouts and retries.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use busbar_config::{line_of, ConfigError, EndpointConfig, LoadedConfig};
use busbar_core::body::BodyLimit;
use busbar_core::metrics::Registry;
use busbar_core::{Body, Exchange, MediationError};
use busbar_flow::runtime::ProvidedService;
use busbar_flow::soap::{self, Interface, Version};
use busbar_flow::xml::Name;
use busbar_flow::{Engine, Limits, Outcome, PartnerCall, PartnerReply, Partners};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};

use crate::endpoint::Endpoint;

/// This machine's host name (the default node name of durable processes).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "busbar".to_owned())
}

/// Largest request a process service reads (as a proxy's default `max_body`).
pub const MAX_BODY: u64 = 10 * 1024 * 1024;

/// Largest partner answer read into memory.
const PARTNER_MAX_BODY: u64 = 10 * 1024 * 1024;

/// The deployed folders and the engine running their instances.
#[derive(Debug)]
pub struct Processes {
    /// The engine every folder's processes run in.
    pub engine: Engine,
    /// The folders, in config order.
    pub folders: Vec<Folder>,
}

/// One folder of `processes:`.
#[derive(Debug)]
pub struct Folder {
    /// Its name in the config.
    pub name: String,
    /// The folder, absolute.
    pub dir: PathBuf,
    /// The processes it deploys.
    pub processes: Vec<Name>,
}

impl Processes {
    /// The config name of the folder deploying `process`.
    pub fn folder_of(&self, process: &Name) -> Option<&str> {
        self.folders
            .iter()
            .find(|f| {
                f.processes
                    .iter()
                    .any(|p| p.is(&process.ns, &process.local))
            })
            .map(|f| f.name.as_str())
    }
}

/// A service a process provides, served at one path.
#[derive(Debug)]
pub struct ProcessService {
    /// The folder's config name.
    pub folder: Arc<str>,
    /// What the process provides: service, port type, binding.
    pub service: ProvidedService,
    /// The engine.
    pub engine: Engine,
    /// Most live instances of the folder's processes.
    pub max_instances: usize,
    /// The folder's processes (to count their instances).
    pub processes: Vec<Name>,
}

/// A service to route: listener index, path, service.
pub type Route = (usize, String, Arc<ProcessService>);

/// Deploys every folder of `processes:`; every problem goes to `errors` with its config path.
pub fn build(
    loaded: &LoadedConfig,
    endpoints: &BTreeMap<String, Arc<Endpoint>>,
    databases: &BTreeMap<String, Arc<busbar_sql::Database>>,
    listener_names: &[String],
    metrics: &Registry,
    workers: usize,
    errors: &mut Vec<ConfigError>,
) -> Option<(Arc<Processes>, Vec<Route>)> {
    let cfg = &loaded.config;
    if cfg.processes.is_empty() {
        return None;
    }
    let mut limits = Limits {
        max_instances: 0,
        instance_ttl: std::time::Duration::ZERO,
        ..Limits::default()
    };
    let mut deployed = Vec::new();
    let mut links: HashMap<(Name, String), Arc<Endpoint>> = HashMap::new();
    let mut adhoc: HashMap<String, Arc<Endpoint>> = HashMap::new();
    let mut folders = Vec::new();
    for (name, p) in &cfg.processes {
        let at = format!("processes.{name}");
        let line = line_of(&p.dir);
        limits.max_instances = limits.max_instances.saturating_add(p.max_instances);
        limits.instance_ttl = limits.instance_ttl.max(p.instance_ttl.0);
        let dir = loaded.resolve(&p.dir.value);
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if !dir.is_dir() {
            // Validation said so.
            continue;
        }
        let list = match busbar_flow::deploy_dir(&dir) {
            Ok(list) => list,
            Err(problems) => {
                for e in problems {
                    errors.push(loaded.error(line, at.clone(), e.to_string()));
                }
                continue;
            }
        };
        for (link, endpoint) in &p.partners {
            if !list.iter().any(|d| d.process.partner_link(link).is_some()) {
                errors.push(loaded.error(
                    line_of(endpoint),
                    format!("{at}.partners.{link}"),
                    format!("no process in {} has partner link '{link}'", dir.display()),
                ));
            }
        }
        for d in &list {
            let process = &d.process;
            for (link, sref) in &d.descriptor.invokes {
                let key = (process.name.clone(), link.clone());
                if let Some(e) = p.partners.get(link) {
                    if let Some(ep) = endpoints.get(&e.value) {
                        links.insert(key, ep.clone());
                    }
                    continue;
                }
                let address = process
                    .defs
                    .service(&sref.service)
                    .and_then(|s| s.ports.iter().find(|port| port.name == sref.port))
                    .and_then(|port| port.address.clone());
                let Some(address) = address else {
                    errors.push(loaded.error(
                        line,
                        at.clone(),
                        format!(
                            "partner link '{link}' of process {} has no endpoint: name one in '{at}.partners', or give port '{}' of service {} a soap:address",
                            process.name.clark(),
                            sref.port,
                            sref.service.clark()
                        ),
                    ));
                    continue;
                };
                if let Some(ep) = adhoc.get(&address) {
                    links.insert(key, ep.clone());
                    continue;
                }
                let built = EndpointConfig::for_url(&address).map_err(|e| {
                    vec![loaded.error(line, at.clone(), format!("address '{address}': {e}"))]
                });
                let built = built.and_then(|c| {
                    Endpoint::build(&format!("{name}.{link}"), &c, loaded, metrics, workers)
                });
                match built {
                    Ok(ep) => {
                        adhoc.insert(address, ep.clone());
                        links.insert(key, ep);
                    }
                    Err(es) => errors.extend(es.into_iter().map(|mut e| {
                        e.path = at.clone();
                        e.message = format!(
                            "partner link '{link}' of process {}: {}",
                            process.name.clark(),
                            e.message
                        );
                        e
                    })),
                }
            }
        }
        folders.push((
            name.clone(),
            p,
            dir,
            list.iter()
                .map(|d| d.process.name.clone())
                .collect::<Vec<_>>(),
        ));
        deployed.push(list);
    }
    let engine = Engine::new(limits, Arc::new(EndpointPartners { links }));
    // One store per database, shared by the folders that use it.
    let mut stores: HashMap<String, Arc<dyn busbar_flow::store::Store>> = HashMap::new();
    for (list, (name, p, _, _)) in deployed.into_iter().zip(&folders) {
        let persistence = p
            .persistence
            .as_ref()
            .filter(|ps| ps.mode == busbar_config::PersistenceMode::Durable)
            .and_then(|ps| {
                let db = databases.get(&ps.database.value)?;
                let in_memory = cfg.databases.get(&ps.database.value).is_some_and(|d| {
                    d.url
                        .as_ref()
                        .is_some_and(|u| u.expose().starts_with("sqlite::memory:"))
                        || (d.url.as_ref().is_none_or(|u| u.expose().is_empty())
                            && d.path.as_deref() == Some(":memory:"))
                });
                if in_memory {
                    tracing::warn!(
                        "processes.{name}: durable instances in the in-memory database '{}' are lost when busbar stops",
                        ps.database.value
                    );
                }
                let store = match stores.get(&ps.database.value) {
                    Some(s) => s.clone(),
                    None => match crate::process_store::SqlStore::new(db.clone()) {
                        Ok(s) => {
                            let s: Arc<dyn busbar_flow::store::Store> = Arc::new(s);
                            stores.insert(ps.database.value.clone(), s.clone());
                            s
                        }
                        Err(e) => {
                            errors.push(loaded.error(
                                line_of(&ps.database),
                                format!("processes.{name}.persistence.database"),
                                e,
                            ));
                            return None;
                        }
                    },
                };
                Some(busbar_flow::runtime::Persistence {
                    store,
                    node: ps.node.clone().unwrap_or_else(host_name),
                    completion: match ps.completion {
                        busbar_config::CompletionPolicy::Never => {
                            busbar_flow::runtime::Completion::Never
                        }
                        busbar_config::CompletionPolicy::OnFault => {
                            busbar_flow::runtime::Completion::OnFault
                        }
                        busbar_config::CompletionPolicy::Always => {
                            busbar_flow::runtime::Completion::Always
                        }
                    },
                    lease: ps.lease.0,
                    retention: ps.retention.0,
                })
            });
        engine.add_with(list, persistence.as_ref());
    }
    let mut routes = Vec::new();
    let mut out_folders = Vec::new();
    for (name, p, dir, processes) in folders {
        let at = format!("processes.{name}");
        let line = line_of(&p.dir);
        let listener = match &p.listener {
            Some(l) => listener_names.iter().position(|n| *n == l.value),
            None => (!listener_names.is_empty()).then_some(0),
        };
        let folder: Arc<str> = name.as_str().into();
        for service in engine.services() {
            if !processes
                .iter()
                .any(|n| n.is(&service.process.ns, &service.process.local))
            {
                continue;
            }
            let what = format!(
                "service {} port '{}' (partner link '{}' of process {})",
                service.service.service.clark(),
                service.service.port,
                service.partner_link,
                service.process.clark()
            );
            let Some(address) = service.address.clone() else {
                errors.push(loaded.error(
                    line,
                    at.clone(),
                    format!(
                        "{what} has no soap:address in its WSDL: its path is where it is served"
                    ),
                ));
                continue;
            };
            let Some(path) = address_path(&address) else {
                errors.push(loaded.error(
                    line,
                    at.clone(),
                    format!("{what}: '{address}' is not a URL"),
                ));
                continue;
            };
            if Interface::provided(&service).is_none() {
                errors.push(loaded.error(
                    line,
                    at.clone(),
                    format!(
                        "{what}: port type {} is not defined",
                        service.port_type.clark()
                    ),
                ));
                continue;
            }
            let Some(listener) = listener else { continue };
            routes.push((
                listener,
                path,
                Arc::new(ProcessService {
                    folder: folder.clone(),
                    service,
                    engine: engine.clone(),
                    max_instances: p.max_instances,
                    processes: processes.clone(),
                }),
            ));
        }
        out_folders.push(Folder {
            name,
            dir,
            processes,
        });
    }
    Some((
        Arc::new(Processes {
            engine,
            folders: out_folders,
        }),
        routes,
    ))
}

/// The path of an address (`http://host:port/path?q` → `/path`).
fn address_path(address: &str) -> Option<String> {
    let uri: http::Uri = address.parse().ok()?;
    uri.scheme()?;
    Some(uri.path().to_string())
}

/// The request path of a process service: SOAP request → `deliver` → SOAP answer. A request
/// that cannot be read or does not fit the service gets a `Client` (`Sender`) fault with 500,
/// as SOAP 1.1 has it; a fault of the process, a 500 fault with its name; a one-way
/// operation, 202.
pub async fn serve(
    svc: &ProcessService,
    ex: &mut Exchange,
    max_body: BodyLimit<'_>,
) -> Result<Response<Body>, MediationError> {
    let header = |name: &str| ex.request.headers.get(name).and_then(|v| v.to_str().ok());
    let content_type = header("content-type").map(str::to_string);
    let action = soap::soap_action(header("soapaction"), content_type.as_deref());
    let fallback = Version::from_content_type(content_type.as_deref());
    let bytes = ex.body_mut().bytes(max_body).await?;
    let Some(iface) = Interface::provided(&svc.service) else {
        // Checked when built.
        return Err(MediationError::internal(
            "the service's port type is not defined",
        ));
    };
    let decoded = soap::decode_request(&iface, action.as_deref(), &bytes).and_then(|r| {
        // The envelope's version must be the one the Content-Type announces.
        match soap::version_mismatch(fallback, r.version) {
            Some(e) => Err(e),
            None => Ok(r),
        }
    });
    let req = match decoded {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(folder = &*svc.folder, "{e}");
            return Ok(answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                fallback,
                soap::unread_fault(fallback, &e),
            ));
        }
    };
    let version = req.version;
    if starts_instance(svc, &req.operation) && live_instances(svc) >= svc.max_instances {
        let f = busbar_flow::Fault::busbar(
            "tooManyInstances",
            format!(
                "the limit of {} running instances of '{}' is reached",
                svc.max_instances, svc.folder
            ),
        );
        return Ok(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            version,
            soap::encode_fault(version, &f),
        ));
    }
    let outcome = svc
        .engine
        .deliver(
            &svc.service.service.service,
            &req.operation,
            Arc::new(req.message),
        )
        .await;
    Ok(match outcome {
        Outcome::Reply(msg) => answer(
            StatusCode::OK,
            version,
            soap::encode_reply(&iface, version, &req.operation, &msg),
        ),
        Outcome::Fault(f) => answer(fault_status(&f), version, soap::encode_fault(version, &f)),
        Outcome::Accepted => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::ACCEPTED;
            r
        }
    })
}

/// The status of a fault's answer: 503 for the engine's faults that ask the client to send
/// again later, 500 for the others.
fn fault_status(f: &busbar_flow::Fault) -> StatusCode {
    let retry = f.name.ns == busbar_flow::runtime::BUSBAR_FAULT_NS
        && matches!(f.name.local.as_str(), "leaseLost" | "storeUnavailable");
    if retry {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// True when `operation` of the service can start an instance.
fn starts_instance(svc: &ProcessService, operation: &str) -> bool {
    let p = &svc.service.defs;
    let Some(link) = p.partner_link(&svc.service.partner_link) else {
        return false;
    };
    p.receives
        .iter()
        .any(|r| r.create_instance && r.partner_link == link && r.operation == operation)
}

/// Live instances of the service's folder.
fn live_instances(svc: &ProcessService) -> usize {
    svc.engine.alive_of(&svc.processes)
}

fn answer(status: StatusCode, version: Version, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(version.content_type()),
    );
    r
}

/// Partner calls through endpoints, by (process, partner link).
#[derive(Debug)]
pub struct EndpointPartners {
    links: HashMap<(Name, String), Arc<Endpoint>>,
}

type Reply<'a> = Pin<Box<dyn Future<Output = Result<PartnerReply, String>> + Send + 'a>>;

impl Partners for EndpointPartners {
    fn invoke<'a>(&'a self, call: PartnerCall<'a>) -> Reply<'a> {
        Box::pin(async move {
            let key = (call.process.clone(), call.partner_link.to_string());
            let endpoint = self.links.get(&key).ok_or_else(|| {
                "no endpoint serves this partner link (deploy.xml names no service for it)"
                    .to_string()
            })?;
            let iface = Interface::partner(&call)
                .ok_or_else(|| format!("port type {} is not defined", call.port_type.clark()))?;
            let out =
                soap::encode_request(&iface, call.operation, &call.message).map_err(|e| e.0)?;
            let mut req = Request::builder()
                .method(http::Method::POST)
                .uri("/")
                .header(CONTENT_TYPE, out.content_type());
            if let Some(a) = out.soap_action_header() {
                req = req.header("SOAPAction", a);
            }
            let req = req
                .body(Body::full(out.body))
                .map_err(|e| format!("cannot build the request: {e}"))?;
            // Boxed: the endpoint's future is large, and this one lives inside an instance's.
            let resp = Box::pin(endpoint.send(req))
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            if call.one_way && status.is_success() {
                return Ok(PartnerReply::Accepted);
            }
            let mut body = resp.into_body();
            let bytes = body
                .bytes(PARTNER_MAX_BODY)
                .await
                .map_err(|e| format!("reading the answer: {e}"))?;
            match soap::decode_response(&iface, call.operation, &bytes) {
                Ok(r) => Ok(r),
                Err(e) if status.is_success() => Err(e),
                Err(e) => Err(format!("HTTP {status}: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::address_path;

    #[test]
    fn a_services_path_is_its_address_path() {
        assert_eq!(
            address_path("http://localhost:8080/ode/processes/Hello?wsdl").as_deref(),
            Some("/ode/processes/Hello")
        );
        assert_eq!(address_path("http://h").as_deref(), Some("/"));
        assert_eq!(address_path("Hello"), None);
    }
}
