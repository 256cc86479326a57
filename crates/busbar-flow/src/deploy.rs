//! ODE's deployment descriptor, `deploy.xml`: which processes a folder holds, which services
//! they provide and which partner services they invoke.

use std::path::Path;

use crate::xml::{Doc, Name};
use crate::{DeployError, Problems};

/// The descriptor's namespace.
pub const DD_NS: &str = "http://www.apache.org/ode/schemas/dd/2007/03";
/// The namespace of ODE's older descriptors, read the same way.
pub const DD_2006_NS: &str = "http://ode.fivesight.com/schemas/2006/06/27/dd";

/// A service and port named in the descriptor.
#[derive(Clone, Debug)]
pub struct ServiceRef {
    pub service: Name,
    pub port: String,
}

/// One `<process>` of the descriptor.
#[derive(Clone, Debug)]
pub struct DeployedProcess {
    pub name: Name,
    /// Whether it is active (`<active>false</active>` deploys it retired: refused).
    pub active: bool,
    /// `<in-memory>true</in-memory>`.
    pub in_memory: bool,
    /// partner link → service it provides.
    pub provides: Vec<(String, ServiceRef)>,
    /// partner link → service it invokes.
    pub invokes: Vec<(String, ServiceRef)>,
    /// Line of the element.
    pub line: u32,
}

/// Reads `dir/deploy.xml`.
pub fn read(dir: &Path, problems: &mut Problems) -> Vec<DeployedProcess> {
    let file = dir.join("deploy.xml");
    let text = match crate::read_source(&file) {
        Ok(t) => t,
        Err(why) => {
            problems.push(DeployError::new(&file, 0, why));
            return Vec::new();
        }
    };
    let doc = match Doc::parse(&text) {
        Ok(d) => d,
        Err(e) => {
            problems.push(DeployError::new(&file, e.line, e.message));
            return Vec::new();
        }
    };
    let Some(root) = doc.root_element() else {
        return Vec::new();
    };
    let dd = doc.name(root).map(|n| n.ns.clone()).unwrap_or_default();
    let dd = if dd == DD_2006_NS { DD_2006_NS } else { DD_NS };
    if !doc.name(root).is_some_and(|n| n.is(dd, "deploy")) {
        problems.push(DeployError::new(
            &file,
            doc.line(root),
            format!("the root element must be {{{DD_NS}}}deploy"),
        ));
        return Vec::new();
    }
    let mut out = Vec::new();
    for p in doc.child_elements(root) {
        let line = doc.line(p);
        let Some(pname) = doc.name(p) else { continue };
        if !pname.is(dd, "process") {
            problems.push(DeployError::new(
                &file,
                line,
                format!("<{}> is not supported in deploy.xml", pname.local),
            ));
            continue;
        }
        let Some(name) = doc
            .attr(p, "", "name")
            .and_then(|n| doc.resolve_qname(p, n, true))
        else {
            problems.push(DeployError::new(
                &file,
                line,
                "process without a valid name",
            ));
            continue;
        };
        let mut proc = DeployedProcess {
            name,
            active: true,
            in_memory: false,
            provides: Vec::new(),
            invokes: Vec::new(),
            line,
        };
        for c in doc.child_elements(p) {
            let Some(cn) = doc.name(c) else { continue };
            let cline = doc.line(c);
            match cn.local.as_str() {
                "active" => proc.active = doc.string_value(c).trim() != "false",
                "in-memory" => proc.in_memory = doc.string_value(c).trim() == "true",
                "retired" => proc.active = doc.string_value(c).trim() != "true",
                "provide" | "invoke" => {
                    let pl = doc.attr(c, "", "partnerLink").unwrap_or("").to_string();
                    let svc = doc.child(c, dd, "service");
                    let sref = svc.and_then(|s| {
                        let n = doc.resolve_qname(s, doc.attr(s, "", "name")?, true)?;
                        let port = doc.attr(s, "", "port").unwrap_or("");
                        // Ports are NCNames, but some descriptors write them prefixed.
                        let port = port.rsplit(':').next().unwrap_or(port).to_string();
                        Some(ServiceRef { service: n, port })
                    });
                    match sref {
                        Some(s) if cn.local == "provide" => proc.provides.push((pl, s)),
                        Some(s) => proc.invokes.push((pl, s)),
                        None if cn.local == "provide" => problems.push(DeployError::new(
                            &file,
                            cline,
                            format!("provide for partner link '{pl}' names no service"),
                        )),
                        None => {}
                    }
                }
                "property" | "cleanup" | "process-events" | "type" | "mex-interceptors" => {}
                other => problems.push(DeployError::new(
                    &file,
                    cline,
                    format!("<{other}> in deploy.xml is not supported"),
                )),
            }
        }
        out.push(proc);
    }
    out
}
