//! WSDL 1.1 definitions as a process needs them: messages, port types, SOAP bindings,
//! services, partner link types, and the variable properties with their aliases.
//!
//! Several files make one [`Definitions`]: a process imports WSDLs, which may import more.
//! Schemas are not validated; only element and type names are kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::xml::{Doc, Name, NodeId};
use crate::xpath::{Env, XPath};
use crate::{DeployError, Problems};

/// WSDL 1.1.
pub const WSDL_NS: &str = "http://schemas.xmlsoap.org/wsdl/";
/// WSDL 1.1 SOAP 1.1 binding.
pub const WSDL_SOAP11_NS: &str = "http://schemas.xmlsoap.org/wsdl/soap/";
/// WSDL 1.1 SOAP 1.2 binding.
pub const WSDL_SOAP12_NS: &str = "http://schemas.xmlsoap.org/wsdl/soap12/";
/// WS-BPEL 2.0 partner link types.
pub const PLNK_NS: &str = "http://docs.oasis-open.org/wsbpel/2.0/plnktype";
/// The 2004/03 draft's partner link types, read the same way.
pub const PLNK_2004_NS: &str = "http://schemas.xmlsoap.org/ws/2004/03/partner-link/";
/// WS-BPEL 2.0 variable properties.
pub const VPROP_NS: &str = "http://docs.oasis-open.org/wsbpel/2.0/varprop";

/// A message part: typed by a global element or by a type.
#[derive(Clone, Debug)]
pub struct Part {
    pub name: String,
    pub element: Option<Name>,
    pub type_name: Option<Name>,
}

/// A WSDL message.
#[derive(Clone, Debug)]
pub struct Message {
    pub name: Name,
    pub parts: Vec<Part>,
}

impl Message {
    /// The part called `name`.
    pub fn part(&self, name: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.name == name)
    }
}

/// An operation of a port type.
#[derive(Clone, Debug)]
pub struct Operation {
    pub name: String,
    pub input: Option<Name>,
    pub output: Option<Name>,
    /// (fault name, message).
    pub faults: Vec<(String, Name)>,
}

impl Operation {
    /// Request-response (has an output), as opposed to one-way.
    pub fn is_sync(&self) -> bool {
        self.output.is_some()
    }
}

/// A port type.
#[derive(Clone, Debug)]
pub struct PortType {
    pub name: Name,
    pub operations: Vec<Operation>,
}

impl PortType {
    /// The operation called `name`.
    pub fn operation(&self, name: &str) -> Option<&Operation> {
        self.operations.iter().find(|o| o.name == name)
    }
}

/// `rpc` or `document`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Document,
    Rpc,
}

/// How one operation is carried in SOAP.
#[derive(Clone, Debug)]
pub struct OperationBinding {
    pub style: Style,
    pub soap_action: Option<String>,
    /// `soap:body namespace` (the RPC wrapper's namespace).
    pub namespace: Option<String>,
}

/// A binding of a port type.
#[derive(Clone, Debug)]
pub struct Binding {
    pub name: Name,
    pub port_type: Name,
    /// SOAP 1.2 rather than 1.1.
    pub soap12: bool,
    pub operations: HashMap<String, OperationBinding>,
}

/// A port of a service.
#[derive(Clone, Debug)]
pub struct Port {
    pub name: String,
    pub binding: Name,
    pub address: Option<String>,
}

/// A service.
#[derive(Clone, Debug)]
pub struct Service {
    pub name: Name,
    pub ports: Vec<Port>,
}

/// A partner link type: role name → port type.
#[derive(Clone, Debug)]
pub struct PartnerLinkType {
    pub name: Name,
    pub roles: Vec<(String, Name)>,
}

/// A variable property.
#[derive(Clone, Debug)]
pub struct Property {
    pub name: Name,
}

/// Where a property lives in messages of a type (or in an element or type variable).
#[derive(Clone, Debug)]
pub struct PropertyAlias {
    pub property: Name,
    pub message_type: Option<Name>,
    pub part: Option<String>,
    pub element: Option<Name>,
    pub type_name: Option<Name>,
    pub query: Option<XPath>,
    /// File and line, for errors.
    pub at: (PathBuf, u32),
}

/// Everything read from a process's WSDLs.
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    pub messages: HashMap<Name, Message>,
    pub port_types: HashMap<Name, PortType>,
    pub bindings: HashMap<Name, Binding>,
    pub services: HashMap<Name, Service>,
    pub partner_link_types: HashMap<Name, PartnerLinkType>,
    pub properties: HashMap<Name, Property>,
    pub aliases: Vec<PropertyAlias>,
    /// Global elements declared in inline schemas (name → type, when named).
    pub elements: HashMap<Name, Option<Name>>,
    read: Vec<PathBuf>,
}

impl Definitions {
    /// The message called `name`.
    pub fn message(&self, name: &Name) -> Option<&Message> {
        self.messages.get(name)
    }

    /// The port type called `name`.
    pub fn port_type(&self, name: &Name) -> Option<&PortType> {
        self.port_types.get(name)
    }

    /// The service called `name`.
    pub fn service(&self, name: &Name) -> Option<&Service> {
        self.services.get(name)
    }

    /// The binding called `name`.
    pub fn binding(&self, name: &Name) -> Option<&Binding> {
        self.bindings.get(name)
    }

    /// The partner link type called `name`.
    pub fn partner_link_type(&self, name: &Name) -> Option<&PartnerLinkType> {
        self.partner_link_types.get(name)
    }

    /// The alias of `property` for messages of `message_type`.
    pub fn alias_for_message(
        &self,
        property: &Name,
        message_type: &Name,
    ) -> Option<&PropertyAlias> {
        self.aliases.iter().find(|a| {
            a.property.is(&property.ns, &property.local)
                && a.message_type
                    .as_ref()
                    .is_some_and(|m| m.is(&message_type.ns, &message_type.local))
        })
    }

    /// The alias of `property` for an element or type variable.
    pub fn alias_for_value(
        &self,
        property: &Name,
        element: Option<&Name>,
        type_name: Option<&Name>,
    ) -> Option<&PropertyAlias> {
        self.aliases.iter().find(|a| {
            a.property.is(&property.ns, &property.local)
                && ((element.is_some() && a.element.as_ref() == element)
                    || (type_name.is_some() && a.type_name.as_ref() == type_name))
        })
    }

    /// Reads `file` (and, once each, the WSDLs it imports) into these definitions. It is
    /// imported at `from` (the importing file and the import's line): a file that cannot be
    /// read is reported there, naming it.
    pub fn read(&mut self, file: &Path, from: (&Path, u32), problems: &mut Problems) {
        let canon = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
        if self.read.contains(&canon) {
            return;
        }
        self.read.push(canon);
        let text = match crate::read_source(file) {
            Ok(t) => t,
            Err(_) if crate::harness::builtin_wsdl(file).is_some() && !file.exists() => {
                crate::harness::builtin_wsdl(file)
                    .unwrap_or_default()
                    .to_string()
            }
            Err(why) => {
                let (importer, line) = from;
                let why = format!("the imported WSDL {}: {why}", file.display());
                problems.push(DeployError::new(importer, line, why));
                return;
            }
        };
        let doc = match Doc::parse(&text) {
            Ok(d) => d,
            Err(e) => {
                problems.push(DeployError::new(file, e.line, e.message));
                return;
            }
        };
        let Some(root) = doc.root_element() else {
            return;
        };
        let root_name = doc.name(root).cloned().unwrap_or_default();
        if root_name.is("http://www.w3.org/2001/XMLSchema", "schema") {
            self.read_schema(&doc, root);
            return;
        }
        if !root_name.is(WSDL_NS, "definitions") {
            problems.push(DeployError::new(
                file,
                doc.line(root),
                format!(
                    "not a WSDL 1.1 document (root element {})",
                    root_name.clark()
                ),
            ));
            return;
        }
        let tns = doc
            .attr(root, "", "targetNamespace")
            .unwrap_or("")
            .to_string();
        let cx = Reader {
            doc: &doc,
            file,
            tns: &tns,
        };
        for child in doc.child_elements(root).collect::<Vec<_>>() {
            let Some(name) = doc.name(child).cloned() else {
                continue;
            };
            match (name.ns.as_str(), name.local.as_str()) {
                (WSDL_NS, "import") => {
                    if let Some(loc) = doc.attr(child, "", "location") {
                        let next = file.parent().unwrap_or(Path::new(".")).join(loc);
                        self.read(&next, (file, doc.line(child)), problems);
                    }
                }
                (WSDL_NS, "types") => {
                    for s in doc.child_elements(child).collect::<Vec<_>>() {
                        self.read_schema(&doc, s);
                        // Schemas may import other schema files; they only name types.
                    }
                }
                (WSDL_NS, "message") => cx.message(child, self, problems),
                (WSDL_NS, "portType") => cx.port_type(child, self, problems),
                (WSDL_NS, "binding") => cx.binding(child, self, problems),
                (WSDL_NS, "service") => cx.service(child, self, problems),
                (PLNK_NS | PLNK_2004_NS, "partnerLinkType") => cx.plnk(child, self, problems),
                (VPROP_NS | crate::model::BPEL_NS | crate::model::BPEL_2004_NS, "property") => {
                    if let Some(n) = doc.attr(child, "", "name") {
                        let name = Name::new(tns.clone(), n);
                        self.properties.insert(name.clone(), Property { name });
                    }
                }
                (
                    VPROP_NS | crate::model::BPEL_NS | crate::model::BPEL_2004_NS,
                    "propertyAlias",
                ) => cx.alias(child, self, problems),
                _ => {}
            }
        }
    }

    fn read_schema(&mut self, doc: &Doc, schema: NodeId) {
        let tns = doc.attr(schema, "", "targetNamespace").unwrap_or("");
        for e in doc.child_elements(schema).collect::<Vec<_>>() {
            if doc
                .name(e)
                .is_some_and(|n| n.is("http://www.w3.org/2001/XMLSchema", "element"))
            {
                if let Some(n) = doc.attr(e, "", "name") {
                    let ty = doc
                        .attr(e, "", "type")
                        .and_then(|t| doc.resolve_qname(e, t, true));
                    self.elements.insert(Name::new(tns, n), ty);
                }
            }
        }
    }
}

struct Reader<'a> {
    doc: &'a Doc,
    file: &'a Path,
    tns: &'a str,
}

impl Reader<'_> {
    fn err(&self, at: NodeId, message: String) -> DeployError {
        DeployError::new(self.file, self.doc.line(at), message)
    }

    fn qname(&self, at: NodeId, attr: &str, problems: &mut Problems) -> Option<Name> {
        let v = self.doc.attr(at, "", attr)?;
        match self.doc.resolve_qname(at, v, true) {
            Some(n) => Some(n),
            None => {
                problems.push(self.err(at, format!("{attr}=\"{v}\": prefix is not bound")));
                None
            }
        }
    }

    fn own_name(&self, at: NodeId) -> Name {
        Name::new(self.tns, self.doc.attr(at, "", "name").unwrap_or(""))
    }

    fn message(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let name = self.own_name(at);
        let mut parts = Vec::new();
        for p in self.doc.child_elements(at) {
            if !self.doc.name(p).is_some_and(|n| n.is(WSDL_NS, "part")) {
                continue;
            }
            parts.push(Part {
                name: self.doc.attr(p, "", "name").unwrap_or("").to_string(),
                element: self.qname(p, "element", problems),
                type_name: self.qname(p, "type", problems),
            });
        }
        defs.messages.insert(name.clone(), Message { name, parts });
    }

    fn port_type(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let name = self.own_name(at);
        let mut operations = Vec::new();
        for o in self.doc.child_elements(at) {
            if !self.doc.name(o).is_some_and(|n| n.is(WSDL_NS, "operation")) {
                continue;
            }
            let mut op = Operation {
                name: self.doc.attr(o, "", "name").unwrap_or("").to_string(),
                input: None,
                output: None,
                faults: Vec::new(),
            };
            for io in self.doc.child_elements(o) {
                let Some(n) = self.doc.name(io) else { continue };
                match n.local.as_str() {
                    "input" => op.input = self.qname(io, "message", problems),
                    "output" => op.output = self.qname(io, "message", problems),
                    "fault" => {
                        if let Some(m) = self.qname(io, "message", problems) {
                            op.faults
                                .push((self.doc.attr(io, "", "name").unwrap_or("").into(), m));
                        }
                    }
                    _ => {}
                }
            }
            operations.push(op);
        }
        defs.port_types
            .insert(name.clone(), PortType { name, operations });
    }

    fn binding(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let name = self.own_name(at);
        let Some(port_type) = self.qname(at, "type", problems) else {
            return;
        };
        let mut style = Style::Document;
        let mut soap12 = false;
        let mut operations = HashMap::new();
        for c in self.doc.child_elements(at) {
            let Some(n) = self.doc.name(c) else { continue };
            if n.local == "binding" && (n.ns == WSDL_SOAP11_NS || n.ns == WSDL_SOAP12_NS) {
                soap12 = n.ns == WSDL_SOAP12_NS;
                if self.doc.attr(c, "", "style") == Some("rpc") {
                    style = Style::Rpc;
                }
            }
        }
        for o in self.doc.child_elements(at) {
            if !self.doc.name(o).is_some_and(|n| n.is(WSDL_NS, "operation")) {
                continue;
            }
            let mut ob = OperationBinding {
                style,
                soap_action: None,
                namespace: None,
            };
            for c in self.doc.child_elements(o) {
                let Some(n) = self.doc.name(c) else { continue };
                if n.local == "operation" && n.ns != WSDL_NS {
                    ob.soap_action = self.doc.attr(c, "", "soapAction").map(str::to_string);
                    match self.doc.attr(c, "", "style") {
                        Some("rpc") => ob.style = Style::Rpc,
                        Some("document") => ob.style = Style::Document,
                        _ => {}
                    }
                }
                if n.is(WSDL_NS, "input") {
                    for b in self.doc.child_elements(c) {
                        if self.doc.name(b).is_some_and(|n| n.local == "body") {
                            ob.namespace = self.doc.attr(b, "", "namespace").map(str::to_string);
                        }
                    }
                }
            }
            operations.insert(self.doc.attr(o, "", "name").unwrap_or("").to_string(), ob);
        }
        defs.bindings.insert(
            name.clone(),
            Binding {
                name,
                port_type,
                soap12,
                operations,
            },
        );
    }

    fn service(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let name = self.own_name(at);
        let mut ports = Vec::new();
        for p in self.doc.child_elements(at) {
            if !self.doc.name(p).is_some_and(|n| n.is(WSDL_NS, "port")) {
                continue;
            }
            let Some(binding) = self.qname(p, "binding", problems) else {
                continue;
            };
            let address = self
                .doc
                .child_elements(p)
                .find(|a| self.doc.name(*a).is_some_and(|n| n.local == "address"))
                .and_then(|a| self.doc.attr(a, "", "location"))
                .map(str::to_string);
            ports.push(Port {
                name: self.doc.attr(p, "", "name").unwrap_or("").to_string(),
                binding,
                address,
            });
        }
        defs.services.insert(name.clone(), Service { name, ports });
    }

    fn plnk(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let name = self.own_name(at);
        let mut roles = Vec::new();
        for r in self.doc.child_elements(at) {
            if !self
                .doc
                .name(r)
                .is_some_and(|n| n.local == "role" && (n.ns == PLNK_NS || n.ns == PLNK_2004_NS))
            {
                continue;
            }
            if let Some(pt) = self.qname(r, "portType", problems) {
                roles.push((self.doc.attr(r, "", "name").unwrap_or("").to_string(), pt));
            }
        }
        defs.partner_link_types
            .insert(name.clone(), PartnerLinkType { name, roles });
    }

    fn alias(&self, at: NodeId, defs: &mut Definitions, problems: &mut Problems) {
        let Some(property) = self.qname(at, "propertyName", problems) else {
            problems.push(self.err(at, "propertyAlias without propertyName".into()));
            return;
        };
        let mut query = None;
        if let Some(q) = self
            .doc
            .child_elements(at)
            .find(|q| self.doc.name(*q).is_some_and(|n| n.local == "query"))
        {
            let text = self.doc.string_value(q);
            let doc = self.doc;
            let ns = move |p: &str| doc.lookup_ns(q, p).map(str::to_string);
            let ext = |_: &Name, _: usize| false;
            match XPath::compile(
                text.trim(),
                &Env {
                    ns: &ns,
                    extension: &ext,
                },
            ) {
                Ok(x) => query = Some(x),
                Err(e) => problems.push(self.err(q, format!("propertyAlias query: {e}"))),
            }
        }
        defs.aliases.push(PropertyAlias {
            property,
            message_type: self.qname(at, "messageType", problems),
            part: self.doc.attr(at, "", "part").map(str::to_string),
            element: self.qname(at, "element", problems),
            type_name: self.qname(at, "type", problems),
            query,
            at: (self.file.to_path_buf(), self.doc.line(at)),
        });
    }
}
