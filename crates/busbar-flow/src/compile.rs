//! `.bpel` file → [`Process`]: every construct checked against the supported subset, every
//! name resolved, every expression compiled. Anything outside the subset is a problem naming
//! the file, the line and the construct.

use std::path::Path;
use std::sync::Arc;

use crate::model::*;
use crate::wsdl::Definitions;
use crate::xml::{Doc, Kind, Name, NodeId};
use crate::xpath::{Env, XPath};
use crate::{DeployError, Problems};

const XPATH1: &str = "urn:oasis:names:tc:wsbpel:2.0:sublang:xpath1.0";
const XPATH2: &str = "urn:oasis:names:tc:wsbpel:2.0:sublang:xpath2.0";

/// Whether `name`/`arity` is a BPEL extension function we provide.
pub fn is_bpel_function(name: &Name, arity: usize) -> bool {
    (name.ns == BPEL_NS || name.ns == BPEL_2004_NS)
        && ((name.local == "getVariableProperty" && arity == 2)
            || (name.local == "getVariableData" && (1..=3).contains(&arity)))
}

#[derive(Default)]
struct FrameCx {
    vars: Vec<(String, VarKind)>,
    corrs: Vec<(String, Vec<Name>, usize)>,
}

struct Compiler<'a> {
    doc: &'a Doc,
    file: &'a Path,
    bpel: String,
    defs: Definitions,
    frames: Vec<FrameCx>,
    partner_links: Vec<PartnerLinkDef>,
    receives: Vec<ReceiveDef>,
    next_corr: usize,
    problems: &'a mut Problems,
}

/// Reads and compiles `file` (its WSDL imports relative to it).
pub fn compile(file: &Path, problems: &mut Problems) -> Option<Process> {
    let text = match crate::read_source(file) {
        Ok(t) => t,
        Err(why) => {
            problems.push(DeployError::new(file, 0, why));
            return None;
        }
    };
    let doc = match Doc::parse(&text) {
        Ok(d) => d,
        Err(e) => {
            problems.push(DeployError::new(file, e.line, e.message));
            return None;
        }
    };
    let root = doc.root_element()?;
    let rname = doc.name(root)?.clone();
    if rname.local != "process" || (rname.ns != BPEL_NS && rname.ns != BPEL_2004_NS) {
        problems.push(DeployError::new(
            file,
            doc.line(root),
            format!("not a WS-BPEL 2.0 process (root element {})", rname.clark()),
        ));
        return None;
    }
    let before = problems.len();
    let mut c = Compiler {
        doc: &doc,
        file,
        bpel: rname.ns.clone(),
        defs: Definitions::default(),
        frames: Vec::new(),
        partner_links: Vec::new(),
        receives: Vec::new(),
        next_corr: 0,
        problems,
    };
    let process = c.process(root);
    if c.problems.len() > before {
        return None;
    }
    process
}

impl<'a> Compiler<'a> {
    fn err(&mut self, at: NodeId, message: impl Into<String>) {
        self.problems.push(DeployError::new(
            self.file,
            self.doc.line(at),
            message.into(),
        ));
    }

    fn is_bpel(&self, n: NodeId) -> bool {
        self.doc.name(n).is_some_and(|x| x.ns == self.bpel)
    }

    fn local(&self, n: NodeId) -> &str {
        self.doc.name(n).map(|x| x.local.as_str()).unwrap_or("")
    }

    fn attr(&self, n: NodeId, a: &str) -> Option<&'a str> {
        self.doc.attr(n, "", a)
    }

    fn qattr(&mut self, n: NodeId, a: &str) -> Option<Name> {
        let v = self.attr(n, a)?;
        match self.doc.resolve_qname(n, v, false) {
            Some(q) => Some(q),
            None => {
                self.err(n, format!("{a}=\"{v}\": the prefix is not bound"));
                None
            }
        }
    }

    /// The BPEL children, skipping documentation and refusing foreign elements.
    fn kids(&mut self, n: NodeId) -> Vec<NodeId> {
        let mut out = Vec::new();
        for c in self.doc.child_elements(n).collect::<Vec<_>>() {
            if !self.is_bpel(c) {
                let nm = self.doc.name(c).map(|x| x.clark()).unwrap_or_default();
                self.err(c, format!("extension element {nm} is not supported"));
                continue;
            }
            if self.local(c) == "documentation" {
                continue;
            }
            out.push(c);
        }
        out
    }

    fn yes(&self, n: NodeId, a: &str) -> bool {
        matches!(self.attr(n, a), Some("yes") | Some("true"))
    }

    fn check_language(&mut self, n: NodeId) {
        for a in ["queryLanguage", "expressionLanguage"] {
            if let Some(l) = self.attr(n, a) {
                if l != XPATH1 && l != XPATH2 {
                    self.err(n, format!("{a} '{l}' is not supported (XPath 1.0 only)"));
                }
            }
        }
    }

    fn process(&mut self, root: NodeId) -> Option<Process> {
        let before = self.problems.len();
        self.check_language(root);
        let tns = self.attr(root, "targetNamespace").unwrap_or("");
        let name = Name::new(tns, self.attr(root, "name").unwrap_or(""));
        for k in self.kids(root) {
            if self.local(k) == "import" {
                let it = self.attr(k, "importType").unwrap_or("");
                let loc = self.attr(k, "location");
                if it == crate::wsdl::WSDL_NS {
                    if let Some(loc) = loc {
                        let f = self.file.parent().unwrap_or(Path::new(".")).join(loc);
                        let from = (self.file, self.doc.line(k));
                        self.defs.read(&f, from, self.problems);
                    }
                } else if it != "http://www.w3.org/2001/XMLSchema" {
                    self.err(k, format!("import of type '{it}' is not supported"));
                }
            }
        }
        self.frames.push(FrameCx::default());
        let mut frame = FrameDef::default();
        let mut handlers = FaultHandlers::default();
        let mut activity = None;
        for k in self.kids(root) {
            match self.local(k) {
                "import" => {}
                "partnerLinks" => self.partner_links(k),
                "messageExchanges" => {}
                "variables" => self.variables(k, &mut frame),
                "correlationSets" => self.correlation_sets(k, &mut frame),
                "faultHandlers" => handlers = self.fault_handlers(k),
                "extensions" => self.err(k, "<extensions> are not supported"),
                "eventHandlers" | "compensationHandler" | "terminationHandler" => {
                    self.err(k, format!("<{}> is not supported", self.local(k)))
                }
                _ if activity.is_none() => activity = self.activity(k),
                other => {
                    let o = other.to_string();
                    self.err(k, format!("<{o}>: a process holds one activity"))
                }
            }
        }
        self.frames.pop();
        let Some(activity) = activity else {
            if self.problems.len() == before {
                self.err(root, "the process has no activity");
            }
            return None;
        };
        if !self.receives.iter().any(|r| r.create_instance) {
            self.err(
                root,
                "no receive or pick with createInstance=\"yes\": the process can never start",
            );
        }
        Some(Process {
            name,
            file: self.file.to_path_buf(),
            defs: std::mem::take(&mut self.defs),
            partner_links: std::mem::take(&mut self.partner_links),
            root: ScopeDef {
                frame,
                handlers,
                activity: Box::new(activity),
                exit_on_standard_fault: self.yes(root, "exitOnStandardFault"),
            },
            receives: std::mem::take(&mut self.receives),
        })
    }

    fn partner_links(&mut self, n: NodeId) {
        for p in self.kids(n) {
            let name = self.attr(p, "name").unwrap_or("").to_string();
            let Some(plt) = self.qattr(p, "partnerLinkType") else {
                self.err(p, format!("partnerLink '{name}' has no partnerLinkType"));
                continue;
            };
            let Some(t) = self.defs.partner_link_type(&plt).cloned() else {
                self.err(p, format!("partnerLinkType {} is not defined", plt.clark()));
                continue;
            };
            let role = |r: Option<&str>| -> Option<Option<Name>> {
                match r {
                    None => Some(None),
                    Some(r) => t
                        .roles
                        .iter()
                        .find(|(n, _)| n == r)
                        .map(|(_, pt)| Some(pt.clone())),
                }
            };
            let my = role(self.attr(p, "myRole"));
            let partner = role(self.attr(p, "partnerRole"));
            match (my, partner) {
                (Some(my), Some(partner)) => self.partner_links.push(PartnerLinkDef {
                    name,
                    my_port_type: my,
                    partner_port_type: partner,
                }),
                _ => self.err(
                    p,
                    format!("partnerLink '{name}': role not in {}", plt.clark()),
                ),
            }
        }
    }

    fn var_kind(&mut self, v: NodeId) -> Option<VarKind> {
        if let Some(m) = self.qattr(v, "messageType") {
            if self.defs.message(&m).is_none() {
                self.err(v, format!("message type {} is not defined", m.clark()));
                return None;
            }
            return Some(VarKind::Message(m));
        }
        if let Some(e) = self.qattr(v, "element") {
            return Some(VarKind::Element(e));
        }
        if let Some(t) = self.qattr(v, "type") {
            return Some(VarKind::Type(t));
        }
        self.err(v, "a variable needs messageType, element or type");
        None
    }

    fn variables(&mut self, n: NodeId, frame: &mut FrameDef) {
        for v in self.kids(n) {
            let name = self.attr(v, "name").unwrap_or("").to_string();
            let Some(kind) = self.var_kind(v) else {
                continue;
            };
            if name.is_empty() || name.contains('.') {
                self.err(v, format!("invalid variable name '{name}'"));
                continue;
            }
            let init = match self.kids(v).first().copied() {
                Some(f) if self.local(f) == "from" => self.from(f),
                Some(f) => {
                    self.err(f, format!("<{}> in a variable", self.local(f)));
                    None
                }
                None => None,
            };
            if let Some(top) = self.frames.last_mut() {
                if top.vars.iter().any(|(x, _)| *x == name) {
                    self.err(v, format!("variable '{name}' declared twice"));
                    continue;
                }
                top.vars.push((name.clone(), kind.clone()));
            }
            frame.vars.push(VarDecl { name, kind, init });
        }
    }

    fn correlation_sets(&mut self, n: NodeId, frame: &mut FrameDef) {
        for c in self.kids(n) {
            let name = self.attr(c, "name").unwrap_or("").to_string();
            let mut props = Vec::new();
            for p in self.attr(c, "properties").unwrap_or("").split_whitespace() {
                match self.doc.resolve_qname(c, p, false) {
                    Some(q) if self.defs.properties.contains_key(&q) => props.push(q),
                    Some(q) => self.err(c, format!("property {} is not defined", q.clark())),
                    None => self.err(c, format!("property '{p}': the prefix is not bound")),
                }
            }
            let id = self.next_corr;
            self.next_corr += 1;
            if let Some(top) = self.frames.last_mut() {
                top.corrs.push((name.clone(), props.clone(), id));
            }
            frame.corrs.push(CorrDecl {
                name,
                properties: props,
                id,
            });
        }
    }

    fn var_ref(&mut self, at: NodeId, name: &str) -> Option<VarRef> {
        for (hops, f) in self.frames.iter().rev().enumerate() {
            if let Some(i) = f.vars.iter().position(|(n, _)| n == name) {
                return Some(VarRef {
                    name: name.to_string(),
                    hops: hops as u16,
                    index: i as u16,
                    kind: f.vars[i].1.clone(),
                });
            }
        }
        self.err(at, format!("variable '{name}' is not declared"));
        None
    }

    fn corr_ref(&mut self, at: NodeId, name: &str) -> Option<CorrRef> {
        for (hops, f) in self.frames.iter().rev().enumerate() {
            if let Some(i) = f.corrs.iter().position(|(n, _, _)| n == name) {
                return Some(CorrRef {
                    name: name.to_string(),
                    hops: hops as u16,
                    index: i as u16,
                    id: f.corrs[i].2,
                    properties: f.corrs[i].1.clone(),
                });
            }
        }
        self.err(at, format!("correlation set '{name}' is not declared"));
        None
    }

    fn expr_text(&mut self, at: NodeId, text: &str) -> Option<Expr> {
        let doc = self.doc;
        let ns = move |p: &str| doc.lookup_ns(at, p).map(str::to_string);
        let ext = |n: &Name, a: usize| is_bpel_function(n, a);
        let xpath = match XPath::compile(
            text.trim(),
            &Env {
                ns: &ns,
                extension: &ext,
            },
        ) {
            Ok(x) => x,
            Err(e) => {
                self.err(at, format!("expression '{}': {e}", text.trim()));
                return None;
            }
        };
        let mut vars = Vec::new();
        for v in xpath.variables() {
            let (var, part) = match v.split_once('.') {
                Some((a, b)) => (a.to_string(), Some(b.to_string())),
                None => (v.clone(), None),
            };
            let r = self.var_ref(at, &var)?;
            if let Some(p) = &part {
                self.check_part(at, &r, p);
            }
            vars.push((v, r, part));
        }
        Some(Expr {
            xpath,
            vars,
            ns: self.doc.namespaces_in_scope(at),
            line: self.doc.line(at),
        })
    }

    fn expr(&mut self, at: NodeId) -> Option<Expr> {
        self.check_language(at);
        let text = self.doc.string_value(at);
        self.expr_text(at, &text)
    }

    fn check_part(&mut self, at: NodeId, var: &VarRef, part: &str) {
        match &var.kind {
            VarKind::Message(m) => {
                if self.defs.message(m).and_then(|m| m.part(part)).is_none() {
                    self.err(
                        at,
                        format!("message type {} has no part '{part}'", m.clark()),
                    );
                }
            }
            _ => self.err(
                at,
                format!(
                    "variable '{}' is not a message: it has no part '{part}'",
                    var.name
                ),
            ),
        }
    }

    fn from(&mut self, f: NodeId) -> Option<From> {
        self.check_language(f);
        let kids = self.kids(f);
        if let Some(var) = self.attr(f, "variable") {
            let var = self.var_ref(f, var)?;
            if let Some(p) = self.qattr(f, "property") {
                return Some(From::Property { var, property: p });
            }
            let part = self.attr(f, "part").map(str::to_string);
            if let Some(p) = &part {
                self.check_part(f, &var, p);
            }
            let query = match kids.iter().find(|k| self.local(**k) == "query") {
                Some(q) => Some(self.expr(*q)?),
                None => None,
            };
            return Some(From::Var { var, part, query });
        }
        if self.attr(f, "partnerLink").is_some() {
            self.err(
                f,
                "<from partnerLink> (endpoint references) is not supported",
            );
            return None;
        }
        if let Some(l) = kids.iter().find(|k| self.local(**k) == "literal") {
            let mut d = Doc::new();
            let holder = d.append_element(crate::xml::NodeId::ROOT, Name::new("", "literal"));
            for c in self.doc.children(*l) {
                if !matches!(self.doc.kind(*c), Kind::Comment(_) | Kind::Pi { .. }) {
                    d.append_copy(holder, self.doc, *c);
                }
            }
            return Some(From::Literal(Arc::new(d)));
        }
        if !kids.is_empty() {
            self.err(f, "unsupported <from> form");
            return None;
        }
        Some(From::Expr(self.expr(f)?))
    }

    fn to(&mut self, t: NodeId) -> Option<To> {
        self.check_language(t);
        let kids = self.kids(t);
        if let Some(var) = self.attr(t, "variable") {
            let var = self.var_ref(t, var)?;
            if let Some(p) = self.qattr(t, "property") {
                return Some(To::Property { var, property: p });
            }
            let part = self.attr(t, "part").map(str::to_string);
            if let Some(p) = &part {
                self.check_part(t, &var, p);
            }
            let query = match kids.iter().find(|k| self.local(**k) == "query") {
                Some(q) => Some(self.expr(*q)?),
                None => None,
            };
            return Some(To::Var { var, part, query });
        }
        if self.attr(t, "partnerLink").is_some() {
            self.err(t, "<to partnerLink> (endpoint references) is not supported");
            return None;
        }
        // `$var`, `$var.part` and `$var.part/path` write like `variable`/`part`/`query`, so
        // an uninitialised variable is created as it is for those.
        let text = self.doc.string_value(t);
        if let Some((var, part, rest)) = split_var_path(text.trim()) {
            let var = self.var_ref(t, var)?;
            if let Some(p) = part {
                self.check_part(t, &var, p);
            }
            let query = match rest {
                Some(r) => Some(self.expr_text(t, &r)?),
                None => None,
            };
            return Some(To::Var {
                var,
                part: part.map(str::to_string),
                query,
            });
        }
        let e = self.expr(t)?;
        if !e.xpath.is_path() || e.vars.is_empty() {
            self.err(
                t,
                format!(
                    "<to> expression '{}' must be a path from a variable",
                    e.xpath.text()
                ),
            );
            return None;
        }
        Some(To::Expr(e))
    }

    fn fault_handlers(&mut self, n: NodeId) -> FaultHandlers {
        let mut h = FaultHandlers::default();
        for c in self.kids(n) {
            match self.local(c) {
                "catch" => {
                    let fault = self.qattr(c, "faultName");
                    let mut var = None;
                    if let Some(v) = self.attr(c, "faultVariable") {
                        let kind = if let Some(m) = self.qattr(c, "faultMessageType") {
                            VarKind::Message(m)
                        } else if let Some(e) = self.qattr(c, "faultElement") {
                            VarKind::Element(e)
                        } else {
                            self.err(c, "faultVariable needs faultMessageType or faultElement");
                            continue;
                        };
                        var = Some((
                            FrameDef {
                                vars: vec![VarDecl {
                                    name: v.to_string(),
                                    kind: kind.clone(),
                                    init: None,
                                }],
                                corrs: Vec::new(),
                            },
                            kind,
                        ));
                    }
                    // A handler runs in a frame of its own (holding the fault variable, if
                    // any), as the runtime does.
                    self.frames.push(FrameCx {
                        vars: var
                            .iter()
                            .map(|(f, _)| (f.vars[0].name.clone(), f.vars[0].kind.clone()))
                            .collect(),
                        corrs: Vec::new(),
                    });
                    let act = self.single(c);
                    self.frames.pop();
                    if let Some(act) = act {
                        h.catches.push(Catch {
                            fault,
                            var,
                            activity: Box::new(act),
                        });
                    }
                }
                "catchAll" => {
                    self.frames.push(FrameCx::default());
                    let act = self.single(c);
                    self.frames.pop();
                    if let Some(a) = act {
                        h.catch_all = Some(Box::new(a));
                    }
                }
                "correlations" | "toParts" | "fromParts" | "targets" | "sources" => {}
                other => {
                    let o = other.to_string();
                    self.err(c, format!("<{o}> in faultHandlers"))
                }
            }
        }
        h
    }

    /// The one activity inside a container element.
    fn single(&mut self, n: NodeId) -> Option<Activity> {
        let kids = self.kids(n);
        match kids.as_slice() {
            [one] => self.activity(*one),
            [] => {
                self.err(n, format!("<{}> holds no activity", self.local(n)));
                None
            }
            _ => {
                self.err(
                    n,
                    format!("<{}> holds more than one activity", self.local(n)),
                );
                None
            }
        }
    }

    fn scope_body(&mut self, n: NodeId, mut frame: FrameDef) -> Option<ScopeDef> {
        let mut handlers = FaultHandlers::default();
        let mut activity = None;
        self.frames.push(FrameCx {
            vars: frame
                .vars
                .iter()
                .map(|v| (v.name.clone(), v.kind.clone()))
                .collect(),
            corrs: Vec::new(),
        });
        for k in self.kids(n) {
            match self.local(k) {
                "variables" => self.variables(k, &mut frame),
                "correlationSets" => self.correlation_sets(k, &mut frame),
                "faultHandlers" => handlers = self.fault_handlers(k),
                "partnerLinks" => {
                    self.err(k, "partner links declared in a scope are not supported")
                }
                "messageExchanges" => {}
                "eventHandlers" | "compensationHandler" | "terminationHandler" => {
                    let o = self.local(k).to_string();
                    self.err(k, format!("<{o}> is not supported"))
                }
                _ if activity.is_none() => activity = self.activity(k),
                other => {
                    let o = other.to_string();
                    self.err(k, format!("<{o}>: a scope holds one activity"))
                }
            }
        }
        self.frames.pop();
        let activity = activity?;
        Some(ScopeDef {
            frame,
            handlers,
            activity: Box::new(activity),
            exit_on_standard_fault: self.yes(n, "exitOnStandardFault"),
        })
    }

    fn correlations(&mut self, n: NodeId, invoke: bool) -> Vec<CorrUse> {
        let mut out = Vec::new();
        for cs in self.kids(n) {
            if self.local(cs) != "correlations" {
                continue;
            }
            for c in self.kids(cs) {
                let set = self.attr(c, "set").unwrap_or("").to_string();
                let Some(set) = self.corr_ref(c, &set) else {
                    continue;
                };
                let initiate = match self.attr(c, "initiate").unwrap_or("no") {
                    "yes" => Initiate::Yes,
                    "join" => Initiate::Join,
                    "no" => Initiate::No,
                    x => {
                        self.err(c, format!("initiate=\"{x}\""));
                        Initiate::No
                    }
                };
                let pattern = if invoke {
                    match self.attr(c, "pattern") {
                        Some("request") | Some("out") => Some(Pattern::Request),
                        Some("response") | Some("in") => Some(Pattern::Response),
                        Some("request-response") | Some("out-in") => Some(Pattern::RequestResponse),
                        _ => Some(Pattern::Request),
                    }
                } else {
                    None
                };
                out.push(CorrUse {
                    set,
                    initiate,
                    pattern,
                });
            }
        }
        out
    }

    fn operation(
        &mut self,
        n: NodeId,
        pl: &str,
        mine: bool,
    ) -> Option<(usize, Name, crate::wsdl::Operation)> {
        let Some(i) = self.partner_links.iter().position(|p| p.name == pl) else {
            self.err(n, format!("partner link '{pl}' is not declared"));
            return None;
        };
        let pt = if mine {
            self.partner_links[i].my_port_type.clone()
        } else {
            self.partner_links[i].partner_port_type.clone()
        };
        let Some(pt) = pt else {
            let r = if mine { "myRole" } else { "partnerRole" };
            self.err(n, format!("partner link '{pl}' has no {r}"));
            return None;
        };
        let op = self.attr(n, "operation").unwrap_or("");
        let Some(port_type) = self.defs.port_type(&pt) else {
            self.err(n, format!("port type {} is not defined", pt.clark()));
            return None;
        };
        match port_type.operation(op) {
            Some(o) => Some((i, pt, o.clone())),
            None => {
                self.err(
                    n,
                    format!("port type {} has no operation '{op}'", pt.clark()),
                );
                None
            }
        }
    }

    fn receive_def(&mut self, n: NodeId, create: bool) -> Option<ReceiveDef> {
        if self.kids(n).iter().any(|k| self.local(*k) == "fromParts") {
            self.err(n, "<fromParts> is not supported");
        }
        let pl = self.attr(n, "partnerLink").unwrap_or("").to_string();
        let (i, _, op) = self.operation(n, &pl, true)?;
        let variable = match self.attr(n, "variable") {
            Some(v) => Some(self.var_ref(n, v)?),
            None => None,
        };
        let input = op.input.clone()?;
        if let Some(VarRef {
            kind: VarKind::Message(m),
            name,
            ..
        }) = &variable
        {
            if !m.is(&input.ns, &input.local) {
                self.err(
                    n,
                    format!(
                        "variable '{name}' is a {} but operation '{}' receives {}",
                        m.clark(),
                        op.name,
                        input.clark()
                    ),
                );
            }
        }
        let correlations = self.correlations(n, false);
        let def = ReceiveDef {
            partner_link: i,
            operation: op.name.clone(),
            variable,
            correlations,
            create_instance: create,
            message_exchange: self.attr(n, "messageExchange").map(str::to_string),
            message_type: input,
            one_way: !op.is_sync(),
        };
        self.receives.push(def.clone());
        Some(def)
    }

    fn timer(&mut self, n: NodeId) -> Option<Timer> {
        let kids = self.kids(n);
        let f = kids.iter().find(|k| self.local(**k) == "for").copied();
        let u = kids.iter().find(|k| self.local(**k) == "until").copied();
        match (f, u) {
            (Some(f), None) => Some(Timer::For(self.expr(f)?)),
            (None, Some(u)) => Some(Timer::Until(self.expr(u)?)),
            _ => {
                self.err(n, "a timer needs exactly one of <for> or <until>");
                None
            }
        }
    }

    fn activity(&mut self, n: NodeId) -> Option<Activity> {
        let line = self.doc.line(n);
        let name = self.attr(n, "name").map(str::to_string);
        for k in self.kids(n) {
            if matches!(self.local(k), "targets" | "sources") {
                self.err(
                    k,
                    format!("<{}> (flow links) is not supported", self.local(k)),
                );
            }
        }
        let act = match self.local(n) {
            "empty" => Act::Empty,
            "sequence" => {
                let mut v = Vec::new();
                for k in self.kids(n) {
                    if matches!(self.local(k), "targets" | "sources") {
                        continue;
                    }
                    v.push(self.activity(k)?);
                }
                Act::Sequence(v)
            }
            "flow" => {
                let mut v = Vec::new();
                for k in self.kids(n) {
                    match self.local(k) {
                        "links" => self.err(k, "<links> in a flow is not supported"),
                        "targets" | "sources" => {}
                        _ => v.push(self.activity(k)?),
                    }
                }
                Act::Flow(v)
            }
            "receive" => {
                let create = self.yes(n, "createInstance");
                Act::Receive(Box::new(self.receive_def(n, create)?))
            }
            "reply" => {
                if self.kids(n).iter().any(|k| self.local(*k) == "toParts") {
                    self.err(n, "<toParts> is not supported");
                }
                let pl = self.attr(n, "partnerLink").unwrap_or("").to_string();
                let (i, _, op) = self.operation(n, &pl, true)?;
                if !op.is_sync() {
                    self.err(n, format!("reply to one-way operation '{}'", op.name));
                }
                let variable = match self.attr(n, "variable") {
                    Some(v) => Some(self.var_ref(n, v)?),
                    None => None,
                };
                Act::Reply {
                    partner_link: i,
                    operation: op.name.clone(),
                    variable,
                    fault: self.qattr(n, "faultName"),
                    message_exchange: self.attr(n, "messageExchange").map(str::to_string),
                }
            }
            "invoke" => return self.invoke(n, name, line),
            "assign" => {
                if self.yes(n, "validate") {
                    self.err(n, "assign validate=\"yes\" is not supported");
                }
                let mut copies = Vec::new();
                for c in self.kids(n) {
                    match self.local(c) {
                        "copy" => {
                            let ks = self.kids(c);
                            let f = ks.iter().find(|k| self.local(**k) == "from").copied();
                            let t = ks.iter().find(|k| self.local(**k) == "to").copied();
                            let (Some(f), Some(t)) = (f, t) else {
                                self.err(c, "a copy needs <from> and <to>");
                                continue;
                            };
                            let (Some(from), Some(to)) = (self.from(f), self.to(t)) else {
                                continue;
                            };
                            copies.push(Copy {
                                from,
                                to,
                                keep_src_element_name: self.yes(c, "keepSrcElementName"),
                                ignore_missing_from_data: self.yes(c, "ignoreMissingFromData"),
                                line: self.doc.line(c),
                            });
                        }
                        "targets" | "sources" => {}
                        other => {
                            let o = other.to_string();
                            self.err(c, format!("<{o}> in assign is not supported"))
                        }
                    }
                }
                Act::Assign(copies)
            }
            "if" | "switch" => {
                let mut branches = Vec::new();
                let mut otherwise = None;
                let mut cond = None;
                for k in self.kids(n) {
                    match self.local(k) {
                        "condition" => cond = Some(self.expr(k)?),
                        "elseif" => {
                            let ks = self.kids(k);
                            let c = ks.iter().find(|x| self.local(**x) == "condition").copied();
                            let a = ks.iter().find(|x| self.local(**x) != "condition").copied();
                            let (Some(c), Some(a)) = (c, a) else {
                                self.err(k, "elseif needs a condition and an activity");
                                continue;
                            };
                            let c = self.expr(c)?;
                            branches.push((c, self.activity(a)?));
                        }
                        "else" => otherwise = Some(Box::new(self.single(k)?)),
                        "targets" | "sources" => {}
                        _ => {
                            let Some(c) = cond.take() else {
                                self.err(k, "if: the activity must follow <condition>");
                                continue;
                            };
                            let a = self.activity(k)?;
                            branches.insert(0, (c, a));
                        }
                    }
                }
                if branches.is_empty() {
                    self.err(n, "if without condition and activity");
                    return None;
                }
                Act::If(branches, otherwise)
            }
            "while" => {
                let ks = self.kids(n);
                let c = ks.iter().find(|x| self.local(**x) == "condition").copied();
                let a = ks.iter().find(|x| self.local(**x) != "condition").copied();
                let (Some(c), Some(a)) = (c, a) else {
                    self.err(n, "while needs a condition and an activity");
                    return None;
                };
                Act::While(self.expr(c)?, Box::new(self.activity(a)?))
            }
            "repeatUntil" => {
                let ks = self.kids(n);
                let c = ks.iter().find(|x| self.local(**x) == "condition").copied();
                let a = ks.iter().find(|x| self.local(**x) != "condition").copied();
                let (Some(c), Some(a)) = (c, a) else {
                    self.err(n, "repeatUntil needs an activity and a condition");
                    return None;
                };
                let body = self.activity(a)?;
                Act::RepeatUntil(Box::new(body), self.expr(c)?)
            }
            "forEach" => {
                let counter = self.attr(n, "counterName").unwrap_or("").to_string();
                let parallel = self.yes(n, "parallel");
                let ks = self.kids(n);
                let find = |s: &Self, l: &str| ks.iter().find(|x| s.local(**x) == l).copied();
                let (Some(sv), Some(fv), Some(sc)) = (
                    find(self, "startCounterValue"),
                    find(self, "finalCounterValue"),
                    find(self, "scope"),
                ) else {
                    self.err(
                        n,
                        "forEach needs startCounterValue, finalCounterValue and scope",
                    );
                    return None;
                };
                let start = self.expr(sv)?;
                let end = self.expr(fv)?;
                let completion = match find(self, "completionCondition") {
                    Some(cc) => {
                        let b = self.kids(cc).first().copied();
                        match b {
                            Some(b) => {
                                let only = self.yes(b, "successfulBranchesOnly");
                                Some((self.expr(b)?, only))
                            }
                            None => None,
                        }
                    }
                    None => None,
                };
                let frame = FrameDef {
                    vars: vec![VarDecl {
                        name: counter,
                        kind: VarKind::Type(Name::new(XSD_NS, "unsignedInt")),
                        init: None,
                    }],
                    corrs: Vec::new(),
                };
                let scope = self.scope_body(sc, frame)?;
                Act::ForEach(Box::new(ForEachDef {
                    parallel,
                    start,
                    end,
                    completion,
                    scope,
                }))
            }
            "scope" => {
                if self.yes(n, "isolated") {
                    self.err(n, "isolated scopes are not supported");
                }
                Act::Scope(Box::new(self.scope_body(n, FrameDef::default())?))
            }
            "throw" => {
                let Some(fault) = self.qattr(n, "faultName") else {
                    self.err(n, "throw needs faultName");
                    return None;
                };
                let variable = match self.attr(n, "faultVariable") {
                    Some(v) => Some(self.var_ref(n, v)?),
                    None => None,
                };
                Act::Throw { fault, variable }
            }
            "rethrow" => Act::Rethrow,
            "exit" | "terminate" => Act::Exit,
            "wait" => Act::Wait(self.timer(n)?),
            "pick" => {
                let create = self.yes(n, "createInstance");
                let mut on_message = Vec::new();
                let mut on_alarm = Vec::new();
                for k in self.kids(n) {
                    match self.local(k) {
                        "onMessage" => {
                            let r = self.receive_def(k, create)?;
                            let a = self
                                .kids(k)
                                .into_iter()
                                .find(|x| !matches!(self.local(*x), "correlations" | "fromParts"));
                            let Some(a) = a else {
                                self.err(k, "onMessage holds no activity");
                                continue;
                            };
                            on_message.push((r, self.activity(a)?));
                        }
                        "onAlarm" => {
                            let t = self.timer(k)?;
                            let a = self
                                .kids(k)
                                .into_iter()
                                .find(|x| !matches!(self.local(*x), "for" | "until"));
                            let Some(a) = a else {
                                self.err(k, "onAlarm holds no activity");
                                continue;
                            };
                            on_alarm.push((t, self.activity(a)?));
                        }
                        "targets" | "sources" => {}
                        other => {
                            let o = other.to_string();
                            self.err(k, format!("<{o}> in pick"))
                        }
                    }
                }
                if on_message.is_empty() {
                    self.err(n, "pick needs at least one onMessage");
                    return None;
                }
                if create && !on_alarm.is_empty() {
                    self.err(n, "a pick that creates the instance cannot have onAlarm");
                }
                Act::Pick(Box::new(PickDef {
                    create_instance: create,
                    on_message,
                    on_alarm,
                }))
            }
            other => {
                let o = other.to_string();
                self.err(n, format!("<{o}> is not supported"));
                return None;
            }
        };
        Some(Activity { act, name, line })
    }

    fn invoke(&mut self, n: NodeId, name: Option<String>, line: u32) -> Option<Activity> {
        let pl = self.attr(n, "partnerLink").unwrap_or("").to_string();
        let (i, pt, op) = self.operation(n, &pl, false)?;
        for k in self.kids(n) {
            if matches!(self.local(k), "toParts" | "fromParts") {
                self.err(k, format!("<{}> is not supported", self.local(k)));
            }
            if self.local(k) == "compensationHandler" {
                self.err(k, "<compensationHandler> is not supported");
            }
        }
        let input = match self.attr(n, "inputVariable") {
            Some(v) => Some(self.var_ref(n, v)?),
            None => None,
        };
        let output = match self.attr(n, "outputVariable") {
            Some(v) => Some(self.var_ref(n, v)?),
            None => None,
        };
        if op.is_sync() && output.is_none() {
            self.err(
                n,
                format!(
                    "invoke of request-response '{}' needs outputVariable",
                    op.name
                ),
            );
        }
        if !op.is_sync() && output.is_some() {
            self.err(
                n,
                format!("invoke of one-way '{}' has an outputVariable", op.name),
            );
        }
        let correlations = self.correlations(n, true);
        let def = InvokeDef {
            partner_link: i,
            port_type: pt,
            operation: op.name.clone(),
            input,
            output,
            correlations,
            input_type: op.input.clone(),
            output_type: op.output.clone(),
        };
        let inv = Activity {
            act: Act::Invoke(Box::new(def)),
            name: name.clone(),
            line,
        };
        // Inline catch/catchAll: an implicit scope around the invoke.
        let ks = self.kids(n);
        if ks
            .iter()
            .any(|k| matches!(self.local(*k), "catch" | "catchAll"))
        {
            let handlers = self.fault_handlers(n);
            return Some(Activity {
                act: Act::Scope(Box::new(ScopeDef {
                    frame: FrameDef::default(),
                    handlers,
                    activity: Box::new(inv),
                    exit_on_standard_fault: false,
                })),
                name,
                line,
            });
        }
        Some(inv)
    }
}

/// `$name`, `$name.part` or either followed by a `/path`: (name, part, path relative to it).
fn split_var_path(text: &str) -> Option<(&str, Option<&str>, Option<String>)> {
    let body = text.strip_prefix('$')?;
    let end = body
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(body.len());
    let (name, rest) = body.split_at(end);
    let (var, part) = match name.split_once('.') {
        Some((v, p)) => (v, Some(p)),
        None => (name, None),
    };
    if var.is_empty() || part.is_some_and(|p| p.is_empty() || p.contains('.')) {
        return None;
    }
    let rest = rest.trim();
    if rest.is_empty() {
        return Some((var, part, None));
    }
    if rest.starts_with("//") {
        return Some((var, part, Some(format!(".{rest}"))));
    }
    let path = rest.strip_prefix('/')?;
    if path.is_empty() || path.contains('|') {
        return None;
    }
    Some((var, part, Some(path.to_string())))
}
