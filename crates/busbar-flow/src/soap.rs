//! SOAP envelopes ⇄ process messages, by the WSDL binding.
//!
//! Layout: an [`Interface`] is what a service or a partner is seen through (its port type,
//! its binding when the WSDL has one, and the definitions they live in). The provider side
//! reads a request ([`decode_request`]) and writes a reply ([`encode_reply`]) or a fault
//! ([`encode_fault`], [`client_fault`]); the partner side writes a request
//! ([`encode_request`]) and reads the answer ([`decode_response`]).
//!
//! A process message is a `<message>` element (no namespace) with one child per WSDL part,
//! named by the part: an element-typed part's child holds the element itself, a type-typed
//! part's child holds the value. Document/literal carries the parts' contents as the Body's
//! children, in order; RPC/literal wraps them in an element named after the operation
//! (`operationResponse` for the answer) in the binding's `soap:body namespace`, one accessor
//! per part, named by the part. Without a binding (some WSDLs only have port types) the
//! operation is taken to be document/literal over SOAP 1.1.

use std::sync::Arc;

use crate::runtime::{Fault, PartnerCall, PartnerReply, ProvidedService, BUSBAR_FAULT_NS};
use crate::wsdl::{Binding, Definitions, Message, Operation, PortType, Style};
use crate::xml::{Doc, Kind, Name, NodeId};

/// SOAP 1.1 envelopes.
pub const SOAP11_ENV: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// SOAP 1.2 envelopes.
pub const SOAP12_ENV: &str = "http://www.w3.org/2003/05/soap-envelope";

/// The SOAP version of an envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V11,
    V12,
}

impl Version {
    /// The envelope namespace.
    pub fn ns(self) -> &'static str {
        match self {
            Version::V11 => SOAP11_ENV,
            Version::V12 => SOAP12_ENV,
        }
    }

    /// The Content-Type of a message of this version.
    pub fn content_type(self) -> &'static str {
        match self {
            Version::V11 => "text/xml; charset=utf-8",
            Version::V12 => "application/soap+xml; charset=utf-8",
        }
    }

    /// The version a request's Content-Type announces (SOAP 1.1 unless it says 1.2): what an
    /// answer to a request whose body could not be read is written in.
    pub fn from_content_type(ct: Option<&str>) -> Version {
        match ct {
            Some(ct)
                if ct
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/soap+xml") =>
            {
                Version::V12
            }
            _ => Version::V11,
        }
    }
}

/// The action of a request: the `SOAPAction` header (SOAP 1.1) or the `action` parameter of
/// the Content-Type (SOAP 1.2), without its quotes; none when empty.
pub fn soap_action(header: Option<&str>, content_type: Option<&str>) -> Option<String> {
    let unquote = |s: &str| s.trim().trim_matches('"').to_string();
    if let Some(h) = header.map(unquote).filter(|h| !h.is_empty()) {
        return Some(h);
    }
    content_type?
        .split(';')
        .skip(1)
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("action"))
        .map(|(_, v)| unquote(v))
        .filter(|v| !v.is_empty())
}

/// Why a SOAP message could not be read: said to the sender as a `Client`/`Sender` fault, or
/// as a `MustUnderstand` fault for a header it insists on that nobody here understands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SoapError(pub String, pub Unread);

/// Which fault a request that could not be read gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// `Client` (SOAP 1.2: `Sender`).
    Client,
    /// `Client` (`Sender`) naming busbar's fault of this local name (`unknownOperation`,
    /// `invalidMessage`): SOAP 1.2 as the subcode, SOAP 1.1 as the detail's element.
    Named(&'static str),
    /// `MustUnderstand`: a header with `mustUnderstand` on, addressed to us.
    MustUnderstand,
    /// `VersionMismatch`: the envelope is not of the SOAP version its Content-Type announces.
    VersionMismatch,
}

fn err(msg: impl Into<String>) -> SoapError {
    SoapError(msg.into(), Unread::Client)
}

/// A request whose operation no port type operation takes.
fn unknown_operation(msg: impl Into<String>) -> SoapError {
    SoapError(msg.into(), Unread::Named("unknownOperation"))
}

/// A request whose Body does not hold its operation's input message.
fn invalid_message(msg: impl Into<String>) -> SoapError {
    SoapError(msg.into(), Unread::Named("invalidMessage"))
}

/// Refuses a header block marked `mustUnderstand` that is addressed to this node (no
/// actor/role, or the "next"/"ultimate receiver" one): process services understand none.
fn check_headers(doc: &Doc, version: Version) -> Result<(), SoapError> {
    let Some(root) = doc.root_element() else {
        return Ok(());
    };
    let Some(header) = doc.child(root, version.ns(), "Header") else {
        return Ok(());
    };
    for h in doc.child_elements(header) {
        let on = matches!(
            doc.attr(h, version.ns(), "mustUnderstand").map(str::trim),
            Some("1") | Some("true")
        );
        let for_us = match version {
            Version::V11 => doc
                .attr(h, SOAP11_ENV, "actor")
                .is_none_or(|a| a.trim() == "http://schemas.xmlsoap.org/soap/actor/next"),
            Version::V12 => doc.attr(h, SOAP12_ENV, "role").is_none_or(|r| {
                matches!(
                    r.trim(),
                    "http://www.w3.org/2003/05/soap-envelope/role/next"
                        | "http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver"
                )
            }),
        };
        if on && for_us {
            let name = doc.name(h).map(Name::clark).unwrap_or_default();
            return Err(SoapError(
                format!("header {name} must be understood, and this service understands no header"),
                Unread::MustUnderstand,
            ));
        }
    }
    Ok(())
}

/// A service or partner as SOAP sees it.
#[derive(Clone, Copy, Debug)]
pub struct Interface<'a> {
    pub defs: &'a Definitions,
    pub port_type: &'a PortType,
    pub binding: Option<&'a Binding>,
}

impl<'a> Interface<'a> {
    /// A service a process provides; none when its port type is not defined.
    pub fn provided(s: &'a ProvidedService) -> Option<Interface<'a>> {
        let defs = &s.defs.defs;
        Some(Interface {
            defs,
            port_type: defs.port_type(&s.port_type)?,
            binding: s.binding.as_ref(),
        })
    }

    /// The partner a call goes to: the binding of the port `deploy.xml` names, if any.
    pub fn partner(call: &'a PartnerCall<'a>) -> Option<Interface<'a>> {
        let defs = call.defs;
        let binding = call
            .service
            .and_then(|s| {
                defs.service(&s.service)?
                    .ports
                    .iter()
                    .find(|p| p.name == s.port)
            })
            .and_then(|p| defs.binding(&p.binding));
        Some(Interface {
            defs,
            port_type: defs.port_type(call.port_type)?,
            binding,
        })
    }

    /// The SOAP version the binding uses (1.1 without one).
    pub fn version(&self) -> Version {
        match self.binding {
            Some(b) if b.soap12 => Version::V12,
            _ => Version::V11,
        }
    }

    fn style(&self, op: &str) -> Style {
        self.binding
            .and_then(|b| b.operations.get(op))
            .map_or(Style::Document, |o| o.style)
    }

    fn rpc_ns(&self, op: &str) -> Option<&'a str> {
        self.binding
            .and_then(|b| b.operations.get(op))
            .and_then(|o| o.namespace.as_deref())
    }

    /// The `soapAction` of an operation, when the binding gives a non-empty one.
    pub fn action(&self, op: &str) -> Option<&'a str> {
        self.binding
            .and_then(|b| b.operations.get(op))
            .and_then(|o| o.soap_action.as_deref())
            .filter(|a| !a.is_empty())
    }

    fn message(&self, name: Option<&Name>) -> Option<&'a Message> {
        name.and_then(|n| self.defs.message(n))
    }

    fn operation(&self, name: &str) -> Result<&'a Operation, SoapError> {
        self.port_type.operation(name).ok_or_else(|| {
            err(format!(
                "port type {} has no operation '{name}'",
                self.port_type.name.clark()
            ))
        })
    }
}

/// A request read from an envelope.
#[derive(Debug)]
pub struct Request {
    pub version: Version,
    pub operation: String,
    pub message: Doc,
}

/// The envelope's version and its Body element.
fn open(bytes: &[u8]) -> Result<(Doc, Version, NodeId), SoapError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| err("not a SOAP envelope: the body is not UTF-8 text"))?;
    let doc = Doc::parse(text).map_err(|e| err(format!("not a SOAP envelope: {e}")))?;
    let root = doc
        .root_element()
        .ok_or_else(|| err("not a SOAP envelope: no root element"))?;
    let name = doc.name(root).cloned().unwrap_or_default();
    let version = if name.is(SOAP11_ENV, "Envelope") {
        Version::V11
    } else if name.is(SOAP12_ENV, "Envelope") {
        Version::V12
    } else {
        return Err(err(format!(
            "not a SOAP envelope: the root element is {}",
            name.clark()
        )));
    };
    let body = envelope_body(&doc, root, version)?;
    Ok((doc, version, body))
}

/// The one Body of an envelope, after checking its children: an optional Header first, then
/// one Body (SOAP 1.1 allows qualified elements after it; SOAP 1.2 nothing). A second Body or
/// Header would leave the message open to two readings.
fn envelope_body(doc: &Doc, root: NodeId, version: Version) -> Result<NodeId, SoapError> {
    let kids: Vec<NodeId> = doc.child_elements(root).collect();
    let is = |n: NodeId, local: &str| doc.name(n).is_some_and(|x| x.is(version.ns(), local));
    let bodies: Vec<NodeId> = kids.iter().copied().filter(|k| is(*k, "Body")).collect();
    let headers = kids.iter().filter(|k| is(**k, "Header")).count();
    let body = match bodies.as_slice() {
        [] => return Err(err("the SOAP envelope has no Body")),
        [one] => *one,
        more => {
            return Err(err(format!(
                "the SOAP envelope has {} Body elements; it must have one",
                more.len()
            )))
        }
    };
    if headers > 1 {
        return Err(err(format!(
            "the SOAP envelope has {headers} Header elements; it may have one"
        )));
    }
    let at = kids.iter().position(|k| *k == body).unwrap_or(0);
    let before = &kids[..at];
    if before.len() > usize::from(headers == 1) || (headers == 1 && !is(kids[0], "Header")) {
        return Err(err(
            "the SOAP envelope's Header must be its first element and the Body come next",
        ));
    }
    if let Some(after) = kids.get(at + 1) {
        let name = doc.name(*after).map(Name::clark).unwrap_or_default();
        let qualified = doc.name(*after).is_some_and(|n| !n.ns.is_empty());
        if version == Version::V12 || !qualified || is(*after, "Header") {
            return Err(err(format!(
                "unexpected element {name} after the SOAP Body"
            )));
        }
    }
    Ok(body)
}

/// The fault for a request whose envelope is of another SOAP version than its Content-Type
/// announces (`announced`), or `None` when they agree.
pub fn version_mismatch(announced: Version, envelope: Version) -> Option<SoapError> {
    (announced != envelope).then(|| {
        let name = |v: Version| match v {
            Version::V11 => "SOAP 1.1 (text/xml)",
            Version::V12 => "SOAP 1.2 (application/soap+xml)",
        };
        SoapError(
            format!(
                "the Content-Type announces {} but the envelope is {}",
                name(announced),
                name(envelope)
            ),
            Unread::VersionMismatch,
        )
    })
}

/// Reads a request to the service `iface`: which operation, and the message.
pub fn decode_request(
    iface: &Interface<'_>,
    action: Option<&str>,
    bytes: &[u8],
) -> Result<Request, SoapError> {
    let (doc, version, body) = open(bytes)?;
    check_headers(&doc, version)?;
    let elems: Vec<NodeId> = doc.child_elements(body).collect();
    let stray = doc
        .children(body)
        .iter()
        .any(|c| matches!(doc.kind(*c), Kind::Text(t) if !t.trim_ascii().is_empty()));
    if stray {
        return Err(invalid_message(
            "text in the SOAP Body outside its elements",
        ));
    }
    let by_action = action.and_then(|a| {
        iface
            .port_type
            .operations
            .iter()
            .find(|o| iface.action(&o.name) == Some(a))
    });
    let op = match by_action {
        Some(op) => op,
        None => choose(iface, &doc, elems.first().copied())?,
    };
    let input = iface.message(op.input.as_ref());
    let message = match iface.style(&op.name) {
        Style::Rpc => {
            let wrapper = rpc_wrapper(iface, &doc, &elems, &op.name, &op.name)?;
            rpc_parts(&doc, wrapper, input)?
        }
        Style::Document => doc_parts(&doc, &elems, input)?,
    };
    Ok(Request {
        version,
        operation: op.name.clone(),
        message,
    })
}

/// The operation a request without a matching action is for, by its first Body element.
fn choose<'a>(
    iface: &Interface<'a>,
    doc: &Doc,
    first: Option<NodeId>,
) -> Result<&'a Operation, SoapError> {
    let pt = iface.port_type;
    let Some(first) = first else {
        return Err(unknown_operation(format!(
            "the SOAP Body is empty: no operation of port type {} to call",
            pt.name.clark()
        )));
    };
    let name = doc.name(first).cloned().unwrap_or_default();
    let found = pt.operations.iter().find(|o| match iface.style(&o.name) {
        Style::Rpc => name.local == o.name && iface.rpc_ns(&o.name).is_none_or(|ns| ns == name.ns),
        Style::Document => iface
            .message(o.input.as_ref())
            .and_then(|m| m.parts.first())
            .is_some_and(|p| match &p.element {
                Some(e) => e.is(&name.ns, &name.local),
                None => name.ns.is_empty() && name.local == p.name,
            }),
    });
    found.ok_or_else(|| {
        unknown_operation(format!(
            "no operation of port type {} takes element {}",
            pt.name.clark(),
            name.clark()
        ))
    })
}

/// The RPC wrapper: the single Body element, named `local` in the binding's namespace.
fn rpc_wrapper(
    iface: &Interface<'_>,
    doc: &Doc,
    elems: &[NodeId],
    op: &str,
    local: &str,
) -> Result<NodeId, SoapError> {
    let Some(&w) = elems.first() else {
        return Err(invalid_message(format!(
            "the SOAP Body has no '{local}' element"
        )));
    };
    let name = doc.name(w).cloned().unwrap_or_default();
    let ns_ok = iface.rpc_ns(op).is_none_or(|ns| ns == name.ns);
    if name.local != local || !ns_ok {
        let want = Name::new(iface.rpc_ns(op).unwrap_or(""), local);
        return Err(invalid_message(format!(
            "expected element {} in the SOAP Body, found {}",
            want.clark(),
            name.clark()
        )));
    }
    Ok(w)
}

/// An empty process message.
fn new_message() -> (Doc, NodeId) {
    Doc::with_root(Name::new("", "message"))
}

/// Copies the children of `src` in `from` under `to`.
fn copy_children(out: &mut Doc, to: NodeId, from: &Doc, src: NodeId) {
    for c in from.children(src) {
        out.append_copy(to, from, *c);
    }
}

/// Document/literal: the i-th Body element is the i-th part's content.
fn doc_parts(doc: &Doc, elems: &[NodeId], def: Option<&Message>) -> Result<Doc, SoapError> {
    let (mut out, root) = new_message();
    let Some(def) = def else {
        return Ok(out);
    };
    for (i, p) in def.parts.iter().enumerate() {
        let Some(&e) = elems.get(i) else {
            return Err(invalid_message(format!("part '{}' missing", p.name)));
        };
        let name = doc.name(e).cloned().unwrap_or_default();
        let holder = out.append_element(root, Name::new("", p.name.as_str()));
        match &p.element {
            Some(want) => {
                if !want.is(&name.ns, &name.local) {
                    return Err(invalid_message(format!(
                        "part '{}' must be element {}, found {}",
                        p.name,
                        want.clark(),
                        name.clark()
                    )));
                }
                out.append_copy(holder, doc, e);
            }
            None => copy_children(&mut out, holder, doc, e),
        }
    }
    if let Some(&extra) = elems.get(def.parts.len()) {
        let name = doc.name(extra).cloned().unwrap_or_default();
        return Err(invalid_message(format!(
            "unexpected element {} in the SOAP Body (message {} has {} part(s))",
            name.clark(),
            def.name.clark(),
            def.parts.len()
        )));
    }
    Ok(out)
}

/// RPC/literal: the wrapper's children are the parts, by name.
fn rpc_parts(doc: &Doc, wrapper: NodeId, def: Option<&Message>) -> Result<Doc, SoapError> {
    let (mut out, root) = new_message();
    let Some(def) = def else {
        return Ok(out);
    };
    for p in &def.parts {
        let accessor = doc
            .child_elements(wrapper)
            .find(|c| doc.name(*c).is_some_and(|n| n.local == p.name));
        let Some(accessor) = accessor else {
            return Err(invalid_message(format!("part '{}' missing", p.name)));
        };
        let holder = out.append_element(root, Name::new("", p.name.as_str()));
        copy_children(&mut out, holder, doc, accessor);
    }
    Ok(out)
}

/// A new envelope of `version`; returns it and its Body.
fn envelope(version: Version) -> (Doc, NodeId) {
    let p = match version {
        Version::V11 => "soapenv",
        Version::V12 => "env",
    };
    let (mut doc, env) = Doc::with_root(Name::new(version.ns(), "Envelope").with_prefix(p));
    doc.declare_ns(env, p, version.ns());
    let body = doc.append_element(env, Name::new(version.ns(), "Body").with_prefix(p));
    (doc, body)
}

fn finish(doc: &Doc) -> Vec<u8> {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    s.push_str(&doc.to_xml(NodeId::ROOT));
    s.into_bytes()
}

/// Writes the parts of `msg` (by `def`) into `body`: document style as the parts' contents,
/// RPC style inside a wrapper named `wrapper` in the binding's namespace.
fn write_parts(
    iface: &Interface<'_>,
    op: &str,
    wrapper: &str,
    def: Option<&Message>,
    msg: &Doc,
    out: &mut Doc,
    body: NodeId,
) {
    let root = msg.root_element();
    let part = |name: &str| root.and_then(|r| msg.child(r, "", name));
    let Some(def) = def else { return };
    match iface.style(op) {
        Style::Document => {
            for p in &def.parts {
                let Some(holder) = part(&p.name) else {
                    continue;
                };
                if p.element.is_some() {
                    for e in msg.child_elements(holder) {
                        out.append_copy(body, msg, e);
                    }
                } else {
                    let e = out.append_element(body, Name::new("", p.name.as_str()));
                    copy_children(out, e, msg, holder);
                }
            }
        }
        Style::Rpc => {
            let ns = iface.rpc_ns(op).unwrap_or("");
            let prefix = if ns.is_empty() { "" } else { "m" };
            let w = out.append_element(body, Name::new(ns, wrapper).with_prefix(prefix));
            if !ns.is_empty() {
                out.declare_ns(w, prefix, ns);
            }
            for p in &def.parts {
                let Some(holder) = part(&p.name) else {
                    continue;
                };
                let e = out.append_element(w, Name::new("", p.name.as_str()));
                copy_children(out, e, msg, holder);
            }
        }
    }
}

/// The answer envelope for `operation` carrying reply `msg`.
pub fn encode_reply(
    iface: &Interface<'_>,
    version: Version,
    operation: &str,
    msg: &Doc,
) -> Vec<u8> {
    let (mut out, body) = envelope(version);
    let def = iface
        .port_type
        .operation(operation)
        .and_then(|o| iface.message(o.output.as_ref()));
    let wrapper = format!("{operation}Response");
    write_parts(iface, operation, &wrapper, def, msg, &mut out, body);
    finish(&out)
}

/// busbar's own faults that blame the sender (what it sent cannot be handled), as opposed to
/// faults the process raised.
pub fn is_client_fault(f: &Fault) -> bool {
    f.name.ns == BUSBAR_FAULT_NS
        && matches!(
            f.name.local.as_str(),
            "unknownOperation" | "invalidMessage" | "noMatchingInstance" | "unknownService"
        )
}

/// A fault envelope: `code` is the fault's QName (SOAP 1.1's faultcode; SOAP 1.2's subcode
/// under `Receiver`, or `Sender` when `client`), the text its reason, the data its detail.
/// Who a fault blames, as the envelope's top-level code says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Top {
    Client,
    Server,
    MustUnderstand,
    VersionMismatch,
}

fn fault_envelope(
    version: Version,
    code: Option<&Name>,
    top: Top,
    text: &str,
    data: Option<&Doc>,
) -> Vec<u8> {
    let (mut out, body) = envelope(version);
    let env = version.ns();
    let p = match version {
        Version::V11 => "soapenv",
        Version::V12 => "env",
    };
    let f = out.append_element(body, Name::new(env, "Fault").with_prefix(p));
    // The code's text is a QName: its prefix is declared on the element that holds it.
    let qname = |out: &mut Doc, at: NodeId, n: &Name| {
        let prefix = if n.prefix.is_empty() || n.prefix == p || n.prefix == "xml" {
            "f"
        } else {
            n.prefix.as_str()
        };
        if n.ns.is_empty() {
            out.append_text(at, &n.local);
        } else {
            out.declare_ns(at, prefix, &n.ns);
            out.append_text(at, &format!("{prefix}:{}", n.local));
        }
    };
    let detail_name = match version {
        Version::V11 => {
            let c = out.append_element(f, Name::new("", "faultcode"));
            match code {
                Some(n) if top == Top::Server => qname(&mut out, c, n),
                _ => out.append_text(
                    c,
                    &format!(
                        "{p}:{}",
                        match top {
                            Top::Client => "Client",
                            Top::Server => "Server",
                            Top::MustUnderstand => "MustUnderstand",
                            Top::VersionMismatch => "VersionMismatch",
                        }
                    ),
                ),
            }
            let s = out.append_element(f, Name::new("", "faultstring"));
            out.append_text(s, text);
            Name::new("", "detail")
        }
        Version::V12 => {
            let c = out.append_element(f, Name::new(env, "Code").with_prefix(p));
            let v = out.append_element(c, Name::new(env, "Value").with_prefix(p));
            out.append_text(
                v,
                &format!(
                    "{p}:{}",
                    match top {
                        Top::Client => "Sender",
                        Top::Server => "Receiver",
                        Top::MustUnderstand => "MustUnderstand",
                        Top::VersionMismatch => "VersionMismatch",
                    }
                ),
            );
            if let Some(n) = code.filter(|_| top == Top::Client || top == Top::Server) {
                let sc = out.append_element(c, Name::new(env, "Subcode").with_prefix(p));
                let sv = out.append_element(sc, Name::new(env, "Value").with_prefix(p));
                qname(&mut out, sv, n);
            }
            let r = out.append_element(f, Name::new(env, "Reason").with_prefix(p));
            let t = out.append_element(r, Name::new(env, "Text").with_prefix(p));
            out.set_attr(
                t,
                Name::new(crate::xml::XML_NS, "lang").with_prefix("xml"),
                "en",
            );
            out.append_text(t, text);
            Name::new(env, "Detail").with_prefix(p)
        }
    };
    // SOAP 1.1 has no subcode: a `Client` fault of busbar's own carries its name as the
    // detail's element, so a client can tell `noMatchingInstance` from `invalidMessage`.
    let named_client = match (version, top, code) {
        (Version::V11, Top::Client, Some(n)) if !n.ns.is_empty() => Some(n),
        _ => None,
    };
    if let Some(n) = named_client.filter(|_| data.is_none_or(|d| d.root_element().is_none())) {
        let d = out.append_element(f, detail_name.clone());
        let prefix = if n.prefix.is_empty() || n.prefix == p {
            "f"
        } else {
            n.prefix.as_str()
        };
        let e = out.append_element(
            d,
            Name::new(n.ns.as_str(), n.local.as_str()).with_prefix(prefix),
        );
        out.declare_ns(e, prefix, &n.ns);
    }
    if let Some(data) = data.filter(|d| d.root_element().is_some()) {
        let d = out.append_element(f, detail_name);
        if let Some(root) = data.root_element() {
            let is_message = data.name(root).is_some_and(|n| n.is("", "message"));
            if is_message {
                for part in data.child_elements(root) {
                    copy_children(&mut out, d, data, part);
                }
            } else {
                out.append_copy(d, data, root);
            }
        }
    }
    finish(&out)
}

/// The fault envelope for a fault the engine answered: busbar's client-side faults become
/// `Client` (`Sender`) faults, any other carries its own name, text and data.
pub fn encode_fault(version: Version, fault: &Fault) -> Vec<u8> {
    let top = if is_client_fault(fault) {
        Top::Client
    } else {
        Top::Server
    };
    fault_envelope(
        version,
        Some(&fault.name),
        top,
        &fault.text,
        fault.data.as_deref(),
    )
}

/// A `Client` (SOAP 1.2: `Sender`) fault for a request that could not be read.
pub fn client_fault(version: Version, text: &str) -> Vec<u8> {
    fault_envelope(version, None, Top::Client, text, None)
}

/// The fault for a request that could not be read: `Client` (`Sender`), or `MustUnderstand`.
pub fn unread_fault(version: Version, e: &SoapError) -> Vec<u8> {
    match e.1 {
        Unread::Client => client_fault(version, &e.0),
        Unread::Named(local) => {
            let name = Name::new(BUSBAR_FAULT_NS, local).with_prefix("bb");
            fault_envelope(version, Some(&name), Top::Client, &e.0, None)
        }
        Unread::MustUnderstand => fault_envelope(version, None, Top::MustUnderstand, &e.0, None),
        Unread::VersionMismatch => fault_envelope(version, None, Top::VersionMismatch, &e.0, None),
    }
}

/// A partner request: the envelope, its version and its action.
#[derive(Debug)]
pub struct OutRequest {
    pub body: Vec<u8>,
    pub version: Version,
    pub action: Option<String>,
}

impl OutRequest {
    /// The Content-Type to send (SOAP 1.2 carries the action in it).
    pub fn content_type(&self) -> String {
        match (self.version, &self.action) {
            (Version::V12, Some(a)) => format!("{}; action=\"{a}\"", self.version.content_type()),
            (v, _) => v.content_type().to_string(),
        }
    }

    /// The `SOAPAction` header to send (SOAP 1.1 only; quoted, empty when none).
    pub fn soap_action_header(&self) -> Option<String> {
        match self.version {
            Version::V11 => Some(format!("\"{}\"", self.action.as_deref().unwrap_or(""))),
            Version::V12 => None,
        }
    }
}

/// The envelope calling `operation` of a partner with message `msg`.
pub fn encode_request(
    iface: &Interface<'_>,
    operation: &str,
    msg: &Doc,
) -> Result<OutRequest, SoapError> {
    let op = iface.operation(operation)?;
    let version = iface.version();
    let (mut out, body) = envelope(version);
    let def = iface.message(op.input.as_ref());
    write_parts(iface, operation, operation, def, msg, &mut out, body);
    Ok(OutRequest {
        body: finish(&out),
        version,
        action: iface.action(operation).map(str::to_string),
    })
}

/// Reads a partner's answer to `operation`: its output message, one of the operation's WSDL
/// faults (recognised by the element in the fault's detail), or an error for any other fault
/// or anything unreadable.
pub fn decode_response(
    iface: &Interface<'_>,
    operation: &str,
    bytes: &[u8],
) -> Result<PartnerReply, String> {
    let op = iface.operation(operation).map_err(|e| e.0)?;
    let (doc, version, body) = open(bytes).map_err(|e| e.0)?;
    let elems: Vec<NodeId> = doc.child_elements(body).collect();
    if let Some(&f) = elems
        .first()
        .filter(|f| doc.name(**f).is_some_and(|n| n.is(version.ns(), "Fault")))
    {
        return read_fault(iface, op, &doc, version, f);
    }
    let output = iface.message(op.output.as_ref());
    let message = match iface.style(operation) {
        Style::Rpc => {
            let w = rpc_wrapper(
                iface,
                &doc,
                &elems,
                operation,
                &format!("{operation}Response"),
            )
            .map_err(|e| e.0)?;
            rpc_parts(&doc, w, output)
        }
        Style::Document => doc_parts(&doc, &elems, output),
    }
    .map_err(|e| format!("the answer does not fit operation '{operation}': {e}"))?;
    Ok(PartnerReply::Output(Arc::new(message)))
}

fn read_fault(
    iface: &Interface<'_>,
    op: &Operation,
    doc: &Doc,
    version: Version,
    f: NodeId,
) -> Result<PartnerReply, String> {
    let (detail, code, text) = match version {
        Version::V11 => (
            doc.child(f, "", "detail"),
            doc.child(f, "", "faultcode").map(|c| doc.string_value(c)),
            doc.child(f, "", "faultstring").map(|c| doc.string_value(c)),
        ),
        Version::V12 => {
            let env = version.ns();
            let code = doc.child(f, env, "Code").map(|c| {
                let mut v = doc.child(c, env, "Value").map(|v| doc.string_value(v));
                let mut sc = doc.child(c, env, "Subcode");
                while let Some(s) = sc {
                    v = doc.child(s, env, "Value").map(|v| doc.string_value(v));
                    sc = doc.child(s, env, "Subcode");
                }
                v.unwrap_or_default()
            });
            let text = doc
                .child(f, env, "Reason")
                .and_then(|r| doc.child(r, env, "Text"))
                .map(|t| doc.string_value(t));
            (doc.child(f, env, "Detail"), code, text)
        }
    };
    if let Some(el) = detail.and_then(|d| doc.child_elements(d).next()) {
        let name = doc.name(el).cloned().unwrap_or_default();
        for (fname, mname) in &op.faults {
            let Some(m) = iface.defs.message(mname) else {
                continue;
            };
            let Some(p) = m.parts.first() else { continue };
            if p.element
                .as_ref()
                .is_some_and(|e| e.is(&name.ns, &name.local))
            {
                let (mut out, root) = new_message();
                let holder = out.append_element(root, Name::new("", p.name.as_str()));
                out.append_copy(holder, doc, el);
                return Ok(PartnerReply::Fault {
                    name: fname.clone(),
                    message: Some(Arc::new(out)),
                });
            }
        }
    }
    Err(format!(
        "the partner answered a SOAP fault: {} {}",
        code.unwrap_or_default().trim(),
        text.unwrap_or_default().trim()
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::wsdl::{OperationBinding, Part};

    const NS: &str = "urn:hello";

    fn part_el(name: &str, el: &str) -> Part {
        Part {
            name: name.into(),
            element: Some(Name::new(NS, el)),
            type_name: None,
        }
    }

    fn part_ty(name: &str) -> Part {
        Part {
            name: name.into(),
            element: None,
            type_name: Some(Name::new(crate::model::XSD_NS, "string")),
        }
    }

    /// Port type `{urn:hello}Hello`: `sayHello` (element parts, with a fault), `greet` (two
    /// type parts), `notify` (one-way).
    fn defs() -> Definitions {
        let mut d = Definitions::default();
        let msgs = [
            ("In", vec![part_el("parameters", "sayHello")]),
            ("Out", vec![part_el("parameters", "sayHelloResponse")]),
            ("Bad", vec![part_el("fault", "badName")]),
            ("GreetIn", vec![part_ty("first"), part_ty("last")]),
            ("GreetOut", vec![part_ty("text")]),
        ];
        for (n, parts) in msgs {
            let name = Name::new(NS, n);
            d.messages.insert(name.clone(), Message { name, parts });
        }
        let op = |n: &str, i: &str, o: Option<&str>, f: Vec<(String, Name)>| Operation {
            name: n.into(),
            input: Some(Name::new(NS, i)),
            output: o.map(|o| Name::new(NS, o)),
            faults: f,
        };
        let pt = PortType {
            name: Name::new(NS, "Hello"),
            operations: vec![
                op(
                    "sayHello",
                    "In",
                    Some("Out"),
                    vec![("badName".into(), Name::new(NS, "Bad"))],
                ),
                op("greet", "GreetIn", Some("GreetOut"), vec![]),
                op("notify", "GreetIn", None, vec![]),
            ],
        };
        d.port_types.insert(pt.name.clone(), pt);
        d
    }

    fn binding(style: Style, soap12: bool) -> Binding {
        let mut operations = HashMap::new();
        for (op, action) in [
            ("sayHello", "urn:say"),
            ("greet", ""),
            ("notify", "urn:notify"),
        ] {
            operations.insert(
                op.to_string(),
                OperationBinding {
                    style,
                    soap_action: Some(action.into()),
                    namespace: (style == Style::Rpc).then(|| "urn:rpc".to_string()),
                },
            );
        }
        Binding {
            name: Name::new(NS, "B"),
            port_type: Name::new(NS, "Hello"),
            soap12,
            operations,
        }
    }

    fn iface<'a>(d: &'a Definitions, b: Option<&'a Binding>) -> Interface<'a> {
        Interface {
            defs: d,
            port_type: d.port_type(&Name::new(NS, "Hello")).unwrap(),
            binding: b,
        }
    }

    fn env11(body: &str) -> String {
        format!(
            r#"<s:Envelope xmlns:s="{SOAP11_ENV}"><s:Header/><s:Body>{body}</s:Body></s:Envelope>"#
        )
    }

    fn env12(body: &str) -> String {
        format!(r#"<e:Envelope xmlns:e="{SOAP12_ENV}"><e:Body>{body}</e:Body></e:Envelope>"#)
    }

    fn xml(d: &Doc) -> String {
        d.to_xml(NodeId::ROOT)
    }

    #[test]
    fn a_header_that_must_be_understood_is_refused_with_a_must_understand_fault() {
        let d = defs();
        let i = iface(&d, None);
        let call = r#"<h:sayHello xmlns:h="urn:hello"><toWhom>Ann</toWhom></h:sayHello>"#;
        let with = |header: &str| {
            format!(
                r#"<s:Envelope xmlns:s="{SOAP11_ENV}"><s:Header>{header}</s:Header><s:Body>{call}</s:Body></s:Envelope>"#
            )
        };
        // Refused: marked for us; accepted: not marked, marked "0", or for another actor.
        for h in [
            r#"<x:T xmlns:x="urn:x" s:mustUnderstand="1"/>"#,
            r#"<x:T xmlns:x="urn:x" s:mustUnderstand="1" s:actor="http://schemas.xmlsoap.org/soap/actor/next"/>"#,
        ] {
            let e = decode_request(&i, None, with(h).as_bytes()).unwrap_err();
            assert_eq!(e.1, Unread::MustUnderstand, "{h}");
            assert!(e.0.contains("{urn:x}T"), "{e}");
            let out = String::from_utf8(unread_fault(Version::V11, &e)).unwrap();
            assert!(
                out.contains("<faultcode>soapenv:MustUnderstand</faultcode>"),
                "{out}"
            );
        }
        for h in [
            r#"<x:T xmlns:x="urn:x"/>"#,
            r#"<x:T xmlns:x="urn:x" s:mustUnderstand="0"/>"#,
            r#"<x:T xmlns:x="urn:x" s:mustUnderstand="1" s:actor="urn:someone-else"/>"#,
        ] {
            assert!(decode_request(&i, None, with(h).as_bytes()).is_ok(), "{h}");
        }
        let v12 = format!(
            r#"<e:Envelope xmlns:e="{SOAP12_ENV}"><e:Header><x:T xmlns:x="urn:x" e:mustUnderstand="true"/></e:Header><e:Body>{call}</e:Body></e:Envelope>"#
        );
        let e = decode_request(&i, None, v12.as_bytes()).unwrap_err();
        let out = String::from_utf8(unread_fault(Version::V12, &e)).unwrap();
        assert!(
            out.contains("<env:Value>env:MustUnderstand</env:Value>"),
            "{out}"
        );
        assert!(!out.contains("Subcode"), "{out}");
        // An envelope open to two readings: two Bodies, two Headers, a Header after the Body,
        // anything after a SOAP 1.2 Body.
        let env =
            |ns: &str, inner: &str| format!(r#"<s:Envelope xmlns:s="{ns}">{inner}</s:Envelope>"#);
        let body = format!("<s:Body>{call}</s:Body>");
        for (ns, inner, why) in [
            (SOAP11_ENV, format!("{body}{body}"), "2 Body elements"),
            (
                SOAP11_ENV,
                format!("<s:Header/><s:Header/>{body}"),
                "2 Header elements",
            ),
            (
                SOAP11_ENV,
                format!("{body}<s:Header/>"),
                "Header must be its first",
            ),
            (
                SOAP11_ENV,
                format!("<x xmlns='urn:x'/>{body}"),
                "Header must be its first",
            ),
            (
                SOAP11_ENV,
                format!("{body}<plain/>"),
                "unexpected element plain",
            ),
            (
                SOAP12_ENV,
                format!("{body}<x:y xmlns:x='urn:x'/>"),
                "unexpected element {urn:x}y",
            ),
        ] {
            let e = decode_request(&i, None, env(ns, &inner).as_bytes()).unwrap_err();
            assert_eq!(e.1, Unread::Client, "{inner}");
            assert!(e.0.contains(why), "{inner}: {e}");
        }
        // SOAP 1.1 allows qualified elements after the Body.
        let extra = env(
            SOAP11_ENV,
            &format!("<s:Header/>{body}<x:y xmlns:x='urn:x'/>"),
        );
        assert!(decode_request(&i, None, extra.as_bytes()).is_ok());
        // An envelope of the other version than the Content-Type announces.
        assert!(version_mismatch(Version::V11, Version::V11).is_none());
        let e = version_mismatch(Version::V11, Version::V12).unwrap();
        let out = String::from_utf8(unread_fault(Version::V11, &e)).unwrap();
        assert!(
            out.contains("<faultcode>soapenv:VersionMismatch</faultcode>"),
            "{out}"
        );
        let e = version_mismatch(Version::V12, Version::V11).unwrap();
        let out = String::from_utf8(unread_fault(Version::V12, &e)).unwrap();
        assert!(
            out.contains("<env:Value>env:VersionMismatch</env:Value>"),
            "{out}"
        );
        let bad = decode_request(&i, None, b"nope").unwrap_err();
        let out = String::from_utf8(unread_fault(Version::V11, &bad)).unwrap();
        assert!(
            out.contains("<faultcode>soapenv:Client</faultcode>"),
            "{out}"
        );
    }

    /// Copied elements keep the declarations in scope where they were (the envelope's too),
    /// so QName values inside them stay bound.
    #[test]
    fn document_requests_are_chosen_by_first_element_and_keep_the_element_in_the_part() {
        let d = defs();
        let i = iface(&d, None);
        let body =
            env11(r#"<h:sayHello xmlns:h="urn:hello"><toWhom>Zoë &amp; co</toWhom></h:sayHello>"#);
        let r = decode_request(&i, None, body.as_bytes()).unwrap();
        assert_eq!(r.operation, "sayHello");
        assert_eq!(r.version, Version::V11);
        assert_eq!(
            xml(&r.message),
            format!(
                r#"<message><parameters><h:sayHello xmlns:h="urn:hello"><toWhom>Zoë &amp; co</toWhom></h:sayHello></parameters></message>"#
            )
        );
    }

    #[test]
    fn the_soap_action_chooses_the_operation_before_the_body() {
        let d = defs();
        let b = binding(Style::Document, false);
        let i = iface(&d, Some(&b));
        let r = decode_request(
            &i,
            Some("urn:notify"),
            env11("<first>a</first><last>b</last>").as_bytes(),
        )
        .unwrap();
        assert_eq!(r.operation, "notify");
        assert_eq!(
            xml(&r.message),
            "<message><first>a</first><last>b</last></message>"
        );
        // The same body without the action: the first element names the part of `greet`.
        let r =
            decode_request(&i, None, env11("<first>a</first><last>b</last>").as_bytes()).unwrap();
        assert_eq!(r.operation, "greet");
    }

    #[test]
    fn unknown_elements_missing_parts_and_extra_elements_are_refused_clearly() {
        let d = defs();
        let i = iface(&d, None);
        let e = decode_request(&i, None, env11(r#"<x:other xmlns:x="urn:x"/>"#).as_bytes())
            .unwrap_err();
        assert_eq!(
            e.0,
            "no operation of port type {urn:hello}Hello takes element {urn:x}other"
        );
        assert_eq!(e.1, Unread::Named("unknownOperation"));
        let out = String::from_utf8(unread_fault(Version::V11, &e)).unwrap();
        assert!(
            out.contains("<detail><bb:unknownOperation xmlns:bb=\"urn:busbar:bpel\"/></detail>"),
            "{out}"
        );
        let e = decode_request(&i, None, env11("<first>a</first>").as_bytes()).unwrap_err();
        assert_eq!(e.0, "part 'last' missing");
        assert_eq!(e.1, Unread::Named("invalidMessage"));
        let e = decode_request(&i, None, env11("<first>a</first><last/><more/>").as_bytes())
            .unwrap_err();
        assert!(e.0.starts_with("unexpected element more"), "{e}");
        assert_eq!(e.1, Unread::Named("invalidMessage"));
        let e = decode_request(&i, None, env11("").as_bytes()).unwrap_err();
        assert!(e.0.starts_with("the SOAP Body is empty"), "{e}");
        assert_eq!(e.1, Unread::Named("unknownOperation"));
        let e = decode_request(&i, None, env11("<first>a</first>x<last/>").as_bytes()).unwrap_err();
        assert_eq!(e.0, "text in the SOAP Body outside its elements");
        assert_eq!(e.1, Unread::Named("invalidMessage"));
        let out = String::from_utf8(unread_fault(Version::V11, &e)).unwrap();
        assert!(
            out.contains("<detail><bb:invalidMessage xmlns:bb=\"urn:busbar:bpel\"/></detail>"),
            "{out}"
        );
        // Whitespace, comments and processing instructions between the parts are no text.
        let ok = env11("\n  <first>a</first> <!-- c --> <?pi x?>\n<last/>\n");
        assert!(decode_request(&i, None, ok.as_bytes()).is_ok());
        let b = binding(Style::Document, false);
        let i = iface(&d, Some(&b));
        let e = decode_request(&i, Some("urn:say"), env11("<first/>").as_bytes()).unwrap_err();
        assert_eq!(
            e.0,
            "part 'parameters' must be element {urn:hello}sayHello, found first"
        );
    }

    #[test]
    fn malformed_input_is_not_a_soap_envelope() {
        let d = defs();
        let i = iface(&d, None);
        for (body, want) in [
            (&b"hello"[..], "not a SOAP envelope: line 1"),
            (b"<a>", "not a SOAP envelope: line 1"),
            (
                b"\xff\xfe<",
                "not a SOAP envelope: the body is not UTF-8 text",
            ),
            (
                b"<Envelope/>",
                "not a SOAP envelope: the root element is Envelope",
            ),
            (
                b"<!DOCTYPE x [<!ENTITY a 'b'>]><x/>",
                "not a SOAP envelope: line 1",
            ),
        ] {
            let e = decode_request(&i, None, body).unwrap_err();
            assert!(
                e.0.starts_with(want),
                "{e} for {:?}",
                String::from_utf8_lossy(body)
            );
        }
        let e = decode_request(
            &i,
            None,
            format!(r#"<s:Envelope xmlns:s="{SOAP11_ENV}"/>"#).as_bytes(),
        )
        .unwrap_err();
        assert_eq!(e.0, "the SOAP envelope has no Body");
    }

    #[test]
    fn rpc_requests_unwrap_parts_by_name_and_replies_wrap_them_again() {
        let d = defs();
        let b = binding(Style::Rpc, false);
        let i = iface(&d, Some(&b));
        let body =
            env11(r#"<m:greet xmlns:m="urn:rpc"><last>Smith</last><first>Ann</first></m:greet>"#);
        let r = decode_request(&i, None, body.as_bytes()).unwrap();
        assert_eq!(r.operation, "greet");
        assert_eq!(
            xml(&r.message),
            "<message><first>Ann</first><last>Smith</last></message>"
        );
        let e = decode_request(
            &i,
            None,
            env11(r#"<m:greet xmlns:m="urn:rpc"><first/></m:greet>"#).as_bytes(),
        )
        .unwrap_err();
        assert_eq!(e.0, "part 'last' missing");
        let e = decode_request(
            &i,
            None,
            env11(r#"<m:greet xmlns:m="urn:other"/>"#).as_bytes(),
        )
        .unwrap_err();
        assert!(e.0.starts_with("no operation of port type"), "{e}");
        let reply = Doc::parse("<message><text>Hi &lt;Ann&gt;</text></message>").unwrap();
        let out = String::from_utf8(encode_reply(&i, Version::V11, "greet", &reply)).unwrap();
        assert!(
            out.ends_with(r#"<soapenv:Body><m:greetResponse xmlns:m="urn:rpc"><text>Hi &lt;Ann&gt;</text></m:greetResponse></soapenv:Body></soapenv:Envelope>"#),
            "{out}"
        );
    }

    #[test]
    fn soap12_requests_are_answered_in_soap12() {
        let d = defs();
        let b = binding(Style::Document, true);
        let i = iface(&d, Some(&b));
        let body = env12(r#"<sayHello xmlns="urn:hello"><toWhom>名前</toWhom></sayHello>"#);
        let r = decode_request(&i, None, body.as_bytes()).unwrap();
        assert_eq!(r.version, Version::V12);
        let reply = Doc::parse(
            r#"<message><parameters><sayHelloResponse xmlns="urn:hello">こんにちは</sayHelloResponse></parameters></message>"#,
        )
        .unwrap();
        let out = String::from_utf8(encode_reply(&i, r.version, "sayHello", &reply)).unwrap();
        assert_eq!(
            out,
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><env:Envelope xmlns:env="{SOAP12_ENV}"><env:Body><sayHelloResponse xmlns="urn:hello">こんにちは</sayHelloResponse></env:Body></env:Envelope>"#
            )
        );
        assert_eq!(
            Version::from_content_type(Some("application/soap+xml; action=x")),
            Version::V12
        );
        assert_eq!(Version::from_content_type(Some("text/xml")), Version::V11);
        assert_eq!(Version::from_content_type(None), Version::V11);
    }

    #[test]
    fn actions_come_from_the_header_or_the_content_type() {
        assert_eq!(
            soap_action(Some("\"urn:a\""), None).as_deref(),
            Some("urn:a")
        );
        assert_eq!(soap_action(Some("\"\""), Some("text/xml")), None);
        assert_eq!(
            soap_action(
                None,
                Some("application/soap+xml; charset=utf-8; action=\"urn:b\"")
            )
            .as_deref(),
            Some("urn:b")
        );
    }

    #[test]
    fn faults_carry_their_qname_text_and_data() {
        let data = Doc::parse(
            r#"<message><fault><b:badName xmlns:b="urn:hello">x &amp; y</b:badName></fault></message>"#,
        )
        .unwrap();
        let f = Fault {
            name: Name::new(NS, "badName").with_prefix("tns"),
            data: Some(Arc::new(data)),
            text: "bad <name>".into(),
        };
        let out = String::from_utf8(encode_fault(Version::V11, &f)).unwrap();
        assert!(
            out.contains(r#"<soapenv:Fault><faultcode xmlns:tns="urn:hello">tns:badName</faultcode><faultstring>bad &lt;name&gt;</faultstring><detail><b:badName xmlns:b="urn:hello">x &amp; y</b:badName></detail></soapenv:Fault>"#),
            "{out}"
        );
        let out = String::from_utf8(encode_fault(Version::V12, &f)).unwrap();
        assert!(
            out.contains(r#"<env:Code><env:Value>env:Receiver</env:Value><env:Subcode><env:Value xmlns:tns="urn:hello">tns:badName</env:Value></env:Subcode></env:Code><env:Reason><env:Text xml:lang="en">bad &lt;name&gt;</env:Text></env:Reason><env:Detail>"#),
            "{out}"
        );
        // An element as fault data is the detail's content; no data, no detail.
        let f = Fault {
            name: Name::new("", "plain"),
            data: Some(Arc::new(Doc::parse("<why>é</why>").unwrap())),
            text: String::new(),
        };
        let out = String::from_utf8(encode_fault(Version::V11, &f)).unwrap();
        assert!(
            out.contains("<faultcode>plain</faultcode><faultstring/><detail><why>é</why></detail>"),
            "{out}"
        );
        let f = Fault::standard("selectionFailure", "nothing selected");
        let out = String::from_utf8(encode_fault(Version::V11, &f)).unwrap();
        assert!(out.contains(">bpel:selectionFailure</faultcode>"), "{out}");
        assert!(!out.contains("detail"), "{out}");
    }

    #[test]
    fn busbar_client_side_faults_blame_the_sender() {
        let f = Fault::busbar("invalidMessage", "message lacks part 'x'");
        assert!(is_client_fault(&f));
        let out = String::from_utf8(encode_fault(Version::V11, &f)).unwrap();
        // SOAP 1.1: `Client`, with the fault's name as the detail's element.
        assert!(
            out.contains("<faultcode>soapenv:Client</faultcode><faultstring>message lacks part 'x'</faultstring><detail><bb:invalidMessage xmlns:bb=\"urn:busbar:bpel\"/></detail>"),
            "{out}"
        );
        let n = Fault::busbar("noMatchingInstance", "no instance waits");
        let out = String::from_utf8(encode_fault(Version::V11, &n)).unwrap();
        assert!(
            out.contains("<faultcode>soapenv:Client</faultcode><faultstring>no instance waits</faultstring><detail><bb:noMatchingInstance xmlns:bb=\"urn:busbar:bpel\"/></detail>"),
            "{out}"
        );
        let out = String::from_utf8(encode_fault(Version::V12, &f)).unwrap();
        assert!(out.contains("<env:Value>env:Sender</env:Value><env:Subcode><env:Value xmlns:bb=\"urn:busbar:bpel\">bb:invalidMessage</env:Value>"), "{out}");
        assert!(!is_client_fault(&Fault::busbar("instanceExpired", "late")));
        let out = String::from_utf8(client_fault(Version::V11, "not a SOAP envelope")).unwrap();
        assert!(out.contains("<faultcode>soapenv:Client</faultcode><faultstring>not a SOAP envelope</faultstring></soapenv:Fault>"), "{out}");
    }

    #[test]
    fn partner_requests_follow_the_binding_and_answers_become_messages() {
        let d = defs();
        let b = binding(Style::Document, false);
        let i = iface(&d, Some(&b));
        let msg = Doc::parse(r#"<message><parameters><sayHello xmlns="urn:hello"><toWhom>Ann</toWhom></sayHello></parameters></message>"#).unwrap();
        let req = encode_request(&i, "sayHello", &msg).unwrap();
        assert_eq!(req.soap_action_header().as_deref(), Some("\"urn:say\""));
        assert_eq!(req.content_type(), "text/xml; charset=utf-8");
        let body = String::from_utf8(req.body).unwrap();
        assert!(body.contains(r#"<soapenv:Body><sayHello xmlns="urn:hello"><toWhom>Ann</toWhom></sayHello></soapenv:Body>"#), "{body}");
        let answer =
            env11(r#"<h:sayHelloResponse xmlns:h="urn:hello">Hello Ann</h:sayHelloResponse>"#);
        match decode_response(&i, "sayHello", answer.as_bytes()).unwrap() {
            PartnerReply::Output(m) => assert_eq!(
                xml(&m),
                format!(
                    r#"<message><parameters><h:sayHelloResponse xmlns:h="urn:hello">Hello Ann</h:sayHelloResponse></parameters></message>"#
                )
            ),
            other => panic!("{other:?}"),
        }
        assert!(encode_request(&i, "nope", &msg).is_err());
        let wrong = env11("<other/>");
        let e = decode_response(&i, "sayHello", wrong.as_bytes()).unwrap_err();
        assert!(e.contains("does not fit operation 'sayHello'"), "{e}");
    }

    #[test]
    fn rpc_and_soap12_partner_calls() {
        let d = defs();
        let b = binding(Style::Rpc, true);
        let i = iface(&d, Some(&b));
        let msg = Doc::parse("<message><first>A</first><last>B</last></message>").unwrap();
        let req = encode_request(&i, "notify", &msg).unwrap();
        assert_eq!(req.version, Version::V12);
        assert_eq!(req.soap_action_header(), None);
        assert_eq!(
            req.content_type(),
            "application/soap+xml; charset=utf-8; action=\"urn:notify\""
        );
        let body = String::from_utf8(req.body).unwrap();
        assert!(
            body.contains(
                r#"<m:notify xmlns:m="urn:rpc"><first>A</first><last>B</last></m:notify>"#
            ),
            "{body}"
        );
        let answer =
            env12(r#"<m:greetResponse xmlns:m="urn:rpc"><text>AB</text></m:greetResponse>"#);
        match decode_response(&i, "greet", answer.as_bytes()).unwrap() {
            PartnerReply::Output(m) => assert_eq!(xml(&m), "<message><text>AB</text></message>"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partner_faults_are_wsdl_faults_when_their_detail_is_known() {
        let d = defs();
        let i = iface(&d, None);
        let known = env11(
            r#"<s:Fault><faultcode>s:Server</faultcode><faultstring>no</faultstring><detail><h:badName xmlns:h="urn:hello">Bob</h:badName></detail></s:Fault>"#,
        );
        match decode_response(&i, "sayHello", known.as_bytes()).unwrap() {
            PartnerReply::Fault { name, message } => {
                assert_eq!(name, "badName");
                assert_eq!(
                    xml(message.as_deref().unwrap()),
                    format!(
                        r#"<message><fault><h:badName xmlns:h="urn:hello">Bob</h:badName></fault></message>"#
                    )
                );
            }
            other => panic!("{other:?}"),
        }
        let unknown = env11(
            "<s:Fault><faultcode>s:Server</faultcode><faultstring>boom</faultstring></s:Fault>",
        );
        let e = decode_response(&i, "sayHello", unknown.as_bytes()).unwrap_err();
        assert_eq!(e, "the partner answered a SOAP fault: s:Server boom");
        let v12 = env12(
            r#"<e:Fault><e:Code><e:Value>e:Receiver</e:Value><e:Subcode><e:Value>x:oops</e:Value></e:Subcode></e:Code><e:Reason><e:Text xml:lang="en">bad</e:Text></e:Reason></e:Fault>"#,
        );
        let v12 = v12.replace("<e:Fault>", r#"<e:Fault xmlns:x="urn:x">"#);
        let e = decode_response(&i, "sayHello", v12.as_bytes()).unwrap_err();
        assert_eq!(e, "the partner answered a SOAP fault: x:oops bad");
        let e = decode_response(&i, "sayHello", b"<html>502</html>").unwrap_err();
        assert!(e.starts_with("not a SOAP envelope"), "{e}");
    }
}
