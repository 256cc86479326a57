//! WS-BPEL 2.0 processes: parse, validate and compile them once, then run instances.
//!
//! Layout: [`xml`] is the mutable XML tree every variable and every deployment file lives in;
//! [`xpath`] compiles and evaluates XPath 1.0 over it. [`wsdl`] and [`deploy`] read a
//! process folder's WSDLs and `deploy.xml`; [`compile`] turns the `.bpel` file into a
//! [`model::Process`], refusing anything outside the supported subset with its file and line.
//! [`runtime`] runs instances on the caller's async runtime: an [`Engine`] routes each
//! incoming message to a waiting instance (by operation and correlation) or starts one, and
//! calls partners through the [`Partners`] trait the host provides. [`soap`] maps messages to
//! and from SOAP envelopes by the WSDL binding; [`harness`] runs test folders in ODE's
//! properties format against an in-process engine with its two mock partners.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod compile;
pub mod deploy;
mod durable;
pub mod harness;
pub mod model;
pub mod runtime;
pub mod soap;
pub mod store;
mod timeval;
pub mod wsdl;
pub mod xml;
pub mod xpath;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use runtime::{
    Engine, Fault, InstanceInfo, Limits, Outcome, PartnerCall, PartnerReply, Partners,
};

/// A problem found while deploying, with its file and line (0: the file as a whole).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {message}", file.display())]
pub struct DeployError {
    pub file: PathBuf,
    pub line: u32,
    pub message: String,
}

impl DeployError {
    /// A problem in `file` at `line`.
    pub fn new(file: &Path, line: u32, message: impl Into<String>) -> Self {
        DeployError {
            file: file.to_path_buf(),
            line,
            message: message.into(),
        }
    }
}

/// Problems collected while deploying.
pub type Problems = Vec<DeployError>;

/// The largest deployment file (`.bpel`, WSDL, `deploy.xml`) read: the bound of every file a
/// config names, far above any real one.
pub const MAX_SOURCE_BYTES: u64 = busbar_core::file::MAX_FILE_BYTES;

/// Reads a deployment file as UTF-8 text: a regular file (after symbolic links) of at most
/// [`MAX_SOURCE_BYTES`]. The error says why it cannot be read, without the file's name.
pub fn read_source(file: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("cannot read: not a regular file".into());
    }
    busbar_core::file::read_to_string(file).map_err(|e| format!("cannot read: {e}"))
}

/// A deployed process: the compiled process and its descriptor entry.
#[derive(Debug)]
pub struct Deployed {
    pub process: Arc<model::Process>,
    pub descriptor: deploy::DeployedProcess,
    pub dir: PathBuf,
}

/// Reads a process folder (`deploy.xml` and the `.bpel` files it names), compiling every
/// process. All problems are reported together.
pub fn deploy_dir(dir: &Path) -> Result<Vec<Deployed>, Vec<DeployError>> {
    let mut problems = Problems::new();
    let descriptors = deploy::read(dir, &mut problems);
    let mut bpel_files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bpel"))
            .collect(),
        Err(e) => {
            problems.push(DeployError::new(dir, 0, format!("cannot read folder: {e}")));
            Vec::new()
        }
    };
    bpel_files.sort();
    let mut compiled = Vec::new();
    for f in &bpel_files {
        if let Some(p) = compile::compile(f, &mut problems) {
            compiled.push(p);
        }
    }
    let mut out = Vec::new();
    for d in descriptors {
        let Some(i) = compiled
            .iter()
            .position(|p| p.name.ns == d.name.ns && p.name.local == d.name.local)
        else {
            if problems.is_empty() {
                problems.push(DeployError::new(
                    &dir.join("deploy.xml"),
                    d.line,
                    format!(
                        "no .bpel file in the folder defines process {}",
                        d.name.clark()
                    ),
                ));
            }
            continue;
        };
        let process = compiled.remove(i);
        for (pl, _) in d.provides.iter().chain(d.invokes.iter()) {
            if process.partner_link(pl).is_none() {
                problems.push(DeployError::new(
                    &dir.join("deploy.xml"),
                    d.line,
                    format!("process {} has no partner link '{pl}'", d.name.clark()),
                ));
            }
        }
        if !d.active {
            problems.push(DeployError::new(
                &dir.join("deploy.xml"),
                d.line,
                format!("process {} is not active", d.name.clark()),
            ));
        }
        out.push(Deployed {
            process: Arc::new(process),
            descriptor: d,
            dir: dir.to_path_buf(),
        });
    }
    if problems.is_empty() && out.is_empty() {
        problems.push(DeployError::new(
            &dir.join("deploy.xml"),
            0,
            "deploys no process",
        ));
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        problems.dedup();
        Err(problems)
    }
}
